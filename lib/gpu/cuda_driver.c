/*
 * libcuda.so.1 opened at run time. The library never links the driver, so
 * the same libdsv4.so loads on machines without NVIDIA software; asking for
 * the CUDA backend there is a clean DSV4_ERR_NO_DEVICE.
 */
#include "gpu/cuda_driver.h"

#include <dlfcn.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* cuGetProcAddress_v2 (CUDA 12.0+ drivers): the one symbol taken with dlsym. */
typedef dsv4i_cures (*get_proc_fn)(const char *symbol, void **pfn, int cuda_version,
                                   uint64_t flags, int *symbol_status);

static pthread_once_t g_once = PTHREAD_ONCE_INIT;
static dsv4i_cu g_cu;
static dsv4_status g_status;
static char g_msg[1024];

static void set_failure(dsv4_status st, const char *fmt, ...) DSV4I_PRINTF(2, 3);
static void set_failure(dsv4_status st, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(g_msg, sizeof g_msg, fmt, ap);
  va_end(ap);
  g_status = st;
}

static const char *name_of(const dsv4i_cu *cu, dsv4i_cures res, char *buf, size_t cap) {
  const char *s = NULL;
  if (cu && cu->GetErrorName && cu->GetErrorName(res, &s) == DSV4I_CUDA_SUCCESS && s) return s;
  snprintf(buf, cap, "CUresult %d", (int)res);
  return buf;
}

static void open_driver(void) {
  /* RTLD_LOCAL: the driver's symbols stay out of the global namespace. */
  void *h = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
  if (!h) {
    const char *why = dlerror();
    set_failure(DSV4_ERR_NO_DEVICE,
                "the NVIDIA driver library libcuda.so.1 could not be opened (%s): no NVIDIA "
                "driver on this machine, or it is not on the loader path",
                why ? why : "no reason given");
    return;
  }
  get_proc_fn get_proc = NULL;
  void *sym = dlsym(h, "cuGetProcAddress_v2");
  memcpy(&get_proc, &sym, sizeof get_proc); /* object -> function pointer, as POSIX allows */
  if (!get_proc) {
    set_failure(DSV4_ERR_UNSUPPORTED,
                "libcuda.so.1 has no cuGetProcAddress_v2: the NVIDIA driver predates CUDA 12.0; "
                "libdsv4's kernels need a driver for CUDA %d.%d or newer",
                DSV4I_PTX_CUDA_VERSION / 1000, DSV4I_PTX_CUDA_VERSION % 1000 / 10);
    return; /* the handle stays open: unloading a driver library is not worth the risk */
  }
  static const char stub_msg[] =
      "CUDA_ERROR_STUB_LIBRARY: the libcuda.so.1 found is the CUDA toolkit's link stub, not an "
      "NVIDIA driver (no driver installed, or the stubs directory is on the loader path)";
  dsv4i_cu cu;
  memset(&cu, 0, sizeof cu);
#define DSV4I_CU_RESOLVE(name, ver, params)                                                      \
  {                                                                                              \
    void *p = NULL;                                                                              \
    int found = -1;                                                                              \
    dsv4i_cures r = get_proc("cu" #name, &p, DSV4I_CU_API_VERSION,                               \
                             DSV4I_CU_GET_PROC_ADDRESS_LEGACY_STREAM, &found);                   \
    if (r == DSV4I_CUDA_ERROR_STUB_LIBRARY) {                                                    \
      set_failure(DSV4_ERR_NO_DEVICE, "%s", stub_msg);                                           \
      return;                                                                                    \
    }                                                                                            \
    if (r != DSV4I_CUDA_SUCCESS || found != DSV4I_CU_GET_PROC_ADDRESS_SUCCESS || !p) {           \
      char b_[32];                                                                               \
      set_failure(DSV4_ERR_DEVICE,                                                               \
                  "cuGetProcAddress_v2(\"cu%s\", version %d): %s, lookup status %d (0 found, "   \
                  "1 not found, 2 version not sufficient)",                                      \
                  #name, DSV4I_CU_API_VERSION, name_of(&cu, r, b_, sizeof b_), found);           \
      return;                                                                                    \
    }                                                                                            \
    memcpy(&cu.name, &p, sizeof cu.name);                                                        \
  }
  DSV4I_CU_FUNCS(DSV4I_CU_RESOLVE)
#undef DSV4I_CU_RESOLVE

  char b[32];
  dsv4i_cures r = cu.Init(0);
  if (r == DSV4I_CUDA_ERROR_NO_DEVICE) {
    set_failure(DSV4_ERR_NO_DEVICE, "cuInit: CUDA_ERROR_NO_DEVICE: the NVIDIA driver sees no GPU "
                                    "(CUDA_VISIBLE_DEVICES=%s)",
                getenv("CUDA_VISIBLE_DEVICES") ? getenv("CUDA_VISIBLE_DEVICES") : "unset");
    return;
  }
  if (r == DSV4I_CUDA_ERROR_STUB_LIBRARY) {
    set_failure(DSV4_ERR_NO_DEVICE, "%s", stub_msg);
    return;
  }
  if (r != DSV4I_CUDA_SUCCESS) {
    const char *text = NULL;
    if (cu.GetErrorString(r, &text) != DSV4I_CUDA_SUCCESS || !text) text = "no description";
    set_failure(DSV4_ERR_DEVICE, "cuInit: %s (%s)%s", name_of(&cu, r, b, sizeof b), text,
                r == DSV4I_CUDA_ERROR_OUT_OF_MEMORY
                    ? "; under AddressSanitizer set ASAN_OPTIONS=protect_shadow_gap=0"
                    : "");
    return;
  }
  r = cu.DriverGetVersion(&cu.driver_version);
  if (r != DSV4I_CUDA_SUCCESS) {
    set_failure(DSV4_ERR_DEVICE, "cuDriverGetVersion: %s", name_of(&cu, r, b, sizeof b));
    return;
  }
  g_cu = cu;
  g_status = DSV4_OK;
}

dsv4_status dsv4i_cu_get(const dsv4i_cu **out) {
  *out = NULL;
  pthread_once(&g_once, open_driver);
  if (g_status != DSV4_OK) return dsv4i_error(g_status, "%s", g_msg);
  *out = &g_cu;
  return DSV4_OK;
}

const char *dsv4i_cu_error_name(const dsv4i_cu *cu, dsv4i_cures res) {
  static _Thread_local char buf[32];
  return name_of(cu, res, buf, sizeof buf);
}

static int is_sticky(dsv4i_cures res) {
  switch (res) {
  case DSV4I_CUDA_ERROR_ILLEGAL_ADDRESS:
  case DSV4I_CUDA_ERROR_ASSERT:
  case DSV4I_CUDA_ERROR_HARDWARE_STACK_ERROR:
  case DSV4I_CUDA_ERROR_ILLEGAL_INSTRUCTION:
  case DSV4I_CUDA_ERROR_MISALIGNED_ADDRESS:
  case DSV4I_CUDA_ERROR_INVALID_ADDRESS_SPACE:
  case DSV4I_CUDA_ERROR_INVALID_PC:
  case DSV4I_CUDA_ERROR_LAUNCH_FAILED: return 1;
  default: return 0;
  }
}

dsv4_status dsv4i_cu_fail(const dsv4i_cu *cu, dsv4i_cures res, const char *call, ...) {
  char what[512];
  va_list ap;
  va_start(ap, call);
  vsnprintf(what, sizeof what, call, ap);
  va_end(ap);
  const char *text = NULL;
  if (!cu || !cu->GetErrorString || cu->GetErrorString(res, &text) != DSV4I_CUDA_SUCCESS || !text)
    text = "no description";
  dsv4_status st = is_sticky(res) ? DSV4_ERR_DEVICE_LOST : DSV4_ERR_DEVICE;
  return dsv4i_error(st, "%s: %s (%s)%s", what, dsv4i_cu_error_name(cu, res), text,
                     st == DSV4_ERR_DEVICE_LOST ? "; the CUDA context is unusable" : "");
}
