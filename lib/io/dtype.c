/* Checkpoint storage dtypes: safetensors strings and element sizes (see safetensors.h). */
#include <string.h>

#include "io/safetensors.h"

static const struct {
  int32_t dtype;
  const char *name;
  size_t size;
} k_dtypes[] = {
  {DSV4_DTYPE_BF16, "BF16", 2},   {DSV4_DTYPE_F16, "F16", 2},
  {DSV4_DTYPE_F32, "F32", 4},     {DSV4_DTYPE_F8_E4M3, "F8_E4M3", 1},
  {DSV4_DTYPE_F8_E8M0, "F8_E8M0", 1}, {DSV4_DTYPE_I8, "I8", 1},
  {DSV4_DTYPE_I32, "I32", 4},     {DSV4_DTYPE_I64, "I64", 8},
};

size_t dsv4i_dtype_size(int32_t dtype) {
  for (size_t i = 0; i < DSV4I_ARRAY_LEN(k_dtypes); i++)
    if (k_dtypes[i].dtype == dtype) return k_dtypes[i].size;
  return 0;
}

int32_t dsv4i_dtype_from_string(const char *s) {
  if (!s) return 0;
  for (size_t i = 0; i < DSV4I_ARRAY_LEN(k_dtypes); i++)
    if (strcmp(k_dtypes[i].name, s) == 0) return k_dtypes[i].dtype;
  return 0;
}

const char *dsv4i_dtype_name(int32_t dtype) {
  for (size_t i = 0; i < DSV4I_ARRAY_LEN(k_dtypes); i++)
    if (k_dtypes[i].dtype == dtype) return k_dtypes[i].name;
  return "?";
}
