/*
 * The stage-to-stage payload (design.md §6; docs/distributed.md "Payload"):
 * one message from pipeline stage k to stage k+1 per step. A fixed header
 * (magic, version, sizes, section offsets) is followed by 8-byte aligned
 * sections:
 *   h        bf16  [n_tok][hc][dim]   residual stream after stage k's last block
 *   pre      f32   [n_tok][hc]        that block's FFN pre (the lagged pre-mix, spec §5.3)
 *   tokens   int32 [n_tok]            token ids: ALWAYS (Engram hashing, image routing and
 *                                     the receiver's batch check need them)
 *   pos      int64 [n_tok]            positions
 *   seq      int64 [n_tok]            engine sequence ids
 *   slot     int32 [n_tok]            cache slots
 *   layout   int32 [n_tok]            index-row layouts (engine/backend.h)
 *   image    uint8 [n_tok]            image-span flags (0 for text)
 *   out      int32 [n_out]            token indices the head computes (last stage)
 *   engram   int64 [n_tok][n_engram]  Engram row ids of the Engram layers of later stages
 *                                     (spec §5.2), 0 columns when none lie there
 * Both ends check: the receiver refuses a message whose magic, version,
 * header size, total size, section offsets, dims, step serial or stage do
 * not match what it expects (DSV4_ERR_RANK_MISMATCH naming the field and both
 * values), and then that every metadata section equals its own batch for the
 * step (the ranks run the same deterministic bookkeeping; a difference means
 * they disagree, never a silent wrong result).
 */
#ifndef DSV4I_DIST_PAYLOAD_H
#define DSV4I_DIST_PAYLOAD_H

#include <stddef.h>
#include <stdint.h>

#include "base/base.h"

#define DSV4I_PAYLOAD_MAGIC 0x50345344u /* "DS4P" in memory order on little-endian hosts */
#define DSV4I_PAYLOAD_VERSION 1u

/** The header, at offset 0 of every message (host byte order: ranks share one ABI). */
typedef struct dsv4i_payload_hdr {
  uint32_t magic;           /**< DSV4I_PAYLOAD_MAGIC */
  uint32_t version;         /**< DSV4I_PAYLOAD_VERSION */
  uint32_t hdr_bytes;       /**< sizeof(dsv4i_payload_hdr) */
  int32_t status;           /**< DSV4_OK, or the status of a sending stage that failed the
                             *   step: then the message is the header alone and the receiver
                             *   passes the failure on instead of computing */
  uint64_t total_bytes;     /**< header + sections (the header alone for a failure) */
  uint64_t step;            /**< step serial of the sending engine (both ends count steps) */
  int32_t from_stage, to_stage;
  int32_t n_tok, n_out;
  int32_t hc, dim;
  int32_t n_engram;         /**< Engram row ids per token (0: none) */
  int32_t first_layer;      /**< the receiver's first backbone layer */
  uint64_t off_h, off_pre, off_tokens, off_pos, off_seq, off_slot, off_layout, off_image,
      off_out, off_engram;  /**< section offsets from the message start */
} dsv4i_payload_hdr;

/** What a message carries (host pointers; h and pre are filled by the caller in place). */
typedef struct dsv4i_payload_meta {
  uint64_t step;
  int32_t from_stage, to_stage, first_layer;
  int32_t n_tok, n_out, hc, dim, n_engram;
  const int32_t *tokens;    /**< [n_tok] */
  const int64_t *pos;       /**< [n_tok] */
  const int64_t *seq;       /**< [n_tok] */
  const int32_t *slot;      /**< [n_tok] */
  const int32_t *layout;    /**< [n_tok] */
  const uint8_t *image;     /**< [n_tok] or NULL (all text) */
  const int32_t *out;       /**< [n_out] */
  const int64_t *engram;    /**< [n_tok][n_engram] or NULL when n_engram is 0 */
} dsv4i_payload_meta;

/** A checked message: pointers into the received buffer. */
typedef struct dsv4i_payload_view {
  const dsv4i_payload_hdr *hdr;
  const uint16_t *h;        /**< bf16 bits */
  const float *pre;
  const int32_t *tokens;
  const int64_t *pos, *seq;
  const int32_t *slot, *layout;
  const uint8_t *image;
  const int32_t *out;
  const int64_t *engram;
} dsv4i_payload_view;

/**
 * Section offsets and total size for a shape (hdr->n_tok, n_out, hc, dim,
 * n_engram set by the caller; the rest is filled). Returns the total bytes,
 * or 0 when a size is negative or the total overflows.
 */
uint64_t dsv4i_payload_layout(dsv4i_payload_hdr *hdr);

/** Bytes of a message of this shape (0: invalid), for sizing buffers. */
uint64_t dsv4i_payload_bytes(int32_t n_tok, int32_t n_out, int32_t hc, int32_t dim,
                             int32_t n_engram);

/**
 * Write the header and metadata sections of a message into buf (8-byte
 * aligned, cap bytes). The caller then writes h and pre at buf + off_h /
 * off_pre (e.g. a backend's buf_read straight into them).
 * @return DSV4_OK; DSV4_ERR_INVALID_ARG (bad shape, cap too small, NULL section).
 */
dsv4_status dsv4i_payload_write(void *buf, size_t cap, const dsv4i_payload_meta *m,
                                dsv4i_payload_hdr *out_hdr);

/**
 * Write a failure notice (the header alone, status set) for a step the sending
 * stage could not compute, so the stages after it stop waiting at once.
 * Returns the bytes written (sizeof header), or 0 when cap is too small.
 */
size_t dsv4i_payload_write_failure(void *buf, size_t cap, const dsv4i_payload_meta *m,
                                   dsv4_status status);

/**
 * Check a received message of len bytes against what this rank expects
 * (ex: step, from_stage, to_stage, first_layer, hc, dim, n_engram; n_tok and
 * n_out are checked against ex->n_tok / ex->n_out) and give views into it.
 * @return DSV4_OK; DSV4_ERR_RANK_MISMATCH (the message names the field, the
 *         sender's and this rank's value); DSV4_ERR_RANK_FAILED (a failure notice:
 *         the sending stage could not compute the step; its status is named).
 */
dsv4_status dsv4i_payload_check(const void *buf, size_t len, const dsv4i_payload_meta *ex,
                                dsv4i_payload_view *v);

/**
 * Compare the metadata sections of a checked message with this rank's own
 * batch (tokens, positions, sequence ids, slots, layouts, image flags, out
 * rows, Engram row ids). DSV4_OK or DSV4_ERR_RANK_MISMATCH naming the first
 * differing field and token.
 */
dsv4_status dsv4i_payload_match(const dsv4i_payload_view *v, const dsv4i_payload_meta *own);

#endif /* DSV4I_DIST_PAYLOAD_H */
