/*
 * RoPE / YaRN (spec §8.3): the reference's fp32 frequency table, cos/sin
 * rows for arbitrary positions, and the interleaved-pair rotation (and its
 * conjugate) on bf16 vectors.
 */
#include <math.h>

#include "cpu/cpu_impl.h"
#include "model/formats.h"

#ifndef M_PI
#define M_PI 3.14159265358979323846 /* the double nearest pi, as Python's math.pi */
#endif

dsv4_status dsv4i_rope_freqs(int32_t rope_dim, double base, int64_t original_seq_len,
                             double factor, double beta_fast, double beta_slow, float *freqs) {
  if (rope_dim < 2 || rope_dim > 256 || rope_dim % 2 || !(base > 1.0) || !freqs ||
      (original_seq_len > 0 && (!(factor > 0.0) || !(beta_fast > 0.0) || !(beta_slow > 0.0))))
    return dsv4i_error(DSV4_ERR_INVALID_ARG, "rope_freqs: dim %d, base %g, factor %g",
                       (int)rope_dim, base, factor);
  const int32_t half = rope_dim / 2;
  /* freqs = 1.0 / (base ** (arange(0, dim, 2, fp32) / dim)): the exponent an
   * fp32 division, the power correctly rounded to fp32 (torch's fp32 pow is;
   * computed in double and rounded once), then an fp32 reciprocal. */
  for (int32_t i = 0; i < half; i++) {
    const float e = (float)(2 * i) / (float)rope_dim;
    const float p = (float)pow(base, (double)e);
    freqs[i] = 1.0f / p;
  }
  if (original_seq_len > 0) {
    /* corrected_dim in double, as the reference's Python floats */
    const double two_pi = 2.0 * M_PI;
    const double lb = 2.0 * log(base);
    double lo = floor((double)rope_dim * log((double)original_seq_len / (beta_fast * two_pi)) / lb);
    double hi = ceil((double)rope_dim * log((double)original_seq_len / (beta_slow * two_pi)) / lb);
    if (lo < 0.0) lo = 0.0;
    if (hi > rope_dim - 1) hi = rope_dim - 1;
    const double span = hi - lo > 1e-3 ? hi - lo : 1e-3;
    const float flo = (float)lo, fspan = (float)span, ffac = (float)factor;
    for (int32_t i = 0; i < half; i++) {
      float ramp = ((float)i - flo) / fspan;
      ramp = ramp < 0.0f ? 0.0f : (ramp > 1.0f ? 1.0f : ramp);
      const float smooth = 1.0f - ramp;
      /* freqs / factor * (1 - smooth) + freqs * smooth */
      freqs[i] = (freqs[i] / ffac) * (1.0f - smooth) + freqs[i] * smooth;
    }
  }
  return DSV4_OK;
}

dsv4_status dsv4i_rope_cs(const float *freqs, int32_t n_freq, int64_t n, const int64_t *pos,
                          float *cs) {
  if (!freqs || n_freq <= 0 || n < 0 || (n > 0 && (!pos || !cs)))
    return dsv4i_error(DSV4_ERR_INVALID_ARG, "rope_cs: n_freq %d, n %lld", (int)n_freq,
                       (long long)n);
  for (int64_t t = 0; t < n; t++)
    if (pos[t] < 0 || pos[t] >= (INT64_C(1) << 24))
      return dsv4i_error(DSV4_ERR_INVALID_ARG, "rope_cs: position %lld outside [0, 2^24)",
                         (long long)pos[t]);
  DSV4I_OMP(omp parallel for schedule(static) if (n > 16))
  for (int64_t t = 0; t < n; t++) {
    const float p = (float)pos[t];
    float *row = cs + t * n_freq * 2;
    for (int32_t i = 0; i < n_freq; i++) {
      const float a = p * freqs[i]; /* the angle, rounded to fp32 */
      row[2 * i] = (float)cos((double)a);
      row[2 * i + 1] = (float)sin((double)a);
    }
  }
  return DSV4_OK;
}

dsv4_status dsv4i_cpu_rope(int64_t n_tok, int32_t n_vec, int32_t n_freq, uint16_t *x,
                           int64_t tok_stride, int64_t vec_stride, const float *cs, int inverse) {
  if (n_tok < 0 || n_vec < 0 || n_freq <= 0 || (n_tok > 0 && n_vec > 0 && (!x || !cs)))
    return dsv4i_error(DSV4_ERR_INVALID_ARG, "rope: n %lld, vectors %d, pairs %d",
                       (long long)n_tok, (int)n_vec, (int)n_freq);
  DSV4I_OMP(omp parallel for schedule(static) if (n_tok * n_vec > 64))
  for (int64_t t = 0; t < n_tok; t++) {
    const float *row = cs + t * n_freq * 2;
    for (int32_t v = 0; v < n_vec; v++) {
      uint16_t *p = x + t * tok_stride + (int64_t)v * vec_stride;
      for (int32_t i = 0; i < n_freq; i++) {
        const float a = dsv4i_bf16_to_f32(p[2 * i]), b = dsv4i_bf16_to_f32(p[2 * i + 1]);
        const float c = row[2 * i], s = row[2 * i + 1];
        float re, im;
        if (!inverse) { /* (a + ib)(c + is) */
          re = a * c - b * s;
          im = a * s + b * c;
        } else { /* (a + ib)(c - is) */
          re = a * c + b * s;
          im = b * c - a * s;
        }
        p[2 * i] = dsv4i_f32_to_bf16(re);
        p[2 * i + 1] = dsv4i_f32_to_bf16(im);
      }
    }
  }
  return DSV4_OK;
}
