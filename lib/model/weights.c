/*
 * The weight table (weights.h): contract names parsed into (role, layer,
 * expert) once, when a model opens. The only tensor-name parser besides the
 * contract builder that writes them.
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "io/safetensors.h"
#include "model/config.h"
#include "model/weights.h"

typedef struct role_def {
  const char *key;
  char scope;
  const char *suffix;
  int32_t split;
} role_def;

static const role_def roles[] = {
#define DSV4I_WROLE_DEF(r, sc, suf, sp) {#r, #sc[0], suf, DSV4I_SPLIT_##sp},
  DSV4I_WEIGHT_ROLES(DSV4I_WROLE_DEF)
#undef DSV4I_WROLE_DEF
};

const char *dsv4i_weight_role_name(int32_t role) {
  if (role == DSV4I_W_VISION) return "vision";
  return role >= 0 && role < (int32_t)DSV4I_ARRAY_LEN(roles) ? roles[role].suffix : "?";
}

const char *dsv4i_weight_role_key(int32_t role) {
  if (role == DSV4I_W_VISION) return "VISION";
  return role >= 0 && role < (int32_t)DSV4I_ARRAY_LEN(roles) ? roles[role].key : NULL;
}

const char *dsv4i_weight_dtype_name(int32_t dtype) { return dsv4i_dtype_name(dtype); }

const char *dsv4i_weight_name(const dsv4i_weight *w) { return w && w->spec ? w->spec->name : "?"; }

static int starts(const char *s, const char *p) { return strncmp(s, p, strlen(p)) == 0; }

/* "<digits>." at s: the number and the text after the dot; -1 if none */
static int64_t index_at(const char *s, const char **rest) {
  if (*s < '0' || *s > '9') return -1;
  char *end;
  const long long v = strtoll(s, &end, 10);
  if (*end != '.' || v < 0 || v > INT32_MAX) return -1;
  *rest = end + 1;
  return v;
}

/* Role, layer and expert of a weight name (not a ".scale"); 0 on success. */
static int parse(const dsv4i_config *c, const char *name, int32_t *role, int32_t *layer,
                 int32_t *expert) {
  const char *rest = name;
  char scope = 'G';
  *layer = -1;
  *expert = -1;
  if (starts(name, "layers.") || starts(name, "mtp.")) {
    const int mtp = name[0] == 'm';
    const int64_t l = index_at(name + (mtp ? 4 : 7), &rest);
    if (l < 0 || l >= (mtp ? c->n_mtp_layers : c->n_layers)) return -1;
    *layer = (int32_t)(mtp ? c->n_layers + l : l);
    scope = 'B';
    if (starts(rest, "ffn.experts.")) {
      const int64_t e = index_at(rest + 12, &rest);
      if (e < 0) return -1;
      *expert = (int32_t)e;
      scope = 'E';
    }
  }
  for (int32_t r = 0; r < (int32_t)DSV4I_ARRAY_LEN(roles); r++)
    if (roles[r].scope == scope && strcmp(roles[r].suffix, rest) == 0) {
      *role = r;
      return 0;
    }
  if (scope == 'G') { /* vision.*, aligner.*, image_* */
    *role = DSV4I_W_VISION;
    return 0;
  }
  return -1;
}

static int32_t placement(const dsv4i_config *c, int32_t role, int32_t layer) {
  if (role == DSV4I_W_EMBED) return DSV4I_PLACE_INPUT;
  if (role == DSV4I_W_HEAD || role == DSV4I_W_NORM) return DSV4I_PLACE_OUTPUT;
  if (role == DSV4I_W_VISION) return DSV4I_PLACE_VISION;
  return layer >= c->n_layers ? DSV4I_PLACE_DSPARK : DSV4I_PLACE_LAYER;
}

static int by_key(const void *a, const void *b) {
  const dsv4i_weight *x = a, *y = b;
  if (x->role != y->role) return x->role < y->role ? -1 : 1;
  if (x->layer != y->layer) return x->layer < y->layer ? -1 : 1;
  return x->expert < y->expert ? -1 : x->expert > y->expert;
}

static const char *scale_suffix = ".scale";

static int is_scale(const char *name) {
  const size_t n = strlen(name), k = strlen(scale_suffix);
  return n > k && strcmp(name + n - k, scale_suffix) == 0;
}

dsv4_status dsv4i_weights_build(const dsv4i_config *c, const dsv4i_contract *con,
                                dsv4i_weights *out) {
  memset(out, 0, sizeof *out);
  out->w = dsv4i_calloc(con->n ? con->n : 1, sizeof *out->w, "the weight table");
  if (!out->w) return DSV4_ERR_OUT_OF_MEMORY;
  int32_t n_vision = 0;
  for (size_t i = 0; i < con->n; i++) {
    const dsv4i_tensor_spec *t = &con->specs[i];
    if (is_scale(t->name)) continue;
    dsv4i_weight *w = &out->w[out->n];
    if (parse(c, t->name, &w->role, &w->layer, &w->expert)) {
      dsv4i_weights_free(out);
      return dsv4i_error(DSV4_ERR_INTERNAL, "weight table: no role for tensor %s", t->name);
    }
    if (w->role == DSV4I_W_VISION) w->expert = n_vision++;
    w->split = w->role == DSV4I_W_VISION ? DSV4I_SPLIT_NONE : roles[w->role].split;
    w->placement = placement(c, w->role, w->layer);
    w->component = t->component;
    w->dtype = t->dtype;
    w->ndim = t->ndim;
    w->shape[0] = t->shape[0];
    w->shape[1] = t->ndim > 1 ? t->shape[1] : 0;
    w->nbytes = t->nbytes;
    w->spec = t;
    w->spec_index = i;
    w->scale_index = SIZE_MAX;
    /* "<stem>.weight" + "<stem>.scale" */
    const size_t len = strlen(t->name), wl = strlen(".weight");
    if (len > wl && strcmp(t->name + len - wl, ".weight") == 0 && len - wl + 7 < DSV4I_NAME_MAX) {
      char sn[DSV4I_NAME_MAX];
      memcpy(sn, t->name, len - wl);
      strcpy(sn + len - wl, scale_suffix);
      const dsv4i_tensor_spec *s = dsv4i_contract_find(con, sn);
      if (s) {
        w->scale_spec = s;
        w->scale_index = (size_t)(s - con->specs);
        w->scale_dtype = s->dtype;
        w->scale_shape[0] = s->shape[0];
        w->scale_shape[1] = s->ndim > 1 ? s->shape[1] : 0;
        w->scale_nbytes = s->nbytes;
      }
    }
    out->n++;
  }
  /* every scale belongs to exactly one weight */
  size_t n_scales = 0, n_bound = 0;
  for (size_t i = 0; i < con->n; i++) n_scales += is_scale(con->specs[i].name) != 0;
  for (size_t i = 0; i < out->n; i++) n_bound += out->w[i].scale_spec != NULL;
  if (n_scales != n_bound) {
    dsv4i_weights_free(out);
    return dsv4i_error(DSV4_ERR_INTERNAL, "weight table: %zu scale tensors, %zu bound to a weight",
                       n_scales, n_bound);
  }
  qsort(out->w, out->n, sizeof *out->w, by_key);
  /* tensor -> entry (the public tensor table reports each tensor's key) */
  out->by_spec = dsv4i_malloc((con->n ? con->n : 1) * sizeof *out->by_spec, "the weight index");
  if (!out->by_spec) {
    dsv4i_weights_free(out);
    return DSV4_ERR_OUT_OF_MEMORY;
  }
  out->n_specs = con->n;
  for (size_t e = 0; e < out->n; e++) {
    out->by_spec[out->w[e].spec_index] = 2 * e;
    if (out->w[e].scale_spec) out->by_spec[out->w[e].scale_index] = 2 * e + 1;
  }
  return DSV4_OK;
}

void dsv4i_weights_free(dsv4i_weights *t) {
  if (!t) return;
  free(t->w);
  free(t->by_spec);
  t->w = NULL;
  t->by_spec = NULL;
  t->n = t->n_specs = 0;
}

const dsv4i_weight *dsv4i_weights_of_tensor(const dsv4i_weights *t, size_t i, int *is_scale) {
  if (!t || !t->by_spec || i >= t->n_specs) return NULL;
  *is_scale = (int)(t->by_spec[i] & 1);
  return &t->w[t->by_spec[i] / 2];
}

const dsv4i_weight *dsv4i_weights_find(const dsv4i_weights *t, int32_t role, int32_t layer,
                                       int32_t expert) {
  if (!t || !t->w) return NULL;
  dsv4i_weight key;
  key.role = role;
  key.layer = layer;
  key.expert = expert;
  return bsearch(&key, t->w, t->n, sizeof *t->w, by_key);
}

dsv4_status dsv4i_weights_get(const dsv4i_weights *t, int32_t role, int32_t layer, int32_t expert,
                              int32_t dtype, int64_t n_elems, const dsv4i_weight **out) {
  *out = NULL;
  const dsv4i_weight *w = dsv4i_weights_find(t, role, layer, expert);
  if (!w || !w->data)
    return dsv4i_error(DSV4_ERR_NOT_FOUND, "weight %s (layer %d, expert %d)%s: %s",
                       w ? dsv4i_weight_name(w) : dsv4i_weight_role_name(role), (int)layer,
                       (int)expert, "", w ? "not mapped (config-only model)" : "not in the model");
  const int64_t cnt = w->shape[0] * (w->ndim > 1 ? w->shape[1] : 1);
  if ((dtype >= 0 && w->dtype != dtype) || (n_elems >= 0 && cnt != n_elems))
    return dsv4i_error(DSV4_ERR_WEIGHTS,
                       "weight %s has dtype %s and %lld elements; expected dtype %s and %lld",
                       dsv4i_weight_name(w), dsv4i_dtype_name(w->dtype), (long long)cnt,
                       dtype >= 0 ? dsv4i_dtype_name(dtype) : "any", (long long)n_elems);
  *out = w;
  return DSV4_OK;
}

/* bytes of one share of n units of a tensor of `bytes` split over tp ranks (remainder
 * units to the lowest ranks, as the planner's rule) */
static int64_t share_of(uint64_t bytes, int64_t units, int32_t tp, int32_t r) {
  if (units <= 0 || tp <= 1) return (int64_t)bytes;
  const int64_t n = units / tp + (r < units % tp ? 1 : 0);
  return (int64_t)(bytes / (uint64_t)units) * n;
}

int64_t dsv4i_weights_part_bytes(const dsv4i_weights *t, const dsv4i_config *cfg,
                                 const dsv4i_model_part *part, int with_dspark) {
  int32_t first = 0, last = cfg->n_layers, tp = 1, r = 0;
  if (part && part->last_layer > 0) first = part->first_layer, last = part->last_layer;
  if (part && part->tp_size > 1) tp = part->tp_size, r = part->tp_rank;
  const int is_first = first == 0, is_last = last >= cfg->n_layers;
  int64_t sum = 0;
  for (size_t i = 0; i < t->n; i++) {
    const dsv4i_weight *w = &t->w[i];
    int held = 0, split = 0;
    switch (w->placement) {
    case DSV4I_PLACE_INPUT: held = is_first || (is_last && with_dspark); break;
    case DSV4I_PLACE_LAYER:
      held = w->layer >= first && w->layer < last;
      split = w->split == DSV4I_SPLIT_ROWS || w->split == DSV4I_SPLIT_COLS;
      break;
    case DSV4I_PLACE_DSPARK: held = is_last && with_dspark; break;
    case DSV4I_PLACE_OUTPUT: held = is_last; break;
    default: held = 0; /* the vision tower: not loaded */
    }
    if (!held) continue;
    if (!split) {
      sum += (int64_t)(w->nbytes + w->scale_nbytes);
      continue;
    }
    const int d = w->split == DSV4I_SPLIT_COLS ? 1 : 0;
    sum += share_of(w->nbytes, w->shape[d], tp, r);
    if (w->scale_nbytes) sum += share_of(w->scale_nbytes, w->scale_shape[d], tp, r);
  }
  return sum;
}
