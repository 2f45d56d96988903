/*
 * Bit-exactness lock of the CPU engine: a hash of every logit (fp32 bit
 * patterns) and every greedy token of fixed runs on both shared fixtures,
 * compared against committed constants. Refactoring that must not change
 * numerics (the backend seam, the KV bookkeeping, the step plan) keeps these
 * hashes; a deliberate numeric change updates them in the same commit and
 * says why.
 *
 * Runs, each prefill + 16 decode steps over the prompts' golden input ids:
 *   single   prompt b alone, prefill in one chunk;
 *   chunked  prompt b alone, prefill in chunks of 7 (same bits as single: the
 *            prefill layout does not depend on the chunking);
 *   batched  prompts a and b, one batched decode of both per step.
 * Two worker threads, so the parallel paths are covered (the ops are
 * thread-count invariant: the hashes are the same with 1 thread).
 */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "test_util.h"

#include "dsv4/dsv4.h"
#include "io/safetensors.h"

#define N_DECODE 16

typedef struct hash_case {
  const char *fixture;
  const char *mode;
  uint64_t expect;
} hash_case;

/* Recorded on the CPU engine before the backend-neutral core rework. */
static const hash_case cases[] = {
  {"tiny-v41-a", "single", UINT64_C(0x90c233b92ff8942b)},
  {"tiny-v41-a", "chunked", UINT64_C(0x90c233b92ff8942b)},
  {"tiny-v41-a", "batched", UINT64_C(0x7048f6938c634a69)},
  {"tiny-v41-e2e-a", "single", UINT64_C(0x255c55b456b6c155)},
  {"tiny-v41-e2e-a", "chunked", UINT64_C(0x255c55b456b6c155)},
  {"tiny-v41-e2e-a", "batched", UINT64_C(0xa04da4dd52be4f01)},
};

static uint64_t fnv(uint64_t h, const void *p, size_t n) {
  const unsigned char *b = p;
  for (size_t i = 0; i < n; i++) {
    h ^= b[i];
    h *= 0x100000001b3ull;
  }
  return h;
}

static int32_t *input_ids(dsv4i_st_file *f, const char *p, int64_t *n) {
  char name[64];
  snprintf(name, sizeof name, "%s.input_ids", p);
  const dsv4i_st_tensor *t = dsv4i_st_find(f, name);
  if (!t) fail_msg("golden tensor %s absent", name);
  assert_int_equal(t->dtype, DSV4_DTYPE_I64);
  *n = (int64_t)(t->nbytes / 8);
  const int64_t *v = dsv4i_st_data(f, t);
  int32_t *r = malloc(sizeof *r * (size_t)*n);
  assert_non_null(r);
  for (int64_t i = 0; i < *n; i++) r[i] = (int32_t)v[i];
  return r;
}

static uint64_t run_case(const char *fixture, const char *mode, int32_t n_threads) {
  const char *dir = tu_fixture_or_skip(fixture);
  char p[4200];
  snprintf(p, sizeof p, "%s/golden.safetensors", dir);
  dsv4i_st_file f;
  assert_int_equal(dsv4i_st_open(p, &f), DSV4_OK);
  const int batched = strcmp(mode, "batched") == 0;
  dsv4_engine_params ep;
  assert_int_equal(dsv4_engine_params_init(&ep, sizeof ep), DSV4_OK);
  ep.max_sequences = 2;
  ep.max_context = 256;
  ep.n_threads = n_threads;
  ep.prefill_chunk = strcmp(mode, "chunked") == 0 ? 7 : 256;
  dsv4_engine *e = NULL;
  dsv4_status s = dsv4_engine_create_from_dir(dir, &ep, &e);
  if (s) fail_msg("engine: %s: %s", dsv4_status_string(s), dsv4_last_error());
  dsv4_model_info mi;
  assert_int_equal(dsv4_model_get_info(dsv4_engine_model(e), &mi, sizeof mi), DSV4_OK);
  const size_t V = (size_t)mi.vocab_size;
  float *lg = malloc(sizeof *lg * 2 * V);
  assert_non_null(lg);

  const char *prompts[2] = {"b", "a"};
  const int n_seq = batched ? 2 : 1;
  int64_t seq[2];
  int32_t tok[2];
  uint64_t h = 0xcbf29ce484222325ull;
  for (int r = 0; r < n_seq; r++) {
    int64_t n;
    int32_t *in = input_ids(&f, prompts[r], &n);
    assert_int_equal(dsv4_engine_seq_create(e, &seq[r]), DSV4_OK);
    s = dsv4_engine_prefill(e, seq[r], in, n, NULL, lg, &tok[r]);
    if (s) fail_msg("prefill: %s", dsv4_last_error());
    h = fnv(h, lg, sizeof *lg * V);
    h = fnv(h, &tok[r], sizeof tok[r]);
    free(in);
  }
  for (int k = 0; k < N_DECODE; k++) {
    const int32_t in[2] = {tok[0], tok[1]};
    s = dsv4_engine_decode(e, n_seq, seq, in, NULL, lg, tok);
    if (s) fail_msg("decode step %d: %s", k, dsv4_last_error());
    h = fnv(h, lg, sizeof *lg * V * (size_t)n_seq);
    h = fnv(h, tok, sizeof *tok * (size_t)n_seq);
  }
  free(lg);
  dsv4_engine_free(e);
  dsv4i_st_close(&f);
  return h;
}

static void check(const hash_case *c) {
  const uint64_t h = run_case(c->fixture, c->mode, 2);
  printf("%s %s: logits hash 0x%016" PRIx64 "\n", c->fixture, c->mode, h);
  if (h != c->expect)
    fail_msg("%s %s: hash 0x%016" PRIx64 " != recorded 0x%016" PRIx64
             " (the CPU engine's numerics changed)", c->fixture, c->mode, h, c->expect);
}

static void a_single(void **st) { (void)st; check(&cases[0]); }
static void a_chunked(void **st) { (void)st; check(&cases[1]); }
static void a_batched(void **st) { (void)st; check(&cases[2]); }
static void e2e_single(void **st) { (void)st; check(&cases[3]); }
static void e2e_chunked(void **st) { (void)st; check(&cases[4]); }
static void e2e_batched(void **st) { (void)st; check(&cases[5]); }

/* One thread gives the same bits as two (the recorded hashes do not depend on
 * the machine's core count). */
static void thread_invariant(void **st) {
  (void)st;
  assert_true(run_case("tiny-v41-e2e-a", "chunked", 1) == cases[4].expect);
}

int tu_run_suite(void) {
  const struct CMUnitTest tests[] = {
    cmocka_unit_test(a_single),   cmocka_unit_test(a_chunked),   cmocka_unit_test(a_batched),
    cmocka_unit_test(e2e_single), cmocka_unit_test(e2e_chunked), cmocka_unit_test(e2e_batched),
    cmocka_unit_test(thread_invariant),
  };
  return cmocka_run_group_tests_name("logits_hash", tests, NULL, NULL);
}
