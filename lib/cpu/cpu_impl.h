/*
 * Private helpers of the CPU backend's numerical core (the .c files of lib/cpu only).
 */
#ifndef DSV4I_CPU_IMPL_H
#define DSV4I_CPU_IMPL_H

#include <stdint.h>

#include "cpu/cpu_ops.h"

/* OpenMP pragmas that vanish (without -Wunknown-pragmas noise) when the
 * library is built without OpenMP. */
#ifdef _OPENMP
#include <omp.h>
#define DSV4I_OMP(x) _Pragma(#x)
#else
#define DSV4I_OMP(x)
#endif

/* Output rows per GEMM tile and K elements per block (the fp8/fp4 scale block). */
#define DSV4I_TILE_O 32
#define DSV4I_TILE_K 32
/* Tokens per GEMM chunk: bounds scratch (chunk × K floats) and the
 * per-thread accumulator (chunk × 32 floats). */
#define DSV4I_TOK_CHUNK 64

/* The FP8/FP4 GEMM on quantised rows (linear.c): y = bf16(block-scaled sum).
 * xq float [n][w->cols] (e4m3 values), sx float [n][w->cols/32]. No checks. */
void dsv4i_cpu_qgemm(const dsv4i_wview *w, int64_t n, const float *xq, const float *sx,
                     uint16_t *y, int64_t ldy);
/* The same GEMM continuing fp32 running sums: acc[t][o] (ldacc) holds the sums of
 * earlier K columns (another TP rank's share; 0 to start) and gets them extended over
 * this view's columns, unrounded, in the same order as one GEMM over all of K. */
void dsv4i_cpu_qgemm_acc(const dsv4i_wview *w, int64_t n, const float *xq, const float *sx,
                         float *acc, int64_t ldacc);

/* Row-wise act_quant into decoded floats (linear.c), no checks, not threaded. */
void dsv4i_cpu_act_quant_rows(int64_t n, int32_t k, const uint16_t *x, int64_t ldx, float *xq,
                              float *sx);

/* AVX-512 tile decode (decode_avx512.c): x86-64 with GCC or Clang only. */
#if defined(__x86_64__) && defined(__GNUC__)
#define DSV4I_HAVE_AVX512_DECODE 1
/* 1 when the CPU runs AVX-512F (the decode below may then be used). */
int dsv4i_cpu_avx512_ok(void);
/* Decode a full 32 x 32 tile of an FP8 / FP4 / BF16 weight into wt[k][o]
 * (values without the block scale), bit-identical to the format tables.
 * base: first byte (FP8/FP4) or element (BF16) of the tile's first row; ld:
 * the view's data_ld. Only call when dsv4i_cpu_avx512_ok(). */
void dsv4i_cpu_decode_tile_avx512(int32_t fmt, const void *base, int64_t ld,
                                  float wt[DSV4I_TILE_K][DSV4I_TILE_O]);
#else
#define DSV4I_HAVE_AVX512_DECODE 0
#endif

/* Argument check shared by the view consumers. */
int dsv4i_wview_valid(const dsv4i_wview *w);

#endif /* DSV4I_CPU_IMPL_H */
