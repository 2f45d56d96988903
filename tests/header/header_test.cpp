/* dsv4.h must compile alone (no other include first) in every mode. */
#include "dsv4/dsv4.h"

int main(void) {
  dsv4_model_params p;
  p.struct_size = (uint32_t)sizeof p;
  return dsv4_version() == DSV4_VERSION_NUMBER && p.struct_size > 0 ? 0 : 1;
}
