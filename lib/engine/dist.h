/*
 * The engine as one rank of a distributed job (docs/distributed.md): pipeline
 * stages over MPI ranks, the stage-to-stage payload per step, and the
 * exchanges that keep every rank's bookkeeping identical. Single-process
 * engines never call into this file's functions (e->dist is NULL).
 *
 * Every rank runs the same deterministic bookkeeping (sequences, slots,
 * pages, Engram histories). Per collective call:
 *   1. dsv4i_dist_call: the ranks agree on the call and a hash of its
 *      arguments (DSV4_ERR_RANK_MISMATCH on every rank, nothing changed);
 *   2. per step, dsv4i_dist_run_step: stage k > 0 receives, checks and
 *      matches the payload, runs its layers, stage k < last sends (or a
 *      failure notice); then every rank learns every rank's step status;
 *   3. dsv4i_dist_share: the last stage's first rank broadcasts its outputs
 *      (sampled tokens, logits, drafts, accept decisions) and its status.
 * So every rank returns the same status and the same tokens.
 */
#ifndef DSV4I_ENGINE_DIST_H
#define DSV4I_ENGINE_DIST_H

#include <stddef.h>
#include <stdint.h>

#include "base/base.h"
#include "backend/backend.h"

struct dsv4_engine;
struct dsv4i_engine_args;
struct dsv4i_config;
typedef struct dsv4i_dist dsv4i_dist;

/** Where this rank sits (after dsv4i_dist_create). */
typedef struct dsv4i_dist_info {
  int32_t rank, world, stage, pp, tp_rank, tp;
  int32_t first_layer, last_layer;
  int32_t has_head;
  void *tp_comm;              /**< the backend's TP collectives (a dsv4i_tp_ops *) */
  int64_t allreduce_calls;    /**< TP all-reduces this rank took part in */
  int64_t steps;              /**< steps run */
  int64_t payload_msgs, payload_bytes; /**< stage payloads this rank sent */
  int64_t control_msgs;       /**< agreements and broadcasts (not all-reduces) */
} dsv4i_dist_info;

/**
 * Join the job: duplicate the application's communicator, check TP x PP
 * against its size, resolve the stage split (given, or automatic: the allowed
 * boundary nearest to an even split of the layers), agree on the library's
 * and the payload's version, the checkpoint and every parameter. Collective.
 * dsv4i_dist_get_info then gives the rank's layers and TP shard for the backend.
 * @return DSV4_OK; DSV4_ERR_INVALID_ARG; DSV4_ERR_UNSUPPORTED (a split where
 *         shared state crosses, a TP size the split rules refuse, built without
 *         MPI); DSV4_ERR_RANK_MISMATCH; DSV4_ERR_RANK_FAILED; DSV4_ERR_OUT_OF_MEMORY.
 */
dsv4_status dsv4i_dist_create(struct dsv4_engine *e, dsv4i_dist **out);

/** The status exchange that ends creation: one rank's failure reaches every rank. */
dsv4_status dsv4i_dist_agree(dsv4i_dist *d, dsv4_status local, const char *what);

/**
 * The part of the model this process's rank of the job in a->mpi_comm would
 * hold (its stage's layers, its TP shard) and the bytes of its stage payload
 * buffer for steps of n_tok tokens and n_out head rows, from the
 * communicator's rank and size and the split rule alone: nothing is exchanged
 * (the memory plan of a rank before creating it).
 * @return DSV4_OK; the statuses of the split and topology checks
 *         (DSV4_ERR_UNSUPPORTED, DSV4_ERR_INVALID_ARG); DSV4_ERR_UNSUPPORTED
 *         (built without MPI).
 */
dsv4_status dsv4i_dist_part_of(const struct dsv4i_config *cfg, const struct dsv4i_engine_args *a,
                               int32_t n_tok, int32_t n_out, dsv4i_model_part *part,
                               int64_t *comm_bytes);

/**
 * Allocate the stage payload buffer for the largest step (n_tok tokens, n_out head
 * rows, n_engram_cols Engram ids per token where they travel), so a step allocates
 * nothing for it. Returns its bytes (0 for one stage), -1 when out of memory.
 */
int64_t dsv4i_dist_reserve(dsv4i_dist *d, const struct dsv4i_config *cfg, int32_t n_tok,
                           int32_t n_out, int32_t n_engram_cols);

void dsv4i_dist_free(dsv4i_dist *d);
void dsv4i_dist_get_info(dsv4i_dist *d, dsv4i_dist_info *out);
/** Whether this rank holds the head (last stage): the rank that samples. */
int dsv4i_dist_has_head(const dsv4i_dist *d);

/**
 * Start of a collective call: the ranks agree on `what` and hash (of the
 * call's arguments). DSV4_OK, DSV4_ERR_RANK_MISMATCH (every rank, nothing
 * changed) or DSV4_ERR_RANK_FAILED (sticky: a rank failed earlier).
 */
dsv4_status dsv4i_dist_call(dsv4i_dist *d, const char *what, uint64_t hash);

/** FNV-1a of bytes, chained (start with 0). */
uint64_t dsv4i_dist_hash(uint64_t h, const void *p, size_t n);

/**
 * One step over the pipeline (see the top of this file). io as for the
 * backend's run (page table set); slot[i] the KV slot and seq[i] the sequence
 * id of token i. Returns the same status on every rank (a failing rank its own).
 */
dsv4_status dsv4i_dist_run_step(struct dsv4_engine *e, const dsv4i_step_io *io,
                                const int32_t *slot, const int64_t *seq);

/**
 * This rank's part of one step of a pipelined call (the micro-batches of a decode,
 * docs/distributed.md "Overlap"): receive and check the payload (stage k > 0), run the
 * stage's layers, send the payload (stage k < last), without the closing status exchange,
 * so stage k goes on to the next micro-batch while stage k + 1 computes this one. prior:
 * this rank's failure in an earlier micro-batch of the call (its message current): the
 * payload is still received and a failure notice sent on, nothing is computed, and prior
 * is returned with its message. Returns this rank's status of the step.
 */
dsv4_status dsv4i_dist_stage_step(struct dsv4_engine *e, const dsv4i_step_io *io,
                                  const int32_t *slot, const int64_t *seq, dsv4_status prior);

/** The status exchange that ends the steps of a call (after dsv4i_dist_stage_step):
 *  the same status on every rank, as dsv4i_dist_run_step returns. */
dsv4_status dsv4i_dist_end_steps(dsv4i_dist *d, dsv4_status local);

/** Pipeline stages (1 for a TP-only job). */
int32_t dsv4i_dist_stages(const dsv4i_dist *d);

/**
 * The last stage's first rank broadcasts its status and n buffers (bufs[i],
 * sizes[i] bytes; the same sizes on every rank) to every rank. local is this
 * rank's status of the work that filled them (ignored off the root). Returns
 * local when it failed, else the root's status (message prefixed), else OK
 * with the buffers filled.
 */
dsv4_status dsv4i_dist_share(dsv4i_dist *d, dsv4_status local, int32_t n, void *const *bufs,
                             const size_t *sizes, const char *what);

#endif /* DSV4I_ENGINE_DIST_H */
