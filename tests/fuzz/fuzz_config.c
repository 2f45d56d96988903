/* libFuzzer: the text of config.json through the parser, the value checks
 * and the role derivation; an accepted config must also build its tensor
 * contract (sizes that overflow must be refused by then, never wrap). */
#include <stdint.h>

#include "model/config.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  dsv4i_config cfg;
  if (dsv4i_config_parse((const char *)data, size, "config.json", &cfg) == DSV4_OK) {
    dsv4i_contract c;
    if (dsv4i_contract_build(&cfg, &c) == DSV4_OK) dsv4i_contract_free(&c);
  }
  dsv4i_error_clear();
  return 0;
}
