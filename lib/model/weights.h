/*
 * The weight table of a model: every tensor of the contract (spec §4.2) by
 * (role, layer, expert) with its storage format, shape, quantisation scale,
 * tensor-parallel split rule and placement. Built from the config and the
 * contract when a model opens (data pointers filled when the checkpoint is
 * mapped). Backends, the planner, the distributed loader, tests and the bench
 * ask by role; tensor names are formatted and parsed only in lib/model.
 *
 * Keys: `layer` is a backbone layer 0..n_layers-1 or a DSpark stage
 * n_layers + S (the tensors "mtp.S.*"), -1 for global tensors; `expert` is
 * the routed expert of the DSV4I_W_EXPERT_* roles, else -1. A quantised
 * weight and its block scale ("<stem>.scale") form one entry.
 */
#ifndef DSV4I_MODEL_WEIGHTS_H
#define DSV4I_MODEL_WEIGHTS_H

#include <stddef.h>
#include <stdint.h>

#include "base/base.h"

struct dsv4i_config;
struct dsv4i_model_part;
struct dsv4i_contract;
struct dsv4i_tensor_spec;

/* X(role, scope, suffix, split): scope G = global, B = block (layer or DSpark
 * stage), E = routed expert of a block; suffix = the name after "layers.N." /
 * "mtp.S." / "…experts.E."; split = the tensor-parallel rule (design §6). */
#define DSV4I_WEIGHT_ROLES(X)                                        \
  X(EMBED, G, "embed.weight", ROWS)                                  \
  X(HEAD, G, "head.weight", ROWS)                                    \
  X(NORM, G, "norm.weight", NONE)                                    \
  X(ATTN_SINK, B, "attn.attn_sink", ROWS)                            \
  X(ATTN_Q_NORM, B, "attn.q_norm.weight", NONE)                      \
  X(ATTN_KV_NORM, B, "attn.kv_norm.weight", NONE)                    \
  X(ATTN_WQ_A, B, "attn.wq_a.weight", NONE)                          \
  X(ATTN_WQ_B, B, "attn.wq_b.weight", ROWS)                          \
  X(ATTN_WKV, B, "attn.wkv.weight", NONE)                            \
  X(ATTN_WO_A, B, "attn.wo_a.weight", ROWS)                          \
  X(ATTN_WO_B, B, "attn.wo_b.weight", COLS)                          \
  X(COMP_WKV, B, "attn.compressor.wkv.weight", NONE)                 \
  X(COMP_WGATE, B, "attn.compressor.wgate.weight", NONE)             \
  X(COMP_NORM, B, "attn.compressor.norm.weight", NONE)               \
  X(IDX_WK, B, "attn.indexer.wk.weight", NONE)                       \
  X(IDX_K_NORM, B, "attn.indexer.k_norm.weight", NONE)               \
  X(IDX_WQ_B, B, "attn.indexer.wq_b.weight", NONE)                   \
  X(IDX_WPROJ, B, "attn.indexer.weights_proj.weight", NONE)          \
  X(ATTN_NORM, B, "attn_norm.weight", NONE)                          \
  X(FFN_NORM, B, "ffn_norm.weight", NONE)                            \
  X(GATE, B, "ffn.gate.weight", NONE)                                \
  X(GATE_BIAS, B, "ffn.gate.bias", NONE)                             \
  X(GATE_BIAS_VL, B, "ffn.gate.bias_vl", NONE)                       \
  X(EXPERT_W1, E, "w1.weight", ROWS)                                 \
  X(EXPERT_W2, E, "w2.weight", COLS)                                 \
  X(EXPERT_W3, E, "w3.weight", ROWS)                                 \
  X(SHARED_W1, B, "ffn.shared_experts.w1.weight", ROWS)              \
  X(SHARED_W2, B, "ffn.shared_experts.w2.weight", COLS)              \
  X(SHARED_W3, B, "ffn.shared_experts.w3.weight", ROWS)              \
  X(HC_ATTN_FN, B, "hc_attn_fn", NONE)                               \
  X(HC_ATTN_BASE, B, "hc_attn_base", NONE)                           \
  X(HC_ATTN_SCALE, B, "hc_attn_scale", NONE)                         \
  X(HC_FFN_FN, B, "hc_ffn_fn", NONE)                                 \
  X(HC_FFN_BASE, B, "hc_ffn_base", NONE)                             \
  X(HC_FFN_SCALE, B, "hc_ffn_scale", NONE)                           \
  X(ENGRAM_EMBED, B, "engram.embed.weight", ENGRAM)                  \
  X(ENGRAM_Q, B, "engram.q_weight", NONE)                            \
  X(ENGRAM_K, B, "engram.k_weight", NONE)                            \
  X(ENGRAM_WKV, B, "engram.wkv.weight", NONE)                        \
  X(DSPARK_MAIN_PROJ, B, "main_proj.weight", NONE)                   \
  X(DSPARK_MAIN_NORM, B, "main_norm.weight", NONE)                   \
  X(DSPARK_NORM, B, "norm.weight", NONE)                             \
  X(DSPARK_MARKOV_EMBED, B, "markov_head.embed.weight", NONE)        \
  X(DSPARK_MARKOV_HEAD, B, "markov_head.head.weight", NONE)          \
  X(DSPARK_CONF_PROJ, B, "confidence_head.proj.weight", NONE)

/** Weight roles (DSV4I_W_EMBED, ...); DSV4I_W_VISION: every vision-tower tensor
 *  (layer -1, expert = its ordinal among them). */
enum {
#define DSV4I_WROLE_ENUM(r, sc, suf, sp) DSV4I_W_##r,
  DSV4I_WEIGHT_ROLES(DSV4I_WROLE_ENUM)
#undef DSV4I_WROLE_ENUM
  DSV4I_W_VISION,
  DSV4I_W_ROLE_COUNT
};

/** Tensor-parallel split rule (design §6). */
enum {
  DSV4I_SPLIT_NONE = 0, /**< replicated on every rank */
  DSV4I_SPLIT_ROWS,     /**< dimension 0 over the ranks (heads, groups, intermediate, vocab) */
  DSV4I_SPLIT_COLS,     /**< dimension 1 over the ranks (the input of wo_b, expert w2) */
  DSV4I_SPLIT_ENGRAM    /**< Engram table: rows over the ranks on a device, else host memory */
};

/** Placement: which pipeline stage holds it (design §6). */
enum {
  DSV4I_PLACE_INPUT = 0, /**< embed: the first stage (and the DSpark stage's block tokens) */
  DSV4I_PLACE_LAYER,     /**< a backbone layer: the stage running it */
  DSV4I_PLACE_DSPARK,    /**< a DSpark stage: the last stage */
  DSV4I_PLACE_OUTPUT,    /**< final norm and head: the last stage */
  DSV4I_PLACE_VISION     /**< the vision tower: the first stage */
};

/** One weight. Pointers borrow the model (the mapping); data NULL when config-only. */
typedef struct dsv4i_weight {
  int32_t role, layer, expert;
  int32_t split, placement;
  int32_t component;                       /**< DSV4_COMP_* (byte accounting) */
  int32_t dtype;                           /**< storage dtype of data (DSV4_DTYPE_*) */
  int32_t ndim;                            /**< 1 or 2 */
  int64_t shape[2];                        /**< storage shape (I8 FP4: [rows][cols/2]) */
  uint64_t nbytes;                         /**< bytes of data */
  const void *data;                        /**< mapped bytes, NULL for a config-only model */
  const struct dsv4i_tensor_spec *spec;    /**< contract entry (name for messages) */
  /* block scale of a quantised weight, all zero/NULL otherwise */
  int32_t scale_dtype;
  int64_t scale_shape[2];
  uint64_t scale_nbytes;
  const void *scale;
  const struct dsv4i_tensor_spec *scale_spec;
  size_t spec_index, scale_index;          /**< contract indices (scale: SIZE_MAX if none) */
} dsv4i_weight;

/** The table: entries sorted by (role, layer, expert). */
typedef struct dsv4i_weights {
  dsv4i_weight *w;
  size_t n;
  size_t *by_spec; /**< [n_specs] contract tensor i -> 2 · entry + (1 if it is the scale) */
  size_t n_specs;
} dsv4i_weights;

/**
 * Build the table of a contract (every tensor in exactly one entry; data NULL).
 * @return DSV4_OK; DSV4_ERR_OUT_OF_MEMORY; DSV4_ERR_INTERNAL (a contract tensor
 *         no role describes, or a scale without its weight).
 */
dsv4_status dsv4i_weights_build(const struct dsv4i_config *cfg, const struct dsv4i_contract *con,
                                dsv4i_weights *out);
void dsv4i_weights_free(dsv4i_weights *t);

/** Entry of (role, layer, expert), or NULL (no error recorded). */
const dsv4i_weight *dsv4i_weights_find(const dsv4i_weights *t, int32_t role, int32_t layer,
                                       int32_t expert);

/**
 * The entry with its data, checked: present and mapped, storage dtype `dtype`
 * (-1: any) and `n_elems` elements (-1: any).
 * @return DSV4_OK; DSV4_ERR_NOT_FOUND (no such weight or not mapped: the message
 *         names the tensor); DSV4_ERR_WEIGHTS (dtype or size differs). *out NULL on failure.
 */
dsv4_status dsv4i_weights_get(const dsv4i_weights *t, int32_t role, int32_t layer, int32_t expert,
                              int32_t dtype, int64_t n_elems, const dsv4i_weight **out);

/** Name of a role ("attn.wq_a.weight" etc. without the layer prefix). */
const char *dsv4i_weight_role_name(int32_t role);

/** Key of a role: the enum name without DSV4I_W_ ("ATTN_WO_A", "VISION"); NULL if none. */
const char *dsv4i_weight_role_key(int32_t role);

/** The entry holding contract tensor i (its weight or, *is_scale = 1, its scale), or NULL. */
const dsv4i_weight *dsv4i_weights_of_tensor(const dsv4i_weights *t, size_t i, int *is_scale);

/**
 * Checkpoint bytes the part of the model one rank holds (config.h
 * dsv4i_model_part; NULL: all) binds on the CPU backend: the tensors of its
 * backbone layers, with the rank's share of those split by the weight table's
 * rules (ROWS / COLS, units split as evenly as the shapes allow); the input
 * embedding on the first stage, the final norm and head on the last; the
 * DSpark stages (and the embedding their block tokens use) on the last stage
 * when with_dspark. Global tensors, DSpark stages and Engram tables are held
 * whole by every TP rank; the vision tower by none.
 */
int64_t dsv4i_weights_part_bytes(const dsv4i_weights *t, const struct dsv4i_config *cfg,
                                 const struct dsv4i_model_part *part, int with_dspark);

/** Name of a storage dtype ("F8_E4M3"), for messages. */
const char *dsv4i_weight_dtype_name(int32_t dtype);

/** Checkpoint name of an entry (for messages). */
const char *dsv4i_weight_name(const dsv4i_weight *w);

#endif /* DSV4I_MODEL_WEIGHTS_H */
