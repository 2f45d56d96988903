/*
 * encode(text) -> ids, in the order of the Rust tokenizer's
 * encode(text, add_special_tokens=False):
 *   1. added tokens with normalized=false are cut out of the raw text
 *      (leftmost-longest, lstrip/rstrip/single_word as in added_vocabulary.rs);
 *   2. each remaining piece is normalized, then the normalized=true added
 *      tokens are cut out of it;
 *   3. each remaining piece goes through the pre-tokenizer stages
 *      (Split ... ByteLevel), depth first, so the pieces come out in order;
 *   4. each final piece is one BPE word.
 */
#include <stdlib.h>
#include <string.h>
#include <utf8proc.h>

#include "io/tokenizer_internal.h"

/* ---- trie ---------------------------------------------------------------- */

void dsv4i_tk_trie_init(dsv4i_tk_trie *t) {
  memset(t, 0, sizeof *t);
  for (int i = 0; i < 256; i++) t->root_child[i] = -1;
}

void dsv4i_tk_trie_free(dsv4i_tk_trie *t) {
  free(t->nodes);
  dsv4i_tk_trie_init(t);
}

/* A new node for `byte` into *node. */
static dsv4_status trie_new_node(dsv4i_tk_trie *t, uint8_t byte, int32_t *node) {
  if (t->n == t->cap) {
    size_t cap = t->cap ? t->cap * 2 : 64;
    dsv4i_tk_trie_node *nn = dsv4i_realloc(t->nodes, cap * sizeof *nn, "added-token trie");
    if (!nn) return DSV4_ERR_OUT_OF_MEMORY;
    t->nodes = nn;
    t->cap = cap;
  }
  t->nodes[t->n] = (dsv4i_tk_trie_node){-1, -1, -1, byte};
  *node = (int32_t)t->n++;
  return DSV4_OK;
}

static int32_t trie_child(const dsv4i_tk_trie *t, int32_t node, uint8_t b) {
  for (int32_t c = t->nodes[node].first_child; c >= 0; c = t->nodes[c].next_sibling)
    if (t->nodes[c].byte == b) return c;
  return -1;
}

dsv4_status dsv4i_tk_trie_add(dsv4i_tk_trie *t, const char *s, size_t len, int32_t token) {
  const uint8_t *u = (const uint8_t *)s;
  int32_t node = t->root_child[u[0]];
  dsv4_status st;
  if (node < 0) {
    if ((st = trie_new_node(t, u[0], &node))) return st;
    t->root_child[u[0]] = node;
  }
  for (size_t i = 1; i < len; i++) {
    int32_t c = trie_child(t, node, u[i]);
    if (c < 0) {
      if ((st = trie_new_node(t, u[i], &c))) return st;
      t->nodes[c].next_sibling = t->nodes[node].first_child;
      t->nodes[node].first_child = c;
    }
    node = c;
  }
  /* a later duplicate content keeps the first token, like the matcher's pattern order */
  if (t->nodes[node].token < 0) t->nodes[node].token = token;
  return DSV4_OK;
}

/* Longest added token starting at s[i]; its index, end in *end; -1 if none. */
static int32_t trie_longest(const dsv4i_tk_trie *t, const char *s, size_t len, size_t i, size_t *end) {
  const uint8_t *u = (const uint8_t *)s;
  int32_t best = -1;
  int32_t node = t->root_child[u[i]];
  size_t j = i;
  while (node >= 0) {
    j++;
    if (t->nodes[node].token >= 0) {
      best = t->nodes[node].token;
      *end = j;
    }
    if (j >= len) break;
    node = trie_child(t, node, u[j]);
  }
  return best;
}

/* ---- character classes (Rust's char::is_whitespace and regex \w) ------- */

static int is_white_space(uint32_t c) {
  return (c >= 0x09 && c <= 0x0D) || c == 0x20 || c == 0x85 || c == 0xA0 || c == 0x1680 ||
         (c >= 0x2000 && c <= 0x200A) || c == 0x2028 || c == 0x2029 || c == 0x202F ||
         c == 0x205F || c == 0x3000;
}

static int is_word_char(uint32_t c) {
  if (c == 0x200C || c == 0x200D) return 1;
  switch (utf8proc_category((utf8proc_int32_t)c)) {
  case UTF8PROC_CATEGORY_LU: case UTF8PROC_CATEGORY_LL: case UTF8PROC_CATEGORY_LT:
  case UTF8PROC_CATEGORY_LM: case UTF8PROC_CATEGORY_LO: case UTF8PROC_CATEGORY_NL:
  case UTF8PROC_CATEGORY_MN: case UTF8PROC_CATEGORY_MC: case UTF8PROC_CATEGORY_ME:
  case UTF8PROC_CATEGORY_ND: case UTF8PROC_CATEGORY_PC:
    return 1;
  default:
    return 0;
  }
}

/* code point ending at s[end) (end > 0, valid UTF-8) */
static uint32_t cp_before(const char *s, size_t end, size_t *start) {
  size_t i = end - 1;
  while (i > 0 && ((uint8_t)s[i] & 0xC0) == 0x80) i--;
  size_t n;
  *start = i;
  return dsv4i_tk_utf8_get(s + i, end - i, &n);
}

/* ---- encode context -------------------------------------------------------- */

typedef struct enc_ctx {
  const dsv4i_tokenizer *tok;
  pcre2_match_data *md;
  dsv4i_tk_spanvec *spans;   /* [n_stages] */
  dsv4i_str *prefixed; /* [n_stages] ByteLevel add_prefix_space copies */
  dsv4i_tk_bpe_scratch bpe;
  dsv4i_tk_idvec ids;
  const uint8_t *plain; /* [base_len] non-zero: no added token may match here, or NULL */
  const char *base;     /* the raw text plain indexes */
  size_t base_len;
  int piece_plain;      /* the raw piece being normalized holds plain bytes */
} enc_ctx;

/* An added-token match at s[start, end) that must stay text (see encode_masked). */
static int match_is_plain(const enc_ctx *c, const char *s, size_t start, size_t end) {
  if (!c->plain) return 0;
  if (s < c->base || s >= c->base + c->base_len) return c->piece_plain; /* normalized copy */
  const size_t o = (size_t)(s - c->base);
  for (size_t i = o + start; i < o + end; i++)
    if (c->plain[i]) return 1;
  return 0;
}

static dsv4_status pretok(enc_ctx *c, const char *s, size_t len, size_t k) {
  const dsv4i_tokenizer *tok = c->tok;
  if (len == 0) return DSV4_OK;
  if (k == tok->n_stages) return dsv4i_tk_bpe_word(tok, s, len, &c->bpe, &c->ids);
  const dsv4i_tk_stage *stg = &tok->stages[k];
  dsv4_status st;
  if (stg->kind == TK_STAGE_BYTELEVEL) {
    if (stg->add_prefix_space && s[0] != ' ') {
      dsv4i_str *p = &c->prefixed[k];
      p->len = 0;
      dsv4i_str_append(p, " ", 1);
      dsv4i_str_append(p, s, len);
      if (p->oom) return dsv4i_error(DSV4_ERR_OUT_OF_MEMORY, "out of memory in the ByteLevel pre-tokenizer");
      s = p->buf;
      len = p->len;
    }
    if (!stg->use_regex) return pretok(c, s, len, k + 1);
  }
  dsv4i_tk_spanvec *sv = &c->spans[k];
  if ((st = dsv4i_tk_regex_find(&stg->re, s, len, c->md, sv)) != DSV4_OK) return st;
  dsv4i_tk_split_behavior(sv, stg->behavior, stg->invert);
  /* the vector is reused by deeper calls only at other levels: index, don't hold pointers */
  for (size_t i = 0; i < sv->n; i++) {
    dsv4i_tk_span sp = sv->v[i];
    if (sp.is_match || sp.end == sp.start) continue;
    if ((st = pretok(c, s + sp.start, sp.end - sp.start, k + 1)) != DSV4_OK) return st;
  }
  return DSV4_OK;
}

typedef dsv4_status (*seg_fn)(enc_ctx *c, const char *s, size_t len);

/* find_matches of added_vocabulary.rs: cut added tokens out of s[0, len),
 * emitting token ids directly and handing text pieces to `text`. */
static dsv4_status split_added(enc_ctx *c, const dsv4i_tk_trie *t, const char *s, size_t len, seg_fn text) {
  const dsv4i_tokenizer *tok = c->tok;
  dsv4_status st;
  size_t start_offset = 0, i = 0;
  if (t->n == 0) return text(c, s, len);
  while (i < len) {
    size_t end = 0;
    int32_t k = trie_longest(t, s, len, i, &end);
    if (k < 0) {
      i++;
      continue;
    }
    const dsv4i_tk_added *a = &tok->added[k];
    size_t start = i, stop = end, cs;
    i = end; /* the matcher continues after the match, whatever happens to it */
    if (match_is_plain(c, s, start, stop)) continue;
    if (a->single_word) {
      int start_space = start == 0 || !is_word_char(cp_before(s, start, &cs));
      size_t n;
      int stop_space = stop == len || !is_word_char(dsv4i_tk_utf8_get(s + stop, len - stop, &n));
      if (!start_space || !stop_space) continue;
    }
    if (a->lstrip) {
      size_t ns = start;
      while (ns > 0) {
        uint32_t cp = cp_before(s, ns, &cs);
        if (!is_white_space(cp)) break;
        ns = cs;
      }
      start = ns > start_offset ? ns : start_offset;
    }
    if (a->rstrip) {
      while (stop < len) {
        size_t n;
        uint32_t cp = dsv4i_tk_utf8_get(s + stop, len - stop, &n);
        if (!is_white_space(cp)) break;
        stop += n;
      }
    }
    if (start_offset < start && (st = text(c, s + start_offset, start - start_offset)) != DSV4_OK)
      return st;
    if ((st = dsv4i_tk_idvec_push(&c->ids, a->id)) != DSV4_OK) return st;
    start_offset = stop > start_offset ? stop : start_offset;
  }
  if (start_offset < len) return text(c, s + start_offset, len - start_offset);
  return DSV4_OK;
}

static dsv4_status after_norm_piece(enc_ctx *c, const char *s, size_t len) {
  return pretok(c, s, len, 0);
}

static dsv4_status raw_piece(enc_ctx *c, const char *s, size_t len) {
  const dsv4i_tokenizer *tok = c->tok;
  if (c->plain) c->piece_plain = match_is_plain(c, s, 0, len);
  if (tok->n_norms == 0) return split_added(c, &tok->trie_norm, s, len, after_norm_piece);
  dsv4i_str norm = {0};
  dsv4_status st = dsv4i_tk_normalize(tok, s, len, &norm);
  if (st == DSV4_OK) st = split_added(c, &tok->trie_norm, norm.buf ? norm.buf : "", norm.len, after_norm_piece);
  dsv4i_str_free(&norm);
  return st;
}

dsv4_status dsv4i_tk_normalize(const dsv4i_tokenizer *tok, const char *s, size_t len, dsv4i_str *out) {
  out->len = 0;
  dsv4i_str_append(out, s, len);
  for (size_t i = 0; i < tok->n_norms && !out->oom; i++) {
    int opts = UTF8PROC_STABLE;
    switch (tok->norms[i]) {
    case TK_NORM_NFC: opts |= UTF8PROC_COMPOSE; break;
    case TK_NORM_NFD: opts |= UTF8PROC_DECOMPOSE; break;
    case TK_NORM_NFKC: opts |= UTF8PROC_COMPOSE | UTF8PROC_COMPAT; break;
    default: opts |= UTF8PROC_DECOMPOSE | UTF8PROC_COMPAT; break;
    }
    utf8proc_uint8_t *dst = NULL;
    utf8proc_ssize_t n = utf8proc_map((const utf8proc_uint8_t *)out->buf, (utf8proc_ssize_t)out->len,
                                      &dst, (utf8proc_option_t)opts);
    if (n < 0) {
      free(dst);
      return dsv4i_error(n == UTF8PROC_ERROR_NOMEM ? DSV4_ERR_OUT_OF_MEMORY : DSV4_ERR_INVALID_UTF8,
                         "normalizer: %s", utf8proc_errmsg(n));
    }
    out->len = 0;
    dsv4i_str_append(out, dst, (size_t)n);
    free(dst);
  }
  if (out->oom) return dsv4i_error(DSV4_ERR_OUT_OF_MEMORY, "out of memory normalizing text");
  return DSV4_OK;
}

dsv4_status dsv4i_tokenizer_encode(const dsv4i_tokenizer *tok, const char *text, size_t len,
                                   int32_t **ids, size_t *n_ids) {
  return dsv4i_tokenizer_encode_masked(tok, text, len, NULL, ids, n_ids);
}

dsv4_status dsv4i_tokenizer_encode_masked(const dsv4i_tokenizer *tok, const char *text, size_t len,
                                          const uint8_t *plain, int32_t **ids, size_t *n_ids) {
  if (ids) *ids = NULL;
  if (n_ids) *n_ids = 0;
  if (!tok || !ids || !n_ids || (!text && len > 0))
    return dsv4i_error(DSV4_ERR_INVALID_ARG, "tokenizer encode: NULL argument");
  if (len > (size_t)INT32_MAX)
    return dsv4i_error(DSV4_ERR_INVALID_ARG, "tokenizer encode: text of %zu bytes is longer than 2 GiB", len);
  const char *what;
  size_t bad = dsv4i_tk_utf8_check(text, len, &what);
  if (bad != len)
    return dsv4i_error(DSV4_ERR_INVALID_UTF8, "tokenizer encode: invalid text at byte %zu (0x%02X): %s", bad,
                       (unsigned)(unsigned char)text[bad], what);
  if (len == 0) return DSV4_OK;

  enc_ctx c;
  memset(&c, 0, sizeof c);
  c.tok = tok;
  c.plain = plain;
  c.base = text;
  c.base_len = len;
  dsv4_status st = DSV4_OK;
  size_t ns = tok->n_stages ? tok->n_stages : 1;
  c.spans = dsv4i_calloc(ns, sizeof *c.spans, "tokenizer splits");
  c.prefixed = dsv4i_calloc(ns, sizeof *c.prefixed, "tokenizer splits");
  c.md = pcre2_match_data_create(4, NULL);
  if (!c.spans || !c.prefixed || !c.md) {
    st = dsv4i_error(DSV4_ERR_OUT_OF_MEMORY, "out of memory starting an encode");
    goto out;
  }
  st = split_added(&c, &tok->trie_raw, text, len, raw_piece);
out:
  if (c.spans)
    for (size_t i = 0; i < ns; i++) free(c.spans[i].v);
  if (c.prefixed)
    for (size_t i = 0; i < ns; i++) dsv4i_str_free(&c.prefixed[i]);
  free(c.spans);
  free(c.prefixed);
  if (c.md) pcre2_match_data_free(c.md);
  dsv4i_tk_bpe_scratch_free(&c.bpe);
  if (st != DSV4_OK) {
    free(c.ids.v);
    return st;
  }
  *ids = c.ids.v;
  *n_ids = c.ids.n;
  return DSV4_OK;
}
