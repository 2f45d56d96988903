/* Launchers of the attention cache writers (kernels/attn_cache.cu) and the
 * dispatch decision of every attention op. */
#include "gpu/attn.h"

#include <string.h>

#include "model/config.h"

static dsv4_status pick(const dsv4i_kreg *kr, dsv4i_kop op, dsv4i_kfmt fmt, dsv4i_kernel_id *id) {
  return dsv4i_kreg_select(kr, op, fmt, DSV4I_KSHAPE_ANY, id);
}

dsv4_status dsv4i_gpu_attn_select(const dsv4i_kreg *kr, dsv4i_gpu_attn_kernels *out) {
  memset(out, 0, sizeof *out);
  dsv4_status st = pick(kr, DSV4I_KOP_ATTN_WINDOW_STORE, DSV4I_KFMT_E4M3_UE8M0, &out->window_store);
  if (st == DSV4_OK) st = pick(kr, DSV4I_KOP_ATTN_COMP_STORE, DSV4I_KFMT_E2M1_E4M3, &out->comp_store);
  if (st == DSV4_OK) st = pick(kr, DSV4I_KOP_ATTN_IDXK_STORE, DSV4I_KFMT_E2M1_UE8M0, &out->idxk_store);
  if (st == DSV4_OK) st = pick(kr, DSV4I_KOP_ATTN_COMPRESS_POOL, DSV4I_KFMT_F32, &out->compress_pool);
  if (st == DSV4_OK) st = pick(kr, DSV4I_KOP_ATTN_CSTATE_STORE, DSV4I_KFMT_F32, &out->cstate_store);
  if (st == DSV4_OK) st = pick(kr, DSV4I_KOP_ATTN_INDEX_SCORES, DSV4I_KFMT_E2M1_UE8M0, &out->index_scores);
  if (st == DSV4_OK) st = pick(kr, DSV4I_KOP_ATTN_TOPK, DSV4I_KFMT_F32, &out->topk);
  if (st == DSV4_OK) st = pick(kr, DSV4I_KOP_ATTN_TOPK_PART, DSV4I_KFMT_F32, &out->topk_part);
  if (st == DSV4_OK) st = pick(kr, DSV4I_KOP_ATTN_TOPK_MERGE, DSV4I_KFMT_F32, &out->topk_merge);
  if (st == DSV4_OK)
    st = pick(kr, DSV4I_KOP_ATTN_SPARSE_SPLIT, DSV4I_KFMT_E4M3_UE8M0, &out->sparse_split);
  if (st == DSV4_OK)
    st = pick(kr, DSV4I_KOP_ATTN_SPARSE_COMBINE, DSV4I_KFMT_F32, &out->sparse_combine);
  if (st == DSV4_OK)
    st = pick(kr, DSV4I_KOP_ATTN_SPARSE_TILED, DSV4I_KFMT_E4M3_UE8M0, &out->sparse_tiled);
  if (st == DSV4_OK) st = pick(kr, DSV4I_KOP_ATTN_WINDOW_STORE, DSV4I_KFMT_DS_MLA, &out->window_store_mla);
  if (st == DSV4_OK) st = pick(kr, DSV4I_KOP_ATTN_SPARSE_SPLIT, DSV4I_KFMT_DS_MLA, &out->sparse_split_mla);
  if (st == DSV4_OK) st = pick(kr, DSV4I_KOP_ATTN_SPARSE_TILED, DSV4I_KFMT_DS_MLA, &out->sparse_tiled_mla);
  if (st == DSV4_OK)
    st = dsv4i_kreg_select(kr, DSV4I_KOP_ATTN_SPARSE_SPLIT, DSV4I_KFMT_E4M3_UE8M0,
                           DSV4I_KSHAPE_TILED, &out->sparse_split_tord);
  if (st == DSV4_OK)
    st = dsv4i_kreg_select(kr, DSV4I_KOP_ATTN_SPARSE_SPLIT, DSV4I_KFMT_DS_MLA, DSV4I_KSHAPE_TILED,
                           &out->sparse_split_tord_mla);
  out->one_launch_max = DSV4I_GPU_ATTN_ONE_LAUNCH_MAX;
  if (st == DSV4_OK) out->kr = kr;
  return st;
}

/* blocks of the kernel's table size covering `threads` threads */
static dsv4_status launch_threads(const dsv4i_gpu_attn_kernels *k, dsv4i_kernel_id id,
                                  int64_t threads, dsv4i_custream stream, void **params) {
  if (threads <= 0) return DSV4_OK;
  const int64_t block = dsv4i_kernel_desc_get(id)->block;
  const int64_t grid = (threads + block - 1) / block;
  if (grid > INT32_MAX)
    return dsv4i_error(DSV4_ERR_INVALID_ARG, "%s: %lld threads is too many for one launch",
                       dsv4i_kernel_desc_get(id)->entry, (long long)threads);
  return dsv4i_kreg_launch(k->kr, id, (uint32_t)grid, 0, stream, params);
}

static dsv4_status check_dims(const char *what, int32_t n, int32_t dim, int32_t mult) {
  if (n < 0 || dim <= 0 || dim % mult != 0)
    return dsv4i_error(DSV4_ERR_INVALID_ARG, "%s: %d tokens of width %d (width must be a positive "
                       "multiple of %d)", what, (int)n, (int)dim, (int)mult);
  return DSV4_OK;
}

dsv4_status dsv4i_gpu_attn_window_check(const dsv4i_gpu_attn_kernels *k, const char *what,
                                        const dsv4i_gpu_kvtab *win, int32_t hd) {
  const int32_t nope = k->win_nope;
  if (nope < 0 || nope >= hd || nope % 32 != 0)
    return dsv4i_error(DSV4_ERR_INVALID_ARG, "%s: fp8_ds_mla NoPE dims %d for head_dim %d (a "
                       "multiple of 32 below it, or 0 for the native record)", what, (int)nope,
                       (int)hd);
  const int64_t want = nope ? dsv4i_kv_record_bytes_for(DSV4I_KVREC_WINDOW_DS_MLA, hd, hd - nope, 0)
                            : dsv4i_kv_record_bytes_for(DSV4I_KVREC_WINDOW, hd, 0, 0);
  if (win && win->pool && win->rec_bytes != want)
    return dsv4i_error(DSV4_ERR_INVALID_ARG, "%s: window records of %d bytes, the %s record at "
                       "head_dim %d is %lld", what, (int)win->rec_bytes,
                       nope ? "fp8_ds_mla" : "native", (int)hd, (long long)want);
  return DSV4_OK;
}

dsv4_status dsv4i_gpu_attn_window_store(const dsv4i_gpu_attn_kernels *k, dsv4i_custream stream,
                                        const dsv4i_gpu_kvtab *win, dsv4i_cuptr tok, int32_t n,
                                        int32_t hd, dsv4i_cuptr kv, dsv4i_cuptr kvw) {
  dsv4_status st = check_dims("attention window store", n, hd, 32);
  if (st == DSV4_OK) st = dsv4i_gpu_attn_window_check(k, "attention window store", win, hd);
  if (st != DSV4_OK) return st;
  dsv4i_gpu_kvtab w;
  memset(&w, 0, sizeof w);
  if (win) w = *win;
  int n_arg = n, hd_arg = hd, nope = k->win_nope;
  if (nope) { /* a warp per 64 values: the NoPE blocks, then the RoPE values */
    void *params[] = {&w, &tok, &n_arg, &hd_arg, &nope, &kv, &kvw};
    const int64_t warps = (int64_t)(nope + 63) / 64 + (hd - nope + 63) / 64;
    return launch_threads(k, k->window_store_mla, (int64_t)n * warps * 32, stream, params);
  }
  void *params[] = {&w, &tok, &n_arg, &hd_arg, &kv, &kvw};
  return launch_threads(k, k->window_store, (int64_t)n * hd, stream, params); /* a warp per 32 */
}

/* The records of the tokens completing a group (compressed KV, index keys): one launch
 * of `id` with `lanes` threads per record of `width` values. */
static dsv4_status group_store(const dsv4i_gpu_attn_kernels *k, dsv4i_kernel_id id,
                               const char *what, dsv4i_custream stream, const dsv4i_gpu_kvtab *tab,
                               dsv4i_cuptr tok, int32_t n, int32_t width, int32_t ratio,
                               int32_t values_per_lane, dsv4i_cuptr rows) {
  dsv4_status st = check_dims(what, n, width, 128);
  if (st == DSV4_OK && ratio < 1) st = dsv4i_error(DSV4_ERR_INVALID_ARG, "%s: ratio %d", what, (int)ratio);
  if (st != DSV4_OK) return st;
  dsv4i_gpu_kvtab c = *tab;
  int n_arg = n, w_arg = width, r_arg = ratio;
  void *params[] = {&c, &tok, &n_arg, &w_arg, &r_arg, &rows};
  return launch_threads(k, id, (int64_t)n * (width / values_per_lane), stream, params);
}

dsv4_status dsv4i_gpu_attn_comp_store(const dsv4i_gpu_attn_kernels *k, dsv4i_custream stream,
                                      const dsv4i_gpu_kvtab *comp, dsv4i_cuptr tok, int32_t n,
                                      int32_t hd, int32_t ratio, dsv4i_cuptr lat) {
  return group_store(k, k->comp_store, "compressed KV store", stream, comp, tok, n, hd, ratio, 16,
                     lat);
}

dsv4_status dsv4i_gpu_attn_idxk_store(const dsv4i_gpu_attn_kernels *k, dsv4i_custream stream,
                                      const dsv4i_gpu_kvtab *idxk, dsv4i_cuptr tok, int32_t n,
                                      int32_t ihd, int32_t ratio, dsv4i_cuptr key) {
  return group_store(k, k->idxk_store, "index key store", stream, idxk, tok, n, ihd, ratio, 32,
                     key);
}

dsv4_status dsv4i_gpu_attn_compress(const dsv4i_gpu_attn_kernels *k, dsv4i_custream stream,
                                    const dsv4i_gpu_kvtab *cstate, dsv4i_cuptr tok, int32_t n,
                                    int32_t hd, int32_t ratio, dsv4i_cuptr kk, dsv4i_cuptr gg,
                                    dsv4i_cuptr lat) {
  dsv4_status st = check_dims("compressor", n, hd, 1);
  if (st == DSV4_OK && (ratio < 2 || ratio > 8))
    st = dsv4i_error(DSV4_ERR_INVALID_ARG, "compressor: ratio %d outside 2..8", (int)ratio);
  if (st == DSV4_OK && cstate->ring < ratio)
    st = dsv4i_error(DSV4_ERR_INVALID_ARG, "compressor: state ring of %d slots for ratio %d",
                     (int)cstate->ring, (int)ratio);
  if (st != DSV4_OK) return st;
  dsv4i_gpu_kvtab c = *cstate;
  int n_arg = n, hd_arg = hd, r_arg = ratio;
  void *pool[] = {&c, &tok, &n_arg, &hd_arg, &r_arg, &kk, &gg, &lat};
  st = launch_threads(k, k->compress_pool, (int64_t)n * hd, stream, pool);
  void *store[] = {&c, &tok, &n_arg, &hd_arg, &kk, &gg};
  if (st == DSV4_OK) st = launch_threads(k, k->cstate_store, (int64_t)n * hd, stream, store);
  return st;
}
