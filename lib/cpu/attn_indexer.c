/*
 * Indexer (spec §5.4 3b): index keys of a key-owning KV source, index query,
 * head weights, bf16 scores with the reference's rounding points, the
 * candidate blocks of the candidate source, candidate masking on later
 * index sources, and the top-k selection with the lower-index tie rule.
 *
 * Per query at position p the visible compressed positions are
 * [0, (p+1)/ratio) in prefill and decode alike. The reference's top-k takes
 * min(index_topk, end_pos/ratio) entries over the chunk's width and drops
 * those >= the query's visible length; with ties broken towards the lower
 * index that is exactly the top min(index_topk, visible) of the visible
 * keys, which is what is computed here (so the selection does not depend on
 * how many tokens share the call). Likewise the candidate blocks are the
 * best min(candidate_topk_blocks, visible blocks) of the visible blocks.
 */
#include <stdlib.h>
#include <string.h>

#include "cpu/attn_impl.h"
#include "model/formats.h"

/* ---- selection ------------------------------------------------------- */

/* a ranks below b: smaller key, or equal key and larger index */
static inline int worse(float ka, int32_t ia, float kb, int32_t ib) {
  return ka < kb || (ka == kb && ia > ib);
}

static void sift_down(int32_t *h, const float *key, int32_t n, int32_t i) {
  for (;;) {
    int32_t l = 2 * i + 1, m = i;
    if (l < n && worse(key[h[l]], h[l], key[h[m]], h[m])) m = l;
    if (l + 1 < n && worse(key[h[l + 1]], h[l + 1], key[h[m]], h[m])) m = l + 1;
    if (m == i) return;
    int32_t tmp = h[i];
    h[i] = h[m];
    h[m] = tmp;
    i = m;
  }
}

static int cmp_i32(const void *a, const void *b) {
  int32_t x = *(const int32_t *)a, y = *(const int32_t *)b;
  return (x > y) - (x < y);
}

dsv4_status dsv4i_attn_topk(const float *key, int64_t n, int32_t k, int32_t *out) {
  if (k <= 0) return DSV4_OK;
  if (k > n || n > INT32_MAX)
    return dsv4i_error(DSV4_ERR_INVALID_ARG, "attn_topk: k %d of %lld", (int)k, (long long)n);
  /* min-heap (worst on top) of the best k seen so far, kept in out */
  int32_t *h = out;
  for (int32_t i = 0; i < k; i++) {
    h[i] = i;
    for (int32_t j = i; j > 0;) { /* sift up */
      int32_t p = (j - 1) / 2;
      if (!worse(key[h[j]], h[j], key[h[p]], h[p])) break;
      int32_t tmp = h[j];
      h[j] = h[p];
      h[p] = tmp;
      j = p;
    }
  }
  for (int64_t i = k; i < n; i++)
    if (worse(key[h[0]], h[0], key[i], (int32_t)i)) {
      h[0] = (int32_t)i;
      sift_down(h, key, k, 0);
    }
  qsort(out, (size_t)k, sizeof *out, cmp_i32);
  return DSV4_OK;
}

dsv4_status dsv4i_attn_candidates(const float *score, int64_t visible, int32_t bs, int32_t n_keep,
                                  int32_t *out) {
  for (int32_t i = 0; i < n_keep; i++) out[i] = -1;
  if (visible <= 0 || n_keep <= 0) return DSV4_OK;
  const int64_t nb = (visible + bs - 1) / bs;
  float *bsc = dsv4i_malloc((size_t)nb * sizeof *bsc, "candidate block scores");
  if (!bsc) return DSV4_ERR_OUT_OF_MEMORY;
  for (int64_t b = 0; b < nb; b++) {
    float m = score[b * bs];
    for (int64_t i = b * bs + 1; i < (b + 1) * bs && i < visible; i++) m = score[i] > m ? score[i] : m;
    bsc[b] = m;
  }
  bsc[(visible - 1) / bs] = 1.0f / 0.0f; /* the block of the newest position is pinned */
  const int32_t keep = nb < n_keep ? (int32_t)nb : n_keep;
  dsv4_status st = dsv4i_attn_topk(bsc, nb, keep, out);
  free(bsc);
  return st;
}

/* ---- index keys ------------------------------------------------------ */

dsv4_status dsv4i_attn_index_keys(const attn_call *c, const uint16_t *lat) {
  const dsv4i_attn_layer *L = c->L;
  const int32_t hd = L->head_dim, ihd = L->index_head_dim, rd = L->rope_dim, ne = c->n_emit;
  if (ne == 0) return DSV4_OK;
  uint16_t *k = dsv4i_malloc((size_t)ne * (size_t)ihd * sizeof *k, "index keys");
  int64_t *gpos = dsv4i_malloc((size_t)ne * sizeof *gpos, "group positions");
  float *cs = dsv4i_malloc((size_t)ne * (size_t)L->n_freq * 2 * sizeof *cs, "group rope");
  dsv4_status st = (k && gpos && cs) ? DSV4_OK : DSV4_ERR_OUT_OF_MEMORY;
  if (st == DSV4_OK) st = dsv4i_cpu_linear(&L->i_wk, ne, lat, hd, k, ihd);
  if (st == DSV4_OK) st = dsv4i_cpu_rmsnorm(ne, ihd, k, ihd, L->i_knorm, L->eps, k, ihd);
  if (st == DSV4_OK) {
    for (int32_t e = 0; e < ne; e++) gpos[e] = c->b->pos[c->emit_tok[e]] + 1 - L->ratio;
    st = dsv4i_rope_cs(L->freqs, L->n_freq, ne, gpos, cs);
  }
  if (st == DSV4_OK) st = dsv4i_cpu_rope(ne, 1, L->n_freq, k + (ihd - rd), ihd, 0, cs, 0);
  if (st == DSV4_OK)
    for (int32_t e = 0; e < ne; e++)
      dsv4i_kv_idxk_encode(k + (size_t)e * (size_t)ihd, ihd,
                           dsv4i_kv_rec(c->b->seq[c->emit_tok[e]], DSV4I_KV_IDXK, L->layer,
                                        gpos[e] / L->ratio));
  free(k);
  free(gpos);
  free(cs);
  return st;
}

/* ---- scores and selection --------------------------------------------- */

float dsv4i_attn_index_score(int32_t n_heads, int32_t ihd, const float *qf, const float *wf,
                             const uint8_t *rec, float *kf) {
  dsv4i_kv_idxk_decode(rec, ihd, kf);
  float total = 0.0f;
  for (int32_t h = 0; h < n_heads; h++) {
    const float *q = qf + (size_t)h * (size_t)ihd;
    float dot = 0.0f;
    for (int32_t i = 0; i < ihd; i++) dot += q[i] * kf[i];
    float v = dsv4i_bf16_to_f32(dsv4i_f32_to_bf16(dot));
    v = v > 0.0f ? v : 0.0f;
    total += dsv4i_bf16_to_f32(dsv4i_f32_to_bf16(v * wf[h]));
  }
  return dsv4i_bf16_to_f32(dsv4i_f32_to_bf16(total));
}

/* scores of keys [k0, k1) of token t into key[] (parallel over keys if asked) */
static void score_keys(const attn_call *c, int32_t t, const float *qf, const float *wf,
                       int64_t k0, int64_t k1, float *key, int par) {
  const dsv4i_attn_layer *L = c->L;
  const dsv4i_kv_view *s = c->b->seq[t];
  const int32_t ks = L->role.index_key_source;
  DSV4I_AOMP(omp parallel if (par))
  {
    float kf[1024];
    DSV4I_AOMP(omp for schedule(static))
    for (int64_t i = k0; i < k1; i++)
      key[i] = dsv4i_attn_index_score(L->index_heads, L->index_head_dim, qf, wf,
                                      dsv4i_kv_rec(s, DSV4I_KV_IDXK, ks, i), kf);
  }
}

/* candidate masking, hooks, top-k of token t from its scores */
static dsv4_status select_token(const attn_call *c, int32_t t, float *key, int64_t vis,
                                dsv4i_attn_shared *sh) {
  const dsv4i_attn_layer *L = c->L;
  dsv4_status st = DSV4_OK;
  if (L->role.roles & DSV4_ROLE_CANDIDATE_SOURCE) {
    st = dsv4i_attn_candidates(key, vis, L->cand_block_size, sh->cand_ld,
                               sh->cand + (size_t)t * (size_t)sh->cand_ld);
  } else if (L->role.candidate_source >= 0 && sh->cand_ld > 0) {
    /* keep the scores of candidate blocks only (rows ascending, −1 padded) */
    const int32_t *cb = sh->cand + (size_t)t * (size_t)sh->cand_ld;
    const int64_t bs = L->cand_block_size;
    int32_t j = 0;
    for (int64_t i = 0; i < vis; i++) {
      const int64_t blk = i / bs;
      while (j < sh->cand_ld && cb[j] >= 0 && cb[j] < blk) j++;
      if (!(j < sh->cand_ld && cb[j] == blk)) key[i] = -1.0f / 0.0f;
    }
  }
  if (st != DSV4_OK) return st;
  if (sh->scores) memcpy(sh->scores + (size_t)t * (size_t)sh->scores_ld, key, (size_t)vis * sizeof *key);
  int32_t *row = sh->topk + (size_t)t * (size_t)sh->topk_ld;
  const int32_t k = vis < L->index_topk ? (int32_t)vis : L->index_topk;
  for (int32_t i = k; i < sh->topk_ld; i++) row[i] = -1;
  return dsv4i_attn_topk(key, vis, k, row);
}

dsv4_status dsv4i_attn_indexer(const attn_call *c, const uint16_t *x, const uint16_t *qr,
                         dsv4i_attn_shared *sh) {
  const dsv4i_attn_layer *L = c->L;
  const int32_t n = c->n, IH = L->index_heads, ihd = L->index_head_dim, rd = L->rope_dim;
  const size_t qld = (size_t)IH * (size_t)ihd;
  if (ihd > 1024) return dsv4i_error(DSV4_ERR_UNSUPPORTED, "indexer: head dim %d", (int)ihd);
  int64_t vmax = 0;
  for (int32_t t = 0; t < n; t++) {
    const int64_t v = (c->b->pos[t] + 1) / L->ratio;
    vmax = v > vmax ? v : vmax;
  }
  if (sh->scores && sh->scores_ld < vmax)
    return dsv4i_error(DSV4_ERR_INVALID_ARG, "indexer: scores_ld %lld < %lld",
                       (long long)sh->scores_ld, (long long)vmax);
  uint16_t *qi = dsv4i_malloc((size_t)n * qld * sizeof *qi, "index queries");
  uint16_t *w = dsv4i_malloc((size_t)n * (size_t)IH * sizeof *w, "index head weights");
  float *qf = dsv4i_malloc((size_t)n * qld * sizeof *qf, "index queries f32");
  float *wf = dsv4i_malloc((size_t)n * (size_t)IH * sizeof *wf, "index weights f32");
  dsv4_status st = (qi && w && qf && wf) ? DSV4_OK : DSV4_ERR_OUT_OF_MEMORY;
  /* index query: wq_b(qr), RoPE per head at the token position, MXFP4 QDQ */
  if (st == DSV4_OK) st = dsv4i_cpu_linear(&L->i_wq_b, n, qr, L->q_lora, qi, (int64_t)qld);
  if (st == DSV4_OK)
    st = dsv4i_cpu_rope(n, IH, L->n_freq, qi + (ihd - rd), (int64_t)qld, ihd, c->cs, 0);
  if (st == DSV4_OK) st = dsv4i_fp4_act_quant_ue8m0_qdq(qi, (size_t)n * qld, qi);
  /* head weights: bf16(weights_proj(x)) · scale, rounded to bf16 */
  if (st == DSV4_OK) st = dsv4i_cpu_linear(&L->i_wproj, n, x, L->dim, w, IH);
  if (st == DSV4_OK) {
    for (size_t i = 0; i < (size_t)n * qld; i++) qf[i] = dsv4i_bf16_to_f32(qi[i]);
    for (size_t i = 0; i < (size_t)n * (size_t)IH; i++)
      wf[i] = dsv4i_bf16_to_f32(dsv4i_f32_to_bf16(dsv4i_bf16_to_f32(w[i]) * L->index_wscale));
  }
  free(qi);
  free(w);
  if (st != DSV4_OK) goto done;
  if (n >= 4 * dsv4i_cpu_threads()) {
    /* many queries (prefill): one token per thread at a time */
    int failed = 0;
    DSV4I_AOMP(omp parallel for schedule(dynamic, 1))
    for (int32_t t = 0; t < n; t++) {
      const int64_t vis = (c->b->pos[t] + 1) / L->ratio;
      float *key = dsv4i_malloc((size_t)(vis > 0 ? vis : 1) * sizeof *key, "index scores");
      if (!key) {
        DSV4I_AOMP(omp atomic write)
        failed = 1;
        continue;
      }
      score_keys(c, t, qf + (size_t)t * qld, wf + (size_t)t * (size_t)IH, 0, vis, key, 0);
      if (select_token(c, t, key, vis, sh) != DSV4_OK) {
        DSV4I_AOMP(omp atomic write)
        failed = 1;
      }
      free(key);
    }
    if (failed) st = DSV4_ERR_OUT_OF_MEMORY;
  } else {
    /* few queries (decode, verify): the keys of each query split across threads */
    float *key = dsv4i_malloc((size_t)(vmax > 0 ? vmax : 1) * sizeof *key, "index scores");
    if (!key) st = DSV4_ERR_OUT_OF_MEMORY;
    for (int32_t t = 0; t < n && st == DSV4_OK; t++) {
      const int64_t vis = (c->b->pos[t] + 1) / L->ratio;
      score_keys(c, t, qf + (size_t)t * qld, wf + (size_t)t * (size_t)IH, 0, vis, key,
                 vis * (int64_t)qld >= (1 << 17));
      st = select_token(c, t, key, vis, sh);
    }
    free(key);
  }
done:
  free(qf);
  free(wf);
  return st;
}
