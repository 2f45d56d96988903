/*
 * The request scheduler (sched.h). Requests live in one arrival-ordered
 * list; a request is WAITING (no sequence), PREFILL (a sequence, prompt
 * partly fed), RUNNING (one sampled token waiting to be fed) or DONE
 * (poll mode: tokens not yet taken). A step:
 *   1. one batched decode of every RUNNING request (its pending token in,
 *      the next token's logits out), then the draws;
 *   2. prompt chunks in arrival order while the budget lasts: a chunk is
 *      always min(prefill_chunk, rest of the prompt) tokens, so the cuts
 *      never depend on other requests; the last chunk's logits give the
 *      first token. A request that cannot get a sequence, or whose chunk the
 *      engine's pools refuse (DSV4_KV_FULL), waits with everyone behind it.
 * Prefix cache (prefix_cache > 0): a finished request's sequence is kept
 * with the ids it holds; a new request whose prompt starts with all of them
 * forks it and prefills only the rest. Least recently used entries are
 * freed when the cache is full, when sequences or KV pages run out.
 * Speculative requests (docs/serving.md, "Speculative decoding"): before the
 * first batch runs, their decode rows get DSpark drafts within the room the
 * batch leaves (tokens, logits rows), becoming verify rows; take_rows decides
 * the tokens position by position with the request's own sampler and rolls
 * the sequence back to what it kept.
 */
#include <stdlib.h>
#include <string.h>

#include "engine/spec.h"
#include "serve/sched.h"

static void unlink_req(struct dsv4_scheduler *s, dsv4i_req *r) {
  if (r->prev) r->prev->next_rq = r->next_rq;
  else s->head = r->next_rq;
  if (r->next_rq) r->next_rq->prev = r->prev;
  else s->tail = r->prev;
  r->prev = r->next_rq = NULL;
}

static void release_seq(struct dsv4_scheduler *s, dsv4i_req *r) {
  if (r->seq) dsv4i_seq_free(s->eng, r->seq);
  r->seq = 0;
}

/* ---- prefix cache ------------------------------------------------------- */

static void cache_drop(struct dsv4_scheduler *s, dsv4i_prefix *c) {
  dsv4i_seq_free(s->eng, c->seq);
  free(c->ids);
  memset(c, 0, sizeof *c);
  s->st.prefix_entries--;
}

/* Free the least recently used entry other than `keep`; 0 if there is none. */
static int cache_evict(struct dsv4_scheduler *s, const dsv4i_prefix *keep) {
  dsv4i_prefix *lru = NULL;
  for (int32_t i = 0; i < s->n_cache; i++)
    if (s->cache[i].seq && &s->cache[i] != keep && (!lru || s->cache[i].used < lru->used))
      lru = &s->cache[i];
  if (!lru) return 0;
  cache_drop(s, lru);
  s->st.prefix_evictions++;
  return 1;
}

/* Keep a finished request's sequence (takes r->seq and r->held). */
static void cache_put(struct dsv4_scheduler *s, dsv4i_req *r) {
  dsv4i_prefix *slot = NULL;
  for (int32_t i = 0; i < s->n_cache && !slot; i++)
    if (!s->cache[i].seq) slot = &s->cache[i];
  if (!slot) {
    cache_evict(s, NULL);
    for (int32_t i = 0; i < s->n_cache && !slot; i++)
      if (!s->cache[i].seq) slot = &s->cache[i];
  }
  slot->seq = r->seq;
  slot->ids = r->held;
  slot->n = r->n_held;
  slot->used = ++s->clock;
  s->st.prefix_entries++;
  r->seq = 0;
  r->held = NULL;
  r->n_held = r->cap_held = 0;
}

/* The longest entry whose ids all start the prompt (and leave a token to prefill). */
static dsv4i_prefix *cache_find(struct dsv4_scheduler *s, const dsv4i_req *r) {
  dsv4i_prefix *best = NULL;
  for (int32_t i = 0; i < s->n_cache; i++) {
    dsv4i_prefix *c = &s->cache[i];
    if (c->seq && c->n < r->n_prompt && (!best || c->n > best->n) &&
        !memcmp(c->ids, r->prompt, (size_t)c->n * sizeof *c->ids))
      best = c;
  }
  return best;
}

/* Record ids the request's sequence now holds (prefix cache on). On failure
 * the record is dropped and the sequence is simply not kept. */
static void push_held(dsv4i_req *r, const int32_t *ids, int64_t n) {
  if (!r->held) return;
  if (r->n_held + n > r->cap_held) {
    int64_t cap = r->cap_held;
    while (cap < r->n_held + n) cap *= 2;
    int32_t *f = dsv4i_realloc(r->held, (size_t)cap * sizeof *f, "prefix ids");
    if (!f) {
      free(r->held);
      r->held = NULL;
      return;
    }
    r->held = f;
    r->cap_held = cap;
  }
  memcpy(r->held + r->n_held, ids, (size_t)n * sizeof *ids);
  r->n_held += n;
}

static void free_req(struct dsv4_scheduler *s, dsv4i_req *r) {
  if (r->state == RQ_RUNNING) s->n_running--;
  else if (r->state != RQ_DONE) s->n_waiting--;
  release_seq(s, r);
  unlink_req(s, r);
  dsv4i_sampler_free(&r->smp);
  for (int32_t i = 0; i < r->n_stop; i++) free(r->stop[i]);
  free(r->stop);
  free(r->stop_ids);
  free(r->prompt);
  free(r->out);
  free(r->held);
  if (s->tok) dsv4i_detok_free(&r->detok);
  dsv4i_str_free(&r->text);
  free(r);
}

dsv4_status dsv4i_sched_create(struct dsv4_engine *e, const dsv4i_tokenizer *tok,
                               const dsv4_scheduler_params *p, struct dsv4_scheduler **out) {
  *out = NULL;
  const int32_t max_seqs = e->plan.max_seqs;
  int32_t run = p->max_running ? p->max_running : max_seqs;
  if (run < 1 || run > max_seqs || p->prefill_chunk < 1 || p->max_waiting < 1 || p->token_budget < 0)
    return dsv4i_error(DSV4_ERR_INVALID_ARG, "scheduler: max_running %d (engine max_sequences %d), "
                       "prefill_chunk %d, token_budget %d, max_waiting %d: out of range",
                       (int)p->max_running, (int)max_seqs, (int)p->prefill_chunk,
                       (int)p->token_budget, (int)p->max_waiting);
  const int32_t budget = p->token_budget ? p->token_budget : p->prefill_chunk + run;
  if (budget < p->prefill_chunk + run)
    return dsv4i_error(DSV4_ERR_INVALID_ARG, "scheduler: token_budget %d is below prefill_chunk %d "
                       "+ max_running %d (a chunk could wait forever)", (int)budget,
                       (int)p->prefill_chunk, (int)run);
  if (tok && dsv4i_tokenizer_vocab_size(tok) > e->vocab)
    return dsv4i_error(DSV4_ERR_INVALID_ARG, "scheduler: the tokenizer has %d ids, the model %d",
                       (int)dsv4i_tokenizer_vocab_size(tok), (int)e->vocab);
  struct dsv4_scheduler *s = dsv4i_calloc(1, sizeof *s, "scheduler");
  if (!s) return DSV4_ERR_OUT_OF_MEMORY;
  s->eng = e;
  s->tok = tok;
  s->vocab = e->vocab;
  s->eos = e->cfg->eos_token_id;
  s->chunk = p->prefill_chunk;
  s->budget = budget;
  s->max_running = run;
  s->max_waiting = p->max_waiting;
  s->max_ctx = e->plan.max_ctx;
  if (p->prefix_cache < 0 || p->prefix_cache > max_seqs) {
    dsv4i_sched_free(s);
    return dsv4i_error(DSV4_ERR_INVALID_ARG, "scheduler: prefix_cache %d outside 0..%d (max_sequences)",
                       (int)p->prefix_cache, (int)max_seqs);
  }
  s->n_cache = p->prefix_cache;
  if (s->n_cache && !(s->cache = dsv4i_calloc((size_t)s->n_cache, sizeof *s->cache, "prefix cache"))) {
    dsv4i_sched_free(s);
    return DSV4_ERR_OUT_OF_MEMORY;
  }
  s->block = e->spec ? e->cfg->dspark_block_size : 0;
  s->out_rows = s->block && e->plan.max_out_rows > run ? e->plan.max_out_rows : run;
  s->logits = dsv4i_malloc((size_t)s->out_rows * (size_t)s->vocab * sizeof(float), "scheduler logits");
  s->rows = dsv4i_calloc((size_t)run, sizeof *s->rows, "scheduler batch");
  s->fresh = dsv4i_calloc((size_t)run, sizeof *s->fresh, "scheduler batch");
  s->batch = dsv4i_calloc((size_t)run, sizeof *s->batch, "scheduler batch");
  int ok = s->logits && s->rows && s->fresh && s->batch;
  if (ok && s->block) {
    const size_t b = (size_t)s->block;
    s->vtok = dsv4i_malloc((size_t)run * (b + 1) * sizeof *s->vtok, "verify rows");
    s->drafts = dsv4i_malloc((size_t)run * b * sizeof *s->drafts, "drafts");
    s->d_ids = dsv4i_malloc((size_t)run * sizeof *s->d_ids, "drafts");
    s->d_anchor = dsv4i_malloc((size_t)run * sizeof *s->d_anchor, "drafts");
    s->d_row = dsv4i_malloc((size_t)run * sizeof *s->d_row, "drafts");
    s->d_k = dsv4i_malloc((size_t)run * sizeof *s->d_k, "drafts");
    s->dec = dsv4i_malloc((b + 1) * sizeof *s->dec, "drafts");
    ok = s->vtok && s->drafts && s->d_ids && s->d_anchor && s->d_row && s->d_k && s->dec;
  }
  if (!ok) {
    dsv4i_sched_free(s);
    return DSV4_ERR_OUT_OF_MEMORY;
  }
  *out = s;
  return DSV4_OK;
}

void dsv4i_sched_free(struct dsv4_scheduler *s) {
  if (!s) return;
  while (s->head) free_req(s, s->head);
  for (int32_t i = 0; s->cache && i < s->n_cache; i++)
    if (s->cache[i].seq) cache_drop(s, &s->cache[i]);
  free(s->cache);
  free(s->logits);
  free(s->rows);
  free(s->fresh);
  free(s->batch);
  free(s->vtok);
  free(s->drafts);
  free(s->d_ids);
  free(s->d_anchor);
  free(s->d_row);
  free(s->d_k);
  free(s->dec);
  free(s);
}

static dsv4_status check_params(const struct dsv4_scheduler *s, const dsv4_request_params *p) {
  const char *bad = NULL;
  if (p->max_tokens < 1) bad = "max_tokens below 1";
  else if (p->n_logprobs < 0 || p->n_logprobs > DSV4_MAX_LOGPROBS) bad = "n_logprobs outside 0..20";
  else if (p->flags & ~(uint32_t)DSV4_REQUEST_F_IGNORE_EOS) bad = "unknown flags";
  else if (p->n_stop_ids < 0 || (p->n_stop_ids && !p->stop_ids)) bad = "stop_ids";
  else if (p->n_stop < 0 || (p->n_stop && !p->stop)) bad = "stop strings";
  else if (p->n_stop && !s->tok) bad = "stop strings need a tokenizer (dsv4_scheduler_create)";
  else if (p->n_logit_bias < 0) bad = "n_logit_bias";
  else if (p->speculative < 0) bad = "speculative is negative";
  for (int32_t i = 0; !bad && i < p->n_stop_ids; i++)
    if (p->stop_ids[i] < 0 || p->stop_ids[i] >= s->vocab) bad = "a stop id outside the vocabulary";
  for (int32_t i = 0; !bad && i < p->n_stop; i++)
    if (!p->stop[i] || !p->stop[i][0]) bad = "an empty stop string";
  if (bad) return dsv4i_error(DSV4_ERR_INVALID_ARG, "submit: %s", bad);
  if (p->speculative > 0 && !s->block)
    return dsv4i_error(DSV4_ERR_UNSUPPORTED, "submit: speculative decoding needs the DSpark head, "
                       "which this engine's model or backend does not have");
  return DSV4_OK;
}

dsv4_status dsv4i_sched_submit(struct dsv4_scheduler *s, const int32_t *prompt, int64_t n,
                               const dsv4_request_params *p, int64_t *id) {
  if (n < 1) return dsv4i_error(DSV4_ERR_INVALID_ARG, "submit: empty prompt");
  for (int64_t i = 0; i < n; i++)
    if (prompt[i] < 0 || prompt[i] >= s->vocab)
      return dsv4i_error(DSV4_ERR_INVALID_TOKEN, "submit: prompt token %lld is %d, outside [0, %d)",
                         (long long)i, (int)prompt[i], (int)s->vocab);
  if (n + 1 > s->max_ctx)
    return dsv4i_error(DSV4_ERR_CONTEXT_OVERFLOW, "submit: a prompt of %lld tokens leaves no room "
                       "in max_context %lld", (long long)n, (long long)s->max_ctx);
  dsv4_status st = check_params(s, p);
  if (st) return st;
  if (s->n_waiting + s->n_running >= s->max_waiting)
    return dsv4i_error(DSV4_KV_FULL, "submit: %d requests are queued or running (max_waiting)",
                       (int)s->max_waiting);
  dsv4i_req *r = dsv4i_calloc(1, sizeof *r, "request");
  if (!r) return DSV4_ERR_OUT_OF_MEMORY;
  dsv4i_sampler_cfg c = {p->temperature, p->top_k, p->top_p, p->min_p, p->repetition_penalty,
                         p->presence_penalty, p->frequency_penalty, p->seed, p->n_logit_bias,
                         p->logit_bias_ids, p->logit_bias};
  if ((st = dsv4i_sampler_init(&r->smp, &c, s->vocab))) {
    free(r);
    return st;
  }
  r->prompt = dsv4i_malloc((size_t)n * sizeof *r->prompt, "request prompt");
  r->stop_ids = p->n_stop_ids ? dsv4i_malloc((size_t)p->n_stop_ids * sizeof(int32_t), "stop ids") : NULL;
  r->stop = p->n_stop ? dsv4i_calloc((size_t)p->n_stop, sizeof(char *), "stop strings") : NULL;
  int ok = r->prompt && (!p->n_stop_ids || r->stop_ids) && (!p->n_stop || r->stop);
  for (int32_t i = 0; ok && i < p->n_stop; i++) {
    ok = (r->stop[i] = dsv4i_strdup(p->stop[i], "stop string")) != NULL;
    r->n_stop = i + 1;
    const size_t l = strlen(p->stop[i]);
    if (l > r->stop_max) r->stop_max = l;
  }
  if (s->tok) dsv4i_detok_init(&r->detok, s->tok, 0);
  /* linked first so that free_req can undo everything */
  r->state = RQ_WAITING;
  s->n_waiting++;
  r->prev = s->tail;
  if (s->tail) s->tail->next_rq = r;
  else s->head = r;
  s->tail = r;
  if (!ok) {
    free_req(s, r);
    return DSV4_ERR_OUT_OF_MEMORY;
  }
  memcpy(r->prompt, prompt, (size_t)n * sizeof *prompt);
  if (p->n_stop_ids) memcpy(r->stop_ids, p->stop_ids, (size_t)p->n_stop_ids * sizeof(int32_t));
  r->n_stop_ids = p->n_stop_ids;
  r->n_prompt = n;
  r->max_tokens = p->max_tokens;
  r->n_logprobs = p->n_logprobs;
  r->spec = p->speculative < s->block ? p->speculative : s->block;
  r->flags = p->flags;
  r->on_token = p->on_token;
  r->user = p->user_data;
  dsv4i_sampler_prompt(&r->smp, prompt, n);
  r->id = ++s->serial;
  s->st.submitted++;
  *id = r->id;
  return DSV4_OK;
}

static dsv4i_req *find(struct dsv4_scheduler *s, int64_t id) {
  for (dsv4i_req *r = s->head; r; r = r->next_rq)
    if (r->id == id) return r;
  return NULL;
}

dsv4_status dsv4i_sched_cancel(struct dsv4_scheduler *s, int64_t id) {
  dsv4i_req *r = find(s, id);
  if (!r) return dsv4i_error(DSV4_ERR_UNKNOWN_SEQUENCE, "cancel: no request %lld", (long long)id);
  if (r->state != RQ_DONE) s->st.cancelled++;
  free_req(s, r);
  return DSV4_OK;
}

/* Stop-string handling on the request's decoded text: returns 1 when a stop
 * string matched (r->text then ends before it); *release = bytes of r->text
 * that can be handed out now. */
static int stop_scan(dsv4i_req *r, size_t *release, int final) {
  /* r->text holds only text not handed out, which never contains the start of a match
   * that began in released text (that tail was held back) */
  const char *t = r->text.buf ? r->text.buf : "";
  const size_t n = r->text.len;
  size_t start = 0, best = SIZE_MAX;
  for (int32_t k = 0; k < r->n_stop; k++) {
    const size_t l = strlen(r->stop[k]);
    for (size_t i = start; i + l <= n; i++)
      if (!memcmp(t + i, r->stop[k], l)) {
        if (i < best) best = i;
        break;
      }
  }
  if (best != SIZE_MAX) {
    r->text.len = best;
    *release = best;
    return 1;
  }
  size_t hold = 0; /* the longest tail that may begin a stop string */
  for (int32_t k = 0; k < r->n_stop && !final; k++) {
    const size_t l = strlen(r->stop[k]);
    for (size_t h = l - 1 < n ? l - 1 : n; h > hold; h--)
      if (!memcmp(t + n - h, r->stop[k], h)) {
        hold = h;
        break;
      }
  }
  *release = n - hold;
  return 0;
}

/* Deliver token tok at position pos of r (logits row: its raw logits); the
 * sampler has already counted it (dsv4i_sampler_output). */
static void emit(struct dsv4_scheduler *s, dsv4i_req *r, int32_t tok, int64_t pos,
                 const float *row) {
  r->n_out++;
  int32_t finish = DSV4_FINISH_NONE;
  int stopped = 0;
  for (int32_t i = 0; i < r->n_stop_ids; i++) stopped |= r->stop_ids[i] == tok;
  if (tok == s->eos && !(r->flags & DSV4_REQUEST_F_IGNORE_EOS)) stopped = 1;
  size_t release = 0;
  if (s->tok) {
    dsv4i_detok_push(&r->detok, tok, &r->text);
    if (r->text.oom) stopped = 1, finish = DSV4_FINISH_ERROR;
    const int done = stopped || r->n_out >= r->max_tokens || pos + 1 >= s->max_ctx;
    if (done) dsv4i_detok_flush(&r->detok, &r->text);
    if (r->n_stop && stop_scan(r, &release, done)) stopped = 1;
    else if (!r->n_stop) release = r->text.len;
  }
  if (!finish) {
    if (stopped) finish = DSV4_FINISH_STOP;
    else if (r->n_out >= r->max_tokens || pos + 1 >= s->max_ctx) finish = DSV4_FINISH_LENGTH;
  }
  if (r->on_token) {
    dsv4_token_event ev;
    memset(&ev, 0, sizeof ev);
    ev.struct_size = sizeof ev;
    ev.token = tok;
    ev.position = pos;
    ev.finish = finish;
    ev.n_top = r->n_logprobs;
    ev.logprob = dsv4i_sampler_logprobs(row, s->vocab, tok, r->n_logprobs, s->top_ids, s->top_lp);
    ev.top_ids = s->top_ids;
    ev.top_logprobs = s->top_lp;
    if (s->tok) {
      ev.text = r->text.buf ? r->text.buf : "";
      ev.text_len = release;
    }
    r->on_token(r->id, &ev, r->user);
  } else {
    if (r->n_buf == r->cap_buf) {
      size_t cap = r->cap_buf ? r->cap_buf * 2 : 16;
      int32_t *o = dsv4i_realloc(r->out, cap * sizeof *o, "request output");
      if (o) r->out = o, r->cap_buf = cap;
    }
    if (r->n_buf < r->cap_buf) r->out[r->n_buf++] = tok;
    else if (!finish) finish = DSV4_FINISH_ERROR;
  }
  if (s->tok && release) { /* drop what was handed out */
    memmove(r->text.buf, r->text.buf + release, r->text.len - release);
    r->text.len -= release;
  }
  r->next = tok;
  if (finish) {
    r->finish = finish;
    if (r->state == RQ_RUNNING) s->n_running--;
    else s->n_waiting--;
    r->state = RQ_DONE;
    if (s->n_cache && r->seq && r->held && r->n_held == r->seq_len && finish != DSV4_FINISH_ERROR)
      cache_put(s, r);
    release_seq(s, r);
    s->st.finished++;
  }
}

/* Fail every request of a batch after an engine error. */
static void fail_batch(struct dsv4_scheduler *s, dsv4i_req **b, int32_t n) {
  for (int32_t i = 0; i < n; i++) {
    dsv4i_req *r = b[i];
    if (r->state == RQ_RUNNING) s->n_running--;
    else s->n_waiting--;
    r->state = RQ_DONE;
    r->finish = DSV4_FINISH_ERROR;
    release_seq(s, r);
    s->st.finished++;
    if (r->on_token) {
      dsv4_token_event ev;
      memset(&ev, 0, sizeof ev);
      ev.struct_size = sizeof ev;
      ev.token = -1;
      ev.finish = DSV4_FINISH_ERROR;
      r->on_token(r->id, &ev, r->user);
    }
  }
}

/* Give a request's sequence back and make it wait again (nothing was computed for it). */
static void unadmit(struct dsv4_scheduler *s, dsv4i_req *r) {
  release_seq(s, r);
  free(r->held);
  r->held = NULL;
  r->n_held = r->cap_held = 0;
  r->fed = r->seq_len = 0;
  r->state = RQ_WAITING;
}

/* Admit r: a sequence (a fork of the prefix-cache hit, or a new one) and the
 * record of what it holds. DSV4_KV_FULL when the engine has no room. */
static dsv4_status admit(struct dsv4_scheduler *s, dsv4i_req *r, dsv4i_prefix *hit) {
  dsv4_status st;
  for (;;) { /* kept sequences give way when the engine has no room */
    st = hit ? dsv4i_seq_fork(s->eng, hit->seq, &r->seq) : dsv4i_seq_create(s->eng, &r->seq);
    if (st != DSV4_KV_FULL || !cache_evict(s, hit)) break;
  }
  if (st) return st;
  r->state = RQ_PREFILL;
  if (s->n_cache) {
    r->cap_held = r->n_prompt + r->max_tokens < 64 ? 64 : r->n_prompt + r->max_tokens;
    r->held = dsv4i_malloc((size_t)r->cap_held * sizeof *r->held, "prefix ids");
    r->n_held = 0;
  }
  if (hit) {
    push_held(r, r->prompt, hit->n);
    r->fed = r->seq_len = hit->n;
    hit->used = ++s->clock;
    s->st.prefix_hits++;
    s->st.prefix_tokens_reused += hit->n;
  } else if (s->n_cache) {
    s->st.prefix_misses++;
  }
  return DSV4_OK;
}

/* Turn the batch's verify rows back into decode rows; 0 when it had none. */
static int strip_drafts(struct dsv4_scheduler *s, int32_t n) {
  int any = 0;
  for (int32_t i = 0; i < n; i++)
    if (s->rows[i].generated && s->rows[i].n > 1) {
      s->rows[i].n = 1;
      s->rows[i].tokens = &s->batch[i]->next;
      any = 1;
    }
  s->st.spec_fallbacks += any;
  return any;
}

/* A step of the engine over rows [0, n): DSV4_KV_FULL gives way first to kept
 * sequences, then to the last prompt chunks (whose requests wait: nobody behind
 * them may overtake, so *blocked is set). A chunk larger than the engine's batch
 * (prefill_chunk above the engine's) runs alone as one prefill call, which cuts
 * it with the same layout. Returns the status; *n = rows that ran. */
static dsv4_status run_rows(struct dsv4_scheduler *s, int32_t *n, int *blocked) {
  dsv4_status st;
  for (;;) {
    const dsv4i_step_row *r0 = &s->rows[0];
    if (*n == 1 && !r0->generated && r0->n > s->eng->plan.max_batch_tokens)
      st = dsv4i_engine_prefill(s->eng, r0->id, r0->tokens, r0->n, NULL,
                                r0->want_logits ? s->logits : NULL, NULL);
    else
      st = dsv4i_engine_step(s->eng, *n, s->rows, s->logits);
    if (st == DSV4_OK) return st;
    /* drafts are optional: a batch refused or failed with them runs again without
     * (a failed step rolled every row back); the tokens are the same either way */
    if (st != DSV4_ERR_DEVICE_LOST && strip_drafts(s, *n)) continue;
    if (st != DSV4_KV_FULL) return st;
    if (cache_evict(s, NULL)) continue;
    if (s->rows[*n - 1].generated) { /* only decodes left: the pools free up as requests finish */
      *n = 0;
      return DSV4_OK;
    }
    *blocked = 1;
    if (s->fresh[*n - 1]) unadmit(s, s->batch[*n - 1]);
    if (--*n == 0) return DSV4_OK;
  }
}

/* Whether token tok, the j-th decided by a verify row, ends r whatever follows. */
static int ends_at(const struct dsv4_scheduler *s, const dsv4i_req *r, int32_t tok, int32_t j) {
  if (r->n_out + j + 1 >= r->max_tokens) return 1;
  if (tok == s->eos && !(r->flags & DSV4_REQUEST_F_IGNORE_EOS)) return 1;
  for (int32_t i = 0; i < r->n_stop_ids; i++)
    if (r->stop_ids[i] == tok) return 1;
  return 0;
}

/* A verify row [pending, d_1 .. d_k] at positions L .. L+k ran; logits row j is the
 * target's at L+1+j. Decide position by position against the processed distribution
 * (the request's sampler, penalties counting the tokens decided before): d_{j+1} goes
 * through the accept rule, the first rejection's replacement or the bonus row's draw
 * ends the run. The sequence keeps the pending token and the accepted drafts (the rest
 * is rolled back: KV, DSpark rings, Engram history); the tokens go out in order, none
 * after the request finished. */
static void take_verify(struct dsv4_scheduler *s, dsv4i_req *r, const dsv4i_step_row *w,
                        const float *rows) {
  const int64_t L = r->seq_len;
  const int32_t k = w->n - 1;
  const size_t V = (size_t)s->vocab;
  int32_t m = 0; /* tokens decided: s->dec[0 .. m] */
  for (int32_t j = 0;; j++) {
    int32_t tok = -1;
    dsv4i_sampler_dist(&r->smp, rows + (size_t)j * V);
    if (j == k) tok = dsv4i_sampler_draw(&r->smp, L + 1 + j);
    else if (dsv4i_sampler_accept(&r->smp, NULL, w->tokens[j + 1], L + 1 + j, &tok))
      tok = w->tokens[j + 1], s->st.spec_accepted++;
    dsv4i_sampler_output(&r->smp, tok);
    s->dec[m = j] = tok;
    if (j == k || tok != w->tokens[j + 1] || ends_at(s, r, tok, j)) break;
  }
  s->st.spec_drafted += k;
  dsv4_status st = dsv4i_seq_truncate(s->eng, r->seq, L + 1 + m);
  if (st) { /* this request alone fails (its sequence could not be rolled back) */
    fail_batch(s, &r, 1);
    return;
  }
  push_held(r, w->tokens, m + 1);
  r->seq_len = L + 1 + m;
  s->st.decode_tokens += m + 1;
  for (int32_t j = 0; j <= m && r->state != RQ_DONE; j++)
    emit(s, r, s->dec[j], L + 1 + j, rows + (size_t)j * V);
}

/* Results of rows [0, n) that ran: draws for decodes and finished prompts, the
 * decisions of verify rows. */
static void take_rows(struct dsv4_scheduler *s, int32_t n) {
  int32_t o = 0;
  for (int32_t i = 0; i < n; i++) {
    dsv4i_req *r = s->batch[i];
    const dsv4i_step_row *w = &s->rows[i];
    const float *row = w->want_logits ? s->logits + (size_t)o * (size_t)s->vocab : NULL;
    if (w->want_logits) o += w->generated ? w->n : 1;
    if (w->generated && w->n > 1) {
      take_verify(s, r, w, row);
      continue;
    }
    if (w->generated) {
      r->seq_len++;
      push_held(r, &r->next, 1);
      s->st.decode_tokens++;
    } else {
      push_held(r, w->tokens, w->n);
      r->fed += w->n;
      r->seq_len = r->fed;
      s->st.prefill_tokens += w->n;
      if (!w->want_logits) continue;
      s->n_waiting--;
      s->n_running++;
      r->state = RQ_RUNNING;
    }
    dsv4i_sampler_dist(&r->smp, row);
    const int32_t tok = dsv4i_sampler_draw(&r->smp, r->seq_len);
    dsv4i_sampler_output(&r->smp, tok);
    emit(s, r, tok, r->seq_len, row);
  }
}

/* Drafts for the speculative requests among the first n_dec (decode) rows of a batch of
 * n rows holding tok tokens, within what the batch leaves: tokens (budget, the engine's
 * batch) and logits rows (the engine's max_out_rows), oldest request first. Each such
 * row becomes a verify row [pending, d_1 .. d_k]. One draft call for all; when it fails
 * the rows stay decode rows (the tokens are the same). */
static void add_drafts(struct dsv4_scheduler *s, int32_t n_dec, int32_t n, int32_t tok) {
  const struct dsv4_engine *e = s->eng;
  const int32_t B = s->block;
  int32_t tok_room = (s->budget < e->plan.max_batch_tokens ? s->budget : e->plan.max_batch_tokens) - tok;
  int32_t out_room = s->out_rows;
  for (int32_t i = 0; i < n; i++) out_room -= s->rows[i].want_logits != 0;
  int32_t nd = 0;
  for (int32_t i = 0; i < n_dec && tok_room > 0 && out_room > 0; i++) {
    const dsv4i_req *r = s->batch[i];
    int64_t k = r->spec;
    if (k > r->max_tokens - r->n_out - 1) k = r->max_tokens - r->n_out - 1; /* the bonus is one */
    if (k > s->max_ctx - r->seq_len - 2) k = s->max_ctx - r->seq_len - 2;
    if (k > tok_room) k = tok_room;
    if (k > out_room) k = out_room;
    if (k < 1) continue;
    s->d_ids[nd] = r->seq;
    s->d_anchor[nd] = r->next;
    s->d_row[nd] = i;
    s->d_k[nd++] = (int32_t)k;
    tok_room -= (int32_t)k;
    out_room -= (int32_t)k;
  }
  if (!nd) return;
  if (dsv4i_spec_draft(s->eng, nd, s->d_ids, s->d_anchor, NULL, s->drafts, NULL)) {
    s->st.spec_fallbacks++;
    return;
  }
  for (int32_t j = 0; j < nd; j++) {
    const int32_t i = s->d_row[j];
    int32_t *v = s->vtok + (size_t)i * (size_t)(B + 1);
    v[0] = s->batch[i]->next;
    memcpy(v + 1, s->drafts + (size_t)j * (size_t)B, (size_t)s->d_k[j] * sizeof *v);
    s->rows[i].tokens = v;
    s->rows[i].n = 1 + s->d_k[j];
  }
}

/* Build and run the step's engine batches: the first holds a decode row of every
 * running request, then prompt chunks in arrival order while the budget and the
 * engine's batch last (one chunk per request per step); later batches, only when
 * the engine's batch is smaller than the budget, take the chunks that did not fit. */
static dsv4_status run_step(struct dsv4_scheduler *s, int32_t *used) {
  const int32_t cap = s->eng->plan.max_batch_tokens;
  int32_t held = 0; /* sequences held by admitted requests */
  for (dsv4i_req *q = s->head; q; q = q->next_rq) held += q->seq != 0;
  dsv4i_req *cursor = s->head;
  int blocked = 0, first = 1;
  *used = 0;
  while (first || (!blocked && cursor)) {
    int32_t n = 0, tok = 0;
    const int with_dec = first;
    for (dsv4i_req *r = first ? s->head : NULL; r; r = r->next_rq)
      if (r->state == RQ_RUNNING) {
        s->rows[n] = (dsv4i_step_row){r->seq, &r->next, 1, 1, 1};
        s->fresh[n] = 0;
        s->batch[n++] = r;
        tok++;
      }
    first = 0;
    for (; cursor && !blocked; cursor = cursor->next_rq) {
      dsv4i_req *r = cursor;
      if (r->state != RQ_WAITING && r->state != RQ_PREFILL) continue;
      dsv4i_prefix *hit = r->state == RQ_WAITING && s->n_cache ? cache_find(s, r) : NULL;
      const int64_t start = r->state == RQ_WAITING ? (hit ? hit->n : 0) : r->fed;
      const int64_t left = r->n_prompt - start;
      const int32_t c = (int32_t)(left < s->chunk ? left : s->chunk);
      if (*used + tok + c > s->budget) { /* keep arrival order: nobody overtakes */
        blocked = 1;
        break;
      }
      if (n && tok + c > cap) break; /* the next batch of this step takes it */
      const int admitting = r->state == RQ_WAITING;
      if (admitting) {
        if (held >= s->max_running) {
          blocked = 1;
          break;
        }
        dsv4_status st = admit(s, r, hit);
        if (st == DSV4_KV_FULL) {
          blocked = 1;
          break;
        }
        if (st) return st;
        held++;
      }
      s->rows[n] = (dsv4i_step_row){r->seq, r->prompt + r->fed, c, 0, c == left};
      s->fresh[n] = (uint8_t)admitting;
      s->batch[n++] = r;
      tok += c;
      if (tok >= cap) { /* full: the next batch goes on after this request */
        cursor = r->next_rq;
        break;
      }
    }
    if (!n) break;
    if (with_dec && s->block) {
      int32_t n_dec = 0;
      while (n_dec < n && s->rows[n_dec].generated) n_dec++;
      add_drafts(s, n_dec, n, tok);
    }
    dsv4_status st = run_rows(s, &n, &blocked);
    if (st) {
      fail_batch(s, s->batch, n);
      return st;
    }
    take_rows(s, n);
    for (int32_t i = 0; i < n; i++) *used += s->rows[i].n;
    if (!n) break;
  }
  return DSV4_OK;
}

/* Callback-mode requests are released once their last event went out. */
static void reap(struct dsv4_scheduler *s) {
  for (dsv4i_req *r = s->head, *nx; r; r = nx) {
    nx = r->next_rq;
    if (r->state == RQ_DONE && r->on_token) free_req(s, r);
  }
}

dsv4_status dsv4i_sched_step(struct dsv4_scheduler *s, int32_t *n_active) {
  int32_t used = 0;
  dsv4_status st = run_step(s, &used);
  reap(s);
  s->st.steps++;
  if (used > s->st.max_step_tokens) s->st.max_step_tokens = used;
  if (n_active) *n_active = s->n_waiting + s->n_running;
  return st;
}

dsv4_status dsv4i_sched_poll(struct dsv4_scheduler *s, int64_t id, int32_t *tokens, int32_t cap,
                             int32_t *n, int32_t *finish) {
  dsv4i_req *r = find(s, id);
  *n = 0;
  *finish = DSV4_FINISH_NONE;
  if (!r) return dsv4i_error(DSV4_ERR_UNKNOWN_SEQUENCE, "poll: no request %lld", (long long)id);
  if (r->on_token)
    return dsv4i_error(DSV4_ERR_INVALID_ARG, "poll: request %lld delivers by callback", (long long)id);
  const size_t k = r->n_buf < (size_t)cap ? r->n_buf : (size_t)cap;
  if (k) {
    memcpy(tokens, r->out, k * sizeof *tokens);
    memmove(r->out, r->out + k, (r->n_buf - k) * sizeof *r->out);
  }
  r->n_buf -= k;
  *n = (int32_t)k;
  if (r->state == RQ_DONE && r->n_buf == 0) {
    *finish = r->finish;
    free_req(s, r);
  }
  return DSV4_OK;
}
