/*
 * CPU backend: bind the backbone blocks' weights (views into the mmapped
 * checkpoint, spec §4.2 names) and check every dtype and size the block
 * code relies on, so that nothing is looked up or checked on the hot path.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cpu/cpu_backend.h"

/* A tensor's data with its dtype and element count checked. */
static dsv4_status tensor(const cpu_backend *b, const char *name, int32_t dtype, int64_t n,
                          const void **out) {
  const void *data = NULL;
  const dsv4i_tensor_spec *sp = dsv4i_model_tensor(b->model, name, &data);
  if (!sp || !data) return dsv4i_error(DSV4_ERR_NOT_FOUND, "cpu backend: tensor %s is missing", name);
  int64_t cnt = 1;
  for (int32_t i = 0; i < sp->ndim; i++) cnt *= sp->shape[i];
  if (sp->dtype != dtype || cnt != n)
    return dsv4i_error(DSV4_ERR_WEIGHTS,
                       "cpu backend: tensor %s has dtype %d and %lld elements; expected dtype %d "
                       "and %lld", name, (int)sp->dtype, (long long)cnt, (int)dtype, (long long)n);
  *out = data;
  return DSV4_OK;
}

static dsv4_status view(const cpu_backend *b, const char *name, dsv4i_wview *out) {
  return dsv4i_wview_from_checkpoint(&b->model->ckpt, name, out);
}

static dsv4_status load_moe(cpu_backend *b, int32_t L, cpu_block *k) {
  const dsv4i_config *c = b->cfg;
  char nm[DSV4I_NAME_MAX + 32];
  dsv4i_moe *m = &k->moe;
  m->n_experts = c->n_routed_experts;
  m->top_k = c->n_experts_per_tok;
  m->dim = c->dim;
  m->inter = c->moe_inter_dim;
  m->route_scale = c->route_scale;
  m->swiglu_limit = c->swiglu_limit;
  m->norm_topk_prob = c->norm_topk_prob;
  k->experts = dsv4i_calloc(3 * (size_t)m->n_experts, sizeof *k->experts, "expert views");
  if (!k->experts) return DSV4_ERR_OUT_OF_MEMORY;
  snprintf(nm, sizeof nm, "layers.%d.ffn.gate.weight", (int)L);
  dsv4_status s = view(b, nm, &m->gate);
  snprintf(nm, sizeof nm, "layers.%d.ffn.gate.bias", (int)L);
  if (!s) s = tensor(b, nm, DSV4_DTYPE_F32, m->n_experts, (const void **)&m->bias);
  m->bias_vl = NULL; /* vision routing: not loaded without a vision tower (spec §5.5) */
  static const char *wn[3] = {"w1", "w2", "w3"};
  for (int32_t e = 0; !s && e < m->n_experts; e++)
    for (int32_t j = 0; !s && j < 3; j++) {
      snprintf(nm, sizeof nm, "layers.%d.ffn.experts.%d.%s.weight", (int)L, (int)e, wn[j]);
      s = view(b, nm, &k->experts[(size_t)j * (size_t)m->n_experts + (size_t)e]);
    }
  m->w1 = k->experts;
  m->w2 = k->experts + m->n_experts;
  m->w3 = k->experts + 2 * m->n_experts;
  m->has_shared = c->n_shared_experts > 0;
  if (m->has_shared) {
    dsv4i_wview *sw[3] = {&m->sw1, &m->sw2, &m->sw3};
    for (int32_t j = 0; !s && j < 3; j++) {
      snprintf(nm, sizeof nm, "layers.%d.ffn.shared_experts.%s.weight", (int)L, wn[j]);
      s = view(b, nm, sw[j]);
    }
  }
  return s;
}

static dsv4_status load_block(cpu_backend *b, int32_t L, cpu_block *k) {
  const dsv4i_config *c = b->cfg;
  const int64_t hc = c->hc_mult, nm_ = (2 + hc) * hc;
  char nm[DSV4I_NAME_MAX + 32];
  static const char *part[2] = {"attn", "ffn"};
  dsv4_status s = DSV4_OK;
  for (int32_t i = 0; !s && i < 2; i++) {
    snprintf(nm, sizeof nm, "layers.%d.hc_%s_fn", (int)L, part[i]);
    s = tensor(b, nm, DSV4_DTYPE_F32, nm_ * hc * c->dim, (const void **)&k->hc_fn[i]);
    snprintf(nm, sizeof nm, "layers.%d.hc_%s_scale", (int)L, part[i]);
    if (!s) s = tensor(b, nm, DSV4_DTYPE_F32, 3, (const void **)&k->hc_scale[i]);
    snprintf(nm, sizeof nm, "layers.%d.hc_%s_base", (int)L, part[i]);
    if (!s) s = tensor(b, nm, DSV4_DTYPE_F32, nm_, (const void **)&k->hc_base[i]);
  }
  snprintf(nm, sizeof nm, "layers.%d.attn_norm.weight", (int)L);
  if (!s) s = tensor(b, nm, DSV4_DTYPE_BF16, c->dim, (const void **)&k->attn_norm);
  snprintf(nm, sizeof nm, "layers.%d.ffn_norm.weight", (int)L);
  if (!s) s = tensor(b, nm, DSV4_DTYPE_BF16, c->dim, (const void **)&k->ffn_norm);
  if (!s) s = dsv4i_attn_layer_load(&b->model->ckpt, c, L, &k->attn);
  if (!s) s = load_moe(b, L, k);
  k->engram_slot = c->layers[L].engram_slot;
  if (!s && k->engram_slot >= 0)
    s = dsv4i_engram_layer_from_checkpoint(&b->model->ckpt, c, k->engram_slot, &k->engram);
  k->tap = -1;
  for (int32_t i = 0; i < c->n_dspark_targets; i++)
    if (c->dspark_targets[i] == L) k->tap = i;
  return s;
}

dsv4_status dsv4i_cpu_be_load_blocks(cpu_backend *b, const dsv4i_backend_desc *d) {
  const dsv4i_config *c = b->cfg;
  b->blocks = dsv4i_calloc((size_t)c->n_layers, sizeof *b->blocks, "cpu blocks");
  if (!b->blocks) return DSV4_ERR_OUT_OF_MEMORY;
  dsv4_status s = tensor(b, "embed.weight", DSV4_DTYPE_BF16, (int64_t)c->vocab_size * c->dim,
                         (const void **)&b->embed);
  if (!s) s = tensor(b, "norm.weight", DSV4_DTYPE_BF16, c->dim, (const void **)&b->norm);
  if (!s) s = view(b, "head.weight", &b->head);
  if (!s && (b->head.fmt != DSV4I_W_BF16 && b->head.fmt != DSV4I_W_F32))
    s = dsv4i_error(DSV4_ERR_WEIGHTS, "cpu backend: head.weight must be BF16 or F32");
  for (int32_t L = 0; !s && L < c->n_layers; L++) {
    s = load_block(b, L, &b->blocks[L]);
    if (s) dsv4i_error_prefix("cpu backend, layer %d", (int)L);
    if (!s && d->progress && d->progress("weights", L + 1, c->n_layers, d->progress_user))
      s = dsv4i_error(DSV4_ABORTED, "cpu backend: aborted by the progress callback");
  }
  return s;
}

void dsv4i_cpu_be_free_blocks(cpu_backend *b) {
  if (!b->blocks) return;
  for (int32_t L = 0; L < b->cfg->n_layers; L++) {
    dsv4i_attn_layer_free(&b->blocks[L].attn);
    free(b->blocks[L].experts);
  }
  free(b->blocks);
  b->blocks = NULL;
}
