/*
 * Weight views and the linear layers of every checkpoint weight format
 * (spec §3.2, §3.3): block-scaled fp8 / fp4 GEMMs on act_quant'ed
 * activations, bf16 GEMM with fp32 accumulation, fp32-upcast GEMM.
 *
 * GEMM shape: the output is cut in tiles of 32 rows (one fp8 scale row
 * block), K in blocks of 32. Each tile of W (32 × 32) is decoded once per
 * token chunk through the format's lookup table into fp32, transposed
 * (wt[k][o]), so that the per-output dot products run sequentially in k
 * while the 32 outputs of the tile are computed side by side (vectorised
 * over o). Threads take whole output tiles: no cross-thread sums.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cpu/cpu_impl.h"
#include "model/formats.h"

#define TO DSV4I_TILE_O
#define TK DSV4I_TILE_K
#define CHUNK DSV4I_TOK_CHUNK
/* GEMMs smaller than this (multiply-adds) run on the calling thread: a
 * parallel region costs more than it saves, and far more on a busy machine. */
#define PAR_MIN_MACS (INT64_C(1) << 20)

static inline int64_t min64(int64_t a, int64_t b) { return a < b ? a : b; }

/* ---- threads --------------------------------------------------------- */

void dsv4i_cpu_set_threads(int32_t n) {
#ifdef _OPENMP
  if (n <= 0) n = omp_get_num_procs();
  omp_set_num_threads(n);
#else
  (void)n;
#endif
}

int32_t dsv4i_cpu_threads(void) {
#ifdef _OPENMP
  return omp_get_max_threads();
#else
  return 1;
#endif
}

/* ---- views ----------------------------------------------------------- */

int dsv4i_wview_valid(const dsv4i_wview *w) {
  if (!w || !w->data || w->rows <= 0 || w->cols <= 0) return 0;
  switch (w->fmt) {
  case DSV4I_W_F32:
  case DSV4I_W_BF16:
    return w->data_ld >= w->cols;
  case DSV4I_W_FP8:
    return w->scale != NULL && w->data_ld >= w->cols && w->scale_ld >= (w->cols + 31) / 32;
  case DSV4I_W_FP4:
    return w->scale != NULL && w->cols % 32 == 0 && w->data_ld >= w->cols / 2 &&
           w->scale_ld >= w->cols / 32;
  default:
    return 0;
  }
}

dsv4_status dsv4i_wview_init(dsv4i_wview *w, int32_t fmt, int32_t rows, int32_t cols,
                             const void *data, const uint8_t *scale) {
  if (!w) return dsv4i_error(DSV4_ERR_INVALID_ARG, "wview_init: NULL view");
  memset(w, 0, sizeof *w);
  dsv4i_wview v = {.fmt = fmt, .rows = rows, .cols = cols, .data = data};
  switch (fmt) {
  case DSV4I_W_F32:
  case DSV4I_W_BF16:
    v.data_ld = cols;
    break;
  case DSV4I_W_FP8:
    v.data_ld = cols;
    v.scale_ld = (cols + 31) / 32;
    v.scale = scale;
    break;
  case DSV4I_W_FP4:
    v.data_ld = cols / 2;
    v.scale_ld = cols / 32;
    v.scale = scale;
    break;
  default:
    return dsv4i_error(DSV4_ERR_INVALID_ARG, "wview_init: unknown format %d", (int)fmt);
  }
  if (!dsv4i_wview_valid(&v))
    return dsv4i_error(DSV4_ERR_INVALID_ARG,
                       "wview_init: invalid view (format %d, %d x %d, data %p, scale %p)",
                       (int)fmt, (int)rows, (int)cols, data, (const void *)scale);
  *w = v;
  return DSV4_OK;
}

dsv4_status dsv4i_wview_from_weight(const dsv4i_weight *w, dsv4i_wview *out) {
  if (!out) return dsv4i_error(DSV4_ERR_INVALID_ARG, "wview_from_weight: NULL view");
  memset(out, 0, sizeof *out);
  if (!w || !w->data) return dsv4i_error(DSV4_ERR_INVALID_ARG, "wview_from_weight: no data");
  const char *name = dsv4i_weight_name(w);
  if (w->ndim != 2 || w->shape[0] <= 0 || w->shape[1] <= 0 || w->shape[0] > INT32_MAX ||
      w->shape[1] > INT32_MAX / 2)
    return dsv4i_error(DSV4_ERR_WEIGHTS, "weight %s: shape [%lld, %lld] is not a 2-D matrix",
                       name, (long long)w->shape[0], (long long)w->shape[1]);
  int32_t rows = (int32_t)w->shape[0], cols = (int32_t)w->shape[1];
  int32_t fmt;
  switch (w->dtype) {
  case DSV4_DTYPE_F32:
    return dsv4i_wview_init(out, DSV4I_W_F32, rows, cols, w->data, NULL);
  case DSV4_DTYPE_BF16:
    return dsv4i_wview_init(out, DSV4I_W_BF16, rows, cols, w->data, NULL);
  case DSV4_DTYPE_F8_E4M3:
    fmt = DSV4I_W_FP8;
    break;
  case DSV4_DTYPE_I8:
    fmt = DSV4I_W_FP4;
    cols *= 2;
    break;
  default:
    return dsv4i_error(DSV4_ERR_WEIGHTS, "weight %s: dtype %s is not a weight format", name,
                       dsv4i_weight_dtype_name(w->dtype));
  }
  if (!w->scale) return dsv4i_error(DSV4_ERR_NOT_FOUND, "weight %s: its scale is absent", name);
  const int64_t want0 = fmt == DSV4I_W_FP8 ? (rows + 31) / 32 : rows, want1 = (cols + 31) / 32;
  if (fmt == DSV4I_W_FP4 && cols % 32 != 0)
    return dsv4i_error(DSV4_ERR_WEIGHTS, "weight %s: fp4 row of %d values is not whole 32-blocks",
                       name, (int)cols);
  if (w->scale_dtype != DSV4_DTYPE_F8_E8M0 || w->scale_shape[0] != want0 ||
      w->scale_shape[1] != want1)
    return dsv4i_error(DSV4_ERR_WEIGHTS, "weight %s [%lld, %lld]: scale is %s [%lld, %lld], want "
                       "F8_E8M0 [%lld, %lld]", name, (long long)w->shape[0], (long long)w->shape[1],
                       dsv4i_weight_dtype_name(w->scale_dtype), (long long)w->scale_shape[0],
                       (long long)w->scale_shape[1], (long long)want0, (long long)want1);
  return dsv4i_wview_init(out, fmt, rows, cols, w->data, w->scale);
}

dsv4_status dsv4i_wview_rows(const dsv4i_wview *w, int32_t row0, int32_t n_rows,
                             dsv4i_wview *out) {
  if (!out || !dsv4i_wview_valid(w) || row0 < 0 || n_rows <= 0 || row0 > w->rows - n_rows)
    return dsv4i_error(DSV4_ERR_INVALID_ARG, "wview_rows: rows [%d, +%d) outside the view",
                       (int)row0, (int)n_rows);
  dsv4i_wview v = *w;
  v.rows = n_rows;
  const uint8_t *b = (const uint8_t *)w->data;
  switch (w->fmt) {
  case DSV4I_W_F32:
    v.data = (const float *)w->data + (int64_t)row0 * w->data_ld;
    break;
  case DSV4I_W_BF16:
    v.data = (const uint16_t *)w->data + (int64_t)row0 * w->data_ld;
    break;
  case DSV4I_W_FP8:
    if (row0 % 32 != 0)
      return dsv4i_error(DSV4_ERR_INVALID_ARG,
                         "wview_rows: fp8 row slice must start on a 32-row scale block (%d)",
                         (int)row0);
    v.data = b + (int64_t)row0 * w->data_ld;
    v.scale = w->scale + (int64_t)(row0 / 32) * w->scale_ld;
    break;
  case DSV4I_W_FP4:
    v.data = b + (int64_t)row0 * w->data_ld;
    v.scale = w->scale + (int64_t)row0 * w->scale_ld;
    break;
  }
  *out = v;
  return DSV4_OK;
}

dsv4_status dsv4i_wview_cols(const dsv4i_wview *w, int32_t col0, int32_t n_cols,
                             dsv4i_wview *out) {
  if (!out || !dsv4i_wview_valid(w) || col0 < 0 || n_cols <= 0 || col0 > w->cols - n_cols)
    return dsv4i_error(DSV4_ERR_INVALID_ARG, "wview_cols: columns [%d, +%d) outside the view",
                       (int)col0, (int)n_cols);
  dsv4i_wview v = *w;
  v.cols = n_cols;
  const uint8_t *b = (const uint8_t *)w->data;
  switch (w->fmt) {
  case DSV4I_W_F32:
    v.data = (const float *)w->data + col0;
    break;
  case DSV4I_W_BF16:
    v.data = (const uint16_t *)w->data + col0;
    break;
  case DSV4I_W_FP8:
  case DSV4I_W_FP4: /* the scale blocks must stay whole: 32-column steps */
    if (col0 % 32 || n_cols % 32)
      return dsv4i_error(DSV4_ERR_INVALID_ARG, "wview_cols: a quantised column slice must "
                         "cover whole 32-column scale blocks (%d, +%d)", (int)col0, (int)n_cols);
    v.data = b + (w->fmt == DSV4I_W_FP8 ? col0 : col0 / 2);
    v.scale = w->scale + col0 / 32;
    break;
  }
  *out = v;
  return DSV4_OK;
}

/* Decode output rows [o0, o0 + no) × K columns [k0, k0 + nk) of w into
 * wt[k][o] (fp32 values without the weight scale) and, for FP8/FP4, the
 * UE8M0 scale of each output row in sw[o]. Missing rows and columns are 0. */
static inline void decode_tile(const dsv4i_wview *w, int32_t o0, int32_t no, int32_t k0, int32_t nk,
                        float wt[TK][TO], float *sw) {
  if (no < TO || nk < TK) memset(wt, 0, sizeof(float) * TK * TO);
  switch (w->fmt) {
  case DSV4I_W_FP8: {
    const uint8_t *base = (const uint8_t *)w->data + (int64_t)o0 * w->data_ld + k0;
    for (int32_t o = 0; o < no; o++) {
      const uint8_t *r = base + (int64_t)o * w->data_ld;
      for (int32_t k = 0; k < nk; k++) wt[k][o] = dsv4i_e4m3_table[r[k]];
    }
    float s = dsv4i_e8m0_to_f32(w->scale[(int64_t)(o0 / 32) * w->scale_ld + k0 / 32]);
    for (int32_t o = 0; o < TO; o++) sw[o] = s;
    break;
  }
  case DSV4I_W_FP4: {
    const uint8_t *base = (const uint8_t *)w->data + (int64_t)o0 * w->data_ld + k0 / 2;
    for (int32_t o = 0; o < no; o++) {
      const uint8_t *r = base + (int64_t)o * w->data_ld;
      for (int32_t j = 0; j < nk / 2; j++) {
        wt[2 * j][o] = dsv4i_e2m1_table[r[j] & 0x0F];
        wt[2 * j + 1][o] = dsv4i_e2m1_table[r[j] >> 4];
      }
      sw[o] = dsv4i_e8m0_to_f32(w->scale[(int64_t)(o0 + o) * w->scale_ld + k0 / 32]);
    }
    for (int32_t o = no; o < TO; o++) sw[o] = 0.0f;
    break;
  }
  case DSV4I_W_BF16: {
    const uint16_t *base = (const uint16_t *)w->data + (int64_t)o0 * w->data_ld + k0;
    for (int32_t o = 0; o < no; o++) {
      const uint16_t *r = base + (int64_t)o * w->data_ld;
      for (int32_t k = 0; k < nk; k++) wt[k][o] = dsv4i_bf16_to_f32(r[k]);
    }
    break;
  }
  case DSV4I_W_F32: {
    const float *base = (const float *)w->data + (int64_t)o0 * w->data_ld + k0;
    for (int32_t o = 0; o < no; o++) {
      const float *r = base + (int64_t)o * w->data_ld;
      for (int32_t k = 0; k < nk; k++) wt[k][o] = r[k];
    }
    break;
  }
  }
}

/* decode_tile, or the AVX-512 decode for a full tile of FP8 / FP4 / BF16. */
static inline void decode_tile_any(const dsv4i_wview *w, int fast, int32_t o0, int32_t no,
                                   int32_t k0, int32_t nk, float wt[TK][TO], float *sw) {
#if DSV4I_HAVE_AVX512_DECODE
  if (fast && no == TO && nk == TK && w->fmt != DSV4I_W_F32) {
    /* the tile's rows are 32 strided streams: fetch two lines ahead */
    const int64_t esz = w->fmt == DSV4I_W_BF16 ? 2 : 1; /* bytes per data_ld unit */
    const int64_t ahead = (int64_t)(k0 + 4 * TK) * esz / (w->fmt == DSV4I_W_FP4 ? 2 : 1);
    if ((k0 / TK) % 2 == 0 && ahead < (int64_t)w->data_ld * esz)
      for (int32_t o = 0; o < TO; o++)
        __builtin_prefetch((const uint8_t *)w->data + ((int64_t)(o0 + o) * w->data_ld) * esz + ahead);
    const void *base;
    if (w->fmt == DSV4I_W_FP8) {
      base = (const uint8_t *)w->data + (int64_t)o0 * w->data_ld + k0;
      const float s = dsv4i_e8m0_to_f32(w->scale[(int64_t)(o0 / 32) * w->scale_ld + k0 / 32]);
      for (int32_t o = 0; o < TO; o++) sw[o] = s;
    } else if (w->fmt == DSV4I_W_FP4) {
      base = (const uint8_t *)w->data + (int64_t)o0 * w->data_ld + k0 / 2;
      for (int32_t o = 0; o < TO; o++)
        sw[o] = dsv4i_e8m0_to_f32(w->scale[(int64_t)(o0 + o) * w->scale_ld + k0 / 32]);
    } else {
      base = (const uint16_t *)w->data + (int64_t)o0 * w->data_ld + k0;
    }
    dsv4i_cpu_decode_tile_avx512(w->fmt, base, w->data_ld, wt);
    return;
  }
#else
  (void)fast;
#endif
  decode_tile(w, o0, no, k0, nk, wt, sw);
}

/* Whether the GEMMs use the AVX-512 decode: only where decoding dominates
 * (few tokens per chunk); with many tokens the decode is amortised. */
static int use_fast_decode(int64_t nt) {
#if DSV4I_HAVE_AVX512_DECODE
  return nt <= 16 && dsv4i_cpu_avx512_ok();
#else
  (void)nt;
  return 0;
#endif
}

/* ---- micro-kernels -------------------------------------------------------
 * p[o] (+)= Σ_k x[k]·wt[k][o], k = 0..nk-1 in order, for the 32 outputs of a
 * tile at once (vectorised over o: each output keeps its sequential k order,
 * so every instruction set gives the same bits). Four tokens share each
 * loaded weight row. The hot tile functions are compiled for AVX-512, AVX2
 * and the baseline and picked at load time (GCC target_clones). */

/* Not under ThreadSanitizer: the clones' ifunc resolvers run during relocation,
 * before the sanitizer's runtime is up, and crash when instrumented. */
#if defined(__GNUC__) && !defined(__clang__) && defined(__x86_64__) && defined(__linux__) && \
    !defined(__SANITIZE_THREAD__)
#define DSV4I_CLONES __attribute__((target_clones("avx512f", "avx2", "default")))
#else
#define DSV4I_CLONES
#endif

static inline void dot_tile(const float *restrict x, const float wt[TK][TO], int32_t nk,
                            float *restrict p) {
  for (int32_t k = 0; k < nk; k++) {
    const float xk = x[k];
    for (int32_t o = 0; o < TO; o++) p[o] += xk * wt[k][o];
  }
}

static inline void dot_tile4(const float *restrict x0, const float *restrict x1,
                             const float *restrict x2, const float *restrict x3,
                             const float wt[TK][TO], int32_t nk, float p[4][TO]) {
  for (int32_t k = 0; k < nk; k++) {
    const float a0 = x0[k], a1 = x1[k], a2 = x2[k], a3 = x3[k];
    for (int32_t o = 0; o < TO; o++) {
      const float w = wt[k][o];
      p[0][o] += a0 * w;
      p[1][o] += a1 * w;
      p[2][o] += a2 * w;
      p[3][o] += a3 * w;
    }
  }
}

/* One output tile of the block-scaled GEMM for nt (<= CHUNK) tokens: into bf16 y, or
 * (y NULL) continuing the fp32 sums in a[t * lda + o] and leaving them there unrounded. */
DSV4I_CLONES
static void qgemm_tile(const dsv4i_wview *w, int fast, int32_t ob, int64_t nt, const float *xq,
                       const float *sx, uint16_t *y, int64_t ldy, float *a, int64_t lda) {
  const int32_t K = w->cols, nkb = K / TK;
  const int32_t o0 = ob * TO, no = (int32_t)min64(TO, w->rows - o0);
  float acc[CHUNK][TO];
  float wt[TK][TO], sw[TO];
  memset(acc, 0, sizeof(float) * TO * (size_t)nt);
  if (a)
    for (int64_t t = 0; t < nt; t++) memcpy(acc[t], a + t * lda + o0, sizeof(float) * (size_t)no);
  for (int32_t kb = 0; kb < nkb; kb++) {
    decode_tile_any(w, fast, o0, no, kb * TK, TK, wt, sw);
    const float *xb = xq + (int64_t)kb * TK;
    int64_t t = 0;
    for (; t + 4 <= nt; t += 4) {
      float p[4][TO] = {{0}};
      dot_tile4(xb + t * K, xb + (t + 1) * K, xb + (t + 2) * K, xb + (t + 3) * K,
                (const float(*)[TO])wt, TK, p);
      for (int32_t r = 0; r < 4; r++) {
        const float s = sx[(t + r) * nkb + kb];
        /* (partial · sx) · sw, as the reference's `partial * a_s * b_s` */
        for (int32_t o = 0; o < TO; o++) acc[t + r][o] += (p[r][o] * s) * sw[o];
      }
    }
    for (; t < nt; t++) {
      float p[TO] = {0};
      dot_tile(xb + t * K, (const float(*)[TO])wt, TK, p);
      const float s = sx[t * nkb + kb];
      for (int32_t o = 0; o < TO; o++) acc[t][o] += (p[o] * s) * sw[o];
    }
  }
  if (a)
    for (int64_t t = 0; t < nt; t++) memcpy(a + t * lda + o0, acc[t], sizeof(float) * (size_t)no);
  else
    for (int64_t t = 0; t < nt; t++)
      for (int32_t o = 0; o < no; o++) y[t * ldy + o0 + o] = dsv4i_f32_to_bf16(acc[t][o]);
}

/* One output tile of the sequential-k fp32 GEMM; writes fp32 or bf16. */
DSV4I_CLONES
static void fgemm_tile(const dsv4i_wview *w, int fast, int32_t ob, int64_t nt, const float *xf,
                       float *yf, uint16_t *yb, int64_t ldy) {
  const int32_t K = w->cols;
  const int32_t o0 = ob * TO, no = (int32_t)min64(TO, w->rows - o0);
  float acc[CHUNK][TO];
  float wt[TK][TO], sw[TO];
  memset(acc, 0, sizeof(float) * TO * (size_t)nt);
  for (int32_t k0 = 0; k0 < K; k0 += TK) {
    const int32_t nk = (int32_t)min64(TK, K - k0);
    decode_tile_any(w, fast, o0, no, k0, nk, wt, sw);
    int64_t t = 0;
    for (; t + 4 <= nt; t += 4) { /* the running sums in a local block: registers */
      float p[4][TO];
      memcpy(p, acc[t], sizeof p);
      if (nk == TK) /* constant trip count: the compiler keeps p in registers */
        dot_tile4(xf + t * K + k0, xf + (t + 1) * K + k0, xf + (t + 2) * K + k0,
                  xf + (t + 3) * K + k0, (const float(*)[TO])wt, TK, p);
      else
        dot_tile4(xf + t * K + k0, xf + (t + 1) * K + k0, xf + (t + 2) * K + k0,
                  xf + (t + 3) * K + k0, (const float(*)[TO])wt, nk, p);
      memcpy(acc[t], p, sizeof p);
    }
    for (; t < nt; t++) {
      float p[TO];
      memcpy(p, acc[t], sizeof p);
      dot_tile(xf + t * K + k0, (const float(*)[TO])wt, nk, p);
      memcpy(acc[t], p, sizeof p);
    }
  }
  for (int64_t t = 0; t < nt; t++) {
    if (yf)
      memcpy(yf + t * ldy + o0, acc[t], sizeof(float) * (size_t)no);
    else
      for (int32_t o = 0; o < no; o++) yb[t * ldy + o0 + o] = dsv4i_f32_to_bf16(acc[t][o]);
  }
}

static void qgemm_any(const dsv4i_wview *w, int64_t n, const float *xq, const float *sx,
                      uint16_t *y, int64_t ldy, float *a, int64_t lda) {
  const int32_t K = w->cols, nkb = K / TK, nob = (w->rows + TO - 1) / TO;
  for (int64_t t0 = 0; t0 < n; t0 += CHUNK) {
    const int64_t nt = min64(CHUNK, n - t0);
    const int par = (int64_t)nob * TO * K * nt >= PAR_MIN_MACS;
    (void)par;
    const int fast = use_fast_decode(nt);
    DSV4I_OMP(omp parallel for schedule(static) if (par))
    for (int32_t ob = 0; ob < nob; ob++)
      qgemm_tile(w, fast, ob, nt, xq + t0 * K, sx + t0 * nkb, y ? y + t0 * ldy : NULL, ldy,
                 a ? a + t0 * lda : NULL, lda);
  }
}

void dsv4i_cpu_qgemm(const dsv4i_wview *w, int64_t n, const float *xq, const float *sx,
                     uint16_t *y, int64_t ldy) {
  qgemm_any(w, n, xq, sx, y, ldy, NULL, 0);
}

void dsv4i_cpu_qgemm_acc(const dsv4i_wview *w, int64_t n, const float *xq, const float *sx,
                         float *acc, int64_t ldacc) {
  qgemm_any(w, n, xq, sx, NULL, 0, acc, ldacc);
}

static void fgemm_any(const dsv4i_wview *w, int64_t n, const float *xf, float *yf, uint16_t *yb,
                      int64_t ldy) {
  const int32_t K = w->cols, nob = (w->rows + TO - 1) / TO;
  for (int64_t t0 = 0; t0 < n; t0 += CHUNK) {
    const int64_t nt = min64(CHUNK, n - t0);
    const int par = (int64_t)nob * TO * K * nt >= PAR_MIN_MACS;
    (void)par;
    const int fast = use_fast_decode(nt);
    DSV4I_OMP(omp parallel for schedule(static) if (par))
    for (int32_t ob = 0; ob < nob; ob++)
      fgemm_tile(w, fast, ob, nt, xf + t0 * K, yf ? yf + t0 * ldy : NULL, yb ? yb + t0 * ldy : NULL,
                 ldy);
  }
}

/* ---- activation quantisation ------------------------------------------- */

void dsv4i_cpu_act_quant_rows(int64_t n, int32_t k, const uint16_t *x, int64_t ldx, float *xq,
                              float *sx) {
  const int32_t nkb = k / TK;
  for (int64_t t = 0; t < n; t++) {
    for (int32_t b = 0; b < nkb; b++) {
      uint8_t q[TK], s;
      (void)dsv4i_act_quant(x + t * ldx + (int64_t)b * TK, TK, q, &s); /* cannot fail */
      float *dst = xq + t * k + (int64_t)b * TK;
      for (int32_t i = 0; i < TK; i++) dst[i] = dsv4i_e4m3_table[q[i]];
      sx[t * nkb + b] = dsv4i_e8m0_to_f32(s);
    }
  }
}

static void act_quant_par(int64_t n, int32_t k, const uint16_t *x, int64_t ldx, float *xq,
                          float *sx) {
  const int32_t nkb = k / TK;
  DSV4I_OMP(omp parallel for schedule(static) if (n * k >= 65536))
  for (int64_t t = 0; t < n; t++)
    dsv4i_cpu_act_quant_rows(1, k, x + t * ldx, ldx, xq + t * k, sx + t * nkb);
}

dsv4_status dsv4i_cpu_act_quant(int64_t n_tok, int32_t k, const uint16_t *x, int64_t ldx,
                                float *xq, float *sx) {
  if (n_tok < 0 || k <= 0 || k % TK != 0 || ldx < k || (n_tok > 0 && (!x || !xq || !sx)))
    return dsv4i_error(DSV4_ERR_INVALID_ARG, "act_quant: n %lld, k %d, ldx %lld",
                       (long long)n_tok, (int)k, (long long)ldx);
  act_quant_par(n_tok, k, x, ldx, xq, sx);
  return DSV4_OK;
}

/* ---- public linears ------------------------------------------------------ */

static dsv4_status check_linear(const char *what, const dsv4i_wview *w, int64_t n, const void *x,
                                int64_t ldx, const void *y, int64_t ldy) {
  if (!dsv4i_wview_valid(w) || n < 0 || (n > 0 && (!x || !y)) || ldx < w->cols ||
      ldy < w->rows)
    return dsv4i_error(DSV4_ERR_INVALID_ARG,
                       "%s: invalid arguments (n %lld, ldx %lld, ldy %lld, view %s)", what,
                       (long long)n, (long long)ldx, (long long)ldy,
                       dsv4i_wview_valid(w) ? "ok" : "invalid");
  return DSV4_OK;
}

dsv4_status dsv4i_cpu_linear_q(const dsv4i_wview *w, int64_t n_tok, const float *xq,
                               const float *sx, uint16_t *y, int64_t ldy) {
  dsv4_status st = check_linear("linear_q", w, n_tok, xq, w ? w->cols : 0, y, ldy);
  if (st != DSV4_OK) return st;
  if ((w->fmt != DSV4I_W_FP8 && w->fmt != DSV4I_W_FP4) || w->cols % TK != 0 ||
      (n_tok > 0 && !sx))
    return dsv4i_error(DSV4_ERR_INVALID_ARG, "linear_q: needs an fp8/fp4 view with K %% 32 == 0");
  dsv4i_cpu_qgemm(w, n_tok, xq, sx, y, ldy);
  return DSV4_OK;
}

/* bf16 rows -> fp32 scratch, chunk by chunk, then the sequential-k GEMM. */
static dsv4_status linear_float_path(const dsv4i_wview *w, int64_t n, const uint16_t *x,
                                     int64_t ldx, float *yf, uint16_t *yb, int64_t ldy) {
  const int32_t K = w->cols;
  float *xf = dsv4i_malloc(sizeof(float) * (size_t)CHUNK * (size_t)K, "linear: fp32 rows");
  if (!xf) return DSV4_ERR_OUT_OF_MEMORY;
  for (int64_t t0 = 0; t0 < n; t0 += CHUNK) {
    const int64_t nt = min64(CHUNK, n - t0);
    for (int64_t t = 0; t < nt; t++) dsv4i_bf16_to_f32_n(x + (t0 + t) * ldx, (size_t)K, xf + t * K);
    fgemm_any(w, nt, xf, yf ? yf + t0 * ldy : NULL, yb ? yb + t0 * ldy : NULL, ldy);
  }
  free(xf);
  return DSV4_OK;
}

dsv4_status dsv4i_cpu_linear(const dsv4i_wview *w, int64_t n_tok, const uint16_t *x, int64_t ldx,
                             uint16_t *y, int64_t ldy) {
  dsv4_status st = check_linear("linear", w, n_tok, x, ldx, y, ldy);
  if (st != DSV4_OK) return st;
  if (n_tok == 0) return DSV4_OK;
  if (w->fmt == DSV4I_W_BF16) return linear_float_path(w, n_tok, x, ldx, NULL, y, ldy);
  if (w->fmt == DSV4I_W_F32)
    return dsv4i_error(DSV4_ERR_INVALID_ARG, "linear: fp32 weights go through linear_f32");
  const int32_t K = w->cols, nkb = K / TK;
  if (K % TK != 0)
    return dsv4i_error(DSV4_ERR_INVALID_ARG, "linear: fp8/fp4 weight with K = %d not a multiple of 32",
                       (int)K);
  float *xq = dsv4i_malloc(sizeof(float) * (size_t)CHUNK * ((size_t)K + (size_t)nkb),
                           "linear: quantised rows");
  if (!xq) return DSV4_ERR_OUT_OF_MEMORY;
  float *sx = xq + (size_t)CHUNK * (size_t)K;
  for (int64_t t0 = 0; t0 < n_tok; t0 += CHUNK) {
    const int64_t nt = min64(CHUNK, n_tok - t0);
    act_quant_par(nt, K, x + t0 * ldx, ldx, xq, sx);
    dsv4i_cpu_qgemm(w, nt, xq, sx, y + t0 * ldy, ldy);
  }
  free(xq);
  return DSV4_OK;
}

dsv4_status dsv4i_cpu_linear_f32(const dsv4i_wview *w, int64_t n_tok, const uint16_t *x,
                                 int64_t ldx, float *y, int64_t ldy) {
  dsv4_status st = check_linear("linear_f32", w, n_tok, x, ldx, y, ldy);
  if (st != DSV4_OK) return st;
  if (w->fmt != DSV4I_W_BF16 && w->fmt != DSV4I_W_F32)
    return dsv4i_error(DSV4_ERR_INVALID_ARG, "linear_f32: needs a bf16 or fp32 weight");
  if (n_tok == 0) return DSV4_OK;
  return linear_float_path(w, n_tok, x, ldx, y, NULL, ldy);
}

/* ---- dequantisation (wo_a at load) -------------------------------------- */

dsv4_status dsv4i_wview_dequant_bf16(const dsv4i_wview *w, uint16_t *out) {
  if (!dsv4i_wview_valid(w) || !out)
    return dsv4i_error(DSV4_ERR_INVALID_ARG, "wview_dequant_bf16: invalid view or NULL output");
  const int32_t rows = w->rows, cols = w->cols;
  DSV4I_OMP(omp parallel for schedule(static) if ((int64_t)rows * cols >= 65536))
  for (int32_t r = 0; r < rows; r++) {
    uint16_t *dst = out + (int64_t)r * cols;
    const uint8_t *b = (const uint8_t *)w->data + (int64_t)r * w->data_ld;
    for (int32_t c = 0; c < cols; c++) {
      float v;
      switch (w->fmt) {
      case DSV4I_W_FP8:
        v = dsv4i_e4m3_table[b[c]] *
            dsv4i_e8m0_to_f32(w->scale[(int64_t)(r / 32) * w->scale_ld + c / 32]);
        break;
      case DSV4I_W_FP4:
        v = dsv4i_e2m1_table[(c & 1) ? (b[c / 2] >> 4) : (b[c / 2] & 0x0F)] *
            dsv4i_e8m0_to_f32(w->scale[(int64_t)r * w->scale_ld + c / 32]);
        break;
      case DSV4I_W_BF16:
        v = dsv4i_bf16_to_f32(((const uint16_t *)w->data)[(int64_t)r * w->data_ld + c]);
        break;
      default:
        v = ((const float *)w->data)[(int64_t)r * w->data_ld + c];
        break;
      }
      dst[c] = dsv4i_f32_to_bf16(v);
    }
  }
  return DSV4_OK;
}
