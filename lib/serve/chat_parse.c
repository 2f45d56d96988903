/*
 * Streaming parser of V4.1 model output (docs/serving.md, "Chat format"):
 *
 *   [reasoning "</think>"] content ["\n\n<｜DSML｜ calls>" invokes "</｜DSML｜ calls>"] EOS
 *
 * Reasoning (thinking mode only) runs to </think>; content runs to EOS or
 * to the tool-call block; the block is parsed with the release parser's
 * rules once its end tag arrives, and each invoke becomes one tool call
 * whose arguments are the JSON text the release parser builds (string
 * parameters quoted, the others verbatim). Text is emitted as soon as it
 * cannot be the start of a marker, so a marker split across pushes is
 * still found. A block that does not parse (also one that is not valid
 * UTF-8: its calls could not be JSON), or that the output ends inside, is
 * emitted as content unchanged; nothing is ever lost.
 */
#include <stdlib.h>
#include <string.h>

#include "io/tokenizer_internal.h"
#include "serve/chat.h"
#include "serve/pyjson.h"

#define D DSV4I_CHAT_DSML
#define CALLS_OPEN "\n\n<" D " calls"
#define CALLS_CLOSE "</" D " calls>"
#define INVOKE_OPEN "<" D " invoke"
#define INVOKE_CLOSE "</" D " invoke"
#define PARAM_OPEN "<" D " parameter"
#define PARAM_CLOSE "/" D " parameter"

enum { S_REASONING, S_CONTENT, S_TOOLS, S_AFTER_TOOLS, S_DONE };

struct dsv4i_chat_parser {
  int state;
  dsv4i_str pend; /* text not yet emitted (S_TOOLS: the block after CALLS_OPEN) */
  size_t parsed;  /* S_TOOLS: bytes of pend the last (unfinished) parse of the block saw */
};

dsv4_status dsv4i_chat_parser_create(int thinking, dsv4i_chat_parser **out) {
  *out = dsv4i_calloc(1, sizeof **out, "chat parser");
  if (!*out) return DSV4_ERR_OUT_OF_MEMORY;
  (*out)->state = thinking ? S_REASONING : S_CONTENT;
  return DSV4_OK;
}

void dsv4i_chat_parser_free(dsv4i_chat_parser *p) {
  if (!p) return;
  dsv4i_str_free(&p->pend);
  free(p);
}

static const char *find(const char *s, size_t n, const char *m) {
  const size_t k = strlen(m);
  for (size_t i = 0; i + k <= n; i++)
    if (s[i] == m[0] && !memcmp(s + i, m, k)) return s + i;
  return NULL;
}

/* Length of the longest suffix of s[0, n) that is a proper prefix of m. */
static size_t partial(const char *s, size_t n, const char *m) {
  const size_t k = strlen(m);
  for (size_t l = k - 1 < n ? k - 1 : n; l > 0; l--)
    if (!memcmp(s + n - l, m, l)) return l;
  return 0;
}

static void consume(dsv4i_str *b, size_t n) {
  if (!n) return;
  memmove(b->buf, b->buf + n, b->len - n);
  b->len -= n;
  if (b->buf) b->buf[b->len] = 0;
}

/* ---- the tool-call block (the release parser's rules) -------------------- */

typedef struct cursor {
  const char *s;
  size_t n, i;
} cursor;

/* Read up to the earliest of the markers: *got = text before it, returns the
 * marker index, or -1 when none occurs (then everything is read). */
static int read_until(cursor *c, const char *const *marks, int nm, const char **got, size_t *got_n) {
  const char *best = NULL;
  int which = -1;
  for (int k = 0; k < nm; k++) {
    const char *f = find(c->s + c->i, c->n - c->i, marks[k]);
    if (f && (!best || f < best)) best = f, which = k;
  }
  *got = c->s + c->i;
  if (!best) {
    *got_n = c->n - c->i;
    c->i = c->n;
    return -1;
  }
  *got_n = (size_t)(best - *got);
  c->i = (size_t)(best - c->s) + strlen(marks[which]);
  return which;
}

static int eq(const char *s, size_t n, const char *lit) {
  return n == strlen(lit) && !memcmp(s, lit, n);
}

enum { P_OK, P_MORE, P_BAD };

/* name="X">\n  (leading white space allowed) */
static int invoke_name(const char *s, size_t n, const char **name, size_t *name_n) {
  size_t i = 0;
  while (i < n && (s[i] == ' ' || s[i] == '\t' || s[i] == '\n' || s[i] == '\r' || s[i] == '\f' ||
                   s[i] == '\v'))
    i++;
  if (n - i < 9 || memcmp(s + i, "name=\"", 6) || memcmp(s + n - 3, "\">\n", 3)) return 0;
  *name = s + i + 6;
  *name_n = n - 3 - (i + 6);
  return find(*name, *name_n, "\">\n") == NULL; /* the shortest match must end the text */
}

/* ` name="K" string="true|false">V<` */
static int param_kv(const char *s, size_t n, const char **k, size_t *kn, int *is_str,
                    const char **v, size_t *vn) {
  if (n < 8 || memcmp(s, " name=\"", 7) || s[n - 1] != '<') return 0;
  const char *body = s + 7;
  const size_t bn = n - 7;
  for (size_t j = 0; j < bn; j++) { /* the first `" string="(true|false)">` ends the name */
    const char *t = body + j;
    const size_t left = bn - j;
    int st = -1;
    size_t hl = 0;
    if (left >= 17 && !memcmp(t, "\" string=\"true\">", 16)) st = 1, hl = 16;
    else if (left >= 18 && !memcmp(t, "\" string=\"false\">", 17)) st = 0, hl = 17;
    if (st < 0) continue;
    *k = body;
    *kn = j;
    *is_str = st;
    *v = t + hl;
    *vn = left - hl - 1;
    return 1;
  }
  return 0;
}

/* Parse the block text after CALLS_OPEN; on P_OK *used = bytes through CALLS_CLOSE. */
static int parse_block(const char *s, size_t n, dsv4i_chat_event_fn fn, void *user, int emit,
                       size_t *used) {
  static const char *const inv[] = {INVOKE_OPEN, CALLS_CLOSE};
  static const char *const prm[] = {PARAM_OPEN, INVOKE_CLOSE};
  static const char *const pcl[] = {PARAM_CLOSE};
  cursor c = {s, n, 0};
  for (;;) {
    const char *got;
    size_t gn;
    int w = read_until(&c, inv, 2, &got, &gn);
    if (w < 0) return P_MORE;
    if (!eq(got, gn, ">\n")) return P_BAD;
    if (w == 1) break;
    const char *name;
    size_t name_n;
    w = read_until(&c, prm, 2, &got, &gn);
    if (w < 0) return P_MORE;
    if (!invoke_name(got, gn, &name, &name_n)) return P_BAD;
    dsv4i_str args = {0};
    dsv4i_str_append(&args, "{", 1);
    int np = 0, r = P_OK;
    const char *keys[64];
    size_t key_n[64];
    while (w == 0) {
      const char *k, *v;
      size_t kn, vn;
      int is_str;
      if (read_until(&c, pcl, 1, &got, &gn) < 0) { r = P_MORE; break; }
      if (!param_kv(got, gn, &k, &kn, &is_str, &v, &vn)) { r = P_BAD; break; }
      for (int q = 0; q < np && q < 64; q++)
        if (key_n[q] == kn && !memcmp(keys[q], k, kn)) r = P_BAD; /* duplicate name */
      if (r) break;
      if (np < 64) keys[np] = k, key_n[np] = kn;
      if (np++) dsv4i_str_append(&args, ", ", 2);
      dsv4i_pyjson_string(k, kn, &args);
      dsv4i_str_append(&args, ": ", 2);
      if (is_str) dsv4i_pyjson_string(v, vn, &args);
      else dsv4i_str_append(&args, v, vn);
      w = read_until(&c, prm, 2, &got, &gn);
      if (w < 0) { r = P_MORE; break; }
      if (!eq(got, gn, ">\n")) { r = P_BAD; break; }
    }
    dsv4i_str_append(&args, "}", 1);
    if (!r && args.oom) r = P_BAD;
    if (!r && emit) {
      dsv4i_str ev = {0};
      dsv4i_str_append(&ev, "{\"name\": ", 9);
      dsv4i_pyjson_string(name, name_n, &ev);
      dsv4i_str_append(&ev, ", \"arguments\": ", 15);
      dsv4i_pyjson_string(args.buf, args.len, &ev);
      dsv4i_str_append(&ev, "}", 1);
      fn(DSV4I_CHAT_EV_TOOL_CALL, ev.buf, ev.len, user);
      dsv4i_str_free(&ev);
    }
    dsv4i_str_free(&args);
    if (r) return r;
  }
  *used = c.i;
  return P_OK;
}

/* ---- the state machine ----------------------------------------------------- */

/* 1 when a block marker occurrence in s[0, n) ends after s[from]. */
static int marker_ends_after(const char *s, size_t n, size_t from) {
  static const char *const marks[] = {INVOKE_OPEN, INVOKE_CLOSE, PARAM_OPEN, PARAM_CLOSE, CALLS_CLOSE};
  for (size_t k = 0; k < sizeof marks / sizeof *marks; k++) {
    const size_t l = strlen(marks[k]), at = from >= l ? from - l + 1 : 0;
    if (find(s + at, n - at, marks[k])) return 1;
  }
  return 0;
}

/* 1 when s[0, n) is UTF-8; NUL bytes are allowed (JSON escapes them). Model
 * output decoded by the tokenizer always is; other text pushed may not be. */
static int utf8_ok(const char *s, size_t n) {
  const char *what;
  for (size_t i = 0; i < n;) {
    const size_t k = dsv4i_tk_utf8_check(s + i, n - i, &what);
    if (k == n - i) return 1;
    if (s[i + k]) return 0;
    i += k + 1;
  }
  return 1;
}

static void emit(dsv4i_chat_event_fn fn, void *user, int kind, const char *s, size_t n) {
  if (n) fn(kind, s, n, user);
}

/* Run the states over pend; with final, nothing is held back. */
static dsv4_status run(dsv4i_chat_parser *p, dsv4i_chat_event_fn fn, void *user, int final) {
  dsv4i_str *b = &p->pend;
  for (;;) {
    const char *s = b->buf ? b->buf : "";
    const size_t n = b->len;
    if (p->state == S_DONE) {
      b->len = 0;
      return DSV4_OK;
    }
    if (p->state == S_REASONING || p->state == S_CONTENT || p->state == S_AFTER_TOOLS) {
      const int reasoning = p->state == S_REASONING;
      const int kind = reasoning ? DSV4I_CHAT_EV_REASONING : DSV4I_CHAT_EV_CONTENT;
      const char *m1 = reasoning ? DSV4I_CHAT_THINK_END : DSV4I_CHAT_EOS;
      const char *f1 = find(s, n, m1), *f2 = p->state == S_AFTER_TOOLS ? NULL : find(s, n, CALLS_OPEN);
      if (f1 && (!f2 || f1 < f2)) {
        emit(fn, user, kind, s, (size_t)(f1 - s));
        consume(b, (size_t)(f1 - s) + strlen(m1));
        if (reasoning) {
          p->state = S_CONTENT;
        } else {
          p->state = S_DONE;
          fn(DSV4I_CHAT_EV_END, "", 0, user);
        }
        continue;
      }
      if (f2) {
        emit(fn, user, kind, s, (size_t)(f2 - s));
        consume(b, (size_t)(f2 - s) + strlen(CALLS_OPEN));
        p->state = S_TOOLS;
        continue;
      }
      size_t hold = 0;
      if (!final) {
        size_t h1 = partial(s, n, m1), h2 = p->state == S_AFTER_TOOLS ? 0 : partial(s, n, CALLS_OPEN);
        hold = h1 > h2 ? h1 : h2;
      }
      emit(fn, user, kind, s, n - hold);
      consume(b, n - hold);
      return DSV4_OK;
    }
    /* S_TOOLS. The parse of a block can only move on when a marker is
     * complete: unless one ends in the text added since the last parse,
     * the block is still unfinished (this keeps a long block streamed in
     * small pushes linear instead of quadratic). */
    if (!final && p->parsed && !marker_ends_after(s, n, p->parsed)) return DSV4_OK;
    size_t used = 0;
    int r = parse_block(s, n, fn, user, 0, &used);
    p->parsed = r == P_MORE ? n : 0;
    if (r == P_OK && !utf8_ok(s, used)) r = P_BAD; /* its tool calls would not be JSON */
    if (r == P_MORE && !final) return DSV4_OK;
    if (r == P_OK) {
      parse_block(s, n, fn, user, 1, &used);
      consume(b, used);
      p->state = S_AFTER_TOOLS;
      continue;
    }
    /* malformed, or cut off by the end of the output: the block's text is
     * read on as content (an end-of-sentence marker in it still ends the
     * output). Whether a block is malformed never depends on text after the
     * marker that decides it, so this is the same however the text was
     * split into pushes. */
    emit(fn, user, DSV4I_CHAT_EV_CONTENT, CALLS_OPEN, strlen(CALLS_OPEN));
    p->state = S_AFTER_TOOLS;
  }
}

dsv4_status dsv4i_chat_parser_push(dsv4i_chat_parser *p, const char *text, size_t len,
                                   dsv4i_chat_event_fn fn, void *user) {
  if (p->state == S_DONE) return DSV4_OK;
  dsv4i_str_append(&p->pend, text, len);
  if (p->pend.oom) return dsv4i_error(DSV4_ERR_OUT_OF_MEMORY, "chat parser: out of memory");
  return run(p, fn, user, 0);
}

dsv4_status dsv4i_chat_parser_finish(dsv4i_chat_parser *p, dsv4i_chat_event_fn fn, void *user) {
  dsv4_status s = run(p, fn, user, 1);
  p->pend.len = 0;
  p->state = S_DONE;
  return s;
}
