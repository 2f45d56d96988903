/*
 * Shared by the configure-time ABI checks (cuda_abi_check.c,
 * cublaslt_abi_check.c; lib/gpu/meson.build compiles them, they are not
 * part of the library): our declarations are taken in their "from the
 * toolkit's headers" form, and CHECK_EQ compares one of our constants or
 * sizes with the toolkit's at compile time.
 */
#ifndef DSV4I_GPU_ABI_CHECK_H
#define DSV4I_GPU_ABI_CHECK_H

#define DSV4I_CUDA_DRIVER_FROM_CUDA_H 1
#define CHECK_EQ(ours, theirs) _Static_assert((ours) == (theirs), #ours " != " #theirs);

#endif /* DSV4I_GPU_ABI_CHECK_H */
