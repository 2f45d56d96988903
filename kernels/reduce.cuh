/*
 * Reductions in the CPU oracle's fixed orders, by one warp (device code).
 *
 * dsv4_warp_sum_torch: Σ a(i), i < n, in exactly the order of torch's CPU
 * sum over a contiguous row (lib/cpu/engram.c dsv4i_cpu_sum_torch: 8 lanes
 * x 4 interleaved items = 32 independent accumulator chains, each a 4-level
 * cascade of 2^level_power-row blocks). Chain c = 8k + l adds the elements
 * 32i + c, so lane c of a warp runs chain c as written, and the merges are
 * done with shuffles in the CPU's order. The result is bit-identical to
 * the CPU's and is returned in every lane.
 */
#ifndef DSV4_KERNELS_REDUCE_CUH
#define DSV4_KERNELS_REDUCE_CUH

#include <stdint.h>

/* ATen's CeilLog2 (1 for x <= 2) */
__device__ __forceinline__ int dsv4_ceil_log2_aten(long long x) {
  if (x <= 2) return 1;
  return 64 - __clzll((unsigned long long)(x - 1));
}

/* One chain of ATen's multi_row_sum over n_rows rows: level 0 takes each
 * row, and after each block of 2^power rows the levels carry upward. */
template <typename A>
__device__ __forceinline__ float dsv4_torch_chain(long long n_rows, int power, A a) {
  const long long step = 1ll << power, mask = step - 1;
  float acc0 = 0.0f, acc1 = 0.0f, acc2 = 0.0f, acc3 = 0.0f;
  long long i = 0;
  while (i + step <= n_rows) {
    /* step is a power of two >= 16: 16 loads issued, then added in order (the
     * adds are a dependent chain; without the batch each waited for its load) */
    for (long long j = 0; j < step; j += 16, i += 16) {
      float v[16];
#pragma unroll
      for (int k = 0; k < 16; k++) v[k] = a(i + k);
#pragma unroll
      for (int k = 0; k < 16; k++) acc0 += v[k];
    }
    acc1 += acc0;
    acc0 = 0.0f;
    if ((i & (mask << power)) != 0) continue;
    acc2 += acc1;
    acc1 = 0.0f;
    if ((i & (mask << (2 * power))) != 0) continue;
    acc3 += acc2;
    acc2 = 0.0f;
  }
  for (; i < n_rows; i++) acc0 += a(i);
  acc0 += acc1;
  acc0 += acc2;
  acc0 += acc3;
  return acc0;
}

/* The level power of ATen's row_sum for n_rows rows. */
__device__ __forceinline__ int dsv4_torch_level_power(long long n_rows) {
  const int p = dsv4_ceil_log2_aten(n_rows) / 4;
  return p < 4 ? 4 : p;
}

/* Serial torch sum of n < 8 values (ATen's scalar_inner_sum). */
template <typename A>
__device__ __forceinline__ float dsv4_sum_torch_small(int n, A a) {
  const long long n_rows = n / 4;
  float acc[4];
  for (int k = 0; k < 4; k++)
    acc[k] = n_rows ? dsv4_torch_chain(n_rows, 4, [&](long long i) { return a(i * 4 + k); }) : 0.0f;
  for (int r = (int)n_rows * 4; r < n; r++) acc[0] += a(r);
  for (int k = 1; k < 4; k++) acc[0] += acc[k];
  return 0.0f + acc[0];
}

/* Σ a(i) for i < n in torch's CPU order; every lane of the warp calls it
 * and gets the result. a(i) must be cheap and pure (called once per i). */
template <typename A>
__device__ __forceinline__ float dsv4_warp_sum_torch(long long n, A a) {
  const int lane = threadIdx.x & 31;
  if (n < 8) {
    float s = 0.0f;
    if (lane == 0) s = dsv4_sum_torch_small((int)n, a);
    return __shfl_sync(0xFFFFFFFFu, s, 0);
  }
  const long long n_vec = n / 8, n_rows = n_vec / 4;
  const int power = dsv4_torch_level_power(n_rows);
  float acc = dsv4_torch_chain(n_rows, power, [&](long long i) { return a(32 * i + lane); });
  /* leftover items go to the k = 0 chains (lanes 0..7), then chains k = 1..3 */
  if (lane < 8)
    for (long long r = n_rows * 4; r < n_vec; r++) acc += a(r * 8 + lane);
  const float v1 = __shfl_down_sync(0xFFFFFFFFu, acc, 8);
  const float v2 = __shfl_down_sync(0xFFFFFFFFu, acc, 16);
  const float v3 = __shfl_down_sync(0xFFFFFFFFu, acc, 24);
  if (lane < 8) {
    acc += v1;
    acc += v2;
    acc += v3;
  }
  /* the tail (n mod 8) into 0, then the 8 lanes in order */
  float s = 0.0f;
  if (lane == 0) {
    for (long long k = n_vec * 8; k < n; k++) s += a(k);
  }
  for (int l = 0; l < 8; l++) {
    const float v = __shfl_sync(0xFFFFFFFFu, acc, l);
    s += v;
  }
  return __shfl_sync(0xFFFFFFFFu, s, 0);
}

/* ---- the default mode's fixed trees (docs/gpu-dense.md "Numerics modes") ----
 * Orders that depend only on the block shape, never on the data, the grid or
 * the schedule. A xor butterfly gives every lane the same bits (a + b == b + a
 * in IEEE arithmetic), so no broadcast is needed. */

/* Σ of v over the warp: butterfly with offsets 16, 8, 4, 2, 1; in every lane. */
template <typename T>
__device__ __forceinline__ T dsv4_warp_sum_tree(T v) {
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xFFFFFFFFu, v, o);
  return v;
}

/* Σ of v over a block of NW warps: each warp's tree, then the NW warp sums
 * added in warp order from the first (sh: NW slots of shared memory). In
 * every thread. Contains __syncthreads(): every thread of the block calls it. */
template <int NW, typename T>
__device__ __forceinline__ T dsv4_block_sum_tree(T v, T *sh) {
  v = dsv4_warp_sum_tree(v);
  if ((threadIdx.x & 31) == 0) sh[threadIdx.x >> 5] = v;
  __syncthreads();
  T s = sh[0];
#pragma unroll
  for (int w = 1; w < NW; w++) s += sh[w];
  __syncthreads(); /* sh may be reused */
  return s;
}

#endif /* DSV4_KERNELS_REDUCE_CUH */
