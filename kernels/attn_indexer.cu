/*
 * Indexer selection (spec §5.4 3b steps 2-8): bf16 index scores with the
 * reference's three rounding points, candidate masking, candidate blocks of
 * the candidate source, and top-k with the lower-index tie rule (spec §8.2),
 * for any number of visible keys. Host side: lib/gpu/attn_indexer.c.
 *
 * Scores are bit-identical to the CPU oracle (lib/cpu/attn_indexer.c): each
 * head's dot runs sequentially over the 128 dims with separate multiplies
 * and adds, exactly its order, so the selection is exact too.
 */
#include "kvrec.cuh"

#define IHD 128        /* index_head_dim the score kernel is written for */
#define MAX_IH 64      /* largest index_n_heads */

/*
 * scores[t][i] for the visible keys i < (pos + 1) / ratio of each token:
 * Σ_h bf16(bf16(relu(bf16(q_h · k_i))) · w_h) summed in fp32 in head order,
 * rounded to bf16 (stored as f32). q: bf16 [n][ih][128], post-RoPE, before
 * the MXFP4 QDQ (done here); w: bf16 [n][ih] weights_proj output, scaled by
 * wscale and rounded to bf16 here. cand: int32 [n][cand_ld] kept candidate
 * blocks ascending, −1 padded, or 0: keys of other blocks score −inf.
 * Grid: n · per_tok blocks of 128 threads; block (t, c) takes keys
 * c·128 + tid, stepping per_tok·128 (any context length, fixed grid).
 */
extern "C" __global__ void __launch_bounds__(128) dsv4_k_attn_index_scores_e2m1(
    dsv4i_gpu_kvtab idxk, const dsv4i_gpu_attn_tok *__restrict__ tok, int per_tok, int ih,
    int ratio, float wscale, const unsigned short *__restrict__ q,
    const unsigned short *__restrict__ w, const int *__restrict__ cand, int cand_ld, int cand_bs,
    float *__restrict__ scores, long long score_ld) {
  __shared__ float qs[MAX_IH * IHD];
  __shared__ float ws[MAX_IH];
  const int t = blockIdx.x / per_tok, c = blockIdx.x % per_tok;
  const dsv4i_gpu_attn_tok tk = tok[t];
  const long long vis = (tk.pos + 1) / ratio;
  /* index query QDQ (fp4_act_quant, 32, UE8M0): one thread per 32-block */
  for (int b = threadIdx.x; b < ih * (IHD / 32); b += blockDim.x) {
    const unsigned short *src = q + ((long long)t * ih) * IHD + b * 32;
    unsigned int m = 0;
    for (int j = 0; j < 32; j++) m = max(m, (unsigned int)src[j] & 0x7FFFu);
    if (m >= 0x7F80u) {
      for (int j = 0; j < 32; j++) qs[b * 32 + j] = __uint_as_float((((unsigned int)src[j] & 0x8000u) << 16) | 0x7FC00000u);
      continue;
    }
    float a = dsv4i_bf16_to_f32(m);
    a = a > 0x1.8p-124f ? a : 0x1.8p-124f;
    const int e = dsv4i_ceil_log2_bits(__fmul_rn(a, 1.0f / 6.0f));
    const float inv = dsv4_pow2f(-e), s = dsv4_pow2f(e);
    for (int j = 0; j < 32; j++)
      qs[b * 32 + j] = dsv4i_bf16_to_f32(dsv4_fp4_val(dsv4i_f32_to_e2m1(__fmul_rn(dsv4i_bf16_to_f32(src[j]), inv)), s));
  }
  for (int h = threadIdx.x; h < ih; h += blockDim.x)
    ws[h] = dsv4i_bf16_to_f32(dsv4i_f32_to_bf16(__fmul_rn(dsv4i_bf16_to_f32(w[(long long)t * ih + h]), wscale)));
  __syncthreads();
  for (long long i = (long long)c * blockDim.x + threadIdx.x; i < vis; i += (long long)per_tok * blockDim.x) {
    float key = -__int_as_float(0x7F800000);
    bool keep = true;
    if (cand) { /* binary search of block i / cand_bs among the kept blocks (−1 = end) */
      const int *cr = cand + (long long)t * cand_ld;
      const long long blk = i / cand_bs;
      int lo = 0, hi = cand_ld;
      while (lo < hi) {
        const int mid = (lo + hi) >> 1;
        const int v = cr[mid];
        if (v >= 0 && v < blk) lo = mid + 1; else hi = mid;
      }
      keep = lo < cand_ld && cr[lo] == blk;
    }
    if (keep) {
      const unsigned char *rec = dsv4_kv_rec(idxk, tk.seq, i);
      float kf[IHD];
      #pragma unroll
      for (int j = 0; j < IHD / 8; j++) {
        const unsigned int wd = ((const unsigned int *)rec)[j];
        const float s = dsv4i_e8m0_to_f32(rec[IHD / 2 + j / 4]);
        #pragma unroll
        for (int u = 0; u < 8; u++) kf[8 * j + u] = dsv4i_bf16_to_f32(dsv4_fp4_val(wd >> (4 * u), s));
      }
      float total = 0.0f;
      for (int h = 0; h < ih; h++) {
        const float *qh = qs + h * IHD;
        float dot = 0.0f;
        #pragma unroll
        for (int j = 0; j < IHD; j++) dot = __fadd_rn(dot, __fmul_rn(qh[j], kf[j]));
        float v = dsv4i_bf16_to_f32(dsv4i_f32_to_bf16(dot));
        v = v > 0.0f ? v : 0.0f;
        total = __fadd_rn(total, dsv4i_bf16_to_f32(dsv4i_f32_to_bf16(__fmul_rn(v, ws[h]))));
      }
      key = dsv4i_bf16_to_f32(dsv4i_f32_to_bf16(total));
    }
    scores[(long long)t * score_ld + i] = key;
  }
}

namespace {

/* order-preserving u32 of a float: larger value, larger key; −0 == +0 */
__device__ __forceinline__ unsigned int order_key(float f) {
  unsigned int u = __float_as_uint(f);
  u = u == 0x80000000u ? 0u : u;
  return (u & 0x80000000u) ? ~u : (u | 0x80000000u);
}

/* exclusive block-wide prefix sum of v (blockDim.x a multiple of 32, <= 1024):
 * (.x the exclusive sum, .y the block's total). Uses sh[32]; ends with
 * __syncthreads. */
__device__ __forceinline__ int2 block_scan(int v, int *sh) {
  const int lane = threadIdx.x & 31, wid = threadIdx.x >> 5, nw = blockDim.x >> 5;
  int x = v;
  for (int o = 1; o < 32; o <<= 1) {
    const int y = __shfl_up_sync(0xFFFFFFFFu, x, o);
    if (lane >= o) x += y;
  }
  if (lane == 31) sh[wid] = x;
  __syncthreads();
  if (wid == 0) {
    int s = lane < nw ? sh[lane] : 0;
    for (int o = 1; o < 32; o <<= 1) {
      const int y = __shfl_up_sync(0xFFFFFFFFu, s, o);
      if (lane >= o) s += y;
    }
    sh[lane] = s; /* inclusive over warps */
  }
  __syncthreads();
  const int2 r = make_int2(x - v + (wid > 0 ? sh[wid - 1] : 0), sh[nw - 1]);
  __syncthreads();
  return r;
}

/*
 * The k best of key[0, n) (larger first, equal keys: lower index first)
 * written ascending to out[0, k): radix select of the k-th best 32-bit
 * order key (4 passes of 8 bits over the keys still tied with the prefix),
 * then one ordered pass that keeps every key above the threshold and the
 * first ones equal to it. The whole block calls it.
 */
__device__ __forceinline__ void block_topk(const float *key, long long n, int k, int *out) {
  __shared__ unsigned int hist[256];
  __shared__ unsigned int s_prefix;
  __shared__ int s_kk;
  __shared__ int scan_sh[32];
  unsigned int prefix = 0, mask = 0;
  int kk = k;
  for (int shift = 24; shift >= 0; shift -= 8) {
    for (int b = threadIdx.x; b < 256; b += blockDim.x) hist[b] = 0;
    __syncthreads();
    for (long long i = threadIdx.x; i < n; i += blockDim.x) {
      const unsigned int u = order_key(key[i]);
      if ((u & mask) == prefix) atomicAdd(&hist[(u >> shift) & 255u], 1u);
    }
    __syncthreads();
    if (threadIdx.x == 0) {
      unsigned int cum = 0;
      for (int b = 255; b >= 0; b--) {
        if (cum + hist[b] >= (unsigned int)kk) {
          s_prefix = prefix | ((unsigned int)b << shift);
          s_kk = kk - (int)cum;
          break;
        }
        cum += hist[b];
      }
    }
    __syncthreads();
    prefix = s_prefix;
    kk = s_kk;
    mask |= 255u << shift;
    __syncthreads();
  }
  /* prefix: the k-th best key; take all above it and the first kk equal */
  int eq_base = 0, out_base = 0;
  for (long long i0 = 0; i0 < n; i0 += blockDim.x) {
    const long long i = i0 + threadIdx.x;
    const unsigned int u = i < n ? order_key(key[i]) : 0u;
    const int gt = i < n && u > prefix, eq = i < n && u == prefix;
    const int2 es = block_scan(eq, scan_sh);
    const int sel = gt || (eq && eq_base + es.x < kk);
    const int2 ss = block_scan(sel, scan_sh);
    if (sel) out[out_base + ss.x] = (int)i;
    eq_base += es.y;
    out_base += ss.y;
  }
}

}  // namespace

/*
 * Selection of each token (one block per token): mode 0, the top
 * min(k_max, vis) of its visible scores (vis = (pos + 1) / ratio); mode 1,
 * the candidate blocks: block b scores max(scores[b·bs, b·bs + bs) ∩ [0,
 * vis)), the block of position vis − 1 is forced to +inf, the best
 * min(k_max, blocks) are kept. out: int32 [n][out_ld], ascending then −1.
 * bws: f32 [n][bws_ld] block scores (mode 1 only; bws_ld >= ceil(vis/bs)).
 */
extern "C" __global__ void __launch_bounds__(512, 1) dsv4_k_attn_topk_f32(
    const dsv4i_gpu_attn_tok *__restrict__ tok, int ratio, const float *__restrict__ scores,
    long long score_ld, int mode, int bs, float *__restrict__ bws, long long bws_ld, int k_max,
    int *__restrict__ out, int out_ld) {
  const int t = blockIdx.x;
  const long long vis = (tok[t].pos + 1) / ratio;
  const float *key = scores + (long long)t * score_ld;
  long long n = vis;
  if (mode == 1 && vis > 0) {
    n = (vis + bs - 1) / bs;
    float *bk = bws + (long long)t * bws_ld;
    for (long long b = threadIdx.x; b < n; b += blockDim.x) {
      float m = key[b * bs];
      for (long long i = b * bs + 1; i < (b + 1) * bs && i < vis; i++) m = key[i] > m ? key[i] : m;
      bk[b] = b == (vis - 1) / bs ? __int_as_float(0x7F800000) : m;
    }
    __syncthreads();
    key = bk;
  }
  const int k = n < k_max ? (int)n : k_max;
  int *row = out + (long long)t * out_ld;
  for (int i = k + threadIdx.x; i < out_ld; i += blockDim.x) row[i] = -1;
  if (k > 0) block_topk(key, n, k, row);
}
