/*
 * RMSNorm (spec §5.3; CPU oracle dsv4i_cpu_rmsnorm):
 *   y = bf16( w · (x · r) ),  r = 1 / sqrtf( Σx²/fp32(dim) + eps ),
 * Σx² of the exact fp32 squares in torch's CPU order (reduce.cuh), so the
 * result equals the CPU's bit for bit. One warp per row; 4 rows per block.
 */
#include "model/format_codes.h"
#include "model/ref_math.h" /* DSV4I_HC_MAX */
#include "norm_row.cuh"
#include "reduce.cuh"
#include "rope.cuh"

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

/* The default mode's RMSNorm (rms_row_tiled, norm_row.cuh: Σx² in a fixed block
 * tree). Grid (n_tok). y may be x: each thread reads its vector (element)
 * before writing it. */
extern "C" __global__ void __launch_bounds__(256)
dsv4_k_rmsnorm_bf16_tiled(int n_tok, int dim, const uint16_t *x, long long ldx, const uint16_t *w,
                          float eps, uint16_t *y, long long ldy) {
  const int row = blockIdx.x;
  if (row >= n_tok) return; /* block-uniform */
  rms_plain_row(dim, x + row * ldx, w, eps, y + row * ldy);
}

/*
 * hc_pre + RMSNorm in one launch (the default mode): x = hc_pre's row, then
 * dsv4_k_rmsnorm_bf16_tiled on it (hc_pre_rms_row, norm_row.cuh): y equals the
 * pair hc_pre + rmsnorm_tiled bit for bit. h bf16 [n_tok][hc][dim], pre f32
 * [n_tok][hc] (hc <= DSV4I_HC_MAX), w bf16 [dim], y bf16 [n_tok][ldy]. Grid
 * (n_tok), 256 threads.
 */
extern "C" __global__ void __launch_bounds__(256)
dsv4_k_hc_pre_rmsnorm_bf16_tiled(int n_tok, int hc, int dim, const uint16_t *h, const float *pre,
                                 const uint16_t *w, float eps, uint16_t *y, long long ldy) {
  const int row = blockIdx.x;
  if (row >= n_tok) return; /* block-uniform */
  hc_pre_rms_row(row, hc, dim, h, pre, w, eps, y, ldy);
}

/*
 * hc_post + hc_pre + RMSNorm in one launch (the default mode; the FFN
 * sublayer's entry): h'[j][d] = dsv4_k_hc_post_bf16's bf16(post[j]·xa[d] +
 * Σ_i comb[i][j]·res[i][d]) written to hout (may be res: the first pass
 * reads a column of res before writing it, and only the thread that owns
 * the column touches it), then y = RMSNorm(hc_pre(h', pre)) as
 * dsv4_k_hc_pre_rmsnorm_bf16_tiled (the second pass reads h' back). Bit for
 * bit the three launches hc_post, hc_pre, rmsnorm_tiled. xa bf16 [n][dim];
 * res, hout bf16 [n][hc][dim]; post f32 [n][hc]; comb f32 [n][hc][hc]; pre
 * f32 [n][hc]; y bf16 [n][dim]. hc <= DSV4I_HC_MAX. Grid (n_tok), 256 threads.
 */
extern "C" __global__ void __launch_bounds__(256)
dsv4_k_hc_post_pre_rmsnorm_bf16_tiled(int n_tok, int hc, int dim, const uint16_t *xa,
                                      const uint16_t *res, const float *post, const float *comb,
                                      uint16_t *hout, const float *pre, const uint16_t *w, float eps,
                                      uint16_t *y) {
  const int row = blockIdx.x;
  if (row >= n_tok) return; /* block-uniform */
  const long long ho = (long long)row * hc * dim;
  const uint16_t *rr = res + ho, *xr = xa + (long long)row * dim;
  uint16_t *hr = hout + ho;
  const float *po = post + (long long)row * hc, *cb = comb + (long long)row * hc * hc;
  const hc_pre_row r = {hr, pre + (long long)row * hc, hc, dim,
                        (dim & 7) == 0 && aligned16(hr) && aligned16(rr) && aligned16(xr)};
  /* hc_post of element d: every copy's column read, then every copy written */
  const auto post1 = [&](int d) {
    float rv[DSV4I_HC_MAX];
    for (int i = 0; i < hc; i++) rv[i] = dsv4i_bf16_to_f32(rr[(long long)i * dim + d]);
    const float xv = dsv4i_bf16_to_f32(xr[d]);
    for (int j = 0; j < hc; j++) {
      float s = 0.0f;
      for (int i = 0; i < hc; i++) s += cb[i * hc + j] * rv[i];
      hr[(long long)j * dim + d] = dsv4i_f32_to_bf16(po[j] * xv + s);
    }
  };
  const auto x8a = [&](int v, uint16_t *e) {
    if (r.vec && hc <= 4) { /* the 8 columns of vector v, 16-byte loads and stores */
      uint16_t re[4][8], xe[8];
#pragma unroll
      for (int i = 0; i < 4; i++)
        if (i < hc) unpack8(reinterpret_cast<const uint4 *>(rr + (long long)i * dim)[v], re[i]);
      unpack8(reinterpret_cast<const uint4 *>(xr)[v], xe);
#pragma unroll
      for (int j = 0; j < 4; j++) {
        if (j >= hc) break;
        uint32_t o[4];
#pragma unroll
        for (int k = 0; k < 8; k++) {
          float s = 0.0f;
#pragma unroll
          for (int i = 0; i < 4; i++)
            if (i < hc) s += cb[i * hc + j] * dsv4i_bf16_to_f32(re[i][k]);
          const uint32_t b = dsv4i_f32_to_bf16(po[j] * dsv4i_bf16_to_f32(xe[k]) + s);
          if (k & 1) o[k >> 1] |= b << 16;
          else o[k >> 1] = b;
        }
        reinterpret_cast<uint4 *>(hr + (long long)j * dim)[v] = make_uint4(o[0], o[1], o[2], o[3]);
      }
    } else {
#pragma unroll 1
      for (int k = 0; k < 8; k++) post1(8 * v + k);
    }
    r.x8(v, e); /* this thread's own writes */
  };
  const auto x1a = [&](int d) {
    post1(d);
    return r.x1(d);
  };
  const auto pf = [&](int v) {
    for (int i = 0; i < hc; i++) prefetch_l1(rr + (long long)i * dim + 8 * v);
    prefetch_l1(xr + 8 * v);
  };
  const auto x8 = [&](int v, uint16_t *e) { r.x8(v, e); };
  const auto x1 = [&](int d) { return r.x1(d); };
  rms_row_tiled(dim, pf, x8a, x1a, x8, x1, w, eps, y + (long long)row * dim,
                aligned16(y + (long long)row * dim) && aligned16(w));
}

/*
 * RMSNorm + RoPE in one launch (the default mode): y = dsv4_k_rmsnorm_bf16_tiled's
 * row, then its last 2·n_freq elements rotated as dsv4_k_rope_bf16 does
 * (forward, position pos[t]; rope.cuh): the bits of the pair rmsnorm_tiled +
 * rope. x bf16 [n][ldx], y bf16 [n][ldy] (may be x with ldy == ldx), freqs f32
 * [n_freq] (2·n_freq <= dim), pos int32 [n]. Grid (n_tok), 256 threads.
 */
extern "C" __global__ void __launch_bounds__(256)
dsv4_k_rmsnorm_rope_bf16_tiled(int n_tok, int dim, const uint16_t *x, long long ldx,
                               const uint16_t *w, float eps, uint16_t *y, long long ldy,
                               int n_freq, const float *freqs, const int32_t *pos) {
  const int row = blockIdx.x;
  if (row >= n_tok) return; /* block-uniform */
  uint16_t *yr = y + row * ldy;
  rms_plain_row(dim, x + row * ldx, w, eps, yr);
  __syncthreads(); /* the row's y visible to the block */
  const float p = (float)pos[row];
  for (int i = threadIdx.x; i < n_freq; i += 256) {
    float cs[2];
    dsv4_rope_cs(p, freqs[i], cs);
    dsv4_rope_pair(yr + dim - 2 * n_freq + 2 * i, cs[0], cs[1], 0);
  }
}
