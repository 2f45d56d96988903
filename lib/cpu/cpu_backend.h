/*
 * Private state of the CPU implementation of the engine's backend interface
 * (backend/backend.h). Shared by cpu_backend.c (create, buffers, KV pages,
 * batch) and cpu_backend_ops.c (embed, Engram, block, head, sample); nothing
 * else includes it.
 *
 * The backend wraps the CPU numerical core: cpu_ops.h (linear, norms, hc,
 * MoE, head, sampling), attention.h + kvcache.h (attention sublayer and the
 * KV records in the host page pool), engram.h (Engram module). Weights are views
 * into the mmapped checkpoint; only wo_a is copied (dequantised to bf16 by
 * dsv4i_attn_layer_load, spec §3.3). Buffers (dsv4i_bbuf) are host memory.
 */
#ifndef DSV4I_CPU_BACKEND_H
#define DSV4I_CPU_BACKEND_H

#include <stdint.h>

#include "cpu/attention.h"
#include "cpu/cpu_ops.h"
#include "cpu/engram.h"
#include "cpu/kvcache.h"
#include "backend/backend_impl.h"
#include "cpu/cpu_test_hooks.h"
#include "model/model.h"

/** One block's weights, backbone layer or DSpark stage (borrowed from the model except
 *  attn.wo_a and the expert table). */
typedef struct cpu_block {
  const float *hc_fn[2];     /**< [0] attention, [1] FFN: F32 [(2+hc)·hc][hc·dim] */
  const float *hc_scale[2];  /**< F32 [3] */
  const float *hc_base[2];   /**< F32 [(2+hc)·hc] */
  const uint16_t *attn_norm; /**< bf16 [dim] */
  const uint16_t *ffn_norm;  /**< bf16 [dim] */
  dsv4i_attn_layer attn;
  dsv4i_moe moe;
  dsv4i_wview *experts;      /**< owned: [3][n_experts] views w1, w2, w3 */
  int32_t engram_slot;       /**< -1 unless an Engram layer */
  dsv4i_engram_layer engram;
  int32_t tap;               /**< rank among the DSpark targets, -1 if none */
} cpu_block;

typedef struct cpu_backend {
  dsv4i_backend base;
  const struct dsv4_model *model;
  const dsv4i_config *cfg;
  int32_t n_threads;
  int32_t hc, dim, vocab, n_engram_cols;
  int32_t max_tok, max_out;
  /* weights */
  cpu_block *blocks;          /**< [n_layers] */
  const dsv4i_tp_ops *tp;     /**< TP collectives when tp_size > 1 (cpu_tp.h), else NULL */
  const uint16_t *embed;      /**< bf16 [vocab][dim] */
  const uint16_t *norm;       /**< bf16 [dim] final norm */
  dsv4i_wview head;           /**< BF16/F32 [vocab][dim] */
  struct cpu_dspark *dspark;  /**< DSpark draft head (cpu_dspark.c), NULL without stages */
  /* KV storage: pool_pages pages; which holds what comes with each step */
  dsv4i_kv_layout lay;        /**< the engine's layout (a copy) */
  uint8_t *pool;              /**< [pool_pages][lay.page_bytes] */
  int64_t pool_pages;
  int32_t n_slots;            /**< rows a step's page table may have */
  int32_t n_seq;              /**< rows of the current page table */
  int32_t *rows;              /**< [n_slots][lay.ld] the current page table (copied) */
  dsv4i_kv_view *views;       /**< [n_slots] its sequences */
  /* the current batch (copied by set_batch) */
  int32_t n_tok, n_out;
  int32_t *tok, *seq, *layout, *out_tok;
  int64_t *pos, *engram_ids;
  uint8_t *image, has_image;
  dsv4i_kv_view **tokseq;     /**< [max_tok] caches of each token */
  uint8_t *row_mark;          /**< [n_slots] */
  /* per-forward shared attention state and block scratch */
  dsv4i_attn_shared sh;
  uint16_t *x, *y;            /**< bf16 [max_tok][dim] */
  float *mixes;               /**< [max_tok][(2+hc)·hc] */
  float *a_pre, *a_post, *a_comb, *f_post, *f_comb; /**< [max_tok][hc] / [hc·hc] */
  uint16_t *hsel;             /**< bf16 [max_out][hc][dim] head input rows */
  float *presel;              /**< [max_out][hc] */
  double *accept_scratch;     /**< [2][vocab] for accept */
  /* test hook (cpu_test_hooks.h): the fault_after-th block call from now fails with fault */
  int32_t fault_after;
  dsv4_status fault;
  int32_t fault_mid_after;    /**< the same, failing after the attention sublayer */
  dsv4_status fault_mid;
  dsv4_status copy_fault;     /**< the next kv_copy fails with it (cpu_test_hooks.h) */
} cpu_backend;

/* cpu_backend_ops.c: the step entry points of the vtable */
dsv4_status dsv4i_cpu_be_embed(dsv4i_backend *be, dsv4i_bbuf h, dsv4i_bbuf pre);
dsv4_status dsv4i_cpu_be_engram(dsv4i_backend *be, int32_t layer, dsv4i_bbuf h);
dsv4_status dsv4i_cpu_be_block(dsv4i_backend *be, int32_t layer, dsv4i_bbuf h, dsv4i_bbuf pre,
                               dsv4i_bbuf taps);
dsv4_status dsv4i_cpu_be_head(dsv4i_backend *be, dsv4i_bbuf h, dsv4i_bbuf pre, dsv4i_bbuf logits);
dsv4_status dsv4i_cpu_be_run(dsv4i_backend *be, const dsv4i_step_io *io);
dsv4_status dsv4i_cpu_be_accept(dsv4i_backend *be, dsv4i_bbuf logits, int32_t row,
                                const dsv4i_accept_req *req, int32_t *accepted, int32_t *token);
/** Take a step's page table (set_batch, dspark_draft): copies it into rows / views. */
dsv4_status dsv4i_cpu_be_load_kv(cpu_backend *b, const dsv4i_kv_step *kv);
dsv4_status dsv4i_cpu_be_sample(dsv4i_backend *be, dsv4i_bbuf logits, int32_t n,
                                const dsv4i_sample_req *req, int32_t *tokens);

/* cpu_backend_load.c: weights by role (backbone blocks and DSpark stages, layer
 * n_layers + S, share one loader) */
dsv4_status dsv4i_cpu_weight_data(const cpu_backend *b, int32_t role, int32_t layer,
                                  int32_t dtype, int64_t n, const void **out);
dsv4_status dsv4i_cpu_weight_view(const cpu_backend *b, int32_t role, int32_t layer, int32_t expert,
                                  dsv4i_wview *out);
dsv4_status dsv4i_cpu_load_block(cpu_backend *b, int32_t L, cpu_block *k);
void dsv4i_cpu_free_block(cpu_block *k);
dsv4_status dsv4i_cpu_be_load_blocks(cpu_backend *b, const dsv4i_backend_desc *d);
void dsv4i_cpu_be_free_blocks(cpu_backend *b);

#endif /* DSV4I_CPU_BACKEND_H */
