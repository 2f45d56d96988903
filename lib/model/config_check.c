/*
 * Value checks of a parsed config (dsv4i_config_check_values): sizes
 * positive and bounded, the dims that 32-wide quantisation blocks cut
 * multiples of 32, RoPE tail inside the heads, token ids in the vocabulary,
 * feature choices this engine implements. Messages name the config.json key.
 */
#include <math.h>

#include "model/config.h"

/* Upper bound for any single dim, so every tensor size fits in 64 bits. */
#define DIM_MAX (1 << 24)
#define ROWS_MAX (INT64_C(1) << 36)

#define TRY(x)                    \
  do {                            \
    dsv4_status s_ = (x);         \
    if (s_ != DSV4_OK) return s_; \
  } while (0)

static dsv4_status in_range(const char *key, int64_t v, int64_t lo, int64_t hi) {
  if (v < lo || v > hi)
    return dsv4i_error(DSV4_ERR_CONFIG_VALUE, "%s = %lld is outside [%lld, %lld]", key,
                       (long long)v, (long long)lo, (long long)hi);
  return DSV4_OK;
}

static dsv4_status dim32(const char *key, int64_t v, const char *why) {
  TRY(in_range(key, v, 1, DIM_MAX));
  if (v % 32 != 0)
    return dsv4i_error(DSV4_ERR_CONFIG_VALUE, "%s = %lld is not a multiple of 32 (%s)", key,
                       (long long)v, why);
  return DSV4_OK;
}

static dsv4_status token(const char *key, int32_t id, int32_t vocab) {
  if (id < 0 || id >= vocab)
    return dsv4i_error(DSV4_ERR_CONFIG_VALUE,
                       "%s = %d is outside the vocabulary [0, %d) (text_config.vocab_size)", key,
                       (int)id, (int)vocab);
  return DSV4_OK;
}

static dsv4_status positive_f(const char *key, float v) {
  if (!(v > 0.0f))
    return dsv4i_error(DSV4_ERR_CONFIG_VALUE, "%s = %g must be positive", key, (double)v);
  return DSV4_OK;
}

/* An epsilon: finite and > 0 (a zero one divides by zero on an all-zero row). */
static dsv4_status epsilon(const char *key, float v) {
  if (!(v > 0.0f) || !isfinite(v))
    return dsv4i_error(DSV4_ERR_CONFIG_VALUE, "%s = %g must be finite and positive", key,
                       (double)v);
  return DSV4_OK;
}

/* YaRN (spec §5.2): the ramp runs from beta_fast rotations down to beta_slow. */
static dsv4_status check_rope_scaling(const dsv4i_config *c) {
  TRY(in_range("text_config.rope_scaling.original_max_position_embeddings", c->original_seq_len, 1,
               INT64_C(1) << 40));
  if (!(c->rope_factor >= 1.0f) || !isfinite(c->rope_factor))
    return dsv4i_error(DSV4_ERR_CONFIG_VALUE,
                       "text_config.rope_scaling.factor = %g must be finite and >= 1",
                       (double)c->rope_factor);
  TRY(positive_f("text_config.rope_scaling.beta_fast", c->beta_fast));
  TRY(positive_f("text_config.rope_scaling.beta_slow", c->beta_slow));
  if (!(c->beta_fast > c->beta_slow) || !isfinite(c->beta_fast))
    return dsv4i_error(DSV4_ERR_CONFIG_VALUE,
                       "text_config.rope_scaling.beta_fast = %g must be finite and greater than "
                       "text_config.rope_scaling.beta_slow = %g",
                       (double)c->beta_fast, (double)c->beta_slow);
  return DSV4_OK;
}

static dsv4_status check_attention(const dsv4i_config *c) {
  TRY(in_range("text_config.vocab_size", c->vocab_size, 1, DIM_MAX));
  TRY(dim32("text_config.hidden_size", c->dim, "fp8 32x32 weight blocks and 32-wide activation blocks"));
  TRY(in_range("text_config.num_hidden_layers", c->n_layers, 1, DSV4I_MAX_LIST));
  TRY(in_range("text_config.num_attention_heads", c->n_heads, 1, 4096));
  if (c->n_kv_heads != 1)
    return dsv4i_error(DSV4_ERR_CONFIG_VALUE,
                       "text_config.num_key_value_heads = %d; V4.1 attention is MQA over one latent (1)",
                       (int)c->n_kv_heads);
  TRY(dim32("text_config.head_dim", c->head_dim, "the KV latent is quantised in blocks of 32"));
  TRY(in_range("text_config.qk_rope_head_dim", c->rope_head_dim, 2, DIM_MAX));
  if (c->rope_head_dim % 2 != 0)
    return dsv4i_error(DSV4_ERR_CONFIG_VALUE, "text_config.qk_rope_head_dim = %d must be even",
                       (int)c->rope_head_dim);
  if (c->rope_head_dim > c->head_dim)
    return dsv4i_error(DSV4_ERR_CONFIG_VALUE,
                       "text_config.qk_rope_head_dim = %d is larger than text_config.head_dim = %d",
                       (int)c->rope_head_dim, (int)c->head_dim);
  TRY(dim32("text_config.q_lora_rank", c->q_lora_rank, "input of fp8 wq_b, activation blocks of 32"));
  TRY(dim32("text_config.o_lora_rank", c->o_lora_rank, "fp8 wo_b input blocks of 32"));
  TRY(in_range("text_config.o_groups", c->o_groups, 1, c->n_heads));
  if (c->n_heads % c->o_groups != 0)
    return dsv4i_error(DSV4_ERR_CONFIG_VALUE,
                       "text_config.o_groups = %d does not divide text_config.num_attention_heads = %d",
                       (int)c->o_groups, (int)c->n_heads);
  TRY(dim32("text_config.num_attention_heads * head_dim / o_groups",
            (int64_t)c->n_heads * c->head_dim / c->o_groups, "fp8 wo_a input blocks of 32"));
  TRY(in_range("text_config.sliding_window", c->window_size, 1, DIM_MAX));
  TRY(in_range("text_config.index_n_heads", c->index_n_heads, 1, 4096));
  TRY(dim32("text_config.index_head_dim", c->index_head_dim, "index keys are MXFP4 in blocks of 32"));
  if (c->rope_head_dim > c->index_head_dim)
    return dsv4i_error(DSV4_ERR_CONFIG_VALUE,
                       "text_config.qk_rope_head_dim = %d is larger than text_config.index_head_dim = %d",
                       (int)c->rope_head_dim, (int)c->index_head_dim);
  TRY(in_range("text_config.index_topk", c->index_topk, 1, DIM_MAX));
  TRY(in_range("text_config.candidate_topk_blocks", c->candidate_topk_blocks, 1, DIM_MAX));
  TRY(in_range("text_config.candidate_block_size", c->candidate_block_size, 1, DIM_MAX));
  TRY(in_range("text_config.max_position_embeddings", c->max_position_embeddings, 1, INT64_C(1) << 40));
  TRY(positive_f("text_config.rope_theta", c->rope_theta));
  TRY(positive_f("text_config.compress_rope_theta", c->compress_rope_theta));
  TRY(check_rope_scaling(c));
  TRY(epsilon("text_config.rms_norm_eps", c->norm_eps));
  return DSV4_OK;
}

static dsv4_status check_moe_hc(const dsv4i_config *c) {
  TRY(in_range("text_config.n_routed_experts", c->n_routed_experts, 1, 4096));
  TRY(in_range("text_config.num_experts_per_tok", c->n_experts_per_tok, 1, c->n_routed_experts));
  if (c->n_shared_experts != 1)
    return dsv4i_error(DSV4_ERR_CONFIG_VALUE,
                       "text_config.n_shared_experts = %d; V4.1 has exactly one shared expert per block",
                       (int)c->n_shared_experts);
  TRY(dim32("text_config.moe_intermediate_size", c->moe_inter_dim,
            "MXFP4 expert scales per 32 and fp8 shared-expert blocks"));
  TRY(positive_f("text_config.swiglu_limit", c->swiglu_limit));
  TRY(positive_f("text_config.routed_scaling_factor", c->route_scale));
  TRY(in_range("text_config.hc_mult", c->hc_mult, 1, 64));
  TRY(in_range("text_config.hc_sinkhorn_iters", c->hc_sinkhorn_iters, 1, 1000));
  TRY(epsilon("text_config.hc_eps", c->hc_eps));
  return DSV4_OK;
}

static dsv4_status check_engram_dspark(const dsv4i_config *c) {
  if (c->n_engram > 0) {
    TRY(in_range("text_config.engram_max_ngram_size", c->engram_max_ngram, 2, 16));
    TRY(in_range("text_config.engram_n_heads", c->engram_n_heads, 1, 4096));
    TRY(dim32("text_config.engram_head_dim", c->engram_head_dim, "Engram rows carry one UE8M0 scale per 32"));
    TRY(in_range("text_config.engram_vocab_size", c->engram_vocab_size, 1, ROWS_MAX));
    TRY(in_range("text_config.engram_compressed_vocab_size", c->engram_compressed_vocab_size, 1,
                 c->vocab_size));
    TRY(token("text_config.engram_pad_token_id", c->engram_pad_id, c->vocab_size));
    for (int32_t i = 0; i < c->n_engram; i++)
      if (c->engram_num_embeddings[i] < 1 || c->engram_num_embeddings[i] > ROWS_MAX)
        return dsv4i_error(DSV4_ERR_CONFIG_VALUE,
                           "text_config.engram_num_embeddings[%d] = %lld is outside [1, 2^36]", (int)i,
                           (long long)c->engram_num_embeddings[i]);
  }
  TRY(in_range("text_config.num_nextn_predict_layers", c->n_mtp_layers, 0,
               DSV4I_MAX_LIST - c->n_layers));
  if (c->n_mtp_layers > 0) {
    TRY(in_range("text_config.dspark_block_size", c->dspark_block_size, 1, 64));
    TRY(token("text_config.dspark_noise_token_id", c->dspark_noise_token_id, c->vocab_size));
    TRY(in_range("text_config.dspark_markov_rank", c->dspark_markov_rank, 1, DIM_MAX));
    TRY(in_range("text_config.dspark_n_routed_experts", c->dspark_n_routed_experts, 1, 4096));
    TRY(in_range("text_config.dspark_num_experts_per_tok", c->dspark_n_experts_per_tok, 1,
                 c->dspark_n_routed_experts));
  }
  return DSV4_OK;
}

static dsv4_status check_vision(const dsv4i_config *c) {
  if (!c->has_vision) return DSV4_OK;
  TRY(in_range("vision_config.num_hidden_layers", c->vision_n_layers, 1, 4096));
  TRY(in_range("vision_config.hidden_size", c->vision_dim, 1, DIM_MAX));
  TRY(in_range("vision_config.num_attention_heads", c->vision_n_heads, 1, c->vision_dim));
  if (c->vision_dim % c->vision_n_heads != 0)
    return dsv4i_error(DSV4_ERR_CONFIG_VALUE,
                       "vision_config.num_attention_heads = %d does not divide vision_config.hidden_size = %d",
                       (int)c->vision_n_heads, (int)c->vision_dim);
  TRY(in_range("vision_config.intermediate_size", c->vision_inter_dim, 1, DIM_MAX));
  TRY(in_range("vision_config.patch_size", c->vision_patch_size, 1, 1024));
  TRY(in_range("vision_config.downsample_ratio", c->vision_downsample, 1, 64));
  TRY(in_range("vision_config.max_image_tokens", c->vision_max_image_tokens, 1, DIM_MAX));
  TRY(in_range("vision_config.min_pixels", c->vision_min_pixels, 1, INT64_C(1) << 40));
  TRY(positive_f("vision_config.rope_theta", c->vision_rope_theta));
  if (c->vision_max_wh_ratio < 0.0f)
    return dsv4i_error(DSV4_ERR_CONFIG_VALUE, "vision_config.max_wh_ratio = %g is negative",
                       (double)c->vision_max_wh_ratio);
  return DSV4_OK;
}

dsv4_status dsv4i_config_check_values(const dsv4i_config *c) {
  TRY(check_attention(c));
  TRY(check_moe_hc(c));
  TRY(check_engram_dspark(c));
  TRY(check_vision(c));
  TRY(token("bos_token_id", c->bos_token_id, c->vocab_size));
  TRY(token("eos_token_id", c->eos_token_id, c->vocab_size));
  TRY(token("pad_token_id", c->pad_token_id, c->vocab_size));
  TRY(token("image_token_id", c->image_token_id, c->vocab_size));
  return DSV4_OK;
}
