/*
 * Number formats, spec §3.1: the decode tables and the bulk bf16
 * conversions. The per-element codecs are inline in model/format_codes.h.
 */
#include "model/formats.h"

float dsv4i_e4m3_table[256];
float dsv4i_e2m1_table[16];

/* The tables are the decoders of model/format_codes.h evaluated once, so
 * the CPU's lookups and the kernels' register decoding are one definition. */
__attribute__((constructor)) static void fill_tables(void) {
  for (unsigned b = 0; b < 256; b++) dsv4i_e4m3_table[b] = dsv4i_e4m3_to_f32((uint8_t)b);
  for (unsigned c = 0; c < 16; c++) dsv4i_e2m1_table[c] = dsv4i_e2m1_to_f32((uint8_t)c);
}

void dsv4i_bf16_to_f32_n(const uint16_t *restrict src, size_t n, float *restrict dst) {
  for (size_t i = 0; i < n; i++) dst[i] = dsv4i_bf16_to_f32(src[i]);
}

void dsv4i_f32_to_bf16_n(const float *restrict src, size_t n, uint16_t *restrict dst) {
  for (size_t i = 0; i < n; i++) dst[i] = dsv4i_f32_to_bf16(src[i]);
}
