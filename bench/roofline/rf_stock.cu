/*
 * Device code of dsv4-roofline that is not the engine's: the measuring
 * kernels (empty launch, read bandwidth, random fill) and the plain-CUDA
 * pieces of the stock baselines (the per-expert MoE's gather / SwiGLU /
 * combine, the gather + SDPA path's record gather and softmax, the unfused
 * Markov chain). The baselines' GEMMs are cuBLASLt calls made by the host
 * (rf_moe.c, rf_attn.c). Timing only: the baselines compute plausible
 * values (the reference's formulas) but no test compares them.
 */
#include <stdint.h>

#include "gpu/attn_abi.h"
#include "kvrec.cuh"
#include "model/format_codes.h"

/* ---- measuring ------------------------------------------------------------- */

/** The launch floor: a kernel that does nothing. */
extern "C" __global__ void rf_empty(void) {}

/** Read bandwidth: every 16-byte word of p once (grid-stride); sink written
 * only when the XOR of everything read has an impossible value, so the reads stay. */
extern "C" __global__ void rf_read(const uint4 *__restrict__ p, unsigned long long n16,
                                   unsigned int *sink) {
  unsigned int acc = 0;
  const unsigned long long stride = (unsigned long long)gridDim.x * blockDim.x;
  for (unsigned long long i = (unsigned long long)blockIdx.x * blockDim.x + threadIdx.x; i < n16;
       i += stride) {
    const uint4 v = p[i];
    acc ^= v.x ^ v.y ^ v.z ^ v.w;
  }
  if (acc == 0x9E3779B9u) sink[0] = acc;
}

__device__ __forceinline__ unsigned int rf_hash(unsigned long long i, unsigned int seed) {
  unsigned long long x = i * 0x9E3779B97F4A7C15ull + seed;
  x ^= x >> 31;
  x *= 0xBF58476D1CE4E5B9ull;
  x ^= x >> 29;
  return (unsigned int)x;
}

/** Random 32-bit words (hash of the index) AND mask, then OR bits: valid codes
 * of a format (e.g. mask 0x3F3F3F3F: finite E4M3 / E2M1 codes). */
extern "C" __global__ void rf_fill(unsigned int *__restrict__ p, unsigned long long n_words,
                                   unsigned int seed, unsigned int mask, unsigned int bits) {
  const unsigned long long stride = (unsigned long long)gridDim.x * blockDim.x;
  for (unsigned long long i = (unsigned long long)blockIdx.x * blockDim.x + threadIdx.x;
       i < n_words; i += stride)
    p[i] = (rf_hash(i, seed) & mask) | bits;
}

/* ---- stock MoE: per-expert GEMMs (cuBLASLt) around these ---------------------- */

/** out[j] = x[rows[j]] (bf16 rows of dim): the tokens of each expert, expert-sorted. */
extern "C" __global__ void rf_gather_rows(const uint16_t *__restrict__ x, const int *__restrict__ rows,
                                          int dim, uint16_t *__restrict__ out) {
  const int j = blockIdx.x;
  const uint16_t *src = x + (long long)rows[j] * dim;
  for (int d = threadIdx.x; d < dim; d += blockDim.x) out[(long long)j * dim + d] = src[d];
}

/** a = bf16(silu(min(h1, limit)) · clamp(h3, ±limit)) (limit <= 0: no clamp), rows of inter. */
extern "C" __global__ void rf_swiglu(const float *__restrict__ h1, const float *__restrict__ h3,
                                     long long n, float limit, uint16_t *__restrict__ a) {
  const long long stride = (long long)gridDim.x * blockDim.x;
  for (long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += stride) {
    float g = h1[i], u = h3[i];
    if (limit > 0) {
      g = fminf(g, limit);
      u = fminf(fmaxf(u, -limit), limit);
    }
    a[i] = dsv4i_f32_to_bf16(g / (1.0f + expf(-g)) * u);
  }
}

/** out[t] = bf16(ys[t] + Σ_{j: tok[j] == t} wt[j] · y[j]), rows of dim; grid (dim/256, n). */
extern "C" __global__ void rf_combine(const float *__restrict__ ys, const float *__restrict__ y,
                                      const int *__restrict__ tok, const float *__restrict__ wt,
                                      int n_assign, int dim, uint16_t *__restrict__ out) {
  const int t = blockIdx.y, d = blockIdx.x * blockDim.x + threadIdx.x;
  if (d >= dim) return;
  float acc = ys[(long long)t * dim + d];
  for (int j = 0; j < n_assign; j++)
    if (tok[j] == t) acc += wt[j] * y[(long long)j * dim + d];
  out[(long long)t * dim + d] = dsv4i_f32_to_bf16(acc);
}

/* ---- stock sparse attention: gather rows, QKᵀ / PV (cuBLASLt), softmax ------- */

/**
 * Row r of token t's attention rows as bf16: r < window − 1 the window record
 * of position pos − (window − 1) + r, r == window − 1 the call's own row kvw,
 * then the compressed records sel[t][r − window]. Written as K [t][rows][hd]
 * and transposed Kt [t][hd][rows] (the PV GEMM's operand). Grid (rows, n),
 * block hd / 4 threads, 4 dims each.
 */
extern "C" __global__ void rf_gather_kv(dsv4i_gpu_kvtab win, dsv4i_gpu_kvtab comp,
                                        const dsv4i_gpu_attn_tok *__restrict__ tok,
                                        const uint16_t *__restrict__ kvw, const int *__restrict__ sel,
                                        int sel_ld, int window, int hd, int rows,
                                        uint16_t *__restrict__ K, uint16_t *__restrict__ Kt) {
  const int r = blockIdx.x, t = blockIdx.y, d0 = threadIdx.x * 4;
  if (d0 >= hd) return;
  const dsv4i_gpu_attn_tok tk = tok[t];
  uint16_t v[4];
  if (r < window - 1) {
    const unsigned char *rec = dsv4_kv_rec(win, tk.seq, (long long)tk.pos - (window - 1) + r);
    const float s = dsv4i_e8m0_to_f32(rec[hd + d0 / 32]);
    for (int i = 0; i < 4; i++) v[i] = (uint16_t)dsv4_window_val(rec[d0 + i], s);
  } else if (r == window - 1) {
    for (int i = 0; i < 4; i++) v[i] = kvw[(long long)t * hd + d0 + i];
  } else {
    const unsigned char *rec = dsv4_kv_rec(comp, tk.seq, sel[(long long)t * sel_ld + r - window]);
    const float s = dsv4i_e4m3_to_f32(rec[hd / 2 + d0 / 16]);
    const unsigned int b0 = rec[d0 / 2], b1 = rec[d0 / 2 + 1];
    v[0] = (uint16_t)dsv4_fp4_val(b0 & 0xFu, s);
    v[1] = (uint16_t)dsv4_fp4_val(b0 >> 4, s);
    v[2] = (uint16_t)dsv4_fp4_val(b1 & 0xFu, s);
    v[3] = (uint16_t)dsv4_fp4_val(b1 >> 4, s);
  }
  uint16_t *k = K + ((long long)t * rows + r) * hd + d0;
  for (int i = 0; i < 4; i++) {
    k[i] = v[i];
    Kt[((long long)t * hd + d0 + i) * rows + r] = v[i];
  }
}

/** P = bf16(softmax over [scale · S row, sink[h]]) without the sink's column;
 * S f32 [n·H][rows]; one block (256 threads) per row, grid n·H. */
extern "C" __global__ void rf_softmax_sink(const float *__restrict__ S, int rows, int H,
                                           const float *__restrict__ sink, float scale,
                                           uint16_t *__restrict__ P) {
  __shared__ float red[32];
  const long long row = blockIdx.x;
  const float *s = S + row * rows;
  const float sk = sink[row % H];
  float m = sk;
  for (int r = threadIdx.x; r < rows; r += blockDim.x) m = fmaxf(m, scale * s[r]);
  for (int o = 16; o; o >>= 1) m = fmaxf(m, __shfl_xor_sync(0xFFFFFFFFu, m, o));
  if ((threadIdx.x & 31) == 0) red[threadIdx.x >> 5] = m;
  __syncthreads();
  m = red[0];
  for (int w = 1; w < (int)(blockDim.x >> 5); w++) m = fmaxf(m, red[w]);
  __syncthreads();
  float z = threadIdx.x == 0 ? expf(sk - m) : 0.0f;
  for (int r = threadIdx.x; r < rows; r += blockDim.x) z += expf(scale * s[r] - m);
  for (int o = 16; o; o >>= 1) z += __shfl_xor_sync(0xFFFFFFFFu, z, o);
  if ((threadIdx.x & 31) == 0) red[threadIdx.x >> 5] = z;
  __syncthreads();
  z = 0;
  for (int w = 0; w < (int)(blockDim.x >> 5); w++) z += red[w];
  for (int r = threadIdx.x; r < rows; r += blockDim.x)
    P[row * rows + r] = dsv4i_f32_to_bf16(expf(scale * s[r] - m) / z);
}

/* ---- unfused Markov chain (bias GEMM by cuBLASLt between these) --------------- */

/** e[i] = embed[toks[i][col]] (bf16 rows of R); grid n. */
extern "C" __global__ void rf_gather_embed(const uint16_t *__restrict__ embed,
                                           const int *__restrict__ toks, int ld_tok, int col, int R,
                                           uint16_t *__restrict__ e) {
  const int i = blockIdx.x;
  const uint16_t *src = embed + (long long)toks[(long long)i * ld_tok + col] * R;
  for (int d = threadIdx.x; d < R; d += blockDim.x) e[(long long)i * R + d] = src[d];
}

/** logits[i][v] += bias[i][v]: logits row k of each sequence's [B][V] block. */
extern "C" __global__ void rf_add_bias(float *__restrict__ logits, long long ld_seq,
                                       const float *__restrict__ bias, int V) {
  const int i = blockIdx.y;
  for (int v = blockIdx.x * blockDim.x + threadIdx.x; v < V; v += gridDim.x * blockDim.x)
    logits[i * ld_seq + v] += bias[(long long)i * V + v];
}

/** noisy = logits / T + Gumbel noise of (seed, counter, v) (T <= 0: logits). */
extern "C" __global__ void rf_noise(const float *__restrict__ logits, long long ld_seq, int V,
                                    const float *__restrict__ temp,
                                    const unsigned long long *__restrict__ seed,
                                    const unsigned long long *__restrict__ counter,
                                    float *__restrict__ noisy) {
  const int i = blockIdx.y;
  const float T = temp[i];
  for (int v = blockIdx.x * blockDim.x + threadIdx.x; v < V; v += gridDim.x * blockDim.x) {
    float x = logits[i * ld_seq + v];
    if (T > 0) {
      const float u = ((float)(rf_hash((unsigned long long)v + (counter[i] << 20), (unsigned int)seed[i]) >> 8) + 0.5f) *
                      (1.0f / 16777216.0f);
      x = x / T - logf(-logf(u));
    }
    noisy[(long long)i * V + v] = x;
  }
}

/** Block maxima (lower index first on ties) of each row: grid (n_blk, n), 256 threads. */
extern "C" __global__ void rf_argmax_part(const float *__restrict__ x, int V, float *__restrict__ pv,
                                          int *__restrict__ pi) {
  __shared__ float sv[256];
  __shared__ int si[256];
  const int i = blockIdx.y;
  float best = -INFINITY;
  int bi = 0x7FFFFFFF;
  for (int v = blockIdx.x * blockDim.x + threadIdx.x; v < V; v += gridDim.x * blockDim.x) {
    const float y = x[(long long)i * V + v];
    if (y > best) best = y, bi = v;
  }
  sv[threadIdx.x] = best, si[threadIdx.x] = bi;
  __syncthreads();
  for (int o = 128; o; o >>= 1) {
    if ((int)threadIdx.x < o) {
      const float b = sv[threadIdx.x + o];
      const int j = si[threadIdx.x + o];
      if (b > sv[threadIdx.x] || (b == sv[threadIdx.x] && j < si[threadIdx.x]))
        sv[threadIdx.x] = b, si[threadIdx.x] = j;
    }
    __syncthreads();
  }
  if (threadIdx.x == 0) {
    pv[(long long)i * gridDim.x + blockIdx.x] = sv[0];
    pi[(long long)i * gridDim.x + blockIdx.x] = si[0];
  }
}

/** toks[i][col] = the winner of row i's n_blk block maxima; grid n, 32 threads. */
extern "C" __global__ void rf_argmax_final(const float *__restrict__ pv, const int *__restrict__ pi,
                                           int n_blk, int *__restrict__ toks, int ld_tok, int col) {
  const int i = blockIdx.x;
  float best = -INFINITY;
  int bi = 0x7FFFFFFF;
  for (int b = threadIdx.x; b < n_blk; b += 32) {
    const float y = pv[(long long)i * n_blk + b];
    const int j = pi[(long long)i * n_blk + b];
    if (y > best || (y == best && j < bi)) best = y, bi = j;
  }
  for (int o = 16; o; o >>= 1) {
    const float y = __shfl_xor_sync(0xFFFFFFFFu, best, o);
    const int j = __shfl_xor_sync(0xFFFFFFFFu, bi, o);
    if (y > best || (y == best && j < bi)) best = y, bi = j;
  }
  if (threadIdx.x == 0) toks[(long long)i * ld_tok + col] = bi;
}
