/*
 * Per-sequence attention caches (kvcache.h): the native record codecs, the
 * page pool, the layout, reserve / commit / truncate / fork.
 *
 * Record codecs: encoding goes through the reference quantisers of
 * lib/model/formats.h; decoding reproduces their QDQ values bit for bit (the
 * products are exact in fp32 and are rounded to bf16 like the QDQ forms, so
 * even the inf corner agrees).
 */
#include <assert.h>
#include <stdlib.h>
#include <string.h>

#include "cpu/kvcache.h"
#include "model/formats.h"

/* ---- record codecs --------------------------------------------------- */

void dsv4i_kv_window_encode(const uint16_t *x, int32_t hd, uint8_t *rec) {
  (void)dsv4i_act_quant(x, (size_t)hd, rec, rec + hd);
}

void dsv4i_kv_window_decode(const uint8_t *rec, int32_t hd, float *y) {
  const uint8_t *sc = rec + hd;
  for (int32_t b = 0; b < hd / 32; b++) {
    const float s = dsv4i_e8m0_to_f32(sc[b]);
    for (int32_t i = b * 32; i < b * 32 + 32; i++)
      y[i] = dsv4i_bf16_to_f32(dsv4i_f32_to_bf16(dsv4i_e4m3_to_f32(rec[i]) * s));
  }
}

void dsv4i_kv_comp_encode(const uint16_t *x, int32_t hd, uint8_t *rec) {
  (void)dsv4i_fp4_act_quant_e4m3(x, (size_t)hd, rec, rec + hd / 2);
}

void dsv4i_kv_comp_decode(const uint8_t *rec, int32_t hd, float *y) {
  const uint8_t *sc = rec + hd / 2;
  for (int32_t b = 0; b < hd / 16; b++) {
    const float s = dsv4i_e4m3_to_f32(sc[b]);
    for (int32_t i = b * 8; i < b * 8 + 8; i++) {
      const uint8_t v = rec[i];
      y[2 * i] = dsv4i_bf16_to_f32(dsv4i_f32_to_bf16(dsv4i_e2m1_to_f32(dsv4i_e2m1_lo(v)) * s));
      y[2 * i + 1] = dsv4i_bf16_to_f32(dsv4i_f32_to_bf16(dsv4i_e2m1_to_f32(dsv4i_e2m1_hi(v)) * s));
    }
  }
}

void dsv4i_kv_idxk_encode(const uint16_t *x, int32_t ihd, uint8_t *rec) {
  (void)dsv4i_fp4_act_quant_ue8m0(x, (size_t)ihd, rec, rec + ihd / 2);
}

void dsv4i_kv_idxk_decode(const uint8_t *rec, int32_t ihd, float *y) {
  const uint8_t *sc = rec + ihd / 2;
  for (int32_t b = 0; b < ihd / 32; b++) {
    const float s = dsv4i_e8m0_to_f32(sc[b]);
    for (int32_t i = b * 16; i < b * 16 + 16; i++) {
      const uint8_t v = rec[i];
      y[2 * i] = dsv4i_bf16_to_f32(dsv4i_f32_to_bf16(dsv4i_e2m1_to_f32(dsv4i_e2m1_lo(v)) * s));
      y[2 * i + 1] = dsv4i_bf16_to_f32(dsv4i_f32_to_bf16(dsv4i_e2m1_to_f32(dsv4i_e2m1_hi(v)) * s));
    }
  }
}

struct dsv4i_kv_pool {
  size_t page_bytes;
  int64_t n_pages;
  uint8_t *mem;      /* [n_pages][page_bytes] */
  int32_t *ref;      /* [n_pages] holders of each page; 0 = free */
  int32_t *free_ids; /* stack of free page ids */
  int64_t n_free;
  /* reserve's count of copy-on-write: holders of a shared page met so far in the
   * reserve being checked (all 0 between calls), and the pages it touched */
  int32_t *seen;
  int32_t *touched;
  int64_t n_touched;
};

/* ---- pool ------------------------------------------------------------ */

dsv4_status dsv4i_kv_pool_create(size_t page_bytes, int64_t n_pages, dsv4i_kv_pool **out) {
  if (!out) return dsv4i_error(DSV4_ERR_INVALID_ARG, "kv_pool_create: NULL out");
  *out = NULL;
  if (page_bytes < 64 || page_bytes % 64 || n_pages < 1 || n_pages > INT32_MAX)
    return dsv4i_error(DSV4_ERR_INVALID_ARG, "kv_pool_create: %zu-byte pages x %lld", page_bytes,
                       (long long)n_pages);
  uint64_t total;
  if (!dsv4i_mul_overflow_u64(page_bytes, (uint64_t)n_pages, &total) || total > SIZE_MAX)
    return dsv4i_error(DSV4_ERR_INVALID_ARG, "kv_pool_create: size overflows");
  dsv4i_kv_pool *p = dsv4i_calloc(1, sizeof *p, "KV pool");
  if (!p) return DSV4_ERR_OUT_OF_MEMORY;
  p->page_bytes = page_bytes;
  p->n_pages = n_pages;
  p->mem = dsv4i_malloc((size_t)total, "KV pool pages");
  p->ref = dsv4i_calloc((size_t)n_pages, sizeof *p->ref, "KV pool refcounts");
  p->free_ids = dsv4i_malloc((size_t)n_pages * sizeof *p->free_ids, "KV pool free list");
  p->seen = dsv4i_calloc((size_t)n_pages, sizeof *p->seen, "KV pool copy-on-write counts");
  p->touched = dsv4i_malloc((size_t)n_pages * sizeof *p->touched, "KV pool copy-on-write list");
  if (!p->mem || !p->ref || !p->free_ids || !p->seen || !p->touched) {
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
  free(p->mem);
  free(p->ref);
  free(p->free_ids);
  free(p->seen);
  free(p->touched);
  free(p);
}

int64_t dsv4i_kv_pool_free_pages(const dsv4i_kv_pool *p) { return p ? p->n_free : 0; }
int64_t dsv4i_kv_pool_n_pages(const dsv4i_kv_pool *p) { return p ? p->n_pages : 0; }

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

static inline uint8_t *page_mem(const dsv4i_kv_pool *p, int32_t id) {
  return p->mem + (size_t)id * p->page_bytes;
}

/* ---- layout ---------------------------------------------------------- */

dsv4_status dsv4i_kv_layout_init(const dsv4i_config *cfg, int32_t spare, size_t page_bytes,
                                 dsv4i_kv_layout *out) {
  if (!out || !cfg) return dsv4i_error(DSV4_ERR_INVALID_ARG, "kv_layout_init: NULL");
  memset(out, 0, sizeof *out);
  const int32_t hd = cfg->head_dim, ihd = cfg->index_head_dim;
  if (hd <= 0 || hd % 32 || cfg->window_size <= 0 || cfg->n_total_layers <= 0 ||
      cfg->n_total_layers > DSV4I_MAX_LIST || (cfg->n_kv_sources > 0 && (ihd <= 0 || ihd % 32)))
    return dsv4i_error(DSV4_ERR_INVALID_ARG, "kv_layout_init: head_dim %d, index_head_dim %d, "
                       "window %d, layers %d", (int)hd, (int)ihd, (int)cfg->window_size,
                       (int)cfg->n_total_layers);
  if (spare <= 0) spare = cfg->dspark_block_size + 1 > 2 ? cfg->dspark_block_size + 1 : 2;
  out->n_layers = cfg->n_total_layers;
  out->head_dim = hd;
  out->index_head_dim = ihd;
  out->window = cfg->window_size;
  out->spare = spare;
  out->ring_slots = cfg->window_size + spare;
  out->page_bytes = page_bytes;
  out->rec_bytes[DSV4I_KV_WINDOW] = (int32_t)dsv4i_kv_record_bytes(cfg, DSV4I_KVREC_WINDOW);
  out->rec_bytes[DSV4I_KV_COMP] = (int32_t)dsv4i_kv_record_bytes(cfg, DSV4I_KVREC_COMPRESSED);
  out->rec_bytes[DSV4I_KV_IDXK] =
      ihd > 0 ? (int32_t)dsv4i_kv_record_bytes(cfg, DSV4I_KVREC_INDEX_KEY) : 1;
  out->rec_bytes[DSV4I_KV_CSTATE] = 2 * hd * (int32_t)sizeof(float);
  for (int k = 0; k < DSV4I_KV_KINDS; k++) {
    if (page_bytes < (size_t)out->rec_bytes[k] || page_bytes % 64)
      return dsv4i_error(DSV4_ERR_INVALID_ARG, "kv_layout_init: %zu-byte pages cannot hold a "
                         "%d-byte record (kind %d)", page_bytes, (int)out->rec_bytes[k], k);
    out->rec_per_page[k] = (int32_t)(page_bytes / (size_t)out->rec_bytes[k]);
  }
  for (int32_t l = 0; l < cfg->n_total_layers; l++) {
    const dsv4i_layer_role *r = &cfg->layers[l];
    if (!(r->roles & DSV4_ROLE_KV_SOURCE) || r->compress_ratio <= 0) continue;
    out->ratio[l] = r->compress_ratio;
    out->has_idxk[l] = (r->roles & DSV4_ROLE_INDEX_OWN_KEYS) != 0;
    out->state_slots[l] = r->compress_ratio > 1 ? r->compress_ratio + spare : 0;
  }
  return DSV4_OK;
}

/* records of a table at n positions (rings: their full size once used) */
static int64_t table_records(const dsv4i_kv_layout *lay, int32_t kind, int32_t l, int64_t n) {
  switch (kind) {
  case DSV4I_KV_WINDOW:
    return n > 0 ? lay->ring_slots : 0;
  case DSV4I_KV_CSTATE:
    return n > 0 ? lay->state_slots[l] : 0;
  case DSV4I_KV_COMP:
    return lay->ratio[l] > 0 ? n / lay->ratio[l] : 0;
  case DSV4I_KV_IDXK:
    return lay->ratio[l] > 0 && lay->has_idxk[l] ? n / lay->ratio[l] : 0;
  default:
    return 0;
  }
}

static int64_t table_pages(const dsv4i_kv_layout *lay, int32_t kind, int32_t l, int64_t n) {
  int64_t r = table_records(lay, kind, l, n);
  return (r + lay->rec_per_page[kind] - 1) / lay->rec_per_page[kind];
}

int64_t dsv4i_kv_pages_for(const dsv4i_kv_layout *lay, int32_t kind, int64_t n_pos) {
  if (!lay || kind < 0 || kind >= DSV4I_KV_KINDS || n_pos < 0) return 0;
  int64_t sum = 0;
  for (int32_t l = 0; l < lay->n_layers; l++) sum += table_pages(lay, kind, l, n_pos);
  return sum;
}

/* ---- sequences ------------------------------------------------------- */

static inline dsv4i_kv_ptab *tab_of(const dsv4i_kv_seq *s, int32_t kind, int32_t l) {
  return &s->tab[(size_t)kind * (size_t)s->lay->n_layers + (size_t)l];
}

dsv4_status dsv4i_kv_seq_create(const dsv4i_kv_layout *lay, dsv4i_kv_pool *const *pools,
                                dsv4i_kv_seq **out) {
  if (!out) return dsv4i_error(DSV4_ERR_INVALID_ARG, "kv_seq_create: NULL out");
  *out = NULL;
  if (!lay || !pools || lay->n_layers <= 0)
    return dsv4i_error(DSV4_ERR_INVALID_ARG, "kv_seq_create: NULL layout or pools");
  for (int k = 0; k < DSV4I_KV_KINDS; k++) {
    int used = dsv4i_kv_pages_for(lay, k, INT64_C(1) << 40) > 0;
    if (used && (!pools[k] || pools[k]->page_bytes != lay->page_bytes))
      return dsv4i_error(DSV4_ERR_INVALID_ARG, "kv_seq_create: pool of kind %d missing or its "
                         "page size differs from the layout's %zu", k, lay->page_bytes);
  }
  dsv4i_kv_seq *s = dsv4i_calloc(1, sizeof *s, "KV sequence");
  if (!s) return DSV4_ERR_OUT_OF_MEMORY;
  s->tab = dsv4i_calloc((size_t)DSV4I_KV_KINDS * (size_t)lay->n_layers, sizeof *s->tab,
                        "KV page tables");
  if (!s->tab) {
    free(s);
    return DSV4_ERR_OUT_OF_MEMORY;
  }
  s->lay = lay;
  for (int k = 0; k < DSV4I_KV_KINDS; k++) s->pool[k] = pools[k];
  *out = s;
  return DSV4_OK;
}

/* release pages [keep, n) of a table */
static void tab_shrink(dsv4i_kv_seq *s, int32_t kind, int32_t l, int64_t keep) {
  dsv4i_kv_ptab *t = tab_of(s, kind, l);
  for (int64_t i = keep; i < t->n; i++) pool_release(s->pool[kind], t->page[i]);
  if (t->n > keep) t->n = keep;
}

void dsv4i_kv_seq_free(dsv4i_kv_seq *s) {
  if (!s) return;
  for (int k = 0; k < DSV4I_KV_KINDS; k++)
    for (int32_t l = 0; l < s->lay->n_layers; l++) {
      tab_shrink(s, k, l, 0);
      free(tab_of(s, k, l)->page);
    }
  free(s->tab);
  free(s);
}

static dsv4_status tab_grow(dsv4i_kv_ptab *t, int64_t cap) {
  if (cap <= t->cap) return DSV4_OK;
  int64_t nc = t->cap ? t->cap : 4;
  while (nc < cap) nc *= 2;
  int32_t *p = dsv4i_realloc(t->page, (size_t)nc * sizeof *p, "KV page table");
  if (!p) return DSV4_ERR_OUT_OF_MEMORY;
  t->page = p;
  t->cap = nc;
  return DSV4_OK;
}

/* first page of a table that positions [from, to) write, and the page count
 * the table needs at `to` */
static void write_range(const dsv4i_kv_layout *lay, int32_t kind, int32_t l, int64_t from,
                        int64_t to, int64_t *first, int64_t *need) {
  *need = table_pages(lay, kind, l, to);
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
    if (!seqs[i] || targets[i] < seqs[i]->n_pos)
      return dsv4i_error(DSV4_ERR_INVALID_ARG, "kv_reserve: sequence %d: target %lld below its "
                         "length", (int)i, seqs[i] ? (long long)targets[i] : -1LL);
    for (int32_t j = 0; j < i; j++)
      if (seqs[j] == seqs[i])
        return dsv4i_error(DSV4_ERR_INVALID_ARG, "kv_reserve: sequence %d listed twice", (int)i);
  }
  /* pass 1: grow page tables (no logical change) and count the pages each
   * pool must provide */
  dsv4_status st = DSV4_OK;
  dsv4i_kv_pool *pools[DSV4I_KV_KINDS * 8];
  int64_t want[DSV4I_KV_KINDS * 8];
  int n_pools = 0;
  for (int32_t i = 0; i < n; i++) {
    dsv4i_kv_seq *s = seqs[i];
    const dsv4i_kv_layout *lay = s->lay;
    int64_t from = s->n_pos, to = targets[i] > s->n_resv ? targets[i] : s->n_resv;
    for (int k = 0; k < DSV4I_KV_KINDS; k++)
      for (int32_t l = 0; l < lay->n_layers; l++) {
        int64_t first, need;
        write_range(lay, k, l, from, to, &first, &need);
        if (need == 0) continue;
        dsv4i_kv_ptab *t = tab_of(s, k, l);
        if (tab_grow(t, need) != DSV4_OK) {
          st = DSV4_ERR_OUT_OF_MEMORY;
          goto checked;
        }
        /* new pages, and copies of shared ones: of the h holders of a page with r
         * references that write it in this reserve, the first min(h, r - 1) copy it
         * (pass 2 goes in the same order; the last holder keeps the original) */
        dsv4i_kv_pool *kp = s->pool[k];
        int64_t cnt = 0;
        for (int64_t pg = first; pg < need; pg++) {
          if (pg >= t->n) {
            cnt++;
            continue;
          }
          const int32_t id = t->page[pg];
          if (kp->ref[id] <= 1) continue;
          if (kp->seen[id] == 0) kp->touched[kp->n_touched++] = id;
          if (kp->ref[id] - kp->seen[id]++ > 1) cnt++;
        }
        if (!cnt) continue;
        int pi = 0;
        while (pi < n_pools && pools[pi] != s->pool[k]) pi++;
        if (pi == n_pools) {
          if (n_pools == (int)DSV4I_ARRAY_LEN(pools)) {
            st = dsv4i_error(DSV4_ERR_INVALID_ARG, "kv_reserve: too many distinct pools");
            goto checked;
          }
          pools[n_pools] = s->pool[k];
          want[n_pools++] = 0;
        }
        want[pi] += cnt;
      }
  }
  for (int pi = 0; !st && pi < n_pools; pi++)
    if (want[pi] > pools[pi]->n_free)
      st = dsv4i_error(DSV4_KV_FULL, "KV cache full: the step needs %lld more pages of %zu "
                       "bytes, the pool has %lld free of %lld", (long long)want[pi],
                       pools[pi]->page_bytes, (long long)pools[pi]->n_free,
                       (long long)pools[pi]->n_pages);
checked:
  for (int32_t i = 0; i < n; i++) /* clear the copy-on-write counts */
    for (int k = 0; k < DSV4I_KV_KINDS; k++) {
      dsv4i_kv_pool *kp = seqs[i]->pool[k];
      if (!kp) continue;
      for (int64_t j = 0; j < kp->n_touched; j++) kp->seen[kp->touched[j]] = 0;
      kp->n_touched = 0;
    }
  if (st) return st;
  /* pass 2: take the pages (cannot fail now) */
  for (int32_t i = 0; i < n; i++) {
    dsv4i_kv_seq *s = seqs[i];
    const dsv4i_kv_layout *lay = s->lay;
    int64_t from = s->n_pos, to = targets[i] > s->n_resv ? targets[i] : s->n_resv;
    for (int k = 0; k < DSV4I_KV_KINDS; k++)
      for (int32_t l = 0; l < lay->n_layers; l++) {
        int64_t first, need;
        write_range(lay, k, l, from, to, &first, &need);
        dsv4i_kv_ptab *t = tab_of(s, k, l);
        dsv4i_kv_pool *p = s->pool[k];
        for (int64_t pg = first; pg < need && pg < t->n; pg++)
          if (p->ref[t->page[pg]] > 1) { /* copy-on-write */
            int32_t fresh = pool_take(p);
            memcpy(page_mem(p, fresh), page_mem(p, t->page[pg]), p->page_bytes);
            pool_release(p, t->page[pg]);
            t->page[pg] = fresh;
          }
        while (t->n < need) t->page[t->n++] = pool_take(p);
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
    tab_shrink(s, DSV4I_KV_COMP, l, table_pages(s->lay, DSV4I_KV_COMP, l, n));
    tab_shrink(s, DSV4I_KV_IDXK, l, table_pages(s->lay, DSV4I_KV_IDXK, l, n));
  }
  s->n_pos = s->n_resv = s->n_dirty = n;
  return DSV4_OK;
}

/* pages a fork takes over from its parent: whole rings, and the append-only
 * pages of the committed records */
static int64_t fork_pages(const dsv4i_kv_seq *src, int32_t k, int32_t l) {
  int64_t n = tab_of(src, k, l)->n;
  if (k == DSV4I_KV_COMP || k == DSV4I_KV_IDXK) {
    int64_t np = table_pages(src->lay, k, l, src->n_pos);
    n = np < n ? np : n;
  }
  return n;
}

dsv4_status dsv4i_kv_seq_fork(const dsv4i_kv_seq *src, dsv4i_kv_seq **out) {
  if (!out) return dsv4i_error(DSV4_ERR_INVALID_ARG, "kv_seq_fork: NULL out");
  *out = NULL;
  if (!src) return dsv4i_error(DSV4_ERR_INVALID_ARG, "kv_seq_fork: NULL parent");
  const dsv4i_kv_layout *lay = src->lay;
  /* rings are copied: count them per pool first */
  dsv4i_kv_pool *pools[2] = {src->pool[DSV4I_KV_WINDOW], src->pool[DSV4I_KV_CSTATE]};
  int64_t want[2] = {0, 0};
  for (int32_t l = 0; l < lay->n_layers; l++) {
    want[0] += tab_of(src, DSV4I_KV_WINDOW, l)->n;
    want[1] += tab_of(src, DSV4I_KV_CSTATE, l)->n;
  }
  if (pools[0] == pools[1]) {
    want[0] += want[1];
    want[1] = 0;
  }
  for (int i = 0; i < 2; i++)
    if (want[i] > 0 && want[i] > pools[i]->n_free)
      return dsv4i_error(DSV4_KV_FULL, "KV cache full: fork needs %lld pages, the pool has %lld "
                         "free", (long long)want[i], (long long)pools[i]->n_free);
  dsv4i_kv_seq *d;
  dsv4_status st = dsv4i_kv_seq_create(lay, src->pool, &d);
  if (st != DSV4_OK) return st;
  for (int k = 0; k < DSV4I_KV_KINDS; k++)
    for (int32_t l = 0; l < lay->n_layers; l++) {
      if (tab_grow(tab_of(d, k, l), fork_pages(src, k, l)) != DSV4_OK) {
        dsv4i_kv_seq_free(d);
        return DSV4_ERR_OUT_OF_MEMORY;
      }
    }
  for (int k = 0; k < DSV4I_KV_KINDS; k++)
    for (int32_t l = 0; l < lay->n_layers; l++) {
      const dsv4i_kv_ptab *ts = tab_of(src, k, l);
      dsv4i_kv_ptab *td = tab_of(d, k, l);
      dsv4i_kv_pool *p = src->pool[k];
      const int64_t keep = fork_pages(src, k, l);
      for (int64_t i = 0; i < keep; i++) {
        if (k == DSV4I_KV_WINDOW || k == DSV4I_KV_CSTATE) {
          int32_t fresh = pool_take(p);
          memcpy(page_mem(p, fresh), page_mem(p, ts->page[i]), p->page_bytes);
          td->page[i] = fresh;
        } else {
          td->page[i] = ts->page[i];
          p->ref[ts->page[i]]++;
        }
      }
      td->n = keep;
    }
  d->n_pos = d->n_resv = d->n_dirty = src->n_pos;
  *out = d;
  return DSV4_OK;
}

uint8_t *dsv4i_kv_rec(const dsv4i_kv_seq *s, int32_t kind, int32_t layer, int64_t idx) {
  const dsv4i_kv_layout *lay = s->lay;
  if (kind == DSV4I_KV_WINDOW) idx %= lay->ring_slots;
  else if (kind == DSV4I_KV_CSTATE) idx %= lay->state_slots[layer];
  const int64_t rpp = lay->rec_per_page[kind];
  const dsv4i_kv_ptab *t = tab_of(s, kind, layer);
  assert(idx >= 0 && idx / rpp < t->n);
  return page_mem(s->pool[kind], t->page[idx / rpp]) + (size_t)(idx % rpp) * (size_t)lay->rec_bytes[kind];
}

int64_t dsv4i_kv_seq_pages(const dsv4i_kv_seq *s) {
  if (!s) return 0;
  int64_t sum = 0;
  for (int k = 0; k < DSV4I_KV_KINDS; k++)
    for (int32_t l = 0; l < s->lay->n_layers; l++) sum += tab_of(s, k, l)->n;
  return sum;
}
