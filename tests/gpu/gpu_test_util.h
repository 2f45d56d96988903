/* Helpers of the gpu suite: one engine's GPU per test program, device
 * buffers carved from its pool, random data, bitwise comparison. */
#ifndef DSV4_GPU_TEST_UTIL_H
#define DSV4_GPU_TEST_UTIL_H

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "test_util.h"
#include "gpu/cuda.h"
#include "gpu/gpu_ctx.h"
#include "model/formats.h"

/* Open device 0 with a pool of pool_bytes; exit 77 when the build has no
 * kernels or there is no usable GPU, 1 on any other failure. */
static inline void gt_open(dsv4i_gpu *g, size_t pool_bytes) {
  if (!dsv4i_cuda_built()) {
    printf("skip: this build has no CUDA kernels\n");
    exit(77);
  }
  dsv4_status st = dsv4i_gpu_open(0, g);
  if (st == DSV4_ERR_NO_DEVICE || st == DSV4_ERR_UNSUPPORTED) {
    printf("skip: no usable CUDA device: %s: %s\n", dsv4_status_string(st), dsv4i_error_message());
    exit(77);
  }
  if (st == DSV4_OK) st = dsv4i_gpu_pool_create(g, pool_bytes);
  if (st != DSV4_OK) {
    fprintf(stderr, "gpu open: %s: %s\n", dsv4_status_string(st), dsv4i_error_message());
    exit(1);
  }
}

static inline void gt_check(dsv4_status st) {
  if (st != DSV4_OK) fail_msg("%s: %s", dsv4_status_string(st), dsv4i_error_message());
}

/* A device buffer of `bytes` from g's pool, filled from `host` (or zeroed when NULL).
 * The copy is queued on g's stream and waited for: a plain cuMemcpyHtoD from
 * pageable memory may return before its DMA lands, and the legacy stream it runs
 * on does not order g's non-blocking stream (run1 of 2 Dec 2026: a kernel
 * launched right after such an upload read the buffer's stale bytes). */
static inline dsv4i_cuptr gt_up(dsv4i_gpu *g, const void *host, size_t bytes) {
  dsv4i_cuptr p = 0;
  gt_check(dsv4i_gpu_pool_take(&g->pool, bytes ? bytes : 1, "test buffer", &p));
  dsv4i_cures r = host ? g->dev.cu->MemcpyHtoDAsync(p, host, bytes, g->stream)
                       : g->dev.cu->MemsetD8Async(p, 0, bytes, g->stream);
  if (r != DSV4I_CUDA_SUCCESS) gt_check(dsv4i_gpu_fail(g, r, "test upload"));
  gt_check(dsv4i_gpu_sync(g));
  return p;
}

static inline void gt_down(dsv4i_gpu *g, void *host, dsv4i_cuptr p, size_t bytes) {
  gt_check(dsv4i_gpu_sync(g));
  dsv4i_cures r = g->dev.cu->MemcpyDtoH(host, p, bytes);
  if (r != DSV4I_CUDA_SUCCESS) gt_check(dsv4i_gpu_fail(g, r, "test download"));
}

/* xorshift64* */
static inline uint64_t gt_rand(uint64_t *s) {
  *s ^= *s >> 12;
  *s ^= *s << 25;
  *s ^= *s >> 27;
  return *s * 0x2545F4914F6CDD1Dull;
}
/* uniform in [-1, 1) times 2^[-e, e] */
static inline float gt_randf(uint64_t *s, int e) {
  const double u = (double)(gt_rand(s) >> 11) * 0x1p-53 * 2.0 - 1.0;
  const int sh = e ? (int)(gt_rand(s) % (uint64_t)(2 * e + 1)) - e : 0;
  return (float)ldexp(u, sh);
}
static inline void gt_fill_bf16(uint64_t *s, uint16_t *x, size_t n, int e) {
  for (size_t i = 0; i < n; i++) x[i] = dsv4i_f32_to_bf16(gt_randf(s, e));
}
static inline void gt_fill_f32(uint64_t *s, float *x, size_t n, int e) {
  for (size_t i = 0; i < n; i++) x[i] = gt_randf(s, e);
}

/* Number of elements whose bits differ (any NaN equals any NaN of the same
 * sign only if the bits are equal: the formats' NaNs are canonical). */
static inline size_t gt_diff_bits(const void *a, const void *b, size_t n, size_t esz,
                                  const char *what) {
  size_t bad = 0;
  for (size_t i = 0; i < n; i++)
    if (memcmp((const char *)a + i * esz, (const char *)b + i * esz, esz) != 0) {
      if (bad < 5) {
        uint32_t x = 0, y = 0;
        memcpy(&x, (const char *)a + i * esz, esz);
        memcpy(&y, (const char *)b + i * esz, esz);
        fprintf(stderr, "  %s[%zu]: gpu 0x%08x cpu 0x%08x\n", what, i, (unsigned)x, (unsigned)y);
      }
      bad++;
    }
  if (bad) fprintf(stderr, "  %s: %zu of %zu differ\n", what, bad, n);
  return bad;
}

#endif
