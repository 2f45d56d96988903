/*
 * CUDA backend entry points seen by the rest of the library. The driver
 * (libcuda.so.1) is opened at run time; nothing here needs CUDA headers, so
 * the same declarations serve builds with and without kernels.
 */
#ifndef DSV4I_CUDA_H
#define DSV4I_CUDA_H

#include <stddef.h>
#include <stdint.h>

#include "base/base.h"

/** 1 when this build embeds PTX kernels (nvcc was found at build time). */
int dsv4i_cuda_built(void);

/**
 * Open the driver, initialise it, check `device` (exists, SM >= 8.0) and load
 * the embedded PTX module once; releases everything before returning.
 * DSV4_OK; DSV4_ERR_UNSUPPORTED (built without kernels, or SM < 8.0);
 * DSV4_ERR_NO_DEVICE (no libcuda.so.1, cuInit failed for lack of a GPU, or
 * device out of range); DSV4_ERR_DEVICE (another driver failure).
 */
dsv4_status dsv4i_cuda_probe(int32_t device);

/** What a probe or self-test saw of the device and the PTX load. */
typedef struct dsv4i_cuda_report {
  char device_name[128];  /**< e.g. "NVIDIA H200" */
  int32_t sm;             /**< compute capability, major*10 + minor */
  int32_t n_sm;           /**< multiprocessor count */
  int32_t driver_version; /**< CUDA API version of the driver (cuDriverGetVersion), e.g. 13000 */
  int32_t ptx_version;    /**< CUDA version of the toolkit that wrote the PTX, e.g. 13000 */
  size_t ptx_bytes;       /**< PTX text loaded, all modules */
  size_t n_modules;       /**< PTX modules loaded */
  double jit_ms;          /**< wall time of loading (JIT-compiling) all modules, ms */
  double jit_driver_ms;   /**< the driver's own JIT time (CU_JIT_WALL_TIME), ms */
  double kernel_ms;       /**< self-test only: host wall time of launch + synchronize, ms */
} dsv4i_cuda_report;

/**
 * dsv4i_cuda_probe(), also filling `report` (may be NULL) with the device
 * and JIT facts. The report is filled as far as the probe got.
 */
dsv4_status dsv4i_cuda_probe_report(int32_t device, dsv4i_cuda_report *report);

/**
 * Check the kernel table against the embedded PTX text; needs no GPU.
 * DSV4_OK; DSV4_ERR_INTERNAL naming the first row that disagrees;
 * DSV4_ERR_UNSUPPORTED in a build without kernels.
 */
dsv4_status dsv4i_cuda_check_tables(void);

/**
 * Pipeline self-test on `device`: open it, load the embedded PTX, select the
 * kernel (op selftest, format e4m3+ue8m0) through the registry and run it:
 * out[i] = e4m3(codes[i]) * 2^(scales[i / 32] - 127), E4M3FN decoded in
 * registers (bias 7, subnormals (m/8)*2^-6, 0x7F/0xFF NaN), UE8M0 255 NaN.
 * Everything is released before returning.
 *
 * @param device [in] CUDA device ordinal.
 * @param codes  [in] uint8[n] E4M3FN bytes (host).
 * @param scales [in] uint8[(n + 31) / 32] UE8M0 bytes, one per 32 codes (host).
 * @param n      [in] element count, 1 .. 2^31.
 * @param out    [out] float[n] (host).
 * @param report [out] may be NULL; filled as far as the test got.
 * @return DSV4_OK; DSV4_ERR_INVALID_ARG (NULL, n out of range; nothing
 *         touched); the statuses of dsv4i_cuda_probe(); DSV4_ERR_DEVICE or
 *         DSV4_ERR_DEVICE_LOST (a driver call or the kernel failed).
 */
dsv4_status dsv4i_cuda_selftest(int32_t device, const uint8_t *codes, const uint8_t *scales,
                                size_t n, float *out, dsv4i_cuda_report *report);

#endif /* DSV4I_CUDA_H */
