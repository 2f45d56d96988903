/*
 * Public model API (dsv4.h only, linked against libdsv4.so): params
 * handling, loading both tiny fixtures (info = config, layer table = the
 * fixture README's table, every tensor sane), config-only loads, and the
 * status and message of each kind of bad checkpoint directory.
 */
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "dsv4/dsv4.h"
#include "test_util.h"

enum { KV = DSV4_ROLE_KV_SOURCE, IX = DSV4_ROLE_INDEX_SOURCE, OWN = DSV4_ROLE_INDEX_OWN_KEYS,
       CAND = DSV4_ROLE_CANDIDATE_SOURCE, ENG = DSV4_ROLE_ENGRAM, TAP = DSV4_ROLE_DSPARK_TAP,
       STAGE = DSV4_ROLE_DSPARK_STAGE, MASK = DSV4_ROLE_CANDIDATE_MASKED };

static void expect_in(const char *msg, const char *needle) {
  if (!strstr(msg, needle)) fail_msg("\"%s\" not in the message:\n%s", needle, msg);
}

static void params_init_sizes(void **state) {
  (void)state;
  dsv4_model_params p;
  memset(&p, 0x7f, sizeof p);
  assert_int_equal(dsv4_model_params_init(&p, sizeof p), DSV4_OK);
  assert_int_equal(p.struct_size, sizeof p);
  assert_int_equal(p.flags, 0);
  assert_null(p.log_fn);
  assert_null(p.log_user_data);
  assert_int_equal(p.log_level, DSV4_LOG_WARN);
  assert_int_equal(p.reserved0, 0);
  assert_int_equal(dsv4_model_params_init(NULL, sizeof p), DSV4_ERR_INVALID_ARG);
  assert_int_equal(dsv4_model_params_init(&p, 8), DSV4_ERR_PARAMS_SIZE);
  expect_in(dsv4_last_error(), "struct_size 8");
  /* a newer caller's larger struct: our fields set, the rest zeroed */
  unsigned char big[sizeof p + 32];
  memset(big, 0xee, sizeof big);
  assert_int_equal(dsv4_model_params_init((dsv4_model_params *)(void *)big, sizeof big), DSV4_OK);
  dsv4_model_params q;
  memcpy(&q, big, sizeof q);
  assert_int_equal(q.struct_size, sizeof big);
  assert_int_equal(q.log_level, DSV4_LOG_WARN);
  for (size_t i = sizeof p; i < sizeof big; i++) assert_int_equal(big[i], 0);
  /* smaller but valid: the 0.1 fields through log_level; nothing written past them */
  size_t small = offsetof(dsv4_model_params, log_level) + sizeof(int32_t);
  memset(big, 0xee, sizeof big);
  assert_int_equal(dsv4_model_params_init((dsv4_model_params *)(void *)big, small), DSV4_OK);
  for (size_t i = small; i < sizeof big; i++) assert_int_equal(big[i], 0xee);
  assert_int_equal(dsv4_model_params_init(&p, small - 1), DSV4_ERR_PARAMS_SIZE);
}

typedef struct log_seen {
  int n;
  char first[256];
} log_seen;

static void on_log(int32_t level, const char *message, void *user_data) {
  log_seen *s = user_data;
  if (level == DSV4_LOG_INFO && s->n++ == 0) snprintf(s->first, sizeof s->first, "%s", message);
}

static dsv4_model *load_ok(const char *dir, uint32_t flags) {
  dsv4_model_params p;
  assert_int_equal(dsv4_model_params_init(&p, sizeof p), DSV4_OK);
  p.flags = flags;
  dsv4_model *m = NULL;
  if (dsv4_model_load(dir, &p, &m) != DSV4_OK) fail_msg("load %s: %s", dir, dsv4_last_error());
  assert_non_null(m);
  assert_string_equal(dsv4_last_error(), "");
  assert_string_equal(dsv4_model_last_error(m), "");
  return m;
}

static void expect_layer(dsv4_model *m, int l, int ratio, unsigned roles, int kv, int idx, int key,
                         int cand, int slot) {
  dsv4_layer_info li;
  assert_int_equal(dsv4_model_get_layer(m, l, &li, sizeof li), DSV4_OK);
  if (li.layer != l || li.compress_ratio != ratio || li.roles != roles || li.kv_source != kv ||
      li.index_source != idx || li.index_key_source != key || li.candidate_source != cand ||
      li.engram_slot != slot || li.rope_yarn != (ratio > 0) || li.struct_size != sizeof li)
    fail_msg("layer %d: ratio %d roles 0x%x kv %d idx %d key %d cand %d slot %d", l,
             li.compress_ratio, li.roles, li.kv_source, li.index_source, li.index_key_source,
             li.candidate_source, li.engram_slot);
}

/* The fixture README's configuration and role table, and every tensor sane. */
static void check_fixture_model(dsv4_model *m, int config_only) {
  dsv4_model_info info;
  assert_int_equal(dsv4_model_get_info(m, &info, sizeof info), DSV4_OK);
  assert_int_equal(info.struct_size, sizeof info);
  const int32_t want[] = {640, 128, 10, 3, 4, 128, 64, 16, 3, 16, 4, 0, 1, 2, 639, 638, 5};
  const int32_t got[] = {info.vocab_size, info.hidden_size, info.n_layers, info.n_mtp_layers,
    info.n_heads, info.head_dim, info.rope_head_dim, info.n_routed_experts, info.n_experts_per_tok,
    info.sliding_window, info.hc_mult, info.bos_token_id, info.eos_token_id, info.pad_token_id,
    info.image_token_id, info.dspark_noise_token_id, info.dspark_block_size};
  for (size_t i = 0; i < sizeof want / sizeof want[0]; i++) assert_int_equal(got[i], want[i]);
  assert_int_equal(info.max_position_embeddings, 1048576);
  assert_int_equal(info.n_tensors, 1542);
  assert_int_equal(info.payload_bytes, 7866000);

  expect_layer(m, 0, 0, 0, -1, -1, -1, -1, -1);
  expect_layer(m, 1, 0, ENG, -1, -1, -1, -1, 0);
  expect_layer(m, 2, 2, KV | IX | OWN, 2, 2, 2, -1, -1);
  expect_layer(m, 3, 2, 0, 2, 2, -1, -1, -1);
  expect_layer(m, 4, 2, KV | IX | OWN | ENG, 4, 4, 4, -1, 1);
  expect_layer(m, 5, 2, 0, 4, 4, -1, -1, -1);
  expect_layer(m, 6, 1, KV | IX | OWN | CAND, 6, 6, 6, -1, -1);
  expect_layer(m, 7, 1, TAP, 6, 6, -1, -1, -1);
  expect_layer(m, 8, 1, IX | MASK | TAP, 6, 8, 6, 6, -1);
  expect_layer(m, 9, 1, TAP, 6, 8, -1, -1, -1);
  for (int l = 10; l < 13; l++) expect_layer(m, l, 0, STAGE, -1, -1, -1, -1, -1);

  int64_t sum = 0;
  int keyed = 0; /* the named tensors below met */
  const char *prev = NULL;
  for (int64_t i = 0; i < info.n_tensors; i++) {
    dsv4_tensor_info t;
    assert_int_equal(dsv4_model_get_tensor(m, i, &t, sizeof t), DSV4_OK);
    assert_non_null(t.name);
    if (prev) assert_true(strcmp(prev, t.name) < 0);
    prev = t.name;
    static const int64_t size_of[] = {0, 2, 2, 4, 1, 1, 1, 4, 8};
    assert_true(t.dtype >= DSV4_DTYPE_BF16 && t.dtype <= DSV4_DTYPE_I8 && t.dtype != DSV4_DTYPE_F16);
    assert_true(t.ndim == 1 || t.ndim == 2);
    int64_t elems = 1;
    for (int d = 0; d < t.ndim; d++) {
      assert_true(t.shape[d] > 0);
      elems *= t.shape[d];
    }
    for (int d = t.ndim; d < 4; d++) assert_int_equal(t.shape[d], 0);
    assert_int_equal(t.nbytes, elems * size_of[t.dtype]);
    assert_true(t.component >= 0 && t.component < DSV4_COMP_COUNT_V0_1);
    /* shard 3 of 3 holds only the two Engram tables (fixture README) */
    int engram_table = strstr(t.name, ".engram.embed.") != NULL;
    if (config_only) assert_int_equal(t.shard, -1);
    else assert_int_equal(t.shard == 2, engram_table);
    if (engram_table) assert_int_equal(t.component, DSV4_COMP_ENGRAM_TABLES);
    /* the weight table's key: Engram tables by role, a few names spelled out here */
    assert_non_null(t.role);
    assert_int_equal(engram_table, !strcmp(t.role, "ENGRAM_EMBED"));
    assert_true(t.layer >= -1 && t.layer < info.n_layers + info.n_mtp_layers);
    const int scale = strstr(t.name, ".scale") != NULL;
    assert_int_equal(t.is_scale, scale);
    if (!strcmp(t.name, "layers.3.attn.wo_a.weight") || !strcmp(t.name, "layers.3.attn.wo_a.scale")) {
      assert_string_equal(t.role, "ATTN_WO_A");
      assert_int_equal(t.layer, 3);
      assert_int_equal(t.expert, -1);
      keyed++;
    }
    if (!strcmp(t.name, "layers.2.ffn.experts.5.w2.weight")) {
      assert_string_equal(t.role, "EXPERT_W2");
      assert_int_equal(t.layer, 2);
      assert_int_equal(t.expert, 5);
      keyed++;
    }
    if (!strncmp(t.name, "mtp.0.", 6)) assert_int_equal(t.layer, info.n_layers);
    if (!strcmp(t.name, "head.weight")) {
      assert_string_equal(t.role, "HEAD");
      keyed++;
    }
    if (!strcmp(t.name, "head.weight") || !strcmp(t.name, "embed.weight") || !strcmp(t.name, "norm.weight"))
      assert_int_equal(t.layer, -1);
    if (strncmp(t.name, "mtp.", 4) == 0) assert_int_equal(t.component, DSV4_COMP_DSPARK);
    sum += t.nbytes;
  }
  assert_int_equal(sum, info.payload_bytes);
  assert_int_equal(keyed, 4);
}

static void fixtures_load(void **state) {
  (void)state;
  const char *fixtures[] = {"tiny-v41-a", "tiny-v41-e2e-a"};
  for (int f = 0; f < 2; f++) {
    char *dir = strdup(tu_fixture_or_skip(fixtures[f]));
    for (int co = 0; co < 2; co++) {
      dsv4_model *m = load_ok(dir, co ? DSV4_MODEL_F_CONFIG_ONLY : 0);
      check_fixture_model(m, co);
      dsv4_model_free(m);
    }
    free(dir);
  }
}

/* Per-handle log sink; messages at INFO name the directory and the totals. */
static void load_logs_to_handle_sink(void **state) {
  (void)state;
  char *dir = strdup(tu_fixture_or_skip("tiny-v41-a"));
  log_seen seen = {0};
  dsv4_model_params p;
  assert_int_equal(dsv4_model_params_init(&p, sizeof p), DSV4_OK);
  p.log_fn = on_log;
  p.log_user_data = &seen;
  p.log_level = DSV4_LOG_INFO;
  dsv4_model *m = NULL;
  assert_int_equal(dsv4_model_load(dir, &p, &m), DSV4_OK);
  assert_true(seen.n >= 1);
  expect_in(seen.first, "1542 tensors, 7866000 bytes");
  dsv4_model_free(m);
  free(dir);
}

/* Argument checks on the handle calls; each failure lands in the handle's slot. */
static void handle_calls_check_args(void **state) {
  (void)state;
  char *dir = strdup(tu_fixture_or_skip("tiny-v41-a"));
  dsv4_model *m = load_ok(dir, DSV4_MODEL_F_CONFIG_ONLY);
  dsv4_model_info info;
  dsv4_layer_info li;
  dsv4_tensor_info ti;
  assert_int_equal(dsv4_model_get_info(NULL, &info, sizeof info), DSV4_ERR_INVALID_ARG);
  assert_int_equal(dsv4_model_get_info(m, NULL, sizeof info), DSV4_ERR_INVALID_ARG);
  const size_t v01 = offsetof(dsv4_model_info, index_n_heads); /* the 0.1 size */
  assert_int_equal(dsv4_model_get_info(m, &info, v01 - 8), DSV4_ERR_INVALID_ARG);
  expect_in(dsv4_model_last_error(m), "struct_size");
  /* a caller compiled against the 0.1 struct gets exactly its bytes */
  memset(&info, 0x5a, sizeof info);
  assert_int_equal(dsv4_model_get_info(m, &info, v01), DSV4_OK);
  assert_int_equal(info.struct_size, v01);
  assert_int_equal(info.index_n_heads, 0x5a5a5a5a);
  assert_int_equal(dsv4_model_get_info(m, &info, sizeof info), DSV4_OK);
  assert_int_equal(info.struct_size, sizeof info);
  assert_int_equal(info.index_head_dim, 128);
  assert_int_equal(info.index_topk, 6);
  assert_int_equal(info.engram_cols, 12);
  assert_int_equal(info.window_record_bytes, 128 + 4);
  assert_int_equal(info.compressed_record_bytes, 64 + 8);
  assert_int_equal(info.index_key_record_bytes, 64 + 4);
  assert_int_equal(dsv4_model_get_layer(m, 13, &li, sizeof li), DSV4_ERR_INVALID_ARG);
  expect_in(dsv4_model_last_error(m), "layer 13 is outside [0, 13)");
  assert_int_equal(dsv4_model_get_layer(m, -1, &li, sizeof li), DSV4_ERR_INVALID_ARG);
  assert_int_equal(dsv4_model_get_tensor(m, 1542, &ti, sizeof ti), DSV4_ERR_INVALID_ARG);
  expect_in(dsv4_model_last_error(m), "index 1542 is outside [0, 1542)");
  expect_in(dsv4_last_error(), "index 1542");
  assert_int_equal(dsv4_model_get_tensor(m, 0, &ti, 4), DSV4_ERR_INVALID_ARG);
  /* a success leaves the last failure's message in the handle's slot */
  assert_int_equal(dsv4_model_get_layer(m, 0, &li, sizeof li), DSV4_OK);
  assert_string_equal(dsv4_last_error(), "");
  expect_in(dsv4_model_last_error(m), "struct_size 4");
  assert_string_equal(dsv4_model_last_error(NULL), "");
  /* a caller compiled against the 0.1 dsv4_tensor_info (it ended at name) gets
   * exactly its bytes; the weight-table key came later */
  const size_t t01 = offsetof(dsv4_tensor_info, layer);
  assert_int_equal(dsv4_model_get_tensor(m, 0, &ti, t01 - 8), DSV4_ERR_INVALID_ARG);
  memset(&ti, 0x5a, sizeof ti);
  if (dsv4_model_get_tensor(m, 0, &ti, t01) != DSV4_OK)
    fail_msg("the 0.1 dsv4_tensor_info size %zu is refused: %s", t01, dsv4_last_error());
  assert_int_equal(ti.struct_size, t01);
  assert_non_null(ti.name);
  assert_int_equal(ti.layer, 0x5a5a5a5a);
  assert_int_equal(ti.is_scale, 0x5a5a5a5a);
  /* larger output struct: ours filled, the tail zeroed, struct_size = ours */
  unsigned char big[sizeof(dsv4_model_info) + 24];
  memset(big, 0xcc, sizeof big);
  assert_int_equal(dsv4_model_get_info(m, (dsv4_model_info *)(void *)big, sizeof big), DSV4_OK);
  memcpy(&info, big, sizeof info);
  assert_int_equal(info.struct_size, sizeof info);
  assert_int_equal(info.vocab_size, 640);
  for (size_t i = sizeof info; i < sizeof big; i++) assert_int_equal(big[i], 0);
  dsv4_model_free(m);
  dsv4_model_free(NULL);
  free(dir);
}

static void load_checks_args(void **state) {
  (void)state;
  char *dir = strdup(tu_fixture_or_skip("tiny-v41-a"));
  dsv4_model *m = (dsv4_model *)(void *)&m; /* must be reset to NULL */
  assert_int_equal(dsv4_model_load(NULL, NULL, &m), DSV4_ERR_INVALID_ARG);
  assert_null(m);
  expect_in(dsv4_last_error(), "dir is NULL");
  assert_int_equal(dsv4_model_load(dir, NULL, NULL), DSV4_ERR_INVALID_ARG);
  /* "" must not quietly mean the current directory */
  assert_int_equal(dsv4_model_load("", NULL, &m), DSV4_ERR_INVALID_ARG);
  assert_null(m);
  expect_in(dsv4_last_error(), "empty string");
  dsv4_model_params p;
  assert_int_equal(dsv4_model_params_init(&p, sizeof p), DSV4_OK);
  p.struct_size = 4;
  assert_int_equal(dsv4_model_load(dir, &p, &m), DSV4_ERR_PARAMS_SIZE);
  assert_null(m);
  p.struct_size = sizeof p;
  p.flags = 1u << 30;
  assert_int_equal(dsv4_model_load(dir, &p, &m), DSV4_ERR_INVALID_ARG);
  expect_in(dsv4_last_error(), "unknown flags");
  /* smaller but valid params: fields past struct_size keep their defaults */
  assert_int_equal(dsv4_model_params_init(&p, offsetof(dsv4_model_params, log_level) + sizeof(int32_t)), DSV4_OK);
  p.flags = DSV4_MODEL_F_CONFIG_ONLY;
  p.reserved0 = 12345; /* past struct_size: never read */
  assert_int_equal(dsv4_model_load(dir, &p, &m), DSV4_OK);
  dsv4_tensor_info ti;
  assert_int_equal(dsv4_model_get_tensor(m, 0, &ti, sizeof ti), DSV4_OK);
  assert_int_equal(ti.shard, -1);
  dsv4_model_free(m);
  /* params NULL: defaults */
  assert_int_equal(dsv4_model_load(dir, NULL, &m), DSV4_OK);
  dsv4_model_free(m);
  assert_int_equal(dsv4_model_load("/nonexistent-dsv4-dir", NULL, &m), DSV4_ERR_NOT_FOUND);
  expect_in(dsv4_last_error(), "/nonexistent-dsv4-dir/config.json");
  free(dir);
}

/* ---- bad checkpoint directories: tiny-v41-a's config.json with one edit,
 * the shards symlinked into a temp dir ---------------------------------- */

typedef struct bad_dir {
  const char *name;
  const char *old, *repl; /* text edit of config.json; old NULL: no config.json */
  dsv4_status want;
  const char *needle[3];  /* each must be in the message; "@LINE" = "config.json:<line of old>:" */
  int drop_shard3;
} bad_dir;

static const bad_dir bad_dirs[] = {
  {"missing_key", "    \"index_topk\": 6,\n", "", DSV4_ERR_CONFIG_KEY, {"text_config.index_topk is missing", "config.json"}, 0},
  {"bad_json", "\"hc_mult\": 4,", "\"hc_mult\": 4,,", DSV4_ERR_JSON, {"@LINE"}, 0},
  {"list_length", "\"compress_ratios\": [\n      0,\n", "\"compress_ratios\": [\n", DSV4_ERR_CONFIG_VALUE,
   {"text_config.compress_ratios has 12 entries", "= 13"}, 0},
  {"id_out_of_range", "      4,\n      6\n    ],\n    \"index_source", "      4,\n      12\n    ],\n    \"index_source",
   DSV4_ERR_CONFIG_VALUE, {"text_config.kv_source_layer_ids[2] = 12 is outside the backbone layers [0, 10)"}, 0},
  {"consumer_before_source", "\"compress_ratios\": [\n      0,\n      0,", "\"compress_ratios\": [\n      0,\n      2,",
   DSV4_ERR_CONFIG_VALUE, {"layer 1 has compress ratio 2", "no KV source", "text_config.kv_source_layer_ids"}, 0},
  {"quant_scale_fmt", "\"scale_fmt\": \"ue8m0\"", "\"scale_fmt\": \"fp32\"", DSV4_ERR_CONFIG_VALUE,
   {"quantization_config.scale_fmt"}, 0},
  {"more_experts", "\"n_routed_experts\": 16,", "\"n_routed_experts\": 17,", DSV4_ERR_WEIGHTS,
   {"(60 missing, 0 unexpected, 0 wrong dtype, 30 wrong shape)", "\n  layers.0.ffn.experts.16.w1.scale (F8_E8M0 [64, 4])",
    "layers.0.ffn.gate.weight: [16, 128], expected [17, 128]"}, 0},
  {"fewer_dspark_experts", "\"dspark_n_routed_experts\": 8,", "\"dspark_n_routed_experts\": 7,", DSV4_ERR_WEIGHTS,
   {"(0 missing, 18 unexpected, 0 wrong dtype, 9 wrong shape)", "mtp.0.ffn.experts.7.w1.scale (F8_E8M0 [64, 4])",
    "mtp.2.ffn.gate.bias_vl: [8], expected [7]"}, 0},
  {"engram_rows", "      1524,\n", "      1525,\n", DSV4_ERR_WEIGHTS,
   {"(0 missing, 0 unexpected, 0 wrong dtype, 2 wrong shape)", "layers.1.engram.embed.weight: [1524, 32], expected [1525, 32]"}, 0},
  {"no_config", NULL, NULL, DSV4_ERR_NOT_FOUND, {"config.json"}, 0},
  {"missing_shard", "\"hc_mult\": 4,", "\"hc_mult\": 4,", DSV4_ERR_MISSING_SHARD, {"model-00003-of-00003.safetensors"}, 1},
};

static void run_bad_dir(void **state) {
  const bad_dir *b = *state;
  char *src = strdup(tu_fixture_or_skip("tiny-v41-a"));
  char *tmp = tu_mkdtemp();
  assert_non_null(tmp);
  int line = 0;
  if (b->old) {
    char *in = tu_join(src, "config.json"), *out = tu_join(tmp, "config.json");
    char *text = tu_read_file(in, NULL);
    char *at = strstr(text, b->old);
    if (!at || strstr(at + 1, b->old)) fail_msg("%s: edit does not match exactly once", b->name);
    line = 1;
    for (const char *p = text; p < at; p++) line += *p == '\n';
    size_t pre = (size_t)(at - text), ol = strlen(b->old), rl = strlen(b->repl), tl = strlen(text);
    char *edited = malloc(tl - ol + rl + 1);
    memcpy(edited, text, pre);
    memcpy(edited + pre, b->repl, rl);
    memcpy(edited + pre + rl, at + ol, tl - pre - ol + 1);
    assert_int_equal(tu_write_file(out, edited, strlen(edited)), 0);
    free(edited);
    free(text);
    free(in);
    free(out);
  }
  const char *links[] = {"model.safetensors.index.json", "model-00001-of-00003.safetensors",
                         "model-00002-of-00003.safetensors", "model-00003-of-00003.safetensors"};
  for (int i = 0; i < (b->drop_shard3 ? 3 : 4); i++) {
    char *from = tu_join(src, links[i]), *to = tu_join(tmp, links[i]);
    assert_int_equal(symlink(from, to), 0);
    free(from);
    free(to);
  }
  dsv4_model *m = NULL;
  dsv4_status s = dsv4_model_load(tmp, NULL, &m);
  const char *msg = dsv4_last_error();
  if (s != b->want) fail_msg("%s: status %d (want %d): %s", b->name, (int)s, (int)b->want, msg);
  tu_catalogue("model directory (dsv4_model_load)", b->name, s, msg);
  assert_null(m);
  for (int i = 0; i < 3 && b->needle[i]; i++) {
    char want[256];
    if (strcmp(b->needle[i], "@LINE") == 0) snprintf(want, sizeof want, "config.json:%d:", line);
    else snprintf(want, sizeof want, "%s", b->needle[i]);
    expect_in(msg, want);
  }
  expect_in(msg, tmp); /* names the directory or file */
  tu_rmtree(tmp);
  free(tmp);
  free(src);
}

/* config.json that is not a regular file (here a link to /dev/zero, which
 * never ends) is refused at once instead of being read forever. */
static void config_not_regular_file(void **state) {
  (void)state;
  char *tmp = tu_mkdtemp();
  assert_non_null(tmp);
  char *cfg = tu_join(tmp, "config.json");
  assert_int_equal(symlink("/dev/zero", cfg), 0);
  dsv4_model *m = NULL;
  assert_int_equal(dsv4_model_load(tmp, NULL, &m), DSV4_ERR_IO);
  assert_null(m);
  expect_in(dsv4_last_error(), "not a regular file");
  tu_rmtree(tmp);
  free(cfg);
  free(tmp);
}

/* A shard whose header grew by one trailing space (still valid JSON): its
 * data area, and so every tensor, starts at an odd file offset. The format
 * allows it (the reference reader reads it), so the load accepts it: the
 * unaligned tensors are copied once into aligned memory (logged, counted in
 * the engine's prepared weights) and the engine computes exactly the logits
 * of the aligned original. It used to be refused (DSV4_ERR_ST_OFFSETS). */
static char g_log[4096];
static void keep_log(int32_t level, const char *msg, void *ud) {
  (void)level;
  (void)ud;
  if (strstr(msg, "aligned")) snprintf(g_log, sizeof g_log, "%s", msg);
}

static void prefill_logits(const dsv4_model *m, float *logits, int64_t *prepared) {
  dsv4_engine_params ep;
  assert_int_equal(dsv4_engine_params_init(&ep, sizeof ep), DSV4_OK);
  ep.max_sequences = 1;
  ep.max_context = 64;
  dsv4_engine *e = NULL;
  if (dsv4_engine_create(m, &ep, &e)) fail_msg("engine: %s", dsv4_last_error());
  dsv4_engine_info info;
  assert_int_equal(dsv4_engine_get_info(e, &info, sizeof info), DSV4_OK);
  *prepared = info.prepared_weight_bytes;
  const int32_t prompt[] = {0, 17, 42, 99, 5, 300, 7, 12};
  int64_t id;
  assert_int_equal(dsv4_engine_seq_create(e, &id), DSV4_OK);
  if (dsv4_engine_prefill(e, id, prompt, 8, NULL, logits, NULL)) fail_msg("%s", dsv4_last_error());
  dsv4_engine_free(e);
}

static void misaligned_shard(void **state) {
  (void)state;
  char *src = strdup(tu_fixture_or_skip("tiny-v41-a"));
  char *tmp = tu_mkdtemp();
  assert_non_null(tmp);
  const char *files[] = {"config.json", "model.safetensors.index.json", "model-00001-of-00003.safetensors",
                         "model-00003-of-00003.safetensors", "tokenizer.json", "tokenizer_config.json"};
  for (int i = 0; i < 6; i++) {
    char *from = tu_join(src, files[i]), *to = tu_join(tmp, files[i]);
    assert_int_equal(symlink(from, to), 0);
    free(from);
    free(to);
  }
  char *in = tu_join(src, "model-00002-of-00003.safetensors"), *out = tu_join(tmp, "model-00002-of-00003.safetensors");
  size_t len = 0;
  unsigned char *b = (unsigned char *)tu_read_file(in, &len);
  assert_non_null(b);
  uint64_t hl = 0;
  for (int i = 7; i >= 0; i--) hl = (hl << 8) | b[i];
  assert_true(8 + hl <= len);
  unsigned char *nb = malloc(len + 1);
  assert_non_null(nb);
  const uint64_t nhl = hl + 1;
  for (int i = 0; i < 8; i++) nb[i] = (unsigned char)(nhl >> (8 * i));
  memcpy(nb + 8, b + 8, (size_t)hl);
  nb[8 + hl] = ' ';
  memcpy(nb + 9 + hl, b + 8 + hl, len - 8 - (size_t)hl);
  assert_int_equal(tu_write_file(out, nb, len + 1), 0);
  dsv4_model_params mp;
  assert_int_equal(dsv4_model_params_init(&mp, sizeof mp), DSV4_OK);
  mp.log_fn = keep_log;
  mp.log_level = DSV4_LOG_INFO;
  g_log[0] = '\0';
  dsv4_model *m = NULL, *ref = NULL;
  if (dsv4_model_load(tmp, &mp, &m)) fail_msg("misaligned shard refused: %s", dsv4_last_error());
  expect_in(g_log, "not aligned to their element size");
  expect_in(g_log, "copied once");
  assert_int_equal(dsv4_model_load(src, NULL, &ref), DSV4_OK);
  dsv4_model_info mi;
  assert_int_equal(dsv4_model_get_info(ref, &mi, sizeof mi), DSV4_OK);
  float *la = malloc(sizeof(float) * (size_t)mi.vocab_size), *lb = malloc(sizeof(float) * (size_t)mi.vocab_size);
  int64_t pa = 0, pb = 0;
  prefill_logits(ref, la, &pa);
  prefill_logits(m, lb, &pb);
  assert_memory_equal(la, lb, sizeof(float) * (size_t)mi.vocab_size);
  assert_true(pb > pa); /* the copies are charged to the plan */
  free(la);
  free(lb);
  dsv4_model_free(ref);
  dsv4_model_free(m);
  /* config-only loads never look at the shards */
  dsv4_model_params p;
  assert_int_equal(dsv4_model_params_init(&p, sizeof p), DSV4_OK);
  p.flags = DSV4_MODEL_F_CONFIG_ONLY;
  assert_int_equal(dsv4_model_load(tmp, &p, &m), DSV4_OK);
  dsv4_model_free(m);
  free(nb);
  free(b);
  free(in);
  free(out);
  tu_rmtree(tmp);
  free(tmp);
  free(src);
}

/* A FIFO in place of any file the library opens (config, index, a shard,
 * tokenizer.json, tokenizer_config.json) is refused at once: it used to
 * block forever in open(2). alarm() turns a hang into a failure. */
static void fifo_never_blocks(void **state) {
  (void)state;
  const char *src = tu_fixture_or_skip("tiny-v41-a");
  char *srcd = strdup(src);
  const char *files[] = {"config.json", "model.safetensors.index.json", "model-00001-of-00003.safetensors",
                         "model-00002-of-00003.safetensors", "model-00003-of-00003.safetensors",
                         "tokenizer.json", "tokenizer_config.json"};
  for (int k = 0; k < 7; k++) {
    char *tmp = tu_mkdtemp();
    for (int i = 0; i < 7; i++) {
      char *from = tu_join(srcd, files[i]), *to = tu_join(tmp, files[i]);
      if (i == k)
        assert_int_equal(mkfifo(to, 0600), 0);
      else
        assert_int_equal(symlink(from, to), 0);
      free(from);
      free(to);
    }
    alarm(60);
    dsv4_status st;
    if (k < 5) {
      dsv4_model *m = NULL;
      st = dsv4_model_load(tmp, NULL, &m);
      assert_null(m);
    } else {
      dsv4_tokenizer *t = NULL;
      st = dsv4_tokenizer_load(tmp, &t);
      assert_null(t);
    }
    alarm(0);
    if (st != DSV4_ERR_IO) fail_msg("%s as a FIFO: status %d (%s)", files[k], st, dsv4_last_error());
    tu_catalogue(k < 5 ? "model directory (dsv4_model_load)" : "tokenizer directory (dsv4_tokenizer_load)",
                 files[k], st, dsv4_last_error());
    expect_in(dsv4_last_error(), files[k]);
    expect_in(dsv4_last_error(), "is a FIFO, not a regular file");
    tu_rmtree(tmp);
    free(tmp);
  }
  free(srcd);
}

int tu_run_suite(void) {
  const struct CMUnitTest tests[] = {
    cmocka_unit_test(params_init_sizes),
    cmocka_unit_test(fixtures_load),
    cmocka_unit_test(load_logs_to_handle_sink),
    cmocka_unit_test(handle_calls_check_args),
    cmocka_unit_test(load_checks_args),
    cmocka_unit_test(misaligned_shard),
    cmocka_unit_test(config_not_regular_file),
    cmocka_unit_test(fifo_never_blocks),
  };
  size_t nf = sizeof tests / sizeof tests[0], nb = sizeof bad_dirs / sizeof bad_dirs[0];
  struct CMUnitTest *all = calloc(nf + nb, sizeof *all);
  memcpy(all, tests, sizeof tests);
  for (size_t i = 0; i < nb; i++) {
    all[nf + i].name = bad_dirs[i].name;
    all[nf + i].test_func = run_bad_dir;
    all[nf + i].initial_state = (void *)&bad_dirs[i];
  }
  int rc = _cmocka_run_group_tests("model_api", all, nf + nb, NULL, NULL);
  free(all);
  return rc;
}
