/* numpy's SeedSequence / PCG64 / Generator.integers(int64), compared value by
 * value with tests/data/numpy_random/table.json (written by gen_table.py
 * with numpy). */
#include <inttypes.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "test_util.h"
#include "model/numpy_random.h"

static json_t *g_table;

static int load_table(void **state) {
  (void)state;
  const char *root = getenv("DSV4_SOURCE_ROOT");
  char path[4096];
  snprintf(path, sizeof path, "%s/tests/data/numpy_random/table.json", root ? root : ".");
  json_error_t err;
  g_table = json_load_file(path, 0, &err);
  if (!g_table) fprintf(stderr, "%s:%d: %s\n", path, err.line, err.text);
  return g_table ? 0 : -1;
}

static int free_table(void **state) {
  (void)state;
  json_decref(g_table);
  return 0;
}

static uint64_t u64_of(json_t *s) {
  assert_true(json_is_string(s));
  return strtoull(json_string_value(s), NULL, 10);
}

static size_t words_of(json_t *case_, uint32_t *w, size_t cap) {
  json_t *ws = json_object_get(case_, "words");
  assert_true(json_is_array(ws));
  size_t n = json_array_size(ws);
  assert_true(n <= cap);
  for (size_t i = 0; i < n; i++) w[i] = (uint32_t)json_integer_value(json_array_get(ws, i));
  return n;
}

static void seedseq_matches_numpy(void **state) {
  (void)state;
  json_t *cases = json_object_get(g_table, "seedseq");
  assert_true(json_array_size(cases) > 100);
  size_t i;
  json_t *c;
  json_array_foreach(cases, i, c) {
    uint32_t w[16], st[8];
    size_t n = words_of(c, w, 16);
    dsv4i_np_seedseq_generate(w, n, st, 8);
    json_t *want = json_object_get(c, "state32");
    for (size_t k = 0; k < 8; k++)
      assert_int_equal(st[k], (uint32_t)json_integer_value(json_array_get(want, k)));
    /* generate_state(4, uint64) is the same words read as little-endian pairs */
    json_t *want64 = json_object_get(c, "state64");
    for (size_t k = 0; k < 4; k++)
      assert_true(((uint64_t)st[2 * k] | ((uint64_t)st[2 * k + 1] << 32)) ==
                  u64_of(json_array_get(want64, k)));
  }
}

static void pcg64_raw_matches_numpy(void **state) {
  (void)state;
  json_t *cases = json_object_get(g_table, "raw");
  size_t i;
  json_t *c;
  json_array_foreach(cases, i, c) {
    uint32_t w[16];
    size_t n = words_of(c, w, 16);
    dsv4i_pcg64 g;
    dsv4i_np_pcg64_seed(&g, w, n);
    json_t *want = json_object_get(c, "next64");
    for (size_t k = 0; k < json_array_size(want); k++) {
      uint64_t got = dsv4i_np_pcg64_next64(&g), exp = u64_of(json_array_get(want, k));
      if (got != exp)
        fail_msg("seed %s draw %zu: %" PRIu64 " != numpy %" PRIu64,
                 json_string_value(json_object_get(c, "seed")), k, got, exp);
    }
  }
}

/* One generator per seed through every range of the table in turn, so the
 * 32-bit half-draw buffer carries across calls and across 64-bit draws. */
static void integers_match_numpy(void **state) {
  (void)state;
  json_t *cases = json_object_get(g_table, "integers");
  size_t i, n_values = 0;
  json_t *c;
  json_array_foreach(cases, i, c) {
    uint32_t w[16];
    size_t n = words_of(c, w, 16);
    dsv4i_pcg64 g;
    dsv4i_np_pcg64_seed(&g, w, n);
    size_t j;
    json_t *call;
    json_array_foreach(json_object_get(c, "calls"), j, call) {
      int64_t lo = json_integer_value(json_object_get(call, "low"));
      int64_t hi = json_integer_value(json_object_get(call, "high"));
      int ep = json_is_true(json_object_get(call, "endpoint"));
      json_t *want = json_object_get(call, "values");
      size_t cnt = json_array_size(want);
      int64_t got[16];
      assert_true(cnt <= 16);
      assert_int_equal(dsv4i_np_integers_i64(&g, lo, hi, ep, got, cnt), DSV4_OK);
      for (size_t k = 0; k < cnt; k++) {
        int64_t exp = json_integer_value(json_array_get(want, k));
        if (got[k] != exp)
          fail_msg("seed %s call %zu [%" PRId64 ", %" PRId64 "%c value %zu: %" PRId64
                   " != numpy %" PRId64,
                   json_string_value(json_object_get(c, "seed")), j, lo, hi, ep ? ']' : ')', k,
                   got[k], exp);
        n_values++;
      }
    }
  }
  assert_true(n_values > 5000);
}

/* Fresh default_rng(10007 * layer).integers(0, bound, 4) * 2 + 1 for the real
 * compressed vocab (99092) and the fixtures' (543), layers 0..63. */
static void engram_style_draws_match_numpy(void **state) {
  (void)state;
  size_t i;
  json_t *c;
  json_array_foreach(json_object_get(g_table, "multipliers"), i, c) {
    int64_t cv = json_integer_value(json_object_get(c, "compressed_vocab"));
    int64_t layer = json_integer_value(json_object_get(c, "layer"));
    int64_t bound = json_integer_value(json_object_get(c, "bound"));
    assert_true(bound == (INT64_MAX / cv) / 2);
    dsv4i_pcg64 g;
    dsv4i_np_pcg64_seed_u64(&g, (uint64_t)(10007 * layer));
    int64_t v[4];
    assert_int_equal(dsv4i_np_integers_i64(&g, 0, bound, 0, v, 4), DSV4_OK);
    json_t *want = json_object_get(c, "m");
    for (size_t k = 0; k < 4; k++)
      assert_true(2 * v[k] + 1 == json_integer_value(json_array_get(want, k)));
  }
}

static void empty_range_is_invalid_and_changes_nothing(void **state) {
  (void)state;
  dsv4i_pcg64 g, g0;
  dsv4i_np_pcg64_seed_u64(&g, 7);
  g0 = g;
  int64_t v = 123;
  assert_int_equal(dsv4i_np_integers_i64(&g, 5, 5, 0, &v, 1), DSV4_ERR_INVALID_ARG);
  assert_int_equal(dsv4i_np_integers_i64(&g, 6, 5, 1, &v, 1), DSV4_ERR_INVALID_ARG);
  assert_int_equal(dsv4i_np_integers_i64(&g, INT64_MIN, INT64_MIN, 0, &v, 1),
                   DSV4_ERR_INVALID_ARG);
  assert_int_equal(v, 123);
  assert_memory_equal(&g, &g0, sizeof g);
  /* a one-value range draws nothing */
  assert_int_equal(dsv4i_np_integers_i64(&g, 9, 10, 0, &v, 1), DSV4_OK);
  assert_int_equal(v, 9);
  assert_memory_equal(&g, &g0, sizeof g);
}

static void seed_words_follow_numpy_coercion(void **state) {
  (void)state;
  uint32_t w[2];
  assert_int_equal(dsv4i_np_seed_words(0, w), 1);
  assert_int_equal(w[0], 0);
  assert_int_equal(dsv4i_np_seed_words(0xffffffffu, w), 1);
  assert_int_equal(dsv4i_np_seed_words(0x100000000ull, w), 2);
  assert_int_equal(w[0], 0);
  assert_int_equal(w[1], 1);
}

int tu_run_suite(void) {
  const struct CMUnitTest tests[] = {
    cmocka_unit_test(seed_words_follow_numpy_coercion),
    cmocka_unit_test(seedseq_matches_numpy),
    cmocka_unit_test(pcg64_raw_matches_numpy),
    cmocka_unit_test(integers_match_numpy),
    cmocka_unit_test(engram_style_draws_match_numpy),
    cmocka_unit_test(empty_range_is_invalid_and_changes_nothing),
  };
  return cmocka_run_group_tests_name("numpy_random", tests, load_table, free_table);
}
