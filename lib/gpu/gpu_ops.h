/*
 * Host launchers of the dense kernels (kernels/norm.cu, hc.cu, linear.cu,
 * rope.cu, sample.cu, router.cu). Each takes device pointers and a stream,
 * checks its host-side sizes, and launches one kernel: no allocation, no
 * synchronisation, so every launcher may run inside a captured graph.
 *
 * Numerics: each launcher names its CPU oracle (lib/cpu/cpu_ops.h) and
 * whether the result equals it bit for bit in CPU order (cpu_order = 1) and
 * in the default mode (its tiled kernel, docs/gpu-dense.md "Numerics
 * modes"); tests/gpu/test_cuda_ops.c checks every one against the oracle.
 *
 * Conventions: bf16 as uint16_t bits; row-major [rows][ld]; "ld" strides in
 * elements. All pointers are device addresses (dsv4i_cuptr).
 * Returns: DSV4_OK; DSV4_ERR_INVALID_ARG (sizes; nothing launched);
 * DSV4_ERR_UNSUPPORTED (a shape the kernel does not take, named);
 * DSV4_ERR_DEVICE / DSV4_ERR_DEVICE_LOST (the launch failed).
 */
#ifndef DSV4I_GPU_OPS_H
#define DSV4I_GPU_OPS_H

#include "gpu/kernel_registry.h"

/** The kernels an engine launches, selected once at engine creation. */
typedef struct dsv4i_gpu_ops {
  const dsv4i_kreg *kr;
  dsv4i_kernel_id rmsnorm, embed_hc, hc_mixes, hc_sinkhorn, hc_pre, hc_post, hc_tap, act_quant, rope,
      argmax, sample, accept, router, moe_up, moe_down, engram_gather, engram_update, dequant;
  dsv4i_kernel_id moe_down_part, moe_combine, cast; /**< TP shards (docs/distributed.md) */
  /** the MoE step's tiled kernels (kernels/moe_tiled.cu), used unless cpu_order
   * (while moe_tiled is set) */
  dsv4i_kernel_id moe_prep_tiled, moe_up_tiled, moe_down_tiled;
  /** moe_up_tiled and moe_down_tiled as one launch (the same bits) */
  dsv4i_kernel_id moe_updown_tiled;
  /** 1 (dsv4i_gpu_ops_init's value): dsv4i_gpu_moe_experts runs the tiled
   * kernels in the default mode. 0: the CPU-order kernels in both modes. */
  int32_t moe_tiled;
  /** 1: the tiled up and down projections as one launch (moe_updown_tiled);
   * 0 (dsv4i_gpu_ops_init's value): two launches. Same bits either way; the
   * device run measured one launch 4 % faster at 1 token and 6-12 % slower
   * from 4 tokens (bench/RESULTS.md, session 6, the MoE step). */
  int32_t moe_fused;
  /** The default mode's kernels (KSHAPE_TILED rows), launched unless cpu_order. */
  dsv4i_kernel_id rmsnorm_tiled, hc_mixes_tiled, hc_sinkhorn_lanes;
  /** fused pairs of the default mode, bit for bit the unfused tiled pair:
   * hc_mixes_tiled + Sinkhorn, hc_pre + rmsnorm_tiled */
  dsv4i_kernel_id hc_mixes_sinkhorn_tiled, hc_pre_rmsnorm_tiled;
  /** fused triples / pairs of the default mode: hc_post + hc_pre + rmsnorm_tiled,
   * rmsnorm_tiled + RoPE (bit for bit the unfused launches) */
  dsv4i_kernel_id hc_post_pre_rmsnorm_tiled, rmsnorm_rope_tiled;
  /** the attention sublayer's entry: hc_mixes + Sinkhorn beside hc_pre + RMSNorm */
  dsv4i_kernel_id hc_entry_tiled;
  /** bf16 weights (kernels/linear_tiled.cu, mma.sync): bf16 out, fp32 out */
  dsv4i_kernel_id linear_bf16_tiled, linear_bf16_f32out_tiled;
  dsv4i_kernel_id linear[DSV4I_KFMT_COUNT_];        /**< by weight format, bf16 out */
  dsv4i_kernel_id linear_warp[DSV4I_KFMT_COUNT_];   /**< fp8 / fp4, one warp per row */
  /** fp8 / fp4 linears with at most this many rows use linear_warp. Default 0 (off): the warp-per-row kernels pass the ptxas check
   * but have not run on a device yet; tests/gpu/test_cuda_ops.c checks both
   * variants. */
  int32_t warp_rows_max;
  /** Rows per block of the fp8 kernel (8, 16 or 32); 0 (default): chosen by
   * the row count. Any value gives the same bits (tests run all three). */
  int32_t fp8_row_tile;
  /** bf16 -> fp32 linear: 0 (default) uses one-warp blocks with a deep ring
   * for fewer than 16,896 rows (the router gate), 4-warp blocks otherwise (the
   * head); 1 / -1 force one or the other (tests). Same bits either way. */
  int32_t f32out_narrow;
  dsv4i_kernel_id linear_f32out[DSV4I_KFMT_COUNT_]; /**< BF16 / F32 weights, fp32 out; E4M3:
                                                     *   linear_q_f32 (TP shards) */
  /** Numerics mode (docs/gpu-dense.md "Numerics modes"). 0 (default): every
   * launcher that has a tiled kernel launches it (fp32 sums in a fixed order
   * that depends only on the op's shape: deterministic, batch invariant,
   * within the derived bound of the CPU oracle). 1: the exact kernels, each
   * summing in the CPU oracle's order, equal to it bit for bit. Set from
   * DSV4_ENGINE_F_GPU_CPU_ORDER when the CUDA engine is created (after
   * dsv4i_gpu_ops_init, which sets 0); tests set it directly. */
  int32_t cpu_order;
  /** fp8 linear on the tensor cores (kernels/linear_mma.cu) and its act_quant prepass. */
  dsv4i_kernel_id linear_tiled, act_quant_f16;
  /** 1 (default): dsv4i_gpu_linear_q8 runs the tiled fp8 kernel in the
   * default mode; 0: the CPU-order kernels in both modes. */
  int32_t fp8_tiled;
  /** Tiled fp8 linear: up to this many tokens (<= 8) each block quantises its
   * activations itself (one launch); more use the prepass. Default 0: on an
   * H200 the fused path measured 1.8-3.7x slower than prepass + kernel
   * (bench/RESULTS.md). Same bits either way (tests run both). */
  int32_t q8_fuse_max;
} dsv4i_gpu_ops;

/**
 * Select every kernel for kr's device (the engine-creation dispatch), both
 * the exact and the tiled ones; cpu_order = 0 (the default mode).
 * @return DSV4_OK; DSV4_ERR_UNSUPPORTED naming op, format, shape and arch.
 */
dsv4_status dsv4i_gpu_ops_init(const dsv4i_kreg *kr, dsv4i_gpu_ops *ops);

/** A weight matrix on the device, in its checkpoint format [rows = out][cols = in]. */
typedef struct dsv4i_gpu_weight {
  dsv4i_kfmt fmt;   /**< F32, BF16, E4M3_UE8M0 (fp8) or E2M1_UE8M0 (MXFP4) */
  int32_t rows, cols;
  int64_t ld;       /**< row stride of data: elements (bytes for E2M1: cols/2) */
  int64_t scale_ld; /**< row stride of scale bytes: fp8 [ceil(rows/32)][ceil(cols/32)],
                         fp4 [rows][cols/32] */
  dsv4i_cuptr data, scale; /**< scale 0 for F32/BF16 */
} dsv4i_gpu_weight;

/** RMSNorm (dsv4i_cpu_rmsnorm): bit for bit in CPU order; the default mode's
 * kernel sums Σx² in a fixed tree (the derived bound). x bf16 [n][ldx], w bf16
 * [dim], y bf16 [n][ldy] (may be x with ldy == ldx). */
dsv4_status dsv4i_gpu_rmsnorm(const dsv4i_gpu_ops *o, dsv4i_custream s, int32_t n_tok,
                              int32_t dim, dsv4i_cuptr x, int64_t ldx, dsv4i_cuptr w, float eps,
                              dsv4i_cuptr y, int64_t ldy);

/** Embedding + HC expansion (spec §5.1; the CPU backend's embed, bit for
 * bit): h bf16 [n][hc][dim] = embed[tok[t]] in every copy, pre f32 [n][hc]
 * one-hot copy 0. tok int32 [n] (device; ids already checked < vocab). */
dsv4_status dsv4i_gpu_embed_hc(const dsv4i_gpu_ops *o, dsv4i_custream s, int32_t n_tok,
                               int32_t hc, int32_t dim, dsv4i_cuptr tok, dsv4i_cuptr embed,
                               dsv4i_cuptr h, dsv4i_cuptr pre);

/** hc_mixes (dsv4i_cpu_hc_mixes): bit for bit in CPU order; the default
 * mode's kernel splits hc·dim over blocks (fixed chunk order; the derived
 * bound) for hc·dim <= 32768. h bf16 [n][hc][dim]; fn f32 [(2+hc)hc][hc·dim];
 * mixes f32 [n][(2+hc)hc]. hc <= 4. */
dsv4_status dsv4i_gpu_hc_mixes(const dsv4i_gpu_ops *o, dsv4i_custream s, int32_t n_tok,
                               int32_t hc, int32_t dim, dsv4i_cuptr h, dsv4i_cuptr fn, float eps,
                               dsv4i_cuptr mixes);

/** hc_split_sinkhorn, dsv4i_cpu_hc_split_sinkhorn bit for bit in both modes
 * (shared code, model/ref_math.h; the default mode's kernel runs a token on
 * hc·hc lanes, same order, for hc <= 4). scale f32 [3], base f32 [(2+hc)hc]
 * (device). */
dsv4_status dsv4i_gpu_hc_sinkhorn(const dsv4i_gpu_ops *o, dsv4i_custream s, int32_t n_tok,
                                  int32_t hc, dsv4i_cuptr mixes, dsv4i_cuptr scale,
                                  dsv4i_cuptr base, int32_t iters, float hc_eps, dsv4i_cuptr pre,
                                  dsv4i_cuptr post, dsv4i_cuptr comb);

/** hc_mixes then hc_split_sinkhorn (mixes, pre, post, comb as the two launchers
 * above give them, bit for bit, in both modes). In the default mode with hc <= 4
 * and hc·dim <= 32768 one launch (dsv4_k_hc_mixes_sinkhorn_f32_tiled: the
 * Sinkhorn in the mixes' last block); otherwise the two launchers. */
dsv4_status dsv4i_gpu_hc_mixes_sinkhorn(const dsv4i_gpu_ops *o, dsv4i_custream s, int32_t n_tok,
                                        int32_t hc, int32_t dim, dsv4i_cuptr h, dsv4i_cuptr fn,
                                        float eps, dsv4i_cuptr scale, dsv4i_cuptr base,
                                        int32_t iters, float hc_eps, dsv4i_cuptr mixes,
                                        dsv4i_cuptr pre, dsv4i_cuptr post, dsv4i_cuptr comb);

/** hc_pre then RMSNorm of its row (dsv4i_cpu_hc_pre, dsv4i_cpu_rmsnorm): y bf16
 * [n][dim] = rmsnorm(hc_pre(h, pre), w), the two launchers' bits in both modes
 * (hc_pre's bf16 x is the norm's input). In the default mode one launch
 * (dsv4_k_hc_pre_rmsnorm_bf16_tiled; x is never written); in CPU order
 * hc_pre into y, then the exact RMSNorm in place. h bf16 [n][hc][dim], pre f32
 * [n][hc], w bf16 [dim]; hc <= 16. */
dsv4_status dsv4i_gpu_hc_pre_rmsnorm(const dsv4i_gpu_ops *o, dsv4i_custream s, int32_t n_tok,
                                     int32_t hc, int32_t dim, dsv4i_cuptr h, dsv4i_cuptr pre,
                                     dsv4i_cuptr w, float eps, dsv4i_cuptr y);

/** hc_post, then hc_pre and RMSNorm of the result: hout bf16 [n][hc][dim] =
 * hc_post(xa, res, post, comb) (hout may be res), y bf16 [n][dim] =
 * rmsnorm(hc_pre(hout, pre), w): the bits of the three launchers
 * (dsv4i_cpu_hc_post, dsv4i_cpu_hc_pre, dsv4i_cpu_rmsnorm) in both modes. In the
 * default mode one launch (dsv4_k_hc_post_pre_rmsnorm_bf16_tiled); in CPU order
 * the three exact kernels. xa bf16 [n][dim]; post, pre f32 [n][hc]; comb f32
 * [n][hc][hc]; w bf16 [dim]; hc <= 16. */
dsv4_status dsv4i_gpu_hc_post_pre_rmsnorm(const dsv4i_gpu_ops *o, dsv4i_custream s, int32_t n_tok,
                                          int32_t hc, int32_t dim, dsv4i_cuptr xa, dsv4i_cuptr res,
                                          dsv4i_cuptr post, dsv4i_cuptr comb, dsv4i_cuptr hout,
                                          dsv4i_cuptr pre, dsv4i_cuptr w, float eps, dsv4i_cuptr y);

/** RMSNorm, then forward RoPE on the last 2·n_freq elements of each row (the
 * launchers dsv4i_gpu_rmsnorm + dsv4i_gpu_rope with one vector, their bits in
 * both modes; position pos[t]). In the default mode one launch
 * (dsv4_k_rmsnorm_rope_bf16_tiled). x bf16 [n][ldx], y bf16 [n][ldy] (may be x
 * with ldy == ldx), w bf16 [dim], freqs f32 [n_freq] (<= 128, 2·n_freq <= dim),
 * pos int32 [n]. */
dsv4_status dsv4i_gpu_rmsnorm_rope(const dsv4i_gpu_ops *o, dsv4i_custream s, int32_t n_tok,
                                   int32_t dim, dsv4i_cuptr x, int64_t ldx, dsv4i_cuptr w, float eps,
                                   dsv4i_cuptr y, int64_t ldy, int32_t n_freq, dsv4i_cuptr freqs,
                                   dsv4i_cuptr pos);

/** The attention sublayer's entry: dsv4i_gpu_hc_mixes_sinkhorn (mixes, pre,
 * post, comb of h) and dsv4i_gpu_hc_pre_rmsnorm (y bf16 [n][dim] from h and the
 * previous sublayer's pre_in, weight w, norm_eps), their bits in both modes. In
 * the default mode, where the first launcher takes one launch (hc <= 4, hc·dim <=
 * 32768), both share one launch (dsv4_k_hc_entry_tiled: independent blocks side
 * by side); otherwise the two launchers. */
dsv4_status dsv4i_gpu_hc_entry(const dsv4i_gpu_ops *o, dsv4i_custream s, int32_t n_tok, int32_t hc,
                               int32_t dim, dsv4i_cuptr h, dsv4i_cuptr fn, float eps, dsv4i_cuptr scale,
                               dsv4i_cuptr base, int32_t iters, float hc_eps, dsv4i_cuptr mixes,
                               dsv4i_cuptr pre, dsv4i_cuptr post, dsv4i_cuptr comb, dsv4i_cuptr pre_in,
                               dsv4i_cuptr w, float norm_eps, dsv4i_cuptr y);

/** hc_pre, dsv4i_cpu_hc_pre bit for bit: y bf16 [n][dim]. */
dsv4_status dsv4i_gpu_hc_pre(const dsv4i_gpu_ops *o, dsv4i_custream s, int32_t n_tok,
                             int32_t hc, int32_t dim, dsv4i_cuptr h, dsv4i_cuptr pre,
                             dsv4i_cuptr y);

/** hc_post, dsv4i_cpu_hc_post bit for bit; out may be res. */
dsv4_status dsv4i_gpu_hc_post(const dsv4i_gpu_ops *o, dsv4i_custream s, int32_t n_tok,
                              int32_t hc, int32_t dim, dsv4i_cuptr x, dsv4i_cuptr res,
                              dsv4i_cuptr post, dsv4i_cuptr comb, dsv4i_cuptr out);

/** DSpark tap (the CPU backend's tap, bit for bit): y bf16 rows at y + t·ldy =
 * bf16(Σ_c h[t][c] / hc), h bf16 [n][hc][dim]. */
dsv4_status dsv4i_gpu_hc_tap(const dsv4i_gpu_ops *o, dsv4i_custream s, int32_t n_tok, int32_t hc,
                             int32_t dim, dsv4i_cuptr h, dsv4i_cuptr y, int64_t ldy);

/** act_quant decoded for the linears, dsv4i_cpu_act_quant bit for bit:
 * x bf16 [n][ldx] -> xq f32 [n][k], sx f32 [n][k/32]; k % 32 == 0. */
dsv4_status dsv4i_gpu_act_quant(const dsv4i_gpu_ops *o, dsv4i_custream s, int32_t n_tok,
                                int32_t k, dsv4i_cuptr x, int64_t ldx, dsv4i_cuptr xq,
                                dsv4i_cuptr sx);

/** fp8 / MXFP4 linear on act_quant output, dsv4i_cpu_linear_q bit for bit
 * (every kernel variant, see warp_rows_max and fp8_row_tile): y bf16 [n][ldy].
 * w->cols % 32 == 0. */
dsv4_status dsv4i_gpu_linear_q(const dsv4i_gpu_ops *o, dsv4i_custream s,
                               const dsv4i_gpu_weight *w, int32_t n_tok, dsv4i_cuptr xq,
                               dsv4i_cuptr sx, dsv4i_cuptr y, int64_t ldy);

/** fp8 linear on act_quant output with fp32 y [n][ldy], unrounded (a TP rank's partial
 * sums of wo_b over its share of K; dsv4i_cpu_linear_q's sum, K blocks ascending, before its
 * bf16 rounding). w->fmt E4M3_UE8M0, w->cols % 32 == 0. */
dsv4_status dsv4i_gpu_linear_q_f32(const dsv4i_gpu_ops *o, dsv4i_custream s,
                                   const dsv4i_gpu_weight *w, int32_t n_tok, dsv4i_cuptr xq,
                                   dsv4i_cuptr sx, dsv4i_cuptr y, int64_t ldy);

/** y bf16 [n] = x f32 [n] rounded to nearest even (dsv4i_f32_to_bf16, bit for bit). */
dsv4_status dsv4i_gpu_cast_bf16(const dsv4i_gpu_ops *o, dsv4i_custream s, int64_t n,
                                dsv4i_cuptr x, dsv4i_cuptr y);

/** fp8 linear on bf16 rows x [n][ldx] (what the engine runs for every fp8
 * projection): with o->cpu_order (or !o->fp8_tiled), dsv4i_gpu_act_quant into (xq, sx) and
 * dsv4i_gpu_linear_q, bit-equal to dsv4i_cpu_act_quant + dsv4i_cpu_linear_q;
 * otherwise the tiled kernel (kernels/linear_mma.cu: the same products and
 * rounding points, the fp32 sums in another fixed order; the bound in
 * docs/gpu-dense.md), which uses xq (n·cols·4 bytes) as scratch beyond
 * o->q8_fuse_max tokens and never writes sx. y bf16 [n][ldy]. A shape the
 * tiled kernel does not take (K > 65,536) runs the CPU-order kernels. */
dsv4_status dsv4i_gpu_linear_q8(const dsv4i_gpu_ops *o, dsv4i_custream s, const dsv4i_gpu_weight *w,
                                int32_t n_tok, dsv4i_cuptr x, int64_t ldx, dsv4i_cuptr xq,
                                dsv4i_cuptr sx, dsv4i_cuptr y, int64_t ldy);

/** The act_quant of x bf16 [n][ldx] (cols % 32 == 0) in the form
 * dsv4i_gpu_linear_q8_pre reads for an fp8 weight of cols columns in this
 * mode: with o->cpu_order (or !o->fp8_tiled, or cols > 65,536)
 * dsv4i_gpu_act_quant's xq f32 [n][cols] and sx f32 [n][cols/32]; otherwise
 * kernels/linear_mma.cu's prepass into xq alone (fp16 records [n][cols], then
 * the scales f32 [n][ldsx], ldsx = cols/32 rounded up to 8: at most
 * n·cols·4 bytes; xq 16-byte aligned), sx untouched. Same bits as the
 * quantisation inside dsv4i_gpu_linear_q8. */
dsv4_status dsv4i_gpu_q8_quant(const dsv4i_gpu_ops *o, dsv4i_custream s, int32_t n_tok, int32_t cols,
                               dsv4i_cuptr x, int64_t ldx, dsv4i_cuptr xq, dsv4i_cuptr sx);

/** dsv4i_gpu_linear_q8 on activations dsv4i_gpu_q8_quant already quantised
 * (n_tok tokens, cols = w->cols, in the same mode): one act_quant for every
 * projection of the same rows (wq_a and wkv; wq_b and the indexer's wq_b).
 * Bit for bit what dsv4i_gpu_linear_q8 gives on those rows. */
dsv4_status dsv4i_gpu_linear_q8_pre(const dsv4i_gpu_ops *o, dsv4i_custream s, const dsv4i_gpu_weight *w,
                                    int32_t n_tok, dsv4i_cuptr xq, dsv4i_cuptr sx, dsv4i_cuptr y,
                                    int64_t ldy);

/** bf16 / fp32 weight on bf16 rows x [n][ldx]: out_f32 = 0 gives
 * dsv4i_cpu_linear (BF16 weight, bf16 y), 1 gives dsv4i_cpu_linear_f32
 * (fp32 y), both bit for bit in CPU order. The default mode runs BF16
 * weights on tensor cores (kernels/linear_tiled.cu: fixed order of K, the
 * bound stated there) when x and ldx are 16-byte aligned. w->cols % 32 == 0. */
dsv4_status dsv4i_gpu_linear(const dsv4i_gpu_ops *o, dsv4i_custream s, const dsv4i_gpu_weight *w,
                             int32_t n_tok, dsv4i_cuptr x, int64_t ldx, dsv4i_cuptr y,
                             int64_t ldy, int out_f32);

/** The grouped bf16 projection wo_a (spec §5.4 step 6; the CPU's
 * attn_output loop of dsv4i_cpu_linear over row groups, bit for bit in CPU
 * order; the default mode: the tiled kernel as dsv4i_gpu_linear) in one
 * launch: w [n_groups·R][cols] bf16, group g's rows read x[t][g·cols ..
 * (g+1)·cols) and write y[t][g·R .. (g+1)·R). R % 128 == 0 (else
 * DSV4_ERR_UNSUPPORTED). x bf16 [n][ldx], y bf16 [n][ldy]. */
dsv4_status dsv4i_gpu_linear_grouped(const dsv4i_gpu_ops *o, dsv4i_custream s,
                                     const dsv4i_gpu_weight *w, int32_t n_groups, int32_t n_tok,
                                     dsv4i_cuptr x, int64_t ldx, dsv4i_cuptr y, int64_t ldy);

/** fp8 weight -> dense bf16 [rows][cols] (wo_a at load; dsv4i_wview_dequant_bf16
 * bit for bit). */
dsv4_status dsv4i_gpu_dequant_bf16(const dsv4i_gpu_ops *o, dsv4i_custream s,
                                   const dsv4i_gpu_weight *w, dsv4i_cuptr out);

/** RoPE in place, dsv4i_rope_cs + dsv4i_cpu_rope (cos/sin in double on the
 * device: equal to the CPU's table except where CUDA's double cos/sin and
 * glibc's round to different fp32 values, which the test measures).
 * freqs f32 [n_freq] (<= 128), pos int32 [n] (< 2^24). */
dsv4_status dsv4i_gpu_rope(const dsv4i_gpu_ops *o, dsv4i_custream s, int32_t n_tok, int32_t n_vec,
                           int32_t n_freq, dsv4i_cuptr x, int64_t tok_stride, int64_t vec_stride,
                           dsv4i_cuptr freqs, dsv4i_cuptr pos, int inverse);

/** Greedy pick per row, dsv4i_cpu_argmax exactly. logits f32 [n][ld]; out int32 [n]. */
dsv4_status dsv4i_gpu_argmax(const dsv4i_gpu_ops *o, dsv4i_custream s, int32_t n_rows,
                             int32_t vocab, dsv4i_cuptr logits, int64_t ld, dsv4i_cuptr out);

/** Sampling per row (kernels/sample.cu says how it can differ from
 * dsv4i_cpu_sample): temperature f32 [n], seed u64 [n], counter u64 [n].
 * Only ids < vocab are read and drawn (ld may be larger). A row with a NaN or
 * +inf among them, or without a finite value, gets out = -1 - i (i: the first
 * NaN / +inf, or vocab when all are -inf), where the CPU's sample gives -1. */
dsv4_status dsv4i_gpu_sample(const dsv4i_gpu_ops *o, dsv4i_custream s, int32_t n_rows,
                             int32_t vocab, dsv4i_cuptr logits, int64_t ld, dsv4i_cuptr temperature,
                             dsv4i_cuptr seed, dsv4i_cuptr counter, dsv4i_cuptr out);

/** Sampled verification's accept rule on one row (dsv4i_accept_row, model/accept.h;
 * kernels/sample.cu says where it can differ: double sums as trees). logits f32 [V]
 * (V: the ids that may be drawn), q f32 [V] the draft's logits or 0 (one-hot at d);
 * out int32 [2] = accepted, token. tags: DSV4I_TAG_ACCEPT / DSV4I_TAG_RESID. */
dsv4_status dsv4i_gpu_accept(const dsv4i_gpu_ops *o, dsv4i_custream s, int32_t V,
                             dsv4i_cuptr logits, dsv4i_cuptr q, float T, float Tq, int32_t d,
                             uint64_t seed, int64_t pos, uint64_t tag_accept, uint64_t tag_resid,
                             dsv4i_cuptr out);

/** Router selection after the gate GEMM (dsv4i_cpu_router's per-token part;
 * kernels/router.cu says how it can differ): z f32 [n][ldz]; bias, bias_vl
 * f32 [E] (bias_vl may be 0); use_vl u8 [n] or 0; idx int32 [n][k], weight
 * f32 [n][k]. E <= 1024, k <= 16. */
dsv4_status dsv4i_gpu_router(const dsv4i_gpu_ops *o, dsv4i_custream s, int32_t n_tok,
                             int32_t n_experts, int32_t top_k, dsv4i_cuptr z, int64_t ldz,
                             dsv4i_cuptr bias, dsv4i_cuptr bias_vl, dsv4i_cuptr use_vl,
                             int32_t norm_topk_prob, float route_scale, dsv4i_cuptr idx,
                             dsv4i_cuptr weight);

/** One MoE layer's experts on the device (spec §5.5). */
typedef struct dsv4i_gpu_moe {
  int32_t n_experts, top_k;  /**< routed experts, slots per token (<= 16) */
  int32_t dim, inter;        /**< model dim, moe_inter_dim (both % 32 == 0) */
  int32_t has_shared;        /**< 1: the shared expert is entry n_experts of the tables */
  float swiglu_limit;        /**< <= 0 disables the clamps */
  dsv4i_kfmt fmt_routed, fmt_shared; /**< E2M1_UE8M0 (MXFP4) or E4M3_UE8M0 (fp8) */
  /** device arrays [n_experts + 1] of device addresses: dense checkpoint-layout
   * w1/w3 [inter][dim], w2 [dim][inter] and their UE8M0 scales */
  dsv4i_cuptr w1, s1, w2, s2, w3, s3;
} dsv4i_gpu_moe;

/** Scratch bytes dsv4i_gpu_moe_experts needs for up to n_tok tokens (either mode). */
size_t dsv4i_gpu_moe_scratch_bytes(const dsv4i_gpu_moe *m, int32_t n_tok);

/** The tiled MoE kernels' shared memory above 48 KB (cuFuncSetAttribute, once
 * per loaded module; dsv4i_gpu_ops_init calls it). */
dsv4_status dsv4i_gpu_moe_tiled_init(const dsv4i_kreg *kr, const dsv4i_gpu_ops *o);

/** Byte offsets in the scratch of the tiled kernels' stages (tests read them):
 * g, u, a bf16 [n][top_k + 1][inter] (gate and up projections, SwiGLU
 * activation, written for the (token, slot) pairs that run), o bf16
 * [n][top_k + 1][dim] (each expert's rows); n_cnt counters. */
typedef struct dsv4i_gpu_moe_tiled_carve {
  size_t xb4, xb8, g, u, a, ab, o, cnt, n_cnt, route, total;
} dsv4i_gpu_moe_tiled_carve;
dsv4i_gpu_moe_tiled_carve dsv4i_gpu_moe_tiled_layout(const dsv4i_gpu_moe *m, int32_t n_tok);

/**
 * Routed experts + shared expert for given routing, in three launches: act_quant
 * of x, up + SwiGLU + act_quant of the activations, down + the per-token sum in
 * ascending expert id, shared last; split over all SMs by (expert, row tile).
 * Default (o->cpu_order == 0): kernels/moe_tiled.cu, tensor cores, fp32 sums in
 * a fixed order that depends only on dim / inter (deterministic, batch
 * invariant; within the derived bound of dsv4i_cpu_moe_experts, docs/gpu-dense.md
 * "Numerics modes"); cpu_order: kernels/moe.cu, dsv4i_cpu_moe_experts bit for bit. idx int32 [n][top_k] (id < 0: skipped; duplicates and ids >=
 * n_experts are the caller's to refuse: the router never makes them; the
 * kernels skip ids >= n_experts), weight f32 [n][top_k], x bf16 [n][ldx], out
 * bf16 [n][ldo]; scratch: dsv4i_gpu_moe_scratch_bytes(m, n_tok) bytes,
 * 256-aligned. dim/32 <= 320, inter/32 <= 288, n_experts <= 1024, top_k <= 16
 * (else DSV4_ERR_UNSUPPORTED / INVALID_ARG).
 */
dsv4_status dsv4i_gpu_moe_experts(const dsv4i_gpu_ops *o, dsv4i_custream s,
                                  const dsv4i_gpu_moe *m, int32_t n_tok, dsv4i_cuptr x,
                                  int64_t ldx, dsv4i_cuptr idx, dsv4i_cuptr weight,
                                  dsv4i_cuptr scratch, dsv4i_cuptr out, int64_t ldo);

/**
 * TP shards (docs/distributed.md "GPU TP shards"): dsv4i_gpu_moe_experts up to the expert
 * rows, over m's share of the intermediate dimension, fp32 and not combined: rows f32
 * [n][top_k + 1][dim] (dsv4i_gpu_moe_rows_bytes; rows of skipped slots are not written).
 * Sum the TP ranks' rows, then dsv4i_gpu_moe_combine. Same checks and statuses.
 */
dsv4_status dsv4i_gpu_moe_experts_part(const dsv4i_gpu_ops *o, dsv4i_custream s,
                                       const dsv4i_gpu_moe *m, int32_t n_tok, dsv4i_cuptr x,
                                       int64_t ldx, dsv4i_cuptr idx, dsv4i_cuptr weight,
                                       dsv4i_cuptr scratch, dsv4i_cuptr rows);
/** Bytes of the fp32 expert rows of n_tok tokens. */
size_t dsv4i_gpu_moe_rows_bytes(const dsv4i_gpu_moe *m, int32_t n_tok);
/** out bf16 [n][ldo] = the combine of dsv4i_gpu_moe_experts (each row rounded to bf16, added
 *  in ascending expert id, the shared expert last, in fp32; rounded) over fp32 rows. */
dsv4_status dsv4i_gpu_moe_combine(const dsv4i_gpu_ops *o, dsv4i_custream s,
                                  const dsv4i_gpu_moe *m, int32_t n_tok, dsv4i_cuptr idx,
                                  dsv4i_cuptr rows, dsv4i_cuptr out, int64_t ldo);

/** One Engram layer on the device (spec §5.2; the fields of the CPU's
 * dsv4i_engram_layer). The table may be in a mapped host-pinned pool. */
typedef struct dsv4i_gpu_engram {
  int32_t dim, hc, n_cols, head_dim; /**< head_dim % 32 == 0 */
  float eps;
  dsv4i_cuptr table;       /**< E4M3 [rows][head_dim] (device address, mapped pinned allowed) */
  dsv4i_cuptr table_scale; /**< UE8M0 [rows][head_dim/32] */
  dsv4i_gpu_weight wkv;    /**< fp8 [(hc+1)·dim][n_cols·head_dim] */
  dsv4i_cuptr q_weight, k_weight; /**< bf16 [hc][dim] */
} dsv4i_gpu_engram;

/** Scratch bytes dsv4i_gpu_engram_run needs for up to n_tok tokens. */
size_t dsv4i_gpu_engram_scratch_bytes(const dsv4i_gpu_engram *e, int32_t n_tok);

/**
 * The Engram module in place on the stream h bf16 [n][hc][dim] (CPU oracle
 * dsv4i_cpu_engram_runs; kernels/engram.cu says where it can differ: the
 * scalar part of each call's exp split uses CUDA's expf where the CPU uses
 * glibc's). ids int64 [n][ld_ids] (ids checked in range by the engine),
 * is_image u8 [n] or 0; gate_vec int32 [n] (device): the vectorised copies
 * of each token (dsv4i_engram_gate_vec of the batch's calls), or 0 when the
 * n tokens are one call; four launches: gather, act_quant, wkv, update.
 */
dsv4_status dsv4i_gpu_engram_run(const dsv4i_gpu_ops *o, dsv4i_custream s, const dsv4i_gpu_engram *e,
                             int32_t n_tok, dsv4i_cuptr ids, int64_t ld_ids, dsv4i_cuptr is_image,
                             dsv4i_cuptr gate_vec, dsv4i_cuptr scratch, dsv4i_cuptr h);

/**
 * The module's last launch alone (dsv4i_gpu_engram_run's update; bench/roofline
 * times it): kv bf16 [n][(hc+1)·dim] (the wkv output), is_image and gate_vec as
 * there, h in place. dim <= 8192.
 */
dsv4_status dsv4i_gpu_engram_update(const dsv4i_gpu_ops *o, dsv4i_custream s,
                                    const dsv4i_gpu_engram *e, int32_t n_tok, dsv4i_cuptr kv,
                                    dsv4i_cuptr is_image, dsv4i_cuptr gate_vec, dsv4i_cuptr h);

#endif /* DSV4I_GPU_OPS_H */
