/*
 * MoE router selection (spec §5.5; CPU oracle dsv4i_cpu_router after its
 * gate GEMM): from the fp32 gate logits z (dsv4_k_linear_*_f32out),
 * s = sqrtf(softplus(z)) with softplus(z) = z if z > 20 else log1pf(expf(z));
 * key = s + bias (bias_vl for image tokens); top_k by key, descending, equal
 * keys: lower expert id first, NaN keys last (the CPU's insertion order);
 * w = s[idx], normalised by (Σ w in torch's order + 1e-20) when asked,
 * times route_scale. All on the device (capture-safe: no host round trip).
 * One warp per token. expf/log1pf are CUDA's (within 1-2 ulp of glibc's),
 * so scores and weights agree with the CPU to a few ulps and the
 * selection is the CPU's except for keys that close.
 */
#include "model/format_codes.h"
#include "reduce.cuh"

#define MAX_E_PER_LANE 32 /* n_experts <= 1024 */
#define MAX_K 16

__device__ __forceinline__ bool beats(float a, float b) { return a > b || (isnan(b) && !isnan(a)); }

/* z: fp32 [n_tok][ldz]; bias, bias_vl: fp32 [E] (bias_vl may be NULL);
 * use_vl: uint8 [n_tok] or NULL; idx: int32 [n_tok][top_k]; weight: fp32 [n_tok][top_k].
 * Grid ceil(n_tok/4), 128 threads. */
extern "C" __global__ void __launch_bounds__(128)
dsv4_k_router_topk_f32(int n_tok, int n_experts, int top_k, const float *z, long long ldz,
                       const float *bias, const float *bias_vl, const uint8_t *use_vl,
                       int norm_topk_prob, float route_scale, int32_t *idx, float *weight) {
  __shared__ float wsel[4][MAX_K];
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
  const int t = blockIdx.x * 4 + warp;
  if (t >= n_tok) return;
  const float *zr = z + t * ldz;
  const float *b = (use_vl && use_vl[t] && bias_vl) ? bias_vl : bias;
  float key[MAX_E_PER_LANE], sc[MAX_E_PER_LANE];
  const int per = (n_experts + 31) / 32;
#pragma unroll
  for (int j = 0; j < MAX_E_PER_LANE; j++) {
    const int e = j * 32 + lane;
    if (j < per && e < n_experts) {
      const float v = zr[e];
      const float sp = v > 20.0f ? v : log1pf(expf(v));
      sc[j] = sqrtf(sp);
      key[j] = sc[j] + b[e];
    }
  }
  uint32_t taken = 0;
  for (int r = 0; r < top_k; r++) {
    float bv = 0.0f;
    int bi = -1;
#pragma unroll
    for (int j = 0; j < MAX_E_PER_LANE; j++) {
      const int e = j * 32 + lane;
      if (j < per && e < n_experts && !((taken >> j) & 1u)) {
        if (bi < 0 || beats(key[j], bv)) bv = key[j], bi = e; /* e ascending: ties keep the lower */
      }
    }
    for (int off = 16; off > 0; off >>= 1) {
      const float ov = __shfl_down_sync(0xFFFFFFFFu, bv, off);
      const int oi = __shfl_down_sync(0xFFFFFFFFu, bi, off);
      if (oi >= 0 && (bi < 0 || beats(ov, bv) || (!beats(bv, ov) && oi < bi))) bv = ov, bi = oi;
    }
    bi = __shfl_sync(0xFFFFFFFFu, bi, 0);
    if ((bi & 31) == lane) {
      const int j = bi >> 5;
      taken |= 1u << j;
      float s = 0.0f;
#pragma unroll
      for (int q = 0; q < MAX_E_PER_LANE; q++)
        if (q == j) s = sc[q];
      wsel[warp][r] = s;
      idx[(long long)t * top_k + r] = bi;
    }
  }
  __syncwarp();
  float den = 1.0f;
  const bool norm = norm_topk_prob && top_k > 1;
  if (norm) den = dsv4_warp_sum_torch(top_k, [&](long long i) { return wsel[warp][i]; }) + 1e-20f;
  if (lane < top_k) {
    float w = wsel[warp][lane];
    if (norm) w = w / den;
    weight[(long long)t * top_k + lane] = w * route_scale;
  }
}
