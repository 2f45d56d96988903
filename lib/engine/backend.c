/*
 * Backend factory: the only engine file that knows which backends exist.
 * CUDA plugs in here (issue: CUDA backend); until then it is refused with
 * a message, never silently replaced by the CPU.
 */
#include "engine/backend.h"
#include "model/config.h"

static dsv4_status no_cuda(void) {
  return dsv4i_error(DSV4_ERR_UNSUPPORTED,
                     "backend cuda: the CUDA engine backend is not implemented yet in this "
                     "build; use DSV4_BACKEND_CPU (or DSV4_BACKEND_AUTO)");
}

dsv4_status dsv4i_backend_format(int32_t kind, const struct dsv4i_config *cfg,
                                 int64_t max_positions, dsv4i_cache_format *out) {
  switch (kind) {
  case DSV4_BACKEND_CPU: return dsv4i_cpu_backend_format(cfg, max_positions, out);
  case DSV4_BACKEND_CUDA: return no_cuda();
  default: return dsv4i_error(DSV4_ERR_INVALID_ARG, "backend %d is not a backend kind", (int)kind);
  }
}

dsv4_status dsv4i_backend_create(int32_t kind, const dsv4i_backend_desc *d, dsv4i_backend **out) {
  *out = NULL;
  switch (kind) {
  case DSV4_BACKEND_CPU: return dsv4i_cpu_backend_create(d, out);
  case DSV4_BACKEND_CUDA: return no_cuda();
  default: return dsv4i_error(DSV4_ERR_INVALID_ARG, "backend %d is not a backend kind", (int)kind);
  }
}

void dsv4i_backend_destroy(dsv4i_backend *be) {
  if (be) be->ops->destroy(be);
}
