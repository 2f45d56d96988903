/*
 * fp8 projections in the default ("tiled") numerics mode (docs/gpu-dense.md
 * "Numerics modes"; CPU oracle lib/cpu/linear.c qgemm_tile): E4M3 weights
 * with UE8M0 32x32 block scales on act_quant'ed activations, on the tensor
 * cores (mma.sync m16n8k16, fp16 operands, fp32 accumulators).
 *
 * What equals the CPU and what does not:
 * - every operand is exact: an act_quant code's E4M3 value is an fp16
 *   normal, a weight's E4M3 value times 2^-8 is an fp16 (two bit operations;
 *   subnormal codes land on fp16 subnormals), so every product xq·w·2^-8 is
 *   exact in fp32 (a multiple of 2^-26);
 * - per 32-column block, p = Σ xq·w comes from two mma steps started at 0
 *   (the CPU: one sequential fp32 chain): the order of that sum changes;
 * - q = p · sx · sw and acc += q keep the CPU's operations: acc =
 *   fmaf(p, sx · (sw · 2^8), acc), equal to acc + (p·sx)·sw rounded once,
 *   which is the CPU's value whenever p·sx and q are normal fp32 numbers
 *   (the scales are powers of two, so those products are exact; sw · 2^8
 *   and sx · sw · 2^8 are exact below 2^128 and above 2^-149, far outside
 *   the scales a quantiser gives);
 * - K blocks are summed in increasing order within each of KL lanes (warps),
 *   and the lanes' sums added in lane order: ((s0 + s1) + s2) + s3.
 * The order depends only on K: a token's result does not depend on the
 * other tokens of the launch, on the grid or on the schedule (no atomics).
 * The test bound (tests/gpu/test_cuda_ops.c) is derived in docs/gpu-dense.md.
 *
 * Kernel: a block of 8 warps owns 32 rows (two m16 tiles) and all of K.
 * Warp w takes row tile w & 1 and K lane w >> 1: of every stage of 256
 * columns (8 K blocks), lane kl computes blocks 2·kl and 2·kl + 1. Weights
 * stream through a T_NS-stage ring in shared memory by cp.async (16-byte
 * pieces, XOR-swizzled by row so ldmatrix reads without bank conflicts);
 * ldmatrix.x4 gives a thread 4 bytes of rows gid and gid + 8 at columns
 * 4·tig and 16 + 4·tig of a block, which two bit operations turn into the
 * A fragments (even bytes and odd bytes: the K order inside a block is
 * permuted, the activations use the same permutation). Activations: per
 * stage, 16 (or 8) tokens × 256 columns as fp16 in that permuted order,
 * and their act_quant scales, either quantised by the block itself from the
 * bf16 rows (fused: few tokens) or copied from the prepass
 * dsv4_k_act_quant_e4m3_f16 (more tokens: one quantisation per launch
 * instead of one per row block). Tokens are the mma's N (8 per tile, padded
 * with zeros). Dynamic shared memory (the launcher sets it).
 */
#include "gemv.cuh"
#include <cuda_fp16.h>

#include "mma.cuh"

#define T_RB 32   /* rows per block */
#define T_SK 256  /* K columns (weight bytes per row) per stage */
#define T_NBS 8   /* K blocks per stage */
#define T_KL 4    /* K lanes: warps per row tile */
#ifndef T_NS
#define T_NS 4 /* stages in the ring */
#endif
#define T_BROW (T_SK * 2 + 64) /* bytes per token row of a B stage (≡ 64 mod 128: no bank conflicts) */
#define T_ASTAGE (T_RB * T_SK)
#define T_XPF (2 * T_NS - 2) /* fused act_quant: x prefetched into L1 this many stages ahead */
/* K split over blocks for matrices of few row blocks (the launcher's
 * q8_splits: ks = min(stages / 4, T_SPREAD / row blocks), from the shape
 * alone): each split's sums go to this module's scratch and the row block's
 * last block to finish (a counter it resets itself) adds them in split order.
 * At most T_MAXTY token chunks a launch with ks > 1 (the launcher slices). */
#define T_SPREAD 512
#define T_MAXTY 4
__device__ float q8_scr[T_MAXTY][T_SPREAD][T_RB * 16];
__device__ unsigned int q8_cnt[T_MAXTY][T_SPREAD];

/* The fp16 of E4M3 code b (exact: every E4M3 value is an fp16 normal; NaN stays NaN), as bits. */
__device__ __forceinline__ uint16_t t_e4m3_f16(uint8_t b) {
  return __half_as_ushort(__float2half_rn(dsv4i_e4m3_to_f32(b)));
}

/* Element k (0..31) of a K block at this position (in halves) of its
 * permuted 64-byte record: thread tig reads halves [8·tig, 8·tig + 8) =
 * the B fragments {k 4tig, 4tig+2}, {4tig+1, 4tig+3}, the same + 16. */
__device__ __forceinline__ int t_perm(int k) {
  const int hi = k >> 4, r = k & 15, tig = r >> 2, j = r & 3;
  return tig * 8 + hi * 4 + (j & 1) * 2 + (j >> 1);
}

/* act_quant of one block of 32 (lane = element) to its permuted fp16
 * record at dst (64 bytes) and its scale (returned, lane 0 stores it). */
__device__ __forceinline__ float t_quant_block(uint16_t v, unsigned char *dst, int lane) {
  const uint32_t amax = __reduce_max_sync(0xFFFFFFFFu, dsv4i_bf16_abs_bits(v));
  const int32_t e = dsv4i_act_quant_exp(amax);
  reinterpret_cast<uint16_t *>(dst)[t_perm(lane)] = t_e4m3_f16(dsv4i_act_quant_code(v, e));
  return dsv4i_e8m0_to_f32(dsv4i_act_quant_scale(e));
}

/* Prepass: act_quant of x bf16 [n][ldx] into out: fp16 records [n][k]
 * (halves, permuted per block of 32), then sx f32 [n][ldsx] at byte
 * n·k·2 (ldsx = nkb rounded up to 8, the rows 16-byte aligned). One warp
 * per block; grid ceil(n·nkb / 8), 256 threads. */
extern "C" __global__ void __launch_bounds__(256)
dsv4_k_act_quant_e4m3_f16(int n_tok, int k, const uint16_t *x, long long ldx, unsigned char *out) {
  const long long blk = (long long)blockIdx.x * 8 + (threadIdx.x >> 5);
  const int lane = threadIdx.x & 31, nkb = k / 32, ldsx = (nkb + 7) & ~7;
  if (blk >= (long long)n_tok * nkb) return;
  const long long t = blk / nkb;
  const int b = (int)(blk % nkb);
  const float s = t_quant_block(x[t * ldx + b * 32 + lane], out + (t * k + b * 32) * 2, lane);
  if (lane == 0) reinterpret_cast<float *>(out + (long long)n_tok * k * 2)[t * ldsx + b] = s;
}

/* The A fragments of one m16 x k32 block: r0..r3 from ldmatrix (rows gid /
 * gid + 8, columns 4tig.. and 16 + 4tig..), each split into its even bytes
 * (columns 4tig, 4tig + 2) and odd bytes (4tig + 1, 4tig + 3) as fp16 pairs. */
/* prmt gives per half (byte, its sign replicated): shifted by 7 the byte's
 * 7 magnitude bits land on fp16 bits 7-13 and the sign on bit 15; the mask
 * clears the rest (three operations a pair). */
__device__ __forceinline__ uint32_t t_pair(uint32_t u, uint32_t sel) {
  uint32_t t;
  asm("prmt.b32 %0, %1, 0, %2;" : "=r"(t) : "r"(u), "r"(sel));
  return (t << 7) & 0xBF80BF80u;
}
__device__ __forceinline__ uint32_t t_even(uint32_t u) { return t_pair(u, 0xA280u); } /* bytes 0, 2 */
__device__ __forceinline__ uint32_t t_odd(uint32_t u) { return t_pair(u, 0xB391u); }  /* bytes 1, 3 */

struct t_smem {
  unsigned char *a, *b; /* rings: [T_NS][T_RB][T_SK] weights, [T_NS][NTP][T_BROW] activations */
  float *sx;            /* [T_NS][T_NBS][NTP] act_quant scales (a K block's tokens side by side) */
  float *sw;            /* the row block's scales over this block's K range, times 2^8 */
};

/* Stage c's weights (and, from the prepass, activations and scales) by cp.async; one commit group. */
template <int NTP, int FUSED>
__device__ __forceinline__ void t_issue(int c, int c0, int nch, int tid, int o0, int rows, int nkb, int nt,
                                        int k, const unsigned char *w, long long ld, const unsigned char *pre,
                                        const unsigned char *psx, int ldsx, int t0, const t_smem &sm) {
  if (c < nch) {
    const int ca = c0 + c; /* the stage's place in K (c: its place in this block's range) */
    unsigned char *as = sm.a + (c % T_NS) * T_ASTAGE;
#pragma unroll
    for (int h = 0; h < T_ASTAGE / 16 / 256; h++) {
      const int j = tid + 256 * h, r = j >> 4, pc = j & 15;
      const bool ok = o0 + r < rows && ca * T_NBS + (pc >> 1) < nkb;
      const unsigned char *src = ok ? w + (long long)(o0 + r) * ld + (long long)ca * T_SK + pc * 16 : w;
      cp_async16(as + r * T_SK + ((pc ^ (r & 7)) << 4), src, ok ? 16 : 0);
    }
    if (!FUSED) {
      unsigned char *bs = sm.b + (c % T_NS) * NTP * T_BROW;
      for (int j = tid; j < nt * 32; j += 256) { /* 32 pieces of 16 bytes per token row */
        const int t = j >> 5, pc = j & 31;
        const bool ok = ca * T_NBS + (pc >> 2) < nkb;
        const unsigned char *src = ok ? pre + ((long long)(t0 + t) * k + (long long)ca * T_SK) * 2 + pc * 16 : pre;
        cp_async16(bs + t * T_BROW + pc * 16, src, ok ? 16 : 0);
      }
      if (tid < T_NBS * nt) { /* 8 scales per token, stored K block major */
        const int t = tid >> 3, kbl = tid & 7;
        const bool ok = ca * T_NBS + kbl < nkb;
        const unsigned char *src = ok ? psx + ((long long)(t0 + t) * ldsx + ca * T_NBS + kbl) * 4 : psx;
        cp_async4(sm.sx + ((c % T_NS) * T_NBS + kbl) * NTP + t, src, ok ? 4 : 0);
      }
    }
  }
  cp_async_commit(); /* empty groups past the end keep the wait count uniform */
}

/* Fused act_quant of stage c: warp wp quantises K block wp of the stage for every token. */
template <int NTP>
__device__ __forceinline__ void t_quant_stage(int c, int c0, int nch, int nkb, int nt, int wp, int lane,
                                              const uint16_t *xr, const t_smem &sm) {
  if (c >= nch || (c0 + c) * T_NBS + wp >= nkb) return;
  unsigned char *bs = sm.b + (c % T_NS) * NTP * T_BROW + wp * 64;
#pragma unroll
  for (int t = 0; t < NTP; t++) {
    if (t >= nt) break;
    const float s = t_quant_block(xr[t], bs + t * T_BROW, lane);
    if (lane == 0) sm.sx[((c % T_NS) * T_NBS + wp) * NTP + t] = s;
  }
}

template <int NTP>
__device__ __forceinline__ void t_load_x(int c, int c0, int nch, int nkb, int nt, int wp, int lane, int t0,
                                         const uint16_t *x, long long ldx, uint16_t *xr) {
  const bool ok = c < nch && (c0 + c) * T_NBS + wp < nkb;
#pragma unroll
  for (int t = 0; t < NTP; t++)
    xr[t] = ok && t < nt ? x[(long long)(t0 + t) * ldx + ((c0 + c) * T_NBS + wp) * 32 + lane] : (uint16_t)0;
}

/* x rows of stage c into L1 (one 64-byte line per token for this warp's
 * K block), T_XPF stages ahead: the register loads of t_load_x then hit. */
template <int NTP>
__device__ __forceinline__ void t_prefetch_x(int c, int c0, int nch, int nkb, int nt, int wp, int lane, int t0,
                                             const uint16_t *x, long long ldx) {
  if (lane < nt && c < nch && (c0 + c) * T_NBS + wp < nkb)
    asm volatile("prefetch.global.L1 [%0];\n" ::"l"(x + (long long)(t0 + lane) * ldx + ((c0 + c) * T_NBS + wp) * 32));
}

template <int NTP, int FUSED>
__device__ __forceinline__ void t_tile(int n_tok, int rows, int k, const unsigned char *w, long long ld,
                                       const unsigned char *scale, long long scale_ld, const uint16_t *x,
                                       long long ldx, const unsigned char *pre, const unsigned char *psx,
                                       uint16_t *y, long long ldy, int ks, unsigned char *smem) {
  constexpr int NJ = NTP / 8; /* n8 tiles */
  const int tid = threadIdx.x, lane = tid & 31, wp = tid >> 5, gid = lane >> 2, tig = lane & 3;
  const int rt = wp & 1, kl = wp >> 1;
  const int rb = blockIdx.x / ks, split = blockIdx.x % ks, o0 = rb * T_RB, t0 = blockIdx.y * NTP;
  const int nt = n_tok - t0 < NTP ? n_tok - t0 : NTP;
  const int nkb = k >> 5, nch_all = (nkb + T_NBS - 1) / T_NBS, ldsx = (nkb + 7) & ~7;
  /* this block's stages of K: [c0, c0 + nch) (split of ks, by the shape alone) */
  const int c0 = split * nch_all / ks, nch = (split + 1) * nch_all / ks - c0;
  t_smem sm;
  sm.a = smem;
  sm.b = sm.a + T_NS * T_ASTAGE;
  sm.sx = reinterpret_cast<float *>(sm.b + T_NS * NTP * T_BROW);
  sm.sw = sm.sx + T_NS * NTP * T_NBS;
  /* padding tokens: zero activations and scales, once (never written again) */
  for (int i = tid; i < T_NS * NTP * T_BROW / 16; i += 256) {
    const int t = (i / (T_BROW / 16)) % NTP;
    if (t >= nt) reinterpret_cast<uint4 *>(sm.b)[i] = make_uint4(0, 0, 0, 0);
  }
  for (int i = tid; i < T_NS * NTP * T_NBS; i += 256)
    if (i % NTP >= nt) sm.sx[i] = 0.0f;
  /* the first T_NS - 1 stages in flight before anything waits for memory */
#pragma unroll
  for (int c = 0; c < T_NS - 1; c++)
    t_issue<NTP, FUSED>(c, c0, nch, tid, o0, rows, nkb, nt, k, w, ld, pre, psx, ldsx, t0, sm);
  uint16_t xr[FUSED ? NTP : 1];
  if (FUSED)
    for (int c = 0; c < T_XPF; c++) t_prefetch_x<NTP>(c, c0, nch, nkb, nt, wp, lane, t0, x, ldx);
  /* this block's K blocks [kb0, kb0 + nkw): their weight scales times 2^8 (the fp16 weights are
   * E4M3 values times 2^-8), visible after the first barrier */
  const int kb0 = c0 * T_NBS, nkw = min(nch * T_NBS, nkb - kb0);
  const unsigned char *srow = scale + (long long)(o0 >> 5) * scale_ld + kb0;
  for (int i = tid; i < nkw; i += 256) sm.sw[i] = dsv4i_e8m0_to_f32(srow[i]) * 0x1p8f;
  if (FUSED) {
    for (int c = 0; c < T_NS - 1; c++) {
      t_load_x<NTP>(c, c0, nch, nkb, nt, wp, lane, t0, x, ldx, xr);
      t_quant_stage<NTP>(c, c0, nch, nkb, nt, wp, lane, xr, sm);
    }
    t_load_x<NTP>(T_NS - 1, c0, nch, nkb, nt, wp, lane, t0, x, ldx, xr);
  }
  float acc[NJ][4];
#pragma unroll
  for (int j = 0; j < NJ; j++) acc[j][0] = acc[j][1] = acc[j][2] = acc[j][3] = 0.0f;
  /* ldmatrix row address of this lane: matrix lane >> 3 (rows +8 for odd, columns +16 for >= 2) */
  const int lr = rt * 16 + ((lane >> 3) & 1) * 8 + (lane & 7), lhi = lane >> 4;
  for (int c = 0; c < nch; c++) {
    cp_async_wait<T_NS - 2>();
    __syncthreads(); /* stage c landed (and was quantised) for every thread; stage c-1 consumed */
    if (FUSED) {
      t_quant_stage<NTP>(c + T_NS - 1, c0, nch, nkb, nt, wp, lane, xr, sm);
      t_prefetch_x<NTP>(c + T_XPF, c0, nch, nkb, nt, wp, lane, t0, x, ldx);
      t_load_x<NTP>(c + T_NS, c0, nch, nkb, nt, wp, lane, t0, x, ldx, xr);
    }
    t_issue<NTP, FUSED>(c + T_NS - 1, c0, nch, tid, o0, rows, nkb, nt, k, w, ld, pre, psx, ldsx, t0, sm);
    const unsigned char *as = sm.a + (c % T_NS) * T_ASTAGE + lr * T_SK;
    const unsigned char *bs = sm.b + (c % T_NS) * NTP * T_BROW + gid * T_BROW + tig * 16;
    const float *sxs = sm.sx + (c % T_NS) * NTP * T_NBS;
#pragma unroll
    for (int i = 0; i < 2; i++) {
      const int kbl = kl * 2 + i, kb = (c0 + c) * T_NBS + kbl;
      if (kb >= nkb) break; /* warp-uniform */
      uint32_t r[4];
      ldmatrix_x4(r, as + (((kbl * 2 + lhi) ^ (lr & 7)) << 4));
      const uint32_t a0 = t_even(r[0]), a1 = t_even(r[1]), a2 = t_odd(r[0]), a3 = t_odd(r[1]);
      const uint32_t a4 = t_even(r[2]), a5 = t_even(r[3]), a6 = t_odd(r[2]), a7 = t_odd(r[3]);
      const float sw8 = sm.sw[kb - kb0];
#pragma unroll
      for (int j = 0; j < NJ; j++) {
        const uint4 b = *reinterpret_cast<const uint4 *>(bs + j * 8 * T_BROW + kbl * 64);
        float p[4] = {0.0f, 0.0f, 0.0f, 0.0f};
        mma_f16(p, a0, a1, a2, a3, b.x, b.y);
        mma_f16(p, a4, a5, a6, a7, b.z, b.w);
        const float2 sx2 = *reinterpret_cast<const float2 *>(sxs + kbl * NTP + j * 8 + 2 * tig);
        const float s0 = sx2.x * sw8, s1 = sx2.y * sw8;
        acc[j][0] = __fmaf_rn(p[0], s0, acc[j][0]);
        acc[j][1] = __fmaf_rn(p[1], s1, acc[j][1]);
        acc[j][2] = __fmaf_rn(p[2], s0, acc[j][2]);
        acc[j][3] = __fmaf_rn(p[3], s1, acc[j][3]);
      }
    }
  }
  cp_async_wait<0>();
  __syncthreads(); /* every ring read done: the A ring holds the lanes' sums now */
  float *red = reinterpret_cast<float *>(sm.a); /* [T_KL][NTP][T_RB] */
#pragma unroll
  for (int j = 0; j < NJ; j++) {
    const int tk = j * 8 + 2 * tig, row = rt * 16 + gid;
    red[(kl * NTP + tk) * T_RB + row] = acc[j][0];
    red[(kl * NTP + tk + 1) * T_RB + row] = acc[j][1];
    red[(kl * NTP + tk) * T_RB + row + 8] = acc[j][2];
    red[(kl * NTP + tk + 1) * T_RB + row + 8] = acc[j][3];
  }
  __syncthreads();
  float v[2]; /* (row i % 32, token i / 32) for i = tid and tid + 256 */
#pragma unroll
  for (int h = 0; h < 2; h++) {
    const int i = tid + 256 * h, t = i / T_RB, row = i % T_RB;
    v[h] = 0.0f;
    if (t < NTP) {
      v[h] = red[t * T_RB + row];
#pragma unroll
      for (int l = 1; l < T_KL; l++) v[h] = __fadd_rn(v[h], red[(l * NTP + t) * T_RB + row]);
    }
  }
  if (ks > 1) { /* block-uniform: the splits' sums meet in the row block's last block, in split order */
    __shared__ int last_s;
    float *scr = q8_scr[blockIdx.y][rb * ks];
#pragma unroll
    for (int h = 0; h < 2; h++) scr[split * (T_RB * 16) + tid + 256 * h] = v[h];
    __threadfence();
    __syncthreads();
    if (tid == 0) {
      const unsigned int done = atomicAdd(&q8_cnt[blockIdx.y][rb], 1u);
      last_s = done == (unsigned int)ks - 1u;
      if (last_s) q8_cnt[blockIdx.y][rb] = 0u; /* every split has counted: ready for the next launch */
    }
    __syncthreads();
    if (!last_s) return;
    __threadfence();
#pragma unroll
    for (int h = 0; h < 2; h++) {
      v[h] = __ldcg(scr + tid + 256 * h);
      for (int b = 1; b < ks; b++) v[h] = __fadd_rn(v[h], __ldcg(scr + b * (T_RB * 16) + tid + 256 * h));
    }
  }
#pragma unroll
  for (int h = 0; h < 2; h++) {
    const int i = tid + 256 * h, t = i / T_RB, row = i % T_RB;
    if (t < nt && o0 + row < rows) y[(long long)(t0 + t) * ldy + o0 + row] = dsv4i_f32_to_bf16(v[h]);
  }
}

/* y bf16 [n][ldy] = linear(w, act_quant(x)): x bf16 [n][ldx] when fused
 * (pre, psx unused), else the prepass output of these n tokens: their fp16
 * records at pre ([n][k] halves), their scales at psx ([n][ldsx] f32). ntp: 8 or
 * 16 tokens per block (the launch's dynamic shared memory is sized for it);
 * fused only with ntp 8. ks: K splits (q8_splits). Grid (ceil(rows/32)·ks,
 * ceil(n/ntp) <= T_MAXTY when ks > 1), 256 threads. */
extern "C" __global__ void __launch_bounds__(256, 4)
dsv4_k_linear_e4m3_ue8m0_tiled(int n_tok, int rows, int k, const unsigned char *w, long long ld,
                               const unsigned char *scale, long long scale_ld, const uint16_t *x,
                               long long ldx, const unsigned char *pre, const unsigned char *psx,
                               uint16_t *y, long long ldy, int ntp, int fused, int ks) {
  extern __shared__ __align__(16) unsigned char t_dyn[];
  if (fused) t_tile<8, 1>(n_tok, rows, k, w, ld, scale, scale_ld, x, ldx, pre, psx, y, ldy, ks, t_dyn);
  else if (ntp == 8) t_tile<8, 0>(n_tok, rows, k, w, ld, scale, scale_ld, x, ldx, pre, psx, y, ldy, ks, t_dyn);
  else t_tile<16, 0>(n_tok, rows, k, w, ld, scale, scale_ld, x, ldx, pre, psx, y, ldy, ks, t_dyn);
}
