/*
 * Test hooks of the CPU backend (tests only; the engine never calls them).
 */
#ifndef DSV4I_CPU_TEST_HOOKS_H
#define DSV4I_CPU_TEST_HOOKS_H

#include "backend/backend.h"

/**
 * Make the after_blocks-th block call from now on (1 = the next) fail with
 * status st (e.g. DSV4_ERR_DEVICE_LOST, which a CPU never reports by itself),
 * once. be must be a CPU backend. after_blocks <= 0 disarms.
 */
void dsv4i_cpu_backend_inject_fault(dsv4i_backend *be, int32_t after_blocks, dsv4_status st);

/**
 * Like dsv4i_cpu_backend_inject_fault, but the block fails inside the layer:
 * after its attention sublayer (with TP, after the attention output's
 * all-reduce), before its FFN sublayer (the MoE's all-reduce). Once.
 */
void dsv4i_cpu_backend_inject_layer_fault(dsv4i_backend *be, int32_t after_blocks, dsv4_status st);

/** Make the next kv_copy call fail with status st before copying anything, once
 *  (DSV4_OK disarms). be must be a CPU backend. */
void dsv4i_cpu_backend_inject_copy_fault(dsv4i_backend *be, dsv4_status st);

#endif /* DSV4I_CPU_TEST_HOOKS_H */
