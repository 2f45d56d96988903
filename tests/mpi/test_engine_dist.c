/*
 * The distributed engine under mpirun (suite mpi): every rank builds the
 * one-process engine as the reference and one rank of a TP x PP engine
 * (DSV4_TEST_TP, DSV4_TEST_PP; their product = the ranks), on both shared
 * fixtures:
 *
 * greedy_*        two prompts (prefill in chunks of 8, logits and a token),
 *                 then batched greedy decode steps with logits: every rank's
 *                 tokens equal the reference's and the logits are
 *                 bit-identical, PP and TP alike: the stages run the same
 *                 arithmetic in the same order, and the TP all-reduces continue
 *                 each other's fp32 sums in rank order (docs/distributed.md),
 *                 so the tolerance is 0. (It has to be: on tiny-v41-a a 0.1 %
 *                 change of one MoE output moves the logits by 1.2 and flips
 *                 greedy tokens, so an all-reduce that rounds differently from
 *                 one process could not give its tokens.)
 * spec_*          DSpark speculative decoding (draft + verify, draft lengths
 *                 cycling 1..B) gives the greedy tokens.
 * mismatch_call   one rank feeds another token: DSV4_ERR_RANK_MISMATCH on every
 *                 rank, nothing changed; the next call works.
 * mismatch_create one rank asks for another max_sequences: DSV4_ERR_RANK_MISMATCH
 *                 on every rank.
 * greedy_ds_mla   greedy_* on tiny-v41-a with fp8_ds_mla window records (CPU).
 * mismatch_kv_format  one rank asks for another kv_format: DSV4_ERR_RANK_MISMATCH.
 * refused_split   a stage boundary where shared attention state crosses:
 *                 DSV4_ERR_UNSUPPORTED on every rank, naming the state.
 * failed_create   one rank fails creating (its progress callback aborts): it
 *                 returns DSV4_ABORTED, every other rank DSV4_ERR_RANK_FAILED
 *                 naming it.
 * stalled_rank    the last rank stalls past the timeout: every other rank gets
 *                 DSV4_ERR_RANK_FAILED within it, then the stalled one too.
 * tp_rank_fails  (TP > 1) one TP rank of the last stage fails on its own in a
 *                 decode step, inside a layer (after its attention all-reduce,
 *                 before its MoE's) or at a layer's start: it returns its own
 *                 status, every other rank DSV4_ERR_RANK_FAILED naming it, all
 *                 within 5 s of a 60 s timeout (its partners are told at once
 *                 instead of waiting for the timeout); the next call fails at
 *                 once on every rank (the stage's TP communicator is done).
 * overlap         (PP > 1) decode calls of 4 sequences as 1..4 micro-batches (the
 *                 pipeline overlap): sampled tokens and logits bit-identical to one
 *                 process; one pipeline step per micro-batch.
 * overlap_fails   (PP > 1, CPU, TP 1) a last-stage rank fails in the second micro-batch:
 *                 its own status there, DSV4_ERR_RANK_FAILED naming it elsewhere, nothing
 *                 kept; the same call then works and equals one process.
 * scheduler       every rank drives a scheduler over its rank of the engine with the same
 *                 calls: a greedy, a sampled (top-p, penalty) and a speculative request
 *                 give the one-process scheduler's tokens, finish reasons and counters.
 * scheduler_mismatch  one rank's scheduler was given another prompt: its step fails with
 *                 DSV4_ERR_RANK_MISMATCH on every rank, the request ends with an error.
 * memory_per_rank (CUDA: the device pool each rank's backend took against its plan: KV
 *                 pool, workspace, prepared weights and its stage's checkpoint tensors,
 *                 within 2 % + 256 KiB; the host heap is not measured)
 *                 each rank holds the caches of its stage's layers only: its
 *                 pages per sequence summed over the stages equal one process's,
 *                 TP ranks of a stage hold the same; and what its create
 *                 allocated (the heap's growth, measured here) equals the
 *                 plan's per-rank create_bytes within 1 % + 256 KiB (the plan
 *                 leaves out small host tables: the sequence table, batch
 *                 arrays, the tokenizer's Engram maps, allocator headers;
 *                 80-170 KB on the fixtures). A rank holding every layer's
 *                 caches would be off by about half the KV pool (MBs here).
 *                 dsv4_engine_plan_query with the communicator gives the same
 *                 per-rank figures before the engine is created.
 *
 * DSV4_TEST_BACKEND=cuda runs both engines on the CUDA backend, device 0 on every
 * rank (exit 77 when it is not usable): PP ranks then share the GPU, each with its
 * own context and pools, the stage payload crossing through the host (buf_read,
 * MPI, buf_write), and the tolerance stays 0 (the stages replay the graphs of the
 * same kernels in the same order as one process). With TP > 1 only
 * cuda_tp_one_device runs:
 * cuda_tp_one_device  the TP ranks all map to device 0: DSV4_ERR_UNSUPPORTED on
 *                 every rank naming the two ranks (NCCL runs one rank per device).
 */
#include <malloc.h>
#include <math.h>
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "cpu/cpu_test_hooks.h"
#include "dsv4/dsv4.h"
#include "engine/dist.h"
#include "engine/engine.h"
#include "test_util.h"

#define N_PROMPT 2
#define N_GEN 12

static int g_rank, g_size, g_tp = 1, g_pp = 2, g_backend = DSV4_BACKEND_CPU;
static int32_t g_kv_format = DSV4_KV_FORMAT_NATIVE; /* the engines' window records */
static MPI_Comm g_world;

static double now_s(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

/* CUDA runs: each rank's stage and the memory its backend took (its layers' weights only);
 * g_pool: the device pool of the last CUDA backend created ("pool N B" in its log line). */
static long long g_pool = -1;
static void stage_log(int32_t level, const char *msg, void *user) {
  (void)level, (void)user;
  if (strstr(msg, "cuda backend: device") || strstr(msg, "distributed engine: rank"))
    printf("  rank %d log: %s\n", g_rank, msg);
  const char *q = strstr(msg, "cuda backend: device") ? strstr(msg, ", pool ") : NULL;
  if (q) g_pool = atoll(q + 7);
}

/* Checkpoint bytes of the tensors a CUDA stage [first, last) keeps on the device (the
 * placement rules of dsv4i_weights_part_bytes; not the Engram tables, which stay in host
 * memory, the confidence projection, read on the host, wo_a, whose bf16 copy the plan's
 * prepared weights count, nor the vision tower). */
static int64_t device_weight_bytes(const dsv4_model *m, int32_t first, int32_t last) {
  const dsv4i_weights *wt = dsv4i_model_weights(m);
  const dsv4i_config *c = dsv4i_model_config(m);
  const int is_first = first == 0, is_last = last >= c->n_layers, dspark = c->n_mtp_layers > 0;
  int64_t n = 0;
  for (size_t i = 0; i < wt->n; i++) {
    const dsv4i_weight *w = &wt->w[i];
    if (w->role == DSV4I_W_ENGRAM_EMBED || w->role == DSV4I_W_ATTN_WO_A ||
        w->role == DSV4I_W_VISION || w->role == DSV4I_W_DSPARK_CONF_PROJ ||
        w->role == DSV4I_W_GATE_BIAS_VL)
      continue;
    const int held = w->placement == DSV4I_PLACE_INPUT    ? is_first || (is_last && dspark)
                     : w->placement == DSV4I_PLACE_LAYER  ? w->layer >= first && w->layer < last
                     : w->placement == DSV4I_PLACE_DSPARK ? is_last && dspark
                     : w->placement == DSV4I_PLACE_OUTPUT ? is_last
                                                          : 0;
    if (held) n += (int64_t)w->nbytes + (int64_t)w->scale_nbytes;
  }
  return n;
}

static void params(dsv4_engine_params *p, int dist) {
  assert_int_equal(dsv4_engine_params_init(p, sizeof *p), DSV4_OK);
  p->max_sequences = 4;
  p->max_context = 128;
  p->prefill_chunk = 8;
  p->n_threads = 1;
  p->backend = g_backend;
  p->kv_format = g_kv_format;
  if (dist) {
    p->mpi_comm = &g_world;
    p->tp_size = g_tp;
    p->pp_size = g_pp;
    p->dist_timeout_ms = 60000;
    if (g_backend == DSV4_BACKEND_CUDA) {
      p->log_fn = stage_log;
      p->log_level = DSV4_LOG_INFO;
    }
  }
}

static dsv4_engine *open_engine(const char *fx, int dist) {
  dsv4_engine_params p;
  params(&p, dist);
  dsv4_engine *e = NULL;
  dsv4_status s = dsv4_engine_create_from_dir(tu_fixture_or_skip(fx), &p, &e);
  if (s) fail_msg("rank %d: %s engine on %s: %s: %s", g_rank, dist ? "distributed" : "reference",
                  fx, dsv4_status_string(s), dsv4_last_error());
  return e;
}

/* Deterministic prompts: BOS then pseudo-random ids of the fixture's text range. */
static int32_t prompt_len(int p) { return p ? 37 : 11; }
static void prompt(int p, int32_t *tok) {
  uint32_t x = 12345u + 977u * (uint32_t)p;
  tok[0] = 0;
  for (int32_t i = 1; i < prompt_len(p); i++) {
    x = x * 1664525u + 1013904223u;
    tok[i] = 3 + (int32_t)((x >> 8) % 600u);
  }
}

typedef struct run {
  int32_t tok[N_PROMPT][N_GEN];
  float *logits; /* [N_GEN][N_PROMPT][V] */
  int64_t ids[N_PROMPT];
} run;

/* Prefill both prompts, then N_GEN - 1 batched greedy decode steps, keeping logits. */
static void greedy(dsv4_engine *e, int32_t V, run *r) {
  int32_t tok[64];
  r->logits = malloc(sizeof(float) * (size_t)N_GEN * N_PROMPT * (size_t)V);
  assert_non_null(r->logits);
  for (int p = 0; p < N_PROMPT; p++) {
    prompt(p, tok);
    assert_int_equal(dsv4_engine_seq_create(e, &r->ids[p]), DSV4_OK);
    dsv4_status s = dsv4_engine_prefill(e, r->ids[p], tok, prompt_len(p), NULL,
                                        r->logits + (size_t)p * (size_t)V, &r->tok[p][0]);
    if (s) fail_msg("rank %d: prefill: %s", g_rank, dsv4_last_error());
  }
  for (int t = 1; t < N_GEN; t++) {
    int32_t in[N_PROMPT], nx[N_PROMPT];
    for (int p = 0; p < N_PROMPT; p++) in[p] = r->tok[p][t - 1];
    dsv4_status s = dsv4_engine_decode(e, N_PROMPT, r->ids, in, NULL,
                                       r->logits + (size_t)t * N_PROMPT * (size_t)V, nx);
    if (s) fail_msg("rank %d: decode: %s", g_rank, dsv4_last_error());
    for (int p = 0; p < N_PROMPT; p++) r->tok[p][t] = nx[p];
  }
}

static int32_t vocab_of(dsv4_engine *e) {
  dsv4_model_info mi;
  assert_int_equal(dsv4_model_get_info(dsv4_engine_model(e), &mi, sizeof mi), DSV4_OK);
  return mi.vocab_size;
}

static void greedy_equal(const char *fx) {
  dsv4_engine *ref = open_engine(fx, 0), *dist = open_engine(fx, 1);
  const int32_t V = vocab_of(ref);
  run a, b;
  greedy(ref, V, &a);
  greedy(dist, V, &b);
  for (int p = 0; p < N_PROMPT; p++)
    for (int t = 0; t < N_GEN; t++)
      if (a.tok[p][t] != b.tok[p][t]) {
        for (int u = 0; u <= t; u++) {
          const float *x = a.logits + ((size_t)u * N_PROMPT + (size_t)p) * (size_t)V;
          const float *y = b.logits + ((size_t)u * N_PROMPT + (size_t)p) * (size_t)V;
          double m = 0, best = -1e30, second = -1e30;
          for (int32_t v = 0; v < V; v++) {
            if (fabs((double)x[v] - y[v]) > m) m = fabs((double)x[v] - y[v]);
            if (x[v] > best) second = best, best = x[v];
            else if (x[v] > second) second = x[v];
          }
          printf("  rank %d, prompt %d, step %d: max |diff| %.3g, one-process top-2 gap %.3g\n",
                 g_rank, p, u, m, best - second);
        }
        fail_msg("rank %d, %s, TP %d x PP %d: prompt %d token %d is %d, one process %d", g_rank,
                 fx, g_tp, g_pp, p, t, b.tok[p][t], a.tok[p][t]);
      }
  const size_t n = (size_t)N_GEN * N_PROMPT * (size_t)V;
  double md = 0;
  for (size_t i = 0; i < n; i++) {
    const double d = fabs((double)a.logits[i] - (double)b.logits[i]);
    if (!(d <= md)) md = d;
  }
  printf("  rank %d, %s, TP %d x PP %d: %d tokens equal; logits max |diff| %.3g%s\n", g_rank, fx,
         g_tp, g_pp, N_PROMPT * N_GEN, md,
         memcmp(a.logits, b.logits, n * sizeof(float)) ? "" : " (bit-identical)");
  assert_memory_equal(a.logits, b.logits, n * sizeof(float));
  free(a.logits);
  free(b.logits);
  dsv4_engine_free(dist);
  dsv4_engine_free(ref);
}

static void greedy_a(void **state) { (void)state, greedy_equal("tiny-v41-a"); }

/* The fp8_ds_mla window records (kv_format) on every stage: still bit-identical to one
 * process with that format (CPU backend; the CUDA backend's format tests: test_cuda_engine). */
static void greedy_ds_mla(void **state) {
  (void)state;
  if (g_backend != DSV4_BACKEND_CPU) skip();
  g_kv_format = DSV4_KV_FORMAT_FP8_DS_MLA;
  greedy_equal("tiny-v41-a");
  g_kv_format = DSV4_KV_FORMAT_NATIVE;
}
static void greedy_e2e(void **state) { (void)state, greedy_equal("tiny-v41-e2e-a"); }

/* Speculative greedy generation of both prompts (one batch) equals plain greedy. */
static void spec_equal(const char *fx) {
  dsv4_engine *ref = open_engine(fx, 0), *dist = open_engine(fx, 1);
  const int32_t V = vocab_of(ref);
  run a;
  greedy(ref, V, &a);
  int32_t B = 0;
  {
    dsv4_model_info mi;
    assert_int_equal(dsv4_model_get_info(dsv4_engine_model(dist), &mi, sizeof mi), DSV4_OK);
    B = mi.dspark_block_size;
  }
  assert_true(B >= 1 && B <= 8);
  int64_t id[N_PROMPT];
  int32_t gen[N_PROMPT][N_GEN + 8], ng[N_PROMPT], anchor[N_PROMPT], tok[64];
  for (int p = 0; p < N_PROMPT; p++) {
    prompt(p, tok);
    assert_int_equal(dsv4_engine_seq_create(dist, &id[p]), DSV4_OK);
    assert_int_equal(dsv4_engine_prefill(dist, id[p], tok, prompt_len(p), NULL, NULL, &anchor[p]),
                     DSV4_OK);
    gen[p][0] = anchor[p];
    ng[p] = 1;
  }
  int64_t accepted = 0, steps = 0;
  for (int step = 0;; step++) {
    int64_t bid[N_PROMPT];
    int32_t ba[N_PROMPT], bn[N_PROMPT], bs[N_PROMPT], d[N_PROMPT * 8], acc[N_PROMPT], nx[N_PROMPT];
    int m = 0;
    for (int p = 0; p < N_PROMPT; p++)
      if (ng[p] < N_GEN) bid[m] = id[p], ba[m] = anchor[p], bs[m] = p, bn[m++] = (step + p) % B + 1;
    if (m == 0) break;
    dsv4_status s = dsv4_engine_draft(dist, m, bid, ba, NULL, d, NULL);
    if (s) fail_msg("rank %d: draft: %s", g_rank, dsv4_last_error());
    s = dsv4_engine_verify(dist, m, bid, ba, bn, d, NULL, acc, nx);
    if (s) fail_msg("rank %d: verify: %s", g_rank, dsv4_last_error());
    for (int r = 0; r < m; r++) {
      const int p = bs[r];
      for (int k = 0; k < acc[r]; k++) gen[p][ng[p]++] = d[r * B + k];
      gen[p][ng[p]++] = anchor[p] = nx[r];
      accepted += acc[r];
      steps++;
    }
  }
  for (int p = 0; p < N_PROMPT; p++)
    for (int t = 0; t < N_GEN; t++)
      if (gen[p][t] != a.tok[p][t])
        fail_msg("rank %d, %s: speculative token %d of prompt %d is %d, greedy %d", g_rank, fx, t,
                 p, gen[p][t], a.tok[p][t]);
  printf("  rank %d, %s, TP %d x PP %d: speculative == greedy (%lld verify rows, %lld drafts "
         "accepted)\n", g_rank, fx, g_tp, g_pp, (long long)steps, (long long)accepted);
  free(a.logits);
  dsv4_engine_free(dist);
  dsv4_engine_free(ref);
}

static void spec_a(void **state) { (void)state, spec_equal("tiny-v41-a"); }
static void spec_e2e(void **state) { (void)state, spec_equal("tiny-v41-e2e-a"); }

static void mismatch_call(void **state) {
  (void)state;
  dsv4_engine *e = open_engine("tiny-v41-a", 1);
  int64_t id;
  assert_int_equal(dsv4_engine_seq_create(e, &id), DSV4_OK);
  int32_t tok[64], next = -1;
  prompt(0, tok);
  if (g_rank == g_size - 1) tok[3] ^= 1; /* this rank was given another prompt */
  dsv4_status s = dsv4_engine_prefill(e, id, tok, prompt_len(0), NULL, NULL, &next);
  printf("  rank %d: %s\n", g_rank, dsv4_last_error());
  assert_int_equal(s, DSV4_ERR_RANK_MISMATCH);
  assert_non_null(strstr(dsv4_last_error(), "ranks disagree while starting prefill"));
  int64_t len = -1;
  assert_int_equal(dsv4_engine_seq_length(e, id, &len), DSV4_OK);
  assert_int_equal(len, 0);
  prompt(0, tok); /* the same inputs again: the engine works */
  assert_int_equal(dsv4_engine_prefill(e, id, tok, prompt_len(0), NULL, NULL, &next), DSV4_OK);
  assert_int_equal(dsv4_engine_seq_length(e, id, &len), DSV4_OK);
  assert_int_equal(len, prompt_len(0));
  dsv4_engine_free(e);
}

static void mismatch_create(void **state) {
  (void)state;
  dsv4_engine_params p;
  params(&p, 1);
  if (g_rank == 0) p.max_sequences = 3;
  dsv4_engine *e = NULL;
  dsv4_status s = dsv4_engine_create_from_dir(tu_fixture_or_skip("tiny-v41-a"), &p, &e);
  printf("  rank %d: %s\n", g_rank, dsv4_last_error());
  assert_int_equal(s, DSV4_ERR_RANK_MISMATCH);
  assert_null(e);
  assert_non_null(strstr(dsv4_last_error(), "max_sequences: rank 0 has 3"));
}

/* Ranks asking for different window record formats: DSV4_ERR_RANK_MISMATCH naming kv_format. */
static void mismatch_kv_format(void **state) {
  (void)state;
  dsv4_engine_params p;
  params(&p, 1);
  if (g_rank == 0) p.kv_format = DSV4_KV_FORMAT_FP8_DS_MLA;
  dsv4_engine *e = NULL;
  dsv4_status s = dsv4_engine_create_from_dir(tu_fixture_or_skip("tiny-v41-a"), &p, &e);
  printf("  rank %d: %s\n", g_rank, dsv4_last_error());
  assert_int_equal(s, DSV4_ERR_RANK_MISMATCH);
  assert_null(e);
  assert_non_null(strstr(dsv4_last_error(), "kv_format: rank 0 has 1"));
}

static void refused_split(void **state) {
  (void)state;
  if (g_pp != 2) skip();
  dsv4_engine_params p;
  params(&p, 1);
  p.stage_first_layer[1] = 3; /* layer 3 reads layer 2's compressed KV */
  dsv4_engine *e = NULL;
  dsv4_status s = dsv4_engine_create_from_dir(tu_fixture_or_skip("tiny-v41-a"), &p, &e);
  printf("  rank %d: %s\n", g_rank, dsv4_last_error());
  assert_int_equal(s, DSV4_ERR_UNSUPPORTED);
  assert_null(e);
  assert_non_null(strstr(dsv4_last_error(), "layer 2"));
}

static int32_t abort_at_weights(const char *stage, int64_t done, int64_t total, void *user) {
  (void)done, (void)total, (void)user;
  return !strcmp(stage, "weights");
}

static void failed_create(void **state) {
  (void)state;
  dsv4_engine_params p;
  params(&p, 1);
  if (g_rank == 1) p.progress_fn = abort_at_weights;
  dsv4_engine *e = NULL;
  dsv4_status s = dsv4_engine_create_from_dir(tu_fixture_or_skip("tiny-v41-a"), &p, &e);
  printf("  rank %d: %s\n", g_rank, dsv4_last_error());
  assert_null(e);
  if (g_rank == 1) {
    assert_int_equal(s, DSV4_ABORTED);
  } else {
    assert_int_equal(s, DSV4_ERR_RANK_FAILED);
    assert_non_null(strstr(dsv4_last_error(), "rank 1 failed creating the engine: DSV4_ABORTED"));
  }
}

/* A distributed engine on tiny-v41-a (params(.., 1); dist_timeout_ms replaced when
 * timeout_ms > 0) with one sequence prefilled with prompt 0: *id, its next token *next. */
static dsv4_engine *prefilled_engine(int32_t timeout_ms, int64_t *id, int32_t *next) {
  dsv4_engine_params p;
  params(&p, 1);
  if (timeout_ms > 0) p.dist_timeout_ms = timeout_ms;
  dsv4_engine *e = NULL;
  assert_int_equal(dsv4_engine_create_from_dir(tu_fixture_or_skip("tiny-v41-a"), &p, &e), DSV4_OK);
  int32_t tok[64];
  prompt(0, tok);
  assert_int_equal(dsv4_engine_seq_create(e, id), DSV4_OK);
  assert_int_equal(dsv4_engine_prefill(e, *id, tok, prompt_len(0), NULL, NULL, next), DSV4_OK);
  return e;
}

/* One TP rank fails on its own in a decode step; variant 0: the last rank, inside a layer
 * (its partner waits in the MoE all-reduce); variant 1: the stage's TP rank 0, at a layer's
 * start (its partner waits in that layer's first all-reduce). */
static void tp_fail_case(int variant) {
  int64_t id;
  int32_t next;
  /* dist_timeout_ms 60000: a report by the timeout would take a minute */
  dsv4_engine *e = prefilled_engine(0, &id, &next);
  const int failing = variant == 0 ? g_size - 1 : g_size - g_tp;
  if (g_rank == failing) { /* its stage's second block of the next step */
    dsv4i_backend *be = ((struct dsv4_engine *)e)->be;
    if (variant == 0) dsv4i_cpu_backend_inject_layer_fault(be, 2, DSV4_ERR_OUT_OF_MEMORY);
    else dsv4i_cpu_backend_inject_fault(be, 2, DSV4_ERR_OUT_OF_MEMORY);
  }
  MPI_Barrier(g_world);
  double t0 = now_s();
  dsv4_status s = dsv4_engine_decode(e, 1, &id, &next, NULL, NULL, &next);
  const double dt = now_s() - t0;
  printf("  rank %d, TP %d x PP %d, rank %d fails %s, after %.2f s: %s: %s\n", g_rank, g_tp, g_pp,
         failing, variant == 0 ? "inside a layer" : "at a layer's start", dt,
         dsv4_status_string(s), dsv4_last_error());
  assert_true(dt < 5.0);
  char want[64];
  snprintf(want, sizeof want, "rank %d failed", failing);
  if (g_rank == failing) {
    assert_int_equal(s, DSV4_ERR_OUT_OF_MEMORY);
    assert_non_null(strstr(dsv4_last_error(), "injected fault"));
  } else {
    assert_int_equal(s, DSV4_ERR_RANK_FAILED);
    assert_non_null(strstr(dsv4_last_error(), want));
  }
  /* the stage's TP communicator is done: the next call fails at once, on every rank */
  t0 = now_s();
  s = dsv4_engine_decode(e, 1, &id, &next, NULL, NULL, &next);
  printf("  rank %d: the next call after %.2f s: %s\n", g_rank, now_s() - t0, dsv4_last_error());
  assert_int_equal(s, DSV4_ERR_RANK_FAILED);
  assert_true(now_s() - t0 < 5.0);
  dsv4_engine_free(e);
  MPI_Barrier(g_world);
}

static void tp_rank_fails(void **state) {
  (void)state;
  if (g_tp < 2) skip();
  tp_fail_case(0);
  tp_fail_case(1);
}

/* Four sequences (one per prompt seed), then N_GEN - 1 sampled decode steps of all four with
 * per-sequence seeds, keeping the logits: tok[p][t], logits [N_GEN][4][V]. */
#define N_MB_SEQ 4
static void sampled_run(dsv4_engine *e, int32_t V, int64_t *ids, int32_t tok[][N_GEN], float *lg) {
  int32_t pr[64];
  dsv4_sampling_params sp;
  assert_int_equal(dsv4_sampling_params_init(&sp, sizeof sp), DSV4_OK);
  sp.temperature = 0.8f;
  const uint64_t seeds[N_MB_SEQ] = {11, 22, 33, 44};
  for (int p = 0; p < N_MB_SEQ; p++) {
    prompt(p, pr);
    assert_int_equal(dsv4_engine_seq_create(e, &ids[p]), DSV4_OK);
    sp.seed = seeds[p];
    if (dsv4_engine_prefill(e, ids[p], pr, prompt_len(p), &sp, lg + (size_t)p * (size_t)V,
                            &tok[p][0]))
      fail_msg("rank %d: prefill: %s", g_rank, dsv4_last_error());
  }
  sp.seeds = seeds;
  for (int t = 1; t < N_GEN; t++) {
    int32_t in[N_MB_SEQ], nx[N_MB_SEQ];
    for (int p = 0; p < N_MB_SEQ; p++) in[p] = tok[p][t - 1];
    if (dsv4_engine_decode(e, N_MB_SEQ, ids, in, &sp, lg + (size_t)t * N_MB_SEQ * (size_t)V, nx))
      fail_msg("rank %d: decode: %s", g_rank, dsv4_last_error());
    for (int p = 0; p < N_MB_SEQ; p++) tok[p][t] = nx[p];
  }
}

/* Pipeline overlap (docs/distributed.md "Overlap"): decode calls of 4 sequences cut into
 * 1..4 micro-batches give the one-process tokens (sampled, per-sequence seeds) and
 * bit-identical logits, and run one pipeline step per micro-batch. */
static void overlap(void **state) {
  (void)state;
  if (g_pp < 2) skip();
  dsv4_engine *ref = open_engine("tiny-v41-a", 0);
  const int32_t V = vocab_of(ref);
  const size_t n = (size_t)N_GEN * N_MB_SEQ * (size_t)V;
  int64_t ids[N_MB_SEQ];
  int32_t a[N_MB_SEQ][N_GEN], b[N_MB_SEQ][N_GEN];
  float *la = malloc(n * sizeof(float)), *lb = malloc(n * sizeof(float));
  assert_non_null(la);
  assert_non_null(lb);
  sampled_run(ref, V, ids, a, la);
  for (int32_t mb = 1; mb <= N_MB_SEQ; mb++) {
    dsv4_engine_params p;
    params(&p, 1);
    p.pp_micro_batches = mb;
    dsv4_engine *e = NULL;
    if (dsv4_engine_create_from_dir(tu_fixture_or_skip("tiny-v41-a"), &p, &e))
      fail_msg("rank %d: %s", g_rank, dsv4_last_error());
    dsv4i_dist_info d0, d1;
    dsv4i_dist_get_info(((struct dsv4_engine *)e)->dist, &d0);
    sampled_run(e, V, ids, b, lb);
    dsv4i_dist_get_info(((struct dsv4_engine *)e)->dist, &d1);
    dsv4_engine_timings tm;
    assert_int_equal(dsv4_engine_get_timings(e, &tm, sizeof tm), DSV4_OK);
    /* steps: the prefills' chunks (8 tokens) and (N_GEN - 1) x mb decode micro-batches */
    int64_t chunks = 0;
    for (int q = 0; q < N_MB_SEQ; q++) chunks += (prompt_len(q) + 7) / 8;
    printf("  rank %d, TP %d x PP %d, %d micro-batch(es): %lld steps, stage busy %.1f %%\n",
           g_rank, g_tp, g_pp, (int)mb, (long long)(d1.steps - d0.steps),
           100.0 * (double)tm.stage_ns / (double)(tm.prefill_ns + tm.decode_ns));
    assert_int_equal(d1.steps - d0.steps, chunks + (N_GEN - 1) * mb);
    assert_true(tm.stage_ns > 0 && tm.stage_ns < tm.prefill_ns + tm.decode_ns);
    assert_memory_equal(a, b, sizeof a);
    assert_memory_equal(la, lb, n * sizeof(float));
    dsv4_engine_free(e);
  }
  free(la);
  free(lb);
  dsv4_engine_free(ref);
}

/* A rank of the last stage fails in the second micro-batch of a decode: every rank returns
 * (the failing one its own status, the others DSV4_ERR_RANK_FAILED naming it), nothing is
 * kept, and the same call then gives the one-process tokens (the stages' messages still
 * pair up: the failed micro-batch's payload was taken, a notice was sent on). PP only: a
 * TP rank's failure ends its stage's TP communicator (tp_rank_fails). */
static void overlap_fails(void **state) {
  (void)state;
  if (g_pp < 2 || g_tp > 1 || g_backend != DSV4_BACKEND_CPU) skip();
  dsv4_engine *ref = open_engine("tiny-v41-a", 0);
  dsv4_engine_params p;
  params(&p, 1);
  p.pp_micro_batches = 2;
  dsv4_engine *e = NULL;
  assert_int_equal(dsv4_engine_create_from_dir(tu_fixture_or_skip("tiny-v41-a"), &p, &e), DSV4_OK);
  int64_t ri[N_MB_SEQ], di[N_MB_SEQ], len[N_MB_SEQ];
  int32_t pr[64], rt[N_MB_SEQ], dt[N_MB_SEQ], nr[N_MB_SEQ], nd[N_MB_SEQ];
  for (int q = 0; q < N_MB_SEQ; q++) {
    prompt(q, pr);
    assert_int_equal(dsv4_engine_seq_create(ref, &ri[q]), DSV4_OK);
    assert_int_equal(dsv4_engine_seq_create(e, &di[q]), DSV4_OK);
    assert_int_equal(dsv4_engine_prefill(ref, ri[q], pr, prompt_len(q), NULL, NULL, &rt[q]), DSV4_OK);
    assert_int_equal(dsv4_engine_prefill(e, di[q], pr, prompt_len(q), NULL, NULL, &dt[q]), DSV4_OK);
    assert_int_equal(rt[q], dt[q]);
  }
  const int failing = g_size - 1;
  const struct dsv4_engine *ie = (const struct dsv4_engine *)e;
  if (g_rank == failing) /* the first block of its second micro-batch */
    dsv4i_cpu_backend_inject_fault(ie->be, ie->be->last_layer - ie->be->first_layer + 1,
                                   DSV4_ERR_OUT_OF_MEMORY);
  dsv4_status s = dsv4_engine_decode(e, N_MB_SEQ, di, dt, NULL, NULL, nd);
  printf("  rank %d: decode with rank %d failing in micro-batch 2: %s: %s\n", g_rank, failing,
         dsv4_status_string(s), dsv4_last_error());
  if (g_rank == failing) {
    assert_int_equal(s, DSV4_ERR_OUT_OF_MEMORY);
    assert_non_null(strstr(dsv4_last_error(), "injected fault"));
  } else {
    char want[32];
    snprintf(want, sizeof want, "rank %d failed", failing);
    assert_int_equal(s, DSV4_ERR_RANK_FAILED);
    assert_non_null(strstr(dsv4_last_error(), want));
  }
  for (int q = 0; q < N_MB_SEQ; q++) {
    assert_int_equal(dsv4_engine_seq_length(e, di[q], &len[q]), DSV4_OK);
    assert_int_equal(len[q], prompt_len(q));
  }
  assert_int_equal(dsv4_engine_decode(ref, N_MB_SEQ, ri, rt, NULL, NULL, nr), DSV4_OK);
  s = dsv4_engine_decode(e, N_MB_SEQ, di, dt, NULL, NULL, nd);
  if (s) fail_msg("rank %d: the decode after the failure: %s", g_rank, dsv4_last_error());
  assert_memory_equal(nr, nd, sizeof nr);
  dsv4_engine_free(e);
  dsv4_engine_free(ref);
}

/* The scheduler over a distributed engine: every rank drives its own scheduler with the same
 * calls (submit, step, poll), as one process would; each engine step is a collective call
 * (dsv4i_engine_step agrees on its rows, the logits come from the last stage). Tokens and
 * finish reasons equal the one-process scheduler's: a greedy request, a sampled one with
 * top-p and penalties, and a speculative one (DSpark drafts verified in the step's batch). */
#define N_REQ 3
static void sched_run(dsv4_engine *e, int32_t out[N_REQ][16], int32_t *n, int32_t *fin,
                      dsv4_scheduler_stats *st) {
  dsv4_scheduler_params sp;
  assert_int_equal(dsv4_scheduler_params_init(&sp, sizeof sp), DSV4_OK);
  sp.prefill_chunk = 8;
  dsv4_scheduler *s = NULL;
  if (dsv4_scheduler_create(e, NULL, &sp, &s)) fail_msg("rank %d: %s", g_rank, dsv4_last_error());
  int64_t id[N_REQ];
  int32_t pr[64];
  for (int r = 0; r < N_REQ; r++) {
    dsv4_request_params rp;
    assert_int_equal(dsv4_request_params_init(&rp, sizeof rp), DSV4_OK);
    rp.max_tokens = 12;
    rp.flags = DSV4_REQUEST_F_IGNORE_EOS;
    if (r == 1) {
      rp.temperature = 0.8f;
      rp.top_p = 0.9f;
      rp.repetition_penalty = 1.1f;
      rp.seed = 77;
    }
    if (r == 2) rp.speculative = 3;
    prompt(r, pr);
    if (dsv4_scheduler_submit(s, pr, prompt_len(r), &rp, &id[r]))
      fail_msg("rank %d: submit: %s", g_rank, dsv4_last_error());
  }
  for (int32_t active = 1, k = 0; active; k++) {
    assert_true(k < 200);
    if (dsv4_scheduler_step(s, &active)) fail_msg("rank %d: step: %s", g_rank, dsv4_last_error());
  }
  for (int r = 0; r < N_REQ; r++)
    assert_int_equal(dsv4_scheduler_poll(s, id[r], out[r], 16, &n[r], &fin[r]), DSV4_OK);
  assert_int_equal(dsv4_scheduler_get_stats(s, st, sizeof *st), DSV4_OK);
  dsv4_scheduler_free(s);
}

static void scheduler(void **state) {
  (void)state;
  dsv4_engine *ref = open_engine("tiny-v41-a", 0), *dist = open_engine("tiny-v41-a", 1);
  int32_t a[N_REQ][16], b[N_REQ][16], na[N_REQ], nb[N_REQ], fa[N_REQ], fb[N_REQ];
  dsv4_scheduler_stats sa, sb;
  sched_run(ref, a, na, fa, &sa);
  sched_run(dist, b, nb, fb, &sb);
  printf("  rank %d, TP %d x PP %d: scheduler: %lld steps, %lld drafts verified, %lld accepted "
         "(one process: %lld steps, %lld, %lld)\n", g_rank, g_tp, g_pp, (long long)sb.steps,
         (long long)sb.spec_drafted, (long long)sb.spec_accepted, (long long)sa.steps,
         (long long)sa.spec_drafted, (long long)sa.spec_accepted);
  for (int r = 0; r < N_REQ; r++) {
    assert_int_equal(na[r], 12);
    assert_int_equal(nb[r], na[r]);
    assert_int_equal(fb[r], fa[r]);
    assert_memory_equal(a[r], b[r], sizeof(int32_t) * (size_t)na[r]);
  }
  assert_int_equal(sb.steps, sa.steps);
  assert_true(sb.spec_drafted > 0);
  assert_int_equal(sb.spec_accepted, sa.spec_accepted);
  dsv4_engine_free(dist);
  dsv4_engine_free(ref);
}

/* A rank whose scheduler was given another prompt: the agreement of the engine call its step
 * makes (the prompt's chunk) fails on every rank (DSV4_ERR_RANK_MISMATCH, before the engine
 * changes anything), and the request ends with DSV4_FINISH_ERROR on every rank alike. */
static void scheduler_mismatch(void **state) {
  (void)state;
  dsv4_engine *e = open_engine("tiny-v41-a", 1);
  dsv4_scheduler *s = NULL;
  assert_int_equal(dsv4_scheduler_create(e, NULL, NULL, &s), DSV4_OK);
  int32_t pr[64], out[16], n = -1, fin = -1, active = -1;
  prompt(0, pr);
  if (g_rank == g_size - 1) pr[5] ^= 1;
  int64_t id;
  assert_int_equal(dsv4_scheduler_submit(s, pr, prompt_len(0), NULL, &id), DSV4_OK);
  const dsv4_status st = dsv4_scheduler_step(s, &active);
  printf("  rank %d: %s: %s\n", g_rank, dsv4_status_string(st), dsv4_last_error());
  assert_int_equal(st, DSV4_ERR_RANK_MISMATCH);
  assert_non_null(strstr(dsv4_last_error(), "ranks disagree while starting"));
  assert_int_equal(dsv4_scheduler_poll(s, id, out, 16, &n, &fin), DSV4_OK);
  assert_int_equal(fin, DSV4_FINISH_ERROR);
  assert_int_equal(n, 0);
  dsv4_scheduler_free(s);
  dsv4_engine_free(e);
}

static int64_t heap_in_use(void) {
  const struct mallinfo2 m = mallinfo2();
  return (int64_t)(m.uordblks + m.hblkhd);
}

static void memory_per_rank(void **state) {
  (void)state;
  dsv4_model *m = NULL;
  assert_int_equal(dsv4_model_load(tu_fixture_or_skip("tiny-v41-a"), NULL, &m), DSV4_OK);
  dsv4_engine_params p;
  params(&p, 0);
  p.max_context = 4096; /* a KV pool large next to the fixed parts */
  dsv4_engine_info one, mine;
  assert_int_equal(dsv4_engine_plan_query(m, &p, &one, sizeof one), DSV4_OK);
  params(&p, 1);
  p.max_context = 4096;
  dsv4_engine_info planned; /* this rank's plan before creating anything (not collective) */
  if (dsv4_engine_plan_query(m, &p, &planned, sizeof planned))
    fail_msg("rank %d: plan query: %s", g_rank, dsv4_last_error());
  dsv4_engine *e = NULL;
  MPI_Barrier(g_world);
  const int64_t h0 = heap_in_use();
  dsv4_status s = dsv4_engine_create(m, &p, &e);
  const int64_t got = heap_in_use() - h0;
  if (s) fail_msg("rank %d: %s", g_rank, dsv4_last_error());
  assert_int_equal(dsv4_engine_get_info(e, &mine, sizeof mine), DSV4_OK);
  const int64_t plan = mine.create_bytes, slack = plan / 100 + 256 * 1024;
  if (g_backend == DSV4_BACKEND_CUDA) { /* the device pool its backend took, against the plan */
    dsv4i_dist_info di;
    dsv4i_dist_get_info(((struct dsv4_engine *)e)->dist, &di);
    const int64_t wdev = device_weight_bytes(m, di.first_layer, di.last_layer);
    const int64_t dev = mine.kv_pages_total * mine.kv_page_bytes + mine.workspace_bytes +
                        mine.prepared_weight_bytes + wdev;
    printf("  rank %d, TP %d x PP %d, layers %d..%d: device pool %lld B, plan %lld B (%+.2f %%) "
           "= KV pool %lld + workspace %lld + prepared weights %lld + its checkpoint tensors "
           "%lld\n", g_rank, g_tp, g_pp, (int)di.first_layer, (int)di.last_layer - 1, g_pool,
           (long long)dev, 100.0 * (double)(g_pool - dev) / (double)dev,
           (long long)(mine.kv_pages_total * mine.kv_page_bytes), (long long)mine.workspace_bytes,
           (long long)mine.prepared_weight_bytes, (long long)wdev);
    /* 256 B alignment per tensor and the wo_a upload scratch are not in the plan */
    assert_true(g_pool > 0 && llabs(g_pool - dev) <= dev / 50 + 256 * 1024);
  }
  printf("  rank %d, TP %d x PP %d: allocated %lld B at create, planned %lld B (%+.2f %%): KV "
         "%lld (%lld pages per sequence, one process %lld), workspace %lld, payload buffer %lld; "
         "mapped %lld of %lld\n", g_rank, g_tp, g_pp, (long long)got, (long long)plan,
         100.0 * (double)(got - plan) / (double)plan, (long long)mine.kv_bytes,
         (long long)mine.kv_pages_per_sequence, (long long)one.kv_pages_per_sequence,
         (long long)mine.workspace_bytes, (long long)mine.comm_bytes, (long long)mine.mapped_bytes,
         (long long)one.mapped_bytes);
  if (g_backend == DSV4_BACKEND_CPU) assert_true(llabs(got - plan) <= slack);
  /* the plan query gave the same per-rank figures before the engine existed */
  assert_int_equal(planned.create_bytes, mine.create_bytes);
  assert_int_equal(planned.kv_pages_per_sequence, mine.kv_pages_per_sequence);
  assert_int_equal(planned.comm_bytes, mine.comm_bytes);
  assert_int_equal(planned.mapped_bytes, mine.mapped_bytes);
  /* the stages' caches partition the model's: TP rank 0 of each stage counts its pages */
  int64_t pages = g_rank % g_tp == 0 ? mine.kv_pages_per_sequence : 0, all = 0, lo = 0, hi = 0;
  MPI_Allreduce(&pages, &all, 1, MPI_INT64_T, MPI_SUM, g_world);
  assert_int_equal(all, one.kv_pages_per_sequence);
  if (g_pp > 1) assert_true(mine.kv_pages_per_sequence < one.kv_pages_per_sequence);
  if (g_pp > 1) assert_true(mine.comm_bytes > 0);
  /* TP ranks of a stage hold the same caches (replicated, docs/distributed.md) */
  MPI_Comm stage;
  MPI_Comm_split(g_world, g_rank / g_tp, g_rank, &stage);
  MPI_Allreduce(&mine.kv_pages_per_sequence, &lo, 1, MPI_INT64_T, MPI_MIN, stage);
  MPI_Allreduce(&mine.kv_pages_per_sequence, &hi, 1, MPI_INT64_T, MPI_MAX, stage);
  MPI_Comm_free(&stage);
  assert_int_equal(lo, hi);
  dsv4_engine_free(e);
  dsv4_model_free(m);
}

/* Last: after a timeout the ranks' communicators are out of step for good. */
static void stalled_rank(void **state) {
  (void)state;
  const int32_t timeout_ms = 1500;
  int64_t id;
  int32_t next;
  dsv4_engine *e = prefilled_engine(timeout_ms, &id, &next);
  const int stalled = g_rank == g_size - 1;
  if (stalled) usleep(3 * timeout_ms * 1000);
  double t0 = now_s();
  dsv4_status s = dsv4_engine_decode(e, 1, &id, &next, NULL, NULL, &next);
  double dt = now_s() - t0;
  printf("  rank %d after %.2f s: %s\n", g_rank, dt, dsv4_last_error());
  assert_int_equal(s, DSV4_ERR_RANK_FAILED);
  assert_true(dt < timeout_ms / 1000.0 + 5.0);
  if (!stalled) {
    assert_true(dt >= 0.99 * timeout_ms / 1000.0);
    assert_non_null(strstr(dsv4_last_error(), "within 1500 ms"));
    /* sticky: the next call fails at once */
    t0 = now_s();
    assert_int_equal(dsv4_engine_decode(e, 1, &id, &next, NULL, NULL, &next), DSV4_ERR_RANK_FAILED);
    assert_true(now_s() - t0 < 0.5);
  }
  dsv4_engine_free(e);
  MPI_Barrier(g_world);
}

/* CUDA, TP ranks on one device: refused on every rank before any NCCL call waits. */
static void cuda_tp_one_device(void **state) {
  (void)state;
  if (g_backend != DSV4_BACKEND_CUDA || g_tp < 2) skip();
  dsv4_engine_params p;
  params(&p, 1);
  dsv4_engine *e = NULL;
  dsv4_status s = dsv4_engine_create_from_dir(tu_fixture_or_skip("tiny-v41-a"), &p, &e);
  printf("  rank %d: %s: %s\n", g_rank, dsv4_status_string(s), dsv4_last_error());
  assert_int_equal(s, DSV4_ERR_UNSUPPORTED);
  assert_null(e);
  assert_non_null(strstr(dsv4_last_error(), "TP ranks 0 and 1 of stage 0 both use the GPU"));
}

/* Called by tests/common/test_main.c's main (the test filter). */
int tu_run_suite(void) {
  MPI_Init(NULL, NULL);
  MPI_Comm_dup(MPI_COMM_WORLD, &g_world);
  MPI_Comm_rank(g_world, &g_rank);
  MPI_Comm_size(g_world, &g_size);
  const char *tp = getenv("DSV4_TEST_TP"), *pp = getenv("DSV4_TEST_PP");
  if (tp) g_tp = atoi(tp);
  if (pp) g_pp = atoi(pp);
  const char *be = getenv("DSV4_TEST_BACKEND");
  if (be && !strcmp(be, "cuda")) {
    g_backend = DSV4_BACKEND_CUDA;
    if (dsv4_backend_probe(DSV4_BACKEND_CUDA, 0) != DSV4_OK) { /* the same answer on every rank */
      printf("skip: the CUDA backend is not usable here: %s\n", dsv4_last_error());
      MPI_Finalize();
      return 77;
    }
  }
  if (g_size < 2 || g_tp * g_pp != g_size) {
    fprintf(stderr, "run under mpirun with DSV4_TEST_TP x DSV4_TEST_PP = %d x %d ranks\n", g_tp,
            g_pp);
    MPI_Finalize();
    return 1;
  }
  const struct CMUnitTest tests[] = {
    cmocka_unit_test(greedy_a),        cmocka_unit_test(greedy_e2e),
    cmocka_unit_test(spec_a),          cmocka_unit_test(spec_e2e),
    cmocka_unit_test(greedy_ds_mla),   cmocka_unit_test(mismatch_kv_format),
    cmocka_unit_test(mismatch_call),   cmocka_unit_test(mismatch_create),
    cmocka_unit_test(refused_split),   cmocka_unit_test(failed_create),
    cmocka_unit_test(memory_per_rank), cmocka_unit_test(tp_rank_fails),
    cmocka_unit_test(overlap),         cmocka_unit_test(overlap_fails),
    cmocka_unit_test(scheduler),       cmocka_unit_test(scheduler_mismatch),
    cmocka_unit_test(stalled_rank), /* last: see there */
  };
  const struct CMUnitTest tp_device[] = {cmocka_unit_test(cuda_tp_one_device)};
  int rc = g_backend == DSV4_BACKEND_CUDA && g_tp > 1
               ? cmocka_run_group_tests(tp_device, NULL, NULL)
               : cmocka_run_group_tests(tests, NULL, NULL);
  MPI_Comm_free(&g_world);
  MPI_Finalize();
  return rc;
}
