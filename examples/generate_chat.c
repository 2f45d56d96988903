/*
 * dsv4-generate --chat: read user turns (one per line), keep the
 * conversation as OpenAI-style messages, render it with dsv4_chat_encode and
 * answer. The sequence is kept between turns: when the new prompt starts
 * with everything the sequence holds (the usual case: earlier turns render
 * the same way), only the new tokens are prefilled; otherwise it starts
 * over. Answers go to stdout, reasoning (thinking mode) to stderr.
 */
#include <jansson.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "generate_chat.h"

typedef struct acc {
  char *content, *reasoning;
  size_t n_content, n_reasoning;
  int thinking_shown;
} acc;

static void add(char **b, size_t *n, const char *t, size_t k) {
  char *nb = realloc(*b, *n + k + 1);
  if (!nb) return;
  memcpy(nb + *n, t, k);
  *n += k;
  nb[*n] = 0;
  *b = nb;
}

static void on_event(int32_t kind, const char *text, size_t len, void *user) {
  acc *a = user;
  if (kind == DSV4_CHAT_EVENT_CONTENT) {
    fwrite(text, 1, len, stdout);
    fflush(stdout);
    add(&a->content, &a->n_content, text, len);
  } else if (kind == DSV4_CHAT_EVENT_REASONING) {
    fwrite(text, 1, len, stderr);
    add(&a->reasoning, &a->n_reasoning, text, len);
  } else if (kind == DSV4_CHAT_EVENT_TOOL_CALL) {
    fprintf(stdout, "\n[tool call] %.*s\n", (int)len, text);
  }
}

/* Calls that cannot fail with these arguments (params init, info). */
static void must(dsv4_status s) {
  if (s < 0) {
    fprintf(stderr, "dsv4-generate: %s\n", dsv4_last_error());
    exit(1);
  }
}

static int fail(const char *what, dsv4_status s, const char *msg) {
  fprintf(stderr, "\ndsv4-generate: %s: %s\n  %s\n", what, dsv4_status_string(s), msg);
  return 1;
}

int generate_chat(dsv4_model *model, dsv4_tokenizer *tok, const chat_opts *o) {
  dsv4_model_info mi;
  must(dsv4_model_get_info(model, &mi, sizeof mi));
  dsv4_engine_params ep;
  must(dsv4_engine_params_init(&ep, sizeof ep));
  ep.max_sequences = 1;
  ep.n_threads = (int32_t)o->threads;
  ep.prefill_chunk = (int32_t)o->chunk;
  dsv4_engine *eng = NULL;
  dsv4_status s = dsv4_engine_create(model, &ep, &eng);
  if (s) return fail("cannot create the engine", s, dsv4_last_error());
  dsv4_engine_info ei;
  must(dsv4_engine_get_info(eng, &ei, sizeof ei));
  json_t *conv = json_array();
  if (o->system) json_array_append_new(conv, json_pack("{s:s,s:s}", "role", "system", "content", o->system));
  dsv4_chat_params cp;
  must(dsv4_chat_params_init(&cp, sizeof cp));
  cp.mode = o->thinking ? DSV4_CHAT_MODE_THINKING : DSV4_CHAT_MODE_CHAT;
  dsv4_sampling_params sp;
  must(dsv4_sampling_params_init(&sp, sizeof sp));
  sp.temperature = (float)o->temp;
  sp.seed = o->seed;
  int32_t *held = NULL; /* what the sequence holds */
  size_t n_held = 0;
  int64_t seq = 0;
  char *line = NULL;
  size_t cap = 0;
  int rc = 0;
  const int tty = isatty(0);
  for (;;) {
    if (tty) fputs("> ", stderr);
    ssize_t k = getline(&line, &cap, o->in);
    if (k < 0) break;
    while (k > 0 && (line[k - 1] == '\n' || line[k - 1] == '\r')) line[--k] = 0;
    if (!k) continue;
    json_t *um = json_pack("{s:s,s:s}", "role", "user", "content", line);
    if (!um) { /* not UTF-8 */
      fprintf(stderr, "dsv4-generate: that line is not valid UTF-8; ignored\n");
      continue;
    }
    json_array_append_new(conv, um);
    char *text = json_dumps(conv, JSON_COMPACT);
    int32_t *ids = NULL;
    size_t n = 0;
    s = text ? dsv4_chat_encode(tok, text, strlen(text), &cp, &ids, &n) : DSV4_ERR_OUT_OF_MEMORY;
    free(text);
    if (s) {
      rc = fail("cannot render the conversation", s, dsv4_last_error());
      break;
    }
    size_t same = 0; /* reuse the sequence when it holds a prefix of the new prompt */
    while (same < n_held && same < n && held[same] == ids[same]) same++;
    if (!seq || same < n_held || same == n) {
      if (seq && dsv4_engine_seq_free(eng, seq)) {
      }
      seq = 0;
      same = n_held = 0;
      if ((s = dsv4_engine_seq_create(eng, &seq))) break;
    }
    if ((int64_t)n + 1 > ei.max_context) {
      fprintf(stderr, "dsv4-generate: the conversation (%zu tokens) no longer fits the context of "
                      "%lld; ending\n", n, (long long)ei.max_context);
      dsv4_free(ids);
      break;
    }
    int32_t next = -1;
    s = dsv4_engine_prefill(eng, seq, ids + same, (int64_t)(n - same), &sp, NULL, &next);
    if (s) {
      dsv4_free(ids);
      rc = fail("prefill failed", s, dsv4_last_error());
      break;
    }
    int32_t *nh = realloc(held, (n + (size_t)o->max_tokens + 1) * sizeof *held);
    if (!nh) {
      dsv4_free(ids);
      rc = 1;
      break;
    }
    held = nh;
    memcpy(held, ids, n * sizeof *ids);
    n_held = n;
    dsv4_free(ids);
    dsv4_chat_parser *parser = NULL;
    dsv4_tokenizer_stream *st = NULL;
    acc a;
    memset(&a, 0, sizeof a);
    if ((s = dsv4_chat_parser_create(cp.mode, &parser)) || (s = dsv4_tokenizer_stream_create(tok, 0, &st)))
      break;
    for (long g = 0; g < o->max_tokens; g++) {
      const char *t;
      size_t len;
      if (dsv4_tokenizer_stream_push(st, next, &t, &len)) len = 0;
      if (len && dsv4_chat_parser_push(parser, t, len, on_event, &a)) break; /* out of memory */
      if (next == mi.eos_token_id || g + 1 == o->max_tokens || (int64_t)n_held + 1 >= ei.max_context) break;
      const int32_t in = next;
      if ((s = dsv4_engine_decode(eng, 1, &seq, &in, &sp, NULL, &next))) break;
      held[n_held++] = in;
    }
    const char *t;
    size_t len;
    if (dsv4_tokenizer_stream_flush(st, &t, &len)) len = 0;
    (void)!dsv4_chat_parser_push(parser, t, len, on_event, &a); /* what it cannot take is lost */
    (void)!dsv4_chat_parser_finish(parser, on_event, &a);
    dsv4_chat_parser_free(parser);
    dsv4_tokenizer_stream_free(st);
    fputc('\n', stdout);
    fflush(stdout);
    json_t *m = json_pack("{s:s,s:s}", "role", "assistant", "content", a.content ? a.content : "");
    if (o->thinking) json_object_set_new(m, "reasoning_content", json_string(a.reasoning ? a.reasoning : ""));
    json_array_append_new(conv, m);
    free(a.content);
    free(a.reasoning);
    if (s) {
      rc = fail("generation failed", s, dsv4_last_error());
      break;
    }
  }
  free(line);
  free(held);
  json_decref(conv);
  dsv4_engine_free(eng);
  return rc;
}
