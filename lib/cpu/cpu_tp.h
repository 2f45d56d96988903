/*
 * Tensor parallelism on the CPU backend (docs/distributed.md "Tensor
 * parallelism"): a TP rank keeps its share of a backbone block's attention
 * heads and wo_a groups and of every expert's (and the shared expert's)
 * intermediate dimension, as views into the whole tensors; wo_b and the MoE
 * down projections (the contractions over the split dims) are all-reduced in
 * rank order through the backend's dsv4i_tp_ops (backend.h): each rank
 * continues the previous ranks' fp32 sums, so the result is bit-identical to
 * one process. Router, indexer, compressors and caches stay whole.
 */
#ifndef DSV4I_CPU_TP_H
#define DSV4I_CPU_TP_H

#include <stdint.h>

#include "backend/backend.h"
#include "base/base.h"

struct cpu_block;

/**
 * Cut a loaded backbone block down to TP rank `rank` of `size` (size > 1).
 * DSV4_OK; DSV4_ERR_UNSUPPORTED when size does not divide the heads, the wo_a
 * groups or the expert intermediate dimension in 32-blocks.
 */
dsv4_status dsv4i_cpu_tp_shard(struct cpu_block *k, int32_t rank, int32_t size,
                               const dsv4i_tp_ops *tp);

/**
 * y = linear(x, W) for a W whose input columns are split over the TP ranks
 * (FP8/FP4, this rank's columns; x [n_tok][ldx] this rank's share of the
 * input): act_quant, the rank-ordered sums, the last rank's bf16 rounding,
 * shared: y (bf16 [n_tok][ldy]) equals one process's dsv4i_cpu_linear on
 * every rank. ldy must equal w->rows. Collective over the TP ranks.
 */
dsv4_status dsv4i_cpu_tp_linear(const dsv4i_tp_ops *tp, const dsv4i_wview *w, int64_t n_tok,
                                const uint16_t *x, int64_t ldx, uint16_t *y, int64_t ldy);

#endif /* DSV4I_CPU_TP_H */
