/*
 * RoPE / YaRN on one interleaved pair (spec §8.3; CPU oracle dsv4i_rope_cs +
 * dsv4i_cpu_rope), shared by rope.cu and the fused RMSNorm + RoPE of norm.cu
 * so that both give the same bits: (c, s) = cos/sin of fp32(fp32(pos)·freq)
 * in double rounded to fp32; forward a' = a·c − b·s, b' = a·s + b·c; inverse
 * a' = a·c + b·s, b' = b·c − a·s; products rounded to fp32, then the sum,
 * then bf16.
 */
#ifndef DSV4_KERNELS_ROPE_CUH
#define DSV4_KERNELS_ROPE_CUH

#include "model/format_codes.h"

/* cs = {cos, sin} of the angle of position p at frequency f */
__device__ __forceinline__ void dsv4_rope_cs(float p, float f, float *cs) {
  const float a = p * f;
  cs[0] = (float)cos((double)a);
  cs[1] = (float)sin((double)a);
}

/* the pair q[0], q[1] (bf16) rotated in place by (c, s) */
__device__ __forceinline__ void dsv4_rope_pair(uint16_t *q, float c, float s, int inverse) {
  const float a = dsv4i_bf16_to_f32(q[0]), b = dsv4i_bf16_to_f32(q[1]);
  float re, im;
  if (!inverse) {
    re = a * c - b * s;
    im = a * s + b * c;
  } else {
    re = a * c + b * s;
    im = b * c - a * s;
  }
  q[0] = dsv4i_f32_to_bf16(re);
  q[1] = dsv4i_f32_to_bf16(im);
}

#endif /* DSV4_KERNELS_ROPE_CUH */
