/* Launchers of the indexer kernels (kernels/attn_indexer.cu). */
#include "gpu/attn.h"

dsv4_status dsv4i_gpu_attn_index_scores(const dsv4i_gpu_attn_kernels *k, dsv4i_custream stream,
                                        const dsv4i_gpu_index_args *a) {
  if (a->head_dim != 128 || a->n_heads < 1 || a->n_heads > 64)
    return dsv4i_error(DSV4_ERR_UNSUPPORTED, "indexer scores: index heads %d x dim %d (the kernel "
                       "takes 1..64 heads of 128)", (int)a->n_heads, (int)a->head_dim);
  if (a->n < 0 || a->ratio < 1 || a->score_ld < 1 || (a->cand && (a->cand_ld < 1 || a->cand_bs < 1)))
    return dsv4i_error(DSV4_ERR_INVALID_ARG, "indexer scores: n %d, ratio %d, score_ld %lld, "
                       "candidates %d x block %d", (int)a->n, (int)a->ratio,
                       (long long)a->score_ld, (int)a->cand_ld, (int)a->cand_bs);
  if (a->n == 0) return DSV4_OK;
  /* blocks per token: enough to cover the keys the scores row can hold, and
   * about four waves of the device in all (fixed by the arguments, not by
   * positions, so the grid survives graph replay) */
  const int64_t keys_blocks = (a->score_ld + 63) / 64; /* 64-key tiles */
  int64_t per_tok = 4 * (int64_t)k->kr->dev->n_sm / a->n;
  if (per_tok < 1) per_tok = 1;
  if (per_tok > keys_blocks) per_tok = keys_blocks;
  if (per_tok * a->n > INT32_MAX)
    return dsv4i_error(DSV4_ERR_INVALID_ARG, "indexer scores: %d tokens", (int)a->n);
  dsv4i_gpu_kvtab tab = a->idxk;
  int per = (int)per_tok, ih = a->n_heads, ratio = a->ratio, cld = a->cand_ld, cbs = a->cand_bs;
  float wscale = a->wscale;
  dsv4i_cuptr tok = a->tok, q = a->q, w = a->w, cand = a->cand, scores = a->scores;
  long long sld = a->score_ld;
  void *params[] = {&tab, &tok, &per, &ih, &ratio, &wscale, &q, &w, &cand, &cld, &cbs, &scores, &sld};
  return dsv4i_kreg_launch(k->kr, k->index_scores, (uint32_t)(per_tok * a->n), 0, stream, params);
}

static dsv4_status topk_launch(const dsv4i_gpu_attn_kernels *k, dsv4i_custream stream,
                               dsv4i_cuptr tok, int32_t n, int32_t ratio, dsv4i_cuptr scores,
                               int64_t score_ld, int mode, int32_t bs, dsv4i_cuptr bws,
                               int64_t bws_ld, int32_t k_max, dsv4i_cuptr out, int32_t out_ld) {
  if (n < 0 || ratio < 1 || k_max < 0 || out_ld < k_max || score_ld < 1 || bs < 1)
    return dsv4i_error(DSV4_ERR_INVALID_ARG, "indexer top-k: n %d, ratio %d, k %d into rows of %d",
                       (int)n, (int)ratio, (int)k_max, (int)out_ld);
  if (n == 0) return DSV4_OK;
  int r = ratio, m = mode, b = bs, km = k_max, old = out_ld;
  long long sld = score_ld, bld = bws_ld;
  void *params[] = {&tok, &r, &scores, &sld, &m, &b, &bws, &bld, &km, &out, &old};
  return dsv4i_kreg_launch(k->kr, k->topk, (uint32_t)n, 0, stream, params);
}

/* Blocks per token of the split top-k, from the row length and k alone: chunks of
 * at least 8·k_max keys (a part reads its chunk a few times; the merge selects
 * among parts·k_max candidates), at most TOPK_PARTS; 1: one block per token. */
#define TOPK_PARTS 32
static int32_t topk_parts(int64_t score_ld, int32_t k_max) {
  if (k_max < 1) return 1;
  const int64_t p = score_ld / (8 * (int64_t)k_max);
  return p < 2 ? 1 : p > TOPK_PARTS ? TOPK_PARTS : (int32_t)p;
}

size_t dsv4i_gpu_attn_topk_ws_bytes(int32_t n, int64_t score_ld, int32_t k_max) {
  const int32_t parts = topk_parts(score_ld, k_max);
  if (parts < 2 || n < 1) return 0;
  return (size_t)n * (size_t)parts * (size_t)k_max * 8; /* int32 indices + f32 scores */
}

dsv4_status dsv4i_gpu_attn_topk(const dsv4i_gpu_attn_kernels *k, dsv4i_custream stream,
                                dsv4i_cuptr tok, int32_t n, int32_t ratio, dsv4i_cuptr scores,
                                int64_t score_ld, int32_t k_max, dsv4i_cuptr out, int32_t out_ld,
                                dsv4i_cuptr ws, size_t ws_bytes) {
  const int32_t parts = topk_parts(score_ld, k_max);
  if (!ws || parts < 2 || n < 1)
    return topk_launch(k, stream, tok, n, ratio, scores, score_ld, 0, 1, 0, 0, k_max, out, out_ld);
  const size_t need = dsv4i_gpu_attn_topk_ws_bytes(n, score_ld, k_max);
  if (ratio < 1 || out_ld < k_max || n > 65535 || ws_bytes < need)
    return dsv4i_error(DSV4_ERR_INVALID_ARG, "indexer top-k: n %d, ratio %d, k %d into rows of %d, "
                       "workspace %zu bytes of %zu", (int)n, (int)ratio, (int)k_max, (int)out_ld,
                       ws_bytes, need);
  /* chunk >= k_max: every chunk before a token's last holds k_max candidates */
  long long sld = score_ld, chunk = (score_ld + parts - 1) / parts;
  int r = ratio, km = k_max, pt = parts, old = out_ld;
  dsv4i_cuptr cidx = ws, ckey = ws + (dsv4i_cuptr)n * (dsv4i_cuptr)parts * (dsv4i_cuptr)k_max * 4;
  void *pp[] = {&tok, &r, &scores, &sld, &km, &chunk, &cidx, &ckey};
  dsv4_status st = dsv4i_kreg_launch_grid(k->kr, k->topk_part, (uint32_t)parts, (uint32_t)n, 1, 0,
                                          stream, pp);
  void *pm[] = {&tok, &r, &km, &pt, &chunk, &cidx, &ckey, &out, &old};
  if (st == DSV4_OK) st = dsv4i_kreg_launch(k->kr, k->topk_merge, (uint32_t)n, 0, stream, pm);
  return st;
}

dsv4_status dsv4i_gpu_attn_candidates(const dsv4i_gpu_attn_kernels *k, dsv4i_custream stream,
                                      dsv4i_cuptr tok, int32_t n, int32_t ratio,
                                      dsv4i_cuptr scores, int64_t score_ld, int32_t bs,
                                      int32_t n_keep, dsv4i_cuptr bws, int64_t bws_ld,
                                      dsv4i_cuptr out, int32_t out_ld) {
  if (!bws || bws_ld < (score_ld + bs - 1) / (bs > 0 ? bs : 1))
    return dsv4i_error(DSV4_ERR_INVALID_ARG, "indexer candidates: block-score rows of %lld for "
                       "%lld scores in blocks of %d", (long long)bws_ld, (long long)score_ld, (int)bs);
  return topk_launch(k, stream, tok, n, ratio, scores, score_ld, 1, bs, bws, bws_ld, n_keep, out,
                     out_ld);
}
