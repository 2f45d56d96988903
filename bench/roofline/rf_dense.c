/*
 * dsv4-roofline: the small dense ops and the bf16 projections of a decode
 * step at 1, 4, 8, 16 tokens, release dims: RMSNorm (dim, q_lora_rank,
 * head_dim), hc_mixes and Sinkhorn (hc_mult x dim), hc_pre, hc_post, RoPE
 * (head_dim's rope part), the fused hc_mixes + Sinkhorn, hc_pre + RMSNorm,
 * hc_post + hc_pre + RMSNorm and RMSNorm + RoPE (one launch each in the
 * default mode, the unfused launches in CPU order), the attention sublayer's
 * entry (hc_mixes + Sinkhorn beside hc_pre + RMSNorm), the grouped wo_a, the
 * compressor's wkv, the indexer's wk and wproj (bf16 -> bf16), and the head
 * (bf16 -> fp32); the MoE router (the fp32-out gate GEMM and the top-k
 * selection, as a layer runs them, and the selection alone) and the Engram
 * update. Each in the default mode (the kernels the engine runs
 * without DSV4_ENGINE_F_GPU_CPU_ORDER) and again in CPU order (rows marked
 * "cpu-order"). No stock baseline.
 */
#include <stdlib.h>

#include "rf.h"

enum { MAX_COPIES = 32, K_RMS = 0, K_MIX, K_SINK, K_PRE, K_MIXSK, K_PRENORM, K_POST, K_POSTPRE,
       K_ROPE, K_RMSROPE, K_ENTRY, K_LIN, K_ROUTER, K_RSEL, K_EUPD };

typedef struct dense_case {
  int kind, n, dim, hc, groups, out_f32, copies;
  dsv4i_gpu_ops o;
  dsv4i_gpu_weight w[MAX_COPIES]; /* K_LIN: the weight; K_RMS, K_MIX: data = the norm / fn weight */
  dsv4i_cuptr x, y, scale, base, pre, post, comb, mix, freqs, pos;
  int top_k;                     /* K_ROUTER, K_RSEL: y = z f32, pre = bias, post = ids, comb = weights */
  dsv4i_gpu_engram e;            /* K_EUPD: x = kv, y = h */
  dsv4i_cuptr w2; /* K_ENTRY: the norm weight beside fn (freqs: the lagged pre) */
} dense_case;

static dsv4_status rec(rf *r, void *u, int i, dsv4i_custream s) {
  (void)r;
  dense_case *c = u;
  const dsv4i_gpu_weight *w = &c->w[i % c->copies];
  switch (c->kind) {
  case K_RMS:
    return dsv4i_gpu_rmsnorm(&c->o, s, c->n, c->dim, c->x, c->dim, w->data, 1e-6f, c->y, c->dim);
  case K_MIX:
    return dsv4i_gpu_hc_mixes(&c->o, s, c->n, c->hc, c->dim, c->x, w->data, 1e-6f, c->y);
  case K_SINK:
    return dsv4i_gpu_hc_sinkhorn(&c->o, s, c->n, c->hc, c->x, c->scale, c->base, 20, 1e-6f, c->pre,
                                 c->post, c->comb);
  case K_PRE:
    return dsv4i_gpu_hc_pre(&c->o, s, c->n, c->hc, c->dim, c->x, c->pre, c->y);
  case K_MIXSK:
    return dsv4i_gpu_hc_mixes_sinkhorn(&c->o, s, c->n, c->hc, c->dim, c->x, w->data, 1e-6f, c->scale,
                                       c->base, 20, 1e-6f, c->mix, c->pre, c->post, c->comb);
  case K_PRENORM:
    return dsv4i_gpu_hc_pre_rmsnorm(&c->o, s, c->n, c->hc, c->dim, c->x, c->pre, w->data, 1e-6f, c->y);
  case K_ENTRY:
    return dsv4i_gpu_hc_entry(&c->o, s, c->n, c->hc, c->dim, c->x, w->data, 1e-6f, c->scale, c->base, 20,
                              1e-6f, c->mix, c->pre, c->post, c->comb, c->freqs, c->w2, 1e-6f, c->y);
  case K_POST: /* in place, as the block runs it */
    return dsv4i_gpu_hc_post(&c->o, s, c->n, c->hc, c->dim, c->y, c->x, c->post, c->comb, c->x);
  case K_POSTPRE:
    return dsv4i_gpu_hc_post_pre_rmsnorm(&c->o, s, c->n, c->hc, c->dim, c->y, c->x, c->post, c->comb, c->x,
                                         c->pre, w->data, 1e-6f, c->mix);
  case K_ROPE:
    return dsv4i_gpu_rope(&c->o, s, c->n, 1, c->hc, c->x + (dsv4i_cuptr)(c->dim - 2 * c->hc) * 2u, c->dim, 0,
                          c->freqs, c->pos, 0);
  case K_RMSROPE:
    return dsv4i_gpu_rmsnorm_rope(&c->o, s, c->n, c->dim, c->x, c->dim, w->data, 1e-6f, c->x, c->dim, c->hc,
                                  c->freqs, c->pos);
  case K_ROUTER:
  case K_RSEL: {
    dsv4_status st = DSV4_OK;
    if (c->kind == K_ROUTER) st = dsv4i_gpu_linear(&c->o, s, w, c->n, c->x, w->cols, c->y, w->rows, 1);
    if (st == DSV4_OK)
      st = dsv4i_gpu_router(&c->o, s, c->n, w->rows, c->top_k, c->y, w->rows, c->pre, 0, 0, 1, 1.5f,
                            c->post, c->comb);
    return st;
  }
  case K_EUPD:
    return dsv4i_gpu_engram_update(&c->o, s, &c->e, c->n, c->x, 0, 0, c->y);
  default:
    if (c->groups > 1)
      return dsv4i_gpu_linear_grouped(&c->o, s, w, c->groups, c->n, c->x, (int64_t)c->groups * w->cols,
                                      c->y, w->rows);
    return dsv4i_gpu_linear(&c->o, s, w, c->n, c->x, w->cols, c->y, w->rows, c->out_f32);
  }
}

/* one op at 1, 4, 8, 16 tokens in both modes; rows x cols: the weight (K_LIN),
 * dim / hc otherwise */
static void one(rf *r, const char *name, int kind, int rows, int cols, int groups, int out_f32) {
  const size_t mark = dsv4i_gpu_pool_mark(&r->g.pool);
  dense_case *c = calloc(1, sizeof *c);
  c->kind = kind, c->groups = groups, c->out_f32 = out_f32;
  /* hc: the copies, or the frequencies of K_ROPE / K_RMSROPE */
  const int router = kind == K_ROUTER || kind == K_RSEL;
  const int hc = kind == K_RMS || kind == K_LIN || router ? 1 : rows, nm = (2 + hc) * hc;
  c->dim = cols, c->hc = hc;
  double wbytes = 0;
  if (kind == K_LIN || router) wbytes = 2.0 * rows * cols;
  else if (kind == K_EUPD) wbytes = 4.0 * hc * cols; /* q_weight, k_weight */
  else if (kind == K_RMS || kind == K_PRENORM || kind == K_POSTPRE || kind == K_RMSROPE) wbytes = 2.0 * cols;
  else if (kind == K_MIX || kind == K_MIXSK || kind == K_ENTRY) wbytes = 4.0 * nm * hc * cols;
  const int no_w = kind == K_SINK || kind == K_PRE || kind == K_POST || kind == K_ROPE || kind == K_EUPD;
  c->copies = no_w || kind == K_RSEL ? 1 : rf_copies(r, wbytes, MAX_COPIES);
  for (int k = 0; k < c->copies; k++)
    c->w[k] = (dsv4i_gpu_weight){.fmt = DSV4I_KFMT_BF16, .rows = rows, .cols = cols, .ld = cols,
                                 .data = no_w ? 0
                                         : rf_rand(r, (size_t)wbytes,
                                                   kind == K_MIX || kind == K_MIXSK || kind == K_ENTRY
                                                       ? 0x3F7FFFFFu
                                                                                    : 0x3F7F3F7Fu, 0)};
  if (router) {
    c->top_k = groups; /* the selection's k travels in the groups column */
    c->pre = rf_rand(r, (size_t)rows * 4, 0x3E7FFFFFu, 0);
  }
  if (kind == K_EUPD)
    c->e = (dsv4i_gpu_engram){.dim = cols, .hc = hc, .eps = 1e-6f,
                              .q_weight = rf_rand(r, (size_t)hc * cols * 2, 0x3F7F3F7Fu, 0),
                              .k_weight = rf_rand(r, (size_t)hc * cols * 2, 0x3F7F3F7Fu, 0)};
  const int ns[] = {1, 4, 8, 16};
  for (int mode = 0; mode < 2; mode++) {
    c->o = r->o;
    c->o.cpu_order = mode;
    for (int q = 0; q < 4; q++) {
      const size_t m2 = dsv4i_gpu_pool_mark(&r->g.pool);
      const int n = ns[q];
      c->n = n;
      double bytes = wbytes;
      if (router) {
        c->x = rf_rand(r, (size_t)n * cols * 2, 0xBF7FBF7Fu, 0);
        c->y = kind == K_ROUTER ? rf_take(r, (size_t)n * rows * 4)
                                : rf_rand(r, (size_t)n * rows * 4, 0xBFFFFFFFu, 0);
        c->post = rf_take(r, (size_t)n * c->top_k * 4), c->comb = rf_take(r, (size_t)n * c->top_k * 4);
        bytes = (kind == K_ROUTER ? wbytes + 2.0 * n * cols + 4.0 * n * rows : 4.0 * n * rows) +
                4.0 * rows + 8.0 * n * c->top_k;
      } else if (kind == K_EUPD) {
        c->x = rf_rand(r, (size_t)n * (hc + 1) * cols * 2, 0x3F7F3F7Fu, 0);
        c->y = rf_rand(r, (size_t)n * hc * cols * 2, 0x3F7F3F7Fu, 0);
        bytes += 2.0 * n * (hc + 1) * cols + 4.0 * n * hc * cols;
      } else if (kind == K_LIN) {
        c->x = rf_rand(r, (size_t)n * groups * cols * 2, 0x3F7F3F7Fu, 0);
        c->y = rf_take(r, (size_t)n * rows * 4);
        bytes += 2.0 * n * groups * cols + (out_f32 ? 4.0 : 2.0) * n * rows;
      } else if (kind == K_RMS) {
        c->x = rf_rand(r, (size_t)n * cols * 2, 0x3F7F3F7Fu, 0);
        c->y = rf_take(r, (size_t)n * cols * 2);
        bytes += 4.0 * n * cols;
      } else if (kind == K_MIX) {
        c->x = rf_rand(r, (size_t)n * hc * cols * 2, 0x3F7F3F7Fu, 0);
        c->y = rf_take(r, (size_t)n * nm * 4);
        bytes += 2.0 * n * hc * cols + 4.0 * n * nm;
      } else if (kind == K_PRE || kind == K_PRENORM) {
        c->x = rf_rand(r, (size_t)n * hc * cols * 2, 0x3F7F3F7Fu, 0);
        c->pre = rf_rand(r, (size_t)n * hc * 4, 0x3F7FFFFFu, 0);
        c->y = rf_take(r, (size_t)n * cols * 2);
        bytes += 2.0 * n * hc * cols + 4.0 * n * hc + 2.0 * n * cols;
      } else if (kind == K_POST || kind == K_POSTPRE) {
        c->x = rf_rand(r, (size_t)n * hc * cols * 2, 0x3F7F3F7Fu, 0);
        c->y = rf_rand(r, (size_t)n * cols * 2, 0x3F7F3F7Fu, 0);
        c->post = rf_rand(r, (size_t)n * hc * 4, 0x3F7FFFFFu, 0);
        c->comb = rf_rand(r, (size_t)n * hc * hc * 4, 0x3F7FFFFFu, 0);
        c->pre = rf_rand(r, (size_t)n * hc * 4, 0x3F7FFFFFu, 0);
        c->mix = rf_take(r, (size_t)n * cols * 2);
        bytes += 4.0 * n * hc * cols + 2.0 * n * cols + 4.0 * n * (hc + hc * hc);
        if (kind == K_POSTPRE) bytes += 4.0 * n * hc + 2.0 * n * cols;
      } else if (kind == K_ROPE || kind == K_RMSROPE) {
        c->x = rf_rand(r, (size_t)n * cols * 2, 0x3F7F3F7Fu, 0);
        c->freqs = rf_rand(r, (size_t)hc * 4, 0x3F7FFFFFu, 0);
        c->pos = rf_rand(r, (size_t)n * 4, 0x000FFFFFu, 0); /* positions < 2^20 */
        bytes += 4.0 * n * (kind == K_ROPE ? 2 * hc : cols) + 4.0 * hc + 4.0 * n;
      } else if (kind == K_MIXSK || kind == K_ENTRY) {
        c->x = rf_rand(r, (size_t)n * hc * cols * 2, 0x3F7F3F7Fu, 0);
        if (kind == K_ENTRY) {
          c->w2 = rf_rand(r, (size_t)cols * 2, 0x3F7F3F7Fu, 0);
          c->freqs = rf_rand(r, (size_t)n * hc * 4, 0x3F7FFFFFu, 0);
          c->y = rf_take(r, (size_t)n * cols * 2);
          bytes += 2.0 * cols + 4.0 * n * hc + 2.0 * n * cols;
        }
        c->mix = rf_take(r, (size_t)n * nm * 4);
        c->scale = rf_rand(r, 16, 0x3F7FFFFFu, 0), c->base = rf_rand(r, (size_t)nm * 4, 0x3F7FFFFFu, 0);
        c->pre = rf_take(r, (size_t)n * hc * 4), c->post = rf_take(r, (size_t)n * hc * 4);
        c->comb = rf_take(r, (size_t)n * hc * hc * 4);
        bytes += 2.0 * n * hc * cols + 4.0 * n * (nm + 2 * hc + hc * hc);
      } else {
        c->x = rf_rand(r, (size_t)n * nm * 4, 0x3F7FFFFFu, 0);
        c->scale = rf_rand(r, 16, 0x3F7FFFFFu, 0), c->base = rf_rand(r, (size_t)nm * 4, 0x3F7FFFFFu, 0);
        c->pre = rf_take(r, (size_t)n * hc * 4), c->post = rf_take(r, (size_t)n * hc * 4);
        c->comb = rf_take(r, (size_t)n * hc * hc * 4);
        bytes = 4.0 * n * (nm + 2 * hc + hc * hc);
      }
      const double us = rf_time(r, rec, c, c->copies < 8 ? 8 : c->copies);
      char label[80];
      snprintf(label, sizeof label, "%s%s", name, mode ? " cpu-order" : "");
      rf_row(r, label, n, us, bytes, -1);
      dsv4i_gpu_pool_reset(&r->g.pool, m2);
    }
  }
  free(c);
  dsv4i_gpu_pool_reset(&r->g.pool, mark);
}

void rf_dense(rf *r) {
  const dsv4i_config *c = &r->cfg;
  rf_table_head("small dense ops and bf16 projections: the default mode, then CPU order "
                "(DSV4_ENGINE_F_GPU_CPU_ORDER)");
  char name[64];
#define D(kind, label, R, K, G, F)                                          \
  snprintf(name, sizeof name, label, (int)(R), (int)(K));                 \
  one(r, name, kind, (R), (K), (G), (F))
  D(K_RMS, "rmsnorm %.0d%d", 0, c->dim, 1, 0);
  D(K_RMS, "rmsnorm %.0d%d", 0, c->q_lora_rank, 1, 0);
  D(K_RMS, "rmsnorm %.0d%d", 0, c->head_dim, 1, 0);
  D(K_MIX, "hc_mixes %dx%d", c->hc_mult, c->dim, 1, 0);
  D(K_SINK, "hc_sinkhorn %d%.0d", c->hc_mult, 0, 1, 0);
  D(K_MIXSK, "hc_mixes+sinkhorn %dx%d", c->hc_mult, c->dim, 1, 0);
  D(K_PRE, "hc_pre %dx%d", c->hc_mult, c->dim, 1, 0);
  D(K_PRENORM, "hc_pre+rmsnorm %dx%d", c->hc_mult, c->dim, 1, 0);
  D(K_ENTRY, "hc_entry %dx%d", c->hc_mult, c->dim, 1, 0);
  D(K_POST, "hc_post %dx%d", c->hc_mult, c->dim, 1, 0);
  D(K_POSTPRE, "hc_post+hc_pre+rmsnorm %dx%d", c->hc_mult, c->dim, 1, 0);
  D(K_ROPE, "rope %dof%d", c->rope_head_dim / 2, c->head_dim, 1, 0);
  D(K_RMSROPE, "rmsnorm+rope %dof%d", c->rope_head_dim / 2, c->head_dim, 1, 0);
  D(K_LIN, "bf16 wo_a %dx%d grouped", c->o_groups * c->o_lora_rank,
    c->n_heads * c->head_dim / c->o_groups, c->o_groups, 0);
  D(K_LIN, "bf16 compressor wkv %dx%d", c->head_dim, c->dim, 1, 0);
  D(K_LIN, "bf16 indexer wk %dx%d", c->index_head_dim, c->head_dim, 1, 0);
  D(K_LIN, "bf16 indexer wproj %dx%d", c->index_n_heads, c->dim, 1, 0);
  D(K_LIN, "bf16 head %dx%d -> f32", c->vocab_size, c->dim, 1, 1);
  D(K_ROUTER, "router gate %dx%d + top-k", c->n_routed_experts, c->dim, c->n_experts_per_tok, 0);
  D(K_RSEL, "router top-k of %d%.0d", c->n_routed_experts, 0, c->n_experts_per_tok, 0);
  D(K_EUPD, "engram_update %dx%d", c->hc_mult, c->dim, 1, 0);
#undef D
}
