/*
 * libdsv4 — inference engine for DeepSeek-V4.1-Flash.
 *
 * The one stable public header. It compiles alone as C99, C11 and C++11 and
 * uses no vendor types: CUDA streams and MPI communicators cross as void *.
 *
 * Conventions used in every comment below:
 *  - Shapes are row-major [dim0][dim1] with named dims, then dtype and memory
 *    space (host unless said otherwise).
 *  - Thread-safety classes: "thread-safe" (any thread, any time),
 *    "handle-exclusive" (one thread at a time per handle, may migrate),
 *    "global-init" (call before creating handles, not thread-safe).
 *  - Every fallible call returns dsv4_status; on an error, out-handles are set
 *    to NULL and the call says which state it leaves. The message of the last
 *    failed call is dsv4_last_error() (calls without a handle, thread-local)
 *    or dsv4_model_last_error() (calls on a model handle).
 *  - Numerics cite ../docs model-spec.md sections as "spec §N".
 */
#ifndef DSV4_H
#define DSV4_H

#include <stddef.h>
#include <stdint.h>

#include "dsv4/dsv4_version.h"

#if defined(_WIN32)
#define DSV4_API
#elif defined(__GNUC__) && __GNUC__ >= 4
#define DSV4_API __attribute__((visibility("default")))
#else
#define DSV4_API
#endif

#if defined(__GNUC__)
#define DSV4_DEPRECATED(msg) __attribute__((deprecated(msg)))
#else
#define DSV4_DEPRECATED(msg)
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
  DSV4_OK = 0,

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
  DSV4_ERR_ST_OFFSETS = -23,        /**< data_offsets malformed or outside the data area */
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

  /* devices */
  DSV4_ERR_NO_DEVICE = -70,         /**< no NVIDIA driver, no GPU, or the device index is out of range */
  DSV4_ERR_DEVICE = -71,            /**< a driver, cuBLASLt or NCCL call failed (its name and code in the message) */
  DSV4_ERR_DEVICE_LOST = -72        /**< the GPU context is poisoned; the handle is sticky-failed, free it */
};

/**
 * Static English text for a status, e.g. "DSV4_ERR_ST_OVERLAP: tensor byte
 * ranges overlap". Never NULL; unknown values give "unknown status".
 * Thread-safe. @since 0.1
 */
DSV4_API const char *dsv4_status_string(dsv4_status status);

/**
 * Message of the last failed call made on this thread without a handle
 * (dsv4_model_load, dsv4_backend_probe, ...). Names the file, tensor or key
 * involved. Borrowed: valid until the next libdsv4 call on this thread.
 * "" when the last such call succeeded. Thread-safe (thread-local). @since 0.1
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
enum { DSV4_LOG_ERROR = 0, DSV4_LOG_WARN = 1, DSV4_LOG_INFO = 2, DSV4_LOG_DEBUG = 3 };

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
enum { DSV4_BACKEND_AUTO = 0, DSV4_BACKEND_CPU = 1, DSV4_BACKEND_CUDA = 2 };

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
DSV4_API dsv4_status dsv4_backend_probe(int32_t backend, int32_t device);

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
DSV4_API dsv4_status dsv4_model_params_init(dsv4_model_params *params, size_t struct_size);

/**
 * Open a checkpoint directory in the official release format: config.json
 * (nested V4.1 config, spec §2.1), model.safetensors.index.json and its
 * shards (or a single model.safetensors), spec §4. Every shard header is
 * validated, every tensor is resolved, and the tensor set is checked against
 * the contract the config implies (spec §4.2); all differences are reported
 * in one message. Shards are mmapped read-only; no weight is copied.
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
DSV4_API dsv4_status dsv4_model_load(const char *dir, const dsv4_model_params *params,
                                     dsv4_model **out);

/** Release a model and unmap its shards. NULL is a no-op. Handle-exclusive. @since 0.1 */
DSV4_API void dsv4_model_free(dsv4_model *model);

/**
 * Message of the most recent failed call on this model handle (kept until
 * another call on it fails; successful calls leave it); "" if none failed or
 * model is NULL. The same text is in dsv4_last_error() right after the call.
 * Borrowed: valid until the next call on the handle. Handle-exclusive. @since 0.1
 */
DSV4_API const char *dsv4_model_last_error(const dsv4_model *model);

/**
 * Model facts. Size-prefixed output struct: set struct_size (or use
 * dsv4_model_get_info, which sets it from its argument) and the library
 * fills min(struct_size, its own size) bytes.
 * @since 0.1
 */
typedef struct dsv4_model_info {
  uint32_t struct_size;
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
  int32_t bos_token_id, eos_token_id, pad_token_id;
  int32_t image_token_id, dspark_noise_token_id;
  int32_t dspark_block_size;
  int32_t reserved0;
  int64_t max_position_embeddings;
  int64_t n_tensors;           /**< tensors in the table (checkpoint, or contract with CONFIG_ONLY) */
  int64_t payload_bytes;       /**< sum of their byte sizes */
} dsv4_model_info;

/**
 * Fill *info. @param info [out] caller-owned; struct_size = sizeof as compiled
 * (at least the 0.1 size). Bytes past the library's size are zeroed and
 * info->struct_size is set to the number of bytes filled.
 * @return DSV4_OK; DSV4_ERR_INVALID_ARG (NULL, or struct_size too small). No state change.
 * Handle-exclusive. @since 0.1
 */
DSV4_API dsv4_status dsv4_model_get_info(const dsv4_model *model, dsv4_model_info *info,
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
  uint32_t struct_size;
  int32_t layer;
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
 * Fill *info for one layer. @param layer 0 .. n_layers + n_mtp_layers - 1.
 * struct_size as for dsv4_model_get_info.
 * @return DSV4_OK; DSV4_ERR_INVALID_ARG (NULL, layer out of range, struct_size too small).
 * No state change. Handle-exclusive. @since 0.1
 */
DSV4_API dsv4_status dsv4_model_get_layer(const dsv4_model *model, int32_t layer,
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
  uint32_t struct_size;
  int32_t dtype;             /**< DSV4_DTYPE_* */
  int32_t ndim;              /**< 0..4 */
  int32_t component;         /**< DSV4_COMP_* */
  int32_t shard;             /**< 0-based shard index; -1 in a CONFIG_ONLY model */
  int32_t reserved0;
  int64_t shape[4];          /**< first ndim entries valid */
  int64_t nbytes;            /**< payload bytes */
  const char *name;          /**< checkpoint name; borrowed, valid for the model's lifetime */
} dsv4_tensor_info;

/**
 * Fill *info for tensor i (0 .. n_tensors-1, sorted by name with strcmp).
 * struct_size as for dsv4_model_get_info. The table is the config's tensor
 * contract, which a loaded checkpoint matches exactly (spec §4.2).
 * @return DSV4_OK; DSV4_ERR_INVALID_ARG (NULL, i out of range, struct_size too small).
 * No state change. Handle-exclusive. @since 0.1
 */
DSV4_API dsv4_status dsv4_model_get_tensor(const dsv4_model *model, int64_t i,
                                           dsv4_tensor_info *info, size_t struct_size);

/* ------------------------------------------------------------------------ */
/* Tokenizer: Hugging Face tokenizer.json, byte-level BPE (spec §5.0)       */
/* ------------------------------------------------------------------------ */

/**
 * A loaded tokenizer.json (+ tokenizer_config.json). Opaque. Its ids equal
 * those of the Rust `tokenizers` library's encode(text,
 * add_special_tokens=False): added/special tokens are matched in the text
 * before pre-tokenization, so markers such as <｜User｜> never split. Nothing
 * is added around the text: a prompt that needs BOS gets it from the caller
 * (dsv4_tokenizer_special_id(tok, DSV4_TOKEN_BOS)).
 * After load the tokenizer itself never changes; only its last-error slot does.
 * @since 0.1
 */
typedef struct dsv4_tokenizer dsv4_tokenizer;

/** Special-token kinds for dsv4_tokenizer_special_id(). @since 0.1 */
enum {
  DSV4_TOKEN_BOS = 0,         /**< tokenizer_config bos_token, else <｜begin▁of▁sentence｜> */
  DSV4_TOKEN_EOS = 1,         /**< tokenizer_config eos_token, else <｜end▁of▁sentence｜> */
  DSV4_TOKEN_PAD = 2,         /**< tokenizer_config pad_token, else <｜▁pad▁｜> */
  DSV4_TOKEN_IMAGE = 3,       /**< tokenizer_config image_token, else <｜deepseek_image｜>, <｜image｜> or <image> */
  DSV4_TOKEN_DSPARK_NOISE = 4 /**< tokenizer_config dspark_noise_token, else <｜dspark▁noise｜> */
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
DSV4_API dsv4_status dsv4_tokenizer_load(const char *dir, dsv4_tokenizer **out);

/** Release a tokenizer. NULL is a no-op. No stream of it may be used afterwards. Handle-exclusive. @since 0.1 */
DSV4_API void dsv4_tokenizer_free(dsv4_tokenizer *tok);

/**
 * Message of the last failed call on this tokenizer; "" if none.
 * Borrowed: valid until the next call on the handle. Handle-exclusive. @since 0.1
 */
DSV4_API const char *dsv4_tokenizer_last_error(const dsv4_tokenizer *tok);

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
 *         untouched. Message in dsv4_tokenizer_last_error().
 * @since 0.1
 */
DSV4_API dsv4_status dsv4_tokenizer_encode(dsv4_tokenizer *tok, const char *text, size_t len,
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
 * @param flags  DSV4_DECODE_F_* bits.
 * @param text   [out] char[cap] (host), or NULL to measure.
 * @param len    [out] bytes written or needed, terminator excluded.
 * @return DSV4_OK; DSV4_ERR_INVALID_ARG (NULL, unknown flags, cap too small);
 *         DSV4_ERR_INVALID_TOKEN (a negative id; nothing written);
 *         DSV4_ERR_OUT_OF_MEMORY. Message in dsv4_tokenizer_last_error().
 * @since 0.1
 */
DSV4_API dsv4_status dsv4_tokenizer_decode(dsv4_tokenizer *tok, const int32_t *ids, size_t n_ids,
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
DSV4_API dsv4_status dsv4_tokenizer_stream_create(const dsv4_tokenizer *tok, uint32_t flags,
                                                  dsv4_tokenizer_stream **out);

/** Release a stream (held-back bytes are dropped). NULL is a no-op. Handle-exclusive. @since 0.1 */
DSV4_API void dsv4_tokenizer_stream_free(dsv4_tokenizer_stream *st);

/**
 * Push one id.
 * @param st    [in,out] Handle-exclusive.
 * @param text  [out] the newly completed text (maybe ""), NUL-terminated; borrowed,
 *              valid until the next call on st.
 * @param len   [out] its length in bytes (may include NUL bytes).
 * @return DSV4_OK; DSV4_ERR_INVALID_ARG (NULL); DSV4_ERR_INVALID_TOKEN (negative id;
 *         no state change); DSV4_ERR_OUT_OF_MEMORY (the id's bytes may be lost).
 *         Message in dsv4_last_error(). @since 0.1
 */
DSV4_API dsv4_status dsv4_tokenizer_stream_push(dsv4_tokenizer_stream *st, int32_t id,
                                                const char **text, size_t *len);

/**
 * Emit everything held back (incomplete UTF-8 as U+FFFD) and start over, as
 * after create. Outputs as for push. @return DSV4_OK; DSV4_ERR_INVALID_ARG;
 * DSV4_ERR_OUT_OF_MEMORY. Handle-exclusive. @since 0.1
 */
DSV4_API dsv4_status dsv4_tokenizer_stream_flush(dsv4_tokenizer_stream *st, const char **text,
                                                 size_t *len);

#ifdef __cplusplus
}
#endif

#endif /* DSV4_H */
