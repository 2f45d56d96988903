/*
 * The engine behind the public dsv4_engine handle: sequences,
 * batch assembly, prefill / decode steps through the backend interface
 * (backend/backend.h), sampling glue, timings. The API layer (lib/api/
 * api_engine.c) checks arguments and captures errors; everything here
 * assumes non-NULL handles and records messages with dsv4i_error().
 *
 * State guarantees (the public header documents them per call):
 * - validation (unknown sequence, bad token, context overflow, empty input)
 *   happens before anything changes;
 * - capacity (DSV4_KV_FULL) is reserved all-or-nothing before any compute;
 * - a compute failure after that (out of memory, internal) rolls the
 *   sequences of the call back when the backend can (decode: one position),
 *   and otherwise marks them damaged: later calls on a damaged sequence
 *   fail with DSV4_ERR_INVALID_ARG until it is freed.
 */
#ifndef DSV4I_ENGINE_H
#define DSV4I_ENGINE_H

#include <stdint.h>

#include "base/base.h"
#include "backend/backend.h"
#include "engine/kv.h"
#include "engine/plan.h"
#include "model/engram_hash.h"
#include "model/model.h"

/** Sequence ids: serial << DSV4I_SEQ_IDX_BITS | table index (never 0). */
#define DSV4I_SEQ_IDX_BITS 16
#define DSV4I_MAX_SEQS ((1 << DSV4I_SEQ_IDX_BITS) - 1)

typedef struct dsv4i_seq {
  int64_t id;                    /**< 0: free entry */
  int32_t slot;                  /**< KV cache slot (engine/kv.h) */
  int32_t damaged;               /**< a failed compute left it inconsistent */
  int64_t len;                   /**< positions held (the next token's position) */
  dsv4i_engram_history *hist;    /**< NULL for a model without Engram layers */
} dsv4i_seq;

/** Op categories of the per-op timings. */
enum {
  DSV4I_OP_EMBED = 0,
  DSV4I_OP_ENGRAM,
  DSV4I_OP_BLOCK,
  DSV4I_OP_HEAD,
  DSV4I_OP_SAMPLE,
  DSV4I_OP_READ,
  DSV4I_OP_HOST, /**< engine-side work: validation, hashing, batch assembly */
  DSV4I_OP_DSPARK, /**< DSpark ring extension and drafts */
  DSV4I_OP_COUNT
};

typedef struct dsv4i_timings {
  int64_t create_ns;
  int64_t prefill_calls, prefill_tokens, prefill_ns, last_prefill_ns;
  int64_t decode_steps, decode_tokens, decode_ns, last_decode_ns;
  int64_t draft_calls, draft_seqs, draft_ns, last_draft_ns;
  int64_t verify_calls, verify_tokens, verify_accepted, verify_ns, last_verify_ns;
  int64_t stage_ns;               /**< this process's layers: time in dsv4i_engine_run_local */
  int64_t op_ns[DSV4I_OP_COUNT];
  int64_t *layer_ns;              /**< [n_layers] block time per backbone layer (per-op mode) */
} dsv4i_timings;

/** Engine flags (mirror DSV4_ENGINE_F_*). */
#define DSV4I_ENGINE_F_OP_TIMINGS 1u
#define DSV4I_ENGINE_F_GPU_CPU_ORDER 2u

/** Creation arguments after the API layer applied defaults. */
typedef struct dsv4i_engine_args {
  uint32_t flags;
  int32_t backend;         /**< DSV4_BACKEND_CPU / _CUDA (AUTO resolved) */
  int32_t device;
  int32_t max_seqs;
  int32_t n_threads;
  int32_t chunk;
  int64_t max_ctx;
  int64_t kv_budget;
  dsv4i_logger log;
  dsv4i_progress_cb progress;
  void *progress_user;
  /* distributed engine (engine/dist.h): NULL = one process */
  void *mpi_comm;          /**< the application's MPI_Comm * */
  int32_t tp, pp;          /**< TP ranks per stage, pipeline stages (1 = none) */
  int32_t dist_timeout_ms; /**< bound of every wait between ranks */
  int32_t stage_first[16]; /**< first layer of each stage, or all 0 = automatic */
  int32_t micro_batches;   /**< decode micro-batches of a pipeline (1 = no overlap) */
  int32_t kv_format;       /**< window records: DSV4I_KV_NATIVE / DSV4I_KV_FP8_DS_MLA */
  /** Tests: without mpi_comm, the engine holds TP rank tp_local->rank of tp_local->size of
   *  the whole model (its backend's shard) and reduces through these collectives (two
   *  shards of one process on two threads: tests/gpu/test_cuda_tp.c). NULL: none. */
  const struct dsv4i_tp_ops *tp_local;
} dsv4i_engine_args;

struct dsv4_engine {
  struct dsv4_model *model;      /**< borrowed, or owned when owns_model */
  int32_t owns_model;
  int32_t vocab;
  int32_t n_valid;               /**< ids ever drawn: min(vocab, the tokenizer's ids); rows of
                                  *   a wider head (the release pads its vocabulary) never are */
  const dsv4i_config *cfg;
  dsv4i_engine_args args;
  dsv4i_plan plan;
  dsv4i_backend *be;
  dsv4i_kv_cache kv;             /**< KV bookkeeping: pages, slots (engine/kv.h) */
  dsv4i_engram_tables *engram;   /**< NULL without Engram layers */
  int32_t n_engram_cols;         /**< n_engram_layers * n_cols per token */
  dsv4i_seq *seqs;               /**< [max_seqs] */
  int64_t serial;
  /* step workspace (backend memory) */
  dsv4i_bbuf h, pre, logits;
  /** DSpark main_hidden taps, bf16 [max_batch_tokens][n_taps][dim], or {NULL}: when
   *  set (by speculative decoding), every step passes it to block() and
   *  then calls the backend's dspark_extend. Freed with the engine. */
  dsv4i_bbuf taps;
  struct dsv4i_spec *spec;       /**< speculative-decoding state, or NULL */
  struct dsv4i_dist *dist;       /**< one rank of a distributed engine (dist.h), or NULL */
  int64_t *b_seqid;              /**< [max_batch_tokens] distributed: sequence id per token */
  /* host batch scratch, [max_batch_tokens] each (engram: x n_engram_cols) */
  int32_t *b_tok, *b_slot, *b_out;
  int32_t *b_seq;                /**< [max_batch_tokens] page-table row of each token */
  int32_t *b_rslot;              /**< [max_seqs] slot of each page-table row */
  int64_t *b_rend;               /**< [max_seqs] its end of the step */
  int64_t *b_pos, *b_engram;
  int32_t *b_layout;
  dsv4i_sample_req *b_req;
  dsv4i_seq **b_q;               /**< [max_out_rows] decode: sequence of each batch row */
  int64_t *b_len;                /**< [max_out_rows] decode: its length before the step */
  uint8_t *mark;                 /**< [max_seqs] duplicate detection */
  dsv4i_timings t;
  /** DSV4_ERR_DEVICE_LOST once the backend reported it: sticky, every later call on
   *  this engine returns it (other engines are unaffected). 0 otherwise. */
  dsv4_status lost;
  char *last_error;              /**< [DSV4I_ERROR_CAP] */
};

/** Record a status the backend returned: DSV4_ERR_DEVICE_LOST makes the engine
 *  sticky-failed. Returns s. */
dsv4_status dsv4i_engine_note(struct dsv4_engine *e, dsv4_status s);
/** DSV4_OK, or DSV4_ERR_DEVICE_LOST (recorded) when the engine is sticky-failed. */
dsv4_status dsv4i_engine_live(const struct dsv4_engine *e);

/** The memory plan an engine created with these args has: the one function that sizes
 *  the pools (create calls it; so do dsv4_engine_plan_query and dsv4-plan --engine).
 *  part: the layers and TP shard of one rank of a distributed engine (its caches, its
 *  prepared weights, its checkpoint bytes), NULL for one process. */
dsv4_status dsv4i_engine_plan(const struct dsv4_model *model, const dsv4i_engine_args *a,
                              const dsv4i_model_part *part, dsv4i_plan *out);
/** Create (model borrowed; the caller sets owns_model afterwards if it should). */
dsv4_status dsv4i_engine_create(struct dsv4_model *model, const dsv4i_engine_args *a,
                                struct dsv4_engine **out);
/** NULL is a no-op; frees the model when owned. */
void dsv4i_engine_free(struct dsv4_engine *e);

/* ---- sequences (sequence.c) ---- */
dsv4_status dsv4i_seq_create(struct dsv4_engine *e, int64_t *id);
dsv4_status dsv4i_seq_fork(struct dsv4_engine *e, int64_t parent, int64_t *child);
dsv4_status dsv4i_seq_free(struct dsv4_engine *e, int64_t id);
/** Lookup: the live, undamaged entry of id or NULL with DSV4_ERR_UNKNOWN_SEQUENCE /
 *  DSV4_ERR_INVALID_ARG (damaged) recorded in *st. */
dsv4i_seq *dsv4i_seq_find(struct dsv4_engine *e, int64_t id, dsv4_status *st);
/** Live sequences. */
int32_t dsv4i_seq_count(const struct dsv4_engine *e);
/** Roll sequence id back to its first len positions (a verify's rejected tail, at most
 *  the layout's spare positions back: docs/attention.md): KV, DSpark rings, compressor
 *  state and Engram history. DSV4_ERR_INVALID_ARG (len out of range; a refused
 *  rollback marks the sequence damaged), DSV4_ERR_UNKNOWN_SEQUENCE. */
dsv4_status dsv4i_seq_truncate(struct dsv4_engine *e, int64_t id, int64_t len);

/** Sampling of one call (temperature, seed, optional per-sequence seeds). */
typedef struct dsv4i_sampling {
  float temperature;
  uint64_t seed;
  const uint64_t *seeds;         /**< [n] or NULL */
} dsv4i_sampling;

/* ---- steps (step.c) ---- */
dsv4_status dsv4i_engine_prefill(struct dsv4_engine *e, int64_t id, const int32_t *tokens,
                                 int64_t n, const dsv4i_sampling *smp, float *logits,
                                 int32_t *sampled);
dsv4_status dsv4i_engine_decode(struct dsv4_engine *e, int32_t n, const int64_t *ids,
                                const int32_t *tokens, const dsv4i_sampling *smp,
                                float *logits, int32_t *sampled);

/** One row of a mixed step (dsv4i_engine_step): a run of tokens of one sequence. */
typedef struct dsv4i_step_row {
  int64_t id;              /**< a live sequence, at most once per step */
  const int32_t *tokens;   /**< int32 [n] (host), each in [0, vocab) */
  int32_t n;               /**< >= 1 */
  int32_t generated;       /**< 1: generated tokens, each with the decode layout (n > 1: a
                            *   verify run, the pending token and drafts, as verify feeds
                            *   them); 0: a prompt chunk, which takes the prefill layout of its
                            *   own end, as one prefill call of these tokens would (so results
                            *   equal dsv4i_engine_prefill's) */
  int32_t want_logits;     /**< 1: output rows: of every token of a generated row, of the last
                            *   token of a chunk, in token order */
} dsv4i_step_row;

/** One step over several sequences at once: decode or verify rows and prompt chunks in
 *  one backend batch (docs/serving.md, "Scheduler"). Rows of at most max_batch_tokens
 *  tokens and max_out_rows output rows in all; logits [n_out][vocab] (host) in row
 *  order. Each row's results
 *  equal those of the prefill or decode call of that row alone. All or nothing:
 *  DSV4_KV_FULL and the argument errors change nothing; a failure during the
 *  step (or non-finite logits, DSV4_ERR_NOT_FINITE) rolls every row back.
 *  Distributed engine: collective, every rank gives the same rows (else
 *  DSV4_ERR_RANK_MISMATCH on every rank, nothing changed); the step runs over the
 *  pipeline and every rank gets the last stage's logits and status. */
dsv4_status dsv4i_engine_step(struct dsv4_engine *e, int32_t n_rows, const dsv4i_step_row *rows,
                              float *logits);

/** Reserve KV positions [len, targets[i]) for qs[i] (slots[i] its slot): all or nothing
 *  (DSV4_KV_FULL, DSV4_ERR_INVALID_ARG); a failed page copy of the backend leaves the
 *  sequences damaged (and DSV4_ERR_DEVICE_LOST the engine sticky-failed). */
dsv4_status dsv4i_engine_reserve(struct dsv4_engine *e, int32_t n, dsv4i_seq *const *qs,
                                 const int32_t *slots, const int64_t *targets);

/**
 * Run one step through the backend (its run entry, or block by block with per-op
 * timing). slot[t] is the KV slot of token t (runs of consecutive tokens per
 * sequence, reserved beforehand); this fills b->seq and b->kv (the step's page
 * table) and, when the run succeeds, commits every run's positions. A distributed
 * engine runs it over the pipeline (dist.h) and commits only when every rank succeeded.
 */
dsv4_status dsv4i_engine_run_step(struct dsv4_engine *e, dsv4i_batch *b, const int32_t *slot);
/** The page table of a step (b->seq, b->kv; one row per run of a slot's consecutive
 *  tokens in e->b_rslot / e->b_rend, *n_runs of them); commits nothing. */
dsv4_status dsv4i_engine_step_table(struct dsv4_engine *e, dsv4i_batch *b, const int32_t *slot,
                                    int32_t *n_runs);
/** Logits rows [0, n) of the step just run to the caller's logits and/or sampled tokens
 *  (qs[i] the sequence of row i, its len the sampled token's position); DSV4_ERR_NOT_FINITE
 *  when a row has no token to draw (the caller rolls the step back). */
dsv4_status dsv4i_engine_local_outputs(struct dsv4_engine *e, int32_t n,
                                       const dsv4i_sampling *smp, dsv4i_seq *const *qs,
                                       float *logits, int32_t *sampled);
/** Distributed: the last stage's outputs (n rows; s its status of computing them) to
 *  every rank (dsv4i_dist_share). */
dsv4_status dsv4i_engine_share_outputs(struct dsv4_engine *e, dsv4_status s, int32_t n,
                                       float *logits, int32_t *sampled);
/** Decode of n >= 2 rows on a pipeline as e->args.micro_batches micro-batches (pipeline.c,
 *  docs/distributed.md "Overlap"): the batch metadata e->b_tok / b_pos / b_layout / b_out /
 *  b_slot / b_engram filled for the n rows, positions reserved, lens[i] qs[i]'s length
 *  before the step. On success the positions are committed, qs[i]->len = lens[i] + 1 and
 *  the outputs filled on every rank; on failure nothing is committed (the caller rolls
 *  back), the same status on every rank. */
dsv4_status dsv4i_engine_decode_pipelined(struct dsv4_engine *e, int32_t n, dsv4i_seq *const *qs,
                                          const int64_t *lens, const dsv4i_sampling *smp,
                                          int want, float *logits, int32_t *sampled);
/** This process's part of a step (b->seq and b->kv set): the backend's run entry, or
 *  block by block with per-op timing. Commits nothing. A distributed step (dist.h)
 *  calls it between receiving and sending the stage payload. */
dsv4_status dsv4i_engine_run_local(struct dsv4_engine *e, const dsv4i_batch *b);

/* ---- timing (timing.c) ---- */
int64_t dsv4i_now_ns(void);
/** Start an op timer: returns the start time, or 0 when per-op timing is off. */
int64_t dsv4i_op_begin(struct dsv4_engine *e);
/** Stop it: syncs the backend (per-op mode only) and adds to op (and layer >= 0). */
void dsv4i_op_end(struct dsv4_engine *e, int64_t t0, int32_t op, int32_t layer);
void dsv4i_timings_reset(struct dsv4_engine *e);

#endif /* DSV4I_ENGINE_H */
