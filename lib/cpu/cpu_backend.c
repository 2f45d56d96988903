/*
 * CPU implementation of the engine's backend interface (backend/backend.h):
 * storage format for the planner, create/destroy, host buffers, the KV page
 * pool (kvcache.h), and the step metadata with its page table. The step ops
 * are in cpu_backend_ops.c, weight binding in cpu_backend_load.c.
 */
#include <stdlib.h>
#include <string.h>

#include "cpu/cpu_backend.h"
#include "cpu/cpu_dspark.h"

static dsv4_status cpu_format(const struct dsv4i_config *c, int64_t max_positions,
                              const dsv4i_model_part *part, int32_t kv_format,
                              dsv4i_cache_format *f) {
  dsv4i_kv_layout lay; /* the part's layers only */
  dsv4_status s = dsv4i_kv_format_init(c, part, kv_format, dsv4i_kv_page_bytes(c), max_positions, f,
                                       &lay);
  if (s) return s;
  /* per live sequence: the copied page row and its view */
  f->slot_bytes = (int64_t)lay.ld * (int64_t)sizeof(int32_t) + (int64_t)sizeof(dsv4i_kv_view) + 1;
  /* per block the part holds (its backbone layers; the DSpark stages on the last stage,
   * whose caches lay holds too): wo_a dequantised to bf16, whole on every TP rank (a
   * rank's share is a view into it; spec §3.3), and the table of expert weight views */
  const int64_t wo_a = (int64_t)c->o_groups * c->o_lora_rank *
                       ((int64_t)c->n_heads * c->head_dim / c->o_groups) * 2;
  for (int32_t L = lay.first_layer; L < lay.last_layer; L++) {
    const int dspark = L >= c->n_layers;
    if (dspark && (c->dspark_block_size <= 0 || c->n_dspark_targets <= 0)) continue;
    const int64_t ne = dspark ? c->dspark_n_routed_experts : c->n_routed_experts;
    f->weight_bytes += wo_a + 3 * ne * (int64_t)sizeof(dsv4i_wview);
  }
  /* stream + pre + block scratch + attention shared state, per batch token */
  const int64_t hc = c->hc_mult, d = c->dim;
  f->act_bytes_per_tok = hc * d * 2 + hc * 4 + 2 * d * 2 + (2 + hc) * hc * 4 + 5 * hc * hc * 4 +
                         (int64_t)c->index_topk * 4 + (int64_t)c->candidate_topk_blocks * 4 + 64;
  f->act_bytes_fixed = (hc * d * 2 + hc * 4 + (int64_t)c->vocab_size * 4) /* per out row */;
  return DSV4_OK;
}

/* ---- buffers ---- */

static dsv4_status buf_alloc(dsv4i_backend *be, size_t bytes, dsv4i_bbuf *out) {
  (void)be;
  out->impl = dsv4i_calloc(1, bytes ? bytes : 1, "cpu buffer");
  return out->impl ? DSV4_OK : DSV4_ERR_OUT_OF_MEMORY;
}

static void buf_free(dsv4i_backend *be, dsv4i_bbuf b) {
  (void)be;
  free(b.impl);
}

static dsv4_status buf_read(dsv4i_backend *be, dsv4i_bbuf b, size_t off, size_t bytes, void *dst) {
  (void)be;
  if (!b.impl || !dst) return dsv4i_error(DSV4_ERR_INVALID_ARG, "cpu buf_read: NULL");
  memcpy(dst, (const char *)b.impl + off, bytes);
  return DSV4_OK;
}

static dsv4_status buf_write(dsv4i_backend *be, dsv4i_bbuf b, size_t off, size_t bytes,
                             const void *src) {
  (void)be;
  if (!b.impl || !src) return dsv4i_error(DSV4_ERR_INVALID_ARG, "cpu buf_write: NULL");
  memcpy((char *)b.impl + off, src, bytes);
  return DSV4_OK;
}

static dsv4_status sync_noop(dsv4i_backend *be) {
  (void)be;
  return DSV4_OK;
}

/* ---- KV pages ---- */

static dsv4_status kv_copy(dsv4i_backend *be, int32_t n, const int32_t *src, const int32_t *dst) {
  cpu_backend *b = (cpu_backend *)be;
  const size_t pb = b->lay.page_bytes;
  if (b->copy_fault) { /* test hook (cpu_test_hooks.h) */
    const dsv4_status f = b->copy_fault;
    b->copy_fault = DSV4_OK;
    return dsv4i_error(f, "cpu kv_copy: injected fault");
  }
  for (int32_t i = 0; i < n; i++) {
    if (src[i] < 0 || src[i] >= b->pool_pages || dst[i] < 0 || dst[i] >= b->pool_pages)
      return dsv4i_error(DSV4_ERR_INVALID_ARG, "cpu kv_copy: page %d -> %d outside the pool of "
                         "%lld", (int)src[i], (int)dst[i], (long long)b->pool_pages);
    memcpy(b->pool + (size_t)dst[i] * pb, b->pool + (size_t)src[i] * pb, pb);
  }
  return DSV4_OK;
}

dsv4_status dsv4i_cpu_be_load_kv(cpu_backend *b, const dsv4i_kv_step *kv) {
  b->n_seq = 0;
  if (!kv || kv->n_seq < 1 || kv->n_seq > b->n_slots || kv->ld != b->lay.ld || !kv->pages ||
      !kv->len || !kv->end)
    return dsv4i_error(DSV4_ERR_INVALID_ARG, "cpu backend: page table of %d sequences (at most "
                       "%d), row %d (layout %d)", kv ? (int)kv->n_seq : -1, (int)b->n_slots,
                       kv ? (int)kv->ld : -1, (int)b->lay.ld);
  const size_t ld = (size_t)b->lay.ld;
  memcpy(b->rows, kv->pages, sizeof *b->rows * ld * (size_t)kv->n_seq);
  for (int32_t i = 0; i < kv->n_seq; i++) {
    if (kv->len[i] < 0 || kv->end[i] < kv->len[i] || kv->end[i] > b->lay.max_positions)
      return dsv4i_error(DSV4_ERR_INVALID_ARG, "cpu backend: sequence %d holds %lld, reserved "
                         "%lld", (int)i, (long long)kv->len[i], (long long)kv->end[i]);
    b->views[i] = (dsv4i_kv_view){&b->lay, b->pool, b->rows + (size_t)i * ld, kv->len[i],
                                  kv->end[i]};
  }
  b->n_seq = kv->n_seq;
  return DSV4_OK;
}

/* ---- batch ---- */

static dsv4_status set_batch(dsv4i_backend *be, const dsv4i_batch *m) {
  cpu_backend *b = (cpu_backend *)be;
  const int32_t n = m->n_tok;
  if (n < 1 || n > b->max_tok || m->n_pad < n || m->n_pad > b->max_tok || m->n_out < 0 ||
      m->n_out > b->max_out || m->n_out > n)
    return dsv4i_error(DSV4_ERR_INVALID_ARG, "cpu set_batch: %d tokens (bucket %d), %d outputs",
                       (int)n, (int)m->n_pad, (int)m->n_out);
  dsv4i_cpu_set_threads(b->n_threads);
  b->n_tok = 0;
  dsv4_status s = dsv4i_cpu_be_load_kv(b, &m->kv);
  if (s) return s;
  memcpy(b->tok, m->tokens, sizeof *b->tok * (size_t)n);
  memcpy(b->pos, m->pos, sizeof *b->pos * (size_t)n);
  memcpy(b->seq, m->seq, sizeof *b->seq * (size_t)n);
  memcpy(b->layout, m->layout, sizeof *b->layout * (size_t)n);
  memcpy(b->out_tok, m->out_tok, sizeof *b->out_tok * (size_t)m->n_out);
  b->has_image = m->image != NULL;
  if (m->image) memcpy(b->image, m->image, (size_t)n);
  if (b->n_engram_cols > 0) {
    if (!m->engram_ids) return dsv4i_error(DSV4_ERR_INVALID_ARG, "cpu set_batch: no Engram ids");
    memcpy(b->engram_ids, m->engram_ids, sizeof(int64_t) * (size_t)n * (size_t)b->n_engram_cols);
  }
  b->n_out = m->n_out;
  for (int32_t i = 0; i < n && !s; i++) {
    const int32_t r = b->seq[i];
    if (r < 0 || r >= b->n_seq) {
      s = dsv4i_error(DSV4_ERR_INVALID_ARG, "cpu set_batch: token %d: sequence row %d outside "
                      "the page table's %d", (int)i, (int)r, (int)b->n_seq);
      break;
    }
    const dsv4i_kv_view *v = &b->views[r];
    b->tokseq[i] = &b->views[r];
    if (b->tok[i] < 0 || b->tok[i] >= b->vocab)
      s = dsv4i_error(DSV4_ERR_INVALID_ARG, "cpu set_batch: token %d out of range", (int)b->tok[i]);
    else if (i == 0 || r != b->seq[i - 1]) { /* a new run */
      if (b->row_mark[r] || b->pos[i] != v->len)
        s = dsv4i_error(DSV4_ERR_INVALID_ARG,
                        "cpu set_batch: run of sequence row %d starts at %lld, cache holds %lld "
                        "(or the row appears in two runs)", (int)r, (long long)b->pos[i],
                        (long long)v->len);
      b->row_mark[r] = 1;
    } else if (b->pos[i] != b->pos[i - 1] + 1) {
      s = dsv4i_error(DSV4_ERR_INVALID_ARG, "cpu set_batch: positions of sequence row %d not "
                      "consecutive", (int)r);
    }
    if (!s && b->pos[i] >= v->end)
      s = dsv4i_error(DSV4_ERR_INVALID_ARG, "cpu set_batch: position %lld of sequence row %d not "
                      "reserved", (long long)b->pos[i], (int)r);
  }
  memset(b->row_mark, 0, (size_t)b->n_slots);
  for (int32_t r = 0; !s && r < m->n_out; r++)
    if (b->out_tok[r] < 0 || b->out_tok[r] >= n || (r > 0 && b->out_tok[r] <= b->out_tok[r - 1]))
      s = dsv4i_error(DSV4_ERR_INVALID_ARG, "cpu set_batch: output rows not ascending in range");
  if (!s) b->n_tok = n;
  return s;
}

/* ---- create / destroy ---- */

static void destroy(dsv4i_backend *be) {
  cpu_backend *b = (cpu_backend *)be;
  if (!b) return;
  free(b->pool);
  dsv4i_cpu_be_free_blocks(b);
  dsv4i_cpu_dspark_free(b);
  dsv4i_attn_shared_free(&b->sh);
  void *bufs[] = {b->tok, b->seq, b->layout, b->out_tok, b->pos, b->engram_ids, b->image,
                  b->tokseq, b->row_mark, b->rows, b->views, b->accept_scratch, b->x, b->y, b->mixes,
                  b->a_pre, b->a_post, b->a_comb, b->f_post, b->f_comb, b->hsel, b->presel};
  for (size_t i = 0; i < sizeof bufs / sizeof bufs[0]; i++) free(bufs[i]);
  free(b);
}

static const dsv4i_backend_ops cpu_ops = {
  .name = "cpu",
  .destroy = destroy,
  .buf_alloc = buf_alloc,
  .buf_free = buf_free,
  .buf_read = buf_read,
  .buf_write = buf_write,
  .kv_copy = kv_copy,
  .run = dsv4i_cpu_be_run,
  .set_batch = set_batch,
  .embed = dsv4i_cpu_be_embed,
  .engram = dsv4i_cpu_be_engram,
  .block = dsv4i_cpu_be_block,
  .head = dsv4i_cpu_be_head,
  .sample = dsv4i_cpu_be_sample,
  .accept = dsv4i_cpu_be_accept,
  .sync = sync_noop,
  .dspark_extend = dsv4i_cpu_be_dspark_extend, /* cpu_dspark.c */
  .dspark_draft = dsv4i_cpu_be_dspark_draft,
};

static size_t nz(size_t n) { return n ? n : 1; }

static dsv4_status alloc_scratch(cpu_backend *b) {
  const size_t nt = (size_t)b->max_tok, no = (size_t)b->max_out, hc = (size_t)b->hc;
  const size_t d = (size_t)b->dim, nm = (2 + hc) * hc;
#define A(p, n) ((b->p = dsv4i_calloc(nz(n), sizeof *b->p, #p)) != NULL)
  const size_t ns = (size_t)b->n_slots;
  int ok = A(tok, nt) && A(seq, nt) && A(layout, nt) && A(out_tok, nt) && A(pos, nt) &&
           A(image, nt) && A(tokseq, nt) && A(row_mark, ns) && A(views, ns) &&
           A(rows, ns * (size_t)b->lay.ld) && A(x, nt * d) && A(y, nt * d) && A(mixes, nt * nm) &&
           A(a_pre, nt * hc) && A(a_post, nt * hc) && A(a_comb, nt * hc * hc) &&
           A(f_post, nt * hc) && A(f_comb, nt * hc * hc) && A(hsel, no * hc * d) &&
           A(presel, no * hc) && A(engram_ids, nt * (size_t)b->n_engram_cols) &&
           A(accept_scratch, 2 * (size_t)b->vocab);
#undef A
  return ok ? DSV4_OK : DSV4_ERR_OUT_OF_MEMORY;
}

static dsv4_status cpu_create(const dsv4i_backend_desc *d, dsv4i_backend **out) {
  *out = NULL;
  const dsv4i_config *c = dsv4i_model_config(d->model);
  if (d->n_slots < 1 || d->max_batch_tokens < 1 || d->max_out_rows < 1 || d->pool_pages < 1 ||
      d->max_positions < 1 || !d->kv_layout)
    return dsv4i_error(DSV4_ERR_INVALID_ARG, "cpu backend: bad sizes or no KV layout");
  uint64_t pool_bytes;
  if (d->kv_layout->page_bytes != dsv4i_kv_page_bytes(c) ||
      d->kv_layout->max_positions != d->max_positions ||
      !dsv4i_mul_overflow_u64(d->kv_layout->page_bytes, (uint64_t)d->pool_pages, &pool_bytes) ||
      pool_bytes > SIZE_MAX)
    return dsv4i_error(DSV4_ERR_INVALID_ARG, "cpu backend: KV layout of %zu-byte pages for %lld "
                       "positions, the format's is %zu bytes for %lld; or the pool overflows",
                       d->kv_layout->page_bytes, (long long)d->kv_layout->max_positions,
                       dsv4i_kv_page_bytes(c), (long long)d->max_positions);
  /* the pool holds the caches of the stage's layers and no others */
  const dsv4i_model_part part = {d->first_layer, d->last_layer, d->tp_rank, d->tp_size};
  int32_t kv_first, kv_last;
  dsv4i_kv_part_layers(c, &part, &kv_first, &kv_last);
  if (d->kv_layout->first_layer != kv_first || d->kv_layout->last_layer != kv_last)
    return dsv4i_error(DSV4_ERR_INVALID_ARG, "cpu backend: the KV layout has the caches of "
                       "layers %d..%d, the stage's are %d..%d", (int)d->kv_layout->first_layer,
                       (int)d->kv_layout->last_layer - 1, (int)kv_first, (int)kv_last - 1);
  cpu_backend *b = dsv4i_calloc(1, sizeof *b, "cpu backend");
  if (!b) return DSV4_ERR_OUT_OF_MEMORY;
  /* any TP size the block shapes allow (cpu_tp.c checks them per layer) */
  dsv4_status s = dsv4i_backend_init(&b->base, &cpu_ops, DSV4_BACKEND_CPU, d, INT32_MAX);
  if (!s && b->base.tp_size > 1 && !d->tp_comm)
    s = dsv4i_error(DSV4_ERR_INVALID_ARG, "cpu backend: tp_size %d without TP collectives",
                    (int)b->base.tp_size);
  if (s) {
    free(b);
    return s;
  }
  b->tp = b->base.tp_size > 1 ? (const dsv4i_tp_ops *)d->tp_comm : NULL;
  b->model = d->model;
  b->cfg = c;
  b->n_threads = d->n_threads;
  b->hc = c->hc_mult;
  b->dim = c->dim;
  b->vocab = c->vocab_size;
  b->n_engram_cols = c->n_engram * (c->engram_max_ngram - 1) * c->engram_n_heads;
  b->max_tok = d->max_batch_tokens;
  b->max_out = d->max_out_rows;
  b->n_slots = d->n_slots;
  b->lay = *d->kv_layout;
  b->pool_pages = d->pool_pages;
  dsv4i_cpu_set_threads(b->n_threads);
  s = alloc_scratch(b);
  if (!s && !(b->pool = dsv4i_malloc((size_t)pool_bytes, "KV pool pages")))
    s = DSV4_ERR_OUT_OF_MEMORY;
  if (!s) s = dsv4i_attn_shared_init(c, b->max_tok, &b->sh);
  if (!s) s = dsv4i_cpu_be_load_blocks(b, d);
  if (!s) s = dsv4i_cpu_dspark_load(b);
  if (s) {
    destroy(&b->base);
    return s;
  }
  b->base.n_threads = dsv4i_cpu_threads();
  dsv4i_log(d->log, DSV4_LOG_INFO, "cpu backend: %d threads, %lld pages of %zu B, %d slots",
            (int)dsv4i_cpu_threads(), (long long)d->pool_pages, b->lay.page_bytes, (int)b->n_slots);
  *out = &b->base;
  return DSV4_OK;
}

const dsv4i_backend_entry dsv4i_cpu_backend_entry = {
  .kind = DSV4_BACKEND_CPU,
  .name = "cpu",
  .format = cpu_format,
  .create = cpu_create,
};
