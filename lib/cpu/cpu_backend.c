/*
 * CPU implementation of the engine's backend interface (backend/backend.h):
 * storage format for the planner, create/destroy, host buffers, cache slots
 * over the paged caches of kvcache.h, and the step metadata. The step ops
 * are in cpu_backend_ops.c, weight binding in cpu_backend_load.c.
 */
#include <stdlib.h>
#include <string.h>

#include "cpu/cpu_backend.h"
#include "cpu/cpu_dspark.h"

/* Page size: 16 of the largest record (the CSTATE record, 8·head_dim bytes),
 * at least 4 KiB, a multiple of 64. */
static size_t page_bytes_for(const dsv4i_config *c) {
  int64_t r = (int64_t)c->head_dim * 8;
  const int64_t w = dsv4i_kv_record_bytes(c, DSV4I_KVREC_WINDOW);
  if (w > r) r = w;
  int64_t p = 16 * r;
  if (p < 4096) p = 4096;
  return (size_t)((p + 63) / 64 * 64);
}

static dsv4_status cpu_format(const struct dsv4i_config *c, int64_t max_positions,
                                     dsv4i_cache_format *f) {
  memset(f, 0, sizeof *f);
  dsv4i_kv_layout lay;
  dsv4_status s = dsv4i_kv_layout_init(c, 0, page_bytes_for(c), &lay);
  if (s) return s;
  f->page_bytes = (int64_t)lay.page_bytes;
  for (int32_t k = 0; k < DSV4I_KV_KINDS; k++) {
    f->seq_pages += dsv4i_kv_pages_for(&lay, k, max_positions);
    if (k == DSV4I_KV_WINDOW || k == DSV4I_KV_CSTATE) f->ring_pages += dsv4i_kv_pages_for(&lay, k, 1);
  }
  for (int32_t L = 0; L < lay.n_layers; L++)
    if (lay.ratio[L] > 0)
      f->bytes_per_pos += (lay.rec_bytes[DSV4I_KV_COMP] +
                           (lay.has_idxk[L] ? lay.rec_bytes[DSV4I_KV_IDXK] : 0)) / lay.ratio[L];
  /* page tables of one slot + its struct */
  f->slot_bytes = f->seq_pages * (int64_t)sizeof(int32_t) +
                  (int64_t)(DSV4I_KV_KINDS * lay.n_layers) * (int64_t)sizeof(dsv4i_kv_ptab) + 256;
  /* wo_a dequantised to bf16 per attention layer (spec §3.3) */
  const int64_t wo_a = (int64_t)c->o_groups * c->o_lora_rank *
                       ((int64_t)c->n_heads * c->head_dim / c->o_groups) * 2;
  f->weight_bytes = wo_a * c->n_layers;
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

/* ---- slots ---- */

static dsv4_status slot_get(cpu_backend *b, int32_t slot, dsv4i_kv_seq **out) {
  if (slot < 0 || slot >= b->n_slots || !b->slots[slot])
    return dsv4i_error(DSV4_ERR_INVALID_ARG, "cpu backend: cache slot %d is not open", (int)slot);
  *out = b->slots[slot];
  return DSV4_OK;
}

static dsv4_status slot_new(cpu_backend *b, dsv4i_kv_seq *src, int32_t *slot) {
  int32_t i = 0;
  while (i < b->n_slots && b->slots[i]) i++;
  if (i == b->n_slots)
    return dsv4i_error(DSV4_KV_FULL, "cpu backend: all %d cache slots are in use", (int)b->n_slots);
  dsv4i_kv_pool *pools[DSV4I_KV_KINDS] = {b->pool, b->pool, b->pool, b->pool};
  dsv4_status s = src ? dsv4i_kv_seq_fork(src, &b->slots[i])
                      : dsv4i_kv_seq_create(&b->lay, pools, &b->slots[i]);
  if (s) return s;
  *slot = i;
  return DSV4_OK;
}

static dsv4_status slot_open(dsv4i_backend *be, int32_t *slot) {
  return slot_new((cpu_backend *)be, NULL, slot);
}

static dsv4_status slot_fork(dsv4i_backend *be, int32_t src, int32_t *dst) {
  dsv4i_kv_seq *s = NULL;
  dsv4_status st = slot_get((cpu_backend *)be, src, &s);
  return st ? st : slot_new((cpu_backend *)be, s, dst);
}

static void slot_close(dsv4i_backend *be, int32_t slot) {
  cpu_backend *b = (cpu_backend *)be;
  if (slot < 0 || slot >= b->n_slots) return;
  dsv4i_kv_seq_free(b->slots[slot]);
  b->slots[slot] = NULL;
}

static dsv4_status slot_reserve(dsv4i_backend *be, int32_t n, const int32_t *slots,
                                const int64_t *len) {
  cpu_backend *b = (cpu_backend *)be;
  if (n < 0 || n > b->max_tok) return dsv4i_error(DSV4_ERR_INVALID_ARG, "cpu reserve: n %d", (int)n);
  dsv4_status s = DSV4_OK;
  for (int32_t i = 0; i < n && !s; i++) {
    if ((s = slot_get(b, slots[i], &b->run_seq[i]))) break;
    b->run_end[i] = len[i] > b->run_seq[i]->n_pos ? len[i] : b->run_seq[i]->n_pos;
  }
  return s ? s : dsv4i_kv_reserve(b->run_seq, b->run_end, n);
}

static dsv4_status slot_truncate(dsv4i_backend *be, int32_t slot, int64_t len) {
  dsv4i_kv_seq *s = NULL;
  dsv4_status st = slot_get((cpu_backend *)be, slot, &s);
  return st ? st : dsv4i_kv_seq_truncate(s, len);
}

static void usage(const dsv4i_backend *be, dsv4i_cache_usage *u) {
  const cpu_backend *b = (const cpu_backend *)be;
  u->pages_total = dsv4i_kv_pool_n_pages(b->pool);
  u->pages_used = u->pages_total - dsv4i_kv_pool_free_pages(b->pool);
  u->slots_total = b->n_slots;
  u->slots_used = 0;
  for (int32_t i = 0; i < b->n_slots; i++) u->slots_used += b->slots[i] != NULL;
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
  memcpy(b->tok, m->tokens, sizeof *b->tok * (size_t)n);
  memcpy(b->pos, m->pos, sizeof *b->pos * (size_t)n);
  memcpy(b->slot, m->slot, sizeof *b->slot * (size_t)n);
  memcpy(b->layout, m->layout, sizeof *b->layout * (size_t)n);
  memcpy(b->out_tok, m->out_tok, sizeof *b->out_tok * (size_t)m->n_out);
  b->has_image = m->image != NULL;
  if (m->image) memcpy(b->image, m->image, (size_t)n);
  if (b->n_engram_cols > 0) {
    if (!m->engram_ids) return dsv4i_error(DSV4_ERR_INVALID_ARG, "cpu set_batch: no Engram ids");
    memcpy(b->engram_ids, m->engram_ids, sizeof(int64_t) * (size_t)n * (size_t)b->n_engram_cols);
  }
  b->n_tok = n;
  b->n_out = m->n_out;
  b->n_run = 0;
  dsv4_status s = DSV4_OK;
  for (int32_t i = 0; i < n && !s; i++) {
    if ((s = slot_get(b, b->slot[i], &b->tokseq[i]))) break;
    if (b->tok[i] < 0 || b->tok[i] >= b->vocab)
      s = dsv4i_error(DSV4_ERR_INVALID_ARG, "cpu set_batch: token %d out of range", (int)b->tok[i]);
    else if (i == 0 || b->slot[i] != b->slot[i - 1]) { /* a new run */
      if (b->slot_mark[b->slot[i]] || b->pos[i] != b->tokseq[i]->n_pos)
        s = dsv4i_error(DSV4_ERR_INVALID_ARG,
                        "cpu set_batch: run of slot %d starts at %lld, cache holds %lld (or the "
                        "slot appears in two runs)", (int)b->slot[i], (long long)b->pos[i],
                        (long long)b->tokseq[i]->n_pos);
      b->slot_mark[b->slot[i]] = 1;
      b->run_seq[b->n_run] = b->tokseq[i];
      b->run_end[b->n_run++] = b->pos[i] + 1;
    } else if (b->pos[i] != b->pos[i - 1] + 1) {
      s = dsv4i_error(DSV4_ERR_INVALID_ARG, "cpu set_batch: positions of slot %d not consecutive",
                      (int)b->slot[i]);
    } else {
      b->run_end[b->n_run - 1] = b->pos[i] + 1;
    }
    if (!s && b->pos[i] >= b->tokseq[i]->n_resv)
      s = dsv4i_error(DSV4_ERR_INVALID_ARG, "cpu set_batch: position %lld of slot %d not reserved",
                      (long long)b->pos[i], (int)b->slot[i]);
  }
  for (int32_t i = 0; i < n; i++)
    if (b->slot[i] >= 0 && b->slot[i] < b->n_slots) b->slot_mark[b->slot[i]] = 0;
  for (int32_t r = 0; !s && r < m->n_out; r++)
    if (b->out_tok[r] < 0 || b->out_tok[r] >= n || (r > 0 && b->out_tok[r] <= b->out_tok[r - 1]))
      s = dsv4i_error(DSV4_ERR_INVALID_ARG, "cpu set_batch: output rows not ascending in range");
  if (s) b->n_tok = 0;
  return s;
}

/* ---- create / destroy ---- */

static void destroy(dsv4i_backend *be) {
  cpu_backend *b = (cpu_backend *)be;
  if (!b) return;
  if (b->slots)
    for (int32_t i = 0; i < b->n_slots; i++) dsv4i_kv_seq_free(b->slots[i]);
  free(b->slots);
  dsv4i_kv_pool_free(b->pool);
  dsv4i_cpu_be_free_blocks(b);
  dsv4i_cpu_dspark_free(b);
  dsv4i_attn_shared_free(&b->sh);
  void *bufs[] = {b->tok, b->slot, b->layout, b->out_tok, b->pos, b->engram_ids, b->image,
                  b->tokseq, b->run_seq, b->run_end, b->slot_mark, b->accept_scratch, b->x, b->y, b->mixes,
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
  .slot_open = slot_open,
  .slot_reserve = slot_reserve,
  .slot_truncate = slot_truncate,
  .slot_fork = slot_fork,
  .slot_close = slot_close,
  .usage = usage,
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
  int ok = A(tok, nt) && A(slot, nt) && A(layout, nt) && A(out_tok, nt) && A(pos, nt) &&
           A(image, nt) && A(tokseq, nt) && A(run_seq, nt) && A(run_end, nt) &&
           A(slot_mark, (size_t)b->n_slots) && A(x, nt * d) && A(y, nt * d) && A(mixes, nt * nm) &&
           A(a_pre, nt * hc) && A(a_post, nt * hc) && A(a_comb, nt * hc * hc) &&
           A(f_post, nt * hc) && A(f_comb, nt * hc * hc) && A(hsel, no * hc * d) &&
           A(presel, no * hc) && A(engram_ids, nt * (size_t)b->n_engram_cols) &&
           A(slots, (size_t)b->n_slots) && A(accept_scratch, 2 * (size_t)b->vocab);
#undef A
  return ok ? DSV4_OK : DSV4_ERR_OUT_OF_MEMORY;
}

static dsv4_status cpu_create(const dsv4i_backend_desc *d, dsv4i_backend **out) {
  *out = NULL;
  const dsv4i_config *c = dsv4i_model_config(d->model);
  if (d->n_slots < 1 || d->max_batch_tokens < 1 || d->max_out_rows < 1 || d->pool_pages < 1 ||
      d->max_positions < 1)
    return dsv4i_error(DSV4_ERR_INVALID_ARG, "cpu backend: bad sizes");
  cpu_backend *b = dsv4i_calloc(1, sizeof *b, "cpu backend");
  if (!b) return DSV4_ERR_OUT_OF_MEMORY;
  dsv4_status s = dsv4i_backend_init(&b->base, &cpu_ops, DSV4_BACKEND_CPU, d, 1);
  if (s) {
    free(b);
    return s;
  }
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
  dsv4i_cpu_set_threads(b->n_threads);
  s = alloc_scratch(b);
  if (!s) s = dsv4i_kv_layout_init(c, 0, page_bytes_for(c), &b->lay);
  if (!s) s = dsv4i_kv_pool_create(b->lay.page_bytes, d->pool_pages, &b->pool);
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
