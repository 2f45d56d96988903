/*
 * Public engine API (linked against libdsv4.so), on the tiny-v41-e2e-a
 * checkpoint: parameters and creation errors, invariances (chunked prefill,
 * batch composition and order, fork), bad input and cache-full handling
 * (each its status, nothing changed: checked by continuing the other
 * sequences and comparing with a clean run), sampling determinism, timings.
 * Prompts are synthetic token ids (> window, so compressed attention and
 * the indexer run); goldens are in test_engine_golden.c.
 */
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "test_util.h"

#include "dsv4/dsv4.h"

#define FIX "tiny-v41-e2e-a"
#define MAXV 1024

static int32_t g_vocab;

static dsv4_engine *mk(int32_t seqs, int64_t ctx, int32_t chunk, int64_t budget, uint32_t flags) {
  const char *dir = tu_fixture_or_skip(FIX);
  dsv4_engine_params ep;
  assert_int_equal(dsv4_engine_params_init(&ep, sizeof ep), DSV4_OK);
  ep.max_sequences = seqs;
  ep.max_context = ctx;
  ep.prefill_chunk = chunk;
  ep.kv_budget_bytes = budget;
  ep.flags = flags;
  dsv4_engine *e = NULL;
  dsv4_status s = dsv4_engine_create_from_dir(dir, &ep, &e);
  if (s) fail_msg("create: %s: %s", dsv4_status_string(s), dsv4_last_error());
  dsv4_model_info mi;
  assert_int_equal(dsv4_model_get_info(dsv4_engine_model(e), &mi, sizeof mi), DSV4_OK);
  g_vocab = mi.vocab_size;
  assert_true(g_vocab <= MAXV);
  return e;
}

/* Synthetic prompt: BOS then regular ids (3 .. 600) from a seeded LCG. */
static void prompt(int32_t *t, int n, uint32_t seed) {
  uint32_t x = seed * 2654435761u + 12345u;
  t[0] = 0;
  for (int i = 1; i < n; i++) {
    x = x * 1664525u + 1013904223u;
    t[i] = 3 + (int32_t)((x >> 8) % 598u);
  }
}

static int64_t new_seq(dsv4_engine *e) {
  int64_t id = 0;
  assert_int_equal(dsv4_engine_seq_create(e, &id), DSV4_OK);
  return id;
}

static int64_t seq_len(dsv4_engine *e, int64_t id) {
  int64_t n = -1;
  assert_int_equal(dsv4_engine_seq_length(e, id, &n), DSV4_OK);
  return n;
}

/* Prefill n tokens and run k greedy decode steps; logits of the prefill and
 * every step go to out[(k + 1)][vocab]; the generated tokens to gen[k + 1]. */
static void run(dsv4_engine *e, int64_t id, const int32_t *t, int n, int k, float *out,
                int32_t *gen) {
  dsv4_status s = dsv4_engine_prefill(e, id, t, n, NULL, out, &gen[0]);
  if (s) fail_msg("prefill: %s", dsv4_engine_last_error(e));
  for (int i = 0; i < k; i++) {
    const int32_t in = gen[i];
    s = dsv4_engine_decode(e, 1, &id, &in, NULL, out + (size_t)(i + 1) * (size_t)g_vocab,
                           &gen[i + 1]);
    if (s) fail_msg("decode: %s", dsv4_engine_last_error(e));
  }
}

static float maxdiff(const float *a, const float *b, size_t n) {
  float m = 0; /* (no libm: the api tests link only libdsv4 and cmocka) */
  for (size_t i = 0; i < n; i++) {
    const float d = a[i] > b[i] ? a[i] - b[i] : b[i] - a[i];
    if (!(d <= m)) m = d;
  }
  return m;
}

/* ---- parameters and creation ------------------------------------------- */

static void params_and_create_errors(void **st) {
  (void)st;
  dsv4_engine_params ep;
  assert_int_equal(dsv4_engine_params_init(NULL, sizeof ep), DSV4_ERR_INVALID_ARG);
  assert_int_equal(dsv4_engine_params_init(&ep, 8), DSV4_ERR_PARAMS_SIZE);
  assert_int_equal(dsv4_engine_params_init(&ep, sizeof ep), DSV4_OK);
  assert_int_equal(ep.struct_size, sizeof ep);
  assert_int_equal(ep.backend, DSV4_BACKEND_AUTO);
  dsv4_sampling_params sp;
  assert_int_equal(dsv4_sampling_params_init(&sp, 4), DSV4_ERR_PARAMS_SIZE);
  assert_int_equal(dsv4_sampling_params_init(&sp, sizeof sp), DSV4_OK);
  assert_true(sp.temperature == 0.0f && sp.seeds == NULL);

  const char *dir = tu_fixture_or_skip(FIX);
  dsv4_engine *e = (dsv4_engine *)1;
  assert_int_equal(dsv4_engine_create(NULL, NULL, &e), DSV4_ERR_INVALID_ARG);
  assert_null(e);
  dsv4_model_params mp;
  assert_int_equal(dsv4_model_params_init(&mp, sizeof mp), DSV4_OK);
  mp.flags = DSV4_MODEL_F_CONFIG_ONLY;
  dsv4_model *cm = NULL;
  assert_int_equal(dsv4_model_load(dir, &mp, &cm), DSV4_OK);
  assert_int_equal(dsv4_engine_create(cm, NULL, &e), DSV4_ERR_INVALID_ARG);
  dsv4_model_free(cm);

  dsv4_model *m = NULL;
  assert_int_equal(dsv4_model_load(dir, NULL, &m), DSV4_OK);
  /* CUDA: created where the probe finds a usable GPU; elsewhere refused with the
   * probe's status (UNSUPPORTED without kernels, NO_DEVICE without a GPU), naming it */
  const dsv4_status probe = dsv4_backend_probe(DSV4_BACKEND_CUDA, 0);
  ep.backend = DSV4_BACKEND_CUDA;
  const dsv4_status cs = dsv4_engine_create(m, &ep, &e);
  if (probe == DSV4_OK) {
    assert_int_equal(cs, DSV4_OK);
    dsv4_engine_free(e);
    e = NULL;
  } else {
    assert_int_equal(cs, probe);
    assert_non_null(strstr(dsv4_last_error(), "cuda"));
  }
  assert_int_equal(dsv4_engine_params_init(&ep, sizeof ep), DSV4_OK);
  ep.backend = 7;
  assert_int_equal(dsv4_engine_create(m, &ep, &e), DSV4_ERR_INVALID_ARG);
  assert_int_equal(dsv4_engine_params_init(&ep, sizeof ep), DSV4_OK);
  ep.flags = 1u << 30;
  assert_int_equal(dsv4_engine_create(m, &ep, &e), DSV4_ERR_INVALID_ARG);
  /* the GPU numerics flag is known; the CPU backend takes and ignores it */
  assert_int_equal(dsv4_engine_params_init(&ep, sizeof ep), DSV4_OK);
  ep.backend = DSV4_BACKEND_CPU;
  ep.max_context = 64;
  ep.flags = DSV4_ENGINE_F_GPU_CPU_ORDER;
  assert_int_equal(dsv4_engine_create(m, &ep, &e), DSV4_OK);
  dsv4_engine_free(e);
  e = NULL;
  assert_int_equal(dsv4_engine_params_init(&ep, sizeof ep), DSV4_OK);
  ep.tp_size = 2;
  assert_int_equal(dsv4_engine_create(m, &ep, &e), DSV4_ERR_INVALID_ARG);
  for (int k = 0; k < 2; k++) { /* pp_micro_batches outside 0..256 */
    assert_int_equal(dsv4_engine_params_init(&ep, sizeof ep), DSV4_OK);
    ep.pp_micro_batches = k ? 257 : -1;
    assert_int_equal(dsv4_engine_create(m, &ep, &e), DSV4_ERR_INVALID_ARG);
    assert_non_null(strstr(dsv4_last_error(), "pp_micro_batches"));
  }
  /* a thread count OpenMP cannot allocate is refused (it used to abort the process) */
  assert_int_equal(dsv4_engine_params_init(&ep, sizeof ep), DSV4_OK);
  ep.n_threads = INT32_MAX;
  assert_int_equal(dsv4_engine_create(m, &ep, &e), DSV4_ERR_INVALID_ARG);
  assert_non_null(strstr(dsv4_last_error(), "n_threads"));
  assert_null(e);
  assert_int_equal(dsv4_engine_params_init(&ep, sizeof ep), DSV4_OK);
  ep.max_context = INT64_C(1) << 40;
  assert_int_equal(dsv4_engine_create(m, &ep, &e), DSV4_ERR_INVALID_ARG);
  assert_int_equal(dsv4_engine_params_init(&ep, sizeof ep), DSV4_OK);
  ep.kv_budget_bytes = 1000; /* cannot hold one sequence */
  assert_int_equal(dsv4_engine_create(m, &ep, &e), DSV4_ERR_DOES_NOT_FIT);
  assert_null(e);
  assert_int_equal(dsv4_engine_params_init(&ep, sizeof ep), DSV4_OK);
  ep.max_sequences = 65535;
  ep.max_context = 1 << 20; /* 65535 sequences at 1M positions: more than this machine */
  assert_int_equal(dsv4_engine_create(m, &ep, &e), DSV4_ERR_DOES_NOT_FIT);
  printf("does-not-fit message: %s\n", dsv4_last_error());
  /* prefill_chunk is capped at max_context before the workspace is sized (INT32_MAX tokens
   * per step used to plan terabytes) */
  assert_int_equal(dsv4_engine_params_init(&ep, sizeof ep), DSV4_OK);
  ep.max_context = 512;
  ep.prefill_chunk = INT32_MAX;
  assert_int_equal(dsv4_engine_create(m, &ep, &e), DSV4_OK);
  dsv4_engine_info ci;
  assert_int_equal(dsv4_engine_get_info(e, &ci, sizeof ci), DSV4_OK);
  assert_int_equal(ci.prefill_chunk, 512);
  dsv4_engine_free(e);
  e = NULL;

  /* a working engine over a borrowed model; info */
  assert_int_equal(dsv4_engine_create(m, NULL, &e), DSV4_OK);
  assert_ptr_equal(dsv4_engine_model(e), m);
  dsv4_engine_info info;
  assert_int_equal(dsv4_engine_get_info(e, &info, 4), DSV4_ERR_INVALID_ARG);
  /* a caller compiled against the 0.1 struct (it ends at mapped_bytes) gets exactly its
   * bytes, from both calls (the Python binding's old struct failed once comm_bytes and
   * create_bytes were appended) */
  const size_t v01 = offsetof(dsv4_engine_info, comm_bytes);
  memset(&info, 0x5a, sizeof info);
  assert_int_equal(dsv4_engine_get_info(e, &info, v01), DSV4_OK);
  assert_int_equal(info.struct_size, v01);
  assert_int_equal(info.max_sequences, 8);
  assert_int_equal(info.comm_bytes, 0x5a5a5a5a5a5a5a5a);
  assert_int_equal(info.create_bytes, 0x5a5a5a5a5a5a5a5a);
  memset(&info, 0x5a, sizeof info);
  assert_int_equal(dsv4_engine_plan_query(m, NULL, &info, v01), DSV4_OK);
  assert_int_equal(info.struct_size, v01);
  assert_int_equal(info.create_bytes, 0x5a5a5a5a5a5a5a5a);
  assert_int_equal(dsv4_engine_plan_query(m, NULL, &info, v01 - 8), DSV4_ERR_INVALID_ARG);
  assert_int_equal(dsv4_engine_get_info(e, &info, sizeof info), DSV4_OK);
  assert_int_equal(info.struct_size, sizeof info);
  assert_true(info.create_bytes > 0);
  assert_int_equal(info.backend, DSV4_BACKEND_CPU);
  assert_int_equal(info.max_sequences, 8);
  assert_int_equal(info.max_context, 4096);
  assert_int_equal(info.kv_pages_used, 0);
  assert_true(info.kv_pages_total >= 8 * info.kv_pages_per_sequence);
  printf("info: page %lld B, %lld pages (%lld per sequence), KV %lld B, %lld B/token\n",
         (long long)info.kv_page_bytes, (long long)info.kv_pages_total,
         (long long)info.kv_pages_per_sequence, (long long)info.kv_bytes,
         (long long)info.kv_bytes_per_token);
  dsv4_engine_free(e);
  dsv4_engine_free(NULL);
  dsv4_model_free(m);
}

/* ---- invariances ---------------------------------------------------------- */

#define NP 100 /* prompt tokens (window 16: compressed attention + indexer active) */
#define ND 6   /* decode steps after it */

static void chunked_prefill_same(void **st) {
  (void)st;
  int32_t t[NP];
  prompt(t, NP, 7);
  static float ref[(ND + 1) * MAXV], got[(ND + 1) * MAXV];
  int32_t gref[ND + 1], ggot[ND + 1];
  const int32_t chunks[] = {0 /* whole */, 1, 3, 7};
  for (size_t c = 0; c < sizeof chunks / sizeof chunks[0]; c++) {
    dsv4_engine *e = mk(1, 256, chunks[c] ? chunks[c] : NP, 0, 0);
    run(e, new_seq(e), t, NP, ND, c ? got : ref, c ? ggot : gref);
    if (c) {
      const size_t n = (size_t)(ND + 1) * (size_t)g_vocab;
      printf("prefill chunk %d vs whole: max |diff| %g\n", (int)chunks[c],
             (double)maxdiff(ref, got, n));
      assert_memory_equal(ref, got, n * sizeof(float)); /* bit-identical */
      assert_memory_equal(gref, ggot, sizeof gref);
    }
    dsv4_engine_free(e);
  }
  /* a prompt fed in several prefill calls: the layout follows each call's
   * end, so only the first call's window rows can differ; tokens stay. */
  dsv4_engine *e = mk(1, 256, 256, 0, 0);
  int64_t id = new_seq(e);
  assert_int_equal(dsv4_engine_prefill(e, id, t, 40, NULL, NULL, NULL), DSV4_OK);
  assert_int_equal(dsv4_engine_prefill(e, id, t + 40, NP - 40, NULL, got, &ggot[0]), DSV4_OK);
  printf("prefill in two calls (40 + 60) vs whole: max |diff| %g\n",
         (double)maxdiff(ref, got, (size_t)g_vocab));
  assert_true(maxdiff(ref, got, (size_t)g_vocab) < 0.05f);
  assert_int_equal(ggot[0], gref[0]);
  dsv4_engine_free(e);
}

/* Three sequences at different positions, decoded alone and in batches of
 * every composition and order: the logits of a sequence are bit-identical. */
static void batch_composition_and_order(void **st) {
  (void)st;
  const int lens[3] = {5, 30, 61};
  int32_t t[3][64];
  static float alone[3][(ND + 1) * MAXV];
  int32_t galone[3][ND + 1];
  dsv4_engine *e = mk(3, 128, 16, 0, 0);
  for (int s = 0; s < 3; s++) {
    prompt(t[s], lens[s], 100 + (uint32_t)s);
    int64_t id = new_seq(e);
    run(e, id, t[s], lens[s], ND, alone[s], galone[s]);
    assert_int_equal(dsv4_engine_seq_free(e, id), DSV4_OK);
  }
  static const int orders[][3] = {{0, 1, 2}, {2, 0, 1}, {1, 2, -1}, {2, 1, -1}, {0, 2, -1}};
  static float lg[3 * MAXV];
  for (size_t o = 0; o < sizeof orders / sizeof orders[0]; o++) {
    int64_t ids[3];
    int32_t next[3];
    int n = 0;
    for (int j = 0; j < 3 && orders[o][j] >= 0; j++, n++) {
      const int s = orders[o][j];
      ids[j] = new_seq(e);
      assert_int_equal(dsv4_engine_prefill(e, ids[j], t[s], lens[s], NULL, NULL, &next[j]), DSV4_OK);
      assert_int_equal(next[j], galone[s][0]);
    }
    for (int k = 0; k < ND; k++) {
      const int32_t in[3] = {next[0], next[1], next[2]};
      assert_int_equal(dsv4_engine_decode(e, n, ids, in, NULL, lg, next), DSV4_OK);
      for (int j = 0; j < n; j++) {
        const int s = orders[o][j];
        assert_memory_equal(lg + (size_t)j * (size_t)g_vocab,
                            alone[s] + (size_t)(k + 1) * (size_t)g_vocab,
                            sizeof(float) * (size_t)g_vocab);
        assert_int_equal(next[j], galone[s][k + 1]);
      }
    }
    for (int j = 0; j < n; j++) assert_int_equal(dsv4_engine_seq_free(e, ids[j]), DSV4_OK);
  }
  dsv4_engine_free(e);
}

static void fork_equals_parent(void **st) {
  (void)st;
  int32_t t[NP];
  prompt(t, 45, 3);
  dsv4_engine *e = mk(4, 128, 32, 0, 0);
  const int64_t p = new_seq(e);
  int32_t tok = -1;
  assert_int_equal(dsv4_engine_prefill(e, p, t, 45, NULL, NULL, &tok), DSV4_OK);
  int64_t c = 0;
  assert_int_equal(dsv4_engine_seq_fork(e, 999, &c), DSV4_ERR_UNKNOWN_SEQUENCE);
  assert_int_equal(dsv4_engine_seq_fork(e, p, &c), DSV4_OK);
  assert_true(c != p);
  assert_int_equal(seq_len(e, c), 45);
  static float lg[2 * MAXV];
  int64_t ids[2] = {p, c};
  int32_t next[2] = {tok, tok};
  for (int k = 0; k < ND; k++) { /* parent and child in one batch: identical rows */
    const int32_t in[2] = {next[0], next[1]};
    assert_int_equal(dsv4_engine_decode(e, 2, ids, in, NULL, lg, next), DSV4_OK);
    assert_memory_equal(lg, lg + g_vocab, sizeof(float) * (size_t)g_vocab);
    assert_int_equal(next[0], next[1]);
  }
  /* a fork then diverges independently: feed the child another token */
  int64_t c2 = 0;
  assert_int_equal(dsv4_engine_seq_fork(e, c, &c2), DSV4_OK);
  const int32_t other = (next[0] + 1) % 600 + 3;
  int32_t a, b;
  assert_int_equal(dsv4_engine_decode(e, 1, &c2, &other, NULL, NULL, &b), DSV4_OK);
  assert_int_equal(dsv4_engine_decode(e, 1, &p, &next[0], NULL, lg, &a), DSV4_OK);
  assert_int_equal(dsv4_engine_decode(e, 1, &c, &next[1], NULL, lg + g_vocab, &b), DSV4_OK);
  assert_memory_equal(lg, lg + g_vocab, sizeof(float) * (size_t)g_vocab);
  dsv4_engine_free(e);
}


/* ---- bad input: each its status, nothing changed ------------------------- */

/* The clean run that every "after an error" continuation must match. */
static void clean_run(const int32_t *t, int n, int k, float *out, int32_t *gen) {
  dsv4_engine *e = mk(2, 64, 16, 0, 0);
  run(e, new_seq(e), t, n, k, out, gen);
  dsv4_engine_free(e);
}

static void bad_input(void **st) {
  (void)st;
  int32_t t[80];
  prompt(t, 70, 11);
  static float ref[(ND + 1) * MAXV], got[(ND + 1) * MAXV], lg[2 * MAXV];
  int32_t gref[ND + 1], ggot[ND + 1];
  clean_run(t, 20, ND, ref, gref);

  dsv4_engine *e = mk(2, 64, 16, 0, 0);
  const int64_t a = new_seq(e), b = new_seq(e);
  int32_t tok;
  /* prefill errors on b leave b empty */
  int32_t bad[3] = {5, g_vocab, 7};
  assert_int_equal(dsv4_engine_prefill(e, b, bad, 3, NULL, NULL, NULL), DSV4_ERR_INVALID_TOKEN);
  assert_non_null(strstr(dsv4_engine_last_error(e), "token 1"));
  bad[1] = -1;
  assert_int_equal(dsv4_engine_prefill(e, b, bad, 3, NULL, NULL, NULL), DSV4_ERR_INVALID_TOKEN);
  assert_int_equal(dsv4_engine_prefill(e, b, t, 0, NULL, NULL, NULL), DSV4_ERR_INVALID_ARG);
  assert_int_equal(dsv4_engine_prefill(e, b, NULL, 3, NULL, NULL, NULL), DSV4_ERR_INVALID_ARG);
  assert_int_equal(dsv4_engine_prefill(e, b, t, 65, NULL, NULL, NULL), DSV4_ERR_CONTEXT_OVERFLOW);
  /* the context is checked before the tokens are read: a count past it is an
   * overflow, whatever lies past the prompt (it used to scan n tokens first) */
  int32_t over[66];
  memcpy(over, t, sizeof over);
  over[65] = -1;
  assert_int_equal(dsv4_engine_prefill(e, b, over, 66, NULL, NULL, NULL), DSV4_ERR_CONTEXT_OVERFLOW);
  assert_int_equal(seq_len(e, b), 0);
  assert_int_equal(dsv4_engine_prefill(e, 12345, t, 3, NULL, NULL, NULL), DSV4_ERR_UNKNOWN_SEQUENCE);
  assert_int_equal(dsv4_engine_prefill(e, 0, t, 3, NULL, NULL, NULL), DSV4_ERR_UNKNOWN_SEQUENCE);

  /* a runs normally through errors on b and on whole batches */
  assert_int_equal(dsv4_engine_prefill(e, a, t, 20, NULL, got, &ggot[0]), DSV4_OK);
  assert_int_equal(dsv4_engine_prefill(e, b, t, 30, NULL, NULL, &tok), DSV4_OK);
  int64_t ids[2] = {a, b};
  int k = 0;
  for (; k < ND; k++) {
    int32_t in[2] = {ggot[k], tok}, out[2];
    /* every kind of bad batch first: nothing may change */
    in[1] = g_vocab + 3;
    assert_int_equal(dsv4_engine_decode(e, 2, ids, in, NULL, lg, out), DSV4_ERR_INVALID_TOKEN);
    assert_non_null(strstr(dsv4_engine_last_error(e), "row 1"));
    in[1] = tok;
    const int64_t dup[2] = {a, a};
    assert_int_equal(dsv4_engine_decode(e, 2, dup, in, NULL, lg, out), DSV4_ERR_INVALID_ARG);
    const int64_t unk[2] = {a, b + 1000000};
    assert_int_equal(dsv4_engine_decode(e, 2, unk, in, NULL, lg, out), DSV4_ERR_UNKNOWN_SEQUENCE);
    assert_int_equal(dsv4_engine_decode(e, 3, ids, in, NULL, lg, out), DSV4_ERR_INVALID_ARG);
    assert_int_equal(dsv4_engine_decode(e, 0, ids, in, NULL, lg, out), DSV4_ERR_INVALID_ARG);
    assert_int_equal(seq_len(e, a), 20 + k);
    /* then the real step */
    assert_int_equal(dsv4_engine_decode(e, 2, ids, in, NULL, lg, out), DSV4_OK);
    memcpy(got + (size_t)(k + 1) * (size_t)g_vocab, lg, sizeof(float) * (size_t)g_vocab);
    ggot[k + 1] = out[0];
    tok = out[1];
  }
  assert_memory_equal(ref, got, sizeof(float) * (size_t)(ND + 1) * (size_t)g_vocab);
  assert_memory_equal(gref, ggot, sizeof gref);

  /* context overflow at decode: fill b to max_context, then one more */
  const int64_t lb = seq_len(e, b);
  assert_int_equal(dsv4_engine_prefill(e, b, t, 64 - lb, NULL, NULL, NULL), DSV4_OK);
  int32_t in2[2] = {ggot[ND], 5}, out2[2];
  assert_int_equal(dsv4_engine_decode(e, 2, ids, in2, NULL, lg, out2), DSV4_ERR_CONTEXT_OVERFLOW);
  assert_int_equal(seq_len(e, b), 64);
  assert_int_equal(seq_len(e, a), 20 + ND);

  /* freed sequences are unknown everywhere; ids are not reused */
  assert_int_equal(dsv4_engine_seq_free(e, b), DSV4_OK);
  assert_int_equal(dsv4_engine_seq_free(e, b), DSV4_ERR_UNKNOWN_SEQUENCE);
  assert_int_equal(dsv4_engine_prefill(e, b, t, 3, NULL, NULL, NULL), DSV4_ERR_UNKNOWN_SEQUENCE);
  assert_int_equal(dsv4_engine_decode(e, 2, ids, in2, NULL, lg, out2), DSV4_ERR_UNKNOWN_SEQUENCE);
  int64_t len = 0, c2 = 0;
  assert_int_equal(dsv4_engine_seq_length(e, b, &len), DSV4_ERR_UNKNOWN_SEQUENCE);
  assert_int_equal(dsv4_engine_seq_fork(e, b, &c2), DSV4_ERR_UNKNOWN_SEQUENCE);
  const int64_t b2 = new_seq(e);
  assert_true(b2 != b);
  /* too many sequences: max_sequences is 2 */
  assert_int_equal(dsv4_engine_seq_create(e, &c2), DSV4_KV_FULL);
  assert_int_equal(dsv4_engine_seq_fork(e, a, &c2), DSV4_KV_FULL);
  assert_int_equal(dsv4_engine_seq_length(e, a, &len), DSV4_OK);
  assert_int_equal(len, 20 + ND);
  dsv4_engine_free(e);
}

/* A pool that holds one sequence at max context: the second one's prefill
 * is refused with DSV4_KV_FULL, changing nothing; the first continues as in
 * a clean run; after freeing the first, the second fits. */
static void cache_full(void **st) {
  (void)st;
  dsv4_engine *probe = mk(2, 64, 16, 0, 0);
  dsv4_engine_info pi;
  assert_int_equal(dsv4_engine_get_info(probe, &pi, sizeof pi), DSV4_OK);
  dsv4_engine_free(probe);
  const int64_t host = pi.kv_bytes - pi.kv_pages_total * pi.kv_page_bytes; /* slots' part */
  const int64_t budget = host + (pi.kv_pages_per_sequence + 1) * pi.kv_page_bytes;

  int32_t t[64];
  prompt(t, 60, 21);
  static float ref[(ND + 1) * MAXV], got[(ND + 1) * MAXV];
  int32_t gref[ND + 1], ggot[ND + 1];
  clean_run(t, 50, ND, ref, gref);

  dsv4_engine *e = mk(2, 64, 16, budget, 0);
  dsv4_engine_info info;
  assert_int_equal(dsv4_engine_get_info(e, &info, sizeof info), DSV4_OK);
  printf("tiny pool: %lld pages of %lld B, %lld per sequence at max context\n",
         (long long)info.kv_pages_total, (long long)info.kv_page_bytes,
         (long long)info.kv_pages_per_sequence);
  assert_true(info.kv_pages_total < 2 * info.kv_pages_per_sequence);
  const int64_t a = new_seq(e), b = new_seq(e);
  assert_int_equal(dsv4_engine_prefill(e, a, t, 50, NULL, got, &ggot[0]), DSV4_OK);
  dsv4_engine_info mid;
  assert_int_equal(dsv4_engine_get_info(e, &mid, sizeof mid), DSV4_OK);
  assert_int_equal(dsv4_engine_prefill(e, b, t, 60, NULL, NULL, NULL), DSV4_KV_FULL);
  assert_non_null(strstr(dsv4_engine_last_error(e), "full"));
  assert_int_equal(seq_len(e, b), 0);
  /* a decode batch that cannot grow one of its sequences changes none */
  const int64_t ab[2] = {a, b};
  const int32_t in2[2] = {ggot[0], 5};
  int32_t out2[2];
  assert_int_equal(dsv4_engine_decode(e, 2, ab, in2, NULL, NULL, out2), DSV4_KV_FULL);
  assert_int_equal(seq_len(e, a), 50);
  assert_int_equal(seq_len(e, b), 0);
  dsv4_engine_info after;
  assert_int_equal(dsv4_engine_get_info(e, &after, sizeof after), DSV4_OK);
  assert_int_equal(after.kv_pages_used, mid.kv_pages_used);
  for (int k = 0; k < ND; k++) {
    const int32_t in = ggot[k];
    assert_int_equal(dsv4_engine_decode(e, 1, &a, &in, NULL, got + (size_t)(k + 1) * (size_t)g_vocab,
                                        &ggot[k + 1]), DSV4_OK);
  }
  assert_memory_equal(ref, got, sizeof(float) * (size_t)(ND + 1) * (size_t)g_vocab);
  assert_memory_equal(gref, ggot, sizeof gref);
  assert_int_equal(dsv4_engine_seq_free(e, a), DSV4_OK);
  assert_int_equal(dsv4_engine_prefill(e, b, t, 60, NULL, NULL, NULL), DSV4_OK);
  dsv4_engine_free(e);
}

/* ---- sampling and timings --------------------------------------------------- */

static void sampling_deterministic(void **st) {
  (void)st;
  int32_t t[32];
  prompt(t, 24, 5);
  dsv4_engine *e = mk(4, 64, 16, 0, DSV4_ENGINE_F_OP_TIMINGS);
  dsv4_sampling_params sp;
  assert_int_equal(dsv4_sampling_params_init(&sp, sizeof sp), DSV4_OK);
  sp.temperature = 1.5f;
  sp.seed = 42;
  int32_t runs[3][12];
  for (int r = 0; r < 3; r++) {
    const int64_t id = new_seq(e);
    if (r == 2) sp.seed = 43;
    assert_int_equal(dsv4_engine_prefill(e, id, t, 24, &sp, NULL, &runs[r][0]), DSV4_OK);
    for (int k = 0; k < 11; k++) {
      const int32_t in = runs[r][k];
      assert_int_equal(dsv4_engine_decode(e, 1, &id, &in, &sp, NULL, &runs[r][k + 1]), DSV4_OK);
    }
    assert_int_equal(dsv4_engine_seq_free(e, id), DSV4_OK);
  }
  assert_memory_equal(runs[0], runs[1], sizeof runs[0]); /* same seed: same tokens */
  assert_memory_not_equal(runs[0], runs[2], sizeof runs[0]);
  /* per-sequence seeds in one batch: a sequence draws what it draws alone */
  int64_t ids[2] = {new_seq(e), new_seq(e)};
  const uint64_t seeds[2] = {43, 42};
  int32_t next[2];
  for (int j = 0; j < 2; j++) {
    sp.seeds = &seeds[j]; /* prefill: one sequence, seeds[0] */
    assert_int_equal(dsv4_engine_prefill(e, ids[j], t, 24, &sp, NULL, &next[j]), DSV4_OK);
  }
  assert_int_equal(next[0], runs[2][0]);
  assert_int_equal(next[1], runs[0][0]);
  sp.seeds = seeds;
  for (int k = 0; k < 11; k++) {
    const int32_t in[2] = {next[0], next[1]};
    assert_int_equal(dsv4_engine_decode(e, 2, ids, in, &sp, NULL, next), DSV4_OK);
    assert_int_equal(next[0], runs[2][k + 1]);
    assert_int_equal(next[1], runs[0][k + 1]);
  }

  dsv4_engine_timings tm;
  assert_int_equal(dsv4_engine_get_timings(e, &tm, 4), DSV4_ERR_INVALID_ARG);
  assert_int_equal(dsv4_engine_get_timings(e, &tm, sizeof tm), DSV4_OK);
  assert_int_equal(tm.op_timings, 1);
  assert_int_equal(tm.prefill_calls, 5);
  assert_int_equal(tm.prefill_tokens, 5 * 24);
  assert_int_equal(tm.decode_steps, 3 * 11 + 11);
  assert_int_equal(tm.decode_tokens, 3 * 11 + 2 * 11);
  assert_true(tm.prefill_ns > 0 && tm.decode_ns > 0 && tm.last_decode_ns > 0);
  assert_true(tm.block_op_ns > 0 && tm.head_op_ns > 0 && tm.engram_op_ns > 0 && tm.embed_op_ns > 0);
  /* the layers' time (stage_ns) holds the ops and lies within the calls */
  assert_true(tm.stage_ns >= tm.block_op_ns && tm.stage_ns <= tm.prefill_ns + tm.decode_ns);
  /* a caller compiled against the 0.1 struct (it ends at last_verify_ns) gets exactly its bytes */
  const size_t t01 = offsetof(dsv4_engine_timings, stage_ns);
  dsv4_engine_timings t1;
  memset(&t1, 0x5a, sizeof t1);
  assert_int_equal(dsv4_engine_get_timings(e, &t1, t01), DSV4_OK);
  assert_int_equal(t1.struct_size, t01);
  assert_int_equal(t1.decode_steps, tm.decode_steps);
  assert_int_equal(t1.stage_ns, 0x5a5a5a5a5a5a5a5a);
  assert_int_equal(dsv4_engine_get_timings(e, &t1, t01 - 8), DSV4_ERR_INVALID_ARG);
  int64_t lns = 0, sum = 0;
  assert_int_equal(dsv4_engine_get_layer_time(e, 10, &lns), DSV4_ERR_INVALID_ARG);
  for (int32_t L = 0; L < 10; L++) {
    assert_int_equal(dsv4_engine_get_layer_time(e, L, &lns), DSV4_OK);
    assert_true(lns > 0);
    sum += lns;
  }
  assert_int_equal(sum, tm.block_op_ns);
  printf("timings: prefill %.2f ms for %lld tokens; decode %.2f ms per step; blocks %.1f%%\n",
         (double)tm.prefill_ns * 1e-6, (long long)tm.prefill_tokens,
         (double)tm.decode_ns * 1e-6 / (double)tm.decode_steps,
         100.0 * (double)tm.block_op_ns / (double)(tm.prefill_ns + tm.decode_ns));
  dsv4_engine_reset_timings(e);
  assert_int_equal(dsv4_engine_get_timings(e, &tm, sizeof tm), DSV4_OK);
  assert_int_equal(tm.decode_steps, 0);
  assert_true(tm.create_ns > 0);
  dsv4_engine_free(e);
}

int tu_run_suite(void) {
  const struct CMUnitTest tests[] = {
    cmocka_unit_test(params_and_create_errors),
    cmocka_unit_test(chunked_prefill_same),
    cmocka_unit_test(batch_composition_and_order),
    cmocka_unit_test(fork_equals_parent),
    cmocka_unit_test(bad_input),
    cmocka_unit_test(cache_full),
    cmocka_unit_test(sampling_deterministic),
  };
  return cmocka_run_group_tests_name("engine_api", tests, NULL, NULL);
}
