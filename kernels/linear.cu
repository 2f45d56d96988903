/*
 * Linear layers reading the checkpoint's bytes directly (spec §3.3; CPU
 * oracle lib/cpu/linear.c): fp8 (E4M3 + UE8M0 32x32 blocks) and MXFP4
 * (E2M1 + UE8M0 per row and 32 columns) weights on act_quant'ed
 * activations, bf16 weights with a bf16 or fp32 result (wo_a; the upcast
 * head / router gate), fp32 weights with an fp32 result.
 *
 * Every kernel here computes each output with the CPU oracle's operations in
 * its order, so results are bit-equal whatever the grid:
 *   fp8/fp4: p = Σ_{k in block} xq·wq (fp32, increasing k, from 0);
 *            acc += (p · sx[t][kb]) · sw;  y = bf16(acc)
 *   bf16/f32: acc = Σ_k x·w over all of K, increasing k, from 0.
 * (The build passes -fmad=false; the in-block products are exact — E4M3 ×
 * E4M3, bf16 × bf16 — so the kernels below write fmaf for multiply-then-add.)
 * Speed follows from that order: the per-block partials p of one output are
 * independent (K can be split over warps, their in-order sum through shared
 * memory), the whole-K bf16 chain is not (K stays in one thread).
 *
 * Kernels (grid.y walks the token chunks):
 * - fp8 (dsv4_k_linear_e4m3_ue8m0): tiles of 8, 16 or 32 rows, K blocks over
 *   8 warps, weights streamed by cp.async through shared memory; see below.
 * - bf16 -> fp32, the head and router gate (dsv4_k_linear_bf16_f32out):
 *   32 rows per warp, streamed by cp.async through a per-warp ring.
 * - MXFP4, bf16 -> bf16 (wo_a, grouped), fp32: one thread per output row,
 *   128 rows per block, TM tokens per block, the row's 32-column block
 *   decoded in registers and the activation tile staged in shared memory;
 *   the warp-per-row variants (*_warp) behind gpu_ops' warp_rows_max.
 * K must be a multiple of 32 and the weight rows 16-byte aligned (the
 * launcher checks).
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

/* Grid (ceil(rows/128), ceil(n_tok/8)), 128 threads; one signature for all
 * (fp8 and the bf16 -> fp32 head have their own kernels below). */
extern "C" __global__ void __launch_bounds__(ROWS) dsv4_k_linear_e2m1_ue8m0(GEMV_ARGS) {
  gemv_body<W_E2M1, 0>(GEMV_PASS);
}
extern "C" __global__ void __launch_bounds__(ROWS) dsv4_k_linear_bf16(GEMV_ARGS) {
  gemv_body<W_BF16, 0>(GEMV_PASS);
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

/* ---- fp8 projections: row tiles, K streamed through shared memory --------
 * Block = 8 warps over a tile of RT rows (8, 16 or 32: inside one UE8M0
 * scale row block) and all of K, in chunks of 256·(32/RT) bytes per row
 * (8 KB of weights): the chunk is copied by cp.async in 16-byte pieces (a
 * warp copies whole row segments, whole sectors), Q_STAGES chunks in flight.
 * Lane = (row lane % RT, sub-block lane / RT): warp w takes K block
 * w·(32/RT) + sub of the chunk, reads its row's 32 bytes from shared memory
 * (pieces XOR-swizzled by row, so 8 lanes of a phase hit distinct banks),
 * decodes them in registers and runs p = Σ_i xq·w (fmaf, i increasing, from
 * 0: the product of two E4M3 values is exact, so fmaf == the CPU's multiply
 * then add) and q = (p · sx) · sw for each token, x read from L1 at one
 * address per sub-block. The chunk's q go to shared memory, and one thread
 * per (row, token) adds them to its running sum in K-block order. Every
 * output is thus computed with the CPU oracle's operations in its order
 * (lib/cpu/linear.c qgemm_tile): bit-equal, and independent of the schedule.
 * Splitting K over the warps costs only the q round trip through shared
 * memory (4 bytes per 32 weight bytes per token); smaller RT gives more
 * blocks (a 5,120-row matrix: 160 blocks at RT 32, 640 at RT 8) at the cost
 * of more distinct x addresses per load.
 * Nothing the arithmetic waits for comes from global memory while it runs:
 * the tile's scale row is staged in shared memory first, and each chunk's
 * activations and act_quant scales are prefetched into L1 when its weights
 * are issued, Q_STAGES - 1 chunks ahead (a load issued only when needed
 * waits the full latency of a saturated memory system, microseconds).
 * Grid (ceil(rows/RT), ceil(n_tok/16)), 256 threads, 48 KB static shared;
 * RT comes in group_rows (the fp8 kernel has no row groups). */
#define Q_WARPS 8
#ifndef Q_STAGES
#define Q_STAGES 3 /* 2 chunks (16 KB) in flight per block */
#endif
#define Q_TOK 16
#define Q_CHUNK 8192 /* weight bytes per chunk */
#define Q_SROW 8192  /* the tile's UE8M0 scale row, staged whole: K <= 262,144 */

template <int RT>
__device__ __forceinline__ void q8_issue(int c, int nch, int tid, int o0, int rows, int nkb,
                                         const unsigned char *w, long long ld, unsigned char *ws) {
  constexpr int RSEG = Q_CHUNK / RT, PIECES = RSEG / 16; /* bytes, 16-byte pieces of a row per chunk */
  if (c < nch) {
    unsigned char *st = ws + (c % Q_STAGES) * Q_CHUNK;
#pragma unroll
    for (int h = 0; h < Q_CHUNK / 16 / 256; h++) {
      const int j = tid + 256 * h, r = j / PIECES, pc = j % PIECES;
      const bool ok = o0 + r < rows && c * (RSEG / 32) + (pc >> 1) < nkb;
      const unsigned char *src = ok ? w + (long long)(o0 + r) * ld + (long long)c * RSEG + pc * 16 : w;
      cp_async16(st + r * RSEG + ((pc ^ (r & 7)) << 4), src, ok ? 16 : 0);
    }
  }
  cp_async_commit(); /* an empty group past the end keeps the wait count uniform */
}

/* q of K block kb for tokens [0, nt) (NT >= nt), token by token (the
 * warps of the SM interleave their chains); into qs[t][j][row], j = the
 * block's index in the chunk.
 * wv: the weights × 2^-8 (e4m3x4_to_f32_s8), so p · 2^8 is the CPU's p. */
template <int NT, int RT>
__device__ __forceinline__ void q8_dot(int nt, int t0, int k, int kb, const float *wv, float sw,
                                       const float *xq, const float *sx, int nkb, float *qs, int j,
                                       int row) {
  constexpr int G = 1, NB = Q_CHUNK / RT / 32; /* G > 1 interleaves tokens: spills at 128 registers */
#pragma unroll
  for (int t = 0; t < NT; t += G) {
    if (t >= nt) break;
    const float4 *xr[G];
    float p[G];
#pragma unroll
    for (int g = 0; g < G; g++) {
      const int tt = t + g < nt ? t + g : nt - 1;
      xr[g] = reinterpret_cast<const float4 *>(xq + (long long)(t0 + tt) * k + kb * 32);
      p[g] = 0.0f;
    }
#pragma unroll
    for (int i = 0; i < 8; i++) {
#pragma unroll
      for (int g = 0; g < G; g++) {
        const float4 v = __ldg(xr[g] + i);
        p[g] = __fmaf_rn(v.x, wv[4 * i], p[g]);
        p[g] = __fmaf_rn(v.y, wv[4 * i + 1], p[g]);
        p[g] = __fmaf_rn(v.z, wv[4 * i + 2], p[g]);
        p[g] = __fmaf_rn(v.w, wv[4 * i + 3], p[g]);
      }
    }
#pragma unroll
    for (int g = 0; g < G; g++)
      if (t + g < nt)
        qs[((t + g) * NB + j) * RT + row] =
            __fmul_rn(__fmul_rn(__fmul_rn(p[g], 0x1p8f), sx[(long long)(t0 + t + g) * nkb + kb]), sw);
  }
}

__device__ __forceinline__ void prefetch_l1(const void *p) {
  asm volatile("prefetch.global.L1 [%0];\n" ::"l"(p));
}

/* Chunk c's activations (one 128-byte line per token and K block) and
 * act_quant scales (one line per token) into L1. */
__device__ __forceinline__ void q8_prefetch_x(int c, int nch, int nb_chunk, int tid, int nt, int t0, int k,
                                              int nkb, const float *xq, const float *sx) {
  if (c >= nch) return;
  for (int i = tid; i < nt * nb_chunk; i += 256) {
    const int t = i / nb_chunk, kb = c * nb_chunk + i % nb_chunk;
    if (kb < nkb) prefetch_l1(xq + (long long)(t0 + t) * k + kb * 32);
  }
  if (tid < nt) prefetch_l1(sx + (long long)(t0 + tid) * nkb + c * nb_chunk);
}

/* acc + q[0] + q[RT] + ... + q[(nb-1)·RT], in that order. */
template <int RT>
__device__ __forceinline__ float q8_sum(float acc, const float *q, int nb) {
  for (int b0 = 0; b0 < nb; b0 += 4) {
    float v[4];
#pragma unroll
    for (int i = 0; i < 4; i++) v[i] = b0 + i < nb ? q[(b0 + i) * RT] : 0.0f;
#pragma unroll
    for (int i = 0; i < 4; i++)
      if (b0 + i < nb) acc = __fadd_rn(acc, v[i]);
  }
  return acc;
}

template <int NT, int RT>
__device__ __forceinline__ void q8_tile(int n_tok, int rows, int k, const unsigned char *w, long long ld,
                                        const unsigned char *scale, long long scale_ld, const float *xq,
                                        const float *sx, uint16_t *y, long long ldy, unsigned char *ws,
                                        float *qs, unsigned char *ss) {
  constexpr int RSEG = Q_CHUNK / RT, NB = RSEG / 32; /* K blocks per chunk */
  const int tid = threadIdx.x, lane = tid & 31, wp = tid >> 5;
  const int row = lane % RT, j = wp * (32 / RT) + lane / RT; /* this thread's block in the chunk */
  const int o0 = blockIdx.x * RT, t0 = blockIdx.y * Q_TOK;
  const int nt = n_tok - t0 < NT ? n_tok - t0 : NT;
  const int nkb = k >> 5, nch = (nkb + NB - 1) / NB;
  const unsigned char *srow = scale + (long long)(o0 >> 5) * scale_ld;
  /* the ordered sums: (row pr % RT, token pr / RT) for pr = tid and tid + 256 */
  float acc0 = 0.0f, acc1 = 0.0f;
  const int pr0 = tid, pr1 = tid + 256;
#pragma unroll
  for (int c = 0; c < Q_STAGES - 1; c++) {
    q8_issue<RT>(c, nch, tid, o0, rows, nkb, w, ld, ws);
    q8_prefetch_x(c, nch, NB, tid, nt, t0, k, nkb, xq, sx);
  }
  for (int i = tid; i < nkb; i += 256) ss[i] = srow[i]; /* visible after the first barrier */
  for (int c = 0; c < nch; c++) {
    cp_async_wait<Q_STAGES - 2>();
    __syncthreads(); /* chunk c landed for every thread; chunk c-1 and its q consumed */
    q8_issue<RT>(c + Q_STAGES - 1, nch, tid, o0, rows, nkb, w, ld, ws);
    q8_prefetch_x(c + Q_STAGES - 1, nch, NB, tid, nt, t0, k, nkb, xq, sx);
    const int kb = c * NB + j;
    if (kb < nkb) {
      const unsigned char *st = ws + (c % Q_STAGES) * Q_CHUNK + row * RSEG;
      const uint4 a = *reinterpret_cast<const uint4 *>(st + (((2 * j) ^ (row & 7)) << 4));
      const uint4 b = *reinterpret_cast<const uint4 *>(st + (((2 * j + 1) ^ (row & 7)) << 4));
      float wv[32];
      e4m3x4_to_f32_s8(a.x, wv), e4m3x4_to_f32_s8(a.y, wv + 4), e4m3x4_to_f32_s8(a.z, wv + 8);
      e4m3x4_to_f32_s8(a.w, wv + 12), e4m3x4_to_f32_s8(b.x, wv + 16), e4m3x4_to_f32_s8(b.y, wv + 20);
      e4m3x4_to_f32_s8(b.z, wv + 24), e4m3x4_to_f32_s8(b.w, wv + 28);
      q8_dot<NT, RT>(nt, t0, k, kb, wv, dsv4i_e8m0_to_f32(ss[kb]), xq, sx, nkb, qs, j, row);
    }
    __syncthreads(); /* the chunk's q are in shared memory */
    const int nb = nkb - c * NB < NB ? nkb - c * NB : NB;
    /* four loads at a time (independent), then their sums in K-block order */
    if (pr0 < RT * nt) acc0 = q8_sum<RT>(acc0, qs + (pr0 / RT) * NB * RT + pr0 % RT, nb);
    if (RT * NT > 256 && pr1 < RT * nt) acc1 = q8_sum<RT>(acc1, qs + (pr1 / RT) * NB * RT + pr1 % RT, nb);
  }
  cp_async_wait<0>();
  if (pr0 < RT * nt && o0 + pr0 % RT < rows)
    y[(long long)(t0 + pr0 / RT) * ldy + o0 + pr0 % RT] = dsv4i_f32_to_bf16(acc0);
  if (RT * NT > 256 && pr1 < RT * nt && o0 + pr1 % RT < rows)
    y[(long long)(t0 + pr1 / RT) * ldy + o0 + pr1 % RT] = dsv4i_f32_to_bf16(acc1);
}

template <int RT>
__device__ __forceinline__ void q8_kernel(GEMV_ARGS, unsigned char *ws, float *qs, unsigned char *ss) {
  const int nt = n_tok - (int)blockIdx.y * Q_TOK;
  uint16_t *yb = static_cast<uint16_t *>(y);
#define Q8(NT) q8_tile<NT, RT>(n_tok, rows, k, w, ld, scale, scale_ld, xq, sx, yb, ldy, ws, qs, ss)
  if (nt <= 1) Q8(1);
  else if (nt <= 2) Q8(2);
  else if (nt <= 4) Q8(4);
  else if (nt <= 8) Q8(8);
  else Q8(16);
#undef Q8
}

extern "C" __global__ void __launch_bounds__(256, 2) dsv4_k_linear_e4m3_ue8m0(GEMV_ARGS) {
  __shared__ __align__(16) unsigned char ws[Q_STAGES * Q_CHUNK];
  __shared__ float qs[Q_TOK * Q_CHUNK / 32]; /* [token][block of the chunk][row] */
  __shared__ unsigned char ss[Q_SROW];
  if (group_rows == 8) q8_kernel<8>(GEMV_PASS, ws, qs, ss);
  else if (group_rows == 16) q8_kernel<16>(GEMV_PASS, ws, qs, ss);
  else q8_kernel<32>(GEMV_PASS, ws, qs, ss);
}

/* ---- the head (bf16 weight, fp32 logits): 32 rows per warp ---------------
 * The CPU oracle (lib/cpu/linear.c fgemm_tile) sums x·w over all of K in one
 * sequential fp32 chain per (row, token), so K cannot be split: a warp owns
 * 32 rows (lane = row) and streams them through its own shared-memory ring,
 * H_STAGES stages of 64 bytes per row, by cp.async (a warp copies eight
 * 64-byte row segments per instruction, whole sectors). x is converted to
 * fp32 once per warp and stage (lane = column) into shared memory and read
 * by all lanes at one address. acc = fmaf(x, w, acc), k increasing from 0:
 * a bf16 × bf16 product is exact in fp32, so this is the CPU's multiply then
 * add, bit for bit. Warps never wait for each other (no block barrier), so
 * the 1,010 blocks of the head drain without a tail of idle warps.
 * Few rows (the router gate: 384 rows, 12 warps in all) leave every warp
 * far more bytes than a 4-stage ring keeps in flight: there (group_rows 1)
 * the block's first warp alone takes the whole 16-stage ring.
 * Grid (ceil(rows/128), ceil(n_tok/16)), or ceil(rows/32) with group_rows 1;
 * 128 threads, 48 KB static shared. */
#define H_WARPS 4
#ifndef H_STAGES
#define H_STAGES 4
#endif
#define H_K 32                /* columns per row and stage */
#define H_SEG (32 * H_K * 2)  /* bytes per warp and stage: 2 KB */

template <int NS>
__device__ __forceinline__ void head_issue(int c, int nch, int lane, int o0, int rows, const uint16_t *w,
                                           long long ld, unsigned char *ws) {
  if (c < nch) {
    unsigned char *st = ws + (c % NS) * H_SEG;
#pragma unroll
    for (int h = 0; h < 4; h++) {
      const int j = lane + 32 * h, r = j >> 2, pc = j & 3;
      const bool ok = o0 + r < rows;
      const uint16_t *src = ok ? w + (long long)(o0 + r) * ld + (long long)c * H_K + pc * 8 : w;
      cp_async16(st + r * (H_K * 2) + ((pc ^ ((r >> 1) & 3)) << 4), src, ok ? 16 : 0);
    }
  }
  cp_async_commit();
}

template <int NT, int NS, int WPB>
__device__ __forceinline__ void head_tile(int n_tok, int rows, int k, const uint16_t *w, long long ld,
                                          const uint16_t *x, long long ldx, float *y, long long ldy,
                                          unsigned char *ws, float (*xs)[Q_TOK][32]) {
  const int lane = threadIdx.x & 31;
  const int o0 = ((int)blockIdx.x * WPB + (int)(threadIdx.x >> 5)) * 32, t0 = blockIdx.y * Q_TOK;
  if (o0 >= rows) return; /* warp-uniform; only warp barriers below */
  const int nt = n_tok - t0 < NT ? n_tok - t0 : NT;
  const int nch = k / H_K;
  const uint16_t *xt = x + (long long)t0 * ldx + lane;
  float acc[NT];
  uint16_t xr[NT];
#pragma unroll
  for (int t = 0; t < NT; t++) acc[t] = 0.0f, xr[t] = t < nt ? xt[(long long)t * ldx] : 0;
#pragma unroll
  for (int c = 0; c < NS - 1; c++) head_issue<NS>(c, nch, lane, o0, rows, w, ld, ws);
  for (int c = 0; c < nch; c++) {
    float(*xc)[32] = xs[c & 1];
#pragma unroll
    for (int t = 0; t < NT; t++) xc[t][lane] = dsv4i_bf16_to_f32(xr[t]);
    if (c + 1 < nch)
#pragma unroll
      for (int t = 0; t < NT; t++) xr[t] = t < nt ? xt[(long long)t * ldx + (c + 1) * H_K] : 0;
    cp_async_wait<NS - 2>();
    __syncwarp(); /* stage c and x of chunk c visible to the warp; stage c-1 consumed */
    head_issue<NS>(c + NS - 1, nch, lane, o0, rows, w, ld, ws);
    /* x of chunk c + NS - 1 into L1 (lane = token), so its load above never
     * waits for the saturated memory system */
    if (lane < nt && c + NS - 1 < nch) prefetch_l1(xt - lane + (long long)lane * ldx + (c + NS - 1) * H_K);
    const unsigned char *st = ws + (c % NS) * H_SEG + lane * (H_K * 2);
    float wv[H_K];
#pragma unroll
    for (int pc = 0; pc < 4; pc++) {
      const uint4 u = *reinterpret_cast<const uint4 *>(st + ((pc ^ ((lane >> 1) & 3)) << 4));
      const uint32_t words[4] = {u.x, u.y, u.z, u.w};
#pragma unroll
      for (int i = 0; i < 4; i++) {
        wv[pc * 8 + 2 * i] = __uint_as_float(words[i] << 16);
        wv[pc * 8 + 2 * i + 1] = __uint_as_float(words[i] & 0xFFFF0000u);
      }
    }
#pragma unroll
    for (int i = 0; i < H_K / 4; i++) {
#pragma unroll
      for (int t = 0; t < NT; t++) {
        const float4 v = *reinterpret_cast<const float4 *>(&xc[t][4 * i]);
        acc[t] = __fmaf_rn(v.x, wv[4 * i], acc[t]);
        acc[t] = __fmaf_rn(v.y, wv[4 * i + 1], acc[t]);
        acc[t] = __fmaf_rn(v.z, wv[4 * i + 2], acc[t]);
        acc[t] = __fmaf_rn(v.w, wv[4 * i + 3], acc[t]);
      }
    }
    __syncwarp(); /* stage c and xs[c & 1] consumed */
  }
  cp_async_wait<0>();
  const int o = o0 + lane;
  if (o >= rows) return;
#pragma unroll
  for (int t = 0; t < NT; t++)
    if (t < nt) y[(long long)(t0 + t) * ldy + o] = acc[t];
}

template <int NS, int WPB>
__device__ __forceinline__ void head_kernel(GEMV_ARGS, unsigned char *ws, float (*xs)[Q_TOK][32]) {
  const int nt = n_tok - (int)blockIdx.y * Q_TOK;
  const uint16_t *wb = reinterpret_cast<const uint16_t *>(w);
  float *yf = static_cast<float *>(y);
#define HD(NT) head_tile<NT, NS, WPB>(n_tok, rows, k, wb, ld, x, ldx, yf, ldy, ws, xs)
  if (nt <= 1) HD(1);
  else if (nt <= 2) HD(2);
  else if (nt <= 4) HD(4);
  else if (nt <= 8) HD(8);
  else HD(16);
#undef HD
}

extern "C" __global__ void __launch_bounds__(H_WARPS * 32, 4) dsv4_k_linear_bf16_f32out(GEMV_ARGS) {
  (void)xq, (void)sx, (void)scale, (void)scale_ld, (void)group_x;
  __shared__ __align__(16) unsigned char ws[H_WARPS * H_STAGES * H_SEG];
  __shared__ __align__(16) float xs[H_WARPS][2][Q_TOK][32];
  const int wp = threadIdx.x >> 5;
  if (group_rows == 1) { /* one warp per block, the whole ring */
    if (wp == 0) head_kernel<H_WARPS * H_STAGES, 1>(GEMV_PASS, ws, xs[0]);
  } else {
    head_kernel<H_STAGES, H_WARPS>(GEMV_PASS, ws + wp * (H_STAGES * H_SEG), xs[wp]);
  }
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

/* ---- TP shards (docs/distributed.md "GPU TP shards") ------------------------
 * A TP rank's fp8 projection over its share of K (wo_b), fp32 out: the ranks'
 * sums meet in the all-reduce before the one bf16 rounding of the reference,
 * so TP changes only where fp32 partial sums are added. gemv_body's order (K
 * blocks ascending). Grid (ceil(rows/128), ceil(n_tok/8)), 128 threads. */
extern "C" __global__ void __launch_bounds__(ROWS) dsv4_k_linear_e4m3_ue8m0_f32out(GEMV_ARGS) {
  gemv_body<W_E4M3, 1>(GEMV_PASS);
}

/* y[i] = bf16(x[i]) for i < n (round to nearest even, dsv4i_f32_to_bf16): the all-reduced
 * fp32 sums rounded where the reference rounds. Grid ceil(n/256), 256 threads. */
extern "C" __global__ void __launch_bounds__(256)
dsv4_k_cast_f32_bf16(long long n, const float *x, uint16_t *y) {
  const long long i = (long long)blockIdx.x * 256 + threadIdx.x;
  if (i < n) y[i] = dsv4i_f32_to_bf16(x[i]);
}
