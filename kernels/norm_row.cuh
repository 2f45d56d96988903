/*
 * The default mode's RMSNorm row code (docs/gpu-dense.md "Numerics modes"),
 * shared by the kernels of norm.cu and the fused layer-entry kernel of hc.cu
 * so that every fused launch gives the unfused launches' bits.
 */
#ifndef DSV4_KERNELS_NORM_ROW_CUH
#define DSV4_KERNELS_NORM_ROW_CUH

#include "model/format_codes.h"
#include "reduce.cuh"

/*
 * The default mode's RMSNorm (docs/gpu-dense.md "Numerics modes"): the same
 * operations, Σx² in a fixed tree instead of torch's order. One block of 256
 * threads per row: thread i squares the elements 8v .. 8v + 7 of the vectors
 * v = i, i + 256, ... (in that order, fp32, from +0), then the block tree of
 * reduce.cuh. The order depends only on dim: a row's bits do not depend on
 * the other rows of the launch. r and y exactly as dsv4_k_rmsnorm_bf16 (norm.cu).
 *
 * rms_row_tiled does one row whose element values come from x8 (the 8 bf16 of
 * vector v) and x1 (element d): the plain kernel reads them, the fused kernels
 * compute them, with the same sums in the same order. x8a / x1a serve the Σx²
 * pass (each element once: the vectors v < dim/8 through x8a, the tail through
 * x1a), x8b / x1b the y pass (after the block tree's barrier, so they may read
 * what the first pass wrote). y by 8-element vectors (16-byte stores) when
 * vec_out, else element-wise; the arithmetic is the exact kernel's, element
 * by element. Every thread of the block calls it (block tree).
 */
__device__ __forceinline__ void unpack8(const uint4 u, uint16_t *e) {
  const uint32_t wd[4] = {u.x, u.y, u.z, u.w};
#pragma unroll
  for (int i = 0; i < 4; i++) e[2 * i] = (uint16_t)(wd[i] & 0xFFFFu), e[2 * i + 1] = (uint16_t)(wd[i] >> 16);
}

__device__ __forceinline__ uint4 pack8(const uint16_t *e) {
  return make_uint4((uint32_t)e[0] | ((uint32_t)e[1] << 16), (uint32_t)e[2] | ((uint32_t)e[3] << 16),
                    (uint32_t)e[4] | ((uint32_t)e[5] << 16), (uint32_t)e[6] | ((uint32_t)e[7] << 16));
}

/* a hint: the line of p into L1 (the first pass's loads then find it in flight) */
__device__ __forceinline__ void prefetch_l1(const void *p) {
#ifdef __CUDA_ARCH__
  asm volatile("prefetch.global.L1 [%0];" ::"l"(p));
#else
  (void)p;
#endif
}

/* vectors a thread keeps in shared memory from the first pass for the second
 * (12 KB a block; registers would be live across the division's call) */
#define RM_CACHE 3

/* pf(v): prefetch hints for vector v's inputs, issued for all of the thread's
 * vectors before the first pass. A thread's first RM_CACHE vectors' values
 * are kept in shared memory for the y pass (x8 is called only for the others):
 * x8 gives the values x8a gave, so the bits do not change. */
template <class PF, class X8A, class X1A, class X8, class X1>
__device__ __forceinline__ void rms_row_tiled(int dim, PF pf, X8A x8a, X1A x1a, X8 x8, X1 x1,
                                              const uint16_t *w, float eps, uint16_t *yr, bool vec_out) {
  __shared__ float sh[8];
  const int nv = dim >> 3;
  for (int v = threadIdx.x; v < nv; v += 256) pf(v);
  __shared__ uint4 cache[RM_CACHE][256];
  float acc = 0.0f;
  const auto sq8 = [&](const uint16_t *e) {
#pragma unroll
    for (int i = 0; i < 8; i++) {
      const float f = dsv4i_bf16_to_f32(e[i]);
      acc += f * f;
    }
  };
  for (int v = threadIdx.x, j = 0; v < nv; v += 256, j++) {
    uint16_t e[8];
    x8a(v, e);
    sq8(e);
    if (j < RM_CACHE) cache[j][threadIdx.x] = pack8(e);
  }
  /* dim % 8 tail: element 8·nv + i to thread i */
  if (threadIdx.x < (dim & 7)) {
    const float f = dsv4i_bf16_to_f32(x1a(8 * nv + threadIdx.x));
    acc += f * f;
  }
  const float ss = dsv4_block_sum_tree<8>(acc, sh);
  const float r = 1.0f / sqrtf(ss / (float)dim + eps);
  /* y of one vector (16-byte loads of w, one 16-byte store) */
  const auto y8 = [&](int v, const uint16_t *e) {
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
  };
  int d0 = 0;
  if (vec_out) {
    for (int v = threadIdx.x, j = 0; v < nv; v += 256, j++) {
      uint16_t e[8];
      if (j < RM_CACHE) unpack8(cache[j][threadIdx.x], e);
      else x8(v, e);
      y8(v, e);
    }
    d0 = 8 * nv; /* the tail below */
  }
  for (int d = d0 + threadIdx.x; d < dim; d += 256) {
    const float v = dsv4i_bf16_to_f32(x1(d)) * r;
    yr[d] = dsv4i_f32_to_bf16(dsv4i_bf16_to_f32(w[d]) * v);
  }
}


/* A bf16 row read as it is (16-byte loads when aligned). */
struct plain_row {
  const uint16_t *x;
  bool vec;
  __device__ __forceinline__ void x8(int v, uint16_t *e) const {
    if (vec) {
      unpack8(reinterpret_cast<const uint4 *>(x)[v], e);
    } else {
#pragma unroll
      for (int i = 0; i < 8; i++) e[i] = x[8 * v + i];
    }
  }
  __device__ __forceinline__ uint16_t x1(int d) const { return x[d]; }
  __device__ __forceinline__ void pf(int v) const { prefetch_l1(x + 8 * v); }
};

__device__ __forceinline__ bool aligned16(const void *p) { return (reinterpret_cast<uintptr_t>(p) & 15) == 0; }

/* rms_row_tiled over one plain bf16 row xr into yr (the RMSNorm kernels' row). */
__device__ __forceinline__ void rms_plain_row(int dim, const uint16_t *xr, const uint16_t *w, float eps,
                                              uint16_t *yr) {
  const plain_row r = {xr, aligned16(xr)};
  const auto pf = [&](int v) { r.pf(v); };
  const auto x8 = [&](int v, uint16_t *e) { r.x8(v, e); };
  const auto x1 = [&](int d) { return r.x1(d); };
  rms_row_tiled(dim, pf, x8, x1, x8, x1, w, eps, yr, r.vec && aligned16(yr) && aligned16(w));
}

/* hc_pre's bf16 element(s) of a token row: x[d] = bf16(Σ_c pre[c] · h[c][d])
 * (products fp32, c in order from +0), as dsv4_k_hc_pre_bf16. */
struct hc_pre_row {
  const uint16_t *h; /* the token's [hc][dim] */
  const float *pre;  /* its [hc] */
  int hc, dim;
  bool vec; /* 16-byte loads of h */
  __device__ __forceinline__ void x8(int v, uint16_t *e) const {
    float s[8];
#pragma unroll
    for (int i = 0; i < 8; i++) s[i] = 0.0f;
    for (int c = 0; c < hc; c++) {
      uint16_t hv[8];
      const uint16_t *hc_row = h + (long long)c * dim;
      if (vec) {
        unpack8(reinterpret_cast<const uint4 *>(hc_row)[v], hv);
      } else {
#pragma unroll
        for (int i = 0; i < 8; i++) hv[i] = hc_row[8 * v + i];
      }
      const float p = pre[c];
#pragma unroll
      for (int i = 0; i < 8; i++) s[i] += p * dsv4i_bf16_to_f32(hv[i]);
    }
#pragma unroll
    for (int i = 0; i < 8; i++) e[i] = dsv4i_f32_to_bf16(s[i]);
  }
  __device__ __forceinline__ void pf(int v) const {
    for (int c = 0; c < hc; c++) prefetch_l1(h + (long long)c * dim + 8 * v);
  }
  __device__ __forceinline__ uint16_t x1(int d) const {
    float s = 0.0f;
    for (int c = 0; c < hc; c++) s += pre[c] * dsv4i_bf16_to_f32(h[(long long)c * dim + d]);
    return dsv4i_f32_to_bf16(s);
  }
};

/* hc_pre + the tiled RMSNorm of token row `row`: y bf16 [..][ldy] = rmsnorm(hc_pre(h, pre), w)
 * (hc_pre's row is never written; the second pass computes it again from h). Every
 * thread of the block calls it. */
__device__ __forceinline__ void hc_pre_rms_row(int row, int hc, int dim, const uint16_t *h,
                                               const float *pre, const uint16_t *w, float eps,
                                               uint16_t *y, long long ldy) {
  const hc_pre_row r = {h + (long long)row * hc * dim, pre + (long long)row * hc, hc, dim,
                        (dim & 7) == 0 && aligned16(h + (long long)row * hc * dim)};
  uint16_t *yr = y + row * ldy;
  const auto pf = [&](int v) { r.pf(v); };
  const auto x8 = [&](int v, uint16_t *e) { r.x8(v, e); };
  const auto x1 = [&](int d) { return r.x1(d); };
  rms_row_tiled(dim, pf, x8, x1, x8, x1, w, eps, yr, aligned16(yr) && aligned16(w));
}

#endif /* DSV4_KERNELS_NORM_ROW_CUH */
