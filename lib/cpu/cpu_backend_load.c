/*
 * CPU backend: bind the weights of the backbone blocks and DSpark stages by
 * role (model/weights.h; views into the mmapped checkpoint) and check every dtype and size the block
 * code relies on, so that nothing is looked up or checked on the hot path.
 */
#include <stdlib.h>
#include <string.h>

#include "cpu/cpu_backend.h"
#include "cpu/cpu_tp.h"

dsv4_status dsv4i_cpu_weight_data(const cpu_backend *b, int32_t role, int32_t layer,
                                  int32_t dtype, int64_t n, const void **out) {
  const dsv4i_weight *w;
  dsv4_status s = dsv4i_model_weight(b->model, role, layer, -1, dtype, n, &w);
  *out = s ? NULL : w->data;
  return s;
}

dsv4_status dsv4i_cpu_weight_view(const cpu_backend *b, int32_t role, int32_t layer, int32_t expert,
                                  dsv4i_wview *out) {
  const dsv4i_weight *w;
  dsv4_status s = dsv4i_model_weight(b->model, role, layer, expert, -1, -1, &w);
  return s ? s : dsv4i_wview_from_weight(w, out);
}

static dsv4_status load_moe(cpu_backend *b, int32_t L, cpu_block *k) {
  const dsv4i_config *c = b->cfg;
  const int dspark = L >= c->n_layers;
  dsv4i_moe *m = &k->moe;
  m->n_experts = dspark ? c->dspark_n_routed_experts : c->n_routed_experts;
  m->top_k = dspark ? c->dspark_n_experts_per_tok : c->n_experts_per_tok;
  m->dim = c->dim;
  m->inter = c->moe_inter_dim;
  m->route_scale = c->route_scale;
  m->swiglu_limit = c->swiglu_limit;
  m->norm_topk_prob = c->norm_topk_prob;
  k->experts = dsv4i_calloc(3 * (size_t)m->n_experts, sizeof *k->experts, "expert views");
  if (!k->experts) return DSV4_ERR_OUT_OF_MEMORY;
  dsv4_status s = dsv4i_cpu_weight_view(b, DSV4I_W_GATE, L, -1, &m->gate);
  if (!s) s = dsv4i_cpu_weight_data(b, DSV4I_W_GATE_BIAS, L, DSV4_DTYPE_F32, m->n_experts,
                                    (const void **)&m->bias);
  m->bias_vl = NULL; /* vision routing: not loaded without a vision tower (spec §5.5) */
  static const int32_t wr[3] = {DSV4I_W_EXPERT_W1, DSV4I_W_EXPERT_W2, DSV4I_W_EXPERT_W3};
  static const int32_t sr[3] = {DSV4I_W_SHARED_W1, DSV4I_W_SHARED_W2, DSV4I_W_SHARED_W3};
  for (int32_t e = 0; !s && e < m->n_experts; e++)
    for (int32_t j = 0; !s && j < 3; j++)
      s = dsv4i_cpu_weight_view(b, wr[j], L, e,
                                &k->experts[(size_t)j * (size_t)m->n_experts + (size_t)e]);
  m->w1 = k->experts;
  m->w2 = k->experts + m->n_experts;
  m->w3 = k->experts + 2 * m->n_experts;
  m->has_shared = c->n_shared_experts > 0;
  dsv4i_wview *sw[3] = {&m->sw1, &m->sw2, &m->sw3};
  for (int32_t j = 0; !s && m->has_shared && j < 3; j++)
    s = dsv4i_cpu_weight_view(b, sr[j], L, -1, sw[j]);
  return s;
}

dsv4_status dsv4i_cpu_load_block(cpu_backend *b, int32_t L, cpu_block *k) {
  const dsv4i_config *c = b->cfg;
  const int64_t hc = c->hc_mult, nm = (2 + hc) * hc;
  static const int32_t fn[2] = {DSV4I_W_HC_ATTN_FN, DSV4I_W_HC_FFN_FN};
  static const int32_t sc[2] = {DSV4I_W_HC_ATTN_SCALE, DSV4I_W_HC_FFN_SCALE};
  static const int32_t ba[2] = {DSV4I_W_HC_ATTN_BASE, DSV4I_W_HC_FFN_BASE};
  dsv4_status s = DSV4_OK;
  for (int32_t i = 0; !s && i < 2; i++) {
    s = dsv4i_cpu_weight_data(b, fn[i], L, DSV4_DTYPE_F32, nm * hc * c->dim,
                              (const void **)&k->hc_fn[i]);
    if (!s) s = dsv4i_cpu_weight_data(b, sc[i], L, DSV4_DTYPE_F32, 3, (const void **)&k->hc_scale[i]);
    if (!s) s = dsv4i_cpu_weight_data(b, ba[i], L, DSV4_DTYPE_F32, nm, (const void **)&k->hc_base[i]);
  }
  if (!s) s = dsv4i_cpu_weight_data(b, DSV4I_W_ATTN_NORM, L, DSV4_DTYPE_BF16, c->dim,
                                    (const void **)&k->attn_norm);
  if (!s) s = dsv4i_cpu_weight_data(b, DSV4I_W_FFN_NORM, L, DSV4_DTYPE_BF16, c->dim,
                                    (const void **)&k->ffn_norm);
  if (!s) s = dsv4i_attn_layer_load(dsv4i_model_weights(b->model), c, L, &k->attn);
  if (!s) s = load_moe(b, L, k);
  k->engram_slot = c->layers[L].engram_slot;
  if (!s && k->engram_slot >= 0)
    s = dsv4i_engram_layer_load(dsv4i_model_weights(b->model), c, k->engram_slot, &k->engram);
  k->tap = -1;
  for (int32_t i = 0; i < c->n_dspark_targets; i++)
    if (c->dspark_targets[i] == L) k->tap = i;
  return s;
}

void dsv4i_cpu_free_block(cpu_block *k) {
  dsv4i_attn_layer_free(&k->attn);
  free(k->experts);
  k->experts = NULL;
}

dsv4_status dsv4i_cpu_be_load_blocks(cpu_backend *b, const dsv4i_backend_desc *d) {
  const dsv4i_config *c = b->cfg;
  const dsv4i_backend *be = &b->base;
  b->blocks = dsv4i_calloc((size_t)c->n_layers, sizeof *b->blocks, "cpu blocks");
  if (!b->blocks) return DSV4_ERR_OUT_OF_MEMORY;
  dsv4_status s = DSV4_OK;
  /* stage ownership: embed on the first stage, head on the last; the DSpark stages on
   * the last one embed their block tokens with the same table */
  if (be->has_embed || (be->has_head && c->n_mtp_layers > 0))
    s = dsv4i_cpu_weight_data(b, DSV4I_W_EMBED, -1, DSV4_DTYPE_BF16,
                              (int64_t)c->vocab_size * c->dim, (const void **)&b->embed);
  if (!s && be->has_head)
    s = dsv4i_cpu_weight_data(b, DSV4I_W_NORM, -1, DSV4_DTYPE_BF16, c->dim, (const void **)&b->norm);
  if (!s && be->has_head) s = dsv4i_cpu_weight_view(b, DSV4I_W_HEAD, -1, -1, &b->head);
  if (!s && be->has_head && (b->head.fmt != DSV4I_W_BF16 && b->head.fmt != DSV4I_W_F32))
    s = dsv4i_error(DSV4_ERR_WEIGHTS, "cpu backend: the head must be BF16 or F32");
  const int32_t n = be->last_layer - be->first_layer;
  for (int32_t L = be->first_layer; !s && L < be->last_layer; L++) {
    s = dsv4i_cpu_load_block(b, L, &b->blocks[L]);
    /* tensor parallelism: this rank's share of the backbone block (the DSpark stages
     * on the last stage stay whole: every TP rank drafts the same) */
    if (!s && be->tp_size > 1) s = dsv4i_cpu_tp_shard(&b->blocks[L], be->tp_rank, be->tp_size, b->tp);
    if (s) dsv4i_error_prefix("cpu backend, layer %d", (int)L);
    if (!s && d->progress && d->progress("weights", L - be->first_layer + 1, n, d->progress_user))
      s = dsv4i_error(DSV4_ABORTED, "cpu backend: aborted by the progress callback");
  }
  return s;
}

void dsv4i_cpu_be_free_blocks(cpu_backend *b) {
  if (!b->blocks) return;
  for (int32_t L = 0; L < b->cfg->n_layers; L++) dsv4i_cpu_free_block(&b->blocks[L]);
  free(b->blocks);
  b->blocks = NULL;
}
