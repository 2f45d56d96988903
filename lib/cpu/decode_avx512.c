/*
 * AVX-512 decode of a full 32 × 32 weight tile into the transposed fp32
 * layout the GEMM micro-kernels read (wt[k][o]), for the decode-bound case
 * of few tokens. Same values bit for bit as the lookup tables of
 * model/formats.h (checked by tests/unit/test_cpu_ops.c for every code):
 * - E4M3: normal codes by re-biasing the exponent bits, subnormal codes as
 *   integer × 2^-9 (no fp32 denormals, so no microcode assists), NaN codes
 *   from the table;
 * - E2M1: the 16-entry table through a register permute;
 * - bf16: a shift.
 * Each 16 x 16 quarter is decoded row by row with vector loads and
 * transposed in registers.
 */

#include "cpu/cpu_impl.h"
#include "model/formats.h"

#if DSV4I_HAVE_AVX512_DECODE
#include <immintrin.h>

int dsv4i_cpu_avx512_ok(void) {
  return __builtin_cpu_supports("avx512f") ? 1 : 0;
}

__attribute__((target("avx512f"))) static inline __m512 e4m3x16(__m128i bytes) {
  const __m512i d = _mm512_cvtepu8_epi32(bytes);
  const __m512i m = _mm512_and_si512(d, _mm512_set1_epi32(0x7F));
  const __m512i sign = _mm512_slli_epi32(_mm512_and_si512(d, _mm512_set1_epi32(0x80)), 24);
  /* normal: exponent field e + 120, mantissa bits in place */
  const __m512i nbits = _mm512_add_epi32(_mm512_slli_epi32(m, 20), _mm512_set1_epi32(120 << 23));
  /* subnormal (exponent field 0): m · 2^-9, exact */
  const __m512 sub = _mm512_mul_ps(_mm512_cvtepi32_ps(m), _mm512_set1_ps(0x1p-9f));
  const __mmask16 is_sub = _mm512_cmplt_epi32_mask(m, _mm512_set1_epi32(8));
  const __m512i mag = _mm512_mask_mov_epi32(nbits, is_sub, _mm512_castps_si512(sub));
  return _mm512_castsi512_ps(_mm512_or_si512(mag, sign));
}

/* 16 values of row `r`: FP8 k = 16h .. 16h+15; FP4 the even (h = 0) or odd
 * (h = 1) k of 0..31; BF16 k = 16h .. 16h+15. */
__attribute__((target("avx512f"))) static inline __m512 row16(int32_t fmt, const void *row, int h) {
  if (fmt == DSV4I_W_FP8) {
    const uint8_t *r = (const uint8_t *)row + 16 * h;
    const __m128i b = _mm_loadu_si128((const __m128i *)(const void *)r);
    const __mmask16 nan = _mm512_cmpeq_epi32_mask(
        _mm512_and_si512(_mm512_cvtepu8_epi32(b), _mm512_set1_epi32(0x7F)), _mm512_set1_epi32(0x7F));
    if (nan) { /* NaN codes 0x7F / 0xFF: the table's values */
      float v[16];
      for (int i = 0; i < 16; i++) v[i] = dsv4i_e4m3_table[r[i]];
      return _mm512_loadu_ps(v);
    }
    return e4m3x16(b);
  }
  if (fmt == DSV4I_W_FP4) {
    const __m512i d = _mm512_cvtepu8_epi32(_mm_loadu_si128((const __m128i *)row));
    const __m512i code = h ? _mm512_srli_epi32(d, 4) : _mm512_and_si512(d, _mm512_set1_epi32(0x0F));
    return _mm512_permutexvar_ps(code, _mm512_loadu_ps(dsv4i_e2m1_table));
  }
  const uint16_t *r = (const uint16_t *)row + 16 * h;
  const __m512i a = _mm512_cvtepu16_epi32(_mm256_loadu_si256((const __m256i *)(const void *)r));
  return _mm512_castsi512_ps(_mm512_slli_epi32(a, 16));
}

/* In-register transpose of 16 rows of 16 floats: afterwards r[c] holds
 * column c (unpack pairs, unpack 64-bit pairs, two 128-bit lane shuffles). */
__attribute__((target("avx512f"))) static inline void transpose16(__m512 r[16]) {
  __m512 t[16];
  for (int i = 0; i < 16; i += 2) {
    t[i] = _mm512_unpacklo_ps(r[i], r[i + 1]);
    t[i + 1] = _mm512_unpackhi_ps(r[i], r[i + 1]);
  }
  for (int i = 0; i < 16; i += 4) {
    const __m512d a = _mm512_castps_pd(t[i]), b = _mm512_castps_pd(t[i + 1]);
    const __m512d c = _mm512_castps_pd(t[i + 2]), d = _mm512_castps_pd(t[i + 3]);
    r[i] = _mm512_castpd_ps(_mm512_unpacklo_pd(a, c));
    r[i + 1] = _mm512_castpd_ps(_mm512_unpackhi_pd(a, c));
    r[i + 2] = _mm512_castpd_ps(_mm512_unpacklo_pd(b, d));
    r[i + 3] = _mm512_castpd_ps(_mm512_unpackhi_pd(b, d));
  }
  /* r[4g + j], 128-bit lane L: rows 4g..4g+3 of column 4L + j */
  for (int j = 0; j < 4; j++) {
    t[j] = _mm512_shuffle_f32x4(r[j], r[4 + j], 0x88);
    t[4 + j] = _mm512_shuffle_f32x4(r[j], r[4 + j], 0xDD);
    t[8 + j] = _mm512_shuffle_f32x4(r[8 + j], r[12 + j], 0x88);
    t[12 + j] = _mm512_shuffle_f32x4(r[8 + j], r[12 + j], 0xDD);
  }
  for (int j = 0; j < 4; j++) {
    r[j] = _mm512_shuffle_f32x4(t[j], t[8 + j], 0x88);
    r[8 + j] = _mm512_shuffle_f32x4(t[j], t[8 + j], 0xDD);
    r[4 + j] = _mm512_shuffle_f32x4(t[4 + j], t[12 + j], 0x88);
    r[12 + j] = _mm512_shuffle_f32x4(t[4 + j], t[12 + j], 0xDD);
  }
}

__attribute__((target("avx512f"))) void dsv4i_cpu_decode_tile_avx512(int32_t fmt, const void *base,
                                                                      int64_t ld,
                                                                      float wt[DSV4I_TILE_K][DSV4I_TILE_O]) {
  const int64_t esz = fmt == DSV4I_W_BF16 ? 2 : 1; /* bytes per data_ld unit */
  for (int ob = 0; ob < 2; ob++)
    for (int h = 0; h < 2; h++) {
      __m512 r[16];
      for (int i = 0; i < 16; i++)
        r[i] = row16(fmt, (const uint8_t *)base + (int64_t)(16 * ob + i) * ld * esz, h);
      transpose16(r);
      for (int c = 0; c < 16; c++) {
        const int k = fmt == DSV4I_W_FP4 ? 2 * c + h : 16 * h + c;
        _mm512_storeu_ps(&wt[k][16 * ob], r[c]);
      }
    }
}

#endif /* DSV4I_HAVE_AVX512_DECODE */
