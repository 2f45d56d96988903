/*
 * Sparse attention with sink, the default ("tiled") decode kernel: one
 * launch per slice of tokens, every thread block of it short, so that a
 * single query fills the GPU (issue: batch 1 ran 40 blocks for ~46 us).
 * Same rounding points as the reference (lib/cpu/attn_sparse.c): fp32
 * scores, each 64-entry block's probabilities rounded to bf16 relative to
 * the running max after that block, the fp32 recurrences acc·f + blk and
 * sum·f + Σp in block order, the sink, bf16(acc / sum). Only fp32 sums run
 * in another (fixed) order: the dot products on mma.sync with a fixed
 * 4-way split of the dims, Σp over a fixed tree, P·V on mma.sync.
 *
 * Two kinds of thread blocks in one grid (all score blocks first):
 *   score block  (token, 32 entries, 16 heads): s = (q·kv)·scale for its
 *                entries (records decoded straight into mma fragments, the
 *                dims split over the 4 warps, partial dots summed in warp
 *                order), written to the workspace; then a flag;
 *   output block (token, 16 heads, 32 dims): stages the 32-dim slice of
 *                every entry of the row in shared memory (cp.async) while the
 *                score blocks run, waits for the flags of its token's score
 *                blocks, forms every block's max, running max, p (bf16 for
 *                P·V, fp32 for Σp) from the scores, then runs the reference's
 *                recurrence over the blocks with P·V on mma.sync and writes
 *                its 16 x 32 outputs.
 * An output block waits only for blocks earlier in the grid, which never
 * wait, so the wait ends (a wait of 2^26 polls, seconds, traps instead).
 * Nothing depends on the number of tokens, the grid or the schedule: a
 * token's bits are the same alone or in a batch (batch invariant).
 * Host side: lib/gpu/attn_sparse.c; design notes: docs/gpu-attention.md.
 */
#include "attn_rows.cuh"
#include "mma.cuh"

#define BLK DSV4I_GPU_ATTN_BLOCK /* entries per online-softmax block */
#define HG 16                    /* heads per thread block (one mma row tile) */
#define RC 32                    /* entries per score block */
#define DS 32                    /* dims per output block */
#define SB 10                    /* 64-entry blocks staged at a time by an output block */
#define SE (SB * BLK)
#define RMAX 16                  /* call rows staged per output block (more: read in place) */
#define LDP (SE + 8)             /* bf16 row stride of the probability tile */
#define FLAGS DSV4I_GPU_ATTN_SPLIT_FLAGS

namespace {

struct score_smem {
  unsigned long long ptr[RC];
  int kind[RC];
  float red[4][HG][RC + 4]; /* each warp's partial dots */
};

struct out_smem {
  unsigned char raw[SE][DS];      /* the slice's codes: E4M3 (32 B) or E2M1 (16 B) */
  unsigned int scw[SE];           /* the aligned word holding the slice's scale byte(s) */
  unsigned short rowv[RMAX][DS];  /* call rows: bf16 */
  unsigned short P[HG][LDP];      /* bf16 probabilities, [head][entry] */
  unsigned short ek[SE];          /* kind | call-row offset << 2 */
  float f[HG][SB], ps[HG][SB];    /* per block: exp(m_prev − m), Σp */
  float m[HG];                    /* running max after the staged blocks */
  int any[SB];                    /* block holds an entry */
};

union attn_smem {
  score_smem s;
  out_smem o;
};

/* Flags (module memory, zero at load): flag i holds the epoch + 1 of the
 * launch whose score block i last published. The last block of a launch to
 * finish moves the epoch, so no flag needs clearing. One launch at a time
 * per loaded module (the launchers are handle-exclusive per stream). */
__device__ unsigned int g_tiled_flag[FLAGS];
__device__ unsigned int g_tiled_epoch;
__device__ unsigned int g_tiled_done;

__device__ __forceinline__ unsigned int lds32(const unsigned short *p) {
  return *(const unsigned int *)p;
}

/* An entry's bytes for 16 dims (d0 ..): fetched apart from their decode so
 * that a thread has all its loads in flight before it waits on one. */
struct raw16 {
  uint4 a, b;     /* window: a = 16 E4M3 codes; compressed: a.x, a.y = 16 E2M1; row: a, b */
  unsigned int s; /* the scale byte (window, compressed) */
};

__device__ __forceinline__ void fetch16(int kind, unsigned long long ptr, int d0, int hd, raw16 &r) {
  r.a = make_uint4(0, 0, 0, 0);
  r.b = r.a;
  r.s = 0;
  const unsigned char *rec = (const unsigned char *)ptr;
  if (kind == E_WIN) {
    unsigned int w[4];
    load_words<4>(rec + d0, w);
    r.a = make_uint4(w[0], w[1], w[2], w[3]);
    r.s = rec[hd + d0 / 32];
  } else if (kind == E_COMP) {
    const uint2 v = *(const uint2 *)(rec + d0 / 2);
    r.a.x = v.x;
    r.a.y = v.y;
    r.s = rec[hd / 2 + d0 / 16];
  } else if (kind == E_ROW) {
    const uint4 *src = (const uint4 *)((const unsigned short *)ptr + d0);
    r.a = src[0];
    r.b = src[1];
  }
}

/* 16 dims as 8 packed bf16 pairs (element 2i low), the records' values
 * (kvrec.cuh: bf16(code · scale)) */
__device__ __forceinline__ void decode16(int kind, const raw16 &r, unsigned int out[8]) {
  const unsigned int w[4] = {r.a.x, r.a.y, r.a.z, r.a.w};
  if (kind == E_WIN) {
    const float s = dsv4i_e8m0_to_f32((unsigned char)r.s);
    #pragma unroll
    for (int i = 0; i < 8; i++) {
      const unsigned int wd = w[i >> 1] >> (16 * (i & 1));
      out[i] = pack_bf16(__fmul_rn(e4m3f(wd & 0xFFu), s), __fmul_rn(e4m3f((wd >> 8) & 0xFFu), s));
    }
  } else if (kind == E_COMP) {
    const float s = dsv4i_e4m3_to_f32((unsigned char)r.s);
    #pragma unroll
    for (int i = 0; i < 8; i++) { /* byte i holds elements 2i (low nibble) and 2i + 1 */
      const unsigned int byte = (w[i >> 2] >> (8 * (i & 3))) & 0xFFu;
      out[i] = pack_bf16(__fmul_rn(dsv4i_e2m1_to_f32(byte & 0xFu), s),
                         __fmul_rn(dsv4i_e2m1_to_f32(byte >> 4), s));
    }
  } else if (kind == E_ROW) {
    out[0] = r.a.x; out[1] = r.a.y; out[2] = r.a.z; out[3] = r.a.w;
    out[4] = r.b.x; out[5] = r.b.y; out[6] = r.b.z; out[7] = r.b.w;
  } else {
    #pragma unroll
    for (int i = 0; i < 8; i++) out[i] = 0;
  }
}

/* q of heads qa / qb (null: padding head, zeros), dims d0 .. d0 + 15 */
__device__ __forceinline__ void load_q(const unsigned short *qa, const unsigned short *qb, int d0,
                                       uint4 v[4]) {
  const uint4 z = make_uint4(0, 0, 0, 0);
  v[0] = qa ? ((const uint4 *)(qa + d0))[0] : z;
  v[1] = qa ? ((const uint4 *)(qa + d0))[1] : z;
  v[2] = qb ? ((const uint4 *)(qb + d0))[0] : z;
  v[3] = qb ? ((const uint4 *)(qb + d0))[1] : z;
}

/*
 * Score block: entries e0 .. e0 + 31 of token t, heads head0 .. + 15. Warp w
 * takes the 64-dim chunks w, w + 4, ... (two at a time, every load of both
 * in flight before the first decode); lane (g, c) loads dims kc + 16c .. + 15
 * of heads g, g + 8 and of entries 8j + g (n tile j = 0..3), which is the
 * mma's k order permuted alike for q and kv. The four warps' partial dots
 * are summed in warp order, then scaled: S[t][head][e] (f32).
 */
__device__ __forceinline__ void score_block(score_smem &sm, const dsv4i_gpu_kvtab &win,
                                            const dsv4i_gpu_kvtab &comp,
                                            const dsv4i_gpu_attn_tok *__restrict__ tok, int t,
                                            int e0, int head0, int nent, int H, int hd, int window,
                                            const unsigned short *__restrict__ q,
                                            const unsigned short *__restrict__ kvw,
                                            const int *__restrict__ sel, int sel_ld, float scale,
                                            float *__restrict__ S) {
  const int tid = threadIdx.x, lane = tid & 31, wid = tid >> 5, g = lane >> 2, c = lane & 3;
  const unsigned short *qa = head0 + g < H ? q + ((long long)t * H + head0 + g) * hd : nullptr;
  const unsigned short *qb = head0 + g + 8 < H ? q + ((long long)t * H + head0 + g + 8) * hd : nullptr;
  uint4 qv[2][4]; /* the first two chunks' q, in flight while the entries resolve */
  #pragma unroll
  for (int i = 0; i < 2; i++) {
    const int kc = 64 * wid + 256 * i;
    if (kc < hd) load_q(qa, qb, kc + 16 * c, qv[i]);
  }
  if (tid < RC) {
    const dsv4i_gpu_attn_tok tk = tok[t];
    const entry_loc L = locate_entry(tk, e0 + tid, window,
                                     sel ? sel + (long long)t * sel_ld : nullptr, sel ? sel_ld : 0);
    unsigned long long p = 0;
    if (L.kind == E_ROW) {
      p = (unsigned long long)(kvw + (long long)(tk.row0 + L.idx) * hd);
    } else if (L.kind != E_NONE) {
      const dsv4i_gpu_kvtab tb = pick_tab(win, comp, L.kind == E_COMP);
      unsigned int r;
      const int page = *rec_page_slot(tb, tk.seq, L.idx, &r);
      p = (unsigned long long)rec_at(tb, page, r);
    }
    sm.ptr[tid] = p;
    sm.kind[tid] = L.kind;
  }
  __syncthreads();
  int kd[4];
  unsigned long long pt[4];
  #pragma unroll
  for (int j = 0; j < 4; j++) {
    kd[j] = sm.kind[8 * j + g];
    pt[j] = sm.ptr[8 * j + g];
  }
  float acc[4][4];
  #pragma unroll
  for (int j = 0; j < 4; j++) acc[j][0] = acc[j][1] = acc[j][2] = acc[j][3] = 0.0f;
  for (int k0 = 64 * wid; k0 < hd; k0 += 512) {
    if (k0 != 64 * wid) {
      #pragma unroll
      for (int i = 0; i < 2; i++)
        if (k0 + 256 * i < hd) load_q(qa, qb, k0 + 256 * i + 16 * c, qv[i]);
    }
    raw16 r[2][4];
    #pragma unroll
    for (int i = 0; i < 2; i++)
      #pragma unroll
      for (int j = 0; j < 4; j++)
        fetch16(k0 + 256 * i < hd ? kd[j] : E_NONE, pt[j], k0 + 256 * i + 16 * c, hd, r[i][j]);
    #pragma unroll
    for (int i = 0; i < 2; i++) {
      if (k0 + 256 * i >= hd) break;
      const unsigned int wa[8] = {qv[i][0].x, qv[i][0].y, qv[i][0].z, qv[i][0].w,
                                  qv[i][1].x, qv[i][1].y, qv[i][1].z, qv[i][1].w};
      const unsigned int wb[8] = {qv[i][2].x, qv[i][2].y, qv[i][2].z, qv[i][2].w,
                                  qv[i][3].x, qv[i][3].y, qv[i][3].z, qv[i][3].w};
      #pragma unroll
      for (int j = 0; j < 4; j++) {
        unsigned int kw[8];
        decode16(kd[j], r[i][j], kw);
        #pragma unroll
        for (int ks = 0; ks < 4; ks++) /* k 2c, 2c+1 | 2c+8, 2c+9 = dims d0 + 4ks + 0,1 | 2,3 */
          mma_bf16(acc[j], wa[2 * ks], wb[2 * ks], wa[2 * ks + 1], wb[2 * ks + 1], kw[2 * ks],
                   kw[2 * ks + 1]);
      }
    }
  }
  /* acc[j][0..1]: head g, entries 8j + 2c, + 1; acc[j][2..3]: head g + 8 */
  #pragma unroll
  for (int j = 0; j < 4; j++) {
    *(float2 *)&sm.red[wid][g][8 * j + 2 * c] = make_float2(acc[j][0], acc[j][1]);
    *(float2 *)&sm.red[wid][g + 8][8 * j + 2 * c] = make_float2(acc[j][2], acc[j][3]);
  }
  __syncthreads();
  const int h = tid >> 3, e = (tid & 7) * 4;
  if (head0 + h < H) {
    float v[4];
    #pragma unroll
    for (int i = 0; i < 4; i++) {
      float d = __fadd_rn(sm.red[0][h][e + i], sm.red[1][h][e + i]);
      d = __fadd_rn(d, sm.red[2][h][e + i]);
      d = __fadd_rn(d, sm.red[3][h][e + i]);
      v[i] = __fmul_rn(d, scale);
    }
    *(float4 *)(S + ((long long)t * H + head0 + h) * nent + e0 + e) = make_float4(v[0], v[1], v[2], v[3]);
  }
}

/* The value (bf16 bits) of staged entry e at slice dim dl (d0: the slice's first dim) */
__device__ __forceinline__ unsigned int staged_val(const out_smem &o, int e, int dl, int d0, int hd,
                                                   const unsigned short *__restrict__ kvw,
                                                   int row0) {
  const unsigned int code = o.ek[e], kind = code & 3u;
  if (kind == E_WIN) {
    const float s = dsv4i_e8m0_to_f32((unsigned char)(o.scw[e] >> (8 * ((d0 >> 5) & 3))));
    return dsv4i_f32_to_bf16(__fmul_rn(e4m3f(o.raw[e][dl]), s));
  }
  if (kind == E_COMP) {
    const unsigned int byte = o.raw[e][dl >> 1];
    const float s = dsv4i_e4m3_to_f32((unsigned char)(o.scw[e] >> (8 * (((d0 >> 4) & 3) + (dl >> 4)))));
    return dsv4i_f32_to_bf16(__fmul_rn(dsv4i_e2m1_to_f32((dl & 1) ? byte >> 4 : byte & 0xFu), s));
  }
  if (kind == E_ROW) {
    const unsigned int k = code >> 2;
    return k < RMAX ? o.rowv[k][dl] : kvw[(long long)(row0 + (int)k) * hd + d0 + dl];
  }
  return 0;
}

}  // namespace

/*
 * Grid: n·n_hg·(nent/32) score blocks, then n·n_hg·(hd/32) output blocks, of
 * 128 threads (n_hg = ceil(H / 16); nent = the index row's width rounded up
 * to 64). q: bf16 [n][H][hd] post-RoPE; kvw: bf16 [call tokens][hd] this
 * call's QDQ'd window rows; sel: int32 [n][sel_ld] compressed selection
 * (ascending, −1 padded) or 0; sink f32 [H]; S: f32 [n][H][nent] workspace;
 * o: bf16 [n][H][hd]. n·n_hg·(nent/32) <= FLAGS; hd a multiple of 128.
 */
extern "C" __global__ void __launch_bounds__(128) dsv4_k_attn_sparse_tiled_e4m3(
    dsv4i_gpu_kvtab win, dsv4i_gpu_kvtab comp, const dsv4i_gpu_attn_tok *__restrict__ tok,
    int n, int nent, int n_hg, int H, int hd, int window, const unsigned short *__restrict__ q,
    const unsigned short *__restrict__ kvw, const int *__restrict__ sel, int sel_ld, float scale,
    const float *__restrict__ sink, float *__restrict__ S, unsigned short *__restrict__ o) {
  __shared__ __align__(16) attn_smem sm;
  __shared__ unsigned int s_epoch;
  const int tid = threadIdx.x, lane = tid & 31, wid = tid >> 5, g = lane >> 2, c = lane & 3;
  const int nchunk = nent / RC, n_score = n * n_hg * nchunk;
  if (tid == 0) s_epoch = ld_acquire(&g_tiled_epoch);
  const int bid = blockIdx.x;
  if (bid < n_score) {
    const int chunk = bid % nchunk, hg = (bid / nchunk) % n_hg, t = bid / (nchunk * n_hg);
    score_block(sm.s, win, comp, tok, t, chunk * RC, hg * HG, nent, H, hd, window, q, kvw, sel,
                sel_ld, scale, S);
    __threadfence();
    __syncthreads();
    if (tid == 0) atomicExch(&g_tiled_flag[bid], s_epoch + 1u);
  } else {
    out_smem &sm_o = sm.o;
    const int nds = hd / DS, j2 = bid - n_score;
    const int ds = j2 % nds, hg = (j2 / nds) % n_hg, t = j2 / (nds * n_hg);
    const int d0 = ds * DS, head0 = hg * HG, nblk = nent / BLK;
    const dsv4i_gpu_attn_tok tk = tok[t];
    const int *sel_row = sel ? sel + (long long)t * sel_ld : nullptr;
    const int h = tid >> 3, l8 = tid & 7; /* the probabilities: head h, entries 8·l8 .. + 7 */
    const bool hv = head0 + h < H;
    float m = -1e30f; /* the reference's initial running max (head h) */
    float acc[4] = {0.0f, 0.0f, 0.0f, 0.0f}, sum0 = 0.0f, sum1 = 0.0f; /* heads g, g + 8 */
    __syncthreads(); /* s_epoch */
    const unsigned int want = s_epoch + 1u;
    for (int sb0 = 0; sb0 < nblk; sb0 += SB) {
      const int nb = nblk - sb0 < SB ? nblk - sb0 : SB;
      if (sb0) __syncthreads(); /* the previous stage is consumed */
      /* 1. stage the slice of every entry of these blocks (cp.async): the thread's
       * SE / 128 entries resolved first (their loads in flight together), then copied */
      constexpr int NJ = SE / 128;
      entry_loc L[NJ];
      #pragma unroll
      for (int j = 0; j < NJ; j++) { /* the selection loads */
        const int e = tid + 128 * j;
        L[j] = e < nb * BLK ? locate_entry(tk, sb0 * BLK + e, window, sel_row, sel ? sel_ld : 0)
                            : entry_loc{E_NONE, 0};
      }
      unsigned int rr[NJ];
      int pg[NJ];
      #pragma unroll
      for (int j = 0; j < NJ; j++) { /* the page-table loads */
        rr[j] = 0;
        pg[j] = 0;
        if (L[j].kind == E_WIN || L[j].kind == E_COMP)
          pg[j] = *rec_page_slot(pick_tab(win, comp, L[j].kind == E_COMP), tk.seq, L[j].idx, &rr[j]);
      }
      unsigned long long ep[NJ];
      int ekind[NJ], erk[NJ];
      #pragma unroll
      for (int j = 0; j < NJ; j++) {
        ekind[j] = L[j].kind;
        erk[j] = L[j].kind == E_ROW ? L[j].idx : 0;
        ep[j] = L[j].kind == E_ROW ? (unsigned long long)(kvw + (long long)(tk.row0 + L[j].idx) * hd)
                : L[j].kind == E_NONE ? 0ull
                : (unsigned long long)rec_at(pick_tab(win, comp, L[j].kind == E_COMP), pg[j], rr[j]);
      }
      #pragma unroll
      for (int j = 0; j < SE / 128; j++) {
        const int e = tid + 128 * j, kind = ekind[j], rk = erk[j];
        if (e >= nb * BLK) break;
        sm_o.ek[e] = (unsigned short)(kind | (rk << 2));
        const unsigned char *rec = (const unsigned char *)ep[j];
        if (kind == E_WIN) {
          cp_async_bytes(sm_o.raw[e], rec + d0, DS);
          cp_async4(&sm_o.scw[e], rec + hd + ((d0 / 32) & ~3));
        } else if (kind == E_COMP) {
          cp_async_bytes(sm_o.raw[e], rec + d0 / 2, DS / 2);
          cp_async4(&sm_o.scw[e], rec + hd / 2 + ((d0 / 16) & ~3));
        } else if (kind == E_ROW && rk < RMAX) {
          cp_async_bytes(sm_o.rowv[rk], rec + 2 * d0, 2 * DS);
        }
      }
      cp_async_commit();
      /* 2. the scores of this token's head group are published (first stage) */
      if (sb0 == 0) {
        const unsigned int *f = &g_tiled_flag[((long long)t * n_hg + hg) * nchunk];
        for (int i = tid; i < nchunk; i += 128) {
          unsigned int spins = 0;
          while (ld_acquire(&f[i]) != want) {
            __nanosleep(64);
            if (++spins > (1u << 26)) __trap(); /* a lost block: fail loudly, never hang */
          }
        }
      }
      __syncthreads(); /* flags seen, kinds staged */
      /* 3. block maxima, running max, p and Σp of head h (8 lanes a head) */
      const float *Sr = S + ((long long)t * H + (hv ? head0 + h : 0)) * nent + sb0 * BLK + 8 * l8;
      float sv[SB][8];
      #pragma unroll
      for (int bb = 0; bb < SB; bb++) {
        if (bb < nb && hv) {
          const float4 x0 = __ldcg((const float4 *)(Sr + bb * BLK));
          const float4 x1 = __ldcg((const float4 *)(Sr + bb * BLK + 4));
          sv[bb][0] = x0.x; sv[bb][1] = x0.y; sv[bb][2] = x0.z; sv[bb][3] = x0.w;
          sv[bb][4] = x1.x; sv[bb][5] = x1.y; sv[bb][6] = x1.z; sv[bb][7] = x1.w;
        } else {
          #pragma unroll
          for (int i = 0; i < 8; i++) sv[bb][i] = 0.0f; /* padding heads: finite, discarded */
        }
      }
      const float ninf = -__int_as_float(0x7F800000);
      #pragma unroll
      for (int bb = 0; bb < SB; bb++) {
        if (bb >= nb) break;
        const uint4 kw = *(const uint4 *)&sm_o.ek[bb * BLK + 8 * l8];
        const unsigned int kk[4] = {kw.x, kw.y, kw.z, kw.w};
        unsigned int valid = 0;
        float bmax = ninf;
        #pragma unroll
        for (int i = 0; i < 8; i++) {
          if ((kk[i >> 1] >> (16 * (i & 1))) & 3u) {
            valid |= 1u << i;
            bmax = sv[bb][i] > bmax ? sv[bb][i] : bmax;
          }
        }
        unsigned int anyv = valid; /* the block's 64 entries: the 8 lanes of a head */
        #pragma unroll
        for (int x = 1; x < 8; x <<= 1) {
          const float ob = __shfl_xor_sync(0xFFFFFFFFu, bmax, x);
          anyv |= __shfl_xor_sync(0xFFFFFFFFu, anyv, x);
          bmax = ob > bmax ? ob : bmax;
        }
        const bool any = anyv != 0;
        float f = 1.0f, psum = 0.0f;
        unsigned int pk[4] = {0, 0, 0, 0};
        if (any) {
          const float mn = bmax > m ? bmax : m;
          f = expf(__fsub_rn(m, mn));
          float p[8];
          #pragma unroll
          for (int i = 0; i < 8; i++) p[i] = (valid >> i) & 1u ? expf(__fsub_rn(sv[bb][i], mn)) : 0.0f;
          psum = p[0];
          #pragma unroll
          for (int i = 1; i < 8; i++) psum = __fadd_rn(psum, p[i]);
          #pragma unroll
          for (int x = 1; x < 8; x <<= 1) psum = __fadd_rn(psum, __shfl_xor_sync(0xFFFFFFFFu, psum, x));
          #pragma unroll
          for (int i = 0; i < 4; i++) pk[i] = pack_bf16(p[2 * i], p[2 * i + 1]);
          m = mn;
        }
        *(uint4 *)&sm_o.P[h][bb * BLK + 8 * l8] = make_uint4(pk[0], pk[1], pk[2], pk[3]);
        if (l8 == 0) {
          sm_o.f[h][bb] = f;
          sm_o.ps[h][bb] = psum;
        }
        if (tid == 0) sm_o.any[bb] = any;
      }
      if (l8 == 0) sm_o.m[h] = m;
      cp_async_wait_all();
      __syncthreads();
      /* 4. the recurrence over the blocks: warp w owns dims d0 + 8w .. + 7;
       * lane (g, c) holds heads g, g + 8 at dims 8w + 2c, + 1 */
      const int dl = 8 * wid + g;
      for (int bb = 0; bb < nb; bb++) {
        if (!sm_o.any[bb]) continue; /* no entries: an exact no-op */
        float blk[4] = {0.0f, 0.0f, 0.0f, 0.0f};
        #pragma unroll
        for (int ks = 0; ks < BLK; ks += 16) {
          const int e = bb * BLK + ks + 2 * c;
          const unsigned int a0 = lds32(&sm_o.P[g][e]), a1 = lds32(&sm_o.P[g + 8][e]);
          const unsigned int a2 = lds32(&sm_o.P[g][e + 8]), a3 = lds32(&sm_o.P[g + 8][e + 8]);
          const unsigned int b0 = staged_val(sm_o, e, dl, d0, hd, kvw, tk.row0) |
                                  staged_val(sm_o, e + 1, dl, d0, hd, kvw, tk.row0) << 16;
          const unsigned int b1 = staged_val(sm_o, e + 8, dl, d0, hd, kvw, tk.row0) |
                                  staged_val(sm_o, e + 9, dl, d0, hd, kvw, tk.row0) << 16;
          mma_bf16(blk, a0, a1, a2, a3, b0, b1);
        }
        const float f0 = sm_o.f[g][bb], f1 = sm_o.f[g + 8][bb];
        acc[0] = __fadd_rn(__fmul_rn(acc[0], f0), blk[0]);
        acc[1] = __fadd_rn(__fmul_rn(acc[1], f0), blk[1]);
        acc[2] = __fadd_rn(__fmul_rn(acc[2], f1), blk[2]);
        acc[3] = __fadd_rn(__fmul_rn(acc[3], f1), blk[3]);
        sum0 = __fadd_rn(__fmul_rn(sum0, f0), sm_o.ps[g][bb]);
        sum1 = __fadd_rn(__fmul_rn(sum1, f1), sm_o.ps[g + 8][bb]);
      }
    }
    /* 5. the sink (not scaled, not in the max), o = bf16(acc / sum) */
    #pragma unroll
    for (int hh = 0; hh < 2; hh++) {
      const int head = head0 + g + 8 * hh;
      if (head >= H) continue;
      const float sum = __fadd_rn(hh ? sum1 : sum0, expf(__fsub_rn(sink[head], sm_o.m[g + 8 * hh])));
      const unsigned int lo = dsv4i_f32_to_bf16(__fdiv_rn(acc[2 * hh], sum));
      const unsigned int hi = dsv4i_f32_to_bf16(__fdiv_rn(acc[2 * hh + 1], sum));
      *(unsigned int *)(o + ((long long)t * H + head) * hd + d0 + 8 * wid + 2 * c) = lo | hi << 16;
    }
  }
  /* the last block to finish moves the epoch for the next launch */
  __syncthreads();
  if (tid == 0) {
    __threadfence();
    if (atomicAdd(&g_tiled_done, 1u) == gridDim.x - 1) {
      g_tiled_done = 0;
      *(volatile unsigned int *)&g_tiled_epoch = s_epoch + 1u;
      __threadfence();
    }
  }
}
