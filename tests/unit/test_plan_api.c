/*
 * Public memory-plan API (dsv4_plan_params_init, dsv4_plan_config,
 * dsv4_model_plan), linked against libdsv4.so: defaults, the built-in
 * release config, a config-only model, size-prefixed structs, statuses and
 * messages.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "dsv4/dsv4.h"
#include "test_util.h"

static char *release_config(void) { return tu_release_config_path(); }

static void params_init(void **state) {
  (void)state;
  dsv4_plan_params p;
  memset(&p, 0xff, sizeof p);
  assert_int_equal(dsv4_plan_params_init(&p, sizeof p), DSV4_OK);
  assert_int_equal(p.struct_size, sizeof p);
  assert_int_equal(p.nodes, 2);
  assert_int_equal(p.gpus_per_node, 8);
  assert_int_equal(p.tp, 8);
  assert_int_equal(p.pp, 2);
  assert_int_equal(p.kv_format, DSV4_KV_FORMAT_NATIVE);
  assert_int_equal(p.engram_placement, DSV4_ENGRAM_HOST);
  assert_int_equal(p.max_context, 1048576);
  assert_int_equal(p.stage_first_layer[1], 0);
  assert_int_equal(p.reserved0, 0);
  assert_int_equal(dsv4_plan_params_init(NULL, sizeof p), DSV4_ERR_INVALID_ARG);
  assert_int_equal(dsv4_plan_params_init(&p, 8), DSV4_ERR_PARAMS_SIZE);
}

/* Built-in config = the file; the field report's plan through the public struct. */
static void builtin_and_file(void **state) {
  (void)state;
  dsv4_plan a, b;
  assert_int_equal(dsv4_plan_config(NULL, NULL, &a, sizeof a), DSV4_OK);
  assert_string_equal(dsv4_last_error(), "");
  char *path = release_config();
  assert_int_equal(dsv4_plan_config(path, NULL, &b, sizeof b), DSV4_OK);
  free(path);
  assert_memory_equal(&a, &b, sizeof a);
  assert_int_equal(a.struct_size, sizeof a);
  assert_int_equal(a.checkpoint_bytes, INT64_C(510286023000));
  assert_int_equal(a.n_tensors, 96085);
  assert_int_equal(a.n_stages, 2);
  assert_int_equal(a.n_gpus, 16);
  assert_true(a.kv_bytes_per_token == 890.0);
  assert_true(a.stages[0].kv_bytes_per_token == 534.0);
  assert_true(a.stages[1].kv_bytes_per_token == 356.0);
  assert_int_equal(a.window_record_bytes, 528);
  assert_int_equal(a.kv_fixed_per_seq, 2930688);
  assert_int_equal(a.stages[1].first_layer, 20);
  assert_true(a.stages[0].holds & DSV4_PLAN_HOLDS_ENGRAM);
  assert_false(a.stages[1].holds & DSV4_PLAN_HOLDS_ENGRAM);
  assert_true(a.stages[1].holds & DSV4_PLAN_HOLDS_DSPARK);
  assert_int_equal(a.stages[0].engram_host_per_node, INT64_C(202758032400));
  assert_int_equal(a.host_node_max, 0);
  int64_t owned = 0, comp = 0;
  for (int k = 0; k < DSV4_PLAN_COMPONENTS; k++) {
    comp += a.component_bytes[k];
    for (int s = 0; s < a.n_stages; s++) owned += a.stages[s].owned[k];
  }
  assert_int_equal(comp, a.checkpoint_bytes);
  assert_int_equal(owned, a.checkpoint_bytes);
  for (int s = 0; s < a.n_stages; s++) {
    const dsv4_plan_stage *g = &a.stages[s];
    int64_t w = 0;
    for (int k = 0; k < DSV4_PLAN_COMPONENTS; k++) w += g->weights[k];
    assert_int_equal(w, g->weights_total);
    assert_int_equal(g->used, g->weights_total + g->load_extra + g->workspace + g->graphs +
                                  g->comm_nccl + g->comm_p2p + g->reserved);
    assert_int_equal(g->used + g->kv_pool, a.gpu_mem_bytes);
  }
  assert_true(a.seqs_at_max_context > 0);
}

/* A struct_size from an older header gets the fields it has. */
static void short_struct(void **state) {
  (void)state;
  dsv4_plan full, part;
  assert_int_equal(dsv4_plan_config(NULL, NULL, &full, sizeof full), DSV4_OK);
  size_t cut = offsetof(dsv4_plan, stages) + sizeof(dsv4_plan_stage);
  memset(&part, 0xab, sizeof part);
  assert_int_equal(dsv4_plan_config(NULL, NULL, &part, cut), DSV4_OK);
  assert_int_equal(part.struct_size, cut);
  assert_memory_equal((const char *)&part + 4, (const char *)&full + 4, cut - 4);
  assert_int_equal(((const unsigned char *)&part)[cut], 0xab);
  assert_int_equal(dsv4_plan_config(NULL, NULL, &part, 16), DSV4_ERR_PARAMS_SIZE);
  assert_int_equal(dsv4_plan_config(NULL, NULL, NULL, sizeof part), DSV4_ERR_INVALID_ARG);
}

static void statuses(void **state) {
  (void)state;
  dsv4_plan_params p;
  dsv4_plan pl;
  assert_int_equal(dsv4_plan_params_init(&p, sizeof p), DSV4_OK);
  p.stage_first_layer[1] = 10;
  assert_int_equal(dsv4_plan_config(NULL, &p, &pl, sizeof pl), DSV4_ERR_UNSUPPORTED);
  assert_non_null(strstr(dsv4_last_error(), "cannot start at layer 10"));
  assert_int_equal(dsv4_plan_params_init(&p, sizeof p), DSV4_OK);
  p.nodes = 1;
  p.pp = 1;
  memset(&pl, 0, sizeof pl);
  assert_int_equal(dsv4_plan_config(NULL, &p, &pl, sizeof pl), DSV4_ERR_DOES_NOT_FIT);
  assert_non_null(strstr(dsv4_last_error(), "GPU memory overflows"));
  assert_int_equal(pl.n_stages, 1); /* figures kept */
  assert_true(pl.stages[0].kv_pool < 0);
  assert_int_equal(dsv4_plan_config("/no/such/config.json", NULL, &pl, sizeof pl),
                   DSV4_ERR_NOT_FOUND);
  p.struct_size = 8;
  assert_int_equal(dsv4_plan_config(NULL, &p, &pl, sizeof pl), DSV4_ERR_PARAMS_SIZE);
}

/* A config-only model of the tiny fixture plans; errors land on the handle. */
static void model_plan(void **state) {
  (void)state;
  const char *dir = tu_fixture_or_skip("tiny-v41-a");
  dsv4_model_params mp;
  assert_int_equal(dsv4_model_params_init(&mp, sizeof mp), DSV4_OK);
  mp.flags = DSV4_MODEL_F_CONFIG_ONLY;
  dsv4_model *m = NULL;
  assert_int_equal(dsv4_model_load(dir, &mp, &m), DSV4_OK);
  dsv4_plan_params p;
  assert_int_equal(dsv4_plan_params_init(&p, sizeof p), DSV4_OK);
  p.nodes = 1;
  p.gpus_per_node = 2;
  p.tp = 2;
  p.pp = 1;
  p.gpu_mem_bytes = INT64_C(1) << 30;
  p.gpu_reserved_bytes = 0;
  p.nccl_bytes = 0;
  p.max_context = 4096;
  p.prefill_chunk = 128;
  dsv4_plan pl;
  assert_int_equal(dsv4_model_plan(m, &p, &pl, sizeof pl), DSV4_OK);
  assert_int_equal(pl.n_stages, 1);
  assert_true(pl.kv_bytes_per_token == 280.0);
  assert_true(pl.seqs_at_max_context > 100);
  p.tp = 4; /* 4 heads, 2 wo_a groups: TP4 cannot split the groups */
  p.gpus_per_node = 4;
  assert_int_equal(dsv4_model_plan(m, &p, &pl, sizeof pl), DSV4_ERR_UNSUPPORTED);
  assert_non_null(strstr(dsv4_model_last_error(m), "TP 4 must divide"));
  assert_int_equal(dsv4_model_plan(NULL, &p, &pl, sizeof pl), DSV4_ERR_INVALID_ARG);
  dsv4_model_free(m);
}

int tu_run_suite(void) {
  const struct CMUnitTest tests[] = {
    cmocka_unit_test(params_init),  cmocka_unit_test(builtin_and_file), cmocka_unit_test(short_struct),
    cmocka_unit_test(statuses),     cmocka_unit_test(model_plan),
  };
  return cmocka_run_group_tests_name("plan_api", tests, NULL, NULL);
}
