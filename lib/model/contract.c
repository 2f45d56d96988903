/*
 * Tensor contract (spec §4.2): the exact tensor set a config requires, with
 * storage dtype, shape, byte-accounting component and byte size; and the
 * check of a checkpoint against it (contract_check.c).
 */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "io/safetensors.h"
#include "model/config.h"

typedef struct builder {
  dsv4i_tensor_spec *v;
  size_t n, cap;
  dsv4_status st;
} builder;

/* Append pre+name with a 1-D (d1 < 0) or 2-D shape. Errors stick in b->st. */
static void add(builder *b, const char *pre, const char *name, int32_t dtype, int64_t d0, int64_t d1) {
  if (b->st) return;
  if (b->n == b->cap) {
    size_t cap = b->cap ? b->cap * 2 : 1024;
    dsv4i_tensor_spec *nv = dsv4i_realloc(b->v, cap * sizeof *nv, "the tensor contract");
    if (!nv) {
      b->st = DSV4_ERR_OUT_OF_MEMORY;
      return;
    }
    b->v = nv;
    b->cap = cap;
  }
  dsv4i_tensor_spec *t = &b->v[b->n];
  memset(t, 0, sizeof *t);
  int len = snprintf(t->name, sizeof t->name, "%s%s", pre, name);
  if (len < 0 || (size_t)len >= sizeof t->name) {
    b->st = dsv4i_error(DSV4_ERR_INTERNAL, "tensor name %s%s is longer than %d bytes", pre, name,
                        DSV4I_NAME_MAX - 1);
    return;
  }
  t->dtype = dtype;
  t->ndim = d1 < 0 ? 1 : 2;
  t->shape[0] = d0;
  t->shape[1] = d1 < 0 ? 0 : d1;
  t->component = dsv4i_component_of(t->name);
  uint64_t elems;
  if (d0 < 0 || d1 < -1 || !dsv4i_mul_overflow_u64((uint64_t)d0, (uint64_t)(d1 < 0 ? 1 : d1), &elems) ||
      !dsv4i_mul_overflow_u64(elems, dsv4i_dtype_size(dtype), &t->nbytes)) {
    b->st = dsv4i_error(DSV4_ERR_CONFIG_VALUE, "tensor %s would be larger than 2^64 bytes", t->name);
    return;
  }
  b->n++;
}

#define DSV4I_STR2(x) #x
#define DSV4I_STR(x) DSV4I_STR2(x)

static int64_t ceil32(int64_t x) { return (x + 31) / 32; }

/* Dense fp8: weight E4M3 [o, i] + scale UE8M0 [ceil(o/32), ceil(i/32)]. */
static void fp8(builder *b, const char *pre, const char *name, int64_t o, int64_t i) {
  char n[DSV4I_NAME_MAX];
  snprintf(n, sizeof n, "%s.weight", name);
  add(b, pre, n, DSV4_DTYPE_F8_E4M3, o, i);
  snprintf(n, sizeof n, "%s.scale", name);
  add(b, pre, n, DSV4_DTYPE_F8_E8M0, ceil32(o), ceil32(i));
}

/* Routed expert MXFP4: weight I8 [o, i/2] (two e2m1 codes) + scale UE8M0 [o, i/32]. */
static void fp4(builder *b, const char *pre, const char *name, int64_t o, int64_t i) {
  char n[DSV4I_NAME_MAX];
  snprintf(n, sizeof n, "%s.weight", name);
  add(b, pre, n, DSV4_DTYPE_I8, o, i / 2);
  snprintf(n, sizeof n, "%s.scale", name);
  add(b, pre, n, DSV4_DTYPE_F8_E8M0, o, i / 32);
}

static void add_global(builder *b, const dsv4i_config *c) {
  add(b, "", "embed.weight", DSV4_DTYPE_BF16, c->vocab_size, c->dim);
  add(b, "", "head.weight", DSV4_DTYPE_BF16, c->vocab_size, c->dim);
  add(b, "", "norm.weight", DSV4_DTYPE_BF16, c->dim, -1);
  if (!c->has_vision) return;
  int64_t vd = c->vision_dim, ds = c->vision_downsample, ps = c->vision_patch_size;
  add(b, "", "image_start", DSV4_DTYPE_BF16, c->dim, -1);
  add(b, "", "image_end", DSV4_DTYPE_BF16, c->dim, -1);
  add(b, "", "image_newline", DSV4_DTYPE_BF16, c->dim, -1);
  add(b, "", "aligner.w1.weight", DSV4_DTYPE_BF16, c->dim, vd * ds * ds);
  add(b, "", "aligner.w1.bias", DSV4_DTYPE_BF16, c->dim, -1);
  add(b, "", "aligner.w2.weight", DSV4_DTYPE_BF16, c->dim, c->dim);
  add(b, "", "aligner.w2.bias", DSV4_DTYPE_BF16, c->dim, -1);
  add(b, "", "vision.patch_embed.proj.weight", DSV4_DTYPE_BF16, vd, 3 * ps * ps);
  add(b, "", "vision.patch_embed.proj.bias", DSV4_DTYPE_BF16, vd, -1);
  add(b, "", "vision.norm.weight", DSV4_DTYPE_BF16, vd, -1);
  for (int32_t k = 0; k < c->vision_n_layers; k++) {
    char pre[64];
    snprintf(pre, sizeof pre, "vision.blocks.%d.", (int)k);
    add(b, pre, "attn.wqkv.weight", DSV4_DTYPE_BF16, 3 * vd, vd);
    add(b, pre, "attn.wqkv.bias", DSV4_DTYPE_BF16, 3 * vd, -1);
    add(b, pre, "attn.wo.weight", DSV4_DTYPE_BF16, vd, vd);
    add(b, pre, "attn.wo.bias", DSV4_DTYPE_BF16, vd, -1);
    add(b, pre, "mlp.w1.weight", DSV4_DTYPE_BF16, 2 * (int64_t)c->vision_inter_dim, vd); /* gate | up */
    add(b, pre, "mlp.w2.weight", DSV4_DTYPE_BF16, vd, c->vision_inter_dim);
    add(b, pre, "norm1.weight", DSV4_DTYPE_BF16, vd, -1);
    add(b, pre, "norm2.weight", DSV4_DTYPE_BF16, vd, -1);
  }
}

/* Tensors of every block layers.L / mtp.S: attention, norms, MoE, hc. */
static void add_block(builder *b, const dsv4i_config *c, const char *pre, int32_t n_experts) {
  int64_t D = c->dim, qr = c->q_lora_rank, hd = c->head_dim, H = c->n_heads;
  int64_t G = c->o_groups, orank = c->o_lora_rank, I = c->moe_inter_dim, hc = c->hc_mult;
  add(b, pre, "attn.attn_sink", DSV4_DTYPE_F32, H, -1);
  add(b, pre, "attn.q_norm.weight", DSV4_DTYPE_BF16, qr, -1);
  add(b, pre, "attn.kv_norm.weight", DSV4_DTYPE_BF16, hd, -1);
  fp8(b, pre, "attn.wq_a", qr, D);
  fp8(b, pre, "attn.wq_b", H * hd, qr);
  fp8(b, pre, "attn.wkv", hd, D);
  fp8(b, pre, "attn.wo_a", G * orank, H * hd / G);
  fp8(b, pre, "attn.wo_b", D, G * orank);
  add(b, pre, "attn_norm.weight", DSV4_DTYPE_BF16, D, -1);
  add(b, pre, "ffn_norm.weight", DSV4_DTYPE_BF16, D, -1);
  add(b, pre, "ffn.gate.weight", DSV4_DTYPE_BF16, n_experts, D);
  add(b, pre, "ffn.gate.bias", DSV4_DTYPE_F32, n_experts, -1);
  add(b, pre, "ffn.gate.bias_vl", DSV4_DTYPE_F32, n_experts, -1);
  for (int32_t m = 0; m < n_experts && !b->st; m++) {
    char n[48];
    snprintf(n, sizeof n, "ffn.experts.%d.w1", (int)m);
    fp4(b, pre, n, I, D);
    snprintf(n, sizeof n, "ffn.experts.%d.w2", (int)m);
    fp4(b, pre, n, D, I);
    snprintf(n, sizeof n, "ffn.experts.%d.w3", (int)m);
    fp4(b, pre, n, I, D);
  }
  fp8(b, pre, "ffn.shared_experts.w1", I, D);
  fp8(b, pre, "ffn.shared_experts.w2", D, I);
  fp8(b, pre, "ffn.shared_experts.w3", I, D);
  int64_t mix = (2 + hc) * hc; /* pre, post, hc x hc combination */
  add(b, pre, "hc_attn_fn", DSV4_DTYPE_F32, mix, hc * D);
  add(b, pre, "hc_attn_base", DSV4_DTYPE_F32, mix, -1);
  add(b, pre, "hc_attn_scale", DSV4_DTYPE_F32, 3, -1);
  add(b, pre, "hc_ffn_fn", DSV4_DTYPE_F32, mix, hc * D);
  add(b, pre, "hc_ffn_base", DSV4_DTYPE_F32, mix, -1);
  add(b, pre, "hc_ffn_scale", DSV4_DTYPE_F32, 3, -1);
}

/* Role-dependent tensors of backbone layer l. */
static void add_roles(builder *b, const dsv4i_config *c, const char *pre, int32_t l) {
  const dsv4i_layer_role *r = &c->layers[l];
  int64_t D = c->dim, hd = c->head_dim, ihd = c->index_head_dim, hc = c->hc_mult;
  if (r->roles & DSV4_ROLE_KV_SOURCE) {
    add(b, pre, "attn.compressor.wkv.weight", DSV4_DTYPE_BF16, hd, D);
    if (r->compress_ratio > 1) add(b, pre, "attn.compressor.wgate.weight", DSV4_DTYPE_BF16, hd, D);
    add(b, pre, "attn.compressor.norm.weight", DSV4_DTYPE_BF16, hd, -1);
    add(b, pre, "attn.indexer.wk.weight", DSV4_DTYPE_BF16, ihd, hd);
    add(b, pre, "attn.indexer.k_norm.weight", DSV4_DTYPE_BF16, ihd, -1);
  }
  if (r->roles & DSV4_ROLE_INDEX_SOURCE) {
    fp8(b, pre, "attn.indexer.wq_b", (int64_t)c->index_n_heads * ihd, c->q_lora_rank);
    add(b, pre, "attn.indexer.weights_proj.weight", DSV4_DTYPE_BF16, c->index_n_heads, D);
  }
  if (r->engram_slot >= 0) {
    int64_t rows = c->engram_num_embeddings[r->engram_slot], ehd = c->engram_head_dim;
    int64_t in = (int64_t)(c->engram_max_ngram - 1) * c->engram_n_heads * ehd;
    add(b, pre, "engram.embed.weight", DSV4_DTYPE_F8_E4M3, rows, ehd);
    add(b, pre, "engram.embed.scale", DSV4_DTYPE_F8_E8M0, rows, ehd / 32);
    add(b, pre, "engram.q_weight", DSV4_DTYPE_BF16, hc, D);
    add(b, pre, "engram.k_weight", DSV4_DTYPE_BF16, hc, D);
    fp8(b, pre, "engram.wkv", (hc + 1) * D, in); /* hc keys + one shared value */
  }
}

static void add_dspark(builder *b, const dsv4i_config *c) {
  if (c->n_mtp_layers == 0) return;
  char pre[32];
  int64_t D = c->dim, mr = c->dspark_markov_rank;
  fp8(b, "mtp.0.", "main_proj", D, (int64_t)c->n_dspark_targets * D);
  add(b, "mtp.0.", "main_norm.weight", DSV4_DTYPE_BF16, D, -1);
  snprintf(pre, sizeof pre, "mtp.%d.", (int)(c->n_mtp_layers - 1));
  add(b, pre, "norm.weight", DSV4_DTYPE_BF16, D, -1);
  add(b, pre, "markov_head.embed.weight", DSV4_DTYPE_BF16, c->vocab_size, mr);
  add(b, pre, "markov_head.head.weight", DSV4_DTYPE_BF16, c->vocab_size, mr);
  add(b, pre, "confidence_head.proj.weight", DSV4_DTYPE_BF16, 1, D + mr);
}

static int by_name(const void *a, const void *b) {
  return strcmp(((const dsv4i_tensor_spec *)a)->name, ((const dsv4i_tensor_spec *)b)->name);
}

dsv4_status dsv4i_contract_build(const dsv4i_config *cfg, dsv4i_contract *out) {
  builder b = {0};
  memset(out, 0, sizeof *out);
  add_global(&b, cfg);
  for (int32_t l = 0; l < cfg->n_layers && !b.st; l++) {
    char pre[32];
    snprintf(pre, sizeof pre, "layers.%d.", (int)l);
    add_block(&b, cfg, pre, cfg->n_routed_experts);
    add_roles(&b, cfg, pre, l);
  }
  for (int32_t s = 0; s < cfg->n_mtp_layers && !b.st; s++) {
    char pre[32];
    snprintf(pre, sizeof pre, "mtp.%d.", (int)s);
    add_block(&b, cfg, pre, cfg->dspark_n_routed_experts);
  }
  add_dspark(&b, cfg);
  if (b.st) {
    free(b.v);
    return b.st;
  }
  qsort(b.v, b.n, sizeof *b.v, by_name);
  uint64_t total = 0;
  for (size_t i = 0; i < b.n; i++) {
    if (i > 0 && strcmp(b.v[i - 1].name, b.v[i].name) == 0) {
      dsv4_status s = dsv4i_error(DSV4_ERR_INTERNAL, "tensor contract names %s twice", b.v[i].name);
      free(b.v);
      return s;
    }
    if (total + b.v[i].nbytes < total) {
      free(b.v);
      return dsv4i_error(DSV4_ERR_CONFIG_VALUE, "the config's tensors would pass 2^64 bytes");
    }
    total += b.v[i].nbytes;
  }
  out->specs = b.v;
  out->n = b.n;
  out->payload_bytes = total;
  return DSV4_OK;
}

void dsv4i_contract_free(dsv4i_contract *c) {
  if (!c) return;
  free(c->specs);
  memset(c, 0, sizeof *c);
}

const dsv4i_tensor_spec *dsv4i_contract_find(const dsv4i_contract *c, const char *name) {
  size_t lo = 0, hi = c->n;
  while (lo < hi) {
    size_t mid = lo + (hi - lo) / 2;
    int cmp = strcmp(c->specs[mid].name, name);
    if (cmp == 0) return &c->specs[mid];
    if (cmp < 0) lo = mid + 1;
    else hi = mid;
  }
  return NULL;
}

static int starts(const char *s, const char *prefix) { return strncmp(s, prefix, strlen(prefix)) == 0; }

int32_t dsv4i_component_of(const char *name) {
  if (starts(name, "mtp.")) return DSV4_COMP_DSPARK;
  if (starts(name, "vision.") || starts(name, "aligner.") || starts(name, "image_"))
    return DSV4_COMP_VISION;
  if (starts(name, "embed.") || starts(name, "head.") || starts(name, "norm."))
    return DSV4_COMP_EMBED_HEAD;
  if (!starts(name, "layers.")) return DSV4_COMP_OTHER;
  const char *p = name + strlen("layers.");
  while (*p >= '0' && *p <= '9') p++;
  if (*p != '.') return DSV4_COMP_OTHER;
  p++;
  if (starts(p, "attn.")) return DSV4_COMP_ATTENTION;
  if (starts(p, "ffn.experts.")) return DSV4_COMP_ROUTED_EXPERTS;
  if (starts(p, "ffn.shared_experts.")) return DSV4_COMP_SHARED_EXPERTS;
  if (starts(p, "engram.embed.")) return DSV4_COMP_ENGRAM_TABLES;
  if (starts(p, "engram.")) return DSV4_COMP_ENGRAM_PROJ;
  return DSV4_COMP_OTHER;
}

const char *dsv4i_component_name(int32_t component) {
  static const char *names[] = {"routed_experts", "shared_experts", "attention", "engram_tables",
                                "engram_proj", "dspark", "vision", "embed_head", "other"};
  if (component < 0 || component >= (int32_t)DSV4I_ARRAY_LEN(names)) return "?";
  return names[component];
}

/* ---- checkpoint vs contract -------------------------------------------- */

typedef struct diff_list {
  dsv4i_str text;
  size_t count;
} diff_list;

static void shape_str(char *buf, size_t cap, int32_t ndim, const int64_t *shape) {
  size_t at = 0;
  at += (size_t)snprintf(buf + at, cap - at, "[");
  for (int32_t d = 0; d < ndim && at < cap; d++)
    at += (size_t)snprintf(buf + at, cap - at, "%s%lld", d ? ", " : "", (long long)shape[d]);
  if (at < cap) snprintf(buf + at, cap - at, "]");
}

static void note(diff_list *l, const char *fmt, ...) DSV4I_PRINTF(2, 3);
static void note(diff_list *l, const char *fmt, ...) {
  if (l->count++ >= DSV4I_CHECK_LIST) return;
  va_list ap;
  va_start(ap, fmt);
  dsv4i_str_appendf(&l->text, "\n  ");
  dsv4i_str_vappendf(&l->text, fmt, ap);
  va_end(ap);
}

static void compare(const dsv4i_tensor_spec *want, const dsv4i_st_tensor *got, diff_list *dtype,
                    diff_list *shape) {
  char a[96], b[96];
  if (want->dtype != got->dtype)
    note(dtype, "%s: %s, expected %s", want->name, dsv4i_dtype_name(got->dtype),
         dsv4i_dtype_name(want->dtype));
  int same = want->ndim == got->ndim;
  for (int32_t d = 0; same && d < want->ndim; d++) same = want->shape[d] == got->shape[d];
  if (!same) {
    shape_str(a, sizeof a, got->ndim, got->shape);
    shape_str(b, sizeof b, want->ndim, want->shape);
    note(shape, "%s: %s, expected %s", want->name, a, b);
  }
}

static void emit(dsv4i_str *m, const char *kind, const diff_list *l) {
  if (!l->count) return;
  dsv4i_str_appendf(m, "\n%s (%zu)%s:%s", kind, l->count,
                    l->count > DSV4I_CHECK_LIST ? ", first " DSV4I_STR(DSV4I_CHECK_LIST) : "",
                    dsv4i_str_cstr(&l->text));
}

dsv4_status dsv4i_contract_check(const dsv4i_contract *c, const struct dsv4i_checkpoint *ck,
                                 const char *what) {
  diff_list miss = {0}, extra = {0}, dtype = {0}, shape = {0};
  size_t i = 0, j = 0;
  char sh[96];
  while (i < c->n || j < ck->n_entries) {
    int cmp = i == c->n ? 1 : j == ck->n_entries ? -1 : strcmp(c->specs[i].name, ck->entries[j].name);
    if (cmp < 0) {
      const dsv4i_tensor_spec *w = &c->specs[i++];
      shape_str(sh, sizeof sh, w->ndim, w->shape);
      note(&miss, "%s (%s %s)", w->name, dsv4i_dtype_name(w->dtype), sh);
    } else if (cmp > 0) {
      const dsv4i_st_tensor *t = ck->entries[j++].t;
      shape_str(sh, sizeof sh, t->ndim, t->shape);
      note(&extra, "%s (%s %s)", t->name, dsv4i_dtype_name(t->dtype), sh);
    } else {
      compare(&c->specs[i++], ck->entries[j++].t, &dtype, &shape);
    }
  }
  dsv4_status s = DSV4_OK;
  if (miss.count || extra.count || dtype.count || shape.count) {
    dsv4i_str m = {0};
    dsv4i_str_appendf(&m,
                      "%s: the checkpoint's tensors differ from the contract of its config.json "
                      "(%zu missing, %zu unexpected, %zu wrong dtype, %zu wrong shape)",
                      what, miss.count, extra.count, dtype.count, shape.count);
    emit(&m, "missing", &miss);
    emit(&m, "unexpected", &extra);
    emit(&m, "wrong dtype", &dtype);
    emit(&m, "wrong shape", &shape);
    s = dsv4i_error(DSV4_ERR_WEIGHTS, "%s", dsv4i_str_cstr(&m));
    dsv4i_str_free(&m);
  }
  dsv4i_str_free(&miss.text);
  dsv4i_str_free(&extra.text);
  dsv4i_str_free(&dtype.text);
  dsv4i_str_free(&shape.text);
  return s;
}
