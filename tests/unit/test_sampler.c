/*
 * Sampling transforms (lib/serve/sampler.c): the processed distribution is
 * what each transform says (exact support and ratios), draws follow it
 * (chi-square over many positions), draws are pure functions of (seed,
 * position), and the speculative accept rule applied after the transforms
 * is lossless: drafts from any q end up distributed as the processed p.
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "serve/sampler.h"
#include "test_util.h"

#define V 32

static float logits[V];

static int setup(void **state) {
  (void)state;
  uint64_t x = 12345;
  for (int v = 0; v < V; v++) {
    x = x * 6364136223846793005ull + 1442695040888963407ull;
    logits[v] = (float)((double)(x >> 40) / (double)(1ull << 24) * 6.0 - 3.0);
  }
  return 0;
}

static dsv4i_sampler_cfg base(void) {
  dsv4i_sampler_cfg c;
  memset(&c, 0, sizeof c);
  c.temperature = 1.0f;
  c.top_p = 1.0f;
  c.repetition_penalty = 1.0f;
  c.seed = 7;
  return c;
}

/* Pearson chi-square of counts against p (bins with expectation >= 5; the
 * rest pooled); fails beyond a bound a correct sampler passes with
 * probability > 1 - 1e-6. Tokens with p = 0 must never appear. */
static void chi_square(const double *p, const int64_t *cnt, int64_t m, const char *what) {
  double chi = 0.0, pool_e = 0.0, pool_o = 0.0;
  int df = -1;
  for (int v = 0; v < V; v++) {
    if (p[v] == 0.0) {
      if (cnt[v]) fail_msg("%s: token %d with p = 0 drawn %lld times", what, v, (long long)cnt[v]);
      continue;
    }
    const double e = p[v] * (double)m;
    if (e < 5.0) {
      pool_e += e;
      pool_o += (double)cnt[v];
      continue;
    }
    chi += ((double)cnt[v] - e) * ((double)cnt[v] - e) / e;
    df++;
  }
  if (pool_e >= 5.0) chi += (pool_o - pool_e) * (pool_o - pool_e) / pool_e, df++;
  const double bound = df + 7.0 * sqrt(2.0 * df) + 12.0;
  if (chi > bound) fail_msg("%s: chi-square %.1f over %d degrees of freedom (bound %.1f)", what, chi, df, bound);
}

static void draws_follow(const dsv4i_sampler_cfg *c, const char *what) {
  dsv4i_sampler s;
  assert_int_equal(dsv4i_sampler_init(&s, c, V), DSV4_OK);
  dsv4i_sampler_dist(&s, logits);
  double p[V];
  memcpy(p, s.p, sizeof p);
  double sum = 0.0;
  for (int v = 0; v < V; v++) sum += p[v];
  assert_true(fabs(sum - 1.0) < 1e-12);
  int64_t cnt[V] = {0};
  const int64_t m = 40000;
  for (int64_t pos = 0; pos < m; pos++) cnt[dsv4i_sampler_draw(&s, pos)]++;
  chi_square(p, cnt, m, what);
  assert_int_equal(dsv4i_sampler_draw(&s, 77), dsv4i_sampler_draw(&s, 77)); /* pure in pos */
  dsv4i_sampler_free(&s);
}

static int support(const double *p) {
  int n = 0;
  for (int v = 0; v < V; v++) n += p[v] > 0.0;
  return n;
}

static void test_transforms(void **state) {
  (void)state;
  dsv4i_sampler_cfg c = base();
  draws_follow(&c, "plain T=1");
  c.temperature = 0.5f;
  draws_follow(&c, "T=0.5");
  c.top_k = 5;
  draws_follow(&c, "top-k 5");
  c.top_k = 0;
  c.top_p = 0.6f;
  draws_follow(&c, "top-p 0.6");
  c.top_p = 1.0f;
  c.min_p = 0.2f;
  draws_follow(&c, "min-p 0.2");
  c.top_k = 8;
  c.top_p = 0.9f;
  c.temperature = 1.3f;
  draws_follow(&c, "top-k 8, top-p 0.9, min-p 0.2, T=1.3");

  /* exact supports */
  dsv4i_sampler s;
  c = base();
  c.top_k = 5;
  assert_int_equal(dsv4i_sampler_init(&s, &c, V), DSV4_OK);
  dsv4i_sampler_dist(&s, logits);
  assert_int_equal(support(s.p), 5);
  for (int v = 0; v < V; v++) /* every kept logit beats every dropped one */
    for (int w = 0; w < V; w++)
      if (s.p[v] > 0.0 && s.p[w] == 0.0) assert_true(logits[v] >= logits[w]);
  dsv4i_sampler_free(&s);
  c = base();
  c.top_p = 0.6f;
  assert_int_equal(dsv4i_sampler_init(&s, &c, V), DSV4_OK);
  dsv4i_sampler_dist(&s, logits);
  { /* minimal: the kept set reaches 0.6 of the full softmax, without its least token it does not */
    double full[V], mx = -1e30, z = 0.0, kept = 0.0, least = 1.0;
    for (int v = 0; v < V; v++) mx = logits[v] > mx ? logits[v] : mx;
    for (int v = 0; v < V; v++) z += full[v] = exp(logits[v] - mx);
    for (int v = 0; v < V; v++)
      if (s.p[v] > 0.0) kept += full[v] / z, least = full[v] / z < least ? full[v] / z : least;
    assert_true(kept >= 0.6 - 1e-12);
    assert_true(kept - least < 0.6);
  }
  dsv4i_sampler_free(&s);
  c = base();
  c.min_p = 0.3f;
  assert_int_equal(dsv4i_sampler_init(&s, &c, V), DSV4_OK);
  dsv4i_sampler_dist(&s, logits);
  float lmax = logits[0];
  for (int v = 1; v < V; v++) lmax = logits[v] > lmax ? logits[v] : lmax;
  for (int v = 0; v < V; v++) /* kept iff p / max p = exp(l - lmax) >= 0.3 */
    assert_int_equal(s.p[v] > 0.0, exp((double)logits[v] - lmax) >= 0.3);
  dsv4i_sampler_free(&s);
}

static void test_penalties_bias_greedy(void **state) {
  (void)state;
  dsv4i_sampler_cfg c = base();
  int32_t ids[2] = {3, 9};
  float bias[2] = {2.0f, -100.0f};
  c.n_bias = 2;
  c.bias_ids = ids;
  c.bias = bias;
  c.repetition_penalty = 1.5f;
  c.presence_penalty = 0.25f;
  c.frequency_penalty = 0.5f;
  dsv4i_sampler s;
  assert_int_equal(dsv4i_sampler_init(&s, &c, V), DSV4_OK);
  int32_t prompt[1] = {4};
  dsv4i_sampler_prompt(&s, prompt, 1);
  dsv4i_sampler_output(&s, 5);
  dsv4i_sampler_output(&s, 5);
  dsv4i_sampler_dist(&s, logits);
  /* expected processed logits */
  double l[V], z = 0.0, mx = -1e30;
  for (int v = 0; v < V; v++) l[v] = logits[v];
  l[3] += 2.0;
  l[9] -= 100.0;
  l[4] = l[4] > 0 ? l[4] / 1.5 : l[4] * 1.5;
  l[5] = l[5] > 0 ? l[5] / 1.5 : l[5] * 1.5;
  l[5] -= 0.25 + 0.5 * 2;
  for (int v = 0; v < V; v++) mx = l[v] > mx ? l[v] : mx;
  for (int v = 0; v < V; v++) z += exp(l[v] - mx);
  for (int v = 0; v < V; v++) assert_true(fabs(s.p[v] - exp(l[v] - mx) / z) < 1e-12);
  dsv4i_sampler_free(&s);
  /* greedy: one-hot at the processed argmax (the bias moves it) */
  c.temperature = 0.0f;
  c.n_bias = 1;
  int32_t low = 0;
  for (int v = 0; v < V; v++) low = logits[v] < logits[low] ? v : low;
  float up = 50.0f;
  c.bias_ids = &low;
  c.bias = &up;
  assert_int_equal(dsv4i_sampler_init(&s, &c, V), DSV4_OK);
  dsv4i_sampler_dist(&s, logits);
  assert_true(s.p[low] == 1.0);
  assert_int_equal(dsv4i_sampler_draw(&s, 3), low);
  dsv4i_sampler_free(&s);
  /* bad configs */
  c = base();
  c.top_p = 0.0f;
  assert_int_equal(dsv4i_sampler_init(&s, &c, V), DSV4_ERR_INVALID_ARG);
  c = base();
  c.repetition_penalty = -1.0f;
  assert_int_equal(dsv4i_sampler_init(&s, &c, V), DSV4_ERR_INVALID_ARG);
  c = base();
  int32_t bad_id = V;
  c.n_bias = 1;
  c.bias_ids = &bad_id;
  c.bias = &up;
  assert_int_equal(dsv4i_sampler_init(&s, &c, V), DSV4_ERR_INVALID_ARG);
}

/* Drafts from q, the accept rule against the processed p: tokens ~ p. */
static void lossless(const dsv4i_sampler_cfg *c, int fixed_draft, const char *what) {
  dsv4i_sampler s;
  assert_int_equal(dsv4i_sampler_init(&s, c, V), DSV4_OK);
  double p[V], q[V], z = 0.0;
  dsv4i_sampler_dist(&s, logits);
  memcpy(p, s.p, sizeof p);
  for (int v = 0; v < V; v++) z += q[v] = exp(0.5 * (double)logits[(v * 7) % V]); /* another dist */
  for (int v = 0; v < V; v++) q[v] /= z;
  int64_t cnt[V] = {0};
  const int64_t m = 40000;
  uint64_t x = 99;
  int64_t accepted = 0;
  for (int64_t pos = 0; pos < m; pos++) {
    int32_t d = 0;
    if (fixed_draft) {
      d = (int32_t)(pos % 3); /* a fixed (non-random) proposal */
    } else { /* d ~ q with the test's own generator */
      x = x * 6364136223846793005ull + 1442695040888963407ull;
      double u = (double)(x >> 11) * 0x1p-53, acc = 0.0;
      for (d = 0; d < V - 1; d++)
        if ((acc += q[d]) > u) break;
    }
    memcpy(s.p, p, sizeof p);
    int32_t t = d;
    if (dsv4i_sampler_accept(&s, fixed_draft ? NULL : q, d, pos, &t)) accepted++;
    cnt[t]++;
  }
  chi_square(p, cnt, m, what);
  assert_true(accepted > 0 && accepted < m);
  dsv4i_sampler_free(&s);
}

static void test_speculative_lossless(void **state) {
  (void)state;
  dsv4i_sampler_cfg c = base();
  lossless(&c, 0, "accept, T=1");
  c.top_k = 6;
  c.temperature = 0.8f;
  lossless(&c, 0, "accept, top-k 6, T=0.8");
  c.top_k = 0;
  c.top_p = 0.7f;
  c.min_p = 0.05f;
  c.repetition_penalty = 1.2f;
  lossless(&c, 1, "accept fixed drafts, top-p 0.7, min-p 0.05");
}

static void test_logprobs(void **state) {
  (void)state;
  int32_t top[5];
  float lp[5];
  const float l = dsv4i_sampler_logprobs(logits, V, 3, 5, top, lp);
  double z = 0.0;
  int32_t best = 0;
  for (int v = 0; v < V; v++) best = logits[v] > logits[best] ? v : best;
  for (int v = 0; v < V; v++) z += exp((double)logits[v]);
  assert_true(fabs(l - (logits[3] - log(z))) < 1e-5);
  assert_int_equal(top[0], best);
  for (int k = 1; k < 5; k++) assert_true(lp[k] <= lp[k - 1]);
}

int tu_run_suite(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_transforms),
      cmocka_unit_test(test_penalties_bias_greedy),
      cmocka_unit_test(test_speculative_lossless),
      cmocka_unit_test(test_logprobs),
  };
  return cmocka_run_group_tests(tests, setup, NULL);
}
