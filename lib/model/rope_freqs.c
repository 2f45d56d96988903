/* RoPE / YaRN frequency table (model/rope_freqs.h, spec §8.3). */
#include "model/rope_freqs.h"

#include <math.h>

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
