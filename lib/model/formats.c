/*
 * Number formats, spec §3.1: the constant decode tables and the bulk bf16
 * conversions. The per-element conversions are inline in formats.h.
 */
#include "model/formats.h"

#include <math.h>

/* E4M3FN byte b -> value, as a constant expression so the table is built by
 * the compiler. Exponent field e, mantissa m: e = 0 gives m·2^-9, e > 0
 * gives (8 + m)·2^(e - 10); both are (e ? 8 + m : m)·2^(max(e,1) - 1) / 512,
 * exact in fp32. 0x7F and 0xFF are NaN. */
#define E4M3_E(b) (((b) >> 3) & 15)
#define E4M3_M(b) ((b) & 7)
#define E4M3_MAG(b)                                                                   \
  ((float)(E4M3_E(b) ? 8 + E4M3_M(b) : E4M3_M(b)) *                                   \
   (float)(1u << ((E4M3_E(b) ? E4M3_E(b) : 1) - 1)) / 512.0f)
#define E4M3_VAL(b)                                                                   \
  ((((b) & 0x7F) == 0x7F) ? (((b) & 0x80) ? -NAN : NAN)                               \
                          : (((b) & 0x80) ? -E4M3_MAG(b) : E4M3_MAG(b)))
#define E4M3_R4(b) E4M3_VAL(b), E4M3_VAL((b) + 1), E4M3_VAL((b) + 2), E4M3_VAL((b) + 3)
#define E4M3_R16(b) E4M3_R4(b), E4M3_R4((b) + 4), E4M3_R4((b) + 8), E4M3_R4((b) + 12)
#define E4M3_R64(b) E4M3_R16(b), E4M3_R16((b) + 16), E4M3_R16((b) + 32), E4M3_R16((b) + 48)

const float dsv4i_e4m3_table[256] = {
  E4M3_R64(0), E4M3_R64(64), E4M3_R64(128), E4M3_R64(192),
};

const float dsv4i_e2m1_table[16] = {
  0.0f,  0.5f,  1.0f,  1.5f,  2.0f,  3.0f,  4.0f,  6.0f,
  -0.0f, -0.5f, -1.0f, -1.5f, -2.0f, -3.0f, -4.0f, -6.0f,
};

void dsv4i_bf16_to_f32_n(const uint16_t *restrict src, size_t n, float *restrict dst) {
  for (size_t i = 0; i < n; i++) dst[i] = dsv4i_bf16_to_f32(src[i]);
}

void dsv4i_f32_to_bf16_n(const float *restrict src, size_t n, uint16_t *restrict dst) {
  for (size_t i = 0; i < n; i++) dst[i] = dsv4i_f32_to_bf16(src[i]);
}
