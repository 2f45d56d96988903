/*
 * Diagnostics of test_cuda_real_dims: where the CUDA engine's numbers start to
 * differ from the CPU engine's on a release-dimension checkpoint. Printed, not
 * asserted (the test's assertions stay the token equality and the memory plan).
 */
#ifndef DSV4_TEST_REAL_DIMS_DIAG_H
#define DSV4_TEST_REAL_DIMS_DIAG_H

#include <stdint.h>

#include "dsv4/dsv4.h"

/** Per logits row r < rows (prefill = row 0, decode step k = row k + 1), f32 [rows][V]:
 *  max |gpu - cpu|, where, both values, and how many of the V values differ in bits. */
void rd_diag_steps(const char *tag, const float *cpu, const float *gpu, int32_t V, int32_t rows);

/**
 * A prefill of in[0..n) on a CPU and a CUDA engine made from ep (backend overridden,
 * flags kept), op by op (embed, Engram, block, head), twice on the GPU:
 *  - free-running: each op's output against the CPU's (differences accumulate);
 *  - teacher-forced: each op starts from the CPU's input (h, pre), so a difference is
 *    that op's own; per block also the sublayer buffers (attention mixes, FFN mixes,
 *    the FFN input x, the MoE output y), and for the first block that differs the CPU
 *    router and experts run on the GPU's x (the MoE alone at these dimensions).
 */
void rd_diag_prefill(dsv4_model *m, const dsv4_engine_params *ep, const int32_t *in, int32_t n);

#endif
