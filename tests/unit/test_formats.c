/*
 * Number formats (lib/model/formats.h, spec §3.1): bf16, E4M3FN, UE8M0, E2M1.
 *
 * The encoders are checked against test-local references that follow the
 * definitions by a different route: every finite value of the format is
 * enumerated as a double (ldexp of the definition), and the expected code is
 * the nearest one found by search, ties to the even mantissa, saturating.
 * Comparisons of distances are done as 2|v| against lo + hi, exact in double.
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "test_util.h"
#include "model/formats.h"

static uint64_t rng_state = 0x9E3779B97F4A7C15ull;
static uint32_t rng32(void) { return tu_rng32(&rng_state); }


/* ---- reference encoders (definition + search) --------------------------- */

typedef struct ref_val {
  double v;
  uint8_t code;
  int mant;
} ref_val;

static int cmp_ref(const void *a, const void *b) {
  double x = ((const ref_val *)a)->v, y = ((const ref_val *)b)->v;
  return (x > y) - (x < y);
}

static ref_val e4m3_vals[127]; /* non-negative finite E4M3FN values, sorted */
static ref_val e2m1_vals[8];

static void build_refs(void) {
  size_t k = 0;
  for (int e = 0; e < 16; e++)
    for (int m = 0; m < 8; m++) {
      if (e == 15 && m == 7) continue; /* NaN */
      double v = e == 0 ? ldexp(m / 8.0, -6) : ldexp(1.0 + m / 8.0, e - 7);
      e4m3_vals[k++] = (ref_val){v, (uint8_t)(e << 3 | m), m};
    }
  qsort(e4m3_vals, k, sizeof e4m3_vals[0], cmp_ref);
  /* E2M1: sign, 2 exponent bits (bias 1), 1 mantissa bit; exponent 0 = m·0.5 */
  for (int e = 0; e < 4; e++)
    for (int m = 0; m < 2; m++) {
      double v = e == 0 ? m * 0.5 : ldexp(1.0 + m / 2.0, e - 1);
      e2m1_vals[e * 2 + m] = (ref_val){v, (uint8_t)(e << 1 | m), m};
    }
  qsort(e2m1_vals, 8, sizeof e2m1_vals[0], cmp_ref);
}

/* nearest of vals[0..n) to a >= 0, ties to even mantissa, saturating */
static uint8_t ref_nearest(const ref_val *vals, size_t n, double a) {
  if (a >= vals[n - 1].v) return vals[n - 1].code;
  size_t lo = 0, hi = n - 1; /* vals[lo].v <= a < vals[hi].v */
  while (hi - lo > 1) {
    size_t mid = (lo + hi) / 2;
    if (vals[mid].v <= a) lo = mid;
    else hi = mid;
  }
  double twice = 2.0 * a, sum = vals[lo].v + vals[hi].v;
  if (twice < sum) return vals[lo].code;
  if (twice > sum) return vals[hi].code;
  return (vals[lo].mant % 2 == 0) ? vals[lo].code : vals[hi].code;
}

static uint8_t ref_e4m3(double v) {
  uint8_t sign = signbit(v) ? 0x80 : 0;
  if (isnan(v)) return sign | 0x7F;
  return sign | ref_nearest(e4m3_vals, 127, fabs(v));
}

static uint8_t ref_e2m1(double v) {
  uint8_t sign = signbit(v) ? 8 : 0;
  if (isnan(v)) return sign;
  return sign | ref_nearest(e2m1_vals, 8, fabs(v));
}

/* bf16 by search between truncation and the next pattern up (magnitudes) */
static uint16_t ref_bf16(float f) {
  uint32_t u = tu_bits_of_f32(f);
  if (isnan(f)) return (uint16_t)((u >> 16) | 0x40);
  uint16_t t = (uint16_t)(u >> 16);
  if ((u & 0xFFFF) == 0) return t;
  double a = fabs((double)f);
  double lo = fabs((double)tu_f32_of_bits((uint32_t)t << 16));
  uint16_t up = (uint16_t)(t + 1); /* magnitude step up; 0x7F80 = inf */
  if ((up & 0x7FFF) == 0x7F80) {
    /* rounding up reaches inf when a >= max + half ulp = 2^128 - 2^119 */
    double lim = ldexp(1.0, 128) - ldexp(1.0, 119);
    return a >= lim ? up : t;
  }
  double hi = fabs((double)tu_f32_of_bits((uint32_t)up << 16));
  if (2.0 * a < lo + hi) return t;
  if (2.0 * a > lo + hi) return up;
  return (t & 1) ? up : t;
}

static int setup(void **state) {
  (void)state;
  build_refs();
  return 0;
}

/* ---- bf16 ------------------------------------------------------------------ */

static void bf16_roundtrip_all_patterns(void **state) {
  (void)state;
  for (uint32_t b = 0; b < 65536; b++) {
    float f = dsv4i_bf16_to_f32((uint16_t)b);
    assert_int_equal(tu_bits_of_f32(f), b << 16);
    uint16_t back = dsv4i_f32_to_bf16(f);
    if ((b & 0x7FFF) > 0x7F80) assert_int_equal(back, b | 0x40); /* NaN: quieted */
    else assert_int_equal(back, b);
  }
}

static void bf16_rne_corner_cases(void **state) {
  (void)state;
  static const struct { uint32_t f; uint16_t want; } cases[] = {
    {0x3F808000u, 0x3F80}, /* tie, even below: down */
    {0x3F818000u, 0x3F82}, /* tie, odd below: up */
    {0x3F808001u, 0x3F81}, /* just above a tie: up */
    {0x3F807FFFu, 0x3F80}, /* just below a tie: down */
    {0xBF818000u, 0xBF82}, /* negative tie, odd: away from zero */
    {0xBF808000u, 0xBF80},
    {0x3FFF8000u, 0x4000}, /* tie with carry into the exponent */
    {0x7F7F8000u, 0x7F80}, /* max bf16 + half ulp: tie to even = inf */
    {0x7F7F7FFFu, 0x7F7F}, /* just below: max finite */
    {0x7F7FFFFFu, 0x7F80}, /* fp32 max: inf */
    {0xFF7FFFFFu, 0xFF80}, /* -fp32 max: -inf */
    {0x7F800000u, 0x7F80}, /* inf */
    {0xFF800000u, 0xFF80}, /* -inf */
    {0x00000000u, 0x0000},
    {0x80000000u, 0x8000}, /* -0 keeps its sign */
    {0x00008000u, 0x0000}, /* subnormal tie, even: down to 0 */
    {0x00018000u, 0x0002}, /* subnormal tie, odd: up */
    {0x0000FFFFu, 0x0001}, /* above the half step: smallest bf16 subnormal */
    {0x007FFFFFu, 0x0080}, /* largest fp32 subnormal -> min normal */
    {0x7FC00000u, 0x7FC0}, /* quiet NaN */
    {0xFFC00000u, 0xFFC0}, /* negative quiet NaN */
    {0x7F800001u, 0x7FC0}, /* signalling NaN, payload only in low bits: stays NaN */
    {0x7FFFFFFFu, 0x7FFF}, /* NaN with all payload bits: no carry into sign */
    {0xFF80FFFFu, 0xFFC0},
  };
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
    uint16_t got = dsv4i_f32_to_bf16(tu_f32_of_bits(cases[i].f));
    if (got != cases[i].want)
      fail_msg("f32 0x%08x -> bf16 0x%04x, want 0x%04x", cases[i].f, got, cases[i].want);
    assert_int_equal(ref_bf16(tu_f32_of_bits(cases[i].f)), cases[i].want); /* the reference agrees */
  }
}

static void bf16_rne_matches_reference(void **state) {
  (void)state;
  /* every bf16 pattern with each low half near the tie, and random patterns */
  static const uint32_t lows[] = {0x0000, 0x0001, 0x7FFF, 0x8000, 0x8001, 0xFFFF};
  for (uint32_t b = 0; b < 65536; b++)
    for (size_t k = 0; k < sizeof lows / sizeof lows[0]; k++) {
      float f = tu_f32_of_bits(b << 16 | lows[k]);
      if (dsv4i_f32_to_bf16(f) != ref_bf16(f))
        fail_msg("0x%08x: got 0x%04x want 0x%04x", tu_bits_of_f32(f), dsv4i_f32_to_bf16(f), ref_bf16(f));
    }
  for (int i = 0; i < (1 << 20); i++) {
    float f = tu_f32_of_bits(rng32());
    if (dsv4i_f32_to_bf16(f) != ref_bf16(f))
      fail_msg("0x%08x: got 0x%04x want 0x%04x", tu_bits_of_f32(f), dsv4i_f32_to_bf16(f), ref_bf16(f));
  }
  /* bulk forms */
  float src[5] = {1.0f, tu_f32_of_bits(0x3F818000u), -0.0f, tu_f32_of_bits(0x7F800001u), 3.0e38f};
  uint16_t h[5];
  float back[5];
  dsv4i_f32_to_bf16_n(src, 5, h);
  dsv4i_bf16_to_f32_n(h, 5, back);
  for (int i = 0; i < 5; i++) {
    assert_int_equal(h[i], dsv4i_f32_to_bf16(src[i]));
    assert_int_equal(tu_bits_of_f32(back[i]), (uint32_t)h[i] << 16);
  }
}

/* ---- E4M3FN ----------------------------------------------------------------- */

static void e4m3_decode_matches_definition(void **state) {
  (void)state;
  for (int b = 0; b < 256; b++) {
    float got = dsv4i_e4m3_to_f32((uint8_t)b);
    int e = (b >> 3) & 15, m = b & 7, neg = b >> 7;
    if (e == 15 && m == 7) {
      assert_true(isnan(got));
      assert_int_equal(!!signbit(got), neg);
      continue;
    }
    double v = e == 0 ? (m / 8.0) * ldexp(1.0, -6) : (1.0 + m / 8.0) * ldexp(1.0, e - 7);
    if (neg) v = -v;
    assert_true((double)got == v);
    assert_int_equal(!!signbit(got), neg); /* 0x80 is -0.0 */
  }
  assert_true(dsv4i_e4m3_to_f32(0x7E) == 448.0f);
  assert_true(dsv4i_e4m3_to_f32(0x01) == 0x1p-9f);
  assert_true(dsv4i_e4m3_to_f32(0x08) == 0x1p-6f);
}

static void e4m3_encode_decode_roundtrip(void **state) {
  (void)state;
  for (int b = 0; b < 256; b++) {
    if ((b & 0x7F) == 0x7F) continue;
    assert_int_equal(dsv4i_f32_to_e4m3(dsv4i_e4m3_to_f32((uint8_t)b)), b);
  }
}

static void e4m3_encode_all_bf16_matches_reference(void **state) {
  (void)state;
  for (uint32_t b = 0; b < 65536; b++) {
    float f = tu_f32_of_bits(b << 16);
    uint8_t got = dsv4i_f32_to_e4m3(f), want = ref_e4m3((double)f);
    if (got != want) fail_msg("bf16 0x%04x (%a): got 0x%02x want 0x%02x", b, (double)f, got, want);
  }
}

static void e4m3_encode_fp32_ties_and_random(void **state) {
  (void)state;
  /* every midpoint between neighbouring codes (and the 448/480 midpoint that
   * saturation must absorb), and the fp32 values up to 3 ulps around it */
  double mids[130];
  size_t nm = 0;
  for (size_t i = 0; i + 1 < 127; i++) mids[nm++] = (e4m3_vals[i].v + e4m3_vals[i + 1].v) / 2;
  mids[nm++] = 464.0;
  mids[nm++] = 480.0;
  for (size_t i = 0; i < nm; i++) {
    float mf = (float)mids[i];
    assert_true((double)mf == mids[i]); /* midpoints are fp32 values */
    for (int d = -3; d <= 3; d++)
      for (int s = 0; s < 2; s++) {
        float f = tu_f32_of_bits((tu_bits_of_f32(mf) + (uint32_t)d) | (s ? 0x80000000u : 0));
        uint8_t got = dsv4i_f32_to_e4m3(f), want = ref_e4m3((double)f);
        if (got != want) fail_msg("%a: got 0x%02x want 0x%02x", (double)f, got, want);
      }
  }
  /* specials */
  assert_int_equal(dsv4i_f32_to_e4m3(INFINITY), 0x7E);
  assert_int_equal(dsv4i_f32_to_e4m3(-INFINITY), 0xFE);
  assert_int_equal(dsv4i_f32_to_e4m3(3.4e38f), 0x7E);
  assert_int_equal(dsv4i_f32_to_e4m3(NAN), 0x7F);
  assert_int_equal(dsv4i_f32_to_e4m3(-NAN), 0xFF);
  assert_int_equal(dsv4i_f32_to_e4m3(tu_f32_of_bits(0x7F800001u)), 0x7F);
  assert_int_equal(dsv4i_f32_to_e4m3(-0.0f), 0x80);
  assert_int_equal(dsv4i_f32_to_e4m3(-1e-30f), 0x80);
  assert_int_equal(dsv4i_f32_to_e4m3(tu_f32_of_bits(0x80000001u)), 0x80); /* -min subnormal */
  assert_int_equal(dsv4i_f32_to_e4m3(0x1p-10f), 0x00);           /* tie 0 | 2^-9: even 0 */
  assert_int_equal(dsv4i_f32_to_e4m3(0x1.8p-9f), 0x02);          /* tie 1 | 2 -> 2 */
  assert_int_equal(dsv4i_f32_to_e4m3(0x1.ep-7f), 0x08);          /* tie 7/512 | 8/512 -> 0x08 */
  assert_int_equal(dsv4i_f32_to_e4m3(1.0625f), 0x38);            /* tie 1 | 1.125 -> 1 */
  assert_int_equal(dsv4i_f32_to_e4m3(1.1875f), 0x3A);            /* tie 1.125 | 1.25 -> 1.25 */
  assert_int_equal(dsv4i_f32_to_e4m3(416.0f), 0x7D);
  assert_int_equal(dsv4i_f32_to_e4m3(432.0f), 0x7E);             /* tie 416 | 448 -> 448 */
  /* random fp32 patterns, all exponents */
  for (int i = 0; i < (1 << 20); i++) {
    float f = tu_f32_of_bits(rng32());
    uint8_t got = dsv4i_f32_to_e4m3(f), want = ref_e4m3((double)f);
    if (got != want) fail_msg("0x%08x: got 0x%02x want 0x%02x", tu_bits_of_f32(f), got, want);
  }
  /* random fp32 in the E4M3 range, where all the rounding happens */
  for (int i = 0; i < (1 << 20); i++) {
    uint32_t u = (rng32() & 0x807FFFFFu) | ((uint32_t)(110 + rng32() % 28) << 23);
    float f = tu_f32_of_bits(u);
    uint8_t got = dsv4i_f32_to_e4m3(f), want = ref_e4m3((double)f);
    if (got != want) fail_msg("0x%08x: got 0x%02x want 0x%02x", u, got, want);
  }
}

/* ---- UE8M0 ------------------------------------------------------------------ */

static void e8m0_encode_decode(void **state) {
  (void)state;
  for (int b = 0; b < 255; b++) {
    float v = dsv4i_e8m0_to_f32((uint8_t)b);
    assert_true((double)v == ldexp(1.0, b - 127));
    assert_int_equal(dsv4i_e8m0_from_exp(b - 127), b);
  }
  assert_true(isnan(dsv4i_e8m0_to_f32(0xFF)));
  assert_int_equal(dsv4i_e8m0_from_exp(128), DSV4I_E8M0_NAN);
  assert_int_equal(dsv4i_e8m0_from_exp(-128), DSV4I_E8M0_NAN);
  assert_int_equal(dsv4i_e8m0_from_exp(INT32_MIN), DSV4I_E8M0_NAN);
  /* ceil(log2 t) from the bits (spec §8.1) */
  assert_int_equal(dsv4i_ceil_log2_bits(1.0f), 0);
  assert_int_equal(dsv4i_ceil_log2_bits(tu_f32_of_bits(0x3F800001u)), 1);
  assert_int_equal(dsv4i_ceil_log2_bits(0.75f), 0);
  assert_int_equal(dsv4i_ceil_log2_bits(0x1p-22f), -22);
  assert_int_equal(dsv4i_ceil_log2_bits(1e-4f / 448.0f), -22);
  assert_int_equal(dsv4i_ceil_log2_bits(0x1p-126f), -126);
  assert_int_equal(dsv4i_ceil_log2_bits(3.0e38f), 128);
  for (int i = 0; i < 100000; i++) {
    float t = fabsf(tu_f32_of_bits(rng32()));
    if (!isnormal(t)) continue;
    assert_int_equal(dsv4i_ceil_log2_bits(t), (int)ceil(log2((double)t)));
  }
}

/* ---- E2M1 --------------------------------------------------------------------- */

static void e2m1_decode_and_pack(void **state) {
  (void)state;
  static const float mag[8] = {0, 0.5f, 1, 1.5f, 2, 3, 4, 6};
  for (int c = 0; c < 16; c++) {
    float v = dsv4i_e2m1_to_f32((uint8_t)c);
    assert_true(fabsf(v) == mag[c & 7]);
    assert_int_equal(!!signbit(v), c >> 3); /* 8 is -0 */
    assert_int_equal(dsv4i_f32_to_e2m1(v), c);
    assert_int_equal(tu_bits_of_f32(dsv4i_e2m1_to_f32((uint8_t)(c | 0xF0))), tu_bits_of_f32(v)); /* high bits ignored */
  }
  for (int lo = 0; lo < 16; lo++)
    for (int hi = 0; hi < 16; hi++) {
      uint8_t p = dsv4i_e2m1_pack((uint8_t)lo, (uint8_t)hi);
      assert_int_equal(p, lo | hi << 4); /* even element in the low nibble */
      assert_int_equal(dsv4i_e2m1_lo(p), lo);
      assert_int_equal(dsv4i_e2m1_hi(p), hi);
    }
}

/* The CPU's lookup tables are the shared decoders (model/format_codes.h)
 * evaluated, bit for bit: one definition for the CPU and the kernels. */
static void decode_tables_equal_shared_decoders(void **state) {
  (void)state;
  for (unsigned b = 0; b < 256; b++) {
    float t = dsv4i_e4m3_table[b], f = dsv4i_e4m3_to_f32((uint8_t)b);
    assert_memory_equal(&t, &f, sizeof t);
  }
  for (unsigned c = 0; c < 16; c++) {
    float t = dsv4i_e2m1_table[c], f = dsv4i_e2m1_to_f32((uint8_t)c);
    assert_memory_equal(&t, &f, sizeof t);
  }
  /* NaN codes keep their sign */
  assert_true(isnan(dsv4i_e4m3_to_f32(0xFF)) && signbit(dsv4i_e4m3_to_f32(0xFF)));
  assert_true(isnan(dsv4i_e4m3_to_f32(0x7F)) && !signbit(dsv4i_e4m3_to_f32(0x7F)));
}

static void e2m1_tie_table(void **state) {
  (void)state;
  /* spec §8.1: ties go to the even code */
  static const struct { float v; float want; } ties[] = {
    {0.25f, 0.0f}, {0.75f, 1.0f}, {1.25f, 1.0f}, {1.75f, 2.0f},
    {2.5f, 2.0f},  {3.5f, 4.0f},  {5.0f, 4.0f},
  };
  for (size_t i = 0; i < sizeof ties / sizeof ties[0]; i++)
    for (int s = 0; s < 2; s++) {
      float v = s ? -ties[i].v : ties[i].v;
      float got = dsv4i_e2m1_to_f32(dsv4i_f32_to_e2m1(v));
      float want = s ? -ties[i].want : ties[i].want;
      if (tu_bits_of_f32(got) != tu_bits_of_f32(want)) fail_msg("e2m1(%g) = %g, want %g", v, got, want);
    }
  assert_int_equal(dsv4i_f32_to_e2m1(6.5f), 7);
  assert_int_equal(dsv4i_f32_to_e2m1(1e30f), 7);
  assert_int_equal(dsv4i_f32_to_e2m1(INFINITY), 7);
  assert_int_equal(dsv4i_f32_to_e2m1(-INFINITY), 15);
  assert_int_equal(dsv4i_f32_to_e2m1(-0.0f), 8);
  assert_int_equal(dsv4i_f32_to_e2m1(-0.1f), 8);
  assert_int_equal(dsv4i_f32_to_e2m1(NAN), 0);
  assert_int_equal(dsv4i_f32_to_e2m1(0.2500001f), 1);
  assert_int_equal(dsv4i_f32_to_e2m1(4.9999995f), 6);
}

static void e2m1_encode_matches_reference(void **state) {
  (void)state;
  for (uint32_t b = 0; b < 65536; b++) {
    float f = tu_f32_of_bits(b << 16);
    uint8_t got = dsv4i_f32_to_e2m1(f), want = ref_e2m1((double)f);
    if (got != want) fail_msg("bf16 0x%04x (%a): got %d want %d", b, (double)f, got, want);
  }
  for (int i = 0; i < (1 << 20); i++) {
    uint32_t u = (rng32() & 0x807FFFFFu) | ((uint32_t)(120 + rng32() % 12) << 23);
    float f = tu_f32_of_bits(u);
    uint8_t got = dsv4i_f32_to_e2m1(f), want = ref_e2m1((double)f);
    if (got != want) fail_msg("0x%08x: got %d want %d", u, got, want);
  }
}

int tu_run_suite(void) {
  const struct CMUnitTest tests[] = {
    cmocka_unit_test(bf16_roundtrip_all_patterns),
    cmocka_unit_test(bf16_rne_corner_cases),
    cmocka_unit_test(bf16_rne_matches_reference),
    cmocka_unit_test(e4m3_decode_matches_definition),
    cmocka_unit_test(e4m3_encode_decode_roundtrip),
    cmocka_unit_test(e4m3_encode_all_bf16_matches_reference),
    cmocka_unit_test(e4m3_encode_fp32_ties_and_random),
    cmocka_unit_test(e8m0_encode_decode),
    cmocka_unit_test(e2m1_decode_and_pack),
    cmocka_unit_test(e2m1_tie_table),
    cmocka_unit_test(decode_tables_equal_shared_decoders),
    cmocka_unit_test(e2m1_encode_matches_reference),
  };
  return cmocka_run_group_tests_name("formats", tests, setup, NULL);
}
