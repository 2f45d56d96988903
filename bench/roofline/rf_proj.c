/*
 * dsv4-roofline: the fp8 projections (dsv4i_gpu_linear_q8 in the default
 * "tiled" numerics mode: kernels/linear_mma.cu, act_quant fused up to
 * q8_fuse_max tokens; also the kernel alone, after dsv4i_gpu_q8_quant) and the bf16 head (fp32 logits) at 1, 4, 8, 16
 * tokens; stock beside each: the same matrix dequantised to bf16 and one
 * cuBLASLt GEMM (bf16 in, fp32 out). Shapes from the release config.
 */
#include <stdlib.h>
#include <string.h>

#include "rf.h"

enum { MAX_COPIES = 32 };

typedef struct proj_case {
  dsv4i_gpu_weight w[MAX_COPIES];
  dsv4i_cuptr wb[MAX_COPIES]; /* stock: bf16 [rows][cols] */
  int copies, copies_b, n;
  int mode; /* fp8: 0 the default (tiled), 1 tiled through the other act_quant path, 2 CPU order,
             * 3 the tiled kernel alone on activations quantised before the timing */
  dsv4i_cuptr x, xq, sx, y, yf;
} proj_case;

static dsv4_status rec_ours(rf *r, void *u, int i, dsv4i_custream s) {
  proj_case *c = u;
  const dsv4i_gpu_weight *w = &c->w[i % c->copies];
  if (w->fmt != DSV4I_KFMT_E4M3_UE8M0)
    return dsv4i_gpu_linear(&r->o, s, w, c->n, c->x, w->cols, c->yf, w->rows, 1);
  dsv4i_gpu_ops o = r->o; /* the default numerics mode: the tiled kernel (the engine's cpu_order aside) */
  o.cpu_order = r->o.cpu_order || c->mode == 2, o.fp8_tiled = 1;
  if (c->mode == 1) o.q8_fuse_max = c->n <= r->o.q8_fuse_max ? 0 : 8;
  if (c->mode == 3) return dsv4i_gpu_linear_q8_pre(&o, s, w, c->n, c->xq, c->sx, c->y, w->rows);
  return dsv4i_gpu_linear_q8(&o, s, w, c->n, c->x, w->cols, c->xq, c->sx, c->y, w->rows);
}

static dsv4_status rec_stock(rf *r, void *u, int i, dsv4i_custream s) {
  proj_case *c = u;
  const dsv4i_gpu_weight *w = &c->w[0];
  return rf_gemm(r, s, c->n, w->rows, w->cols, c->x, w->cols, c->wb[i % c->copies_b], w->cols,
                 c->yf, w->rows);
}

static void one(rf *r, const char *name, int rows, int cols, int fp8) {
  const char *only = getenv("DSV4_RF_PROJ"); /* profiling: only the rows whose name contains it */
  if (only && *only && !strstr(name, only)) return;
  const size_t mark = dsv4i_gpu_pool_mark(&r->g.pool);
  proj_case *c = calloc(1, sizeof *c);
  const size_t wb = fp8 ? (size_t)rows * cols : (size_t)rows * cols * 2;
  const size_t sb = fp8 ? (size_t)((rows + 31) / 32) * ((cols + 31) / 32) : 0;
  c->copies = rf_copies(r, (double)(wb + sb), MAX_COPIES);
  for (int k = 0; k < c->copies; k++)
    c->w[k] = (dsv4i_gpu_weight){.fmt = fp8 ? DSV4I_KFMT_E4M3_UE8M0 : DSV4I_KFMT_BF16,
                                 .rows = rows, .cols = cols, .ld = cols,
                                 .scale_ld = fp8 ? (cols + 31) / 32 : 0,
                                 .data = rf_rand(r, wb, fp8 ? 0x3F3F3F3Fu : 0x3F7F3F7Fu, 0),
                                 .scale = fp8 ? rf_rand(r, sb, 0, 0x7F7F7F7Fu) : 0};
  const size_t bf = (size_t)rows * cols * 2;
  c->copies_b = rf_copies(r, (double)bf, MAX_COPIES);
  const int stock = r->lt.handle != NULL;
  if (stock)
    for (int k = 0; k < c->copies_b; k++)
      c->wb[k] = fp8 || k >= c->copies ? rf_rand(r, bf, 0x3F7F3F7Fu, 0) : c->w[k].data;
  const int ns[] = {1, 4, 8, 16};
  const char *only_n = getenv("DSV4_RF_PROJ_N"); /* profiling: only this token count */
  for (int q = 0; q < 4; q++) {
    if (only_n && *only_n && atoi(only_n) != ns[q]) continue;
    const size_t m2 = dsv4i_gpu_pool_mark(&r->g.pool);
    const int n = ns[q];
    c->n = n;
    c->x = rf_rand(r, (size_t)n * cols * 2, 0x3F7F3F7Fu, 0);
    c->xq = rf_take(r, (size_t)n * cols * 4), c->sx = rf_take(r, (size_t)n * (cols / 32) * 4);
    c->y = rf_take(r, (size_t)n * rows * 2), c->yf = rf_take(r, (size_t)n * rows * 4);
    const int calls = c->copies < 8 ? 8 : c->copies;
    const double us = rf_time(r, rec_ours, c, calls);
    const double st = stock ? rf_time(r, rec_stock, c, c->copies_b < 8 ? 8 : c->copies_b) : -1;
    /* bytes: the weight and its scales, x in, y out (bf16; the head's fp32) */
    const double bytes = (double)(wb + sb) + 2.0 * n * cols + (fp8 ? 2.0 : 4.0) * n * rows;
    rf_row(r, name, n, us, bytes, st);
    /* fp8: the other act_quant path of the tiled kernel (fused / prepass, up to 8 tokens),
     * the CPU-order kernels and the tiled kernel alone (its act_quant done once before the
     * timing, as for a projection sharing its input's quantisation), each its own row */
    for (c->mode = 1; fp8 && c->mode <= 3; c->mode++) {
      if (c->mode == 1 && n > 8) continue;
      if (c->mode == 3) {
        dsv4i_gpu_ops o = r->o;
        o.cpu_order = 0, o.fp8_tiled = 1;
        rf_check(dsv4i_gpu_q8_quant(&o, r->g.stream, n, cols, c->x, cols, c->xq, c->sx), "q8_quant");
      }
      char alt[96];
      snprintf(alt, sizeof alt, "%s %s", name,
               c->mode == 2 ? "cpu-order" : c->mode == 3 ? "gemm only" :
               n <= r->o.q8_fuse_max ? "prepass" : "fused");
      rf_row(r, alt, n, rf_time(r, rec_ours, c, calls), bytes, -1);
    }
    c->mode = 0;
    dsv4i_gpu_pool_reset(&r->g.pool, m2);
  }
  free(c);
  dsv4i_gpu_pool_reset(&r->g.pool, mark);
}

void rf_proj(rf *r) {
  const dsv4i_config *c = &r->cfg;
  rf_table_head("fp8 projections (tiled: linear_q8) and the bf16 head (stock: bf16 weight, "
                "one cuBLASLt GEMM)");
  char name[64];
#define P(label, R, K)                                                  \
  snprintf(name, sizeof name, "%s %dx%d", label, (int)(R), (int)(K));  \
  one(r, name, (R), (K), 1)
  P("wq_a", c->q_lora_rank, c->dim);
  P("wq_b", c->n_heads * c->head_dim, c->q_lora_rank);
  P("wkv", c->head_dim, c->dim);
  P("wo_b", c->dim, c->o_groups * c->o_lora_rank);
  P("indexer wq_b", c->index_n_heads * c->index_head_dim, c->q_lora_rank);
  P("engram wkv", (c->hc_mult + 1) * c->dim,
    (c->engram_max_ngram - 1) * c->engram_n_heads * c->engram_head_dim);
  P("main_proj", c->dim, c->n_dspark_targets * c->dim);
  P("shared w1", c->moe_inter_dim * c->n_shared_experts, c->dim);
#undef P
  snprintf(name, sizeof name, "head bf16 %dx%d -> f32", (int)c->vocab_size, (int)c->dim);
  one(r, name, c->vocab_size, c->dim, 0);
}
