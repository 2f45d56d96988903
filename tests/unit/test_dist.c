/*
 * lib/dist without MPI: stage boundaries derived from the config's source
 * lists (release config and the tiny fixture), refused splits naming the
 * state that would cross, topology checks, and the stage payload (layout,
 * round trip, every header check, batch match), and the backends' storage
 * formats per pipeline stage.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backend/backend.h"
#include "dist/nccl.h"
#include "dist/payload.h"
#include "dist/topology.h"
#include "engine/plan.h"
#include "model/config.h"
#include "release_config.h"
#include "test_util.h"


static void expect_msg(dsv4_status got, dsv4_status want, const char *needle) {
  if (got != want) fail_msg("status %d, expected %d: %s", (int)got, (int)want, dsv4i_error_message());
  if (needle && !strstr(dsv4i_error_message(), needle))
    fail_msg("message lacks \"%s\": %s", needle, dsv4i_error_message());
  printf("  %s\n", dsv4i_error_message());
}

static void release_boundaries(void **state) {
  (void)state;
  dsv4i_config c;
  tu_load_release_config(&c);
  int32_t b[16];
  /* layers 0-1 publish no shared state; 2, 8, 14, 20 start a source chain */
  assert_int_equal(dsv4i_dist_boundaries(&c, b, 16), 5);
  const int32_t want[] = {1, 2, 8, 14, 20};
  for (int i = 0; i < 5; i++) assert_int_equal(b[i], want[i]);
  for (int32_t l = 1; l < c.n_layers; l++) {
    dsv4_status st = dsv4i_dist_split_check(&c, l);
    int allowed = 0;
    for (int i = 0; i < 5; i++) allowed |= want[i] == l;
    assert_int_equal(st, allowed ? DSV4_OK : DSV4_ERR_UNSUPPORTED);
  }
  /* the message names the reader, the state and its producer */
  expect_msg(dsv4i_dist_split_check(&c, 21), DSV4_ERR_UNSUPPORTED,
             "layer 21 reads the compressed KV (text_config.kv_source_layer_ids) of layer 20");
  expect_msg(dsv4i_dist_split_check(&c, 10), DSV4_ERR_UNSUPPORTED,
             "layer 10 reads the compressed KV");
  expect_msg(dsv4i_dist_split_check(&c, 24), DSV4_ERR_UNSUPPORTED, "allowed first layers: 1, 2, 8, 14, 20");
  expect_msg(dsv4i_dist_split_check(&c, 0), DSV4_ERR_INVALID_ARG, "[1, 40)");
  expect_msg(dsv4i_dist_split_check(&c, 40), DSV4_ERR_INVALID_ARG, NULL);
  /* derived, not fixed: with layer 8 no longer a KV source, layers 8-13 read layer 2's
   * compressed KV and the boundary at 8 goes away (index keys and candidates always come
   * from the latest KV source, so their crossings coincide with the KV one) */
  dsv4i_config d = c;
  d.n_kv_sources = 3;
  d.kv_sources[0] = 2;
  d.kv_sources[1] = 14;
  d.kv_sources[2] = 20;
  if (dsv4i_config_derive_roles(&d) != DSV4_OK) fail_msg("%s", dsv4i_error_message());
  expect_msg(dsv4i_dist_split_check(&d, 8), DSV4_ERR_UNSUPPORTED,
             "layer 8 reads the compressed KV (text_config.kv_source_layer_ids) of layer 2");
  assert_int_equal(dsv4i_dist_boundaries(&d, b, 16), 4);
}

static void dspark_tap_boundary(void **state) {
  (void)state;
  dsv4i_config c;
  tu_load_release_config(&c);
  /* taps at 19, 38, 39: a boundary at 20 would leave tap 19 on stage 0 */
  c.dspark_targets[0] = 19;
  assert_int_equal(dsv4i_config_derive_roles(&c), DSV4_OK);
  expect_msg(dsv4i_dist_split_check(&c, 20), DSV4_ERR_UNSUPPORTED,
             "the DSpark stages read the DSpark main_hidden tap");
  assert_int_equal(dsv4i_dist_split_check(&c, 14), DSV4_OK);
}

static void fixture_boundaries(void **state) {
  (void)state;
  dsv4i_config c;
  tu_load_fixture_config("tiny-v41-a", &c);
  int32_t b[16];
  assert_int_equal(dsv4i_dist_boundaries(&c, b, 16), 4);
  assert_int_equal(b[0], 1);
  assert_int_equal(b[1], 2);
  assert_int_equal(b[2], 4);
  assert_int_equal(b[3], 6);
}

/* The plan's workspace at 64 batch tokens and 4 output rows. */
static int64_t ws_of(const dsv4i_cache_format *f) {
  int64_t bytes = 0;
  assert_true(dsv4i_plan_workspace(f, 64, 4, &bytes));
  return bytes;
}

/* The PP2 split 0-3 | 4-9 of the fixture: each backend's format per stage counts the
 * stage's own pages and prepared weights (they add up to one process's), and the CUDA
 * workspace of stage 0 leaves out what only the last stage runs (DSpark drafts, head). */
static void stage_formats(void **state) {
  (void)state;
  dsv4i_config c;
  tu_load_fixture_config("tiny-v41-a", &c);
  const dsv4i_model_part p0 = {0, 4, 0, 1}, p1 = {4, c.n_layers, 0, 1};
  static const int32_t kinds[2] = {DSV4_BACKEND_CPU, DSV4_BACKEND_CUDA};
  for (int k = 0; k < 2; k++) {
    dsv4i_cache_format all, f0, f1;
    const dsv4_status s =
        dsv4i_backend_format(kinds[k], &c, 4096, NULL, DSV4I_KV_NATIVE, &all);
    if (s == DSV4_ERR_UNSUPPORTED && kinds[k] == DSV4_BACKEND_CUDA) {
      printf("cuda: not built into this library (no nvcc at configure time)\n");
      continue;
    }
    assert_int_equal(s, DSV4_OK);
    assert_int_equal(dsv4i_backend_format(kinds[k], &c, 4096, &p0, DSV4I_KV_NATIVE, &f0),
                     DSV4_OK);
    assert_int_equal(dsv4i_backend_format(kinds[k], &c, 4096, &p1, DSV4I_KV_NATIVE, &f1),
                     DSV4_OK);
    const int64_t a0 = ws_of(&f0), a1 = ws_of(&f1), a = ws_of(&all);
    printf("%s: pages per sequence %lld + %lld = %lld; prepared weights %lld + %lld = %lld; "
           "workspace at 64 tokens, 4 output rows %lld | %lld (one process %lld)\n",
           kinds[k] == DSV4_BACKEND_CPU ? "cpu" : "cuda", (long long)f0.seq_pages,
           (long long)f1.seq_pages, (long long)all.seq_pages, (long long)f0.weight_bytes,
           (long long)f1.weight_bytes, (long long)all.weight_bytes, (long long)a0, (long long)a1,
           (long long)a);
    assert_int_equal(f0.seq_pages + f1.seq_pages, all.seq_pages);
    assert_int_equal(f0.weight_bytes + f1.weight_bytes, all.weight_bytes);
    assert_true(f0.weight_bytes > 0 && f1.weight_bytes > f0.weight_bytes);
    assert_true(a0 <= a && a1 <= a);
    if (kinds[k] == DSV4_BACKEND_CUDA) assert_true(a0 < a1); /* no draft rows on stage 0 */
  }
}

static void topology(void **state) {
  (void)state;
  dsv4i_config c;
  tu_load_release_config(&c);
  dsv4i_dist_topo t;
  int32_t first[4] = {0, 20};
  assert_int_equal(dsv4i_dist_topo_make(&c, 16, 8, 2, first, &t), DSV4_OK);
  assert_int_equal(t.first[2], 40);
  dsv4i_dist_place p;
  dsv4i_dist_place_of(&t, 9, &p);
  assert_int_equal(p.stage, 1);
  assert_int_equal(p.tp_rank, 1);
  assert_int_equal(p.first, 20);
  assert_int_equal(p.last, 40);
  assert_false(p.has_embed);
  assert_true(p.has_head);
  dsv4i_dist_place_of(&t, 7, &p);
  assert_int_equal(p.stage, 0);
  assert_true(p.has_embed);
  assert_false(p.has_head);
  assert_int_equal(dsv4i_dist_stage_of_layer(&t, 19), 0);
  assert_int_equal(dsv4i_dist_stage_of_layer(&t, 20), 1);
  /* wrong rank count, bad split, TP the split rules refuse, order */
  expect_msg(dsv4i_dist_topo_make(&c, 8, 8, 2, first, &t), DSV4_ERR_INVALID_ARG,
             "the communicator has 8");
  first[1] = 21;
  expect_msg(dsv4i_dist_topo_make(&c, 16, 8, 2, first, &t), DSV4_ERR_UNSUPPORTED,
             "topology, stage 1: a stage cannot start at layer 21");
  assert_int_equal(t.world, 0);
  first[1] = 20;
  expect_msg(dsv4i_dist_topo_make(&c, 6, 3, 2, first, &t), DSV4_ERR_UNSUPPORTED,
             "TP 3 must divide");
  int32_t bad[3] = {0, 20, 14};
  expect_msg(dsv4i_dist_topo_make(&c, 3, 1, 3, bad, &t), DSV4_ERR_INVALID_ARG, "must increase");
  bad[0] = 2;
  expect_msg(dsv4i_dist_topo_make(&c, 3, 1, 3, bad, &t), DSV4_ERR_INVALID_ARG,
             "stage 0 must start at layer 0");
  int32_t one[1] = {0};
  assert_int_equal(dsv4i_dist_topo_make(&c, 1, 1, 1, one, &t), DSV4_OK);
  dsv4i_dist_place_of(&t, 0, &p);
  assert_true(p.has_embed && p.has_head);
  assert_int_equal(p.last, 40);
}

/* ---- payload ---------------------------------------------------------------- */

enum { NT = 3, NO = 2, HC = 4, DIM = 8, NE = 5 };

typedef struct batch {
  int32_t tokens[NT], slot[NT], layout[NT], out[NO];
  int64_t pos[NT], seq[NT], engram[NT * NE];
  uint8_t image[NT];
} batch;

static void fill(batch *b, dsv4i_payload_meta *m) {
  for (int i = 0; i < NT; i++) {
    b->tokens[i] = 100 + i;
    b->slot[i] = i % 2;
    b->layout[i] = 0;
    b->pos[i] = 7 + i;
    b->seq[i] = (INT64_C(1) << 16) + i % 2;
    b->image[i] = i == 1;
    for (int c = 0; c < NE; c++) b->engram[i * NE + c] = 1000000000000LL + i * 10 + c;
  }
  b->out[0] = 1;
  b->out[1] = 2;
  memset(m, 0, sizeof *m);
  m->step = 42;
  m->from_stage = 0;
  m->to_stage = 1;
  m->first_layer = 20;
  m->n_tok = NT;
  m->n_out = NO;
  m->hc = HC;
  m->dim = DIM;
  m->n_engram = NE;
  m->tokens = b->tokens;
  m->pos = b->pos;
  m->seq = b->seq;
  m->slot = b->slot;
  m->layout = b->layout;
  m->image = b->image;
  m->out = b->out;
  m->engram = b->engram;
}

static void payload_round_trip(void **state) {
  (void)state;
  batch b;
  dsv4i_payload_meta m;
  fill(&b, &m);
  uint64_t total = dsv4i_payload_bytes(NT, NO, HC, DIM, NE);
  /* header + every section 8-aligned */
  uint64_t want = ((sizeof(dsv4i_payload_hdr) + 7) & ~7u) + NT * HC * DIM * 2 + NT * HC * 4 +
                  16 + 24 + 24 + 16 + 16 + 8 + 8 + NT * NE * 8;
  assert_int_equal(total, want);
  uint64_t *buf = calloc(1, total);
  dsv4i_payload_hdr h;
  expect_msg(dsv4i_payload_write(buf, total - 1, &m, &h), DSV4_ERR_INVALID_ARG, "do not fit");
  assert_int_equal(dsv4i_payload_write(buf, total, &m, &h), DSV4_OK);
  assert_int_equal(h.total_bytes, total);
  uint16_t *hh = (uint16_t *)((uint8_t *)buf + h.off_h);
  float *pre = (float *)((uint8_t *)buf + h.off_pre);
  for (int i = 0; i < NT * HC * DIM; i++) hh[i] = (uint16_t)(0x3f80 + i);
  for (int i = 0; i < NT * HC; i++) pre[i] = 0.25f * (float)i;
  dsv4i_payload_view v;
  assert_int_equal(dsv4i_payload_check(buf, total, &m, &v), DSV4_OK);
  assert_int_equal(v.h[5], 0x3f85);
  assert_true(v.pre[3] == 0.75f);
  assert_int_equal(v.tokens[2], 102);
  assert_int_equal(v.pos[1], 8);
  assert_int_equal(v.engram[NT * NE - 1], b.engram[NT * NE - 1]);
  assert_int_equal(v.image[1], 1);
  assert_int_equal(dsv4i_payload_match(&v, &m), DSV4_OK);
  /* the receiver's batch differs: token ids, positions, slots, outputs */
  batch b2 = b;
  dsv4i_payload_meta m2 = m;
  m2.tokens = b2.tokens;
  m2.pos = b2.pos;
  m2.out = b2.out;
  m2.engram = b2.engram;
  b2.tokens[2] = 5;
  expect_msg(dsv4i_payload_match(&v, &m2), DSV4_ERR_RANK_MISMATCH,
             "the token id of token 2 is 102, this rank has 5");
  b2.tokens[2] = 102;
  b2.pos[0] = 6;
  expect_msg(dsv4i_payload_match(&v, &m2), DSV4_ERR_RANK_MISMATCH, "the position of token 0");
  b2.pos[0] = 7;
  b2.engram[4] = 1;
  expect_msg(dsv4i_payload_match(&v, &m2), DSV4_ERR_RANK_MISMATCH, "an Engram row id of token 0");
  b2.engram[4] = b.engram[4];
  b2.out[1] = 0;
  expect_msg(dsv4i_payload_match(&v, &m2), DSV4_ERR_RANK_MISMATCH, "the output row index");
  /* a receiver that hashes nothing itself does not compare row ids */
  b2.out[1] = 2;
  m2.engram = NULL;
  m2.n_engram = 0;
  assert_int_equal(dsv4i_payload_match(&v, &m2), DSV4_OK);
  free(buf);
}

static void payload_checks(void **state) {
  (void)state;
  batch b;
  dsv4i_payload_meta m;
  fill(&b, &m);
  m.n_engram = 0;
  m.engram = NULL;
  m.image = NULL;
  uint64_t total = dsv4i_payload_bytes(NT, NO, HC, DIM, 0);
  uint64_t *buf = calloc(1, total + 64);
  dsv4i_payload_hdr h;
  assert_int_equal(dsv4i_payload_write(buf, total, &m, &h), DSV4_OK);
  dsv4i_payload_view v;
  assert_int_equal(dsv4i_payload_check(buf, total, &m, &v), DSV4_OK);
  assert_null(v.engram);
  assert_int_equal(v.image[1], 0);
  /* what the receiver expects differs */
  dsv4i_payload_meta ex = m;
  ex.step = 43;
  expect_msg(dsv4i_payload_check(buf, total, &ex, &v), DSV4_ERR_RANK_MISMATCH,
             "the step serial is 42, this rank (stage 1) expects 43");
  ex = m;
  ex.dim = 16;
  expect_msg(dsv4i_payload_check(buf, total, &ex, &v), DSV4_ERR_RANK_MISMATCH, "dim is 8");
  ex = m;
  ex.n_tok = 2;
  expect_msg(dsv4i_payload_check(buf, total, &ex, &v), DSV4_ERR_RANK_MISMATCH, "the token count");
  ex = m;
  ex.first_layer = 14;
  expect_msg(dsv4i_payload_check(buf, total, &ex, &v), DSV4_ERR_RANK_MISMATCH, "first layer");
  ex = m;
  ex.n_engram = 24;
  expect_msg(dsv4i_payload_check(buf, total, &ex, &v), DSV4_ERR_RANK_MISMATCH, "Engram columns");
  /* sizes: short, long, truncated header */
  expect_msg(dsv4i_payload_check(buf, total - 8, &m, &v), DSV4_ERR_RANK_MISMATCH, "received size");
  expect_msg(dsv4i_payload_check(buf, total + 8, &m, &v), DSV4_ERR_RANK_MISMATCH, "received size");
  expect_msg(dsv4i_payload_check(buf, 8, &m, &v), DSV4_ERR_RANK_MISMATCH, "message size");
  /* another version, a foreign message, a tampered size or offset */
  dsv4i_payload_hdr *hp = (dsv4i_payload_hdr *)buf;
  hp->version = 2;
  expect_msg(dsv4i_payload_check(buf, total, &m, &v), DSV4_ERR_RANK_MISMATCH,
             "version 2, this rank speaks version 1");
  hp->version = DSV4I_PAYLOAD_VERSION;
  hp->magic ^= 1;
  expect_msg(dsv4i_payload_check(buf, total, &m, &v), DSV4_ERR_RANK_MISMATCH, "magic");
  hp->magic ^= 1;
  hp->total_bytes += 8;
  expect_msg(dsv4i_payload_check(buf, total, &m, &v), DSV4_ERR_RANK_MISMATCH, "total size");
  hp->total_bytes -= 8;
  hp->off_out += 8;
  expect_msg(dsv4i_payload_check(buf, total, &m, &v), DSV4_ERR_RANK_MISMATCH, "section offsets");
  hp->off_out -= 8;
  hp->hdr_bytes += 4;
  expect_msg(dsv4i_payload_check(buf, total, &m, &v), DSV4_ERR_RANK_MISMATCH, "header size");
  hp->hdr_bytes -= 4;
  assert_int_equal(dsv4i_payload_check(buf, total, &m, &v), DSV4_OK);
  /* a failure notice: the header alone, the sender's status named */
  uint64_t note[32];
  size_t nb = dsv4i_payload_write_failure(note, sizeof note, &m, DSV4_ERR_OUT_OF_MEMORY);
  assert_int_equal(nb, sizeof(dsv4i_payload_hdr));
  assert_int_equal(dsv4i_payload_write_failure(note, 8, &m, DSV4_ERR_OUT_OF_MEMORY), 0);
  expect_msg(dsv4i_payload_check(note, nb, &m, &v), DSV4_ERR_RANK_FAILED,
             "stage 0 failed step 42 (DSV4_ERR_OUT_OF_MEMORY");
  ex = m;
  ex.step = 41;
  expect_msg(dsv4i_payload_check(note, nb, &ex, &v), DSV4_ERR_RANK_MISMATCH, "failure notice");
  /* bad shapes are refused when writing */
  m.n_out = NT + 1;
  expect_msg(dsv4i_payload_write(buf, total, &m, &h), DSV4_ERR_INVALID_ARG, "invalid shape");
  m.n_out = NO;
  m.n_tok = 0;
  expect_msg(dsv4i_payload_write(buf, total, &m, &h), DSV4_ERR_INVALID_ARG, "invalid shape");
  m.n_tok = NT;
  m.pos = NULL;
  expect_msg(dsv4i_payload_write(buf, total, &m, &h), DSV4_ERR_INVALID_ARG, "NULL");
  assert_int_equal(dsv4i_payload_bytes(INT32_MAX, 0, 4, INT32_MAX, 0), 0);
  free(buf);
}

/* NCCL is opened at run time: either it loads (version checked) or the status says it is
 * absent; algorithm and protocol are pinned unless the environment fixes them. */
static void nccl_loader(void **state) {
  (void)state;
  const dsv4i_nccl *lib = NULL;
  dsv4_status st = dsv4i_nccl_open(&lib);
  printf("  nccl: status %d, %s\n", (int)st, st ? dsv4i_error_message() : "loaded");
  if (st == DSV4_OK) {
    assert_non_null(lib);
    assert_true(lib->version >= DSV4I_NCCL_MIN_VERSION);
    assert_non_null(lib->AllReduce);
    printf("  NCCL version %d\n", lib->version);
  } else {
    assert_int_equal(st, DSV4_ERR_NO_DEVICE);
    assert_null(lib);
    assert_non_null(strstr(dsv4i_error_message(), "libnccl.so.2 could not be opened"));
  }
  /* the same answer the second time (opened once) */
  const dsv4i_nccl *again = NULL;
  assert_int_equal(dsv4i_nccl_open(&again), st);
  assert_ptr_equal(again, lib);
  unsetenv("NCCL_ALGO");
  setenv("NCCL_PROTO", "LL", 1);
  const char *algo, *proto;
  dsv4i_nccl_pin(&algo, &proto);
  assert_string_equal(algo, "Ring");
  assert_string_equal(proto, "LL"); /* the environment's choice is kept, and is fixed now */
  assert_string_equal(getenv("NCCL_ALGO"), "Ring");
  unsetenv("NCCL_PROTO");
  dsv4i_nccl_pin(&algo, &proto);
  assert_string_equal(proto, "Simple");
}

int tu_run_suite(void) {
  const struct CMUnitTest tests[] = {
    cmocka_unit_test(release_boundaries), cmocka_unit_test(dspark_tap_boundary),
    cmocka_unit_test(fixture_boundaries), cmocka_unit_test(topology),
    cmocka_unit_test(payload_round_trip), cmocka_unit_test(payload_checks),
    cmocka_unit_test(nccl_loader),        cmocka_unit_test(stage_formats),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
