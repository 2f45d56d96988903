/*
 * DSpark stage attention (spec §6.1, reference DSparkAttention): the stage's
 * window ring holds main_kv = kv_norm(wkv(main_x)) per target position; a
 * draft block's queries attend, bidirectionally, to the ring slots in slot
 * order and to every row of the block, whose own KV is never stored.
 */
#include <stdlib.h>

#include "cpu/attn_impl.h"
#include "model/formats.h"

static dsv4_status check_stage(const dsv4i_attn_layer *L, int32_t n, dsv4i_kv_view *const *seq,
                               const int64_t *pos, const char *what) {
  if (!L || n < 0 || (n > 0 && (!seq || !pos)) || L->ratio != 0)
    return dsv4i_error(DSV4_ERR_INVALID_ARG, "%s: bad arguments (layer %d)", what,
                       L ? (int)L->layer : -1);
  for (int32_t t = 0; t < n; t++)
    if (!seq[t] || seq[t]->lay->n_layers <= L->layer || seq[t]->lay->window != L->window ||
        seq[t]->lay->head_dim != L->head_dim || seq[t]->lay->rope_dim != L->rope_dim ||
        seq[t]->lay->window_format != seq[0]->lay->window_format || pos[t] < 0 || pos[t] >= seq[t]->end || pos[t] >= (INT64_C(1) << 24))
      return dsv4i_error(DSV4_ERR_INVALID_ARG, "%s: entry %d: position %lld outside the "
                         "sequence's reserved range", what, (int)t, (long long)pos[t]);
  return DSV4_OK;
}

dsv4_status dsv4i_attn_dspark_store(const dsv4i_attn_layer *L, int32_t n,
                                    dsv4i_kv_view *const *seq, const int64_t *pos,
                                    const uint16_t *main_x) {
  dsv4_status st = check_stage(L, n, seq, pos, "dspark_store");
  if (st != DSV4_OK || n == 0) return st;
  if (!main_x) return dsv4i_error(DSV4_ERR_INVALID_ARG, "dspark_store: NULL main_x");
  const int32_t hd = L->head_dim;
  attn_call c = {.L = L, .lay = seq[0]->lay, .n = n};
  c.cs = dsv4i_malloc((size_t)n * (size_t)L->n_freq * 2 * sizeof(float), "dspark rope");
  uint16_t *kv = dsv4i_malloc((size_t)n * (size_t)hd * 2 * sizeof *kv, "dspark main_kv");
  st = (c.cs && kv) ? DSV4_OK : DSV4_ERR_OUT_OF_MEMORY;
  if (st == DSV4_OK) st = dsv4i_rope_cs(L->freqs, L->n_freq, n, pos, c.cs);
  if (st == DSV4_OK) st = dsv4i_attn_window_kv(&c, main_x, kv, kv + (size_t)n * (size_t)hd);
  /* later entries win if two share a slot (as the reference's sequential writes) */
  if (st == DSV4_OK)
    for (int32_t t = 0; t < n; t++)
      dsv4i_kv_window_put(seq[t]->lay, kv + (size_t)t * (size_t)hd,
                          dsv4i_kv_rec(seq[t], DSV4I_KV_WINDOW, L->layer, pos[t]));
  free(c.cs);
  free(kv);
  return st;
}

dsv4_status dsv4i_attn_dspark(const dsv4i_attn_layer *L, int32_t n_blk, dsv4i_kv_view *const *seq,
                              const int64_t *anchor, int32_t block, const uint16_t *x,
                              uint16_t *out) {
  dsv4_status st = check_stage(L, n_blk, seq, anchor, "dspark attention");
  if (st != DSV4_OK || n_blk == 0) return st;
  if (block <= 0 || !x || !out)
    return dsv4i_error(DSV4_ERR_INVALID_ARG, "dspark attention: block %d", (int)block);
  const int32_t H = L->n_heads, hd = L->head_dim, rd = L->rope_dim, win = L->window;
  const int32_t n = n_blk * block, width = win + block;
  const size_t qs = (size_t)H * (size_t)hd;
  attn_call c = {.L = L, .lay = seq[0]->lay, .n = n};
  int64_t *pos = dsv4i_malloc((size_t)n * sizeof *pos, "dspark positions");
  c.cs = dsv4i_malloc((size_t)n * (size_t)L->n_freq * 2 * sizeof(float), "dspark rope");
  uint16_t *qr = dsv4i_malloc((size_t)n * (size_t)L->q_lora * sizeof *qr, "dspark qr");
  uint16_t *q = dsv4i_malloc((size_t)n * qs * sizeof *q, "dspark q");
  uint16_t *o = dsv4i_malloc((size_t)n * qs * sizeof *o, "dspark o");
  uint16_t *kv = dsv4i_malloc((size_t)n * (size_t)hd * 2 * sizeof *kv, "dspark kv");
  float *rows = dsv4i_malloc((size_t)n_blk * (size_t)width * (size_t)hd * sizeof *rows, "dspark rows");
  const float **ptr = dsv4i_malloc((size_t)n_blk * (size_t)width * sizeof *ptr, "dspark row");
  st = (pos && c.cs && qr && q && o && kv && rows && ptr) ? DSV4_OK : DSV4_ERR_OUT_OF_MEMORY;
  if (st != DSV4_OK) goto done;
  /* block token j of entry b sits at position anchor[b] + 1 + j */
  for (int32_t b = 0; b < n_blk; b++)
    for (int32_t j = 0; j < block; j++) pos[b * block + j] = anchor[b] + 1 + j;
  uint16_t *kvw = kv + (size_t)n * (size_t)hd;
  st = dsv4i_rope_cs(L->freqs, L->n_freq, n, pos, c.cs);
  if (st == DSV4_OK) st = dsv4i_cpu_linear(&L->wq_a, n, x, L->dim, qr, L->q_lora);
  if (st == DSV4_OK) st = dsv4i_cpu_rmsnorm(n, L->q_lora, qr, L->q_lora, L->q_norm, L->eps, qr, L->q_lora);
  if (st == DSV4_OK) st = dsv4i_cpu_linear(&L->wq_b, n, qr, L->q_lora, q, (int64_t)qs);
  if (st == DSV4_OK) st = dsv4i_cpu_rope(n, H, L->n_freq, q + (hd - rd), (int64_t)qs, hd, c.cs, 0);
  if (st == DSV4_OK) st = dsv4i_attn_window_kv(&c, x, kv, kvw);
  if (st != DSV4_OK) goto done;
  /* index row: the reference ring's slots 0 .. min(win, i+1) - 1 in slot order
   * (slot s holds the newest position <= i congruent to s), then the block */
  for (int32_t b = 0; b < n_blk; b++) {
    const int64_t i = anchor[b];
    const int32_t nr = i + 1 < win ? (int32_t)(i + 1) : win;
    float *rb = rows + (size_t)b * (size_t)width * (size_t)hd;
    const float **pb = ptr + (size_t)b * (size_t)width;
    for (int32_t s = 0; s < nr; s++) {
      const int64_t p = i - ((i - s) % win);
      dsv4i_kv_window_get(seq[b]->lay, dsv4i_kv_rec(seq[b], DSV4I_KV_WINDOW, L->layer, p),
                          rb + (size_t)s * (size_t)hd);
      pb[s] = rb + (size_t)s * (size_t)hd;
    }
    for (int32_t j = 0; j < block; j++) {
      float *r = rb + (size_t)(nr + j) * (size_t)hd;
      const uint16_t *src = kvw + (size_t)(b * block + j) * (size_t)hd;
      for (int32_t d = 0; d < hd; d++) r[d] = dsv4i_bf16_to_f32(src[d]);
      pb[nr + j] = r;
    }
  }
  DSV4I_AOMP(omp parallel for schedule(static) if ((int64_t)n * H * width * hd >= (1 << 17)))
  for (int32_t th = 0; th < n * H; th++) {
    const int32_t t = th / H, h = th % H, b = t / block;
    const int64_t i = anchor[b];
    const int32_t nr = i + 1 < win ? (int32_t)(i + 1) : win;
    dsv4i_attn_sparse(H, hd, q + (size_t)t * qs, ptr + (size_t)b * (size_t)width, nr + block,
                      L->sink, L->softmax_scale, o + (size_t)t * qs, h, h + 1);
  }
  st = dsv4i_attn_output(&c, o, out);
done:
  free(pos);
  free(c.cs);
  free(qr);
  free(q);
  free(o);
  free(kv);
  free(rows);
  free((void *)ptr);
  return st;
}
