/*
 * The native KV record codecs (kvcache.h).
 *
 * Record codecs: encoding goes through the reference quantisers of
 * lib/model/formats.h; decoding reproduces their QDQ values bit for bit (the
 * products are exact in fp32 and are rounded to bf16 like the QDQ forms, so
 * even the inf corner agrees).
 */
#include "cpu/kvcache.h"
#include "model/formats.h"

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
