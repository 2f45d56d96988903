/*
 * The default mode's bf16 linears (docs/gpu-dense.md "Numerics modes"): bf16
 * weights [rows][K] on bf16 rows x [n][ldx], bf16 or fp32 result (CPU
 * oracles dsv4i_cpu_linear / dsv4i_cpu_linear_f32: Σ_k x·w, exact products,
 * fp32 sums; only the order of those sums differs here).
 *
 * Tensor cores: mma.sync m16n8k16 bf16 with fp32 accumulate (compute_80).
 * A tile of 16 rows and 16 tokens (grid.y walks the token chunks) has its K
 * cut into 8·KB contiguous slices of whole 32-column chunks (slice q: chunks
 * [q·nch/(8KB), (q+1)·nch/(8KB)), nch = K/32; KB from the shape, below), one
 * per warp of KB blocks of 8 warps; each warp accumulates its slice chunk by
 * chunk into one fp32 fragment per 8 tokens. A block adds its 8 slice sums
 * in warp order from the first (shared memory); with KB > 1 the tile's last
 * block adds the KB block sums in block order. The result is rounded to
 * bf16 (or stored as fp32) once.
 *
 * Within a 32-column chunk, lane (g = lane/4, c = lane%4) loads 16 bytes of
 * weight rows g and g + 8 and of token g's x at columns 8c .. 8c + 7, and
 * feeds them to two mma steps: step s takes columns 8c + 4s .. 8c + 4s + 3
 * as the fragment's k = {2c, 2c+1, 2c+8, 2c+9}. That permutes the columns
 * within the chunk identically for A and B (a dot product is the same sum in
 * any column order; the order of the fp32 additions is the tensor core's),
 * and makes every load a contiguous 16 bytes.
 *
 * Order: fixed by the shape: the slice boundaries depend on (rows, K) only, the
 * chunk order is increasing, and the mma's accumulation of an output element
 * reads only that element's row of A and column of B. So a token's bits do
 * not depend on the other tokens of the launch (their columns or the second
 * n8 tile), the grid or the schedule. No atomics.
 *
 * Tolerance (tests/gpu/test_cuda_ops.c, gpu_tol.h): the tensor core adds
 * exact products with fp32 sums that may truncate instead of rounding
 * (alignment and normalisation round toward zero on Volta..Hopper: Fasi,
 * Higham, Mikaitis, Pranesh, "Numerical behavior of NVIDIA tensor cores",
 * PeerJ CS 2021), so its unit roundoff is taken as 2^-23, the CPU's 2^-24:
 * |y_gpu - y_cpu| <= (gamma_{2^-24}(K) + gamma_{2^-23}(K)) Σ|x·w| (+ one
 * bf16 ulp for a bf16 result).
 *
 * Grouped projection (wo_a): rows [g·group_rows, (g+1)·group_rows) read the
 * input columns from g·group_x on (group_rows % 16 == 0, the launcher checks).
 * Needs: K % 32 == 0, weight rows and x rows 16-byte aligned (the launcher
 * falls back to the exact kernel otherwise: a property of the call site).
 * Grid (ceil(rows/16)·KB, ceil(n_tok/16)), 256 threads (KB below).
 */
#include <stdint.h>

#include "model/format_codes.h"
#include "mma.cuh"

#define LT_WARPS 8
#define LT_TOK 16
/* chunks whose loads are issued before their mma; 8 for one token chunk was
 * slower on the H200 (run3: the head 1.34x -> 1.51x its floor), so 4 always */
#define LT_U(NT8) 4

/* K split over blocks for matrices of few row tiles (the indexer's wproj: 2
 * tiles; the compressor's wkv: 32), so that one token still spreads over
 * about LT_SPREAD blocks: KB = min(nch / 8, LT_SPREAD / row tiles), at least
 * 1. A constant, not the device's SM count: the order depends on the shape
 * alone. With KB > 1 the block sums of a tile go to the module's scratch and
 * the tile's last block (a counter it resets itself) adds them in block
 * order; at most LT_MAXTY token chunks a launch (the launcher slices). The
 * launcher (lib/gpu/gpu_ops.c) computes the same KB. */
#define LT_SPREAD 128
#define LT_MAXTY 4
__device__ float lt_scr[LT_MAXTY][LT_SPREAD][16 * LT_TOK];
__device__ unsigned int lt_cnt[LT_MAXTY][LT_SPREAD];

__device__ __forceinline__ int lt_kb(int rows, int k) {
  const int tiles = (rows + 15) / 16, by_k = (k / 32) / LT_WARPS, by_r = LT_SPREAD / tiles;
  const int kb = by_k < by_r ? by_k : by_r;
  return kb > 1 ? kb : 1;
}

__device__ __forceinline__ uint4 lt_ld_stream(const uint16_t *p) {
  return __ldcs(reinterpret_cast<const uint4 *>(p));
}

template <int NT8, int OUT_F32>
__device__ __forceinline__ void lt_tile(int n_tok, int rows, int k, const uint16_t *w, long long ld,
                                        const uint16_t *x, long long ldx, void *y, long long ldy,
                                        int group_rows, long long group_x, float (*part)[16][LT_TOK]) {
  const int lane = threadIdx.x & 31, wp = threadIdx.x >> 5;
  const int g = lane >> 2, c = lane & 3;
  const int KB = lt_kb(rows, k), rt = blockIdx.x / KB, kb = blockIdx.x % KB;
  const int o0 = rt * 16, t0 = blockIdx.y * LT_TOK;
  const int nt = n_tok - t0 < LT_TOK ? n_tok - t0 : LT_TOK;
  if (group_rows > 0) x += (long long)(o0 / group_rows) * group_x;
  /* slice q = kb·8 + warp of the tile's 8·KB slices */
  const int nch = k >> 5, ns = LT_WARPS * KB, q = kb * LT_WARPS + wp;
  const int ch0 = (int)(((long long)q * nch) / ns), ch1 = (int)(((long long)(q + 1) * nch) / ns);
  /* this lane's rows and tokens (clamped; their products are dropped below) */
  const int r0 = o0 + g < rows ? o0 + g : rows - 1, r1 = o0 + g + 8 < rows ? o0 + g + 8 : rows - 1;
  const uint16_t *w0 = w + (long long)r0 * ld + 8 * c, *w1 = w + (long long)r1 * ld + 8 * c;
  const uint16_t *xt[NT8];
  bool tok_ok[NT8];
#pragma unroll
  for (int j = 0; j < NT8; j++) {
    const int t = 8 * j + g;
    tok_ok[j] = t < nt;
    xt[j] = x + (long long)(t0 + (t < nt ? t : 0)) * ldx + 8 * c;
  }
  float acc[NT8][4];
#pragma unroll
  for (int j = 0; j < NT8; j++) acc[j][0] = acc[j][1] = acc[j][2] = acc[j][3] = 0.0f;
  constexpr int U = LT_U(NT8);
  for (int cb = ch0; cb < ch1; cb += U) {
    uint4 a0[U], a1[U], b[U][NT8];
#pragma unroll
    for (int u = 0; u < U; u++) {
      const int ch = cb + u < ch1 ? cb + u : ch1 - 1; /* past the end: reloads, not used */
      a0[u] = lt_ld_stream(w0 + 32 * ch);
      a1[u] = lt_ld_stream(w1 + 32 * ch);
#pragma unroll
      for (int j = 0; j < NT8; j++) {
        const uint4 v = __ldg(reinterpret_cast<const uint4 *>(xt[j] + 32 * ch));
        b[u][j] = tok_ok[j] ? v : make_uint4(0u, 0u, 0u, 0u);
      }
    }
#pragma unroll
    for (int u = 0; u < U; u++) {
      if (cb + u >= ch1) break;
#pragma unroll
      for (int j = 0; j < NT8; j++) {
        /* step 0: columns 8c .. 8c+3; step 1: 8c+4 .. 8c+7 */
        mma_bf16(acc[j], a0[u].x, a1[u].x, a0[u].y, a1[u].y, b[u][j].x, b[u][j].y);
        mma_bf16(acc[j], a0[u].z, a1[u].z, a0[u].w, a1[u].w, b[u][j].z, b[u][j].w);
      }
    }
  }
  /* the slice sums: c0,c1 (row g, tokens 2c, 2c+1), c2,c3 (row g+8) of each n8 tile */
#pragma unroll
  for (int j = 0; j < NT8; j++) {
    part[wp][g][8 * j + 2 * c] = acc[j][0];
    part[wp][g][8 * j + 2 * c + 1] = acc[j][1];
    part[wp][g + 8][8 * j + 2 * c] = acc[j][2];
    part[wp][g + 8][8 * j + 2 * c + 1] = acc[j][3];
  }
  __syncthreads();
  const int row = threadIdx.x >> 4, t = threadIdx.x & 15;
  float s = part[0][row][t];
#pragma unroll
  for (int w = 1; w < LT_WARPS; w++) s += part[w][row][t];
  if (KB > 1) { /* block-uniform */
    __shared__ int last_s;
    float *scr = &lt_scr[blockIdx.y][0][0];
    scr[(rt * KB + kb) * (16 * LT_TOK) + threadIdx.x] = s;
    __threadfence();
    __syncthreads();
    if (threadIdx.x == 0) {
      const unsigned int done = atomicAdd(&lt_cnt[blockIdx.y][rt], 1u);
      last_s = done == (unsigned int)KB - 1u;
      if (last_s) lt_cnt[blockIdx.y][rt] = 0u; /* every block of the tile has counted */
    }
    __syncthreads();
    if (!last_s) return;
    __threadfence();
    s = __ldcg(scr + (rt * KB) * (16 * LT_TOK) + threadIdx.x);
    for (int b = 1; b < KB; b++) s += __ldcg(scr + (rt * KB + b) * (16 * LT_TOK) + threadIdx.x);
  }
  if (t >= nt || o0 + row >= rows) return;
  if (OUT_F32)
    static_cast<float *>(y)[(long long)(t0 + t) * ldy + o0 + row] = s;
  else
    static_cast<uint16_t *>(y)[(long long)(t0 + t) * ldy + o0 + row] = dsv4i_f32_to_bf16(s);
}

template <int OUT_F32>
__device__ __forceinline__ void lt_kernel(int n_tok, int rows, int k, const unsigned char *w,
                                          long long ld, const uint16_t *x, long long ldx, void *y,
                                          long long ldy, int group_rows, long long group_x) {
  __shared__ float part[LT_WARPS][16][LT_TOK];
  const uint16_t *wb = reinterpret_cast<const uint16_t *>(w);
  if (n_tok - (int)blockIdx.y * LT_TOK <= 8)
    lt_tile<1, OUT_F32>(n_tok, rows, k, wb, ld, x, ldx, y, ldy, group_rows, group_x, part);
  else
    lt_tile<2, OUT_F32>(n_tok, rows, k, wb, ld, x, ldx, y, ldy, group_rows, group_x, part);
}

#define LT_ARGS                                                                               \
  int n_tok, int rows, int k, const unsigned char *w, long long ld, const unsigned char *scale, \
      long long scale_ld, const float *xq, const float *sx, const uint16_t *x, long long ldx,  \
      void *y, long long ldy, int group_rows, long long group_x

/* The launchers' common GEMV signature (lib/gpu/gpu_ops.c); scale, xq, sx unused. */
extern "C" __global__ void __launch_bounds__(256, 2) dsv4_k_linear_bf16_tiled(LT_ARGS) {
  (void)scale, (void)scale_ld, (void)xq, (void)sx;
  lt_kernel<0>(n_tok, rows, k, w, ld, x, ldx, y, ldy, group_rows, group_x);
}
extern "C" __global__ void __launch_bounds__(256, 2) dsv4_k_linear_bf16_f32out_tiled(LT_ARGS) {
  (void)scale, (void)scale_ld, (void)xq, (void)sx;
  lt_kernel<1>(n_tok, rows, k, w, ld, x, ldx, y, ldy, group_rows, group_x);
}
