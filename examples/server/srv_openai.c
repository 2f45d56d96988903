/*
 * OpenAI request parsing and response building for dsv4-server: the chat
 * prompt comes from dsv4_chat_encode (V4.1 format), the output goes through
 * dsv4_chat_parser (reasoning_content, content, tool_calls); completions are
 * raw text after <｜begin▁of▁sentence｜>, as dsv4-generate feeds it.
 */
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "srv.h"

/* Length of the valid UTF-8 sequence at s[0, n), 0 if none starts there. */
static size_t utf8_seq(const unsigned char *s, size_t n) {
  const size_t k = s[0] < 0x80 ? 1 : s[0] >= 0xc2 && s[0] <= 0xdf ? 2 : s[0] >= 0xe0 && s[0] <= 0xef ? 3
                   : s[0] >= 0xf0 && s[0] <= 0xf4 ? 4 : 0;
  if (!k || k > n) return 0;
  for (size_t i = 1; i < k; i++)
    if ((s[i] & 0xc0) != 0x80) return 0;
  if ((s[0] == 0xe0 && s[1] < 0xa0) || (s[0] == 0xed && s[1] > 0x9f) || (s[0] == 0xf0 && s[1] < 0x90) ||
      (s[0] == 0xf4 && s[1] > 0x8f))
    return 0; /* overlong, surrogate, above U+10FFFF */
  return k;
}

/* Error messages quote request bytes (jansson's "near '...'" can end inside
 * a UTF-8 sequence) and JSON strings must be valid UTF-8: invalid bytes
 * become U+FFFD, so that the error body can always be built. */
json_t *srv_error_json(const char *message, const char *type, const char *param) {
  const size_t n = strlen(message);
  char *clean = malloc(3 * n + 1);
  if (!clean) return NULL;
  size_t o = 0;
  for (size_t i = 0; i < n;) {
    const size_t k = utf8_seq((const unsigned char *)message + i, n - i);
    if (k) {
      memcpy(clean + o, message + i, k);
      o += k, i += k;
    } else {
      memcpy(clean + o, "\xef\xbf\xbd", 3);
      o += 3, i++;
    }
  }
  clean[o] = 0;
  json_t *e = json_pack("{s:{s:s,s:s,s:o,s:n}}", "error", "message", clean, "type", type, "param",
                        param ? json_string(param) : json_null(), "code");
  free(clean);
  return e;
}

__attribute__((format(printf, 3, 4)))
static int bad(json_t **err, const char *param, const char *fmt, ...) {
  char msg[512];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(msg, sizeof msg, fmt, ap);
  va_end(ap);
  *err = srv_error_json(msg, "invalid_request_error", param);
  return 400;
}

/* A number field into *out when present; 0 ok, else the 400 status. */
static int num(const json_t *root, const char *key, double lo, double hi, double *out, json_t **err) {
  const json_t *v = json_object_get(root, key);
  if (!v || json_is_null(v)) return 0;
  if (!json_is_number(v)) return bad(err, key, "'%s' must be a number", key);
  const double x = json_number_value(v);
  if (!(x >= lo && x <= hi)) return bad(err, key, "'%s' is %g, outside [%g, %g]", key, x, lo, hi);
  *out = x;
  return 0;
}

/* An integer field (OpenAI refuses 2.5 where an integer is due; 3.0 is 3)
 * into *out when present; 0 ok, else the 400 status. */
static int integer(const json_t *root, const char *key, int64_t lo, int64_t hi, int64_t *out,
                   json_t **err) {
  const json_t *v = json_object_get(root, key);
  if (!v || json_is_null(v)) return 0;
  int64_t x;
  if (json_is_integer(v)) {
    x = (int64_t)json_integer_value(v);
  } else if (json_is_real(v) && json_real_value(v) == floor(json_real_value(v)) &&
             fabs(json_real_value(v)) < 9.2e18) {
    x = (int64_t)json_real_value(v);
  } else if (json_is_number(v)) {
    return bad(err, key, "Invalid type for '%s': expected an integer, but got a decimal number instead",
               key);
  } else {
    return bad(err, key, "Invalid type for '%s': expected an integer", key);
  }
  if (x < lo || x > hi)
    return bad(err, key, "'%s' is %lld, outside [%lld, %lld]", key, (long long)x, (long long)lo,
               (long long)hi);
  *out = x;
  return 0;
}

static int sampling(srv *s, const json_t *root, srv_req *r, json_t **err) {
  dsv4_request_params *p = &r->p;
  double t = 1.0, top_p = 1.0, min_p = 0, pres = 0, freq = 0, rep = 1;
  int64_t top_k = 0, mt = -1, seed = 0;
  int e = 0;
  if (!e) e = num(root, "temperature", 0, 100, &t, err);
  if (!e) e = num(root, "top_p", 1e-9, 1, &top_p, err);
  if (!e) e = integer(root, "top_k", -1, 1000000000, &top_k, err);
  if (!e) e = num(root, "min_p", 0, 1, &min_p, err);
  if (!e) e = num(root, "presence_penalty", -2, 2, &pres, err);
  if (!e) e = num(root, "frequency_penalty", -2, 2, &freq, err);
  if (!e) e = num(root, "repetition_penalty", 1e-6, 100, &rep, err);
  if (!e) e = integer(root, "seed", INT64_MIN, INT64_MAX, &seed, err);
  if (!e) e = integer(root, "max_tokens", 1, 1000000000, &mt, err);
  if (!e) e = integer(root, "max_completion_tokens", 1, 1000000000, &mt, err);
  /* extension: DSpark speculative decoding, drafts per step (true: as many as the model drafts) */
  int64_t spec = 0;
  const json_t *sv = json_object_get(root, "speculative");
  if (!e && json_is_boolean(sv)) spec = json_is_true(sv) ? INT32_MAX : 0;
  else if (!e) e = integer(root, "speculative", 0, INT32_MAX, &spec, err);
  if (e) return e;
  const json_t *n = json_object_get(root, "n");
  if (n && !json_is_null(n) && !(json_is_integer(n) && json_integer_value(n) == 1))
    return bad(err, "n", "only n = 1 is supported");
  /* chat: "logprobs": true and "top_logprobs": 0..20; completions: "logprobs": 0..20 */
  const json_t *lp = json_object_get(root, "logprobs");
  const json_t *top = json_object_get(root, "top_logprobs");
  int64_t n_top = 0;
  if (r->chat) {
    if (lp && !json_is_boolean(lp) && !json_is_null(lp))
      return bad(err, "logprobs", "'logprobs' must be a boolean");
    r->logprobs = json_is_true(lp);
    if (top && !json_is_null(top)) {
      if (!json_is_integer(top) || json_integer_value(top) < 0 ||
          json_integer_value(top) > DSV4_MAX_LOGPROBS)
        return bad(err, "top_logprobs", "'top_logprobs' must be an integer in [0, %d]",
                   DSV4_MAX_LOGPROBS);
      if (!r->logprobs) return bad(err, "top_logprobs", "'top_logprobs' needs 'logprobs': true");
      n_top = json_integer_value(top);
    }
  } else if (lp && !json_is_null(lp)) {
    if (!json_is_integer(lp) || json_integer_value(lp) < 0 ||
        json_integer_value(lp) > DSV4_MAX_LOGPROBS)
      return bad(err, "logprobs", "'logprobs' must be an integer in [0, %d]", DSV4_MAX_LOGPROBS);
    r->logprobs = 1;
    n_top = json_integer_value(lp);
  }
  p->n_logprobs = (int32_t)n_top;
  p->temperature = (float)t;
  p->top_p = (float)top_p;
  p->top_k = top_k < 0 ? 0 : (int32_t)top_k;
  p->min_p = (float)min_p;
  p->presence_penalty = (float)pres;
  p->frequency_penalty = (float)freq;
  p->repetition_penalty = (float)rep;
  p->seed = (uint64_t)seed;
  p->speculative = (int32_t)spec;
  p->max_tokens = mt > 0 ? (int32_t)mt : (r->chat ? s->o.max_tokens_default : 16);
  if (json_is_true(json_object_get(root, "ignore_eos"))) p->flags |= DSV4_REQUEST_F_IGNORE_EOS;
  const json_t *stop = json_object_get(root, "stop");
  if (json_is_string(stop)) {
    r->stop = calloc(1, sizeof *r->stop);
    if (!r->stop) return bad(err, NULL, "out of memory");
    r->stop[r->n_stop++] = json_string_value(stop);
  } else if (json_is_array(stop)) {
    if (json_array_size(stop) > 16) return bad(err, "stop", "at most 16 stop strings");
    r->stop = calloc(json_array_size(stop) + 1, sizeof *r->stop);
    if (!r->stop) return bad(err, NULL, "out of memory");
    for (size_t i = 0; i < json_array_size(stop); i++) {
      const json_t *x = json_array_get(stop, i);
      if (!json_is_string(x) || !json_string_length(x)) return bad(err, "stop", "stop strings must be non-empty strings");
      r->stop[r->n_stop++] = json_string_value(x);
    }
  } else if (stop && !json_is_null(stop)) {
    return bad(err, "stop", "'stop' must be a string or an array of strings");
  }
  p->n_stop = r->n_stop;
  p->stop = r->stop;
  const json_t *lb = json_object_get(root, "logit_bias");
  if (json_is_object(lb) && json_object_size(lb)) {
    const size_t nb = json_object_size(lb);
    if (nb > 1024) return bad(err, "logit_bias", "at most 1024 logit_bias entries");
    r->bias_ids = calloc(nb, sizeof *r->bias_ids);
    r->bias = calloc(nb, sizeof *r->bias);
    if (!r->bias_ids || !r->bias) return bad(err, NULL, "out of memory");
    const char *k;
    json_t *v;
    int32_t i = 0;
    json_object_foreach((json_t *)lb, k, v) {
      char *end = NULL;
      const long id = strtol(k, &end, 10);
      if (!*k || *end || id < 0 || id >= s->vocab || !json_is_number(v) ||
          !(fabs(json_number_value(v)) <= 100))
        return bad(err, "logit_bias", "logit_bias keys must be token ids in [0, %d) and values in "
                   "[-100, 100]", (int)s->vocab);
      r->bias_ids[i] = (int32_t)id;
      r->bias[i++] = (float)json_number_value(v);
    }
    p->n_logit_bias = i;
    p->logit_bias_ids = r->bias_ids;
    p->logit_bias = r->bias;
  } else if (lb && !json_is_null(lb) && !json_is_object(lb)) {
    return bad(err, "logit_bias", "'logit_bias' must be an object");
  }
  return 0;
}

static int chat_prompt(srv *s, const json_t *root, srv_req *r, json_t **err) {
  const json_t *msgs = json_object_get(root, "messages");
  if (!json_is_array(msgs) || !json_array_size(msgs))
    return bad(err, "messages", "'messages' must be a non-empty array");
  dsv4_chat_params cp;
  must(dsv4_chat_params_init(&cp, sizeof cp));
  const json_t *kw = json_object_get(root, "chat_template_kwargs");
  int thinking = json_is_true(json_object_get(root, "thinking")) ||
                 json_is_true(json_object_get(kw, "thinking")) ||
                 json_is_true(json_object_get(kw, "enable_thinking"));
  const json_t *eff = json_object_get(root, "reasoning_effort");
  if (json_is_string(eff)) {
    const char *e = json_string_value(eff);
    cp.reasoning_effort = !strcmp(e, "low") ? 25 : !strcmp(e, "medium") || !strcmp(e, "high") ? 50
                          : !strcmp(e, "xhigh") ? 75 : !strcmp(e, "max") ? 100 : -1;
    if (cp.reasoning_effort < 0)
      return bad(err, "reasoning_effort", "'reasoning_effort' must be low, high, xhigh, max or 1..100");
  } else if (json_is_integer(eff)) {
    if (json_integer_value(eff) < 1 || json_integer_value(eff) > 100)
      return bad(err, "reasoning_effort", "'reasoning_effort' must be low, high, xhigh, max or 1..100");
    cp.reasoning_effort = (int32_t)json_integer_value(eff);
  }
  cp.mode = thinking ? DSV4_CHAT_MODE_THINKING : DSV4_CHAT_MODE_CHAT;
  r->thinking = thinking;
  const json_t *tools = json_object_get(root, "tools");
  if (json_is_null(tools)) tools = NULL;
  if (tools && !json_is_array(tools)) return bad(err, "tools", "'tools' must be an array of tools");
  for (size_t i = 0; tools && i < json_array_size(tools); i++)
    if (!json_is_object(json_array_get(tools, i)))
      return bad(err, "tools", "'tools[%zu]' must be an object", i);
  /* "none" drops the tools, "auto" lets the model choose; forcing a call
   * ("required", or a named function) needs constrained decoding, which the
   * server does not do: refused rather than silently ignored. */
  const json_t *choice = json_object_get(root, "tool_choice");
  const char *cs = json_is_string(choice) ? json_string_value(choice) : NULL;
  if ((cs && !strcmp(cs, "required")) || json_is_object(choice))
    return bad(err, "tool_choice", "unsupported 'tool_choice': forcing a tool call is not supported; "
               "use \"auto\" or \"none\"");
  if (choice && !json_is_null(choice) && !(cs && (!strcmp(cs, "auto") || !strcmp(cs, "none"))))
    return bad(err, "tool_choice", "'tool_choice' must be \"auto\" or \"none\"");
  json_t *conv = json_object();
  json_object_set(conv, "messages", (json_t *)msgs);
  if (tools && !(cs && !strcmp(cs, "none"))) json_object_set(conv, "tools", (json_t *)tools);
  char *text = json_dumps(conv, JSON_COMPACT);
  json_decref(conv);
  if (!text) return bad(err, NULL, "out of memory");
  int32_t *ids = NULL;
  size_t n = 0;
  dsv4_status st = dsv4_chat_encode(s->tok, text, strlen(text), &cp, &ids, &n);
  free(text);
  if (st) return bad(err, "messages", "%s", dsv4_last_error());
  r->ids = ids;
  r->n_ids = (int64_t)n;
  return 0;
}

static int completion_prompt(srv *s, const json_t *root, srv_req *r, json_t **err) {
  const json_t *pr = json_object_get(root, "prompt");
  if (json_is_array(pr) && json_array_size(pr) == 1 && json_is_string(json_array_get(pr, 0)))
    pr = json_array_get(pr, 0);
  if (json_is_string(pr)) {
    const char *t = json_string_value(pr);
    const size_t len = json_string_length(pr);
    size_t n = 0;
    if (dsv4_tokenizer_encode(s->tok, t, len, NULL, 0, &n))
      return bad(err, "prompt", "%s", dsv4_last_error());
    r->ids = malloc((n + 1) * sizeof *r->ids);
    if (!r->ids) return bad(err, NULL, "out of memory");
    r->ids[0] = s->bos; /* as dsv4-generate: BOS + the text */
    if (n && dsv4_tokenizer_encode(s->tok, t, len, r->ids + 1, n, &n))
      return bad(err, "prompt", "%s", dsv4_last_error());
    r->n_ids = (int64_t)n + 1;
    return 0;
  }
  if (json_is_array(pr) && json_array_size(pr) > 0) {
    const size_t n = json_array_size(pr);
    r->ids = malloc(n * sizeof *r->ids);
    if (!r->ids) return bad(err, NULL, "out of memory");
    for (size_t i = 0; i < n; i++) {
      const json_t *x = json_array_get(pr, i);
      if (!json_is_integer(x) || json_integer_value(x) < 0 || json_integer_value(x) >= s->vocab)
        return bad(err, "prompt", "token ids must be integers in [0, %d)", (int)s->vocab);
      r->ids[i] = (int32_t)json_integer_value(x);
    }
    r->n_ids = (int64_t)n;
    return 0;
  }
  return bad(err, "prompt", "'prompt' must be a string, or an array of token ids");
}

int srv_parse_request(srv *s, const char *body, size_t len, int chat, json_t **root, srv_req *r,
                      json_t **err) {
  memset(r, 0, sizeof *r);
  r->chat = chat;
  must(dsv4_request_params_init(&r->p, sizeof r->p));
  json_error_t je;
  *root = json_loadb(body, len, 0, &je);
  if (!*root) return bad(err, NULL, "request body is not valid JSON: %s (line %d, column %d)",
                         je.text, je.line, je.column);
  if (!json_is_object(*root)) return bad(err, NULL, "request body must be a JSON object");
  const json_t *st = json_object_get(*root, "stream");
  if (st && !json_is_boolean(st) && !json_is_null(st)) return bad(err, "stream", "'stream' must be a boolean");
  r->stream = json_is_true(st);
  const json_t *so = json_object_get(*root, "stream_options");
  r->include_usage = json_is_true(json_object_get(so, "include_usage"));
  r->continuous_usage = json_is_true(json_object_get(so, "continuous_usage_stats"));
  int e = sampling(s, *root, r, err);
  if (!e) e = chat ? chat_prompt(s, *root, r, err) : completion_prompt(s, *root, r, err);
  return e;
}

void srv_req_free(srv_req *r) {
  free(r->ids);
  free(r->stop);
  free(r->bias_ids);
  free(r->bias);
  memset(r, 0, sizeof *r);
}

const char *srv_finish_name(int finish) {
  return finish == DSV4_FINISH_LENGTH ? "length" : "stop";
}

/* ---- output ----------------------------------------------------------------- */

static void grow(char **b, size_t *n, size_t *cap, const char *t, size_t k) {
  if (*n + k + 1 > *cap) {
    size_t c = *cap ? *cap : 256;
    while (c < *n + k + 1) c *= 2;
    char *nb = realloc(*b, c);
    if (!nb) return; /* output is truncated; the connection thread still finishes */
    *b = nb;
    *cap = c;
  }
  memcpy(*b + *n, t, k);
  *n += k;
  (*b)[*n] = 0;
}

/* ---- log-probabilities --------------------------------------------------- */

/* The text of one token (special tokens kept; a partial UTF-8 sequence shows as U+FFFD). */
static json_t *token_str(srv *s, int32_t id) {
  char buf[256];
  size_t n = 0;
  if (dsv4_tokenizer_decode(s->tok, &id, 1, 0, buf, sizeof buf, &n)) n = 0;
  return json_stringn(buf, n);
}

static json_t *token_bytes(const json_t *str) {
  json_t *a = json_array();
  const unsigned char *t = (const unsigned char *)json_string_value(str);
  for (size_t i = 0; i < json_string_length(str); i++) json_array_append_new(a, json_integer(t[i]));
  return a;
}

static size_t utf8_chars(const json_t *str) {
  size_t n = 0;
  const unsigned char *t = (const unsigned char *)json_string_value(str);
  for (size_t i = 0; i < json_string_length(str); i++) n += (t[i] & 0xC0) != 0x80;
  return n;
}

/* Chat: {"token", "logprob", "bytes"}; stolen str. */
static json_t *chat_lp(json_t *str, float lp) {
  return json_pack("{s:o,s:f,s:o}", "token", str, "logprob", (double)lp, "bytes", token_bytes(str));
}

/* Add tokens' log-probabilities to j->lp_out in the request's OpenAI format: chat
 * {"content": [{"token", "logprob", "bytes", "top_logprobs": [...]}]}, completions
 * {"tokens", "token_logprobs", "top_logprobs": [{token: logprob}], "text_offset"}. */
static void lp_add(srv *s, srv_job *j, const srv_lp *e, size_t n) {
  if (!n) return;
  if (!j->lp_out)
    j->lp_out = j->chat ? json_pack("{s:[]}", "content")
                        : json_pack("{s:[],s:[],s:[],s:[]}", "tokens", "token_logprobs",
                                    "top_logprobs", "text_offset");
  if (!j->lp_out) return;
  for (size_t i = 0; i < n; i++) {
    json_t *str = token_str(s, e[i].token);
    if (j->chat) {
      json_t *top = json_array();
      for (int32_t k = 0; k < e[i].n_top; k++)
        json_array_append_new(top, chat_lp(token_str(s, e[i].top_ids[k]), e[i].top_lp[k]));
      json_t *c = chat_lp(str, e[i].logprob);
      json_object_set_new(c, "top_logprobs", top);
      json_array_append_new(json_object_get(j->lp_out, "content"), c);
    } else {
      json_t *top = json_object();
      for (int32_t k = e[i].n_top - 1; k >= 0; k--) { /* the likelier of two same-text ids wins */
        json_t *t = token_str(s, e[i].top_ids[k]);
        json_object_set_new(top, json_string_value(t), json_real(e[i].top_lp[k]));
        json_decref(t);
      }
      json_array_append_new(json_object_get(j->lp_out, "text_offset"),
                            json_integer((json_int_t)j->lp_offset));
      j->lp_offset += (int64_t)utf8_chars(str);
      json_array_append_new(json_object_get(j->lp_out, "token_logprobs"), json_real(e[i].logprob));
      json_array_append_new(json_object_get(j->lp_out, "tokens"), str);
      json_array_append_new(json_object_get(j->lp_out, "top_logprobs"), top);
    }
  }
}

/* The "logprobs" value of the next chunk or the body: what was gathered (taken), or null. */
static json_t *lp_take(srv_job *j) {
  json_t *o = j->lp_out;
  j->lp_out = NULL;
  return o ? o : json_null();
}

static json_t *chunk_base(srv *s, srv_job *j) {
  return json_pack("{s:s,s:s,s:I,s:s}", "id", j->id, "object",
                   j->chat ? "chat.completion.chunk" : "text_completion", "created",
                   (json_int_t)j->created, "model", s->model_name);
}

static json_t *usage(const srv_job *j) {
  return json_pack("{s:I,s:I,s:I}", "prompt_tokens", (json_int_t)j->n_prompt, "completion_tokens",
                   (json_int_t)j->n_completion, "total_tokens", (json_int_t)(j->n_prompt + j->n_completion));
}

/* Append one SSE event with choice (stolen) to j->sse. With
 * stream_options.continuous_usage_stats every chunk carries the usage so far
 * (completion_tokens: the tokens whose text this chunk completes), which is
 * what token-attributed latency needs (bench/serve_bench.py). */
static void sse_choice(srv *s, srv_job *j, json_t *choice) {
  json_t *c = chunk_base(s, j);
  json_object_set_new(c, "choices", json_pack("[o]", choice));
  if (j->continuous_usage)
    json_object_set_new(c, "usage", json_pack("{s:I,s:I,s:I}", "prompt_tokens", (json_int_t)j->n_prompt,
                                              "completion_tokens", (json_int_t)j->n_taken,
                                              "total_tokens", (json_int_t)(j->n_prompt + j->n_taken)));
  char *t = json_dumps(c, JSON_COMPACT);
  json_decref(c);
  if (!t) return;
  size_t cap = j->cap_sse;
  grow(&j->sse, &j->n_sse, &cap, "data: ", 6);
  grow(&j->sse, &j->n_sse, &cap, t, strlen(t));
  grow(&j->sse, &j->n_sse, &cap, "\n\n", 2);
  j->cap_sse = cap;
  free(t);
}

static void sse_delta(srv *s, srv_job *j, json_t *delta) {
  if (!j->sent_role) {
    j->sent_role = 1;
    sse_choice(s, j, json_pack("{s:i,s:{s:s,s:s},s:n}", "index", 0, "delta", "role", "assistant",
                               "content", "", "finish_reason"));
  }
  sse_choice(s, j, json_pack("{s:i,s:o,s:o,s:n}", "index", 0, "delta", delta, "logprobs",
                             lp_take(j), "finish_reason"));
}

static void on_event(int32_t kind, const char *text, size_t len, void *user) {
  void **u = user;
  srv *s = u[0];
  srv_job *j = u[1];
  if (kind == DSV4_CHAT_EVENT_TOOL_CALL) {
    json_t *c = json_loadb(text, len, JSON_ALLOW_NUL, NULL); /* a name may hold \u0000 */
    if (!c) return;
    char cid[40];
    snprintf(cid, sizeof cid, "call_%s_%d", j->id + 9, (int)json_array_size(j->tool_calls));
    json_t *tc = json_pack("{s:s,s:s,s:{s:O,s:O}}", "id", cid, "type", "function", "function",
                           "name", json_object_get(c, "name"), "arguments",
                           json_object_get(c, "arguments"));
    json_decref(c);
    if (j->stream) {
      json_t *d = json_deep_copy(tc);
      json_object_set_new(d, "index", json_integer((json_int_t)json_array_size(j->tool_calls)));
      sse_delta(s, j, json_pack("{s:[o]}", "tool_calls", d));
    }
    json_array_append_new(j->tool_calls, tc);
    return;
  }
  if (kind != DSV4_CHAT_EVENT_REASONING && kind != DSV4_CHAT_EVENT_CONTENT) return;
  const int reasoning = kind == DSV4_CHAT_EVENT_REASONING;
  if (j->stream) {
    sse_delta(s, j, json_pack("{s:s%}", reasoning ? "reasoning_content" : "content", text, len));
  } else {
    size_t cap = reasoning ? j->n_reasoning + len + 1 : j->n_content + len + 1, n0 = 0;
    (void)n0;
    char **b = reasoning ? &j->reasoning : &j->content;
    size_t *n = reasoning ? &j->n_reasoning : &j->n_content;
    char *nb = realloc(*b, cap);
    if (!nb) return;
    *b = nb;
    memcpy(*b + *n, text, len);
    *n += len;
    (*b)[*n] = 0;
  }
}

void srv_job_text(srv *s, srv_job *j, const char *text, size_t n, const srv_lp *lp, size_t n_lp) {
  lp_add(s, j, lp, n_lp); /* sent with the next chunk (text held back by a stop string or
                           * a possible chat marker waits, and so do its logprobs) */
  if (!n) return;
  if (j->chat) {
    void *u[2] = {s, j};
    (void)!dsv4_chat_parser_push(j->parser, text, n, on_event, u); /* nothing to do on failure here */
    return;
  }
  if (j->stream) {
    sse_choice(s, j, json_pack("{s:i,s:s%,s:o,s:n}", "index", 0, "text", text, n, "logprobs",
                               lp_take(j), "finish_reason"));
  } else {
    void *u[2] = {s, j};
    on_event(DSV4_CHAT_EVENT_CONTENT, text, n, u);
  }
}


json_t *srv_job_finish(srv *s, srv_job *j) {
  if (j->chat) {
    void *u[2] = {s, j};
    (void)!dsv4_chat_parser_finish(j->parser, on_event, u); /* nothing to do on failure here */
  }
  const char *reason = json_array_size(j->tool_calls) && j->finished == DSV4_FINISH_STOP
                           ? "tool_calls" : srv_finish_name(j->finished);
  if (j->stream) {
    if (j->chat) {
      if (!j->sent_role) sse_delta(s, j, json_object());
      sse_choice(s, j, json_pack("{s:i,s:{},s:o,s:s}", "index", 0, "delta", "logprobs", lp_take(j),
                                 "finish_reason", reason));
    } else {
      sse_choice(s, j, json_pack("{s:i,s:s,s:o,s:s}", "index", 0, "text", "", "logprobs",
                                 lp_take(j), "finish_reason", reason));
    }
    if (j->include_usage) {
      json_t *c = chunk_base(s, j);
      json_object_set_new(c, "choices", json_array());
      json_object_set_new(c, "usage", usage(j));
      char *t = json_dumps(c, JSON_COMPACT);
      json_decref(c);
      size_t cap = j->cap_sse;
      if (t) {
        grow(&j->sse, &j->n_sse, &cap, "data: ", 6);
        grow(&j->sse, &j->n_sse, &cap, t, strlen(t));
        grow(&j->sse, &j->n_sse, &cap, "\n\n", 2);
      }
      j->cap_sse = cap;
      free(t);
    }
    size_t cap = j->cap_sse;
    grow(&j->sse, &j->n_sse, &cap, "data: [DONE]\n\n", 14);
    j->cap_sse = cap;
    return NULL;
  }
  json_t *body = json_pack("{s:s,s:s,s:I,s:s}", "id", j->id, "object",
                           j->chat ? "chat.completion" : "text_completion", "created",
                           (json_int_t)j->created, "model", s->model_name);
  json_t *choice;
  if (j->chat) {
    json_t *msg = json_pack("{s:s,s:s}", "role", "assistant", "content", j->content ? j->content : "");
    if (j->thinking) json_object_set_new(msg, "reasoning_content", json_string(j->reasoning ? j->reasoning : ""));
    if (json_array_size(j->tool_calls)) json_object_set(msg, "tool_calls", j->tool_calls);
    choice = json_pack("{s:i,s:o,s:o,s:s}", "index", 0, "message", msg, "logprobs", lp_take(j),
                       "finish_reason", reason);
  } else {
    choice = json_pack("{s:i,s:s,s:o,s:s}", "index", 0, "text", j->content ? j->content : "",
                       "logprobs", lp_take(j), "finish_reason", reason);
  }
  json_object_set_new(body, "choices", json_pack("[o]", choice));
  json_object_set_new(body, "usage", usage(j));
  return body;
}
