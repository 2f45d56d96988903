/*
 * KV capacity of an engine with the default budget (kv_budget_bytes = 0:
 * exactly what max_sequences sequences at max_context need): any mix of
 * creates and forks up to max_sequences reaches max_context, whatever the
 * copy-on-write of shared pages costs. Grid over sequence counts, contexts,
 * prompt lengths and fork points.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "test_util.h"

#include "dsv4/dsv4.h"

static dsv4_engine *make_engine(int32_t max_seqs, int64_t ctx) {
  const char *dir = tu_fixture_or_skip("tiny-v41-a");
  dsv4_engine_params ep;
  assert_int_equal(dsv4_engine_params_init(&ep, sizeof ep), DSV4_OK);
  ep.max_sequences = max_seqs;
  ep.max_context = ctx;
  ep.n_threads = 1;
  dsv4_engine *e = NULL;
  if (dsv4_engine_create_from_dir(dir, &ep, &e)) fail_msg("engine: %s", dsv4_last_error());
  return e;
}

/* Decode every sequence of ids[0..n) (batched) until each holds ctx positions. */
static void decode_to(dsv4_engine *e, int32_t n, const int64_t *ids, int64_t ctx,
                      const char *what) {
  int32_t tok[16];
  for (int32_t i = 0; i < n; i++) tok[i] = 3 + i;
  for (;;) {
    int64_t live[16];
    int32_t m = 0;
    for (int32_t i = 0; i < n; i++) {
      int64_t len;
      assert_int_equal(dsv4_engine_seq_length(e, ids[i], &len), DSV4_OK);
      if (len < ctx) live[m++] = ids[i];
    }
    if (m == 0) return;
    const dsv4_status s = dsv4_engine_decode(e, m, live, tok, NULL, NULL, NULL);
    if (s) fail_msg("%s: decode of %d sequences: %s: %s", what, (int)m, dsv4_status_string(s),
                    dsv4_last_error());
  }
}

/* One prefilled sequence of `prompt` tokens, forked up to max_seqs, all decoded to ctx. */
static void forks_reach_context(int32_t max_seqs, int64_t ctx, int64_t prompt) {
  dsv4_engine *e = make_engine(max_seqs, ctx);
  char what[128];
  snprintf(what, sizeof what, "%d sequences, context %lld, prompt %lld, forks", (int)max_seqs,
           (long long)ctx, (long long)prompt);
  int64_t ids[16];
  int32_t *p = malloc(sizeof *p * (size_t)prompt);
  for (int64_t i = 0; i < prompt; i++) p[i] = (int32_t)(5 + i % 300);
  assert_int_equal(dsv4_engine_seq_create(e, &ids[0]), DSV4_OK);
  dsv4_status s = dsv4_engine_prefill(e, ids[0], p, prompt, NULL, NULL, NULL);
  if (s) fail_msg("%s: prefill: %s", what, dsv4_last_error());
  for (int32_t i = 1; i < max_seqs; i++) {
    s = dsv4_engine_seq_fork(e, ids[0], &ids[i]);
    if (s) fail_msg("%s: fork %d: %s", what, (int)i, dsv4_last_error());
  }
  decode_to(e, max_seqs, ids, ctx, what);
  free(p);
  dsv4_engine_free(e);
}

/* Forks of forks at different lengths: each generation decodes a few steps, then forks. */
static void chain_reaches_context(int32_t max_seqs, int64_t ctx) {
  dsv4_engine *e = make_engine(max_seqs, ctx);
  char what[128];
  snprintf(what, sizeof what, "%d sequences, context %lld, fork chain", (int)max_seqs,
           (long long)ctx);
  int64_t ids[16];
  const int32_t p[3] = {7, 8, 9};
  assert_int_equal(dsv4_engine_seq_create(e, &ids[0]), DSV4_OK);
  assert_int_equal(dsv4_engine_prefill(e, ids[0], p, 3, NULL, NULL, NULL), DSV4_OK);
  const int64_t stride = (ctx - 3) / max_seqs;
  int32_t t[16];
  for (int32_t i = 0; i < 16; i++) t[i] = 11 + i;
  for (int32_t i = 1; i < max_seqs; i++) {
    for (int64_t k = 0; k < stride; k++) {
      const dsv4_status s = dsv4_engine_decode(e, i, ids, t, NULL, NULL, NULL);
      if (s) fail_msg("%s: decode before fork %d: %s", what, (int)i, dsv4_last_error());
    }
    const dsv4_status s = dsv4_engine_seq_fork(e, ids[i - 1], &ids[i]);
    if (s) fail_msg("%s: fork %d: %s", what, (int)i, dsv4_last_error());
  }
  decode_to(e, max_seqs, ids, ctx, what);
  dsv4_engine_free(e);
}

/* Independent sequences, created one by one with prompts of different lengths. */
static void creates_reach_context(int32_t max_seqs, int64_t ctx) {
  dsv4_engine *e = make_engine(max_seqs, ctx);
  char what[128];
  snprintf(what, sizeof what, "%d sequences, context %lld, creates", (int)max_seqs, (long long)ctx);
  int64_t ids[16];
  int32_t p[512];
  for (int i = 0; i < 512; i++) p[i] = 20 + i % 200;
  for (int32_t i = 0; i < max_seqs; i++) {
    assert_int_equal(dsv4_engine_seq_create(e, &ids[i]), DSV4_OK);
    const int64_t n = 1 + (ctx - 1) * i / max_seqs;
    const dsv4_status s = dsv4_engine_prefill(e, ids[i], p, n, NULL, NULL, NULL);
    if (s) fail_msg("%s: prefill %d: %s", what, (int)i, dsv4_last_error());
  }
  decode_to(e, max_seqs, ids, ctx, what);
  dsv4_engine_free(e);
}

/* The finding: max_sequences 3, context 64 and 128, one prefilled sequence + two forks. */
static void three_forks_reach_context(void **st) {
  (void)st;
  forks_reach_context(3, 64, 40);
  forks_reach_context(3, 128, 100);
  chain_reaches_context(3, 128);
}

static void grid(void **st) {
  (void)st;
  const int32_t seqs[] = {1, 2, 3, 4};
  const int64_t ctxs[] = {16, 33, 64}; /* 128: three_forks_reach_context */
  for (size_t a = 0; a < sizeof seqs / sizeof *seqs; a++)
    for (size_t c = 0; c < sizeof ctxs / sizeof *ctxs; c++) {
      const int64_t C = ctxs[c];
      const int64_t prompts[] = {1, C / 2, C - 1};
      for (size_t k = 0; k < 3; k++) forks_reach_context(seqs[a], C, prompts[k]);
      chain_reaches_context(seqs[a], C);
      creates_reach_context(seqs[a], C);
    }
}

int tu_run_suite(void) {
  const struct CMUnitTest tests[] = {
    cmocka_unit_test(three_forks_reach_context),
    cmocka_unit_test(grid),
  };
  return cmocka_run_group_tests_name("engine_kv", tests, NULL, NULL);
}
