/*
 * KV storage of the CUDA backend (spec §5.8, docs/gpu-attention.md "Caches on
 * the device", the seam: docs/backend.md "KV caches"): the engine decides
 * which page holds what (engine/kv.h) and hands each step the page rows of
 * its sequences; this file keeps the page pool in device memory, the device
 * copy of a step's page rows that the attention kernels read
 * (dsv4i_gpu_kvtab), and the engine's page copies (kv_copy).
 *
 * Padding: a graph replayed with fewer live rows runs its padding rows on
 * the row after the step's sequences, whose page row (built here) points at
 * pages of their own past the engine's pool, so they never touch a live cache.
 *
 * Internal to lib/gpu. Handle-exclusive (the backend's thread).
 */
#ifndef DSV4I_GPU_KV_H
#define DSV4I_GPU_KV_H

#include <stdint.h>

#include "backend/backend.h"
#include "gpu/attn_abi.h"
#include "gpu/gpu_ctx.h"

/** The page size of the CUDA backend's pool: the CPU backend's (16 of the largest record,
 *  at least 4 KiB, a multiple of 64). */
size_t dsv4i_gkv_page_bytes(const dsv4i_config *cfg);

/** The KV storage of one engine. */
typedef struct dsv4i_gkv {
  dsv4i_kv_layout lay;     /**< the engine's layout (copied) */
  dsv4i_gpu *g;            /**< borrowed */
  int64_t pool_pages;      /**< the engine's pages [0, pool_pages) */
  int64_t pad_pages;       /**< the padding row's pages after them */
  int32_t n_rows;          /**< page rows a step may hand in (the engine's n_slots) */
  dsv4i_cuptr pool;        /**< page 0 */
  dsv4i_cuptr tab;         /**< int32 [n_rows + 1][ld]: the step's rows, then the padding row */
  int32_t *pad_row;        /**< host [ld]: the padding row */
} dsv4i_gkv;

/** Device bytes dsv4i_gkv_create takes. */
size_t dsv4i_gkv_device_bytes(const dsv4i_kv_layout *lay, int32_t n_rows, int32_t pad_tokens,
                              int64_t pool_pages);

/**
 * Carve the pool (pool_pages + the padding row's pages for pad_tokens positions) and the
 * device page table from g's device pool.
 * @return DSV4_OK; DSV4_ERR_OUT_OF_MEMORY; DSV4_ERR_INTERNAL (device pool too small).
 */
dsv4_status dsv4i_gkv_create(dsv4i_gkv *kv, dsv4i_gpu *g, const dsv4i_kv_layout *lay,
                             int32_t n_rows, int32_t pad_tokens, int64_t pool_pages);
void dsv4i_gkv_free(dsv4i_gkv *kv);

/**
 * Check a step's page table (sizes, lengths within the layout) and write its rows, then
 * the padding row at index kv->n_seq, into `stage` (host int32 [n_rows + 1][ld]).
 * @return DSV4_OK; DSV4_ERR_INVALID_ARG naming what is wrong.
 */
dsv4_status dsv4i_gkv_stage(const dsv4i_gkv *g, const dsv4i_kv_step *kv, int32_t *stage);

/** The device table of (kind, layer) for the attention kernels (rows: the staged ones). */
dsv4i_gpu_kvtab dsv4i_gkv_tab(const dsv4i_gkv *kv, int32_t kind, int32_t layer);

/** Page copies of the engine (copy-on-write, fork): queued on the engine stream.
 *  DSV4_OK; DSV4_ERR_INVALID_ARG (a page outside the pool); device errors. */
dsv4_status dsv4i_gkv_copy(dsv4i_gkv *kv, int32_t n, const int32_t *src, const int32_t *dst);

#endif /* DSV4I_GPU_KV_H */
