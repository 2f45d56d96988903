/*
 * Scalar codecs of the checkpoint's number formats (model-spec §3.1): bf16,
 * E4M3FN (fp8), UE8M0 (power-of-two scale), E2M1 (fp4), and the ceil-log2
 * of the quantisers (spec §8.1). The one definition for host and device:
 * the CPU backend (through model/formats.h) and the kernels (nvcc -I lib)
 * include this header, so both decode every byte the same way.
 *
 * Rules that keep it compilable by both: no includes but <stdint.h> (and
 * <string.h> on the host), no project headers, no globals, no tables;
 * every function is DSV4I_HD (static inline on the host, __device__
 * __forceinline__ under nvcc). Branch-free selects, so host loops vectorise.
 * Rounding is done on the bits, except the E4M3 subnormal range of
 * dsv4i_f32_to_e4m3, which uses one fp32 add in the default rounding mode
 * (round to nearest even) with denormals kept: the host must not run with
 * FTZ/DAZ, nvcc must keep -ftz=false (kernels/meson.build pins it).
 *
 * Thread-safety: pure functions.
 */
#ifndef DSV4I_FORMAT_CODES_H
#define DSV4I_FORMAT_CODES_H

#include <stdint.h>

#ifdef __CUDACC__
#define DSV4I_HD __device__ __forceinline__
#else
#include <string.h>
#define DSV4I_HD static inline
#endif

/** Bits of an fp32 value (a register move). */
DSV4I_HD uint32_t dsv4i_f32_bits(float f) {
#ifdef __CUDACC__
  return __float_as_uint(f);
#else
  uint32_t u;
  memcpy(&u, &f, sizeof u);
  return u;
#endif
}

/** fp32 value of a bit pattern. */
DSV4I_HD float dsv4i_f32_from_bits(uint32_t u) {
#ifdef __CUDACC__
  return __uint_as_float(u);
#else
  float f;
  memcpy(&f, &u, sizeof f);
  return f;
#endif
}

/* ---- bf16 (spec §3.2 "BF16"): uint16_t bit patterns, the top half of an fp32 */

/** bf16 -> fp32; exact for every pattern (NaNs keep sign and payload). */
DSV4I_HD float dsv4i_bf16_to_f32(uint16_t b) { return dsv4i_f32_from_bits((uint32_t)b << 16); }

/**
 * fp32 -> bf16, round to nearest, ties to even mantissa. Finite values that
 * round past the largest bf16 (|f| >= 0x1.ffp127 exactly: 0x7F7F8000 bits)
 * become ±inf; ±inf stay ±inf; ±0 keep their sign; subnormals round like any
 * other value. A NaN stays a NaN: sign and the top 7 payload bits are kept
 * and the quiet bit (0x0040) is set, so a signalling NaN whose payload lives
 * only in the low 16 bits cannot turn into inf.
 */
DSV4I_HD uint16_t dsv4i_f32_to_bf16(float f) {
  const uint32_t u = dsv4i_f32_bits(f);
  const uint32_t rounded = (u + 0x7FFFu + ((u >> 16) & 1u)) >> 16;
  const uint32_t quiet = (u >> 16) | 0x0040u;
  return (uint16_t)(((u & 0x7FFFFFFFu) > 0x7F800000u) ? quiet : rounded);
}

/* ---- E4M3FN (fp8, spec §3.1) --------------------------------------------
 * 1 sign, 4 exponent bits (bias 7), 3 mantissa bits; no infinities; 0x7F and
 * 0xFF are NaN; largest finite ±448 (0x7E/0xFE); exponent field 0 is the
 * subnormal (m/8)·2^-6; 0x80 is -0. */

#define DSV4I_E4M3_MAX 448.0f /**< largest finite E4M3FN magnitude */
#define DSV4I_E4M3_NAN 0x7Fu  /**< canonical E4M3FN NaN code (0xFF: negative NaN) */

/**
 * E4M3FN byte -> fp32, exact; 0x7F -> +NaN, 0xFF -> -NaN (quiet, sign
 * kept), 0x80 -> -0.0. The 7 exponent+mantissa bits go to fp32 bits
 * 26..20, giving the fp32 value 2^(e-127)·(1 + m/8) for e > 0 and the fp32
 * subnormal m·2^-129 for e == 0; one exact multiply by 2^120 moves the bias
 * from 127 to 7 in both cases.
 */
DSV4I_HD float dsv4i_e4m3_to_f32(uint8_t b) {
  const uint32_t sign = ((uint32_t)b & 0x80u) << 24, mag = (uint32_t)b & 0x7Fu;
  const float v = dsv4i_f32_from_bits(sign | (mag << 20)) * 0x1p120f;
  return mag == 0x7Fu ? dsv4i_f32_from_bits(sign | 0x7FC00000u) : v;
}

/**
 * fp32 -> E4M3FN byte, round to nearest, ties to even mantissa, saturating:
 * every finite |f| > 448 and ±inf give ±448 (0x7E / 0xFE) — never NaN.
 * A NaN gives 0x7F, or 0xFF when its sign bit is set. The sign is always
 * kept, so -0.0 and negative values that round to zero give 0x80 (the
 * reference does the same: spec fixture README, "quant.*"). fp32 subnormal
 * inputs are handled exactly (they all round to ±0).
 */
DSV4I_HD uint8_t dsv4i_f32_to_e4m3(float f) {
  const uint32_t u = dsv4i_f32_bits(f);
  const uint32_t sign = (u >> 24) & 0x80u;
  const uint32_t a = u & 0x7FFFFFFFu;
  /* Normal E4M3 range (|f| >= 2^-6): re-bias the exponent from 127 to 7 and
   * drop 20 mantissa bits with round-half-even; a carry out of the mantissa
   * moves to the next binade by itself. */
  const uint32_t r = a - (120u << 23);
  uint32_t normal = (r + 0x7FFFFu + ((r >> 20) & 1u)) >> 20;
  normal = normal < 0x7Eu ? normal : 0x7Eu;
  /* Subnormal E4M3 range (|f| < 2^-6): the code is |f| / 2^-9 rounded half
   * to even. 2^-9 is the ulp of 2^14, so the fp32 sum |f| + 2^14 does that
   * rounding and keeps the code in its low mantissa bits. Code 8 is the
   * smallest normal (0x08): rounding up into it needs no special case. */
  const uint32_t sub = dsv4i_f32_bits(dsv4i_f32_from_bits(a) + 0x1p14f) - 0x46800000u;
  /* Selects as masks, not ?:, so that GCC (-ftrapping-math) does not turn
   * them into branches around the fp32 add and the loops stay vectorisable.
   * A NaN takes the normal path (code <= 0x7E), then becomes 0x7F. */
  const uint32_t is_normal = 0u - (uint32_t)(a >= 0x3C800000u); /* all ones or 0 */
  uint32_t code = (normal & is_normal) | (sub & ~is_normal);
  code |= DSV4I_E4M3_NAN & (0u - (uint32_t)(a > 0x7F800000u));
  return (uint8_t)(sign | code);
}

/* ---- UE8M0 (scale, spec §3.1): one exponent byte b, value 2^(b - 127),
 * b = 255 is NaN. Checkpoint dtype string "F8_E8M0". */

#define DSV4I_E8M0_NAN 0xFFu /**< the UE8M0 NaN byte */

/** UE8M0 byte for the scale 2^e; e outside [-127, 127] gives DSV4I_E8M0_NAN. */
DSV4I_HD uint8_t dsv4i_e8m0_from_exp(int32_t e) {
  return (e >= -127 && e <= 127) ? (uint8_t)(e + 127) : (uint8_t)DSV4I_E8M0_NAN;
}

/** UE8M0 byte -> fp32: 2^(b - 127) exactly (b = 0 is the fp32 subnormal
 * 2^-127); b = 255 gives NaN. */
DSV4I_HD float dsv4i_e8m0_to_f32(uint8_t b) {
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
DSV4I_HD int32_t dsv4i_ceil_log2_bits(float t) {
  const uint32_t u = dsv4i_f32_bits(t);
  return (int32_t)((u >> 23) & 0xFFu) - 127 + ((u & 0x7FFFFFu) != 0u);
}

/* ---- act_quant (spec §8.1): fp8 codes, UE8M0 scale per block of 32 ------ */

/** |x| of a bf16 value as ordered bits (sign dropped); >= 0x7F80: inf or NaN.
 * A block's amax is the largest of these. */
DSV4I_HD uint32_t dsv4i_bf16_abs_bits(uint16_t x) { return (uint32_t)x & 0x7FFFu; }

/** Marks a non-finite act_quant block (dsv4i_act_quant_exp). */
#define DSV4I_ACT_QUANT_NONFINITE (-2147483647 - 1)

/**
 * act_quant scale exponent of a block from its amax bits (the largest
 * dsv4i_bf16_abs_bits of the block): a = max(amax, fp32(1e-4)),
 * e = ceil_log2_bits(a · fp32(1/448)), s = 2^e; e in [-22, 120] for finite
 * bf16 input. DSV4I_ACT_QUANT_NONFINITE when the block holds an inf or NaN.
 */
DSV4I_HD int32_t dsv4i_act_quant_exp(uint32_t amax_bits) {
  if (amax_bits >= 0x7F80u) return DSV4I_ACT_QUANT_NONFINITE;
  float a = dsv4i_bf16_to_f32((uint16_t)amax_bits);
  a = a > 1e-4f ? a : 1e-4f;
  return dsv4i_ceil_log2_bits(a * (1.0f / 448.0f));
}

/** E4M3 code of x in a block of exponent e (dsv4i_act_quant_exp):
 * RNE_e4m3(x · 2^-e), exact division by the power of two; a non-finite
 * block gives NaN codes carrying x's sign. */
DSV4I_HD uint8_t dsv4i_act_quant_code(uint16_t x, int32_t e) {
  if (e == DSV4I_ACT_QUANT_NONFINITE) return (uint8_t)(((x >> 8) & 0x80u) | DSV4I_E4M3_NAN);
  return dsv4i_f32_to_e4m3(dsv4i_bf16_to_f32(x) * dsv4i_f32_from_bits((uint32_t)(127 - e) << 23));
}

/** UE8M0 byte of an act_quant block exponent (NaN byte for a non-finite block). */
DSV4I_HD uint8_t dsv4i_act_quant_scale(int32_t e) {
  return e == DSV4I_ACT_QUANT_NONFINITE ? (uint8_t)DSV4I_E8M0_NAN : dsv4i_e8m0_from_exp(e);
}

/* ---- E2M1 (fp4, spec §3.1) -----------------------------------------------
 * 4-bit code, bit 3 the sign; magnitudes by 3-bit code
 * {0, 0.5, 1, 1.5, 2, 3, 4, 6}; code 8 is -0. Two codes per byte: even
 * element in the low nibble, odd element in the high nibble. */

#define DSV4I_E2M1_MAX 6.0f /**< largest E2M1 magnitude */

/**
 * E2M1 code (low 4 bits of `code`; higher bits ignored) -> fp32, exact.
 * The 3 magnitude bits (exponent e, mantissa m) go to fp32 bits 23..22 and
 * 22: codes 2..7 are 2^(e-1)·(1 + m/2), the fp32 value of bits
 * ((e + 126) << 23) | (m << 22); code 1 (0.5) is the same pattern with
 * e = 0 read as a normal, and code 0 is ±0.
 */
DSV4I_HD float dsv4i_e2m1_to_f32(uint8_t code) {
  const uint32_t c = (uint32_t)code & 0x0Fu, mag = c & 7u;
  const uint32_t normal = (((mag >> 1) + 126u) << 23) | ((mag & 1u) << 22);
  const uint32_t bits = mag == 0u ? 0u : (mag == 1u ? 0x3F000000u : normal);
  return dsv4i_f32_from_bits(((c & 8u) << 28) | bits);
}

/**
 * fp32 -> E2M1 code (0..15), round to nearest, ties to the even code, i.e.
 * the even mantissa (spec §8.1: 0.25->0, 0.75->1, 1.25->1, 1.75->2, 2.5->2,
 * 3.5->4, 5->4, and the same for negatives), saturating at ±6 (±inf too).
 * The sign is kept: -0.0 and small negatives give code 8 (-0), as in the
 * reference. NaN gives ±0 (code 0 or 8 by its sign bit); E2M1 has no NaN.
 */
DSV4I_HD uint8_t dsv4i_f32_to_e2m1(float f) {
  const uint32_t u = dsv4i_f32_bits(f);
  const float a = dsv4i_f32_from_bits(u & 0x7FFFFFFFu);
  const uint32_t c = (uint32_t)(a > 0.25f) + (uint32_t)(a >= 0.75f) + (uint32_t)(a > 1.25f) +
                     (uint32_t)(a >= 1.75f) + (uint32_t)(a > 2.5f) + (uint32_t)(a >= 3.5f) +
                     (uint32_t)(a > 5.0f);
  return (uint8_t)(((u >> 28) & 0x8u) | c);
}

/** Pack two E2M1 codes into one byte: even element low nibble, odd high. */
DSV4I_HD uint8_t dsv4i_e2m1_pack(uint8_t even, uint8_t odd) {
  return (uint8_t)((even & 0x0Fu) | ((odd & 0x0Fu) << 4));
}

/** The even (low-nibble) element of a packed E2M1 byte. */
DSV4I_HD uint8_t dsv4i_e2m1_lo(uint8_t packed) { return (uint8_t)(packed & 0x0Fu); }

/** The odd (high-nibble) element of a packed E2M1 byte. */
DSV4I_HD uint8_t dsv4i_e2m1_hi(uint8_t packed) { return (uint8_t)(packed >> 4); }

#endif /* DSV4I_FORMAT_CODES_H */
