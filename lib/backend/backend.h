/*
 * The backend contract as the engine sees it: backend-owned buffers
 * (dsv4i_bbuf), the step's metadata (dsv4i_batch, padded to the step plan's
 * bucket, with the page table of its sequences), KV page storage (the engine
 * decides which page holds what: engine/kv.h), one step run over a stage [first_layer, last_layer)
 * (embed on the first stage, DSpark and head on the last) or op by op, and the
 * optional DSpark entries. Create arguments carry the layer range, the TP
 * rank/size/communicator and a stream. Every entry returns dsv4_status with its
 * message recorded; DSV4_ERR_DEVICE_LOST makes the engine sticky-failed.
 * The full contract (layouts, runs, caches, numerics, memory, errors) is
 * docs/backend.md; the layers are docs/architecture.md.
 */
#ifndef DSV4I_BACKEND_BACKEND_H
#define DSV4I_BACKEND_BACKEND_H

#include <stddef.h>
#include <stdint.h>

#include "base/base.h"
#include "backend/kv_layout.h"
#include "model/accept.h"

struct dsv4_model;   /* model/model.h: config, roles, checkpoint */
struct dsv4i_config; /* model/config.h */

/** A backend-owned buffer. impl is meaningful only to the backend; {NULL} is "none". */
typedef struct dsv4i_bbuf {
  void *impl;
} dsv4i_bbuf;

/** Layout of a generated token: decode index row (window part = the ring, oldest first). */
#define DSV4I_LAYOUT_DECODE 0

/** Layout of the tokens of a prompt ingest that ends at position `end` (exclusive). */
static inline int32_t dsv4i_layout_prefill(int64_t end, int32_t window) {
  return end < window ? (int32_t)end : window;
}

/**
 * Page table of the sequences of a step (host memory, engine-owned, valid for
 * the call). Row i is sequence i's page row: table (kind k, layer l) at
 * pages[i·ld + off[k][l]] (backend/kv_layout.h). Entries past what a table
 * holds are unspecified; the engine reserved every page the step touches and
 * made private (kv_copy) every shared page it writes.
 */
typedef struct dsv4i_kv_step {
  int32_t n_seq;        /**< sequences (the runs of a batch, in batch order) */
  int32_t ld;           /**< int32 per row (dsv4i_kv_layout.ld) */
  const int32_t *pages; /**< int32 [n_seq][ld] page ids */
  const int64_t *len;   /**< int64 [n_seq] positions the caches hold before the step */
  const int64_t *end;   /**< int64 [n_seq] positions [len, end) are reserved for it */
} dsv4i_kv_step;

/**
 * Metadata of one step (host memory, copied by set_batch).
 * n_tok >= 1 and <= the max_batch_tokens given at create.
 */
typedef struct dsv4i_batch {
  int32_t n_tok;
  int32_t n_pad;              /**< the step plan's bucket: the padded shape this step runs
                               *   in (n_tok <= n_pad <= max_batch_tokens; a device backend
                               *   replays the graph captured for it; the CPU computes n_tok) */
  const int32_t *tokens;      /**< int32 [n_tok] token ids in [0, vocab) */
  const int64_t *pos;         /**< int64 [n_tok] positions (runs: consecutive, see above) */
  const int32_t *seq;         /**< int32 [n_tok] row of kv of each token's sequence */
  const int32_t *layout;      /**< int32 [n_tok] DSV4I_LAYOUT_DECODE or a prefill width */
  const uint8_t *image;       /**< uint8 [n_tok] non-zero = image-span position, or NULL (text) */
  int32_t n_out;              /**< rows head() computes, 0..n_tok */
  const int32_t *out_tok;     /**< int32 [n_out] token indices, ascending; row r of the
                               *   logits buffer is token out_tok[r] */
  const int64_t *engram_ids;  /**< int64 [n_tok][n_engram_layers][n_cols] table row ids
                               *   (spec §5.2; Engram slots in config order, the layout of
                               *   dsv4i_engram_history_row_ids with slot -1), or NULL for
                               *   a model without Engram layers */
  dsv4i_kv_step kv;           /**< the page table of the batch's sequences: row r's run
                               *   starts at position kv.len[r] */
} dsv4i_batch;

/** One sampling request (host), row r of a logits buffer. */
typedef struct dsv4i_sample_req {
  float temperature;  /**< <= 0: argmax (lower index on ties) */
  int32_t n_valid;    /**< only ids < n_valid are drawn (the tokenizer's ids; 0 or >= vocab:
                       *   all); later values of the row are never read */
  uint64_t seed;      /**< noise stream (spec §5.6 exponential race) */
  uint64_t counter;   /**< draw index within the stream (the engine uses the position) */
} dsv4i_sample_req;

/**
 * Cache storage of a backend for a config and a context length: what the
 * memory planner needs. Every cache kind of every layer draws pages of one
 * size from one shared pool.
 */
typedef struct dsv4i_cache_format {
  int64_t page_bytes;        /**< bytes of one pool page */
  int64_t seq_pages;         /**< pages one sequence of max_positions needs (rings included) */
  int64_t ring_pages;        /**< of those, pages a sequence holds from its first position */
  int64_t bytes_per_pos;     /**< record bytes per position, all layers (spec §5.8: 890 B
                              *   for the release with the native records) */
  int64_t slot_bytes;        /**< the backend's own bytes per live sequence outside the pool
                              *   (the engine adds its page tables: dsv4i_kv_slot_bytes) */
  int64_t weight_bytes;      /**< memory the backend adds at load (dequantised wo_a, ...) */
  int64_t act_bytes_per_tok; /**< step workspace per batch token (buffers + scratch) */
  int64_t act_bytes_fixed;   /**< step workspace independent of the batch size */
  /** A backend whose per-row buffers serve max(tokens, output rows x draft_rows) rows (a
   *  DSpark draft runs draft_rows rows per sequence): bytes per such row, and per output
   *  row; the plan's workspace is fixed + T x per_tok + max(T, R x draft_rows) x per_row +
   *  R x per_out for T batch tokens and R output rows. 0 where unused (the CPU). */
  int64_t act_bytes_per_row, act_bytes_per_out;
  int32_t draft_rows, reserved;
} dsv4i_cache_format;

/** Progress of a long create: stage name, done of total units. Non-zero return = abort. */
typedef int32_t (*dsv4i_progress_cb)(const char *stage, int64_t done, int64_t total, void *user);

/**
 * Tensor-parallel collectives as a backend sees them: the create arguments'
 * tp_comm when tp_size > 1 on the CPU backend (the engine binds them to
 * lib/dist's bounded MPI communicator, docs/distributed.md; a device backend
 * uses the device entries, bound to NCCL). Collective over the stage's TP ranks.
 *
 * The all-reduce of a contraction split over the ranks runs in rank order:
 * chain_recv gives a rank the fp32 running sums of the ranks before it (zeros
 * on rank 0), it continues them over its share of the contraction,
 * chain_send passes them on, and the last rank, holding the whole sum,
 * finishes (rounds) and shares the result. The additions happen in the same
 * order as in one process, so the result is bit-identical to it.
 */
typedef struct dsv4i_tp_ops {
  int32_t rank, size;
  /** acc (host f32 [n]) := the running sums of the ranks before this one (rank 0: zeros). */
  dsv4_status (*chain_recv)(void *ctx, float *acc, size_t n);
  /** Pass acc (host f32 [n]) to the next rank (the last rank: no-op). */
  dsv4_status (*chain_send)(void *ctx, const float *acc, size_t n);
  /** x (host, bytes) := the last rank's x, on every rank. */
  dsv4_status (*share)(void *ctx, void *x, size_t bytes);
  /**
   * Device backends (NULL where the binding has none): join the stage's device
   * communicator (NCCL), collective over the TP ranks, with the rank's device context
   * current. dev_id: 16 bytes naming the device (its UUID): two TP ranks on one device
   * are refused (DSV4_ERR_UNSUPPORTED naming them), as NCCL puts one rank per device.
   */
  dsv4_status (*device_join)(void *ctx, const uint8_t dev_id[16], int32_t ordinal);
  /** Queue an in-place sum over the TP ranks of n f32 (dtype 0) or bf16 (dtype 1) values
   *  at device address buf on stream (capturable: a graph replays it). */
  dsv4_status (*device_allreduce)(void *ctx, uint64_t buf, size_t n, int32_t dtype,
                                  void *stream);
  void *ctx;
} dsv4i_tp_ops;

/** device_allreduce data types. */
enum { DSV4I_TP_F32 = 0, DSV4I_TP_BF16 = 1 };

/** Arguments of a backend's create. Everything borrowed for the call, model for the backend's life. */
typedef struct dsv4i_backend_desc {
  const struct dsv4_model *model; /**< config + checkpoint; must outlive the backend */
  int32_t device;                 /**< device ordinal (ignored by the CPU backend) */
  int32_t n_threads;              /**< worker threads; <= 0: the backend's default */
  int32_t n_slots;                /**< live sequences (incl. forks): rows of a step's kv */
  int32_t max_batch_tokens;       /**< largest n_tok of a step */
  int32_t max_out_rows;           /**< largest n_out of a step */
  int32_t cpu_order;              /**< device backends: every kernel in the CPU's summation
                                   *   order (DSV4_ENGINE_F_GPU_CPU_ORDER); ignored by the CPU */
  int64_t max_positions;          /**< positions one slot may hold (max context) */
  int64_t pool_pages;             /**< pages of the KV pool (from the plan), allocated at create */
  const dsv4i_kv_layout *kv_layout; /**< the engine's layout (page_bytes from format();
                                   *   max_positions); borrowed for the call: copy it */
  /* pipeline stage: backbone layers [first_layer, last_layer); {0, 0} = all. The stage
   * with first_layer 0 owns embed; the one ending at n_layers owns head and DSpark. */
  int32_t first_layer, last_layer;
  /* tensor parallelism: rank of tp_size and the communicator, as void *: a const
   * dsv4i_tp_ops * (above; a device backend uses its device entries, bound to NCCL by the
   * engine); tp_size 0 or 1 = none. The CPU splits heads, wo_a groups, expert and
   * shared-expert intermediate dims. */
  int32_t tp_rank, tp_size;
  void *tp_comm;
  void *stream;                   /**< device stream the backend queues on (cudaStream_t);
                                   *   NULL = its own; ignored by the CPU */
  int32_t n_buckets;              /**< step plan: batch-size buckets (ascending; the last is
                                   *   max_batch_tokens); a device backend captures one
                                   *   graph per bucket */
  const int32_t *bucket_tokens;   /**< [n_buckets] */
  const dsv4i_logger *log;        /**< may be NULL */
  dsv4i_progress_cb progress;     /**< may be NULL */
  void *progress_user;
} dsv4i_backend_desc;

typedef struct dsv4i_backend dsv4i_backend;

/** Buffers of one step (backend memory, allocated by the engine before any step). */
typedef struct dsv4i_step_io {
  const dsv4i_batch *batch; /**< the step's metadata (set_batch is part of the run) */
  dsv4i_bbuf h, pre;        /**< stream and pre: in at a stage's first layer, out after its last */
  dsv4i_bbuf taps;          /**< DSpark main_hidden taps or {NULL} */
  dsv4i_bbuf logits;        /**< head rows (last stage, when batch->n_out > 0) */
} dsv4i_step_io;

/** What a step runs, for the per-op timing hook. */
enum {
  DSV4I_STEP_EMBED = 0, /**< set_batch + embed */
  DSV4I_STEP_ENGRAM,
  DSV4I_STEP_BLOCK,
  DSV4I_STEP_DSPARK,    /**< DSpark ring extension */
  DSV4I_STEP_HEAD
};

/** Per-op hook of the block-by-block run: begin before each op, end after it (layer or -1). */
typedef struct dsv4i_step_hook {
  int64_t (*begin)(void *user);
  void (*end)(void *user, int64_t t0, int32_t op, int32_t layer);
  void *user;
} dsv4i_step_hook;

/**
 * The vtable. Unless said otherwise an entry returns DSV4_OK,
 * DSV4_ERR_INVALID_ARG (a contract violation by the engine: a bug),
 * DSV4_ERR_OUT_OF_MEMORY or, for device backends, DSV4_ERR_DEVICE /
 * DSV4_ERR_DEVICE_LOST.
 */
typedef struct dsv4i_backend_ops {
  const char *name; /**< "cpu", "cuda" */

  /** Release everything (buffers, slots, pools). NULL-safe in the wrapper. */
  void (*destroy)(dsv4i_backend *be);

  /* ---- buffers ---------------------------------------------------------- */
  /** Allocate `bytes` of backend memory (zeroed). *out = {NULL} on failure. */
  dsv4_status (*buf_alloc)(dsv4i_backend *be, size_t bytes, dsv4i_bbuf *out);
  /** Release; {NULL} is a no-op. */
  void (*buf_free)(dsv4i_backend *be, dsv4i_bbuf b);
  /** Copy bytes [off, off+bytes) of b to host dst, after all queued work. */
  dsv4_status (*buf_read)(dsv4i_backend *be, dsv4i_bbuf b, size_t off, size_t bytes, void *dst);
  /** Copy host src into bytes [off, off+bytes) of b (a stage's input from the previous one). */
  dsv4_status (*buf_write)(dsv4i_backend *be, dsv4i_bbuf b, size_t off, size_t bytes,
                           const void *src);

  /* ---- KV storage (spec §5.8; the bookkeeping is the engine's) ----------- */
  /**
   * Copy whole pages of the KV pool: page dst[i] := page src[i] for i < n
   * (the engine's copy-on-write and fork). src and dst are disjoint, dst
   * distinct, so the copies may run in any order; queued before later work.
   */
  dsv4_status (*kv_copy)(dsv4i_backend *be, int32_t n, const int32_t *src, const int32_t *dst);

  /* ---- one step --------------------------------------------------------- */
  /**
   * The whole step over the backend's stage: set_batch, embed (first stage), for each
   * layer of [first_layer, last_layer) engram (Engram layers) then block, and on the
   * last stage dspark_extend (taps set) and head (n_out > 0). A device backend runs it
   * as the graph captured for batch->n_pad; dsv4i_backend_run_blocks is the same
   * sequence op by op (the CPU's run, and every backend's per-op timing mode).
   */
  dsv4_status (*run)(dsv4i_backend *be, const dsv4i_step_io *io);
  /** Copy the step metadata (see dsv4i_batch) and page table; checks runs against kv.len. */
  dsv4_status (*set_batch)(dsv4i_backend *be, const dsv4i_batch *b);
  /** h = embed[tokens] in hc copies (stream layout); pre = one-hot copy 0 (spec §5.1). */
  dsv4_status (*embed)(dsv4i_backend *be, dsv4i_bbuf h, dsv4i_bbuf pre);
  /** Engram module of backbone layer `layer` (an Engram layer) on h in place, with the
   *  batch's row ids for that layer (spec §5.2 Module). */
  dsv4_status (*engram)(dsv4i_backend *be, int32_t layer, dsv4i_bbuf h);
  /**
   * Backbone block `layer` (spec §5.3-§5.5) on h in place: pre in = the previous
   * block's FFN pre, out = this block's FFN pre. Writes the layer's caches for the
   * batch positions. taps ({NULL}: none): at a DSpark tap layer, the bf16 mean over
   * the hc copies of the block's *input* h goes to taps[t][k][:], k = the tap's rank.
   */
  dsv4_status (*block)(dsv4i_backend *be, int32_t layer, dsv4i_bbuf h, dsv4i_bbuf pre,
                       dsv4i_bbuf taps);
  /** Head (spec §5.6 1-2) for the batch's out_tok rows: logits[r] f32 [vocab]. */
  dsv4_status (*head)(dsv4i_backend *be, dsv4i_bbuf h, dsv4i_bbuf pre, dsv4i_bbuf logits);
  /** Sample n rows of logits (spec §5.6 3): tokens[r] (host) from req[r] (host). A row
   *  whose first n_valid values hold NaN or +inf, or no finite value, has no token:
   *  DSV4_ERR_NOT_FINITE naming the row (-inf values are fine: never drawn). */
  dsv4_status (*sample)(dsv4i_backend *be, dsv4i_bbuf logits, int32_t n,
                        const dsv4i_sample_req *req, int32_t *tokens);
  /**
   * Sampled verification's accept rule (spec §6.2, model/accept.h) on row `row` of
   * logits, where the logits live (no vocabulary-wide copy to the host). req host.
   * *accepted = 1 (the draft stands) or 0 with *token the replacement draw.
   */
  dsv4_status (*accept)(dsv4i_backend *be, dsv4i_bbuf logits, int32_t row,
                        const dsv4i_accept_req *req, int32_t *accepted, int32_t *token);
  /** Wait for queued work (timing); CPU: no-op. */
  dsv4_status (*sync)(dsv4i_backend *be);

  /* ---- DSpark (NULL until a backend implements them) --------- */
  /**
   * Seed/extend the DSpark stages' window rings of the batch's sequences from
   * main_hidden taps (bf16 [n_tok][n_taps][dim], one row per batch token; spec
   * §6.1 "Prefill" and §6.2 5).
   */
  dsv4_status (*dspark_extend)(dsv4i_backend *be, dsv4i_bbuf taps);
  /**
   * One draft forward (spec §6.1 decode step) for the kv->n_seq sequences of
   * kv (row i = sequence i): pos[i] = kv->len[i] - 1, whose main_kv the rings hold
   * (dspark_extend stored it) unless taps is set: then taps row i (bf16
   * [n][n_taps][dim]) is main_hidden at pos[i] and is stored first, as the
   * reference's forward_spec does. The block [anchor[i], noise x (block-1)]
   * sits at pos[i]+1 .. pos[i]+block; caches change only through taps.
   * Drafts tok_1..tok_block (host int32 [n][block]), drawn left to right:
   * req[i].temperature <= 0 argmax, else draft k (1-based) with the sample
   * op's rule at (req[i].seed, req[i].counter + k - 1), ids < req[i].n_valid;
   * a row the sample op would refuse is DSV4_ERR_NOT_FINITE. confidence (host f32
   * [n][block]) and logits (backend f32 [n][block][vocab]: the Markov-biased
   * logits each draft was drawn from) are optional (NULL / {NULL}).
   */
  dsv4_status (*dspark_draft)(dsv4i_backend *be, const dsv4i_kv_step *kv, const int64_t *pos,
                              const int32_t *anchor, dsv4i_bbuf taps, const dsv4i_sample_req *req, int32_t *drafts,
                              float *confidence, dsv4i_bbuf logits);
} dsv4i_backend_ops;

/** Every backend instance starts with this header (the implementation extends it;
 *  dsv4i_backend_init fills it from the create arguments). */
struct dsv4i_backend {
  const dsv4i_backend_ops *ops;
  int32_t kind;      /**< DSV4_BACKEND_CPU / _CUDA */
  int32_t n_threads; /**< host worker threads it uses (informational) */
  const struct dsv4i_config *cfg;
  int32_t first_layer, last_layer; /**< the stage's backbone layers [first, last) */
  int32_t has_embed, has_head;     /**< stage ownership: first / last stage */
  int32_t tp_rank, tp_size;
};

/**
 * The step op by op (see run): every backend's per-op timing mode, and the run of a
 * backend without graphs. hook may be NULL.
 */
dsv4_status dsv4i_backend_run_blocks(dsv4i_backend *be, const dsv4i_step_io *io,
                                     const dsv4i_step_hook *hook);

/* ---- registry (lib/backend/registry.c) ------------------------------------ */

/**
 * Cache storage sizes of backend `kind` for a config, a context length
 * (positions per sequence) and the part of the model one rank holds (its
 * stage's layers and TP shard; NULL: all), without creating anything (the
 * memory planner calls it before allocating). Every figure is the part's:
 * pages of its layers' caches, its prepared weights.
 * @return DSV4_OK; DSV4_ERR_UNSUPPORTED (kind not built into this library);
 *         DSV4_ERR_INVALID_ARG.
 */
dsv4_status dsv4i_backend_format(int32_t kind, const struct dsv4i_config *cfg,
                                 int64_t max_positions, const dsv4i_model_part *part,
                                 int32_t kv_format, dsv4i_cache_format *out);

/**
 * Create backend `kind` (DSV4_BACKEND_CPU; a kind not registered answers
 * DSV4_ERR_UNSUPPORTED). Checks capability, binds/prepares weights,
 * allocates the KV pool of d->pool_pages pages of d->kv_layout->page_bytes.
 * @return DSV4_OK; DSV4_ERR_UNSUPPORTED; DSV4_ERR_INVALID_ARG;
 *         DSV4_ERR_OUT_OF_MEMORY; DSV4_ERR_WEIGHTS (a tensor the backend needs
 *         has another format); DSV4_ABORTED (progress callback). *out NULL on failure.
 */
dsv4_status dsv4i_backend_create(int32_t kind, const dsv4i_backend_desc *d, dsv4i_backend **out);

/** Destroy; NULL is a no-op. */
void dsv4i_backend_destroy(dsv4i_backend *be);

/** Name of a registered kind ("cpu"), or NULL when this library has no such backend. */
const char *dsv4i_backend_name(int32_t kind);

#endif /* DSV4I_BACKEND_BACKEND_H */
