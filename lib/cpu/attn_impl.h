/*
 * Private pieces of the CPU attention sublayer (lib/cpu/attn_*.c only).
 * Shapes: n = tokens of the call; H heads, hd head_dim, rd rope dims,
 * nf = rd/2 frequencies; bf16 values travel as uint16_t bits.
 */
#ifndef DSV4I_ATTN_IMPL_H
#define DSV4I_ATTN_IMPL_H

#include <stdint.h>

#include "cpu/attention.h"

#ifdef _OPENMP
#include <omp.h>
#define DSV4I_AOMP(x) _Pragma(#x)
#else
#define DSV4I_AOMP(x)
#endif

/** One call's token bookkeeping. */
typedef struct attn_call {
  const dsv4i_attn_layer *L;
  const dsv4i_attn_batch *b;
  const dsv4i_kv_layout *lay; /**< the sequences' KV layout (its window record format) */
  int32_t n;          /**< tokens */
  int32_t *run0;      /**< [n] batch index of the first token of t's sequence run */
  int32_t *run1;      /**< [n] batch index one past the last token of t's run */
  float *cs;          /**< [n][nf][2] cos/sin at each token's position (this layer's table) */
  int32_t n_emit;     /**< tokens completing a compression group (KV sources) */
  int32_t *emit_tok;  /**< [n] batch index of each emitting token, ascending */
} attn_call;

/** First position of t's run in this call (= its sequence's committed length). */
static inline int64_t attn_first_pos(const attn_call *c, int32_t t) {
  return c->b->pos[c->run0[t]];
}

/**
 * Window KV (spec §5.4 step 2): kv = kv_norm(wkv(x)), RoPE on the last rd
 * dims at each position, the QDQ of c->lay's window format over all hd dims
 * (native: act_quant; dsv4i_kv_window_qdq).
 * @param x   [in] bf16 [n][dim].
 * @param kv  [out] bf16 [n][hd] before the QDQ (what the ring record encodes).
 * @param kvw [out] bf16 [n][hd] after the QDQ (what attention reads).
 */
dsv4_status dsv4i_attn_window_kv(const attn_call *c, const uint16_t *x, uint16_t *kv, uint16_t *kvw);

/**
 * The window rows of one run as fp32 (bf16 values): positions
 * [lo, last] with lo = max(0, first − window + 1); positions < first decoded
 * from the ring, the others from kvw.
 * @param r0    batch index of the run's first token; len: its tokens.
 * @param rows  [out] float [(first − lo) + len][hd].
 * @return lo.
 */
int64_t dsv4i_attn_window_rows(const attn_call *c, int32_t r0, int32_t len, const uint16_t *kvw,
                         float *rows);

/** Write every token's window record (act_quant of kv [n][hd], pre-QDQ) into
 *  its sequence's ring (after attending). */
void dsv4i_attn_window_store(const attn_call *c, const uint16_t *kv);

/**
 * Compressor (spec §5.4 3a) of a KV source: for each token that completes a
 * group, the bf16 latent after compressor.norm, before RoPE; fills
 * c->n_emit / c->emit_tok. Ratio > 1 also writes every token's (k, g) into
 * the CSTATE ring (after reading what it needs).
 * @param x   [in] bf16 [n][dim]; lat [out] bf16 [n][hd] (row e = emit e).
 */
dsv4_status dsv4i_attn_compress(attn_call *c, const uint16_t *x, uint16_t *lat);

/**
 * Store the compressed KV of emitted groups (spec §5.4 3c): RoPE at the
 * group's first position j·ratio, fp4/E4M3 record into COMP slot j.
 * @param lat [in,out] bf16 [n_emit][hd] (rotated in place).
 */
dsv4_status dsv4i_attn_comp_store(const attn_call *c, uint16_t *lat);

/**
 * Index keys of emitted groups (spec §5.4 3b step 1): k_norm(wk(latent)),
 * RoPE at j·ratio, MXFP4 record into IDXK slot j.
 * @param lat [in] bf16 [n_emit][hd] (pre-RoPE latents).
 */
dsv4_status dsv4i_attn_index_keys(const attn_call *c, const uint16_t *lat);

/**
 * Indexer selection of an index source (spec §5.4 3b steps 2–8) for every
 * token: writes sh->topk rows (and sh->cand rows on the candidate source,
 * sh->scores when set).
 * @param x [in] bf16 [n][dim]; qr [in] bf16 [n][q_lora].
 */
dsv4_status dsv4i_attn_indexer(const attn_call *c, const uint16_t *x, const uint16_t *qr,
                         dsv4i_attn_shared *sh);

/**
 * Sparse attention of every token (spec §5.4 step 4) over its window part
 * and its compressed selection (sel: [n][sel_ld] record ids, −1 padded;
 * NULL for ratio 0).
 * @param q [in] bf16 [n][H][hd]; kvw [in] bf16 [n][hd]; o [out] bf16 [n][H][hd].
 */
dsv4_status dsv4i_attn_attend(const attn_call *c, const uint16_t *q, const uint16_t *kvw,
                        const int32_t *sel, int32_t sel_ld, uint16_t *o);

/**
 * Output (spec §5.4 steps 5–6): inverse RoPE of o's tails, grouped wo_a
 * (bf16), wo_b (fp8).
 * @param o [in,out] bf16 [n][H][hd]; out [out] bf16 [n][dim].
 */
dsv4_status dsv4i_attn_output(const attn_call *c, uint16_t *o, uint16_t *out);

#endif /* DSV4I_ATTN_IMPL_H */
