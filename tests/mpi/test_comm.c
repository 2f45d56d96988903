/*
 * lib/dist/comm under mpirun (suite mpi; any number of ranks >= 2): the
 * deterministic all-reduce, point-to-point stage payloads checked at the
 * receiver, agreement on named values (a rank that disagrees gets the same
 * DSV4_ERR_RANK_MISMATCH on every rank), a rank's local failure reported on
 * every rank, and a stalled rank reported within the timeout on every rank
 * (never a hang). Every rank runs the same cmocka tests.
 */
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "dist/comm.h"
#include "dist/nccl.h"
#include "dist/payload.h"
#include "test_util.h"

static int g_rank, g_size;
static MPI_Comm g_world;

static double now_s(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static dsv4i_comm *make(int32_t timeout_ms) {
  dsv4i_comm *c = NULL;
  dsv4_status st = dsv4i_comm_create(&g_world, timeout_ms, &c);
  if (st) fail_msg("rank %d: create: %s", g_rank, dsv4i_error_message());
  assert_int_equal(dsv4i_comm_rank(c), g_rank);
  assert_int_equal(dsv4i_comm_size(c), g_size);
  return c;
}

static void create_checks(void **state) {
  (void)state;
  dsv4i_comm *c = NULL;
  MPI_Comm null = MPI_COMM_NULL;
  assert_int_equal(dsv4i_comm_create(&null, 1000, &c), DSV4_ERR_INVALID_ARG);
  assert_int_equal(dsv4i_comm_create(NULL, 1000, &c), DSV4_ERR_INVALID_ARG);
  assert_int_equal(dsv4i_comm_create(&g_world, 0, &c), DSV4_ERR_INVALID_ARG);
  assert_null(c);
}

/* Sum of values that round differently in every order: the result is the rank-order sum,
 * bit-identical on every rank. */
static void allreduce_deterministic(void **state) {
  (void)state;
  dsv4i_comm *c = make(30000);
  enum { N = 1000 };
  float x[N], want[N];
  for (int i = 0; i < N; i++) {
    want[i] = 0;
    for (int r = 0; r < g_size; r++) {
      float v = (float)((r * 7919 + i * 104729) % 1000003) * (r % 2 ? 1e-7f : 3.1f) + 0.1f * (float)r;
      if (r == g_rank) x[i] = v;
      want[i] = r == 0 ? v : want[i] + v;
    }
  }
  assert_int_equal(dsv4i_comm_allreduce_f32(c, x, N), DSV4_OK);
  assert_memory_equal(x, want, sizeof x);
  /* the same bits on every rank */
  float *all = malloc(sizeof x * (size_t)g_size);
  assert_int_equal(dsv4i_comm_allgather(c, x, sizeof x, all, "test"), DSV4_OK);
  for (int r = 1; r < g_size; r++) assert_memory_equal(all, all + (size_t)r * N, sizeof x);
  free(all);
  dsv4i_comm_stats s;
  dsv4i_comm_stats_get(c, &s);
  assert_int_equal(s.allreduce_calls, 1);
  assert_int_equal(s.allreduce_bytes, sizeof x);
  /* a TP group of ranks {0,1}, {2,3}, ...: sub-communicators reduce separately */
  dsv4i_comm *tp = NULL;
  assert_int_equal(dsv4i_comm_split(c, g_rank / 2, g_rank, &tp), DSV4_OK);
  float y = (float)g_rank;
  assert_int_equal(dsv4i_comm_allreduce_f32(tp, &y, 1), DSV4_OK);
  int lo = g_rank / 2 * 2;
  float wy = lo + 1 < g_size ? (float)(2 * lo + 1) : (float)lo;
  assert_true(y == wy);
  dsv4i_comm_free(tp);
  dsv4i_comm_free(c);
}

/* Stage r sends a payload to stage r+1, which checks it and its batch. */
static void payload_send_recv(void **state) {
  (void)state;
  dsv4i_comm *c = make(30000);
  int32_t tokens[2] = {11, 12}, slot[2] = {0, 1}, layout[2] = {0, 0}, out[2] = {0, 1};
  int64_t pos[2] = {5, 9}, seq[2] = {65537, 65538};
  dsv4i_payload_meta m = {.step = 3, .n_tok = 2, .n_out = 2, .hc = 4, .dim = 16,
                          .tokens = tokens, .pos = pos, .seq = seq, .slot = slot,
                          .layout = layout, .out = out};
  uint64_t bytes = dsv4i_payload_bytes(2, 2, 4, 16, 0);
  uint64_t *buf = calloc(1, bytes + 64);
  if (g_rank + 1 < g_size) {
    m.from_stage = g_rank;
    m.to_stage = g_rank + 1;
    dsv4i_payload_hdr h;
    assert_int_equal(dsv4i_payload_write(buf, bytes, &m, &h), DSV4_OK);
    uint16_t *hh = (uint16_t *)((uint8_t *)buf + h.off_h);
    for (int i = 0; i < 2 * 4 * 16; i++) hh[i] = (uint16_t)(i + g_rank);
    assert_int_equal(dsv4i_comm_send(c, g_rank + 1, 7, buf, bytes, "sending the payload"), DSV4_OK);
  }
  if (g_rank > 0) {
    m.from_stage = g_rank - 1;
    m.to_stage = g_rank;
    size_t got = 0;
    memset(buf, 0, bytes);
    assert_int_equal(dsv4i_comm_recv(c, g_rank - 1, 7, buf, bytes + 64, &got, "receiving the payload"),
                     DSV4_OK);
    dsv4i_payload_view v;
    assert_int_equal(dsv4i_payload_check(buf, got, &m, &v), DSV4_OK);
    assert_int_equal(dsv4i_payload_match(&v, &m), DSV4_OK);
    assert_int_equal(v.h[10], 10 + g_rank - 1);
  }
  /* a message longer than the receiver's buffer: a mismatch, not a crash */
  if (g_rank == 0) {
    assert_int_equal(dsv4i_comm_send(c, 1, 8, buf, bytes, "sending"), DSV4_OK);
  } else if (g_rank == 1) {
    size_t got = 0;
    dsv4_status st = dsv4i_comm_recv(c, 0, 8, buf, bytes / 2, &got, "receiving a short buffer");
    printf("  rank 1: %s\n", dsv4i_error_message());
    assert_int_equal(st, DSV4_ERR_RANK_MISMATCH);
    assert_int_equal(dsv4i_comm_failed(c), DSV4_ERR_RANK_MISMATCH);
  }
  free(buf);
  dsv4i_comm_free(c);
}

/* Ranks disagree on one value: the same message on every rank. */
static void agreement(void **state) {
  (void)state;
  dsv4i_comm *c = make(30000);
  const char *names[3] = {"checkpoint fingerprint", "max_context", "topology"};
  uint64_t v[3] = {0x1234, 256, 2};
  assert_int_equal(dsv4i_comm_agree(c, 3, names, v, "creating the engine"), DSV4_OK);
  if (g_rank == g_size - 1) v[1] = 128;
  assert_int_equal(dsv4i_comm_agree(c, 3, names, v, "creating the engine"), DSV4_ERR_RANK_MISMATCH);
  char want[200];
  snprintf(want, sizeof want, "max_context: rank 0 has 256, rank %d has 128", g_size - 1);
  printf("  rank %d: %s\n", g_rank, dsv4i_error_message());
  assert_non_null(strstr(dsv4i_error_message(), want));
  /* a rank checking another list (another build) */
  int32_t n = g_rank == 1 ? 2 : 3;
  assert_int_equal(dsv4i_comm_agree(c, n, names, v, "creating the engine"), DSV4_ERR_RANK_MISMATCH);
  assert_non_null(strstr(dsv4i_error_message(), "rank 1 checks another list"));
  dsv4i_comm_free(c);
}

/* One rank fails locally: it keeps its own status, the others learn who and why. */
static void failed_rank_status(void **state) {
  (void)state;
  dsv4i_comm *c = make(30000);
  dsv4_status local = DSV4_OK;
  if (g_rank == 1) local = dsv4i_error(DSV4_ERR_NOT_FOUND, "model dir /x: config.json is absent");
  dsv4_status st = dsv4i_comm_agree_status(c, local, "loading the model");
  printf("  rank %d: %s\n", g_rank, dsv4i_error_message());
  if (g_rank == 1) {
    assert_int_equal(st, DSV4_ERR_NOT_FOUND);
    assert_non_null(strstr(dsv4i_error_message(), "config.json is absent"));
  } else {
    assert_int_equal(st, DSV4_ERR_RANK_FAILED);
    assert_non_null(strstr(dsv4i_error_message(),
                           "rank 1 failed loading the model: DSV4_ERR_NOT_FOUND"));
    assert_non_null(strstr(dsv4i_error_message(), "config.json is absent"));
  }
  assert_int_equal(dsv4i_comm_agree_status(c, DSV4_OK, "a step"), DSV4_OK);
  dsv4i_comm_free(c);
}

/* The last rank stalls past the timeout: every other rank reports it within the
 * timeout (plus scheduling slack) and the communicator stays failed; the stalled rank's
 * next wait (a stage payload that never comes) fails within the timeout too: no rank
 * hangs. (The abandoned exchange completes once the late rank joins it, so MPI_Finalize
 * stays clean here; after a real failure the job should end with MPI_Abort.) */
static void stalled_rank(void **state) {
  (void)state;
  const int32_t timeout_ms = 1000;
  dsv4i_comm *c = make(timeout_ms);
  int stalled = g_rank == g_size - 1;
  if (stalled) usleep(3 * timeout_ms * 1000);
  double t0 = now_s();
  dsv4_status st = dsv4i_comm_agree_status(c, DSV4_OK, "a step");
  double dt = now_s() - t0;
  printf("  rank %d after %.2f s: %s\n", g_rank, dt, dsv4i_error_message());
  if (!stalled) {
    assert_int_equal(st, DSV4_ERR_RANK_FAILED);
    assert_non_null(strstr(dsv4i_error_message(), "within 1000 ms while a step"));
    assert_true(dt >= 0.99 && dt < 1.0 + 5.0);
    /* sticky: later calls fail at once with the first message */
    float x = 1;
    t0 = now_s();
    assert_int_equal(dsv4i_comm_allreduce_f32(c, &x, 1), DSV4_ERR_RANK_FAILED);
    assert_true(now_s() - t0 < 0.5);
    assert_non_null(strstr(dsv4i_error_message(), "failed earlier"));
  } else {
    /* its partners gave up on it: the payload it waits for never comes */
    char b[8];
    size_t got;
    if (st == DSV4_OK)
      st = dsv4i_comm_recv(c, 0, 9, b, sizeof b, &got, "receiving the stage payload");
    printf("  rank %d: %s\n", g_rank, dsv4i_error_message());
    assert_int_equal(st, DSV4_ERR_RANK_FAILED);
    assert_non_null(strstr(dsv4i_error_message(), "no answer from rank 0 within 1000 ms while "
                                                  "receiving the stage payload"));
  }
  dsv4i_comm_free(c);
  MPI_Barrier(g_world); /* line the ranks up again */
}

/* A TP communicator over NCCL: on a machine without a GPU (or without NCCL) every rank gets
 * a clear status, none waits forever; with GPUs it is created (the all-reduce itself is
 * tested with device memory in the gpu suite). */
static void nccl_comm(void **state) {
  (void)state;
  dsv4i_comm *c = make(30000);
  dsv4i_nccl_comm *n = NULL;
  double t0 = now_s();
  dsv4_status st = dsv4i_nccl_comm_create(c, &n);
  printf("  rank %d after %.2f s: status %d %s\n", g_rank, now_s() - t0, (int)st,
         st ? dsv4i_error_message() : "");
  if (st == DSV4_OK) {
    const char *algo, *proto;
    dsv4i_nccl_comm_pinned(n, &algo, &proto);
    assert_non_null(algo);
    assert_non_null(proto);
    assert_int_equal(dsv4i_nccl_check(n), DSV4_OK);
    dsv4i_nccl_comm_free(n);
  } else {
    assert_null(n);
    assert_true(st == DSV4_ERR_NO_DEVICE || st == DSV4_ERR_DEVICE || st == DSV4_ERR_RANK_FAILED);
    assert_true(strlen(dsv4i_error_message()) > 10);
  }
  /* the MPI communicator is still usable after a refused NCCL setup */
  assert_int_equal(dsv4i_comm_agree_status(c, DSV4_OK, "after NCCL"), DSV4_OK);
  dsv4i_comm_free(c);
}

/* Called by tests/common/test_main.c's main (the test filter). */
int tu_run_suite(void) {
  MPI_Init(NULL, NULL);
  MPI_Comm_dup(MPI_COMM_WORLD, &g_world);
  MPI_Comm_rank(g_world, &g_rank);
  MPI_Comm_size(g_world, &g_size);
  if (g_size < 2) {
    fprintf(stderr, "run under mpirun with at least 2 ranks\n");
    MPI_Finalize();
    return 1;
  }
  const struct CMUnitTest tests[] = {
    cmocka_unit_test(create_checks), cmocka_unit_test(allreduce_deterministic),
    cmocka_unit_test(payload_send_recv), cmocka_unit_test(agreement),
    cmocka_unit_test(failed_rank_status), cmocka_unit_test(nccl_comm),
    cmocka_unit_test(stalled_rank),
  };
  int rc = cmocka_run_group_tests(tests, NULL, NULL);
  MPI_Comm_free(&g_world);
  MPI_Finalize();
  return rc;
}
