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

void dsv4i_kv_comp_decode(const uint8_t *rec, int32_t hd, float *y) {
  const uint8_t *sc = rec + hd / 2;
  for (int32_t b = 0; b < hd / 16; b++) {
    const float s = dsv4i_e4m3_to_f32(sc[b]);
    for (int32_t i = b * 8; i < b * 8 + 8; i++) {
      const uint8_t v = rec[i];
      y[2 * i] = dsv4i_bf16_to_f32(dsv4i_f32_to_bf16(dsv4i_e2m1_to_f32(dsv4i_e2m1_lo(v)) * s));
      y[2 * i + 1] = dsv4i_bf16_to_f32(dsv4i_f32_to_bf16(dsv4i_e2m1_to_f32(dsv4i_e2m1_hi(v)) * s));
    }
  }
}

void dsv4i_kv_idxk_encode(const uint16_t *x, int32_t ihd, uint8_t *rec) {
  (void)dsv4i_fp4_act_quant_ue8m0(x, (size_t)ihd, rec, rec + ihd / 2);
}

void dsv4i_kv_idxk_decode(const uint8_t *rec, int32_t ihd, float *y) {
  const uint8_t *sc = rec + ihd / 2;
  for (int32_t b = 0; b < ihd / 32; b++) {
    const float s = dsv4i_e8m0_to_f32(sc[b]);
    for (int32_t i = b * 16; i < b * 16 + 16; i++) {
      const uint8_t v = rec[i];
      y[2 * i] = dsv4i_bf16_to_f32(dsv4i_f32_to_bf16(dsv4i_e2m1_to_f32(dsv4i_e2m1_lo(v)) * s));
      y[2 * i + 1] = dsv4i_bf16_to_f32(dsv4i_f32_to_bf16(dsv4i_e2m1_to_f32(dsv4i_e2m1_hi(v)) * s));
    }
  }
}
