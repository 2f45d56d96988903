/*
 * dsv4-roofline: sparse attention decode (window ring + top-k compressed
 * rows per query, dsv4i_gpu_attn_sparse) at batch 1..16, the indexer
 * (scores over the index keys + top-k), and the DSpark Markov step; stock
 * beside attention (gather rows to bf16, QKᵀ and PV by cuBLASLt per query,
 * a softmax kernel) and beside the Markov step (embedding gather, bias GEMM
 * by cuBLASLt, bias add, noise, two-pass argmax: the unfused chain).
 * Records: random codes in the cache formats (528 B window, or the 584 B
 * fp8_ds_mla window record; 288 B compressed, 68 B index key), in page
 * tables as the engine builds them. The attention kernels side by side: the
 * one-launch tiled kernel and the split pass + combine in the same (tiled)
 * order, whose bits are the same (the engine takes the one-launch kernel up
 * to DSV4I_GPU_ATTN_ONE_LAUNCH_MAX tokens), and the split pass in CPU order.
 */
#include <stdlib.h>
#include <string.h>

#include "model/config.h"
#include "rf.h"

enum { PAGE = 64 * 1024 };

/* A table of n_seq sequences of n_rec records each, sequence s on pages [s·ld, (s+1)·ld),
 * every 32-bit word of the pool (random & mask) | bits. */
static dsv4i_gpu_kvtab table_fill(rf *r, int n_seq, int64_t n_rec, int rec_bytes, int ring,
                                  unsigned int mask, unsigned int bits) {
  const int rpp = PAGE / rec_bytes;
  const int ld = (int)(((ring ? ring : n_rec) + rpp - 1) / rpp);
  int32_t *pages = malloc(sizeof(int32_t) * (size_t)n_seq * (size_t)ld);
  for (int64_t i = 0; i < (int64_t)n_seq * ld; i++) pages[i] = (int32_t)i;
  dsv4i_gpu_kvtab t = {rf_rand(r, (size_t)n_seq * ld * PAGE, mask, bits),
                       rf_upload(r, pages, sizeof(int32_t) * (size_t)n_seq * (size_t)ld), PAGE,
                       ld, rpp, rec_bytes, ring};
  free(pages);
  return t;
}

static dsv4i_gpu_kvtab table(rf *r, int n_seq, int64_t n_rec, int rec_bytes, int ring) {
  return table_fill(r, n_seq, n_rec, rec_bytes, ring, 0x3F3F3F3Fu, 0);
}

/* Token records of `calls` calls of n decode tokens: call c, token t -> sequence c·n + t. */
static dsv4i_cuptr tokens(rf *r, int calls, int n, int32_t pos) {
  dsv4i_gpu_attn_tok *t = calloc((size_t)calls * n, sizeof *t);
  for (int i = 0; i < calls * n; i++)
    t[i] = (dsv4i_gpu_attn_tok){i, pos, pos, i % n, pos, 0, {0, 0}};
  dsv4i_cuptr p = rf_upload(r, t, sizeof *t * (size_t)calls * n);
  free(t);
  return p;
}

/* ---- sparse attention ---------------------------------------------------------- */

typedef struct attn_case {
  const dsv4i_gpu_attn_kernels *ak;
  dsv4i_gpu_sparse_args a;
  int calls, rows;
  dsv4i_cuptr tok, q, kvw, o; /* per call: tok [n], q/o [n][H][hd], kvw [n][hd] */
  dsv4i_cuptr K, Kt, S, P, O; /* stock scratch */
} attn_case;

static dsv4i_gpu_sparse_args call_args(const attn_case *c, int i) {
  dsv4i_gpu_sparse_args a = c->a;
  const size_t qb = (size_t)a.n * a.n_heads * a.head_dim * 2;
  a.tok = c->tok + (dsv4i_cuptr)i * a.n * sizeof(dsv4i_gpu_attn_tok);
  a.q = c->q + (dsv4i_cuptr)i * qb, a.o = c->o + (dsv4i_cuptr)i * qb;
  a.kvw = c->kvw + (dsv4i_cuptr)i * a.n * a.head_dim * 2;
  return a;
}

static dsv4_status rec_attn(rf *r, void *u, int i, dsv4i_custream s) {
  (void)r;
  const attn_case *c = u;
  const dsv4i_gpu_sparse_args a = call_args(c, i);
  return dsv4i_gpu_attn_sparse(c->ak, s, &a);
}

static dsv4_status rec_attn_stock(rf *r, void *u, int i, dsv4i_custream s) {
  attn_case *c = u;
  dsv4i_gpu_sparse_args a = call_args(c, i);
  const int n = a.n, H = a.n_heads, hd = a.head_dim, rows = c->rows;
  void *g[] = {&a.win, &a.comp, &a.tok, &a.kvw, &a.sel, &a.sel_ld, &a.window, &a.head_dim,
               &c->rows, &c->K, &c->Kt};
  rf_launch(r, r->k_gather_kv, (unsigned)rows, (unsigned)n, (unsigned)hd / 4, g, s);
  dsv4_status st = DSV4_OK;
  for (int t = 0; t < n && !st; t++) /* S_t [H][rows] = Q_t · K_tᵀ */
    st = rf_gemm(r, s, H, rows, hd, a.q + (dsv4i_cuptr)t * H * hd * 2, hd,
                 c->K + (dsv4i_cuptr)t * rows * hd * 2, hd, c->S + (dsv4i_cuptr)t * H * rows * 4,
                 rows);
  void *sm[] = {&c->S, (void *)&rows, (void *)&H, &a.sink, &a.scale, &c->P};
  rf_launch(r, r->k_softmax_sink, (unsigned)(n * H), 1, 256, sm, s);
  for (int t = 0; t < n && !st; t++) /* O_t [H][hd] = P_t · (Kt_t)ᵀ */
    st = rf_gemm(r, s, H, hd, rows, c->P + (dsv4i_cuptr)t * H * rows * 2, rows,
                 c->Kt + (dsv4i_cuptr)t * hd * rows * 2, rows, c->O + (dsv4i_cuptr)t * H * hd * 4,
                 hd);
  return st;
}

/* One kernel (0: the one-launch tiled kernel; 1: the split pass in the tiled order +
 * the combine; 2: the split pass in CPU order + the combine) over one window record
 * format (ds_mla: fp8_ds_mla) at batch 1..16; the stock path beside the first. */
static void sparse_attention(rf *r, int kind, int ds_mla, int stock) {
  const dsv4i_config *cf = &r->cfg;
  const int H = cf->n_heads, hd = cf->head_dim, win = cf->window_size, topk = cf->index_topk;
  const int comp_rec = 4 * topk; /* records per sequence; the selection takes every 4th */
  const int32_t pos = 4 * comp_rec * 2 - 1;
  const int wrec = (int)dsv4i_kv_record_bytes(cf, ds_mla ? DSV4I_KVREC_WINDOW_DS_MLA
                                                          : DSV4I_KVREC_WINDOW);
  dsv4i_gpu_attn_kernels ak = r->ak;
  ak.cpu_order = kind == 2;
  ak.one_launch_max = kind == 0 ? INT32_MAX : 0;
  ak.win_nope = ds_mla ? hd - cf->rope_head_dim : 0;
  char name[64];
  snprintf(name, sizeof name, "sparse attn %d rows %s %dB", win + topk,
           kind == 0 ? "1-launch" : kind == 1 ? "split" : "split cpu", wrec);
  const int bs[] = {1, 2, 4, 8, 16};
  for (int q = 0; q < 5; q++) {
    const size_t mark = dsv4i_gpu_pool_mark(&r->g.pool);
    const int n = bs[q];
    attn_case c;
    memset(&c, 0, sizeof c);
    const double per_q = (double)(win - 1) * wrec + (double)topk * 288 + 2.0 * H * hd * 2 +
                         (double)hd * 2 + (double)topk * 4; /* records, q, o, own row, sel */
    c.calls = rf_copies(r, per_q * n, 256);
    if (c.calls < 8) c.calls = 8;
    const int n_seq = c.calls * n;
    int32_t *sel = malloc(sizeof(int32_t) * (size_t)n * topk);
    for (int t = 0; t < n; t++)
      for (int j = 0; j < topk; j++) sel[t * topk + j] = 4 * j + (t & 3);
    c.rows = win + topk;
    c.ak = &ak;
    c.a = (dsv4i_gpu_sparse_args){.win = table(r, n_seq, 0, wrec, win + 6),
                                  .comp = table(r, n_seq, comp_rec, 288, 0),
                                  .n = n, .n_heads = H, .head_dim = hd, .window = win,
                                  .sel = rf_upload(r, sel, sizeof(int32_t) * (size_t)n * topk),
                                  .sel_ld = topk, .scale = 1.0f / 22.627417f,
                                  .sink = rf_rand(r, sizeof(float) * (size_t)H, 0, 0)};
    c.a.ws_bytes = dsv4i_gpu_attn_sparse_ws(H, hd, win, topk, n);
    c.a.ws = rf_take(r, c.a.ws_bytes);
    free(sel);
    c.tok = tokens(r, c.calls, n, pos);
    c.q = rf_rand(r, (size_t)n_seq * H * hd * 2, 0x3F7F3F7Fu, 0);
    c.o = rf_take(r, (size_t)n_seq * H * hd * 2);
    c.kvw = rf_rand(r, (size_t)n_seq * hd * 2, 0x3F7F3F7Fu, 0);
    const double us = rf_time(r, rec_attn, &c, c.calls);
    double st = -1;
    if (r->lt.handle && stock) {
      c.K = rf_take(r, (size_t)n * c.rows * hd * 2), c.Kt = rf_take(r, (size_t)n * c.rows * hd * 2);
      c.S = rf_take(r, (size_t)n * H * c.rows * 4), c.P = rf_take(r, (size_t)n * H * c.rows * 2);
      c.O = rf_take(r, (size_t)n * H * hd * 4);
      st = rf_time(r, rec_attn_stock, &c, c.calls);
    }
    rf_row(r, name, n, us, per_q * n, st);
    dsv4i_gpu_pool_reset(&r->g.pool, mark);
  }
}

/* ---- indexer ---------------------------------------------------------------------- */

typedef struct idx_case {
  dsv4i_gpu_index_args a;
  int calls, k_max;
  dsv4i_cuptr tok, q, w, out, ws; /* ws: the split top-k's workspace */
  size_t ws_bytes;
} idx_case;

static dsv4_status rec_index(rf *r, void *u, int i, dsv4i_custream s) {
  idx_case *c = u;
  dsv4i_gpu_index_args a = c->a;
  a.tok = c->tok + (dsv4i_cuptr)i * a.n * sizeof(dsv4i_gpu_attn_tok);
  a.q = c->q + (dsv4i_cuptr)i * a.n * a.n_heads * a.head_dim * 2;
  a.w = c->w + (dsv4i_cuptr)i * a.n * a.n_heads * 2;
  dsv4_status st = dsv4i_gpu_attn_index_scores(&r->ak, s, &a);
  return st ? st : dsv4i_gpu_attn_topk(&r->ak, s, a.tok, a.n, a.ratio, a.scores, a.score_ld,
                                       c->k_max, c->out, c->k_max, c->ws, c->ws_bytes);
}

static void indexer(rf *r) {
  const dsv4i_config *cf = &r->cfg;
  const int IH = cf->index_n_heads, ihd = cf->index_head_dim, keys = 65536;
  int ratio = 0;
  for (int i = 0; i < cf->n_index_sources && !ratio; i++)
    ratio = cf->compress_ratios[cf->index_sources[i]];
  if (ratio <= 0) ratio = 4;
  char name[64];
  snprintf(name, sizeof name, "indexer %dK keys + top-%d", keys / 1024, (int)cf->index_topk);
  rf_table_head("indexer decode: scores over the 68 B index keys (ratio of the first index "
                "source), then top-k");
  const int bs[] = {1, 4, 8, 16};
  for (int q = 0; q < 4; q++) {
    const size_t mark = dsv4i_gpu_pool_mark(&r->g.pool);
    const int n = bs[q];
    idx_case c;
    memset(&c, 0, sizeof c);
    const double per_q = (double)keys * 68 + (double)IH * ihd * 2 + IH * 2.0 + cf->index_topk * 4.0;
    c.calls = rf_copies(r, per_q * n, 64);
    if (c.calls < 8) c.calls = 8;
    const int n_seq = c.calls * n;
    c.k_max = cf->index_topk;
    c.tok = tokens(r, c.calls, n, keys * ratio - 1);
    /* queries of either sign in [2^-3, 2): a head's four 32-blocks within a few binades, as
     * a RoPE'd query row has them (uniform random bits would spread them over 60) */
    c.q = rf_rand(r, (size_t)n_seq * IH * ihd * 2, 0x81FF81FFu, 0x3E003E00u);
    c.w = rf_rand(r, (size_t)n_seq * IH * 2, 0x3F7F3F7Fu, 0);
    c.out = rf_take(r, sizeof(int32_t) * (size_t)n * c.k_max);
    c.ws_bytes = dsv4i_gpu_attn_topk_ws_bytes(n, keys, c.k_max);
    c.ws = c.ws_bytes ? rf_take(r, c.ws_bytes) : 0;
    /* every byte 0x7C..0x7F: UE8M0 scales 2^-3..2^0 as an encoded key row has (its four
     * blocks within a few binades: the scores' mma path); codes of both signs */
    c.a = (dsv4i_gpu_index_args){.idxk = table_fill(r, n_seq, keys, 68, 0, 0x03030303u, 0x7C7C7C7Cu),
                                 .n = n, .n_heads = IH,
                                 .head_dim = ihd, .ratio = ratio,
                                 .wscale = 1.0f / 64.0f,
                                 .scores = rf_take(r, sizeof(float) * (size_t)n * keys),
                                 .score_ld = keys};
    rf_row(r, name, n, rf_time(r, rec_index, &c, c.calls), per_q * n, -1);
    dsv4i_gpu_pool_reset(&r->g.pool, mark);
  }
}

void rf_attn(rf *r) {
  rf_table_head("sparse attention decode: window ring + top-k compressed rows per query; "
                "default mode: the one-launch kernel and the split pass + combine (the same "
                "bits), CPU order: the split pass + combine; native 528 B and fp8_ds_mla 584 B "
                "window records (stock: gather to bf16, cuBLASLt QK^T and PV per query, softmax "
                "kernel)");
  sparse_attention(r, 0, 0, 1);
  sparse_attention(r, 1, 0, 0);
  sparse_attention(r, 2, 0, 0);
  sparse_attention(r, 0, 1, 0);
  sparse_attention(r, 1, 1, 0);
  indexer(r);
}

/* ---- Markov step ---------------------------------------------------------------- */

typedef struct mk_case {
  dsv4i_gpu_markov_args a;
  dsv4i_cuptr e, bias, noisy, pv, pi;
  int n_blk;
} mk_case;

static dsv4_status rec_markov(rf *r, void *u, int i, dsv4i_custream s) {
  mk_case *c = u;
  return dsv4i_gpu_dspark_markov(&r->dk, s, &c->a, i % c->a.block);
}

static dsv4_status rec_markov_stock(rf *r, void *u, int i, dsv4i_custream s) {
  mk_case *c = u;
  const dsv4i_gpu_markov_args *a = &c->a;
  int k = i % a->block, ld = a->block + 1, R = a->rank, V = a->vocab;
  long long ld_seq = (long long)a->block * V;
  dsv4i_cuptr row = a->logits + (dsv4i_cuptr)k * V * 4;
  int col1 = k + 1;
  void *g[] = {(void *)&a->embed, (void *)&a->toks, &ld, &k, &R, &c->e};
  rf_launch(r, r->k_gather_embed, (unsigned)a->n, 1, 256, g, s);
  dsv4_status st = rf_gemm(r, s, a->n, V, R, c->e, R, a->head, R, c->bias, V);
  void *ab[] = {&row, &ld_seq, &c->bias, &V};
  rf_launch(r, r->k_add_bias, 128, (unsigned)a->n, 256, ab, s);
  void *nz[] = {&row, &ld_seq, &V, (void *)&a->temp, (void *)&a->seed, (void *)&a->counter,
                &c->noisy};
  rf_launch(r, r->k_noise, 128, (unsigned)a->n, 256, nz, s);
  void *ap[] = {&c->noisy, &V, &c->pv, &c->pi};
  rf_launch(r, r->k_argmax_part, (unsigned)c->n_blk, (unsigned)a->n, 256, ap, s);
  void *af[] = {&c->pv, &c->pi, &c->n_blk, (void *)&a->toks, &ld, &col1};
  rf_launch(r, r->k_argmax_final, (unsigned)a->n, 1, 32, af, s);
  return st;
}

void rf_markov(rf *r) {
  const dsv4i_config *cf = &r->cfg;
  const int V = cf->vocab_size, R = cf->dspark_markov_rank, B = cf->dspark_block_size;
  rf_table_head("DSpark Markov step, temperature 1 (bias GEMV + noise + argmax + next embedding; "
                "stock: the unfused chain, 6 launches)");
  const size_t mark0 = dsv4i_gpu_pool_mark(&r->g.pool);
  /* bf16 of either sign in [2^-15, 2) (exponent fields 112..127), a trained table's range:
   * uniformly random exponents (down to 2^-127) would put nearly every 32-value piece of
   * the head outside the kernel's fmaf range and measure only its separate-op path */
  const dsv4i_cuptr embed = rf_rand(r, (size_t)V * R * 2, 0x87FF87FFu, 0x38003800u);
  const dsv4i_cuptr head = rf_rand(r, (size_t)V * R * 2, 0x87FF87FFu, 0x38003800u);
  const int bs[] = {1, 4, 8, 16};
  for (int q = 0; q < 4; q++) {
    const size_t mark = dsv4i_gpu_pool_mark(&r->g.pool);
    const int n = bs[q];
    float *temp = malloc(sizeof(float) * (size_t)n);
    uint64_t *seed = malloc(sizeof(uint64_t) * (size_t)n);
    int32_t *n_valid = malloc(sizeof(int32_t) * (size_t)n);
    for (int i = 0; i < n; i++) temp[i] = 1.0f, seed[i] = 1000u + (uint64_t)i, n_valid[i] = V;
    mk_case c;
    memset(&c, 0, sizeof c);
    c.a = (dsv4i_gpu_markov_args){
        .n = n, .block = B, .vocab = V, .rank = R,
        .toks = rf_take(r, sizeof(int32_t) * (size_t)n * (B + 1)),
        .logits = rf_rand(r, sizeof(float) * (size_t)n * B * V, 0x3FFFFFFFu, 0),
        .embed = embed, .head = head, .temp = rf_upload(r, temp, sizeof(float) * (size_t)n),
        .seed = rf_upload(r, seed, sizeof(uint64_t) * (size_t)n),
        .counter = rf_upload(r, seed, sizeof(uint64_t) * (size_t)n),
        .n_valid = rf_upload(r, n_valid, sizeof(int32_t) * (size_t)n),
        .part = rf_take(r, dsv4i_gpu_dspark_markov_scratch(n, V, R)),
        .ticket = rf_take(r, sizeof(uint32_t))};
    r->g.dev.cu->MemsetD8Async(c.a.toks, 0, sizeof(int32_t) * (size_t)n * (B + 1), r->g.stream);
    r->g.dev.cu->MemsetD8Async(c.a.ticket, 0, sizeof(uint32_t), r->g.stream);
    free(temp), free(seed), free(n_valid);
    /* the head once, each sequence's logits row read and written, its embedding row */
    const double bytes = (double)V * R * 2 + (double)n * (8.0 * V + 2.0 * R);
    const double us = rf_time(r, rec_markov, &c, 2 * B);
    double st = -1;
    if (r->lt.handle) {
      c.n_blk = 128;
      c.e = rf_take(r, (size_t)n * R * 2), c.bias = rf_take(r, sizeof(float) * (size_t)n * V);
      c.noisy = rf_take(r, sizeof(float) * (size_t)n * V);
      c.pv = rf_take(r, sizeof(float) * (size_t)n * c.n_blk);
      c.pi = rf_take(r, sizeof(int32_t) * (size_t)n * c.n_blk);
      st = rf_time(r, rec_markov_stock, &c, 2 * B);
    }
    rf_row(r, "markov step (one launch)", n, us, bytes, st);
    dsv4i_gpu_pool_reset(&r->g.pool, mark);
  }
  dsv4i_gpu_pool_reset(&r->g.pool, mark0);
}
