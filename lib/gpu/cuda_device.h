/*
 * One GPU opened for libdsv4: its primary context made current on the
 * calling thread, and the facts the kernel registry dispatches on.
 * Internal to lib/gpu.
 */
#ifndef DSV4I_CUDA_DEVICE_H
#define DSV4I_CUDA_DEVICE_H

#include "gpu/cuda_driver.h"

/** Lowest compute capability the kernels are written for (major*10 + minor). */
#define DSV4I_MIN_SM 80

/** An opened device. Fields are read-only after dsv4i_cuda_device_open(). */
typedef struct dsv4i_cuda_device {
  const dsv4i_cu *cu;   /**< the driver */
  int32_t ordinal;      /**< CUDA device ordinal (after CUDA_VISIBLE_DEVICES) */
  dsv4i_cudev dev;      /**< driver handle of the device */
  dsv4i_cuctx ctx;      /**< its primary context (retained; current while open) */
  dsv4i_cuctx prev_ctx; /**< context current on this thread before open, restored at close */
  int32_t sm;           /**< compute capability, major*10 + minor (90 for sm_90) */
  int32_t n_sm;         /**< multiprocessor count */
  char name[128];       /**< e.g. "NVIDIA H200" */
} dsv4i_cuda_device;

/**
 * Open device `ordinal`: driver (dsv4i_cu_get), range check, compute
 * capability check, driver-version check against the embedded PTX, then
 * retain the primary context and make it current on this thread (so that
 * cuBLASLt's runtime calls would share it).
 *
 * @param ordinal [in] device ordinal, >= 0.
 * @param d       [out] zeroed on failure; on success close it with
 *                dsv4i_cuda_device_close() on the same thread.
 * @return DSV4_OK; DSV4_ERR_NO_DEVICE (no driver, no GPU, ordinal out of
 *         range); DSV4_ERR_UNSUPPORTED (SM below 8.0, or a driver too old for
 *         the PTX); DSV4_ERR_DEVICE (a driver call failed; named).
 */
dsv4_status dsv4i_cuda_device_open(int32_t ordinal, dsv4i_cuda_device *d);

/** Restore the thread's previous context and release the primary context.
 * Safe on a zeroed or already-closed struct. */
void dsv4i_cuda_device_close(dsv4i_cuda_device *d);

#endif /* DSV4I_CUDA_DEVICE_H */
