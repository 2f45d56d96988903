/*
 * Window KV (spec §5.4 step 2): the QDQ'd post-RoPE latent of each token
 * (MXFP8, or fp8_ds_mla by the engine's KV format), the window part of the
 * index row, and the ring of window records.
 */
#include "cpu/attn_impl.h"
#include "model/formats.h"

dsv4_status dsv4i_attn_window_kv(const attn_call *c, const uint16_t *x, uint16_t *kv, uint16_t *kvw) {
  const dsv4i_attn_layer *L = c->L;
  const int32_t hd = L->head_dim, rd = L->rope_dim;
  dsv4_status st = dsv4i_cpu_linear(&L->wkv, c->n, x, L->dim, kv, hd);
  if (st == DSV4_OK) st = dsv4i_cpu_rmsnorm(c->n, hd, kv, hd, L->kv_norm, L->eps, kv, hd);
  if (st == DSV4_OK) st = dsv4i_cpu_rope(c->n, 1, L->n_freq, kv + (hd - rd), hd, 0, c->cs, 0);
  if (st == DSV4_OK) dsv4i_kv_window_qdq(c->lay, kv, c->n, kvw);
  return st;
}

int32_t dsv4i_attn_window_row(int64_t pos, int32_t layout, int32_t window, int64_t *out) {
  if (layout == DSV4I_ATTN_DECODE) {
    /* ring slots oldest first: slot (pos + 1 + i) mod window holds pos − window + 1 + i */
    for (int32_t i = 0; i < window; i++) {
      const int64_t q = pos - window + 1 + i;
      out[i] = q >= 0 ? q : -1;
    }
    return window;
  }
  const int64_t lo = pos - window + 1 > 0 ? pos - window + 1 : 0;
  for (int32_t i = 0; i < layout; i++) out[i] = lo + i <= pos ? lo + i : -1;
  return layout;
}

int64_t dsv4i_attn_window_rows(const attn_call *c, int32_t r0, int32_t len, const uint16_t *kvw,
                         float *rows) {
  const dsv4i_attn_layer *L = c->L;
  const int32_t hd = L->head_dim;
  const int64_t first = c->b->pos[r0];
  const int64_t lo = first - L->window + 1 > 0 ? first - L->window + 1 : 0;
  const dsv4i_kv_view *s = c->b->seq[r0];
  DSV4I_AOMP(omp parallel for schedule(static) if ((first - lo + len) * hd >= (1 << 16)))
  for (int64_t q = lo; q < first + len; q++) {
    float *row = rows + (size_t)(q - lo) * (size_t)hd;
    if (q < first) {
      dsv4i_kv_window_get(s->lay, dsv4i_kv_rec(s, DSV4I_KV_WINDOW, L->layer, q), row);
    } else {
      const uint16_t *src = kvw + (size_t)(r0 + (q - first)) * (size_t)hd;
      for (int32_t d = 0; d < hd; d++) row[d] = dsv4i_bf16_to_f32(src[d]);
    }
  }
  return lo;
}

void dsv4i_attn_window_store(const attn_call *c, const uint16_t *kv) {
  const dsv4i_attn_layer *L = c->L;
  const int32_t hd = L->head_dim;
  DSV4I_AOMP(omp parallel for schedule(static) if ((int64_t)c->n * hd >= (1 << 16)))
  for (int32_t t = 0; t < c->n; t++) {
    const dsv4i_kv_view *s = c->b->seq[t];
    /* a run longer than the ring: only its last ring_slots positions survive
     * (skipping the others also keeps two threads off one slot) */
    const int64_t last = c->b->pos[c->run1[t] - 1];
    if (c->b->pos[t] <= last - s->lay->ring_slots) continue;
    dsv4i_kv_window_put(s->lay, kv + (size_t)t * (size_t)hd,
                        dsv4i_kv_rec(s, DSV4I_KV_WINDOW, L->layer, c->b->pos[t]));
  }
}
