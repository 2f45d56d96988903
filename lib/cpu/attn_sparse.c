/*
 * Sparse attention with sink (spec §5.4 step 4, KCPU sparse_attn): online
 * softmax over consecutive 64-entry blocks of each token's index row (window
 * part, then compressed part), bf16 probabilities relative to the running
 * max, fp32 denominator, sink added after the last block.
 */
#include <math.h>
#include <stdlib.h>

#include "cpu/attn_impl.h"
#include "model/formats.h"

#define MAX_HD 1024

void dsv4i_attn_sparse(int32_t n_heads, int32_t hd, const uint16_t *q, const float *const *rows,
                       int32_t n_idx, const float *sink, float scale, uint16_t *o, int32_t h0,
                       int32_t h1) {
  (void)n_heads;
  float qh[MAX_HD], acc[MAX_HD], blk[MAX_HD], s[DSV4I_ATTN_BLOCK];
  for (int32_t h = h0; h < h1; h++) {
    const uint16_t *qb = q + (size_t)h * (size_t)hd;
    for (int32_t d = 0; d < hd; d++) {
      qh[d] = dsv4i_bf16_to_f32(qb[d]);
      acc[d] = 0.0f;
    }
    float m = -1e30f, sum = 0.0f;
    for (int32_t b0 = 0; b0 < n_idx; b0 += DSV4I_ATTN_BLOCK) {
      const int32_t b1 = b0 + DSV4I_ATTN_BLOCK < n_idx ? b0 + DSV4I_ATTN_BLOCK : n_idx;
      float bmax = -INFINITY;
      int any = 0;
      for (int32_t e = b0; e < b1; e++) {
        if (!rows[e]) continue;
        const float *kv = rows[e];
        float dot = 0.0f;
        for (int32_t d = 0; d < hd; d++) dot += qh[d] * kv[d];
        s[e - b0] = dot * scale;
        bmax = s[e - b0] > bmax ? s[e - b0] : bmax;
        any = 1;
      }
      if (!any) continue; /* an all-invalid block changes nothing (p = 0, f = 1) */
      const float mn = bmax > m ? bmax : m;
      const float f = expf(m - mn);
      float psum = 0.0f;
      for (int32_t d = 0; d < hd; d++) blk[d] = 0.0f;
      for (int32_t e = b0; e < b1; e++) {
        if (!rows[e]) continue;
        const float p = expf(s[e - b0] - mn);
        psum += p;
        const float pb = dsv4i_bf16_to_f32(dsv4i_f32_to_bf16(p));
        const float *kv = rows[e];
        for (int32_t d = 0; d < hd; d++) blk[d] += pb * kv[d];
      }
      sum = sum * f + psum;
      for (int32_t d = 0; d < hd; d++) acc[d] = acc[d] * f + blk[d];
      m = mn;
    }
    sum = sum + expf(sink[h] - m);
    uint16_t *ob = o + (size_t)h * (size_t)hd;
    for (int32_t d = 0; d < hd; d++) ob[d] = dsv4i_f32_to_bf16(acc[d] / sum);
  }
}

/* the index row of token t: window part then its compressed selection;
 * returns the row length. wp int64 [win], pr [win + nsel], cr float [nsel][hd]. */
static int32_t build_row(const attn_call *c, int32_t t, const float *rows, int64_t lo,
                         const int32_t *sel, int32_t nsel, int64_t *wp, const float **pr,
                         float *cr) {
  const dsv4i_attn_layer *L = c->L;
  const int32_t hd = L->head_dim;
  const int32_t w = dsv4i_attn_window_row(c->b->pos[t], c->b->layout[t], L->window, wp);
  for (int32_t e = 0; e < w; e++) pr[e] = wp[e] >= 0 ? rows + (size_t)(wp[e] - lo) * (size_t)hd : NULL;
  int32_t k = 0;
  if (nsel) {
    const int32_t *sr = sel + (size_t)t * (size_t)nsel;
    for (; k < nsel && sr[k] >= 0; k++) {
      float *row = cr + (size_t)k * (size_t)hd;
      dsv4i_kv_comp_decode(dsv4i_kv_rec(c->b->seq[t], DSV4I_KV_COMP, L->role.kv_source, sr[k]),
                           hd, row);
      pr[w + k] = row;
    }
  }
  return w + k;
}

dsv4_status dsv4i_attn_attend(const attn_call *c, const uint16_t *q, const uint16_t *kvw,
                        const int32_t *sel, int32_t sel_ld, uint16_t *o) {
  const dsv4i_attn_layer *L = c->L;
  const int32_t H = L->n_heads, hd = L->head_dim, win = L->window, n = c->n;
  const int32_t nsel = sel ? sel_ld : 0, width = win + nsel;
  const size_t qs = (size_t)H * (size_t)hd;
  if (hd > MAX_HD) return dsv4i_error(DSV4_ERR_UNSUPPORTED, "attention: head_dim %d", (int)hd);
  /* window rows of every run (decoded ring positions + this call's rows) */
  int64_t *lo = dsv4i_malloc((size_t)n * 2 * sizeof *lo, "window row offsets");
  if (!lo) return DSV4_ERR_OUT_OF_MEMORY;
  int64_t *off = lo + n, total = 0;
  for (int32_t r0 = 0; r0 < n; r0 = c->run1[r0]) {
    off[r0] = total;
    total += win - 1 + (c->run1[r0] - r0);
  }
  float *rows = dsv4i_malloc((size_t)total * (size_t)hd * sizeof *rows, "window rows");
  if (!rows) {
    free(lo);
    return DSV4_ERR_OUT_OF_MEMORY;
  }
  for (int32_t r0 = 0; r0 < n; r0 = c->run1[r0])
    lo[r0] = dsv4i_attn_window_rows(c, r0, c->run1[r0] - r0, kvw, rows + (size_t)off[r0] * (size_t)hd);
  dsv4_status st = DSV4_OK;
  if (n >= 2 * dsv4i_cpu_threads()) {
    /* many tokens: one token (all heads) per thread at a time */
    int failed = 0;
    DSV4I_AOMP(omp parallel)
    {
      int64_t *wp = DSV4I_FAULT() ? NULL : malloc((size_t)win * sizeof *wp);
      const float **pr = DSV4I_FAULT() ? NULL : malloc((size_t)width * sizeof *pr);
      float *cr = DSV4I_FAULT() ? NULL : malloc(((size_t)nsel * (size_t)hd + 1) * sizeof *cr);
      if (!wp || !pr || !cr) {
        DSV4I_AOMP(omp atomic write)
        failed = 1;
      }
      DSV4I_AOMP(omp for schedule(dynamic, 1))
      for (int32_t t = 0; t < n; t++) {
        if (!wp || !pr || !cr) continue;
        const int32_t r0 = c->run0[t];
        const int32_t ni = build_row(c, t, rows + (size_t)off[r0] * (size_t)hd, lo[r0], sel, nsel,
                                     wp, pr, cr);
        dsv4i_attn_sparse(H, hd, q + (size_t)t * qs, pr, ni, L->sink, L->softmax_scale,
                          o + (size_t)t * qs, 0, H);
      }
      free(wp);
      free(pr);
      free(cr);
    }
    if (failed) st = dsv4i_error(DSV4_ERR_OUT_OF_MEMORY, "attention: per-thread scratch");
  } else {
    /* few tokens (decode, verify): the heads of each token across threads */
    int64_t *wp = dsv4i_malloc((size_t)win * sizeof *wp, "window row");
    const float **pr = dsv4i_malloc((size_t)width * sizeof *pr, "index row");
    float *cr = dsv4i_malloc(((size_t)nsel * (size_t)hd + 1) * sizeof *cr, "compressed rows");
    if (!wp || !pr || !cr) st = DSV4_ERR_OUT_OF_MEMORY;
    for (int32_t t = 0; t < n && st == DSV4_OK; t++) {
      const int32_t r0 = c->run0[t];
      const int32_t ni = build_row(c, t, rows + (size_t)off[r0] * (size_t)hd, lo[r0], sel, nsel,
                                   wp, pr, cr);
      DSV4I_AOMP(omp parallel for schedule(static) if ((int64_t)H * ni * hd >= (1 << 17)))
      for (int32_t h = 0; h < H; h++)
        dsv4i_attn_sparse(H, hd, q + (size_t)t * qs, pr, ni, L->sink, L->softmax_scale,
                          o + (size_t)t * qs, h, h + 1);
    }
    free(wp);
    free((void *)pr);
    free(cr);
  }
  free(rows);
  free(lo);
  return st;
}
