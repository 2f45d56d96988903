/*
 * KV storage of the CUDA backend (gpu_kv.h): the page pool in device memory,
 * the device copy of a step's page rows plus the padding row, page copies.
 */
#include "gpu/gpu_kv.h"

#include <stdlib.h>
#include <string.h>

size_t dsv4i_gkv_page_bytes(const dsv4i_config *c) { return dsv4i_kv_page_bytes(c); }

static int64_t pad_pages(const dsv4i_kv_layout *lay, int32_t pad_tokens) {
  int64_t n = 0;
  for (int32_t k = 0; k < DSV4I_KV_KINDS; k++) n += dsv4i_kv_pages_for(lay, k, pad_tokens);
  return n;
}

size_t dsv4i_gkv_device_bytes(const dsv4i_kv_layout *lay, int32_t n_rows, int32_t pad_tokens,
                              int64_t pool_pages) {
  return (size_t)(pool_pages + pad_pages(lay, pad_tokens)) * lay->page_bytes + 256 +
         (size_t)(n_rows + 1) * (size_t)lay->ld * sizeof(int32_t) + 256;
}

dsv4_status dsv4i_gkv_create(dsv4i_gkv *kv, dsv4i_gpu *g, const dsv4i_kv_layout *lay,
                             int32_t n_rows, int32_t pad_tokens, int64_t pool_pages) {
  memset(kv, 0, sizeof *kv);
  kv->lay = *lay;
  kv->g = g;
  kv->n_rows = n_rows;
  kv->pool_pages = pool_pages;
  kv->pad_pages = pad_pages(lay, pad_tokens);
  kv->pad_row = dsv4i_calloc((size_t)lay->ld, sizeof(int32_t), "padding page row");
  if (!kv->pad_row) return DSV4_ERR_OUT_OF_MEMORY;
  /* the padding row: pages of its own for pad_tokens positions, after the engine's */
  int32_t next = (int32_t)pool_pages;
  for (int32_t k = 0; k < DSV4I_KV_KINDS; k++)
    for (int32_t l = 0; l < lay->n_layers; l++)
      for (int64_t i = 0; i < dsv4i_kv_table_pages(lay, k, l, pad_tokens); i++)
        kv->pad_row[lay->off[k][l] + i] = next++;
  dsv4_status st = dsv4i_gpu_pool_take(&g->pool,
                                       (size_t)(pool_pages + kv->pad_pages) * lay->page_bytes,
                                       "KV page pool", &kv->pool);
  if (!st) st = dsv4i_gpu_pool_take(&g->pool, (size_t)(n_rows + 1) * (size_t)lay->ld * 4,
                                    "KV page table", &kv->tab);
  return st;
}

void dsv4i_gkv_free(dsv4i_gkv *kv) {
  free(kv->pad_row);
  memset(kv, 0, sizeof *kv);
}

dsv4_status dsv4i_gkv_stage(const dsv4i_gkv *g, const dsv4i_kv_step *kv, int32_t *stage) {
  if (!kv || kv->n_seq < 1 || kv->n_seq > g->n_rows || kv->ld != g->lay.ld || !kv->pages ||
      !kv->len || !kv->end)
    return dsv4i_error(DSV4_ERR_INVALID_ARG, "cuda backend: page table of %d sequences (at most "
                       "%d), row %d (layout %d)", kv ? (int)kv->n_seq : -1, (int)g->n_rows,
                       kv ? (int)kv->ld : -1, (int)g->lay.ld);
  for (int32_t i = 0; i < kv->n_seq; i++)
    if (kv->len[i] < 0 || kv->end[i] < kv->len[i] || kv->end[i] > g->lay.max_positions)
      return dsv4i_error(DSV4_ERR_INVALID_ARG, "cuda backend: sequence %d holds %lld, reserved "
                         "%lld", (int)i, (long long)kv->len[i], (long long)kv->end[i]);
  const size_t ld = (size_t)g->lay.ld;
  memcpy(stage, kv->pages, sizeof *stage * ld * (size_t)kv->n_seq);
  memcpy(stage + ld * (size_t)kv->n_seq, g->pad_row, sizeof *stage * ld);
  return DSV4_OK;
}

dsv4i_gpu_kvtab dsv4i_gkv_tab(const dsv4i_gkv *kv, int32_t kind, int32_t layer) {
  dsv4i_gpu_kvtab t;
  memset(&t, 0, sizeof t);
  t.pool = kv->pool;
  t.pages = kv->tab + (dsv4i_cuptr)kv->lay.off[kind][layer] * 4u;
  t.page_bytes = (uint64_t)kv->lay.page_bytes;
  t.ld = kv->lay.ld;
  t.rpp = kv->lay.rec_per_page[kind];
  t.rec_bytes = kv->lay.rec_bytes[kind];
  t.ring = (int32_t)dsv4i_kv_ring(&kv->lay, kind, layer);
  return t;
}

dsv4_status dsv4i_gkv_copy(dsv4i_gkv *kv, int32_t n, const int32_t *src, const int32_t *dst) {
  if (n < 0 || (n > 0 && (!src || !dst)))
    return dsv4i_error(DSV4_ERR_INVALID_ARG, "cuda kv_copy: %d pages", (int)n);
  for (int32_t i = 0; i < n; i++)
    if (src[i] < 0 || src[i] >= kv->pool_pages || dst[i] < 0 || dst[i] >= kv->pool_pages)
      return dsv4i_error(DSV4_ERR_INVALID_ARG, "cuda kv_copy: page %d -> %d outside the pool of "
                         "%lld", (int)src[i], (int)dst[i], (long long)kv->pool_pages);
  const size_t pb = kv->lay.page_bytes;
  for (int32_t i = 0; i < n; i++) {
    const dsv4i_cures r = kv->g->dev.cu->MemcpyDtoDAsync(kv->pool + (dsv4i_cuptr)dst[i] * pb,
                                                         kv->pool + (dsv4i_cuptr)src[i] * pb, pb,
                                                         kv->g->stream);
    if (r != DSV4I_CUDA_SUCCESS) return dsv4i_gpu_fail(kv->g, r, "cuMemcpyDtoDAsync(kv_copy)");
  }
  return DSV4_OK;
}
