/*
 * Sequence table: opaque int64 ids -> (backend cache slot, length, Engram
 * history). An id is serial << 16 | table index, so a lookup is one
 * comparison and a freed id never matches a later sequence.
 */
#include <stdlib.h>

#include "engine/engine.h"

static dsv4i_seq *lookup(struct dsv4_engine *e, int64_t id) {
  if (id <= 0) return NULL;
  const int64_t idx = id & ((INT64_C(1) << DSV4I_SEQ_IDX_BITS) - 1);
  if (idx >= e->plan.max_seqs) return NULL;
  dsv4i_seq *s = &e->seqs[idx];
  return s->id == id ? s : NULL;
}

static dsv4_status unknown(int64_t id) {
  return dsv4i_error(DSV4_ERR_UNKNOWN_SEQUENCE, "sequence %lld does not exist (never created, or freed)",
                     (long long)id);
}

dsv4i_seq *dsv4i_seq_find(struct dsv4_engine *e, int64_t id, dsv4_status *st) {
  if ((*st = dsv4i_engine_live(e))) return NULL;
  dsv4i_seq *s = lookup(e, id);
  if (!s) {
    *st = unknown(id);
    return NULL;
  }
  if (s->damaged) {
    *st = dsv4i_error(DSV4_ERR_INVALID_ARG,
                      "sequence %lld was left inconsistent by an earlier failed call; free it",
                      (long long)id);
    return NULL;
  }
  *st = DSV4_OK;
  return s;
}

int32_t dsv4i_seq_count(const struct dsv4_engine *e) {
  int32_t n = 0;
  for (int32_t i = 0; i < e->plan.max_seqs; i++) n += e->seqs[i].id != 0;
  return n;
}

static dsv4_status free_entry(struct dsv4_engine *e, int32_t *idx) {
  for (int32_t i = 0; i < e->plan.max_seqs; i++)
    if (!e->seqs[i].id) {
      *idx = i;
      return DSV4_OK;
    }
  return dsv4i_error(DSV4_KV_FULL, "all %d sequence slots are in use (engine max_sequences); "
                                   "free a sequence and retry", (int)e->plan.max_seqs);
}

/* Fill free entry idx with a new id over a cache slot; returns the id. */
static int64_t take_entry(struct dsv4_engine *e, int32_t idx, int32_t slot, int64_t len,
                          dsv4i_engram_history *h) {
  dsv4i_seq *q = &e->seqs[idx];
  q->id = (++e->serial << DSV4I_SEQ_IDX_BITS) | idx;
  q->slot = slot;
  q->damaged = 0;
  q->len = len;
  q->hist = h;
  return q->id;
}

dsv4_status dsv4i_seq_create(struct dsv4_engine *e, int64_t *id) {
  int32_t idx = -1, slot = -1;
  dsv4_status s = dsv4i_engine_live(e);
  if (!s) s = free_entry(e, &idx);
  if (s) return s;
  dsv4i_engram_history *h = NULL;
  if (e->engram && (s = dsv4i_engram_history_create(e->engram, &h))) return s;
  if ((s = dsv4i_kv_slot_open(&e->kv, &slot))) {
    dsv4i_engram_history_free(h);
    return s;
  }
  *id = take_entry(e, idx, slot, 0, h);
  return DSV4_OK;
}

dsv4_status dsv4i_seq_fork(struct dsv4_engine *e, int64_t parent, int64_t *child) {
  dsv4_status s;
  dsv4i_seq *p = dsv4i_seq_find(e, parent, &s);
  if (!p) return s;
  int32_t idx = -1, slot = -1;
  if ((s = free_entry(e, &idx))) return s;
  dsv4i_engram_history *h = NULL;
  if (p->hist && (s = dsv4i_engram_history_fork(p->hist, &h))) return s;
  if ((s = dsv4i_engine_note(e, dsv4i_kv_slot_fork(&e->kv, p->slot, &slot)))) {
    dsv4i_engram_history_free(h);
    return s;
  }
  *child = take_entry(e, idx, slot, p->len, h);
  return DSV4_OK;
}

dsv4_status dsv4i_seq_free(struct dsv4_engine *e, int64_t id) {
  dsv4_status s = dsv4i_engine_live(e);
  if (s) return s;
  dsv4i_seq *q = lookup(e, id);
  if (!q) return unknown(id);
  dsv4i_kv_slot_close(&e->kv, q->slot);
  dsv4i_engram_history_free(q->hist);
  q->id = 0;
  q->hist = NULL;
  q->slot = -1;
  q->len = 0;
  q->damaged = 0;
  return DSV4_OK;
}

dsv4_status dsv4i_seq_truncate(struct dsv4_engine *e, int64_t id, int64_t len) {
  dsv4_status s;
  dsv4i_seq *q = dsv4i_seq_find(e, id, &s);
  if (!q) return s;
  if (len < 1 || len > q->len)
    return dsv4i_error(DSV4_ERR_INVALID_ARG, "truncate: sequence %lld holds %lld positions, not "
                       "%lld", (long long)id, (long long)q->len, (long long)len);
  if (len == q->len) return DSV4_OK;
  if ((s = dsv4i_kv_slot_truncate(&e->kv, q->slot, len))) {
    q->damaged = 1;
    return s;
  }
  q->len = len;
  if (q->hist && dsv4i_engram_history_len(q->hist) > len &&
      (s = dsv4i_engram_history_truncate(q->hist, len)))
    q->damaged = 1;
  return s;
}
