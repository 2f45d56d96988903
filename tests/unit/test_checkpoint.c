/*
 * lib/io checkpoint directories: both fixture checkpoints open and every
 * index entry resolves; single-file and index layouts; one named case per
 * index/shard disagreement, each checked for its status, a message naming
 * the file and tensor, and a zeroed *out. Shards are made with the writer.
 * A subset: a cmocka pattern as argument or DSV4_TEST_FILTER (e.g. "ck_*"; tests/common/test_main.c).
 */
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "test_util.h"
#include "io/safetensors.h"

#define SA "s1.safetensors"
#define SB "s2.safetensors"
#define INDEX "model.safetensors.index.json"

/* ---- helpers ------------------------------------------------------------ */

static int all_zero(const void *p, size_t n) {
  const uint8_t *b = p;
  for (size_t i = 0; i < n; i++)
    if (b[i]) return 0;
  return 1;
}

static void assert_msg_has(const char *s) {
  const char *m = dsv4i_error_message();
  if (!strstr(m, s)) fail_msg("message \"%s\" lacks \"%s\"", m, s);
}

/* Shard dir/file holding the space-separated tensors, each F32 [2] whose
 * bytes are the first byte of its name repeated; "!trunc" writes a 5-byte file. */
static void make_shard(const char *dir, const char *file, const char *tensors) {
  char *path = tu_join(dir, file);
  if (strcmp(tensors, "!trunc") == 0) {
    assert_int_equal(tu_write_file(path, "\x01\x02\x03\x04\x05", 5), 0);
    free(path);
    return;
  }
  char *list = strdup(tensors);
  const int64_t shape[] = {2};
  dsv4i_st_writer *w = NULL;
  assert_int_equal(dsv4i_st_writer_create(path, &w), DSV4_OK);
  for (char *save = NULL, *n = strtok_r(list, " ", &save); n; n = strtok_r(NULL, " ", &save))
    assert_int_equal(dsv4i_st_writer_declare(w, n, DSV4_DTYPE_F32, 1, shape), DSV4_OK);
  assert_int_equal(dsv4i_st_writer_begin_data(w), DSV4_OK);
  strcpy(list, tensors);
  for (char *save = NULL, *n = strtok_r(list, " ", &save); n; n = strtok_r(NULL, " ", &save)) {
    uint8_t b[8];
    memset(b, n[0], sizeof b);
    assert_int_equal(dsv4i_st_writer_write(w, b, sizeof b), DSV4_OK);
  }
  assert_int_equal(dsv4i_st_writer_finish(w), DSV4_OK);
  free(list);
  free(path);
}

static void write_text(const char *dir, const char *file, const char *text) {
  char *path = tu_join(dir, file);
  assert_int_equal(tu_write_file(path, text, strlen(text)), 0);
  free(path);
}

/* ---- fixtures ----------------------------------------------------------- */

/* Every weight_map entry of the fixture resolves to a tensor of the shard the
 * index names, inside its mapping; entries are strictly sorted. */
static void check_fixture_dir(const char *rel) {
  char *dir = strdup(tu_fixture_or_skip(rel));
  dsv4i_checkpoint c;
  dsv4_status st = dsv4i_checkpoint_open(dir, &c);
  if (st != DSV4_OK) fail_msg("%s: %s", dir, dsv4i_error_message());
  assert_int_equal(c.n_shards, 3);
  assert_int_equal(c.n_entries, 1542);
  assert_int_equal(c.payload_bytes, 7866000);
  for (size_t i = 1; i < c.n_entries; i++) assert_true(strcmp(c.entries[i - 1].name, c.entries[i].name) < 0);

  char *ipath = tu_join(dir, INDEX);
  json_error_t je;
  json_t *root = json_load_file(ipath, 0, &je);
  assert_non_null(root);
  json_t *wm = json_object_get(root, "weight_map");
  assert_int_equal(json_object_size(wm), c.n_entries);
  const char *key;
  json_t *v;
  json_object_foreach(wm, key, v) {
    const dsv4i_ckpt_entry *e = dsv4i_checkpoint_find(&c, key);
    if (!e) fail_msg("%s: '%s' does not resolve", dir, key);
    assert_string_equal(e->name, key);
    const dsv4i_st_file *f = &c.shards[e->shard];
    const char *shard = json_string_value(v);
    size_t pl = strlen(f->path), sl = strlen(shard);
    assert_true(pl > sl && strcmp(f->path + pl - sl, shard) == 0 && f->path[pl - sl - 1] == '/');
    const uint8_t *p = dsv4i_checkpoint_data(&c, e);
    assert_true(p >= f->map + f->data_start && p + e->t->nbytes <= f->map + f->size);
  }
  assert_null(dsv4i_checkpoint_find(&c, "no.such.tensor"));
  assert_non_null(dsv4i_checkpoint_find(&c, "embed.weight"));
  json_decref(root);
  free(ipath);
  dsv4i_checkpoint_close(&c);
  assert_true(all_zero(&c, sizeof c));
  free(dir);
}

static void fixture_tiny_v41_a(void **state) {
  (void)state;
  check_fixture_dir("tiny-v41-a");
}

static void fixture_tiny_v41_e2e_a(void **state) {
  (void)state;
  check_fixture_dir("tiny-v41-e2e-a");
}

/* ---- valid layouts ------------------------------------------------------- */

static void single_file_layout(void **state) {
  (void)state;
  char *dir = tu_mkdtemp();
  make_shard(dir, "model.safetensors", "z.w a.w m.w");
  dsv4i_checkpoint c;
  assert_int_equal(dsv4i_checkpoint_open(dir, &c), DSV4_OK);
  assert_int_equal(c.n_shards, 1);
  assert_int_equal(c.n_entries, 3);
  assert_int_equal(c.payload_bytes, 24);
  assert_string_equal(c.entries[0].name, "a.w");
  assert_string_equal(c.entries[2].name, "z.w");
  const dsv4i_ckpt_entry *e = dsv4i_checkpoint_find(&c, "m.w");
  assert_non_null(e);
  assert_int_equal(((const uint8_t *)dsv4i_checkpoint_data(&c, e))[7], 'm');
  dsv4i_checkpoint_close(&c);
  dsv4i_checkpoint_close(&c); /* zeroed: no-op */
  dsv4i_checkpoint_close(NULL);
  tu_rmtree(dir);
  free(dir);
}

/* The index wins over model.safetensors; shards it does not name are
 * ignored; metadata is optional and an integral real total_size is accepted. */
static void index_layout_variants(void **state) {
  (void)state;
  char *dir = tu_mkdtemp();
  make_shard(dir, SA, "a.w a.b");
  make_shard(dir, SB, "b.w");
  make_shard(dir, "model.safetensors", "other");
  make_shard(dir, "s3.safetensors", "stray");
  static const char *const idx[] = {
    "{\"weight_map\":{\"a.w\":\"" SA "\",\"b.w\":\"" SB "\",\"a.b\":\"" SA "\"}}",
    "{\"metadata\":{\"total_size\":24.0,\"x\":1},\"weight_map\":{\"a.w\":\"" SA "\",\"b.w\":\"" SB
    "\",\"a.b\":\"" SA "\"},\"extra\":[]}",
  };
  for (size_t i = 0; i < 2; i++) {
    write_text(dir, INDEX, idx[i]);
    dsv4i_checkpoint c;
    dsv4_status st = dsv4i_checkpoint_open(dir, &c);
    if (st != DSV4_OK) fail_msg("%s", dsv4i_error_message());
    assert_int_equal(c.n_shards, 2);
    assert_int_equal(c.n_entries, 3);
    assert_null(dsv4i_checkpoint_find(&c, "other"));
    const dsv4i_ckpt_entry *e = dsv4i_checkpoint_find(&c, "b.w");
    assert_non_null(e);
    assert_int_equal(e->shard, 1); /* shards sorted by file name */
    assert_int_equal(((const uint8_t *)dsv4i_checkpoint_data(&c, e))[0], 'b');
    dsv4i_checkpoint_close(&c);
  }
  tu_rmtree(dir);
  free(dir);
}

static void dir_absent_and_null(void **state) {
  (void)state;
  char *dir = tu_mkdtemp();
  char *absent = tu_join(dir, "nope");
  dsv4i_checkpoint c;
  memset(&c, 0x5A, sizeof c);
  assert_int_equal(dsv4i_checkpoint_open(absent, &c), DSV4_ERR_NOT_FOUND);
  assert_msg_has(absent);
  assert_true(all_zero(&c, sizeof c));
  make_shard(dir, "model.safetensors", "a");
  char *file = tu_join(dir, "model.safetensors");
  assert_int_equal(dsv4i_checkpoint_open(file, &c), DSV4_ERR_IO);
  assert_msg_has("not a directory");
  assert_int_equal(dsv4i_checkpoint_open(NULL, &c), DSV4_ERR_INVALID_ARG);
  assert_int_equal(dsv4i_checkpoint_open(dir, NULL), DSV4_ERR_INVALID_ARG);
  assert_null(dsv4i_checkpoint_find(NULL, "a"));
  tu_rmtree(dir);
  free(file);
  free(absent);
  free(dir);
}

/* ---- one named case per violation ----------------------------------------- */

typedef struct shard_spec {
  const char *file;
  const char *tensors;  /* space-separated; "!trunc" = 5-byte file */
} shard_spec;

typedef struct ck_case {
  const char *name;
  shard_spec shards[3];  /* ends at the first NULL file */
  const char *index;     /* index text; NULL = no index file */
  dsv4_status want;
  const char *needles[2]; /* the message names these (file, tensor) */
} ck_case;

#define WM2 "\"a.w\":\"" SA "\",\"a.b\":\"" SA "\",\"b.w\":\"" SB "\""
#define TWO_SHARDS {{SA, "a.w a.b"}, {SB, "b.w"}}

static const ck_case k_cases[] = {
  {"ck_duplicate_across_shards", {{SA, "a.w x"}, {SB, "b.w x"}},
   "{\"weight_map\":{\"a.w\":\"" SA "\",\"x\":\"" SA "\",\"b.w\":\"" SB "\"}}", DSV4_ERR_ST_DUPLICATE,
   {"tensor 'x' is in both", SB}},
  {"ck_index_bad_json", TWO_SHARDS, "{\"weight_map\": {\"a.w\": ", DSV4_ERR_JSON, {INDEX, "line 1"}},
  {"ck_index_not_object", TWO_SHARDS, "[]", DSV4_ERR_INDEX, {INDEX, "top level is not an object"}},
  {"ck_index_no_weight_map", TWO_SHARDS, "{\"metadata\":{},\"weights\":{" WM2 "}}", DSV4_ERR_INDEX,
   {INDEX, "no \"weight_map\""}},
  {"ck_weight_map_not_object", TWO_SHARDS, "{\"weight_map\":[]}", DSV4_ERR_INDEX, {INDEX, "not an object"}},
  {"ck_weight_map_empty", TWO_SHARDS, "{\"weight_map\":{}}", DSV4_ERR_INDEX, {INDEX, "is empty"}},
  {"ck_shard_not_string", TWO_SHARDS, "{\"weight_map\":{\"a.w\":1}}", DSV4_ERR_INDEX,
   {INDEX, "tensor 'a.w' is not a string"}},
  {"ck_index_duplicate_key", TWO_SHARDS, "{\"weight_map\":{" WM2 ",\"a.w\":\"" SA "\"}}", DSV4_ERR_INDEX,
   {INDEX, "duplicate object key near '\"a.w\"'"}},
  {"ck_metadata_not_object", TWO_SHARDS, "{\"metadata\":7,\"weight_map\":{" WM2 "}}", DSV4_ERR_INDEX,
   {INDEX, "\"metadata\" is not an object"}},
  {"ck_total_size_not_integer", TWO_SHARDS, "{\"metadata\":{\"total_size\":\"24\"},\"weight_map\":{" WM2 "}}",
   DSV4_ERR_INDEX, {INDEX, "total_size"}},
  {"ck_shard_name_dotdot", TWO_SHARDS, "{\"weight_map\":{\"a.w\":\"../" SA "\"}}", DSV4_ERR_INDEX,
   {INDEX, "tensor 'a.w' in shard \"../" SA "\""}},
  {"ck_shard_name_slash", TWO_SHARDS, "{\"weight_map\":{\"a.w\":\"/etc/" SA "\"}}", DSV4_ERR_INDEX,
   {INDEX, "tensor 'a.w' in shard \"/etc/" SA "\""}},
  {"ck_missing_shard", {{SA, "a.w a.b"}}, "{\"weight_map\":{" WM2 "}}", DSV4_ERR_MISSING_SHARD,
   {"shard \"" SB "\"", "tensor 'b.w'"}},
  {"ck_entry_absent_from_shard", TWO_SHARDS, "{\"weight_map\":{" WM2 ",\"ghost\":\"" SA "\"}}",
   DSV4_ERR_INDEX_MISMATCH, {INDEX, "tensor 'ghost' in " SA ", which has no such tensor"}},
  {"ck_entry_in_other_shard", {{SA, "a.w"}, {SB, "b.w c.w"}},
   "{\"weight_map\":{\"a.w\":\"" SA "\",\"b.w\":\"" SA "\",\"c.w\":\"" SB "\"}}", DSV4_ERR_INDEX_MISMATCH,
   {INDEX, "tensor 'b.w' in " SA ", but it is in " SB}},
  {"ck_shard_tensor_not_in_index", {{SA, "a.w a.b extra"}, {SB, "b.w"}}, "{\"weight_map\":{" WM2 "}}",
   DSV4_ERR_INDEX_MISMATCH, {INDEX, "tensor 'extra' of shard " SA " is not in the weight_map"}},
  {"ck_total_size_mismatch", TWO_SHARDS, "{\"metadata\":{\"total_size\":999},\"weight_map\":{" WM2 "}}",
   DSV4_ERR_INDEX_MISMATCH, {INDEX, "total_size is 999 but the shards hold 24"}},
  {"ck_bad_shard_propagates", {{SA, "a.w a.b"}, {SB, "!trunc"}}, "{\"weight_map\":{" WM2 "}}",
   DSV4_ERR_ST_TRUNCATED, {SB, "5 bytes"}},
  {"ck_single_file_bad", {{"model.safetensors", "!trunc"}}, NULL, DSV4_ERR_ST_TRUNCATED,
   {"model.safetensors", "5 bytes"}},
  {"ck_no_index_no_single", TWO_SHARDS, NULL, DSV4_ERR_NOT_FOUND,
   {"neither model.safetensors.index.json nor model.safetensors", ""}},
};

static void run_ck_case(void **state) {
  const ck_case *k = *state;
  char *dir = tu_mkdtemp();
  for (size_t i = 0; i < 3 && k->shards[i].file; i++) make_shard(dir, k->shards[i].file, k->shards[i].tensors);
  if (k->index) write_text(dir, INDEX, k->index);
  dsv4i_checkpoint c;
  memset(&c, 0x5A, sizeof c);
  dsv4i_error_clear();
  dsv4_status st = dsv4i_checkpoint_open(dir, &c);
  if (st != k->want)
    fail_msg("%s: status %d, want %d; message: %s", k->name, st, k->want, dsv4i_error_message());
  tu_catalogue("checkpoint directory", k->name, st, dsv4i_error_message());
  print_message("  -> %s\n", dsv4i_error_message());
  assert_msg_has(dir);
  assert_msg_has(k->needles[0]);
  assert_msg_has(k->needles[1]);
  assert_true(all_zero(&c, sizeof c));
  tu_rmtree(dir);
  free(dir);
}

int tu_run_suite(void) {
  enum { N_FIXED = 5 };
  struct CMUnitTest tests[N_FIXED + DSV4I_ARRAY_LEN(k_cases)] = {
    cmocka_unit_test(fixture_tiny_v41_a),
    cmocka_unit_test(fixture_tiny_v41_e2e_a),
    cmocka_unit_test(single_file_layout),
    cmocka_unit_test(index_layout_variants),
    cmocka_unit_test(dir_absent_and_null),
  };
  for (size_t i = 0; i < DSV4I_ARRAY_LEN(k_cases); i++)
    tests[N_FIXED + i] = (struct CMUnitTest){k_cases[i].name, run_ck_case, NULL, NULL, (void *)&k_cases[i]};
  return cmocka_run_group_tests_name("checkpoint", tests, NULL, NULL);
}
