/*
 * Engine creation and teardown: memory plan, Engram tables, backend, step
 * workspace. Steps are in step.c, sequences in sequence.c.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "engine/dist.h"
#include "engine/engine.h"
#include "engine/spec.h"
#include "io/tokenizer.h"

static int progress(const dsv4i_engine_args *a, const char *stage, int64_t done, int64_t total) {
  return a->progress ? a->progress(stage, done, total, a->progress_user) : 0;
}

/* The model directory's tokenizer: the ids it defines bound the ids ever
 * drawn (n_valid), and the Engram tables come from it (spec §5.2 a-c).
 * Without tokenizer.json every head row may be drawn (and Engram fails). */
static dsv4_status use_tokenizer(struct dsv4_engine *e) {
  const dsv4i_config *c = e->cfg;
  e->n_valid = e->vocab;
  dsv4i_tokenizer *tok = NULL;
  dsv4_status s = dsv4i_tokenizer_load(dsv4i_model_dir(e->model), &tok);
  if (s == DSV4_ERR_NOT_FOUND && c->n_engram == 0) {
    dsv4i_error_clear();
    return DSV4_OK;
  }
  if (s) {
    if (c->n_engram) dsv4i_error_prefix("Engram tables need the model's tokenizer");
    return s;
  }
  const int32_t n_ids = dsv4i_tokenizer_vocab_size(tok);
  if (n_ids > 0 && n_ids < e->vocab) {
    e->n_valid = n_ids;
    dsv4i_log(&e->args.log, DSV4_LOG_INFO,
              "the head has %d rows, the tokenizer %d ids: rows %d .. %d are never drawn",
              (int)e->vocab, (int)n_ids, (int)n_ids, (int)e->vocab - 1);
  }
  if (c->n_engram) s = dsv4i_engram_tables_create(c, tok, &e->engram);
  dsv4i_tokenizer_free(tok);
  if (s) return s;
  if (e->engram) e->n_engram_cols = e->engram->n_layers * e->engram->n_cols;
  return DSV4_OK;
}

static dsv4_status alloc_workspace(struct dsv4_engine *e) {
  const dsv4i_config *c = e->cfg;
  const size_t nt = (size_t)e->plan.max_batch_tokens, no = (size_t)e->plan.max_out_rows;
  const size_t hc = (size_t)c->hc_mult, dim = (size_t)c->dim;
  dsv4_status s = e->be->ops->buf_alloc(e->be, nt * hc * dim * 2, &e->h);
  if (!s) s = e->be->ops->buf_alloc(e->be, nt * hc * sizeof(float), &e->pre);
  if (!s) s = e->be->ops->buf_alloc(e->be, no * (size_t)e->vocab * sizeof(float), &e->logits);
  if (s) return s;
  e->b_tok = dsv4i_calloc(nt, sizeof *e->b_tok, "batch tokens");
  e->b_slot = dsv4i_calloc(nt, sizeof *e->b_slot, "batch slots");
  e->b_seq = dsv4i_calloc(nt, sizeof *e->b_seq, "batch page-table rows");
  e->b_rslot = dsv4i_calloc((size_t)e->plan.max_seqs, sizeof *e->b_rslot, "batch row slots");
  e->b_rend = dsv4i_calloc((size_t)e->plan.max_seqs, sizeof *e->b_rend, "batch row ends");
  e->b_out = dsv4i_calloc(nt, sizeof *e->b_out, "batch outputs");
  e->b_pos = dsv4i_calloc(nt, sizeof *e->b_pos, "batch positions");
  e->b_layout = dsv4i_calloc(nt, sizeof *e->b_layout, "batch layout");
  e->b_req = dsv4i_calloc(no, sizeof *e->b_req, "sampling requests");
  e->b_q = dsv4i_calloc(no, sizeof *e->b_q, "batch sequences");
  e->b_len = dsv4i_calloc(no, sizeof *e->b_len, "batch lengths");
  e->mark = dsv4i_calloc((size_t)e->plan.max_seqs, 1, "sequence marks");
  e->seqs = dsv4i_calloc((size_t)e->plan.max_seqs, sizeof *e->seqs, "sequence table");
  e->t.layer_ns = dsv4i_calloc((size_t)c->n_layers, sizeof(int64_t), "layer timings");
  if (e->dist && !(e->b_seqid = dsv4i_calloc(nt, sizeof *e->b_seqid, "batch sequence ids")))
    return DSV4_ERR_OUT_OF_MEMORY;
  if (e->n_engram_cols > 0)
    e->b_engram = dsv4i_calloc(nt * (size_t)e->n_engram_cols, sizeof(int64_t), "Engram ids");
  if (!e->b_tok || !e->b_slot || !e->b_seq || !e->b_rslot || !e->b_rend || !e->b_out || !e->b_pos || !e->b_layout || !e->b_req ||
      !e->b_q || !e->b_len || !e->mark || !e->seqs || !e->t.layer_ns ||
      (e->n_engram_cols > 0 && !e->b_engram))
    return DSV4_ERR_OUT_OF_MEMORY;
  return DSV4_OK;
}

/* Which rank this is, for the memory lines ("" for one process). */
static void rank_label(const struct dsv4_engine *e, const dsv4i_dist_info *di, char *buf, size_t n) {
  buf[0] = 0;
  if (e->dist)
    snprintf(buf, n, "rank %d (stage %d of %d, TP rank %d of %d): ", (int)di->rank,
             (int)di->stage, (int)di->pp, (int)di->tp_rank, (int)di->tp);
}

static void log_plan(const struct dsv4_engine *e, const dsv4i_dist_info *di) {
  const dsv4i_plan *p = &e->plan;
  char who[96];
  rank_label(e, di, who, sizeof who);
  dsv4i_log(&e->args.log, DSV4_LOG_INFO,
            "%sengine plan: %d sequences x %lld positions, %lld pages x %lld B + %d slots "
            "x %lld B = %lld B KV; workspace %lld B; prepared weights %lld B; payload buffer "
            "%lld B; checkpoint bytes of its layers %lld B (mapped)", who,
            (int)p->max_seqs, (long long)p->max_ctx, (long long)p->pool_pages,
            (long long)p->fmt.page_bytes, (int)p->max_seqs, (long long)p->fmt.slot_bytes,
            (long long)p->kv_bytes, (long long)p->act_bytes, (long long)p->extra_weight_bytes,
            (long long)p->comm_bytes, (long long)p->mapped_bytes);
}

/* What create allocated (the heap's growth over the call: every thread's, so another
 * thread allocating at the same time is counted too) next to the plan's figure. */
static void log_allocated(const struct dsv4_engine *e, const dsv4i_dist_info *di, int64_t heap0) {
  const int64_t heap1 = dsv4i_heap_in_use();
  char who[96];
  rank_label(e, di, who, sizeof who);
  if (heap0 < 0 || heap1 <= heap0) {
    dsv4i_log(&e->args.log, DSV4_LOG_INFO, "%smemory: planned %lld B at create (the heap's "
              "growth cannot be measured with this allocator)", who, (long long)e->plan.create_bytes);
    return;
  }
  const int64_t got = heap1 - heap0, plan = e->plan.create_bytes;
  dsv4i_log(&e->args.log, DSV4_LOG_INFO,
            "%smemory: allocated %lld B at create, planned %lld B (KV %lld, workspace %lld, "
            "prepared weights %lld, payload buffer %lld; %+.2f %%)", who, (long long)got,
            (long long)plan, (long long)e->plan.kv_bytes, (long long)e->plan.act_bytes,
            (long long)e->plan.fmt.weight_bytes, (long long)e->plan.comm_bytes,
            plan > 0 ? 100.0 * (double)(got - plan) / (double)plan : 0.0);
}

dsv4_status dsv4i_engine_plan(const struct dsv4_model *model, const dsv4i_engine_args *a,
                              const dsv4i_model_part *part, dsv4i_plan *out) {
  const dsv4i_config *c = dsv4i_model_config(model);
  dsv4i_plan_req rq;
  memset(&rq, 0, sizeof rq);
  rq.backend = a->backend;
  rq.max_seqs = a->max_seqs;
  rq.max_ctx = a->max_ctx;
  rq.kv_budget = a->kv_budget;
  rq.chunk = a->chunk;
  rq.kv_format = a->kv_format;
  rq.host_limit = a->backend == DSV4_BACKEND_CPU ? dsv4i_plan_host_memory() : 0;
  rq.mapped_bytes = (int64_t)dsv4i_model_contract(model)->payload_bytes;
  rq.copied_weight_bytes = (int64_t)dsv4i_model_realigned_bytes(model);
  if (part) { /* one rank: its stage's layers and TP shard */
    rq.part = *part;
    rq.mapped_bytes = dsv4i_weights_part_bytes(dsv4i_model_weights(model), c, part,
                                               c->n_mtp_layers > 0 && c->dspark_block_size > 0);
  }
  return dsv4i_plan_make(c, &rq, out);
}

dsv4_status dsv4i_engine_create(struct dsv4_model *model, const dsv4i_engine_args *a,
                                struct dsv4_engine **out) {
  *out = NULL;
  const int64_t t0 = dsv4i_now_ns(), heap0 = dsv4i_heap_in_use();
  if (dsv4i_model_flags(model) & DSV4_MODEL_F_CONFIG_ONLY)
    return dsv4i_error(DSV4_ERR_INVALID_ARG,
                       "engine: the model was loaded with DSV4_MODEL_F_CONFIG_ONLY (no weights)");
  const dsv4i_config *c = dsv4i_model_config(model);
  if (a->max_ctx > c->max_position_embeddings)
    return dsv4i_error(DSV4_ERR_INVALID_ARG,
                       "engine: max_context %lld exceeds the model's max_position_embeddings %lld",
                       (long long)a->max_ctx, (long long)c->max_position_embeddings);
  if (a->max_seqs > DSV4I_MAX_SEQS)
    return dsv4i_error(DSV4_ERR_INVALID_ARG, "engine: max_sequences %d above %d",
                       (int)a->max_seqs, DSV4I_MAX_SEQS);

  struct dsv4_engine *e = dsv4i_calloc(1, sizeof *e, "engine");
  if (!e) return DSV4_ERR_OUT_OF_MEMORY;
  e->model = model;
  e->cfg = c;
  e->args = *a;
  e->vocab = c->vocab_size;
  e->last_error = dsv4i_calloc(1, DSV4I_ERROR_CAP, "engine error slot");
  dsv4_status s = e->last_error ? DSV4_OK : DSV4_ERR_OUT_OF_MEMORY;

  /* a rank of a distributed engine joins the job first: the ranks agree on the
   * checkpoint and parameters before anything depends on them */
  if (!s && a->mpi_comm) s = dsv4i_dist_create(e, &e->dist);
  dsv4i_model_part part = {0, c->n_layers, 0, 1}; /* one process: the whole model */
  dsv4i_dist_info di;
  memset(&di, 0, sizeof di);
  if (!s && e->dist) { /* this rank's stage and TP shard */
    dsv4i_dist_get_info(e->dist, &di);
    part = (dsv4i_model_part){di.first_layer, di.last_layer, di.tp_rank, di.tp};
  } else if (a->tp_local) { /* tests: one TP shard of the whole model, in process */
    part = (dsv4i_model_part){0, c->n_layers, a->tp_local->rank, a->tp_local->size};
  }
  const int sharded = e->dist || a->tp_local;
  if (!s) s = dsv4i_engine_plan(model, a, sharded ? &part : NULL, &e->plan);
  if (!s && progress(a, "engram", 0, 1)) s = dsv4i_error(DSV4_ABORTED, "engine: aborted");
  if (!s) s = use_tokenizer(e);
  if (!s && progress(a, "engram", 1, 1)) s = dsv4i_error(DSV4_ABORTED, "engine: aborted");
  if (!s && e->dist) { /* the stage payload buffer, at its largest, now */
    const int64_t cb = dsv4i_dist_reserve(e->dist, c, e->plan.max_batch_tokens,
                                          e->plan.max_out_rows, e->n_engram_cols);
    s = cb < 0 ? DSV4_ERR_OUT_OF_MEMORY : dsv4i_plan_add_comm(&e->plan, cb);
  }
  if (!s) log_plan(e, &di);
  dsv4i_kv_layout lay;
  if (!s)
    s = dsv4i_kv_layout_init_part(c, &part, a->kv_format, 0, (size_t)e->plan.fmt.page_bytes,
                                  e->plan.max_ctx, &lay);
  if (!s) {
    dsv4i_backend_desc d;
    memset(&d, 0, sizeof d);
    d.model = model;
    d.device = a->device;
    d.n_threads = a->n_threads;
    d.n_slots = e->plan.max_seqs;
    d.max_batch_tokens = e->plan.max_batch_tokens;
    d.max_out_rows = e->plan.max_out_rows;
    d.cpu_order = (a->flags & DSV4I_ENGINE_F_GPU_CPU_ORDER) ? 1 : 0;
    d.max_positions = e->plan.max_ctx;
    d.pool_pages = e->plan.pool_pages;
    d.kv_layout = &lay;
    d.log = &e->args.log;
    d.progress = a->progress;
    d.progress_user = a->progress_user;
    d.first_layer = part.first_layer;
    d.last_layer = part.last_layer;
    d.tp_rank = part.tp_rank;
    d.tp_size = part.tp_size;
    d.tp_comm = e->dist ? di.tp_comm : (void *)a->tp_local;
    d.n_buckets = e->plan.n_buckets;
    d.bucket_tokens = e->plan.buckets;
    s = dsv4i_backend_create(a->backend, &d, &e->be);
  }
  if (!s) s = dsv4i_kv_cache_init(&e->kv, &lay, e->plan.pool_pages, e->plan.max_seqs, e->be);
  if (!s) s = alloc_workspace(e);
  if (!s) s = dsv4i_spec_create(e); /* DSpark draft / verify (spec.c) */
  if (e->dist) s = dsv4i_dist_agree(e->dist, s, "creating the engine"); /* every rank or none */
  if (s) {
    dsv4i_engine_free(e);
    return s;
  }
  log_allocated(e, &di, heap0);
  e->t.create_ns = dsv4i_now_ns() - t0;
  progress(a, "ready", 1, 1);
  *out = e;
  return DSV4_OK;
}

dsv4_status dsv4i_engine_note(struct dsv4_engine *e, dsv4_status s) {
  if (s == DSV4_ERR_DEVICE_LOST && e) e->lost = s;
  return s;
}

dsv4_status dsv4i_engine_live(const struct dsv4_engine *e) {
  if (!e->lost) return DSV4_OK;
  return dsv4i_error(DSV4_ERR_DEVICE_LOST, "engine: its device was lost in an earlier call; "
                     "the engine cannot be used any more (free it)");
}

void dsv4i_engine_free(struct dsv4_engine *e) {
  if (!e) return;
  if (e->seqs)
    for (int32_t i = 0; i < e->plan.max_seqs; i++)
      if (e->seqs[i].id) {
        dsv4i_kv_slot_close(&e->kv, e->seqs[i].slot);
        dsv4i_engram_history_free(e->seqs[i].hist);
      }
  if (e->be) {
    dsv4i_spec_free(e);
    e->be->ops->buf_free(e->be, e->h);
    e->be->ops->buf_free(e->be, e->pre);
    e->be->ops->buf_free(e->be, e->logits);
    e->be->ops->buf_free(e->be, e->taps);
  }
  dsv4i_kv_cache_free(&e->kv);
  dsv4i_backend_destroy(e->be);
  dsv4i_dist_free(e->dist);
  dsv4i_engram_tables_free(e->engram);
  free(e->b_seqid);
  free(e->seqs);
  free(e->b_tok);
  free(e->b_slot);
  free(e->b_seq);
  free(e->b_rslot);
  free(e->b_rend);
  free(e->b_out);
  free(e->b_pos);
  free(e->b_layout);
  free(e->b_req);
  free(e->b_q);
  free(e->b_len);
  free(e->b_engram);
  free(e->mark);
  free(e->t.layer_ns);
  free(e->last_error);
  if (e->owns_model) dsv4i_model_close(e->model);
  free(e);
}
