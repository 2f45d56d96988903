/* Built against an installed prefix with only `pkg-config --cflags --libs dsv4`. */
#include <dsv4/dsv4.h>
#include <stdio.h>

int main(void) {
  printf("libdsv4 %s (header %s)\n", dsv4_version_string(), DSV4_VERSION_STRING);
  return dsv4_version() == DSV4_VERSION_NUMBER ? 0 : 1;
}
