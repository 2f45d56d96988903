/*
 * lib/io safetensors: the dtype table, the streaming writer (round trip and
 * misuse), the reader on the golden fixture, and one named case per header
 * violation, each checked for its status and a message naming file + tensor.
 * A subset: a cmocka pattern as argument or DSV4_TEST_FILTER (e.g. "bad_*"; tests/common/test_main.c).
 */
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "test_util.h"
#include "io/safetensors.h"

/* ---- helpers ------------------------------------------------------------ */

/* Write `u64 LE hlen | header | payload zero bytes` to path; hlen < 0 means
 * the real header length. */
static void write_shard(const char *path, int64_t hlen, const char *header, size_t payload) {
  size_t len = strlen(header);
  uint64_t n = hlen < 0 ? (uint64_t)len : (uint64_t)hlen;
  size_t total = 8 + len + payload;
  uint8_t *buf = calloc(1, total);
  assert_non_null(buf);
  for (int i = 0; i < 8; i++) buf[i] = (uint8_t)(n >> (8 * i));
  memcpy(buf + 8, header, len);
  assert_int_equal(tu_write_file(path, buf, total), 0);
  free(buf);
}

static int all_zero(const void *p, size_t n) {
  const uint8_t *b = p;
  for (size_t i = 0; i < n; i++)
    if (b[i]) return 0;
  return 1;
}

/* The message of the last failure must contain `s`. */
static void assert_msg_has(const char *s) {
  const char *m = dsv4i_error_message();
  if (!strstr(m, s)) fail_msg("message \"%s\" lacks \"%s\"", m, s);
}

/* ---- dtype table ---------------------------------------------------------- */

static void dtype_table_round_trips(void **state) {
  (void)state;
  static const struct { const char *s; int32_t d; size_t sz; } k[] = {
    {"BF16", DSV4_DTYPE_BF16, 2}, {"F16", DSV4_DTYPE_F16, 2}, {"F32", DSV4_DTYPE_F32, 4},
    {"F8_E4M3", DSV4_DTYPE_F8_E4M3, 1}, {"F8_E8M0", DSV4_DTYPE_F8_E8M0, 1},
    {"I8", DSV4_DTYPE_I8, 1}, {"I32", DSV4_DTYPE_I32, 4}, {"I64", DSV4_DTYPE_I64, 8}};
  for (size_t i = 0; i < sizeof k / sizeof k[0]; i++) {
    assert_int_equal(dsv4i_dtype_from_string(k[i].s), k[i].d);
    assert_string_equal(dsv4i_dtype_name(k[i].d), k[i].s);
    assert_int_equal(dsv4i_dtype_size(k[i].d), k[i].sz);
  }
  assert_int_equal(dsv4i_dtype_from_string("bf16"), 0);
  assert_int_equal(dsv4i_dtype_from_string("F64"), 0);
  assert_int_equal(dsv4i_dtype_from_string(NULL), 0);
  assert_int_equal(dsv4i_dtype_size(0), 0);
  assert_string_equal(dsv4i_dtype_name(99), "?");
}

/* ---- writer --------------------------------------------------------------- */

/* Declares five tensors (incl. a scalar and an empty one), writes the payload
 * in odd-sized pieces that span tensors, reopens and checks header layout,
 * order, offsets, metadata and every byte. */
static void writer_round_trip(void **state) {
  (void)state;
  char *dir = tu_mkdtemp();
  char *path = tu_join(dir, "rt.safetensors");
  static const int64_t s_a[] = {2, 3}, s_b[] = {3}, s_e[] = {0, 5}, s_d[] = {2, 2, 2};
  static const struct { const char *name; int32_t dtype; int32_t ndim; const int64_t *shape; uint64_t nb; } d[] = {
    {"z.first", DSV4_DTYPE_BF16, 2, s_a, 12}, {"a.scalar", DSV4_DTYPE_F32, 0, NULL, 4},
    {"m.empty", DSV4_DTYPE_F8_E4M3, 2, s_e, 0}, {"b.ids", DSV4_DTYPE_I64, 1, s_b, 24},
    {"c.cube", DSV4_DTYPE_I8, 3, s_d, 8}};
  dsv4i_st_writer *w = NULL;
  assert_int_equal(dsv4i_st_writer_create(path, &w), DSV4_OK);
  assert_int_equal(dsv4i_st_writer_set_metadata(w, "format", "pt"), DSV4_OK);
  for (size_t i = 0; i < 5; i++)
    assert_int_equal(dsv4i_st_writer_declare(w, d[i].name, d[i].dtype, d[i].ndim, d[i].shape), DSV4_OK);
  assert_int_equal(dsv4i_st_writer_begin_data(w), DSV4_OK);
  uint8_t payload[48];
  for (size_t i = 0; i < sizeof payload; i++) payload[i] = (uint8_t)(i * 7 + 1);
  size_t at = 0;
  for (size_t piece = 1; at < sizeof payload; piece += 2) {
    size_t n = piece < sizeof payload - at ? piece : sizeof payload - at;
    assert_int_equal(dsv4i_st_writer_write(w, payload + at, n), DSV4_OK);
    at += n;
  }
  assert_int_equal(dsv4i_st_writer_write(w, NULL, 0), DSV4_OK);
  assert_int_equal(dsv4i_st_writer_finish(w), DSV4_OK);

  dsv4i_st_file f;
  assert_int_equal(dsv4i_st_open(path, &f), DSV4_OK);
  assert_int_equal(f.data_start % 8, 0);
  assert_int_equal(f.size, f.data_start + sizeof payload);
  assert_int_equal(f.map[f.data_start - 1] == ' ' || f.map[f.data_start - 1] == '}', 1);
  assert_string_equal(f.metadata_json, "{\"format\":\"pt\"}");
  assert_int_equal(f.n_tensors, 5);
  uint64_t off = 0;
  for (size_t i = 0; i < 5; i++) {
    const dsv4i_st_tensor *t = &f.tensors[i];
    assert_string_equal(t->name, d[i].name);  /* declaration order, not sorted */
    assert_int_equal(t->dtype, d[i].dtype);
    assert_int_equal(t->ndim, d[i].ndim);
    for (int32_t k = 0; k < t->ndim; k++) assert_int_equal(t->shape[k], d[i].shape[k]);
    assert_int_equal(t->offset, f.data_start + off);
    assert_int_equal(t->nbytes, d[i].nb);
    assert_memory_equal(dsv4i_st_data(&f, t), payload + off, d[i].nb);
    assert_ptr_equal(dsv4i_st_find(&f, d[i].name), t);
    off += d[i].nb;
  }
  assert_null(dsv4i_st_find(&f, "absent"));
  /* the header is compact JSON followed only by spaces */
  json_error_t je;
  json_t *h = json_loadb((const char *)f.map + 8, f.data_start - 8, 0, &je);
  assert_non_null(h);
  assert_string_equal(json_object_iter_key(json_object_iter(h)), "__metadata__");
  json_decref(h);
  dsv4i_st_close(&f);
  assert_true(all_zero(&f, sizeof f));
  dsv4i_st_close(&f); /* zeroed: no-op */
  tu_rmtree(dir);
  free(path);
  free(dir);
}

/* A writer with no declarations still writes a valid (empty) file. */
static void writer_empty_file(void **state) {
  (void)state;
  char *dir = tu_mkdtemp();
  char *path = tu_join(dir, "empty.safetensors");
  dsv4i_st_writer *w = NULL;
  assert_int_equal(dsv4i_st_writer_create(path, &w), DSV4_OK);
  assert_int_equal(dsv4i_st_writer_finish(w), DSV4_OK);
  dsv4i_st_file f;
  assert_int_equal(dsv4i_st_open(path, &f), DSV4_OK);
  assert_int_equal(f.n_tensors, 0);
  assert_int_equal(f.size, 16); /* 8 + "{}" padded to 8 */
  assert_null(f.metadata_json);
  dsv4i_st_close(&f);
  tu_rmtree(dir);
  free(path);
  free(dir);
}

/* Wrong phase, bad arguments, duplicates, overrun and short payloads. */
static void writer_rejects_misuse(void **state) {
  (void)state;
  char *dir = tu_mkdtemp();
  char *path = tu_join(dir, "w.safetensors");
  const int64_t shape[] = {4}, neg[] = {-1};
  dsv4i_st_writer *w = (dsv4i_st_writer *)1;
  assert_int_equal(dsv4i_st_writer_create(NULL, &w), DSV4_ERR_INVALID_ARG);
  assert_null(w);
  char *bad = tu_join(dir, "no/such/dir.safetensors");
  assert_int_equal(dsv4i_st_writer_create(bad, &w), DSV4_ERR_IO);
  assert_msg_has(bad);
  free(bad);

  assert_int_equal(dsv4i_st_writer_create(path, &w), DSV4_OK);
  assert_int_equal(dsv4i_st_writer_declare(w, "x", 42, 1, shape), DSV4_ERR_INVALID_ARG);
  assert_msg_has("'x'");
  assert_int_equal(dsv4i_st_writer_declare(w, "x", DSV4_DTYPE_F32, 1, neg), DSV4_ERR_INVALID_ARG);
  assert_int_equal(dsv4i_st_writer_declare(w, "x", DSV4_DTYPE_F32, 9, shape), DSV4_ERR_INVALID_ARG);
  assert_int_equal(dsv4i_st_writer_declare(w, "__metadata__", DSV4_DTYPE_F32, 1, shape), DSV4_ERR_INVALID_ARG);
  assert_int_equal(dsv4i_st_writer_declare(w, "", DSV4_DTYPE_F32, 1, shape), DSV4_ERR_INVALID_ARG);
  assert_int_equal(dsv4i_st_writer_declare(w, "bad\xff", DSV4_DTYPE_F32, 1, shape), DSV4_ERR_INVALID_ARG);
  assert_int_equal(dsv4i_st_writer_write(w, "abcd", 4), DSV4_ERR_INVALID_ARG); /* before begin_data */
  assert_int_equal(dsv4i_st_writer_declare(w, "x", DSV4_DTYPE_F32, 1, shape), DSV4_OK);
  assert_int_equal(dsv4i_st_writer_declare(w, "y", DSV4_DTYPE_I8, 1, shape), DSV4_OK);
  assert_int_equal(dsv4i_st_writer_begin_data(w), DSV4_OK);
  assert_int_equal(dsv4i_st_writer_begin_data(w), DSV4_ERR_INVALID_ARG);
  assert_int_equal(dsv4i_st_writer_declare(w, "z", DSV4_DTYPE_I8, 1, shape), DSV4_ERR_INVALID_ARG);
  assert_int_equal(dsv4i_st_writer_set_metadata(w, "k", "v"), DSV4_ERR_INVALID_ARG);
  uint8_t buf[32] = {0};
  assert_int_equal(dsv4i_st_writer_write(w, buf, 21), DSV4_ERR_ST_SIZE); /* 20 declared */
  assert_msg_has("20 declared");
  assert_int_equal(dsv4i_st_writer_write(w, buf, 18), DSV4_OK); /* the overrun wrote nothing */
  assert_int_equal(dsv4i_st_writer_finish(w), DSV4_ERR_ST_SIZE);
  assert_msg_has("tensor 'y' is incomplete");

  assert_int_equal(dsv4i_st_writer_create(path, &w), DSV4_OK);
  assert_int_equal(dsv4i_st_writer_declare(w, "dup", DSV4_DTYPE_F32, 1, shape), DSV4_OK);
  assert_int_equal(dsv4i_st_writer_declare(w, "other", DSV4_DTYPE_F32, 1, shape), DSV4_OK);
  assert_int_equal(dsv4i_st_writer_declare(w, "dup", DSV4_DTYPE_I8, 1, shape), DSV4_OK);
  assert_int_equal(dsv4i_st_writer_begin_data(w), DSV4_ERR_ST_DUPLICATE);
  assert_msg_has("'dup'");
  dsv4i_st_writer_abort(w);
  dsv4i_st_writer_abort(NULL);
  assert_int_equal(dsv4i_st_writer_finish(NULL), DSV4_ERR_INVALID_ARG);
  tu_rmtree(dir);
  free(path);
  free(dir);
}

/* 64-bit sizes without 64-bit disk use: the writer declares > 4 GiB, writes
 * only the header, the file is extended sparsely, and the reader maps it and
 * validates the header without touching the (hole) data area. */
static void large_sparse_file(void **state) {
  (void)state;
  char *dir = tu_mkdtemp();
  char *path = tu_join(dir, "big.safetensors");
  const int64_t big[] = {5000000000LL}, tail[] = {3, 1000000000LL};
  dsv4i_st_writer *w = NULL;
  assert_int_equal(dsv4i_st_writer_create(path, &w), DSV4_OK);
  assert_int_equal(dsv4i_st_writer_declare(w, "big", DSV4_DTYPE_I8, 1, big), DSV4_OK);
  assert_int_equal(dsv4i_st_writer_declare(w, "tail", DSV4_DTYPE_BF16, 2, tail), DSV4_OK);
  assert_int_equal(dsv4i_st_writer_begin_data(w), DSV4_OK);
  dsv4i_st_writer_abort(w);
  size_t hlen = 0;
  free(tu_read_file(path, &hlen));
  const uint64_t total = 5000000000ULL + 6000000000ULL;
  if (truncate(path, (off_t)(hlen + total)) != 0) {
    tu_rmtree(dir);
    free(path);
    free(dir);
    skip(); /* filesystem without sparse files or large offsets */
  }
  dsv4i_st_file f;
  dsv4_status st = dsv4i_st_open(path, &f);
  if (st == DSV4_ERR_IO) { /* address space limited (e.g. ulimit -v) */
    tu_rmtree(dir);
    free(path);
    free(dir);
    skip();
  }
  assert_int_equal(st, DSV4_OK);
  assert_int_equal(f.data_start, hlen);
  assert_int_equal(f.tensors[0].nbytes, 5000000000ULL);
  assert_int_equal(f.tensors[1].offset, hlen + 5000000000ULL);
  assert_int_equal(f.tensors[1].nbytes, 6000000000ULL);
  assert_int_equal(f.size, hlen + total);
  dsv4i_st_close(&f);
  /* one byte short: the last tensor runs past the data area */
  assert_int_equal(truncate(path, (off_t)(hlen + total - 1)), 0);
  assert_int_equal(dsv4i_st_open(path, &f), DSV4_ERR_ST_OFFSETS);
  assert_msg_has("'tail': data_offsets [5000000000, 11000000000] run past the data area of 10999999999 bytes");
  tu_rmtree(dir);
  free(path);
  free(dir);
}

/* ---- reader: valid inputs ------------------------------------------------- */

/* Accepted as the reference reader accepts them: zero-size tensors at a
 * range boundary, scalars, unknown entry keys, space padding, metadata,
 * tensors not aligned to their element size (odd, unpadded header). */
static void reader_accepts_edge_cases(void **state) {
  (void)state;
  char *dir = tu_mkdtemp();
  char *path = tu_join(dir, "ok.safetensors");
  write_shard(path, -1,
              "{\"__metadata__\":{\"format\":\"pt\",\"x\":\"y\"},"
              "\"s\":{\"dtype\":\"F32\",\"shape\":[],\"data_offsets\":[0,4],\"extra\":[1]},"
              "\"e1\":{\"dtype\":\"BF16\",\"shape\":[0,3],\"data_offsets\":[4,4]},"
              "\"e2\":{\"dtype\":\"I8\",\"shape\":[4,0],\"data_offsets\":[4,4]},"
              "\"g\":{\"dtype\":\"F16\",\"shape\":[2],\"data_offsets\":[4,8]}}        ",
              8);
  dsv4i_st_file f;
  assert_int_equal(dsv4i_st_open(path, &f), DSV4_OK);
  assert_int_equal(f.n_tensors, 4);
  assert_string_equal(f.tensors[0].name, "s");
  assert_int_equal(f.tensors[0].ndim, 0);
  assert_int_equal(f.tensors[0].nbytes, 4);
  assert_int_equal(f.tensors[1].nbytes, 0);
  assert_int_equal(f.tensors[3].offset, f.data_start + 4);
  assert_string_equal(f.metadata_json, "{\"format\":\"pt\",\"x\":\"y\"}");
  dsv4i_st_close(&f);

  write_shard(path, -1, "{}", 0); /* no tensors at all */
  assert_int_equal(dsv4i_st_open(path, &f), DSV4_OK);
  assert_int_equal(f.n_tensors, 0);
  dsv4i_st_close(&f);

  /* header of 63 bytes (data area at 71), an I8 first: the F32 starts at 72 */
  write_shard(path, -1,
              "{\"a\":{\"dtype\":\"I8\",\"shape\":[1],\"data_offsets\":[0,1]},\"b\":{\"dtype\":\"F32\","
              "\"shape\":[1],\"data_offsets\":[1,5]}}     ", 5);
  assert_int_equal(dsv4i_st_open(path, &f), DSV4_OK);
  assert_int_equal(f.data_start % 2, 1);
  assert_int_equal(f.tensors[1].offset % 4, 0);
  dsv4i_st_close(&f);
  write_shard(path, -1, "{\"__metadata__\":null}", 0); /* null metadata reads as absent */
  assert_int_equal(dsv4i_st_open(path, &f), DSV4_OK);
  assert_null(f.metadata_json);
  dsv4i_st_close(&f);
  tu_rmtree(dir);
  free(path);
  free(dir);
}

/* The golden tensors of both fixtures: I32, I64 and F32, with metadata. */
static void golden_fixture_opens(void **state) {
  (void)state;
  const char *fixtures[] = {"tiny-v41-a/golden.safetensors", "tiny-v41-e2e-a/golden.safetensors"};
  for (size_t k = 0; k < 2; k++) {
    char *path = strdup(tu_fixture_or_skip(fixtures[k]));
    dsv4i_st_file f;
    dsv4_status st = dsv4i_st_open(path, &f);
    if (st != DSV4_OK) fail_msg("%s: %s", path, dsv4i_error_message());
    int seen[9] = {0};
    for (size_t i = 0; i < f.n_tensors; i++) {
      const dsv4i_st_tensor *t = &f.tensors[i];
      uint64_t n = dsv4i_dtype_size(t->dtype);
      for (int32_t d = 0; d < t->ndim; d++) n *= (uint64_t)t->shape[d];
      assert_int_equal(n, t->nbytes);
      assert_true(t->offset + t->nbytes <= f.size);
      seen[t->dtype] = 1;
    }
    assert_int_equal(f.n_tensors, 64);
    assert_true(seen[DSV4_DTYPE_I32] && seen[DSV4_DTYPE_I64] && seen[DSV4_DTYPE_F32]);
    assert_string_equal(f.tensors[0].name, "a.decode_logits");
    assert_non_null(strstr(f.metadata_json, "\"format\":\"pt\""));
    const dsv4i_st_tensor *t = dsv4i_st_find(&f, "a.gen_tokens");
    assert_non_null(t);
    assert_int_equal(t->dtype, DSV4_DTYPE_I64);
    assert_int_equal(t->shape[0], 16);
    dsv4i_st_close(&f);
    free(path);
  }
}

static void open_missing_dir_and_null(void **state) {
  (void)state;
  char *dir = tu_mkdtemp();
  char *path = tu_join(dir, "absent.safetensors");
  dsv4i_st_file f;
  memset(&f, 0xA5, sizeof f);
  assert_int_equal(dsv4i_st_open(path, &f), DSV4_ERR_NOT_FOUND);
  assert_msg_has(path);
  assert_true(all_zero(&f, sizeof f));
  assert_int_equal(dsv4i_st_open(dir, &f), DSV4_ERR_IO);
  assert_msg_has("not a regular file");
  assert_int_equal(dsv4i_st_open(NULL, &f), DSV4_ERR_INVALID_ARG);
  assert_int_equal(dsv4i_st_open(path, NULL), DSV4_ERR_INVALID_ARG);
  tu_rmtree(dir);
  free(path);
  free(dir);
}

/* ---- reader vs the reference reader -----------------------------------------
 * tests/data/safetensors-reference/vectors.json: generated shards, each with
 * the verdict of the `safetensors` package. Every shard it accepts opens here
 * and every shard it refuses is refused, except these refusals on purpose:
 * dtypes no tensor of the model uses (the contract could never take them),
 * more dimensions than DSV4I_MAX_DIMS, and a key repeated in one object
 * (the reference keeps the last silently; a tensor name twice is ambiguous). */
static const struct {
  const char *name;
  dsv4_status status;
} k_refused_on_purpose[] = {
  {"dtype_u8", DSV4_ERR_ST_DTYPE},       {"dtype_bool", DSV4_ERR_ST_DTYPE},
  {"dtype_f4", DSV4_ERR_ST_DTYPE},       {"dims_9", DSV4_ERR_UNSUPPORTED},
  {"duplicate_name_same_entry", DSV4_ERR_ST_DUPLICATE},
  {"duplicate_metadata_key", DSV4_ERR_ST_DUPLICATE},
};

static size_t b64_decode(const char *in, uint8_t *out) {
  static const char k[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
  uint32_t acc = 0;
  int bits = 0;
  size_t n = 0;
  for (; *in && *in != '='; in++) {
    const char *p = strchr(k, *in);
    assert_non_null(p);
    acc = (acc << 6) | (uint32_t)(p - k);
    bits += 6;
    if (bits >= 8) {
      bits -= 8;
      out[n++] = (uint8_t)(acc >> bits);
    }
  }
  return n;
}

static void reference_vectors(void **state) {
  (void)state;
  char *vpath = tu_join(getenv("DSV4_SOURCE_ROOT"), "tests/data/safetensors-reference/vectors.json");
  json_error_t je;
  json_t *doc = json_load_file(vpath, 0, &je);
  if (!doc) fail_msg("%s: %s", vpath, je.text);
  char *dir = tu_mkdtemp();
  char *path = tu_join(dir, "vector.safetensors");
  size_t i, n_accept = 0, n_reject = 0;
  json_t *v;
  json_array_foreach(json_object_get(doc, "vectors"), i, v) {
    const char *name = json_string_value(json_object_get(v, "name"));
    const char *b64 = json_string_value(json_object_get(v, "bytes_b64"));
    const int ref_ok = strcmp(json_string_value(json_object_get(v, "reference")), "accept") == 0;
    uint8_t *bytes = malloc(strlen(b64) + 1);
    assert_non_null(bytes);
    assert_int_equal(tu_write_file(path, bytes, b64_decode(b64, bytes)), 0);
    free(bytes);
    dsv4_status want = ref_ok ? DSV4_OK : DSV4_ERR_INVALID_ARG; /* any refusal when < 0 */
    for (size_t k = 0; k < DSV4I_ARRAY_LEN(k_refused_on_purpose); k++)
      if (strcmp(name, k_refused_on_purpose[k].name) == 0) want = k_refused_on_purpose[k].status;
    dsv4i_st_file f;
    dsv4i_error_clear();
    const dsv4_status st = dsv4i_st_open(path, &f);
    print_message("  %-26s reference %s, here %s %s\n", name, ref_ok ? "accepts" : "refuses",
                  dsv4_status_string(st), dsv4i_error_message());
    if (want == DSV4_OK && st != DSV4_OK)
      fail_msg("%s: the reference accepts it; refused: %s", name, dsv4i_error_message());
    if (want == DSV4_ERR_INVALID_ARG && st == DSV4_OK)
      fail_msg("%s: the reference refuses it (%s); accepted", name,
               json_string_value(json_object_get(v, "reference_error")));
    if (want != DSV4_OK && want != DSV4_ERR_INVALID_ARG && st != want)
      fail_msg("%s: refused on purpose with status %d, got %d", name, want, st);
    if (st == DSV4_OK) {
      n_accept++;
      dsv4i_st_close(&f);
    } else {
      n_reject++;
      char cname[96];
      snprintf(cname, sizeof cname, "reference vector %s", name);
      tu_catalogue("safetensors shard", cname, st, dsv4i_error_message());
    }
  }
  assert_true(n_accept >= 10 && n_reject >= 20);
  json_decref(doc);
  tu_rmtree(dir);
  free(path);
  free(dir);
  free(vpath);
}

/* ---- reader: one named case per violation ---------------------------------- */

typedef struct bad_case {
  const char *name;
  const char *header;    /* header text; NULL: write `raw` (raw_len bytes) instead */
  int64_t hlen;          /* header length field; -1 = strlen(header) */
  size_t payload;        /* zero bytes after the header */
  const char *raw;
  size_t raw_len;
  dsv4_status want;
  const char *needle;    /* the message names this (tensor or detail) besides the file */
} bad_case;

#define T(n, body) "\"" n "\":{" body "}"
#define ENTRY(dt, shape, offs) "\"dtype\":\"" dt "\",\"shape\":" shape ",\"data_offsets\":" offs

static const bad_case k_bad[] = {
  {"bad_truncated_lt8", NULL, 0, 0, "\x05\0\0\0\0", 5, DSV4_ERR_ST_TRUNCATED, "5 bytes"},
  {"bad_empty_file", NULL, 0, 0, "", 0, DSV4_ERR_ST_TRUNCATED, "0 bytes"},
  {"bad_header_len_past_end", "{}", 1000, 0, NULL, 0, DSV4_ERR_ST_HEADER, "header length 1000"},
  {"bad_header_len_huge", "{}", INT64_MAX, 0, NULL, 0, DSV4_ERR_ST_HEADER, "runs past the end"},
  {"bad_header_not_json", "{\"a\": nope}", -1, 0, NULL, 0, DSV4_ERR_JSON, "line 1"},
  {"bad_header_empty", "", -1, 8, NULL, 0, DSV4_ERR_JSON, "not valid JSON"},
  {"bad_header_not_object", "[1,2]", -1, 0, NULL, 0, DSV4_ERR_ST_HEADER, "an array"},
  {"bad_entry_not_object", "{\"w.x\":5}", -1, 0, NULL, 0, DSV4_ERR_ST_HEADER, "'w.x'"},
  {"bad_missing_data_offsets", "{" T("w.x", "\"dtype\":\"F32\",\"shape\":[1]") "}", -1, 4, NULL, 0,
   DSV4_ERR_ST_HEADER, "'w.x': missing \"data_offsets\""},
  {"bad_missing_dtype", "{" T("w.x", "\"shape\":[1],\"data_offsets\":[0,4]") "}", -1, 4, NULL, 0,
   DSV4_ERR_ST_HEADER, "'w.x': missing \"dtype\""},
  {"bad_dtype_not_string", "{" T("w.x", "\"dtype\":3,\"shape\":[1],\"data_offsets\":[0,4]") "}", -1, 4,
   NULL, 0, DSV4_ERR_ST_HEADER, "'w.x': dtype is an integer"},
  {"bad_shape_not_array", "{" T("w.x", ENTRY("F32", "\"1\"", "[0,4]")) "}", -1, 4, NULL, 0,
   DSV4_ERR_ST_HEADER, "'w.x': shape is a string"},
  {"bad_shape_real", "{" T("w.x", ENTRY("F32", "[1.5]", "[0,4]")) "}", -1, 4, NULL, 0,
   DSV4_ERR_ST_HEADER, "'w.x': shape[0] is a real"},
  {"bad_metadata_not_strings", "{\"__metadata__\":{\"n\":1}}", -1, 0, NULL, 0, DSV4_ERR_ST_HEADER,
   "\"__metadata__\".\"n\""},
  {"bad_unknown_dtype", "{" T("w.x", ENTRY("F5", "[2]", "[0,1]")) "}", -1, 1, NULL, 0,
   DSV4_ERR_ST_DTYPE, "'w.x': unknown dtype \"F5\""},
  {"bad_unread_dtype_u8", "{" T("w.x", ENTRY("U8", "[2]", "[0,2]")) "}", -1, 2, NULL, 0,
   DSV4_ERR_ST_DTYPE, "'w.x': the model never uses the safetensors dtype \"U8\""},
  {"bad_gap_between", "{" T("w.a", ENTRY("I8", "[1]", "[0,1]")) "," T("w.b", ENTRY("I8", "[1]", "[2,3]")) "}",
   -1, 3, NULL, 0, DSV4_ERR_ST_OFFSETS, "gap in the data area: bytes [1, 2) before tensor 'w.b'"},
  {"bad_gap_at_start", "{" T("w.a", ENTRY("I8", "[1]", "[1,2]")) "}", -1, 2, NULL, 0,
   DSV4_ERR_ST_OFFSETS, "gap in the data area: bytes [0, 1) before tensor 'w.a'"},
  {"bad_bytes_after_last", "{" T("w.a", ENTRY("I8", "[1]", "[0,1]")) "}", -1, 9, NULL, 0,
   DSV4_ERR_ST_OFFSETS, "8 bytes [1, 9) after the last tensor belong to no tensor"},
  {"bad_bytes_no_tensors", "{}", -1, 3, NULL, 0, DSV4_ERR_ST_OFFSETS, "3 bytes [0, 3) after the header"},
  {"bad_empty_inside", "{" T("w.a", ENTRY("I8", "[4]", "[0,4]")) "," T("w.z", ENTRY("I8", "[0]", "[2,2]")) "}",
   -1, 4, NULL, 0, DSV4_ERR_ST_OVERLAP, "'w.a' [0, 4) and 'w.z' [2, 2) overlap"},
  {"bad_too_many_dims", "{" T("w.x", ENTRY("I8", "[1,1,1,1,1,1,1,1,1]", "[0,1]")) "}", -1, 1, NULL, 0,
   DSV4_ERR_UNSUPPORTED, "'w.x': 9 dimensions"},
  {"bad_offsets_reversed", "{" T("w.x", ENTRY("I8", "[4]", "[8,4]")) "}", -1, 8, NULL, 0,
   DSV4_ERR_ST_OFFSETS, "'w.x': data_offsets [8, 4]"},
  {"bad_offsets_past_data", "{" T("w.x", ENTRY("F32", "[4]", "[0,16]")) "}", -1, 8, NULL, 0,
   DSV4_ERR_ST_OFFSETS, "'w.x': data_offsets [0, 16] run past the data area of 8 bytes"},
  {"bad_offsets_count", "{" T("w.x", ENTRY("F32", "[1]", "[0,4,8]")) "}", -1, 8, NULL, 0,
   DSV4_ERR_ST_OFFSETS, "'w.x': data_offsets has 3 values"},
  {"bad_offsets_negative", "{" T("w.x", ENTRY("F32", "[1]", "[-4,0]")) "}", -1, 8, NULL, 0,
   DSV4_ERR_ST_OFFSETS, "'w.x': negative"},
  {"bad_overlap", "{" T("w.a", ENTRY("F32", "[2]", "[0,8]")) "," T("w.b", ENTRY("F32", "[2]", "[12,20]")) ","
   T("w.c", ENTRY("F32", "[2]", "[4,12]")) "}", -1, 20, NULL, 0, DSV4_ERR_ST_OVERLAP,
   "'w.a' [0, 8) and 'w.c' [4, 12) overlap"},
  {"bad_size_mismatch", "{" T("w.x", ENTRY("BF16", "[2,3]", "[0,10]")) "}", -1, 16, NULL, 0,
   DSV4_ERR_ST_SIZE, "'w.x': data_offsets span 10 bytes, but 6 BF16 elements need 12"},
  {"bad_negative_dim", "{" T("w.x", ENTRY("F32", "[2,-1]", "[0,0]")) "}", -1, 0, NULL, 0,
   DSV4_ERR_ST_SIZE, "'w.x': shape[1] = -1 is negative"},
  {"bad_shape_overflow", "{" T("w.x", ENTRY("F32", "[4294967296,4294967296]", "[0,0]")) "}", -1, 0,
   NULL, 0, DSV4_ERR_ST_SIZE, "'w.x': byte size of the F32 shape overflows"},
  {"bad_duplicate_name", "{" T("w.x", ENTRY("I8", "[1]", "[0,1]")) "," T("w.x", ENTRY("I8", "[1]", "[1,2]")) "}",
   -1, 2, NULL, 0, DSV4_ERR_ST_DUPLICATE, "\"w.x\""},
};

static void run_bad_case(void **state) {
  const bad_case *c = *state;
  char *dir = tu_mkdtemp();
  char *path = tu_join(dir, "bad-shard.safetensors");
  if (c->header)
    write_shard(path, c->hlen, c->header, c->payload);
  else
    assert_int_equal(tu_write_file(path, c->raw, c->raw_len), 0);
  dsv4i_st_file f;
  memset(&f, 0xA5, sizeof f);
  dsv4i_error_clear();
  dsv4_status st = dsv4i_st_open(path, &f);
  if (st != c->want)
    fail_msg("%s: status %d, want %d; message: %s", c->name, st, c->want, dsv4i_error_message());
  assert_int_equal(dsv4i_error_status(), c->want);
  tu_catalogue("safetensors shard", c->name, st, dsv4i_error_message());
  print_message("  -> %s\n", dsv4i_error_message());
  assert_msg_has(path);
  assert_msg_has(c->needle);
  assert_true(all_zero(&f, sizeof f));
  tu_rmtree(dir);
  free(path);
  free(dir);
}

int tu_run_suite(void) {
  enum { N_FIXED = 9 };
  struct CMUnitTest tests[N_FIXED + DSV4I_ARRAY_LEN(k_bad)] = {
    cmocka_unit_test(dtype_table_round_trips),
    cmocka_unit_test(writer_round_trip),
    cmocka_unit_test(writer_empty_file),
    cmocka_unit_test(writer_rejects_misuse),
    cmocka_unit_test(large_sparse_file),
    cmocka_unit_test(reader_accepts_edge_cases),
    cmocka_unit_test(golden_fixture_opens),
    cmocka_unit_test(open_missing_dir_and_null),
    cmocka_unit_test(reference_vectors),
  };
  for (size_t i = 0; i < DSV4I_ARRAY_LEN(k_bad); i++)
    tests[N_FIXED + i] = (struct CMUnitTest){k_bad[i].name, run_bad_case, NULL, NULL, (void *)&k_bad[i]};
  return cmocka_run_group_tests_name("safetensors", tests, NULL, NULL);
}
