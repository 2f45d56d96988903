/*
 * dsv4-roofline: the MoE step (routed top-k of E MXFP4 experts + the fp8
 * shared expert, dsv4i_gpu_moe_experts) at 1, 4, 8, 16 tokens in the default
 * (tiled) numerics mode (up and down as one launch, and as two) and in CPU
 * order, the shared expert alone, and the
 * stock path beside it: the experts dequantised to
 * bf16, one cuBLASLt GEMM per routed expert and projection, graph-replayed.
 * Routing: each token picks top_k distinct experts at random, a new draw per
 * call; the floor counts the distinct experts of each call.
 */
#include <stdlib.h>
#include <string.h>

#include "rf.h"

enum { MAX_CALLS = 16, POOL_BF16 = 128 };

typedef struct moe_case {
  int n, calls, n_sh;            /* tokens, calls, shared-expert copies */
  int cpu_order;                 /* 1: the CPU-order kernels (kernels/moe.cu) */
  int one_launch;                /* 1: the tiled up and down as one launch (moe_fused 1) */
  dsv4i_gpu_moe m[MAX_CALLS];    /* per shared copy: tables whose entry E is that copy */
  dsv4i_cuptr x, idx, wt, scratch, out;
  /* stock */
  int n_assign[MAX_CALLS], n_dist[MAX_CALLS], first[MAX_CALLS][96 + 1], slot[MAX_CALLS][96];
  dsv4i_cuptr rows, tok, wts;    /* per call [96]: token per assignment (expert-sorted), weights */
  dsv4i_cuptr w1b, w2b, w3b;     /* bf16 pool [POOL_BF16] experts */
  dsv4i_cuptr s1b[MAX_CALLS], s2b[MAX_CALLS], s3b[MAX_CALLS]; /* bf16 shared copies */
  dsv4i_cuptr xs, h1, h3, act, y, hs1, hs3, as, ys;
  int stock_ok;
} moe_case;

static dsv4_status rec_ours(rf *r, void *u, int i, dsv4i_custream s) {
  moe_case *c = u;
  const dsv4i_gpu_moe *m = &c->m[i % c->n_sh];
  const size_t k = (size_t)m->top_k * (size_t)c->n;
  dsv4i_gpu_ops o = r->o;
  o.cpu_order = c->cpu_order;
  o.moe_tiled = 1;
  if (c->one_launch) o.moe_fused = 1;
  return dsv4i_gpu_moe_experts(&o, s, m, c->n, c->x, m->dim, c->idx + (dsv4i_cuptr)(i * k * 4),
                               c->wt + (dsv4i_cuptr)(i * k * 4), c->scratch, c->out, m->dim);
}

static dsv4_status rec_stock(rf *r, void *u, int i, dsv4i_custream s) {
  moe_case *c = u;
  const dsv4i_gpu_moe *m = &c->m[0];
  const int dim = m->dim, inter = m->inter, A = c->n_assign[i], sh = i % c->n_sh;
  const size_t ebytes = (size_t)inter * (size_t)dim * 2;
  dsv4i_cuptr rows = c->rows + (dsv4i_cuptr)i * 96 * 4, wts = c->wts + (dsv4i_cuptr)i * 96 * 4;
  void *g[] = {&c->x, &rows, (void *)&dim, &c->xs};
  rf_launch(r, r->k_gather_rows, (unsigned)A, 1, 256, g, s);
  dsv4_status st = DSV4_OK;
  for (int e = 0; e < c->n_dist[i] && !st; e++) { /* up: w1 and w3 per expert */
    const int a0 = c->first[i][e], cnt = c->first[i][e + 1] - a0;
    const dsv4i_cuptr w1 = c->w1b + (dsv4i_cuptr)c->slot[i][e] * ebytes;
    const dsv4i_cuptr w3 = c->w3b + (dsv4i_cuptr)c->slot[i][e] * ebytes;
    st = rf_gemm(r, s, cnt, inter, dim, c->xs + (dsv4i_cuptr)a0 * dim * 2, dim, w1, dim,
                 c->h1 + (dsv4i_cuptr)a0 * inter * 4, inter);
    if (!st) st = rf_gemm(r, s, cnt, inter, dim, c->xs + (dsv4i_cuptr)a0 * dim * 2, dim, w3, dim,
                          c->h3 + (dsv4i_cuptr)a0 * inter * 4, inter);
  }
  long long na = (long long)A * inter, ns = (long long)c->n * inter;
  float lim = m->swiglu_limit;
  void *sw[] = {&c->h1, &c->h3, &na, &lim, &c->act};
  rf_launch(r, r->k_swiglu, 256, 1, 256, sw, s);
  for (int e = 0; e < c->n_dist[i] && !st; e++) { /* down: w2 per expert */
    const int a0 = c->first[i][e], cnt = c->first[i][e + 1] - a0;
    const dsv4i_cuptr w2 = c->w2b + (dsv4i_cuptr)c->slot[i][e] * ebytes;
    st = rf_gemm(r, s, cnt, dim, inter, c->act + (dsv4i_cuptr)a0 * inter * 2, inter, w2, inter,
                 c->y + (dsv4i_cuptr)a0 * dim * 4, dim);
  }
  /* shared expert */
  if (!st) st = rf_gemm(r, s, c->n, inter, dim, c->x, dim, c->s1b[sh], dim, c->hs1, inter);
  if (!st) st = rf_gemm(r, s, c->n, inter, dim, c->x, dim, c->s3b[sh], dim, c->hs3, inter);
  void *sw2[] = {&c->hs1, &c->hs3, &ns, &lim, &c->as};
  rf_launch(r, r->k_swiglu, 256, 1, 256, sw2, s);
  if (!st) st = rf_gemm(r, s, c->n, dim, inter, c->as, inter, c->s2b[sh], inter, c->ys, dim);
  void *cb[] = {&c->ys, &c->y, &rows, &wts, (void *)&A, (void *)&dim, &c->out};
  rf_launch(r, r->k_combine, (unsigned)(dim + 255) / 256, (unsigned)c->n, 256, cb, s);
  return st;
}

static uint32_t lcg(uint32_t *s) { return *s = *s * 1664525u + 1013904223u; }

void rf_moe(rf *r) {
  const dsv4i_config *cf = &r->cfg;
  const int E = cf->n_routed_experts, K = cf->n_experts_per_tok, dim = cf->dim,
            inter = cf->moe_inter_dim, sh_inter = cf->moe_inter_dim * cf->n_shared_experts;
  const size_t mark0 = dsv4i_gpu_pool_mark(&r->g.pool);
  /* MXFP4 experts: w1/w3 [inter][dim], w2 [dim][inter], one UE8M0 scale per 32 */
  const size_t w13 = (size_t)inter * dim / 2, s13 = (size_t)inter * (dim / 32);
  const size_t w2 = (size_t)dim * inter / 2, s2 = (size_t)dim * (inter / 32);
  const double routed = 2.0 * (double)(w13 + s13) + (double)(w2 + s2);
  const size_t sw13 = (size_t)sh_inter * dim, ss13 = (size_t)((sh_inter + 31) / 32) * (dim / 32);
  const size_t sw2 = (size_t)dim * sh_inter, ss2 = (size_t)(dim / 32) * ((sh_inter + 31) / 32);
  const double shared = 2.0 * (double)(sw13 + ss13) + (double)(sw2 + ss2);
  /* scales 127..128 (2^0 .. 2^1); codes: any e2m1, finite e4m3 */
  const dsv4i_cuptr ew1 = rf_rand(r, (w13 + s13) * E, ~0u, 0);
  const dsv4i_cuptr ew3 = rf_rand(r, (w13 + s13) * E, ~0u, 0);
  const dsv4i_cuptr ew2 = rf_rand(r, (w2 + s2) * E, ~0u, 0);
  const int n_sh = rf_copies(r, shared, MAX_CALLS);
  uint64_t *t[6];
  for (int j = 0; j < 6; j++) t[j] = malloc(sizeof(uint64_t) * (size_t)(E + 1));
  for (int e = 0; e < E; e++) {
    t[0][e] = ew1 + (dsv4i_cuptr)e * (w13 + s13), t[1][e] = t[0][e] + w13;
    t[4][e] = ew3 + (dsv4i_cuptr)e * (w13 + s13), t[5][e] = t[4][e] + w13;
    t[2][e] = ew2 + (dsv4i_cuptr)e * (w2 + s2), t[3][e] = t[2][e] + w2;
  }
  /* the scale bytes of the experts must be sane: rewrite them 127 | 128 */
  for (int e = 0; e < E; e++) {
    r->g.dev.cu->MemsetD8Async(t[1][e], 127, s13, r->g.stream);
    r->g.dev.cu->MemsetD8Async(t[5][e], 127, s13, r->g.stream);
    r->g.dev.cu->MemsetD8Async(t[3][e], 127, s2, r->g.stream);
  }
  moe_case *c = calloc(1, sizeof *c);
  c->n_sh = n_sh;
  for (int k = 0; k < n_sh; k++) {
    t[0][E] = rf_rand(r, sw13, 0x3F3F3F3Fu, 0), t[1][E] = rf_rand(r, ss13, 0, 0x7F7F7F7Fu);
    t[4][E] = rf_rand(r, sw13, 0x3F3F3F3Fu, 0), t[5][E] = rf_rand(r, ss13, 0, 0x7F7F7F7Fu);
    t[2][E] = rf_rand(r, sw2, 0x3F3F3F3Fu, 0), t[3][E] = rf_rand(r, ss2, 0, 0x7F7F7F7Fu);
    dsv4i_cuptr tab[6];
    for (int j = 0; j < 6; j++) tab[j] = rf_upload(r, t[j], sizeof(uint64_t) * (size_t)(E + 1));
    c->m[k] = (dsv4i_gpu_moe){.n_experts = E, .top_k = K, .dim = dim, .inter = inter,
                              .has_shared = 1, .swiglu_limit = cf->swiglu_limit,
                              .fmt_routed = DSV4I_KFMT_E2M1_UE8M0,
                              .fmt_shared = DSV4I_KFMT_E4M3_UE8M0, .w1 = tab[0], .s1 = tab[1],
                              .w2 = tab[2], .s2 = tab[3], .w3 = tab[4], .s3 = tab[5]};
  }
  for (int j = 0; j < 6; j++) free(t[j]);
  /* stock: a pool of bf16 experts and the shared copies in bf16 */
  c->stock_ok = r->lt.handle != NULL && 16 * K <= 96; /* the stock lists hold 96 slots */
  const size_t eb = (size_t)inter * dim * 2;
  if (c->stock_ok) {
    c->w1b = rf_rand(r, eb * POOL_BF16, 0x3F7F3F7Fu, 0);
    c->w3b = rf_rand(r, eb * POOL_BF16, 0x3F7F3F7Fu, 0);
    c->w2b = rf_rand(r, eb * POOL_BF16, 0x3F7F3F7Fu, 0);
    for (int k = 0; k < n_sh; k++) {
      c->s1b[k] = rf_rand(r, (size_t)sh_inter * dim * 2, 0x3F7F3F7Fu, 0);
      c->s3b[k] = rf_rand(r, (size_t)sh_inter * dim * 2, 0x3F7F3F7Fu, 0);
      c->s2b[k] = rf_rand(r, (size_t)sh_inter * dim * 2, 0x3F7F3F7Fu, 0);
    }
  }
  const size_t mark = dsv4i_gpu_pool_mark(&r->g.pool);
  rf_table_head("MoE step: routed top-k of E MXFP4 experts + the fp8 shared expert (stock: bf16 "
                "experts, a cuBLASLt GEMM per expert and projection)");
  const int ns[] = {1, 4, 8, 16};
  uint32_t seed = 12345;
  int slot_next = 0;
  for (int q = 0; q < 4; q++) {
    const int n = ns[q], nk = n * K;
    c->n = n;
    c->calls = rf_copies(r, routed * nk + shared, MAX_CALLS);
    if (c->calls < 8) c->calls = 8;
    int32_t *idx = malloc(sizeof(int32_t) * (size_t)(MAX_CALLS * nk));
    float *wt = malloc(sizeof(float) * (size_t)(MAX_CALLS * nk));
    int32_t *rows = calloc((size_t)MAX_CALLS * 96, sizeof(int32_t));
    float *wts = calloc((size_t)MAX_CALLS * 96, sizeof(float));
    double bytes = 0;
    for (int i = 0; i < c->calls; i++) {
      int32_t *id = idx + (size_t)i * nk;
      for (int tk = 0; tk < n; tk++)
        for (int j = 0; j < K; j++) {
          int e, dup;
          do {
            e = (int)(lcg(&seed) >> 8) % E;
            dup = 0;
            for (int p = 0; p < j; p++) dup |= id[tk * K + p] == e;
          } while (dup);
          id[tk * K + j] = e, wt[(size_t)i * nk + tk * K + j] = 1.0f / K;
        }
      /* expert-sorted assignments and distinct experts (stock's GEMM list) */
      int a = 0, d = 0;
      for (int e = 0; e < E; e++) {
        int any = 0;
        for (int j = 0; j < nk; j++)
          if (id[j] == e) {
            if (!any) c->first[i][d] = a, c->slot[i][d] = slot_next++ % POOL_BF16, d++;
            any = 1;
            rows[i * 96 + a] = j / K, wts[i * 96 + a] = wt[(size_t)i * nk + j], a++;
          }
      }
      c->first[i][d] = a, c->n_dist[i] = d, c->n_assign[i] = a;
      bytes += d * routed + shared + 2.0 * 2 * n * dim; /* experts, x in, out */
    }
    bytes /= c->calls;
    c->x = rf_rand(r, (size_t)n * dim * 2, 0x3F7F3F7Fu, 0);
    c->idx = rf_upload(r, idx, sizeof(int32_t) * (size_t)(c->calls * nk));
    c->wt = rf_upload(r, wt, sizeof(float) * (size_t)(c->calls * nk));
    c->scratch = rf_take(r, dsv4i_gpu_moe_scratch_bytes(&c->m[0], n));
    c->out = rf_take(r, (size_t)n * dim * 2);
    const double us = rf_time(r, rec_ours, c, c->calls);
    double st_us = -1;
    if (c->stock_ok) {
      c->rows = rf_upload(r, rows, sizeof(int32_t) * MAX_CALLS * 96);
      c->tok = c->rows;
      c->wts = rf_upload(r, wts, sizeof(float) * MAX_CALLS * 96);
      c->xs = rf_take(r, (size_t)nk * dim * 2);
      c->h1 = rf_take(r, (size_t)nk * inter * 4), c->h3 = rf_take(r, (size_t)nk * inter * 4);
      c->act = rf_take(r, (size_t)nk * inter * 2), c->y = rf_take(r, (size_t)nk * dim * 4);
      c->hs1 = rf_take(r, (size_t)n * sh_inter * 4), c->hs3 = rf_take(r, (size_t)n * sh_inter * 4);
      c->as = rf_take(r, (size_t)n * sh_inter * 2), c->ys = rf_take(r, (size_t)n * dim * 4);
      st_us = rf_time(r, rec_stock, c, c->calls);
    }
    c->cpu_order = 1;
    const double us_exact = rf_time(r, rec_ours, c, c->calls);
    c->cpu_order = 0;
    c->one_launch = 1;
    const double us_one = rf_time(r, rec_ours, c, c->calls);
    c->one_launch = 0;
    char name[64];
    snprintf(name, sizeof name, "moe %d/%d + shared", K, E);
    rf_row(r, name, n, us, bytes, st_us);
    snprintf(name, sizeof name, "moe %d/%d + shared, up/down 1 launch", K, E);
    rf_row(r, name, n, us_one, bytes, -1);
    snprintf(name, sizeof name, "moe %d/%d + shared, cpu order", K, E);
    rf_row(r, name, n, us_exact, bytes, -1);
    free(idx), free(wt), free(rows), free(wts);
    dsv4i_gpu_pool_reset(&r->g.pool, mark);
  }
  /* the shared expert alone: every routed slot skipped (id -1) */
  for (int q = 0; q < 4; q++) {
    const int n = ns[q], nk = n * K;
    c->n = n;
    c->calls = n_sh < 8 ? 8 : n_sh;
    int32_t *idx = malloc(sizeof(int32_t) * (size_t)(c->calls * nk));
    for (int j = 0; j < c->calls * nk; j++) idx[j] = -1;
    c->x = rf_rand(r, (size_t)n * dim * 2, 0x3F7F3F7Fu, 0);
    c->idx = rf_upload(r, idx, sizeof(int32_t) * (size_t)(c->calls * nk));
    c->wt = rf_take(r, sizeof(float) * (size_t)(c->calls * nk));
    c->scratch = rf_take(r, dsv4i_gpu_moe_scratch_bytes(&c->m[0], n));
    c->out = rf_take(r, (size_t)n * dim * 2);
    rf_row(r, "shared expert (fp8, 3 projections)", n, rf_time(r, rec_ours, c, c->calls),
           shared + 4.0 * n * dim, -1);
    free(idx);
    dsv4i_gpu_pool_reset(&r->g.pool, mark);
  }
  free(c);
  dsv4i_gpu_pool_reset(&r->g.pool, mark0);
}
