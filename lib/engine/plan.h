/*
 * Memory plan of an engine (design.md §5): how many cache slots and pool
 * pages a request needs, what they cost with the chosen backend's storage
 * format, and whether it fits the KV budget and the machine — decided before
 * anything large is allocated. The one place the engine sizes its pools;
 * the topology planner (dsv4-plan) refines the same code.
 */
#ifndef DSV4I_ENGINE_PLAN_H
#define DSV4I_ENGINE_PLAN_H

#include <stdint.h>

#include "base/base.h"
#include "backend/backend.h"

struct dsv4i_config;

/** What the caller asks for (already defaulted by the API layer). */
typedef struct dsv4i_plan_req {
  int32_t backend;          /**< DSV4_BACKEND_CPU / _CUDA (resolved, not AUTO) */
  int32_t max_seqs;         /**< live sequences incl. forks, >= 1 */
  int64_t max_ctx;          /**< positions per sequence, >= 1 */
  int64_t kv_budget;        /**< bytes for caches; 0 = what max_seqs x max_ctx needs */
  int32_t chunk;            /**< prefill tokens per step, >= 1 */
  int32_t kv_format;        /**< window records: DSV4I_KV_NATIVE / DSV4I_KV_FP8_DS_MLA */
  int64_t host_limit;       /**< bytes the machine can give (0 = unchecked) */
  int64_t mapped_bytes;     /**< checkpoint bytes (mmapped; reported, not charged) */
  int64_t copied_weight_bytes; /**< checkpoint tensors copied at load (unaligned; charged) */
  /** The part one rank of a distributed engine holds (its stage's layers, its TP
   *  shard); all zero: the whole model. Every figure below is then that rank's. */
  dsv4i_model_part part;
} dsv4i_plan_req;

#define DSV4I_PLAN_MAX_BUCKETS 32

/** The plan. Every byte figure is exact for the backend's format. */
typedef struct dsv4i_plan {
  dsv4i_cache_format fmt;    /**< the backend's storage sizes */
  int32_t kv_format;         /**< window records (the request's) */
  int32_t max_seqs;
  int32_t max_batch_tokens;  /**< max(chunk, max_seqs) */
  int32_t max_out_rows;      /**< max_seqs */
  /** Step plan: batch-size buckets, the padded shapes a step runs in (powers of two
   *  below max_batch_tokens, then max_batch_tokens); every workspace is sized for the
   *  largest, so a step allocates nothing. */
  int32_t n_buckets;
  int32_t buckets[DSV4I_PLAN_MAX_BUCKETS];
  int32_t chunk;
  int64_t max_ctx;
  int64_t pages_per_seq;     /**< fmt.seq_pages: one sequence at max_ctx */
  int64_t pool_pages;        /**< pages in the shared pool */
  int64_t full_seqs;         /**< sequences at max_ctx the pool holds at once */
  int64_t slot_bytes_total;  /**< max_seqs x fmt.slot_bytes */
  int64_t pool_bytes;        /**< pool_pages x fmt.page_bytes */
  int64_t kv_bytes;          /**< slot_bytes_total + pool_bytes */
  int64_t engram_hist_bytes; /**< Engram histories (4 B per position per sequence) */
  int64_t act_bytes;         /**< step workspace */
  int64_t extra_weight_bytes;/**< fmt.weight_bytes + req copied_weight_bytes */
  int64_t mapped_bytes;      /**< checkpoint, mmapped */
  int64_t comm_bytes;        /**< stage-to-stage payload buffer (dsv4i_plan_add_comm) */
  int64_t total_bytes;       /**< kv + engram history + act + extra weights + comm (not mapped) */
  /** What creating the engine allocates: kv + act + the backend's prepared weights
   *  (fmt.weight_bytes) + comm. Not in it: checkpoint tensors copied by the model's load,
   *  the Engram histories (they grow with the sequences). docs/distributed.md "Memory per rank". */
  int64_t create_bytes;
} dsv4i_plan;

/**
 * Compute the plan. With kv_budget 0 the pool holds max_seqs sequences at
 * max_ctx; with a budget it holds what the budget pays for after the slots'
 * host part, at most that much, and must hold at least one sequence at
 * max_ctx.
 * @return DSV4_OK; DSV4_ERR_INVALID_ARG (a request field out of range);
 *         DSV4_ERR_UNSUPPORTED (backend); DSV4_ERR_DOES_NOT_FIT (the budget
 *         cannot hold the slots plus one full-context sequence, or the total
 *         passes host_limit; the message gives every figure). *out is
 *         filled as far as computed in every case (for reporting).
 */
dsv4_status dsv4i_plan_make(const struct dsv4i_config *cfg, const dsv4i_plan_req *req,
                            dsv4i_plan *out);

/** The backend workspace in bytes for `tokens` batch tokens and `out_rows` output
 * rows of format f: fixed + per token x tokens + per block row x max(tokens,
 * out_rows x draft_rows) + per output row x out_rows (a DSpark draft runs
 * draft_rows rows per sequence). 1 with *bytes set; 0 when a count overflows. */
int dsv4i_plan_workspace(const dsv4i_cache_format *f, int64_t tokens, int64_t out_rows,
                         int64_t *bytes);

/** Add a distributed rank's communication buffer (bytes >= 0) to the plan's figures. */
dsv4_status dsv4i_plan_add_comm(dsv4i_plan *p, int64_t bytes);

/** The smallest bucket holding n_tok tokens (1 <= n_tok <= max_batch_tokens). */
int32_t dsv4i_plan_bucket(const dsv4i_plan *p, int32_t n_tok);

/** Physical memory of this machine in bytes (0 if unknown). */
int64_t dsv4i_plan_host_memory(void);

/* ==========================================================================
 * Topology memory planner (dsv4-plan, dsv4_plan_*): for a config
 * and a machine topology (nodes x GPUs, TP x PP, KV format, Engram
 * placement), what every GPU and every host holds: weights by component
 * from the exact tensor contract (split per design §6), Engram tables,
 * workspace, graph reserve, communication buffers, and the KV pool that is
 * left; KV bytes per token and fixed per sequence (spec §5.8); token
 * capacity and concurrency. Owned by the planner (plan_topo*.c); the engine
 * sizes a distributed / GPU deployment's pools from dsv4i_topo_gpu.kv_pool.
 * The rules are written down in docs/planner.md.
 * ========================================================================== */

struct dsv4i_contract;

#define DSV4I_PLAN_MAX_STAGES 16
#define DSV4I_PLAN_NCOMP 9 /* DSV4_COMP_* 0..8 */

/* KV window record formats: DSV4I_KV_NATIVE / DSV4I_KV_FP8_DS_MLA (model/config.h). */
/** Engram table placement (values equal the public DSV4_ENGRAM_*). */
enum {
  DSV4I_ENGRAM_HOST = 0,   /* host pinned memory of every node of the stage holding the layer */
  DSV4I_ENGRAM_DEVICE = 1  /* GPU memory, rows split over the stage's TP ranks */
};
/** dsv4i_topo_params.flags (values equal the public DSV4_PLAN_F_*). */
enum {
  DSV4I_PLAN_F_NO_DSPARK = 1u << 0, /* leave out the DSpark stages (weights, rings, draft graphs) */
  DSV4I_PLAN_F_NO_VISION = 1u << 1  /* leave out the vision tower and aligner */
};

/** Inputs. dsv4i_topo_params_default() gives the field report's topology. */
typedef struct dsv4i_topo_params {
  uint32_t flags;              /* DSV4I_PLAN_F_* */
  int32_t nodes;               /* >= 1 */
  int32_t gpus_per_node;       /* >= 1; tp * pp must equal nodes * gpus_per_node */
  int32_t tp;                  /* ranks per stage (consecutive ranks; rank r on node r / gpus_per_node) */
  int32_t pp;                  /* stages, 1 .. DSV4I_PLAN_MAX_STAGES */
  int32_t stage_first[DSV4I_PLAN_MAX_STAGES]; /* first backbone layer of stage s (stage_first[0]
                                * = 0); all zero: automatic (the allowed boundaries that split
                                * the layers most evenly) */
  int64_t gpu_mem_bytes;       /* per GPU, the card's memory */
  int64_t gpu_reserved_bytes;  /* per GPU, not usable: CUDA context, loaded modules, cuBLASLt
                                * workspace, allocator slack */
  int64_t host_mem_bytes;      /* per node, usable for pinned pools */
  int32_t kv_format;           /* DSV4I_KV_* */
  int32_t engram_placement;    /* DSV4I_ENGRAM_* */
  int64_t max_context;         /* positions per sequence, >= 1 */
  int64_t context;             /* concurrency is reported at this context; 0: max_context */
  int32_t prefill_chunk;       /* tokens per prefill step, >= 1 */
  int32_t draft_tokens;        /* DSpark drafts verified per step (verify width = 1 + this) */
  int32_t n_buckets;           /* CUDA-graph decode batch sizes, 1 .. DSV4I_PLAN_MAX_BUCKETS */
  int32_t buckets[DSV4I_PLAN_MAX_BUCKETS]; /* ascending, >= 1 */
  int64_t graph_bytes;         /* reserve per captured graph (node storage, exec instance) */
  int64_t nccl_bytes;          /* NCCL internal buffers per GPU, when tp > 1 */
  int32_t kv_page_entries;     /* records per KV page (per-sequence rounding); 0: none */
  int32_t reserved0;
} dsv4i_topo_params;

/** One GPU (stage s, TP rank r). Bytes. */
typedef struct dsv4i_topo_gpu {
  int32_t stage, rank, node, reserved0;
  int64_t weights[DSV4I_PLAN_NCOMP];    /* checkpoint-form bytes held, by DSV4_COMP_*; the
                                          * Engram tables only with DSV4I_ENGRAM_DEVICE */
  int64_t replicated[DSV4I_PLAN_NCOMP]; /* of weights[]: the part every rank of the stage holds whole */
  int64_t weights_total;                /* sum of weights[] */
  int64_t load_extra;                   /* added by load-time conversion (wo_a fp8 -> bf16) */
  int64_t workspace;                    /* step activations: max(prefill chunk, decode batch) */
  int64_t graphs;                       /* graph reserve */
  int64_t comm_nccl;                    /* NCCL buffers + all-reduce staging */
  int64_t comm_p2p;                     /* inter-stage payload buffers */
  int64_t reserved;                     /* params.gpu_reserved_bytes */
  int64_t used;                         /* all of the above */
  int64_t kv_pool;                      /* gpu_mem_bytes - used (>= 0 in a plan that fits) */
} dsv4i_topo_gpu;

/** One pipeline stage. Bytes. */
typedef struct dsv4i_topo_stage {
  int32_t first_layer, n_layers;        /* backbone layers [first, first + n) */
  int32_t first_node, n_nodes;          /* nodes its ranks live on */
  int32_t has_embed, has_head, has_dspark, has_vision;
  int32_t n_engram_layers, n_kv_sources;
  int32_t n_kv_by_ratio[4];             /* KV-source layers by compress ratio (1, 2, 3) */
  int64_t owned[DSV4I_PLAN_NCOMP];      /* contract bytes assigned to this stage: each tensor in
                                         * exactly one stage (its first holder) */
  int64_t held[DSV4I_PLAN_NCOMP];       /* bytes of the tensors the stage holds, each once
                                         * (embed is held by the first and the DSpark stage) */
  int64_t engram_bytes;                 /* Engram tables of its layers (whole) */
  int64_t engram_host_per_node;         /* with DSV4I_ENGRAM_HOST: on every node of the stage */
  /* KV of one GPU of the stage (KV is replicated over TP: MQA latent, design §6) */
  double kv_per_token;                  /* compressed + index-key bytes per position (spec §5.8) */
  int64_t kv_fixed_window;              /* window rings: layers x window x record */
  int64_t kv_fixed_dspark;              /* DSpark window rings (last stage) */
  int64_t kv_fixed_compressor;          /* ratio-2 compressor state (fp32 kv + score) */
  int64_t kv_fixed_per_seq;             /* the three above */
  int64_t kv_pool;                      /* min over the stage's ranks */
  int64_t seq_bytes_max_context;        /* one sequence at max_context, page-rounded */
  int64_t seq_bytes_context;            /* one sequence at params.context */
  int64_t token_capacity;               /* kv_pool / kv_per_token (fixed parts left out) */
  int64_t seqs_at_context;              /* kv_pool / seq_bytes_context */
  int64_t seqs_at_max_context;
} dsv4i_topo_stage;

/** Host memory of one node. */
typedef struct dsv4i_topo_host {
  int64_t engram;                       /* Engram tables (host placement) */
  int64_t pinned_staging;               /* pinned buffers for the gathered Engram rows */
  int64_t total;
} dsv4i_topo_host;

/** The plan. Free with dsv4i_topo_plan_free(). */
typedef struct dsv4i_topo_plan {
  dsv4i_topo_params params;             /* as used: stage_first and context resolved */
  int32_t n_stages, tp, n_gpus, nodes;
  int64_t n_tensors, contract_bytes;    /* the whole contract (spec §4.4) */
  int64_t component_bytes[DSV4I_PLAN_NCOMP];
  int64_t window_record, compressed_record, index_key_record; /* 528|584, 288, 68 */
  double kv_per_token;                  /* whole model: 890 for V4.1 */
  int64_t kv_fixed_per_seq;             /* whole model */
  dsv4i_topo_stage stage[DSV4I_PLAN_MAX_STAGES];
  dsv4i_topo_gpu *gpu;                  /* [n_gpus], index stage * tp + rank */
  dsv4i_topo_host *host;                /* [nodes] */
  int64_t token_capacity;               /* min over stages */
  int64_t seqs_at_context, seqs_at_max_context; /* min over stages */
  double concurrency_at_max_context;    /* min over stages of kv_pool / seq_bytes_max_context */
} dsv4i_topo_plan;

/** Defaults: the field report's topology (2 nodes x 8 x 40 GiB, TP8 x PP2, native KV,
 *  Engram on the hosts, 1 Mi context); docs/planner.md lists every value. */
void dsv4i_topo_params_default(dsv4i_topo_params *p);

/**
 * Plan cfg on the topology p. `contract` may be NULL (it is built here).
 * @return DSV4_OK; DSV4_ERR_INVALID_ARG (a parameter out of range, tp * pp
 *         != nodes * gpus_per_node, stage_first not increasing or out of range);
 *         DSV4_ERR_UNSUPPORTED (a stage boundary where shared attention state
 *         would cross (dsv4i_dist_split_check), more stages than allowed
 *         boundaries, TP not dividing heads / o_groups / expert blocks);
 *         DSV4_ERR_DOES_NOT_FIT (a GPU's fixed parts pass its memory, a KV
 *         pool cannot hold one sequence at max_context, or a host cannot
 *         hold its Engram tables: the message names what overflowed, where
 *         and by how much; *out is still filled); DSV4_ERR_OUT_OF_MEMORY;
 *         the statuses of dsv4i_contract_build. On errors other than
 *         DOES_NOT_FIT *out is zeroed.
 */
dsv4_status dsv4i_plan_compute(const struct dsv4i_config *cfg,
                               const struct dsv4i_contract *contract,
                               const dsv4i_topo_params *p, dsv4i_topo_plan *out);

/** Free out->gpu and out->host; *plan is zeroed. NULL ok. */
void dsv4i_topo_plan_free(dsv4i_topo_plan *plan);

/**
 * Bytes of KV one sequence of `positions` positions holds on one GPU of
 * stage s: the fixed part + every cache's entries rounded up to whole
 * pages (params.kv_page_entries; 0: no rounding).
 */
int64_t dsv4i_plan_seq_bytes(const dsv4i_topo_plan *plan, int32_t s, int64_t positions);

/**
 * The allowed stage boundaries of cfg (design §6): the layers before which no
 * attention state shared across layers crosses (dsv4i_dist_boundaries),
 * ascending. Returns the count (at most cap are written).
 */
int32_t dsv4i_plan_boundaries(const struct dsv4i_config *cfg, int32_t *layers, int32_t cap);

/** The built-in release config (data/deepseek-v4.1-flash/config.json, embedded at
 *  build time): text + NUL, and its length without the NUL. */
extern const char dsv4i_plan_builtin_config[];
extern const size_t dsv4i_plan_builtin_config_size;

#endif /* DSV4I_ENGINE_PLAN_H */
