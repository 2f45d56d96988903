/*
 * BPE on one pre-tokenized word, in the order the Rust tokenizer merges
 * (models/bpe/word.rs): a min-heap of candidate merges keyed by (rank,
 * position); a popped entry is skipped when its left symbol was merged away
 * or its pair no longer yields the same token. O(n log n) in the word length.
 */
#include <stdlib.h>
#include <string.h>

#include "io/tokenizer_internal.h"

typedef struct sym {
  int32_t id;
  int32_t prev, next; /* -1 at the ends */
  int32_t alive;
} sym;

typedef struct cand {
  uint32_t rank;
  int32_t pos;
  int32_t new_id;
} cand;

dsv4_status dsv4i_tk_idvec_push(dsv4i_tk_idvec *v, int32_t id) {
  if (v->n == v->cap) {
    size_t cap = v->cap ? v->cap * 2 : 256;
    int32_t *nv = dsv4i_realloc(v->v, cap * sizeof *nv, "token ids");
    if (!nv) return DSV4_ERR_OUT_OF_MEMORY;
    v->v = nv;
    v->cap = cap;
  }
  v->v[v->n++] = id;
  return DSV4_OK;
}

void dsv4i_tk_bpe_scratch_free(dsv4i_tk_bpe_scratch *s) {
  free(s->sym);
  free(s->heap);
  memset(s, 0, sizeof *s);
}

static int cand_less(const cand *a, const cand *b) {
  return a->rank != b->rank ? a->rank < b->rank : a->pos < b->pos;
}

/* 4-ary min-heap: half the depth of a binary heap, children adjacent in memory */
static void heap_push(cand *h, size_t *n, cand c) {
  size_t i = (*n)++;
  while (i > 0) {
    size_t p = (i - 1) / 4;
    if (!cand_less(&c, &h[p])) break;
    h[i] = h[p];
    i = p;
  }
  h[i] = c;
}

static cand heap_pop(cand *h, size_t *n) {
  cand top = h[0], last = h[--*n];
  size_t i = 0, m = *n;
  for (;;) {
    size_t first = 4 * i + 1, best = i;
    const cand *bv = &last;
    for (size_t k = first; k < first + 4 && k < m; k++)
      if (cand_less(&h[k], bv)) {
        best = k;
        bv = &h[k];
      }
    if (best == i) break;
    h[i] = h[best];
    i = best;
  }
  if (m > 0) h[i] = last;
  return top;
}

static int lookup_merge(const dsv4i_tokenizer *tok, int32_t a, int32_t b, cand *c, int32_t pos) {
  uint64_t v;
  if (!dsv4i_tk_u64map_get(&tok->merges, ((uint64_t)(uint32_t)a << 32) | (uint32_t)b, &v)) return 0;
  c->rank = (uint32_t)(v >> 32);
  c->new_id = (int32_t)(uint32_t)v;
  c->pos = pos;
  return 1;
}

static dsv4_status grow(void **p, size_t *cap, size_t need, size_t elem) {
  if (need <= *cap) return DSV4_OK;
  size_t c = *cap ? *cap : 64;
  while (c < need) c *= 2;
  void *np = dsv4i_realloc(*p, c * elem, "tokenizer BPE scratch");
  if (!np) return DSV4_ERR_OUT_OF_MEMORY;
  *p = np;
  *cap = c;
  return DSV4_OK;
}

/* Symbols of the word before merging (models/bpe/model.rs merge_word). */
static dsv4_status initial_symbols(const dsv4i_tokenizer *tok, const char *w, size_t len, sym *s,
                                   size_t *n_out) {
  size_t n = 0;
  int32_t unk_pending = 0; /* a pending (possibly fused) unk symbol */
  for (size_t i = 0; i < len;) {
    int32_t id;
    size_t clen;
    if (tok->byte_level) {
      id = tok->byte_id[(uint8_t)w[i]];
      clen = 1;
    } else {
      (void)dsv4i_tk_utf8_get(w + i, len - i, &clen);
      id = dsv4i_tk_strmap_get(&tok->vocab, w + i, clen);
    }
    if (id >= 0) {
      if (unk_pending) {
        s[n++] = (sym){tok->unk_id, 0, 0, 1};
        unk_pending = 0;
      }
      s[n++] = (sym){id, 0, 0, 1};
    } else if (tok->unk_id >= 0) {
      if (unk_pending && !tok->fuse_unk) s[n++] = (sym){tok->unk_id, 0, 0, 1};
      unk_pending = 1;
    } /* else: dropped, as the Rust model does without unk_token */
    i += clen;
  }
  if (unk_pending) s[n++] = (sym){tok->unk_id, 0, 0, 1};
  for (size_t i = 0; i < n; i++) {
    s[i].prev = (int32_t)i - 1;
    s[i].next = i + 1 < n ? (int32_t)i + 1 : -1;
  }
  *n_out = n;
  return DSV4_OK;
}

static dsv4_status whole_word_id(const dsv4i_tokenizer *tok, const char *w, size_t len, int32_t *id) {
  *id = -1;
  if (!tok->byte_level) {
    *id = dsv4i_tk_strmap_get(&tok->vocab, w, len);
    return DSV4_OK;
  }
  if (len > 4096) return DSV4_OK; /* no vocabulary entry is that long */
  char buf[4096 * 2];
  size_t n = 0;
  for (size_t i = 0; i < len; i++) n += dsv4i_tk_utf8_put(dsv4i_tk_byte_to_cp((uint8_t)w[i]), buf + n);
  *id = dsv4i_tk_strmap_get(&tok->vocab, buf, n);
  return DSV4_OK;
}

dsv4_status dsv4i_tk_bpe_word(const dsv4i_tokenizer *tok, const char *w, size_t len,
                        dsv4i_tk_bpe_scratch *sc, dsv4i_tk_idvec *out) {
  dsv4_status st;
  if (len == 0) return DSV4_OK;
  if (tok->ignore_merges) {
    int32_t id;
    if ((st = whole_word_id(tok, w, len, &id)) != DSV4_OK) return st;
    if (id >= 0) return dsv4i_tk_idvec_push(out, id);
  }
  if ((st = grow(&sc->sym, &sc->sym_cap, len + 1, sizeof(sym))) != DSV4_OK) return st;
  sym *s = sc->sym;
  size_t n;
  if ((st = initial_symbols(tok, w, len, s, &n)) != DSV4_OK) return st;

  if (n > 1) {
    /* at most n-1 initial candidates, and each merge pushes at most 2 */
    if ((st = grow(&sc->heap, &sc->heap_cap, 3 * n, sizeof(cand))) != DSV4_OK) return st;
    cand *h = sc->heap;
    size_t hn = 0;
    cand c;
    for (size_t i = 0; i + 1 < n; i++)
      if (lookup_merge(tok, s[i].id, s[i + 1].id, &c, (int32_t)i)) heap_push(h, &hn, c);
    while (hn > 0) {
      cand top = heap_pop(h, &hn);
      sym *cur = &s[top.pos];
      if (!cur->alive || cur->next < 0) continue;
      sym *right = &s[cur->next];
      cand chk;
      if (!lookup_merge(tok, cur->id, right->id, &chk, top.pos) || chk.new_id != top.new_id) continue;
      /* merge right into cur */
      cur->id = top.new_id;
      right->alive = 0;
      cur->next = right->next;
      if (right->next >= 0) s[right->next].prev = top.pos;
      if (cur->prev >= 0 && lookup_merge(tok, s[cur->prev].id, cur->id, &c, cur->prev))
        heap_push(h, &hn, c);
      if (cur->next >= 0 && lookup_merge(tok, cur->id, s[cur->next].id, &c, top.pos))
        heap_push(h, &hn, c);
    }
  }
  for (size_t i = 0; i < n; i++)
    if (s[i].alive && (st = dsv4i_tk_idvec_push(out, s[i].id)) != DSV4_OK) return st;
  return DSV4_OK;
}
