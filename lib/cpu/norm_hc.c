/*
 * RMSNorm and the lagged hyper-connection mixes (spec §5.3): hc_mixes,
 * hc_split_sinkhorn, hc_pre, hc_post. fp32 arithmetic in the reference's
 * order. mean(x²) is summed in torch's CPU order (dsv4i_cpu_sum_torch, as
 * the reference's `.square().mean(-1)`); the hc_mixes projection X·fn
 * (a torch GEMM of unknown internal order) in double with exact products
 * and a fixed association, rounded once. Nothing depends on the thread
 * count.
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "cpu/cpu_impl.h"
#include "cpu/engram.h" /* dsv4i_cpu_sum_torch, dsv4i_cpu_expf_vec */
#include "model/formats.h"
#include "model/ref_math.h"

#define LANES 8
#define ROWS 64 /* rows per scratch chunk */

/* mean(x²) over bf16 values as the reference's x.float().square().mean(-1)
 * on the CPU: squares exact in fp32, summed in torch's order
 * (dsv4i_cpu_sum_torch), divided by fp32(n). sq: float [n] scratch. */
static float mean_sq_bf16(const uint16_t *x, int32_t n, float *sq) {
  for (int32_t i = 0; i < n; i++) {
    const float v = dsv4i_bf16_to_f32(x[i]);
    sq[i] = v * v;
  }
  return dsv4i_cpu_sum_torch(sq, n) / (float)n;
}

/* Σ a[i]·b[i] with exact double products of fp32 values, rounded once to fp32. */
static float dot_f32_exact(const float *a, const float *b, int32_t n) {
  double s[LANES] = {0};
  int32_t i = 0;
  for (; i + LANES <= n; i += LANES)
    for (int32_t j = 0; j < LANES; j++) s[j] += (double)a[i + j] * (double)b[i + j];
  for (; i < n; i++) s[0] += (double)a[i] * (double)b[i];
  return (float)(((s[0] + s[1]) + (s[2] + s[3])) + ((s[4] + s[5]) + (s[6] + s[7])));
}

dsv4_status dsv4i_cpu_rmsnorm(int64_t n_tok, int32_t dim, const uint16_t *x, int64_t ldx,
                              const uint16_t *w, float eps, uint16_t *y, int64_t ldy) {
  if (n_tok < 0 || dim <= 0 || ldx < dim || ldy < dim || (n_tok > 0 && (!x || !w || !y)))
    return dsv4i_error(DSV4_ERR_INVALID_ARG, "rmsnorm: n %lld, dim %d, ldx %lld, ldy %lld",
                       (long long)n_tok, (int)dim, (long long)ldx, (long long)ldy);
  if (n_tok == 0) return DSV4_OK;
  const int64_t rows = n_tok < ROWS ? n_tok : ROWS;
  float *sq = dsv4i_malloc(sizeof(float) * (size_t)rows * (size_t)dim, "rmsnorm: squares");
  if (!sq) return DSV4_ERR_OUT_OF_MEMORY;
  for (int64_t t0 = 0; t0 < n_tok; t0 += rows) {
    const int64_t nt = n_tok - t0 < rows ? n_tok - t0 : rows;
    DSV4I_OMP(omp parallel for schedule(static) if (nt * dim >= 65536))
    for (int64_t i = 0; i < nt; i++) {
      const uint16_t *xr = x + (t0 + i) * ldx;
      uint16_t *yr = y + (t0 + i) * ldy;
      /* x * rsqrt(var + eps), rsqrt = 1/sqrt; then weight * that */
      const float r = 1.0f / sqrtf(mean_sq_bf16(xr, dim, sq + i * dim) + eps);
      for (int32_t d = 0; d < dim; d++) {
        const float v = dsv4i_bf16_to_f32(xr[d]) * r;
        yr[d] = dsv4i_f32_to_bf16(dsv4i_bf16_to_f32(w[d]) * v);
      }
    }
  }
  free(sq);
  return DSV4_OK;
}

dsv4_status dsv4i_cpu_hc_mixes(int64_t n_tok, int32_t hc, int32_t dim, const uint16_t *h,
                               const float *fn, float eps, float *mixes) {
  if (n_tok < 0 || hc <= 0 || hc > 16 || dim <= 0 || (n_tok > 0 && (!h || !fn || !mixes)))
    return dsv4i_error(DSV4_ERR_INVALID_ARG, "hc_mixes: n %lld, hc %d, dim %d",
                       (long long)n_tok, (int)hc, (int)dim);
  const int32_t n = hc * dim, nm = (2 + hc) * hc;
  if (n_tok == 0) return DSV4_OK;
  const int64_t rows = n_tok < ROWS ? n_tok : ROWS;
  float *xf = dsv4i_malloc(sizeof(float) * (size_t)n * (size_t)rows * 2, "hc_mixes: fp32 stream");
  if (!xf) return DSV4_ERR_OUT_OF_MEMORY;
  float *sq = xf + (size_t)n * (size_t)rows;
  for (int64_t t0 = 0; t0 < n_tok; t0 += rows) {
    const int64_t nt = n_tok - t0 < rows ? n_tok - t0 : rows;
    float rs[ROWS];
    DSV4I_OMP(omp parallel for schedule(static) if (nt * n >= 65536))
    for (int64_t t = 0; t < nt; t++) {
      const uint16_t *hr = h + (t0 + t) * n;
      dsv4i_bf16_to_f32_n(hr, (size_t)n, xf + t * n);
      rs[t] = 1.0f / sqrtf(mean_sq_bf16(hr, n, sq + t * n) + eps);
    }
    DSV4I_OMP(omp parallel for collapse(2) schedule(static) if (nt * n * nm >= 262144))
    for (int64_t t = 0; t < nt; t++)
      for (int32_t m = 0; m < nm; m++)
        mixes[(t0 + t) * nm + m] = dot_f32_exact(xf + t * n, fn + (int64_t)m * n, n) * rs[t];
  }
  free(xf);
  return DSV4_OK;
}

dsv4_status dsv4i_cpu_hc_split_sinkhorn(int64_t n_tok, int32_t hc, const float *mixes,
                                        const float *scale, const float *base, int32_t iters,
                                        float hc_eps, float *pre, float *post, float *comb) {
  if (n_tok < 0 || hc <= 0 || hc > DSV4I_HC_MAX || iters < 1 ||
      (n_tok > 0 && (!mixes || !scale || !base || !pre || !post || !comb)))
    return dsv4i_error(DSV4_ERR_INVALID_ARG, "hc_split_sinkhorn: n %lld, hc %d, iters %d",
                       (long long)n_tok, (int)hc, (int)iters);
  const int32_t nm = (2 + hc) * hc;
  for (int64_t t = 0; t < n_tok; t++) /* model/ref_math.h: shared with the kernels */
    dsv4i_hc_sinkhorn_token(hc, mixes + t * nm, scale, base, iters, hc_eps, pre + t * hc,
                            post + t * hc, comb + t * hc * hc);
  return DSV4_OK;
}

dsv4_status dsv4i_cpu_hc_pre(int64_t n_tok, int32_t hc, int32_t dim, const uint16_t *h,
                             const float *pre, uint16_t *y) {
  if (n_tok < 0 || hc <= 0 || dim <= 0 || (n_tok > 0 && (!h || !pre || !y)))
    return dsv4i_error(DSV4_ERR_INVALID_ARG, "hc_pre: n %lld, hc %d, dim %d", (long long)n_tok,
                       (int)hc, (int)dim);
  DSV4I_OMP(omp parallel for schedule(static) if (n_tok * hc * dim >= 65536))
  for (int64_t t = 0; t < n_tok; t++) {
    const uint16_t *hr = h + t * hc * dim;
    const float *p = pre + t * hc;
    for (int32_t d = 0; d < dim; d++) {
      float s = 0.0f; /* torch sums into a zero-filled output: never -0 */
      for (int32_t c = 0; c < hc; c++) s += p[c] * dsv4i_bf16_to_f32(hr[(int64_t)c * dim + d]);
      y[t * dim + d] = dsv4i_f32_to_bf16(s);
    }
  }
  return DSV4_OK;
}

#define POST_CHUNK 64

dsv4_status dsv4i_cpu_hc_post(int64_t n_tok, int32_t hc, int32_t dim, const uint16_t *x,
                              const uint16_t *res, const float *post, const float *comb,
                              uint16_t *out) {
  if (n_tok < 0 || hc <= 0 || hc > 16 || dim <= 0 ||
      (n_tok > 0 && (!x || !res || !post || !comb || !out)))
    return dsv4i_error(DSV4_ERR_INVALID_ARG, "hc_post: n %lld, hc %d, dim %d", (long long)n_tok,
                       (int)hc, (int)dim);
  DSV4I_OMP(omp parallel for schedule(static) if (n_tok * hc * dim >= 65536))
  for (int64_t t = 0; t < n_tok; t++) {
    const uint16_t *xr = x + t * dim, *rr = res + t * hc * dim;
    uint16_t *orow = out + t * hc * dim;
    const float *po = post + t * hc, *cb = comb + t * hc * hc;
    float rf[16][POST_CHUNK], xf[POST_CHUNK];
    for (int32_t d0 = 0; d0 < dim; d0 += POST_CHUNK) {
      const int32_t nd = dim - d0 < POST_CHUNK ? dim - d0 : POST_CHUNK;
      /* read the whole residual chunk first: out may be res */
      for (int32_t i = 0; i < hc; i++)
        for (int32_t d = 0; d < nd; d++) rf[i][d] = dsv4i_bf16_to_f32(rr[(int64_t)i * dim + d0 + d]);
      for (int32_t d = 0; d < nd; d++) xf[d] = dsv4i_bf16_to_f32(xr[d0 + d]);
      for (int32_t j = 0; j < hc; j++) {
        uint16_t *oj = orow + (int64_t)j * dim + d0;
        for (int32_t d = 0; d < nd; d++) {
          float s = 0.0f;
          for (int32_t i = 0; i < hc; i++) s += cb[i * hc + j] * rf[i][d];
          oj[d] = dsv4i_f32_to_bf16(po[j] * xf[d] + s);
        }
      }
    }
  }
  return DSV4_OK;
}
