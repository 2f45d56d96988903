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
 * One block per token, one expert per thread (R_PER rounds for more experts
 * than threads): every z and bias load is issued before any math, the keys
 * go to shared memory as order keys (a u32 whose unsigned order is the
 * selection order: NaN lowest, −0 == +0), and each expert counts the experts
 * that precede it (larger key, or equal key and lower id), stopping at top_k;
 * an expert with rank r < top_k is the r-th selected. The rank of every
 * expert is a function of the keys alone, so the result does not depend on
 * the batch or the schedule.
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

/* z: fp32 [n_tok][ldz]; bias, bias_vl: fp32 [E] (bias_vl may be NULL);
 * use_vl: uint8 [n_tok] or NULL; idx: int32 [n_tok][top_k]; weight: fp32 [n_tok][top_k].
 * Grid n_tok, R_THREADS threads. */
extern "C" __global__ void __launch_bounds__(R_THREADS)
dsv4_k_router_topk_f32(int n_tok, int n_experts, int top_k, const float *z, long long ldz,
                       const float *bias, const float *bias_vl, const uint8_t *use_vl,
                       int norm_topk_prob, float route_scale, int32_t *idx, float *weight) {
  __shared__ unsigned int skey[R_THREADS * R_PER];
  __shared__ float wsel[MAX_K];
  const int t = blockIdx.x, tid = threadIdx.x;
  if (t >= n_tok) return;
  const float *zr = z + t * ldz;
  const float *b = (use_vl && use_vl[t] && bias_vl) ? bias_vl : bias;
  float v[R_PER], bb[R_PER], sc[R_PER];
  unsigned int key[R_PER];
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
    sc[j] = sqrtf(sp);
    key[j] = router_key(sc[j] + bb[j]);
    if (e < n_experts) skey[e] = key[j];
  }
  __syncthreads();
#pragma unroll
  for (int j = 0; j < R_PER; j++) {
    const int e = j * R_THREADS + tid;
    if (e >= n_experts) continue;
    const unsigned int k = key[j];
    int r = 0;
    /* lower ids precede on equal keys, higher ids only on larger keys */
    for (int i = 0; i < e && r < top_k; i += 8) {
#pragma unroll
      for (int q = 0; q < 8; q++)
        if (i + q < e) r += skey[i + q] >= k;
    }
    for (int i = e + 1; i < n_experts && r < top_k; i += 8) {
#pragma unroll
      for (int q = 0; q < 8; q++)
        if (i + q < n_experts) r += skey[i + q] > k;
    }
    if (r < top_k) {
      wsel[r] = sc[j];
      idx[(long long)t * top_k + r] = e;
    }
  }
  __syncthreads();
  if (tid >= 32) return;
  float den = 1.0f;
  const bool norm = norm_topk_prob && top_k > 1;
  if (norm) den = dsv4_warp_sum_torch(top_k, [&](long long i) { return wsel[i]; }) + 1e-20f;
  if (tid < top_k) {
    float w = wsel[tid];
    if (norm) w = w / den;
    weight[(long long)t * top_k + tid] = w * route_scale;
  }
}
