/*
 * The backend-neutral core: a step run over layer ranges (pipeline stages)
 * reproduces the whole-model step bit for bit; the backend create arguments
 * refuse bad ranges and TP > 1; an engine whose backend reports
 * DSV4_ERR_DEVICE_LOST is sticky-failed and other engines are unaffected;
 * the step plan's buckets; the KV bookkeeping (identical page decisions, a failed page
 * copy contained).
 */
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "test_util.h"

#include "backend/backend.h"
#include "cpu/cpu_backend.h" /* the pool the backend allocated */
#include "cpu/cpu_test_hooks.h"
#include "dsv4/dsv4.h"
#include "engine/engine.h"
#include "engine/kv.h"
#include "io/safetensors.h"

static dsv4_engine *make_engine(const char *dir, int32_t max_seqs, int64_t ctx) {
  dsv4_engine_params ep;
  assert_int_equal(dsv4_engine_params_init(&ep, sizeof ep), DSV4_OK);
  ep.max_sequences = max_seqs;
  ep.max_context = ctx;
  ep.n_threads = 2;
  dsv4_engine *e = NULL;
  if (dsv4_engine_create_from_dir(dir, &ep, &e)) fail_msg("engine: %s", dsv4_last_error());
  return e;
}

static int32_t *golden_ids(const char *dir, const char *name, int64_t *n) {
  char p[4200];
  snprintf(p, sizeof p, "%s/golden.safetensors", dir);
  dsv4i_st_file f;
  assert_int_equal(dsv4i_st_open(p, &f), DSV4_OK);
  const dsv4i_st_tensor *t = dsv4i_st_find(&f, name);
  assert_non_null(t);
  *n = (int64_t)(t->nbytes / 8);
  const int64_t *v = dsv4i_st_data(&f, t);
  int32_t *r = malloc(sizeof *r * (size_t)*n);
  for (int64_t i = 0; i < *n; i++) r[i] = (int32_t)v[i];
  dsv4i_st_close(&f);
  return r;
}

/* One pipeline stage: a CPU backend over [first, last) with its buffers and the KV
 * layout of its layers' caches (as a rank of the distributed engine has). */
typedef struct stage {
  dsv4i_backend *be;
  dsv4i_bbuf h, pre, logits;
  dsv4i_kv_layout lay;
} stage;

static void stage_open(stage *s, const struct dsv4_engine *e, int32_t first, int32_t last) {
  memset(s, 0, sizeof *s);
  const dsv4i_model_part part = {first, last, 0, 1};
  assert_int_equal(dsv4i_kv_layout_init_part(e->cfg, &part, DSV4I_KV_NATIVE, 0,
                                             e->kv.lay.page_bytes, e->plan.max_ctx, &s->lay),
                   DSV4_OK);
  assert_true(s->lay.ld < e->kv.lay.ld); /* the stage's tables only */
  dsv4i_backend_desc d;
  memset(&d, 0, sizeof d);
  d.model = e->model;
  d.n_threads = 2;
  d.n_slots = e->plan.max_seqs;
  d.max_batch_tokens = e->plan.max_batch_tokens;
  d.max_out_rows = e->plan.max_out_rows;
  d.max_positions = e->plan.max_ctx;
  d.pool_pages = e->plan.pool_pages;
  d.kv_layout = &s->lay;
  d.first_layer = first;
  d.last_layer = last;
  d.tp_size = 1;
  d.n_buckets = e->plan.n_buckets;
  d.bucket_tokens = e->plan.buckets;
  if (dsv4i_backend_create(DSV4_BACKEND_CPU, &d, &s->be))
    fail_msg("stage [%d, %d): %s", (int)first, (int)last, dsv4i_error_message());
  assert_int_equal(s->be->first_layer, first);
  assert_int_equal(s->be->last_layer, last);
  const size_t nt = (size_t)e->plan.max_batch_tokens, hc = (size_t)e->cfg->hc_mult;
  const size_t dim = (size_t)e->cfg->dim;
  assert_int_equal(s->be->ops->buf_alloc(s->be, nt * hc * dim * 2, &s->h), DSV4_OK);
  assert_int_equal(s->be->ops->buf_alloc(s->be, nt * hc * 4, &s->pre), DSV4_OK);
  assert_int_equal(s->be->ops->buf_alloc(s->be, (size_t)e->plan.max_out_rows * (size_t)e->vocab * 4,
                                         &s->logits), DSV4_OK);
}

static void stage_close(stage *s) {
  s->be->ops->buf_free(s->be, s->h);
  s->be->ops->buf_free(s->be, s->pre);
  s->be->ops->buf_free(s->be, s->logits);
  dsv4i_backend_destroy(s->be);
}

/* Prefill + 3 greedy decode steps of prompt b: the whole model in one engine, then the same
 * steps through two stages split at every allowed pipeline boundary, handing the stream and
 * pre over through host memory; each stage has the KV bookkeeping of its own layers' caches
 * (as every pipeline rank has). Logits bit-identical. */
static void stages_equal_whole(void **st) {
  (void)st;
  const char *dir = tu_fixture_or_skip("tiny-v41-e2e-a");
  dsv4_engine *E = make_engine(dir, 1, 256);
  struct dsv4_engine *e = E;
  int64_t n;
  int32_t *in = golden_ids(dir, "b.input_ids", &n);
  const int32_t V = e->vocab, steps = 4;
  float *want = malloc(sizeof(float) * (size_t)V * steps), *got = malloc(sizeof(float) * (size_t)V);
  int32_t toks[4];
  int64_t id;
  assert_int_equal(dsv4_engine_seq_create(E, &id), DSV4_OK);
  assert_int_equal(dsv4_engine_prefill(E, id, in, n, NULL, want, &toks[0]), DSV4_OK);
  for (int k = 1; k < steps; k++)
    assert_int_equal(dsv4_engine_decode(E, 1, &id, &toks[k - 1], NULL, want + (size_t)k * V,
                                        &toks[k]), DSV4_OK);
  int32_t bounds[16];
  const int32_t nb = dsv4i_plan_boundaries(e->cfg, bounds, 16);
  assert_true(nb >= 1);
  const size_t hbytes = (size_t)e->plan.max_batch_tokens * (size_t)e->cfg->hc_mult *
                        (size_t)e->cfg->dim * 2;
  const size_t pbytes = (size_t)e->plan.max_batch_tokens * (size_t)e->cfg->hc_mult * 4;
  void *hh = malloc(hbytes), *hp = malloc(pbytes);
  for (int32_t bi = 0; bi < nb; bi++) {
    const int32_t k = bounds[bi];
    stage s0, s1;
    stage_open(&s0, e, 0, k);
    stage_open(&s1, e, k, e->cfg->n_layers);
    dsv4i_engram_history *hist = NULL;
    if (e->engram) assert_int_equal(dsv4i_engram_history_create(e->engram, &hist), DSV4_OK);
    dsv4i_kv_cache kv, kv1;
    int32_t slot, slot1;
    assert_int_equal(dsv4i_kv_cache_init(&kv, &s0.lay, e->plan.pool_pages, 1, NULL), DSV4_OK);
    assert_int_equal(dsv4i_kv_cache_init(&kv1, &s1.lay, e->plan.pool_pages, 1, NULL), DSV4_OK);
    assert_int_equal(dsv4i_kv_slot_open(&kv, &slot), DSV4_OK);
    assert_int_equal(dsv4i_kv_slot_open(&kv1, &slot1), DSV4_OK);
    int64_t len = 0;
    for (int step = 0; step < steps; step++) {
      const int32_t m = step == 0 ? (int32_t)n : 1;
      const int32_t *tk = step == 0 ? in : &toks[step - 1];
      int64_t target = len + m;
      assert_int_equal(dsv4i_kv_slot_reserve(&kv, 1, &slot, &target), DSV4_OK);
      assert_int_equal(dsv4i_kv_slot_reserve(&kv1, 1, &slot1, &target), DSV4_OK);
      if (hist) {
        assert_int_equal(dsv4i_engram_history_reserve(hist, target), DSV4_OK);
        assert_int_equal(dsv4i_engram_history_append(hist, tk, NULL, (size_t)m), DSV4_OK);
      }
      for (int32_t i = 0; i < m; i++) {
        e->b_tok[i] = tk[i];
        e->b_pos[i] = len + i;
        e->b_seq[i] = 0;
        e->b_layout[i] = step == 0 ? dsv4i_layout_prefill(target, e->cfg->window_size)
                                   : DSV4I_LAYOUT_DECODE;
      }
      if (hist) dsv4i_engram_history_row_ids(hist, len, target, -1, e->b_engram);
      e->b_out[0] = m - 1;
      dsv4i_batch b = {m, dsv4i_plan_bucket(&e->plan, m), e->b_tok, e->b_pos, e->b_seq,
                       e->b_layout, NULL, 1, e->b_out, e->b_engram, {0}};
      assert_int_equal(dsv4i_kv_step_table(&kv, 1, &slot, &target, &b.kv), DSV4_OK);
      const dsv4i_step_io io0 = {&b, s0.h, s0.pre, {NULL}, s0.logits};
      dsv4i_batch b1 = b;
      assert_int_equal(dsv4i_kv_step_table(&kv1, 1, &slot1, &target, &b1.kv), DSV4_OK);
      assert_int_equal(s0.be->ops->run(s0.be, &io0), DSV4_OK);
      assert_int_equal(s0.be->ops->buf_read(s0.be, s0.h, 0, hbytes, hh), DSV4_OK);
      assert_int_equal(s0.be->ops->buf_read(s0.be, s0.pre, 0, pbytes, hp), DSV4_OK);
      assert_int_equal(s1.be->ops->buf_write(s1.be, s1.h, 0, hbytes, hh), DSV4_OK);
      assert_int_equal(s1.be->ops->buf_write(s1.be, s1.pre, 0, pbytes, hp), DSV4_OK);
      const dsv4i_step_io io1 = {&b1, s1.h, s1.pre, {NULL}, s1.logits};
      assert_int_equal(s1.be->ops->run(s1.be, &io1), DSV4_OK);
      assert_int_equal(s1.be->ops->buf_read(s1.be, s1.logits, 0, sizeof(float) * (size_t)V, got),
                       DSV4_OK);
      assert_int_equal(dsv4i_kv_step_commit(&kv, 1, &slot, &target), DSV4_OK);
      assert_int_equal(dsv4i_kv_step_commit(&kv1, 1, &slot1, &target), DSV4_OK);
      if (memcmp(got, want + (size_t)step * V, sizeof(float) * (size_t)V) != 0)
        fail_msg("stages [0, %d) + [%d, %d), step %d: logits differ from the whole model", (int)k,
                 (int)k, (int)e->cfg->n_layers, step);
      len = target;
    }
    printf("stages split at layer %d: prefill + %d decode steps bit-identical\n", (int)k,
           steps - 1);
    dsv4i_engram_history_free(hist);
    dsv4i_kv_cache_free(&kv);
    dsv4i_kv_cache_free(&kv1);
    stage_close(&s0);
    stage_close(&s1);
  }
  free(hh);
  free(hp);
  free(in);
  free(want);
  free(got);
  dsv4_engine_free(E);
}

/* The create arguments: a range outside the model, an empty one, a bad TP rank are
 * INVALID_ARG; TP > 1 is UNSUPPORTED until the distributed engine; a middle stage owns
 * neither embed nor head. */
static void create_args_checked(void **st) {
  (void)st;
  const char *dir = tu_fixture_or_skip("tiny-v41-a");
  dsv4_engine *E = make_engine(dir, 1, 64);
  struct dsv4_engine *e = E;
  dsv4i_backend_desc d;
  memset(&d, 0, sizeof d);
  d.model = e->model;
  d.n_slots = 1;
  d.max_batch_tokens = 4;
  d.max_out_rows = 1;
  d.max_positions = 64;
  d.pool_pages = e->plan.pool_pages;
  d.kv_layout = &e->kv.lay;
  dsv4i_backend *be = NULL;
  d.first_layer = 3;
  d.last_layer = 3;
  assert_int_equal(dsv4i_backend_create(DSV4_BACKEND_CPU, &d, &be), DSV4_ERR_INVALID_ARG);
  assert_null(be);
  d.last_layer = e->cfg->n_layers + 1;
  assert_int_equal(dsv4i_backend_create(DSV4_BACKEND_CPU, &d, &be), DSV4_ERR_INVALID_ARG);
  d.first_layer = 2;
  d.last_layer = 6;
  /* the whole model's KV layout for a stage: refused (its pool holds its layers' caches) */
  assert_int_equal(dsv4i_backend_create(DSV4_BACKEND_CPU, &d, &be), DSV4_ERR_INVALID_ARG);
  assert_non_null(strstr(dsv4i_error_message(), "the stage's are 2..5"));
  const dsv4i_model_part part = {2, 6, 0, 1};
  dsv4i_kv_layout lay;
  assert_int_equal(dsv4i_kv_layout_init_part(e->cfg, &part, DSV4I_KV_NATIVE, 0,
                                             e->kv.lay.page_bytes, 64, &lay), DSV4_OK);
  d.kv_layout = &lay;
  d.tp_size = 2;
  d.tp_rank = 2;
  assert_int_equal(dsv4i_backend_create(DSV4_BACKEND_CPU, &d, &be), DSV4_ERR_INVALID_ARG);
  d.tp_rank = 1;
  dsv4i_error_clear();
  /* TP needs its collectives (tp_comm, a dsv4i_tp_ops: the distributed engine's) */
  assert_int_equal(dsv4i_backend_create(DSV4_BACKEND_CPU, &d, &be), DSV4_ERR_INVALID_ARG);
  assert_non_null(strstr(dsv4i_error_message(), "without TP collectives"));
  assert_null(be);
  d.tp_size = 1;
  d.tp_rank = 0;
  assert_int_equal(dsv4i_backend_create(DSV4_BACKEND_CPU, &d, &be), DSV4_OK);
  assert_false(be->has_embed);
  assert_false(be->has_head);
  dsv4i_bbuf h = {NULL};
  assert_int_equal(be->ops->buf_alloc(be, 64, &h), DSV4_OK);
  assert_int_equal(be->ops->embed(be, h, h), DSV4_ERR_INVALID_ARG); /* not the first stage */
  assert_int_equal(be->ops->head(be, h, h, h), DSV4_ERR_INVALID_ARG); /* not the last */
  be->ops->buf_free(be, h);
  dsv4i_backend_destroy(be);
  const dsv4_status probe = dsv4_backend_probe(DSV4_BACKEND_CUDA, 0);
  const dsv4_status cs = dsv4i_backend_create(DSV4_BACKEND_CUDA, &d, &be);
  if (probe == DSV4_OK) { /* a GPU: the same stage on the device */
    assert_int_equal(cs, DSV4_OK);
    assert_false(be->has_embed);
    dsv4i_backend_destroy(be);
  } else {
    assert_int_equal(cs, probe); /* no kernels built, or no usable device */
  }
  assert_string_equal(dsv4i_backend_name(DSV4_BACKEND_CPU), "cpu");
  dsv4_engine_free(E);
}

/* After the backend reports DSV4_ERR_DEVICE_LOST every call on that engine returns it;
 * another engine on the same model keeps working and gives the same logits as before. */
static void device_lost_is_sticky(void **st) {
  (void)st;
  const char *dir = tu_fixture_or_skip("tiny-v41-a");
  dsv4_engine *A = make_engine(dir, 2, 64), *B = make_engine(dir, 2, 64);
  const int32_t prompt[5] = {0, 17, 42, 99, 7};
  const int32_t V = ((struct dsv4_engine *)A)->vocab;
  float *la = malloc(sizeof(float) * (size_t)V), *lb = malloc(sizeof(float) * (size_t)V);
  int64_t a0, a1, b0;
  int32_t tok;
  assert_int_equal(dsv4_engine_seq_create(A, &a0), DSV4_OK);
  assert_int_equal(dsv4_engine_seq_create(A, &a1), DSV4_OK);
  assert_int_equal(dsv4_engine_prefill(A, a1, prompt, 5, NULL, NULL, NULL), DSV4_OK);
  assert_int_equal(dsv4_engine_seq_create(B, &b0), DSV4_OK);
  dsv4i_cpu_backend_inject_fault(((struct dsv4_engine *)A)->be, 3, DSV4_ERR_DEVICE_LOST);
  assert_int_equal(dsv4_engine_prefill(A, a0, prompt, 5, NULL, la, &tok), DSV4_ERR_DEVICE_LOST);
  assert_non_null(strstr(dsv4_last_error(), "injected fault"));
  /* sticky: every call, including ones that never reach the backend */
  int64_t x;
  assert_int_equal(dsv4_engine_seq_create(A, &x), DSV4_ERR_DEVICE_LOST);
  assert_int_equal(dsv4_engine_prefill(A, a1, prompt, 1, NULL, la, &tok), DSV4_ERR_DEVICE_LOST);
  assert_int_equal(dsv4_engine_decode(A, 1, &a1, &prompt[0], NULL, la, &tok), DSV4_ERR_DEVICE_LOST);
  assert_int_equal(dsv4_engine_seq_fork(A, a1, &x), DSV4_ERR_DEVICE_LOST);
  assert_int_equal(dsv4_engine_seq_length(A, a1, &x), DSV4_ERR_DEVICE_LOST);
  assert_int_equal(dsv4_engine_seq_free(A, a1), DSV4_ERR_DEVICE_LOST);
  assert_non_null(strstr(dsv4_last_error(), "device was lost"));
  /* the other engine: unaffected, same numbers as a fresh run */
  assert_int_equal(dsv4_engine_prefill(B, b0, prompt, 5, NULL, lb, &tok), DSV4_OK);
  dsv4_engine *C = make_engine(dir, 2, 64);
  int64_t c0;
  assert_int_equal(dsv4_engine_seq_create(C, &c0), DSV4_OK);
  assert_int_equal(dsv4_engine_prefill(C, c0, prompt, 5, NULL, la, &tok), DSV4_OK);
  assert_memory_equal(la, lb, sizeof(float) * (size_t)V);
  /* another status is not sticky: a failed step is rolled back, the engine goes on */
  dsv4i_cpu_backend_inject_fault(((struct dsv4_engine *)C)->be, 1, DSV4_ERR_OUT_OF_MEMORY);
  assert_int_equal(dsv4_engine_decode(C, 1, &c0, &tok, NULL, NULL, NULL), DSV4_ERR_OUT_OF_MEMORY);
  assert_int_equal(dsv4_engine_decode(C, 1, &c0, &tok, NULL, la, NULL), DSV4_OK);
  dsv4_engine_free(A);
  dsv4_engine_free(B);
  dsv4_engine_free(C);
  free(la);
  free(lb);
}

/* Buckets: powers of two below max_batch_tokens, then max_batch_tokens; a step runs in
 * the smallest that holds it. */
static void step_plan_buckets(void **st) {
  (void)st;
  const char *dir = tu_fixture_or_skip("tiny-v41-a");
  dsv4_engine *E = make_engine(dir, 3, 64);
  const dsv4i_plan *p = &((struct dsv4_engine *)E)->plan;
  assert_int_equal(p->max_batch_tokens, 64); /* prefill_chunk capped at max_context */
  const int32_t want[] = {1, 2, 4, 8, 16, 32, 64};
  assert_int_equal(p->n_buckets, 7);
  assert_memory_equal(p->buckets, want, sizeof want);
  assert_int_equal(dsv4i_plan_bucket(p, 1), 1);
  assert_int_equal(dsv4i_plan_bucket(p, 3), 4);
  assert_int_equal(dsv4i_plan_bucket(p, 33), 64);
  assert_int_equal(dsv4i_plan_bucket(p, 64), 64);
  dsv4_engine_free(E);
}

/* The engines' KV bookkeeping (engine/kv.h) is equal: free pages, and every slot's
 * lengths and page tables (kind, layer). Returns the pages the slots hold. */
static int64_t same_pages(dsv4_engine *A, dsv4_engine *B, const char *after) {
  const dsv4i_kv_cache *a = &((struct dsv4_engine *)A)->kv, *b = &((struct dsv4_engine *)B)->kv;
  assert_int_equal(a->n_slots, b->n_slots);
  assert_int_equal(a->lay.ld, b->lay.ld);
  assert_int_equal(dsv4i_kv_pool_free_pages(a->pool), dsv4i_kv_pool_free_pages(b->pool));
  int64_t held = 0;
  for (int32_t i = 0; i < a->n_slots; i++) {
    const dsv4i_kv_seq *x = dsv4i_kv_slot(a, i), *y = dsv4i_kv_slot(b, i);
    if (!x || !y) {
      if (x != NULL || y != NULL) fail_msg("after %s: slot %d open in one engine only", after, (int)i);
      continue;
    }
    if (x->n_pos != y->n_pos || x->n_resv != y->n_resv || x->n_dirty != y->n_dirty)
      fail_msg("after %s: slot %d lengths differ", after, (int)i);
    for (int32_t k = 0; k < DSV4I_KV_KINDS; k++)
      for (int32_t l = 0; l < a->lay.n_layers; l++) {
        const int32_t t = k * a->lay.n_layers + l, off = a->lay.off[k][l];
        if (x->n[t] != y->n[t] ||
            memcmp(x->row + off, y->row + off, sizeof(int32_t) * (size_t)x->n[t]))
          fail_msg("after %s: slot %d table (kind %d, layer %d): page decisions differ", after,
                   (int)i, (int)k, (int)l);
      }
    held += dsv4i_kv_seq_pages(x);
  }
  return held;
}

/* Two engines fed the same calls (creates, prefills, forks, decodes, frees, a refused step)
 * make the same page decisions after every call: the allocator depends on nothing but the
 * calls (no addresses, no time, no hash order). */
static void page_decisions_deterministic(void **st) {
  (void)st;
  const char *dir = tu_fixture_or_skip("tiny-v41-a");
  dsv4_engine *E[2];
  dsv4_engine_params ep;
  assert_int_equal(dsv4_engine_params_init(&ep, sizeof ep), DSV4_OK);
  ep.max_sequences = 4;
  ep.max_context = 96;
  ep.n_threads = 1;
  for (int k = 0; k < 2; k++)
    if (dsv4_engine_create_from_dir(dir, &ep, &E[k])) fail_msg("engine: %s", dsv4_last_error());
  int32_t p[80];
  for (int i = 0; i < 80; i++) p[i] = 30 + (i * 7) % 500;
  int64_t id[2][4];
  for (int k = 0; k < 2; k++) {
    assert_int_equal(dsv4_engine_seq_create(E[k], &id[k][0]), DSV4_OK);
    assert_int_equal(dsv4_engine_prefill(E[k], id[k][0], p, 37, NULL, NULL, NULL), DSV4_OK);
  }
  const int64_t held0 = same_pages(E[0], E[1], "prefill");
  const dsv4i_kv_cache *kv0 = &((struct dsv4_engine *)E[0])->kv;
  const int64_t free0 = dsv4i_kv_pool_free_pages(kv0->pool);
  for (int k = 0; k < 2; k++) assert_int_equal(dsv4_engine_seq_fork(E[k], id[k][0], &id[k][1]), DSV4_OK);
  /* the fork holds as many pages as its parent, but took only fresh ring pages from the
   * pool: the compressed and index-key pages are shared */
  assert_int_equal(same_pages(E[0], E[1], "fork"), 2 * held0);
  assert_int_equal(free0 - dsv4i_kv_pool_free_pages(kv0->pool),
                   dsv4i_kv_pages_for(&kv0->lay, DSV4I_KV_WINDOW, 1) +
                       dsv4i_kv_pages_for(&kv0->lay, DSV4I_KV_CSTATE, 1));
  for (int k = 0; k < 2; k++) {
    assert_int_equal(dsv4_engine_seq_create(E[k], &id[k][2]), DSV4_OK);
    assert_int_equal(dsv4_engine_prefill(E[k], id[k][2], p + 5, 60, NULL, NULL, NULL), DSV4_OK);
  }
  same_pages(E[0], E[1], "second prefill");
  const int32_t t3[3] = {4, 5, 6};
  for (int step = 0; step < 12; step++) {
    for (int k = 0; k < 2; k++)
      assert_int_equal(dsv4_engine_decode(E[k], 3, id[k], t3, NULL, NULL, NULL), DSV4_OK);
    same_pages(E[0], E[1], "decode");
  }
  for (int k = 0; k < 2; k++) {
    assert_int_equal(dsv4_engine_seq_free(E[k], id[k][0]), DSV4_OK);
    assert_int_equal(dsv4_engine_seq_fork(E[k], id[k][1], &id[k][3]), DSV4_OK);
    assert_int_equal(dsv4_engine_seq_create(E[k], &id[k][0]), DSV4_OK);
  }
  same_pages(E[0], E[1], "free, fork, create");
  /* a step refused for capacity (the prompt passes max_context) changes nothing in either */
  for (int k = 0; k < 2; k++)
    assert_int_equal(dsv4_engine_prefill(E[k], id[k][2], p, 80, NULL, NULL, NULL),
                     DSV4_ERR_CONTEXT_OVERFLOW);
  for (int k = 0; k < 2; k++) {
    const int64_t ids4[4] = {id[k][0], id[k][1], id[k][2], id[k][3]};
    const int32_t t4[4] = {1, 2, 3, 4};
    assert_int_equal(dsv4_engine_decode(E[k], 4, ids4, t4, NULL, NULL, NULL), DSV4_OK);
  }
  same_pages(E[0], E[1], "refused prefill, decode of 4");
  dsv4_engine_free(E[0]);
  dsv4_engine_free(E[1]);
}

/* A failed page copy (the backend's kv_copy) is contained: a fork whose ring copies fail
 * creates nothing and gives its pages back; a decode whose copy-on-write fails leaves that
 * sequence damaged (refused until freed) while its parent and the engine go on, with the
 * parent's logits equal to a fresh engine's. */
static void kv_copy_failure_is_contained(void **st) {
  (void)st;
  const char *dir = tu_fixture_or_skip("tiny-v41-a");
  dsv4_engine *E = make_engine(dir, 3, 64), *F = make_engine(dir, 1, 64);
  struct dsv4_engine *e = E;
  const int32_t prompt[5] = {0, 17, 42, 99, 7}, next = 11;
  const int32_t V = e->vocab;
  float *la = malloc(sizeof(float) * (size_t)V), *lb = malloc(sizeof(float) * (size_t)V);
  int64_t a, b, f;
  int32_t tok;
  assert_int_equal(dsv4_engine_seq_create(E, &a), DSV4_OK);
  assert_int_equal(dsv4_engine_prefill(E, a, prompt, 5, NULL, NULL, NULL), DSV4_OK);
  const int64_t free0 = dsv4i_kv_pool_free_pages(e->kv.pool);
  dsv4i_cpu_backend_inject_copy_fault(e->be, DSV4_ERR_DEVICE);
  assert_int_equal(dsv4_engine_seq_fork(E, a, &b), DSV4_ERR_DEVICE);
  assert_non_null(strstr(dsv4_last_error(), "injected fault"));
  dsv4_engine_info info;
  assert_int_equal(dsv4_engine_get_info(E, &info, sizeof info), DSV4_OK);
  assert_int_equal(info.sequences_live, 1);
  assert_int_equal(dsv4i_kv_pool_free_pages(e->kv.pool), free0);
  /* the child shares the parent's compressed pages: its first decode copies one first */
  assert_int_equal(dsv4_engine_seq_fork(E, a, &b), DSV4_OK);
  dsv4i_cpu_backend_inject_copy_fault(e->be, DSV4_ERR_DEVICE);
  assert_int_equal(dsv4_engine_decode(E, 1, &b, &next, NULL, NULL, &tok), DSV4_ERR_DEVICE);
  assert_int_equal(dsv4_engine_decode(E, 1, &b, &next, NULL, NULL, &tok), DSV4_ERR_INVALID_ARG);
  assert_non_null(strstr(dsv4_last_error(), "left inconsistent"));
  assert_int_equal(dsv4_engine_decode(E, 1, &a, &next, NULL, la, NULL), DSV4_OK);
  assert_int_equal(dsv4_engine_seq_create(F, &f), DSV4_OK);
  assert_int_equal(dsv4_engine_prefill(F, f, prompt, 5, NULL, NULL, NULL), DSV4_OK);
  assert_int_equal(dsv4_engine_decode(F, 1, &f, &next, NULL, lb, NULL), DSV4_OK);
  assert_memory_equal(la, lb, sizeof(float) * (size_t)V);
  assert_int_equal(dsv4_engine_seq_free(E, b), DSV4_OK);
  assert_int_equal(dsv4_engine_seq_fork(E, a, &b), DSV4_OK); /* the engine is not sticky-failed */
  dsv4_engine_free(E);
  dsv4_engine_free(F);
  free(la);
  free(lb);
}

/* What the engine allocates equals the plan dsv4-plan --engine prints (dsv4_engine_plan_query,
 * the function create sizes its pools with), over a grid of requests and both window record
 * formats (kv_format); the pool the CPU backend actually allocated is measured.
 * tests/meson.build checks dsv4-plan's text for the first request (63 pages x 16384 B), in
 * both formats. */
static void allocation_equals_plan(void **st) {
  (void)st;
  const char *dir = tu_fixture_or_skip("tiny-v41-a");
  dsv4_model *m = NULL;
  assert_int_equal(dsv4_model_load(dir, NULL, &m), DSV4_OK);
  const struct { int32_t seqs; int64_t ctx; int64_t budget; } req[] = {
    {3, 128, 0}, {1, 16, 0}, {4, 200, 0}, {8, 64, 0}, {2, 256, 600000}, {5, 100, 2000000},
  };
  for (int32_t fmt = DSV4_KV_FORMAT_NATIVE; fmt <= DSV4_KV_FORMAT_FP8_DS_MLA; fmt++) {
    for (size_t r = 0; r < sizeof req / sizeof *req; r++) {
      dsv4_engine_params ep;
      assert_int_equal(dsv4_engine_params_init(&ep, sizeof ep), DSV4_OK);
      ep.kv_format = fmt;
      ep.max_sequences = req[r].seqs;
      ep.max_context = req[r].ctx;
      ep.kv_budget_bytes = req[r].budget;
      ep.n_threads = 1;
      dsv4_engine_info q, g;
      if (dsv4_engine_plan_query(m, &ep, &q, sizeof q)) fail_msg("query: %s", dsv4_last_error());
      dsv4_engine *E = NULL;
      assert_int_equal(dsv4_engine_create(m, &ep, &E), DSV4_OK);
      assert_int_equal(dsv4_engine_get_info(E, &g, sizeof g), DSV4_OK);
      const cpu_backend *cb = (const cpu_backend *)((struct dsv4_engine *)E)->be;
      const int64_t allocated = cb->pool_pages * (int64_t)cb->lay.page_bytes; /* its malloc */
      assert_int_equal(dsv4i_kv_pool_n_pages(((struct dsv4_engine *)E)->kv.pool), cb->pool_pages);
      printf("%s: %d seqs x %lld, budget %lld: plan %lld pages x %lld B, KV %lld B; allocated "
             "%lld B of pool\n", fmt ? "fp8_ds_mla" : "native", (int)req[r].seqs,
             (long long)req[r].ctx, (long long)req[r].budget,
             (long long)q.kv_pages_total, (long long)q.kv_page_bytes, (long long)q.kv_bytes,
             (long long)allocated);
      assert_int_equal(allocated, q.kv_pages_total * q.kv_page_bytes);
      assert_int_equal(cb->n_slots, q.max_sequences);
      assert_int_equal(g.kv_pages_total, q.kv_pages_total);
      assert_int_equal(g.kv_page_bytes, q.kv_page_bytes);
      assert_int_equal(g.kv_bytes, q.kv_bytes);
      assert_int_equal(g.kv_pages_per_sequence, q.kv_pages_per_sequence);
      assert_int_equal(g.workspace_bytes, q.workspace_bytes);
      assert_int_equal(g.prepared_weight_bytes, q.prepared_weight_bytes);
      if (req[r].budget == 0)
        assert_int_equal(q.kv_pages_total, q.kv_pages_per_sequence * req[r].seqs);
      /* the layout holds the format's window record: 132 B native, 200 B fp8_ds_mla (hd 128) */
      assert_int_equal(g.kv_format, fmt);
      assert_int_equal(q.kv_format, fmt);
      assert_int_equal(cb->lay.window_format, fmt);
      assert_int_equal(cb->lay.rec_bytes[DSV4I_KV_WINDOW], fmt ? 200 : 132);
      dsv4_engine_free(E);
    }
  }
  /* a request that cannot fit is refused by both the same way */
  dsv4_engine_params ep;
  assert_int_equal(dsv4_engine_params_init(&ep, sizeof ep), DSV4_OK);
  ep.max_sequences = 2;
  ep.max_context = 256;
  ep.kv_budget_bytes = 1000;
  dsv4_engine_info q;
  dsv4_engine *E = NULL;
  assert_int_equal(dsv4_engine_plan_query(m, &ep, &q, sizeof q), DSV4_ERR_DOES_NOT_FIT);
  assert_int_equal(dsv4_engine_create(m, &ep, &E), DSV4_ERR_DOES_NOT_FIT);
  assert_int_equal(dsv4_engine_plan_query(NULL, &ep, &q, sizeof q), DSV4_ERR_INVALID_ARG);
  /* below the 0.1 size (the struct ends at mapped_bytes there) */
  assert_int_equal(dsv4_engine_plan_query(m, &ep, &q, offsetof(dsv4_engine_info, comm_bytes) - 8),
                   DSV4_ERR_INVALID_ARG);
  dsv4_model_free(m);
}

int tu_run_suite(void) {
  const struct CMUnitTest tests[] = {
    cmocka_unit_test(stages_equal_whole),
    cmocka_unit_test(create_args_checked),
    cmocka_unit_test(device_lost_is_sticky),
    cmocka_unit_test(step_plan_buckets),
    cmocka_unit_test(page_decisions_deterministic),
    cmocka_unit_test(kv_copy_failure_is_contained),
    cmocka_unit_test(allocation_equals_plan),
  };
  return cmocka_run_group_tests_name("engine_core", tests, NULL, NULL);
}
