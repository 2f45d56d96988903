/*
 * The attention sublayer (attention.h): batch checks and the order of the
 * steps of spec §5.4. On a KV source the order matters: compressor ->
 * index keys -> indexer (scores, top-k) -> RoPE + quantise + store the
 * compressed KV -> attend (which reads it back).
 */
#include <stdlib.h>
#include <string.h>

#include "cpu/attn_impl.h"

static dsv4_status check_batch(const dsv4i_attn_layer *L, const dsv4i_attn_batch *b,
                               const dsv4i_attn_shared *sh, int32_t *run0, int32_t *run1) {
  const int32_t n = b->n_tok, win = L->window, l = L->layer;
  int32_t r = 0;
  for (int32_t t = 0; t < n; t++) {
    const dsv4i_kv_view *s = b->seq[t];
    const int64_t p = b->pos[t];
    if (!s || !s->lay || s->lay->n_layers <= l || s->lay->window != win ||
        s->lay->head_dim != L->head_dim || s->lay->rope_dim != L->rope_dim ||
        s->lay->window_format != b->seq[0]->lay->window_format ||
        s->lay->ratio[l] != (L->role.roles & DSV4_ROLE_KV_SOURCE ? L->ratio : 0))
      return dsv4i_error(DSV4_ERR_INVALID_ARG, "attention layer %d: token %d: caches of another "
                         "layout", (int)l, (int)t);
    if (t == 0 || s != b->seq[t - 1]) {
      if (t > 0) run1[r] = t; /* close the previous run (indexed by its first token) */
      for (int32_t u = 0; u < t; u = run1[u])
        if (b->seq[u] == s)
          return dsv4i_error(DSV4_ERR_INVALID_ARG, "attention layer %d: token %d: a sequence's "
                             "tokens must be consecutive in the batch", (int)l, (int)t);
      r = t;
      if (p != s->len)
        return dsv4i_error(DSV4_ERR_INVALID_ARG, "attention layer %d: token %d at position %lld, "
                           "its sequence holds %lld", (int)l, (int)t, (long long)p,
                           (long long)s->len);
    } else if (p != b->pos[t - 1] + 1) {
      return dsv4i_error(DSV4_ERR_INVALID_ARG, "attention layer %d: token %d: positions of a "
                         "sequence must be consecutive", (int)l, (int)t);
    }
    run0[t] = r;
    if (p >= s->end || p >= (INT64_C(1) << 24))
      return dsv4i_error(DSV4_ERR_INVALID_ARG, "attention layer %d: position %lld not reserved "
                         "(reserved up to %lld)", (int)l, (long long)p, (long long)s->end);
    const int32_t lay = b->layout[t];
    const int64_t need = p + 1 < win ? p + 1 : win;
    if (lay != DSV4I_ATTN_DECODE && (lay < need || lay > win))
      return dsv4i_error(DSV4_ERR_INVALID_ARG, "attention layer %d: token %d: prefill layout "
                         "width %d outside [%lld, %d]", (int)l, (int)t, (int)lay,
                         (long long)need, (int)win);
  }
  if (n > 0) run1[r] = n;
  for (int32_t t = 0; t < n; t++) run1[t] = run1[run0[t]];
  if (L->ratio > 0 && (!sh || sh->cap_tok < n || !sh->topk || sh->topk_ld < L->index_topk))
    return dsv4i_error(DSV4_ERR_INVALID_ARG, "attention layer %d: shared state missing or too "
                       "small for %d tokens", (int)l, (int)n);
  if ((L->role.roles & DSV4_ROLE_INDEX_SOURCE) && L->role.candidate_source >= 0 &&
      (!sh->cand || sh->cand_ld < 1))
    return dsv4i_error(DSV4_ERR_INVALID_ARG, "attention layer %d: no candidate rows", (int)l);
  if ((L->role.roles & DSV4_ROLE_CANDIDATE_SOURCE) && (!sh->cand || sh->cand_ld < L->cand_blocks))
    return dsv4i_error(DSV4_ERR_INVALID_ARG, "attention layer %d: candidate rows too small",
                       (int)l);
  return DSV4_OK;
}

dsv4_status dsv4i_attn_forward(const dsv4i_attn_layer *L, const dsv4i_attn_batch *b,
                               const uint16_t *x, dsv4i_attn_shared *sh, uint16_t *out) {
  if (!L || !b || b->n_tok < 0 ||
      (b->n_tok > 0 && (!x || !out || !b->seq || !b->pos || !b->layout)))
    return dsv4i_error(DSV4_ERR_INVALID_ARG, "attention: NULL argument");
  const int32_t n = b->n_tok;
  if (n == 0) return DSV4_OK;
  const int32_t H = L->n_heads, hd = L->head_dim, rd = L->rope_dim;
  const uint32_t roles = L->role.roles;
  const int kv_source = L->ratio > 0 && (roles & DSV4_ROLE_KV_SOURCE);
  const int index_source = L->ratio > 0 && (roles & DSV4_ROLE_INDEX_SOURCE);
  const size_t nq = (size_t)n * (size_t)H * (size_t)hd, nk = (size_t)n * (size_t)hd;
  attn_call c = {.L = L, .b = b, .n = n};
  c.run0 = dsv4i_malloc((size_t)n * 3 * sizeof(int32_t), "attention runs");
  c.cs = dsv4i_malloc((size_t)n * (size_t)L->n_freq * 2 * sizeof(float), "attention rope");
  uint16_t *qr = dsv4i_malloc((size_t)n * (size_t)L->q_lora * sizeof *qr, "attention qr");
  uint16_t *q = dsv4i_malloc(nq * sizeof *q, "attention q");
  uint16_t *o = dsv4i_malloc(nq * sizeof *o, "attention o");
  uint16_t *kv = dsv4i_malloc(nk * 3 * sizeof *kv, "attention kv");
  dsv4_status st = (c.run0 && c.cs && qr && q && o && kv) ? DSV4_OK : DSV4_ERR_OUT_OF_MEMORY;
  if (st != DSV4_OK) goto done;
  c.run1 = c.run0 + n;
  c.emit_tok = c.run0 + 2 * (size_t)n;
  uint16_t *kvw = kv + nk, *lat = kv + 2 * nk;
  st = check_batch(L, b, sh, c.run0, c.run1);
  if (st == DSV4_OK) c.lay = b->seq[0]->lay; /* check_batch: one window format for all */
  if (st == DSV4_OK) st = dsv4i_rope_cs(L->freqs, L->n_freq, n, b->pos, c.cs);
  /* 1. query: q_norm(wq_a(x)) -> wq_b -> RoPE on each head's tail */
  if (st == DSV4_OK) st = dsv4i_cpu_linear(&L->wq_a, n, x, L->dim, qr, L->q_lora);
  if (st == DSV4_OK) st = dsv4i_cpu_rmsnorm(n, L->q_lora, qr, L->q_lora, L->q_norm, L->eps, qr, L->q_lora);
  if (st == DSV4_OK) st = dsv4i_cpu_linear(&L->wq_b, n, qr, L->q_lora, q, (int64_t)H * hd);
  if (st == DSV4_OK) st = dsv4i_cpu_rope(n, H, L->n_freq, q + (hd - rd), (int64_t)H * hd, hd, c.cs, 0);
  /* 2. window KV */
  if (st == DSV4_OK) st = dsv4i_attn_window_kv(&c, x, kv, kvw);
  /* 3. compressed path */
  const int32_t *sel = NULL;
  if (st == DSV4_OK && L->ratio > 0) {
    if (kv_source) st = dsv4i_attn_compress(&c, x, lat);
    if (st == DSV4_OK && kv_source && (roles & DSV4_ROLE_INDEX_OWN_KEYS))
      st = dsv4i_attn_index_keys(&c, lat);
    if (st == DSV4_OK && index_source) st = dsv4i_attn_indexer(&c, x, qr, sh);
    if (st == DSV4_OK && kv_source) st = dsv4i_attn_comp_store(&c, lat);
    sel = index_source && sh->force_topk ? sh->force_topk : sh->topk;
    /* every selected record must be visible to its query (a consumer layer run
     * without its index source, or a bad test hook, would read stale rows) */
    for (int32_t t = 0; st == DSV4_OK && t < n; t++) {
      const int64_t vis = (b->pos[t] + 1) / L->ratio;
      const int32_t *row = sel + (size_t)t * (size_t)sh->topk_ld;
      for (int32_t j = 0; j < sh->topk_ld && row[j] >= 0; j++)
        if (row[j] >= vis)
          st = dsv4i_error(DSV4_ERR_INVALID_ARG, "attention layer %d: token %d selects "
                           "compressed entry %d of %lld visible", (int)L->layer, (int)t,
                           (int)row[j], (long long)vis);
    }
  }
  /* 4. sparse attention, then the ring takes this call's window records */
  if (st == DSV4_OK) st = dsv4i_attn_attend(&c, q, kvw, sel, sel ? sh->topk_ld : 0, o);
  if (st == DSV4_OK) dsv4i_attn_window_store(&c, kv);
  /* 5-6. inverse RoPE, wo_a, wo_b */
  if (st == DSV4_OK) st = dsv4i_attn_output(&c, o, out);
done:
  free(c.run0);
  free(c.cs);
  free(qr);
  free(q);
  free(o);
  free(kv);
  return st;
}
