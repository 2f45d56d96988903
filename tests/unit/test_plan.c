/*
 * Topology memory planner (lib/engine/plan_topo.c, docs/planner.md):
 * per-component contract bytes of the release config and their per-GPU
 * split summing back to the totals; KV bytes per token and fixed per
 * sequence against the closed forms of spec §5.8 (890 B/token, per stage,
 * the 584 B window variant); the field report's scenario; what does not fit
 * (GPU, KV pool, host) and refused stage splits; the tiny fixture config.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backend/kv_layout.h"
#include "engine/plan.h"
#include "model/config.h"
#include "release_config.h"
#include "test_util.h"


static void plan_ok(const dsv4i_config *c, const dsv4i_topo_params *p, dsv4i_topo_plan *out) {
  dsv4_status st = dsv4i_plan_compute(c, NULL, p, out);
  if (st != DSV4_OK) fail_msg("plan: status %d: %s", (int)st, dsv4i_error_message());
}

/* The release config, the default topology and its plan. */
static void release_default_plan(dsv4i_config *c, dsv4i_topo_params *p, dsv4i_topo_plan *pl) {
  tu_load_release_config(c);
  dsv4i_topo_params_default(p);
  plan_ok(c, p, pl);
}

/* Every stage's ranks sum back to the tensors the stage holds; the stages' owned
 * bytes sum to the contract, component by component. */
static void check_split_sums(const dsv4i_topo_plan *pl) {
  int engram_on_gpu = pl->params.engram_placement == DSV4I_ENGRAM_DEVICE;
  for (int k = 0; k < DSV4I_PLAN_NCOMP; k++) {
    int64_t owned = 0;
    for (int32_t s = 0; s < pl->n_stages; s++) {
      const dsv4i_topo_stage *sg = &pl->stage[s];
      owned += sg->owned[k];
      if (k == DSV4_COMP_ENGRAM_TABLES && !engram_on_gpu) {
        for (int32_t r = 0; r < pl->tp; r++) assert_int_equal(pl->gpu[s * pl->tp + r].weights[k], 0);
        continue;
      }
      int64_t rep = pl->gpu[s * pl->tp].replicated[k], sum = rep;
      for (int32_t r = 0; r < pl->tp; r++) {
        const dsv4i_topo_gpu *g = &pl->gpu[s * pl->tp + r];
        assert_int_equal(g->replicated[k], rep);
        assert_true(g->weights[k] >= g->replicated[k]);
        sum += g->weights[k] - g->replicated[k];
      }
      if (sum != sg->held[k])
        fail_msg("stage %d component %s: ranks sum to %lld, the stage holds %lld", (int)s,
                 dsv4i_component_name(k), (long long)sum, (long long)sg->held[k]);
    }
    if (owned != pl->component_bytes[k])
      fail_msg("component %s: stages own %lld, the contract has %lld", dsv4i_component_name(k),
               (long long)owned, (long long)pl->component_bytes[k]);
  }
  int64_t total = 0;
  for (int k = 0; k < DSV4I_PLAN_NCOMP; k++) total += pl->component_bytes[k];
  assert_int_equal(total, pl->contract_bytes);
}

/* spec §4.4: exact component bytes, from closed forms of §4.2 where short. */
static void release_components(void **state) {
  (void)state;
  dsv4i_config c;
  dsv4i_topo_params p;
  dsv4i_topo_plan pl;
  release_default_plan(&c, &p, &pl);
  assert_int_equal(pl.n_tensors, 96085);
  assert_int_equal(pl.contract_bytes, INT64_C(510286023000));
  static const struct { int comp; int64_t bytes; } want[] = {
    {DSV4_COMP_ROUTED_EXPERTS, INT64_C(288777830400)}, {DSV4_COMP_SHARED_EXPERTS, INT64_C(1416960000)},
    {DSV4_COMP_ATTENTION, INT64_C(5151556608)},        {DSV4_COMP_ENGRAM_TABLES, INT64_C(202758032400)},
    {DSV4_COMP_ENGRAM_PROJ, INT64_C(315043840)},       {DSV4_COMP_DSPARK, INT64_C(7932874632)},
    {DSV4_COMP_VISION, INT64_C(970536960)},            {DSV4_COMP_EMBED_HEAD, INT64_C(2647664640)},
    {DSV4_COMP_OTHER, INT64_C(315523520)},
  };
  for (size_t i = 0; i < DSV4I_ARRAY_LEN(want); i++)
    assert_int_equal(pl.component_bytes[want[i].comp], want[i].bytes);
  /* closed forms: 40 x 384 experts of 18,800,640 B (spec §4.3); tables x (256 + 8) B;
   * shared 3 x (2304 x 5120 + 72 x 160) per layer; embed + head + norm */
  assert_int_equal(pl.component_bytes[DSV4_COMP_ROUTED_EXPERTS], INT64_C(40) * 384 * 18800640);
  assert_int_equal(pl.component_bytes[DSV4_COMP_ENGRAM_TABLES],
                   (INT64_C(384006168) + INT64_C(384016682)) * (256 + 8));
  assert_int_equal(pl.component_bytes[DSV4_COMP_SHARED_EXPERTS],
                   INT64_C(40) * 3 * (2304 * 5120 + 72 * 160));
  assert_int_equal(pl.component_bytes[DSV4_COMP_EMBED_HEAD], INT64_C(2) * 129280 * 5120 * 2 + 5120 * 2);
  check_split_sums(&pl);
  dsv4i_topo_plan_free(&pl);
}

/* The per-GPU split sums back to the totals on other topologies too. */
static void split_sums_topologies(void **state) {
  (void)state;
  dsv4i_config c;
  tu_load_release_config(&c);
  static const struct { int32_t nodes, gpn, tp, pp, engram; } topo[] = {
    {2, 8, 8, 2, DSV4I_ENGRAM_HOST}, {2, 8, 8, 2, DSV4I_ENGRAM_DEVICE}, {4, 8, 8, 4, DSV4I_ENGRAM_HOST},
    {1, 4, 2, 2, DSV4I_ENGRAM_HOST}, {1, 1, 1, 1, DSV4I_ENGRAM_DEVICE}, {5, 1, 1, 5, DSV4I_ENGRAM_HOST},
    {1, 4, 4, 1, DSV4I_ENGRAM_HOST},
  };
  dsv4i_contract k;
  assert_int_equal(dsv4i_contract_build(&c, &k), DSV4_OK);
  for (size_t i = 0; i < DSV4I_ARRAY_LEN(topo); i++) {
    dsv4i_topo_params p;
    dsv4i_topo_params_default(&p);
    p.nodes = topo[i].nodes;
    p.gpus_per_node = topo[i].gpn;
    p.tp = topo[i].tp;
    p.pp = topo[i].pp;
    p.engram_placement = topo[i].engram;
    dsv4i_topo_plan pl;
    dsv4_status st = dsv4i_plan_compute(&c, &k, &p, &pl);
    assert_true(st == DSV4_OK || st == DSV4_ERR_DOES_NOT_FIT); /* figures filled either way */
    assert_non_null(pl.gpu);
    check_split_sums(&pl);
    /* every layer in exactly one stage, in order */
    int32_t next = 0;
    for (int32_t s = 0; s < pl.n_stages; s++) {
      assert_int_equal(pl.stage[s].first_layer, next);
      next += pl.stage[s].n_layers;
    }
    assert_int_equal(next, 40);
    dsv4i_topo_plan_free(&pl);
  }
  dsv4i_contract_free(&k);
}

/* spec §5.8: 3 x (288+68)/2 + (288+68) = 890 B/token; 534 + 356 over PP2; fixed parts. */
static void kv_closed_form(void **state) {
  (void)state;
  dsv4i_config c;
  dsv4i_topo_params p;
  dsv4i_topo_plan pl;
  release_default_plan(&c, &p, &pl);
  assert_int_equal(pl.window_record, 528);
  assert_int_equal(pl.compressed_record, 288);
  assert_int_equal(pl.index_key_record, 68);
  assert_true(pl.kv_per_token == 3.0 * (288 + 68) / 2 + (288 + 68));
  assert_true(pl.kv_per_token == 890.0);
  assert_true(pl.stage[0].kv_per_token == 534.0);
  assert_true(pl.stage[1].kv_per_token == 356.0);
  assert_int_equal(pl.stage[0].n_kv_sources, 3);
  assert_int_equal(pl.stage[1].n_kv_sources, 1);
  /* window rings 40 x 128 x 528 = 2.70 MB, DSpark 3 x 128 x 528 = 0.20 MB, ratio-2 state 3 x 8 KiB */
  assert_int_equal(pl.stage[0].kv_fixed_window + pl.stage[1].kv_fixed_window, 40 * 128 * 528);
  assert_int_equal(pl.stage[1].kv_fixed_dspark, 3 * 128 * 528);
  assert_int_equal(pl.stage[0].kv_fixed_dspark, 0);
  assert_int_equal(pl.stage[0].kv_fixed_compressor, 3 * 8192);
  assert_int_equal(pl.stage[1].kv_fixed_compressor, 0);
  assert_int_equal(pl.kv_fixed_per_seq, 40 * 128 * 528 + 3 * 128 * 528 + 3 * 8192);
  /* one sequence at 1 Mi positions: pages of 64 records divide 2^19 and 2^20 exactly */
  assert_int_equal(pl.stage[0].seq_bytes_max_context, 1376256 + INT64_C(534) * 1048576);
  assert_int_equal(pl.stage[1].seq_bytes_max_context, 1554432 + INT64_C(356) * 1048576);
  /* page rounding: 1000 positions -> 500 ratio-2 entries -> 8 pages of 64 (512 records) */
  assert_int_equal(dsv4i_plan_seq_bytes(&pl, 0, 1000), 1376256 + 3 * 512 * 356);
  assert_int_equal(dsv4i_plan_seq_bytes(&pl, 1, 1000), 1554432 + 1024 * 356);
  dsv4i_topo_plan_free(&pl);

  /* the 584 B fp8_ds_mla window variant changes the rings only */
  p.kv_format = DSV4I_KV_FP8_DS_MLA;
  p.kv_page_entries = 0;
  plan_ok(&c, &p, &pl);
  assert_int_equal(pl.window_record, 584);
  assert_true(pl.kv_per_token == 890.0);
  assert_int_equal(pl.kv_fixed_per_seq, 43 * 128 * 584 + 3 * 8192);
  assert_int_equal(dsv4i_plan_seq_bytes(&pl, 0, 1001), 20 * 128 * 584 + 3 * 8192 + 3 * 500 * 356);
  dsv4i_topo_plan_free(&pl);

  /* PP1: the whole model on one stage */
  p.kv_format = DSV4I_KV_NATIVE;
  p.nodes = 1;
  p.pp = 1;
  p.gpu_mem_bytes = INT64_C(141) << 30;
  plan_ok(&c, &p, &pl);
  assert_true(pl.stage[0].kv_per_token == 890.0);
  assert_int_equal(pl.stage[0].kv_fixed_per_seq, pl.kv_fixed_per_seq);
  dsv4i_topo_plan_free(&pl);
}

/* The field report's topology: 2 nodes x 8 x 40 GB, TP8 x PP2, Engram on the hosts. */
static void field_report_scenario(void **state) {
  (void)state;
  dsv4i_config c;
  tu_load_release_config(&c);
  dsv4i_topo_params p;
  dsv4i_topo_params_default(&p);
  assert_int_equal(p.nodes, 2);
  assert_int_equal(p.gpus_per_node, 8);
  assert_int_equal(p.tp, 8);
  assert_int_equal(p.pp, 2);
  assert_int_equal(p.gpu_mem_bytes, INT64_C(40) << 30);
  assert_int_equal(p.engram_placement, DSV4I_ENGRAM_HOST);
  dsv4i_topo_plan pl;
  plan_ok(&c, &p, &pl);
  assert_int_equal(pl.n_stages, 2);
  assert_int_equal(pl.n_gpus, 16);
  assert_int_equal(pl.stage[0].first_layer, 0);
  assert_int_equal(pl.stage[0].n_layers, 20);
  assert_int_equal(pl.stage[1].first_layer, 20);
  assert_int_equal(pl.stage[1].n_layers, 20);
  assert_int_equal(pl.stage[0].first_node, 0);
  assert_int_equal(pl.stage[1].first_node, 1);
  assert_int_equal(pl.stage[0].n_nodes, 1);
  /* Engram layers 1 and 14 are both on stage 0: the tables live on node 0 only */
  assert_int_equal(pl.stage[0].n_engram_layers, 2);
  assert_int_equal(pl.stage[1].n_engram_layers, 0);
  assert_int_equal(pl.stage[0].engram_host_per_node, INT64_C(202758032400));
  assert_int_equal(pl.host[0].engram, INT64_C(202758032400));
  assert_int_equal(pl.host[1].engram, 0);
  assert_int_equal(pl.host[1].total, 0);
  for (int32_t g = 0; g < 16; g++) assert_int_equal(pl.gpu[g].weights[DSV4_COMP_ENGRAM_TABLES], 0);
  /* roles: embed on stage 0 and (for DSpark) stage 1; head, DSpark on stage 1; vision on 0 */
  assert_true(pl.stage[0].has_embed && pl.stage[0].has_vision && !pl.stage[0].has_head);
  assert_true(pl.stage[1].has_embed && pl.stage[1].has_head && pl.stage[1].has_dspark);
  /* every expert's intermediate dim over 8 ranks: 20 x 384 x 18,800,640 / 8 per GPU */
  for (int32_t g = 0; g < 16; g++)
    assert_int_equal(pl.gpu[g].weights[DSV4_COMP_ROUTED_EXPERTS], INT64_C(20) * 384 * 18800640 / 8);
  assert_int_equal(pl.gpu[8].weights[DSV4_COMP_DSPARK],
                   (pl.stage[1].held[DSV4_COMP_DSPARK] - pl.gpu[8].replicated[DSV4_COMP_DSPARK]) / 8 +
                       pl.gpu[8].replicated[DSV4_COMP_DSPARK]);
  /* ranks of a stage are identical here (every split divides by 8) */
  for (int32_t s = 0; s < 2; s++)
    for (int32_t r = 1; r < 8; r++) assert_int_equal(pl.gpu[s * 8 + r].used, pl.gpu[s * 8].used);
  /* the report's "~20.5 GB" of weights per GPU: this plan's are 20.2-20.4 GB */
  for (int32_t s = 0; s < 2; s++) {
    double w = (double)pl.gpu[s * 8].weights_total;
    assert_true(w > 20.0e9 && w < 20.5e9);
    assert_true(pl.stage[s].kv_pool > INT64_C(17) << 30);
    assert_int_equal(pl.gpu[s * 8].used + pl.gpu[s * 8].kv_pool, p.gpu_mem_bytes);
  }
  /* capacity from the smallest stage */
  assert_int_equal(pl.token_capacity, (int64_t)floor((double)pl.stage[0].kv_pool / 534.0));
  assert_int_equal(pl.seqs_at_max_context, pl.stage[0].kv_pool / pl.stage[0].seq_bytes_max_context);
  assert_true(pl.seqs_at_max_context >= 30);
  assert_true(pl.concurrency_at_max_context >= (double)pl.seqs_at_max_context);
  assert_true(pl.concurrency_at_max_context < (double)pl.seqs_at_max_context + 1);
  dsv4i_topo_plan_free(&pl);

  /* the report's own KV record (584 B) plans too; fewer sequences fit only marginally */
  p.kv_format = DSV4I_KV_FP8_DS_MLA;
  plan_ok(&c, &p, &pl);
  assert_int_equal(pl.window_record, 584);
  dsv4i_topo_plan_free(&pl);

  /* the builtin config embedded in the library is the test data file */
  char *path = tu_release_config_path();
  size_t len;
  char *text = tu_read_file(path, &len);
  assert_non_null(text);
  assert_int_equal(len, dsv4i_plan_builtin_config_size);
  assert_memory_equal(text, dsv4i_plan_builtin_config, len);
  free(text);
  free(path);
}

static void expect_status(const dsv4i_config *c, const dsv4i_topo_params *p, dsv4_status want,
                          const char *needle) {
  dsv4i_topo_plan pl;
  dsv4i_error_clear();
  dsv4_status st = dsv4i_plan_compute(c, NULL, p, &pl);
  if (st != want) fail_msg("status %d, want %d: %s", (int)st, (int)want, dsv4i_error_message());
  if (needle && !strstr(dsv4i_error_message(), needle))
    fail_msg("message lacks \"%s\": %s", needle, dsv4i_error_message());
  if (want == DSV4_ERR_DOES_NOT_FIT) assert_non_null(pl.gpu); /* figures kept for reporting */
  else if (want != DSV4_OK) assert_null(pl.gpu);
  dsv4i_topo_plan_free(&pl);
}

static void does_not_fit(void **state) {
  (void)state;
  dsv4i_config c;
  tu_load_release_config(&c);
  dsv4i_topo_params p;
  /* one node of 8 x 40 GiB: the routed experts alone are 33.6 GiB per GPU */
  dsv4i_topo_params_default(&p);
  p.nodes = 1;
  p.pp = 1;
  expect_status(&c, &p, DSV4_ERR_DOES_NOT_FIT, "GPU memory overflows");
  expect_status(&c, &p, DSV4_ERR_DOES_NOT_FIT, "routed_experts");
  /* Engram tables on the GPUs of the field split 0-19 / 20-39: + 23.6 GiB on stage 0 */
  dsv4i_topo_params_default(&p);
  p.engram_placement = DSV4I_ENGRAM_DEVICE;
  p.stage_first[1] = 20;
  expect_status(&c, &p, DSV4_ERR_DOES_NOT_FIT, "stage 0 GPU");
  /* ... which the automatic split balances by moving the boundary to layer 14 (one table
   * per stage), where it fits */
  p.stage_first[1] = 0;
  dsv4i_topo_plan pl;
  plan_ok(&c, &p, &pl);
  assert_int_equal(pl.stage[1].first_layer, 14);
  assert_int_equal(pl.stage[0].n_engram_layers, 1);
  assert_int_equal(pl.stage[1].n_engram_layers, 1);
  assert_int_equal(pl.host[0].total + pl.host[1].total, 0);
  dsv4i_topo_plan_free(&pl);
  /* the KV pool cannot hold one sequence of 2^36 positions */
  dsv4i_topo_params_default(&p);
  p.max_context = INT64_C(1) << 36;
  expect_status(&c, &p, DSV4_ERR_DOES_NOT_FIT, "KV pool overflows");
  /* hosts with 100 GB cannot pin 202.76 GB of Engram tables */
  dsv4i_topo_params_default(&p);
  p.host_mem_bytes = 100000000000;
  expect_status(&c, &p, DSV4_ERR_DOES_NOT_FIT, "node 0: host memory overflows");
  /* absurd sizes overflow int64 arithmetic: does not fit, not a wrap */
  dsv4i_topo_params_default(&p);
  p.max_context = INT64_C(1) << 62;
  expect_status(&c, &p, DSV4_ERR_DOES_NOT_FIT, NULL);
  /* 80 GB GPUs on one node hold it with Engram on the host (TP8, PP1) */
  dsv4i_topo_params_default(&p);
  p.nodes = 1;
  p.pp = 1;
  p.gpu_mem_bytes = INT64_C(80) << 30;
  expect_status(&c, &p, DSV4_OK, NULL);
}

static void stage_splits(void **state) {
  (void)state;
  dsv4i_config c;
  tu_load_release_config(&c);
  int32_t b[8];
  assert_int_equal(dsv4i_plan_boundaries(&c, b, 8), 5);
  assert_int_equal(b[0], 1);
  assert_int_equal(b[1], 2);
  assert_int_equal(b[2], 8);
  assert_int_equal(b[3], 14);
  assert_int_equal(b[4], 20);
  dsv4i_topo_params p;
  dsv4i_topo_params_default(&p);
  /* an explicit 0-19 / 20-39 is the automatic one */
  p.stage_first[1] = 20;
  expect_status(&c, &p, DSV4_OK, NULL);
  /* a boundary where shared attention state would cross */
  p.stage_first[1] = 10;
  expect_status(&c, &p, DSV4_ERR_UNSUPPORTED, "allowed first layers: 1, 2, 8, 14, 20");
  expect_status(&c, &p, DSV4_ERR_UNSUPPORTED, "layer 10 reads the compressed KV");
  p.stage_first[1] = 21;
  expect_status(&c, &p, DSV4_ERR_UNSUPPORTED, "cannot start at layer 21");
  p.stage_first[1] = 40;
  expect_status(&c, &p, DSV4_ERR_INVALID_ARG, "stay below 40");
  p.stage_first[1] = 0;
  p.stage_first[0] = 3;
  expect_status(&c, &p, DSV4_ERR_INVALID_ARG, "stage 0 must start at layer 0");
  /* more stages than boundaries */
  dsv4i_topo_params_default(&p);
  p.nodes = 7;
  p.gpus_per_node = 1;
  p.tp = 1;
  p.pp = 7;
  expect_status(&c, &p, DSV4_ERR_UNSUPPORTED, "PP 7 needs 6 stage boundaries");
  /* ranks must match the GPUs; TP must divide the heads / groups / expert blocks */
  dsv4i_topo_params_default(&p);
  p.tp = 4;
  expect_status(&c, &p, DSV4_ERR_INVALID_ARG, "one rank per GPU");
  p.nodes = 1;
  p.gpus_per_node = 3;
  p.tp = 3;
  p.pp = 1;
  expect_status(&c, &p, DSV4_ERR_UNSUPPORTED, "TP 3 must divide");
  /* automatic PP4 picks 8, 14, 20 (the design's list); PP3 8, 20 */
  dsv4i_topo_params_default(&p);
  p.nodes = 4;
  p.pp = 4;
  dsv4i_topo_plan pl;
  plan_ok(&c, &p, &pl);
  assert_int_equal(pl.stage[1].first_layer, 8);
  assert_int_equal(pl.stage[2].first_layer, 14);
  assert_int_equal(pl.stage[3].first_layer, 20);
  assert_int_equal(pl.params.stage_first[3], 20);
  /* PP4: Engram layer 1 on stage 0 (node 0), layer 14 on stage 2 (node 2) */
  assert_true(pl.host[0].engram > 0 && pl.host[2].engram > 0);
  assert_int_equal(pl.host[0].engram + pl.host[2].engram, INT64_C(202758032400));
  assert_int_equal(pl.host[1].engram + pl.host[3].engram, 0);
  /* a middle stage sends and receives: two payload sides */
  assert_int_equal(pl.gpu[8].comm_p2p, 2 * pl.gpu[0].comm_p2p);
  dsv4i_topo_plan_free(&pl);
  p.nodes = 3;
  p.pp = 3;
  plan_ok(&c, &p, &pl);
  assert_int_equal(pl.stage[1].first_layer, 8);
  assert_int_equal(pl.stage[2].first_layer, 20);
  dsv4i_topo_plan_free(&pl);
  /* bad parameters */
  dsv4i_topo_params_default(&p);
  p.buckets[2] = 1;
  expect_status(&c, &p, DSV4_ERR_INVALID_ARG, "ascending");
  dsv4i_topo_params_default(&p);
  p.kv_format = 7;
  expect_status(&c, &p, DSV4_ERR_INVALID_ARG, "KV format");
  dsv4i_topo_params_default(&p);
  p.context = p.max_context + 1;
  expect_status(&c, &p, DSV4_ERR_INVALID_ARG, "above max context");
}

/* Leaving DSpark and vision out moves their bytes out of the GPUs' share. */
static void flags(void **state) {
  (void)state;
  dsv4i_config c;
  tu_load_release_config(&c);
  dsv4i_topo_params p;
  dsv4i_topo_params_default(&p);
  dsv4i_topo_plan a, b;
  plan_ok(&c, &p, &a);
  p.flags = DSV4I_PLAN_F_NO_DSPARK | DSV4I_PLAN_F_NO_VISION;
  plan_ok(&c, &p, &b);
  assert_int_equal(b.gpu[8].weights[DSV4_COMP_DSPARK], 0);
  assert_int_equal(b.gpu[0].weights[DSV4_COMP_VISION], 0);
  assert_false(b.stage[1].has_embed);
  assert_int_equal(b.stage[1].kv_fixed_dspark, 0);
  assert_true(b.kv_per_token == 890.0);
  assert_int_equal(b.kv_fixed_per_seq, 40 * 128 * 528 + 3 * 8192);
  assert_true(b.stage[1].kv_pool > a.stage[1].kv_pool);
  assert_true(b.stage[0].kv_pool > a.stage[0].kv_pool);
  dsv4i_topo_plan_free(&a);
  dsv4i_topo_plan_free(&b);
}

/* The tiny fixture config plans (TP2 x PP2 on 4 small GPUs). */
/* Engine plan (plan.c): prefill_chunk is capped at max_context before the workspace is sized
 * (INT32_MAX used to plan terabytes), and a workspace over the machine names prefill_chunk. */
static void engine_plan_chunk(void **state) {
  (void)state;
  dsv4i_config c;
  tu_load_release_config(&c);
  dsv4i_plan_req rq = {.backend = DSV4_BACKEND_CPU, .max_seqs = 2, .max_ctx = 4096,
                       .chunk = INT32_MAX};
  dsv4i_plan pl;
  assert_int_equal(dsv4i_plan_make(&c, &rq, &pl), DSV4_OK);
  assert_int_equal(pl.chunk, 4096);
  assert_int_equal(pl.max_batch_tokens, 4096);
  dsv4i_plan ref;
  rq.chunk = 4096;
  assert_int_equal(dsv4i_plan_make(&c, &rq, &ref), DSV4_OK);
  assert_true(pl.act_bytes == ref.act_bytes && pl.total_bytes == ref.total_bytes);
  rq.host_limit = ref.total_bytes - 1;
  assert_int_equal(dsv4i_plan_make(&c, &rq, &pl), DSV4_ERR_DOES_NOT_FIT);
  printf("workspace does-not-fit: %s\n", dsv4i_error_message());
  assert_non_null(strstr(dsv4i_error_message(), "lower prefill_chunk"));
  assert_non_null(strstr(dsv4i_error_message(), "4096 tokens per step"));
}

/* The engine's layout with either window format at the release's dims (docs/attention.md
 * "KV formats"): 64 KiB pages for both, 124 native or 112 fp8_ds_mla window records a page,
 * the 134-slot rings two pages each either way; the fixtures' 16 KiB pages hold 81 records of
 * 200 B. An unknown format is refused. */
static void engine_layout_kv_format(void **state) {
  (void)state;
  dsv4i_config c;
  tu_load_release_config(&c);
  const size_t page = dsv4i_kv_page_bytes(&c);
  assert_int_equal(page, 65536);
  dsv4i_kv_layout nat, mla;
  assert_int_equal(dsv4i_kv_layout_init_part(&c, NULL, DSV4I_KV_NATIVE, 0, page, 4096, &nat),
                   DSV4_OK);
  assert_int_equal(dsv4i_kv_layout_init_part(&c, NULL, DSV4I_KV_FP8_DS_MLA, 0, page, 4096, &mla),
                   DSV4_OK);
  assert_int_equal(nat.rec_bytes[DSV4I_KV_WINDOW], 528);
  assert_int_equal(mla.rec_bytes[DSV4I_KV_WINDOW], 584);
  assert_int_equal(mla.window_format, DSV4I_KV_FP8_DS_MLA);
  assert_int_equal(mla.rope_dim, 64);
  assert_int_equal(nat.rec_per_page[DSV4I_KV_WINDOW], 124);
  assert_int_equal(mla.rec_per_page[DSV4I_KV_WINDOW], 112);
  assert_int_equal(mla.ring_slots, 134);
  for (int32_t l = 0; l < c.n_total_layers; l++) {
    assert_int_equal(nat.cap[DSV4I_KV_WINDOW][l], 2);
    assert_int_equal(mla.cap[DSV4I_KV_WINDOW][l], 2);
  }
  assert_int_equal(dsv4i_kv_pages_for(&mla, DSV4I_KV_WINDOW, 1),
                   dsv4i_kv_pages_for(&nat, DSV4I_KV_WINDOW, 1));
  dsv4i_kv_layout bad;
  assert_int_equal(dsv4i_kv_layout_init_part(&c, NULL, 2, 0, page, 4096, &bad),
                   DSV4_ERR_INVALID_ARG);
  dsv4i_config f;
  tu_load_fixture_config("tiny-v41-a", &f);
  assert_int_equal(dsv4i_kv_layout_init_part(&f, NULL, DSV4I_KV_FP8_DS_MLA, 0,
                                             dsv4i_kv_page_bytes(&f), 256, &mla), DSV4_OK);
  assert_int_equal(mla.page_bytes, 16384);
  assert_int_equal(mla.rec_bytes[DSV4I_KV_WINDOW], 200);
  assert_int_equal(mla.rec_per_page[DSV4I_KV_WINDOW], 81);
}

static void tiny_fixture(void **state) {
  (void)state;
  dsv4i_config c;
  tu_load_fixture_config("tiny-v41-a", &c);
  dsv4i_topo_params p;
  dsv4i_topo_params_default(&p);
  p.nodes = 1;
  p.gpus_per_node = 4;
  p.tp = 2;
  p.pp = 2;
  p.gpu_mem_bytes = INT64_C(4) << 30;
  p.gpu_reserved_bytes = 0;
  p.nccl_bytes = 0;
  p.max_context = 4096;
  p.prefill_chunk = 256;
  dsv4i_topo_plan pl;
  plan_ok(&c, &p, &pl);
  check_split_sums(&pl);
  /* sources 2, 4 (ratio 2) and 6 (ratio 1); hd 128: 72 B compressed, 68 B index keys */
  assert_int_equal(pl.compressed_record, 128 / 2 + 128 / 16);
  assert_int_equal(pl.index_key_record, 128 / 2 + 128 / 32);
  assert_int_equal(pl.window_record, 128 + 4);
  assert_true(pl.kv_per_token == 2 * 140 / 2.0 + 140);
  assert_int_equal(pl.kv_fixed_per_seq, 13 * 16 * 132 + 2 * 2 * 2 * 128 * 4);
  int32_t b[8];
  assert_int_equal(dsv4i_plan_boundaries(&c, b, 8), 4);
  int32_t first1 = pl.stage[1].first_layer;
  assert_true(first1 == 1 || first1 == 2 || first1 == 4 || first1 == 6);
  /* Engram layers 1 and 4: host memory on the one node */
  assert_int_equal(pl.host[0].engram, (INT64_C(1524) + 2304) * (32 + 1));
  assert_true(pl.token_capacity > 1000000);
  dsv4i_topo_plan_free(&pl);
  /* one CPU-sized rank */
  p.nodes = p.gpus_per_node = p.tp = p.pp = 1;
  plan_ok(&c, &p, &pl);
  check_split_sums(&pl);
  dsv4i_topo_plan_free(&pl);
}

int tu_run_suite(void) {
  const struct CMUnitTest tests[] = {
    cmocka_unit_test(release_components), cmocka_unit_test(split_sums_topologies),
    cmocka_unit_test(kv_closed_form),     cmocka_unit_test(field_report_scenario),
    cmocka_unit_test(does_not_fit),       cmocka_unit_test(stage_splits),
    cmocka_unit_test(flags),              cmocka_unit_test(tiny_fixture),
    cmocka_unit_test(engine_plan_chunk),
    cmocka_unit_test(engine_layout_kv_format),
  };
  return cmocka_run_group_tests_name("plan", tests, NULL, NULL);
}
