/*
 * CUDA backend entry points seen by the rest of the library. The driver
 * (libcuda.so.1) is opened at run time; nothing here needs CUDA headers, so
 * the same declarations serve builds with and without kernels.
 */
#ifndef DSV4I_CUDA_H
#define DSV4I_CUDA_H

#include <stdint.h>

#include "base/base.h"

/** 1 when this build embeds PTX kernels (nvcc was found at build time). */
int dsv4i_cuda_built(void);

/**
 * Open the driver, initialise it, check `device` (exists, SM >= 8.0) and load
 * the embedded PTX module once; releases everything before returning.
 * DSV4_OK; DSV4_ERR_UNSUPPORTED (built without kernels, or SM < 8.0);
 * DSV4_ERR_NO_DEVICE (no libcuda.so.1, cuInit failed for lack of a GPU, or
 * device out of range); DSV4_ERR_DEVICE (another driver failure).
 */
dsv4_status dsv4i_cuda_probe(int32_t device);

#endif /* DSV4I_CUDA_H */
