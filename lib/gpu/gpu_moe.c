/* Host launcher of the MoE experts: size checks, scratch layouts, the
 * launches of the tiled kernels (kernels/moe_tiled.cu, the default numerics
 * mode: prep, then up and down as one launch or two) or, with cpu_order, of
 * the CPU-order ones (kernels/moe.cu, three launches). */
#include "gpu/gpu_ops.h"

#define MOE_TILE 32    /* kernels/moe.cu RT: rows per moe_up tile */
#define MOE_DOWN_TILE 64 /* kernels/moe.cu RTD: rows per moe_down tile */
#define MOE_UP_KB 320  /* kernels/moe.cu UP_NT: dim/32 at most */
#define MOE_DOWN_KB 288 /* kernels/moe.cu DOWN_NT: inter/32 at most */
#define MOE_MAX_EXPERTS 1024
#define MOE_TILED_UP_ROWS 16 /* kernels/moe_tiled.cu UP_ROWS */
#define MOE_TILED_DN_ROWS 32 /* kernels/moe_tiled.cu DN_ROWS */
/* kernels/moe_tiled.cu tiled_ring: RING (3) stages x 128 threads x (8 x 16 B + 4 x 4 B) */
#define MOE_TILED_RING_BYTES (3 * 128 * (8 * 16 + 4 * 4))

dsv4_status dsv4i_gpu_moe_tiled_init(const dsv4i_kreg *kr, const dsv4i_gpu_ops *o) {
  const dsv4i_kernel_id ids[3] = {o->moe_up_tiled, o->moe_down_tiled, o->moe_updown_tiled};
  for (int i = 0; i < 3; i++) {
    if (ids[i] >= DSV4I_K_COUNT || !kr->fn[ids[i]]) continue;
    const dsv4i_cures r = kr->dev->cu->FuncSetAttribute(
        kr->fn[ids[i]], DSV4I_CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES, MOE_TILED_RING_BYTES);
    if (r != DSV4I_CUDA_SUCCESS)
      return dsv4i_cu_fail(kr->dev->cu, r, "cuFuncSetAttribute(moe tiled, %d B of shared memory)",
                           MOE_TILED_RING_BYTES);
  }
  return DSV4_OK;
}

static size_t al(size_t b) { return (b + 255) / 256 * 256; }

/* xq f32 [n][dim], sx f32 [n][dim/32] (act_quant of x); aq f32
 * [n][top_k + 1][inter], sa f32 [n][top_k + 1][inter/32] (act_quant of the
 * activations); o bf16 [n][top_k + 1][dim] (each expert's rows); cnt u32
 * [ceil(dim/64)] (per row tile of the down projection); route int32
 * [2 + 2·1024 + n·top_k] (kernels/moe.cu build_route; sized for the largest
 * expert count the launcher takes, so the size needs no n_experts). */
typedef struct moe_carve {
  size_t xq, sx, aq, sa, o, cnt, route, total;
} moe_carve;

static moe_carve moe_layout(const dsv4i_gpu_moe *m, int32_t n_tok) {
  const size_t n = (size_t)n_tok, slots = (size_t)m->top_k + 1, dim = (size_t)m->dim,
               inter = (size_t)m->inter;
  moe_carve c;
  c.xq = 0;
  c.sx = c.xq + al(4 * n * dim);
  c.aq = c.sx + al(4 * n * dim / 32);
  c.sa = c.aq + al(4 * n * slots * inter);
  c.o = c.sa + al(4 * n * slots * inter / 32);
  c.cnt = c.o + al(2 * n * slots * dim);
  c.route = c.cnt + al(4 * (dim / MOE_DOWN_TILE + 1));
  c.total = c.route + al(4 * (2 + 2 * (size_t)MOE_MAX_EXPERTS + n * (size_t)m->top_k));
  return c;
}

/* The tiled kernels' scratch: xb4, xb8 bf16 [n][dim] (act_quant of x in each
 * weight format's fragment order); g, u, a, ab bf16 [n][top_k + 1][inter]
 * (gate, up, activation, its act_quant in w2's fragment order); o bf16
 * [n][top_k + 1][dim]; counters u32: up [n·top_k + 1][inter/32] (grid.y <=
 * n·top_k + 1), down [dim/32], the fused launch's ready [n·top_k + 1]; route
 * int32 as above. */
static dsv4i_gpu_moe_tiled_carve tiled_layout(const dsv4i_gpu_moe *m, int32_t n_tok) {
  const size_t n = (size_t)n_tok, slots = (size_t)m->top_k + 1, dim = (size_t)m->dim,
               inter = (size_t)m->inter, nk = n * (size_t)m->top_k;
  const size_t gy = nk + 1; /* >= the launch's grid.y; no n_experts (the workspace is sized without it) */
  dsv4i_gpu_moe_tiled_carve c;
  c.xb4 = 0;
  c.xb8 = c.xb4 + al(2 * n * dim);
  c.g = c.xb8 + al(2 * n * dim);
  c.u = c.g + al(2 * n * slots * inter);
  c.a = c.u + al(2 * n * slots * inter);
  c.ab = c.a + al(2 * n * slots * inter);
  c.o = c.ab + al(2 * n * slots * inter);
  c.cnt = c.o + al(2 * n * slots * dim);
  c.n_cnt = gy * (inter / 32) + dim / 32 + gy;
  c.route = c.cnt + al(4 * c.n_cnt);
  c.total = c.route + al(4 * (2 + 2 * (size_t)MOE_MAX_EXPERTS + nk));
  return c;
}

dsv4i_gpu_moe_tiled_carve dsv4i_gpu_moe_tiled_layout(const dsv4i_gpu_moe *m, int32_t n_tok) {
  return tiled_layout(m, n_tok);
}

size_t dsv4i_gpu_moe_scratch_bytes(const dsv4i_gpu_moe *m, int32_t n_tok) {
  const size_t a = moe_layout(m, n_tok).total, b = tiled_layout(m, n_tok).total;
  return a > b ? a : b;
}

static int expert_fmt(dsv4i_kfmt f) { /* kernels/gemv.cuh W_E4M3 / W_E2M1 */
  return f == DSV4I_KFMT_E4M3_UE8M0 ? 0 : f == DSV4I_KFMT_E2M1_UE8M0 ? 1 : -1;
}

/* rows 0: the whole layer into out; else (TP shards) the fp32 expert rows into rows. */
static dsv4_status experts(const dsv4i_gpu_ops *o, dsv4i_custream s, const dsv4i_gpu_moe *m,
                           int32_t n_tok, dsv4i_cuptr x, int64_t ldx, dsv4i_cuptr idx,
                           dsv4i_cuptr weight, dsv4i_cuptr scratch, dsv4i_cuptr out, int64_t ldo,
                           dsv4i_cuptr rows) {
  int fr = expert_fmt(m->fmt_routed), fs = expert_fmt(m->fmt_shared);
  if (n_tok < 0 || m->n_experts <= 0 || m->n_experts > MOE_MAX_EXPERTS || m->top_k <= 0 ||
      m->top_k > 16 || m->dim <= 0 || m->dim % 32 || m->inter <= 0 || m->inter % 32 ||
      ldx < m->dim || (!rows && ldo < m->dim) || (scratch & 255) || !m->w1 || !m->w2 || !m->w3 ||
      !m->s1 || !m->s2 || !m->s3)
    return dsv4i_error(DSV4_ERR_INVALID_ARG, "gpu moe_experts: sizes (experts <= 1024, "
                       "top_k <= 16), tables or scratch alignment");
  if (fr < 0 || (m->has_shared && fs < 0))
    return dsv4i_error(DSV4_ERR_UNSUPPORTED,
                       "gpu moe_experts: expert formats %s / %s; the kernels take fp8 "
                       "(e4m3+ue8m0) and MXFP4 (e2m1+ue8m0)",
                       dsv4i_kfmt_name(m->fmt_routed), dsv4i_kfmt_name(m->fmt_shared));
  if (m->dim / 32 > MOE_UP_KB || m->inter / 32 > MOE_DOWN_KB)
    return dsv4i_error(DSV4_ERR_UNSUPPORTED,
                       "gpu moe_experts: dim %d / inter %d; the kernels take dim <= %d and "
                       "inter <= %d", (int)m->dim, (int)m->inter, 32 * MOE_UP_KB,
                       32 * MOE_DOWN_KB);
  if (n_tok == 0) return DSV4_OK;
  if (n_tok > (1 << 24)) return dsv4i_error(DSV4_ERR_INVALID_ARG, "gpu moe_experts: n_tok %d", (int)n_tok);
  /* grid.y: the shared expert, then at most min(E, n·top_k) distinct routed ids */
  const int64_t nk = (int64_t)n_tok * m->top_k;
  const uint32_t gy = (uint32_t)((nk < m->n_experts ? nk : m->n_experts) + (m->has_shared ? 1 : 0));
  int n = n_tok, k = m->top_k, sh = m->has_shared ? 1 : 0, E = m->n_experts, dim = m->dim,
      inter = m->inter;
  float lim = m->swiglu_limit;
  dsv4i_cuptr w1 = m->w1, s1 = m->s1, w3 = m->w3, s3 = m->s3, w2 = m->w2, s2 = m->s2;
  long long lo = ldo;
  dsv4_status st;
  if (!o->cpu_order && o->moe_tiled && !rows) { /* TP shards' fp32 rows: the CPU-order kernels in both modes */
    const dsv4i_gpu_moe_tiled_carve c = tiled_layout(m, n_tok);
    dsv4i_cuptr xb4 = scratch + c.xb4, xb8 = scratch + c.xb8, g = scratch + c.g,
                u = scratch + c.u, a = scratch + c.a, ab = scratch + c.ab, ob = scratch + c.o,
                cup = scratch + c.cnt, route = scratch + c.route;
    /* the counters in use: up [gy][inter/32], down [dim/32], then the fused launch's ready [gy] */
    const size_t n_up = (size_t)gy * (size_t)(inter / 32);
    dsv4i_cuptr cdn = cup + 4 * (dsv4i_cuptr)n_up, crd = cdn + 4 * (dsv4i_cuptr)(dim / 32);
    const int fused = o->moe_fused && o->moe_updown_tiled < DSV4I_K_COUNT;
    int n_cnt = (int)(n_up + (size_t)dim / 32 + (fused ? gy : 0));
    long long lx = ldx;
    void *pp[] = {&n, &k, &E, &dim, &x, &lx, &idx, &xb4, &xb8, &route, &cup, &n_cnt};
    const uint64_t nb = ((uint64_t)n_tok * (uint64_t)(dim / 32) + 7) / 8 + 1;
    st = dsv4i_kreg_launch_grid(o->kr, o->moe_prep_tiled, (uint32_t)nb, 1, 1, 0, s, pp);
    if (st != DSV4_OK) return st;
    if (fused) { /* grid (max(inter/16, dim/32), 2·gy): up blocks, then down blocks */
      const uint32_t gx_up = (uint32_t)(inter / MOE_TILED_UP_ROWS), gx_dn = (uint32_t)(dim / MOE_TILED_DN_ROWS);
      void *pf[] = {&n, &k, &sh, &E, &dim, &inter, &fr, &fs, &lim, &xb4, &xb8, &route, &weight, &w1, &s1,
                    &w3, &s3, &g, &u, &a, &ab, &cup, &idx, &w2, &s2, &ob, &cdn, &crd, &out, &lo};
      return dsv4i_kreg_launch_grid(o->kr, o->moe_updown_tiled, gx_up > gx_dn ? gx_up : gx_dn, 2 * gy, 1,
                                    MOE_TILED_RING_BYTES, s, pf);
    }
    void *pu[] = {&n, &k, &sh, &E, &dim, &inter, &fr, &fs, &lim, &xb4, &xb8, &route, &weight,
                  &w1, &s1, &w3, &s3, &g, &u, &a, &ab, &cup};
    st = dsv4i_kreg_launch_grid(o->kr, o->moe_up_tiled, (uint32_t)(inter / MOE_TILED_UP_ROWS), gy,
                                1, MOE_TILED_RING_BYTES, s, pu);
    if (st != DSV4_OK) return st;
    void *pd[] = {&n, &k, &sh, &E, &dim, &inter, &fr, &fs, &ab, &idx, &route, &w2, &s2, &ob,
                  &cdn, &out, &lo};
    return dsv4i_kreg_launch_grid(o->kr, o->moe_down_tiled, (uint32_t)(dim / MOE_TILED_DN_ROWS),
                                  gy, 1, MOE_TILED_RING_BYTES, s, pd);
  }
  const moe_carve c = moe_layout(m, n_tok);
  dsv4i_cuptr xq = scratch + c.xq, sx = scratch + c.sx, aq = scratch + c.aq,
              sa = scratch + c.sa, ob = scratch + c.o, cnt = scratch + c.cnt,
              route = scratch + c.route;
  st = dsv4i_gpu_act_quant(o, s, n_tok, m->dim, x, ldx, xq, sx);
  if (st != DSV4_OK) return st;
  int n_cnt = (m->dim + MOE_DOWN_TILE - 1) / MOE_DOWN_TILE;
  void *pu[] = {&n, &k, &sh, &E, &dim, &inter, &fr, &fs, &lim, &xq, &sx, &idx, &weight,
                &w1, &s1, &w3, &s3, &aq, &sa, &route, &cnt, &n_cnt};
  st = dsv4i_kreg_launch_grid(o->kr, o->moe_up, (uint32_t)(inter / MOE_TILE), gy, 1, 0, s, pu);
  if (st != DSV4_OK) return st;
  void *pd[] = {&n, &k, &sh, &E, &dim, &inter, &fr, &fs, &aq, &sa, &idx, &route, &w2, &s2, &ob,
                &cnt, &out, &lo};
  void *pp[] = {&n, &k, &sh, &E, &dim, &inter, &fr, &fs, &aq, &sa, &idx, &route, &w2, &s2, &rows};
  return dsv4i_kreg_launch_grid(o->kr, rows ? o->moe_down_part : o->moe_down, (uint32_t)n_cnt, gy,
                                1, 0, s, rows ? pp : pd);
}

dsv4_status dsv4i_gpu_moe_experts(const dsv4i_gpu_ops *o, dsv4i_custream s,
                                  const dsv4i_gpu_moe *m, int32_t n_tok, dsv4i_cuptr x,
                                  int64_t ldx, dsv4i_cuptr idx, dsv4i_cuptr weight,
                                  dsv4i_cuptr scratch, dsv4i_cuptr out, int64_t ldo) {
  return experts(o, s, m, n_tok, x, ldx, idx, weight, scratch, out, ldo, 0);
}

dsv4_status dsv4i_gpu_moe_experts_part(const dsv4i_gpu_ops *o, dsv4i_custream s,
                                       const dsv4i_gpu_moe *m, int32_t n_tok, dsv4i_cuptr x,
                                       int64_t ldx, dsv4i_cuptr idx, dsv4i_cuptr weight,
                                       dsv4i_cuptr scratch, dsv4i_cuptr rows) {
  if (!rows) return dsv4i_error(DSV4_ERR_INVALID_ARG, "gpu moe_experts_part: no rows buffer");
  return experts(o, s, m, n_tok, x, ldx, idx, weight, scratch, 0, 0, rows);
}

size_t dsv4i_gpu_moe_rows_bytes(const dsv4i_gpu_moe *m, int32_t n_tok) {
  return 4 * (size_t)(n_tok > 0 ? n_tok : 0) * ((size_t)m->top_k + 1) * (size_t)m->dim;
}

dsv4_status dsv4i_gpu_moe_combine(const dsv4i_gpu_ops *o, dsv4i_custream s,
                                  const dsv4i_gpu_moe *m, int32_t n_tok, dsv4i_cuptr idx,
                                  dsv4i_cuptr rows, dsv4i_cuptr out, int64_t ldo) {
  if (n_tok < 0 || n_tok > (1 << 24) || m->n_experts <= 0 || m->n_experts > MOE_MAX_EXPERTS ||
      m->top_k <= 0 || m->top_k > 16 || m->dim <= 0 || ldo < m->dim || !rows || !out)
    return dsv4i_error(DSV4_ERR_INVALID_ARG, "gpu moe_combine: sizes or buffers");
  if (n_tok == 0) return DSV4_OK;
  int n = n_tok, k = m->top_k, sh = m->has_shared ? 1 : 0, E = m->n_experts, dim = m->dim;
  long long lo = ldo;
  void *p[] = {&n, &k, &sh, &E, &dim, &idx, &rows, &out, &lo};
  const uint64_t blocks = ((uint64_t)n_tok * (uint64_t)dim + 255) / 256;
  return dsv4i_kreg_launch_grid(o->kr, o->moe_combine, (uint32_t)blocks, 1, 1, 0, s, p);
}
