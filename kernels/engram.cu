/*
 * Engram module on the device (spec §5.2; CPU oracle dsv4i_cpu_engram):
 *   gather (this file) -> act_quant + fp8 linear wkv (linear.cu) -> update (this file).
 * The table may live in a host-pinned pool: the gather reads it through the
 * mapped device address, touching only the n_cols rows per token named by
 * the ids (computed by the engine, a step ahead if it likes).
 *
 * update, per token and copy c (one warp): x = h[t][c], key = kv[t][c],
 * value = kv[t][hc], w = q_weight ⊙ k_weight (fp32, exact):
 *   rstd = (1/sqrtf(Σx²/dim + eps)) · (1/sqrtf(Σkey²/dim + eps)),
 *   dot  = ((Σ (x·w)·key) · rstd) · scale,   scale = fp32(dim^-0.5),
 *   gate = 1/(1 + exp(−copysign(sqrt(max(|dot|, 1e-6)), dot))),
 *   h[t][c][d] = bf16(x + gate·value),
 * the sums in torch's order (reduce.cuh). The exp follows the reference's
 * split of each call's gate tensor [len][hc] (a step's batch holds several
 * calls: a prefill chunk, a decode-layout token alone; docs/cpu-numerics.md):
 * its first floor(len·hc/32)·32 gates take torch's vectorised exp (bit-equal
 * to the CPU), the rest libm's expf on the CPU — CUDA's expf here, which can
 * differ by an ulp, and then the gate and h by a rounding (the test bounds
 * it). The host gives per token how many of its copies are vectorised
 * (dsv4i_engram_gate_vec), so a token's result does not depend on the other
 * calls of the batch.
 */
#include "model/ref_math.h"
#include "reduce.cuh"

/* rows bf16 [n_tok][n_cols·head_dim]; ids int64 [n_tok][ld_ids]; table E4M3
 * [rows][head_dim] + UE8M0 [rows][head_dim/32]; image tokens (is_image[t]
 * != 0) get zero rows and their ids are not read. Grid (n_cols, n_tok),
 * 128 threads: 16-byte loads of the row's codes. */
extern "C" __global__ void __launch_bounds__(128)
dsv4_k_engram_gather(int n_tok, int n_cols, int head_dim, const long long *ids, long long ld_ids,
                     const unsigned char *table, const unsigned char *table_scale,
                     const uint8_t *is_image, uint16_t *rows) {
  const int t = blockIdx.y, c = blockIdx.x;
  if (t >= n_tok) return;
  uint16_t *out = rows + ((long long)t * n_cols + c) * head_dim;
  const bool image = is_image && is_image[t];
  const long long id = image ? 0 : ids[t * ld_ids + c];
  const unsigned char *src = table + id * head_dim;
  const unsigned char *sc = table_scale + id * (head_dim / 32);
  for (int e = threadIdx.x; e < head_dim; e += blockDim.x)
    out[e] = image ? 0 : dsv4i_f32_to_bf16(dsv4i_e4m3_to_f32(src[e]) * dsv4i_e8m0_to_f32(sc[e >> 5]));
}

/* h bf16 [n_tok][hc][dim] in place; kv bf16 [n_tok][ld_kv] ((hc+1)·dim used);
 * q_weight, k_weight bf16 [hc][dim]; gate_vec int32 [n_tok]: copies c <
 * gate_vec[t] of token t take the vectorised exp (NULL: the batch is one
 * call). Grid ceil(n_tok·hc / 4), 128 threads. */
extern "C" __global__ void __launch_bounds__(128)
dsv4_k_engram_update(int n_tok, int hc, int dim, const uint16_t *kv, long long ld_kv,
                     const uint16_t *q_weight, const uint16_t *k_weight, float eps, float scale,
                     const uint8_t *is_image, const int *gate_vec, uint16_t *h) {
  const long long flat = (long long)blockIdx.x * 4 + (threadIdx.x >> 5);
  if (flat >= (long long)n_tok * hc) return;
  const int t = (int)(flat / hc), c = (int)(flat % hc), lane = threadIdx.x & 31;
  if (is_image && is_image[t]) return;
  uint16_t *x = h + flat * dim;
  const uint16_t *key = kv + t * ld_kv + (long long)c * dim, *value = kv + t * ld_kv + (long long)hc * dim;
  const uint16_t *qw = q_weight + (long long)c * dim, *kw = k_weight + (long long)c * dim;
  const float fdim = (float)dim;
  const float sx = dsv4_warp_sum_torch(dim, [&](long long d) {
    const float v = dsv4i_bf16_to_f32(x[d]);
    return v * v;
  });
  const float sk = dsv4_warp_sum_torch(dim, [&](long long d) {
    const float v = dsv4i_bf16_to_f32(key[d]);
    return v * v;
  });
  const float sd = dsv4_warp_sum_torch(dim, [&](long long d) {
    const float w = dsv4i_bf16_to_f32(qw[d]) * dsv4i_bf16_to_f32(kw[d]);
    const float xw = dsv4i_bf16_to_f32(x[d]) * w;
    return xw * dsv4i_bf16_to_f32(key[d]);
  });
  const float rstd = (1.0f / sqrtf(sx / fdim + eps)) * (1.0f / sqrtf(sk / fdim + eps));
  const float dot = (sd * rstd) * scale;
  const float mag = sqrtf(fmaxf(fabsf(dot), 1e-6f));
  const float z = copysignf(mag, dot);
  const bool vec = gate_vec ? c < gate_vec[t] : flat < (long long)n_tok * hc / 32 * 32;
  const float e = vec ? dsv4i_expf_torch(0.0f - z) : expf(-z);
  const float gate = 1.0f / (1.0f + e);
  __syncwarp();
  /* 8 elements' loads in flight before their stores (the stores to x kept
   * each iteration's loads waiting for the previous one: one L2 round trip
   * per 32 elements, ~90 us at dim 5120); the same operations per element */
  for (int d0 = lane; d0 < dim; d0 += 32 * 8) {
    float xv[8], vv[8];
#pragma unroll
    for (int j = 0; j < 8; j++) {
      const int d = d0 + 32 * j;
      xv[j] = d < dim ? dsv4i_bf16_to_f32(x[d]) : 0.0f;
      vv[j] = d < dim ? dsv4i_bf16_to_f32(value[d]) : 0.0f;
    }
#pragma unroll
    for (int j = 0; j < 8; j++) {
      const int d = d0 + 32 * j;
      if (d < dim) {
        const float gv = gate * vv[j];
        x[d] = dsv4i_f32_to_bf16(xv[j] + gv);
      }
    }
  }
}
