/* Shard layout, shard files and the index; see gen_shards.h. */
#include "gen_shards.h"

#include <ctype.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "gen_files.h"

/* embed, blocks, DSpark, final norm/head, vision: the order a reader of the
 * model meets them. */
static int group_rank(const char *n) {
  if (strncmp(n, "embed.", 6) == 0) return 0;
  if (strncmp(n, "layers.", 7) == 0) return 1;
  if (strncmp(n, "mtp.", 4) == 0) return 2;
  if (strcmp(n, "norm.weight") == 0 || strncmp(n, "head.", 5) == 0) return 3;
  return 4;
}

/* Length of n without a trailing ".weight" or ".scale"; *kind 0 weight,
 * 1 scale, 2 neither. */
static size_t base_len(const char *n, int *kind) {
  size_t len = strlen(n);
  if (len > 7 && strcmp(n + len - 7, ".weight") == 0) {
    *kind = 0;
    return len - 7;
  }
  if (len > 6 && strcmp(n + len - 6, ".scale") == 0) {
    *kind = 1;
    return len - 6;
  }
  *kind = 2;
  return len;
}

/* strcmp over the first la / lb bytes, runs of digits compared as numbers. */
static int natural_cmp(const char *a, size_t la, const char *b, size_t lb) {
  size_t i = 0, j = 0;
  while (i < la && j < lb) {
    if (isdigit((unsigned char)a[i]) && isdigit((unsigned char)b[j])) {
      unsigned long long x = 0, y = 0;
      while (i < la && isdigit((unsigned char)a[i])) x = x * 10 + (unsigned)(a[i++] - '0');
      while (j < lb && isdigit((unsigned char)b[j])) y = y * 10 + (unsigned)(b[j++] - '0');
      if (x != y) return x < y ? -1 : 1;
      continue;
    }
    if (a[i] != b[j]) return (unsigned char)a[i] < (unsigned char)b[j] ? -1 : 1;
    i++;
    j++;
  }
  return (i < la) - (j < lb);
}

static int model_order(const void *pa, const void *pb) {
  const dsv4i_tensor_spec *a = *(const dsv4i_tensor_spec *const *)pa;
  const dsv4i_tensor_spec *b = *(const dsv4i_tensor_spec *const *)pb;
  int ra = group_rank(a->name), rb = group_rank(b->name);
  if (ra != rb) return ra < rb ? -1 : 1;
  int ka, kb;
  size_t la = base_len(a->name, &ka), lb = base_len(b->name, &kb);
  int c = natural_cmp(a->name, la, b->name, lb);
  if (c) return c;
  return ka < kb ? -1 : (ka > kb);
}

typedef struct shard {
  const dsv4i_tensor_spec **t;
  size_t n;
  uint64_t bytes;
  char file[64];
} shard;

/* One shard file: declare, header, payloads in order. */
static dsv4_status write_shard(const shard *sh, gen_weights *g, const char *dir) {
  char *path = dsv4i_path_join(dir, sh->file);
  if (!path) return DSV4_ERR_OUT_OF_MEMORY;
  dsv4i_st_writer *w = NULL;
  dsv4_status s = dsv4i_st_writer_create(path, &w);
  free(path);
  if (s) return s;
  s = dsv4i_st_writer_set_metadata(w, "format", "pt");
  for (size_t i = 0; s == DSV4_OK && i < sh->n; i++)
    s = dsv4i_st_writer_declare(w, sh->t[i]->name, sh->t[i]->dtype, sh->t[i]->ndim,
                                sh->t[i]->shape);
  if (!s) s = dsv4i_st_writer_begin_data(w);
  for (size_t i = 0; s == DSV4_OK && i < sh->n; i++) s = gen_weights_write(g, sh->t[i], w);
  if (s) {
    dsv4i_st_writer_abort(w);
    dsv4i_error_prefix("%s", sh->file);
    return s;
  }
  return dsv4i_st_writer_finish(w);
}

static dsv4_status write_index(const dsv4i_contract *ct, const shard *sh, int32_t n_sh,
                               const char *dir) {
  json_t *root = json_object(), *meta = json_object(), *map = json_object();
  json_object_set_new(meta, "total_size", json_integer((json_int_t)ct->payload_bytes));
  json_object_set_new(root, "metadata", meta);
  for (int32_t k = 0; k < n_sh; k++)
    for (size_t i = 0; i < sh[k].n; i++)
      json_object_set_new(map, sh[k].t[i]->name, json_string(sh[k].file));
  json_object_set_new(root, "weight_map", map);
  char *text = json_dumps(root, JSON_INDENT(2) | JSON_SORT_KEYS);
  json_decref(root);
  if (!text) return dsv4i_error(DSV4_ERR_OUT_OF_MEMORY, "index: out of memory");
  size_t len = strlen(text);
  text[len] = '\n'; /* json_dumps leaves room for the NUL we replace */
  dsv4_status s = gen_write_file(dir, "model.safetensors.index.json", text, len + 1);
  free(text);
  return s;
}

/* Model-order tensors into at most n_main shards of about equal bytes (a
 * .scale stays with its weight), Engram tables one per shard after them. */
static dsv4_status plan_shards(const dsv4i_contract *ct, int32_t n_main, shard **out,
                               int32_t *n_out, const dsv4i_tensor_spec ***order_out) {
  const dsv4i_tensor_spec **order = dsv4i_malloc(ct->n * sizeof *order, "shard order");
  shard *sh = dsv4i_calloc((size_t)n_main + DSV4I_MAX_ENGRAM, sizeof *sh, "shards");
  if (!order || !sh) {
    free(order);
    free(sh);
    return DSV4_ERR_OUT_OF_MEMORY;
  }
  size_t n_ord = 0, n_eng = 0;
  uint64_t main_bytes = 0;
  for (size_t i = 0; i < ct->n; i++)
    if (ct->specs[i].component != DSV4_COMP_ENGRAM_TABLES) {
      order[n_ord++] = &ct->specs[i];
      main_bytes += ct->specs[i].nbytes;
    }
  for (size_t i = 0; i < ct->n; i++)
    if (ct->specs[i].component == DSV4_COMP_ENGRAM_TABLES) order[n_ord + n_eng++] = &ct->specs[i];
  qsort(order, n_ord, sizeof *order, model_order);
  qsort(order + n_ord, n_eng, sizeof *order, model_order);

  int32_t n_sh = 0, cur = -1;
  uint64_t cum = 0;
  for (size_t i = 0; i < n_ord; i++) {
    int kind;
    base_len(order[i]->name, &kind);
    /* the shard holding the middle byte of this tensor */
    int32_t k = main_bytes ? (int32_t)(((long double)cum + order[i]->nbytes / 2.0L) * n_main /
                                       (long double)main_bytes)
                           : 0;
    if (k >= n_main) k = n_main - 1;
    if (cur < 0 || (k > cur && kind != 1)) { /* a scale never starts a shard */
      cur = k;
      sh[n_sh].t = order + i;
      n_sh++;
    }
    sh[n_sh - 1].n++;
    sh[n_sh - 1].bytes += order[i]->nbytes;
    cum += order[i]->nbytes;
  }
  for (size_t i = 0; i < n_eng; i++) {
    int kind;
    base_len(order[n_ord + i]->name, &kind);
    if (kind != 1 || n_sh == 0 || sh[n_sh - 1].t < order + n_ord) {
      sh[n_sh].t = order + n_ord + i;
      n_sh++;
    }
    sh[n_sh - 1].n++;
    sh[n_sh - 1].bytes += order[n_ord + i]->nbytes;
  }
  for (int32_t k = 0; k < n_sh; k++)
    snprintf(sh[k].file, sizeof sh[k].file, "model-%05d-of-%05d.safetensors", (int)k + 1,
             (int)n_sh);
  *out = sh;
  *n_out = n_sh;
  *order_out = order;
  return DSV4_OK;
}

dsv4_status gen_shards_write(const dsv4i_contract *ct, gen_weights *g, const char *dir,
                             int32_t n_main, gen_progress_fn progress, void *user,
                             int32_t *n_shards_out) {
  shard *sh = NULL;
  const dsv4i_tensor_spec **order = NULL;
  int32_t n_sh = 0;
  *n_shards_out = 0;
  if (n_main < 1) n_main = 1;
  dsv4_status s = plan_shards(ct, n_main, &sh, &n_sh, &order);
  for (int32_t k = 0; s == DSV4_OK && k < n_sh; k++) {
    s = write_shard(&sh[k], g, dir);
    if (!s && progress) progress(sh[k].file, k, n_sh, sh[k].bytes, user);
  }
  if (!s) s = write_index(ct, sh, n_sh, dir);
  if (!s) *n_shards_out = n_sh;
  free(sh);
  free(order);
  return s;
}
