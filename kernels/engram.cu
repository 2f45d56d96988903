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
 * call). Grid n_tok·hc (block = (token, copy)), EU_THREADS threads, dynamic
 * shared memory 10·dim bytes (dim <= EU_MAX_DIM).
 *
 * The block first stages x, key, q_weight, k_weight and value in shared
 * memory with every load in flight at once (16-byte loads when the rows
 * allow), then warps 0, 1, 2 run the three torch-order sums over shared
 * memory, and every thread writes its part of x. The operations per element
 * and the sums' orders are the one-warp version's (which waited ~30 L2 round
 * trips: 68 us a step at dim 5120 on the H200), so the bits are unchanged. */
#define EU_THREADS 256
#define EU_MAX_DIM 8192
extern "C" __global__ void __launch_bounds__(EU_THREADS)
dsv4_k_engram_update(int n_tok, int hc, int dim, const uint16_t *kv, long long ld_kv,
                     const uint16_t *q_weight, const uint16_t *k_weight, float eps, float scale,
                     const uint8_t *is_image, const int *gate_vec, uint16_t *h) {
  extern __shared__ __align__(16) uint16_t eu_sh[]; /* x, key, qw, kw, value: dim each */
  __shared__ float sums[3];
  const long long flat = blockIdx.x;
  if (flat >= (long long)n_tok * hc) return;
  const int t = (int)(flat / hc), c = (int)(flat % hc), tid = threadIdx.x;
  if (is_image && is_image[t]) return;
  uint16_t *x = h + flat * dim;
  const uint16_t *src[5] = {x, kv + t * ld_kv + (long long)c * dim, q_weight + (long long)c * dim,
                            k_weight + (long long)c * dim, kv + t * ld_kv + (long long)hc * dim};
  uint16_t *sx_ = eu_sh, *sk_ = eu_sh + dim, *sq_ = eu_sh + 2 * dim, *sw_ = eu_sh + 3 * dim,
           *sv_ = eu_sh + 4 * dim;
  unsigned long long align = (unsigned long long)dim & 7u;
#pragma unroll
  for (int a = 0; a < 5; a++) align |= (unsigned long long)src[a] & 15u;
  if (align == 0) {
    const int n8 = dim / 8;
    for (int i0 = tid; i0 < n8; i0 += EU_THREADS * 4) { /* 20 loads of a thread in flight */
      uint4 r[5][4];
#pragma unroll
      for (int a = 0; a < 5; a++)
#pragma unroll
        for (int j = 0; j < 4; j++)
          if (i0 + j * EU_THREADS < n8) r[a][j] = ((const uint4 *)src[a])[i0 + j * EU_THREADS];
#pragma unroll
      for (int a = 0; a < 5; a++)
#pragma unroll
        for (int j = 0; j < 4; j++)
          if (i0 + j * EU_THREADS < n8) ((uint4 *)(eu_sh + a * dim))[i0 + j * EU_THREADS] = r[a][j];
    }
  } else {
    for (int i = tid; i < dim; i += EU_THREADS)
#pragma unroll
      for (int a = 0; a < 5; a++) eu_sh[a * dim + i] = src[a][i];
  }
  __syncthreads();
  const int warp = tid >> 5;
  if (warp == 0)
    sums[0] = dsv4_warp_sum_torch(dim, [&](long long d) {
      const float v = dsv4i_bf16_to_f32(sx_[d]);
      return v * v;
    });
  else if (warp == 1)
    sums[1] = dsv4_warp_sum_torch(dim, [&](long long d) {
      const float v = dsv4i_bf16_to_f32(sk_[d]);
      return v * v;
    });
  else if (warp == 2)
    sums[2] = dsv4_warp_sum_torch(dim, [&](long long d) {
      const float w = dsv4i_bf16_to_f32(sq_[d]) * dsv4i_bf16_to_f32(sw_[d]);
      const float xw = dsv4i_bf16_to_f32(sx_[d]) * w;
      return xw * dsv4i_bf16_to_f32(sk_[d]);
    });
  __syncthreads();
  const float fdim = (float)dim, sx = sums[0], sk = sums[1], sd = sums[2];
  const float rstd = (1.0f / sqrtf(sx / fdim + eps)) * (1.0f / sqrtf(sk / fdim + eps));
  const float dot = (sd * rstd) * scale;
  const float mag = sqrtf(fmaxf(fabsf(dot), 1e-6f));
  const float z = copysignf(mag, dot);
  const bool vec = gate_vec ? c < gate_vec[t] : flat < (long long)n_tok * hc / 32 * 32;
  const float e = vec ? dsv4i_expf_torch(0.0f - z) : expf(-z);
  const float gate = 1.0f / (1.0f + e);
  if (align == 0) {
    for (int i = tid; i < dim / 8; i += EU_THREADS) {
      const uint4 xa = ((const uint4 *)sx_)[i], va = ((const uint4 *)sv_)[i];
      const uint32_t xw[4] = {xa.x, xa.y, xa.z, xa.w}, vw[4] = {va.x, va.y, va.z, va.w};
      uint32_t o[4];
#pragma unroll
      for (int j = 0; j < 4; j++) {
        uint32_t r = 0;
#pragma unroll
        for (int hf = 0; hf < 2; hf++) {
          const float xv = dsv4i_bf16_to_f32((uint16_t)(xw[j] >> (16 * hf)));
          const float gv = gate * dsv4i_bf16_to_f32((uint16_t)(vw[j] >> (16 * hf)));
          r |= (uint32_t)dsv4i_f32_to_bf16(xv + gv) << (16 * hf);
        }
        o[j] = r;
      }
      ((uint4 *)x)[i] = make_uint4(o[0], o[1], o[2], o[3]);
    }
  } else {
    for (int i = tid; i < dim; i += EU_THREADS) {
      const float gv = gate * dsv4i_bf16_to_f32(sv_[i]);
      x[i] = dsv4i_f32_to_bf16(dsv4i_bf16_to_f32(sx_[i]) + gv);
    }
  }
}
