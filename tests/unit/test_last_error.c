/*
 * The one last-error story (dsv4.h, docs/api-guide.md §2): every failed call,
 * with or without a handle, leaves its message in dsv4_last_error() on the
 * calling thread; calls that cannot fail (status strings, versions) leave it;
 * the deprecated per-handle getters give the same text. Uses the default model
 * (build/models/dsv4-tiny).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "dsv4/dsv4.h"
#include "test_util.h"

static char *model_dir(void) {
  const char *b = getenv("DSV4_BUILD_ROOT");
  return tu_join(b ? b : "build", "models/dsv4-tiny");
}

/* The message is non-empty, names `what`, and survives the calls that cannot fail. */
static void expect_message(const char *what) {
  char copy[2048];
  snprintf(copy, sizeof copy, "%s", dsv4_last_error());
  if (!copy[0]) fail_msg("no message for a failed call (%s expected)", what);
  if (!strstr(copy, what)) fail_msg("message \"%s\" does not name \"%s\"", copy, what);
  (void)dsv4_status_string(DSV4_ERR_INVALID_ARG);
  (void)dsv4_version();
  (void)dsv4_version_string();
  assert_string_equal(dsv4_last_error(), copy);
}

static void handleless_calls(void **state) {
  (void)state;
  dsv4_model *m = NULL;
  assert_int_equal(dsv4_model_load("/no/such/checkpoint", NULL, &m), DSV4_ERR_NOT_FOUND);
  expect_message("/no/such/checkpoint");
  dsv4_tokenizer *t = NULL;
  assert_int_not_equal(dsv4_tokenizer_load("/no/such/tokenizer", &t), DSV4_OK);
  expect_message("/no/such/tokenizer");
  assert_int_equal(dsv4_backend_probe(7, 0), DSV4_ERR_INVALID_ARG);
  expect_message("7");
  dsv4_plan_params pp;
  assert_int_equal(dsv4_plan_params_init(&pp, sizeof pp), DSV4_OK);
  pp.tp = 3;
  dsv4_plan plan;
  assert_int_not_equal(dsv4_plan_config(NULL, &pp, &plan, sizeof plan), DSV4_OK);
  expect_message("3");
}

static void model_calls(void **state) {
  (void)state;
  char *dir = model_dir();
  dsv4_model *m = NULL;
  assert_int_equal(dsv4_model_load(dir, NULL, &m), DSV4_OK);
  dsv4_layer_info li;
  assert_int_equal(dsv4_model_get_layer(m, 999, &li, sizeof li), DSV4_ERR_INVALID_ARG);
  expect_message("999");
  assert_string_equal(dsv4_model_last_error(m), dsv4_last_error());
  dsv4_tensor_info ti;
  assert_int_equal(dsv4_model_get_tensor(m, -1, &ti, sizeof ti), DSV4_ERR_INVALID_ARG);
  expect_message("-1");
  dsv4_model_free(m);
  free(dir);
}

static void tokenizer_calls(void **state) {
  (void)state;
  char *dir = model_dir();
  dsv4_tokenizer *tok = NULL;
  assert_int_equal(dsv4_tokenizer_load(dir, &tok), DSV4_OK);
  int32_t ids[8];
  size_t n = 0;
  assert_int_equal(dsv4_tokenizer_encode(tok, "a\xff", 2, ids, 8, &n), DSV4_ERR_INVALID_UTF8);
  expect_message("byte 1");
  assert_string_equal(dsv4_tokenizer_last_error(tok), dsv4_last_error());
  const int32_t bad = -5;
  char text[16];
  assert_int_equal(dsv4_tokenizer_decode(tok, &bad, 1, 0, text, sizeof text, &n), DSV4_ERR_INVALID_TOKEN);
  expect_message("-5");
  dsv4_tokenizer_stream *st = NULL;
  assert_int_equal(dsv4_tokenizer_stream_create(tok, 0, &st), DSV4_OK);
  const char *piece = NULL;
  assert_int_equal(dsv4_tokenizer_stream_push(st, -3, &piece, &n), DSV4_ERR_INVALID_TOKEN);
  expect_message("-3");
  dsv4_tokenizer_stream_free(st);
  dsv4_tokenizer_free(tok);
  free(dir);
}

static void engine_calls(void **state) {
  (void)state;
  char *dir = model_dir();
  dsv4_engine_params ep;
  assert_int_equal(dsv4_engine_params_init(&ep, sizeof ep), DSV4_OK);
  ep.max_sequences = 2;
  ep.max_context = 32;
  ep.n_threads = 1;
  dsv4_engine *e = NULL;
  assert_int_equal(dsv4_engine_create_from_dir(dir, &ep, &e), DSV4_OK);
  int64_t seq = 0;
  assert_int_equal(dsv4_engine_seq_create(e, &seq), DSV4_OK);
  const int32_t tok = 1;
  const int64_t ghost = seq + 1000;
  int32_t next = 0;
  assert_int_equal(dsv4_engine_decode(e, 1, &ghost, &tok, NULL, NULL, &next), DSV4_ERR_UNKNOWN_SEQUENCE);
  char id[32];
  snprintf(id, sizeof id, "%lld", (long long)ghost);
  expect_message(id);
  assert_string_equal(dsv4_engine_last_error(e), dsv4_last_error());
  const int32_t big = 1 << 30;
  assert_int_equal(dsv4_engine_prefill(e, seq, &big, 1, NULL, NULL, &next), DSV4_ERR_INVALID_TOKEN);
  expect_message("1073741824");
  int64_t ns = 0;
  assert_int_equal(dsv4_engine_get_layer_time(e, -2, &ns), DSV4_ERR_INVALID_ARG);
  expect_message("-2");
  assert_int_equal(dsv4_engine_seq_free(e, ghost), DSV4_ERR_UNKNOWN_SEQUENCE);
  expect_message(id);
  dsv4_engine_free(e);
  free(dir);
}

int tu_run_suite(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(handleless_calls),
      cmocka_unit_test(model_calls),
      cmocka_unit_test(tokenizer_calls),
      cmocka_unit_test(engine_calls),
  };
  return cmocka_run_group_tests_name("last_error", tests, NULL, NULL);
}
