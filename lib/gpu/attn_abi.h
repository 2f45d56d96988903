/*
 * Argument layouts shared by the attention kernels (kernels/attn_*.cu) and
 * their host launchers (lib/gpu/attn_*.c): plain C structs of fixed-width
 * fields, passed by value to the kernels or stored in device memory. Both
 * compilers see the same text, so the layouts agree; sizes are pinned below.
 *
 * Device KV caches (design §5, spec §5.8): a cache kind's records live in a
 * pool of fixed-size pages in device memory; one page table per (kind,
 * layer) and sequence maps record r to page pages[seq][r / rpp] at byte
 * (r % rpp) · rec_bytes. Ring kinds (window, compressor state) take
 * r = position mod ring; append-only kinds (compressed KV, index keys)
 * take r = record (group) index. The engine owns the bookkeeping (which
 * pages, reference counts, rings, truncation) and hands the tables per step;
 * the kernels only read and write records.
 */
#ifndef DSV4I_GPU_ATTN_ABI_H
#define DSV4I_GPU_ATTN_ABI_H

#include <stdint.h>

/** One (kind, layer) cache table for the sequences of a call (by value). */
typedef struct dsv4i_gpu_kvtab {
  uint64_t pool;       /**< device address of page 0 of the pool (64-byte aligned) */
  uint64_t pages;      /**< device address of int32 [n_seq][ld]: page ids per sequence */
  uint64_t page_bytes; /**< bytes per page (a multiple of 64) */
  int32_t ld;          /**< page ids per sequence row */
  int32_t rpp;         /**< records per page: floor(page_bytes / rec_bytes) */
  int32_t rec_bytes;   /**< bytes per record (528 window, 288 compressed, 68 index key,
                            8·head_dim compressor state) */
  int32_t ring;        /**< ring slots (record = position mod ring); 0 = append-only */
} dsv4i_gpu_kvtab;

/** One token of an attention call (device memory, int32 [8] per token).
 * A sequence's tokens are consecutive in the call at consecutive positions
 * (lib/cpu/attention.h states the same rules for the CPU backend). */
typedef struct dsv4i_gpu_attn_tok {
  int32_t seq;    /**< row of the page tables */
  int32_t pos;    /**< position (< 2^24) */
  int32_t first;  /**< first position of this sequence in the call */
  int32_t row0;   /**< call index of this sequence's first token */
  int32_t last;   /**< last position of this sequence in the call */
  int32_t layout; /**< index-row layout: 0 decode, W > 0 prefill of window width W,
                       −B a DSpark draft block of B tokens (first = anchor + 1) */
  int32_t pad_[2];
} dsv4i_gpu_attn_tok;

#ifdef __cplusplus
static_assert(sizeof(dsv4i_gpu_kvtab) == 40, "dsv4i_gpu_kvtab layout");
static_assert(sizeof(dsv4i_gpu_attn_tok) == 32, "dsv4i_gpu_attn_tok layout");
#else
_Static_assert(sizeof(dsv4i_gpu_kvtab) == 40, "dsv4i_gpu_kvtab layout");
_Static_assert(sizeof(dsv4i_gpu_attn_tok) == 32, "dsv4i_gpu_attn_tok layout");
#endif

/** Entries per online-softmax block of the sparse attention (spec §5.4 step 4). */
#define DSV4I_GPU_ATTN_BLOCK 64

/** Heads per thread block of the sparse attention's split pass. */
#define DSV4I_GPU_ATTN_SPLIT_HEADS 16

/** (token, entry block, head group) triples one split launch can take: the
 * size of its flag table in module memory (kernels/attn_sparse.cu). */
#define DSV4I_GPU_ATTN_SPLIT_FLAGS 16384

#endif /* DSV4I_GPU_ATTN_ABI_H */
