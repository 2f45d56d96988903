/*
 * cuBLASLt opened at run time (dlopen of libcublasLt.so.13, then .12), like
 * the driver: never linked, so libdsv4.so loads without it, and only
 * engines that ask for a library GEMM need it. Used for large-M prefill
 * GEMMs on bf16 tiles (design §4); small-M decode uses our kernels.
 *
 * The few cuBLASLt types are declared here; lib/gpu/cublaslt_abi_check.c
 * compares them with <cublasLt.h> at configure time when it is found.
 * It shares the device's primary context (runtime calls), which is why the
 * engine uses the primary context (style §7).
 * Internal to lib/gpu.
 */
#ifndef DSV4I_CUBLASLT_H
#define DSV4I_CUBLASLT_H

#include "gpu/cuda_driver.h"

typedef int dsv4i_lt_status;                      /**< cublasStatus_t */
typedef struct dsv4i_lt_ctx_s *dsv4i_lt_handle;   /**< cublasLtHandle_t */
typedef struct dsv4i_lt_desc_s *dsv4i_lt_desc;    /**< cublasLtMatmulDesc_t */
typedef struct dsv4i_lt_layout_s *dsv4i_lt_layout;/**< cublasLtMatrixLayout_t */
typedef struct dsv4i_lt_pref_s *dsv4i_lt_pref;    /**< cublasLtMatmulPreference_t */
typedef struct { uint64_t data[8]; } dsv4i_lt_algo; /**< cublasLtMatmulAlgo_t */
typedef struct {
  dsv4i_lt_algo algo;
  size_t workspace_size;
  dsv4i_lt_status state;
  float waves_count;
  int reserved[4];
} dsv4i_lt_heuristic;                              /**< cublasLtMatmulHeuristicResult_t */

#define DSV4I_LT_STATUS_SUCCESS 0
#define DSV4I_LT_COMPUTE_32F 68      /* cublasComputeType_t CUBLAS_COMPUTE_32F */
#define DSV4I_LT_R_32F 0             /* cudaDataType CUDA_R_32F */
#define DSV4I_LT_R_16BF 14           /* cudaDataType CUDA_R_16BF */
#define DSV4I_LT_OP_N 0
#define DSV4I_LT_OP_T 1
#define DSV4I_LT_DESC_TRANSA 3       /* CUBLASLT_MATMUL_DESC_TRANSA */
#define DSV4I_LT_DESC_TRANSB 4       /* CUBLASLT_MATMUL_DESC_TRANSB */
#define DSV4I_LT_PREF_MAX_WORKSPACE 1 /* CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES */

/* X(name, return type, params) */
#define DSV4I_LT_FUNCS(X)                                                                      \
  X(cublasLtGetVersion, size_t, (void))                                                        \
  X(cublasLtCreate, dsv4i_lt_status, (dsv4i_lt_handle * handle))                               \
  X(cublasLtDestroy, dsv4i_lt_status, (dsv4i_lt_handle handle))                                \
  X(cublasLtMatmulDescCreate, dsv4i_lt_status,                                                 \
    (dsv4i_lt_desc * desc, int compute_type, int scale_type))                                  \
  X(cublasLtMatmulDescDestroy, dsv4i_lt_status, (dsv4i_lt_desc desc))                          \
  X(cublasLtMatmulDescSetAttribute, dsv4i_lt_status,                                           \
    (dsv4i_lt_desc desc, int attr, const void *buf, size_t size))                              \
  X(cublasLtMatrixLayoutCreate, dsv4i_lt_status,                                               \
    (dsv4i_lt_layout * layout, int type, uint64_t rows, uint64_t cols, int64_t ld))            \
  X(cublasLtMatrixLayoutDestroy, dsv4i_lt_status, (dsv4i_lt_layout layout))                    \
  X(cublasLtMatmulPreferenceCreate, dsv4i_lt_status, (dsv4i_lt_pref * pref))                   \
  X(cublasLtMatmulPreferenceDestroy, dsv4i_lt_status, (dsv4i_lt_pref pref))                    \
  X(cublasLtMatmulPreferenceSetAttribute, dsv4i_lt_status,                                     \
    (dsv4i_lt_pref pref, int attr, const void *buf, size_t size))                              \
  X(cublasLtMatmulAlgoGetHeuristic, dsv4i_lt_status,                                           \
    (dsv4i_lt_handle handle, dsv4i_lt_desc desc, dsv4i_lt_layout a, dsv4i_lt_layout b,         \
     dsv4i_lt_layout c, dsv4i_lt_layout d, dsv4i_lt_pref pref, int requested,                  \
     dsv4i_lt_heuristic *results, int *returned))                                              \
  X(cublasLtMatmul, dsv4i_lt_status,                                                           \
    (dsv4i_lt_handle handle, dsv4i_lt_desc desc, const void *alpha, const void *a,             \
     dsv4i_lt_layout la, const void *b, dsv4i_lt_layout lb, const void *beta, const void *c,   \
     dsv4i_lt_layout lc, void *d, dsv4i_lt_layout ld, const dsv4i_lt_algo *algo,               \
     void *workspace, size_t workspace_size, dsv4i_custream stream))

/** The opened library (process-wide, never unloaded) plus one handle per engine. */
typedef struct dsv4i_lt {
#define DSV4I_LT_MEMBER(name, ret, params) ret(*name) params;
  DSV4I_LT_FUNCS(DSV4I_LT_MEMBER)
#undef DSV4I_LT_MEMBER
  size_t version;          /**< cublasLtGetVersion(), e.g. 130000 */
  dsv4i_lt_handle handle;  /**< this engine's handle */
} dsv4i_lt;

/**
 * Open cuBLASLt (once per process) and create a handle (the device's
 * primary context current on this thread).
 * @param lt [out] zeroed on failure.
 * @return DSV4_OK; DSV4_ERR_UNSUPPORTED (no libcublasLt.so.13/.12 on the
 *         loader path, or a symbol missing: the message says which);
 *         DSV4_ERR_DEVICE (cublasLtCreate failed).
 */
dsv4_status dsv4i_lt_open(dsv4i_lt *lt);

/** Destroy the handle. Safe on a zeroed struct. */
void dsv4i_lt_close(dsv4i_lt *lt);

/**
 * y[n][ldy] (fp32) = x[n][ldx] (bf16) · W[rows][ldw]ᵀ (bf16), fp32
 * accumulation in cuBLASLt's order (not the CPU oracle's: equal within the
 * rounding of a different summation order). Asynchronous on `stream`;
 * workspace: device bytes (0 allowed) the heuristic may use.
 * @return DSV4_OK; DSV4_ERR_INVALID_ARG; DSV4_ERR_UNSUPPORTED (no algorithm
 *         for the shape); DSV4_ERR_DEVICE (a cuBLASLt call failed, named).
 */
dsv4_status dsv4i_lt_gemm_bf16_f32(const dsv4i_lt *lt, dsv4i_custream stream, int32_t n,
                                   int32_t rows, int32_t k, dsv4i_cuptr x, int64_t ldx,
                                   dsv4i_cuptr w, int64_t ldw, dsv4i_cuptr y, int64_t ldy,
                                   dsv4i_cuptr workspace, size_t workspace_bytes);

#endif /* DSV4I_CUBLASLT_H */
