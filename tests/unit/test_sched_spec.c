/*
 * Speculative requests in the scheduler (lib/serve/sched.c), on the default
 * tiny model (it has DSpark stages):
 *
 * distribution  sampled requests with every transform on (temperature, top-k,
 *               top-p, min-p, repetition / presence / frequency penalties,
 *               logit bias), each speculative: its second token is the first
 *               one a verify row decides (one draft each, checked through the
 *               scheduler's counters). Its histogram over the trials follows the
 *               processed target law: the mixture over the first token x1 of
 *               the processed distribution after [prompt, x1] (the library's
 *               sampler on the engine's logits). Chi-square as in
 *               tests/unit/test_spec.c (bound at p = 1e-6, fixed seeds). Power
 *               check: the same histogram fails against the law without the
 *               transforms at the verified position (softmax(logits / T)).
 * failed_step   a block fault injected into the step whose batch carries a
 *               verify row (every block call of that step in turn) next to
 *               another request's decode row and a prompt chunk: the step runs
 *               again without drafts and returns DSV4_OK; every request's tokens
 *               equal its tokens alone; no sequence is left behind.
 *
 * Internal test: it reads the processed law from lib/serve/sampler.h and
 * injects the fault through the CPU backend's test hook.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "test_util.h"

#include "cpu/cpu_test_hooks.h"
#include "dsv4/dsv4.h"
#include "engine/engine.h"
#include "serve/sampler.h"

static dsv4_engine *eng;
static int32_t V;

static int setup(void **state) {
  (void)state;
  char *dir = tu_join(getenv("DSV4_BUILD_ROOT"), "models/dsv4-tiny");
  dsv4_engine_params p;
  assert_int_equal(dsv4_engine_params_init(&p, sizeof p), DSV4_OK);
  p.max_sequences = 4;
  p.max_context = 256;
  p.n_threads = 1;
  dsv4_status s = dsv4_engine_create_from_dir(dir, &p, &eng);
  if (s) fprintf(stderr, "%s: %s\n", dir, dsv4_last_error());
  free(dir);
  if (s) return -1;
  V = eng->vocab;
  return eng->spec ? 0 : -1; /* the default model has DSpark stages */
}

static int teardown(void **state) {
  (void)state;
  dsv4_engine_free(eng);
  return 0;
}

static dsv4_scheduler *make_sched(int32_t max_running) {
  dsv4_scheduler_params sp;
  assert_int_equal(dsv4_scheduler_params_init(&sp, sizeof sp), DSV4_OK);
  sp.prefill_chunk = 16;
  sp.max_running = max_running;
  dsv4_scheduler *s = NULL;
  assert_int_equal(dsv4_scheduler_create(eng, NULL, &sp, &s), DSV4_OK);
  return s;
}

typedef struct out {
  int32_t tok[32], n, finish;
} out;

static void on_tok(int64_t request, const dsv4_token_event *ev, void *user) {
  (void)request;
  out *o = user;
  assert_true(o->n < 32 && !o->finish);
  o->tok[o->n++] = ev->token;
  o->finish = ev->finish;
}

static void run_all(dsv4_scheduler *s) {
  int32_t active = 1;
  for (int i = 0; active && i < 100000; i++) assert_int_equal(dsv4_scheduler_step(s, &active), DSV4_OK);
  assert_int_equal(active, 0);
}

static void assert_no_sequences(void) {
  dsv4_engine_info ei;
  assert_int_equal(dsv4_engine_get_info(eng, &ei, sizeof ei), DSV4_OK);
  assert_int_equal(ei.sequences_live, 0);
}

/* ---- distribution ------------------------------------------------------- */

#define N_TRIALS 600
#define DIST_T 3.0f

static const int32_t prompt[] = {11, 250, 37, 400, 12, 99};
#define N_PROMPT ((int64_t)(sizeof prompt / sizeof *prompt))
static const int32_t bias_ids[] = {37, 5, 600};
static const float bias[] = {2.0f, 3.0f, -1.5f};

static void set_transforms(dsv4_request_params *p) {
  p->temperature = DIST_T;
  p->top_k = 30;
  p->top_p = 0.95f;
  p->min_p = 0.02f;
  p->repetition_penalty = 1.3f;
  p->presence_penalty = 0.4f;
  p->frequency_penalty = 0.3f;
  p->n_logit_bias = 3;
  p->logit_bias_ids = bias_ids;
  p->logit_bias = bias;
}

static dsv4i_sampler_cfg cfg_of(const dsv4_request_params *p) {
  dsv4i_sampler_cfg c = {p->temperature, p->top_k, p->top_p, p->min_p, p->repetition_penalty,
                         p->presence_penalty, p->frequency_penalty, p->seed, p->n_logit_bias,
                         p->logit_bias_ids, p->logit_bias};
  return c;
}

/* Processed law of the token after the prompt and `outs` ([n_out] output tokens), from
 * logits l, into p. */
static void processed(const dsv4i_sampler_cfg *c, const int32_t *outs, int n_out, const float *l,
                      double *p) {
  dsv4i_sampler s;
  assert_int_equal(dsv4i_sampler_init(&s, c, V), DSV4_OK);
  dsv4i_sampler_prompt(&s, prompt, N_PROMPT);
  for (int i = 0; i < n_out; i++) dsv4i_sampler_output(&s, outs[i]);
  dsv4i_sampler_dist(&s, l);
  memcpy(p, s.p, sizeof *p * (size_t)V);
  dsv4i_sampler_free(&s);
}

static void test_distribution(void **state) {
  (void)state;
  dsv4_request_params rp;
  assert_int_equal(dsv4_request_params_init(&rp, sizeof rp), DSV4_OK);
  set_transforms(&rp);
  const dsv4i_sampler_cfg c = cfg_of(&rp);
  /* the exact laws, from plain prefill / decode logits */
  float *l1 = malloc(sizeof *l1 * (size_t)V), *l2 = malloc(sizeof *l2 * (size_t)V);
  double *p1 = malloc(sizeof *p1 * (size_t)V), *p2 = malloc(sizeof *p2 * (size_t)V);
  double *law = calloc((size_t)V, sizeof *law), *raw = calloc((size_t)V, sizeof *raw);
  int64_t root, child;
  assert_int_equal(dsv4_engine_seq_create(eng, &root), DSV4_OK);
  assert_int_equal(dsv4_engine_prefill(eng, root, prompt, N_PROMPT, NULL, l1, NULL), DSV4_OK);
  processed(&c, NULL, 0, l1, p1);
  int support = 0;
  for (int32_t x1 = 0; x1 < V; x1++) {
    if (!(p1[x1] > 0.0)) continue;
    support++;
    assert_int_equal(dsv4_engine_seq_fork(eng, root, &child), DSV4_OK);
    assert_int_equal(dsv4_engine_decode(eng, 1, &child, &x1, NULL, l2, NULL), DSV4_OK);
    assert_int_equal(dsv4_engine_seq_free(eng, child), DSV4_OK);
    processed(&c, &x1, 1, l2, p2);
    double mx = -INFINITY, z = 0.0;
    for (int32_t v = 0; v < V; v++) mx = l2[v] > mx ? l2[v] : mx;
    for (int32_t v = 0; v < V; v++) z += exp(((double)l2[v] - mx) / DIST_T);
    for (int32_t v = 0; v < V; v++) {
      law[v] += p1[x1] * p2[v];
      raw[v] += p1[x1] * exp(((double)l2[v] - mx) / DIST_T) / z;
    }
  }
  assert_int_equal(dsv4_engine_seq_free(eng, root), DSV4_OK);
  assert_true(support >= 2);
  /* the trials: two requests at a time, so each one's verify row has the logits rows it
   * needs (max_sequences 4); max_tokens 3 gives every request exactly one draft */
  dsv4_scheduler *s = make_sched(2);
  out *o = calloc(N_TRIALS, sizeof *o);
  int64_t id;
  for (int t = 0; t < N_TRIALS; t++) {
    dsv4_request_params p = rp;
    p.seed = 1000003u * (uint64_t)t + 17u;
    p.max_tokens = 3;
    p.flags = DSV4_REQUEST_F_IGNORE_EOS;
    p.speculative = 4;
    p.on_token = on_tok;
    p.user_data = &o[t];
    assert_int_equal(dsv4_scheduler_submit(s, prompt, N_PROMPT, &p, &id), DSV4_OK);
  }
  run_all(s);
  dsv4_scheduler_stats st;
  assert_int_equal(dsv4_scheduler_get_stats(s, &st, sizeof st), DSV4_OK);
  dsv4_scheduler_free(s);
  assert_no_sequences();
  assert_int_equal(st.spec_drafted, N_TRIALS);
  assert_int_equal(st.spec_fallbacks, 0);
  int64_t *cnt = calloc((size_t)V, sizeof *cnt);
  for (int t = 0; t < N_TRIALS; t++) {
    assert_int_equal(o[t].n, 3);
    assert_int_equal(o[t].finish, DSV4_FINISH_LENGTH);
    assert_true(p1[o[t].tok[0]] > 0.0);
    cnt[o[t].tok[1]]++;
  }
  int df, dfr;
  const double x2 = tu_chi2(cnt, law, V, N_TRIALS, &df), xr = tu_chi2(cnt, raw, V, N_TRIALS, &dfr);
  printf("  %d trials, %lld drafts accepted; x2 against the processed law: chi2 %.1f (df %d, bound "
         "%.1f); power: against softmax(logits / T) chi2 %.1f (bound %.1f)\n", N_TRIALS,
         (long long)st.spec_accepted, x2, df, tu_chi2_bound(df), xr, tu_chi2_bound(dfr));
  assert_true(df >= 5);
  assert_true(st.spec_accepted > 0 && st.spec_accepted < N_TRIALS);
  assert_true(x2 <= tu_chi2_bound(df));
  assert_true(xr > tu_chi2_bound(dfr));
  free(cnt);
  free(o);
  free(l1), free(l2), free(p1), free(p2), free(law), free(raw);
}

/* ---- failed step -------------------------------------------------------- */

typedef struct job {
  int32_t prompt[24], n_prompt;
  dsv4_request_params p;
  out want, got;
} job;

static void init_jobs(job *j) {
  for (int i = 0; i < 3; i++) {
    assert_int_equal(dsv4_request_params_init(&j[i].p, sizeof j[i].p), DSV4_OK);
    j[i].p.max_tokens = 12;
    j[i].p.flags = DSV4_REQUEST_F_IGNORE_EOS;
    j[i].p.on_token = on_tok;
    j[i].n_prompt = i == 2 ? 20 : 5;
    for (int32_t k = 0; k < j[i].n_prompt; k++) j[i].prompt[k] = 7 + 31 * i + 13 * k;
  }
  j[0].p.speculative = 4; /* greedy */
  j[1].p.speculative = 3; /* sampled */
  j[1].p.temperature = 0.9f;
  j[1].p.top_k = 20;
  j[1].p.seed = 5;
}

static void submit(dsv4_scheduler *s, job *j, int spec) {
  dsv4_request_params p = j->p;
  if (!spec) p.speculative = 0;
  p.user_data = &j->got;
  memset(&j->got, 0, sizeof j->got);
  int64_t id;
  assert_int_equal(dsv4_scheduler_submit(s, j->prompt, j->n_prompt, &p, &id), DSV4_OK);
}

static void test_failed_step(void **state) {
  (void)state;
  job j[3];
  init_jobs(j);
  for (int i = 0; i < 3; i++) { /* alone, without speculation */
    dsv4_scheduler *s = make_sched(0);
    submit(s, &j[i], 0);
    run_all(s);
    dsv4_scheduler_free(s);
    j[i].want = j[i].got;
    assert_int_equal(j[i].want.n, 12);
  }
  const int32_t n_blocks = eng->cfg->n_layers;
  for (int32_t f = 1; f <= n_blocks; f++) {
    dsv4_scheduler *s = make_sched(0);
    submit(s, &j[0], 1);
    submit(s, &j[1], 1);
    int32_t active = 0;
    assert_int_equal(dsv4_scheduler_step(s, &active), DSV4_OK); /* both prompts: first tokens */
    submit(s, &j[2], 1); /* its first chunk joins the next step */
    dsv4_scheduler_stats st;
    assert_int_equal(dsv4_scheduler_get_stats(s, &st, sizeof st), DSV4_OK);
    const int64_t drafted = st.spec_drafted;
    dsv4i_cpu_backend_inject_fault(eng->be, f, DSV4_ERR_OUT_OF_MEMORY);
    const dsv4_status rc = dsv4_scheduler_step(s, &active);
    dsv4i_cpu_backend_inject_fault(eng->be, 0, DSV4_OK);
    assert_int_equal(rc, DSV4_OK);
    assert_int_equal(dsv4_scheduler_get_stats(s, &st, sizeof st), DSV4_OK);
    assert_int_equal(st.spec_fallbacks, 1);
    assert_int_equal(st.spec_drafted, drafted); /* the step ran without its drafts */
    run_all(s);
    assert_int_equal(dsv4_scheduler_get_stats(s, &st, sizeof st), DSV4_OK);
    assert_true(st.spec_drafted > drafted); /* later steps speculate again */
    dsv4_scheduler_free(s);
    for (int i = 0; i < 3; i++) {
      if (j[i].got.n != j[i].want.n || memcmp(j[i].got.tok, j[i].want.tok, sizeof j[i].got.tok))
        fail_msg("fault at block %d: request %d: tokens differ from alone", (int)f, i);
      assert_int_equal(j[i].got.finish, j[i].want.finish);
    }
  }
  assert_no_sequences();
}

int tu_run_suite(void) {
  const struct CMUnitTest t[] = {
      cmocka_unit_test(test_distribution),
      cmocka_unit_test(test_failed_step),
  };
  return cmocka_run_group_tests(t, setup, teardown);
}
