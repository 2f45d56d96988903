/*
 * RoPE / YaRN (spec §8.3): cos/sin rows for arbitrary positions and the
 * interleaved-pair rotation (and its conjugate) on bf16 vectors; the
 * frequency table is model/rope_freqs.c.
 */
#include <math.h>

#include "cpu/cpu_impl.h"
#include "model/formats.h"

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
