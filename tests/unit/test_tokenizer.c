/*
 * Tokenizer (lib/io/tokenizer*.c) against the reference `tokenizers` package:
 *  - every fixture under DSV4_FIXTURES: ids of each prompt, source paragraph and
 *    tokenizer test string equal tok.* of golden.safetensors (and prompts.json);
 *  - the project's tiny tokenizer (data/tiny-tokenizer): golden.json
 *    encodings, the decoding of every id, and patched variants that pin added-token
 *    flags, normalizers, Split behaviours, Oniguruma escapes, ignore_merges;
 *  - decode(encode(x)) == x on those texts and a stress set, up to 1 MB inputs;
 *  - streaming decode, partial UTF-8 tokens;
 *  - invalid UTF-8 and NUL rejected; malformed tokenizer.json cases give their
 *    status and never crash.
 */
#include <dirent.h>
#include <jansson.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>

#include "test_util.h"
#include "io/safetensors.h"
#include "io/tokenizer.h"
#include "io/tokenizer_internal.h"

static char *tiny_dir(void) {
  const char *root = getenv("DSV4_SOURCE_ROOT");
  assert_non_null(root);
  return tu_join(root, "data/tiny-tokenizer");
}

static dsv4i_tokenizer *load_ok(const char *dir) {
  dsv4i_tokenizer *tok = NULL;
  dsv4_status s = dsv4i_tokenizer_load(dir, &tok);
  if (s != DSV4_OK) fail_msg("load %s: %d %s", dir, s, dsv4i_error_message());
  assert_non_null(tok);
  return tok;
}

static double now_s(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

/* encode; compare with ref (when given); decode back to the same bytes */
static void check_text(const dsv4i_tokenizer *tok, const char *text, size_t len, const int64_t *ref,
                       size_t n_ref, const char *what) {
  int32_t *ids = NULL;
  size_t n = 0;
  dsv4_status s = dsv4i_tokenizer_encode(tok, text, len, &ids, &n);
  if (s != DSV4_OK) fail_msg("%s: encode failed: %s", what, dsv4i_error_message());
  if (ref) {
    if (n != n_ref) fail_msg("%s: %zu ids, reference %zu", what, n, n_ref);
    for (size_t i = 0; i < n; i++)
      if (ids[i] != ref[i]) fail_msg("%s: id %zu is %d, reference %lld", what, i, ids[i], (long long)ref[i]);
  }
  dsv4i_str out = {0};
  assert_int_equal(dsv4i_tokenizer_decode(tok, ids, n, &out), DSV4_OK);
  if (out.len != len || memcmp(dsv4i_str_cstr(&out), text, len) != 0)
    fail_msg("%s: decode(encode(x)) != x (%zu vs %zu bytes)", what, out.len, len);
  dsv4i_str_free(&out);
  free(ids);
}

static int64_t *json_ids(const json_t *arr, size_t *n) {
  assert_true(json_is_array(arr));
  *n = json_array_size(arr);
  int64_t *v = calloc(*n + 1, sizeof *v);
  for (size_t i = 0; i < *n; i++) v[i] = json_integer_value(json_array_get(arr, i));
  return v;
}

/* ---- fixtures: tok.* of golden.safetensors -------------------------------- */

static const int64_t *golden_ids(const dsv4i_st_file *g, const char *name, size_t *n, int64_t **owned) {
  const dsv4i_st_tensor *t = dsv4i_st_find(g, name);
  if (!t) fail_msg("golden.safetensors has no %s", name);
  assert_int_equal(t->dtype, DSV4_DTYPE_I64);
  assert_int_equal(t->ndim, 1);
  *n = (size_t)t->shape[0];
  *owned = malloc((*n + 1) * sizeof **owned);
  memcpy(*owned, dsv4i_st_data(g, t), *n * sizeof **owned); /* may be unaligned */
  return *owned;
}

static void check_against_both(const dsv4i_tokenizer *tok, const dsv4i_st_file *g, const char *tensor,
                               const json_t *text, const json_t *enc, const char *fixture) {
  size_t n, nj;
  int64_t *owned;
  const int64_t *ref = golden_ids(g, tensor, &n, &owned);
  int64_t *jref = json_ids(enc, &nj);
  assert_int_equal(n, nj);
  assert_memory_equal(ref, jref, n * sizeof *ref);
  char what[256];
  snprintf(what, sizeof what, "%s %s", fixture, tensor);
  check_text(tok, json_string_value(text), json_string_length(text), ref, n, what);
  free(owned);
  free(jref);
}

static int is_fixture(const char *dir) {
  const char *need[] = {"tokenizer.json", "golden.safetensors", "prompts.json"};
  for (size_t i = 0; i < 3; i++) {
    char *p = tu_join(dir, need[i]);
    struct stat st;
    int ok = stat(p, &st) == 0;
    free(p);
    if (!ok) return 0;
  }
  return 1;
}

static void fixtures_match_reference_ids(void **state) {
  (void)state;
  const char *root_c = tu_fixture_or_skip("");
  char *root = strdup(root_c);
  DIR *d = opendir(root);
  assert_non_null(d);
  int n_fixtures = 0;
  struct dirent *e;
  while ((e = readdir(d))) {
    if (e->d_name[0] == '.') continue;
    char *dir = tu_join(root, e->d_name);
    if (!is_fixture(dir)) {
      free(dir);
      continue;
    }
    n_fixtures++;
    dsv4i_tokenizer *tok = load_ok(dir);
    /* the fixture README: 640 ids; 0 BOS, 1 EOS, 2 pad, 638 DSpark noise, 639 image */
    const dsv4i_special_ids *sp = dsv4i_tokenizer_special(tok);
    assert_int_equal(dsv4i_tokenizer_vocab_size(tok), 640);
    assert_int_equal(sp->bos, 0);
    assert_int_equal(sp->eos, 1);
    assert_int_equal(sp->pad, 2);
    assert_int_equal(sp->dspark_noise, 638);
    assert_int_equal(sp->image, 639);

    char *gp = tu_join(dir, "golden.safetensors"), *pp = tu_join(dir, "prompts.json");
    dsv4i_st_file g;
    if (dsv4i_st_open(gp, &g) != DSV4_OK) fail_msg("%s: %s", gp, dsv4i_error_message());
    json_error_t jerr;
    json_t *prompts = json_load_file(pp, 0, &jerr);
    assert_non_null(prompts);
    const char *key;
    json_t *p;
    int n_checked = 0;
    json_object_foreach(json_object_get(prompts, "prompts"), key, p) {
      char name[128];
      snprintf(name, sizeof name, "tok.%s", key);
      check_against_both(tok, &g, name, json_object_get(p, "text"), json_object_get(p, "encoding"), e->d_name);
      snprintf(name, sizeof name, "tok.%s.source", key);
      check_against_both(tok, &g, name, json_object_get(p, "source_text"),
                         json_object_get(p, "source_encoding"), e->d_name);
      n_checked += 2;
    }
    const json_t *tests = json_object_get(prompts, "tokenizer_tests");
    for (size_t i = 0; i < json_array_size(tests); i++) {
      char name[64];
      snprintf(name, sizeof name, "tok.test%zu", i);
      const json_t *t = json_array_get(tests, i);
      check_against_both(tok, &g, name, json_object_get(t, "text"), json_object_get(t, "encoding"), e->d_name);
      n_checked++;
    }
    /* every tok.* tensor was compared */
    size_t n_tok = 0;
    for (size_t i = 0; i < g.n_tensors; i++)
      if (strncmp(g.tensors[i].name, "tok.", 4) == 0) n_tok++;
    assert_int_equal(n_tok, (size_t)n_checked);
    json_decref(prompts);
    dsv4i_st_close(&g);
    free(gp);
    free(pp);
    dsv4i_tokenizer_free(tok);
    free(dir);
  }
  closedir(d);
  free(root);
  assert_true(n_fixtures >= 1);
}

/* ---- the project's tiny tokenizer ---------------------------------------- */

static json_t *tiny_golden(void) {
  char *dir = tiny_dir(), *p = tu_join(dir, "golden.json");
  json_error_t jerr;
  json_t *g = json_load_file(p, JSON_ALLOW_NUL, &jerr);
  if (!g) fail_msg("%s: %s", p, jerr.text);
  free(p);
  free(dir);
  return g;
}

static void tiny_matches_golden(void **state) {
  (void)state;
  char *dir = tiny_dir();
  dsv4i_tokenizer *tok = load_ok(dir);
  json_t *g = tiny_golden();
  assert_int_equal(dsv4i_tokenizer_vocab_size(tok), json_integer_value(json_object_get(g, "vocab_size")));
  const json_t *sp = json_object_get(g, "special");
  const dsv4i_special_ids *s = dsv4i_tokenizer_special(tok);
  assert_int_equal(s->bos, json_integer_value(json_object_get(sp, "bos")));
  assert_int_equal(s->eos, json_integer_value(json_object_get(sp, "eos")));
  assert_int_equal(s->pad, json_integer_value(json_object_get(sp, "pad")));
  assert_int_equal(s->dspark_noise, json_integer_value(json_object_get(sp, "dspark_noise")));
  assert_int_equal(s->image, json_integer_value(json_object_get(sp, "image")));

  const json_t *encs = json_object_get(g, "encodings");
  assert_true(json_array_size(encs) >= 20);
  for (size_t i = 0; i < json_array_size(encs); i++) {
    const json_t *e = json_array_get(encs, i);
    const json_t *text = json_object_get(e, "text");
    size_t n;
    int64_t *ref = json_ids(json_object_get(e, "ids"), &n);
    char what[64];
    snprintf(what, sizeof what, "tiny encodings[%zu]", i);
    check_text(tok, json_string_value(text), json_string_length(text), ref, n, what);
    free(ref);
  }
  /* decode([id]) of every id, partial UTF-8 tokens included */
  const json_t *dec = json_object_get(g, "decode_single");
  assert_int_equal(json_array_size(dec), (size_t)dsv4i_tokenizer_vocab_size(tok));
  for (size_t i = 0; i < json_array_size(dec); i++) {
    const json_t *want = json_array_get(dec, i);
    int32_t id = (int32_t)i;
    dsv4i_str out = {0};
    assert_int_equal(dsv4i_tokenizer_decode(tok, &id, 1, &out), DSV4_OK);
    if (out.len != json_string_length(want) || memcmp(dsv4i_str_cstr(&out), json_string_value(want), out.len))
      fail_msg("decode([%zu]) = '%s', reference '%s'", i, dsv4i_str_cstr(&out), json_string_value(want));
    dsv4i_str_free(&out);
  }
  json_decref(g);
  dsv4i_tokenizer_free(tok);
  free(dir);
}

/* Write `root` as dir/tokenizer.json (+ the tiny tokenizer_config.json). */
static void write_tokenizer(const char *dir, const json_t *root) {
  char *p = tu_join(dir, "tokenizer.json");
  assert_int_equal(json_dump_file(root, p, JSON_COMPACT), 0);
  free(p);
}

static json_t *tiny_json(void) {
  char *dir = tiny_dir(), *p = tu_join(dir, "tokenizer.json");
  json_error_t jerr;
  json_t *t = json_load_file(p, 0, &jerr);
  assert_non_null(t);
  free(p);
  free(dir);
  return t;
}

static void apply_patch(json_t *t, const json_t *patch) {
  const char *key;
  json_t *v;
  json_object_foreach((json_t *)patch, key, v) {
    if (strcmp(key, "added_tokens+") == 0) {
      json_array_extend(json_object_get(t, "added_tokens"), v);
    } else if (strncmp(key, "model.", 6) == 0) {
      json_object_set(json_object_get(t, "model"), key + 6, v);
    } else {
      json_object_set(t, key, v);
    }
  }
}

static void tiny_variants_match_golden(void **state) {
  (void)state;
  json_t *g = tiny_golden();
  const json_t *variants = json_object_get(g, "variants");
  assert_true(json_object_size(variants) >= 8);
  char *tmp = tu_mkdtemp();
  const char *name;
  json_t *v;
  json_object_foreach((json_t *)variants, name, v) {
    json_t *t = tiny_json();
    apply_patch(t, json_object_get(v, "patch"));
    write_tokenizer(tmp, t);
    json_decref(t);
    dsv4i_tokenizer *tok = load_ok(tmp);
    const json_t *encs = json_object_get(v, "encodings");
    for (size_t i = 0; i < json_array_size(encs); i++) {
      const json_t *e = json_array_get(encs, i);
      const json_t *text = json_object_get(e, "text"), *want = json_object_get(e, "decoded");
      int32_t *ids;
      size_t n, nref;
      assert_int_equal(dsv4i_tokenizer_encode(tok, json_string_value(text), json_string_length(text), &ids, &n),
                       DSV4_OK);
      int64_t *ref = json_ids(json_object_get(e, "ids"), &nref);
      if (n != nref) fail_msg("variant %s text %zu: %zu ids, reference %zu", name, i, n, nref);
      for (size_t k = 0; k < n; k++)
        if (ids[k] != ref[k]) fail_msg("variant %s text %zu: id %zu is %d, reference %lld", name, i, k, ids[k],
                                       (long long)ref[k]);
      dsv4i_str out = {0};
      assert_int_equal(dsv4i_tokenizer_decode(tok, ids, n, &out), DSV4_OK);
      if (out.len != json_string_length(want) || memcmp(dsv4i_str_cstr(&out), json_string_value(want), out.len))
        fail_msg("variant %s text %zu: decoded '%s', reference '%s'", name, i, dsv4i_str_cstr(&out),
                 json_string_value(want));
      dsv4i_str_free(&out);
      free(ref);
      free(ids);
    }
    dsv4i_tokenizer_free(tok);
  }
  json_decref(g);
  tu_rmtree(tmp);
  free(tmp);
}

/* merges written as "a b" strings give the same tokenizer as [a, b] pairs */
static void merges_as_strings_same_ids(void **state) {
  (void)state;
  json_t *t = tiny_json();
  json_t *merges = json_object_get(json_object_get(t, "model"), "merges");
  for (size_t i = 0; i < json_array_size(merges); i++) {
    json_t *m = json_array_get(merges, i);
    char buf[512];
    snprintf(buf, sizeof buf, "%s %s", json_string_value(json_array_get(m, 0)),
             json_string_value(json_array_get(m, 1)));
    json_array_set_new(merges, i, json_string(buf));
  }
  char *tmp = tu_mkdtemp();
  write_tokenizer(tmp, t);
  json_decref(t);
  char *dir = tiny_dir();
  dsv4i_tokenizer *a = load_ok(dir), *b = load_ok(tmp);
  const char *text = "The lamplighter came up Harrow Lane, 1998 cafés 日本語 🙂";
  int32_t *ia, *ib;
  size_t na, nb;
  assert_int_equal(dsv4i_tokenizer_encode(a, text, strlen(text), &ia, &na), DSV4_OK);
  assert_int_equal(dsv4i_tokenizer_encode(b, text, strlen(text), &ib, &nb), DSV4_OK);
  assert_int_equal(na, nb);
  assert_memory_equal(ia, ib, na * sizeof *ia);
  assert_true(na < strlen(text)); /* merges did apply */
  free(ia);
  free(ib);
  dsv4i_tokenizer_free(a);
  dsv4i_tokenizer_free(b);
  tu_rmtree(tmp);
  free(tmp);
  free(dir);
}

/* ---- stress set ------------------------------------------------------------ */

static const char *const k_stress[] = {
  "",
  " ",
  "\n",
  "\r\n\r\n \r \n\t\t\r\n",
  "emoji: 🙂🎉👍🏽 👨‍👩‍👧 🧑🏾‍🤝‍🧑🏻 🏳️‍🌈 🇫🇷🇯🇵 ❤️‍🔥 1️⃣",
  "CJK: 日本語のテキスト 中文句子，标点。 한국어 문장 ｶﾀｶﾅ 𠀋𡈽",
  "combining: e\xcc\x81 a\xcc\x88\xcc\x81 n\xcc\x83 Z\xcc\xb7\xcc\x9b\xcd\x8d\xcc\xa1" "a\xcc\xb4l\xcd\x9cg\xcc\xb5o",
  "controls: \x01\x02\x03\x07\x08\x0b\x0c\x0e\x1b[31mred\x1b[0m\x1f\x7f \xc2\x80\xc2\x85\xc2\x9f",
  "spaces: \xc2\xa0\xe2\x80\x80\xe2\x80\xaf\xe3\x80\x80\xe1\xa0\x8e\xe2\x80\x8b\xef\xbb\xbf end",
  "<｜begin▁of▁sentence｜>",
  "<｜end▁of▁sentence｜><｜end▁of▁sentence｜><｜begin▁of▁sentence｜>",
  "a<｜▁pad▁｜>b <｜dspark▁noise｜> c<｜deepseek_image｜>d",
  "<｜begin▁of▁sentence｜ <｜ ｜> <｜begin▁of▁sentence｜<｜begin▁of▁sentence｜>>",
  "12345678901234567890 3.14159 1e-9 0xFF ١٢٣ ½ Ⅻ",
  "mixed\r\nline\rendings\n\r\n\n\r",
  "\xf4\x8f\xbf\xbf \xef\xbf\xbf \xee\x80\x80 private and max code points",
  "tabs\t\t\tand    runs     of      spaces       x",
};

static void roundtrip_stress_set(void **state) {
  (void)state;
  char *dir = tiny_dir();
  dsv4i_tokenizer *tok = load_ok(dir);
  for (size_t i = 0; i < DSV4I_ARRAY_LEN(k_stress); i++) {
    char what[64];
    snprintf(what, sizeof what, "stress[%zu]", i);
    check_text(tok, k_stress[i], strlen(k_stress[i]), NULL, 0, what);
  }
  /* special tokens are single ids, also next to text */
  int32_t *ids;
  size_t n;
  const char *t = "x<｜begin▁of▁sentence｜>y";
  assert_int_equal(dsv4i_tokenizer_encode(tok, t, strlen(t), &ids, &n), DSV4_OK);
  assert_int_equal(n, 3);
  assert_int_equal(ids[1], 0);
  free(ids);
  dsv4i_tokenizer_free(tok);
  free(dir);
}

/* 1 MB inputs: must stay fast (no quadratic pass) and round-trip exactly. */
static void one_megabyte_inputs(void **state) {
  (void)state;
  char *dir = tiny_dir();
  dsv4i_tokenizer *tok = load_ok(dir);
  const size_t mb = (size_t)1 << 20;
  char *buf = malloc(mb + 64);
  struct { const char *name; size_t size; } kinds[] = {
    {"mixed stress text", mb}, {"one long word", mb}, {"whitespace run", mb / 4}, {"digits", mb / 4},
  };
  for (size_t k = 0; k < DSV4I_ARRAY_LEN(kinds); k++) {
    size_t len = 0;
    if (k == 0) {
      for (size_t i = 0; len < kinds[k].size; i++) {
        const char *s = k_stress[i % DSV4I_ARRAY_LEN(k_stress)];
        size_t l = strlen(s);
        if (len + l > kinds[k].size) break;
        memcpy(buf + len, s, l);
        len += l;
      }
    } else {
      memset(buf, k == 1 ? 'l' : k == 2 ? ' ' : '7', kinds[k].size);
      len = kinds[k].size;
    }
    double t0 = now_s();
    int32_t *ids;
    size_t n;
    assert_int_equal(dsv4i_tokenizer_encode(tok, buf, len, &ids, &n), DSV4_OK);
    double t1 = now_s();
    dsv4i_str out = {0};
    assert_int_equal(dsv4i_tokenizer_decode(tok, ids, n, &out), DSV4_OK);
    double t2 = now_s();
    assert_int_equal(out.len, len);
    assert_memory_equal(out.buf, buf, len);
    fprintf(stderr, "  %-18s %8zu bytes -> %8zu ids: encode %.3f s, decode %.3f s\n", kinds[k].name, len, n,
            t1 - t0, t2 - t1);
    /* generous bound (valgrind runs this too); a quadratic pass takes minutes */
    assert_true(t1 - t0 < 60.0);
    dsv4i_str_free(&out);
    free(ids);
  }
  free(buf);
  dsv4i_tokenizer_free(tok);
  free(dir);
}

/* ---- partial UTF-8 and streaming ----------------------------------------- */

static void partial_tokens_and_streaming(void **state) {
  (void)state;
  char *dir = tiny_dir();
  dsv4i_tokenizer *tok = load_ok(dir);
  /* byte-level tokens of a 4-byte emoji, decoded alone and together */
  const char *emoji = "\xf0\x9f\xa6\x8a"; /* U+1F98A, not in the training text */
  int32_t *ids;
  size_t n;
  assert_int_equal(dsv4i_tokenizer_encode(tok, emoji, 4, &ids, &n), DSV4_OK);
  assert_true(n >= 2);
  dsv4i_str out = {0};
  assert_int_equal(dsv4i_tokenizer_decode(tok, ids, 1, &out), DSV4_OK);
  assert_string_equal(out.buf, "\xef\xbf\xbd"); /* U+FFFD */
  dsv4i_str_free(&out);
  dsv4i_str raw = {0};
  for (size_t i = 0; i < n; i++) assert_int_equal(dsv4i_tokenizer_token_bytes(tok, ids[i], &raw), DSV4_OK);
  assert_int_equal(raw.len, 4);
  assert_memory_equal(raw.buf, emoji, 4);
  dsv4i_str_free(&raw);
  free(ids);

  /* the id string is the byte-level spelling; added tokens are their content */
  assert_string_equal(dsv4i_tokenizer_id_to_token(tok, 0), "<｜begin▁of▁sentence｜>");
  int32_t sp = dsv4i_tokenizer_token_to_id(tok, "\xc4\xa0", 2); /* "Ġ" = byte 0x20 */
  assert_true(sp >= 0);
  raw = (dsv4i_str){0};
  assert_int_equal(dsv4i_tokenizer_token_bytes(tok, sp, &raw), DSV4_OK);
  assert_string_equal(raw.buf, " ");
  dsv4i_str_free(&raw);
  assert_null(dsv4i_tokenizer_id_to_token(tok, -1));
  assert_null(dsv4i_tokenizer_id_to_token(tok, dsv4i_tokenizer_vocab_size(tok)));
  assert_int_equal(dsv4i_tokenizer_token_bytes(tok, dsv4i_tokenizer_vocab_size(tok), &raw), DSV4_ERR_INVALID_TOKEN);
  assert_int_equal(dsv4i_tokenizer_token_bytes(tok, -1, &raw), DSV4_ERR_INVALID_TOKEN);
  dsv4i_str_free(&raw);

  /* streaming: every piece is valid UTF-8, the pieces add up to decode() */
  const char *text = "Stream: 日本語 🦊🙂 e\xcc\x81 <｜end▁of▁sentence｜> done";
  assert_int_equal(dsv4i_tokenizer_encode(tok, text, strlen(text), &ids, &n), DSV4_OK);
  for (int skip = 0; skip <= 1; skip++) {
    dsv4i_detok d;
    dsv4i_detok_init(&d, tok, skip);
    dsv4i_str all = {0};
    int held = 0;
    for (size_t i = 0; i < n; i++) {
      dsv4i_str piece = {0};
      assert_int_equal(dsv4i_detok_push(&d, ids[i], &piece), DSV4_OK);
      const char *why;
      assert_int_equal(dsv4i_tk_utf8_check(piece.buf, piece.len, &why), piece.len);
      if (d.pending.len) held = 1;
      dsv4i_str_append(&all, piece.buf, piece.len);
      dsv4i_str_free(&piece);
    }
    assert_true(held); /* multi-byte characters did span tokens */
    dsv4i_str tail = {0};
    assert_int_equal(dsv4i_detok_flush(&d, &tail), DSV4_OK);
    assert_int_equal(tail.len, 0);
    dsv4i_str_free(&tail);
    dsv4i_str ref = {0};
    assert_int_equal(dsv4i_tokenizer_decode_ex(tok, ids, n, skip, &ref), DSV4_OK);
    assert_int_equal(all.len, ref.len);
    assert_memory_equal(all.buf, ref.buf, ref.len);
    if (!skip) assert_string_equal(ref.buf, text);
    else assert_null(strstr(ref.buf, "<｜end"));
    dsv4i_str_free(&ref);
    dsv4i_str_free(&all);
    dsv4i_detok_free(&d);
  }
  /* a stream ending in the middle of a character flushes U+FFFD */
  {
    dsv4i_detok d;
    dsv4i_detok_init(&d, tok, 0);
    int32_t *e;
    size_t ne;
    assert_int_equal(dsv4i_tokenizer_encode(tok, emoji, 4, &e, &ne), DSV4_OK);
    dsv4i_str piece = {0};
    assert_int_equal(dsv4i_detok_push(&d, e[0], &piece), DSV4_OK);
    assert_int_equal(piece.len, 0);
    assert_int_equal(dsv4i_detok_flush(&d, &piece), DSV4_OK);
    assert_string_equal(piece.buf, "\xef\xbf\xbd");
    assert_int_equal(dsv4i_detok_push(&d, -3, &piece), DSV4_ERR_INVALID_TOKEN);
    dsv4i_str_free(&piece);
    dsv4i_detok_free(&d);
    free(e);
  }
  /* ids that name no token decode to nothing, as in the reference; negative ids fail */
  int32_t odd[] = {dsv4i_tokenizer_vocab_size(tok) + 5, 42};
  out = (dsv4i_str){0};
  assert_int_equal(dsv4i_tokenizer_decode(tok, odd, 2, &out), DSV4_OK);
  assert_string_equal(out.buf, "H");
  odd[0] = -1;
  assert_int_equal(dsv4i_tokenizer_decode(tok, odd, 2, &out), DSV4_ERR_INVALID_TOKEN);
  dsv4i_str_free(&out);
  free(ids);
  dsv4i_tokenizer_free(tok);
  free(dir);
}

/* ---- invalid input ----------------------------------------------------------- */

static void invalid_utf8_and_nul_rejected(void **state) {
  (void)state;
  static const struct { const char *s; size_t len; size_t at; const char *why; } bad[] = {
    {"ab\xc0\xaf", 4, 2, "overlong"},            /* overlong '/' */
    {"\xe0\x80\xaf", 3, 0, "overlong"},
    {"x\xf0\x80\x80\xaf", 5, 1, "overlong"},
    {"\xed\xa0\x80", 3, 0, "surrogate"},          /* U+D800 */
    {"ok \xed\xbf\xbf", 6, 3, "surrogate"},       /* U+DFFF */
    {"\xe6\x97", 2, 0, "truncated"},              /* half of 日 at the end */
    {"\xf0\x9f\x98", 3, 0, "truncated"},
    {"\xe6\x97x", 3, 0, "invalid"},               /* truncated before ASCII */
    {"a\x80", 2, 1, "continuation"},
    {"\xbf", 1, 0, "continuation"},
    {"\xf4\x90\x80\x80", 4, 0, "U+10FFFF"},
    {"\xf5\x80\x80\x80", 4, 0, "U+10FFFF"},
    {"\xff", 1, 0, "(0xFF): a byte that never appears in UTF-8"},
    {"ab\xf8\x88\x80\x80\x80", 7, 2, "(0xF8): a byte that never appears in UTF-8"},
    {"\xfe", 1, 0, "never appears in UTF-8"},
    {"a\0b", 3, 1, "NUL"},
    {"\0", 1, 0, "NUL"},
  };
  char *dir = tiny_dir();
  dsv4i_tokenizer *tok = load_ok(dir);
  for (size_t i = 0; i < DSV4I_ARRAY_LEN(bad); i++) {
    int32_t *ids = (int32_t *)&ids;
    size_t n = 99;
    dsv4_status s = dsv4i_tokenizer_encode(tok, bad[i].s, bad[i].len, &ids, &n);
    if (s != DSV4_ERR_INVALID_UTF8) fail_msg("case %zu: status %d", i, s);
    char name[32];
    snprintf(name, sizeof name, "invalid_text_%zu", i);
    tu_catalogue("text to encode", name, s, dsv4i_error_message());
    assert_null(ids);
    assert_int_equal(n, 0);
    char at[64];
    snprintf(at, sizeof at, "byte %zu", bad[i].at);
    if (!strstr(dsv4i_error_message(), at) || !strstr(dsv4i_error_message(), bad[i].why))
      fail_msg("case %zu: message '%s' lacks '%s' / '%s'", i, dsv4i_error_message(), at, bad[i].why);
  }
  int32_t *ids;
  size_t n;
  assert_int_equal(dsv4i_tokenizer_encode(tok, NULL, 0, &ids, &n), DSV4_OK);
  assert_int_equal(n, 0);
  assert_int_equal(dsv4i_tokenizer_encode(tok, NULL, 3, &ids, &n), DSV4_ERR_INVALID_ARG);
  assert_int_equal(dsv4i_tokenizer_encode(NULL, "a", 1, &ids, &n), DSV4_ERR_INVALID_ARG);
  dsv4i_tokenizer_free(tok);
  free(dir);
}

/* Decoding no ids gives "" (found by fuzz_tokenizer_encode: with nothing
 * decoded the UTF-8 repair did arithmetic on a NULL buffer; UBSan). */
static void decode_nothing(void **state) {
  (void)state;
  char *dir = tiny_dir();
  dsv4i_tokenizer *tok = load_ok(dir);
  dsv4i_str out = {0};
  assert_int_equal(dsv4i_tokenizer_decode(tok, NULL, 0, &out), DSV4_OK);
  assert_string_equal(dsv4i_str_cstr(&out), "");
  assert_int_equal(out.len, 0);
  dsv4i_str_free(&out);
  dsv4i_tokenizer_free(tok);
  free(dir);
}

/* ---- malformed tokenizer.json -------------------------------------------- */

typedef struct bad_case {
  const char *name;
  void (*mutate)(json_t *t);  /* on the tiny tokenizer.json; NULL: use raw */
  const char *raw;            /* tokenizer.json text when mutate is NULL; NULL: no file */
  const char *config_raw;     /* tokenizer_config.json text, or NULL */
  dsv4_status status;
  const char *msg;            /* substring of the message */
} bad_case;

static json_t *model_of(json_t *t) { return json_object_get(t, "model"); }
static json_t *pretok_seq(json_t *t) { return json_object_get(json_object_get(t, "pre_tokenizer"), "pretokenizers"); }

static void m_unigram(json_t *t) { json_object_set_new(model_of(t), "type", json_string("Unigram")); }
static void m_wordpiece(json_t *t) { json_object_set_new(model_of(t), "type", json_string("WordPiece")); }
static void m_merge_unknown(json_t *t) {
  json_array_append_new(json_object_get(model_of(t), "merges"), json_pack("[ss]", "\xc4\xa0t", "zzqx"));
}
static void m_merge_string_unknown(json_t *t) {
  json_array_set_new(json_object_get(model_of(t), "merges"), 0, json_string("h qqqq"));
}
static void m_merge_result_unknown(json_t *t) {
  json_array_append_new(json_object_get(model_of(t), "merges"), json_pack("[ss]", "Q", "\xc3\xbf"));
}
static void m_merge_three(json_t *t) {
  json_array_set_new(json_object_get(model_of(t), "merges"), 0, json_string("h e l"));
}
static void m_merge_number(json_t *t) { json_array_set_new(json_object_get(model_of(t), "merges"), 3, json_integer(42)); }
static void m_no_model(json_t *t) { json_object_del(t, "model"); }
static void m_vocab_array(json_t *t) { json_object_set_new(model_of(t), "vocab", json_array()); }
static void m_vocab_negative(json_t *t) {
  json_object_set_new(json_object_get(model_of(t), "vocab"), "zz", json_integer(-5));
}
static void m_vocab_huge(json_t *t) {
  json_object_set_new(json_object_get(model_of(t), "vocab"), "zz", json_integer(1ll << 40));
}
static void m_added_bad(json_t *t) {
  json_array_append_new(json_object_get(t, "added_tokens"), json_pack("{si}", "content", 5));
}
static void m_regex_bad(json_t *t) {
  json_object_set_new(json_object_get(json_array_get(pretok_seq(t), 1), "pattern"), "Regex", json_string("(\\p{L}+"));
}
static void m_split_no_pattern(json_t *t) { json_object_del(json_array_get(pretok_seq(t), 0), "pattern"); }
static void m_behavior_bad(json_t *t) {
  json_object_set_new(json_array_get(pretok_seq(t), 0), "behavior", json_string("Sideways"));
}
static void m_normalizer_unknown(json_t *t) {
  json_object_set_new(t, "normalizer", json_pack("{ss}", "type", "Lowercase"));
}
static void m_pretok_unknown(json_t *t) { json_array_append_new(pretok_seq(t), json_pack("{ss}", "type", "Whitespace")); }
static void m_bytelevel_first(json_t *t) {
  json_t *seq = pretok_seq(t);
  json_t *bl = json_incref(json_array_get(seq, 2));
  json_array_remove(seq, 2);
  json_array_insert_new(seq, 0, bl);
}
static void m_decoder_unknown(json_t *t) { json_object_set_new(t, "decoder", json_pack("{ss}", "type", "WordPiece")); }
static void m_dropout(json_t *t) { json_object_set_new(model_of(t), "dropout", json_real(0.1)); }
static void m_byte_fallback(json_t *t) { json_object_set_new(model_of(t), "byte_fallback", json_true()); }
static void m_subword_prefix(json_t *t) { json_object_set_new(model_of(t), "continuing_subword_prefix", json_string("##")); }
static void m_unk_missing(json_t *t) { json_object_set_new(model_of(t), "unk_token", json_string("<unk>")); }
static void m_empty(json_t *t) {
  json_object_set_new(model_of(t), "vocab", json_object());
  json_object_set_new(model_of(t), "merges", json_array());
  json_object_set_new(t, "added_tokens", json_array());
}

static const bad_case k_bad[] = {
  {"model_type_unigram", m_unigram, NULL, NULL, DSV4_ERR_TOKENIZER, "\"Unigram\""},
  {"model_type_wordpiece", m_wordpiece, NULL, NULL, DSV4_ERR_TOKENIZER, "WordPiece"},
  {"merge_unknown_token", m_merge_unknown, NULL, NULL, DSV4_ERR_TOKENIZER, "\"\xc4\xa0t zzqx\" names \"zzqx\""},
  {"merge_string_unknown", m_merge_string_unknown, NULL, NULL, DSV4_ERR_TOKENIZER, "merge #0 \"h qqqq\""},
  {"merge_result_unknown", m_merge_result_unknown, NULL, NULL, DSV4_ERR_TOKENIZER, "\"Q\xc3\xbf\""},
  {"merge_three_parts", m_merge_three, NULL, NULL, DSV4_ERR_TOKENIZER, "two tokens"},
  {"merge_not_string", m_merge_number, NULL, NULL, DSV4_ERR_TOKENIZER, "merge #3"},
  {"model_missing", m_no_model, NULL, NULL, DSV4_ERR_TOKENIZER, "\"model\""},
  {"vocab_not_object", m_vocab_array, NULL, NULL, DSV4_ERR_TOKENIZER, "model.vocab"},
  {"vocab_negative_id", m_vocab_negative, NULL, NULL, DSV4_ERR_TOKENIZER, "\"zz\""},
  {"vocab_huge_id", m_vocab_huge, NULL, NULL, DSV4_ERR_TOKENIZER, "\"zz\""},
  {"added_token_malformed", m_added_bad, NULL, NULL, DSV4_ERR_TOKENIZER, "added_tokens[18]"},
  {"regex_does_not_compile", m_regex_bad, NULL, NULL, DSV4_ERR_TOKENIZER, "does not compile"},
  {"split_without_pattern", m_split_no_pattern, NULL, NULL, DSV4_ERR_TOKENIZER, "pattern"},
  {"split_behavior_unknown", m_behavior_bad, NULL, NULL, DSV4_ERR_TOKENIZER, "Sideways"},
  {"normalizer_unknown", m_normalizer_unknown, NULL, NULL, DSV4_ERR_TOKENIZER, "Lowercase"},
  {"pretokenizer_unknown", m_pretok_unknown, NULL, NULL, DSV4_ERR_TOKENIZER, "Whitespace"},
  {"bytelevel_not_last", m_bytelevel_first, NULL, NULL, DSV4_ERR_TOKENIZER, "ByteLevel must be the last"},
  {"decoder_unknown", m_decoder_unknown, NULL, NULL, DSV4_ERR_TOKENIZER, "decoder \"WordPiece\""},
  {"bpe_dropout", m_dropout, NULL, NULL, DSV4_ERR_TOKENIZER, "dropout"},
  {"bpe_byte_fallback", m_byte_fallback, NULL, NULL, DSV4_ERR_TOKENIZER, "byte_fallback"},
  {"bpe_subword_prefix", m_subword_prefix, NULL, NULL, DSV4_ERR_TOKENIZER, "continuing_subword_prefix"},
  {"unk_token_missing", m_unk_missing, NULL, NULL, DSV4_ERR_TOKENIZER, "<unk>"},
  {"empty_vocabulary", m_empty, NULL, NULL, DSV4_ERR_TOKENIZER, "empty"},
  {"json_syntax", NULL, "{\"model\": {\"type\": \"BPE\",", NULL, DSV4_ERR_JSON, "line"},
  {"json_empty_file", NULL, "", NULL, DSV4_ERR_JSON, "tokenizer.json"},
  {"json_not_object", NULL, "[1, 2, 3]", NULL, DSV4_ERR_JSON, "not a JSON object"},
  {"json_model_not_object", NULL, "{\"model\": 3}", NULL, DSV4_ERR_TOKENIZER, "\"model\""},
  {"no_tokenizer_json", NULL, NULL, NULL, DSV4_ERR_NOT_FOUND, "tokenizer.json"},
  {"config_bad_json", NULL, NULL, "{\"bos_token\": ", DSV4_ERR_JSON, "tokenizer_config.json"},
};

static void run_bad_case(void **state) {
  const bad_case *c = *state;
  char *tmp = tu_mkdtemp();
  if (c->mutate) {
    json_t *t = tiny_json();
    c->mutate(t);
    write_tokenizer(tmp, t);
    json_decref(t);
  } else if (c->config_raw) {
    json_t *t = tiny_json();
    write_tokenizer(tmp, t);
    json_decref(t);
    char *p = tu_join(tmp, "tokenizer_config.json");
    assert_int_equal(tu_write_file(p, c->config_raw, strlen(c->config_raw)), 0);
    free(p);
  } else if (c->raw) {
    char *p = tu_join(tmp, "tokenizer.json");
    assert_int_equal(tu_write_file(p, c->raw, strlen(c->raw)), 0);
    free(p);
  }
  dsv4i_tokenizer *tok = (dsv4i_tokenizer *)&tok;
  dsv4_status s = dsv4i_tokenizer_load(tmp, &tok);
  if (s != c->status) fail_msg("%s: status %d, want %d (%s)", c->name, s, c->status, dsv4i_error_message());
  tu_catalogue("tokenizer.json", c->name, s, dsv4i_error_message());
  assert_null(tok);
  if (!strstr(dsv4i_error_message(), c->msg))
    fail_msg("%s: message '%s' lacks '%s'", c->name, dsv4i_error_message(), c->msg);
  tu_rmtree(tmp);
  free(tmp);
}

/* Random byte damage to tokenizer.json: any status, never a crash or leak. */
static void damaged_files_never_crash(void **state) {
  (void)state;
  char *dir = tiny_dir(), *src = tu_join(dir, "tokenizer.json");
  size_t len;
  char *orig = tu_read_file(src, &len);
  assert_non_null(orig);
  char *tmp = tu_mkdtemp(), *dst = tu_join(tmp, "tokenizer.json");
  char *buf = malloc(len);
  uint64_t rng = 0x9E3779B97F4A7C15ull;
  int loaded = 0;
  for (int round = 0; round < 80; round++) {
    memcpy(buf, orig, len);
    size_t n = len;
    int edits = 1 + round % 4;
    for (int e = 0; e < edits; e++) {
      rng = rng * 6364136223846793005ull + 1442695040888963407ull;
      size_t at = (size_t)(rng >> 33) % n;
      switch ((rng >> 20) % 4) {
      case 0: buf[at] = (char)('a' + (rng >> 8) % 26); break; /* overwrite, often still valid JSON */
      case 1: if ((rng >> 40) % 4 == 0) n = at + 1; break; /* truncate (sometimes) */
      case 2: buf[at] = (char)(rng >> 8); break;               /* any byte */
      default: buf[at] = "\"{}[],:\\"[(rng >> 12) % 8]; /* JSON syntax */
      }
    }
    assert_int_equal(tu_write_file(dst, buf, n), 0);
    dsv4i_tokenizer *tok = NULL;
    dsv4_status s = dsv4i_tokenizer_load(tmp, &tok);
    if (s == DSV4_OK) {
      loaded++;
      int32_t *ids;
      size_t ni;
      const char *text = "damaged <｜begin▁of▁sentence｜> 日本 🙂";
      dsv4_status es = dsv4i_tokenizer_encode(tok, text, strlen(text), &ids, &ni);
      if (es == DSV4_OK) {
        dsv4i_str out = {0};
        assert_int_equal(dsv4i_tokenizer_decode(tok, ids, ni, &out), DSV4_OK);
        dsv4i_str_free(&out);
        free(ids);
      }
      dsv4i_tokenizer_free(tok);
    } else {
      assert_null(tok);
      assert_true(s == DSV4_ERR_JSON || s == DSV4_ERR_TOKENIZER);
      assert_true(strlen(dsv4i_error_message()) > 0);
    }
  }
  fprintf(stderr, "  %d of 80 damaged files still loaded\n", loaded);
  free(buf);
  free(orig);
  tu_rmtree(tmp);
  free(tmp);
  free(dst);
  free(src);
  free(dir);
}

/* After load the tokenizer is read-only: many threads may encode at once. */
typedef struct enc_job {
  const dsv4i_tokenizer *tok;
  const char *text;
  size_t len;
  int32_t *ids;
  size_t n;
  dsv4_status status;
} enc_job;

static void *enc_thread(void *arg) {
  enc_job *j = arg;
  for (int r = 0; r < 20 && j->status == DSV4_OK; r++) {
    free(j->ids);
    j->ids = NULL;
    j->status = dsv4i_tokenizer_encode(j->tok, j->text, j->len, &j->ids, &j->n);
  }
  return NULL;
}

static void concurrent_encode(void **state) {
  (void)state;
  char *dir = tiny_dir();
  dsv4i_tokenizer *tok = load_ok(dir);
  dsv4i_str text = {0};
  for (int r = 0; r < 40; r++)
    for (size_t i = 0; i < DSV4I_ARRAY_LEN(k_stress); i++) dsv4i_str_append(&text, k_stress[i], strlen(k_stress[i]));
  int32_t *ref;
  size_t nref;
  assert_int_equal(dsv4i_tokenizer_encode(tok, text.buf, text.len, &ref, &nref), DSV4_OK);
  enum { T = 6 };
  pthread_t th[T];
  enc_job jobs[T];
  for (int t = 0; t < T; t++) {
    jobs[t] = (enc_job){tok, text.buf, text.len, NULL, 0, DSV4_OK};
    assert_int_equal(pthread_create(&th[t], NULL, enc_thread, &jobs[t]), 0);
  }
  for (int t = 0; t < T; t++) {
    pthread_join(th[t], NULL);
    assert_int_equal(jobs[t].status, DSV4_OK);
    assert_int_equal(jobs[t].n, nref);
    assert_memory_equal(jobs[t].ids, ref, nref * sizeof *ref);
    free(jobs[t].ids);
  }
  free(ref);
  dsv4i_str_free(&text);
  dsv4i_tokenizer_free(tok);
  free(dir);
}

static void dir_problems(void **state) {
  (void)state;
  dsv4i_tokenizer *tok = (dsv4i_tokenizer *)&tok;
  assert_int_equal(dsv4i_tokenizer_load("/nonexistent/dsv4/tokenizer/dir", &tok), DSV4_ERR_NOT_FOUND);
  assert_null(tok);
  assert_non_null(strstr(dsv4i_error_message(), "/nonexistent/dsv4/tokenizer/dir/tokenizer.json"));
  /* a file where the directory should be */
  char *dir = tiny_dir(), *file = tu_join(dir, "corpus.txt");
  tok = (dsv4i_tokenizer *)&tok;
  dsv4_status s = dsv4i_tokenizer_load(file, &tok);
  assert_true(s == DSV4_ERR_IO || s == DSV4_ERR_NOT_FOUND);
  assert_null(tok);
  assert_int_equal(dsv4i_tokenizer_load(NULL, &tok), DSV4_ERR_INVALID_ARG);
  assert_int_equal(dsv4i_tokenizer_load(dir, NULL), DSV4_ERR_INVALID_ARG);
  dsv4i_tokenizer_free(NULL);
  free(file);
  free(dir);
}

int tu_run_suite(void) {
  enum { N_FIXED = 11 };
  struct CMUnitTest tests[N_FIXED + DSV4I_ARRAY_LEN(k_bad)] = {
    cmocka_unit_test(fixtures_match_reference_ids),
    cmocka_unit_test(tiny_matches_golden),
    cmocka_unit_test(tiny_variants_match_golden),
    cmocka_unit_test(merges_as_strings_same_ids),
    cmocka_unit_test(roundtrip_stress_set),
    cmocka_unit_test(one_megabyte_inputs),
    cmocka_unit_test(partial_tokens_and_streaming),
    cmocka_unit_test(invalid_utf8_and_nul_rejected),
    cmocka_unit_test(decode_nothing),
    cmocka_unit_test(damaged_files_never_crash),
    cmocka_unit_test(dir_problems),
    cmocka_unit_test(concurrent_encode),
  };
  for (size_t i = 0; i < DSV4I_ARRAY_LEN(k_bad); i++)
    tests[N_FIXED + i] = (struct CMUnitTest){k_bad[i].name, run_bad_case, NULL, NULL, (void *)&k_bad[i]};
  return cmocka_run_group_tests_name("tokenizer", tests, NULL, NULL);
}
