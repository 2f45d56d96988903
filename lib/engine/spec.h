/*
 * Speculative decoding with the model's DSpark head (spec §6): draft and
 * verify for a batch of sequences through the backend's DSpark entries and the
 * normal step. Rings follow every step; draft is greedy or sampled; verify
 * accepts greedily or with the lossless sampled rule and rolls back what the
 * rejected tokens wrote. Every draw is a pure function of (sequence seed,
 * position, purpose). The full rules: docs/speculative.md.
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
