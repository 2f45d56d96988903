/*
 * safetensors shard reader: map the file read-only, validate the header in
 * full, never touch the data area. Rules and statuses: safetensors.h.
 */
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <jansson.h>

#include "io/safetensors.h"
#include "io/json_util.h"

#define ST_MAX_HEADER 100000000u /* the official reader's limit */
#define ST_META_KEY "__metadata__"

static uint64_t read_le64(const uint8_t *p) {
  uint64_t v = 0;
  for (int i = 7; i >= 0; i--) v = (v << 8) | p[i];
  return v;
}

/* Open, stat and map f->path into f->map / f->size; the fd never outlives the call. */
static dsv4_status map_file(dsv4i_st_file *f) {
  int fd;
  uint64_t size;
  dsv4_status s = dsv4i_open_regular(f->path, "shard", &fd, &size);
  if (s != DSV4_OK) return s;
  if (size < 8) {
    close(fd);
    return dsv4i_error(DSV4_ERR_ST_TRUNCATED,
                       "%s: file is %" PRIu64 " bytes, too short for the 8-byte header length",
                       f->path, size);
  }
  if (size > SIZE_MAX) {
    close(fd);
    return dsv4i_error(DSV4_ERR_IO, "%s: %" PRIu64 " bytes do not fit the address space",
                       f->path, size);
  }
  void *m = mmap(NULL, (size_t)size, PROT_READ, MAP_PRIVATE, fd, 0);
  int e = errno;
  close(fd);
  if (m == MAP_FAILED)
    return dsv4i_error(DSV4_ERR_IO, "%s: mmap of %" PRIu64 " bytes failed: %s", f->path, size,
                       strerror(e));
  f->map = m;
  f->size = size;
  return DSV4_OK;
}

/* Check that every element of array a is a JSON integer (ST_HEADER otherwise). */
static dsv4_status check_int_array(const dsv4i_st_file *f, const char *name, const char *key,
                                   const json_t *a) {
  size_t i;
  json_t *x;
  json_array_foreach(a, i, x) {
    if (!json_is_integer(x))
      return dsv4i_error(DSV4_ERR_ST_HEADER, "%s: tensor '%s': %s[%zu] is %s, expected an integer",
                         f->path, name, key, i, dsv4i_json_kind(x));
  }
  return DSV4_OK;
}

/* Structural checks of one entry: an object with dtype (string), shape and
 * data_offsets (arrays of integers). */
static dsv4_status check_entry_types(const dsv4i_st_file *f, const char *name, const json_t *v) {
  if (!json_is_object(v))
    return dsv4i_error(DSV4_ERR_ST_HEADER,
                       "%s: tensor '%s': entry is %s, expected an object {dtype, shape, data_offsets}",
                       f->path, name, dsv4i_json_kind(v));
  static const char *const keys[] = {"dtype", "shape", "data_offsets"};
  for (size_t k = 0; k < DSV4I_ARRAY_LEN(keys); k++)
    if (!json_object_get(v, keys[k]))
      return dsv4i_error(DSV4_ERR_ST_HEADER, "%s: tensor '%s': missing \"%s\"", f->path, name,
                         keys[k]);
  const json_t *jd = json_object_get(v, "dtype");
  if (!json_is_string(jd))
    return dsv4i_error(DSV4_ERR_ST_HEADER, "%s: tensor '%s': dtype is %s, expected a string",
                       f->path, name, dsv4i_json_kind(jd));
  for (size_t k = 1; k < DSV4I_ARRAY_LEN(keys); k++) {
    const json_t *a = json_object_get(v, keys[k]);
    if (!json_is_array(a))
      return dsv4i_error(DSV4_ERR_ST_HEADER, "%s: tensor '%s': %s is %s, expected an array",
                         f->path, name, keys[k], dsv4i_json_kind(a));
    dsv4_status st = check_int_array(f, name, keys[k], a);
    if (st != DSV4_OK) return st;
  }
  return DSV4_OK;
}

/* data_offsets [begin, end) relative to the data area of data_len bytes. */
static dsv4_status parse_offsets(const dsv4i_st_file *f, const char *name, const json_t *jo,
                                 uint64_t data_len, uint64_t *begin, uint64_t *end) {
  if (json_array_size(jo) != 2)
    return dsv4i_error(DSV4_ERR_ST_OFFSETS, "%s: tensor '%s': data_offsets has %zu values, expected 2",
                       f->path, name, json_array_size(jo));
  json_int_t b = json_integer_value(json_array_get(jo, 0));
  json_int_t e = json_integer_value(json_array_get(jo, 1));
  if (b < 0 || e < 0)
    return dsv4i_error(DSV4_ERR_ST_OFFSETS, "%s: tensor '%s': negative data_offsets [%lld, %lld]",
                       f->path, name, (long long)b, (long long)e);
  if (b > e)
    return dsv4i_error(DSV4_ERR_ST_OFFSETS,
                       "%s: tensor '%s': data_offsets [%lld, %lld] end before they begin",
                       f->path, name, (long long)b, (long long)e);
  if ((uint64_t)e > data_len)
    return dsv4i_error(DSV4_ERR_ST_OFFSETS,
                       "%s: tensor '%s': data_offsets [%lld, %lld] run past the data area of "
                       "%" PRIu64 " bytes (file truncated?)",
                       f->path, name, (long long)b, (long long)e, data_len);
  *begin = (uint64_t)b;
  *end = (uint64_t)e;
  return DSV4_OK;
}

/* The reference reader's dtypes that libdsv4 does not read (the model's
 * tensors never use them): legal in the format, refused by this reader. */
static int is_reference_dtype(const char *s) {
  static const char *const k[] = {"BOOL", "U8", "I16", "U16", "U32", "U64", "F64", "C64",
                                  "F8_E5M2", "F8_E4M3FNUZ", "F8_E5M2FNUZ", "F4", "F6_E2M3",
                                  "F6_E3M2"};
  for (size_t i = 0; i < DSV4I_ARRAY_LEN(k); i++)
    if (strcmp(s, k[i]) == 0) return 1;
  return 0;
}

/* Validate one tensor entry v named `name` and fill *t (name set by the caller). */
static dsv4_status parse_entry(const dsv4i_st_file *f, const char *name, const json_t *v,
                               dsv4i_st_tensor *t) {
  dsv4_status st = check_entry_types(f, name, v);
  if (st != DSV4_OK) return st;
  const char *ds = json_string_value(json_object_get(v, "dtype"));
  t->dtype = dsv4i_dtype_from_string(ds);
  if (t->dtype == 0)
    return dsv4i_error(DSV4_ERR_ST_DTYPE,
                       "%s: tensor '%s': %s \"%s\" (libdsv4 reads BF16, F16, F32, F8_E4M3, "
                       "F8_E8M0, I8, I32, I64)", f->path, name,
                       is_reference_dtype(ds) ? "the model never uses the safetensors dtype"
                                              : "unknown dtype", ds);
  const json_t *js = json_object_get(v, "shape");
  size_t ndim = json_array_size(js);
  if (ndim > DSV4I_MAX_DIMS)
    return dsv4i_error(DSV4_ERR_UNSUPPORTED, "%s: tensor '%s': %zu dimensions (at most %d supported)",
                       f->path, name, ndim, DSV4I_MAX_DIMS);
  t->ndim = (int32_t)ndim;
  uint64_t elems = 1;
  int overflow = 0;
  for (size_t i = 0; i < ndim; i++) {
    json_int_t d = json_integer_value(json_array_get(js, i));
    if (d < 0)
      return dsv4i_error(DSV4_ERR_ST_SIZE, "%s: tensor '%s': shape[%zu] = %lld is negative",
                         f->path, name, i, (long long)d);
    t->shape[i] = d;
    if (!dsv4i_mul_overflow_u64(elems, (uint64_t)d, &elems)) overflow = 1;
  }
  uint64_t begin = 0, end = 0, need = 0;
  st = parse_offsets(f, name, json_object_get(v, "data_offsets"), f->size - f->data_start, &begin, &end);
  if (st != DSV4_OK) return st;
  if (overflow || !dsv4i_mul_overflow_u64(elems, dsv4i_dtype_size(t->dtype), &need))
    return dsv4i_error(DSV4_ERR_ST_SIZE, "%s: tensor '%s': byte size of the %s shape overflows 64 bits",
                       f->path, name, ds);
  if (need != end - begin)
    return dsv4i_error(DSV4_ERR_ST_SIZE,
                       "%s: tensor '%s': data_offsets span %" PRIu64 " bytes, but %" PRIu64
                       " %s elements need %" PRIu64, f->path, name, end - begin, elems, ds, need);
  t->offset = f->data_start + begin;
  t->nbytes = end - begin;
  return DSV4_OK;
}

/* "__metadata__": an object of strings, kept re-serialised in f->metadata_json. */
static dsv4_status parse_metadata(dsv4i_st_file *f, const json_t *m) {
  if (json_is_null(m)) return DSV4_OK; /* the reference reader reads null as absent */
  if (!json_is_object(m))
    return dsv4i_error(DSV4_ERR_ST_HEADER, "%s: \"" ST_META_KEY "\" is %s, expected an object of strings",
                       f->path, dsv4i_json_kind(m));
  const char *k;
  const json_t *v;
  json_object_foreach((json_t *)m, k, v) {
    if (!json_is_string(v))
      return dsv4i_error(DSV4_ERR_ST_HEADER, "%s: \"" ST_META_KEY "\".\"%s\" is %s, expected a string",
                         f->path, k, dsv4i_json_kind(v));
  }
  f->metadata_json = json_dumps(m, JSON_COMPACT);
  if (!f->metadata_json)
    return dsv4i_error(DSV4_ERR_OUT_OF_MEMORY, "%s: out of memory copying \"" ST_META_KEY "\"", f->path);
  return DSV4_OK;
}

/* Build the tensor table from the parsed header object: one allocation holds
 * the table followed by every name, so dsv4i_st_close frees one block. */
static dsv4_status parse_root(dsv4i_st_file *f, json_t *root) {
  if (!json_is_object(root))
    return dsv4i_error(DSV4_ERR_ST_HEADER, "%s: header is %s, expected an object of tensors",
                       f->path, dsv4i_json_kind(root));
  const char *key;
  json_t *v;
  size_t n = 0, names = 0;
  json_object_foreach(root, key, v) {
    if (strcmp(key, ST_META_KEY) == 0) continue;
    n++;
    names += strlen(key) + 1;
  }
  f->tensors = dsv4i_malloc(n * sizeof *f->tensors + names, "a safetensors tensor table");
  if (!f->tensors) return DSV4_ERR_OUT_OF_MEMORY;
  memset(f->tensors, 0, n * sizeof *f->tensors);
  char *pool = (char *)(f->tensors + n);
  json_object_foreach(root, key, v) {
    dsv4_status st;
    if (strcmp(key, ST_META_KEY) == 0) {
      st = parse_metadata(f, v);
    } else {
      dsv4i_st_tensor *t = &f->tensors[f->n_tensors];
      size_t len = strlen(key) + 1;
      memcpy(pool, key, len);
      t->name = pool;
      pool += len;
      st = parse_entry(f, key, v, t);
      f->n_tensors++;
    }
    if (st != DSV4_OK) return st;
  }
  return DSV4_OK;
}

/* Header length, JSON parse (duplicate keys rejected), then the table. */
static dsv4_status parse_header(dsv4i_st_file *f) {
  uint64_t n = read_le64(f->map);
  if (n > f->size - 8)
    return dsv4i_error(DSV4_ERR_ST_HEADER,
                       "%s: header length %" PRIu64 " runs past the end of the %" PRIu64 "-byte file",
                       f->path, n, f->size);
  if (n > ST_MAX_HEADER)
    return dsv4i_error(DSV4_ERR_ST_HEADER, "%s: header length %" PRIu64 " exceeds the %u-byte limit",
                       f->path, n, ST_MAX_HEADER);
  f->data_start = 8 + n;
  json_error_t je;
  json_t *root = json_loadb((const char *)f->map + 8, (size_t)n, JSON_REJECT_DUPLICATES, &je);
  if (!root) {
    if (dsv4i_json_oom(&je, f->path)) return DSV4_ERR_OUT_OF_MEMORY;
    if (json_error_code(&je) == json_error_duplicate_key)
      return dsv4i_error(DSV4_ERR_ST_DUPLICATE,
                         "%s: header: %s (line %d, column %d): keys, tensor names included, must be unique",
                         f->path, je.text, je.line, je.column);
    return dsv4i_error(DSV4_ERR_JSON, "%s: header is not valid JSON: %s (line %d, column %d)",
                       f->path, je.text, je.line, je.column);
  }
  dsv4_status st = parse_root(f, root);
  json_decref(root);
  return st;
}

/* By (begin, end) as the reference reader sorts; ties by header order. */
static int cmp_by_offset(const void *a, const void *b) {
  const dsv4i_st_tensor *x = *(const dsv4i_st_tensor *const *)a;
  const dsv4i_st_tensor *y = *(const dsv4i_st_tensor *const *)b;
  if (x->offset != y->offset) return x->offset < y->offset ? -1 : 1;
  if (x->nbytes != y->nbytes) return x->nbytes < y->nbytes ? -1 : 1;
  return (x > y) - (x < y);
}

/* The ranges sorted by (begin, end) must tile the data area exactly: each
 * begins where the previous one ended (the first at 0) and the last ends at
 * the end of the file. An earlier begin is an overlap, a later one a gap. */
static dsv4_status check_coverage(const dsv4i_st_file *f) {
  const uint64_t d = f->data_start, data_len = f->size - f->data_start;
  const dsv4i_st_tensor **v = dsv4i_malloc((f->n_tensors ? f->n_tensors : 1) * sizeof *v,
                                           "a safetensors coverage check");
  if (!v) return DSV4_ERR_OUT_OF_MEMORY;
  for (size_t i = 0; i < f->n_tensors; i++) v[i] = &f->tensors[i];
  qsort(v, f->n_tensors, sizeof *v, cmp_by_offset);
  const dsv4i_st_tensor *prev = NULL;
  uint64_t at = 0; /* end of the covered prefix, relative to the data area */
  dsv4_status st = DSV4_OK;
  for (size_t i = 0; i < f->n_tensors && st == DSV4_OK; i++) {
    const uint64_t b = v[i]->offset - d;
    if (b < at)
      st = dsv4i_error(DSV4_ERR_ST_OVERLAP,
                       "%s: tensors '%s' [%" PRIu64 ", %" PRIu64 ") and '%s' [%" PRIu64 ", %" PRIu64
                       ") overlap", f->path, prev->name, prev->offset - d, at, v[i]->name, b,
                       b + v[i]->nbytes);
    else if (b > at)
      st = dsv4i_error(DSV4_ERR_ST_OFFSETS,
                       "%s: gap in the data area: bytes [%" PRIu64 ", %" PRIu64 ") before tensor '%s' "
                       "belong to no tensor (the tensors must cover the data area exactly)",
                       f->path, at, b, v[i]->name);
    prev = v[i];
    at = b + v[i]->nbytes;
  }
  if (st == DSV4_OK && at != data_len)
    st = dsv4i_error(DSV4_ERR_ST_OFFSETS,
                     "%s: gap in the data area: %" PRIu64 " byte%s [%" PRIu64 ", %" PRIu64 ") after %s "
                     "belong to no tensor (the tensors must cover the data area exactly)",
                     f->path, data_len - at, data_len - at == 1 ? "" : "s", at, data_len, prev ? "the last tensor" : "the header");
  free(v);
  return st;
}

/* After the bytes are in place (st: how that went): header and coverage checks;
 * *out = *f on success, f closed on failure. */
static dsv4_status finish_open(dsv4i_st_file *f, dsv4_status st, dsv4i_st_file *out) {
  if (st == DSV4_OK) st = parse_header(f);
  if (st == DSV4_OK) st = check_coverage(f);
  if (st != DSV4_OK) {
    dsv4i_st_close(f);
    return st;
  }
  *out = *f;
  return DSV4_OK;
}

dsv4_status dsv4i_st_open(const char *path, dsv4i_st_file *out) {
  if (!out) return dsv4i_error(DSV4_ERR_INVALID_ARG, "dsv4i_st_open: out is NULL");
  memset(out, 0, sizeof *out);
  if (!path) return dsv4i_error(DSV4_ERR_INVALID_ARG, "dsv4i_st_open: path is NULL");
  dsv4i_st_file f = {0};
  f.path = dsv4i_strdup(path, "a shard path");
  if (!f.path) return DSV4_ERR_OUT_OF_MEMORY;
  return finish_open(&f, map_file(&f), out);
}

dsv4_status dsv4i_st_parse(const char *name, const uint8_t *buf, size_t size, dsv4i_st_file *out) {
  if (!out) return dsv4i_error(DSV4_ERR_INVALID_ARG, "dsv4i_st_parse: out is NULL");
  memset(out, 0, sizeof *out);
  if (!name || (!buf && size))
    return dsv4i_error(DSV4_ERR_INVALID_ARG, "dsv4i_st_parse: name or buffer is NULL");
  dsv4i_st_file f = {0};
  f.path = dsv4i_strdup(name, "a shard name");
  if (!f.path) return DSV4_ERR_OUT_OF_MEMORY;
  f.map = buf;
  f.size = size;
  f.borrowed = 1;
  const dsv4_status st =
      size < 8 ? dsv4i_error(DSV4_ERR_ST_TRUNCATED,
                             "%s: file is %zu bytes, too short for the 8-byte header length", name, size)
               : DSV4_OK;
  return finish_open(&f, st, out);
}

void dsv4i_st_close(dsv4i_st_file *f) {
  if (!f) return;
  if (f->map && !f->borrowed) munmap((void *)f->map, (size_t)f->size);
  free(f->path);
  free(f->tensors);
  free(f->metadata_json);
  memset(f, 0, sizeof *f);
}

const dsv4i_st_tensor *dsv4i_st_find(const dsv4i_st_file *f, const char *name) {
  if (!f || !name) return NULL;
  for (size_t i = 0; i < f->n_tensors; i++)
    if (strcmp(f->tensors[i].name, name) == 0) return &f->tensors[i];
  return NULL;
}
