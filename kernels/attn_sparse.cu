/*
 * Sparse attention with sink (spec §5.4 step 4, the CPU oracle
 * dsv4i_attn_sparse in lib/cpu/attn_sparse.c), reading the KV records in
 * place: each token's index row is its window part (ring records of
 * positions before the call, this call's QDQ'd rows) followed by its
 * compressed selection (compressed-KV records), in blocks of 64 entries.
 *
 * The reference's online softmax rounds each block's probabilities to bf16
 * relative to the running max after that block, so the work splits over
 * blocks (split-K) without changing a rounding point:
 *   1. split:   one thread block per (64-entry block, token, 16 heads): the
 *               scores s = (q · kv) · scale (bf16 mma.sync, fp32
 *               accumulation, the records decoded straight into fragments),
 *               the block max per head published to the blocks after it;
 *               then the running max M_b = max(block maxima <= b) read back
 *               from the blocks before it (they run earlier in the grid and
 *               never wait, so the wait ends), p = exp(s − M_b), the block's
 *               fp32 Σp (entry order) and Σ bf16(p)·kv (mma.sync);
 *   2. combine: per (token, head) the reference's recurrence over blocks
 *               (acc·f + block, sum·f + Σp), the sink, the division: a
 *               fixed order, so the result does not depend on the schedule.
 * Batch 1 therefore runs (row blocks × head groups) blocks in the first
 * launch and (heads) in the second.
 * A token with layout −B is a DSpark draft-block query (spec §6.1): its row
 * is the stage ring's slots 0 .. min(window, anchor + 1) − 1 in slot order,
 * then the B rows of its block (first = anchor + 1, row0 = the block's first
 * call row), as lib/cpu/attn_dspark.c builds it.
 * Host side: lib/gpu/attn_sparse.c.
 */
#include "attn_rows.cuh"
#include "mma.cuh"

#define BLK DSV4I_GPU_ATTN_BLOCK /* entries per online-softmax block */
#define SG 16                    /* heads per split thread block (one mma row tile) */
#define LDP (BLK + 8)            /* bf16 row stride of the probability tile */
#define FLAGS DSV4I_GPU_ATTN_SPLIT_FLAGS

namespace {

/* Dims [d0, d0 + N) of an entry's row as N/2 packed bf16 pairs (element 2i
 * in the low half of out[i]); N = 4 or 16, d0 a multiple of N. The values
 * are the records' (kvrec.cuh: bf16(code · scale)). MLA: window records in
 * the fp8_ds_mla layout with nope NoPE dims (a multiple of 32). */
template <int N, bool MLA>
__device__ __forceinline__ void load_dims(int kind, unsigned long long ptr, int d0, int hd,
                                          int nope, unsigned int out[N / 2]) {
  if (MLA && kind == E_WIN) { /* 8-byte aligned record: E4M3 NoPE codes, bf16 RoPE values */
    const unsigned char *rec = (const unsigned char *)ptr;
    if (d0 >= nope) {
      const uint2 *src = (const uint2 *)(rec + nope + 2 * (d0 - nope));
      #pragma unroll
      for (int i = 0; i < N / 4; i++) {
        const uint2 v = src[i];
        out[2 * i] = v.x;
        out[2 * i + 1] = v.y;
      }
    } else {
      unsigned int w[N / 4];
      if constexpr (N == 16) {
        const uint2 v0 = ((const uint2 *)(rec + d0))[0], v1 = ((const uint2 *)(rec + d0))[1];
        w[0] = v0.x; w[1] = v0.y; w[2] = v1.x; w[3] = v1.y;
      } else {
        w[0] = *(const unsigned int *)(rec + d0);
      }
      const float s = dsv4i_e8m0_to_f32(rec[nope + 2 * (hd - nope) + d0 / 64]);
      #pragma unroll
      for (int i = 0; i < N / 2; i++) {
        const unsigned int wd = w[i >> 1] >> (16 * (i & 1));
        out[i] = pack_bf16(__fmul_rn(e4m3f(wd & 0xFFu), s), __fmul_rn(e4m3f((wd >> 8) & 0xFFu), s));
      }
    }
  } else if (kind == E_WIN) { /* N bytes of E4M3, one UE8M0 scale per 32 */
    const unsigned char *rec = (const unsigned char *)ptr;
    unsigned int w[N / 4];
    if constexpr (N == 16) load_words<4>(rec + d0, w);
    else w[0] = *(const unsigned int *)(rec + d0);
    const float s = dsv4i_e8m0_to_f32(rec[hd + d0 / 32]);
    #pragma unroll
    for (int i = 0; i < N / 2; i++) {
      const unsigned int wd = w[i >> 1] >> (16 * (i & 1));
      out[i] = pack_bf16(__fmul_rn(e4m3f(wd & 0xFFu), s), __fmul_rn(e4m3f((wd >> 8) & 0xFFu), s));
    }
  } else if (kind == E_COMP) { /* N/2 bytes of packed E2M1, one E4M3 scale per 16 */
    const unsigned char *rec = (const unsigned char *)ptr;
    unsigned int w[(N / 2 + 3) / 4];
    if constexpr (N == 16) {
      w[0] = ((const unsigned int *)(rec + d0 / 2))[0];
      w[1] = ((const unsigned int *)(rec + d0 / 2))[1];
    } else {
      w[0] = ((const unsigned short *)(rec + d0 / 2))[0];
    }
    const float s = dsv4i_e4m3_to_f32(rec[hd / 2 + d0 / 16]);
    #pragma unroll
    for (int i = 0; i < N / 2; i++) { /* byte i holds elements 2i (low nibble) and 2i + 1 */
      const unsigned int byte = (w[i >> 2] >> (8 * (i & 3))) & 0xFFu;
      out[i] = pack_bf16(__fmul_rn(dsv4i_e2m1_to_f32(byte & 0xFu), s),
                         __fmul_rn(dsv4i_e2m1_to_f32(byte >> 4), s));
    }
  } else if (kind == E_ROW) {
    const unsigned short *src = (const unsigned short *)ptr + d0;
    if constexpr (N == 16) {
      const uint4 v0 = ((const uint4 *)src)[0], v1 = ((const uint4 *)src)[1];
      out[0] = v0.x; out[1] = v0.y; out[2] = v0.z; out[3] = v0.w;
      out[4] = v1.x; out[5] = v1.y; out[6] = v1.z; out[7] = v1.w;
    } else {
      const uint2 v = *(const uint2 *)src;
      out[0] = v.x; out[1] = v.y;
    }
  } else {
    #pragma unroll
    for (int i = 0; i < N / 2; i++) out[i] = 0;
  }
}

__device__ __forceinline__ unsigned int lds32(const unsigned short *p) {
  return *(const unsigned int *)p;
}

/* Flags of the split pass (module memory, zero at load): flag i holds the
 * epoch + 1 of the launch that last published block maxima at i. The epoch
 * advances once per launch (the last block to finish moves it), so no flag
 * needs clearing. One launch of the split pass at a time per loaded module
 * (the launchers are handle-exclusive per stream). */
__device__ unsigned int g_split_flag[FLAGS];
__device__ unsigned int g_split_epoch;
__device__ unsigned int g_split_done;

}  // namespace

/*
 * Pass 1. Grid: nblk · n · n_hg blocks of 128 threads, block-major (blocks
 * of entry block b come after every block of b − 1, so a thread block only
 * waits for earlier ones). q: bf16 [n][H][hd] post-RoPE; kvw: bf16 [call
 * tokens][hd] this call's QDQ'd window rows; sel: int32 [n][sel_ld]
 * compressed selection (ascending, −1 padded) or 0. Writes bmax: f32
 * [n][nblk][H] (−inf for a block without entries), and for blocks with
 * entries psum: f32 [n][nblk][H] (Σ of the fp32 probabilities in entry
 * order) and part: f32 [n][nblk][H][hd] (Σ bf16(p)·kv), both relative to
 * the running max after the block. n · nblk · n_hg <= FLAGS; hd a multiple
 * of 128.
 *
 * Scores: warp w takes entries 16w .. 16w + 15 (two 8-entry n tiles) over
 * all dims; lane (g, c) loads the 16 dims kc + 16c .. + 15 of its entry and
 * of its two heads (g, g + 8) per 64-dim chunk kc, which is the mma's k
 * order permuted the same way for q and kv (the dot is a sum over dims).
 * P·V: warp w takes dims [w·hd/4, (w+1)·hd/4) of each 512- (or 128-) dim
 * chunk; lane (g, c) loads N contiguous dims of its four entries per k step
 * and n tile j of the warp is dim g'·N + j of lane g''s run (N = 16 or 4).
 */
template <int N, bool MLA>
__device__ __forceinline__ void split_pv(const unsigned long long *e_ptr, const int *e_kind,
                                         const unsigned short *Pb, int hd, int nope, int H,
                                         int head0, float *part_tb) {
  const int tid = threadIdx.x, lane = tid & 31, wid = tid >> 5, g = lane >> 2, c = lane & 3;
  const int DCH = 32 * N; /* dims per chunk: 4 warps x 8 lanes x N */
  const unsigned short *pa = Pb + g * LDP;
  for (int ch = 0; ch < hd; ch += DCH) {
    const int dw = ch + wid * (DCH / 4); /* the warp's dims */
    float acc[N][4];
    #pragma unroll
    for (int j = 0; j < N; j++) acc[j][0] = acc[j][1] = acc[j][2] = acc[j][3] = 0.0f;
    #pragma unroll
    for (int ks = 0; ks < BLK; ks += 16) {
      const unsigned int a0 = lds32(pa + ks + 2 * c), a1 = lds32(pa + 8 * LDP + ks + 2 * c);
      const unsigned int a2 = lds32(pa + ks + 2 * c + 8), a3 = lds32(pa + 8 * LDP + ks + 2 * c + 8);
      unsigned int v[4][N / 2]; /* entries ks + 2c, + 1, + 8, + 9: dims dw + g·N .. + N − 1 */
      #pragma unroll
      for (int r = 0; r < 4; r++) {
        const int e = ks + 2 * c + (r & 1) + 8 * (r >> 1);
        load_dims<N, MLA>(e_kind[e], e_ptr[e], dw + g * N, hd, nope, v[r]);
      }
      #pragma unroll
      for (int j = 0; j < N; j++) { /* n tile j: column g is dim dw + g·N + j */
        const unsigned int sel = (j & 1) ? 0x7632u : 0x5410u;
        const unsigned int b0 = __byte_perm(v[0][j >> 1], v[1][j >> 1], sel);
        const unsigned int b1 = __byte_perm(v[2][j >> 1], v[3][j >> 1], sel);
        mma_bf16(acc[j], a0, a1, a2, a3, b0, b1);
      }
    }
    /* acc[j][0..1]: head g, dims dw + (2c)·N + j and dw + (2c + 1)·N + j;
     * acc[j][2..3]: head g + 8, the same dims */
    #pragma unroll
    for (int hh = 0; hh < 2; hh++) {
      const int head = head0 + g + 8 * hh;
      if (head >= H) continue;
      float *po = part_tb + (long long)head * hd + dw;
      #pragma unroll
      for (int cc = 0; cc < 2; cc++) {
        float *dst = po + (2 * c + cc) * N;
        #pragma unroll
        for (int j = 0; j < N; j += 4)
          *(float4 *)(dst + j) = make_float4(acc[j][2 * hh + cc], acc[j + 1][2 * hh + cc],
                                             acc[j + 2][2 * hh + cc], acc[j + 3][2 * hh + cc]);
      }
    }
  }
}

template <bool MLA, bool TORD>
__device__ __forceinline__ void split_pass(
    const dsv4i_gpu_kvtab &win, const dsv4i_gpu_kvtab &comp,
    const dsv4i_gpu_attn_tok *__restrict__ tok, int n, int nblk, int n_hg, int H, int hd,
    int nope, int window, const unsigned short *__restrict__ q,
    const unsigned short *__restrict__ kvw, const int *__restrict__ sel, int sel_ld, float scale,
    float *__restrict__ bmax, float *__restrict__ psum, float *__restrict__ part) {
  __shared__ __align__(16) unsigned short Pb[SG * LDP];
  __shared__ float Pf[SG][BLK + 1];
  __shared__ float wmax[4][SG];
  __shared__ float Ms[SG];
  __shared__ unsigned long long e_ptr[BLK];
  __shared__ int e_kind[BLK];
  __shared__ unsigned int s_epoch;
  __shared__ int s_any;
  const int hg = blockIdx.x % n_hg, t = (blockIdx.x / n_hg) % n, b = blockIdx.x / (n_hg * n);
  const int tid = threadIdx.x, lane = tid & 31, wid = tid >> 5, g = lane >> 2, c = lane & 3;
  const int head0 = hg * SG;
  const dsv4i_gpu_attn_tok tk = tok[t];
  if (tid == 0) {
    s_epoch = ld_acquire(&g_split_epoch);
    s_any = 0;
  }
  __syncthreads();
  if (tid < BLK) {
    int rk;
    resolve_entry(win, comp, tk, b * BLK + tid, window, hd, kvw,
                  sel ? sel + (long long)t * sel_ld : sel, sel ? sel_ld : 0, &e_ptr[tid], &e_kind[tid],
                  &rk);
    if (e_kind[tid] != E_NONE) s_any = 1;
  }
  __syncthreads();
  const unsigned int want = s_epoch + 1u;
  const long long tb = (long long)t * nblk + b;
  const int any = s_any;
  /* 1. scores of the warp's 16 entries for heads head0 + g, head0 + g + 8 */
  float acc[2][4];
  #pragma unroll
  for (int i = 0; i < 2; i++) acc[i][0] = acc[i][1] = acc[i][2] = acc[i][3] = 0.0f;
  if (any) {
    const int ea = wid * 16 + g, eb = ea + 8;
    const int ka = e_kind[ea], kb = e_kind[eb];
    const unsigned long long pa = e_ptr[ea], pb = e_ptr[eb];
    const bool va = head0 + g < H, vb = head0 + g + 8 < H;
    const unsigned short *qa = q + ((long long)t * H + (va ? head0 + g : 0)) * hd;
    const unsigned short *qb = q + ((long long)t * H + (vb ? head0 + g + 8 : 0)) * hd;
    /* TORD: the dims in four quarters, chunks 64q + 256m of quarter q summed on their own,
     * the quarters' partial dots then added in order (the tiled kernel's dots, bit for
     * bit); else one chain over every 64-dim chunk */
    for (int kq = 0; kq < (TORD ? 4 : 1); kq++) {
      float part_dot[2][4];
      #pragma unroll
      for (int i = 0; i < 2; i++)
        part_dot[i][0] = part_dot[i][1] = part_dot[i][2] = part_dot[i][3] = 0.0f;
      for (int kc = TORD ? 64 * kq : 0; kc < hd; kc += TORD ? 256 : 64) {
        const int d0 = kc + 16 * c;
        uint4 z = make_uint4(0, 0, 0, 0);
        const uint4 qa0 = va ? ((const uint4 *)(qa + d0))[0] : z, qa1 = va ? ((const uint4 *)(qa + d0))[1] : z;
        const uint4 qb0 = vb ? ((const uint4 *)(qb + d0))[0] : z, qb1 = vb ? ((const uint4 *)(qb + d0))[1] : z;
        const unsigned int wa[8] = {qa0.x, qa0.y, qa0.z, qa0.w, qa1.x, qa1.y, qa1.z, qa1.w};
        const unsigned int wb[8] = {qb0.x, qb0.y, qb0.z, qb0.w, qb1.x, qb1.y, qb1.z, qb1.w};
        unsigned int k0[8], k1[8];
        load_dims<16, MLA>(ka, pa, d0, hd, nope, k0);
        load_dims<16, MLA>(kb, pb, d0, hd, nope, k1);
        #pragma unroll
        for (int ks = 0; ks < 4; ks++) { /* mma k 2c, 2c+1 | 2c+8, 2c+9 = dims d0 + 4ks + 0,1 | 2,3 */
          mma_bf16(part_dot[0], wa[2 * ks], wb[2 * ks], wa[2 * ks + 1], wb[2 * ks + 1], k0[2 * ks],
                   k0[2 * ks + 1]);
          mma_bf16(part_dot[1], wa[2 * ks], wb[2 * ks], wa[2 * ks + 1], wb[2 * ks + 1], k1[2 * ks],
                   k1[2 * ks + 1]);
        }
      }
      #pragma unroll
      for (int i = 0; i < 2; i++)
        #pragma unroll
        for (int j = 0; j < 4; j++)
          acc[i][j] = kq ? __fadd_rn(acc[i][j], part_dot[i][j]) : part_dot[i][j];
    }
  }
  /* acc[nt][j]: head g (j < 2) / g + 8, entry 16w + 8nt + 2c + (j & 1) */
  const float ninf = -__int_as_float(0x7F800000);
  float sv[2][4];
  float m0 = ninf, m1 = ninf;
  #pragma unroll
  for (int nt = 0; nt < 2; nt++)
    #pragma unroll
    for (int j = 0; j < 4; j++) {
      const int e = wid * 16 + nt * 8 + 2 * c + (j & 1);
      const float v = e_kind[e] != E_NONE ? __fmul_rn(acc[nt][j], scale) : ninf;
      sv[nt][j] = v;
      if (j < 2) m0 = v > m0 ? v : m0; else m1 = v > m1 ? v : m1;
    }
  m0 = fmaxf(m0, __shfl_xor_sync(0xFFFFFFFFu, m0, 1));
  m0 = fmaxf(m0, __shfl_xor_sync(0xFFFFFFFFu, m0, 2));
  m1 = fmaxf(m1, __shfl_xor_sync(0xFFFFFFFFu, m1, 1));
  m1 = fmaxf(m1, __shfl_xor_sync(0xFFFFFFFFu, m1, 2));
  if (c == 0) {
    wmax[wid][g] = m0;
    wmax[wid][g + 8] = m1;
  }
  __syncthreads();
  /* 2. publish this block's maxima, then wait for the blocks before it */
  if (tid < SG) {
    float m = ninf;
    #pragma unroll
    for (int w = 0; w < 4; w++) m = fmaxf(m, wmax[w][tid]);
    Ms[tid] = m;
    if (head0 + tid < H) bmax[tb * H + head0 + tid] = m;
  }
  __threadfence();
  __syncthreads();
  if (tid == 0) atomicExch(&g_split_flag[tb * n_hg + hg], want);
  if (any) {
    for (int bb = tid; bb < b; bb += blockDim.x) {
      const unsigned int *f = &g_split_flag[((long long)t * nblk + bb) * n_hg + hg];
      unsigned int spins = 0;
      while (ld_acquire(f) != want) {
        __nanosleep(128);
        if (++spins > (1u << 26)) __trap(); /* a lost block: fail loudly, never hang */
      }
    }
    __syncthreads();
    if (tid < SG) {
      float M = -1e30f; /* the reference's initial running max */
      if (head0 + tid < H)
        for (int bb = 0; bb <= b; bb++) {
          const float bm = bb == b ? Ms[tid] : __ldcg(&bmax[((long long)t * nblk + bb) * H + head0 + tid]);
          M = bm > M ? bm : M;
        }
      Ms[tid] = head0 + tid < H ? M : 0.0f; /* padding heads: finite, discarded */
    }
    __syncthreads();
    /* 3. probabilities relative to the running max: fp32 for Σp, bf16 for P·V */
    #pragma unroll
    for (int nt = 0; nt < 2; nt++)
      #pragma unroll
      for (int j = 0; j < 4; j++) {
        const int e = wid * 16 + nt * 8 + 2 * c + (j & 1), h = g + 8 * (j >> 1);
        const float p = e_kind[e] != E_NONE ? expf(__fsub_rn(sv[nt][j], Ms[h])) : 0.0f;
        Pf[h][e] = p;
        Pb[h * LDP + e] = (unsigned short)dsv4i_f32_to_bf16(p);
      }
    __syncthreads();
    if (TORD) { /* the tiled kernel's tree: 16 lanes a head, each 4 entries in order, then xor 1..8 */
      #pragma unroll
      for (int r = 0; r < 2; r++) {
        const int h = (tid >> 4) + 8 * r, e0 = (tid & 15) * 4;
        float s = __fadd_rn(__fadd_rn(__fadd_rn(Pf[h][e0], Pf[h][e0 + 1]), Pf[h][e0 + 2]), Pf[h][e0 + 3]);
        #pragma unroll
        for (int x = 1; x < 16; x <<= 1) s = __fadd_rn(s, __shfl_xor_sync(0xFFFFFFFFu, s, x));
        if ((tid & 15) == 0 && head0 + h < H) psum[tb * H + head0 + h] = s;
      }
    } else if (tid < SG && head0 + tid < H) {
      float s = 0.0f;
      for (int e = 0; e < BLK; e++)
        if (e_kind[e] != E_NONE) s = __fadd_rn(s, Pf[tid][e]);
      psum[tb * H + head0 + tid] = s;
    }
    __syncwarp(); /* warp 0 reconverges after the sums before its mma.sync */
    float *part_tb = part + tb * H * hd;
    if (hd % 512 == 0)
      split_pv<16, MLA>(e_ptr, e_kind, Pb, hd, nope, H, head0, part_tb);
    else
      split_pv<4, MLA>(e_ptr, e_kind, Pb, hd, nope, H, head0, part_tb);
  }
  /* the last block to finish moves the epoch for the next launch */
  __syncthreads();
  if (tid == 0) {
    __threadfence();
    if (atomicAdd(&g_split_done, 1u) == gridDim.x - 1) {
      g_split_done = 0;
      *(volatile unsigned int *)&g_split_epoch = want;
      __threadfence();
    }
  }
}

/* The split pass over native window records (528 B at release dims); nope unused. */
extern "C" __global__ void __launch_bounds__(128) dsv4_k_attn_sparse_split_e4m3(
    dsv4i_gpu_kvtab win, dsv4i_gpu_kvtab comp, const dsv4i_gpu_attn_tok *__restrict__ tok,
    int n, int nblk, int n_hg, int H, int hd, int nope, int window,
    const unsigned short *__restrict__ q, const unsigned short *__restrict__ kvw,
    const int *__restrict__ sel, int sel_ld, float scale, float *__restrict__ bmax,
    float *__restrict__ psum, float *__restrict__ part) {
  split_pass<false, false>(win, comp, tok, n, nblk, n_hg, H, hd, nope, window, q, kvw, sel, sel_ld,
                           scale, bmax, psum, part);
}

/* The split pass over fp8_ds_mla window records (584 B at release dims, nope NoPE dims). */
extern "C" __global__ void __launch_bounds__(128) dsv4_k_attn_sparse_split_ds_mla(
    dsv4i_gpu_kvtab win, dsv4i_gpu_kvtab comp, const dsv4i_gpu_attn_tok *__restrict__ tok,
    int n, int nblk, int n_hg, int H, int hd, int nope, int window,
    const unsigned short *__restrict__ q, const unsigned short *__restrict__ kvw,
    const int *__restrict__ sel, int sel_ld, float scale, float *__restrict__ bmax,
    float *__restrict__ psum, float *__restrict__ part) {
  split_pass<true, false>(win, comp, tok, n, nblk, n_hg, H, hd, nope, window, q, kvw, sel, sel_ld,
                          scale, bmax, psum, part);
}

/* The split pass in the tiled kernel's order (default mode; attn_sparse_tiled.cu): the
 * score dots in four dim quarters added in order, Σp over the 16-lane tree. With the
 * combine, the tiled kernel's bits, so the engine takes whichever is faster for a call's
 * token count without a token's result depending on its batch. */
extern "C" __global__ void __launch_bounds__(128) dsv4_k_attn_sparse_split_e4m3_tiled(
    dsv4i_gpu_kvtab win, dsv4i_gpu_kvtab comp, const dsv4i_gpu_attn_tok *__restrict__ tok,
    int n, int nblk, int n_hg, int H, int hd, int nope, int window,
    const unsigned short *__restrict__ q, const unsigned short *__restrict__ kvw,
    const int *__restrict__ sel, int sel_ld, float scale, float *__restrict__ bmax,
    float *__restrict__ psum, float *__restrict__ part) {
  split_pass<false, true>(win, comp, tok, n, nblk, n_hg, H, hd, nope, window, q, kvw, sel, sel_ld,
                          scale, bmax, psum, part);
}

extern "C" __global__ void __launch_bounds__(128) dsv4_k_attn_sparse_split_ds_mla_tiled(
    dsv4i_gpu_kvtab win, dsv4i_gpu_kvtab comp, const dsv4i_gpu_attn_tok *__restrict__ tok,
    int n, int nblk, int n_hg, int H, int hd, int nope, int window,
    const unsigned short *__restrict__ q, const unsigned short *__restrict__ kvw,
    const int *__restrict__ sel, int sel_ld, float scale, float *__restrict__ bmax,
    float *__restrict__ psum, float *__restrict__ part) {
  split_pass<true, true>(win, comp, tok, n, nblk, n_hg, H, hd, nope, window, q, kvw, sel, sel_ld,
                         scale, bmax, psum, part);
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
