/*
 * DSpark draft head on the device (spec §6.1 step 4): the Markov step, fused.
 * For draft position k of every sequence, ONE launch:
 *   logits_k += e_k · markov.headᵀ, e_k = markov.embed[tok_k] (fp32, each
 *   row's dot sequential over the rank: the CPU oracle's order, so the
 *   logits are bit-identical);
 *   tok_{k+1} = dsv4i_cpu_sample(logits_k[0..n_valid), T, seed, counter + k):
 *   the not-drawable rule (a NaN or +inf, or no finite value: the token is
 *   -1 - (its first index, or n_valid), the host raises the CPU's error),
 *   argmax for T <= 0 (lower index on ties; exact), else the exponential race
 *   p_v / q_v with the same stateless noise (model/ref_math.h);
 *   e_{k+1} = markov.embed[tok_{k+1}] gathered for the next launch.
 *
 * The step reads the whole 66 MB head (129,280 x 256 bf16), so it is
 * bandwidth-bound at few sequences and bound by the fp32 pipes at 16
 * (sequences x rows x rank multiply-adds). Layout:
 *  - a block takes MK_ROWS = 256 vocabulary rows (4 warps x 2 tiles of 32)
 *    for up to MK_GMAX sequences per pass (the head is read once per pass, not
 *    once per sequence); each warp streams its rows through a 3-stage cp.async
 *    ring in 64-byte pieces (two pieces in flight while one is used; no
 *    registers held by loads), lane l runs row l's dot in rank order;
 *  - the multiply-add: the CPU's separate multiply and add, or one fmaf where
 *    that is provably the same: a product of two bf16 values is exact in fp32
 *    unless it underflows or overflows, and then fadd(acc, fmul(e, h)) ==
 *    fmaf(e, h, acc) bit for bit. A pass of 4 or more sequences takes the fmaf
 *    path when every staged |e| is 0 or in [2^-40, 2^40) and, per piece and
 *    row, every |h| is 0 or in [2^-93, 2^87) (|e h| in [2^-133, 2^127): the
 *    16-bit product lands on the fp32 grid); anything else runs the separate
 *    operations;
 *  - block epilogue, all sequences of the pass at once: the block's logits go
 *    through shared memory (the ring's space), 8 threads per sequence, 32 rows
 *    each in index order, then a 3-step shuffle tree (fixed: deterministic).
 *    Each (sequence, block) leaves one 32-byte partial: the best logit and
 *    index (argmax, and the CPU's fallback), the first not-drawable index or
 *    whether any value is finite, and for T > 0 the block's max m_b of l/T,
 *    Σ exp(l/T − m_b) and its race candidate (the largest exp(l/T − m_b) / q_v,
 *    with l/T and q_v);
 *  - the last block to arrive (atomic ticket after a fence) reduces the
 *    partials, one warp per sequence: for T > 0 the global max and Σ
 *    (online over the partials, fixed order) and every block candidate's race
 *    value in the CPU's formula (expf(l/T − max)·(1/Σ)) / q; it writes the
 *    token, gathers e_{k+1} and resets the ticket, so a captured graph replays.
 * Σ runs in another order than the CPU's index-order loop and a block's
 * candidate is chosen on exp(l/T − m_b) / q: a sampled token differs from the
 * CPU's only where two race values agree to a few ulps. Host side:
 * lib/gpu/dspark_markov.c.
 */
#include <limits.h>

#include "best.cuh"
#include "gemv.cuh"
#include "model/ref_math.h"

#define MK_THREADS 128
#define MK_WARPS (MK_THREADS / 32)
#define MK_TILES 2                          /* 32-row tiles per warp */
#define MK_ROWS (MK_WARPS * MK_TILES * 32)  /* vocabulary rows per block: 256 */
#define MK_PIECE 32                         /* rank elements per ring stage (64 B of a row) */
#define MK_STAGES 3
#define MK_STAGE_BYTES (32 * MK_PIECE * 2)  /* one stage: 32 rows x 64 B */
#define MK_GMAX 16                          /* sequences per pass (at most) */
#define MK_ES 4096                          /* staged embedding floats: G <= 4096 / R */
#define MK_MAX_RANK 512
#define MK_FMA_MIN 4                        /* sequences from which the fmaf path pays its check */
#define MK_LLD MK_ROWS                       /* staged logits stride */
#define MK_SPW 4                            /* last block: sequences per warp at once */

/* one (sequence, block) partial, 32 B (lib/gpu/dspark_markov.c sizes the scratch):
 * a = {m_b, Σ, candidate l/T, candidate q}, b = {candidate id, argmax id, flag, argmax logit};
 * flag: the first NaN / +inf index below n_valid, else INT_MAX - 1 if a value below
 * n_valid is not -inf, else INT_MAX (the minimum over blocks is the row's verdict) */
struct __align__(16) mk_part {
  float4 a;
  int4 b;
};

namespace {

__device__ __forceinline__ float temp_of(float T) { return T > 1e-5f ? T : 1e-5f; }

/* bits 15 / 31 set where a bf16 half of x is outside the fmaf-safe range: |h| in
 * (0, 2^-93) (exponent field 1..33) or >= 2^87 (field >= 214, inf and NaN included) */
__device__ __forceinline__ unsigned int unsafe_bf16x2(unsigned int x) {
  const unsigned int a = x & 0x7FFF7FFFu;
  const unsigned int big = a + 0x15001500u; /* half >= 0x6B00 */
  const unsigned int nz = a + 0x7FFF7FFFu;  /* half >= 1 */
  const unsigned int ge = a + 0x6F006F00u;  /* half >= 0x1100 */
  return (big | (nz & ~ge)) & 0x80008000u;
}

/* acc[g] over the 8 ranks of w starting at r, g < G */
template <bool FMA>
__device__ __forceinline__ void dot8(float *acc, uint4 w, const float *es, int R, int r, int G) {
  const unsigned int u[4] = {w.x, w.y, w.z, w.w};
  float h[8];
#pragma unroll
  for (int j = 0; j < 4; j++) {
    h[2 * j] = __uint_as_float(u[j] << 16);
    h[2 * j + 1] = __uint_as_float(u[j] & 0xFFFF0000u);
  }
#pragma unroll
  for (int g = 0; g < MK_GMAX; g++) {
    if (g >= G) break;
    const float4 a = *(const float4 *)&es[g * R + r], b = *(const float4 *)&es[g * R + r + 4];
    const float ev[8] = {a.x, a.y, a.z, a.w, b.x, b.y, b.z, b.w};
#pragma unroll
    for (int j = 0; j < 8; j++)
      acc[g] = FMA ? fmaf(ev[j], h[j], acc[g]) : __fadd_rn(acc[g], __fmul_rn(ev[j], h[j]));
  }
}

/* a partial written by another block of this launch (L2, not a stale L1 line) */
__device__ __forceinline__ mk_part load_part(const mk_part *p) {
  mk_part q;
  q.a = __ldcg(&p->a);
  q.b = __ldcg(&p->b);
  return q;
}

}  // namespace

/*
 * Grid: n_chunks = ceil(V / MK_ROWS) blocks of MK_THREADS threads.
 * toks: int32 [n][B + 1] (column 0 the anchors; step k writes column k + 1);
 * logits: f32 [n][B][V] (row k: base in, base + Markov bias out);
 * embed, head: bf16 [V][R] (8 | R <= MK_MAX_RANK); temp f32 [n]; seed,
 * counter u64 [n] (step k draws with counter + k); n_valid int32 [n] in
 * [1, V]; part: mk_part [n][n_chunks]; e: bf16 [n][R], e_{k+1} out (read as
 * e_k when k > 0); ticket: uint32 [1], zero before the first launch (left
 * zero after each).
 */
extern "C" __global__ void __launch_bounds__(MK_THREADS, 4) dsv4_k_dspark_markov_bf16(
    int n, int n_chunks, int B, int k, int V, int R, int *__restrict__ toks, float *logits,
    const unsigned short *__restrict__ embed, const unsigned short *__restrict__ head,
    const float *__restrict__ temp, const unsigned long long *__restrict__ seed,
    const unsigned long long *__restrict__ counter, const int *__restrict__ n_valid,
    mk_part *part, unsigned short *e, unsigned int *ticket) {
  /* the warps' rings; after the streaming, the block's logits [MK_GMAX][MK_LLD] */
  __shared__ __align__(16) unsigned char ring[MK_WARPS * MK_STAGES * MK_STAGE_BYTES];
  __shared__ __align__(16) float es[MK_ES];
  __shared__ float wbl[MK_WARPS][MK_GMAX], wm[MK_WARPS][MK_GMAX], wsum[MK_WARPS][MK_GMAX];
  __shared__ float wcv[MK_WARPS][MK_GMAX];
  __shared__ int wbad[MK_WARPS][MK_GMAX], wfin[MK_WARPS][MK_GMAX], wbi[MK_WARPS][MK_GMAX];
  __shared__ int wci[MK_WARPS][MK_GMAX];
  __shared__ int s_last;
  static_assert(MK_WARPS == 4, "the epilogue sums the 4 warps as (w0 + w1) + (w2 + w3)");
  static_assert(MK_GMAX * MK_LLD * 4 <= (int)sizeof(ring), "logits staging fits the rings");
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  const int v0 = blockIdx.x * MK_ROWS;
  const int gcap = MK_ES / R < MK_GMAX ? MK_ES / R : MK_GMAX; /* >= 8 */
  const int ppr = (R + MK_PIECE - 1) / MK_PIECE;             /* pieces per row */
  const int np = MK_TILES * ppr;                             /* pieces per warp per pass */
  unsigned char *wring = ring + warp * (MK_STAGES * MK_STAGE_BYTES);
  float *ls = reinterpret_cast<float *>(ring);
  const int swz = (lane >> 1) & 3; /* lane l's row: chunk c sits at c ^ swz */

  for (int g0 = 0; g0 < n; g0 += gcap) {
    const int G = n - g0 < gcap ? n - g0 : gcap;
    __syncthreads(); /* the previous pass's readers of es and the staged logits are done */
    int safe = 1;
    for (int x = threadIdx.x; x < G * R; x += MK_THREADS) {
      const int g = x / R, r = x - g * R, i = g0 + g;
      int tk = toks[(long long)i * (B + 1) + k];
      tk = tk < 0 ? 0 : tk;
      const float f =
          dsv4i_bf16_to_f32(k == 0 ? embed[(long long)tk * R + r] : e[(long long)i * R + r]);
      es[x] = f;
      const float a = fabsf(f);
      safe &= f == 0.0f || (a >= 0x1p-40f && a < 0x1p40f);
    }
    const bool fma_ok = __syncthreads_and(safe) && G >= MK_FMA_MIN;

    /* piece p of this warp (tile p / ppr, ranks [32 (p % ppr), +32)) into stage p % S:
     * lane l copies 16 B of rows l / 4 + 8 j, chunk l % 4 (swizzled by the row) */
    auto issue = [&](int p) {
      const int t = p / ppr, r0 = (p - t * ppr) * MK_PIECE, c = lane & 3;
      unsigned char *st = wring + (p % MK_STAGES) * MK_STAGE_BYTES;
#pragma unroll
      for (int j = 0; j < 4; j++) {
        const int rr = (lane >> 2) + 8 * j, row = v0 + (warp * MK_TILES + t) * 32 + rr;
        const int r = r0 + 8 * c;
        const bool ok = row < V && r < R;
        cp_async16(st + rr * 64 + ((c ^ ((rr >> 1) & 3)) << 4),
                   ok ? (const void *)(head + (long long)row * R + r) : (const void *)head,
                   ok ? 16 : 0);
      }
    };
#pragma unroll
    for (int s = 0; s < MK_STAGES - 1; s++) {
      if (s < np) issue(s);
      cp_async_commit();
    }
    float lg[MK_TILES][MK_GMAX];
#pragma unroll
    for (int t = 0; t < MK_TILES; t++) {
      const int v = v0 + (warp * MK_TILES + t) * 32 + lane;
#pragma unroll
      for (int g = 0; g < MK_GMAX; g++) /* the base logits, used after the tile */
        lg[t][g] = g < G && v < V ? logits[((long long)(g0 + g) * B + k) * V + v] : 0.0f;
      float acc[MK_GMAX];
#pragma unroll
      for (int g = 0; g < MK_GMAX; g++) acc[g] = 0.0f;
      for (int q = 0; q < ppr; q++) {
        const int p = t * ppr + q;
        if (p + MK_STAGES - 1 < np) issue(p + MK_STAGES - 1); /* the stage piece p - 1 left */
        cp_async_commit();
        cp_async_wait<MK_STAGES - 1>(); /* this lane's copies of piece p are in */
        __syncwarp();                   /* and every lane's */
        const uint4 *row = reinterpret_cast<const uint4 *>(wring + (p % MK_STAGES) * MK_STAGE_BYTES +
                                                           lane * 64);
        const int r0 = q * MK_PIECE, nc = (R - r0 < MK_PIECE ? R - r0 : MK_PIECE) / 8;
        uint4 w[4];
        unsigned int bad = 0u;
#pragma unroll
        for (int c = 0; c < 4; c++) {
          w[c] = row[c ^ swz];
          if (fma_ok && c < nc) bad |= unsafe_bf16x2(w[c].x) | unsafe_bf16x2(w[c].y) |
                                       unsafe_bf16x2(w[c].z) | unsafe_bf16x2(w[c].w);
        }
        if (fma_ok && !bad) {
#pragma unroll
          for (int c = 0; c < 4; c++)
            if (c < nc) dot8<true>(acc, w[c], es, R, r0 + 8 * c, G);
        } else {
#pragma unroll
          for (int c = 0; c < 4; c++)
            if (c < nc) dot8<false>(acc, w[c], es, R, r0 + 8 * c, G);
        }
        __syncwarp(); /* every lane has read the stage before it is refilled */
      }
#pragma unroll
      for (int g = 0; g < MK_GMAX; g++) {
        if (g >= G) break;
        lg[t][g] = __fadd_rn(lg[t][g], acc[g]);
        if (v < V) logits[((long long)(g0 + g) * B + k) * V + v] = lg[t][g];
      }
    }
    cp_async_wait<0>();
    __syncthreads(); /* every warp is done with its ring: it takes the logits now */
#pragma unroll
    for (int t = 0; t < MK_TILES; t++)
#pragma unroll
      for (int g = 0; g < MK_GMAX; g++)
        if (g < G) ls[g * MK_LLD + (warp * MK_TILES + t) * 32 + lane] = lg[t][g];
    __syncthreads();

    /* epilogue, sequence by sequence: thread j takes rows j and j + MK_THREADS (every
     * thread busy however few sequences), warp trees by shuffles, then the 4 warps in
     * order; the same shapes whatever G is, so Σ (the one sum) is batch-invariant */
    const int xa = threadIdx.x, xb = threadIdx.x + MK_THREADS;
    for (int g = 0; g < G; g++) {
      const int i = g0 + g, nv = n_valid[i];
      const float T = temp[i], tt = temp_of(T);
      const float *lrow = ls + g * MK_LLD;
      int first_bad = INT_MAX, fin = 0, bi = -1;
      float bl = 0.0f, m = -INFINITY;
#pragma unroll
      for (int h = 0; h < 2; h++) {
        const int x = h ? xb : xa, v = v0 + x;
        if (v >= nv) continue;
        const float l = lrow[x];
        if (l != l || l == INFINITY) first_bad = min(first_bad, v);
        fin |= l != -INFINITY;
        dsv4_best_merge(bl, bi, l, v);
        if (T > 0.0f) m = fmaxf(m, __fdiv_rn(l, tt));
      }
#pragma unroll
      for (int o = 16; o > 0; o >>= 1) {
        first_bad = min(first_bad, __shfl_xor_sync(0xFFFFFFFFu, first_bad, o));
        fin |= __shfl_xor_sync(0xFFFFFFFFu, fin, o);
        m = fmaxf(m, __shfl_xor_sync(0xFFFFFFFFu, m, o));
        const float bl2 = __shfl_xor_sync(0xFFFFFFFFu, bl, o);
        const int bi2 = __shfl_xor_sync(0xFFFFFFFFu, bi, o);
        dsv4_best_merge(bl, bi, bl2, bi2);
      }
      if (lane == 0) wbad[warp][g] = first_bad, wfin[warp][g] = fin, wbl[warp][g] = bl,
                     wbi[warp][g] = bi, wm[warp][g] = m;
    }
    __syncthreads();
    /* T > 0: Σ exp(l/T − m_b) (leaves: row j + row j + MK_THREADS; then the fixed trees)
     * and the race candidate (a total order: any tree) */
    for (int g = 0; g < G; g++) {
      const int i = g0 + g;
      const float T = temp[i], tt = temp_of(T);
      const float m = fmaxf(fmaxf(wm[0][g], wm[1][g]), fmaxf(wm[2][g], wm[3][g]));
      if (!(T > 0.0f) || m == -INFINITY) continue; /* uniform over the block */
      const int nv = n_valid[i];
      const unsigned long long sd = seed[i], ctr = counter[i] + (unsigned long long)k;
      const float *lrow = ls + g * MK_LLD;
      float ex[2] = {0.0f, 0.0f}, cv = 0.0f;
      int ci = -1;
#pragma unroll
      for (int h = 0; h < 2; h++) {
        const int x = h ? xb : xa, v = v0 + x;
        if (v >= nv) continue;
        ex[h] = expf(__fsub_rn(__fdiv_rn(lrow[x], tt), m));
        dsv4_best_merge(cv, ci, __fdiv_rn(ex[h], dsv4i_sample_noise_at(sd, ctr, v)), v);
      }
      float s = __fadd_rn(ex[0], ex[1]);
#pragma unroll
      for (int o = 16; o > 0; o >>= 1) s = __fadd_rn(s, __shfl_xor_sync(0xFFFFFFFFu, s, o));
      dsv4_warp_best(cv, ci);
      if (lane == 0) wsum[warp][g] = s, wcv[warp][g] = cv, wci[warp][g] = ci;
    }
    __syncthreads();
    if ((int)threadIdx.x < G) { /* thread g: sequence g0 + g's partial */
      const int g = threadIdx.x, i = g0 + g;
      const float T = temp[i], tt = temp_of(T);
      int first_bad = wbad[0][g], fin = wfin[0][g], bi = wbi[0][g];
      float bl = wbl[0][g], m = wm[0][g];
      for (int w = 1; w < MK_WARPS; w++) {
        first_bad = min(first_bad, wbad[w][g]);
        fin |= wfin[w][g];
        dsv4_best_merge(bl, bi, wbl[w][g], wbi[w][g]);
        m = fmaxf(m, wm[w][g]);
      }
      float s = 0.0f, cy = 0.0f, cq = 0.0f;
      int ci = -1;
      if (T > 0.0f && m != -INFINITY) {
        float cv = wcv[0][g];
        ci = wci[0][g];
        for (int w = 1; w < MK_WARPS; w++) dsv4_best_merge(cv, ci, wcv[w][g], wci[w][g]);
        s = __fadd_rn(__fadd_rn(wsum[0][g], wsum[1][g]), __fadd_rn(wsum[2][g], wsum[3][g]));
        if (ci >= 0) {
          cy = __fdiv_rn(ls[g * MK_LLD + (ci - v0)], tt);
          cq = dsv4i_sample_noise_at(seed[i], counter[i] + (unsigned long long)k, ci);
        }
      }
      mk_part *pp = part + (long long)i * n_chunks + blockIdx.x;
      pp->a = make_float4(ci >= 0 ? m : -INFINITY, s, cy, cq);
      pp->b = make_int4(ci, bi, first_bad != INT_MAX ? first_bad : fin ? INT_MAX - 1 : INT_MAX,
                        __float_as_int(bl));
    }
  }

  __threadfence(); /* this block's partials and logits before its ticket */
  __syncthreads();
  if (threadIdx.x == 0) s_last = atomicAdd(ticket, 1u) == (unsigned int)(n_chunks - 1);
  __syncthreads();
  if (!s_last) return;
  /* the last block: every other block's partials are visible. A warp takes MK_SPW
   * sequences at once (their loads in flight together); lane l reads chunks l, l + 32, ..
   * in order, then a shuffle tree: the same shapes for every n */
  __threadfence();
  for (int i0 = 0; i0 < n; i0 += MK_WARPS * MK_SPW) {
    int ii[MK_SPW], flag[MK_SPW], bi[MK_SPW];
    float bl[MK_SPW], M[MK_SPW], S[MK_SPW];
#pragma unroll
    for (int u = 0; u < MK_SPW; u++) {
      ii[u] = i0 + warp + MK_WARPS * u;
      flag[u] = INT_MAX, bi[u] = -1, bl[u] = 0.0f, M[u] = -INFINITY, S[u] = 0.0f;
    }
#pragma unroll 2
    for (int c = lane; c < n_chunks; c += 32) { /* online (max, Σ) in chunk order per lane */
#pragma unroll
      for (int u = 0; u < MK_SPW; u++) {
        if (ii[u] >= n) continue; /* uniform over the warp */
        const mk_part q = load_part(part + (long long)ii[u] * n_chunks + c);
        flag[u] = min(flag[u], q.b.z);
        dsv4_best_merge(bl[u], bi[u], __int_as_float(q.b.w), q.b.y);
        if (q.b.x >= 0 && q.a.x != -INFINITY) {
          if (q.a.x > M[u]) {
            S[u] = __fadd_rn(__fmul_rn(S[u], expf(__fsub_rn(M[u], q.a.x))), q.a.y);
            M[u] = q.a.x;
          } else {
            S[u] = __fadd_rn(S[u], __fmul_rn(q.a.y, expf(__fsub_rn(q.a.x, M[u]))));
          }
        }
      }
    }
    float inv[MK_SPW], rv[MK_SPW];
    int race[MK_SPW], ri[MK_SPW];
#pragma unroll
    for (int u = 0; u < MK_SPW; u++) {
#pragma unroll
      for (int o = 16; o > 0; o >>= 1) {
        flag[u] = min(flag[u], __shfl_xor_sync(0xFFFFFFFFu, flag[u], o));
        const float bl2 = __shfl_xor_sync(0xFFFFFFFFu, bl[u], o);
        const int bi2 = __shfl_xor_sync(0xFFFFFFFFu, bi[u], o);
        dsv4_best_merge(bl[u], bi[u], bl2, bi2);
        const float M2 = __shfl_xor_sync(0xFFFFFFFFu, M[u], o);
        const float S2 = __shfl_xor_sync(0xFFFFFFFFu, S[u], o);
        if (M2 != -INFINITY) { /* the same operands in both lanes of a pair: the same result */
          const float Mx = fmaxf(M[u], M2);
          S[u] = M[u] == -INFINITY ? S2
                                   : __fadd_rn(__fmul_rn(S[u], expf(__fsub_rn(M[u], Mx))),
                                               __fmul_rn(S2, expf(__fsub_rn(M2, Mx))));
          M[u] = Mx;
        }
      }
      /* the race runs where the row is drawable at T > 0 (uniform over the warp) */
      race[u] = ii[u] < n && flag[u] == INT_MAX - 1 && temp[ii[u]] > 0.0f;
      inv[u] = race[u] ? __fdiv_rn(1.0f, S[u]) : 0.0f;
      rv[u] = 0.0f, ri[u] = -1;
    }
#pragma unroll 2
    for (int c = lane; c < n_chunks; c += 32) {
#pragma unroll
      for (int u = 0; u < MK_SPW; u++) {
        if (!race[u]) continue;
        const mk_part q = load_part(part + (long long)ii[u] * n_chunks + c);
        if (q.b.x < 0) continue;
        const float pr = __fmul_rn(expf(__fsub_rn(q.a.z, M[u])), inv[u]);
        dsv4_best_merge(rv[u], ri[u], __fdiv_rn(pr, q.a.w), q.b.x);
      }
    }
#pragma unroll
    for (int u = 0; u < MK_SPW; u++) {
      if (ii[u] >= n) continue;
      const int i = ii[u], nv = n_valid[i];
      if (race[u]) dsv4_warp_best(rv[u], ri[u]);
      int tok;
      if (flag[u] < nv) tok = -1 - flag[u];          /* a NaN or +inf below n_valid */
      else if (flag[u] == INT_MAX) tok = -1 - nv;    /* nothing finite */
      else if (!race[u]) tok = bi[u] < 0 ? 0 : bi[u]; /* argmax */
      else tok = ri[u] >= 0 ? ri[u] : (bi[u] < 0 ? 0 : bi[u]);
      if (lane == 0) toks[(long long)i * (B + 1) + k + 1] = tok;
      const int src = tok < 0 ? 0 : tok;
      for (int c = lane; c < R / 8; c += 32)
        reinterpret_cast<uint4 *>(e + (long long)i * R)[c] =
            reinterpret_cast<const uint4 *>(embed + (long long)src * R)[c];
    }
  }
  if (threadIdx.x == 0) *ticket = 0u;
}
