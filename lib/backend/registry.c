/*
 * Registry of the backends built into this library: the only file that
 * knows which exist. A kind without an entry is refused with a message,
 * never silently replaced by another backend.
 */
#include "backend/backend_impl.h"

static const dsv4i_backend_entry *const registry[] = {
  &dsv4i_cpu_backend_entry,
#if DSV4_HAVE_CUDA
  &dsv4i_cuda_backend_entry,
#endif
};

static const dsv4i_backend_entry *find(int32_t kind) {
  for (size_t i = 0; i < DSV4I_ARRAY_LEN(registry); i++)
    if (registry[i]->kind == kind) return registry[i];
  return NULL;
}

static dsv4_status missing(int32_t kind) {
  if (kind == DSV4_BACKEND_CUDA)
    return dsv4i_error(DSV4_ERR_UNSUPPORTED,
                       "backend cuda: this library was built without nvcc, so it has no CUDA "
                       "kernels; use DSV4_BACKEND_CPU (or DSV4_BACKEND_AUTO)");
  return dsv4i_error(DSV4_ERR_INVALID_ARG, "backend %d is not a backend kind", (int)kind);
}

const char *dsv4i_backend_name(int32_t kind) {
  const dsv4i_backend_entry *e = find(kind);
  return e ? e->name : NULL;
}

dsv4_status dsv4i_backend_format(int32_t kind, const struct dsv4i_config *cfg,
                                 int64_t max_positions, const dsv4i_model_part *part,
                                 int32_t kv_format, dsv4i_cache_format *out) {
  const dsv4i_backend_entry *e = find(kind);
  return e ? e->format(cfg, max_positions, part, kv_format, out) : missing(kind);
}

dsv4_status dsv4i_backend_create(int32_t kind, const dsv4i_backend_desc *d, dsv4i_backend **out) {
  *out = NULL;
  const dsv4i_backend_entry *e = find(kind);
  return e ? e->create(d, out) : missing(kind);
}

void dsv4i_backend_destroy(dsv4i_backend *be) {
  if (be) be->ops->destroy(be);
}
