/*
 * Compressor of a KV-source layer (spec §5.4 3a) and the store of the
 * compressed KV (3c).
 *
 * Ratio 1: latent = norm(wkv(x)), a bf16 GEMM, one latent per token.
 * Ratio r > 1: k = wkv(x), g = wgate(x) in fp32 (the weights upcast); group
 * j = positions j·r .. j·r + r − 1 is pooled when its last token arrives:
 * latent[d] = Σ_m k_m[d] · softmax_m(g[·][d]) in fp32 (torch's non-last-dim
 * softmax: max, exp(g − max), sum from 0 in member order, then a division),
 * cast to bf16, then norm. Members at positions before this call come from
 * the CSTATE ring, the others from this call: the reference's kv_state /
 * score_state carried across calls, recovered exactly after a truncation.
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "cpu/attn_impl.h"
#include "model/formats.h"

void dsv4i_attn_pool_group(int32_t r, int32_t hd, const float *const *k, const float *const *g,
                           uint16_t *out) {
  for (int32_t d = 0; d < hd; d++) {
    float mx = g[0][d];
    for (int32_t m = 1; m < r; m++) mx = g[m][d] > mx ? g[m][d] : mx;
    float e[8], sum = 0.0f;
    for (int32_t m = 0; m < r; m++) {
      e[m] = expf(g[m][d] - mx);
      sum += e[m];
    }
    float acc = 0.0f;
    for (int32_t m = 0; m < r; m++) acc += k[m][d] * (e[m] / sum);
    out[d] = dsv4i_f32_to_bf16(acc);
  }
}

dsv4_status dsv4i_attn_compress(attn_call *c, const uint16_t *x, uint16_t *lat) {
  const dsv4i_attn_layer *L = c->L;
  const int32_t hd = L->head_dim, r = L->ratio, n = c->n, layer = L->layer;
  c->n_emit = 0;
  for (int32_t t = 0; t < n; t++)
    if ((c->b->pos[t] + 1) % r == 0) c->emit_tok[c->n_emit++] = t;
  dsv4_status st;
  if (r == 1) {
    st = dsv4i_cpu_linear(&L->c_wkv, n, x, L->dim, lat, hd);
    if (st == DSV4_OK) st = dsv4i_cpu_rmsnorm(n, hd, lat, hd, L->c_norm, L->eps, lat, hd);
    return st;
  }
  if (r > 8) return dsv4i_error(DSV4_ERR_UNSUPPORTED, "compressor: ratio %d > 8", (int)r);
  float *kk = dsv4i_malloc((size_t)n * (size_t)hd * 2 * sizeof(float), "compressor k/g");
  if (!kk) return DSV4_ERR_OUT_OF_MEMORY;
  float *gg = kk + (size_t)n * (size_t)hd;
  st = dsv4i_cpu_linear_f32(&L->c_wkv, n, x, L->dim, kk, hd);
  if (st == DSV4_OK) st = dsv4i_cpu_linear_f32(&L->c_wgate, n, x, L->dim, gg, hd);
  if (st != DSV4_OK) {
    free(kk);
    return st;
  }
  DSV4I_AOMP(omp parallel for schedule(static) if ((int64_t)c->n_emit * hd >= (1 << 14)))
  for (int32_t e = 0; e < c->n_emit; e++) {
    const int32_t t = c->emit_tok[e];
    const int64_t p = c->b->pos[t], first = attn_first_pos(c, t);
    const float *km[8], *gm[8];
    for (int32_t m = 0; m < r; m++) {
      const int64_t q = p - (r - 1) + m; /* member position */
      if (q >= first) {
        const size_t row = (size_t)(t - (p - q)) * (size_t)hd;
        km[m] = kk + row;
        gm[m] = gg + row;
      } else {
        const float *rec =
            (const float *)(const void *)dsv4i_kv_rec(c->b->seq[t], DSV4I_KV_CSTATE, layer, q);
        km[m] = rec;
        gm[m] = rec + hd;
      }
    }
    dsv4i_attn_pool_group(r, hd, km, gm, lat + (size_t)e * (size_t)hd);
  }
  st = dsv4i_cpu_rmsnorm(c->n_emit, hd, lat, hd, L->c_norm, L->eps, lat, hd);
  /* every token's (k, g) into the CSTATE ring, after the reads above; a run
   * longer than the ring keeps its last state_slots positions */
  DSV4I_AOMP(omp parallel for schedule(static) if ((int64_t)n * hd >= (1 << 17)))
  for (int32_t t = 0; t < n; t++) {
    const int64_t last = c->b->pos[c->run1[t] - 1];
    if (c->b->pos[t] <= last - c->b->seq[t]->lay->state_slots[layer]) continue;
    float *rec = (float *)(void *)dsv4i_kv_rec(c->b->seq[t], DSV4I_KV_CSTATE, layer,
                                               c->b->pos[t]);
    memcpy(rec, kk + (size_t)t * (size_t)hd, (size_t)hd * sizeof(float));
    memcpy(rec + hd, gg + (size_t)t * (size_t)hd, (size_t)hd * sizeof(float));
  }
  free(kk);
  return st;
}

dsv4_status dsv4i_attn_comp_store(const attn_call *c, uint16_t *lat) {
  const dsv4i_attn_layer *L = c->L;
  const int32_t hd = L->head_dim, rd = L->rope_dim, r = L->ratio, ne = c->n_emit;
  if (ne == 0) return DSV4_OK;
  /* RoPE at each group's first position j·r */
  int64_t *gpos = dsv4i_malloc((size_t)ne * sizeof *gpos, "group positions");
  float *cs = dsv4i_malloc((size_t)ne * (size_t)L->n_freq * 2 * sizeof *cs, "group rope");
  dsv4_status st = (gpos && cs) ? DSV4_OK : DSV4_ERR_OUT_OF_MEMORY;
  if (st == DSV4_OK) {
    for (int32_t e = 0; e < ne; e++) gpos[e] = (c->b->pos[c->emit_tok[e]] + 1 - r);
    st = dsv4i_rope_cs(L->freqs, L->n_freq, ne, gpos, cs);
  }
  if (st == DSV4_OK) st = dsv4i_cpu_rope(ne, 1, L->n_freq, lat + (hd - rd), hd, 0, cs, 0);
  if (st == DSV4_OK) {
    DSV4I_AOMP(omp parallel for schedule(static) if ((int64_t)ne * hd >= (1 << 16)))
    for (int32_t e = 0; e < ne; e++) {
      const int32_t t = c->emit_tok[e];
      dsv4i_kv_comp_encode(lat + (size_t)e * (size_t)hd, hd,
                           dsv4i_kv_rec(c->b->seq[t], DSV4I_KV_COMP, L->layer, gpos[e] / r));
    }
  }
  free(gpos);
  free(cs);
  return st;
}
