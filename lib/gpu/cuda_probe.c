/* The CUDA entry points of a build with kernels: probe and pipeline self-test. */
#include <string.h>
#include <time.h>

#include "gpu/cuda.h"
#include "gpu/kernel_registry.h"

int dsv4i_cuda_built(void) { return 1; }

static void report_device(dsv4i_cuda_report *rep, const dsv4i_cuda_device *d) {
  if (!rep) return;
  memcpy(rep->device_name, d->name, sizeof rep->device_name);
  rep->device_name[sizeof rep->device_name - 1] = '\0';
  rep->sm = d->sm;
  rep->n_sm = d->n_sm;
  rep->driver_version = d->cu->driver_version;
}

static void report_jit(dsv4i_cuda_report *rep, const dsv4i_kreg *kr) {
  if (!rep) return;
  rep->ptx_bytes = kr->ptx_bytes;
  rep->n_modules = kr->n_modules;
  rep->jit_ms = kr->jit_ms;
  rep->jit_driver_ms = kr->jit_driver_ms;
}

static void report_init(dsv4i_cuda_report *rep) {
  if (!rep) return;
  memset(rep, 0, sizeof *rep);
  rep->ptx_version = DSV4I_PTX_CUDA_VERSION;
}

dsv4_status dsv4i_cuda_probe_report(int32_t device, dsv4i_cuda_report *report) {
  report_init(report);
  dsv4i_cuda_device dev;
  dsv4_status st = dsv4i_cuda_device_open(device, &dev);
  if (st != DSV4_OK) return st;
  report_device(report, &dev);
  dsv4i_kreg kr;
  st = dsv4i_kreg_load(&dev, &kr);
  if (st == DSV4_OK) {
    report_jit(report, &kr);
    dsv4i_kreg_unload(&kr);
  }
  dsv4i_cuda_device_close(&dev);
  return st;
}

dsv4_status dsv4i_cuda_probe(int32_t device) { return dsv4i_cuda_probe_report(device, NULL); }

dsv4_status dsv4i_cuda_check_tables(void) { return dsv4i_kreg_check_tables(); }

static double now_ms(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec * 1e3 + (double)ts.tv_nsec * 1e-6;
}

dsv4_status dsv4i_cuda_selftest(int32_t device, const uint8_t *codes, const uint8_t *scales,
                                size_t n, float *out, dsv4i_cuda_report *report) {
  report_init(report);
  if (!codes || !scales || !out)
    return dsv4i_error(DSV4_ERR_INVALID_ARG, "cuda selftest: codes, scales and out must be non-NULL");
  if (n == 0 || n > ((size_t)1 << 31))
    return dsv4i_error(DSV4_ERR_INVALID_ARG, "cuda selftest: n = %zu is outside 1 .. 2^31", n);
  const size_t n_scales = (n + 31) / 32;

  dsv4i_cuda_device dev;
  dsv4_status st = dsv4i_cuda_device_open(device, &dev);
  if (st != DSV4_OK) return st;
  report_device(report, &dev);
  const dsv4i_cu *cu = dev.cu;
  dsv4i_kreg kr;
  st = dsv4i_kreg_load(&dev, &kr);
  if (st != DSV4_OK) goto close_dev;
  report_jit(report, &kr);

  dsv4i_kernel_id kid;
  st = dsv4i_kreg_select(&kr, DSV4I_KOP_SELFTEST, DSV4I_KFMT_E4M3_UE8M0, DSV4I_KSHAPE_ANY, &kid);
  if (st != DSV4_OK) goto unload;

  dsv4i_cuptr d_codes = 0, d_scales = 0, d_out = 0;
  dsv4i_cures r = cu->MemAlloc(&d_codes, n);
  if (r != DSV4I_CUDA_SUCCESS) { st = dsv4i_cu_fail(cu, r, "cuMemAlloc(%zu bytes)", n); goto free_mem; }
  r = cu->MemAlloc(&d_scales, n_scales);
  if (r != DSV4I_CUDA_SUCCESS) { st = dsv4i_cu_fail(cu, r, "cuMemAlloc(%zu bytes)", n_scales); goto free_mem; }
  r = cu->MemAlloc(&d_out, n * sizeof(float));
  if (r != DSV4I_CUDA_SUCCESS) {
    st = dsv4i_cu_fail(cu, r, "cuMemAlloc(%zu bytes)", n * sizeof(float));
    goto free_mem;
  }
  r = cu->MemcpyHtoD(d_codes, codes, n);
  if (r == DSV4I_CUDA_SUCCESS) r = cu->MemcpyHtoD(d_scales, scales, n_scales);
  if (r != DSV4I_CUDA_SUCCESS) { st = dsv4i_cu_fail(cu, r, "cuMemcpyHtoD(selftest inputs)"); goto free_mem; }

  {
    /* One block per SM at most: larger inputs go through the kernel's
     * grid-stride loop, which the self-test then covers too. */
    const uint32_t block = dsv4i_kernel_desc_get(kid)->block;
    size_t blocks = (n + block - 1) / block;
    if (blocks > (size_t)dev.n_sm && dev.n_sm > 0) blocks = (size_t)dev.n_sm;
    unsigned long long n_arg = (unsigned long long)n;
    void *params[] = {&d_codes, &d_scales, &d_out, &n_arg};
    double t0 = now_ms();
    st = dsv4i_kreg_launch(&kr, kid, (uint32_t)blocks, 0, NULL, params);
    if (st != DSV4_OK) goto free_mem;
    r = cu->CtxSynchronize();
    if (r != DSV4I_CUDA_SUCCESS) {
      st = dsv4i_cu_fail(cu, r, "cuCtxSynchronize(after %s)", dsv4i_kernel_desc_get(kid)->entry);
      goto free_mem;
    }
    if (report) report->kernel_ms = now_ms() - t0;
  }
  r = cu->MemcpyDtoH(out, d_out, n * sizeof(float));
  if (r != DSV4I_CUDA_SUCCESS) st = dsv4i_cu_fail(cu, r, "cuMemcpyDtoH(selftest output)");

free_mem:
  /* after a sticky error these fail too; the first message stands */
  if (d_out) cu->MemFree(d_out);
  if (d_scales) cu->MemFree(d_scales);
  if (d_codes) cu->MemFree(d_codes);
unload:
  dsv4i_kreg_unload(&kr);
close_dev:
  dsv4i_cuda_device_close(&dev);
  return st;
}
