/* dsv4.hpp compiles alone with -Wall -Wextra -pedantic -Werror as C++17 and
 * C++20, and a failed call throws dsv4::error with the status and the message. */
#include "dsv4/dsv4.hpp"

#include <cstdio>
#include <cstring>

int main() {
  try {
    dsv4::model m("/no/such/checkpoint");
    std::puts("no exception");
    return 1;
  } catch (const dsv4::error &e) {
    std::printf("%s\n", e.what());
    if (e.status() != DSV4_ERR_NOT_FOUND || !std::strstr(e.what(), "/no/such/checkpoint")) return 1;
  }
  const dsv4_sampling_params sp = dsv4::sampling_params();
  return sp.temperature == 0.0f ? 0 : 1;
}
