/*
 * PTX modules embedded in the library: one per kernels/<name>.cu, compiled
 * with `nvcc --ptx -arch=compute_80` and turned into C arrays by
 * tools/embed.py (kernels/meson.build). Only builds with nvcc define them.
 */
#ifndef DSV4I_PTX_H
#define DSV4I_PTX_H

#include <stddef.h>

/** One embedded PTX module. */
typedef struct dsv4i_ptx_module {
  const char *name;         /**< module name: the .cu file's stem, e.g. "selftest" */
  const unsigned char *ptx; /**< PTX text, NUL-terminated (cuModuleLoadData takes it as is) */
  size_t size;              /**< bytes of PTX text, the NUL not counted */
} dsv4i_ptx_module;

/** Every embedded module, in kernels/meson.build order (generated). */
extern const dsv4i_ptx_module dsv4i_ptx_modules[];
/** Number of entries in dsv4i_ptx_modules (generated). */
extern const size_t dsv4i_ptx_module_count;

#endif /* DSV4I_PTX_H */
