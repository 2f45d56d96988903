/*
 * CPU attention building blocks and the per-sequence caches
 * (lib/cpu/attention.h, lib/cpu/kvcache.h), without fixtures:
 * 1. record encode/decode == the formats' QDQ, bytes == the quantiser codes;
 * 2. window ring wrap, reserve / commit, DSV4_KV_FULL leaves everything
 *    unchanged, truncate (rollback depth), fork with copy-on-write;
 * 3. window rows of both layouts against a simulated reference ring;
 * 4. top-k tie rule and candidate blocks against brute force;
 * 5. sparse attention: a hand case, an all-invalid row, −1 entries, and the
 *    64-entry blocking against an independent transcription of the kernel.
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "test_util.h"
#include "cpu/attention.h"
#include "cpu/kvcache.h"
#include "model/formats.h"
#include "kv_host.h"

static uint64_t rs = 0x9E3779B97F4A7C15ull;
static uint32_t rnd(void) {
  rs ^= rs >> 12;
  rs ^= rs << 25;
  rs ^= rs >> 27;
  return (uint32_t)((rs * 0x2545F4914F6CDD1Dull) >> 32);
}
static float frand(void) { return (float)rnd() / 4294967296.0f * 2.0f - 1.0f; }
static uint16_t bf(float f) { return dsv4i_f32_to_bf16(f); }

/* ---- 1. records --------------------------------------------------------- */

static void fill_row(uint16_t *x, int n, float scale) {
  for (int i = 0; i < n; i++) x[i] = bf(frand() * scale * (i % 7 == 0 ? 10.0f : 1.0f));
}

static void records_match_qdq(void **state) {
  (void)state;
  const float scales[] = {1e-6f, 3e-4f, 0.04f, 1.0f, 37.0f, 3000.0f};
  for (int hd = 128; hd <= 512; hd *= 4)
    for (size_t si = 0; si < DSV4I_ARRAY_LEN(scales); si++) {
      uint16_t x[512], y[512];
      uint8_t rec[600], q[512], s[64];
      float d[512];
      fill_row(x, hd, scales[si]);
      /* window: MXFP8 */
      dsv4i_kv_window_encode(x, hd, rec);
      assert_int_equal(dsv4i_act_quant(x, hd, q, s), DSV4_OK);
      assert_memory_equal(rec, q, hd);
      assert_memory_equal(rec + hd, s, hd / 32);
      dsv4i_kv_window_decode(rec, hd, d);
      assert_int_equal(dsv4i_act_quant_qdq(x, hd, y), DSV4_OK);
      for (int i = 0; i < hd; i++) assert_int_equal(bf(d[i]), y[i]);
      /* compressed: fp4 + E4M3 per 16 */
      dsv4i_kv_comp_encode(x, hd, rec);
      assert_int_equal(dsv4i_fp4_act_quant_e4m3(x, hd, q, s), DSV4_OK);
      assert_memory_equal(rec, q, hd / 2);
      assert_memory_equal(rec + hd / 2, s, hd / 16);
      dsv4i_kv_comp_decode(rec, hd, d);
      assert_int_equal(dsv4i_fp4_act_quant_e4m3_qdq(x, hd, y), DSV4_OK);
      for (int i = 0; i < hd; i++) assert_int_equal(bf(d[i]), y[i]);
      /* index keys: fp4 + UE8M0 per 32 (128 wide) */
      dsv4i_kv_idxk_encode(x, 128, rec);
      assert_int_equal(dsv4i_fp4_act_quant_ue8m0(x, 128, q, s), DSV4_OK);
      assert_memory_equal(rec, q, 64);
      assert_memory_equal(rec + 64, s, 4);
      dsv4i_kv_idxk_decode(rec, 128, d);
      assert_int_equal(dsv4i_fp4_act_quant_ue8m0_qdq(x, 128, y), DSV4_OK);
      for (int i = 0; i < 128; i++) assert_int_equal(bf(d[i]), y[i]);
    }
  assert_int_equal(dsv4i_kv_window_rec_bytes(512), 528);
  assert_int_equal(dsv4i_kv_comp_rec_bytes(512), 288);
  assert_int_equal(dsv4i_kv_idxk_rec_bytes(128), 68);
}

/* ---- 2. caches ---------------------------------------------------------- */

/* layers: 0 window only, 1 ratio-2 KV source with keys, 2 ratio-1 KV source */
static void small_config(dsv4i_config *c) {
  memset(c, 0, sizeof *c);
  c->head_dim = 64;
  c->index_head_dim = 32;
  c->window_size = 8;
  c->dspark_block_size = 2; /* spare = 3 */
  c->n_total_layers = 3;
  c->n_kv_sources = 2;
  c->layers[1].compress_ratio = 2;
  c->layers[1].roles = DSV4_ROLE_KV_SOURCE | DSV4_ROLE_INDEX_SOURCE | DSV4_ROLE_INDEX_OWN_KEYS;
  c->layers[2].compress_ratio = 1;
  c->layers[2].roles = DSV4_ROLE_KV_SOURCE | DSV4_ROLE_INDEX_SOURCE | DSV4_ROLE_INDEX_OWN_KEYS;
}

typedef struct cache_fix {
  dsv4i_config cfg;
  kvh h;
} cache_fix;

static void cache_setup(cache_fix *f, int64_t n_pages) {
  small_config(&f->cfg);
  kvh_init(&f->h, &f->cfg, 512, n_pages, 4096);
  assert_int_equal(f->h.lay.spare, 3);
  assert_int_equal(f->h.lay.ring_slots, 11);
  assert_int_equal(f->h.lay.state_slots[1], 5);
}

static kvh_seq *new_seq(cache_fix *f) { return kvh_new(&f->h); }

static uint8_t *rec(const kvh_seq *s, int kind, int l, int64_t idx) {
  return dsv4i_kv_rec(&s->v, kind, l, idx);
}

/* write a recognisable byte pattern for position p in every table it touches */
static void write_pos(kvh_seq *s, int64_t p, uint8_t tag) {
  memset(rec(s, DSV4I_KV_WINDOW, 0, p), (int)(p * 3 + tag) & 0xFF, 66);
  memset(rec(s, DSV4I_KV_CSTATE, 1, p), (int)(p * 5 + tag) & 0xFF, 512);
  if ((p + 1) % 2 == 0) memset(rec(s, DSV4I_KV_COMP, 1, p / 2), (int)(p + tag) & 0xFF, 36);
  memset(rec(s, DSV4I_KV_COMP, 2, p), (int)(p * 7 + tag) & 0xFF, 36);
}

static int rec_is(const kvh_seq *s, int kind, int l, int64_t idx, int v, size_t n) {
  const uint8_t *r = rec(s, kind, l, idx);
  for (size_t i = 0; i < n; i++)
    if (r[i] != (uint8_t)v) return 0;
  return 1;
}

static void step(kvh_seq *s, int64_t n_new, uint8_t tag) {
  const int64_t to = s->s->n_pos + n_new;
  kvh_step_begin(s, to); /* reserve and mark, as the engine does before a step */
  for (int64_t p = s->s->n_pos; p < to; p++) write_pos(s, p, tag);
  assert_int_equal(kvh_commit(s, to), DSV4_OK);
}

static void ring_and_append(void **state) {
  (void)state;
  cache_fix f;
  cache_setup(&f, 64);
  kvh_seq *s = new_seq(&f);
  for (int i = 0; i < 40; i++) step(s, 1 + i % 3, 0); /* 79 positions in steps of 1..3 */
  step(s, 1, 0);
  assert_int_equal(s->s->n_pos, 80);
  for (int64_t p = 80 - 8; p < 80; p++) { /* the window view */
    assert_true(rec_is(s, DSV4I_KV_WINDOW, 0, p, (int)(p * 3) & 0xFF, 66));
    assert_ptr_equal(rec(s, DSV4I_KV_WINDOW, 0, p), rec(s, DSV4I_KV_WINDOW, 0, p + 11)); /* slot p mod 11 */
  }
  for (int64_t j = 0; j < 40; j++) assert_true(rec_is(s, DSV4I_KV_COMP, 1, j, (int)(2 * j + 1) & 0xFF, 36));
  for (int64_t j = 0; j < 80; j++) assert_true(rec_is(s, DSV4I_KV_COMP, 2, j, (int)(j * 7) & 0xFF, 36));
  int64_t used = dsv4i_kv_pool_n_pages(f.h.pool) - dsv4i_kv_pool_free_pages(f.h.pool);
  assert_int_equal(used, dsv4i_kv_seq_pages(s->s));
  assert_int_equal(used, dsv4i_kv_pages_for(&f.h.lay, DSV4I_KV_WINDOW, 80) +
                         dsv4i_kv_pages_for(&f.h.lay, DSV4I_KV_COMP, 80) +
                         dsv4i_kv_pages_for(&f.h.lay, DSV4I_KV_IDXK, 80) +
                         dsv4i_kv_pages_for(&f.h.lay, DSV4I_KV_CSTATE, 80));
  kvh_seq_free(s);
  assert_int_equal(dsv4i_kv_pool_free_pages(f.h.pool), 64);
  kvh_free(&f.h);
}

static void kv_full_changes_nothing(void **state) {
  (void)state;
  cache_fix f;
  cache_setup(&f, 40);
  kvh_seq *a = new_seq(&f), *b = new_seq(&f);
  step(a, 30, 1);
  const int64_t free0 = dsv4i_kv_pool_free_pages(f.h.pool);
  uint8_t snap[66];
  memcpy(snap, rec(a, DSV4I_KV_WINDOW, 0, 29), 66);
  /* b needs its rings plus 1000 positions of records: cannot fit */
  kvh_seq *both[2] = {a, b};
  int64_t to[2] = {31, 1000};
  assert_int_equal(kvh_reserve(both, to, 2), DSV4_KV_FULL);
  assert_int_equal(dsv4i_kv_pool_free_pages(f.h.pool), free0);
  assert_int_equal(a->s->n_resv, 30);
  assert_int_equal(b->s->n_resv, 0);
  assert_int_equal(dsv4i_kv_seq_pages(b->s), 0);
  assert_memory_equal(snap, rec(a, DSV4I_KV_WINDOW, 0, 29), 66);
  /* argument errors change nothing either */
  to[1] = 5;
  kvh_seq *twice[2] = {a, a};
  assert_int_equal(kvh_reserve(twice, to, 2), DSV4_ERR_INVALID_ARG);
  to[0] = 10; /* below a's length */
  assert_int_equal(kvh_reserve(both, to, 2), DSV4_ERR_INVALID_ARG);
  to[0] = 31, to[1] = 4097; /* past the layout's max_positions */
  assert_int_equal(kvh_reserve(both, to, 2), DSV4_ERR_INVALID_ARG);
  assert_int_equal(dsv4i_kv_pool_free_pages(f.h.pool), free0);
  kvh_seq_free(a);
  kvh_seq_free(b);
  kvh_free(&f.h);
}

static void truncate_and_fork(void **state) {
  (void)state;
  cache_fix f;
  cache_setup(&f, 128);
  kvh_seq *s = new_seq(&f);
  step(s, 21, 0);
  /* speculative step of 3 positions, all rejected but... rollback to 22 */
  step(s, 3, 9);
  assert_int_equal(kvh_truncate(s, 22), DSV4_OK);
  assert_int_equal(s->s->n_pos, 22);
  /* the window view of the next query (22: positions 15..21) is intact */
  for (int64_t p = 15; p < 21; p++)
    assert_true(rec_is(s, DSV4I_KV_WINDOW, 0, p, (int)(p * 3) & 0xFF, 66));
  assert_true(rec_is(s, DSV4I_KV_WINDOW, 0, 21, (int)(21 * 3 + 9) & 0xFF, 66));
  /* the ratio-2 pending group at 22 is empty; at 21 it would be position 20 */
  assert_int_equal(kvh_truncate(s, 21), DSV4_OK);
  assert_true(rec_is(s, DSV4I_KV_CSTATE, 1, 20, (int)(20 * 5) & 0xFF, 512));
  /* deeper than the spare: refused, nothing changes */
  assert_int_equal(kvh_truncate(s, 17), DSV4_ERR_INVALID_ARG);
  assert_int_equal(s->s->n_pos, 21);
  assert_int_equal(kvh_truncate(s, 22), DSV4_ERR_INVALID_ARG); /* not committed */
  /* a reservation alone (a step that failed before writing) is always undone */
  int64_t far = 60;
  assert_int_equal(kvh_reserve(&s, &far, 1), DSV4_OK);
  assert_int_equal(kvh_truncate(s, 21), DSV4_OK);
  assert_int_equal(s->s->n_resv, 21);
  /* ... but not once it wrote more than `spare` positions */
  assert_int_equal(kvh_reserve(&s, &far, 1), DSV4_OK);
  dsv4i_kv_seq_mark(s->s, 25);
  assert_int_equal(kvh_truncate(s, 21), DSV4_ERR_INVALID_ARG);
  dsv4i_kv_seq_mark(s->s, 21);
  assert_int_equal(kvh_commit(s, 21), DSV4_OK);
  s->s->n_dirty = 24; /* pretend only 3 were written (white-box: the bound is the mark) */
  assert_int_equal(kvh_truncate(s, 21), DSV4_OK);
  /* fork: compressed pages shared, rings copied */
  const int64_t free0 = dsv4i_kv_pool_free_pages(f.h.pool);
  dsv4_status st;
  kvh_seq *c = kvh_fork(s, &st);
  assert_int_equal(st, DSV4_OK);
  assert_int_equal(c->s->n_pos, 21);
  const int64_t rings = dsv4i_kv_pages_for(&f.h.lay, DSV4I_KV_WINDOW, 1) +
                        dsv4i_kv_pages_for(&f.h.lay, DSV4I_KV_CSTATE, 1);
  assert_int_equal(free0 - dsv4i_kv_pool_free_pages(f.h.pool), rings);
  assert_ptr_equal(rec(s, DSV4I_KV_COMP, 2, 3), rec(c, DSV4I_KV_COMP, 2, 3));
  assert_ptr_not_equal(rec(s, DSV4I_KV_WINDOW, 0, 3), rec(c, DSV4I_KV_WINDOW, 0, 3));
  /* the ring copies hold the parent's records (the storage applied the fork's copies) */
  for (int64_t p = 14; p < 21; p++) assert_memory_equal(rec(s, DSV4I_KV_WINDOW, 0, p), rec(c, DSV4I_KV_WINDOW, 0, p), 66);
  /* the child appends: its partly filled last page is copied first */
  step(c, 5, 50);
  assert_ptr_not_equal(rec(s, DSV4I_KV_COMP, 2, 20), rec(c, DSV4I_KV_COMP, 2, 20));
  assert_true(rec_is(s, DSV4I_KV_COMP, 2, 20, (int)(20 * 7) & 0xFF, 36));
  assert_true(rec_is(c, DSV4I_KV_COMP, 2, 20, (int)(20 * 7) & 0xFF, 36));
  assert_true(rec_is(c, DSV4I_KV_COMP, 2, 22, (int)(22 * 7 + 50) & 0xFF, 36));
  /* the parent continues independently */
  step(s, 2, 70);
  assert_true(rec_is(s, DSV4I_KV_COMP, 2, 22, (int)(22 * 7 + 70) & 0xFF, 36));
  assert_true(rec_is(c, DSV4I_KV_COMP, 2, 22, (int)(22 * 7 + 50) & 0xFF, 36));
  /* truncate to 0 resets */
  assert_int_equal(kvh_truncate(c, 0), DSV4_OK);
  assert_int_equal(c->s->n_pos, 0);
  kvh_seq_free(c);
  kvh_seq_free(s);
  assert_int_equal(dsv4i_kv_pool_free_pages(f.h.pool), 128);
  /* a fork that does not fit: KV_FULL, nothing taken */
  kvh_free(&f.h);
  cache_setup(&f, 20);
  s = new_seq(&f);
  step(s, 4, 0);
  const int64_t free1 = dsv4i_kv_pool_free_pages(f.h.pool);
  assert_null(kvh_fork(s, &st));
  assert_int_equal(st, DSV4_KV_FULL);
  assert_int_equal(dsv4i_kv_pool_free_pages(f.h.pool), free1);
  kvh_seq_free(s);
  kvh_free(&f.h);
}

/* ---- 3. layouts ----------------------------------------------------------- */

static void window_rows(void **state) {
  (void)state;
  enum { W = 16 };
  int64_t row[W];
  for (int64_t p = 0; p < 60; p++) {
    /* decode: a reference ring of W slots after writing p, read oldest first,
     * slots never written (slot > p) are -1 */
    assert_int_equal(dsv4i_attn_window_row(p, DSV4I_ATTN_DECODE, W, row), W);
    const int64_t oldest = p % W + 1;
    for (int i = 0; i < W; i++) {
      const int64_t slot = (oldest + i) % W;
      const int64_t want = slot > p ? -1 : p - ((p - slot) % W);
      assert_int_equal(row[i], want);
    }
    /* prefill of a chunk of s tokens from 0: width min(s, W) */
    for (int64_t s = p + 1; s <= p + 20; s += 7) {
      const int32_t width = s < W ? (int32_t)s : W;
      assert_int_equal(dsv4i_attn_window_row(p, width, W, row), width);
      const int64_t lo = p - W + 1 > 0 ? p - W + 1 : 0;
      for (int i = 0; i < width; i++) assert_int_equal(row[i], lo + i <= p ? lo + i : -1);
    }
  }
}

/* ---- 4. selection ---------------------------------------------------------- */

static int rank_before(const float *k, int a, int b) { return k[a] > k[b] || (k[a] == k[b] && a < b); }

static void topk_and_candidates(void **state) {
  (void)state;
  for (int trial = 0; trial < 200; trial++) {
    const int n = 1 + (int)(rnd() % 300);
    const int k = (int)(rnd() % (unsigned)(n + 1));
    float key[300];
    for (int i = 0; i < n; i++) { /* few distinct values: many ties, some -inf */
      const unsigned r = rnd() % 9;
      key[i] = r == 0 ? -INFINITY : (float)(r % 4) * 0.5f;
    }
    int32_t out[300];
    assert_int_equal(dsv4i_attn_topk(key, n, k, out), DSV4_OK);
    /* brute force: element i is selected iff fewer than k elements rank before it */
    int m = 0;
    for (int i = 0; i < n; i++) {
      int before = 0;
      for (int j = 0; j < n; j++) before += j != i && rank_before(key, j, i);
      if (before < k) {
        assert_true(m < k);
        assert_int_equal(out[m++], i); /* ascending */
      }
    }
    assert_int_equal(m, k);
  }
  /* candidate blocks: bs 4, 3 kept; the newest block is pinned */
  const float sc[14] = {1, 9, 0, 0, /**/ 2, 2, 2, 2, /**/ 9, 0, 0, 0, /**/ -5, -6};
  int32_t cb[5];
  assert_int_equal(dsv4i_attn_candidates(sc, 14, 4, 3, cb), DSV4_OK);
  assert_int_equal(cb[0], 0); /* max 9, lower index wins the tie with block 2 */
  assert_int_equal(cb[1], 2);
  assert_int_equal(cb[2], 3); /* pinned although its scores are the lowest */
  assert_int_equal(dsv4i_attn_candidates(sc, 6, 4, 5, cb), DSV4_OK);
  assert_int_equal(cb[0], 0);
  assert_int_equal(cb[1], 1);
  assert_int_equal(cb[2], -1); /* only 2 visible blocks */
  assert_int_equal(dsv4i_attn_candidates(sc, 0, 4, 2, cb), DSV4_OK);
  assert_int_equal(cb[0], -1);
  assert_int_equal(cb[1], -1);
}

/* ---- 5. sparse attention ------------------------------------------------------ */

/* the kernel transcribed independently: scores of a whole block first, then
 * the block's max, probabilities, sums (entry order) */
static void ref_sparse(int hd, const uint16_t *q, const float *const *rows, int n, float sink,
                       float scale, float *out) {
  float acc[128] = {0}, m = -1e30f, den = 0.0f;
  for (int b0 = 0; b0 < n; b0 += 64) {
    float s[64], bm = -INFINITY;
    int nb = n - b0 < 64 ? n - b0 : 64;
    for (int e = 0; e < nb; e++) {
      s[e] = -INFINITY;
      if (!rows[b0 + e]) continue;
      float d = 0.0f;
      for (int i = 0; i < hd; i++) d += dsv4i_bf16_to_f32(q[i]) * rows[b0 + e][i];
      s[e] = d * scale;
      if (s[e] > bm) bm = s[e];
    }
    float mn = fmaxf(m, bm), f = expf(m - mn), ps = 0.0f, pv[128] = {0};
    for (int e = 0; e < nb; e++) {
      float p = expf(s[e] - mn);
      ps += p;
      if (!rows[b0 + e]) continue;
      for (int i = 0; i < hd; i++) pv[i] += dsv4i_bf16_to_f32(bf(p)) * rows[b0 + e][i];
    }
    den = den * f + ps;
    for (int i = 0; i < hd; i++) acc[i] = acc[i] * f + pv[i];
    m = mn;
  }
  den += expf(sink - m);
  for (int i = 0; i < hd; i++) out[i] = dsv4i_bf16_to_f32(bf(acc[i] / den));
}

static void sparse_attention(void **state) {
  (void)state;
  enum { HD = 32, H = 2, N = 200 };
  static float kv[N][HD];
  uint16_t q[H * HD], o[H * HD];
  const float sink[H] = {0.5f, -2.0f};
  /* hand case: one valid entry of score 0 -> o = kv / (1 + e^sink) */
  for (int i = 0; i < H * HD; i++) q[i] = 0;
  for (int i = 0; i < HD; i++) kv[0][i] = (float)(i - 16) * 0.25f;
  const float *one[3] = {NULL, kv[0], NULL};
  dsv4i_attn_sparse(H, HD, q, one, 3, sink, 0.125f, o, 0, H);
  for (int h = 0; h < H; h++)
    for (int i = 0; i < HD; i++)
      assert_int_equal(o[h * HD + i], bf(kv[0][i] / (1.0f + expf(sink[h]))));
  /* all invalid: zeros */
  const float *none[70] = {NULL};
  for (int i = 0; i < H * HD; i++) o[i] = 0x3F80;
  dsv4i_attn_sparse(H, HD, q, none, 70, sink, 0.125f, o, 0, H);
  for (int i = 0; i < H * HD; i++) assert_int_equal(o[i] & 0x7FFF, 0);
  /* random rows, big scores, holes: bit-equal to the transcription, and
   * within bf16 noise of the exact softmax */
  for (int trial = 0; trial < 20; trial++) {
    for (int i = 0; i < H * HD; i++) q[i] = bf(frand() * 2.0f);
    for (int e = 0; e < N; e++)
      for (int i = 0; i < HD; i++) kv[e][i] = dsv4i_bf16_to_f32(bf(frand() * (e % 50 == 7 ? 6.0f : 1.0f)));
    const float *rows[N];
    int n = 64 + (int)(rnd() % (N - 64));
    for (int e = 0; e < n; e++) rows[e] = rnd() % 5 ? kv[e] : NULL;
    dsv4i_attn_sparse(H, HD, q, rows, n, sink, 0.2f, o, 0, H);
    for (int h = 0; h < H; h++) {
      float ref[HD];
      ref_sparse(HD, q + h * HD, rows, n, sink[h], 0.2f, ref);
      double ex[HD] = {0}, den = 0, mx = -1e300;
      for (int e = 0; e < n; e++) {
        if (!rows[e]) continue;
        double d = 0;
        for (int i = 0; i < HD; i++) d += (double)dsv4i_bf16_to_f32(q[h * HD + i]) * rows[e][i];
        mx = fmax(mx, d * 0.2);
      }
      for (int e = 0; e < n; e++) {
        if (!rows[e]) continue;
        double d = 0;
        for (int i = 0; i < HD; i++) d += (double)dsv4i_bf16_to_f32(q[h * HD + i]) * rows[e][i];
        double p = exp(d * 0.2 - mx);
        den += p;
        for (int i = 0; i < HD; i++) ex[i] += p * rows[e][i];
      }
      den += exp(sink[h] - mx);
      for (int i = 0; i < HD; i++) {
        assert_int_equal(o[h * HD + i], bf(ref[i]));
        assert_true(fabs(dsv4i_bf16_to_f32(o[h * HD + i]) - ex[i] / den) <= 0.02 * (1.0 + fabs(ex[i] / den)));
      }
    }
    /* holes at the end of the row are a no-op; holes that move entries across
     * a block boundary are not required to be */
    const float *pad[N + 64];
    memcpy(pad, rows, sizeof(rows[0]) * (size_t)n);
    for (int e = n; e < n + 64; e++) pad[e] = NULL;
    uint16_t o2[H * HD];
    dsv4i_attn_sparse(H, HD, q, pad, n + 64, sink, 0.2f, o2, 0, H);
    assert_memory_equal(o, o2, sizeof o);
  }
}

int tu_run_suite(void) {
  const struct CMUnitTest tests[] = {
    cmocka_unit_test(records_match_qdq),
    cmocka_unit_test(ring_and_append),
    cmocka_unit_test(kv_full_changes_nothing),
    cmocka_unit_test(truncate_and_fork),
    cmocka_unit_test(window_rows),
    cmocka_unit_test(topk_and_candidates),
    cmocka_unit_test(sparse_attention),
  };
  return cmocka_run_group_tests_name("cpu_attention", tests, NULL, NULL);
}
