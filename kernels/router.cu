/*
 * MoE router selection (spec §5.5; CPU oracle dsv4i_cpu_router after its
 * gate GEMM): from the fp32 gate logits z (dsv4_k_linear_*_f32out),
 * s = sqrtf(softplus(z)) with softplus(z) = z if z > 20 else log1pf(expf(z));
 * key = s + bias (bias_vl for image tokens); top_k by key, descending, equal
 * keys: lower expert id first, NaN keys last (the CPU's insertion order);
 * w = s[idx], normalised by (Σ w in torch's order + 1e-20) when asked,
 * times route_scale. All on the device (capture-safe: no host round trip).
 * expf/log1pf are CUDA's (within 1-2 ulp of glibc's), so scores and weights
 * agree with the CPU to a few ulps and the selection is the CPU's except for
 * keys that close.
 *
 * One block per token, expert e = j·R_THREADS + thread (j < R_PER): every z
 * and bias load is issued before the math. The selection order is a total
 * order on (key, id): larger key first (keys as u32 whose unsigned order is
 * the float order, −0 == +0, NaN lowest), equal keys lower id first. Each
 * warp takes its top_k best in top_k rounds of two warp reductions (the
 * largest key, then the lowest id holding it: redux.sync), then warp 0 takes
 * the top_k best of the warps' candidates the same way. The result is a
 * function of the keys alone, so it does not depend on the batch or the
 * schedule. (A rank count per expert, 12 us a token at 384 experts in run1,
 * was O(E²) compares.)
 */
#include "model/format_codes.h"
#include "reduce.cuh"

#define R_THREADS 256
#define R_PER 4 /* n_experts <= R_THREADS * R_PER = 1024 */
#define MAX_K 16

/* unsigned order = selection order: larger float larger key, −0 == +0, NaN lowest (0) */
__device__ __forceinline__ unsigned int router_key(float f) {
  if (isnan(f)) return 0u;
  unsigned int u = __float_as_uint(f);
  u = u == 0x80000000u ? 0u : u;
  return (u & 0x80000000u) ? ~u : (u | 0x80000000u);
}

#define NO_ID 0xFFFFFFFFu

/* One round of the warp's selection: each lane offers its best remaining (key, id) of n
 * slots (ids ascending with the slot; taken: the lane's used slots), the warp agrees on
 * the best (largest key, then lowest id), and its lane marks the slot taken. Returns the
 * winner in every lane (id NO_ID when no lane has one left). */
template <int N>
__device__ __forceinline__ void warp_pick(const unsigned int (&key)[N], const unsigned int (&id)[N],
                                          unsigned int &taken, unsigned int &wk, unsigned int &wi) {
  unsigned int lk = 0u, li = NO_ID;
  int ls = -1;
#pragma unroll
  for (int j = 0; j < N; j++) {
    const bool live = id[j] != NO_ID && !((taken >> j) & 1u);
    if (live && (ls < 0 || key[j] > lk)) lk = key[j], li = id[j], ls = j; /* ids ascend with j */
  }
  wk = __reduce_max_sync(0xFFFFFFFFu, lk);
  wi = __reduce_min_sync(0xFFFFFFFFu, lk == wk ? li : NO_ID);
  if (ls >= 0 && li == wi) taken |= 1u << ls;
}

/* z: fp32 [n_tok][ldz]; bias, bias_vl: fp32 [E] (bias_vl may be NULL);
 * use_vl: uint8 [n_tok] or NULL; idx: int32 [n_tok][top_k]; weight: fp32 [n_tok][top_k].
 * Grid n_tok, R_THREADS threads. */
extern "C" __global__ void __launch_bounds__(R_THREADS)
dsv4_k_router_topk_f32(int n_tok, int n_experts, int top_k, const float *z, long long ldz,
                       const float *bias, const float *bias_vl, const uint8_t *use_vl,
                       int norm_topk_prob, float route_scale, int32_t *idx, float *weight) {
  __shared__ float ssc[R_THREADS * R_PER];
  __shared__ unsigned int ckey[R_THREADS / 32][MAX_K], cid[R_THREADS / 32][MAX_K];
  __shared__ float wsel[MAX_K];
  const int t = blockIdx.x, tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
  if (t >= n_tok) return;
  const float *zr = z + t * ldz;
  const float *b = (use_vl && use_vl[t] && bias_vl) ? bias_vl : bias;
  float v[R_PER], bb[R_PER];
  unsigned int key[R_PER], id[R_PER];
#pragma unroll
  for (int j = 0; j < R_PER; j++) { /* loads first: one round trip for all */
    const int e = j * R_THREADS + tid;
    v[j] = e < n_experts ? zr[e] : 0.0f;
    bb[j] = e < n_experts ? b[e] : 0.0f;
  }
#pragma unroll
  for (int j = 0; j < R_PER; j++) {
    const int e = j * R_THREADS + tid;
    const float sp = v[j] > 20.0f ? v[j] : log1pf(expf(v[j]));
    const float sc = sqrtf(sp);
    key[j] = router_key(sc + bb[j]);
    id[j] = e < n_experts ? (unsigned int)e : NO_ID;
    if (e < n_experts) ssc[e] = sc;
  }
  /* each warp's top_k best of its experts */
  unsigned int taken = 0u;
  for (int r = 0; r < top_k; r++) {
    unsigned int wk, wi;
    warp_pick(key, id, taken, wk, wi);
    if (lane == 0) ckey[warp][r] = wk, cid[warp][r] = wi;
  }
  __syncthreads();
  if (warp != 0) return;
  /* the top_k best of the warps' candidates: slot j of lane l is candidate l + 32 j */
  constexpr int NC = (R_THREADS / 32) * MAX_K / 32;
  unsigned int k2[NC], i2[NC];
#pragma unroll
  for (int j = 0; j < NC; j++) {
    const int c = lane + 32 * j, w = c / top_k, r = c % top_k;
    const bool in = c < (R_THREADS / 32) * top_k;
    k2[j] = in ? ckey[w][r] : 0u;
    i2[j] = in ? cid[w][r] : NO_ID;
  }
  /* ids need not ascend with j here: order slots by id inside the lane first */
#pragma unroll
  for (int a = 0; a < NC; a++)
#pragma unroll
    for (int c = a + 1; c < NC; c++)
      if (i2[c] < i2[a]) {
        const unsigned int tk = k2[a], ti = i2[a];
        k2[a] = k2[c], i2[a] = i2[c], k2[c] = tk, i2[c] = ti;
      }
  taken = 0u;
  for (int r = 0; r < top_k; r++) {
    unsigned int wk, wi;
    warp_pick(k2, i2, taken, wk, wi);
    if (lane == 0) {
      wsel[r] = ssc[wi];
      idx[(long long)t * top_k + r] = (int32_t)wi;
    }
  }
  __syncwarp();
  float den = 1.0f;
  const bool norm = norm_topk_prob && top_k > 1;
  if (norm) den = dsv4_warp_sum_torch(top_k, [&](long long i) { return wsel[i]; }) + 1e-20f;
  if (lane < top_k) {
    float w = wsel[lane];
    if (norm) w = w / den;
    weight[(long long)t * top_k + lane] = w * route_scale;
  }
}
