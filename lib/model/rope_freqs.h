/*
 * The RoPE / YaRN frequency table of a layer (spec §8.3), computed on the
 * host once per layer by every backend (the CPU's attention loader, the CUDA
 * backend's weight upload). Thread-safe (pure).
 */
#ifndef DSV4I_MODEL_ROPE_FREQS_H
#define DSV4I_MODEL_ROPE_FREQS_H

#include <stdint.h>

#include "base/base.h"

/**
 * The fp32 rotary frequencies of the reference's precompute_freqs_cis:
 * freq[i] = fp32(1) / fp32(base^(fp32(2i)/fp32(rope_dim))) with the power
 * correctly rounded to fp32; with original_seq_len > 0, YaRN:
 * low = max(floor(corr(beta_fast)), 0), high = min(ceil(corr(beta_slow)), rope_dim−1)
 * (corr in double as the reference), ramp = clamp((i − low)/max(high−low, 1e-3), 0, 1),
 * smooth = 1 − ramp, freq = (freq/factor)·(1 − smooth) + freq·smooth, each step
 * rounded to fp32 as the reference's torch ops.
 * Ratio-0 layers: base = rope_theta, original_seq_len = 0; ratio > 0:
 * base = compress_rope_theta with the YaRN arguments from the config.
 * @param rope_dim even, 2..256; freqs [out] float [rope_dim/2].
 * @return DSV4_OK; DSV4_ERR_INVALID_ARG.
 */
dsv4_status dsv4i_rope_freqs(int32_t rope_dim, double base, int64_t original_seq_len,
                             double factor, double beta_fast, double beta_slow, float *freqs);

#endif /* DSV4I_MODEL_ROPE_FREQS_H */
