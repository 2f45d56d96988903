/*
 * The one list of kernels: every PTX entry the library launches, with the
 * registry key it is dispatched by. Three things are generated from it:
 * the dsv4i_kernel_id enum and the registry table (kernel_registry.h/.c,
 * through the X-macros below) and the PTX modules the build compiles
 * (kernels/meson.build reads the module column of the X(...) rows, one row
 * per line, so a new kernels/<module>.cu needs only its rows here).
 *
 * Row: X(ID, OP, FMT, SHAPE, MIN_SM, MODULE, ENTRY, BLOCK)
 *   ID      suffix of DSV4I_K_<ID>, the index the hot path launches by
 *   OP      suffix of DSV4I_KOP_<OP>; FMT: of DSV4I_KFMT_<FMT>; SHAPE: of DSV4I_KSHAPE_<SHAPE>
 *   MIN_SM  lowest compute capability, major*10 + minor
 *   MODULE  kernels/<MODULE>.cu (one PTX module per file)
 *   ENTRY   extern "C" entry name in that module, dsv4_k_<op>_<dtype>[_<variant>]
 *   BLOCK   threads per block its launcher uses
 * Internal to lib/gpu.
 */
#ifndef DSV4I_KERNEL_LIST_H
#define DSV4I_KERNEL_LIST_H

/* Operations: X(OP, "printable name") */
#define DSV4I_KOPS(X)                                                                            \
  X(SELFTEST, "selftest")

/* Kernels (see above). One row per line: kernels/meson.build parses them. */
#define DSV4I_KERNELS(X)                                                                         \
  X(SELFTEST_E4M3_UE8M0, SELFTEST, E4M3_UE8M0, ANY, 80, selftest, dsv4_k_selftest_e4m3_ue8m0, 256)

#endif /* DSV4I_KERNEL_LIST_H */
