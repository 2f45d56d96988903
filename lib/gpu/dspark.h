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
  int32_t n, block, vocab, rank; /**< sequences, draft block B, V, markov rank R (8 | R <= 1024) */
  dsv4i_cuptr toks;    /**< int32 [n][B + 1]: column 0 the anchors; step k writes column k + 1 */
  dsv4i_cuptr logits;  /**< f32 [n][B][V]: row k = base logits in, base + Markov bias out */
  dsv4i_cuptr embed;   /**< bf16 [V][R] markov_head.embed */
  dsv4i_cuptr head;    /**< bf16 [V][R] markov_head.head */
  dsv4i_cuptr temp;    /**< f32 [n] temperatures (<= 0: argmax) */
  dsv4i_cuptr seed;    /**< u64 [n] sampling seeds */
  dsv4i_cuptr counter; /**< u64 [n]: draft k draws with counter + k (dsv4i_cpu_sample) */
  dsv4i_cuptr part;    /**< scratch: 8 · n · dsv4i_gpu_dspark_markov_chunks(V) bytes */
  dsv4i_cuptr ticket;  /**< uint32 [n], zeroed once at allocation; every step leaves it 0 */
} dsv4i_gpu_markov_args;

/** Vocabulary blocks of one sequence's Markov step (sizes `part`). */
int32_t dsv4i_gpu_dspark_markov_chunks(int32_t vocab);

/**
 * Markov step k of every sequence (one launch): logits_k += markov.embed[tok_k]
 * · markov.headᵀ (bit-identical to the CPU backend's fp32 linear), then
 * tok_{k+1} = dsv4i_cpu_sample(logits_k, T, seed, counter + k) (argmax
 * exact; for T > 0 the same race and noise, the softmax sum in another
 * order: a token differs from the CPU's only where two race values agree to
 * a few ulps). Call for k = 0 .. B − 1 in order on one stream.
 * @return DSV4_OK; DSV4_ERR_INVALID_ARG (shapes); launch errors.
 */
dsv4_status dsv4i_gpu_dspark_markov(const dsv4i_gpu_dspark_kernels *k, dsv4i_custream stream,
                                    const dsv4i_gpu_markov_args *a, int32_t step);

#endif /* DSV4I_GPU_DSPARK_H */
