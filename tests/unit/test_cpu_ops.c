/*
 * CPU backend numerical core (lib/cpu/cpu_ops.h).
 *
 * 1. RoPE/YaRN tables against the golden rope.* of both fixtures
 *    (tolerance: 2^-23 absolute, i.e. 2 fp32 ulps at magnitude 0.5..1; the
 *    reference's own cos/sin are within 1 ulp of the correctly rounded ones).
 * 2. fp8 / fp4 / bf16 / fp32-upcast linears bit-exact against slow
 *    straightforward implementations written here (own format decoding,
 *    scalar fp32 loops in the documented order), over odd shapes, strides,
 *    more tokens than one chunk, 1 and 2 threads.
 * 3. Router: the lower-index tie rule, bias for selection only, torch's
 *    summation order of the top-k weights; MoE against a slow per-token
 *    reference on the fixture's real layer weights, and batch invariance.
 * 4. Sinkhorn: a hand-computed case and the doubly-stochastic property;
 *    hc_mixes order ((X·fn)·r) on a hand-computed case; hc_pre / hc_post
 *    against scalar formulas, hc_post in place.
 * 5. The end of the network, teacher-forced from the goldens: the head
 *    (hc_pre with the last FFN pre, norm, fp32 head) on b.block_out[last],
 *    b.block_pre[last] must give b.prefill_logits (both fixtures).
 * 6. Sampling: greedy ties, determinism, and the sampled frequencies.
 *
 * DSV4_BENCH=1 also times an fp8 5120x5120 linear (1 and 64 tokens).
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "test_util.h"
#include "cpu/cpu_impl.h" /* the AVX-512 tile decode */
#include "cpu/cpu_ops.h"
#include "cpu/engram.h" /* dsv4i_cpu_sum_torch, dsv4i_cpu_expf_vec */
#include "io/safetensors.h"
#include "model/config.h"
#include "model/formats.h"
#include "model/model.h"

/* ---- helpers -------------------------------------------------------------- */

static uint64_t rng_state = 0x9E3779B97F4A7C15ull;
static uint32_t rng32(void) { return tu_rng32(&rng_state); }
static float frand(void) { return (float)((rng32() >> 8) * 0x1p-24) * 2.0f - 1.0f; }

/* fp32 -> bf16 RNE (finite values) */
static uint16_t f2bf(float f) {
  uint32_t u = tu_bits_of_f32(f);
  return (uint16_t)((u + 0x7FFFu + ((u >> 16) & 1u)) >> 16);
}
/* format definitions, independent of lib/model/formats */
static float e4m3_val(uint8_t c) {
  int s = c >> 7, e = (c >> 3) & 15, m = c & 7;
  float v = e == 0 ? ldexpf((float)m, -9) : ldexpf((float)(8 + m), e - 10);
  return s ? -v : v;
}
static float e2m1_val(uint8_t c) {
  static const float mag[8] = {0, 0.5f, 1, 1.5f, 2, 3, 4, 6};
  return (c & 8) ? -mag[c & 7] : mag[c & 7];
}
static float e8m0_val(uint8_t b) { return ldexpf(1.0f, (int)b - 127); }

/* random bf16 with per-32-block magnitudes from 2^-12 to 2^6, some zeros */
static void rand_bf16(uint16_t *x, size_t n) {
  for (size_t i = 0; i < n; i += 32) {
    int e = (int)(rng32() % 19) - 12;
    for (size_t j = i; j < i + 32 && j < n; j++)
      x[j] = (rng32() % 17 == 0) ? 0 : f2bf(ldexpf(frand(), e));
  }
}
static uint8_t rand_e4m3(void) {
  uint8_t c;
  do c = (uint8_t)rng32(); while ((c & 0x7F) == 0x7F);
  return c;
}

static int fixture_path(char *buf, size_t cap, const char *fx, const char *file) {
  const char *root = tu_fixture_or_skip(fx);
  return snprintf(buf, cap, "%s/%s", root, file) < (int)cap;
}

typedef struct golden {
  dsv4i_st_file f;
} golden;

static void golden_open(golden *g, const char *fx) {
  char p[4096];
  assert_true(fixture_path(p, sizeof p, fx, "golden.safetensors"));
  assert_int_equal(dsv4i_st_open(p, &g->f), DSV4_OK);
}
static const float *golden_f32(golden *g, const char *name, size_t expect_n) {
  const dsv4i_st_tensor *t = dsv4i_st_find(&g->f, name);
  if (!t) fail_msg("golden tensor %s absent", name);
  assert_int_equal(t->dtype, DSV4_DTYPE_F32);
  assert_int_equal(t->nbytes, expect_n * 4);
  return (const float *)dsv4i_st_data(&g->f, t);
}

/* ---- 1. RoPE tables -------------------------------------------------------- */

static void check_rope_fixture(const char *fx) {
  char p[4096];
  dsv4i_config cfg;
  assert_true(fixture_path(p, sizeof p, fx, "config.json"));
  assert_int_equal(dsv4i_config_load(p, &cfg), DSV4_OK);
  golden g;
  golden_open(&g, fx);
  const int32_t nf = cfg.rope_head_dim / 2, npos = 256;
  const float *want[2] = {golden_f32(&g, "rope.ratio0", (size_t)npos * nf * 2),
                          golden_f32(&g, "rope.compressed", (size_t)npos * nf * 2)};
  int64_t pos[256];
  for (int i = 0; i < npos; i++) pos[i] = i;
  float *cs = malloc(sizeof(float) * npos * nf * 2);
  float freqs[128];
  for (int kind = 0; kind < 2; kind++) {
    if (kind == 0)
      assert_int_equal(dsv4i_rope_freqs(cfg.rope_head_dim, cfg.rope_theta, 0, 0, 0, 0, freqs),
                       DSV4_OK);
    else
      assert_int_equal(dsv4i_rope_freqs(cfg.rope_head_dim, cfg.compress_rope_theta,
                                        cfg.original_seq_len, cfg.rope_factor, cfg.beta_fast,
                                        cfg.beta_slow, freqs),
                       DSV4_OK);
    assert_int_equal(dsv4i_rope_cs(freqs, nf, npos, pos, cs), DSV4_OK);
    double maxd = 0;
    int ndiff = 0;
    for (int i = 0; i < npos * nf * 2; i++) {
      double d = fabs((double)cs[i] - (double)want[kind][i]);
      if (d > 0) ndiff++;
      if (d > maxd) maxd = d;
    }
    printf("    %s rope.%s: max |diff| %.3g (%d of %d differ)\n", fx,
           kind ? "compressed" : "ratio0", maxd, ndiff, npos * nf * 2);
    assert_true(maxd <= 0x1p-23);
  }
  free(cs);
  dsv4i_st_close(&g.f);
}

static void rope_tables_match_golden(void **state) {
  (void)state;
  check_rope_fixture("tiny-v41-a");
  check_rope_fixture("tiny-v41-e2e-a");
}

static void rope_apply_and_inverse(void **state) {
  (void)state;
  float freqs[32];
  assert_int_equal(dsv4i_rope_freqs(64, 160000.0, 65536, 16, 32, 1, freqs), DSV4_OK);
  const int nt = 5, nv = 3, dim = 80; /* rope on dims 16..79 of each vector */
  int64_t pos[5] = {0, 1, 17, 1000, 65535};
  float cs[5 * 32 * 2];
  assert_int_equal(dsv4i_rope_cs(freqs, 32, nt, pos, cs), DSV4_OK);
  uint16_t x[5 * 3 * 80], y[5 * 3 * 80];
  rand_bf16(x, sizeof x / 2);
  memcpy(y, x, sizeof x);
  assert_int_equal(dsv4i_cpu_rope(nt, nv, 32, y + 16, nv * dim, dim, cs, 0), DSV4_OK);
  for (int t = 0; t < nt; t++)
    for (int v = 0; v < nv; v++)
      for (int d = 0; d < dim; d++) {
        const int o = (t * nv + v) * dim + d;
        if (d < 16) { /* untouched */
          assert_int_equal(x[o], y[o]);
          continue;
        }
        const int i = (d - 16) / 2;
        const float a = tu_bf16_to_f32(x[o - (d % 2)]), b = tu_bf16_to_f32(x[o - (d % 2) + 1]);
        const float c = cs[(t * 32 + i) * 2], s = cs[(t * 32 + i) * 2 + 1];
        const float want = d % 2 == 0 ? a * c - b * s : a * s + b * c;
        assert_int_equal(y[o], f2bf(want));
      }
  /* inverse: conjugate, same rounding points */
  uint16_t z[5 * 3 * 80];
  memcpy(z, y, sizeof y);
  assert_int_equal(dsv4i_cpu_rope(nt, nv, 32, z + 16, nv * dim, dim, cs, 1), DSV4_OK);
  for (int t = 0; t < nt; t++)
    for (int v = 0; v < nv; v++)
      for (int d = 16; d < dim; d++) {
        const int o = (t * nv + v) * dim + d, i = (d - 16) / 2;
        const float a = tu_bf16_to_f32(y[o - (d % 2)]), b = tu_bf16_to_f32(y[o - (d % 2) + 1]);
        const float c = cs[(t * 32 + i) * 2], s = cs[(t * 32 + i) * 2 + 1];
        const float want = d % 2 == 0 ? a * c + b * s : b * c - a * s;
        assert_int_equal(z[o], f2bf(want));
        /* and it undoes the rotation up to bf16 rounding */
        const int e = o - (d % 2);
        const float mag = fabsf(tu_bf16_to_f32(x[e])) + fabsf(tu_bf16_to_f32(x[e + 1]));
        assert_true(fabsf(tu_bf16_to_f32(z[o]) - tu_bf16_to_f32(x[o])) <= 0x1p-7f * mag + 1e-30f);
      }
  /* position 0: the identity */
  for (int v = 0; v < nv; v++)
    for (int d = 16; d < dim; d++) assert_int_equal(y[v * dim + d], x[v * dim + d]);
  int64_t bad = -1;
  assert_int_equal(dsv4i_rope_cs(freqs, 32, 1, &bad, cs), DSV4_ERR_INVALID_ARG);
}

/* ---- 2. linears against slow references ------------------------------------ */

/* fp8 (fmt 3) / fp4 (fmt 4) weights: the reference's fp8_gemm / fp4_gemm. */
static void slow_linear_q(int fmt, int rows, int cols, const uint8_t *w, const uint8_t *ws,
                          int n, const uint16_t *x, int64_t ldx, uint16_t *y, int64_t ldy) {
  const int nkb = cols / 32;
  uint8_t *q = malloc((size_t)cols);
  uint8_t *s = malloc((size_t)nkb);
  for (int t = 0; t < n; t++) {
    assert_int_equal(dsv4i_act_quant(x + t * ldx, (size_t)cols, q, s), DSV4_OK);
    for (int o = 0; o < rows; o++) {
      float acc = 0.0f;
      for (int kb = 0; kb < nkb; kb++) {
        float p = 0.0f;
        for (int k = kb * 32; k < kb * 32 + 32; k++) {
          float wv;
          if (fmt == DSV4I_W_FP8)
            wv = e4m3_val(w[(size_t)o * cols + k]);
          else {
            uint8_t b = w[(size_t)o * (cols / 2) + k / 2];
            wv = e2m1_val(k % 2 ? b >> 4 : b & 15);
          }
          p = p + e4m3_val(q[k]) * wv;
        }
        float sw = fmt == DSV4I_W_FP8 ? e8m0_val(ws[(size_t)(o / 32) * ((cols + 31) / 32) + kb])
                                      : e8m0_val(ws[(size_t)o * nkb + kb]);
        acc = acc + p * e8m0_val(s[kb]) * sw;
      }
      y[t * ldy + o] = f2bf(acc);
    }
  }
  free(q);
  free(s);
}

static void check_linear_q(int fmt, int rows, int cols, int n, int64_t ldx, int64_t ldy) {
  const size_t wbytes = fmt == DSV4I_W_FP8 ? (size_t)rows * cols : (size_t)rows * cols / 2;
  const size_t sbytes = fmt == DSV4I_W_FP8 ? (size_t)((rows + 31) / 32) * ((cols + 31) / 32)
                                           : (size_t)rows * (cols / 32);
  uint8_t *w = malloc(wbytes), *ws = malloc(sbytes);
  for (size_t i = 0; i < wbytes; i++) w[i] = fmt == DSV4I_W_FP8 ? rand_e4m3() : (uint8_t)rng32();
  for (size_t i = 0; i < sbytes; i++) ws[i] = (uint8_t)(118 + rng32() % 16);
  uint16_t *x = malloc(sizeof(uint16_t) * (size_t)n * ldx);
  rand_bf16(x, (size_t)n * ldx);
  uint16_t *y = malloc(sizeof(uint16_t) * (size_t)n * ldy), *r = malloc(sizeof(uint16_t) * (size_t)n * ldy);
  memset(y, 0xAB, sizeof(uint16_t) * (size_t)n * ldy);
  memcpy(r, y, sizeof(uint16_t) * (size_t)n * ldy);
  slow_linear_q(fmt, rows, cols, w, ws, n, x, ldx, r, ldy);
  dsv4i_wview v;
  assert_int_equal(dsv4i_wview_init(&v, fmt, rows, cols, w, ws), DSV4_OK);
  for (int threads = 1; threads <= 2; threads++) {
    dsv4i_cpu_set_threads(threads);
    assert_int_equal(dsv4i_cpu_linear(&v, n, x, ldx, y, ldy), DSV4_OK);
    for (size_t i = 0; i < (size_t)n * ldy; i++)
      if (y[i] != r[i])
        fail_msg("fmt %d %dx%d n %d: y[%zu] = %#x, slow %#x (threads %d)", fmt, rows, cols, n, i,
                 y[i], r[i], threads);
  }
  dsv4i_cpu_set_threads(0);
  /* pre-quantised path gives the same */
  float *xq = malloc(sizeof(float) * (size_t)n * cols), *sx = malloc(sizeof(float) * (size_t)n * (cols / 32));
  assert_int_equal(dsv4i_cpu_act_quant(n, cols, x, ldx, xq, sx), DSV4_OK);
  memset(y, 0, sizeof(uint16_t) * (size_t)n * ldy);
  assert_int_equal(dsv4i_cpu_linear_q(&v, n, xq, sx, y, ldy), DSV4_OK);
  for (int t = 0; t < n; t++)
    for (int o = 0; o < rows; o++) assert_int_equal(y[t * ldy + o], r[t * ldy + o]);
  free(xq);
  free(sx);
  free(w);
  free(ws);
  free(x);
  free(y);
  free(r);
}

static void linear_fp8_bit_exact(void **state) {
  (void)state;
  check_linear_q(DSV4I_W_FP8, 64, 128, 3, 128, 64);
  check_linear_q(DSV4I_W_FP8, 72, 96, 5, 100, 80);   /* partial row block, strides */
  check_linear_q(DSV4I_W_FP8, 40, 64, 70, 64, 40);   /* more tokens than one chunk */
  check_linear_q(DSV4I_W_FP8, 1, 32, 1, 32, 1);
}

static void linear_fp4_bit_exact(void **state) {
  (void)state;
  check_linear_q(DSV4I_W_FP4, 64, 128, 4, 128, 64);
  check_linear_q(DSV4I_W_FP4, 33, 64, 67, 70, 35);
}

/* bf16 weight: fp32 sequential over k, rounded to bf16 (or kept in fp32). */
static void check_linear_float(int wfmt, int rows, int cols, int n) {
  const size_t nw = (size_t)rows * cols;
  uint16_t *wb = malloc(nw * 2);
  float *wf = malloc(nw * 4);
  for (size_t i = 0; i < nw; i++) {
    wb[i] = f2bf(frand() * 0.25f);
    wf[i] = frand();
  }
  uint16_t *x = malloc(sizeof(uint16_t) * (size_t)n * cols);
  rand_bf16(x, (size_t)n * cols);
  float *yf = malloc(sizeof(float) * (size_t)n * rows);
  uint16_t *yb = malloc(sizeof(uint16_t) * (size_t)n * rows);
  dsv4i_wview v;
  assert_int_equal(dsv4i_wview_init(&v, wfmt, rows, cols, wfmt == DSV4I_W_BF16 ? (void *)wb : (void *)wf,
                                    NULL),
                   DSV4_OK);
  assert_int_equal(dsv4i_cpu_linear_f32(&v, n, x, cols, yf, rows), DSV4_OK);
  if (wfmt == DSV4I_W_BF16) assert_int_equal(dsv4i_cpu_linear(&v, n, x, cols, yb, rows), DSV4_OK);
  else assert_int_equal(dsv4i_cpu_linear(&v, n, x, cols, yb, rows), DSV4_ERR_INVALID_ARG);
  for (int t = 0; t < n; t++)
    for (int o = 0; o < rows; o++) {
      float acc = 0.0f;
      for (int k = 0; k < cols; k++)
        acc = acc + tu_bf16_to_f32(x[t * cols + k]) *
                        (wfmt == DSV4I_W_BF16 ? tu_bf16_to_f32(wb[(size_t)o * cols + k]) : wf[(size_t)o * cols + k]);
      assert_int_equal(tu_bits_of_f32(yf[t * rows + o]), tu_bits_of_f32(acc));
      if (wfmt == DSV4I_W_BF16) assert_int_equal(yb[t * rows + o], f2bf(acc));
    }
  free(wb);
  free(wf);
  free(x);
  free(yf);
  free(yb);
}

static void linear_bf16_and_f32_bit_exact(void **state) {
  (void)state;
  check_linear_float(DSV4I_W_BF16, 37, 45, 3);
  check_linear_float(DSV4I_W_BF16, 64, 128, 66);
  check_linear_float(DSV4I_W_F32, 24, 70, 5);
}

/* The AVX-512 tile decode gives the format tables' values bit for bit, for
 * every code (NaN codes included), in the transposed layout. */
static void avx512_decode_matches_tables(void **state) {
  (void)state;
#if DSV4I_HAVE_AVX512_DECODE
  if (!dsv4i_cpu_avx512_ok()) skip();
  enum { LD = 40 };
  uint8_t b[32 * LD];
  uint16_t h[32 * LD];
  float wt[32][32];
  for (int rep = 0; rep < 4; rep++) {
    for (int i = 0; i < 32 * LD; i++) {
      b[i] = rep == 0 ? (uint8_t)i : (uint8_t)rng32(); /* rep 0: every byte value */
      h[i] = (uint16_t)rng32();
    }
    dsv4i_cpu_decode_tile_avx512(DSV4I_W_FP8, b, LD, wt);
    for (int o = 0; o < 32; o++)
      for (int k = 0; k < 32; k++)
        assert_int_equal(tu_bits_of_f32(wt[k][o]), tu_bits_of_f32(dsv4i_e4m3_table[b[o * LD + k]]));
    dsv4i_cpu_decode_tile_avx512(DSV4I_W_FP4, b, LD, wt);
    for (int o = 0; o < 32; o++)
      for (int k = 0; k < 32; k++) {
        const uint8_t byte = b[o * LD + k / 2];
        assert_int_equal(tu_bits_of_f32(wt[k][o]), tu_bits_of_f32(dsv4i_e2m1_table[k % 2 ? byte >> 4 : byte & 15]));
      }
    dsv4i_cpu_decode_tile_avx512(DSV4I_W_BF16, h, LD, wt);
    for (int o = 0; o < 32; o++)
      for (int k = 0; k < 32; k++) assert_int_equal(tu_bits_of_f32(wt[k][o]), (uint32_t)h[o * LD + k] << 16);
  }
#else
  skip();
#endif
}

/* A weight view by role (the model's weight table). */
static dsv4_status model_view(const struct dsv4_model *mo, int32_t role, int32_t layer,
                              int32_t expert, dsv4i_wview *v) {
  const dsv4i_weight *w;
  dsv4_status s = dsv4i_model_weight(mo, role, layer, expert, -1, -1, &w);
  return s ? s : dsv4i_wview_from_weight(w, v);
}

static void wview_weight_and_dequant(void **state) {
  (void)state;
  const char *dir = tu_fixture_or_skip("tiny-v41-a");
  struct dsv4_model *mo;
  assert_int_equal(dsv4i_model_open(dir, 0, NULL, &mo), DSV4_OK);
  dsv4i_wview v;
  assert_int_equal(model_view(mo, DSV4I_W_ATTN_WO_A, 0, -1, &v), DSV4_OK);
  assert_int_equal(v.fmt, DSV4I_W_FP8);
  uint16_t *d = malloc(sizeof(uint16_t) * (size_t)v.rows * v.cols);
  assert_int_equal(dsv4i_wview_dequant_bf16(&v, d), DSV4_OK);
  const uint8_t *q = v.data;
  for (int r = 0; r < v.rows; r++)
    for (int c = 0; c < v.cols; c++) {
      float want = e4m3_val(q[(size_t)r * v.cols + c]) *
                   e8m0_val(v.scale[(size_t)(r / 32) * ((v.cols + 31) / 32) + c / 32]);
      assert_int_equal(d[(size_t)r * v.cols + c], f2bf(want));
      assert_true(tu_bf16_to_f32(d[(size_t)r * v.cols + c]) == want); /* exact */
    }
  free(d);
  /* a row slice of an fp8 view must start on a scale block */
  dsv4i_wview s;
  assert_int_equal(dsv4i_wview_rows(&v, 32, 32, &s), DSV4_OK);
  assert_ptr_equal(s.scale, v.scale + (v.cols + 31) / 32);
  assert_int_equal(dsv4i_wview_rows(&v, 16, 32, &s), DSV4_ERR_INVALID_ARG);
  assert_int_equal(model_view(mo, DSV4I_W_EXPERT_W2, 0, 3, &v), DSV4_OK);
  assert_int_equal(v.fmt, DSV4I_W_FP4);
  assert_int_equal(v.rows, 128);
  assert_int_equal(v.cols, 64);
  assert_int_equal(model_view(mo, DSV4I_W_HEAD, -1, -1, &v), DSV4_OK);
  assert_int_equal(v.fmt, DSV4I_W_BF16);
  assert_int_equal(model_view(mo, DSV4I_W_HC_ATTN_FN, 0, -1, &v), DSV4_OK);
  assert_int_equal(v.fmt, DSV4I_W_F32);
  /* layer 0 has no compressor; an entry without its scale is refused */
  assert_int_equal(model_view(mo, DSV4I_W_COMP_WKV, 0, -1, &v), DSV4_ERR_NOT_FOUND);
  dsv4i_weight w = *dsv4i_weights_find(dsv4i_model_weights(mo), DSV4I_W_ATTN_WQ_A, 0, -1);
  w.scale = NULL;
  assert_int_equal(dsv4i_wview_from_weight(&w, &v), DSV4_ERR_NOT_FOUND);
  w.scale = dsv4i_weights_find(dsv4i_model_weights(mo), DSV4I_W_ATTN_WQ_A, 0, -1)->scale;
  w.scale_shape[1] += 1; /* a scale of the wrong shape */
  assert_int_equal(dsv4i_wview_from_weight(&w, &v), DSV4_ERR_WEIGHTS);
  dsv4i_model_close(mo);
}

/* ---- 3. router and MoE ------------------------------------------------------ */

static void topk_tie_rule(void **state) {
  (void)state;
  const float key[10] = {1, 3, 2, 3, 3, -1, 2, NAN, 5, 3};
  int32_t out[6];
  dsv4i_cpu_topk_desc(key, 10, 6, out);
  const int32_t want[6] = {8, 1, 3, 4, 9, 2};
  assert_memory_equal(out, want, sizeof want);
  const float all[5] = {0, 0, 0, 0, 0};
  dsv4i_cpu_topk_desc(all, 5, 3, out);
  assert_int_equal(out[0], 0);
  assert_int_equal(out[1], 1);
  assert_int_equal(out[2], 2);
  const float nans[4] = {NAN, NAN, 1, NAN};
  dsv4i_cpu_topk_desc(nans, 4, 2, out);
  assert_int_equal(out[0], 2);
  assert_int_equal(out[1], 0);
}

/* A router on a hand-made gate: x = e_0 (one-hot), so z[e] = gate[e][0]. */
static void router_ties_bias_and_weights(void **state) {
  (void)state;
  enum { E = 12, D = 32, K = 6 };
  uint16_t gw[E * D] = {0}, x[2 * D] = {0};
  const float z[E] = {0.5f, 1.0f, 1.0f, -3.0f, 25.0f, 1.0f, 2.0f, 0.25f, 1.0f, -0.5f, 1.0f, 0.75f};
  for (int e = 0; e < E; e++) gw[e * D] = f2bf(z[e]);
  x[0] = f2bf(1.0f);
  x[D] = f2bf(1.0f);
  float bias[E] = {0}, bias_vl[E] = {0};
  bias[7] = 10.0f; /* expert 7 selected by bias, weighted by its raw score */
  bias_vl[3] = 100.0f;
  dsv4i_moe m = {.n_experts = E, .top_k = K, .dim = D, .inter = 32, .route_scale = 1.5f,
                 .swiglu_limit = 10.0f, .norm_topk_prob = 1, .bias = bias, .bias_vl = bias_vl};
  dsv4i_wview dummy[E];
  m.w1 = m.w2 = m.w3 = dummy;
  assert_int_equal(dsv4i_wview_init(&m.gate, DSV4I_W_BF16, E, D, gw, NULL), DSV4_OK);
  int32_t idx[2 * K];
  float w[2 * K];
  const uint8_t vl[2] = {0, 1};
  assert_int_equal(dsv4i_cpu_router(&m, 2, x, D, vl, idx, w), DSV4_OK);
  /* scores s = sqrt(softplus(z)); 25 > 20 so softplus = z; ties among the
   * 1.0 scores (experts 1, 2, 5, 8, 10) go to the lower ids */
  const int32_t want0[K] = {7, 4, 6, 1, 2, 5};
  assert_memory_equal(idx, want0, sizeof want0);
  const int32_t want1[K] = {3, 4, 6, 1, 2, 5};
  assert_memory_equal(idx + K, want1, sizeof want1);
  float s[K];
  for (int j = 0; j < K; j++) {
    const float v = z[idx[j]];
    s[j] = sqrtf(v > 20.0f ? v : log1pf(expf(v)));
  }
  assert_int_equal(tu_bits_of_f32(s[1]), tu_bits_of_f32(5.0f));
  /* torch's row sum of 6: ((((s0 + s4) + s5) + s1) + s2) + s3 */
  const float den = (((((s[0] + s[4]) + s[5]) + s[1]) + s[2]) + s[3]) + 1e-20f;
  for (int j = 0; j < K; j++) assert_int_equal(tu_bits_of_f32(w[j]), tu_bits_of_f32((s[j] / den) * 1.5f));
  /* without VL the second row would equal the first */
  assert_int_equal(dsv4i_cpu_router(&m, 2, x, D, NULL, idx, w), DSV4_OK);
  assert_memory_equal(idx + K, want0, sizeof want0);
}

typedef struct moe_fixture {
  struct dsv4_model *mo;
  dsv4i_config cfg;
  dsv4i_moe m;
  dsv4i_wview w1[64], w2[64], w3[64];
} moe_fixture;

static void moe_fixture_open(moe_fixture *f, const char *fx, int32_t idx, int dspark) {
  assert_int_equal(dsv4i_model_open(tu_fixture_or_skip(fx), 0, NULL, &f->mo), DSV4_OK);
  f->cfg = *dsv4i_model_config(f->mo);
  const int32_t L = dspark ? f->cfg.n_layers + idx : idx;
  dsv4i_moe *m = &f->m;
  memset(m, 0, sizeof *m);
  m->n_experts = dspark ? f->cfg.dspark_n_routed_experts : f->cfg.n_routed_experts;
  assert_true(m->n_experts <= 64);
  m->top_k = dspark ? f->cfg.dspark_n_experts_per_tok : f->cfg.n_experts_per_tok;
  m->dim = f->cfg.dim;
  m->inter = f->cfg.moe_inter_dim;
  m->route_scale = f->cfg.route_scale;
  m->swiglu_limit = f->cfg.swiglu_limit;
  m->norm_topk_prob = 1;
  assert_int_equal(model_view(f->mo, DSV4I_W_GATE, L, -1, &m->gate), DSV4_OK);
  const dsv4i_weight *b;
  assert_int_equal(dsv4i_model_weight(f->mo, DSV4I_W_GATE_BIAS, L, -1, DSV4_DTYPE_F32,
                                      m->n_experts, &b), DSV4_OK);
  m->bias = b->data;
  for (int x = 0; x < m->n_experts; x++) {
    assert_int_equal(model_view(f->mo, DSV4I_W_EXPERT_W1, L, x, &f->w1[x]), DSV4_OK);
    assert_int_equal(model_view(f->mo, DSV4I_W_EXPERT_W2, L, x, &f->w2[x]), DSV4_OK);
    assert_int_equal(model_view(f->mo, DSV4I_W_EXPERT_W3, L, x, &f->w3[x]), DSV4_OK);
  }
  m->w1 = f->w1;
  m->w2 = f->w2;
  m->w3 = f->w3;
  m->has_shared = 1;
  assert_int_equal(model_view(f->mo, DSV4I_W_SHARED_W1, L, -1, &m->sw1), DSV4_OK);
  assert_int_equal(model_view(f->mo, DSV4I_W_SHARED_W2, L, -1, &m->sw2), DSV4_OK);
  assert_int_equal(model_view(f->mo, DSV4I_W_SHARED_W3, L, -1, &m->sw3), DSV4_OK);
}

/* One SwiGLU expert for one token, slowly (weight < 0: unweighted). */
static void slow_expert(const dsv4i_moe *m, const dsv4i_wview *w1, const dsv4i_wview *w2,
                        const dsv4i_wview *w3, const uint16_t *x, float wt, int weighted,
                        float *y) {
  const int D = m->dim, I = m->inter;
  uint16_t *g = malloc(2 * I), *u = malloc(2 * I), *a = malloc(2 * I), *o = malloc(2 * D);
  slow_linear_q(w1->fmt, I, D, w1->data, w1->scale, 1, x, D, g, I);
  slow_linear_q(w3->fmt, I, D, w3->data, w3->scale, 1, x, D, u, I);
  for (int i = 0; i < I; i++) {
    float gv = fminf(tu_bf16_to_f32(g[i]), m->swiglu_limit);
    float uv = fmaxf(fminf(tu_bf16_to_f32(u[i]), m->swiglu_limit), -m->swiglu_limit);
    float act = gv / (1.0f + dsv4i_cpu_expf_vec(-gv)) * uv;
    if (weighted) act = wt * act;
    a[i] = f2bf(act);
  }
  slow_linear_q(w2->fmt, D, I, w2->data, w2->scale, 1, a, I, o, D);
  for (int d = 0; d < D; d++) y[d] += tu_bf16_to_f32(o[d]);
  free(g);
  free(u);
  free(a);
  free(o);
}

static void check_moe_layer(const char *fx, int32_t which, int dspark) {
  moe_fixture *f = calloc(1, sizeof *f);
  moe_fixture_open(f, fx, which, dspark);
  const dsv4i_moe *m = &f->m;
  const int D = m->dim, K = m->top_k, N = 96;
  golden g;
  golden_open(&g, fx);
  const float *bo = golden_f32(&g, "b.block_out", (size_t)10 * 96 * 4 * D);
  /* realistic inputs: copy 0 of the stream after block 2, RMS-normalised */
  uint16_t *x = malloc(sizeof(uint16_t) * N * D), *xn = malloc(sizeof(uint16_t) * N * D);
  uint16_t *ones = malloc(sizeof(uint16_t) * D);
  for (int d = 0; d < D; d++) ones[d] = f2bf(1.0f);
  for (int t = 0; t < N; t++)
    for (int d = 0; d < D; d++) x[t * D + d] = f2bf(bo[((2 * 96 + t) * 4 + 0) * D + d]);
  assert_int_equal(dsv4i_cpu_rmsnorm(N, D, x, D, ones, f->cfg.norm_eps, xn, D), DSV4_OK);
  int32_t *idx = malloc(sizeof(int32_t) * N * K);
  float *w = malloc(sizeof(float) * N * K);
  assert_int_equal(dsv4i_cpu_router(m, N, xn, D, NULL, idx, w), DSV4_OK);
  uint16_t *y = malloc(sizeof(uint16_t) * N * D), *y1 = malloc(sizeof(uint16_t) * D);
  assert_int_equal(dsv4i_cpu_moe(m, N, xn, D, NULL, y, D), DSV4_OK);
  float *acc = malloc(sizeof(float) * D);
  int used[64] = {0};
  for (int t = 0; t < N; t++) {
    /* slow: routed experts in ascending id, shared last */
    memset(acc, 0, sizeof(float) * D);
    for (int e = 0; e < m->n_experts; e++)
      for (int j = 0; j < K; j++)
        if (idx[t * K + j] == e) {
          slow_expert(m, &m->w1[e], &m->w2[e], &m->w3[e], xn + t * D, w[t * K + j], 1, acc);
          used[e] = 1;
        }
    slow_expert(m, &m->sw1, &m->sw2, &m->sw3, xn + t * D, 0, 0, acc);
    for (int d = 0; d < D; d++)
      if (y[t * D + d] != f2bf(acc[d]))
        fail_msg("token %d dim %d: moe %#x, slow %#x", t, d, y[t * D + d], f2bf(acc[d]));
    /* alone in its batch: the same bits */
    assert_int_equal(dsv4i_cpu_moe(m, 1, xn + t * D, D, NULL, y1, D), DSV4_OK);
    assert_memory_equal(y1, y + t * D, sizeof(uint16_t) * D);
  }
  int n_used = 0;
  for (int e = 0; e < m->n_experts; e++) n_used += used[e];
  printf("    %s %s %d moe: %d tokens, top-%d, %d of %d experts used, bit-exact vs slow "
         "reference\n", fx, dspark ? "DSpark stage" : "layer", (int)which, N, K, n_used,
         m->n_experts);
  /* reversed batch order: the same per-token bits */
  uint16_t *xr = malloc(sizeof(uint16_t) * N * D), *yr = malloc(sizeof(uint16_t) * N * D);
  for (int t = 0; t < N; t++) memcpy(xr + t * D, xn + (N - 1 - t) * D, sizeof(uint16_t) * D);
  assert_int_equal(dsv4i_cpu_moe(m, N, xr, D, NULL, yr, D), DSV4_OK);
  for (int t = 0; t < N; t++) assert_memory_equal(yr + t * D, y + (N - 1 - t) * D, sizeof(uint16_t) * D);
  /* bad routing is refused */
  int32_t dup[16] = {1, 1, 2, 3, 4, 5};
  assert_int_equal(dsv4i_cpu_moe_experts(m, 1, xn, D, dup, w, y, D), DSV4_ERR_INVALID_ARG);
  free(xr);
  free(yr);
  free(acc);
  free(x);
  free(xn);
  free(ones);
  free(idx);
  free(w);
  free(y);
  free(y1);
  dsv4i_st_close(&g.f);
  dsv4i_model_close(f->mo);
  free(f);
}

static void moe_matches_slow_reference_and_is_batch_invariant(void **state) {
  (void)state;
  check_moe_layer("tiny-v41-a", 3, 0);
  check_moe_layer("tiny-v41-e2e-a", 8, 0);
  check_moe_layer("tiny-v41-a", 1, 1); /* DSpark: 8 experts, top-2 */
}

/* ---- 4. hyper-connections ---------------------------------------------------- */

static void sinkhorn_hand_case_and_properties(void **state) {
  (void)state;
  const int hc = 4, nm = 24;
  float mixes[2 * 24] = {0}, base[24] = {0}, scale[3] = {1, 1, 1};
  float pre[8], post[8], comb[32];
  /* token 0: all zero -> pre 0.5 + eps, post 1, comb uniform: the fixed point
   * of c -> c / (4c + eps) after the first softmax (0.25 + eps) */
  rng_state = 0x1234567887654321ull; /* independent of the other tests */
  for (int i = 0; i < nm; i++) mixes[24 + i] = frand();
  assert_int_equal(dsv4i_cpu_hc_split_sinkhorn(2, hc, mixes, scale, base, 20, 1e-6f, pre, post, comb),
                   DSV4_OK);
  for (int i = 0; i < hc; i++) {
    assert_int_equal(tu_bits_of_f32(pre[i]), tu_bits_of_f32(0.5f + 1e-6f));
    assert_int_equal(tu_bits_of_f32(post[i]), tu_bits_of_f32(1.0f));
  }
  for (int i = 0; i < 16; i++) assert_true(fabs(comb[i] - (1.0 - 1e-6) / 4) < 1e-7);
  for (int i = 1; i < 16; i++) assert_int_equal(tu_bits_of_f32(comb[i]), tu_bits_of_f32(comb[0]));
  /* token 1: random -> doubly stochastic up to the eps terms */
  const float *cb = comb + 16;
  for (int i = 0; i < hc; i++) {
    double rs = 0, cs = 0;
    for (int j = 0; j < hc; j++) {
      rs += cb[i * hc + j];
      cs += cb[j * hc + i];
      assert_true(cb[i * hc + j] > 0);
    }
    assert_true(fabs(cs - 1.0) < 1e-5); /* the last step normalised the columns */
    assert_true(fabs(rs - 1.0) < 1e-2); /* 20 rounds: rows close to 1 */
  }
  /* iters = 1: softmax + eps, then one column normalisation, by hand */
  float m2[24], b2[24], s2[3] = {0.5f, 2.0f, 1.5f};
  for (int i = 0; i < 24; i++) {
    m2[i] = frand();
    b2[i] = frand();
  }
  assert_int_equal(dsv4i_cpu_hc_split_sinkhorn(1, hc, m2, s2, b2, 1, 1e-6f, pre, post, comb), DSV4_OK);
  float C[4][4];
  for (int i = 0; i < 4; i++) {
    float row[4], mx = -INFINITY, s = 0;
    for (int j = 0; j < 4; j++) {
      row[j] = m2[8 + 4 * i + j] * s2[2] + b2[8 + 4 * i + j];
      mx = fmaxf(mx, row[j]);
    }
    for (int j = 0; j < 4; j++) s += (row[j] = dsv4i_cpu_expf_vec(row[j] - mx));
    for (int j = 0; j < 4; j++) C[i][j] = row[j] / s + 1e-6f;
  }
  for (int j = 0; j < 4; j++) {
    float s = ((C[0][j] + C[1][j]) + C[2][j]) + C[3][j] + 1e-6f;
    for (int i = 0; i < 4; i++) assert_int_equal(tu_bits_of_f32(comb[i * 4 + j]), tu_bits_of_f32(C[i][j] / s));
  }
  for (int i = 0; i < 4; i++) {
    assert_int_equal(tu_bits_of_f32(pre[i]), tu_bits_of_f32(1.0f / (1.0f + dsv4i_cpu_expf_vec(-(m2[i] * 0.5f + b2[i]))) + 1e-6f));
    assert_int_equal(tu_bits_of_f32(post[i]), tu_bits_of_f32(2.0f * (1.0f / (1.0f + dsv4i_cpu_expf_vec(-(m2[4 + i] * 2.0f + b2[4 + i]))))));
  }
}

static void hc_mixes_hand_case(void **state) {
  (void)state;
  enum { HC = 4, D = 32, N = HC * D, M = 24 };
  uint16_t h[2 * N];
  float fn[M * N], mixes[2 * M];
  /* token 0: every element 2 -> mean(X²) = 4, r = 1/2; fn row m = m/8
   * everywhere -> X·fn = 2·128·m/8 = 32m, mixes = 16m exactly */
  for (int i = 0; i < N; i++) h[i] = f2bf(2.0f);
  for (int m = 0; m < M; m++)
    for (int i = 0; i < N; i++) fn[m * N + i] = (float)m / 8.0f;
  /* token 1: only element 5 = 3 -> mean = 9/128, r = 1/sqrt(9/128) */
  for (int i = 0; i < N; i++) h[N + i] = 0;
  h[N + 5] = f2bf(3.0f);
  fn[7 * N + 5] = 0.1f;
  assert_int_equal(dsv4i_cpu_hc_mixes(2, HC, D, h, fn, 1e-20f, mixes), DSV4_OK);
  for (int m = 0; m < M; m++)
    if (m != 7) assert_int_equal(tu_bits_of_f32(mixes[m]), tu_bits_of_f32(16.0f * (float)m));
  /* row 7 also has the 0.1 of token 1: X·fn = 2·(127·7/8 + 0.1f), rounded once */
  assert_int_equal(tu_bits_of_f32(mixes[7]), tu_bits_of_f32((float)(2.0 * (127 * 0.875) + 2.0 * (double)0.1f) * 0.5f));
  const float r = 1.0f / sqrtf(9.0f / 128.0f + 1e-20f);
  assert_int_equal(tu_bits_of_f32(mixes[M + 7]), tu_bits_of_f32((3.0f * 0.1f) * r)); /* (X·fn)·r, not X·(fn·r) */
  assert_int_equal(tu_bits_of_f32(mixes[M + 3]), tu_bits_of_f32((3.0f * (3.0f / 8.0f)) * r));
}

static void hc_pre_post_and_rmsnorm(void **state) {
  (void)state;
  enum { N = 3, HC = 4, D = 100 };
  uint16_t h[N * HC * D], x[N * D], y[N * D], out[N * HC * D], inpl[N * HC * D], w[D];
  float pre[N * HC], post[N * HC], comb[N * HC * HC];
  rand_bf16(h, N * HC * D);
  rand_bf16(x, N * D);
  for (int i = 0; i < N * HC; i++) {
    pre[i] = frand();
    post[i] = 2 * frand();
  }
  for (int i = 0; i < N * HC * HC; i++) comb[i] = frand();
  for (int d = 0; d < D; d++) w[d] = f2bf(1.0f + frand());
  assert_int_equal(dsv4i_cpu_hc_pre(N, HC, D, h, pre, y), DSV4_OK);
  for (int t = 0; t < N; t++)
    for (int d = 0; d < D; d++) {
      float s = 0.0f;
      for (int c = 0; c < HC; c++) s = s + pre[t * HC + c] * tu_bf16_to_f32(h[(t * HC + c) * D + d]);
      assert_int_equal(y[t * D + d], f2bf(s));
    }
  assert_int_equal(dsv4i_cpu_hc_post(N, HC, D, x, h, post, comb, out), DSV4_OK);
  memcpy(inpl, h, sizeof h);
  assert_int_equal(dsv4i_cpu_hc_post(N, HC, D, x, inpl, post, comb, inpl), DSV4_OK);
  assert_memory_equal(inpl, out, sizeof out);
  for (int t = 0; t < N; t++)
    for (int j = 0; j < HC; j++)
      for (int d = 0; d < D; d++) {
        float s = 0.0f;
        for (int i = 0; i < HC; i++) s = s + comb[(t * HC + i) * HC + j] * tu_bf16_to_f32(h[(t * HC + i) * D + d]);
        float v = post[t * HC + j] * tu_bf16_to_f32(x[t * D + d]) + s;
        assert_int_equal(out[(t * HC + j) * D + d], f2bf(v));
      }
  /* rmsnorm: y = bf16(w · (x · 1/sqrt(mean(x²) + eps))) */
  assert_int_equal(dsv4i_cpu_rmsnorm(N, D, x, D, w, 1e-20f, y, D), DSV4_OK);
  for (int t = 0; t < N; t++) {
    float sq[D];
    for (int d = 0; d < D; d++) sq[d] = tu_bf16_to_f32(x[t * D + d]) * tu_bf16_to_f32(x[t * D + d]);
    const float r = 1.0f / sqrtf(dsv4i_cpu_sum_torch(sq, D) / (float)D + 1e-20f);
    for (int d = 0; d < D; d++) assert_int_equal(y[t * D + d], f2bf(tu_bf16_to_f32(w[d]) * (tu_bf16_to_f32(x[t * D + d]) * r)));
  }
  /* in place */
  memcpy(out, x, sizeof x);
  assert_int_equal(dsv4i_cpu_rmsnorm(N, D, (uint16_t *)out, D, w, 1e-20f, (uint16_t *)out, D), DSV4_OK);
  assert_memory_equal(out, y, sizeof y);
}

/* ---- 5. head, teacher-forced from the goldens -------------------------------- */

static void check_head_fixture(const char *fx) {
  char p[4096];
  dsv4i_config cfg;
  assert_true(fixture_path(p, sizeof p, fx, "config.json"));
  assert_int_equal(dsv4i_config_load(p, &cfg), DSV4_OK);
  struct dsv4_model *mo;
  assert_int_equal(dsv4i_model_open(tu_fixture_or_skip(fx), 0, NULL, &mo), DSV4_OK);
  golden g;
  golden_open(&g, fx);
  const int L = cfg.n_layers, S = 96, HC = cfg.hc_mult, D = cfg.dim, V = cfg.vocab_size;
  const float *bo = golden_f32(&g, "b.block_out", (size_t)L * S * HC * D);
  const float *bp = golden_f32(&g, "b.block_pre", (size_t)L * S * HC);
  const float *want = golden_f32(&g, "b.prefill_logits", (size_t)V);
  uint16_t *h = malloc(sizeof(uint16_t) * HC * D);
  const float *last = bo + ((size_t)(L - 1) * S + (S - 1)) * HC * D;
  for (int i = 0; i < HC * D; i++) {
    h[i] = f2bf(last[i]);
    assert_true(tu_bf16_to_f32(h[i]) == last[i]); /* the goldens are bf16 values */
  }
  const float *pre = bp + ((size_t)(L - 1) * S + (S - 1)) * HC;
  dsv4i_wview head;
  assert_int_equal(model_view(mo, DSV4I_W_HEAD, -1, -1, &head), DSV4_OK);
  const dsv4i_weight *ne;
  assert_int_equal(dsv4i_model_weight(mo, DSV4I_W_NORM, -1, -1, DSV4_DTYPE_BF16, D, &ne), DSV4_OK);
  float *logits = malloc(sizeof(float) * V);
  uint16_t *col = malloc(sizeof(uint16_t) * D);
  assert_int_equal(dsv4i_cpu_head(1, HC, D, h, pre, ne->data, cfg.norm_eps,
                                  &head, logits, col),
                   DSV4_OK);
  double maxabs = 0, maxl = 0;
  int nexact = 0;
  for (int v = 0; v < V; v++) {
    const double d = fabs((double)logits[v] - want[v]);
    maxabs = d > maxabs ? d : maxabs;
    maxl = fabs(want[v]) > maxl ? fabs(want[v]) : maxl;
    nexact += logits[v] == want[v];
  }
  printf("    %s head: max |logit diff| %.3g, relative to max |logit| %.3g, %d of %d bit-equal\n",
         fx, maxabs, maxabs / maxl, nexact, V);
  assert_true(maxabs <= 1e-4 * maxl);
  assert_int_equal(dsv4i_cpu_argmax(logits, V), dsv4i_cpu_argmax(want, V));
  free(h);
  free(logits);
  free(col);
  dsv4i_st_close(&g.f);
  dsv4i_model_close(mo);
}

static void head_matches_golden_prefill_logits(void **state) {
  (void)state;
  check_head_fixture("tiny-v41-a");
  check_head_fixture("tiny-v41-e2e-a");
}

/* ---- 6. sampling ------------------------------------------------------------- */

static void sampling(void **state) {
  (void)state;
  const float tie[5] = {1, 3, 2, 3, -INFINITY};
  assert_int_equal(dsv4i_cpu_argmax(tie, 5), 1);
  assert_int_equal(dsv4i_cpu_sample(tie, 5, 0.0f, 1, 2), 1);
  /* T -> 0 (floored at 1e-5) is the argmax with overwhelming probability */
  const float sep[4] = {0.0f, 1.0f, 0.5f, 0.99f};
  for (uint64_t c = 0; c < 50; c++) assert_int_equal(dsv4i_cpu_sample(sep, 4, 1e-9f, 7, c), 1);
  /* deterministic; frequencies follow softmax(l / T) */
  const float l[4] = {0.0f, logf(2.0f), logf(3.0f), logf(4.0f)}; /* p = 1,2,3,4 / 10 at T=1 */
  int cnt[4] = {0};
  const int n = 20000;
  for (int i = 0; i < n; i++) {
    int32_t tok = dsv4i_cpu_sample(l, 4, 1.0f, 12345, (uint64_t)i);
    assert_int_equal(tok, dsv4i_cpu_sample(l, 4, 1.0f, 12345, (uint64_t)i));
    cnt[tok]++;
  }
  for (int k = 0; k < 4; k++) {
    const double pk = (k + 1) / 10.0, sd = sqrt(n * pk * (1 - pk));
    assert_true(fabs(cnt[k] - n * pk) < 5 * sd);
  }
  /* different seeds give different streams */
  int same = 0;
  for (int i = 0; i < 100; i++)
    same += dsv4i_cpu_sample(l, 4, 1.0f, 1, (uint64_t)i) == dsv4i_cpu_sample(l, 4, 1.0f, 2, (uint64_t)i);
  assert_true(same < 60);
  const float q = dsv4i_sample_noise(3, 4, 5);
  assert_true(q > 0.0f && q < 38.0f);
  /* the noise is never 0 (u < 1 strictly): scan many draws */
  float qmin = INFINITY;
  for (int64_t i = 0; i < (1 << 22); i++) {
    const float qi = dsv4i_sample_noise(7, 1, i);
    qmin = qi < qmin ? qi : qmin;
  }
  assert_true(qmin > 0.0f);
}

/* ---- timing (DSV4_BENCH=1) ------------------------------------------------- */

static double now_s(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return ts.tv_sec + ts.tv_nsec * 1e-9;
}

static void bench_fp8_linear(void **state) {
  (void)state;
  if (!getenv("DSV4_BENCH")) skip();
  const int R = 5120, C = 5120;
  uint8_t *w = malloc((size_t)R * C), *ws = malloc((size_t)(R / 32) * (C / 32));
  for (size_t i = 0; i < (size_t)R * C; i++) w[i] = rand_e4m3();
  for (size_t i = 0; i < (size_t)(R / 32) * (C / 32); i++) ws[i] = (uint8_t)(120 + rng32() % 8);
  uint16_t *x = malloc(sizeof(uint16_t) * 64 * C), *y = malloc(sizeof(uint16_t) * 64 * R);
  rand_bf16(x, (size_t)64 * C);
  dsv4i_wview v;
  assert_int_equal(dsv4i_wview_init(&v, DSV4I_W_FP8, R, C, w, ws), DSV4_OK);
  const int ns[2] = {1, 64};
  for (int k = 0; k < 2; k++) {
    assert_int_equal(dsv4i_cpu_linear(&v, ns[k], x, C, y, R), DSV4_OK); /* warm */
    const int reps = ns[k] == 1 ? 20 : 5;
    double t0 = now_s();
    for (int r = 0; r < reps; r++) assert_int_equal(dsv4i_cpu_linear(&v, ns[k], x, C, y, R), DSV4_OK);
    double dt = (now_s() - t0) / reps;
    printf("    fp8 linear 5120x5120, %2d tokens, %d threads: %.2f ms (%.2f GMAC/s)\n", ns[k],
           (int)dsv4i_cpu_threads(), dt * 1e3, (double)ns[k] * R * C / dt * 1e-9);
  }
  /* fp4 expert w1 (2304 x 5120) and an fp32-upcast bf16 slice of a head (2560 x 5120) */
  dsv4i_wview v4, vh;
  assert_int_equal(dsv4i_wview_init(&v4, DSV4I_W_FP4, 2304, C, w, ws), DSV4_OK);
  uint16_t *wh = (uint16_t *)(void *)w; /* reuse the buffer: 2560 x 5120 normal bf16 values */
  for (size_t i = 0; i < (size_t)2560 * C; i++) wh[i] = f2bf(frand());
  assert_int_equal(dsv4i_wview_init(&vh, DSV4I_W_BF16, 2560, C, wh, NULL), DSV4_OK);
  float *yf = malloc(sizeof(float) * 64 * R);
  for (int k = 0; k < 2; k++) {
    const int reps = ns[k] == 1 ? 20 : 5;
    double t0 = now_s();
    for (int r = 0; r < reps; r++) assert_int_equal(dsv4i_cpu_linear(&v4, ns[k], x, C, y, R), DSV4_OK);
    double dt = (now_s() - t0) / reps;
    printf("    fp4 linear 2304x5120, %2d tokens: %.2f ms (%.2f GMAC/s)\n", ns[k], dt * 1e3,
           (double)ns[k] * 2304 * C / dt * 1e-9);
    t0 = now_s();
    for (int r = 0; r < reps; r++) assert_int_equal(dsv4i_cpu_linear_f32(&vh, ns[k], x, C, yf, R), DSV4_OK);
    dt = (now_s() - t0) / reps;
    printf("    bf16->fp32 linear 2560x5120, %2d tokens: %.2f ms (%.2f GMAC/s)\n", ns[k], dt * 1e3,
           (double)ns[k] * 2560 * C / dt * 1e-9);
  }
  free(yf);
  free(w);
  free(ws);
  free(x);
  free(y);
}

int tu_run_suite(void) {
  const struct CMUnitTest tests[] = {
    cmocka_unit_test(rope_tables_match_golden),
    cmocka_unit_test(rope_apply_and_inverse),
    cmocka_unit_test(linear_fp8_bit_exact),
    cmocka_unit_test(linear_fp4_bit_exact),
    cmocka_unit_test(linear_bf16_and_f32_bit_exact),
    cmocka_unit_test(avx512_decode_matches_tables),
    cmocka_unit_test(wview_weight_and_dequant),
    cmocka_unit_test(topk_tie_rule),
    cmocka_unit_test(router_ties_bias_and_weights),
    cmocka_unit_test(moe_matches_slow_reference_and_is_batch_invariant),
    cmocka_unit_test(sinkhorn_hand_case_and_properties),
    cmocka_unit_test(hc_mixes_hand_case),
    cmocka_unit_test(hc_pre_post_and_rmsnorm),
    cmocka_unit_test(head_matches_golden_prefill_logits),
    cmocka_unit_test(sampling),
    cmocka_unit_test(bench_fp8_linear),
  };
  return cmocka_run_group_tests_name("cpu_ops", tests, NULL, NULL);
}
