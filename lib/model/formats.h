/*
 * Number formats of the checkpoint and of the reference's activation
 * quantisers: bf16, E4M3FN (fp8), UE8M0 (power-of-two scale), E2M1 (fp4),
 * spec §3.1; the quantisers act_quant and fp4_act_quant, spec §8.1.
 *
 * Everything here is bit-exact with the reference (checked against the
 * quant.* golden vectors of the tiny-v41-* fixtures). The per-element
 * conversions are static inline and branch-free so that the CPU backend's
 * loops can inline and vectorise them. They assume the default floating-point
 * environment (round to nearest even, as the reference): most roundings are
 * done on the bits, but the E4M3 subnormal range and the quantisers' fp32
 * products and quotients use the FPU's rounding. Flush-to-zero / DAZ modes
 * (e.g. from -ffast-math start-up code) break blocks near the smallest
 * scales: fp4_act_quant_ue8m0 reaches s = 2^-126, where bf16 subnormal
 * inputs and QDQ outputs matter.
 *
 * Thread-safety: everything is thread-safe (pure functions, constant tables).
 */
#ifndef DSV4I_FORMATS_H
#define DSV4I_FORMATS_H

#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "base/base.h"

/** Bits of an fp32 value (no aliasing issues; compiles to a register move). */
static inline uint32_t dsv4i_f32_bits(float f) {
  uint32_t u;
  memcpy(&u, &f, sizeof u);
  return u;
}

/** fp32 value of a bit pattern. */
static inline float dsv4i_f32_from_bits(uint32_t u) {
  float f;
  memcpy(&f, &u, sizeof f);
  return f;
}

/* ---- bf16 (spec §3.2 "BF16") --------------------------------------------
 * bf16 values travel as their uint16_t bit patterns (the top half of an
 * fp32). */

/** bf16 -> fp32; exact for every pattern (NaNs keep sign and payload). */
static inline float dsv4i_bf16_to_f32(uint16_t b) {
  return dsv4i_f32_from_bits((uint32_t)b << 16);
}

/**
 * fp32 -> bf16, round to nearest, ties to even mantissa. Finite values that
 * round past the largest bf16 (|f| >= 0x1.ffp127 exactly: 0x7F7F8000 bits)
 * become ±inf; ±inf stay ±inf; ±0 keep their sign; subnormals round like any
 * other value. A NaN stays a NaN: sign and the top 7 payload bits are kept
 * and the quiet bit (0x0040) is set, so a signalling NaN whose payload lives
 * only in the low 16 bits cannot turn into inf.
 */
static inline uint16_t dsv4i_f32_to_bf16(float f) {
  uint32_t u = dsv4i_f32_bits(f);
  uint32_t rounded = (u + 0x7FFFu + ((u >> 16) & 1u)) >> 16;
  uint32_t quiet = (u >> 16) | 0x0040u;
  return (uint16_t)(((u & 0x7FFFFFFFu) > 0x7F800000u) ? quiet : rounded);
}

/**
 * Convert n bf16 values to fp32. src uint16_t[n] bf16 bits, dst float[n];
 * the two must not overlap.
 */
void dsv4i_bf16_to_f32_n(const uint16_t *src, size_t n, float *dst);

/**
 * Convert n fp32 values to bf16 with dsv4i_f32_to_bf16 (round to nearest
 * even). src float[n], dst uint16_t[n]; the two must not overlap.
 */
void dsv4i_f32_to_bf16_n(const float *src, size_t n, uint16_t *dst);

/* ---- E4M3FN (fp8, spec §3.1) --------------------------------------------
 * 1 sign, 4 exponent bits (bias 7), 3 mantissa bits; no infinities; 0x7F and
 * 0xFF are NaN; largest finite ±448 (0x7E/0xFE); exponent field 0 is the
 * subnormal (m/8)·2^-6; 0x80 is -0. */

#define DSV4I_E4M3_MAX 448.0f  /**< largest finite E4M3FN magnitude */
#define DSV4I_E4M3_NAN 0x7Fu   /**< canonical E4M3FN NaN code (0xFF: negative NaN) */

/**
 * fp32 value of each E4M3FN byte: index = code, 0x7F -> +NaN, 0xFF -> -NaN,
 * 0x80 -> -0.0. Constant, initialised at compile time.
 */
extern const float dsv4i_e4m3_table[256];

/** E4M3FN byte -> fp32 (exact; 0x7F/0xFF give NaN). */
static inline float dsv4i_e4m3_to_f32(uint8_t b) {
  return dsv4i_e4m3_table[b];
}

/**
 * fp32 -> E4M3FN byte, round to nearest, ties to even mantissa, saturating:
 * every finite |f| > 448 and ±inf give ±448 (0x7E / 0xFE) — never NaN.
 * A NaN gives 0x7F, or 0xFF when its sign bit is set. The sign is always
 * kept, so -0.0 and negative values that round to zero give 0x80 (the
 * reference does the same: spec fixture README, "quant.*"). fp32 subnormal
 * inputs are handled exactly (they all round to ±0).
 */
static inline uint8_t dsv4i_f32_to_e4m3(float f) {
  uint32_t u = dsv4i_f32_bits(f);
  uint32_t sign = (u >> 24) & 0x80u;
  uint32_t a = u & 0x7FFFFFFFu;
  /* Normal E4M3 range (|f| >= 2^-6): re-bias the exponent from 127 to 7 and
   * drop 20 mantissa bits with round-half-even; a carry out of the mantissa
   * moves to the next binade by itself. */
  uint32_t r = a - (120u << 23);
  uint32_t normal = (r + 0x7FFFFu + ((r >> 20) & 1u)) >> 20;
  normal = normal < 0x7Eu ? normal : 0x7Eu;
  /* Subnormal E4M3 range (|f| < 2^-6): the code is |f| / 2^-9 rounded half
   * to even. 2^-9 is the ulp of 2^14, so the fp32 sum |f| + 2^14 does that
   * rounding and keeps the code in its low mantissa bits. Code 8 is the
   * smallest normal (0x08): rounding up into it needs no special case. */
  uint32_t sub = dsv4i_f32_bits(dsv4i_f32_from_bits(a) + 0x1p14f) - 0x46800000u;
  /* Selects as masks, not ?:, so that GCC (-ftrapping-math) does not turn
   * them into branches around the fp32 add and the loops stay vectorisable.
   * A NaN takes the normal path (code <= 0x7E), then becomes 0x7F. */
  uint32_t is_normal = 0u - (uint32_t)(a >= 0x3C800000u); /* all ones or 0 */
  uint32_t code = (normal & is_normal) | (sub & ~is_normal);
  code |= DSV4I_E4M3_NAN & (0u - (uint32_t)(a > 0x7F800000u));
  return (uint8_t)(sign | code);
}

/* ---- UE8M0 (scale, spec §3.1) --------------------------------------------
 * One unsigned exponent byte b: value 2^(b - 127), b = 255 is NaN.
 * Checkpoint dtype string "F8_E8M0". */

#define DSV4I_E8M0_NAN 0xFFu  /**< the UE8M0 NaN byte */

/**
 * UE8M0 byte for the scale 2^e. e in [-127, 127] gives e + 127; any other e
 * (not representable) gives DSV4I_E8M0_NAN.
 */
static inline uint8_t dsv4i_e8m0_from_exp(int32_t e) {
  return (e >= -127 && e <= 127) ? (uint8_t)(e + 127) : (uint8_t)DSV4I_E8M0_NAN;
}

/**
 * UE8M0 byte -> fp32: 2^(b - 127) exactly (b = 0 is the fp32 subnormal
 * 2^-127); b = 255 gives NaN.
 */
static inline float dsv4i_e8m0_to_f32(uint8_t b) {
  uint32_t u = (uint32_t)b << 23;
  u = b == 0 ? 0x00400000u : u;
  u = b == 0xFF ? 0x7FC00000u : u;
  return dsv4i_f32_from_bits(u);
}

/**
 * ceil(log2(t)) for a positive normal fp32 t, from the bits, exactly as the
 * reference kernel does it (spec §8.1): exponent field − 127, plus 1 when
 * any mantissa bit is set. Callers floor t so that it is normal; for a
 * subnormal t the result is −127 + (t != 0), for +inf 128, for NaN 129.
 */
static inline int32_t dsv4i_ceil_log2_bits(float t) {
  uint32_t u = dsv4i_f32_bits(t);
  return (int32_t)((u >> 23) & 0xFFu) - 127 + ((u & 0x7FFFFFu) != 0u);
}

/* ---- E2M1 (fp4, spec §3.1) -----------------------------------------------
 * 4-bit code, bit 3 the sign; magnitudes by 3-bit code
 * {0, 0.5, 1, 1.5, 2, 3, 4, 6}; code 8 is -0. Two codes per byte: even
 * element in the low nibble, odd element in the high nibble. */

#define DSV4I_E2M1_MAX 6.0f  /**< largest E2M1 magnitude */

/** fp32 value of each E2M1 code (index = 4-bit code; 8 -> -0.0). */
extern const float dsv4i_e2m1_table[16];

/** E2M1 code (low 4 bits of `code`; higher bits ignored) -> fp32, exact. */
static inline float dsv4i_e2m1_to_f32(uint8_t code) {
  return dsv4i_e2m1_table[code & 0x0Fu];
}

/**
 * fp32 -> E2M1 code (0..15), round to nearest, ties to the even code, i.e.
 * the even mantissa (spec §8.1: 0.25->0, 0.75->1, 1.25->1, 1.75->2, 2.5->2,
 * 3.5->4, 5->4, and the same for negatives), saturating at ±6 (±inf too).
 * The sign is kept: -0.0 and small negatives give code 8 (-0), as in the
 * reference. NaN gives ±0 (code 0 or 8 by its sign bit); E2M1 has no NaN.
 */
static inline uint8_t dsv4i_f32_to_e2m1(float f) {
  uint32_t u = dsv4i_f32_bits(f);
  float a = dsv4i_f32_from_bits(u & 0x7FFFFFFFu);
  uint32_t c = (uint32_t)(a > 0.25f) + (uint32_t)(a >= 0.75f) + (uint32_t)(a > 1.25f) +
               (uint32_t)(a >= 1.75f) + (uint32_t)(a > 2.5f) + (uint32_t)(a >= 3.5f) +
               (uint32_t)(a > 5.0f);
  return (uint8_t)(((u >> 28) & 0x8u) | c);
}

/** Pack two E2M1 codes into one byte: even element low nibble, odd high. */
static inline uint8_t dsv4i_e2m1_pack(uint8_t even, uint8_t odd) {
  return (uint8_t)((even & 0x0Fu) | ((odd & 0x0Fu) << 4));
}

/** The even (low-nibble) element of a packed E2M1 byte. */
static inline uint8_t dsv4i_e2m1_lo(uint8_t packed) {
  return (uint8_t)(packed & 0x0Fu);
}

/** The odd (high-nibble) element of a packed E2M1 byte. */
static inline uint8_t dsv4i_e2m1_hi(uint8_t packed) {
  return (uint8_t)(packed >> 4);
}

/* ---- activation quantisers (spec §8.1) ----------------------------------
 * Input: n bf16 values (uint16_t bits), quantised in consecutive blocks of
 * BLOCK elements. For a [rows][K] activation with K a multiple of the block
 * (the reference's per-row K-blocks), pass the whole matrix with
 * n = rows·K, or one row at a time: blocks never straddle rows.
 *
 * Each quantiser has a codes form (codes + scale bytes, what a GEMM or the
 * KV cache stores) and a QDQ form (the reference's "inplace" mode: every
 * element replaced by bf16(q·s)). The QDQ output may be the input buffer
 * (y == x); other overlaps are not allowed.
 *
 * Non-finite input (inf or NaN anywhere in a block) is outside the
 * reference's contract; here such a block gets the NaN scale (UE8M0 0xFF,
 * E4M3 0x7F), codes that carry only each element's sign (E4M3: 0x7F/0xFF;
 * E2M1: ±0), and in QDQ form bf16 NaNs keeping each element's sign.
 *
 * Statuses: DSV4_ERR_INVALID_ARG when n is not a multiple of the block or a
 * pointer is NULL while n > 0 (nothing written). n = 0 is a no-op.
 */

#define DSV4I_ACT_QUANT_BLOCK 32  /**< act_quant block (elements per UE8M0 scale) */
#define DSV4I_FP4_UE8M0_BLOCK 32  /**< fp4_act_quant, UE8M0 scale variant */
#define DSV4I_FP4_E4M3_BLOCK 16   /**< fp4_act_quant, E4M3 scale variant */

/**
 * act_quant (fp8, block 32, UE8M0 scale), spec §8.1 / §3.3. Per block:
 * a = max(amax, fp32(1e-4)); t = a·fp32(1/448); e = ceil_log2_bits(t)
 * (dsv4i_ceil_log2_bits); s = 2^e; q = RNE_e4m3(clamp(x/s, ±448)); scale
 * byte e + 127. x/s is exact (s is a power of two), so it is computed as
 * x·2^-e.
 *
 * @param x     [in] bf16 bits, uint16_t[n] (host).
 * @param n     elements; multiple of DSV4I_ACT_QUANT_BLOCK.
 * @param q     [out] E4M3FN codes, uint8_t[n].
 * @param scale [out] UE8M0 bytes, uint8_t[n / 32]; block b covers x[32b, 32b+32).
 * @return DSV4_OK; DSV4_ERR_INVALID_ARG (nothing written).
 */
dsv4_status dsv4i_act_quant(const uint16_t *x, size_t n, uint8_t *q, uint8_t *scale);

/**
 * act_quant in QDQ form: y[i] = bf16(e4m3(q[i]) · 2^e) with q, e as in
 * dsv4i_act_quant (the product is exact, except that a block holding values
 * close to the bf16 maximum can round up to inf, as in the reference).
 *
 * @param x [in] bf16 bits, uint16_t[n].
 * @param n elements; multiple of DSV4I_ACT_QUANT_BLOCK.
 * @param y [out] bf16 bits, uint16_t[n]; may be x.
 * @return DSV4_OK; DSV4_ERR_INVALID_ARG (nothing written).
 */
dsv4_status dsv4i_act_quant_qdq(const uint16_t *x, size_t n, uint16_t *y);

/**
 * fp4_act_quant, UE8M0 scale variant (block 32; index keys and index
 * queries), spec §8.1. Per block: a = max(amax, 6·2^-126);
 * e = ceil_log2_bits(a·fp32(1/6)); s = 2^e; v = RNE_e2m1(clamp(x/s, ±6))
 * (x/s exact, computed as x·2^-e); scale byte e + 127.
 *
 * @param x      [in] bf16 bits, uint16_t[n].
 * @param n      elements; multiple of DSV4I_FP4_UE8M0_BLOCK.
 * @param packed [out] E2M1 pairs, uint8_t[n / 2]: element 2i in the low
 *               nibble of packed[i], element 2i+1 in the high nibble.
 * @param scale  [out] UE8M0 bytes, uint8_t[n / 32].
 * @return DSV4_OK; DSV4_ERR_INVALID_ARG (nothing written).
 */
dsv4_status dsv4i_fp4_act_quant_ue8m0(const uint16_t *x, size_t n, uint8_t *packed,
                                      uint8_t *scale);

/**
 * dsv4i_fp4_act_quant_ue8m0 in QDQ form: y[i] = bf16(e2m1(v[i]) · 2^e) (exact).
 *
 * @param x [in] bf16 bits, uint16_t[n].
 * @param n elements; multiple of DSV4I_FP4_UE8M0_BLOCK.
 * @param y [out] bf16 bits, uint16_t[n]; may be x.
 * @return DSV4_OK; DSV4_ERR_INVALID_ARG (nothing written).
 */
dsv4_status dsv4i_fp4_act_quant_ue8m0_qdq(const uint16_t *x, size_t n, uint16_t *y);

/**
 * fp4_act_quant, E4M3 scale variant (block 16; compressed KV), spec §8.1.
 * Per block: a = max(amax, 6·2^-9); s = e4m3(RNE_e4m3(a/6)) with a/6 an
 * fp32 division (for bf16 a this equals a·fp32(1/6) rounded, ties included;
 * the scale saturates at 448, i.e. for amax > 2688 — a case the reference
 * never meets and the golden does not pin); v = RNE_e2m1(clamp(x/s, ±6))
 * with x/s a true IEEE fp32 division; the scale byte is the E4M3 code of s.
 *
 * @param x      [in] bf16 bits, uint16_t[n].
 * @param n      elements; multiple of DSV4I_FP4_E4M3_BLOCK.
 * @param packed [out] E2M1 pairs, uint8_t[n / 2] (even element low nibble).
 * @param scale  [out] E4M3FN bytes, uint8_t[n / 16].
 * @return DSV4_OK; DSV4_ERR_INVALID_ARG (nothing written).
 */
dsv4_status dsv4i_fp4_act_quant_e4m3(const uint16_t *x, size_t n, uint8_t *packed,
                                     uint8_t *scale);

/**
 * dsv4i_fp4_act_quant_e4m3 in QDQ form: y[i] = bf16(e2m1(v[i]) · s) (exact:
 * 2 significant bits times 4).
 *
 * @param x [in] bf16 bits, uint16_t[n].
 * @param n elements; multiple of DSV4I_FP4_E4M3_BLOCK.
 * @param y [out] bf16 bits, uint16_t[n]; may be x.
 * @return DSV4_OK; DSV4_ERR_INVALID_ARG (nothing written).
 */
dsv4_status dsv4i_fp4_act_quant_e4m3_qdq(const uint16_t *x, size_t n, uint16_t *y);

#endif /* DSV4I_FORMATS_H */
