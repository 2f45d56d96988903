/*
 * Speculative decoding with DSpark: draft and verify orchestration (see
 * spec.h for the rules). The arithmetic is the backend's (draft forward,
 * target steps, sampler); the accept rule, its random draws and the
 * rollback are here.
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "engine/dist.h"
#include "engine/spec.h"
#include "model/accept.h"

/* The last draft of one sequence (index = its sequence-table entry). */
typedef struct spec_rec {
  int64_t id;        /**< sequence id it belongs to; 0 = none */
  int64_t len;       /**< the sequence's length when drafted */
  int32_t anchor;
  float temperature; /**< > 0: sampled drafts, q holds their logits */
  int32_t *drafts;   /**< [block] */
  float *q;          /**< [block][vocab] logits the drafts were drawn from (lazy) */
} spec_rec;

struct dsv4i_spec {
  int32_t block, vocab, cap;  /**< cap: tokens (= output rows) per verify step */
  int32_t n_valid;            /**< ids ever drawn (engine n_valid); distributions cover these */
  dsv4i_bbuf dlogits;         /**< f32 [max_seqs][block][vocab], on the first sampled draft */
  spec_rec *rec;              /**< [max_seqs] */
  /* per-call scratch: [max_seqs] */
  dsv4i_seq **q;
  int64_t *len0, *pos;
  int32_t *slot, *done, *acc, *nd;
  uint64_t *seed;
  dsv4i_sample_req *req;
  /* per verify step: [cap] */
  int32_t *row_seq, *row_j, *row_tok;
};

/* ---- create / free ------------------------------------------------------ */

void dsv4i_spec_free(struct dsv4_engine *e) {
  dsv4i_spec *sp = e ? e->spec : NULL;
  if (!sp) return;
  e->be->ops->buf_free(e->be, sp->dlogits);
  if (sp->rec)
    for (int32_t i = 0; i < e->plan.max_seqs; i++) {
      free(sp->rec[i].drafts);
      free(sp->rec[i].q);
    }
  void *p[] = {sp->rec, (void *)sp->q, sp->len0, sp->pos, sp->slot, sp->done, sp->acc, sp->nd,
               sp->seed, sp->req, sp->row_seq, sp->row_j, sp->row_tok};
  for (size_t i = 0; i < DSV4I_ARRAY_LEN(p); i++) free(p[i]);
  free(sp);
  e->spec = NULL;
}

dsv4_status dsv4i_spec_create(struct dsv4_engine *e) {
  const dsv4i_config *c = e->cfg;
  const dsv4i_backend_ops *o = e->be->ops;
  e->spec = NULL;
  if (c->n_mtp_layers <= 0 || c->dspark_block_size <= 0 || c->n_dspark_targets <= 0 ||
      !o->dspark_extend || !o->dspark_draft)
    return DSV4_OK;
  dsv4i_spec *sp = dsv4i_calloc(1, sizeof *sp, "speculative decoding");
  if (!sp) return DSV4_ERR_OUT_OF_MEMORY;
  e->spec = sp;
  const size_t ns = (size_t)e->plan.max_seqs;
  sp->block = c->dspark_block_size;
  sp->vocab = e->vocab;
  sp->n_valid = e->n_valid;
  sp->cap = e->plan.max_batch_tokens < e->plan.max_out_rows ? e->plan.max_batch_tokens
                                                            : e->plan.max_out_rows;
  const size_t cap = (size_t)sp->cap;
  /* main_hidden of every step's tokens: the engine passes e->taps to block() and then
   * to dspark_extend (dsv4i_engine_run_step), and frees it */
  dsv4_status s = e->taps.impl ? DSV4_OK
                               : o->buf_alloc(e->be,
                                              (size_t)e->plan.max_batch_tokens *
                                                  (size_t)c->n_dspark_targets * (size_t)c->dim * 2,
                                              &e->taps);
#define A(p, n) ((sp->p = dsv4i_calloc((n), sizeof *sp->p, "speculative " #p)) != NULL)
  int ok = !s && A(rec, ns) && A(q, ns) && A(len0, ns) && A(pos, ns) && A(slot, ns) && A(done, ns) &&
           A(acc, ns) && A(nd, ns) && A(seed, ns) && A(req, ns) && A(row_seq, cap) &&
           A(row_j, cap) && A(row_tok, cap);
#undef A
  for (size_t i = 0; ok && i < ns; i++)
    ok = (sp->rec[i].drafts = dsv4i_calloc((size_t)sp->block, sizeof(int32_t), "draft record")) != NULL;
  if (!ok) {
    dsv4i_spec_free(e);
    return s ? s : DSV4_ERR_OUT_OF_MEMORY;
  }
  return DSV4_OK;
}

/* ---- shared checks ------------------------------------------------------ */

static dsv4_status need_spec(const struct dsv4_engine *e, const char *fn) {
  if (e->spec) return DSV4_OK;
  if (e->cfg->n_mtp_layers <= 0 || e->cfg->dspark_block_size <= 0)
    return dsv4i_error(DSV4_ERR_UNSUPPORTED, "%s: the model has no DSpark stages "
                       "(num_nextn_predict_layers / dspark_block_size)", fn);
  return dsv4i_error(DSV4_ERR_UNSUPPORTED, "%s: the %s backend has no DSpark draft head", fn,
                     e->be->ops->name);
}

static uint64_t seed_of(const dsv4i_sampling *smp, int32_t i) {
  return smp ? (smp->seeds ? smp->seeds[i] : smp->seed) : 0;
}

/* Live, distinct sequences and valid anchors; fills sp->q. */
static dsv4_status batch_check(struct dsv4_engine *e, int32_t n, const int64_t *ids,
                               const int32_t *anchors, const char *fn) {
  dsv4i_spec *sp = e->spec;
  if (n < 1 || n > e->plan.max_seqs || !ids || !anchors)
    return dsv4i_error(DSV4_ERR_INVALID_ARG, "%s: %d sequences (1..%d) or NULL arrays", fn, (int)n,
                       (int)e->plan.max_seqs);
  dsv4_status s = DSV4_OK;
  for (int32_t i = 0; i < n && !s; i++) {
    dsv4i_seq *q = dsv4i_seq_find(e, ids[i], &s);
    if (!q) break;
    const int32_t idx = (int32_t)(q - e->seqs);
    if (e->mark[idx])
      s = dsv4i_error(DSV4_ERR_INVALID_ARG, "%s: sequence %lld appears twice in the batch", fn,
                      (long long)ids[i]);
    else if (anchors[i] < 0 || anchors[i] >= e->vocab)
      s = dsv4i_error(DSV4_ERR_INVALID_TOKEN, "%s: anchor of batch row %d (sequence %lld) is %d, "
                      "outside [0, %d)", fn, (int)i, (long long)ids[i], (int)anchors[i],
                      (int)e->vocab);
    e->mark[idx] = 1;
    sp->q[i] = q;
  }
  for (int32_t j = 0; j < n; j++) { /* clear every mark set above */
    const int64_t idx = ids[j] & ((INT64_C(1) << DSV4I_SEQ_IDX_BITS) - 1);
    if (ids[j] > 0 && idx < e->plan.max_seqs) e->mark[idx] = 0;
  }
  return s;
}

/* ---- draft -------------------------------------------------------------- */

static dsv4_status spec_draft(struct dsv4_engine *e, int32_t n, const int64_t *ids,
                              const int32_t *anchors, const dsv4i_sampling *smp, int32_t *drafts,
                              float *confidence) {
  dsv4_status s = need_spec(e, "draft");
  if (s) return s;
  dsv4i_spec *sp = e->spec;
  const int head = !e->dist || dsv4i_dist_has_head(e->dist); /* the rank that drafts */
  if ((s = batch_check(e, n, ids, anchors, "draft"))) return s;
  if (!drafts) return dsv4i_error(DSV4_ERR_INVALID_ARG, "draft: drafts is NULL");
  const float T = smp ? smp->temperature : 0.0f;
  for (int32_t i = 0; i < n; i++) {
    if (sp->q[i]->len < 1)
      return dsv4i_error(DSV4_ERR_INVALID_ARG, "draft: sequence %lld (batch row %d) is empty; "
                         "prefill it first", (long long)ids[i], (int)i);
    sp->slot[i] = sp->q[i]->slot;
    sp->pos[i] = sp->q[i]->len - 1;
    dsv4i_sample_req *r = &sp->req[i];
    memset(r, 0, sizeof *r);
    r->temperature = T;
    r->seed = seed_of(smp, i) ^ DSV4I_TAG_DRAFT;
    r->n_valid = e->n_valid;
    r->counter = (uint64_t)sp->q[i]->len + 1; /* position of draft 1 */
  }
  const size_t BV = (size_t)sp->block * (size_t)sp->vocab;
  if (head && T > 0.0f && !sp->dlogits.impl &&
      (s = e->be->ops->buf_alloc(e->be, (size_t)e->plan.max_seqs * BV * sizeof(float), &sp->dlogits)))
    return s;
  for (int32_t i = 0; head && T > 0.0f && i < n; i++) {
    spec_rec *rc = &sp->rec[sp->q[i] - e->seqs];
    if (!rc->q && !(rc->q = dsv4i_malloc(BV * sizeof(float), "draft distribution")))
      return DSV4_ERR_OUT_OF_MEMORY;
  }
  const dsv4i_bbuf none = {NULL}; /* the rings already hold pos: every step extends them */
  const int64_t t = dsv4i_op_begin(e);
  dsv4i_kv_step kv;
  s = dsv4i_kv_step_table(&e->kv, n, sp->slot, NULL, &kv);
  if (!s && head)
    s = dsv4i_engine_note(e, e->be->ops->dspark_draft(e->be, &kv, sp->pos, anchors, none, sp->req,
                                                      drafts, confidence,
                                                      T > 0.0f ? sp->dlogits : none));
  if (e->dist) { /* the last stage drafted: every rank returns its drafts */
    void *bufs[2] = {drafts, confidence};
    const size_t sizes[2] = {sizeof(int32_t) * (size_t)n * (size_t)sp->block,
                             sizeof(float) * (size_t)n * (size_t)sp->block};
    s = dsv4i_dist_share(e->dist, s, confidence ? 2 : 1, bufs, sizes, "sharing the drafts");
  }
  dsv4i_op_end(e, t, DSV4I_OP_DSPARK, -1);
  for (int32_t i = 0; i < n; i++) { /* the record of this draft (or none) */
    spec_rec *rc = &sp->rec[sp->q[i] - e->seqs];
    rc->id = 0;
    if (s || !head) continue; /* records are read where the accept rule runs */
    if (T > 0.0f &&
        e->be->ops->buf_read(e->be, sp->dlogits, (size_t)i * BV * sizeof(float),
                             BV * sizeof(float), rc->q))
      continue; /* no distribution: verify treats these drafts as fixed tokens */
    rc->id = ids[i];
    rc->len = sp->q[i]->len;
    rc->anchor = anchors[i];
    rc->temperature = T > 0.0f ? T : 0.0f;
    memcpy(rc->drafts, drafts + (size_t)i * (size_t)sp->block, sizeof(int32_t) * (size_t)sp->block);
  }
  return s;
}

/* ---- verify ------------------------------------------------------------- */

/* Undo a failed verify: every sequence back to len0, keeping the message. */
static dsv4_status fail_rollback(struct dsv4_engine *e, dsv4_status s, int32_t n) {
  dsv4i_spec *sp = e->spec;
  char *msg = dsv4i_strdup(dsv4i_error_message(), "error message");
  for (int32_t i = 0; i < n; i++) {
    dsv4i_seq *q = sp->q[i];
    if (q->hist && dsv4i_engram_history_len(q->hist) > sp->len0[i])
      dsv4i_engram_history_truncate(q->hist, sp->len0[i]);
    if (dsv4i_kv_slot_truncate(&e->kv, q->slot, sp->len0[i]) != DSV4_OK) q->damaged = 1;
    q->len = sp->len0[i];
  }
  dsv4i_error(s, "%s", msg ? msg : "(message lost)");
  free(msg);
  return s;
}

/* Check drafts and context, reserve, append the Engram history: all or
 * nothing (on failure no sequence changed). */
static dsv4_status verify_prepare(struct dsv4_engine *e, int32_t n, const int64_t *ids,
                                  const int32_t *anchors, const int32_t *n_drafts,
                                  const int32_t *drafts) {
  dsv4i_spec *sp = e->spec;
  const int32_t B = sp->block;
  for (int32_t i = 0; i < n; i++) {
    dsv4i_seq *q = sp->q[i];
    const int32_t k = n_drafts[i];
    if (k < 0 || k > B)
      return dsv4i_error(DSV4_ERR_INVALID_ARG, "verify: n_drafts of batch row %d is %d; the "
                         "model drafts at most %d", (int)i, (int)k, (int)B);
    if (k > 0 && !drafts)
      return dsv4i_error(DSV4_ERR_INVALID_ARG, "verify: drafts is NULL with n_drafts[%d] = %d",
                         (int)i, (int)k);
    for (int32_t j = 0; j < k; j++)
      if (drafts[(size_t)i * (size_t)B + (size_t)j] < 0 ||
          drafts[(size_t)i * (size_t)B + (size_t)j] >= e->vocab)
        return dsv4i_error(DSV4_ERR_INVALID_TOKEN, "verify: draft %d of batch row %d (sequence "
                           "%lld) is %d, outside [0, %d)", (int)j + 1, (int)i, (long long)ids[i],
                           (int)drafts[(size_t)i * (size_t)B + (size_t)j], (int)e->vocab);
    if (q->len + 1 + k > e->plan.max_ctx)
      return dsv4i_error(DSV4_ERR_CONTEXT_OVERFLOW, "verify: sequence %lld holds %lld positions; "
                         "the anchor and %d drafts pass the engine's max_context %lld",
                         (long long)ids[i], (long long)q->len, (int)k, (long long)e->plan.max_ctx);
  }
  dsv4_status s = DSV4_OK;
  for (int32_t i = 0; i < n && !s; i++) {
    sp->len0[i] = sp->q[i]->len;
    sp->nd[i] = n_drafts[i];
    sp->slot[i] = sp->q[i]->slot;
    sp->pos[i] = sp->len0[i] + 1 + n_drafts[i]; /* reserve targets */
    if (sp->q[i]->hist) s = dsv4i_engram_history_reserve(sp->q[i]->hist, sp->pos[i]);
  }
  if (!s) s = dsv4i_engine_reserve(e, n, sp->q, sp->slot, sp->pos);
  if (s) return s; /* nothing changed */
  for (int32_t i = 0; i < n && !s; i++) {
    dsv4i_engram_history *h = sp->q[i]->hist;
    if (!h) continue;
    s = dsv4i_engram_history_append(h, &anchors[i], NULL, 1);
    if (!s && n_drafts[i] > 0)
      s = dsv4i_engram_history_append(h, drafts + (size_t)i * (size_t)B, NULL, (size_t)n_drafts[i]);
  }
  if (s) { /* undo the appends and the reservations (nothing was written) */
    for (int32_t i = 0; i < n; i++) {
      dsv4i_seq *q = sp->q[i];
      if (q->hist && dsv4i_engram_history_len(q->hist) > q->len)
        dsv4i_engram_history_truncate(q->hist, q->len);
      dsv4i_kv_slot_truncate(&e->kv, q->slot, q->len);
    }
  }
  return s;
}

/* Whether the record of sequence i describes the drafts being verified. */
static int rec_matches(const spec_rec *rc, int64_t id, int64_t len, int32_t anchor,
                       const int32_t *d, int32_t k) {
  if (rc->id != id || rc->len != len || rc->anchor != anchor || !(rc->temperature > 0.0f) || !rc->q)
    return 0;
  for (int32_t j = 0; j < k; j++)
    if (rc->drafts[j] != d[j]) return 0;
  return 1;
}

/* The accept rule on one target row: row j of sequence i (spec.h); batch row r of the
 * logits. Sampled rows go to the backend's accept entry (model/accept.h), so the
 * vocabulary-wide logits stay where they are. */
static dsv4_status decide(struct dsv4_engine *e, int32_t i, int32_t j, int32_t r, int32_t row_tok,
                          float T, const int32_t *d, int use_rec, int32_t *next) {
  dsv4i_spec *sp = e->spec;
  if (j == sp->nd[i]) { /* bonus row: the target's own draw */
    next[i] = row_tok;
    sp->done[i] = 1;
    return DSV4_OK;
  }
  const int32_t dk = d[j];
  if (!(T > 0.0f)) { /* greedy: the draft must be the target's argmax */
    if (row_tok == dk) {
      sp->acc[i]++;
    } else {
      next[i] = row_tok;
      sp->done[i] = 1;
    }
    return DSV4_OK;
  }
  const spec_rec *rc = &sp->rec[sp->q[i] - e->seqs];
  dsv4i_accept_req req;
  memset(&req, 0, sizeof req);
  req.temperature = T;
  req.q_temperature = rc->temperature;
  req.draft = dk;
  req.n_valid = e->n_valid;
  req.seed = sp->seed[i];
  req.pos = sp->len0[i] + j + 1; /* the draft's position */
  req.q = use_rec ? rc->q + (size_t)j * (size_t)sp->vocab : NULL;
  int32_t accepted = 0, tok = -1;
  const dsv4_status s = e->be->ops->accept(e->be, e->logits, r, &req, &accepted, &tok);
  if (s) return s;
  if (accepted) {
    sp->acc[i]++;
  } else {
    next[i] = tok;
    sp->done[i] = 1;
  }
  return DSV4_OK;
}

static dsv4_status spec_verify(struct dsv4_engine *e, int32_t n, const int64_t *ids,
                               const int32_t *anchors, const int32_t *n_drafts,
                               const int32_t *drafts, const dsv4i_sampling *smp,
                               int32_t *n_accepted, int32_t *next) {
  dsv4_status s = need_spec(e, "verify");
  if (s) return s;
  dsv4i_spec *sp = e->spec;
  const int32_t B = sp->block;
  const float T = smp ? smp->temperature : 0.0f;
  if (!n_drafts || !n_accepted || !next)
    return dsv4i_error(DSV4_ERR_INVALID_ARG, "verify: n_drafts, n_accepted or next is NULL");
  if ((s = batch_check(e, n, ids, anchors, "verify"))) return s;
  const int64_t th = dsv4i_op_begin(e);
  if ((s = verify_prepare(e, n, ids, anchors, n_drafts, drafts))) return s;
  for (int32_t i = 0; i < n; i++) {
    sp->done[i] = 0;
    sp->acc[i] = 0;
    sp->seed[i] = seed_of(smp, i);
  }
  dsv4i_op_end(e, th, DSV4I_OP_HOST, -1);
  /* the runs [a, d_1 .. d_k] of every sequence, cut into steps of at most cap tokens;
   * a sequence decided in an earlier step sends nothing more */
  int32_t i0 = 0, j0 = 0;
  while (i0 < n) {
    const int64_t tb = dsv4i_op_begin(e);
    int32_t m = 0;
    for (; i0 < n && m < sp->cap; j0 = 0, i0++) {
      if (sp->done[i0]) continue;
      dsv4i_seq *q = sp->q[i0];
      for (; j0 <= sp->nd[i0] && m < sp->cap; j0++, m++) {
        e->b_tok[m] = j0 == 0 ? anchors[i0] : drafts[(size_t)i0 * (size_t)B + (size_t)j0 - 1];
        e->b_pos[m] = sp->len0[i0] + j0;
        e->b_slot[m] = q->slot;
        e->b_layout[m] = DSV4I_LAYOUT_DECODE;
        e->b_out[m] = m;
        sp->row_seq[m] = i0;
        sp->row_j[m] = j0;
        if (e->b_engram)
          dsv4i_engram_history_row_ids(q->hist, e->b_pos[m], e->b_pos[m] + 1, -1,
                                       e->b_engram + (size_t)m * (size_t)e->n_engram_cols);
        dsv4i_sample_req *r = &e->b_req[m];
        memset(r, 0, sizeof *r);
        r->temperature = T;
        r->seed = sp->seed[i0];
        r->n_valid = e->n_valid;
        r->counter = (uint64_t)e->b_pos[m] + 1; /* position of the token this row draws */
      }
      if (j0 <= sp->nd[i0]) break; /* the step is full inside this run: resume here */
    }
    if (m == 0) break;
    dsv4i_batch b = {m, dsv4i_plan_bucket(&e->plan, m), e->b_tok, e->b_pos, NULL, e->b_layout, NULL, m, e->b_out,
                           e->b_engram, {0}};
    dsv4i_op_end(e, tb, DSV4I_OP_HOST, -1);
    s = dsv4i_engine_run_step(e, &b, e->b_slot);
    const int head = !e->dist || dsv4i_dist_has_head(e->dist); /* the rank that decides */
    int64_t t = dsv4i_op_begin(e);
    if (!s && head) s = e->be->ops->sample(e->be, e->logits, m, e->b_req, sp->row_tok);
    dsv4i_op_end(e, t, DSV4I_OP_SAMPLE, -1);
    if (s && !e->dist) return fail_rollback(e, s, n);
    t = dsv4i_op_begin(e);
    for (int32_t r = 0; !s && head && r < m; r++) {
      const int32_t i = sp->row_seq[r];
      if (sp->done[i]) continue;
      const int32_t *d = drafts ? drafts + (size_t)i * (size_t)B : NULL;
      const int ur = T > 0.0f && sp->nd[i] > 0 &&
                     rec_matches(&sp->rec[sp->q[i] - e->seqs], ids[i], sp->len0[i], anchors[i], d,
                                 sp->nd[i]);
      s = decide(e, i, sp->row_j[r], r, sp->row_tok[r], T, d, ur, next);
    }
    if (e->dist) { /* the last stage decided: every rank keeps the same positions */
      void *bufs[3] = {sp->done, sp->acc, next};
      const size_t sz = sizeof(int32_t) * (size_t)n, sizes[3] = {sz, sz, sz};
      s = dsv4i_dist_share(e->dist, s, 3, bufs, sizes, "sharing the accept decisions");
    }
    dsv4i_op_end(e, t, DSV4I_OP_SAMPLE, -1);
    if (s) return fail_rollback(e, s, n);
  }
  for (int32_t i = 0; i < n; i++)
    if (!sp->done[i]) /* cannot happen: every run ends in its bonus row */
      return fail_rollback(e, dsv4i_error(DSV4_ERR_INTERNAL, "verify: sequence %lld was not "
                                          "decided", (long long)ids[i]), n);
  /* keep 1 + accepted positions; roll back what the rejected tokens wrote */
  const int64_t tr = dsv4i_op_begin(e);
  for (int32_t i = 0; i < n; i++) {
    dsv4i_seq *q = sp->q[i];
    const int64_t keep = sp->len0[i] + 1 + sp->acc[i];
    if (q->hist && dsv4i_engram_history_len(q->hist) > keep)
      dsv4i_engram_history_truncate(q->hist, keep);
    const dsv4_status st = dsv4i_kv_slot_truncate(&e->kv, q->slot, keep);
    if (st) {
      q->damaged = 1;
      if (!s) s = st;
    }
    q->len = keep;
    n_accepted[i] = sp->acc[i];
    sp->rec[q - e->seqs].id = 0; /* a draft is verified once */
  }
  dsv4i_op_end(e, tr, DSV4I_OP_HOST, -1);
  return s;
}

/* Distributed engines: the sampling arguments enter the call's agreement. */
static uint64_t hash_sampling(uint64_t h, const dsv4i_sampling *smp, int32_t n) {
  if (!smp) return h;
  h = dsv4i_dist_hash(h, &smp->temperature, sizeof smp->temperature);
  h = dsv4i_dist_hash(h, &smp->seed, sizeof smp->seed);
  return smp->seeds ? dsv4i_dist_hash(h, smp->seeds, sizeof(uint64_t) * (size_t)n) : h;
}

/* ---- timed entry points (dsv4_engine_timings.draft_* / verify_*) --------- */

dsv4_status dsv4i_spec_draft(struct dsv4_engine *e, int32_t n, const int64_t *ids,
                             const int32_t *anchors, const dsv4i_sampling *smp, int32_t *drafts,
                             float *confidence) {
  const int64_t t0 = dsv4i_now_ns();
  dsv4_status s = dsv4i_engine_live(e);
  if (s) return s;
  if (e->dist && n >= 1 && n <= e->plan.max_seqs && ids && anchors) {
    uint64_t h = dsv4i_dist_hash(0, &n, sizeof n);
    h = dsv4i_dist_hash(h, ids, sizeof(int64_t) * (size_t)n);
    h = dsv4i_dist_hash(h, anchors, sizeof(int32_t) * (size_t)n);
    h = hash_sampling(h, smp, n);
    const int32_t conf = confidence != NULL;
    h = dsv4i_dist_hash(h, &conf, sizeof conf);
    if ((s = dsv4i_dist_call(e->dist, "draft", h))) return s;
  }
  s = spec_draft(e, n, ids, anchors, smp, drafts, confidence);
  if (s == DSV4_OK) {
    const int64_t dt = dsv4i_now_ns() - t0;
    e->t.draft_calls++;
    e->t.draft_seqs += n;
    e->t.draft_ns += dt;
    e->t.last_draft_ns = dt;
  }
  return s;
}

dsv4_status dsv4i_spec_verify(struct dsv4_engine *e, int32_t n, const int64_t *ids,
                              const int32_t *anchors, const int32_t *n_drafts,
                              const int32_t *drafts, const dsv4i_sampling *smp,
                              int32_t *n_accepted, int32_t *next) {
  const int64_t t0 = dsv4i_now_ns();
  if (dsv4i_engine_live(e)) return DSV4_ERR_DEVICE_LOST;
  if (e->dist && e->spec && n >= 1 && n <= e->plan.max_seqs && ids && anchors && n_drafts) {
    const int32_t B = e->spec->block;
    uint64_t h = dsv4i_dist_hash(0, &n, sizeof n);
    h = dsv4i_dist_hash(h, ids, sizeof(int64_t) * (size_t)n);
    h = dsv4i_dist_hash(h, anchors, sizeof(int32_t) * (size_t)n);
    h = dsv4i_dist_hash(h, n_drafts, sizeof(int32_t) * (size_t)n);
    for (int32_t i = 0; drafts && i < n; i++)
      if (n_drafts[i] > 0 && n_drafts[i] <= B)
        h = dsv4i_dist_hash(h, drafts + (size_t)i * (size_t)B, sizeof(int32_t) * (size_t)n_drafts[i]);
    h = hash_sampling(h, smp, n);
    dsv4_status sc = dsv4i_dist_call(e->dist, "verify", h);
    if (sc) return sc;
  }
  dsv4_status s = spec_verify(e, n, ids, anchors, n_drafts, drafts, smp, n_accepted, next);
  if (s == DSV4_OK) {
    const int64_t dt = dsv4i_now_ns() - t0;
    e->t.verify_calls++;
    for (int32_t i = 0; i < n; i++) {
      e->t.verify_tokens += 1 + n_drafts[i];
      e->t.verify_accepted += n_accepted[i];
    }
    e->t.verify_ns += dt;
    e->t.last_verify_ns = dt;
  }
  return s;
}
