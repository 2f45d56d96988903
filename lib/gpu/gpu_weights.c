/*
 * CUDA backend: weights by role (model/weights.h) into the device pool in
 * their checkpoint formats (fp8 + UE8M0, MXFP4 experts, bf16, f32), wo_a
 * dequantised to bf16 on the device (the CPU backend's load-time
 * conversion, bit for bit), the Engram tables into the host-pinned pool.
 * Every dtype and shape the step relies on is checked here, once. A
 * counting pass with the same code measures the pools before they exist.
 *
 * A TP rank (tp_size > 1) uploads only its shard of every backbone block
 * (the weight table's split rules, docs/distributed.md "GPU TP shards"):
 * rows of wq_b and attn_sink (its heads), of wo_a (its groups) and of every
 * expert's and the shared expert's w1 / w3 (its intermediate slice), as
 * offset uploads; the matching columns of wo_b and of every w2, repacked on
 * the host into dense [rows][cols / s] (and their scale columns) so the
 * kernels see the dense layout they take. The DSpark stages stay whole.
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "gpu/gpu_backend.h"
#include "model/rope_freqs.h"

typedef struct loader {
  gpu_backend *b;
  int count;          /**< 1: measure only */
  size_t bytes, pinned, temp;
} loader;

/* What a TP rank keeps of a matrix: rows (axis 0) or columns (axis 1) [lo, lo + n);
 * n 0: the whole matrix. */
typedef struct cut {
  int axis;
  int32_t lo, n;
} cut;

static const cut WHOLE = {0, 0, 0};

static size_t al(size_t n) { return (n + 255) / 256 * 256; }

static dsv4_status put(loader *ld, const void *src, size_t n, const char *what, dsv4i_cuptr *out) {
  if (ld->count) {
    ld->bytes += al(n ? n : 1);
    *out = 0;
    return DSV4_OK;
  }
  dsv4i_gpu *g = &ld->b->g;
  dsv4_status st = dsv4i_gpu_pool_take(&g->pool, n ? n : 1, what, out);
  if (st || !n) return st;
  /* On the engine's stream: a plain cuMemcpyHtoD from pageable (mapped) memory may return
   * before its DMA lands, and the legacy stream it uses does not order the non-blocking
   * engine stream, so the first kernels could read weights still in flight. The pageable
   * source is staged before the call returns. */
  const dsv4i_cures r = g->dev.cu->MemcpyHtoDAsync(*out, src, n, g->stream);
  return r == DSV4I_CUDA_SUCCESS ? DSV4_OK : dsv4i_gpu_fail(g, r, "cuMemcpyHtoDAsync(%s)", what);
}

static dsv4_status get(loader *ld, int32_t role, int32_t layer, int32_t expert, int32_t dtype,
                       int64_t n, const dsv4i_weight **w) {
  return dsv4i_model_weight(ld->b->model, role, layer, expert, dtype, n, w);
}

/* A 1-D tensor of n elements of one dtype. */
static dsv4_status vec(loader *ld, int32_t role, int32_t layer, int32_t dtype, int64_t n,
                       dsv4i_cuptr *out) {
  const dsv4i_weight *w;
  dsv4_status st = get(ld, role, layer, -1, dtype, n, &w);
  return st ? st : put(ld, w->data, (size_t)w->nbytes, dsv4i_weight_name(w), out);
}

/* Elements [lo, lo + k) of a 1-D tensor of n elements (a TP rank's attn_sink entries). */
static dsv4_status vec_part(loader *ld, int32_t role, int32_t layer, int32_t dtype, int64_t n,
                            int64_t lo, int64_t k, dsv4i_cuptr *out) {
  const dsv4i_weight *w;
  dsv4_status st = get(ld, role, layer, -1, dtype, n, &w);
  if (st) return st;
  const size_t es = (size_t)w->nbytes / (size_t)n;
  return put(ld, (const uint8_t *)w->data + (size_t)lo * es, (size_t)k * es,
             dsv4i_weight_name(w), out);
}

/* Columns [c0, c0 + nc) bytes of every one of `rows` rows of `row_bytes` each, packed
 * densely and uploaded (the counting pass only counts). */
static dsv4_status put_cols(loader *ld, const void *src, int64_t rows, size_t row_bytes, size_t c0,
                            size_t nc, const char *what, dsv4i_cuptr *out) {
  const size_t n = (size_t)rows * nc;
  if (ld->count) return put(ld, NULL, n, what, out);
  uint8_t *tmp = dsv4i_malloc(n ? n : 1, "TP column repack");
  if (!tmp) return DSV4_ERR_OUT_OF_MEMORY;
  for (int64_t r = 0; r < rows; r++)
    memcpy(tmp + (size_t)r * nc, (const uint8_t *)src + (size_t)r * row_bytes + c0, nc);
  const dsv4_status st = put(ld, tmp, n, what, out); /* pageable: staged before it returns */
  free(tmp);
  return st;
}

/* A matrix [rows][cols] (logical) in its stored format, or the cut k of it a TP rank
 * keeps; expert -1 unless routed. */
static dsv4_status mat_cut(loader *ld, int32_t role, int32_t layer, int32_t expert, int32_t rows,
                           int32_t cols, cut k, dsv4i_gpu_weight *out) {
  const dsv4i_weight *w;
  dsv4_status st = get(ld, role, layer, expert, -1, -1, &w);
  if (st) return st;
  const char *name = dsv4i_weight_name(w);
  memset(out, 0, sizeof *out);
  out->rows = rows;
  out->cols = cols;
  int64_t c = w->ndim == 2 ? w->shape[1] : -1;
  switch (w->dtype) {
  case DSV4_DTYPE_F32: out->fmt = DSV4I_KFMT_F32; break;
  case DSV4_DTYPE_BF16: out->fmt = DSV4I_KFMT_BF16; break;
  case DSV4_DTYPE_F8_E4M3: out->fmt = DSV4I_KFMT_E4M3_UE8M0; break;
  case DSV4_DTYPE_I8: out->fmt = DSV4I_KFMT_E2M1_UE8M0; c *= 2; break;
  default:
    return dsv4i_error(DSV4_ERR_WEIGHTS, "cuda backend: weight %s has dtype %s, not a weight "
                       "format the kernels take", name, dsv4i_weight_dtype_name(w->dtype));
  }
  if (w->ndim != 2 || w->shape[0] != rows || c != cols)
    return dsv4i_error(DSV4_ERR_WEIGHTS, "cuda backend: weight %s is [%lld, %lld], the config "
                       "needs [%d, %d]", name, (long long)w->shape[0],
                       (long long)(w->ndim == 2 ? w->shape[1] : 0), (int)rows, (int)cols);
  const int q = out->fmt == DSV4I_KFMT_E4M3_UE8M0 || out->fmt == DSV4I_KFMT_E2M1_UE8M0;
  const int fp8 = out->fmt == DSV4I_KFMT_E4M3_UE8M0;
  out->ld = w->shape[1];
  const int64_t s0 = fp8 ? (rows + 31) / 32 : rows;
  if (q && (!w->scale || w->scale_dtype != DSV4_DTYPE_F8_E8M0 || w->scale_shape[0] != s0 ||
            w->scale_shape[1] != (cols + 31) / 32))
    return dsv4i_error(DSV4_ERR_WEIGHTS, "cuda backend: weight %s: its UE8M0 scale is absent or "
                       "not [%lld, %d]", name, (long long)s0, (int)((cols + 31) / 32));
  if (q) out->scale_ld = w->scale_shape[1];
  if (!k.n) {
    if (q) st = put(ld, w->scale, (size_t)w->scale_nbytes, name, &out->scale);
    if (!st) st = put(ld, w->data, (size_t)w->nbytes, name, &out->data);
    return st;
  }
  /* a TP shard: whole 32-blocks of the UE8M0 scales (the split rules' granularity) */
  const int32_t len = k.axis ? cols : rows;
  if (k.lo < 0 || k.n < 0 || k.lo + k.n > len || k.lo % 32 || k.n % 32)
    return dsv4i_error(DSV4_ERR_UNSUPPORTED, "cuda backend: weight %s: TP %s [%d, %d) of %d is "
                       "not in whole 32-blocks", name, k.axis ? "columns" : "rows", (int)k.lo,
                       (int)(k.lo + k.n), (int)len);
  const size_t rb = (size_t)w->nbytes / (size_t)rows; /* bytes per row */
  const size_t sb = q ? (size_t)w->scale_shape[1] : 0; /* scale bytes per scale row */
  if (k.axis == 0) { /* rows: one contiguous run, and its scale rows */
    out->rows = k.n;
    const int64_t q0 = fp8 ? k.lo / 32 : k.lo, qn = fp8 ? k.n / 32 : k.n;
    if (q) st = put(ld, (const uint8_t *)w->scale + (size_t)q0 * sb, (size_t)qn * sb, name,
                    &out->scale);
    if (!st) st = put(ld, (const uint8_t *)w->data + (size_t)k.lo * rb, (size_t)k.n * rb, name,
                      &out->data);
    return st;
  }
  /* columns: repacked dense [rows][n] (E2M1: two per byte) with scale columns [.][n / 32] */
  out->cols = k.n;
  out->ld = out->fmt == DSV4I_KFMT_E2M1_UE8M0 ? k.n / 2 : k.n;
  if (q) {
    out->scale_ld = k.n / 32;
    st = put_cols(ld, w->scale, s0, sb, (size_t)k.lo / 32, (size_t)k.n / 32, name, &out->scale);
  }
  if (!st)
    st = put_cols(ld, w->data, rows, rb, (size_t)k.lo * rb / (size_t)cols,
                  (size_t)k.n * rb / (size_t)cols, name, &out->data);
  return st;
}

static dsv4_status mat(loader *ld, int32_t role, int32_t layer, int32_t expert, int32_t rows,
                       int32_t cols, dsv4i_gpu_weight *out) {
  return mat_cut(ld, role, layer, expert, rows, cols, WHOLE, out);
}

/* This rank's TP cut of a backbone layer's dimension of `len` (whole for the DSpark
 * stages, which are replicated, and without TP). */
static cut tp_cut(const loader *ld, int32_t layer, int axis, int32_t len) {
  const dsv4i_backend *be = &ld->b->base;
  if (be->tp_size <= 1 || layer >= ld->b->cfg->n_layers) return WHOLE;
  const int32_t n = len / be->tp_size;
  return (cut){axis, be->tp_rank * n, n};
}

/* wo_a (rows k of [rows][cols]): fp8 uploaded to scratch at the pool's end, dequantised
 * into bf16, scratch returned. */
static dsv4_status wo_a(loader *ld, int32_t L, int32_t rows, int32_t cols, cut k,
                        dsv4i_gpu_weight *out) {
  gpu_backend *b = ld->b;
  const int32_t kept = k.n ? k.n : rows;
  const size_t bf = (size_t)kept * (size_t)cols * 2;
  memset(out, 0, sizeof *out);
  out->fmt = DSV4I_KFMT_BF16;
  out->rows = kept;
  out->cols = cols;
  out->ld = cols;
  dsv4i_gpu_weight q;
  if (ld->count) {
    ld->bytes += al(bf);
    loader tmp = {b, 1, 0, 0, 0};
    dsv4_status st = mat_cut(&tmp, DSV4I_W_ATTN_WO_A, L, -1, rows, cols, k, &q);
    if (tmp.bytes > ld->temp) ld->temp = tmp.bytes;
    return st;
  }
  dsv4_status st = dsv4i_gpu_pool_take(&b->g.pool, bf, "wo_a (bf16)", &out->data);
  const size_t mark = dsv4i_gpu_pool_mark(&b->g.pool);
  if (!st) st = mat_cut(ld, DSV4I_W_ATTN_WO_A, L, -1, rows, cols, k, &q);
  if (!st && q.fmt != DSV4I_KFMT_E4M3_UE8M0)
    st = dsv4i_error(DSV4_ERR_WEIGHTS, "cuda backend: layer %d wo_a is not fp8", (int)L);
  if (!st) st = dsv4i_gpu_note(&b->g, dsv4i_gpu_dequant_bf16(&b->ops, b->g.stream, &q, out->data));
  if (!st) st = dsv4i_gpu_sync(&b->g);
  dsv4i_gpu_pool_reset(&b->g.pool, mark);
  return st;
}

static dsv4_status load_attn(loader *ld, int32_t L, gpu_attn *a) {
  const dsv4i_config *c = ld->b->cfg;
  const dsv4i_layer_role *ro = &c->layers[L];
  const int32_t H = c->n_heads, hd = c->head_dim, G = c->o_groups, rd = c->rope_head_dim;
  a->ratio = ro->compress_ratio;
  a->roles = ro->roles;
  a->kv_source = ro->kv_source;
  a->index_key_source = ro->index_key_source;
  a->candidate_source = ro->candidate_source;
  a->softmax_scale = (float)pow((double)hd, -0.5);
  a->index_wscale = c->index_head_dim > 0 && c->index_n_heads > 0
                        ? (float)(pow((double)c->index_head_dim, -0.5) *
                                  pow((double)c->index_n_heads, -0.5))
                        : 0.0f;
  if (rd <= 0 || rd % 2 || rd > hd || rd / 2 > 128 || hd % 32 || G <= 0 || (H * hd) % G)
    return dsv4i_error(DSV4_ERR_UNSUPPORTED, "cuda backend: attention dims (head_dim %d, rope %d, "
                       "groups %d)", (int)hd, (int)rd, (int)G);
  /* a TP rank: heads [r·H/s, (r+1)·H/s) are exactly those of its wo_a groups (a group's
   * heads are contiguous); rows of wq_b, attn_sink, wo_a, columns of wo_b */
  const int32_t olr = c->o_lora_rank;
  const cut kq = tp_cut(ld, L, 0, H), kg = tp_cut(ld, L, 0, G);
  a->n_heads = kq.n ? kq.n : H;
  a->o_groups = kg.n ? kg.n : G;
  const cut cq = {0, kq.lo * hd, kq.n * hd}, co = {0, kg.lo * olr, kg.n * olr},
            cb = {1, kg.lo * olr, kg.n * olr};
  dsv4_status st = mat(ld, DSV4I_W_ATTN_WQ_A, L, -1, c->q_lora_rank, c->dim, &a->wq_a);
  if (!st) st = mat_cut(ld, DSV4I_W_ATTN_WQ_B, L, -1, H * hd, c->q_lora_rank, cq, &a->wq_b);
  if (!st) st = mat(ld, DSV4I_W_ATTN_WKV, L, -1, hd, c->dim, &a->wkv);
  if (!st) st = mat_cut(ld, DSV4I_W_ATTN_WO_B, L, -1, c->dim, G * olr, cb, &a->wo_b);
  if (!st) st = wo_a(ld, L, G * olr, H * hd / G, co, &a->wo_a);
  if (!st && (a->wq_a.fmt != DSV4I_KFMT_E4M3_UE8M0 || a->wq_b.fmt != DSV4I_KFMT_E4M3_UE8M0 ||
              a->wkv.fmt != DSV4I_KFMT_E4M3_UE8M0 || a->wo_b.fmt != DSV4I_KFMT_E4M3_UE8M0))
    st = dsv4i_error(DSV4_ERR_WEIGHTS, "cuda backend: layer %d: wq_a, wq_b, wkv and wo_b must be "
                     "fp8", (int)L);
  if (!st) st = vec(ld, DSV4I_W_ATTN_Q_NORM, L, DSV4_DTYPE_BF16, c->q_lora_rank, &a->q_norm);
  if (!st) st = vec(ld, DSV4I_W_ATTN_KV_NORM, L, DSV4_DTYPE_BF16, hd, &a->kv_norm);
  if (!st) st = vec_part(ld, DSV4I_W_ATTN_SINK, L, DSV4_DTYPE_F32, H, kq.lo, a->n_heads, &a->sink);
  const int kv_src = a->ratio > 0 && (a->roles & DSV4_ROLE_KV_SOURCE);
  const int idx_src = a->ratio > 0 && (a->roles & DSV4_ROLE_INDEX_SOURCE);
  if (!st && kv_src) {
    st = mat(ld, DSV4I_W_COMP_WKV, L, -1, hd, c->dim, &a->c_wkv);
    if (!st && a->ratio > 1) st = mat(ld, DSV4I_W_COMP_WGATE, L, -1, hd, c->dim, &a->c_wgate);
    if (!st) st = vec(ld, DSV4I_W_COMP_NORM, L, DSV4_DTYPE_BF16, hd, &a->c_norm);
    if (!st && (a->c_wkv.fmt != DSV4I_KFMT_BF16 ||
                (a->ratio > 1 && a->c_wgate.fmt > DSV4I_KFMT_BF16) ||
                (a->ratio > 1 && a->c_wkv.fmt > DSV4I_KFMT_BF16) || a->ratio > DSV4I_GPU_MAX_RATIO))
      st = dsv4i_error(DSV4_ERR_UNSUPPORTED, "cuda backend: layer %d: compressor of ratio %d with "
                       "%s weights (the kernels take BF16, ratio <= %d)", (int)L, (int)a->ratio,
                       dsv4i_kfmt_name(a->c_wkv.fmt), DSV4I_GPU_MAX_RATIO);
  }
  if (!st && idx_src) {
    const int32_t IH = c->index_n_heads, ihd = c->index_head_dim;
    st = mat(ld, DSV4I_W_IDX_WQ_B, L, -1, IH * ihd, c->q_lora_rank, &a->i_wq_b);
    if (!st) st = mat(ld, DSV4I_W_IDX_WPROJ, L, -1, IH, c->dim, &a->i_wproj);
    if (!st && (a->roles & DSV4_ROLE_INDEX_OWN_KEYS)) {
      st = mat(ld, DSV4I_W_IDX_WK, L, -1, ihd, hd, &a->i_wk);
      if (!st) st = vec(ld, DSV4I_W_IDX_K_NORM, L, DSV4_DTYPE_BF16, ihd, &a->i_knorm);
    }
    if (!st && (a->i_wq_b.fmt != DSV4I_KFMT_E4M3_UE8M0 || a->i_wproj.fmt != DSV4I_KFMT_BF16 ||
                ((a->roles & DSV4_ROLE_INDEX_OWN_KEYS) && a->i_wk.fmt != DSV4I_KFMT_BF16)))
      st = dsv4i_error(DSV4_ERR_UNSUPPORTED, "cuda backend: layer %d: indexer weight formats "
                       "(wq_b fp8, weights_proj and wk bf16 expected)", (int)L);
  }
  float freqs[128];
  if (!st && a->ratio > 0)
    st = dsv4i_rope_freqs(rd, c->compress_rope_theta, c->original_seq_len, c->rope_factor,
                          c->beta_fast, c->beta_slow, freqs);
  else if (!st)
    st = dsv4i_rope_freqs(rd, c->rope_theta, 0, 1.0, 1.0, 1.0, freqs);
  if (!st) st = put(ld, freqs, sizeof(float) * (size_t)(rd / 2), "rope table", &a->freqs);
  return st;
}

static dsv4_status load_moe(loader *ld, int32_t L, gpu_block *k) {
  const dsv4i_config *c = ld->b->cfg;
  dsv4i_gpu_moe *m = &k->moe;
  const int dspark = L >= c->n_layers;
  const int32_t E = dspark ? c->dspark_n_routed_experts : c->n_routed_experts;
  m->n_experts = E;
  m->top_k = dspark ? c->dspark_n_experts_per_tok : c->n_experts_per_tok;
  m->dim = c->dim;
  /* a TP rank: intermediate slice [r·I/s, (r+1)·I/s) of every expert and the shared one */
  const int32_t I = c->moe_inter_dim;
  const cut ki = tp_cut(ld, L, 0, I);
  m->inter = ki.n ? ki.n : I;
  m->has_shared = c->n_shared_experts > 0;
  m->swiglu_limit = c->swiglu_limit;
  dsv4_status st = mat(ld, DSV4I_W_GATE, L, -1, E, c->dim, &k->gate);
  if (!st && k->gate.fmt != DSV4I_KFMT_BF16 && k->gate.fmt != DSV4I_KFMT_F32)
    st = dsv4i_error(DSV4_ERR_WEIGHTS, "cuda backend: layer %d: the router gate must be BF16/F32",
                     (int)L);
  if (!st) st = vec(ld, DSV4I_W_GATE_BIAS, L, DSV4_DTYPE_F32, E, &k->gate_bias);
  /* expert tables [E + 1] (the shared expert last): w1, s1, w2, s2, w3, s3 */
  dsv4i_cuptr *t = dsv4i_calloc(6 * ((size_t)E + 1), sizeof *t, "expert tables");
  if (!t) return DSV4_ERR_OUT_OF_MEMORY;
  static const int32_t wr[3] = {DSV4I_W_EXPERT_W1, DSV4I_W_EXPERT_W2, DSV4I_W_EXPERT_W3};
  static const int32_t sr[3] = {DSV4I_W_SHARED_W1, DSV4I_W_SHARED_W2, DSV4I_W_SHARED_W3};
  for (int32_t e = 0; !st && e <= E; e++) {
    if (e == E && !m->has_shared) break;
    for (int j = 0; !st && j < 3; j++) {
      dsv4i_gpu_weight w;
      const int32_t rows = j == 1 ? c->dim : I, cols = j == 1 ? I : c->dim;
      const cut kc = {j == 1, ki.lo, ki.n}; /* w1 / w3 rows, w2 columns */
      st = e < E ? mat_cut(ld, wr[j], L, e, rows, cols, kc, &w)
                 : mat_cut(ld, sr[j], L, -1, rows, cols, kc, &w);
      if (st) break;
      dsv4i_kfmt *f = e < E ? &m->fmt_routed : &m->fmt_shared;
      if (j == 0 && (e == 0 || e == E)) *f = w.fmt;
      if (w.fmt != *f)
        st = dsv4i_error(DSV4_ERR_WEIGHTS, "cuda backend: layer %d: experts of mixed formats",
                         (int)L);
      t[(size_t)(2 * j) * (E + 1) + e] = w.data;
      t[(size_t)(2 * j + 1) * (E + 1) + e] = w.scale;
    }
  }
  dsv4i_cuptr *dst[6] = {&m->w1, &m->s1, &m->w2, &m->s2, &m->w3, &m->s3};
  for (int j = 0; !st && j < 6; j++)
    st = put(ld, t + (size_t)j * (E + 1), sizeof *t * ((size_t)E + 1), "expert table", dst[j]);
  free(t);
  return st;
}

static dsv4_status load_engram(loader *ld, int32_t L, gpu_block *k) {
  gpu_backend *b = ld->b;
  const dsv4i_config *c = b->cfg;
  dsv4i_gpu_engram *e = &k->engram;
  const int32_t slot = k->engram_slot, hd = c->engram_head_dim;
  e->dim = c->dim;
  e->hc = c->hc_mult;
  e->n_cols = (c->engram_max_ngram - 1) * c->engram_n_heads;
  e->head_dim = hd;
  e->eps = c->norm_eps;
  const int64_t rows = c->engram_num_embeddings[slot];
  const dsv4i_weight *t;
  dsv4_status st = get(ld, DSV4I_W_ENGRAM_EMBED, L, -1, DSV4_DTYPE_F8_E4M3, rows * hd, &t);
  if (!st && (!t->scale || t->scale_nbytes != (uint64_t)(rows * (hd / 32))))
    st = dsv4i_error(DSV4_ERR_WEIGHTS, "cuda backend: layer %d: Engram table scale", (int)L);
  if (!st) {
    /* the table in host-pinned memory, read by the gather kernel through its mapping */
    const size_t nb = (size_t)t->nbytes, ns = (size_t)t->scale_nbytes;
    if (ld->count) {
      ld->pinned += al(nb) + al(ns);
    } else {
      void *h1, *h2;
      st = dsv4i_gpu_hostpool_take(&b->g.pinned, nb, "Engram table", &h1, &e->table);
      if (!st) st = dsv4i_gpu_hostpool_take(&b->g.pinned, ns, "Engram scale", &h2, &e->table_scale);
      if (!st) {
        memcpy(h1, t->data, nb);
        memcpy(h2, t->scale, ns);
      }
    }
  }
  if (!st) st = mat(ld, DSV4I_W_ENGRAM_WKV, L, -1, (c->hc_mult + 1) * c->dim, e->n_cols * hd, &e->wkv);
  if (!st) st = vec(ld, DSV4I_W_ENGRAM_Q, L, DSV4_DTYPE_BF16, (int64_t)c->hc_mult * c->dim, &e->q_weight);
  if (!st) st = vec(ld, DSV4I_W_ENGRAM_K, L, DSV4_DTYPE_BF16, (int64_t)c->hc_mult * c->dim, &e->k_weight);
  return st;
}

static dsv4_status load_block(loader *ld, int32_t L, gpu_block *k) {
  const dsv4i_config *c = ld->b->cfg;
  const int64_t hc = c->hc_mult, nm = (2 + hc) * hc;
  static const int32_t fn[2] = {DSV4I_W_HC_ATTN_FN, DSV4I_W_HC_FFN_FN};
  static const int32_t sc[2] = {DSV4I_W_HC_ATTN_SCALE, DSV4I_W_HC_FFN_SCALE};
  static const int32_t ba[2] = {DSV4I_W_HC_ATTN_BASE, DSV4I_W_HC_FFN_BASE};
  dsv4_status st = DSV4_OK;
  for (int i = 0; !st && i < 2; i++) {
    st = vec(ld, fn[i], L, DSV4_DTYPE_F32, nm * hc * c->dim, &k->hc_fn[i]);
    if (!st) st = vec(ld, sc[i], L, DSV4_DTYPE_F32, 3, &k->hc_scale[i]);
    if (!st) st = vec(ld, ba[i], L, DSV4_DTYPE_F32, nm, &k->hc_base[i]);
  }
  if (!st) st = vec(ld, DSV4I_W_ATTN_NORM, L, DSV4_DTYPE_BF16, c->dim, &k->attn_norm);
  if (!st) st = vec(ld, DSV4I_W_FFN_NORM, L, DSV4_DTYPE_BF16, c->dim, &k->ffn_norm);
  if (!st) st = load_attn(ld, L, &k->at);
  if (!st) st = load_moe(ld, L, k);
  k->engram_slot = c->layers[L].engram_slot;
  if (!st && k->engram_slot >= 0) st = load_engram(ld, L, k);
  k->tap = -1;
  for (int32_t i = 0; i < c->n_dspark_targets; i++)
    if (c->dspark_targets[i] == L) k->tap = i;
  return st;
}

/* The DSpark draft head: its stages (blocks n_layers + S) and own tensors. */
static dsv4_status load_dspark(loader *ld) {
  gpu_backend *b = ld->b;
  const dsv4i_config *c = b->cfg;
  gpu_dspark *d = b->dspark;
  const int32_t first = c->n_layers, last = c->n_layers + d->n_stages - 1, V = c->vocab_size;
  const int32_t dim = c->dim, R = d->rank;
  dsv4_status st = DSV4_OK;
  for (int32_t S = 0; !st && S < d->n_stages; S++) {
    st = load_block(ld, first + S, &b->blocks[first + S]);
    if (st) dsv4i_error_prefix("cuda DSpark stage %d", (int)S);
  }
  if (!st) st = mat(ld, DSV4I_W_DSPARK_MAIN_PROJ, first, -1, dim, d->n_taps * dim, &d->main_proj);
  if (!st) st = vec(ld, DSV4I_W_DSPARK_MAIN_NORM, first, DSV4_DTYPE_BF16, dim, &d->main_norm);
  if (!st) st = vec(ld, DSV4I_W_DSPARK_NORM, last, DSV4_DTYPE_BF16, dim, &d->norm);
  if (!st) st = vec(ld, DSV4I_W_DSPARK_MARKOV_EMBED, last, DSV4_DTYPE_BF16, (int64_t)V * R,
                    &d->mk_embed);
  dsv4i_gpu_weight head;
  if (!st) st = mat(ld, DSV4I_W_DSPARK_MARKOV_HEAD, last, -1, V, R, &head);
  d->mk_head = head.data;
  const dsv4i_weight *w = NULL;
  if (!st) st = get(ld, DSV4I_W_DSPARK_MARKOV_EMBED, last, -1, DSV4_DTYPE_BF16, (int64_t)V * R, &w);
  if (!st) d->mk_embed_host = w->data;
  if (!st) st = get(ld, DSV4I_W_DSPARK_CONF_PROJ, last, -1, -1, (int64_t)dim + R, &w);
  if (!st) {
    d->conf = w->data;
    d->conf_f32 = w->dtype == DSV4_DTYPE_F32;
  }
  if (!st && (d->main_proj.fmt != DSV4I_KFMT_E4M3_UE8M0 || head.fmt != DSV4I_KFMT_BF16 ||
              (w->dtype != DSV4_DTYPE_BF16 && w->dtype != DSV4_DTYPE_F32) || R % 8 || R > 1024))
    st = dsv4i_error(DSV4_ERR_UNSUPPORTED, "cuda DSpark: main_proj must be fp8, the Markov head "
                     "bf16 of rank 8..1024 (a multiple of 8), the confidence projection BF16/F32");
  return st;
}

dsv4_status dsv4i_gpu_be_load(gpu_backend *b, const dsv4i_backend_desc *d, int count_only) {
  const dsv4i_config *c = b->cfg;
  const dsv4i_backend *be = &b->base;
  loader ld = {b, count_only, 0, 0, 0};
  dsv4_status st = DSV4_OK;
  /* the first stage embeds the batch; the DSpark stages (last stage) their block tokens */
  if (be->has_embed || b->dspark)
    st = vec(&ld, DSV4I_W_EMBED, -1, DSV4_DTYPE_BF16, (int64_t)c->vocab_size * c->dim, &b->embed);
  if (!st && be->has_head) st = vec(&ld, DSV4I_W_NORM, -1, DSV4_DTYPE_BF16, c->dim, &b->norm);
  if (!st && be->has_head) st = mat(&ld, DSV4I_W_HEAD, -1, -1, c->vocab_size, c->dim, &b->head);
  if (!st && be->has_head && b->head.fmt != DSV4I_KFMT_BF16 && b->head.fmt != DSV4I_KFMT_F32)
    st = dsv4i_error(DSV4_ERR_WEIGHTS, "cuda backend: the head must be BF16 or F32");
  const int32_t n = be->last_layer - be->first_layer;
  for (int32_t L = be->first_layer; !st && L < be->last_layer; L++) {
    st = load_block(&ld, L, &b->blocks[L]);
    if (st) dsv4i_error_prefix("cuda backend, layer %d", (int)L);
    if (!st && !count_only && d->progress &&
        d->progress("weights", L - be->first_layer + 1, n, d->progress_user))
      st = dsv4i_error(DSV4_ABORTED, "cuda backend: aborted by the progress callback");
  }
  if (!st && b->dspark) st = load_dspark(&ld);
  if (count_only) {
    b->weight_bytes = ld.bytes;
    b->pinned_bytes = ld.pinned;
    b->temp_bytes = ld.temp;
  }
  return st;
}
