/*
 * CPU backend: the DSpark draft head (spec §6.1), the implementation of the
 * engine's dspark_extend / dspark_draft entries (backend/backend.h). A stage S
 * is layer n_layers + S of the weight table and of the sequence's caches (its
 * ring is that layer's WINDOW cache, so fork and truncate follow the
 * backbone's). Weights, rings and the numerics of the draft:
 * docs/speculative.md.
 */
#ifndef DSV4I_CPU_DSPARK_H
#define DSV4I_CPU_DSPARK_H

#include <stdint.h>

#include "backend/backend.h"

struct cpu_backend;

/** The DSpark stages of a CPU backend (opaque outside cpu_dspark.c). */
typedef struct cpu_dspark cpu_dspark;

/**
 * Bind the DSpark weights into b->dspark when the model has DSpark stages
 * (n_mtp_layers > 0 and dspark_block_size > 0); otherwise b->dspark stays NULL.
 * Called once from the backend's create, after the backbone blocks.
 * @return DSV4_OK; DSV4_ERR_NOT_FOUND / DSV4_ERR_WEIGHTS (a tensor missing or of
 *         another format: message names it); DSV4_ERR_OUT_OF_MEMORY.
 */
dsv4_status dsv4i_cpu_dspark_load(struct cpu_backend *b);

/** Release b->dspark (NULL-safe); b->dspark is NULL after. */
void dsv4i_cpu_dspark_free(struct cpu_backend *b);

/** Vtable entry dspark_extend (backend/backend.h): after a step, store
 *  main_kv of every batch token in every stage's ring. */
dsv4_status dsv4i_cpu_be_dspark_extend(dsv4i_backend *be, dsv4i_bbuf taps);

/** Vtable entry dspark_draft (backend/backend.h). */
dsv4_status dsv4i_cpu_be_dspark_draft(dsv4i_backend *be, const dsv4i_kv_step *kv,
                                      const int64_t *pos, const int32_t *anchor, dsv4i_bbuf taps,
                                      const dsv4i_sample_req *req, int32_t *drafts,
                                      float *confidence, dsv4i_bbuf logits);

/** Outputs of one draft forward (host memory; NULL = not wanted, except drafts). */
typedef struct dsv4i_dspark_out {
  int32_t *drafts;   /**< int32 [n][block]: tok_1 .. tok_block */
  float *confidence; /**< f32 [n][block]: raw confidence logits c_0 .. c_{block−1} */
  float *logits;     /**< f32 [n][block][vocab]: base + Markov bias (what drafts are drawn from) */
  float *base;       /**< f32 [n][block][vocab]: head(norm(x)) before the Markov bias */
} dsv4i_dspark_out;

/**
 * One draft forward for the n = kv->n_seq sequences of a page table with every
 * output (the vtable entry wraps it; tests read base logits through it).
 * @param kv     [in] page table: row i = sequence i (n >= 1).
 * @param pos    [in] int64 [n]: pos[i] = kv->len[i] − 1 (>= 0).
 * @param anchor [in] int32 [n] anchor tokens (block row 0, position pos + 1).
 * @param main_hidden [in] bf16 [n][n_taps][dim] stored at pos first, or NULL
 *               when the rings already hold pos (dspark_extend after every step).
 * @param req    [in] [n]: temperature <= 0 greedy; else draft k (k = 1..block)
 *               is drawn with dsv4i_cpu_sample(seed, counter + k − 1).
 * @return DSV4_OK; DSV4_ERR_UNSUPPORTED (no DSpark stages); DSV4_ERR_INVALID_ARG;
 *         DSV4_ERR_OUT_OF_MEMORY. Caches change only with main_hidden (ring slot pos).
 */
dsv4_status dsv4i_cpu_dspark_draft(struct cpu_backend *b, const dsv4i_kv_step *kv,
                                   const int64_t *pos, const int32_t *anchor,
                                   const uint16_t *main_hidden, const dsv4i_sample_req *req,
                                   const dsv4i_dspark_out *out);

#endif /* DSV4I_CPU_DSPARK_H */
