/*
 * dsv4-roofline: the decode kernels of the CUDA backend against the memory
 * roofline, and the stock baselines beside them (bench/README.md has the
 * command, bench/RESULTS.md the definitions). Internal tool: it links the
 * library's internals and launches the engine's kernels through their host
 * launchers (lib/gpu/gpu_ops.h, attn.h, dspark.h) on random weights and
 * records in the checkpoint formats.
 *
 * Timing: every case is a sequence of calls captured into one CUDA graph and
 * replayed; the time per call is the replay time over the calls. Calls
 * rotate over copies of the data they read (weights, records, activations)
 * so that one replay touches at least three times the L2 cache: a call never
 * finds its bytes left in L2 by the previous one, as in a real step.
 */
#ifndef DSV4_BENCH_RF_H
#define DSV4_BENCH_RF_H

#include <stdio.h>

#include "gpu/attn.h"
#include "gpu/cublaslt.h"
#include "gpu/dspark.h"
#include "gpu/gpu_ctx.h"
#include "gpu/gpu_ops.h"
#include "model/config.h"

/* the bench's own kernels (rf_stock.cu), loaded from the embedded PTX */
#define RF_KERNELS(X)                                                                        \
  X(empty) X(read) X(fill) X(gather_rows) X(swiglu) X(combine) X(gather_kv) X(softmax_sink)   \
  X(gather_embed) X(add_bias) X(noise) X(argmax_part) X(argmax_final)

typedef struct rf {
  dsv4i_gpu g;                 /**< device, stream, events, pool (kernel table) */
  dsv4i_gpu_ops o;
  dsv4i_gpu_attn_kernels ak;
  dsv4i_gpu_dspark_kernels dk;
  dsv4i_cumod mod;             /**< rf_stock.cu */
#define RF_FN(k) dsv4i_cufn k_##k;
  RF_KERNELS(RF_FN)
#undef RF_FN
  dsv4i_lt lt;                 /**< cuBLASLt, or handle NULL (baselines left out, why_no_lt) */
  char why_no_lt[256];
  dsv4i_cuptr lt_ws;           /**< cuBLASLt workspace */
  size_t lt_ws_bytes;
  dsv4i_config cfg;            /**< the release config (dims) */
  size_t l2;                   /**< L2 bytes */
  double copy_gbs, read_gbs;   /**< measured, GB/s (copy: read + write) */
  double empty_us;             /**< one empty kernel under graph replay */
  unsigned int seed;
  int failures;                /**< cases that failed (their messages printed); exit 1 */
  int cpu_order;               /**< --cpu-order: kernel and layer tables in CPU order */
} rf;

/** Record call i of a case on stream s (launches only). */
typedef dsv4_status (*rf_rec)(rf *r, void *u, int i, dsv4i_custream s);

/* rf_util.c */
/** Exit with a message (77 for no device / unsupported, else 1) unless st is DSV4_OK. */
void rf_check(dsv4_status st, const char *what);
void rf_check_cu(rf *r, dsv4i_cures res, const char *what);
/** Carve bytes from the pool (256-aligned). */
dsv4i_cuptr rf_take(rf *r, size_t bytes);
/** bytes of random words (hash AND mask) OR bits; bytes rounded up to 4. */
dsv4i_cuptr rf_rand(rf *r, size_t bytes, unsigned int mask, unsigned int bits);
/** A device copy of host bytes. */
dsv4i_cuptr rf_upload(rf *r, const void *h, size_t bytes);
/** Copies of `bytes` so that the copies cover 3 L2 (1..max). */
int rf_copies(const rf *r, double bytes, int max);
/** Launch one of the bench's kernels. */
void rf_launch(rf *r, dsv4i_cufn f, unsigned gx, unsigned gy, unsigned block, void **params,
               dsv4i_custream s);
/** Microseconds per call: calls 0 .. n-1 run once eagerly (warm-up, and
 *  cuBLASLt's first-call set-up outside a capture), then are captured into one
 *  graph that is replayed until at least 20 ms (3 replays at least). A call
 *  that returns an error: the message is printed, failures counted, -1. */
double rf_time(rf *r, rf_rec f, void *u, int n);
/** Bytes floor in µs: bytes / copy bandwidth. */
double rf_floor_us(const rf *r, double bytes);
/** One row of the kernel table; us < 0: the case failed; stock_us < 0: no baseline. */
void rf_row(const rf *r, const char *op, int n, double us, double bytes, double stock_us);
void rf_table_head(const char *title);
/** y[n][rows] f32 = x[n][k] bf16 · W[rows][k]ᵀ bf16 by cuBLASLt on the shared workspace. */
dsv4_status rf_gemm(rf *r, dsv4i_custream s, int n, int rows, int k, dsv4i_cuptr x, int64_t ldx,
                    dsv4i_cuptr w, int64_t ldw, dsv4i_cuptr y, int64_t ldy);

/* the sections */
void rf_bandwidth(rf *r);
void rf_moe(rf *r);
void rf_proj(rf *r);
void rf_attn(rf *r);
void rf_markov(rf *r);
/** Small dense ops and bf16 projections, default mode and CPU order (rf_dense.c). */
void rf_dense(rf *r);
/** The layer table (a checkpoint directory; frees nothing of r's pool). */
int rf_layer(rf *r, const char *model_dir, int device, int prompt);

#endif /* DSV4_BENCH_RF_H */
