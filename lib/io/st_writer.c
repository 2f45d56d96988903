/*
 * Streaming safetensors writer (see safetensors.h): declarations are kept in
 * memory, the header is written once, payload bytes go straight to write(2).
 */
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <jansson.h>

#include "io/safetensors.h"

#define ST_META_KEY "__metadata__"
#define WRITE_CHUNK ((size_t)1 << 30) /* keep each write(2) well below SSIZE_MAX limits */

typedef struct wtensor {
  char *name;
  int32_t dtype;
  int32_t ndim;
  int64_t shape[DSV4I_MAX_DIMS];
  uint64_t begin;  /* relative to the data area */
  uint64_t nbytes;
} wtensor;

struct dsv4i_st_writer {
  char *path;
  int fd;
  int in_data;          /* begin_data done */
  dsv4_status failed;   /* sticky I/O failure, DSV4_OK while healthy */
  wtensor *t;
  size_t n, cap;
  uint64_t total;       /* declared payload bytes */
  uint64_t written;     /* payload bytes written */
  json_t *meta;         /* "__metadata__" object, or NULL */
};

/* The sticky status, re-recorded so the caller's message is current. */
static dsv4_status check_healthy(const dsv4i_st_writer *w) {
  if (w->failed == DSV4_OK) return DSV4_OK;
  return dsv4i_error(w->failed, "%s: an earlier write failed; the writer is unusable", w->path);
}

/* write(2) all n bytes (retrying short writes and EINTR); failure is sticky. */
static dsv4_status write_all(dsv4i_st_writer *w, const void *data, size_t n) {
  const uint8_t *p = data;
  while (n > 0) {
    ssize_t k = write(w->fd, p, n < WRITE_CHUNK ? n : WRITE_CHUNK);
    if (k < 0 && errno == EINTR) continue;
    if (k <= 0) {
      w->failed = DSV4_ERR_IO;
      return dsv4i_error(DSV4_ERR_IO, "%s: write failed: %s", w->path,
                         k < 0 ? strerror(errno) : "no progress");
    }
    p += k;
    n -= (size_t)k;
  }
  return DSV4_OK;
}

dsv4_status dsv4i_st_writer_create(const char *path, dsv4i_st_writer **out) {
  if (!out) return dsv4i_error(DSV4_ERR_INVALID_ARG, "dsv4i_st_writer_create: out is NULL");
  *out = NULL;
  if (!path) return dsv4i_error(DSV4_ERR_INVALID_ARG, "dsv4i_st_writer_create: path is NULL");
  dsv4i_st_writer *w = dsv4i_calloc(1, sizeof *w, "a safetensors writer");
  if (!w) return DSV4_ERR_OUT_OF_MEMORY;
  w->path = dsv4i_strdup(path, "a safetensors writer path");
  if (!w->path) {
    free(w);
    return DSV4_ERR_OUT_OF_MEMORY;
  }
  w->fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (w->fd < 0) {
    dsv4_status st = dsv4i_error(DSV4_ERR_IO, "%s: cannot create: %s", path, strerror(errno));
    free(w->path);
    free(w);
    return st;
  }
  *out = w;
  return DSV4_OK;
}

/* Argument checks of a declaration; fills the byte size. */
static dsv4_status check_decl(const dsv4i_st_writer *w, const char *name, int32_t dtype,
                              int32_t ndim, const int64_t *shape, uint64_t *nbytes) {
  if (!name || !name[0] || strcmp(name, ST_META_KEY) == 0)
    return dsv4i_error(DSV4_ERR_INVALID_ARG, "%s: tensor name '%s' is not allowed", w->path,
                       name ? name : "(null)");
  json_t *probe = json_string(name);
  if (!probe)
    return dsv4i_error(DSV4_ERR_INVALID_ARG, "%s: tensor name '%s' is not valid UTF-8", w->path, name);
  json_decref(probe);
  uint64_t n = dsv4i_dtype_size(dtype);
  if (n == 0)
    return dsv4i_error(DSV4_ERR_INVALID_ARG, "%s: tensor '%s': unknown dtype %d", w->path, name, (int)dtype);
  if (ndim < 0 || ndim > DSV4I_MAX_DIMS || (ndim > 0 && !shape))
    return dsv4i_error(DSV4_ERR_INVALID_ARG, "%s: tensor '%s': bad ndim %d or NULL shape", w->path,
                       name, (int)ndim);
  for (int32_t i = 0; i < ndim; i++) {
    if (shape[i] < 0)
      return dsv4i_error(DSV4_ERR_INVALID_ARG, "%s: tensor '%s': shape[%d] = %" PRId64 " is negative",
                         w->path, name, (int)i, shape[i]);
    if (!dsv4i_mul_overflow_u64(n, (uint64_t)shape[i], &n))
      return dsv4i_error(DSV4_ERR_INVALID_ARG, "%s: tensor '%s': byte size overflows", w->path, name);
  }
  if (w->total + n < w->total || w->total + n > (uint64_t)INT64_MAX)
    return dsv4i_error(DSV4_ERR_INVALID_ARG, "%s: tensor '%s': file size overflows", w->path, name);
  *nbytes = n;
  return DSV4_OK;
}

dsv4_status dsv4i_st_writer_declare(dsv4i_st_writer *w, const char *name, int32_t dtype,
                                    int32_t ndim, const int64_t *shape) {
  if (!w) return dsv4i_error(DSV4_ERR_INVALID_ARG, "dsv4i_st_writer_declare: w is NULL");
  if (w->in_data)
    return dsv4i_error(DSV4_ERR_INVALID_ARG, "%s: declare after begin_data", w->path);
  uint64_t nbytes = 0;
  dsv4_status st = check_decl(w, name, dtype, ndim, shape, &nbytes);
  if (st != DSV4_OK) return st;
  if (w->n == w->cap) {
    size_t cap = w->cap ? w->cap * 2 : 64;
    wtensor *nt = dsv4i_realloc(w->t, cap * sizeof *nt, "the writer's tensor list");
    if (!nt) return DSV4_ERR_OUT_OF_MEMORY;
    w->t = nt;
    w->cap = cap;
  }
  wtensor *t = &w->t[w->n];
  memset(t, 0, sizeof *t);
  t->name = dsv4i_strdup(name, "a tensor name");
  if (!t->name) return DSV4_ERR_OUT_OF_MEMORY;
  t->dtype = dtype;
  t->ndim = ndim;
  for (int32_t i = 0; i < ndim; i++) t->shape[i] = shape[i];
  t->begin = w->total;
  t->nbytes = nbytes;
  w->total += nbytes;
  w->n++;
  return DSV4_OK;
}

dsv4_status dsv4i_st_writer_set_metadata(dsv4i_st_writer *w, const char *key, const char *value) {
  if (!w || !key || !value)
    return dsv4i_error(DSV4_ERR_INVALID_ARG, "dsv4i_st_writer_set_metadata: NULL argument");
  if (w->in_data)
    return dsv4i_error(DSV4_ERR_INVALID_ARG, "%s: set_metadata after begin_data", w->path);
  if (!w->meta && !(w->meta = json_object()))
    return dsv4i_error(DSV4_ERR_OUT_OF_MEMORY, "%s: out of memory for metadata", w->path);
  json_t *v = json_string(value);
  if (!v || json_object_set_new(w->meta, key, v) != 0)
    return dsv4i_error(DSV4_ERR_INVALID_ARG, "%s: metadata '%s' is not valid UTF-8 (or out of memory)",
                       w->path, key);
  return DSV4_OK;
}

static int cmp_wname(const void *a, const void *b) {
  return strcmp((*(const wtensor *const *)a)->name, (*(const wtensor *const *)b)->name);
}

/* DSV4_ERR_ST_DUPLICATE if two declarations share a name (sorted copy). */
static dsv4_status check_unique(const dsv4i_st_writer *w) {
  if (w->n < 2) return DSV4_OK;
  const wtensor **v = dsv4i_malloc(w->n * sizeof *v, "the writer's name check");
  if (!v) return DSV4_ERR_OUT_OF_MEMORY;
  for (size_t i = 0; i < w->n; i++) v[i] = &w->t[i];
  qsort(v, w->n, sizeof *v, cmp_wname);
  dsv4_status st = DSV4_OK;
  for (size_t i = 1; i < w->n && st == DSV4_OK; i++)
    if (strcmp(v[i - 1]->name, v[i]->name) == 0)
      st = dsv4i_error(DSV4_ERR_ST_DUPLICATE, "%s: tensor '%s' declared twice", w->path, v[i]->name);
  free(v);
  return st;
}

/* One header entry {dtype, shape, data_offsets}; NULL when out of memory. */
static json_t *entry_json(const wtensor *t) {
  json_t *shape = json_array();
  for (int32_t i = 0; shape && i < t->ndim; i++)
    if (json_array_append_new(shape, json_integer((json_int_t)t->shape[i])) != 0) {
      json_decref(shape);
      shape = NULL;
    }
  if (!shape) return NULL;
  return json_pack("{s:s, s:o, s:[I,I]}", "dtype", dsv4i_dtype_name(t->dtype), "shape", shape,
                   "data_offsets", (json_int_t)t->begin, (json_int_t)(t->begin + t->nbytes));
}

/* The header text (compact JSON, declaration order); caller frees. */
static char *header_text(const dsv4i_st_writer *w) {
  json_t *root = json_object();
  int ok = root != NULL;
  if (ok && w->meta) ok = json_object_set(root, ST_META_KEY, w->meta) == 0;
  for (size_t i = 0; ok && i < w->n; i++) {
    json_t *e = entry_json(&w->t[i]);
    ok = e && json_object_set_new(root, w->t[i].name, e) == 0;
  }
  char *text = ok ? json_dumps(root, JSON_COMPACT) : NULL;
  json_decref(root);
  return text;
}

dsv4_status dsv4i_st_writer_begin_data(dsv4i_st_writer *w) {
  if (!w) return dsv4i_error(DSV4_ERR_INVALID_ARG, "dsv4i_st_writer_begin_data: w is NULL");
  dsv4_status st = check_healthy(w);
  if (st != DSV4_OK) return st;
  if (w->in_data) return dsv4i_error(DSV4_ERR_INVALID_ARG, "%s: begin_data called twice", w->path);
  st = check_unique(w);
  if (st != DSV4_OK) return st;
  char *text = header_text(w);
  if (!text) return dsv4i_error(DSV4_ERR_OUT_OF_MEMORY, "%s: out of memory building the header", w->path);
  size_t len = strlen(text), pad = (8 - len % 8) % 8;
  uint8_t *buf = dsv4i_malloc(8 + len + pad, "a safetensors header");
  if (!buf) {
    free(text);
    return DSV4_ERR_OUT_OF_MEMORY;
  }
  uint64_t n = len + pad;
  for (int i = 0; i < 8; i++) buf[i] = (uint8_t)(n >> (8 * i));
  memcpy(buf + 8, text, len);
  memset(buf + 8 + len, ' ', pad);
  free(text);
  st = write_all(w, buf, 8 + len + pad);
  free(buf);
  if (st == DSV4_OK) w->in_data = 1;
  return st;
}

dsv4_status dsv4i_st_writer_write(dsv4i_st_writer *w, const void *data, size_t n) {
  if (!w) return dsv4i_error(DSV4_ERR_INVALID_ARG, "dsv4i_st_writer_write: w is NULL");
  dsv4_status st = check_healthy(w);
  if (st != DSV4_OK) return st;
  if (!w->in_data) return dsv4i_error(DSV4_ERR_INVALID_ARG, "%s: write before begin_data", w->path);
  if (!data && n > 0) return dsv4i_error(DSV4_ERR_INVALID_ARG, "%s: write of NULL data", w->path);
  if (n > w->total - w->written)
    return dsv4i_error(DSV4_ERR_ST_SIZE,
                       "%s: writing %zu bytes at payload offset %" PRIu64 " passes the %" PRIu64
                       " declared bytes", w->path, n, w->written, w->total);
  st = write_all(w, data, n);
  if (st == DSV4_OK) w->written += n;
  return st;
}

/* Name of the tensor holding payload offset `at` (the first incomplete one). */
static const char *tensor_at(const dsv4i_st_writer *w, uint64_t at) {
  for (size_t i = 0; i < w->n; i++)
    if (w->t[i].begin + w->t[i].nbytes > at) return w->t[i].name;
  return "?";
}

static void writer_free(dsv4i_st_writer *w) {
  for (size_t i = 0; i < w->n; i++) free(w->t[i].name);
  free(w->t);
  json_decref(w->meta);
  free(w->path);
  free(w);
}

dsv4_status dsv4i_st_writer_finish(dsv4i_st_writer *w) {
  if (!w) return dsv4i_error(DSV4_ERR_INVALID_ARG, "dsv4i_st_writer_finish: w is NULL");
  dsv4_status st = check_healthy(w);
  if (st == DSV4_OK && !w->in_data) st = dsv4i_st_writer_begin_data(w);
  if (st == DSV4_OK && w->written != w->total)
    st = dsv4i_error(DSV4_ERR_ST_SIZE,
                     "%s: %" PRIu64 " of %" PRIu64 " declared payload bytes written; "
                     "tensor '%s' is incomplete",
                     w->path, w->written, w->total, tensor_at(w, w->written));
  if (close(w->fd) != 0 && st == DSV4_OK)
    st = dsv4i_error(DSV4_ERR_IO, "%s: close failed: %s", w->path, strerror(errno));
  writer_free(w);
  return st;
}

void dsv4i_st_writer_abort(dsv4i_st_writer *w) {
  if (!w) return;
  close(w->fd);
  writer_free(w);
}
