/*
 * Configure-time check (lib/dist/meson.build), not part of the library:
 * compiles only if the NCCL declarations of nccl.h agree with <nccl.h>.
 */
#include "dist/nccl.h"

#include <nccl.h>

#define CHECK_EQ(ours, theirs) _Static_assert((ours) == (theirs), #ours " != " #theirs);
CHECK_EQ(DSV4I_NCCL_SUCCESS, ncclSuccess)
CHECK_EQ(DSV4I_NCCL_IN_PROGRESS, ncclInProgress)
CHECK_EQ(DSV4I_NCCL_SUM, ncclSum)
CHECK_EQ(DSV4I_NCCL_FLOAT32, ncclFloat32)
CHECK_EQ(DSV4I_NCCL_BFLOAT16, ncclBfloat16)
CHECK_EQ(DSV4I_NCCL_UNIQUE_ID_BYTES, NCCL_UNIQUE_ID_BYTES)
CHECK_EQ(sizeof(dsv4i_nccl_unique_id), sizeof(ncclUniqueId))
CHECK_EQ(sizeof(dsv4i_nccl_result), sizeof(ncclResult_t))
CHECK_EQ(sizeof(dsv4i_nccl_handle), sizeof(ncclComm_t))

/* Each entry point: our pointer type is assignable from the real function's address with
 * the enum and handle types mapped (int-sized enums, pointer-sized handles). */
_Static_assert(sizeof(ncclDataType_t) == sizeof(int) && sizeof(ncclRedOp_t) == sizeof(int),
               "NCCL enums are not int-sized");
_Static_assert(sizeof(cudaStream_t) == sizeof(void *), "cudaStream_t is not a pointer");
static void check_signatures(void) {
  ncclResult_t (*v)(int *) = ncclGetVersion;
  ncclResult_t (*u)(ncclUniqueId *) = ncclGetUniqueId;
  ncclResult_t (*i)(ncclComm_t *, int, ncclUniqueId, int) = ncclCommInitRank;
  ncclResult_t (*d)(ncclComm_t) = ncclCommDestroy;
  ncclResult_t (*a)(ncclComm_t) = ncclCommAbort;
  ncclResult_t (*e)(ncclComm_t, ncclResult_t *) = ncclCommGetAsyncError;
  const char *(*s)(ncclResult_t) = ncclGetErrorString;
  ncclResult_t (*r)(const void *, void *, size_t, ncclDataType_t, ncclRedOp_t, ncclComm_t,
                    cudaStream_t) = ncclAllReduce;
  (void)v, (void)u, (void)i, (void)d, (void)a, (void)e, (void)s, (void)r;
}
int main(void) {
  check_signatures();
  return 0;
}
