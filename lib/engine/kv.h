/*
 * KV bookkeeping of the engine (spec §5.8): which pool page holds which
 * records of which sequence. A page-id allocator with reference counts, one
 * page row per sequence (the per-(kind, layer) page tables at the offsets of
 * backend/kv_layout.h), reserve / commit / truncate / fork as metadata with
 * copy-on-write of shared append-only pages, and the slots of an engine with
 * the compact page table each step hands the backend. The bytes live in the
 * backend (its pool of pages; kv_copy copies one); nothing here touches them.
 * Decisions depend only on the calls made: two engines (or two pipeline
 * ranks) fed the same calls hold the same page ids. Rules: docs/backend.md
 * "KV caches", docs/attention.md. Handle-exclusive.
 */
#ifndef DSV4I_ENGINE_KV_H
#define DSV4I_ENGINE_KV_H

#include <stdint.h>

#include "backend/backend.h"
#include "backend/kv_layout.h"
#include "base/base.h"

/* ======================================================================
 * Page ids
 * ====================================================================== */

/** Page-id allocator of one pool (opaque): reference counts and free list. */
typedef struct dsv4i_kv_pool dsv4i_kv_pool;

/**
 * Create an allocator of n_pages page ids [0, n_pages).
 * @return DSV4_OK; DSV4_ERR_INVALID_ARG (n_pages outside 1..INT32_MAX);
 *         DSV4_ERR_OUT_OF_MEMORY. *out NULL on failure.
 */
dsv4_status dsv4i_kv_pool_create(int64_t n_pages, dsv4i_kv_pool **out);
/** Free; every sequence using it must have been freed. NULL is a no-op. */
void dsv4i_kv_pool_free(dsv4i_kv_pool *pool);
/** Pages not in use. */
int64_t dsv4i_kv_pool_free_pages(const dsv4i_kv_pool *pool);
/** Total pages. */
int64_t dsv4i_kv_pool_n_pages(const dsv4i_kv_pool *pool);
/**
 * Page copies the last reserve or fork decided: the storage must make page
 * dst[i] equal page src[i] (i < return value) before anything else writes or
 * reads them. src and dst are disjoint, dst distinct. Valid until the next
 * reserve or fork on this pool.
 */
int32_t dsv4i_kv_pool_copies(const dsv4i_kv_pool *pool, const int32_t **src, const int32_t **dst);

/* ======================================================================
 * One sequence's page tables
 * ====================================================================== */

/** One sequence's caches as metadata. Fields are read-only outside kv.c. */
typedef struct dsv4i_kv_seq {
  const dsv4i_kv_layout *lay; /**< borrowed; outlives the sequence */
  dsv4i_kv_pool *pool;
  int64_t n_pos;   /**< committed positions: the caches hold positions [0, n_pos) */
  int64_t n_resv;  /**< positions [n_pos, n_resv) may be written by the running step */
  int64_t n_dirty; /**< positions [n_pos, n_dirty) may have been written since the last
                        commit (dsv4i_kv_seq_mark); bounds how far truncate may go back */
  int32_t *row;    /**< int32 [lay->ld] page ids (-1: none); table (k, l) at lay->off[k][l] */
  int32_t *n;      /**< int32 [DSV4I_KV_KINDS][lay->n_layers] pages each table holds */
} dsv4i_kv_seq;

/**
 * Create an empty sequence (no pages: the first reserve takes them).
 * @return DSV4_OK; DSV4_ERR_INVALID_ARG; DSV4_ERR_OUT_OF_MEMORY. *out NULL on failure.
 */
dsv4_status dsv4i_kv_seq_create(const dsv4i_kv_layout *lay, dsv4i_kv_pool *pool,
                                dsv4i_kv_seq **out);
/** Release every page and free. NULL is a no-op. */
void dsv4i_kv_seq_free(dsv4i_kv_seq *s);

/**
 * Make room for writing positions [seqs[i]->n_pos, targets[i]) of each
 * sequence: ring pages, pages of the compressed / index-key records those
 * positions complete, and private copies of shared pages they write (the
 * copies: dsv4i_kv_pool_copies). All or nothing.
 * @param seqs    [in,out] n distinct sequences of one pool.
 * @param targets [in] int64 [n], seqs[i]->n_pos <= targets[i] <= lay->max_positions.
 * @return DSV4_OK; DSV4_KV_FULL (positive: too few free pages; nothing changed);
 *         DSV4_ERR_INVALID_ARG (nothing changed).
 */
dsv4_status dsv4i_kv_reserve(dsv4i_kv_seq *const *seqs, const int64_t *targets, int32_t n);

/**
 * Declare positions [0, n) written (after every layer wrote them).
 * @param n  seq->n_pos <= n <= seq->n_resv.
 * @return DSV4_OK; DSV4_ERR_INVALID_ARG (no change).
 */
dsv4_status dsv4i_kv_seq_commit(dsv4i_kv_seq *s, int64_t n);

/** Record that positions below `end` may have been written (before a step writes them). */
void dsv4i_kv_seq_mark(dsv4i_kv_seq *s, int64_t end);

/**
 * Roll back to the first n positions (speculative rejection, or an abandoned
 * step): n_pos = n_resv = n_dirty = n; compressed / index-key pages past the
 * new length return to the pool. Allowed for n == 0 (full reset) and for
 * max(n_pos, n_dirty) − n <= lay->spare: positions written past that
 * overwrote ring records a later query needs. A reservation alone (nothing
 * marked) is always undone.
 * @return DSV4_OK; DSV4_ERR_INVALID_ARG (n out of range or too deep; no change).
 */
dsv4_status dsv4i_kv_seq_truncate(dsv4i_kv_seq *s, int64_t n);

/**
 * Fork: a new sequence with the same committed contents. Compressed and
 * index-key pages are shared (copy-on-write later); ring pages get fresh
 * pages (the copies: dsv4i_kv_pool_copies).
 * @return DSV4_OK; DSV4_KV_FULL (not enough free pages for the rings; nothing
 *         changed); DSV4_ERR_INVALID_ARG; DSV4_ERR_OUT_OF_MEMORY. *out NULL on failure.
 */
dsv4_status dsv4i_kv_seq_fork(const dsv4i_kv_seq *src, dsv4i_kv_seq **out);

/** Pages this sequence holds (shared pages count in each holder). */
int64_t dsv4i_kv_seq_pages(const dsv4i_kv_seq *s);

/** Host bytes per slot outside the pool: row, table counts, the step's row copy. */
int64_t dsv4i_kv_slot_bytes(const dsv4i_kv_layout *lay);

/* ======================================================================
 * The engine's slots
 * ====================================================================== */

/** Usage of an engine's caches. */
typedef struct dsv4i_kv_usage {
  int64_t pages_total, pages_used;
  int32_t slots_total, slots_used;
} dsv4i_kv_usage;

/** Slots of an engine over one pool, and the backend storing the pages. */
typedef struct dsv4i_kv_cache {
  dsv4i_kv_layout lay;
  dsv4i_kv_pool *pool;
  dsv4i_kv_seq **slots;  /**< [n_slots], NULL = free */
  int32_t n_slots;
  dsv4i_backend *be;     /**< kv_copy goes here; NULL: copies are left to the caller */
  int32_t *rows;         /**< [n_slots][lay.ld] the step's page table */
  int64_t *len, *end;    /**< [n_slots] the step's lengths and reservations */
  dsv4i_kv_seq **sel;    /**< [n_slots] scratch of reserve */
  int64_t *tgt;          /**< [n_slots] */
} dsv4i_kv_cache;

/**
 * Set up n_slots slots over a pool of pool_pages page ids.
 * @return DSV4_OK; DSV4_ERR_INVALID_ARG; DSV4_ERR_OUT_OF_MEMORY (c freed again).
 */
dsv4_status dsv4i_kv_cache_init(dsv4i_kv_cache *c, const dsv4i_kv_layout *lay, int64_t pool_pages,
                                int32_t n_slots, dsv4i_backend *be);
/** Release everything; a zeroed cache is a no-op. */
void dsv4i_kv_cache_free(dsv4i_kv_cache *c);
/** An empty slot. DSV4_KV_FULL (every slot in use; no change). */
dsv4_status dsv4i_kv_slot_open(dsv4i_kv_cache *c, int32_t *slot);
/** A new slot with src's committed contents. DSV4_KV_FULL (no change); the
 *  backend's kv_copy statuses (then no new slot). */
dsv4_status dsv4i_kv_slot_fork(dsv4i_kv_cache *c, int32_t src, int32_t *dst);
/** Release a slot and its pages; an unopened slot is a no-op. */
void dsv4i_kv_slot_close(dsv4i_kv_cache *c, int32_t slot);
/** The sequence of an open slot, or NULL. */
dsv4i_kv_seq *dsv4i_kv_slot(const dsv4i_kv_cache *c, int32_t slot);
/**
 * dsv4i_kv_reserve for slots[i] up to len[i] (a len at or below the slot's
 * length is a no-op for it), then the page copies through the backend.
 * @return DSV4_OK; DSV4_KV_FULL / DSV4_ERR_INVALID_ARG (no change); a kv_copy
 *         status (the reservation stands; the copied pages are undefined).
 */
dsv4_status dsv4i_kv_slot_reserve(dsv4i_kv_cache *c, int32_t n, const int32_t *slots,
                                  const int64_t *len);
/** dsv4i_kv_seq_truncate of a slot. */
dsv4_status dsv4i_kv_slot_truncate(dsv4i_kv_cache *c, int32_t slot, int64_t len);
/**
 * The step's page table for n distinct open slots (row i = slots[i], len[i] =
 * its committed length) into *out (valid until the next call), for a step
 * that writes positions [len[i], end[i]) of each: marks them written (the
 * rollback bound of truncate).
 * @return DSV4_OK; DSV4_ERR_INVALID_ARG (a slot not open or listed twice, an
 *         end below the length or past the reservation; nothing marked).
 */
dsv4_status dsv4i_kv_step_table(dsv4i_kv_cache *c, int32_t n, const int32_t *slots,
                                const int64_t *end, dsv4i_kv_step *out);
/** After a step succeeded: slots[i] holds positions [0, end[i]) (commit).
 *  DSV4_ERR_INVALID_ARG when an end lies outside [length, reservation]. */
dsv4_status dsv4i_kv_step_commit(dsv4i_kv_cache *c, int32_t n, const int32_t *slots,
                                 const int64_t *end);
/** Pool and slot usage now. */
void dsv4i_kv_usage_get(const dsv4i_kv_cache *c, dsv4i_kv_usage *out);

#endif /* DSV4I_ENGINE_KV_H */
