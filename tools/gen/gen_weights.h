/*
 * Weights of a generated checkpoint: one deterministic value per element
 * (gen_rng.h streams keyed by seed, tensor name and row) and its encoding in
 * the release's storage format (spec §3.2), tensor by tensor and row block
 * by row block, straight into a safetensors writer. Nothing larger than a
 * row group (about 16 MB of values) is held, except a quantised weight's
 * scale tensor, kept between the weight and its `.scale` when it is at
 * most 64 MiB (larger ones, i.e. real-size Engram tables, are recomputed).
 *
 * Values (N(0, v): mean 0, variance v; fan_in = the logical input width):
 *   projections, experts, compressor/indexer, main_proj, vision: N(0, 1/fan_in)
 *   sublayer outputs (attn.wo_b, routed and shared experts' ffn w2, and the
 *   value rows of engram.wkv, its last `dim` rows): gain x that std (damping)
 *   embed, Engram table rows, image_* rows, Markov embed: N(0, 1)
 *   head: the planted successor head (gen_plant.h), or N(0, 1/dim)
 *   norm weights, engram.q_weight/k_weight: 1 + 0.1 N(0, 1)
 *   hc_*_fn: N(0, 1/fan_in); hc_*_base: pre and post 0.5 N(0, 1), comb
 *   0.4 N(0, 1) plus 2.5 on the diagonal (near-identity mixing);
 *   hc_*_scale: 0.5 + 0.1 N(0, 1); attn_sink 0.7 N(0, 1); gate.bias and
 *   gate.bias_vl 0.1 N(0, 1); other 1-D tensors (biases) 0.02 N(0, 1);
 *   markov_head.head 0.3 x N(0, 1/fan_in)
 * Quantised tensors are quantised from the bf16-rounded values: dense fp8
 * with one UE8M0 scale per 32x32 block, 2^ceil(log2(max(amax,1e-4)/448))
 * (the act_quant rule, spec §8.1); routed experts MXFP4 per 32 along K and
 * Engram tables fp8 per 32 along the row, with the library's own
 * dsv4i_fp4_act_quant_ue8m0 / dsv4i_act_quant.
 */
#ifndef DSV4_GEN_WEIGHTS_H
#define DSV4_GEN_WEIGHTS_H

#include <stdint.h>

#include "gen_plant.h"
#include "io/safetensors.h"
#include "model/config.h"

typedef struct gen_weights gen_weights;

/**
 * A weight generator over a config and its contract (both borrowed, and
 * `plant` too, which may be NULL for plain random embed/head).
 * gain: std multiplier of the sublayer output projections (0.3 default).
 */
dsv4_status gen_weights_create(const dsv4i_config *cfg, const dsv4i_contract *contract,
                               uint64_t seed, float gain, const gen_plant *plant,
                               gen_weights **out);
void gen_weights_free(gen_weights *g);

/**
 * Largest scale tensor kept in memory between a weight and its `.scale`
 * (default 64 MiB); larger ones are recomputed. The output is the same
 * either way: tests set 0 to exercise the recompute path.
 */
void gen_weights_set_scale_cache(gen_weights *g, uint64_t max_bytes);

/**
 * Values generated per row group (default 4 Mi; at least one scale block of
 * rows is always taken). The output does not depend on it: tests set it
 * small to cut every tensor into many groups.
 */
void gen_weights_set_group_values(gen_weights *g, int64_t values);

/** Write the payload of contract tensor `spec` (declared in w) to w. */
dsv4_status gen_weights_write(gen_weights *g, const dsv4i_tensor_spec *spec,
                              dsv4i_st_writer *w);

/**
 * The stored values of row `row` of a bf16 or f32 tensor, as float (what a
 * loader reads back: bf16-rounded for bf16 tensors). out: float[cols].
 */
dsv4_status gen_weights_row(gen_weights *g, const char *name, int64_t row, float *out);

#endif /* DSV4_GEN_WEIGHTS_H */
