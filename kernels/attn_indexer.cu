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
#include "mma.cuh"

#define IHD 128        /* index_head_dim the score kernel is written for */
#define MAX_IH 64      /* largest index_n_heads */
#define KT 64          /* keys per tile (4 warps x 16) */
#define QLD (IHD + 8)  /* bf16 row stride of the query tile */
#define NOFAST 1000    /* qe: an all-zero q block */
#define NANQ 2000      /* qe / qlo: a q block holding an inf or NaN */

/*
 * scores[t][i] for the visible keys i < (pos + 1) / ratio of each token:
 * Σ_h bf16(bf16(relu(bf16(q_h · k_i))) · w_h) summed in fp32 in head order,
 * rounded to bf16 (stored as f32). q: bf16 [n][ih][128], post-RoPE, before
 * the MXFP4 QDQ (done here); w: bf16 [n][ih] weights_proj output, scaled by
 * wscale and rounded to bf16 here. cand: int32 [n][cand_ld] kept candidate
 * blocks ascending, −1 padded, or 0: keys of other blocks score −inf and
 * are not computed. Grid: n · per_tok blocks of 128 threads; block (t, c)
 * takes the 64-key tiles c, c + per_tok, ... (any context length, fixed grid).
 *
 * The dots q_h · k_i run on mma.sync (bf16 in, fp32 accumulation). Both
 * sides are E2M1 codes times powers of two, so every product is exact and
 * a multiple of u = 2^(min q exponent + min k exponent − 2); when the sum of
 * |products| stays below 2^24·u (exponent spreads of q's head and of the key
 * adding up to 9 or less, all far from the fp32 range ends), every partial
 * sum in any order is exact, so the mma's result is the reference's
 * sequential fp32 dot bit for bit. (Key, head) pairs outside that bound
 * (and NaN scales or queries) take the reference's sequential loop instead.
 */
extern "C" __global__ void __launch_bounds__(128) dsv4_k_attn_index_scores_e2m1(
    dsv4i_gpu_kvtab idxk, const dsv4i_gpu_attn_tok *__restrict__ tok, int per_tok, int ih,
    int ratio, float wscale, const unsigned short *__restrict__ q,
    const unsigned short *__restrict__ w, const int *__restrict__ cand, int cand_ld, int cand_bs,
    float *__restrict__ scores, long long score_ld) {
  __shared__ __align__(16) unsigned short qb[MAX_IH * QLD];
  __shared__ float ws[MAX_IH];
  __shared__ float dots[KT][MAX_IH + 1];
  __shared__ unsigned long long kptr[KT];
  __shared__ int qe[MAX_IH * (IHD / 32)];
  __shared__ int qlo[MAX_IH], qhi[MAX_IH];
  const int t = blockIdx.x / per_tok, cblk = blockIdx.x % per_tok;
  const int tid = threadIdx.x, lane = tid & 31, wid = tid >> 5, g = lane >> 2, c = lane & 3;
  const dsv4i_gpu_attn_tok tk = tok[t];
  const long long vis = (tk.pos + 1) / ratio;
  const int n_mt = (ih + 15) / 16;
  /* index query QDQ (fp4_act_quant, 32, UE8M0): one thread per 32-block;
   * qe: the block's scale exponent, NOFAST when all its values are zero */
  for (int b = tid; b < ih * (IHD / 32); b += blockDim.x) {
    const unsigned short *src = q + ((long long)t * ih) * IHD + b * 32;
    unsigned short *dst = qb + (b / 4) * QLD + (b % 4) * 32;
    unsigned int m = 0;
    for (int j = 0; j < 32; j++) m = max(m, (unsigned int)src[j] & 0x7FFFu);
    if (m >= 0x7F80u) {
      for (int j = 0; j < 32; j++) dst[j] = (unsigned short)((src[j] & 0x8000u) | 0x7FC0u);
      qe[b] = NANQ;
      continue;
    }
    float a = dsv4i_bf16_to_f32(m);
    a = a > 0x1.8p-124f ? a : 0x1.8p-124f;
    const int e = dsv4i_ceil_log2_bits(__fmul_rn(a, 1.0f / 6.0f));
    const float inv = dsv4_pow2f(-e), s = dsv4_pow2f(e);
    unsigned int nz = 0;
    for (int j = 0; j < 32; j++) {
      dst[j] = (unsigned short)dsv4_fp4_val(dsv4i_f32_to_e2m1(__fmul_rn(dsv4i_bf16_to_f32(src[j]), inv)), s);
      nz |= dst[j] & 0x7FFFu;
    }
    qe[b] = nz ? e : NOFAST;
  }
  for (int i = tid; i < (n_mt * 16 - ih) * QLD; i += blockDim.x) qb[ih * QLD + i] = 0;
  for (int h = tid; h < ih; h += blockDim.x)
    ws[h] = dsv4i_bf16_to_f32(dsv4i_f32_to_bf16(__fmul_rn(dsv4i_bf16_to_f32(w[(long long)t * ih + h]), wscale)));
  __syncthreads();
  /* per head: the scale exponents of its nonzero q blocks (a nonzero q
   * value of block b is a multiple of 2^(qe[b] − 1), at most 12 such units),
   * lowest and highest; qlo = NANQ when a block is not finite */
  for (int h = tid; h < ih; h += blockDim.x) {
    int lo = NOFAST, hi = -NOFAST;
    bool bad = false;
    for (int b = 0; b < IHD / 32; b++) {
      const int e = qe[h * (IHD / 32) + b];
      bad |= e == NANQ;
      if (e == NOFAST || e == NANQ) continue;
      lo = min(lo, e);
      hi = max(hi, e);
    }
    if (hi < lo) lo = hi = 0; /* all zero: exact zeros */
    qlo[h] = bad ? NANQ : lo;
    qhi[h] = hi;
  }
  __syncthreads();
  const int *cr = cand ? cand + (long long)t * cand_ld : cand;
  for (long long base = (long long)cblk * KT; base < vis; base += (long long)per_tok * KT) {
    /* the tile's keys: visible and candidate, or skipped (null) */
    if (tid < KT) {
      const long long i = base + tid;
      bool keep = i < vis;
      if (keep && cr) { /* binary search of block i / cand_bs among the kept blocks (−1 = end) */
        const long long blk = i / cand_bs;
        int lo = 0, hi = cand_ld;
        while (lo < hi) {
          const int mid = (lo + hi) >> 1;
          const int v = cr[mid];
          if (v >= 0 && v < blk) lo = mid + 1; else hi = mid;
        }
        keep = lo < cand_ld && cr[lo] == blk;
      }
      kptr[tid] = keep ? (unsigned long long)dsv4_kv_rec(idxk, tk.seq, i) : 0ull;
    }
    __syncthreads();
    /* dots of the warp's 16 keys (two n tiles) with every head: lane (g, c)
     * loads dims kc + 16c .. + 15 of key 16w + 8nt + g (the mma's k order
     * permuted the same way for q and k) */
    float acc[MAX_IH / 16][2][4];
    #pragma unroll
    for (int mt = 0; mt < MAX_IH / 16; mt++)
      #pragma unroll
      for (int nt = 0; nt < 2; nt++) acc[mt][nt][0] = acc[mt][nt][1] = acc[mt][nt][2] = acc[mt][nt][3] = 0.0f;
    #pragma unroll
    for (int kc = 0; kc < IHD; kc += 64) {
      const int d0 = kc + 16 * c;
      unsigned int kb[2][8];
      #pragma unroll
      for (int nt = 0; nt < 2; nt++) {
        const unsigned char *rec = (const unsigned char *)kptr[wid * 16 + nt * 8 + g];
        if (rec) {
          const unsigned int w0 = ((const unsigned int *)(rec + d0 / 2))[0];
          const unsigned int w1 = ((const unsigned int *)(rec + d0 / 2))[1];
          const float s = dsv4i_e8m0_to_f32(rec[IHD / 2 + d0 / 32]);
          #pragma unroll
          for (int i = 0; i < 8; i++) { /* byte i: elements 2i (low nibble), 2i + 1 */
            const unsigned int byte = ((i < 4 ? w0 : w1) >> (8 * (i & 3))) & 0xFFu;
            kb[nt][i] = pack_bf16(__fmul_rn(dsv4i_e2m1_to_f32(byte & 0xFu), s),
                                  __fmul_rn(dsv4i_e2m1_to_f32(byte >> 4), s));
          }
        } else {
          #pragma unroll
          for (int i = 0; i < 8; i++) kb[nt][i] = 0u;
        }
      }
      #pragma unroll
      for (int mt = 0; mt < MAX_IH / 16; mt++) {
        if (mt >= n_mt) break;
        const uint4 *ra = (const uint4 *)(qb + (mt * 16 + g) * QLD + d0);
        const uint4 *rb = (const uint4 *)(qb + (mt * 16 + g + 8) * QLD + d0);
        const uint4 x0 = ra[0], x1 = ra[1], y0 = rb[0], y1 = rb[1];
        const unsigned int wa[8] = {x0.x, x0.y, x0.z, x0.w, x1.x, x1.y, x1.z, x1.w};
        const unsigned int wb[8] = {y0.x, y0.y, y0.z, y0.w, y1.x, y1.y, y1.z, y1.w};
        #pragma unroll
        for (int ks = 0; ks < 4; ks++)
          #pragma unroll
          for (int nt = 0; nt < 2; nt++)
            mma_bf16(acc[mt][nt], wa[2 * ks], wb[2 * ks], wa[2 * ks + 1], wb[2 * ks + 1],
                     kb[nt][2 * ks], kb[nt][2 * ks + 1]);
      }
    }
    /* acc[mt][nt][j]: head 16mt + g (+ 8 for j >= 2), key 16w + 8nt + 2c + (j & 1) */
    #pragma unroll
    for (int mt = 0; mt < MAX_IH / 16; mt++) {
      if (mt >= n_mt) break;
      #pragma unroll
      for (int nt = 0; nt < 2; nt++)
        #pragma unroll
        for (int j = 0; j < 4; j++)
          dots[wid * 16 + nt * 8 + 2 * c + (j & 1)][mt * 16 + g + 8 * (j >> 1)] = acc[mt][nt][j];
    }
    __syncthreads();
    if (tid < KT && base + tid < vis) {
      const long long i = base + tid;
      const unsigned char *rec = (const unsigned char *)kptr[tid];
      float key = -__int_as_float(0x7F800000);
      if (rec) {
        int klo = 1000, khi = -1000;
        bool nan_scale = false;
        for (int b = 0; b < IHD / 32; b++) {
          const int e = rec[IHD / 2 + b];
          nan_scale |= e == 0xFF;
          klo = min(klo, e - 127);
          khi = max(khi, e - 127);
        }
        /* per head: the mma's dot when the bound holds, else the reference's
         * sequential one; then the head sum in head order */
        float total = 0.0f;
        for (int h = 0; h < ih; h++) {
          float d;
          if (!nan_scale && qlo[h] != NANQ && (qhi[h] - qlo[h]) + (khi - klo) <= 9 &&
              qlo[h] + klo - 2 >= -100 && qhi[h] + khi <= 100) {
            d = dots[tid][h];
          } else {
            const unsigned short *qh = qb + h * QLD;
            d = 0.0f;
            for (int j = 0; j < IHD; j++) {
              const float kv = dsv4i_bf16_to_f32(dsv4_fp4_val(rec[j / 2] >> (4 * (j & 1)),
                                                               dsv4i_e8m0_to_f32(rec[IHD / 2 + j / 32])));
              d = __fadd_rn(d, __fmul_rn(dsv4i_bf16_to_f32(qh[j]), kv));
            }
          }
          float v = dsv4i_bf16_to_f32(dsv4i_f32_to_bf16(d));
          v = v > 0.0f ? v : 0.0f;
          total = __fadd_rn(total, dsv4i_bf16_to_f32(dsv4i_f32_to_bf16(__fmul_rn(v, ws[h]))));
        }
        key = dsv4i_bf16_to_f32(dsv4i_f32_to_bf16(total));
      }
      scores[(long long)t * score_ld + i] = key;
    }
    __syncthreads();
  }
}

namespace {

/* order-preserving u32 of a float: larger value, larger key; −0 == +0 */
__device__ __forceinline__ unsigned int order_key(float f) {
  unsigned int u = __float_as_uint(f);
  u = u == 0x80000000u ? 0u : u;
  return (u & 0x80000000u) ? ~u : (u | 0x80000000u);
}

/*
 * The k best of key[0, n) (larger first, equal keys: lower index first)
 * written ascending to out[0, k): radix select of the k-th best 32-bit
 * order key, 8 bits per pass over the keys still tied with the prefix
 * (warp-aggregated histogram: __match_any_sync, one shared atomic per
 * distinct digit of a warp), stopping once the tied keys agree on every
 * lower bit (the scores are bf16 values: two passes); then warp w takes the
 * w-th contiguous chunk of keys: a counting pass (keys above the k-th, keys
 * equal to it), the warps' offsets in warp order, and a writing pass that
 * places each selected key by ballot. Every pass keeps TK_U loads of a
 * thread in flight before it uses one (the scores come from L2: one wait per
 * TK_U keys, not per key). map: NULL, or int32 [n]: write map[i] for key i
 * (ascending map: the output stays ascending). The whole block calls it;
 * blockDim.x a multiple of 32, at most 1024.
 */
#define TK_U 16
__device__ __forceinline__ void block_topk(const float *key, long long n, int k, int *out,
                                           const int *map) {
  __shared__ unsigned int hist[256];
  __shared__ unsigned int s_prefix, s_or, s_and;
  __shared__ int s_kk, s_done;
  __shared__ int w_cnt[32][2], w_off[32], w_take[32];
  const int tid = threadIdx.x, lane = tid & 31, wid = tid >> 5, bd = blockDim.x, nw = bd >> 5;
  unsigned int prefix = 0, mask = 0;
  int kk = k;
  for (int shift = 24; shift >= 0; shift -= 8) {
    for (int b = tid; b < 256; b += bd) hist[b] = 0;
    if (tid == 0) {
      s_or = 0u;
      s_and = 0xFFFFFFFFu;
    }
    __syncthreads();
    const unsigned int low = (1u << shift) - 1u; /* the bits below this digit */
    const bool check = shift == 16;              /* where bf16 keys end */
    for (long long i0 = 0; i0 < n; i0 += (long long)bd * TK_U) { /* warp-uniform trip count */
      unsigned int uu[TK_U];
      #pragma unroll
      for (int j = 0; j < TK_U; j++) {
        const long long i = i0 + (long long)j * bd + tid;
        uu[j] = i < n ? order_key(key[i]) : 0u;
      }
      #pragma unroll
      for (int j = 0; j < TK_U; j++) {
        const unsigned int u = uu[j];
        const bool m = i0 + (long long)j * bd + tid < n && (u & mask) == prefix;
        const unsigned int bin = m ? (u >> shift) & 255u : 256u;
        const unsigned int peers = __match_any_sync(0xFFFFFFFFu, bin);
        if (m && lane == __ffs(peers) - 1) atomicAdd(&hist[bin], (unsigned int)__popc(peers));
        if (check) {
          const unsigned int o = __reduce_or_sync(0xFFFFFFFFu, m ? (u & low) : 0u);
          const unsigned int a = __reduce_and_sync(0xFFFFFFFFu, m ? (u & low) : 0xFFFFFFFFu);
          if (lane == 0 && o) atomicOr(&s_or, o);
          if (lane == 0 && a != 0xFFFFFFFFu) atomicAnd(&s_and, a);
        }
      }
    }
    __syncthreads();
    if (tid == 0) {
      unsigned int cum = 0;
      for (int b = 255; b >= 0; b--) {
        if (cum + hist[b] >= (unsigned int)kk) {
          s_prefix = prefix | ((unsigned int)b << shift);
          s_kk = kk - (int)cum;
          break;
        }
        cum += hist[b];
      }
      /* every key tied with the prefix has the same lower bits: the k-th is known */
      s_done = check && (s_or & low) == (s_and & low);
      if (s_done) s_prefix |= s_and & low;
    }
    __syncthreads();
    prefix = s_prefix;
    kk = s_kk;
    const int done = s_done;
    mask |= 255u << shift;
    __syncthreads();
    if (done) {
      mask = 0xFFFFFFFFu;
      break;
    }
  }
  /* prefix: the k-th best key; take all above it and the first kk equal, in index order */
  const long long chunk = ((n + nw - 1) / nw + 31) / 32 * 32;
  const long long w0 = (long long)wid * chunk, w1 = w0 + chunk < n ? w0 + chunk : n;
  int gt = 0, eq = 0;
  for (long long b0 = w0; b0 < w1; b0 += 32 * TK_U) {
    unsigned int uu[TK_U];
    #pragma unroll
    for (int j = 0; j < TK_U; j++) {
      const long long i = b0 + 32 * j + lane;
      uu[j] = i < w1 ? order_key(key[i]) : 0u;
    }
    #pragma unroll
    for (int j = 0; j < TK_U; j++) {
      const bool in = b0 + 32 * j + lane < w1;
      gt += __popc(__ballot_sync(0xFFFFFFFFu, in && uu[j] > prefix));
      eq += __popc(__ballot_sync(0xFFFFFFFFu, in && uu[j] == prefix));
    }
  }
  if (lane == 0) {
    w_cnt[wid][0] = gt;
    w_cnt[wid][1] = eq;
  }
  __syncthreads();
  if (tid == 0) { /* warp order: equal keys before a warp's chunk, selected keys before it */
    int eb = 0, sb = 0;
    for (int w = 0; w < nw; w++) {
      int take = kk - eb;
      take = take < 0 ? 0 : take > w_cnt[w][1] ? w_cnt[w][1] : take;
      w_take[w] = take;
      w_off[w] = sb;
      sb += w_cnt[w][0] + take;
      eb += w_cnt[w][1];
    }
  }
  __syncthreads();
  const unsigned int lt = (1u << lane) - 1u;
  int o = w_off[wid], seen = 0;
  const int take = w_take[wid];
  for (long long b0 = w0; b0 < w1; b0 += 32 * TK_U) {
    unsigned int uu[TK_U];
    #pragma unroll
    for (int j = 0; j < TK_U; j++) {
      const long long i = b0 + 32 * j + lane;
      uu[j] = i < w1 ? order_key(key[i]) : 0u;
    }
    #pragma unroll
    for (int j = 0; j < TK_U; j++) {
      const long long i = b0 + 32 * j + lane;
      const bool in = i < w1, e = in && uu[j] == prefix;
      const unsigned int eb = __ballot_sync(0xFFFFFFFFu, e);
      const bool tk = (in && uu[j] > prefix) || (e && seen + __popc(eb & lt) < take);
      const unsigned int sb = __ballot_sync(0xFFFFFFFFu, tk);
      if (tk) out[o + __popc(sb & lt)] = map ? map[i] : (int)i;
      o += __popc(sb);
      seen += __popc(eb);
    }
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
  const long long n = mode == 1 ? (vis + bs - 1) / bs : vis;
  const int k = n < k_max ? (int)n : k_max;
  int *row = out + (long long)t * out_ld;
  for (int i = k + threadIdx.x; i < out_ld; i += blockDim.x) row[i] = -1;
  if (k == n) { /* every key (block) is selected, in index order: no scores to read */
    for (int i = threadIdx.x; i < k; i += blockDim.x) row[i] = i;
    return;
  }
  if (mode == 1) {
    float *bk = bws + (long long)t * bws_ld;
    for (long long b = threadIdx.x; b < n; b += blockDim.x) {
      float m = key[b * bs];
      for (long long i = b * bs + 1; i < (b + 1) * bs && i < vis; i++) m = key[i] > m ? key[i] : m;
      bk[b] = b == (vis - 1) / bs ? __int_as_float(0x7F800000) : m;
    }
    __syncthreads();
    key = bk;
  }
  block_topk(key, n, k, row, nullptr);
}

/*
 * Mode 0 over several blocks per token, for long rows (lib/gpu/attn_indexer.c
 * picks it from score_ld and k_max alone): part (p, t) selects the best
 * min(k_max, len) keys of its chunk [p·chunk, p·chunk + len) of the visible
 * keys with the same order (larger first, equal keys: lower index first) and
 * writes their indices, ascending, and their scores at [t][p][0, k_max) of
 * cidx / ckey; chunk >= k_max, so every chunk before the last visible one
 * gives exactly k_max and the candidates of a token are one contiguous,
 * ascending list. The merge then selects the best k of that list: the global
 * best k are the best k of the chunks' best k, so the selection is exactly
 * the one-block kernel's. Tokens with vis <= k_max are left to the merge
 * (every key selected). Grid (parts, n), 512 threads.
 */
extern "C" __global__ void __launch_bounds__(512, 1) dsv4_k_attn_topk_part_f32(
    const dsv4i_gpu_attn_tok *__restrict__ tok, int ratio, const float *__restrict__ scores,
    long long score_ld, int k_max, long long chunk, int *__restrict__ cidx,
    float *__restrict__ ckey) {
  const int p = blockIdx.x, t = blockIdx.y, parts = gridDim.x;
  const long long vis = (tok[t].pos + 1) / ratio, b0 = (long long)p * chunk;
  if (vis <= k_max || b0 >= vis) return;
  const long long len = vis - b0 < chunk ? vis - b0 : chunk;
  const int kp = len < k_max ? (int)len : k_max;
  int *ci = cidx + ((long long)t * parts + p) * k_max;
  float *ck = ckey + ((long long)t * parts + p) * k_max;
  const float *key = scores + (long long)t * score_ld + b0;
  if (kp == len) { /* the last, short chunk: all of it */
    for (int i = threadIdx.x; i < kp; i += blockDim.x) ci[i] = (int)(b0 + i), ck[i] = key[i];
    return;
  }
  block_topk(key, len, kp, ci, nullptr);
  __syncthreads(); /* ci (positions in the chunk) written by the whole block */
  for (int i = threadIdx.x; i < kp; i += blockDim.x) {
    const int j = ci[i];
    ck[i] = key[j];
    ci[i] = (int)(b0 + j);
  }
}

/* The merge of dsv4_k_attn_topk_part_f32's candidates: out int32 [n][out_ld],
 * the top min(k_max, vis) ascending, then −1. Grid n, 512 threads. */
extern "C" __global__ void __launch_bounds__(512, 1) dsv4_k_attn_topk_merge_f32(
    const dsv4i_gpu_attn_tok *__restrict__ tok, int ratio, int k_max, int parts, long long chunk,
    const int *__restrict__ cidx, const float *__restrict__ ckey, int *__restrict__ out,
    int out_ld) {
  const int t = blockIdx.x;
  const long long vis = (tok[t].pos + 1) / ratio;
  const int k = vis < k_max ? (int)vis : k_max;
  int *row = out + (long long)t * out_ld;
  for (int i = k + threadIdx.x; i < out_ld; i += blockDim.x) row[i] = -1;
  if (k == vis) { /* every key selected (the parts wrote nothing) */
    for (int i = threadIdx.x; i < k; i += blockDim.x) row[i] = i;
    return;
  }
  const long long last = (vis - 1) / chunk, tail = vis - last * chunk;
  const long long m = last * k_max + (tail < k_max ? tail : k_max);
  const long long base = (long long)t * parts * k_max;
  block_topk(ckey + base, m, k, row, cidx + base);
}
