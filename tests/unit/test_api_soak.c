/*
 * Model-based soak of the public engine API (runs in the unit suite, so also
 * under ASan/UBSan in CI): DSV4_SOAK_CALLS (default 1500) random calls -
 * create, fork, free, prefill, decode batches, draft, verify and bad
 * arguments of every kind - on a small engine, each checked against a model
 * of what the call must do: its status (success, or the documented refusal
 * for the state the model predicts), every live sequence's length after it,
 * and, for a sample of the tokens produced, the token itself: a second engine
 * replays the sequence's own history (its prefill chunks and decode steps,
 * forks included) alone, which the API says gives the same tokens whatever
 * the batch. DSV4_SOAK_SEED picks the run (default 1; printed).
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "dsv4/dsv4.h"
#include "test_util.h"

#define FIX "tiny-v41-e2e-a"
#define MAXS 4
#define CTX 32
#define MAXB 64

typedef struct mseq {
  int64_t id;
  int32_t len;
  int32_t tok[CTX];  /* every position's token */
  int8_t chunk[CTX]; /* 1 where a prefill call or a decode step began */
  int32_t drafted;   /* a draft of B proposals is pending for verify */
  int32_t drafts[MAXB];
} mseq;

static uint64_t g_rng;
static uint32_t rnd(uint32_t n) {
  g_rng = g_rng * 6364136223846793005ULL + 1442695040888963407ULL;
  return (uint32_t)((g_rng >> 33) % n);
}

typedef struct soak {
  dsv4_engine *e, *oracle;
  int32_t vocab, B;
  mseq live[MAXS];
  int n_live;
  int64_t freed[64];
  int n_freed;
  long calls, checked, refused;
} soak;

static int32_t rtok(soak *s) { return 3 + (int32_t)rnd((uint32_t)s->vocab - 3); }

static void expect_status(soak *s, const char *what, dsv4_status got, dsv4_status want) {
  if (got != want)
    fail_msg("call %ld (%s): status %d (%s), the model expects %d (%s); message: %s", s->calls, what,
             got, dsv4_status_string(got), want, dsv4_status_string(want), dsv4_last_error());
  if (want != DSV4_OK) {
    s->refused++;
    tu_catalogue("engine calls (soak, seed 1)", what, got, dsv4_last_error());
  }
}

/* Every live sequence holds what the model says; freed ids are unknown. */
static void check_lengths(soak *s) {
  for (int i = 0; i < s->n_live; i++) {
    int64_t n = -1;
    assert_int_equal(dsv4_engine_seq_length(s->e, s->live[i].id, &n), DSV4_OK);
    if (n != s->live[i].len)
      fail_msg("call %ld: sequence %lld holds %lld positions, the model says %d", s->calls,
               (long long)s->live[i].id, (long long)n, s->live[i].len);
  }
  if (s->n_freed) {
    int64_t n;
    assert_int_equal(dsv4_engine_seq_length(s->e, s->freed[rnd((uint32_t)s->n_freed)], &n),
                     DSV4_ERR_UNKNOWN_SEQUENCE);
  }
}

/* The oracle's greedy token after q's history, replayed alone call by call. */
static int32_t oracle_next(soak *s, const mseq *q) {
  int64_t id;
  assert_int_equal(dsv4_engine_seq_create(s->oracle, &id), DSV4_OK);
  int32_t next = -1;
  for (int32_t p = 0; p < q->len;) {
    int32_t end = p + 1;
    while (end < q->len && !q->chunk[end]) end++;
    assert_int_equal(dsv4_engine_prefill(s->oracle, id, &q->tok[p], end - p, NULL, NULL, &next), DSV4_OK);
    p = end;
  }
  assert_int_equal(dsv4_engine_seq_free(s->oracle, id), DSV4_OK);
  return next;
}

static void check_token(soak *s, const mseq *q, int32_t got) {
  if (rnd(6) != 0 || q->len == 0) return; /* a sample keeps the soak fast */
  const int32_t want = oracle_next(s, q);
  s->checked++;
  if (got != want)
    fail_msg("call %ld: sequence %lld at %d positions produced %d; alone it produces %d", s->calls,
             (long long)q->id, q->len, got, want);
}

static void remember_freed(soak *s, int64_t id) {
  if (s->n_freed < 64) s->freed[s->n_freed++] = id;
  else s->freed[rnd(64)] = id;
}

static void op_create(soak *s) {
  int64_t id = 0;
  const dsv4_status st = dsv4_engine_seq_create(s->e, &id);
  expect_status(s, "create", st, s->n_live < MAXS ? DSV4_OK : DSV4_KV_FULL);
  if (st == DSV4_OK) {
    memset(&s->live[s->n_live], 0, sizeof s->live[0]);
    s->live[s->n_live++].id = id;
  }
}

static void op_fork(soak *s) {
  if (!s->n_live) return;
  mseq *p = &s->live[rnd((uint32_t)s->n_live)];
  int64_t id = 0;
  const dsv4_status st = dsv4_engine_seq_fork(s->e, p->id, &id);
  if (st == DSV4_KV_FULL && s->n_live < MAXS) return; /* too few free pages: allowed, nothing changed */
  expect_status(s, "fork", st, s->n_live < MAXS ? DSV4_OK : DSV4_KV_FULL);
  if (st == DSV4_OK) {
    s->live[s->n_live] = *p;
    s->live[s->n_live].id = id;
    s->live[s->n_live++].drafted = 0;
  }
}

static void op_free(soak *s) {
  if (!s->n_live) return;
  const int i = (int)rnd((uint32_t)s->n_live);
  expect_status(s, "free", dsv4_engine_seq_free(s->e, s->live[i].id), DSV4_OK);
  remember_freed(s, s->live[i].id);
  s->live[i] = s->live[--s->n_live];
}

static void op_prefill(soak *s) {
  if (!s->n_live) return;
  mseq *q = &s->live[rnd((uint32_t)s->n_live)];
  const int32_t n = 1 + (int32_t)rnd(8);
  int32_t t[8], next = -1;
  for (int32_t i = 0; i < n; i++) t[i] = rtok(s);
  const dsv4_status st = dsv4_engine_prefill(s->e, q->id, t, n, NULL, NULL, &next);
  if (st == DSV4_KV_FULL) return;
  expect_status(s, "prefill", st, q->len + n <= CTX ? DSV4_OK : DSV4_ERR_CONTEXT_OVERFLOW);
  if (st) return;
  memcpy(&q->tok[q->len], t, sizeof(int32_t) * (size_t)n);
  q->chunk[q->len] = 1;
  q->len += n;
  q->drafted = 0;
  check_token(s, q, next);
}

static void op_decode(soak *s) {
  if (!s->n_live) return;
  int32_t n = 1 + (int32_t)rnd((uint32_t)s->n_live), pick[MAXS];
  for (int i = 0; i < s->n_live; i++) pick[i] = i;
  for (int i = 0; i < n; i++) { /* n distinct rows in random order */
    const int j = i + (int)rnd((uint32_t)(s->n_live - i));
    const int32_t x = pick[i];
    pick[i] = pick[j];
    pick[j] = x;
  }
  int64_t ids[MAXS];
  int32_t t[MAXS], out[MAXS];
  int full = 0;
  for (int i = 0; i < n; i++) {
    ids[i] = s->live[pick[i]].id;
    t[i] = rtok(s);
    full |= s->live[pick[i]].len >= CTX;
  }
  const dsv4_status st = dsv4_engine_decode(s->e, n, ids, t, NULL, NULL, out);
  if (st == DSV4_KV_FULL) return;
  expect_status(s, "decode", st, full ? DSV4_ERR_CONTEXT_OVERFLOW : DSV4_OK);
  if (st) return;
  for (int i = 0; i < n; i++) {
    mseq *q = &s->live[pick[i]];
    q->tok[q->len] = t[i];
    q->chunk[q->len] = 1;
    q->len++;
    q->drafted = 0;
    check_token(s, q, out[i]);
  }
}

static void op_draft_verify(soak *s) {
  if (!s->n_live || !s->B) return;
  mseq *q = &s->live[rnd((uint32_t)s->n_live)];
  if (q->len < 1 || q->len + 1 + s->B > CTX) return;
  const int32_t anchor = rtok(s);
  expect_status(s, "draft", dsv4_engine_draft(s->e, 1, &q->id, &anchor, NULL, q->drafts, NULL), DSV4_OK);
  for (int32_t k = 0; k < s->B; k++)
    if (q->drafts[k] < 0 || q->drafts[k] >= s->vocab) fail_msg("draft %d is %d", k, q->drafts[k]);
  const int32_t nd = (int32_t)rnd((uint32_t)s->B + 1);
  int32_t acc = -1, next = -1;
  expect_status(s, "verify", dsv4_engine_verify(s->e, 1, &q->id, &anchor, &nd, q->drafts, NULL, &acc, &next),
                DSV4_OK);
  assert_true(acc >= 0 && acc <= nd);
  /* the sequence now holds anchor + acc proposals, as if decoded one by one */
  const int32_t add[1 + MAXB] = {anchor};
  memcpy((int32_t *)add + 1, q->drafts, sizeof(int32_t) * (size_t)acc);
  for (int32_t k = 0; k <= acc; k++) {
    if (k > 0 && rnd(2) == 0) { /* greedy: each accepted proposal is what decoding gives */
      const int32_t want = oracle_next(s, q);
      s->checked++;
      if (want != add[k]) fail_msg("call %ld: verify accepted %d at %d, decoding gives %d", s->calls, add[k], q->len, want);
    }
    q->tok[q->len] = add[k];
    q->chunk[q->len] = 1;
    q->len++;
  }
  check_token(s, q, next);
}

/* Bad arguments of every kind: the documented status, nothing changed. */
static void op_bad(soak *s) {
  /* a live sequence with room for one more position (a full one would be
   * refused for that first: the checks run row by row) */
  int64_t live = 0;
  for (int k = 0, i0 = s->n_live ? (int)rnd((uint32_t)s->n_live) : 0; k < s->n_live; k++)
    if (s->live[(i0 + k) % s->n_live].len < CTX) {
      live = s->live[(i0 + k) % s->n_live].id;
      break;
    }
  const int64_t gone = s->n_freed ? s->freed[rnd((uint32_t)s->n_freed)] : 0;
  int32_t t[2] = {rtok(s), rtok(s)}, out[2];
  int64_t ids[2] = {live, live};
  dsv4_sampling_params sp;
  assert_int_equal(dsv4_sampling_params_init(&sp, sizeof sp), DSV4_OK);
  int64_t dummy;
  switch (rnd(11)) {
  case 0:
    if (!live) break;
    t[0] = rnd(2) ? -1 : s->vocab;
    expect_status(s, "prefill bad token", dsv4_engine_prefill(s->e, live, t, 1, NULL, NULL, out),
                  DSV4_ERR_INVALID_TOKEN);
    break;
  case 1:
    if (!live) break;
    expect_status(s, "prefill empty", dsv4_engine_prefill(s->e, live, t, 0, NULL, NULL, out),
                  DSV4_ERR_INVALID_ARG);
    break;
  case 2:
    if (!live) break;
    expect_status(s, "decode twice", dsv4_engine_decode(s->e, 2, ids, t, NULL, NULL, out),
                  DSV4_ERR_INVALID_ARG);
    break;
  case 3:
    if (!gone) break;
    expect_status(s, "decode freed", dsv4_engine_decode(s->e, 1, &gone, t, NULL, NULL, out),
                  DSV4_ERR_UNKNOWN_SEQUENCE);
    break;
  case 4:
    expect_status(s, "decode none", dsv4_engine_decode(s->e, 0, ids, t, NULL, NULL, out),
                  DSV4_ERR_INVALID_ARG);
    break;
  case 5:
    if (!live) break;
    expect_status(s, "prefill NULL", dsv4_engine_prefill(s->e, live, NULL, 2, NULL, NULL, out),
                  DSV4_ERR_INVALID_ARG);
    break;
  case 6:
    if (!gone) break;
    expect_status(s, "free freed", dsv4_engine_seq_free(s->e, gone), DSV4_ERR_UNKNOWN_SEQUENCE);
    expect_status(s, "fork freed", dsv4_engine_seq_fork(s->e, gone, &dummy), DSV4_ERR_UNKNOWN_SEQUENCE);
    break;
  case 7:
    if (!live) break;
    sp.temperature = NAN;
    expect_status(s, "decode NaN temperature", dsv4_engine_decode(s->e, 1, &live, t, &sp, NULL, out),
                  DSV4_ERR_INVALID_ARG);
    break;
  case 8:
    if (!live) break;
    t[0] = -5;
    expect_status(s, "decode bad token", dsv4_engine_decode(s->e, 1, &live, t, NULL, NULL, out),
                  DSV4_ERR_INVALID_TOKEN);
    break;
  case 9:
    if (!gone || !s->B) break;
    expect_status(s, "draft freed", dsv4_engine_draft(s->e, 1, &gone, t, NULL, out, NULL),
                  DSV4_ERR_UNKNOWN_SEQUENCE);
    break;
  default: {
    if (!live || !s->B) break;
    const int32_t nd = s->B + 1;
    int32_t d[MAXB + 1] = {0}, acc, nx;
    expect_status(s, "verify too many drafts",
                  dsv4_engine_verify(s->e, 1, &live, t, &nd, d, NULL, &acc, &nx), DSV4_ERR_INVALID_ARG);
    break;
  }
  }
}

static void soak_run(void **state) {
  (void)state;
  const char *dir = tu_fixture_or_skip(FIX);
  const char *cs = getenv("DSV4_SOAK_CALLS"), *ss = getenv("DSV4_SOAK_SEED");
  const long calls = cs ? atol(cs) : 1500;
  g_rng = ss ? strtoull(ss, NULL, 10) : 1;
  print_message("  soak: %ld calls, seed %llu (DSV4_SOAK_SEED)\n", calls, (unsigned long long)g_rng);
  soak s;
  memset(&s, 0, sizeof s);
  dsv4_model *m = NULL;
  assert_int_equal(dsv4_model_load(dir, NULL, &m), DSV4_OK);
  dsv4_model_info mi;
  assert_int_equal(dsv4_model_get_info(m, &mi, sizeof mi), DSV4_OK);
  s.vocab = mi.vocab_size;
  s.B = mi.dspark_block_size;
  assert_true(s.B <= MAXB);
  dsv4_engine_params ep;
  assert_int_equal(dsv4_engine_params_init(&ep, sizeof ep), DSV4_OK);
  ep.max_sequences = MAXS;
  ep.max_context = CTX;
  ep.prefill_chunk = 5; /* prompts of 6..8 run in two steps */
  assert_int_equal(dsv4_engine_create(m, &ep, &s.e), DSV4_OK);
  ep.max_sequences = 1;
  assert_int_equal(dsv4_engine_create(m, &ep, &s.oracle), DSV4_OK);
  for (s.calls = 0; s.calls < calls; s.calls++) {
    const uint32_t r = rnd(100);
    if (r < 10) op_create(&s);
    else if (r < 17) op_fork(&s);
    else if (r < 25) op_free(&s);
    else if (r < 40) op_prefill(&s);
    else if (r < 65) op_decode(&s);
    else if (r < 75) op_draft_verify(&s);
    else op_bad(&s);
    check_lengths(&s);
  }
  print_message("  soak: %ld calls, %ld refused as the model predicted, %ld tokens checked against "
                "a replay\n", s.calls, s.refused, s.checked);
  assert_true(s.checked > calls / 50);
  dsv4_engine_free(s.oracle);
  dsv4_engine_free(s.e);
  dsv4_model_free(m);
}

int tu_run_suite(void) {
  const struct CMUnitTest tests[] = {
    cmocka_unit_test(soak_run),
  };
  return cmocka_run_group_tests_name("api_soak", tests, NULL, NULL);
}
