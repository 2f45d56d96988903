/*
 * Kernel registry (design §4, style §7): a static table keyed by
 * (op, weight/cache format, shape class, minimum SM) naming the PTX entry of
 * each kernel. At load every embedded PTX module is JIT-compiled once and
 * every entry the device can run is resolved to a CUfunction; a dispatch
 * decision (dsv4i_kreg_select) is made when an engine is created and kept as
 * a dsv4i_kernel_id, so the hot path indexes an array and looks up nothing.
 *
 * Host code knows kernels only by entry name (`dsv4_k_<op>_<dtype>[_<variant>]`,
 * extern "C" in the kernels/ .cu files) and by the parameter list its
 * launcher passes.
 * Internal to lib/gpu and the engine's CUDA backend.
 */
#ifndef DSV4I_KERNEL_REGISTRY_H
#define DSV4I_KERNEL_REGISTRY_H

#include "gpu/cuda_device.h"
#include "gpu/kernel_list.h"

/** Operation a kernel implements. */
typedef enum dsv4i_kop {
#define DSV4I_KOP_ENUM(op, name) DSV4I_KOP_##op,
  DSV4I_KOPS(DSV4I_KOP_ENUM)
#undef DSV4I_KOP_ENUM
  DSV4I_KOP_COUNT_
} dsv4i_kop;

/** Weight or cache format a kernel reads (model-spec §3.1-3.2). */
typedef enum dsv4i_kfmt {
  DSV4I_KFMT_F32 = 0,     /**< plain f32 */
  DSV4I_KFMT_BF16,        /**< plain bf16 */
  DSV4I_KFMT_E4M3_UE8M0,  /**< E4M3FN values, one UE8M0 scale per 32 (fp8 weights, Engram, window KV) */
  DSV4I_KFMT_E2M1_UE8M0,  /**< MXFP4: packed e2m1 codes, one UE8M0 scale per 32 (routed experts, index keys) */
  DSV4I_KFMT_E2M1_E4M3,   /**< packed e2m1 codes, one E4M3 scale per 16 (compressed KV) */
  DSV4I_KFMT_DS_MLA,      /**< fp8_ds_mla window record: E4M3 NoPE values, one UE8M0 scale per 64,
                           *   bf16 RoPE values (docs/gpu-attention.md "The fp8_ds_mla record") */
  DSV4I_KFMT_COUNT_
} dsv4i_kfmt;

/** Shape class a kernel is tuned for. Classes are added with the kernels
 * that need them (e.g. small-batch decode vs. prefill). */
typedef enum dsv4i_kshape {
  DSV4I_KSHAPE_ANY = 0, /**< no shape specialisation */
  DSV4I_KSHAPE_DECODE,  /**< small M (decode, a few dozen tokens): rows per thread or warp, K streamed */
  DSV4I_KSHAPE_DECODE_WARP, /**< small M, narrow matrices: one warp per output row, lane = K block */
  DSV4I_KSHAPE_TILED,  /**< the default numerics mode's kernel of an op: fp32 sums in a fixed order of
                        *   the op's shape, not the CPU's (docs/gpu-dense.md "Numerics modes") */
  DSV4I_KSHAPE_COUNT_
} dsv4i_kshape;

/** Row of the kernel table (gpu/kernel_list.h); the value is the row index. */
typedef enum dsv4i_kernel_id {
#define DSV4I_K_ENUM(id, op, fmt, shape, min_sm, module, entry, block) DSV4I_K_##id,
  DSV4I_KERNELS(DSV4I_K_ENUM)
#undef DSV4I_K_ENUM
  DSV4I_K_COUNT
} dsv4i_kernel_id;

/** One row of the kernel table (static, const). */
typedef struct dsv4i_kernel_desc {
  dsv4i_kop op;
  dsv4i_kfmt fmt;
  dsv4i_kshape shape;
  int32_t min_sm;     /**< lowest compute capability, major*10 + minor */
  const char *module; /**< embedded PTX module (kernels/<module>.cu) */
  const char *entry;  /**< PTX entry name, dsv4_k_<op>_<dtype>[_<variant>] */
  uint32_t block;     /**< threads per block its launcher uses */
} dsv4i_kernel_desc;

/** The table row of `id` (id < DSV4I_K_COUNT). */
const dsv4i_kernel_desc *dsv4i_kernel_desc_get(dsv4i_kernel_id id);

/** Printable names for messages ("selftest", "e4m3+ue8m0", "any"). */
const char *dsv4i_kop_name(dsv4i_kop op);
const char *dsv4i_kfmt_name(dsv4i_kfmt fmt);
const char *dsv4i_kshape_name(dsv4i_kshape shape);

/**
 * Check the table against the embedded PTX without a GPU: every row filled,
 * entry named dsv4_k_*, its module embedded and its `.entry` present in the
 * module's text, PTX targeting sm_80.
 *
 * @return DSV4_OK; DSV4_ERR_INTERNAL naming the first inconsistency.
 */
dsv4_status dsv4i_kreg_check_tables(void);

/** Kernels loaded for one device. */
typedef struct dsv4i_kreg {
  const dsv4i_cuda_device *dev; /**< borrowed; must outlive the registry */
  dsv4i_cumod *modules;         /**< [n_modules], in dsv4i_ptx_modules order */
  size_t n_modules;
  dsv4i_cufn fn[DSV4I_K_COUNT]; /**< NULL where the row's min_sm is above the device's */
  double jit_ms;                /**< wall time of all cuModuleLoadDataEx calls, ms */
  float jit_driver_ms;          /**< JIT time the driver reports (CU_JIT_WALL_TIME), summed, ms */
  size_t ptx_bytes;             /**< PTX text loaded, bytes */
  /** Launch hook for benchmarks (NULL in the engine): called on the launch's
   * stream right before (after = 0) and right after (after = 1) every
   * launch, e.g. to record CUDA events per kernel (bench/roofline). */
  void (*hook)(void *user, dsv4i_kernel_id id, dsv4i_custream stream, int after);
  void *hook_user;
} dsv4i_kreg;

/**
 * Load every embedded PTX module on `dev` (its context current on this
 * thread) and resolve every table entry the device can run.
 *
 * @param dev [in] an open device; borrowed for the registry's lifetime.
 * @param kr  [out] zeroed on failure (everything loaded so far is unloaded).
 * @return DSV4_OK; DSV4_ERR_OUT_OF_MEMORY; DSV4_ERR_INTERNAL (an entry of the
 *         table is missing from its PTX module: names op, format, shape and
 *         arch); DSV4_ERR_DEVICE (JIT or another driver call failed; the
 *         message carries the JIT error log).
 */
dsv4_status dsv4i_kreg_load(const dsv4i_cuda_device *dev, dsv4i_kreg *kr);

/** Unload the modules (context of kr->dev current). Safe on a zeroed registry. */
void dsv4i_kreg_unload(dsv4i_kreg *kr);

/**
 * Dispatch decision, made once when an engine is created: the row for
 * (op, fmt, shape) with the highest min_sm the device meets.
 *
 * @param out [out] the kernel id to launch on the hot path.
 * @return DSV4_OK; DSV4_ERR_UNSUPPORTED naming op, format, shape and arch.
 */
dsv4_status dsv4i_kreg_select(const dsv4i_kreg *kr, dsv4i_kop op, dsv4i_kfmt fmt,
                              dsv4i_kshape shape, dsv4i_kernel_id *out);

/**
 * Launch kernel `id` (resolved; selected beforehand) with its table block
 * size: grid_x blocks of desc->block threads, `params` as cuLaunchKernel
 * takes them (an array of pointers to each argument).
 *
 * @return DSV4_OK; DSV4_ERR_DEVICE / DSV4_ERR_DEVICE_LOST naming the entry.
 */
dsv4_status dsv4i_kreg_launch(const dsv4i_kreg *kr, dsv4i_kernel_id id, uint32_t grid_x,
                              uint32_t shared_bytes, dsv4i_custream stream, void **params);

/**
 * dsv4i_kreg_launch on a 3-D grid (grid_x, grid_y, grid_z) of desc->block
 * threads each: what launchers with a token or head axis use. Capture-safe
 * (no host synchronisation). Same statuses.
 */
dsv4_status dsv4i_kreg_launch_grid(const dsv4i_kreg *kr, dsv4i_kernel_id id, uint32_t grid_x,
                                   uint32_t grid_y, uint32_t grid_z, uint32_t shared_bytes,
                                   dsv4i_custream stream, void **params);

#endif /* DSV4I_KERNEL_REGISTRY_H */
