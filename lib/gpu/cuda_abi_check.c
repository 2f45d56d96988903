/*
 * Configure-time check (lib/gpu/meson.build), not part of the library:
 * compiles only if every declaration in cuda_driver.h agrees with the
 * toolkit's <cuda.h> and <cudaTypedefs.h>. Entry points are compared type
 * for type with PFN_cu<name>_v<version>, constants by value, and the sizes
 * of the types the normal build declares itself.
 */
#define DSV4I_CUDA_DRIVER_FROM_CUDA_H 1
#include "gpu/cuda_driver.h"

#include <cudaTypedefs.h>

#define CHECK_PFN(name, ver, params)                                                     \
  _Static_assert(__builtin_types_compatible_p(dsv4i_pfn_##name, PFN_cu##name##_v##ver), \
                 "cu" #name ": signature differs from PFN_cu" #name "_v" #ver);
DSV4I_CU_FUNCS(CHECK_PFN)

#define CHECK_EQ(ours, theirs) _Static_assert((ours) == (theirs), #ours " != " #theirs);
CHECK_EQ(DSV4I_CUDA_SUCCESS, CUDA_SUCCESS)
CHECK_EQ(DSV4I_CUDA_ERROR_OUT_OF_MEMORY, CUDA_ERROR_OUT_OF_MEMORY)
CHECK_EQ(DSV4I_CUDA_ERROR_NOT_INITIALIZED, CUDA_ERROR_NOT_INITIALIZED)
CHECK_EQ(DSV4I_CUDA_ERROR_STUB_LIBRARY, CUDA_ERROR_STUB_LIBRARY)
CHECK_EQ(DSV4I_CUDA_ERROR_NO_DEVICE, CUDA_ERROR_NO_DEVICE)
CHECK_EQ(DSV4I_CUDA_ERROR_INVALID_DEVICE, CUDA_ERROR_INVALID_DEVICE)
CHECK_EQ(DSV4I_CUDA_ERROR_INVALID_PTX, CUDA_ERROR_INVALID_PTX)
CHECK_EQ(DSV4I_CUDA_ERROR_UNSUPPORTED_PTX_VERSION, CUDA_ERROR_UNSUPPORTED_PTX_VERSION)
CHECK_EQ(DSV4I_CUDA_ERROR_NOT_FOUND, CUDA_ERROR_NOT_FOUND)
CHECK_EQ(DSV4I_CUDA_ERROR_ILLEGAL_ADDRESS, CUDA_ERROR_ILLEGAL_ADDRESS)
CHECK_EQ(DSV4I_CUDA_ERROR_ASSERT, CUDA_ERROR_ASSERT)
CHECK_EQ(DSV4I_CUDA_ERROR_HARDWARE_STACK_ERROR, CUDA_ERROR_HARDWARE_STACK_ERROR)
CHECK_EQ(DSV4I_CUDA_ERROR_ILLEGAL_INSTRUCTION, CUDA_ERROR_ILLEGAL_INSTRUCTION)
CHECK_EQ(DSV4I_CUDA_ERROR_MISALIGNED_ADDRESS, CUDA_ERROR_MISALIGNED_ADDRESS)
CHECK_EQ(DSV4I_CUDA_ERROR_INVALID_ADDRESS_SPACE, CUDA_ERROR_INVALID_ADDRESS_SPACE)
CHECK_EQ(DSV4I_CUDA_ERROR_INVALID_PC, CUDA_ERROR_INVALID_PC)
CHECK_EQ(DSV4I_CUDA_ERROR_LAUNCH_FAILED, CUDA_ERROR_LAUNCH_FAILED)
CHECK_EQ(DSV4I_CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT, CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT)
CHECK_EQ(DSV4I_CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR,
         CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR)
CHECK_EQ(DSV4I_CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR,
         CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR)
CHECK_EQ(DSV4I_CU_JIT_WALL_TIME, CU_JIT_WALL_TIME)
CHECK_EQ(DSV4I_CU_JIT_INFO_LOG_BUFFER, CU_JIT_INFO_LOG_BUFFER)
CHECK_EQ(DSV4I_CU_JIT_INFO_LOG_BUFFER_SIZE_BYTES, CU_JIT_INFO_LOG_BUFFER_SIZE_BYTES)
CHECK_EQ(DSV4I_CU_JIT_ERROR_LOG_BUFFER, CU_JIT_ERROR_LOG_BUFFER)
CHECK_EQ(DSV4I_CU_JIT_ERROR_LOG_BUFFER_SIZE_BYTES, CU_JIT_ERROR_LOG_BUFFER_SIZE_BYTES)
CHECK_EQ(DSV4I_CU_GET_PROC_ADDRESS_LEGACY_STREAM, CU_GET_PROC_ADDRESS_LEGACY_STREAM)
CHECK_EQ(DSV4I_CU_GET_PROC_ADDRESS_SUCCESS, CU_GET_PROC_ADDRESS_SUCCESS)

/* the normal build's stand-ins (int for enums, unsigned long long) */
CHECK_EQ(sizeof(CUresult), sizeof(int))
CHECK_EQ(sizeof(CUdevice), sizeof(int))
CHECK_EQ(sizeof(CUdevice_attribute), sizeof(int))
CHECK_EQ(sizeof(CUjit_option), sizeof(int))
CHECK_EQ(sizeof(CUdriverProcAddressQueryResult), sizeof(int))
CHECK_EQ(sizeof(CUdeviceptr), sizeof(unsigned long long))
CHECK_EQ(sizeof(cuuint64_t), sizeof(uint64_t))
/* cuGetProcAddress_v2, the one symbol taken with dlsym (cuda_driver.c's get_proc_fn) */
_Static_assert(__builtin_types_compatible_p(
                   PFN_cuGetProcAddress_v12000,
                   CUresult (*)(const char *, void **, int, cuuint64_t,
                                CUdriverProcAddressQueryResult *)),
               "cuGetProcAddress_v2 signature");

int dsv4i_cuda_abi_check_main(void);
int dsv4i_cuda_abi_check_main(void) { return 0; }
