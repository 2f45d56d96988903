/*
 * NCCL opened at run time (design.md §4, §6): libnccl.so.2 is never linked,
 * so libdsv4.so loads where NCCL is absent; asking for a GPU tensor-parallel
 * stage there is a clean DSV4_ERR_NO_DEVICE. Only the entry points the
 * tensor-parallel all-reduce needs are declared, with our own types (checked
 * against <nccl.h> at configure time by nccl_abi_check.c when it is found).
 *
 * Algorithm and protocol are pinned before the first communicator is
 * created (NCCL reads NCCL_ALGO / NCCL_PROTO once, at initialisation):
 * Ring / Simple unless the environment already fixes them. A captured CUDA
 * graph then replays exactly the collective it captured, and the ring's
 * reduction order gives the same bits on every rank. The values in force
 * are recorded in the communicator (dsv4i_nccl_comm_pinned).
 *
 * Streams cross as void * (cudaStream_t / CUstream). The CUDA context of the
 * rank's device must be current on the calling thread (the GPU backend's).
 */
#ifndef DSV4I_DIST_NCCL_H
#define DSV4I_DIST_NCCL_H

#include <stddef.h>
#include <stdint.h>

#include "base/base.h"

struct dsv4i_comm;

/* ---- the declared subset of NCCL's ABI --------------------------------- */
typedef int dsv4i_nccl_result;                 /* ncclResult_t */
typedef struct dsv4i_nccl_comm_impl *dsv4i_nccl_handle; /* ncclComm_t */
#define DSV4I_NCCL_UNIQUE_ID_BYTES 128
typedef struct dsv4i_nccl_unique_id {
  char internal[DSV4I_NCCL_UNIQUE_ID_BYTES];
} dsv4i_nccl_unique_id;
enum {
  DSV4I_NCCL_SUCCESS = 0,
  DSV4I_NCCL_IN_PROGRESS = 7,
  DSV4I_NCCL_SUM = 0,       /* ncclSum */
  DSV4I_NCCL_FLOAT32 = 7,   /* ncclFloat32 */
  DSV4I_NCCL_BFLOAT16 = 9   /* ncclBfloat16 */
};

/* X(name, return type, parameter list) */
#define DSV4I_NCCL_FUNCS(X)                                                              \
  X(GetVersion, dsv4i_nccl_result, (int *version))                                       \
  X(GetUniqueId, dsv4i_nccl_result, (dsv4i_nccl_unique_id * id))                         \
  X(CommInitRank, dsv4i_nccl_result,                                                     \
    (dsv4i_nccl_handle * comm, int nranks, dsv4i_nccl_unique_id id, int rank))           \
  X(CommDestroy, dsv4i_nccl_result, (dsv4i_nccl_handle comm))                            \
  X(CommAbort, dsv4i_nccl_result, (dsv4i_nccl_handle comm))                              \
  X(CommGetAsyncError, dsv4i_nccl_result, (dsv4i_nccl_handle comm, dsv4i_nccl_result *e)) \
  X(GetErrorString, const char *, (dsv4i_nccl_result r))                                  \
  X(AllReduce, dsv4i_nccl_result,                                                        \
    (const void *send, void *recv, size_t count, int dtype, int op, dsv4i_nccl_handle comm, \
     void *stream))

#define DSV4I_NCCL_PFN(name, ret, params) typedef ret(*dsv4i_nccl_pfn_##name) params;
DSV4I_NCCL_FUNCS(DSV4I_NCCL_PFN)
#undef DSV4I_NCCL_PFN

/** The opened library. */
typedef struct dsv4i_nccl {
#define DSV4I_NCCL_MEMBER(name, ret, params) dsv4i_nccl_pfn_##name name;
  DSV4I_NCCL_FUNCS(DSV4I_NCCL_MEMBER)
#undef DSV4I_NCCL_MEMBER
  int version;              /**< ncclGetVersion: major*10000 + minor*100 + patch */
} dsv4i_nccl;

/** Oldest NCCL accepted (bf16 all-reduce and ncclCommGetAsyncError). */
#define DSV4I_NCCL_MIN_VERSION 21000

/**
 * Open libnccl.so.2 once per process (thread-safe) and resolve every entry.
 * @return DSV4_OK; DSV4_ERR_NO_DEVICE (the library is absent: the message says
 *         so); DSV4_ERR_UNSUPPORTED (an entry point is missing or the version is
 *         below DSV4I_NCCL_MIN_VERSION).
 */
dsv4_status dsv4i_nccl_open(const dsv4i_nccl **out);

/** A tensor-parallel NCCL communicator over the ranks of an MPI (sub-)communicator. */
typedef struct dsv4i_nccl_comm dsv4i_nccl_comm;

/**
 * Create it (collective over mpi): pin algorithm and protocol, rank 0 makes
 * the unique id, the bounded MPI broadcast hands it out, every rank joins.
 * mpi NULL: a communicator of this one rank (no MPI exchange).
 * The rank's CUDA device must be current.
 * @return DSV4_OK; the statuses of dsv4i_nccl_open; DSV4_ERR_DEVICE (an NCCL
 *         call failed: its name and NCCL's text in the message); the
 *         statuses of the MPI exchange (DSV4_ERR_RANK_FAILED).
 */
dsv4_status dsv4i_nccl_comm_create(struct dsv4i_comm *mpi, dsv4i_nccl_comm **out);

/** Destroy (or abort after a failure). NULL ok. */
void dsv4i_nccl_comm_free(dsv4i_nccl_comm *c);

/** Enqueue an in-place sum of n elements (DSV4I_NCCL_FLOAT32 / _BFLOAT16) on stream. */
dsv4_status dsv4i_nccl_allreduce(dsv4i_nccl_comm *c, void *buf, size_t n, int dtype,
                                 void *stream);

/** Poll the communicator's asynchronous error (a peer that failed, a network error):
 *  DSV4_OK or DSV4_ERR_RANK_FAILED with NCCL's text. */
dsv4_status dsv4i_nccl_check(dsv4i_nccl_comm *c);

/** The NCCL_ALGO / NCCL_PROTO values in force when c was created. */
void dsv4i_nccl_comm_pinned(const dsv4i_nccl_comm *c, const char **algo, const char **proto);

/** Pin algorithm and protocol (done by dsv4i_nccl_comm_create; exposed for tests):
 *  sets NCCL_ALGO=Ring and NCCL_PROTO=Simple where the environment leaves them
 *  unset, and returns the values in force. Not thread-safe (setenv). */
void dsv4i_nccl_pin(const char **algo, const char **proto);

#endif /* DSV4I_DIST_NCCL_H */
