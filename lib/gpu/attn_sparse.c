/* Launcher of the sparse attention with sink. Default mode: the tiled kernel
 * (kernels/attn_sparse_tiled.cu) for calls of up to one_launch_max tokens,
 * else the split pass in the same summation order and the combine
 * (kernels/attn_sparse.cu): the same bits either way. CPU-order mode: the
 * split pass in the CPU's order for Σp, and the combine. Each per slice of
 * tokens, the slice as large as the workspace and the kernel's flag table
 * allow. */
#include "gpu/attn.h"

static int32_t n_blocks(int32_t window, int32_t sel_ld) {
  return (window + sel_ld + DSV4I_GPU_ATTN_BLOCK - 1) / DSV4I_GPU_ATTN_BLOCK;
}

/* f32 per token: block max and Σp [nblk][H] each, partial outputs [nblk][H][hd] */
static size_t ws_per_tok(int32_t H, int32_t hd, int32_t window, int32_t sel_ld) {
  return (size_t)n_blocks(window, sel_ld) * (size_t)H * (2 + (size_t)hd) * sizeof(float);
}

size_t dsv4i_gpu_attn_sparse_ws(int32_t n_heads, int32_t head_dim, int32_t window,
                                int32_t sel_ld, int32_t n_tok) {
  return ws_per_tok(n_heads, head_dim, window, sel_ld) * (size_t)(n_tok > 0 ? n_tok : 0);
}

/* Tokens per launch: as many as the workspace (per bytes a token) and the
 * kernels' flag table (one flag per token, head group and entry block) take. */
static dsv4_status token_slice(const dsv4i_gpu_sparse_args *a, size_t per, int nblk, int n_hg,
                               const char *kernel, int64_t *slice) {
  const int64_t flag_max = DSV4I_GPU_ATTN_SPLIT_FLAGS / ((int64_t)nblk * n_hg);
  if (flag_max < 1)
    return dsv4i_error(DSV4_ERR_UNSUPPORTED, "sparse attention: %d entry blocks x %d head groups "
                       "exceed the %s's %d flags", nblk, n_hg, kernel, DSV4I_GPU_ATTN_SPLIT_FLAGS);
  const int64_t ws_max = (int64_t)(a->ws_bytes / per);
  *slice = ws_max < flag_max ? ws_max : flag_max;
  return DSV4_OK;
}

/* The tiled kernel (kernels/attn_sparse_tiled.cu): one launch per slice of tokens, score
 * blocks (64 entries x 16 heads) then output blocks (16 heads x 32 dims); workspace per
 * token: P bf16 [H][nent], block maxima, running maxima, f and sum p f32 [H][nblk] each. */
static dsv4_status sparse_tiled(const dsv4i_gpu_attn_kernels *k, dsv4i_custream stream,
                                const dsv4i_gpu_sparse_args *a, int32_t sel_ld, int32_t width) {
  const int32_t H = a->n_heads, hd = a->head_dim;
  const int nblk = n_blocks(a->window, width);
  int nent = nblk * DSV4I_GPU_ATTN_BLOCK;
  int n_hg = (H + DSV4I_GPU_ATTN_SPLIT_HEADS - 1) / DSV4I_GPU_ATTN_SPLIT_HEADS;
  const size_t per = (size_t)H * (size_t)nent * 2u + (size_t)H * (size_t)nblk * 16u;
  int64_t slice_max = 0;
  const dsv4_status sst = token_slice(a, per, nblk, n_hg, "tiled kernel", &slice_max);
  if (sst != DSV4_OK) return sst;
  int Hh = H, hdd = hd, nope = k->win_nope, win_arg = a->window, sld = sel_ld;
  float scale = a->scale;
  dsv4i_gpu_kvtab win = a->win, comp = a->comp;
  const dsv4i_kernel_id kid = nope ? k->sparse_tiled_mla : k->sparse_tiled;
  dsv4_status st = DSV4_OK;
  for (int32_t t0 = 0; t0 < a->n && st == DSV4_OK; t0 += (int32_t)slice_max) {
    int nsi = (int)(a->n - t0 < slice_max ? a->n - t0 : slice_max);
    dsv4i_cuptr tok = a->tok + (dsv4i_cuptr)t0 * sizeof(dsv4i_gpu_attn_tok);
    dsv4i_cuptr q = a->q + (dsv4i_cuptr)t0 * (dsv4i_cuptr)H * (dsv4i_cuptr)hd * 2u;
    dsv4i_cuptr o = a->o + (dsv4i_cuptr)t0 * (dsv4i_cuptr)H * (dsv4i_cuptr)hd * 2u;
    dsv4i_cuptr sel = a->sel ? a->sel + (dsv4i_cuptr)t0 * (dsv4i_cuptr)sel_ld * 4u : 0;
    dsv4i_cuptr kvw = a->kvw, sink = a->sink, ws = a->ws;
    void *p[] = {&win, &comp, &tok, &nsi, &nent, &n_hg, &Hh, &hdd, &nope, &win_arg, &q, &kvw,
                 &sel, &sld, &scale, &sink, &ws, &o};
    const int64_t grid = (int64_t)nsi * n_hg * (nblk + hd / 32);
    st = dsv4i_kreg_launch(k->kr, kid, (uint32_t)grid, 0, stream, p);
  }
  return st;
}

dsv4_status dsv4i_gpu_attn_sparse(const dsv4i_gpu_attn_kernels *k, dsv4i_custream stream,
                                  const dsv4i_gpu_sparse_args *a) {
  const int32_t H = a->n_heads, hd = a->head_dim, sel_ld = a->sel ? a->sel_ld : 0;
  const int32_t width = sel_ld > a->dspark_block ? sel_ld : a->dspark_block; /* past the window */
  if (hd <= 0 || hd % 128 != 0 || hd > 1024)
    return dsv4i_error(DSV4_ERR_UNSUPPORTED, "sparse attention: head_dim %d (the kernels take "
                       "multiples of 128 up to 1024)", (int)hd);
  if (a->n < 0 || H < 1 || a->window < 1 || sel_ld < 0 || a->dspark_block < 0 || !a->sink ||
      !a->q || !a->o || !a->kvw)
    return dsv4i_error(DSV4_ERR_INVALID_ARG, "sparse attention: n %d, %d heads, window %d, "
                       "selection width %d, or a NULL buffer", (int)a->n, (int)H, (int)a->window,
                       (int)sel_ld);
  const dsv4_status wst = dsv4i_gpu_attn_window_check(k, "sparse attention", &a->win, hd);
  if (wst != DSV4_OK) return wst;
  if (a->n == 0) return DSV4_OK;
  const size_t per = ws_per_tok(H, hd, a->window, width);
  if ((size_t)(a->ws_bytes / per) < 1)
    return dsv4i_error(DSV4_ERR_INVALID_ARG, "sparse attention: workspace of %zu bytes, one token "
                       "needs %zu", a->ws_bytes, per);
  if (!k->cpu_order && a->n <= k->one_launch_max) return sparse_tiled(k, stream, a, sel_ld, width);
  int nblk = n_blocks(a->window, width);
  int n_hg = (H + DSV4I_GPU_ATTN_SPLIT_HEADS - 1) / DSV4I_GPU_ATTN_SPLIT_HEADS;
  int64_t slice_max = 0;
  const dsv4_status sst = token_slice(a, per, nblk, n_hg, "split pass", &slice_max);
  if (sst != DSV4_OK) return sst;
  int Hh = H, hdd = hd, nope = k->win_nope, win_arg = a->window, sld = sel_ld;
  float scale = a->scale;
  dsv4i_gpu_kvtab win = a->win, comp = a->comp;
  const dsv4i_kernel_id kid = k->cpu_order ? (nope ? k->sparse_split_mla : k->sparse_split)
                                           : (nope ? k->sparse_split_tord_mla : k->sparse_split_tord);
  dsv4_status st = DSV4_OK;
  for (int32_t t0 = 0; t0 < a->n && st == DSV4_OK; t0 += (int32_t)slice_max) {
    const int64_t ns = a->n - t0 < slice_max ? a->n - t0 : slice_max;
    int nsi = (int)ns;
    dsv4i_cuptr tok = a->tok + (dsv4i_cuptr)t0 * sizeof(dsv4i_gpu_attn_tok);
    dsv4i_cuptr q = a->q + (dsv4i_cuptr)t0 * (dsv4i_cuptr)H * (dsv4i_cuptr)hd * 2u;
    dsv4i_cuptr o = a->o + (dsv4i_cuptr)t0 * (dsv4i_cuptr)H * (dsv4i_cuptr)hd * 2u;
    dsv4i_cuptr sel = a->sel ? a->sel + (dsv4i_cuptr)t0 * (dsv4i_cuptr)sel_ld * 4u : 0;
    dsv4i_cuptr kvw = a->kvw, sink = a->sink;
    const dsv4i_cuptr nbh = (dsv4i_cuptr)ns * (dsv4i_cuptr)nblk * (dsv4i_cuptr)H;
    dsv4i_cuptr bmax = a->ws, psum = bmax + nbh * 4u, part = psum + nbh * 4u;
    void *sp[] = {&win, &comp, &tok, &nsi, &nblk, &n_hg, &Hh, &hdd, &nope, &win_arg, &q, &kvw,
                  &sel, &sld, &scale, &bmax, &psum, &part};
    st = dsv4i_kreg_launch(k->kr, kid, (uint32_t)(ns * nblk * n_hg), 0, stream, sp);
    void *cb[] = {&nblk, &Hh, &hdd, &bmax, &psum, &part, &sink, &o};
    if (st == DSV4_OK)
      st = dsv4i_kreg_launch(k->kr, k->sparse_combine, (uint32_t)(ns * H), 0, stream, cb);
  }
  return st;
}
