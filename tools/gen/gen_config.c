/*
 * config.json for the generated checkpoints (see gen_config.h). The key set
 * and order follow the release's nested config (spec §2.1) as the fixtures
 * carry it; only the numbers differ between the tiny and real-dims forms.
 */
#include "gen_config.h"

#include "model/engram_hash.h"

#include <jansson.h>
#include <stdlib.h>
#include <string.h>

/* Every number the text_config section holds, plus the layer lists. */
typedef struct dims {
  int32_t vocab, dim, n_layers, n_heads, head_dim, rope_dim, q_lora, o_lora, o_groups;
  int32_t window, n_experts, top_k, inter, index_heads, index_dim, index_topk;
  int32_t cand_blocks, cand_block_size, engram_heads, engram_head_dim, engram_ngram;
  int64_t engram_vocab;
  int32_t n_mtp, dspark_block, markov_rank, dspark_experts, dspark_top_k;
  int32_t ratios[DSV4I_MAX_LIST];
  int32_t kv[DSV4I_MAX_LIST], n_kv, idx[DSV4I_MAX_LIST], n_idx, cand;
  int32_t engram[DSV4I_MAX_ENGRAM], n_engram;
  int32_t targets[DSV4I_MAX_LIST], n_targets;
} dims;

dsv4_status gen_engram_rows(int64_t vocab, int32_t n_layers, int32_t max_ngram, int32_t n_heads,
                            int64_t *rows) {
  int32_t n_cols = (max_ngram - 1) * n_heads;
  int64_t *primes = dsv4i_calloc((size_t)(n_layers > 0 ? n_layers : 1) * (size_t)n_cols,
                                 sizeof *primes, "Engram primes");
  if (!primes) return DSV4_ERR_OUT_OF_MEMORY;
  dsv4_status s = dsv4i_engram_primes(vocab, n_layers, max_ngram, n_heads, primes);
  for (int32_t l = 0; s == DSV4_OK && l < n_layers; l++) {
    rows[l] = 0;
    for (int32_t c = 0; c < n_cols; c++) rows[l] += primes[(size_t)l * (size_t)n_cols + (size_t)c];
  }
  free(primes);
  return s;
}

/* Ten layers + three DSpark stages, every role of spec §2.3 at least once
 * (the layout of the tiny-v41-* fixtures): 0 window; 1 window + Engram;
 * 2 and 4 ratio-2 KV/index sources (4 also Engram); 3, 5 ratio-2 consumers;
 * 6 ratio-1 KV/index/candidate source; 7, 9 consumers; 8 index source
 * without own keys (candidate-masked); 7..9 feed DSpark. */
static void tiny_dims(dims *d) {
  static const int32_t ratios[] = {0, 0, 2, 2, 2, 2, 1, 1, 1, 1, 0, 0, 0};
  *d = (dims){.dim = 128, .n_layers = 10, .n_heads = 4, .head_dim = 128, .rope_dim = 64,
              .q_lora = 96, .o_lora = 64, .o_groups = 2, .window = 16, .n_experts = 16,
              .top_k = 3, .inter = 64, .index_heads = 16, .index_dim = 128, .index_topk = 112,
              .cand_blocks = 14, .cand_block_size = 8, .engram_heads = 4, .engram_head_dim = 32,
              .engram_ngram = 4, .engram_vocab = 100, .n_mtp = 3, .dspark_block = 5,
              .markov_rank = 32, .dspark_experts = 8, .dspark_top_k = 2,
              .kv = {2, 4, 6}, .n_kv = 3, .idx = {2, 4, 6, 8}, .n_idx = 4, .cand = 6,
              .engram = {1, 4}, .n_engram = 2, .targets = {7, 8, 9}, .n_targets = 3};
  memcpy(d->ratios, ratios, sizeof ratios);
}

/*
 * Release dims (spec §2.1) with N backbone layers laid out like the
 * release, scaled: the first half is the encoder (window-only layers first:
 * 2 when N >= 8, else 1; then ratio 2), the second half the decoder
 * (ratio 1). KV sources: the first encoder ratio-2 layer and every 6th
 * after it, and the first decoder layer, which is also the candidate
 * source. Index sources: the KV sources plus every s-th decoder layer
 * (s = 4, or less for short decoders, so that an index source without own
 * keys exists whenever the decoder has two layers). Engram: layer 1 and the
 * last encoder KV source (else the first decoder layer, else the last
 * layer) when that is above 1. DSpark: min(3, N) stages tapping the last
 * layers. N = 40 gives the release's lists exactly.
 */
static dsv4_status real_dims(dims *d, int32_t n) {
  int32_t n_mtp = n < 3 ? n : 3;
  if (n < 2 || n + n_mtp > DSV4I_MAX_LIST)
    return dsv4i_error(DSV4_ERR_INVALID_ARG, "--layers %d: real dims need 2 .. %d layers", (int)n,
                       DSV4I_MAX_LIST - 3);
  *d = (dims){.dim = 5120, .n_layers = n, .n_heads = 64, .head_dim = 512, .rope_dim = 64,
              .q_lora = 1280, .o_lora = 1024, .o_groups = 8, .window = 128, .n_experts = 384,
              .top_k = 6, .inter = 2304, .index_heads = 32, .index_dim = 128, .index_topk = 512,
              .cand_blocks = 2048, .cand_block_size = 8, .engram_heads = 8,
              .engram_head_dim = 256, .engram_ngram = 4, .engram_vocab = 16000000, .n_mtp = n_mtp,
              .dspark_block = 5, .markov_rank = 256, .dspark_experts = 128, .dspark_top_k = 3};
  int32_t n_win = n >= 8 ? 2 : 1;
  int32_t n_enc = n / 2 > n_win ? n / 2 : n_win; /* window + ratio-2 layers */
  int32_t dec0 = n_enc, n_dec = n - n_enc;
  int32_t step = n_dec >= 8 ? 4 : (n_dec / 2 > 1 ? n_dec / 2 : 1);
  for (int32_t l = 0; l < n; l++) d->ratios[l] = l < n_win ? 0 : (l < n_enc ? 2 : 1);
  for (int32_t l = n_win; l < n_enc; l += 6) d->kv[d->n_kv++] = d->idx[d->n_idx++] = l;
  int32_t last_enc_kv = d->n_kv ? d->kv[d->n_kv - 1] : -1;
  d->kv[d->n_kv++] = dec0;
  for (int32_t l = dec0; l < n; l += step) d->idx[d->n_idx++] = l;
  d->cand = dec0;
  d->engram[d->n_engram++] = 1;
  int32_t e2 = last_enc_kv > 1 ? last_enc_kv : (dec0 > 1 ? dec0 : n - 1);
  if (e2 > 1) d->engram[d->n_engram++] = e2;
  for (int32_t i = 0; i < n_mtp; i++) d->targets[d->n_targets++] = n - n_mtp + i;
  for (int32_t i = 0; i < n_mtp; i++) d->ratios[n + i] = 0;
  return DSV4_OK;
}

static json_t *int_list(const int32_t *v, int32_t n) {
  json_t *a = json_array();
  for (int32_t i = 0; i < n; i++) json_array_append_new(a, json_integer(v[i]));
  return a;
}

#define SETI(o, k, v) json_object_set_new(o, k, json_integer(v))
#define SETR(o, k, v) json_object_set_new(o, k, json_real(v))
#define SETS(o, k, v) json_object_set_new(o, k, json_string(v))

static json_t *quant_section(void) {
  json_t *q = json_object();
  SETS(q, "activation_scheme", "dynamic");
  SETS(q, "expert_dtype", "fp4");
  SETS(q, "quant_method", "fp8");
  SETS(q, "scale_fmt", "ue8m0");
  json_t *bs = json_array();
  json_array_append_new(bs, json_integer(32));
  json_array_append_new(bs, json_integer(32));
  json_object_set_new(q, "weight_block_size", bs);
  return q;
}

/* The release's vision tower (spec §2.1 vision_config). */
static json_t *vision_section(void) {
  json_t *v = json_object();
  SETI(v, "num_hidden_layers", 32);
  SETI(v, "hidden_size", 1024);
  SETI(v, "num_attention_heads", 16);
  SETI(v, "intermediate_size", 2816);
  SETI(v, "patch_size", 14);
  SETI(v, "rope_theta", 10000);
  SETI(v, "downsample_ratio", 3);
  SETI(v, "max_image_tokens", 1024);
  SETI(v, "min_pixels", 295936);
  json_object_set_new(v, "max_wh_ratio", json_null());
  return v;
}

static json_t *text_section(const dims *d, const gen_tok_facts *tok, const int64_t *rows) {
  json_t *t = json_object();
  int32_t n_total = d->n_layers + d->n_mtp;
  SETS(t, "model_type", "deepseek_v41_text");
  SETI(t, "vocab_size", d->vocab);
  SETI(t, "hidden_size", d->dim);
  SETI(t, "num_hidden_layers", d->n_layers);
  SETI(t, "num_attention_heads", d->n_heads);
  SETI(t, "num_key_value_heads", 1);
  SETI(t, "head_dim", d->head_dim);
  SETI(t, "qk_rope_head_dim", d->rope_dim);
  SETI(t, "q_lora_rank", d->q_lora);
  SETI(t, "o_lora_rank", d->o_lora);
  SETI(t, "o_groups", d->o_groups);
  SETS(t, "hidden_act", "silu");
  SETR(t, "swiglu_limit", 10.0);
  SETR(t, "rms_norm_eps", 1e-20);
  SETI(t, "max_position_embeddings", 1048576);
  SETI(t, "rope_theta", 10000);
  json_t *rs = json_object();
  SETI(rs, "beta_fast", 32);
  SETI(rs, "beta_slow", 1);
  SETI(rs, "factor", 16);
  SETI(rs, "original_max_position_embeddings", 65536);
  SETS(rs, "rope_type", "yarn");
  json_object_set_new(t, "rope_scaling", rs);
  SETI(t, "compress_rope_theta", 160000);
  SETI(t, "n_routed_experts", d->n_experts);
  SETI(t, "n_shared_experts", 1);
  SETI(t, "num_experts_per_tok", d->top_k);
  SETI(t, "moe_intermediate_size", d->inter);
  SETS(t, "scoring_func", "sqrtsoftplus");
  SETS(t, "topk_method", "noaux_tc");
  json_object_set_new(t, "norm_topk_prob", json_true());
  SETR(t, "routed_scaling_factor", 1.5);
  SETI(t, "sliding_window", d->window);
  json_object_set_new(t, "compress_ratios", int_list(d->ratios, n_total));
  json_object_set_new(t, "kv_source_layer_ids", int_list(d->kv, d->n_kv));
  json_object_set_new(t, "index_source_layer_ids", int_list(d->idx, d->n_idx));
  SETI(t, "index_n_heads", d->index_heads);
  SETI(t, "index_head_dim", d->index_dim);
  SETI(t, "index_topk", d->index_topk);
  SETI(t, "candidate_source_layer_id", d->cand);
  SETI(t, "candidate_topk_blocks", d->cand_blocks);
  SETI(t, "candidate_block_size", d->cand_block_size);
  SETI(t, "hc_mult", 4);
  SETI(t, "hc_sinkhorn_iters", 20);
  SETR(t, "hc_eps", 1e-6);
  json_object_set_new(t, "engram_layer_ids", int_list(d->engram, d->n_engram));
  json_t *ne = json_array();
  for (int32_t i = 0; i < d->n_engram; i++) json_array_append_new(ne, json_integer(rows[i]));
  json_object_set_new(t, "engram_num_embeddings", ne);
  SETI(t, "engram_max_ngram_size", d->engram_ngram);
  SETI(t, "engram_vocab_size", d->engram_vocab);
  SETI(t, "engram_n_heads", d->engram_heads);
  SETI(t, "engram_head_dim", d->engram_head_dim);
  SETI(t, "engram_pad_token_id", tok->pad);
  SETI(t, "engram_compressed_vocab_size", tok->engram_classes);
  SETI(t, "num_nextn_predict_layers", d->n_mtp);
  SETI(t, "dspark_block_size", d->dspark_block);
  SETI(t, "dspark_noise_token_id", tok->noise);
  json_object_set_new(t, "dspark_target_layer_ids", int_list(d->targets, d->n_targets));
  SETI(t, "dspark_markov_rank", d->markov_rank);
  SETI(t, "dspark_n_routed_experts", d->dspark_experts);
  SETI(t, "dspark_num_experts_per_tok", d->dspark_top_k);
  json_object_set_new(t, "attention_bias", json_false());
  SETR(t, "attention_dropout", 0.0);
  SETR(t, "initializer_range", 0.02);
  json_object_set_new(t, "tie_word_embeddings", json_false());
  json_object_set_new(t, "use_cache", json_true());
  return t;
}

dsv4_status gen_config_make(const gen_shape *shape, const gen_tok_facts *tok, char **json_out,
                            dsv4i_config *cfg) {
  dims d;
  *json_out = NULL;
  if (shape->real_dims) {
    dsv4_status s = real_dims(&d, shape->n_layers);
    if (s) return s;
    /* The release vocabulary; the tokenizer's ids are its first ids. */
    d.vocab = tok->vocab_size > 129280 ? tok->vocab_size : 129280;
    if (shape->engram_rows > 0) {
      /* ~rows / (orders x heads) per prime: the table has about `rows` rows */
      int64_t per = shape->engram_rows / ((int64_t)(d.engram_ngram - 1) * d.engram_heads);
      d.engram_vocab = per > 2 ? per : 2;
    }
  } else {
    tiny_dims(&d);
    d.vocab = tok->vocab_size;
  }
  int64_t rows[DSV4I_MAX_ENGRAM];
  dsv4_status s = gen_engram_rows(d.engram_vocab, d.n_engram, d.engram_ngram, d.engram_heads, rows);
  if (s) return s;

  json_t *root = json_object();
  json_t *arch = json_array();
  json_array_append_new(arch, json_string("DeepseekV41ForCausalLM"));
  json_object_set_new(root, "architectures", arch);
  SETS(root, "model_type", "deepseek_v41");
  SETS(root, "dtype", "bfloat16");
  SETI(root, "bos_token_id", tok->bos);
  SETI(root, "eos_token_id", tok->eos);
  SETI(root, "pad_token_id", tok->pad);
  SETI(root, "image_token_id", tok->image);
  json_object_set_new(root, "quantization_config", quant_section());
  json_object_set_new(root, "text_config", text_section(&d, tok, rows));
  if (shape->real_dims && shape->vision)
    json_object_set_new(root, "vision_config", vision_section());
  char *text = json_dumps(root, JSON_INDENT(2) | JSON_PRESERVE_ORDER | JSON_REAL_PRECISION(15));
  json_decref(root);
  if (!text) return dsv4i_error(DSV4_ERR_OUT_OF_MEMORY, "config.json: out of memory");
  s = dsv4i_config_parse(text, strlen(text), "generated config.json", cfg);
  if (s) {
    free(text);
    return s;
  }
  *json_out = text;
  return DSV4_OK;
}
