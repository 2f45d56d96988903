/* cuBLASLt through dlopen: one bf16 GEMM with an fp32 result. */
#include "gpu/cublaslt.h"

#include <dlfcn.h>
#include <pthread.h>
#include <stdio.h>
#include <string.h>

static pthread_once_t g_once = PTHREAD_ONCE_INIT;
static dsv4i_lt g_lt;
static char g_msg[512];

static void open_lib(void) {
  static const char *names[] = {"libcublasLt.so.13", "libcublasLt.so.12"};
  void *h = NULL;
  const char *why = "";
  for (size_t i = 0; i < sizeof names / sizeof names[0] && !h; i++) {
    h = dlopen(names[i], RTLD_NOW | RTLD_LOCAL);
    if (!h) why = dlerror();
  }
  if (!h) {
    snprintf(g_msg, sizeof g_msg,
             "cuBLASLt (libcublasLt.so.13 or .12) could not be opened (%s): install the CUDA "
             "toolkit's cuBLAS libraries or put them on the loader path",
             why ? why : "");
    return;
  }
  dsv4i_lt lt;
  memset(&lt, 0, sizeof lt);
#define DSV4I_LT_RESOLVE(name, ret, params)                                                 \
  {                                                                                         \
    void *p = dlsym(h, #name);                                                              \
    if (!p) {                                                                               \
      snprintf(g_msg, sizeof g_msg, "cuBLASLt has no symbol %s: the library is too old", #name); \
      return;                                                                               \
    }                                                                                       \
    memcpy(&lt.name, &p, sizeof lt.name);                                                   \
  }
  DSV4I_LT_FUNCS(DSV4I_LT_RESOLVE)
#undef DSV4I_LT_RESOLVE
  lt.version = lt.cublasLtGetVersion();
  g_lt = lt;
}

dsv4_status dsv4i_lt_open(dsv4i_lt *lt) {
  memset(lt, 0, sizeof *lt);
  pthread_once(&g_once, open_lib);
  if (!g_lt.cublasLtCreate) return dsv4i_error(DSV4_ERR_UNSUPPORTED, "%s", g_msg);
  *lt = g_lt;
  dsv4i_lt_status r = lt->cublasLtCreate(&lt->handle);
  if (r != DSV4I_LT_STATUS_SUCCESS) {
    memset(lt, 0, sizeof *lt);
    return dsv4i_error(DSV4_ERR_DEVICE, "cublasLtCreate: cublasStatus_t %d", r);
  }
  return DSV4_OK;
}

void dsv4i_lt_close(dsv4i_lt *lt) {
  if (lt->handle) lt->cublasLtDestroy(lt->handle);
  memset(lt, 0, sizeof *lt);
}

dsv4_status dsv4i_lt_gemm_bf16_f32(const dsv4i_lt *lt, dsv4i_custream stream, int32_t n,
                                   int32_t rows, int32_t k, dsv4i_cuptr x, int64_t ldx,
                                   dsv4i_cuptr w, int64_t ldw, dsv4i_cuptr y, int64_t ldy,
                                   dsv4i_cuptr workspace, size_t workspace_bytes) {
  if (!lt || !lt->handle || n <= 0 || rows <= 0 || k <= 0 || ldx < k || ldw < k || ldy < rows)
    return dsv4i_error(DSV4_ERR_INVALID_ARG, "cuBLASLt gemm: n %d, rows %d, k %d", (int)n,
                       (int)rows, (int)k);
  /* column-major view: Yᵀ [rows][n] = op_T(W as [k][rows]) · (x as [k][n]) */
  dsv4i_lt_desc desc = NULL;
  dsv4i_lt_layout la = NULL, lb = NULL, ld = NULL;
  dsv4i_lt_pref pref = NULL;
  dsv4_status st = DSV4_OK;
  const char *call = "";
  dsv4i_lt_status r;
  const int op_t = DSV4I_LT_OP_T, op_n = DSV4I_LT_OP_N;
#define LT(c)                         \
  if ((r = (c)) != DSV4I_LT_STATUS_SUCCESS) { \
    call = #c;                        \
    goto fail;                        \
  }
  LT(lt->cublasLtMatmulDescCreate(&desc, DSV4I_LT_COMPUTE_32F, DSV4I_LT_R_32F));
  LT(lt->cublasLtMatmulDescSetAttribute(desc, DSV4I_LT_DESC_TRANSA, &op_t, sizeof op_t));
  LT(lt->cublasLtMatmulDescSetAttribute(desc, DSV4I_LT_DESC_TRANSB, &op_n, sizeof op_n));
  LT(lt->cublasLtMatrixLayoutCreate(&la, DSV4I_LT_R_16BF, (uint64_t)k, (uint64_t)rows, ldw));
  LT(lt->cublasLtMatrixLayoutCreate(&lb, DSV4I_LT_R_16BF, (uint64_t)k, (uint64_t)n, ldx));
  LT(lt->cublasLtMatrixLayoutCreate(&ld, DSV4I_LT_R_32F, (uint64_t)rows, (uint64_t)n, ldy));
  LT(lt->cublasLtMatmulPreferenceCreate(&pref));
  LT(lt->cublasLtMatmulPreferenceSetAttribute(pref, DSV4I_LT_PREF_MAX_WORKSPACE, &workspace_bytes,
                                              sizeof workspace_bytes));
  dsv4i_lt_heuristic heur;
  int found = 0;
  LT(lt->cublasLtMatmulAlgoGetHeuristic(lt->handle, desc, la, lb, ld, ld, pref, 1, &heur, &found));
  if (found < 1) {
    st = dsv4i_error(DSV4_ERR_UNSUPPORTED, "cuBLASLt has no algorithm for a bf16 GEMM %d x %d x %d",
                     (int)n, (int)rows, (int)k);
    goto done;
  }
  {
    const float alpha = 1.0f, beta = 0.0f;
    LT(lt->cublasLtMatmul(lt->handle, desc, &alpha, (const void *)(uintptr_t)w, la,
                          (const void *)(uintptr_t)x, lb, &beta, (const void *)(uintptr_t)y, ld,
                          (void *)(uintptr_t)y, ld, &heur.algo, (void *)(uintptr_t)workspace,
                          workspace_bytes, stream));
  }
#undef LT
  goto done;
fail:
  st = dsv4i_error(DSV4_ERR_DEVICE, "cuBLASLt: %s returned cublasStatus_t %d", call, r);
done:
  if (pref) lt->cublasLtMatmulPreferenceDestroy(pref);
  if (ld) lt->cublasLtMatrixLayoutDestroy(ld);
  if (lb) lt->cublasLtMatrixLayoutDestroy(lb);
  if (la) lt->cublasLtMatrixLayoutDestroy(la);
  if (desc) lt->cublasLtMatmulDescDestroy(desc);
  return st;
}
