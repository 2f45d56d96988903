/*
 * Memory plan (plan.h). Integer arithmetic with overflow checks: a plan for
 * an absurd request must say "does not fit", not wrap around.
 */
#include <string.h>
#include <unistd.h>

#include "engine/kv.h"
#include "engine/plan.h"
#include "model/config.h"

static int mul_ok(int64_t a, int64_t b, int64_t *out) {
  uint64_t r;
  if (a < 0 || b < 0 || !dsv4i_mul_overflow_u64((uint64_t)a, (uint64_t)b, &r) ||
      r > (uint64_t)INT64_MAX)
    return 0;
  *out = (int64_t)r;
  return 1;
}

static int add_ok(int64_t a, int64_t b, int64_t *out) {
  if (a < 0 || b < 0 || a > INT64_MAX - b) return 0;
  *out = a + b;
  return 1;
}

int64_t dsv4i_plan_host_memory(void) {
  long pages = sysconf(_SC_PHYS_PAGES), size = sysconf(_SC_PAGESIZE);
  if (pages <= 0 || size <= 0) return 0;
  int64_t r;
  return mul_ok(pages, size, &r) ? r : INT64_MAX;
}

static dsv4_status too_big(const char *what) {
  return dsv4i_error(DSV4_ERR_DOES_NOT_FIT, "memory plan: %s overflows 64-bit byte counts", what);
}

int dsv4i_plan_workspace(const dsv4i_cache_format *f, int64_t tokens, int64_t out_rows,
                         int64_t *bytes) {
  int64_t rows = 0, t = 0, t_rows = 0, t_out = 0;
  if (!mul_ok(out_rows, f->draft_rows, &rows)) return 0;
  if (rows < tokens) rows = tokens;
  return mul_ok(tokens, f->act_bytes_per_tok, &t) && mul_ok(rows, f->act_bytes_per_row, &t_rows) &&
         mul_ok(out_rows, f->act_bytes_per_out, &t_out) && add_ok(t, t_rows, &t) &&
         add_ok(t, t_out, &t) && add_ok(t, f->act_bytes_fixed, bytes);
}

dsv4_status dsv4i_plan_make(const struct dsv4i_config *cfg, const dsv4i_plan_req *req,
                            dsv4i_plan *out) {
  memset(out, 0, sizeof *out);
  if (!cfg || !req || req->max_seqs < 1 || req->max_ctx < 1 || req->chunk < 1 ||
      req->kv_budget < 0 || req->host_limit < 0)
    return dsv4i_error(DSV4_ERR_INVALID_ARG, "memory plan: bad request");
  dsv4_status s = dsv4i_backend_format(req->backend, cfg, req->max_ctx, &req->part,
                                       req->kv_format, &out->fmt);
  if (s) return s;
  const dsv4i_cache_format *f = &out->fmt;
  if (f->page_bytes < 1 || f->seq_pages < 1 || f->slot_bytes < 0)
    return dsv4i_error(DSV4_ERR_INTERNAL, "memory plan: backend format has no page size");
  /* per slot: the backend's part and the engine's page tables (engine/kv.h) */
  dsv4i_kv_layout lay;
  if ((s = dsv4i_kv_layout_init_part(cfg, &req->part, req->kv_format, 0, (size_t)f->page_bytes,
                                     req->max_ctx, &lay)))
    return s;
  out->fmt.slot_bytes += dsv4i_kv_slot_bytes(&lay);
  out->max_seqs = req->max_seqs;
  out->kv_format = req->kv_format;
  /* a prefill step never holds more tokens than a sequence can: cap before sizing the workspace */
  out->chunk = req->chunk < req->max_ctx ? req->chunk : (int32_t)req->max_ctx;
  out->max_ctx = req->max_ctx;
  out->max_batch_tokens = out->chunk > req->max_seqs ? out->chunk : req->max_seqs;
  out->max_out_rows = req->max_seqs;
  out->n_buckets = 0;
  for (int64_t b = 1; b < out->max_batch_tokens && out->n_buckets < DSV4I_PLAN_MAX_BUCKETS - 1; b *= 2)
    out->buckets[out->n_buckets++] = (int32_t)b;
  out->buckets[out->n_buckets++] = out->max_batch_tokens;
  out->mapped_bytes = req->mapped_bytes;
  if (req->copied_weight_bytes < 0 ||
      !add_ok(f->weight_bytes, req->copied_weight_bytes, &out->extra_weight_bytes))
    return dsv4i_error(DSV4_ERR_INVALID_ARG, "memory plan: bad copied weight bytes");
  out->pages_per_seq = f->seq_pages;

  int64_t one_seq, all_pages, t;
  if (!mul_ok(req->max_seqs, f->slot_bytes, &out->slot_bytes_total)) return too_big("slots");
  if (!mul_ok(out->pages_per_seq, f->page_bytes, &one_seq)) return too_big("one sequence");
  if (!mul_ok(out->pages_per_seq, req->max_seqs, &all_pages)) return too_big("pages");
  if (req->kv_budget == 0) {
    out->pool_pages = all_pages;
  } else {
    int64_t need_min;
    if (!add_ok(out->slot_bytes_total, one_seq, &need_min)) return too_big("minimum");
    if (req->kv_budget < need_min)
      return dsv4i_error(DSV4_ERR_DOES_NOT_FIT,
                         "memory plan: KV budget %lld B cannot hold %d sequence slots "
                         "(%lld B each) plus one sequence at max context %lld "
                         "(%lld pages of %lld B = %lld B); needs at least %lld B",
                         (long long)req->kv_budget, (int)req->max_seqs, (long long)f->slot_bytes,
                         (long long)req->max_ctx, (long long)out->pages_per_seq,
                         (long long)f->page_bytes, (long long)one_seq, (long long)need_min);
    int64_t avail = req->kv_budget - out->slot_bytes_total;
    const int64_t pages = avail / f->page_bytes;
    out->pool_pages = pages < all_pages ? pages : all_pages;
  }
  if (!mul_ok(out->pool_pages, f->page_bytes, &out->pool_bytes)) return too_big("pool");
  out->full_seqs = out->pool_pages / out->pages_per_seq;
  if (!add_ok(out->slot_bytes_total, out->pool_bytes, &out->kv_bytes)) return too_big("KV");
  if (!mul_ok(req->max_seqs, req->max_ctx, &t) || !mul_ok(t, 4, &out->engram_hist_bytes))
    return too_big("Engram history");
  if (cfg->n_engram == 0) out->engram_hist_bytes = 0;
  if (!dsv4i_plan_workspace(f, out->max_batch_tokens, out->max_out_rows, &out->act_bytes))
    return dsv4i_error(DSV4_ERR_DOES_NOT_FIT,
                       "memory plan: the workspace for %d tokens per step (max of prefill_chunk "
                       "and max_sequences) overflows 64-bit byte counts; lower prefill_chunk",
                       (int)out->max_batch_tokens);
  /* create allocates the caches, the workspace and the backend's prepared weights (the
   * copied checkpoint tensors were allocated by the model's load) */
  if (!add_ok(out->kv_bytes, out->act_bytes, &t) || !add_ok(t, f->weight_bytes, &out->create_bytes) ||
      !add_ok(out->kv_bytes, out->engram_hist_bytes, &t) || !add_ok(t, out->act_bytes, &t) ||
      !add_ok(t, out->extra_weight_bytes, &out->total_bytes))
    return too_big("total");
  if (req->host_limit > 0 && out->total_bytes > req->host_limit) {
    /* name the knob of the largest part: the workspace scales with prefill_chunk */
    const int ws = out->act_bytes > out->kv_bytes && out->act_bytes > out->engram_hist_bytes;
    return dsv4i_error(DSV4_ERR_DOES_NOT_FIT,
                       "memory plan: %lld B needed (KV %lld = %d slots x %lld + %lld pages x %lld; "
                       "Engram history %lld; workspace %lld for %d tokens per step; prepared "
                       "weights %lld) but the machine has %lld B; lower %s",
                       (long long)out->total_bytes, (long long)out->kv_bytes, (int)req->max_seqs,
                       (long long)f->slot_bytes, (long long)out->pool_pages,
                       (long long)f->page_bytes, (long long)out->engram_hist_bytes,
                       (long long)out->act_bytes, (int)out->max_batch_tokens,
                       (long long)out->extra_weight_bytes, (long long)req->host_limit,
                       ws ? "prefill_chunk (the workspace is the largest part)"
                          : "max_sequences, max_context or the KV budget");
  }
  return DSV4_OK;
}

dsv4_status dsv4i_plan_add_comm(dsv4i_plan *p, int64_t bytes) {
  if (bytes < 0 || !add_ok(p->comm_bytes, bytes, &p->comm_bytes) ||
      !add_ok(p->create_bytes, bytes, &p->create_bytes) ||
      !add_ok(p->total_bytes, bytes, &p->total_bytes))
    return too_big("communication buffers");
  return DSV4_OK;
}

int32_t dsv4i_plan_bucket(const dsv4i_plan *p, int32_t n_tok) {
  for (int32_t i = 0; i < p->n_buckets; i++)
    if (p->buckets[i] >= n_tok) return p->buckets[i];
  return p->max_batch_tokens;
}
