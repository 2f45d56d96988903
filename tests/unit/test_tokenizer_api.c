/*
 * Public tokenizer API (dsv4.h), linked against libdsv4.so: buffer
 * conventions, special ids, lookups, streaming, statuses and last-error
 * messages. Uses the project's tiny tokenizer (data/tiny-tokenizer),
 * whose reference ids come from data/tiny-tokenizer/golden.json.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "test_util.h"
#include "dsv4/dsv4.h"

#define N_OF(a) (sizeof(a) / sizeof((a)[0]))

/* golden.json encodings[0]: "Hello, world!" */
static const int32_t k_hello_ids[] = {42, 332, 81, 14, 263, 275, 321, 3};
static const char k_hello[] = "Hello, world!";

static char *tiny_dir(void) {
  const char *root = getenv("DSV4_SOURCE_ROOT");
  assert_non_null(root);
  return tu_join(root, "data/tiny-tokenizer");
}

static int setup(void **state) {
  char *dir = tiny_dir();
  dsv4_tokenizer *tok = NULL;
  dsv4_status s = dsv4_tokenizer_load(dir, &tok);
  free(dir);
  if (s != DSV4_OK) {
    fprintf(stderr, "load: %s\n", dsv4_last_error());
    return -1;
  }
  *state = tok;
  return 0;
}

static int teardown(void **state) {
  dsv4_tokenizer_free(*state);
  return 0;
}

static void facts_and_lookups(void **state) {
  dsv4_tokenizer *tok = *state;
  assert_int_equal(dsv4_tokenizer_vocab_size(tok), 781); /* 768 + the 13 chat markers */
  assert_int_equal(dsv4_tokenizer_special_id(tok, DSV4_TOKEN_BOS), 0);
  assert_int_equal(dsv4_tokenizer_special_id(tok, DSV4_TOKEN_EOS), 1);
  assert_int_equal(dsv4_tokenizer_special_id(tok, DSV4_TOKEN_PAD), 2);
  assert_int_equal(dsv4_tokenizer_special_id(tok, DSV4_TOKEN_DSPARK_NOISE), 766);
  assert_int_equal(dsv4_tokenizer_special_id(tok, DSV4_TOKEN_IMAGE), 767);
  assert_int_equal(dsv4_tokenizer_special_id(tok, 99), -1);
  assert_int_equal(dsv4_tokenizer_special_id(NULL, DSV4_TOKEN_BOS), -1);
  assert_int_equal(dsv4_tokenizer_token_id(tok, "<｜end▁of▁sentence｜>"), 1);
  assert_int_equal(dsv4_tokenizer_token_id(tok, "<｜deepseek_image｜>"), 767);
  assert_int_equal(dsv4_tokenizer_token_id(tok, "no such token"), -1);
  assert_int_equal(dsv4_tokenizer_token_id(tok, NULL), -1);
  assert_string_equal(dsv4_tokenizer_token_text(tok, 42), "H");
  assert_string_equal(dsv4_tokenizer_token_text(tok, 0), "<｜begin▁of▁sentence｜>");
  assert_int_equal(dsv4_tokenizer_token_id(tok, dsv4_tokenizer_token_text(tok, 332)), 332);
  assert_string_equal(dsv4_tokenizer_token_text(tok, 768), "<｜System｜>");
  assert_int_equal(dsv4_tokenizer_token_id(tok, "</think>"), 773);
  assert_null(dsv4_tokenizer_token_text(tok, 781));
  assert_null(dsv4_tokenizer_token_text(tok, -1));
  assert_int_equal(dsv4_tokenizer_vocab_size(NULL), 0);
  assert_string_equal(dsv4_tokenizer_last_error(NULL), "");
}

static void encode_buffer_convention(void **state) {
  dsv4_tokenizer *tok = *state;
  size_t n = 12345;
  /* count only */
  assert_int_equal(dsv4_tokenizer_encode(tok, k_hello, strlen(k_hello), NULL, 0, &n), DSV4_OK);
  assert_int_equal(n, N_OF(k_hello_ids));
  /* exact fit */
  int32_t ids[64];
  memset(ids, 0x5a, sizeof ids);
  assert_int_equal(dsv4_tokenizer_encode(tok, k_hello, strlen(k_hello), ids, n, &n), DSV4_OK);
  assert_memory_equal(ids, k_hello_ids, sizeof k_hello_ids);
  assert_int_equal(ids[n], 0x5a5a5a5a);
  /* too small: nothing written, needed count returned */
  int32_t small[3] = {-7, -7, -7};
  assert_int_equal(dsv4_tokenizer_encode(tok, k_hello, strlen(k_hello), small, 3, &n), DSV4_ERR_INVALID_ARG);
  assert_int_equal(n, N_OF(k_hello_ids));
  assert_int_equal(small[0], -7);
  assert_non_null(strstr(dsv4_tokenizer_last_error(tok), "3 entries, 8 needed"));
  /* empty text */
  assert_int_equal(dsv4_tokenizer_encode(tok, NULL, 0, ids, 64, &n), DSV4_OK);
  assert_int_equal(n, 0);
  /* specials are single ids, text is not NUL-terminated */
  const char *t = "<｜begin▁of▁sentence｜>Hello, world!XYZ";
  assert_int_equal(dsv4_tokenizer_encode(tok, t, strlen(t) - 3, ids, 64, &n), DSV4_OK);
  assert_int_equal(n, 1 + N_OF(k_hello_ids));
  assert_int_equal(ids[0], 0);
  assert_memory_equal(ids + 1, k_hello_ids, sizeof k_hello_ids);
}

static void encode_rejects_bad_input(void **state) {
  dsv4_tokenizer *tok = *state;
  int32_t ids[16];
  size_t n = 77;
  assert_int_equal(dsv4_tokenizer_encode(tok, "ab\xed\xa0\x80", 5, ids, 16, &n), DSV4_ERR_INVALID_UTF8);
  assert_int_equal(n, 0);
  assert_non_null(strstr(dsv4_tokenizer_last_error(tok), "byte 2"));
  assert_non_null(strstr(dsv4_tokenizer_last_error(tok), "surrogate"));
  assert_int_equal(dsv4_tokenizer_encode(tok, "a\0b", 3, ids, 16, &n), DSV4_ERR_INVALID_UTF8);
  assert_non_null(strstr(dsv4_tokenizer_last_error(tok), "NUL"));
  assert_int_equal(dsv4_tokenizer_encode(tok, "\xc0\x80", 2, NULL, 0, &n), DSV4_ERR_INVALID_UTF8);
  assert_int_equal(dsv4_tokenizer_encode(tok, NULL, 1, ids, 16, &n), DSV4_ERR_INVALID_ARG);
  assert_int_equal(dsv4_tokenizer_encode(tok, "a", 1, ids, 16, NULL), DSV4_ERR_INVALID_ARG);
  assert_int_equal(dsv4_tokenizer_encode(NULL, "a", 1, ids, 16, &n), DSV4_ERR_INVALID_ARG);
  /* the handle keeps working */
  assert_int_equal(dsv4_tokenizer_encode(tok, "ok", 2, ids, 16, &n), DSV4_OK);
}

static void decode_buffer_convention(void **state) {
  dsv4_tokenizer *tok = *state;
  size_t len = 999;
  assert_int_equal(dsv4_tokenizer_decode(tok, k_hello_ids, N_OF(k_hello_ids), 0, NULL, 0, &len), DSV4_OK);
  assert_int_equal(len, strlen(k_hello));
  char buf[256];
  memset(buf, 'Z', sizeof buf);
  /* the terminator needs room too */
  assert_int_equal(dsv4_tokenizer_decode(tok, k_hello_ids, N_OF(k_hello_ids), 0, buf, len, &len),
                   DSV4_ERR_INVALID_ARG);
  assert_int_equal(len, strlen(k_hello));
  assert_int_equal(buf[0], 'Z');
  assert_int_equal(dsv4_tokenizer_decode(tok, k_hello_ids, N_OF(k_hello_ids), 0, buf, len + 1, &len), DSV4_OK);
  assert_string_equal(buf, k_hello);
  /* skip special */
  const int32_t with_special[] = {0, 42, 1, 766, 767};
  assert_int_equal(dsv4_tokenizer_decode(tok, with_special, 5, 0, buf, sizeof buf, &len), DSV4_OK);
  assert_string_equal(buf, "<｜begin▁of▁sentence｜>H<｜end▁of▁sentence｜><｜dspark▁noise｜><｜deepseek_image｜>");
  assert_int_equal(dsv4_tokenizer_decode(tok, with_special, 5, DSV4_DECODE_F_SKIP_SPECIAL, buf, sizeof buf, &len),
                   DSV4_OK);
  assert_string_equal(buf, "H");
  /* empty, bad flags, negative id */
  assert_int_equal(dsv4_tokenizer_decode(tok, NULL, 0, 0, buf, sizeof buf, &len), DSV4_OK);
  assert_int_equal(len, 0);
  assert_string_equal(buf, "");
  assert_int_equal(dsv4_tokenizer_decode(tok, k_hello_ids, 1, 0x80, buf, sizeof buf, &len), DSV4_ERR_INVALID_ARG);
  const int32_t neg[] = {42, -2};
  assert_int_equal(dsv4_tokenizer_decode(tok, neg, 2, 0, buf, sizeof buf, &len), DSV4_ERR_INVALID_TOKEN);
  assert_non_null(strstr(dsv4_tokenizer_last_error(tok), "-2"));
  assert_int_equal(dsv4_tokenizer_decode(tok, NULL, 2, 0, buf, sizeof buf, &len), DSV4_ERR_INVALID_ARG);
}

static void roundtrip_and_stream(void **state) {
  dsv4_tokenizer *tok = *state;
  const char *text = "Stream 日本語 🦊 café\r\n<｜end▁of▁sentence｜>";
  size_t n;
  int32_t ids[256];
  assert_int_equal(dsv4_tokenizer_encode(tok, text, strlen(text), ids, 256, &n), DSV4_OK);
  char back[512];
  size_t len;
  assert_int_equal(dsv4_tokenizer_decode(tok, ids, n, 0, back, sizeof back, &len), DSV4_OK);
  assert_string_equal(back, text);

  dsv4_tokenizer_stream *st = NULL;
  assert_int_equal(dsv4_tokenizer_stream_create(tok, 0, &st), DSV4_OK);
  char all[512] = "";
  size_t at = 0;
  int empty_pushes = 0;
  for (size_t i = 0; i < n; i++) {
    const char *piece;
    size_t pl;
    assert_int_equal(dsv4_tokenizer_stream_push(st, ids[i], &piece, &pl), DSV4_OK);
    assert_int_equal(strlen(piece), pl);
    if (pl == 0) empty_pushes++;
    memcpy(all + at, piece, pl);
    at += pl;
  }
  const char *piece;
  size_t pl;
  assert_int_equal(dsv4_tokenizer_stream_flush(st, &piece, &pl), DSV4_OK);
  assert_int_equal(pl, 0);
  all[at] = '\0';
  assert_string_equal(all, text);
  assert_true(empty_pushes > 0); /* the fox's bytes came in more than one token */
  assert_int_equal(dsv4_tokenizer_stream_push(st, -1, &piece, &pl), DSV4_ERR_INVALID_TOKEN);
  assert_non_null(strstr(dsv4_last_error(), "-1"));
  assert_int_equal(dsv4_tokenizer_stream_push(st, 1, NULL, &pl), DSV4_ERR_INVALID_ARG);
  dsv4_tokenizer_stream_free(st);
  dsv4_tokenizer_stream_free(NULL);

  /* skip-special stream */
  assert_int_equal(dsv4_tokenizer_stream_create(tok, DSV4_DECODE_F_SKIP_SPECIAL, &st), DSV4_OK);
  assert_int_equal(dsv4_tokenizer_stream_push(st, 1, &piece, &pl), DSV4_OK);
  assert_int_equal(pl, 0);
  assert_int_equal(dsv4_tokenizer_stream_push(st, 42, &piece, &pl), DSV4_OK);
  assert_string_equal(piece, "H");
  dsv4_tokenizer_stream_free(st);
  st = (dsv4_tokenizer_stream *)&st;
  assert_int_equal(dsv4_tokenizer_stream_create(tok, 0x10, &st), DSV4_ERR_INVALID_ARG);
  assert_null(st);
  assert_int_equal(dsv4_tokenizer_stream_create(NULL, 0, &st), DSV4_ERR_INVALID_ARG);
}

static void load_failures(void **state) {
  (void)state;
  dsv4_tokenizer *tok = (dsv4_tokenizer *)&tok;
  assert_int_equal(dsv4_tokenizer_load("/nonexistent/dsv4-tokenizer", &tok), DSV4_ERR_NOT_FOUND);
  assert_null(tok);
  assert_non_null(strstr(dsv4_last_error(), "tokenizer.json"));
  assert_int_equal(dsv4_tokenizer_load(NULL, &tok), DSV4_ERR_INVALID_ARG);
  assert_int_equal(dsv4_tokenizer_load("/tmp", NULL), DSV4_ERR_INVALID_ARG);
  /* another model type */
  char *tmp = tu_mkdtemp(), *p = tu_join(tmp, "tokenizer.json");
  const char *unigram = "{\"model\": {\"type\": \"Unigram\", \"vocab\": [[\"a\", 0.0]]}}";
  assert_int_equal(tu_write_file(p, unigram, strlen(unigram)), 0);
  assert_int_equal(dsv4_tokenizer_load(tmp, &tok), DSV4_ERR_TOKENIZER);
  assert_null(tok);
  assert_non_null(strstr(dsv4_last_error(), "Unigram"));
  /* the fixture's tokenizer, when present: same special ids as the README */
  const char *fx = tu_fixture("tiny-v41-a");
  if (fx) {
    assert_int_equal(dsv4_tokenizer_load(fx, &tok), DSV4_OK);
    assert_int_equal(dsv4_tokenizer_vocab_size(tok), 640);
    assert_int_equal(dsv4_tokenizer_special_id(tok, DSV4_TOKEN_DSPARK_NOISE), 638);
    assert_int_equal(dsv4_tokenizer_special_id(tok, DSV4_TOKEN_IMAGE), 639);
    dsv4_tokenizer_free(tok);
  }
  dsv4_tokenizer_free(NULL);
  tu_rmtree(tmp);
  free(tmp);
  free(p);
}

int tu_run_suite(void) {
  const struct CMUnitTest tests[] = {
    cmocka_unit_test(facts_and_lookups),
    cmocka_unit_test(encode_buffer_convention),
    cmocka_unit_test(encode_rejects_bad_input),
    cmocka_unit_test(decode_buffer_convention),
    cmocka_unit_test(roundtrip_and_stream),
    cmocka_unit_test(load_failures),
  };
  return cmocka_run_group_tests_name("tokenizer_api", tests, setup, teardown);
}
