/*
 * The KV cache layout both sides of the backend seam compute from a config:
 * cache kinds, record sizes, ring sizes, and where each (kind, layer) page
 * table sits in a sequence's page row. The engine (engine/kv.h) decides which
 * page holds what; a backend stores pages and reads records through it.
 * Kinds, rings and rollback rules: docs/attention.md; the seam:
 * docs/backend.md "KV caches".
 */
#ifndef DSV4I_BACKEND_KV_LAYOUT_H
#define DSV4I_BACKEND_KV_LAYOUT_H

#include <stddef.h>
#include <stdint.h>

#include "base/base.h"
#include "model/config.h"

/** Cache kinds (index of the per-kind arrays below). */
enum {
  DSV4I_KV_WINDOW = 0, /**< window ring, every layer (DSpark stages included) */
  DSV4I_KV_COMP = 1,   /**< compressed KV, KV sources */
  DSV4I_KV_IDXK = 2,   /**< index keys, KV sources owning keys */
  DSV4I_KV_CSTATE = 3, /**< compressor inputs ring, ratio > 1 KV sources */
  DSV4I_KV_KINDS = 4
};

/**
 * Cache layout of one model for one page size and context (a value type).
 * Record r of table (kind k, layer l) of a sequence lives in page
 * row[off[k][l] + r / rec_per_page[k]] at byte (r % rec_per_page[k]) ·
 * rec_bytes[k]; ring kinds take r = position mod ring (ring_slots for WINDOW,
 * state_slots[l] for CSTATE), COMP / IDXK r = record (group) index.
 */
typedef struct dsv4i_kv_layout {
  int32_t n_layers;        /**< backbone + DSpark stages (cfg->n_total_layers) */
  /** Layers [first_layer, last_layer) have tables (a pipeline stage's layers;
   *  [0, n_layers) for one process); the others have none (0 pages, cap 0). */
  int32_t first_layer, last_layer;
  int32_t head_dim;        /**< latent width (512) */
  int32_t rope_dim;        /**< RoPE dims at the latent's end (64) */
  /** Window record format, an engine option: DSV4I_KV_NATIVE (MXFP8, 528 B) or
   *  DSV4I_KV_FP8_DS_MLA (model/kv_ds_mla.h, 584 B); rec_bytes[DSV4I_KV_WINDOW] is its size. */
  int32_t window_format;
  int32_t index_head_dim;  /**< index key width (128) */
  int32_t window;          /**< sliding_window (128) */
  int32_t spare;           /**< rollback depth: truncate may remove up to this many positions */
  int32_t ring_slots;      /**< window ring records per layer: window + spare */
  size_t page_bytes;       /**< bytes of one pool page */
  int32_t rec_bytes[DSV4I_KV_KINDS];     /**< bytes per record of each kind */
  int32_t rec_per_page[DSV4I_KV_KINDS];  /**< records per page of each kind */
  /** Per layer: records are emitted every `ratio` positions (KV sources; 0 = no
   *  COMP/IDXK/CSTATE table), whether it has index keys, ring records of CSTATE
   *  (ratio + spare for ratio > 1, else 0). */
  int32_t ratio[DSV4I_MAX_LIST];
  uint8_t has_idxk[DSV4I_MAX_LIST];
  int32_t state_slots[DSV4I_MAX_LIST];
  int64_t max_positions;   /**< positions one sequence may hold */
  int32_t ld;              /**< page ids per sequence row: every table at max_positions */
  int32_t off[DSV4I_KV_KINDS][DSV4I_MAX_LIST]; /**< table (k, l) starts at row[off[k][l]] */
  int32_t cap[DSV4I_KV_KINDS][DSV4I_MAX_LIST]; /**< its pages at max_positions */
} dsv4i_kv_layout;

/**
 * Derive the layout of a config (spec §2.3 roles, §5.8 records).
 * @param cfg           [in] parsed config (roles derived).
 * @param spare         rollback depth; 0 picks dspark_block_size + 1 (at least 2).
 *                      Speculative verify needs spare >= the tokens it may reject.
 * @param page_bytes    page size (>= the largest record, a multiple of 64).
 * @param max_positions positions one sequence may hold (>= 1).
 * @param out           [out] the layout.
 * @return DSV4_OK; DSV4_ERR_INVALID_ARG (page too small, bad dims, a row over INT32_MAX).
 */
dsv4_status dsv4i_kv_layout_init(const dsv4i_config *cfg, int32_t spare, size_t page_bytes,
                                 int64_t max_positions, dsv4i_kv_layout *out);

/** Page size of a config's pools, the same for every backend and window
 *  format: 16 of the largest record (any kind, either window format), at
 *  least 4 KiB, a multiple of 64. */
size_t dsv4i_kv_page_bytes(const dsv4i_config *cfg);

/** The layers [*first, *last) whose caches a part holds (cfg's layer indices,
 *  DSpark stages n_layers.. included on the last stage); part NULL: all. */
void dsv4i_kv_part_layers(const dsv4i_config *cfg, const dsv4i_model_part *part,
                          int32_t *first, int32_t *last);

/**
 * dsv4i_kv_layout_init for the caches of one part (a pipeline stage's
 * layers, dsv4i_kv_part_layers) with window records of kv_format
 * (DSV4I_KV_NATIVE / DSV4I_KV_FP8_DS_MLA): tables of other layers are empty,
 * so the page row, a sequence's pages and the pool hold this stage's layers
 * only. part NULL: the whole model. Statuses as dsv4i_kv_layout_init; also
 * DSV4_ERR_INVALID_ARG for a layer range outside the config or an unknown
 * kv_format.
 */
dsv4_status dsv4i_kv_layout_init_part(const dsv4i_config *cfg, const dsv4i_model_part *part,
                                      int32_t kv_format, int32_t spare, size_t page_bytes,
                                      int64_t max_positions, dsv4i_kv_layout *out);

struct dsv4i_cache_format; /* backend/backend.h */

/**
 * The pool part of a backend's storage format: derive the layout of the part's
 * caches (dsv4i_kv_layout_init_part, default spare; part NULL: the whole model;
 * window records of kv_format) for pages of page_bytes into *lay, zero *f
 * and fill its page_bytes, seq_pages (every kind at max_positions), ring_pages
 * (WINDOW and CSTATE, held from the first position) and bytes_per_pos (COMP and
 * IDXK records per position). The backend fills the rest (slot, weight and
 * workspace bytes).
 * @return DSV4_OK; DSV4_ERR_INVALID_ARG as dsv4i_kv_layout_init_part.
 */
dsv4_status dsv4i_kv_format_init(const dsv4i_config *cfg, const dsv4i_model_part *part,
                                 int32_t kv_format, size_t page_bytes, int64_t max_positions,
                                 struct dsv4i_cache_format *f, dsv4i_kv_layout *lay);

/** Pages table (kind, layer) needs at n positions (rings: in full once used). */
int64_t dsv4i_kv_table_pages(const dsv4i_kv_layout *lay, int32_t kind, int32_t layer, int64_t n);

/** Pages one sequence of n_pos positions needs of one kind, all layers together. */
int64_t dsv4i_kv_pages_for(const dsv4i_kv_layout *lay, int32_t kind, int64_t n_pos);

/** Ring records of table (kind, layer), 0 for an append-only kind. */
static inline int64_t dsv4i_kv_ring(const dsv4i_kv_layout *lay, int32_t kind, int32_t layer) {
  return kind == DSV4I_KV_WINDOW ? lay->ring_slots
         : kind == DSV4I_KV_CSTATE ? lay->state_slots[layer] : 0;
}

#endif /* DSV4I_BACKEND_KV_LAYOUT_H */
