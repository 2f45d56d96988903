/*
 * Checkpoint number formats decoded in registers (model-spec §3.1): the
 * building blocks of every kernel that reads fp8 weights, Engram rows or
 * MXFP8 KV records. Device code only; exact (no rounding anywhere), and the
 * same values as the CPU reference. Needs denormals kept (nvcc -ftz=false,
 * the default; kernels/meson.build pins it).
 */
#ifndef DSV4_KERNELS_FORMATS_CUH
#define DSV4_KERNELS_FORMATS_CUH

/**
 * E4M3FN byte -> f32. Sign, 4 exponent bits (bias 7), 3 mantissa bits;
 * exponent 0 is subnormal ((m/8) * 2^-6); 0x7F and 0xFF are NaN; no
 * infinities. Branch-free: the 7 exponent+mantissa bits go to f32 bits
 * 26..20, giving f32 exponent field e and mantissa m << 20, i.e.
 * 2^(e-127) * (1 + m/8) for e > 0 and the f32 subnormal m * 2^-129 for
 * e == 0; one multiply by 2^120 moves the bias from 127 to 7 in both cases.
 */
__device__ __forceinline__ float dsv4_e4m3_to_f32(unsigned int b) {
  const unsigned int mag = b & 0x7Fu;
  const float v = __uint_as_float(((b & 0x80u) << 24) | (mag << 20)) * 0x1p120f;
  return mag == 0x7Fu ? __uint_as_float(0x7FFFFFFFu) : v;
}

/**
 * UE8M0 byte -> f32: 2^(b - 127), a pure power of two. b is the f32
 * exponent field itself, except b == 0 (2^-127, the f32 subnormal
 * 0x00400000) and b == 255 (NaN).
 */
__device__ __forceinline__ float dsv4_ue8m0_to_f32(unsigned int b) {
  const unsigned int bits = b == 0u ? 0x00400000u : (b << 23);
  return __uint_as_float(b == 255u ? 0x7FFFFFFFu : bits);
}

#endif /* DSV4_KERNELS_FORMATS_CUH */
