/*
 * Speculative decoding with DSpark, on the fixtures:
 *
 * golden_e2e      tiny-v41-e2e-a, prompt (b): the DSpark draft after the
 *                 prefill and after every decode step against dspark.*
 *                 (README tolerances: draft ids exactly; base logits, logits
 *                 = base + Markov and the Markov bias within 0.829;
 *                 confidence within 0.489; main_hidden within 0.281), with
 *                 the decode steps done by dsv4_engine_decode, by verify
 *                 without drafts and by verify with one draft, and after a
 *                 prefill in chunks of 7. First, on both fixtures, the draft
 *                 head alone teacher-forced (rings from the golden streams):
 *                 base logits bit-exact, the rest to fp32 rounding.
 * greedy_equal_*  temperature 0, 64 tokens of prompts a, b, c0, c1 on both
 *                 fixtures: speculative generation (draft + verify, draft
 *                 lengths cycling 1..B; on tiny-v41-e2e-a also every fixed
 *                 length 1..B) token for token equal to plain greedy, and
 *                 the next-token logits of the speculative sequence bit-equal
 *                 to a plain sequence fed the same tokens (exact rollback);
 *                 again after a prefill in chunks of 5. Prints the
 *                 acceptance statistics.
 * shuffled_batch  sampled and greedy drafts, sampled verification,
 *                 per-sequence seeds: random batch subsets in random orders
 *                 change no sequence's tokens.
 * *_ds_mla        greedy_equal (both fixtures) and shuffled_batch with the
 *                 fp8_ds_mla window records (kv_format).
 * distribution    temperature > 0: the tokens speculative decoding emits
 *                 have the target's distribution (chi-square bound below).
 * api_errors      argument errors change nothing; context overflow; the
 *                 draft-length policy.
 *
 * Unit test (internal library): it reads the golden tensors and the draft
 * head's base logits through lib internals; everything else is public API.
 * Built again in the gpu suite with DSV4_TEST_CUDA:
 * there every test but golden_e2e (which reads the CPU backend's internals)
 * runs on the CUDA backend; exit 77 without a usable GPU.
 * Engines run one thread: these steps are small, and OpenMP barriers on a
 * busy 2-core CI cost more than they save.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "test_util.h"

#include "cpu/cpu_backend.h"
#include "cpu/cpu_dspark.h"
#include "dsv4/dsv4.h"
#include "engine/engine.h"
#include "io/safetensors.h"
#include "model/formats.h"

#define TOL_LOGITS 0.829
#define TOL_CONF 0.489
#define TOL_MAIN_HIDDEN 0.281

/* ---- fixture plumbing --------------------------------------------------- */

#define FX_COPIES 64

typedef struct fx {
  dsv4i_st_file g;
  dsv4_engine *e;
  int32_t V, B;
  const char *name;
  void *copy[FX_COPIES]; /* aligned copies of golden tensors, freed by close_fx */
  int n_copy;
} fx;

/* A golden tensor (n elements, or any count with n < 0), copied to aligned memory. */
static const void *golden(fx *f, const char *name, int32_t dtype, int64_t n) {
  const dsv4i_st_tensor *t = dsv4i_st_find(&f->g, name);
  if (!t) fail_msg("%s: golden %s absent", f->name, name);
  if (t->dtype != dtype || (n >= 0 && t->nbytes != (uint64_t)n * dsv4i_dtype_size(dtype)))
    fail_msg("%s: golden %s dtype/size", f->name, name);
  assert_true(f->n_copy < FX_COPIES);
  void *c = malloc(t->nbytes ? t->nbytes : 1);
  assert_non_null(c);
  memcpy(c, dsv4i_st_data(&f->g, t), t->nbytes);
  return f->copy[f->n_copy++] = c;
}

#ifdef DSV4_TEST_CUDA
#define DSV4_TEST_BACKEND DSV4_BACKEND_CUDA
#else
#define DSV4_TEST_BACKEND DSV4_BACKEND_CPU
#endif

/* Window record format of the engines open_fx creates (the *_ds_mla tests set it). */
static int32_t g_kv_format = DSV4_KV_FORMAT_NATIVE;

static void open_fx(fx *f, const char *name, int32_t max_seqs, int32_t chunk) {
  memset(f, 0, sizeof *f);
  f->name = name;
  const char *dir = tu_fixture_or_skip(name);
  char p[4200];
  snprintf(p, sizeof p, "%s/golden.safetensors", dir);
  assert_int_equal(dsv4i_st_open(p, &f->g), DSV4_OK);
  dsv4_engine_params ep;
  assert_int_equal(dsv4_engine_params_init(&ep, sizeof ep), DSV4_OK);
  ep.max_sequences = max_seqs;
  ep.max_context = 256;
  ep.prefill_chunk = chunk;
  ep.n_threads = 1;
  ep.backend = DSV4_TEST_BACKEND;
  ep.kv_format = g_kv_format;
  dsv4_status s = dsv4_engine_create_from_dir(dir, &ep, &f->e);
  if (s) fail_msg("engine: %s: %s", dsv4_status_string(s), dsv4_last_error());
  dsv4_model_info mi;
  assert_int_equal(dsv4_model_get_info(dsv4_engine_model(f->e), &mi, sizeof mi), DSV4_OK);
  f->V = mi.vocab_size;
  f->B = mi.dspark_block_size;
  assert_true(f->B >= 1 && f->B <= 8);
}

static void close_fx(fx *f) {
  for (int i = 0; i < f->n_copy; i++) free(f->copy[i]);
  dsv4_engine_free(f->e);
  dsv4i_st_close(&f->g);
}

static double max_abs(const float *a, const float *b, size_t n) {
  double m = 0;
  for (size_t i = 0; i < n; i++) {
    const double d = fabs((double)a[i] - (double)b[i]);
    m = d > m || d != d ? (d != d ? INFINITY : d) : m;
  }
  return m;
}

/* int64 golden ids -> int32 */
static int32_t *ids32(const int64_t *src, int64_t n) {
  int32_t *d = malloc(sizeof *d * (size_t)n);
  for (int64_t i = 0; i < n; i++) d[i] = (int32_t)src[i];
  return d;
}

/* ---- golden DSpark outputs ----------------------------------------------- */

typedef struct gmax {
  double base, logits, bias, conf;
} gmax;

/* The golden draft outputs of one group ("dspark.prefill": 1 row,
 * "dspark.decode": 15 rows). */
typedef struct gdraft {
  const int64_t *ids, *pos;
  const float *base, *logits, *conf;
} gdraft;

static void load_gdraft(fx *f, const char *pre, int64_t rows, gdraft *g) {
  const int64_t B = f->B, V = f->V;
  char nm[96];
  snprintf(nm, sizeof nm, "%s.ids", pre);
  g->ids = golden(f, nm, DSV4_DTYPE_I64, rows * (B + 1));
  snprintf(nm, sizeof nm, "%s.pos", pre);
  g->pos = golden(f, nm, DSV4_DTYPE_I64, rows);
  snprintf(nm, sizeof nm, "%s.base_logits", pre);
  g->base = golden(f, nm, DSV4_DTYPE_F32, rows * B * V);
  snprintf(nm, sizeof nm, "%s.logits", pre);
  g->logits = golden(f, nm, DSV4_DTYPE_F32, rows * B * V);
  snprintf(nm, sizeof nm, "%s.confidence", pre);
  g->conf = golden(f, nm, DSV4_DTYPE_F32, rows * B);
}

/* One draft of sequence id (anchor a) through the backend with every output,
 * and the public call; compares with row r of the golden group g. */
static void check_draft(fx *f, int64_t id, int32_t a, const gdraft *g, int32_t r, gmax *m,
                        int32_t *pub) {
  struct dsv4_engine *e = f->e;
  const int32_t B = f->B, V = f->V;
  dsv4_status st;
  dsv4i_seq *q = dsv4i_seq_find(e, id, &st);
  assert_non_null(q);
  const int64_t *gid = g->ids + r * (B + 1), *gpos = g->pos + r;
  const float *gbase = g->base + (size_t)r * B * V, *glog = g->logits + (size_t)r * B * V;
  const float *gconf = g->conf + r * B;
  assert_int_equal(gid[0], a);
  assert_int_equal(gpos[0], q->len - 1);

  int32_t drafts[8];
  float conf[8], pconf[8];
  float *base = malloc(sizeof *base * (size_t)(B * V)), *lg = malloc(sizeof *lg * (size_t)(B * V));
  const dsv4i_sample_req req = {0.0f, 0, 0, 0};
  const dsv4i_dspark_out out = {drafts, conf, lg, base};
  const int64_t pos = q->len - 1;
  dsv4i_kv_step kv;
  assert_int_equal(dsv4i_kv_step_table(&e->kv, 1, &q->slot, NULL, &kv), DSV4_OK);
  assert_int_equal(dsv4i_cpu_dspark_draft((cpu_backend *)e->be, &kv, &pos, &a, NULL, &req, &out),
                   DSV4_OK);
  for (int32_t k = 0; k < B; k++) assert_int_equal(drafts[k], gid[k + 1]);
  const double db = max_abs(base, gbase, (size_t)(B * V)), dl = max_abs(lg, glog, (size_t)(B * V));
  const double dc = max_abs(conf, gconf, (size_t)B);
  double dm = 0; /* the Markov bias, logits - base */
  for (int32_t j = 0; j < B * V; j++)
    dm = fmax(dm, fabs(((double)lg[j] - base[j]) - ((double)glog[j] - gbase[j])));
  m->bias = fmax(m->bias, dm);
  m->base = fmax(m->base, db);
  m->logits = fmax(m->logits, dl);
  m->conf = fmax(m->conf, dc);
  assert_true(db <= TOL_LOGITS && dl <= TOL_LOGITS && dm <= TOL_LOGITS && dc <= TOL_CONF);
  /* the public call gives the same drafts and confidence */
  assert_int_equal(dsv4_engine_draft(f->e, 1, &id, &a, NULL, pub, pconf), DSV4_OK);
  assert_memory_equal(pub, drafts, sizeof *pub * (size_t)B);
  assert_memory_equal(pconf, conf, sizeof *conf * (size_t)B);
  free(base);
  free(lg);
}

/* mode 0: decode steps with dsv4_engine_decode; 1: with verify (no drafts);
 * 2: verify with the golden drafts (greedy accepts the planted first one) */
static void golden_run(int32_t chunk, int mode) {
  fx f;
  open_fx(&f, "tiny-v41-e2e-a", 2, chunk);
  const int64_t *bin = golden(&f, "b.input_ids", DSV4_DTYPE_I64, 96);
  const int64_t *gen = golden(&f, "b.gen_tokens", DSV4_DTYPE_I64, 16);
  const float *gmh = golden(&f, "dspark.prefill.main_hidden", DSV4_DTYPE_F32, -1);
  gdraft gp, gd;
  load_gdraft(&f, "dspark.prefill", 1, &gp);
  load_gdraft(&f, "dspark.decode", 15, &gd);
  int32_t *prompt = ids32(bin, 96);
  int64_t id;
  assert_int_equal(dsv4_engine_seq_create(f.e, &id), DSV4_OK);
  int32_t a = -1;
  assert_int_equal(dsv4_engine_prefill(f.e, id, prompt, 96, NULL, NULL, &a), DSV4_OK);
  assert_int_equal(a, gen[0]);
  /* main_hidden of the last prompt position: the taps of the prefill's last step */
  struct dsv4_engine *e = f.e;
  const dsv4i_config *c = e->cfg;
  const int64_t last = (96 - 1) % e->plan.chunk;
  const uint16_t *tap = (const uint16_t *)e->taps.impl + (size_t)last * c->n_dspark_targets * c->dim;
  double dmh = 0;
  for (int32_t j = 0; j < c->n_dspark_targets * c->dim; j++)
    dmh = fmax(dmh, fabs((double)dsv4i_bf16_to_f32(tap[j]) - gmh[j]));
  assert_true(dmh <= TOL_MAIN_HIDDEN);
  gmax m = {0, 0, 0, 0};
  int32_t d[8];
  check_draft(&f, id, a, &gp, 0, &m, d);
  const gmax mp = m;
  m = (gmax){0, 0, 0, 0};
  int32_t acc_total = 0;
  for (int32_t s = 0; s < 15; s++) {
    int32_t next = -1, acc = 0;
    if (mode == 0) {
      assert_int_equal(dsv4_engine_decode(f.e, 1, &id, &a, NULL, NULL, &next), DSV4_OK);
    } else {
      const int32_t nd = mode == 2 && s + 1 < 15; /* the draft of this anchor, first one only */
      assert_int_equal(dsv4_engine_verify(f.e, 1, &id, &a, &nd, d, NULL, &acc, &next), DSV4_OK);
      acc_total += acc;
    }
    if (acc == 0) {
      assert_int_equal(next, gen[s + 1]);
      a = next;
      check_draft(&f, id, a, &gd, s, &m, d);
    } else { /* accepted the planted successor gen[s+1]: the anchor moved on by one */
      assert_int_equal(acc, 1);
      assert_int_equal(next, gen[s + 2]);
      a = next;
      s++;
      check_draft(&f, id, a, &gd, s, &m, d);
    }
  }
  printf("    chunk %d, decode steps by %s: main_hidden max |diff| %.3g; prefill draft: ids "
         "equal, base %.3g, logits %.3g, Markov bias %.3g, confidence %.3g; after every decode "
         "step: ids equal, base %.3g, logits %.3g, Markov bias %.3g, confidence %.3g\n",
         (int)e->plan.chunk, mode == 0 ? "decode" : mode == 1 ? "verify (no drafts)" :
         "verify (1 draft)", dmh, mp.base, mp.logits, mp.bias, mp.conf, m.base, m.logits, m.bias,
         m.conf);
  if (mode == 2) printf("    (verify with the golden first drafts accepted %d of them)\n", (int)acc_total);
  /* the engine's own draft / verify timers count exactly these calls */
  dsv4_engine_timings tm;
  assert_int_equal(dsv4_engine_get_timings(f.e, &tm, sizeof tm), DSV4_OK);
  assert_true(tm.draft_calls >= 1 && tm.draft_seqs == tm.draft_calls && tm.draft_ns > 0);
  if (mode == 0) {
    assert_int_equal(tm.verify_calls, 0);
  } else {
    assert_true(tm.verify_calls >= 1 && tm.verify_ns > 0 && tm.last_verify_ns > 0);
    assert_int_equal(tm.verify_accepted, acc_total);
    assert_true(tm.verify_tokens >= tm.verify_calls);
  }
  free(prompt);
  close_fx(&f);
}

/* ---- speculative greedy == plain greedy --------------------------------- */

#define N_PROMPTS 4
#define N_GEN 64

typedef struct prompts {
  int32_t *tok[N_PROMPTS];
  int64_t len[N_PROMPTS];
} prompts;

/* a.input_ids, b.input_ids and the two prompts of c (c.tokens rows, c.prompt_lens). */
static void load_prompts(fx *f, prompts *p) {
  const int64_t *a = golden(f, "a.input_ids", DSV4_DTYPE_I64, -1);
  const int64_t *b = golden(f, "b.input_ids", DSV4_DTYPE_I64, -1);
  const dsv4i_st_tensor *tc = dsv4i_st_find(&f->g, "c.tokens");
  assert_non_null(tc);
  const int64_t *c = golden(f, "c.tokens", DSV4_DTYPE_I64, -1);
  const int64_t *cl = golden(f, "c.prompt_lens", DSV4_DTYPE_I64, 2);
  p->len[0] = (int64_t)(dsv4i_st_find(&f->g, "a.input_ids")->nbytes / 8);
  p->len[1] = (int64_t)(dsv4i_st_find(&f->g, "b.input_ids")->nbytes / 8);
  p->len[2] = cl[0];
  p->len[3] = cl[1];
  p->tok[0] = ids32(a, p->len[0]);
  p->tok[1] = ids32(b, p->len[1]);
  p->tok[2] = ids32(c, p->len[2]);
  p->tok[3] = ids32(c + tc->shape[1], p->len[3]);
}

static void free_prompts(prompts *p) {
  for (int i = 0; i < N_PROMPTS; i++) free(p->tok[i]);
}

/* Acceptance statistics of one draft length. */
typedef struct accst {
  int64_t steps, tokens, verified[8], accepted[8];
} accst;

static void acc_add(accst *st, int32_t n, int32_t acc) {
  st->steps++;
  st->tokens += acc + 1;
  for (int32_t k = 0; k < n && k <= acc; k++) {
    st->verified[k]++;
    st->accepted[k] += k < acc;
  }
}

static void acc_print(const accst *st, int32_t L) {
  printf("      draft length %d: %lld verify steps, mean acceptance length %.2f; accepted per "
         "position:", (int)L, (long long)st->steps,
         st->steps ? (double)st->tokens / (double)st->steps : 0.0);
  for (int32_t k = 0; k < L; k++)
    printf(" %lld/%lld", (long long)st->accepted[k], (long long)st->verified[k]);
  printf("\n");
}

/* Plain greedy: prefill + N_GEN - 1 batched decode steps; out[p][0..N_GEN);
 * the sequences stay in ids[] (holding prompt + N_GEN - 1 positions). */
static void plain_greedy(fx *f, const prompts *pr, int32_t out[N_PROMPTS][N_GEN],
                         int64_t ids[N_PROMPTS]) {
  for (int p = 0; p < N_PROMPTS; p++) {
    assert_int_equal(dsv4_engine_seq_create(f->e, &ids[p]), DSV4_OK);
    assert_int_equal(dsv4_engine_prefill(f->e, ids[p], pr->tok[p], pr->len[p], NULL, NULL,
                                         &out[p][0]), DSV4_OK);
  }
  for (int t = 1; t < N_GEN; t++) {
    int32_t in[N_PROMPTS], nx[N_PROMPTS];
    for (int p = 0; p < N_PROMPTS; p++) in[p] = out[p][t - 1];
    assert_int_equal(dsv4_engine_decode(f->e, N_PROMPTS, ids, in, NULL, NULL, nx), DSV4_OK);
    for (int p = 0; p < N_PROMPTS; p++) out[p][t] = nx[p];
  }
}

/* One speculative sequence of a greedy run: its prompt and its draft length
 * (1..B fixed, or 0: cycling through 1..B from round to round). */
typedef struct gseq {
  int prompt, len;
} gseq;

/* Speculative greedy generation of the sequences sq[0..ns) in one batch
 * (forks of one prefilled sequence per prompt) until each has N_GEN tokens;
 * each must equal plain greedy (ref). With plain (the plain_greedy
 * sequences), the caches are compared too: a fork of the plain sequence fed
 * the same tokens by decode steps and the speculative sequence give the same
 * next-token logits bit for bit (so the rollbacks left nothing behind).
 * Returns how many sequences differ. */
static int spec_greedy(fx *f, const prompts *pr, const gseq *sq, int32_t ns,
                       int32_t ref[N_PROMPTS][N_GEN], const int64_t *plain, accst st[8]) {
  const int32_t B = f->B;
  int64_t id[16], root[N_PROMPTS] = {0};
  int32_t gen[16][N_GEN + 8], ng[16], anchor[16], a0[N_PROMPTS];
  assert_true(ns <= 16);
  for (int32_t i = 0; i < ns; i++) {
    const int p = sq[i].prompt;
    if (!root[p]) {
      assert_int_equal(dsv4_engine_seq_create(f->e, &id[i]), DSV4_OK);
      assert_int_equal(dsv4_engine_prefill(f->e, id[i], pr->tok[p], pr->len[p], NULL, NULL, &a0[p]),
                       DSV4_OK);
      root[p] = id[i];
    } else {
      assert_int_equal(dsv4_engine_seq_fork(f->e, root[p], &id[i]), DSV4_OK);
    }
    gen[i][0] = anchor[i] = a0[p];
    ng[i] = 1;
  }
  for (int32_t step = 0;; step++) {
    int64_t bid[16];
    int32_t ba[16], bn[16], bs[16], d[16 * 8], acc[16], nx[16], m = 0;
    for (int32_t i = 0; i < ns; i++)
      if (ng[i] < N_GEN) {
        bid[m] = id[i], ba[m] = anchor[i], bs[m] = i;
        bn[m++] = sq[i].len > 0 ? sq[i].len : (step + i) % B + 1;
      }
    if (m == 0) break;
    assert_int_equal(dsv4_engine_draft(f->e, m, bid, ba, NULL, d, NULL), DSV4_OK);
    assert_int_equal(dsv4_engine_verify(f->e, m, bid, ba, bn, d, NULL, acc, nx), DSV4_OK);
    for (int32_t r = 0; r < m; r++) {
      const int32_t i = bs[r];
      assert_true(acc[r] >= 0 && acc[r] <= bn[r]);
      for (int32_t k = 0; k < acc[r]; k++) gen[i][ng[i]++] = d[r * B + k];
      gen[i][ng[i]++] = anchor[i] = nx[r];
      acc_add(&st[bn[r] - 1], bn[r], acc[r]);
    }
  }
  int differ = 0;
  for (int32_t i = 0; i < ns; i++) {
    const int p = sq[i].prompt;
    int64_t len = 0;
    assert_int_equal(dsv4_engine_seq_length(f->e, id[i], &len), DSV4_OK);
    assert_int_equal(len, pr->len[p] + ng[i] - 1); /* the last anchor is not fed yet */
    int same = 1;
    for (int t = 0; t < N_GEN && same; t++)
      if (gen[i][t] != ref[p][t]) {
        printf("    prompt %d, draft length %d: token %d is %d, plain greedy %d\n", p,
               (int)sq[i].len, t, (int)gen[i][t], (int)ref[p][t]);
        same = 0;
      }
    if (same && plain) {
      int64_t c;
      float *l1 = malloc(sizeof *l1 * (size_t)f->V), *l2 = malloc(sizeof *l2 * (size_t)f->V);
      assert_int_equal(dsv4_engine_seq_fork(f->e, plain[p], &c), DSV4_OK);
      for (int32_t t = N_GEN - 1; t < ng[i] - 1; t++)
        assert_int_equal(dsv4_engine_decode(f->e, 1, &c, &gen[i][t], NULL, NULL, NULL), DSV4_OK);
      assert_int_equal(dsv4_engine_decode(f->e, 1, &c, &anchor[i], NULL, l1, NULL), DSV4_OK);
      assert_int_equal(dsv4_engine_decode(f->e, 1, &id[i], &anchor[i], NULL, l2, NULL), DSV4_OK);
      if (memcmp(l1, l2, sizeof *l1 * (size_t)f->V)) {
        printf("    prompt %d, draft length %d: next-token logits differ from plain decoding's\n",
               p, (int)sq[i].len);
        same = 0;
      }
      assert_int_equal(dsv4_engine_seq_free(f->e, c), DSV4_OK);
      free(l1), free(l2);
    }
    differ += !same;
    assert_int_equal(dsv4_engine_seq_free(f->e, id[i]), DSV4_OK);
  }
  return differ;
}

/* Plain greedy once; then speculative greedy (a) with the default prefill:
 * every prompt with its draft length cycling through 1..B round by round,
 * and with `fixed` prompt c1 (40 ids, past the window) with every fixed
 * draft length 1..B; (b) after a prefill in chunks of 5 (the rings are then
 * seeded chunk by chunk): the prompts `chunked` (bit p = prompt p), draft
 * lengths cycling. */
static void greedy_equal(const char *fixture, int fixed, unsigned chunked) {
  fx f;
  open_fx(&f, fixture, 16, 0);
  const int32_t B = f.B;
  prompts pr;
  load_prompts(&f, &pr);
  int32_t ref[N_PROMPTS][N_GEN];
  int64_t plain[N_PROMPTS];
  plain_greedy(&f, &pr, ref, plain);
  gseq sq[16];
  int32_t ns = 0;
  for (int p = 0; p < N_PROMPTS; p++) sq[ns++] = (gseq){p, 0};
  for (int32_t L = 1; fixed && L <= B; L++) sq[ns++] = (gseq){3, L};
  accst st[8];
  memset(st, 0, sizeof st);
  int differ = spec_greedy(&f, &pr, sq, ns, ref, plain, st);
  printf("    %s: prompts a, b, c0, c1 (%lld, %lld, %lld, %lld ids) with draft lengths cycling "
         "1..%d%s: %d tokens %s plain greedy (and the next logits bit-equal)\n", fixture,
         (long long)pr.len[0], (long long)pr.len[1], (long long)pr.len[2], (long long)pr.len[3],
         (int)B, fixed ? ", and c1 with each fixed length" : "", N_GEN,
         differ ? "DIFFERENT FROM" : "equal to");
  for (int32_t L = 1; L <= B; L++) acc_print(&st[L - 1], L);
  assert_int_equal(differ, 0);
  close_fx(&f);
  open_fx(&f, fixture, N_PROMPTS, 5);
  ns = 0;
  for (int p = 0; p < N_PROMPTS; p++)
    if (chunked & (1u << p)) sq[ns++] = (gseq){p, 0};
  memset(st, 0, sizeof st);
  differ = spec_greedy(&f, &pr, sq, ns, ref, NULL, st);
  printf("    %s, prefill in chunks of 5, %d prompt(s), draft lengths cycling 1..%d: %d tokens %s "
         "plain greedy\n", fixture, (int)ns, (int)B, N_GEN, differ ? "DIFFERENT FROM" : "equal to");
  assert_int_equal(differ, 0);
  free_prompts(&pr);
  close_fx(&f);
}

static void greedy_equal_e2e(void **state) {
  (void)state;
  greedy_equal("tiny-v41-e2e-a", 1, 0xf);
}

/* The chaotic fixture: near-tied decisions everywhere, so any numerical
 * difference between a verify row and a decode row would show. Chunked
 * prefill on prompt (b), the longest. */
static void greedy_equal_chaotic(void **state) {
  (void)state;
  greedy_equal("tiny-v41-a", 0, 0x2);
}

/* The same with the fp8_ds_mla window records (dsv4_engine_params.kv_format): the
 * draft stages' rings, verify's rollback and the chunked rings read and write the
 * other record; speculative must still equal plain greedy in that format. */
static void greedy_equal_ds_mla(void **state) {
  (void)state;
  g_kv_format = DSV4_KV_FORMAT_FP8_DS_MLA;
  greedy_equal("tiny-v41-e2e-a", 1, 0xf);
  greedy_equal("tiny-v41-a", 0, 0x2);
  g_kv_format = DSV4_KV_FORMAT_NATIVE;
}

/* ---- batch order and composition --------------------------------------- */

#define SH_SEQS 6
#define SH_ROUNDS 10

static uint64_t lcg(uint64_t *x) {
  *x = *x * UINT64_C(6364136223846793005) + UINT64_C(1442695040888963407);
  return *x >> 33;
}

/* Sampled drafts and sampled verification with per-sequence seeds and draft
 * lengths following each sequence's own round count. shuffle 0: every
 * sequence in a fixed order every round; 1: a random subset in a random
 * order each round. out[s][..] gets each sequence's emitted tokens. */
static void spec_rounds(fx *f, const prompts *pr, int shuffle, int32_t out[SH_SEQS][SH_ROUNDS * 8 + 1]) {
  const int32_t B = f->B;
  int64_t id[SH_SEQS];
  int32_t anchor[SH_SEQS], rounds[SH_SEQS], no[SH_SEQS];
  uint64_t seed[SH_SEQS];
  dsv4_sampling_params sp;
  assert_int_equal(dsv4_sampling_params_init(&sp, sizeof sp), DSV4_OK);
  sp.temperature = 1.5f;
  for (int s = 0; s < SH_SEQS; s++) { /* prompts a, b, c0, c1, then forks of b and c1 */
    seed[s] = 1000u + 77u * (uint64_t)s;
    if (s < N_PROMPTS) {
      assert_int_equal(dsv4_engine_seq_create(f->e, &id[s]), DSV4_OK);
      sp.seeds = &seed[s];
      assert_int_equal(dsv4_engine_prefill(f->e, id[s], pr->tok[s], pr->len[s], &sp, NULL,
                                           &anchor[s]), DSV4_OK);
    } else {
      const int par = s == 4 ? 1 : 3;
      assert_int_equal(dsv4_engine_seq_fork(f->e, id[par], &id[s]), DSV4_OK);
      anchor[s] = (anchor[par] + 1) % f->V; /* a different continuation */
    }
    out[s][0] = anchor[s];
    no[s] = 1;
    rounds[s] = 0;
  }
  uint64_t rng = 12345;
  for (;;) {
    int32_t perm[SH_SEQS], m = 0;
    for (int s = 0; s < SH_SEQS; s++)
      if (rounds[s] < SH_ROUNDS && (!shuffle || lcg(&rng) % 10 < 7)) perm[m++] = s;
    int left = 0;
    for (int s = 0; s < SH_SEQS; s++) left += rounds[s] < SH_ROUNDS;
    if (!left) break;
    if (m == 0) continue;
    for (int32_t r = m - 1; shuffle && r > 0; r--) { /* Fisher-Yates */
      const int32_t j = (int32_t)(lcg(&rng) % (uint64_t)(r + 1)), t = perm[r];
      perm[r] = perm[j], perm[j] = t;
    }
    int64_t bid[SH_SEQS];
    uint64_t bseed[SH_SEQS];
    int32_t ba[SH_SEQS], bn[SH_SEQS], d[SH_SEQS * 8], acc[SH_SEQS], nx[SH_SEQS];
    for (int32_t r = 0; r < m; r++) {
      const int s = perm[r];
      bid[r] = id[s], ba[r] = anchor[s], bseed[r] = seed[s];
      bn[r] = (s + rounds[s]) % (B + 1); /* 0 (a plain step) .. B */
    }
    sp.seeds = bseed;
    assert_int_equal(dsv4_engine_draft(f->e, m, bid, ba, &sp, d, NULL), DSV4_OK);
    for (int32_t r = 0; r < m; r++) /* now and then a greedy draft of the sequence instead */
      if ((perm[r] + rounds[perm[r]]) % 3 == 2)
        assert_int_equal(dsv4_engine_draft(f->e, 1, &bid[r], &ba[r], NULL, d + r * B, NULL), DSV4_OK);
    assert_int_equal(dsv4_engine_verify(f->e, m, bid, ba, bn, d, &sp, acc, nx), DSV4_OK);
    for (int32_t r = 0; r < m; r++) {
      const int s = perm[r];
      for (int32_t k = 0; k < acc[r]; k++) out[s][no[s]++] = d[r * B + k];
      out[s][no[s]++] = anchor[s] = nx[r];
      rounds[s]++;
    }
  }
  for (int s = 0; s < SH_SEQS; s++) {
    for (int t = no[s]; t < SH_ROUNDS * 8 + 1; t++) out[s][t] = -1;
    assert_int_equal(dsv4_engine_seq_free(f->e, id[s]), DSV4_OK);
  }
}

static void shuffled_batch(void **state) {
  (void)state;
  fx f;
  open_fx(&f, "tiny-v41-e2e-a", SH_SEQS, 0);
  prompts pr;
  load_prompts(&f, &pr);
  static int32_t a[SH_SEQS][SH_ROUNDS * 8 + 1], b[SH_SEQS][SH_ROUNDS * 8 + 1];
  spec_rounds(&f, &pr, 0, a);
  spec_rounds(&f, &pr, 1, b);
  int64_t n = 0;
  for (int s = 0; s < SH_SEQS; s++)
    for (int t = 0; t < SH_ROUNDS * 8 + 1 && a[s][t] >= 0; t++) n++;
  printf("    %d sequences x %d rounds (T 1.5, sampled and greedy drafts, lengths 0..%d): "
         "%lld tokens, %s with random batch subsets and orders\n", SH_SEQS, SH_ROUNDS, (int)f.B,
         (long long)n, memcmp(a, b, sizeof a) ? "DIFFERENT" : "identical");
  assert_memory_equal(a, b, sizeof a);
  free_prompts(&pr);
  close_fx(&f);
}

static void shuffled_batch_ds_mla(void **state) {
  g_kv_format = DSV4_KV_FORMAT_FP8_DS_MLA;
  shuffled_batch(state);
  g_kv_format = DSV4_KV_FORMAT_NATIVE;
}

/* ---- temperature > 0: the emitted tokens have the target's distribution ---- */

/*
 * Setting: tiny-v41-e2e-a, prompt (a) prefilled once, anchor = its greedy
 * token a0. Each trial (seed t = 0..N_TRIALS-1) forks that sequence, drafts
 * (greedy, or sampled at DIST_T) and verifies 2 drafts at DIST_T; x1, x2 =
 * the first two tokens emitted after a0 (one more draft + verify when the
 * first verify emitted only one). Exact target laws from plain decoding:
 * p1 = softmax(logits after a0 / T), p2 = softmax(logits after a0, x* / T),
 * x* = argmax p1 (the draft head's first proposal: the accept path). Only
 * trials with x1 = x* need x2.
 *
 * Test: Pearson chi-square of the histogram of x1 (all trials) against p1,
 * and of x2 among the trials with x1 = x* against p2, over bins of the
 * tokens sorted by probability with an expected count >= 20 each (tokens of
 * the tail grouped); df = bins - 1. Bound: the chi-square upper quantile at
 * p = 1e-6 (Wilson-Hilferty: df (1 - 2/(9 df) + 4.753 sqrt(2/(9 df)))^3).
 * A correct rule fails with probability about 1e-6 per comparison (the
 * seeds are fixed, so the outcome is reproducible). Power check: the same
 * x1 histogram of greedy drafts must fail against the law of the common bug
 * "resample from p instead of norm(max(0, p - q)) after a rejection".
 */
#define DIST_T 1.75f
#define N_TRIALS 320
#define TRIAL_BATCH 32

static void softmax_d(const float *l, int32_t V, double T, double *p) {
  double mx = -INFINITY, s = 0;
  for (int32_t v = 0; v < V; v++) mx = l[v] > mx ? l[v] : mx;
  for (int32_t v = 0; v < V; v++) s += p[v] = exp(((double)l[v] - mx) / T);
  for (int32_t v = 0; v < V; v++) p[v] /= s;
}

static void distribution_run(fx *f, int64_t parent, int32_t a0, int sampled_drafts,
                             const double *p1, const double *p2, int32_t xs) {
  const int32_t V = f->V, B = f->B;
  int64_t *c1 = calloc((size_t)V, sizeof *c1), *c2 = calloc((size_t)V, sizeof *c2), n2 = 0;
  dsv4_sampling_params sp;
  assert_int_equal(dsv4_sampling_params_init(&sp, sizeof sp), DSV4_OK);
  sp.temperature = DIST_T;
  int64_t acc_sum = 0, rej = 0;
  for (int32_t t0 = 0; t0 < N_TRIALS; t0 += TRIAL_BATCH) {
    int64_t id[TRIAL_BATCH];
    uint64_t seed[TRIAL_BATCH];
    int32_t an[TRIAL_BATCH], nd[TRIAL_BATCH], d[TRIAL_BATCH * 8], acc[TRIAL_BATCH], nx[TRIAL_BATCH];
    int32_t x1[TRIAL_BATCH], x2[TRIAL_BATCH], m = 0;
    for (int32_t r = 0; r < TRIAL_BATCH; r++) {
      assert_int_equal(dsv4_engine_seq_fork(f->e, parent, &id[r]), DSV4_OK);
      an[r] = a0, nd[r] = 2, seed[r] = 7919u * (uint64_t)(t0 + r) + (uint64_t)sampled_drafts;
    }
    sp.seeds = seed;
    assert_int_equal(dsv4_engine_draft(f->e, TRIAL_BATCH, id, an, sampled_drafts ? &sp : NULL, d,
                                       NULL), DSV4_OK);
    assert_int_equal(dsv4_engine_verify(f->e, TRIAL_BATCH, id, an, nd, d, &sp, acc, nx), DSV4_OK);
    int64_t rid[TRIAL_BATCH];
    uint64_t rseed[TRIAL_BATCH];
    int32_t ridx[TRIAL_BATCH];
    for (int32_t r = 0; r < TRIAL_BATCH; r++) {
      acc_sum += acc[r];
      rej += acc[r] < 2;
      x1[r] = acc[r] >= 1 ? d[r * B] : nx[r];
      x2[r] = acc[r] >= 2 ? d[r * B + 1] : acc[r] == 1 ? nx[r] : -1;
      if (x2[r] < 0 && x1[r] == xs) { /* x2 is needed: one more round from the new anchor */
        ridx[m] = r, rid[m] = id[r], rseed[m] = seed[r], an[m] = nx[r], nd[m++] = 1;
      }
    }
    if (m > 0) {
      sp.seeds = rseed;
      assert_int_equal(dsv4_engine_draft(f->e, m, rid, an, sampled_drafts ? &sp : NULL, d, NULL),
                       DSV4_OK);
      assert_int_equal(dsv4_engine_verify(f->e, m, rid, an, nd, d, &sp, acc, nx), DSV4_OK);
      for (int32_t k = 0; k < m; k++) x2[ridx[k]] = acc[k] >= 1 ? d[k * B] : nx[k];
    }
    for (int32_t r = 0; r < TRIAL_BATCH; r++) {
      c1[x1[r]]++;
      if (x1[r] == xs) c2[x2[r]]++, n2++;
      assert_int_equal(dsv4_engine_seq_free(f->e, id[r]), DSV4_OK);
    }
  }
  int df1, df2, dfb;
  const double s1 = tu_chi2(c1, p1, V, N_TRIALS, &df1), s2 = tu_chi2(c2, p2, V, n2, &df2);
  printf("    %s drafts, T %.2f, %d trials (mean %.2f drafts accepted of 2): x1: chi2 %.1f (df %d, "
         "bound %.1f); x2 | x1 = %d (%lld trials): chi2 %.1f (df %d, bound %.1f)\n",
         sampled_drafts ? "sampled" : "greedy", (double)DIST_T, N_TRIALS,
         (double)acc_sum / N_TRIALS, s1, df1, tu_chi2_bound(df1), (int)xs, (long long)n2, s2, df2,
         tu_chi2_bound(df2));
  assert_true(df1 >= 1 && df2 >= 1 && n2 >= 100);
  assert_true(s1 <= tu_chi2_bound(df1));
  assert_true(s2 <= tu_chi2_bound(df2));
  if (!sampled_drafts) { /* power: the "resample from p" law is rejected */
    double *bug = malloc(sizeof *bug * (size_t)V);
    for (int32_t v = 0; v < V; v++) bug[v] = (1.0 - p1[xs]) * p1[v] + (v == xs ? p1[xs] : 0.0);
    const double sb = tu_chi2(c1, bug, V, N_TRIALS, &dfb);
    printf("      power check: against \"resample from p after a rejection\" chi2 %.1f (bound %.1f)\n",
           sb, tu_chi2_bound(dfb));
    assert_true(sb > tu_chi2_bound(dfb));
    free(bug);
  }
  (void)rej;
  free(c1);
  free(c2);
}

static void distribution(void **state) {
  (void)state;
  fx f;
  open_fx(&f, "tiny-v41-e2e-a", TRIAL_BATCH + 2, 0);
  const int32_t V = f.V;
  prompts pr;
  load_prompts(&f, &pr);
  int64_t par, c;
  int32_t a0, d[8];
  assert_int_equal(dsv4_engine_seq_create(f.e, &par), DSV4_OK);
  assert_int_equal(dsv4_engine_prefill(f.e, par, pr.tok[0], pr.len[0], NULL, NULL, &a0), DSV4_OK);
  float *l = malloc(sizeof *l * (size_t)V);
  double *p1 = malloc(sizeof *p1 * (size_t)V), *p2 = malloc(sizeof *p2 * (size_t)V);
  assert_int_equal(dsv4_engine_seq_fork(f.e, par, &c), DSV4_OK);
  assert_int_equal(dsv4_engine_decode(f.e, 1, &c, &a0, NULL, l, NULL), DSV4_OK);
  softmax_d(l, V, DIST_T, p1);
  assert_int_equal(dsv4_engine_draft(f.e, 1, &par, &a0, NULL, d, NULL), DSV4_OK);
  int32_t xs = 0;
  for (int32_t v = 1; v < V; v++) xs = p1[v] > p1[xs] ? v : xs;
  assert_int_equal(d[0], xs); /* the planted successor: the draft's first proposal */
  assert_int_equal(dsv4_engine_decode(f.e, 1, &c, &xs, NULL, l, NULL), DSV4_OK);
  softmax_d(l, V, DIST_T, p2);
  assert_int_equal(dsv4_engine_seq_free(f.e, c), DSV4_OK);
  double p2max = 0;
  for (int32_t v = 0; v < V; v++) p2max = p2[v] > p2max ? p2[v] : p2max;
  printf("    target at T %.2f: p1(x*) = %.3f, max p2 = %.3f\n", (double)DIST_T, p1[xs], p2max);
  distribution_run(&f, par, a0, 0, p1, p2, xs);
  distribution_run(&f, par, a0, 1, p1, p2, xs);
  free(l), free(p1), free(p2);
  free_prompts(&pr);
  close_fx(&f);
}

/* ---- argument errors change nothing ------------------------------------- */

static void api_errors(void **state) {
  (void)state;
  fx f;
  open_fx(&f, "tiny-v41-e2e-a", 3, 0);
  const int32_t B = f.B, V = f.V;
  const int64_t *ga = golden(&f, "a.gen_tokens", DSV4_DTYPE_I64, 16);
  prompts pr;
  load_prompts(&f, &pr);
  int64_t id, other, empty;
  int32_t a, d[8] = {0}, nd = 2, acc = -1, nx = -1, dd[16];
  float c[8];
  assert_int_equal(dsv4_engine_seq_create(f.e, &id), DSV4_OK);
  assert_int_equal(dsv4_engine_seq_create(f.e, &empty), DSV4_OK);
  assert_int_equal(dsv4_engine_prefill(f.e, id, pr.tok[0], pr.len[0], NULL, NULL, &a), DSV4_OK);
  assert_int_equal(a, ga[0]);
  assert_int_equal(dsv4_engine_seq_fork(f.e, id, &other), DSV4_OK);
  assert_int_equal(dsv4_engine_seq_free(f.e, other), DSV4_OK); /* a freed id */
  const int32_t bad = V;
  int64_t two[2] = {id, id};
  int32_t a2[2] = {a, a}, nd2[2] = {1, 1}, acc2[2], nx2[2];
  dsv4_sampling_params sp;
  assert_int_equal(dsv4_sampling_params_init(&sp, sizeof sp), DSV4_OK);
  sp.struct_size = 4;
  /* draft */
  assert_int_equal(dsv4_engine_draft(NULL, 1, &id, &a, NULL, d, c), DSV4_ERR_INVALID_ARG);
  assert_int_equal(dsv4_engine_draft(f.e, 1, NULL, &a, NULL, d, c), DSV4_ERR_INVALID_ARG);
  assert_int_equal(dsv4_engine_draft(f.e, 1, &id, &a, NULL, NULL, c), DSV4_ERR_INVALID_ARG);
  assert_int_equal(dsv4_engine_draft(f.e, 0, &id, &a, NULL, d, c), DSV4_ERR_INVALID_ARG);
  assert_int_equal(dsv4_engine_draft(f.e, 4, &id, &a, NULL, d, c), DSV4_ERR_INVALID_ARG);
  assert_int_equal(dsv4_engine_draft(f.e, 1, &other, &a, NULL, d, c), DSV4_ERR_UNKNOWN_SEQUENCE);
  assert_int_equal(dsv4_engine_draft(f.e, 2, two, a2, NULL, dd, NULL), DSV4_ERR_INVALID_ARG);
  assert_int_equal(dsv4_engine_draft(f.e, 1, &id, &bad, NULL, d, c), DSV4_ERR_INVALID_TOKEN);
  assert_int_equal(dsv4_engine_draft(f.e, 1, &empty, &a, NULL, d, c), DSV4_ERR_INVALID_ARG);
  assert_int_equal(dsv4_engine_draft(f.e, 1, &id, &a, &sp, d, c), DSV4_ERR_PARAMS_SIZE);
  printf("    e.g. \"%s\"\n", dsv4_engine_last_error(f.e));
  /* verify */
  assert_int_equal(dsv4_engine_draft(f.e, 1, &id, &a, NULL, d, c), DSV4_OK);
  assert_int_equal(dsv4_engine_verify(NULL, 1, &id, &a, &nd, d, NULL, &acc, &nx), DSV4_ERR_INVALID_ARG);
  assert_int_equal(dsv4_engine_verify(f.e, 1, &id, &a, NULL, d, NULL, &acc, &nx), DSV4_ERR_INVALID_ARG);
  assert_int_equal(dsv4_engine_verify(f.e, 1, &id, &a, &nd, NULL, NULL, &acc, &nx), DSV4_ERR_INVALID_ARG);
  assert_int_equal(dsv4_engine_verify(f.e, 1, &id, &a, &nd, d, NULL, NULL, &nx), DSV4_ERR_INVALID_ARG);
  assert_int_equal(dsv4_engine_verify(f.e, 1, &other, &a, &nd, d, NULL, &acc, &nx),
                   DSV4_ERR_UNKNOWN_SEQUENCE);
  assert_int_equal(dsv4_engine_verify(f.e, 2, two, a2, nd2, dd, NULL, acc2, nx2), DSV4_ERR_INVALID_ARG);
  assert_int_equal(dsv4_engine_verify(f.e, 1, &id, &bad, &nd, d, NULL, &acc, &nx), DSV4_ERR_INVALID_TOKEN);
  int32_t big = B + 1, neg = -1, db[8];
  memcpy(db, d, sizeof db);
  assert_int_equal(dsv4_engine_verify(f.e, 1, &id, &a, &big, d, NULL, &acc, &nx), DSV4_ERR_INVALID_ARG);
  assert_int_equal(dsv4_engine_verify(f.e, 1, &id, &a, &neg, d, NULL, &acc, &nx), DSV4_ERR_INVALID_ARG);
  db[1] = -5;
  assert_int_equal(dsv4_engine_verify(f.e, 1, &id, &a, &nd, db, NULL, &acc, &nx), DSV4_ERR_INVALID_TOKEN);
  printf("    e.g. \"%s\"\n", dsv4_engine_last_error(f.e));
  assert_int_equal(acc, -1); /* outputs untouched */
  assert_int_equal(nx, -1);
  int64_t len = 0;
  assert_int_equal(dsv4_engine_seq_length(f.e, id, &len), DSV4_OK);
  assert_int_equal(len, pr.len[0]);
  /* after all that, greedy speculation still gives the golden continuation */
  int32_t out[24], n = 1;
  out[0] = a;
  while (n < 16) {
    assert_int_equal(dsv4_engine_draft(f.e, 1, &id, &a, NULL, d, c), DSV4_OK);
    assert_int_equal(dsv4_engine_verify(f.e, 1, &id, &a, &nd, d, NULL, &acc, &nx), DSV4_OK);
    for (int32_t k = 0; k < acc; k++) out[n++] = d[k];
    out[n++] = a = nx;
  }
  for (int t = 0; t < 16; t++) assert_int_equal(out[t], ga[t]);
  /* context overflow: length + 1 + n_drafts > max_context; nothing changes */
  dsv4_engine *small = NULL;
  dsv4_engine_params ep;
  assert_int_equal(dsv4_engine_params_init(&ep, sizeof ep), DSV4_OK);
  ep.max_sequences = 1;
  ep.max_context = pr.len[0] + 3;
  ep.n_threads = 1;
  assert_int_equal(dsv4_engine_create(dsv4_engine_model(f.e), &ep, &small), DSV4_OK);
  int64_t sid;
  assert_int_equal(dsv4_engine_seq_create(small, &sid), DSV4_OK);
  assert_int_equal(dsv4_engine_prefill(small, sid, pr.tok[0], pr.len[0], NULL, NULL, &a), DSV4_OK);
  assert_int_equal(dsv4_engine_draft(small, 1, &sid, &a, NULL, d, c), DSV4_OK);
  nd = 3;
  assert_int_equal(dsv4_engine_verify(small, 1, &sid, &a, &nd, d, NULL, &acc, &nx),
                   DSV4_ERR_CONTEXT_OVERFLOW);
  printf("    e.g. \"%s\"\n", dsv4_engine_last_error(small));
  nd = 2;
  assert_int_equal(dsv4_engine_verify(small, 1, &sid, &a, &nd, d, NULL, &acc, &nx), DSV4_OK);
  assert_int_equal(acc, 1); /* the planted successor */
  assert_int_equal(nx, ga[2]);
  dsv4_engine_free(small);
  /* the draft-length policy */
  const float hi[4] = {10, 10, 10, 10}, lo[4] = {-10, -10, -10, -10}, mid[4] = {3, 0, 3, 3};
  assert_int_equal(dsv4_spec_draft_length(hi, 4, 0.5f), 4);
  assert_int_equal(dsv4_spec_draft_length(lo, 4, 0.5f), 0);
  assert_int_equal(dsv4_spec_draft_length(lo, 4, 0.0f), 4);
  assert_int_equal(dsv4_spec_draft_length(mid, 4, 0.5f), 1); /* a_2 = 0.95 x 0.5 < 0.5 */
  assert_int_equal(dsv4_spec_draft_length(mid, 4, 0.4f), 4);
  assert_int_equal(dsv4_spec_draft_length(NULL, 4, 0.5f), 0);
  free_prompts(&pr);
  close_fx(&f);
}

/* The draft head alone, teacher-forced: rings seeded through dspark_extend
 * with main_hidden from the golden residual streams (b.block_out at the
 * inputs of the target layers, none of which is an Engram layer), then the
 * draft after the prefill of (b) against dspark.prefill: isolates
 * cpu_dspark.c from the backbone's own rounding differences. */
static void teacher_forced(fx *f) {
  struct dsv4_engine *e = f->e;
  const dsv4i_config *c = e->cfg;
  const int32_t T = 96, hc = c->hc_mult, dim = c->dim, nt = c->n_dspark_targets, B = f->B, V = f->V;
  const float *bo = golden(f, "b.block_out", DSV4_DTYPE_F32, (int64_t)c->n_layers * T * hc * dim);
  const int64_t *bin = golden(f, "b.input_ids", DSV4_DTYPE_I64, T);
  const int64_t *gen = golden(f, "b.gen_tokens", DSV4_DTYPE_I64, 16);
  gdraft g;
  load_gdraft(f, "dspark.prefill", 1, &g);
  uint16_t *mh = malloc(sizeof *mh * (size_t)T * nt * dim);
  for (int32_t t = 0; t < T; t++) /* bf16(mean over the copies of the target layers' inputs) */
    for (int32_t k = 0; k < nt; k++) {
      const int32_t L = c->dspark_targets[k];
      assert_true(L >= 1 && c->layers[L].engram_slot < 0);
      const float *src = bo + (((size_t)(L - 1) * T + t) * hc) * dim;
      for (int32_t d = 0; d < dim; d++) {
        float acc = 0;
        for (int32_t cc = 0; cc < hc; cc++) acc += src[(size_t)cc * dim + d];
        mh[((size_t)t * nt + k) * dim + d] = dsv4i_f32_to_bf16(acc / (float)hc);
      }
    }
  dsv4i_backend *be = e->be;
  int32_t slot = -1, tok[96], sl[96], lay[96], out0 = 0;
  int64_t pos[96], len = T;
  int64_t *eng = calloc((size_t)T * (size_t)(e->n_engram_cols > 0 ? e->n_engram_cols : 1), 8);
  for (int32_t t = 0; t < T; t++) tok[t] = (int32_t)bin[t], pos[t] = t, sl[t] = 0, lay[t] = 16;
  assert_int_equal(dsv4i_kv_slot_open(&e->kv, &slot), DSV4_OK);
  assert_int_equal(dsv4i_kv_slot_reserve(&e->kv, 1, &slot, &len), DSV4_OK);
  dsv4i_batch b = {T, dsv4i_plan_bucket(&e->plan, T), tok, pos, sl, lay, NULL, 0, &out0,
                   e->n_engram_cols > 0 ? eng : NULL, {0}};
  assert_int_equal(dsv4i_kv_step_table(&e->kv, 1, &slot, &len, &b.kv), DSV4_OK);
  assert_int_equal(be->ops->set_batch(be, &b), DSV4_OK);
  const dsv4i_bbuf taps = {mh};
  assert_int_equal(be->ops->dspark_extend(be, taps), DSV4_OK);
  cpu_backend *cb = (cpu_backend *)be;
  assert_int_equal(dsv4i_kv_step_commit(&e->kv, 1, &slot, &len), DSV4_OK);
  dsv4i_kv_step kv;
  assert_int_equal(dsv4i_kv_step_table(&e->kv, 1, &slot, NULL, &kv), DSV4_OK);
  int32_t drafts[8], a = (int32_t)gen[0];
  float conf[8];
  float *base = malloc(sizeof *base * (size_t)(B * V)), *lg = malloc(sizeof *lg * (size_t)(B * V));
  const dsv4i_sample_req req = {0.0f, 0, 0, 0};
  const dsv4i_dspark_out out = {drafts, conf, lg, base};
  const int64_t p0 = T - 1;
  assert_int_equal(dsv4i_cpu_dspark_draft(cb, &kv, &p0, &a, NULL, &req, &out), DSV4_OK);
  for (int32_t k = 0; k < B; k++) assert_int_equal(drafts[k], g.ids[k + 1]);
  const double db = max_abs(base, g.base, (size_t)(B * V)), dl = max_abs(lg, g.logits, (size_t)(B * V));
  const double dc = max_abs(conf, g.conf, (size_t)B);
  double rel = 0, mx = 0;
  for (int32_t j = 0; j < B * V; j++) mx = fmax(mx, fabs((double)g.base[j]));
  rel = db / mx;
  printf("    %s: teacher-forced draft (golden main_hidden): ids equal; base max |diff| %.3g "
         "(%.2g of the largest logit), logits %.3g, confidence %.3g\n", f->name, db, rel, dl, dc);
  assert_true(rel <= 1e-5 && dl <= 1e-4 * mx && dc <= 1e-4);
  dsv4i_kv_slot_close(&e->kv, slot);
  free(mh), free(eng), free(base), free(lg);
}

static void golden_e2e(void **state) {
  (void)state;
  fx f;
  open_fx(&f, "tiny-v41-e2e-a", 2, 0);
  teacher_forced(&f);
  close_fx(&f);
  open_fx(&f, "tiny-v41-a", 2, 0);
  teacher_forced(&f);
  close_fx(&f);
  golden_run(0, 0);
  golden_run(0, 1);
  golden_run(0, 2);
  golden_run(7, 0);
}

int tu_run_suite(void) {
#ifndef DSV4_TEST_CUDA
  const struct CMUnitTest tests[] = {
    cmocka_unit_test(golden_e2e),
    cmocka_unit_test(greedy_equal_e2e),
    cmocka_unit_test(greedy_equal_chaotic),
    cmocka_unit_test(shuffled_batch),
    cmocka_unit_test(greedy_equal_ds_mla),
    cmocka_unit_test(shuffled_batch_ds_mla),
    cmocka_unit_test(distribution),
    cmocka_unit_test(api_errors),
  };
#else
  if (dsv4_backend_probe(DSV4_TEST_BACKEND, 0) != DSV4_OK) {
    printf("skip: backend %d is not usable here: %s\n", (int)DSV4_TEST_BACKEND, dsv4_last_error());
    return 77;
  }
  (void)golden_e2e;
  const struct CMUnitTest tests[] = {
    cmocka_unit_test(greedy_equal_e2e),
    cmocka_unit_test(greedy_equal_chaotic),
    cmocka_unit_test(shuffled_batch),
    cmocka_unit_test(greedy_equal_ds_mla),
    cmocka_unit_test(shuffled_batch_ds_mla),
    cmocka_unit_test(distribution),
    cmocka_unit_test(api_errors),
  };
#endif
  return cmocka_run_group_tests_name("spec", tests, NULL, NULL);
}
