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

/*
 * The default mode's RMSNorm (docs/gpu-dense.md "Numerics modes"): the same
 * operations, Σx² in a fixed tree instead of torch's order. One block of 256
 * threads per row: thread i squares the elements 8v .. 8v + 7 of the vectors
 * v = i, i + 256, ... (in that order, fp32, from +0), then the block tree of
 * reduce.cuh. The order depends only on dim: a row's bits do not depend on
 * the other rows of the launch. r and y exactly as above.
 *
 * rms_row_tiled does one row whose element values come from x8 (the 8 bf16 of
 * vector v) and x1 (element d): the plain kernel reads them, the fused
 * hc_pre + RMSNorm kernel computes them, with the same sums in the same order.
 * y by 8-element vectors (16-byte stores) when vec_out, else element-wise;
 * the arithmetic is the exact kernel's, element by element. Every thread of
 * the block calls it (block tree).
 */
template <class X8, class X1>
__device__ __forceinline__ void rms_row_tiled(int dim, X8 x8, X1 x1, const uint16_t *w, float eps,
                                              uint16_t *yr, bool vec_out) {
  __shared__ float sh[8];
  const int nv = dim >> 3;
  float acc = 0.0f;
  for (int v = threadIdx.x; v < nv; v += 256) {
    uint16_t e[8];
    x8(v, e);
#pragma unroll
    for (int i = 0; i < 8; i++) {
      const float f = dsv4i_bf16_to_f32(e[i]);
      acc += f * f;
    }
  }
  /* dim % 8 tail: element 8·nv + i to thread i */
  if (threadIdx.x < (dim & 7)) {
    const float f = dsv4i_bf16_to_f32(x1(8 * nv + threadIdx.x));
    acc += f * f;
  }
  const float ss = dsv4_block_sum_tree<8>(acc, sh);
  const float r = 1.0f / sqrtf(ss / (float)dim + eps);
  int d0 = 0;
  if (vec_out) {
    for (int v = threadIdx.x; v < nv; v += 256) {
      uint16_t e[8];
      x8(v, e);
      const uint4 g = reinterpret_cast<const uint4 *>(w)[v];
      const uint32_t wd[4] = {g.x, g.y, g.z, g.w};
      uint32_t od[4];
#pragma unroll
      for (int i = 0; i < 4; i++) {
        const float x0 = dsv4i_bf16_to_f32(e[2 * i]) * r;
        const float x1v = dsv4i_bf16_to_f32(e[2 * i + 1]) * r;
        const uint16_t y0 = dsv4i_f32_to_bf16(dsv4i_bf16_to_f32((uint16_t)(wd[i] & 0xFFFFu)) * x0);
        const uint16_t y1 = dsv4i_f32_to_bf16(dsv4i_bf16_to_f32((uint16_t)(wd[i] >> 16)) * x1v);
        od[i] = (uint32_t)y0 | ((uint32_t)y1 << 16);
      }
      reinterpret_cast<uint4 *>(yr)[v] = make_uint4(od[0], od[1], od[2], od[3]);
    }
    d0 = 8 * nv; /* the tail below */
  }
  for (int d = d0 + threadIdx.x; d < dim; d += 256) {
    const float v = dsv4i_bf16_to_f32(x1(d)) * r;
    yr[d] = dsv4i_f32_to_bf16(dsv4i_bf16_to_f32(w[d]) * v);
  }
}

__device__ __forceinline__ void unpack8(const uint4 u, uint16_t *e) {
  const uint32_t wd[4] = {u.x, u.y, u.z, u.w};
#pragma unroll
  for (int i = 0; i < 4; i++) e[2 * i] = (uint16_t)(wd[i] & 0xFFFFu), e[2 * i + 1] = (uint16_t)(wd[i] >> 16);
}

/* Grid (n_tok). y may be x: each thread reads its vector (element) before writing it. */
extern "C" __global__ void __launch_bounds__(256)
dsv4_k_rmsnorm_bf16_tiled(int n_tok, int dim, const uint16_t *x, long long ldx, const uint16_t *w,
                          float eps, uint16_t *y, long long ldy) {
  const int row = blockIdx.x;
  if (row >= n_tok) return; /* block-uniform */
  const uint16_t *xr = x + row * ldx;
  uint16_t *yr = y + row * ldy;
  const bool vec = ((reinterpret_cast<uintptr_t>(xr) & 15) == 0);
  const bool vec_out = vec && ((reinterpret_cast<uintptr_t>(yr) | reinterpret_cast<uintptr_t>(w)) & 15) == 0;
  rms_row_tiled(
      dim,
      [&](int v, uint16_t *e) {
        if (vec) {
          unpack8(reinterpret_cast<const uint4 *>(xr)[v], e);
        } else {
#pragma unroll
          for (int i = 0; i < 8; i++) e[i] = xr[8 * v + i];
        }
      },
      [&](int d) { return xr[d]; }, w, eps, yr, vec_out);
}

/*
 * hc_pre + RMSNorm in one launch (the default mode): x[d] = bf16(Σ_c pre[c] ·
 * h[c][d]) exactly as dsv4_k_hc_pre_bf16 (products fp32, c in order from +0),
 * then dsv4_k_rmsnorm_bf16_tiled on that row: y equals the pair hc_pre +
 * rmsnorm_tiled bit for bit (the x row is never written; the second pass
 * computes it again from h, an L1/L2 hit). h bf16 [n_tok][hc][dim], pre f32
 * [n_tok][hc] (hc <= DSV4I_HC_MAX), w bf16 [dim], y bf16 [n_tok][ldy].
 * Grid (n_tok), 256 threads.
 */
extern "C" __global__ void __launch_bounds__(256)
dsv4_k_hc_pre_rmsnorm_bf16_tiled(int n_tok, int hc, int dim, const uint16_t *h, const float *pre,
                                 const uint16_t *w, float eps, uint16_t *y, long long ldy) {
  const int row = blockIdx.x;
  if (row >= n_tok) return; /* block-uniform */
  const uint16_t *hr = h + (long long)row * hc * dim;
  const float *pr = pre + (long long)row * hc;
  uint16_t *yr = y + row * ldy;
  const bool vec = (dim & 7) == 0 && (reinterpret_cast<uintptr_t>(hr) & 15) == 0;
  const bool vec_out = ((reinterpret_cast<uintptr_t>(yr) | reinterpret_cast<uintptr_t>(w)) & 15) == 0;
  rms_row_tiled(
      dim,
      [&](int v, uint16_t *e) {
        float s[8];
#pragma unroll
        for (int i = 0; i < 8; i++) s[i] = 0.0f;
        for (int c = 0; c < hc; c++) {
          uint16_t hv[8];
          const uint16_t *hc_row = hr + (long long)c * dim;
          if (vec) {
            unpack8(reinterpret_cast<const uint4 *>(hc_row)[v], hv);
          } else {
#pragma unroll
            for (int i = 0; i < 8; i++) hv[i] = hc_row[8 * v + i];
          }
          const float p = pr[c];
#pragma unroll
          for (int i = 0; i < 8; i++) s[i] += p * dsv4i_bf16_to_f32(hv[i]);
        }
#pragma unroll
        for (int i = 0; i < 8; i++) e[i] = dsv4i_f32_to_bf16(s[i]);
      },
      [&](int d) {
        float s = 0.0f;
        for (int c = 0; c < hc; c++) s += pr[c] * dsv4i_bf16_to_f32(hr[(long long)c * dim + d]);
        return dsv4i_f32_to_bf16(s);
      },
      w, eps, yr, vec_out);
}
