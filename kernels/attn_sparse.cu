/*
 * Sparse attention with sink (spec §5.4 step 4, the CPU oracle
 * dsv4i_attn_sparse in lib/cpu/attn_sparse.c), reading the KV records in
 * place: each token's index row is its window part (ring records of
 * positions before the call, this call's QDQ'd rows) followed by its
 * compressed selection (compressed-KV records), in blocks of 64 entries.
 *
 * The reference's online softmax rounds each block's probabilities to bf16
 * relative to the running max after that block, so the work splits over
 * blocks without changing a rounding point:
 *   1. qk:      per (token, block, 64 heads): s = (q · kv) · scale (bf16
 *               mma.sync, fp32 accumulation) and each head's block max;
 *   2. pv:      per (token, block, 64 heads, 128 dims): the running max M_b
 *               (prefix max of the block maxima), p = exp(s − M_b), the
 *               block's fp32 Σp (entry order) and Σ bf16(p)·kv (mma.sync);
 *   3. combine: per (token, head) the reference's recurrence over blocks
 *               (acc·f + block, sum·f + Σp), the sink, the division.
 * Batch 1 therefore runs (row blocks × head groups × dim chunks) blocks.
 * A token with layout −B is a DSpark draft-block query (spec §6.1): its row
 * is the stage ring's slots 0 .. min(window, anchor + 1) − 1 in slot order,
 * then the B rows of its block (first = anchor + 1, row0 = the block's first
 * call row), as lib/cpu/attn_dspark.c builds it.
 * Host side: lib/gpu/attn_sparse.c.
 */
#include "kvrec.cuh"

#define BLK DSV4I_GPU_ATTN_BLOCK /* entries per online-softmax block */
#define HG 64                    /* heads per thread block (4 warps x 16) */
#define KC 64                    /* head dims per qk chunk */
#define DC 128                   /* head dims per pv block */
#define LDS (64 + 8)             /* smem row stride in bf16 (conflict-free fragments) */

namespace {

enum { E_NONE = 0, E_WIN = 1, E_ROW = 2, E_COMP = 3 };

/* Where entry e of token t's index row lives. */
__device__ void resolve_entry(const dsv4i_gpu_kvtab &win, const dsv4i_gpu_kvtab &comp,
                              const dsv4i_gpu_attn_tok &tk, int e, int window, int hd,
                              const unsigned short *kvw, const int *sel_row, int sel_ld,
                              unsigned long long *ptr, int *kind) {
  *kind = E_NONE;
  *ptr = 0;
  if (tk.layout < 0) { /* DSpark block of −layout tokens at anchor + 1 .. (spec §6.1) */
    const int anchor = tk.first - 1, nr = anchor + 1 < window ? anchor + 1 : window;
    if (e < nr) { /* ring slot e in slot order: the newest position <= anchor in it */
      *kind = E_WIN;
      *ptr = (unsigned long long)dsv4_kv_rec(win, tk.seq, anchor - ((anchor - e) % window));
    } else if (e < nr - tk.layout) { /* the block's own rows, never stored */
      *kind = E_ROW;
      *ptr = (unsigned long long)(kvw + (long long)(tk.row0 + (e - nr)) * hd);
    }
    return;
  }
  const int W = tk.layout == 0 ? window : tk.layout;
  if (e < W) {
    long long p;
    if (tk.layout == 0) {
      p = (long long)tk.pos - window + 1 + e;
    } else {
      const long long lo = tk.pos - window + 1 > 0 ? tk.pos - window + 1 : 0;
      p = lo + e <= tk.pos ? lo + e : -1;
    }
    if (p < 0) return;
    if (p >= tk.first) {
      *kind = E_ROW;
      *ptr = (unsigned long long)(kvw + (long long)(tk.row0 + (p - tk.first)) * hd);
    } else {
      *kind = E_WIN;
      *ptr = (unsigned long long)dsv4_kv_rec(win, tk.seq, p);
    }
  } else if (e - W < sel_ld) {
    const int j = sel_row[e - W];
    if (j < 0) return;
    *kind = E_COMP;
    *ptr = (unsigned long long)dsv4_kv_rec(comp, tk.seq, j);
  }
}

/* N 32-bit words from p (4-byte aligned: records of head_dim a multiple of
 * 128), in 16-byte loads where p allows (the 528 / 288 B records of the
 * release dims always do; the tiny model's 132 / 72 B ones not always). */
template <int N>
__device__ __forceinline__ void load_words(const unsigned char *p, unsigned int *w) {
  if (((unsigned long long)p & 15u) == 0) {
    #pragma unroll
    for (int j = 0; j < N / 4; j++) {
      const uint4 v = ((const uint4 *)p)[j];
      w[4 * j] = v.x; w[4 * j + 1] = v.y; w[4 * j + 2] = v.z; w[4 * j + 3] = v.w;
    }
  } else {
    #pragma unroll
    for (int j = 0; j < N; j++) w[j] = ((const unsigned int *)p)[j];
  }
}

/* Dims [d0, d0 + 32) of an entry's row as 16 packed bf16 pairs. */
__device__ __forceinline__ void load32(int kind, unsigned long long ptr, int d0, int hd,
                                       unsigned int out[16]) {
  if (kind == E_WIN) {
    const unsigned char *rec = (const unsigned char *)ptr;
    unsigned int w[8];
    load_words<8>(rec + d0, w);
    const float s = dsv4i_e8m0_to_f32(rec[hd + d0 / 32]);
    #pragma unroll
    for (int i = 0; i < 16; i++) {
      const unsigned int wd = w[i >> 1] >> (16 * (i & 1));
      out[i] = dsv4_window_val(wd & 0xFFu, s) | (dsv4_window_val((wd >> 8) & 0xFFu, s) << 16);
    }
  } else if (kind == E_COMP) {
    const unsigned char *rec = (const unsigned char *)ptr;
    unsigned int w[4];
    load_words<4>(rec + d0 / 2, w);
    const float s0 = dsv4i_e4m3_to_f32(rec[hd / 2 + d0 / 16]);
    const float s1 = dsv4i_e4m3_to_f32(rec[hd / 2 + d0 / 16 + 1]);
    #pragma unroll
    for (int i = 0; i < 16; i++) { /* byte i holds elements 2i (low nibble) and 2i + 1 */
      const unsigned int byte = (w[i >> 2] >> (8 * (i & 3))) & 0xFFu;
      const float s = i < 8 ? s0 : s1;
      out[i] = dsv4_fp4_val(byte & 0xFu, s) | (dsv4_fp4_val(byte >> 4, s) << 16);
    }
  } else if (kind == E_ROW) {
    const uint4 *src = (const uint4 *)((const unsigned short *)ptr + d0);
    #pragma unroll
    for (int j = 0; j < 4; j++) {
      const uint4 v = src[j];
      out[4 * j] = v.x; out[4 * j + 1] = v.y; out[4 * j + 2] = v.z; out[4 * j + 3] = v.w;
    }
  } else {
    #pragma unroll
    for (int i = 0; i < 16; i++) out[i] = 0;
  }
}

__device__ __forceinline__ void mma_bf16(float c[4], unsigned int a0, unsigned int a1,
                                         unsigned int a2, unsigned int a3, unsigned int b0,
                                         unsigned int b1) {
  asm volatile(
      "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, "
      "{%8,%9}, {%0,%1,%2,%3};\n"
      : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
      : "r"(a0), "r"(a1), "r"(a2), "r"(a3), "r"(b0), "r"(b1));
}

__device__ __forceinline__ unsigned int lds32(const unsigned short *p) {
  return *(const unsigned int *)p;
}

}  // namespace

/*
 * Pass 1. Grid: n · nblk · n_hg blocks of 128 threads. q: bf16 [n][H][hd]
 * post-RoPE; kvw: bf16 [call tokens][hd] this call's QDQ'd window rows;
 * sel: int32 [n][sel_ld] compressed selection (ascending, −1 padded) or 0.
 * Writes s: f32 [n][nblk][H][64] (−inf for skipped entries) and
 * bmax: f32 [n][nblk][H] (−inf for a block without entries).
 */
extern "C" __global__ void __launch_bounds__(128) dsv4_k_attn_sparse_qk_e4m3(
    dsv4i_gpu_kvtab win, dsv4i_gpu_kvtab comp, const dsv4i_gpu_attn_tok *__restrict__ tok,
    int nblk, int n_hg, int H, int hd, int window, const unsigned short *__restrict__ q,
    const unsigned short *__restrict__ kvw, const int *__restrict__ sel, int sel_ld, float scale,
    float *__restrict__ s_out, float *__restrict__ bmax) {
  __shared__ __align__(16) unsigned short Qs[HG * LDS];
  __shared__ __align__(16) unsigned short Ks[BLK * LDS];
  __shared__ unsigned long long e_ptr[BLK];
  __shared__ int e_kind[BLK];
  const int hg = blockIdx.x % n_hg, b = (blockIdx.x / n_hg) % nblk, t = blockIdx.x / (n_hg * nblk);
  const int tid = threadIdx.x, lane = tid & 31, wid = tid >> 5, g = lane >> 2, c = lane & 3;
  const dsv4i_gpu_attn_tok tk = tok[t];
  if (tid < BLK)
    resolve_entry(win, comp, tk, b * BLK + tid, window, hd, kvw,
                  sel ? sel + (long long)t * sel_ld : sel, sel ? sel_ld : 0, &e_ptr[tid], &e_kind[tid]);
  __syncthreads();
  float acc[8][4];
  #pragma unroll
  for (int i = 0; i < 8; i++) acc[i][0] = acc[i][1] = acc[i][2] = acc[i][3] = 0.0f;
  const int me = tid >> 1, half = tid & 1;
  for (int kc = 0; kc < hd; kc += KC) {
    for (int v = tid; v < HG * KC / 8; v += blockDim.x) {
      const int h = v / (KC / 8), c8 = v % (KC / 8), head = hg * HG + h;
      uint4 val = make_uint4(0, 0, 0, 0);
      if (head < H) val = *(const uint4 *)(q + ((long long)t * H + head) * hd + kc + c8 * 8);
      *(uint4 *)&Qs[h * LDS + c8 * 8] = val;
    }
    unsigned int kv[16];
    load32(e_kind[me], e_ptr[me], kc + half * 32, hd, kv);
    uint4 *dst = (uint4 *)&Ks[me * LDS + half * 32];
    #pragma unroll
    for (int j = 0; j < 4; j++) dst[j] = make_uint4(kv[4 * j], kv[4 * j + 1], kv[4 * j + 2], kv[4 * j + 3]);
    __syncthreads();
    const unsigned short *qa = Qs + (wid * 16 + g) * LDS;
    #pragma unroll
    for (int ks = 0; ks < KC; ks += 16) {
      const unsigned int a0 = lds32(qa + ks + 2 * c), a1 = lds32(qa + 8 * LDS + ks + 2 * c);
      const unsigned int a2 = lds32(qa + ks + 2 * c + 8), a3 = lds32(qa + 8 * LDS + ks + 2 * c + 8);
      #pragma unroll
      for (int nt = 0; nt < 8; nt++) {
        const unsigned short *kb = Ks + (nt * 8 + g) * LDS + ks + 2 * c;
        mma_bf16(acc[nt], a0, a1, a2, a3, lds32(kb), lds32(kb + 8));
      }
    }
    __syncthreads();
  }
  const float ninf = -__int_as_float(0x7F800000);
  #pragma unroll
  for (int r = 0; r < 2; r++) {
    const int head = hg * HG + wid * 16 + g + 8 * r;
    float m = ninf;
    float vals[16];
    #pragma unroll
    for (int nt = 0; nt < 8; nt++) {
      #pragma unroll
      for (int j = 0; j < 2; j++) {
        const int e = nt * 8 + 2 * c + j;
        const float v = e_kind[e] != E_NONE ? __fmul_rn(acc[nt][2 * r + j], scale) : ninf;
        vals[2 * nt + j] = v;
        m = v > m ? v : m;
      }
    }
    m = fmaxf(m, __shfl_xor_sync(0xFFFFFFFFu, m, 1));
    m = fmaxf(m, __shfl_xor_sync(0xFFFFFFFFu, m, 2));
    if (head < H) {
      float *so = s_out + (((long long)t * nblk + b) * H + head) * BLK;
      #pragma unroll
      for (int nt = 0; nt < 8; nt++)
        *(float2 *)(so + nt * 8 + 2 * c) = make_float2(vals[2 * nt], vals[2 * nt + 1]);
      if (c == 0) bmax[((long long)t * nblk + b) * H + head] = m;
    }
  }
}

/*
 * Pass 2. Grid: n · nblk · n_hg · (hd / 128) blocks of 128 threads. Reads s
 * and bmax of pass 1; writes psum: f32 [n][nblk][H] (Σ of the fp32
 * probabilities in entry order) and part: f32 [n][nblk][H][hd] (Σ bf16(p)·kv),
 * both relative to the running max after the block.
 */
extern "C" __global__ void __launch_bounds__(128) dsv4_k_attn_sparse_pv_e4m3(
    dsv4i_gpu_kvtab win, dsv4i_gpu_kvtab comp, const dsv4i_gpu_attn_tok *__restrict__ tok,
    int nblk, int n_hg, int H, int hd, int window, const unsigned short *__restrict__ kvw,
    const int *__restrict__ sel, int sel_ld, const float *__restrict__ s_in,
    const float *__restrict__ bmax, float *__restrict__ psum, float *__restrict__ part) {
  __shared__ __align__(16) unsigned short Ps[HG * LDS];
  __shared__ __align__(16) unsigned short Vt[DC * LDS];
  __shared__ unsigned long long e_ptr[BLK];
  __shared__ int e_kind[BLK];
  const int n_dc = hd / DC;
  int r = blockIdx.x;
  const int dc = r % n_dc; r /= n_dc;
  const int hg = r % n_hg; r /= n_hg;
  const int b = r % nblk, t = r / nblk;
  const int tid = threadIdx.x, lane = tid & 31, wid = tid >> 5, g = lane >> 2, c = lane & 3;
  const dsv4i_gpu_attn_tok tk = tok[t];
  if (tid < BLK)
    resolve_entry(win, comp, tk, b * BLK + tid, window, hd, kvw,
                  sel ? sel + (long long)t * sel_ld : sel, sel ? sel_ld : 0, &e_ptr[tid], &e_kind[tid]);
  __syncthreads();
  /* probabilities: one thread per head, entries in order (the fp32 sum's order) */
  if (tid < HG) {
    const int head = hg * HG + tid;
    float psum_h = 0.0f;
    if (head < H) {
      float M = -1e30f;
      for (int bb = 0; bb <= b; bb++) {
        const float bm = bmax[((long long)t * nblk + bb) * H + head];
        M = bm > M ? bm : M;
      }
      const float *sr = s_in + (((long long)t * nblk + b) * H + head) * BLK;
      for (int e = 0; e < BLK; e += 2) {
        unsigned int pb[2] = {0, 0};
        for (int j = 0; j < 2; j++) {
          if (e_kind[e + j] == E_NONE) continue;
          const float p = expf(__fsub_rn(sr[e + j], M));
          psum_h = __fadd_rn(psum_h, p);
          pb[j] = dsv4i_f32_to_bf16(p);
        }
        *(unsigned int *)&Ps[tid * LDS + e] = pb[0] | (pb[1] << 16);
      }
      if (dc == 0) psum[((long long)t * nblk + b) * H + head] = psum_h;
    } else {
      for (int e = 0; e < BLK; e += 2) *(unsigned int *)&Ps[tid * LDS + e] = 0u;
    }
  }
  /* V chunk transposed: Vt[d][e] */
  {
    const int me = tid >> 1, half = tid & 1;
    #pragma unroll
    for (int h2 = 0; h2 < 2; h2++) {
      unsigned int kv[16];
      const int dl = half * 64 + h2 * 32;
      load32(e_kind[me], e_ptr[me], dc * DC + dl, hd, kv);
      #pragma unroll
      for (int i = 0; i < 16; i++) {
        Vt[(dl + 2 * i) * LDS + me] = (unsigned short)(kv[i] & 0xFFFFu);
        Vt[(dl + 2 * i + 1) * LDS + me] = (unsigned short)(kv[i] >> 16);
      }
    }
  }
  __syncthreads();
  float acc[DC / 8][4];
  #pragma unroll
  for (int i = 0; i < DC / 8; i++) acc[i][0] = acc[i][1] = acc[i][2] = acc[i][3] = 0.0f;
  const unsigned short *pa = Ps + (wid * 16 + g) * LDS;
  #pragma unroll
  for (int ks = 0; ks < BLK; ks += 16) {
    const unsigned int a0 = lds32(pa + ks + 2 * c), a1 = lds32(pa + 8 * LDS + ks + 2 * c);
    const unsigned int a2 = lds32(pa + ks + 2 * c + 8), a3 = lds32(pa + 8 * LDS + ks + 2 * c + 8);
    #pragma unroll
    for (int nt = 0; nt < DC / 8; nt++) {
      const unsigned short *vb = Vt + (nt * 8 + g) * LDS + ks + 2 * c;
      mma_bf16(acc[nt], a0, a1, a2, a3, lds32(vb), lds32(vb + 8));
    }
  }
  #pragma unroll
  for (int rr = 0; rr < 2; rr++) {
    const int head = hg * HG + wid * 16 + g + 8 * rr;
    if (head >= H) continue;
    float *po = part + (((long long)t * nblk + b) * H + head) * hd + dc * DC;
    #pragma unroll
    for (int nt = 0; nt < DC / 8; nt++)
      *(float2 *)(po + nt * 8 + 2 * c) = make_float2(acc[nt][2 * rr], acc[nt][2 * rr + 1]);
  }
}

/*
 * Pass 3. Grid: n · H blocks of 128 threads (hd <= 1024). The reference's
 * recurrence over the blocks that hold entries, then the sink (not scaled,
 * not in the max) and o = bf16(acc / sum): bf16 [n][H][hd].
 */
extern "C" __global__ void __launch_bounds__(128) dsv4_k_attn_sparse_combine_f32(
    int nblk, int H, int hd, const float *__restrict__ bmax, const float *__restrict__ psum,
    const float *__restrict__ part, const float *__restrict__ sink, unsigned short *__restrict__ o) {
  const int t = blockIdx.x / H, h = blockIdx.x % H;
  float acc[8];
  #pragma unroll
  for (int i = 0; i < 8; i++) acc[i] = 0.0f;
  float m = -1e30f, sum = 0.0f;
  for (int b = 0; b < nblk; b++) {
    const long long bi = ((long long)t * nblk + b) * H + h;
    const float bm = bmax[bi];
    if (!(bm > -__int_as_float(0x7F800000))) continue; /* no entries: an exact no-op */
    const float mn = bm > m ? bm : m;
    const float f = expf(__fsub_rn(m, mn));
    sum = __fadd_rn(__fmul_rn(sum, f), psum[bi]);
    const float *pr = part + bi * hd;
    #pragma unroll
    for (int i = 0; i < 8; i++) {
      const int d = threadIdx.x + i * 128;
      if (d < hd) acc[i] = __fadd_rn(__fmul_rn(acc[i], f), pr[d]);
    }
    m = mn;
  }
  sum = __fadd_rn(sum, expf(__fsub_rn(sink[h], m)));
  unsigned short *ob = o + ((long long)t * H + h) * hd;
  #pragma unroll
  for (int i = 0; i < 8; i++) {
    const int d = threadIdx.x + i * 128;
    if (d < hd) ob[d] = (unsigned short)dsv4i_f32_to_bf16(__fdiv_rn(acc[i], sum));
  }
}
