/*
 * The native KV record codecs (kvcache.h).
 *
 * Record codecs: encoding goes through the reference quantisers of
 * lib/model/formats.h (the fp8_ds_mla window record: lib/model/kv_ds_mla.h); decoding reproduces their QDQ values bit for bit (the
 * products are exact in fp32 and are rounded to bf16 like the QDQ forms, so
 * even the inf corner agrees).
 */
#include "cpu/kvcache.h"
#include "model/formats.h"
#include "model/kv_ds_mla.h"

/* ---- record codecs --------------------------------------------------- */

void dsv4i_kv_window_encode(const uint16_t *x, int32_t hd, uint8_t *rec) {
  (void)dsv4i_act_quant(x, (size_t)hd, rec, rec + hd);
}

void dsv4i_kv_window_decode(const uint8_t *rec, int32_t hd, float *y) {
  const uint8_t *sc = rec + hd;
  for (int32_t b = 0; b < hd / 32; b++) {
    const float s = dsv4i_e8m0_to_f32(sc[b]);
    for (int32_t i = b * 32; i < b * 32 + 32; i++)
      y[i] = dsv4i_bf16_to_f32(dsv4i_f32_to_bf16(dsv4i_e4m3_to_f32(rec[i]) * s));
  }
}

void dsv4i_kv_window_put(const dsv4i_kv_layout *lay, const uint16_t *x, uint8_t *rec) {
  if (lay->window_format == DSV4I_KV_FP8_DS_MLA)
    dsv4i_ds_mla_encode(x, lay->head_dim, lay->rope_dim, rec);
  else
    dsv4i_kv_window_encode(x, lay->head_dim, rec);
}

void dsv4i_kv_window_get(const dsv4i_kv_layout *lay, const uint8_t *rec, float *y) {
  if (lay->window_format == DSV4I_KV_FP8_DS_MLA)
    dsv4i_ds_mla_decode(rec, lay->head_dim, lay->rope_dim, y);
  else
    dsv4i_kv_window_decode(rec, lay->head_dim, y);
}

void dsv4i_kv_window_qdq(const dsv4i_kv_layout *lay, const uint16_t *x, int64_t rows, uint16_t *y) {
  if (lay->window_format == DSV4I_KV_FP8_DS_MLA)
    dsv4i_ds_mla_qdq(x, rows, lay->head_dim, lay->rope_dim, y);
  else
    (void)dsv4i_act_quant_qdq(x, (size_t)rows * (size_t)lay->head_dim, y); /* hd % 32 == 0 */
}

void dsv4i_kv_comp_encode(const uint16_t *x, int32_t hd, uint8_t *rec) {
  (void)dsv4i_fp4_act_quant_e4m3(x, (size_t)hd, rec, rec + hd / 2);
}

/* One scale block of packed e2m1 pairs: y[2i], y[2i+1] from the low and high
 * nibble of q[i], i < n_bytes, times s, rounded to bf16 like the QDQ form. */
static inline void fp4_block_decode(const uint8_t *q, int32_t n_bytes, float s, float *y) {
  for (int32_t i = 0; i < n_bytes; i++) {
    y[2 * i] = dsv4i_bf16_to_f32(dsv4i_f32_to_bf16(dsv4i_e2m1_to_f32(dsv4i_e2m1_lo(q[i])) * s));
    y[2 * i + 1] = dsv4i_bf16_to_f32(dsv4i_f32_to_bf16(dsv4i_e2m1_to_f32(dsv4i_e2m1_hi(q[i])) * s));
  }
}

void dsv4i_kv_comp_decode(const uint8_t *rec, int32_t hd, float *y) {
  const uint8_t *sc = rec + hd / 2; /* e4m3 scales, blocks of 16 values */
  for (int32_t b = 0; b < hd / 16; b++)
    fp4_block_decode(rec + b * 8, 8, dsv4i_e4m3_to_f32(sc[b]), y + b * 16);
}

void dsv4i_kv_idxk_encode(const uint16_t *x, int32_t ihd, uint8_t *rec) {
  (void)dsv4i_fp4_act_quant_ue8m0(x, (size_t)ihd, rec, rec + ihd / 2);
}

void dsv4i_kv_idxk_decode(const uint8_t *rec, int32_t ihd, float *y) {
  const uint8_t *sc = rec + ihd / 2; /* ue8m0 scales, blocks of 32 values */
  for (int32_t b = 0; b < ihd / 32; b++)
    fp4_block_decode(rec + b * 16, 16, dsv4i_e8m0_to_f32(sc[b]), y + b * 32);
}
