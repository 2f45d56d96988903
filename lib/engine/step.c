/*
 * Prefill and batched decode: validation, capacity, Engram hashing, batch
 * assembly, the step through the backend, logits read-back and sampling.
 * The order of backend calls is the reference's (spec §5.1-§5.6); see
 * backend/backend.h for the contract.
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "engine/dist.h"
#include "engine/engine.h"

/* per-op timing hook of the block-by-block run */
static const int32_t step_op[] = {[DSV4I_STEP_EMBED] = DSV4I_OP_EMBED,
                                  [DSV4I_STEP_ENGRAM] = DSV4I_OP_ENGRAM,
                                  [DSV4I_STEP_BLOCK] = DSV4I_OP_BLOCK,
                                  [DSV4I_STEP_DSPARK] = DSV4I_OP_DSPARK,
                                  [DSV4I_STEP_HEAD] = DSV4I_OP_HEAD};

static int64_t hook_begin(void *user) { return dsv4i_op_begin(user); }

static void hook_end(void *user, int64_t t0, int32_t op, int32_t layer) {
  dsv4i_op_end(user, t0, step_op[op], layer);
}

dsv4_status dsv4i_engine_run_local(struct dsv4_engine *e, const dsv4i_batch *b) {
  const dsv4i_step_io io = {b, e->h, e->pre, e->taps, e->logits};
  dsv4_status s;
  const int64_t t0 = dsv4i_now_ns();
  if (e->args.flags & DSV4I_ENGINE_F_OP_TIMINGS) { /* block by block, synced after each op */
    const dsv4i_step_hook hook = {hook_begin, hook_end, e};
    s = dsv4i_backend_run_blocks(e->be, &io, &hook);
  } else {
    s = e->be->ops->run(e->be, &io);
  }
  e->t.stage_ns += dsv4i_now_ns() - t0;
  return dsv4i_engine_note(e, s);
}

dsv4_status dsv4i_engine_step_table(struct dsv4_engine *e, dsv4i_batch *b, const int32_t *slot,
                                    int32_t *n_runs) {
  /* one page-table row per run of a slot's consecutive tokens */
  int32_t n_run = 0;
  *n_runs = 0;
  for (int32_t t = 0; t < b->n_tok; t++) {
    if (t == 0 || slot[t] != slot[t - 1]) {
      if (n_run == e->plan.max_seqs)
        return dsv4i_error(DSV4_ERR_INTERNAL, "step: more runs than sequences");
      e->b_rslot[n_run++] = slot[t];
    }
    e->b_seq[t] = n_run - 1;
    e->b_rend[n_run - 1] = b->pos[t] + 1;
  }
  b->seq = e->b_seq;
  *n_runs = n_run;
  return dsv4i_kv_step_table(&e->kv, n_run, e->b_rslot, e->b_rend, &b->kv);
}

dsv4_status dsv4i_engine_run_step(struct dsv4_engine *e, dsv4i_batch *b, const int32_t *slot) {
  int32_t n_run = 0;
  dsv4_status s = dsv4i_engine_step_table(e, b, slot, &n_run);
  if (s) return s;
  if (e->dist) { /* over the pipeline: the payload names each token's slot and sequence */
    for (int32_t t = 0; t < b->n_tok; t++) {
      e->b_seqid[t] = 0;
      for (int32_t j = 0; j < e->plan.max_seqs; j++)
        if (e->seqs[j].id && e->seqs[j].slot == slot[t]) e->b_seqid[t] = e->seqs[j].id;
    }
    const dsv4i_step_io io = {b, e->h, e->pre, e->taps, e->logits};
    s = dsv4i_dist_run_step(e, &io, slot, e->b_seqid);
  } else {
    s = dsv4i_engine_run_local(e, b);
  }
  /* every layer holds the runs' positions now (on every rank: the step status is agreed) */
  if (!s) s = dsv4i_kv_step_commit(&e->kv, n_run, e->b_rslot, e->b_rend);
  return dsv4i_engine_note(e, s);
}

dsv4_status dsv4i_engine_reserve(struct dsv4_engine *e, int32_t n, dsv4i_seq *const *qs,
                                 const int32_t *slots, const int64_t *targets) {
  const dsv4_status s = dsv4i_kv_slot_reserve(&e->kv, n, slots, targets);
  if (s != DSV4_OK && s != DSV4_KV_FULL && s != DSV4_ERR_INVALID_ARG)
    for (int32_t i = 0; i < n; i++) qs[i]->damaged = 1; /* copies of shared pages failed */
  return dsv4i_engine_note(e, s);
}


/* Undo an abandoned step of one sequence, keeping the step's error message. */
static void rollback(struct dsv4_engine *e, dsv4i_seq *q, int64_t len) {
  if (q->hist && dsv4i_engram_history_len(q->hist) > len)
    dsv4i_engram_history_truncate(q->hist, len);
  if (dsv4i_kv_slot_truncate(&e->kv, q->slot, len) != DSV4_OK) q->damaged = 1;
}

static dsv4_status fail_rollback(struct dsv4_engine *e, dsv4_status s, dsv4i_seq **qs,
                                 const int64_t *lens, int32_t n) {
  char *msg = dsv4i_strdup(dsv4i_error_message(), "error message");
  for (int32_t i = 0; i < n; i++) rollback(e, qs[i], lens[i]);
  dsv4i_error(s, "%s", msg ? msg : "(message lost)");
  free(msg);
  return s;
}

static dsv4_status check_tokens(const struct dsv4_engine *e, const int32_t *tok, int64_t n,
                                const char *what) {
  for (int64_t i = 0; i < n; i++)
    if (tok[i] < 0 || tok[i] >= e->vocab)
      return dsv4i_error(DSV4_ERR_INVALID_TOKEN, "%s token %lld is %d, outside [0, %d)", what,
                         (long long)i, (int)tok[i], (int)e->vocab);
  return DSV4_OK;
}

/* DSV4_ERR_NOT_FINITE unless a token can be drawn from every row's first
 * n_valid logits (host): no NaN, no +inf, something finite. */
static dsv4_status check_finite(const struct dsv4_engine *e, int32_t n, dsv4i_seq *const *qs,
                                const float *logits) {
  for (int32_t r = 0; r < n; r++) {
    const float *x = logits + (size_t)r * (size_t)e->vocab;
    int finite = 0;
    for (int32_t v = 0; v < e->n_valid; v++) {
      if (isnan(x[v]) || x[v] == INFINITY)
        return dsv4i_error(DSV4_ERR_NOT_FINITE,
                           "sequence %lld (batch row %d): the logit of token %d is %s: no token can "
                           "be drawn (damaged weights or an overflow)", (long long)qs[r]->id, (int)r,
                           (int)v, isnan(x[v]) ? "NaN" : "+inf");
      finite |= x[v] != -INFINITY;
    }
    if (!finite)
      return dsv4i_error(DSV4_ERR_NOT_FINITE, "sequence %lld (batch row %d): every logit is -inf",
                         (long long)qs[r]->id, (int)r);
  }
  return DSV4_OK;
}

dsv4_status dsv4i_engine_local_outputs(struct dsv4_engine *e, int32_t n,
                                       const dsv4i_sampling *smp, dsv4i_seq *const *qs,
                                       float *logits, int32_t *sampled) {
  dsv4_status s = DSV4_OK;
  if (logits) {
    int64_t t = dsv4i_op_begin(e);
    s = e->be->ops->buf_read(e->be, e->logits, 0, (size_t)n * (size_t)e->vocab * sizeof(float),
                             logits);
    dsv4i_op_end(e, t, DSV4I_OP_READ, -1);
    if (!s && !sampled) s = check_finite(e, n, qs, logits);
  }
  if (!s && sampled) {
    for (int32_t i = 0; i < n; i++) {
      dsv4i_sample_req *r = &e->b_req[i];
      memset(r, 0, sizeof *r);
      r->temperature = smp ? smp->temperature : 0.0f;
      r->n_valid = e->n_valid;
      r->seed = smp ? (smp->seeds ? smp->seeds[i] : smp->seed) : 0;
      r->counter = (uint64_t)qs[i]->len; /* position the sampled token will take */
    }
    int64_t t = dsv4i_op_begin(e);
    s = e->be->ops->sample(e->be, e->logits, n, e->b_req, sampled);
    dsv4i_op_end(e, t, DSV4I_OP_SAMPLE, -1);
  }
  return s;
}

dsv4_status dsv4i_engine_share_outputs(struct dsv4_engine *e, dsv4_status s, int32_t n,
                                       float *logits, int32_t *sampled) {
  void *bufs[2];
  size_t sizes[2];
  int32_t k = 0;
  if (sampled) {
    bufs[k] = sampled;
    sizes[k++] = (size_t)n * sizeof(int32_t);
  }
  if (logits) {
    bufs[k] = logits;
    sizes[k++] = (size_t)n * (size_t)e->vocab * sizeof(float);
  }
  return dsv4i_dist_share(e->dist, s, k, bufs, sizes, "sharing the step's outputs");
}

/* outputs of this process, or of the last stage broadcast to every rank */
static dsv4_status outputs(struct dsv4_engine *e, int32_t n, const dsv4i_sampling *smp,
                           dsv4i_seq *const *qs, float *logits, int32_t *sampled) {
  if (!e->dist) return dsv4i_engine_local_outputs(e, n, smp, qs, logits, sampled);
  dsv4_status s = DSV4_OK;
  if (dsv4i_dist_has_head(e->dist)) s = dsv4i_engine_local_outputs(e, n, smp, qs, logits, sampled);
  return dsv4i_engine_share_outputs(e, s, n, logits, sampled);
}

/* Distributed engines: every rank agrees on the call and its arguments first. */
static dsv4_status call_check(struct dsv4_engine *e, const char *what, uint64_t h,
                              const dsv4i_sampling *smp, int32_t n, const float *logits,
                              const int32_t *sampled) {
  if (!e->dist) return DSV4_OK;
  const int32_t out[2] = {logits != NULL, sampled != NULL};
  h = dsv4i_dist_hash(h, out, sizeof out);
  if (smp) {
    h = dsv4i_dist_hash(h, &smp->temperature, sizeof smp->temperature);
    h = dsv4i_dist_hash(h, &smp->seed, sizeof smp->seed);
    if (smp->seeds) h = dsv4i_dist_hash(h, smp->seeds, sizeof(uint64_t) * (size_t)n);
  }
  return dsv4i_dist_call(e->dist, what, h);
}

static void engram_ids(struct dsv4_engine *e, const dsv4i_seq *q, int64_t p0, int64_t p1,
                       int64_t *dst) {
  if (q->hist) dsv4i_engram_history_row_ids(q->hist, p0, p1, -1, dst);
}

dsv4_status dsv4i_engine_prefill(struct dsv4_engine *e, int64_t id, const int32_t *tokens,
                                 int64_t n, const dsv4i_sampling *smp, float *logits,
                                 int32_t *sampled) {
  const int64_t t0 = dsv4i_now_ns();
  dsv4_status s;
  if (e->dist) {
    uint64_t h = dsv4i_dist_hash(0, &id, sizeof id);
    h = dsv4i_dist_hash(h, &n, sizeof n);
    if (n > 0 && n <= e->plan.max_ctx) h = dsv4i_dist_hash(h, tokens, sizeof(int32_t) * (size_t)n);
    if ((s = call_check(e, "prefill", h, smp, 1, logits, sampled))) return s;
  }
  dsv4i_seq *q = dsv4i_seq_find(e, id, &s); /* DSV4_ERR_DEVICE_LOST when sticky-failed */
  if (!q) return s;
  if (n <= 0) return dsv4i_error(DSV4_ERR_INVALID_ARG, "prefill: empty prompt (n = %lld)", (long long)n);
  const int64_t len0 = q->len;
  /* before reading tokens: a count past the context must not walk off the caller's array */
  if (n > e->plan.max_ctx - len0)
    return dsv4i_error(DSV4_ERR_CONTEXT_OVERFLOW,
                       "prefill: sequence %lld holds %lld positions; %lld more pass the engine's "
                       "max_context %lld", (long long)id, (long long)len0, (long long)n,
                       (long long)e->plan.max_ctx);
  if ((s = check_tokens(e, tokens, n, "prefill"))) return s;
  if (q->hist && (s = dsv4i_engram_history_reserve(q->hist, len0 + n))) return s;
  const int64_t target = len0 + n;
  if ((s = dsv4i_engine_reserve(e, 1, &q, &q->slot, &target))) return s;
  /* from here on, a failure rolls the sequence back to len0 */
  if (q->hist && (s = dsv4i_engram_history_append(q->hist, tokens, NULL, (size_t)n)))
    return fail_rollback(e, s, &q, &len0, 1);
  const int want = logits || sampled;
  for (int64_t c0 = 0; c0 < n; c0 += e->plan.chunk) {
    const int64_t th = dsv4i_op_begin(e);
    const int32_t m = (int32_t)(n - c0 < e->plan.chunk ? n - c0 : e->plan.chunk);
    for (int32_t i = 0; i < m; i++) {
      e->b_tok[i] = tokens[c0 + i];
      e->b_pos[i] = len0 + c0 + i;
      e->b_slot[i] = q->slot;
      e->b_layout[i] = dsv4i_layout_prefill(target, e->cfg->window_size);
    }
    if (e->b_engram) engram_ids(e, q, len0 + c0, len0 + c0 + m, e->b_engram);
    dsv4i_batch b = {m, dsv4i_plan_bucket(&e->plan, m), e->b_tok, e->b_pos, NULL, e->b_layout, NULL, 0, e->b_out,
                     e->b_engram, {0}};
    if (want && c0 + m == n) {
      b.n_out = 1;
      e->b_out[0] = m - 1;
    }
    dsv4i_op_end(e, th, DSV4I_OP_HOST, -1);
    if ((s = dsv4i_engine_run_step(e, &b, e->b_slot))) return fail_rollback(e, s, &q, &len0, 1);
  }
  q->len = target;
  if (want && (s = outputs(e, 1, smp, &q, logits, sampled))) {
    q->len = len0; /* no token to return: the prompt is not taken either */
    return fail_rollback(e, s, &q, &len0, 1);
  }
  const int64_t dt = dsv4i_now_ns() - t0;
  e->t.prefill_calls++;
  e->t.prefill_tokens += n;
  e->t.prefill_ns += dt;
  e->t.last_prefill_ns = dt;
  return DSV4_OK;
}

/* Validate a decode batch; fills qs[0..n) on success. */
static dsv4_status decode_check(struct dsv4_engine *e, int32_t n, const int64_t *ids,
                                const int32_t *tokens, dsv4i_seq **qs) {
  dsv4_status s = DSV4_OK;
  int32_t i = 0;
  for (; i < n && !s; i++) {
    dsv4i_seq *q = dsv4i_seq_find(e, ids[i], &s);
    if (!q) break;
    const int32_t idx = (int32_t)(q - e->seqs);
    if (e->mark[idx]) {
      s = dsv4i_error(DSV4_ERR_INVALID_ARG, "decode: sequence %lld appears twice in the batch",
                      (long long)ids[i]);
      break;
    }
    e->mark[idx] = 1;
    qs[i] = q;
    if (tokens[i] < 0 || tokens[i] >= e->vocab)
      s = dsv4i_error(DSV4_ERR_INVALID_TOKEN,
                      "decode: token of batch row %d (sequence %lld) is %d, outside [0, %d)",
                      (int)i, (long long)ids[i], (int)tokens[i], (int)e->vocab);
    else if (q->len >= e->plan.max_ctx)
      s = dsv4i_error(DSV4_ERR_CONTEXT_OVERFLOW,
                      "decode: sequence %lld (batch row %d) already holds max_context %lld positions",
                      (long long)ids[i], (int)i, (long long)e->plan.max_ctx);
  }
  for (int32_t j = 0; j < n; j++) { /* clear every mark set above */
    const int64_t idx = ids[j] & ((INT64_C(1) << DSV4I_SEQ_IDX_BITS) - 1);
    if (ids[j] > 0 && idx < e->plan.max_seqs) e->mark[idx] = 0;
  }
  return s;
}

dsv4_status dsv4i_engine_decode(struct dsv4_engine *e, int32_t n, const int64_t *ids,
                                const int32_t *tokens, const dsv4i_sampling *smp,
                                float *logits, int32_t *sampled) {
  const int64_t t0 = dsv4i_now_ns();
  dsv4_status sl = dsv4i_engine_live(e);
  if (sl) return sl;
  if (n < 1 || n > e->plan.max_out_rows)
    return dsv4i_error(DSV4_ERR_INVALID_ARG, "decode: %d sequences; the engine takes 1..%d",
                       (int)n, (int)e->plan.max_out_rows);
  if (e->dist) {
    uint64_t h = dsv4i_dist_hash(0, &n, sizeof n);
    h = dsv4i_dist_hash(h, ids, sizeof(int64_t) * (size_t)n);
    h = dsv4i_dist_hash(h, tokens, sizeof(int32_t) * (size_t)n);
    if ((sl = call_check(e, "decode", h, smp, n, logits, sampled))) return sl;
  }
  dsv4i_seq **qs = e->b_q;
  int64_t *lens = e->b_len;
  const int64_t th = dsv4i_op_begin(e);
  dsv4_status s = decode_check(e, n, ids, tokens, qs);
  int32_t appended = 0;
  for (int32_t i = 0; !s && i < n; i++) {
    lens[i] = qs[i]->len;
    e->b_slot[i] = qs[i]->slot;
    e->b_pos[i] = lens[i] + 1; /* reserve targets */
    if (qs[i]->hist) s = dsv4i_engram_history_reserve(qs[i]->hist, lens[i] + 1);
  }
  if (!s) s = dsv4i_engine_reserve(e, n, qs, e->b_slot, e->b_pos);
  if (s) goto out; /* nothing changed */
  for (; appended < n; appended++)
    if (qs[appended]->hist &&
        (s = dsv4i_engram_history_append(qs[appended]->hist, &tokens[appended], NULL, 1)))
      break;
  if (s) {
    s = fail_rollback(e, s, qs, lens, n);
    goto out;
  }
  const int want = logits || sampled;
  for (int32_t i = 0; i < n; i++) {
    e->b_tok[i] = tokens[i];
    e->b_pos[i] = lens[i];
    e->b_layout[i] = DSV4I_LAYOUT_DECODE;
    e->b_out[i] = i;
    if (e->b_engram) engram_ids(e, qs[i], lens[i], lens[i] + 1,
                                e->b_engram + (size_t)i * (size_t)e->n_engram_cols);
  }
  dsv4i_batch b = {n, dsv4i_plan_bucket(&e->plan, n), e->b_tok, e->b_pos, NULL, e->b_layout, NULL, want ? n : 0, e->b_out,
                   e->b_engram, {0}};
  dsv4i_op_end(e, th, DSV4I_OP_HOST, -1);
  if (e->dist && e->args.micro_batches > 1 && n > 1 && dsv4i_dist_stages(e->dist) > 1) {
    /* pipelined: micro-batches overlap across the stages (pipeline.c) */
    if ((s = dsv4i_engine_decode_pipelined(e, n, qs, lens, smp, want, logits, sampled)))
      s = fail_rollback(e, s, qs, lens, n);
    goto done;
  }
  if ((s = dsv4i_engine_run_step(e, &b, e->b_slot))) {
    s = fail_rollback(e, s, qs, lens, n);
    goto out;
  }
  for (int32_t i = 0; i < n; i++) qs[i]->len = lens[i] + 1;
  if (want && (s = outputs(e, n, smp, qs, logits, sampled))) {
    for (int32_t i = 0; i < n; i++) qs[i]->len = lens[i]; /* the whole batch steps back */
    s = fail_rollback(e, s, qs, lens, n);
    goto out;
  }
done:
  if (s) goto out;
  const int64_t dt = dsv4i_now_ns() - t0;
  e->t.decode_steps++;
  e->t.decode_tokens += n;
  e->t.decode_ns += dt;
  e->t.last_decode_ns = dt;
out:
  return s;
}

/* Validate a mixed step; fills qs[0..n_rows) and *n_tok, *n_want on success. */
static dsv4_status step_check(struct dsv4_engine *e, int32_t n_rows, const dsv4i_step_row *rows,
                              dsv4i_seq **qs, int64_t *n_tok, int32_t *n_want) {
  dsv4_status s = DSV4_OK;
  *n_tok = 0;
  *n_want = 0;
  for (int32_t i = 0; i < n_rows && !s; i++) {
    const dsv4i_step_row *r = &rows[i];
    dsv4i_seq *q = dsv4i_seq_find(e, r->id, &s);
    if (!q) break;
    const int32_t idx = (int32_t)(q - e->seqs);
    if (e->mark[idx]) {
      s = dsv4i_error(DSV4_ERR_INVALID_ARG, "step: sequence %lld appears twice", (long long)r->id);
      break;
    }
    e->mark[idx] = 1;
    qs[i] = q;
    *n_tok += r->n;
    *n_want += r->want_logits ? (r->generated ? r->n : 1) : 0;
    if (r->n < 1 || !r->tokens)
      s = dsv4i_error(DSV4_ERR_INVALID_ARG, "step: row %d has %d tokens", (int)i, (int)r->n);
    else if (r->n > e->plan.max_ctx - q->len)
      s = dsv4i_error(DSV4_ERR_CONTEXT_OVERFLOW,
                      "step: sequence %lld holds %lld positions; %d more pass the engine's "
                      "max_context %lld", (long long)r->id, (long long)q->len, (int)r->n,
                      (long long)e->plan.max_ctx);
    else
      s = check_tokens(e, r->tokens, r->n, "step");
  }
  for (int32_t j = 0; j < n_rows; j++) { /* clear every mark set above */
    const int64_t idx = rows[j].id & ((INT64_C(1) << DSV4I_SEQ_IDX_BITS) - 1);
    if (rows[j].id > 0 && idx < e->plan.max_seqs) e->mark[idx] = 0;
  }
  if (!s && *n_tok > e->plan.max_batch_tokens)
    s = dsv4i_error(DSV4_ERR_INVALID_ARG, "step: %lld tokens; the engine takes at most %d per step",
                    (long long)*n_tok, (int)e->plan.max_batch_tokens);
  if (!s && *n_want > e->plan.max_out_rows)
    s = dsv4i_error(DSV4_ERR_INVALID_ARG, "step: %d logits rows; the engine gives at most %d per "
                    "step", (int)*n_want, (int)e->plan.max_out_rows);
  return s;
}

dsv4_status dsv4i_engine_step(struct dsv4_engine *e, int32_t n_rows, const dsv4i_step_row *rows,
                              float *logits) {
  const int64_t t0 = dsv4i_now_ns();
  dsv4_status s = dsv4i_engine_live(e);
  if (s) return s;
  if (n_rows < 1 || n_rows > e->plan.max_out_rows || !rows)
    return dsv4i_error(DSV4_ERR_INVALID_ARG, "step: %d rows; the engine takes 1..%d", (int)n_rows,
                       (int)e->plan.max_out_rows);
  if (e->dist) { /* every rank runs the same step: the ranks agree on its rows first */
    uint64_t h = dsv4i_dist_hash(0, &n_rows, sizeof n_rows);
    for (int32_t i = 0; i < n_rows; i++) {
      const int32_t f[3] = {rows[i].n, rows[i].generated, rows[i].want_logits};
      h = dsv4i_dist_hash(h, &rows[i].id, sizeof rows[i].id);
      h = dsv4i_dist_hash(h, f, sizeof f);
      if (rows[i].tokens && rows[i].n > 0 && rows[i].n <= e->plan.max_ctx)
        h = dsv4i_dist_hash(h, rows[i].tokens, sizeof(int32_t) * (size_t)rows[i].n);
    }
    if ((s = call_check(e, "step", h, NULL, 0, logits, NULL))) return s;
  }
  dsv4i_seq **qs = e->b_q;
  int64_t *lens = e->b_len;
  int64_t n_tok = 0;
  int32_t n_want = 0;
  const int64_t th = dsv4i_op_begin(e);
  if ((s = step_check(e, n_rows, rows, qs, &n_tok, &n_want))) return s;
  if (n_want && !logits) return dsv4i_error(DSV4_ERR_INVALID_ARG, "step: logits NULL");
  for (int32_t i = 0; !s && i < n_rows; i++) {
    lens[i] = qs[i]->len;
    e->b_slot[i] = qs[i]->slot;
    e->b_pos[i] = lens[i] + rows[i].n; /* reserve targets */
    if (qs[i]->hist) s = dsv4i_engram_history_reserve(qs[i]->hist, lens[i] + rows[i].n);
  }
  if (!s) s = dsv4i_engine_reserve(e, n_rows, qs, e->b_slot, e->b_pos);
  if (s) return s; /* nothing changed */
  /* from here on, a failure rolls every row back */
  for (int32_t i = 0; !s && i < n_rows; i++)
    if (qs[i]->hist) s = dsv4i_engram_history_append(qs[i]->hist, rows[i].tokens, NULL, (size_t)rows[i].n);
  if (s) return fail_rollback(e, s, qs, lens, n_rows);
  int32_t t = 0, o = 0;
  for (int32_t i = 0; i < n_rows; i++) {
    const int32_t slot = qs[i]->slot, n = rows[i].n;
    const int32_t layout = rows[i].generated ? DSV4I_LAYOUT_DECODE
                                             : dsv4i_layout_prefill(lens[i] + n, e->cfg->window_size);
    if (e->b_engram)
      engram_ids(e, qs[i], lens[i], lens[i] + n, e->b_engram + (size_t)t * (size_t)e->n_engram_cols);
    for (int32_t k = 0; k < n; k++, t++) {
      e->b_tok[t] = rows[i].tokens[k];
      e->b_pos[t] = lens[i] + k;
      e->b_slot[t] = slot;
      e->b_layout[t] = layout;
      if (rows[i].want_logits && (rows[i].generated || k == n - 1)) e->b_out[o++] = t;
    }
  }
  dsv4i_batch b = {t, dsv4i_plan_bucket(&e->plan, t), e->b_tok, e->b_pos, NULL, e->b_layout,
                   NULL, o, e->b_out, e->b_engram, {0}};
  dsv4i_op_end(e, th, DSV4I_OP_HOST, -1);
  if ((s = dsv4i_engine_run_step(e, &b, e->b_slot))) return fail_rollback(e, s, qs, lens, n_rows);
  for (int32_t i = 0; i < n_rows; i++) qs[i]->len = lens[i] + rows[i].n;
  if (o) { /* the logits come from the last stage (every rank of a distributed engine) */
    if (!e->dist || dsv4i_dist_has_head(e->dist)) {
      int64_t tr = dsv4i_op_begin(e);
      s = e->be->ops->buf_read(e->be, e->logits, 0, (size_t)o * (size_t)e->vocab * sizeof(float),
                               logits);
      dsv4i_op_end(e, tr, DSV4I_OP_READ, -1);
      for (int32_t i = 0, r = 0; !s && i < n_rows; i++)
        for (int32_t k = 0; rows[i].want_logits && k < (rows[i].generated ? rows[i].n : 1) && !s; k++)
          s = check_finite(e, 1, &qs[i], logits + (size_t)r++ * (size_t)e->vocab);
    }
    if (e->dist) s = dsv4i_engine_share_outputs(e, s, o, logits, NULL);
    if (s) {
      for (int32_t i = 0; i < n_rows; i++) qs[i]->len = lens[i]; /* the whole step goes back */
      return fail_rollback(e, s, qs, lens, n_rows);
    }
  }
  /* timings: generated tokens count as decode, prompt chunks as prefill */
  const int64_t dt = dsv4i_now_ns() - t0;
  int64_t n_gen = 0;
  for (int32_t i = 0; i < n_rows; i++) n_gen += rows[i].generated ? rows[i].n : 0;
  if (n_gen) {
    e->t.decode_steps++;
    e->t.decode_tokens += n_gen;
    e->t.decode_ns += dt;
    e->t.last_decode_ns = dt;
  }
  if (n_tok > n_gen) {
    e->t.prefill_calls++;
    e->t.prefill_tokens += n_tok - n_gen;
    if (!n_gen) e->t.prefill_ns += dt, e->t.last_prefill_ns = dt;
  }
  return DSV4_OK;
}
