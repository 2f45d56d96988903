/*
 * CPU backend, numerical core (everything except attention): weight views,
 * linear layers for every checkpoint weight format, RMSNorm, the
 * hyper-connection mixes (hc_mixes, Sinkhorn, hc_pre, hc_post), RoPE/YaRN,
 * MoE (router + experts) and the head with sampling. The numerical oracle for
 * every other backend: the reference's rounding points operation by operation,
 * a fixed summation order everywhere (results never depend on the thread
 * count or the batch). Conventions and accumulation rules: docs/cpu-numerics.md.
 * Thread-safety: all functions are thread-safe (no shared mutable state).
 */
#ifndef DSV4I_CPU_OPS_H
#define DSV4I_CPU_OPS_H

#include <stddef.h>
#include <stdint.h>

#include "base/base.h"

#include "model/rope_freqs.h"
#include "model/weights.h"

/* ======================================================================
 * Threads
 * ====================================================================== */

/**
 * Set the number of OpenMP threads the calling thread's later calls use
 * (omp_set_num_threads: a per-thread setting, not process-global). n <= 0
 * means one per processor (omp_get_num_procs). No-op without OpenMP.
 */
void dsv4i_cpu_set_threads(int32_t n);

/** Threads the calling thread's calls would use now (1 without OpenMP). */
int32_t dsv4i_cpu_threads(void);

/* ======================================================================
 * Weight views (spec §3.2)
 * ====================================================================== */

/** Storage format of a weight view. */
enum {
  DSV4I_W_F32 = 1,  /**< float [rows][cols] */
  DSV4I_W_BF16 = 2, /**< uint16_t bf16 [rows][cols] */
  DSV4I_W_FP8 = 3,  /**< uint8_t E4M3 [rows][cols] + UE8M0 [ceil(rows/32)][ceil(cols/32)] */
  DSV4I_W_FP4 = 4   /**< uint8_t packed E2M1 [rows][cols/2] (even element in the low
                         nibble) + UE8M0 [rows][cols/32] */
};

/**
 * A borrowed description of one weight matrix W [rows = out][cols = in]
 * (the checkpoint's [out, in] layout). Nothing is owned: data and scale
 * point into the mmapped checkpoint or into caller memory.
 *
 * fp8 scale element (rb, cb) covers rows [32rb, 32rb+32) and cols
 * [32cb, 32cb+32); row stride of the scale array is scale_ld
 * (= ceil(cols/32) for a checkpoint tensor; a row slice keeps the parent's).
 * fp4 scale element (r, cb) covers row r, cols [32cb, 32cb+32), row stride
 * scale_ld (= cols/32). data_ld is the row stride of data in elements for
 * F32/BF16/FP8 and in bytes for FP4 (= cols/2 for a checkpoint tensor).
 */
typedef struct dsv4i_wview {
  int32_t fmt;          /**< DSV4I_W_* */
  int32_t rows;         /**< output features */
  int32_t cols;         /**< input features (logical, unpacked) */
  int64_t data_ld;      /**< row stride of data (see above) */
  int64_t scale_ld;     /**< row stride of scale in bytes; 0 without scale */
  const void *data;     /**< see DSV4I_W_* */
  const uint8_t *scale; /**< UE8M0 bytes for FP8/FP4, else NULL */
} dsv4i_wview;

/**
 * Fill a view of a dense, checkpoint-layout matrix (strides from rows/cols).
 * @param fmt   DSV4I_W_*.
 * @param rows  out features (> 0); cols: in features (> 0; FP4: multiple of 32).
 * @param data  see DSV4I_W_*; scale: UE8M0 for FP8/FP4, ignored otherwise.
 * @return DSV4_OK; DSV4_ERR_INVALID_ARG (bad fmt, dims, NULL pointers).
 */
dsv4_status dsv4i_wview_init(dsv4i_wview *w, int32_t fmt, int32_t rows, int32_t cols,
                             const void *data, const uint8_t *scale);

/**
 * View of a weight-table entry (model/weights.h). The format follows the
 * stored dtype: F32, BF16, F8_E4M3 (with its F8_E8M0 scale
 * [ceil(rows/32)][ceil(cols/32)]) or I8 (packed e2m1 [rows][cols/2] with its
 * F8_E8M0 scale [rows][cols/32]). Shapes are checked.
 * @return DSV4_OK; DSV4_ERR_INVALID_ARG (NULL or unmapped); DSV4_ERR_NOT_FOUND
 *         (scale absent); DSV4_ERR_WEIGHTS (unsupported dtype, wrong rank or
 *         shape). On failure *out is zeroed.
 */
dsv4_status dsv4i_wview_from_weight(const dsv4i_weight *w, dsv4i_wview *out);

/**
 * Rows [row0, row0 + n_rows) of w as a view (same cols). FP8 needs row0 a
 * multiple of 32 (scale blocks are 32 rows), other formats any row0.
 * Used for grouped projections (wo_a groups) and tensor-parallel splits.
 * @return DSV4_OK; DSV4_ERR_INVALID_ARG (out of range, misaligned).
 */
dsv4_status dsv4i_wview_rows(const dsv4i_wview *w, int32_t row0, int32_t n_rows,
                             dsv4i_wview *out);

/**
 * View of input columns [col0, col0 + n_cols) (a tensor-parallel split of a
 * contraction: wo_b, w2). FP8/FP4 slices cover whole 32-column scale blocks.
 * @return DSV4_OK; DSV4_ERR_INVALID_ARG (out of range, misaligned).
 */
dsv4_status dsv4i_wview_cols(const dsv4i_wview *w, int32_t col0, int32_t n_cols,
                             dsv4i_wview *out);

/**
 * Dequantise a weight to bf16 [rows][cols] (spec §3.2 "Dequantisation"):
 * FP8 W = e4m3 · 2^(S[r/32][c/32] − 127), FP4 W = e2m1 · 2^(S[r][c/32] − 127),
 * computed in fp32 (exact) and rounded to bf16 (exact for every finite
 * weight of the release). BF16 is copied; F32 is rounded to bf16.
 * This is how `attn.wo_a` is prepared at load (spec §3.3, convert.py).
 * @param out [out] uint16_t bf16 [rows][cols], caller-owned.
 * @return DSV4_OK; DSV4_ERR_INVALID_ARG.
 */
dsv4_status dsv4i_wview_dequant_bf16(const dsv4i_wview *w, uint16_t *out);

/* ======================================================================
 * Linear layers (spec §3.3)
 * ====================================================================== */

/**
 * y = linear(x, W) with the reference's dispatch on the weight format:
 * - FP8: x is act_quant'ed per row in K-blocks of 32 (UE8M0, spec §8.1);
 *   y[t][o] = bf16( Σ_kb ((Σ_{k∈kb} xq·wq) · sx[t][kb]) · sw[o/32][kb] ),
 *   the block dot in fp32 in increasing k, the blocks added in fp32 in K
 *   order, multiplications in exactly that order (KCPU fp8_gemm).
 * - FP4: the same with e2m1 weight codes and per-(row, 32) scales sw[o][kb]
 *   (KCPU fp4_gemm, act_block_size 32).
 * - BF16: F.linear in bf16: fp32 accumulation of the exact bf16·bf16
 *   products in increasing k over all of K, one rounding to bf16.
 * F32 weights are rejected here (use dsv4i_cpu_linear_f32).
 *
 * @param w     [in] weight view [out][in]; FP8/FP4 need in % 32 == 0.
 * @param n_tok rows of x (>= 0).
 * @param x     [in] bf16 [n_tok][ldx], the first w->cols used.
 * @param y     [out] bf16 [n_tok][ldy], the first w->rows written.
 * @return DSV4_OK; DSV4_ERR_INVALID_ARG; DSV4_ERR_OUT_OF_MEMORY (scratch).
 */
dsv4_status dsv4i_cpu_linear(const dsv4i_wview *w, int64_t n_tok, const uint16_t *x, int64_t ldx,
                             uint16_t *y, int64_t ldy);

/**
 * Linear with an fp32 result for the weights the reference upcasts (spec
 * §3.3): router gate.weight, head.weight, compressor wkv/wgate at ratio 2,
 * markov_head.head, confidence_head.proj: y = x.float() @ W.float()ᵀ.
 * Accumulation: fp32, sequentially in increasing k over all of K (exact
 * products for BF16 weights; rounded products for F32 weights).
 *
 * @param w     [in] BF16 or F32 weight view [out][in].
 * @param x     [in] bf16 [n_tok][ldx] (every upcast input is a bf16 tensor).
 * @param y     [out] float [n_tok][ldy].
 * @return DSV4_OK; DSV4_ERR_INVALID_ARG; DSV4_ERR_OUT_OF_MEMORY.
 */
dsv4_status dsv4i_cpu_linear_f32(const dsv4i_wview *w, int64_t n_tok, const uint16_t *x,
                                 int64_t ldx, float *y, int64_t ldy);

/**
 * act_quant (spec §8.1) of n_tok rows of k values, decoded for the GEMM:
 * xq[t][i] = e4m3 value (fp32, unscaled), sx[t][b] = 2^e of block b.
 * Lets several fp8/fp4 linears that read the same activation (wq_a and wkv,
 * w1 and w3 of every expert) quantise it once.
 * @param k   multiple of 32.
 * @param x   [in] bf16 [n_tok][ldx]; xq [out] float [n_tok][k]; sx [out] float [n_tok][k/32].
 * @return DSV4_OK; DSV4_ERR_INVALID_ARG.
 */
dsv4_status dsv4i_cpu_act_quant(int64_t n_tok, int32_t k, const uint16_t *x, int64_t ldx,
                                float *xq, float *sx);

/**
 * The FP8/FP4 branch of dsv4i_cpu_linear (spec §3.3) on an activation already
 * quantised by dsv4i_cpu_act_quant (same result bit for bit).
 * @param w   [in] FP8 or FP4 view, w->cols == k of the quantisation.
 * @param xq  [in] float [n_tok][w->cols]; sx [in] float [n_tok][w->cols/32].
 * @param y   [out] bf16 [n_tok][ldy].
 * @return DSV4_OK; DSV4_ERR_INVALID_ARG.
 */
dsv4_status dsv4i_cpu_linear_q(const dsv4i_wview *w, int64_t n_tok, const float *xq,
                               const float *sx, uint16_t *y, int64_t ldy);

/* ======================================================================
 * RMSNorm and hyper-connections (spec §5.3)
 * ====================================================================== */

/**
 * RMSNorm: y = bf16( w · (x · r) ), r = 1 / sqrtf( Σx²/fp32(dim) + eps ),
 * everything in fp32 (Σx² of the exact fp32 squares in torch's order; x·r
 * first, then the bf16 weight, as the reference's `self.weight * x`).
 * @param x   [in] bf16 [n_tok][ldx]; w [in] bf16 [dim]; eps: config norm_eps.
 * @param y   [out] bf16 [n_tok][ldy]; may equal x when ldy == ldx.
 * @return DSV4_OK; DSV4_ERR_INVALID_ARG.
 */
dsv4_status dsv4i_cpu_rmsnorm(int64_t n_tok, int32_t dim, const uint16_t *x, int64_t ldx,
                              const uint16_t *w, float eps, uint16_t *y, int64_t ldy);

/**
 * hc_mixes projection (spec §5.3): X = h[t] flattened copy-major to
 * [hc·dim] (element c·dim + d) in fp32; r = 1 / sqrtf(ΣX²/fp32(hc·dim) + eps)
 * (ΣX² in torch's order); mixes[t][m] = fp32(X · fn[m]) · r (the projection
 * first, then · r; X · fn as in the accumulation rules).
 * @param hc    copies (hc_mult); dim: model dim.
 * @param h     [in] bf16 [n_tok][hc][dim] (contiguous).
 * @param fn    [in] float [(2+hc)·hc][hc·dim] (hc_attn_fn / hc_ffn_fn).
 * @param eps   norm_eps.
 * @param mixes [out] float [n_tok][(2+hc)·hc].
 * @return DSV4_OK; DSV4_ERR_INVALID_ARG.
 */
dsv4_status dsv4i_cpu_hc_mixes(int64_t n_tok, int32_t hc, int32_t dim, const uint16_t *h,
                               const float *fn, float eps, float *mixes);

/**
 * hc_split_sinkhorn (spec §5.3, KCPU), all fp32, per token:
 *   pre  = sigmoid(m[0:hc]·scale[0] + base[0:hc]) + hc_eps
 *   post = 2·sigmoid(m[hc:2hc]·scale[1] + base[hc:2hc])
 *   C[i][j] = m[2hc + hc·i + j]·scale[2] + base[2hc + hc·i + j]  (i source, j dest)
 *   C = exp(C − max_j C) / Σ_j + hc_eps;  C = C / (Σ_i C + hc_eps);
 *   (iters − 1) times: C = C / (Σ_j C + hc_eps); C = C / (Σ_i C + hc_eps).
 * sigmoid(z) = 1/(1 + exp(−z)) and the softmax exp with dsv4i_cpu_expf_vec;
 * sums in index order.
 * @param mixes [in] float [n_tok][(2+hc)·hc]; scale [in] float [3];
 *              base [in] float [(2+hc)·hc].
 * @param iters hc_sinkhorn_iters (>= 1).
 * @param pre   [out] float [n_tok][hc]; post [out] float [n_tok][hc];
 *              comb [out] float [n_tok][hc][hc] (row i = source copy).
 * @return DSV4_OK; DSV4_ERR_INVALID_ARG.
 */
dsv4_status dsv4i_cpu_hc_split_sinkhorn(int64_t n_tok, int32_t hc, const float *mixes,
                                        const float *scale, const float *base, int32_t iters,
                                        float hc_eps, float *pre, float *post, float *comb);

/**
 * hc_pre (spec §5.3): y[t][d] = bf16( Σ_c pre[t][c] · h[t][c][d] ), the
 * products in fp32, summed in c order.
 * @param h   [in] bf16 [n_tok][hc][dim]; pre [in] float [n_tok][hc].
 * @param y   [out] bf16 [n_tok][dim].
 * @return DSV4_OK; DSV4_ERR_INVALID_ARG.
 */
dsv4_status dsv4i_cpu_hc_pre(int64_t n_tok, int32_t hc, int32_t dim, const uint16_t *h,
                             const float *pre, uint16_t *y);

/**
 * hc_post (spec §5.3): out[t][j][d] = bf16( post[t][j]·x[t][d] +
 * Σ_i comb[t][i][j]·res[t][i][d] ), products in fp32, the sum over i in
 * order, then the post term added.
 * @param x    [in] bf16 [n_tok][dim] (sublayer output).
 * @param res  [in] bf16 [n_tok][hc][dim] (the sublayer's input stream).
 * @param post [in] float [n_tok][hc]; comb [in] float [n_tok][hc][hc].
 * @param out  [out] bf16 [n_tok][hc][dim]; may equal res (in place).
 * @return DSV4_OK; DSV4_ERR_INVALID_ARG (also hc > 16).
 */
dsv4_status dsv4i_cpu_hc_post(int64_t n_tok, int32_t hc, int32_t dim, const uint16_t *x,
                              const uint16_t *res, const float *post, const float *comb,
                              uint16_t *out);

/* ======================================================================
 * RoPE / YaRN (spec §8.3)
 * ====================================================================== */

/* dsv4i_rope_freqs: model/rope_freqs.h (shared with the CUDA backend). */

/**
 * cos/sin rows for given positions: angle = fp32(fp32(pos) · freq[i])
 * (rounded to fp32 before the cosine, spec §8.3), cs[t][i][0] = cos(angle),
 * cs[t][i][1] = sin(angle), each correctly rounded to fp32 (computed in
 * double). Matches the golden rope.* tables to 1 fp32 ulp (the reference's
 * own cos/sin are within 1 ulp). pos must be < 2^24 (exact in fp32).
 * @param freqs [in] float [n_freq]; pos [in] int64 [n].
 * @param cs    [out] float [n][n_freq][2].
 * @return DSV4_OK; DSV4_ERR_INVALID_ARG (negative or too large position).
 */
dsv4_status dsv4i_rope_cs(const float *freqs, int32_t n_freq, int64_t n, const int64_t *pos,
                          float *cs);

/**
 * Apply (or undo) the rotation in place on interleaved pairs (x[2i], x[2i+1])
 * of n_freq pairs per vector, for n_tok tokens × n_vec vectors each
 * (spec §8.3): (a, b) -> fp32 complex product with (c, ±s):
 * forward a' = a·c − b·s, b' = a·s + b·c; inverse (conjugate) a' = a·c + b·s,
 * b' = b·c − a·s; products rounded to fp32, then the sum, then bf16.
 * @param x          [in,out] bf16; vector v of token t starts at
 *                   x + t·tok_stride + v·vec_stride and is the rope part
 *                   (point x at the first rope element, e.g. dim 448 of a head).
 * @param cs         [in] float [n_tok][n_freq][2] (dsv4i_rope_cs for the tokens' positions).
 * @param inverse    0 forward, 1 conjugate rotation (attention output).
 * @return DSV4_OK; DSV4_ERR_INVALID_ARG.
 */
dsv4_status dsv4i_cpu_rope(int64_t n_tok, int32_t n_vec, int32_t n_freq, uint16_t *x,
                           int64_t tok_stride, int64_t vec_stride, const float *cs, int inverse);

/* ======================================================================
 * MoE (spec §5.5)
 * ====================================================================== */

/** The weights and constants of one MoE layer (all borrowed). */
typedef struct dsv4i_moe {
  int32_t n_experts;        /**< routed experts (384 backbone, 128 DSpark) */
  int32_t top_k;            /**< activated experts per token (6 / 3), <= 16 */
  int32_t dim, inter;       /**< model dim, moe_inter_dim */
  float route_scale;        /**< routed_scaling_factor (1.5) */
  float swiglu_limit;       /**< 10; <= 0 disables the clamps */
  int32_t norm_topk_prob;   /**< renormalise the top-k weights (true in V4.1) */
  dsv4i_wview gate;         /**< BF16/F32 [n_experts][dim], upcast (ffn.gate.weight) */
  const float *bias;        /**< F32 [n_experts] (ffn.gate.bias) */
  const float *bias_vl;     /**< F32 [n_experts] (ffn.gate.bias_vl) or NULL */
  const dsv4i_wview *w1;    /**< [n_experts] FP4 [inter][dim] (may be FP8/BF16 too) */
  const dsv4i_wview *w2;    /**< [n_experts] FP4 [dim][inter] */
  const dsv4i_wview *w3;    /**< [n_experts] FP4 [inter][dim] */
  int32_t has_shared;       /**< 1: add the shared expert below */
  dsv4i_wview sw1, sw2, sw3;/**< shared expert, FP8 */
  const struct dsv4i_tp_ops *tp; /**< tensor parallelism: inter is this rank's share of every
                             *   expert's intermediate dim and the output a partial sum,
                             *   all-reduced before its bf16 rounding; NULL = whole */
} dsv4i_moe;

/**
 * Router (Gate.forward): z = x.float() @ gate.float()ᵀ (dsv4i_cpu_linear_f32),
 * s = sqrtf(softplus(z)) with softplus(z) = z if z > 20 else log1pf(expf(z));
 * selection key s + bias (bias_vl where use_vl[t]); top_k by key, descending,
 * exactly equal keys: lower expert id first (libdsv4's tie rule, spec §8.2);
 * weights w = s[idx] (unbiased), with norm_topk_prob and top_k > 1:
 * w /= (Σ_k w + 1e-20f), the sum over the selection-ordered weights in
 * torch's order (for k = 6: ((((w0 + w4) + w5) + w1) + w2) + w3);
 * then w *= route_scale.
 * @param x      [in] bf16 [n_tok][ldx] (ffn_norm output).
 * @param use_vl [in] uint8 [n_tok] or NULL (all text).
 * @param idx    [out] int32 [n_tok][top_k] expert ids in selection order.
 * @param weight [out] float [n_tok][top_k].
 * @return DSV4_OK; DSV4_ERR_INVALID_ARG; DSV4_ERR_OUT_OF_MEMORY.
 */
dsv4_status dsv4i_cpu_router(const dsv4i_moe *m, int64_t n_tok, const uint16_t *x, int64_t ldx,
                             const uint8_t *use_vl, int32_t *idx, float *weight);

/**
 * Top-k of one row with libdsv4's tie rule: the k largest of key[0..n),
 * descending, equal values in increasing index; NaN keys are never
 * selected before a number. Used by the router; exposed for tests.
 * @param k <= n and <= 64; out [out] int32 [k].
 */
void dsv4i_cpu_topk_desc(const float *key, int32_t n, int32_t k, int32_t *out);

/**
 * Routed experts + shared expert for given routing (Expert / MoE.forward):
 * per routed expert e of token t with weight w:
 *   g = w1(x), u = w3(x) (fp8-quantised x, bf16 outputs, then fp32);
 *   u = clamp(u, −limit, limit); g = min(g, limit);
 *   a = w · (silu(g) · u), silu(g) = g / (1 + exp(−g)) (dsv4i_cpu_expf_vec);
 *   y_e = w2(bf16(a)) (bf16);
 * y[t] = fp32 0, + y_e for the token's experts in ASCENDING expert id, then
 * + the shared expert's output (same SwiGLU, no weight); out = bf16(y).
 * Tokens are grouped per expert (one batched GEMM per expert); the
 * per-token order is kept, so results do not depend on the batch.
 * @param x      [in] bf16 [n_tok][ldx].
 * @param idx    [in] int32 [n_tok][top_k]; weight [in] float [n_tok][top_k].
 *               An id < 0 skips that slot. Duplicate ids in one row are an error.
 * @param out    [out] bf16 [n_tok][ldo].
 * @return DSV4_OK; DSV4_ERR_INVALID_ARG; DSV4_ERR_OUT_OF_MEMORY.
 */
dsv4_status dsv4i_cpu_moe_experts(const dsv4i_moe *m, int64_t n_tok, const uint16_t *x,
                                  int64_t ldx, const int32_t *idx, const float *weight,
                                  uint16_t *out, int64_t ldo);

/**
 * MoE forward: dsv4i_cpu_router then dsv4i_cpu_moe_experts.
 * @param x [in] bf16 [n_tok][ldx]; use_vl [in] uint8 [n_tok] or NULL;
 * @param out [out] bf16 [n_tok][ldo].
 * @return as dsv4i_cpu_moe_experts.
 */
dsv4_status dsv4i_cpu_moe(const dsv4i_moe *m, int64_t n_tok, const uint16_t *x, int64_t ldx,
                          const uint8_t *use_vl, uint16_t *out, int64_t ldo);

/* ======================================================================
 * Head and sampling (spec §5.6)
 * ====================================================================== */

/**
 * Head: x = hc_pre(h, pre) (pre = the last block's FFN pre), x = norm(x)
 * (RMSNorm with norm_w, eps), logits = x.float() @ head.float()ᵀ (fp32,
 * dsv4i_cpu_linear_f32). Also the DSpark head with its stage norm.
 * @param h      [in] bf16 [n_tok][hc][dim]; pre [in] float [n_tok][hc].
 * @param norm_w [in] bf16 [dim]; head [in] BF16/F32 view [vocab][dim].
 * @param logits    [out] float [n_tok][head->rows].
 * @param collapsed [out] bf16 [n_tok][dim] or NULL: the hc_pre output before
 *                  the norm (the DSpark confidence head reads it).
 * @return DSV4_OK; DSV4_ERR_INVALID_ARG; DSV4_ERR_OUT_OF_MEMORY.
 */
dsv4_status dsv4i_cpu_head(int64_t n_tok, int32_t hc, int32_t dim, const uint16_t *h,
                           const float *pre, const uint16_t *norm_w, float eps,
                           const dsv4i_wview *head, float *logits, uint16_t *collapsed);

/** Greedy pick (spec §5.6, tie rule §8.2): index of the largest of x[0..n),
 *  the first among equal maxima; NaN ignored (all NaN: 0). n >= 1. */
int32_t dsv4i_cpu_argmax(const float *x, int64_t n);

/** Whether a token can be drawn from x[0..n): -1 when it can (no NaN, no
 *  +inf, some value finite); else the index of the first NaN or +inf, or n
 *  when every value is -inf. */
int64_t dsv4i_cpu_not_drawable(const float *x, int64_t n);

/** ids a sample request may draw: n_valid when in (0, vocab), else vocab. */
static inline int32_t dsv4i_cpu_valid_ids(int32_t n_valid, int32_t vocab) {
  return n_valid > 0 && n_valid < vocab ? n_valid : vocab;
}
/** DSV4_ERR_NOT_FINITE for row r of x[0..n) (dsv4i_cpu_not_drawable), naming what it holds. */
dsv4_status dsv4i_cpu_not_finite_error(const float *x, int64_t n, const char *what, int32_t r);

/**
 * The Exp(1) noise of dsv4i_cpu_sample (spec §5.6) for element i:
 * q = fp32(−log(u)) in double with u = (r + 0.5) · 2^-53, r = the top 53 bits of a 64-bit counter-based hash
 * of (seed, counter, i) (SplitMix64 finaliser applied to
 * seed ^ mix(counter) ^ mix2(i), see head.c). Deterministic, stateless,
 * identical on every backend that implements the same integer hash.
 * u ∈ (0, 1) strictly, so q ∈ (0, 37.5): never 0 (a zero would make its token
 * win regardless of p).
 */
float dsv4i_sample_noise(uint64_t seed, uint64_t counter, int64_t i);

/**
 * Sample a token from fp32 logits (spec §5.6, reference `sample`):
 * temperature <= 0: argmax (lower index wins ties). Otherwise
 * p = softmax(logits / max(T, 1e-5)) in fp32 (max-subtracted expf, the sum in
 * index order, times 1/sum), token = argmax_i p_i / q_i with q_i =
 * dsv4i_sample_noise(seed, counter, i) — the Gumbel-max / exponential race
 * trick the reference uses, i.e. an exact draw from p. Use a new counter per
 * draw (e.g. the position) so draws are independent and replayable.
 * @param logits [in] float [vocab].
 * @return the token id in [0, vocab); -1 when the row has none
 *         (dsv4i_cpu_not_drawable, or bad arguments).
 */
int32_t dsv4i_cpu_sample(const float *logits, int32_t vocab, float temperature, uint64_t seed,
                         uint64_t counter);

#endif /* DSV4I_CPU_OPS_H */
