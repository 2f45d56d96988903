/*
 * Speculative decoding with the model's DSpark head (issue 5; spec §6):
 * draft and verify for a batch of sequences, through the backend's DSpark
 * hooks (backend/backend.h dspark_extend / dspark_draft) and the normal step.
 *
 * Rings. When the model has DSpark stages and the backend implements the
 * hooks, every step of the engine (prefill chunks, decode, verify) also
 * computes main_hidden (the taps of the DSpark target layers) and extends
 * the stages' rings with it for every batch position (e->taps, used by
 * dsv4i_engine_run_step). The rings live in the sequence's backend
 * slot, so fork copies them and slot_truncate rolls them back with the
 * backbone's caches. A sequence can therefore draft at any time after its
 * first position, whatever mix of prefill / decode / verify produced it.
 *
 * Draft (spec §6.1): sequence of length len with anchor a (the token it will
 * take at position len): block [a, noise x (B−1)] at len .. len+B−1 over the
 * rings (positions <= len−1), B drafts for positions len+1 .. len+B, and B
 * confidence logits. Greedy, or sampled at a temperature (the draft's
 * distribution is then kept per sequence for the verify's acceptance ratio).
 *
 * Verify (spec §6.2): the target over [a, d_1 .. d_n] at len .. len+n with
 * the decode layout, every row an output row, in steps of at most
 * min(max_batch_tokens, max_out_rows) tokens (a run may continue in the next
 * step; rows are batch-invariant, so the split changes nothing; a sequence
 * already decided sends no more rows). Accept rule:
 *   greedy  longest prefix with d_k == argmax row k−1, then the target's
 *           token at the first mismatch (or the bonus row n);
 *   T > 0   d_k accepted with probability min(1, p_k(d_k) / q_k(d_k)); on
 *           rejection the token is drawn from norm(max(0, p_k − q_k)); after
 *           n acceptances the bonus token is drawn from p_n exactly as a
 *           decode step would (backend sampler, counter = its position).
 *           q is one-hot for greedy drafts, for drafts not produced by this
 *           engine's last draft of the sequence, and for drafts that differ
 *           from it (always lossless: the drafts are fixed before the verify
 *           draws its noise).
 * Then each sequence keeps 1 + accepted positions; everything the rejected
 * tokens wrote (window and DSpark ring slots, compressor state, compressed
 * and index-key records, Engram history) is rolled back by truncation.
 *
 * Randomness: every draw is a pure function of (sequence seed, position,
 * purpose) — the draft's draws, the acceptance uniforms, the residual draws
 * use separate streams — so results never depend on the batch or its order.
 *
 * Draft state is keyed by sequence id (never by batch row).
 */
#ifndef DSV4I_ENGINE_SPEC_H
#define DSV4I_ENGINE_SPEC_H

#include <stdint.h>

#include "engine/engine.h"

typedef struct dsv4i_spec dsv4i_spec;

/**
 * Attach speculative decoding to a new engine (after its backend and step
 * workspace exist, before any sequence): when the model has DSpark stages
 * and the backend implements both hooks, sets e->spec and allocates e->taps
 * (bf16 [max_batch_tokens][n_taps][dim]; from then on every step computes
 * main_hidden and extends the rings, and the engine frees the buffer);
 * otherwise leaves both unset.
 * @return DSV4_OK; DSV4_ERR_OUT_OF_MEMORY.
 */
dsv4_status dsv4i_spec_create(struct dsv4_engine *e);

/** Release e->spec (NULL-safe); before the backend is destroyed. */
void dsv4i_spec_free(struct dsv4_engine *e);

/**
 * Draft for n sequences (see the top of this file).
 * @param ids      [in] int64 [n] distinct live sequences, each of length >= 1.
 * @param anchors  [in] int32 [n] in [0, vocab).
 * @param smp      [in] NULL or temperature <= 0: greedy drafts; else sampled.
 * @param drafts   [out] int32 [n][block].
 * @param confidence [out] f32 [n][block] or NULL.
 * @return DSV4_OK; DSV4_ERR_UNSUPPORTED; DSV4_ERR_INVALID_ARG;
 *         DSV4_ERR_UNKNOWN_SEQUENCE; DSV4_ERR_INVALID_TOKEN;
 *         DSV4_ERR_OUT_OF_MEMORY. No sequence changes.
 */
dsv4_status dsv4i_spec_draft(struct dsv4_engine *e, int32_t n, const int64_t *ids,
                             const int32_t *anchors, const dsv4i_sampling *smp, int32_t *drafts,
                             float *confidence);

/**
 * Verify for n sequences (see the top of this file).
 * @param n_drafts [in] int32 [n], each 0 .. block.
 * @param drafts   [in] int32 [n][block] (row i: the first n_drafts[i] are used);
 *                 may be NULL when every n_drafts is 0.
 * @param n_accepted [out] int32 [n]; next [out] int32 [n]: the target's token
 *                 after the accepted drafts (the next anchor).
 * @return DSV4_OK; with no state change: DSV4_ERR_UNSUPPORTED,
 *         DSV4_ERR_INVALID_ARG, DSV4_ERR_UNKNOWN_SEQUENCE, DSV4_ERR_INVALID_TOKEN,
 *         DSV4_ERR_CONTEXT_OVERFLOW, DSV4_KV_FULL; compute failures roll the
 *         batch back to its previous lengths (or mark sequences damaged).
 */
dsv4_status dsv4i_spec_verify(struct dsv4_engine *e, int32_t n, const int64_t *ids,
                              const int32_t *anchors, const int32_t *n_drafts,
                              const int32_t *drafts, const dsv4i_sampling *smp,
                              int32_t *n_accepted, int32_t *next);

#endif /* DSV4I_ENGINE_SPEC_H */
