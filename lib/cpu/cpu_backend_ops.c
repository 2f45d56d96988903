/*
 * CPU backend step ops (backend/backend.h): embedding and HC expansion,
 * Engram, the backbone block with lagged hyper-connections, head, sampling.
 * Each is a sequence of cpu_ops / attention / engram calls in the
 * reference's order (spec §5.1-§5.6); no arithmetic of its own except the
 * DSpark tap mean.
 */
#include <stdlib.h>
#include <string.h>

#include "cpu/cpu_backend.h"
#include "model/formats.h"

#define CPU(be) ((cpu_backend *)(be))

dsv4_status dsv4i_cpu_be_embed(dsv4i_backend *be, dsv4i_bbuf hb, dsv4i_bbuf preb) {
  cpu_backend *b = CPU(be);
  if (!be->has_embed)
    return dsv4i_error(DSV4_ERR_INVALID_ARG, "cpu embed: the stage [%d, %d) is not the first",
                       (int)be->first_layer, (int)be->last_layer);
  uint16_t *h = hb.impl;
  float *pre = preb.impl;
  const size_t d = (size_t)b->dim, hc = (size_t)b->hc;
  for (int32_t t = 0; t < b->n_tok; t++) { /* spec §5.1: 4 copies, pre = one-hot copy 0 */
    const uint16_t *row = b->embed + (size_t)b->tok[t] * d;
    for (size_t c = 0; c < hc; c++) {
      memcpy(h + ((size_t)t * hc + c) * d, row, d * sizeof *row);
      pre[(size_t)t * hc + c] = c == 0 ? 1.0f : 0.0f;
    }
  }
  return DSV4_OK;
}

dsv4_status dsv4i_cpu_be_engram(dsv4i_backend *be, int32_t layer, dsv4i_bbuf hb) {
  cpu_backend *b = CPU(be);
  if (layer < be->first_layer || layer >= be->last_layer || b->blocks[layer].engram_slot < 0)
    return dsv4i_error(DSV4_ERR_INVALID_ARG, "cpu engram: layer %d is not an Engram layer",
                       (int)layer);
  const cpu_block *k = &b->blocks[layer];
  const int64_t n_cols = k->engram.n_cols;
  /* the gate's exp split is per reference call (docs/cpu-numerics.md): a prefill
   * chunk's tokens are one call, a decode-layout token (decode, verify) one of its own */
  int32_t *run = dsv4i_malloc((size_t)b->n_tok * sizeof *run, "engram calls");
  if (!run) return DSV4_ERR_OUT_OF_MEMORY;
  dsv4i_engram_calls(b->n_tok, b->layout, b->seq, run);
  const dsv4_status s =
      dsv4i_cpu_engram_runs(&k->engram, b->n_tok, run, b->engram_ids + k->engram_slot * n_cols,
                            b->n_engram_cols, b->has_image ? b->image : NULL, hb.impl);
  free(run);
  return s;
}

/* DSpark tap (spec §5.6 item 4): bf16 mean over the hc copies of the block input. */
static void tap(const cpu_backend *b, int32_t rank, const uint16_t *h, uint16_t *taps) {
  const size_t d = (size_t)b->dim, hc = (size_t)b->hc, nt = (size_t)b->cfg->n_dspark_targets;
  for (int32_t t = 0; t < b->n_tok; t++)
    for (size_t i = 0; i < d; i++) {
      float s = 0.0f;
      for (size_t c = 0; c < hc; c++) s += dsv4i_bf16_to_f32(h[((size_t)t * hc + c) * d + i]);
      taps[((size_t)t * nt + (size_t)rank) * d + i] = dsv4i_f32_to_bf16(s / (float)hc);
    }
}

/* One hyper-connected sublayer's mix coefficients (spec §5.3 hc_mixes + Sinkhorn). */
static dsv4_status mixes(cpu_backend *b, const cpu_block *k, int which, const uint16_t *h,
                         float *pre, float *post, float *comb) {
  const dsv4i_config *c = b->cfg;
  dsv4_status s = dsv4i_cpu_hc_mixes(b->n_tok, b->hc, b->dim, h, k->hc_fn[which], c->norm_eps,
                                     b->mixes);
  if (!s)
    s = dsv4i_cpu_hc_split_sinkhorn(b->n_tok, b->hc, b->mixes, k->hc_scale[which],
                                    k->hc_base[which], c->hc_sinkhorn_iters, c->hc_eps, pre,
                                    post, comb);
  return s;
}

dsv4_status dsv4i_cpu_be_block(dsv4i_backend *be, int32_t layer, dsv4i_bbuf hb, dsv4i_bbuf preb,
                               dsv4i_bbuf taps) {
  cpu_backend *b = CPU(be);
  const dsv4i_config *c = b->cfg;
  if (layer < be->first_layer || layer >= be->last_layer || b->n_tok < 1)
    return dsv4i_error(DSV4_ERR_INVALID_ARG, "cpu block: layer %d (stage [%d, %d)), %d tokens",
                       (int)layer, (int)be->first_layer, (int)be->last_layer, (int)b->n_tok);
  if (b->fault_after > 0 && --b->fault_after == 0) /* test hook (cpu_test_hooks.h) */
    return dsv4i_error(b->fault, "cpu block: injected fault at layer %d", (int)layer);
  const cpu_block *k = &b->blocks[layer];
  uint16_t *h = hb.impl;
  float *pre = preb.impl;
  const int64_t n = b->n_tok, d = b->dim;
  if (taps.impl && k->tap >= 0) tap(b, k->tap, h, taps.impl);

  /* attention sublayer: collapse with the previous sublayer's pre (lagged) */
  dsv4_status s = mixes(b, k, 0, h, b->a_pre, b->a_post, b->a_comb);
  if (!s) s = dsv4i_cpu_hc_pre(n, b->hc, b->dim, h, pre, b->x);
  if (!s) s = dsv4i_cpu_rmsnorm(n, b->dim, b->x, d, k->attn_norm, c->norm_eps, b->x, d);
  if (!s) {
    const dsv4i_attn_batch ab = {b->n_tok, b->tokseq, b->pos, b->layout};
    if (layer == be->first_layer) { /* a new forward: no shared runtime state carried over
                                     * (a stage starts at an index source: design §6) */
      if (b->sh.topk) memset(b->sh.topk, 0xff, sizeof(int32_t) * (size_t)n * (size_t)b->sh.topk_ld);
      if (b->sh.cand) memset(b->sh.cand, 0xff, sizeof(int32_t) * (size_t)n * (size_t)b->sh.cand_ld);
    }
    s = dsv4i_attn_forward(&k->attn, &ab, b->x, &b->sh, b->y);
  }
  if (!s) s = dsv4i_cpu_hc_post(n, b->hc, b->dim, b->y, h, b->a_post, b->a_comb, h);
  if (!s && b->fault_mid_after > 0 && --b->fault_mid_after == 0) /* test hook */
    return dsv4i_error(b->fault_mid, "cpu block: injected fault inside layer %d, after its "
                       "attention", (int)layer);

  /* FFN sublayer: collapse with the attention sublayer's pre; its own pre goes out */
  if (!s) s = mixes(b, k, 1, h, pre, b->f_post, b->f_comb);
  if (!s) s = dsv4i_cpu_hc_pre(n, b->hc, b->dim, h, b->a_pre, b->x);
  if (!s) s = dsv4i_cpu_rmsnorm(n, b->dim, b->x, d, k->ffn_norm, c->norm_eps, b->x, d);
  if (!s) s = dsv4i_cpu_moe(&k->moe, n, b->x, d, b->has_image ? b->image : NULL, b->y, d);
  if (!s) s = dsv4i_cpu_hc_post(n, b->hc, b->dim, b->y, h, b->f_post, b->f_comb, h);

  return s;
}

dsv4_status dsv4i_cpu_be_head(dsv4i_backend *be, dsv4i_bbuf hb, dsv4i_bbuf preb,
                              dsv4i_bbuf logits) {
  cpu_backend *b = CPU(be);
  if (!be->has_head)
    return dsv4i_error(DSV4_ERR_INVALID_ARG, "cpu head: the stage [%d, %d) is not the last",
                       (int)be->first_layer, (int)be->last_layer);
  const uint16_t *h = hb.impl;
  const float *pre = preb.impl;
  const size_t d = (size_t)b->dim, hc = (size_t)b->hc;
  for (int32_t r = 0; r < b->n_out; r++) {
    const size_t t = (size_t)b->out_tok[r];
    memcpy(b->hsel + (size_t)r * hc * d, h + t * hc * d, hc * d * sizeof *h);
    memcpy(b->presel + (size_t)r * hc, pre + t * hc, hc * sizeof *pre);
  }
  return dsv4i_cpu_head(b->n_out, b->hc, b->dim, b->hsel, b->presel, b->norm, b->cfg->norm_eps,
                        &b->head, logits.impl, NULL);
}

dsv4_status dsv4i_cpu_be_sample(dsv4i_backend *be, dsv4i_bbuf logits, int32_t n,
                                const dsv4i_sample_req *req, int32_t *tokens) {
  cpu_backend *b = CPU(be);
  if (n < 0 || n > b->max_out || (n > 0 && (!req || !tokens)))
    return dsv4i_error(DSV4_ERR_INVALID_ARG, "cpu sample: %d rows", (int)n);
  const float *l = logits.impl;
  for (int32_t r = 0; r < n; r++) {
    const float *row = l + (size_t)r * (size_t)b->vocab;
    const int32_t nv = dsv4i_cpu_valid_ids(req[r].n_valid, b->vocab);
    tokens[r] = dsv4i_cpu_sample(row, nv, req[r].temperature, req[r].seed, req[r].counter);
    if (tokens[r] < 0) return dsv4i_cpu_not_finite_error(row, nv, "logits row", r);
  }
  return DSV4_OK;
}

dsv4_status dsv4i_cpu_be_accept(dsv4i_backend *be, dsv4i_bbuf logits, int32_t row,
                                const dsv4i_accept_req *req, int32_t *accepted, int32_t *token) {
  cpu_backend *b = CPU(be);
  if (row < 0 || row >= b->max_out || !req || req->draft < 0 || req->draft >= b->vocab ||
      !accepted || !token)
    return dsv4i_error(DSV4_ERR_INVALID_ARG, "cpu accept: row %d", (int)row);
  dsv4i_accept_row((const float *)logits.impl + (size_t)row * (size_t)b->vocab, b->vocab, req,
                   b->accept_scratch, accepted, token);
  return DSV4_OK;
}

dsv4_status dsv4i_cpu_be_run(dsv4i_backend *be, const dsv4i_step_io *io) {
  return dsv4i_backend_run_blocks(be, io, NULL);
}

void dsv4i_cpu_backend_inject_fault(dsv4i_backend *be, int32_t after_blocks, dsv4_status st) {
  cpu_backend *b = CPU(be);
  b->fault_after = after_blocks;
  b->fault = st;
}

void dsv4i_cpu_backend_inject_layer_fault(dsv4i_backend *be, int32_t after_blocks, dsv4_status st) {
  cpu_backend *b = CPU(be);
  b->fault_mid_after = after_blocks;
  b->fault_mid = st;
}

void dsv4i_cpu_backend_inject_copy_fault(dsv4i_backend *be, dsv4_status st) {
  CPU(be)->copy_fault = st;
}
