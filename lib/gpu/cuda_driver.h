/*
 * The CUDA driver API as libdsv4 uses it: opened at run time from
 * libcuda.so.1 (dlopen), never linked, every entry point resolved through
 * cuGetProcAddress_v2 at a pinned API version.
 *
 * The few driver types and constants are declared here rather than taken
 * from the toolkit's <cuda.h>, so host code builds and runs without CUDA
 * headers. lib/gpu/cuda_abi_check.c compares every declaration below with
 * <cuda.h> and <cudaTypedefs.h> at configure time when the toolkit headers
 * are found (lib/gpu/meson.build).
 *
 * Internal to lib/gpu; no other part includes this header.
 */
#ifndef DSV4I_CUDA_DRIVER_H
#define DSV4I_CUDA_DRIVER_H

#include <stddef.h>
#include <stdint.h>

#include "base/base.h"

/* CUDA API version (major*1000 + minor*10) of the toolkit that wrote the
 * embedded PTX; the driver must support at least this version to JIT it.
 * Set by lib/gpu/meson.build from `nvcc --version`. */
#if !defined(DSV4I_PTX_CUDA_VERSION) && !defined(DSV4I_CUDA_DRIVER_FROM_CUDA_H)
#error "DSV4I_PTX_CUDA_VERSION is set by lib/gpu/meson.build in builds with nvcc"
#endif

/* ---- driver types --------------------------------------------------------
 * With DSV4I_CUDA_DRIVER_FROM_CUDA_H defined (the configure-time check only)
 * the names alias <cuda.h>'s types, so the function list below is compared
 * type for type with the toolkit's PFN_* typedefs. */
#ifdef DSV4I_CUDA_DRIVER_FROM_CUDA_H
#include <cuda.h>
typedef CUresult dsv4i_cures;
typedef CUdevice dsv4i_cudev;
typedef CUcontext dsv4i_cuctx;
typedef CUmodule dsv4i_cumod;
typedef CUfunction dsv4i_cufn;
typedef CUstream dsv4i_custream;
typedef CUdeviceptr dsv4i_cuptr;
typedef CUdevice_attribute dsv4i_cuattr;
typedef CUjit_option dsv4i_cujit;
typedef CUevent dsv4i_cuevent;
typedef CUgraph dsv4i_cugraph;
typedef CUgraphExec dsv4i_cugraphexec;
typedef CUstreamCaptureMode dsv4i_cucapmode;
typedef CUstreamCaptureStatus dsv4i_cucapstatus;
typedef CUfunction_attribute dsv4i_cufnattr;
#else
typedef int dsv4i_cures;                     /**< CUresult (an enum: int-sized) */
typedef int dsv4i_cudev;                     /**< CUdevice (an ordinal handle) */
typedef struct dsv4i_cuctx_s *dsv4i_cuctx;   /**< CUcontext */
typedef struct dsv4i_cumod_s *dsv4i_cumod;   /**< CUmodule */
typedef struct dsv4i_cufn_s *dsv4i_cufn;     /**< CUfunction */
typedef struct dsv4i_custream_s *dsv4i_custream; /**< CUstream; NULL = legacy default stream */
typedef unsigned long long dsv4i_cuptr;      /**< CUdeviceptr (64-bit device address) */
typedef int dsv4i_cuattr;                    /**< CUdevice_attribute */
typedef int dsv4i_cujit;                     /**< CUjit_option */
typedef struct dsv4i_cuevent_s *dsv4i_cuevent;         /**< CUevent */
typedef struct dsv4i_cugraph_s *dsv4i_cugraph;         /**< CUgraph */
typedef struct dsv4i_cugraphexec_s *dsv4i_cugraphexec; /**< CUgraphExec */
typedef int dsv4i_cucapmode;                 /**< CUstreamCaptureMode */
typedef int dsv4i_cucapstatus;               /**< CUstreamCaptureStatus */
typedef int dsv4i_cufnattr;                  /**< CUfunction_attribute */
#endif

/* ---- constants (values pinned by the driver ABI) ------------------------- */
#define DSV4I_CUDA_SUCCESS 0
#define DSV4I_CUDA_ERROR_OUT_OF_MEMORY 2
#define DSV4I_CUDA_ERROR_NOT_INITIALIZED 3
#define DSV4I_CUDA_ERROR_STUB_LIBRARY 34
#define DSV4I_CUDA_ERROR_NO_DEVICE 100
#define DSV4I_CUDA_ERROR_INVALID_DEVICE 101
#define DSV4I_CUDA_ERROR_INVALID_PTX 218
#define DSV4I_CUDA_ERROR_UNSUPPORTED_PTX_VERSION 222
#define DSV4I_CUDA_ERROR_NOT_FOUND 500
#define DSV4I_CUDA_ERROR_NOT_READY 600
#define DSV4I_CUDA_ERROR_STREAM_CAPTURE_INVALIDATED 901
#define DSV4I_CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED 900
/* errors after which the context is unusable (sticky): DSV4_ERR_DEVICE_LOST */
#define DSV4I_CUDA_ERROR_ILLEGAL_ADDRESS 700
#define DSV4I_CUDA_ERROR_ASSERT 710
#define DSV4I_CUDA_ERROR_HARDWARE_STACK_ERROR 714
#define DSV4I_CUDA_ERROR_ILLEGAL_INSTRUCTION 715
#define DSV4I_CUDA_ERROR_MISALIGNED_ADDRESS 716
#define DSV4I_CUDA_ERROR_INVALID_ADDRESS_SPACE 717
#define DSV4I_CUDA_ERROR_INVALID_PC 718
#define DSV4I_CUDA_ERROR_LAUNCH_FAILED 719

#define DSV4I_CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT 16
#define DSV4I_CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR 75
#define DSV4I_CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR 76

#define DSV4I_CU_STREAM_NON_BLOCKING 1
#define DSV4I_CU_EVENT_DEFAULT 0
#define DSV4I_CU_EVENT_DISABLE_TIMING 2
#define DSV4I_CU_MEMHOSTALLOC_PORTABLE 1
#define DSV4I_CU_MEMHOSTALLOC_DEVICEMAP 2
#define DSV4I_CU_STREAM_CAPTURE_MODE_THREAD_LOCAL 1
#define DSV4I_CU_STREAM_CAPTURE_STATUS_NONE 0
#define DSV4I_CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES 8

#define DSV4I_CU_JIT_WALL_TIME 2
#define DSV4I_CU_JIT_INFO_LOG_BUFFER 3
#define DSV4I_CU_JIT_INFO_LOG_BUFFER_SIZE_BYTES 4
#define DSV4I_CU_JIT_ERROR_LOG_BUFFER 5
#define DSV4I_CU_JIT_ERROR_LOG_BUFFER_SIZE_BYTES 6

#define DSV4I_CU_GET_PROC_ADDRESS_LEGACY_STREAM 1
#define DSV4I_CU_GET_PROC_ADDRESS_SUCCESS 0

/** API version every entry point is resolved at (CUDA 12.0). Pinned so that
 * a newer driver never hands back a changed signature: at 13.0, for one,
 * "cuCtxSynchronize" resolves to a variant that takes a context. */
#define DSV4I_CU_API_VERSION 12000

/* ---- entry points ----------------------------------------------------------
 * X(name, pfn_version, params): the driver function cu<name> with the
 * signature that <cudaTypedefs.h> calls PFN_cu<name>_v<pfn_version>, the
 * newest one at or below DSV4I_CU_API_VERSION. All return CUresult. */
#define DSV4I_CU_FUNCS(X)                                                                    \
  X(GetErrorName, 6000, (dsv4i_cures error, const char **pstr))                              \
  X(GetErrorString, 6000, (dsv4i_cures error, const char **pstr))                            \
  X(Init, 2000, (unsigned int flags))                                                        \
  X(DriverGetVersion, 2020, (int *driver_version))                                           \
  X(DeviceGetCount, 2000, (int *count))                                                      \
  X(DeviceGet, 2000, (dsv4i_cudev *device, int ordinal))                                     \
  X(DeviceGetAttribute, 2000, (int *pi, dsv4i_cuattr attrib, dsv4i_cudev dev))               \
  X(DeviceGetName, 2000, (char *name, int len, dsv4i_cudev dev))                             \
  X(DevicePrimaryCtxRetain, 7000, (dsv4i_cuctx *pctx, dsv4i_cudev dev))                      \
  X(DevicePrimaryCtxRelease, 11000, (dsv4i_cudev dev))                                       \
  X(CtxGetCurrent, 4000, (dsv4i_cuctx *pctx))                                                \
  X(CtxSetCurrent, 4000, (dsv4i_cuctx ctx))                                                  \
  X(CtxSynchronize, 2000, (void))                                                            \
  X(ModuleLoadDataEx, 2010, (dsv4i_cumod *module, const void *image, unsigned int n_options, \
                             dsv4i_cujit *options, void **option_values))                    \
  X(ModuleGetFunction, 2000, (dsv4i_cufn *hfunc, dsv4i_cumod hmod, const char *name))        \
  X(ModuleUnload, 2000, (dsv4i_cumod hmod))                                                  \
  X(MemAlloc, 3020, (dsv4i_cuptr *dptr, size_t bytesize))                                    \
  X(MemFree, 3020, (dsv4i_cuptr dptr))                                                       \
  X(MemcpyHtoD, 3020, (dsv4i_cuptr dst, const void *src, size_t bytes))                      \
  X(MemcpyDtoH, 3020, (void *dst, dsv4i_cuptr src, size_t bytes))                            \
  X(MemGetInfo, 3020, (size_t *free_bytes, size_t *total_bytes))                           \
  X(MemHostAlloc, 2020, (void **pp, size_t bytesize, unsigned int flags))                    \
  X(MemFreeHost, 2000, (void *p))                                                            \
  X(MemHostGetDevicePointer, 3020, (dsv4i_cuptr *pdptr, void *p, unsigned int flags))        \
  X(MemcpyHtoDAsync, 3020, (dsv4i_cuptr dst, const void *src, size_t bytes,                  \
                            dsv4i_custream stream))                                          \
  X(MemcpyDtoHAsync, 3020, (void *dst, dsv4i_cuptr src, size_t bytes, dsv4i_custream stream))\
  X(MemcpyDtoDAsync, 3020, (dsv4i_cuptr dst, dsv4i_cuptr src, size_t bytes,                  \
                            dsv4i_custream stream))                                          \
  X(MemsetD8Async, 3020, (dsv4i_cuptr dst, unsigned char value, size_t n,                    \
                          dsv4i_custream stream))                                            \
  X(StreamCreate, 2000, (dsv4i_custream *stream, unsigned int flags))                        \
  X(StreamDestroy, 4000, (dsv4i_custream stream))                                            \
  X(StreamSynchronize, 2000, (dsv4i_custream stream))                                        \
  X(StreamIsCapturing, 10000, (dsv4i_custream stream, dsv4i_cucapstatus *status))            \
  X(StreamBeginCapture, 10010, (dsv4i_custream stream, dsv4i_cucapmode mode))                \
  X(StreamEndCapture, 10000, (dsv4i_custream stream, dsv4i_cugraph *graph))                  \
  X(GraphInstantiateWithFlags, 11040, (dsv4i_cugraphexec *exec, dsv4i_cugraph graph,         \
                                       unsigned long long flags))                            \
  X(GraphLaunch, 10000, (dsv4i_cugraphexec exec, dsv4i_custream stream))                     \
  X(GraphExecDestroy, 10000, (dsv4i_cugraphexec exec))                                       \
  X(GraphDestroy, 10000, (dsv4i_cugraph graph))                                              \
  X(EventCreate, 2000, (dsv4i_cuevent *event, unsigned int flags))                           \
  X(EventDestroy, 4000, (dsv4i_cuevent event))                                               \
  X(EventRecord, 2000, (dsv4i_cuevent event, dsv4i_custream stream))                         \
  X(EventSynchronize, 2000, (dsv4i_cuevent event))                                           \
  X(EventElapsedTime, 2000, (float *ms, dsv4i_cuevent start, dsv4i_cuevent end))             \
  X(FuncSetAttribute, 9000, (dsv4i_cufn f, dsv4i_cufnattr attrib, int value))                \
  X(LaunchKernel, 4000, (dsv4i_cufn f, unsigned int grid_x, unsigned int grid_y,             \
                         unsigned int grid_z, unsigned int block_x, unsigned int block_y,    \
                         unsigned int block_z, unsigned int shared_bytes,                    \
                         dsv4i_custream stream, void **kernel_params, void **extra))

/* dsv4i_pfn_<name>: pointer type of each entry point. */
#define DSV4I_CU_PFN_TYPEDEF(name, ver, params) typedef dsv4i_cures (*dsv4i_pfn_##name) params;
DSV4I_CU_FUNCS(DSV4I_CU_PFN_TYPEDEF)
#undef DSV4I_CU_PFN_TYPEDEF

/**
 * The opened driver: one process-wide table, filled once by dsv4i_cu_get()
 * and never freed (libcuda is not unloaded). Call through the members, e.g.
 * `cu->MemAlloc(&p, n)`; every member is non-NULL once dsv4i_cu_get() has
 * returned DSV4_OK.
 */
typedef struct dsv4i_cu {
#define DSV4I_CU_MEMBER(name, ver, params) dsv4i_pfn_##name name;
  DSV4I_CU_FUNCS(DSV4I_CU_MEMBER)
#undef DSV4I_CU_MEMBER
  int driver_version; /**< cuDriverGetVersion: CUDA API version, e.g. 13000 for 13.0 */
} dsv4i_cu;

/**
 * The driver, opened and initialised (cuInit) on the first call in the
 * process; later calls return the same table or repeat the first failure.
 * Thread-safe.
 *
 * @param out [out] the table; NULL on failure.
 * @return DSV4_OK; DSV4_ERR_NO_DEVICE (libcuda.so.1 absent or the toolkit's
 *         stub, or cuInit says CUDA_ERROR_NO_DEVICE); DSV4_ERR_UNSUPPORTED (driver older than the
 *         CUDA 12.0 API: no cuGetProcAddress_v2); DSV4_ERR_DEVICE (an entry
 *         point missing, or cuInit failed otherwise; the message names the
 *         call and the CUresult).
 */
dsv4_status dsv4i_cu_get(const dsv4i_cu **out);

/**
 * Record a failed driver call: "<call>: <CUDA_ERROR_NAME> (<text>)", with
 * the status it maps to: DSV4_ERR_DEVICE_LOST for the sticky errors that
 * poison the context (illegal address, launch failure, ...), DSV4_ERR_DEVICE
 * otherwise.
 *
 * @param cu   the driver table (names the error); may be NULL.
 * @param res  the CUresult returned, not CUDA_SUCCESS.
 * @param call what was called, with its context (printf format).
 * @return the status recorded.
 */
dsv4_status dsv4i_cu_fail(const dsv4i_cu *cu, dsv4i_cures res, const char *call, ...)
    DSV4I_PRINTF(3, 4);

/** Name of a CUresult ("CUDA_ERROR_NO_DEVICE"), or "CUresult <n>" in a static
 * per-thread buffer when the driver does not know it. */
const char *dsv4i_cu_error_name(const dsv4i_cu *cu, dsv4i_cures res);

#endif /* DSV4I_CUDA_DRIVER_H */
