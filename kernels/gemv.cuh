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

/* Four E4M3 bytes of v (little-endian) decoded to fp32 and scaled by 2^-8,
 * exactly: byte b's sign | mag << 7 is the fp16 of its value × 2^-8
 * (subnormal codes land on fp16 subnormals, 0 on 0), so a byte permute and
 * two bit operations make two fp16s and a conversion each makes the fp32.
 * NaN codes (0x7F / 0xFF) give NaN; their test is one word-wide check, so
 * the common path has no per-byte select. The kernels multiply their block
 * sums by 2^8 (an exact scaling: every product of an E4M3 activation and a
 * scaled weight is a multiple of 2^-26, far above the fp32 subnormals). */
__device__ __forceinline__ void e4m3x4_to_f32_s8(uint32_t v, float *o) {
  const uint32_t lo = __byte_perm(v, 0u, 0x1404u), hi = __byte_perm(v, 0u, 0x3424u); /* b << 8 per half */
  const uint32_t hl = (lo & 0x80008000u) | ((lo >> 1) & 0x3F803F80u);
  const uint32_t hh = (hi & 0x80008000u) | ((hi >> 1) & 0x3F803F80u);
  asm("{.reg .b16 a, b;\n mov.b32 {a, b}, %2;\n cvt.f32.f16 %0, a;\n cvt.f32.f16 %1, b;\n}"
      : "=f"(o[0]), "=f"(o[1]) : "r"(hl));
  asm("{.reg .b16 a, b;\n mov.b32 {a, b}, %2;\n cvt.f32.f16 %0, a;\n cvt.f32.f16 %1, b;\n}"
      : "=f"(o[2]), "=f"(o[3]) : "r"(hh));
  if (((v & 0x7F7F7F7Fu) + 0x01010101u) & 0x80808080u) {
#pragma unroll
    for (int j = 0; j < 4; j++)
      if (((v >> (8 * j)) & 0x7Fu) == 0x7Fu) o[j] = __uint_as_float((((v >> (8 * j)) & 0x80u) << 24) | 0x7FC00000u);
  }
}

/* cp.async (compute_80): 16 bytes global -> shared, bypassing L1; src_bytes 0
 * zero-fills the destination without reading src (rows past the matrix). */
__device__ __forceinline__ void cp_async16(void *smem, const void *gmem, int src_bytes) {
  const unsigned s = (unsigned)__cvta_generic_to_shared(smem);
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(s), "l"(gmem), "r"(src_bytes)
               : "memory");
}
/* cp.async of 4 bytes (through L1: .ca is the only mode for 4); src_bytes 0 zero-fills. */
__device__ __forceinline__ void cp_async4(void *smem, const void *gmem, int src_bytes) {
  const unsigned s = (unsigned)__cvta_generic_to_shared(smem);
  asm volatile("cp.async.ca.shared.global [%0], [%1], 4, %2;\n" ::"r"(s), "l"(gmem), "r"(src_bytes)
               : "memory");
}
__device__ __forceinline__ void cp_async_commit() { asm volatile("cp.async.commit_group;\n" ::: "memory"); }
/* Wait until at most N of this thread's committed groups are still in flight. */
template <int N>
__device__ __forceinline__ void cp_async_wait() { asm volatile("cp.async.wait_group %0;\n" ::"n"(N) : "memory"); }

#endif /* DSV4_KERNELS_GEMV_CUH */
