/*
 * Threads (the job the thread-sanitizer build runs, .ci/steps/60-tsan.sh):
 * several engines created from one shared model and driven from several
 * threads at once, one engine handed from thread to thread (handle-exclusive:
 * one thread at a time, may migrate), tokenizers loaded and used per thread,
 * and dsv4_last_error() kept per thread. Every thread's tokens must equal a
 * single-threaded run's. Each engine uses 2 worker threads (OpenMP).
 */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "dsv4/dsv4.h"
#include "test_util.h"

#define FIX "tiny-v41-e2e-a"
#define STEPS 6
#define NTHREADS 3

static dsv4_model *g_model;
static int32_t g_ref[STEPS + 1];

static dsv4_engine *new_engine(void) {
  dsv4_engine_params ep;
  if (dsv4_engine_params_init(&ep, sizeof ep)) return NULL;
  ep.max_sequences = 2;
  ep.max_context = 96;
  ep.n_threads = 2;
  dsv4_engine *e = NULL;
  return dsv4_engine_create(g_model, &ep, &e) == DSV4_OK ? e : NULL;
}

static const int32_t k_prompt[] = {0, 17, 42, 99, 5, 300, 7, 12, 64, 3, 211, 9};

/* prefill + STEPS greedy decode steps on a fresh sequence; 0 on success */
static int run(dsv4_engine *e, int32_t *out, int from, int to, int64_t *id) {
  if (from == 0) {
    if (dsv4_engine_seq_create(e, id)) return 1;
    if (dsv4_engine_prefill(e, *id, k_prompt, 12, NULL, NULL, &out[0])) return 1;
    from = 1;
  }
  for (int i = from; i < to; i++)
    if (dsv4_engine_decode(e, 1, id, &out[i - 1], NULL, NULL, &out[i])) return 1;
  return 0;
}

static void *engine_thread(void *arg) {
  int32_t *out = arg;
  dsv4_engine *e = new_engine();
  int64_t id;
  int bad = !e || run(e, out, 0, STEPS + 1, &id);
  /* a failed call on this thread: its own message, whatever the others do */
  if (!bad && dsv4_engine_seq_free(e, id + 1000) != DSV4_ERR_UNKNOWN_SEQUENCE) bad = 1;
  dsv4_engine_free(e);
  dsv4_tokenizer *t = NULL;
  if (!bad && dsv4_tokenizer_load(tu_fixture(FIX), &t) == DSV4_OK) {
    int32_t ids[64];
    size_t n = 0;
    bad = dsv4_tokenizer_encode(t, "Every evening the old lamplighter", 33, ids, 64, &n) != DSV4_OK || n == 0;
    dsv4_tokenizer *none = NULL;
    if (dsv4_tokenizer_load("/nonexistent-dir", &none) != DSV4_ERR_NOT_FOUND ||
        !strstr(dsv4_last_error(), "/nonexistent-dir"))
      bad = 1;
    dsv4_tokenizer_free(t);
  }
  return bad ? (void *)1 : NULL;
}

static void engines_in_parallel(void **state) {
  (void)state;
  tu_fixture_or_skip(FIX);
  int32_t out[NTHREADS][STEPS + 1];
  pthread_t th[NTHREADS];
  for (int i = 0; i < NTHREADS; i++) assert_int_equal(pthread_create(&th[i], NULL, engine_thread, out[i]), 0);
  for (int i = 0; i < NTHREADS; i++) {
    void *r;
    assert_int_equal(pthread_join(th[i], &r), 0);
    assert_null(r);
    assert_memory_equal(out[i], g_ref, sizeof g_ref);
  }
}

/* One engine, a baton passed between threads: thread k runs its share of the
 * steps only while it holds the baton (mutex + condition variable). */
typedef struct baton {
  pthread_mutex_t mu;
  pthread_cond_t cv;
  int turn, failed;
  dsv4_engine *e;
  int64_t id;
  int32_t out[STEPS + 1];
} baton;

typedef struct hand {
  baton *b;
  int k;
} hand;

static void *handed_thread(void *arg) {
  hand *h = arg;
  baton *b = h->b;
  pthread_mutex_lock(&b->mu);
  while (b->turn != h->k) pthread_cond_wait(&b->cv, &b->mu);
  pthread_mutex_unlock(&b->mu);
  const int from = h->k == 0 ? 0 : 1 + 2 * h->k, to = h->k == NTHREADS - 1 ? STEPS + 1 : 3 + 2 * h->k;
  if (run(b->e, b->out, from, to, &b->id)) b->failed = 1;
  pthread_mutex_lock(&b->mu);
  b->turn++;
  pthread_cond_broadcast(&b->cv);
  pthread_mutex_unlock(&b->mu);
  return NULL;
}

static void engine_handed_between_threads(void **state) {
  (void)state;
  tu_fixture_or_skip(FIX);
  baton b;
  memset(&b, 0, sizeof b);
  pthread_mutex_init(&b.mu, NULL);
  pthread_cond_init(&b.cv, NULL);
  b.e = new_engine();
  assert_non_null(b.e);
  pthread_t th[NTHREADS];
  hand h[NTHREADS];
  for (int i = NTHREADS - 1; i >= 0; i--) { /* started in reverse: the baton orders them */
    h[i] = (hand){&b, i};
    assert_int_equal(pthread_create(&th[i], NULL, handed_thread, &h[i]), 0);
  }
  for (int i = 0; i < NTHREADS; i++) assert_int_equal(pthread_join(th[i], NULL), 0);
  assert_false(b.failed);
  assert_memory_equal(b.out, g_ref, sizeof g_ref);
  dsv4_engine_free(b.e);
  pthread_cond_destroy(&b.cv);
  pthread_mutex_destroy(&b.mu);
}

static int setup(void **state) {
  (void)state;
  const char *dir = tu_fixture(FIX);
  if (!dir) return 0; /* the tests skip */
  if (dsv4_model_load(dir, NULL, &g_model)) return -1;
  dsv4_engine *e = new_engine();
  int64_t id;
  if (!e || run(e, g_ref, 0, STEPS + 1, &id)) return -1;
  dsv4_engine_free(e);
  return 0;
}

static int teardown(void **state) {
  (void)state;
  dsv4_model_free(g_model);
  return 0;
}

int tu_run_suite(void) {
  const struct CMUnitTest tests[] = {
    cmocka_unit_test(engines_in_parallel),
    cmocka_unit_test(engine_handed_between_threads),
  };
  return cmocka_run_group_tests_name("threads", tests, setup, teardown);
}
