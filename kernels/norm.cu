/*
 * RMSNorm (spec §5.3; CPU oracle dsv4i_cpu_rmsnorm):
 *   y = bf16( w · (x · r) ),  r = 1 / sqrtf( Σx²/fp32(dim) + eps ),
 * Σx² of the exact fp32 squares in torch's CPU order (reduce.cuh), so the
 * result equals the CPU's bit for bit. One warp per row; 4 rows per block.
 */
#include "model/format_codes.h"
#include "reduce.cuh"

/* x: bf16 [n_tok][ldx]; w: bf16 [dim]; y: bf16 [n_tok][ldy] (may be x when ldy == ldx). */
extern "C" __global__ void __launch_bounds__(128)
dsv4_k_rmsnorm_bf16(int n_tok, int dim, const uint16_t *x, long long ldx, const uint16_t *w,
                    float eps, uint16_t *y, long long ldy) {
  const int row = blockIdx.x * 4 + (threadIdx.x >> 5), lane = threadIdx.x & 31;
  if (row >= n_tok) return;
  const uint16_t *xr = x + row * ldx;
  uint16_t *yr = y + row * ldy;
  const float ss = dsv4_warp_sum_torch(dim, [&](long long i) {
    const float v = dsv4i_bf16_to_f32(xr[i]);
    return v * v;
  });
  const float r = 1.0f / sqrtf(ss / (float)dim + eps);
  for (int d = lane; d < dim; d += 32) {
    const float v = dsv4i_bf16_to_f32(xr[d]) * r;
    yr[d] = dsv4i_f32_to_bf16(dsv4i_bf16_to_f32(w[d]) * v);
  }
}
