/*
 * DSpark draft head on the device (spec §6.1 step 4): the Markov step, fused.
 * For draft position k of every sequence, ONE launch:
 *   logits_k += e_k · markov.headᵀ, e_k = markov.embed[tok_k] (fp32, each
 *   row's dot sequential over the rank with separate multiplies and adds:
 *   the CPU oracle's order, so the logits are bit-identical);
 *   tok_{k+1} = dsv4i_cpu_sample(logits_k[0..n_valid), T, seed, counter + k):
 *   the not-drawable rule (a NaN or +inf, or no finite value: the token is
 *   -1 - (its first index, or n_valid), the host raises the CPU's error),
 *   argmax for T <= 0 (lower index on ties; exact), else the exponential race
 *   p_v / q_v with the same stateless noise (model/ref_math.h);
 *   e_{k+1} = markov.embed[tok_{k+1}] gathered for the next launch.
 * Each block takes MK_ROWS vocabulary rows for every sequence (the head is
 * read once per step, not once per sequence), stages them through shared
 * memory in coalesced pieces, and leaves one partial per (sequence, block):
 * its best (greedy) or, for T > 0, its max of l/T, Σ exp(l/T − max) and its
 * race candidate. The last block to arrive (atomic ticket after a fence)
 * reduces the partials: for T > 0 the global max, Σ = Σ_b s_b·exp(m_b − max)
 * and the race value of every block's candidate in the CPU's formula
 * (expf(l/T − max)·(1/Σ)) / q; it writes the token, gathers e_{k+1} and
 * resets the ticket, so a captured graph replays. Σ runs in another order
 * than the CPU's index-order loop and a block's candidate is chosen on
 * exp(l/T − m_b) / q: a sampled token differs from the CPU's only where two
 * race values agree to a few ulps. Host side: lib/gpu/dspark_markov.c.
 */
#include <limits.h>

#include "best.cuh"
#include "kvrec.cuh"
#include "model/ref_math.h"

#define MK_THREADS 256
#define MK_ROWS MK_THREADS /* vocabulary rows per block: one per thread */
#define MK_GROUP 8         /* sequences per pass over the block's head rows */
#define MK_PIECE 32        /* rank elements staged per piece (64 B of a row) */
#define MK_LD 40           /* staged row stride in bf16 (80 B: conflict-free uint4 reads) */
#define MK_MAX_RANK 512
#define MK_WARPS (MK_THREADS / 32)

/* one (sequence, block) partial; 32 B (lib/gpu/dspark_markov.c sizes the scratch) */
struct __align__(16) mk_part {
  float m;  /* T <= 0: the best logit; T > 0: max of l/T */
  float s;  /* T > 0: Σ exp(l/T − m) */
  float lc; /* T > 0: the candidate's logit */
  int idx;  /* T <= 0: the argmax; T > 0: the race candidate; -1: none */
  int amax; /* T > 0: argmax of l/T (the CPU's fallback when no race value is a number) */
  int bad;  /* first NaN / +inf index below n_valid, INT_MAX: none */
  int fin;  /* a value below n_valid other than -inf */
  int pad;
};

namespace {

__device__ __forceinline__ float warp_sum(float x) {
  for (int o = 16; o > 0; o >>= 1) x = __fadd_rn(x, __shfl_xor_sync(0xFFFFFFFFu, x, o));
  return x;
}
__device__ __forceinline__ int warp_min(int x) {
  for (int o = 16; o > 0; o >>= 1) x = min(x, __shfl_xor_sync(0xFFFFFFFFu, x, o));
  return x;
}

__device__ __forceinline__ float temp_of(float T) { return T > 1e-5f ? T : 1e-5f; }

/* lane l's share of the piece [r0, r0 + MK_PIECE) of the warp's 32 head rows from row0:
 * 16 B of row row0 + l / 4 + 8 j at rank r0 + 8 (l % 4); zeros past V or R */
__device__ __forceinline__ void load_piece(uint4 *nx, const unsigned short *__restrict__ head,
                                           int row0, int V, int R, int r0, int lane) {
  const int q = lane & 3, pw = R - r0 < MK_PIECE ? R - r0 : MK_PIECE;
  #pragma unroll
  for (int j = 0; j < 4; j++) {
    const int row = row0 + (lane >> 2) + 8 * j;
    nx[j] = make_uint4(0u, 0u, 0u, 0u);
    if (row < V && 8 * q < pw) nx[j] = *(const uint4 *)(head + (long long)row * R + r0 + 8 * q);
  }
}

/* a partial written by another block of this launch (L2, not a stale L1 line) */
__device__ __forceinline__ mk_part load_part(const mk_part *p) {
  const int4 a = __ldcg((const int4 *)p), b = __ldcg((const int4 *)p + 1);
  mk_part q;
  q.m = __int_as_float(a.x);
  q.s = __int_as_float(a.y);
  q.lc = __int_as_float(a.z);
  q.idx = a.w;
  q.amax = b.x;
  q.bad = b.y;
  q.fin = b.z;
  q.pad = b.w;
  return q;
}

struct op_min {
  __device__ int operator()(int a, int b) const { return min(a, b); }
};
struct op_max {
  __device__ float operator()(float a, float b) const { return fmaxf(a, b); }
};
struct op_add {
  __device__ float operator()(float a, float b) const { return __fadd_rn(a, b); }
};

/* op over the block (a fixed tree: deterministic), in every thread; every thread calls it */
template <typename T, typename Op>
__device__ T block_all(T x, Op op) {
  __shared__ T s[MK_WARPS];
  for (int o = 16; o > 0; o >>= 1) x = op(x, __shfl_xor_sync(0xFFFFFFFFu, x, o));
  __syncthreads(); /* a previous call's readers are done */
  if ((threadIdx.x & 31) == 0) s[threadIdx.x >> 5] = x;
  __syncthreads();
  T t = s[0];
  for (int w = 1; w < MK_WARPS; w++) t = op(t, s[w]);
  return t;
}

/* the last block: sequence i's token from its n_chunks partials, the whole block (every
 * thread calls it; the early returns are the same in every thread) */
__device__ int final_token(const mk_part *p, int n_chunks, int nv, float T, unsigned long long seed,
                           unsigned long long ctr) {
  int bad = INT_MAX, fin = 0, bi = -1;
  float bv = 0.0f, mx = -INFINITY;
  for (int c = threadIdx.x; c < n_chunks; c += MK_THREADS) {
    const mk_part q = load_part(p + c);
    bad = min(bad, q.bad);
    fin |= q.fin;
    if (T > 0.0f) {
      if (q.idx >= 0) mx = fmaxf(mx, q.m);
    } else {
      dsv4_best_merge(bv, bi, q.m, q.idx);
    }
  }
  bad = block_all(bad, op_min());
  fin = __syncthreads_or(fin);
  if (bad < nv) return -1 - bad;
  if (!fin) return -1 - nv;
  if (!(T > 0.0f)) {
    dsv4_block_best<MK_THREADS>(bv, bi);
    return bi < 0 ? 0 : bi;
  }
  const float t = temp_of(T);
  mx = block_all(mx, op_max());
  float s = 0.0f;
  for (int c = threadIdx.x; c < n_chunks; c += MK_THREADS) {
    const mk_part q = load_part(p + c);
    if (q.idx >= 0) s = __fadd_rn(s, __fmul_rn(q.s, expf(__fsub_rn(q.m, mx))));
  }
  const float inv = __fdiv_rn(1.0f, block_all(s, op_add()));
  float av = 0.0f;
  int ai = -1;
  for (int c = threadIdx.x; c < n_chunks; c += MK_THREADS) {
    const mk_part q = load_part(p + c);
    if (q.idx < 0) continue;
    const float pr = __fmul_rn(expf(__fsub_rn(__fdiv_rn(q.lc, t), mx)), inv);
    dsv4_best_merge(bv, bi, __fdiv_rn(pr, dsv4i_sample_noise_at(seed, ctr, q.idx)), q.idx);
    dsv4_best_merge(av, ai, q.m, q.amax);
  }
  dsv4_block_best<MK_THREADS>(bv, bi);
  dsv4_block_best<MK_THREADS>(av, ai);
  return bi >= 0 ? bi : (ai < 0 ? 0 : ai);
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
  __shared__ __align__(16) float es[MK_GROUP][MK_MAX_RANK];
  __shared__ __align__(16) unsigned short hs[MK_WARPS][32 * MK_LD];
  __shared__ float wv[MK_GROUP][MK_WARPS], wm[MK_GROUP][MK_WARPS];
  __shared__ int wi[MK_GROUP][MK_WARPS], wb[MK_GROUP][MK_WARPS], wf[MK_GROUP][MK_WARPS];
  __shared__ float bm[MK_GROUP];
  __shared__ int s_last;
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  const int v0 = blockIdx.x * MK_ROWS, v = v0 + threadIdx.x;
  const int wrow0 = v0 + warp * 32; /* the warp's first row */
  for (int g0 = 0; g0 < n; g0 += MK_GROUP) {
    const int G = n - g0 < MK_GROUP ? n - g0 : MK_GROUP;
    __syncthreads(); /* the previous group's readers of es are done */
    for (int x = threadIdx.x; x < G * R; x += MK_THREADS) {
      const int g = x / R, r = x % R, i = g0 + g;
      int tk = toks[(long long)i * (B + 1) + k];
      tk = tk < 0 ? 0 : tk;
      es[g][r] = dsv4i_bf16_to_f32(k == 0 ? embed[(long long)tk * R + r] : e[(long long)i * R + r]);
    }
    __syncthreads();
    /* bias: the warp stages its 32 rows a piece at a time (lane l loads 16 B of row
     * l / 4 + 8 j; the next piece is in flight while this one is used), then lane l runs
     * row l's dot in rank order */
    float acc[MK_GROUP];
    #pragma unroll
    for (int g = 0; g < MK_GROUP; g++) acc[g] = 0.0f;
    uint4 nx[4];
    load_piece(nx, head, wrow0, V, R, 0, lane);
    for (int r0 = 0; r0 < R; r0 += MK_PIECE) {
      const int pw = R - r0 < MK_PIECE ? R - r0 : MK_PIECE; /* a multiple of 8 */
      #pragma unroll
      for (int j = 0; j < 4; j++)
        *(uint4 *)(&hs[warp][((lane >> 2) + 8 * j) * MK_LD + 8 * (lane & 3)]) = nx[j];
      __syncwarp();
      if (r0 + MK_PIECE < R) load_piece(nx, head, wrow0, V, R, r0 + MK_PIECE, lane);
      const unsigned short *hr = &hs[warp][lane * MK_LD];
      for (int q = 0; q < pw / 8; q++) {
        const uint4 w4 = *(const uint4 *)(hr + 8 * q);
        const unsigned int w[4] = {w4.x, w4.y, w4.z, w4.w};
        float h[8];
        #pragma unroll
        for (int j = 0; j < 8; j++)
          h[j] = dsv4i_bf16_to_f32((unsigned short)(w[j >> 1] >> (16 * (j & 1))));
        const int r = r0 + 8 * q;
        #pragma unroll
        for (int g = 0; g < MK_GROUP; g++) {
          if (g >= G) continue;
          const float4 a = *(const float4 *)&es[g][r], b = *(const float4 *)&es[g][r + 4];
          const float ev[8] = {a.x, a.y, a.z, a.w, b.x, b.y, b.z, b.w};
          #pragma unroll
          for (int j = 0; j < 8; j++) acc[g] = __fadd_rn(acc[g], __fmul_rn(ev[j], h[j]));
        }
      }
      __syncwarp();
    }
    /* logits, then per sequence the block's partial: phase 1 best / max, flags */
    float lg[MK_GROUP];
    #pragma unroll
    for (int g = 0; g < MK_GROUP; g++) {
      lg[g] = 0.0f;
      if (g >= G) continue;
      const int i = g0 + g;
      const int nv = n_valid[i];
      const float T = temp[i];
      int bi = -1, bad = INT_MAX, fin = 0;
      float bv = 0.0f;
      if (v < V) {
        float *row = logits + ((long long)i * B + k) * V;
        lg[g] = __fadd_rn(row[v], acc[g]);
        row[v] = lg[g];
        if (v < nv) {
          if (lg[g] != lg[g] || lg[g] == INFINITY) bad = v;
          fin = lg[g] != -INFINITY;
          bv = T > 0.0f ? __fdiv_rn(lg[g], temp_of(T)) : lg[g];
          bi = v;
        }
      }
      dsv4_warp_best(bv, bi);
      bad = warp_min(bad);
      fin = __any_sync(0xFFFFFFFFu, fin);
      if (lane == 0) wv[g][warp] = bv, wi[g][warp] = bi, wb[g][warp] = bad, wf[g][warp] = fin;
    }
    __syncthreads();
    if ((int)threadIdx.x < G) { /* thread g: sequence g0 + g's phase-1 result */
      const int g = threadIdx.x;
      float bv = wv[g][0];
      int bi = wi[g][0], bad = wb[g][0], fin = wf[g][0];
      for (int w = 1; w < MK_WARPS; w++) {
        dsv4_best_merge(bv, bi, wv[g][w], wi[g][w]);
        bad = min(bad, wb[g][w]);
        fin |= wf[g][w];
      }
      mk_part *p = part + (long long)(g0 + g) * n_chunks + blockIdx.x;
      p->m = bv;
      p->s = 0.0f;
      p->idx = bi;
      p->amax = bi;
      p->bad = bad;
      p->fin = fin;
      bm[g] = bi >= 0 ? bv : -INFINITY;
    }
    __syncthreads();
    /* phase 2, T > 0: Σ exp(l/T − m_b) and the block's race candidate */
    #pragma unroll
    for (int g = 0; g < MK_GROUP; g++) {
      if (g >= G) continue;
      const int i = g0 + g;
      const float T = temp[i];
      if (!(T > 0.0f)) continue; /* uniform over the block */
      const float m = bm[g], t = temp_of(T);
      float s = 0.0f, kv = 0.0f;
      int ki = -1;
      if (v < V && v < n_valid[i] && m != -INFINITY) {
        const float x = expf(__fsub_rn(__fdiv_rn(lg[g], t), m));
        s = x;
        kv = __fdiv_rn(x, dsv4i_sample_noise_at(seed[i], counter[i] + (unsigned long long)k, v));
        ki = v;
      }
      s = warp_sum(s);
      dsv4_warp_best(kv, ki);
      if (lane == 0) wm[g][warp] = s, wv[g][warp] = kv, wi[g][warp] = ki;
    }
    __syncthreads();
    if ((int)threadIdx.x < G && temp[g0 + threadIdx.x] > 0.0f) {
      const int g = threadIdx.x;
      float s = wm[g][0], kv = wv[g][0];
      int ki = wi[g][0];
      for (int w = 1; w < MK_WARPS; w++) {
        s = __fadd_rn(s, wm[g][w]);
        dsv4_best_merge(kv, ki, wv[g][w], wi[g][w]);
      }
      mk_part *p = part + (long long)(g0 + g) * n_chunks + blockIdx.x;
      p->s = s;
      p->idx = ki;
      wi[g][0] = ki; /* for the candidate's owner below */
    }
    __syncthreads();
    #pragma unroll
    for (int g = 0; g < MK_GROUP; g++)
      if (g < G && temp[g0 + g] > 0.0f && wi[g][0] == v)
        part[(long long)(g0 + g) * n_chunks + blockIdx.x].lc = lg[g];
  }
  __threadfence(); /* this block's partials before its ticket */
  __syncthreads();
  if (threadIdx.x == 0) s_last = atomicAdd(ticket, 1u) == (unsigned int)(n_chunks - 1);
  __syncthreads();
  if (!s_last) return;
  /* the last block: every other block's partials are visible; the block takes the
   * sequences one by one (the partials of one are read by all its threads at once) */
  __threadfence();
  for (int i = 0; i < n; i++) {
    const int tok = final_token(part + (long long)i * n_chunks, n_chunks, n_valid[i], temp[i],
                                seed[i], counter[i] + (unsigned long long)k);
    if (threadIdx.x == 0) toks[(long long)i * (B + 1) + k + 1] = tok;
    const int src = tok < 0 ? 0 : tok;
    for (int r = threadIdx.x; r < R; r += MK_THREADS)
      e[(long long)i * R + r] = embed[(long long)src * R + r];
  }
  if (threadIdx.x == 0) *ticket = 0u;
}
