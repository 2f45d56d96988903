/*
 * The fp8_ds_mla window record (model/kv_ds_mla.h, lib/cpu/kvcache.h):
 * 1. hand-derived bytes: a block at saturation (amax 448: scale 2^0, codes
 *    0x7E / 0xFE), an ordinary block (amax 10: scale 2^-5, 3.3 -> 0x6D),
 *    a zero block (the 1e-4 floor: scale 2^-22), E4M3 subnormal codes with
 *    ties to even, negative zero (0x80), the RoPE bf16 bytes little-endian,
 *    the zero padding of the scale bytes; at the fixture's dims (nope 64:
 *    1 scale + 7 pad) and the release's (nope 448: 7 scales + 1 pad);
 * 2. sizes: 200 B and 584 B, equal to the planner's record size;
 * 3. decode == hand values; QDQ == decode(encode) for random rows at every
 *    magnitude; the layout dispatch (put / get / qdq) for both formats;
 * 4. cross-check with act_quant: a 64-block whose 32-halves share the block's
 *    scale has the native record's codes;
 * 5. a non-finite block: NaN codes carrying the sign and the NaN scale byte.
 */
#include <math.h>
#include <string.h>

#include "test_util.h"
#include "cpu/kvcache.h"
#include "model/config.h"
#include "model/formats.h"
#include "model/kv_ds_mla.h"

static uint64_t rs = 0x243F6A8885A308D3ull;
static uint32_t rnd(void) {
  rs ^= rs >> 12;
  rs ^= rs << 25;
  rs ^= rs >> 27;
  return (uint32_t)((rs * 0x2545F4914F6CDD1Dull) >> 32);
}
static float frand(void) { return (float)rnd() / 4294967296.0f * 2.0f - 1.0f; }

/* bf16 bit patterns used below (checked in hand_bytes) */
#define BF_448 0x43E0u   /* 448.0 */
#define BF_M448 0xC3E0u  /* -448.0 */
#define BF_ONE 0x3F80u   /* 1.0 */
#define BF_MZERO 0x8000u /* -0.0 */
#define BF_10 0x4120u    /* 10.0 */
#define BF_3_3 0x4053u   /* bf16(3.3) = 3.296875 */
#define BF_P9 0x3B00u    /* 2^-9: the smallest E4M3 subnormal at scale 2^0 */
#define BF_P10 0x3A80u   /* 2^-10: half of it, a tie -> 0 */
#define BF_3P10 0x3B40u  /* 3·2^-10: 1.5 subnormal steps, a tie -> 2 (even) */
#define BF_5P10 0x3BA0u  /* 5·2^-10: 2.5 steps, a tie -> 2 (even) */

/* A row of hd values: NoPE block 0 at saturation with subnormals and signed
 * zeros, block 1 (when present) ordinary, block 2 (when present) all zero,
 * the rest random; RoPE values a counting pattern. */
static void hand_row(uint16_t *x, int32_t hd, int32_t rope) {
  const int32_t nope = hd - rope;
  memset(x, 0, (size_t)hd * sizeof *x);
  x[0] = BF_448;
  x[1] = BF_M448;
  x[2] = BF_ONE;
  x[3] = BF_MZERO;
  x[4] = BF_P9;
  x[5] = BF_P10;
  x[6] = BF_3P10;
  x[7] = BF_5P10;
  x[8] = (uint16_t)(BF_P9 | 0x8000u); /* -2^-9 -> 0x81 */
  if (nope >= 128) {
    x[64] = BF_10;
    x[65] = BF_3_3;
    x[66] = (uint16_t)(BF_3_3 | 0x8000u);
  }
  for (int32_t i = 192; i < nope; i++) x[i] = dsv4i_f32_to_bf16(frand() * 5.0f);
  for (int32_t i = 0; i < rope; i++) x[nope + i] = (uint16_t)(0x3C01u + 0x0101u * (uint32_t)i);
}

static void check_hand(int32_t hd, int32_t rope, int32_t want_bytes) {
  const int32_t nope = hd - rope, nb = (nope + 63) / 64;
  assert_int_equal(dsv4i_ds_mla_rec_bytes(hd, rope), want_bytes);
  assert_int_equal(dsv4i_kv_record_bytes_for(DSV4I_KVREC_WINDOW_DS_MLA, hd, rope, 128), want_bytes);
  uint16_t x[512];
  uint8_t rec[600];
  memset(rec, 0xA5, sizeof rec); /* the padding must be written */
  hand_row(x, hd, rope);
  dsv4i_ds_mla_encode(x, hd, rope, rec);
  const uint8_t *sc = rec + nope + 2 * rope;
  /* block 0: amax 448, 448·fp32(1/448) == 1.0 exactly, ceil_log2 0: scale 2^0 */
  assert_int_equal(sc[0], 127);
  const uint8_t want0[9] = {0x7E, 0xFE, 0x38, 0x80, 0x01, 0x00, 0x02, 0x02, 0x81};
  assert_memory_equal(rec, want0, 9);
  for (int32_t i = 9; i < 64; i++) assert_int_equal(rec[i], 0x00); /* +0 */
  if (nope >= 128) {
    /* block 1: amax 10, 10/448 = 0x1.6db6dcp-6, ceil_log2 -5: scale byte 122;
     * 3.296875 · 32 = 105.5 -> 104 = 1.625 · 2^6: exponent 13, mantissa 5 */
    assert_int_equal(sc[1], 122);
    assert_int_equal(rec[64], 0x7A); /* 10 · 32 = 320 = 1.25 · 2^8: exponent 15, mantissa 2 */
    assert_int_equal(rec[65], 0x6D);
    assert_int_equal(rec[66], 0xED);
    /* block 2: all zero, amax floored at 1e-4: 1e-4/448 = 0x1.df595ap-23, scale 2^-22 */
    assert_int_equal(sc[2], 105);
    for (int32_t i = 128; i < 192; i++) assert_int_equal(rec[i], 0x00);
  }
  /* RoPE bf16 values, little-endian, unquantised */
  for (int32_t i = 0; i < rope; i++) {
    assert_int_equal(rec[nope + 2 * i], x[nope + i] & 0xFF);
    assert_int_equal(rec[nope + 2 * i + 1], x[nope + i] >> 8);
    assert_int_equal(dsv4i_ds_mla_rope_bits(rec, hd, rope, i), x[nope + i]);
  }
  /* scale padding: zero bytes up to a multiple of 8 */
  for (int32_t j = nb; j < (nb + 7) / 8 * 8; j++) assert_int_equal(sc[j], 0);
  assert_int_equal(nope + 2 * rope + (nb + 7) / 8 * 8, want_bytes);
  assert_int_equal(rec[want_bytes], 0xA5); /* nothing past the record */

  /* decode: hand values */
  float y[512];
  dsv4i_ds_mla_decode(rec, hd, rope, y);
  assert_true(y[0] == 448.0f && y[1] == -448.0f && y[2] == 1.0f);
  assert_true(y[3] == 0.0f && signbit(y[3]));
  assert_true(y[4] == 0x1p-9f && y[5] == 0.0f && !signbit(y[5]) && y[6] == 0x1p-8f &&
              y[7] == 0x1p-8f && y[8] == -0x1p-9f);
  if (nope >= 128) assert_true(y[64] == 10.0f && y[65] == 3.25f && y[66] == -3.25f);
  for (int32_t i = 0; i < rope; i++) assert_true(y[nope + i] == dsv4i_bf16_to_f32(x[nope + i]));
}

static void hand_bytes(void **state) {
  (void)state;
  /* the bf16 constants above */
  assert_int_equal(dsv4i_f32_to_bf16(448.0f), BF_448);
  assert_int_equal(dsv4i_f32_to_bf16(10.0f), BF_10);
  assert_int_equal(dsv4i_f32_to_bf16(3.3f), BF_3_3);
  assert_int_equal(dsv4i_f32_to_bf16(0x1p-9f), BF_P9);
  assert_int_equal(dsv4i_f32_to_bf16(0x1p-10f), BF_P10);
  assert_int_equal(dsv4i_f32_to_bf16(0x1.8p-9f), BF_3P10);
  assert_int_equal(dsv4i_f32_to_bf16(0x1.4p-8f), BF_5P10);
  check_hand(128, 64, 200); /* the fixtures: nope 64, 1 scale + 7 pad */
  check_hand(512, 64, 584); /* the release: nope 448, 7 scales + 1 pad */
  check_hand(256, 64, 328); /* nope 192: 3 scales + 5 pad */
}

/* decode(encode) == qdq bit for bit, and the native act_quant codes where a
 * 64-block's halves share its scale */
static void qdq_and_native(void **state) {
  (void)state;
  const float mags[] = {1e-6f, 3e-4f, 0.04f, 1.0f, 37.0f, 3000.0f};
  const int32_t hd = 512, rope = 64, nope = 448;
  uint16_t x[512], q[512], qn[512];
  uint8_t rec[584], nat[528];
  float y[512];
  dsv4i_kv_layout lay;
  memset(&lay, 0, sizeof lay);
  lay.head_dim = hd;
  lay.rope_dim = rope;
  for (int m = 0; m < 6; m++)
    for (int rep = 0; rep < 20; rep++) {
      for (int32_t i = 0; i < hd; i++) x[i] = dsv4i_f32_to_bf16(frand() * mags[m]);
      /* halves share the block amax: put the same largest |value| in both */
      for (int32_t b = 0; b < nope / 64; b++) {
        x[64 * b + 5] = dsv4i_f32_to_bf16(1.5f * mags[m]);
        x[64 * b + 37] = dsv4i_f32_to_bf16(-1.5f * mags[m]);
      }
      dsv4i_ds_mla_encode(x, hd, rope, rec);
      dsv4i_ds_mla_decode(rec, hd, rope, y);
      dsv4i_ds_mla_qdq(x, 1, hd, rope, q);
      for (int32_t i = 0; i < hd; i++) assert_int_equal(q[i], dsv4i_f32_to_bf16(y[i]));
      for (int32_t i = nope; i < hd; i++) assert_int_equal(q[i], x[i]);
      dsv4i_kv_window_encode(x, hd, nat);
      assert_memory_equal(rec, nat, (size_t)nope);
      for (int32_t b = 0; b < nope / 64; b++) {
        assert_int_equal(rec[nope + 2 * rope + b], nat[hd + 2 * b]);
        assert_int_equal(rec[nope + 2 * rope + b], nat[hd + 2 * b + 1]);
      }
      /* the layout dispatch, both formats */
      lay.window_format = DSV4I_KV_FP8_DS_MLA;
      uint8_t r2[584];
      float y2[512];
      dsv4i_kv_window_put(&lay, x, r2);
      assert_memory_equal(r2, rec, sizeof rec);
      dsv4i_kv_window_get(&lay, r2, y2);
      assert_memory_equal(y2, y, sizeof y);
      dsv4i_kv_window_qdq(&lay, x, 1, qn);
      assert_memory_equal(qn, q, sizeof q);
      lay.window_format = DSV4I_KV_NATIVE;
      dsv4i_kv_window_put(&lay, x, r2);
      assert_memory_equal(r2, nat, sizeof nat);
      dsv4i_kv_window_qdq(&lay, x, 1, qn);
      assert_int_equal(dsv4i_act_quant_qdq(x, (size_t)hd, q), DSV4_OK);
      assert_memory_equal(qn, q, sizeof q);
    }
  /* qdq over several rows in place */
  uint16_t rows[3 * 128], want[3 * 128];
  for (int i = 0; i < 3 * 128; i++) rows[i] = dsv4i_f32_to_bf16(frand() * 7.0f);
  for (int r = 0; r < 3; r++) dsv4i_ds_mla_qdq(rows + r * 128, 1, 128, 64, want + r * 128);
  dsv4i_ds_mla_qdq(rows, 3, 128, 64, rows);
  assert_memory_equal(rows, want, sizeof rows);
}

static void nonfinite_block(void **state) {
  (void)state;
  uint16_t x[128];
  uint8_t rec[200];
  for (int i = 0; i < 128; i++) x[i] = dsv4i_f32_to_bf16(0.25f * (float)(i % 5) - 0.5f);
  x[10] = 0x7F80u; /* +inf in the NoPE block */
  x[100] = 0xFF80u; /* -inf among the RoPE values: stored as is */
  dsv4i_ds_mla_encode(x, 128, 64, rec);
  assert_int_equal(rec[64 + 128], DSV4I_E8M0_NAN);
  for (int i = 0; i < 64; i++) assert_int_equal(rec[i], ((x[i] >> 8) & 0x80) | 0x7F);
  float y[128];
  dsv4i_ds_mla_decode(rec, 128, 64, y);
  for (int i = 0; i < 64; i++) assert_true(isnan(y[i]));
  assert_true(isinf(y[100]) && y[100] < 0);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(hand_bytes),
      cmocka_unit_test(qdq_and_native),
      cmocka_unit_test(nonfinite_block),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
