/*
 * The one list of kernels: every PTX entry the library launches, with the
 * registry key it is dispatched by. Three things are generated from it:
 * the dsv4i_kernel_id enum and the registry table (kernel_registry.h/.c,
 * through the X-macros below) and the PTX modules the build compiles
 * (kernels/meson.build reads the module column of the X(...) rows, one row
 * per line, so a new kernels/<module>.cu needs only its rows here).
 *
 * Row: X(ID, OP, FMT, SHAPE, MIN_SM, MODULE, ENTRY, BLOCK)
 *   ID      suffix of DSV4I_K_<ID>, the index the hot path launches by
 *   OP      suffix of DSV4I_KOP_<OP>; FMT: of DSV4I_KFMT_<FMT>; SHAPE: of DSV4I_KSHAPE_<SHAPE>
 *   MIN_SM  lowest compute capability, major*10 + minor
 *   MODULE  kernels/<MODULE>.cu (one PTX module per file)
 *   ENTRY   extern "C" entry name in that module, dsv4_k_<op>_<dtype>[_<variant>]
 *   BLOCK   threads per block its launcher uses
 * Internal to lib/gpu.
 */
#ifndef DSV4I_KERNEL_LIST_H
#define DSV4I_KERNEL_LIST_H

/* Operations: X(OP, "printable name") */
#define DSV4I_KOPS(X)                                                                            \
  X(SELFTEST, "selftest")                                                                        \
  X(RMSNORM, "rmsnorm")                                                                          \
  X(EMBED_HC, "embed+hc")                                                                        \
  X(HC_MIXES, "hc_mixes")                                                                        \
  X(HC_SINKHORN, "hc_sinkhorn")                                                                  \
  X(HC_PRE, "hc_pre")                                                                            \
  X(HC_POST, "hc_post")                                                                          \
  X(HC_TAP, "hc_tap")                                                                            \
  X(HC_MIXES_SINKHORN, "hc_mixes+sinkhorn")                                                      \
  X(HC_PRE_RMSNORM, "hc_pre+rmsnorm")                                                            \
  X(HC_POST_PRE_RMSNORM, "hc_post+hc_pre+rmsnorm")                                               \
  X(RMSNORM_ROPE, "rmsnorm+rope")                                                                \
  X(HC_ENTRY, "hc_entry")                                                                        \
  X(ACT_QUANT, "act_quant")                                                                      \
  X(LINEAR, "linear")                                                                            \
  X(LINEAR_F32OUT, "linear_f32out")                                                              \
  X(ROPE, "rope")                                                                                \
  X(ARGMAX, "argmax")                                                                            \
  X(SAMPLE, "sample")                                                                            \
  X(ACCEPT, "accept")                                                                            \
  X(ROUTER, "router")                                                                            \
  X(MOE_UP, "moe_up")                                                                            \
  X(MOE_DOWN, "moe_down")                                                                        \
  X(MOE_DOWN_PART, "moe_down_part")                                                              \
  X(MOE_COMBINE, "moe_combine")                                                                  \
  X(CAST, "cast")                                                                                \
  X(MOE_PREP, "moe_prep")                                                                        \
  X(MOE_UPDOWN, "moe_up+down")                                                                   \
  X(ENGRAM_GATHER, "engram_gather")                                                              \
  X(ENGRAM_UPDATE, "engram_update")                                                              \
  X(DEQUANT, "dequant")                                                                          \
  X(ATTN_WINDOW_STORE, "attn_window_store")                                                      \
  X(ATTN_COMP_STORE, "attn_comp_store")                                                          \
  X(ATTN_IDXK_STORE, "attn_idxk_store")                                                          \
  X(ATTN_COMPRESS_POOL, "attn_compress_pool")                                                    \
  X(ATTN_CSTATE_STORE, "attn_cstate_store")                                                      \
  X(ATTN_INDEX_SCORES, "attn_index_scores")                                                      \
  X(ATTN_TOPK, "attn_topk")                                                                      \
  X(ATTN_TOPK_PART, "attn_topk_part")                                                            \
  X(ATTN_TOPK_MERGE, "attn_topk_merge")                                                          \
  X(ATTN_SPARSE_SPLIT, "attn_sparse_split")                                                      \
  X(ATTN_SPARSE_COMBINE, "attn_sparse_combine")                                                  \
  X(ATTN_SPARSE_TILED, "attn_sparse_tiled")                                                      \
  X(DSPARK_MARKOV, "dspark_markov")

/* Kernels (see above). One row per line: kernels/meson.build parses them. */
#define DSV4I_KERNELS(X)                                                                         \
  X(SELFTEST_E4M3_UE8M0, SELFTEST, E4M3_UE8M0, ANY, 80, selftest, dsv4_k_selftest_e4m3_ue8m0, 256) \
  X(RMSNORM_BF16, RMSNORM, BF16, ANY, 80, norm, dsv4_k_rmsnorm_bf16, 128)                         \
  X(RMSNORM_BF16_TILED, RMSNORM, BF16, TILED, 80, norm, dsv4_k_rmsnorm_bf16_tiled, 256)          \
  X(EMBED_HC_BF16, EMBED_HC, BF16, ANY, 80, hc, dsv4_k_embed_hc_bf16, 256)                        \
  X(HC_MIXES_F32, HC_MIXES, F32, ANY, 80, hc, dsv4_k_hc_mixes_f32, 256)                           \
  X(HC_SINKHORN_F32, HC_SINKHORN, F32, ANY, 80, hc, dsv4_k_hc_sinkhorn_f32, 128)                  \
  X(HC_MIXES_F32_TILED, HC_MIXES, F32, TILED, 80, hc, dsv4_k_hc_mixes_f32_tiled, 256)             \
  X(HC_SINKHORN_F32_LANES, HC_SINKHORN, F32, TILED, 80, hc, dsv4_k_hc_sinkhorn_f32_lanes, 128)     \
  X(HC_MIXES_SINKHORN_F32_TILED, HC_MIXES_SINKHORN, F32, TILED, 80, hc, dsv4_k_hc_mixes_sinkhorn_f32_tiled, 256) \
  X(HC_PRE_RMSNORM_BF16_TILED, HC_PRE_RMSNORM, BF16, TILED, 80, norm, dsv4_k_hc_pre_rmsnorm_bf16_tiled, 256) \
  X(HC_POST_PRE_RMSNORM_BF16_TILED, HC_POST_PRE_RMSNORM, BF16, TILED, 80, norm, dsv4_k_hc_post_pre_rmsnorm_bf16_tiled, 256) \
  X(RMSNORM_ROPE_BF16_TILED, RMSNORM_ROPE, BF16, TILED, 80, norm, dsv4_k_rmsnorm_rope_bf16_tiled, 256) \
  X(HC_ENTRY_TILED, HC_ENTRY, BF16, TILED, 80, hc, dsv4_k_hc_entry_tiled, 256)                   \
  X(HC_PRE_BF16, HC_PRE, BF16, ANY, 80, hc, dsv4_k_hc_pre_bf16, 256)                              \
  X(HC_POST_BF16, HC_POST, BF16, ANY, 80, hc, dsv4_k_hc_post_bf16, 256)                           \
  X(HC_TAP_BF16, HC_TAP, BF16, ANY, 80, hc, dsv4_k_hc_tap_bf16, 256)                              \
  X(ACT_QUANT_E4M3, ACT_QUANT, E4M3_UE8M0, ANY, 80, linear, dsv4_k_act_quant_e4m3, 256)           \
  X(LINEAR_E4M3, LINEAR, E4M3_UE8M0, DECODE, 80, linear, dsv4_k_linear_e4m3_ue8m0, 256)           \
  X(LINEAR_E2M1, LINEAR, E2M1_UE8M0, DECODE, 80, linear, dsv4_k_linear_e2m1_ue8m0, 128)           \
  X(LINEAR_E4M3_WARP, LINEAR, E4M3_UE8M0, DECODE_WARP, 80, linear, dsv4_k_linear_e4m3_ue8m0_warp, 256) \
  X(LINEAR_E2M1_WARP, LINEAR, E2M1_UE8M0, DECODE_WARP, 80, linear, dsv4_k_linear_e2m1_ue8m0_warp, 256) \
  X(LINEAR_BF16, LINEAR, BF16, DECODE, 80, linear, dsv4_k_linear_bf16, 128)                       \
  X(LINEAR_BF16_F32OUT, LINEAR_F32OUT, BF16, DECODE, 80, linear, dsv4_k_linear_bf16_f32out, 128)  \
  X(LINEAR_F32_F32OUT, LINEAR_F32OUT, F32, DECODE, 80, linear, dsv4_k_linear_f32_f32out, 128)     \
  X(LINEAR_BF16_TILED, LINEAR, BF16, TILED, 80, linear_tiled, dsv4_k_linear_bf16_tiled, 256)      \
  X(LINEAR_BF16_F32OUT_TILED, LINEAR_F32OUT, BF16, TILED, 80, linear_tiled, dsv4_k_linear_bf16_f32out_tiled, 256) \
  X(ROPE_BF16, ROPE, BF16, ANY, 80, rope, dsv4_k_rope_bf16, 256)                                  \
  X(ARGMAX_F32, ARGMAX, F32, ANY, 80, sample, dsv4_k_argmax_f32, 1024)                            \
  X(SAMPLE_F32, SAMPLE, F32, ANY, 80, sample, dsv4_k_sample_f32, 1024)                            \
  X(ACCEPT_F32, ACCEPT, F32, ANY, 80, sample, dsv4_k_accept_f32, 1024)                            \
  X(ROUTER_F32, ROUTER, F32, ANY, 80, router, dsv4_k_router_topk_f32, 256)                       \
  X(MOE_UP, MOE_UP, E2M1_UE8M0, DECODE, 80, moe, dsv4_k_moe_up, 320)                              \
  X(MOE_DOWN, MOE_DOWN, E2M1_UE8M0, DECODE, 80, moe, dsv4_k_moe_down, 288)                       \
  X(MOE_DOWN_PART, MOE_DOWN_PART, E2M1_UE8M0, DECODE, 80, moe, dsv4_k_moe_down_part, 288)        \
  X(MOE_COMBINE, MOE_COMBINE, BF16, ANY, 80, moe, dsv4_k_moe_combine, 256)                       \
  X(LINEAR_E4M3_F32OUT, LINEAR_F32OUT, E4M3_UE8M0, DECODE, 80, linear, dsv4_k_linear_e4m3_ue8m0_f32out, 128) \
  X(CAST_F32_BF16, CAST, F32, ANY, 80, linear, dsv4_k_cast_f32_bf16, 256)                        \
  X(MOE_PREP_TILED, MOE_PREP, E2M1_UE8M0, TILED, 80, moe_tiled, dsv4_k_moe_prep_tiled, 256)      \
  X(MOE_UP_TILED, MOE_UP, E2M1_UE8M0, TILED, 80, moe_tiled, dsv4_k_moe_up_e2m1_tiled, 128)       \
  X(MOE_DOWN_TILED, MOE_DOWN, E2M1_UE8M0, TILED, 80, moe_tiled, dsv4_k_moe_down_e2m1_tiled, 128) \
  X(MOE_UPDOWN_TILED, MOE_UPDOWN, E2M1_UE8M0, TILED, 80, moe_tiled, dsv4_k_moe_updown_e2m1_tiled, 128) \
  X(ENGRAM_GATHER, ENGRAM_GATHER, E4M3_UE8M0, ANY, 80, engram, dsv4_k_engram_gather, 128)          \
  X(ENGRAM_UPDATE, ENGRAM_UPDATE, BF16, ANY, 80, engram, dsv4_k_engram_update, 256)              \
  X(ACT_QUANT_E4M3_F16, ACT_QUANT, E4M3_UE8M0, TILED, 80, linear_mma, dsv4_k_act_quant_e4m3_f16, 256) \
  X(LINEAR_E4M3_TILED, LINEAR, E4M3_UE8M0, TILED, 80, linear_mma, dsv4_k_linear_e4m3_ue8m0_tiled, 256) \
  X(DEQUANT_E4M3_BF16, DEQUANT, E4M3_UE8M0, ANY, 80, linear, dsv4_k_dequant_e4m3_bf16, 256)      \
  X(ATTN_WINDOW_STORE_E4M3, ATTN_WINDOW_STORE, E4M3_UE8M0, ANY, 80, attn_cache, dsv4_k_attn_window_store_e4m3, 256) \
  X(ATTN_WINDOW_STORE_DS_MLA, ATTN_WINDOW_STORE, DS_MLA, ANY, 80, attn_cache, dsv4_k_attn_window_store_ds_mla, 256) \
  X(ATTN_COMP_STORE_E2M1, ATTN_COMP_STORE, E2M1_E4M3, ANY, 80, attn_cache, dsv4_k_attn_comp_store_e2m1, 256) \
  X(ATTN_IDXK_STORE_E2M1, ATTN_IDXK_STORE, E2M1_UE8M0, ANY, 80, attn_cache, dsv4_k_attn_idxk_store_e2m1, 128) \
  X(ATTN_COMPRESS_POOL_F32, ATTN_COMPRESS_POOL, F32, ANY, 80, attn_cache, dsv4_k_attn_compress_pool_f32, 256) \
  X(ATTN_CSTATE_STORE_F32, ATTN_CSTATE_STORE, F32, ANY, 80, attn_cache, dsv4_k_attn_cstate_store_f32, 256) \
  X(ATTN_INDEX_SCORES_E2M1, ATTN_INDEX_SCORES, E2M1_UE8M0, ANY, 80, attn_indexer, dsv4_k_attn_index_scores_e2m1, 128) \
  X(ATTN_TOPK_F32, ATTN_TOPK, F32, ANY, 80, attn_indexer, dsv4_k_attn_topk_f32, 512) \
  X(ATTN_TOPK_PART_F32, ATTN_TOPK_PART, F32, ANY, 80, attn_indexer, dsv4_k_attn_topk_part_f32, 512) \
  X(ATTN_TOPK_MERGE_F32, ATTN_TOPK_MERGE, F32, ANY, 80, attn_indexer, dsv4_k_attn_topk_merge_f32, 512) \
  X(ATTN_SPARSE_SPLIT_E4M3, ATTN_SPARSE_SPLIT, E4M3_UE8M0, ANY, 80, attn_sparse, dsv4_k_attn_sparse_split_e4m3, 128) \
  X(ATTN_SPARSE_SPLIT_DS_MLA, ATTN_SPARSE_SPLIT, DS_MLA, ANY, 80, attn_sparse, dsv4_k_attn_sparse_split_ds_mla, 128) \
  X(ATTN_SPARSE_SPLIT_E4M3_TILED, ATTN_SPARSE_SPLIT, E4M3_UE8M0, TILED, 80, attn_sparse, dsv4_k_attn_sparse_split_e4m3_tiled, 128) \
  X(ATTN_SPARSE_SPLIT_DS_MLA_TILED, ATTN_SPARSE_SPLIT, DS_MLA, TILED, 80, attn_sparse, dsv4_k_attn_sparse_split_ds_mla_tiled, 128) \
  X(ATTN_SPARSE_COMBINE_F32, ATTN_SPARSE_COMBINE, F32, ANY, 80, attn_sparse, dsv4_k_attn_sparse_combine_f32, 128) \
  X(ATTN_SPARSE_TILED_E4M3, ATTN_SPARSE_TILED, E4M3_UE8M0, ANY, 80, attn_sparse_tiled, dsv4_k_attn_sparse_tiled_e4m3, 256) \
  X(ATTN_SPARSE_TILED_DS_MLA, ATTN_SPARSE_TILED, DS_MLA, ANY, 80, attn_sparse_tiled, dsv4_k_attn_sparse_tiled_ds_mla, 256) \
  X(DSPARK_MARKOV_BF16, DSPARK_MARKOV, BF16, ANY, 80, dspark, dsv4_k_dspark_markov_bf16, 256)

#endif /* DSV4I_KERNEL_LIST_H */
