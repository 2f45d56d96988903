/*
 * Allocation-failure injection (build with -Dfault_injection=true, under
 * ASan/LSan: .ci/steps/65-fault-injection.sh). For every N, the N-th
 * allocation of one call fails: model load, tokenizer load, engine create,
 * prefill, decode, draft and verify on the tiny e2e fixture. Each must
 * return DSV4_ERR_OUT_OF_MEMORY with a message, leave nothing allocated
 * (LeakSanitizer at exit) and, for the calls on an engine, leave the engine
 * and the sequence as they were: the same call without the fault then gives
 * the reference result. The loop ends at the first N the call gets through
 * (it made fewer than N allocations). Only the library's own allocations
 * are injected: jansson turns some of its allocation failures into syntax
 * errors (DSV4_ERR_JSON: its lexer reports a failed buffer append as an
 * unexpected token), and PCRE2 and utf8proc allocate for themselves.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/base.h"
#include "test_util.h"

#define FIX "tiny-v41-e2e-a"
#define MAXB 64

static const int32_t k_prompt[] = {0, 17, 42, 99, 5, 300, 7, 12, 64, 3, 211, 9};

typedef struct ctx {
  const char *dir;
  dsv4_model *model;
  dsv4_engine *e;
  int64_t id;
  int32_t B, tok, ref_next, ref_decode, ref_drafts[MAXB], ref_acc, ref_vnext;
  int64_t parent; /* a prefilled sequence (12 positions) the steps fork from */
} ctx;

/* Run op with the n-th allocation failing for n = 1, 2, ...: every failure
 * must be DSV4_ERR_OUT_OF_MEMORY and `after` must hold; returns the count. */
typedef dsv4_status (*op_fn)(ctx *c);
typedef void (*check_fn)(ctx *c, dsv4_status st);

static long sweep(const char *name, ctx *c, op_fn op, check_fn after) {
  long n = 1;
  for (;; n++) {
    dsv4i_fault_arm(n);
    const dsv4_status st = op(c);
    const int fired = dsv4i_fault_fired();
    dsv4i_fault_arm(0);
    if (!fired) {
      if (st != DSV4_OK) fail_msg("%s: status %d without a fault: %s", name, st, dsv4_last_error());
      after(c, st);
      break;
    }
    if (st != DSV4_ERR_OUT_OF_MEMORY)
      fail_msg("%s: allocation %ld failed, status %d (%s): %s", name, n, st, dsv4_status_string(st),
               dsv4_last_error());
    after(c, st);
  }
  print_message("  %s: %ld allocations, each failure gave DSV4_ERR_OUT_OF_MEMORY\n", name, n - 1);
  assert_true(n > 1);
  return n - 1;
}

/* ---- loads: nothing is returned on failure ---------------------------------- */

static dsv4_model *g_m;
static dsv4_status op_model_load(ctx *c) { return dsv4_model_load(c->dir, NULL, &g_m); }
static void after_model_load(ctx *c, dsv4_status st) {
  (void)c;
  if (st) assert_null(g_m);
  dsv4_model_free(g_m);
  g_m = NULL;
}

static dsv4_tokenizer *g_t;
static dsv4_status op_tok_load(ctx *c) { return dsv4_tokenizer_load(c->dir, &g_t); }
static void after_tok_load(ctx *c, dsv4_status st) {
  (void)c;
  if (st) assert_null(g_t);
  dsv4_tokenizer_free(g_t);
  g_t = NULL;
}

static dsv4_engine *g_e;
static dsv4_engine_params g_ep;
static dsv4_status op_engine_create(ctx *c) { return dsv4_engine_create(c->model, &g_ep, &g_e); }
static void after_engine_create(ctx *c, dsv4_status st) {
  (void)c;
  if (st) assert_null(g_e);
  dsv4_engine_free(g_e);
  g_e = NULL;
}

/* ---- engine calls: nothing changes on failure -------------------------------- */

/* After a failed call: the API rolls the sequence back, or (when its caches
 * cannot be) marks it damaged: then every call but free refuses it with
 * DSV4_ERR_INVALID_ARG. Retry the call; 1 = it worked, 0 = damaged. */
static long g_damaged;
static int retry(ctx *c, dsv4_status (*op)(ctx *)) {
  const dsv4_status st = op(c);
  if (st == DSV4_ERR_INVALID_ARG && strstr(dsv4_last_error(), "damaged")) {
    g_damaged++;
    return 0;
  }
  if (st != DSV4_OK) fail_msg("retry without a fault: status %d: %s", st, dsv4_last_error());
  return 1;
}

static int64_t seq_len(ctx *c) {
  int64_t n = -1;
  assert_int_equal(dsv4_engine_seq_length(c->e, c->id, &n), DSV4_OK);
  return n;
}

static dsv4_status op_prefill(ctx *c) {
  return dsv4_engine_prefill(c->e, c->id, k_prompt, 12, NULL, NULL, &c->tok);
}
static void after_prefill(ctx *c, dsv4_status st) {
  if (!st || retry(c, op_prefill)) { /* usable: the same call now works */
    assert_int_equal(seq_len(c), 12);
    assert_int_equal(c->tok, c->ref_next);
  }
  assert_int_equal(dsv4_engine_seq_free(c->e, c->id), DSV4_OK); /* fresh sequence for the next N */
  assert_int_equal(dsv4_engine_seq_create(c->e, &c->id), DSV4_OK);
}

static dsv4_status op_decode(ctx *c) {
  return dsv4_engine_decode(c->e, 1, &c->id, &c->ref_next, NULL, NULL, &c->tok);
}
static void after_decode(ctx *c, dsv4_status st) {
  if (!st || retry(c, op_decode)) {
    assert_int_equal(seq_len(c), 13);
    assert_int_equal(c->tok, c->ref_decode);
  }
  /* back to the prefilled state: a fork of the parent kept at 12 positions */
  assert_int_equal(dsv4_engine_seq_free(c->e, c->id), DSV4_OK);
  assert_int_equal(dsv4_engine_seq_fork(c->e, c->parent, &c->id), DSV4_OK);
}

static int32_t g_drafts[MAXB];
static dsv4_status op_draft(ctx *c) {
  return dsv4_engine_draft(c->e, 1, &c->id, &c->ref_next, NULL, g_drafts, NULL);
}
static void after_draft(ctx *c, dsv4_status st) {
  if (!st || retry(c, op_draft)) {
    assert_int_equal(seq_len(c), 12);
    assert_memory_equal(g_drafts, c->ref_drafts, sizeof(int32_t) * (size_t)c->B);
  } else {
    assert_int_equal(dsv4_engine_seq_free(c->e, c->id), DSV4_OK);
    assert_int_equal(dsv4_engine_seq_fork(c->e, c->parent, &c->id), DSV4_OK);
  }
}

static int32_t g_acc, g_vnext;
static dsv4_status op_verify(ctx *c) {
  return dsv4_engine_verify(c->e, 1, &c->id, &c->ref_next, &c->B, c->ref_drafts, NULL, &g_acc, &g_vnext);
}
static void after_verify(ctx *c, dsv4_status st) {
  if (!st || retry(c, op_verify)) {
    assert_int_equal(seq_len(c), 12 + 1 + c->ref_acc);
    assert_int_equal(g_acc, c->ref_acc);
    assert_int_equal(g_vnext, c->ref_vnext);
  }
  assert_int_equal(dsv4_engine_seq_free(c->e, c->id), DSV4_OK);
  assert_int_equal(dsv4_engine_seq_fork(c->e, c->parent, &c->id), DSV4_OK);
  assert_int_equal(op_draft(c), DSV4_OK); /* verify checks the drafts against the last draft */
}

static void every_allocation_fails_cleanly(void **state) {
  (void)state;
  ctx c;
  memset(&c, 0, sizeof c);
  c.dir = tu_fixture_or_skip(FIX);
  sweep("model load", &c, op_model_load, after_model_load);
  sweep("tokenizer load", &c, op_tok_load, after_tok_load);

  assert_int_equal(dsv4_model_load(c.dir, NULL, &c.model), DSV4_OK);
  dsv4_model_info mi;
  assert_int_equal(dsv4_model_get_info(c.model, &mi, sizeof mi), DSV4_OK);
  c.B = mi.dspark_block_size;
  assert_true(c.B >= 1 && c.B <= MAXB);
  assert_int_equal(dsv4_engine_params_init(&g_ep, sizeof g_ep), DSV4_OK);
  g_ep.max_sequences = 3;
  g_ep.max_context = 64;
  g_ep.n_threads = 1; /* one allocation order */
  sweep("engine create", &c, op_engine_create, after_engine_create);

  /* references, computed without faults */
  assert_int_equal(dsv4_engine_create(c.model, &g_ep, &c.e), DSV4_OK);
  int64_t parent;
  assert_int_equal(dsv4_engine_seq_create(c.e, &parent), DSV4_OK);
  assert_int_equal(dsv4_engine_prefill(c.e, parent, k_prompt, 12, NULL, NULL, &c.ref_next), DSV4_OK);
  c.parent = parent; /* the prefilled parent every later step forks from */
  assert_int_equal(dsv4_engine_seq_fork(c.e, parent, &c.id), DSV4_OK);
  assert_int_equal(op_decode(&c), DSV4_OK);
  c.ref_decode = c.tok;
  assert_int_equal(dsv4_engine_seq_free(c.e, c.id), DSV4_OK);
  assert_int_equal(dsv4_engine_seq_fork(c.e, parent, &c.id), DSV4_OK);
  assert_int_equal(op_draft(&c), DSV4_OK);
  memcpy(c.ref_drafts, g_drafts, sizeof g_drafts);
  assert_int_equal(op_verify(&c), DSV4_OK);
  c.ref_acc = g_acc;
  c.ref_vnext = g_vnext;
  assert_int_equal(dsv4_engine_seq_free(c.e, c.id), DSV4_OK);

  assert_int_equal(dsv4_engine_seq_create(c.e, &c.id), DSV4_OK);
  sweep("prefill", &c, op_prefill, after_prefill);
  assert_int_equal(dsv4_engine_seq_free(c.e, c.id), DSV4_OK);
  assert_int_equal(dsv4_engine_seq_fork(c.e, parent, &c.id), DSV4_OK);
  sweep("decode", &c, op_decode, after_decode);
  sweep("draft", &c, op_draft, after_draft);
  assert_int_equal(op_draft(&c), DSV4_OK);
  sweep("verify", &c, op_verify, after_verify);
  print_message("  sequences marked damaged (API: rolled back or damaged): %ld\n", g_damaged);
  dsv4_engine_free(c.e);
  dsv4_model_free(c.model);
}

int tu_run_suite(void) {
  const struct CMUnitTest tests[] = {
    cmocka_unit_test(every_allocation_fails_cleanly),
  };
  return cmocka_run_group_tests_name("fault_injection", tests, NULL, NULL);
}
