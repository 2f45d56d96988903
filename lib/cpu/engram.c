/*
 * Engram module of the CPU backend (spec §5.2 "Module"); see engram.h for
 * the numerics and what decided them.
 *
 * Per chunk of text tokens: gather + dequantise the rows (threads over
 * tokens), one fp8 linear for the whole chunk (act_quant + dsv4i_cpu_linear_q,
 * threaded over output tiles), then the gate and the update (threads over
 * tokens).
 * Every value is computed by one thread in a fixed order, so the result
 * does not depend on the thread count or the chunking.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cpu/cpu_impl.h"
#include "cpu/engram.h"
#include "model/config.h"
#include "model/formats.h"
#include "model/ref_math.h"

/* Text tokens per chunk of dsv4i_cpu_engram. */
#define ENGRAM_CHUNK 64

/* ---- torch's CPU summation order --------------------------------------- */

enum { SUM_LANES = 8, SUM_ILP = 4, SUM_LEVELS = 4 };

/* ceil(log2(x)) as ATen's utils::CeilLog2 (1 for x <= 2). */
static int64_t ceil_log2_aten(int64_t x) {
  if (x <= 2) return 1;
  uint64_t v = (uint64_t)x - 1;
  int64_t bit = 0;
  while (v >>= 1) bit++;
  return bit + 1;
}

/*
 * ATen row_sum over `size` items of `lanes` floats each (item i at
 * a + i·lanes), result in out[lanes]: the items are read as rows of SUM_ILP
 * interleaved items; the rows go through the 4-level cascade of
 * multi_row_sum (blocks of 2^level_power rows into level 0, carried up a
 * level at each block boundary); leftover items go into accumulator 0,
 * then accumulators 1..3 are added to accumulator 0 in order.
 */
static void row_sum_aten(const float *a, int64_t size, int lanes, float *out) {
  float acc[SUM_LEVELS][SUM_ILP][SUM_LANES];
  memset(acc, 0, sizeof acc);
  const int64_t n_rows = size / SUM_ILP;
  int64_t level_power = ceil_log2_aten(n_rows) / SUM_LEVELS;
  if (level_power < 4) level_power = 4;
  const int64_t level_step = (int64_t)1 << level_power;
  const int64_t level_mask = level_step - 1;

  int64_t i = 0;
  while (i + level_step <= n_rows) {
    for (int64_t j = 0; j < level_step; j++, i++)
      for (int k = 0; k < SUM_ILP; k++)
        for (int l = 0; l < lanes; l++) acc[0][k][l] += a[(i * SUM_ILP + k) * lanes + l];
    for (int j = 1; j < SUM_LEVELS; j++) {
      for (int k = 0; k < SUM_ILP; k++)
        for (int l = 0; l < lanes; l++) {
          acc[j][k][l] += acc[j - 1][k][l];
          acc[j - 1][k][l] = 0.0f;
        }
      if ((i & (level_mask << (j * level_power))) != 0) break;
    }
  }
  for (; i < n_rows; i++)
    for (int k = 0; k < SUM_ILP; k++)
      for (int l = 0; l < lanes; l++) acc[0][k][l] += a[(i * SUM_ILP + k) * lanes + l];
  for (int j = 1; j < SUM_LEVELS; j++)
    for (int k = 0; k < SUM_ILP; k++)
      for (int l = 0; l < lanes; l++) acc[0][k][l] += acc[j][k][l];
  /* row_sum: leftover items into partial 0, then partials 1..3 */
  for (int64_t r = n_rows * SUM_ILP; r < size; r++)
    for (int l = 0; l < lanes; l++) acc[0][0][l] += a[r * lanes + l];
  for (int k = 1; k < SUM_ILP; k++)
    for (int l = 0; l < lanes; l++) acc[0][0][l] += acc[0][k][l];
  for (int l = 0; l < lanes; l++) out[l] = acc[0][0][l];
}

float dsv4i_cpu_sum_torch(const float *a, int64_t n) {
  float v[SUM_LANES];
  if (n <= 0) return 0.0f;
  if (n < SUM_LANES) { /* scalar_inner_sum */
    row_sum_aten(a, n, 1, v);
    return 0.0f + v[0];
  }
  /* vectorized_inner_sum */
  const int64_t n_vec = n / SUM_LANES;
  row_sum_aten(a, n_vec, SUM_LANES, v);
  float s = 0.0f;
  for (int64_t k = n_vec * SUM_LANES; k < n; k++) s += a[k];
  for (int l = 0; l < SUM_LANES; l++) s += v[l];
  return s;
}

/* ---- torch's CPU exp ------------------------------------------------------ */

float dsv4i_cpu_expf_vec(float d) { return dsv4i_expf_torch(d); }

/* ---- weights -------------------------------------------------------------- */

/* A 2-D weight of one dtype and shape. */
static dsv4_status find_tensor(const dsv4i_weights *wt, int32_t role, int32_t layer, int32_t dtype,
                               int64_t d0, int64_t d1, const dsv4i_weight **out) {
  dsv4_status st = dsv4i_weights_get(wt, role, layer, -1, -1, -1, out);
  if (st) return st;
  const dsv4i_weight *w = *out;
  if (w->dtype != dtype || w->ndim != 2 || w->shape[0] != d0 || w->shape[1] != d1)
    return dsv4i_error(DSV4_ERR_WEIGHTS, "engram: %s is %s [%lld, %lld] (%d dims), want %s "
                       "[%lld, %lld]", dsv4i_weight_name(w), dsv4i_weight_dtype_name(w->dtype),
                       (long long)w->shape[0], (long long)w->shape[1], (int)w->ndim,
                       dsv4i_weight_dtype_name(dtype), (long long)d0, (long long)d1);
  return DSV4_OK;
}

dsv4_status dsv4i_engram_layer_load(const dsv4i_weights *wt, const dsv4i_config *cfg,
                                    int32_t slot, dsv4i_engram_layer *out) {
  if (!out) return dsv4i_error(DSV4_ERR_INVALID_ARG, "engram_layer_load: NULL out");
  memset(out, 0, sizeof *out);
  if (!wt || !cfg) return dsv4i_error(DSV4_ERR_INVALID_ARG, "engram_layer_load: NULL argument");
  if (slot < 0 || slot >= cfg->n_engram || slot >= DSV4I_MAX_ENGRAM)
    return dsv4i_error(DSV4_ERR_INVALID_ARG, "engram: slot %d outside [0, %d)", (int)slot,
                       (int)cfg->n_engram);
  const int32_t layer = cfg->engram_layers[slot];
  const int64_t n_cols = (int64_t)(cfg->engram_max_ngram - 1) * cfg->engram_n_heads;
  const int64_t hd = cfg->engram_head_dim, rows = cfg->engram_num_embeddings[slot];
  if (cfg->dim <= 0 || cfg->hc_mult <= 0 || n_cols <= 0 || hd <= 0 || hd % 32 != 0 ||
      rows <= 0 || n_cols * hd > INT32_MAX || (int64_t)(cfg->hc_mult + 1) * cfg->dim > INT32_MAX)
    return dsv4i_error(DSV4_ERR_INVALID_ARG,
                       "engram: unusable sizes (dim %d, hc %d, %lld ids x head_dim %lld, %lld rows)",
                       (int)cfg->dim, (int)cfg->hc_mult, (long long)n_cols, (long long)hd,
                       (long long)rows);
  dsv4i_engram_layer e;
  memset(&e, 0, sizeof e);
  e.dim = cfg->dim;
  e.hc = cfg->hc_mult;
  e.n_cols = (int32_t)n_cols;
  e.head_dim = (int32_t)hd;
  e.rows = rows;
  e.eps = cfg->norm_eps;

  const dsv4i_weight *w;
  dsv4_status st;
  if ((st = find_tensor(wt, DSV4I_W_ENGRAM_EMBED, layer, DSV4_DTYPE_F8_E4M3, rows, hd, &w)))
    return st;
  e.table = w->data;
  if (w->scale_dtype != DSV4_DTYPE_F8_E8M0 || w->scale_shape[0] != rows ||
      w->scale_shape[1] != hd / 32)
    return dsv4i_error(DSV4_ERR_WEIGHTS, "engram: the scale of %s is %s [%lld, %lld], want "
                       "F8_E8M0 [%lld, %lld]", dsv4i_weight_name(w), dsv4i_weight_dtype_name(w->scale_dtype),
                       (long long)w->scale_shape[0], (long long)w->scale_shape[1], (long long)rows,
                       (long long)(hd / 32));
  e.table_scale = w->scale;
  if ((st = find_tensor(wt, DSV4I_W_ENGRAM_Q, layer, DSV4_DTYPE_BF16, e.hc, e.dim, &w))) return st;
  e.q_weight = w->data;
  if ((st = find_tensor(wt, DSV4I_W_ENGRAM_K, layer, DSV4_DTYPE_BF16, e.hc, e.dim, &w))) return st;
  e.k_weight = w->data;
  if ((st = dsv4i_weights_get(wt, DSV4I_W_ENGRAM_WKV, layer, -1, -1, -1, &w)) ||
      (st = dsv4i_wview_from_weight(w, &e.wkv)))
    return st;
  if (e.wkv.fmt != DSV4I_W_FP8 || e.wkv.rows != (e.hc + 1) * e.dim ||
      e.wkv.cols != e.n_cols * e.head_dim)
    return dsv4i_error(DSV4_ERR_WEIGHTS, "engram: %s is [%d, %d] (format %d), want fp8 [%d, %d]",
                       dsv4i_weight_name(w), (int)e.wkv.rows, (int)e.wkv.cols, (int)e.wkv.fmt,
                       (int)((e.hc + 1) * e.dim), (int)(e.n_cols * e.head_dim));
  *out = e;
  return DSV4_OK;
}

/* ---- checks ---------------------------------------------------------------- */

static int layer_valid(const dsv4i_engram_layer *e) {
  return e && e->dim > 0 && e->hc > 0 && e->n_cols > 0 && e->head_dim > 0 &&
         e->head_dim % 32 == 0 && e->rows > 0 && e->table && e->table_scale && e->q_weight &&
         e->k_weight && dsv4i_wview_valid(&e->wkv) && e->wkv.rows == (e->hc + 1) * e->dim &&
         e->wkv.cols == e->n_cols * e->head_dim;
}

/* Every id of every token t with (!is_image || !is_image[t]) in [0, rows). */
static dsv4_status check_ids(const dsv4i_engram_layer *e, int64_t n_tok, const int64_t *ids,
                             int64_t ld_ids, const uint8_t *is_image) {
  for (int64_t t = 0; t < n_tok; t++) {
    if (is_image && is_image[t]) continue;
    const int64_t *row = ids + t * ld_ids;
    for (int32_t c = 0; c < e->n_cols; c++)
      if (row[c] < 0 || row[c] >= e->rows)
        return dsv4i_error(DSV4_ERR_INVALID_ARG,
                           "engram: row id %lld of token %lld, column %d outside [0, %lld)",
                           (long long)row[c], (long long)t, (int)c, (long long)e->rows);
  }
  return DSV4_OK;
}

/* ---- step 1: gather ------------------------------------------------------------ */

/* rows of n tokens; tok[i] is the token index of output row i (NULL: i). No checks. */
static void gather_rows(const dsv4i_engram_layer *e, int64_t n, const int64_t *tok,
                        const int64_t *ids, int64_t ld_ids, uint16_t *rows) {
  const int32_t hd = e->head_dim, nb = hd / 32, nc = e->n_cols;
  const int64_t width = (int64_t)nc * hd;
  DSV4I_OMP(omp parallel for schedule(static) if (n > 1))
  for (int64_t i = 0; i < n; i++) {
    const int64_t t = tok ? tok[i] : i;
    const int64_t *id = ids + t * ld_ids;
    uint16_t *dst = rows + i * width;
    for (int32_t c = 0; c < nc; c++) {
      const uint8_t *q = e->table + id[c] * (int64_t)hd;
      const uint8_t *s = e->table_scale + id[c] * (int64_t)nb;
      uint16_t *o = dst + (int64_t)c * hd;
      for (int32_t b = 0; b < nb; b++) {
        const float sc = dsv4i_e8m0_to_f32(s[b]);
        for (int32_t k = 0; k < 32; k++)
          o[b * 32 + k] = dsv4i_f32_to_bf16(dsv4i_e4m3_to_f32(q[b * 32 + k]) * sc);
      }
    }
  }
}

dsv4_status dsv4i_engram_gather(const dsv4i_engram_layer *e, int64_t n_tok, const int64_t *ids,
                                int64_t ld_ids, uint16_t *rows) {
  if (!layer_valid(e) || n_tok < 0 || (n_tok > 0 && (!ids || !rows)) || ld_ids < e->n_cols)
    return dsv4i_error(DSV4_ERR_INVALID_ARG, "engram_gather: bad arguments");
  dsv4_status st = check_ids(e, n_tok, ids, ld_ids, NULL);
  if (st != DSV4_OK) return st;
  gather_rows(e, n_tok, NULL, ids, ld_ids, rows);
  return DSV4_OK;
}

/* ---- steps 3-6: gate and update ---------------------------------------------- */

/*
 * The reference's sigmoid of the gate tensor [n_tok][hc] (flattened; flat
 * index t·hc + c) runs in torch's vectorised loop, two AVX-512 vectors = 32
 * elements per step, with the SLEEF-style exp (dsv4i_cpu_expf_vec); the
 * last (n_tok·hc) mod 32 elements run through the scalar loop with libm's
 * expf. A decode step (4 gates) is all scalar.
 */
#define TORCH_VEC_STEP 32

static float gate_sigmoid(float z, int vectorised) {
  const float e = vectorised ? dsv4i_cpu_expf_vec(0.0f - z) : expf(-z);
  return 1.0f / (1.0f + e);
}

/*
 * One token (all copies): x = h[c] (bf16 bits), kv the token's projection,
 * w float [hc][dim] = q ⊙ k, scratch float [dim]; copy c's gate is the
 * flat element flat0 + c of the call's gate tensor, vectorised below n_vec.
 * Written as the reference evaluates it (model.py Engram.forward),
 * operation by operation.
 */
static void update_token(const dsv4i_engram_layer *e, const uint16_t *kv, const float *w,
                         float scale, int64_t flat0, int64_t n_vec, float *tmp, uint16_t *h) {
  const int32_t dim = e->dim;
  const float fdim = (float)dim;
  const uint16_t *value = kv + (int64_t)e->hc * dim;
  for (int32_t c = 0; c < e->hc; c++) {
    uint16_t *x = h + (int64_t)c * dim;
    const uint16_t *key = kv + (int64_t)c * dim;
    const float *wc = w + (int64_t)c * dim;
    for (int32_t d = 0; d < dim; d++) {
      const float xv = dsv4i_bf16_to_f32(x[d]);
      tmp[d] = xv * xv;
    }
    const float mean_x = dsv4i_cpu_sum_torch(tmp, dim) / fdim;
    for (int32_t d = 0; d < dim; d++) {
      const float kd = dsv4i_bf16_to_f32(key[d]);
      tmp[d] = kd * kd;
    }
    const float mean_k = dsv4i_cpu_sum_torch(tmp, dim) / fdim;
    const float rstd = (1.0f / sqrtf(mean_x + e->eps)) * (1.0f / sqrtf(mean_k + e->eps));
    for (int32_t d = 0; d < dim; d++) {
      const float xw = dsv4i_bf16_to_f32(x[d]) * wc[d];
      tmp[d] = xw * dsv4i_bf16_to_f32(key[d]);
    }
    const float dot = (dsv4i_cpu_sum_torch(tmp, dim) * rstd) * scale;
    const float mag = sqrtf(fmaxf(fabsf(dot), 1e-6f));
    const float gate = gate_sigmoid(copysignf(mag, dot), flat0 + c < n_vec);
    for (int32_t d = 0; d < dim; d++) {
      const float gv = gate * dsv4i_bf16_to_f32(value[d]);
      x[d] = dsv4i_f32_to_bf16(dsv4i_bf16_to_f32(x[d]) + gv);
    }
  }
}

/* Scale of the dot product: the reference's Python float dim**-0.5 rounded to fp32. */
static float dot_scale(int32_t dim) { return (float)pow((double)dim, -0.5); }

/* w = q ⊙ k in fp32 (exact: 8-bit × 8-bit significands). */
static void gate_weight(const dsv4i_engram_layer *e, float *w) {
  const int64_t n = (int64_t)e->hc * e->dim;
  for (int64_t i = 0; i < n; i++)
    w[i] = dsv4i_bf16_to_f32(e->q_weight[i]) * dsv4i_bf16_to_f32(e->k_weight[i]);
}

/* The reference call of a token: [r0, r1) of the batch. */
typedef struct gate_call {
  int64_t r0, r1;
} gate_call;

/* The call token t belongs to: its run of equal run[] (the tokens of one
 * sequence's prefill chunk in a step; run[t] < 0: t alone, a decode row),
 * or with run NULL the whole batch; *c is the last call found (tokens come in
 * order, so each run is scanned once). */
static void gate_call_of(int64_t n_tok, const int32_t *run, int64_t t, gate_call *c) {
  if (t >= c->r0 && t < c->r1) return;
  c->r0 = 0, c->r1 = n_tok;
  if (!run) return;
  if (run[t] < 0) { /* a call of its own */
    c->r0 = t, c->r1 = t + 1;
    return;
  }
  for (c->r0 = t; c->r0 > 0 && run[c->r0 - 1] == run[t]; c->r0--) {}
  for (c->r1 = t + 1; c->r1 < n_tok && run[c->r1] == run[t]; c->r1++) {}
}

/* Update n (<= ENGRAM_CHUNK when run is given) tokens of a batch of n_tok
 * tokens (calls: gate_call_of, *c carried between chunks): token tok[i] (NULL:
 * i) takes kv row i, or kv row tok[i] when kv_by_token. Each gate's exp split
 * is that of its token's call. No checks. */
static void update_tokens(const dsv4i_engram_layer *e, int64_t n_tok, const int32_t *run,
                          gate_call *c, int64_t n, const int64_t *tok, const uint16_t *kv,
                          int64_t ld_kv, int kv_by_token, const float *w, float *tmp,
                          uint16_t *h) {
  const float scale = dot_scale(e->dim);
  const int64_t stride = (int64_t)e->hc * e->dim;
  int64_t first[ENGRAM_CHUNK], n_vec[ENGRAM_CHUNK]; /* of token i (run given) */
  if (run)
    for (int64_t i = 0; i < n; i++) {
      const int64_t t = tok ? tok[i] : i;
      gate_call_of(n_tok, run, t, c);
      first[i] = (t - c->r0) * e->hc;
      n_vec[i] = ((c->r1 - c->r0) * e->hc) / TORCH_VEC_STEP * TORCH_VEC_STEP;
    }
  const int64_t n_vec_all = (n_tok * e->hc) / TORCH_VEC_STEP * TORCH_VEC_STEP;
  DSV4I_OMP(omp parallel for schedule(static) if (n > 1))
  for (int64_t i = 0; i < n; i++) {
    const int64_t t = tok ? tok[i] : i;
    update_token(e, kv + (kv_by_token ? t : i) * ld_kv, w, scale,
                 run ? first[i] : t * e->hc, run ? n_vec[i] : n_vec_all,
                 tmp + i * (int64_t)e->dim, h + t * stride);
  }
}

dsv4_status dsv4i_cpu_engram_update(const dsv4i_engram_layer *e, int64_t n_tok,
                                    const uint16_t *kv, int64_t ld_kv, const uint8_t *is_image,
                                    uint16_t *h) {
  if (!layer_valid(e) || n_tok < 0 || (n_tok > 0 && (!kv || !h)) ||
      ld_kv < (int64_t)(e->hc + 1) * e->dim)
    return dsv4i_error(DSV4_ERR_INVALID_ARG, "engram_update: bad arguments");
  if (n_tok == 0) return DSV4_OK;
  int64_t n_text = 0;
  for (int64_t t = 0; t < n_tok; t++) n_text += !(is_image && is_image[t]);
  if (n_text == 0) return DSV4_OK;
  float *w = dsv4i_malloc((size_t)e->hc * (size_t)e->dim * sizeof *w, "engram gate weight");
  int64_t *tok = dsv4i_malloc((size_t)n_text * sizeof *tok, "engram token list");
  float *tmp = dsv4i_malloc((size_t)n_text * (size_t)e->dim * sizeof *tmp, "engram scratch");
  if (!w || !tok || !tmp) {
    free(w);
    free(tok);
    free(tmp);
    return DSV4_ERR_OUT_OF_MEMORY;
  }
  gate_weight(e, w);
  int64_t j = 0;
  for (int64_t t = 0; t < n_tok; t++)
    if (!(is_image && is_image[t])) tok[j++] = t;
  update_tokens(e, n_tok, NULL, NULL, n_text, tok, kv, ld_kv, 1, w, tmp, h);
  free(w);
  free(tok);
  free(tmp);
  return DSV4_OK;
}

/* ---- the whole module --------------------------------------------------------- */

dsv4_status dsv4i_cpu_engram(const dsv4i_engram_layer *e, int64_t n_tok, const int64_t *ids,
                             int64_t ld_ids, const uint8_t *is_image, uint16_t *h) {
  return dsv4i_cpu_engram_runs(e, n_tok, NULL, ids, ld_ids, is_image, h);
}

dsv4_status dsv4i_cpu_engram_runs(const dsv4i_engram_layer *e, int64_t n_tok, const int32_t *run,
                                  const int64_t *ids, int64_t ld_ids, const uint8_t *is_image,
                                  uint16_t *h) {
  if (!layer_valid(e))
    return dsv4i_error(DSV4_ERR_INVALID_ARG, "engram: invalid layer description");
  if (n_tok < 0 || (n_tok > 0 && (!ids || !h)) || ld_ids < e->n_cols)
    return dsv4i_error(DSV4_ERR_INVALID_ARG, "engram: bad arguments (n_tok %lld, ld_ids %lld)",
                       (long long)n_tok, (long long)ld_ids);
  if (n_tok == 0) return DSV4_OK;
  dsv4_status st = check_ids(e, n_tok, ids, ld_ids, is_image);
  if (st != DSV4_OK) return st;

  const int64_t width = (int64_t)e->n_cols * e->head_dim; /* wkv input */
  const int64_t kvw = (int64_t)(e->hc + 1) * e->dim;      /* wkv output */
  const int64_t chunk = n_tok < ENGRAM_CHUNK ? n_tok : ENGRAM_CHUNK;
  /* All scratch up front: after the checks nothing can fail, so h is
   * either fully updated or untouched. */
  uint16_t *rows = dsv4i_malloc((size_t)(chunk * width) * sizeof *rows, "engram rows");
  float *xq = dsv4i_malloc((size_t)(chunk * width) * sizeof *xq, "engram quantised rows");
  float *sx = dsv4i_malloc((size_t)(chunk * (width / 32)) * sizeof *sx, "engram row scales");
  uint16_t *kv = dsv4i_malloc((size_t)(chunk * kvw) * sizeof *kv, "engram kv");
  float *w = dsv4i_malloc((size_t)e->hc * (size_t)e->dim * sizeof *w, "engram gate weight");
  float *tmp = dsv4i_malloc((size_t)(chunk * e->dim) * sizeof *tmp, "engram scratch");
  int64_t *tok = dsv4i_malloc((size_t)chunk * sizeof *tok, "engram token list");
  if (!rows || !xq || !sx || !kv || !w || !tmp || !tok) {
    st = DSV4_ERR_OUT_OF_MEMORY;
    goto done;
  }
  gate_weight(e, w);
  gate_call call = {0, 0};
  int64_t t = 0;
  while (t < n_tok) {
    /* the next chunk of text tokens */
    int64_t n = 0;
    for (; t < n_tok && n < chunk; t++)
      if (!(is_image && is_image[t])) tok[n++] = t;
    if (n == 0) break;
    gather_rows(e, n, tok, ids, ld_ids, rows);
    /* kv = linear(rows, wkv): act_quant + block-scaled fp8 GEMM, bf16 out
     * (the same bits as dsv4i_cpu_linear, without its per-call scratch) */
    st = dsv4i_cpu_act_quant(n, (int32_t)width, rows, width, xq, sx);
    if (st == DSV4_OK) st = dsv4i_cpu_linear_q(&e->wkv, n, xq, sx, kv, kvw);
    if (st != DSV4_OK) { /* cannot happen: the arguments were checked */
      dsv4i_error_prefix("engram wkv");
      goto done;
    }
    update_tokens(e, n_tok, run, &call, n, tok, kv, kvw, 0, w, tmp, h);
  }
  st = DSV4_OK;
done:
  free(rows);
  free(xq);
  free(sx);
  free(kv);
  free(w);
  free(tmp);
  free(tok);
  return st;
}
