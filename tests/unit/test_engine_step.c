/*
 * The mixed engine step (dsv4i_engine_step): decode rows and prompt chunks of
 * several sequences in one backend batch give every row the logits, bit for
 * bit, of the prefill or decode call of that row alone (on the default model,
 * which has Engram layers; a prompt crosses the sliding window). Bad steps are
 * refused with nothing changed.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "test_util.h"

#include "dsv4/dsv4.h"
#include "engine/engine.h"

#define N_SEQ 3
#define N_DEC 5

static dsv4_engine *make_engine(void) {
  const char *root = getenv("DSV4_BUILD_ROOT");
  char dir[4096];
  snprintf(dir, sizeof dir, "%s/models/dsv4-tiny", root ? root : "build");
  dsv4_engine_params ep;
  assert_int_equal(dsv4_engine_params_init(&ep, sizeof ep), DSV4_OK);
  ep.max_sequences = 4;
  ep.max_context = 256;
  ep.prefill_chunk = 128;
  ep.n_threads = 2;
  dsv4_engine *e = NULL;
  if (dsv4_engine_create_from_dir(dir, &ep, &e)) fail_msg("engine: %s", dsv4_last_error());
  return e;
}

static int32_t argmax(const float *x, int32_t n) {
  int32_t b = 0;
  for (int32_t i = 1; i < n; i++)
    if (x[i] > x[b]) b = i;
  return b;
}

/* Prompt chunk cuts of each sequence: [cut[k], cut[k + 1]). */
static const int32_t lens[N_SEQ] = {150, 40, 9};
static const int32_t cuts[N_SEQ][4] = {{0, 64, 128, 150}, {0, 40, -1, -1}, {0, 9, -1, -1}};
static const int32_t n_chunks[N_SEQ] = {3, 1, 1};

static int32_t *prompt(int s) {
  int32_t *p = malloc(sizeof *p * (size_t)lens[s]);
  for (int32_t i = 0; i < lens[s]; i++) p[i] = 3 + (int32_t)((i * 37 + s * 101 + i * i) % 700);
  return p;
}

static void mixed_equals_alone(void **state) {
  (void)state;
  dsv4_engine *ref = make_engine(), *mix = make_engine();
  const int32_t V = ref->vocab;
  int32_t *p[N_SEQ];
  /* reference: each sequence alone; logits after its prompt and after each decode */
  float *want = malloc(sizeof *want * (size_t)V * N_SEQ * (N_DEC + 1));
  int32_t tok[N_SEQ][N_DEC + 1];
  for (int s = 0; s < N_SEQ; s++) {
    p[s] = prompt(s);
    int64_t id;
    assert_int_equal(dsv4i_seq_create(ref, &id), DSV4_OK);
    for (int k = 0; k < n_chunks[s]; k++) {
      const int last = k + 1 == n_chunks[s];
      float *out = last ? want + (size_t)V * (size_t)(s * (N_DEC + 1)) : NULL;
      assert_int_equal(dsv4i_engine_prefill(ref, id, p[s] + cuts[s][k], cuts[s][k + 1] - cuts[s][k],
                                            NULL, out, NULL), DSV4_OK);
    }
    for (int d = 0; d <= N_DEC; d++) {
      float *row = want + (size_t)V * (size_t)(s * (N_DEC + 1) + d);
      tok[s][d] = argmax(row, V);
      if (d < N_DEC)
        assert_int_equal(dsv4i_engine_decode(ref, 1, &id, &tok[s][d], NULL, row + V, NULL), DSV4_OK);
    }
  }
  /* mixed: chunks of later prompts ride with decodes of earlier ones */
  int64_t id[N_SEQ];
  for (int s = 0; s < N_SEQ; s++) assert_int_equal(dsv4i_seq_create(mix, &id[s]), DSV4_OK);
  int chunk[N_SEQ] = {0}, dec[N_SEQ] = {0}, checked = 0;
  float *got = malloc(sizeof *got * (size_t)V * N_SEQ);
  for (int step = 0; step < 12; step++) {
    dsv4i_step_row rows[N_SEQ];
    int who[N_SEQ], n = 0;
    for (int s = 0; s < N_SEQ; s++) {
      if (step < s) continue; /* sequence s arrives at step s */
      if (chunk[s] < n_chunks[s]) {
        const int k = chunk[s];
        rows[n] = (dsv4i_step_row){id[s], p[s] + cuts[s][k], cuts[s][k + 1] - cuts[s][k], 0,
                                   k + 1 == n_chunks[s]};
      } else if (dec[s] < N_DEC) {
        rows[n] = (dsv4i_step_row){id[s], &tok[s][dec[s]], 1, 1, 1};
      } else {
        continue;
      }
      who[n++] = s;
    }
    if (!n) break;
    dsv4_status st = dsv4i_engine_step(mix, n, rows, got);
    if (st) fail_msg("step %d: %s", step, dsv4_last_error());
    for (int i = 0, o = 0; i < n; i++) {
      const int s = who[i];
      int d = -1;
      if (!rows[i].generated) {
        if (++chunk[s] == n_chunks[s]) d = 0;
      } else {
        d = ++dec[s];
      }
      if (d < 0) continue;
      const float *w = want + (size_t)V * (size_t)(s * (N_DEC + 1) + d);
      if (memcmp(got + (size_t)V * (size_t)o++, w, sizeof *w * (size_t)V))
        fail_msg("step %d: sequence %d output %d differs from the call alone", step, s, d);
      checked++;
    }
  }
  assert_int_equal(checked, N_SEQ * (N_DEC + 1));
  {
    dsv4_engine_timings t;
    assert_int_equal(dsv4_engine_get_timings(mix, &t, sizeof t), DSV4_OK);
    assert_int_equal(t.decode_tokens, N_SEQ * N_DEC);
    assert_int_equal(t.prefill_tokens, 150 + 40 + 9);
  }
  for (int s = 0; s < N_SEQ; s++) free(p[s]);
  free(want);
  free(got);
  dsv4_engine_free(ref);
  dsv4_engine_free(mix);
}

static int64_t len_of(dsv4_engine *e, int64_t id) {
  int64_t n = -1;
  assert_int_equal(dsv4_engine_seq_length(e, id, &n), DSV4_OK);
  return n;
}

static void bad_steps_change_nothing(void **state) {
  (void)state;
  dsv4_engine *e = make_engine();
  int64_t a, b;
  assert_int_equal(dsv4i_seq_create(e, &a), DSV4_OK);
  assert_int_equal(dsv4i_seq_create(e, &b), DSV4_OK);
  const int32_t toks[130] = {5, 6, 7};
  float *lg = malloc(sizeof *lg * (size_t)e->vocab * 2);
  dsv4i_step_row rows[2] = {{a, toks, 3, 0, 1}, {a, toks, 1, 1, 1}};
  assert_int_equal(dsv4i_engine_step(e, 2, rows, lg), DSV4_ERR_INVALID_ARG); /* a twice */
  rows[1] = (dsv4i_step_row){b, toks, 4, 1, 1}; /* 1 + 4 logits rows: above max_out_rows 4 */
  assert_int_equal(dsv4i_engine_step(e, 2, rows, lg), DSV4_ERR_INVALID_ARG);
  const int32_t bad = e->vocab;
  rows[1] = (dsv4i_step_row){b, &bad, 1, 0, 1};
  assert_int_equal(dsv4i_engine_step(e, 2, rows, lg), DSV4_ERR_INVALID_TOKEN);
  rows[1] = (dsv4i_step_row){b, toks, 130, 0, 1}; /* 133 tokens: above max_batch_tokens 128 */
  assert_int_equal(dsv4i_engine_step(e, 2, rows, lg), DSV4_ERR_INVALID_ARG);
  rows[1] = (dsv4i_step_row){987654321, toks, 1, 0, 1};
  assert_int_equal(dsv4i_engine_step(e, 2, rows, lg), DSV4_ERR_UNKNOWN_SEQUENCE);
  rows[1] = (dsv4i_step_row){b, toks, 1, 0, 1};
  assert_int_equal(dsv4i_engine_step(e, 2, rows, NULL), DSV4_ERR_INVALID_ARG); /* logits NULL */
  assert_int_equal(len_of(e, a), 0);
  assert_int_equal(len_of(e, b), 0);
  assert_int_equal(dsv4i_engine_step(e, 2, rows, lg), DSV4_OK); /* both still work */
  assert_int_equal(len_of(e, a), 3);
  assert_int_equal(len_of(e, b), 1);
  free(lg);
  dsv4_engine_free(e);
}

int tu_run_suite(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(mixed_equals_alone),
      cmocka_unit_test(bad_steps_change_nothing),
  };
  return cmocka_run_group_tests_name("engine_step", tests, NULL, NULL);
}
