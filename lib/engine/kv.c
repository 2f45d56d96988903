/*
 * KV bookkeeping (kv.h): page ids with reference counts, per-sequence page
 * rows, reserve / commit / truncate / fork, the engine's slots and the step's
 * page table. Page ids are taken lowest first from a stack, so the decisions
 * depend only on the sequence of calls.
 */
#include <assert.h>
#include <stdlib.h>
#include <string.h>

#include "engine/kv.h"

struct dsv4i_kv_pool {
  int64_t n_pages;
  int32_t *ref;      /* [n_pages] holders of each page; 0 = free */
  int32_t *free_ids; /* stack of free page ids */
  int64_t n_free;
  /* reserve's count of copy-on-write: holders of a shared page met so far in the
   * reserve being checked (all 0 between calls), and the pages it touched */
  int32_t *seen;
  int32_t *touched;
  int64_t n_touched;
  /* the page copies the last reserve / fork decided */
  int32_t *copy_src, *copy_dst;
  int32_t n_copies;
};

/* ---- page ids -------------------------------------------------------- */

dsv4_status dsv4i_kv_pool_create(int64_t n_pages, dsv4i_kv_pool **out) {
  if (!out) return dsv4i_error(DSV4_ERR_INVALID_ARG, "kv_pool_create: NULL out");
  *out = NULL;
  if (n_pages < 1 || n_pages > INT32_MAX)
    return dsv4i_error(DSV4_ERR_INVALID_ARG, "kv_pool_create: %lld pages", (long long)n_pages);
  dsv4i_kv_pool *p = dsv4i_calloc(1, sizeof *p, "KV pool");
  if (!p) return DSV4_ERR_OUT_OF_MEMORY;
  const size_t n = (size_t)n_pages;
  p->n_pages = n_pages;
  p->ref = dsv4i_calloc(n, sizeof *p->ref, "KV pool refcounts");
  p->free_ids = dsv4i_malloc(n * sizeof *p->free_ids, "KV pool free list");
  p->seen = dsv4i_calloc(n, sizeof *p->seen, "KV pool copy-on-write counts");
  p->touched = dsv4i_malloc(n * sizeof *p->touched, "KV pool copy-on-write list");
  p->copy_src = dsv4i_malloc(n * sizeof *p->copy_src, "KV pool copies");
  p->copy_dst = dsv4i_malloc(n * sizeof *p->copy_dst, "KV pool copies");
  if (!p->ref || !p->free_ids || !p->seen || !p->touched || !p->copy_src || !p->copy_dst) {
    dsv4i_kv_pool_free(p);
    return DSV4_ERR_OUT_OF_MEMORY;
  }
  /* lowest ids on top of the stack */
  for (int64_t i = 0; i < n_pages; i++) p->free_ids[i] = (int32_t)(n_pages - 1 - i);
  p->n_free = n_pages;
  *out = p;
  return DSV4_OK;
}

void dsv4i_kv_pool_free(dsv4i_kv_pool *p) {
  if (!p) return;
  free(p->ref);
  free(p->free_ids);
  free(p->seen);
  free(p->touched);
  free(p->copy_src);
  free(p->copy_dst);
  free(p);
}

int64_t dsv4i_kv_pool_free_pages(const dsv4i_kv_pool *p) { return p ? p->n_free : 0; }
int64_t dsv4i_kv_pool_n_pages(const dsv4i_kv_pool *p) { return p ? p->n_pages : 0; }

int32_t dsv4i_kv_pool_copies(const dsv4i_kv_pool *p, const int32_t **src, const int32_t **dst) {
  *src = p->copy_src;
  *dst = p->copy_dst;
  return p->n_copies;
}

static int32_t pool_take(dsv4i_kv_pool *p) {
  assert(p->n_free > 0);
  int32_t id = p->free_ids[--p->n_free];
  p->ref[id] = 1;
  return id;
}

static void pool_release(dsv4i_kv_pool *p, int32_t id) {
  assert(p->ref[id] > 0);
  if (--p->ref[id] == 0) p->free_ids[p->n_free++] = id;
}

/* a fresh page that must first hold a copy of page `from` */
static int32_t pool_take_copy(dsv4i_kv_pool *p, int32_t from) {
  const int32_t id = pool_take(p);
  p->copy_src[p->n_copies] = from;
  p->copy_dst[p->n_copies++] = id;
  return id;
}

/* ---- sequences ------------------------------------------------------- */

static inline int32_t *tab_of(const dsv4i_kv_seq *s, int32_t k, int32_t l) {
  return s->row + s->lay->off[k][l];
}

static inline int32_t *cnt_of(const dsv4i_kv_seq *s, int32_t k, int32_t l) {
  return &s->n[(size_t)k * (size_t)s->lay->n_layers + (size_t)l];
}

dsv4_status dsv4i_kv_seq_create(const dsv4i_kv_layout *lay, dsv4i_kv_pool *pool,
                                dsv4i_kv_seq **out) {
  if (!out) return dsv4i_error(DSV4_ERR_INVALID_ARG, "kv_seq_create: NULL out");
  *out = NULL;
  if (!lay || !pool || lay->n_layers <= 0)
    return dsv4i_error(DSV4_ERR_INVALID_ARG, "kv_seq_create: NULL layout or pool");
  dsv4i_kv_seq *s = dsv4i_calloc(1, sizeof *s, "KV sequence");
  if (!s) return DSV4_ERR_OUT_OF_MEMORY;
  s->row = dsv4i_malloc(sizeof *s->row * (size_t)(lay->ld ? lay->ld : 1), "KV page row");
  s->n = dsv4i_calloc((size_t)DSV4I_KV_KINDS * (size_t)lay->n_layers, sizeof *s->n,
                      "KV page counts");
  if (!s->row || !s->n) {
    free(s->row);
    free(s->n);
    free(s);
    return DSV4_ERR_OUT_OF_MEMORY;
  }
  memset(s->row, 0xff, sizeof *s->row * (size_t)lay->ld);
  s->lay = lay;
  s->pool = pool;
  *out = s;
  return DSV4_OK;
}

/* release pages [keep, n) of a table */
static void tab_shrink(dsv4i_kv_seq *s, int32_t k, int32_t l, int64_t keep) {
  int32_t *t = tab_of(s, k, l), *n = cnt_of(s, k, l);
  for (int64_t i = keep; i < *n; i++) {
    pool_release(s->pool, t[i]);
    t[i] = -1;
  }
  if (*n > keep) *n = (int32_t)keep;
}

void dsv4i_kv_seq_free(dsv4i_kv_seq *s) {
  if (!s) return;
  for (int k = 0; k < DSV4I_KV_KINDS; k++)
    for (int32_t l = 0; l < s->lay->n_layers; l++) tab_shrink(s, k, l, 0);
  free(s->row);
  free(s->n);
  free(s);
}

/* first page of a table that positions [from, to) write, and the page count
 * the table needs at `to` */
static void write_range(const dsv4i_kv_layout *lay, int32_t kind, int32_t l, int64_t from,
                        int64_t to, int64_t *first, int64_t *need) {
  *need = dsv4i_kv_table_pages(lay, kind, l, to);
  if (kind == DSV4I_KV_WINDOW || kind == DSV4I_KV_CSTATE) {
    *first = 0; /* a ring is written anywhere */
    return;
  }
  int64_t r0 = lay->ratio[l] > 0 ? from / lay->ratio[l] : 0;
  *first = r0 / lay->rec_per_page[kind];
}

dsv4_status dsv4i_kv_reserve(dsv4i_kv_seq *const *seqs, const int64_t *targets, int32_t n) {
  if (n < 0 || (n > 0 && (!seqs || !targets)))
    return dsv4i_error(DSV4_ERR_INVALID_ARG, "kv_reserve: bad arguments");
  for (int32_t i = 0; i < n; i++) {
    if (!seqs[i] || targets[i] < seqs[i]->n_pos || targets[i] > seqs[i]->lay->max_positions ||
        seqs[i]->pool != seqs[0]->pool)
      return dsv4i_error(DSV4_ERR_INVALID_ARG, "kv_reserve: sequence %d: target %lld outside "
                         "[its length, %lld] (or another pool)", (int)i,
                         seqs[i] ? (long long)targets[i] : -1LL,
                         seqs[i] ? (long long)seqs[i]->lay->max_positions : -1LL);
    for (int32_t j = 0; j < i; j++)
      if (seqs[j] == seqs[i])
        return dsv4i_error(DSV4_ERR_INVALID_ARG, "kv_reserve: sequence %d listed twice", (int)i);
  }
  if (n == 0) return DSV4_OK;
  dsv4i_kv_pool *p = seqs[0]->pool;
  p->n_copies = 0;
  /* pass 1: count the pages the pool must provide: new pages, and copies of shared
   * ones: of the h holders of a page with r references that write it in this
   * reserve, the first min(h, r - 1) copy it (pass 2 goes in the same order; the
   * last holder keeps the original) */
  int64_t want = 0;
  for (int32_t i = 0; i < n; i++) {
    const dsv4i_kv_seq *s = seqs[i];
    const dsv4i_kv_layout *lay = s->lay;
    const int64_t from = s->n_pos, to = targets[i] > s->n_resv ? targets[i] : s->n_resv;
    for (int k = 0; k < DSV4I_KV_KINDS; k++)
      for (int32_t l = 0; l < lay->n_layers; l++) {
        int64_t first, need;
        write_range(lay, k, l, from, to, &first, &need);
        const int32_t *t = tab_of(s, k, l), held = *cnt_of(s, k, l);
        for (int64_t pg = first; pg < need; pg++) {
          if (pg >= held) {
            want++;
            continue;
          }
          const int32_t id = t[pg];
          if (p->ref[id] <= 1) continue;
          if (p->seen[id] == 0) p->touched[p->n_touched++] = id;
          if (p->ref[id] - p->seen[id]++ > 1) want++;
        }
      }
  }
  for (int64_t j = 0; j < p->n_touched; j++) p->seen[p->touched[j]] = 0;
  p->n_touched = 0;
  if (want > p->n_free)
    return dsv4i_error(DSV4_KV_FULL, "KV cache full: the step needs %lld more pages of %zu "
                       "bytes, the pool has %lld free of %lld", (long long)want,
                       seqs[0]->lay->page_bytes, (long long)p->n_free, (long long)p->n_pages);
  /* pass 2: take the pages (cannot fail now) */
  for (int32_t i = 0; i < n; i++) {
    dsv4i_kv_seq *s = seqs[i];
    const dsv4i_kv_layout *lay = s->lay;
    const int64_t from = s->n_pos, to = targets[i] > s->n_resv ? targets[i] : s->n_resv;
    for (int k = 0; k < DSV4I_KV_KINDS; k++)
      for (int32_t l = 0; l < lay->n_layers; l++) {
        int64_t first, need;
        write_range(lay, k, l, from, to, &first, &need);
        int32_t *t = tab_of(s, k, l), *held = cnt_of(s, k, l);
        for (int64_t pg = first; pg < need && pg < *held; pg++)
          if (p->ref[t[pg]] > 1) { /* copy-on-write */
            const int32_t fresh = pool_take_copy(p, t[pg]);
            pool_release(p, t[pg]);
            t[pg] = fresh;
          }
        while (*held < need) t[(*held)++] = pool_take(p);
      }
    s->n_resv = to;
  }
  return DSV4_OK;
}

dsv4_status dsv4i_kv_seq_commit(dsv4i_kv_seq *s, int64_t n) {
  if (!s || n < s->n_pos || n > s->n_resv)
    return dsv4i_error(DSV4_ERR_INVALID_ARG, "kv_seq_commit: %lld outside [%lld, %lld]",
                       (long long)n, s ? (long long)s->n_pos : -1LL,
                       s ? (long long)s->n_resv : -1LL);
  s->n_pos = n;
  return DSV4_OK;
}

void dsv4i_kv_seq_mark(dsv4i_kv_seq *s, int64_t end) {
  if (s && end > s->n_dirty) s->n_dirty = end;
}

dsv4_status dsv4i_kv_seq_truncate(dsv4i_kv_seq *s, int64_t n) {
  if (!s) return dsv4i_error(DSV4_ERR_INVALID_ARG, "kv_seq_truncate: NULL");
  int64_t hi = s->n_dirty > s->n_pos ? s->n_dirty : s->n_pos;
  if (n < 0 || n > s->n_pos || (n != 0 && hi - n > s->lay->spare))
    return dsv4i_error(DSV4_ERR_INVALID_ARG, "kv_seq_truncate: to %lld from %lld positions "
                       "(written up to %lld): only 0 or a rollback of at most %d positions is "
                       "possible", (long long)n, (long long)s->n_pos, (long long)hi,
                       (int)s->lay->spare);
  for (int32_t l = 0; l < s->lay->n_layers; l++) {
    tab_shrink(s, DSV4I_KV_COMP, l, dsv4i_kv_table_pages(s->lay, DSV4I_KV_COMP, l, n));
    tab_shrink(s, DSV4I_KV_IDXK, l, dsv4i_kv_table_pages(s->lay, DSV4I_KV_IDXK, l, n));
  }
  s->n_pos = s->n_resv = s->n_dirty = n;
  return DSV4_OK;
}

/* pages a fork takes over from its parent: whole rings, and the append-only
 * pages of the committed records */
static int64_t fork_pages(const dsv4i_kv_seq *src, int32_t k, int32_t l) {
  int64_t n = *cnt_of(src, k, l);
  if (k == DSV4I_KV_COMP || k == DSV4I_KV_IDXK) {
    int64_t np = dsv4i_kv_table_pages(src->lay, k, l, src->n_pos);
    n = np < n ? np : n;
  }
  return n;
}

dsv4_status dsv4i_kv_seq_fork(const dsv4i_kv_seq *src, dsv4i_kv_seq **out) {
  if (!out) return dsv4i_error(DSV4_ERR_INVALID_ARG, "kv_seq_fork: NULL out");
  *out = NULL;
  if (!src) return dsv4i_error(DSV4_ERR_INVALID_ARG, "kv_seq_fork: NULL parent");
  const dsv4i_kv_layout *lay = src->lay;
  dsv4i_kv_pool *p = src->pool;
  int64_t want = 0; /* rings are copied */
  for (int32_t l = 0; l < lay->n_layers; l++)
    want += *cnt_of(src, DSV4I_KV_WINDOW, l) + *cnt_of(src, DSV4I_KV_CSTATE, l);
  if (want > p->n_free)
    return dsv4i_error(DSV4_KV_FULL, "KV cache full: fork needs %lld pages, the pool has %lld "
                       "free", (long long)want, (long long)p->n_free);
  dsv4i_kv_seq *d;
  dsv4_status st = dsv4i_kv_seq_create(lay, p, &d);
  if (st != DSV4_OK) return st;
  p->n_copies = 0;
  for (int k = 0; k < DSV4I_KV_KINDS; k++)
    for (int32_t l = 0; l < lay->n_layers; l++) {
      const int32_t *ts = tab_of(src, k, l);
      int32_t *td = tab_of(d, k, l);
      const int64_t keep = fork_pages(src, k, l);
      for (int64_t i = 0; i < keep; i++) {
        if (k == DSV4I_KV_WINDOW || k == DSV4I_KV_CSTATE) {
          td[i] = pool_take_copy(p, ts[i]);
        } else {
          td[i] = ts[i];
          p->ref[ts[i]]++;
        }
      }
      *cnt_of(d, k, l) = (int32_t)keep;
    }
  d->n_pos = d->n_resv = d->n_dirty = src->n_pos;
  *out = d;
  return DSV4_OK;
}

int64_t dsv4i_kv_seq_pages(const dsv4i_kv_seq *s) {
  if (!s) return 0;
  int64_t sum = 0;
  for (int k = 0; k < DSV4I_KV_KINDS; k++)
    for (int32_t l = 0; l < s->lay->n_layers; l++) sum += *cnt_of(s, k, l);
  return sum;
}

int64_t dsv4i_kv_slot_bytes(const dsv4i_kv_layout *lay) {
  return 2 * (int64_t)lay->ld * (int64_t)sizeof(int32_t) /* row + the step's copy */ +
         (int64_t)DSV4I_KV_KINDS * lay->n_layers * (int64_t)sizeof(int32_t) +
         (int64_t)sizeof(dsv4i_kv_seq) + 3 * (int64_t)sizeof(int64_t) + 2 * (int64_t)sizeof(void *);
}

/* ---- slots ----------------------------------------------------------- */

dsv4_status dsv4i_kv_cache_init(dsv4i_kv_cache *c, const dsv4i_kv_layout *lay, int64_t pool_pages,
                                int32_t n_slots, dsv4i_backend *be) {
  memset(c, 0, sizeof *c);
  if (!lay || n_slots < 1)
    return dsv4i_error(DSV4_ERR_INVALID_ARG, "kv_cache_init: %d slots", (int)n_slots);
  c->lay = *lay;
  c->n_slots = n_slots;
  c->be = be;
  const size_t ns = (size_t)n_slots;
  dsv4_status s = dsv4i_kv_pool_create(pool_pages, &c->pool);
  if (!s) {
    c->slots = dsv4i_calloc(ns, sizeof *c->slots, "KV slots");
    c->rows = dsv4i_malloc(ns * (size_t)(lay->ld ? lay->ld : 1) * sizeof *c->rows, "KV step table");
    c->len = dsv4i_calloc(ns, sizeof *c->len, "KV step lengths");
    c->end = dsv4i_calloc(ns, sizeof *c->end, "KV step reservations");
    c->sel = dsv4i_calloc(ns, sizeof *c->sel, "KV reserve scratch");
    c->tgt = dsv4i_calloc(ns, sizeof *c->tgt, "KV reserve scratch");
    if (!c->slots || !c->rows || !c->len || !c->end || !c->sel || !c->tgt) s = DSV4_ERR_OUT_OF_MEMORY;
  }
  if (s) dsv4i_kv_cache_free(c);
  return s;
}

void dsv4i_kv_cache_free(dsv4i_kv_cache *c) {
  if (c->slots)
    for (int32_t i = 0; i < c->n_slots; i++) dsv4i_kv_seq_free(c->slots[i]);
  free(c->slots);
  free(c->rows);
  free(c->len);
  free(c->end);
  free(c->sel);
  free(c->tgt);
  dsv4i_kv_pool_free(c->pool);
  memset(c, 0, sizeof *c);
}

dsv4i_kv_seq *dsv4i_kv_slot(const dsv4i_kv_cache *c, int32_t slot) {
  return slot >= 0 && slot < c->n_slots ? c->slots[slot] : NULL;
}

static dsv4_status slot_get(const dsv4i_kv_cache *c, int32_t slot, dsv4i_kv_seq **out) {
  if (!(*out = dsv4i_kv_slot(c, slot)))
    return dsv4i_error(DSV4_ERR_INVALID_ARG, "KV cache: slot %d is not open", (int)slot);
  return DSV4_OK;
}

/* hand the pool's pending copies to the backend */
static dsv4_status apply_copies(dsv4i_kv_cache *c) {
  const int32_t *src, *dst;
  const int32_t n = dsv4i_kv_pool_copies(c->pool, &src, &dst);
  return n > 0 && c->be ? c->be->ops->kv_copy(c->be, n, src, dst) : DSV4_OK;
}

static dsv4_status slot_new(dsv4i_kv_cache *c, const dsv4i_kv_seq *src, int32_t *slot) {
  int32_t i = 0;
  while (i < c->n_slots && c->slots[i]) i++;
  if (i == c->n_slots)
    return dsv4i_error(DSV4_KV_FULL, "KV cache: all %d slots are in use", (int)c->n_slots);
  dsv4_status s = src ? dsv4i_kv_seq_fork(src, &c->slots[i])
                      : dsv4i_kv_seq_create(&c->lay, c->pool, &c->slots[i]);
  if (!s && src && (s = apply_copies(c))) {
    dsv4i_kv_seq_free(c->slots[i]);
    c->slots[i] = NULL;
  }
  if (!s) *slot = i;
  return s;
}

dsv4_status dsv4i_kv_slot_open(dsv4i_kv_cache *c, int32_t *slot) { return slot_new(c, NULL, slot); }

dsv4_status dsv4i_kv_slot_fork(dsv4i_kv_cache *c, int32_t src, int32_t *dst) {
  dsv4i_kv_seq *s;
  dsv4_status st = slot_get(c, src, &s);
  return st ? st : slot_new(c, s, dst);
}

void dsv4i_kv_slot_close(dsv4i_kv_cache *c, int32_t slot) {
  if (!dsv4i_kv_slot(c, slot)) return;
  dsv4i_kv_seq_free(c->slots[slot]);
  c->slots[slot] = NULL;
}

dsv4_status dsv4i_kv_slot_reserve(dsv4i_kv_cache *c, int32_t n, const int32_t *slots,
                                  const int64_t *len) {
  if (n < 0 || n > c->n_slots)
    return dsv4i_error(DSV4_ERR_INVALID_ARG, "KV reserve: %d slots", (int)n);
  for (int32_t i = 0; i < n; i++) {
    dsv4_status s = slot_get(c, slots[i], &c->sel[i]);
    if (s) return s;
    c->tgt[i] = len[i] > c->sel[i]->n_pos ? len[i] : c->sel[i]->n_pos;
  }
  dsv4_status s = dsv4i_kv_reserve(c->sel, c->tgt, n);
  return s ? s : apply_copies(c);
}

dsv4_status dsv4i_kv_slot_truncate(dsv4i_kv_cache *c, int32_t slot, int64_t len) {
  dsv4i_kv_seq *s;
  dsv4_status st = slot_get(c, slot, &s);
  return st ? st : dsv4i_kv_seq_truncate(s, len);
}

dsv4_status dsv4i_kv_step_table(dsv4i_kv_cache *c, int32_t n, const int32_t *slots,
                                const int64_t *end, dsv4i_kv_step *out) {
  if (n < 1 || n > c->n_slots)
    return dsv4i_error(DSV4_ERR_INVALID_ARG, "KV step table: %d sequences", (int)n);
  const size_t ld = (size_t)c->lay.ld;
  for (int32_t i = 0; i < n; i++) {
    dsv4i_kv_seq *q;
    dsv4_status s = slot_get(c, slots[i], &q);
    if (s) return s;
    for (int32_t j = 0; j < i; j++)
      if (slots[j] == slots[i])
        return dsv4i_error(DSV4_ERR_INVALID_ARG, "KV step table: slot %d twice", (int)slots[i]);
    if (end && (end[i] < q->n_pos || end[i] > q->n_resv))
      return dsv4i_error(DSV4_ERR_INVALID_ARG, "KV step table: slot %d: positions up to %lld "
                         "not reserved (holds %lld, reserved %lld)", (int)slots[i],
                         (long long)end[i], (long long)q->n_pos, (long long)q->n_resv);
    c->sel[i] = q;
  }
  for (int32_t i = 0; i < n; i++) {
    const dsv4i_kv_seq *q = c->sel[i];
    int32_t *row = c->rows + (size_t)i * ld;
    for (int k = 0; k < DSV4I_KV_KINDS; k++) /* what each table holds; the rest is stale */
      for (int32_t l = 0; l < c->lay.n_layers; l++)
        memcpy(row + c->lay.off[k][l], tab_of(q, k, l), sizeof *row * (size_t)*cnt_of(q, k, l));
    c->len[i] = q->n_pos;
    c->end[i] = q->n_resv;
    if (end) dsv4i_kv_seq_mark(c->sel[i], end[i]);
  }
  out->n_seq = n;
  out->ld = c->lay.ld;
  out->pages = c->rows;
  out->len = c->len;
  out->end = c->end;
  return DSV4_OK;
}

dsv4_status dsv4i_kv_step_commit(dsv4i_kv_cache *c, int32_t n, const int32_t *slots,
                                 const int64_t *end) {
  dsv4_status s = DSV4_OK;
  for (int32_t i = 0; i < n && !s; i++) {
    dsv4i_kv_seq *q;
    if (!(s = slot_get(c, slots[i], &q))) s = dsv4i_kv_seq_commit(q, end[i]);
  }
  return s;
}

void dsv4i_kv_usage_get(const dsv4i_kv_cache *c, dsv4i_kv_usage *u) {
  u->pages_total = dsv4i_kv_pool_n_pages(c->pool);
  u->pages_used = u->pages_total - dsv4i_kv_pool_free_pages(c->pool);
  u->slots_total = c->n_slots;
  u->slots_used = 0;
  for (int32_t i = 0; i < c->n_slots; i++) u->slots_used += c->slots[i] != NULL;
}
