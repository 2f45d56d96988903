/*
 * The reference's activation quantisers, spec §8.1 (bit-exact ports of the
 * reference kernels' act_quant and fp4_act_quant), on bf16 input.
 *
 * Every quantiser works block by block: one pass for the block's amax (on
 * the bf16 bits: |x| ordered as integers, NaN above inf), the scale, then
 * one pass of per-element codes. The codes and QDQ forms share the block
 * kernels below.
 *
 * Exactness notes (all confirmed by the golden vectors):
 * - With a power-of-two scale s = 2^e, x/s == x·2^-e bit for bit (both are
 *   the correctly rounded value of the same real number, and 2^-e is an
 *   exact normal fp32 for every e reachable here), so the UE8M0 variants
 *   multiply.
 * - clamp(v, ±M) followed by round-to-nearest-even equals the saturating
 *   encoders of formats.h, so no separate clamp is done.
 * - In QDQ form q·s is exact in fp32 (a few significant bits times a power of
 *   two or an E4M3 value) and exact in bf16, except where act_quant of a
 *   block near the bf16 maximum overflows to inf — the reference's fp32
 *   product does the same.
 */
#include "model/formats.h"

/* Largest |x| of a block as bf16 bits (sign dropped); >= 0x7F80 means the
 * block holds an inf or a NaN. */
static inline uint32_t block_amax_bits(const uint16_t *x, size_t bs) {
  uint32_t m = 0;
  for (size_t j = 0; j < bs; j++) {
    uint32_t a = x[j] & 0x7FFFu;
    m = a > m ? a : m;
  }
  return m;
}

static inline float pow2f(int32_t e) { /* e in [-126, 127] */
  return dsv4i_f32_from_bits((uint32_t)(e + 127) << 23);
}

static dsv4_status check_args(const char *fn, size_t n, size_t block, const void *x,
                              const void *out1, const void *out2) {
  if (n % block != 0)
    return dsv4i_error(DSV4_ERR_INVALID_ARG, "%s: n = %zu is not a multiple of the block %zu",
                       fn, n, block);
  if (n > 0 && (!x || !out1 || !out2))
    return dsv4i_error(DSV4_ERR_INVALID_ARG, "%s: NULL buffer", fn);
  return DSV4_OK;
}

/* ---- act_quant: fp8 E4M3 codes, UE8M0 scale per 32 ----------------------- */

#define ACT_BS DSV4I_ACT_QUANT_BLOCK

/* Codes of one block into q[32]; returns the scale exponent e (s = 2^e), or
 * INT32_MIN for a non-finite block (codes then carry only the signs). */
static inline int32_t act_block(const uint16_t *x, uint8_t *q) {
  const int32_t e = dsv4i_act_quant_exp(block_amax_bits(x, ACT_BS));
  for (size_t j = 0; j < ACT_BS; j++) q[j] = dsv4i_act_quant_code(x[j], e);
  return e == DSV4I_ACT_QUANT_NONFINITE ? INT32_MIN : e;
}

dsv4_status dsv4i_act_quant(const uint16_t *x, size_t n, uint8_t *q, uint8_t *scale) {
  dsv4_status st = check_args("act_quant", n, ACT_BS, x, q, scale);
  if (st != DSV4_OK) return st;
  for (size_t b = 0; b < n / ACT_BS; b++) {
    int32_t e = act_block(x + b * ACT_BS, q + b * ACT_BS);
    scale[b] = e == INT32_MIN ? (uint8_t)DSV4I_E8M0_NAN : dsv4i_e8m0_from_exp(e);
  }
  return DSV4_OK;
}

dsv4_status dsv4i_act_quant_qdq(const uint16_t *x, size_t n, uint16_t *y) {
  dsv4_status st = check_args("act_quant_qdq", n, ACT_BS, x, y, y);
  if (st != DSV4_OK) return st;
  uint8_t q[ACT_BS];
  for (size_t b = 0; b < n / ACT_BS; b++) {
    const uint16_t *xb = x + b * ACT_BS;
    uint16_t *yb = y + b * ACT_BS;
    int32_t e = act_block(xb, q);
    if (e == INT32_MIN) {
      for (size_t j = 0; j < ACT_BS; j++) yb[j] = (uint16_t)((q[j] & 0x80u) << 8 | 0x7FC0u);
      continue;
    }
    float s = pow2f(e);
    for (size_t j = 0; j < ACT_BS; j++) yb[j] = dsv4i_f32_to_bf16(dsv4i_e4m3_to_f32(q[j]) * s);
  }
  return DSV4_OK;
}

/* ---- fp4_act_quant, UE8M0 scale per 32 ----------------------------------- */

#define F8S_BS DSV4I_FP4_UE8M0_BLOCK

/* E2M1 codes (one per byte) of one block into v[32]; returns e or INT32_MIN. */
static inline int32_t fp4_ue8m0_block(const uint16_t *x, uint8_t *v) {
  uint32_t m = block_amax_bits(x, F8S_BS);
  if (m >= 0x7F80u) {
    for (size_t j = 0; j < F8S_BS; j++) v[j] = (uint8_t)((x[j] >> 12) & 0x8u);
    return INT32_MIN;
  }
  float a = dsv4i_bf16_to_f32((uint16_t)m);
  const float floor_a = 0x1.8p-124f; /* 6·2^-126 */
  a = a > floor_a ? a : floor_a;
  /* e in [-126, 126] for finite bf16 input */
  int32_t e = dsv4i_ceil_log2_bits(a * (1.0f / 6.0f));
  float inv = pow2f(-e);
  for (size_t j = 0; j < F8S_BS; j++) v[j] = dsv4i_f32_to_e2m1(dsv4i_bf16_to_f32(x[j]) * inv);
  return e;
}

dsv4_status dsv4i_fp4_act_quant_ue8m0(const uint16_t *x, size_t n, uint8_t *packed,
                                      uint8_t *scale) {
  dsv4_status st = check_args("fp4_act_quant_ue8m0", n, F8S_BS, x, packed, scale);
  if (st != DSV4_OK) return st;
  uint8_t v[F8S_BS];
  for (size_t b = 0; b < n / F8S_BS; b++) {
    int32_t e = fp4_ue8m0_block(x + b * F8S_BS, v);
    scale[b] = e == INT32_MIN ? (uint8_t)DSV4I_E8M0_NAN : dsv4i_e8m0_from_exp(e);
    uint8_t *pb = packed + b * (F8S_BS / 2);
    for (size_t j = 0; j < F8S_BS / 2; j++) pb[j] = dsv4i_e2m1_pack(v[2 * j], v[2 * j + 1]);
  }
  return DSV4_OK;
}

dsv4_status dsv4i_fp4_act_quant_ue8m0_qdq(const uint16_t *x, size_t n, uint16_t *y) {
  dsv4_status st = check_args("fp4_act_quant_ue8m0_qdq", n, F8S_BS, x, y, y);
  if (st != DSV4_OK) return st;
  uint8_t v[F8S_BS];
  for (size_t b = 0; b < n / F8S_BS; b++) {
    const uint16_t *xb = x + b * F8S_BS;
    uint16_t *yb = y + b * F8S_BS;
    int32_t e = fp4_ue8m0_block(xb, v);
    if (e == INT32_MIN) {
      for (size_t j = 0; j < F8S_BS; j++) yb[j] = (uint16_t)((v[j] & 0x8u) << 12 | 0x7FC0u);
      continue;
    }
    float s = pow2f(e);
    for (size_t j = 0; j < F8S_BS; j++) yb[j] = dsv4i_f32_to_bf16(dsv4i_e2m1_to_f32(v[j]) * s);
  }
  return DSV4_OK;
}

/* ---- fp4_act_quant, E4M3 scale per 16 ------------------------------------ */

#define F4S_BS DSV4I_FP4_E4M3_BLOCK

/* E2M1 codes of one block into v[16]; returns the E4M3 scale byte
 * (DSV4I_E4M3_NAN for a non-finite block). */
static inline uint8_t fp4_e4m3_block(const uint16_t *x, uint8_t *v) {
  uint32_t m = block_amax_bits(x, F4S_BS);
  if (m >= 0x7F80u) {
    for (size_t j = 0; j < F4S_BS; j++) v[j] = (uint8_t)((x[j] >> 12) & 0x8u);
    return (uint8_t)DSV4I_E4M3_NAN;
  }
  float a = dsv4i_bf16_to_f32((uint16_t)m);
  const float floor_a = 0x1.8p-7f; /* 6·2^-9 */
  a = a > floor_a ? a : floor_a;
  uint8_t sb = dsv4i_f32_to_e4m3(a / 6.0f); /* in [0x01, 0x7E]: s > 0 */
  float s = dsv4i_e4m3_to_f32(sb);
  for (size_t j = 0; j < F4S_BS; j++) v[j] = dsv4i_f32_to_e2m1(dsv4i_bf16_to_f32(x[j]) / s);
  return sb;
}

dsv4_status dsv4i_fp4_act_quant_e4m3(const uint16_t *x, size_t n, uint8_t *packed,
                                     uint8_t *scale) {
  dsv4_status st = check_args("fp4_act_quant_e4m3", n, F4S_BS, x, packed, scale);
  if (st != DSV4_OK) return st;
  uint8_t v[F4S_BS];
  for (size_t b = 0; b < n / F4S_BS; b++) {
    scale[b] = fp4_e4m3_block(x + b * F4S_BS, v);
    uint8_t *pb = packed + b * (F4S_BS / 2);
    for (size_t j = 0; j < F4S_BS / 2; j++) pb[j] = dsv4i_e2m1_pack(v[2 * j], v[2 * j + 1]);
  }
  return DSV4_OK;
}

dsv4_status dsv4i_fp4_act_quant_e4m3_qdq(const uint16_t *x, size_t n, uint16_t *y) {
  dsv4_status st = check_args("fp4_act_quant_e4m3_qdq", n, F4S_BS, x, y, y);
  if (st != DSV4_OK) return st;
  uint8_t v[F4S_BS];
  for (size_t b = 0; b < n / F4S_BS; b++) {
    const uint16_t *xb = x + b * F4S_BS;
    uint16_t *yb = y + b * F4S_BS;
    uint8_t sb = fp4_e4m3_block(xb, v);
    if (sb == DSV4I_E4M3_NAN) {
      for (size_t j = 0; j < F4S_BS; j++) yb[j] = (uint16_t)((v[j] & 0x8u) << 12 | 0x7FC0u);
      continue;
    }
    float s = dsv4i_e4m3_to_f32(sb);
    for (size_t j = 0; j < F4S_BS; j++) yb[j] = dsv4i_f32_to_bf16(dsv4i_e2m1_to_f32(v[j]) * s);
  }
  return DSV4_OK;
}
