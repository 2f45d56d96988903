/*
 * Pre-tokenizer regexes: the Rust tokenizer compiles Split patterns with
 * Oniguruma (Ruby-like syntax); libdsv4 uses PCRE2 with UTF + UCP. The two
 * agree on the DeepSeek patterns except for a few escapes, which are
 * rewritten here to Oniguruma's meaning (checked against the `tokenizers`
 * package):
 *   \s  White_Space (PCRE2 also matches U+180E)
 *   \w  Alphabetic, marks, decimal digits, connector punctuation, and
 *       outside a class ²³¹¼½¾ (PCRE2: letters, all numbers, underscore)
 *   \h  hex digit (PCRE2: horizontal space)
 *   \uHHHH  code point (not PCRE2 syntax)
 * ^ and $ are line anchors in Oniguruma: PCRE2_MULTILINE.
 * Checked code point by code point over all of Unicode for \s, \S, \d, \w,
 * \p{L}, \p{N}, \p{P}, \p{S}, \p{M}: the only differences left are characters
 * assigned after Unicode 14.0 (PCRE2 10.42's tables), which PCRE2 sees as
 * unassigned while the Rust tokenizer's Oniguruma knows them.
 */
#include <stdlib.h>
#include <string.h>

#include "io/tokenizer_internal.h"

/* PCRE2's JIT code makes memcheck report uninitialised reads unless PCRE2
 * was built for valgrind (Debian's is not): under valgrind, match with the
 * interpreter so the runs stay clean and check our code. The client request
 * is a no-op outside valgrind. */
#if defined(__has_include)
#if __has_include(<valgrind/valgrind.h>)
#include <valgrind/valgrind.h>
#define TK_ON_VALGRIND() (RUNNING_ON_VALGRIND != 0)
#endif
#endif
#ifndef TK_ON_VALGRIND
#define TK_ON_VALGRIND() 0
#endif

#define WS_ITEMS "\\t\\n\\x{0B}\\f\\r\\x{20}\\x{85}\\x{A0}\\x{1680}\\x{2000}-\\x{200A}" \
                 "\\x{2028}\\x{2029}\\x{202F}\\x{205F}\\x{3000}"
/* Oniguruma's Unicode \w: Alphabetic, marks, decimal digits, connector
 * punctuation; outside a class its Latin-1 table also counts the superscript
 * digits and vulgar fractions (inside a class it does not) */
#define WORD_ITEMS_IN_CLASS "\\p{Alphabetic}\\p{M}\\p{Nd}\\p{Pc}"
#define WORD_ITEMS WORD_ITEMS_IN_CLASS "\\x{B2}\\x{B3}\\x{B9}\\x{BC}-\\x{BE}"
#define HEX_ITEMS "0-9a-fA-F"

static void put(dsv4i_str *o, const char *s) { dsv4i_str_append(o, s, strlen(s)); }

static int is_hex(char c) {
  return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'f') || (c >= 'A' && c <= 'F');
}

/* Rewrite an Oniguruma pattern for PCRE2; returns 0 with *bad set for an
 * escape that has no PCRE2 equivalent here. */
static int translate(const char *p, size_t len, dsv4i_str *o, const char **bad) {
  int in_class = 0;
  for (size_t i = 0; i < len; i++) {
    char c = p[i];
    if (c == '\\' && i + 1 < len) {
      char e = p[++i];
      const char *items = NULL;
      int neg = 0;
      switch (e) {
      case 's': items = WS_ITEMS; break;
      case 'S': items = WS_ITEMS; neg = 1; break;
      case 'w': items = WORD_ITEMS; break;
      case 'W': items = WORD_ITEMS; neg = 1; break;
      case 'h': items = HEX_ITEMS; break;
      case 'H': items = HEX_ITEMS; neg = 1; break;
      case 'u':
        if (i + 4 < len && is_hex(p[i + 1]) && is_hex(p[i + 2]) &&
            is_hex(p[i + 3]) && is_hex(p[i + 4])) {
          put(o, "\\x{");
          dsv4i_str_append(o, p + i + 1, 4);
          put(o, "}");
          i += 4;
          continue;
        }
        break;
      default: break;
      }
      if (items) {
        if (!in_class) {
          put(o, neg ? "[^" : "[");
          put(o, items);
          put(o, "]");
        } else if (!neg) {
          put(o, e == 'w' ? WORD_ITEMS_IN_CLASS : items);
        } else if (e == 'H') {
          *bad = "\\H inside a character class";
          return 0;
        } else {
          /* \S or \W inside a class: PCRE2's own meaning (differs from
           * Oniguruma only for U+180E, marks and connector punctuation) */
          dsv4i_str_append(o, p + i - 1, 2);
        }
        continue;
      }
      dsv4i_str_append(o, p + i - 1, 2);
      continue;
    }
    if (c == '[' && !in_class) {
      in_class = 1;
      dsv4i_str_append(o, &c, 1);
      /* a ']' right after '[' or '[^' is a literal */
      if (i + 1 < len && p[i + 1] == '^') dsv4i_str_append(o, p + ++i, 1);
      if (i + 1 < len && p[i + 1] == ']') dsv4i_str_append(o, p + ++i, 1);
      continue;
    }
    if (c == '[' && in_class && i + 1 < len && p[i + 1] == ':') {
      /* POSIX class [:name:] inside a class: copy through the closing :] */
      const char *end = NULL;
      for (size_t j = i + 2; j + 1 < len; j++)
        if (p[j] == ':' && p[j + 1] == ']') {
          end = p + j + 2;
          break;
        }
      if (end) {
        dsv4i_str_append(o, p + i, (size_t)(end - (p + i)));
        i = (size_t)(end - p) - 1;
        continue;
      }
    }
    if (c == ']' && in_class) in_class = 0;
    dsv4i_str_append(o, &c, 1);
  }
  return 1;
}

dsv4_status dsv4i_tk_regex_compile(dsv4i_tk_regex *re, const char *pattern, size_t len, int literal) {
  memset(re, 0, sizeof *re);
  re->source = dsv4i_malloc(len + 1, "tokenizer regex");
  if (!re->source) return DSV4_ERR_OUT_OF_MEMORY;
  memcpy(re->source, pattern, len);
  re->source[len] = '\0';
  if (literal && len == 0) return DSV4_OK; /* empty String pattern: never matches */

  dsv4i_str pat = {0};
  uint32_t opts = PCRE2_UTF;
  if (literal) {
    opts |= PCRE2_LITERAL;
    dsv4i_str_append(&pat, pattern, len);
  } else {
    opts |= PCRE2_UCP | PCRE2_MULTILINE;
    const char *bad = NULL;
    if (!translate(pattern, len, &pat, &bad)) {
      dsv4i_str_free(&pat);
      return dsv4i_error(DSV4_ERR_TOKENIZER, "pre-tokenizer regex '%s': %s is not supported",
                         re->source, bad);
    }
  }
  if (pat.oom) {
    dsv4i_str_free(&pat);
    return dsv4i_error(DSV4_ERR_OUT_OF_MEMORY, "out of memory translating regex '%s'", re->source);
  }
  int err;
  PCRE2_SIZE off;
  re->code = pcre2_compile((PCRE2_SPTR)(pat.buf ? pat.buf : ""), pat.len, opts, &err, &off, NULL);
  dsv4i_str_free(&pat);
  if (!re->code) {
    PCRE2_UCHAR msg[256];
    pcre2_get_error_message(err, msg, sizeof msg);
    return dsv4i_error(DSV4_ERR_TOKENIZER, "pre-tokenizer regex '%s' does not compile: %s (offset %zu)",
                       re->source, (const char *)msg, (size_t)off);
  }
  /* JIT when the library has it; pcre2_match uses it automatically */
  if (!TK_ON_VALGRIND()) (void)pcre2_jit_compile(re->code, PCRE2_JIT_COMPLETE);
  return DSV4_OK;
}

void dsv4i_tk_regex_free(dsv4i_tk_regex *re) {
  if (re->code) pcre2_code_free(re->code);
  free(re->source);
  memset(re, 0, sizeof *re);
}

static dsv4_status span_push(dsv4i_tk_spanvec *v, size_t start, size_t end, int is_match) {
  if (v->n == v->cap) {
    size_t cap = v->cap ? v->cap * 2 : 64;
    dsv4i_tk_span *nv = dsv4i_realloc(v->v, cap * sizeof *nv, "tokenizer splits");
    if (!nv) return DSV4_ERR_OUT_OF_MEMORY;
    v->v = nv;
    v->cap = cap;
  }
  v->v[v->n].start = start;
  v->v[v->n].end = end;
  v->v[v->n].is_match = is_match;
  v->n++;
  return DSV4_OK;
}

static size_t char_len(const char *s, size_t at, size_t len) {
  if (at >= len) return 1;
  uint8_t b = (uint8_t)s[at];
  size_t n = b < 0x80 ? 1 : b < 0xE0 ? 2 : b < 0xF0 ? 3 : 4;
  return n;
}

dsv4_status dsv4i_tk_regex_find(const dsv4i_tk_regex *re, const char *s, size_t len, pcre2_match_data *md,
                          dsv4i_tk_spanvec *out) {
  out->n = 0;
  dsv4_status st;
  if (!re->code) return len ? span_push(out, 0, len, 0) : DSV4_OK;
  size_t prev = 0, last_end = 0, last_match_end = 0;
  int have_last = 0;
  while (last_end <= len) {
    int rc = pcre2_match(re->code, (PCRE2_SPTR)s, len, last_end, PCRE2_NO_UTF_CHECK, md, NULL);
    if (rc == PCRE2_ERROR_JIT_STACKLIMIT)
      rc = pcre2_match(re->code, (PCRE2_SPTR)s, len, last_end, PCRE2_NO_UTF_CHECK | PCRE2_NO_JIT,
                       md, NULL);
    if (rc == PCRE2_ERROR_NOMATCH) break;
    if (rc < 0) {
      PCRE2_UCHAR msg[256];
      pcre2_get_error_message(rc, msg, sizeof msg);
      return dsv4i_error(DSV4_ERR_TOKENIZER, "pre-tokenizer regex '%s' failed at byte %zu: %s",
                         re->source, last_end, (const char *)msg);
    }
    PCRE2_SIZE *ov = pcre2_get_ovector_pointer(md);
    size_t ms = ov[0], me = ov[1];
    if (ms == me && have_last && last_match_end == me) {
      /* no empty match right after the previous match (onig find_iter) */
      last_end += char_len(s, last_end, len);
      continue;
    }
    last_end = me;
    last_match_end = me;
    have_last = 1;
    if (prev != ms && (st = span_push(out, prev, ms, 0)) != DSV4_OK) return st;
    if ((st = span_push(out, ms, me, 1)) != DSV4_OK) return st;
    prev = me;
  }
  if (prev != len) return span_push(out, prev, len, 0);
  return DSV4_OK;
}

/* In place; afterwards is_match means "remove this span". */
void dsv4i_tk_split_behavior(dsv4i_tk_spanvec *sp, int behavior, int invert) {
  dsv4i_tk_span *v = sp->v;
  size_t n = sp->n, w = 0;
  if (invert)
    for (size_t i = 0; i < n; i++) v[i].is_match = !v[i].is_match;
  switch (behavior) {
  case TK_SPLIT_REMOVED:
    return;
  case TK_SPLIT_ISOLATED:
    for (size_t i = 0; i < n; i++) v[i].is_match = 0;
    return;
  case TK_SPLIT_MERGED_PREV: {
    int prev = 0;
    for (size_t i = 0; i < n; i++) {
      int m = v[i].is_match;
      if (m && !prev && w > 0) v[w - 1].end = v[i].end;
      else v[w++] = (dsv4i_tk_span){v[i].start, v[i].end, 0};
      prev = m;
    }
    break;
  }
  case TK_SPLIT_MERGED_NEXT: {
    /* the Rust fold runs from the back; w counts kept spans from the end */
    int prev = 0;
    size_t k = n; /* kept spans live in v[k..n) */
    for (size_t i = n; i-- > 0;) {
      int m = v[i].is_match;
      if (m && !prev && k < n) v[k].start = v[i].start;
      else v[--k] = (dsv4i_tk_span){v[i].start, v[i].end, 0};
      prev = m;
    }
    memmove(v, v + k, (n - k) * sizeof *v);
    w = n - k;
    break;
  }
  case TK_SPLIT_CONTIGUOUS: {
    int prev = 0;
    for (size_t i = 0; i < n; i++) {
      int m = v[i].is_match;
      if (m == prev && w > 0) v[w - 1].end = v[i].end;
      else v[w++] = (dsv4i_tk_span){v[i].start, v[i].end, 0};
      prev = m;
    }
    break;
  }
  default:
    return;
  }
  sp->n = w;
}
