/*
 * comm.h over MPI (Open MPI from Debian): a duplicated communicator with
 * MPI_ERRORS_RETURN, non-blocking operations polled to a deadline, sticky
 * failure, counters.
 */
#include <mpi.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "dist/comm.h"

struct dsv4i_comm {
  MPI_Comm comm;
  int32_t rank, size;
  int32_t timeout_ms;
  dsv4_status failed;
  char *fail_msg;           /* the first failure's message */
  dsv4i_comm_stats stats;
  /* Every buffer an MPI request references is this staging memory, never the caller's:
   * a request abandoned at a timeout cannot be cancelled (collectives) and may still
   * complete later, so after a failure the staging memory is left allocated. */
  uint8_t *stage;
  size_t stage_cap;
  int32_t watch_tag;        /* failure notices looked for in every wait (-1: none) */
};

#define STATUS_MSG 480

/* A failure notice (dsv4i_comm_notify_failure) and the status exchange's record. */
typedef struct rank_status {
  int32_t status;
  int32_t reserved;
  char msg[STATUS_MSG];
} rank_status;

/* Staging of at least bytes (contents not kept). NULL + OOM error on failure. */
static uint8_t *staging(dsv4i_comm *c, size_t bytes) {
  if (bytes <= c->stage_cap) return c->stage;
  uint8_t *p = dsv4i_realloc(c->stage, bytes, "communication staging buffer");
  if (!p) return NULL;
  c->stage = p;
  c->stage_cap = bytes;
  return p;
}

static int64_t now_ns(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

/* Record a failure: sticky, message kept for later calls. Returns the status. */
static dsv4_status fail(dsv4i_comm *c, dsv4_status st, const char *fmt, ...) DSV4I_PRINTF(3, 4);
static dsv4_status fail(dsv4i_comm *c, dsv4_status st, const char *fmt, ...) {
  char msg[1024];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(msg, sizeof msg, fmt, ap);
  va_end(ap);
  if (!c->failed) {
    c->failed = st;
    free(c->fail_msg);
    c->fail_msg = strdup(msg);
  }
  return dsv4i_error(st, "%s", msg);
}

/* The sticky status, re-recorded for this call. */
static dsv4_status check_failed(const dsv4i_comm *c) {
  if (!c->failed) return DSV4_OK;
  return dsv4i_error(DSV4_ERR_RANK_FAILED, "rank %d: the communicator failed earlier: %s",
                     (int)c->rank, c->fail_msg ? c->fail_msg : "(no message)");
}

static dsv4_status mpi_fail(dsv4i_comm *c, int rc, const char *call, const char *what) {
  char text[MPI_MAX_ERROR_STRING] = "";
  int len = 0;
  MPI_Error_string(rc, text, &len);
  return fail(c, DSV4_ERR_RANK_FAILED, "rank %d: %s failed while %s: %s (MPI error %d)",
              (int)c->rank, call, what, text, rc);
}

/* Spin briefly, then yield the core: ranks may share cores (mpirun --oversubscribe). */
static void backoff(int64_t spin) {
  if (spin < 64) return;
  if (spin < 256) {
    sched_yield();
    return;
  }
  struct timespec ts = {0, spin < 2048 ? 20000 : 200000};
  nanosleep(&ts, NULL);
}

static dsv4_status timed_out(dsv4i_comm *c, const char *what, int32_t peer) {
  if (peer >= 0)
    return fail(c, DSV4_ERR_RANK_FAILED,
                "rank %d: no answer from rank %d within %d ms while %s; that rank failed "
                "or stalls (the timeout is dsv4_engine_params.dist_timeout_ms)",
                (int)c->rank, (int)peer, (int)c->timeout_ms, what);
  return fail(c, DSV4_ERR_RANK_FAILED,
              "rank %d: not every rank joined within %d ms while %s; a rank failed "
              "or stalls (the timeout is dsv4_engine_params.dist_timeout_ms)",
              (int)c->rank, (int)c->timeout_ms, what);
}

/* A partner's failure notice, if one arrived: receive it, fail c (sticky). */
static dsv4_status check_notice(dsv4i_comm *c, const char *what) {
  if (c->watch_tag < 0) return DSV4_OK;
  int flag = 0;
  MPI_Status ps;
  int rc = MPI_Iprobe(MPI_ANY_SOURCE, c->watch_tag, c->comm, &flag, &ps);
  if (rc != MPI_SUCCESS) return mpi_fail(c, rc, "MPI_Iprobe", what);
  if (!flag) return DSV4_OK;
  rank_status n;
  memset(&n, 0, sizeof n);
  rc = MPI_Recv(&n, (int)sizeof n, MPI_BYTE, ps.MPI_SOURCE, c->watch_tag, c->comm,
                MPI_STATUS_IGNORE); /* arrived: it is matched at once */
  if (rc != MPI_SUCCESS) return mpi_fail(c, rc, "MPI_Recv", what);
  n.msg[STATUS_MSG - 1] = 0;
  return fail(c, DSV4_ERR_RANK_FAILED, "%s; this rank stopped waiting for it while %s", n.msg,
              what);
}

/* Poll requests until all complete or the deadline passes. peer >= 0 names the peer. */
static dsv4_status wait_all(dsv4i_comm *c, int n, MPI_Request *req, MPI_Status *status,
                            const char *what, int32_t peer) {
  int64_t t0 = now_ns();
  int64_t deadline = t0 + (int64_t)c->timeout_ms * 1000000;
  for (int64_t spin = 0;; spin++) {
    int done = 0;
    int rc = MPI_Testall(n, req, &done, status ? status : MPI_STATUSES_IGNORE);
    if (rc != MPI_SUCCESS) return mpi_fail(c, rc, "MPI_Testall", what);
    if (done) break;
    dsv4_status ns = check_notice(c, what);
    if (ns) {
      c->stats.wait_ns += now_ns() - t0;
      return ns;
    }
    int64_t t = now_ns();
    if (t > deadline) {
      c->stats.wait_ns += t - t0;
      return timed_out(c, what, peer);
    }
    backoff(spin);
  }
  c->stats.wait_ns += now_ns() - t0;
  return DSV4_OK;
}

dsv4_status dsv4i_comm_place(void *mpi_comm, int32_t *rank, int32_t *size) {
  int inited = 0, finalized = 0, r = 0, n = 1;
  MPI_Initialized(&inited);
  MPI_Finalized(&finalized);
  *rank = 0;
  *size = 1;
  if (!inited || finalized || !mpi_comm || *(MPI_Comm *)mpi_comm == MPI_COMM_NULL)
    return dsv4i_error(DSV4_ERR_INVALID_ARG, "distributed engine: MPI is not initialised or the "
                       "communicator is not set");
  if (MPI_Comm_rank(*(MPI_Comm *)mpi_comm, &r) != MPI_SUCCESS ||
      MPI_Comm_size(*(MPI_Comm *)mpi_comm, &n) != MPI_SUCCESS)
    return dsv4i_error(DSV4_ERR_INVALID_ARG, "distributed engine: not a valid communicator");
  *rank = r;
  *size = n;
  return DSV4_OK;
}

dsv4_status dsv4i_comm_create(void *mpi_comm, int32_t timeout_ms, dsv4i_comm **out) {
  *out = NULL;
  int inited = 0, finalized = 0;
  MPI_Initialized(&inited);
  MPI_Finalized(&finalized);
  if (!inited || finalized)
    return dsv4i_error(DSV4_ERR_INVALID_ARG,
                       "distributed engine: MPI is not initialised (call MPI_Init first)");
  if (!mpi_comm || timeout_ms <= 0)
    return dsv4i_error(DSV4_ERR_INVALID_ARG,
                       "distributed engine: the communicator pointer must be set and the "
                       "timeout > 0 (got %d ms)",
                       (int)timeout_ms);
  MPI_Comm app = *(MPI_Comm *)mpi_comm;
  if (app == MPI_COMM_NULL)
    return dsv4i_error(DSV4_ERR_INVALID_ARG, "distributed engine: the communicator is MPI_COMM_NULL");
  dsv4i_comm *c = dsv4i_calloc(1, sizeof *c, "communicator");
  if (!c) return DSV4_ERR_OUT_OF_MEMORY;
  c->timeout_ms = timeout_ms;
  c->watch_tag = -1;
  c->comm = MPI_COMM_NULL;
  int r = 0, n = 0;
  MPI_Comm_rank(app, &r);
  MPI_Comm_size(app, &n);
  c->rank = r;
  c->size = n;
  /* a private duplicate: our messages never match the application's; bounded like every
   * other wait (idup is non-blocking) */
  MPI_Request req;
  int rc = MPI_Comm_idup(app, &c->comm, &req);
  dsv4_status st = rc == MPI_SUCCESS ? wait_all(c, 1, &req, NULL, "duplicating the communicator", -1)
                                     : mpi_fail(c, rc, "MPI_Comm_idup", "duplicating the communicator");
  if (st != DSV4_OK) {
    /* an abandoned idup may still write c->comm: c is left allocated (see stage) */
    if (rc != MPI_SUCCESS) {
      free(c->fail_msg);
      free(c);
    }
    return st;
  }
  MPI_Comm_set_errhandler(c->comm, MPI_ERRORS_RETURN);
  *out = c;
  return DSV4_OK;
}

dsv4_status dsv4i_comm_split(dsv4i_comm *c, int32_t color, int32_t key, dsv4i_comm **out) {
  *out = NULL;
  dsv4_status st = check_failed(c);
  if (st) return st;
  /* every rank is known to be present before the blocking split (bounded allgather) */
  int32_t mine[2] = {color, key};
  int32_t *all = dsv4i_malloc(sizeof mine * (size_t)c->size, "split colors");
  if (!all) return DSV4_ERR_OUT_OF_MEMORY;
  st = dsv4i_comm_allgather(c, mine, sizeof mine, all, "splitting the communicator");
  free(all);
  if (st) return st;
  dsv4i_comm *s = dsv4i_calloc(1, sizeof *s, "communicator");
  if (!s) return DSV4_ERR_OUT_OF_MEMORY;
  int rc = MPI_Comm_split(c->comm, color, key, &s->comm);
  if (rc != MPI_SUCCESS) {
    free(s);
    return mpi_fail(c, rc, "MPI_Comm_split", "splitting the communicator");
  }
  MPI_Comm_set_errhandler(s->comm, MPI_ERRORS_RETURN);
  int r = 0, n = 0;
  MPI_Comm_rank(s->comm, &r);
  MPI_Comm_size(s->comm, &n);
  s->rank = r;
  s->size = n;
  s->timeout_ms = c->timeout_ms;
  s->watch_tag = -1;
  *out = s;
  return DSV4_OK;
}

void dsv4i_comm_free(dsv4i_comm *c) {
  if (!c) return;
  int finalized = 0;
  MPI_Finalized(&finalized);
  /* after an abandoned wait a request may still reference the communicator: leave it */
  if (!c->failed && !finalized && c->comm != MPI_COMM_NULL) MPI_Comm_free(&c->comm);
  if (!c->failed) free(c->stage); /* else an abandoned request may still write into it */
  free(c->fail_msg);
  free(c);
}

int32_t dsv4i_comm_rank(const dsv4i_comm *c) { return c->rank; }
int32_t dsv4i_comm_size(const dsv4i_comm *c) { return c->size; }
dsv4_status dsv4i_comm_failed(const dsv4i_comm *c) { return c->failed; }
int32_t dsv4i_comm_timeout_ms(const dsv4i_comm *c) { return c->timeout_ms; }
void dsv4i_comm_stats_get(const dsv4i_comm *c, dsv4i_comm_stats *out) { *out = c->stats; }

void dsv4i_comm_watch(dsv4i_comm *c, int32_t tag) { c->watch_tag = tag; }

dsv4_status dsv4i_comm_notify_failure(dsv4i_comm *c, dsv4_status st, const char *who,
                                      const char *what) {
  if (c->failed || c->size < 2) return DSV4_OK;
  char *keep = strdup(dsv4i_error_message());
  rank_status n;
  memset(&n, 0, sizeof n);
  n.status = st;
  snprintf(n.msg, sizeof n.msg, "%s failed %s: %s: %s", who, what, dsv4_status_string(st),
           keep ? keep : "");
  /* one notice per partner; the requests read only this buffer (left allocated if a
   * wait times out, like the staging memory) */
  const int np = (int)c->size - 1;
  uint8_t *buf = dsv4i_malloc(sizeof n + (size_t)np * sizeof(MPI_Request), "failure notices");
  dsv4_status rs = buf ? DSV4_OK : DSV4_ERR_OUT_OF_MEMORY;
  if (buf) {
    memcpy(buf, &n, sizeof n);
    MPI_Request *req = (MPI_Request *)(void *)(buf + sizeof n);
    const int tag = c->watch_tag >= 0 ? c->watch_tag : 0;
    const int32_t watch = c->watch_tag;
    int k = 0;
    for (int32_t r = 0; r < c->size && !rs; r++) {
      if (r == c->rank) continue;
      int rc = MPI_Isend(buf, (int)sizeof n, MPI_BYTE, r, tag, c->comm, &req[k]);
      if (rc != MPI_SUCCESS) rs = mpi_fail(c, rc, "MPI_Isend", "sending a failure notice");
      else k++;
    }
    c->watch_tag = -1; /* this rank's own notices are not a partner's */
    if (!rs) rs = wait_all(c, k, req, NULL, "sending a failure notice", -1);
    c->watch_tag = watch;
    if (!rs) free(buf);
  }
  /* the partners abandon the collectives they waited in: this communicator is done */
  char why[1024];
  snprintf(why, sizeof why, "%s (told its partners)", n.msg);
  if (!c->failed) {
    c->failed = DSV4_ERR_RANK_FAILED;
    c->fail_msg = strdup(why);
  }
  dsv4i_error(st, "%s", keep ? keep : "(message lost)"); /* the thread's error as it was */
  free(keep);
  return rs;
}

void dsv4i_comm_fail(dsv4i_comm *c, dsv4_status st) {
  if (c->failed) return;
  c->failed = st;
  c->fail_msg = strdup(dsv4i_error_message());
}

dsv4_status dsv4i_comm_send(dsv4i_comm *c, int32_t peer, int32_t tag, const void *buf,
                            size_t bytes, const char *what) {
  dsv4_status st = check_failed(c);
  if (st) return st;
  if (bytes > (size_t)INT32_MAX)
    return dsv4i_error(DSV4_ERR_INVALID_ARG, "rank %d: a %zu-byte message while %s is above "
                       "MPI's int count", (int)c->rank, bytes, what);
  uint8_t *sb = staging(c, bytes ? bytes : 1);
  if (!sb) return DSV4_ERR_OUT_OF_MEMORY;
  memcpy(sb, buf, bytes);
  MPI_Request req;
  int rc = MPI_Isend(sb, (int)bytes, MPI_BYTE, peer, tag, c->comm, &req);
  if (rc != MPI_SUCCESS) return mpi_fail(c, rc, "MPI_Isend", what);
  st = wait_all(c, 1, &req, NULL, what, peer);
  if (st) return st;
  c->stats.sent_msgs++;
  c->stats.sent_bytes += (int64_t)bytes;
  return DSV4_OK;
}

dsv4_status dsv4i_comm_recv(dsv4i_comm *c, int32_t peer, int32_t tag, void *buf, size_t cap,
                            size_t *got, const char *what) {
  *got = 0;
  dsv4_status st = check_failed(c);
  if (st) return st;
  /* wait for the message (bounded), check its size, then take it */
  int64_t t0 = now_ns(), deadline = t0 + (int64_t)c->timeout_ms * 1000000;
  MPI_Message msg;
  MPI_Status status;
  for (int64_t spin = 0;; spin++) {
    int flag = 0;
    int rc = MPI_Improbe(peer, tag, c->comm, &flag, &msg, &status);
    if (rc != MPI_SUCCESS) return mpi_fail(c, rc, "MPI_Improbe", what);
    if (flag) break;
    dsv4_status ns = check_notice(c, what);
    if (ns) {
      c->stats.wait_ns += now_ns() - t0;
      return ns;
    }
    if (now_ns() > deadline) {
      c->stats.wait_ns += now_ns() - t0;
      return timed_out(c, what, peer);
    }
    backoff(spin);
  }
  c->stats.wait_ns += now_ns() - t0;
  int n = 0;
  MPI_Get_count(&status, MPI_BYTE, &n);
  int too_long = (size_t)n > cap; /* a mismatched message is drained, then refused */
  uint8_t *rb = staging(c, n ? (size_t)n : 1);
  if (!rb) return DSV4_ERR_OUT_OF_MEMORY;
  MPI_Request req;
  int rc = MPI_Imrecv(rb, n, MPI_BYTE, &msg, &req);
  st = rc == MPI_SUCCESS ? wait_all(c, 1, &req, NULL, what, peer) : mpi_fail(c, rc, "MPI_Imrecv", what);
  if (st) return st;
  if (too_long)
    return fail(c, DSV4_ERR_RANK_MISMATCH,
                "rank %d: the %d-byte message from rank %d while %s is longer than the %zu "
                "bytes expected (the ranks disagree on shapes)",
                (int)c->rank, n, (int)peer, what, cap);
  memcpy(buf, rb, (size_t)n);
  *got = (size_t)n;
  c->stats.recv_msgs++;
  c->stats.recv_bytes += n;
  return DSV4_OK;
}

dsv4_status dsv4i_comm_allgather(dsv4i_comm *c, const void *mine, size_t bytes, void *all,
                                 const char *what) {
  dsv4_status st = check_failed(c);
  if (st) return st;
  if (bytes > (size_t)INT32_MAX)
    return dsv4i_error(DSV4_ERR_INVALID_ARG, "rank %d: %zu bytes per rank while %s is above "
                       "MPI's int count", (int)c->rank, bytes, what);
  size_t total = bytes * (size_t)(c->size + 1); /* [own copy][everyone's] */
  uint8_t *sb = staging(c, total ? total : 1);
  if (!sb) return DSV4_ERR_OUT_OF_MEMORY;
  memcpy(sb, mine, bytes);
  MPI_Request req;
  int rc = MPI_Iallgather(sb, (int)bytes, MPI_BYTE, sb + bytes, (int)bytes, MPI_BYTE, c->comm, &req);
  if (rc != MPI_SUCCESS) return mpi_fail(c, rc, "MPI_Iallgather", what);
  st = wait_all(c, 1, &req, NULL, what, -1);
  if (st) return st;
  memcpy(all, sb + bytes, bytes * (size_t)c->size);
  return DSV4_OK;
}

dsv4_status dsv4i_comm_bcast(dsv4i_comm *c, int32_t root, void *buf, size_t bytes,
                             const char *what) {
  dsv4_status st = check_failed(c);
  if (st) return st;
  if (bytes > (size_t)INT32_MAX)
    return dsv4i_error(DSV4_ERR_INVALID_ARG, "rank %d: a %zu-byte broadcast while %s is above "
                       "MPI's int count", (int)c->rank, bytes, what);
  uint8_t *sb = staging(c, bytes ? bytes : 1);
  if (!sb) return DSV4_ERR_OUT_OF_MEMORY;
  if (c->rank == root) memcpy(sb, buf, bytes);
  MPI_Request req;
  int rc = MPI_Ibcast(sb, (int)bytes, MPI_BYTE, root, c->comm, &req);
  if (rc != MPI_SUCCESS) return mpi_fail(c, rc, "MPI_Ibcast", what);
  st = wait_all(c, 1, &req, NULL, what, root);
  if (st) return st;
  memcpy(buf, sb, bytes);
  return DSV4_OK;
}

dsv4_status dsv4i_comm_allreduce_f32(dsv4i_comm *c, float *x, size_t n) {
  dsv4_status st = check_failed(c);
  if (st) return st;
  if (c->size == 1) {
    c->stats.allreduce_calls++;
    return DSV4_OK;
  }
  size_t bytes = n * sizeof(float);
  uint64_t total;
  if (n > SIZE_MAX / sizeof(float) ||
      !dsv4i_mul_overflow_u64(bytes, (uint64_t)c->size + 1, &total) || total > (uint64_t)INT32_MAX)
    return dsv4i_error(DSV4_ERR_INVALID_ARG, "rank %d: an all-reduce of %zu floats is above "
                       "MPI's int count", (int)c->rank, n);
  uint8_t *sb = staging(c, (size_t)total ? (size_t)total : 1);
  if (!sb) return DSV4_ERR_OUT_OF_MEMORY;
  memcpy(sb, x, bytes);
  MPI_Request req;
  int rc = MPI_Iallgather(sb, (int)bytes, MPI_BYTE, sb + bytes, (int)bytes, MPI_BYTE, c->comm, &req);
  if (rc != MPI_SUCCESS) return mpi_fail(c, rc, "MPI_Iallgather", "all-reducing partial sums");
  st = wait_all(c, 1, &req, NULL, "all-reducing partial sums", -1);
  if (st) return st;
  const float *g = (const float *)(const void *)(sb + bytes);
  /* fixed order, same on every rank: ((p0 + p1) + p2) + ... */
  for (size_t i = 0; i < n; i++) {
    float s = g[i];
    for (int32_t r = 1; r < c->size; r++) s += g[(size_t)r * n + i];
    x[i] = s;
  }
  c->stats.allreduce_calls++;
  c->stats.allreduce_bytes += (int64_t)bytes;
  return DSV4_OK;
}

dsv4_status dsv4i_comm_agree_status(dsv4i_comm *c, dsv4_status local, const char *what) {
  dsv4_status st = check_failed(c);
  if (st) return local ? local : st;
  rank_status mine;
  memset(&mine, 0, sizeof mine);
  mine.status = local;
  char own[DSV4I_ERROR_CAP];
  snprintf(own, sizeof own, "%s", local ? dsv4i_error_message() : "");
  if (local) {
    size_t len = strlen(own);
    if (len >= STATUS_MSG) len = STATUS_MSG - 1; /* the peers get the start of it */
    memcpy(mine.msg, own, len);
  }
  rank_status *all = dsv4i_calloc((size_t)c->size, sizeof *all, "status exchange");
  if (!all) return local ? local : DSV4_ERR_OUT_OF_MEMORY;
  st = dsv4i_comm_allgather(c, &mine, sizeof mine, all, what);
  if (st) {
    free(all);
    if (local) return dsv4i_error(local, "%s", own); /* keep this rank's own failure */
    return st;
  }
  if (local) { /* this rank failed: its own status and message */
    free(all);
    return dsv4i_error(local, "%s", own);
  }
  dsv4i_str s = {0};
  int n_failed = 0;
  for (int32_t r = 0; r < c->size; r++) {
    if (!all[r].status) continue;
    all[r].msg[STATUS_MSG - 1] = 0;
    dsv4i_str_appendf(&s, "%srank %d failed %s: %s: %s", n_failed ? "; " : "", (int)r, what,
                      dsv4_status_string(all[r].status), all[r].msg);
    n_failed++;
  }
  free(all);
  if (!n_failed) return DSV4_OK;
  st = dsv4i_error(DSV4_ERR_RANK_FAILED, "rank %d: %s", (int)c->rank, dsv4i_str_cstr(&s));
  dsv4i_str_free(&s);
  return st;
}

/* FNV-1a over the names, so ranks with other value lists are told apart */
static uint64_t names_hash(int32_t n, const char *const *names) {
  uint64_t h = 1469598103934665603ull;
  for (int32_t i = 0; i < n; i++)
    for (const char *p = names[i];; p++) {
      h = (h ^ (uint8_t)*p) * 1099511628211ull;
      if (!*p) break;
    }
  return h;
}

dsv4_status dsv4i_comm_agree(dsv4i_comm *c, int32_t n, const char *const *names,
                             const uint64_t *values, const char *what) {
  dsv4_status st = check_failed(c);
  if (st) return st;
  uint64_t head[2] = {(uint64_t)n, names_hash(n, names)};
  uint64_t *heads = dsv4i_malloc(sizeof head * (size_t)c->size, "agreement");
  if (!heads) return DSV4_ERR_OUT_OF_MEMORY;
  st = dsv4i_comm_allgather(c, head, sizeof head, heads, what);
  if (st) {
    free(heads);
    return st;
  }
  for (int32_t r = 1; r < c->size; r++)
    if (heads[2 * r] != heads[0] || heads[2 * r + 1] != heads[1]) {
      free(heads);
      return dsv4i_error(DSV4_ERR_RANK_MISMATCH,
                         "ranks disagree while %s: rank %d checks another list of values than "
                         "rank 0 (different libdsv4 builds?)",
                         what, (int)r);
    }
  free(heads);
  uint64_t *all = dsv4i_malloc(sizeof(uint64_t) * (size_t)n * (size_t)c->size, "agreement");
  if (!all) return DSV4_ERR_OUT_OF_MEMORY;
  st = dsv4i_comm_allgather(c, values, sizeof(uint64_t) * (size_t)n, all, what);
  if (st) {
    free(all);
    return st;
  }
  for (int32_t i = 0; i < n; i++) {
    dsv4i_str s = {0};
    for (int32_t r = 1; r < c->size; r++)
      if (all[(size_t)r * n + i] != all[i])
        dsv4i_str_appendf(&s, "%srank %d has %llu", s.len ? ", " : "", (int)r,
                          (unsigned long long)all[(size_t)r * n + i]);
    if (s.len) {
      st = dsv4i_error(DSV4_ERR_RANK_MISMATCH, "ranks disagree while %s: %s: rank 0 has %llu, %s",
                       what, names[i], (unsigned long long)all[i], dsv4i_str_cstr(&s));
      dsv4i_str_free(&s);
      free(all);
      return st;
    }
  }
  free(all);
  return DSV4_OK;
}
