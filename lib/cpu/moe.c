/*
 * MoE (spec §5.5): the sqrt-softplus router with bias-for-selection-only
 * top-k, and the routed (fp4) + shared (fp8) SwiGLU experts.
 *
 * Batching: the activation is act_quant'ed once per token (w1 and w3 of
 * every expert read the same x), tokens are grouped per expert and each
 * expert runs one GEMM over its tokens. Experts are visited in ascending id
 * and each adds its bf16 output into the token's fp32 sum, so every token
 * sees exactly the reference's order (ascending expert id, shared last)
 * whatever else is in the batch.
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "backend/backend.h" /* dsv4i_tp_ops */
#include "cpu/cpu_impl.h"
#include "cpu/engram.h" /* dsv4i_cpu_sum_torch, dsv4i_cpu_expf_vec */
#include "model/formats.h"

#define MAX_TOPK 64
#define MOE_CHUNK 256 /* tokens per pass: bounds the scratch */

/* a ranks before b: larger, or a number against NaN */
static inline int beats(float a, float b) { return a > b || (isnan(b) && !isnan(a)); }

void dsv4i_cpu_topk_desc(const float *key, int32_t n, int32_t k, int32_t *out) {
  /* insertion into a sorted list of at most k; an element goes after every
   * element it does not beat, so among equal values the lower index (seen
   * first) stays first. */
  int32_t len = 0;
  if (k > n) k = n;
  for (int32_t i = 0; i < n; i++) {
    int32_t p = len;
    while (p > 0 && beats(key[i], key[out[p - 1]])) p--;
    if (p >= k) continue;
    const int32_t end = len < k ? len : k - 1;
    for (int32_t j = end; j > p; j--) out[j] = out[j - 1];
    out[p] = i;
    if (len < k) len++;
  }
}

static dsv4_status check_moe(const dsv4i_moe *m) {
  if (!m || m->n_experts <= 0 || m->top_k <= 0 || m->top_k > MAX_TOPK ||
      m->top_k > m->n_experts || m->dim <= 0 || m->dim % 32 || m->inter <= 0 ||
      m->inter % 32 || !m->bias || !dsv4i_wview_valid(&m->gate) ||
      m->gate.rows != m->n_experts || m->gate.cols != m->dim || !m->w1 || !m->w2 || !m->w3)
    return dsv4i_error(DSV4_ERR_INVALID_ARG, "moe: invalid layer description");
  return DSV4_OK;
}

static int expert_view_ok(const dsv4i_wview *w, int32_t rows, int32_t cols) {
  return dsv4i_wview_valid(w) && (w->fmt == DSV4I_W_FP8 || w->fmt == DSV4I_W_FP4) &&
         w->rows == rows && w->cols == cols;
}

dsv4_status dsv4i_cpu_router(const dsv4i_moe *m, int64_t n_tok, const uint16_t *x, int64_t ldx,
                             const uint8_t *use_vl, int32_t *idx, float *weight) {
  dsv4_status st = check_moe(m);
  if (st != DSV4_OK) return st;
  if (n_tok < 0 || ldx < m->dim || (n_tok > 0 && (!x || !idx || !weight)))
    return dsv4i_error(DSV4_ERR_INVALID_ARG, "router: n %lld, ldx %lld", (long long)n_tok,
                       (long long)ldx);
  if (n_tok == 0) return DSV4_OK;
  const int32_t E = m->n_experts, K = m->top_k;
  const int64_t chunk = n_tok < MOE_CHUNK ? n_tok : MOE_CHUNK;
  float *z = dsv4i_malloc(sizeof(float) * (size_t)chunk * (size_t)E * 2, "router: scores");
  if (!z) return DSV4_ERR_OUT_OF_MEMORY;
  for (int64_t t0 = 0; t0 < n_tok; t0 += chunk) {
    const int64_t nt = n_tok - t0 < chunk ? n_tok - t0 : chunk;
    st = dsv4i_cpu_linear_f32(&m->gate, nt, x + t0 * ldx, ldx, z, E);
    if (st != DSV4_OK) break;
    float *key = z + (size_t)chunk * (size_t)E;
    DSV4I_OMP(omp parallel for schedule(static) if (nt > 8))
    for (int64_t t = 0; t < nt; t++) {
      float *s = z + t * E, *kr = key + t * E;
      const float *bias = (use_vl && use_vl[t0 + t] && m->bias_vl) ? m->bias_vl : m->bias;
      for (int32_t e = 0; e < E; e++) {
        const float v = s[e]; /* / gate_temp (1) is exact */
        const float sp = v > 20.0f ? v : log1pf(expf(v));
        s[e] = sqrtf(sp);
        kr[e] = s[e] + bias[e];
      }
      int32_t *ir = idx + (t0 + t) * K;
      float *wr = weight + (t0 + t) * K;
      dsv4i_cpu_topk_desc(kr, E, K, ir);
      for (int32_t j = 0; j < K; j++) wr[j] = s[ir[j]];
      if (m->norm_topk_prob && K > 1) {
        const float den = dsv4i_cpu_sum_torch(wr, K) + 1e-20f;
        for (int32_t j = 0; j < K; j++) wr[j] = wr[j] / den;
      }
      for (int32_t j = 0; j < K; j++) wr[j] = wr[j] * m->route_scale;
    }
  }
  free(z);
  return st;
}

/* Scratch of one MoE pass over at most `cap` tokens. */
typedef struct moe_scratch {
  float *xq, *sx;    /* act_quant of x: [cap][dim], [cap][dim/32] */
  float *eq, *esx;   /* gathered rows for one expert */
  uint16_t *g, *u;   /* w1 / w3 outputs [cap][inter] */
  uint16_t *a;       /* SwiGLU activation [cap][inter] */
  float *aq, *sa;    /* its act_quant [cap][inter], [cap][inter/32] */
  uint16_t *o;       /* w2 output [cap][dim] */
  float *y;          /* fp32 sums [cap][dim] */
  int32_t *tok;      /* [cap] token of each gathered row */
  float *tw;         /* [cap] its routing weight */
  void *block;
} moe_scratch;

static int scratch_alloc(moe_scratch *s, int64_t cap, int32_t dim, int32_t inter) {
  const size_t c = (size_t)cap, d = (size_t)dim, h = (size_t)inter;
  size_t bytes = sizeof(float) * (c * d + c * d / 32) * 2 + sizeof(uint16_t) * c * h * 3 +
                 sizeof(float) * (c * h + c * h / 32) + sizeof(uint16_t) * c * d +
                 sizeof(float) * c * d + sizeof(int32_t) * c + sizeof(float) * c + 64;
  char *p = dsv4i_malloc(bytes, "moe: scratch");
  if (!p) return 0;
  s->block = p;
#define TAKE(field, type, count)          \
  s->field = (type *)(void *)p;           \
  p += sizeof(type) * (count);
  TAKE(xq, float, c * d);
  TAKE(sx, float, c * d / 32);
  TAKE(eq, float, c * d);
  TAKE(esx, float, c * d / 32);
  TAKE(aq, float, c * h);
  TAKE(sa, float, c * h / 32);
  TAKE(y, float, c * d);
  TAKE(tw, float, c);
  TAKE(tok, int32_t, c);
  TAKE(g, uint16_t, c * h);
  TAKE(u, uint16_t, c * h);
  TAKE(a, uint16_t, c * h);
  TAKE(o, uint16_t, c * d);
#undef TAKE
  return 1;
}

/* w1, w3 and the SwiGLU activation (weighted by tw, NULL: unweighted) of ne gathered
 * rows (quantised in xq/sx), act_quant'ed into aq [ne][inter] / sa [ne][inter/32]. */
static void expert_act(const dsv4i_moe *m, const dsv4i_wview *w1, const dsv4i_wview *w3,
                       int64_t ne, const float *xq, const float *sx, const float *tw,
                       moe_scratch *s, float *aq, float *sa) {
  const int32_t inter = m->inter;
  const float lim = m->swiglu_limit;
  dsv4i_cpu_qgemm(w1, ne, xq, sx, s->g, inter);
  dsv4i_cpu_qgemm(w3, ne, xq, sx, s->u, inter);
  DSV4I_OMP(omp parallel for schedule(static) if (ne * inter > 65536))
  for (int64_t r = 0; r < ne; r++) {
    for (int32_t i = 0; i < inter; i++) {
      float g = dsv4i_bf16_to_f32(s->g[r * inter + i]);
      float u = dsv4i_bf16_to_f32(s->u[r * inter + i]);
      if (lim > 0.0f) {
        u = u < -lim ? -lim : (u > lim ? lim : u);
        g = g > lim ? lim : g;
      }
      /* silu(g) · u, silu = g / (1 + exp(-g)) with torch's vectorised exp */
      float act = (g / (1.0f + dsv4i_cpu_expf_vec(-g))) * u;
      if (tw) act = tw[r] * act;
      s->a[r * inter + i] = dsv4i_f32_to_bf16(act);
    }
    dsv4i_cpu_act_quant_rows(1, inter, s->a + r * inter, inter, aq + r * inter,
                             sa + r * (inter / 32));
  }
}

/* y[tok[r]] += the bf16 expert output rows o[r] (fp32 sums; a token appears once). */
static void add_rows(int64_t ne, int32_t dim, const uint16_t *o, const int32_t *tok, float *y) {
  DSV4I_OMP(omp parallel for schedule(static) if (ne * dim > 65536))
  for (int64_t r = 0; r < ne; r++) {
    float *yr = y + (int64_t)tok[r] * dim;
    const uint16_t *orow = o + r * dim;
    for (int32_t d = 0; d < dim; d++) yr[d] += dsv4i_bf16_to_f32(orow[d]);
  }
}

/* One SwiGLU expert over ne gathered rows (quantised in xq/sx), weighted
 * by tw (NULL: unweighted), adding its bf16 output into y[tok[r]]. */
static void run_expert(const dsv4i_moe *m, const dsv4i_wview *w1, const dsv4i_wview *w2,
                       const dsv4i_wview *w3, int64_t ne, const float *xq, const float *sx,
                       const int32_t *tok, const float *tw, moe_scratch *s) {
  expert_act(m, w1, w3, ne, xq, sx, tw, s, s->aq, s->sa);
  dsv4i_cpu_qgemm(w2, ne, s->aq, s->sa, s->o, m->dim);
  add_rows(ne, m->dim, s->o, tok, s->y);
}

/* Tensor parallelism: the activations of every expert of a pass on this rank's share of
 * the intermediate dim, then w2 as one rank-ordered all-reduce (backend.h dsv4i_tp_ops):
 * each rank continues the previous ranks' fp32 sums over its share, the last rank rounds
 * each expert's rows and adds them in expert order exactly as run_expert, and shares y. */
typedef struct moe_tp {
  float *aq, *sa, *acc;   /* [rows][inter], [rows][inter/32], [rows][dim] */
  uint16_t *o;            /* [rows][dim] rounded rows (last rank) */
  int32_t *tok;           /* [rows] token of each row */
  int64_t *seg;           /* [n_experts + 2] first row of each expert (shared last) */
} moe_tp;

static void tp_act(const dsv4i_moe *m, moe_tp *t, int64_t *rows, int32_t e, const dsv4i_wview *w1,
                   const dsv4i_wview *w3, int64_t ne, const float *xq, const float *sx,
                   const int32_t *tok, const float *tw, moe_scratch *s) {
  const int64_t r0 = *rows;
  t->seg[e] = r0;
  expert_act(m, w1, w3, ne, xq, sx, tw, s, t->aq + r0 * m->inter, t->sa + r0 * (m->inter / 32));
  memcpy(t->tok + r0, tok, sizeof(int32_t) * (size_t)ne);
  *rows = r0 + ne;
}

static dsv4_status tp_finish(const dsv4i_moe *m, moe_tp *t, const int32_t *count, int64_t rows,
                             int64_t nt, float *y) {
  const dsv4i_tp_ops *tp = m->tp;
  const int32_t E = m->n_experts, dim = m->dim, inter = m->inter;
  const size_t n = (size_t)rows * (size_t)dim;
  dsv4_status st = tp->chain_recv(tp->ctx, t->acc, n);
  for (int32_t e = 0; !st && e <= E; e++) { /* experts ascending, then the shared one */
    const dsv4i_wview *w2 = e < E ? &m->w2[e] : &m->sw2;
    const int64_t ne = e < E ? count[e] : (m->has_shared ? nt : 0);
    if (ne)
      dsv4i_cpu_qgemm_acc(w2, ne, t->aq + t->seg[e] * inter, t->sa + t->seg[e] * (inter / 32),
                          t->acc + t->seg[e] * dim, dim);
  }
  if (!st) st = tp->chain_send(tp->ctx, t->acc, n);
  if (!st && tp->rank == tp->size - 1) {
    dsv4i_f32_to_bf16_n(t->acc, n, t->o);
    for (int32_t e = 0; e <= E; e++) {
      const int64_t ne = e < E ? count[e] : (m->has_shared ? nt : 0);
      if (ne) add_rows(ne, dim, t->o + t->seg[e] * dim, t->tok + t->seg[e], y);
    }
  }
  if (!st) st = tp->share(tp->ctx, y, sizeof(float) * (size_t)nt * (size_t)dim);
  return st;
}

dsv4_status dsv4i_cpu_moe_experts(const dsv4i_moe *m, int64_t n_tok, const uint16_t *x,
                                  int64_t ldx, const int32_t *idx, const float *weight,
                                  uint16_t *out, int64_t ldo) {
  dsv4_status st = check_moe(m);
  if (st != DSV4_OK) return st;
  const int32_t E = m->n_experts, K = m->top_k, dim = m->dim, inter = m->inter;
  if (n_tok < 0 || ldx < dim || ldo < dim || (n_tok > 0 && (!x || !idx || !weight || !out)))
    return dsv4i_error(DSV4_ERR_INVALID_ARG, "moe_experts: n %lld, ldx %lld, ldo %lld",
                       (long long)n_tok, (long long)ldx, (long long)ldo);
  if (m->has_shared && (!expert_view_ok(&m->sw1, inter, dim) || !expert_view_ok(&m->sw2, dim, inter) ||
                        !expert_view_ok(&m->sw3, inter, dim)))
    return dsv4i_error(DSV4_ERR_INVALID_ARG, "moe_experts: shared expert views do not fit");
  for (int64_t t = 0; t < n_tok; t++)
    for (int32_t j = 0; j < K; j++) {
      const int32_t e = idx[t * K + j];
      if (e >= E)
        return dsv4i_error(DSV4_ERR_INVALID_ARG, "moe_experts: expert id %d >= %d", (int)e, (int)E);
      for (int32_t j2 = 0; j2 < j; j2++)
        if (e >= 0 && idx[t * K + j2] == e)
          return dsv4i_error(DSV4_ERR_INVALID_ARG, "moe_experts: token %lld routes twice to %d",
                             (long long)t, (int)e);
      if (e >= 0 && (!expert_view_ok(&m->w1[e], inter, dim) || !expert_view_ok(&m->w2[e], dim, inter) ||
                     !expert_view_ok(&m->w3[e], inter, dim)))
        return dsv4i_error(DSV4_ERR_INVALID_ARG, "moe_experts: expert %d views do not fit", (int)e);
    }
  if (n_tok == 0) return DSV4_OK;

  const int64_t cap = n_tok < MOE_CHUNK ? n_tok : MOE_CHUNK;
  moe_scratch s;
  if (!scratch_alloc(&s, cap, dim, inter)) return DSV4_ERR_OUT_OF_MEMORY;
  int32_t *count = dsv4i_calloc((size_t)E + 1, sizeof(int32_t), "moe: expert counts");
  if (!count) {
    free(s.block);
    return DSV4_ERR_OUT_OF_MEMORY;
  }
  const int32_t nkb = dim / 32;
  moe_tp tpb = {0};
  void *tpmem = NULL;
  if (m->tp) { /* every row of a pass: top_k per token, plus the shared expert's */
    const size_t R = (size_t)cap * (size_t)(K + 1);
    tpmem = dsv4i_malloc(R * ((size_t)inter + (size_t)inter / 32 + (size_t)dim) * sizeof(float) +
                             R * (size_t)dim * sizeof(uint16_t) + R * sizeof(int32_t) +
                             ((size_t)E + 2) * sizeof(int64_t), "moe: TP rows");
    if (!tpmem) {
      free(count);
      free(s.block);
      return DSV4_ERR_OUT_OF_MEMORY;
    }
    tpb.seg = tpmem;
    tpb.aq = (float *)(void *)(tpb.seg + E + 2);
    tpb.sa = tpb.aq + R * (size_t)inter;
    tpb.acc = tpb.sa + R * (size_t)inter / 32;
    tpb.tok = (int32_t *)(void *)(tpb.acc + R * (size_t)dim);
    tpb.o = (uint16_t *)(void *)(tpb.tok + R);
  }
  for (int64_t t0 = 0; t0 < n_tok; t0 += cap) {
    const int64_t nt = n_tok - t0 < cap ? n_tok - t0 : cap;
    const int32_t *ic = idx + t0 * K;
    const float *wc = weight + t0 * K;
    (void)dsv4i_cpu_act_quant(nt, dim, x + t0 * ldx, ldx, s.xq, s.sx);
    memset(s.y, 0, sizeof(float) * (size_t)nt * (size_t)dim);
    memset(count, 0, sizeof(int32_t) * ((size_t)E + 1));
    for (int64_t i = 0; i < nt * K; i++)
      if (ic[i] >= 0) count[ic[i]]++;
    int64_t rows = 0; /* TP: rows gathered so far */
    for (int32_t e = 0; e < E; e++) { /* ascending expert id */
      if (!count[e]) continue;
      int64_t ne = 0;
      for (int64_t t = 0; t < nt; t++)
        for (int32_t j = 0; j < K; j++)
          if (ic[t * K + j] == e) {
            s.tok[ne] = (int32_t)t;
            s.tw[ne] = wc[t * K + j];
            memcpy(s.eq + ne * dim, s.xq + t * dim, sizeof(float) * (size_t)dim);
            memcpy(s.esx + ne * nkb, s.sx + t * nkb, sizeof(float) * (size_t)nkb);
            ne++;
          }
      if (m->tp) tp_act(m, &tpb, &rows, e, &m->w1[e], &m->w3[e], ne, s.eq, s.esx, s.tok, s.tw, &s);
      else run_expert(m, &m->w1[e], &m->w2[e], &m->w3[e], ne, s.eq, s.esx, s.tok, s.tw, &s);
    }
    if (m->has_shared) {
      for (int64_t t = 0; t < nt; t++) s.tok[t] = (int32_t)t;
      if (m->tp) tp_act(m, &tpb, &rows, E, &m->sw1, &m->sw3, nt, s.xq, s.sx, s.tok, NULL, &s);
      else run_expert(m, &m->sw1, &m->sw2, &m->sw3, nt, s.xq, s.sx, s.tok, NULL, &s);
    }
    if (m->tp && (st = tp_finish(m, &tpb, count, rows, nt, s.y))) break;
    for (int64_t t = 0; t < nt; t++)
      dsv4i_f32_to_bf16_n(s.y + t * dim, (size_t)dim, out + (t0 + t) * ldo);
  }
  free(tpmem);
  free(count);
  free(s.block);
  return st;
}

dsv4_status dsv4i_cpu_moe(const dsv4i_moe *m, int64_t n_tok, const uint16_t *x, int64_t ldx,
                          const uint8_t *use_vl, uint16_t *out, int64_t ldo) {
  dsv4_status st = check_moe(m);
  if (st != DSV4_OK) return st;
  if (n_tok <= 0) return n_tok == 0 ? DSV4_OK : dsv4i_error(DSV4_ERR_INVALID_ARG, "moe: n < 0");
  const size_t nk = (size_t)n_tok * (size_t)m->top_k;
  int32_t *idx = dsv4i_malloc(nk * (sizeof(int32_t) + sizeof(float)), "moe: routing");
  if (!idx) return DSV4_ERR_OUT_OF_MEMORY;
  float *w = (float *)(void *)(idx + nk);
  st = dsv4i_cpu_router(m, n_tok, x, ldx, use_vl, idx, w);
  if (st == DSV4_OK) st = dsv4i_cpu_moe_experts(m, n_tok, x, ldx, idx, w, out, ldo);
  free(idx);
  return st;
}
