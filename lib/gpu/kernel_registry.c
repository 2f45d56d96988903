/* The kernel table and its loader. */
#include "gpu/kernel_registry.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "gpu/ptx.h"

/* Indexed by dsv4i_kernel_id, generated from gpu/kernel_list.h. A new
 * kernel adds a row there and its entry in kernels/<module>.cu;
 * dsv4i_kreg_check_tables() (unit suite, no device needed) fails when the
 * two disagree. */
static const dsv4i_kernel_desc k_table[DSV4I_K_COUNT] = {
#define DSV4I_K_ROW(id, op, fmt, shape, min_sm, module, entry, block)                      \
  [DSV4I_K_##id] = {DSV4I_KOP_##op, DSV4I_KFMT_##fmt, DSV4I_KSHAPE_##shape, min_sm, #module, \
                    #entry, block},
  DSV4I_KERNELS(DSV4I_K_ROW)
#undef DSV4I_K_ROW
};

const dsv4i_kernel_desc *dsv4i_kernel_desc_get(dsv4i_kernel_id id) { return &k_table[id]; }

const char *dsv4i_kop_name(dsv4i_kop op) {
  switch (op) {
#define DSV4I_KOP_NAME(o, name)                                                                  \
  case DSV4I_KOP_##o: return name;
    DSV4I_KOPS(DSV4I_KOP_NAME)
#undef DSV4I_KOP_NAME
  default: return "unknown-op";
  }
}

const char *dsv4i_kfmt_name(dsv4i_kfmt fmt) {
  switch (fmt) {
  case DSV4I_KFMT_F32: return "f32";
  case DSV4I_KFMT_BF16: return "bf16";
  case DSV4I_KFMT_E4M3_UE8M0: return "e4m3+ue8m0";
  case DSV4I_KFMT_E2M1_UE8M0: return "e2m1+ue8m0";
  case DSV4I_KFMT_E2M1_E4M3: return "e2m1+e4m3";
  case DSV4I_KFMT_DS_MLA: return "fp8_ds_mla";
  default: return "unknown-format";
  }
}

const char *dsv4i_kshape_name(dsv4i_kshape shape) {
  switch (shape) {
  case DSV4I_KSHAPE_ANY: return "any";
  case DSV4I_KSHAPE_DECODE: return "decode";
  case DSV4I_KSHAPE_DECODE_WARP: return "decode-warp";
  case DSV4I_KSHAPE_TILED: return "tiled";
  default: return "unknown-shape";
  }
}

static const dsv4i_ptx_module *find_module(const char *name, size_t *index) {
  for (size_t i = 0; i < dsv4i_ptx_module_count; i++)
    if (strcmp(dsv4i_ptx_modules[i].name, name) == 0) {
      if (index) *index = i;
      return &dsv4i_ptx_modules[i];
    }
  return NULL;
}

/* ".entry <name>(" in the PTX text: the kernel is defined there. */
static int ptx_defines(const dsv4i_ptx_module *m, const char *entry) {
  const char *text = (const char *)m->ptx;
  size_t n = strlen(entry);
  for (const char *p = strstr(text, ".entry "); p; p = strstr(p + 1, ".entry ")) {
    const char *q = p + 7;
    if (strncmp(q, entry, n) == 0 && q[n] == '(') return 1;
  }
  return 0;
}

static dsv4_status row_error(dsv4_status st, const dsv4i_kernel_desc *k, const char *what) {
  return dsv4i_error(st, "kernel registry: op %s, format %s, shape %s, min sm_%d: %s",
                     dsv4i_kop_name(k->op), dsv4i_kfmt_name(k->fmt), dsv4i_kshape_name(k->shape),
                     (int)k->min_sm, what);
}

dsv4_status dsv4i_kreg_check_tables(void) {
  for (size_t i = 0; i < dsv4i_ptx_module_count; i++) {
    const dsv4i_ptx_module *m = &dsv4i_ptx_modules[i];
    if (m->size != strlen((const char *)m->ptx) || !strstr((const char *)m->ptx, ".target sm_80"))
      return dsv4i_error(DSV4_ERR_INTERNAL,
                         "embedded PTX module %s: size mismatch or not compute_80 PTX", m->name);
  }
  for (size_t i = 0; i < DSV4I_K_COUNT; i++) {
    const dsv4i_kernel_desc *k = &k_table[i];
    char what[256];
    if (!k->entry || !k->module || k->block == 0 || k->min_sm < DSV4I_MIN_SM)
      return dsv4i_error(DSV4_ERR_INTERNAL, "kernel registry: row %zu is not filled in", i);
    if (strncmp(k->entry, "dsv4_k_", 7) != 0) {
      snprintf(what, sizeof what, "entry %s is not named dsv4_k_*", k->entry);
      return row_error(DSV4_ERR_INTERNAL, k, what);
    }
    const dsv4i_ptx_module *m = find_module(k->module, NULL);
    if (!m) {
      snprintf(what, sizeof what, "PTX module %s (kernels/%s.cu) is not embedded", k->module,
               k->module);
      return row_error(DSV4_ERR_INTERNAL, k, what);
    }
    if (!ptx_defines(m, k->entry)) {
      snprintf(what, sizeof what, "entry %s is not defined in PTX module %s", k->entry, k->module);
      return row_error(DSV4_ERR_INTERNAL, k, what);
    }
  }
  return DSV4_OK;
}

static double now_ms(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec * 1e3 + (double)ts.tv_nsec * 1e-6;
}

static dsv4_status load_module(const dsv4i_cuda_device *dev, const dsv4i_ptx_module *m,
                               dsv4i_cumod *out, float *driver_ms) {
  static _Thread_local char log[4096];
  log[0] = '\0';
  dsv4i_cujit opts[3] = {DSV4I_CU_JIT_WALL_TIME, DSV4I_CU_JIT_ERROR_LOG_BUFFER,
                         DSV4I_CU_JIT_ERROR_LOG_BUFFER_SIZE_BYTES};
  void *vals[3] = {NULL, log, (void *)(uintptr_t)sizeof log};
  dsv4i_cures r = dev->cu->ModuleLoadDataEx(out, m->ptx, 3, opts, vals);
  if (r != DSV4I_CUDA_SUCCESS) {
    *out = NULL;
    log[sizeof log - 1] = '\0';
    return dsv4i_cu_fail(dev->cu, r,
                         "cuModuleLoadDataEx(PTX module %s, %zu bytes, device %d %s sm_%d)%s%s",
                         m->name, m->size, (int)dev->ordinal, dev->name, (int)dev->sm,
                         log[0] ? "; JIT log: " : "", log);
  }
  float ms = 0;
  memcpy(&ms, &vals[0], sizeof ms); /* the driver writes a float into the option slot */
  *driver_ms += ms;
  return DSV4_OK;
}

dsv4_status dsv4i_kreg_load(const dsv4i_cuda_device *dev, dsv4i_kreg *kr) {
  memset(kr, 0, sizeof *kr);
  kr->dev = dev;
  kr->modules = dsv4i_calloc(dsv4i_ptx_module_count ? dsv4i_ptx_module_count : 1,
                             sizeof *kr->modules, "PTX module handles");
  if (!kr->modules) return DSV4_ERR_OUT_OF_MEMORY;
  dsv4_status st = DSV4_OK;
  double t0 = now_ms();
  for (size_t i = 0; i < dsv4i_ptx_module_count && st == DSV4_OK; i++) {
    st = load_module(dev, &dsv4i_ptx_modules[i], &kr->modules[i], &kr->jit_driver_ms);
    if (st == DSV4_OK) {
      kr->n_modules = i + 1;
      kr->ptx_bytes += dsv4i_ptx_modules[i].size;
    }
  }
  kr->jit_ms = now_ms() - t0;

  for (size_t i = 0; i < DSV4I_K_COUNT && st == DSV4_OK; i++) {
    const dsv4i_kernel_desc *k = &k_table[i];
    if (k->min_sm > dev->sm) continue; /* dsv4i_kreg_select reports it if it is ever asked for */
    size_t mi = 0;
    char what[512];
    if (!k->entry || !find_module(k->module, &mi)) {
      snprintf(what, sizeof what, "PTX module %s is not embedded (device sm_%d)",
               k->module ? k->module : "(none)", (int)dev->sm);
      st = row_error(DSV4_ERR_INTERNAL, k, what);
      break;
    }
    dsv4i_cures r = dev->cu->ModuleGetFunction(&kr->fn[i], kr->modules[mi], k->entry);
    if (r == DSV4I_CUDA_ERROR_NOT_FOUND) {
      snprintf(what, sizeof what,
               "entry %s not found in PTX module %s (device sm_%d): the table and kernels/%s.cu "
               "disagree",
               k->entry, k->module, (int)dev->sm, k->module);
      st = row_error(DSV4_ERR_INTERNAL, k, what);
    } else if (r != DSV4I_CUDA_SUCCESS) {
      st = dsv4i_cu_fail(dev->cu, r, "cuModuleGetFunction(%s in PTX module %s)", k->entry,
                         k->module);
    }
  }
  if (st != DSV4_OK) {
    dsv4i_kreg_unload(kr);
    return st;
  }
  return DSV4_OK;
}

void dsv4i_kreg_unload(dsv4i_kreg *kr) {
  if (kr->dev && kr->modules)
    for (size_t i = 0; i < kr->n_modules; i++)
      if (kr->modules[i]) kr->dev->cu->ModuleUnload(kr->modules[i]);
  free(kr->modules);
  memset(kr, 0, sizeof *kr);
}

dsv4_status dsv4i_kreg_select(const dsv4i_kreg *kr, dsv4i_kop op, dsv4i_kfmt fmt,
                              dsv4i_kshape shape, dsv4i_kernel_id *out) {
  int best = -1;
  int32_t lowest_needed = 0;
  for (size_t i = 0; i < DSV4I_K_COUNT; i++) {
    const dsv4i_kernel_desc *k = &k_table[i];
    if (k->op != op || k->fmt != fmt || k->shape != shape) continue;
    if (k->min_sm > kr->dev->sm || !kr->fn[i]) {
      if (lowest_needed == 0 || k->min_sm < lowest_needed) lowest_needed = k->min_sm;
      continue;
    }
    if (best < 0 || k->min_sm > k_table[best].min_sm) best = (int)i;
  }
  if (best < 0) {
    if (lowest_needed)
      return dsv4i_error(DSV4_ERR_UNSUPPORTED,
                         "no kernel for op %s, format %s, shape %s on sm_%d (%s): the table's "
                         "kernels for it need sm_%d or newer",
                         dsv4i_kop_name(op), dsv4i_kfmt_name(fmt), dsv4i_kshape_name(shape),
                         (int)kr->dev->sm, kr->dev->name, (int)lowest_needed);
    return dsv4i_error(DSV4_ERR_UNSUPPORTED, "no kernel for op %s, format %s, shape %s on sm_%d (%s)",
                       dsv4i_kop_name(op), dsv4i_kfmt_name(fmt), dsv4i_kshape_name(shape),
                       (int)kr->dev->sm, kr->dev->name);
  }
  *out = (dsv4i_kernel_id)best;
  return DSV4_OK;
}

dsv4_status dsv4i_kreg_launch_grid(const dsv4i_kreg *kr, dsv4i_kernel_id id, uint32_t grid_x,
                                   uint32_t grid_y, uint32_t grid_z, uint32_t shared_bytes,
                                   dsv4i_custream stream, void **params) {
  const dsv4i_kernel_desc *k = &k_table[id];
  if (kr->hook) kr->hook(kr->hook_user, id, stream, 0);
  dsv4i_cures r = kr->dev->cu->LaunchKernel(kr->fn[id], grid_x, grid_y, grid_z, k->block, 1, 1,
                                            shared_bytes, stream, params, NULL);
  if (kr->hook && r == DSV4I_CUDA_SUCCESS) kr->hook(kr->hook_user, id, stream, 1);
  if (r != DSV4I_CUDA_SUCCESS)
    return dsv4i_cu_fail(kr->dev->cu, r, "cuLaunchKernel(%s, grid %u x %u x %u, %u threads)",
                         k->entry, (unsigned)grid_x, (unsigned)grid_y, (unsigned)grid_z,
                         (unsigned)k->block);
  return DSV4_OK;
}

dsv4_status dsv4i_kreg_launch(const dsv4i_kreg *kr, dsv4i_kernel_id id, uint32_t grid_x,
                              uint32_t shared_bytes, dsv4i_custream stream, void **params) {
  return dsv4i_kreg_launch_grid(kr, id, grid_x, 1, 1, shared_bytes, stream, params);
}
