/*
 * MoE experts of a step in the default ("tiled") numerics mode
 * (docs/gpu-dense.md "Numerics modes"; the CPU-order kernels are moe.cu):
 * every routed expert the step chose and the shared expert, in three
 * launches:
 *   moe_prep: act_quant(x) as bf16 (xq·sx is exact in bf16) in the
 *             fragment order of each weight format; the route table
 *   moe_up:   gate and up projections of (expert, 16-row tile) blocks,
 *             SwiGLU fused; the second block of each 32-row group does the
 *             act_quant of the group's activations (an integer counter)
 *   moe_down: down projection of (expert, 32-row tile) blocks; the last
 *             block of each row tile sums the experts per token (counter)
 *   moe_updown: moe_up's and moe_down's blocks as one launch (the down
 *             blocks of an expert wait for its activations; same bits)
 * grid.y walks the step's experts (the shared one first, then the distinct
 * routed ids in ascending order, from the route table), grid.x the tiles,
 * so a single token fills the GPU (release dims: 144 up and 160 down blocks
 * per expert). Each block's 4 warps split K (chunk i of 128 columns goes to
 * warp i mod 4) and stream their weights, scale bytes and activation words
 * through a 3-stage cp.async ring per thread (55 KB of dynamic shared memory
 * a block, 4 blocks per SM; each thread reads back only what it copied
 * itself, so no barrier; a thread whose token column is empty copies no
 * activation words); a pass serves up to 8 tokens (one n8 tile), more
 * tokens take more passes over the same tile.
 *
 * Arithmetic: mma.sync m16n8k16, bf16 inputs, fp32 accumulators. A = the
 * weights decoded in registers to bf16 and multiplied by their UE8M0 block
 * scale (w·sw: an e2m1 or e4m3 value times a power of two, exact in bf16),
 * B = the activations xq·sx (exact in bf16). Every product is exact, so the
 * result is the CPU's sum of the same terms in another order: the mma's
 * internal order within 16 columns, each warp's chunks in increasing K, the
 * 4 warps' partials added in warp order. That order depends only on K (not
 * on the tokens, the batch or the schedule): deterministic and batch
 * invariant (a token is one column of B; columns never mix). Every rounding
 * point of the reference stays: g, u and the expert outputs rounded to bf16
 * after their sums, the clamps, SwiGLU with torch's exp, the routing weight,
 * act_quant of the activations, the per-token sum in ascending expert id
 * with the shared expert last, out = bf16.
 *
 * Decoding (2 bit operations and a multiply per weight pair): a bf16 pair
 * holds two elements 4 apart (fp4) or 2 apart (fp8) of one 32-bit word,
 * sign to bit 15/31 and magnitude bits to the exponent's low bits and the
 * mantissa: e2m1 gives its value · 2^-126 (0.5 lands on a subnormal), e4m3
 * its value · 2^-120; one bf16x2 fma by 2^(s-1) resp. 2^(s-7) (s the scale
 * byte) makes w·sw exactly. Scale bytes above 128 (fp4) / 134 (fp8), past
 * bf16's largest power of two, take a second multiply (warp-uniform branch);
 * 255 (NaN) gives NaN. e4m3 NaN codes are found by a word-wide test and
 * make their output row NaN, as on the CPU. The activation copy xb holds
 * the same element pairs in the same word order (perm_e2m1 / perm_e4m3), so
 * a thread's B fragment is 16 consecutive words of one 32-block.
 */
#include "gemv.cuh"
#include "mma.cuh"
#include "moe_route.cuh"
#include "model/ref_math.h"

#define NW 4         /* warps per block */
#define NT (NW * 32) /* threads per block */
#define RING 3       /* cp.async stages per thread */
#define TOKS 8       /* tokens per pass (one n8 tile) */
#define UP_ROWS 16   /* rows per moe_up block (one m16 tile of w1 and of w3) */
#define DN_ROWS 32   /* rows per moe_down block (two m16 tiles of w2) */
#define PREP_IDX 2048 /* router ids moe_prep's route block keeps in shared memory */

/* Position (in bf16 elements) of element i of a 32-block in the fragment
 * order: word q holds the bf16 pair the weight decoder makes as its q-th. */
__device__ __forceinline__ int perm_e2m1(int i) {
  const int j = i >> 3, r = i & 7; /* word j, pair (r & 3) = elements (8j + p, 8j + p + 4) */
  return 2 * (4 * j + (r & 3)) + (r >> 2);
}
__device__ __forceinline__ int perm_e4m3(int i) {
  const int h = i >> 4, j = (i >> 2) & 3, r = i & 3; /* half h, word j, pair (r & 1) = bytes (p, p + 2) */
  return 2 * (8 * h + 2 * j + (r & 1)) + (r >> 1);
}

/* Eight e2m1 codes (one word, elements 0..7) -> four bf16 pairs of value ·
 * 2^-126: pair p = (element p, element p + 4). t·(2^6 + 2^12) puts a nibble's
 * magnitude at bits 8..6 and its sign at 15 (no carries: the two copies do
 * not overlap); the mask keeps those. */
__device__ __forceinline__ void dec_e2m1(uint32_t w, uint32_t (&r)[4]) {
  const uint32_t m = 0x81C081C0u, v = w >> 8;
  r[0] = ((w & 0x000F000Fu) * 4160u) & m;
  r[1] = ((w & 0x00F000F0u) * 260u) & m;
  r[2] = ((v & 0x000F000Fu) * 4160u) & m;
  r[3] = ((v & 0x00F000F0u) * 260u) & m;
}

/* Four e4m3 codes (one word) -> two bf16 pairs of value · 2^-120: pair 0 =
 * (byte 0, byte 2), pair 1 = (byte 1, byte 3); exponent and mantissa to bits
 * 10..4, sign to 15. */
__device__ __forceinline__ void dec_e4m3(uint32_t w, uint32_t (&r)[2]) {
  r[0] = ((w & 0x007F007Fu) << 4) | ((w << 8) & 0x80008000u);
  r[1] = ((w >> 4) & 0x07F007F0u) | (w & 0x80008000u);
}

/* a · b per bf16 half, exact here (a power-of-two factor of a value that
 * stays in range); the -0 addend keeps a zero's sign. */
__device__ __forceinline__ uint32_t bmul(uint32_t a, uint32_t b) {
  uint32_t d;
  asm("fma.rn.bf16x2 %0, %1, %2, %3;" : "=r"(d) : "r"(a), "r"(b), "r"(0x80008000u));
  return d;
}

/* 16 bytes through L1 (the activations: every block of the SM reads them) */
__device__ __forceinline__ void cp_async16_ca(void *smem, const void *gmem, int src_bytes) {
  const unsigned s = (unsigned)__cvta_generic_to_shared(smem);
  asm volatile("cp.async.ca.shared.global [%0], [%1], 16, %2;\n" ::"r"(s), "l"(gmem), "r"(src_bytes)
               : "memory");
}

/* The cp.async ring (dynamic shared memory, MOE_TILED_RING_BYTES in
 * gpu_moe.c): per stage and thread the weights of rows (g, g+8) of the two
 * row groups, its B words, the aligned words holding the scale bytes. The
 * warp partials reuse its start once every warp has left its K loop. */
struct tiled_ring {
  uint4 w[RING][4][NT];
  uint4 b[RING][4][NT];
  uint32_t s[RING][4][NT];
};
typedef float part_t[NW][2][16][TOKS]; /* [warp][row group][row][token] */
extern __shared__ uint4 dyn_smem[];
__device__ __forceinline__ tiled_ring &ring() { return *reinterpret_cast<tiled_ring *>(dyn_smem); }
__device__ __forceinline__ part_t &part() { return *reinterpret_cast<part_t *>(dyn_smem); }

struct tiled_smem {
  int pc[TOKS];     /* pass tokens: pair code t·n_slots + slot, -1 none */
  int nanrow[32];   /* fp8: row group·16 + row has an e4m3 NaN weight */
  int last;
};

/* A matrix row group of a block: 16 rows from r0, weights w (row stride ld
 * bytes), scales s (fp4 [rows][nkb], fp8 [rows/32][nkb]). */
struct rowgrp {
  const unsigned char *w, *s;
  int r0;
};

/* Scale multiplier pair for scale byte sb: 2^(sb - 1) (fp4) / 2^(sb - 7)
 * (fp8) as bf16x2, for sb up to LIM; past it (bf16 has no larger power of
 * two) the first factor stops at 2^127 and big_mul gives the second. */
template <int FMT> struct scl {
  static constexpr uint32_t BIAS = FMT == W_E2M1 ? 126u : 120u, LIM = FMT == W_E2M1 ? 128u : 134u;
};
template <int FMT>
__device__ __forceinline__ uint32_t scale_mul(uint32_t sb) { /* sb <= LIM: one multiply-add */
  return sb * 0x00800080u + (scl<FMT>::BIAS << 7) * 0x10001u;
}
template <int FMT>
__device__ __forceinline__ uint32_t big_mul(uint32_t sb) {
  return sb <= scl<FMT>::LIM ? 0x3F803F80u /* 1 */
         : sb == 255u        ? 0x7FC07FC0u /* NaN scale */
                             : ((sb - scl<FMT>::LIM + 127u) << 7) * 0x10001u;
}

/* One stage of one row group: the thread's rows g (w0) and g + 8 (w1),
 * multipliers m0 / m1 (and the second factors b0 / b1 when BIG), into acc. */
template <int FMT, bool BIG>
__device__ __forceinline__ void stage_rg(const uint4 &u0, const uint4 &u1, uint32_t m0, uint32_t m1,
                                         uint32_t b0, uint32_t b1, const uint32_t (&bw)[16],
                                         float (&acc)[4], uint32_t &nan0, uint32_t &nan1) {
  const uint32_t w0[4] = {u0.x, u0.y, u0.z, u0.w}, w1[4] = {u1.x, u1.y, u1.z, u1.w};
  if (FMT == W_E2M1) {
#pragma unroll
    for (int j = 0; j < 4; j++) {
      uint32_t a0[4], a1[4];
      dec_e2m1(w0[j], a0);
      dec_e2m1(w1[j], a1);
#pragma unroll
      for (int p = 0; p < 4; p++) {
        a0[p] = bmul(a0[p], m0), a1[p] = bmul(a1[p], m1);
        if (BIG) a0[p] = bmul(a0[p], b0), a1[p] = bmul(a1[p], b1);
      }
      mma_bf16(acc, a0[0], a1[0], a0[1], a1[1], bw[4 * j], bw[4 * j + 1]);
      mma_bf16(acc, a0[2], a1[2], a0[3], a1[3], bw[4 * j + 2], bw[4 * j + 3]);
    }
  } else {
#pragma unroll
    for (int j = 0; j < 4; j++) {
      nan0 |= (w0[j] & 0x7F7F7F7Fu) + 0x01010101u;
      nan1 |= (w1[j] & 0x7F7F7F7Fu) + 0x01010101u;
      uint32_t a0[2], a1[2];
      dec_e4m3(w0[j], a0);
      dec_e4m3(w1[j], a1);
#pragma unroll
      for (int p = 0; p < 2; p++) {
        a0[p] = bmul(a0[p], m0), a1[p] = bmul(a1[p], m1);
        if (BIG) a0[p] = bmul(a0[p], b0), a1[p] = bmul(a1[p], b1);
      }
      mma_bf16(acc, a0[0], a1[0], a0[1], a1[1], bw[2 * j], bw[2 * j + 1]);
    }
  }
}

/* acc[rg] += W_rg · B over this warp's K chunks, for the two row groups g[2]
 * (rows r0 + lane/4 and + 8 of each); B = 8 tokens' activation rows (brow,
 * fragment order; NULL = a token slot past the pass) in the thread's column
 * lane/4. nan[rg·2 + rr]: e4m3 NaN detector words of the thread's rows.
 * Stage i covers the thread's 32-block kb = kb0 + 16·(i / HS) (half i % HS
 * of it for fp8); the copies' addresses are the rows' starts plus one offset
 * per stage (a stage past K copies nothing from the row start: zeros). A
 * thread with no token (brow NULL) copies no activations: its B words in the
 * ring are zeroed once here and stay zero. BL1: the activations through L1
 * (written by an earlier launch); else L2 only (written by this launch). */
template <int FMT, bool BL1>
__device__ void kloop(tiled_smem &sm, const rowgrp (&gr)[2], int K, const uint16_t *brow,
                      float (&acc)[2][4], uint32_t (&nan)[4]) {
  constexpr int HS = FMT == W_E2M1 ? 1 : 2;   /* stages per 128-column chunk */
  constexpr int KBB = FMT == W_E2M1 ? 16 : 32; /* bytes of a row's 32-block */
  const int tid = threadIdx.x, w = tid >> 5, lane = tid & 31, g = lane >> 2, c = lane & 3;
  const int nkb = K / 32, nc = (nkb + 3) / 4;
  const int ld = FMT == W_E2M1 ? K / 2 : K;
  const int nch = nc > w ? (nc - w + NW - 1) / NW : 0, ns = nch * HS;
  const int kb0 = w * 4 + c;
  /* the thread's rows: q = rg·2 + rr is row g + 8·rr of group rg (16-byte
   * units); scale rows: fp4 one per row, fp8 one per 32 rows (g and g + 8
   * share it) */
  const uint4 *wq[4];
  const unsigned char *sq[4];
#pragma unroll
  for (int q = 0; q < 4; q++) {
    const int rg = q >> 1, rr = q & 1;
    const long long row = gr[rg].r0 + g;
    wq[q] = reinterpret_cast<const uint4 *>(gr[rg].w + (row + 8 * rr) * ld);
    sq[q] = gr[rg].s + (FMT == W_E2M1 ? row + 8 * rr : row >> 5) * nkb;
  }
  /* the aligned word holding each row's scale byte of stage 0 (the row's
   * first word when the thread has no block: it then copies nothing), and
   * where the byte sits in it: the same at every stage (the block index
   * advances by multiples of 4); a byte_perm selector */
  const uint32_t *sw[4];
  uint32_t bsel[4];
#pragma unroll
  for (int q = 0; q < 4; q++) {
    const uintptr_t a = reinterpret_cast<uintptr_t>(sq[q]) + (uintptr_t)(kb0 < nkb ? kb0 : 0);
    sw[q] = reinterpret_cast<const uint32_t *>(a & ~(uintptr_t)3);
    bsel[q] = 0x4440u | (uint32_t)((reinterpret_cast<uintptr_t>(sq[q]) + (uintptr_t)kb0) & 3u);
  }
  tiled_ring &R = ring();
  if (!brow) {
#pragma unroll
    for (int s = 0; s < RING; s++)
#pragma unroll
      for (int j = 0; j < 4; j++) R.b[s][j][tid] = make_uint4(0u, 0u, 0u, 0u);
  }
  int islot = 0;
  auto issue = [&](int i) {
    if (i < ns) {
      const int ci = FMT == W_E2M1 ? i : i >> 1, h = FMT == W_E2M1 ? 0 : i & 1;
      const int kb = kb0 + 16 * ci;
      const bool ok = kb < nkb;
      const unsigned ow = ok ? kb * (KBB / 16) + h : 0, os = ok ? 4 * ci : 0;
#pragma unroll
      for (int q = 0; q < 4; q++) {
        cp_async16(&R.w[islot][q][tid], wq[q] + ow, ok ? 16 : 0);
        cp_async4(&R.s[islot][q][tid], sw[q] + os, ok ? 4 : 0);
      }
      /* B: fp4 16 words (the thread's 32-block), fp8 8 (its half); zeros past K */
      if (brow) {
        const uint16_t *bp = brow + (ok ? kb * 32 + h * 16 : 0);
#pragma unroll
        for (int j = 0; j < 4 / HS; j++) {
          if (BL1)
            cp_async16_ca(&R.b[islot][j][tid], bp + 8 * j, ok ? 16 : 0);
          else
            cp_async16(&R.b[islot][j][tid], bp + 8 * j, ok ? 16 : 0);
        }
      }
      islot = islot == RING - 1 ? 0 : islot + 1;
    }
    cp_async_commit();
  };
  int slot = 0;
  auto step = [&](int i) {
    issue(i + RING - 1);
    cp_async_wait<RING - 1>();
    uint32_t sbyte[4];
#pragma unroll
    for (int q = 0; q < 4; q++) sbyte[q] = __byte_perm(R.s[slot][q][tid], 0u, bsel[q]);
    const uint32_t smax = max(max(sbyte[0], sbyte[1]), max(sbyte[2], sbyte[3]));
    uint4 bc[4];
#pragma unroll
    for (int j = 0; j < 4; j++) bc[j] = j < 4 / HS ? R.b[slot][j][tid] : make_uint4(0u, 0u, 0u, 0u);
    const uint32_t bw[16] = {bc[0].x, bc[0].y, bc[0].z, bc[0].w, bc[1].x, bc[1].y, bc[1].z, bc[1].w,
                             bc[2].x, bc[2].y, bc[2].z, bc[2].w, bc[3].x, bc[3].y, bc[3].z, bc[3].w};
    if (__any_sync(0xFFFFFFFFu, smax > scl<FMT>::LIM)) { /* scale bytes past 2^127 (never in a checkpoint) */
#pragma unroll
      for (int rg = 0; rg < 2; rg++)
        stage_rg<FMT, true>(R.w[slot][2 * rg][tid], R.w[slot][2 * rg + 1][tid],
                            scale_mul<FMT>(min(sbyte[2 * rg], scl<FMT>::LIM)),
                            scale_mul<FMT>(min(sbyte[2 * rg + 1], scl<FMT>::LIM)),
                            big_mul<FMT>(sbyte[2 * rg]), big_mul<FMT>(sbyte[2 * rg + 1]), bw, acc[rg],
                            nan[2 * rg], nan[2 * rg + 1]);
    } else {
#pragma unroll
      for (int rg = 0; rg < 2; rg++)
        stage_rg<FMT, false>(R.w[slot][2 * rg][tid], R.w[slot][2 * rg + 1][tid],
                             scale_mul<FMT>(sbyte[2 * rg]), scale_mul<FMT>(sbyte[2 * rg + 1]), 0u, 0u,
                             bw, acc[rg], nan[2 * rg], nan[2 * rg + 1]);
    }
    slot = slot == RING - 1 ? 0 : slot + 1;
  };
#pragma unroll
  for (int i = 0; i < RING - 1; i++) issue(i);
  for (int i = 0; i < ns; i++) step(i);
  cp_async_wait<0>();
}

/* Writes this warp's accumulators to part and flags NaN rows (fp8). */
__device__ __forceinline__ void put_partials(tiled_smem &sm, const float (&acc)[2][4],
                                             const uint32_t (&nan)[4]) {
  const int w = threadIdx.x >> 5, lane = threadIdx.x & 31, g = lane >> 2, c = lane & 3;
#pragma unroll
  for (int rg = 0; rg < 2; rg++) {
    part_t &P = part();
    P[w][rg][g][2 * c] = acc[rg][0], P[w][rg][g][2 * c + 1] = acc[rg][1];
    P[w][rg][g + 8][2 * c] = acc[rg][2], P[w][rg][g + 8][2 * c + 1] = acc[rg][3];
#pragma unroll
    for (int rr = 0; rr < 2; rr++)
      if (nan[2 * rg + rr] & 0x80808080u) atomicOr(&sm.nanrow[16 * rg + g + 8 * rr], 1);
  }
}

/* The block's partial sums in warp order (a fixed order). */
__device__ __forceinline__ float sum_warps(const tiled_smem &sm, int rg, int r, int t) {
  const part_t &P = part();
  float s = P[0][rg][r][t];
#pragma unroll
  for (int w = 1; w < NW; w++) s += P[w][rg][r][t];
  return sm.nanrow[16 * rg + r] ? __int_as_float(0x7FFFFFFF) : s;
}

/* Sets sm.pc for the pass at c0 and clears the NaN flags. */
__device__ __forceinline__ void pass_tokens(tiled_smem &sm, const int *pairs, int p0, int c0, int np,
                                            int n_slots, int top_k) {
  const int tid = threadIdx.x;
  if (tid < TOKS) sm.pc[tid] = c0 + tid < np ? route_pair(pairs, p0, c0 + tid, n_slots, top_k) : -1;
  if (tid < 32) sm.nanrow[tid] = 0;
  __syncthreads();
}

/* ---- prep ------------------------------------------------------------------- */

/* Grid ceil(n·dim/32 / 8) + 1 blocks of 256 threads. Blocks but the last:
 * act_quant of x (warp per 32-block, lane = element) written as bf16
 * xq·sx to xb4 / xb8 [n][dim] in the e2m1 / e4m3 fragment order. The last
 * block: the route table (build_route) and zeroed counters [n_cnt]. */
extern "C" __global__ void __launch_bounds__(256)
dsv4_k_moe_prep_tiled(int n_tok, int top_k, int n_experts, int dim, const uint16_t *x,
                      long long ldx, const int32_t *idx, uint16_t *xb4, uint16_t *xb8, int *route,
                      unsigned *cnt, int n_cnt) {
  if (blockIdx.x == gridDim.x - 1) {
    __shared__ unsigned bm[32];
    __shared__ int scratch[32 + 1025];
    __shared__ int32_t sidx[PREP_IDX]; /* the ids, read from global memory once */
    const int nk = n_tok * top_k;
    const int32_t *ip = idx;
    if (nk <= PREP_IDX) {
      for (int i = threadIdx.x; i < nk; i += blockDim.x) sidx[i] = idx[i];
      ip = sidx; /* build_route's first step synchronises the block */
    }
    for (int i = threadIdx.x; i < n_cnt; i += blockDim.x) cnt[i] = 0u;
    build_route(n_tok, top_k, top_k + 1, n_experts, ip, route, bm, scratch, scratch + 32);
    return;
  }
  const int nkb = dim / 32, lane = threadIdx.x & 31;
  const long long blk = (long long)blockIdx.x * 8 + (threadIdx.x >> 5);
  if (blk >= (long long)n_tok * nkb) return;
  const long long t = blk / nkb;
  const int b = (int)(blk % nkb);
  const uint16_t v = x[t * ldx + b * 32 + lane];
  const uint32_t amax = __reduce_max_sync(0xFFFFFFFFu, dsv4i_bf16_abs_bits(v));
  const int32_t e = dsv4i_act_quant_exp(amax);
  const uint16_t q = dsv4i_f32_to_bf16(dsv4i_e4m3_to_f32(dsv4i_act_quant_code(v, e)) *
                                       dsv4i_e8m0_to_f32(dsv4i_act_quant_scale(e)));
  xb4[t * dim + b * 32 + perm_e2m1(lane)] = q;
  xb8[t * dim + b * 32 + perm_e4m3(lane)] = q;
}

/* ---- up + SwiGLU + act_quant --------------------------------------------------- */

template <int FMT>
__device__ void up_tile(tiled_smem &sm, bool shared, int p0, int np, const int *pairs, int top_k,
                        int dim, int inter, float limit, const uint16_t *xb, const float *weight,
                        const unsigned char *w1, const unsigned char *s1, const unsigned char *w3,
                        const unsigned char *s3, uint16_t *go, uint16_t *uo, uint16_t *ao,
                        int row0) {
  const int n_slots = top_k + 1, tid = threadIdx.x, g = (tid & 31) >> 2;
  const rowgrp gr[2] = {{w1, s1, row0}, {w3, s3, row0}};
  for (int c0 = 0; c0 < np; c0 += TOKS) {
    pass_tokens(sm, pairs, p0, c0, np, n_slots, top_k);
    const int pcg = sm.pc[g];
    const uint16_t *brow = pcg >= 0 ? xb + (long long)(pcg / n_slots) * dim : nullptr;
    float acc[2][4] = {{0.f, 0.f, 0.f, 0.f}, {0.f, 0.f, 0.f, 0.f}};
    uint32_t nan[4] = {0u, 0u, 0u, 0u};
    kloop<FMT, true>(sm, gr, dim, brow, acc, nan);
    __syncthreads(); /* part reuses the ring: every warp out of its K loop */
    put_partials(sm, acc, nan);
    __syncthreads();
    { /* one thread per (row, token) */
      const int r = tid >> 3, t = tid & 7, pc = sm.pc[t];
      if (pc >= 0) {
        const uint16_t gb = dsv4i_f32_to_bf16(sum_warps(sm, 0, r, t));
        const uint16_t ub = dsv4i_f32_to_bf16(sum_warps(sm, 1, r, t));
        const long long o = (long long)pc * inter + row0 + r;
        go[o] = gb, uo[o] = ub;
        float gf = dsv4i_bf16_to_f32(gb), uf = dsv4i_bf16_to_f32(ub);
        if (limit > 0.0f) {
          uf = uf < -limit ? -limit : (uf > limit ? limit : uf);
          gf = gf > limit ? limit : gf;
        }
        float act = (gf / (1.0f + dsv4i_expf_torch(-gf))) * uf;
        if (!shared) act = weight[(pc / n_slots) * top_k + pc % n_slots] * act;
        ao[o] = dsv4i_f32_to_bf16(act);
      }
    }
    __syncthreads();
  }
}

/* Grid (inter/16, min(E, n·top_k) + has_shared), 128 threads. xb4 / xb8:
 * moe_prep's; route: its table; weight f32 [n][top_k]; w1, s1, w3, s3:
 * device pointer tables [E + 1] (entry E the shared expert); g, u, a bf16
 * [n][n_slots][inter] (gate, up, SwiGLU activation; n_slots = top_k + 1);
 * ab bf16 [n][n_slots][inter]: act_quant of a as bf16 in the fragment order
 * of the expert's w2 format; cnt u32 [grid.y][inter/32], zero on entry. */
#define MOE_UP_PARAMS                                                                          \
  int n_tok, int top_k, int has_shared, int n_experts, int dim, int inter, int fmt_r, int fmt_s,   \
      float limit, const uint16_t *xb4, const uint16_t *xb8, const int *route,                    \
      const float *weight, const unsigned char *const *w1, const unsigned char *const *s1,        \
      const unsigned char *const *w3, const unsigned char *const *s3, uint16_t *g, uint16_t *u,   \
      uint16_t *a, uint16_t *ab, unsigned *cnt
#define MOE_UP_ARGS                                                                            \
  n_tok, top_k, has_shared, n_experts, dim, inter, fmt_r, fmt_s, limit, xb4, xb8, route, weight, \
      w1, s1, w3, s3, g, u, a, ab, cnt

/* Block (bx, by) of moe_up: rows bx·16 of expert slot by. Returns (the same
 * in every thread) whether it was the second block of its 32-row group to
 * finish and so wrote the group's ab. */
__device__ bool up_block(tiled_smem &sm, int bx, int by, MOE_UP_PARAMS) {
  int p0 = -1, np = 0;
  const int e = slot_expert(route, by, n_tok, has_shared, n_experts, &p0, &np);
  if (e < 0) return false;
  const bool shared = e == n_experts;
  const int fmt = shared ? fmt_s : fmt_r, n_slots = top_k + 1;
  const int *pairs = route + 2 + 2 * n_experts;
  if (fmt == W_E2M1)
    up_tile<W_E2M1>(sm, shared, p0, np, pairs, top_k, dim, inter, limit, xb4, weight, w1[e], s1[e],
                    w3[e], s3[e], g, u, a, bx * UP_ROWS);
  else
    up_tile<W_E4M3>(sm, shared, p0, np, pairs, top_k, dim, inter, limit, xb8, weight, w1[e], s1[e],
                    w3[e], s3[e], g, u, a, bx * UP_ROWS);
  /* the second block of the 32-row group quantises the group (act_quant
   * blocks are 32 wide); one fence a block, by the thread that counts, after
   * the barrier (cumulative over the block's writes, as a grid sync does) */
  __syncthreads();
  if (threadIdx.x == 0) {
    __threadfence();
    sm.last = atomicAdd(&cnt[by * (inter / 32) + (bx >> 1)], 1u) == 1u;
    if (sm.last) __threadfence();
  }
  __syncthreads();
  if (!sm.last) return false;
  const int grp = bx >> 1, lane = threadIdx.x & 31;
  const int wfmt = fmt; /* w2 has the expert's format */
  const int pos = wfmt == W_E2M1 ? perm_e2m1(lane) : perm_e4m3(lane);
  for (int q = threadIdx.x >> 5; q < np; q += NW) {
    const long long pc = route_pair(pairs, p0, q, n_slots, top_k);
    const uint16_t v = __ldcg(a + pc * inter + grp * 32 + lane);
    const uint32_t amax = __reduce_max_sync(0xFFFFFFFFu, dsv4i_bf16_abs_bits(v));
    const int32_t ex = dsv4i_act_quant_exp(amax);
    ab[pc * inter + grp * 32 + pos] = dsv4i_f32_to_bf16(
        dsv4i_e4m3_to_f32(dsv4i_act_quant_code(v, ex)) * dsv4i_e8m0_to_f32(dsv4i_act_quant_scale(ex)));
  }
  return true;
}

extern "C" __global__ void __launch_bounds__(NT, 4) dsv4_k_moe_up_e2m1_tiled(MOE_UP_PARAMS) {
  __shared__ tiled_smem sm;
  up_block(sm, (int)blockIdx.x, (int)blockIdx.y, MOE_UP_ARGS);
}

/* ---- down + combine ------------------------------------------------------------ */

template <int FMT, bool BL1>
__device__ void down_tile(tiled_smem &sm, int p0, int np, const int *pairs, int top_k, int dim,
                          int inter, const uint16_t *ab, const unsigned char *w2,
                          const unsigned char *s2, uint16_t *o, int row0) {
  const int n_slots = top_k + 1, tid = threadIdx.x, g = (tid & 31) >> 2;
  const rowgrp gr[2] = {{w2, s2, row0}, {w2, s2, row0 + 16}};
  for (int c0 = 0; c0 < np; c0 += TOKS) {
    pass_tokens(sm, pairs, p0, c0, np, n_slots, top_k);
    const int pcg = sm.pc[g];
    const uint16_t *brow = pcg >= 0 ? ab + (long long)pcg * inter : nullptr;
    float acc[2][4] = {{0.f, 0.f, 0.f, 0.f}, {0.f, 0.f, 0.f, 0.f}};
    uint32_t nan[4] = {0u, 0u, 0u, 0u};
    kloop<FMT, BL1>(sm, gr, inter, brow, acc, nan);
    __syncthreads(); /* part reuses the ring: every warp out of its K loop */
    put_partials(sm, acc, nan);
    __syncthreads();
#pragma unroll
    for (int k = 0; k < 2; k++) { /* (row 0..31, token) */
      const int q = tid + NT * k, r = q >> 3, t = q & 7, pc = sm.pc[t];
      if (pc >= 0)
        o[(long long)pc * dim + row0 + r] = dsv4i_f32_to_bf16(sum_warps(sm, r >> 4, r & 15, t));
    }
    __syncthreads();
  }
}

/* Grid (dim/32, as moe_up), 128 threads. ab, route: moe_up's / moe_prep's;
 * w2, s2: pointer tables; o bf16 [n][n_slots][dim] scratch; cnt u32
 * [dim/32] zero on entry; out bf16 [n][ldo]: per token the experts' rows in
 * ascending id, the shared expert last, summed from 0 in fp32, rounded. */
#define MOE_DOWN_PARAMS                                                                        \
  int n_tok, int top_k, int has_shared, int n_experts, int dim, int inter, int fmt_r, int fmt_s,   \
      const uint16_t *ab, const int32_t *idx, const int *route, const unsigned char *const *w2,   \
      const unsigned char *const *s2, uint16_t *o, unsigned *cnt, uint16_t *out, long long ldo
#define MOE_DOWN_ARGS                                                                              \
  n_tok, top_k, has_shared, n_experts, dim, inter, fmt_r, fmt_s, ab, idx, route, w2, s2, o, cnt, out, ldo

/* Waits (thread 0, then the block) until *p reaches n (ld.acquire, then a
 * fence: the writes counted are visible to the block after the barrier).
 * The counts come from blocks earlier in the launch order, which run or have
 * run; should one never arrive (a scheduler that broke that order), the wait
 * traps after about 2^32 cycles instead of hanging. */
__device__ __forceinline__ unsigned ld_acquire_u32(const unsigned *p) {
  unsigned v;
  asm volatile("ld.acquire.gpu.global.u32 %0, [%1];" : "=r"(v) : "l"(p) : "memory");
  return v;
}
__device__ __forceinline__ void wait_count(const unsigned *p, unsigned n) {
  if (threadIdx.x == 0) {
    const long long t0 = clock64();
    while (ld_acquire_u32(p) < n) {
      __nanosleep(100);
      if (clock64() - t0 > (1ll << 32)) __trap();
    }
    __threadfence();
  }
  __syncthreads();
}

/* Block (bx, by) of moe_down: rows bx·32 of expert slot by, of gy slots;
 * the last of the gy blocks of row tile bx combines it. ready: NULL, or
 * the slots' counts of written 32-row groups of ab (fused launch: waits for
 * inter/32 of them; ab then read through L2 only). */
template <bool BL1>
__device__ void down_block(tiled_smem &sm, int bx, int by, int gy, MOE_DOWN_PARAMS,
                           const unsigned *ready) {
  const int n_slots = top_k + 1;
  int p0 = -1, np = 0;
  const int e = slot_expert(route, by, n_tok, has_shared, n_experts, &p0, &np);
  const int *pairs = route + 2 + 2 * n_experts;
  const int row0 = bx * DN_ROWS;
  if (e >= 0) {
    if (ready) wait_count(ready + by, (unsigned)(inter / 32));
    if ((e == n_experts ? fmt_s : fmt_r) == W_E2M1)
      down_tile<W_E2M1, BL1>(sm, p0, np, pairs, top_k, dim, inter, ab, w2[e], s2[e], o, row0);
    else
      down_tile<W_E4M3, BL1>(sm, p0, np, pairs, top_k, dim, inter, ab, w2[e], s2[e], o, row0);
  }
  /* the last block of this row tile combines it (fences as in up_block) */
  __syncthreads();
  if (threadIdx.x == 0) {
    __threadfence();
    sm.last = atomicAdd(&cnt[bx], 1u) == (unsigned)gy - 1u;
    if (sm.last) __threadfence();
  }
  __syncthreads();
  if (!sm.last) return;
  for (int q = threadIdx.x; q < n_tok * DN_ROWS; q += NT) {
    const int t = q / DN_ROWS, d = row0 + q % DN_ROWS;
    const int32_t *it = idx + (long long)t * top_k;
    const float y = combine_token(it, top_k, n_experts, has_shared, [&](int slot) {
      return dsv4i_bf16_to_f32(__ldcg(o + ((long long)t * n_slots + slot) * dim + d));
    });
    out[(long long)t * ldo + d] = dsv4i_f32_to_bf16(y);
  }
}

/* Grid (dim/32, as moe_up), 128 threads. ab, route: moe_up's / moe_prep's;
 * w2, s2: pointer tables; o bf16 [n][n_slots][dim] scratch; cnt u32
 * [dim/32] zero on entry; out bf16 [n][ldo]: per token the experts' rows in
 * ascending id, the shared expert last, summed from 0 in fp32, rounded. */
extern "C" __global__ void __launch_bounds__(NT, 4) dsv4_k_moe_down_e2m1_tiled(MOE_DOWN_PARAMS) {
  __shared__ tiled_smem sm;
  down_block<true>(sm, (int)blockIdx.x, (int)blockIdx.y, (int)gridDim.y, MOE_DOWN_ARGS, nullptr);
}

/* moe_up and moe_down in one launch, so that the down blocks fill the SMs
 * while the last up blocks run (no tail and no gap between two launches).
 * Grid (max(inter/16, dim/32), 2·gy), 128 threads: rows y < gy are moe_up's
 * blocks (x < inter/16), rows gy + y moe_down's of slot y (x < dim/32).
 * The second block of each 32-row group adds 1 to ready[y] once its ab is
 * written; a down block of slot y waits for inter/32 of them. The up blocks
 * precede every down block in the launch order, so they run or have run
 * when a down block waits: no deadlock. Same arithmetic, same bits as the
 * two launches. cnt_up [gy][inter/32], cnt_dn [dim/32], ready [gy]: zero on
 * entry (moe_prep). */
extern "C" __global__ void __launch_bounds__(NT, 4)
dsv4_k_moe_updown_e2m1_tiled(int n_tok, int top_k, int has_shared, int n_experts, int dim,
                             int inter, int fmt_r, int fmt_s, float limit, const uint16_t *xb4,
                             const uint16_t *xb8, const int *route, const float *weight,
                             const unsigned char *const *w1, const unsigned char *const *s1,
                             const unsigned char *const *w3, const unsigned char *const *s3,
                             uint16_t *g, uint16_t *u, uint16_t *a, uint16_t *ab,
                             unsigned *cnt_up, const int32_t *idx, const unsigned char *const *w2,
                             const unsigned char *const *s2, uint16_t *o, unsigned *cnt_dn,
                             unsigned *ready, uint16_t *out, long long ldo) {
  __shared__ tiled_smem sm;
  const int gy = (int)gridDim.y / 2, bx = (int)blockIdx.x, by = (int)blockIdx.y;
  if (by < gy) {
    if (bx >= inter / UP_ROWS) return;
    if (up_block(sm, bx, by, n_tok, top_k, has_shared, n_experts, dim, inter, fmt_r, fmt_s, limit,
                 xb4, xb8, route, weight, w1, s1, w3, s3, g, u, a, ab, cnt_up)) {
      __syncthreads(); /* the group's ab written */
      if (threadIdx.x == 0) {
        __threadfence();
        atomicAdd(&ready[by], 1u);
      }
    }
    return;
  }
  if (bx >= dim / DN_ROWS) return;
  down_block<false>(sm, bx, by - gy, gy, n_tok, top_k, has_shared, n_experts, dim, inter, fmt_r,
                    fmt_s, ab, idx, route, w2, s2, o, cnt_dn, out, ldo, ready);
}
