/*
 * Head (spec §5.6): final hc collapse with the last FFN pre, RMSNorm, fp32
 * logits; greedy argmax and temperature sampling by the exponential-race
 * (Gumbel-max) trick of the reference, with our own stateless noise.
 */
#include <math.h>
#include <stdlib.h>

#include "cpu/cpu_impl.h"
#include "model/formats.h"
#include "model/ref_math.h"

dsv4_status dsv4i_cpu_head(int64_t n_tok, int32_t hc, int32_t dim, const uint16_t *h,
                           const float *pre, const uint16_t *norm_w, float eps,
                           const dsv4i_wview *head, float *logits, uint16_t *collapsed) {
  if (n_tok < 0 || hc <= 0 || dim <= 0 || !dsv4i_wview_valid(head) || head->cols != dim ||
      (n_tok > 0 && (!h || !pre || !norm_w || !logits)))
    return dsv4i_error(DSV4_ERR_INVALID_ARG, "head: n %lld, hc %d, dim %d", (long long)n_tok,
                       (int)hc, (int)dim);
  if (n_tok == 0) return DSV4_OK;
  uint16_t *buf = dsv4i_malloc(sizeof(uint16_t) * 2 * (size_t)n_tok * (size_t)dim, "head: rows");
  if (!buf) return DSV4_ERR_OUT_OF_MEMORY;
  uint16_t *x = buf, *xn = buf + (size_t)n_tok * (size_t)dim;
  dsv4_status st = dsv4i_cpu_hc_pre(n_tok, hc, dim, h, pre, x);
  if (st == DSV4_OK) st = dsv4i_cpu_rmsnorm(n_tok, dim, x, dim, norm_w, eps, xn, dim);
  if (st == DSV4_OK) st = dsv4i_cpu_linear_f32(head, n_tok, xn, dim, logits, head->rows);
  if (st == DSV4_OK && collapsed)
    for (size_t i = 0; i < (size_t)n_tok * (size_t)dim; i++) collapsed[i] = x[i];
  free(buf);
  return st;
}

int32_t dsv4i_cpu_argmax(const float *x, int64_t n) {
  int64_t best = -1;
  for (int64_t i = 0; i < n; i++) {
    if (isnan(x[i])) continue;
    if (best < 0 || x[i] > x[best]) best = i;
  }
  return best < 0 ? 0 : (int32_t)best;
}

int64_t dsv4i_cpu_not_drawable(const float *x, int64_t n) {
  int finite = 0;
  for (int64_t i = 0; i < n; i++) {
    if (isnan(x[i]) || x[i] == INFINITY) return i;
    finite |= x[i] != -INFINITY;
  }
  return finite ? -1 : n;
}

dsv4_status dsv4i_cpu_not_finite_error(const float *x, int64_t n, const char *what, int32_t r) {
  const int64_t i = dsv4i_cpu_not_drawable(x, n);
  if (i < 0 || i >= n)
    return dsv4i_error(DSV4_ERR_NOT_FINITE, "%s %d: all %lld values are -inf: no token can be drawn",
                       what, (int)r, (long long)n);
  return dsv4i_error(DSV4_ERR_NOT_FINITE, "%s %d: the logit of token %lld is %s: no token can be "
                     "drawn (damaged weights or an overflow)", what, (int)r, (long long)i,
                     isnan(x[i]) ? "NaN" : "+inf");
}

float dsv4i_sample_noise(uint64_t seed, uint64_t counter, int64_t i) {
  return dsv4i_sample_noise_at(seed, counter, i); /* model/ref_math.h: shared with the kernels */
}

int32_t dsv4i_cpu_sample(const float *logits, int32_t vocab, float temperature, uint64_t seed,
                         uint64_t counter) {
  if (!logits || vocab <= 0 || dsv4i_cpu_not_drawable(logits, vocab) >= 0) return -1;
  if (!(temperature > 0.0f)) return dsv4i_cpu_argmax(logits, vocab);
  const float t = temperature > 1e-5f ? temperature : 1e-5f;
  /* softmax(logits / t) in fp32: max, Σ exp(l - max) in index order, × 1/Σ */
  float mx = -INFINITY;
  for (int32_t i = 0; i < vocab; i++) {
    const float l = logits[i] / t;
    mx = l > mx ? l : mx;
  }
  float sum = 0.0f;
  for (int32_t i = 0; i < vocab; i++) sum += expf(logits[i] / t - mx);
  const float inv = 1.0f / sum;
  int32_t best = -1;
  float best_r = 0.0f;
  for (int32_t i = 0; i < vocab; i++) {
    const float p = expf(logits[i] / t - mx) * inv;
    const float r = p / dsv4i_sample_noise(seed, counter, i);
    if (isnan(r)) continue;
    if (best < 0 || r > best_r) {
      best = i;
      best_r = r;
    }
  }
  return best < 0 ? dsv4i_cpu_argmax(logits, vocab) : best;
}
