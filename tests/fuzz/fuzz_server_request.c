/* libFuzzer: dsv4-server's request path from memory, without a socket:
 * the body arrives in pieces (srv_body_add, with the size limit) and is
 * parsed into a request (srv_parse_request: JSON, sampling fields, stop
 * strings, logit_bias, chat messages through dsv4_chat_encode or a
 * completion prompt through the tokenizer); a request that parses is then
 * answered with the body text as model output through the response path
 * (srv_job_text, srv_job_finish: chat parser, log-probabilities when asked
 * for, SSE chunks or one JSON body).
 * Byte 0: bit 0 chat (else completion), bits 1-4 the piece size, bit 5 a
 * small body limit (256 bytes, else 1 MiB); the rest is the body. Oracles
 * besides the sanitizers:
 *  - the pieces join to the body; the limit is hit exactly when the body
 *    is longer;
 *  - the status is 0 or 400; a 400 carries an OpenAI error object with a
 *    message;
 *  - an accepted request has a prompt of token ids in [0, vocab), the
 *    sampling values in the ranges the server checks, non-empty stop
 *    strings, logit_bias ids in range, at most DSV4_MAX_LOGPROBS
 *    alternatives;
 *  - the response is a JSON object with one choice, or SSE events that are
 *    each one JSON object, ending with [DONE]. */
#include <jansson.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "srv.h"
#include "io/tokenizer_internal.h"
#include "fuzz_data.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static srv g_s;

static void init(void) {
  if (dsv4_tokenizer_load(fuzz_data_dir("data/tiny-tokenizer"), &g_s.tok) != DSV4_OK) abort();
  g_s.vocab = dsv4_tokenizer_vocab_size(g_s.tok);
  g_s.bos = dsv4_tokenizer_special_id(g_s.tok, DSV4_TOKEN_BOS);
  g_s.eos = dsv4_tokenizer_special_id(g_s.tok, DSV4_TOKEN_EOS);
  g_s.o.max_tokens_default = 256;
  strcpy(g_s.model_name, "fuzz");
}

static void check_request(const srv_req *r) {
  if (r->n_ids < 1 || !r->ids) abort();
  for (int64_t i = 0; i < r->n_ids; i++)
    if (r->ids[i] < 0 || r->ids[i] >= g_s.vocab) abort();
  const dsv4_request_params *p = &r->p;
  if (!(p->temperature >= 0 && p->temperature <= 100) || !(p->top_p > 0 && p->top_p <= 1) ||
      p->top_k < 0 || !(p->min_p >= 0 && p->min_p <= 1) || !(fabsf(p->presence_penalty) <= 2) ||
      !(fabsf(p->frequency_penalty) <= 2) || !(p->repetition_penalty > 0 && p->repetition_penalty <= 100) ||
      p->max_tokens < 1)
    abort();
  if (p->n_stop < 0 || p->n_stop > 16 || (p->n_stop && !p->stop)) abort();
  for (int32_t i = 0; i < p->n_stop; i++)
    if (!p->stop[i] || !p->stop[i][0]) abort();
  if (p->n_logprobs < 0 || p->n_logprobs > DSV4_MAX_LOGPROBS) abort();
  if (p->n_logit_bias < 0 || p->n_logit_bias > 1024) abort();
  for (int32_t i = 0; i < p->n_logit_bias; i++)
    if (p->logit_bias_ids[i] < 0 || p->logit_bias_ids[i] >= g_s.vocab || !(fabsf(p->logit_bias[i]) <= 100))
      abort();
}

static void check_sse(const char *t, size_t n) {
  int done = 0;
  for (size_t i = 0; i < n;) {
    if (done || n - i < 8 || memcmp(t + i, "data: ", 6)) abort();
    const char *end = strstr(t + i, "\n\n");
    if (!end) abort();
    const char *ev = t + i + 6;
    const size_t k = (size_t)(end - ev);
    if (k == 6 && !memcmp(ev, "[DONE]", 6)) {
      done = 1;
    } else {
      json_t *j = json_loadb(ev, k, JSON_ALLOW_NUL, NULL); /* \u0000 is JSON */
      if (!json_is_object(j)) {
        fprintf(stderr, "SSE event is not a JSON object: %.*s\n", (int)k, ev);
        abort();
      }
      json_decref(j);
    }
    i = (size_t)(end - t) + 2;
  }
  if (!done) abort();
}

/* Answer the request with the body's text as the model's output. */
static void respond(const srv_req *r, const char *text, size_t n, size_t piece) {
  static pthread_mutex_t jobs = PTHREAD_MUTEX_INITIALIZER;
  srv_job j;
  memset(&j, 0, sizeof j);
  j.jobs = &jobs;
  j.chat = r->chat;
  j.stream = r->stream;
  j.thinking = r->thinking;
  j.include_usage = r->include_usage;
  j.continuous_usage = r->continuous_usage;
  j.n_prompt = r->n_ids;
  strcpy(j.id, r->chat ? "chatcmpl-0000000000000001" : "cmpl-0000000000000001");
  j.tool_calls = json_array();
  if (!j.tool_calls) abort();
  if (r->chat && dsv4_chat_parser_create(r->thinking ? DSV4_CHAT_MODE_THINKING : DSV4_CHAT_MODE_CHAT,
                                         &j.parser) != DSV4_OK)
    abort();
  j.logprobs = r->logprobs;
  for (size_t at = 0; at < n; at += piece) {
    const size_t k = n - at < piece ? n - at : piece;
    j.n_completion++;
    j.n_taken = j.n_completion;
    /* one token's log-probabilities per piece when asked for, ids taken from the text */
    srv_lp lp;
    memset(&lp, 0, sizeof lp);
    lp.token = (int32_t)((unsigned char)text[at] * 131u % (unsigned)g_s.vocab);
    lp.logprob = -(float)(unsigned char)text[at] / 16.0f;
    lp.n_top = r->p.n_logprobs;
    for (int32_t t = 0; t < lp.n_top; t++) {
      lp.top_ids[t] = (lp.token + t * 7) % g_s.vocab;
      lp.top_lp[t] = lp.logprob - (float)t;
    }
    srv_job_text(&g_s, &j, text + at, k, j.logprobs ? &lp : NULL, j.logprobs ? 1 : 0);
  }
  j.finished = DSV4_FINISH_STOP;
  json_t *body = srv_job_finish(&g_s, &j);
  if (j.stream) {
    if (body) abort();
    check_sse(j.sse, j.n_sse);
  } else {
    const json_t *ch = json_object_get(body, "choices");
    if (!json_is_array(ch) || json_array_size(ch) != 1) abort();
    char *t = json_dumps(body, JSON_COMPACT);
    if (!t) abort();
    free(t);
    json_decref(body);
  }
  dsv4_chat_parser_free(j.parser);
  json_decref(j.tool_calls);
  json_decref(j.lp_out);
  free(j.content);
  free(j.reasoning);
  free(j.sse);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  if (!size) return 0;
  if (!g_s.tok) init();
  const int chat = data[0] & 1;
  const size_t piece = 1 + ((data[0] >> 1) & 15) * 97;
  g_s.o.max_body = data[0] & 32 ? 256 : (size_t)1 << 20;
  const char *in = (const char *)data + 1;
  const size_t len = size - 1;

  srv_body b = {0};
  for (size_t at = 0; at < len; at += piece)
    if (srv_body_add(&b, in + at, len - at < piece ? len - at : piece, g_s.o.max_body)) abort();
  if (b.too_large != (len > g_s.o.max_body)) abort();
  if (b.too_large) {
    srv_body_free(&b);
    return 0;
  }
  if (b.n != len || (len && memcmp(b.buf, in, len)) || (b.buf && b.buf[len])) abort();

  json_t *root = NULL, *err = NULL;
  srv_req r;
  const int code = srv_parse_request(&g_s, b.buf ? b.buf : "", b.n, chat, &root, &r, &err);
  if (code) {
    const json_t *e = json_object_get(err, "error");
    const json_t *m = json_object_get(e, "message");
    const char *type = json_string_value(json_object_get(e, "type"));
    if (code != 400 || !json_is_string(m) || !json_string_length(m) || !type ||
        strcmp(type, "invalid_request_error")) {
      char *t = json_dumps(err, 0);
      fprintf(stderr, "status %d, error %s\n", code, t ? t : "(none)");
      abort();
    }
    json_decref(err);
  } else {
    if (err) abort();
    check_request(&r);
    const char *what;
    /* the decoded output the server sees is valid UTF-8 (the tokenizer's stream decoder) */
    if (dsv4i_tk_utf8_check(in, len, &what) == len) respond(&r, in, len, piece);
  }
  json_decref(root);
  srv_req_free(&r);
  srv_body_free(&b);
  return 0;
}
