/*
 * NCCL opened at run time; the tensor-parallel communicator (nccl.h).
 */
#include "dist/nccl.h"

#include <dlfcn.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "dist/comm.h"

static pthread_once_t g_once = PTHREAD_ONCE_INIT;
static dsv4i_nccl g_nccl;
static dsv4_status g_status;
static char g_msg[1024];

static void open_nccl(void) {
  void *h = dlopen("libnccl.so.2", RTLD_NOW | RTLD_LOCAL);
  if (!h) {
    const char *why = dlerror();
    g_status = DSV4_ERR_NO_DEVICE;
    snprintf(g_msg, sizeof g_msg,
             "NCCL (libnccl.so.2) could not be opened (%s): GPU tensor parallelism needs NCCL "
             "on the loader path",
             why ? why : "no reason given");
    return;
  }
#define RESOLVE(name, ret, params)                                                         \
  {                                                                                        \
    void *sym = dlsym(h, "nccl" #name);                                                    \
    if (!sym) {                                                                            \
      g_status = DSV4_ERR_UNSUPPORTED;                                                     \
      snprintf(g_msg, sizeof g_msg, "libnccl.so.2 has no nccl%s: this NCCL is too old",    \
               #name);                                                                     \
      return;                                                                              \
    }                                                                                      \
    memcpy(&g_nccl.name, &sym, sizeof sym); /* object -> function pointer, as POSIX allows */ \
  }
  DSV4I_NCCL_FUNCS(RESOLVE)
#undef RESOLVE
  int v = 0;
  if (g_nccl.GetVersion(&v) != DSV4I_NCCL_SUCCESS || v < DSV4I_NCCL_MIN_VERSION) {
    g_status = DSV4_ERR_UNSUPPORTED;
    snprintf(g_msg, sizeof g_msg, "NCCL version %d is below the %d libdsv4 needs", v,
             DSV4I_NCCL_MIN_VERSION);
    return;
  }
  g_nccl.version = v;
  g_status = DSV4_OK; /* the handle stays open for the process's life */
}

dsv4_status dsv4i_nccl_open(const dsv4i_nccl **out) {
  *out = NULL;
  pthread_once(&g_once, open_nccl);
  if (g_status != DSV4_OK) return dsv4i_error(g_status, "%s", g_msg);
  *out = &g_nccl;
  return DSV4_OK;
}

struct dsv4i_nccl_comm {
  const dsv4i_nccl *lib;
  dsv4i_nccl_handle comm;
  int32_t rank, size;
  int failed;
  char algo[32], proto[32];
};

void dsv4i_nccl_pin(const char **algo, const char **proto) {
  if (!getenv("NCCL_ALGO")) setenv("NCCL_ALGO", "Ring", 0);
  if (!getenv("NCCL_PROTO")) setenv("NCCL_PROTO", "Simple", 0);
  *algo = getenv("NCCL_ALGO");
  *proto = getenv("NCCL_PROTO");
}

static dsv4_status nccl_fail(const dsv4i_nccl *lib, dsv4i_nccl_result r, const char *call) {
  const char *text = lib->GetErrorString ? lib->GetErrorString(r) : NULL;
  return dsv4i_error(DSV4_ERR_DEVICE, "nccl%s failed: %s (ncclResult_t %d)", call,
                     text ? text : "no text", (int)r);
}

/* Every rank's status of a step of the creation (mpi NULL: one rank, its own). */
static dsv4_status agree(dsv4i_comm *mpi, dsv4_status local, const char *what) {
  return mpi ? dsv4i_comm_agree_status(mpi, local, what) : local;
}

dsv4_status dsv4i_nccl_comm_create(dsv4i_comm *mpi, dsv4i_nccl_comm **out) {
  *out = NULL;
  const dsv4i_nccl *lib = NULL;
  dsv4_status local = dsv4i_nccl_open(&lib);
  /* every rank learns whether every rank has NCCL before anyone waits in it */
  dsv4_status st = agree(mpi, local, "opening NCCL");
  if (st) return st;
  const char *algo, *proto;
  dsv4i_nccl_pin(&algo, &proto);
  dsv4i_nccl_unique_id id;
  memset(&id, 0, sizeof id);
  int32_t rank = mpi ? dsv4i_comm_rank(mpi) : 0, size = mpi ? dsv4i_comm_size(mpi) : 1;
  local = DSV4_OK;
  if (rank == 0) {
    dsv4i_nccl_result r = lib->GetUniqueId(&id);
    if (r != DSV4I_NCCL_SUCCESS) local = nccl_fail(lib, r, "GetUniqueId");
  }
  st = agree(mpi, local, "making the NCCL unique id");
  if (st) return st;
  if (mpi) st = dsv4i_comm_bcast(mpi, 0, &id, sizeof id, "handing out the NCCL unique id");
  if (st) return st;
  dsv4i_nccl_comm *c = dsv4i_calloc(1, sizeof *c, "NCCL communicator");
  local = c ? DSV4_OK : DSV4_ERR_OUT_OF_MEMORY;
  if (c) {
    c->lib = lib;
    c->rank = rank;
    c->size = size;
    snprintf(c->algo, sizeof c->algo, "%s", algo);
    snprintf(c->proto, sizeof c->proto, "%s", proto);
    dsv4i_nccl_result r = lib->CommInitRank(&c->comm, size, id, rank);
    if (r != DSV4I_NCCL_SUCCESS) {
      local = nccl_fail(lib, r, "CommInitRank");
      c->comm = NULL;
    }
  }
  st = agree(mpi, local, "creating the NCCL communicator");
  if (st) {
    dsv4i_nccl_comm_free(c);
    return st;
  }
  *out = c;
  return DSV4_OK;
}

void dsv4i_nccl_comm_free(dsv4i_nccl_comm *c) {
  if (!c) return;
  if (c->comm) {
    if (c->failed) c->lib->CommAbort(c->comm);
    else c->lib->CommDestroy(c->comm);
  }
  free(c);
}

dsv4_status dsv4i_nccl_allreduce(dsv4i_nccl_comm *c, void *buf, size_t n, int dtype,
                                 void *stream) {
  if (c->failed) return dsv4i_error(DSV4_ERR_RANK_FAILED, "the NCCL communicator failed earlier");
  if (dtype != DSV4I_NCCL_FLOAT32 && dtype != DSV4I_NCCL_BFLOAT16)
    return dsv4i_error(DSV4_ERR_INVALID_ARG, "NCCL all-reduce: unsupported data type %d", dtype);
  dsv4i_nccl_result r = c->lib->AllReduce(buf, buf, n, dtype, DSV4I_NCCL_SUM, c->comm, stream);
  if (r != DSV4I_NCCL_SUCCESS) {
    c->failed = 1;
    return nccl_fail(c->lib, r, "AllReduce");
  }
  return DSV4_OK;
}

dsv4_status dsv4i_nccl_check(dsv4i_nccl_comm *c) {
  dsv4i_nccl_result e = DSV4I_NCCL_SUCCESS;
  dsv4i_nccl_result r = c->lib->CommGetAsyncError(c->comm, &e);
  if (r != DSV4I_NCCL_SUCCESS) e = r;
  if (e == DSV4I_NCCL_SUCCESS || e == DSV4I_NCCL_IN_PROGRESS) return DSV4_OK;
  c->failed = 1;
  const char *text = c->lib->GetErrorString(e);
  return dsv4i_error(DSV4_ERR_RANK_FAILED,
                     "rank %d: the NCCL communicator reports an asynchronous error: %s "
                     "(ncclResult_t %d); a peer failed or the network broke",
                     (int)c->rank, text ? text : "no text", (int)e);
}

void dsv4i_nccl_comm_pinned(const dsv4i_nccl_comm *c, const char **algo, const char **proto) {
  *algo = c->algo;
  *proto = c->proto;
}
