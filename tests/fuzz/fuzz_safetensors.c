/* libFuzzer: a safetensors shard (8-byte length, JSON header, data area) fed
 * to the reader's validation. Accepted shards must describe tensors that lie
 * inside the buffer and tile the data area. */
#include <stdint.h>
#include <stdlib.h>

#include "io/safetensors.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  dsv4i_st_file f;
  if (dsv4i_st_parse("fuzz.safetensors", data, size, &f) == DSV4_OK) {
    uint64_t covered = 0;
    for (size_t i = 0; i < f.n_tensors; i++) {
      const dsv4i_st_tensor *t = &f.tensors[i];
      if (t->offset < f.data_start || t->offset + t->nbytes > size) abort();
      covered += t->nbytes;
    }
    if (covered != size - f.data_start) abort();
    dsv4i_st_close(&f);
  }
  dsv4i_error_clear();
  return 0;
}
