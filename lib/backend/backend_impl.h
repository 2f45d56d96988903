/*
 * The contract a backend implementation sees (lib/cpu, lib/gpu): how it
 * registers with lib/backend/registry.c. The engine never includes this
 * file; implementations include only backend/, model/ and base/ headers.
 */
#ifndef DSV4I_BACKEND_IMPL_H
#define DSV4I_BACKEND_IMPL_H

#include "backend/backend.h"

/** One registered backend: its kind, name and the two entry points the registry calls. */
typedef struct dsv4i_backend_entry {
  int32_t kind;      /**< DSV4_BACKEND_CPU / _CUDA */
  const char *name;  /**< "cpu", "cuda" */
  /** Storage sizes for the memory plan (dsv4i_backend_format). */
  dsv4_status (*format)(const struct dsv4i_config *cfg, int64_t max_positions,
                        const dsv4i_model_part *part, int32_t kv_format,
                        dsv4i_cache_format *out);
  /** Create an instance (dsv4i_backend_create); *out starts with struct dsv4i_backend. */
  dsv4_status (*create)(const dsv4i_backend_desc *d, dsv4i_backend **out);
} dsv4i_backend_entry;

/**
 * Fill the common header from the create arguments and check the stage and
 * tensor-parallel arguments: a layer range inside [0, n_layers) ({0, 0}: all),
 * tp_rank < tp_size. max_tp: the largest tp_size this implementation runs (1 for
 * the CPU). @return DSV4_OK; DSV4_ERR_INVALID_ARG; DSV4_ERR_UNSUPPORTED (tp_size > max_tp).
 */
dsv4_status dsv4i_backend_init(dsv4i_backend *be, const dsv4i_backend_ops *ops, int32_t kind,
                               const dsv4i_backend_desc *d, int32_t max_tp);

/**
 * The Engram gate's reference calls of a step's n_tok tokens (docs/cpu-numerics.md):
 * run[t] = seq[t] for a prefill-layout token (the consecutive tokens of one sequence's
 * chunk are one call), -1 for a decode-layout token (a decode row, each token of a
 * verify row: a call of its own). layout, seq int32 [n_tok] (dsv4i_batch); run int32
 * [n_tok] out (host). The CPU backend passes run to dsv4i_cpu_engram_runs.
 */
void dsv4i_engram_calls(int32_t n_tok, const int32_t *layout, const int32_t *seq, int32_t *run);

/**
 * For each token of a batch split into calls by run (dsv4i_engram_calls), how many
 * of its hc gates, copy 0 first, fall in the vectorised part of its call's exp
 * split (the first floor(len·hc/32)·32 gates of a call of len tokens; the rest
 * take the scalar exp): 0..hc, the per-token table the CUDA Engram kernel reads.
 * run, vec int32 [n_tok] (host); vec may be run (in place).
 */
void dsv4i_engram_gate_vec(int32_t n_tok, int32_t hc, const int32_t *run, int32_t *vec);

/** lib/cpu/cpu_backend.c */
extern const dsv4i_backend_entry dsv4i_cpu_backend_entry;
/** lib/gpu/gpu_backend.c (builds with nvcc only) */
extern const dsv4i_backend_entry dsv4i_cuda_backend_entry;

#endif /* DSV4I_BACKEND_IMPL_H */
