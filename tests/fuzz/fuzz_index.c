/* libFuzzer: the text of model.safetensors.index.json through every check
 * that needs no shard (JSON, structure, metadata.total_size, shard names). */
#include <stdint.h>

#include "io/safetensors.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  (void)dsv4i_index_check_text("model.safetensors.index.json", (const char *)data, size);
  dsv4i_error_clear();
  return 0;
}
