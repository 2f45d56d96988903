/*
 * Fixture plumbing of test_cpu_block.c and tests/gpu/test_cuda_block.c
 * (static helpers, included once): the weights of every backbone block of a
 * fixture checkpoint, its golden per-layer captures, a teacher-forced block
 * forward (spec §5.3) built from the CPU ops, batch helpers for the
 * attention calls, and the teacher-forced recipe with its limits
 * (bfx_teacher_forced) that both backends' blocks are held to.
 */
#ifndef DSV4_TEST_BLOCK_UTIL_H
#define DSV4_TEST_BLOCK_UTIL_H

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cpu/attention.h"
#include "cpu/cpu_ops.h"
#include "cpu/engram.h"
#include "cpu/kvcache.h"
#include "io/safetensors.h"
#include "model/config.h"
#include "model/formats.h"
#include "model/model.h"
#include "kv_host.h"

#define BFX_MAX DSV4I_MAX_LIST

typedef struct bfx {
  const char *name;
  dsv4i_config cfg;
  struct dsv4_model *m;                  /* the fixture as a model: weights by role */
  dsv4i_st_file g;
  int64_t T;                             /* prompt (b) length */
  dsv4i_attn_layer attn[BFX_MAX];
  const float *hc_fn[BFX_MAX][2], *hc_scale[BFX_MAX][2], *hc_base[BFX_MAX][2];
  const uint16_t *attn_norm[BFX_MAX], *ffn_norm[BFX_MAX], *embed;
  dsv4i_moe moe[BFX_MAX];
  dsv4i_wview *ex[BFX_MAX];              /* [3][n_experts] */
  dsv4i_engram_layer eng[DSV4I_MAX_ENGRAM];
  const int64_t *ids, *hash;             /* b.input_ids [T]; b.engram_hash_ids [T][n_engram][cols] */
  const float *block_out, *block_pre, *engram_out;
  kvh kv;                                /* KV bookkeeping + host pages */
  uint16_t *ax[BFX_MAX];                 /* attention inputs [T][dim] (bfx_attn_inputs) */
} bfx;

static inline const void *bfx_tensor(const bfx *f, int32_t role, int32_t layer, int32_t dtype, int64_t n) {
  const dsv4i_weight *w;
  if (dsv4i_model_weight(f->m, role, layer, -1, dtype, n, &w) != DSV4_OK)
    fail_msg("%s: %s", f->name, dsv4i_error_message());
  return w->data;
}

static inline const void *bfx_golden(const bfx *f, const char *name, int32_t dtype, int64_t n) {
  const dsv4i_st_tensor *t = dsv4i_st_find(&f->g, name);
  if (!t) fail_msg("%s: golden %s absent", f->name, name);
  if (t->dtype != dtype || t->nbytes != (uint64_t)n * dsv4i_dtype_size(dtype))
    fail_msg("%s: golden %s dtype/size", f->name, name);
  return dsv4i_st_data(&f->g, t);
}

static inline void bfx_view(const bfx *f, int32_t role, int32_t layer, int32_t expert, dsv4i_wview *v) {
  const dsv4i_weight *w;
  if (dsv4i_model_weight(f->m, role, layer, expert, -1, -1, &w) != DSV4_OK ||
      dsv4i_wview_from_weight(w, v) != DSV4_OK)
    fail_msg("%s: %s", f->name, dsv4i_error_message());
}

/* weights of backbone block L, or of DSpark stage L - n_layers */
static inline void bfx_load_block(bfx *f, int32_t L) {
  const dsv4i_config *c = &f->cfg;
  const int64_t hc = c->hc_mult, nm = (2 + hc) * hc;
  const int dsp = L >= c->n_layers;
  static const int32_t fn[2] = {DSV4I_W_HC_ATTN_FN, DSV4I_W_HC_FFN_FN};
  static const int32_t sc[2] = {DSV4I_W_HC_ATTN_SCALE, DSV4I_W_HC_FFN_SCALE};
  static const int32_t ba[2] = {DSV4I_W_HC_ATTN_BASE, DSV4I_W_HC_FFN_BASE};
  static const int32_t wr[3] = {DSV4I_W_EXPERT_W1, DSV4I_W_EXPERT_W2, DSV4I_W_EXPERT_W3};
  for (int i = 0; i < 2; i++) {
    f->hc_fn[L][i] = bfx_tensor(f, fn[i], L, DSV4_DTYPE_F32, nm * hc * c->dim);
    f->hc_scale[L][i] = bfx_tensor(f, sc[i], L, DSV4_DTYPE_F32, 3);
    f->hc_base[L][i] = bfx_tensor(f, ba[i], L, DSV4_DTYPE_F32, nm);
  }
  f->attn_norm[L] = bfx_tensor(f, DSV4I_W_ATTN_NORM, L, DSV4_DTYPE_BF16, c->dim);
  f->ffn_norm[L] = bfx_tensor(f, DSV4I_W_FFN_NORM, L, DSV4_DTYPE_BF16, c->dim);
  if (dsv4i_attn_layer_load(dsv4i_model_weights(f->m), c, L, &f->attn[L]) != DSV4_OK)
    fail_msg("attention layer %d: %s", (int)L, dsv4i_error_message());
  dsv4i_moe *m = &f->moe[L];
  memset(m, 0, sizeof *m);
  m->n_experts = dsp ? c->dspark_n_routed_experts : c->n_routed_experts;
  m->top_k = dsp ? c->dspark_n_experts_per_tok : c->n_experts_per_tok;
  m->dim = c->dim;
  m->inter = c->moe_inter_dim;
  m->route_scale = c->route_scale;
  m->swiglu_limit = c->swiglu_limit;
  m->norm_topk_prob = c->norm_topk_prob;
  bfx_view(f, DSV4I_W_GATE, L, -1, &m->gate);
  m->bias = bfx_tensor(f, DSV4I_W_GATE_BIAS, L, DSV4_DTYPE_F32, m->n_experts);
  f->ex[L] = calloc(3 * (size_t)m->n_experts, sizeof(dsv4i_wview));
  for (int32_t e = 0; e < m->n_experts; e++)
    for (int j = 0; j < 3; j++) bfx_view(f, wr[j], L, e, &f->ex[L][(size_t)j * m->n_experts + e]);
  m->w1 = f->ex[L];
  m->w2 = f->ex[L] + m->n_experts;
  m->w3 = f->ex[L] + 2 * m->n_experts;
  m->has_shared = 1;
  bfx_view(f, DSV4I_W_SHARED_W1, L, -1, &m->sw1);
  bfx_view(f, DSV4I_W_SHARED_W2, L, -1, &m->sw2);
  bfx_view(f, DSV4I_W_SHARED_W3, L, -1, &m->sw3);
}

static inline void bfx_open(bfx *f, const char *name) {
  memset(f, 0, sizeof *f);
  f->name = name;
  char dir[4096], p[4200];
  snprintf(dir, sizeof dir, "%s", tu_fixture_or_skip(name));
  assert_int_equal(dsv4i_model_open(dir, 0, NULL, &f->m), DSV4_OK);
  f->cfg = *dsv4i_model_config(f->m);
  snprintf(p, sizeof p, "%s/golden.safetensors", dir);
  assert_int_equal(dsv4i_st_open(p, &f->g), DSV4_OK);
  const dsv4i_config *c = &f->cfg;
  const dsv4i_st_tensor *t = dsv4i_st_find(&f->g, "b.input_ids");
  assert_non_null(t);
  f->T = t->shape[0];
  const int64_t ns = f->T * c->hc_mult * c->dim, cols = (c->engram_max_ngram - 1) * c->engram_n_heads;
  f->ids = bfx_golden(f, "b.input_ids", DSV4_DTYPE_I64, f->T);
  f->hash = bfx_golden(f, "b.engram_hash_ids", DSV4_DTYPE_I64, f->T * c->n_engram * cols);
  f->block_out = bfx_golden(f, "b.block_out", DSV4_DTYPE_F32, c->n_layers * ns);
  f->block_pre = bfx_golden(f, "b.block_pre", DSV4_DTYPE_F32, c->n_layers * f->T * c->hc_mult);
  f->engram_out = bfx_golden(f, "b.engram_out", DSV4_DTYPE_F32, c->n_engram * ns);
  f->embed = bfx_tensor(f, DSV4I_W_EMBED, -1, DSV4_DTYPE_BF16, (int64_t)c->vocab_size * c->dim);
  for (int32_t L = 0; L < c->n_total_layers; L++) bfx_load_block(f, L);
  for (int32_t s = 0; s < c->n_engram; s++)
    assert_int_equal(dsv4i_engram_layer_load(dsv4i_model_weights(f->m), c, s, &f->eng[s]), DSV4_OK);
  kvh_init(&f->kv, c, 4096, 4096, 4096);
}

static inline void bfx_close(bfx *f) {
  for (int32_t L = 0; L < f->cfg.n_total_layers; L++) {
    dsv4i_attn_layer_free(&f->attn[L]);
    free(f->ex[L]);
    free(f->ax[L]);
  }
  assert_int_equal(dsv4i_kv_pool_free_pages(f->kv.pool), dsv4i_kv_pool_n_pages(f->kv.pool));
  kvh_free(&f->kv);
  dsv4i_st_close(&f->g);
  dsv4i_model_close(f->m);
}

static inline kvh_seq *bfx_seq(bfx *f) { return kvh_new(&f->kv); }

/* golden f32 holding bf16 values -> bits */
static inline void bfx_golden_stream(const float *src, size_t n, uint16_t *h) {
  for (size_t i = 0; i < n; i++) {
    h[i] = dsv4i_f32_to_bf16(src[i]);
    if (dsv4i_bf16_to_f32(h[i]) != src[i]) fail_msg("golden value %zu is not bf16", i);
  }
}

/* block i's golden input stream and pre mix (before an Engram update) */
static inline void bfx_block_input(const bfx *f, int32_t i, uint16_t *h, float *pre) {
  const int64_t T = f->T, hc = f->cfg.hc_mult, dim = f->cfg.dim;
  if (i == 0) {
    for (int64_t t = 0; t < T; t++)
      for (int64_t c = 0; c < hc; c++) {
        memcpy(h + (t * hc + c) * dim, f->embed + f->ids[t] * dim, (size_t)dim * 2);
        pre[t * hc + c] = c == 0 ? 1.0f : 0.0f;
      }
    return;
  }
  bfx_golden_stream(f->block_out + (size_t)(i - 1) * T * hc * dim, (size_t)(T * hc * dim), h);
  memcpy(pre, f->block_pre + (size_t)(i - 1) * T * hc, (size_t)(T * hc) * 4);
}

static inline dsv4_status bfx_engram(const bfx *f, int32_t i, uint16_t *h) {
  const int32_t s = f->cfg.layers[i].engram_slot;
  const int64_t cols = f->eng[s].n_cols;
  return dsv4i_cpu_engram(&f->eng[s], f->T, f->hash + s * cols, f->cfg.n_engram * cols, NULL, h);
}

/* golden top-k rows of a layer, padded with -1 to index_topk (the golden
 * width is min(index_topk, T / ratio), the reference's chunk-wide k) */
static inline void bfx_golden_topk(const bfx *f, int32_t layer, int32_t *out) {
  char nm[64];
  snprintf(nm, sizeof nm, "b.topk.L%d", (int)layer);
  const dsv4i_st_tensor *t = dsv4i_st_find(&f->g, nm);
  const int64_t k = f->cfg.index_topk, w = t ? t->shape[1] : 0;
  if (!t || t->ndim != 2 || t->shape[0] != f->T || w > k) fail_msg("%s: golden %s shape", f->name, nm);
  const int32_t *g = bfx_golden(f, nm, DSV4_DTYPE_I32, f->T * w);
  for (int64_t r = 0; r < f->T; r++)
    for (int64_t j = 0; j < k; j++) out[r * k + j] = j < w ? g[r * w + j] : -1;
}

/* the candidate mask [T][T] of a layer as kept blocks per row (ascending, -1 padded) */
static inline void bfx_golden_cand(const bfx *f, int32_t layer, int32_t ld, int32_t *out) {
  char nm[64];
  snprintf(nm, sizeof nm, "b.candidates.L%d", (int)layer);
  const int32_t *m = bfx_golden(f, nm, DSV4_DTYPE_I32, f->T * f->T);
  const int64_t bs = f->cfg.candidate_block_size;
  for (int64_t t = 0; t < f->T; t++) {
    int32_t j = 0;
    for (int64_t b = 0; b * bs < f->T; b++)
      if (m[t * f->T + b * bs]) {
        if (j == ld) fail_msg("golden candidates row %d: more than %d blocks", (int)t, (int)ld);
        out[t * ld + j++] = (int32_t)b;
      }
    while (j < ld) out[t * ld + j++] = -1;
  }
}

/* a batch of n tokens of one sequence from position p0, prefill layout of
 * the whole prompt (min(T, window)) unless changed by the caller */
static inline void bfx_batch(const bfx *f, kvh_seq **s, int nseq, int32_t p0, int32_t n,
                      dsv4i_attn_batch *b) {
  (void)nseq;
  dsv4i_kv_view **sq = malloc((size_t)n * sizeof *sq);
  int64_t *pos = malloc((size_t)n * 8);
  int32_t *lay = malloc((size_t)n * 4);
  const int32_t W = f->cfg.window_size < f->T ? f->cfg.window_size : (int32_t)f->T;
  for (int32_t t = 0; t < n; t++) {
    sq[t] = &s[0]->v;
    pos[t] = p0 + t;
    lay[t] = W;
  }
  b->n_tok = n;
  b->seq = sq;
  b->pos = pos;
  b->layout = lay;
}

static inline void bfx_batch2(const bfx *f, kvh_seq *x, int32_t a, int32_t na, kvh_seq *y,
                       int32_t bb, int32_t nb, dsv4i_attn_batch *b) {
  dsv4i_kv_view **sq = malloc((size_t)(na + nb) * sizeof *sq);
  int64_t *pos = malloc((size_t)(na + nb) * 8);
  int32_t *lay = malloc((size_t)(na + nb) * 4);
  for (int32_t t = 0; t < na + nb; t++) {
    sq[t] = t < na ? &x->v : &y->v;
    pos[t] = t < na ? a + t : bb + t - na;
    lay[t] = DSV4I_ATTN_DECODE;
  }
  (void)f;
  b->n_tok = na + nb;
  b->seq = sq;
  b->pos = pos;
  b->layout = lay;
}

static inline void bfx_batch_free(dsv4i_attn_batch *b) {
  free((void *)b->seq);
  free((void *)b->pos);
  free((void *)b->layout);
}

/* What a block's attention runs on: a backbone batch + shared state, or a
 * DSpark stage's draft block (one sequence, anchor position, block size). */
typedef struct bfx_actx {
  const dsv4i_attn_batch *b;
  dsv4i_attn_shared *sh;
  dsv4i_kv_view *seq;
  int64_t anchor;
  int32_t block;
} bfx_actx;

/* One block (spec §5.3, lagged hyper-connections; DSpark stages §6.1 step 3)
 * over the context's tokens: h [n][hc][dim] and pre [n][hc] in, ho and the
 * FFN pre out. */
static inline dsv4_status bfx_block(const bfx *f, int32_t i, const bfx_actx *a, const uint16_t *h,
                             const float *pre, uint16_t *ho, float *preo) {
  const dsv4i_config *c = &f->cfg;
  const int64_t n = a->b ? a->b->n_tok : a->block, hc = c->hc_mult, dim = c->dim, nm = (2 + hc) * hc;
  float *mix = malloc((size_t)(n * nm) * 4), *a_pre = malloc((size_t)(n * hc) * 4);
  float *post = malloc((size_t)(n * hc) * 4), *comb = malloc((size_t)(n * hc * hc) * 4);
  uint16_t *x = malloc((size_t)(n * dim) * 2), *y = malloc((size_t)(n * dim) * 2);
  uint16_t *hm = malloc((size_t)(n * hc * dim) * 2);
  dsv4_status s = dsv4i_cpu_hc_mixes(n, (int32_t)hc, (int32_t)dim, h, f->hc_fn[i][0], c->norm_eps, mix);
  if (!s) s = dsv4i_cpu_hc_split_sinkhorn(n, (int32_t)hc, mix, f->hc_scale[i][0], f->hc_base[i][0],
                                          c->hc_sinkhorn_iters, c->hc_eps, a_pre, post, comb);
  if (!s) s = dsv4i_cpu_hc_pre(n, (int32_t)hc, (int32_t)dim, h, pre, x);
  if (!s) s = dsv4i_cpu_rmsnorm(n, (int32_t)dim, x, dim, f->attn_norm[i], c->norm_eps, x, dim);
  if (!s) s = a->b ? dsv4i_attn_forward(&f->attn[i], a->b, x, a->sh, y)
                  : dsv4i_attn_dspark(&f->attn[i], 1, &a->seq, &a->anchor, a->block, x, y);
  if (!s) s = dsv4i_cpu_hc_post(n, (int32_t)hc, (int32_t)dim, y, h, post, comb, hm);
  if (!s) s = dsv4i_cpu_hc_mixes(n, (int32_t)hc, (int32_t)dim, hm, f->hc_fn[i][1], c->norm_eps, mix);
  if (!s) s = dsv4i_cpu_hc_split_sinkhorn(n, (int32_t)hc, mix, f->hc_scale[i][1], f->hc_base[i][1],
                                          c->hc_sinkhorn_iters, c->hc_eps, preo, post, comb);
  if (!s) s = dsv4i_cpu_hc_pre(n, (int32_t)hc, (int32_t)dim, hm, a_pre, x);
  if (!s) s = dsv4i_cpu_rmsnorm(n, (int32_t)dim, x, dim, f->ffn_norm[i], c->norm_eps, x, dim);
  if (!s) s = dsv4i_cpu_moe(&f->moe[i], n, x, dim, NULL, y, dim);
  if (!s) s = dsv4i_cpu_hc_post(n, (int32_t)hc, (int32_t)dim, y, hm, post, comb, ho);
  free(mix), free(a_pre), free(post), free(comb), free(x), free(y), free(hm);
  return s;
}

/* attention inputs attn_norm(hc_pre(stream, pre)) of every layer from the
 * golden streams (Engram layers: the golden b.engram_out) */
static inline void bfx_attn_inputs(bfx *f) {
  const dsv4i_config *c = &f->cfg;
  const int64_t T = f->T, hc = c->hc_mult, dim = c->dim, ns = T * hc * dim;
  uint16_t *h = malloc((size_t)ns * 2);
  float *pre = malloc((size_t)(T * hc) * 4);
  for (int32_t i = 0; i < c->n_layers; i++) {
    bfx_block_input(f, i, h, pre);
    if (c->layers[i].engram_slot >= 0)
      bfx_golden_stream(f->engram_out + (size_t)c->layers[i].engram_slot * ns, (size_t)ns, h);
    f->ax[i] = malloc((size_t)(T * dim) * 2);
    assert_int_equal(dsv4i_cpu_hc_pre(T, (int32_t)hc, (int32_t)dim, h, pre, f->ax[i]), DSV4_OK);
    assert_int_equal(dsv4i_cpu_rmsnorm(T, (int32_t)dim, f->ax[i], dim, f->attn_norm[i],
                                       c->norm_eps, f->ax[i], dim), DSV4_OK);
  }
  free(h);
  free(pre);
}

/* rows [a, a+na) then [bb, bb+nb) of layer i's attention inputs */
static inline uint16_t *bfx_gather_inputs(const bfx *f, int32_t i, int32_t a, int32_t na, int32_t bb,
                                   int32_t nb) {
  const size_t dim = (size_t)f->cfg.dim;
  uint16_t *x = malloc((size_t)(na + nb) * dim * 2);
  memcpy(x, f->ax[i] + (size_t)a * dim, (size_t)na * dim * 2);
  memcpy(x + (size_t)na * dim, f->ax[i] + (size_t)bb * dim, (size_t)nb * dim * 2);
  return x;
}

/* ---- the teacher-forced recipe (fixture README "How to compare", step 3) ---- */

typedef struct errstat {
  double max_abs, rel_l2, frac_beyond;
} errstat;

static inline errstat bfx_compare(const float *mine, const float *want, size_t n) {
  errstat s = {0, 0, 0};
  double num = 0, den = 0;
  size_t beyond = 0;
  for (size_t i = 0; i < n; i++) {
    const double o = mine[i], g = want[i], d = fabs(o - g);
    s.max_abs = d > s.max_abs || isnan(d) ? (isnan(d) ? INFINITY : d) : s.max_abs;
    int ex;
    frexp(g == 0 ? 0x1p-126 : g, &ex);
    if (!(d <= 2 * ldexp(1.0, ex - 8))) beyond++;
    num += (o - g) * (o - g);
    den += g * g;
  }
  s.rel_l2 = den > 0 ? sqrt(num / den) : sqrt(num);
  s.frac_beyond = n ? (double)beyond / (double)n : 0;
  return s;
}

/* chaotic (tiny-v41-a): relative L2 <= 1e-2 and at most 1% of the elements
 * beyond 2 bf16 ulps; damped: max |diff| <= abs_tol */
static inline void bfx_check_err(const char *what, int layer, errstat s, int chaotic, double abs_tol) {
  printf("    L%d %-10s rel L2 %.2e  max|d| %.3g  >2ulp %.3f%%\n", layer, what, s.rel_l2, s.max_abs,
         100 * s.frac_beyond);
  if (chaotic) {
    if (!(s.rel_l2 <= 1e-2 && s.frac_beyond <= 0.01))
      fail_msg("layer %d %s beyond the tolerance", layer, what);
  } else if (!(s.max_abs <= abs_tol)) {
    fail_msg("layer %d %s: max |diff| %g > %g", layer, what, s.max_abs, abs_tol);
  }
}

/* is every position of a \ b within 2 bf16 ulps (by my scores) of every one
 * of b \ a? returns the largest relative gap seen */
static inline double bfx_swap_gap(const int32_t *a, const int32_t *b, int k, const float *score) {
  double worst = 0;
  for (int i = 0; i < k && a[i] >= 0; i++) {
    int in_b = 0;
    for (int j = 0; j < k; j++) in_b |= b[j] == a[i];
    if (in_b) continue;
    for (int j = 0; j < k && b[j] >= 0; j++) {
      int in_a = 0;
      for (int m = 0; m < k; m++) in_a |= a[m] == b[j];
      if (in_a) continue;
      const double sa = score[a[i]], sb = score[b[j]];
      const double mag = fmax(fabs(sa), fabs(sb));
      const double g = mag > 0 ? fabs(sa - sb) / mag : 0;
      worst = g > worst ? g : worst;
    }
  }
  return worst;
}

/* candidate blocks kept per row (0 without a candidate source) */
static inline int32_t bfx_cand_ld(const bfx *f) {
  return f->cfg.candidate_source >= 0 && f->cfg.candidate_topk_blocks > 0
             ? f->cfg.candidate_topk_blocks : 0;
}

/* One block call's selections (host, rows of the T prompt tokens). In (NULL:
 * none): topk [T][index_topk], the golden top-k of a consumer layer's index
 * source; cand [T][cand_ld], the golden candidates of the candidate source; force
 * [T][index_topk], the golden top-k an index source attends with. Out (NULL: not
 * wanted): an index source's own top-k, the candidate source's own blocks, and
 * the scores it ranked [T][T] (its visible positions). */
typedef struct bfx_sel {
  const int32_t *topk, *cand, *force;
  int32_t *own_topk, *own_cand;
  float *scores;
} bfx_sel;

/* A backend under the recipe: engram turns h (bf16 [T][hc][dim]) into layer
 * i's Engram output in place; block runs block i over the whole prompt (b),
 * one prefill call at positions [0, T) whose caches later layers read. */
typedef struct bfx_runner {
  const char *backend;
  void *u;
  void (*engram)(void *u, int32_t i, uint16_t *h);
  void (*block)(void *u, int32_t i, const bfx_sel *sel, const uint16_t *h, const float *pre,
                uint16_t *ho, float *preo);
} bfx_runner;

/*
 * Every backbone block teacher-forced: block i gets the golden stream
 * b.block_out[i-1] (block 0: the embedding rows x hc) and pre mix; an Engram
 * layer first turns it into b.engram_out (checked, then the golden one is used);
 * consumer layers get their index source's golden top-k and masked index
 * sources the golden candidates; an index source attends with its golden top-k
 * and its own selection is compared with b.topk.L<i> / b.candidates.L<i>.
 * Limits: chaotic fixture, bfx_check_err's relative ones, and a differing top-k
 * row must be a near tie (every swapped pair within 2^-6 relative by the
 * block's own scores); damped fixture, max |diff| 0.688 (block_out), 0.0492
 * (block_pre), 0.375 (engram_out) and selections exactly equal.
 */
static inline void bfx_teacher_forced(bfx *f, const bfx_runner *rn, int chaotic) {
  const dsv4i_config *c = &f->cfg;
  const int32_t T = (int32_t)f->T, hc = c->hc_mult, dim = c->dim, k = c->index_topk;
  const int32_t cl = bfx_cand_ld(f);
  const size_t ns = (size_t)T * (size_t)hc * (size_t)dim, nk = (size_t)T * (size_t)k;
  const size_t nc = (size_t)T * (size_t)(cl > 0 ? cl : 1);
  uint16_t *h = malloc(ns * 2), *ho = malloc(ns * 2);
  float *pre = malloc((size_t)T * hc * 4), *preo = malloc((size_t)T * hc * 4);
  float *tmp = malloc(ns * 4), *scores = malloc((size_t)T * (size_t)T * 4);
  int32_t *gsel = malloc(nk * 4), *gtop = malloc(nk * 4), *mine = malloc(nk * 4);
  int32_t *gcin = malloc(nc * 4), *gcand = malloc(nc * 4), *mcand = malloc(nc * 4);
  assert_true(h && ho && pre && preo && tmp && scores && gsel && gtop && mine && gcin && gcand &&
              mcand);
  printf("  %s on %s, %d positions, teacher-forced:\n", rn->backend, f->name, (int)T);
  for (int32_t i = 0; i < c->n_layers; i++) {
    const dsv4i_layer_role *r = &c->layers[i];
    const int idx = (r->roles & DSV4_ROLE_INDEX_SOURCE) != 0;
    bfx_block_input(f, i, h, pre);
    if (r->engram_slot >= 0) {
      rn->engram(rn->u, i, h);
      for (size_t j = 0; j < ns; j++) tmp[j] = dsv4i_bf16_to_f32(h[j]);
      bfx_check_err("engram_out", i, bfx_compare(tmp, f->engram_out + (size_t)r->engram_slot * ns, ns),
                    chaotic, 0.375);
      bfx_golden_stream(f->engram_out + (size_t)r->engram_slot * ns, ns, h);
    }
    /* selections handed down: the golden ones */
    bfx_sel sel = {NULL, NULL, NULL, NULL, NULL, NULL};
    if (r->compress_ratio > 0 && r->index_source != i) {
      bfx_golden_topk(f, r->index_source, gtop);
      sel.topk = gtop;
    }
    if (idx && r->candidate_source >= 0) {
      bfx_golden_cand(f, r->candidate_source, cl, gcin);
      sel.cand = gcin;
    }
    if (idx) {
      bfx_golden_topk(f, i, gsel);
      sel.force = gsel;
      sel.own_topk = mine;
      sel.scores = scores;
      if (r->roles & DSV4_ROLE_CANDIDATE_SOURCE) sel.own_cand = mcand;
    }
    rn->block(rn->u, i, &sel, h, pre, ho, preo);
    for (size_t j = 0; j < ns; j++) tmp[j] = dsv4i_bf16_to_f32(ho[j]);
    bfx_check_err("block_out", i, bfx_compare(tmp, f->block_out + (size_t)i * ns, ns), chaotic, 0.688);
    bfx_check_err("block_pre", i,
                  bfx_compare(preo, f->block_pre + (size_t)i * T * hc, (size_t)T * hc), chaotic,
                  0.0492);
    if (!idx) continue;
    /* the layer's own top-k against the golden */
    int rows = 0;
    double worst = 0;
    for (int32_t t = 0; t < T; t++) {
      const int32_t *m = mine + (size_t)t * k, *want = gsel + (size_t)t * k;
      if (!memcmp(m, want, (size_t)k * 4)) continue;
      rows++;
      const double g = bfx_swap_gap(m, want, k, scores + (size_t)t * T);
      printf("      L%d top-k row %d differs: mine [%d %d %d ..], golden [%d %d %d ..], gap %.2e\n",
             i, (int)t, m[0], m[1], m[2], want[0], want[1], want[2], g);
      worst = g > worst ? g : worst;
    }
    printf("    L%d top-k: %d of %d rows differ (largest swap gap %.2e)\n", i, rows, (int)T, worst);
    if (!chaotic && rows) fail_msg("layer %d: top-k differs on a damped fixture", i);
    if (worst > 0x1p-6) fail_msg("layer %d: a top-k swap is not a near tie", i);
    if (r->roles & DSV4_ROLE_CANDIDATE_SOURCE) {
      bfx_golden_cand(f, i, cl, gcand);
      int crow = 0;
      for (int32_t t = 0; t < T; t++) {
        const int32_t *m = mcand + (size_t)t * cl, *want = gcand + (size_t)t * cl;
        if (memcmp(m, want, (size_t)cl * 4)) {
          crow++;
          printf("      L%d candidate row %d differs: mine [%d %d %d], golden [%d %d %d]\n", i,
                 (int)t, m[0], m[1], m[2], want[0], want[1], want[2]);
        }
      }
      printf("    L%d candidates: %d of %d rows differ\n", i, crow, (int)T);
      if (!chaotic && crow) fail_msg("layer %d: candidates differ on a damped fixture", i);
    }
  }
  free(h), free(ho), free(pre), free(preo), free(tmp), free(scores);
  free(gsel), free(gtop), free(mine), free(gcin), free(gcand), free(mcand);
}

#endif /* DSV4_TEST_BLOCK_UTIL_H */
