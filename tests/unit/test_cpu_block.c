/*
 * Backbone blocks of the CPU backend against the fixtures' per-layer
 * captures, teacher-forced (fixture README "How to compare", step 3):
 * block i gets the golden stream b.block_out[i-1] (block 0: embedding rows
 * of b.input_ids x 4) and the golden pre mix b.block_pre[i-1] (block 0:
 * one-hot copy 0); an Engram layer first turns it into b.engram_out (checked,
 * then the golden one is used); KV sources build their caches from their own
 * golden input; consumer layers get the golden top-k of their index source and
 * the candidate-masked source the golden candidates. An index source's own
 * selection is compared with b.topk.L<i> / b.candidates.L<i>; a differing row
 * must be a near tie (gap rule below) and the layer is then checked with the
 * golden selection (forced), as the README says.
 *
 * Tolerances (README recommendations):
 * - tiny-v41-a: per block relative L2 <= 1e-2 and at most 1% of elements
 *   beyond 2 bf16 ulps, for b.block_out and b.block_pre;
 *   selection differences only where every swapped pair of positions has my
 *   scores within 2 bf16 ulps of each other (the golden's own boundary gaps
 *   are exact ties in many rows);
 * - tiny-v41-e2e-a: max |diff| <= 0.688 (block_out), 0.0492 (block_pre),
 *   0.375 (engram_out); selections exactly equal.
 *
 * Invariance (attention outputs of every layer, bit for bit): the 96-token
 * prefill in one chunk vs chunks of 1, 3 and 7; decode one token per call vs
 * verify calls of 5; a fork, a rollback (truncate) and re-run, and two
 * sequences batched together give the same bits as running alone.
 *
 * DSpark stages (spec §6.1): the draft right after the prefill of (b) — rings
 * seeded with main_kv of every prompt position (main_hidden from the golden
 * streams, checked against dspark.prefill.main_hidden), the block [anchor,
 * noise x 4] through the three stages, the shared head: base logits against
 * dspark.prefill.base_logits (e2e: within 0.829 and the same argmax; what the
 * implementation achieves today on both fixtures is bit equality).
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "test_util.h"
#include "block_util.h"

/* ---- the teacher-forced gate: the CPU backend's block under bfx_teacher_forced ---- */

typedef struct cpu_tf {
  bfx *f;
  kvh_seq *s;
  dsv4i_attn_shared sh;
} cpu_tf;

static void cpu_tf_engram(void *u, int32_t i, uint16_t *h) {
  cpu_tf *c = u;
  assert_int_equal(bfx_engram(c->f, i, h), DSV4_OK);
}

static void cpu_tf_block(void *u, int32_t i, const bfx_sel *sel, const uint16_t *h,
                         const float *pre, uint16_t *ho, float *preo) {
  cpu_tf *c = u;
  dsv4i_attn_shared *sh = &c->sh;
  const size_t T = (size_t)c->f->T, k = (size_t)sh->topk_ld, cl = (size_t)sh->cand_ld;
  if (sel->topk) memcpy(sh->topk, sel->topk, T * k * 4);
  if (sel->cand) memcpy(sh->cand, sel->cand, T * cl * 4);
  sh->force_topk = sel->force;
  sh->scores = sel->scores;
  sh->scores_ld = (int64_t)T;
  dsv4i_attn_batch b = {(int32_t)T, NULL, NULL, NULL};
  bfx_batch(c->f, &c->s, 1, 0, (int32_t)T, &b);
  const bfx_actx ac = {&b, sh, NULL, 0, 0};
  assert_int_equal(bfx_block(c->f, i, &ac, h, pre, ho, preo), DSV4_OK);
  bfx_batch_free(&b);
  if (sel->own_topk) memcpy(sel->own_topk, sh->topk, T * k * 4);
  if (sel->own_cand) memcpy(sel->own_cand, sh->cand, T * cl * 4);
}

static void teacher_forced(const char *name, int chaotic) {
  bfx f;
  bfx_open(&f, name);
  cpu_tf c = {&f, bfx_seq(&f), {0}};
  kvh_step_begin(c.s, f.T);
  assert_int_equal(dsv4i_attn_shared_init(&f.cfg, (int32_t)f.T, &c.sh), DSV4_OK);
  assert_int_equal(c.sh.topk_ld, f.cfg.index_topk);
  assert_int_equal(c.sh.cand_ld, bfx_cand_ld(&f));
  const bfx_runner rn = {"cpu", &c, cpu_tf_engram, cpu_tf_block};
  bfx_teacher_forced(&f, &rn, chaotic);
  assert_int_equal(kvh_commit(c.s, f.T), DSV4_OK);
  dsv4i_attn_shared_free(&c.sh);
  kvh_seq_free(c.s);
  bfx_close(&f);
}

static void golden_tiny_a(void **state) {
  (void)state;
  teacher_forced("tiny-v41-a", 1);
}

static void golden_tiny_e2e(void **state) {
  (void)state;
  teacher_forced("tiny-v41-e2e-a", 0);
}

/* ---- invariances --------------------------------------------------------------- */

/* attention outputs of every layer for positions [p0, p1) of sequence s, in
 * calls of `chunk` tokens with the given layout, into out[layer][pos][dim] */
static void run_span(bfx *f, kvh_seq *s, int32_t p0, int32_t p1, int32_t chunk,
                     int32_t layout, uint16_t *out) {
  const dsv4i_config *c = &f->cfg;
  dsv4i_attn_shared sh;
  assert_int_equal(dsv4i_attn_shared_init(c, chunk, &sh), DSV4_OK);
  for (int32_t a = p0; a < p1; a += chunk) {
    const int32_t e = a + chunk < p1 ? a + chunk : p1;
    kvh_step_begin(s, e);
    dsv4i_attn_batch b;
    bfx_batch(f, &s, 1, a, e - a, &b);
    for (int32_t t = 0; t < e - a; t++) ((int32_t *)b.layout)[t] = layout;
    for (int32_t i = 0; i < c->n_layers; i++)
      assert_int_equal(dsv4i_attn_forward(&f->attn[i], &b, f->ax[i] + (size_t)a * c->dim, &sh,
                                          out + ((size_t)i * f->T + a) * c->dim), DSV4_OK);
    assert_int_equal(kvh_commit(s, e), DSV4_OK);
    bfx_batch_free(&b);
  }
  dsv4i_attn_shared_free(&sh);
}

static int same_span(const bfx *f, const uint16_t *a, const uint16_t *b, int32_t p0, int32_t p1) {
  for (int32_t i = 0; i < f->cfg.n_layers; i++)
    for (int32_t p = p0; p < p1; p++) {
      const size_t o = ((size_t)i * f->T + p) * f->cfg.dim;
      if (memcmp(a + o, b + o, (size_t)f->cfg.dim * 2)) {
        printf("      layer %d position %d differs\n", (int)i, (int)p);
        return 0;
      }
    }
  return 1;
}

static void invariances(void **state) {
  (void)state;
  bfx f;
  bfx_open(&f, "tiny-v41-a");
  bfx_attn_inputs(&f);
  const int32_t T = (int32_t)f.T, W = f.cfg.window_size < T ? f.cfg.window_size : T;
  const size_t n = (size_t)f.cfg.n_layers * (size_t)T * (size_t)f.cfg.dim;
  uint16_t *ref = calloc(n, 2), *got = calloc(n, 2);
  /* chunked prefill: the prompt-wide width W for every chunk */
  kvh_seq *s = bfx_seq(&f);
  run_span(&f, s, 0, T, T, W, ref);
  kvh_seq_free(s);
  const int32_t chunks[3] = {1, 3, 7};
  for (int j = 0; j < 3; j++) {
    s = bfx_seq(&f);
    run_span(&f, s, 0, T, chunks[j], W, got);
    printf("    prefill in chunks of %d: %s\n", chunks[j], same_span(&f, ref, got, 0, T) ? "identical" : "DIFFERENT");
    assert_true(same_span(&f, ref, got, 0, T));
    kvh_seq_free(s);
  }
  /* generated tokens: decode one per call vs verify calls of 5, on forks */
  const int32_t P = T - 16;
  s = bfx_seq(&f);
  run_span(&f, s, 0, P, P, P < W ? P : W, ref);
  dsv4_status fst[4];
  kvh_seq *v = kvh_fork(s, &fst[0]), *r = kvh_fork(s, &fst[1]), *x = kvh_fork(s, &fst[2]),
          *y = kvh_fork(s, &fst[3]);
  for (int j = 0; j < 4; j++) assert_int_equal(fst[j], DSV4_OK);
  run_span(&f, s, P, T, 1, DSV4I_ATTN_DECODE, ref);
  run_span(&f, v, P, T, 5, DSV4I_ATTN_DECODE, got);
  printf("    decode 1 per call vs verify 5 per call: %s\n", same_span(&f, ref, got, P, T) ? "identical" : "DIFFERENT");
  assert_true(same_span(&f, ref, got, P, T));
  /* rollback: 5 speculative positions, keep 2, go on */
  memset(got, 0, n * 2);
  run_span(&f, r, P, P + 5, 5, DSV4I_ATTN_DECODE, got);
  assert_int_equal(kvh_truncate(r, P + 2), DSV4_OK);
  run_span(&f, r, P + 2, T, 4, DSV4I_ATTN_DECODE, got);
  printf("    rollback of 3 then re-run: %s\n", same_span(&f, ref, got, P, T) ? "identical" : "DIFFERENT");
  assert_true(same_span(&f, ref, got, P, T));
  /* two sequences in one batch (3 and 5 tokens per call) */
  memset(got, 0, n * 2);
  dsv4i_attn_shared sh;
  assert_int_equal(dsv4i_attn_shared_init(&f.cfg, 8, &sh), DSV4_OK);
  uint16_t *o8 = malloc((size_t)8 * f.cfg.dim * 2);
  kvh_seq *two[2] = {x, y};
  for (int32_t a = P, bb = P; bb < T; a += 3, bb += 5) {
    const int32_t na = a + 3 <= T ? 3 : (a < T ? T - a : 0), nb = bb + 5 <= T ? 5 : T - bb;
    int64_t to[2] = {a + na, bb + nb};
    assert_int_equal(kvh_reserve(two, to, 2), DSV4_OK);
    dsv4i_attn_batch b;
    bfx_batch2(&f, x, a, na, y, bb, nb, &b);
    for (int32_t i = 0; i < f.cfg.n_layers; i++) {
      uint16_t *xin = bfx_gather_inputs(&f, i, a, na, bb, nb);
      assert_int_equal(dsv4i_attn_forward(&f.attn[i], &b, xin, &sh, o8), DSV4_OK);
      for (int32_t t = 0; t < nb; t++) /* y's rows go to `got` */
        memcpy(got + ((size_t)i * T + bb + t) * f.cfg.dim, o8 + (size_t)(na + t) * f.cfg.dim,
               (size_t)f.cfg.dim * 2);
      for (int32_t t = 0; t < na; t++) /* x's rows must equal the reference directly */
        assert_memory_equal(o8 + (size_t)t * f.cfg.dim, ref + ((size_t)i * T + a + t) * f.cfg.dim,
                            (size_t)f.cfg.dim * 2);
      free(xin);
    }
    assert_int_equal(kvh_commit(x, to[0]), DSV4_OK);
    assert_int_equal(kvh_commit(y, to[1]), DSV4_OK);
    bfx_batch_free(&b);
  }
  printf("    two sequences batched: %s\n", same_span(&f, ref, got, P, T) ? "identical" : "DIFFERENT");
  assert_true(same_span(&f, ref, got, P, T));
  free(o8);
  dsv4i_attn_shared_free(&sh);
  kvh_seq_free(s), kvh_seq_free(v), kvh_seq_free(r);
  kvh_seq_free(x), kvh_seq_free(y);
  free(ref), free(got);
  bfx_close(&f);
}

/* ---- DSpark stages: the draft after the prefill of (b) ------------------------ */

/* One forward_spec at start_pos T-1 (spec §6.1): the stages' rings seeded
 * with main_kv of every prompt position (main_hidden from the golden
 * streams), then the block [anchor, noise x 4] through the three stages and
 * the shared head; base logits against dspark.prefill.base_logits. */
static void dspark_prefill(const char *name, int chaotic) {
  bfx f;
  bfx_open(&f, name);
  const dsv4i_config *c = &f.cfg;
  const int32_t T = (int32_t)f.T, hc = c->hc_mult, dim = c->dim, nt = c->n_dspark_targets;
  const int32_t nl = c->n_layers, B = c->dspark_block_size, V = c->vocab_size;
  uint16_t *mh = malloc((size_t)T * nt * dim * 2), *mx = malloc((size_t)T * dim * 2);
  for (int32_t t = 0; t < T; t++) /* bf16(mean over copies) of each target layer's input */
    for (int32_t k = 0; k < nt; k++) {
      const int32_t L = c->dspark_targets[k];
      assert_true(L >= 1 && c->layers[L].engram_slot < 0);
      const float *src = f.block_out + (((size_t)(L - 1) * T + t) * hc) * dim;
      for (int32_t d = 0; d < dim; d++) {
        float acc = 0;
        for (int32_t cc = 0; cc < hc; cc++) acc += src[(size_t)cc * dim + d];
        mh[((size_t)t * nt + k) * dim + d] = dsv4i_f32_to_bf16(acc / (float)hc);
      }
    }
  const float *gmh = bfx_golden(&f, "dspark.prefill.main_hidden", DSV4_DTYPE_F32, (int64_t)nt * dim);
  for (int32_t j = 0; j < nt * dim; j++)
    assert_float_equal(dsv4i_bf16_to_f32(mh[(size_t)(T - 1) * nt * dim + j]), gmh[j], 0);
  dsv4i_wview mp;
  bfx_view(&f, DSV4I_W_DSPARK_MAIN_PROJ, nl, -1, &mp);
  const uint16_t *mnorm = bfx_tensor(&f, DSV4I_W_DSPARK_MAIN_NORM, nl, DSV4_DTYPE_BF16, dim);
  assert_int_equal(dsv4i_cpu_linear(&mp, T, mh, (int64_t)nt * dim, mx, dim), DSV4_OK);
  assert_int_equal(dsv4i_cpu_rmsnorm(T, dim, mx, dim, mnorm, c->norm_eps, mx, dim), DSV4_OK);
  kvh_seq *s = bfx_seq(&f);
  int64_t *pos = malloc((size_t)T * 8);
  dsv4i_kv_view **sq = malloc((size_t)T * sizeof *sq), *sv = &s->v;
  kvh_step_begin(s, T);
  assert_int_equal(kvh_commit(s, T), DSV4_OK);
  for (int32_t t = 0; t < T; t++) pos[t] = t, sq[t] = sv;
  for (int32_t S = 0; S < c->n_mtp_layers; S++) /* prefill seeds every position */
    assert_int_equal(dsv4i_attn_dspark_store(&f.attn[nl + S], T, sq, pos, mx), DSV4_OK);
  /* the block: anchor = first greedy token, then noise tokens */
  const int64_t *gen = bfx_golden(&f, "b.gen_tokens", DSV4_DTYPE_I64, 16);
  uint16_t *h = malloc((size_t)B * hc * dim * 2), *ho = malloc((size_t)B * hc * dim * 2);
  float *pre = malloc((size_t)B * hc * 4), *preo = malloc((size_t)B * hc * 4);
  for (int32_t j = 0; j < B; j++)
    for (int32_t cc = 0; cc < hc; cc++) {
      const int64_t id = j == 0 ? gen[0] : c->dspark_noise_token_id;
      memcpy(h + ((size_t)j * hc + cc) * dim, f.embed + (size_t)id * dim, (size_t)dim * 2);
      pre[j * hc + cc] = cc == 0 ? 1.0f : 0.0f;
    }
  const bfx_actx a = {NULL, NULL, sv, T - 1, B};
  for (int32_t S = 0; S < c->n_mtp_layers; S++) {
    assert_int_equal(dsv4i_attn_dspark_store(&f.attn[nl + S], 1, &sv, &pos[T - 1],
                                             mx + (size_t)(T - 1) * dim), DSV4_OK);
    assert_int_equal(bfx_block(&f, nl + S, &a, h, pre, ho, preo), DSV4_OK);
    memcpy(h, ho, (size_t)B * hc * dim * 2);
    memcpy(pre, preo, (size_t)B * hc * 4);
  }
  const uint16_t *fnorm =
      bfx_tensor(&f, DSV4I_W_DSPARK_NORM, nl + c->n_mtp_layers - 1, DSV4_DTYPE_BF16, dim);
  dsv4i_wview head;
  bfx_view(&f, DSV4I_W_HEAD, -1, -1, &head);
  float *lg = malloc((size_t)B * V * 4);
  assert_int_equal(dsv4i_cpu_head(B, hc, dim, h, pre, fnorm, c->norm_eps, &head, lg, NULL), DSV4_OK);
  const float *want = bfx_golden(&f, "dspark.prefill.base_logits", DSV4_DTYPE_F32, (int64_t)B * V);
  double md = 0;
  int argmax_same = 1;
  for (int32_t j = 0; j < B; j++) {
    int32_t am = 0, gm = 0;
    for (int32_t v = 0; v < V; v++) {
      const size_t o = (size_t)j * V + v;
      md = fmax(md, fabs((double)lg[o] - want[o]));
      if (lg[o] > lg[(size_t)j * V + am]) am = v;
      if (want[o] > want[(size_t)j * V + gm]) gm = v;
    }
    argmax_same &= am == gm;
  }
  printf("    %s DSpark prefill draft: base logits max |diff| %.4g, argmax %s\n", name, md,
         argmax_same ? "equal" : "DIFFERENT");
  if (!chaotic) { /* e2e README: logits within 0.829 */
    assert_true(md <= 0.829);
    assert_true(argmax_same);
  }
  kvh_seq_free(s);
  free(mh), free(mx), free(pos), free(sq), free(h), free(ho), free(pre), free(preo), free(lg);
  bfx_close(&f);
}

static void dspark_tiny_a(void **state) {
  (void)state;
  dspark_prefill("tiny-v41-a", 1);
}

static void dspark_tiny_e2e(void **state) {
  (void)state;
  dspark_prefill("tiny-v41-e2e-a", 0);
}

int tu_run_suite(void) {
  const struct CMUnitTest tests[] = {
    cmocka_unit_test(golden_tiny_a),
    cmocka_unit_test(golden_tiny_e2e),
    cmocka_unit_test(invariances),
    cmocka_unit_test(dspark_tiny_a),
    cmocka_unit_test(dspark_tiny_e2e),
  };
  return cmocka_run_group_tests_name("cpu_block", tests, NULL, NULL);
}
