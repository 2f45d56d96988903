/*
 * The fp8_ds_mla window record (DeepSeek-V4's layout; the engine option
 * DSV4_KV_FORMAT_FP8_DS_MLA, docs/attention.md "KV formats"): its geometry
 * and the decode of one value, for host and device. Same rules as
 * model/format_codes.h (no project headers but that one; every function
 * DSV4I_HD), so the kernels decode every byte as the CPU does.
 *
 * With nope = head_dim − rope_dim and nb = ceil(nope / 64), a record is
 *   bytes [0, nope)              E4M3 codes of latent values 0 .. nope−1 (the NoPE part);
 *   bytes [nope, nope + 2·rope)  the rope_dim RoPE values (latent dims nope .. head_dim−1)
 *                                as bf16, little-endian: the post-RoPE bf16 values the
 *                                native record would quantise, stored unquantised;
 *   then nb UE8M0 scale bytes    scale j for NoPE values [64j, min(64j + 64, nope)),
 *                                padded with zero bytes to a multiple of 8.
 * 584 B at head_dim 512 / rope 64 (448 + 128 + 7 + 1); 200 B at 128 / 64 (64 + 128 + 1 + 7).
 *
 * Quantiser of a 64-block: act_quant's rule (dsv4i_act_quant_exp / _code /
 * _scale): UE8M0 scale from the block's amax, E4M3 round-to-nearest-even of
 * x / scale, saturating; a block holding an inf or NaN gets NaN codes and the
 * NaN scale byte. Decode: NoPE value = bf16(e4m3(code) · 2^(s − 127)) (as
 * the native record), RoPE value = the stored bf16.
 *
 * Thread-safety: pure functions.
 */
#ifndef DSV4I_KV_DS_MLA_H
#define DSV4I_KV_DS_MLA_H

#include <stdint.h>

#include "model/format_codes.h"

#define DSV4I_DS_MLA_BLOCK 64 /**< NoPE values per UE8M0 scale */

/** NoPE values (= E4M3 code bytes) of a record. */
DSV4I_HD int32_t dsv4i_ds_mla_nope(int32_t head_dim, int32_t rope_dim) {
  return head_dim - rope_dim;
}

/** UE8M0 scales of a record (ceil(nope / 64)), before the padding. */
DSV4I_HD int32_t dsv4i_ds_mla_scales(int32_t head_dim, int32_t rope_dim) {
  return (head_dim - rope_dim + DSV4I_DS_MLA_BLOCK - 1) / DSV4I_DS_MLA_BLOCK;
}

/** Byte offset of the RoPE bf16 values (= nope). */
DSV4I_HD int32_t dsv4i_ds_mla_rope_off(int32_t head_dim, int32_t rope_dim) {
  return head_dim - rope_dim;
}

/** Byte offset of the scale bytes (nope + 2·rope). */
DSV4I_HD int32_t dsv4i_ds_mla_scale_off(int32_t head_dim, int32_t rope_dim) {
  return head_dim + rope_dim;
}

/** Bytes of a record: nope + 2·rope + the scales padded to a multiple of 8. */
DSV4I_HD int32_t dsv4i_ds_mla_rec_bytes(int32_t head_dim, int32_t rope_dim) {
  return head_dim + rope_dim + (dsv4i_ds_mla_scales(head_dim, rope_dim) + 7) / 8 * 8;
}

/** NoPE value of an E4M3 code under its block's UE8M0 scale byte:
 *  bf16(e4m3(code) · 2^(scale − 127)) as fp32 (the product is exact but for
 *  the inf corner, as in the native record). */
DSV4I_HD float dsv4i_ds_mla_nope_value(uint8_t code, uint8_t scale) {
  return dsv4i_bf16_to_f32(dsv4i_f32_to_bf16(dsv4i_e4m3_to_f32(code) * dsv4i_e8m0_to_f32(scale)));
}

/** bf16 bits of RoPE value i (0 <= i < rope_dim) of a record. */
DSV4I_HD uint16_t dsv4i_ds_mla_rope_bits(const uint8_t *rec, int32_t head_dim, int32_t rope_dim,
                                         int32_t i) {
  const uint8_t *p = rec + dsv4i_ds_mla_rope_off(head_dim, rope_dim) + 2 * i;
  return (uint16_t)((uint32_t)p[0] | ((uint32_t)p[1] << 8));
}

#ifndef __CUDACC__
/* Whole records on the host (lib/model/kv_ds_mla.c). Dims: rope_dim even,
 * 0 < nope; x, y and rec must not overlap. */

/** Encode one latent row x (bf16 bits [head_dim], post-RoPE) as its record
 *  rec [dsv4i_ds_mla_rec_bytes] (padding bytes written as zero). */
void dsv4i_ds_mla_encode(const uint16_t *x, int32_t head_dim, int32_t rope_dim, uint8_t *rec);

/** Decode a record into y float [head_dim] (bf16 values; see above). */
void dsv4i_ds_mla_decode(const uint8_t *rec, int32_t head_dim, int32_t rope_dim, float *y);

/** QDQ of rows latent rows: y = the bf16 bits of decode(encode(x)), row by
 *  row (x, y bf16 bits [rows][head_dim]; y may equal x). What attention
 *  reads for a row of the current step, equal to what it reads back from the
 *  ring later. */
void dsv4i_ds_mla_qdq(const uint16_t *x, int64_t rows, int32_t head_dim, int32_t rope_dim,
                      uint16_t *y);
#endif

#endif /* DSV4I_KV_DS_MLA_H */
