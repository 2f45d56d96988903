/*
 * MoE experts of a step (spec §5.5; CPU oracle dsv4i_cpu_moe_experts): every
 * routed expert the step chose and the shared expert, in three launches:
 *   act_quant(x) (linear.cu) -> moe_up -> moe_down
 * Work is split by (expert, tile of 32 rows): grid.y walks the step's
 * experts (y = 0 the shared one, then the distinct routed ids in ascending
 * order: moe_up's blocks find theirs from idx, and its block (0, 0) writes a
 * route table (ids, each expert's (token, slot) pairs) that moe_down's blocks
 * read in one step; no host round trip, capture-safe),
 * grid.x the row tiles, so a single token already fills the GPU (at the
 * release dims: 72 up tiles and 160 down tiles per expert). A block applies
 * each decoded weight to TC tokens of its expert (token lists built on the
 * device from idx); TC = 1 keeps the kernels at 96 registers with 2 blocks
 * per SM, so an expert with more tokens walks its tile again per token (its
 * bytes then come from L2, not DRAM).
 *
 * Thread layout (the bandwidth part): thread i owns the K block kb = i mod nkb
 * (32 columns: 16 B of fp4 or 32 B of fp8, read with 16 B loads; a warp reads
 * 512 B contiguous of one row) and phase i / nkb of the tile's rows; it keeps
 * its K block's activations of TC tokens in registers and walks the rows
 * through two register buffers (one group of rows loading while the other is
 * computed). The per-block partials go to shared memory and one thread per
 * (row, token) sums them in K-block order. moe_down's tiles are 64 rows (its
 * rows are short: 1,152 B of fp4 at the release dims).
 *
 * Numerics: equal to the CPU bit for bit, in its order:
 *   p = Σ_{i<32} xq_i·w_i in increasing i from 0 (fp32), acc += (p·sx)·sw in
 *   increasing K block from 0, y = bf16(acc).
 * The products are exact (e4m3 × e2m1 or e4m3 × e4m3 significands), so
 * fmaf(x, w, p) == p + x·w. Decoding skips the per-element power-of-two
 * rescale: w is taken with its exponent field as stored (fp4: w·2^-126,
 * fp8: w·2^-120) and x pre-multiplied by 2^119, so every product and partial
 * sum is the CPU's times 2^-7 (fp4) / 2^-1 (fp8), all normal floats (nonzero
 * products are >= 2^-17 resp. 2^-19 and < 2^23 in magnitude), and rounding
 * commutes with the power of two: p = P·2^7 (2^1) exactly.
 * moe_up: g = bf16(w1·x), u = bf16(w3·x); u = clamp(u, ±limit), g = min(g,
 * limit) when limit > 0; act = (g / (1 + exp(−g))) · u (torch's exp), times
 * the routing weight for routed slots; a = bf16(act), then act_quant of a's
 * 32-blocks (one block = one row tile) written as aq / sa.
 * moe_down: o[t][slot] = bf16(w2 · aq) per row tile; the last block to finish
 * a row tile (an integer counter per tile, no float atomics) sums each
 * token's rows in ascending expert id, the shared expert last, from 0 in
 * fp32, out = bf16(y): a fixed order, whatever the schedule.
 */
#include "gemv.cuh"
#include "moe_route.cuh"
#include "model/ref_math.h"

#define RT 32        /* rows per moe_up tile: one act_quant block of the intermediate */
#define RTD 64       /* rows per moe_down tile (the combine's unit too) */
#define TC 1         /* tokens per pass over a tile (registers: 32 per token) */
#define UP_NT 320    /* threads of moe_up: K blocks (dim/32 <= 320) x phases */
#define DOWN_NT 288  /* threads of moe_down (inter/32 <= 288) */
#define PART 10560   /* floats of block partials in shared memory */
#define WIN 256      /* tokens per list window */
#define XSCALE 0x1p119f

/* Block y's expert: y == 0 the shared one (when has_shared), else the
 * (y − has_shared)-th distinct routed id of the step in ascending order; -1
 * when the step has fewer. Ids < 0 (skipped) and >= n_experts are ignored. */
__device__ int pick_expert(int n_tok, int top_k, int has_shared, int n_experts,
                           const int32_t *idx, unsigned *bm, int *sel) {
  if (has_shared && blockIdx.y == 0) return n_experts;
  const int r = (int)blockIdx.y - (has_shared ? 1 : 0);
  for (int i = threadIdx.x; i < 32; i += blockDim.x) bm[i] = 0u;
  __syncthreads();
  const int nk = n_tok * top_k;
  for (int i = threadIdx.x; i < nk; i += blockDim.x) {
    const int e = idx[i];
    if (e >= 0 && e < n_experts) atomicOr(&bm[e >> 5], 1u << (e & 31));
  }
  __syncthreads();
  if (threadIdx.x < 32) {
    const int lane = threadIdx.x;
    const unsigned w = bm[lane];
    const int c = __popc(w);
    int incl = c;
    for (int o = 1; o < 32; o <<= 1) {
      const int v = __shfl_up_sync(0xFFFFFFFFu, incl, o);
      if (lane >= o) incl += v;
    }
    int e = -1;
    if (r >= incl - c && r < incl) {
      unsigned ww = w;
      for (int q = r - (incl - c); q > 0; q--) ww &= ww - 1u;
      e = lane * 32 + __ffs((int)ww) - 1;
    }
    const unsigned b = __ballot_sync(0xFFFFFFFFu, e >= 0);
    e = b ? __shfl_sync(0xFFFFFFFFu, e, __ffs((int)b) - 1) : -1;
    if (lane == 0) *sel = e;
  }
  __syncthreads();
  return *sel;
}

/* Expert e's (token, slot) pairs among tokens [t0, t0 + WIN), ascending
 * token; returns how many (in every thread). Shared expert: every token, slot
 * top_k. */
__device__ int token_list(int e, int n_experts, int t0, int n_tok, int top_k,
                          const int32_t *idx, int *tok, int *slot, int *cnt) {
  if (threadIdx.x < 32) {
    const int lane = threadIdx.x, end = n_tok < t0 + WIN ? n_tok : t0 + WIN;
    int n = 0;
    for (int tb = t0; tb < end; tb += 32) {
      const int t = tb + lane;
      int s = -1;
      if (t < end) {
        if (e == n_experts) s = top_k;
        else
          for (int j = 0; j < top_k; j++)
            if (idx[t * top_k + j] == e) {
              s = j;
              break;
            }
      }
      const unsigned b = __ballot_sync(0xFFFFFFFFu, s >= 0);
      if (s >= 0) {
        const int pos = n + __popc(b & ((1u << lane) - 1u));
        tok[pos] = t, slot[pos] = s;
      }
      n += __popc(b);
    }
    if (lane == 0) *cnt = n;
  }
  __syncthreads();
  return *cnt;
}

/* Words of one row's K block: fp4 16 B, fp8 32 B. */
template <int FMT> struct kblock { uint4 v[FMT == W_E2M1 ? 1 : 2]; };

template <int FMT>
__device__ __forceinline__ void load_kblock(const unsigned char *p, kblock<FMT> *out) {
  out->v[0] = __ldg(reinterpret_cast<const uint4 *>(p));
  if (FMT == W_E4M3) out->v[1] = __ldg(reinterpret_cast<const uint4 *>(p) + 1);
}

/* Block partials q[tc] = (p·sx)·sw of one row's K block for TC tokens
 * (xa: that K block's activations × 2^119; see the header). */
template <int FMT>
__device__ __forceinline__ void kblock_partials(const kblock<FMT> &b, unsigned char sb,
                                                const float (&xa)[TC][32], const float (&xs)[TC],
                                                float (&q)[TC]) {
  float p[TC];
#pragma unroll
  for (int c = 0; c < TC; c++) p[c] = 0.0f;
  /* Decode in 2-3 integer ops per weight: shift the code's sign to bit 31,
   * then an arithmetic shift copies it down to the bits above the field, which
   * lands on the exponent/mantissa bits; one mask keeps sign and field. */
  if (FMT == W_E2M1) {
    const uint32_t words[4] = {b.v[0].x, b.v[0].y, b.v[0].z, b.v[0].w};
#pragma unroll
    for (int i = 0; i < 32; i++) {
      const int32_t v = (int32_t)(words[i >> 3] << (28 - 4 * (i & 7))) >> 6;
      const float w = __int_as_float(v & (int32_t)0x81C00000u);
#pragma unroll
      for (int c = 0; c < TC; c++) p[c] = fmaf(xa[c][i], w, p[c]);
    }
  } else {
    const uint32_t words[8] = {b.v[0].x, b.v[0].y, b.v[0].z, b.v[0].w,
                               b.v[1].x, b.v[1].y, b.v[1].z, b.v[1].w};
    uint32_t nan = 0u; /* a byte with magnitude 0x7F (NaN): its +1 reaches bit 7 */
#pragma unroll
    for (int i = 0; i < 32; i++) {
      if ((i & 3) == 0) nan |= ((words[i >> 2] & 0x7F7F7F7Fu) + 0x01010101u) & 0x80808080u;
      const int32_t v = (int32_t)(words[i >> 2] << (24 - 8 * (i & 3))) >> 4;
      const float w = __int_as_float(v & (int32_t)0x87F00000u);
#pragma unroll
      for (int c = 0; c < TC; c++) p[c] = fmaf(xa[c][i], w, p[c]);
    }
    if (nan)
#pragma unroll
      for (int c = 0; c < TC; c++) p[c] = __int_as_float(0x7FFFFFFF);
  }
  const float sw = dsv4i_e8m0_to_f32(sb), up = FMT == W_E2M1 ? 128.0f : 2.0f;
#pragma unroll
  for (int c = 0; c < TC; c++) q[c] = ((p[c] * up) * xs[c]) * sw;
}

/* One thread's K block of TC tokens' activations: rows src + tok·ld (fp32
 * act_quant values), scaled by 2^119; scale sx. Tokens >= nt read as zero. */
__device__ __forceinline__ void load_acts(const float *src, long long ld, const float *ssrc,
                                          long long sld, const int *rows, int nt, int kb,
                                          float (&xa)[TC][32], float (&xs)[TC]) {
#pragma unroll
  for (int c = 0; c < TC; c++) {
    if (c < nt) {
      const float4 *p = reinterpret_cast<const float4 *>(src + rows[c] * ld + kb * 32);
#pragma unroll
      for (int i = 0; i < 8; i++) {
        const float4 v = p[i];
        xa[c][4 * i] = v.x * XSCALE, xa[c][4 * i + 1] = v.y * XSCALE;
        xa[c][4 * i + 2] = v.z * XSCALE, xa[c][4 * i + 3] = v.w * XSCALE;
      }
      xs[c] = ssrc[rows[c] * sld + kb];
    } else {
#pragma unroll
      for (int i = 0; i < 32; i++) xa[c][i] = 0.0f;
      xs[c] = 0.0f;
    }
  }
}

/* Partials of rows [sub0, sub0 + sr) of the tile at row0 for NM matrices (w[m],
 * s[m]) into part[((c·NM + m)·SR + r)·(nkb + 1) + kb]. The thread's rows are P
 * apart (32-bit offsets stepped per row: one expert matrix is far below 2 GiB),
 * taken in groups of H rows through two register buffers: a group's loads are
 * issued before the previous group is computed, so the loads of one group are
 * always in flight while the thread computes (no load-compute bubble). */
template <int FMT, int NM>
__device__ __forceinline__ void tile_partials(const unsigned char *const (&w)[2],
                                              const unsigned char *const (&s)[2], long long ld,
                                              long long sld, int row0, int sub0, int sr, int SR,
                                              int nkb, int kb, int ph, int P,
                                              const float (&xa)[TC][32], const float (&xs)[TC],
                                              float *part) {
  constexpr int H = NM == 2 ? 1 : (FMT == W_E2M1 ? 3 : 1); /* rows per group */
  const int row = row0 + sub0 + ph;
  const unsigned wstep = (unsigned)(P * ld), sstep = (unsigned)(P * sld);
  const unsigned ow = (unsigned)(row * ld) + (unsigned)kb * (FMT == W_E2M1 ? 16u : 32u);
  const unsigned os = (unsigned)(row * sld) + (unsigned)kb; /* fp4: scale row = row */
  const int nr = sr > ph ? (sr - ph + P - 1) / P : 0; /* this thread's rows */
  kblock<FMT> A[H][NM], B[H][NM];
  unsigned char sa[H][NM], sb[H][NM];
  auto load = [&](kblock<FMT>(&X)[H][NM], unsigned char(&sx)[H][NM], int g) {
#pragma unroll
    for (int h = 0; h < H; h++) {
      const int j = g * H + h;
      if (j < nr)
#pragma unroll
        for (int m = 0; m < NM; m++) {
          load_kblock<FMT>(w[m] + (ow + (unsigned)j * wstep), &X[h][m]);
          sx[h][m] = FMT == W_E2M1 ? __ldg(s[m] + (os + (unsigned)j * sstep))
                                   : __ldg(s[m] + (long long)((row + j * P) >> 5) * sld + kb);
        }
    }
  };
  auto compute = [&](const kblock<FMT>(&X)[H][NM], const unsigned char(&sx)[H][NM], int g) {
#pragma unroll
    for (int h = 0; h < H; h++) {
      const int j = g * H + h, rr = ph + j * P;
      if (j < nr)
#pragma unroll
        for (int m = 0; m < NM; m++) {
          float q[TC];
          kblock_partials<FMT>(X[h][m], sx[h][m], xa, xs, q);
#pragma unroll
          for (int c = 0; c < TC; c++) part[((c * NM + m) * SR + rr) * (nkb + 1) + kb] = q[c];
        }
    }
  };
  const int ng = (nr + H - 1) / H;
  load(A, sa, 0);
  load(B, sb, 1);
  for (int g = 0; g < ng; g += 2) {
    compute(A, sa, g);
    load(A, sa, g + 2);
    compute(B, sb, g + 1);
    load(B, sb, g + 3);
  }
}

/* ---- up + SwiGLU + act_quant ----------------------------------------------- */

/* Shared memory of both kernels. */
struct moe_smem {
  float part[PART];
  uint16_t at[TC][RT]; /* moe_up: bf16 activations of the tile */
  int tok[WIN], slot[WIN];
  unsigned bm[32];
  int sel, cnt, last;
};

template <int FMT>
__device__ void up_body(moe_smem &sm, int e, bool shared, int n_tok, int top_k, int n_slots,
                        int n_experts, int dim, int inter, float limit, const float *xq,
                        const float *sx, const float *weight, const int32_t *idx,
                        const unsigned char *pw1, const unsigned char *ps1,
                        const unsigned char *pw3, const unsigned char *ps3, float *aq, float *sa) {
  const int nkb = dim / 32, P = UP_NT / nkb, kb = threadIdx.x % nkb, ph = threadIdx.x / nkb;
  const bool active = ph < P;
  const long long ld = FMT == W_E2M1 ? dim / 2 : dim, sld = nkb;
  const int SR0 = PART / (TC * 2 * (nkb + 1)), SR = SR0 < RT ? SR0 : RT;
  const int row0 = blockIdx.x * RT;
  const unsigned char *const w[2] = {pw1, pw3};
  const unsigned char *const s[2] = {ps1, ps3};
  for (int t0 = 0; t0 < n_tok; t0 += WIN) {
    const int nl = token_list(e, n_experts, t0, n_tok, top_k, idx, sm.tok, sm.slot, &sm.cnt);
    for (int c0 = 0; c0 < nl; c0 += TC) {
      const int nt = nl - c0 < TC ? nl - c0 : TC;
      float xa[TC][32], xs[TC];
      load_acts(xq, dim, sx, nkb, sm.tok + c0, active ? nt : 0, kb, xa, xs);
      for (int sub0 = 0; sub0 < RT; sub0 += SR) {
        const int sr = RT - sub0 < SR ? RT - sub0 : SR;
        if (active)
          tile_partials<FMT, 2>(w, s, ld, sld, row0, sub0, sr, SR, nkb, kb, ph, P, xa, xs, sm.part);
        __syncthreads();
        for (int q = threadIdx.x; q < sr * nt; q += UP_NT) {
          const int r = q % sr, c = q / sr;
          const float *pg = sm.part + ((c * 2) * SR + r) * (nkb + 1);
          const float *pu = sm.part + ((c * 2 + 1) * SR + r) * (nkb + 1);
          float g = 0.0f, u = 0.0f;
          for (int k = 0; k < nkb; k++) g += pg[k], u += pu[k];
          float gf = dsv4i_bf16_to_f32(dsv4i_f32_to_bf16(g));
          float uf = dsv4i_bf16_to_f32(dsv4i_f32_to_bf16(u));
          if (limit > 0.0f) {
            uf = uf < -limit ? -limit : (uf > limit ? limit : uf);
            gf = gf > limit ? limit : gf;
          }
          float act = (gf / (1.0f + dsv4i_expf_torch(-gf))) * uf;
          if (!shared) act = weight[sm.tok[c0 + c] * top_k + sm.slot[c0 + c]] * act;
          sm.at[c][sub0 + r] = dsv4i_f32_to_bf16(act);
        }
        __syncthreads();
      }
      /* act_quant of the tile's 32 values (one block) per token: warp c, lane = row */
      const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
      if (warp < nt) {
        const long long pr = (long long)sm.tok[c0 + warp] * n_slots + sm.slot[c0 + warp];
        const uint16_t v = sm.at[warp][lane];
        const uint32_t amax = __reduce_max_sync(0xFFFFFFFFu, dsv4i_bf16_abs_bits(v));
        const int32_t ex = dsv4i_act_quant_exp(amax);
        aq[pr * inter + row0 + lane] = dsv4i_e4m3_to_f32(dsv4i_act_quant_code(v, ex));
        if (lane == 0) sa[pr * (inter / 32) + blockIdx.x] = dsv4i_e8m0_to_f32(dsv4i_act_quant_scale(ex));
      }
      __syncthreads();
    }
  }
}

/* Grid (inter/32, min(E, n_tok·top_k) + has_shared), UP_NT threads; dim/32 <=
 * UP_NT. xq f32 [n][dim], sx f32 [n][dim/32] (act_quant of x); idx int32
 * [n][top_k], weight f32 [n][top_k]; w1, s1, w3, s3: device pointer tables
 * [E + 1] (entry E the shared expert); aq f32 [n][n_slots][inter], sa f32
 * [n][n_slots][inter/32] (n_slots = top_k + 1; written for the pairs that run);
 * route int32 [2 + 2E + n·top_k] and counters u32 [n_counters]: written by
 * block (0, 0) for moe_down. */
extern "C" __global__ void __launch_bounds__(UP_NT, 2)
dsv4_k_moe_up(int n_tok, int top_k, int has_shared, int n_experts, int dim, int inter,
              int fmt_r, int fmt_s, float limit, const float *xq, const float *sx,
              const int32_t *idx, const float *weight, const unsigned char *const *w1,
              const unsigned char *const *s1, const unsigned char *const *w3,
              const unsigned char *const *s3, float *aq, float *sa, int *route,
              unsigned *counters, int n_counters) {
  __shared__ moe_smem sm;
  if (blockIdx.x == 0 && blockIdx.y == 0) { /* for moe_down: its route table and counters */
    for (int i = threadIdx.x; i < n_counters; i += UP_NT) counters[i] = 0u;
    int *scratch = reinterpret_cast<int *>(sm.part); /* free until the tile work */
    build_route(n_tok, top_k, top_k + 1, n_experts, idx, route, sm.bm, scratch, scratch + 32);
  }
  const int e = pick_expert(n_tok, top_k, has_shared, n_experts, idx, sm.bm, &sm.sel);
  if (e < 0) return;
  const bool shared = e == n_experts;
  const int n_slots = top_k + 1;
  if ((shared ? fmt_s : fmt_r) == W_E2M1)
    up_body<W_E2M1>(sm, e, shared, n_tok, top_k, n_slots, n_experts, dim, inter, limit, xq, sx,
                    weight, idx, w1[e], s1[e], w3[e], s3[e], aq, sa);
  else
    up_body<W_E4M3>(sm, e, shared, n_tok, top_k, n_slots, n_experts, dim, inter, limit, xq, sx,
                    weight, idx, w1[e], s1[e], w3[e], s3[e], aq, sa);
}

/* ---- down + combine ------------------------------------------------------------ */

/* An expert row's value as stored: bf16 (moe_down), or fp32 unrounded (moe_down_part). */
__device__ __forceinline__ void put_row(uint16_t *o, long long i, float v) { o[i] = dsv4i_f32_to_bf16(v); }
__device__ __forceinline__ void put_row(float *o, long long i, float v) { o[i] = v; }

template <int FMT, typename OT>
__device__ void down_body(moe_smem &sm, int np, int p0, const int *pairs, int top_k, int n_slots,
                          int dim, int inter, const float *aq, const float *sa,
                          const unsigned char *pw2, const unsigned char *ps2, OT *o) {
  const int nkb = inter / 32, P = DOWN_NT / nkb, kb = threadIdx.x % nkb, ph = threadIdx.x / nkb;
  const bool active = ph < P;
  const long long ld = FMT == W_E2M1 ? inter / 2 : inter, sld = nkb;
  const int row0 = blockIdx.x * RTD, nrow = dim - row0 < RTD ? dim - row0 : RTD;
  const int SR0 = PART / (TC * (nkb + 1)), SR = SR0 < nrow ? SR0 : nrow;
  const unsigned char *const w[2] = {pw2, pw2};
  const unsigned char *const s[2] = {ps2, ps2};
  for (int c0 = 0; c0 < np; c0 += TC) {
    const int nt = np - c0 < TC ? np - c0 : TC;
    int pr[TC];
#pragma unroll
    for (int c = 0; c < TC; c++) pr[c] = c < nt ? route_pair(pairs, p0, c0 + c, n_slots, top_k) : 0;
    float xa[TC][32], xs[TC];
    load_acts(aq, inter, sa, nkb, pr, active ? nt : 0, kb, xa, xs);
    for (int sub0 = 0; sub0 < nrow; sub0 += SR) {
      const int sr = nrow - sub0 < SR ? nrow - sub0 : SR;
      if (active)
        tile_partials<FMT, 1>(w, s, ld, sld, row0, sub0, sr, SR, nkb, kb, ph, P, xa, xs, sm.part);
      __syncthreads();
      for (int q = threadIdx.x; q < sr * nt; q += DOWN_NT) {
        const int r = q % sr, c = q / sr;
        const float *pp = sm.part + (c * SR + r) * (nkb + 1);
        float acc = 0.0f;
        for (int k = 0; k < nkb; k++) acc += pp[k];
        const long long pc = route_pair(pairs, p0, c0 + c, n_slots, top_k);
        put_row(o, pc * dim + row0 + sub0 + r, acc);
      }
      __syncthreads();
    }
  }
}

/* Grid (ceil(dim/RTD), as moe_up), DOWN_NT threads; inter/32 <= DOWN_NT. aq, sa: moe_up's;
 * route: moe_up's route table (build_route); w2, s2: pointer tables; o bf16
 * [n][n_slots][dim] scratch; counters u32 [ceil(dim/RTD)] (zero on entry: moe_up);
 * out bf16 [n][ldo]. */
extern "C" __global__ void __launch_bounds__(DOWN_NT, 2)
dsv4_k_moe_down(int n_tok, int top_k, int has_shared, int n_experts, int dim, int inter,
                int fmt_r, int fmt_s, const float *aq, const float *sa, const int32_t *idx,
                const int *route, const unsigned char *const *w2, const unsigned char *const *s2,
                uint16_t *o, unsigned *counters, uint16_t *out, long long ldo) {
  __shared__ moe_smem sm;
  const int n_slots = top_k + 1;
  int p0 = -1, np = 0;
  const int e = block_expert(route, n_tok, has_shared, n_experts, &p0, &np);
  const int *pairs = route + 2 + 2 * n_experts;
  if (e >= 0) {
    if ((e == n_experts ? fmt_s : fmt_r) == W_E2M1)
      down_body<W_E2M1, uint16_t>(sm, np, p0, pairs, top_k, n_slots, dim, inter, aq, sa, w2[e], s2[e], o);
    else
      down_body<W_E4M3, uint16_t>(sm, np, p0, pairs, top_k, n_slots, dim, inter, aq, sa, w2[e], s2[e], o);
  }
  /* the last block of this row tile combines it (threadFence pattern) */
  __threadfence();
  __syncthreads();
  if (threadIdx.x == 0) sm.last = atomicAdd(&counters[blockIdx.x], 1u) == gridDim.y - 1u;
  __syncthreads();
  if (!sm.last) return;
  __threadfence();
  const int row0 = blockIdx.x * RTD, nrow = dim - row0 < RTD ? dim - row0 : RTD;
  for (int q = threadIdx.x; q < n_tok * nrow; q += DOWN_NT) {
    const int t = q / nrow, d = row0 + q % nrow;
    const int32_t *it = idx + (long long)t * top_k;
    const float y = combine_token(it, top_k, n_experts, has_shared, [&](int slot) {
      return dsv4i_bf16_to_f32(__ldcg(o + ((long long)t * n_slots + slot) * dim + d));
    });
    out[(long long)t * ldo + d] = dsv4i_f32_to_bf16(y);
  }
}

/* ---- TP shards (docs/distributed.md "GPU TP shards") ------------------------
 * moe_down_part: moe_down's expert rows over this TP rank's share of the
 * intermediate dimension, fp32 and not combined: o f32 [n][n_slots][dim] (rows
 * of skipped slots are not written). The all-reduce sums the ranks' rows, then
 * moe_combine rounds each row to bf16 and adds them as moe_down's last block
 * does: TP changes only where fp32 partial sums are added. Grid and arguments
 * as moe_down's, without counters and out. */
extern "C" __global__ void __launch_bounds__(DOWN_NT, 2)
dsv4_k_moe_down_part(int n_tok, int top_k, int has_shared, int n_experts, int dim, int inter,
                     int fmt_r, int fmt_s, const float *aq, const float *sa, const int32_t *idx,
                     const int *route, const unsigned char *const *w2,
                     const unsigned char *const *s2, float *o) {
  __shared__ moe_smem sm;
  (void)n_tok, (void)idx;
  const int n_slots = top_k + 1;
  int p0 = -1, np = 0;
  const int e = block_expert(route, n_tok, has_shared, n_experts, &p0, &np);
  const int *pairs = route + 2 + 2 * n_experts;
  if (e < 0) return; /* uniform over the block */
  if ((e == n_experts ? fmt_s : fmt_r) == W_E2M1)
    down_body<W_E2M1, float>(sm, np, p0, pairs, top_k, n_slots, dim, inter, aq, sa, w2[e], s2[e], o);
  else
    down_body<W_E4M3, float>(sm, np, p0, pairs, top_k, n_slots, dim, inter, aq, sa, w2[e], s2[e], o);
}

/* out[t][d] = bf16(sum of bf16(o[t][slot][d]) over the token's experts in ascending id,
 * the shared expert last, in fp32): moe_down's combine over fp32 rows. Grid
 * ceil(n_tok·dim/256), 256 threads. */
extern "C" __global__ void __launch_bounds__(256)
dsv4_k_moe_combine(int n_tok, int top_k, int has_shared, int n_experts, int dim,
                   const int32_t *idx, const float *o, uint16_t *out, long long ldo) {
  const long long q = (long long)blockIdx.x * 256 + threadIdx.x;
  if (q >= (long long)n_tok * dim) return;
  const int t = (int)(q / dim), d = (int)(q % dim), n_slots = top_k + 1;
  const int32_t *it = idx + (long long)t * top_k;
  const float y = combine_token(it, top_k, n_experts, has_shared, [&](int slot) {
    return dsv4i_bf16_to_f32(dsv4i_f32_to_bf16(o[((long long)t * n_slots + slot) * dim + d]));
  });
  out[(long long)t * ldo + d] = dsv4i_f32_to_bf16(y);
}
