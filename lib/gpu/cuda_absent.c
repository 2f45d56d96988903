/* The CUDA entry points of a build without nvcc: every one says so. */
#include <string.h>

#include "gpu/cuda.h"

static dsv4_status not_built(void) {
  return dsv4i_error(DSV4_ERR_UNSUPPORTED,
                     "this libdsv4 was built without CUDA kernels (configured without nvcc, or with "
                     "-Dcuda=disabled); rebuild with nvcc on PATH and -Dcuda=enabled");
}

int dsv4i_cuda_built(void) { return 0; }

dsv4_status dsv4i_cuda_probe(int32_t device) {
  (void)device;
  return not_built();
}

dsv4_status dsv4i_cuda_probe_report(int32_t device, dsv4i_cuda_report *report) {
  (void)device;
  if (report) memset(report, 0, sizeof *report);
  return not_built();
}

dsv4_status dsv4i_cuda_check_tables(void) { return not_built(); }

dsv4_status dsv4i_cuda_selftest(int32_t device, const uint8_t *codes, const uint8_t *scales,
                                size_t n, float *out, dsv4i_cuda_report *report) {
  (void)device, (void)codes, (void)scales, (void)n, (void)out;
  if (report) memset(report, 0, sizeof *report);
  return not_built();
}
