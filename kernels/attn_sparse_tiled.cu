/*
 * Sparse attention with sink, the default ("tiled") decode kernel: one
 * launch per slice of tokens, every thread block of it short, so that a
 * single query fills the GPU (the split pass ran 40 blocks at batch 1).
 * Same rounding points as the reference (lib/cpu/attn_sparse.c): fp32
 * scores, each 64-entry block's probabilities rounded to bf16 relative to
 * the running max after that block, the fp32 recurrences acc·f + blk and
 * sum·f + Σp in block order, the sink, bf16(acc / sum). Only fp32 sums run
 * in another (fixed) order: the dot products on mma.sync with a fixed
 * 4-way split of the dims, Σp over a fixed tree, P·V on mma.sync.
 *
 * Two kinds of thread blocks (256 threads) in one grid, all score blocks
 * first:
 *   score block  (token, 64-entry block b, 16 heads): s = (q·kv)·scale
 *                (records decoded straight into mma fragments; warp w takes
 *                entries 32(w/4) .. + 31 and a quarter of the dims, the four
 *                partial dots summed in order), the block's max per head,
 *                published (flag 1); then the maxima of the blocks before it
 *                (flag 1 of earlier blocks), the running max M_b, f_b =
 *                exp(M_{b-1} − M_b), p = exp(s − M_b), Σp, bf16(p) to the
 *                workspace (flag 2): every exp once per token;
 *   output block (token, 16 heads, 32 dims): stages the 32-dim slice of
 *                every entry of the row in shared memory (cp.async) while the
 *                score blocks run, waits for their flag 2, then warp w takes
 *                blocks w, w + 8, ...: blk_b = bf16(P_b)·V_b on mma.sync (a
 *                lane decodes 4 dims of an entry from one shared word); the
 *                recurrence over the blocks in order, the sink, the output.
 * A block waits only for blocks earlier in the grid, which never wait for
 * later ones, so the wait ends (2^26 polls, seconds, trap instead).
 * Nothing depends on the number of tokens, the grid or the schedule: a
 * token's bits are the same alone or in a batch (batch invariant).
 * Workspace per token: P bf16 [H][nent], then f32 [H][nblk] block maxima,
 * running maxima, f and Σp. Host side: lib/gpu/attn_sparse.c; notes:
 * docs/gpu-attention.md.
 */
#include "attn_rows.cuh"
#include "mma.cuh"

#define BLK DSV4I_GPU_ATTN_BLOCK /* entries per online-softmax block */
#define HG 16                    /* heads per thread block (one mma row tile) */
#define NT 256                   /* threads per block */
#define DS 32                    /* dims per output block */
#define SB 10                    /* 64-entry blocks staged at a time by an output block */
#define SE (SB * BLK)
#define RMAX 16                  /* call rows staged per output block (more: read in place) */
#define FLAGS DSV4I_GPU_ATTN_SPLIT_FLAGS

namespace {

struct score_smem {
  unsigned long long ptr[BLK];
  int kind[BLK];
  float red[4][HG][BLK + 4]; /* the dim quarters' partial dots */
  float s[HG][BLK + 4];      /* scores */
  float mprev[HG], m[HG];
};

struct out_smem {
  unsigned char raw[SE * DS];    /* the slice's bytes per entry, ew apart: E4M3 codes (32 B),
                                  * E2M1 codes (16 B); an fp8_ds_mla RoPE slice: bf16 (64 B,
                                  * half the entries per stage) */
  float blk[SB][HG][DS];         /* bf16(P_b)·V_b */
  unsigned int scw[SE];          /* the aligned word holding the slice's scale byte(s) */
  unsigned short rowv[RMAX][DS]; /* call rows: bf16 */
  unsigned short ek[SE];         /* kind | call-row offset << 2 */
  float f[HG][SB], ps[HG][SB];   /* per block: exp(M_{b-1} − M_b), Σp */
  float mlast[HG];               /* the running max after the last block */
  int any[SB];                   /* block holds an entry */
};

union attn_smem {
  score_smem s;
  out_smem o;
};

/* Flags (module memory, zero at load): flag i holds the epoch + 1 of the
 * launch whose score block i last published its maxima (g_flag_max) and its
 * probabilities (g_flag_p). The last block of a launch to finish moves the
 * epoch, so no flag needs clearing. One launch at a time per loaded module
 * (the launchers are handle-exclusive per stream). */
__device__ unsigned int g_flag_max[FLAGS];
__device__ unsigned int g_flag_p[FLAGS];
__device__ unsigned int g_tiled_epoch;
__device__ unsigned int g_tiled_done;

__device__ __forceinline__ void wait_flag(const unsigned int *f, unsigned int want) {
  unsigned int spins = 0;
  while (ld_acquire(f) != want) {
    __nanosleep(64);
    if (++spins > (1u << 26)) __trap(); /* a lost block: fail loudly, never hang */
  }
}

/* The workspace of token t: P bf16 [H][nent], then f32 [H][nblk] x 4. */
struct ws_tok {
  unsigned short *P;
  float *bmax, *M, *F, *PS;
};
__device__ __forceinline__ ws_tok ws_of(unsigned char *ws, int t, int H, int nent) {
  const int nblk = nent / BLK;
  const long long per = (long long)H * nent * 2 + (long long)H * nblk * 16;
  unsigned char *b = ws + per * t;
  ws_tok w;
  w.P = (unsigned short *)b;
  w.bmax = (float *)(b + (long long)H * nent * 2);
  w.M = w.bmax + H * nblk;
  w.F = w.M + H * nblk;
  w.PS = w.F + H * nblk;
  return w;
}

/* An entry's bytes for 16 dims (d0 ..): fetched apart from their decode so
 * that a thread has all its loads in flight before it waits on one. */
struct raw16 {
  uint4 a, b;     /* window: a = 16 E4M3 codes; compressed: a.x, a.y = 16 E2M1; row: a, b */
  unsigned int s; /* the scale byte (window, compressed) */
};

/* MLA: window records in the fp8_ds_mla layout (8-byte aligned) with nope
 * NoPE dims, a multiple of 32: a 16-dim run is all codes or all bf16. */
template <bool MLA>
__device__ __forceinline__ void fetch16(int kind, unsigned long long ptr, int d0, int hd, int nope,
                                        raw16 &r) {
  r.a = make_uint4(0, 0, 0, 0);
  r.b = r.a;
  r.s = 0;
  const unsigned char *rec = (const unsigned char *)ptr;
  if (MLA && kind == E_WIN) {
    if (d0 >= nope) { /* 16 bf16 RoPE values */
      const uint2 *src = (const uint2 *)(rec + nope + 2 * (d0 - nope));
      const uint2 v0 = src[0], v1 = src[1], v2 = src[2], v3 = src[3];
      r.a = make_uint4(v0.x, v0.y, v1.x, v1.y);
      r.b = make_uint4(v2.x, v2.y, v3.x, v3.y);
    } else { /* 16 E4M3 codes, the UE8M0 scale of their 64-block */
      const uint2 v0 = ((const uint2 *)(rec + d0))[0], v1 = ((const uint2 *)(rec + d0))[1];
      r.a = make_uint4(v0.x, v0.y, v1.x, v1.y);
      r.s = rec[nope + 2 * (hd - nope) + d0 / 64];
    }
  } else if (kind == E_WIN) {
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
 * (kvrec.cuh: bf16(code · scale)); MLA, d0 >= nope: the bf16 RoPE values */
template <bool MLA>
__device__ __forceinline__ void decode16(int kind, const raw16 &r, int d0, int nope,
                                         unsigned int out[8]) {
  const unsigned int w[4] = {r.a.x, r.a.y, r.a.z, r.a.w};
  if (MLA && kind == E_WIN && d0 >= nope) {
    out[0] = r.a.x; out[1] = r.a.y; out[2] = r.a.z; out[3] = r.a.w;
    out[4] = r.b.x; out[5] = r.b.y; out[6] = r.b.z; out[7] = r.b.w;
  } else if (kind == E_WIN) {
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
 * Score block: entries b·64 .. + 63 of token t, heads head0 .. + 15. Warp w
 * takes entries 32·(w / 4) + 8j + g (n tile j = 0..3) and the 64-dim chunks
 * (w % 4), (w % 4) + 4, ... (two at a time, every load of both in flight
 * before the first decode); lane (g, c) loads dims kc + 16c .. + 15 of heads
 * g, g + 8 and of its entries (the mma's k order permuted alike for q and
 * kv). The dim quarters' partial dots are summed in order, then scaled.
 */
template <bool MLA>
__device__ __forceinline__ void score_block(score_smem &sm, const dsv4i_gpu_kvtab &win,
                                            const dsv4i_gpu_kvtab &comp,
                                            const dsv4i_gpu_attn_tok *__restrict__ tok, int t,
                                            int b, int hg, int n_hg, int nent, int H, int hd,
                                            int nope, int window, const unsigned short *__restrict__ q,
                                            const unsigned short *__restrict__ kvw,
                                            const int *__restrict__ sel, int sel_ld, float scale,
                                            unsigned char *ws, unsigned int want, int bid) {
  const int tid = threadIdx.x, lane = tid & 31, wid = tid >> 5, g = lane >> 2, c = lane & 3;
  const int head0 = hg * HG, eh = wid >> 2, kq = wid & 3, nblk = nent / BLK;
  const unsigned short *qa = head0 + g < H ? q + ((long long)t * H + head0 + g) * hd : nullptr;
  const unsigned short *qb = head0 + g + 8 < H ? q + ((long long)t * H + head0 + g + 8) * hd : nullptr;
  uint4 qv[2][4]; /* the first two chunks' q, in flight while the entries resolve */
  #pragma unroll
  for (int i = 0; i < 2; i++) {
    const int kc = 64 * kq + 256 * i;
    if (kc < hd) load_q(qa, qb, kc + 16 * c, qv[i]);
  }
  if (tid < BLK) {
    const dsv4i_gpu_attn_tok tk = tok[t];
    const entry_loc L = locate_entry(tk, b * BLK + tid, window,
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
    kd[j] = sm.kind[32 * eh + 8 * j + g];
    pt[j] = sm.ptr[32 * eh + 8 * j + g];
  }
  float acc[4][4];
  #pragma unroll
  for (int j = 0; j < 4; j++) acc[j][0] = acc[j][1] = acc[j][2] = acc[j][3] = 0.0f;
  for (int k0 = 64 * kq; k0 < hd; k0 += 512) {
    if (k0 != 64 * kq) {
      #pragma unroll
      for (int i = 0; i < 2; i++)
        if (k0 + 256 * i < hd) load_q(qa, qb, k0 + 256 * i + 16 * c, qv[i]);
    }
    raw16 r[2][4];
    #pragma unroll
    for (int i = 0; i < 2; i++)
      #pragma unroll
      for (int j = 0; j < 4; j++)
        fetch16<MLA>(k0 + 256 * i < hd ? kd[j] : E_NONE, pt[j], k0 + 256 * i + 16 * c, hd, nope,
                     r[i][j]);
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
        decode16<MLA>(kd[j], r[i][j], k0 + 256 * i + 16 * c, nope, kw);
        #pragma unroll
        for (int ks = 0; ks < 4; ks++) /* k 2c, 2c+1 | 2c+8, 2c+9 = dims d0 + 4ks + 0,1 | 2,3 */
          mma_bf16(acc[j], wa[2 * ks], wb[2 * ks], wa[2 * ks + 1], wb[2 * ks + 1], kw[2 * ks],
                   kw[2 * ks + 1]);
      }
    }
  }
  /* acc[j][0..1]: head g, entries 32eh + 8j + 2c, + 1; acc[j][2..3]: head g + 8 */
  #pragma unroll
  for (int j = 0; j < 4; j++) {
    *(float2 *)&sm.red[kq][g][32 * eh + 8 * j + 2 * c] = make_float2(acc[j][0], acc[j][1]);
    *(float2 *)&sm.red[kq][g + 8][32 * eh + 8 * j + 2 * c] = make_float2(acc[j][2], acc[j][3]);
  }
  __syncthreads();
  /* thread: head h, entries 4·(tid % 16) .. + 3 (16 lanes a head) */
  const int h = tid >> 4, e0 = (tid & 15) * 4;
  const bool hv = head0 + h < H;
  const ws_tok W = ws_of(ws, t, H, nent);
  const float ninf = -__int_as_float(0x7F800000);
  float sv[4];
  unsigned int valid = 0;
  float bmax = ninf;
  #pragma unroll
  for (int i = 0; i < 4; i++) {
    float d = __fadd_rn(sm.red[0][h][e0 + i], sm.red[1][h][e0 + i]);
    d = __fadd_rn(d, sm.red[2][h][e0 + i]);
    d = __fadd_rn(d, sm.red[3][h][e0 + i]);
    sv[i] = __fmul_rn(d, scale);
    if (sm.kind[e0 + i] != E_NONE) {
      valid |= 1u << i;
      bmax = sv[i] > bmax ? sv[i] : bmax;
    }
  }
  unsigned int anyv = valid;
  #pragma unroll
  for (int x = 1; x < 16; x <<= 1) {
    const float ob = __shfl_xor_sync(0xFFFFFFFFu, bmax, x);
    anyv |= __shfl_xor_sync(0xFFFFFFFFu, anyv, x);
    bmax = ob > bmax ? ob : bmax;
  }
  if ((tid & 15) == 0 && hv) W.bmax[(head0 + h) * nblk + b] = bmax;
  __threadfence();
  __syncthreads();
  if (tid == 0) atomicExch(&g_flag_max[bid], want);
  /* the maxima of the blocks before this one: thread (h, j) reads block j, j + 16, ... */
  float mp = -1e30f; /* the reference's initial running max */
  {
    const int j0 = tid & 15;
    for (int j = j0; j < b; j += 16) {
      wait_flag(&g_flag_max[bid - b + j], want);
      if (hv) {
        const float x = __ldcg(&W.bmax[(head0 + h) * nblk + j]);
        mp = x > mp ? x : mp;
      }
    }
    #pragma unroll
    for (int x = 1; x < 16; x <<= 1) {
      const float o = __shfl_xor_sync(0xFFFFFFFFu, mp, x);
      mp = o > mp ? o : mp;
    }
  }
  /* M_b, f_b, p, Σp (each lane's 4 in entry order, then a fixed tree of 16) */
  float f = 1.0f, psum = 0.0f, mn = mp;
  unsigned int pk[2] = {0u, 0u};
  if (anyv) {
    mn = bmax > mp ? bmax : mp;
    f = expf(__fsub_rn(mp, mn));
    float p[4];
    #pragma unroll
    for (int i = 0; i < 4; i++) p[i] = (valid >> i) & 1u ? expf(__fsub_rn(sv[i], mn)) : 0.0f;
    psum = __fadd_rn(__fadd_rn(__fadd_rn(p[0], p[1]), p[2]), p[3]);
    #pragma unroll
    for (int x = 1; x < 16; x <<= 1) psum = __fadd_rn(psum, __shfl_xor_sync(0xFFFFFFFFu, psum, x));
    pk[0] = pack_bf16(p[0], p[1]);
    pk[1] = pack_bf16(p[2], p[3]);
  }
  if (hv) {
    *(uint2 *)(W.P + (long long)(head0 + h) * nent + b * BLK + e0) = make_uint2(pk[0], pk[1]);
    if ((tid & 15) == 0) {
      W.M[(head0 + h) * nblk + b] = mn;
      W.F[(head0 + h) * nblk + b] = f;
      W.PS[(head0 + h) * nblk + b] = psum;
    }
  }
  __threadfence();
  __syncthreads();
  if (tid == 0) atomicExch(&g_flag_p[bid], want);
}

/* Dims 4g' .. 4g' + 3 of the slice (d0 ..) of staged entry e as bf16 bits v[0..3];
 * ew: staged bytes per entry; MLA: fp8_ds_mla window records, a RoPE slice when
 * d0 >= nope (staged as bf16), else E4M3 codes with a scale per 64 dims */
template <bool MLA>
__device__ __forceinline__ void staged4(const out_smem &o, int e, int ew, int g4, int d0, int hd,
                                        int nope, const unsigned short *__restrict__ kvw, int row0,
                                        unsigned int v[4]) {
  const unsigned int code = o.ek[e], kind = code & 3u;
  const unsigned char *raw = o.raw + e * ew;
  if (MLA && kind == E_WIN && d0 >= nope) {
    const uint2 x = *(const uint2 *)(raw + 2 * g4);
    v[0] = x.x & 0xFFFFu; v[1] = x.x >> 16; v[2] = x.y & 0xFFFFu; v[3] = x.y >> 16;
  } else if (kind == E_WIN) {
    const int sh = MLA ? 8 * ((d0 >> 6) & 3) : 8 * ((d0 >> 5) & 3);
    const float s = dsv4i_e8m0_to_f32((unsigned char)(o.scw[e] >> sh));
    const unsigned int w = *(const unsigned int *)(raw + g4);
    #pragma unroll
    for (int j = 0; j < 4; j++) v[j] = dsv4i_f32_to_bf16(__fmul_rn(e4m3f((w >> (8 * j)) & 0xFFu), s));
  } else if (kind == E_COMP) {
    const float s = dsv4i_e4m3_to_f32((unsigned char)(o.scw[e] >> (8 * (((d0 >> 4) & 3) + (g4 >> 4)))));
    const unsigned int w = *(const unsigned short *)(raw + (g4 >> 1));
    #pragma unroll
    for (int j = 0; j < 4; j++)
      v[j] = dsv4i_f32_to_bf16(__fmul_rn(dsv4i_e2m1_to_f32((w >> (4 * j)) & 0xFu), s));
  } else if (kind == E_ROW) {
    const unsigned int k = code >> 2;
    uint2 x;
    if (k < RMAX) x = *(const uint2 *)&o.rowv[k][g4];
    else x = *(const uint2 *)(kvw + (long long)(row0 + (int)k) * hd + d0 + g4);
    v[0] = x.x & 0xFFFFu; v[1] = x.x >> 16; v[2] = x.y & 0xFFFFu; v[3] = x.y >> 16;
  } else {
    v[0] = v[1] = v[2] = v[3] = 0u;
  }
}

}  // namespace

/*
 * Grid: n·n_hg·nblk score blocks, then n·n_hg·(hd/32) output blocks, of 256
 * threads (n_hg = ceil(H / 16); nblk = nent / 64, nent = the index row's
 * width rounded up to 64). q: bf16 [n][H][hd] post-RoPE; kvw: bf16 [call
 * tokens][hd] this call's QDQ'd window rows; sel: int32 [n][sel_ld]
 * compressed selection (ascending, −1 padded) or 0; sink f32 [H]; ws: the
 * workspace (ws_of); o: bf16 [n][H][hd]. n·n_hg·nblk <= FLAGS; hd a
 * multiple of 128.
 */
template <bool MLA>
__device__ __forceinline__ void tiled_attention(
    const dsv4i_gpu_kvtab &win, const dsv4i_gpu_kvtab &comp,
    const dsv4i_gpu_attn_tok *__restrict__ tok, int n, int nent, int n_hg, int H, int hd, int nope,
    int window, const unsigned short *__restrict__ q, const unsigned short *__restrict__ kvw,
    const int *__restrict__ sel, int sel_ld, float scale, const float *__restrict__ sink,
    unsigned char *__restrict__ ws, unsigned short *__restrict__ o) {
  __shared__ __align__(16) attn_smem sm;
  __shared__ unsigned int s_epoch;
  const int tid = threadIdx.x, lane = tid & 31, wid = tid >> 5, g = lane >> 2, c = lane & 3;
  const int nblk = nent / BLK, n_score = n * n_hg * nblk;
  if (tid == 0) s_epoch = ld_acquire(&g_tiled_epoch);
  __syncthreads();
  const unsigned int want = s_epoch + 1u;
  const int bid = blockIdx.x;
  if (bid < n_score) {
    const int b = bid % nblk, hg = (bid / nblk) % n_hg, t = bid / (nblk * n_hg);
    score_block<MLA>(sm.s, win, comp, tok, t, b, hg, n_hg, nent, H, hd, nope, window, q, kvw, sel,
                     sel_ld, scale, ws, want, bid);
  } else {
    out_smem &so = sm.o;
    const int nds = hd / DS, j2 = bid - n_score;
    const int ds = j2 % nds, hg = (j2 / nds) % n_hg, t = j2 / (nds * n_hg);
    const int d0 = ds * DS, head0 = hg * HG;
    /* staged bytes per entry and 64-entry blocks per stage: a RoPE slice of
     * fp8_ds_mla records stages bf16, twice the bytes of E4M3 codes */
    const bool rope_slice = MLA && d0 >= nope;
    const int ew = rope_slice ? 2 * DS : DS, sbn = rope_slice ? SB / 2 : SB;
    const dsv4i_gpu_attn_tok tk = tok[t];
    const int *sel_row = sel ? sel + (long long)t * sel_ld : nullptr;
    const ws_tok W = ws_of(ws, t, H, nent);
    /* the recurrence: thread (h, dims 2·(tid % 16), + 1) */
    const int rh = tid >> 4, rd = (tid & 15) * 2;
    float acc0 = 0.0f, acc1 = 0.0f, sum = 0.0f;
    for (int sb0 = 0; sb0 < nblk; sb0 += sbn) {
      const int nb = nblk - sb0 < sbn ? nblk - sb0 : sbn;
      if (sb0) __syncthreads(); /* the previous stage is consumed */
      /* 1. stage the slice of every entry of these blocks (cp.async): the thread's
       * entries resolved in steps (selection loads, page-table loads), then copied */
      constexpr int NJ = (SE + NT - 1) / NT;
      entry_loc L[NJ];
      #pragma unroll
      for (int j = 0; j < NJ; j++) {
        const int e = tid + NT * j;
        L[j] = e < nb * BLK ? locate_entry(tk, sb0 * BLK + e, window, sel_row, sel ? sel_ld : 0)
                            : entry_loc{E_NONE, 0};
      }
      unsigned int rr[NJ];
      int pg[NJ];
      #pragma unroll
      for (int j = 0; j < NJ; j++) {
        rr[j] = 0;
        pg[j] = 0;
        if (L[j].kind == E_WIN || L[j].kind == E_COMP)
          pg[j] = *rec_page_slot(pick_tab(win, comp, L[j].kind == E_COMP), tk.seq, L[j].idx, &rr[j]);
      }
      #pragma unroll
      for (int j = 0; j < NJ; j++) {
        const int e = tid + NT * j, kind = L[j].kind;
        if (e >= nb * BLK) break;
        const int rk = kind == E_ROW ? L[j].idx : 0;
        so.ek[e] = (unsigned short)(kind | (rk << 2));
        if (kind == E_WIN || kind == E_COMP) {
          const unsigned char *rec = rec_at(pick_tab(win, comp, kind == E_COMP), pg[j], rr[j]);
          unsigned char *dst = so.raw + e * ew;
          if (rope_slice && kind == E_WIN) {
            cp_async_bytes8(dst, rec + nope + 2 * (d0 - nope), 2 * DS);
          } else if (MLA && kind == E_WIN) {
            cp_async_bytes8(dst, rec + d0, DS);
            cp_async4(&so.scw[e], rec + nope + 2 * (hd - nope) + ((d0 / 64) & ~3));
          } else if (kind == E_WIN) {
            cp_async_bytes(dst, rec + d0, DS);
            cp_async4(&so.scw[e], rec + hd + ((d0 / 32) & ~3));
          } else {
            cp_async_bytes(dst, rec + d0 / 2, DS / 2);
            cp_async4(&so.scw[e], rec + hd / 2 + ((d0 / 16) & ~3));
          }
        } else if (kind == E_ROW && rk < RMAX) {
          cp_async_bytes(so.rowv[rk], (const unsigned char *)(kvw + (long long)(tk.row0 + rk) * hd + d0),
                         2 * DS);
        }
      }
      cp_async_commit();
      /* 2. this stage's probabilities are published: flag 2 of its score blocks */
      const int sbid = (t * n_hg + hg) * nblk + sb0;
      for (int i = tid; i < nb; i += NT) wait_flag(&g_flag_p[sbid + i], want);
      __syncthreads(); /* flags seen, kinds staged */
      for (int i = tid; i < HG * nb; i += NT) {
        const int h = i / nb, bb = i % nb;
        const bool hv = head0 + h < H;
        so.f[h][bb] = hv ? __ldcg(&W.F[(head0 + h) * nblk + sb0 + bb]) : 1.0f;
        so.ps[h][bb] = hv ? __ldcg(&W.PS[(head0 + h) * nblk + sb0 + bb]) : 0.0f;
        if (bb == nb - 1) so.mlast[h] = hv ? __ldcg(&W.M[(head0 + h) * nblk + sb0 + bb]) : 0.0f;
      }
      if (tid < nb) {
        int any = 0;
        for (int e = 0; e < BLK; e++) any |= so.ek[tid * BLK + e] & 3;
        so.any[tid] = any != 0;
      }
      cp_async_wait_all();
      __syncthreads();
      /* 3. blk_b = bf16(P_b)·V_b: warp w takes blocks w, w + 8, ...; n tile j, column g
       * is slice dim 4g + j (a lane decodes 4 dims of an entry from one word) */
      const unsigned short *Pa = head0 + g < H ? W.P + (long long)(head0 + g) * nent : nullptr;
      const unsigned short *Pb = head0 + g + 8 < H ? W.P + (long long)(head0 + g + 8) * nent : nullptr;
      for (int bb = wid; bb < nb; bb += NT / 32) {
        float bl[4][4];
        #pragma unroll
        for (int j = 0; j < 4; j++) bl[j][0] = bl[j][1] = bl[j][2] = bl[j][3] = 0.0f;
        if (so.any[bb]) {
          unsigned int a[4][4]; /* the block's P fragments, all loads in flight */
          #pragma unroll
          for (int ks = 0; ks < 4; ks++) {
            const long long e = (long long)(sb0 + bb) * BLK + 16 * ks + 2 * c;
            a[ks][0] = Pa ? __ldcg((const unsigned int *)(Pa + e)) : 0u;
            a[ks][1] = Pb ? __ldcg((const unsigned int *)(Pb + e)) : 0u;
            a[ks][2] = Pa ? __ldcg((const unsigned int *)(Pa + e + 8)) : 0u;
            a[ks][3] = Pb ? __ldcg((const unsigned int *)(Pb + e + 8)) : 0u;
          }
          #pragma unroll
          for (int ks = 0; ks < 4; ks++) {
            const int e = bb * BLK + 16 * ks + 2 * c;
            unsigned int v0[4], v1[4], v2[4], v3[4];
            staged4<MLA>(so, e, ew, 4 * g, d0, hd, nope, kvw, tk.row0, v0);
            staged4<MLA>(so, e + 1, ew, 4 * g, d0, hd, nope, kvw, tk.row0, v1);
            staged4<MLA>(so, e + 8, ew, 4 * g, d0, hd, nope, kvw, tk.row0, v2);
            staged4<MLA>(so, e + 9, ew, 4 * g, d0, hd, nope, kvw, tk.row0, v3);
            #pragma unroll
            for (int j = 0; j < 4; j++)
              mma_bf16(bl[j], a[ks][0], a[ks][1], a[ks][2], a[ks][3], v0[j] | v1[j] << 16,
                       v2[j] | v3[j] << 16);
          }
        }
        /* bl[j][0..1]: head g, slice dims 4(2c) + j, 4(2c + 1) + j; [2..3]: head g + 8 */
        #pragma unroll
        for (int j = 0; j < 4; j++) {
          so.blk[bb][g][8 * c + j] = bl[j][0];
          so.blk[bb][g][8 * c + 4 + j] = bl[j][1];
          so.blk[bb][g + 8][8 * c + j] = bl[j][2];
          so.blk[bb][g + 8][8 * c + 4 + j] = bl[j][3];
        }
      }
      __syncthreads();
      /* 4. the reference's recurrence over the blocks, in order */
      for (int bb = 0; bb < nb; bb++) {
        if (!so.any[bb]) continue; /* no entries: an exact no-op */
        const float f = so.f[rh][bb];
        acc0 = __fadd_rn(__fmul_rn(acc0, f), so.blk[bb][rh][rd]);
        acc1 = __fadd_rn(__fmul_rn(acc1, f), so.blk[bb][rh][rd + 1]);
        sum = __fadd_rn(__fmul_rn(sum, f), so.ps[rh][bb]);
      }
    }
    /* 5. the sink (not scaled, not in the max), o = bf16(acc / sum) */
    const int head = head0 + rh;
    if (head < H) {
      const float s = __fadd_rn(sum, expf(__fsub_rn(sink[head], so.mlast[rh])));
      const unsigned int lo = dsv4i_f32_to_bf16(__fdiv_rn(acc0, s));
      const unsigned int hi = dsv4i_f32_to_bf16(__fdiv_rn(acc1, s));
      *(unsigned int *)(o + ((long long)t * H + head) * hd + d0 + rd) = lo | hi << 16;
    }
  }
  /* the last block to finish moves the epoch for the next launch */
  __syncthreads();
  if (tid == 0) {
    __threadfence();
    if (atomicAdd(&g_tiled_done, 1u) == gridDim.x - 1) {
      g_tiled_done = 0;
      *(volatile unsigned int *)&g_tiled_epoch = want;
      __threadfence();
    }
  }
}

/* Over native window records (528 B at release dims); nope unused. */
extern "C" __global__ void __launch_bounds__(NT) dsv4_k_attn_sparse_tiled_e4m3(
    dsv4i_gpu_kvtab win, dsv4i_gpu_kvtab comp, const dsv4i_gpu_attn_tok *__restrict__ tok,
    int n, int nent, int n_hg, int H, int hd, int nope, int window,
    const unsigned short *__restrict__ q, const unsigned short *__restrict__ kvw,
    const int *__restrict__ sel, int sel_ld, float scale, const float *__restrict__ sink,
    unsigned char *__restrict__ ws, unsigned short *__restrict__ o) {
  tiled_attention<false>(win, comp, tok, n, nent, n_hg, H, hd, nope, window, q, kvw, sel, sel_ld,
                         scale, sink, ws, o);
}

/* Over fp8_ds_mla window records (584 B at release dims, nope NoPE dims). */
extern "C" __global__ void __launch_bounds__(NT) dsv4_k_attn_sparse_tiled_ds_mla(
    dsv4i_gpu_kvtab win, dsv4i_gpu_kvtab comp, const dsv4i_gpu_attn_tok *__restrict__ tok,
    int n, int nent, int n_hg, int H, int hd, int nope, int window,
    const unsigned short *__restrict__ q, const unsigned short *__restrict__ kvw,
    const int *__restrict__ sel, int sel_ld, float scale, const float *__restrict__ sink,
    unsigned char *__restrict__ ws, unsigned short *__restrict__ o) {
  tiled_attention<true>(win, comp, tok, n, nent, n_hg, H, hd, nope, window, q, kvw, sel, sel_ld,
                        scale, sink, ws, o);
}
