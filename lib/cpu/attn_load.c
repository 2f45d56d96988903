/*
 * Attention layer weights from a checkpoint, and the per-forward shared
 * state (attention.h).
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cpu/attn_impl.h"

/* A weight matrix of a given shape (any format ops A supports). */
static dsv4_status get_w(const dsv4i_weights *wt, int32_t role, int32_t layer, int32_t rows,
                         int32_t cols, dsv4i_wview *w) {
  const dsv4i_weight *e;
  dsv4_status st = dsv4i_weights_get(wt, role, layer, -1, -1, -1, &e);
  if (!st) st = dsv4i_wview_from_weight(e, w);
  if (st != DSV4_OK) return st;
  if (w->rows != rows || w->cols != cols)
    return dsv4i_error(DSV4_ERR_WEIGHTS, "weight %s is [%d, %d], the config needs [%d, %d]",
                       dsv4i_weight_name(e), (int)w->rows, (int)w->cols, (int)rows, (int)cols);
  return DSV4_OK;
}

/* A 1-D tensor of n elements of one dtype. */
static dsv4_status get_vec(const dsv4i_weights *wt, int32_t role, int32_t layer, int32_t dtype,
                           int64_t n, const void **out) {
  const dsv4i_weight *e;
  dsv4_status st = dsv4i_weights_get(wt, role, layer, -1, dtype, n, &e);
  if (!st && e->ndim != 1)
    st = dsv4i_error(DSV4_ERR_WEIGHTS, "weight %s: want 1 dimension, found %d",
                     dsv4i_weight_name(e), (int)e->ndim);
  if (!st) *out = e->data;
  return st;
}

#define TRY(x)                                                                                 \
  do {                                                                                         \
    st = (x);                                                                                  \
    if (st != DSV4_OK) goto fail;                                                              \
  } while (0)

dsv4_status dsv4i_attn_layer_load(const dsv4i_weights *wt, const dsv4i_config *cfg,
                                  int32_t layer, dsv4i_attn_layer *out) {
  if (!out) return dsv4i_error(DSV4_ERR_INVALID_ARG, "attn_layer_load: NULL out");
  memset(out, 0, sizeof *out);
  if (!wt || !cfg || layer < 0 || layer >= cfg->n_total_layers)
    return dsv4i_error(DSV4_ERR_INVALID_ARG, "attn_layer_load: layer %d", (int)layer);
  dsv4i_attn_layer *L = out;
  dsv4_status st = DSV4_OK;
  L->layer = layer;
  L->role = cfg->layers[layer];
  L->dim = cfg->dim;
  L->n_heads = cfg->n_heads;
  L->head_dim = cfg->head_dim;
  L->rope_dim = cfg->rope_head_dim;
  L->q_lora = cfg->q_lora_rank;
  L->o_groups = cfg->o_groups;
  L->o_lora = cfg->o_lora_rank;
  L->window = cfg->window_size;
  L->ratio = L->role.compress_ratio;
  L->index_heads = cfg->index_n_heads;
  L->index_head_dim = cfg->index_head_dim;
  L->index_topk = cfg->index_topk;
  L->cand_blocks = cfg->candidate_topk_blocks;
  L->cand_block_size = cfg->candidate_block_size;
  L->eps = cfg->norm_eps;
  L->softmax_scale = (float)pow((double)L->head_dim, -0.5);
  L->index_wscale =
      L->index_head_dim > 0 && L->index_heads > 0
          ? (float)(pow((double)L->index_head_dim, -0.5) * pow((double)L->index_heads, -0.5))
          : 0.0f;
  L->n_freq = L->rope_dim / 2;
  const int32_t hd = L->head_dim, H = L->n_heads, G = L->o_groups;
  if (L->rope_dim <= 0 || L->rope_dim % 2 || L->n_freq > DSV4I_ATTN_MAX_FREQ ||
      L->rope_dim > hd || hd % 32 || G <= 0 || (H * hd) % G || L->window <= 0)
    return dsv4i_error(DSV4_ERR_INVALID_ARG, "attn_layer_load: unsupported dims (head_dim %d, "
                       "rope %d, groups %d)", (int)hd, (int)L->rope_dim, (int)G);

  const void *v;
  TRY(get_w(wt, DSV4I_W_ATTN_WQ_A, layer, L->q_lora, L->dim, &L->wq_a));
  TRY(get_w(wt, DSV4I_W_ATTN_WQ_B, layer, H * hd, L->q_lora, &L->wq_b));
  TRY(get_w(wt, DSV4I_W_ATTN_WKV, layer, hd, L->dim, &L->wkv));
  TRY(get_w(wt, DSV4I_W_ATTN_WO_B, layer, L->dim, G * L->o_lora, &L->wo_b));
  dsv4i_wview woa;
  TRY(get_w(wt, DSV4I_W_ATTN_WO_A, layer, G * L->o_lora, H * hd / G, &woa));
  L->wo_a_bf16 = dsv4i_malloc((size_t)woa.rows * (size_t)woa.cols * sizeof(uint16_t), "wo_a");
  if (!L->wo_a_bf16) {
    st = DSV4_ERR_OUT_OF_MEMORY;
    goto fail;
  }
  TRY(dsv4i_wview_dequant_bf16(&woa, L->wo_a_bf16));
  TRY(dsv4i_wview_init(&L->wo_a, DSV4I_W_BF16, woa.rows, woa.cols, L->wo_a_bf16, NULL));
  TRY(get_vec(wt, DSV4I_W_ATTN_Q_NORM, layer, DSV4_DTYPE_BF16, L->q_lora, &v));
  L->q_norm = v;
  TRY(get_vec(wt, DSV4I_W_ATTN_KV_NORM, layer, DSV4_DTYPE_BF16, hd, &v));
  L->kv_norm = v;
  TRY(get_vec(wt, DSV4I_W_ATTN_SINK, layer, DSV4_DTYPE_F32, H, &v));
  L->sink = v;

  const uint32_t roles = L->role.roles;
  if (L->ratio > 0 && (roles & DSV4_ROLE_KV_SOURCE)) {
    TRY(get_w(wt, DSV4I_W_COMP_WKV, layer, hd, L->dim, &L->c_wkv));
    if (L->ratio > 1) TRY(get_w(wt, DSV4I_W_COMP_WGATE, layer, hd, L->dim, &L->c_wgate));
    TRY(get_vec(wt, DSV4I_W_COMP_NORM, layer, DSV4_DTYPE_BF16, hd, &v));
    L->c_norm = v;
    if ((L->ratio == 1 && L->c_wkv.fmt != DSV4I_W_BF16) ||
        (L->ratio > 1 && (L->c_wkv.fmt > DSV4I_W_BF16 || L->c_wgate.fmt > DSV4I_W_BF16))) {
      st = dsv4i_error(DSV4_ERR_WEIGHTS, "layer %d: compressor weights must be BF16/F32",
                       (int)layer);
      goto fail;
    }
  }
  if (L->ratio > 0 && (roles & DSV4_ROLE_INDEX_SOURCE)) {
    const int32_t IH = L->index_heads, ihd = L->index_head_dim;
    if (IH <= 0 || ihd <= 0 || ihd % 32 || L->rope_dim > ihd || L->index_topk <= 0) {
      st = dsv4i_error(DSV4_ERR_INVALID_ARG, "layer %d: indexer dims", (int)layer);
      goto fail;
    }
    TRY(get_w(wt, DSV4I_W_IDX_WQ_B, layer, IH * ihd, L->q_lora, &L->i_wq_b));
    TRY(get_w(wt, DSV4I_W_IDX_WPROJ, layer, IH, L->dim, &L->i_wproj));
    if (roles & DSV4_ROLE_INDEX_OWN_KEYS) {
      TRY(get_w(wt, DSV4I_W_IDX_WK, layer, ihd, hd, &L->i_wk));
      TRY(get_vec(wt, DSV4I_W_IDX_K_NORM, layer, DSV4_DTYPE_BF16, ihd, &v));
      L->i_knorm = v;
    }
    if ((roles & DSV4_ROLE_CANDIDATE_SOURCE) && (L->cand_blocks <= 0 || L->cand_block_size <= 0)) {
      st = dsv4i_error(DSV4_ERR_INVALID_ARG, "layer %d: candidate dims", (int)layer);
      goto fail;
    }
  }
  if (L->ratio > 0)
    TRY(dsv4i_rope_freqs(L->rope_dim, cfg->compress_rope_theta, cfg->original_seq_len,
                         cfg->rope_factor, cfg->beta_fast, cfg->beta_slow, L->freqs));
  else
    TRY(dsv4i_rope_freqs(L->rope_dim, cfg->rope_theta, 0, 1.0, 1.0, 1.0, L->freqs));
  return DSV4_OK;
fail:
  dsv4i_attn_layer_free(L);
  return st;
}

void dsv4i_attn_layer_free(dsv4i_attn_layer *L) {
  if (!L) return;
  free(L->wo_a_bf16);
  memset(L, 0, sizeof *L);
}

dsv4_status dsv4i_attn_shared_init(const dsv4i_config *cfg, int32_t max_tok,
                                   dsv4i_attn_shared *sh) {
  if (!sh) return dsv4i_error(DSV4_ERR_INVALID_ARG, "attn_shared_init: NULL");
  memset(sh, 0, sizeof *sh);
  if (!cfg || max_tok <= 0) return dsv4i_error(DSV4_ERR_INVALID_ARG, "attn_shared_init: args");
  sh->cap_tok = max_tok;
  sh->topk_ld = cfg->index_topk > 0 ? cfg->index_topk : 1;
  sh->cand_ld = cfg->candidate_source >= 0 && cfg->candidate_topk_blocks > 0
                    ? cfg->candidate_topk_blocks : 0;
  sh->topk = dsv4i_malloc((size_t)max_tok * (size_t)sh->topk_ld * sizeof(int32_t), "top-k rows");
  if (sh->cand_ld)
    sh->cand = dsv4i_malloc((size_t)max_tok * (size_t)sh->cand_ld * sizeof(int32_t),
                            "candidate rows");
  if (!sh->topk || (sh->cand_ld && !sh->cand)) {
    dsv4i_attn_shared_free(sh);
    return DSV4_ERR_OUT_OF_MEMORY;
  }
  for (int64_t i = 0; i < (int64_t)max_tok * sh->topk_ld; i++) sh->topk[i] = -1;
  for (int64_t i = 0; i < (int64_t)max_tok * sh->cand_ld; i++) sh->cand[i] = -1;
  return DSV4_OK;
}

void dsv4i_attn_shared_free(dsv4i_attn_shared *sh) {
  if (!sh) return;
  free(sh->topk);
  free(sh->cand);
  memset(sh, 0, sizeof *sh);
}
