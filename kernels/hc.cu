/*
 * Token embedding with the hyper-connection expansion, and the
 * hyper-connection mixes (spec §5.1, §5.3). CPU oracles: the CPU backend's
 * embed, dsv4i_cpu_hc_mixes, dsv4i_cpu_hc_split_sinkhorn, dsv4i_cpu_hc_pre,
 * dsv4i_cpu_hc_post; same operations in the same order, so bit-equal.
 */
#include "model/ref_math.h"
#include "reduce.cuh"

/* h[t][c][:] = embed[tok[t]][:] for every copy c; pre[t][c] = (c == 0).
 * Grid (ceil(dim / 256 / 8), n_tok); 8 bf16 per thread per 16-byte load
 * when dim % 8 == 0 (the release), elementwise otherwise.
 * Token ids are read on the device (capture-safe); ids outside [0, vocab)
 * were refused by the engine before the step. */
extern "C" __global__ void __launch_bounds__(256)
dsv4_k_embed_hc_bf16(int n_tok, int hc, int dim, const int32_t *tok, const uint16_t *embed,
                     uint16_t *h, float *pre) {
  const int t = blockIdx.y;
  if (t >= n_tok) return;
  const uint16_t *row = embed + (long long)tok[t] * dim;
  uint16_t *out = h + (long long)t * hc * dim;
  const int i = blockIdx.x * blockDim.x + threadIdx.x;
  if ((dim & 7) == 0) {
    if (i < dim / 8) {
      const uint4 v = reinterpret_cast<const uint4 *>(row)[i];
      for (int c = 0; c < hc; c++) reinterpret_cast<uint4 *>(out + (long long)c * dim)[i] = v;
    }
  } else {
    for (int d = i; d < dim; d += gridDim.x * blockDim.x)
      for (int c = 0; c < hc; c++) out[(long long)c * dim + d] = row[d];
  }
  if (blockIdx.x == 0 && threadIdx.x < hc) pre[t * hc + threadIdx.x] = threadIdx.x == 0 ? 1.0f : 0.0f;
}

/* hc_mixes: X = h[t] flattened ([hc·dim], bf16 -> fp32);
 * rs = 1 / sqrtf(ΣX²/fp32(hc·dim) + eps) (torch order);
 * mixes[t][m] = fp32(Σ X·fn[m]) · rs, the dot of exact double products in
 * 8 strided chains (chain j: elements 8i + j; the tail in chain 0) added
 * ((s0+s1)+(s2+s3))+((s4+s5)+(s6+s7)) and rounded once.
 * One block per token: thread 8m + j runs chain j of mix m (nm·8 <= 256,
 * i.e. hc <= 4... the block is 256 threads, so nm <= 32), warp 7 the norm. */
extern "C" __global__ void __launch_bounds__(256)
dsv4_k_hc_mixes_f32(int n_tok, int hc, int dim, const uint16_t *h, const float *fn, float eps,
                    float *mixes) {
  __shared__ double part[256];
  __shared__ float rs_s;
  const int t = blockIdx.x;
  if (t >= n_tok) return;
  const int n = hc * dim, nm = (2 + hc) * hc;
  const uint16_t *x = h + (long long)t * n;
  const int m = threadIdx.x >> 3, j = threadIdx.x & 7;
  if (m < nm) {
    const float *f = fn + (long long)m * n;
    double s = 0.0;
    int i = 0;
    for (; i + 8 * 16 <= n; i += 8 * 16) { /* 16 elements' loads in flight, added in order */
      float xv[16], fv[16];
#pragma unroll
      for (int k = 0; k < 16; k++) {
        xv[k] = dsv4i_bf16_to_f32(x[i + 8 * k + j]);
        fv[k] = f[i + 8 * k + j];
      }
#pragma unroll
      for (int k = 0; k < 16; k++) s += (double)xv[k] * (double)fv[k];
    }
    for (; i + 8 <= n; i += 8) s += (double)dsv4i_bf16_to_f32(x[i + j]) * (double)f[i + j];
    if (j == 0)
      for (; i < n; i++) s += (double)dsv4i_bf16_to_f32(x[i]) * (double)f[i];
    part[threadIdx.x] = s;
  }
  if ((threadIdx.x >> 5) == 7) {
    const float ss = dsv4_warp_sum_torch(n, [&](long long i) {
      const float v = dsv4i_bf16_to_f32(x[i]);
      return v * v;
    });
    if ((threadIdx.x & 31) == 0) rs_s = 1.0f / sqrtf(ss / (float)n + eps);
  }
  __syncthreads();
  if (threadIdx.x < nm) {
    const double *p = part + threadIdx.x * 8;
    const double d = ((p[0] + p[1]) + (p[2] + p[3])) + ((p[4] + p[5]) + (p[6] + p[7]));
    mixes[(long long)t * nm + threadIdx.x] = (float)d * rs_s;
  }
}

/* hc_split_sinkhorn: one thread per token (model/ref_math.h, shared with the CPU). */
extern "C" __global__ void __launch_bounds__(128)
dsv4_k_hc_sinkhorn_f32(int n_tok, int hc, const float *mixes, const float *scale,
                       const float *base, int iters, float hc_eps, float *pre, float *post,
                       float *comb) {
  const int t = blockIdx.x * blockDim.x + threadIdx.x;
  if (t >= n_tok) return;
  const int nm = (2 + hc) * hc;
  float m[(2 + DSV4I_HC_MAX) * DSV4I_HC_MAX];
  for (int k = 0; k < nm; k++) m[k] = mixes[(long long)t * nm + k];
  float pr[DSV4I_HC_MAX], po[DSV4I_HC_MAX], c[DSV4I_HC_MAX * DSV4I_HC_MAX];
  dsv4i_hc_sinkhorn_token(hc, m, scale, base, iters, hc_eps, pr, po, c);
  for (int i = 0; i < hc; i++) {
    pre[t * hc + i] = pr[i];
    post[t * hc + i] = po[i];
  }
  for (int k = 0; k < hc * hc; k++) comb[(long long)t * hc * hc + k] = c[k];
}

/* hc_pre: y[t][d] = bf16( Σ_c pre[t][c] · h[t][c][d] ) (products fp32, c in
 * order, from +0). Grid (ceil(dim/256), n_tok). */
extern "C" __global__ void __launch_bounds__(256)
dsv4_k_hc_pre_bf16(int n_tok, int hc, int dim, const uint16_t *h, const float *pre, uint16_t *y) {
  const int t = blockIdx.y, d = blockIdx.x * blockDim.x + threadIdx.x;
  if (t >= n_tok || d >= dim) return;
  const uint16_t *hr = h + (long long)t * hc * dim;
  float s = 0.0f;
  for (int c = 0; c < hc; c++) s += pre[t * hc + c] * dsv4i_bf16_to_f32(hr[(long long)c * dim + d]);
  y[(long long)t * dim + d] = dsv4i_f32_to_bf16(s);
}

/* DSpark tap (spec §5.6 item 4; the CPU backend's tap): y[t][d] =
 * bf16( (Σ_c h[t][c][d], fp32 from +0 in copy order) / hc ), written at
 * y + t·ldy (the taps buffer's row of this tap). Grid (ceil(dim/256), n_tok). */
extern "C" __global__ void __launch_bounds__(256)
dsv4_k_hc_tap_bf16(int n_tok, int hc, int dim, const uint16_t *h, uint16_t *y, long long ldy) {
  const int t = blockIdx.y, d = blockIdx.x * blockDim.x + threadIdx.x;
  if (t >= n_tok || d >= dim) return;
  const uint16_t *hr = h + (long long)t * hc * dim;
  float s = 0.0f;
  for (int c = 0; c < hc; c++) s += dsv4i_bf16_to_f32(hr[(long long)c * dim + d]);
  y[(long long)t * ldy + d] = dsv4i_f32_to_bf16(s / (float)hc);
}

/* hc_post: out[t][j][d] = bf16( post[t][j]·x[t][d] + Σ_i comb[t][i][j]·res[t][i][d] )
 * (sum over i in order from +0, then the post term). out may be res: each
 * thread reads its column of res before writing it. Grid (ceil(dim/256), n_tok). */
extern "C" __global__ void __launch_bounds__(256)
dsv4_k_hc_post_bf16(int n_tok, int hc, int dim, const uint16_t *x, const uint16_t *res,
                    const float *post, const float *comb, uint16_t *out) {
  const int t = blockIdx.y, d = blockIdx.x * blockDim.x + threadIdx.x;
  if (t >= n_tok || d >= dim) return;
  float r[DSV4I_HC_MAX];
  const uint16_t *rr = res + (long long)t * hc * dim;
  for (int i = 0; i < hc; i++) r[i] = dsv4i_bf16_to_f32(rr[(long long)i * dim + d]);
  const float xv = dsv4i_bf16_to_f32(x[(long long)t * dim + d]);
  const float *cb = comb + (long long)t * hc * hc;
  uint16_t *o = out + (long long)t * hc * dim;
  for (int j = 0; j < hc; j++) {
    float s = 0.0f;
    for (int i = 0; i < hc; i++) s += cb[i * hc + j] * r[i];
    o[(long long)j * dim + d] = dsv4i_f32_to_bf16(post[t * hc + j] * xv + s);
  }
}
