/*
 * dsv4-server: an OpenAI-compatible HTTP server over the libdsv4 scheduler
 * (docs/serving.md, "Server"). Public API only.
 *
 * Threads: libmicrohttpd runs one thread per connection; one engine thread
 * owns the engine and the scheduler and steps it while requests are active.
 * srv.lock guards the scheduler (held for a whole step; connection threads
 * that want it are let in between steps); srv.jobs guards the jobs' shared
 * fields and is only ever held briefly (order: lock, then jobs). The token
 * callback runs on the engine thread, appends text under jobs and wakes the
 * job's connection thread, which turns it into SSE chunks or one JSON body.
 */
#ifndef DSV4_SRV_H
#define DSV4_SRV_H

#include <jansson.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>

#include "dsv4/dsv4.h"

typedef struct srv_opts {
  const char *model_dir;
  const char *host;          /**< default 127.0.0.1 */
  int port;                  /**< default 8000 */
  const char *model_name;    /**< reported in /v1/models; default: the directory's name */
  int max_sequences;         /**< engine sequences; default 8 */
  int64_t max_context;       /**< default 4096 */
  int n_threads;             /**< engine threads; default 0 = all cores */
  int max_queue;             /**< requests queued or running; beyond: 429; default 64 */
  int max_connections;       /**< HTTP connections; beyond: refused by the HTTP layer; default 128 */
  size_t max_body;           /**< request body bytes; beyond: 413; default 1 MiB */
  int max_tokens_default;    /**< default 256 */
  int prefill_chunk;         /**< default 256 */
  int prefix_cache;          /**< finished sequences kept for prefix reuse; default 0 */
  int kv_format;             /**< DSV4_KV_FORMAT_* window records; default native */
  int verbose;
} srv_opts;

/** One generated token's log-probabilities, copied from the scheduler's event. */
typedef struct srv_lp {
  int32_t token, n_top;
  float logprob;
  int32_t top_ids[DSV4_MAX_LOGPROBS];
  float top_lp[DSV4_MAX_LOGPROBS];
} srv_lp;

/** One HTTP generation request (chat or completion), shared by its
 *  connection thread and the engine thread under srv.jobs. */
typedef struct srv_job {
  pthread_cond_t cond;       /**< waits on *jobs */
  pthread_mutex_t *jobs;     /**< srv.jobs */
  int64_t rid;               /**< scheduler request id (0: not submitted or released) */
  int finished;              /**< DSV4_FINISH_* once done (also set on cancel) */
  int gone;                  /**< the client left: cancel and drop output */
  int32_t eos;
  int chat, stream, thinking, include_usage, continuous_usage, skip_eos_text;
  int64_t n_prompt, n_completion;
  int64_t n_taken;           /**< n_completion when the connection thread last took text */
  char *text;                /**< decoded text not yet taken by the connection thread */
  size_t n_text, cap_text;
  int logprobs;              /**< return per-token log-probabilities (top_logprobs alternatives) */
  srv_lp *lp;                /**< entries not yet taken, one per token whose text is output */
  size_t n_lp, cap_lp;
  int oom;
  /* connection-thread side (no lock needed) */
  char id[48];
  int64_t created;
  dsv4_chat_parser *parser;
  json_t *tool_calls;        /**< parsed tool calls (array) */
  char *content, *reasoning; /**< non-streaming: accumulated */
  size_t n_content, n_reasoning;
  json_t *lp_out;            /**< the OpenAI "logprobs" object not yet sent (NULL: none) */
  int64_t lp_offset;         /**< completions: characters of text covered by lp_out so far */
  char *sse;                 /**< streaming: bytes to send */
  size_t n_sse, cap_sse, sse_off;
  int sent_role, sent_done, n_tool_calls_sent;
  int64_t last_send_ns;
} srv_job;

typedef struct srv {
  srv_opts o;
  dsv4_engine *eng;
  dsv4_tokenizer *tok;
  dsv4_scheduler *sched;
  int32_t eos, bos, vocab;
  pthread_mutex_t lock;
  pthread_mutex_t jobs;
  pthread_cond_t work;       /**< the engine thread waits here when idle */
  pthread_t engine_thread;
  atomic_int want_lock;      /**< connection threads waiting for the lock */
  int stop;                  /**< the engine thread exits */
  int closing;               /**< shutting down: new requests get 503 */
  int failed;                /**< the engine failed: 503 from now on */
  int active;                /**< requests queued or running */
  char model_name[256];
  int64_t served, rejected;
} srv;

/** Calls that cannot fail with the arguments given (params init, info, stats). */
static inline void must(dsv4_status s) {
  if (s < 0) abort();
}

/* engine side (srv_engine.c) */
int srv_engine_start(srv *s);
void srv_engine_stop(srv *s);
void srv_lock(srv *s);
void srv_unlock(srv *s);
/** Submit (lock held): DSV4_OK, or the scheduler's status (DSV4_KV_FULL when full). */
dsv4_status srv_submit(srv *s, srv_job *j, const int32_t *ids, int64_t n,
                       const dsv4_request_params *p);
/** Cancel a job's request if it still runs (lock held). */
void srv_cancel(srv *s, srv_job *j);

/* OpenAI request -> prompt + params, and responses (srv_openai.c) */
typedef struct srv_req {
  int chat, stream, thinking, include_usage, continuous_usage;
  int32_t *ids;
  int64_t n_ids;
  dsv4_request_params p;
  const char **stop;         /**< borrowed from the request JSON */
  int32_t n_stop;
  int32_t *bias_ids;
  float *bias;
  int logprobs;              /**< chat "logprobs": true; completions "logprobs": n (not null) */
} srv_req;

/** A request body received in pieces (srv_body.c); zero-initialise. */
typedef struct srv_body {
  char *buf;                 /**< NUL-terminated; NULL while empty */
  size_t n, cap;
  int too_large;             /**< more than max bytes came: answer 413 */
} srv_body;

/** Append a piece of the body; past max bytes in all, sets too_large and
 *  keeps nothing more. 0, or -1 when out of memory. */
int srv_body_add(srv_body *b, const char *piece, size_t n, size_t max);
void srv_body_free(srv_body *b);

/** Parse a request body. On failure: HTTP status and an OpenAI error JSON in *err. */
int srv_parse_request(srv *s, const char *body, size_t len, int chat, json_t **root, srv_req *r,
                      json_t **err);
void srv_req_free(srv_req *r);
json_t *srv_error_json(const char *message, const char *type, const char *param);
/** Turn new decoded text and the log-probabilities of its tokens into output
 *  (SSE bytes or accumulated fields). */
void srv_job_text(srv *s, srv_job *j, const char *text, size_t n, const srv_lp *lp, size_t n_lp);
/** The request finished: flush the parser, final chunk / body. */
json_t *srv_job_finish(srv *s, srv_job *j);
const char *srv_finish_name(int finish);

/* HTTP (srv_http.c) */
int srv_http_run(srv *s);

#endif /* DSV4_SRV_H */
