/*
 * The token records of a device attention call (dsv4i_gpu_attn_tok,
 * lib/gpu/attn_abi.h) built from an engine batch on the host, with the
 * CPU backend's batch rules (lib/cpu/attention.h). Plain C: compiled in
 * every build (no driver, no kernels), so CI checks it.
 * Thread-safe (pure functions over caller memory).
 */
#ifndef DSV4I_GPU_ATTN_TOKENS_H
#define DSV4I_GPU_ATTN_TOKENS_H

#include <stdint.h>

#include "base/base.h"
#include "gpu/attn_abi.h"

/**
 * Records of a backbone attention call.
 * @param n       tokens (>= 0).
 * @param seq_row [in] int32 [n]: page-table row of each token's sequence (>= 0); a
 *                sequence's tokens are consecutive in the batch.
 * @param pos     [in] int64 [n]: positions, consecutive within a sequence, < 2^24.
 * @param layout  [in] int32 [n]: 0 (decode index row) or a prefill window width in
 *                [min(pos + 1, window), window].
 * @param window  sliding window (>= 1).
 * @param out     [out] [n] records (first, last, row0 of each token's run filled in).
 * @return DSV4_OK; DSV4_ERR_INVALID_ARG naming the token and the rule (out undefined).
 */
dsv4_status dsv4i_gpu_attn_tokens(int32_t n, const int32_t *seq_row, const int64_t *pos,
                                  const int32_t *layout, int32_t window, dsv4i_gpu_attn_tok *out);

/**
 * Records of a DSpark stage attention call (spec §6.1): n_blk draft blocks of
 * `block` tokens; block b sits at positions anchor[b] + 1 .. anchor[b] + block
 * and its tokens are rows b·block .. b·block + block − 1 of the call.
 * @param seq_row [in] int32 [n_blk] page-table rows; anchor [in] int64 [n_blk] >= 0.
 * @param out     [out] [n_blk · block] records with layout −block.
 * @return DSV4_OK; DSV4_ERR_INVALID_ARG (out undefined).
 */
dsv4_status dsv4i_gpu_attn_dspark_tokens(int32_t n_blk, const int32_t *seq_row,
                                         const int64_t *anchor, int32_t block,
                                         dsv4i_gpu_attn_tok *out);

#endif /* DSV4I_GPU_ATTN_TOKENS_H */
