/*
 * The engine thread: steps the scheduler while requests are active, waits
 * for work otherwise. Token callbacks append decoded text to their job
 * (under srv.jobs) and wake its connection thread. A step holds srv.lock
 * for its duration; connection threads that want it are let in between
 * steps (want_lock).
 */
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "srv.h"

void srv_lock(srv *s) {
  atomic_fetch_add(&s->want_lock, 1);
  pthread_mutex_lock(&s->lock);
  atomic_fetch_sub(&s->want_lock, 1);
}

void srv_unlock(srv *s) { pthread_mutex_unlock(&s->lock); }

static void append_text(srv_job *j, const char *t, size_t n) {
  if (!n) return;
  if (j->n_text + n + 1 > j->cap_text) {
    size_t cap = j->cap_text ? j->cap_text : 256;
    while (cap < j->n_text + n + 1) cap *= 2;
    char *b = realloc(j->text, cap);
    if (!b) {
      j->oom = 1;
      return;
    }
    j->text = b;
    j->cap_text = cap;
  }
  memcpy(j->text + j->n_text, t, n);
  j->n_text += n;
  j->text[j->n_text] = 0;
}

static void append_lp(srv_job *j, const dsv4_token_event *ev) {
  if (j->n_lp == j->cap_lp) {
    const size_t cap = j->cap_lp ? 2 * j->cap_lp : 16;
    srv_lp *b = realloc(j->lp, cap * sizeof *b);
    if (!b) {
      j->oom = 1;
      return;
    }
    j->lp = b;
    j->cap_lp = cap;
  }
  srv_lp *e = &j->lp[j->n_lp++];
  e->token = ev->token;
  e->logprob = ev->logprob;
  e->n_top = ev->n_top;
  memcpy(e->top_ids, ev->top_ids, (size_t)ev->n_top * sizeof *e->top_ids);
  memcpy(e->top_lp, ev->top_logprobs, (size_t)ev->n_top * sizeof *e->top_lp);
}

static void on_token(int64_t request, const dsv4_token_event *ev, void *user) {
  (void)request;
  srv_job *j = user;
  pthread_mutex_lock(j->jobs);
  if (ev->token >= 0) j->n_completion++;
  /* The end-of-sentence token that ends a request is not output text (a completion
   * drops it; the chat parser only needs it to see the end), so it gets no logprobs. */
  const int eos_end = ev->token == j->eos && ev->finish == DSV4_FINISH_STOP;
  if (ev->text && !(j->skip_eos_text && eos_end)) append_text(j, ev->text, ev->text_len);
  if (j->logprobs && ev->token >= 0 && !eos_end) append_lp(j, ev);
  if (ev->finish) {
    j->finished = ev->finish;
    j->rid = 0; /* released by the scheduler after this event */
  }
  pthread_cond_signal(&j->cond);
  pthread_mutex_unlock(j->jobs);
}

dsv4_status srv_submit(srv *s, srv_job *j, const int32_t *ids, int64_t n,
                       const dsv4_request_params *p) {
  dsv4_request_params q = *p;
  q.on_token = on_token;
  q.user_data = j;
  j->eos = s->eos;
  j->n_prompt = n;
  j->jobs = &s->jobs;
  int64_t rid = 0;
  dsv4_status st = dsv4_scheduler_submit(s->sched, ids, n, &q, &rid);
  if (st) return st;
  j->rid = rid;
  s->active++;
  pthread_cond_signal(&s->work);
  return DSV4_OK;
}

void srv_cancel(srv *s, srv_job *j) {
  pthread_mutex_lock(&s->jobs);
  if (j->rid) {
    (void)!dsv4_scheduler_cancel(s->sched, j->rid); /* nothing to do on failure here */
    j->rid = 0;
    if (!j->finished) j->finished = DSV4_FINISH_ERROR;
  }
  pthread_mutex_unlock(&s->jobs);
}

static void *engine_main(void *arg) {
  srv *s = arg;
  srv_lock(s);
  while (!s->stop) {
    int32_t active = 0;
    dsv4_scheduler_stats st;
    must(dsv4_scheduler_get_stats(s->sched, &st, sizeof st));
    if (st.waiting + st.running == 0) {
      pthread_cond_wait(&s->work, &s->lock);
      continue;
    }
    dsv4_status rc = dsv4_scheduler_step(s->sched, &active);
    if (rc < 0) {
      fprintf(stderr, "dsv4-server: step failed: %s\n", dsv4_last_error());
      if (rc == DSV4_ERR_DEVICE_LOST || rc == DSV4_ERR_INTERNAL) s->failed = 1;
    }
    /* let waiting connection threads in between steps */
    while (atomic_load(&s->want_lock) > 0) {
      srv_unlock(s);
      sched_yield();
      pthread_mutex_lock(&s->lock);
    }
  }
  srv_unlock(s);
  return NULL;
}

int srv_engine_start(srv *s) {
  dsv4_engine_params ep;
  must(dsv4_engine_params_init(&ep, sizeof ep));
  ep.max_sequences = s->o.max_sequences;
  ep.max_context = s->o.max_context;
  ep.n_threads = s->o.n_threads;
  ep.kv_format = s->o.kv_format;
  /* the engine's batch holds a whole scheduler step: a chunk and every decode */
  ep.prefill_chunk = s->o.prefill_chunk + s->o.max_sequences;
  if (dsv4_engine_create_from_dir(s->o.model_dir, &ep, &s->eng) ||
      dsv4_tokenizer_load(s->o.model_dir, &s->tok)) {
    fprintf(stderr, "dsv4-server: %s\n", dsv4_last_error());
    return -1;
  }
  dsv4_model_info mi;
  must(dsv4_model_get_info(dsv4_engine_model(s->eng), &mi, sizeof mi));
  s->eos = mi.eos_token_id;
  s->bos = mi.bos_token_id;
  s->vocab = mi.vocab_size;
  dsv4_scheduler_params sp;
  must(dsv4_scheduler_params_init(&sp, sizeof sp));
  sp.prefill_chunk = s->o.prefill_chunk;
  sp.max_waiting = s->o.max_queue;
  sp.prefix_cache = s->o.prefix_cache;
  if (dsv4_scheduler_create(s->eng, s->tok, &sp, &s->sched)) {
    fprintf(stderr, "dsv4-server: %s\n", dsv4_last_error());
    return -1;
  }
  pthread_mutex_init(&s->lock, NULL);
  pthread_mutex_init(&s->jobs, NULL);
  pthread_cond_init(&s->work, NULL);
  if (pthread_create(&s->engine_thread, NULL, engine_main, s)) {
    fprintf(stderr, "dsv4-server: cannot start the engine thread\n");
    return -1;
  }
  return 0;
}

void srv_engine_stop(srv *s) {
  srv_lock(s);
  s->stop = 1;
  pthread_cond_signal(&s->work);
  srv_unlock(s);
  pthread_join(s->engine_thread, NULL);
  dsv4_scheduler_free(s->sched);
  dsv4_tokenizer_free(s->tok);
  dsv4_engine_free(s->eng);
}
