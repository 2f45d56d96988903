/*
 * Configure-time check (lib/gpu/meson.build), not part of the library:
 * compiles only if lib/gpu/cublaslt.h agrees with the toolkit's <cublasLt.h>.
 */
#include "gpu/abi_check.h"
#include "gpu/cublaslt.h"

#include <cublasLt.h>

CHECK_EQ(DSV4I_LT_STATUS_SUCCESS, CUBLAS_STATUS_SUCCESS)
CHECK_EQ(DSV4I_LT_COMPUTE_32F, CUBLAS_COMPUTE_32F)
CHECK_EQ(DSV4I_LT_R_32F, CUDA_R_32F)
CHECK_EQ(DSV4I_LT_R_16BF, CUDA_R_16BF)
CHECK_EQ(DSV4I_LT_OP_N, CUBLAS_OP_N)
CHECK_EQ(DSV4I_LT_OP_T, CUBLAS_OP_T)
CHECK_EQ(DSV4I_LT_DESC_TRANSA, CUBLASLT_MATMUL_DESC_TRANSA)
CHECK_EQ(DSV4I_LT_DESC_TRANSB, CUBLASLT_MATMUL_DESC_TRANSB)
CHECK_EQ(DSV4I_LT_PREF_MAX_WORKSPACE, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES)
CHECK_EQ(sizeof(dsv4i_lt_algo), sizeof(cublasLtMatmulAlgo_t))
CHECK_EQ(sizeof(dsv4i_lt_heuristic), sizeof(cublasLtMatmulHeuristicResult_t))
CHECK_EQ(sizeof(cublasStatus_t), sizeof(int))
CHECK_EQ(sizeof(cublasComputeType_t), sizeof(int))
CHECK_EQ(sizeof(cudaDataType), sizeof(int))
_Static_assert(__builtin_types_compatible_p(__typeof__(&cublasLtMatmul),
                                            cublasStatus_t (*)(cublasLtHandle_t, cublasLtMatmulDesc_t,
                                                               const void *, const void *,
                                                               cublasLtMatrixLayout_t, const void *,
                                                               cublasLtMatrixLayout_t, const void *,
                                                               const void *, cublasLtMatrixLayout_t,
                                                               void *, cublasLtMatrixLayout_t,
                                                               const cublasLtMatmulAlgo_t *, void *,
                                                               size_t, cudaStream_t)),
               "cublasLtMatmul signature");

int dsv4i_cublaslt_abi_check_main(void);
int dsv4i_cublaslt_abi_check_main(void) { return 0; }
