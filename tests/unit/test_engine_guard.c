/*
 * What the engine never returns (public API, tiny e2e fixture):
 * - a token from logits that are not finite: a checkpoint whose head (and
 *   draft head) row 5 is NaN makes every output row hold a NaN; prefill,
 *   decode, draft and verify, greedy, sampled and logits-only, all answer
 *   DSV4_ERR_NOT_FINITE and leave every sequence as it was (they used to
 *   return token 0, or -1 with DSV4_OK from sampled verify);
 * - an id the tokenizer does not define: with a tokenizer.json cut to ids
 *   below 600 (the head keeps 640 rows, as the release pads its 129,280),
 *   hot sampling, greedy decoding, drafts and verify only ever produce ids
 *   below 600 (a padded row used to be drawn and the next step failed with
 *   DSV4_ERR_INVALID_TOKEN: the Engram map does not define it).
 */
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "dsv4/dsv4.h"
#include "test_util.h"

#define FIX "tiny-v41-e2e-a"
#define SHARD2 "model-00002-of-00003.safetensors"
#define MAXB 64

static const char *k_files[] = {"config.json", "model.safetensors.index.json",
                                "model-00001-of-00003.safetensors", SHARD2,
                                "model-00003-of-00003.safetensors", "tokenizer.json",
                                "tokenizer_config.json"};

/* A scratch checkpoint: symlinks to the fixture, except `skip` (written by the caller). */
static char *scratch(const char *skip) {
  const char *src = tu_fixture_or_skip(FIX);
  char *dir = tu_mkdtemp();
  for (size_t i = 0; i < sizeof k_files / sizeof *k_files; i++) {
    if (!strcmp(k_files[i], skip)) continue;
    char *from = tu_join(src, k_files[i]), *to = tu_join(dir, k_files[i]);
    assert_int_equal(symlink(from, to), 0);
    free(from);
    free(to);
  }
  return dir;
}

/* Shard 2 with row `row` of head.weight and of the draft's markov head set to bf16 NaN. */
static void write_nan_shard(const char *dir, int row) {
  char *in = tu_join(tu_fixture_or_skip(FIX), SHARD2), *out = tu_join(dir, SHARD2);
  size_t len;
  unsigned char *b = (unsigned char *)tu_read_file(in, &len);
  assert_non_null(b);
  uint64_t hl = 0;
  for (int i = 7; i >= 0; i--) hl = (hl << 8) | b[i];
  json_t *h = json_loadb((const char *)b + 8, (size_t)hl, 0, NULL);
  assert_non_null(h);
  const char *names[] = {"head.weight", "mtp.2.markov_head.head.weight"};
  for (int k = 0; k < 2; k++) {
    json_t *t = json_object_get(h, names[k]);
    assert_non_null(t);
    assert_string_equal(json_string_value(json_object_get(t, "dtype")), "BF16");
    const size_t cols = (size_t)json_integer_value(json_array_get(json_object_get(t, "shape"), 1));
    const size_t at = 8 + (size_t)hl + (size_t)json_integer_value(json_array_get(json_object_get(t, "data_offsets"), 0));
    for (size_t c = 0; c < cols; c++) {
      b[at + ((size_t)row * cols + c) * 2] = 0xC0; /* 0x7FC0 little-endian: a quiet NaN */
      b[at + ((size_t)row * cols + c) * 2 + 1] = 0x7F;
    }
  }
  json_decref(h);
  assert_int_equal(tu_write_file(out, b, len), 0);
  free(b);
  free(in);
  free(out);
}

static dsv4_engine *engine_on(const char *dir, dsv4_model **m) {
  assert_int_equal(dsv4_model_load(dir, NULL, m), DSV4_OK);
  dsv4_engine_params ep;
  assert_int_equal(dsv4_engine_params_init(&ep, sizeof ep), DSV4_OK);
  ep.max_sequences = 3;
  ep.max_context = 256;
  dsv4_engine *e = NULL;
  if (dsv4_engine_create(*m, &ep, &e)) fail_msg("engine: %s", dsv4_last_error());
  return e;
}

static int64_t len_of(dsv4_engine *e, int64_t id) {
  int64_t n = -1;
  assert_int_equal(dsv4_engine_seq_length(e, id, &n), DSV4_OK);
  return n;
}

static void expect_not_finite(dsv4_engine *e, const char *what, dsv4_status st) {
  if (st != DSV4_ERR_NOT_FINITE)
    fail_msg("%s: status %d (%s), want DSV4_ERR_NOT_FINITE; %s", what, st, dsv4_status_string(st),
             dsv4_last_error());
  if (!strstr(dsv4_last_error(), "NaN")) fail_msg("%s: message %s", what, dsv4_last_error());
  tu_catalogue("engine calls on non-finite logits", what, st, dsv4_last_error());
}

static void nan_logits_refused_everywhere(void **state) {
  (void)state;
  char *dir = scratch(SHARD2);
  write_nan_shard(dir, 5);
  dsv4_model *m;
  dsv4_engine *e = engine_on(dir, &m);
  dsv4_model_info mi;
  assert_int_equal(dsv4_model_get_info(m, &mi, sizeof mi), DSV4_OK);
  const int32_t B = mi.dspark_block_size, V = mi.vocab_size;
  assert_true(B >= 1 && B <= MAXB);
  const int32_t prompt[] = {0, 17, 42, 99, 5, 300, 7, 12};
  int64_t a, b;
  assert_int_equal(dsv4_engine_seq_create(e, &a), DSV4_OK);
  assert_int_equal(dsv4_engine_seq_create(e, &b), DSV4_OK);
  /* without outputs the head never runs: these steps succeed */
  assert_int_equal(dsv4_engine_prefill(e, a, prompt, 8, NULL, NULL, NULL), DSV4_OK);
  assert_int_equal(dsv4_engine_prefill(e, b, prompt, 5, NULL, NULL, NULL), DSV4_OK);
  dsv4_sampling_params hot;
  assert_int_equal(dsv4_sampling_params_init(&hot, sizeof hot), DSV4_OK);
  hot.temperature = 1.0f;
  hot.seed = 7;
  const dsv4_sampling_params *modes[] = {NULL, &hot};
  float *logits = malloc(sizeof(float) * (size_t)V * 2);
  int32_t tok[2] = {-2, -2}, drafts[MAXB], nd = B, acc = -2, next = -2;
  const int64_t ab[2] = {a, b};
  const int32_t in[2] = {3, 4};
  for (int k = 0; k < 2; k++) {
    const dsv4_sampling_params *sp = modes[k];
    char w[64];
    snprintf(w, sizeof w, "prefill (%s)", k ? "sampled" : "greedy");
    expect_not_finite(e, w, dsv4_engine_prefill(e, a, in, 2, sp, NULL, tok));
    expect_not_finite(e, "prefill (logits only)", dsv4_engine_prefill(e, a, in, 2, sp, logits, NULL));
    snprintf(w, sizeof w, "decode batch (%s)", k ? "sampled" : "greedy");
    expect_not_finite(e, w, dsv4_engine_decode(e, 2, ab, in, sp, NULL, tok));
    expect_not_finite(e, "decode (logits only)", dsv4_engine_decode(e, 1, &a, in, sp, logits, NULL));
    snprintf(w, sizeof w, "draft (%s)", k ? "sampled" : "greedy");
    expect_not_finite(e, w, dsv4_engine_draft(e, 1, &a, in, sp, drafts, NULL));
    for (int32_t j = 0; j < B; j++) drafts[j] = 20 + j;
    snprintf(w, sizeof w, "verify (%s)", k ? "sampled" : "greedy");
    expect_not_finite(e, w, dsv4_engine_verify(e, 1, &a, in, &nd, drafts, sp, &acc, &next));
    /* every sequence as it was */
    assert_int_equal(len_of(e, a), 8);
    assert_int_equal(len_of(e, b), 5);
  }
  assert_int_equal(next, -2); /* verify wrote no token */
  /* the sequences still take input, and can be freed */
  assert_int_equal(dsv4_engine_prefill(e, a, in, 2, NULL, NULL, NULL), DSV4_OK);
  assert_int_equal(len_of(e, a), 10);
  assert_int_equal(dsv4_engine_seq_free(e, a), DSV4_OK);
  assert_int_equal(dsv4_engine_seq_free(e, b), DSV4_OK);
  free(logits);
  dsv4_engine_free(e);
  dsv4_model_free(m);
  tu_rmtree(dir);
  free(dir);
}

/* tokenizer.json without ids >= n: vocab entries, merges that use them, added tokens. */
static void write_cut_tokenizer(const char *dir, int32_t n) {
  char *in = tu_join(tu_fixture_or_skip(FIX), "tokenizer.json"), *out = tu_join(dir, "tokenizer.json");
  json_t *t = json_load_file(in, 0, NULL);
  assert_non_null(t);
  json_t *model = json_object_get(t, "model"), *vocab = json_object_get(model, "vocab");
  const char *key;
  json_t *v, *tmp;
  json_object_foreach_safe(vocab, tmp, key, v) {
    if (json_integer_value(v) >= n) json_object_del(vocab, key);
  }
  json_t *merges = json_object_get(model, "merges"), *kept = json_array();
  size_t i;
  json_array_foreach(merges, i, v) {
    const char *l = json_string_value(json_array_get(v, 0)), *r = json_string_value(json_array_get(v, 1));
    char whole[256];
    snprintf(whole, sizeof whole, "%s%s", l, r);
    if (json_object_get(vocab, l) && json_object_get(vocab, r) && json_object_get(vocab, whole))
      json_array_append(kept, v);
  }
  json_object_set_new(model, "merges", kept);
  json_t *added = json_object_get(t, "added_tokens"), *akept = json_array();
  json_array_foreach(added, i, v) {
    if (json_integer_value(json_object_get(v, "id")) < n) json_array_append(akept, v);
  }
  json_object_set_new(t, "added_tokens", akept);
  assert_int_equal(json_dump_file(t, out, 0), 0);
  json_decref(t);
  free(in);
  free(out);
}

/* config.json with text_config.engram_compressed_vocab_size = classes (the
 * Engram token map of the cut tokenizer has fewer classes). */
static void write_config(const char *dir, int classes) {
  char *in = tu_join(tu_fixture_or_skip(FIX), "config.json"), *out = tu_join(dir, "config.json");
  json_t *c = json_load_file(in, JSON_PRESERVE_ORDER, NULL);
  assert_non_null(c);
  json_object_set_new(json_object_get(c, "text_config"), "engram_compressed_vocab_size", json_integer(classes));
  assert_int_equal(json_dump_file(c, out, JSON_INDENT(2) | JSON_PRESERVE_ORDER), 0);
  json_decref(c);
  free(in);
  free(out);
}

static void ids_past_tokenizer_never_drawn(void **state) {
  (void)state;
  enum { N = 600 };
  char *dir = scratch("tokenizer.json");
  write_cut_tokenizer(dir, N);
  char *cfg = tu_join(dir, "config.json");
  assert_int_equal(unlink(cfg), 0);
  free(cfg);
  write_config(dir, 506); /* the cut tokenizer's 600 ids normalise to 506 classes */
  dsv4_tokenizer *tk;
  assert_int_equal(dsv4_tokenizer_load(dir, &tk), DSV4_OK);
  assert_int_equal(dsv4_tokenizer_vocab_size(tk), N);
  dsv4_tokenizer_free(tk);
  dsv4_model *m;
  dsv4_engine *e = engine_on(dir, &m);
  dsv4_model_info mi;
  assert_int_equal(dsv4_model_get_info(m, &mi, sizeof mi), DSV4_OK);
  assert_true(mi.vocab_size > N);
  const int32_t B = mi.dspark_block_size;
  dsv4_sampling_params hot;
  assert_int_equal(dsv4_sampling_params_init(&hot, sizeof hot), DSV4_OK);
  hot.temperature = 4.0f; /* nearly uniform: a padded row would come up within a few steps */
  const int32_t prompt[] = {0, 17, 42, 99, 5, 300, 7, 12};
  long drawn = 0;
  for (uint64_t seed = 1; seed <= 3; seed++) {
    hot.seed = seed;
    int64_t id;
    int32_t t;
    assert_int_equal(dsv4_engine_seq_create(e, &id), DSV4_OK);
    assert_int_equal(dsv4_engine_prefill(e, id, prompt, 8, &hot, NULL, &t), DSV4_OK);
    for (int step = 0; step < 60; step++, drawn++) {
      if (t < 0 || t >= N) fail_msg("seed %llu step %d: drew %d, past the tokenizer's %d ids",
                                    (unsigned long long)seed, step, t, N);
      dsv4_status s = dsv4_engine_decode(e, 1, &id, &t, &hot, NULL, &t);
      if (s) fail_msg("seed %llu step %d: %s", (unsigned long long)seed, step, dsv4_last_error());
    }
    int32_t d[MAXB], acc, next, nd = B;
    for (int r = 0; r < 10; r++) {
      assert_int_equal(dsv4_engine_draft(e, 1, &id, &t, &hot, d, NULL), DSV4_OK);
      for (int32_t j = 0; j < B; j++)
        if (d[j] < 0 || d[j] >= N) fail_msg("draft %d is %d, past %d", j, d[j], N);
      assert_int_equal(dsv4_engine_verify(e, 1, &id, &t, &nd, d, &hot, &acc, &next), DSV4_OK);
      if (next < 0 || next >= N) fail_msg("verify produced %d, past %d", next, N);
      t = next;
    }
    assert_int_equal(dsv4_engine_seq_free(e, id), DSV4_OK);
  }
  assert_true(drawn >= 180);
  dsv4_engine_free(e);
  dsv4_model_free(m);
  tu_rmtree(dir);
  free(dir);
}

int tu_run_suite(void) {
  const struct CMUnitTest tests[] = {
    cmocka_unit_test(nan_logits_refused_everywhere),
    cmocka_unit_test(ids_past_tokenizer_never_drawn),
  };
  return cmocka_run_group_tests_name("engine_guard", tests, NULL, NULL);
}
