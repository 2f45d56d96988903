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
 * Thread-safety: everything is thread-safe (pure functions; the tables are
 * written once at load, before any caller can run).
 */
#ifndef DSV4I_FORMATS_H
#define DSV4I_FORMATS_H

#include <stddef.h>
#include <stdint.h>

#include "base/base.h"
#include "model/format_codes.h"

/* The scalar codecs (bf16, E4M3FN, UE8M0, E2M1, ceil-log2) are shared with
 * the kernels: model/format_codes.h. */

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

/**
 * Lookup tables of the decoders for the CPU backend's vector loops:
 * dsv4i_e4m3_table[b] == dsv4i_e4m3_to_f32(b) for every byte,
 * dsv4i_e2m1_table[c] == dsv4i_e2m1_to_f32(c) for every code, bit for bit
 * (filled from those functions when the library is loaded; read-only after).
 */
extern float dsv4i_e4m3_table[256];
extern float dsv4i_e2m1_table[16];

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
