/*
 * CPU backend: DSpark draft head (spec §6.1). See cpu_dspark.h for what is
 * computed; the attention of a stage is attn_dspark.c.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cpu/cpu_backend.h"
#include "cpu/cpu_dspark.h"
#include "model/formats.h"

struct cpu_dspark {
  int32_t n_stages, block, rank, n_taps;
  cpu_block *st;              /**< [n_stages]: layers n_layers + S */
  dsv4i_wview main_proj;      /**< FP8 [dim][n_taps·dim] */
  const uint16_t *main_norm;  /**< bf16 [dim] */
  const uint16_t *norm;       /**< bf16 [dim]: the last stage's norm */
  const uint16_t *mk_embed;   /**< bf16 [vocab][rank]: markov_head.embed */
  dsv4i_wview mk_head;        /**< BF16 [vocab][rank]: markov_head.head (upcast) */
  dsv4i_wview conf;           /**< BF16 [1][dim + rank]: confidence_head.proj (upcast) */
  uint16_t *main_x;           /**< scratch bf16 [max_tok][dim] for dspark_extend */
};

/* ---- weights ---------------------------------------------------------------- */

static dsv4_status view(const cpu_backend *b, int32_t role, int32_t layer, int32_t rows,
                        int32_t cols, dsv4i_wview *out) {
  dsv4_status s = dsv4i_cpu_weight_view(b, role, layer, -1, out);
  if (!s && (out->rows != rows || out->cols != cols))
    s = dsv4i_error(DSV4_ERR_WEIGHTS, "cpu DSpark: %s of stage %d is [%d, %d]; expected [%d, %d]",
                    dsv4i_weight_role_name(role), (int)(layer - b->cfg->n_layers), (int)out->rows,
                    (int)out->cols, (int)rows, (int)cols);
  return s;
}

void dsv4i_cpu_dspark_free(cpu_backend *b) {
  cpu_dspark *d = b ? b->dspark : NULL;
  if (!d) return;
  for (int32_t S = 0; d->st && S < d->n_stages; S++) dsv4i_cpu_free_block(&d->st[S]);
  free(d->st);
  free(d->main_x);
  free(d);
  b->dspark = NULL;
}

dsv4_status dsv4i_cpu_dspark_load(cpu_backend *b) {
  const dsv4i_config *c = b->cfg;
  b->dspark = NULL;
  if (c->n_mtp_layers <= 0 || c->dspark_block_size <= 0 || !b->base.has_head)
    return DSV4_OK; /* DSpark runs on the last stage */
  if (c->n_dspark_targets <= 0)
    return dsv4i_error(DSV4_ERR_WEIGHTS, "cpu DSpark: %d stages but no target layers",
                       (int)c->n_mtp_layers);
  cpu_dspark *d = dsv4i_calloc(1, sizeof *d, "cpu DSpark");
  if (!d) return DSV4_ERR_OUT_OF_MEMORY;
  b->dspark = d;
  d->n_stages = c->n_mtp_layers;
  d->block = c->dspark_block_size;
  d->rank = c->dspark_markov_rank;
  d->n_taps = c->n_dspark_targets;
  const int32_t last = d->n_stages - 1, V = c->vocab_size, dim = c->dim;
  d->st = dsv4i_calloc((size_t)d->n_stages, sizeof *d->st, "DSpark stages");
  d->main_x = dsv4i_calloc((size_t)b->max_tok * (size_t)dim, sizeof *d->main_x, "DSpark main_x");
  dsv4_status s = d->st && d->main_x ? DSV4_OK : DSV4_ERR_OUT_OF_MEMORY;
  const int32_t first_l = c->n_layers, last_l = c->n_layers + last;
  if (!s) s = view(b, DSV4I_W_DSPARK_MAIN_PROJ, first_l, dim, d->n_taps * dim, &d->main_proj);
  if (!s) s = dsv4i_cpu_weight_data(b, DSV4I_W_DSPARK_MAIN_NORM, first_l, DSV4_DTYPE_BF16, dim,
                                    (const void **)&d->main_norm);
  if (!s) s = dsv4i_cpu_weight_data(b, DSV4I_W_DSPARK_NORM, last_l, DSV4_DTYPE_BF16, dim,
                                    (const void **)&d->norm);
  if (!s) s = dsv4i_cpu_weight_data(b, DSV4I_W_DSPARK_MARKOV_EMBED, last_l, DSV4_DTYPE_BF16,
                                    (int64_t)V * d->rank, (const void **)&d->mk_embed);
  if (!s) s = view(b, DSV4I_W_DSPARK_MARKOV_HEAD, last_l, V, d->rank, &d->mk_head);
  if (!s) s = view(b, DSV4I_W_DSPARK_CONF_PROJ, last_l, 1, dim + d->rank, &d->conf);
  if (!s && (d->main_proj.fmt != DSV4I_W_FP8 ||
             (d->mk_head.fmt != DSV4I_W_BF16 && d->mk_head.fmt != DSV4I_W_F32) ||
             (d->conf.fmt != DSV4I_W_BF16 && d->conf.fmt != DSV4I_W_F32)))
    s = dsv4i_error(DSV4_ERR_WEIGHTS, "cpu DSpark: main_proj must be FP8, the Markov head and "
                    "the confidence projection BF16 or F32");
  for (int32_t S = 0; !s && S < d->n_stages; S++) {
    s = dsv4i_cpu_load_block(b, c->n_layers + S, &d->st[S]);
    if (s) dsv4i_error_prefix("cpu DSpark stage %d", (int)S);
  }
  if (s) dsv4i_cpu_dspark_free(b);
  return s;
}

/* ---- ring extension (spec §6.1 Prefill, §6.2 step 5) -------------------- */

/* main_x = main_norm(main_proj(main_hidden)), then every stage stores its main_kv. */
static dsv4_status store(cpu_backend *b, int32_t n, dsv4i_kv_view *const *seq, const int64_t *pos,
                         const uint16_t *main_hidden, uint16_t *main_x) {
  cpu_dspark *d = b->dspark;
  const int32_t dim = b->dim;
  dsv4_status s = dsv4i_cpu_linear(&d->main_proj, n, main_hidden, (int64_t)d->n_taps * dim,
                                   main_x, dim);
  if (!s) s = dsv4i_cpu_rmsnorm(n, dim, main_x, dim, d->main_norm, b->cfg->norm_eps, main_x, dim);
  for (int32_t S = 0; !s && S < d->n_stages; S++)
    s = dsv4i_attn_dspark_store(&d->st[S].attn, n, seq, pos, main_x);
  return s;
}

dsv4_status dsv4i_cpu_be_dspark_extend(dsv4i_backend *be, dsv4i_bbuf taps) {
  cpu_backend *b = (cpu_backend *)be;
  if (!b->dspark) return dsv4i_error(DSV4_ERR_UNSUPPORTED, "cpu backend: the model has no DSpark stages");
  if (!taps.impl || b->n_tok < 1)
    return dsv4i_error(DSV4_ERR_INVALID_ARG, "cpu dspark_extend: no taps or no batch");
  return store(b, b->n_tok, b->tokseq, b->pos, taps.impl, b->dspark->main_x);
}

/* ---- draft forward (spec §6.1 decode step) ----------------------------- */

/* Scratch of one draft call, rows = n·block (seq: [n], set by the caller). */
typedef struct draft_ws {
  uint16_t *h, *x, *y, *xc, *cat;
  float *pre, *mixes, *a_pre, *post, *comb, *base, *bias, *conf;
  int32_t *tok;
  dsv4i_kv_view **seq;
} draft_ws;

static void ws_free(draft_ws *w) {
  void *p[] = {w->h, w->x, w->y, w->xc, w->cat, w->pre, w->mixes, w->a_pre, w->post, w->comb,
               w->base, w->bias, w->conf, w->tok, (void *)w->seq};
  for (size_t i = 0; i < DSV4I_ARRAY_LEN(p); i++) free(p[i]);
}

static dsv4_status ws_alloc(const cpu_backend *b, int32_t n, draft_ws *w) {
  const size_t r = (size_t)n * (size_t)b->dspark->block, hc = (size_t)b->hc, d = (size_t)b->dim;
  const size_t V = (size_t)b->vocab, rk = (size_t)b->dspark->rank;
  memset(w, 0, sizeof *w);
#define A(p, cnt) ((w->p = dsv4i_malloc(sizeof *w->p * (cnt), "DSpark draft " #p)) != NULL)
  int ok = A(h, r * hc * d) && A(x, r * d) && A(y, r * d) && A(xc, r * d) && A(cat, r * (d + rk)) &&
           A(pre, r * hc) && A(mixes, r * (2 + hc) * hc) && A(a_pre, r * hc) && A(post, r * hc) &&
           A(comb, r * hc * hc) && A(base, r * V) && A(bias, (size_t)n * V) && A(conf, r) &&
           A(tok, (size_t)n * (size_t)(b->dspark->block + 1));
#undef A
  if (!ok) {
    ws_free(w);
    return DSV4_ERR_OUT_OF_MEMORY;
  }
  return DSV4_OK;
}

/* One stage: the lagged-hc block of spec §5.3 with the DSpark attention, in place on h / pre. */
static dsv4_status stage_block(const cpu_backend *b, const cpu_block *k, int32_t n,
                               dsv4i_kv_view *const *seq, const int64_t *pos, draft_ws *w) {
  const dsv4i_config *c = b->cfg;
  const int32_t hc = b->hc, dim = b->dim, B = b->dspark->block;
  const int64_t r = (int64_t)n * B;
  dsv4_status s = dsv4i_cpu_hc_mixes(r, hc, dim, w->h, k->hc_fn[0], c->norm_eps, w->mixes);
  if (!s) s = dsv4i_cpu_hc_split_sinkhorn(r, hc, w->mixes, k->hc_scale[0], k->hc_base[0],
                                          c->hc_sinkhorn_iters, c->hc_eps, w->a_pre, w->post,
                                          w->comb);
  if (!s) s = dsv4i_cpu_hc_pre(r, hc, dim, w->h, w->pre, w->x);
  if (!s) s = dsv4i_cpu_rmsnorm(r, dim, w->x, dim, k->attn_norm, c->norm_eps, w->x, dim);
  if (!s) s = dsv4i_attn_dspark(&k->attn, n, seq, pos, B, w->x, w->y);
  if (!s) s = dsv4i_cpu_hc_post(r, hc, dim, w->y, w->h, w->post, w->comb, w->h);
  if (!s) s = dsv4i_cpu_hc_mixes(r, hc, dim, w->h, k->hc_fn[1], c->norm_eps, w->mixes);
  if (!s) s = dsv4i_cpu_hc_split_sinkhorn(r, hc, w->mixes, k->hc_scale[1], k->hc_base[1],
                                          c->hc_sinkhorn_iters, c->hc_eps, w->pre, w->post,
                                          w->comb);
  if (!s) s = dsv4i_cpu_hc_pre(r, hc, dim, w->h, w->a_pre, w->x);
  if (!s) s = dsv4i_cpu_rmsnorm(r, dim, w->x, dim, k->ffn_norm, c->norm_eps, w->x, dim);
  if (!s) s = dsv4i_cpu_moe(&k->moe, r, w->x, dim, NULL, w->y, dim);
  if (!s) s = dsv4i_cpu_hc_post(r, hc, dim, w->y, w->h, w->post, w->comb, w->h);
  return s;
}

static dsv4_status draft_check(cpu_backend *b, const dsv4i_kv_step *kv, const int64_t *pos,
                               const int32_t *anchor, const dsv4i_sample_req *req,
                               const dsv4i_dspark_out *out, dsv4i_kv_view **seq) {
  if (!b->dspark) return dsv4i_error(DSV4_ERR_UNSUPPORTED, "cpu backend: the model has no DSpark stages");
  if (!kv || !pos || !anchor || !req || !out || !out->drafts)
    return dsv4i_error(DSV4_ERR_INVALID_ARG, "cpu dspark_draft: NULL argument");
  dsv4_status s = dsv4i_cpu_be_load_kv(b, kv);
  for (int32_t i = 0; i < kv->n_seq && !s; i++) {
    if (anchor[i] < 0 || anchor[i] >= b->vocab)
      s = dsv4i_error(DSV4_ERR_INVALID_ARG, "cpu dspark_draft: anchor %d", (int)anchor[i]);
    else if (pos[i] < 0 || pos[i] + 1 != kv->len[i])
      s = dsv4i_error(DSV4_ERR_INVALID_ARG, "cpu dspark_draft: position %lld of sequence %d, "
                      "which holds %lld", (long long)pos[i], (int)i, (long long)kv->len[i]);
    else
      seq[i] = &b->views[i];
  }
  return s;
}

dsv4_status dsv4i_cpu_dspark_draft(cpu_backend *b, const dsv4i_kv_step *kv, const int64_t *pos, const int32_t *anchor,
                                   const uint16_t *main_hidden, const dsv4i_sample_req *req,
                                   const dsv4i_dspark_out *out) {
  draft_ws w;
  const int32_t n = kv ? kv->n_seq : 0;
  dsv4i_kv_view **seq = n > 0 ? dsv4i_malloc(sizeof *seq * (size_t)n, "DSpark sequences") : NULL;
  if (n > 0 && !seq) return DSV4_ERR_OUT_OF_MEMORY;
  dsv4_status s = draft_check(b, kv, pos, anchor, req, out, seq);
  if (!s) s = ws_alloc(b, n, &w);
  if (s) {
    free(seq);
    return s;
  }
  w.seq = seq;
  dsv4i_cpu_set_threads(b->n_threads);
  const cpu_dspark *d = b->dspark;
  const dsv4i_config *c = b->cfg;
  const int32_t B = d->block, hc = b->hc, dim = b->dim, V = b->vocab, rk = d->rank;
  const size_t r = (size_t)n * (size_t)B;
  /* the reference's forward_spec stores main_kv at pos itself */
  if (main_hidden) s = store(b, n, seq, pos, main_hidden, w.x);
  /* block [anchor, noise x (B-1)] at pos+1 .., 4 copies, pre = one-hot copy 0 (spec §5.1) */
  for (size_t t = 0; !s && t < r; t++) {
    const int32_t tok = t % (size_t)B ? c->dspark_noise_token_id : anchor[t / (size_t)B];
    const uint16_t *row = b->embed + (size_t)tok * (size_t)dim;
    for (int32_t cc = 0; cc < hc; cc++) {
      memcpy(w.h + (t * (size_t)hc + (size_t)cc) * (size_t)dim, row, sizeof *row * (size_t)dim);
      w.pre[t * (size_t)hc + (size_t)cc] = cc == 0 ? 1.0f : 0.0f;
    }
  }
  for (int32_t S = 0; !s && S < d->n_stages; S++) s = stage_block(b, &d->st[S], n, seq, pos, &w);
  /* head with the last stage's FFN pre and its own norm; x_k pre-norm kept for the confidence */
  if (!s) s = dsv4i_cpu_head((int64_t)r, hc, dim, w.h, w.pre, d->norm, c->norm_eps, &b->head,
                             w.base, w.xc);
  if (!s && out->base) memcpy(out->base, w.base, sizeof *w.base * r * (size_t)V);
  /* Markov head, left to right: all sequences' row k at once */
  const size_t ldc = (size_t)dim + (size_t)rk;
  for (int32_t i = 0; i < n; i++) w.tok[(size_t)i * (size_t)(B + 1)] = anchor[i];
  for (int32_t k = 0; !s && k < B; k++) {
    for (int32_t i = 0; i < n; i++) { /* e_k = markov.embed[tok_k] into the concat row */
      const size_t t = (size_t)i * (size_t)B + (size_t)k;
      const int32_t tk = w.tok[(size_t)i * (size_t)(B + 1) + (size_t)k];
      memcpy(w.cat + t * ldc, w.xc + t * (size_t)dim, sizeof *w.cat * (size_t)dim);
      memcpy(w.cat + t * ldc + dim, d->mk_embed + (size_t)tk * (size_t)rk, sizeof *w.cat * (size_t)rk);
    }
    s = dsv4i_cpu_linear_f32(&d->mk_head, n, w.cat + (size_t)k * ldc + dim, (int64_t)(B * ldc),
                             w.bias, V);
    for (int32_t i = 0; !s && i < n; i++) {
      float *lg = w.base + ((size_t)i * (size_t)B + (size_t)k) * (size_t)V;
      const float *bi = w.bias + (size_t)i * (size_t)V;
      for (int32_t v = 0; v < V; v++) lg[v] += bi[v];
      const int32_t nv = dsv4i_cpu_valid_ids(req[i].n_valid, V);
      const int32_t nt = dsv4i_cpu_sample(lg, nv, req[i].temperature, req[i].seed,
                                          req[i].counter + (uint64_t)k);
      if (nt < 0) {
        s = dsv4i_cpu_not_finite_error(lg, nv, "draft logits of batch row", i);
        break;
      }
      w.tok[(size_t)i * (size_t)(B + 1) + (size_t)k + 1] = nt;
      out->drafts[(size_t)i * (size_t)B + (size_t)k] = nt;
    }
  }
  /* confidence c_k = proj([x_k, e_k]) (fp32) */
  if (!s && out->confidence) {
    s = dsv4i_cpu_linear_f32(&d->conf, (int64_t)r, w.cat, (int64_t)ldc, w.conf, 1);
    if (!s) memcpy(out->confidence, w.conf, sizeof *w.conf * r);
  }
  if (!s && out->logits) memcpy(out->logits, w.base, sizeof *w.base * r * (size_t)V);
  ws_free(&w);
  return s;
}

dsv4_status dsv4i_cpu_be_dspark_draft(dsv4i_backend *be, const dsv4i_kv_step *kv,
                                      const int64_t *pos, const int32_t *anchor, dsv4i_bbuf taps,
                                      const dsv4i_sample_req *req, int32_t *drafts,
                                      float *confidence, dsv4i_bbuf logits) {
  const dsv4i_dspark_out out = {drafts, confidence, logits.impl, NULL};
  return dsv4i_cpu_dspark_draft((cpu_backend *)be, kv, pos, anchor, taps.impl, req, &out);
}
