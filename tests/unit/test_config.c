/*
 * config.json parsing and the layer-role table (lib/model/config.c,
 * config_check.c, roles.c): the release config (data/, spec §2.1 and
 * §2.3), the tiny fixture (equal to its inference_config.json and to its
 * README's role table), and one named case per malformed config.
 */
#include <jansson.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "model/config.h"
#include "test_util.h"

enum { KV = DSV4_ROLE_KV_SOURCE, IX = DSV4_ROLE_INDEX_SOURCE, OWN = DSV4_ROLE_INDEX_OWN_KEYS,
       CAND = DSV4_ROLE_CANDIDATE_SOURCE, ENG = DSV4_ROLE_ENGRAM, TAP = DSV4_ROLE_DSPARK_TAP,
       STAGE = DSV4_ROLE_DSPARK_STAGE, MASK = DSV4_ROLE_CANDIDATE_MASKED };

static char *release_config_path(void) { return tu_release_config_path(); }

static void expect_role(const dsv4i_config *c, int l, int ratio, unsigned roles, int kv, int idx,
                        int key, int cand, int slot) {
  const dsv4i_layer_role *r = &c->layers[l];
  if (r->compress_ratio != ratio || r->roles != roles || r->kv_source != kv ||
      r->index_source != idx || r->index_key_source != key || r->candidate_source != cand ||
      r->engram_slot != slot || r->rope_yarn != (ratio > 0))
    fail_msg("layer %d: got ratio %d roles 0x%x kv %d idx %d key %d cand %d slot %d yarn %d; "
             "want %d 0x%x %d %d %d %d %d", l, r->compress_ratio, r->roles, r->kv_source,
             r->index_source, r->index_key_source, r->candidate_source, r->engram_slot,
             r->rope_yarn, ratio, roles, kv, idx, key, cand, slot);
}

/* spec §2.1: every value of the release config. */
static void release_config_values(void **state) {
  (void)state;
  char *path = release_config_path();
  dsv4i_config c;
  assert_int_equal(dsv4i_config_load(path, &c), DSV4_OK);
  free(path);
  assert_int_equal(c.bos_token_id, 0);
  assert_int_equal(c.eos_token_id, 1);
  assert_int_equal(c.pad_token_id, 2);
  assert_int_equal(c.image_token_id, 129264);
  assert_int_equal(c.vocab_size, 129280);
  assert_int_equal(c.dim, 5120);
  assert_int_equal(c.n_layers, 40);
  assert_int_equal(c.n_heads, 64);
  assert_int_equal(c.n_kv_heads, 1);
  assert_int_equal(c.head_dim, 512);
  assert_int_equal(c.rope_head_dim, 64);
  assert_int_equal(c.q_lora_rank, 1280);
  assert_int_equal(c.o_lora_rank, 1024);
  assert_int_equal(c.o_groups, 8);
  assert_true(c.swiglu_limit == 10.0f && c.norm_eps == 1e-20f && c.hc_eps == 1e-6f);
  assert_int_equal(c.max_position_embeddings, 1048576);
  assert_true(c.rope_theta == 10000.0f && c.compress_rope_theta == 160000.0f);
  assert_true(c.rope_factor == 16.0f && c.beta_fast == 32.0f && c.beta_slow == 1.0f);
  assert_int_equal(c.original_seq_len, 65536);
  assert_int_equal(c.n_routed_experts, 384);
  assert_int_equal(c.n_shared_experts, 1);
  assert_int_equal(c.n_experts_per_tok, 6);
  assert_int_equal(c.moe_inter_dim, 2304);
  assert_true(c.route_scale == 1.5f);
  assert_int_equal(c.norm_topk_prob, 1);
  assert_int_equal(c.window_size, 128);
  assert_int_equal(c.n_compress_ratios, 43);
  assert_int_equal(c.index_n_heads, 32);
  assert_int_equal(c.index_head_dim, 128);
  assert_int_equal(c.index_topk, 512);
  assert_int_equal(c.candidate_source, 20);
  assert_int_equal(c.candidate_topk_blocks, 2048);
  assert_int_equal(c.candidate_block_size, 8);
  assert_int_equal(c.hc_mult, 4);
  assert_int_equal(c.hc_sinkhorn_iters, 20);
  assert_int_equal(c.n_engram, 2);
  assert_int_equal(c.engram_num_embeddings[0], 384006168);
  assert_int_equal(c.engram_num_embeddings[1], 384016682);
  assert_int_equal(c.engram_max_ngram, 4);
  assert_int_equal(c.engram_vocab_size, 16000000);
  assert_int_equal(c.engram_n_heads, 8);
  assert_int_equal(c.engram_head_dim, 256);
  assert_int_equal(c.engram_pad_id, 2);
  assert_int_equal(c.engram_compressed_vocab_size, 99092);
  assert_int_equal(c.n_mtp_layers, 3);
  assert_int_equal(c.dspark_block_size, 5);
  assert_int_equal(c.dspark_noise_token_id, 128799);
  assert_int_equal(c.dspark_markov_rank, 256);
  assert_int_equal(c.dspark_n_routed_experts, 128);
  assert_int_equal(c.dspark_n_experts_per_tok, 3);
  assert_int_equal(c.has_vision, 1);
  assert_int_equal(c.vision_n_layers, 32);
  assert_int_equal(c.vision_dim, 1024);
  assert_int_equal(c.vision_n_heads, 16);
  assert_int_equal(c.vision_inter_dim, 2816);
  assert_int_equal(c.vision_patch_size, 14);
  assert_int_equal(c.vision_downsample, 3);
  assert_int_equal(c.vision_max_image_tokens, 1024);
  assert_int_equal(c.vision_min_pixels, 295936);
  assert_true(c.vision_rope_theta == 10000.0f && c.vision_max_wh_ratio == 0.0f);
}

/* spec §5.8: the KV record sizes of the release config (528 / 584 / 288 / 68 B). */
static void release_kv_record_bytes(void **state) {
  (void)state;
  char *path = release_config_path();
  dsv4i_config c;
  assert_int_equal(dsv4i_config_load(path, &c), DSV4_OK);
  free(path);
  assert_int_equal(dsv4i_kv_record_bytes(&c, DSV4I_KVREC_WINDOW), 528);
  assert_int_equal(dsv4i_kv_record_bytes(&c, DSV4I_KVREC_WINDOW_DS_MLA), 584);
  assert_int_equal(dsv4i_kv_record_bytes(&c, DSV4I_KVREC_COMPRESSED), 288);
  assert_int_equal(dsv4i_kv_record_bytes(&c, DSV4I_KVREC_INDEX_KEY), 68);
  assert_int_equal(dsv4i_kv_record_bytes(&c, 99), 0);
}

/* spec §2.3, row by row. */
static void release_role_table(void **state) {
  (void)state;
  char *path = release_config_path();
  dsv4i_config c;
  assert_int_equal(dsv4i_config_load(path, &c), DSV4_OK);
  free(path);
  assert_int_equal(c.n_total_layers, 43);
  expect_role(&c, 0, 0, 0, -1, -1, -1, -1, -1);
  expect_role(&c, 1, 0, ENG, -1, -1, -1, -1, 0);
  for (int src = 2; src <= 14; src += 6) {
    expect_role(&c, src, 2, KV | IX | OWN | (src == 14 ? ENG : 0), src, src, src, -1, src == 14 ? 1 : -1);
    for (int l = src + 1; l < src + 6; l++) expect_role(&c, l, 2, 0, src, src, -1, -1, -1);
  }
  expect_role(&c, 20, 1, KV | IX | OWN | CAND, 20, 20, 20, -1, -1);
  for (int l = 21; l < 40; l++) {
    int idx = l < 24 ? 20 : l - (l % 4); /* 24, 28, 32, 36 */
    unsigned tap = l >= 37 ? TAP : 0;
    if (l % 4 == 0) expect_role(&c, l, 1, IX | MASK | tap, 20, l, 20, 20, -1);
    else expect_role(&c, l, 1, tap, 20, idx, -1, -1, -1);
  }
  for (int l = 40; l < 43; l++) expect_role(&c, l, 0, STAGE, -1, -1, -1, -1, -1);
}

static char *fixture_text(const char *fixture, const char *file) {
  char rel[256];
  snprintf(rel, sizeof rel, "%s/%s", fixture, file);
  char *text = tu_read_file(tu_fixture_or_skip(rel), NULL);
  assert_non_null(text);
  return text;
}

/* README "How to compare" 1: config.json maps to inference_config.json. */
static void fixture_matches_inference_config(void **state) {
  (void)state;
  const char *fixtures[] = {"tiny-v41-a", "tiny-v41-e2e-a"};
  for (size_t f = 0; f < 2; f++) {
    char *text = fixture_text(fixtures[f], "config.json");
    char *flat = fixture_text(fixtures[f], "inference_config.json");
    dsv4i_config c;
    assert_int_equal(dsv4i_config_parse(text, strlen(text), "config.json", &c), DSV4_OK);
    json_t *j = json_loads(flat, 0, NULL);
    assert_non_null(j);
    const struct { const char *key; double v; } ints[] = {
      {"vocab_size", c.vocab_size}, {"dim", c.dim}, {"moe_inter_dim", c.moe_inter_dim},
      {"n_layers", c.n_layers}, {"n_mtp_layers", c.n_mtp_layers}, {"dspark_block_size", c.dspark_block_size},
      {"dspark_noise_token_id", c.dspark_noise_token_id}, {"dspark_markov_rank", c.dspark_markov_rank},
      {"dspark_n_routed_experts", c.dspark_n_routed_experts},
      {"dspark_n_activated_experts", c.dspark_n_experts_per_tok}, {"n_heads", c.n_heads},
      {"n_routed_experts", c.n_routed_experts}, {"n_shared_experts", c.n_shared_experts},
      {"n_activated_experts", c.n_experts_per_tok}, {"route_scale", c.route_scale},
      {"swiglu_limit", c.swiglu_limit}, {"q_lora_rank", c.q_lora_rank}, {"head_dim", c.head_dim},
      {"rope_head_dim", c.rope_head_dim}, {"norm_eps", c.norm_eps}, {"o_groups", c.o_groups},
      {"o_lora_rank", c.o_lora_rank}, {"window_size", c.window_size},
      {"original_seq_len", (double)c.original_seq_len}, {"rope_theta", c.rope_theta},
      {"rope_factor", c.rope_factor}, {"beta_fast", c.beta_fast}, {"beta_slow", c.beta_slow},
      {"index_n_heads", c.index_n_heads}, {"index_head_dim", c.index_head_dim},
      {"index_topk", c.index_topk}, {"candidate_source_layer", c.candidate_source},
      {"candidate_topk_blocks", c.candidate_topk_blocks}, {"candidate_block_size", c.candidate_block_size},
      {"hc_mult", c.hc_mult}, {"hc_sinkhorn_iters", c.hc_sinkhorn_iters}, {"hc_eps", c.hc_eps},
      {"engram_vocab_size", (double)c.engram_vocab_size}, {"engram_max_ngram_size", c.engram_max_ngram},
      {"engram_pad_id", c.engram_pad_id}, {"engram_compressed_vocab_size", c.engram_compressed_vocab_size},
      {"compress_rope_theta", c.compress_rope_theta}, {"vision_n_layers", c.vision_n_layers},
      {"image_token_id", c.image_token_id}, {"engram_n_heads", c.engram_n_heads},
      {"engram_head_dim", c.engram_head_dim},
    };
    for (size_t i = 0; i < DSV4I_ARRAY_LEN(ints); i++) {
      json_t *v = json_object_get(j, ints[i].key);
      if (!v || fabs(json_number_value(v) - ints[i].v) > 1e-6 * fabs(ints[i].v))
        fail_msg("%s: inference_config.%s = %g, config.json gives %g", fixtures[f], ints[i].key,
                 v ? json_number_value(v) : -1.0, ints[i].v);
    }
    const struct { const char *key; const int32_t *ids; int32_t n; } lists[] = {
      {"kv_source_layers", c.kv_sources, c.n_kv_sources},
      {"index_source_layers", c.index_sources, c.n_index_sources},
      {"engram_layer_ids", c.engram_layers, c.n_engram},
      {"dspark_target_layer_ids", c.dspark_targets, c.n_dspark_targets},
      {"compress_ratios", c.compress_ratios, c.n_compress_ratios},
    };
    for (size_t i = 0; i < DSV4I_ARRAY_LEN(lists); i++) {
      json_t *a = json_object_get(j, lists[i].key);
      assert_int_equal(json_array_size(a), lists[i].n);
      for (int32_t k = 0; k < lists[i].n; k++)
        assert_int_equal(json_integer_value(json_array_get(a, (size_t)k)), lists[i].ids[k]);
    }
    json_t *rows = json_object_get(j, "engram_num_embeddings");
    for (int32_t k = 0; k < c.n_engram; k++)
      assert_int_equal(json_integer_value(json_array_get(rows, (size_t)k)), c.engram_num_embeddings[k]);
    assert_string_equal(json_string_value(json_object_get(j, "dtype")), "fp8");
    assert_string_equal(json_string_value(json_object_get(j, "expert_dtype")), "fp4");
    assert_string_equal(json_string_value(json_object_get(j, "score_func")), "sqrtsoftplus");
    assert_int_equal(c.has_vision, 0);
    json_decref(j);
    free(text);
    free(flat);
  }
}

/* The fixture README's role table. */
static void fixture_role_table(void **state) {
  (void)state;
  char *text = fixture_text("tiny-v41-a", "config.json");
  dsv4i_config c;
  assert_int_equal(dsv4i_config_parse(text, strlen(text), "config.json", &c), DSV4_OK);
  free(text);
  assert_int_equal(c.n_total_layers, 13);
  expect_role(&c, 0, 0, 0, -1, -1, -1, -1, -1);
  expect_role(&c, 1, 0, ENG, -1, -1, -1, -1, 0);
  expect_role(&c, 2, 2, KV | IX | OWN, 2, 2, 2, -1, -1);
  expect_role(&c, 3, 2, 0, 2, 2, -1, -1, -1);
  expect_role(&c, 4, 2, KV | IX | OWN | ENG, 4, 4, 4, -1, 1);
  expect_role(&c, 5, 2, 0, 4, 4, -1, -1, -1);
  expect_role(&c, 6, 1, KV | IX | OWN | CAND, 6, 6, 6, -1, -1);
  expect_role(&c, 7, 1, TAP, 6, 6, -1, -1, -1);
  expect_role(&c, 8, 1, IX | MASK | TAP, 6, 8, 6, 6, -1);
  expect_role(&c, 9, 1, TAP, 6, 8, -1, -1, -1);
  for (int l = 10; l < 13; l++) expect_role(&c, l, 0, STAGE, -1, -1, -1, -1, -1);
}

/* No candidate level: null is accepted, and nothing is masked. */
static void candidate_null_means_none(void **state) {
  (void)state;
  char *text = fixture_text("tiny-v41-a", "config.json");
  json_t *j = json_loads(text, 0, NULL);
  json_object_set_new(json_object_get(j, "text_config"), "candidate_source_layer_id", json_null());
  char *out = json_dumps(j, JSON_INDENT(2) | JSON_PRESERVE_ORDER);
  dsv4i_config c;
  assert_int_equal(dsv4i_config_parse(out, strlen(out), "config.json", &c), DSV4_OK);
  assert_int_equal(c.candidate_source, -1);
  expect_role(&c, 6, 1, KV | IX | OWN, 6, 6, 6, -1, -1);
  expect_role(&c, 8, 1, IX | TAP, 6, 8, 6, -1, -1);
  free(out);
  free(text);
  json_decref(j);
}

/* num_nextn_predict_layers at the root only (or equal at both) is accepted. */
static void mtp_count_at_root(void **state) {
  (void)state;
  char *text = fixture_text("tiny-v41-a", "config.json");
  json_t *j = json_loads(text, 0, NULL);
  json_object_set_new(j, "num_nextn_predict_layers", json_integer(3));
  for (int pass = 0; pass < 2; pass++) {
    if (pass) json_object_del(json_object_get(j, "text_config"), "num_nextn_predict_layers");
    char *out = json_dumps(j, JSON_INDENT(2) | JSON_PRESERVE_ORDER);
    dsv4i_config c;
    assert_int_equal(dsv4i_config_parse(out, strlen(out), "config.json", &c), DSV4_OK);
    assert_int_equal(c.n_mtp_layers, 3);
    free(out);
  }
  free(text);
  json_decref(j);
}

static void load_missing_file(void **state) {
  (void)state;
  dsv4i_config c;
  assert_int_equal(dsv4i_config_load("/nonexistent/config.json", &c), DSV4_ERR_NOT_FOUND);
  assert_non_null(strstr(dsv4i_error_message(), "/nonexistent/config.json"));
}


/* ---- one named case per malformed config (tiny-v41-a with one change) ---- */

typedef struct bad_case {
  const char *name;
  const char *path;    /* "text_config.index_topk", "text_config.kv_source_layer_ids[1]"; NULL: raw */
  const char *value;   /* JSON text; NULL deletes the key; with path NULL: the whole file */
  dsv4_status want;
  const char *needle;  /* must appear in the message */
} bad_case;

#define KEY DSV4_ERR_CONFIG_KEY
#define VAL DSV4_ERR_CONFIG_VALUE
static const bad_case bad_cases[] = {
  {"missing_index_topk", "text_config.index_topk", NULL, KEY, "text_config.index_topk is missing"},
  {"missing_text_config", "text_config", NULL, KEY, "key text_config is missing"},
  {"missing_quantization_config", "quantization_config", NULL, KEY, "quantization_config"},
  {"missing_rope_factor", "text_config.rope_scaling.factor", NULL, KEY, "text_config.rope_scaling.factor"},
  {"missing_bos", "bos_token_id", NULL, KEY, "bos_token_id is missing"},
  {"missing_engram_rows", "text_config.engram_num_embeddings", NULL, KEY, "text_config.engram_num_embeddings"},
  {"missing_dspark_targets", "text_config.dspark_target_layer_ids", NULL, KEY, "dspark_target_layer_ids"},
  {"missing_vision_key", "vision_config", "{\"num_hidden_layers\": 2, \"hidden_size\": 64, "
   "\"num_attention_heads\": 4, \"intermediate_size\": 96}", KEY, "vision_config.patch_size"},
  {"int_as_string", "text_config.hidden_size", "\"128\"", KEY, "text_config.hidden_size must be an integer, found a string"},
  {"int_as_real", "text_config.num_hidden_layers", "10.0", KEY, "num_hidden_layers must be an integer"},
  {"list_not_array", "text_config.kv_source_layer_ids", "2", KEY, "kv_source_layer_ids must be an array"},
  {"list_element_type", "text_config.kv_source_layer_ids[1]", "\"4\"", KEY, "text_config.kv_source_layer_ids[1] must be an integer"},
  {"bool_type", "text_config.norm_topk_prob", "1", KEY, "norm_topk_prob must be a boolean"},
  {"number_type", "text_config.rms_norm_eps", "\"1e-20\"", KEY, "rms_norm_eps must be a number"},
  {"text_config_not_object", "text_config", "[]", KEY, "text_config must be an object"},
  {"root_not_object", NULL, "[1, 2]", KEY, "top level must be an object"},
  {"json_truncated", NULL, "{\n  \"model_type\": \"deepseek_v41\",\n  \"text_config\": {", DSV4_ERR_JSON, "config.json:3:"},
  {"json_trailing_comma", NULL, "{\"model_type\": 1,}", DSV4_ERR_JSON, "config.json:1:"},
  {"json_duplicate_key", NULL, "{\"a\": 1, \"a\": 2}", DSV4_ERR_JSON, "duplicate"},
  {"model_type", "model_type", "\"deepseek_v4\"", VAL, "model_type is \"deepseek_v4\""},
  {"quant_method", "quantization_config.quant_method", "\"fp4\"", VAL, "quantization_config.quant_method"},
  {"scale_fmt", "quantization_config.scale_fmt", "\"e4m3\"", VAL, "quantization_config.scale_fmt"},
  {"block_128", "quantization_config.weight_block_size", "[128, 128]", VAL, "weight_block_size must be [32, 32]"},
  {"block_one_dim", "quantization_config.weight_block_size", "[32]", VAL, "weight_block_size must be [32, 32]"},
  {"expert_dtype", "quantization_config.expert_dtype", "\"fp8\"", VAL, "quantization_config.expert_dtype"},
  {"ratios_short", "text_config.compress_ratios", "[0,0,2,2,2,2,1,1,1,1,0,0]", VAL, "compress_ratios has 12 entries"},
  {"ratios_long", "text_config.compress_ratios", "[0,0,2,2,2,2,1,1,1,1,0,0,0,0]", VAL, "= 13"},
  {"ratio_unsupported", "text_config.compress_ratios[3]", "4", VAL, "compress_ratios[3] = 4"},
  {"dspark_stage_ratio", "text_config.compress_ratios[11]", "1", VAL, "mtp.1 must be window-only"},
  {"kv_id_out_of_range", "text_config.kv_source_layer_ids", "[2, 4, 12]", VAL, "kv_source_layer_ids[2] = 12 is outside"},
  {"index_id_negative", "text_config.index_source_layer_ids[0]", "-1", VAL, "index_source_layer_ids[0] = -1"},
  {"index_unsorted", "text_config.index_source_layer_ids", "[2, 6, 4, 8]", VAL, "index_source_layer_ids is not sorted"},
  {"engram_duplicate", "text_config.engram_layer_ids", "[1, 1]", VAL, "engram_layer_ids lists layer 1 twice"},
  {"engram_lengths", "text_config.engram_num_embeddings", "[1524]", VAL, "engram_num_embeddings has 1 entries"},
  {"consumer_before_source", "text_config.compress_ratios[1]", "2", VAL, "layer 1 has compress ratio 2"},
  {"kv_not_index", "text_config.index_source_layer_ids", "[2, 6, 8]", VAL, "layer 4, which is not in text_config.index_source_layer_ids"},
  {"kv_ratio_zero", "text_config.compress_ratios[2]", "0", VAL, "kv_source_layer_ids names layer 2, whose compress ratio is 0"},
  {"index_ratio_zero", "text_config.index_source_layer_ids", "[1, 2, 4, 6, 8]", VAL, "index_source_layer_ids names layer 1"},
  {"candidate_not_index", "text_config.candidate_source_layer_id", "7", VAL, "candidate_source_layer_id = 7 is not in"},
  {"candidate_not_kv", "text_config.candidate_source_layer_id", "8", VAL, "candidate_source_layer_id = 8 must be a KV source"},
  {"candidate_ratio_2", "text_config.candidate_source_layer_id", "4", VAL, "with compress ratio 1 (it has 2)"},
  {"candidate_out_of_range", "text_config.candidate_source_layer_id", "10", VAL, "candidate_source_layer_id = 10 is outside"},
  {"dspark_target_count", "text_config.dspark_target_layer_ids", "[8, 9]", VAL, "dspark_target_layer_ids has 2 entries"},
  {"consumer_ratio_mismatch", "text_config.compress_ratios[5]", "1", VAL, "layer 5 has compress ratio 1 but reads the compressed KV of layer 4"},
  {"hidden_not_32", "text_config.hidden_size", "120", VAL, "hidden_size = 120 is not a multiple of 32"},
  {"q_lora_not_32", "text_config.q_lora_rank", "100", VAL, "q_lora_rank = 100 is not a multiple of 32"},
  {"head_dim_not_32", "text_config.head_dim", "144", VAL, "head_dim = 144 is not a multiple of 32"},
  {"moe_inter_not_32", "text_config.moe_intermediate_size", "48", VAL, "moe_intermediate_size = 48"},
  {"index_head_not_32", "text_config.index_head_dim", "80", VAL, "index_head_dim = 80"},
  {"o_lora_not_32", "text_config.o_lora_rank", "48", VAL, "o_lora_rank = 48"},
  {"engram_head_not_32", "text_config.engram_head_dim", "48", VAL, "engram_head_dim = 48"},
  {"rope_gt_head_dim", "text_config.qk_rope_head_dim", "160", VAL, "qk_rope_head_dim = 160 is larger than text_config.head_dim"},
  {"o_groups_divide", "text_config.o_groups", "3", VAL, "o_groups = 3 does not divide"},
  {"kv_heads", "text_config.num_key_value_heads", "4", VAL, "num_key_value_heads = 4"},
  {"shared_experts", "text_config.n_shared_experts", "2", VAL, "n_shared_experts = 2"},
  {"topk_gt_experts", "text_config.num_experts_per_tok", "17", VAL, "num_experts_per_tok = 17 is outside"},
  {"eos_out_of_vocab", "eos_token_id", "640", VAL, "eos_token_id = 640 is outside the vocabulary"},
  {"noise_out_of_vocab", "text_config.dspark_noise_token_id", "700", VAL, "dspark_noise_token_id = 700"},
  {"tied_embeddings", "text_config.tie_word_embeddings", "true", VAL, "tie_word_embeddings is true"},
  {"hidden_act", "text_config.hidden_act", "\"gelu\"", VAL, "hidden_act is \"gelu\""},
  {"scoring_func", "text_config.scoring_func", "\"softmax\"", VAL, "scoring_func"},
  {"hash_layers", "text_config.num_hash_layers", "3", VAL, "num_hash_layers = 3 is not supported"},
  {"rope_type", "text_config.rope_scaling.rope_type", "\"linear\"", VAL, "rope_scaling.rope_type"},
  {"beta_fast_zero", "text_config.rope_scaling.beta_fast", "0", VAL, "rope_scaling.beta_fast = 0 must be positive"},
  {"beta_slow_negative", "text_config.rope_scaling.beta_slow", "-1", VAL, "rope_scaling.beta_slow = -1 must be positive"},
  {"beta_fast_not_above_slow", "text_config.rope_scaling.beta_fast", "1", VAL, "beta_fast = 1 must be finite and greater than"},
  {"rope_factor_below_one", "text_config.rope_scaling.factor", "0.5", VAL, "rope_scaling.factor = 0.5 must be finite and >= 1"},
  {"original_max_pos_zero", "text_config.rope_scaling.original_max_position_embeddings", "0", VAL, "original_max_position_embeddings = 0 is outside"},
  {"rms_norm_eps_zero", "text_config.rms_norm_eps", "0", VAL, "rms_norm_eps = 0 must be finite and positive"},
  {"rms_norm_eps_huge", "text_config.rms_norm_eps", "1e300", VAL, "rms_norm_eps = 1e+300 is not representable as a float"},
  {"hc_eps_negative", "text_config.hc_eps", "-1e-6", VAL, "hc_eps = -1e-06 must be finite and positive"},
  {"hc_eps_huge", "text_config.hc_eps", "-1e300", VAL, "hc_eps = -1e+300 is not representable"},
  {"int32_overflow", "text_config.hidden_size", "4294967296", VAL, "does not fit in 32 bits"},
  {"mtp_count_root_disagrees", "num_nextn_predict_layers", "2", VAL, "num_nextn_predict_layers = 2 disagrees"},
  {"mtp_count_missing", "text_config.num_nextn_predict_layers", NULL, KEY, "text_config.num_nextn_predict_layers is missing"},
  {"vision_heads", "vision_config", "{\"num_hidden_layers\": 2, \"hidden_size\": 64, \"num_attention_heads\": 3, "
   "\"intermediate_size\": 96, \"patch_size\": 14, \"rope_theta\": 10000, \"downsample_ratio\": 3, "
   "\"max_image_tokens\": 64, \"min_pixels\": 1000, \"max_wh_ratio\": null}", VAL, "vision_config.num_attention_heads = 3"},
};

/* Set or delete one key path in the parsed fixture config. */
static void mutate(json_t *root, const char *path, const char *value) {
  char buf[160];
  snprintf(buf, sizeof buf, "%s", path);
  json_t *obj = root;
  char *key = buf, *dot;
  while ((dot = strchr(key, '.'))) {
    *dot = '\0';
    obj = json_object_get(obj, key);
    assert_non_null(obj);
    key = dot + 1;
  }
  json_t *v = value ? json_loads(value, JSON_DECODE_ANY, NULL) : NULL;
  if (value) assert_non_null(v);
  char *br = strchr(key, '[');
  if (br) {
    *br = '\0';
    assert_int_equal(json_array_set_new(json_object_get(obj, key), (size_t)atoi(br + 1), v), 0);
  } else if (v) {
    assert_int_equal(json_object_set_new(obj, key, v), 0);
  } else {
    assert_int_equal(json_object_del(obj, key), 0);
  }
}

static void run_bad_case(void **state) {
  const bad_case *bc = *state;
  char *text = NULL;
  if (bc->path) {
    char *orig = fixture_text("tiny-v41-a", "config.json");
    json_t *j = json_loads(orig, 0, NULL);
    mutate(j, bc->path, bc->value);
    text = json_dumps(j, JSON_INDENT(2) | JSON_PRESERVE_ORDER);
    json_decref(j);
    free(orig);
  } else {
    text = strdup(bc->value);
  }
  dsv4i_config c;
  memset(&c, 0x5a, sizeof c);
  dsv4i_error_clear();
  dsv4_status s = dsv4i_config_parse(text, strlen(text), "config.json", &c);
  const char *msg = dsv4i_error_message();
  if (s != bc->want || !strstr(msg, bc->needle) || strncmp(msg, "config.json", 11) != 0)
    fail_msg("%s: status %d (want %d), message \"%s\" (want \"%s\")", bc->name, (int)s,
             (int)bc->want, msg, bc->needle);
  tu_catalogue("config.json", bc->name, s, msg);
  assert_int_equal(c.n_layers, 0); /* zeroed on failure */
  free(text);
}

int tu_run_suite(void) {
  static const struct CMUnitTest fixed[] = {
    cmocka_unit_test(release_config_values),
    cmocka_unit_test(release_kv_record_bytes),
    cmocka_unit_test(release_role_table),
    cmocka_unit_test(fixture_matches_inference_config),
    cmocka_unit_test(fixture_role_table),
    cmocka_unit_test(candidate_null_means_none),
    cmocka_unit_test(mtp_count_at_root),
    cmocka_unit_test(load_missing_file),
  };
  size_t nf = DSV4I_ARRAY_LEN(fixed), nc = DSV4I_ARRAY_LEN(bad_cases);
  struct CMUnitTest *tests = calloc(nf + nc, sizeof *tests);
  memcpy(tests, fixed, sizeof fixed);
  for (size_t i = 0; i < nc; i++) {
    tests[nf + i].name = bad_cases[i].name;
    tests[nf + i].test_func = run_bad_case;
    tests[nf + i].initial_state = (void *)&bad_cases[i];
  }
  int rc = _cmocka_run_group_tests("config", tests, nf + nc, NULL, NULL);
  free(tests);
  return rc;
}
