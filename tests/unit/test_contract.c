/*
 * Tensor contract (lib/model/contract.c): the release config gives the
 * exact tensor count, payload and per-component bytes of spec §4.4; shapes
 * of spec §4.2; the tiny fixtures' checkpoints equal their contracts; and
 * the weight check reports every difference in one message.
 */
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "io/safetensors.h"
#include "model/config.h"
#include "model/weights.h"
#include "release_config.h"
#include "test_util.h"

static void load_release(dsv4i_config *c, dsv4i_contract *k) {
  tu_load_release_config(c);
  assert_int_equal(dsv4i_contract_build(c, k), DSV4_OK);
}

static void expect_tensor(const dsv4i_contract *k, const char *name, int32_t dtype, int64_t d0,
                          int64_t d1) {
  const dsv4i_tensor_spec *t = dsv4i_contract_find(k, name);
  if (!t) fail_msg("%s is not in the contract", name);
  int ndim = d1 < 0 ? 1 : 2;
  if (t->dtype != dtype || t->ndim != ndim || t->shape[0] != d0 || (ndim == 2 && t->shape[1] != d1))
    fail_msg("%s: dtype %d [%lld, %lld] (ndim %d); want dtype %d [%lld, %lld]", name, t->dtype,
             (long long)t->shape[0], (long long)t->shape[1], t->ndim, dtype, (long long)d0, (long long)d1);
}

/* spec §4.4: 96,085 tensors, 510,286,023,000 bytes; the component table. */
static void release_totals(void **state) {
  (void)state;
  dsv4i_config c;
  dsv4i_contract k;
  load_release(&c, &k);
  assert_int_equal(k.n, 96085);
  assert_int_equal(k.payload_bytes, UINT64_C(510286023000));
  uint64_t bytes[DSV4_COMP_COUNT_V0_1] = {0}, params[DSV4_COMP_COUNT_V0_1] = {0}, sum = 0;
  uint64_t etab_codes = 0, etab_scales = 0;
  for (size_t i = 0; i < k.n; i++) {
    const dsv4i_tensor_spec *t = &k.specs[i];
    assert_true(i == 0 || strcmp(k.specs[i - 1].name, t->name) < 0);
    assert_int_equal(t->component, dsv4i_component_of(t->name));
    bytes[t->component] += t->nbytes;
    sum += t->nbytes;
    if (t->dtype != DSV4_DTYPE_F8_E8M0) /* parameters: no scales; packed fp4 counts 2 per byte */
      params[t->component] += t->nbytes / dsv4i_dtype_size(t->dtype) * (t->dtype == DSV4_DTYPE_I8 ? 2 : 1);
    if (t->component == DSV4_COMP_ENGRAM_TABLES)
      *(t->dtype == DSV4_DTYPE_F8_E8M0 ? &etab_scales : &etab_codes) += t->nbytes;
  }
  assert_int_equal(sum, k.payload_bytes);
  /* exact bytes per component (printed in the report), then spec §4.4 rounding */
  static const struct { int comp; uint64_t bytes; const char *gb; const char *bparams; } want[] = {
    {DSV4_COMP_ROUTED_EXPERTS, UINT64_C(288777830400), "288.78", "543.58"},
    {DSV4_COMP_ENGRAM_TABLES, UINT64_C(202758032400), "202.76", "196.61"},
    {DSV4_COMP_DSPARK, UINT64_C(7932874632), "7.93", "14.23"},
    {DSV4_COMP_ATTENTION, UINT64_C(5151556608), "5.15", "5.13"},
    {DSV4_COMP_EMBED_HEAD, UINT64_C(2647664640), "2.65", "1.32"},
    {DSV4_COMP_SHARED_EXPERTS, UINT64_C(1416960000), "1.42", "1.42"},
    {DSV4_COMP_VISION, UINT64_C(970536960), "0.97", "0.49"},
    /* spec §4.4 prints 0.32 B params here: the bytes round to 0.32 GB, but the
     * parameters are 314,654,720 = 0.31 B (scales add only 307,200 bytes). */
    {DSV4_COMP_ENGRAM_PROJ, UINT64_C(315043840), "0.32", "0.31"},
    {DSV4_COMP_OTHER, UINT64_C(315523520), "0.32", "0.12"},
  };
  uint64_t total_params = 0;
  for (size_t i = 0; i < DSV4I_ARRAY_LEN(want); i++) {
    char gb[32], bp[32];
    int comp = want[i].comp;
    snprintf(gb, sizeof gb, "%.2f", (double)bytes[comp] / 1e9);
    snprintf(bp, sizeof bp, "%.2f", (double)params[comp] / 1e9);
    print_message("%-15s %15llu bytes = %s GB, %s B params\n", dsv4i_component_name(comp),
                  (unsigned long long)bytes[comp], gb, bp);
    assert_int_equal(bytes[comp], want[i].bytes);
    assert_string_equal(gb, want[i].gb);
    assert_string_equal(bp, want[i].bparams);
    total_params += params[comp];
  }
  char buf[32];
  snprintf(buf, sizeof buf, "%.2f %.2f", (double)etab_codes / 1e9, (double)etab_scales / 1e9);
  assert_string_equal(buf, "196.61 6.14");
  snprintf(buf, sizeof buf, "%.1f", (double)total_params / 1e9);
  assert_string_equal(buf, "763.2");
  /* backbone = total - Engram tables - vision - DSpark = 551.88 B ("552B") */
  uint64_t backbone = total_params - params[DSV4_COMP_ENGRAM_TABLES] - params[DSV4_COMP_VISION] -
                      params[DSV4_COMP_DSPARK];
  snprintf(buf, sizeof buf, "%.2f", (double)backbone / 1e9);
  assert_string_equal(buf, "551.88");
  snprintf(buf, sizeof buf, "%.2f", (double)k.payload_bytes / (1024.0 * 1024 * 1024));
  assert_string_equal(buf, "475.24");
  dsv4i_contract_free(&k);
}

/* spec §4.2 rows and §4.3 (one routed expert = 18,800,640 B). */
static void release_shapes(void **state) {
  (void)state;
  dsv4i_config c;
  dsv4i_contract k;
  load_release(&c, &k);
  const int BF = DSV4_DTYPE_BF16, F32 = DSV4_DTYPE_F32, E4 = DSV4_DTYPE_F8_E4M3, E8 = DSV4_DTYPE_F8_E8M0;
  expect_tensor(&k, "embed.weight", BF, 129280, 5120);
  expect_tensor(&k, "layers.0.attn.attn_sink", F32, 64, -1);
  expect_tensor(&k, "layers.0.attn.wq_a.scale", E8, 40, 160);
  expect_tensor(&k, "layers.0.attn.wq_b.weight", E4, 32768, 1280);
  expect_tensor(&k, "layers.0.attn.wq_b.scale", E8, 1024, 40);
  expect_tensor(&k, "layers.0.attn.wkv.scale", E8, 16, 160);
  expect_tensor(&k, "layers.39.attn.wo_a.weight", E4, 8192, 4096);
  expect_tensor(&k, "layers.39.attn.wo_a.scale", E8, 256, 128);
  expect_tensor(&k, "layers.39.attn.wo_b.scale", E8, 160, 256);
  expect_tensor(&k, "layers.5.ffn.gate.bias_vl", F32, 384, -1);
  expect_tensor(&k, "mtp.1.ffn.gate.weight", BF, 128, 5120);
  expect_tensor(&k, "layers.7.ffn.experts.383.w1.weight", DSV4_DTYPE_I8, 2304, 2560);
  expect_tensor(&k, "layers.7.ffn.experts.383.w1.scale", E8, 2304, 160);
  expect_tensor(&k, "layers.7.ffn.experts.0.w2.weight", DSV4_DTYPE_I8, 5120, 1152);
  expect_tensor(&k, "layers.7.ffn.experts.0.w2.scale", E8, 5120, 72);
  expect_tensor(&k, "layers.7.ffn.shared_experts.w2.scale", E8, 160, 72);
  expect_tensor(&k, "layers.7.hc_attn_fn", F32, 24, 20480);
  expect_tensor(&k, "layers.7.hc_ffn_scale", F32, 3, -1);
  expect_tensor(&k, "layers.2.attn.compressor.wgate.weight", BF, 512, 5120);
  expect_tensor(&k, "layers.20.attn.compressor.wkv.weight", BF, 512, 5120);
  expect_tensor(&k, "layers.20.attn.indexer.wk.weight", BF, 128, 512);
  expect_tensor(&k, "layers.36.attn.indexer.wq_b.scale", E8, 128, 40);
  expect_tensor(&k, "layers.36.attn.indexer.weights_proj.weight", BF, 32, 5120);
  expect_tensor(&k, "layers.1.engram.embed.weight", E4, 384006168, 256);
  expect_tensor(&k, "layers.14.engram.embed.scale", E8, 384016682, 8);
  expect_tensor(&k, "layers.14.engram.q_weight", BF, 4, 5120);
  expect_tensor(&k, "layers.14.engram.wkv.scale", E8, 800, 192);
  expect_tensor(&k, "mtp.0.main_proj.scale", E8, 160, 480);
  expect_tensor(&k, "mtp.2.markov_head.head.weight", BF, 129280, 256);
  expect_tensor(&k, "mtp.2.confidence_head.proj.weight", BF, 1, 5376);
  expect_tensor(&k, "aligner.w1.weight", BF, 5120, 9216);
  expect_tensor(&k, "vision.patch_embed.proj.weight", BF, 1024, 588);
  expect_tensor(&k, "vision.blocks.31.mlp.w1.weight", BF, 5632, 1024);
  expect_tensor(&k, "image_newline", BF, 5120, -1);
  /* absent by role */
  const char *absent[] = {"layers.20.attn.compressor.wgate.weight", "layers.24.attn.indexer.wk.weight",
                          "layers.3.attn.indexer.wq_b.weight", "layers.2.engram.q_weight",
                          "vision.blocks.32.norm1.weight", "mtp.1.main_proj.weight", "mtp.0.norm.weight",
                          "mtp.0.attn.compressor.wkv.weight", "mtp.0.embed.weight"};
  for (size_t i = 0; i < DSV4I_ARRAY_LEN(absent); i++)
    if (dsv4i_contract_find(&k, absent[i])) fail_msg("%s must not be in the contract", absent[i]);
  uint64_t blob = 0;
  for (size_t i = 0; i < k.n; i++)
    if (strncmp(k.specs[i].name, "layers.9.ffn.experts.17.", 24) == 0) blob += k.specs[i].nbytes;
  assert_int_equal(blob, 18800640);
  /* without vision_config: 3 delimiters + 4 aligner + 3 patch/norm + 32 x 8 block tensors fewer */
  c.has_vision = 0;
  dsv4i_contract nv;
  assert_int_equal(dsv4i_contract_build(&c, &nv), DSV4_OK);
  assert_int_equal(nv.n, 96085 - 266);
  assert_int_equal(nv.payload_bytes, k.payload_bytes - 970536960);
  dsv4i_contract_free(&nv);
  dsv4i_contract_free(&k);
}

static void component_rules(void **state) {
  (void)state;
  const struct { const char *name; int comp; } cases[] = {
    {"layers.3.ffn.experts.2.w1.scale", DSV4_COMP_ROUTED_EXPERTS},
    {"layers.3.ffn.shared_experts.w1.weight", DSV4_COMP_SHARED_EXPERTS},
    {"layers.12.attn.indexer.wk.weight", DSV4_COMP_ATTENTION},
    {"layers.1.engram.embed.scale", DSV4_COMP_ENGRAM_TABLES},
    {"layers.1.engram.wkv.weight", DSV4_COMP_ENGRAM_PROJ},
    {"mtp.0.ffn.experts.1.w1.weight", DSV4_COMP_DSPARK},
    {"vision.norm.weight", DSV4_COMP_VISION}, {"aligner.w2.bias", DSV4_COMP_VISION},
    {"image_end", DSV4_COMP_VISION}, {"head.weight", DSV4_COMP_EMBED_HEAD},
    {"norm.weight", DSV4_COMP_EMBED_HEAD}, {"layers.0.hc_ffn_fn", DSV4_COMP_OTHER},
    {"layers.0.ffn.gate.bias", DSV4_COMP_OTHER}, {"layers.0.attn_norm.weight", DSV4_COMP_OTHER},
    {"layersX.attn.wq_a.weight", DSV4_COMP_OTHER}, {"", DSV4_COMP_OTHER},
  };
  for (size_t i = 0; i < DSV4I_ARRAY_LEN(cases); i++)
    if (dsv4i_component_of(cases[i].name) != cases[i].comp)
      fail_msg("%s: component %d, want %d", cases[i].name, dsv4i_component_of(cases[i].name), cases[i].comp);
  assert_string_equal(dsv4i_component_name(DSV4_COMP_ROUTED_EXPERTS), "routed_experts");
  assert_string_equal(dsv4i_component_name(99), "?");
}


/* Both tiny fixtures: the checkpoint is exactly the contract of its config. */
static void fixtures_equal_their_contract(void **state) {
  (void)state;
  const char *fixtures[] = {"tiny-v41-a", "tiny-v41-e2e-a"};
  for (size_t f = 0; f < 2; f++) {
    const char *dir = tu_fixture_or_skip(fixtures[f]);
    char *d = strdup(dir), *cfg_path = tu_join(d, "config.json");
    dsv4i_config c;
    dsv4i_contract k;
    dsv4i_checkpoint ck;
    assert_int_equal(dsv4i_config_load(cfg_path, &c), DSV4_OK);
    assert_int_equal(dsv4i_contract_build(&c, &k), DSV4_OK);
    assert_int_equal(k.n, 1542);
    assert_int_equal(k.payload_bytes, 7866000);
    assert_int_equal(dsv4i_checkpoint_open(d, &ck), DSV4_OK);
    if (dsv4i_contract_check(&k, &ck, d) != DSV4_OK) fail_msg("%s", dsv4i_error_message());
    assert_int_equal(ck.n_entries, k.n);
    assert_int_equal(ck.payload_bytes, k.payload_bytes);
    for (size_t i = 0; i < k.n; i++) assert_int_equal(ck.entries[i].t->nbytes, k.specs[i].nbytes);
    dsv4i_checkpoint_close(&ck);
    dsv4i_contract_free(&k);
    free(cfg_path);
    free(d);
  }
}

/* An in-memory checkpoint: the contract's tensors, then edited by the test. */
typedef struct fake_ckpt {
  dsv4i_st_tensor *t;
  dsv4i_ckpt_entry *e;
  size_t n;
  dsv4i_checkpoint ck;
} fake_ckpt;

static void fake_from(fake_ckpt *f, const dsv4i_contract *k) {
  f->t = calloc(k->n + 8, sizeof *f->t);
  f->e = calloc(k->n + 8, sizeof *f->e);
  for (size_t i = 0; i < k->n; i++) {
    f->t[i].name = strdup(k->specs[i].name);
    f->t[i].dtype = k->specs[i].dtype;
    f->t[i].ndim = k->specs[i].ndim;
    memcpy(f->t[i].shape, k->specs[i].shape, sizeof k->specs[i].shape);
  }
  f->n = k->n;
}

static dsv4i_st_tensor *fake_get(fake_ckpt *f, const char *name) {
  for (size_t i = 0; i < f->n; i++)
    if (strcmp(f->t[i].name, name) == 0) return &f->t[i];
  fail_msg("no %s", name);
  return NULL;
}

static void fake_drop_prefix(fake_ckpt *f, const char *prefix) {
  size_t w = 0;
  for (size_t i = 0; i < f->n; i++) {
    if (strncmp(f->t[i].name, prefix, strlen(prefix)) == 0) free(f->t[i].name);
    else f->t[w++] = f->t[i];
  }
  f->n = w;
}

static int by_tensor_name(const void *a, const void *b) {
  return strcmp(((const dsv4i_st_tensor *)a)->name, ((const dsv4i_st_tensor *)b)->name);
}

static const dsv4i_checkpoint *fake_finish(fake_ckpt *f) {
  qsort(f->t, f->n, sizeof *f->t, by_tensor_name);
  for (size_t i = 0; i < f->n; i++) f->e[i] = (dsv4i_ckpt_entry){f->t[i].name, 0, &f->t[i], NULL};
  memset(&f->ck, 0, sizeof f->ck);
  f->ck.entries = f->e;
  f->ck.n_entries = f->n;
  return &f->ck;
}

static void fake_free(fake_ckpt *f) {
  for (size_t i = 0; i < f->n; i++) free(f->t[i].name);
  free(f->t);
  free(f->e);
}

static void tiny_contract(dsv4i_contract *k) {
  dsv4i_config c;
  tu_load_fixture_config("tiny-v41-a", &c);
  assert_int_equal(dsv4i_contract_build(&c, k), DSV4_OK);
}

static void expect_in(const char *msg, const char *needle) {
  if (!strstr(msg, needle)) fail_msg("\"%s\" not in the message:\n%s", needle, msg);
}

static void check_lists_every_difference(void **state) {
  (void)state;
  dsv4i_contract k;
  fake_ckpt f;
  tiny_contract(&k);
  fake_from(&f, &k);
  assert_int_equal(dsv4i_contract_check(&k, fake_finish(&f), "fake"), DSV4_OK);
  fake_drop_prefix(&f, "layers.3.attn.wq_a.scale");
  fake_drop_prefix(&f, "norm.weight");
  f.t[f.n++] = (dsv4i_st_tensor){.name = strdup("layers.3.attn.extra.weight"), .dtype = DSV4_DTYPE_BF16,
                                 .ndim = 1, .shape = {7}};
  fake_get(&f, "layers.0.ffn.gate.bias")->dtype = DSV4_DTYPE_BF16;
  fake_get(&f, "embed.weight")->shape[1] = 64;
  dsv4i_st_tensor *sink = fake_get(&f, "layers.0.attn.attn_sink");
  sink->ndim = 2;
  sink->shape[1] = 1;
  assert_int_equal(dsv4i_contract_check(&k, fake_finish(&f), "fake"), DSV4_ERR_WEIGHTS);
  const char *m = dsv4i_error_message();
  expect_in(m, "fake: ");
  expect_in(m, "(2 missing, 1 unexpected, 1 wrong dtype, 2 wrong shape)");
  expect_in(m, "missing (2):\n  layers.3.attn.wq_a.scale (F8_E8M0 [3, 4])\n  norm.weight (BF16 [128])");
  expect_in(m, "unexpected (1):\n  layers.3.attn.extra.weight (BF16 [7])");
  expect_in(m, "wrong dtype (1):\n  layers.0.ffn.gate.bias: BF16, expected F32");
  expect_in(m, "embed.weight: [640, 64], expected [640, 128]");
  expect_in(m, "layers.0.attn.attn_sink: [4, 1], expected [4]");
  fake_free(&f);
  dsv4i_contract_free(&k);
}

/* 16 experts x 6 tensors gone from one layer: counted, 20 listed. */
static void check_caps_each_list(void **state) {
  (void)state;
  dsv4i_contract k;
  fake_ckpt f;
  tiny_contract(&k);
  fake_from(&f, &k);
  fake_drop_prefix(&f, "layers.0.ffn.experts.");
  assert_int_equal(dsv4i_contract_check(&k, fake_finish(&f), "fake"), DSV4_ERR_WEIGHTS);
  const char *m = dsv4i_error_message();
  expect_in(m, "(96 missing, 0 unexpected, 0 wrong dtype, 0 wrong shape)");
  expect_in(m, "missing (96), first 20:");
  int listed = 0;
  for (const char *p = m; (p = strstr(p, "layers.0.ffn.experts.")); p++) listed++;
  assert_int_equal(listed, DSV4I_CHECK_LIST);
  assert_null(strstr(m, "unexpected ("));
  fake_free(&f);
  dsv4i_contract_free(&k);
}

/* A config whose tensors pass 2^64 bytes is refused, not wrapped. */
static void contract_overflow_is_an_error(void **state) {
  (void)state;
  dsv4i_config c;
  dsv4i_contract k;
  load_release(&c, &k);
  dsv4i_contract_free(&k);
  c.engram_num_embeddings[0] = INT64_MAX / 64;
  assert_int_equal(dsv4i_contract_build(&c, &k), DSV4_ERR_CONFIG_VALUE);
  assert_non_null(strstr(dsv4i_error_message(), "layers.1.engram.embed.weight"));
  assert_null(k.specs);
  assert_int_equal(k.n, 0);
}

/* The weight table of the release: every contract tensor in exactly one entry (a
 * scale with its weight), keys unique, the TP split rules and placements of design §6. */
static void release_weight_table(void **state) {
  (void)state;
  dsv4i_config c;
  dsv4i_contract k;
  load_release(&c, &k);
  dsv4i_weights wt;
  assert_int_equal(dsv4i_weights_build(&c, &k, &wt), DSV4_OK);
  uint8_t *seen = calloc(k.n, 1);
  assert_non_null(seen);
  uint64_t bytes = 0;
  for (size_t i = 0; i < wt.n; i++) {
    const dsv4i_weight *w = &wt.w[i];
    assert_int_equal(seen[w->spec_index]++, 0);
    bytes += w->nbytes + w->scale_nbytes;
    if (w->scale_spec) assert_int_equal(seen[w->scale_index]++, 0);
    if (i > 0) { /* sorted, unique keys */
      const dsv4i_weight *p = &wt.w[i - 1];
      assert_true(p->role < w->role || (p->role == w->role && (p->layer < w->layer ||
                  (p->layer == w->layer && p->expert < w->expert))));
    }
    assert_ptr_equal(dsv4i_weights_find(&wt, w->role, w->layer, w->expert), w);
  }
  for (size_t i = 0; i < k.n; i++) assert_int_equal(seen[i], 1);
  assert_int_equal(bytes, k.payload_bytes);
  /* roles, layers, experts, split rules, placements */
  const int32_t L = c.n_layers, S0 = c.n_layers; /* DSpark stage 0 is layer n_layers */
  const dsv4i_weight *w = dsv4i_weights_find(&wt, DSV4I_W_EXPERT_W2, 7, 383);
  assert_non_null(w);
  assert_string_equal(dsv4i_weight_name(w), "layers.7.ffn.experts.383.w2.weight");
  assert_int_equal(w->split, DSV4I_SPLIT_COLS);
  assert_int_equal(w->placement, DSV4I_PLACE_LAYER);
  assert_int_equal(w->dtype, DSV4_DTYPE_I8);
  assert_string_equal(w->scale_spec->name, "layers.7.ffn.experts.383.w2.scale");
  w = dsv4i_weights_find(&wt, DSV4I_W_ATTN_WQ_B, S0 + 2, -1);
  assert_non_null(w);
  assert_string_equal(dsv4i_weight_name(w), "mtp.2.attn.wq_b.weight");
  assert_int_equal(w->split, DSV4I_SPLIT_ROWS);
  assert_int_equal(w->placement, DSV4I_PLACE_DSPARK);
  assert_int_equal(dsv4i_weights_find(&wt, DSV4I_W_ATTN_WO_B, 0, -1)->split, DSV4I_SPLIT_COLS);
  assert_int_equal(dsv4i_weights_find(&wt, DSV4I_W_ATTN_WKV, 0, -1)->split, DSV4I_SPLIT_NONE);
  assert_int_equal(dsv4i_weights_find(&wt, DSV4I_W_EMBED, -1, -1)->placement, DSV4I_PLACE_INPUT);
  assert_int_equal(dsv4i_weights_find(&wt, DSV4I_W_HEAD, -1, -1)->split, DSV4I_SPLIT_ROWS);
  assert_int_equal(dsv4i_weights_find(&wt, DSV4I_W_NORM, -1, -1)->placement, DSV4I_PLACE_OUTPUT);
  const int32_t eng = c.engram_layers[0];
  w = dsv4i_weights_find(&wt, DSV4I_W_ENGRAM_EMBED, eng, -1);
  assert_non_null(w);
  assert_int_equal(w->split, DSV4I_SPLIT_ENGRAM);
  assert_non_null(w->scale_spec);
  assert_string_equal(dsv4i_weight_name(dsv4i_weights_find(&wt, DSV4I_W_DSPARK_NORM,
                                                           S0 + c.n_mtp_layers - 1, -1)),
                      "mtp.2.norm.weight");
  assert_null(dsv4i_weights_find(&wt, DSV4I_W_ATTN_WQ_A, L + c.n_mtp_layers, -1));
  assert_null(dsv4i_weights_find(&wt, DSV4I_W_EXPERT_W1, 0, c.n_routed_experts));
  /* the checked getter: a config-only table has no data */
  const dsv4i_weight *got;
  dsv4i_error_clear();
  assert_int_equal(dsv4i_weights_get(&wt, DSV4I_W_EMBED, -1, -1, -1, -1, &got), DSV4_ERR_NOT_FOUND);
  assert_non_null(strstr(dsv4i_error_message(), "embed.weight"));
  assert_null(got);
  assert_int_equal(dsv4i_weights_get(&wt, DSV4I_W_GATE_BIAS, 99, -1, -1, -1, &got), DSV4_ERR_NOT_FOUND);
  free(seen);
  dsv4i_weights_free(&wt);
  dsv4i_contract_free(&k);
}

int tu_run_suite(void) {
  const struct CMUnitTest tests[] = {
    cmocka_unit_test(release_totals),
    cmocka_unit_test(release_shapes),
    cmocka_unit_test(release_weight_table),
    cmocka_unit_test(component_rules),
    cmocka_unit_test(contract_overflow_is_an_error),
    cmocka_unit_test(fixtures_equal_their_contract),
    cmocka_unit_test(check_lists_every_difference),
    cmocka_unit_test(check_caps_each_list),
  };
  return cmocka_run_group_tests_name("contract", tests, NULL, NULL);
}
