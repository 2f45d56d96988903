/*
 * tools/gen (dsv4-gen-checkpoint): the tiny default model is an official
 * checkpoint the loader accepts exactly (every tensor resolves, the tensor
 * set equals the contract, the Engram tables match the tokenizer), shards
 * are laid out as in the release, output is a function of the seed alone,
 * the planted successor table holds in the stored weights, and the
 * real-dims configs validate with the release's per-layer sizes (config
 * only: no 7 GB layers here).
 *
 * The generator runs as the built executable ($DSV4_BUILD_ROOT/tools/gen/
 * dsv4-gen-checkpoint) with the project's tiny tokenizer
 * ($DSV4_SOURCE_ROOT/data/tiny-tokenizer; DSV4_GEN_TOKENIZER
 * overrides). A subset: a pattern as argument or DSV4_TEST_FILTER (tests/common/test_main.c).
 */
#include <jansson.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>

#include "test_util.h"
#include "io/safetensors.h"
#include "io/tokenizer.h"
#include "model/config.h"
#include "model/engram_hash.h"
#include "model/formats.h"
#include "model/model_impl.h" /* a test of the loader: its internals */

/* ---- helpers ------------------------------------------------------------ */

static char *exe_path(void) {
  const char *b = getenv("DSV4_BUILD_ROOT");
  assert_non_null(b);
  return tu_join(b, "tools/gen/dsv4-gen-checkpoint");
}

static char *tokenizer_dir(void) {
  const char *o = getenv("DSV4_GEN_TOKENIZER");
  if (o && *o) return strdup(o);
  const char *s = getenv("DSV4_SOURCE_ROOT");
  assert_non_null(s);
  return tu_join(s, "data/tiny-tokenizer");
}

/* Run the generator with `args` (already quoted) into out; exit status. */
static int gen(const char *args, const char *out) {
  char *exe = exe_path(), *tok = tokenizer_dir();
  size_t cap = strlen(exe) + strlen(tok) + strlen(args) + strlen(out) + 64;
  char *cmd = malloc(cap);
  snprintf(cmd, cap, "'%s' --quiet --tokenizer '%s' %s '%s'", exe, tok, args, out);
  int rc = system(cmd);
  free(cmd);
  free(exe);
  free(tok);
  return rc == -1 ? -1 : (WIFEXITED(rc) ? WEXITSTATUS(rc) : 128);
}

static json_t *load_json(const char *dir, const char *name) {
  char *p = tu_join(dir, name);
  json_error_t e;
  json_t *j = json_load_file(p, 0, &e);
  if (!j) fail_msg("%s: %s", p, e.text);
  free(p);
  return j;
}

static int same_file(const char *a, const char *b) {
  size_t la = 0, lb = 0;
  char *x = tu_read_file(a, &la), *y = tu_read_file(b, &lb);
  int same = x && y && la == lb && memcmp(x, y, la) == 0;
  free(x);
  free(y);
  return same;
}

/* bf16 row r of a [rows][cols] tensor as float. */
static void bf16_row(const void *data, int64_t cols, int64_t r, float *out) {
  const uint16_t *p = (const uint16_t *)data + r * cols;
  for (int64_t c = 0; c < cols; c++) out[c] = dsv4i_bf16_to_f32(p[c]);
}

/* ---- the tiny model ------------------------------------------------------ */

static char *g_tiny; /* generated once (seed 1) by the group setup */

static int setup(void **state) {
  (void)state;
  g_tiny = tu_mkdtemp();
  return g_tiny && gen("--tiny --seed 1", g_tiny) == 0 ? 0 : -1;
}

static int teardown(void **state) {
  (void)state;
  tu_rmtree(g_tiny);
  free(g_tiny);
  return 0;
}

/* Loads through the model loader; every contract tensor resolves to bytes. */
static void tiny_loads_and_resolves(void **state) {
  (void)state;
  struct dsv4_model *m = NULL;
  dsv4_status s = dsv4i_model_open(g_tiny, 0, NULL, &m);
  if (s) fail_msg("%s", dsv4i_error_message());
  assert_int_equal(m->ckpt.n_entries, m->contract.n);
  assert_int_equal(m->ckpt.payload_bytes, m->contract.payload_bytes);
  assert_int_equal(dsv4i_contract_check(&m->contract, &m->ckpt, g_tiny), DSV4_OK);
  for (size_t i = 0; i < m->contract.n; i++) {
    const dsv4i_tensor_spec *t = &m->contract.specs[i];
    const dsv4i_ckpt_entry *e = dsv4i_checkpoint_find(&m->ckpt, t->name);
    assert_non_null(e);
    assert_int_equal(e->t->dtype, t->dtype);
    assert_int_equal(e->t->nbytes, t->nbytes);
  }
  /* index total_size is the payload */
  json_t *ix = load_json(g_tiny, "model.safetensors.index.json");
  json_t *meta = json_object_get(ix, "metadata");
  assert_int_equal(json_integer_value(json_object_get(meta, "total_size")),
                   (json_int_t)m->contract.payload_bytes);
  json_decref(ix);
  dsv4i_model_close(m);
}

/* Every structural feature of spec §2.3 is present in the tiny config. */
static void tiny_covers_every_role(void **state) {
  (void)state;
  char *p = tu_join(g_tiny, "config.json");
  dsv4i_config c;
  assert_int_equal(dsv4i_config_load(p, &c), DSV4_OK);
  free(p);
  assert_int_equal(c.dim, 128);
  assert_int_equal(c.hc_mult, 4);
  assert_int_equal(c.n_mtp_layers, 3);
  assert_int_equal(c.n_engram, 2);
  assert_false(c.has_vision);
  uint32_t seen = 0;
  int ratio[3] = {0, 0, 0};
  for (int32_t l = 0; l < c.n_total_layers; l++) {
    seen |= c.layers[l].roles;
    ratio[c.layers[l].compress_ratio]++;
    uint32_t r = c.layers[l].roles;
    if ((r & DSV4_ROLE_INDEX_SOURCE) && !(r & DSV4_ROLE_INDEX_OWN_KEYS))
      seen |= 1u << 30; /* an index source without own keys */
  }
  const uint32_t want = DSV4_ROLE_KV_SOURCE | DSV4_ROLE_INDEX_SOURCE | DSV4_ROLE_INDEX_OWN_KEYS |
                        DSV4_ROLE_CANDIDATE_SOURCE | DSV4_ROLE_ENGRAM | DSV4_ROLE_DSPARK_TAP |
                        DSV4_ROLE_DSPARK_STAGE | DSV4_ROLE_CANDIDATE_MASKED | (1u << 30);
  assert_int_equal(seen & want, want);
  assert_true(ratio[0] >= 2 && ratio[1] >= 2 && ratio[2] >= 2);
  /* vocabulary, specials and Engram classes from the tokenizer */
  char *td = tokenizer_dir();
  dsv4i_tokenizer *tok = NULL;
  assert_int_equal(dsv4i_tokenizer_load(td, &tok), DSV4_OK);
  assert_int_equal(c.vocab_size, dsv4i_tokenizer_vocab_size(tok));
  dsv4i_engram_tables *et = NULL;
  dsv4_status s = dsv4i_engram_tables_create(&c, tok, &et);
  if (s) fail_msg("Engram tables: %s", dsv4i_error_message());
  assert_int_equal(et->compressed_vocab, c.engram_compressed_vocab_size);
  dsv4i_engram_tables_free(et);
  dsv4i_tokenizer_free(tok);
  free(td);
}

/* Engram tables alone in the last shards, one table per shard. */
static void tiny_shard_layout(void **state) {
  (void)state;
  dsv4i_checkpoint ck;
  assert_int_equal(dsv4i_checkpoint_open(g_tiny, &ck), DSV4_OK);
  int32_t first_engram = -1;
  for (int32_t k = 0; k < ck.n_shards; k++) {
    const dsv4i_st_file *f = &ck.shards[k];
    size_t n_eng = 0;
    for (size_t i = 0; i < f->n_tensors; i++)
      n_eng += dsv4i_component_of(f->tensors[i].name) == DSV4_COMP_ENGRAM_TABLES;
    if (n_eng && first_engram < 0) first_engram = k;
    if (first_engram >= 0) {
      /* weight + scale of one table, the weight first at data offset 0 */
      assert_int_equal(n_eng, f->n_tensors);
      assert_int_equal(f->n_tensors, 2);
      assert_non_null(strstr(f->tensors[0].name, "engram.embed.weight"));
      assert_int_equal(f->tensors[0].offset, f->data_start);
    }
  }
  assert_int_equal(first_engram, ck.n_shards - 2);
  dsv4i_checkpoint_close(&ck);
}

/* Same seed -> identical bytes, also through the scale recompute path and
 * with every tensor cut into many row groups (one scale block of rows each);
 * another seed -> other weights, same config. */
static void deterministic(void **state) {
  (void)state;
  static const char *files[] = {
      "config.json", "model.safetensors.index.json", "make_tiny.json",
      "model-00001-of-00004.safetensors", "model-00002-of-00004.safetensors",
      "model-00003-of-00004.safetensors", "model-00004-of-00004.safetensors"};
  char *a = tu_mkdtemp(), *b = tu_mkdtemp();
  assert_int_equal(gen("--seed 1 --scale-cache-bytes 0 --group-values 1", a), 0);
  assert_int_equal(gen("--seed 2", b), 0);
  for (size_t i = 0; i < DSV4I_ARRAY_LEN(files); i++) {
    char *x = tu_join(g_tiny, files[i]), *y = tu_join(a, files[i]), *z = tu_join(b, files[i]);
    if (!same_file(x, y)) fail_msg("%s differs between two seed-1 runs", files[i]);
    int differs = !same_file(x, z);
    if (strncmp(files[i], "model-", 6) == 0 || strcmp(files[i], "make_tiny.json") == 0)
      assert_true(differs);
    else
      assert_false(differs);
    free(x);
    free(y);
    free(z);
  }
  tu_rmtree(a);
  tu_rmtree(b);
  free(a);
  free(b);
}

/* The planted table: the sentence chain, BOS + prompt, and
 * argmax head(norm(embed[t])) == successor[t] for every planted t, computed
 * here in plain float math from the stored bf16 weights. */
static void planted_successors(void **state) {
  (void)state;
  json_t *mt = load_json(g_tiny, "make_tiny.json");
  json_t *pl = json_object_get(mt, "planted");
  assert_non_null(pl);
  json_t *succ = json_object_get(pl, "successor"), *sent = json_object_get(pl, "sentence_ids");
  json_t *pids = json_object_get(pl, "prompt_ids"), *cont = json_object_get(pl, "continuation_ids");
  struct dsv4_model *m = NULL;
  assert_int_equal(dsv4i_model_open(g_tiny, 0, NULL, &m), DSV4_OK);
  const int64_t V = m->cfg.vocab_size, D = m->cfg.dim;
  assert_int_equal(json_array_size(succ), (size_t)V);

  /* prompt = first sentence tokens, and the tokenizer agrees */
  char *td = tokenizer_dir();
  dsv4i_tokenizer *tok = NULL;
  assert_int_equal(dsv4i_tokenizer_load(td, &tok), DSV4_OK);
  const char *prompt = json_string_value(json_object_get(pl, "prompt"));
  int32_t *ids = NULL;
  size_t n = 0;
  assert_int_equal(dsv4i_tokenizer_encode(tok, prompt, strlen(prompt), &ids, &n), DSV4_OK);
  assert_int_equal(n, json_array_size(pids));
  for (size_t i = 0; i < n; i++) {
    assert_int_equal(ids[i], json_integer_value(json_array_get(pids, i)));
    assert_int_equal(ids[i], json_integer_value(json_array_get(sent, i)));
  }
  /* following successors from the prompt's last token gives the continuation, then EOS */
  int64_t t = ids[n - 1];
  for (size_t i = 0; i < json_array_size(cont); i++) {
    t = json_integer_value(json_array_get(succ, (size_t)t));
    assert_int_equal(t, json_integer_value(json_array_get(cont, i)));
  }
  assert_int_equal(t, m->cfg.eos_token_id);
  free(ids);

  const dsv4i_weight *we, *wh, *wn;
  assert_int_equal(dsv4i_model_weight(m, DSV4I_W_EMBED, -1, -1, DSV4_DTYPE_BF16, V * D, &we), DSV4_OK);
  assert_int_equal(dsv4i_model_weight(m, DSV4I_W_HEAD, -1, -1, DSV4_DTYPE_BF16, V * D, &wh), DSV4_OK);
  assert_int_equal(dsv4i_model_weight(m, DSV4I_W_NORM, -1, -1, DSV4_DTYPE_BF16, D, &wn), DSV4_OK);
  const void *emb = we->data, *head = wh->data, *nw = wn->data;
  float *H = malloc((size_t)(V * D) * sizeof *H), *x = malloc((size_t)D * sizeof *x);
  float *w = malloc((size_t)D * sizeof *w);
  for (int64_t v = 0; v < V; v++) bf16_row(head, D, v, H + v * D);
  bf16_row(nw, D, 0, w);
  int64_t planted = 0;
  double min_gap = INFINITY;
  for (int64_t u = 0; u < V; u++) {
    int64_t want = json_integer_value(json_array_get(succ, (size_t)u));
    if (want < 0) continue;
    planted++;
    bf16_row(emb, D, u, x);
    double ss = 0;
    for (int64_t d = 0; d < D; d++) ss += (double)x[d] * x[d];
    float r = (float)(1.0 / sqrt(ss / (double)D + 1e-20));
    for (int64_t d = 0; d < D; d++) x[d] = dsv4i_bf16_to_f32(dsv4i_f32_to_bf16(x[d] * r * w[d]));
    double best = -INFINITY, second = -INFINITY;
    int64_t arg = -1;
    for (int64_t v = 0; v < V; v++) {
      double l = 0;
      for (int64_t d = 0; d < D; d++) l += (double)H[v * D + d] * x[d];
      if (l > best) {
        second = best;
        best = l;
        arg = v;
      } else if (l > second) {
        second = l;
      }
    }
    if (arg != want) fail_msg("head(norm(embed[%lld])) peaks at %lld, planted %lld", (long long)u,
                              (long long)arg, (long long)want);
    if (best - second < min_gap) min_gap = best - second;
  }
  /* the regular tokens are all linked, and the gap leaves room for the layers */
  assert_true(planted >= dsv4i_tokenizer_vocab_size(tok) - 4);
  if (min_gap < 4.0) fail_msg("smallest planted logit gap %.3f < 4", min_gap);
  free(H);
  free(x);
  free(w);
  dsv4i_tokenizer_free(tok);
  free(td);
  dsv4i_model_close(m);
  json_decref(mt);
}

/* ---- real dims, config only ---------------------------------------------- */

static void expect(const dsv4i_contract *c, const char *name, int32_t dtype, int64_t d0,
                   int64_t d1) {
  const dsv4i_tensor_spec *t = dsv4i_contract_find(c, name);
  if (!t) fail_msg("contract lacks %s", name);
  assert_int_equal(t->dtype, dtype);
  assert_int_equal(t->shape[0], d0);
  assert_int_equal(t->shape[1], d1);
}

/* Bytes of one routed expert (w1, w2, w3 and their scales) of block `p`. */
static uint64_t expert_bytes(const dsv4i_contract *c, const char *p, int e) {
  static const char *parts[] = {"w1.weight", "w1.scale", "w2.weight",
                                "w2.scale",  "w3.weight", "w3.scale"};
  uint64_t sum = 0;
  for (size_t i = 0; i < DSV4I_ARRAY_LEN(parts); i++) {
    char name[DSV4I_NAME_MAX];
    snprintf(name, sizeof name, "%s.ffn.experts.%d.%s", p, e, parts[i]);
    const dsv4i_tensor_spec *t = dsv4i_contract_find(c, name);
    if (!t) fail_msg("contract lacks %s", name);
    sum += t->nbytes;
  }
  return sum;
}

static void real_dims_two_layers(void **state) {
  (void)state;
  char *d = tu_mkdtemp();
  assert_int_equal(gen("--real-dims --layers 2 --config-only", d), 0);
  char *p = tu_join(d, "config.json");
  dsv4i_config c;
  dsv4_status s = dsv4i_config_load(p, &c);
  if (s) fail_msg("%s", dsv4i_error_message());
  assert_int_equal(c.dim, 5120);
  assert_int_equal(c.n_heads, 64);
  assert_int_equal(c.n_routed_experts, 384);
  assert_int_equal(c.n_layers, 2);
  assert_int_equal(c.n_mtp_layers, 2); /* one DSpark stage per tapped layer */
  assert_int_equal(c.vocab_size, 129280);
  dsv4i_contract ct;
  assert_int_equal(dsv4i_contract_build(&c, &ct), DSV4_OK);
  /* spec §4.2 / §4.3: MXFP4 experts, 18,800,640 B each */
  expect(&ct, "layers.0.ffn.experts.383.w1.weight", DSV4_DTYPE_I8, 2304, 2560);
  expect(&ct, "layers.0.ffn.experts.383.w1.scale", DSV4_DTYPE_F8_E8M0, 2304, 160);
  expect(&ct, "layers.1.ffn.experts.0.w2.weight", DSV4_DTYPE_I8, 5120, 1152);
  expect(&ct, "layers.1.ffn.experts.0.w2.scale", DSV4_DTYPE_F8_E8M0, 5120, 72);
  expect(&ct, "layers.1.ffn.shared_experts.w2.scale", DSV4_DTYPE_F8_E8M0, 160, 72);
  expect(&ct, "layers.0.attn.wo_a.weight", DSV4_DTYPE_F8_E4M3, 8192, 4096);
  expect(&ct, "mtp.0.ffn.experts.127.w3.weight", DSV4_DTYPE_I8, 2304, 2560);
  assert_null(dsv4i_contract_find(&ct, "layers.0.ffn.experts.384.w1.weight"));
  assert_null(dsv4i_contract_find(&ct, "mtp.0.ffn.experts.128.w1.weight"));
  assert_int_equal(expert_bytes(&ct, "layers.0", 0), 18800640);
  assert_int_equal(expert_bytes(&ct, "layers.1", 383), 18800640);
  assert_int_equal(expert_bytes(&ct, "mtp.1", 127), 18800640);
  uint64_t routed = 0;
  for (size_t i = 0; i < ct.n; i++)
    if (ct.specs[i].component == DSV4_COMP_ROUTED_EXPERTS) routed += ct.specs[i].nbytes;
  assert_int_equal(routed, (uint64_t)2 * 384 * 18800640);
  /* the public loader takes the directory config-only */
  struct dsv4_model *m = NULL;
  assert_int_equal(dsv4i_model_open(d, DSV4_MODEL_F_CONFIG_ONLY, NULL, &m), DSV4_OK);
  assert_int_equal(m->contract.n, ct.n);
  dsv4i_model_close(m);
  dsv4i_contract_free(&ct);
  free(p);
  tu_rmtree(d);
  free(d);
}

/* 40 layers + vision + release-size Engram: the release's tensor contract. */
static void real_dims_forty_layers_is_the_release(void **state) {
  (void)state;
  char *d = tu_mkdtemp();
  assert_int_equal(gen("--real-dims --layers 40 --vision --engram-rows 0 --config-only", d), 0);
  char *p = tu_join(d, "config.json");
  dsv4i_config c;
  assert_int_equal(dsv4i_config_load(p, &c), DSV4_OK);
  assert_int_equal(c.engram_num_embeddings[0], 384006168);
  assert_int_equal(c.engram_num_embeddings[1], 384016682);
  dsv4i_contract ct;
  assert_int_equal(dsv4i_contract_build(&c, &ct), DSV4_OK);
  assert_int_equal(ct.n, 96085);
  assert_int_equal(ct.payload_bytes, 510286023000ull);
  dsv4i_contract_free(&ct);
  free(p);
  tu_rmtree(d);
  free(d);
}

static void bad_options_fail(void **state) {
  (void)state;
  char *d = tu_mkdtemp();
  assert_int_not_equal(gen("--real-dims --layers 1 --config-only", d), 0);
  assert_int_not_equal(gen("--sentence 'a a a a' --prompt a", d), 0);
  assert_int_not_equal(gen("--no-such-option", d), 0);
  tu_rmtree(d);
  free(d);
}

int tu_run_suite(void) {
  const struct CMUnitTest tests[] = {
    cmocka_unit_test(tiny_loads_and_resolves),
    cmocka_unit_test(tiny_covers_every_role),
    cmocka_unit_test(tiny_shard_layout),
    cmocka_unit_test(deterministic),
    cmocka_unit_test(planted_successors),
    cmocka_unit_test(real_dims_two_layers),
    cmocka_unit_test(real_dims_forty_layers_is_the_release),
    cmocka_unit_test(bad_options_fail),
  };
  return cmocka_run_group_tests_name("generator", tests, setup, teardown);
}
