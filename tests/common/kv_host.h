/*
 * KV caches for tests below the engine (header-only, static helpers): the
 * engine's bookkeeping (engine/kv.h) over a host page pool, stored the way
 * the CPU backend stores it, with the views (cpu/kvcache.h) the CPU
 * attention reads. kvh_reserve applies the page copies the bookkeeping
 * decides, as the engine hands them to a backend's kv_copy.
 */
#ifndef DSV4_TEST_KV_HOST_H
#define DSV4_TEST_KV_HOST_H

#include <stdlib.h>
#include <string.h>

#include "cpu/kvcache.h"
#include "engine/kv.h"

typedef struct kvh {
  dsv4i_kv_layout lay;
  dsv4i_kv_pool *pool;
  uint8_t *mem; /* [n_pages][lay.page_bytes] */
} kvh;

/* A sequence: its view first, so &q->v is what the attention takes. */
typedef struct kvh_seq {
  dsv4i_kv_view v;
  dsv4i_kv_seq *s;
  kvh *h;
} kvh_seq;

static inline void kvh_init(kvh *h, const dsv4i_config *c, size_t page_bytes, int64_t n_pages,
                     int64_t max_positions) {
  assert_int_equal(dsv4i_kv_layout_init(c, 0, page_bytes, max_positions, &h->lay), DSV4_OK);
  assert_int_equal(dsv4i_kv_pool_create(n_pages, &h->pool), DSV4_OK);
  h->mem = malloc(page_bytes * (size_t)n_pages);
  assert_non_null(h->mem);
}

static inline void kvh_free(kvh *h) {
  dsv4i_kv_pool_free(h->pool);
  free(h->mem);
}

static inline void kvh_sync(kvh_seq *q) {
  q->v.len = q->s->n_pos;
  q->v.end = q->s->n_resv;
}

/* the copies of the last reserve / fork, as a backend's kv_copy */
static inline void kvh_apply(kvh *h) {
  const int32_t *src, *dst;
  const int32_t n = dsv4i_kv_pool_copies(h->pool, &src, &dst);
  for (int32_t i = 0; i < n; i++)
    memcpy(h->mem + (size_t)dst[i] * h->lay.page_bytes, h->mem + (size_t)src[i] * h->lay.page_bytes,
           h->lay.page_bytes);
}

static inline kvh_seq *kvh_wrap(kvh *h, dsv4i_kv_seq *s) {
  kvh_seq *q = calloc(1, sizeof *q);
  assert_non_null(q);
  q->s = s;
  q->h = h;
  q->v = (dsv4i_kv_view){&h->lay, h->mem, s->row, 0, 0};
  kvh_sync(q);
  return q;
}

static inline kvh_seq *kvh_new(kvh *h) {
  dsv4i_kv_seq *s = NULL;
  assert_int_equal(dsv4i_kv_seq_create(&h->lay, h->pool, &s), DSV4_OK);
  return kvh_wrap(h, s);
}

/* fork; NULL with the status in *st when it fails */
static inline kvh_seq *kvh_fork(kvh_seq *src, dsv4_status *st) {
  dsv4i_kv_seq *s = NULL;
  *st = dsv4i_kv_seq_fork(src->s, &s);
  if (*st) return NULL;
  kvh_apply(src->h);
  return kvh_wrap(src->h, s);
}

static inline void kvh_seq_free(kvh_seq *q) {
  if (!q) return;
  dsv4i_kv_seq_free(q->s);
  free(q);
}

static inline dsv4_status kvh_reserve(kvh_seq *const *q, const int64_t *to, int32_t n) {
  dsv4i_kv_seq *s[16];
  assert_true(n <= 16);
  for (int32_t i = 0; i < n; i++) s[i] = q[i]->s;
  const dsv4_status st = dsv4i_kv_reserve(s, to, n);
  if (!st && n > 0) kvh_apply(q[0]->h);
  for (int32_t i = 0; i < n; i++) kvh_sync(q[i]);
  return st;
}

/* reserve [len, to) of one sequence and mark it written (a step about to run) */
static inline void kvh_step_begin(kvh_seq *q, int64_t to) {
  assert_int_equal(kvh_reserve(&q, &to, 1), DSV4_OK);
  dsv4i_kv_seq_mark(q->s, to);
}

static inline dsv4_status kvh_commit(kvh_seq *q, int64_t n) {
  const dsv4_status st = dsv4i_kv_seq_commit(q->s, n);
  kvh_sync(q);
  return st;
}

static inline dsv4_status kvh_truncate(kvh_seq *q, int64_t n) {
  const dsv4_status st = dsv4i_kv_seq_truncate(q->s, n);
  kvh_sync(q);
  return st;
}

#endif /* DSV4_TEST_KV_HOST_H */
