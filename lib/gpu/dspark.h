/*
 * DSpark draft head on the device (spec §6.1): host launchers of the
 * kernels in kernels/dspark.cu. The stages' attention is
 * dsv4i_gpu_attn_sparse with the DSpark token layout (lib/gpu/attn.h), the
 * rest of a stage, the head and the confidence are the dense kernels; this
 * file adds the Markov step, which draws the drafts left to right.
 *
 * Graph-capture safe like lib/gpu/attn.h: enqueue only, grids fixed by the
 * arguments. Internal to lib/gpu and the CUDA backend.
 */
#ifndef DSV4I_GPU_DSPARK_H
#define DSV4I_GPU_DSPARK_H

#include <stddef.h>

#include "gpu/kernel_registry.h"

/** Kernel ids of the DSpark ops, chosen once per engine. */
typedef struct dsv4i_gpu_dspark_kernels {
  const dsv4i_kreg *kr; /**< borrowed registry */
  dsv4i_kernel_id markov;
} dsv4i_gpu_dspark_kernels;

/** Dispatch decision (at engine creation).
 * @return DSV4_OK; DSV4_ERR_UNSUPPORTED naming op, format and arch. */
dsv4_status dsv4i_gpu_dspark_select(const dsv4i_kreg *kr, dsv4i_gpu_dspark_kernels *out);

/** Arguments of the Markov step (device pointers). */
typedef struct dsv4i_gpu_markov_args {
  int32_t n, block, vocab, rank; /**< sequences, draft block B, V, markov rank R (8 | R <= 512) */
  dsv4i_cuptr toks;    /**< int32 [n][B + 1]: column 0 the anchors; step k writes column k + 1
                        *   (-1 - i: no token can be drawn, i as dsv4i_cpu_not_drawable) */
  dsv4i_cuptr logits;  /**< f32 [n][B][V]: row k = base logits in, base + Markov bias out */
  dsv4i_cuptr embed;   /**< bf16 [V][R] markov_head.embed */
  dsv4i_cuptr head;    /**< bf16 [V][R] markov_head.head */
  dsv4i_cuptr temp;    /**< f32 [n] temperatures (<= 0: argmax) */
  dsv4i_cuptr seed;    /**< u64 [n] sampling seeds */
  dsv4i_cuptr counter; /**< u64 [n]: draft k draws with counter + k (dsv4i_cpu_sample) */
  dsv4i_cuptr n_valid; /**< int32 [n] in [1, V]: the ids a draft may take (dsv4i_cpu_valid_ids) */
  dsv4i_cuptr part;    /**< scratch: dsv4i_gpu_dspark_markov_scratch(n, V, R) bytes */
  dsv4i_cuptr ticket;  /**< uint32 [1], zeroed once at allocation; every step leaves it 0 */
} dsv4i_gpu_markov_args;

/** Scratch bytes of the Markov step for n sequences (the per-block partials and the
 *  gathered next embeddings). */
size_t dsv4i_gpu_dspark_markov_scratch(int32_t n, int32_t vocab, int32_t rank);

/**
 * Markov step k of every sequence, one launch (kernels/dspark.cu):
 * logits_k += markov.embed[tok_k] · markov.headᵀ (bit-identical to the CPU
 * backend's fp32 linear), then tok_{k+1} = dsv4i_cpu_sample(logits_k,
 * n_valid, T, seed, counter + k) — the not-drawable rule as a negative
 * token, argmax exact; for T > 0 the same race and noise, the softmax sum
 * in another order: a token differs from the CPU's only where two race
 * values agree to a few ulps — and markov.embed[tok_{k+1}] gathered for
 * step k + 1. Call for k = 0 .. B − 1 in order on one stream; capture-safe.
 * @return DSV4_OK; DSV4_ERR_INVALID_ARG (shapes); launch errors.
 */
dsv4_status dsv4i_gpu_dspark_markov(const dsv4i_gpu_dspark_kernels *k, dsv4i_custream stream,
                                    const dsv4i_gpu_markov_args *a, int32_t step);

#endif /* DSV4I_GPU_DSPARK_H */
