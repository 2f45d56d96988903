/*
 * The request scheduler through the public API, on the default tiny model
 * (build/models/dsv4-tiny): every request's tokens equal its tokens run
 * alone whatever the arrivals, cancellations and batch mix; decode keeps
 * going during a long prefill; a step is one engine batch of decodes and
 * prompt chunks; admission by free sequences; stop ids and
 * stop strings; bad input; thousands of requests leave nothing behind.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "dsv4/dsv4.h"
#include "test_util.h"

static dsv4_engine *eng;
static dsv4_tokenizer *tok;
static int32_t vocab;

#define MAX_SEQS 4

static int setup(void **state) {
  (void)state;
  char *dir = tu_join(getenv("DSV4_BUILD_ROOT"), "models/dsv4-tiny");
  dsv4_engine_params p;
  assert_int_equal(dsv4_engine_params_init(&p, sizeof p), DSV4_OK);
  p.max_sequences = MAX_SEQS;
  p.max_context = 512;
  p.n_threads = 1;
  dsv4_status s = dsv4_engine_create_from_dir(dir, &p, &eng);
  if (!s) s = dsv4_tokenizer_load(dir, &tok);
  if (s) fprintf(stderr, "%s: %s\n", dir, dsv4_last_error());
  free(dir);
  if (s) return -1;
  dsv4_model_info mi;
  assert_int_equal(dsv4_model_get_info(dsv4_engine_model(eng), &mi, sizeof mi), DSV4_OK);
  vocab = mi.vocab_size;
  return 0;
}

static int teardown(void **state) {
  (void)state;
  dsv4_tokenizer_free(tok);
  dsv4_engine_free(eng);
  return 0;
}

static uint64_t rng = 88172645463325252ull;
static uint32_t rnd(uint32_t n) {
  rng ^= rng << 13;
  rng ^= rng >> 7;
  rng ^= rng << 17;
  return (uint32_t)(rng % n);
}

typedef struct job {
  int32_t prompt[200];
  int32_t n_prompt;
  dsv4_request_params p;
  int32_t want[64], n_want, want_finish;
  int32_t got[64], n_got, got_finish;
  float lp_want[64], lp_got[64]; /* callback mode: each token's logprob */
  int32_t spec;    /* speculative drafts when run with the others (alone: never) */
  int64_t id;
  int cancel_at;   /* step at which to cancel (-1: never) */
  int arrive;      /* step at which it is submitted */
  int poll;        /* poll mode */
  int live;
} job;

static void on_tok(int64_t request, const dsv4_token_event *ev, void *user) {
  job *j = user;
  assert_int_equal(request, j->id);
  assert_true(j->n_got < 64);
  assert_int_equal(j->got_finish, 0);
  j->lp_got[j->n_got] = ev->logprob;
  j->got[j->n_got++] = ev->token;
  if (ev->finish) j->got_finish = ev->finish;
}

static dsv4_scheduler *make_sched(int32_t chunk) {
  dsv4_scheduler_params sp;
  assert_int_equal(dsv4_scheduler_params_init(&sp, sizeof sp), DSV4_OK);
  sp.prefill_chunk = chunk;
  dsv4_scheduler *s = NULL;
  assert_int_equal(dsv4_scheduler_create(eng, tok, &sp, &s), DSV4_OK);
  return s;
}

static void drain_poll(dsv4_scheduler *s, job *j) {
  int32_t n = 0, fin = 0;
  assert_int_equal(dsv4_scheduler_poll(s, j->id, j->got + j->n_got, 64 - j->n_got, &n, &fin), DSV4_OK);
  j->n_got += n;
  if (fin) j->got_finish = fin, j->live = 0;
}

static void run_alone(job *j, int32_t spec) {
  dsv4_scheduler *s = make_sched(16);
  dsv4_request_params p = j->p;
  p.speculative = spec;
  p.on_token = on_tok;
  p.user_data = j;
  j->n_got = j->got_finish = 0;
  assert_int_equal(dsv4_scheduler_submit(s, j->prompt, j->n_prompt, &p, &j->id), DSV4_OK);
  int32_t active = 1;
  while (active) assert_int_equal(dsv4_scheduler_step(s, &active), DSV4_OK);
  memcpy(j->want, j->got, sizeof j->want);
  memcpy(j->lp_want, j->lp_got, sizeof j->lp_want);
  j->n_want = j->n_got;
  j->want_finish = j->got_finish;
  assert_true(j->want_finish == DSV4_FINISH_STOP || j->want_finish == DSV4_FINISH_LENGTH);
  dsv4_scheduler_free(s);
}

/* Random arrivals, lengths, seeds, sampling transforms and cancellations; some
 * requests speculative (DSpark drafts verified in the shared batch): every request's
 * tokens and logprobs equal those of the request run alone without speculation. */
static void test_same_as_alone(void **state) {
  (void)state;
  enum { N = 16 };
  job *jobs = calloc(N, sizeof *jobs);
  for (int i = 0; i < N; i++) {
    job *j = &jobs[i];
    j->n_prompt = 1 + (int32_t)rnd(i % 5 == 0 ? 120 : 40);
    for (int32_t k = 0; k < j->n_prompt; k++) j->prompt[k] = 3 + (int32_t)rnd((uint32_t)vocab - 3);
    assert_int_equal(dsv4_request_params_init(&j->p, sizeof j->p), DSV4_OK);
    j->p.max_tokens = 1 + (int32_t)rnd(24);
    j->p.seed = rnd(1000);
    if (i % 3) {
      j->p.temperature = 0.7f + 0.1f * (float)(i % 4);
      j->p.top_k = i % 2 ? 50 : 0;
      j->p.top_p = i % 4 == 1 ? 0.9f : 1.0f;
      j->p.min_p = i % 5 == 2 ? 0.05f : 0.0f;
      j->p.repetition_penalty = i % 6 == 1 ? 1.3f : 1.0f;
      j->p.presence_penalty = i % 7 == 3 ? 0.5f : 0.0f;
      j->p.frequency_penalty = i % 7 == 4 ? 0.4f : 0.0f;
    }
    j->arrive = (int)rnd(30);
    j->cancel_at = i % 6 == 5 ? j->arrive + (int)rnd(3) : -1;
    if (j->cancel_at >= 0) j->p.max_tokens = 24, j->p.flags = DSV4_REQUEST_F_IGNORE_EOS;
    j->poll = i % 4 == 3;
    j->spec = i % 3 == 2 ? 0 : 1 + (int32_t)rnd(6); /* greedy and sampled ones; 6 > the block */
    if (j->spec) { /* alone with speculation: tokens, logprobs and finish bit-equal */
      run_alone(j, j->spec);
      job plain = *j;
      run_alone(&plain, 0);
      if (j->n_want != plain.n_want || memcmp(j->want, plain.want, sizeof j->want) ||
          memcmp(j->lp_want, plain.lp_want, (size_t)j->n_want * sizeof(float)) ||
          j->want_finish != plain.want_finish)
        fail_msg("request %d (speculative %d) alone: tokens or logprobs differ from plain", i,
                 (int)j->spec);
    } else {
      run_alone(j, 0);
    }
    j->n_got = j->got_finish = 0;
  }
  dsv4_scheduler *s = make_sched(16);
  int done = 0;
  for (int step = 0; done < N && step < 10000; step++) {
    for (int i = 0; i < N; i++) {
      job *j = &jobs[i];
      if (j->arrive == step) {
        dsv4_request_params p = j->p;
        if (!j->poll) p.on_token = on_tok, p.user_data = j;
        p.speculative = j->spec;
        j->n_got = j->got_finish = 0;
        assert_int_equal(dsv4_scheduler_submit(s, j->prompt, j->n_prompt, &p, &j->id), DSV4_OK);
        j->live = 1;
      }
      if (j->live && j->cancel_at == step && !j->got_finish) {
        assert_int_equal(dsv4_scheduler_cancel(s, j->id), DSV4_OK);
        assert_int_equal(dsv4_scheduler_cancel(s, j->id), DSV4_ERR_UNKNOWN_SEQUENCE);
        j->live = 0;
        j->got_finish = -1;
      }
    }
    int32_t active = 0;
    assert_int_equal(dsv4_scheduler_step(s, &active), DSV4_OK);
    dsv4_engine_info ei;
    assert_int_equal(dsv4_engine_get_info(eng, &ei, sizeof ei), DSV4_OK);
    assert_true(ei.sequences_live <= MAX_SEQS);
    done = 0;
    for (int i = 0; i < N; i++) {
      job *j = &jobs[i];
      if (j->live && j->poll) drain_poll(s, j);
      if (j->live && !j->poll && j->got_finish) j->live = 0;
      done += j->got_finish != 0;
    }
  }
  assert_int_equal(done, N);
  int cancelled = 0;
  for (int i = 0; i < N; i++) {
    job *j = &jobs[i];
    if (j->got_finish < 0) { /* cancelled: what came before is a prefix */
      cancelled++;
      assert_true(j->n_got <= j->n_want);
      assert_memory_equal(j->got, j->want, (size_t)j->n_got * sizeof(int32_t));
      continue;
    }
    if (j->n_got != j->n_want || memcmp(j->got, j->want, (size_t)j->n_got * sizeof(int32_t)))
      fail_msg("request %d: %d tokens differ from its %d tokens alone", i, j->n_got, j->n_want);
    assert_int_equal(j->got_finish, j->want_finish);
    /* every row of a step equals its call alone: the logits, so the logprobs, bit for bit */
    for (int32_t k = 0; !j->poll && k < j->n_got; k++)
      if (memcmp(&j->lp_got[k], &j->lp_want[k], sizeof(float)))
        fail_msg("request %d token %d: logprob %.9g, alone %.9g", i, (int)k, (double)j->lp_got[k],
                 (double)j->lp_want[k]);
  }
  assert_true(cancelled > 0);
  dsv4_scheduler_stats st;
  assert_int_equal(dsv4_scheduler_get_stats(s, &st, sizeof st), DSV4_OK);
  printf("  speculative: %lld drafts verified, %lld accepted, %lld fallbacks\n",
         (long long)st.spec_drafted, (long long)st.spec_accepted, (long long)st.spec_fallbacks);
  assert_true(st.spec_drafted > 0 && st.spec_accepted > 0);
  assert_int_equal(st.submitted, N);
  assert_int_equal(st.cancelled + st.finished, N);
  assert_true(st.max_step_tokens <= 16 + MAX_SEQS);
  dsv4_scheduler_free(s);
  dsv4_engine_info ei;
  assert_int_equal(dsv4_engine_get_info(eng, &ei, sizeof ei), DSV4_OK);
  assert_int_equal(ei.sequences_live, 0);
  free(jobs);
}

/* A long prompt admitted while another request decodes: the decoding request
 * gets one token every step, and no step runs more than the budget. */
static void test_fairness(void **state) {
  (void)state;
  static job a, b;
  memset(&a, 0, sizeof a);
  memset(&b, 0, sizeof b);
  dsv4_scheduler *s = make_sched(16);
  a.n_prompt = 5;
  for (int k = 0; k < 5; k++) a.prompt[k] = 10 + k;
  assert_int_equal(dsv4_request_params_init(&a.p, sizeof a.p), DSV4_OK);
  a.p.max_tokens = 60;
  a.p.flags = DSV4_REQUEST_F_IGNORE_EOS;
  a.p.on_token = on_tok;
  a.p.user_data = &a;
  assert_int_equal(dsv4_scheduler_submit(s, a.prompt, a.n_prompt, &a.p, &a.id), DSV4_OK);
  assert_int_equal(dsv4_scheduler_step(s, NULL), DSV4_OK); /* a: prefill + first token */
  assert_int_equal(a.n_got, 1);
  b.n_prompt = 200;
  for (int k = 0; k < 200; k++) b.prompt[k] = 3 + (k * 7) % (vocab - 3);
  b.p = a.p;
  b.p.max_tokens = 3;
  b.p.user_data = &b;
  assert_int_equal(dsv4_scheduler_submit(s, b.prompt, b.n_prompt, &b.p, &b.id), DSV4_OK);
  int steps = 0;
  while (b.n_got == 0) { /* b's 200 prompt tokens take 13 chunks of 16 */
    const int32_t before = a.n_got;
    assert_int_equal(dsv4_scheduler_step(s, NULL), DSV4_OK);
    assert_int_equal(a.n_got, before + 1);
    steps++;
  }
  assert_int_equal(steps, 13);
  dsv4_scheduler_stats st;
  assert_int_equal(dsv4_scheduler_get_stats(s, &st, sizeof st), DSV4_OK);
  assert_int_equal(st.max_step_tokens, 1 + 16);
  dsv4_scheduler_free(s);
}

/* More requests than sequences: they wait, run as sequences free up, all finish. */
/* A step is one engine batch: the decode of a running request and the chunks of
 * two waiting prompts (the engine counts one call with generated tokens and one
 * with prompt tokens, and no prefill-only time). */
static void test_one_engine_step(void **state) {
  (void)state;
  dsv4_scheduler_params sp;
  assert_int_equal(dsv4_scheduler_params_init(&sp, sizeof sp), DSV4_OK);
  sp.prefill_chunk = 16;
  sp.token_budget = 64;
  dsv4_scheduler *s = NULL;
  assert_int_equal(dsv4_scheduler_create(eng, tok, &sp, &s), DSV4_OK);
  dsv4_request_params p;
  assert_int_equal(dsv4_request_params_init(&p, sizeof p), DSV4_OK);
  p.max_tokens = 8;
  p.flags = DSV4_REQUEST_F_IGNORE_EOS;
  int32_t prompt[30];
  for (int i = 0; i < 30; i++) prompt[i] = 3 + i * 7;
  int64_t a, b, c;
  int32_t active = 0;
  assert_int_equal(dsv4_scheduler_submit(s, prompt, 5, &p, &a), DSV4_OK);
  assert_int_equal(dsv4_scheduler_step(s, &active), DSV4_OK); /* a runs */
  dsv4_scheduler_stats st0, st1;
  assert_int_equal(dsv4_scheduler_get_stats(s, &st0, sizeof st0), DSV4_OK);
  assert_int_equal(st0.running, 1);
  assert_int_equal(dsv4_scheduler_submit(s, prompt, 30, &p, &b), DSV4_OK);
  assert_int_equal(dsv4_scheduler_submit(s, prompt + 3, 10, &p, &c), DSV4_OK);
  dsv4_engine_reset_timings(eng);
  assert_int_equal(dsv4_scheduler_step(s, &active), DSV4_OK);
  dsv4_engine_timings t;
  assert_int_equal(dsv4_engine_get_timings(eng, &t, sizeof t), DSV4_OK);
  assert_int_equal(dsv4_scheduler_get_stats(s, &st1, sizeof st1), DSV4_OK);
  assert_int_equal(st1.decode_tokens - st0.decode_tokens, 1);
  assert_int_equal(st1.prefill_tokens - st0.prefill_tokens, 16 + 10);
  assert_int_equal(st1.running, 2); /* a and c; b has a chunk left */
  assert_int_equal(t.decode_steps, 1);
  assert_int_equal(t.decode_tokens, 1);
  assert_int_equal(t.prefill_calls, 1); /* both prompts in the same engine step */
  assert_int_equal(t.prefill_tokens, 26);
  assert_int_equal(t.prefill_ns, 0);    /* ... which was the decode's step */
  while (active) assert_int_equal(dsv4_scheduler_step(s, &active), DSV4_OK);
  dsv4_scheduler_free(s);
}

static void test_admission(void **state) {
  (void)state;
  dsv4_scheduler_params sp;
  assert_int_equal(dsv4_scheduler_params_init(&sp, sizeof sp), DSV4_OK);
  sp.max_running = 2;
  sp.max_waiting = 6;
  dsv4_scheduler *s = NULL;
  assert_int_equal(dsv4_scheduler_create(eng, tok, &sp, &s), DSV4_OK);
  int32_t prompt[3] = {5, 6, 7};
  dsv4_request_params p;
  assert_int_equal(dsv4_request_params_init(&p, sizeof p), DSV4_OK);
  p.max_tokens = 4;
  p.flags = DSV4_REQUEST_F_IGNORE_EOS;
  int64_t ids[7];
  for (int i = 0; i < 6; i++) assert_int_equal(dsv4_scheduler_submit(s, prompt, 3, &p, &ids[i]), DSV4_OK);
  assert_int_equal(dsv4_scheduler_submit(s, prompt, 3, &p, &ids[6]), DSV4_KV_FULL);
  int32_t big[600];
  for (int i = 0; i < 600; i++) big[i] = 5;
  int64_t bid;
  assert_int_equal(dsv4_scheduler_submit(s, big, 512, &p, &bid), DSV4_ERR_CONTEXT_OVERFLOW);
  int finished = 0;
  for (int step = 0; step < 100 && finished < 6; step++) {
    assert_int_equal(dsv4_scheduler_step(s, NULL), DSV4_OK);
    dsv4_scheduler_stats st;
    assert_int_equal(dsv4_scheduler_get_stats(s, &st, sizeof st), DSV4_OK);
    dsv4_engine_info ei;
    assert_int_equal(dsv4_engine_get_info(eng, &ei, sizeof ei), DSV4_OK);
    assert_true(ei.sequences_live <= 2);
    assert_true(st.running <= 2);
    for (int i = 0; i < 6; i++) {
      if (!ids[i]) continue;
      int32_t t[8], n, fin;
      assert_int_equal(dsv4_scheduler_poll(s, ids[i], t, 8, &n, &fin), DSV4_OK);
      if (fin) {
        assert_int_equal(fin, DSV4_FINISH_LENGTH);
        ids[i] = 0;
        finished++;
      }
    }
  }
  assert_int_equal(finished, 6);
  dsv4_scheduler_free(s);
}

typedef struct textacc {
  char text[4096];
  size_t n;
  int32_t toks[64], n_tok, finish;
} textacc;

static void on_text(int64_t request, const dsv4_token_event *ev, void *user) {
  (void)request;
  textacc *t = user;
  assert_non_null(ev->text);
  assert_true(t->n + ev->text_len < sizeof t->text);
  memcpy(t->text + t->n, ev->text, ev->text_len);
  t->n += ev->text_len;
  t->text[t->n] = 0;
  t->toks[t->n_tok++] = ev->token;
  t->finish = ev->finish;
  assert_true(ev->logprob <= 0.0f);
  for (int32_t k = 1; k < ev->n_top; k++) assert_true(ev->top_logprobs[k] <= ev->top_logprobs[k - 1]);
}

static void run_text(dsv4_request_params *p, textacc *t) {
  memset(t, 0, sizeof *t);
  dsv4_scheduler *s = make_sched(16);
  const char *prompt_text = "Every evening the old lamplighter";
  int32_t ids[64];
  size_t n = 0;
  assert_int_equal(dsv4_tokenizer_encode(tok, prompt_text, strlen(prompt_text), ids, 64, &n), DSV4_OK);
  p->on_token = on_text;
  p->user_data = t;
  int64_t id;
  assert_int_equal(dsv4_scheduler_submit(s, ids, (int64_t)n, p, &id), DSV4_OK);
  int32_t active = 1;
  while (active) assert_int_equal(dsv4_scheduler_step(s, &active), DSV4_OK);
  dsv4_scheduler_free(s);
}

/* Stop ids end at the id; stop strings across token boundaries cut the text. */
static void test_stops(void **state) {
  (void)state;
  dsv4_request_params p;
  assert_int_equal(dsv4_request_params_init(&p, sizeof p), DSV4_OK);
  p.max_tokens = 24;
  p.n_logprobs = 3;
  p.flags = DSV4_REQUEST_F_IGNORE_EOS;
  textacc full, cut;
  run_text(&p, &full);
  assert_int_equal(full.n_tok, 24);
  assert_int_equal(full.finish, DSV4_FINISH_LENGTH);
  assert_true(full.n > 12);
  /* stop id: the 5th token */
  p.n_stop_ids = 1;
  p.stop_ids = &full.toks[4];
  run_text(&p, &cut);
  int first = 0;
  while (full.toks[first] != full.toks[4]) first++;
  assert_int_equal(cut.n_tok, first + 1);
  assert_int_equal(cut.finish, DSV4_FINISH_STOP);
  p.n_stop_ids = 0;
  /* stop string: 4 bytes from the middle of the text (spans a token boundary or not) */
  char stop[8];
  const size_t at = full.n / 2;
  memcpy(stop, full.text + at, 4);
  stop[4] = 0;
  const char *stops[2] = {"\x01never", stop};
  p.n_stop = 2;
  p.stop = stops;
  run_text(&p, &cut);
  const char *m = strstr(full.text, stop);
  assert_non_null(m);
  assert_int_equal(cut.n, (size_t)(m - full.text));
  assert_memory_equal(cut.text, full.text, cut.n);
  assert_int_equal(cut.finish, DSV4_FINISH_STOP);
  assert_true(cut.n_tok <= full.n_tok);
  assert_memory_equal(cut.toks, full.toks, (size_t)cut.n_tok * sizeof(int32_t));
}

static void test_bad_input(void **state) {
  (void)state;
  dsv4_scheduler *s = make_sched(16);
  dsv4_request_params p;
  assert_int_equal(dsv4_request_params_init(&p, sizeof p), DSV4_OK);
  int32_t pr[2] = {5, 6};
  int64_t id = 0;
  assert_int_equal(dsv4_scheduler_submit(s, pr, 0, &p, &id), DSV4_ERR_INVALID_ARG);
  pr[1] = vocab;
  assert_int_equal(dsv4_scheduler_submit(s, pr, 2, &p, &id), DSV4_ERR_INVALID_TOKEN);
  pr[1] = 6;
  struct { float *f; float v; } bad[] = {{&p.top_p, 0.0f}, {&p.top_p, 1.5f}, {&p.min_p, -0.1f},
                                         {&p.repetition_penalty, 0.0f}, {&p.temperature, 0.0f / 0.0f}};
  for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
    dsv4_request_params q = p;
    *(float *)((char *)&q + ((char *)bad[i].f - (char *)&p)) = bad[i].v;
    assert_int_equal(dsv4_scheduler_submit(s, pr, 2, &q, &id), DSV4_ERR_INVALID_ARG);
    assert_true(strlen(dsv4_last_error()) > 0);
  }
  dsv4_request_params q = p;
  q.max_tokens = 0;
  assert_int_equal(dsv4_scheduler_submit(s, pr, 2, &q, &id), DSV4_ERR_INVALID_ARG);
  q = p;
  q.n_logprobs = 21;
  assert_int_equal(dsv4_scheduler_submit(s, pr, 2, &q, &id), DSV4_ERR_INVALID_ARG);
  q = p;
  int32_t bias_id = vocab;
  float bias = 1.0f;
  q.n_logit_bias = 1;
  q.logit_bias_ids = &bias_id;
  q.logit_bias = &bias;
  assert_int_equal(dsv4_scheduler_submit(s, pr, 2, &q, &id), DSV4_ERR_INVALID_ARG);
  q = p;
  q.struct_size = 8;
  assert_int_equal(dsv4_scheduler_submit(s, pr, 2, &q, &id), DSV4_ERR_PARAMS_SIZE);
  assert_int_equal(dsv4_scheduler_cancel(s, 12345), DSV4_ERR_UNKNOWN_SEQUENCE);
  int32_t n, fin;
  assert_int_equal(dsv4_scheduler_poll(s, 12345, NULL, 0, &n, &fin), DSV4_ERR_UNKNOWN_SEQUENCE);
  dsv4_scheduler_free(s);
  dsv4_scheduler_params sp;
  assert_int_equal(dsv4_scheduler_params_init(&sp, sizeof sp), DSV4_OK);
  sp.max_running = MAX_SEQS + 1;
  dsv4_scheduler *t = (dsv4_scheduler *)1;
  assert_int_equal(dsv4_scheduler_create(eng, tok, &sp, &t), DSV4_ERR_INVALID_ARG);
  assert_null(t);
  sp.max_running = 0;
  sp.token_budget = 10; /* below prefill_chunk + max_running */
  assert_int_equal(dsv4_scheduler_create(eng, tok, &sp, &t), DSV4_ERR_INVALID_ARG);
  /* stop strings without a tokenizer */
  assert_int_equal(dsv4_scheduler_params_init(&sp, sizeof sp), DSV4_OK);
  assert_int_equal(dsv4_scheduler_create(eng, NULL, &sp, &t), DSV4_OK);
  const char *stop = "x";
  q = p;
  q.n_stop = 1;
  q.stop = &stop;
  assert_int_equal(dsv4_scheduler_submit(t, pr, 2, &q, &id), DSV4_ERR_INVALID_ARG);
  dsv4_scheduler_free(t);
}

/* Run one greedy request to the end on s; its tokens into out[], returns their count. */
static int32_t run_one(dsv4_scheduler *s, const int32_t *prompt, int32_t n, int32_t max_tokens,
                       int32_t *out) {
  static job j;
  memset(&j, 0, sizeof j);
  dsv4_request_params p;
  assert_int_equal(dsv4_request_params_init(&p, sizeof p), DSV4_OK);
  p.max_tokens = max_tokens;
  p.flags = DSV4_REQUEST_F_IGNORE_EOS;
  p.on_token = on_tok;
  p.user_data = &j;
  assert_int_equal(dsv4_scheduler_submit(s, prompt, n, &p, &j.id), DSV4_OK);
  int32_t active = 1;
  while (active) assert_int_equal(dsv4_scheduler_step(s, &active), DSV4_OK);
  memcpy(out, j.got, (size_t)j.n_got * sizeof *out);
  return j.n_got;
}

/* A follow-up turn reuses the finished request's sequence: only the new
 * tokens are prefilled; hits, misses and evictions are counted. */
static void test_prefix_reuse(void **state) {
  (void)state;
  dsv4_scheduler_params sp;
  assert_int_equal(dsv4_scheduler_params_init(&sp, sizeof sp), DSV4_OK);
  sp.prefill_chunk = 16;
  sp.prefix_cache = 1;
  dsv4_scheduler *s = NULL;
  assert_int_equal(dsv4_scheduler_create(eng, tok, &sp, &s), DSV4_OK);
  int32_t a[30], out_a[8], b[60], out_b[8], out_b0[8], c[10], out_c[8];
  for (int i = 0; i < 30; i++) a[i] = 3 + (i * 11) % (vocab - 3);
  assert_int_equal(run_one(s, a, 30, 8, out_a), 8);
  /* the next turn: the first turn, its answer, new tokens */
  memcpy(b, a, sizeof a);
  memcpy(b + 30, out_a, sizeof out_a);
  for (int i = 38; i < 45; i++) b[i] = 3 + (i * 5) % (vocab - 3);
  dsv4_scheduler_stats st0, st;
  assert_int_equal(dsv4_scheduler_get_stats(s, &st0, sizeof st0), DSV4_OK);
  assert_int_equal(st0.prefix_entries, 1);
  assert_int_equal(st0.prefix_misses, 1);
  assert_int_equal(run_one(s, b, 45, 8, out_b), 8);
  assert_int_equal(dsv4_scheduler_get_stats(s, &st, sizeof st), DSV4_OK);
  assert_int_equal(st.prefix_hits, 1);
  assert_int_equal(st.prefix_tokens_reused, 37); /* a + the 7 answer tokens that were fed */
  assert_int_equal(st.prefill_tokens - st0.prefill_tokens, 45 - 37);
  /* an unrelated prompt misses; with room for one entry the older one is evicted */
  for (int i = 0; i < 10; i++) c[i] = 4 + i;
  run_one(s, c, 10, 4, out_c);
  assert_int_equal(dsv4_scheduler_get_stats(s, &st, sizeof st), DSV4_OK);
  assert_int_equal(st.prefix_misses, 2);
  assert_int_equal(st.prefix_evictions, 2); /* a's entry (by b's), then b's (by c's) */
  assert_int_equal(st.prefix_entries, 1);
  dsv4_scheduler_free(s);
  /* the same turn without the cache: the same tokens */
  dsv4_scheduler *t = make_sched(16);
  assert_int_equal(run_one(t, b, 45, 8, out_b0), 8);
  assert_int_equal(dsv4_scheduler_get_stats(t, &st, sizeof st), DSV4_OK);
  assert_int_equal(st.prefix_hits + st.prefix_misses, 0);
  dsv4_scheduler_free(t);
  assert_memory_equal(out_b, out_b0, sizeof out_b);
  dsv4_engine_info ei;
  assert_int_equal(dsv4_engine_get_info(eng, &ei, sizeof ei), DSV4_OK);
  assert_int_equal(ei.sequences_live, 0);
}

/* Thousands of requests, cancelled at every stage or finished: nothing stays
 * behind (ASan's leak check sees the rest). */
static void test_churn(void **state) {
  (void)state;
  dsv4_scheduler_params sp;
  assert_int_equal(dsv4_scheduler_params_init(&sp, sizeof sp), DSV4_OK);
  sp.prefill_chunk = 8;
  sp.prefix_cache = 2; /* kept sequences are freed with the scheduler too */
  dsv4_scheduler *s = NULL;
  assert_int_equal(dsv4_scheduler_create(eng, tok, &sp, &s), DSV4_OK);
  dsv4_request_params p;
  assert_int_equal(dsv4_request_params_init(&p, sizeof p), DSV4_OK);
  p.max_tokens = 2;
  p.temperature = 0.5f;
  p.top_k = 5;
  p.n_logprobs = 2;
  int64_t live[64];
  int n_live = 0;
  for (int i = 0; i < 2000; i++) {
    int32_t pr[12];
    const int32_t n = 1 + (int32_t)rnd(12);
    for (int32_t k = 0; k < n; k++) pr[k] = 3 + (int32_t)rnd(50);
    p.seed = (uint64_t)i;
    int64_t id;
    assert_int_equal(dsv4_scheduler_submit(s, pr, n, &p, &id), DSV4_OK);
    live[n_live++] = id;
    if (rnd(3) == 0) assert_int_equal(dsv4_scheduler_step(s, NULL), DSV4_OK);
    while (n_live > 0 && (rnd(2) == 0 || n_live == 64)) { /* cancel or collect one */
      const int k = (int)rnd((uint32_t)n_live);
      int32_t t[4], got, fin;
      if (rnd(2) || n_live == 64) {
        assert_int_equal(dsv4_scheduler_cancel(s, live[k]), DSV4_OK);
      } else {
        assert_int_equal(dsv4_scheduler_poll(s, live[k], t, 4, &got, &fin), DSV4_OK);
        if (!fin) break;
      }
      live[k] = live[--n_live];
    }
  }
  dsv4_scheduler_free(s); /* frees what is still queued or running */
  dsv4_engine_info ei;
  assert_int_equal(dsv4_engine_get_info(eng, &ei, sizeof ei), DSV4_OK);
  assert_int_equal(ei.sequences_live, 0);
  assert_int_equal(ei.kv_pages_used, 0);
}

int tu_run_suite(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_same_as_alone),
      cmocka_unit_test(test_fairness),
      cmocka_unit_test(test_one_engine_step),
      cmocka_unit_test(test_admission),
      cmocka_unit_test(test_stops),
      cmocka_unit_test(test_bad_input),
      cmocka_unit_test(test_prefix_reuse),
      cmocka_unit_test(test_churn),
  };
  return cmocka_run_group_tests(tests, setup, teardown);
}
