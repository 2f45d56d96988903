/* The fp8_ds_mla window record on the host (model/kv_ds_mla.h). */
#include "model/kv_ds_mla.h"

/* act_quant's scale exponent of the NoPE block x[lo, hi) */
static int32_t block_exp(const uint16_t *x, int32_t lo, int32_t hi) {
  uint32_t amax = 0;
  for (int32_t i = lo; i < hi; i++) {
    const uint32_t a = dsv4i_bf16_abs_bits(x[i]);
    amax = a > amax ? a : amax;
  }
  return dsv4i_act_quant_exp(amax);
}

void dsv4i_ds_mla_encode(const uint16_t *x, int32_t hd, int32_t rope, uint8_t *rec) {
  const int32_t nope = dsv4i_ds_mla_nope(hd, rope), nb = dsv4i_ds_mla_scales(hd, rope);
  uint8_t *sc = rec + dsv4i_ds_mla_scale_off(hd, rope);
  for (int32_t b = 0; b < nb; b++) {
    const int32_t lo = b * DSV4I_DS_MLA_BLOCK;
    const int32_t hi = lo + DSV4I_DS_MLA_BLOCK < nope ? lo + DSV4I_DS_MLA_BLOCK : nope;
    const int32_t e = block_exp(x, lo, hi);
    for (int32_t i = lo; i < hi; i++) rec[i] = dsv4i_act_quant_code(x[i], e);
    sc[b] = dsv4i_act_quant_scale(e);
  }
  for (int32_t j = nb; j < (nb + 7) / 8 * 8; j++) sc[j] = 0;
  for (int32_t i = 0; i < rope; i++) {
    rec[nope + 2 * i] = (uint8_t)(x[nope + i] & 0xFFu);
    rec[nope + 2 * i + 1] = (uint8_t)(x[nope + i] >> 8);
  }
}

void dsv4i_ds_mla_decode(const uint8_t *rec, int32_t hd, int32_t rope, float *y) {
  const int32_t nope = dsv4i_ds_mla_nope(hd, rope);
  const uint8_t *sc = rec + dsv4i_ds_mla_scale_off(hd, rope);
  for (int32_t i = 0; i < nope; i++)
    y[i] = dsv4i_ds_mla_nope_value(rec[i], sc[i / DSV4I_DS_MLA_BLOCK]);
  for (int32_t i = 0; i < rope; i++)
    y[nope + i] = dsv4i_bf16_to_f32(dsv4i_ds_mla_rope_bits(rec, hd, rope, i));
}

void dsv4i_ds_mla_qdq(const uint16_t *x, int64_t rows, int32_t hd, int32_t rope, uint16_t *y) {
  const int32_t nope = dsv4i_ds_mla_nope(hd, rope), nb = dsv4i_ds_mla_scales(hd, rope);
  for (int64_t r = 0; r < rows; r++) {
    const uint16_t *xr = x + r * hd;
    uint16_t *yr = y + r * hd;
    /* encode's blocks, then decode's value of each code (bf16, so the conversion is exact) */
    for (int32_t b = 0; b < nb; b++) {
      const int32_t lo = b * DSV4I_DS_MLA_BLOCK;
      const int32_t hi = lo + DSV4I_DS_MLA_BLOCK < nope ? lo + DSV4I_DS_MLA_BLOCK : nope;
      const int32_t e = block_exp(xr, lo, hi);
      const uint8_t s = dsv4i_act_quant_scale(e);
      for (int32_t i = lo; i < hi; i++)
        yr[i] = dsv4i_f32_to_bf16(dsv4i_ds_mla_nope_value(dsv4i_act_quant_code(xr[i], e), s));
    }
    if (yr != xr) /* RoPE values pass unchanged */
      for (int32_t i = nope; i < hd; i++) yr[i] = xr[i];
  }
}
