/*
 * Linear layers reading the checkpoint's bytes directly (spec §3.3; CPU
 * oracle lib/cpu/linear.c): fp8 (E4M3 + UE8M0 32x32 blocks) and MXFP4
 * (E2M1 + UE8M0 per row and 32 columns) weights on act_quant'ed
 * activations, bf16 weights with a bf16 or fp32 result (wo_a; the upcast
 * head / router gate), fp32 weights with an fp32 result.
 *
 * Small-M GEMV shape (decode, M <= a few dozen tokens): one thread per
 * output row, 128 rows per block, a chunk of TM tokens per block row of
 * the grid. The thread decodes its row's 32-column block in registers
 * (fp8/fp4 never leave the SM as anything but bytes) and runs the dot
 * products sequentially in k, the activation tile staged in shared memory.
 * That is the CPU oracle's order exactly, so results are bit-equal:
 *   fp8/fp4: p = Σ_{k in block} xq·wq (fp32, increasing k, from 0);
 *            acc += (p · sx[t][kb]) · sw;  y = bf16(acc)
 *   bf16/f32: acc = Σ_k x·w over all of K, increasing k, from 0.
 * Weight rows are read as whole 32-byte sectors (16 B for fp4); K must be
 * a multiple of 32 and the weight rows 16-byte aligned (the launcher checks).
 */
#include "gemv.cuh"

#define TM 8     /* tokens per block (grid.y walks the token chunks) */
#define ROWS 128 /* output rows per block, one per thread */

/* act_quant of bf16 rows in blocks of 32 (spec §8.1), decoded for the GEMV:
 * xq[t][i] = e4m3 value (unscaled), sx[t][b] = 2^e. One warp per block of
 * 32, lane = element. Grid: ceil(n_tok·k/32 / 8) blocks of 256 threads. */
extern "C" __global__ void __launch_bounds__(256)
dsv4_k_act_quant_e4m3(int n_tok, int k, const uint16_t *x, long long ldx, float *xq, float *sx) {
  const long long blk = (long long)blockIdx.x * 8 + (threadIdx.x >> 5);
  const int lane = threadIdx.x & 31, nkb = k / 32;
  if (blk >= (long long)n_tok * nkb) return;
  const long long t = blk / nkb;
  const int b = (int)(blk % nkb);
  const uint16_t v = x[t * ldx + b * 32 + lane];
  const uint32_t amax = __reduce_max_sync(0xFFFFFFFFu, dsv4i_bf16_abs_bits(v));
  const int32_t e = dsv4i_act_quant_exp(amax);
  xq[t * k + b * 32 + lane] = dsv4i_e4m3_to_f32(dsv4i_act_quant_code(v, e));
  if (lane == 0) sx[t * nkb + b] = dsv4i_e8m0_to_f32(dsv4i_act_quant_scale(e));
}

/*
 * y[t][o] for o < rows, t < n_tok. Quantised formats read xq/sx (act_quant
 * output), float formats read x (bf16 rows). ld: weight row stride in
 * elements (bytes for fp4); scale_ld: scale row stride. y is bf16
 * (OUT_F32 == 0) or fp32, row stride ldy.
 */
template <int FMT, int OUT_F32>
__device__ __forceinline__ void gemv_body(int n_tok, int rows, int k, const unsigned char *w, long long ld,
                                          const unsigned char *scale, long long scale_ld,
                                          const float *xq, const float *sx, const uint16_t *x,
                                          long long ldx, void *y, long long ldy, int group_rows,
                                          long long group_x) {
  __shared__ float xs[TM][32];
  /* grouped projection (wo_a): rows [g·group_rows, (g+1)·group_rows) read the
   * input columns from g·group_x on; a block's 128 rows lie in one group */
  if (group_rows > 0) x += (long long)(blockIdx.x * ROWS / group_rows) * group_x;
  __shared__ float ss[TM];
  const int o = blockIdx.x * ROWS + threadIdx.x;
  const int t0 = blockIdx.y * TM;
  const int nt = n_tok - t0 < TM ? n_tok - t0 : TM;
  const int nkb = k / 32;
  const bool quant = FMT == W_E4M3 || FMT == W_E2M1;
  float acc[TM];
#pragma unroll
  for (int r = 0; r < TM; r++) acc[r] = 0.0f;
  for (int kb = 0; kb < nkb; kb++) {
    __syncthreads(); /* the previous tile is consumed */
    for (int i = threadIdx.x; i < TM * 32; i += ROWS) {
      const int r = i >> 5, c = i & 31;
      float v = 0.0f;
      if (r < nt)
        v = quant ? xq[(long long)(t0 + r) * k + kb * 32 + c]
                  : dsv4i_bf16_to_f32(x[(long long)(t0 + r) * ldx + kb * 32 + c]);
      xs[r][c] = v;
    }
    if (quant && threadIdx.x < TM) ss[threadIdx.x] = threadIdx.x < nt ? sx[(long long)(t0 + threadIdx.x) * nkb + kb] : 0.0f;
    __syncthreads();
    if (o >= rows) continue;
    float wv[32], sw;
    load_block<FMT>(w, ld, scale, scale_ld, o, kb, wv, &sw);
#pragma unroll
    for (int r = 0; r < TM; r++) {
      if (quant) {
        float p = 0.0f;
#pragma unroll
        for (int i = 0; i < 32; i++) p += xs[r][i] * wv[i];
        acc[r] += (p * ss[r]) * sw;
      } else {
#pragma unroll
        for (int i = 0; i < 32; i++) acc[r] += xs[r][i] * wv[i];
      }
    }
  }
  if (o >= rows) return;
  for (int r = 0; r < nt; r++) {
    if (OUT_F32)
      static_cast<float *>(y)[(long long)(t0 + r) * ldy + o] = acc[r];
    else
      static_cast<uint16_t *>(y)[(long long)(t0 + r) * ldy + o] = dsv4i_f32_to_bf16(acc[r]);
  }
}

/*
 * Narrow-matrix variant for the quantised formats: one warp per output row,
 * lane = K block. The 32-element block partials q = (p · sx) · sw are
 * independent, so the lanes compute them side by side (each lane reads its
 * block's 32 contiguous bytes: a warp reads 1 KB of the row at once); only
 * their fp32 sum in K-block order is serial, through shuffles in lane order.
 * Same operations in the same order as gemv_body: bit-equal to the CPU.
 * Grid (ceil(rows/8), ceil(n_tok/TM)), 256 threads.
 */
template <int FMT>
__device__ __forceinline__ void gemv_warp_body(int n_tok, int rows, int k, const unsigned char *w,
                                               long long ld, const unsigned char *scale,
                                               long long scale_ld, const float *xq, const float *sx,
                                               uint16_t *y, long long ldy) {
  const int lane = threadIdx.x & 31;
  const int o = blockIdx.x * 8 + (threadIdx.x >> 5);
  const int t0 = blockIdx.y * TM;
  const int nt = n_tok - t0 < TM ? n_tok - t0 : TM;
  if (o >= rows) return; /* warp-uniform; no block barriers below */
  const int nkb = k / 32;
  float acc[TM];
#pragma unroll
  for (int r = 0; r < TM; r++) acc[r] = 0.0f;
  for (int c0 = 0; c0 < nkb; c0 += 32) {
    const int kb = c0 + lane, nb = nkb - c0 < 32 ? nkb - c0 : 32;
    float q[TM];
#pragma unroll
    for (int r = 0; r < TM; r++) q[r] = 0.0f;
    if (kb < nkb) {
      float wv[32], sw;
      load_block<FMT>(w, ld, scale, scale_ld, o, kb, wv, &sw);
#pragma unroll
      for (int r = 0; r < TM; r++) {
        if (r < nt) {
          const float4 *xr = reinterpret_cast<const float4 *>(xq + (long long)(t0 + r) * k + kb * 32);
          float p = 0.0f;
#pragma unroll
          for (int i = 0; i < 8; i++) {
            const float4 v = xr[i];
            p += v.x * wv[4 * i];
            p += v.y * wv[4 * i + 1];
            p += v.z * wv[4 * i + 2];
            p += v.w * wv[4 * i + 3];
          }
          q[r] = (p * sx[(long long)(t0 + r) * nkb + kb]) * sw;
        }
      }
    }
    for (int j = 0; j < nb; j++) {
#pragma unroll
      for (int r = 0; r < TM; r++) acc[r] += __shfl_sync(0xFFFFFFFFu, q[r], j);
    }
  }
  if (lane == 0)
    for (int r = 0; r < nt; r++) y[(long long)(t0 + r) * ldy + o] = dsv4i_f32_to_bf16(acc[r]);
}

#define GEMV_ARGS                                                                             \
  int n_tok, int rows, int k, const unsigned char *w, long long ld, const unsigned char *scale, \
      long long scale_ld, const float *xq, const float *sx, const uint16_t *x, long long ldx,  \
      void *y, long long ldy, int group_rows, long long group_x
#define GEMV_PASS n_tok, rows, k, w, ld, scale, scale_ld, xq, sx, x, ldx, y, ldy, group_rows, group_x

/* Grid (ceil(rows/128), ceil(n_tok/8)), 128 threads; one signature for all. */
extern "C" __global__ void __launch_bounds__(ROWS) dsv4_k_linear_e4m3_ue8m0(GEMV_ARGS) {
  gemv_body<W_E4M3, 0>(GEMV_PASS);
}
extern "C" __global__ void __launch_bounds__(ROWS) dsv4_k_linear_e2m1_ue8m0(GEMV_ARGS) {
  gemv_body<W_E2M1, 0>(GEMV_PASS);
}
extern "C" __global__ void __launch_bounds__(ROWS) dsv4_k_linear_bf16(GEMV_ARGS) {
  gemv_body<W_BF16, 0>(GEMV_PASS);
}
extern "C" __global__ void __launch_bounds__(ROWS) dsv4_k_linear_bf16_f32out(GEMV_ARGS) {
  gemv_body<W_BF16, 1>(GEMV_PASS);
}
extern "C" __global__ void __launch_bounds__(ROWS) dsv4_k_linear_f32_f32out(GEMV_ARGS) {
  gemv_body<W_F32, 1>(GEMV_PASS);
}

/* Narrow variant (gemv_warp_body), same signature. */
extern "C" __global__ void __launch_bounds__(256) dsv4_k_linear_e4m3_ue8m0_warp(GEMV_ARGS) {
  (void)x, (void)ldx, (void)group_rows, (void)group_x;
  gemv_warp_body<W_E4M3>(n_tok, rows, k, w, ld, scale, scale_ld, xq, sx, static_cast<uint16_t *>(y), ldy);
}
extern "C" __global__ void __launch_bounds__(256) dsv4_k_linear_e2m1_ue8m0_warp(GEMV_ARGS) {
  (void)x, (void)ldx, (void)group_rows, (void)group_x;
  gemv_warp_body<W_E2M1>(n_tok, rows, k, w, ld, scale, scale_ld, xq, sx, static_cast<uint16_t *>(y), ldy);
}

/* fp8 weight -> bf16 (spec §3.2, the wo_a preparation at load; CPU oracle
 * dsv4i_wview_dequant_bf16): out[r][c] = bf16(e4m3(w[r][c]) · 2^(S[r/32][c/32] − 127)).
 * Grid (ceil(cols/256), rows), 256 threads. */
extern "C" __global__ void __launch_bounds__(256)
dsv4_k_dequant_e4m3_bf16(int rows, int cols, const unsigned char *w, long long ld,
                         const unsigned char *scale, long long scale_ld, uint16_t *out) {
  const int r = blockIdx.y, c = blockIdx.x * blockDim.x + threadIdx.x;
  if (r >= rows || c >= cols) return;
  const float v = dsv4i_e4m3_to_f32(w[(long long)r * ld + c]) *
                  dsv4i_e8m0_to_f32(scale[(long long)(r >> 5) * scale_ld + (c >> 5)]);
  out[(long long)r * cols + c] = dsv4i_f32_to_bf16(v);
}
