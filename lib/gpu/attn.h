/*
 * Attention on the device (spec §5.4, caches §5.8): host launchers of the
 * kernels in kernels/attn_*.cu. The CUDA backend calls them for one layer
 * of one step, in the CPU backend's order (lib/cpu/attn_forward.c):
 *   window KV rows (RoPE'd by the dense kernels) -> dsv4i_gpu_attn_window_qdq
 *   (QDQ rows for attention; records written after attending);
 *   KV source: compressor (ratio > 1: dsv4i_gpu_attn_compress; ratio 1: the
 *   dense norm of wkv) -> index keys (dsv4i_gpu_attn_idxk_store) ->
 *   indexer (dsv4i_gpu_attn_index_scores, dsv4i_gpu_attn_candidates on the
 *   candidate source, dsv4i_gpu_attn_topk) -> compressed KV
 *   (dsv4i_gpu_attn_comp_store) -> dsv4i_gpu_attn_sparse ->
 *   dsv4i_gpu_attn_window_store -> inverse RoPE and wo_a / wo_b (dense).
 *
 * Every launcher enqueues on `stream` and returns: no host synchronisation,
 * no allocation, no device-to-host copy, grids fixed by the arguments (not
 * by positions), so a step can be captured in a graph and replayed with
 * other positions. Pointers (dsv4i_cuptr) are device addresses; shapes use
 * the names of lib/cpu/attention.h (n tokens of the call, H heads, hd
 * head_dim, ihd index_head_dim). Tokens: dsv4i_gpu_attn_tok [n] in device
 * memory (lib/gpu/attn_abi.h); cache tables: dsv4i_gpu_kvtab.
 *
 * Numerics equal the CPU backend's rounding points (tests/gpu/test_gpu_attn.c
 * states the tolerances): record encoders, QDQ, index scores and top-k are
 * bit-exact; attention and the compressor pooling differ from the CPU only
 * in fp32 summation order and in expf's last bits.
 *
 * Internal to lib/gpu and the CUDA backend. Handle-exclusive per stream.
 */
#ifndef DSV4I_GPU_ATTN_H
#define DSV4I_GPU_ATTN_H

#include "gpu/attn_abi.h"
#include "gpu/kernel_registry.h"

/** Kernel ids of the attention ops, chosen once per engine. */
typedef struct dsv4i_gpu_attn_kernels {
  const dsv4i_kreg *kr; /**< borrowed registry */
  dsv4i_kernel_id window_store, comp_store, idxk_store, compress_pool, cstate_store;
  dsv4i_kernel_id index_scores, topk, sparse_split, sparse_combine, sparse_tiled;
  dsv4i_kernel_id topk_part, topk_merge; /**< the top-k over several blocks per token */
  /** the same ops over fp8_ds_mla window records */
  dsv4i_kernel_id window_store_mla, sparse_split_mla, sparse_tiled_mla;
  /** the split pass in the tiled kernel's summation order (default mode), both records */
  dsv4i_kernel_id sparse_split_tord, sparse_split_tord_mla;
  /** Default mode: a call of at most this many tokens runs the one-launch tiled kernel,
   *  a larger one the split pass in the same order + the combine: the same bits (tested),
   *  so the choice is speed only (docs/gpu-attention.md "Speed": the roofline's rows).
   *  dsv4i_gpu_attn_select sets DSV4I_GPU_ATTN_ONE_LAUNCH_MAX; tests force either. */
  int32_t one_launch_max;
  /** Window record format (docs/gpu-attention.md "The fp8_ds_mla record"): 0, the native
   *  MXFP8 record (head_dim E4M3 codes, a UE8M0 per 32: 528 B at release dims); > 0, the
   *  fp8_ds_mla record with this many NoPE dims (head_dim − rope_head_dim, a multiple of 32:
   *  E4M3 codes with a UE8M0 per 64, the RoPE dims as bf16; 584 B). Set at engine creation
   *  from the engine's kv_format; the window launchers pick their kernel by it. */
  int32_t win_nope;
  /** 1: attention by the split pass + combine, the CPU's summation order for Σp and the
   *  block recurrence (DSV4_ENGINE_F_GPU_CPU_ORDER); 0 (default): the tiled order, by the
   *  tiled kernel or the split pass in its order (one_launch_max; docs/gpu-attention.md,
   *  "Numerics"). Neither mode is bit-exact (expf, mma dots). */
  int32_t cpu_order;
} dsv4i_gpu_attn_kernels;

/** Default mode: calls of up to this many tokens take the one-launch tiled kernel (the
 * session-5 rows: 26.7 us against the split pass's ~42 us at 1 token, slower from 4). */
#define DSV4I_GPU_ATTN_ONE_LAUNCH_MAX 2

/**
 * Dispatch decision for every attention op (at engine creation).
 * @return DSV4_OK; DSV4_ERR_UNSUPPORTED naming op, format and arch.
 */
dsv4_status dsv4i_gpu_attn_select(const dsv4i_kreg *kr, dsv4i_gpu_attn_kernels *out);

/**
 * act_quant QDQ of this call's window KV rows and their ring records
 * (spec §5.4 step 2). Writes kvw always; the records only when `win` is
 * non-NULL (the CPU order: QDQ rows before attending, records after — call
 * once with win = NULL before dsv4i_gpu_attn_sparse and once with the table
 * after, or once with both where no token of the call attends to a slot it
 * overwrites). The DSpark stages' main_kv rows go into their rings the same
 * way (tokens at the target positions, spec §6.1).
 * With k->win_nope > 0 the records and kvw are the fp8_ds_mla ones (NoPE dims QDQ'd in
 * blocks of 64, RoPE dims unchanged).
 * @param kv  bf16 [n][hd] post-RoPE rows; kvw bf16 [n][hd] or 0.
 * @return DSV4_OK; DSV4_ERR_INVALID_ARG (hd not a multiple of 32, n < 0, win_nope not a
 *         multiple of 32 below hd, a table whose record size is not the format's);
 *         DSV4_ERR_DEVICE / DSV4_ERR_DEVICE_LOST (launch failed).
 */
dsv4_status dsv4i_gpu_attn_window_store(const dsv4i_gpu_attn_kernels *k, dsv4i_custream stream,
                                        const dsv4i_gpu_kvtab *win, dsv4i_cuptr tok, int32_t n,
                                        int32_t hd, dsv4i_cuptr kv, dsv4i_cuptr kvw);

/** The window format's checks for a launcher named `what`: k->win_nope a multiple of 32
 * below hd (or 0), and a window table's (win may be NULL or have no pool) record size
 * that of the format at head_dim hd.
 * @return DSV4_OK; DSV4_ERR_INVALID_ARG with a message. */
dsv4_status dsv4i_gpu_attn_window_check(const dsv4i_gpu_attn_kernels *k, const char *what,
                                        const dsv4i_gpu_kvtab *win, int32_t hd);

/** Compressed-KV records of the tokens completing a group ((pos + 1) mod
 * ratio == 0), record (pos + 1)/ratio − 1. lat: bf16 [n][hd] RoPE'd latents.
 * hd a multiple of 128. Statuses as dsv4i_gpu_attn_window_store. */
dsv4_status dsv4i_gpu_attn_comp_store(const dsv4i_gpu_attn_kernels *k, dsv4i_custream stream,
                                      const dsv4i_gpu_kvtab *comp, dsv4i_cuptr tok, int32_t n,
                                      int32_t hd, int32_t ratio, dsv4i_cuptr lat);

/** Index-key records of the tokens completing a group. key: bf16 [n][ihd]
 * RoPE'd keys, ihd a multiple of 128. Statuses as above. */
dsv4_status dsv4i_gpu_attn_idxk_store(const dsv4i_gpu_attn_kernels *k, dsv4i_custream stream,
                                      const dsv4i_gpu_kvtab *idxk, dsv4i_cuptr tok, int32_t n,
                                      int32_t ihd, int32_t ratio, dsv4i_cuptr key);

/**
 * Ratio 2..8 compressor (spec §5.4 3a): pooled bf16 latents (before
 * compressor.norm) of the tokens completing a group, members before the
 * call from the state ring; then every token's (k, g) into the state ring.
 * @param kk, gg f32 [n][hd] wkv(x), wgate(x) of the call's tokens.
 * @param lat    bf16 [n][hd]: rows of emitting tokens written.
 * @return DSV4_OK; DSV4_ERR_INVALID_ARG (ratio outside 2..8); launch errors.
 */
dsv4_status dsv4i_gpu_attn_compress(const dsv4i_gpu_attn_kernels *k, dsv4i_custream stream,
                                    const dsv4i_gpu_kvtab *cstate, dsv4i_cuptr tok, int32_t n,
                                    int32_t hd, int32_t ratio, dsv4i_cuptr kk, dsv4i_cuptr gg,
                                    dsv4i_cuptr lat);

/** Arguments of dsv4i_gpu_attn_index_scores. */
typedef struct dsv4i_gpu_index_args {
  dsv4i_gpu_kvtab idxk;   /**< index keys of this layer's key source */
  dsv4i_cuptr tok;        /**< dsv4i_gpu_attn_tok [n] */
  int32_t n, n_heads, head_dim, ratio; /**< head_dim must be 128; n_heads 1..64 */
  float wscale;           /**< index_head_dim^-0.5 · n_heads^-0.5 as fp32 */
  dsv4i_cuptr q;          /**< bf16 [n][n_heads][head_dim] post-RoPE, before the MXFP4 QDQ */
  dsv4i_cuptr w;          /**< bf16 [n][n_heads] weights_proj(x) */
  dsv4i_cuptr cand;       /**< int32 [n][cand_ld] kept candidate blocks, or 0 */
  int32_t cand_ld, cand_bs;
  dsv4i_cuptr scores;     /**< f32 [n][score_ld] out: keys [0, (pos+1)/ratio) */
  int64_t score_ld;       /**< >= the largest visible key count of the call */
} dsv4i_gpu_index_args;

/** Indexer scores (spec §5.4 3b steps 2-5, 7): bit-exact with the CPU.
 * @return DSV4_OK; DSV4_ERR_UNSUPPORTED (head_dim != 128, n_heads > 64);
 *         DSV4_ERR_INVALID_ARG; launch errors. */
dsv4_status dsv4i_gpu_attn_index_scores(const dsv4i_gpu_attn_kernels *k, dsv4i_custream stream,
                                        const dsv4i_gpu_index_args *a);

/** Top-k (spec §5.4 3b step 8) of each token's visible scores: the best
 * min(k_max, (pos+1)/ratio), lower index first on ties, ascending, −1
 * padded: out int32 [n][out_ld], out_ld >= k_max. Exact (the CPU's
 * selection) in every mode. ws: 0, or a workspace of at least
 * dsv4i_gpu_attn_topk_ws_bytes(n, score_ld, k_max) bytes: rows long enough
 * (score_ld >= 16·k_max) then take several blocks per token, a part kernel
 * and a merge (kernels/attn_indexer.cu); with ws 0 one block per token.
 * @return DSV4_OK; DSV4_ERR_INVALID_ARG (sizes; ws_bytes too small); launch
 *         errors. */
dsv4_status dsv4i_gpu_attn_topk(const dsv4i_gpu_attn_kernels *k, dsv4i_custream stream,
                                dsv4i_cuptr tok, int32_t n, int32_t ratio, dsv4i_cuptr scores,
                                int64_t score_ld, int32_t k_max, dsv4i_cuptr out, int32_t out_ld,
                                dsv4i_cuptr ws, size_t ws_bytes);

/** Workspace bytes of dsv4i_gpu_attn_topk for n tokens (0 when rows of
 * score_ld keys take one block per token). */
size_t dsv4i_gpu_attn_topk_ws_bytes(int32_t n, int64_t score_ld, int32_t k_max);

/** Candidate blocks (spec §5.4 3b step 6) of each token, as
 * dsv4i_attn_candidates: bws f32 [n][bws_ld] scratch (bws_ld >= the visible
 * block count), out int32 [n][out_ld] (out_ld >= n_keep). */
dsv4_status dsv4i_gpu_attn_candidates(const dsv4i_gpu_attn_kernels *k, dsv4i_custream stream,
                                      dsv4i_cuptr tok, int32_t n, int32_t ratio,
                                      dsv4i_cuptr scores, int64_t score_ld, int32_t bs,
                                      int32_t n_keep, dsv4i_cuptr bws, int64_t bws_ld,
                                      dsv4i_cuptr out, int32_t out_ld);

/** Arguments of dsv4i_gpu_attn_sparse. */
typedef struct dsv4i_gpu_sparse_args {
  dsv4i_gpu_kvtab win;    /**< this layer's window ring */
  dsv4i_gpu_kvtab comp;   /**< compressed KV of its KV source (unused when sel == 0) */
  dsv4i_cuptr tok;        /**< dsv4i_gpu_attn_tok [n] */
  int32_t n, n_heads, head_dim, window; /**< head_dim a multiple of 128, <= 1024 */
  dsv4i_cuptr q;          /**< bf16 [n][n_heads][head_dim] post-RoPE queries */
  dsv4i_cuptr kvw;        /**< bf16 [n][head_dim] this call's QDQ'd window rows */
  dsv4i_cuptr sel;        /**< int32 [n][sel_ld] compressed selection, or 0 (ratio 0) */
  int32_t sel_ld;
  int32_t dspark_block;   /**< B when tokens have the DSpark layout −B, else 0 */
  float scale;            /**< softmax scale, fp32(head_dim^-0.5) */
  dsv4i_cuptr sink;       /**< f32 [n_heads] */
  dsv4i_cuptr o;          /**< bf16 [n][n_heads][head_dim] out */
  dsv4i_cuptr ws;         /**< workspace, ws_bytes (>= dsv4i_gpu_attn_sparse_ws(.., 1)) */
  size_t ws_bytes;
} dsv4i_gpu_sparse_args;

/** Workspace bytes for n_tok tokens at once; the launcher works through the
 * call in slices of as many tokens as the workspace holds. */
size_t dsv4i_gpu_attn_sparse_ws(int32_t n_heads, int32_t head_dim, int32_t window,
                                int32_t sel_ld, int32_t n_tok);
/* (sel_ld here: the larger of the selection width and dspark_block) */

/** Sparse attention with sink of every token (spec §5.4 step 4; DSpark
 * draft blocks, spec §6.1, through the token layout −B). Window records in
 * the format of k->win_nope.
 * @return DSV4_OK; DSV4_ERR_UNSUPPORTED (head_dim); DSV4_ERR_INVALID_ARG
 *         (workspace too small, bad counts, a window table whose record size is
 *         not the format's); launch errors. */
dsv4_status dsv4i_gpu_attn_sparse(const dsv4i_gpu_attn_kernels *k, dsv4i_custream stream,
                                  const dsv4i_gpu_sparse_args *a);

#endif /* DSV4I_GPU_ATTN_H */
