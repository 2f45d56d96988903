/*
 * Pipeline self-test kernel: proves nvcc -> PTX -> embedded array ->
 * cuModuleLoadDataEx -> registry -> launch end to end, on the decode step
 * every fp8 kernel builds on (e4m3 value times its block's UE8M0 scale).
 * Host side: dsv4i_cuda_selftest (lib/gpu/cuda_probe.c).
 */
#include "model/format_codes.h"

namespace {

/* out[i] = e4m3(codes[i]) * ue8m0(scales[i / 32]); grid-stride over n.
 * The product is exact: |e4m3| in [2^-9, 448] times 2^[-127, 127] never
 * needs more than f32's precision, and overflows to inf exactly as the CPU
 * reference's f32 multiply does. */
template <typename Out>
__device__ void selftest_dequant_body(const unsigned char *__restrict__ codes,
                                      const unsigned char *__restrict__ scales,
                                      Out *__restrict__ out, unsigned long long n) {
  const unsigned long long stride = (unsigned long long)gridDim.x * blockDim.x;
  for (unsigned long long i = (unsigned long long)blockIdx.x * blockDim.x + threadIdx.x; i < n;
       i += stride)
    out[i] = (Out)(dsv4i_e4m3_to_f32(codes[i]) * dsv4i_e8m0_to_f32(scales[i >> 5]));
}

}  // namespace

/* codes: u8[n] E4M3FN; scales: u8[ceil(n/32)] UE8M0; out: f32[n]. */
extern "C" __global__ void dsv4_k_selftest_e4m3_ue8m0(const unsigned char *__restrict__ codes,
                                                      const unsigned char *__restrict__ scales,
                                                      float *__restrict__ out,
                                                      unsigned long long n) {
  selftest_dequant_body<float>(codes, scales, out, n);
}
