/**
 * @file dsv4.h
 * libdsv4 — inference engine for DeepSeek-V4.1-Flash.
 *
 * The one stable public header. It compiles alone as C89 to C2x and C++11 to
 * C++20 and uses no vendor types: CUDA streams and MPI communicators cross as
 * void *. dsv4.hpp wraps it for C++17.
 *
 * Conventions used in every comment below:
 *  - Shapes are row-major [dim0][dim1] with named dims, then dtype and memory
 *    space (host unless said otherwise).
 *  - Thread-safety classes: "thread-safe" (any thread, any time),
 *    "handle-exclusive" (one thread at a time per handle, may migrate),
 *    "global-init" (call before creating handles, not thread-safe).
 *  - Every fallible call returns dsv4_status (marked DSV4_NODISCARD); on an
 *    error, out-handles are set to NULL and the call says which state it
 *    leaves. The message of a failed call is dsv4_last_error(), on the thread
 *    that made the call, until that thread's next libdsv4 call (api-guide §2).
 *    The per-handle getters dsv4_model_last_error(), dsv4_tokenizer_last_error()
 *    and dsv4_engine_last_error() are deprecated (kept for the ABI).
 *  - Documents cited, in the repository's docs/ and installed with the library
 *    in DATADIR/doc/libdsv4/: model-spec.md, the model's numerics, as
 *    "spec §N"; design.md, the library's design, as "design §N"; api-guide.md
 *    (conventions, errors, threads, versioning, bindings) as "api-guide §N";
 *    planner.md, the memory planner's rules.
 */
#ifndef DSV4_H
#define DSV4_H

#include <stddef.h>
#include <stdint.h>

#include "dsv4/dsv4_version.h"

/** Marks the exported functions (default visibility; the version script abi/libdsv4.map fixes the set). */
#if defined(_WIN32)
#define DSV4_API
#elif defined(__GNUC__) && __GNUC__ >= 4
#define DSV4_API __attribute__((visibility("default")))
#else
#define DSV4_API
#endif

/** Marks a declaration kept for the ABI whose use draws a compiler warning naming its replacement. */
#if defined(__GNUC__)
#define DSV4_DEPRECATED(msg) __attribute__((deprecated(msg)))
#else
#define DSV4_DEPRECATED(msg)
#endif

/**
 * Marks the functions that return a dsv4_status: ignoring the status draws a
 * compiler warning ([[nodiscard]] in C++17 and C2x, warn_unused_result with
 * GCC and Clang otherwise; nothing elsewhere). @since 0.1
 */
#if defined(__cplusplus) && defined(__has_cpp_attribute)
#if __has_cpp_attribute(nodiscard) >= 201603L && __cplusplus >= 201703L
#define DSV4_NODISCARD [[nodiscard]]
#endif
#elif !defined(__cplusplus) && defined(__STDC_VERSION__) && __STDC_VERSION__ > 201710L && \
    defined(__has_c_attribute)
#if __has_c_attribute(nodiscard)
#define DSV4_NODISCARD [[nodiscard]]
#endif
#endif
#if !defined(DSV4_NODISCARD) && (defined(__GNUC__) || defined(__clang__))
#define DSV4_NODISCARD __attribute__((warn_unused_result))
#endif
#ifndef DSV4_NODISCARD
#define DSV4_NODISCARD
#endif

#ifdef __cplusplus
extern "C" {
#endif

/* ------------------------------------------------------------------------ */
/* Status codes                                                             */
/* ------------------------------------------------------------------------ */

/**
 * Result of every fallible call. Values are pinned forever: 0 is success,
 * negative values are errors, positive values are documented non-fatal
 * outcomes. New values are only ever added.
 * @since 0.1
 */
typedef int32_t dsv4_status;

enum {
  DSV4_OK = 0, /**< success */

  /* non-fatal outcomes (> 0) */
  DSV4_KV_FULL = 1, /**< the KV pools cannot hold the step; nothing changed */
  DSV4_ABORTED = 2, /**< a callback asked to stop; the call says what remains */

  /* generic errors */
  DSV4_ERR_INVALID_ARG = -1,   /**< NULL pointer, bad size or out-of-range value */
  DSV4_ERR_OUT_OF_MEMORY = -2, /**< a host allocation failed */
  DSV4_ERR_UNSUPPORTED = -3,   /**< feature, backend or combination not built or not supported */
  DSV4_ERR_INTERNAL = -4,      /**< a library invariant broke (a bug: please report) */
  DSV4_ERR_PARAMS_SIZE = -5,   /**< params struct_size below the oldest supported size */

  /* files */
  DSV4_ERR_IO = -10,        /**< open, stat, read or mmap failed (errno text in the message) */
  DSV4_ERR_NOT_FOUND = -11, /**< a required file is absent */
  DSV4_ERR_JSON = -12,      /**< a JSON file does not parse (line and column in the message) */

  /* safetensors shards and the index */
  DSV4_ERR_ST_HEADER = -20,         /**< header length past the end of the file, or header not a JSON object of tensors */
  DSV4_ERR_ST_TRUNCATED = -21,      /**< file shorter than 8 bytes, or data area shorter than the tensors need */
  DSV4_ERR_ST_DTYPE = -22,          /**< unknown dtype string */
  DSV4_ERR_ST_OFFSETS = -23,        /**< data_offsets malformed, outside the data area, or a gap: the tensors must cover the data area exactly */
  DSV4_ERR_ST_OVERLAP = -24,        /**< two tensors' byte ranges overlap */
  DSV4_ERR_ST_SIZE = -25,           /**< byte size != product(shape) x dtype size */
  DSV4_ERR_ST_DUPLICATE = -26,      /**< a tensor name appears twice (in a shard or across shards) */
  DSV4_ERR_INDEX = -27,             /**< model.safetensors.index.json malformed */
  DSV4_ERR_MISSING_SHARD = -28,     /**< the index names a shard file that does not exist */
  DSV4_ERR_INDEX_MISMATCH = -29,    /**< the index and the shards disagree on a tensor's location */

  /* config and weights */
  DSV4_ERR_CONFIG_KEY = -30,        /**< a required config.json key is missing or has the wrong JSON type */
  DSV4_ERR_CONFIG_VALUE = -31,      /**< a config value is out of range or inconsistent with the others */
  DSV4_ERR_WEIGHTS = -32,           /**< checkpoint tensors differ from the model's tensor contract (all differences listed) */

  /* text */
  DSV4_ERR_TOKENIZER = -40,         /**< tokenizer.json unusable (wrong model type, unknown merge token, ...) */
  DSV4_ERR_INVALID_UTF8 = -41,      /**< input text is not valid UTF-8 or contains NUL */

  /* engine and sequences */
  DSV4_ERR_UNKNOWN_SEQUENCE = -50,  /**< a sequence id that does not exist or was freed */
  DSV4_ERR_CONTEXT_OVERFLOW = -51,  /**< the request passes the engine's maximum context */
  DSV4_ERR_INVALID_TOKEN = -52,     /**< a token id outside [0, vocab) */
  DSV4_ERR_DOES_NOT_FIT = -53,      /**< the memory plan cannot hold the request; nothing was allocated */
  DSV4_ERR_NOT_FINITE = -54,        /**< a logits row holds NaN or +inf, or no finite value (damaged weights, an overflow): no token can be drawn; nothing changed */

  /* devices */
  DSV4_ERR_NO_DEVICE = -70,         /**< no NVIDIA driver, no GPU, or the device index is out of range */
  DSV4_ERR_DEVICE = -71,            /**< a driver, cuBLASLt or NCCL call failed (its name and code in the message) */
  DSV4_ERR_DEVICE_LOST = -72,      /**< the GPU context is poisoned; the handle is sticky-failed, free it */

  /* distributed engines (MPI ranks, docs/distributed.md) */
  DSV4_ERR_RANK_MISMATCH = -80,     /**< the ranks disagree (checkpoint, params, topology, stage payload version or a step's inputs); every rank gets it and the message names the ranks and what differs */
  DSV4_ERR_RANK_FAILED = -81        /**< another rank failed (its status and message are given) or did not answer within the engine's timeout; the handle is sticky-failed, free it */
};

/**
 * Static English text for a status, e.g. "DSV4_ERR_ST_OVERLAP: tensor byte
 * ranges overlap". Never NULL; unknown values give "unknown status".
 * Thread-safe. @since 0.1
 */
DSV4_API const char *dsv4_status_string(dsv4_status status);

/**
 * Message of the last failed libdsv4 call made on this thread, with or
 * without a handle: names the file, tensor, key, sequence or batch row
 * involved. The one way to read an error message (api-guide §2): every call
 * sets it when it fails; read it before the thread's next libdsv4 call.
 * Borrowed: valid until the next libdsv4 call on this thread. "" when the
 * last call succeeded. Thread-safe (thread-local). @since 0.1
 */
DSV4_API const char *dsv4_last_error(void);

/* ------------------------------------------------------------------------ */
/* Version, build, memory, logging                                          */
/* ------------------------------------------------------------------------ */

/** DSV4_VERSION_NUMBER of the loaded library (major*10000+minor*100+patch). Thread-safe. @since 0.1 */
DSV4_API uint32_t dsv4_version(void);

/** "MAJOR.MINOR.PATCH" of the loaded library. Static. Thread-safe. @since 0.1 */
DSV4_API const char *dsv4_version_string(void);

/**
 * Static one-line description of the build: compiler, CUDA toolkit used for
 * the embedded PTX and its target arch ("none" without CUDA), OpenMP, MPI
 * and NCCL support. Thread-safe. @since 0.1
 */
DSV4_API const char *dsv4_build_info(void);

/**
 * Release memory that libdsv4 allocated and handed to the caller (the
 * functions that do so say so). NULL is a no-op. Thread-safe. @since 0.1
 */
DSV4_API void dsv4_free(void *ptr);

/** Log levels passed to dsv4_log_fn. @since 0.1 */
enum {
  DSV4_LOG_ERROR = 0, /**< a call failed */
  DSV4_LOG_WARN = 1,  /**< something the caller should know (the default sink's level) */
  DSV4_LOG_INFO = 2,  /**< progress and choices made (plan, backend, threads) */
  DSV4_LOG_DEBUG = 3  /**< detail for debugging */
};

/**
 * Log sink: level (DSV4_LOG_*), a NUL-terminated line without trailing
 * newline (borrowed for the duration of the call), and the user pointer.
 * Called from the thread that made the libdsv4 call.
 */
typedef void (*dsv4_log_fn)(int32_t level, const char *message, void *user_data);

/**
 * Set the process-wide log sink used where no handle-level sink is given
 * (fn NULL: drop every message; the default writes WARN and ERROR to stderr).
 * max_level filters (DSV4_LOG_*). Global-init: not thread-safe; call before
 * creating handles. @since 0.1
 */
DSV4_API void dsv4_log_set(dsv4_log_fn fn, void *user_data, int32_t max_level);

/* ------------------------------------------------------------------------ */
/* Backends                                                                 */
/* ------------------------------------------------------------------------ */

/** Compute backends. Stored as int32_t in params structs. @since 0.1 */
enum {
  DSV4_BACKEND_AUTO = 0, /**< the best backend built in and usable here */
  DSV4_BACKEND_CPU = 1,  /**< the CPU backend (the numerical oracle) */
  DSV4_BACKEND_CUDA = 2  /**< NVIDIA GPUs, compute capability >= 8.0 (embedded PTX) */
};

/**
 * Check whether a backend can run here, without creating anything that
 * outlives the call. For CUDA this opens the driver (libcuda.so.1) at run
 * time, initialises it, checks the device index and compute capability
 * (>= 8.0) and loads the embedded PTX once.
 *
 * @param backend  DSV4_BACKEND_CPU or DSV4_BACKEND_CUDA.
 * @param device   CUDA device ordinal (ignored for CPU).
 * @return DSV4_OK; DSV4_ERR_INVALID_ARG (unknown backend, negative device);
 *         DSV4_ERR_UNSUPPORTED (library built without CUDA kernels, or the
 *         GPU's compute capability is below 8.0); DSV4_ERR_NO_DEVICE (no
 *         driver library, no GPU, or device out of range); DSV4_ERR_DEVICE
 *         (a driver call failed, e.g. the PTX did not load). The message is
 *         dsv4_last_error(). No state is kept in any case.
 * Thread-safe. @since 0.1
 */
DSV4_NODISCARD DSV4_API dsv4_status dsv4_backend_probe(int32_t backend, int32_t device);

/* ------------------------------------------------------------------------ */
/* Model: an official-format checkpoint directory                           */
/* ------------------------------------------------------------------------ */

/** A loaded checkpoint: config, layer roles, tensor table (mmap). Opaque. @since 0.1 */
typedef struct dsv4_model dsv4_model;

/** dsv4_model_params.flags bits. @since 0.1 */
enum {
  /** Read config.json only: no shards are opened; the tensor table lists the
   *  contract (every tensor the config requires) with shard = -1. */
  DSV4_MODEL_F_CONFIG_ONLY = 1u << 0
};

/**
 * Parameters of dsv4_model_load. Size-prefixed and append-only: fill with
 * dsv4_model_params_init() and change fields after.
 * @since 0.1
 */
typedef struct dsv4_model_params {
  uint32_t struct_size;  /**< sizeof(dsv4_model_params), set by the init call */
  uint32_t flags;        /**< DSV4_MODEL_F_* bits; default 0 */
  dsv4_log_fn log_fn;    /**< per-handle log sink; NULL = the global one */
  void *log_user_data;   /**< passed to log_fn */
  int32_t log_level;     /**< DSV4_LOG_* maximum level for log_fn; default DSV4_LOG_WARN */
  int32_t reserved0;     /**< 0 */
} dsv4_model_params;

/**
 * Fill *params with defaults and set struct_size. Writes exactly struct_size
 * bytes: the fields this library knows get their defaults, bytes past them
 * (fields of a newer header) are zeroed.
 * @param params       [out] caller-owned, at least struct_size bytes.
 * @param struct_size  sizeof(dsv4_model_params) as the caller compiled it.
 * @return DSV4_OK; DSV4_ERR_INVALID_ARG (params NULL);
 *         DSV4_ERR_PARAMS_SIZE (struct_size below the 0.1 size, i.e. the fields
 *         through log_level; reserved0 may be left out). No state change on failure.
 * Thread-safe. @since 0.1
 */
DSV4_NODISCARD DSV4_API dsv4_status dsv4_model_params_init(dsv4_model_params *params, size_t struct_size);

/**
 * Open a checkpoint directory in the official release format: config.json
 * (nested V4.1 config, spec §2.1), model.safetensors.index.json and its
 * shards (or a single model.safetensors), spec §4. Every shard header is
 * validated, every tensor is resolved, and the tensor set is checked against
 * the contract the config implies (spec §4.2); all differences are reported
 * in one message. Shards are mmapped read-only; a tensor whose bytes do not
 * start at a multiple of its element size (legal safetensors: an odd,
 * unpadded header) is copied once into aligned memory, logged at
 * DSV4_LOG_INFO; no other weight is copied. Every file is opened without
 * blocking and must be a regular file (a FIFO or device: DSV4_ERR_IO).
 * Shard rules: docs/reliability.md.
 *
 * @param dir     [in] directory path (UTF-8, NUL-terminated).
 * @param params  [in] NULL for defaults. The library reads min(params->struct_size,
 *                its own size) bytes; fields past that keep their defaults.
 * @param out     [out] the model on success, NULL on failure. Free with dsv4_model_free().
 * @return DSV4_OK; DSV4_ERR_INVALID_ARG (dir or out NULL, unknown flag bits);
 *         DSV4_ERR_PARAMS_SIZE (params->struct_size below the 0.1 size); DSV4_ERR_OUT_OF_MEMORY;
 *         DSV4_ERR_IO, DSV4_ERR_NOT_FOUND, DSV4_ERR_JSON; DSV4_ERR_ST_* and
 *         DSV4_ERR_INDEX, DSV4_ERR_MISSING_SHARD, DSV4_ERR_INDEX_MISMATCH (shard
 *         or index violations; the message names file and tensor);
 *         DSV4_ERR_CONFIG_KEY, DSV4_ERR_CONFIG_VALUE; DSV4_ERR_WEIGHTS.
 *         On failure nothing stays allocated or mapped; message in dsv4_last_error().
 * Thread-safe (distinct calls share nothing). @since 0.1
 */
DSV4_NODISCARD DSV4_API dsv4_status dsv4_model_load(const char *dir, const dsv4_model_params *params,
                                     dsv4_model **out);

/** Release a model and unmap its shards. NULL is a no-op. Handle-exclusive. @since 0.1 */
DSV4_API void dsv4_model_free(dsv4_model *model);

/**
 * Message of the most recent failed call on this model handle (kept until
 * another call on it fails; successful calls leave it); "" if none failed or
 * model is NULL. The same text is in dsv4_last_error() right after the call.
 * Borrowed: valid until the next call on the handle. Handle-exclusive. @since 0.1
 * @deprecated since 0.1: use dsv4_last_error() right after the failed call
 *             (api-guide §2); kept for the ABI.
 */
DSV4_DEPRECATED("use dsv4_last_error()") DSV4_API const char *dsv4_model_last_error(const dsv4_model *model);

/**
 * Model facts. Size-prefixed output struct: set struct_size (or use
 * dsv4_model_get_info, which sets it from its argument) and the library
 * fills min(struct_size, its own size) bytes.
 * @since 0.1
 */
typedef struct dsv4_model_info {
  uint32_t struct_size;         /**< bytes filled (set by dsv4_model_get_info) */
  int32_t vocab_size;          /**< text_config.vocab_size */
  int32_t hidden_size;         /**< dim (5120 for the release) */
  int32_t n_layers;            /**< backbone blocks (40) */
  int32_t n_mtp_layers;        /**< DSpark stages (3) */
  int32_t n_heads;             /**< attention heads (64) */
  int32_t head_dim;            /**< latent width (512) */
  int32_t rope_head_dim;       /**< RoPE'd tail of head_dim (64) */
  int32_t n_routed_experts;    /**< backbone experts (384) */
  int32_t n_experts_per_tok;   /**< backbone top-k (6) */
  int32_t sliding_window;      /**< window ring slots (128) */
  int32_t hc_mult;             /**< residual copies (4) */
  int32_t bos_token_id;        /**< begin-of-sentence id (config), the first token of a model input */
  int32_t eos_token_id;        /**< end-of-sentence id (config) */
  int32_t pad_token_id;        /**< padding id (config) */
  int32_t image_token_id;      /**< image placeholder id (config) */
  int32_t dspark_noise_token_id; /**< DSpark noise id that fills a draft block (spec §6.1) */
  int32_t dspark_block_size;   /**< DSpark proposals per draft, B (0 without DSpark) */
  int32_t reserved0;           /**< 0 */
  int64_t max_position_embeddings; /**< longest context the config allows (positions) */
  int64_t n_tensors;           /**< tensors in the table (checkpoint, or contract with CONFIG_ONLY) */
  int64_t payload_bytes;       /**< sum of their byte sizes */
  /* Filled when struct_size covers them (added in 0.1.x; older builds leave them 0). */
  int32_t index_n_heads;       /**< indexer heads (64) */
  int32_t index_head_dim;      /**< indexer key width (128) */
  int32_t index_topk;          /**< compressed positions each query selects (512) */
  int32_t engram_cols;         /**< Engram table rows per token and layer:
                                *   (max n-gram - 1) x Engram heads; 0 without Engram */
  int32_t engram_head_dim;     /**< bytes of e4m3 per Engram row */
  int32_t n_engram_layers;     /**< backbone layers with an Engram module */
  int32_t dspark_n_routed_experts;   /**< experts of a DSpark stage */
  int32_t dspark_n_experts_per_tok;  /**< top-k of a DSpark stage */
  int32_t window_record_bytes;       /**< KV record of one window position (spec §5.8; 528) */
  int32_t compressed_record_bytes;   /**< KV record of one compressed group (288) */
  int32_t index_key_record_bytes;    /**< KV record of one index key (68) */
  int32_t compressor_state_record_bytes; /**< ratio > 1 compressor input per position
                                          *   (fp32 k and gate: 8 x head_dim bytes) */
} dsv4_model_info;

/**
 * Fill *info.
 * @param model        [in] a loaded model.
 * @param info         [out] caller-owned, at least struct_size bytes.
 * @param struct_size  sizeof(dsv4_model_info) as the caller compiled it (at least
 *                     the 0.1 size). Bytes past the library's size are zeroed and
 *                     info->struct_size is set to the number of bytes filled.
 * @return DSV4_OK; DSV4_ERR_INVALID_ARG (NULL, or struct_size too small). No state change.
 * Handle-exclusive. @since 0.1
 */
DSV4_NODISCARD DSV4_API dsv4_status dsv4_model_get_info(const dsv4_model *model, dsv4_model_info *info,
                                         size_t struct_size);

/** Layer role flags (dsv4_layer_info.roles), spec §2.3. @since 0.1 */
enum {
  DSV4_ROLE_KV_SOURCE = 1u << 0,        /**< computes compressed KV (compressor) */
  DSV4_ROLE_INDEX_SOURCE = 1u << 1,     /**< runs the indexer (wq_b, weights_proj) */
  DSV4_ROLE_INDEX_OWN_KEYS = 1u << 2,   /**< index source that owns index keys (wk, k_norm) */
  DSV4_ROLE_CANDIDATE_SOURCE = 1u << 3, /**< publishes the candidate block mask */
  DSV4_ROLE_ENGRAM = 1u << 4,           /**< Engram applied to the stream before this block */
  DSV4_ROLE_DSPARK_TAP = 1u << 5,       /**< its input stream feeds DSpark main_hidden */
  DSV4_ROLE_DSPARK_STAGE = 1u << 6,     /**< an mtp.S stage (window only) */
  DSV4_ROLE_CANDIDATE_MASKED = 1u << 7  /**< index source whose scores are masked by the candidates */
};

/**
 * One row of the layer-role table, spec §2.3. Layers 0..n_layers-1 are the
 * backbone blocks, n_layers..n_layers+n_mtp_layers-1 the DSpark stages.
 * @since 0.1
 */
typedef struct dsv4_layer_info {
  uint32_t struct_size;         /**< bytes filled (set by dsv4_model_get_layer) */
  int32_t layer;               /**< the row's layer index */
  int32_t compress_ratio;      /**< 0 window only, 1 or 2 */
  uint32_t roles;              /**< DSV4_ROLE_* bits */
  int32_t kv_source;           /**< ratio > 0: latest KV source at or before this layer (itself for one), whose compressed KV it reads; else -1 */
  int32_t index_source;        /**< ratio > 0: latest index source at or before this layer (itself for one), whose top-k it uses; else -1 */
  int32_t index_key_source;    /**< for an index source: layer whose index keys it scores (itself if it owns keys, else its KV source); else -1 */
  int32_t candidate_source;    /**< for a candidate-masked index source: the candidate layer; else -1 */
  int32_t engram_slot;         /**< 0-based position in engram_layer_ids; -1 if not an Engram layer */
  int32_t rope_yarn;           /**< 1: theta compress_rope_theta with YaRN; 0: rope_theta, no YaRN */
} dsv4_layer_info;

/**
 * Fill *info for one layer.
 * @param model        [in] a loaded model.
 * @param layer        0 .. n_layers + n_mtp_layers - 1.
 * @param info         [out] caller-owned, at least struct_size bytes.
 * @param struct_size  as for dsv4_model_get_info.
 * @return DSV4_OK; DSV4_ERR_INVALID_ARG (NULL, layer out of range, struct_size too small).
 * No state change. Handle-exclusive. @since 0.1
 */
DSV4_NODISCARD DSV4_API dsv4_status dsv4_model_get_layer(const dsv4_model *model, int32_t layer,
                                          dsv4_layer_info *info, size_t struct_size);

/** Storage dtypes of checkpoint tensors (safetensors strings in comments). @since 0.1 */
enum {
  DSV4_DTYPE_BF16 = 1,    /**< "BF16", 2 bytes */
  DSV4_DTYPE_F16 = 2,     /**< "F16", 2 bytes */
  DSV4_DTYPE_F32 = 3,     /**< "F32", 4 bytes */
  DSV4_DTYPE_F8_E4M3 = 4, /**< "F8_E4M3", 1 byte (E4M3FN, spec §3.1) */
  DSV4_DTYPE_F8_E8M0 = 5, /**< "F8_E8M0", 1 byte (UE8M0 scale) */
  DSV4_DTYPE_I8 = 6,      /**< "I8", 1 byte (packed e2m1 pairs for experts) */
  DSV4_DTYPE_I32 = 7,     /**< "I32", 4 bytes */
  DSV4_DTYPE_I64 = 8      /**< "I64", 8 bytes */
};

/** Components for byte accounting (spec §4.4). @since 0.1 */
enum {
  DSV4_COMP_ROUTED_EXPERTS = 0, /**< layers.*.ffn.experts.* */
  DSV4_COMP_SHARED_EXPERTS = 1, /**< layers.*.ffn.shared_experts.* */
  DSV4_COMP_ATTENTION = 2,      /**< layers.*.attn.* */
  DSV4_COMP_ENGRAM_TABLES = 3,  /**< layers.*.engram.embed.* */
  DSV4_COMP_ENGRAM_PROJ = 4,    /**< layers.*.engram.{wkv,q_weight,k_weight} */
  DSV4_COMP_DSPARK = 5,         /**< mtp.* */
  DSV4_COMP_VISION = 6,         /**< vision.*, aligner.*, image_* */
  DSV4_COMP_EMBED_HEAD = 7,     /**< embed, head, final norm */
  DSV4_COMP_OTHER = 8,          /**< hc_*, gates, block norms */
  DSV4_COMP_COUNT_V0_1 = 9      /**< number of components in 0.1 (later versions may add) */
};

/** One tensor of the table. @since 0.1 */
typedef struct dsv4_tensor_info {
  uint32_t struct_size;       /**< bytes filled (set by dsv4_model_get_tensor) */
  int32_t dtype;             /**< DSV4_DTYPE_* */
  int32_t ndim;              /**< 0..4 */
  int32_t component;         /**< DSV4_COMP_* */
  int32_t shard;             /**< 0-based shard index; -1 in a CONFIG_ONLY model */
  int32_t reserved0;         /**< 0 */
  int64_t shape[4];          /**< first ndim entries valid */
  int64_t nbytes;            /**< payload bytes */
  const char *name;          /**< checkpoint name; borrowed, valid for the model's lifetime */
  /* The tensor's key in the model's weight table (ask by role, not by name). */
  int32_t layer;             /**< backbone layer 0..n_layers-1, DSpark stage n_layers + S, or
                              *   -1 for a model-wide tensor (embed, head, final norm, vision) */
  int32_t expert;            /**< routed expert of an expert weight, its ordinal among the
                              *   vision tensors for role "VISION", else -1 */
  const char *role;          /**< role key, static: "EMBED", "HEAD", "NORM", "ATTN_WO_A",
                              *   "EXPERT_W1", "ENGRAM_EMBED", "VISION", ... (the list is
                              *   DSV4I_WEIGHT_ROLES in lib/model/weights.h) */
  int32_t is_scale;          /**< 1: the block scale of the role's quantised weight; 0: the weight */
  int32_t reserved1;         /**< 0 */
} dsv4_tensor_info;

/**
 * Fill *info for tensor i (0 .. n_tensors-1, sorted by name with strcmp).
 * struct_size as for dsv4_model_get_info (the 0.1 size ends at name; the
 * weight-table key, layer .. reserved1, is filled when struct_size covers
 * it). The table is the config's tensor contract, which a loaded checkpoint
 * matches exactly (spec §4.2); every tensor has a (role, layer, expert) key
 * in the weight table.
 * @return DSV4_OK; DSV4_ERR_INVALID_ARG (NULL, i out of range, struct_size too small);
 *         DSV4_ERR_INTERNAL (a tensor without a weight-table entry: a library bug).
 * No state change. Handle-exclusive. @since 0.1
 */
DSV4_NODISCARD DSV4_API dsv4_status dsv4_model_get_tensor(const dsv4_model *model, int64_t i,
                                           dsv4_tensor_info *info, size_t struct_size);

/* ------------------------------------------------------------------------ */
/* Tokenizer: Hugging Face tokenizer.json, byte-level BPE (spec §5.0)       */
/* ------------------------------------------------------------------------ */

/**
 * A loaded tokenizer.json (+ tokenizer_config.json). Opaque. Its ids equal
 * those of the Rust `tokenizers` library's encode(text,
 * add_special_tokens=False): added/special tokens are matched in the text
 * before pre-tokenization, so markers such as \<｜User｜\> never split. Nothing
 * is added around the text: a prompt that needs BOS gets it from the caller
 * (dsv4_tokenizer_special_id(tok, DSV4_TOKEN_BOS)).
 * After load the tokenizer itself never changes; only its last-error slot does.
 * @since 0.1
 */
typedef struct dsv4_tokenizer dsv4_tokenizer;

/** Special-token kinds for dsv4_tokenizer_special_id(). @since 0.1 */
enum {
  DSV4_TOKEN_BOS = 0,         /**< tokenizer_config bos_token, else \<｜begin▁of▁sentence｜\> */
  DSV4_TOKEN_EOS = 1,         /**< tokenizer_config eos_token, else \<｜end▁of▁sentence｜\> */
  DSV4_TOKEN_PAD = 2,         /**< tokenizer_config pad_token, else \<｜▁pad▁｜\> */
  DSV4_TOKEN_IMAGE = 3,       /**< tokenizer_config image_token, else \<｜deepseek_image｜\>, \<｜image｜\> or \<image\> */
  DSV4_TOKEN_DSPARK_NOISE = 4 /**< tokenizer_config dspark_noise_token, else \<｜dspark▁noise｜\> */
};

/** Flags of dsv4_tokenizer_decode() and dsv4_tokenizer_stream_create(). @since 0.1 */
enum {
  /** Leave out added tokens marked "special" (the Rust decode's skip_special_tokens). */
  DSV4_DECODE_F_SKIP_SPECIAL = 1u << 0
};

/**
 * Load `dir`/tokenizer.json and, when present, `dir`/tokenizer_config.json.
 * Supported: model BPE (vocab; merges as "a b" strings or [a, b] pairs;
 * unk_token, fuse_unk, ignore_merges), added_tokens (special, lstrip,
 * rstrip, single_word, normalized), normalizer null / Sequence / NFC / NFD /
 * NFKC / NFKD, pre_tokenizer Sequence of Split (Regex or String pattern, any
 * behavior, invert) ending in ByteLevel, decoder null or ByteLevel. The
 * post_processor is ignored (encode adds nothing).
 *
 * @param dir  [in] directory path (UTF-8, NUL-terminated).
 * @param out  [out] the tokenizer on success, NULL on failure. Free with dsv4_tokenizer_free().
 * @return DSV4_OK; DSV4_ERR_INVALID_ARG (NULL); DSV4_ERR_NOT_FOUND (no tokenizer.json);
 *         DSV4_ERR_IO; DSV4_ERR_JSON (a file does not parse: line and column in the
 *         message); DSV4_ERR_TOKENIZER (model type other than BPE, a merge naming a
 *         token not in the vocabulary, a regex that does not compile, an unsupported
 *         normalizer/pre-tokenizer/decoder kind; the message names it);
 *         DSV4_ERR_OUT_OF_MEMORY. On failure nothing stays allocated; message in
 *         dsv4_last_error().
 * Thread-safe (distinct calls share nothing). @since 0.1
 */
DSV4_NODISCARD DSV4_API dsv4_status dsv4_tokenizer_load(const char *dir, dsv4_tokenizer **out);

/** Release a tokenizer. NULL is a no-op. No stream of it may be used afterwards. Handle-exclusive. @since 0.1 */
DSV4_API void dsv4_tokenizer_free(dsv4_tokenizer *tok);

/**
 * Message of the last failed call on this tokenizer; "" if none.
 * Borrowed: valid until the next call on the handle. Handle-exclusive. @since 0.1
 * @deprecated since 0.1: use dsv4_last_error() right after the failed call
 *             (api-guide §2); kept for the ABI.
 */
DSV4_DEPRECATED("use dsv4_last_error()") DSV4_API const char *dsv4_tokenizer_last_error(const dsv4_tokenizer *tok);

/**
 * Number of ids: 1 + the largest id of the vocabulary and the added tokens
 * (640 for the tiny fixtures). Ids below it may still name no token (gaps).
 * 0 when tok is NULL. Reads only immutable data: may run concurrently with
 * any call on tok except dsv4_tokenizer_free. @since 0.1
 */
DSV4_API int32_t dsv4_tokenizer_vocab_size(const dsv4_tokenizer *tok);

/**
 * Id of a special token (DSV4_TOKEN_*), found as the enum's comments say;
 * -1 when the tokenizer has none, for an unknown kind, or tok NULL. The
 * engine's config.json ids (dsv4_model_info) are authoritative for a model;
 * this is for text-only use. Concurrency as dsv4_tokenizer_vocab_size. @since 0.1
 */
DSV4_API int32_t dsv4_tokenizer_special_id(const dsv4_tokenizer *tok, int32_t kind);

/**
 * Id of an exact token string (an added token's content, else a vocabulary
 * entry in its byte-level spelling, e.g. "Ġthe"); -1 if none or NULL.
 * Concurrency as dsv4_tokenizer_vocab_size. @since 0.1
 */
DSV4_API int32_t dsv4_tokenizer_token_id(const dsv4_tokenizer *tok, const char *token);

/**
 * The token string of `id` as tokenizer.json spells it (byte-level
 * alphabet for vocabulary entries, content for added tokens). Borrowed,
 * valid for the tokenizer's lifetime; NULL when id names no token.
 * Concurrency as dsv4_tokenizer_vocab_size. @since 0.1
 */
DSV4_API const char *dsv4_tokenizer_token_text(const dsv4_tokenizer *tok, int32_t id);

/**
 * Encode UTF-8 text into ids (no BOS/EOS added).
 *
 * Buffer convention: with ids NULL the call only counts (*n_ids = ids
 * needed, DSV4_OK). With ids non-NULL and cap >= needed, ids[0 .. *n_ids)
 * are written. With cap < needed nothing is written, *n_ids = needed and
 * the status is DSV4_ERR_INVALID_ARG (test *n_ids > cap to tell this case
 * from the others, where *n_ids = 0). Without a normalizer and without
 * ByteLevel add_prefix_space (DeepSeek's tokenizers have neither) a text
 * never needs more ids than it has bytes, so cap = len suffices there.
 *
 * @param tok    [in] From dsv4_tokenizer_load(). Handle-exclusive.
 * @param text   [in] len bytes of UTF-8 (no terminator needed; NULL allowed when len is 0).
 * @param len    bytes; at most 2^31 - 1.
 * @param ids    [out] int32[cap] (host), or NULL to count.
 * @param cap    entries in ids.
 * @param n_ids  [out] ids written or needed.
 * @return DSV4_OK; DSV4_ERR_INVALID_ARG (tok/n_ids NULL, text NULL with len > 0,
 *         len too large, or cap too small as above); DSV4_ERR_INVALID_UTF8 (the text
 *         is not valid UTF-8 - overlong form, surrogate, truncated sequence, stray
 *         continuation byte, code point above U+10FFFF - or holds a NUL byte; the
 *         message gives the byte offset); DSV4_ERR_OUT_OF_MEMORY. On failure ids is
 *         untouched. Message in dsv4_last_error().
 * @since 0.1
 */
DSV4_NODISCARD DSV4_API dsv4_status dsv4_tokenizer_encode(dsv4_tokenizer *tok, const char *text, size_t len,
                                           int32_t *ids, size_t cap, size_t *n_ids);

/**
 * Decode ids into UTF-8 text like the Rust tokenizer's decode(ids,
 * skip_special_tokens): token bytes concatenated, then every invalid UTF-8
 * sequence (e.g. a lone partial token) replaced by U+FFFD. Ids >= 0 that
 * name no token contribute nothing, as in the reference.
 *
 * Buffer convention: with text NULL the call only measures (*len = bytes
 * needed without the terminator, DSV4_OK). With cap >= *len + 1 the text
 * and a NUL terminator are written. With a smaller cap nothing is written,
 * *len = bytes needed and the status is DSV4_ERR_INVALID_ARG. The text may
 * contain NUL bytes (a token of byte 0): use *len.
 *
 * @param tok    [in] Handle-exclusive.
 * @param ids    [in] int32[n_ids] (host); NULL allowed when n_ids is 0.
 * @param n_ids  entries in ids.
 * @param flags  DSV4_DECODE_F_* bits.
 * @param text   [out] char[cap] (host), or NULL to measure.
 * @param cap    bytes in text.
 * @param len    [out] bytes written or needed, terminator excluded.
 * @return DSV4_OK; DSV4_ERR_INVALID_ARG (NULL, unknown flags, cap too small);
 *         DSV4_ERR_INVALID_TOKEN (a negative id; nothing written);
 *         DSV4_ERR_OUT_OF_MEMORY. Message in dsv4_last_error().
 * @since 0.1
 */
DSV4_NODISCARD DSV4_API dsv4_status dsv4_tokenizer_decode(dsv4_tokenizer *tok, const int32_t *ids, size_t n_ids,
                                           uint32_t flags, char *text, size_t cap, size_t *len);

/**
 * Incremental decoding for generation: push one id at a time and get the
 * text completed by it. Bytes that start a UTF-8 sequence the next token
 * may complete are held back; a final dsv4_tokenizer_stream_flush() gives
 * what remains (incomplete bytes as U+FFFD). The concatenated pieces equal
 * dsv4_tokenizer_decode() of all ids pushed. Opaque. @since 0.1
 */
typedef struct dsv4_tokenizer_stream dsv4_tokenizer_stream;

/**
 * @param tok    [in] Borrowed: must outlive the stream. The stream only reads it,
 *               so streams of one tokenizer may run on different threads.
 * @param flags  DSV4_DECODE_F_* bits.
 * @param out    [out] the stream, NULL on failure. Free with dsv4_tokenizer_stream_free().
 * @return DSV4_OK; DSV4_ERR_INVALID_ARG (NULL, unknown flags); DSV4_ERR_OUT_OF_MEMORY.
 *         Message in dsv4_last_error(). Thread-safe. @since 0.1
 */
DSV4_NODISCARD DSV4_API dsv4_status dsv4_tokenizer_stream_create(const dsv4_tokenizer *tok, uint32_t flags,
                                                  dsv4_tokenizer_stream **out);

/** Release a stream (held-back bytes are dropped). NULL is a no-op. Handle-exclusive. @since 0.1 */
DSV4_API void dsv4_tokenizer_stream_free(dsv4_tokenizer_stream *st);

/**
 * Push one id.
 * @param st    [in,out] Handle-exclusive.
 * @param id    a token id >= 0 (an id naming no token adds nothing).
 * @param text  [out] the newly completed text (maybe ""), NUL-terminated; borrowed,
 *              valid until the next call on st.
 * @param len   [out] its length in bytes (may include NUL bytes).
 * @return DSV4_OK; DSV4_ERR_INVALID_ARG (NULL); DSV4_ERR_INVALID_TOKEN (negative id;
 *         no state change); DSV4_ERR_OUT_OF_MEMORY (the id's bytes may be lost).
 *         Message in dsv4_last_error(). @since 0.1
 */
DSV4_NODISCARD DSV4_API dsv4_status dsv4_tokenizer_stream_push(dsv4_tokenizer_stream *st, int32_t id,
                                                const char **text, size_t *len);

/**
 * Emit everything held back (incomplete UTF-8 as U+FFFD) and start over, as
 * after create. Outputs as for push. @return DSV4_OK; DSV4_ERR_INVALID_ARG;
 * DSV4_ERR_OUT_OF_MEMORY. Handle-exclusive. @since 0.1
 */
DSV4_NODISCARD DSV4_API dsv4_status dsv4_tokenizer_stream_flush(dsv4_tokenizer_stream *st, const char **text,
                                                 size_t *len);

/* ------------------------------------------------------------------------ */
/* Chat format: DeepSeek-V4.1 prompts and output (docs/serving.md)           */
/* ------------------------------------------------------------------------ */

/** dsv4_chat_params.mode. @since 0.1 */
enum {
  DSV4_CHAT_MODE_CHAT = 0,    /**< answer directly: the assistant turn opens with the think-end marker */
  DSV4_CHAT_MODE_THINKING = 1 /**< reason first: the turn opens with the think marker, effort line in the system slot */
};

/** dsv4_chat_params.flags bits. @since 0.1 */
enum {
  /** Special-token text inside message strings (content, reasoning, tool
   *  schemas, arguments, results) becomes special ids, as the release's own
   *  serving path does (a user can then forge role markers). Default: such
   *  text is encoded as ordinary text. */
  DSV4_CHAT_F_PARSE_SPECIAL = 1u << 0,
  /** Keep the reasoning of earlier assistant turns (the encoder's
   *  drop_thinking = False). Default: dropped, as the encoder does unless a
   *  message defines tools. */
  DSV4_CHAT_F_KEEP_REASONING = 1u << 1,
  /** Do not start with the begin-of-sentence marker (continuing a rendered prompt). */
  DSV4_CHAT_F_NO_BOS = 1u << 2
};

/**
 * How a conversation is rendered. Size-prefixed, append-only: fill with
 * dsv4_chat_params_init(). @since 0.1
 */
typedef struct dsv4_chat_params {
  uint32_t struct_size;     /**< sizeof, set by the init call */
  int32_t mode;             /**< DSV4_CHAT_MODE_*; default CHAT */
  uint32_t flags;           /**< DSV4_CHAT_F_* bits; default 0 */
  int32_t reasoning_effort; /**< 1..100, or 0 = the encoder's default "high" (50); the
                             *   encoder's names are low 25, high 50, xhigh 75, max 100.
                             *   Rendered in thinking mode only */
} dsv4_chat_params;

/**
 * Fill *params with defaults and set struct_size.
 * @return DSV4_OK; DSV4_ERR_INVALID_ARG (NULL); DSV4_ERR_PARAMS_SIZE.
 * Thread-safe. @since 0.1
 */
DSV4_NODISCARD DSV4_API dsv4_status dsv4_chat_params_init(dsv4_chat_params *params, size_t struct_size);

/**
 * Render a conversation into the V4.1 prompt text exactly as the release's
 * encoder (encoding_dsv41.py, encode_messages) builds it: system / user /
 * developer / assistant / tool / latest_reminder turns, tool definitions,
 * DSML tool-call blocks, tool results merged into user turns in call order,
 * earlier reasoning dropped or kept, the thinking mode's effort line and
 * the assistant opening (docs/serving.md, "Chat format").
 *
 * @param conversation [in] len bytes of UTF-8 JSON: an array of OpenAI-style
 *                 messages ({"role", "content" (string or list of text parts),
 *                 "reasoning_content", "tool_calls", "tool_call_id", and the
 *                 encoder's "tools", "response_format", "task", "wo_eos"}), or an
 *                 object {"messages": [...], "tools": [...]} whose top-level tools
 *                 go on the first system message (an empty one is put first
 *                 when there is none).
 * @param len      bytes of conversation.
 * @param params   [in] NULL = defaults.
 * @param text     [out] malloc'd NUL-terminated prompt; release with dsv4_free(). NULL on failure.
 * @param text_len [out] its length in bytes, or NULL.
 * @return DSV4_OK; DSV4_ERR_INVALID_ARG (NULL, reasoning_effort or mode out of
 *         range, unknown flags, a message the encoder rejects: the message names
 *         its index and field); DSV4_ERR_JSON (not JSON; line and column in the
 *         message); DSV4_ERR_INVALID_UTF8; DSV4_ERR_UNSUPPORTED (image parts: no
 *         vision tower); DSV4_ERR_PARAMS_SIZE; DSV4_ERR_OUT_OF_MEMORY. Message in
 *         dsv4_last_error(). Thread-safe. @since 0.1
 */
DSV4_NODISCARD DSV4_API dsv4_status dsv4_chat_render(const char *conversation, size_t len,
                                      const dsv4_chat_params *params, char **text,
                                      size_t *text_len);

/**
 * dsv4_chat_render() then the tokenizer: the ids equal those of the
 * reference tokenizer on the rendered text, except that without
 * DSV4_CHAT_F_PARSE_SPECIAL no special token is matched inside text that
 * came from the conversation (it is encoded as ordinary text). Markers the
 * tokenizer has no token for are encoded as text.
 *
 * @param tok    [in] Only read: may run concurrently with other calls on tok
 *               except dsv4_tokenizer_free.
 * @param conversation [in] as for dsv4_chat_render().
 * @param len    bytes of conversation.
 * @param params [in] NULL = defaults.
 * @param ids    [out] malloc'd int32 [*n_ids] (host); release with dsv4_free(). NULL on failure.
 * @param n_ids  [out] number of ids.
 * @return the statuses of dsv4_chat_render(); DSV4_ERR_INVALID_ARG (tok NULL).
 *         Message in dsv4_last_error(). @since 0.1
 */
DSV4_NODISCARD DSV4_API dsv4_status dsv4_chat_encode(const dsv4_tokenizer *tok, const char *conversation,
                                      size_t len, const dsv4_chat_params *params, int32_t **ids,
                                      size_t *n_ids);

/** Streaming parser of model output (reasoning, content, tool calls). Opaque. @since 0.1 */
typedef struct dsv4_chat_parser dsv4_chat_parser;

/** Kinds of dsv4_chat_event_fn events. @since 0.1 */
enum {
  DSV4_CHAT_EVENT_REASONING = 1, /**< reasoning text (before the think-end marker) */
  DSV4_CHAT_EVENT_CONTENT = 2,   /**< answer text */
  DSV4_CHAT_EVENT_TOOL_CALL = 3, /**< one complete tool call: JSON {"name": "...",
                                  *   "arguments": "<JSON object text>"}; the arguments
                                  *   are the text the release parser builds */
  DSV4_CHAT_EVENT_END = 4        /**< the end-of-sentence marker seen; later text is ignored */
};

/**
 * Receives parsed output: kind (DSV4_CHAT_EVENT_*) and len bytes of text
 * (borrowed for the call; not NUL-terminated for REASONING and CONTENT).
 * Called on the thread of the push or finish call.
 */
typedef void (*dsv4_chat_event_fn)(int32_t kind, const char *text, size_t len, void *user_data);

/**
 * @param mode  DSV4_CHAT_MODE_* the prompt was rendered with (THINKING: output
 *              starts as reasoning).
 * @param out   [out] the parser, NULL on failure. Free with dsv4_chat_parser_free().
 * @return DSV4_OK; DSV4_ERR_INVALID_ARG (NULL, unknown mode); DSV4_ERR_OUT_OF_MEMORY.
 *         Thread-safe. @since 0.1
 */
DSV4_NODISCARD DSV4_API dsv4_status dsv4_chat_parser_create(int32_t mode, dsv4_chat_parser **out);

/**
 * Feed decoded output text (decode with special tokens kept, so the markers
 * are visible). Text is reported as soon as it cannot be the start of a
 * marker, so a marker split across pushes is still recognised; a tool call
 * is reported when its block closes. A block that does not parse, or
 * is not valid UTF-8 (its tool calls could not be JSON), is reported as
 * content, unchanged.
 * @return DSV4_OK; DSV4_ERR_INVALID_ARG (NULL parser or fn, text NULL with len > 0);
 *         DSV4_ERR_OUT_OF_MEMORY (the text of this push may be lost). Handle-exclusive. @since 0.1
 */
DSV4_NODISCARD DSV4_API dsv4_status dsv4_chat_parser_push(dsv4_chat_parser *parser, const char *text, size_t len,
                                           dsv4_chat_event_fn fn, void *user_data);

/**
 * The output ended (end of sentence, a stop condition or a length limit):
 * report everything held back (an unfinished tool-call block as content).
 * The parser then accepts nothing more but can be freed.
 * @return DSV4_OK; DSV4_ERR_INVALID_ARG (NULL). Handle-exclusive. @since 0.1
 */
DSV4_NODISCARD DSV4_API dsv4_status dsv4_chat_parser_finish(dsv4_chat_parser *parser, dsv4_chat_event_fn fn,
                                             void *user_data);

/** Release a parser. NULL is a no-op. Handle-exclusive. @since 0.1 */
DSV4_API void dsv4_chat_parser_free(dsv4_chat_parser *parser);

/* ------------------------------------------------------------------------ */
/* Engine: sequences, prefill, batched decode (design §3, api-guide §4)     */
/* ------------------------------------------------------------------------ */

/**
 * An inference engine over one model: a compute backend with the model's
 * weights, KV cache pools sized by a memory plan, and sequences. Opaque.
 * Every call on an engine is handle-exclusive (one thread at a time, may
 * migrate between threads).
 *
 * Distributed engine (docs/distributed.md): with dsv4_engine_params.mpi_comm
 * set, the engine is one rank of a job of tp_size x pp_size MPI ranks (the
 * communicator's size): rank r runs pipeline stage r / tp_size with TP rank
 * r % tp_size, loads only its stage's layers (the first stage the embedding,
 * the last the head and the DSpark stages) and exchanges the stream with its
 * neighbours every step. Every call that computes is collective: every rank
 * makes it, in the same order and with the same arguments: create, prefill,
 * decode, draft, verify; sequence create / fork / free are made on every
 * rank too (they exchange nothing). Every rank returns the same status and
 * the same outputs (sampled tokens, logits, drafts, accepted counts: the last
 * stage computes them and broadcasts them). Ranks given different arguments
 * get DSV4_ERR_RANK_MISMATCH on every rank with nothing changed; a rank that
 * fails gives its status to every rank (DSV4_ERR_RANK_FAILED on the others),
 * and a rank that stops answering gives DSV4_ERR_RANK_FAILED on every other
 * rank within dist_timeout_ms of their entering the call, never a hang (one
 * exception, docs/distributed.md "Communicator, faults and timeouts": on the
 * CUDA backend a TP rank failing before its NCCL all-reduce is not watched
 * yet, its TP partners wait without bound). After DSV4_ERR_RANK_FAILED from
 * a timeout the engine is sticky-failed: free it on every rank.
 * @since 0.1
 */
typedef struct dsv4_engine dsv4_engine;

/** Most pipeline stages of a distributed engine (dsv4_engine_params.stage_first_layer). @since 0.1 */
#define DSV4_MAX_STAGES 16

/** dsv4_engine_params.flags bits. @since 0.1 */
enum {
  /** Time every backend op (embed, Engram, block per layer, head, sample, read)
   *  into dsv4_engine_timings; a device backend synchronises after each op. */
  DSV4_ENGINE_F_OP_TIMINGS = 1u << 0,
  /** CUDA backend: run every dense and MoE kernel in the CPU engine's summation
   *  order, so those ops equal the CPU backend's bit for bit; the sparse
   *  attention (tensor-core dot products) and the ops that call the device's
   *  math library (RoPE's cos/sin, expf in the softmax and the router weights)
   *  may still differ in the last bit, so logits can differ slightly at real
   *  dimensions (measured: docs/gpu-backend.md). Without it (the default, "tiled"
   *  mode) the dense, MoE and attention kernels may sum fp32 terms in another
   *  fixed order (split-K trees, bf16 mma with fp32 accumulate) to reach the
   *  memory-bandwidth floor: results are deterministic and batch invariant
   *  (a sequence's tokens and logits do not depend on the batch, graph replay
   *  equals eager, speculative equals greedy, all bit for bit), every rounding
   *  point of the reference stays, and each op is within a bound derived from
   *  its summation length, e.g. 2 gamma(n) sum |p_k| (+ 1 output ulp), wider
   *  for tensor-core sums (docs/gpu-dense.md "Numerics modes"). This mode is slower: several times at 1-16 tokens for
   *  the projections and the MoE (bench/RESULTS.md). Ignored by the CPU
   *  backend. Every rank of a distributed engine must give the same flags.
   *  Appended after 0.1 */
  DSV4_ENGINE_F_GPU_CPU_ORDER = 1u << 1
};

/**
 * Progress of a long call (engine creation): a static stage name ("model",
 * "engram", "weights", "ready"), units done of total. Called on the calling
 * thread. Return 0 to continue, non-zero to stop: the call then returns
 * DSV4_ABORTED with nothing allocated.
 * @since 0.1
 */
typedef int32_t (*dsv4_progress_fn)(const char *stage, int64_t done, int64_t total,
                                    void *user_data);

/**
 * Parameters of dsv4_engine_create(). Size-prefixed and append-only: fill
 * with dsv4_engine_params_init() and change fields after.
 * @since 0.1
 */
typedef struct dsv4_engine_params {
  uint32_t struct_size;      /**< sizeof(dsv4_engine_params), set by the init call */
  uint32_t flags;            /**< DSV4_ENGINE_F_* bits; default 0 */
  int32_t backend;           /**< DSV4_BACKEND_*; default AUTO: CUDA when the library has
                              *   its kernels, dsv4_backend_probe(CUDA, device) answers
                              *   DSV4_OK and tp_size = 1, else the CPU. CUDA with
                              *   tp_size > 1 (docs/distributed.md "GPU TP shards") is asked
                              *   for explicitly: each TP rank needs its own GPU (device) */
  int32_t device;            /**< CUDA device ordinal; default 0; ignored by the CPU */
  int32_t max_sequences;     /**< live sequences at once, forks included; default 8; 1..65535 */
  int32_t n_threads;         /**< CPU worker threads, 0..1024; default 0 = one per core */
  int64_t max_context;       /**< positions per sequence; default 0 = min(4096,
                              *   max_position_embeddings); at most max_position_embeddings */
  int64_t kv_budget_bytes;   /**< bytes for the KV pools; default 0 = exactly what
                              *   max_sequences sequences at max_context need */
  int32_t prefill_chunk;     /**< tokens per internal prefill step; default 256 */
  int32_t tp_size;           /**< tensor-parallel ranks per stage; default 1; > 1 needs
                              *   mpi_comm (see dsv4_engine) */
  void *mpi_comm;            /**< an MPI_Comm * (MPI initialised by the application) to run
                              *   as one rank of a distributed engine, or NULL = one process;
                              *   default NULL. The engine duplicates the communicator; the
                              *   pointer is read only during dsv4_engine_create */
  dsv4_log_fn log_fn;        /**< per-engine log sink; NULL = the global one */
  void *log_user_data;       /**< passed to log_fn */
  int32_t log_level;         /**< DSV4_LOG_* maximum level for log_fn; default DSV4_LOG_WARN */
  int32_t reserved0;         /**< 0 */
  dsv4_progress_fn progress_fn; /**< progress while creating; NULL = none */
  void *progress_user_data;  /**< passed to progress_fn */
  int32_t pp_size;           /**< pipeline stages of a distributed engine, 1..DSV4_MAX_STAGES;
                              *   default 1; tp_size x pp_size = the communicator's size */
  int32_t dist_timeout_ms;   /**< bound of every wait between ranks, milliseconds; default
                              *   0 = 300000 */
  int32_t stage_first_layer[DSV4_MAX_STAGES]; /**< backbone layer each stage starts at
                              *   ([0] = 0, increasing), only at layers where no attention
                              *   state shared across layers crosses (docs/distributed.md;
                              *   another split is DSV4_ERR_UNSUPPORTED naming the state);
                              *   all 0 = the allowed split nearest to equal layer counts */
  int32_t pp_micro_batches;  /**< pipeline overlap (pp_size > 1): a dsv4_engine_decode call of
                              *   n sequences runs as min(n, this) micro-batches of consecutive
                              *   rows, so stage k works on micro-batch i + 1 while stage k + 1
                              *   works on micro-batch i (docs/distributed.md "Overlap"). Tokens
                              *   and logits are identical to 1 (the kernels are batch
                              *   invariant). 0..256; default 0 = 1 = no overlap: each micro-batch
                              *   pays a stage's fixed per-step cost and reads its weights again,
                              *   which on the CPU fixtures costs more than the overlap gains
                              *   (bench/RESULTS.md §9.2). Every rank must give the same value.
                              *   Appended after 0.1 */
  int32_t reserved1;         /**< 0 */
  int32_t kv_format;         /**< window KV record format, DSV4_KV_FORMAT_*; default NATIVE
                              *   (528 B MXFP8 per window slot at head_dim 512: the reference's
                              *   numerics). DSV4_KV_FORMAT_FP8_DS_MLA stores V4's 584 B record
                              *   per slot (E4M3 NoPE values with one UE8M0 scale per 64, the
                              *   64 RoPE dims as unquantised bf16): +56 B per window slot, and
                              *   attention reads other values than the reference, so logits
                              *   differ (bounded and measured in docs/attention.md "KV
                              *   formats"); every other cache is unchanged. Another value is
                              *   DSV4_ERR_INVALID_ARG. Every rank of a distributed engine must
                              *   give the same value. Appended after 0.1 */
  int32_t reserved2;         /**< 0 */
} dsv4_engine_params;

/**
 * Fill *params with defaults and set struct_size. Writes exactly struct_size
 * bytes (bytes of fields a newer header added are zeroed).
 * @param params       [out] caller-owned, at least struct_size bytes.
 * @param struct_size  sizeof(dsv4_engine_params) as the caller compiled it.
 * @return DSV4_OK; DSV4_ERR_INVALID_ARG (params NULL); DSV4_ERR_PARAMS_SIZE
 *         (struct_size below the 0.1 size). No state change on failure.
 * Thread-safe. @since 0.1
 */
DSV4_NODISCARD DSV4_API dsv4_status dsv4_engine_params_init(dsv4_engine_params *params, size_t struct_size);

/**
 * Create an engine over a loaded model. Validates everything and computes
 * the memory plan (KV pools: every cache of spec §5.8 for max_sequences
 * sequences at max_context, or what kv_budget_bytes pays for) before
 * allocating anything large; then builds the Engram hash tables from the
 * model directory's tokenizer.json (spec §5.2), prepares the backend's
 * weights (wo_a dequantised to bf16, spec §3.3; everything else stays
 * mmapped) and allocates the pools.
 *
 * @param model   [in] From dsv4_model_load() without DSV4_MODEL_F_CONFIG_ONLY.
 *                Borrowed: must outlive the engine and is not used by it
 *                concurrently with other calls on the model.
 * @param params  [in] NULL for defaults; the library reads
 *                min(params->struct_size, its own size) bytes.
 * @param out     [out] the engine, NULL on failure. Free with dsv4_engine_free().
 * @return DSV4_OK; DSV4_ERR_INVALID_ARG (NULL, a config-only model, unknown
 *         flags, backend or kv_format, max_context above max_position_embeddings, a
 *         negative size, n_threads above 1024, tp_size or pp_size above 1
 *         without mpi_comm, tp_size x pp_size not the communicator's size, MPI
 *         not initialised); DSV4_ERR_RANK_MISMATCH (distributed: the ranks hold
 *         different checkpoints, library versions or parameters; every rank);
 *         DSV4_ERR_RANK_FAILED (distributed: another rank failed creating, its
 *         status and message given, or did not answer within dist_timeout_ms);
 *         DSV4_ERR_PARAMS_SIZE;
 *         DSV4_ERR_UNSUPPORTED (backend CUDA in a build without nvcc, or a
 *         model shape its kernels do not take: the message names op and shape;
 *         backend CUDA with kv_format fp8_ds_mla and head_dim - rope_head_dim
 *         not a multiple of 32 (its kernels read NoPE dims in 32-value runs);
 *         a stage split where shared attention state would cross, or a tp_size
 *         the weight table's split rules refuse; a library built without MPI
 *         given mpi_comm; backend CUDA with tp_size > 1: two TP ranks on one
 *         GPU (NCCL runs one rank per device; the message names them), or a
 *         tp_size that does not split heads, wo_a groups and the expert
 *         intermediate dimension into whole 32-blocks);
 *         DSV4_ERR_NO_DEVICE / DSV4_ERR_DEVICE (backend CUDA: no usable device);
 *         DSV4_ERR_DOES_NOT_FIT (the KV budget cannot hold the sequence slots
 *         plus one sequence at max_context, or the plan exceeds this machine's
 *         memory; the message gives the figures); DSV4_ERR_TOKENIZER and the
 *         tokenizer's statuses (Engram tables); DSV4_ERR_NOT_FOUND /
 *         DSV4_ERR_WEIGHTS (a weight of the wrong format); DSV4_ERR_OUT_OF_MEMORY;
 *         DSV4_ABORTED (progress_fn asked to stop). On failure nothing stays
 *         allocated; message in dsv4_last_error().
 * Thread-safe (distinct calls share nothing but the read-only model). @since 0.1
 */
DSV4_NODISCARD DSV4_API dsv4_status dsv4_engine_create(const dsv4_model *model, const dsv4_engine_params *params,
                                        dsv4_engine **out);

/**
 * dsv4_engine_create() on a checkpoint directory: loads the model
 * (dsv4_model_load with the params' log sink), reporting stage "model", and
 * owns it: dsv4_engine_free() releases it. dsv4_engine_model() gives it.
 * @return the statuses of dsv4_model_load() and dsv4_engine_create().
 * Thread-safe. @since 0.1
 */
DSV4_NODISCARD DSV4_API dsv4_status dsv4_engine_create_from_dir(const char *dir, const dsv4_engine_params *params,
                                                 dsv4_engine **out);

/** Release an engine, its sequences and pools (and its model if it owns one). NULL is a no-op.
 *  Handle-exclusive. Distributed engine: every rank frees its engine (no communication).
 *  @since 0.1 */
DSV4_API void dsv4_engine_free(dsv4_engine *engine);

/**
 * Message of the most recent failed call on this engine ("" if none or
 * engine NULL); also in dsv4_last_error() right after the call. Borrowed:
 * valid until the next call on the handle. Handle-exclusive. @since 0.1
 * @deprecated since 0.1: use dsv4_last_error() right after the failed call
 *             (api-guide §2); kept for the ABI.
 */
DSV4_DEPRECATED("use dsv4_last_error()") DSV4_API const char *dsv4_engine_last_error(const dsv4_engine *engine);

/**
 * The engine's model (for dsv4_model_get_info and friends). Borrowed: valid
 * while the engine lives. NULL if engine is NULL. Handle-exclusive. @since 0.1
 */
DSV4_API const dsv4_model *dsv4_engine_model(const dsv4_engine *engine);

/**
 * Engine facts: memory plan and current use. Size-prefixed output struct
 * (as dsv4_model_info). On a rank of a distributed engine every figure is
 * that rank's: the caches of its stage's layers, its prepared weights and
 * checkpoint bytes (its layers, its TP shard), its buffers. The 0.1 size ends
 * at mapped_bytes: a caller compiled against it passes that size and gets
 * exactly those bytes; comm_bytes, create_bytes and kv_format, appended, are
 * filled when struct_size covers them.
 * @since 0.1
 */
typedef struct dsv4_engine_info {
  uint32_t struct_size;         /**< bytes filled (set by dsv4_engine_get_info) */
  int32_t backend;              /**< DSV4_BACKEND_* actually used */
  int32_t n_threads;            /**< host worker threads the backend uses */
  int32_t max_sequences;        /**< live sequences at once, as created */
  int32_t prefill_chunk;        /**< tokens per internal prefill step */
  int32_t sequences_live;       /**< sequences created and not freed */
  int64_t max_context;          /**< positions per sequence */
  int64_t kv_page_bytes;        /**< bytes of one pool page */
  int64_t kv_pages_total;       /**< pages in the pool */
  int64_t kv_pages_used;        /**< pages held by sequences now */
  int64_t kv_pages_per_sequence;/**< pages one sequence at max_context needs */
  int64_t kv_bytes;             /**< pool + per-sequence bookkeeping */
  int64_t kv_bytes_per_token;   /**< record bytes per position over all layers (spec §5.8) */
  int64_t workspace_bytes;      /**< step buffers and scratch */
  int64_t prepared_weight_bytes;/**< weights the backend converted at load (wo_a), plus checkpoint tensors copied to aligned memory because the shard did not align them */
  int64_t mapped_bytes;         /**< checkpoint bytes, mmapped (paged in on use); on a rank
                                 *   of a distributed engine the bytes of its layers and TP
                                 *   shard (docs/distributed.md "Memory per rank") */
  int64_t comm_bytes;           /**< rank of a distributed engine: its stage payload buffer
                                 *   (0 for one process or one stage) */
  int64_t create_bytes;         /**< what creating the engine allocates by the plan:
                                 *   kv_bytes + workspace_bytes + the backend's prepared weights
                                 *   + comm_bytes; a rank of a distributed engine: its own
                                 *   (its stage's layers' caches and weights, its TP shard).
                                 *   The engine logs it at INFO next to the heap's measured
                                 *   growth over the create */
  int32_t kv_format;            /**< DSV4_KV_FORMAT_* of the window records (as created);
                                 *   appended after 0.1 */
  int32_t reserved0;            /**< 0 */
} dsv4_engine_info;

/**
 * Fill *info (struct_size as for dsv4_model_get_info).
 * @return DSV4_OK; DSV4_ERR_INVALID_ARG (NULL, struct_size too small). No state change.
 * Handle-exclusive. @since 0.1
 */
DSV4_NODISCARD DSV4_API dsv4_status dsv4_engine_get_info(const dsv4_engine *engine, dsv4_engine_info *info,
                                          size_t struct_size);

/**
 * The memory plan of an engine that dsv4_engine_create(model, params) would
 * build, without building it: the same function sizes the engine's pools
 * (what dsv4-plan --engine prints). Every field as dsv4_engine_get_info
 * would report right after creation (kv_pages_used and sequences_live 0;
 * n_threads as requested, 0 = one per core). With params->mpi_comm set (MPI
 * initialised) it is the plan of this process's rank of that job: its stage's
 * layers, its TP shard, its payload buffer, from the communicator's rank and
 * size alone (not collective: nothing is exchanged; docs/distributed.md
 * "Memory per rank").
 * @param model   [in] any model, DSV4_MODEL_F_CONFIG_ONLY included (no weights read).
 * @param params  [in] NULL for defaults; validated as dsv4_engine_create does.
 * @param info    [out] caller-owned, struct_size bytes.
 * @param struct_size sizeof(dsv4_engine_info) as the caller compiled it (at least the 0.1 size).
 * @return DSV4_OK; DSV4_ERR_INVALID_ARG (NULL, struct_size too small, a parameter out of
 *         range); DSV4_ERR_PARAMS_SIZE; DSV4_ERR_UNSUPPORTED (backend CUDA in a build without nvcc);
 *         DSV4_ERR_DOES_NOT_FIT (the request does not fit the KV budget or this machine;
 *         the message gives the figures); with mpi_comm: DSV4_ERR_UNSUPPORTED (a stage
 *         split where shared attention state crosses, built without MPI) and
 *         DSV4_ERR_INVALID_ARG (MPI not initialised, TP x PP not the communicator's
 *         size). No state change; *info untouched on failure.
 * Thread-safe with respect to the model (reads only). @since 0.1
 */
DSV4_NODISCARD DSV4_API dsv4_status dsv4_engine_plan_query(const dsv4_model *model,
                                            const dsv4_engine_params *params,
                                            dsv4_engine_info *info, size_t struct_size);

/* ---- sequences ----------------------------------------------------------- */

/**
 * Create an empty sequence. Its id is an opaque handle (never 0), valid
 * until dsv4_engine_seq_free(); a freed id is never reused.
 * @param engine  [in,out] Handle-exclusive.
 * @param id  [out] the new sequence id (unchanged on failure).
 * @return DSV4_OK; DSV4_KV_FULL (positive: max_sequences are live; free one
 *         and retry; no state change); DSV4_ERR_INVALID_ARG (NULL);
 *         DSV4_ERR_OUT_OF_MEMORY. Handle-exclusive. @since 0.1
 * Distributed engine: made by every rank in the same order (no communication).
 */
DSV4_NODISCARD DSV4_API dsv4_status dsv4_engine_seq_create(dsv4_engine *engine, int64_t *id);

/**
 * Fork a sequence: the child holds the parent's positions, KV caches,
 * Engram history and sampler state, so it produces exactly what the parent
 * would from here (for n > 1 sampling and speculation). Compressed caches
 * are shared copy-on-write; window rings are copied.
 * @param engine  [in,out] Handle-exclusive.
 * @param parent  [in] a live sequence.
 * @param child   [out] the new id (unchanged on failure).
 * @return DSV4_OK; DSV4_KV_FULL (no free sequence slot or too few free pages;
 *         no state change); DSV4_ERR_UNKNOWN_SEQUENCE (parent unknown or freed);
 *         DSV4_ERR_INVALID_ARG (NULL; parent damaged, see prefill);
 *         DSV4_ERR_OUT_OF_MEMORY. Handle-exclusive. @since 0.1
 * Distributed engine: made by every rank in the same order (no communication).
 */
DSV4_NODISCARD DSV4_API dsv4_status dsv4_engine_seq_fork(dsv4_engine *engine, int64_t parent, int64_t *child);

/**
 * Free a sequence and its cache pages (also a damaged one).
 * @return DSV4_OK; DSV4_ERR_UNKNOWN_SEQUENCE (unknown or already freed; no
 *         state change); DSV4_ERR_INVALID_ARG (engine NULL). Handle-exclusive. @since 0.1
 * Distributed engine: made by every rank in the same order (no communication).
 */
DSV4_NODISCARD DSV4_API dsv4_status dsv4_engine_seq_free(dsv4_engine *engine, int64_t id);

/**
 * Positions a sequence holds (prompt + generated tokens fed so far).
 * @return DSV4_OK; DSV4_ERR_UNKNOWN_SEQUENCE; DSV4_ERR_INVALID_ARG (NULL).
 * Handle-exclusive. @since 0.1
 */
DSV4_NODISCARD DSV4_API dsv4_status dsv4_engine_seq_length(const dsv4_engine *engine, int64_t id, int64_t *len);

/* ---- sampling, prefill, decode -------------------------------------------- */

/**
 * How prefill / decode pick tokens (spec §5.6). Size-prefixed, append-only:
 * fill with dsv4_sampling_params_init(). A draw is a pure function of
 * (logits, temperature, seed, position of the drawn token): a sequence's
 * tokens never depend on the batch it is in or the order of that batch, and
 * a fork draws what its parent would. Give forks different seeds (seeds)
 * to make them differ.
 * @since 0.1
 */
typedef struct dsv4_sampling_params {
  uint32_t struct_size;   /**< sizeof, set by the init call */
  float temperature;      /**< <= 0: greedy argmax (lower id on ties, the reference's
                           *   argmax); > 0: softmax(logits / max(T, 1e-5)) sampled by the
                           *   exponential race argmax(p / Exp(1)) as the reference; default 0.
                           *   Either way only ids the model's tokenizer defines are drawn:
                           *   head rows past them (the release pads to 129,280) never are */
  uint64_t seed;          /**< noise seed for every sequence of the call; default 0 */
  const uint64_t *seeds;  /**< [n_seq] per-sequence seeds in batch order (prefill: [1]),
                           *   or NULL = seed for all; default NULL */
} dsv4_sampling_params;

/**
 * Fill *params with defaults (greedy) and set struct_size.
 * @return DSV4_OK; DSV4_ERR_INVALID_ARG (NULL); DSV4_ERR_PARAMS_SIZE.
 * Thread-safe. @since 0.1
 */
DSV4_NODISCARD DSV4_API dsv4_status dsv4_sampling_params_init(dsv4_sampling_params *params, size_t struct_size);

/**
 * Append prompt tokens to a sequence (prefill, spec §5.7): any number up to
 * max_context, fed in chunks of prefill_chunk; the prompt tokens use the
 * reference's prefill attention row, so chunking does not change results.
 * Optionally returns the logits of the last token and/or a token sampled
 * from them (the first generated token; feed it to dsv4_engine_decode()).
 *
 * @param engine   [in,out] Handle-exclusive.
 * @param id       a live sequence.
 * @param tokens   [in] int32 [n_tokens] (host), each in [0, vocab).
 * @param n_tokens >= 1.
 * @param sampling [in] NULL = greedy; used only when sampled is non-NULL.
 * @param logits   [out] float [vocab] (host) fp32 logits of the last token, or NULL.
 * @param sampled  [out] int32 [1] (host) the token drawn from them, or NULL.
 * @return DSV4_OK;
 *   with no state change: DSV4_ERR_INVALID_ARG (NULL, n_tokens < 1 "empty
 *   prompt", a damaged sequence); DSV4_ERR_UNKNOWN_SEQUENCE; DSV4_ERR_INVALID_TOKEN
 *   (the message gives index and value); DSV4_ERR_CONTEXT_OVERFLOW (length +
 *   n_tokens > max_context); DSV4_KV_FULL (positive: the pools cannot hold
 *   the prompt; free sequences and retry); DSV4_ERR_NOT_FINITE (logits or a
 *   token asked for, and the logits hold NaN or +inf, or no finite value:
 *   the prompt is rolled back);
 *   DSV4_ERR_OUT_OF_MEMORY / DSV4_ERR_INTERNAL during the computation: the
 *   sequence is rolled back to its previous length when its caches allow it,
 *   otherwise it is marked damaged (every later call on it but free fails
 *   with DSV4_ERR_INVALID_ARG); other sequences are unaffected.
 * Message in dsv4_last_error(). @since 0.1
 * Distributed engine: collective (every rank, same arguments); also
 *   DSV4_ERR_RANK_MISMATCH (ranks given other arguments; nothing changed, every rank)
 *   and DSV4_ERR_RANK_FAILED (another rank failed or timed out); outputs on every rank.
 */
DSV4_NODISCARD DSV4_API dsv4_status dsv4_engine_prefill(dsv4_engine *engine, int64_t id, const int32_t *tokens,
                                         int64_t n_tokens, const dsv4_sampling_params *sampling,
                                         float *logits, int32_t *sampled);

/**
 * One decode step for a batch of sequences at any positions: sequence
 * ids[i] takes token tokens[i] at its next position (a generated token:
 * the reference's decode attention row, spec §5.4), and the step returns
 * the next-token logits and/or sampled tokens of every sequence.
 *
 * @param engine  [in,out] Handle-exclusive.
 * @param n_seq   1 .. max_sequences.
 * @param ids     [in] int64 [n_seq] distinct live sequences (host).
 * @param tokens  [in] int32 [n_seq] (host), each in [0, vocab).
 * @param sampling [in] NULL = greedy; used only when sampled is non-NULL.
 * @param logits  [out] float [n_seq][vocab] (host) fp32, batch order, or NULL.
 * @param sampled [out] int32 [n_seq] (host), or NULL.
 * @return DSV4_OK;
 *   with no state change to any sequence (every check is made before any
 *   work): DSV4_ERR_INVALID_ARG (NULL, n_seq out of range, an id twice, a
 *   damaged sequence); DSV4_ERR_UNKNOWN_SEQUENCE; DSV4_ERR_INVALID_TOKEN;
 *   DSV4_ERR_CONTEXT_OVERFLOW (a sequence already holds max_context
 *   positions); DSV4_KV_FULL (positive; free sequences and retry);
 *   DSV4_ERR_NOT_FINITE (a row's logits hold NaN or +inf, or no finite
 *   value: the whole batch is rolled back);
 *   DSV4_ERR_OUT_OF_MEMORY / DSV4_ERR_INTERNAL during the computation: the
 *   batch's sequences are rolled back one position (or marked damaged, as
 *   for prefill). The message names the batch row.
 * @since 0.1
 * Distributed engine: collective (every rank, same arguments); also
 *   DSV4_ERR_RANK_MISMATCH (ranks given other arguments; nothing changed, every rank)
 *   and DSV4_ERR_RANK_FAILED (another rank failed or timed out); outputs on every rank.
 */
DSV4_NODISCARD DSV4_API dsv4_status dsv4_engine_decode(dsv4_engine *engine, int32_t n_seq, const int64_t *ids,
                                        const int32_t *tokens, const dsv4_sampling_params *sampling,
                                        float *logits, int32_t *sampled);

/* ---- timings ------------------------------------------------------------- */

/**
 * Cumulative timings since creation or dsv4_engine_reset_timings(), wall
 * clock in nanoseconds. Size-prefixed output struct (as dsv4_model_info).
 * The *_op_ns fields are filled only with DSV4_ENGINE_F_OP_TIMINGS (else 0).
 * @since 0.1
 */
typedef struct dsv4_engine_timings {
  uint32_t struct_size;      /**< bytes filled (set by dsv4_engine_get_timings) */
  uint32_t op_timings;       /**< 1 when the per-op fields are measured */
  int64_t create_ns;         /**< dsv4_engine_create (model load excluded) */
  int64_t prefill_calls;     /**< dsv4_engine_prefill calls */
  int64_t prefill_tokens;    /**< prompt tokens prefilled, summed over the calls */
  int64_t prefill_ns;        /**< time in dsv4_engine_prefill */
  int64_t last_prefill_ns;   /**< time of the last dsv4_engine_prefill */
  int64_t decode_steps;      /**< dsv4_engine_decode calls */
  int64_t decode_tokens;     /**< sequences stepped, summed over the calls */
  int64_t decode_ns;         /**< time in dsv4_engine_decode */
  int64_t last_decode_ns;    /**< time of the last dsv4_engine_decode */
  int64_t embed_op_ns;       /**< token embedding and HC expansion */
  int64_t engram_op_ns;      /**< Engram lookups and gating */
  int64_t block_op_ns;       /**< the blocks (dsv4_engine_get_layer_time per layer) */
  int64_t head_op_ns;        /**< final norm and head */
  int64_t sample_op_ns;      /**< sampling */
  int64_t read_op_ns;        /**< logits copied back to the caller */
  int64_t host_op_ns;        /**< engine work: checks, Engram hashing, batch assembly */
  int64_t dspark_op_ns;      /**< DSpark ring extension and drafts */
  int64_t draft_calls;       /**< successful dsv4_engine_draft calls */
  int64_t draft_seqs;        /**< sequences drafted, summed over the calls */
  int64_t draft_ns;          /**< time in dsv4_engine_draft */
  int64_t last_draft_ns;     /**< time of the last dsv4_engine_draft */
  int64_t verify_calls;      /**< successful dsv4_engine_verify calls */
  int64_t verify_tokens;     /**< target positions run: 1 + n_drafts per sequence, summed */
  int64_t verify_accepted;   /**< drafts accepted, summed */
  int64_t verify_ns;         /**< time in dsv4_engine_verify */
  int64_t last_verify_ns;    /**< time of the last dsv4_engine_verify */
  int64_t stage_ns;          /**< time this process spent running its layers (the backend's
                              *   step: the whole model for one process, its stage's layers on
                              *   a rank of a distributed engine), in every call; stage_ns /
                              *   decode_ns over decode calls is the stage's busy fraction
                              *   (docs/distributed.md "Overlap"). Host wall time: a device
                              *   backend's step returns once queued (a graph launch), the wait for
                              *   the device falls in the copy of its outputs, outside stage_ns.
                              *   Appended after 0.1: filled when struct_size covers it */
} dsv4_engine_timings;

/**
 * Fill *timings (struct_size as for dsv4_model_get_info).
 * @return DSV4_OK; DSV4_ERR_INVALID_ARG. No state change. Handle-exclusive. @since 0.1
 */
DSV4_NODISCARD DSV4_API dsv4_status dsv4_engine_get_timings(const dsv4_engine *engine,
                                             dsv4_engine_timings *timings, size_t struct_size);

/**
 * Block time of one backbone layer (ns, summed over steps; 0 without
 * DSV4_ENGINE_F_OP_TIMINGS).
 * @return DSV4_OK; DSV4_ERR_INVALID_ARG (NULL, layer outside [0, n_layers)).
 * Handle-exclusive. @since 0.1
 */
DSV4_NODISCARD DSV4_API dsv4_status dsv4_engine_get_layer_time(const dsv4_engine *engine, int32_t layer,
                                                int64_t *ns);

/** Zero every timing (create_ns kept). NULL is a no-op. Handle-exclusive. @since 0.1 */
DSV4_API void dsv4_engine_reset_timings(dsv4_engine *engine);

/* ------------------------------------------------------------------------ */
/* Memory plan: weights, Engram, workspace, KV pool per GPU and host         */
/* (design §5, §6; planner.md)                                              */
/* ------------------------------------------------------------------------ */

/** KV window record formats (dsv4_plan_params.kv_format, dsv4_engine_params.kv_format),
 *  spec §5.8; the record and its measured numeric difference: docs/attention.md "KV formats".
 *  @since 0.1 */
enum {
  DSV4_KV_FORMAT_NATIVE = 0,    /**< 528 B MXFP8 window record: the reference's numerics */
  DSV4_KV_FORMAT_FP8_DS_MLA = 1 /**< 584 B fp8_ds_mla window record (V4's layout, as vLLM's
                                 *   SM80 path and the field report use it; numerics differ) */
};

/** Engram table placement (dsv4_plan_params.engram_placement), design §5. @since 0.1 */
enum {
  DSV4_ENGRAM_HOST = 0,  /**< host pinned memory, a copy on every node of the stage holding the layer */
  DSV4_ENGRAM_DEVICE = 1 /**< GPU memory, table rows split over the stage's TP ranks */
};

/** dsv4_plan_params.flags bits. @since 0.1 */
enum {
  DSV4_PLAN_F_NO_DSPARK = 1u << 0, /**< leave out the DSpark stages: weights, rings, draft/verify graphs */
  DSV4_PLAN_F_NO_VISION = 1u << 1  /**< leave out the vision tower and aligner */
};

/** Capacities of the fixed arrays below. @since 0.1 */
#define DSV4_PLAN_MAX_STAGES 16 /**< entries of dsv4_plan_params.stage_first_layer and dsv4_plan.stages */
#define DSV4_PLAN_MAX_BUCKETS 32 /**< entries of dsv4_plan_params.buckets */
#define DSV4_PLAN_COMPONENTS 16 /**< slots of the by-component arrays (DSV4_COMP_*; unused slots 0) */

/**
 * Topology and serving limits to plan for. Size-prefixed and append-only:
 * fill with dsv4_plan_params_init() (the field report's topology: 2 nodes
 * x 8 GPUs x 40 GiB, TP8 x PP2, native KV records, Engram on the hosts,
 * context 1,048,576) and change fields after.
 * @since 0.1
 */
typedef struct dsv4_plan_params {
  uint32_t struct_size;        /**< sizeof(dsv4_plan_params), set by the init call */
  uint32_t flags;              /**< DSV4_PLAN_F_* bits; default 0 */
  int32_t nodes;               /**< default 2 */
  int32_t gpus_per_node;       /**< default 8; tp x pp must equal nodes x gpus_per_node */
  int32_t tp;                  /**< tensor-parallel ranks per stage (consecutive ranks); default 8 */
  int32_t pp;                  /**< pipeline stages, 1..DSV4_PLAN_MAX_STAGES; default 2 */
  int32_t stage_first_layer[DSV4_PLAN_MAX_STAGES]; /**< first backbone layer of each stage
                                *   (entry 0 is 0); all 0 = automatic: the allowed boundaries
                                *   that balance the stages' weights. A boundary must fall where
                                *   no attention state shared across layers crosses (compressed
                                *   KV, top-k, index keys, candidates, DSpark taps; design §6,
                                *   docs/distributed.md; V4.1: 1, 2, 8, 14, 20) */
  int64_t gpu_mem_bytes;       /**< memory of each GPU; default 40 GiB */
  int64_t gpu_reserved_bytes;  /**< per GPU, never planned: CUDA context, modules, cuBLASLt
                                *   workspace, allocator slack; default 1 GiB */
  int64_t host_mem_bytes;      /**< usable (pinnable) memory per node; default 750 GB */
  int32_t kv_format;           /**< DSV4_KV_FORMAT_*; default NATIVE */
  int32_t engram_placement;    /**< DSV4_ENGRAM_*; default HOST */
  int64_t max_context;         /**< positions per sequence; default 1,048,576 */
  int64_t context;             /**< concurrency is also reported at this context; 0 (default) = max_context */
  int32_t prefill_chunk;       /**< tokens per prefill step (sizes the workspace); default 2048 */
  int32_t draft_tokens;        /**< DSpark drafts verified per step; default 5 */
  int32_t n_buckets;           /**< CUDA-graph decode batch sizes; default 6 */
  int32_t buckets[DSV4_PLAN_MAX_BUCKETS]; /**< ascending; default 1, 2, 4, 8, 16, 32 */
  int64_t graph_bytes;         /**< reserve per captured graph; default 32 MiB */
  int64_t nccl_bytes;          /**< NCCL buffers per GPU when tp > 1; default 384 MiB */
  int32_t kv_page_entries;     /**< records per KV page (per-sequence rounding); 0 = none; default 64 */
  int32_t reserved0;           /**< 0 */
} dsv4_plan_params;

/**
 * Fill *params with the defaults above and set struct_size. Writes exactly
 * struct_size bytes (bytes of fields a newer header added are zeroed).
 * @param params       [out] caller-owned, at least struct_size bytes.
 * @param struct_size  sizeof(dsv4_plan_params) as the caller compiled it.
 * @return DSV4_OK; DSV4_ERR_INVALID_ARG (params NULL); DSV4_ERR_PARAMS_SIZE
 *         (struct_size below the 0.1 size). No state change on failure.
 * Thread-safe. @since 0.1
 */
DSV4_NODISCARD DSV4_API dsv4_status dsv4_plan_params_init(dsv4_plan_params *params, size_t struct_size);

/** dsv4_plan_stage.holds bits. @since 0.1 */
enum {
  DSV4_PLAN_HOLDS_EMBED = 1u << 0,  /**< embed (stage 0; and the DSpark stage, which embeds its block) */
  DSV4_PLAN_HOLDS_HEAD = 1u << 1,   /**< head and final norm (last stage) */
  DSV4_PLAN_HOLDS_DSPARK = 1u << 2, /**< the DSpark stages mtp.* (last stage) */
  DSV4_PLAN_HOLDS_VISION = 1u << 3, /**< vision tower, aligner, image delimiters (stage 0) */
  DSV4_PLAN_HOLDS_ENGRAM = 1u << 4  /**< one or more Engram layers */
};

/**
 * One pipeline stage, with the figures of one of its GPUs: TP rank 0, which
 * holds the largest share where a split leaves a remainder. All sizes in
 * bytes. Fixed layout: never grows (fields are only added to dsv4_plan).
 * @since 0.1
 */
typedef struct dsv4_plan_stage {
  int32_t first_layer;         /**< backbone layers [first_layer, first_layer + n_layers) */
  int32_t n_layers;            /**< backbone layers of the stage */
  int32_t first_node;          /**< nodes its ranks run on: [first_node, first_node + n_nodes) */
  int32_t n_nodes;             /**< nodes of the stage */
  uint32_t holds;              /**< DSV4_PLAN_HOLDS_* */
  int32_t n_engram_layers;     /**< Engram layers of the stage */
  int32_t n_kv_sources;        /**< KV-source layers (the only ones with per-token KV) */
  int32_t reserved0;           /**< 0 */
  int64_t weights[DSV4_PLAN_COMPONENTS]; /**< one GPU, by DSV4_COMP_*, checkpoint form (Engram
                                *   tables only when placed on the device) */
  int64_t replicated[DSV4_PLAN_COMPONENTS]; /**< of weights: held whole by every TP rank */
  int64_t owned[DSV4_PLAN_COMPONENTS]; /**< contract bytes assigned to this stage, each tensor
                                *   to exactly one stage (the stages sum to the checkpoint) */
  int64_t weights_total;       /**< sum of weights */
  int64_t load_extra;          /**< added at load: wo_a dequantised to bf16 (design §5) */
  int64_t workspace;           /**< activations of the largest step (prefill chunk or decode batch) */
  int64_t graphs;              /**< CUDA-graph reserve: buckets x graphs per bucket x graph_bytes */
  int64_t comm_nccl;           /**< NCCL buffers + all-reduce staging (tp > 1) */
  int64_t comm_p2p;            /**< inter-stage payload buffers (pp > 1) */
  int64_t reserved;            /**< gpu_reserved_bytes */
  int64_t used;                /**< everything above */
  int64_t kv_pool;             /**< gpu_mem_bytes - used: the KV pool (negative: does not fit) */
  int64_t engram_bytes;        /**< Engram tables of the stage's layers */
  int64_t engram_host_per_node;/**< host placement: Engram bytes on every node of the stage */
  double kv_bytes_per_token;   /**< compressed + index-key bytes per position on each GPU of
                                *   the stage (KV is replicated over TP), spec §5.8 */
  int64_t kv_fixed_window;     /**< per sequence: window rings, layers x window x record */
  int64_t kv_fixed_dspark;     /**< per sequence: DSpark window rings (last stage) */
  int64_t kv_fixed_compressor; /**< per sequence: ratio-2 compressor state */
  int64_t kv_fixed_per_seq;    /**< the three above */
  int64_t seq_bytes_max_context; /**< one sequence at max_context, pages rounded up */
  int64_t seq_bytes_context;   /**< one sequence at context */
  int64_t token_capacity;      /**< kv_pool / kv_bytes_per_token (fixed parts left out);
                                *   INT64_MAX without per-token KV */
  int64_t seqs_at_context;     /**< sequences at context the pool holds */
  int64_t seqs_at_max_context; /**< sequences at max_context the pool holds */
  int64_t reserved1[8];        /**< 0 */} dsv4_plan_stage;

/**
 * A memory plan. Output struct, size-prefixed: the library fills
 * min(struct_size, its own size) bytes. All sizes in bytes.
 * @since 0.1
 */
typedef struct dsv4_plan {
  uint32_t struct_size;        /**< set by the plan call from its argument */
  int32_t n_stages;            /**< pipeline stages (entries of stages) */
  int32_t tp;                  /**< tensor-parallel ranks per stage */
  int32_t n_gpus;              /**< tp x n_stages */
  int32_t nodes;               /**< nodes, as planned */
  int32_t gpus_per_node;       /**< GPUs per node, as planned */
  int32_t kv_format;           /**< DSV4_KV_FORMAT_* */
  int32_t engram_placement;    /**< DSV4_ENGRAM_* */
  uint32_t flags;              /**< DSV4_PLAN_F_* as planned */
  int32_t reserved0;           /**< 0 */
  int64_t gpu_mem_bytes;       /**< memory of each GPU, as planned */
  int64_t host_mem_bytes;      /**< usable host memory per node, as planned */
  int64_t max_context;         /**< positions per sequence, as planned */
  int64_t context;             /**< as used (0 resolved to max_context) */
  int64_t n_tensors;           /**< tensors of the contract (spec §4.4: 96,085 for V4.1) */
  int64_t checkpoint_bytes;    /**< contract payload (510,286,023,000 for V4.1) */
  int64_t component_bytes[DSV4_PLAN_COMPONENTS]; /**< the contract by DSV4_COMP_* */
  int64_t window_record_bytes; /**< 528 (native) or 584 (fp8_ds_mla) */
  int64_t compressed_record_bytes; /**< 288 */
  int64_t index_key_record_bytes;  /**< 68 */
  double kv_bytes_per_token;   /**< whole model (sum over stages): 890 for V4.1 */
  int64_t kv_fixed_per_seq;    /**< whole model: rings + DSpark rings + compressor state */
  int64_t host_bytes_max;      /**< the node with the most planned host memory (Engram tables
                                *   + pinned staging) */
  int32_t host_node_max;       /**< that node */
  int32_t reserved1;           /**< 0 */
  int64_t token_capacity;      /**< min over stages of token_capacity */
  int64_t seqs_at_context;     /**< min over stages */
  int64_t seqs_at_max_context; /**< min over stages */
  double concurrency_at_max_context; /**< min over stages of kv_pool / seq_bytes_max_context */
  dsv4_plan_stage stages[DSV4_PLAN_MAX_STAGES]; /**< [n_stages] valid */
} dsv4_plan;

/**
 * Plan a model on a topology, without weights: the model may come from
 * dsv4_model_load() with DSV4_MODEL_F_CONFIG_ONLY. Places every tensor of
 * the model's contract on stages and TP ranks (design §6; the rules are in
 * docs/planner.md), adds workspace, graph reserve and communication buffers,
 * and sizes the KV pool from what is left.
 *
 * @param model        [in] Handle-exclusive (only read).
 * @param params       [in] NULL for defaults; the library reads
 *                     min(params->struct_size, its own size) bytes.
 * @param plan         [out] caller-owned, at least struct_size bytes.
 * @param struct_size  sizeof(dsv4_plan) as the caller compiled it
 *                     (at least offsetof(dsv4_plan, stages)).
 * @return DSV4_OK; DSV4_ERR_INVALID_ARG (NULL, a parameter out of range,
 *         tp x pp != nodes x gpus_per_node, stage layers not increasing;
 *         plan untouched); DSV4_ERR_PARAMS_SIZE; DSV4_ERR_UNSUPPORTED (a stage
 *         boundary where shared attention state would cross (the message
 *         names it), more stages than boundaries, TP not dividing the heads,
 *         wo_a groups or expert 32-blocks; plan untouched);
 *         DSV4_ERR_DOES_NOT_FIT (a GPU's weights and buffers pass its memory,
 *         a KV pool cannot hold one sequence at max_context, or a node cannot
 *         hold its Engram tables: the message names each overflow; *plan is
 *         filled, so the figures can be shown; only struct_size is set when a
 *         byte count would pass 2^63); DSV4_ERR_OUT_OF_MEMORY.
 *         Message in dsv4_last_error().
 * @since 0.1
 */
DSV4_NODISCARD DSV4_API dsv4_status dsv4_model_plan(const dsv4_model *model, const dsv4_plan_params *params,
                                     dsv4_plan *plan, size_t struct_size);

/**
 * dsv4_model_plan() on a config.json file alone (nested V4.1 form, spec
 * §2.1), or with config_path NULL on the built-in DeepSeek-V4.1-Flash
 * release config (spec §2.1, embedded in the library).
 * @return as dsv4_model_plan(), plus the statuses of reading and parsing the
 *         config (DSV4_ERR_IO, DSV4_ERR_NOT_FOUND, DSV4_ERR_JSON,
 *         DSV4_ERR_CONFIG_KEY, DSV4_ERR_CONFIG_VALUE). Message in dsv4_last_error().
 * Thread-safe. @since 0.1
 */
DSV4_NODISCARD DSV4_API dsv4_status dsv4_plan_config(const char *config_path, const dsv4_plan_params *params,
                                      dsv4_plan *plan, size_t struct_size);

/* ------------------------------------------------------------------------ */
/* Speculative decoding (DSpark): draft and verify (design §3, spec §6)     */
/* ------------------------------------------------------------------------ */

/*
 * A model with DSpark stages (dsv4_model_info: n_mtp_layers > 0, block size
 * B = dspark_block_size) drafts B tokens per call with its own draft head.
 * On such an engine every step (prefill chunks, decode, verify) also feeds
 * the draft head's window rings, so any sequence holding at least one
 * position can draft, and forks inherit that state. A generation loop:
 *
 *   prefill(id, prompt, &sampling, NULL, &a);          a = the anchor
 *   loop: draft(1, &id, &a, NULL, d, c);               d[0..B): proposals
 *         n = how many to check (1..B, the caller's choice or
 *             dsv4_spec_draft_length(c, B, threshold));
 *         verify(1, &id, &a, &n, d, &sampling, &acc, &next);
 *         emitted this round: d[0..acc) then next;  a = next.
 *
 * The sequence then holds a, d[0..acc) (1 + acc positions more); everything
 * the rejected drafts wrote is rolled back exactly. Greedy verification
 * emits token for token what greedy decoding would; sampled verification
 * emits tokens with exactly the distribution decoding samples from (the
 * standard lossless rejection rule), not the same draws. Every draw is a
 * pure function of (seed, position), so results never depend on the batch,
 * its order, or on how the engine splits the work.
 */

/**
 * DSpark drafts for a batch of sequences (spec §6.1): the block [anchor,
 * noise x (B - 1)] after each sequence's last position through the draft
 * head gives B proposals for the positions after the anchor, sampled left to
 * right from the head's logits (greedy, or at sampling->temperature), and B
 * confidence logits (sigmoid(confidence[k]) estimates the chance that
 * proposal k + 1 is accepted when proposals 1..k were).
 *
 * @param engine   [in,out] Handle-exclusive.
 * @param n_seq    1 .. max_sequences.
 * @param ids      [in] int64 [n_seq] distinct live sequences (host), each holding
 *                 at least one position.
 * @param anchors  [in] int32 [n_seq] (host): the token each sequence takes next
 *                 (sampled from its last logits, not yet fed), in [0, vocab).
 * @param sampling [in] NULL or temperature <= 0: greedy proposals; otherwise
 *                 sampled with the seeds (streams separate from decoding's). The
 *                 draft distribution is kept per sequence until its next verify,
 *                 which then uses it in the acceptance ratio.
 * @param drafts   [out] int32 [n_seq][B] (host), batch order.
 * @param confidence [out] float [n_seq][B] (host) raw confidence logits, or NULL.
 * @return DSV4_OK; with no state change: DSV4_ERR_INVALID_ARG (NULL, n_seq out
 *         of range, an id twice, an empty or damaged sequence);
 *         DSV4_ERR_UNKNOWN_SEQUENCE; DSV4_ERR_INVALID_TOKEN (an anchor);
 *         DSV4_ERR_UNSUPPORTED (the model has no DSpark stages, or the backend
 *         cannot draft); DSV4_ERR_NOT_FINITE (draft logits hold NaN or +inf,
 *         or no finite value); DSV4_ERR_OUT_OF_MEMORY. Drafting never changes a
 *         sequence's positions or caches.
 * @since 0.1
 * Distributed engine: collective (every rank, same arguments); also
 *   DSV4_ERR_RANK_MISMATCH (ranks given other arguments; nothing changed, every rank)
 *   and DSV4_ERR_RANK_FAILED (another rank failed or timed out); outputs on every rank.
 */
DSV4_NODISCARD DSV4_API dsv4_status dsv4_engine_draft(dsv4_engine *engine, int32_t n_seq, const int64_t *ids,
                                       const int32_t *anchors,
                                       const dsv4_sampling_params *sampling, int32_t *drafts,
                                       float *confidence);

/**
 * Verify proposals for a batch of sequences (spec §6.2): the model runs on
 * [anchor, d_1 .. d_n] of every sequence (n = n_drafts[i]) as generated
 * tokens, and accepts by the standard lossless rule:
 * - greedy (sampling NULL or temperature <= 0): the longest prefix of
 *   proposals equal to the model's argmax, then the model's own token at the
 *   first mismatch, or after all n its next token;
 * - temperature > 0: proposal k is accepted with probability min(1, p(d_k) /
 *   q(d_k)), p the model's distribution (softmax(logits / T)), q the draft
 *   distribution (one-hot unless these proposals are exactly the sequence's
 *   last sampled dsv4_engine_draft output); at the first rejection the token
 *   is drawn from norm(max(0, p - q)); after n acceptances the next token is
 *   drawn from p exactly as dsv4_engine_decode() would draw it.
 * Each sequence keeps anchor + accepted proposals (1 + n_accepted[i] positions
 * more); everything the rejected ones wrote is rolled back.
 *
 * @param engine     [in,out] Handle-exclusive.
 * @param n_seq      1 .. max_sequences.
 * @param ids        [in] int64 [n_seq] distinct live sequences (host).
 * @param anchors    [in] int32 [n_seq] (host), in [0, vocab).
 * @param n_drafts   [in] int32 [n_seq] (host), each 0 .. B (0: a plain decode step).
 * @param drafts     [in] int32 [n_seq][B] (host; row i: the first n_drafts[i]
 *                   are used), as dsv4_engine_draft() wrote them; NULL when every
 *                   n_drafts is 0.
 * @param sampling   [in] NULL = greedy.
 * @param n_accepted [out] int32 [n_seq] (host): proposals accepted, 0 .. n_drafts[i].
 * @param next_tokens [out] int32 [n_seq] (host): the model's token after them
 *                   (not yet fed: the next anchor).
 * @return DSV4_OK;
 *   with no state change: DSV4_ERR_INVALID_ARG (NULL, n_seq out of range, an id
 *   twice, n_drafts outside 0..B, a damaged sequence); DSV4_ERR_UNKNOWN_SEQUENCE;
 *   DSV4_ERR_INVALID_TOKEN; DSV4_ERR_CONTEXT_OVERFLOW (length + 1 + n_drafts
 *   passes max_context); DSV4_ERR_UNSUPPORTED (as dsv4_engine_draft);
 *   DSV4_KV_FULL (positive; free sequences and retry); DSV4_ERR_NOT_FINITE
 *   (a target row's logits hold NaN or +inf, or no finite value: every
 *   sequence rolled back);
 *   DSV4_ERR_OUT_OF_MEMORY / DSV4_ERR_INTERNAL during the computation: the
 *   batch's sequences are rolled back to their previous lengths (or marked
 *   damaged, as for dsv4_engine_prefill()).
 * @since 0.1
 * Distributed engine: collective (every rank, same arguments); also
 *   DSV4_ERR_RANK_MISMATCH (ranks given other arguments; nothing changed, every rank)
 *   and DSV4_ERR_RANK_FAILED (another rank failed or timed out); outputs on every rank.
 */
DSV4_NODISCARD DSV4_API dsv4_status dsv4_engine_verify(dsv4_engine *engine, int32_t n_seq, const int64_t *ids,
                                        const int32_t *anchors, const int32_t *n_drafts,
                                        const int32_t *drafts,
                                        const dsv4_sampling_params *sampling,
                                        int32_t *n_accepted, int32_t *next_tokens);

/**
 * A documented draft-length policy from the confidence logits of one
 * sequence: with a_j = prod_{k < j} sigmoid(confidence[k]) the estimated
 * chance that proposals 1..j all survive (a_0 = 1), the largest j in 0..n
 * with a_j >= min_survival. (Expected accepted proposals for length j are
 * a_1 + ... + a_j; a lower min_survival verifies more.)
 * @param confidence [in] float [n] from dsv4_engine_draft() (one row).
 * @param n          proposals available (B), >= 0.
 * @param min_survival in [0, 1].
 * @return j in 0..n; 0 when confidence is NULL or n <= 0.
 * Thread-safe. @since 0.1
 */
DSV4_API int32_t dsv4_spec_draft_length(const float *confidence, int32_t n, float min_survival);

/* ------------------------------------------------------------------------ */
/* Scheduler: continuous batching of requests (docs/serving.md)              */
/* ------------------------------------------------------------------------ */

/**
 * A request scheduler over one engine: requests are submitted with their
 * prompt ids and sampling parameters; each dsv4_scheduler_step() feeds every
 * running request one token and prefills waiting prompts in chunks of
 * prefill_chunk tokens while the step's token_budget lasts, oldest request
 * first, all in one engine batch; tokens reach the caller by callback or
 * dsv4_scheduler_poll(). A prompt is always cut at the same chunk
 * boundaries and every draw is a pure function of (seed, position), so a
 * request's tokens are the same whatever else runs and whatever the arrival
 * order. The scheduler owns engine sequences while it runs (create it on an
 * engine with no other users). Opaque. Handle-exclusive, like its engine.
 * @since 0.1
 */
typedef struct dsv4_scheduler dsv4_scheduler;

/** Most alternatives a token event can carry (dsv4_request_params.n_logprobs). @since 0.1 */
#define DSV4_MAX_LOGPROBS 20

/** Why a request ended (dsv4_token_event.finish, dsv4_scheduler_poll). @since 0.1 */
enum {
  DSV4_FINISH_NONE = 0,   /**< still running */
  DSV4_FINISH_STOP = 1,   /**< end of sentence, a stop id or a stop string */
  DSV4_FINISH_LENGTH = 2, /**< max_tokens, or the engine's max_context */
  DSV4_FINISH_ERROR = 3   /**< the engine failed on its batch (the step returned the status) */
};

/** dsv4_request_params.flags bits. @since 0.1 */
enum {
  DSV4_REQUEST_F_IGNORE_EOS = 1u << 0 /**< do not stop at the end-of-sentence id */
};

/**
 * One generated token. Borrowed by the callback for the duration of the call.
 * @since 0.1
 */
typedef struct dsv4_token_event {
  uint32_t struct_size;      /**< sizeof as this library filled it */
  int32_t token;             /**< the id, in [0, vocab) */
  int64_t position;          /**< its position in the sequence (prompt length for the first) */
  int32_t finish;            /**< DSV4_FINISH_*: non-zero on the request's last event */
  float logprob;             /**< log-softmax of the model's raw logits at token */
  int32_t n_top;             /**< n_logprobs alternatives, most likely first (ties: lower id) */
  int32_t reserved0;         /**< 0 */
  const int32_t *top_ids;    /**< [n_top] */
  const float *top_logprobs; /**< [n_top], as logprob */
  const char *text;          /**< with a tokenizer: UTF-8 text this token completes, minus
                              *   text held back while it may begin a stop string (released
                              *   later, or cut at a matching stop string); NULL without one */
  size_t text_len;           /**< bytes of text */
} dsv4_token_event;

/** Token callback: the request id, the event, the user pointer. Called inside
 *  dsv4_scheduler_step() on its thread; it must not call the scheduler. @since 0.1 */
typedef void (*dsv4_token_fn)(int64_t request, const dsv4_token_event *event, void *user_data);

/**
 * Per-request limits and sampling (docs/serving.md, "Sampling"). Size-prefixed,
 * append-only: fill with dsv4_request_params_init(). Arrays are copied at submit.
 * @since 0.1
 */
typedef struct dsv4_request_params {
  uint32_t struct_size;       /**< sizeof, set by the init call */
  float temperature;          /**< <= 0: greedy; default 0 */
  int32_t top_k;              /**< keep the k most likely; 0 = off (default) */
  float top_p;                /**< keep the most likely whose mass reaches top_p; (0, 1], default 1 */
  float min_p;                /**< keep p >= min_p x max p; [0, 1], default 0 */
  float repetition_penalty;   /**< prompt and output tokens: logit / r if > 0 else x r; > 0, default 1 */
  float presence_penalty;     /**< minus this once per output token seen; default 0 */
  float frequency_penalty;    /**< minus this x its output count; default 0 */
  uint64_t seed;              /**< noise seed; default 0 */
  int32_t max_tokens;         /**< tokens to generate, >= 1; default 256 */
  int32_t n_logprobs;         /**< alternatives per event, 0..DSV4_MAX_LOGPROBS; default 0 */
  uint32_t flags;             /**< DSV4_REQUEST_F_*; default 0 */
  int32_t n_stop_ids;         /**< ids that end the request (the id is emitted); default 0 */
  const int32_t *stop_ids;    /**< [n_stop_ids] */
  int32_t n_stop;             /**< stop strings (need a tokenizer); default 0 */
  const char *const *stop;    /**< [n_stop] non-empty UTF-8, matched across token boundaries in
                               *   the decoded text; the request ends at the token completing a
                               *   match and its text stops before the match */
  int32_t n_logit_bias;       /**< default 0 */
  const int32_t *logit_bias_ids; /**< [n_logit_bias] ids in [0, vocab) */
  const float *logit_bias;    /**< [n_logit_bias] added to the logits before everything else */
  dsv4_token_fn on_token;     /**< NULL: tokens are buffered for dsv4_scheduler_poll() */
  void *user_data;            /**< passed to on_token */
  int32_t speculative;        /**< DSpark speculative decoding (docs/serving.md, "Speculative
                               *   decoding"): 0 = off (default); n > 0 = up to min(n, the
                               *   model's dspark_block_size) drafts per step, verified in the
                               *   step's batch against the processed distribution above. The
                               *   tokens, logprobs, stops and finish are exactly those without
                               *   it (greedy or sampled, same seed); only the steps they take
                               *   differ. Needs an engine whose model and backend have the
                               *   DSpark head (submit: DSV4_ERR_UNSUPPORTED otherwise).
                               *   @since 0.1 */
} dsv4_request_params;

/**
 * Fill *params with the defaults above and set struct_size.
 * @return DSV4_OK; DSV4_ERR_INVALID_ARG (NULL); DSV4_ERR_PARAMS_SIZE. Thread-safe. @since 0.1
 */
DSV4_NODISCARD DSV4_API dsv4_status dsv4_request_params_init(dsv4_request_params *params, size_t struct_size);

/** Scheduler limits. Size-prefixed, append-only: fill with dsv4_scheduler_params_init(). @since 0.1 */
typedef struct dsv4_scheduler_params {
  uint32_t struct_size;  /**< sizeof, set by the init call */
  int32_t max_running;   /**< requests holding a sequence at once; 0 (default) = the engine's
                          *   max_sequences; at most that */
  int32_t prefill_chunk; /**< prompt tokens per chunk; default 256. A chunk of at least the
                          *   model's sliding window (128) rounds exactly as one prefill call
                          *   of the whole prompt (the attention row layout depends only on
                          *   where the call ends up to the window) */
  int32_t token_budget;  /**< tokens per step (decodes + chunks); 0 (default) = prefill_chunk +
                          *   max_running, the least that always leaves room for one chunk */
  int32_t max_waiting;   /**< submitted requests not yet finished, beyond which submit refuses;
                          *   default 1024 */
  int32_t prefix_cache;  /**< finished requests' sequences kept for prefix reuse, 0..max_sequences;
                          *   default 0 (off). A request whose prompt starts with everything a
                          *   kept sequence holds starts from a fork of it and prefills only the
                          *   rest (the reused positions keep the rounding of how they were
                          *   computed: decode rows for generated tokens). Kept sequences count
                          *   against the engine's max_sequences and KV pool; the least recently
                          *   used one is freed when the cache is full, when a request needs a
                          *   sequence or KV pages, or when the engine refuses a step */
} dsv4_scheduler_params;

/** Fill *params with defaults. @return DSV4_OK; DSV4_ERR_INVALID_ARG; DSV4_ERR_PARAMS_SIZE.
 *  Thread-safe. @since 0.1 */
DSV4_NODISCARD DSV4_API dsv4_status dsv4_scheduler_params_init(dsv4_scheduler_params *params, size_t struct_size);

/**
 * Create a scheduler.
 * @param engine  [in,out] Borrowed; must outlive the scheduler.
 * @param tok     [in] the model's tokenizer for token text and stop strings, or NULL. Borrowed.
 * @param params  [in] NULL = defaults.
 * @param out     [out] the scheduler, NULL on failure.
 * @return DSV4_OK; DSV4_ERR_INVALID_ARG (NULL, a limit out of range, token_budget
 *         below prefill_chunk + max_running, tok's vocabulary larger than the model's);
 *         DSV4_ERR_PARAMS_SIZE; DSV4_ERR_OUT_OF_MEMORY. Every scheduler call leaves its
 *         message in dsv4_last_error() when it fails.
 *         Handle-exclusive (engine). A distributed engine (dsv4_engine_params.mpi_comm):
 *         every rank creates a scheduler over its engine and drives it with the same
 *         calls in the same order (submit, step, cancel, poll, with the same arguments);
 *         dsv4_scheduler_step is then collective, its engine steps run over the
 *         pipeline and every rank gets the same tokens (ranks given other calls get
 *         DSV4_ERR_RANK_MISMATCH from the step; docs/distributed.md "The scheduler").
 *         @since 0.1
 */
DSV4_NODISCARD DSV4_API dsv4_status dsv4_scheduler_create(dsv4_engine *engine, const dsv4_tokenizer *tok,
                                           const dsv4_scheduler_params *params,
                                           dsv4_scheduler **out);

/** Cancel every request, free their sequences and the scheduler. NULL is a no-op. @since 0.1 */
DSV4_API void dsv4_scheduler_free(dsv4_scheduler *sched);

/**
 * Queue a request. Nothing runs until dsv4_scheduler_step().
 * @param sched    [in,out] Handle-exclusive.
 * @param prompt   [in] int32 [n_prompt] ids in [0, vocab) (host), copied.
 * @param n_prompt >= 1.
 * @param params   [in] NULL = defaults (greedy, 256 tokens).
 * @param request  [out] the request id (> 0, never reused).
 * @return DSV4_OK; with nothing queued: DSV4_ERR_INVALID_ARG (NULL, an empty
 *         prompt, a parameter out of range: the message names it, stop strings
 *         without a tokenizer); DSV4_ERR_UNSUPPORTED (speculative > 0 on an engine
 *         without the DSpark head); DSV4_ERR_INVALID_TOKEN; DSV4_ERR_CONTEXT_OVERFLOW
 *         (n_prompt + 1 passes max_context: it could never run);
 *         DSV4_KV_FULL (positive: max_waiting requests are queued or running; retry
 *         later); DSV4_ERR_PARAMS_SIZE; DSV4_ERR_OUT_OF_MEMORY. @since 0.1
 */
DSV4_NODISCARD DSV4_API dsv4_status dsv4_scheduler_submit(dsv4_scheduler *sched, const int32_t *prompt,
                                           int64_t n_prompt, const dsv4_request_params *params,
                                           int64_t *request);

/**
 * One step: one engine batch holding a decode row of every running request and
 * prompt chunks of waiting requests in arrival order while the budget lasts
 * (more batches only when the engine's batch, max(prefill_chunk, max_sequences)
 * of the engine, is smaller than the budget; docs/serving.md). A speculative request's
 * row also carries its drafts, within what the budget, the engine's batch and its
 * max_sequences logits rows leave after the decode rows and chunks. A request is admitted
 * when a sequence is free and the engine's KV pools take its chunk; otherwise
 * it waits, and so do the requests behind it. Finished requests give their
 * sequence back at once.
 * @param sched    [in,out] Handle-exclusive.
 * @param n_active [out] requests still queued or running after the step, or NULL.
 * @return DSV4_OK; DSV4_ERR_INVALID_ARG (NULL); an engine error (DSV4_ERR_OUT_OF_MEMORY,
 *         DSV4_ERR_INTERNAL, device errors): the requests of the failed batch end with
 *         DSV4_FINISH_ERROR, the others are intact and the next step continues them.
 * @since 0.1
 */
DSV4_NODISCARD DSV4_API dsv4_status dsv4_scheduler_step(dsv4_scheduler *sched, int32_t *n_active);

/**
 * Cancel a request at any stage: its sequence and buffers are freed at once
 * and no callback follows; the id is invalid afterwards.
 * @return DSV4_OK; DSV4_ERR_UNKNOWN_SEQUENCE (no such request: never submitted,
 *         finished and delivered, or cancelled); DSV4_ERR_INVALID_ARG (NULL). @since 0.1
 */
DSV4_NODISCARD DSV4_API dsv4_status dsv4_scheduler_cancel(dsv4_scheduler *sched, int64_t request);

/**
 * Poll-mode output (a request without on_token): move up to cap buffered
 * tokens into tokens[0 .. *n). *finish is the finish reason once the request
 * ended and every token has been taken; the request is then released and its
 * id invalid. (Callback-mode requests are released after their last event.)
 * @return DSV4_OK; DSV4_ERR_UNKNOWN_SEQUENCE; DSV4_ERR_INVALID_ARG (NULL, cap < 0,
 *         a callback-mode request). @since 0.1
 */
DSV4_NODISCARD DSV4_API dsv4_status dsv4_scheduler_poll(dsv4_scheduler *sched, int64_t request, int32_t *tokens,
                                         int32_t cap, int32_t *n, int32_t *finish);

/** Counters (size-prefixed output struct, as dsv4_model_info). @since 0.1 */
typedef struct dsv4_scheduler_stats {
  uint32_t struct_size;      /**< bytes filled */
  int32_t waiting;           /**< queued, no sequence yet, or prompt not fully prefilled */
  int32_t running;           /**< decoding */
  int32_t reserved0;         /**< 0 */
  int64_t submitted;         /**< requests accepted by submit */
  int64_t finished;          /**< requests that ended (any finish reason) */
  int64_t cancelled;         /**< requests cancelled before they ended */
  int64_t steps;             /**< dsv4_scheduler_step calls */
  int64_t decode_tokens;     /**< tokens fed by decodes */
  int64_t prefill_tokens;    /**< prompt tokens prefilled */
  int64_t max_step_tokens;   /**< largest decode + prefill tokens of one step */
  int64_t prefix_hits;       /**< requests started from a kept sequence */
  int64_t prefix_misses;     /**< requests admitted without one (only counted with prefix_cache > 0) */
  int64_t prefix_tokens_reused; /**< prompt tokens not prefilled thanks to a hit */
  int64_t prefix_evictions;  /**< kept sequences freed to make room */
  int32_t prefix_entries;    /**< sequences kept now */
  int32_t reserved1;         /**< 0 */
  int64_t spec_drafted;      /**< drafts verified (speculative requests) */
  int64_t spec_accepted;     /**< of those, accepted: each saved a step of its request */
  int64_t spec_fallbacks;    /**< steps whose drafts were dropped: the draft call failed, the KV
                              *   pools refused the verify rows, or the batch failed with them
                              *   and ran again without (the requests saw nothing) */
} dsv4_scheduler_stats;

/** @return DSV4_OK; DSV4_ERR_INVALID_ARG (NULL, struct_size too small). @since 0.1 */
DSV4_NODISCARD DSV4_API dsv4_status dsv4_scheduler_get_stats(const dsv4_scheduler *sched,
                                              dsv4_scheduler_stats *stats, size_t struct_size);

#ifdef __cplusplus
}
#endif

#endif /* DSV4_H */
