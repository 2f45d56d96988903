/*
 * Engram module of the CPU backend (spec §5.2 "Module", steps 1-6): table
 * row gather (only the rows the ids name are touched), the fp8 wkv projection,
 * the normalised key·stream gate and the gated residual update, for a batch of
 * tokens. Row ids come from model/engram_hash.h. Bit-exact with the reference
 * on both fixtures; the points that decide it (torch's summation order and
 * exp, the batching rule of its vector/scalar split) are in
 * docs/cpu-numerics.md. Thread-safety: pure functions, no global state.
 */
#ifndef DSV4I_CPU_ENGRAM_H
#define DSV4I_CPU_ENGRAM_H

#include <stddef.h>
#include <stdint.h>

#include "base/base.h"
#include "cpu/cpu_ops.h"

struct dsv4i_config;     /* model/config.h */

/**
 * The weights and sizes of one Engram layer (all borrowed: they point into
 * the mmapped checkpoint or caller memory and must outlive every use).
 * Release sizes in brackets.
 */
typedef struct dsv4i_engram_layer {
  int32_t dim;                 /**< model dim [5120] */
  int32_t hc;                  /**< hc_mult: stream copies [4] */
  int32_t n_cols;              /**< row ids per token = (max_ngram − 1) · n_heads [24] */
  int32_t head_dim;            /**< engram_head_dim, a multiple of 32 [256] */
  int64_t rows;                /**< table rows = engram_num_embeddings[slot] */
  const uint8_t *table;        /**< E4M3 [rows][head_dim] (layers.L.engram.embed.weight) */
  const uint8_t *table_scale;  /**< UE8M0 [rows][head_dim/32] (layers.L.engram.embed.scale) */
  dsv4i_wview wkv;             /**< FP8 [(hc+1)·dim][n_cols·head_dim] (layers.L.engram.wkv) */
  const uint16_t *q_weight;    /**< bf16 [hc][dim] (layers.L.engram.q_weight) */
  const uint16_t *k_weight;    /**< bf16 [hc][dim] (layers.L.engram.k_weight) */
  float eps;                   /**< norm_eps [1e-20] */
} dsv4i_engram_layer;

/**
 * Fill *out for Engram slot `slot` of cfg (layer cfg->engram_layers[slot])
 * from the weight table, checking every dtype and shape against the config:
 * embed.weight F8_E4M3 [engram_num_embeddings[slot]][engram_head_dim],
 * embed.scale F8_E8M0 [rows][head_dim/32], wkv FP8
 * [(hc_mult+1)·dim][(engram_max_ngram−1)·engram_n_heads·engram_head_dim]
 * with its 32×32 scale, q_weight / k_weight BF16 [hc_mult][dim].
 * Nothing is read from the table (no page is touched).
 * @param wt   [in] the model's weight table; the model must outlive *out.
 * @param cfg  [in] parsed config.
 * @param slot Engram slot in [0, cfg->n_engram).
 * @param out  [out] zeroed on failure.
 * @return DSV4_OK; DSV4_ERR_INVALID_ARG (NULL, slot out of range, head_dim
 *         not a multiple of 32); DSV4_ERR_NOT_FOUND (a tensor absent);
 *         DSV4_ERR_WEIGHTS (wrong dtype or shape).
 */
dsv4_status dsv4i_engram_layer_load(const dsv4i_weights *wt, const struct dsv4i_config *cfg,
                                    int32_t slot, dsv4i_engram_layer *out);

/**
 * Step 1: gather and dequantise table rows (spec §3.2 "Engram row"):
 * rows[t][c·head_dim + e] = bf16( e4m3(T[id][e]) · 2^(S[id][e/32] − 127) ),
 * the product in fp32 (exact for every finite release value), id =
 * ids[t·ld_ids + c]. Only rows named by ids are read.
 * @param n_tok   tokens (>= 0).
 * @param ids     [in] int64 [n_tok][ld_ids], the first n_cols used; each in [0, e->rows).
 * @param ld_ids  row stride of ids (>= n_cols).
 * @param rows    [out] bf16 [n_tok][n_cols·head_dim].
 * @return DSV4_OK; DSV4_ERR_INVALID_ARG (NULL, bad sizes, an id out of
 *         range: the message names token, column and id; nothing written).
 */
dsv4_status dsv4i_engram_gather(const dsv4i_engram_layer *e, int64_t n_tok, const int64_t *ids,
                                int64_t ld_ids, uint16_t *rows);

/**
 * Steps 3-6 for tokens whose kv = wkv(rows) is known (spec §5.2): per
 * token t and copy c, with x = h[t][c] in fp32, key = kv[t][c·dim .. +dim],
 * value = kv[t][hc·dim .. +dim], w = q_weight ⊙ k_weight (fp32):
 *   dot  = ((Σ_d (x_d·w[c,d])·key_d) · rstd) · fp32(dim^-0.5),
 *   rstd = (1/sqrtf(Σx²/dim + eps)) · (1/sqrtf(Σkey²/dim + eps)),
 *   gate = sigmoid(copysign(sqrt(max(|dot|, 1e-6)), dot)),
 *   h[t][c][d] = bf16(x_d + gate·value_d),
 * sums in torch's order (dsv4i_cpu_sum_torch), the exp of the sigmoid as
 * described at the top (it depends on n_tok: pass the whole call). Image
 * tokens are skipped (the reference's gate 0; their rows stay bit-for-bit
 * unchanged; they still count in n_tok).
 * @param kv       [in] bf16 [n_tok][ld_kv], the first (hc+1)·dim used.
 * @param is_image [in] uint8 [n_tok] or NULL (all text); non-zero = image position.
 * @param h        [in,out] bf16 [n_tok][hc][dim] (contiguous).
 * @return DSV4_OK; DSV4_ERR_INVALID_ARG; DSV4_ERR_OUT_OF_MEMORY (scratch;
 *         h unchanged).
 */
dsv4_status dsv4i_cpu_engram_update(const dsv4i_engram_layer *e, int64_t n_tok,
                                    const uint16_t *kv, int64_t ld_kv, const uint8_t *is_image,
                                    uint16_t *h);

/**
 * The whole Engram module (spec §5.2 "Module" 1-6), in place on the
 * residual stream: for every text token gather its n_cols rows, kv =
 * dsv4i_cpu_linear(wkv, rows) (act-quantised, bf16 out), then
 * dsv4i_cpu_engram_update. Image tokens are neither gathered nor
 * projected, their ids are not read, and their rows of h stay unchanged.
 * Tokens are processed in chunks of 64 text tokens; all scratch (about
 * 64 · (6·n_cols·head_dim + 2·(hc+1)·dim + 4·dim) bytes, 4.6 MB in the
 * release) is allocated before anything is written.
 * @param e        [in] the layer (dsv4i_engram_layer_from_checkpoint).
 * @param n_tok    tokens (>= 0; 0 is a no-op).
 * @param ids      [in] int64 [n_tok][ld_ids] row ids (engram_hash: one slot's
 *                 n_cols ids per token); each id of a text token in [0, e->rows).
 * @param ld_ids   row stride of ids in elements (>= n_cols; n_layers·n_cols
 *                 addresses one slot of the all-layers layout, with ids
 *                 pointing at that slot's first column).
 * @param is_image [in] uint8 [n_tok] or NULL (all text).
 * @param h        [in,out] bf16 [n_tok][hc][dim], contiguous.
 * @return DSV4_OK; DSV4_ERR_INVALID_ARG (NULL, bad sizes, an id out of range:
 *         checked for every token before anything is written, h unchanged);
 *         DSV4_ERR_OUT_OF_MEMORY (h unchanged).
 */
dsv4_status dsv4i_cpu_engram(const dsv4i_engram_layer *e, int64_t n_tok, const int64_t *ids,
                             int64_t ld_ids, const uint8_t *is_image, uint16_t *h);

/**
 * dsv4i_cpu_engram over a batch of several reference calls: run int32
 * [n_tok] (host) names each token's call, a run of consecutive equal
 * values >= 0 (a prefill chunk of one sequence), or < 0 for a token that
 * is a call of its own (a decode row; each token of a verify row is fed
 * as a decode); run NULL = one call. Each
 * token's gate split (vectorised exp or libm, docs/cpu-numerics.md) is
 * that of its own call, so a token's result does not depend on the other
 * calls of the batch. Same statuses and state as dsv4i_cpu_engram.
 */
dsv4_status dsv4i_cpu_engram_runs(const dsv4i_engram_layer *e, int64_t n_tok, const int32_t *run,
                                  const int64_t *ids, int64_t ld_ids, const uint8_t *is_image,
                                  uint16_t *h);

/**
 * Σ a[0..n) in fp32 in exactly the order of torch's CPU sum over a
 * contiguous last dimension (ATen cascade_sum / vectorized_inner_sum, AVX2
 * dispatch: 8-lane accumulators, 4-way interleave, a 4-level cascade of
 * 16-step blocks), which is what the reference's `.sum(-1)` and
 * `.mean(-1)` run. For n >= 8: lane vectors v_i = a[8i .. 8i+8); the
 * tail a[8·floor(n/8) .. n) is added to 0 first, then lanes 0..7 of the
 * vector result in order. For n < 8 the same cascade runs on scalars.
 * The result is never −0 (torch adds into a zero-filled output).
 * @param a [in] float [n]; n >= 0 (0 gives +0).
 */
float dsv4i_cpu_sum_torch(const float *a, int64_t n);

/**
 * exp(d) in fp32 as torch's vectorised CPU kernels compute it (the SLEEF
 * expf_u10 method, max error 1 ulp): q = rint(d·fp32(1/ln2)); s = d − q·ln2
 * with ln2 in two parts (0.693145751953125, 1.428606765330187e-06), each
 * step a fused multiply-add; e^s = 1 + fma(s², P(s), s) with P of degree 5
 * evaluated by Horner with fmaf; times 2^floor(q/2) then 2^(q−floor(q/2)).
 * d < −104 gives +0, d > 100 gives +inf, NaN stays NaN.
 * Thread-safe.
 */
float dsv4i_cpu_expf_vec(float d);

#endif /* DSV4I_CPU_ENGRAM_H */
