/* The CUDA entry points of a build without nvcc: every one says so. */
#include "gpu/cuda.h"

int dsv4i_cuda_built(void) { return 0; }

dsv4_status dsv4i_cuda_probe(int32_t device) {
  (void)device;
  return dsv4i_error(DSV4_ERR_UNSUPPORTED,
                     "this libdsv4 was built without CUDA kernels (nvcc was not found at build time); "
                     "rebuild with nvcc on PATH and -Dcuda=enabled");
}
