/*
 * Model configuration (config.json, nested V4.1 form, spec §2.1), the
 * derived per-layer role table (spec §2.3) and the tensor contract (spec
 * §4.2): the exact tensor set a config requires.
 */
#ifndef DSV4I_CONFIG_H
#define DSV4I_CONFIG_H

#include <stddef.h>
#include <stdint.h>

#include "base/base.h"
#include "model/kv_ds_mla.h"

#define DSV4I_MAX_LIST 64      /* longest id list (layer lists, compress_ratios) */
#define DSV4I_MAX_ENGRAM 8

typedef struct dsv4i_layer_role {
  int32_t compress_ratio;      /* 0, 1, 2 */
  uint32_t roles;              /* DSV4_ROLE_* */
  int32_t kv_source;           /* ratio > 0: latest KV source <= layer (itself for a KV source); else -1 */
  int32_t index_source;        /* ratio > 0: latest index source <= layer (itself for one); else -1 */
  int32_t index_key_source;    /* index source: itself if it owns keys, else the latest KV source
                                * (the candidate source in V4.1); -1 for other layers */
  int32_t candidate_source;    /* candidate-masked index source: the candidate layer; else -1 */
  int32_t engram_slot;         /* index into engram lists, or -1 */
  int32_t rope_yarn;           /* 1 for ratio > 0 */
} dsv4i_layer_role;

typedef struct dsv4i_config {
  /* root */
  int32_t bos_token_id, eos_token_id, pad_token_id, image_token_id;
  int32_t has_vision;          /* vision_config present */
  /* text_config */
  int32_t vocab_size, dim, n_layers, n_heads, n_kv_heads, head_dim, rope_head_dim;
  int32_t q_lora_rank, o_lora_rank, o_groups;
  float swiglu_limit;
  float norm_eps;              /* rms_norm_eps */
  int64_t max_position_embeddings;
  float rope_theta, compress_rope_theta;
  float rope_factor, beta_fast, beta_slow;
  int64_t original_seq_len;    /* rope_scaling.original_max_position_embeddings */
  int32_t n_routed_experts, n_shared_experts, n_experts_per_tok, moe_inter_dim;
  float route_scale;           /* routed_scaling_factor */
  int32_t norm_topk_prob;
  int32_t window_size;         /* sliding_window */
  int32_t n_compress_ratios;   /* n_layers + n_mtp_layers */
  int32_t compress_ratios[DSV4I_MAX_LIST];
  int32_t n_kv_sources, kv_sources[DSV4I_MAX_LIST];
  int32_t n_index_sources, index_sources[DSV4I_MAX_LIST];
  int32_t index_n_heads, index_head_dim, index_topk;
  int32_t candidate_source;    /* -1 if absent */
  int32_t candidate_topk_blocks, candidate_block_size;
  int32_t hc_mult, hc_sinkhorn_iters;
  float hc_eps;
  int32_t n_engram, engram_layers[DSV4I_MAX_ENGRAM];
  int64_t engram_num_embeddings[DSV4I_MAX_ENGRAM];
  int32_t engram_max_ngram, engram_n_heads, engram_head_dim, engram_pad_id;
  int64_t engram_vocab_size;   /* where the prime search starts */
  int32_t engram_compressed_vocab_size;
  int32_t n_mtp_layers;        /* num_nextn_predict_layers */
  int32_t dspark_block_size, dspark_noise_token_id, dspark_markov_rank;
  int32_t n_dspark_targets, dspark_targets[DSV4I_MAX_LIST];
  int32_t dspark_n_routed_experts, dspark_n_experts_per_tok;
  /* vision_config (only when has_vision; all 0 otherwise) */
  int32_t vision_n_layers, vision_dim, vision_n_heads, vision_inter_dim, vision_patch_size;
  int32_t vision_downsample;   /* downsample_ratio: aligner folds ds x ds patches */
  int32_t vision_max_image_tokens;
  int64_t vision_min_pixels;
  float vision_rope_theta;
  float vision_max_wh_ratio;   /* 0 when null (no limit) */
  /* derived: one role per layer, backbone then DSpark stages */
  int32_t n_total_layers;      /* n_layers + n_mtp_layers */
  dsv4i_layer_role layers[DSV4I_MAX_LIST];
} dsv4i_config;

/**
 * The part of a model one rank holds: a pipeline stage's backbone layers
 * [first_layer, last_layer) and a tensor-parallel shard tp_rank of tp_size.
 * All zero: the whole model, one rank. The stage ending at n_layers also
 * holds the DSpark stages (their caches included).
 */
typedef struct dsv4i_model_part {
  int32_t first_layer, last_layer;
  int32_t tp_rank, tp_size;
} dsv4i_model_part;

/**
 * Parse config.json text (nested V4.1 form: root keys, text_config,
 * quantization_config, optional vision_config) into *cfg, derive the role
 * table and validate: list lengths vs layer count, ids in range, sorted and
 * unique, a consumer before its source, KV sources and the candidate source
 * among the index sources, dims multiples of 32, quantization_config as
 * the release's. Statuses: DSV4_ERR_JSON, DSV4_ERR_CONFIG_KEY (names the
 * key path, e.g. "text_config.index_topk"), DSV4_ERR_CONFIG_VALUE.
 * `origin` names the file in messages.
 */
dsv4_status dsv4i_config_parse(const char *json_text, size_t len, const char *origin,
                               dsv4i_config *cfg);
/** Read and parse a config.json file (adds DSV4_ERR_IO / DSV4_ERR_NOT_FOUND). */
dsv4_status dsv4i_config_load(const char *path, dsv4i_config *cfg);

/**
 * Validate the layer lists of *cfg (compress_ratios, KV / index / candidate
 * sources, Engram and DSpark ids) and fill cfg->layers[0 .. n_total_layers)
 * and n_total_layers (spec §2.3). Called by dsv4i_config_parse; exposed so
 * tests and tools can derive roles for a config built in memory. Messages
 * name the config.json key. Statuses: DSV4_ERR_CONFIG_VALUE.
 */
dsv4_status dsv4i_config_derive_roles(dsv4i_config *cfg);

/**
 * Check the scalar values of *cfg: positive sizes, dims that 32-blocks
 * need as multiples of 32, rope_head_dim <= head_dim, token ids inside the
 * vocabulary, supported feature choices. Called by dsv4i_config_parse.
 * Statuses: DSV4_ERR_CONFIG_VALUE (message names the config.json key).
 */
dsv4_status dsv4i_config_check_values(const dsv4i_config *cfg);

/* ---- tensor contract (spec §4.2) --------------------------------------- */

#define DSV4I_NAME_MAX 96

typedef struct dsv4i_tensor_spec {
  char name[DSV4I_NAME_MAX];
  int32_t dtype;               /* DSV4_DTYPE_* */
  int32_t ndim;
  int64_t shape[3];
  int32_t component;           /* DSV4_COMP_* */
  uint64_t nbytes;
} dsv4i_tensor_spec;

typedef struct dsv4i_contract {
  dsv4i_tensor_spec *specs;    /* sorted by name (strcmp) */
  size_t n;
  uint64_t payload_bytes;
} dsv4i_contract;

/**
 * Build the exact tensor set of a config (spec §4.2; vision tensors only
 * with has_vision), sorted by name, with dtype, shape, component and byte
 * size. Dense fp8 tensors come with `<name>.scale` F8_E8M0
 * [ceil(o/32), ceil(i/32)]; routed experts are I8 [o, i/2] + F8_E8M0
 * [o, i/32]. Statuses: DSV4_ERR_OUT_OF_MEMORY; DSV4_ERR_CONFIG_VALUE (a
 * tensor or the total would pass 2^64 bytes); DSV4_ERR_INTERNAL (a name too
 * long or duplicated: a bug). On failure *out is zeroed.
 */
dsv4_status dsv4i_contract_build(const dsv4i_config *cfg, dsv4i_contract *out);
/** Free the specs; *c is zeroed. NULL ok. */
void dsv4i_contract_free(dsv4i_contract *c);
/** Binary search; NULL if absent. */
const dsv4i_tensor_spec *dsv4i_contract_find(const dsv4i_contract *c, const char *name);
/**
 * DSV4_COMP_* of a checkpoint tensor name by prefix: mtp.* DSpark;
 * vision.*, aligner.*, image_* vision; embed, head, norm embed/head;
 * layers.N.attn.* attention, .ffn.experts.* routed, .ffn.shared_experts.*
 * shared, .engram.embed.* Engram tables, other .engram.* Engram
 * projections; everything else (hc_*, gates, block norms) other.
 */
int32_t dsv4i_component_of(const char *name);
/** Static short name of a DSV4_COMP_* ("routed_experts", ...); "?" if unknown. */
const char *dsv4i_component_name(int32_t component);

struct dsv4i_checkpoint; /* io/safetensors.h */

/** How many tensors of each kind dsv4i_contract_check lists by name. */
#define DSV4I_CHECK_LIST 20

/**
 * Compare a checkpoint's tensors with a contract by name, dtype and shape.
 * DSV4_OK when they are the same set; otherwise DSV4_ERR_WEIGHTS with one
 * message giving the counts of missing, unexpected, wrong-dtype and
 * wrong-shape tensors and listing the first DSV4I_CHECK_LIST of each kind
 * (with expected and found dtype / shape). `what` names the checkpoint.
 */
dsv4_status dsv4i_contract_check(const dsv4i_contract *c, const struct dsv4i_checkpoint *ck,
                                 const char *what);

/* ---- KV cache record sizes (spec §5.8) -------------------------------------
 * The byte layout of a cached row is part of the model format, shared by
 * every backend and by the memory planner: this is its one definition. */

/** KV cache record kinds. */
enum {
  /** Window row, MXFP8: head_dim E4M3 bytes then head_dim/32 UE8M0 bytes (528 B at 512). */
  DSV4I_KVREC_WINDOW = 0,
  /** Window row in V4's fp8_ds_mla layout (the alternative KV format; numerics differ):
   *  head_dim − rope_head_dim E4M3 NoPE bytes, rope_head_dim bf16 RoPE values, one UE8M0
   *  per 64 NoPE values padded to 8 bytes (584 B at 512 / 64; model/kv_ds_mla.h). */
  DSV4I_KVREC_WINDOW_DS_MLA = 1,
  /** Compressed KV: head_dim/2 packed E2M1 bytes then head_dim/16 E4M3 scales (288 B at 512). */
  DSV4I_KVREC_COMPRESSED = 2,
  /** Index key: index_head_dim/2 packed E2M1 bytes then index_head_dim/32 UE8M0 (68 B at 128). */
  DSV4I_KVREC_INDEX_KEY = 3
};

/** KV window record formats, an engine option (values equal the public
 *  DSV4_KV_FORMAT_*; docs/attention.md "KV formats"). */
enum {
  DSV4I_KV_NATIVE = 0,    /**< DSV4I_KVREC_WINDOW, the reference's numerics (spec §5.8) */
  DSV4I_KV_FP8_DS_MLA = 1 /**< DSV4I_KVREC_WINDOW_DS_MLA (V4's layout; numerics differ) */
};

/** The record kind of a window format (DSV4I_KV_NATIVE / _FP8_DS_MLA). */
static inline int32_t dsv4i_kv_window_kind(int32_t kv_format) {
  return kv_format == DSV4I_KV_FP8_DS_MLA ? DSV4I_KVREC_WINDOW_DS_MLA : DSV4I_KVREC_WINDOW;
}

/**
 * Bytes of one KV record of `kind` (DSV4I_KVREC_*) for the given dims; 0
 * for an unknown kind. Dims as validated by dsv4i_config_check_values
 * (multiples of 32 where the format cuts 32-blocks).
 */
static inline int64_t dsv4i_kv_record_bytes_for(int32_t kind, int64_t head_dim,
                                                int64_t rope_head_dim, int64_t index_head_dim) {
  switch (kind) {
  case DSV4I_KVREC_WINDOW: return head_dim + head_dim / 32;
  case DSV4I_KVREC_WINDOW_DS_MLA: /* model/kv_ds_mla.h */
    return dsv4i_ds_mla_rec_bytes((int32_t)head_dim, (int32_t)rope_head_dim);
  case DSV4I_KVREC_COMPRESSED: return head_dim / 2 + head_dim / 16;
  case DSV4I_KVREC_INDEX_KEY: return index_head_dim / 2 + index_head_dim / 32;
  }
  return 0;
}

/** dsv4i_kv_record_bytes_for with the dims of a config. */
static inline int64_t dsv4i_kv_record_bytes(const dsv4i_config *cfg, int32_t kind) {
  return dsv4i_kv_record_bytes_for(kind, cfg->head_dim, cfg->rope_head_dim, cfg->index_head_dim);
}

#endif /* DSV4I_CONFIG_H */
