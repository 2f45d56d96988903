/* libFuzzer: the text of config.json through the parser, the value checks
 * and the role derivation (dsv4i_config_parse does all three). The tensor
 * contract is left out: for a release-size config it lists ~96,000 tensors,
 * which would bring the target from thousands to hundreds of runs a second;
 * the contract is built from values these checks have bounded. */
#include <stdint.h>

#include "model/config.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  dsv4i_config cfg;
  (void)dsv4i_config_parse((const char *)data, size, "config.json", &cfg);
  dsv4i_error_clear();
  return 0;
}
