/*
 * The CUDA backend's TP all-reduces through the real NCCL path, as far as one
 * GPU allows (exit 77 without a usable GPU; a test skips without libnccl.so.2
 * on the loader path unless DSV4_TEST_NEED_NCCL=1 makes that a failure):
 *   - nccl_tp1_equals_no_tp: an engine whose backend is bound to a one-rank NCCL
 *     communicator (dsv4i_nccl_comm_create without MPI; the block's all-reduce
 *     after the attention output and after the MoE, ncclAllReduce in place on
 *     the engine stream) against the same engine without TP, both op by op
 *     (eager) and replaying the captured graphs (the all-reduces captured in
 *     them): greedy tokens equal, logits bit-identical (a sum over one rank is
 *     the identity: tolerance 0). The all-reduces issued are counted (eager: 2
 *     per backbone layer per step; graph: at capture only) and the pinned
 *     algorithm / protocol printed.
 * Two ranks on one device are refused before NCCL (tests/mpi, mpi_engine_cuda_tp2_pp1).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "test_util.h"

#include "dsv4/dsv4.h"
#include "dist/nccl.h"
#include "engine/engine.h"
#include "gpu/gpu_backend.h"

typedef struct binding {
  dsv4i_nccl_comm *comm;
  int64_t calls;
  int32_t joins;
} binding;

static dsv4_status join(void *ctx, const uint8_t id[16], int32_t ordinal) {
  binding *b = ctx;
  (void)id, (void)ordinal;
  b->joins++;
  return dsv4i_nccl_comm_create(NULL, &b->comm);
}

static dsv4_status allreduce(void *ctx, uint64_t buf, size_t n, int32_t dtype, void *stream) {
  binding *b = ctx;
  b->calls++;
  return dsv4i_nccl_allreduce(b->comm, (void *)(uintptr_t)buf, n,
                              dtype == DSV4I_TP_BF16 ? DSV4I_NCCL_BFLOAT16 : DSV4I_NCCL_FLOAT32,
                              stream);
}

static dsv4_engine *open_engine(uint32_t flags) {
  const char *dir = tu_fixture_or_skip("tiny-v41-e2e-a");
  dsv4_engine_params ep;
  assert_int_equal(dsv4_engine_params_init(&ep, sizeof ep), DSV4_OK);
  ep.max_sequences = 2;
  ep.max_context = 128;
  ep.prefill_chunk = 8;
  ep.backend = DSV4_BACKEND_CUDA;
  ep.flags = flags;
  dsv4_engine *e = NULL;
  const dsv4_status s = dsv4_engine_create_from_dir(dir, &ep, &e);
  if (s == DSV4_ERR_NO_DEVICE || s == DSV4_ERR_UNSUPPORTED) {
    printf("skip: no usable CUDA backend: %s\n", dsv4_last_error());
    exit(77);
  }
  if (s) fail_msg("engine: %s: %s", dsv4_status_string(s), dsv4_last_error());
  return e;
}

enum { N_PROMPT = 2, N_GEN = 10 };

/* Two prompts prefilled (chunks of 8), then batched greedy decode: tokens and logits. */
static void greedy(dsv4_engine *e, int32_t V, int32_t tok[N_PROMPT][N_GEN], float *lg) {
  int64_t id[N_PROMPT];
  int32_t in[40];
  for (int p = 0; p < N_PROMPT; p++) {
    const int32_t n = p ? 29 : 11;
    uint32_t x = 777u + 31u * (uint32_t)p;
    in[0] = 0;
    for (int32_t i = 1; i < n; i++) {
      x = x * 1664525u + 1013904223u;
      in[i] = 3 + (int32_t)((x >> 8) % 600u);
    }
    assert_int_equal(dsv4_engine_seq_create(e, &id[p]), DSV4_OK);
    dsv4_status s = dsv4_engine_prefill(e, id[p], in, n, NULL, lg + (size_t)p * V, &tok[p][0]);
    if (s) fail_msg("prefill: %s", dsv4_last_error());
  }
  for (int t = 1; t < N_GEN; t++) {
    int32_t cur[N_PROMPT], nx[N_PROMPT];
    for (int p = 0; p < N_PROMPT; p++) cur[p] = tok[p][t - 1];
    dsv4_status s = dsv4_engine_decode(e, N_PROMPT, id, cur, NULL,
                                       lg + (size_t)t * N_PROMPT * (size_t)V, nx);
    if (s) fail_msg("decode %d: %s", t, dsv4_last_error());
    for (int p = 0; p < N_PROMPT; p++) tok[p][t] = nx[p];
  }
  for (int p = 0; p < N_PROMPT; p++) assert_int_equal(dsv4_engine_seq_free(e, id[p]), DSV4_OK);
}

static void nccl_tp1_equals_no_tp(void **state) {
  (void)state;
  const dsv4i_nccl *lib = NULL;
  if (dsv4i_nccl_open(&lib)) {
    const char *need = getenv("DSV4_TEST_NEED_NCCL");
    if (need && !strcmp(need, "1")) fail_msg("NCCL: %s", dsv4i_error_message());
    printf("skip: %s\n", dsv4i_error_message());
    skip();
  }
  printf("NCCL %d loaded\n", lib->version);
  for (int mode = 0; mode < 2; mode++) { /* 0: eager, 1: graphs */
    const uint32_t flags = mode ? 0 : DSV4_ENGINE_F_OP_TIMINGS;
    dsv4_engine *ref = open_engine(flags), *tp = open_engine(flags);
    binding bd = {NULL, 0, 0};
    dsv4i_tp_ops ops;
    memset(&ops, 0, sizeof ops);
    ops.rank = 0;
    ops.size = 1;
    ops.device_join = join;
    ops.device_allreduce = allreduce;
    ops.ctx = &bd;
    dsv4_status s = dsv4i_gpu_backend_set_tp(tp->be, &ops);
    if (s) fail_msg("binding NCCL: %s: %s", dsv4_status_string(s), dsv4i_error_message());
    const char *algo, *proto;
    dsv4i_nccl_comm_pinned(bd.comm, &algo, &proto);
    const int32_t V = tp->vocab;
    const size_t n = (size_t)N_GEN * N_PROMPT * (size_t)V;
    float *a = malloc(n * sizeof *a), *b = malloc(n * sizeof *b);
    assert_non_null(a);
    assert_non_null(b);
    int32_t ta[N_PROMPT][N_GEN], tb[N_PROMPT][N_GEN];
    greedy(ref, V, ta, a);
    greedy(tp, V, tb, b);
    assert_memory_equal(ta, tb, sizeof ta);
    size_t diff = 0;
    for (size_t i = 0; i < n; i++) diff += memcmp(&a[i], &b[i], sizeof *a) != 0;
    const int32_t caps = dsv4i_gpu_backend_captures(tp->be);
    printf("%s: one-rank NCCL communicator (NCCL_ALGO=%s, NCCL_PROTO=%s): %lld all-reduces "
           "issued%s, %d graphs captured; %d tokens equal, %zu of %zu logits differ in bits\n",
           mode ? "graph replay" : "eager", algo, proto, (long long)bd.calls,
           mode ? " (at capture; replays repeat them)" : "", (int)caps, N_PROMPT * N_GEN, diff,
           n);
    assert_int_equal(diff, 0);
    assert_int_equal(bd.joins, 1);
    assert_true(bd.calls > 0);
    assert_int_equal(bd.calls % (2 * tp->cfg->n_layers), 0); /* two per backbone layer */
    if (mode) assert_true(caps > 0);
    else assert_int_equal(caps, 0);
    assert_int_equal(dsv4i_nccl_check(bd.comm), DSV4_OK);
    dsv4_engine_free(tp);
    dsv4_engine_free(ref);
    dsv4i_nccl_comm_free(bd.comm);
    free(a);
    free(b);
  }
}

int tu_run_suite(void) {
  const struct CMUnitTest tests[] = {
    cmocka_unit_test(nccl_tp1_equals_no_tp),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
