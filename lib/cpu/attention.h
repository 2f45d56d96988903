/*
 * CPU backend: the attention sublayer (spec §5.4) over the per-sequence
 * caches of kvcache.h, batched over tokens of several sequences. One call =
 * one layer for n_tok tokens; a sequence's tokens are consecutive at
 * consecutive positions from its committed length. A token's result depends
 * only on its inputs, position, index-row layout and its sequence's caches.
 * Index-row layouts, the per-forward shared state and the numerics are in
 * docs/attention.md.
 */
#ifndef DSV4I_ATTENTION_H
#define DSV4I_ATTENTION_H

#include <stddef.h>
#include <stdint.h>

#include "base/base.h"
#include "cpu/cpu_ops.h"
#include "cpu/kvcache.h"
#include "model/config.h"


/** Layout flag of a token: the decode index row (see the top of this file). */
#define DSV4I_ATTN_DECODE 0
/** Entries per online-softmax block of the sparse attention kernel (spec §5.4 step 4). */
#define DSV4I_ATTN_BLOCK 64
/** Largest rope_head_dim / 2 supported. */
#define DSV4I_ATTN_MAX_FREQ 128

/** Weights and constants of one attention layer (backbone layer or DSpark stage). */
typedef struct dsv4i_attn_layer {
  int32_t layer;            /**< layer id: 0..n_layers-1, DSpark stage S = n_layers + S */
  dsv4i_layer_role role;    /**< copy of cfg->layers[layer] */
  int32_t dim, n_heads, head_dim, rope_dim, q_lora, o_groups, o_lora, window;
  int32_t ratio;            /**< compress ratio (0: window only) */
  int32_t index_heads, index_head_dim, index_topk;
  int32_t cand_blocks, cand_block_size;
  float eps;                /**< norm_eps */
  float softmax_scale;      /**< fp32(head_dim^-0.5) */
  float index_wscale;       /**< fp32(index_head_dim^-0.5 · index_heads^-0.5) (1/64 for V4.1) */
  dsv4i_wview wq_a;         /**< FP8 [q_lora][dim] */
  dsv4i_wview wq_b;         /**< FP8 [n_heads·head_dim][q_lora] */
  dsv4i_wview wkv;          /**< FP8 [head_dim][dim] */
  dsv4i_wview wo_b;         /**< FP8 [dim][o_groups·o_lora] */
  dsv4i_wview wo_a;         /**< BF16 [o_groups·o_lora][n_heads·head_dim/o_groups], over wo_a_bf16 */
  uint16_t *wo_a_bf16;      /**< owned: wo_a dequantised at load (spec §3.3) */
  const uint16_t *q_norm;   /**< bf16 [q_lora] */
  const uint16_t *kv_norm;  /**< bf16 [head_dim] */
  const float *sink;        /**< fp32 [n_heads] attn_sink */
  /* compressor (KV sources): ratio 1 BF16 wkv; ratio > 1 wkv + wgate, used upcast to fp32 */
  dsv4i_wview c_wkv, c_wgate;  /**< [head_dim][dim] */
  const uint16_t *c_norm;      /**< bf16 [head_dim] */
  /* indexer (index sources) */
  dsv4i_wview i_wq_b;       /**< FP8 [index_heads·index_head_dim][q_lora] */
  dsv4i_wview i_wproj;      /**< BF16 [index_heads][dim] weights_proj */
  dsv4i_wview i_wk;         /**< BF16 [index_head_dim][head_dim] (owns keys) */
  const uint16_t *i_knorm;  /**< bf16 [index_head_dim] (owns keys) */
  int32_t n_freq;           /**< rope_dim / 2 */
  float freqs[DSV4I_ATTN_MAX_FREQ]; /**< this layer's RoPE frequencies (spec §8.3) */
  /** tensor parallelism: n_heads / o_groups are this rank's share (wq_b rows, sink, wo_a
   *  rows and wo_b columns sliced to match) and wo_b's output, a partial sum, is
   *  all-reduced; NULL = whole */
  const struct dsv4i_tp_ops *tp;
} dsv4i_attn_layer;

/**
 * Bind one layer's attention weights from the weight table (backbone layer
 * or DSpark stage n_layers + S), dequantise wo_a to bf16 and build
 * the RoPE frequencies (ratio 0: rope_theta, no YaRN; ratio > 0:
 * compress_rope_theta with YaRN). The model must outlive *out.
 * @param wt    [in] the model's weight table.
 * @param cfg   [in] config (roles derived); must outlive nothing (values copied).
 * @param layer 0 .. cfg->n_total_layers − 1.
 * @param out   [out] filled; release with dsv4i_attn_layer_free.
 * @return DSV4_OK; DSV4_ERR_INVALID_ARG; DSV4_ERR_NOT_FOUND / DSV4_ERR_WEIGHTS
 *         (a tensor missing or of the wrong dtype / shape; message names it);
 *         DSV4_ERR_OUT_OF_MEMORY. On failure *out holds nothing.
 */
dsv4_status dsv4i_attn_layer_load(const dsv4i_weights *wt, const dsv4i_config *cfg,
                                  int32_t layer, dsv4i_attn_layer *out);
/** Free what dsv4i_attn_layer_load allocated; *L is zeroed. NULL ok. */
void dsv4i_attn_layer_free(dsv4i_attn_layer *L);

/** Tokens of one call (structure of arrays, caller-owned, not kept). */
typedef struct dsv4i_attn_batch {
  int32_t n_tok;
  dsv4i_kv_view *const *seq;  /**< [n_tok] caches of each token's sequence */
  const int64_t *pos;        /**< [n_tok] positions (< 2^24) */
  const int32_t *layout;     /**< [n_tok] DSV4I_ATTN_DECODE or a prefill width 1..window */
} dsv4i_attn_batch;

/**
 * Per-forward state handed from source layers to later layers, per token
 * row of the batch (spec §5.4 "Shared runtime"; one per forward, reused by
 * every layer of it). Caller-owned; dsv4i_attn_shared_init allocates.
 */
typedef struct dsv4i_attn_shared {
  int32_t cap_tok;     /**< rows allocated */
  int32_t topk_ld;     /**< index_topk */
  int32_t *topk;       /**< [cap_tok][topk_ld] latest index source's selection:
                            compressed record ids ascending, then −1 */
  int32_t cand_ld;     /**< candidate_topk_blocks (0 without a candidate source) */
  int32_t *cand;       /**< [cap_tok][cand_ld] candidate source's kept blocks ascending, then −1 */
  /* test hooks, NULL in production */
  const int32_t *force_topk; /**< [n_tok][topk_ld] or NULL: an index source still writes
                                  its own selection to topk, but attends with this one */
  float *scores;       /**< [n_tok][scores_ld] or NULL: an index source writes the keys its
                            top-k ranked (bf16 scores as fp32, −inf where candidate-masked)
                            for its visible positions [0, (pos+1)/ratio) */
  int64_t scores_ld;
} dsv4i_attn_shared;

/**
 * Allocate shared state for up to max_tok tokens of a config.
 * @return DSV4_OK; DSV4_ERR_INVALID_ARG; DSV4_ERR_OUT_OF_MEMORY (*sh zeroed).
 */
dsv4_status dsv4i_attn_shared_init(const dsv4i_config *cfg, int32_t max_tok,
                                   dsv4i_attn_shared *sh);
/** Free; *sh zeroed. NULL ok. */
void dsv4i_attn_shared_free(dsv4i_attn_shared *sh);

/**
 * One attention sublayer (spec §5.4 steps 1–6) for a batch of tokens:
 * q path, window KV (MXFP8 QDQ, written to the ring), compressor (KV
 * sources; ratio-2 groups completed across calls from the CSTATE ring),
 * indexer (index sources: index keys of emitted groups, index query, head
 * weights, scores, candidate blocks on the candidate source, candidate
 * masking on later index sources, top-k with the lower-index tie rule),
 * compressed KV store (fp4/E4M3 QDQ), sparse attention with sink, inverse
 * RoPE, grouped wo_a and wo_b.
 *
 * @param L   [in] the layer.
 * @param b   [in] tokens (rules at the top of this file).
 * @param x   [in] bf16 [n_tok][dim]: attn_norm output.
 * @param sh  [in,out] shared state of this forward (cap_tok >= n_tok): index
 *            sources write topk (and the candidate source cand); consumer
 *            layers read them. Must be the same object for all layers of a
 *            forward over the same batch.
 * @param out [out] bf16 [n_tok][dim].
 * @return DSV4_OK; DSV4_ERR_INVALID_ARG (batch rules, positions not
 *         reserved; nothing written); DSV4_ERR_OUT_OF_MEMORY (scratch; the
 *         layer's cache records of these positions may be partly written,
 *         which the engine's truncate undoes within the rollback depth).
 */
dsv4_status dsv4i_attn_forward(const dsv4i_attn_layer *L, const dsv4i_attn_batch *b,
                               const uint16_t *x, dsv4i_attn_shared *sh, uint16_t *out);

/* ======================================================================
 * DSpark stages (spec §6.1)
 * ====================================================================== */

/**
 * Store main_kv rows into a DSpark stage's window ring: kv = kv_norm(wkv(main_x)),
 * RoPE at each position (θ = rope_theta, no YaRN), MXFP8 record (act_quant).
 * Prefill seeds every prompt position; after each target step (and after a
 * verify, for every accepted position) the new positions are stored.
 * @param L      [in] a DSpark stage (ratio 0).
 * @param n      rows.
 * @param seq    [in,out] [n] caches; pos[t] < seq[t]->end.
 * @param pos    [in] int64 [n] target positions of the rows.
 * @param main_x [in] bf16 [n][dim]: main_norm(main_proj(main_hidden)) rows.
 * @return DSV4_OK; DSV4_ERR_INVALID_ARG (nothing written); DSV4_ERR_OUT_OF_MEMORY.
 */
dsv4_status dsv4i_attn_dspark_store(const dsv4i_attn_layer *L, int32_t n,
                                    dsv4i_kv_view *const *seq, const int64_t *pos,
                                    const uint16_t *main_x);

/**
 * DSpark stage attention of n_blk draft blocks (reference DSparkAttention,
 * decode): block b's `block` tokens sit at positions anchor[b] + 1 .. +block;
 * every query of the block attends to the ring slots 0 .. min(window,
 * anchor+1) − 1 of a window-slot ring in slot order (slot s = the newest
 * position <= anchor congruent to s mod window), then to all `block` rows of
 * its own block (no causal mask; their kv MXFP8-QDQ'd, never stored); sink,
 * inverse RoPE, wo_a, wo_b as in the backbone. The caller stores main_kv at
 * anchor[b] first (dsv4i_attn_dspark_store).
 * @param seq    [in] [n_blk] caches; anchor[b] < seq[b]->end.
 * @param x      [in] bf16 [n_blk·block][dim] attn_norm output of the block tokens.
 * @param out    [out] bf16 [n_blk·block][dim].
 * @return DSV4_OK; DSV4_ERR_INVALID_ARG; DSV4_ERR_OUT_OF_MEMORY.
 */
dsv4_status dsv4i_attn_dspark(const dsv4i_attn_layer *L, int32_t n_blk, dsv4i_kv_view *const *seq,
                              const int64_t *anchor, int32_t block, const uint16_t *x,
                              uint16_t *out);

/* ======================================================================
 * Building blocks (exposed for tests and as the oracle of other backends)
 * ====================================================================== */

/**
 * Window part of a token's index row (spec §5.4 step 2 / step 4).
 * @param pos     query position.
 * @param layout  DSV4I_ATTN_DECODE or a prefill width 1..window.
 * @param window  sliding window.
 * @param out     [out] int64 [window]: position of each entry or −1.
 * @return the width of the window part (window for decode, layout otherwise).
 */
int32_t dsv4i_attn_window_row(int64_t pos, int32_t layout, int32_t window, int64_t *out);

/**
 * Sparse attention with sink for one query token (spec §5.4 step 4, KCPU
 * sparse_attn): per head h, over the index row in blocks of 64 entries,
 * s = fp32(q_h · kv) (fp32, increasing d) · scale; M starts at −1e30;
 * per block: M' = max(M, block max), f = exp(M − M'), p = exp(s − M'),
 * S = S·f + Σp (fp32 p, entry order), acc = acc·f + Σ bf16(p)·kv; after the
 * last block S += exp(sink_h − M) (sink not scaled, not in the max);
 * o = bf16(acc / S). A row with no valid entry gives 0.
 * @param n_heads, hd  heads and head dim.
 * @param q       [in] bf16 [n_heads][hd] (post-RoPE).
 * @param rows    [in] [n_idx] pointers to kv rows float [hd] (bf16 values), NULL = −1.
 * @param sink    [in] fp32 [n_heads].
 * @param o       [out] bf16 [n_heads][hd].
 * @param h0, h1  heads [h0, h1) are computed (lets callers split heads across threads).
 */
void dsv4i_attn_sparse(int32_t n_heads, int32_t hd, const uint16_t *q, const float *const *rows,
                       int32_t n_idx, const float *sink, float scale, uint16_t *o, int32_t h0,
                       int32_t h1);

/**
 * Top-k with libdsv4's tie rule (spec §8.2): the k largest keys of
 * key[0..n) (equal keys: lower index first; −inf ranks like any value),
 * returned as indices in ascending index order.
 * @param k 0 .. n; out [out] int32 [k].
 * @return DSV4_OK; DSV4_ERR_OUT_OF_MEMORY (scratch for large k).
 */
dsv4_status dsv4i_attn_topk(const float *key, int64_t n, int32_t k, int32_t *out);

/**
 * Candidate blocks of one query (spec §5.4 3b step 6): block b scores
 * max(score[b·bs .. b·bs + bs) ∩ [0, visible)); the block holding position
 * visible − 1 is forced to +inf; the min(n_keep, n_blocks) best blocks
 * (lower index on ties) are kept, ascending, −1 padded to n_keep.
 * @param score [in] fp32 [visible] bf16-valued scores.
 * @param out   [out] int32 [n_keep].
 * @return DSV4_OK; DSV4_ERR_OUT_OF_MEMORY.
 */
dsv4_status dsv4i_attn_candidates(const float *score, int64_t visible, int32_t bs, int32_t n_keep,
                                  int32_t *out);

/**
 * Index score of one key for one query (spec §5.4 3b step 4): per head the
 * fp32 dot (increasing dim, separate multiply and add) rounded to bf16,
 * relu, times the head weight rounded to bf16, the heads summed in fp32 in
 * order and rounded to bf16.
 * @param qf  [in] fp32 [n_heads][ihd] MXFP4-QDQ'd index query (bf16 values).
 * @param wf  [in] fp32 [n_heads] bf16-rounded scaled head weights.
 * @param rec [in] index-key record; kf [out] scratch float [ihd].
 * @return the score (a bf16 value as fp32).
 */
float dsv4i_attn_index_score(int32_t n_heads, int32_t ihd, const float *qf, const float *wf,
                             const uint8_t *rec, float *kf);

/**
 * Ratio-r compressor pooling of one group (spec §5.4 3a): per dim d,
 * softmax over the r members of g[·][d] (max, exp, sum from 0 in member
 * order, then a division), latent[d] = Σ_m k[m][d] · w_m in fp32, rounded
 * to bf16 (before compressor.norm).
 * @param r 1..8; k, g [in] r rows of fp32 [hd]; out [out] bf16 [hd].
 */
void dsv4i_attn_pool_group(int32_t r, int32_t hd, const float *const *k, const float *const *g,
                           uint16_t *out);

#endif /* DSV4I_ATTENTION_H */
