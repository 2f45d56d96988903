/*
 * test_cuda_real_dims's diagnostics (real_dims_diag.h): the backends' ops are
 * wrapped (a copy of each engine's vtable whose run goes op by op through
 * dsv4i_backend_run_blocks), so one prefill records every op's input and
 * output on the CPU and compares them on the GPU, free-running or with the
 * CPU's input written in first (teacher forcing). The block's sublayer
 * buffers are the backends' step workspaces, which both name alike
 * (lib/cpu/cpu_backend.h, lib/gpu/gpu_backend.h).
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "test_util.h"
#include "real_dims_diag.h"

#include "backend/backend.h"
#include "cpu/cpu_backend.h"
#include "cpu/cpu_ops.h"
#include "engine/engine.h"
#include "gpu/gpu_backend.h"
#include "model/model.h"

/* ---- comparison ---------------------------------------------------------------- */

typedef struct rd_stat {
  size_t n, nd, at; /* values, values differing in bits, index of the largest |diff| */
  size_t first;     /* first differing index */
  double max;       /* largest |diff| (inf where one side is not a number) */
  float c, g;       /* values at `at` */
} rd_stat;

static float bf(uint16_t u) {
  const uint32_t x = (uint32_t)u << 16;
  float f;
  memcpy(&f, &x, 4);
  return f;
}

static void stat_add(rd_stat *s, size_t i, float c, float g, int same_bits) {
  if (same_bits) return;
  if (!s->nd) s->first = i;
  s->nd++;
  double d = fabs((double)c - (double)g);
  if (d != d) d = INFINITY;
  if (d > s->max || s->nd == 1) s->max = d, s->at = i, s->c = c, s->g = g;
}

static rd_stat cmp_f32(const float *c, const float *g, size_t n) {
  rd_stat s = {n, 0, 0, 0, 0.0, 0.0f, 0.0f};
  for (size_t i = 0; i < n; i++) stat_add(&s, i, c[i], g[i], memcmp(&c[i], &g[i], 4) == 0);
  return s;
}

static rd_stat cmp_bf16(const uint16_t *c, const uint16_t *g, size_t n) {
  rd_stat s = {n, 0, 0, 0, 0.0, 0.0f, 0.0f};
  for (size_t i = 0; i < n; i++) stat_add(&s, i, bf(c[i]), bf(g[i]), c[i] == g[i]);
  return s;
}

static rd_stat cmp_i32(const int32_t *c, const int32_t *g, size_t n) {
  rd_stat s = {n, 0, 0, 0, 0.0, 0.0f, 0.0f};
  for (size_t i = 0; i < n; i++) stat_add(&s, i, (float)c[i], (float)g[i], c[i] == g[i]);
  return s;
}

/* "name nd/n" or "name nd/n max M" */
static void put_stat(const char *name, rd_stat s) {
  if (!s.nd)
    printf(" %s 0/%zu", name, s.n);
  else
    printf(" %s %zu/%zu max %.3g", name, s.nd, s.n, s.max);
}

/* where (row of `inner` values) and the values, for a stat that differs */
static void put_where(const char *name, rd_stat s, size_t inner) {
  if (!s.nd) return;
  printf("    %s: first differing [%zu][%zu]; largest |diff| %.6g at [%zu][%zu]: cpu %.9g gpu %.9g\n",
         name, s.first / inner, s.first % inner, s.max, s.at / inner, s.at % inner, (double)s.c,
         (double)s.g);
}

void rd_diag_steps(const char *tag, const float *cpu, const float *gpu, int32_t V, int32_t rows) {
  printf("diag %s: logits per row (0 = prefill, k = decode step k):\n", tag);
  for (int32_t r = 0; r < rows; r++) {
    const rd_stat s = cmp_f32(cpu + (size_t)r * V, gpu + (size_t)r * V, (size_t)V);
    printf("  row %2d: %6zu of %d differ, max |diff| %.6g at %zu (cpu %.6g gpu %.6g)\n", (int)r, s.nd,
           (int)V, s.max, s.at, (double)s.c, (double)s.g);
  }
}

/* ---- the recording wrappers ------------------------------------------------------ */

enum { RD_EMBED, RD_ENGRAM, RD_BLOCK, RD_HEAD };
enum { RD_RECORD, RD_FREE, RD_FORCED };

/* one op's record (the CPU's) */
typedef struct rd_op {
  int32_t kind, layer;
  uint16_t *hin, *hout;
  float *pin, *pout;
  /* block: the step workspace after it */
  uint16_t *x, *y;
  float *mixes, *a_pre, *a_post, *a_comb, *f_post, *f_comb;
  int32_t *topk; /* the latest index source's selection [T][topk_ld] */
  float *logits; /* head: rows [n_out][vocab] */
} rd_op;

#define RD_MAX_OPS 256

static struct {
  const dsv4i_backend_ops *orig[2]; /* 0 CPU, 1 CUDA */
  dsv4i_backend_ops wrap[2];
  int32_t mode, k, T, n_out, hc, dim, vocab;
  size_t hb, pb;
  rd_op op[RD_MAX_OPS];
  dsv4i_backend *cpu_be; /* for the MoE-alone check */
  int32_t moe_checked, topk_ld;
  const dsv4i_config *cfg;
} rd;

static int side(const dsv4i_backend *be) { return be != rd.cpu_be; }

static void ok(dsv4_status s, const char *what) {
  if (s != DSV4_OK) fail_msg("diag %s: %s: %s", what, dsv4_status_string(s), dsv4_last_error());
}

static void *get(dsv4i_backend *be, dsv4i_bbuf b, size_t bytes) {
  void *p = malloc(bytes ? bytes : 1);
  assert_non_null(p);
  ok(rd.orig[side(be)]->buf_read(be, b, 0, bytes, p), "buf_read");
  return p;
}

/* a workspace buffer of the CPU backend (host) or of the CUDA backend (device address) */
static void *ws_host(const void *p, size_t bytes) {
  void *q = malloc(bytes);
  assert_non_null(q);
  memcpy(q, p, bytes);
  return q;
}

static void *ws_dev(dsv4i_backend *be, dsv4i_cuptr dev, size_t bytes) {
  return get(be, (dsv4i_bbuf){(void *)(uintptr_t)dev}, bytes);
}

static void block_ws(dsv4i_backend *be, rd_op *o) {
  const size_t T = (size_t)rd.T, hc = (size_t)rd.hc, d = (size_t)rd.dim;
  const size_t xb = T * d * 2, mb = T * (2 + hc) * hc * 4, vb = T * hc * 4, cb = T * hc * hc * 4;
  if (be->kind == DSV4_BACKEND_CPU) {
    const cpu_backend *b = (const cpu_backend *)be;
    o->x = ws_host(b->x, xb), o->y = ws_host(b->y, xb), o->mixes = ws_host(b->mixes, mb);
    o->a_pre = ws_host(b->a_pre, vb), o->a_post = ws_host(b->a_post, vb);
    o->a_comb = ws_host(b->a_comb, cb), o->f_post = ws_host(b->f_post, vb);
    o->f_comb = ws_host(b->f_comb, cb);
    if (b->sh.topk && b->sh.topk_ld == rd.topk_ld)
      o->topk = ws_host(b->sh.topk, T * (size_t)rd.topk_ld * 4);
  } else {
    const gpu_ws *w = &((const gpu_backend *)be)->ws;
    o->x = ws_dev(be, w->x, xb), o->y = ws_dev(be, w->y, xb);
    o->mixes = ws_dev(be, w->mixes, mb), o->a_pre = ws_dev(be, w->a_pre, vb);
    o->a_post = ws_dev(be, w->a_post, vb), o->a_comb = ws_dev(be, w->a_comb, cb);
    o->f_post = ws_dev(be, w->f_post, vb), o->f_comb = ws_dev(be, w->f_comb, cb);
    if (w->topk && w->topk_ld == rd.topk_ld) o->topk = ws_dev(be, w->topk, T * (size_t)rd.topk_ld * 4);
  }
}

static void op_free(rd_op *o) {
  free(o->hin), free(o->hout), free(o->pin), free(o->pout), free(o->x), free(o->y);
  free(o->mixes), free(o->a_pre), free(o->a_post), free(o->a_comb), free(o->f_post);
  free(o->f_comb), free(o->topk), free(o->logits);
  memset(o, 0, sizeof *o);
}

static const char *op_name(int32_t kind) {
  return kind == RD_EMBED ? "embed" : kind == RD_ENGRAM ? "engram" : kind == RD_BLOCK ? "block" : "head";
}

/* The CUDA backend's MoE against the CPU's on the GPU's own FFN input x of this block:
 * router ids and weights, then the experts with the GPU's routing. */
static void moe_alone(dsv4i_backend *gbe, int32_t L, const uint16_t *gx, const uint16_t *gy) {
  const cpu_backend *cb = (const cpu_backend *)rd.cpu_be;
  const dsv4i_moe *m = &cb->blocks[L].moe;
  const size_t T = (size_t)rd.T, k = (size_t)m->top_k, d = (size_t)rd.dim;
  int32_t *ci = malloc(T * k * 4), *gi;
  float *cw = malloc(T * k * 4), *gw;
  uint16_t *cy = malloc(T * d * 2);
  assert_true(ci && cw && cy);
  ok(dsv4i_cpu_router(m, (int64_t)T, gx, (int64_t)d, NULL, ci, cw), "cpu router");
  if (gbe->kind == DSV4_BACKEND_CUDA) {
    const gpu_ws *w = &((const gpu_backend *)gbe)->ws;
    gi = ws_dev(gbe, w->ridx, T * k * 4);
    gw = ws_dev(gbe, w->rw, T * k * 4);
  } else { /* the machinery's own check on two CPU engines */
    gi = ws_host(ci, T * k * 4);
    gw = ws_host(cw, T * k * 4);
  }
  ok(dsv4i_cpu_moe_experts(m, (int64_t)T, gx, (int64_t)d, gi, gw, cy, (int64_t)d), "cpu experts");
  const rd_stat si = cmp_i32(ci, gi, T * k), sw = cmp_f32(cw, gw, T * k), sy = cmp_bf16(cy, gy, T * d);
  printf("    MoE alone on the GPU's x (CPU router and experts, the GPU's routing):");
  put_stat("expert ids", si);
  put_stat("weights", sw);
  put_stat("experts out", sy);
  printf("\n");
  put_where("expert ids [token][slot]", si, k);
  put_where("route weights [token][slot]", sw, k);
  put_where("experts out [token][dim]", sy, d);
  free(gi), free(gw), free(ci), free(cw), free(cy);
}

/* the GPU's op k against the CPU's record */
static void compare(dsv4i_backend *be, const rd_op *c, const rd_op *g, const uint16_t *hin_own) {
  const size_t T = (size_t)rd.T, hc = (size_t)rd.hc, d = (size_t)rd.dim;
  const char *mode = rd.mode == RD_FORCED ? "forced" : "free";
  printf("  %-6s %-6s", mode, op_name(c->kind));
  if (c->layer >= 0) printf(" L%d", (int)c->layer);
  printf(":");
  if (hin_own) put_stat("in h", cmp_bf16(c->hin, hin_own, T * hc * d));
  rd_stat sh = {0}, sp = {0}, sx = {0}, sy = {0}, sl = {0};
  if (c->kind == RD_HEAD) {
    sl = cmp_f32(c->logits, g->logits, (size_t)rd.n_out * (size_t)rd.vocab);
    put_stat("logits", sl);
    printf("\n");
    put_where("logits [row][id]", sl, (size_t)rd.vocab);
    return;
  }
  sh = cmp_bf16(c->hout, g->hout, T * hc * d);
  put_stat("out h", sh);
  if (c->pout) put_stat("pre", sp = cmp_f32(c->pout, g->pout, T * hc));
  if (c->kind == RD_BLOCK) {
    const rd_stat a = cmp_f32(c->a_post, g->a_post, T * hc);
    const rd_stat ac = cmp_f32(c->a_comb, g->a_comb, T * hc * hc);
    const rd_stat ap = cmp_f32(c->a_pre, g->a_pre, T * hc);
    const rd_stat fm = cmp_f32(c->mixes, g->mixes, T * (2 + hc) * hc);
    const rd_stat fp = cmp_f32(c->f_post, g->f_post, T * hc);
    const rd_stat fc = cmp_f32(c->f_comb, g->f_comb, T * hc * hc);
    sx = cmp_bf16(c->x, g->x, T * d);
    sy = cmp_bf16(c->y, g->y, T * d);
    printf(" | attn mixes: pre/post/comb %zu/%zu/%zu; ffn: mixes %zu post %zu comb %zu;", ap.nd,
           a.nd, ac.nd, fm.nd, fp.nd, fc.nd);
    put_stat("ffn x", sx);
    put_stat("moe y", sy);
    rd_stat st = {0};
    const dsv4i_layer_role *lc = &rd.cfg->layers[c->layer]; /* top-k: index sources only (the
                                                            * buffer is stale elsewhere) */
    if (c->topk && g->topk && lc->compress_ratio > 0 && lc->index_source == c->layer)
      put_stat("top-k", st = cmp_i32(c->topk, g->topk, T * (size_t)rd.topk_ld));
    printf("\n");
    put_where("top-k [token][i]", st, (size_t)rd.topk_ld);
    if (ap.nd + a.nd + ac.nd) printf("    the attention sublayer's mixes of the same h differ\n");
    put_where("ffn mixes [token][i]", fm, (2 + hc) * hc);
    put_where("ffn x [token][dim]", sx, d);
    put_where("moe y [token][dim]", sy, d);
  } else {
    printf("\n");
  }
  put_where("out h [token][copy*dim]", sh, hc * d);
  put_where("pre [token][copy]", sp, hc);
  if (c->kind == RD_BLOCK && rd.mode == RD_FORCED && (sx.nd || sy.nd || sh.nd) && rd.moe_checked < 2) {
    rd.moe_checked++;
    moe_alone(be, c->layer, g->x, g->y);
  }
}

/* before op k: the CPU records its input; the GPU compares its own input, and in forced
 * mode starts from the CPU's */
static uint16_t *before(dsv4i_backend *be, rd_op *o, int32_t kind, int32_t layer, dsv4i_bbuf h,
                        dsv4i_bbuf pre) {
  o->kind = kind, o->layer = layer;
  uint16_t *own = NULL;
  if (kind == RD_EMBED) return NULL;
  if (rd.mode == RD_RECORD) {
    o->hin = get(be, h, rd.hb);
    if (pre.impl) o->pin = get(be, pre, rd.pb);
    return NULL;
  }
  own = get(be, h, rd.hb);
  if (rd.mode == RD_FORCED) {
    const rd_op *c = &rd.op[rd.k];
    ok(rd.orig[1]->buf_write(be, h, 0, rd.hb, c->hin), "buf_write h");
    if (pre.impl && c->pin) ok(rd.orig[1]->buf_write(be, pre, 0, rd.pb, c->pin), "buf_write pre");
  }
  return own;
}

static void after(dsv4i_backend *be, rd_op *o, dsv4i_bbuf h, dsv4i_bbuf pre, uint16_t *own) {
  if (o->kind != RD_HEAD) {
    o->hout = get(be, h, rd.hb);
    if (pre.impl && o->kind != RD_ENGRAM) o->pout = get(be, pre, rd.pb);
  }
  if (o->kind == RD_BLOCK) block_ws(be, o);
  if (rd.mode != RD_RECORD) {
    if (rd.k < RD_MAX_OPS && rd.op[rd.k].kind == o->kind && rd.op[rd.k].layer == o->layer)
      compare(be, &rd.op[rd.k], o, own);
    else
      printf("  op %d (%s): the CPU ran another op here\n", (int)rd.k, op_name(o->kind));
    op_free(o);
  }
  free(own);
  rd.k++;
}

static rd_op *slot(void) {
  static rd_op tmp;
  assert_true(rd.k < RD_MAX_OPS);
  return rd.mode == RD_RECORD ? &rd.op[rd.k] : &tmp;
}

static dsv4_status w_embed(dsv4i_backend *be, dsv4i_bbuf h, dsv4i_bbuf pre) {
  rd_op *o = slot();
  uint16_t *own = before(be, o, RD_EMBED, -1, h, pre);
  const dsv4_status s = rd.orig[side(be)]->embed(be, h, pre);
  if (!s) after(be, o, h, pre, own);
  return s;
}

static dsv4_status w_engram(dsv4i_backend *be, int32_t layer, dsv4i_bbuf h) {
  rd_op *o = slot();
  uint16_t *own = before(be, o, RD_ENGRAM, layer, h, (dsv4i_bbuf){NULL});
  const dsv4_status s = rd.orig[side(be)]->engram(be, layer, h);
  if (!s) after(be, o, h, (dsv4i_bbuf){NULL}, own);
  return s;
}

static dsv4_status w_block(dsv4i_backend *be, int32_t layer, dsv4i_bbuf h, dsv4i_bbuf pre,
                           dsv4i_bbuf taps) {
  rd_op *o = slot();
  uint16_t *own = before(be, o, RD_BLOCK, layer, h, pre);
  const dsv4_status s = rd.orig[side(be)]->block(be, layer, h, pre, taps);
  if (!s) after(be, o, h, pre, own);
  return s;
}

static dsv4_status w_head(dsv4i_backend *be, dsv4i_bbuf h, dsv4i_bbuf pre, dsv4i_bbuf logits) {
  rd_op *o = slot();
  uint16_t *own = before(be, o, RD_HEAD, -1, h, pre);
  const dsv4_status s = rd.orig[side(be)]->head(be, h, pre, logits);
  if (!s) {
    o->logits = get(be, logits, (size_t)rd.n_out * (size_t)rd.vocab * 4);
    after(be, o, h, pre, own);
  }
  return s;
}

static dsv4_status w_run(dsv4i_backend *be, const dsv4i_step_io *io) {
  rd.k = 0;
  rd.T = io->batch->n_tok;
  rd.n_out = io->batch->n_out;
  rd.hb = (size_t)rd.T * (size_t)rd.hc * (size_t)rd.dim * 2;
  rd.pb = (size_t)rd.T * (size_t)rd.hc * 4;
  return dsv4i_backend_run_blocks(be, io, NULL);
}

static void wrap(dsv4_engine *e) {
  dsv4i_backend *be = e->be;
  const int s = side(be);
  rd.orig[s] = be->ops;
  rd.wrap[s] = *be->ops;
  rd.wrap[s].run = w_run;
  rd.wrap[s].embed = w_embed;
  rd.wrap[s].engram = w_engram;
  rd.wrap[s].block = w_block;
  rd.wrap[s].head = w_head;
  be->ops = &rd.wrap[s];
}

static void prefill(dsv4_engine *e, const int32_t *in, int32_t n, float *lg, int32_t *tok) {
  int64_t seq;
  ok(dsv4_engine_seq_create(e, &seq), "seq_create");
  ok(dsv4_engine_prefill(e, seq, in, n, NULL, lg, tok), "prefill");
  ok(dsv4_engine_seq_free(e, seq), "seq_free");
}

/* the CPU engine against an engine of backend `kind` (DSV4_BACKEND_CUDA; the CPU when the
 * machinery itself is checked) */
static void diag_pair(dsv4_model *m, const dsv4_engine_params *ep, int32_t kind, const int32_t *in,
                      int32_t n) {
  const dsv4i_config *c = dsv4i_model_config(m);
  memset(&rd, 0, sizeof rd);
  rd.hc = c->hc_mult, rd.dim = c->dim, rd.topk_ld = c->index_topk, rd.cfg = c;
  dsv4_model_info mi;
  ok(dsv4_model_get_info(m, &mi, sizeof mi), "model info");
  rd.vocab = mi.vocab_size;
  dsv4_engine_params p = *ep;
  p.prefill_chunk = n; /* one step: one record per op */
  dsv4_engine *ec = NULL, *eg = NULL;
  p.backend = DSV4_BACKEND_CPU;
  ok(dsv4_engine_create(m, &p, &ec), "cpu engine");
  p.backend = kind;
  ok(dsv4_engine_create(m, &p, &eg), "second engine");
  rd.cpu_be = ec->be;
  wrap(ec);
  wrap(eg);
  float *lg = malloc((size_t)rd.vocab * 4 * 3);
  assert_non_null(lg);
  int32_t tok[3];
  printf("diag: prefill of %d tokens op by op (T %d, hc %d, dim %d); 'in h' = the GPU's own "
         "input against the CPU's, 'a/b' = values differing in bits of all\n", (int)n, (int)n,
         (int)rd.hc, (int)rd.dim);
  rd.mode = RD_RECORD;
  prefill(ec, in, n, lg, &tok[0]);
  const int32_t n_ops = rd.k;
  rd.mode = RD_FREE;
  prefill(eg, in, n, lg + rd.vocab, &tok[1]);
  rd.mode = RD_FORCED;
  prefill(eg, in, n, lg + 2 * (size_t)rd.vocab, &tok[2]);
  printf("diag: %d ops; tokens cpu %d, gpu free %d, gpu forced %d\n", (int)n_ops, (int)tok[0],
         (int)tok[1], (int)tok[2]);
  ec->be->ops = rd.orig[0];
  eg->be->ops = rd.orig[1];
  for (int32_t k = 0; k < RD_MAX_OPS; k++) op_free(&rd.op[k]);
  free(lg);
  dsv4_engine_free(eg);
  dsv4_engine_free(ec);
}

void rd_diag_prefill(dsv4_model *m, const dsv4_engine_params *ep, const int32_t *in, int32_t n) {
  diag_pair(m, ep, DSV4_BACKEND_CUDA, in, n);
}
