/*
 * Private state of the CUDA implementation of the engine's backend
 * interface (backend/backend.h). Shared by gpu_backend.c (create, buffers,
 * batch, sampling, the step run and its graphs), gpu_weights.c (upload by
 * role), gpu_block.c (embed, Engram, block, head: the CPU backend's
 * sequence of ops, lib/cpu/cpu_backend_ops.c, with the launchers of
 * gpu_ops.h and attn.h) and gpu_kv.c (caches); nothing else includes it.
 *
 * Memory: one device pool (gpu_ctx.h) holds the weights in their checkpoint
 * formats (wo_a dequantised to bf16 at load, as the CPU), the KV pages and
 * the step's page table, and the step workspace sized for max_batch_tokens; the Engram
 * tables live in the host-pinned pool and are read through mapped pointers.
 * Buffers the engine allocates (dsv4i_bbuf) are further carvings of the
 * device pool, so nothing reaches the driver's allocator after create.
 */
#ifndef DSV4I_GPU_BACKEND_H
#define DSV4I_GPU_BACKEND_H

#include <stdint.h>

#include "backend/backend_impl.h"
#include "gpu/attn.h"
#include "gpu/dspark.h"
#include "gpu/gpu_ctx.h"
#include "gpu/gpu_kv.h"
#include "gpu/gpu_ops.h"
#include "model/model.h"

/** Largest tp_size create accepts: a TP rank loads its shard of every backbone block
 *  (docs/distributed.md "GPU TP shards"). */
#define DSV4I_GPU_MAX_TP 64

/** Largest compress ratio the step precomputes group positions for. */
#define DSV4I_GPU_MAX_RATIO 8

/** One attention layer's device weights (the fields of the CPU's dsv4i_attn_layer). */
typedef struct gpu_attn {
  int32_t ratio;            /**< compress ratio (0: window only) */
  uint32_t roles;           /**< DSV4_ROLE_* */
  int32_t kv_source, index_key_source, candidate_source;
  int32_t n_heads, o_groups; /**< this TP rank's heads and wo_a groups (all without TP) */
  dsv4i_gpu_weight wq_a, wq_b, wkv, wo_a /* bf16 */, wo_b;
  dsv4i_gpu_weight c_wkv, c_wgate, i_wq_b, i_wproj, i_wk;
  dsv4i_cuptr q_norm, kv_norm, sink, c_norm, i_knorm; /**< bf16 [..] / f32 [H] */
  dsv4i_cuptr freqs;        /**< f32 [rope_dim/2]: this layer's RoPE table */
  float softmax_scale, index_wscale;
} gpu_attn;

/** One backbone block. */
typedef struct gpu_block {
  dsv4i_cuptr hc_fn[2], hc_scale[2], hc_base[2]; /**< [0] attention, [1] FFN */
  dsv4i_cuptr attn_norm, ffn_norm;
  gpu_attn at;
  dsv4i_gpu_weight gate;    /**< BF16/F32 [E][dim] router */
  dsv4i_cuptr gate_bias;    /**< f32 [E] */
  dsv4i_gpu_moe moe;
  int32_t engram_slot;      /**< -1 unless an Engram layer */
  dsv4i_gpu_engram engram;
  int32_t tap;              /**< rank among the DSpark targets, -1 if none */
} gpu_block;

/** The DSpark draft head's own weights (the stages are blocks n_layers + S). */
typedef struct gpu_dspark {
  int32_t n_stages, block, rank, n_taps;
  dsv4i_gpu_weight main_proj;     /**< fp8 [dim][n_taps·dim] */
  dsv4i_cuptr main_norm, norm;    /**< bf16 [dim]: the first stage's main_norm, the last's norm */
  dsv4i_cuptr mk_embed, mk_head;  /**< bf16 [vocab][rank] markov_head.embed / .head */
  const uint16_t *mk_embed_host;  /**< the same table in the checkpoint (confidence rows) */
  const void *conf;               /**< confidence_head.proj [1][dim + rank] (checkpoint) */
  int32_t conf_f32;               /**< 1: F32, 0: BF16 */
  dsv4i_gpu_dspark_kernels k;
} gpu_dspark;

/** The rows one block call runs over: a step's tokens, or DSpark draft blocks. */
typedef struct gpu_rows {
  int32_t n;
  dsv4i_cuptr atok, pos, gpos; /**< token records, int32 positions, group positions (row
                                *   stride max_tok, see gpu_ws) */
  int32_t dspark_block;        /**< B for draft blocks (layout -B), else 0 */
} gpu_rows;

/** Step workspace and inputs (device addresses), sized for max_tok tokens. */
typedef struct gpu_ws {
  /* inputs: one block copied from the pinned staging by set_batch */
  dsv4i_cuptr in;           /**< the block */
  dsv4i_cuptr tok, pos;     /**< int32 [T] */
  dsv4i_cuptr gpos;         /**< int32 [MAX_RATIO + 1][T]: max(0, pos + 1 - r) */
  dsv4i_cuptr atok;         /**< dsv4i_gpu_attn_tok [T] */
  dsv4i_cuptr eids;         /**< int64 [T][n_engram_cols] */
  dsv4i_cuptr img;          /**< u8 [T] */
  dsv4i_cuptr gvec;         /**< int32 [T]: each token's vectorised Engram gates */
  dsv4i_cuptr out_tok;      /**< int32 [R] */
  /* block */
  dsv4i_cuptr x, y, mixes, a_pre, a_post, a_comb, f_post, f_comb;
  dsv4i_cuptr xq, sx, rq, rsx; /**< act_quant of x (K = dim) and of qr / u (the other K) */
  /* attention */
  dsv4i_cuptr qr, q, o, kv, kvw, lat, kk, gg, ik, iq, iw, u;
  dsv4i_cuptr scores, bws, topk, cand, sparse;
  dsv4i_cuptr topk_ws;   /* the split top-k's candidates (dsv4i_gpu_attn_topk_ws_bytes) */
  size_t topk_ws_bytes;
  size_t sparse_bytes;
  int64_t score_ld, bws_ld;
  int32_t topk_ld, cand_ld;
  /* MoE and Engram */
  dsv4i_cuptr z, ridx, rw, moe, engram;
  dsv4i_cuptr tpf;          /**< TP shards: f32 partial sums, wo_b's [T][dim] or the MoE's
                             *   expert rows [T][top_k + 1][dim] (all-reduced in place) */
  /* head and sampling */
  dsv4i_cuptr hsel, presel, hx, junk, samp, samp_out; /**< samp: temp f32, seed, ctr u64 [R] */
  dsv4i_cuptr accq, accout; /**< accept: the draft's logits f32 [vocab], the decision int32 [2] */
  /* DSpark draft (0 without stages): inputs block, stream, pre, logits, Markov scratch */
  dsv4i_cuptr din, dh, dpre, dxc, dlog, dpart, dticket;
} gpu_ws;

/** Host-pinned staging of the inputs (same layout as gpu_ws.in). */
typedef struct gpu_stage {
  void *base;
  size_t bytes;
  int32_t *tok, *pos, *gpos;
  dsv4i_gpu_attn_tok *atok;
  int64_t *eids;
  uint8_t *img;
  int32_t *gvec;
  int32_t *out_tok;
  void *samp;               /**< temp / seed / counter rows */
  int32_t *samp_out;
  void *din;                /**< the DSpark draft's inputs (gpu_ws.din's layout) */
  uint16_t *dxc;            /**< bf16 [max_rows][dim]: draft rows for the confidence */
  int32_t *tab;             /**< int32 [n_slots + 1][ld]: a step's page rows + the padding row */
} gpu_stage;

typedef struct gpu_backend {
  dsv4i_backend base;
  const struct dsv4_model *model;
  const dsv4i_config *cfg;
  dsv4i_gpu g;
  dsv4i_gpu_ops ops;
  dsv4i_gpu_attn_kernels ak;
  dsv4i_gpu_graphs graphs;
  int32_t hc, dim, vocab, n_engram_cols, max_tok, max_out;
  int32_t max_rows;         /**< rows a block call may run: max(max_tok, max_out · DSpark block) */
  /* weights */
  gpu_block *blocks;        /**< [n_total_layers]: backbone, then the DSpark stages */
  gpu_dspark *dspark;       /**< NULL without DSpark stages (or not the last stage) */
  dsv4i_cuptr embed, norm;  /**< bf16 [vocab][dim], bf16 [dim] */
  dsv4i_gpu_weight head;    /**< BF16/F32 [vocab][dim] */
  size_t weight_bytes, pinned_bytes, temp_bytes; /**< measured by the counting pass */
  /* caches */
  dsv4i_gkv kv;
  /* step */
  gpu_ws ws;
  gpu_stage st;
  size_t pool_mark;         /**< the device pool's fill after create (engine buffers follow) */
  int32_t n_tok, n_pad, n_out, has_image;
  int32_t n_slots, kv_ld;   /**< page rows a step may hand in, int32 per row */
  uint8_t *row_mark;        /**< [n_slots] set_batch's run check */
  int64_t *pos;             /**< [T] */
  int32_t *seq_row;         /**< [T] */
  int32_t *layout;          /**< [T] */
  int32_t step_rows;        /**< tokens the ops run over: n_tok, or n_pad inside a graph */
  int32_t step_out;         /**< head rows: n_out, or min(n_pad, max_out) inside a graph */
  int32_t graphs_off;       /**< 1: run op by op (tests: graph replay == eager) */
  dsv4i_cuptr force_topk;   /**< 0, or the top-k rows index sources attend with (teacher
                             *   forcing: dsv4i_gpu_backend_force_topk) */
  void *io_h, *io_pre, *io_logits, *io_taps; /**< the engine buffers the graphs were captured with */
  dsv4i_gpu_graphs dgraphs[2]; /**< DSpark drafts, buckets of sequences: [0] into the workspace's
                                *   logits, [1] into the caller's buffer dlog_ext */
  void *dlog_ext;
  int32_t dbucket[16];      /**< the drafts' buckets: the step plan's below min(max_out, n_slots), then it */
  const dsv4i_tp_ops *tp;   /**< the stage's device all-reduces (one after the attention output,
                             *   one after the MoE, backbone layers), joined; NULL: none */
} gpu_backend;

/* gpu_weights.c */
/** Upload every weight of the stage (count_only: only measure weight_bytes,
 *  pinned_bytes and temp_bytes). */
dsv4_status dsv4i_gpu_be_load(gpu_backend *b, const dsv4i_backend_desc *d, int count_only);

/* gpu_block.c: the step ops (vtable entries) and what the DSpark code shares */
dsv4_status dsv4i_gpu_lin_q(gpu_backend *b, const dsv4i_gpu_weight *w, int32_t n, dsv4i_cuptr x,
                            int64_t ldx, dsv4i_cuptr xq, dsv4i_cuptr sx, dsv4i_cuptr y, int64_t ldy);
/** One block (spec §5.3-§5.5) over rows rw, h / pre in place (no taps, no commit). */
dsv4_status dsv4i_gpu_block_rows(gpu_backend *b, int32_t layer, const gpu_rows *rw, dsv4i_cuptr h,
                                 dsv4i_cuptr pre);
/** main_kv window records of rows x bf16 [n][dim] into a DSpark stage's ring. */
dsv4_status dsv4i_gpu_store_main_kv(gpu_backend *b, int32_t layer, const gpu_rows *rw,
                                    dsv4i_cuptr x);
dsv4_status dsv4i_gpu_be_embed(dsv4i_backend *be, dsv4i_bbuf h, dsv4i_bbuf pre);
dsv4_status dsv4i_gpu_be_engram(dsv4i_backend *be, int32_t layer, dsv4i_bbuf h);
dsv4_status dsv4i_gpu_be_block(dsv4i_backend *be, int32_t layer, dsv4i_bbuf h, dsv4i_bbuf pre,
                               dsv4i_bbuf taps);
dsv4_status dsv4i_gpu_be_head(dsv4i_backend *be, dsv4i_bbuf h, dsv4i_bbuf pre, dsv4i_bbuf logits);

/* gpu_dspark.c: the DSpark entries */
dsv4_status dsv4i_gpu_be_dspark_extend(dsv4i_backend *be, dsv4i_bbuf taps);
dsv4_status dsv4i_gpu_be_dspark_draft(dsv4i_backend *be, const dsv4i_kv_step *kv,
                                      const int64_t *pos, const int32_t *anchor, dsv4i_bbuf taps,
                                      const dsv4i_sample_req *req, int32_t *drafts,
                                      float *confidence, dsv4i_bbuf logits);
/** Bytes of the draft's input block for R sequences of B draft tokens (host and device). */
size_t dsv4i_gpu_dspark_inputs_bytes(int32_t R, int32_t B);

/**
 * The indexer's selection rows in the step workspace, as buffers of the backend
 * (buf_read / buf_write them between ops; rows are the step's tokens):
 * topk int32 [max_tok][topk_ld], an index source's top-k (ascending, -1 padded),
 * which the layers after it with that index source read; cand int32
 * [max_tok][cand_ld], the candidate source's blocks (ascending, -1 padded), which
 * masked index sources read; scores f32 [max_tok][score_ld], the keys an index
 * source ranked (bf16 values, -inf where masked; visible positions only).
 */
typedef struct dsv4i_gpu_selection {
  dsv4i_bbuf topk, cand, scores;
  int32_t topk_ld, cand_ld;
  int64_t score_ld;
} dsv4i_gpu_selection;

/** Test hook (teacher forcing, fixture README "How to compare" step 3): the selection rows. */
void dsv4i_gpu_backend_selection(dsv4i_backend *be, dsv4i_gpu_selection *out);
/** Test hook: index sources attend with the rows of `topk` (a buffer of the backend, int32
 *  [T][topk_ld]) instead of their own top-k, which they still compute into the selection's
 *  topk; {NULL}: their own. Read when the ops are queued: op by op, or at a graph's capture. */
void dsv4i_gpu_backend_force_topk(dsv4i_backend *be, dsv4i_bbuf topk);
/** Test hook: 1 = run() goes op by op (no graphs); returns the previous value. */
int32_t dsv4i_gpu_backend_set_eager(dsv4i_backend *be, int32_t eager);
/** Test hook: graphs captured so far. */
int32_t dsv4i_gpu_backend_captures(const dsv4i_backend *be);

/** Test hook: how many DSpark draft graphs the backend captured (both sets). */
int32_t dsv4i_gpu_backend_draft_captures(const dsv4i_backend *be);
/** Join tp's device communicator (device_join) and issue the block's all-reduces through it
 *  from now on (create does this for tp_size > 1; tests bind a one-rank NCCL communicator to
 *  a tp_size 1 backend with it). Before any graph is captured. */
dsv4_status dsv4i_gpu_backend_set_tp(dsv4i_backend *be, const dsv4i_tp_ops *tp);

#endif /* DSV4I_GPU_BACKEND_H */
