/*
 * Row decoding for the GEMV kernels (linear.cu, moe.cu): one output row's
 * 32-column weight block, decoded in registers from the checkpoint bytes.
 * Device code only.
 */
#ifndef DSV4_KERNELS_GEMV_CUH
#define DSV4_KERNELS_GEMV_CUH

#include "model/format_codes.h"

enum { W_E4M3 = 0, W_E2M1 = 1, W_BF16 = 2, W_F32 = 3 };

/* Row o's 32 weights of column block kb, decoded to fp32; the block scale
 * in *sw (1 for unscaled formats). */
template <int FMT>
__device__ __forceinline__ void load_block(const unsigned char *w, long long ld, const unsigned char *scale,
                                           long long scale_ld, int o, int kb, float *wv, float *sw) {
  if (FMT == W_E4M3) {
    const uint4 *p = reinterpret_cast<const uint4 *>(w + o * ld + kb * 32);
    const uint4 a = p[0], b = p[1];
    const uint32_t words[8] = {a.x, a.y, a.z, a.w, b.x, b.y, b.z, b.w};
#pragma unroll
    for (int i = 0; i < 32; i++) wv[i] = dsv4i_e4m3_to_f32((uint8_t)(words[i >> 2] >> (8 * (i & 3))));
    *sw = dsv4i_e8m0_to_f32(scale[(long long)(o >> 5) * scale_ld + kb]);
  } else if (FMT == W_E2M1) {
    const uint4 a = *reinterpret_cast<const uint4 *>(w + o * ld + kb * 16);
    const uint32_t words[4] = {a.x, a.y, a.z, a.w};
#pragma unroll
    for (int i = 0; i < 32; i++) wv[i] = dsv4i_e2m1_to_f32((uint8_t)(words[i >> 3] >> (4 * (i & 7))));
    *sw = dsv4i_e8m0_to_f32(scale[(long long)o * scale_ld + kb]);
  } else if (FMT == W_BF16) {
    const uint4 *p = reinterpret_cast<const uint4 *>(w + (o * ld + kb * 32) * 2);
#pragma unroll
    for (int q = 0; q < 4; q++) {
      const uint4 a = p[q];
      const uint32_t words[4] = {a.x, a.y, a.z, a.w};
#pragma unroll
      for (int i = 0; i < 8; i++)
        wv[q * 8 + i] = dsv4i_bf16_to_f32((uint16_t)(words[i >> 1] >> (16 * (i & 1))));
    }
    *sw = 1.0f;
  } else {
    const float4 *p = reinterpret_cast<const float4 *>(w + (o * ld + kb * 32) * 4);
#pragma unroll
    for (int q = 0; q < 8; q++) {
      const float4 a = p[q];
      wv[q * 4] = a.x, wv[q * 4 + 1] = a.y, wv[q * 4 + 2] = a.z, wv[q * 4 + 3] = a.w;
    }
    *sw = 1.0f;
  }
}

#endif /* DSV4_KERNELS_GEMV_CUH */
