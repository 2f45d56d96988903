/*
 * Record addressing and value codecs of the KV caches (spec §5.8), device
 * side, over the scalar codecs shared with the host (model/format_codes.h):
 * bit-exact with lib/cpu/kvcache.c and lib/model/quant.c (the CPU oracle).
 * Products and quotients of the quantisers are written __fmul_rn /
 * __fdiv_rn: single IEEE roundings, as the CPU's separate operations.
 * Device code only; needs denormals kept (-ftz=false, kernels/meson.build).
 */
#ifndef DSV4_KERNELS_KVREC_CUH
#define DSV4_KERNELS_KVREC_CUH

#include <stdint.h>

#include "gpu/attn_abi.h"
#include "model/format_codes.h"

/** 2^e as f32 for e in [-126, 127]. */
__device__ __forceinline__ float dsv4_pow2f(int e) {
  return __uint_as_float((unsigned int)(e + 127) << 23);
}

/* ---- records ------------------------------------------------------------- */

/** Address of record `idx` of sequence row `seq` in a cache table. */
__device__ __forceinline__ unsigned char *dsv4_kv_rec(const dsv4i_gpu_kvtab &t, int seq,
                                                      long long idx) {
  const long long r = t.ring ? idx % t.ring : idx;
  const int page = ((const int *)t.pages)[(long long)seq * t.ld + r / t.rpp];
  return (unsigned char *)t.pool + (unsigned long long)page * t.page_bytes +
         (unsigned long long)(r % t.rpp) * (unsigned long long)t.rec_bytes;
}

/** Window record value: bf16(e4m3(code) · 2^(scale − 127)) as bf16 bits. */
__device__ __forceinline__ unsigned int dsv4_window_val(unsigned int code, float scale) {
  return dsv4i_f32_to_bf16(__fmul_rn(dsv4i_e4m3_to_f32(code), scale));
}

/** Compressed-KV / index-key value: bf16(e2m1(code) · scale) as bf16 bits. */
__device__ __forceinline__ unsigned int dsv4_fp4_val(unsigned int code, float scale) {
  return dsv4i_f32_to_bf16(__fmul_rn(dsv4i_e2m1_to_f32(code), scale));
}

#endif /* DSV4_KERNELS_KVREC_CUH */
