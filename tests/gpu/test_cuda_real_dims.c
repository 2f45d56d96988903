/*
 * A release-dimension checkpoint on the GPU (exit 77 unless
 * DSV4_REAL_DIMS_MODEL names one, e.g. from
 * `dsv4-gen-checkpoint --real-dims --layers 2 --engram-rows 65536`, and a
 * GPU is usable): the CUDA engine in CPU-order mode
 * (DSV4_ENGINE_F_GPU_CPU_ORDER) gives the CPU engine's greedy tokens for 16
 * steps after a prefill; the default (tiled) mode runs the same steps and its
 * tokens and logits difference (overall and per step) are printed beside
 * (docs/gpu-dense.md "Numerics modes"). For both CUDA engines the device
 * memory taken
 * (the driver's free memory before and after creation) is within 2% of its
 * plan: the KV pool, workspace and prepared weights of the engine's memory
 * plan plus the checkpoint bytes of the tensors the backend holds on the
 * device (every tensor but the Engram tables, which stay in host memory, the
 * confidence projection, read on the host, and wo_a, whose bf16 copy the plan
 * counts).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "test_util.h"
#include "real_dims_diag.h"

#include "dsv4/dsv4.h"
#include "engine/engine.h"
#include "gpu/gpu_backend.h"
#include "model/model.h"

enum { STEPS = 16 };

static void greedy(dsv4_engine *e, const int32_t *in, int64_t n, int32_t *tok, float *lg, int32_t V) {
  int64_t seq;
  assert_int_equal(dsv4_engine_seq_create(e, &seq), DSV4_OK);
  dsv4_status s = dsv4_engine_prefill(e, seq, in, n, NULL, lg, &tok[0]);
  if (s) fail_msg("prefill: %s", dsv4_last_error());
  for (int k = 0; k < STEPS; k++) {
    s = dsv4_engine_decode(e, 1, &seq, &tok[k], NULL, lg + (size_t)(k + 1) * V, &tok[k + 1]);
    if (s) fail_msg("decode %d: %s", k, dsv4_last_error());
  }
  assert_int_equal(dsv4_engine_seq_free(e, seq), DSV4_OK);
}

/* Checkpoint bytes of the tensors the CUDA backend keeps on the device. */
static int64_t device_weight_bytes(const dsv4_model *m) {
  const dsv4i_weights *wt = dsv4i_model_weights(m);
  int64_t n = 0;
  for (size_t i = 0; i < wt->n; i++) {
    const dsv4i_weight *w = &wt->w[i];
    if (w->role == DSV4I_W_ENGRAM_EMBED || w->role == DSV4I_W_ATTN_WO_A || w->role == DSV4I_W_VISION ||
        w->role == DSV4I_W_DSPARK_CONF_PROJ || w->role == DSV4I_W_GATE_BIAS_VL)
      continue;
    n += (int64_t)w->nbytes + (int64_t)w->scale_nbytes;
  }
  return n;
}

static void real_dims_gpu_equals_cpu(void **st) {
  (void)st;
  const char *dir = getenv("DSV4_REAL_DIMS_MODEL");
  dsv4_model *m = NULL;
  assert_int_equal(dsv4_model_load(dir, NULL, &m), DSV4_OK);
  dsv4_model_info mi;
  assert_int_equal(dsv4_model_get_info(m, &mi, sizeof mi), DSV4_OK);
  const int32_t V = mi.vocab_size;
  int32_t in[12];
  for (int i = 0; i < 12; i++) in[i] = (int32_t)((i * 97 + 13) % 700) + 3; /* tokenizer ids */
  dsv4_engine_params ep;
  assert_int_equal(dsv4_engine_params_init(&ep, sizeof ep), DSV4_OK);
  ep.max_sequences = 2;
  ep.max_context = 1024;
  ep.prefill_chunk = 16;
  /* [0] the CPU engine, [1] CUDA in CPU order, [2] CUDA in the default mode */
  int32_t tok[3][STEPS + 1];
  float *lg[3];
  for (int b = 0; b < 3; b++) {
    lg[b] = malloc(sizeof(float) * (size_t)V * (STEPS + 1));
    assert_non_null(lg[b]);
    ep.backend = b ? DSV4_BACKEND_CUDA : DSV4_BACKEND_CPU;
    ep.flags = b == 1 ? DSV4_ENGINE_F_GPU_CPU_ORDER : 0;
    size_t f0 = 0, f1 = 0, total = 0;
    dsv4_engine *e = NULL;
    if (b) { /* device memory before and after creation, through the driver */
      dsv4i_gpu probe;
      assert_int_equal(dsv4i_gpu_open(0, &probe), DSV4_OK);
      assert_int_equal(probe.dev.cu->MemGetInfo(&f0, &total), DSV4I_CUDA_SUCCESS);
      if (dsv4_engine_create(m, &ep, &e)) fail_msg("cuda engine: %s", dsv4_last_error());
      assert_int_equal(dsv4i_gpu_enter(&probe), DSV4_OK);
      assert_int_equal(probe.dev.cu->MemGetInfo(&f1, &total), DSV4I_CUDA_SUCCESS);
      const dsv4i_plan *p = &e->plan;
      const int64_t wdev = device_weight_bytes(m);
      const int64_t plan = p->pool_bytes + p->act_bytes + p->extra_weight_bytes + wdev;
      const int64_t used = (int64_t)(f0 - f1);
      const gpu_backend *gb = (const gpu_backend *)e->be;
      printf("real dims (%s): device memory taken by the engine %lld B (pool %zu B); plan %lld B "
             "= KV pool %lld + workspace %lld + prepared weights %lld + device-resident checkpoint "
             "tensors %lld; ratio %.4f\n", b == 1 ? "cpu order" : "default", (long long)used,
             gb->g.pool.size, (long long)plan,
             (long long)p->pool_bytes, (long long)p->act_bytes, (long long)p->extra_weight_bytes,
             (long long)wdev, (double)used / (double)plan);
      assert_true((double)used <= 1.02 * (double)plan && (double)used >= 0.98 * (double)plan);
      dsv4i_gpu_close(&probe);
    } else if (dsv4_engine_create(m, &ep, &e)) {
      fail_msg("cpu engine: %s", dsv4_last_error());
    }
    greedy(e, in, 12, tok[b], lg[b], V);
    dsv4_engine_free(e);
  }
  static const char *const name[3] = {"cpu", "gpu (cpu order)", "gpu (default)"};
  float dmax[3] = {0}, dstep[3][STEPS + 1] = {{0}};
  for (int b = 1; b < 3; b++)
    for (int k = 0; k <= STEPS; k++)
      for (size_t i = (size_t)k * V; i < (size_t)(k + 1) * V; i++) {
        const float d = lg[0][i] > lg[b][i] ? lg[0][i] - lg[b][i] : lg[b][i] - lg[0][i];
        if (!(d <= dstep[b][k])) dstep[b][k] = d; /* NaN propagates */
        if (!(d <= dmax[b])) dmax[b] = d;
      }
  for (int b = 0; b < 3; b++) {
    printf("real dims: %s tokens", name[b]);
    for (int k = 0; k <= STEPS; k++) printf(" %d", (int)tok[b][k]);
    printf("\n");
  }
  for (int b = 1; b < 3; b++) {
    int same = 0;
    while (same <= STEPS && tok[b][same] == tok[0][same]) same++;
    printf("real dims: %s logits max |gpu - cpu| %.6g over prefill + %d steps; tokens %s "
           "(%d of %d equal before the first difference)\nreal dims: %s per step (prefill "
           "first):", name[b], (double)dmax[b], STEPS, same > STEPS ? "equal" : "differ", same,
           STEPS + 1, name[b]);
    for (int k = 0; k <= STEPS; k++) printf(" %.4g", (double)dstep[b][k]);
    printf("\n");
  }
  /* where the bit-exact mode parts from the CPU, logits row by row (the prefill op by op is
   * the next test, real_dims_prefill_op_by_op) */
  rd_diag_steps("gpu (cpu order)", lg[0], lg[1], V, STEPS + 1);
  /* the bit-exact mode's claim; the default mode's numbers are reported above */
  assert_memory_equal(tok[0], tok[1], sizeof tok[0]);
  for (int b = 0; b < 3; b++) free(lg[b]);
  dsv4_model_free(m);
}

/* The prefill of the test's prompt on the CPU engine and the CUDA engine in CPU-order mode, op
 * by op, free-running and teacher-forced (real_dims_diag.c): printed, its own test so that a
 * failed assertion above does not skip it. */
static void real_dims_prefill_op_by_op(void **st) {
  (void)st;
  dsv4_model *m = NULL;
  assert_int_equal(dsv4_model_load(getenv("DSV4_REAL_DIMS_MODEL"), NULL, &m), DSV4_OK);
  int32_t in[12];
  for (int i = 0; i < 12; i++) in[i] = (int32_t)((i * 97 + 13) % 700) + 3;
  dsv4_engine_params ep;
  assert_int_equal(dsv4_engine_params_init(&ep, sizeof ep), DSV4_OK);
  ep.max_sequences = 2;
  ep.max_context = 1024;
  ep.flags = DSV4_ENGINE_F_GPU_CPU_ORDER;
  rd_diag_prefill(m, &ep, in, 12);
  dsv4_model_free(m);
}

int tu_run_suite(void) {
  /* the device first: under compute-sanitizer a program that exits before its first
   * CUDA call is an error (exit 255), so the skip without a checkpoint comes after
   * the probe has initialised CUDA and is an honest 77 there too */
  if (dsv4_backend_probe(DSV4_BACKEND_CUDA, 0) != DSV4_OK) {
    printf("skip: no usable CUDA device: %s\n", dsv4_last_error());
    return 77;
  }
  const char *dir = getenv("DSV4_REAL_DIMS_MODEL");
  if (!dir || !*dir) {
    printf("skip: DSV4_REAL_DIMS_MODEL does not name a real-dims checkpoint\n");
    return 77;
  }
  const struct CMUnitTest tests[] = {cmocka_unit_test(real_dims_gpu_equals_cpu),
                                     cmocka_unit_test(real_dims_prefill_op_by_op)};
  return cmocka_run_group_tests_name("cuda_real_dims", tests, NULL, NULL);
}
