/*
 * Attention kernels on the GPU (lib/gpu/attn.h) against the CPU backend's
 * ops, on random inputs in paged caches whose pages are shuffled:
 * - window records + QDQ rows, compressed-KV and index-key records, the
 *   compressor-state ring, index scores, top-k and candidate blocks:
 *   bit-exact (bytes, bf16 bits, indices);
 * - compressor pooling: within 1 bf16 ulp (expf's last bits differ from
 *   glibc's), nearly all bit-identical;
 * - DSpark Markov step: logits bit-exact, draft tokens equal (greedy and
 *   sampled: the race differs only in the softmax sum's order);
 * - both window record formats: the native MXFP8 record and fp8_ds_mla
 *   (model/kv_ds_mla.h: E4M3 NoPE with a UE8M0 per 64, bf16 RoPE): the
 *   writer bit-exact with the CPU codec, attention against the CPU oracle fed
 *   the same decoded records (the bound below), in both numerics modes;
 * - sparse attention with sink (backbone rows and DSpark blocks): |gpu − cpu| <= 2^-7 · max |kv| of the
 *   token's rows per element (fp32 summation order of the dots and of the
 *   P·V products, expf, both of which can flip a bf16 rounding of a
 *   probability or of the output; a wrong entry, block or scale is off by
 *   O(max |kv|)); the workspace slicing is bit-identical to one slice; in the
 *   default mode the one-launch kernel and the split pass in its order (+ the
 *   combine) give the same bits, so the launcher may pick either by token count.
 * The record writers also match the quant.* golden vectors of the
 * tiny-v41-a fixture (the reference's act_quant / fp4_act_quant bytes).
 * Real dimensions (64 heads x 512, window 128, top-512, 32 index heads)
 * and the tiny fixtures' (4 x 128, window 16, 16 index heads).
 *
 * Exit 77 (skip) when the build has no kernels or there is no usable GPU.
 * DSV4_GPU_TEST_QUICK=1 shrinks the largest cases (for compute-sanitizer).
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "test_util.h"

#if DSV4_HAVE_CUDA

#include "cpu/attention.h"
#include "cpu/kvcache.h"
#include "gpu/attn.h"
#include "gpu/cuda.h"
#include "gpu/dspark.h"
#include "io/safetensors.h"
#include "model/formats.h"
#include "model/kv_ds_mla.h"

/* ---- device, memory, random inputs -------------------------------------- */

static dsv4i_cuda_device g_dev;
static dsv4i_kreg g_kr;
static dsv4i_gpu_attn_kernels g_k;
static dsv4i_gpu_dspark_kernels g_dk;
static int g_quick;

#define MAX_ALLOCS 256
static dsv4i_cuptr g_allocs[MAX_ALLOCS];
static int g_n_allocs;

static dsv4i_cuptr dalloc(size_t bytes) {
  dsv4i_cuptr p = 0;
  assert_int_equal(g_dev.cu->MemAlloc(&p, bytes ? bytes : 16), DSV4I_CUDA_SUCCESS);
  assert_true(g_n_allocs < MAX_ALLOCS);
  g_allocs[g_n_allocs++] = p;
  return p;
}
static void dfree_all(void) {
  for (int i = 0; i < g_n_allocs; i++) g_dev.cu->MemFree(g_allocs[i]);
  g_n_allocs = 0;
}
static dsv4i_cuptr dup(const void *src, size_t bytes) {
  dsv4i_cuptr p = dalloc(bytes);
  if (bytes) assert_int_equal(g_dev.cu->MemcpyHtoD(p, src, bytes), DSV4I_CUDA_SUCCESS);
  return p;
}
static void down(void *dst, dsv4i_cuptr src, size_t bytes) {
  assert_int_equal(g_dev.cu->CtxSynchronize(), DSV4I_CUDA_SUCCESS);
  assert_int_equal(g_dev.cu->MemcpyDtoH(dst, src, bytes), DSV4I_CUDA_SUCCESS);
}
static void ok(dsv4_status s) {
  if (s != DSV4_OK) fprintf(stderr, "%s: %s\n", dsv4_status_string(s), dsv4i_error_message());
  assert_int_equal(s, DSV4_OK);
}

static uint64_t g_rng = 0x9E3779B97F4A7C15ull;
static uint32_t rnd(void) {
  g_rng ^= g_rng << 13;
  g_rng ^= g_rng >> 7;
  g_rng ^= g_rng << 17;
  return (uint32_t)(g_rng >> 16);
}
static float unif(void) { return (float)(rnd() & 0xFFFFFF) / 16777216.0f; } /* [0, 1) */
static float gauss(void) {
  float s = 0;
  for (int i = 0; i < 4; i++) s += unif();
  return (s - 2.0f) * 1.7320508f;
}
/* bf16 of a gaussian times `mag`, with per-32 blocks of varied magnitude
 * and the odd special block (zero, tiny: below the quantisers' floors) */
static void rand_bf16(uint16_t *x, size_t n, float mag) {
  for (size_t b0 = 0; b0 < n; b0 += 32) {
    const uint32_t kind = rnd() % 16;
    const float bm = kind == 0 ? 0.0f : kind == 1 ? 1e-6f : mag * ldexpf(1.0f, (int)(rnd() % 7) - 3);
    for (size_t i = b0; i < b0 + 32 && i < n; i++) x[i] = dsv4i_f32_to_bf16(gauss() * bm);
  }
}

/* ---- window record formats ------------------------------------------------ */

/* rope 0: the native MXFP8 record; rope > 0: fp8_ds_mla with `rope` bf16 RoPE dims
 * (model/kv_ds_mla.h), the CPU codecs the kernels must match */
static int32_t wf_bytes(int32_t hd, int32_t rope) {
  return rope ? dsv4i_ds_mla_rec_bytes(hd, rope) : dsv4i_kv_window_rec_bytes(hd);
}
static void wf_encode(const uint16_t *x, int32_t hd, int32_t rope, uint8_t *rec) {
  if (rope) dsv4i_ds_mla_encode(x, hd, rope, rec);
  else dsv4i_kv_window_encode(x, hd, rec);
}
static void wf_decode(const uint8_t *rec, int32_t hd, int32_t rope, float *y) {
  if (rope) dsv4i_ds_mla_decode(rec, hd, rope, y);
  else dsv4i_kv_window_decode(rec, hd, y);
}
static void wf_qdq(const uint16_t *x, int64_t rows, int32_t hd, int32_t rope, uint16_t *y) {
  if (rope) dsv4i_ds_mla_qdq(x, rows, hd, rope, y);
  else ok(dsv4i_act_quant_qdq(x, (size_t)rows * (size_t)hd, y));
}
static const char *wf_name(int32_t rope) { return rope ? "fp8_ds_mla" : "native"; }
/* the launchers' window format (g_k is shared by every case: reset to native after) */
static void wf_use(int32_t hd, int32_t rope) { g_k.win_nope = rope ? hd - rope : 0; }

/* ---- paged test caches --------------------------------------------------- */

typedef struct tcache {
  int32_t n_seq, ld, rpp, rec_bytes, ring;
  size_t page_bytes;
  int64_t n_pages;
  uint8_t *host;   /* [n_pages][page_bytes] mirror */
  int32_t *pages;  /* [n_seq][ld] shuffled page ids */
  dsv4i_cuptr d_pool, d_pages;
} tcache;

/* records [0, n_rec) per sequence (ring > 0: ring slots), small pages so
 * that records cross pages; pool filled with 0xA5 */
static void tc_init(tcache *c, int32_t n_seq, int64_t n_rec, int32_t rec_bytes, int32_t ring) {
  memset(c, 0, sizeof *c);
  c->n_seq = n_seq;
  c->rec_bytes = rec_bytes;
  c->ring = ring;
  c->page_bytes = (size_t)((3 * rec_bytes + 63) / 64 * 64);
  c->rpp = (int32_t)(c->page_bytes / (size_t)rec_bytes);
  const int64_t per = ring ? ring : n_rec;
  c->ld = (int32_t)((per + c->rpp - 1) / c->rpp);
  c->n_pages = (int64_t)n_seq * c->ld + 3;
  c->host = malloc((size_t)c->n_pages * c->page_bytes);
  c->pages = malloc((size_t)n_seq * (size_t)c->ld * sizeof *c->pages);
  assert_non_null(c->host);
  assert_non_null(c->pages);
  memset(c->host, 0xA5, (size_t)c->n_pages * c->page_bytes);
  int32_t *perm = malloc((size_t)c->n_pages * sizeof *perm);
  assert_non_null(perm);
  for (int64_t i = 0; i < c->n_pages; i++) perm[i] = (int32_t)i;
  for (int64_t i = c->n_pages - 1; i > 0; i--) {
    int64_t j = rnd() % (uint32_t)(i + 1);
    int32_t t = perm[i];
    perm[i] = perm[j];
    perm[j] = t;
  }
  for (int64_t i = 0; i < (int64_t)n_seq * c->ld; i++) c->pages[i] = perm[i];
  free(perm);
  c->d_pool = dalloc((size_t)c->n_pages * c->page_bytes);
  c->d_pages = dup(c->pages, (size_t)n_seq * (size_t)c->ld * sizeof *c->pages);
}
static uint8_t *tc_rec(const tcache *c, int32_t seq, int64_t idx) {
  const int64_t r = c->ring ? idx % c->ring : idx;
  return c->host + (size_t)c->pages[(int64_t)seq * c->ld + r / c->rpp] * c->page_bytes +
         (size_t)(r % c->rpp) * (size_t)c->rec_bytes;
}
static void tc_upload(const tcache *c) {
  assert_int_equal(g_dev.cu->MemcpyHtoD(c->d_pool, c->host, (size_t)c->n_pages * c->page_bytes),
                   DSV4I_CUDA_SUCCESS);
}
static uint8_t *tc_download(const tcache *c) {
  uint8_t *h = malloc((size_t)c->n_pages * c->page_bytes);
  assert_non_null(h);
  down(h, c->d_pool, (size_t)c->n_pages * c->page_bytes);
  return h;
}
static dsv4i_gpu_kvtab tc_tab(const tcache *c) {
  dsv4i_gpu_kvtab t = {c->d_pool, c->d_pages, c->page_bytes, c->ld, c->rpp, c->rec_bytes, c->ring};
  return t;
}
static void tc_free(tcache *c) {
  free(c->host);
  free(c->pages);
}

/* ---- tokens of a call ---------------------------------------------------- */

typedef struct trun {
  int32_t seq, first, count, layout; /* layout −1: prefill width min(first + count, window) */
} trun;

static int32_t make_tokens(const trun *runs, int n_runs, int32_t window, dsv4i_gpu_attn_tok *tok) {
  int32_t n = 0;
  for (int r = 0; r < n_runs; r++) {
    const int32_t row0 = n;
    for (int32_t i = 0; i < runs[r].count; i++, n++) {
      dsv4i_gpu_attn_tok *t = &tok[n];
      memset(t, 0, sizeof *t);
      t->seq = runs[r].seq;
      t->pos = runs[r].first + i;
      t->first = runs[r].first;
      t->row0 = row0;
      t->last = runs[r].first + runs[r].count - 1;
      const int32_t end = runs[r].first + runs[r].count;
      t->layout = runs[r].layout >= 0 ? runs[r].layout : (end < window ? end : window);
    }
  }
  return n;
}

/* ---- no device needed ---------------------------------------------------- */

static void kernel_table_matches_embedded_ptx(void **state) {
  (void)state;
  ok(dsv4i_cuda_check_tables());
}

/* ---- record writers: bit-exact ------------------------------------------- */

/* bf16 rows equal bit for bit, or both NaN (the CPU's QDQ of a non-finite
 * fp8_ds_mla block is a NaN product whose sign and payload are the compiler's);
 * else the first difference: token, dim, both values */
static void rows_equal(const char *what, const uint16_t *got, const uint16_t *want, int32_t n,
                       int32_t hd) {
  for (size_t i = 0; i < (size_t)n * hd; i++) {
    const int nan_g = (got[i] & 0x7FFF) > 0x7F80, nan_w = (want[i] & 0x7FFF) > 0x7F80;
    if (got[i] == want[i] || (nan_g && nan_w)) continue;
    fail_msg("%s: token %d dim %d: gpu 0x%04x (%g), cpu 0x%04x (%g)", what, (int)(i / hd),
             (int)(i % hd), got[i], (double)dsv4i_bf16_to_f32(got[i]), want[i],
             (double)dsv4i_bf16_to_f32(want[i]));
  }
}

/* pools equal byte for byte, else the first difference: page, record, byte in it */
static void pools_equal(const char *what, const tcache *c, const uint8_t *got) {
  const size_t total = (size_t)c->n_pages * c->page_bytes;
  for (size_t i = 0; i < total; i++)
    if (got[i] != c->host[i])
      fail_msg("%s: pool byte %zu (page %zu, record %zu, byte %zu of %d): gpu 0x%02x, cpu 0x%02x",
               what, i, i / c->page_bytes, i % c->page_bytes / (size_t)c->rec_bytes,
               i % c->page_bytes % (size_t)c->rec_bytes, (int)c->rec_bytes, got[i], c->host[i]);
}

static void window_store_case(int32_t hd, int32_t rope) {
  const int32_t window = 128, ring = 134, rb = wf_bytes(hd, rope);
  const trun runs[] = {{0, 300, 1, 0}, {1, 0, 200, -1}, {2, 50, 5, -1}, {3, 7, 1, 0}};
  dsv4i_gpu_attn_tok tok[256];
  const int32_t n = make_tokens(runs, 4, window, tok);
  uint16_t *kv = malloc((size_t)n * hd * 2), *kvw = malloc((size_t)n * hd * 2),
           *want = malloc((size_t)n * hd * 2);
  assert_non_null(kv);
  assert_non_null(kvw);
  assert_non_null(want);
  rand_bf16(kv, (size_t)n * hd, 2.0f);
  kv[5 * hd + 3] = 0x7F80;  /* +inf: a non-finite block */
  kv[9 * hd + 40] = 0xFFC1; /* NaN */
  kv[11 * hd + hd - 3] = 0xFF80; /* -inf in the last dims (fp8_ds_mla: a RoPE value, kept) */
  for (int32_t d = 64; d < 128 && d < hd; d++) kv[12 * hd + d] = 0x7F00; /* a block at 2^127 */
  tcache c;
  tc_init(&c, 4, 0, rb, ring);
  tc_upload(&c);
  wf_use(hd, rope);
  char what[96];
  snprintf(what, sizeof what, "window store (%s, head_dim %d, %d B records)", wf_name(rope),
           (int)hd, (int)rb);
  dsv4i_cuptr d_tok = dup(tok, (size_t)n * sizeof *tok), d_kv = dup(kv, (size_t)n * hd * 2);
  dsv4i_cuptr d_kvw = dalloc((size_t)n * hd * 2);
  /* QDQ rows only: the pool is untouched */
  ok(dsv4i_gpu_attn_window_store(&g_k, NULL, NULL, d_tok, n, hd, d_kv, d_kvw));
  uint8_t *got = tc_download(&c);
  pools_equal(what, &c, got);
  free(got);
  down(kvw, d_kvw, (size_t)n * hd * 2);
  wf_qdq(kv, n, hd, rope, want);
  rows_equal(what, kvw, want, n, hd);
  /* records: each ring slot ends with the newest position of its run */
  dsv4i_gpu_kvtab tab = tc_tab(&c);
  ok(dsv4i_gpu_attn_window_store(&g_k, NULL, &tab, d_tok, n, hd, d_kv, 0));
  for (int32_t t = 0; t < n; t++)
    if (tok[t].pos > tok[t].last - ring)
      wf_encode(kv + (size_t)t * hd, hd, rope, tc_rec(&c, tok[t].seq, tok[t].pos));
  got = tc_download(&c);
  pools_equal(what, &c, got);
  free(got);
  /* a table of the other format's record size is refused */
  tab.rec_bytes = wf_bytes(hd, rope ? 0 : 64);
  assert_int_equal(dsv4i_gpu_attn_window_store(&g_k, NULL, &tab, d_tok, n, hd, d_kv, 0),
                   DSV4_ERR_INVALID_ARG);
  printf("# %s: %d tokens, records and QDQ rows bit-exact\n", what, (int)n);
  wf_use(hd, 0);
  tc_free(&c);
  free(kv);
  free(kvw);
  free(want);
  dfree_all();
}

static void window_store_bit_exact(void **state) {
  (void)state;
  window_store_case(512, 0);
  window_store_case(512, 64);  /* the release dims: 584 B */
  window_store_case(128, 64);  /* the fixtures': 200 B */
  window_store_case(512, 96);  /* 416 NoPE dims: a last block of 32 */
}

static void comp_and_index_key_records_bit_exact(void **state) {
  (void)state;
  for (int ratio = 1; ratio <= 2; ratio++) {
    const int32_t hd = 512, ihd = 128;
    const trun runs[] = {{0, 301, 1, 0}, {1, 0, 37, -1}, {2, 50, 6, -1}, {3, 6, 1, 0}};
    dsv4i_gpu_attn_tok tok[64];
    const int32_t n = make_tokens(runs, 4, 128, tok);
    uint16_t *lat = malloc((size_t)n * hd * 2), *key = malloc((size_t)n * ihd * 2);
    assert_non_null(lat);
    assert_non_null(key);
    rand_bf16(lat, (size_t)n * hd, 4.0f);
    rand_bf16(key, (size_t)n * ihd, 1.0f);
    lat[3 * hd + 17] = 0xFF80; /* -inf */
    key[4 * ihd + 100] = 0x7FC0;
    tcache cc, ck;
    tc_init(&cc, 4, 400, dsv4i_kv_comp_rec_bytes(hd), 0);
    tc_init(&ck, 4, 400, dsv4i_kv_idxk_rec_bytes(ihd), 0);
    tc_upload(&cc);
    tc_upload(&ck);
    dsv4i_cuptr d_tok = dup(tok, (size_t)n * sizeof *tok);
    dsv4i_gpu_kvtab tc = tc_tab(&cc), tk = tc_tab(&ck);
    ok(dsv4i_gpu_attn_comp_store(&g_k, NULL, &tc, d_tok, n, hd, ratio, dup(lat, (size_t)n * hd * 2)));
    ok(dsv4i_gpu_attn_idxk_store(&g_k, NULL, &tk, d_tok, n, ihd, ratio, dup(key, (size_t)n * ihd * 2)));
    for (int32_t t = 0; t < n; t++) {
      if ((tok[t].pos + 1) % ratio) continue;
      const int64_t j = (tok[t].pos + 1) / ratio - 1;
      dsv4i_kv_comp_encode(lat + (size_t)t * hd, hd, tc_rec(&cc, tok[t].seq, j));
      dsv4i_kv_idxk_encode(key + (size_t)t * ihd, ihd, tc_rec(&ck, tok[t].seq, j));
    }
    uint8_t *got = tc_download(&cc);
    assert_memory_equal(got, cc.host, (size_t)cc.n_pages * cc.page_bytes);
    free(got);
    got = tc_download(&ck);
    assert_memory_equal(got, ck.host, (size_t)ck.n_pages * ck.page_bytes);
    free(got);
    tc_free(&cc);
    tc_free(&ck);
    free(lat);
    free(key);
    dfree_all();
  }
}


/* The reference's quantiser goldens (fixture tiny-v41-a, quant.*: 11 rows of
 * 512) through the record writers: window record = act_quant codes + UE8M0
 * scales with the QDQ rows, compressed record = fp4_act_quant(16, E4M3),
 * index-key record (here 512 wide) = fp4_act_quant(32, UE8M0). */
static const void *golden(const dsv4i_st_file *f, const char *name, int64_t cols) {
  const dsv4i_st_tensor *t = dsv4i_st_find(f, name);
  if (!t) fail_msg("golden tensor %s missing", name);
  assert_int_equal(t->ndim, 2);
  assert_int_equal(t->shape[0], 11);
  assert_int_equal(t->shape[1], cols);
  return dsv4i_st_data(f, t);
}

static void records_match_fixture_goldens(void **state) {
  (void)state;
  char *path = tu_join(tu_fixture_or_skip("tiny-v41-a"), "golden.safetensors");
  dsv4i_st_file f;
  if (dsv4i_st_open(path, &f) != DSV4_OK) fail_msg("%s: %s", path, dsv4i_error_message());
  free(path);
  const int32_t n = 11, hd = 512;
  const float *xf = golden(&f, "quant.x", hd);
  uint16_t x[11 * 512], qdq[11 * 512];
  for (int32_t i = 0; i < n * hd; i++) x[i] = (uint16_t)(dsv4i_f32_bits(xf[i]) >> 16);
  const trun run = {0, 0, n, -1};
  dsv4i_gpu_attn_tok tok[11];
  make_tokens(&run, 1, 128, tok);
  tcache cw, cc, ck;
  tc_init(&cw, 1, 0, dsv4i_kv_window_rec_bytes(hd), 134);
  tc_init(&cc, 1, n, dsv4i_kv_comp_rec_bytes(hd), 0);
  tc_init(&ck, 1, n, dsv4i_kv_idxk_rec_bytes(hd), 0);
  tc_upload(&cw);
  tc_upload(&cc);
  tc_upload(&ck);
  dsv4i_cuptr d_tok = dup(tok, sizeof tok), d_x = dup(x, sizeof x), d_qdq = dalloc(sizeof qdq);
  dsv4i_gpu_kvtab tw = tc_tab(&cw), tc = tc_tab(&cc), tk = tc_tab(&ck);
  ok(dsv4i_gpu_attn_window_store(&g_k, NULL, &tw, d_tok, n, hd, d_x, d_qdq));
  ok(dsv4i_gpu_attn_comp_store(&g_k, NULL, &tc, d_tok, n, hd, 1, d_x));
  ok(dsv4i_gpu_attn_idxk_store(&g_k, NULL, &tk, d_tok, n, hd, 1, d_x));
  down(qdq, d_qdq, sizeof qdq);
  uint8_t *gw = tc_download(&cw), *gc = tc_download(&cc), *gk = tc_download(&ck);
  const float *act_qdq = golden(&f, "quant.act.qdq", hd);
  const int32_t *q_bits = golden(&f, "quant.act.q_bits", hd);
  const int32_t *s_bits = golden(&f, "quant.act.s_bits", hd / 32);
  const int32_t *c_pk = golden(&f, "quant.fp4_e4m3.packed", hd / 2);
  const int32_t *c_s = golden(&f, "quant.fp4_e4m3.s_bits", hd / 16);
  const int32_t *k_pk = golden(&f, "quant.fp4_e8m0.packed", hd / 2);
  const int32_t *k_s = golden(&f, "quant.fp4_e8m0.s_bits", hd / 32);
  for (int32_t t = 0; t < n; t++) {
    /* records are read through the device copies, at the host mirror's offsets */
    const uint8_t *rw = gw + (tc_rec(&cw, 0, t) - cw.host), *rc = gc + (tc_rec(&cc, 0, t) - cc.host);
    const uint8_t *rk = gk + (tc_rec(&ck, 0, t) - ck.host);
    for (int32_t i = 0; i < hd; i++) {
      assert_int_equal((uint32_t)qdq[t * hd + i] << 16, dsv4i_f32_bits(act_qdq[t * hd + i]));
      assert_int_equal(rw[i], q_bits[t * hd + i]);
    }
    for (int32_t b = 0; b < hd / 32; b++) {
      assert_int_equal(rw[hd + b], s_bits[t * (hd / 32) + b]);
      assert_int_equal(rk[hd / 2 + b], k_s[t * (hd / 32) + b]);
    }
    for (int32_t i = 0; i < hd / 2; i++) {
      assert_int_equal(rc[i], c_pk[t * (hd / 2) + i]);
      assert_int_equal(rk[i], k_pk[t * (hd / 2) + i]);
    }
    for (int32_t b = 0; b < hd / 16; b++) assert_int_equal(rc[hd / 2 + b], c_s[t * (hd / 16) + b]);
  }
  free(gw);
  free(gc);
  free(gk);
  tc_free(&cw);
  tc_free(&cc);
  tc_free(&ck);
  dsv4i_st_close(&f);
  dfree_all();
}

/* ---- compressor ----------------------------------------------------------- */

static void compressor_ratio2_matches_cpu(void **state) {
  (void)state;
  const int32_t hd = 512, r = 2, ring = 2 + 6;
  /* seq 0 continues at an odd position (its pair's first member is in the
   * ring), seq 1 is a long prefill run (longer than the ring), seq 2 one
   * decode token completing a pair */
  const trun runs[] = {{0, 7, 6, -1}, {1, 0, 21, -1}, {2, 99, 1, 0}};
  dsv4i_gpu_attn_tok tok[64];
  const int32_t n = make_tokens(runs, 3, 128, tok);
  float *kk = malloc((size_t)n * hd * 4), *gg = malloc((size_t)n * hd * 4);
  assert_non_null(kk);
  assert_non_null(gg);
  for (size_t i = 0; i < (size_t)n * hd; i++) {
    kk[i] = gauss() * 3.0f;
    gg[i] = gauss() * 4.0f;
  }
  tcache cs;
  tc_init(&cs, 3, 0, 2 * hd * 4, ring);
  for (int32_t s = 0; s < 3; s++) /* committed state of positions before each run */
    for (int32_t q = runs[s].first - ring + 1; q < runs[s].first; q++) {
      if (q < 0) continue;
      float *rec = (float *)(void *)tc_rec(&cs, s, q);
      for (int32_t d = 0; d < 2 * hd; d++) rec[d] = gauss() * 3.0f;
    }
  tc_upload(&cs);
  dsv4i_cuptr d_tok = dup(tok, (size_t)n * sizeof *tok), d_lat = dalloc((size_t)n * hd * 2);
  uint16_t *lat = malloc((size_t)n * hd * 2), *want = malloc((size_t)hd * 2);
  assert_non_null(lat);
  assert_non_null(want);
  memset(lat, 0, (size_t)n * hd * 2);
  assert_int_equal(g_dev.cu->MemcpyHtoD(d_lat, lat, (size_t)n * hd * 2), DSV4I_CUDA_SUCCESS);
  dsv4i_gpu_kvtab tab = tc_tab(&cs);
  ok(dsv4i_gpu_attn_compress(&g_k, NULL, &tab, d_tok, n, hd, r, dup(kk, (size_t)n * hd * 4),
                             dup(gg, (size_t)n * hd * 4), d_lat));
  down(lat, d_lat, (size_t)n * hd * 2);
  int64_t same = 0, total = 0;
  for (int32_t t = 0; t < n; t++) {
    if ((tok[t].pos + 1) % r) continue;
    const float *km[2], *gm[2];
    for (int m = 0; m < r; m++) {
      const int32_t q = tok[t].pos - (r - 1) + m;
      if (q >= tok[t].first) {
        km[m] = kk + (size_t)(t - (tok[t].pos - q)) * hd;
        gm[m] = gg + (size_t)(t - (tok[t].pos - q)) * hd;
      } else {
        km[m] = (const float *)(const void *)tc_rec(&cs, tok[t].seq, q);
        gm[m] = km[m] + hd;
      }
    }
    dsv4i_attn_pool_group(r, hd, km, gm, want);
    for (int32_t d = 0; d < hd; d++) {
      const uint16_t a = lat[(size_t)t * hd + d], b = want[d];
      total++;
      same += a == b;
      if (a != b) assert_true(abs((int)(int16_t)a - (int)(int16_t)b) <= 1); /* 1 bf16 ulp */
    }
  }
  printf("# compressor: %lld of %lld latents bit-identical, the rest within 1 bf16 ulp\n",
         (long long)same, (long long)total);
  assert_true(total > 0 && same * 100 >= total * 95);
  /* the state ring: the newest positions of each run, exactly */
  for (int32_t t = 0; t < n; t++) {
    if (tok[t].pos <= tok[t].last - ring) continue;
    float *rec = (float *)(void *)tc_rec(&cs, tok[t].seq, tok[t].pos);
    memcpy(rec, kk + (size_t)t * hd, (size_t)hd * 4);
    memcpy(rec + hd, gg + (size_t)t * hd, (size_t)hd * 4);
  }
  uint8_t *got = tc_download(&cs);
  assert_memory_equal(got, cs.host, (size_t)cs.n_pages * cs.page_bytes);
  free(got);
  tc_free(&cs);
  free(kk);
  free(gg);
  free(lat);
  free(want);
  dfree_all();
}

/* ---- indexer: scores and selection, exact ---------------------------------- */

static void index_scores_case(int32_t ih, int32_t ratio, int with_cand) {
  const int32_t ihd = 128, n_keys = 700;
  const float wscale = 1.0f / sqrtf((float)ihd * (float)ih);
  const trun runs[] = {{0, 2 * 350 - 1, 1, 0}, {1, 0, 9, -1}, {2, 401, 3, -1}, {3, 1, 1, 0}};
  dsv4i_gpu_attn_tok tok[32];
  const int32_t n = make_tokens(runs, 4, 128, tok);
  tcache ck;
  tc_init(&ck, 4, n_keys, dsv4i_kv_idxk_rec_bytes(ihd), 0);
  uint16_t krow[128];
  for (int32_t s = 0; s < 4; s++)
    for (int64_t j = 0; j < n_keys; j++) {
      rand_bf16(krow, ihd, 1.0f);
      dsv4i_kv_idxk_encode(krow, ihd, tc_rec(&ck, s, j));
    }
  tc_upload(&ck);
  const size_t qn = (size_t)n * ih * ihd;
  uint16_t *q = malloc(qn * 2), *qq = malloc(qn * 2), *w = malloc((size_t)n * ih * 2);
  float *qf = malloc(qn * 4), *wf = malloc((size_t)n * ih * 4);
  const int64_t ld = 800;
  float *got = malloc((size_t)n * ld * 4), kf[128];
  assert_true(q && qq && w && qf && wf && got);
  rand_bf16(q, qn, 1.0f);
  for (int32_t i = 0; i < n * ih; i++) w[i] = dsv4i_f32_to_bf16(gauss() * 8.0f);
  ok(dsv4i_fp4_act_quant_ue8m0_qdq(q, qn, qq));
  for (size_t i = 0; i < qn; i++) qf[i] = dsv4i_bf16_to_f32(qq[i]);
  for (int32_t i = 0; i < n * ih; i++)
    wf[i] = dsv4i_bf16_to_f32(dsv4i_f32_to_bf16(dsv4i_bf16_to_f32(w[i]) * wscale));
  /* candidate rows: a random ascending subset of blocks, −1 padded */
  const int32_t cand_ld = 40, cand_bs = 8;
  int32_t *cand = malloc((size_t)n * cand_ld * 4);
  assert_non_null(cand);
  for (int32_t t = 0; t < n; t++) {
    int32_t k = 0;
    for (int32_t b = 0; b < 100 && k < cand_ld; b++)
      if (rnd() % 3 == 0) cand[t * cand_ld + k++] = b;
    for (; k < cand_ld; k++) cand[t * cand_ld + k] = -1;
  }
  for (size_t i = 0; i < (size_t)n * ld; i++) got[i] = 12345.0f;
  dsv4i_cuptr d_scores = dup(got, (size_t)n * ld * 4);
  dsv4i_gpu_index_args a = {
    .idxk = tc_tab(&ck), .tok = dup(tok, (size_t)n * sizeof *tok), .n = n, .n_heads = ih,
    .head_dim = ihd, .ratio = ratio, .wscale = wscale, .q = dup(q, qn * 2),
    .w = dup(w, (size_t)n * ih * 2), .cand = with_cand ? dup(cand, (size_t)n * cand_ld * 4) : 0,
    .cand_ld = cand_ld, .cand_bs = cand_bs, .scores = d_scores, .score_ld = ld};
  ok(dsv4i_gpu_attn_index_scores(&g_k, NULL, &a));
  down(got, d_scores, (size_t)n * ld * 4);
  int64_t checked = 0, positive = 0;
  for (int32_t t = 0; t < n; t++) {
    const int64_t vis = (tok[t].pos + 1) / ratio;
    assert_true(vis <= n_keys);
    int32_t j = 0;
    for (int64_t i = 0; i < ld; i++) {
      const float g = got[(size_t)t * ld + i];
      if (i >= vis) {
        assert_true(g == 12345.0f); /* nothing past the visible keys */
        continue;
      }
      float want = dsv4i_attn_index_score(ih, ihd, qf + (size_t)t * ih * ihd, wf + (size_t)t * ih,
                                          tc_rec(&ck, tok[t].seq, i), kf);
      if (with_cand) {
        const int32_t *cr = cand + (size_t)t * cand_ld;
        while (j < cand_ld && cr[j] >= 0 && cr[j] < i / cand_bs) j++;
        if (!(j < cand_ld && cr[j] == i / cand_bs)) want = -INFINITY;
      }
      if (dsv4i_f32_bits(g) != dsv4i_f32_bits(want))
        fail_msg("index score token %d key %lld: gpu %a cpu %a", (int)t, (long long)i,
                 (double)g, (double)want);
      checked++;
      positive += want > 0;
    }
  }
  assert_true(checked > 900 && positive > checked / 10); /* the relu does not hide everything */
  tc_free(&ck);
  free(q);
  free(qq);
  free(w);
  free(qf);
  free(wf);
  free(got);
  free(cand);
  dfree_all();
}

static void index_scores_bit_exact(void **state) {
  (void)state;
  index_scores_case(32, 2, 0);
  index_scores_case(32, 1, 1);
  index_scores_case(16, 2, 1);
}

/* one token per visible count; scores drawn to tie a lot */
static void topk_case(const int64_t *vis, int nv, int ratio, int32_t k_max, int mode, int32_t bs) {
  dsv4i_gpu_attn_tok tok[16];
  int64_t ld = 1;
  for (int i = 0; i < nv; i++) {
    memset(&tok[i], 0, sizeof tok[i]);
    tok[i].seq = i;
    const int64_t pos = vis[i] * ratio + ratio - 2; /* (pos + 1) / ratio == vis */
    tok[i].pos = (int32_t)(pos > 0 ? pos : 0);
    tok[i].first = tok[i].last = tok[i].pos;
    tok[i].row0 = i;
    ld = vis[i] > ld ? vis[i] : ld;
  }
  int64_t v_act[16];
  for (int i = 0; i < nv; i++) v_act[i] = (tok[i].pos + 1) / ratio;
  vis = v_act;
  float *sc = malloc((size_t)nv * ld * 4);
  assert_non_null(sc);
  for (int i = 0; i < nv; i++) {
    const int style = i % 3;
    for (int64_t j = 0; j < ld; j++) {
      float v;
      if (style == 0) v = (float)(rnd() % 5) - 2.0f;                         /* heavy ties */
      else if (style == 1) v = dsv4i_bf16_to_f32(dsv4i_f32_to_bf16(gauss())); /* bf16 values */
      else { /* −inf, −0 and +0 (equal keys), small integers */
        const uint32_t r = rnd() % 6;
        v = r == 0 ? -INFINITY : r == 1 ? -0.0f : r == 2 ? 0.0f : (float)(r - 3);
      }
      sc[(size_t)i * ld + j] = v;
    }
  }
  const int32_t out_ld = k_max + 3;
  int32_t *got = malloc((size_t)nv * out_ld * 4), *want = malloc((size_t)out_ld * 4);
  assert_true(got && want);
  dsv4i_cuptr d_out, d_tok = dup(tok, (size_t)nv * sizeof *tok);
  dsv4i_cuptr d_sc = dup(sc, (size_t)nv * ld * 4);
  /* mode 0 twice: one block per token (split 0), then with the workspace, several blocks per
   * token where the rows are long enough (split 1) */
  const size_t ws_bytes = mode == 0 ? dsv4i_gpu_attn_topk_ws_bytes(nv, ld, k_max) : 0;
  for (int split = 0; split < (ws_bytes ? 2 : 1); split++) {
  memset(got, 0x7B, (size_t)nv * out_ld * 4); /* a run that writes nothing fails */
  d_out = dup(got, (size_t)nv * out_ld * 4);
  if (mode == 0) {
    ok(dsv4i_gpu_attn_topk(&g_k, NULL, d_tok, nv, ratio, d_sc, ld, k_max, d_out, out_ld,
                           split ? dalloc(ws_bytes) : 0, split ? ws_bytes : 0));
  } else {
    const int64_t bld = (ld + bs - 1) / bs;
    ok(dsv4i_gpu_attn_candidates(&g_k, NULL, d_tok, nv, ratio, d_sc, ld, bs, k_max,
                                 dalloc((size_t)nv * bld * 4), bld, d_out, out_ld));
  }
  down(got, d_out, (size_t)nv * out_ld * 4);
  for (int i = 0; i < nv; i++) {
    for (int32_t j = 0; j < out_ld; j++) want[j] = -1;
    if (mode == 0) {
      const int32_t k = vis[i] < k_max ? (int32_t)vis[i] : k_max;
      ok(dsv4i_attn_topk(sc + (size_t)i * ld, vis[i], k, want));
    } else {
      ok(dsv4i_attn_candidates(sc + (size_t)i * ld, vis[i], bs, k_max, want));
    }
    for (int32_t j = 0; j < out_ld; j++)
      if (got[(size_t)i * out_ld + j] != want[j])
        fail_msg("%s%s vis %lld k %d: entry %d gpu %d cpu %d", mode ? "candidates" : "top-k",
                 split ? " (split over blocks)" : "", (long long)vis[i], (int)k_max, (int)j,
                 (int)got[(size_t)i * out_ld + j], (int)want[j]);
  }
  if (ws_bytes)
    printf("# top-k vis up to %lld, k %d: %s equal to the CPU\n", (long long)ld, (int)k_max,
           split ? "several blocks per token" : "one block per token");
  }
  free(sc);
  free(got);
  free(want);
  dfree_all();
}

static void topk_and_candidates_exact(void **state) {
  (void)state;
  const int64_t big = g_quick ? 6000 : 150000;
  const int64_t vis[] = {0, 1, 5, 511, 512, 513, 3001, big};
  topk_case(vis, 8, 2, 512, 0, 1);
  topk_case(vis, 8, 1, 6, 0, 1);
  topk_case(vis, 8, 1, 2048, 1, 8);
  topk_case(vis, 8, 1, 3, 1, 4);
}

/* ---- sparse attention ------------------------------------------------------ */


/* one token's GPU output against the oracle: |gpu − cpu| <= 2^-7 · max|kv|
 * over its rows; counts bit-identical outputs and the worst error */
typedef struct cmp_stats {
  int64_t same, total;
  double worst;
} cmp_stats;

static void compare_token(const char *what, int32_t t, const dsv4i_gpu_attn_tok *tk, int32_t H,
                          int32_t hd, const float *const *pr, int32_t n_idx, const uint16_t *got,
                          const uint16_t *want, cmp_stats *st) {
  float kvmax = 0;
  for (int32_t e = 0; e < n_idx; e++)
    for (int32_t d = 0; pr[e] && d < hd; d++) kvmax = fmaxf(kvmax, fabsf(pr[e][d]));
  const float tol = ldexpf(kvmax, -7);
  for (size_t i = 0; i < (size_t)H * hd; i++) {
    const float g = dsv4i_bf16_to_f32(got[i]), c = dsv4i_bf16_to_f32(want[i]);
    const double err = fabs((double)g - (double)c);
    st->total++;
    st->same += got[i] == want[i];
    if (kvmax > 0 && err / kvmax > st->worst) st->worst = err / kvmax;
    if (!(err <= tol))
      fail_msg("%s token %d (pos %d layout %d) head %d dim %d: gpu %g cpu %g, tol %g", what,
               (int)t, (int)tk->pos, (int)tk->layout, (int)(i / hd), (int)(i % hd), (double)g,
               (double)c, (double)tol);
  }
}

typedef struct sparse_dims {
  int32_t H, hd, window, sel_ld, ring;
  int32_t rope; /* window records: 0 native, > 0 fp8_ds_mla with these RoPE dims */
} sparse_dims;

/* Each sequence's tokens alone in a call (row0 0, its q, kvw, selection, out rows): the same
 * bits as in the whole call (batch invariance). runs[] in call order. */
static void alone_equals_batch(const char *what, dsv4i_gpu_sparse_args a,
                               const dsv4i_gpu_attn_tok *tok, int32_t n, const uint16_t *o_all) {
  const size_t qb = (size_t)a.n_heads * a.head_dim * 2;
  uint16_t *got = malloc((size_t)n * qb);
  assert_non_null(got);
  for (int32_t t0 = 0, t1; t0 < n; t0 = t1) {
    for (t1 = t0 + 1; t1 < n && tok[t1].seq == tok[t0].seq; t1++) {}
    dsv4i_gpu_attn_tok one[512];
    for (int32_t t = t0; t < t1; t++) {
      one[t - t0] = tok[t];
      one[t - t0].row0 = 0;
    }
    dsv4i_gpu_sparse_args b = a;
    b.n = t1 - t0;
    b.tok = dup(one, (size_t)b.n * sizeof *one);
    b.q = a.q + (dsv4i_cuptr)t0 * qb;
    b.kvw = a.kvw + (dsv4i_cuptr)tok[t0].row0 * a.head_dim * 2;
    b.sel = a.sel ? a.sel + (dsv4i_cuptr)t0 * a.sel_ld * 4 : 0;
    b.o = dalloc((size_t)b.n * qb);
    ok(dsv4i_gpu_attn_sparse(&g_k, NULL, &b));
    down(got, b.o, (size_t)b.n * qb);
    const uint16_t *want = o_all + (size_t)t0 * qb / 2;
    for (size_t i = 0; i < (size_t)b.n * qb / 2; i++)
      if (got[i] != want[i])
        fail_msg("%s: sequence %d alone (tokens %d..%d of %d) differs from the batch at token %d "
                 "head %d dim %d: 0x%04x alone, 0x%04x in the batch", what, (int)tok[t0].seq,
                 (int)t0, (int)t1 - 1, (int)n, (int)(t0 + (int32_t)(i / (qb / 2))),
                 (int)(i % (qb / 2) / a.head_dim), (int)(i % a.head_dim), got[i], want[i]);
  }
  free(got);
}

/* Default mode: the call run by the one-launch tiled kernel and by the split pass in its
 * order (+ combine) gives the same bits (the launcher picks by the call's token count:
 * one_launch_max); o_all is the default choice's output. Else the first difference. */
static void other_kernel_same_bits(const char *what, dsv4i_gpu_sparse_args a, int32_t n,
                                   const uint16_t *o_all) {
  const size_t qe = (size_t)n * a.n_heads * a.head_dim;
  uint16_t *got = malloc(qe * 2);
  assert_non_null(got);
  const int32_t keep = g_k.one_launch_max;
  for (int one = 0; one < 2; one++) {
    g_k.one_launch_max = one ? INT32_MAX : 0;
    a.o = dalloc(qe * 2);
    ok(dsv4i_gpu_attn_sparse(&g_k, NULL, &a));
    down(got, a.o, qe * 2);
    for (size_t i = 0; i < qe; i++)
      if (got[i] != o_all[i])
        fail_msg("%s: the %s gives token %d head %d dim %d = 0x%04x, the default choice (%s for "
                 "%d tokens) 0x%04x", what, one ? "one-launch kernel" : "split pass + combine",
                 (int)(i / ((size_t)a.n_heads * a.head_dim)),
                 (int)(i / a.head_dim % a.n_heads), (int)(i % a.head_dim), got[i],
                 n <= keep ? "one launch" : "split pass", (int)n, o_all[i]);
  }
  g_k.one_launch_max = keep;
  free(got);
}

static void sparse_case(const sparse_dims *D, int cpu_order) {
  const int32_t H = D->H, hd = D->hd, win = D->window, sel_ld = D->sel_ld, ring = D->ring;
  const int32_t rope = D->rope;
  g_k.cpu_order = cpu_order;
  wf_use(hd, rope);
  /* decode with a full ring, decode while the ring fills, a first prefill
   * chunk (window rows from the call), a later chunk (rows from the ring and
   * the call, layout = the window), a verify-like run of decode tokens */
  const int32_t long_pos = g_quick ? 3 * win + 5 : 8 * win + 77;
  const trun runs[] = {{0, long_pos, 1, 0},
                       {1, win / 3, 1, 0},
                       {2, 0, g_quick ? 5 : win / 4 + 3, -1},
                       {3, win + 20, g_quick ? 6 : win / 2, win},
                       {4, 2 * win + 1, 4, 0}};
  dsv4i_gpu_attn_tok tok[512];
  const int32_t n = make_tokens(runs, 5, win, tok);
  const int32_t n_seq = 5;
  const size_t qs = (size_t)H * hd;
  uint16_t *q = malloc((size_t)n * qs * 2), *kv = malloc((size_t)n * hd * 2);
  uint16_t *kvw = malloc((size_t)n * hd * 2), *o = malloc((size_t)n * qs * 2);
  uint16_t *o2 = malloc((size_t)n * qs * 2), *want = malloc(qs * 2);
  float sink[64];
  assert_true(q && kv && kvw && o && o2 && want);
  rand_bf16(q, (size_t)n * qs, 3.0f);
  rand_bf16(kv, (size_t)n * hd, 1.0f);
  wf_qdq(kv, n, hd, rope, kvw);
  for (int32_t h = 0; h < H; h++) sink[h] = gauss();
  /* ring records of every position before each run; compressed records */
  tcache cw, cc;
  tc_init(&cw, n_seq, 0, wf_bytes(hd, rope), ring);
  const int64_t n_comp = long_pos + 1;
  tc_init(&cc, n_seq, n_comp, dsv4i_kv_comp_rec_bytes(hd), 0);
  uint16_t *row = malloc((size_t)hd * 2);
  assert_non_null(row);
  for (int32_t s = 0; s < n_seq; s++) {
    for (int32_t p = runs[s].first - ring + 1; p < runs[s].first; p++) {
      if (p < 0) continue;
      rand_bf16(row, hd, 1.0f);
      wf_encode(row, hd, rope, tc_rec(&cw, s, p));
    }
    for (int64_t j = 0; j < n_comp; j++) {
      rand_bf16(row, hd, 1.0f);
      dsv4i_kv_comp_encode(row, hd, tc_rec(&cc, s, j));
    }
  }
  tc_upload(&cw);
  tc_upload(&cc);
  /* selections: ascending random subsets of the visible records (ratio 2) */
  int32_t *sel = malloc((size_t)n * (sel_ld ? sel_ld : 1) * 4);
  assert_non_null(sel);
  for (int32_t t = 0; t < n && sel_ld; t++) {
    const int64_t vis = (tok[t].pos + 1) / 2;
    int32_t k = 0;
    const uint32_t keep = 1 + rnd() % 4; /* density */
    for (int64_t j = 0; j < vis && k < sel_ld; j++)
      if (rnd() % 4 < keep) sel[t * sel_ld + k++] = (int32_t)j;
    if (t % 7 == 3) k = 0; /* a token without a selection */
    for (; k < sel_ld; k++) sel[t * sel_ld + k] = -1;
  }
  dsv4i_gpu_sparse_args a = {
    .win = tc_tab(&cw), .comp = tc_tab(&cc), .tok = dup(tok, (size_t)n * sizeof *tok), .n = n,
    .n_heads = H, .head_dim = hd, .window = win, .q = dup(q, (size_t)n * qs * 2),
    .kvw = dup(kvw, (size_t)n * hd * 2), .sel = sel_ld ? dup(sel, (size_t)n * sel_ld * 4) : 0,
    .sel_ld = sel_ld, .scale = 1.0f / sqrtf((float)hd), .sink = dup(sink, (size_t)H * 4),
    .o = dalloc((size_t)n * qs * 2)};
  a.ws_bytes = dsv4i_gpu_attn_sparse_ws(H, hd, win, sel_ld, n);
  a.ws = dalloc(a.ws_bytes);
  ok(dsv4i_gpu_attn_sparse(&g_k, NULL, &a));
  down(o, a.o, (size_t)n * qs * 2);
  char what[96];
  snprintf(what, sizeof what, "attention (%s, %s records, %d heads x %d, top-%d)",
           cpu_order ? "cpu order" : "tiled", wf_name(rope), (int)H, (int)hd, (int)sel_ld);
  if (!cpu_order) other_kernel_same_bits(what, a, n, o);
  /* three tokens per slice: the same bits */
  a.ws_bytes = dsv4i_gpu_attn_sparse_ws(H, hd, win, sel_ld, 3);
  a.o = dalloc((size_t)n * qs * 2);
  ok(dsv4i_gpu_attn_sparse(&g_k, NULL, &a));
  down(o2, a.o, (size_t)n * qs * 2);
  assert_memory_equal(o, o2, (size_t)n * qs * 2);
  alone_equals_batch(what, a, tok, n, o);
  /* the CPU oracle, rows built as lib/cpu/attn_sparse.c builds them */
  const int32_t width = win + sel_ld;
  float *rows = malloc((size_t)width * hd * 4);
  const float **pr = malloc((size_t)width * sizeof *pr);
  int64_t *wp = malloc((size_t)win * sizeof *wp);
  assert_true(rows && pr && wp);
  cmp_stats cs = {0, 0, 0};
  for (int32_t t = 0; t < n; t++) {
    const int32_t w = dsv4i_attn_window_row(tok[t].pos, tok[t].layout, win, wp);
    for (int32_t e = 0; e < w; e++) {
      pr[e] = NULL;
      if (wp[e] < 0) continue;
      float *r = rows + (size_t)e * hd;
      if (wp[e] >= tok[t].first) {
        const uint16_t *src = kvw + (size_t)(tok[t].row0 + (wp[e] - tok[t].first)) * hd;
        for (int32_t d = 0; d < hd; d++) r[d] = dsv4i_bf16_to_f32(src[d]);
      } else {
        wf_decode(tc_rec(&cw, tok[t].seq, wp[e]), hd, rope, r);
      }
      pr[e] = r;
    }
    int32_t k = 0;
    for (; k < sel_ld && sel[t * sel_ld + k] >= 0; k++) {
      float *r = rows + (size_t)(w + k) * hd;
      dsv4i_kv_comp_decode(tc_rec(&cc, tok[t].seq, sel[t * sel_ld + k]), hd, r);
      pr[w + k] = r;
    }
    dsv4i_attn_sparse(H, hd, q + (size_t)t * qs, pr, w + k, sink, a.scale, want, 0, H);
    compare_token(what, t, &tok[t], H, hd, pr, w + k, o + (size_t)t * qs, want, &cs);
  }
  printf("# sparse attention (%s, %s records) %d heads x %d, window %d, top-%d: %d tokens, "
         "%.2f%% of outputs bit-identical, worst |gpu - cpu| / max|kv| = %.3g; each sequence "
         "alone: the same bits%s\n", cpu_order ? "cpu order" : "tiled", wf_name(rope), (int)H,
         (int)hd, (int)win, (int)sel_ld, (int)n, 100.0 * (double)cs.same / (double)cs.total,
         cs.worst, cpu_order ? "" : "; one-launch kernel == split pass + combine");
  wf_use(hd, 0);
  tc_free(&cw);
  tc_free(&cc);
  free(q);
  free(kv);
  free(kvw);
  free(o);
  free(o2);
  free(want);
  free(row);
  free(sel);
  free(rows);
  free(pr);
  free(wp);
  dfree_all();
}


/* DSpark draft blocks (spec §6.1): ring slots in slot order, then the
 * block's own rows, bidirectional; rows built as lib/cpu/attn_dspark.c */
static void dspark_case(const sparse_dims *D, int cpu_order) {
  const int32_t H = D->H, hd = D->hd, win = D->window, ring = D->ring, B = 5, rope = D->rope;
  g_k.cpu_order = cpu_order;
  wf_use(hd, rope);
  const int32_t anchors[] = {3, 8 * win + 3, win, win - 1};
  const int32_t nb = 4, n = nb * B;
  dsv4i_gpu_attn_tok tok[32];
  for (int32_t b = 0; b < nb; b++)
    for (int32_t j = 0; j < B; j++) {
      dsv4i_gpu_attn_tok *t = &tok[b * B + j];
      memset(t, 0, sizeof *t);
      t->seq = b;
      t->pos = anchors[b] + 1 + j;
      t->first = anchors[b] + 1;
      t->row0 = b * B;
      t->last = anchors[b] + B;
      t->layout = -B;
    }
  const size_t qs = (size_t)H * hd;
  uint16_t *q = malloc((size_t)n * qs * 2), *kv = malloc((size_t)n * hd * 2);
  uint16_t *kvw = malloc((size_t)n * hd * 2), *o = malloc((size_t)n * qs * 2), *want = malloc(qs * 2);
  float sink[64], *rows = malloc((size_t)(win + B) * hd * 4);
  const float **pr = malloc((size_t)(win + B) * sizeof *pr);
  assert_true(q && kv && kvw && o && want && rows && pr);
  rand_bf16(q, (size_t)n * qs, 3.0f);
  rand_bf16(kv, (size_t)n * hd, 1.0f);
  wf_qdq(kv, n, hd, rope, kvw);
  for (int32_t h = 0; h < H; h++) sink[h] = gauss();
  tcache cw;
  tc_init(&cw, nb, 0, wf_bytes(hd, rope), ring);
  uint16_t row[512];
  for (int32_t b = 0; b < nb; b++)
    for (int32_t p = anchors[b] - ring + 1; p <= anchors[b]; p++) {
      if (p < 0) continue;
      rand_bf16(row, hd, 1.0f);
      wf_encode(row, hd, rope, tc_rec(&cw, b, p));
    }
  tc_upload(&cw);
  dsv4i_gpu_sparse_args a = {
    .win = tc_tab(&cw), .tok = dup(tok, (size_t)n * sizeof *tok), .n = n, .n_heads = H,
    .head_dim = hd, .window = win, .q = dup(q, (size_t)n * qs * 2),
    .kvw = dup(kvw, (size_t)n * hd * 2), .dspark_block = B, .scale = 1.0f / sqrtf((float)hd),
    .sink = dup(sink, (size_t)H * 4), .o = dalloc((size_t)n * qs * 2)};
  a.ws_bytes = dsv4i_gpu_attn_sparse_ws(H, hd, win, B, n);
  a.ws = dalloc(a.ws_bytes);
  ok(dsv4i_gpu_attn_sparse(&g_k, NULL, &a));
  down(o, a.o, (size_t)n * qs * 2);
  char what[96];
  snprintf(what, sizeof what, "dspark attention (%s, %s records, %d heads x %d)",
           cpu_order ? "cpu order" : "tiled", wf_name(rope), (int)H, (int)hd);
  if (!cpu_order) other_kernel_same_bits(what, a, n, o);
  alone_equals_batch(what, a, tok, n, o);
  cmp_stats cs = {0, 0, 0};
  for (int32_t b = 0; b < nb; b++) {
    const int32_t i = anchors[b], nr = i + 1 < win ? i + 1 : win;
    for (int32_t s = 0; s < nr; s++) {
      wf_decode(tc_rec(&cw, b, i - ((i - s) % win)), hd, rope, rows + (size_t)s * hd);
      pr[s] = rows + (size_t)s * hd;
    }
    for (int32_t j = 0; j < B; j++) {
      float *r = rows + (size_t)(nr + j) * hd;
      for (int32_t d = 0; d < hd; d++) r[d] = dsv4i_bf16_to_f32(kvw[(size_t)(b * B + j) * hd + d]);
      pr[nr + j] = r;
    }
    for (int32_t j = 0; j < B; j++) {
      const int32_t t = b * B + j;
      dsv4i_attn_sparse(H, hd, q + (size_t)t * qs, pr, nr + B, sink, a.scale, want, 0, H);
      compare_token(what, t, &tok[t], H, hd, pr, nr + B, o + (size_t)t * qs, want, &cs);
    }
  }
  printf("# dspark attention (%s, %s records) %d heads x %d, window %d: %d tokens, %.2f%% "
         "bit-identical, worst %.3g; each block alone: the same bits%s\n",
         cpu_order ? "cpu order" : "tiled", wf_name(rope), (int)H, (int)hd, (int)win, (int)n,
         100.0 * (double)cs.same / (double)cs.total, cs.worst,
         cpu_order ? "" : "; one-launch kernel == split pass + combine");
  wf_use(hd, 0);
  tc_free(&cw);
  free(q);
  free(kv);
  free(kvw);
  free(o);
  free(want);
  free(rows);
  free(pr);
  dfree_all();
}

static void sparse_attention_matches_cpu(void **state) {
  (void)state;
  const sparse_dims real = {64, 512, 128, 512, 134, 0};
  const sparse_dims tiny = {4, 128, 16, 112, 22, 0};
  const sparse_dims window_only = {4, 128, 16, 0, 22, 0};
  for (int cpu_order = 0; cpu_order < 2; cpu_order++) {
    sparse_case(&tiny, cpu_order);
    sparse_case(&window_only, cpu_order);
    sparse_case(&real, cpu_order);
    dspark_case(&tiny, cpu_order);
    dspark_case(&real, cpu_order);
  }
  g_k.cpu_order = 0;
}

/* The same cases over fp8_ds_mla window records (584 B at the release dims, 200 B at the
 * fixtures'): the oracle decodes them with the CPU codec; same bound, both modes. */
static void sparse_attention_ds_mla_matches_cpu(void **state) {
  (void)state;
  const sparse_dims real = {64, 512, 128, 512, 134, 64};
  const sparse_dims tiny = {4, 128, 16, 112, 22, 64};
  const sparse_dims window_only = {4, 128, 16, 0, 22, 64};
  for (int cpu_order = 0; cpu_order < 2; cpu_order++) {
    sparse_case(&tiny, cpu_order);
    sparse_case(&window_only, cpu_order);
    sparse_case(&real, cpu_order);
    dspark_case(&tiny, cpu_order);
    dspark_case(&real, cpu_order);
  }
  g_k.cpu_order = 0;
}


/* ---- DSpark Markov step ----------------------------------------------------- */

/* One Markov case: n sequences, their temperatures and valid ids; poison: row 0 of
 * sequence n-1 gets a NaN at v = 7 and row 1 of sequence n-2 is all -inf (no draft:
 * the kernel's negative token, the CPU's dsv4i_cpu_not_drawable); shape 1 (ties): every
 * sequence's row k has its best logit twice, so the lower index must win; shapes 2 and 3
 * (for a kernel that fuses the multiply-add where the products are provably exact, as
 * 42f51bb's did): every embedding row starts with two values of 2^60 (shape 2) or 2^30 with
 * head rows 3, 104, .. holding -1.9 * 2^97 and 3 * 2^97 (shape 3), so that the second
 * product overflows after a huge negative first one: the CPU's separate multiply and add
 * give +inf (no draft), an fmaf would stay finite. The logits must be bit-equal to the CPU
 * backend's loop, the drafts equal dsv4i_cpu_sample's. */
static void markov_case(int32_t n, int32_t V, int32_t R, const float *temp, const int32_t *n_valid,
                        int poison, int shape) {
  const int ties = shape == 1;
  const int32_t B = 5;
  const uint32_t zero = 0;
  uint16_t *embed = malloc((size_t)V * R * 2), *head = malloc((size_t)V * R * 2);
  float *base = malloc((size_t)n * B * V * 4), *got = malloc((size_t)n * B * V * 4);
  float *want = malloc((size_t)n * B * V * 4), *bias = malloc((size_t)V * 4);
  uint64_t *seed = malloc(8 * (size_t)n), *counter = malloc(8 * (size_t)n);
  int32_t *toks = malloc(4 * (size_t)n * (B + 1)), *gtoks = malloc(4 * (size_t)n * (B + 1));
  int32_t *again = malloc(4 * (size_t)n * (B + 1));
  assert_true(embed && head && base && got && want && bias && seed && counter && toks && gtoks &&
              again);
  rand_bf16(embed, (size_t)V * R, 1.0f);
  if (ties) memset(head, 0, (size_t)V * R * 2); /* bias exactly 0: the ties stay ties */
  else rand_bf16(head, (size_t)V * R, 0.1f);
  if (shape >= 2) {
    const float big = shape == 2 ? 0x1p60f : 0x1p30f, hs = shape == 2 ? 0x1p67f : 0x1p97f;
    for (int32_t v = 0; v < V; v++)
      embed[(size_t)v * R] = embed[(size_t)v * R + 1] = dsv4i_f32_to_bf16(big);
    for (int32_t v = 3; v < V; v += 101) {
      head[(size_t)v * R] = dsv4i_f32_to_bf16(-1.8984375f * hs);
      head[(size_t)v * R + 1] = dsv4i_f32_to_bf16(3.0f * hs);
    }
  }
  for (size_t i = 0; i < (size_t)n * B * V; i++) base[i] = gauss() * 2.0f;
  if (ties) /* each row's best value also sits at a higher index */
    for (size_t r = 0; r < (size_t)n * B; r++) {
      float *row = base + r * (size_t)V;
      int32_t at = (int32_t)(rnd() % (uint32_t)(V / 2));
      row[at] = 50.0f;
      row[at + 1 + (int32_t)(rnd() % (uint32_t)(V / 2 - 1))] = 50.0f;
    }
  if (poison) {
    base[((size_t)(n - 1) * B + 0) * V + 7] = NAN;
    for (int32_t v = 0; v < V; v++) base[((size_t)(n - 2) * B + 1) * V + v] = -INFINITY;
  }
  int32_t *nvd = malloc(4 * (size_t)n); /* the launcher takes dsv4i_cpu_valid_ids' result */
  assert_non_null(nvd);
  for (int32_t i = 0; i < n; i++) {
    nvd[i] = dsv4i_cpu_valid_ids(n_valid[i], V);
    seed[i] = ((uint64_t)rnd() << 32) | rnd();
    counter[i] = rnd() % 1000u;
    toks[i * (B + 1)] = (int32_t)(rnd() % (uint32_t)V);
  }
  dsv4i_gpu_markov_args a = {
    .n = n, .block = B, .vocab = V, .rank = R, .toks = dup(toks, 4 * (size_t)n * (B + 1)),
    .logits = dup(base, (size_t)n * B * V * 4), .embed = dup(embed, (size_t)V * R * 2),
    .head = dup(head, (size_t)V * R * 2), .temp = dup(temp, 4 * (size_t)n),
    .seed = dup(seed, 8 * (size_t)n), .counter = dup(counter, 8 * (size_t)n),
    .n_valid = dup(nvd, 4 * (size_t)n),
    .part = dalloc(dsv4i_gpu_dspark_markov_scratch(n, V, R)), .ticket = dup(&zero, 4)};
  for (int32_t k = 0; k < B; k++) ok(dsv4i_gpu_dspark_markov(&g_dk, NULL, &a, k));
  down(gtoks, a.toks, 4 * (size_t)n * (B + 1));
  down(got, a.logits, (size_t)n * B * V * 4);
  /* the CPU backend's Markov loop (lib/cpu/cpu_dspark.c); a row without a draft goes on
   * from embedding row 0, as the kernel does */
  dsv4i_wview w;
  ok(dsv4i_wview_init(&w, DSV4I_W_BF16, V, R, head, NULL));
  memcpy(want, base, (size_t)n * B * V * 4);
  int n_race = 0, n_none = 0;
  for (int32_t k = 0; k < B; k++)
    for (int32_t i = 0; i < n; i++) {
      const int32_t prev = toks[i * (B + 1) + k];
      ok(dsv4i_cpu_linear_f32(&w, 1, embed + (size_t)(prev < 0 ? 0 : prev) * R, R, bias, V));
      float *lg = want + ((size_t)i * B + k) * V;
      for (int32_t v = 0; v < V; v++) lg[v] += bias[v];
      const int32_t nv = dsv4i_cpu_valid_ids(n_valid[i], V);
      int32_t t = dsv4i_cpu_sample(lg, nv, temp[i], seed[i], counter[i] + (uint64_t)k);
      if (t < 0) t = (int32_t)(-1 - dsv4i_cpu_not_drawable(lg, nv)), n_none++;
      else if (temp[i] > 0.0f) n_race++;
      toks[i * (B + 1) + k + 1] = t;
    }
  /* bit-equal logits; a NaN (the poisoned rows) is a NaN on both, its payload is the
   * hardware's (x86 keeps the operand's, the GPU gives its canonical NaN) */
  for (size_t x = 0; x < (size_t)n * B * V; x++)
    if (!(isnan(got[x]) && isnan(want[x])) && memcmp(&got[x], &want[x], 4))
      fail_msg("markov logits: element %zu (sequence %d, draft %d, token %d): gpu %a cpu %a", x,
               (int)(x / ((size_t)B * V)), (int)(x / V % B), (int)(x % V), (double)got[x],
               (double)want[x]);
  for (int32_t i = 0; i < n; i++)
    for (int32_t k = 0; k <= B; k++)
      if (gtoks[i * (B + 1) + k] != toks[i * (B + 1) + k])
        fail_msg("markov: sequence %d (T %.1f, n_valid %d) draft %d: gpu %d cpu %d", (int)i,
                 (double)temp[i], (int)n_valid[i], (int)k, (int)gtoks[i * (B + 1) + k],
                 (int)toks[i * (B + 1) + k]);
  if (poison) assert_true(n_none >= 2);
  printf("    markov n %d V %d R %d%s%s: %d drafts equal the CPU's (%d raced, %d without a "
         "token)\n", (int)n, (int)V, (int)R, poison ? ", poisoned rows" : "",
         shape == 1 ? ", ties" : shape == 2 ? ", embedding past the fmaf range" :
         shape == 3 ? ", head past the fmaf range" : "",
         (int)(n * B), n_race, n_none);
  /* the ticket was left at zero: the same launches again give the same drafts */
  assert_int_equal(g_dev.cu->MemcpyHtoD(a.logits, base, (size_t)n * B * V * 4), DSV4I_CUDA_SUCCESS);
  for (int32_t k = 0; k < B; k++) ok(dsv4i_gpu_dspark_markov(&g_dk, NULL, &a, k));
  down(again, a.toks, 4 * (size_t)n * (B + 1));
  assert_memory_equal(again, gtoks, 4 * (size_t)n * (B + 1));
  assert_int_equal(dsv4i_gpu_dspark_markov(&g_dk, NULL, &a, B), DSV4_ERR_INVALID_ARG);
  free(embed);
  free(head);
  free(base);
  free(got);
  free(want);
  free(bias);
  free(seed);
  free(counter);
  free(toks);
  free(gtoks);
  free(again);
  free(nvd);
  dfree_all();
}

static void markov_steps_match_cpu(void **state) {
  (void)state;
  const float temp[4] = {0.0f, 0.7f, 1.0f, 1.6f};
  const int32_t nv[4] = {5003, 5003, 5003, 5003};
  markov_case(4, 5003, 256, temp, nv, 0, 0);
}

/* The fused step over more sequences than one pass of the kernel takes at rank 512 (8), a
 * rank that is not a multiple of its 32-wide pieces, restricted valid ids, rows without a
 * draft, tied maxima and products past the fmaf path's range. */
static void markov_fused_edge_cases(void **state) {
  (void)state;
  float temp[11];
  int32_t nv[11];
  for (int i = 0; i < 11; i++) {
    temp[i] = i % 3 == 0 ? 0.0f : 0.5f + 0.25f * (float)i;
    nv[i] = i % 4 == 1 ? 3001 : i % 4 == 2 ? 0 : 7777;
  }
  markov_case(11, 7777, 40, temp, nv, 1, 0);
  float greedy[11] = {0};
  markov_case(11, 7777, 40, greedy, nv, 0, 1);
  markov_case(9, 1000, 512, temp, nv, 0, 0);
  markov_case(6, 1500, 64, temp, nv, 0, 2);
  markov_case(6, 1500, 64, temp, nv, 0, 3);
}

/* More sequences than one pass of the kernel takes (16 at rank 256), and a full pass. */
static void markov_many_sequences(void **state) {
  (void)state;
  float temp[19];
  int32_t nv[19];
  for (int i = 0; i < 19; i++) {
    temp[i] = i % 3 == 0 ? 0.0f : 0.5f + 0.25f * (float)i;
    nv[i] = i % 4 == 1 ? 2001 : 3000;
  }
  markov_case(19, 3000, 256, temp, nv, 1, 0);
  markov_case(16, 3000, 256, temp, nv, 0, 0);
}

/* ---- bad arguments ---------------------------------------------------------- */

static void bad_arguments_are_refused(void **state) {
  (void)state;
  dsv4i_gpu_kvtab tab;
  memset(&tab, 0, sizeof tab);
  assert_int_equal(dsv4i_gpu_attn_window_store(&g_k, NULL, NULL, 0, 1, 100, 0, 0),
                   DSV4_ERR_INVALID_ARG);
  tab.ring = 8;
  assert_int_equal(dsv4i_gpu_attn_compress(&g_k, NULL, &tab, 0, 1, 512, 1, 0, 0, 0),
                   DSV4_ERR_INVALID_ARG);
  tab.ring = 1;
  assert_int_equal(dsv4i_gpu_attn_compress(&g_k, NULL, &tab, 0, 1, 512, 2, 0, 0, 0),
                   DSV4_ERR_INVALID_ARG);
  dsv4i_gpu_index_args ia = {.n = 1, .n_heads = 32, .head_dim = 64, .ratio = 1, .score_ld = 8};
  assert_int_equal(dsv4i_gpu_attn_index_scores(&g_k, NULL, &ia), DSV4_ERR_UNSUPPORTED);
  assert_int_equal(dsv4i_gpu_attn_topk(&g_k, NULL, 0, 1, 1, 0, 16, 512, 0, 100, 0, 0),
                   DSV4_ERR_INVALID_ARG);
  /* the split top-k with a workspace short by a byte */
  assert_int_equal(dsv4i_gpu_attn_topk(&g_k, NULL, 16, 1, 1, 16, 1 << 16, 512, 16, 512, 16,
                                       dsv4i_gpu_attn_topk_ws_bytes(1, 1 << 16, 512) - 1),
                   DSV4_ERR_INVALID_ARG);
  dsv4i_gpu_sparse_args sa = {.n = 1, .n_heads = 4, .head_dim = 96, .window = 16};
  assert_int_equal(dsv4i_gpu_attn_sparse(&g_k, NULL, &sa), DSV4_ERR_UNSUPPORTED);
  sa.head_dim = 128;
  sa.q = sa.o = sa.kvw = sa.sink = 16; /* never dereferenced: refused first */
  sa.ws_bytes = dsv4i_gpu_attn_sparse_ws(4, 128, 16, 0, 1) - 1;
  assert_int_equal(dsv4i_gpu_attn_sparse(&g_k, NULL, &sa), DSV4_ERR_INVALID_ARG);
  assert_non_null(strstr(dsv4i_error_message(), "workspace"));
  /* window formats: NoPE dims not a multiple of 32 below head_dim, a table of the other size */
  sa.ws_bytes = dsv4i_gpu_attn_sparse_ws(4, 128, 16, 0, 1);
  sa.win.pool = 64;
  sa.win.rec_bytes = dsv4i_kv_window_rec_bytes(128);
  g_k.win_nope = 48;
  assert_int_equal(dsv4i_gpu_attn_sparse(&g_k, NULL, &sa), DSV4_ERR_INVALID_ARG);
  assert_int_equal(dsv4i_gpu_attn_window_store(&g_k, NULL, NULL, 0, 1, 128, 0, 0),
                   DSV4_ERR_INVALID_ARG);
  g_k.win_nope = 128;
  assert_int_equal(dsv4i_gpu_attn_window_store(&g_k, NULL, NULL, 0, 1, 128, 0, 0),
                   DSV4_ERR_INVALID_ARG);
  g_k.win_nope = 64;
  assert_int_equal(dsv4i_gpu_attn_sparse(&g_k, NULL, &sa), DSV4_ERR_INVALID_ARG);
  assert_non_null(strstr(dsv4i_error_message(), "fp8_ds_mla"));
  g_k.win_nope = 0;
  sa.win.rec_bytes = dsv4i_ds_mla_rec_bytes(128, 64);
  assert_int_equal(dsv4i_gpu_attn_sparse(&g_k, NULL, &sa), DSV4_ERR_INVALID_ARG);
}

int tu_run_suite(void) {
  if (!dsv4i_cuda_built()) {
    printf("skip: this build has no CUDA kernels\n");
    return 77;
  }
  const char *qe = getenv("DSV4_GPU_TEST_QUICK");
  g_quick = qe && *qe && strcmp(qe, "0") != 0;
  const struct CMUnitTest host_tests[] = {
    cmocka_unit_test(kernel_table_matches_embedded_ptx),
  };
  int failed = cmocka_run_group_tests_name("gpu_attn_host", host_tests, NULL, NULL);
  if (failed) return failed;
  dsv4_status s = dsv4i_cuda_device_open(0, &g_dev);
  if (s == DSV4_ERR_NO_DEVICE || s == DSV4_ERR_UNSUPPORTED) {
    printf("skip: no usable CUDA device: %s: %s\n", dsv4_status_string(s), dsv4i_error_message());
    return 77;
  }
  if (s == DSV4_OK) s = dsv4i_kreg_load(&g_dev, &g_kr);
  if (s == DSV4_OK) s = dsv4i_gpu_attn_select(&g_kr, &g_k);
  if (s == DSV4_OK) s = dsv4i_gpu_dspark_select(&g_kr, &g_dk);
  if (s != DSV4_OK) {
    fprintf(stderr, "device setup failed: %s: %s\n", dsv4_status_string(s), dsv4i_error_message());
    return 1;
  }
  const struct CMUnitTest gpu_tests[] = {
    cmocka_unit_test(window_store_bit_exact),
    cmocka_unit_test(comp_and_index_key_records_bit_exact),
    cmocka_unit_test(records_match_fixture_goldens),
    cmocka_unit_test(compressor_ratio2_matches_cpu),
    cmocka_unit_test(index_scores_bit_exact),
    cmocka_unit_test(topk_and_candidates_exact),
    cmocka_unit_test(sparse_attention_matches_cpu),
    cmocka_unit_test(sparse_attention_ds_mla_matches_cpu),
    cmocka_unit_test(markov_steps_match_cpu),
    cmocka_unit_test(markov_fused_edge_cases),
    cmocka_unit_test(markov_many_sequences),
    cmocka_unit_test(bad_arguments_are_refused),
  };
  failed = cmocka_run_group_tests_name("gpu_attn", gpu_tests, NULL, NULL);
  dsv4i_kreg_unload(&g_kr);
  dsv4i_cuda_device_close(&g_dev);
  return failed;
}

#else /* no kernels in this build */

int tu_run_suite(void) {
  printf("skip: this build has no CUDA kernels\n");
  return 77;
}

#endif
