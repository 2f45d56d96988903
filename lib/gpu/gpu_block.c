/*
 * CUDA backend step ops (backend/backend.h): embedding and HC expansion,
 * Engram, the backbone block (mHC, attention with its caches, MoE), head.
 * Each is the CPU backend's sequence of ops (lib/cpu/cpu_backend_ops.c,
 * lib/cpu/attn_forward.c) with the device launchers of gpu_ops.h and
 * attn.h, over b->step_rows tokens (the batch's, or the bucket's inside a
 * graph: padded rows read valid inputs and write only the padding slot's
 * caches). Only launches: no synchronisation, no allocation, no host copy.
 */
#include <string.h>

#include "gpu/gpu_backend.h"

#define GPU(be) ((gpu_backend *)(be))
#define D(p) ((dsv4i_cuptr)(uintptr_t)(p))

static dsv4_status note(gpu_backend *b, dsv4_status st) { return dsv4i_gpu_note(&b->g, st); }

dsv4_status dsv4i_gpu_be_embed(dsv4i_backend *be, dsv4i_bbuf h, dsv4i_bbuf pre) {
  gpu_backend *b = GPU(be);
  if (!be->has_embed)
    return dsv4i_error(DSV4_ERR_INVALID_ARG, "cuda embed: the stage [%d, %d) is not the first",
                       (int)be->first_layer, (int)be->last_layer);
  return note(b, dsv4i_gpu_embed_hc(&b->ops, b->g.stream, b->step_rows, b->hc, b->dim, b->ws.tok,
                                    b->embed, D(h.impl), D(pre.impl)));
}

dsv4_status dsv4i_gpu_be_engram(dsv4i_backend *be, int32_t layer, dsv4i_bbuf h) {
  gpu_backend *b = GPU(be);
  if (layer < be->first_layer || layer >= be->last_layer || b->blocks[layer].engram_slot < 0)
    return dsv4i_error(DSV4_ERR_INVALID_ARG, "cuda engram: layer %d is not an Engram layer",
                       (int)layer);
  const gpu_block *k = &b->blocks[layer];
  const dsv4i_cuptr ids = b->ws.eids + (dsv4i_cuptr)k->engram_slot * (dsv4i_cuptr)k->engram.n_cols * 8u;
  return note(b, dsv4i_gpu_engram_run(&b->ops, b->g.stream, &k->engram, b->step_rows, ids,
                                      b->n_engram_cols, b->has_image ? b->ws.img : 0,
                                      b->ws.gvec, b->ws.engram, D(h.impl)));
}

/* ---- TP (docs/distributed.md "GPU TP shards") --------------------------------- */

/* A TP shard's backbone layer (tp_size > 1; the DSpark stages are replicated): its
 * partial sublayer outputs meet in f32, before the reference's bf16 rounding points. */
static int tp_shard(const gpu_backend *b, int32_t layer) {
  return b->tp && b->base.tp_size > 1 && layer < b->cfg->n_layers;
}

/* In-place sum over the stage's TP ranks on the engine stream (captured into graphs). */
static dsv4_status tp_allreduce(gpu_backend *b, dsv4i_cuptr buf, size_t n, int32_t dtype) {
  return b->tp->device_allreduce(b->tp->ctx, (uint64_t)buf, n, dtype, (void *)b->g.stream);
}

/* ---- attention (spec §5.4; lib/cpu/attn_forward.c) ---------------------------- */

/* fp8 linear on bf16 rows (dsv4i_gpu_linear_q8: act_quant + GEMV, or the tiled kernel). */
dsv4_status dsv4i_gpu_lin_q(gpu_backend *b, const dsv4i_gpu_weight *w, int32_t n, dsv4i_cuptr x,
                         int64_t ldx, dsv4i_cuptr xq, dsv4i_cuptr sx, dsv4i_cuptr y, int64_t ldy) {
  return dsv4i_gpu_linear_q8(&b->ops, b->g.stream, w, n, x, ldx, xq, sx, y, ldy);
}

/* The grouped bf16 wo_a: one launch when the kernel takes the group size, else per group. */
static dsv4_status wo_a(gpu_backend *b, const dsv4i_gpu_weight *w, int32_t groups, int32_t n,
                        dsv4i_cuptr o, int64_t ldo, dsv4i_cuptr u, int64_t ldu) {
  const int32_t R = w->rows / groups;
  if (R % 128 == 0) return dsv4i_gpu_linear_grouped(&b->ops, b->g.stream, w, groups, n, o, ldo, u, ldu);
  dsv4_status st = DSV4_OK;
  for (int32_t g = 0; g < groups && !st; g++) {
    dsv4i_gpu_weight wg = *w;
    wg.rows = R;
    wg.data = w->data + (dsv4i_cuptr)g * (dsv4i_cuptr)R * (dsv4i_cuptr)w->ld * 2u;
    st = dsv4i_gpu_linear(&b->ops, b->g.stream, &wg, n, o + (dsv4i_cuptr)g * (dsv4i_cuptr)w->cols * 2u,
                          ldo, u + (dsv4i_cuptr)g * (dsv4i_cuptr)R * 2u, ldu, 0);
  }
  return st;
}

static dsv4_status attention(gpu_backend *b, int32_t L, const gpu_rows *rw, dsv4i_cuptr x,
                             dsv4i_cuptr out) {
  const dsv4i_config *c = b->cfg;
  const gpu_attn *a = &b->blocks[L].at;
  const gpu_ws *w = &b->ws;
  const dsv4i_gpu_ops *o = &b->ops;
  const dsv4i_custream s = b->g.stream;
  /* H, G: this TP rank's heads and wo_a groups (all of them without TP) */
  const int32_t n = rw->n, H = a->n_heads, G = a->o_groups, hd = c->head_dim, rd = c->rope_head_dim,
                nf = rd / 2, ql = c->q_lora_rank, dim = c->dim;
  const dsv4i_cuptr atok = rw->atok, pos = rw->pos;
  const int32_t IH = c->index_n_heads, ihd = c->index_head_dim;
  const dsv4i_cuptr tail = (dsv4i_cuptr)(hd - rd) * 2u;
  const int kv_src = a->ratio > 0 && (a->roles & DSV4_ROLE_KV_SOURCE);
  const int idx_src = a->ratio > 0 && (a->roles & DSV4_ROLE_INDEX_SOURCE);
  const dsv4i_cuptr gpos = rw->gpos + (dsv4i_cuptr)(a->ratio > 0 ? a->ratio : 0) *
                                          (dsv4i_cuptr)b->max_tok * 4u;
  /* 1. query: q_norm(wq_a(x)) -> wq_b -> RoPE on each head's tail. x is quantised once for wq_a
   * and wkv (xq, sx), q_norm's output once for wq_b and the indexer's wq_b (rq, rsx). */
  dsv4_status st = dsv4i_gpu_q8_quant(o, s, n, dim, x, dim, w->xq, w->sx);
  if (!st) st = dsv4i_gpu_linear_q8_pre(o, s, &a->wq_a, n, w->xq, w->sx, w->qr, ql);
  if (!st) st = dsv4i_gpu_rmsnorm(o, s, n, ql, w->qr, ql, a->q_norm, c->norm_eps, w->qr, ql);
  if (!st) st = dsv4i_gpu_q8_quant(o, s, n, ql, w->qr, ql, w->rq, w->rsx);
  if (!st) st = dsv4i_gpu_linear_q8_pre(o, s, &a->wq_b, n, w->rq, w->rsx, w->q, (int64_t)H * hd);
  if (!st) st = dsv4i_gpu_rope(o, s, n, H, nf, w->q + tail, (int64_t)H * hd, hd, a->freqs, pos, 0);
  /* 2. window KV: kv_norm(wkv(x)), RoPE, QDQ rows for attending */
  if (!st) st = dsv4i_gpu_linear_q8_pre(o, s, &a->wkv, n, w->xq, w->sx, w->kv, hd);
  if (!st) st = dsv4i_gpu_rmsnorm_rope(o, s, n, hd, w->kv, hd, a->kv_norm, c->norm_eps, w->kv, hd, nf,
                                      a->freqs, pos);
  if (!st) st = dsv4i_gpu_attn_window_store(&b->ak, s, NULL, atok, n, hd, w->kv, w->kvw);
  /* 3. compressed path: compressor -> index keys -> indexer -> compressed KV */
  if (!st && kv_src) {
    if (a->ratio == 1) {
      st = dsv4i_gpu_linear(o, s, &a->c_wkv, n, x, dim, w->lat, hd, 0);
    } else {
      const dsv4i_gpu_kvtab cs = dsv4i_gkv_tab(&b->kv, DSV4I_KV_CSTATE, L);
      st = dsv4i_gpu_linear(o, s, &a->c_wkv, n, x, dim, w->kk, hd, 1);
      if (!st) st = dsv4i_gpu_linear(o, s, &a->c_wgate, n, x, dim, w->gg, hd, 1);
      if (!st) st = dsv4i_gpu_attn_compress(&b->ak, s, &cs, atok, n, hd, a->ratio, w->kk, w->gg, w->lat);
    }
    if (!st) st = dsv4i_gpu_rmsnorm(o, s, n, hd, w->lat, hd, a->c_norm, c->norm_eps, w->lat, hd);
  }
  if (!st && kv_src && (a->roles & DSV4_ROLE_INDEX_OWN_KEYS)) {
    const dsv4i_gpu_kvtab kt = dsv4i_gkv_tab(&b->kv, DSV4I_KV_IDXK, L);
    st = dsv4i_gpu_linear(o, s, &a->i_wk, n, w->lat, hd, w->ik, ihd, 0);
    if (!st) st = dsv4i_gpu_rmsnorm_rope(o, s, n, ihd, w->ik, ihd, a->i_knorm, c->norm_eps, w->ik, ihd,
                                        nf, a->freqs, gpos);
    if (!st) st = dsv4i_gpu_attn_idxk_store(&b->ak, s, &kt, atok, n, ihd, a->ratio, w->ik);
  }
  if (!st && idx_src) {
    const int64_t qld = (int64_t)IH * ihd;
    st = dsv4i_gpu_linear_q8_pre(o, s, &a->i_wq_b, n, w->rq, w->rsx, w->iq, qld); /* rq: step 1 */
    if (!st) st = dsv4i_gpu_rope(o, s, n, IH, nf, w->iq + (dsv4i_cuptr)(ihd - rd) * 2u, qld, ihd,
                                 a->freqs, pos, 0);
    if (!st) st = dsv4i_gpu_linear(o, s, &a->i_wproj, n, x, dim, w->iw, IH, 0);
    const int masked = a->candidate_source >= 0 && !(a->roles & DSV4_ROLE_CANDIDATE_SOURCE) &&
                       w->cand_ld > 0;
    dsv4i_gpu_index_args ia = {dsv4i_gkv_tab(&b->kv, DSV4I_KV_IDXK, a->index_key_source),
                               atok, n, IH, ihd, a->ratio, a->index_wscale, w->iq, w->iw,
                               masked ? w->cand : 0, w->cand_ld, c->candidate_block_size,
                               w->scores, w->score_ld};
    if (!st) st = dsv4i_gpu_attn_index_scores(&b->ak, s, &ia);
    if (!st && (a->roles & DSV4_ROLE_CANDIDATE_SOURCE))
      st = dsv4i_gpu_attn_candidates(&b->ak, s, atok, n, a->ratio, w->scores, w->score_ld,
                                     c->candidate_block_size, w->cand_ld, w->bws, w->bws_ld,
                                     w->cand, w->cand_ld);
    if (!st) st = dsv4i_gpu_attn_topk(&b->ak, s, atok, n, a->ratio, w->scores, w->score_ld,
                                      c->index_topk, w->topk, w->topk_ld, w->topk_ws,
                                      w->topk_ws_bytes);
  }
  if (!st && kv_src) {
    const dsv4i_gpu_kvtab ct = dsv4i_gkv_tab(&b->kv, DSV4I_KV_COMP, L);
    st = dsv4i_gpu_rope(o, s, n, 1, nf, w->lat + tail, hd, 0, a->freqs, gpos, 0);
    if (!st) st = dsv4i_gpu_attn_comp_store(&b->ak, s, &ct, atok, n, hd, a->ratio, w->lat);
  }
  /* 4. sparse attention, then the ring takes this call's window records */
  const dsv4i_gpu_kvtab win = dsv4i_gkv_tab(&b->kv, DSV4I_KV_WINDOW, L);
  if (!st) {
    dsv4i_gpu_sparse_args sa;
    memset(&sa, 0, sizeof sa);
    sa.win = win;
    if (a->ratio > 0) sa.comp = dsv4i_gkv_tab(&b->kv, DSV4I_KV_COMP, a->kv_source);
    sa.tok = atok;
    sa.n = n;
    sa.n_heads = H;
    sa.head_dim = hd;
    sa.window = c->window_size;
    sa.q = w->q;
    sa.kvw = w->kvw;
    sa.sel = a->ratio > 0 ? (idx_src && b->force_topk ? b->force_topk : w->topk) : 0;
    sa.sel_ld = a->ratio > 0 ? w->topk_ld : 0;
    sa.dspark_block = rw->dspark_block;
    sa.scale = a->softmax_scale;
    sa.sink = a->sink;
    sa.o = w->o;
    sa.ws = w->sparse;
    sa.ws_bytes = w->sparse_bytes;
    st = dsv4i_gpu_attn_sparse(&b->ak, s, &sa);
  }
  /* (a DSpark draft block's own KV is never stored) */
  if (!st && !rw->dspark_block)
    st = dsv4i_gpu_attn_window_store(&b->ak, s, &win, atok, n, hd, w->kv, 0);
  /* 5-6. inverse RoPE, grouped wo_a (bf16), wo_b (fp8) */
  const int64_t ldo = (int64_t)H * hd, ldu = (int64_t)G * c->o_lora_rank;
  if (!st) st = dsv4i_gpu_rope(o, s, n, H, nf, w->o + tail, ldo, hd, a->freqs, pos, 1);
  if (!st) st = wo_a(b, &a->wo_a, G, n, w->o, ldo, w->u, ldu);
  if (!st && tp_shard(b, L)) { /* this rank's wo_b columns in f32, summed, then rounded */
    st = dsv4i_gpu_act_quant(o, s, n, a->wo_b.cols, w->u, ldu, w->rq, w->rsx);
    if (!st) st = dsv4i_gpu_linear_q_f32(o, s, &a->wo_b, n, w->rq, w->rsx, w->tpf, dim);
    if (!st) st = tp_allreduce(b, w->tpf, (size_t)n * (size_t)dim, DSV4I_TP_F32);
    if (!st) st = dsv4i_gpu_cast_bf16(o, s, (int64_t)n * dim, w->tpf, out);
  } else if (!st) {
    st = dsv4i_gpu_lin_q(b, &a->wo_b, n, w->u, ldu, w->rq, w->rsx, out, dim);
  }
  return st;
}

/* ---- the block (spec §5.3-§5.5; lib/cpu/cpu_backend_ops.c) --------------------- */

static dsv4_status mixes(gpu_backend *b, const gpu_block *k, int32_t n, int which, dsv4i_cuptr h,
                         dsv4i_cuptr pre, dsv4i_cuptr post, dsv4i_cuptr comb) {
  const dsv4i_config *c = b->cfg;
  return dsv4i_gpu_hc_mixes_sinkhorn(&b->ops, b->g.stream, n, b->hc, b->dim, h, k->hc_fn[which],
                                     c->norm_eps, k->hc_scale[which], k->hc_base[which],
                                     c->hc_sinkhorn_iters, c->hc_eps, b->ws.mixes, pre, post, comb);
}

static dsv4_status moe(gpu_backend *b, int32_t layer, const gpu_block *k, int32_t n, dsv4i_cuptr x,
                       dsv4i_cuptr out) {
  const gpu_ws *w = &b->ws;
  const dsv4i_gpu_moe *m = &k->moe;
  dsv4_status st = dsv4i_gpu_linear(&b->ops, b->g.stream, &k->gate, n, x, b->dim, w->z,
                                    m->n_experts, 1);
  /* bias_vl is not loaded without a vision tower (the CPU backend's rule) */
  if (!st) st = dsv4i_gpu_router(&b->ops, b->g.stream, n, m->n_experts, m->top_k, w->z,
                                 m->n_experts, k->gate_bias, 0, 0, b->cfg->norm_topk_prob,
                                 b->cfg->route_scale, w->ridx, w->rw);
  if (!st && tp_shard(b, layer)) { /* this rank's expert rows in f32, summed, combined */
    st = dsv4i_gpu_moe_experts_part(&b->ops, b->g.stream, m, n, x, b->dim, w->ridx, w->rw,
                                    w->moe, w->tpf);
    if (!st) st = tp_allreduce(b, w->tpf, dsv4i_gpu_moe_rows_bytes(m, n) / 4, DSV4I_TP_F32);
    if (!st) st = dsv4i_gpu_moe_combine(&b->ops, b->g.stream, m, n, w->ridx, w->tpf, out, b->dim);
  } else if (!st) {
    st = dsv4i_gpu_moe_experts(&b->ops, b->g.stream, m, n, x, b->dim, w->ridx, w->rw, w->moe,
                               out, b->dim);
  }
  return st;
}

/* A TP binding over one rank (tp_size 1; tests/gpu/test_cuda_tp.c binds a one-rank NCCL
 * communicator): the all-reduce of a sublayer's bf16 output, the identity, issued where a
 * shard's sums meet. */
static dsv4_status tp_sum(gpu_backend *b, int32_t layer, int32_t n, dsv4i_cuptr y) {
  if (!b->tp || layer >= b->cfg->n_layers || b->base.tp_size > 1) return DSV4_OK;
  return tp_allreduce(b, y, (size_t)n * (size_t)b->dim, DSV4I_TP_BF16);
}

dsv4_status dsv4i_gpu_block_rows(gpu_backend *b, int32_t layer, const gpu_rows *rw, dsv4i_cuptr h,
                                 dsv4i_cuptr pre) {
  const dsv4i_config *c = b->cfg;
  const gpu_block *k = &b->blocks[layer];
  const gpu_ws *w = &b->ws;
  const dsv4i_gpu_ops *o = &b->ops;
  const dsv4i_custream s = b->g.stream;
  const int32_t n = rw->n, hc = b->hc, d = b->dim;
  /* attention sublayer: its mixes, and the collapse with the previous sublayer's pre
   * (lagged) normed, side by side in one launch */
  dsv4_status st = dsv4i_gpu_hc_entry(o, s, n, hc, d, h, k->hc_fn[0], c->norm_eps, k->hc_scale[0],
                                      k->hc_base[0], c->hc_sinkhorn_iters, c->hc_eps, w->mixes,
                                      w->a_pre, w->a_post, w->a_comb, pre, k->attn_norm, c->norm_eps,
                                      w->x);
  if (!st) st = attention(b, layer, rw, w->x, w->y);
  if (!st) st = tp_sum(b, layer, n, w->y);
  /* FFN sublayer: hc_post of the attention's output, collapsed with the attention
   * sublayer's pre and normed in one launch; its own pre goes out */
  if (!st) st = dsv4i_gpu_hc_post_pre_rmsnorm(o, s, n, hc, d, w->y, h, w->a_post, w->a_comb, h, w->a_pre,
                                              k->ffn_norm, c->norm_eps, w->x);
  if (!st) st = mixes(b, k, n, 1, h, pre, w->f_post, w->f_comb);
  if (!st) st = moe(b, layer, k, n, w->x, w->y);
  if (!st) st = tp_sum(b, layer, n, w->y);
  if (!st) st = dsv4i_gpu_hc_post(o, s, n, hc, d, w->y, h, w->f_post, w->f_comb, h);
  return st;
}

dsv4_status dsv4i_gpu_be_block(dsv4i_backend *be, int32_t layer, dsv4i_bbuf hb, dsv4i_bbuf preb,
                               dsv4i_bbuf taps) {
  gpu_backend *b = GPU(be);
  if (layer < be->first_layer || layer >= be->last_layer || b->n_tok < 1)
    return dsv4i_error(DSV4_ERR_INVALID_ARG, "cuda block: layer %d (stage [%d, %d)), %d tokens",
                       (int)layer, (int)be->first_layer, (int)be->last_layer, (int)b->n_tok);
  const dsv4i_cuptr h = D(hb.impl), pre = D(preb.impl);
  const gpu_rows rw = {b->step_rows, b->ws.atok, b->ws.pos, b->ws.gpos, 0};
  dsv4_status st = DSV4_OK;
  /* DSpark tap: the mean over the copies of the block's input */
  const int32_t tap = b->blocks[layer].tap;
  if (taps.impl && tap >= 0)
    st = dsv4i_gpu_hc_tap(&b->ops, b->g.stream, rw.n, b->hc, b->dim, h,
                          D(taps.impl) + (dsv4i_cuptr)tap * (dsv4i_cuptr)b->dim * 2u,
                          (int64_t)b->cfg->n_dspark_targets * b->dim);
  if (!st) st = dsv4i_gpu_block_rows(b, layer, &rw, h, pre);
  return note(b, st); /* the engine commits the lengths after the step */
}

/* Window records of main_kv rows x (bf16 [n][dim]): kv_norm(wkv(x)), RoPE, MXFP8 (a DSpark
 * stage's ring, spec §6.1). */
dsv4_status dsv4i_gpu_store_main_kv(gpu_backend *b, int32_t layer, const gpu_rows *rw,
                                    dsv4i_cuptr x) {
  const dsv4i_config *c = b->cfg;
  const gpu_attn *a = &b->blocks[layer].at;
  const gpu_ws *w = &b->ws;
  const int32_t n = rw->n, hd = c->head_dim, rd = c->rope_head_dim;
  const dsv4i_gpu_kvtab win = dsv4i_gkv_tab(&b->kv, DSV4I_KV_WINDOW, layer);
  dsv4_status st = dsv4i_gpu_lin_q(b, &a->wkv, n, x, c->dim, w->xq, w->sx, w->kv, hd);
  if (!st) st = dsv4i_gpu_rmsnorm_rope(&b->ops, b->g.stream, n, hd, w->kv, hd, a->kv_norm, c->norm_eps,
                                      w->kv, hd, rd / 2, a->freqs, rw->pos);
  if (!st) st = dsv4i_gpu_attn_window_store(&b->ak, b->g.stream, &win, rw->atok, n, hd, w->kv, 0);
  return st;
}

/* Rows idx[r] of src (row_bytes each, a multiple of 2) into dst: the embedding
 * kernel with one copy is a row gather (the one-hot `pre` goes to junk). */
static dsv4_status gather(gpu_backend *b, int32_t n, dsv4i_cuptr idx, dsv4i_cuptr src,
                          int64_t row_bytes, dsv4i_cuptr dst) {
  return dsv4i_gpu_embed_hc(&b->ops, b->g.stream, n, 1, (int32_t)(row_bytes / 2), idx, src, dst,
                            b->ws.junk);
}

dsv4_status dsv4i_gpu_be_head(dsv4i_backend *be, dsv4i_bbuf hb, dsv4i_bbuf preb,
                              dsv4i_bbuf logits) {
  gpu_backend *b = GPU(be);
  if (!be->has_head)
    return dsv4i_error(DSV4_ERR_INVALID_ARG, "cuda head: the stage [%d, %d) is not the last",
                       (int)be->first_layer, (int)be->last_layer);
  const gpu_ws *w = &b->ws;
  const int32_t r = b->step_out, hc = b->hc, d = b->dim;
  dsv4_status st = gather(b, r, w->out_tok, D(hb.impl), (int64_t)hc * d * 2, w->hsel);
  if (!st) st = gather(b, r, w->out_tok, D(preb.impl), (int64_t)hc * 4, w->presel);
  if (!st) st = dsv4i_gpu_hc_pre_rmsnorm(&b->ops, b->g.stream, r, hc, d, w->hsel, w->presel, b->norm,
                                       b->cfg->norm_eps, w->hx);
  if (!st) st = dsv4i_gpu_linear(&b->ops, b->g.stream, &b->head, r, w->hx, d, D(logits.impl),
                                 b->vocab, 1);
  return note(b, st);
}
