/*
 * Engine end to end against the golden fixtures,
 * through the public engine API (the internal library is linked only to
 * read golden.safetensors).
 *
 * tiny-v41-e2e-a (damped; README "What an engine must meet"):
 *   a, b: last-position prefill logits and every decode step's logits within
 *         0.829 absolute; the 16 greedy tokens equal;
 *   c:    generate.py's batch loop (prefill of both prompts' first min_len
 *         tokens, then one batched decode per position; prompt tokens override
 *         the sampled ones until each prompt is consumed): every step's logits
 *         within 0.829 and the final token buffer equal.
 * tiny-v41-a (chaotic; README "A reference defect inside the decode goldens"):
 *   only the prefill logits of a and b are targets (the decode goldens carry
 *   the reference's stale-index-key defect). Tolerance LOGITS_TOL_A below.
 * fp8_ds_mla: the same greedy runs with the window records in V4's format, against
 *   the native format: the difference printed and bounded (docs/attention.md "KV
 *   formats"), the e2e tokens still the golden ones; an unknown kv_format refused.
 * Every comparison prints its maximum absolute difference.
 * Built twice: here for the CPU backend, and in the gpu suite with
 * DSV4_TEST_CUDA (exit 77 without a usable GPU).
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "test_util.h"

#include "dsv4/dsv4.h"
#include "io/safetensors.h"

#ifdef DSV4_TEST_CUDA
#define DSV4_TEST_BACKEND DSV4_BACKEND_CUDA
#else
#define DSV4_TEST_BACKEND DSV4_BACKEND_CPU
#endif

#define E2E_TOL 0.829f
/* tiny-v41-a prefill logits. (a), 11 tokens inside the window: the engine
 * reproduces the reference to fp32 rounding (observed 1e-6); allowed 1e-3.
 * (b), 96 tokens: teacher-forced, every block agrees with b.block_out up to
 * isolated bf16-ulp differences in a few elements (op-level accumulation
 * order), which this chaotic fixture amplifies through near-tied selections
 * (README "Tolerances observed": the same reference on CUDA differs by up
 * to 13.1). So (b) is a target only for a bit-exact engine; until every op
 * is, the bound is that observed cascade scale and the number is printed
 * (0.58 and 1.88 on two versions of the ops while this was written); the
 * per-layer, teacher-forced check is test_cpu_block. */
#define LOGITS_TOL_A 1e-3f
/* fp8_ds_mla vs native window records (docs/attention.md "KV formats"), max |logit
 * difference| while the greedy tokens agree. tiny-v41-e2e-a: the fixture's own end-to-end
 * tolerance for an implementation difference (E2E_TOL, 4 x the reference's CUDA-vs-CPU
 * delta; observed 0.243 and 0.204 for a and b, all 16 tokens equal and golden).
 * tiny-v41-a (chaotic): the cascade scale its README observed for the reference on CUDA
 * (observed 1.78 and 2.66 on the prefill logits; the first token already differs). */
#define FMT_TOL_E2E E2E_TOL
#define FMT_TOL_SENS LOGITS_TOL_B_SENSITIVE
#define LOGITS_TOL_B_SENSITIVE 13.1f

typedef struct gold {
  dsv4i_st_file f;
  dsv4_engine *e;
  int32_t vocab;
} gold;

static const void *tensor(gold *g, const char *name, int32_t dtype, int64_t *n) {
  const dsv4i_st_tensor *t = dsv4i_st_find(&g->f, name);
  if (!t) fail_msg("golden tensor %s absent", name);
  assert_int_equal(t->dtype, dtype);
  *n = (int64_t)(t->nbytes / dsv4i_dtype_size(dtype));
  return dsv4i_st_data(&g->f, t);
}

static void open_gold_fmt(gold *g, const char *fixture, int32_t chunk, int32_t kv_format) {
  memset(g, 0, sizeof *g);
  const char *dir = tu_fixture_or_skip(fixture);
  char p[4200];
  snprintf(p, sizeof p, "%s/golden.safetensors", dir);
  assert_int_equal(dsv4i_st_open(p, &g->f), DSV4_OK);
  dsv4_engine_params ep;
  assert_int_equal(dsv4_engine_params_init(&ep, sizeof ep), DSV4_OK);
  ep.max_sequences = 2;
  ep.max_context = 256;
  ep.prefill_chunk = chunk;
  ep.backend = DSV4_TEST_BACKEND;
  ep.kv_format = kv_format;
  dsv4_status s = dsv4_engine_create_from_dir(dir, &ep, &g->e);
  if (s) fail_msg("engine: %s: %s", dsv4_status_string(s), dsv4_last_error());
  dsv4_model_info mi;
  assert_int_equal(dsv4_model_get_info(dsv4_engine_model(g->e), &mi, sizeof mi), DSV4_OK);
  g->vocab = mi.vocab_size;
}

static void open_gold(gold *g, const char *fixture, int32_t chunk) {
  open_gold_fmt(g, fixture, chunk, DSV4_KV_FORMAT_NATIVE);
}

static void close_gold(gold *g) {
  dsv4_engine_free(g->e);
  dsv4i_st_close(&g->f);
}

static float max_diff(const float *a, const float *b, int64_t n) {
  float m = 0.0f;
  for (int64_t i = 0; i < n; i++) {
    const float d = fabsf(a[i] - b[i]);
    if (!(d <= m)) m = d; /* NaN propagates */
  }
  return m;
}

static int32_t *ids32(const int64_t *v, int64_t n) {
  int32_t *r = malloc(sizeof *r * (size_t)n);
  assert_non_null(r);
  for (int64_t i = 0; i < n; i++) r[i] = (int32_t)v[i];
  return r;
}

/* One prompt: prefill + greedy decode, compared step by step. n_steps = 0: prefill only. */
static void run_prompt(const char *fixture, const char *p, float tol, int decode, int32_t chunk) {
  gold g;
  open_gold(&g, fixture, chunk);
  char name[64];
  int64_t n_in, n_pl, n_gen = 0, n_dl = 0;
  snprintf(name, sizeof name, "%s.input_ids", p);
  const int64_t *in64 = tensor(&g, name, DSV4_DTYPE_I64, &n_in);
  int32_t *in = ids32(in64, n_in);
  snprintf(name, sizeof name, "%s.prefill_logits", p);
  const float *pl = tensor(&g, name, DSV4_DTYPE_F32, &n_pl);
  assert_int_equal(n_pl, g.vocab);
  float *lg = malloc(sizeof *lg * (size_t)g.vocab);
  assert_non_null(lg);
  int64_t seq;
  int32_t tok = -1;
  assert_int_equal(dsv4_engine_seq_create(g.e, &seq), DSV4_OK);
  dsv4_status s = dsv4_engine_prefill(g.e, seq, in, n_in, NULL, lg, &tok);
  if (s) fail_msg("prefill: %s", dsv4_engine_last_error(g.e));
  const float d0 = max_diff(lg, pl, g.vocab);
  printf("%s %s (chunk %d): prefill logits max |diff| %.6g\n", fixture, p, (int)chunk, (double)d0);
  assert_true(d0 <= tol);
  if (decode) {
    snprintf(name, sizeof name, "%s.gen_tokens", p);
    const int64_t *gen = tensor(&g, name, DSV4_DTYPE_I64, &n_gen);
    snprintf(name, sizeof name, "%s.decode_logits", p);
    const float *dl = tensor(&g, name, DSV4_DTYPE_F32, &n_dl);
    assert_int_equal(n_dl, (n_gen - 1) * g.vocab);
    assert_int_equal(tok, (int32_t)gen[0]);
    float dmax = 0.0f;
    for (int64_t k = 0; k + 1 < n_gen; k++) {
      const int32_t inp = tok;
      s = dsv4_engine_decode(g.e, 1, &seq, &inp, NULL, lg, &tok);
      if (s) fail_msg("decode step %lld: %s", (long long)k, dsv4_engine_last_error(g.e));
      const float d = max_diff(lg, dl + k * g.vocab, g.vocab);
      if (d > dmax) dmax = d;
      if (tok != (int32_t)gen[k + 1] || !(d <= tol))
        fail_msg("%s decode step %lld: token %d (golden %lld), max |diff| %g", p, (long long)k,
                 (int)tok, (long long)gen[k + 1], (double)d);
    }
    printf("%s %s: %lld greedy tokens equal; decode logits max |diff| %.6g\n", fixture, p,
           (long long)n_gen, (double)dmax);
  }
  free(lg);
  free(in);
  close_gold(&g);
}

static void e2e_a(void **st) { (void)st; run_prompt("tiny-v41-e2e-a", "a", E2E_TOL, 1, 256); }
static void e2e_b(void **st) { (void)st; run_prompt("tiny-v41-e2e-a", "b", E2E_TOL, 1, 256); }
static void e2e_b_chunk7(void **st) { (void)st; run_prompt("tiny-v41-e2e-a", "b", E2E_TOL, 1, 7); }
static void sens_a_prefill(void **st) { (void)st; run_prompt("tiny-v41-a", "a", LOGITS_TOL_A, 0, 256); }
static void sens_b_prefill(void **st) {
  (void)st;
  run_prompt("tiny-v41-a", "b", LOGITS_TOL_B_SENSITIVE, 0, 256);
}

/* c.*: generate.py's batch loop with our batched decode. */
static void e2e_c(void **st) {
  (void)st;
  gold g;
  open_gold(&g, "tiny-v41-e2e-a", 256);
  int64_t n_len, n_tok, n_pos, n_lg;
  const int64_t *lens = tensor(&g, "c.prompt_lens", DSV4_DTYPE_I64, &n_len);
  const int64_t *gt = tensor(&g, "c.tokens", DSV4_DTYPE_I64, &n_tok);
  const int64_t *spos = tensor(&g, "c.step_positions", DSV4_DTYPE_I64, &n_pos);
  const float *slg = tensor(&g, "c.step_logits", DSV4_DTYPE_F32, &n_lg);
  assert_int_equal(n_len, 2);
  const int64_t total = n_tok / 2, min_len = lens[0] < lens[1] ? lens[0] : lens[1];
  assert_int_equal(n_pos, total - min_len);
  assert_int_equal(n_lg, n_pos * 2 * g.vocab);
  int32_t *buf = malloc(sizeof *buf * (size_t)n_tok); /* generate.py's token buffer */
  float *lg = malloc(sizeof *lg * 2 * (size_t)g.vocab);
  assert_non_null(buf);
  assert_non_null(lg);
  for (int64_t i = 0; i < n_tok; i++) buf[i] = -1;
  for (int r = 0; r < 2; r++)
    for (int64_t j = 0; j < lens[r]; j++) buf[r * total + j] = (int32_t)gt[r * total + j];
  int64_t seq[2];
  int32_t next[2];
  float dmax = 0.0f;
  for (int r = 0; r < 2; r++) {
    assert_int_equal(dsv4_engine_seq_create(g.e, &seq[r]), DSV4_OK);
    assert_int_equal(dsv4_engine_prefill(g.e, seq[r], buf + r * total, min_len, NULL,
                                         lg + r * g.vocab, &next[r]), DSV4_OK);
  }
  for (int64_t k = 0; k < n_pos; k++) {
    const int64_t cur = spos[k];
    assert_int_equal(cur, min_len + k);
    if (k > 0) {
      const int32_t in[2] = {buf[cur - 1], buf[total + cur - 1]};
      dsv4_status s = dsv4_engine_decode(g.e, 2, seq, in, NULL, lg, next);
      if (s) fail_msg("c step %lld: %s", (long long)k, dsv4_engine_last_error(g.e));
    }
    const float d = max_diff(lg, slg + k * 2 * g.vocab, 2 * g.vocab);
    if (d > dmax) dmax = d;
    if (!(d <= E2E_TOL)) fail_msg("c step %lld: logits max |diff| %g", (long long)k, (double)d);
    for (int r = 0; r < 2; r++) /* prompt tokens override the sampled ones */
      if (cur >= lens[r]) buf[r * total + cur] = next[r];
  }
  for (int64_t i = 0; i < n_tok; i++)
    if (buf[i] != (int32_t)gt[i])
      fail_msg("c.tokens[%lld][%lld]: %d, golden %lld", (long long)(i / total),
               (long long)(i % total), (int)buf[i], (long long)gt[i]);
  printf("tiny-v41-e2e-a c: %lld steps, tokens equal; step logits max |diff| %.6g\n",
         (long long)n_pos, (double)dmax);
  free(buf);
  free(lg);
  close_gold(&g);
}

/* ---- the fp8_ds_mla window format against the native one ---------------------------
 * docs/attention.md "KV formats": the same prompt, greedy, N_FMT tokens on each format's
 * own path; per step the max |logit difference| while the tokens agree, and how many
 * tokens agree. Bounds (FMT_TOL_*) and the observed numbers are in the doc. On
 * tiny-v41-e2e-a the fp8_ds_mla tokens must also be the golden ones (the README's
 * margins make any difference within E2E_TOL unable to flip a token). */
#define N_FMT 16

typedef struct fmt_run {
  int32_t tok[N_FMT];
  float *lg; /* [N_FMT][vocab]: logits that produced tok[k] */
} fmt_run;

static void greedy_fmt(const char *fixture, const char *p, int32_t kv_format, int32_t chunk,
                       fmt_run *r, int32_t *vocab) {
  gold g;
  open_gold_fmt(&g, fixture, chunk, kv_format);
  char name[64];
  int64_t n_in;
  snprintf(name, sizeof name, "%s.input_ids", p);
  const int64_t *in64 = tensor(&g, name, DSV4_DTYPE_I64, &n_in);
  int32_t *in = ids32(in64, n_in);
  dsv4_engine_info info;
  assert_int_equal(dsv4_engine_get_info(g.e, &info, sizeof info), DSV4_OK);
  assert_int_equal(info.kv_format, kv_format);
  *vocab = g.vocab;
  r->lg = malloc(sizeof *r->lg * (size_t)g.vocab * N_FMT);
  assert_non_null(r->lg);
  int64_t seq;
  assert_int_equal(dsv4_engine_seq_create(g.e, &seq), DSV4_OK);
  dsv4_status s = dsv4_engine_prefill(g.e, seq, in, n_in, NULL, r->lg, &r->tok[0]);
  if (s) fail_msg("%s %s format %d prefill: %s", fixture, p, (int)kv_format, dsv4_engine_last_error(g.e));
  for (int k = 1; k < N_FMT; k++) {
    s = dsv4_engine_decode(g.e, 1, &seq, &r->tok[k - 1], NULL, r->lg + (size_t)k * (size_t)g.vocab,
                           &r->tok[k]);
    if (s) fail_msg("%s %s format %d decode %d: %s", fixture, p, (int)kv_format, k,
                    dsv4_engine_last_error(g.e));
  }
  free(in);
  close_gold(&g);
}

/* Returns the max |logit difference| over the steps before the first differing token;
 * *agree: tokens equal before the first difference (N_FMT when all are). */
static float format_diff(const char *fixture, const char *p, int *agree) {
  fmt_run nat, mla;
  int32_t V = 0;
  greedy_fmt(fixture, p, DSV4_KV_FORMAT_NATIVE, 256, &nat, &V);
  greedy_fmt(fixture, p, DSV4_KV_FORMAT_FP8_DS_MLA, 256, &mla, &V);
  if (!strcmp(p, "b")) { /* 96 ids past the 16-slot window: the ring must give back what the
                          * step's own rows read (model/kv_ds_mla.h QDQ), bit for bit */
    fmt_run ch;
    greedy_fmt(fixture, p, DSV4_KV_FORMAT_FP8_DS_MLA, 7, &ch, &V);
    const int same = !memcmp(ch.tok, mla.tok, sizeof ch.tok) &&
                     !memcmp(ch.lg, mla.lg, sizeof *ch.lg * (size_t)V * N_FMT);
    printf("%s %s: fp8_ds_mla, prefill in chunks of 7: tokens and logits %s\n", fixture, p,
           same ? "bit-identical" : "DIFFER");
    assert_true(same);
    free(ch.lg);
  }
  float dmax = 0.0f, d0 = max_diff(nat.lg, mla.lg, V);
  int k = 0;
  for (; k < N_FMT; k++) {
    const float d = max_diff(nat.lg + (size_t)k * (size_t)V, mla.lg + (size_t)k * (size_t)V, V);
    if (!(d <= dmax)) dmax = d;
    if (nat.tok[k] != mla.tok[k]) break;
  }
  *agree = k;
  printf("%s %s: fp8_ds_mla vs native window records: prefill logits max |diff| %.6g; "
         "%d of %d greedy tokens agree%s; logits max |diff| over those steps %.6g\n", fixture, p,
         (double)d0, k, N_FMT, k < N_FMT ? " (then the paths part)" : "", (double)dmax);
  if (!strcmp(fixture, "tiny-v41-e2e-a")) { /* fp8_ds_mla tokens == the golden ones */
    gold g;
    open_gold(&g, fixture, 256);
    char name[64];
    int64_t n_gen;
    snprintf(name, sizeof name, "%s.gen_tokens", p);
    const int64_t *gen = tensor(&g, name, DSV4_DTYPE_I64, &n_gen);
    assert_int_equal(n_gen, N_FMT);
    for (int t = 0; t < N_FMT; t++)
      if (mla.tok[t] != (int32_t)gen[t])
        fail_msg("%s %s fp8_ds_mla token %d: %d, golden %lld", fixture, p, t, (int)mla.tok[t],
                 (long long)gen[t]);
    close_gold(&g);
  }
  free(nat.lg);
  free(mla.lg);
  return dmax;
}

static void fmt_e2e(void **st) {
  (void)st;
  int agree;
  const float da = format_diff("tiny-v41-e2e-a", "a", &agree);
  assert_int_equal(agree, N_FMT);
  const float db = format_diff("tiny-v41-e2e-a", "b", &agree);
  assert_int_equal(agree, N_FMT);
  assert_true(da <= FMT_TOL_E2E && db <= FMT_TOL_E2E);
}

static void fmt_sensitive(void **st) {
  (void)st;
  int agree_a, agree_b;
  const float da = format_diff("tiny-v41-a", "a", &agree_a);
  const float db = format_diff("tiny-v41-a", "b", &agree_b);
  assert_true(da <= FMT_TOL_SENS && db <= FMT_TOL_SENS);
  (void)agree_a, (void)agree_b; /* printed: near-tied decisions part at once (see above) */
}

/* An unknown kv_format is refused with its value named; nothing is created. */
static void fmt_bad(void **st) {
  (void)st;
  const char *dir = tu_fixture_or_skip("tiny-v41-e2e-a");
  const int32_t bad[] = {-1, 2, 584};
  for (int i = 0; i < 3; i++) {
    dsv4_engine_params ep;
    assert_int_equal(dsv4_engine_params_init(&ep, sizeof ep), DSV4_OK);
    assert_int_equal(ep.kv_format, DSV4_KV_FORMAT_NATIVE);
    ep.backend = DSV4_TEST_BACKEND;
    ep.kv_format = bad[i];
    dsv4_engine *e = (dsv4_engine *)1;
    assert_int_equal(dsv4_engine_create_from_dir(dir, &ep, &e), DSV4_ERR_INVALID_ARG);
    assert_null(e);
    assert_non_null(strstr(dsv4_last_error(), "kv_format"));
  }
}

int tu_run_suite(void) {
  if (DSV4_TEST_BACKEND != DSV4_BACKEND_CPU && dsv4_backend_probe(DSV4_TEST_BACKEND, 0) != DSV4_OK) {
    printf("skip: backend %d is not usable here: %s\n", (int)DSV4_TEST_BACKEND, dsv4_last_error());
    return 77;
  }
  const struct CMUnitTest tests[] = {
    cmocka_unit_test(e2e_a),
    cmocka_unit_test(e2e_b),
    cmocka_unit_test(e2e_b_chunk7),
    cmocka_unit_test(e2e_c),
    cmocka_unit_test(sens_a_prefill),
    cmocka_unit_test(sens_b_prefill),
    cmocka_unit_test(fmt_e2e),
    cmocka_unit_test(fmt_sensitive),
    cmocka_unit_test(fmt_bad),
  };
  return cmocka_run_group_tests_name("engine_golden", tests, NULL, NULL);
}
