/*
 * Attention cache writers (spec §5.4 steps 2, 3a, 3b.1, 3c; records §5.8):
 * window ring records with MXFP8 QDQ, compressed-KV and index-key records,
 * and the ratio > 1 compressor (pooling of a group whose earlier members
 * come from the compressor-state ring, then the state ring's write).
 * Host side: lib/gpu/attn_cache.c. Every kernel takes the call's tokens
 * (dsv4i_gpu_attn_tok, device memory) and works out from each token's
 * position whether and where it writes, so a captured graph replays any
 * positions.
 */
#include "kvrec.cuh"

namespace {

__device__ __forceinline__ unsigned int warp_max_u32(unsigned int v) {
  for (int o = 16; o > 0; o >>= 1) v = max(v, __shfl_xor_sync(0xFFFFFFFFu, v, o));
  return v;
}

}  // namespace

/*
 * Window KV (act_quant, block 32, UE8M0): one warp per (token, 32-block),
 * lane j = element j. kv: bf16 [n][hd] post-RoPE; kvw: bf16 [n][hd] QDQ
 * output (what attention reads for this call's positions). The record of a
 * token is written unless a later token of its sequence in this call takes
 * the same ring slot (pos <= last − ring).
 */
extern "C" __global__ void dsv4_k_attn_window_store_e4m3(
    dsv4i_gpu_kvtab win, const dsv4i_gpu_attn_tok *__restrict__ tok, int n, int hd,
    const unsigned short *__restrict__ kv, unsigned short *__restrict__ kvw) {
  const int lane = threadIdx.x & 31;
  const long long w = ((long long)blockIdx.x * blockDim.x + threadIdx.x) >> 5;
  const int nb = hd >> 5;
  if (w >= (long long)n * nb) return;
  const int t = (int)(w / nb), b = (int)(w % nb);
  const unsigned int x = kv[(long long)t * hd + b * 32 + lane];
  const unsigned int m = warp_max_u32(x & 0x7FFFu);
  unsigned int q, sbyte, y;
  if (m >= 0x7F80u) { /* non-finite block: NaN scale, sign-only codes */
    q = ((x >> 8) & 0x80u) | 0x7Fu;
    sbyte = 0xFFu;
    y = ((q & 0x80u) << 8) | 0x7FC0u;
  } else {
    float a = dsv4i_bf16_to_f32(m);
    a = a > 1e-4f ? a : 1e-4f;
    const int e = dsv4i_ceil_log2_bits(__fmul_rn(a, 1.0f / 448.0f));
    q = dsv4i_f32_to_e4m3(__fmul_rn(dsv4i_bf16_to_f32(x), dsv4_pow2f(-e)));
    sbyte = (unsigned int)(e + 127);
    y = dsv4_window_val(q, dsv4_pow2f(e));
  }
  if (kvw) kvw[(long long)t * hd + b * 32 + lane] = (unsigned short)y;
  const dsv4i_gpu_attn_tok tk = tok[t];
  if (win.pool == 0 || tk.pos <= tk.last - win.ring) return; /* QDQ rows only, or slot reused */
  unsigned char *rec = dsv4_kv_rec(win, tk.seq, tk.pos);
  rec[b * 32 + lane] = (unsigned char)q;
  if (lane == 0) rec[hd + b] = (unsigned char)sbyte;
}

/*
 * Window KV in the fp8_ds_mla record (docs/gpu-attention.md "The fp8_ds_mla
 * record"): NoPE values 0 .. nope − 1 quantised as act_quant in blocks of
 * 64 (UE8M0 scale from the block's amax, E4M3 codes), the RoPE values
 * nope .. hd − 1 kept as bf16. One warp per (token, 64-value block): blocks
 * 0 .. nbn − 1 are NoPE (lane j: values 2j, 2j + 1 of the block), the rest
 * copy 64 RoPE values each. Record: codes [0, nope), RoPE bf16 [nope,
 * nope + 2·rope), scales from nope + 2·rope, zero bytes up to rec_bytes.
 * kvw: the values attention reads for this call's positions (NoPE QDQ,
 * RoPE unchanged). nope and hd multiples of 32; records 8-byte aligned.
 */
extern "C" __global__ void dsv4_k_attn_window_store_ds_mla(
    dsv4i_gpu_kvtab win, const dsv4i_gpu_attn_tok *__restrict__ tok, int n, int hd, int nope,
    const unsigned short *__restrict__ kv, unsigned short *__restrict__ kvw) {
  const int lane = threadIdx.x & 31;
  const long long w = ((long long)blockIdx.x * blockDim.x + threadIdx.x) >> 5;
  const int rope = hd - nope, nbn = (nope + 63) >> 6, nbr = (rope + 63) >> 6;
  if (w >= (long long)n * (nbn + nbr)) return;
  const int t = (int)(w / (nbn + nbr)), b = (int)(w % (nbn + nbr));
  const dsv4i_gpu_attn_tok tk = tok[t];
  const bool store = win.pool != 0 && tk.pos > tk.last - win.ring; /* else QDQ rows only, or slot reused */
  unsigned char *rec = store ? dsv4_kv_rec(win, tk.seq, tk.pos) : nullptr;
  const unsigned short *x = kv + (long long)t * hd;
  if (b >= nbn) { /* RoPE values: bf16, unchanged */
    const int d = nope + 64 * (b - nbn) + 2 * lane;
    if (d >= hd) return;
    const unsigned int v = *(const unsigned int *)(x + d);
    if (kvw) *(unsigned int *)(kvw + (long long)t * hd + d) = v;
    if (store) *(unsigned int *)(rec + nope + 2 * (d - nope)) = v;
    return;
  }
  const int d = 64 * b + 2 * lane, len = nope - 64 * b < 64 ? nope - 64 * b : 64;
  const bool live = 2 * lane < len;
  const unsigned int x2 = live ? *(const unsigned int *)(x + d) : 0u;
  const unsigned int x0 = x2 & 0xFFFFu, x1 = x2 >> 16;
  unsigned int m = max(x0 & 0x7FFFu, x1 & 0x7FFFu);
  for (int o = 16; o > 0; o >>= 1) m = max(m, __shfl_xor_sync(0xFFFFFFFFu, m, o));
  const int e = dsv4i_act_quant_exp(m);
  const unsigned int q0 = dsv4i_act_quant_code((unsigned short)x0, e);
  const unsigned int q1 = dsv4i_act_quant_code((unsigned short)x1, e);
  unsigned int y0, y1;
  if (e == DSV4I_ACT_QUANT_NONFINITE) { /* as the QDQ form: NaN with the code's sign */
    y0 = ((q0 & 0x80u) << 8) | 0x7FC0u;
    y1 = ((q1 & 0x80u) << 8) | 0x7FC0u;
  } else {
    y0 = dsv4_window_val(q0, dsv4_pow2f(e));
    y1 = dsv4_window_val(q1, dsv4_pow2f(e));
  }
  if (!live) return;
  if (kvw) *(unsigned int *)(kvw + (long long)t * hd + d) = y0 | (y1 << 16);
  if (!store) return;
  *(unsigned short *)(rec + d) = (unsigned short)(q0 | (q1 << 8));
  const int sc = nope + 2 * rope;
  if (lane == 0) rec[sc + b] = dsv4i_act_quant_scale(e);
  if (b == nbn - 1) /* the padding after the scales */
    for (int i = sc + nbn + lane; i < win.rec_bytes; i += 32) rec[i] = 0;
}

/*
 * Compressed KV of the tokens that complete a group ((pos + 1) mod ratio ==
 * 0): fp4_act_quant(lat, 16, E4M3) into record (pos + 1)/ratio − 1. One
 * thread per (token, 16-block). lat: bf16 [n][hd], RoPE'd at the group's
 * first position.
 */
extern "C" __global__ void dsv4_k_attn_comp_store_e2m1(
    dsv4i_gpu_kvtab comp, const dsv4i_gpu_attn_tok *__restrict__ tok, int n, int hd, int ratio,
    const unsigned short *__restrict__ lat) {
  const long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x;
  const int nb = hd >> 4;
  if (i >= (long long)n * nb) return;
  const int t = (int)(i / nb), b = (int)(i % nb);
  const dsv4i_gpu_attn_tok tk = tok[t];
  if ((tk.pos + 1) % ratio != 0) return;
  const uint4 *src = (const uint4 *)(lat + (long long)t * hd + b * 16);
  const uint4 v0 = src[0], v1 = src[1];
  const unsigned int wds[8] = {v0.x, v0.y, v0.z, v0.w, v1.x, v1.y, v1.z, v1.w};
  unsigned int m = 0;
  for (int j = 0; j < 8; j++) m = max(m, max(wds[j] & 0x7FFFu, (wds[j] >> 16) & 0x7FFFu));
  unsigned int lo = 0, hi = 0, sb;
  if (m >= 0x7F80u) {
    sb = 0x7Fu;
    for (int j = 0; j < 8; j++) {
      const unsigned int byte = ((wds[j] >> 12) & 0x8u) | (((wds[j] >> 28) & 0x8u) << 4);
      if (j < 4) lo |= byte << (8 * j); else hi |= byte << (8 * (j - 4));
    }
  } else {
    float a = dsv4i_bf16_to_f32(m);
    a = a > 0x1.8p-7f ? a : 0x1.8p-7f;
    sb = dsv4i_f32_to_e4m3(__fdiv_rn(a, 6.0f));
    const float s = dsv4i_e4m3_to_f32(sb);
    for (int j = 0; j < 8; j++) {
      const unsigned int c0 = dsv4i_f32_to_e2m1(__fdiv_rn(dsv4i_bf16_to_f32(wds[j]), s));
      const unsigned int c1 = dsv4i_f32_to_e2m1(__fdiv_rn(dsv4i_bf16_to_f32(wds[j] >> 16), s));
      const unsigned int byte = c0 | (c1 << 4);
      if (j < 4) lo |= byte << (8 * j); else hi |= byte << (8 * (j - 4));
    }
  }
  unsigned char *rec = dsv4_kv_rec(comp, tk.seq, (tk.pos + 1) / ratio - 1);
  *(uint2 *)(rec + b * 8) = make_uint2(lo, hi);
  rec[hd / 2 + b] = (unsigned char)sb;
}

/*
 * Index keys of the tokens that complete a group: fp4_act_quant(k, 32,
 * UE8M0) into record (pos + 1)/ratio − 1. One thread per (token, 32-block).
 * k: bf16 [n][ihd], RoPE'd at the group's first position.
 */
extern "C" __global__ void dsv4_k_attn_idxk_store_e2m1(
    dsv4i_gpu_kvtab idxk, const dsv4i_gpu_attn_tok *__restrict__ tok, int n, int ihd, int ratio,
    const unsigned short *__restrict__ k) {
  const long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x;
  const int nb = ihd >> 5;
  if (i >= (long long)n * nb) return;
  const int t = (int)(i / nb), b = (int)(i % nb);
  const dsv4i_gpu_attn_tok tk = tok[t];
  if ((tk.pos + 1) % ratio != 0) return;
  const uint4 *src = (const uint4 *)(k + (long long)t * ihd + b * 32);
  unsigned int wds[16];
  for (int j = 0; j < 4; j++) {
    const uint4 v = src[j];
    wds[4 * j] = v.x; wds[4 * j + 1] = v.y; wds[4 * j + 2] = v.z; wds[4 * j + 3] = v.w;
  }
  unsigned int m = 0;
  for (int j = 0; j < 16; j++) m = max(m, max(wds[j] & 0x7FFFu, (wds[j] >> 16) & 0x7FFFu));
  unsigned int out[4] = {0, 0, 0, 0}, sb;
  if (m >= 0x7F80u) {
    sb = 0xFFu;
    for (int j = 0; j < 16; j++)
      out[j >> 2] |= (((wds[j] >> 12) & 0x8u) | (((wds[j] >> 28) & 0x8u) << 4)) << (8 * (j & 3));
  } else {
    float a = dsv4i_bf16_to_f32(m);
    a = a > 0x1.8p-124f ? a : 0x1.8p-124f;
    const int e = dsv4i_ceil_log2_bits(__fmul_rn(a, 1.0f / 6.0f));
    sb = (unsigned int)(e + 127);
    const float inv = dsv4_pow2f(-e);
    for (int j = 0; j < 16; j++) {
      const unsigned int c0 = dsv4i_f32_to_e2m1(__fmul_rn(dsv4i_bf16_to_f32(wds[j]), inv));
      const unsigned int c1 = dsv4i_f32_to_e2m1(__fmul_rn(dsv4i_bf16_to_f32(wds[j] >> 16), inv));
      out[j >> 2] |= (c0 | (c1 << 4)) << (8 * (j & 3));
    }
  }
  unsigned char *rec = dsv4_kv_rec(idxk, tk.seq, (tk.pos + 1) / ratio - 1);
  unsigned int *dst = (unsigned int *)(rec + b * 16); /* records are 4-byte aligned */
  for (int j = 0; j < 4; j++) dst[j] = out[j];
  rec[ihd / 2 + b] = (unsigned char)sb;
}

/*
 * Ratio r > 1 compressor pooling (spec §5.4 3a): for each token completing
 * a group, latent[d] = Σ_m k_m[d] · softmax_m(g[·][d]) over the r members
 * (max, exp, sum from 0 in member order, then a division; fp32), rounded to
 * bf16 (before compressor.norm). Members before the call's first position
 * come from the compressor-state ring (fp32 [2][hd] per position: k, g).
 * One thread per (token, d). lat: bf16 [n][hd]; the rows of tokens that
 * complete no group are zero (the norm, index-key and RoPE ops after it run
 * over every row, so every row they read is written; no store keeps those
 * rows). Runs before dsv4_k_attn_cstate_store of the same call.
 */
extern "C" __global__ void dsv4_k_attn_compress_pool_f32(
    dsv4i_gpu_kvtab cst, const dsv4i_gpu_attn_tok *__restrict__ tok, int n, int hd, int ratio,
    const float *__restrict__ kk, const float *__restrict__ gg, unsigned short *__restrict__ lat) {
  const long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x;
  if (i >= (long long)n * hd) return;
  const int t = (int)(i / hd), d = (int)(i % hd);
  const dsv4i_gpu_attn_tok tk = tok[t];
  if ((tk.pos + 1) % ratio != 0) {
    lat[(long long)t * hd + d] = 0;
    return;
  }
  float km[8], gm[8];
  for (int m = 0; m < ratio && m < 8; m++) {
    const int q = tk.pos - (ratio - 1) + m;
    if (q >= tk.first) {
      const long long row = (long long)(t - (tk.pos - q)) * hd + d;
      km[m] = kk[row];
      gm[m] = gg[row];
    } else {
      const float *rec = (const float *)dsv4_kv_rec(cst, tk.seq, q);
      km[m] = rec[d];
      gm[m] = rec[hd + d];
    }
  }
  float mx = gm[0];
  for (int m = 1; m < ratio && m < 8; m++) mx = gm[m] > mx ? gm[m] : mx;
  float e[8], sum = 0.0f;
  for (int m = 0; m < ratio && m < 8; m++) {
    e[m] = expf(__fsub_rn(gm[m], mx));
    sum = __fadd_rn(sum, e[m]);
  }
  float acc = 0.0f;
  for (int m = 0; m < ratio && m < 8; m++) acc = __fadd_rn(acc, __fmul_rn(km[m], __fdiv_rn(e[m], sum)));
  lat[(long long)t * hd + d] = (unsigned short)dsv4i_f32_to_bf16(acc);
}

/* Every token's compressor inputs (k, g) into the state ring, after the
 * pooling of the same call read what it needed; a sequence's run longer than
 * the ring keeps its last `ring` positions. One thread per (token, d). */
extern "C" __global__ void dsv4_k_attn_cstate_store_f32(
    dsv4i_gpu_kvtab cst, const dsv4i_gpu_attn_tok *__restrict__ tok, int n, int hd,
    const float *__restrict__ kk, const float *__restrict__ gg) {
  const long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x;
  if (i >= (long long)n * hd) return;
  const int t = (int)(i / hd), d = (int)(i % hd);
  const dsv4i_gpu_attn_tok tk = tok[t];
  if (tk.pos <= tk.last - cst.ring) return;
  float *rec = (float *)dsv4_kv_rec(cst, tk.seq, tk.pos);
  rec[d] = kk[i];
  rec[hd + d] = gg[i];
}
