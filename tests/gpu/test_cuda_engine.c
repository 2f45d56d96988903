/*
 * The CUDA backend through the public engine API, against the CPU backend
 * and against itself (exit 77 without a usable GPU):
 *   - GPU == CPU on the damped fixture tiny-v41-e2e-a (prompt b): prefill and
 *     every decode step's logits within the fixture's 0.829 (README "What an
 *     engine must meet"), the greedy tokens identical; chunked prefill (7) too;
 *   - graph replay == eager, bit for bit: an engine with DSV4_ENGINE_F_OP_TIMINGS
 *     runs op by op, the default one replays a graph per bucket; two sequences
 *     decoded in a bucket of 2 and one in the same bucket shape;
 *   - batch invariance: a sequence's logits do not depend on what else is in
 *     the batch (bit for bit);
 *   - DSpark: the drafts after the prefills of prompts a and b (a batch of 2) equal
 *     the CPU's and the golden dspark.prefill.ids, the confidence logits within
 *     the fixture's 0.489 (speculative == plain greedy: cuda_spec); drafts through a
 *     bucket's graph (partly filled too) equal op by op, bit for bit;
 *   - sampled verification: the backend's accept entry on the device gives the CPU
 *     backend's decisions and replacement tokens (400 cases: draft distributions
 *     given or one-hot, n_valid, temperatures, seeds, positions);
 *   - bad input: the CPU engine's statuses; the backend's sample entry on rows
 *     with NaN / +inf / only -inf and with n_valid: the CPU backend's statuses,
 *     messages and tokens.
 * The goldens themselves are checked by cuda_engine_golden (test_engine_golden.c
 * built for the CUDA backend).
 * The *_ds_mla cases run the same checks with kv_format = DSV4_KV_FORMAT_FP8_DS_MLA
 * (584 B window records; the fixtures' 200 B) on both backends: GPU == CPU in that
 * format (tokens equal, logits within the same 0.829; DSpark drafts equal, confidence
 * within 0.489: the goldens are the native format's), graph == eager and batch
 * invariance bit for bit. Speculative == greedy in that format: cuda_spec.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "test_util.h"

#include "dsv4/dsv4.h"
#include "engine/engine.h"
#include "gpu/gpu_backend.h"
#include "io/safetensors.h"

#define E2E_TOL 0.829f

/* the window record format of every engine a case opens (set by the case's setup) */
static int32_t g_kv_format = DSV4_KV_FORMAT_NATIVE;
static int fmt_native(void **st) {
  (void)st;
  g_kv_format = DSV4_KV_FORMAT_NATIVE;
  return 0;
}
static int fmt_ds_mla(void **st) {
  (void)st;
  g_kv_format = DSV4_KV_FORMAT_FP8_DS_MLA;
  return 0;
}
static const char *fmt_name(void) {
  return g_kv_format == DSV4_KV_FORMAT_FP8_DS_MLA ? "fp8_ds_mla" : "native";
}

static dsv4_engine *open_engine(int32_t backend, int32_t chunk, uint32_t flags, int32_t seqs) {
  const char *dir = tu_fixture_or_skip("tiny-v41-e2e-a");
  dsv4_engine_params ep;
  assert_int_equal(dsv4_engine_params_init(&ep, sizeof ep), DSV4_OK);
  ep.max_sequences = seqs;
  ep.max_context = 256;
  ep.prefill_chunk = chunk;
  ep.backend = backend;
  ep.flags = flags;
  ep.kv_format = g_kv_format;
  dsv4_engine *e = NULL;
  const dsv4_status s = dsv4_engine_create_from_dir(dir, &ep, &e);
  if (s) fail_msg("engine (backend %d): %s: %s", (int)backend, dsv4_status_string(s), dsv4_last_error());
  return e;
}

static int32_t *prompt(const char *name, int64_t *n) {
  const char *dir = tu_fixture_or_skip("tiny-v41-e2e-a");
  char p[4200];
  snprintf(p, sizeof p, "%s/golden.safetensors", dir);
  dsv4i_st_file f;
  assert_int_equal(dsv4i_st_open(p, &f), DSV4_OK);
  const dsv4i_st_tensor *t = dsv4i_st_find(&f, name);
  assert_non_null(t);
  *n = (int64_t)(t->nbytes / 8);
  const int64_t *v = dsv4i_st_data(&f, t);
  int32_t *r = malloc(sizeof *r * (size_t)*n);
  assert_non_null(r);
  for (int64_t i = 0; i < *n; i++) r[i] = (int32_t)v[i];
  dsv4i_st_close(&f);
  return r;
}

static float max_diff(const float *a, const float *b, int64_t n) {
  float m = 0.0f;
  for (int64_t i = 0; i < n; i++) {
    const float d = fabsf(a[i] - b[i]);
    if (!(d <= m)) m = d;
  }
  return m;
}

static int32_t vocab_of(dsv4_engine *e) {
  dsv4_model_info mi;
  assert_int_equal(dsv4_model_get_info(dsv4_engine_model(e), &mi, sizeof mi), DSV4_OK);
  return mi.vocab_size;
}

/* Prefill prompt b, then `steps` greedy decodes: logits [(1 + steps)][V], tokens [1 + steps]. */
static void greedy(dsv4_engine *e, const int32_t *in, int64_t n, int steps, float *lg, int32_t *tok) {
  int64_t seq;
  const int32_t V = vocab_of(e);
  assert_int_equal(dsv4_engine_seq_create(e, &seq), DSV4_OK);
  dsv4_status s = dsv4_engine_prefill(e, seq, in, n, NULL, lg, &tok[0]);
  if (s) fail_msg("prefill: %s", dsv4_last_error());
  for (int k = 0; k < steps; k++) {
    s = dsv4_engine_decode(e, 1, &seq, &tok[k], NULL, lg + (size_t)(k + 1) * V, &tok[k + 1]);
    if (s) fail_msg("decode %d: %s", k, dsv4_last_error());
  }
  assert_int_equal(dsv4_engine_seq_free(e, seq), DSV4_OK);
}

static void gpu_equals_cpu(int32_t chunk) {
  int64_t n;
  int32_t *in = prompt("b.input_ids", &n);
  enum { STEPS = 12 };
  dsv4_engine *c = open_engine(DSV4_BACKEND_CPU, chunk, 0, 2);
  dsv4_engine *g = open_engine(DSV4_BACKEND_CUDA, chunk, 0, 2);
  const int32_t V = vocab_of(c);
  float *lc = malloc(sizeof(float) * (STEPS + 1) * (size_t)V);
  float *lgp = malloc(sizeof(float) * (STEPS + 1) * (size_t)V);
  int32_t tc[STEPS + 1], tg[STEPS + 1];
  assert_non_null(lc);
  assert_non_null(lgp);
  greedy(c, in, n, STEPS, lc, tc);
  greedy(g, in, n, STEPS, lgp, tg);
  float dmax = 0.0f;
  int bits = 0;
  for (int k = 0; k <= STEPS; k++) {
    const float d = max_diff(lc + (size_t)k * V, lgp + (size_t)k * V, V);
    bits += memcmp(lc + (size_t)k * V, lgp + (size_t)k * V, sizeof(float) * (size_t)V) == 0;
    if (d > dmax) dmax = d;
    if (!(d <= E2E_TOL) || tc[k] != tg[k])
      fail_msg("step %d: gpu token %d, cpu %d; logits max |diff| %g", k, (int)tg[k], (int)tc[k],
               (double)d);
  }
  printf("gpu vs cpu (%s KV, prompt b, %lld tokens, chunk %d, %d steps): tokens equal, logits "
         "max |diff| %.6g, %d of %d rows bit-identical\n", fmt_name(), (long long)n, (int)chunk,
         STEPS, (double)dmax, bits, STEPS + 1);
  dsv4_engine_free(c);
  dsv4_engine_free(g);
  free(lc);
  free(lgp);
  free(in);
}

static void gpu_equals_cpu_prefill_whole(void **st) { (void)st; gpu_equals_cpu(256); }
static void gpu_equals_cpu_prefill_chunked(void **st) { (void)st; gpu_equals_cpu(7); }
static void gpu_equals_cpu_ds_mla(void **st) { (void)st; gpu_equals_cpu(256); }

/* Two sequences decoded together for `steps` steps; logits [steps][2][V]. */
static void pair(dsv4_engine *e, const int32_t *a, int64_t na, const int32_t *b, int64_t nb,
                 int steps, float *lg) {
  const int32_t V = vocab_of(e);
  int64_t seq[2];
  int32_t tok[2];
  assert_int_equal(dsv4_engine_seq_create(e, &seq[0]), DSV4_OK);
  assert_int_equal(dsv4_engine_seq_create(e, &seq[1]), DSV4_OK);
  assert_int_equal(dsv4_engine_prefill(e, seq[0], a, na, NULL, NULL, &tok[0]), DSV4_OK);
  assert_int_equal(dsv4_engine_prefill(e, seq[1], b, nb, NULL, NULL, &tok[1]), DSV4_OK);
  for (int k = 0; k < steps; k++) {
    const int32_t in[2] = {tok[0], tok[1]};
    const dsv4_status s = dsv4_engine_decode(e, 2, seq, in, NULL, lg + (size_t)k * 2 * V, tok);
    if (s) fail_msg("decode %d: %s", k, dsv4_last_error());
  }
  assert_int_equal(dsv4_engine_seq_free(e, seq[0]), DSV4_OK);
  assert_int_equal(dsv4_engine_seq_free(e, seq[1]), DSV4_OK);
}

static void graph_replay_equals_eager(void **st) {
  (void)st;
  int64_t na, nb;
  int32_t *a = prompt("a.input_ids", &na), *b = prompt("b.input_ids", &nb);
  enum { STEPS = 8 };
  dsv4_engine *eager = open_engine(DSV4_BACKEND_CUDA, 256, DSV4_ENGINE_F_OP_TIMINGS, 4);
  dsv4_engine *graph = open_engine(DSV4_BACKEND_CUDA, 256, 0, 4);
  const int32_t V = vocab_of(eager);
  float *l1 = malloc(sizeof(float) * STEPS * 2 * (size_t)V);
  float *l2 = malloc(sizeof(float) * STEPS * 2 * (size_t)V);
  assert_non_null(l1);
  assert_non_null(l2);
  /* 2 live rows in the bucket of 2, then (a fresh pair) twice on the graph engine:
   * the second run replays the graphs the first captured */
  pair(eager, a, na, b, nb, STEPS, l1);
  pair(graph, a, na, b, nb, STEPS, l2);
  assert_memory_equal(l1, l2, sizeof(float) * STEPS * 2 * (size_t)V);
  pair(graph, a, na, b, nb, STEPS, l2);
  assert_memory_equal(l1, l2, sizeof(float) * STEPS * 2 * (size_t)V);
  const int32_t caps = dsv4i_gpu_backend_captures(graph->be);
  assert_true(caps >= 2); /* the prefill buckets and the decode bucket of 2, captured once */
  assert_int_equal(dsv4i_gpu_backend_captures(eager->be), 0);
  printf("graph replay == eager (%s KV): %d decode steps x 2 sequences, bit-identical logits (%d "
         "graphs captured)\n", fmt_name(), STEPS, (int)caps);
  /* 3 sequences: the bucket of 4 replayed with 3 live rows, against eager */
  float *g1 = malloc(sizeof(float) * 2 * (size_t)V), *g2 = malloc(sizeof(float) * 2 * (size_t)V);
  float *e3 = malloc(sizeof(float) * 3 * (size_t)V), *r3 = malloc(sizeof(float) * 3 * (size_t)V);
  assert_non_null(g1);
  assert_non_null(g2);
  assert_non_null(e3);
  assert_non_null(r3);
  for (int round = 0; round < 2; round++) {
    dsv4_engine *e = round == 0 ? eager : graph;
    int64_t seq[3];
    int32_t tok[3];
    for (int i = 0; i < 3; i++) {
      assert_int_equal(dsv4_engine_seq_create(e, &seq[i]), DSV4_OK);
      assert_int_equal(dsv4_engine_prefill(e, seq[i], i == 1 ? b : a, i == 1 ? nb : na - i, NULL,
                                           NULL, &tok[i]), DSV4_OK);
    }
    for (int k = 0; k < 3; k++)
      assert_int_equal(dsv4_engine_decode(e, 3, seq, tok, NULL, round == 0 ? e3 : r3, tok), DSV4_OK);
    for (int i = 0; i < 3; i++) assert_int_equal(dsv4_engine_seq_free(e, seq[i]), DSV4_OK);
  }
  assert_memory_equal(e3, r3, sizeof(float) * 3 * (size_t)V);
  assert_true(dsv4i_gpu_backend_captures(graph->be) > caps); /* the bucket of 4 */
  printf("graph replay == eager: bucket of 4 with 3 live rows, bit-identical logits\n");
  (void)g1, (void)g2;
  free(g1);
  free(g2);
  free(e3);
  free(r3);
  dsv4_engine_free(eager);
  dsv4_engine_free(graph);
  free(l1);
  free(l2);
  free(a);
  free(b);
}

/* A sequence decoded alone and next to another: the same logits, bit for bit. */
static void batch_invariance(void **st) {
  (void)st;
  int64_t na, nb;
  int32_t *a = prompt("a.input_ids", &na), *b = prompt("b.input_ids", &nb);
  enum { STEPS = 6 };
  dsv4_engine *e = open_engine(DSV4_BACKEND_CUDA, 256, 0, 4);
  const int32_t V = vocab_of(e);
  float *alone = malloc(sizeof(float) * (STEPS + 1) * (size_t)V);
  float *both = malloc(sizeof(float) * STEPS * 2 * (size_t)V);
  int32_t ta[STEPS + 1];
  assert_non_null(alone);
  assert_non_null(both);
  greedy(e, b, nb, STEPS, alone, ta);
  pair(e, a, na, b, nb, STEPS, both);
  for (int k = 0; k < STEPS; k++) /* decode k of the pair, row 1 = b */
    assert_memory_equal(alone + (size_t)(k + 1) * V, both + ((size_t)k * 2 + 1) * V,
                        sizeof(float) * (size_t)V);
  printf("batch invariance (%s KV): %d decode steps of one sequence alone and in a pair, "
         "bit-identical\n", fmt_name(), STEPS);
  dsv4_engine_free(e);
  free(alone);
  free(both);
  free(a);
  free(b);
}

static void dspark_drafts_as_cpu(void **st) {
  (void)st;
  int64_t na, nb, ng;
  int32_t *a = prompt("a.input_ids", &na), *b = prompt("b.input_ids", &nb);
  int32_t *gold = prompt("dspark.prefill.ids", &ng);
  int32_t dr[2][2 * 8], anchor[2][2];
  float conf[2][2 * 8];
  int32_t B = 0;
  for (int be = 0; be < 2; be++) {
    dsv4_engine *e = open_engine(be ? DSV4_BACKEND_CUDA : DSV4_BACKEND_CPU, 256, 0, 2);
    dsv4_model_info mi;
    assert_int_equal(dsv4_model_get_info(dsv4_engine_model(e), &mi, sizeof mi), DSV4_OK);
    B = mi.dspark_block_size;
    assert_true(B >= 1 && B <= 8);
    int64_t seq[2];
    for (int i = 0; i < 2; i++) {
      assert_int_equal(dsv4_engine_seq_create(e, &seq[i]), DSV4_OK);
      if (dsv4_engine_prefill(e, seq[i], i ? b : a, i ? nb : na, NULL, NULL, &anchor[be][i]))
        fail_msg("prefill: %s", dsv4_last_error());
    }
    const dsv4_status s = dsv4_engine_draft(e, 2, seq, anchor[be], NULL, dr[be], conf[be]);
    if (s) fail_msg("draft (backend %d): %s", be, dsv4_last_error());
    dsv4_engine_free(e);
  }
  assert_memory_equal(anchor[0], anchor[1], sizeof anchor[0]);
  for (int32_t k = 0; k < 2 * B; k++)
    if (dr[0][k] != dr[1][k])
      fail_msg("%s KV: draft %d of sequence %d: gpu %d, cpu %d", fmt_name(), (int)(k % B),
               (int)(k / B), (int)dr[1][k], (int)dr[0][k]);
  if (g_kv_format == DSV4_KV_FORMAT_NATIVE) { /* the goldens are the reference's (native) */
    assert_int_equal(anchor[1][1], gold[0]);
    for (int32_t k = 0; k < B; k++) assert_int_equal(dr[1][B + k], gold[k + 1]);
  }
  float dc = 0.0f;
  for (int32_t k = 0; k < 2 * B; k++) {
    const float d = fabsf(conf[0][k] - conf[1][k]);
    if (!(d <= dc)) dc = d;
  }
  printf("DSpark drafts after the prefills of a and b (%s KV): gpu == cpu%s (%d per sequence); "
         "confidence max |gpu - cpu| %.6g\n", fmt_name(),
         g_kv_format == DSV4_KV_FORMAT_NATIVE ? " == golden" : "", (int)B, (double)dc);
  assert_true(dc <= 0.489f);
  free(a);
  free(b);
  free(gold);
}

/* DSpark drafts through a bucket's graph == op by op, bit for bit (drafts and
 * confidence, greedy and sampled): 3 sequences in the bucket of 4 (a padding
 * sequence on the padding row), then 2 and 1 (full buckets); each call twice on the
 * graph engine, so the second replays what the first captured. */
static void draft_graph_replay_equals_eager(void **st) {
  (void)st;
  int64_t na, nb;
  int32_t *a = prompt("a.input_ids", &na), *b = prompt("b.input_ids", &nb);
  enum { CALLS = 6, MAXB = 8 };
  static const int32_t n_of[CALLS] = {3, 3, 2, 1, 3, 2};
  static const float t_of[CALLS] = {0.0f, 0.8f, 0.0f, 1.0f, 0.0f, 0.6f};
  int32_t dr[2][CALLS][4 * MAXB];
  float conf[2][CALLS][4 * MAXB];
  int32_t B = 0, caps = 0, runs = 0;
  for (int be = 0; be < 2; be++) { /* 0: op by op, 1: graphs */
    dsv4_engine *e = open_engine(DSV4_BACKEND_CUDA, 256, 0, 4);
    if (be == 0) dsv4i_gpu_backend_set_eager(e->be, 1);
    dsv4_model_info mi;
    assert_int_equal(dsv4_model_get_info(dsv4_engine_model(e), &mi, sizeof mi), DSV4_OK);
    B = mi.dspark_block_size;
    assert_true(B >= 1 && B <= MAXB);
    int64_t seq[3];
    int32_t anchor[3];
    for (int i = 0; i < 3; i++) {
      assert_int_equal(dsv4_engine_seq_create(e, &seq[i]), DSV4_OK);
      if (dsv4_engine_prefill(e, seq[i], i == 1 ? b : a, i == 1 ? nb : na - i, NULL, NULL,
                              &anchor[i]))
        fail_msg("prefill: %s", dsv4_last_error());
    }
    for (int c = 0; c < CALLS; c++)
      for (int rep = 0; rep < (be ? 2 : 1); rep++) {
        dsv4_sampling_params sp;
        assert_int_equal(dsv4_sampling_params_init(&sp, sizeof sp), DSV4_OK);
        sp.temperature = t_of[c];
        sp.seed = 77u + (uint64_t)c;
        int32_t d[4 * MAXB];
        float cf[4 * MAXB];
        const int32_t n = n_of[c];
        const dsv4_status s = dsv4_engine_draft(e, n, seq + (3 - n), anchor + (3 - n), &sp, d, cf);
        if (s) fail_msg("draft (%s, call %d): %s", be ? "graphs" : "eager", c, dsv4_last_error());
        if (rep) { /* the replay equals the capture run */
          assert_memory_equal(d, dr[be][c], sizeof(int32_t) * (size_t)(n * B));
          assert_memory_equal(cf, conf[be][c], sizeof(float) * (size_t)(n * B));
        }
        memcpy(dr[be][c], d, sizeof(int32_t) * (size_t)(n * B));
        memcpy(conf[be][c], cf, sizeof(float) * (size_t)(n * B));
        runs += be;
      }
    if (be) caps = dsv4i_gpu_backend_draft_captures(e->be);
    else assert_int_equal(dsv4i_gpu_backend_draft_captures(e->be), 0);
    dsv4_engine_free(e);
  }
  for (int c = 0; c < CALLS; c++) {
    const int32_t n = n_of[c];
    if (memcmp(dr[0][c], dr[1][c], sizeof(int32_t) * (size_t)(n * B)) ||
        memcmp(conf[0][c], conf[1][c], sizeof(float) * (size_t)(n * B)))
      fail_msg("draft call %d (%d sequences, T %.1f): graph replay differs from op by op", c,
               (int)n, (double)t_of[c]);
  }
  /* buckets 4 and 2 for greedy and sampled, 1 for sampled: both graph sets are used */
  assert_true(caps >= 3);
  printf("draft graph replay == eager: %d calls (3 live sequences in the bucket of 4, then 2 "
         "and 1; greedy and sampled), drafts and confidence bit-identical (%d draft graphs "
         "captured)\n", (int)runs, (int)caps);
  free(a);
  free(b);
}

static uint32_t rnd32(uint64_t *x) {
  *x = *x * UINT64_C(6364136223846793005) + UINT64_C(1442695040888963407);
  return (uint32_t)(*x >> 33);
}

static void accept_as_cpu(void **st) {
  (void)st;
  enum { CASES = 400 };
  int32_t acc[2][CASES], tok[2][CASES];
  for (int be = 0; be < 2; be++) {
    dsv4_engine *e = open_engine(be ? DSV4_BACKEND_CUDA : DSV4_BACKEND_CPU, 256, 0, 2);
    dsv4i_backend *b = e->be;
    const int32_t V = vocab_of(e);
    float *row = malloc(sizeof(float) * (size_t)V), *q = malloc(sizeof(float) * (size_t)V);
    assert_non_null(row);
    assert_non_null(q);
    dsv4i_bbuf lg = {NULL};
    assert_int_equal(b->ops->buf_alloc(b, sizeof(float) * (size_t)V * 2, &lg), DSV4_OK);
    uint64_t x = 7;
    for (int c = 0; c < CASES; c++) {
      /* logits with a few strong candidates, the draft's logits close to them */
      for (int32_t i = 0; i < V; i++) {
        row[i] = (float)(rnd32(&x) % 1000) * 0.004f;
        q[i] = row[i] + (float)((int32_t)(rnd32(&x) % 200) - 100) * 0.01f;
      }
      for (int k = 0; k < 4; k++) row[rnd32(&x) % (uint32_t)V] += 4.0f;
      dsv4i_accept_req rq;
      memset(&rq, 0, sizeof rq);
      rq.temperature = 0.3f + (float)(c % 7) * 0.25f;
      rq.q_temperature = 0.5f + (float)(c % 3) * 0.5f;
      rq.draft = (int32_t)(rnd32(&x) % (uint32_t)V);
      rq.n_valid = c % 5 == 0 ? V - 17 : 0;
      rq.seed = 1000 + (uint64_t)c;
      rq.pos = c;
      rq.q = c % 4 == 3 ? NULL : q;
      assert_int_equal(b->ops->buf_write(b, lg, sizeof(float) * (size_t)V, sizeof(float) * (size_t)V, row),
                       DSV4_OK);
      assert_int_equal(b->ops->accept(b, lg, 1, &rq, &acc[be][c], &tok[be][c]), DSV4_OK);
    }
    b->ops->buf_free(b, lg);
    free(row);
    free(q);
    dsv4_engine_free(e);
  }
  int n_acc = 0;
  for (int c = 0; c < CASES; c++) {
    if (acc[0][c] != acc[1][c] || tok[0][c] != tok[1][c])
      fail_msg("accept case %d: cpu %d/%d, cuda %d/%d", c, (int)acc[0][c], (int)tok[0][c],
               (int)acc[1][c], (int)tok[1][c]);
    n_acc += acc[0][c];
  }
  printf("accept rule on the device: %d cases equal to the CPU's (%d accepted, %d replaced)\n",
         CASES, n_acc, CASES - n_acc);
  assert_true(n_acc > 0 && n_acc < CASES);
}

/* The CPU engine's bad-input statuses, case by case. */
static void bad_case(dsv4_engine *e, int c, int64_t seq, dsv4_status *out) {
  const int32_t V = vocab_of(e);
  int32_t tok = -1, bad[2] = {1, V}, neg = -3, big[300] = {0};
  const int64_t two[2] = {seq, seq}, ghost = 12345;
  switch (c) {
  case 0: *out = dsv4_engine_prefill(e, seq, bad, 2, NULL, NULL, &tok); break;
  case 1: *out = dsv4_engine_prefill(e, seq, bad, 0, NULL, NULL, &tok); break;
  case 2: *out = dsv4_engine_prefill(e, ghost, bad, 1, NULL, NULL, &tok); break;
  case 3: *out = dsv4_engine_prefill(e, seq, big, 300, NULL, NULL, &tok); break;
  case 4: *out = dsv4_engine_prefill(e, seq, &neg, 1, NULL, NULL, &tok); break;
  case 5: *out = dsv4_engine_prefill(e, seq, bad, 1, NULL, NULL, &tok); break; /* fine */
  case 6: *out = dsv4_engine_decode(e, 1, &seq, &bad[1], NULL, NULL, &tok); break;
  case 7: *out = dsv4_engine_decode(e, 2, two, bad, NULL, NULL, &tok); break;
  case 8: *out = dsv4_engine_decode(e, 1, &ghost, bad, NULL, NULL, &tok); break;
  case 9: *out = dsv4_engine_decode(e, 0, &seq, bad, NULL, NULL, &tok); break;
  case 10: *out = dsv4_engine_decode(e, 5, two, bad, NULL, NULL, &tok); break;
  case 11: *out = dsv4_engine_seq_free(e, ghost); break;
  default: *out = dsv4_engine_decode(e, 1, &seq, bad, NULL, NULL, &tok); break; /* fine */
  }
}

static void bad_inputs_as_cpu(void **st) {
  (void)st;
  enum { N = 13 };
  dsv4_status got[2][N];
  for (int be = 0; be < 2; be++) {
    dsv4_engine *e = open_engine(be ? DSV4_BACKEND_CUDA : DSV4_BACKEND_CPU, 256, 0, 2);
    int64_t seq;
    assert_int_equal(dsv4_engine_seq_create(e, &seq), DSV4_OK);
    for (int c = 0; c < N; c++) bad_case(e, c, seq, &got[be][c]);
    dsv4_engine_free(e);
  }
  for (int c = 0; c < N; c++) {
    printf("bad input case %2d: cpu %s, cuda %s\n", c, dsv4_status_string(got[0][c]),
           dsv4_status_string(got[1][c]));
    assert_int_equal(got[1][c], got[0][c]);
  }
  assert_int_equal(got[0][5], DSV4_OK);
  assert_int_equal(got[0][N - 1], DSV4_OK);
}

/* The backend's sample entry on hand-made rows: the CPU backend's tokens,
 * statuses and messages (NaN, +inf, all -inf, ids past n_valid). */
static void sample_as_cpu(void **st) {
  (void)st;
  enum { CASES = 6 };
  int32_t tok[2][CASES];
  dsv4_status s[2][CASES];
  char msg[2][CASES][256];
  for (int be = 0; be < 2; be++) {
    dsv4_engine *e = open_engine(be ? DSV4_BACKEND_CUDA : DSV4_BACKEND_CPU, 256, 0, 2);
    dsv4i_backend *b = e->be;
    const int32_t V = vocab_of(e);
    float *row = malloc(sizeof(float) * (size_t)V);
    assert_non_null(row);
    dsv4i_bbuf lg = {NULL};
    assert_int_equal(b->ops->buf_alloc(b, sizeof(float) * (size_t)V, &lg), DSV4_OK);
    for (int c = 0; c < CASES; c++) {
      for (int32_t i = 0; i < V; i++) row[i] = c == 2 ? -INFINITY : (float)((i * 7) % 31) * 0.25f;
      dsv4i_sample_req rq = {c >= 4 ? 0.7f : 0.0f, 0, 99, (uint64_t)c};
      if (c == 0) row[11] = NAN;
      if (c == 1) row[12] = INFINITY;
      if (c == 3 || c == 5) { /* the best value and a NaN past n_valid are never read */
        row[V - 1] = 1e30f;
        row[V - 2] = NAN;
        rq.n_valid = V - 4;
      }
      assert_int_equal(b->ops->buf_write(b, lg, 0, sizeof(float) * (size_t)V, row), DSV4_OK);
      tok[be][c] = -7;
      s[be][c] = b->ops->sample(b, lg, 1, &rq, &tok[be][c]);
      snprintf(msg[be][c], sizeof msg[be][c], "%s", s[be][c] ? dsv4i_error_message() : "");
    }
    b->ops->buf_free(b, lg);
    free(row);
    dsv4_engine_free(e);
  }
  for (int c = 0; c < CASES; c++) {
    printf("sample case %d: cpu %s %d \"%s\", cuda %s %d \"%s\"\n", c, dsv4_status_string(s[0][c]),
           (int)tok[0][c], msg[0][c], dsv4_status_string(s[1][c]), (int)tok[1][c], msg[1][c]);
    assert_int_equal(s[1][c], s[0][c]);
    assert_string_equal(msg[1][c], msg[0][c]);
    if (!s[0][c]) assert_int_equal(tok[1][c], tok[0][c]);
  }
  assert_int_equal(s[0][0], DSV4_ERR_NOT_FINITE);
  assert_int_equal(s[0][2], DSV4_ERR_NOT_FINITE);
  assert_int_equal(s[0][3], DSV4_OK);
}

/* the same cases with fp8_ds_mla window records (the setup fmt_ds_mla sets the format) */
static void gpu_equals_cpu_chunked_ds_mla(void **st) { gpu_equals_cpu_prefill_chunked(st); }
static void graph_replay_equals_eager_ds_mla(void **st) { graph_replay_equals_eager(st); }
static void batch_invariance_ds_mla(void **st) { batch_invariance(st); }
static void dspark_drafts_as_cpu_ds_mla(void **st) { dspark_drafts_as_cpu(st); }
static void draft_graph_replay_equals_eager_ds_mla(void **st) { draft_graph_replay_equals_eager(st); }

int tu_run_suite(void) {
  if (dsv4_backend_probe(DSV4_BACKEND_CUDA, 0) != DSV4_OK) {
    printf("skip: no usable CUDA device: %s\n", dsv4_last_error());
    return 77;
  }
  const struct CMUnitTest tests[] = {
    cmocka_unit_test_setup(gpu_equals_cpu_prefill_whole, fmt_native),
    cmocka_unit_test_setup(gpu_equals_cpu_prefill_chunked, fmt_native),
    cmocka_unit_test_setup(graph_replay_equals_eager, fmt_native),
    cmocka_unit_test_setup(batch_invariance, fmt_native),
    cmocka_unit_test_setup(dspark_drafts_as_cpu, fmt_native),
    cmocka_unit_test_setup(draft_graph_replay_equals_eager, fmt_native),
    cmocka_unit_test_setup(accept_as_cpu, fmt_native),
    cmocka_unit_test_setup(bad_inputs_as_cpu, fmt_native),
    cmocka_unit_test_setup(sample_as_cpu, fmt_native),
    cmocka_unit_test_setup(gpu_equals_cpu_ds_mla, fmt_ds_mla),
    cmocka_unit_test_setup(gpu_equals_cpu_chunked_ds_mla, fmt_ds_mla),
    cmocka_unit_test_setup(graph_replay_equals_eager_ds_mla, fmt_ds_mla),
    cmocka_unit_test_setup(batch_invariance_ds_mla, fmt_ds_mla),
    cmocka_unit_test_setup(dspark_drafts_as_cpu_ds_mla, fmt_ds_mla),
    cmocka_unit_test_setup(draft_graph_replay_equals_eager_ds_mla, fmt_ds_mla),
  };
  return cmocka_run_group_tests_name("cuda_engine", tests, NULL, NULL);
}
