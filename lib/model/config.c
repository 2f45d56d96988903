/*
 * config.json (nested V4.1 form, spec §2.1) -> dsv4i_config. Every key the
 * config struct holds is required with its JSON type; messages name the
 * key path ("text_config.index_topk"). The role table and the consistency
 * of the layer lists are roles.c, the value checks config_check.c.
 */
#include <errno.h>
#include <float.h>
#include <jansson.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "model/config.h"
#include "io/json_util.h"

/* One parse: the file name for messages. */
typedef struct pctx {
  const char *origin;
} pctx;

/* "sec.key" or "key" at the root. */
static void key_path(char *buf, size_t cap, const char *sec, const char *key) {
  snprintf(buf, cap, "%s%s%s", sec, *sec ? "." : "", key);
}

static dsv4_status need(const pctx *p, const json_t *obj, const char *sec, const char *key,
                        json_t **out) {
  char kp[128];
  key_path(kp, sizeof kp, sec, key);
  *out = json_object_get(obj, key);
  if (!*out) return dsv4i_error(DSV4_ERR_CONFIG_KEY, "%s: required key %s is missing", p->origin, kp);
  return DSV4_OK;
}

static dsv4_status wrong_type(const pctx *p, const char *sec, const char *key, const char *want,
                              const json_t *v) {
  char kp[128];
  key_path(kp, sizeof kp, sec, key);
  return dsv4i_error(DSV4_ERR_CONFIG_KEY, "%s: %s must be %s, found %s", p->origin, kp, want,
                     dsv4i_json_kind(v));
}

static dsv4_status get_obj(const pctx *p, const json_t *o, const char *sec, const char *key,
                           json_t **out) {
  dsv4_status s = need(p, o, sec, key, out);
  if (s) return s;
  return json_is_object(*out) ? DSV4_OK : wrong_type(p, sec, key, "an object", *out);
}

static dsv4_status get_i64(const pctx *p, const json_t *o, const char *sec, const char *key,
                           int64_t *out) {
  json_t *v;
  dsv4_status s = need(p, o, sec, key, &v);
  if (s) return s;
  if (!json_is_integer(v)) return wrong_type(p, sec, key, "an integer", v);
  *out = (int64_t)json_integer_value(v);
  return DSV4_OK;
}

static dsv4_status get_i32(const pctx *p, const json_t *o, const char *sec, const char *key,
                           int32_t *out) {
  int64_t v = 0;
  dsv4_status s = get_i64(p, o, sec, key, &v);
  if (s) return s;
  if (v < INT32_MIN || v > INT32_MAX) {
    char kp[128];
    key_path(kp, sizeof kp, sec, key);
    return dsv4i_error(DSV4_ERR_CONFIG_VALUE, "%s: %s = %lld does not fit in 32 bits", p->origin,
                       kp, (long long)v);
  }
  *out = (int32_t)v;
  return DSV4_OK;
}

static dsv4_status get_f32(const pctx *p, const json_t *o, const char *sec, const char *key,
                           float *out) {
  json_t *v;
  dsv4_status s = need(p, o, sec, key, &v);
  if (s) return s;
  if (!json_is_number(v)) return wrong_type(p, sec, key, "a number", v);
  double d = json_number_value(v);
  if (!(d >= -FLT_MAX && d <= FLT_MAX)) { /* the conversion below would be undefined */
    char kp[128];
    key_path(kp, sizeof kp, sec, key);
    return dsv4i_error(DSV4_ERR_CONFIG_VALUE, "%s: %s = %g is not representable as a float",
                       p->origin, kp, d);
  }
  *out = (float)d;
  return DSV4_OK;
}

static dsv4_status get_bool(const pctx *p, const json_t *o, const char *sec, const char *key,
                            int32_t *out) {
  json_t *v;
  dsv4_status s = need(p, o, sec, key, &v);
  if (s) return s;
  if (!json_is_boolean(v)) return wrong_type(p, sec, key, "a boolean", v);
  *out = json_is_true(v) ? 1 : 0;
  return DSV4_OK;
}

/* A string key that must equal one supported value. */
static dsv4_status get_str_is(const pctx *p, const json_t *o, const char *sec, const char *key,
                              const char *want) {
  json_t *v;
  dsv4_status s = need(p, o, sec, key, &v);
  if (s) return s;
  if (!json_is_string(v)) return wrong_type(p, sec, key, "a string", v);
  if (strcmp(json_string_value(v), want) != 0) {
    char kp[128];
    key_path(kp, sizeof kp, sec, key);
    return dsv4i_error(DSV4_ERR_CONFIG_VALUE, "%s: %s is \"%s\"; only \"%s\" is supported",
                       p->origin, kp, json_string_value(v), want);
  }
  return DSV4_OK;
}

/* An array of integers, at most cap entries (64-bit values). */
static dsv4_status get_list(const pctx *p, const json_t *o, const char *sec, const char *key,
                            int64_t *vals, int32_t cap, int32_t *n) {
  json_t *a;
  char kp[128];
  dsv4_status s = need(p, o, sec, key, &a);
  if (s) return s;
  if (!json_is_array(a)) return wrong_type(p, sec, key, "an array of integers", a);
  key_path(kp, sizeof kp, sec, key);
  size_t len = json_array_size(a);
  if (len > (size_t)cap)
    return dsv4i_error(DSV4_ERR_CONFIG_VALUE, "%s: %s has %zu entries; at most %d are supported",
                       p->origin, kp, len, (int)cap);
  for (size_t i = 0; i < len; i++) {
    json_t *e = json_array_get(a, i);
    if (!json_is_integer(e))
      return dsv4i_error(DSV4_ERR_CONFIG_KEY, "%s: %s[%zu] must be an integer, found %s",
                         p->origin, kp, i, dsv4i_json_kind(e));
    vals[i] = (int64_t)json_integer_value(e);
  }
  *n = (int32_t)len;
  return DSV4_OK;
}

static dsv4_status get_list32(const pctx *p, const json_t *o, const char *sec, const char *key,
                              int32_t *vals, int32_t cap, int32_t *n) {
  int64_t tmp[DSV4I_MAX_LIST];
  dsv4_status s = get_list(p, o, sec, key, tmp, cap, n);
  if (s) return s;
  for (int32_t i = 0; i < *n; i++) {
    if (tmp[i] < INT32_MIN || tmp[i] > INT32_MAX) {
      char kp[128];
      key_path(kp, sizeof kp, sec, key);
      return dsv4i_error(DSV4_ERR_CONFIG_VALUE, "%s: %s[%d] = %lld does not fit in 32 bits",
                         p->origin, kp, (int)i, (long long)tmp[i]);
    }
    vals[i] = (int32_t)tmp[i];
  }
  return DSV4_OK;
}

/* An optional integer key that, when present, must be 0 (unsupported feature). */
static dsv4_status absent_or_zero(const pctx *p, const json_t *o, const char *sec, const char *key) {
  json_t *v = json_object_get(o, key);
  if (!v || json_is_null(v)) return DSV4_OK;
  if (!json_is_integer(v)) return wrong_type(p, sec, key, "an integer", v);
  if (json_integer_value(v) != 0) {
    char kp[128];
    key_path(kp, sizeof kp, sec, key);
    return dsv4i_error(DSV4_ERR_CONFIG_VALUE, "%s: %s = %lld is not supported by V4.1 (must be 0 or absent)",
                       p->origin, kp, (long long)json_integer_value(v));
  }
  return DSV4_OK;
}

#define TRY(x)                  \
  do {                          \
    dsv4_status s_ = (x);       \
    if (s_ != DSV4_OK) return s_; \
  } while (0)

static dsv4_status parse_root(const pctx *p, const json_t *r, dsv4i_config *c) {
  json_t *v;
  TRY(get_str_is(p, r, "", "model_type", "deepseek_v41"));
  v = json_object_get(r, "architectures");
  if (v && !json_is_array(v)) return wrong_type(p, "", "architectures", "an array of strings", v);
  TRY(get_i32(p, r, "", "bos_token_id", &c->bos_token_id));
  TRY(get_i32(p, r, "", "eos_token_id", &c->eos_token_id));
  TRY(get_i32(p, r, "", "pad_token_id", &c->pad_token_id));
  TRY(get_i32(p, r, "", "image_token_id", &c->image_token_id));
  return DSV4_OK;
}

static dsv4_status parse_quant(const pctx *p, const json_t *r) {
  const char *sec = "quantization_config";
  json_t *q, *v;
  TRY(get_obj(p, r, "", sec, &q));
  TRY(get_str_is(p, q, sec, "quant_method", "fp8"));
  TRY(get_str_is(p, q, sec, "scale_fmt", "ue8m0"));
  TRY(get_str_is(p, q, sec, "expert_dtype", "fp4"));
  if (json_object_get(q, "activation_scheme"))
    TRY(get_str_is(p, q, sec, "activation_scheme", "dynamic"));
  TRY(need(p, q, sec, "weight_block_size", &v));
  if (!json_is_array(v)) return wrong_type(p, sec, "weight_block_size", "an array of integers", v);
  int64_t bs[2] = {0, 0};
  int32_t n = 0;
  if (json_array_size(v) == 2) TRY(get_list(p, q, sec, "weight_block_size", bs, 2, &n));
  if (n != 2 || bs[0] != 32 || bs[1] != 32)
    return dsv4i_error(DSV4_ERR_CONFIG_VALUE,
                       "%s: quantization_config.weight_block_size must be [32, 32] (UE8M0 32x32 blocks)",
                       p->origin);
  return DSV4_OK;
}

static dsv4_status parse_rope(const pctx *p, const json_t *t, dsv4i_config *c) {
  const char *sec = "text_config.rope_scaling";
  json_t *rs;
  TRY(get_obj(p, t, "text_config", "rope_scaling", &rs));
  TRY(get_str_is(p, rs, sec, "rope_type", "yarn"));
  TRY(get_f32(p, rs, sec, "factor", &c->rope_factor));
  TRY(get_f32(p, rs, sec, "beta_fast", &c->beta_fast));
  TRY(get_f32(p, rs, sec, "beta_slow", &c->beta_slow));
  TRY(get_i64(p, rs, sec, "original_max_position_embeddings", &c->original_seq_len));
  return DSV4_OK;
}

static dsv4_status parse_attn(const pctx *p, const json_t *t, dsv4i_config *c) {
  const char *S = "text_config";
  TRY(get_i32(p, t, S, "vocab_size", &c->vocab_size));
  TRY(get_i32(p, t, S, "hidden_size", &c->dim));
  TRY(get_i32(p, t, S, "num_hidden_layers", &c->n_layers));
  TRY(get_i32(p, t, S, "num_attention_heads", &c->n_heads));
  TRY(get_i32(p, t, S, "num_key_value_heads", &c->n_kv_heads));
  TRY(get_i32(p, t, S, "head_dim", &c->head_dim));
  TRY(get_i32(p, t, S, "qk_rope_head_dim", &c->rope_head_dim));
  TRY(get_i32(p, t, S, "q_lora_rank", &c->q_lora_rank));
  TRY(get_i32(p, t, S, "o_lora_rank", &c->o_lora_rank));
  TRY(get_i32(p, t, S, "o_groups", &c->o_groups));
  TRY(get_str_is(p, t, S, "hidden_act", "silu"));
  TRY(get_f32(p, t, S, "swiglu_limit", &c->swiglu_limit));
  TRY(get_f32(p, t, S, "rms_norm_eps", &c->norm_eps));
  TRY(get_i64(p, t, S, "max_position_embeddings", &c->max_position_embeddings));
  TRY(get_f32(p, t, S, "rope_theta", &c->rope_theta));
  TRY(parse_rope(p, t, c));
  TRY(get_f32(p, t, S, "compress_rope_theta", &c->compress_rope_theta));
  TRY(get_i32(p, t, S, "sliding_window", &c->window_size));
  TRY(get_list32(p, t, S, "compress_ratios", c->compress_ratios, DSV4I_MAX_LIST, &c->n_compress_ratios));
  TRY(get_list32(p, t, S, "kv_source_layer_ids", c->kv_sources, DSV4I_MAX_LIST, &c->n_kv_sources));
  TRY(get_list32(p, t, S, "index_source_layer_ids", c->index_sources, DSV4I_MAX_LIST, &c->n_index_sources));
  TRY(get_i32(p, t, S, "index_n_heads", &c->index_n_heads));
  TRY(get_i32(p, t, S, "index_head_dim", &c->index_head_dim));
  TRY(get_i32(p, t, S, "index_topk", &c->index_topk));
  json_t *cs;
  TRY(need(p, t, S, "candidate_source_layer_id", &cs));
  if (json_is_null(cs)) c->candidate_source = -1; /* no candidate level */
  else TRY(get_i32(p, t, S, "candidate_source_layer_id", &c->candidate_source));
  TRY(get_i32(p, t, S, "candidate_topk_blocks", &c->candidate_topk_blocks));
  TRY(get_i32(p, t, S, "candidate_block_size", &c->candidate_block_size));
  return DSV4_OK;
}

static dsv4_status parse_moe_hc(const pctx *p, const json_t *t, dsv4i_config *c) {
  const char *S = "text_config";
  TRY(get_i32(p, t, S, "n_routed_experts", &c->n_routed_experts));
  TRY(get_i32(p, t, S, "n_shared_experts", &c->n_shared_experts));
  TRY(get_i32(p, t, S, "num_experts_per_tok", &c->n_experts_per_tok));
  TRY(get_i32(p, t, S, "moe_intermediate_size", &c->moe_inter_dim));
  TRY(get_str_is(p, t, S, "scoring_func", "sqrtsoftplus"));
  TRY(get_str_is(p, t, S, "topk_method", "noaux_tc"));
  TRY(get_bool(p, t, S, "norm_topk_prob", &c->norm_topk_prob));
  TRY(get_f32(p, t, S, "routed_scaling_factor", &c->route_scale));
  TRY(absent_or_zero(p, t, S, "first_k_dense_replace"));
  TRY(absent_or_zero(p, t, S, "num_hash_layers"));
  TRY(get_i32(p, t, S, "hc_mult", &c->hc_mult));
  TRY(get_i32(p, t, S, "hc_sinkhorn_iters", &c->hc_sinkhorn_iters));
  TRY(get_f32(p, t, S, "hc_eps", &c->hc_eps));
  json_t *tie = json_object_get(t, "tie_word_embeddings");
  if (tie) {
    int32_t tied;
    TRY(get_bool(p, t, S, "tie_word_embeddings", &tied));
    if (tied)
      return dsv4i_error(DSV4_ERR_CONFIG_VALUE,
                         "%s: text_config.tie_word_embeddings is true; V4.1 stores a separate head.weight",
                         p->origin);
  }
  return DSV4_OK;
}

/* num_nextn_predict_layers: text_config's key; a root copy (spec §2.1 says
 * the root and inference configs agree) is accepted alone or if equal. */
static dsv4_status parse_mtp_count(const pctx *p, const json_t *r, const json_t *t, dsv4i_config *c) {
  const char *key = "num_nextn_predict_layers";
  int32_t root_n = 0;
  int has_root = json_object_get(r, key) != NULL;
  if (has_root) TRY(get_i32(p, r, "", key, &root_n));
  if (!json_object_get(t, key) && has_root) {
    c->n_mtp_layers = root_n;
    return DSV4_OK;
  }
  TRY(get_i32(p, t, "text_config", key, &c->n_mtp_layers));
  if (has_root && root_n != c->n_mtp_layers)
    return dsv4i_error(DSV4_ERR_CONFIG_VALUE,
                       "%s: num_nextn_predict_layers = %d disagrees with text_config.num_nextn_predict_layers = %d",
                       p->origin, (int)root_n, (int)c->n_mtp_layers);
  return DSV4_OK;
}

static dsv4_status parse_engram_dspark(const pctx *p, const json_t *r, const json_t *t, dsv4i_config *c) {
  const char *S = "text_config";
  int32_t n_rows = 0;
  TRY(get_list32(p, t, S, "engram_layer_ids", c->engram_layers, DSV4I_MAX_ENGRAM, &c->n_engram));
  TRY(get_list(p, t, S, "engram_num_embeddings", c->engram_num_embeddings, DSV4I_MAX_ENGRAM, &n_rows));
  if (n_rows != c->n_engram)
    return dsv4i_error(DSV4_ERR_CONFIG_VALUE,
                       "%s: text_config.engram_num_embeddings has %d entries but "
                       "text_config.engram_layer_ids has %d; they must have the same length",
                       p->origin, (int)n_rows, (int)c->n_engram);
  TRY(get_i32(p, t, S, "engram_max_ngram_size", &c->engram_max_ngram));
  TRY(get_i64(p, t, S, "engram_vocab_size", &c->engram_vocab_size));
  TRY(get_i32(p, t, S, "engram_n_heads", &c->engram_n_heads));
  TRY(get_i32(p, t, S, "engram_head_dim", &c->engram_head_dim));
  TRY(get_i32(p, t, S, "engram_pad_token_id", &c->engram_pad_id));
  TRY(get_i32(p, t, S, "engram_compressed_vocab_size", &c->engram_compressed_vocab_size));
  TRY(parse_mtp_count(p, r, t, c));
  TRY(get_i32(p, t, S, "dspark_block_size", &c->dspark_block_size));
  TRY(get_i32(p, t, S, "dspark_noise_token_id", &c->dspark_noise_token_id));
  TRY(get_list32(p, t, S, "dspark_target_layer_ids", c->dspark_targets, DSV4I_MAX_LIST, &c->n_dspark_targets));
  TRY(get_i32(p, t, S, "dspark_markov_rank", &c->dspark_markov_rank));
  TRY(get_i32(p, t, S, "dspark_n_routed_experts", &c->dspark_n_routed_experts));
  TRY(get_i32(p, t, S, "dspark_num_experts_per_tok", &c->dspark_n_experts_per_tok));
  return DSV4_OK;
}

static dsv4_status parse_vision(const pctx *p, const json_t *r, dsv4i_config *c) {
  const char *S = "vision_config";
  json_t *v = json_object_get(r, S);
  if (!v || json_is_null(v)) return DSV4_OK; /* vision disabled */
  if (!json_is_object(v)) return wrong_type(p, "", S, "an object", v);
  c->has_vision = 1;
  TRY(get_i32(p, v, S, "num_hidden_layers", &c->vision_n_layers));
  TRY(get_i32(p, v, S, "hidden_size", &c->vision_dim));
  TRY(get_i32(p, v, S, "num_attention_heads", &c->vision_n_heads));
  TRY(get_i32(p, v, S, "intermediate_size", &c->vision_inter_dim));
  TRY(get_i32(p, v, S, "patch_size", &c->vision_patch_size));
  TRY(get_f32(p, v, S, "rope_theta", &c->vision_rope_theta));
  TRY(get_i32(p, v, S, "downsample_ratio", &c->vision_downsample));
  TRY(get_i32(p, v, S, "max_image_tokens", &c->vision_max_image_tokens));
  TRY(get_i64(p, v, S, "min_pixels", &c->vision_min_pixels));
  json_t *wh;
  TRY(need(p, v, S, "max_wh_ratio", &wh));
  if (json_is_null(wh)) c->vision_max_wh_ratio = 0.0f;
  else TRY(get_f32(p, v, S, "max_wh_ratio", &c->vision_max_wh_ratio));
  return DSV4_OK;
}

dsv4_status dsv4i_config_parse(const char *json_text, size_t len, const char *origin,
                               dsv4i_config *cfg) {
  pctx p = {origin ? origin : "config.json"};
  memset(cfg, 0, sizeof *cfg);
  json_error_t jerr;
  json_t *root = json_loadb(json_text, len, JSON_REJECT_DUPLICATES, &jerr);
  if (!root)
    return dsv4i_json_oom(&jerr, p.origin)
               ? DSV4_ERR_OUT_OF_MEMORY
               : dsv4i_error(DSV4_ERR_JSON, "%s:%d:%d: %s", p.origin, jerr.line, jerr.column, jerr.text);
  dsv4_status s;
  json_t *text = NULL;
  if (!json_is_object(root)) {
    s = dsv4i_error(DSV4_ERR_CONFIG_KEY, "%s: the top level must be an object, found %s", p.origin,
                    dsv4i_json_kind(root));
    goto out;
  }
  if ((s = parse_root(&p, root, cfg)) || (s = parse_quant(&p, root)) ||
      (s = get_obj(&p, root, "", "text_config", &text)) || (s = parse_attn(&p, text, cfg)) ||
      (s = parse_moe_hc(&p, text, cfg)) || (s = parse_engram_dspark(&p, root, text, cfg)) ||
      (s = parse_vision(&p, root, cfg)))
    goto out;
  if ((s = dsv4i_config_check_values(cfg)) || (s = dsv4i_config_derive_roles(cfg))) {
    dsv4i_error_prefix("%s", p.origin);
    goto out;
  }
out:
  json_decref(root);
  if (s) memset(cfg, 0, sizeof *cfg);
  return s;
}

dsv4_status dsv4i_config_load(const char *path, dsv4i_config *cfg) {
  memset(cfg, 0, sizeof *cfg);
  char *buf;
  size_t len;
  dsv4_status s = dsv4i_read_file(path, (size_t)16 << 20, "config", &buf, &len);
  if (s == DSV4_OK) s = dsv4i_config_parse(buf, len, path, cfg);
  free(buf);
  return s;
}
