/*
 * HTTP side of dsv4-server on libmicrohttpd (one thread per connection):
 * routes, request bodies with a size limit, JSON and SSE responses, and
 * cancellation when a client goes away: streaming, the response's free
 * callback runs when the connection closes; non-streaming, the waiting
 * connection thread looks at the socket once a second.
 */
#include <arpa/inet.h>
#include <errno.h>
#include <microhttpd.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>

#include "srv.h"

static atomic_long job_serial;

static enum MHD_Result send_json(struct MHD_Connection *c, unsigned status, json_t *j) {
  char *t = j ? json_dumps(j, JSON_COMPACT) : NULL;
  json_decref(j);
  if (!t) t = strdup("{\"error\":{\"message\":\"out of memory\",\"type\":\"server_error\"}}");
  if (!t) return MHD_NO;
  const size_t len = strlen(t);
  struct MHD_Response *r = MHD_create_response_from_buffer(len, t, MHD_RESPMEM_MUST_FREE);
  if (!r) {
    free(t);
    return MHD_NO;
  }
  MHD_add_response_header(r, "Content-Type", "application/json");
  enum MHD_Result rc = MHD_queue_response(c, status, r);
  MHD_destroy_response(r);
  return rc;
}

static enum MHD_Result send_error(struct MHD_Connection *c, unsigned status, const char *msg,
                                  const char *type) {
  return send_json(c, status, srv_error_json(msg, type, NULL));
}

static int64_t now_ns(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

static srv_job *job_new(srv *s, const srv_req *r) {
  (void)s;
  srv_job *j = calloc(1, sizeof *j);
  if (!j) return NULL;
  pthread_cond_init(&j->cond, NULL);
  j->chat = r->chat;
  j->stream = r->stream;
  j->thinking = r->thinking;
  j->include_usage = r->include_usage;
  j->continuous_usage = r->continuous_usage;
  j->skip_eos_text = !r->chat;
  j->logprobs = r->logprobs;
  j->created = (int64_t)time(NULL);
  snprintf(j->id, sizeof j->id, "%s-%016lx", r->chat ? "chatcmpl" : "cmpl",
           (unsigned long)atomic_fetch_add(&job_serial, 1) + 1);
  j->tool_calls = json_array();
  if (r->chat && dsv4_chat_parser_create(r->thinking ? DSV4_CHAT_MODE_THINKING : DSV4_CHAT_MODE_CHAT,
                                         &j->parser)) {
    json_decref(j->tool_calls);
    free(j);
    return NULL;
  }
  return j;
}

static void job_free(srv_job *j) {
  pthread_cond_destroy(&j->cond);
  dsv4_chat_parser_free(j->parser);
  json_decref(j->tool_calls);
  free(j->text);
  free(j->lp);
  json_decref(j->lp_out);
  free(j->content);
  free(j->reasoning);
  free(j->sse);
  free(j);
}

/* Take the job's new text under srv.jobs; process it outside. Returns 1 if
 * anything happened (text, or the finish). srv.jobs held on entry and exit. */
static int pump(srv *s, srv_job *j, int *finished) {
  char *t = NULL;
  size_t n = 0, n_lp = 0;
  srv_lp *lp = NULL;
  if (j->n_text) {
    t = j->text;
    n = j->n_text;
    j->text = NULL;
    j->n_text = j->cap_text = 0;
  }
  if (j->n_lp) {
    lp = j->lp;
    n_lp = j->n_lp;
    j->lp = NULL;
    j->n_lp = j->cap_lp = 0;
  }
  *finished = j->finished;
  j->n_taken = j->n_completion;
  if (!t && !lp) return *finished != 0;
  pthread_mutex_unlock(&s->jobs);
  srv_job_text(s, j, t, n, lp, n_lp);
  free(t);
  free(lp);
  pthread_mutex_lock(&s->jobs);
  return 1;
}

/* ---- streaming ----------------------------------------------------------- */

typedef struct stream_ctx {
  srv *s;
  srv_job *j;
} stream_ctx;

static ssize_t stream_read(void *cls, uint64_t pos, char *buf, size_t max) {
  (void)pos;
  stream_ctx *x = cls;
  srv *s = x->s;
  srv_job *j = x->j;
  pthread_mutex_lock(&s->jobs);
  while (j->sse_off == j->n_sse) {
    j->sse_off = j->n_sse = 0;
    if (j->sent_done) {
      pthread_mutex_unlock(&s->jobs);
      return MHD_CONTENT_READER_END_OF_STREAM;
    }
    int fin = 0;
    if (pump(s, j, &fin)) {
      if (fin && !j->n_text && !j->n_lp) {
        pthread_mutex_unlock(&s->jobs);
        srv_job_finish(s, j);
        pthread_mutex_lock(&s->jobs);
        j->sent_done = 1;
      }
      continue;
    }
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    ts.tv_sec += 1;
    if (pthread_cond_timedwait(&j->cond, &s->jobs, &ts) == ETIMEDOUT && j->n_text == 0 && j->n_lp == 0 &&
        !j->finished) { /* a comment line: keeps proxies and clients from timing out */
      pthread_mutex_unlock(&s->jobs);
      const char *k = ": keep-alive\n\n";
      memcpy(buf, k, strlen(k) < max ? strlen(k) : max);
      return (ssize_t)(strlen(k) < max ? strlen(k) : max);
    }
  }
  size_t k = j->n_sse - j->sse_off;
  if (k > max) k = max;
  memcpy(buf, j->sse + j->sse_off, k);
  j->sse_off += k;
  j->last_send_ns = now_ns();
  pthread_mutex_unlock(&s->jobs);
  return (ssize_t)k;
}

/* The response is gone: the stream ended or the client left (then cancel). */
static void stream_free(void *cls) {
  stream_ctx *x = cls;
  srv_lock(x->s);
  x->j->gone = 1;
  srv_cancel(x->s, x->j); /* a no-op when the request finished */
  x->s->active--;
  srv_unlock(x->s);
  job_free(x->j);
  free(x);
}

/* ---- generation ------------------------------------------------------------ */

/* The client closed its end (or reset it) while a non-streaming response is
 * pending: nothing is read from a connection after its body, so a readable
 * socket with no bytes is the peer's FIN. Bytes waiting (a pipelined request)
 * or no data yet mean it is still there. */
static int peer_closed(struct MHD_Connection *c) {
  const union MHD_ConnectionInfo *ci = MHD_get_connection_info(c, MHD_CONNECTION_INFO_CONNECTION_FD);
  if (!ci) return 0;
  char b;
  const ssize_t n = recv(ci->connect_fd, &b, 1, MSG_PEEK | MSG_DONTWAIT);
  return n == 0 || (n < 0 && errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR);
}

static enum MHD_Result generate(srv *s, struct MHD_Connection *c, const srv_body *k, int chat) {
  json_t *root = NULL, *err = NULL;
  srv_req r;
  const int code = srv_parse_request(s, k->buf ? k->buf : "", k->n, chat, &root, &r, &err);
  if (code) {
    json_decref(root);
    srv_req_free(&r);
    return send_json(c, (unsigned)code, err);
  }
  srv_job *j = job_new(s, &r);
  if (!j) {
    json_decref(root);
    srv_req_free(&r);
    return send_error(c, 500, "out of memory", "server_error");
  }
  char msg[600] = "";
  srv_lock(s);
  dsv4_status st = s->failed || s->closing ? DSV4_ERR_DEVICE_LOST : srv_submit(s, j, r.ids, r.n_ids, &r.p);
  if (!st) s->served++;
  else s->rejected++;
  if (st) snprintf(msg, sizeof msg, "%s", dsv4_last_error()); /* before any other call */
  srv_unlock(s);
  json_decref(root);
  srv_req_free(&r);
  if (st) {
    job_free(j);
    if (st == DSV4_KV_FULL)
      return send_error(c, 429, "the server is at its request limit; retry later", "rate_limit_error");
    if (st == DSV4_ERR_DEVICE_LOST) return send_error(c, 503, "the engine is unavailable", "server_error");
    return send_error(c, 400, msg, "invalid_request_error");
  }
  if (j->stream) {
    stream_ctx *x = calloc(1, sizeof *x);
    struct MHD_Response *resp = x ? MHD_create_response_from_callback(MHD_SIZE_UNKNOWN, 16384,
                                                                      stream_read, x, stream_free)
                                  : NULL;
    if (!resp) {
      free(x);
      srv_lock(s);
      srv_cancel(s, j);
      s->active--;
      srv_unlock(s);
      job_free(j);
      return send_error(c, 500, "out of memory", "server_error");
    }
    x->s = s;
    x->j = j;
    MHD_add_response_header(resp, "Content-Type", "text/event-stream");
    MHD_add_response_header(resp, "Cache-Control", "no-cache");
    enum MHD_Result rc = MHD_queue_response(c, 200, resp);
    MHD_destroy_response(resp);
    return rc;
  }
  pthread_mutex_lock(&s->jobs);
  int fin = 0;
  int64_t checked = now_ns();
  for (;;) {
    pump(s, j, &fin);
    if (fin && !j->n_text && !j->n_lp) break;
    if (j->n_text || j->n_lp) continue;
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    ts.tv_sec += 1;
    (void)pthread_cond_timedwait(&j->cond, &s->jobs, &ts);
    /* tokens keep waking this thread: look at the socket once a second whatever woke it */
    if (j->finished || now_ns() - checked < 1000000000) continue;
    checked = now_ns();
    if (!peer_closed(c)) continue;
    /* the client left: cancel, free the slot, send nothing */
    pthread_mutex_unlock(&s->jobs);
    srv_lock(s);
    j->gone = 1;
    srv_cancel(s, j); /* a no-op when the request finished meanwhile */
    s->active--;
    srv_unlock(s);
    job_free(j);
    return MHD_NO;
  }
  pthread_mutex_unlock(&s->jobs);
  srv_lock(s);
  s->active--;
  srv_unlock(s);
  enum MHD_Result rc;
  if (fin == DSV4_FINISH_ERROR) {
    rc = send_error(c, 500, "the engine failed on this request", "server_error");
  } else {
    rc = send_json(c, 200, srv_job_finish(s, j));
  }
  job_free(j);
  return rc;
}

static enum MHD_Result models(srv *s, struct MHD_Connection *c) {
  return send_json(c, 200, json_pack("{s:s,s:[{s:s,s:s,s:I,s:s}]}", "object", "list", "data", "id",
                                     s->model_name, "object", "model", "created", (json_int_t)0,
                                     "owned_by", "libdsv4"));
}

static enum MHD_Result health(srv *s, struct MHD_Connection *c) {
  srv_lock(s);
  const int failed = s->failed;
  dsv4_scheduler_stats st;
  must(dsv4_scheduler_get_stats(s->sched, &st, sizeof st));
  srv_unlock(s);
  return send_json(c, failed ? 503 : 200,
                   json_pack("{s:s,s:i,s:i,s:I,s:I,s:{s:I,s:I,s:I,s:i},s:{s:I,s:I,s:I}}", "status",
                             failed ? "failed" : "ok", "waiting", st.waiting, "running", st.running,
                             "finished", (json_int_t)st.finished, "cancelled", (json_int_t)st.cancelled,
                             "prefix_cache", "hits", (json_int_t)st.prefix_hits, "misses",
                             (json_int_t)st.prefix_misses, "tokens_reused",
                             (json_int_t)st.prefix_tokens_reused, "entries", st.prefix_entries,
                             "speculative", "drafted", (json_int_t)st.spec_drafted, "accepted",
                             (json_int_t)st.spec_accepted, "fallbacks", (json_int_t)st.spec_fallbacks));
}

static enum MHD_Result handler(void *cls, struct MHD_Connection *c, const char *url,
                               const char *method, const char *version, const char *upload,
                               size_t *upload_size, void **con_cls) {
  (void)version;
  srv *s = cls;
  srv_body *k = *con_cls;
  if (!k) { /* first call: headers only */
    if (!(k = calloc(1, sizeof *k))) return MHD_NO;
    *con_cls = k;
    return MHD_YES;
  }
  if (*upload_size) { /* a piece of the body */
    if (srv_body_add(k, upload, *upload_size, s->o.max_body)) return MHD_NO;
    *upload_size = 0;
    return MHD_YES;
  }
  const int get = !strcmp(method, "GET"), post = !strcmp(method, "POST");
  if (!strcmp(url, "/health") || !strcmp(url, "/v1/health"))
    return get ? health(s, c) : send_error(c, 405, "use GET", "invalid_request_error");
  if (!strcmp(url, "/v1/models"))
    return get ? models(s, c) : send_error(c, 405, "use GET", "invalid_request_error");
  const int chat = !strcmp(url, "/v1/chat/completions");
  if (chat || !strcmp(url, "/v1/completions")) {
    if (!post) return send_error(c, 405, "use POST", "invalid_request_error");
    if (k->too_large) {
      char msg[128];
      snprintf(msg, sizeof msg, "request body larger than %zu bytes", s->o.max_body);
      return send_error(c, 413, msg, "invalid_request_error");
    }
    return generate(s, c, k, chat);
  }
  return send_error(c, 404, "no such endpoint", "invalid_request_error");
}

static void completed(void *cls, struct MHD_Connection *c, void **con_cls,
                      enum MHD_RequestTerminationCode toe) {
  (void)cls;
  (void)c;
  (void)toe;
  srv_body *k = *con_cls;
  if (k) {
    srv_body_free(k);
    free(k);
  }
  *con_cls = NULL;
}

int srv_http_run(srv *s) {
  struct sockaddr_in addr;
  memset(&addr, 0, sizeof addr);
  addr.sin_family = AF_INET;
  addr.sin_port = htons((uint16_t)s->o.port);
  if (inet_pton(AF_INET, s->o.host, &addr.sin_addr) != 1) {
    fprintf(stderr, "dsv4-server: --host %s is not an IPv4 address\n", s->o.host);
    return 2;
  }
  /* block the signals in every thread; the main thread waits for them */
  sigset_t set;
  sigemptyset(&set);
  sigaddset(&set, SIGINT);
  sigaddset(&set, SIGTERM);
  pthread_sigmask(SIG_BLOCK, &set, NULL);
  signal(SIGPIPE, SIG_IGN);
  struct MHD_Daemon *d = MHD_start_daemon(
      MHD_USE_THREAD_PER_CONNECTION | MHD_USE_INTERNAL_POLLING_THREAD | MHD_USE_ERROR_LOG,
      (uint16_t)s->o.port, NULL, NULL, handler, s, MHD_OPTION_SOCK_ADDR, (struct sockaddr *)&addr,
      MHD_OPTION_CONNECTION_LIMIT, (unsigned)s->o.max_connections, MHD_OPTION_CONNECTION_TIMEOUT,
      (unsigned)600, MHD_OPTION_NOTIFY_COMPLETED, completed, s, MHD_OPTION_END);
  if (!d) {
    fprintf(stderr, "dsv4-server: cannot listen on %s:%d (%s)\n", s->o.host, s->o.port, strerror(errno));
    return 1;
  }
  fprintf(stderr, "dsv4-server: %s on http://%s:%d\n", s->model_name, s->o.host, s->o.port);
  int sig = 0;
  sigwait(&set, &sig);
  fprintf(stderr, "dsv4-server: signal %d, stopping\n", sig);
  srv_lock(s);
  s->closing = 1; /* new requests get 503; running ones finish */
  srv_unlock(s);
  MHD_stop_daemon(d);
  return 0;
}
