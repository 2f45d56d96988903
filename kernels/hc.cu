/*
 * Token embedding with the hyper-connection expansion, and the
 * hyper-connection mixes (spec §5.1, §5.3). CPU oracles: the CPU backend's
 * embed, dsv4i_cpu_hc_mixes, dsv4i_cpu_hc_split_sinkhorn, dsv4i_cpu_hc_pre,
 * dsv4i_cpu_hc_post; same operations in the same order, so bit-equal.
 */
#include "model/ref_math.h"
#include "norm_row.cuh"
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

/* ---- the default mode (docs/gpu-dense.md "Numerics modes") ----------------- */

/*
 * hc_mixes, tiled: the same operations as dsv4_k_hc_mixes_f32 (each mix the
 * dot of exact double products rounded once to fp32, then · rs; ΣX² in fp32),
 * the sums in a fixed order that depends only on n = hc·dim:
 *   - X is cut into chunks of HM_KC = 256 elements; in chunk ch, lane l of a
 *     warp adds the elements ch·256 + l + 32i, i = 0..7, in increasing i from
 *     +0 (double for the mixes, fp32 for ΣX²), then the warp's butterfly
 *     (reduce.cuh) gives the chunk's partial;
 *   - the partials of a (token, mix) or a token's ΣX² are added by 8 threads:
 *     thread l adds the chunks l, l + 8, l + 16, ... in increasing order from
 *     +0, then a xor butterfly over the 8 (offsets 4, 2, 1).
 * Grid (chunks, ceil(n_tok / HM_TT)): a block takes one chunk of every mix
 * for HM_TT tokens (warp w: mixes w, w + 8, w + 16; ΣX² of token w), so a
 * single token spreads over n/256 blocks (80 at the release's 4 x 5120). The
 * partials go to the module's scratch; the last block of a token group to
 * finish (a counter it resets, so a replayed graph starts from 0) adds them,
 * every (token, mix) at once (one L2 round trip up to 32 sums). With SK it
 * then runs the group's Sinkhorn (hc_sinkhorn_tok: 16 lanes per
 * token, from the mixes it just wrote): the pair hc_mixes_tiled + the lanes
 * kernel in one launch, the same bits.
 * No float atomics; a token's bits do not depend on the other tokens, the
 * grid or the schedule. One launch at a time per module (the engine's
 * stream): the scratch is the module's. At most HM_MAXTOK tokens per launch
 * (the launcher slices), n <= HM_MAXCH·256, nm <= 24 (hc <= 4).
 */
#define HM_KC 256
#define HM_TT 4
#define HM_MAXTOK 64
#define HM_MAXCH 128
#define HM_MAXM 24
#define HM_GL 8 /* threads per sum of the last block */
__device__ double hm_part[HM_MAXTOK][HM_MAXM][HM_MAXCH];
__device__ float hm_ss[HM_MAXTOK][HM_MAXCH];
__device__ unsigned int hm_count[HM_MAXTOK / HM_TT];

/* Sinkhorn of one token on 16 lanes (lane q = hc·i + j holds C[i][j]; hc <= 4):
 * m its (2 + hc)·hc mixes; pre/post its hc values, comb its hc·hc (written
 * when live). Every lane of the 16 calls it (shuffles); the row and column
 * sums gather the hc values by shuffles and add them in index order from +0,
 * and every other operation is dsv4i_hc_sinkhorn_token's, in its order: bit
 * for bit the CPU's (the per-token chain's latency spread over 16 lanes, no
 * order changed). HC > 0: hc known at compile time (the release's 4: the
 * gathers unrolled, their shuffles in flight together); HC == 0: hc_rt. */
template <int HC>
__device__ __forceinline__ void hc_sinkhorn_tok(int hc_rt, int q, bool live, const float *m,
                                                const float *scale, const float *base, int iters,
                                                float hc_eps, float *pre, float *post, float *comb) {
  const int hc = HC ? HC : hc_rt;
  const int hh = hc * hc;
  if (q < hc) {
    const float p = dsv4i_sigmoid_torch(m[q] * scale[0] + base[q]) + hc_eps;
    const float o = 2.0f * dsv4i_sigmoid_torch(m[hc + q] * scale[1] + base[hc + q]);
    if (live) pre[q] = p, post[q] = o;
  }
  const int qq = q < hh ? q : 0, i = qq / hc, j = qq % hc;
  float c = m[2 * hc + qq] * scale[2] + base[2 * hc + qq];
  /* softmax over j + eps */
  float mx = __shfl_sync(0xFFFFFFFFu, c, i * hc, 16);
#pragma unroll
  for (int k = 1; k < hc; k++) {
    const float v = __shfl_sync(0xFFFFFFFFu, c, i * hc + k, 16);
    mx = v > mx ? v : mx;
  }
  c = dsv4i_expf_torch(c - mx);
  float s = 0.0f;
#pragma unroll
  for (int k = 0; k < hc; k++) s += __shfl_sync(0xFFFFFFFFu, c, i * hc + k, 16);
  c = c / s + hc_eps;
  for (int it = 0; it < iters; it++) {
    if (it > 0) {
      s = 0.0f;
#pragma unroll
      for (int k = 0; k < hc; k++) s += __shfl_sync(0xFFFFFFFFu, c, i * hc + k, 16);
      s += hc_eps;
      c /= s;
    }
    s = 0.0f;
#pragma unroll
    for (int k = 0; k < hc; k++) s += __shfl_sync(0xFFFFFFFFu, c, k * hc + j, 16);
    s += hc_eps;
    c /= s;
  }
  if (live && q < hh) comb[q] = c;
}

__device__ __forceinline__ void hc_sinkhorn_tok_any(int hc, int q, bool live, const float *m,
                                                    const float *scale, const float *base, int iters,
                                                    float hc_eps, float *pre, float *post, float *comb) {
  if (hc == 4)
    hc_sinkhorn_tok<4>(hc, q, live, m, scale, base, iters, hc_eps, pre, post, comb);
  else
    hc_sinkhorn_tok<0>(hc, q, live, m, scale, base, iters, hc_eps, pre, post, comb);
}

template <bool SK>
__device__ __forceinline__ void hc_mixes_tiled(int n_tok, int hc, int dim, const uint16_t *h,
                                               const float *fn, float eps, float *mixes,
                                               const float *scale, const float *base, int iters,
                                               float hc_eps, float *pre, float *post, float *comb) {
  __shared__ float rs_s[HM_TT], ss_s[HM_TT];
  __shared__ float dot_s[HM_TT][HM_MAXM], mix_s[HM_TT][HM_MAXM];
  __shared__ int last_s;
  const int n = hc * dim, nm = (2 + hc) * hc, nch = (n + HM_KC - 1) / HM_KC;
  const int ch = blockIdx.x, g = blockIdx.y, t0 = g * HM_TT;
  const int nt = n_tok - t0 < HM_TT ? n_tok - t0 : HM_TT;
  const int lane = threadIdx.x & 31, wp = threadIdx.x >> 5;
  const int c0 = ch * HM_KC + lane;
  /* this warp's mixes' weights for the chunk, loaded once for all tokens, and
   * every token's elements: all loads in flight together */
  float fv[3][8], xv[HM_TT][8];
#pragma unroll
  for (int q = 0; q < 3; q++) {
    const int m = wp + 8 * q;
#pragma unroll
    for (int i = 0; i < 8; i++)
      fv[q][i] = m < nm && c0 + 32 * i < n ? fn[(long long)m * n + c0 + 32 * i] : 0.0f;
  }
#pragma unroll
  for (int t = 0; t < HM_TT; t++) {
    const uint16_t *x = h + (long long)(t0 + t) * n;
#pragma unroll
    for (int i = 0; i < 8; i++)
      xv[t][i] = t < nt && c0 + 32 * i < n ? dsv4i_bf16_to_f32(x[c0 + 32 * i]) : 0.0f;
  }
#pragma unroll
  for (int t = 0; t < HM_TT; t++) {
    if (t >= nt) break; /* block-uniform */
#pragma unroll
    for (int q = 0; q < 3; q++) {
      const int m = wp + 8 * q;
      if (m >= nm) break; /* warp-uniform */
      double s = 0.0;
#pragma unroll
      for (int i = 0; i < 8; i++) s += (double)xv[t][i] * (double)fv[q][i];
      s = dsv4_warp_sum_tree(s);
      if (lane == 0) hm_part[t0 + t][m][ch] = s;
    }
    if (wp == t) {
      float s = 0.0f;
#pragma unroll
      for (int i = 0; i < 8; i++) s += xv[t][i] * xv[t][i];
      s = dsv4_warp_sum_tree(s);
      if (lane == 0) hm_ss[t0 + t][ch] = s;
    }
  }
  __threadfence(); /* partials visible device-wide before the count */
  __syncthreads();
  if (threadIdx.x == 0) {
    const unsigned int done = atomicAdd(&hm_count[g], 1u);
    last_s = done == (unsigned int)nch - 1u;
    if (last_s) hm_count[g] = 0u; /* every block of the group has counted */
  }
  __syncthreads();
  if (!last_s) return;
  __threadfence();
  /* the sums over chunks: sum o < nt·nm is mix o % nm of token o / nm (double),
   * then the nt ΣX² (fp32); HM_GL threads each, 256 / HM_GL sums a pass, the
   * chunk loads of a pass all in flight. The butterfly moves the 64 bits of
   * either type (every lane shuffles; the add is the sum's type). */
  const int ndot = nt * nm, nsum = ndot + nt, gl = threadIdx.x % HM_GL;
  for (int o0 = 0; o0 < nsum; o0 += 256 / HM_GL) {
    const int o = o0 + threadIdx.x / HM_GL;
    const bool dot = o < ndot, live = o < nsum;
    unsigned long long bits = 0ull;
    if (dot) {
      const double *p = &hm_part[t0 + o / nm][o % nm][0];
      double v[HM_MAXCH / HM_GL];
#pragma unroll
      for (int j = 0; j < HM_MAXCH / HM_GL; j++) v[j] = gl + HM_GL * j < nch ? __ldcg(p + gl + HM_GL * j) : 0.0;
      double s = 0.0;
#pragma unroll
      for (int j = 0; j < HM_MAXCH / HM_GL; j++)
        if (gl + HM_GL * j < nch) s += v[j];
      bits = (unsigned long long)__double_as_longlong(s);
    } else if (live) {
      const float *p = &hm_ss[t0 + o - ndot][0];
      float v[HM_MAXCH / HM_GL];
#pragma unroll
      for (int j = 0; j < HM_MAXCH / HM_GL; j++) v[j] = gl + HM_GL * j < nch ? __ldcg(p + gl + HM_GL * j) : 0.0f;
      float s = 0.0f;
#pragma unroll
      for (int j = 0; j < HM_MAXCH / HM_GL; j++)
        if (gl + HM_GL * j < nch) s += v[j];
      bits = (unsigned long long)(unsigned int)__float_as_int(s);
    }
#pragma unroll
    for (int k = HM_GL / 2; k > 0; k >>= 1) {
      const unsigned long long ob = __shfl_xor_sync(0xFFFFFFFFu, bits, k);
      if (dot)
        bits = (unsigned long long)__double_as_longlong(__longlong_as_double((long long)bits) +
                                                        __longlong_as_double((long long)ob));
      else
        bits = (unsigned long long)(unsigned int)__float_as_int(__int_as_float((int)(unsigned int)bits) +
                                                                __int_as_float((int)(unsigned int)ob));
    }
    if (gl == 0 && dot) dot_s[o / nm][o % nm] = (float)__longlong_as_double((long long)bits);
    if (gl == 0 && live && !dot) ss_s[o - ndot] = __int_as_float((int)(unsigned int)bits);
  }
  __syncthreads();
  if (threadIdx.x < nt) rs_s[threadIdx.x] = 1.0f / sqrtf(ss_s[threadIdx.x] / (float)n + eps);
  __syncthreads();
  for (int i = threadIdx.x; i < ndot; i += 256) {
    const int t = i / nm, m = i % nm;
    const float v = dot_s[t][m] * rs_s[t];
    mixes[(long long)(t0 + t) * nm + m] = v;
    mix_s[t][m] = v;
  }
  if (!SK) return;
  __syncthreads();
  if (threadIdx.x < 16 * HM_TT) { /* warps 0-1: two tokens each */
    const int tl = threadIdx.x >> 4, q = threadIdx.x & 15, t = t0 + tl;
    const bool live = tl < nt;
    const long long tt = live ? t : t0;
    hc_sinkhorn_tok_any(hc, q, live, mix_s[live ? tl : 0], scale, base, iters, hc_eps,
                        pre + tt * hc, post + tt * hc, comb + tt * hc * hc);
  }
}

extern "C" __global__ void __launch_bounds__(256)
dsv4_k_hc_mixes_f32_tiled(int n_tok, int hc, int dim, const uint16_t *h, const float *fn, float eps,
                          float *mixes) {
  hc_mixes_tiled<false>(n_tok, hc, dim, h, fn, eps, mixes, nullptr, nullptr, 0, 0.0f, nullptr,
                        nullptr, nullptr);
}

/* hc_mixes_tiled + Sinkhorn (hc <= 4) in one launch: mixes as
 * dsv4_k_hc_mixes_f32_tiled, pre/post/comb as dsv4_k_hc_sinkhorn_f32_lanes
 * from those mixes, bit for bit. */
extern "C" __global__ void __launch_bounds__(256)
dsv4_k_hc_mixes_sinkhorn_f32_tiled(int n_tok, int hc, int dim, const uint16_t *h, const float *fn,
                                   float eps, float *mixes, const float *scale, const float *base,
                                   int iters, float hc_eps, float *pre, float *post, float *comb) {
  hc_mixes_tiled<true>(n_tok, hc, dim, h, fn, eps, mixes, scale, base, iters, hc_eps, pre, post,
                       comb);
}

/*
 * The attention sublayer's entry in one launch (the default mode): the blocks
 * x < chunks run dsv4_k_hc_mixes_sinkhorn_f32_tiled (this sublayer's mixes,
 * pre, post, comb), the HM_TT blocks after them hc_pre + RMSNorm of the
 * group's tokens with the previous sublayer's pre (pre_in; hc_pre_rms_row, as
 * dsv4_k_hc_pre_rmsnorm_bf16_tiled) into y [n][dim]: the two are independent,
 * so they share the grid and run side by side, each with its kernel's bits.
 * Grid (chunks + HM_TT, ceil(n_tok / HM_TT)), 256 threads; the limits of both.
 */
extern "C" __global__ void __launch_bounds__(256)
dsv4_k_hc_entry_tiled(int n_tok, int hc, int dim, const uint16_t *h, const float *fn, float eps,
                      float *mixes, const float *scale, const float *base, int iters, float hc_eps,
                      float *pre, float *post, float *comb, const float *pre_in, const uint16_t *w,
                      float norm_eps, uint16_t *y) {
  const int nch = (hc * dim + HM_KC - 1) / HM_KC;
  if ((int)blockIdx.x >= nch) { /* block-uniform */
    const int row = blockIdx.y * HM_TT + (blockIdx.x - nch);
    if (row < n_tok) hc_pre_rms_row(row, hc, dim, h, pre_in, w, norm_eps, y, dim);
    return;
  }
  hc_mixes_tiled<true>(n_tok, hc, dim, h, fn, eps, mixes, scale, base, iters, hc_eps, pre, post,
                       comb);
}

/*
 * hc_split_sinkhorn with hc·hc lanes per token (hc <= 4: 16 lanes, two
 * tokens a warp; hc_sinkhorn_tok above): bit for bit the CPU's. Grid
 * ceil(n_tok / 8), 128 threads.
 */
extern "C" __global__ void __launch_bounds__(128)
dsv4_k_hc_sinkhorn_f32_lanes(int n_tok, int hc, const float *mixes, const float *scale,
                             const float *base, int iters, float hc_eps, float *pre, float *post,
                             float *comb) {
  const int q = threadIdx.x & 15;
  const int t = blockIdx.x * 8 + (threadIdx.x >> 4);
  const bool live = t < n_tok; /* every lane shuffles; only live tokens write */
  const long long tt = live ? t : n_tok - 1;
  hc_sinkhorn_tok_any(hc, q, live, mixes + tt * (2 + hc) * hc, scale, base, iters, hc_eps,
                      pre + tt * hc, post + tt * hc, comb + tt * hc * hc);
}
