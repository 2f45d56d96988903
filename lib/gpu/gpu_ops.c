/* Host launchers of the dense kernels: size checks, grid shape, one launch. */
#include "gpu/gpu_ops.h"

#include <math.h>

#define LIN_ROWS 128 /* kernels/linear.cu ROWS */
#define LIN_TM 8     /* kernels/linear.cu TM */
#define Q8_TOK 16    /* kernels/linear.cu Q_TOK: tokens per block of the fp8 and head kernels */
#define HEAD_ROWS 128 /* kernels/linear.cu H_WARPS x 32: the bf16 -> fp32 kernel's rows per block */
#define LT_ROWS 16    /* kernels/linear_tiled.cu: rows per block */
#define LT_TOK 16     /* kernels/linear_tiled.cu: tokens per block */
#define LT_SPREAD 128 /* kernels/linear_tiled.cu: blocks one token spreads over (K split) */
#define LT_MAXTY 4    /* kernels/linear_tiled.cu: token chunks a launch with a K split takes */

/* kernels/linear_tiled.cu lt_kb: blocks per 16-row tile (K split), from the shape */
static int32_t lt_kb(int32_t rows, int32_t k) {
  const int32_t tiles = (rows + 15) / 16, by_k = (k / 32) / 8, by_r = LT_SPREAD / tiles;
  const int32_t kb = by_k < by_r ? by_k : by_r;
  return kb > 1 ? kb : 1;
}
#define EU_MAX_DIM 8192     /* kernels/engram.cu: the update's largest dim */
#define EU_SMEM_PER_DIM 10  /* kernels/engram.cu: its shared bytes per dim (5 bf16 rows) */
#define HM_KC 256     /* kernels/hc.cu: hc_mixes_tiled's elements per chunk (one block) */
#define HM_TT 4       /* kernels/hc.cu: tokens per block */
#define HM_MAXTOK 64  /* kernels/hc.cu: tokens per launch (the module's scratch) */
#define HM_MAXCH 128  /* kernels/hc.cu: chunks the scratch holds */

static uint32_t cdiv(int64_t a, int64_t b) { return (uint32_t)((a + b - 1) / b); }

/* kernels/linear_mma.cu: T_NS stages of T_RB x T_SK weight bytes, ntp token
 * rows of T_BROW bytes and ntp x 8 scales, then the block's scale row. */
#define Q8T_RB 32
#define Q8T_NS 4
#define Q8T_MAX_K 65536
#define Q8T_SPREAD 512 /* kernels/linear_mma.cu T_SPREAD, T_MAXTY */
#define Q8T_MAXTY 4
/* K splits of the tiled fp8 kernel, from the shape alone (never the device or
 * the token count): enough blocks for a matrix of few 32-row blocks, at least
 * 4 stages of 256 columns each. */
static int q8_splits(int32_t rows, int32_t cols) {
  const int rbn = (rows + Q8T_RB - 1) / Q8T_RB, by_k = (cols / 32 + 7) / 8 / 4, by_r = Q8T_SPREAD / rbn;
  const int ks = by_k < by_r ? by_k : by_r;
  return ks > 1 ? ks : 1;
}
/* kbw: the most K blocks one block takes (its split of K), their weight scales as f32 */
static uint32_t q8_tiled_smem(int ntp, int kbw) {
  return (uint32_t)(Q8T_NS * (Q8T_RB * 256 + ntp * (256 * 2 + 64) + ntp * 8 * 4) + kbw * 4);
}

static dsv4_status pick(const dsv4i_kreg *kr, dsv4i_kop op, dsv4i_kfmt fmt, dsv4i_kshape shape,
                        dsv4i_kernel_id *id) {
  return dsv4i_kreg_select(kr, op, fmt, shape, id);
}

dsv4_status dsv4i_gpu_ops_init(const dsv4i_kreg *kr, dsv4i_gpu_ops *o) {
  o->kr = kr;
  for (int i = 0; i < DSV4I_KFMT_COUNT_; i++)
    o->linear[i] = o->linear_f32out[i] = o->linear_warp[i] = DSV4I_K_COUNT;
  o->warp_rows_max = 0;
  o->fp8_row_tile = 0;
  o->f32out_narrow = 0;
  o->cpu_order = 0;
  o->moe_tiled = 1;
  o->moe_fused = 0;
  dsv4_status st = DSV4_OK;
#define PICK(field, op, fmt, shape) \
  if (st == DSV4_OK) st = pick(kr, DSV4I_KOP_##op, DSV4I_KFMT_##fmt, DSV4I_KSHAPE_##shape, &o->field)
  PICK(rmsnorm, RMSNORM, BF16, ANY);
  PICK(rmsnorm_tiled, RMSNORM, BF16, TILED);
  PICK(hc_mixes_tiled, HC_MIXES, F32, TILED);
  PICK(hc_sinkhorn_lanes, HC_SINKHORN, F32, TILED);
  PICK(hc_mixes_sinkhorn_tiled, HC_MIXES_SINKHORN, F32, TILED);
  PICK(hc_pre_rmsnorm_tiled, HC_PRE_RMSNORM, BF16, TILED);
  PICK(hc_post_pre_rmsnorm_tiled, HC_POST_PRE_RMSNORM, BF16, TILED);
  PICK(rmsnorm_rope_tiled, RMSNORM_ROPE, BF16, TILED);
  PICK(hc_entry_tiled, HC_ENTRY, BF16, TILED);
  PICK(linear_bf16_tiled, LINEAR, BF16, TILED);
  PICK(linear_bf16_f32out_tiled, LINEAR_F32OUT, BF16, TILED);
  PICK(embed_hc, EMBED_HC, BF16, ANY);
  PICK(hc_mixes, HC_MIXES, F32, ANY);
  PICK(hc_sinkhorn, HC_SINKHORN, F32, ANY);
  PICK(hc_pre, HC_PRE, BF16, ANY);
  PICK(hc_post, HC_POST, BF16, ANY);
  PICK(hc_tap, HC_TAP, BF16, ANY);
  PICK(act_quant, ACT_QUANT, E4M3_UE8M0, ANY);
  PICK(rope, ROPE, BF16, ANY);
  PICK(argmax, ARGMAX, F32, ANY);
  PICK(sample, SAMPLE, F32, ANY);
  PICK(accept, ACCEPT, F32, ANY);
  PICK(router, ROUTER, F32, ANY);
  PICK(moe_up, MOE_UP, E2M1_UE8M0, DECODE);
  PICK(moe_down, MOE_DOWN, E2M1_UE8M0, DECODE);
  PICK(moe_prep_tiled, MOE_PREP, E2M1_UE8M0, TILED);
  PICK(moe_up_tiled, MOE_UP, E2M1_UE8M0, TILED);
  PICK(moe_down_tiled, MOE_DOWN, E2M1_UE8M0, TILED);
  PICK(moe_updown_tiled, MOE_UPDOWN, E2M1_UE8M0, TILED);
  PICK(engram_gather, ENGRAM_GATHER, E4M3_UE8M0, ANY);
  PICK(engram_update, ENGRAM_UPDATE, BF16, ANY);
  PICK(dequant, DEQUANT, E4M3_UE8M0, ANY);
  PICK(linear[DSV4I_KFMT_E4M3_UE8M0], LINEAR, E4M3_UE8M0, DECODE);
  PICK(linear[DSV4I_KFMT_E2M1_UE8M0], LINEAR, E2M1_UE8M0, DECODE);
  PICK(linear[DSV4I_KFMT_BF16], LINEAR, BF16, DECODE);
  PICK(linear_warp[DSV4I_KFMT_E4M3_UE8M0], LINEAR, E4M3_UE8M0, DECODE_WARP);
  PICK(linear_warp[DSV4I_KFMT_E2M1_UE8M0], LINEAR, E2M1_UE8M0, DECODE_WARP);
  PICK(linear_f32out[DSV4I_KFMT_BF16], LINEAR_F32OUT, BF16, DECODE);
  PICK(linear_f32out[DSV4I_KFMT_F32], LINEAR_F32OUT, F32, DECODE);
  PICK(linear_f32out[DSV4I_KFMT_E4M3_UE8M0], LINEAR_F32OUT, E4M3_UE8M0, DECODE);
  PICK(moe_down_part, MOE_DOWN_PART, E2M1_UE8M0, DECODE);
  PICK(moe_combine, MOE_COMBINE, BF16, ANY);
  PICK(cast, CAST, F32, ANY);
  PICK(linear_tiled, LINEAR, E4M3_UE8M0, TILED);
  PICK(act_quant_f16, ACT_QUANT, E4M3_UE8M0, TILED);
#undef PICK
  if (st == DSV4_OK) st = dsv4i_gpu_moe_tiled_init(kr, o);
  o->fp8_tiled = 1;
  o->q8_fuse_max = 0;
  /* the Engram update stages five rows of dim bf16: 51 KB at dim 5120, 80 KB at most (every
   * compute capability >= 8.0 grants 99 KB to a block that asks) */
  if (st == DSV4_OK) {
    const dsv4i_cures r = kr->dev->cu->FuncSetAttribute(
        kr->fn[o->engram_update], DSV4I_CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES,
        EU_SMEM_PER_DIM * EU_MAX_DIM);
    if (r != DSV4I_CUDA_SUCCESS)
      st = dsv4i_cu_fail(kr->dev->cu, r, "cuFuncSetAttribute(dsv4_k_engram_update, %d bytes of "
                         "dynamic shared memory)", EU_SMEM_PER_DIM * EU_MAX_DIM);
  }
  /* the tiled fp8 kernel's ring is larger than the 48 KB a launch gets unasked */
  if (st == DSV4_OK) {
    const dsv4i_cures r = kr->dev->cu->FuncSetAttribute(
        kr->fn[o->linear_tiled], DSV4I_CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES,
        (int)q8_tiled_smem(16, Q8T_MAX_K / 32));
    if (r != DSV4I_CUDA_SUCCESS)
      st = dsv4i_cu_fail(kr->dev->cu, r, "cuFuncSetAttribute(dsv4_k_linear_e4m3_ue8m0_tiled, %u bytes "
                         "of dynamic shared memory)", (unsigned)q8_tiled_smem(16, Q8T_MAX_K / 32));
  }
  return st;
}

static dsv4_status bad(const char *op, const char *what) {
  return dsv4i_error(DSV4_ERR_INVALID_ARG, "gpu %s: %s", op, what);
}


static dsv4_status launch(const dsv4i_gpu_ops *o, dsv4i_kernel_id id, uint32_t gx, uint32_t gy,
                          dsv4i_custream s, void **p) {
  return dsv4i_kreg_launch_grid(o->kr, id, gx, gy, 1, 0, s, p);
}

dsv4_status dsv4i_gpu_rmsnorm(const dsv4i_gpu_ops *o, dsv4i_custream s, int32_t n_tok,
                              int32_t dim, dsv4i_cuptr x, int64_t ldx, dsv4i_cuptr w, float eps,
                              dsv4i_cuptr y, int64_t ldy) {
  if (n_tok < 0 || dim <= 0 || ldx < dim || ldy < dim) return bad("rmsnorm", "sizes");
  if (n_tok == 0) return DSV4_OK;
  int n = n_tok, d = dim;
  long long lx = ldx, ly = ldy;
  void *p[] = {&n, &d, &x, &lx, &w, &eps, &y, &ly};
  if (!o->cpu_order) return launch(o, o->rmsnorm_tiled, (uint32_t)n_tok, 1, s, p);
  return launch(o, o->rmsnorm, cdiv(n_tok, 4), 1, s, p);
}

dsv4_status dsv4i_gpu_embed_hc(const dsv4i_gpu_ops *o, dsv4i_custream s, int32_t n_tok,
                               int32_t hc, int32_t dim, dsv4i_cuptr tok, dsv4i_cuptr embed,
                               dsv4i_cuptr h, dsv4i_cuptr pre) {
  if (n_tok < 0 || hc <= 0 || hc > 256 || dim <= 0 || n_tok > 65535)
    return bad("embed_hc", "sizes (n_tok <= 65535 per launch)");
  if (n_tok == 0) return DSV4_OK;
  int n = n_tok, c = hc, d = dim;
  void *p[] = {&n, &c, &d, &tok, &embed, &h, &pre};
  uint32_t gx = dim % 8 == 0 ? cdiv(dim / 8, 256) : cdiv(dim, 256);
  return launch(o, o->embed_hc, gx, (uint32_t)n_tok, s, p);
}

dsv4_status dsv4i_gpu_hc_mixes(const dsv4i_gpu_ops *o, dsv4i_custream s, int32_t n_tok,
                               int32_t hc, int32_t dim, dsv4i_cuptr h, dsv4i_cuptr fn, float eps,
                               dsv4i_cuptr mixes) {
  if (n_tok < 0 || hc <= 0 || dim <= 0) return bad("hc_mixes", "sizes");
  if ((2 + hc) * hc * 8 > 224)
    return dsv4i_error(DSV4_ERR_UNSUPPORTED, "gpu hc_mixes: hc = %d copies; the kernel takes "
                                             "at most 4", (int)hc);
  if (n_tok == 0) return DSV4_OK;
  int n = n_tok, c = hc, d = dim;
  if (o->cpu_order || (int64_t)hc * dim > HM_MAXCH * HM_KC) { /* the shape, not the batch, decides */
    void *p[] = {&n, &c, &d, &h, &fn, &eps, &mixes};
    return launch(o, o->hc_mixes, (uint32_t)n_tok, 1, s, p);
  }
  /* the tiled kernel's scratch takes HM_MAXTOK tokens a launch */
  const int64_t nm = (2 + hc) * hc, row = (int64_t)hc * dim * 2;
  dsv4_status st = DSV4_OK;
  for (int32_t t0 = 0; t0 < n_tok && !st; t0 += HM_MAXTOK) {
    int nt = n_tok - t0 < HM_MAXTOK ? n_tok - t0 : HM_MAXTOK;
    dsv4i_cuptr ht = h + (dsv4i_cuptr)t0 * (dsv4i_cuptr)row, mt = mixes + (dsv4i_cuptr)t0 * (dsv4i_cuptr)nm * 4u;
    void *p[] = {&nt, &c, &d, &ht, &fn, &eps, &mt};
    st = launch(o, o->hc_mixes_tiled, cdiv((int64_t)hc * dim, HM_KC), cdiv(nt, HM_TT), s, p);
  }
  return st;
}

dsv4_status dsv4i_gpu_hc_sinkhorn(const dsv4i_gpu_ops *o, dsv4i_custream s, int32_t n_tok,
                                  int32_t hc, dsv4i_cuptr mixes, dsv4i_cuptr scale,
                                  dsv4i_cuptr base, int32_t iters, float hc_eps, dsv4i_cuptr pre,
                                  dsv4i_cuptr post, dsv4i_cuptr comb) {
  if (n_tok < 0 || hc <= 0 || hc > 16 || iters < 1) return bad("hc_sinkhorn", "sizes");
  if (n_tok == 0) return DSV4_OK;
  int n = n_tok, c = hc, it = iters;
  void *p[] = {&n, &c, &mixes, &scale, &base, &it, &hc_eps, &pre, &post, &comb};
  if (!o->cpu_order && hc <= 4) return launch(o, o->hc_sinkhorn_lanes, cdiv(n_tok, 8), 1, s, p);
  return launch(o, o->hc_sinkhorn, cdiv(n_tok, 128), 1, s, p);
}

/* The fused mixes + Sinkhorn launches (hc_mixes_sinkhorn_tiled, or hc_entry_tiled with
 * extra_gx hc_pre + RMSNorm blocks and its four trailing arguments), HM_MAXTOK tokens a
 * launch (the module's scratch). A kernel reads only its own leading arguments of p. */
static dsv4_status mixes_sinkhorn_launch(const dsv4i_gpu_ops *o, dsv4i_custream s, dsv4i_kernel_id k,
                                         uint32_t extra_gx, int32_t n_tok, int32_t hc, int32_t dim,
                                         dsv4i_cuptr h, dsv4i_cuptr fn, float eps, dsv4i_cuptr scale,
                                         dsv4i_cuptr base, int32_t iters, float hc_eps,
                                         dsv4i_cuptr mixes, dsv4i_cuptr pre, dsv4i_cuptr post,
                                         dsv4i_cuptr comb, dsv4i_cuptr pre_in, dsv4i_cuptr w,
                                         float norm_eps, dsv4i_cuptr y) {
  const int64_t nm = (2 + hc) * hc, row = (int64_t)hc * dim * 2;
  int c = hc, d = dim, it = iters;
  dsv4_status st = DSV4_OK;
  for (int32_t t0 = 0; t0 < n_tok && !st; t0 += HM_MAXTOK) {
    int nt = n_tok - t0 < HM_MAXTOK ? n_tok - t0 : HM_MAXTOK;
    const dsv4i_cuptr t = (dsv4i_cuptr)t0;
    dsv4i_cuptr ht = h + t * (dsv4i_cuptr)row, mt = mixes + t * (dsv4i_cuptr)nm * 4u,
                pt = pre + t * (dsv4i_cuptr)hc * 4u, qt = post + t * (dsv4i_cuptr)hc * 4u,
                ct = comb + t * (dsv4i_cuptr)(hc * hc) * 4u, it_ = pre_in + t * (dsv4i_cuptr)hc * 4u,
                yt = y + t * (dsv4i_cuptr)dim * 2u;
    void *p[] = {&nt, &c, &d, &ht, &fn, &eps, &mt, &scale, &base, &it, &hc_eps, &pt, &qt, &ct, &it_,
                 &w, &norm_eps, &yt};
    st = launch(o, k, cdiv((int64_t)hc * dim, HM_KC) + extra_gx, cdiv(nt, HM_TT), s, p);
  }
  return st;
}

/* hc_mixes + Sinkhorn in one launch of the tiled kernel: the shape decides, never the batch */
static int mixes_fused(const dsv4i_gpu_ops *o, int32_t hc, int32_t dim) {
  return !o->cpu_order && hc <= 4 && (int64_t)hc * dim <= HM_MAXCH * HM_KC;
}

dsv4_status dsv4i_gpu_hc_mixes_sinkhorn(const dsv4i_gpu_ops *o, dsv4i_custream s, int32_t n_tok,
                                        int32_t hc, int32_t dim, dsv4i_cuptr h, dsv4i_cuptr fn,
                                        float eps, dsv4i_cuptr scale, dsv4i_cuptr base,
                                        int32_t iters, float hc_eps, dsv4i_cuptr mixes,
                                        dsv4i_cuptr pre, dsv4i_cuptr post, dsv4i_cuptr comb) {
  if (n_tok < 0 || hc <= 0 || dim <= 0 || iters < 1) return bad("hc_mixes_sinkhorn", "sizes");
  if (!mixes_fused(o, hc, dim)) {
    dsv4_status st = dsv4i_gpu_hc_mixes(o, s, n_tok, hc, dim, h, fn, eps, mixes);
    return st ? st : dsv4i_gpu_hc_sinkhorn(o, s, n_tok, hc, mixes, scale, base, iters, hc_eps, pre,
                                           post, comb);
  }
  return mixes_sinkhorn_launch(o, s, o->hc_mixes_sinkhorn_tiled, 0, n_tok, hc, dim, h, fn, eps, scale,
                               base, iters, hc_eps, mixes, pre, post, comb, 0, 0, 0.f, 0);
}

dsv4_status dsv4i_gpu_hc_pre_rmsnorm(const dsv4i_gpu_ops *o, dsv4i_custream s, int32_t n_tok,
                                     int32_t hc, int32_t dim, dsv4i_cuptr h, dsv4i_cuptr pre,
                                     dsv4i_cuptr w, float eps, dsv4i_cuptr y) {
  if (n_tok < 0 || hc <= 0 || hc > 16 || dim <= 0 || n_tok > 65535) return bad("hc_pre_rmsnorm", "sizes");
  if (o->cpu_order) {
    dsv4_status st = dsv4i_gpu_hc_pre(o, s, n_tok, hc, dim, h, pre, y);
    return st ? st : dsv4i_gpu_rmsnorm(o, s, n_tok, dim, y, dim, w, eps, y, dim);
  }
  if (n_tok == 0) return DSV4_OK;
  int n = n_tok, c = hc, d = dim;
  long long ly = dim;
  void *p[] = {&n, &c, &d, &h, &pre, &w, &eps, &y, &ly};
  return launch(o, o->hc_pre_rmsnorm_tiled, (uint32_t)n_tok, 1, s, p);
}

dsv4_status dsv4i_gpu_hc_entry(const dsv4i_gpu_ops *o, dsv4i_custream s, int32_t n_tok, int32_t hc,
                               int32_t dim, dsv4i_cuptr h, dsv4i_cuptr fn, float eps, dsv4i_cuptr scale,
                               dsv4i_cuptr base, int32_t iters, float hc_eps, dsv4i_cuptr mixes,
                               dsv4i_cuptr pre, dsv4i_cuptr post, dsv4i_cuptr comb, dsv4i_cuptr pre_in,
                               dsv4i_cuptr w, float norm_eps, dsv4i_cuptr y) {
  if (n_tok < 0 || hc <= 0 || hc > 16 || dim <= 0 || iters < 1 || n_tok > 65535)
    return bad("hc_entry", "sizes");
  if (!mixes_fused(o, hc, dim)) {
    dsv4_status st = dsv4i_gpu_hc_mixes_sinkhorn(o, s, n_tok, hc, dim, h, fn, eps, scale, base, iters,
                                                 hc_eps, mixes, pre, post, comb);
    return st ? st : dsv4i_gpu_hc_pre_rmsnorm(o, s, n_tok, hc, dim, h, pre_in, w, norm_eps, y);
  }
  return mixes_sinkhorn_launch(o, s, o->hc_entry_tiled, HM_TT, n_tok, hc, dim, h, fn, eps, scale, base,
                               iters, hc_eps, mixes, pre, post, comb, pre_in, w, norm_eps, y);
}

dsv4_status dsv4i_gpu_hc_post_pre_rmsnorm(const dsv4i_gpu_ops *o, dsv4i_custream s, int32_t n_tok,
                                          int32_t hc, int32_t dim, dsv4i_cuptr xa, dsv4i_cuptr res,
                                          dsv4i_cuptr post, dsv4i_cuptr comb, dsv4i_cuptr hout,
                                          dsv4i_cuptr pre, dsv4i_cuptr w, float eps, dsv4i_cuptr y) {
  if (n_tok < 0 || hc <= 0 || hc > 16 || dim <= 0 || n_tok > 65535)
    return bad("hc_post_pre_rmsnorm", "sizes");
  if (o->cpu_order) {
    dsv4_status st = dsv4i_gpu_hc_post(o, s, n_tok, hc, dim, xa, res, post, comb, hout);
    return st ? st : dsv4i_gpu_hc_pre_rmsnorm(o, s, n_tok, hc, dim, hout, pre, w, eps, y);
  }
  if (n_tok == 0) return DSV4_OK;
  int n = n_tok, c = hc, d = dim;
  void *p[] = {&n, &c, &d, &xa, &res, &post, &comb, &hout, &pre, &w, &eps, &y};
  return launch(o, o->hc_post_pre_rmsnorm_tiled, (uint32_t)n_tok, 1, s, p);
}

dsv4_status dsv4i_gpu_rmsnorm_rope(const dsv4i_gpu_ops *o, dsv4i_custream s, int32_t n_tok,
                                   int32_t dim, dsv4i_cuptr x, int64_t ldx, dsv4i_cuptr w, float eps,
                                   dsv4i_cuptr y, int64_t ldy, int32_t n_freq, dsv4i_cuptr freqs,
                                   dsv4i_cuptr pos) {
  if (n_tok < 0 || dim <= 0 || ldx < dim || ldy < dim || n_freq <= 0 || n_freq > 128 ||
      2 * n_freq > dim)
    return bad("rmsnorm_rope", "sizes (n_freq <= 128, 2 n_freq <= dim)");
  if (o->cpu_order) {
    dsv4_status st = dsv4i_gpu_rmsnorm(o, s, n_tok, dim, x, ldx, w, eps, y, ldy);
    return st ? st : dsv4i_gpu_rope(o, s, n_tok, 1, n_freq, y + (dsv4i_cuptr)(dim - 2 * n_freq) * 2u,
                                    ldy, 0, freqs, pos, 0);
  }
  if (n_tok == 0) return DSV4_OK;
  int n = n_tok, d = dim, nf = n_freq;
  long long lx = ldx, ly = ldy;
  void *p[] = {&n, &d, &x, &lx, &w, &eps, &y, &ly, &nf, &freqs, &pos};
  return launch(o, o->rmsnorm_rope_tiled, (uint32_t)n_tok, 1, s, p);
}

dsv4_status dsv4i_gpu_hc_pre(const dsv4i_gpu_ops *o, dsv4i_custream s, int32_t n_tok,
                             int32_t hc, int32_t dim, dsv4i_cuptr h, dsv4i_cuptr pre,
                             dsv4i_cuptr y) {
  if (n_tok < 0 || hc <= 0 || dim <= 0 || n_tok > 65535) return bad("hc_pre", "sizes");
  if (n_tok == 0) return DSV4_OK;
  int n = n_tok, c = hc, d = dim;
  void *p[] = {&n, &c, &d, &h, &pre, &y};
  return launch(o, o->hc_pre, cdiv(dim, 256), (uint32_t)n_tok, s, p);
}

dsv4_status dsv4i_gpu_hc_post(const dsv4i_gpu_ops *o, dsv4i_custream s, int32_t n_tok,
                              int32_t hc, int32_t dim, dsv4i_cuptr x, dsv4i_cuptr res,
                              dsv4i_cuptr post, dsv4i_cuptr comb, dsv4i_cuptr out) {
  if (n_tok < 0 || hc <= 0 || hc > 16 || dim <= 0 || n_tok > 65535) return bad("hc_post", "sizes");
  if (n_tok == 0) return DSV4_OK;
  int n = n_tok, c = hc, d = dim;
  void *p[] = {&n, &c, &d, &x, &res, &post, &comb, &out};
  return launch(o, o->hc_post, cdiv(dim, 256), (uint32_t)n_tok, s, p);
}

dsv4_status dsv4i_gpu_hc_tap(const dsv4i_gpu_ops *o, dsv4i_custream s, int32_t n_tok, int32_t hc,
                             int32_t dim, dsv4i_cuptr h, dsv4i_cuptr y, int64_t ldy) {
  if (n_tok < 0 || hc <= 0 || dim <= 0 || ldy < dim || n_tok > 65535) return bad("hc_tap", "sizes");
  if (n_tok == 0) return DSV4_OK;
  int n = n_tok, c = hc, d = dim;
  long long ly = ldy;
  void *p[] = {&n, &c, &d, &h, &y, &ly};
  return launch(o, o->hc_tap, cdiv(dim, 256), (uint32_t)n_tok, s, p);
}

dsv4_status dsv4i_gpu_act_quant(const dsv4i_gpu_ops *o, dsv4i_custream s, int32_t n_tok,
                                int32_t k, dsv4i_cuptr x, int64_t ldx, dsv4i_cuptr xq,
                                dsv4i_cuptr sx) {
  if (n_tok < 0 || k <= 0 || k % 32 || ldx < k) return bad("act_quant", "sizes (k % 32 == 0)");
  if (n_tok == 0) return DSV4_OK;
  int n = n_tok, kk = k;
  long long lx = ldx;
  void *p[] = {&n, &kk, &x, &lx, &xq, &sx};
  return launch(o, o->act_quant, cdiv((int64_t)n_tok * (k / 32), 8), 1, s, p);
}

static dsv4_status gemv(const dsv4i_gpu_ops *o, dsv4i_custream s, dsv4i_kernel_id id,
                        const dsv4i_gpu_weight *w, int32_t n_tok, dsv4i_cuptr xq, dsv4i_cuptr sx,
                        dsv4i_cuptr x, int64_t ldx, dsv4i_cuptr y, int64_t ldy, int32_t group_rows,
                        int64_t group_x) {
  const int64_t esz = w->fmt == DSV4I_KFMT_F32 ? 4 : w->fmt == DSV4I_KFMT_BF16 ? 2 : 1;
  const int64_t row_bytes = w->fmt == DSV4I_KFMT_E2M1_UE8M0 ? w->ld : w->ld * esz;
  if ((w->data & 15) || (row_bytes & 15))
    return dsv4i_error(DSV4_ERR_UNSUPPORTED,
                       "gpu linear: weight rows must be 16-byte aligned (data %#llx, row %lld B)",
                       (unsigned long long)w->data, (long long)row_bytes);
  if (n_tok == 0) return DSV4_OK;
  int n = n_tok, rows = w->rows, k = w->cols;
  long long ld = w->ld, sld = w->scale_ld, lx = ldx, ly = ldy;
  dsv4i_cuptr data = w->data, scale = w->scale;
  int gr = group_rows;
  long long gx = group_x;
  void *p[] = {&n, &rows, &k, &data, &ld, &scale, &sld, &xq, &sx, &x, &lx, &y, &ly, &gr, &gx};
  uint32_t bx = cdiv(w->rows, LIN_ROWS), by = cdiv(n_tok, LIN_TM);
  if (id == o->linear_warp[DSV4I_KFMT_E4M3_UE8M0] || id == o->linear_warp[DSV4I_KFMT_E2M1_UE8M0])
    bx = cdiv(w->rows, 8);
  else if (id == o->linear[DSV4I_KFMT_E4M3_UE8M0]) /* group_rows: the row tile */
    bx = cdiv(w->rows, group_rows), by = cdiv(n_tok, Q8_TOK);
  else if (id == o->linear_bf16_tiled || id == o->linear_bf16_f32out_tiled)
    bx = cdiv(w->rows, LT_ROWS) * (uint32_t)lt_kb(w->rows, w->cols), by = cdiv(n_tok, LT_TOK);
  else if (id == o->linear_f32out[DSV4I_KFMT_BF16]) /* group_rows 1: one warp per block */
    bx = cdiv(w->rows, group_rows == 1 ? 32 : HEAD_ROWS), by = cdiv(n_tok, Q8_TOK);
  return launch(o, id, bx, by, s, p);
}

static int weight_ok(const dsv4i_gpu_weight *w) {
  if (!w || w->rows <= 0 || w->cols <= 0 || w->cols % 32 || !w->data) return 0;
  switch (w->fmt) {
  case DSV4I_KFMT_E4M3_UE8M0:
    return w->ld >= w->cols && w->scale && w->scale_ld >= w->cols / 32;
  case DSV4I_KFMT_E2M1_UE8M0:
    return w->ld >= w->cols / 2 && w->scale && w->scale_ld >= w->cols / 32;
  case DSV4I_KFMT_BF16:
  case DSV4I_KFMT_F32:
    return w->ld >= w->cols;
  default:
    return 0;
  }
}

/* The fp8 kernel's row tile (8, 16 or 32 rows per block). Smaller tiles read
 * longer row segments per chunk (1 KB at 8 rows: better DRAM locality) and
 * give more blocks; 32 rows pay off only for the tallest matrices, 16 for
 * tall ones and for short K (fewer idle warps in the last chunk). Measured
 * on an H200 (bench/RESULTS.md, the microbenchmark of every tile). */
static int32_t fp8_row_tile(int32_t rows, int32_t cols) {
  if (rows >= 30000) return 32;
  if (rows >= 10000 || cols / 32 < 64) return 16;
  return 8;
}

dsv4_status dsv4i_gpu_linear_q(const dsv4i_gpu_ops *o, dsv4i_custream s,
                               const dsv4i_gpu_weight *w, int32_t n_tok, dsv4i_cuptr xq,
                               dsv4i_cuptr sx, dsv4i_cuptr y, int64_t ldy) {
  if (!weight_ok(w) || n_tok < 0 || ldy < w->rows || cdiv(n_tok, LIN_TM) > 65535 ||
      (w->fmt != DSV4I_KFMT_E4M3_UE8M0 && w->fmt != DSV4I_KFMT_E2M1_UE8M0))
    return bad("linear_q", "needs a valid fp8/fp4 weight (cols % 32 == 0) and ldy >= rows");
  const dsv4i_kernel_id id =
      w->rows <= o->warp_rows_max ? o->linear_warp[w->fmt] : o->linear[w->fmt];
  if (id == o->linear[DSV4I_KFMT_E4M3_UE8M0] && w->cols > 262144)
    return dsv4i_error(DSV4_ERR_UNSUPPORTED, "gpu linear_q: fp8 K = %d; the kernel stages one "
                       "scale row of at most 8,192 blocks (K <= 262,144)", (int)w->cols);
  return gemv(o, s, id, w, n_tok, xq, sx, 0, w->cols, y, ldy,
              id != o->linear[DSV4I_KFMT_E4M3_UE8M0] ? 0
              : o->fp8_row_tile ? o->fp8_row_tile : fp8_row_tile(w->rows, w->cols), 0);
}

dsv4_status dsv4i_gpu_linear_q_f32(const dsv4i_gpu_ops *o, dsv4i_custream s,
                                   const dsv4i_gpu_weight *w, int32_t n_tok, dsv4i_cuptr xq,
                                   dsv4i_cuptr sx, dsv4i_cuptr y, int64_t ldy) {
  if (!weight_ok(w) || n_tok < 0 || ldy < w->rows || cdiv(n_tok, LIN_TM) > 65535 ||
      w->fmt != DSV4I_KFMT_E4M3_UE8M0)
    return bad("linear_q_f32", "needs a valid fp8 weight (cols % 32 == 0) and ldy >= rows");
  return gemv(o, s, o->linear_f32out[DSV4I_KFMT_E4M3_UE8M0], w, n_tok, xq, sx, 0, w->cols, y,
              ldy, 0, 0);
}

dsv4_status dsv4i_gpu_cast_bf16(const dsv4i_gpu_ops *o, dsv4i_custream s, int64_t n,
                                dsv4i_cuptr x, dsv4i_cuptr y) {
  if (n < 0 || n / 256 >= INT32_MAX) return bad("cast", "size");
  if (n == 0) return DSV4_OK;
  long long nn = n;
  void *p[] = {&nn, &x, &y};
  return launch(o, o->cast, cdiv(n, 256), 1, s, p);
}

/* Whether fp8 linears on cols columns run the tiled kernel (else the CPU-order pair). */
static int q8_tiled_on(const dsv4i_gpu_ops *o, int32_t cols) {
  return !o->cpu_order && o->fp8_tiled && cols <= Q8T_MAX_K;
}

dsv4_status dsv4i_gpu_q8_quant(const dsv4i_gpu_ops *o, dsv4i_custream s, int32_t n_tok, int32_t cols,
                               dsv4i_cuptr x, int64_t ldx, dsv4i_cuptr xq, dsv4i_cuptr sx) {
  if (!q8_tiled_on(o, cols)) return dsv4i_gpu_act_quant(o, s, n_tok, cols, x, ldx, xq, sx);
  if (n_tok < 0 || n_tok > 65535 * 8 || cols <= 0 || cols % 32 || ldx < cols || (xq & 15))
    return bad("q8_quant", "sizes (cols % 32 == 0, ldx >= cols), xq 16-byte aligned");
  if (n_tok == 0) return DSV4_OK;
  int n = n_tok, k = cols;
  long long lx = ldx;
  void *p[] = {&n, &k, &x, &lx, &xq};
  return launch(o, o->act_quant_f16, cdiv((int64_t)n * (k / 32), 8), 1, s, p);
}

/* What the tiled kernel needs beyond the arguments' sizes. */
static dsv4_status q8_tiled_ok(const dsv4i_gpu_weight *w, dsv4i_cuptr xq) {
  if ((w->data & 15) || (w->ld & 15))
    return dsv4i_error(DSV4_ERR_UNSUPPORTED,
                       "gpu linear_q8: weight rows must be 16-byte aligned (data %#llx, ld %lld)",
                       (unsigned long long)w->data, (long long)w->ld);
  return xq & 15 ? bad("linear_q8", "xq must be 16-byte aligned") : DSV4_OK;
}

/* The tiled kernel on all n_tok tokens: from the prepass output in xq
 * (fused = 0) or quantising x itself (fused = 1, n_tok <= 8). */
static dsv4_status q8_tiled(const dsv4i_gpu_ops *o, dsv4i_custream s, const dsv4i_gpu_weight *w,
                            int32_t n_tok, dsv4i_cuptr x, int64_t ldx, dsv4i_cuptr xq, int fused,
                            dsv4i_cuptr y, int64_t ldy) {
  dsv4_status st = q8_tiled_ok(w, xq);
  if (st != DSV4_OK || n_tok == 0) return st;
  int rows = w->rows, k = w->cols, ks = q8_splits(w->rows, w->cols);
  const int kbw = (int)cdiv(cdiv(k / 32, 8), ks) * 8; /* stages of 8 K blocks, split ks ways */
  long long ld = w->ld, sld = w->scale_ld, lx = ldx, ly = ldy;
  dsv4i_cuptr data = w->data, scale = w->scale;
  /* the prepass layout: fp16 records [n_tok][k], then the scales [n_tok][ldsx] f32 */
  const dsv4i_cuptr ldsx = (dsv4i_cuptr)((k / 32 + 7) & ~7), sx0 = xq + (dsv4i_cuptr)n_tok * (dsv4i_cuptr)k * 2u;
  /* with K splits, the module's scratch takes Q8T_MAXTY token chunks a launch */
  const int32_t slice = ks > 1 ? Q8T_MAXTY * 16 : n_tok;
  for (int32_t t0 = 0; t0 < n_tok && st == DSV4_OK; t0 += slice) {
    int n = n_tok - t0 < slice ? n_tok - t0 : slice, ntp = n <= 8 ? 8 : 16, fu = fused;
    const dsv4i_cuptr tt = (dsv4i_cuptr)t0;
    dsv4i_cuptr xs = x + tt * (dsv4i_cuptr)ldx * 2u, ys = y + tt * (dsv4i_cuptr)ldy * 2u;
    dsv4i_cuptr pre = xq + tt * (dsv4i_cuptr)k * 2u, psx = sx0 + tt * ldsx * 4u;
    void *p[] = {&n, &rows, &k, &data, &ld, &scale, &sld, &xs, &lx, &pre, &psx, &ys, &ly, &ntp, &fu, &ks};
    st = dsv4i_kreg_launch_grid(o->kr, o->linear_tiled, cdiv(w->rows, Q8T_RB) * (uint32_t)ks,
                                cdiv(n, ntp), 1, q8_tiled_smem(ntp, kbw), s, p);
  }
  return st;
}

static int q8_args_ok(const dsv4i_gpu_weight *w, int32_t n_tok, int64_t ldy) {
  return weight_ok(w) && w->fmt == DSV4I_KFMT_E4M3_UE8M0 && n_tok >= 0 && ldy >= w->rows &&
         n_tok <= 65535 * 8;
}

dsv4_status dsv4i_gpu_linear_q8_pre(const dsv4i_gpu_ops *o, dsv4i_custream s, const dsv4i_gpu_weight *w,
                                    int32_t n_tok, dsv4i_cuptr xq, dsv4i_cuptr sx, dsv4i_cuptr y,
                                    int64_t ldy) {
  if (!q8_args_ok(w, n_tok, ldy))
    return bad("linear_q8_pre", "needs a valid fp8 weight (cols % 32 == 0), ldy >= rows");
  if (!q8_tiled_on(o, w->cols)) return dsv4i_gpu_linear_q(o, s, w, n_tok, xq, sx, y, ldy);
  return q8_tiled(o, s, w, n_tok, 0, w->cols, xq, 0, y, ldy);
}

dsv4_status dsv4i_gpu_linear_q8(const dsv4i_gpu_ops *o, dsv4i_custream s, const dsv4i_gpu_weight *w,
                                int32_t n_tok, dsv4i_cuptr x, int64_t ldx, dsv4i_cuptr xq,
                                dsv4i_cuptr sx, dsv4i_cuptr y, int64_t ldy) {
  if (!q8_args_ok(w, n_tok, ldy) || ldx < w->cols)
    return bad("linear_q8", "needs a valid fp8 weight (cols % 32 == 0), ldx >= cols, ldy >= rows");
  if (q8_tiled_on(o, w->cols)) {
    const dsv4_status st = q8_tiled_ok(w, xq); /* before anything runs */
    if (st != DSV4_OK || (n_tok <= o->q8_fuse_max && n_tok <= 8))
      return st ? st : q8_tiled(o, s, w, n_tok, x, ldx, xq, 1, y, ldy);
  }
  dsv4_status st = dsv4i_gpu_q8_quant(o, s, n_tok, w->cols, x, ldx, xq, sx);
  return st ? st : dsv4i_gpu_linear_q8_pre(o, s, w, n_tok, xq, sx, y, ldy);
}

/* The default mode's bf16 kernel takes 16-byte loads of x rows (alignment is
 * the call site's, never the batch's). */
static int tiled_bf16(const dsv4i_gpu_ops *o, const dsv4i_gpu_weight *w, dsv4i_cuptr x, int64_t ldx) {
  return !o->cpu_order && w->fmt == DSV4I_KFMT_BF16 && !(x & 15) && ldx % 8 == 0;
}

/* The tiled bf16 kernel; with a K split (lt_kb > 1) its scratch takes
 * LT_MAXTY·LT_TOK tokens a launch. osz: bytes of a y element. */
static dsv4_status lt_launch(const dsv4i_gpu_ops *o, dsv4i_custream s, dsv4i_kernel_id id,
                             const dsv4i_gpu_weight *w, int32_t n_tok, dsv4i_cuptr x, int64_t ldx,
                             dsv4i_cuptr y, int64_t ldy, int osz, int32_t group_rows, int64_t group_x) {
  const int32_t step = lt_kb(w->rows, w->cols) > 1 ? LT_MAXTY * LT_TOK : n_tok;
  dsv4_status st = DSV4_OK;
  for (int32_t t0 = 0; t0 < n_tok && !st; t0 += step) {
    const int32_t nt = n_tok - t0 < step ? n_tok - t0 : step;
    st = gemv(o, s, id, w, nt, 0, 0, x + (dsv4i_cuptr)t0 * (dsv4i_cuptr)ldx * 2u, ldx,
              y + (dsv4i_cuptr)t0 * (dsv4i_cuptr)ldy * (dsv4i_cuptr)osz, ldy, group_rows, group_x);
  }
  return st;
}

dsv4_status dsv4i_gpu_linear(const dsv4i_gpu_ops *o, dsv4i_custream s, const dsv4i_gpu_weight *w,
                             int32_t n_tok, dsv4i_cuptr x, int64_t ldx, dsv4i_cuptr y,
                             int64_t ldy, int out_f32) {
  if (!weight_ok(w) || n_tok < 0 || ldx < w->cols || ldy < w->rows ||
      cdiv(n_tok, LIN_TM) > 65535 || (w->fmt != DSV4I_KFMT_BF16 && w->fmt != DSV4I_KFMT_F32))
    return bad("linear", "needs a valid bf16/f32 weight (cols % 32 == 0), ldx >= cols, ldy >= rows");
  if (w->fmt == DSV4I_KFMT_F32 && !out_f32)
    return bad("linear", "fp32 weights give an fp32 result (out_f32 = 1)");
  if (tiled_bf16(o, w, x, ldx))
    return lt_launch(o, s, out_f32 ? o->linear_bf16_f32out_tiled : o->linear_bf16_tiled, w, n_tok,
                     x, ldx, y, ldy, out_f32 ? 4 : 2, 0, 0);
  const dsv4i_kernel_id id = out_f32 ? o->linear_f32out[w->fmt] : o->linear[w->fmt];
  /* bf16 -> fp32 with fewer rows than 4 warps per SM of a big GPU (the router
   * gate): one warp per block with the block's whole ring in flight */
  const int narrow = id == o->linear_f32out[DSV4I_KFMT_BF16] &&
                     (o->f32out_narrow ? o->f32out_narrow > 0 : w->rows < 4 * 132 * 32 || n_tok <= 4);
  return gemv(o, s, id, w, n_tok, 0, 0, x, ldx, y, ldy, narrow, 0);
}

dsv4_status dsv4i_gpu_linear_grouped(const dsv4i_gpu_ops *o, dsv4i_custream s,
                                     const dsv4i_gpu_weight *w, int32_t n_groups, int32_t n_tok,
                                     dsv4i_cuptr x, int64_t ldx, dsv4i_cuptr y, int64_t ldy) {
  if (!weight_ok(w) || w->fmt != DSV4I_KFMT_BF16 || n_groups <= 0 || w->rows % n_groups ||
      n_tok < 0 || ldx < (int64_t)n_groups * w->cols || ldy < w->rows || cdiv(n_tok, LIN_TM) > 65535)
    return bad("linear_grouped", "needs a bf16 weight of n_groups row groups, ldx >= groups x cols");
  const int32_t group_rows = w->rows / n_groups;
  if (group_rows % LIN_ROWS)
    return dsv4i_error(DSV4_ERR_UNSUPPORTED,
                       "gpu linear_grouped: %d rows per group; the kernel needs a multiple of %d",
                       (int)group_rows, LIN_ROWS);
  if (tiled_bf16(o, w, x, ldx))
    return lt_launch(o, s, o->linear_bf16_tiled, w, n_tok, x, ldx, y, ldy, 2, group_rows, w->cols);
  return gemv(o, s, o->linear[DSV4I_KFMT_BF16], w, n_tok, 0, 0, x, ldx, y, ldy, group_rows, w->cols);
}

dsv4_status dsv4i_gpu_dequant_bf16(const dsv4i_gpu_ops *o, dsv4i_custream s,
                                   const dsv4i_gpu_weight *w, dsv4i_cuptr out) {
  if (!weight_ok(w) || w->fmt != DSV4I_KFMT_E4M3_UE8M0 || w->rows > 65535)
    return bad("dequant_bf16", "needs an fp8 weight of at most 65535 rows");
  int rows = w->rows, cols = w->cols;
  long long ld = w->ld, sld = w->scale_ld;
  dsv4i_cuptr data = w->data, scale = w->scale;
  void *p[] = {&rows, &cols, &data, &ld, &scale, &sld, &out};
  return launch(o, o->dequant, cdiv(cols, 256), (uint32_t)rows, s, p);
}

dsv4_status dsv4i_gpu_rope(const dsv4i_gpu_ops *o, dsv4i_custream s, int32_t n_tok, int32_t n_vec,
                           int32_t n_freq, dsv4i_cuptr x, int64_t tok_stride, int64_t vec_stride,
                           dsv4i_cuptr freqs, dsv4i_cuptr pos, int inverse) {
  if (n_tok < 0 || n_vec < 0 || n_freq <= 0 || n_freq > 128) return bad("rope", "sizes (n_freq <= 128)");
  if (n_tok == 0 || n_vec == 0) return DSV4_OK;
  int n = n_tok, nv = n_vec, nf = n_freq, inv = inverse ? 1 : 0;
  long long ts = tok_stride, vs = vec_stride;
  void *p[] = {&n, &nv, &nf, &x, &ts, &vs, &freqs, &pos, &inv};
  return launch(o, o->rope, (uint32_t)n_tok, 1, s, p);
}

dsv4_status dsv4i_gpu_argmax(const dsv4i_gpu_ops *o, dsv4i_custream s, int32_t n_rows,
                             int32_t vocab, dsv4i_cuptr logits, int64_t ld, dsv4i_cuptr out) {
  if (n_rows < 0 || vocab <= 0 || ld < vocab) return bad("argmax", "sizes");
  if (n_rows == 0) return DSV4_OK;
  int n = n_rows, v = vocab;
  long long l = ld;
  void *p[] = {&n, &v, &logits, &l, &out};
  return launch(o, o->argmax, (uint32_t)n_rows, 1, s, p);
}

dsv4_status dsv4i_gpu_sample(const dsv4i_gpu_ops *o, dsv4i_custream s, int32_t n_rows,
                             int32_t vocab, dsv4i_cuptr logits, int64_t ld, dsv4i_cuptr temperature,
                             dsv4i_cuptr seed, dsv4i_cuptr counter, dsv4i_cuptr out) {
  if (n_rows < 0 || vocab <= 0 || ld < vocab) return bad("sample", "sizes");
  if (n_rows == 0) return DSV4_OK;
  int n = n_rows, v = vocab;
  long long l = ld;
  void *p[] = {&n, &v, &logits, &l, &temperature, &seed, &counter, &out};
  return launch(o, o->sample, (uint32_t)n_rows, 1, s, p);
}

dsv4_status dsv4i_gpu_accept(const dsv4i_gpu_ops *o, dsv4i_custream s, int32_t V,
                             dsv4i_cuptr logits, dsv4i_cuptr q, float T, float Tq, int32_t d,
                             uint64_t seed, int64_t pos, uint64_t tag_accept, uint64_t tag_resid,
                             dsv4i_cuptr out) {
  if (V <= 0 || d < 0 || !logits || !out) return bad("accept", "sizes");
  int v = V, dd = d;
  unsigned long long sd = seed, ta = tag_accept, tr = tag_resid;
  long long ps = pos;
  void *p[] = {&v, &logits, &q, &T, &Tq, &dd, &sd, &ps, &ta, &tr, &out};
  return launch(o, o->accept, 1, 1, s, p);
}

dsv4_status dsv4i_gpu_router(const dsv4i_gpu_ops *o, dsv4i_custream s, int32_t n_tok,
                             int32_t n_experts, int32_t top_k, dsv4i_cuptr z, int64_t ldz,
                             dsv4i_cuptr bias, dsv4i_cuptr bias_vl, dsv4i_cuptr use_vl,
                             int32_t norm_topk_prob, float route_scale, dsv4i_cuptr idx,
                             dsv4i_cuptr weight) {
  if (n_tok < 0 || n_experts <= 0 || n_experts > 1024 || top_k <= 0 || top_k > 16 ||
      top_k > n_experts || ldz < n_experts)
    return bad("router", "sizes (experts <= 1024, top_k <= 16)");
  if (n_tok == 0) return DSV4_OK;
  int n = n_tok, e = n_experts, k = top_k, norm = norm_topk_prob ? 1 : 0;
  long long lz = ldz;
  void *p[] = {&n, &e, &k, &z, &lz, &bias, &bias_vl, &use_vl, &norm, &route_scale, &idx, &weight};
  return launch(o, o->router, (uint32_t)n_tok, 1, s, p); /* one block per token */
}

static size_t al(size_t b) { return (b + 255) / 256 * 256; }

/* ---- Engram ---------------------------------------------------------------- */

typedef struct engram_carve {
  size_t rows, xq, sx, kv, total;
} engram_carve;

static engram_carve engram_layout(const dsv4i_gpu_engram *e, int32_t n_tok) {
  const size_t n = (size_t)n_tok, width = (size_t)e->n_cols * (size_t)e->head_dim;
  engram_carve c;
  c.rows = 0;
  c.xq = al(2 * n * width);
  c.sx = c.xq + al(4 * n * width);
  c.kv = c.sx + al(4 * n * width / 32);
  c.total = c.kv + al(2 * n * (size_t)(e->hc + 1) * (size_t)e->dim);
  return c;
}

size_t dsv4i_gpu_engram_scratch_bytes(const dsv4i_gpu_engram *e, int32_t n_tok) {
  return engram_layout(e, n_tok).total;
}

dsv4_status dsv4i_gpu_engram_run(const dsv4i_gpu_ops *o, dsv4i_custream s, const dsv4i_gpu_engram *e,
                             int32_t n_tok, dsv4i_cuptr ids, int64_t ld_ids, dsv4i_cuptr is_image,
                             dsv4i_cuptr gate_vec, dsv4i_cuptr scratch, dsv4i_cuptr h) {
  const int64_t width = (int64_t)e->n_cols * e->head_dim, kvw = (int64_t)(e->hc + 1) * e->dim;
  if (n_tok < 0 || e->dim <= 0 || e->hc <= 0 || e->n_cols <= 0 || e->head_dim <= 0 ||
      e->head_dim % 32 || ld_ids < e->n_cols || (scratch & 255) || !e->table || !e->table_scale ||
      e->wkv.fmt != DSV4I_KFMT_E4M3_UE8M0 || e->wkv.cols != width || e->wkv.rows != kvw ||
      n_tok > 65535 || e->dim > EU_MAX_DIM || (int64_t)n_tok * e->hc > INT32_MAX)
    return bad("engram", "sizes (dim <= 8192), wkv shape or scratch alignment");
  if (n_tok == 0) return DSV4_OK;
  const engram_carve c = engram_layout(e, n_tok);
  dsv4i_cuptr rows = scratch + c.rows, xq = scratch + c.xq, sx = scratch + c.sx, kv = scratch + c.kv;
  int n = n_tok, nc = e->n_cols, hd = e->head_dim;
  long long li = ld_ids;
  dsv4i_cuptr tab = e->table, tsc = e->table_scale;
  void *pg[] = {&n, &nc, &hd, &ids, &li, &tab, &tsc, &is_image, &rows};
  dsv4_status st = launch(o, o->engram_gather, (uint32_t)nc, (uint32_t)n_tok, s, pg);
  if (st == DSV4_OK) st = dsv4i_gpu_linear_q8(o, s, &e->wkv, n_tok, rows, width, xq, sx, kv, kvw);
  if (st != DSV4_OK) return st;
  return dsv4i_gpu_engram_update(o, s, e, n_tok, kv, is_image, gate_vec, h);
}

dsv4_status dsv4i_gpu_engram_update(const dsv4i_gpu_ops *o, dsv4i_custream s,
                                    const dsv4i_gpu_engram *e, int32_t n_tok, dsv4i_cuptr kv,
                                    dsv4i_cuptr is_image, dsv4i_cuptr gate_vec, dsv4i_cuptr h) {
  if (n_tok < 0 || e->dim <= 0 || e->hc <= 0 || e->dim > EU_MAX_DIM ||
      (int64_t)n_tok * e->hc > INT32_MAX)
    return bad("engram update", "sizes (dim <= 8192)");
  if (n_tok == 0) return DSV4_OK;
  int n = n_tok, hc = e->hc, dim = e->dim;
  long long lkv = (long long)(e->hc + 1) * e->dim;
  dsv4i_cuptr qw = e->q_weight, kw = e->k_weight;
  float eps = e->eps, scale = (float)pow((double)e->dim, -0.5);
  void *pu[] = {&n, &hc, &dim, &kv, &lkv, &qw, &kw, &eps, &scale, &is_image, &gate_vec, &h};
  /* one block per (token, copy), its five rows staged in shared memory */
  return dsv4i_kreg_launch_grid(o->kr, o->engram_update, (uint32_t)(n_tok * hc), 1, 1,
                                (uint32_t)(EU_SMEM_PER_DIM * dim), s, pu);
}
