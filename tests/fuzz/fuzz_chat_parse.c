/* libFuzzer: model output through the streaming chat parser
 * (dsv4_chat_parser_*). Byte 0 picks the mode (bit 0: thinking), the rest
 * is the output text. Oracles besides the sanitizers:
 *  - streaming equals one shot: the events (adjacent text of one kind
 *    joined) are the same for one push, one byte a push (inputs up to
 *    128 bytes), every two-way split (inputs up to 24 bytes; 4 seeded
 *    splits of longer ones) and pushes of seeded sizes 1..16;
 *  - a tool call is a JSON object with string "name" and "arguments";
 *  - nothing is lost: without a tool-call block's end tag (so without a
 *    block that parses), the reasoning and content text is the input up
 *    to an end-of-sentence marker (to its end when none was reported),
 *    less at most the first think-end marker in thinking mode;
 *  - nothing follows the END event. */
#include <jansson.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "dsv4/dsv4.h"
#include "serve/chat.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

typedef struct rec {
  char *ev; /* events: kind byte, 8-byte length, text; adjacent text of one kind joined */
  size_t n, cap, last; /* last: offset of the last event, (size_t)-1 none */
  char *text;          /* reasoning + content text in order */
  size_t n_text, cap_text;
  int tools, ended;
} rec;

static void put(char **b, size_t *n, size_t *cap, const void *p, size_t k) {
  if (*n + k > *cap) {
    size_t c = *cap ? *cap : 256;
    while (c < *n + k) c *= 2;
    char *nb = realloc(*b, c);
    if (!nb) abort();
    *b = nb;
    *cap = c;
  }
  if (k) memcpy(*b + *n, p, k);
  *n += k;
}

static void on_event(int32_t kind, const char *text, size_t len, void *user) {
  rec *r = user;
  if (r->ended) abort(); /* nothing after END */
  if (kind < DSV4_CHAT_EVENT_REASONING || kind > DSV4_CHAT_EVENT_END) abort();
  if (kind == DSV4_CHAT_EVENT_TOOL_CALL) {
    json_error_t je;
    json_t *c = json_loadb(text, len, JSON_ALLOW_NUL, &je); /* \u0000 is JSON */
    if (!json_is_object(c) || !json_is_string(json_object_get(c, "name")) ||
        !json_is_string(json_object_get(c, "arguments")) || json_object_size(c) != 2)
      abort();
    json_decref(c);
    r->tools++;
  }
  if (kind == DSV4_CHAT_EVENT_END) r->ended = 1;
  if (kind == DSV4_CHAT_EVENT_REASONING || kind == DSV4_CHAT_EVENT_CONTENT) {
    if (!len) abort(); /* empty text is never reported */
    put(&r->text, &r->n_text, &r->cap_text, text, len);
    if (r->last != (size_t)-1 && r->ev[r->last] == (char)kind) { /* join */
      uint64_t l;
      memcpy(&l, r->ev + r->last + 1, 8);
      l += len;
      memcpy(r->ev + r->last + 1, &l, 8);
      put(&r->ev, &r->n, &r->cap, text, len);
      return;
    }
  }
  r->last = r->n;
  const char k = (char)kind;
  const uint64_t l = len;
  put(&r->ev, &r->n, &r->cap, &k, 1);
  put(&r->ev, &r->n, &r->cap, &l, 8);
  put(&r->ev, &r->n, &r->cap, text, len);
}

/* Parse text in pushes: cuts[0..nc) are the split points (increasing). */
static void parse(int mode, const char *t, size_t n, const size_t *cuts, size_t nc, rec *r) {
  memset(r, 0, sizeof *r);
  r->last = (size_t)-1;
  dsv4_chat_parser *p = NULL;
  if (dsv4_chat_parser_create(mode, &p) != DSV4_OK) abort();
  size_t at = 0;
  for (size_t i = 0; i <= nc; i++) {
    const size_t end = i < nc ? cuts[i] : n;
    if (dsv4_chat_parser_push(p, t + at, end - at, on_event, r) != DSV4_OK) abort();
    at = end;
  }
  if (dsv4_chat_parser_finish(p, on_event, r) != DSV4_OK) abort();
  dsv4_chat_parser_free(p);
}

static void rec_free(rec *r) {
  free(r->ev);
  free(r->text);
}

static void same(const rec *a, const rec *b) {
  if (a->n != b->n || (a->n && memcmp(a->ev, b->ev, a->n))) abort();
}

static const char *find(const char *s, size_t n, const char *m, size_t from) {
  const size_t k = strlen(m);
  for (size_t i = from; i + k <= n; i++)
    if (!memcmp(s + i, m, k)) return s + i;
  return NULL;
}

/* text == t[0, q), or (thinking) t[0, q) less its first think-end marker */
static int is_input_prefix(const rec *r, int thinking, const char *t, size_t q) {
  /* r->text is NULL when nothing was reported: no memcmp or offset on it then */
  if (r->n_text == q && (!q || !memcmp(r->text, t, q))) return 1;
  if (!thinking) return 0;
  const char *m = find(t, q, DSV4I_CHAT_THINK_END, 0);
  if (!m) return 0;
  const size_t a = (size_t)(m - t), k = strlen(DSV4I_CHAT_THINK_END);
  if (r->n_text != q - k) return 0;
  return !r->n_text || (!memcmp(r->text, t, a) && !memcmp(r->text + a, m + k, q - a - k));
}

static void nothing_lost(const rec *r, int thinking, const char *t, size_t n) {
  /* without a block's end tag no block can parse: all text is kept */
  if (find(t, n, "</" DSV4I_CHAT_DSML " calls>", 0)) return;
  if (r->tools) abort();
  if (!r->ended) {
    if (!is_input_prefix(r, thinking, t, n)) abort();
    return;
  }
  for (const char *e = find(t, n, DSV4I_CHAT_EOS, 0); e; e = find(t, n, DSV4I_CHAT_EOS, (size_t)(e - t) + 1))
    if (is_input_prefix(r, thinking, t, (size_t)(e - t))) return;
  abort();
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  if (!size) return 0;
  const int mode = data[0] & 1 ? DSV4_CHAT_MODE_THINKING : DSV4_CHAT_MODE_CHAT;
  const char *t = (const char *)data + 1;
  const size_t n = size - 1;
  rec one, other;
  parse(mode, t, n, NULL, 0, &one);
  nothing_lost(&one, mode == DSV4_CHAT_MODE_THINKING, t, n);

  size_t *cuts = malloc((n + 1) * sizeof *cuts);
  if (!cuts) abort();
  /* one byte a push (inputs up to 128 bytes: every push re-checks the
   * held-back text for markers, the largest cost of this target) */
  if (n <= 128) {
    for (size_t i = 0; i < n; i++) cuts[i] = i + 1;
    parse(mode, t, n, cuts, n ? n - 1 : 0, &other);
    same(&one, &other);
    rec_free(&other);
  }
  /* every two-way split of short inputs, seeded ones of long inputs */
  uint64_t h = 1469598103934665603ull;
  for (size_t i = 0; i < size; i++) h = (h ^ data[i]) * 1099511628211ull;
  const size_t n_splits = n <= 24 ? n + 1 : 4;
  for (size_t k = 0; k < n_splits; k++) {
    cuts[0] = n <= 24 ? k : (size_t)((h >> (k * 4 % 60)) + k * 7919) % (n + 1);
    parse(mode, t, n, cuts, 1, &other);
    same(&one, &other);
    rec_free(&other);
  }
  /* pushes of seeded sizes 1..16 */
  size_t nc = 0;
  for (size_t at = 0;;) {
    at += 1 + (h & 15);
    h = h * 6364136223846793005ull + 1442695040888963407ull;
    if (at >= n) break;
    cuts[nc++] = at;
  }
  parse(mode, t, n, cuts, nc, &other);
  same(&one, &other);
  rec_free(&other);
  free(cuts);
  rec_free(&one);
  return 0;
}
