/*
 * MoE experts of a step (spec §5.5; CPU oracle dsv4i_cpu_moe_experts): all
 * routed experts of every token plus the shared expert in two launches,
 * with the act_quant launches of linear.cu around them:
 *   act_quant(x) -> moe_up -> act_quant(a) -> moe_down
 * No per-expert launches, no atomics: every output element is summed by
 * one thread in the CPU's order, so the result equals the CPU's bit for bit.
 *
 * Experts are addressed through pointer tables (device arrays of E + 1
 * entries, entry E the shared expert), each a dense checkpoint-layout
 * matrix: w1/w3 [inter][dim], w2 [dim][inter]; routed experts in fmt_r,
 * the shared one in fmt_s (W_E4M3: fp8 + UE8M0 32x32; W_E2M1: MXFP4).
 * Slot j < top_k of a token is its j-th routed expert (id < 0: skipped),
 * slot top_k its shared expert (when has_shared).
 *
 * moe_up, per (token, slot) and 128 intermediate rows i:
 *   g = bf16(w1 · x), u = bf16(w3 · x) (act_quant'ed x, GEMV order of
 *   linear.cu); u = clamp(u, ±limit), g = min(g, limit) when limit > 0;
 *   act = (g / (1 + exp(−g))) · u with torch's exp, times the routing
 *   weight for routed slots; a[t][slot][i] = bf16(act).
 * moe_down, per token and 128 output rows d: the token's slots in
 * ascending expert id, then the shared slot: y += fp32(bf16(w2 · aq)),
 * from y = 0; out = bf16(y).
 */
#include "gemv.cuh"
#include "model/ref_math.h"

#define ROWS 128
#define MAX_SLOTS 17 /* top_k <= 16, plus the shared expert */

/* One row's block-scaled dot over K = 32·nkb from shared-memory activation
 * tiles, exactly linear.cu's order for one token. */
template <int FMT>
__device__ __forceinline__ float qdot_row(const unsigned char *w, long long ld, const unsigned char *scale,
                                          long long scale_ld, int o, int kb, const float *xs,
                                          float sx, float acc) {
  float wv[32], sw;
  load_block<FMT>(w, ld, scale, scale_ld, o, kb, wv, &sw);
  float p = 0.0f;
#pragma unroll
  for (int i = 0; i < 32; i++) p += xs[i] * wv[i];
  return acc + (p * sx) * sw;
}

__device__ __forceinline__ void strides(int fmt, int rows, int cols, long long *ld, long long *sld) {
  (void)rows;
  *ld = fmt == W_E2M1 ? cols / 2 : cols;
  *sld = fmt == W_E2M1 ? cols / 32 : (cols + 31) / 32;
}

/* Token t's slots in the order the down projection sums them: routed slots by
 * ascending expert id (skipped ids < 0 left out), then the shared slot. order[q] =
 * the slot, eid[q] = its expert; returns how many. (One thread.) */
__device__ int slot_order(int t, int top_k, int has_shared, int n_experts, const int32_t *idx,
                          int *order, int *eid) {
  int n = 0;
  for (int j = 0; j < top_k; j++) {
    const int e = idx[t * top_k + j];
    if (e < 0) continue;
    int p = n;
    while (p > 0 && eid[p - 1] > e) {
      eid[p] = eid[p - 1];
      order[p] = order[p - 1];
      p--;
    }
    eid[p] = e;
    order[p] = j;
    n++;
  }
  if (has_shared) eid[n] = n_experts, order[n] = top_k, n++;
  return n;
}

/* Grid (ceil(inter/128), n_tok · n_slots), 128 threads. xq f32 [n][dim], sx
 * f32 [n][dim/32]; idx int32 [n][top_k], weight f32 [n][top_k];
 * w1, w3, s1, s3: device pointer tables [E + 1]; a bf16 [n][n_slots][inter]
 * (n_slots = top_k + has_shared). Skipped slots write zeros. */
extern "C" __global__ void __launch_bounds__(ROWS)
dsv4_k_moe_up(int n_tok, int top_k, int has_shared, int n_experts, int dim, int inter,
              int fmt_r, int fmt_s, float limit, const float *xq, const float *sx,
              const int32_t *idx, const float *weight, const unsigned char *const *w1,
              const unsigned char *const *s1, const unsigned char *const *w3,
              const unsigned char *const *s3, uint16_t *a) {
  __shared__ float xs[32];
  const int n_slots = top_k + (has_shared ? 1 : 0);
  const int t = blockIdx.y / n_slots, slot = blockIdx.y % n_slots;
  if (t >= n_tok) return;
  const bool shared = slot == top_k;
  const int e = shared ? n_experts : idx[t * top_k + slot];
  const int i = blockIdx.x * ROWS + threadIdx.x;
  uint16_t *out = a + ((long long)t * n_slots + slot) * inter;
  if (e < 0) {
    if (i < inter) out[i] = 0;
    return;
  }
  const int fmt = shared ? fmt_s : fmt_r;
  long long ld, sld;
  strides(fmt, inter, dim, &ld, &sld);
  const unsigned char *pw1 = w1[e], *ps1 = s1[e], *pw3 = w3[e], *ps3 = s3[e];
  float g = 0.0f, u = 0.0f;
  const int nkb = dim / 32;
  for (int kb = 0; kb < nkb; kb++) {
    __syncthreads();
    if (threadIdx.x < 32) xs[threadIdx.x] = xq[(long long)t * dim + kb * 32 + threadIdx.x];
    __syncthreads();
    if (i >= inter) continue;
    const float s = sx[(long long)t * nkb + kb];
    if (fmt == W_E4M3) {
      g = qdot_row<W_E4M3>(pw1, ld, ps1, sld, i, kb, xs, s, g);
      u = qdot_row<W_E4M3>(pw3, ld, ps3, sld, i, kb, xs, s, u);
    } else {
      g = qdot_row<W_E2M1>(pw1, ld, ps1, sld, i, kb, xs, s, g);
      u = qdot_row<W_E2M1>(pw3, ld, ps3, sld, i, kb, xs, s, u);
    }
  }
  if (i >= inter) return;
  float gf = dsv4i_bf16_to_f32(dsv4i_f32_to_bf16(g)), uf = dsv4i_bf16_to_f32(dsv4i_f32_to_bf16(u));
  if (limit > 0.0f) {
    uf = uf < -limit ? -limit : (uf > limit ? limit : uf);
    gf = gf > limit ? limit : gf;
  }
  float act = (gf / (1.0f + dsv4i_expf_torch(-gf))) * uf;
  if (!shared) act = weight[t * top_k + slot] * act;
  out[i] = dsv4i_f32_to_bf16(act);
}

/* Grid (ceil(dim/128), n_tok), 128 threads. aq f32 [n][n_slots][inter],
 * sa f32 [n][n_slots][inter/32] (act_quant of a); w2, s2: pointer tables;
 * out bf16 [n][ldo]. */
extern "C" __global__ void __launch_bounds__(ROWS)
dsv4_k_moe_down(int n_tok, int top_k, int has_shared, int n_experts, int dim, int inter,
                int fmt_r, int fmt_s, const float *aq, const float *sa, const int32_t *idx,
                const unsigned char *const *w2, const unsigned char *const *s2, uint16_t *out,
                long long ldo) {
  __shared__ float xs[32];
  __shared__ int order[MAX_SLOTS], eid[MAX_SLOTS];
  __shared__ int n_order;
  const int t = blockIdx.y;
  if (t >= n_tok) return;
  const int n_slots = top_k + (has_shared ? 1 : 0);
  if (threadIdx.x == 0) n_order = slot_order(t, top_k, has_shared, n_experts, idx, order, eid);
  __syncthreads();
  const int d = blockIdx.x * ROWS + threadIdx.x;
  const int nkb = inter / 32;
  float y = 0.0f;
  for (int q = 0; q < n_order; q++) {
    const int slot = order[q], e = eid[q];
    const int fmt = slot == top_k ? fmt_s : fmt_r;
    long long ld, sld;
    strides(fmt, dim, inter, &ld, &sld);
    const float *xr = aq + ((long long)t * n_slots + slot) * inter;
    const float *sr = sa + ((long long)t * n_slots + slot) * nkb;
    float acc = 0.0f;
    for (int kb = 0; kb < nkb; kb++) {
      __syncthreads();
      if (threadIdx.x < 32) xs[threadIdx.x] = xr[kb * 32 + threadIdx.x];
      __syncthreads();
      if (d >= dim) continue;
      if (fmt == W_E4M3) acc = qdot_row<W_E4M3>(w2[e], ld, s2[e], sld, d, kb, xs, sr[kb], acc);
      else acc = qdot_row<W_E2M1>(w2[e], ld, s2[e], sld, d, kb, xs, sr[kb], acc);
    }
    y += dsv4i_bf16_to_f32(dsv4i_f32_to_bf16(acc));
  }
  if (d < dim) out[(long long)t * ldo + d] = dsv4i_f32_to_bf16(y);
}

/* ---- warp-per-row variants ----------------------------------------------------
 * The same sums in the same order, with the K blocks of a row spread over the
 * lanes of a warp: lane j computes block partial (p · sx) · sw of K block
 * c0 + j, and the row's fp32 sum takes them in K-block order through
 * shuffles (every lane ends with the same value). Off by default in the
 * launcher until they have run on a device (gpu/gpu_ops.h warp_rows_max). */

template <int FMT>
__device__ __forceinline__ float warp_qdot_row(const unsigned char *w, long long ld,
                                               const unsigned char *scale, long long scale_ld,
                                               int o, int nkb, const float *x, const float *sx) {
  const int lane = threadIdx.x & 31;
  float acc = 0.0f;
  for (int c0 = 0; c0 < nkb; c0 += 32) {
    const int kb = c0 + lane, nb = nkb - c0 < 32 ? nkb - c0 : 32;
    float q = 0.0f;
    if (kb < nkb) {
      float wv[32], sw;
      load_block<FMT>(w, ld, scale, scale_ld, o, kb, wv, &sw);
      const float4 *xr = reinterpret_cast<const float4 *>(x + kb * 32);
      float p = 0.0f;
#pragma unroll
      for (int i = 0; i < 8; i++) {
        const float4 v = xr[i];
        p += v.x * wv[4 * i];
        p += v.y * wv[4 * i + 1];
        p += v.z * wv[4 * i + 2];
        p += v.w * wv[4 * i + 3];
      }
      q = (p * sx[kb]) * sw;
    }
    for (int j = 0; j < nb; j++) acc += __shfl_sync(0xFFFFFFFFu, q, j);
  }
  return acc;
}

/* dsv4_k_moe_up with one warp per intermediate row: grid (ceil(inter/8),
 * n_tok · n_slots), 256 threads; same arguments. */
extern "C" __global__ void __launch_bounds__(256)
dsv4_k_moe_up_warp(int n_tok, int top_k, int has_shared, int n_experts, int dim, int inter,
                   int fmt_r, int fmt_s, float limit, const float *xq, const float *sx,
                   const int32_t *idx, const float *weight, const unsigned char *const *w1,
                   const unsigned char *const *s1, const unsigned char *const *w3,
                   const unsigned char *const *s3, uint16_t *a) {
  const int n_slots = top_k + (has_shared ? 1 : 0);
  const int t = blockIdx.y / n_slots, slot = blockIdx.y % n_slots;
  const int i = blockIdx.x * 8 + (threadIdx.x >> 5), lane = threadIdx.x & 31;
  if (t >= n_tok || i >= inter) return; /* warp-uniform */
  const bool shared = slot == top_k;
  const int e = shared ? n_experts : idx[t * top_k + slot];
  uint16_t *out = a + ((long long)t * n_slots + slot) * inter;
  if (e < 0) {
    if (lane == 0) out[i] = 0;
    return;
  }
  const int fmt = shared ? fmt_s : fmt_r;
  long long ld, sld;
  strides(fmt, inter, dim, &ld, &sld);
  const int nkb = dim / 32;
  const float *xr = xq + (long long)t * dim, *sr = sx + (long long)t * nkb;
  float g, u;
  if (fmt == W_E4M3) {
    g = warp_qdot_row<W_E4M3>(w1[e], ld, s1[e], sld, i, nkb, xr, sr);
    u = warp_qdot_row<W_E4M3>(w3[e], ld, s3[e], sld, i, nkb, xr, sr);
  } else {
    g = warp_qdot_row<W_E2M1>(w1[e], ld, s1[e], sld, i, nkb, xr, sr);
    u = warp_qdot_row<W_E2M1>(w3[e], ld, s3[e], sld, i, nkb, xr, sr);
  }
  if (lane != 0) return;
  float gf = dsv4i_bf16_to_f32(dsv4i_f32_to_bf16(g)), uf = dsv4i_bf16_to_f32(dsv4i_f32_to_bf16(u));
  if (limit > 0.0f) {
    uf = uf < -limit ? -limit : (uf > limit ? limit : uf);
    gf = gf > limit ? limit : gf;
  }
  float act = (gf / (1.0f + dsv4i_expf_torch(-gf))) * uf;
  if (!shared) act = weight[t * top_k + slot] * act;
  out[i] = dsv4i_f32_to_bf16(act);
}

/* dsv4_k_moe_down with one warp per output row: grid (ceil(dim/8), n_tok),
 * 256 threads; same arguments. */
extern "C" __global__ void __launch_bounds__(256, 1)
dsv4_k_moe_down_warp(int n_tok, int top_k, int has_shared, int n_experts, int dim, int inter,
                     int fmt_r, int fmt_s, const float *aq, const float *sa, const int32_t *idx,
                     const unsigned char *const *w2, const unsigned char *const *s2, uint16_t *out,
                     long long ldo) {
  __shared__ int order[MAX_SLOTS], eid[MAX_SLOTS];
  __shared__ int n_order;
  const int t = blockIdx.y;
  if (t >= n_tok) return;
  const int n_slots = top_k + (has_shared ? 1 : 0);
  if (threadIdx.x == 0) n_order = slot_order(t, top_k, has_shared, n_experts, idx, order, eid);
  __syncthreads();
  const int d = blockIdx.x * 8 + (threadIdx.x >> 5);
  if (d >= dim) return; /* warp-uniform; no barriers below */
  const int nkb = inter / 32;
  float y = 0.0f;
  for (int q = 0; q < n_order; q++) {
    const int slot = order[q], e = eid[q];
    const int fmt = slot == top_k ? fmt_s : fmt_r;
    long long ld, sld;
    strides(fmt, dim, inter, &ld, &sld);
    const float *xr = aq + ((long long)t * n_slots + slot) * inter;
    const float *sr = sa + ((long long)t * n_slots + slot) * nkb;
    float acc;
    if (fmt == W_E4M3) acc = warp_qdot_row<W_E4M3>(w2[e], ld, s2[e], sld, d, nkb, xr, sr);
    else acc = warp_qdot_row<W_E2M1>(w2[e], ld, s2[e], sld, d, nkb, xr, sr);
    y += dsv4i_bf16_to_f32(dsv4i_f32_to_bf16(acc));
  }
  if ((threadIdx.x & 31) == 0) out[(long long)t * ldo + d] = dsv4i_f32_to_bf16(y);
}
