/*
 * Per-sequence attention caches of the CPU backend (spec §5.8): the native
 * record codecs (window MXFP8, compressed KV and index keys E2M1, compressor
 * state fp32), a page pool, the cache layout a config implies and one
 * sequence's page tables with reserve / commit / truncate / fork
 * (copy-on-write of shared append-only pages, counted exactly by reserve).
 * Cache kinds, ring sizes, the step lifecycle and rollback rules:
 * docs/attention.md. Thread-safety: pool and sequence functions are
 * handle-exclusive; record accessors may run from many threads on distinct
 * records.
 */
#ifndef DSV4I_KVCACHE_H
#define DSV4I_KVCACHE_H

#include <stddef.h>
#include <stdint.h>

#include "base/base.h"
#include "model/config.h"

/** Cache kinds (index of the per-kind arrays below). */
enum {
  DSV4I_KV_WINDOW = 0, /**< window ring, every layer */
  DSV4I_KV_COMP = 1,   /**< compressed KV, KV sources */
  DSV4I_KV_IDXK = 2,   /**< index keys, KV sources owning keys */
  DSV4I_KV_CSTATE = 3, /**< compressor inputs ring, ratio > 1 KV sources */
  DSV4I_KV_KINDS = 4
};

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

/* ======================================================================
 * Page pool
 * ====================================================================== */

/** A pool of fixed-size pages in host memory (opaque). */
typedef struct dsv4i_kv_pool dsv4i_kv_pool;

/**
 * Create a pool of n_pages pages of page_bytes bytes each (one allocation,
 * not zeroed).
 * @param page_bytes >= 64, a multiple of 64.
 * @param n_pages    1 .. INT32_MAX.
 * @param out        [out] the pool; NULL on failure.
 * @return DSV4_OK; DSV4_ERR_INVALID_ARG; DSV4_ERR_OUT_OF_MEMORY.
 */
dsv4_status dsv4i_kv_pool_create(size_t page_bytes, int64_t n_pages, dsv4i_kv_pool **out);
/** Free a pool; every sequence using it must have been freed. NULL is a no-op. */
void dsv4i_kv_pool_free(dsv4i_kv_pool *pool);
/** Pages not in use. */
int64_t dsv4i_kv_pool_free_pages(const dsv4i_kv_pool *pool);
/** Total pages. */
int64_t dsv4i_kv_pool_n_pages(const dsv4i_kv_pool *pool);

/* ======================================================================
 * Layout (what caches a config needs, record sizes, ring sizes)
 * ====================================================================== */

/** Cache layout of one model (a value type; no pointers). */
typedef struct dsv4i_kv_layout {
  int32_t n_layers;        /**< backbone + DSpark stages (cfg->n_total_layers) */
  int32_t head_dim;        /**< latent width (512) */
  int32_t index_head_dim;  /**< index key width (128) */
  int32_t window;          /**< sliding_window (128) */
  int32_t spare;           /**< rollback depth: truncate may remove up to this many positions */
  int32_t ring_slots;      /**< window ring records per layer: window + spare */
  size_t page_bytes;       /**< page size of every pool used with this layout */
  int32_t rec_bytes[DSV4I_KV_KINDS];     /**< bytes per record of each kind */
  int32_t rec_per_page[DSV4I_KV_KINDS];  /**< records per page of each kind */
  /** Per layer: records are emitted every `ratio` positions (KV sources; 0 = no
   *  COMP/IDXK/CSTATE table), whether it has index keys, ring records of CSTATE
   *  (ratio + spare for ratio > 1, else 0). */
  int32_t ratio[DSV4I_MAX_LIST];
  uint8_t has_idxk[DSV4I_MAX_LIST];
  int32_t state_slots[DSV4I_MAX_LIST];
} dsv4i_kv_layout;

/**
 * Derive the layout of a config (spec §2.3 roles, §5.8 records).
 * @param cfg        [in] parsed config (roles derived).
 * @param spare      rollback depth; 0 picks dspark_block_size + 1 (at least 2).
 *                   Speculative verify needs spare >= the tokens it may reject.
 * @param page_bytes page size of the pools (>= the largest record, multiple of 64).
 * @param out        [out] the layout.
 * @return DSV4_OK; DSV4_ERR_INVALID_ARG (page too small, bad dims).
 */
dsv4_status dsv4i_kv_layout_init(const dsv4i_config *cfg, int32_t spare, size_t page_bytes,
                                 dsv4i_kv_layout *out);

/**
 * Pages one sequence of n_pos positions needs of one kind, all layers
 * together (for memory plans). Rings count in full from the first position.
 */
int64_t dsv4i_kv_pages_for(const dsv4i_kv_layout *lay, int32_t kind, int64_t n_pos);

/* ======================================================================
 * One sequence's caches
 * ====================================================================== */

/** Page table of one (kind, layer): page ids of records [i·rpp, (i+1)·rpp). */
typedef struct dsv4i_kv_ptab {
  int32_t *page;  /**< [cap] page ids; [0, n) valid */
  int64_t n, cap;
} dsv4i_kv_ptab;

/** One sequence's caches. Fields are read-only outside kvcache.c. */
typedef struct dsv4i_kv_seq {
  const dsv4i_kv_layout *lay;           /**< borrowed; outlives the sequence */
  dsv4i_kv_pool *pool[DSV4I_KV_KINDS];  /**< pool per kind (may be the same pool) */
  int64_t n_pos;   /**< committed positions: the caches hold positions [0, n_pos) */
  int64_t n_resv;  /**< positions [n_pos, n_resv) may be written by the running step */
  int64_t n_dirty; /**< positions [n_pos, n_dirty) were written since the last commit
                        (dsv4i_kv_seq_mark); bounds how far truncate may go back */
  dsv4i_kv_ptab *tab;  /**< [DSV4I_KV_KINDS][lay->n_layers] */
} dsv4i_kv_seq;

/**
 * Create an empty sequence (no pages yet: the first reserve takes them).
 * @param lay   [in] layout, borrowed for the sequence's life.
 * @param pools [in] pool per kind (entries may repeat; every page_bytes must
 *              equal lay->page_bytes); pools[k] may be NULL for a kind the
 *              layout never uses.
 * @param out   [out] new sequence, NULL on failure. Free with dsv4i_kv_seq_free.
 * @return DSV4_OK; DSV4_ERR_INVALID_ARG; DSV4_ERR_OUT_OF_MEMORY.
 */
dsv4_status dsv4i_kv_seq_create(const dsv4i_kv_layout *lay, dsv4i_kv_pool *const *pools,
                                dsv4i_kv_seq **out);
/** Release every page and free. NULL is a no-op. */
void dsv4i_kv_seq_free(dsv4i_kv_seq *s);

/**
 * Make room for writing positions [seq->n_pos, target) of each sequence:
 * ring pages, pages of the compressed / index-key records those positions
 * complete (copying shared pages first). All pools are checked before
 * anything changes.
 * @param seqs    [in,out] n distinct sequences.
 * @param targets [in] int64 [n], targets[i] >= seqs[i]->n_pos.
 * @return DSV4_OK; DSV4_KV_FULL (positive: a pool has too few free pages;
 *         nothing changed); DSV4_ERR_INVALID_ARG (nothing changed);
 *         DSV4_ERR_OUT_OF_MEMORY (page-table growth failed; nothing changed
 *         logically).
 */
dsv4_status dsv4i_kv_reserve(dsv4i_kv_seq *const *seqs, const int64_t *targets, int32_t n);

/**
 * Declare positions [0, n) written (after every layer wrote them).
 * @param n  seq->n_pos <= n <= seq->n_resv.
 * @return DSV4_OK; DSV4_ERR_INVALID_ARG (no change).
 */
dsv4_status dsv4i_kv_seq_commit(dsv4i_kv_seq *s, int64_t n);

/**
 * Record that positions below `end` of this sequence's caches have been (or
 * are about to be) written. Every writer calls it before writing (the
 * attention forward does); truncate uses it to bound rollbacks.
 */
void dsv4i_kv_seq_mark(dsv4i_kv_seq *s, int64_t end);

/**
 * Roll the sequence back to its first n positions (speculative rejection,
 * or an abandoned step): n_pos = n_resv = n_dirty = n; compressed /
 * index-key pages past the new length are released. Allowed for n == 0
 * (full reset) and for max(n_pos, n_dirty) − n <= lay->spare: positions
 * written past that overwrote ring slots a later query needs, so a failed
 * step that wrote more than `spare` positions (a long prefill chunk) cannot
 * be undone — reset the sequence (n = 0) or free it. A reservation alone
 * (nothing written) is always undone.
 * @return DSV4_OK; DSV4_ERR_INVALID_ARG (n out of range or too deep; no change).
 */
dsv4_status dsv4i_kv_seq_truncate(dsv4i_kv_seq *s, int64_t n);

/**
 * Fork: a new sequence with the same committed contents. Compressed and
 * index-key pages are shared (copy-on-write); ring pages are copied.
 * @param src [in] the parent (its n_resv is not inherited).
 * @param out [out] the child, NULL on failure.
 * @return DSV4_OK; DSV4_KV_FULL (not enough free pages for the rings;
 *         nothing changed); DSV4_ERR_INVALID_ARG; DSV4_ERR_OUT_OF_MEMORY.
 */
dsv4_status dsv4i_kv_seq_fork(const dsv4i_kv_seq *src, dsv4i_kv_seq **out);

/**
 * Address of a record (hot path, no checks beyond debug asserts).
 * WINDOW: idx = position (slot idx mod ring_slots); CSTATE: idx = position
 * (slot idx mod state_slots); COMP / IDXK: idx = record (group) index.
 * The page must exist (reserved or committed range).
 */
uint8_t *dsv4i_kv_rec(const dsv4i_kv_seq *s, int32_t kind, int32_t layer, int64_t idx);

/** Pages this sequence holds (shared pages count in each holder). */
int64_t dsv4i_kv_seq_pages(const dsv4i_kv_seq *s);

#endif /* DSV4I_KVCACHE_H */
