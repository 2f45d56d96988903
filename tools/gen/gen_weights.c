/* Values and storage encodings of generated weights; see gen_weights.h. */
#include "gen_weights.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "gen_rng.h"
#include "model/formats.h"

#define GROUP_ELEMS ((int64_t)4 << 20)          /* default values per row group */
#define SCALE_CACHE_MAX ((uint64_t)64 << 20)    /* default largest scale tensor kept */

#ifdef _OPENMP
#define GEN_PARALLEL_FOR _Pragma("omp parallel for schedule(dynamic, 1)")
#else
#define GEN_PARALLEL_FOR
#endif

enum { K_NORMAL, K_HC_BASE, K_HEAD_PLANT };

/* How to make and store one tensor's values. */
typedef struct plan {
  const dsv4i_tensor_spec *spec;  /* the value tensor */
  const dsv4i_tensor_spec *scale; /* its `.scale` (quantised dtypes), else NULL */
  uint64_t hash;                  /* stream key of the name */
  int64_t rows, cols;             /* logical values (I8: two per stored byte) */
  int64_t row_bytes;              /* stored bytes per row */
  int kind;
  float mean, std;
  int64_t tail_from;              /* rows >= tail_from use tail_std */
  float tail_std;
  int64_t block_rows;             /* rows per scale row: 32 (dense fp8) or 1 */
  int64_t scale_cols;             /* scale entries per scale row */
} plan;

struct gen_weights {
  const dsv4i_config *cfg;
  const dsv4i_contract *ct;
  uint64_t seed;
  float gain;
  const gen_plant *plant;
  plan embed;                     /* the planted head reads embedding rows */
  const dsv4i_tensor_spec *cached_for; /* weight whose scale bytes `cache` holds */
  uint8_t *cache;
  uint64_t cache_max;             /* largest scale tensor kept */
  int64_t group_values;           /* values per row group (rounded to whole scale blocks) */
};

static int ends_with(const char *s, const char *suf) {
  size_t n = strlen(s), m = strlen(suf);
  return n >= m && strcmp(s + n - m, suf) == 0;
}

/* The dot-separated segment before the last one ("attn_norm" in
 * "layers.0.attn_norm.weight"); empty when there is none. */
static void parent_segment(const char *name, char *seg, size_t cap) {
  const char *last = strrchr(name, '.');
  seg[0] = '\0';
  if (!last) return;
  const char *start = last;
  while (start > name && start[-1] != '.') start--;
  size_t n = (size_t)(last - start);
  if (n >= cap) n = cap - 1;
  memcpy(seg, start, n);
  seg[n] = '\0';
}

/* Sublayer output projections of the blocks (not of the vision tower). */
static int is_damped(const char *name) {
  return ends_with(name, ".attn.wo_b.weight") ||
         (strstr(name, ".ffn.") && ends_with(name, ".w2.weight"));
}

/* The value rules of gen_weights.h, by name. */
static void choose_init(const gen_weights *g, plan *p) {
  const char *n = p->spec->name;
  char seg[DSV4I_NAME_MAX];
  parent_segment(n, seg, sizeof seg);
  float fan = 1.0f / sqrtf((float)p->cols);
  p->kind = K_NORMAL;
  p->mean = 0.0f;
  p->std = p->spec->ndim >= 2 ? fan : 0.02f;
  p->tail_from = INT64_MAX;
  if (strcmp(n, "head.weight") == 0) {
    if (g->plant) p->kind = K_HEAD_PLANT;
  } else if (strcmp(n, "embed.weight") == 0 || ends_with(n, "engram.embed.weight") ||
             strncmp(n, "image_", 6) == 0 || ends_with(n, "markov_head.embed.weight")) {
    p->std = 1.0f;
  } else if (strstr(n, "hc_") && ends_with(n, "_base")) {
    p->kind = K_HC_BASE;
  } else if (strstr(n, "hc_") && ends_with(n, "_scale")) {
    p->mean = 0.5f;
    p->std = 0.1f;
  } else if (ends_with(n, "attn_sink")) {
    p->std = 0.7f;
  } else if ((p->spec->ndim == 1 && strstr(seg, "norm")) || ends_with(n, "engram.q_weight") ||
             ends_with(n, "engram.k_weight")) {
    p->mean = 1.0f;
    p->std = 0.1f;
  } else if (ends_with(n, "gate.bias") || ends_with(n, "gate.bias_vl")) {
    p->std = 0.1f;
  } else if (is_damped(n)) {
    p->std = g->gain * fan;
  } else if (ends_with(n, "engram.wkv.weight")) {
    p->tail_from = p->rows - g->cfg->dim; /* value rows: the last `dim` outputs */
    p->tail_std = g->gain * fan;
  } else if (ends_with(n, "markov_head.head.weight")) {
    p->std = 0.3f * fan;
  }
}

static dsv4_status plan_make(const gen_weights *g, const dsv4i_tensor_spec *spec, plan *p) {
  memset(p, 0, sizeof *p);
  p->spec = spec;
  p->hash = gen_hash_str(spec->name);
  if (spec->ndim < 1)
    return dsv4i_error(DSV4_ERR_INTERNAL, "gen: %s has no dimensions", spec->name);
  p->rows = 1;
  for (int32_t i = 0; i + 1 < spec->ndim; i++) p->rows *= spec->shape[i];
  int64_t last = spec->shape[spec->ndim - 1];
  p->cols = spec->dtype == DSV4_DTYPE_I8 ? 2 * last : last;
  p->row_bytes = last * (int64_t)dsv4i_dtype_size(spec->dtype);
  p->block_rows = 1;
  if (spec->dtype == DSV4_DTYPE_F8_E4M3 || spec->dtype == DSV4_DTYPE_I8) {
    char sname[DSV4I_NAME_MAX];
    size_t n = strlen(spec->name);
    if (!ends_with(spec->name, ".weight") || n + 1 > sizeof sname)
      return dsv4i_error(DSV4_ERR_INTERNAL, "gen: quantised %s is not a .weight", spec->name);
    memcpy(sname, spec->name, n - 6);
    strcpy(sname + n - 6, "scale");
    p->scale = dsv4i_contract_find(g->ct, sname);
    if (!p->scale || p->scale->ndim != 2 || p->rows < 1)
      return dsv4i_error(DSV4_ERR_INTERNAL, "gen: %s has no 2-D scale %s", spec->name, sname);
    p->block_rows = p->scale->shape[0] == p->rows ? 1 : 32;
    p->scale_cols = p->scale->shape[1];
    if (p->scale->shape[0] != (p->rows + p->block_rows - 1) / p->block_rows ||
        p->scale_cols != (p->cols + 31) / 32 ||
        (p->block_rows == 1 && p->cols % 32 != 0))
      return dsv4i_error(DSV4_ERR_INTERNAL, "gen: scale %s does not fit %s", sname, spec->name);
  }
  choose_init(g, p);
  if (p->kind == K_HEAD_PLANT && (g->plant->vocab != p->rows || g->embed.cols != p->cols))
    return dsv4i_error(DSV4_ERR_INTERNAL, "gen: plant vocab %d does not match head rows %lld",
                       (int)g->plant->vocab, (long long)p->rows);
  return DSV4_OK;
}

static float bf16_round(float x) {
  return dsv4i_bf16_to_f32(dsv4i_f32_to_bf16(x));
}

static void fill_row(const gen_weights *g, const plan *p, int64_t r, float *out, float *aux);

/* head row r = (bigram * rhat[pred] + random * xi) / sqrt(dim); e: float[cols] scratch */
static void head_row(const gen_weights *g, const plan *p, int64_t r, float *out, float *e,
                     gen_rng *rng) {
  const gen_plant *pl = g->plant;
  float inv = 1.0f / sqrtf((float)p->cols);
  for (int64_t c = 0; c < p->cols; c++) out[c] = pl->random * gen_rng_normal(rng) * inv;
  int32_t pred = r < pl->vocab ? pl->pred[r] : -1;
  if (pred < 0) return;
  fill_row(g, &g->embed, pred, e, NULL);
  double ss = 0.0;
  for (int64_t c = 0; c < p->cols; c++) {
    e[c] = bf16_round(e[c]); /* the stored embedding */
    ss += (double)e[c] * e[c];
  }
  float k = pl->bigram * inv / (float)sqrt(ss / (double)p->cols + 1e-30);
  for (int64_t c = 0; c < p->cols; c++) out[c] += k * e[c];
}

/* Row r of p into out[cols]; aux: float[cols] scratch, needed by the planted head only. */
static void fill_row(const gen_weights *g, const plan *p, int64_t r, float *out, float *aux) {
  gen_rng rng;
  gen_rng_init(&rng, g->seed, p->hash, (uint64_t)r);
  float sd = r >= p->tail_from ? p->tail_std : p->std;
  if (p->kind == K_HEAD_PLANT) {
    head_row(g, p, r, out, aux, &rng);
  } else if (p->kind == K_HC_BASE) {
    int64_t hc = g->cfg->hc_mult;
    for (int64_t c = 0; c < p->cols; c++) {
      float v = gen_rng_normal(&rng);
      int64_t j = c - 2 * hc;
      out[c] = j < 0 ? 0.5f * v : 0.4f * v + (j / hc == j % hc ? 2.5f : 0.0f);
    }
  } else {
    for (int64_t c = 0; c < p->cols; c++) out[c] = p->mean + sd * gen_rng_normal(&rng);
  }
}

/* fp8 with one UE8M0 scale per 32x32 block: rn (<= 32) rows x cols. */
static void dense_fp8(const float *x, int64_t rn, int64_t cols, uint8_t *q, uint8_t *sc) {
  for (int64_t cb = 0; cb < cols; cb += 32) {
    int64_t cn = cols - cb < 32 ? cols - cb : 32;
    float amax = 0.0f;
    for (int64_t r = 0; r < rn; r++)
      for (int64_t c = 0; c < cn; c++) amax = fmaxf(amax, fabsf(bf16_round(x[r * cols + cb + c])));
    int32_t e = dsv4i_ceil_log2_bits(fmaxf(amax, 1e-4f) * (1.0f / 448.0f));
    float inv = ldexpf(1.0f, -e);
    for (int64_t r = 0; r < rn; r++)
      for (int64_t c = 0; c < cn; c++)
        q[r * cols + cb + c] = dsv4i_f32_to_e4m3(bf16_round(x[r * cols + cb + c]) * inv);
    sc[cb / 32] = dsv4i_e8m0_from_exp(e);
  }
}

/* Buffers for groups of up to `group` rows of p. */
typedef struct bufs {
  float *f;        /* values [group][cols] */
  float *aux;      /* scratch [group][cols] (planted head only) */
  uint16_t *bf;    /* bf16 values [group][cols] */
  uint8_t *codes;  /* stored bytes [group][row_bytes] */
  uint8_t *scales; /* scale bytes of the group */
  int64_t group;
} bufs;

/* Rows [r0, r0 + nr) of p (r0 a multiple of block_rows): values into b->f,
 * stored bytes into b->codes, scales (if any) into b->scales. */
static void run_group(const gen_weights *g, const plan *p, int64_t r0, int64_t nr, const bufs *b) {
  int64_t br = p->block_rows, units = (nr + br - 1) / br;
  float *f = b->f;
  uint16_t *bf = b->bf;
  uint8_t *codes = b->codes, *scales = b->scales;
  GEN_PARALLEL_FOR
  for (int64_t u = 0; u < units; u++) {
    int64_t a = u * br, n = nr - a < br ? nr - a : br;
    for (int64_t r = a; r < a + n; r++)
      fill_row(g, p, r0 + r, f + r * p->cols, b->aux ? b->aux + r * p->cols : NULL);
    const float *x = f + a * p->cols;
    uint8_t *q = codes + a * p->row_bytes;
    size_t ne = (size_t)(n * p->cols);
    switch (p->spec->dtype) {
    case DSV4_DTYPE_F32: memcpy(q, x, ne * sizeof(float)); break;
    case DSV4_DTYPE_BF16: dsv4i_f32_to_bf16_n(x, ne, (uint16_t *)(void *)q); break;
    case DSV4_DTYPE_F8_E4M3:
      if (br == 32) {
        dense_fp8(x, n, p->cols, q, scales + u * p->scale_cols);
      } else {
        dsv4i_f32_to_bf16_n(x, ne, bf + a * p->cols);
        dsv4i_act_quant(bf + a * p->cols, ne, q, scales + a * p->scale_cols);
      }
      break;
    case DSV4_DTYPE_I8:
      dsv4i_f32_to_bf16_n(x, ne, bf + a * p->cols);
      dsv4i_fp4_act_quant_ue8m0(bf + a * p->cols, ne, q, scales + a * p->scale_cols);
      break;
    default: break; /* rejected in gen_weights_write */
    }
  }
}

static void bufs_free(bufs *b) {
  free(b->f);
  free(b->aux);
  free(b->bf);
  free(b->codes);
  free(b->scales);
}

static dsv4_status bufs_alloc(const gen_weights *gw, const plan *p, bufs *b) {
  memset(b, 0, sizeof *b);
  int64_t br = p->block_rows;
  int64_t g = gw->group_values / p->cols / br * br;
  if (g < br) g = br;
  if (g > p->rows) g = p->rows;
  b->group = g;
  size_t ne = (size_t)(g * p->cols);
  b->f = dsv4i_malloc(ne * sizeof *b->f, "gen values");
  b->bf = dsv4i_malloc(ne * sizeof *b->bf, "gen bf16 values");
  b->codes = dsv4i_malloc((size_t)(g * p->row_bytes), "gen stored bytes");
  b->scales = dsv4i_malloc((size_t)(((g + br - 1) / br) * (p->scale_cols ? p->scale_cols : 1)),
                           "gen scales");
  if (p->kind == K_HEAD_PLANT) b->aux = dsv4i_malloc(ne * sizeof *b->aux, "gen head scratch");
  if (!b->f || !b->bf || !b->codes || !b->scales || (p->kind == K_HEAD_PLANT && !b->aux)) {
    bufs_free(b);
    return DSV4_ERR_OUT_OF_MEMORY;
  }
  return DSV4_OK;
}

/* Stream a weight (want_scale 0) or only its scale tensor (want_scale 1). */
static dsv4_status stream(gen_weights *g, const plan *p, int want_scale, dsv4i_st_writer *w) {
  bufs b;
  dsv4_status s = bufs_alloc(g, p, &b);
  if (s) return s;
  uint8_t *keep = NULL;
  if (!want_scale && p->scale && p->scale->nbytes <= g->cache_max) {
    keep = dsv4i_malloc((size_t)p->scale->nbytes, "gen scale cache");
    if (!keep) s = DSV4_ERR_OUT_OF_MEMORY;
  }
  for (int64_t r0 = 0; s == DSV4_OK && r0 < p->rows; r0 += b.group) {
    int64_t nr = p->rows - r0 < b.group ? p->rows - r0 : b.group;
    int64_t sb = ((nr + p->block_rows - 1) / p->block_rows) * p->scale_cols;
    run_group(g, p, r0, nr, &b);
    if (want_scale) {
      s = dsv4i_st_writer_write(w, b.scales, (size_t)sb);
    } else {
      s = dsv4i_st_writer_write(w, b.codes, (size_t)(nr * p->row_bytes));
      if (keep) memcpy(keep + (r0 / p->block_rows) * p->scale_cols, b.scales, (size_t)sb);
    }
  }
  bufs_free(&b);
  if (s == DSV4_OK && keep) {
    free(g->cache);
    g->cache = keep;
    g->cached_for = p->spec;
  } else {
    free(keep);
  }
  return s;
}

dsv4_status gen_weights_write(gen_weights *g, const dsv4i_tensor_spec *spec,
                              dsv4i_st_writer *w) {
  plan p;
  dsv4_status s;
  if (spec->dtype == DSV4_DTYPE_F8_E8M0) {
    /* the scale of `X.weight`: from the cache, or recomputed */
    char wname[DSV4I_NAME_MAX];
    size_t n = strlen(spec->name);
    const dsv4i_tensor_spec *ws = NULL;
    if (ends_with(spec->name, ".scale") && n + 2 <= sizeof wname) {
      memcpy(wname, spec->name, n - 5);
      strcpy(wname + n - 5, "weight");
      ws = dsv4i_contract_find(g->ct, wname);
    }
    if (!ws) return dsv4i_error(DSV4_ERR_INTERNAL, "gen: scale %s has no weight", spec->name);
    if (g->cached_for == ws) {
      s = dsv4i_st_writer_write(w, g->cache, (size_t)spec->nbytes);
      free(g->cache);
      g->cache = NULL;
      g->cached_for = NULL;
      return s;
    }
    if ((s = plan_make(g, ws, &p))) return s;
    return stream(g, &p, 1, w);
  }
  switch (spec->dtype) {
  case DSV4_DTYPE_BF16:
  case DSV4_DTYPE_F32:
  case DSV4_DTYPE_F8_E4M3:
  case DSV4_DTYPE_I8: break;
  default:
    return dsv4i_error(DSV4_ERR_UNSUPPORTED, "gen: no generator for %s (%s)", spec->name,
                       dsv4i_dtype_name(spec->dtype));
  }
  if ((s = plan_make(g, spec, &p))) return s;
  return stream(g, &p, 0, w);
}

dsv4_status gen_weights_row(gen_weights *g, const char *name, int64_t row, float *out) {
  const dsv4i_tensor_spec *spec = dsv4i_contract_find(g->ct, name);
  if (!spec || (spec->dtype != DSV4_DTYPE_BF16 && spec->dtype != DSV4_DTYPE_F32))
    return dsv4i_error(DSV4_ERR_INVALID_ARG, "gen: %s is not a bf16/f32 tensor of the contract",
                       name);
  plan p;
  dsv4_status s = plan_make(g, spec, &p);
  if (s) return s;
  if (row < 0 || row >= p.rows)
    return dsv4i_error(DSV4_ERR_INVALID_ARG, "gen: row %lld of %s", (long long)row, name);
  float *aux = dsv4i_malloc((size_t)p.cols * sizeof *aux, "gen row scratch");
  if (!aux) return DSV4_ERR_OUT_OF_MEMORY;
  fill_row(g, &p, row, out, aux);
  free(aux);
  if (spec->dtype == DSV4_DTYPE_BF16)
    for (int64_t c = 0; c < p.cols; c++) out[c] = bf16_round(out[c]);
  return DSV4_OK;
}

dsv4_status gen_weights_create(const dsv4i_config *cfg, const dsv4i_contract *contract,
                               uint64_t seed, float gain, const gen_plant *plant,
                               gen_weights **out) {
  *out = NULL;
  gen_weights *g = dsv4i_calloc(1, sizeof *g, "gen weights");
  if (!g) return DSV4_ERR_OUT_OF_MEMORY;
  g->cfg = cfg;
  g->ct = contract;
  g->seed = seed;
  g->gain = gain;
  g->plant = plant;
  g->cache_max = SCALE_CACHE_MAX;
  g->group_values = GROUP_ELEMS;
  const dsv4i_tensor_spec *e = dsv4i_contract_find(contract, "embed.weight");
  dsv4_status s = e ? plan_make(g, e, &g->embed)
                    : dsv4i_error(DSV4_ERR_INTERNAL, "gen: the contract has no embed.weight");
  if (s) {
    free(g);
    return s;
  }
  *out = g;
  return DSV4_OK;
}

void gen_weights_set_scale_cache(gen_weights *g, uint64_t max_bytes) {
  g->cache_max = max_bytes;
}

void gen_weights_set_group_values(gen_weights *g, int64_t values) {
  g->group_values = values > 0 ? values : 1;
}

void gen_weights_free(gen_weights *g) {
  if (!g) return;
  free(g->cache);
  free(g);
}
