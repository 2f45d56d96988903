/*
 * Checkpoint directories (spec §4.1): model.safetensors.index.json plus the
 * shards it names, or a single model.safetensors. Every shard is opened and
 * validated (safetensors.c); the index and the shards must agree exactly.
 * Rules and statuses: safetensors.h, dsv4i_checkpoint_open.
 */
#include <errno.h>
#include <inttypes.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include <jansson.h>

#include "io/safetensors.h"
#include "io/json_util.h"

#define INDEX_NAME "model.safetensors.index.json"
#define SINGLE_NAME "model.safetensors"

/* The parsed index: root owns everything; weight_map borrowed from it. */
typedef struct index_doc {
  const char *path;
  json_t *root;
  json_t *weight_map;
  int has_total;
  uint64_t total_size;
} index_doc;

/* *exists = whether path names anything; only real stat failures are errors. */
static dsv4_status probe_path(const char *path, int *exists) {
  struct stat st;
  if (stat(path, &st) == 0) {
    *exists = 1;
    return DSV4_OK;
  }
  if (errno == ENOENT || errno == ENOTDIR) {
    *exists = 0;
    return DSV4_OK;
  }
  return dsv4i_error(DSV4_ERR_IO, "%s: cannot stat: %s", path, strerror(errno));
}

/* metadata.total_size: a non-negative integer (an integral JSON real is accepted). */
static dsv4_status parse_metadata(index_doc *ix) {
  const json_t *m = json_object_get(ix->root, "metadata");
  if (!m) return DSV4_OK;
  if (!json_is_object(m))
    return dsv4i_error(DSV4_ERR_INDEX, "%s: \"metadata\" is not an object", ix->path);
  const json_t *ts = json_object_get(m, "total_size");
  if (!ts) return DSV4_OK;
  if (json_is_integer(ts) && json_integer_value(ts) >= 0) {
    ix->total_size = (uint64_t)json_integer_value(ts);
  } else if (json_is_real(ts) && json_real_value(ts) >= 0 && json_real_value(ts) < 9007199254740992.0 &&
             (double)(uint64_t)json_real_value(ts) == json_real_value(ts)) {
    ix->total_size = (uint64_t)json_real_value(ts);
  } else {
    return dsv4i_error(DSV4_ERR_INDEX, "%s: \"metadata\".\"total_size\" is not a non-negative integer",
                       ix->path);
  }
  ix->has_total = 1;
  return DSV4_OK;
}

/* Parse the index text and check its structure (not the shards). */
static dsv4_status parse_index(index_doc *ix, const char *buf, size_t len) {
  json_error_t je;
  ix->root = json_loadb(buf, len, JSON_REJECT_DUPLICATES, &je);
  if (!ix->root) {
    if (dsv4i_json_oom(&je, ix->path)) return DSV4_ERR_OUT_OF_MEMORY;
    if (json_error_code(&je) == json_error_duplicate_key)
      return dsv4i_error(DSV4_ERR_INDEX, "%s: %s (line %d, column %d): keys must be unique",
                         ix->path, je.text, je.line, je.column);
    return dsv4i_error(DSV4_ERR_JSON, "%s: not valid JSON: %s (line %d, column %d)", ix->path,
                       je.text, je.line, je.column);
  }
  if (!json_is_object(ix->root))
    return dsv4i_error(DSV4_ERR_INDEX, "%s: top level is not an object", ix->path);
  ix->weight_map = json_object_get(ix->root, "weight_map");
  if (!ix->weight_map)
    return dsv4i_error(DSV4_ERR_INDEX, "%s: no \"weight_map\"", ix->path);
  if (!json_is_object(ix->weight_map))
    return dsv4i_error(DSV4_ERR_INDEX, "%s: \"weight_map\" is not an object", ix->path);
  if (json_object_size(ix->weight_map) == 0)
    return dsv4i_error(DSV4_ERR_INDEX, "%s: \"weight_map\" is empty", ix->path);
  return parse_metadata(ix);
}

static dsv4_status load_index(index_doc *ix) {
  char *buf;
  size_t len;
  dsv4_status s = dsv4i_read_file(ix->path, (size_t)1 << 30, "index", &buf, &len);
  if (s != DSV4_OK) return s;
  s = parse_index(ix, buf, len);
  free(buf);
  return s;
}

/* A shard must be a plain, non-empty file name inside the directory. */
static int shard_name_ok(const char *s) {
  return s[0] != '\0' && !strchr(s, '/') && !strstr(s, "..");
}

static int cmp_str_ptr(const void *a, const void *b) {
  return strcmp(*(const char *const *)a, *(const char *const *)b);
}

/* The distinct shard names of the weight map, sorted (borrowed from the JSON). */
static dsv4_status collect_shards(const index_doc *ix, const char ***names_out, int32_t *n_out) {
  size_t n = json_object_size(ix->weight_map), m = 0;
  const char **names = dsv4i_malloc(n * sizeof *names, "the shard name list");
  if (!names) return DSV4_ERR_OUT_OF_MEMORY;
  const char *key;
  json_t *v;
  json_object_foreach(ix->weight_map, key, v) {
    const char *s = json_string_value(v);
    dsv4_status st = DSV4_OK;
    if (!s)
      st = dsv4i_error(DSV4_ERR_INDEX, "%s: weight_map entry for tensor '%s' is not a string",
                       ix->path, key);
    else if (!shard_name_ok(s))
      st = dsv4i_error(DSV4_ERR_INDEX,
                       "%s: weight_map puts tensor '%s' in shard \"%s\": a shard must be a plain file "
                       "name in the checkpoint directory (non-empty, no '/', no '..')",
                       ix->path, key, s);
    if (st != DSV4_OK) {
      free(names);
      return st;
    }
    names[m++] = s;
  }
  qsort(names, n, sizeof *names, cmp_str_ptr);
  m = 0;
  for (size_t i = 0; i < n; i++)
    if (m == 0 || strcmp(names[m - 1], names[i]) != 0) names[m++] = names[i];
  if (m > INT32_MAX) {
    free(names);
    return dsv4i_error(DSV4_ERR_UNSUPPORTED, "%s: %zu shards", ix->path, m);
  }
  *names_out = names;
  *n_out = (int32_t)m;
  return DSV4_OK;
}

/* First tensor the weight map places in `shard` (for messages). */
static const char *first_tensor_of(const json_t *weight_map, const char *shard) {
  const char *key;
  json_t *v;
  json_object_foreach((json_t *)weight_map, key, v) {
    if (strcmp(json_string_value(v), shard) == 0) return key;
  }
  return "?";
}

/* Open every shard the index names; a missing one is DSV4_ERR_MISSING_SHARD. */
static dsv4_status open_shards(dsv4i_checkpoint *c, const index_doc *ix, const char **names, int32_t n) {
  c->shards = dsv4i_calloc((size_t)n, sizeof *c->shards, "the shard table");
  if (!c->shards) return DSV4_ERR_OUT_OF_MEMORY;
  c->n_shards = n;
  for (int32_t i = 0; i < n; i++) {
    char *path = dsv4i_path_join(c->dir, names[i]);
    if (!path) return DSV4_ERR_OUT_OF_MEMORY;
    dsv4_status st = dsv4i_st_open(path, &c->shards[i]);
    if (st == DSV4_ERR_NOT_FOUND)
      st = dsv4i_error(DSV4_ERR_MISSING_SHARD,
                       "%s: shard \"%s\" (holding tensor '%s', ...) does not exist: %s",
                       ix->path, names[i], first_tensor_of(ix->weight_map, names[i]), path);
    free(path);
    if (st != DSV4_OK) return st;
  }
  return DSV4_OK;
}

static int cmp_entry(const void *a, const void *b) {
  const dsv4i_ckpt_entry *x = a, *y = b;
  int r = strcmp(x->name, y->name);
  if (r != 0) return r;
  return (x->shard > y->shard) - (x->shard < y->shard);
}

/* Entries of every open shard, sorted by name; a name in two shards is
 * DSV4_ERR_ST_DUPLICATE. Sums payload_bytes. */
static dsv4_status build_entries(dsv4i_checkpoint *c) {
  size_t n = 0;
  for (int32_t s = 0; s < c->n_shards; s++) n += c->shards[s].n_tensors;
  c->entries = dsv4i_malloc(n * sizeof *c->entries, "the checkpoint tensor table");
  if (!c->entries) return DSV4_ERR_OUT_OF_MEMORY;
  for (int32_t s = 0; s < c->n_shards; s++) {
    const dsv4i_st_file *f = &c->shards[s];
    for (size_t i = 0; i < f->n_tensors; i++) {
      dsv4i_ckpt_entry *e = &c->entries[c->n_entries++];
      e->name = f->tensors[i].name;
      e->shard = s;
      e->t = &f->tensors[i];
      e->copy = NULL;
      if (c->payload_bytes + e->t->nbytes < c->payload_bytes)
        return dsv4i_error(DSV4_ERR_ST_SIZE, "checkpoint %s: payload bytes overflow 64 bits", c->dir);
      c->payload_bytes += e->t->nbytes;
    }
  }
  qsort(c->entries, n, sizeof *c->entries, cmp_entry);
  for (size_t i = 1; i < n; i++)
    if (strcmp(c->entries[i - 1].name, c->entries[i].name) == 0)
      return dsv4i_error(DSV4_ERR_ST_DUPLICATE, "checkpoint %s: tensor '%s' is in both %s and %s",
                         c->dir, c->entries[i].name, c->shards[c->entries[i - 1].shard].path,
                         c->shards[c->entries[i].shard].path);
  return DSV4_OK;
}

/* Every index entry resolves to a tensor of the shard it names, and every
 * shard tensor is named by the index (weight_map keys are unique). */
static dsv4_status match_index(const dsv4i_checkpoint *c, const index_doc *ix, const char **names) {
  uint8_t *seen = dsv4i_calloc(c->n_entries, 1, "the index match table");
  if (!seen) return DSV4_ERR_OUT_OF_MEMORY;
  dsv4_status st = DSV4_OK;
  const char *key;
  json_t *v;
  json_object_foreach(ix->weight_map, key, v) {
    const char *shard = json_string_value(v);
    const char **hit = bsearch(&shard, names, (size_t)c->n_shards, sizeof *names, cmp_str_ptr);
    const dsv4i_ckpt_entry *e = dsv4i_checkpoint_find(c, key);
    if (!e)
      st = dsv4i_error(DSV4_ERR_INDEX_MISMATCH,
                       "%s: weight_map puts tensor '%s' in %s, which has no such tensor", ix->path,
                       key, shard);
    else if (!hit || e->shard != (int32_t)(hit - names))
      st = dsv4i_error(DSV4_ERR_INDEX_MISMATCH, "%s: weight_map puts tensor '%s' in %s, but it is in %s",
                       ix->path, key, shard, names[e->shard]);
    if (st != DSV4_OK) break;
    seen[e - c->entries] = 1;
  }
  for (size_t i = 0; i < c->n_entries && st == DSV4_OK; i++)
    if (!seen[i])
      st = dsv4i_error(DSV4_ERR_INDEX_MISMATCH, "%s: tensor '%s' of shard %s is not in the weight_map",
                       ix->path, c->entries[i].name, names[c->entries[i].shard]);
  free(seen);
  return st;
}

/* The indexed layout: index -> shards -> entries -> agreement -> total_size. */
static dsv4_status open_indexed(dsv4i_checkpoint *c, const char *index_path) {
  index_doc ix = {.path = index_path};
  const char **names = NULL;
  int32_t n = 0;
  dsv4_status st = load_index(&ix);
  if (st == DSV4_OK) st = collect_shards(&ix, &names, &n);
  if (st == DSV4_OK) st = open_shards(c, &ix, names, n);
  if (st == DSV4_OK) st = build_entries(c);
  if (st == DSV4_OK) st = match_index(c, &ix, names);
  if (st == DSV4_OK && ix.has_total && ix.total_size != c->payload_bytes)
    st = dsv4i_error(DSV4_ERR_INDEX_MISMATCH,
                     "%s: metadata.total_size is %" PRIu64 " but the shards hold %" PRIu64
                     " payload bytes", index_path, ix.total_size, c->payload_bytes);
  free(names);
  json_decref(ix.root);
  return st;
}

dsv4_status dsv4i_index_check_text(const char *name, const char *buf, size_t len) {
  if (!name || (!buf && len)) return dsv4i_error(DSV4_ERR_INVALID_ARG, "index check: NULL");
  index_doc ix = {.path = name};
  const char **names = NULL;
  int32_t n = 0;
  dsv4_status st = parse_index(&ix, buf ? buf : "", len);
  if (st == DSV4_OK) st = collect_shards(&ix, &names, &n);
  free(names);
  json_decref(ix.root);
  return st;
}

/* The single-file layout: one shard, no index to agree with. */
static dsv4_status open_single(dsv4i_checkpoint *c, const char *path) {
  c->shards = dsv4i_calloc(1, sizeof *c->shards, "the shard table");
  if (!c->shards) return DSV4_ERR_OUT_OF_MEMORY;
  c->n_shards = 1;
  dsv4_status st = dsv4i_st_open(path, &c->shards[0]);
  return st == DSV4_OK ? build_entries(c) : st;
}

/* Pick the layout present in c->dir and open it. */
static dsv4_status open_dir(dsv4i_checkpoint *c) {
  struct stat sb;
  if (stat(c->dir, &sb) != 0)
    return dsv4i_error(errno == ENOENT ? DSV4_ERR_NOT_FOUND : DSV4_ERR_IO,
                       "checkpoint directory %s: %s", c->dir, strerror(errno));
  if (!S_ISDIR(sb.st_mode))
    return dsv4i_error(DSV4_ERR_IO, "checkpoint %s: not a directory", c->dir);
  char *index = dsv4i_path_join(c->dir, INDEX_NAME);
  char *single = dsv4i_path_join(c->dir, SINGLE_NAME);
  int has_index = 0, has_single = 0;
  dsv4_status st = (index && single) ? DSV4_OK : DSV4_ERR_OUT_OF_MEMORY;
  if (st == DSV4_OK) st = probe_path(index, &has_index);
  if (st == DSV4_OK && !has_index) st = probe_path(single, &has_single);
  if (st == DSV4_OK) {
    if (has_index)
      st = open_indexed(c, index);
    else if (has_single)
      st = open_single(c, single);
    else
      st = dsv4i_error(DSV4_ERR_NOT_FOUND, "checkpoint %s: neither " INDEX_NAME " nor " SINGLE_NAME,
                       c->dir);
  }
  free(index);
  free(single);
  return st;
}

/* The format does not align tensors (an odd, unpadded header or a 1-byte
 * tensor before a wider one is legal). The backends read weights in place as
 * arrays of their dtype, so a tensor whose start is not a multiple of its
 * element size is copied once into 64-byte aligned memory; the rest stays
 * mapped. */
static dsv4_status realign(dsv4i_checkpoint *c) {
  for (size_t i = 0; i < c->n_entries; i++) {
    dsv4i_ckpt_entry *e = &c->entries[i];
    const size_t a = dsv4i_dtype_size(e->t->dtype);
    if (a <= 1 || e->t->offset % a == 0 || e->t->nbytes == 0) continue;
    if (e->t->nbytes > SIZE_MAX - 64)
      return dsv4i_error(DSV4_ERR_OUT_OF_MEMORY, "tensor '%s': %llu bytes", e->name,
                         (unsigned long long)e->t->nbytes);
    const size_t n = ((size_t)e->t->nbytes + 63) & ~(size_t)63;
    e->copy = DSV4I_FAULT() ? NULL : aligned_alloc(64, n);
    if (!e->copy)
      return dsv4i_error(DSV4_ERR_OUT_OF_MEMORY,
                         "out of memory copying tensor '%s' (%zu bytes, not aligned to its %zu-byte "
                         "element in %s) into aligned memory", e->name, n, a, c->shards[e->shard].path);
    memcpy(e->copy, dsv4i_st_data(&c->shards[e->shard], e->t), (size_t)e->t->nbytes);
    c->n_realigned++;
    c->realigned_bytes += n;
  }
  return DSV4_OK;
}

dsv4_status dsv4i_checkpoint_open(const char *dir, dsv4i_checkpoint *out) {
  if (!out) return dsv4i_error(DSV4_ERR_INVALID_ARG, "dsv4i_checkpoint_open: out is NULL");
  memset(out, 0, sizeof *out);
  if (!dir) return dsv4i_error(DSV4_ERR_INVALID_ARG, "dsv4i_checkpoint_open: dir is NULL");
  dsv4i_checkpoint c = {0};
  c.dir = dsv4i_strdup(dir, "a checkpoint path");
  if (!c.dir) return DSV4_ERR_OUT_OF_MEMORY;
  dsv4_status st = open_dir(&c);
  if (st == DSV4_OK) st = realign(&c);
  if (st != DSV4_OK) {
    dsv4i_checkpoint_close(&c);
    return st;
  }
  *out = c;
  return DSV4_OK;
}

void dsv4i_checkpoint_close(dsv4i_checkpoint *c) {
  if (!c) return;
  for (size_t i = 0; i < c->n_entries; i++) free(c->entries[i].copy);
  for (int32_t i = 0; i < c->n_shards; i++) dsv4i_st_close(&c->shards[i]);
  free(c->shards);
  free(c->entries);
  free(c->dir);
  memset(c, 0, sizeof *c);
}

static int cmp_name_entry(const void *key, const void *elem) {
  return strcmp(key, ((const dsv4i_ckpt_entry *)elem)->name);
}

const dsv4i_ckpt_entry *dsv4i_checkpoint_find(const dsv4i_checkpoint *c, const char *name) {
  if (!c || !name || c->n_entries == 0) return NULL;
  return bsearch(name, c->entries, c->n_entries, sizeof *c->entries, cmp_name_entry);
}
