/*
 * The MoE step's route table (kernels/moe.cu, kernels/moe_tiled.cu): which
 * experts the step chose and each one's (token, slot) pairs, built on the
 * device from the router's ids (no host round trip, capture-safe).
 */
#ifndef DSV4_KERNELS_MOE_ROUTE_CUH
#define DSV4_KERNELS_MOE_ROUTE_CUH

/* The step's route table for the expert kernels, built by one block (int32):
 *   r[0] = n_act, the distinct routed ids; r[1 + a] = the a-th in ascending
 *   order (a < n_act); r[1 + E + a] = first entry of its pairs (a <= n_act);
 *   r[2 + 2E + q] = pairs t·n_slots + slot, each expert's in ascending t.
 * Positions are stable: entries are placed in (t, slot) order a warp-width at
 * a time (__match_any_sync ranks equal ids within the width). */
__device__ void build_route(int n_tok, int top_k, int n_slots, int n_experts, const int32_t *idx,
                            int *r, unsigned *bm, int *base, int *cnt) {
  const int nk = n_tok * top_k;
  for (int i = threadIdx.x; i < 32; i += blockDim.x) bm[i] = 0u;
  for (int i = threadIdx.x; i <= n_experts; i += blockDim.x) cnt[i] = 0;
  __syncthreads();
  for (int i = threadIdx.x; i < nk; i += blockDim.x) {
    const int e = idx[i];
    if (e >= 0 && e < n_experts) atomicOr(&bm[e >> 5], 1u << (e & 31));
  }
  __syncthreads();
  if (threadIdx.x < 32) { /* base[w] = set bits below word w */
    const int lane = threadIdx.x, c = __popc(bm[lane]);
    int incl = c;
    for (int o = 1; o < 32; o <<= 1) {
      const int v = __shfl_up_sync(0xFFFFFFFFu, incl, o);
      if (lane >= o) incl += v;
    }
    base[lane] = incl - c;
    if (lane == 31) r[0] = incl;
  }
  __syncthreads();
  for (int i = threadIdx.x; i < nk; i += blockDim.x) { /* entries per active expert */
    const int e = idx[i];
    if (e >= 0 && e < n_experts)
      atomicAdd((unsigned *)&cnt[base[e >> 5] + __popc(bm[e >> 5] & ((1u << (e & 31)) - 1u))], 1u);
  }
  for (int e = threadIdx.x; e < n_experts; e += blockDim.x)
    if (bm[e >> 5] & (1u << (e & 31))) r[1 + base[e >> 5] + __popc(bm[e >> 5] & ((1u << (e & 31)) - 1u))] = e;
  __syncthreads();
  const int n_act = r[0];
  int *off = r + 1 + n_experts, *pairs = r + 2 + 2 * n_experts;
  if (threadIdx.x == 0) { /* offsets; cnt becomes each expert's next free entry */
    int acc = 0;
    for (int a = 0; a < n_act; a++) {
      const int c = cnt[a];
      off[a] = acc, cnt[a] = acc, acc += c;
    }
    off[n_act] = acc;
  }
  __syncthreads();
  if (threadIdx.x < 32) {
    const int lane = threadIdx.x;
    for (int i0 = 0; i0 < nk; i0 += 32) {
      const int i = i0 + lane;
      const int e = i < nk ? idx[i] : -1;
      const bool ok = e >= 0 && e < n_experts;
      const int a = ok ? base[e >> 5] + __popc(bm[e >> 5] & ((1u << (e & 31)) - 1u)) : -1 - lane;
      const unsigned m = __match_any_sync(0xFFFFFFFFu, a);
      if (ok) {
        const int rank = __popc(m & ((1u << lane) - 1u));
        pairs[cnt[a] + rank] = (i / top_k) * n_slots + i % top_k;
      }
      __syncwarp();
      if (ok && lane == 31 - __clz((int)m)) cnt[a] += __popc(m);
      __syncwarp();
    }
  }
  __syncthreads();
}

/* Pairs [p0, p0 + np) of expert e: the route table's (p0 >= 0) or, for the
 * shared expert (p0 < 0), token c at slot top_k. */
__device__ __forceinline__ int route_pair(const int *pairs, int p0, int c, int n_slots, int top_k) {
  return p0 >= 0 ? pairs[p0 + c] : c * n_slots + top_k;
}

/* Expert slot y's expert (the route table's order; -1 when the step has
 * fewer) and its pairs [p0, p0 + np) (p0 < 0: the shared expert, every
 * token). */
__device__ __forceinline__ int slot_expert(const int *route, int y, int n_tok, int has_shared,
                                           int n_experts, int *p0, int *np) {
  const int sh = has_shared ? 1 : 0;
  if (y < sh) {
    *p0 = -1, *np = n_tok;
    return n_experts;
  }
  if (y - sh >= route[0]) return -1;
  const int *off = route + 1 + n_experts;
  *p0 = off[y - sh], *np = off[y - sh + 1] - off[y - sh];
  return route[1 + y - sh];
}

/* Block y's expert: slot_expert of blockIdx.y. */
__device__ __forceinline__ int block_expert(const int *route, int n_tok, int has_shared,
                                            int n_experts, int *p0, int *np) {
  return slot_expert(route, (int)blockIdx.y, n_tok, has_shared, n_experts, p0, np);
}

/* One token's combine: the sum, in fp32, of term(slot) over its routed experts
 * in ascending expert id (slots of ids outside [0, n_experts) skipped), then
 * the shared expert's slot top_k when has_shared. it: the token's top_k ids
 * (top_k <= 16). The order is found first (4 bits a slot), then every term
 * is read before the first addition, so the reads overlap (one memory round
 * trip, not top_k); the additions are the same, in the same order. */
template <class Term>
__device__ __forceinline__ float combine_token(const int32_t *it, int top_k, int n_experts,
                                               int has_shared, Term term) {
  unsigned long long ord = 0;
  int n = 0, prev = -1;
  for (int k = 0; k < top_k; k++) {
    int best = n_experts, bj = -1;
    for (int j = 0; j < top_k; j++) {
      const int ej = it[j];
      if (ej > prev && ej < best) best = ej, bj = j;
    }
    if (bj < 0) break;
    ord |= (unsigned long long)bj << (4 * n++);
    prev = best;
  }
  float v[16];
#pragma unroll
  for (int k = 0; k < 16; k++) v[k] = k < n ? term((int)((ord >> (4 * k)) & 15u)) : 0.0f;
  const float vs = has_shared ? term(top_k) : 0.0f;
  float y = 0.0f;
#pragma unroll
  for (int k = 0; k < 16; k++)
    if (k < n) y += v[k];
  if (has_shared) y += vs;
  return y;
}

#endif /* DSV4_KERNELS_MOE_ROUTE_CUH */
