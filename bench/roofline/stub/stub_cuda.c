/*
 * A stand-in NVIDIA driver (libcuda.so.1) for the host-path test of
 * dsv4-roofline on machines without a GPU: it resolves every entry point the
 * library asks cuGetProcAddress_v2 for, hands out device addresses that are
 * never dereferenced, copies and launches nothing, and answers 1 ms for every
 * event pair. What it checks: every launch's configuration is one a device
 * would take (grid and block sizes, shared memory), else the launch fails
 * with CUDA_ERROR_INVALID_VALUE and the bench reports the case as failed.
 * Test-only (bench/roofline/meson.build); never installed.
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define INVALID_VALUE 1

typedef struct stub_fn {
  char name[128];
} stub_fn;

static unsigned long long next_addr = 0x100000000000ull;

int cuGetProcAddress_v2(const char *symbol, void **pfn, int cuda_version, uint64_t flags,
                        int *symbol_status);

static int ok(void) { return 0; }
static int error_name(int e, const char **s) {
  (void)e;
  *s = "CUDA_ERROR_STUB_INVALID";
  return 0;
}
static int driver_version(int *v) {
  *v = 13000;
  return 0;
}
static int device_count(int *c) {
  *c = 1;
  return 0;
}
static int device_get(int *d, int ordinal) {
  *d = ordinal;
  return ordinal == 0 ? 0 : INVALID_VALUE;
}
static int device_attribute(int *v, int attr, int dev) {
  (void)dev;
  switch (attr) {
  case 16: *v = 132; break;      /* multiprocessors */
  case 75: *v = 9; break;        /* compute capability 9.0 */
  case 76: *v = 0; break;
  case 38: *v = 50 << 20; break; /* L2 bytes */
  default: *v = 65536;
  }
  return 0;
}
static int device_name(char *name, int len, int dev) {
  (void)dev;
  snprintf(name, (size_t)len, "stub device (no GPU)");
  return 0;
}
static int handle_out(void **h) {
  static char handles[1];
  *h = handles;
  return 0;
}
static int ctx_retain(void **c, int dev) {
  (void)dev;
  return handle_out(c);
}
static int ctx_current(void **c) {
  *c = NULL;
  return 0;
}
static int module_load(void **m, const void *image, unsigned n, void *o, void **v) {
  (void)image, (void)n, (void)o, (void)v;
  return handle_out(m);
}
static int module_function(void **f, void *m, const char *name) {
  static stub_fn fns[1024]; /* function handles: the entry names, for messages */
  static int n_fns;
  (void)m;
  if (n_fns == 1024) return 2; /* CUDA_ERROR_OUT_OF_MEMORY */
  stub_fn *fn = &fns[n_fns++];
  snprintf(fn->name, sizeof fn->name, "%s", name);
  *f = fn;
  return 0;
}
static int mem_alloc(unsigned long long *p, size_t bytes) {
  *p = next_addr;
  next_addr += (bytes + 4095) & ~(size_t)4095;
  return 0;
}
static int copy_to_host(void *dst, unsigned long long src, size_t bytes) {
  (void)src;
  memset(dst, 0, bytes);
  return 0;
}
static int copy_to_host_async(void *dst, unsigned long long src, size_t bytes, void *s) {
  (void)s;
  return copy_to_host(dst, src, bytes);
}
static int mem_info(size_t *free_bytes, size_t *total) {
  *free_bytes = (size_t)140 << 30, *total = (size_t)141 << 30;
  return 0;
}
static int host_alloc(void **p, size_t bytes, unsigned flags) {
  (void)flags;
  *p = calloc(1, bytes ? bytes : 1);
  return *p ? 0 : 2;
}
static int host_free(void *p) {
  free(p);
  return 0;
}
static int host_device_pointer(unsigned long long *d, void *p, unsigned flags) {
  (void)flags;
  *d = (unsigned long long)(uintptr_t)p;
  return 0;
}
static int new_handle(void **h, unsigned flags) {
  (void)flags;
  return handle_out(h);
}
static int capturing(void *s, int *status) {
  (void)s;
  *status = 0;
  return 0;
}
static int end_capture(void *s, void **graph) {
  (void)s;
  return handle_out(graph);
}
static int instantiate(void **exec, void *graph, unsigned long long flags) {
  (void)graph, (void)flags;
  return handle_out(exec);
}
static int elapsed(float *ms, void *a, void *b) {
  (void)a, (void)b;
  *ms = 1.0f;
  return 0;
}
static int launch(stub_fn *f, unsigned gx, unsigned gy, unsigned gz, unsigned bx, unsigned by,
                  unsigned bz, unsigned shared, void *s, void **params, void **extra) {
  (void)s, (void)params, (void)extra;
  if (!gx || !gy || !gz || gy > 65535 || gz > 65535 || !bx || !by || !bz ||
      (unsigned long long)bx * by * bz > 1024 || shared > 227 * 1024) {
    fprintf(stderr, "stub driver: %s launched with grid %u x %u x %u, block %u x %u x %u, %u "
            "bytes of shared memory: a device refuses that\n", f->name, gx, gy, gz, bx, by, bz,
            shared);
    return INVALID_VALUE;
  }
  return 0;
}

static const struct {
  const char *name;
  void *fn;
} entries[] = {
    {"cuGetErrorName", (void *)error_name}, {"cuGetErrorString", (void *)error_name},
    {"cuDriverGetVersion", (void *)driver_version}, {"cuDeviceGetCount", (void *)device_count},
    {"cuDeviceGet", (void *)device_get}, {"cuDeviceGetAttribute", (void *)device_attribute},
    {"cuDeviceGetName", (void *)device_name}, {"cuDevicePrimaryCtxRetain", (void *)ctx_retain},
    {"cuCtxGetCurrent", (void *)ctx_current}, {"cuModuleLoadDataEx", (void *)module_load},
    {"cuModuleGetFunction", (void *)module_function}, {"cuMemAlloc", (void *)mem_alloc},
    {"cuMemcpyDtoH", (void *)copy_to_host}, {"cuMemcpyDtoHAsync", (void *)copy_to_host_async},
    {"cuMemGetInfo", (void *)mem_info}, {"cuMemHostAlloc", (void *)host_alloc},
    {"cuMemFreeHost", (void *)host_free}, {"cuMemHostGetDevicePointer", (void *)host_device_pointer},
    {"cuStreamCreate", (void *)new_handle}, {"cuEventCreate", (void *)new_handle},
    {"cuStreamIsCapturing", (void *)capturing}, {"cuStreamEndCapture", (void *)end_capture},
    {"cuGraphInstantiateWithFlags", (void *)instantiate}, {"cuEventElapsedTime", (void *)elapsed},
    {"cuLaunchKernel", (void *)launch},
};

/* Every other entry point: success, nothing written (copies, memsets, syncs, destroys, ...). */
int cuGetProcAddress_v2(const char *symbol, void **pfn, int cuda_version, uint64_t flags,
                        int *symbol_status) {
  (void)cuda_version, (void)flags;
  *pfn = (void *)ok;
  for (size_t i = 0; i < sizeof entries / sizeof entries[0]; i++)
    if (!strcmp(entries[i].name, symbol)) *pfn = entries[i].fn;
  if (symbol_status) *symbol_status = 0;
  return 0;
}
