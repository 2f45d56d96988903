/*
 * KV storage of the CPU backend (spec §5.8): the native record codecs
 * (window MXFP8, compressed KV and index keys E2M1, compressor state fp32)
 * and record addresses in the host page pool through a sequence's page row
 * (backend/kv_layout.h). Which page holds what is the engine's decision
 * (engine/kv.h); the row comes with each step. Record accessors may run from
 * many threads on distinct records.
 */
#ifndef DSV4I_KVCACHE_H
#define DSV4I_KVCACHE_H

#include <assert.h>
#include <stddef.h>
#include <stdint.h>

#include "base/base.h"
#include "backend/kv_layout.h"
#include "model/config.h"

/* ======================================================================
 * Record codecs (spec §5.8, §8.1)
 * ====================================================================== */

/* Record sizes are the model's (dsv4i_kv_record_bytes_for, model/config.h); these
 * name them for the codecs below, which take the dims directly. */
/** Window record bytes for a head_dim (528 for 512). */
static inline int32_t dsv4i_kv_window_rec_bytes(int32_t hd) {
  return (int32_t)dsv4i_kv_record_bytes_for(DSV4I_KVREC_WINDOW, hd, 0, 0);
}
/** Compressed-KV record bytes (288 for 512). */
static inline int32_t dsv4i_kv_comp_rec_bytes(int32_t hd) {
  return (int32_t)dsv4i_kv_record_bytes_for(DSV4I_KVREC_COMPRESSED, hd, 0, 0);
}
/** Index-key record bytes (68 for 128). */
static inline int32_t dsv4i_kv_idxk_rec_bytes(int32_t ihd) {
  return (int32_t)dsv4i_kv_record_bytes_for(DSV4I_KVREC_INDEX_KEY, 0, 0, ihd);
}

/**
 * Encode a window KV row (post-RoPE, bf16) as its MXFP8 record: act_quant
 * codes then UE8M0 scales (spec §5.4 step 2).
 * @param x   [in] bf16 bits [hd], hd a multiple of 32.
 * @param rec [out] uint8 [dsv4i_kv_window_rec_bytes(hd)].
 */
void dsv4i_kv_window_encode(const uint16_t *x, int32_t hd, uint8_t *rec);
/**
 * Decode a window record: y[i] = bf16(e4m3(q[i]) · 2^(s[i/32] − 127)) as fp32,
 * equal bit for bit to act_quant QDQ of the encoded row.
 * @param rec [in] record; y [out] float [hd].
 */
void dsv4i_kv_window_decode(const uint8_t *rec, int32_t hd, float *y);

/**
 * Encode a compressed-KV row (RoPE'd latent, bf16) as its record:
 * fp4_act_quant(x, 16, E4M3) packed codes then E4M3 scales (spec §5.4 3c).
 * @param x [in] bf16 bits [hd], hd a multiple of 32; rec [out] [comp_rec_bytes(hd)].
 */
void dsv4i_kv_comp_encode(const uint16_t *x, int32_t hd, uint8_t *rec);
/** Decode: y[i] = bf16(e2m1(c[i]) · e4m3(s[i/16])) as fp32 (== the QDQ). y float [hd]. */
void dsv4i_kv_comp_decode(const uint8_t *rec, int32_t hd, float *y);

/**
 * Encode an index key (bf16, post-RoPE) as its record: fp4_act_quant(k, 32,
 * UE8M0) packed codes then UE8M0 scales (spec §5.4 3b step 1).
 * @param x [in] bf16 bits [ihd], ihd a multiple of 32; rec [out] [idxk_rec_bytes(ihd)].
 */
void dsv4i_kv_idxk_encode(const uint16_t *x, int32_t ihd, uint8_t *rec);
/** Decode: y[i] = e2m1(c[i]) · 2^(s[i/32] − 127) as fp32 (== the QDQ). y float [ihd]. */
void dsv4i_kv_idxk_decode(const uint8_t *rec, int32_t ihd, float *y);

/**
 * Window record of the layout's format (lay->window_format): the native
 * record (dsv4i_kv_window_encode) or fp8_ds_mla (model/kv_ds_mla.h).
 * @param x [in] bf16 bits [lay->head_dim], post-RoPE; rec [out] [lay->rec_bytes[WINDOW]].
 */
void dsv4i_kv_window_put(const dsv4i_kv_layout *lay, const uint16_t *x, uint8_t *rec);
/** Decode a window record of the layout's format into y float [lay->head_dim]. */
void dsv4i_kv_window_get(const dsv4i_kv_layout *lay, const uint8_t *rec, float *y);
/**
 * The QDQ form of rows window rows in the layout's format, y = bf16 of
 * get(put(x)) row by row (native: act_quant QDQ): what attention reads for
 * the step's own rows, bit-equal to what it reads back from the ring.
 * @param x [in], y [out] bf16 bits [rows][lay->head_dim].
 */
void dsv4i_kv_window_qdq(const dsv4i_kv_layout *lay, const uint16_t *x, int64_t rows, uint16_t *y);

/* ======================================================================
 * One sequence's caches in the pool
 * ====================================================================== */

/** A sequence's caches as a step sees them (views; nothing owned). */
typedef struct dsv4i_kv_view {
  const dsv4i_kv_layout *lay; /**< the pool's layout */
  uint8_t *mem;               /**< the pool: page p at mem + p · lay->page_bytes */
  const int32_t *row;         /**< int32 [lay->ld] page row (the step's kv table) */
  int64_t len;                /**< positions the caches held before the step */
  int64_t end;                /**< positions [len, end) are reserved: the step may write them */
} dsv4i_kv_view;

/**
 * Address of a record (hot path, no checks beyond debug asserts).
 * WINDOW: idx = position (slot idx mod ring_slots); CSTATE: idx = position
 * (slot idx mod state_slots); COMP / IDXK: idx = record (group) index.
 * The page must be in the row (the engine reserved it).
 */
static inline uint8_t *dsv4i_kv_rec(const dsv4i_kv_view *s, int32_t kind, int32_t layer,
                                    int64_t idx) {
  const dsv4i_kv_layout *lay = s->lay;
  if (kind == DSV4I_KV_WINDOW) idx %= lay->ring_slots;
  else if (kind == DSV4I_KV_CSTATE) idx %= lay->state_slots[layer];
  const int64_t rpp = lay->rec_per_page[kind];
  const int32_t page = s->row[lay->off[kind][layer] + idx / rpp];
  assert(idx >= 0 && idx / rpp < lay->cap[kind][layer] && page >= 0);
  return s->mem + (size_t)page * lay->page_bytes + (size_t)(idx % rpp) * (size_t)lay->rec_bytes[kind];
}

#endif /* DSV4I_KVCACHE_H */
