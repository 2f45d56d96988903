/* The one main of every cmocka suite: picks the tests, then runs the suite's
 * tu_run_suite().
 *   test_NAME [PATTERN]      only the tests whose name matches PATTERN
 *   DSV4_TEST_FILTER=PATTERN the same, when no argument is given
 *   DSV4_TEST_SKIP=PATTERN   skip the tests whose name matches PATTERN
 * Patterns are cmocka's: '*' matches any run of characters, '?' one.
 * e.g. `meson test -C build cpu_ops --test-args 'moe*'`. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "test_util.h"

int main(int argc, char **argv) {
  if (argc > 2 || (argc == 2 && (!strcmp(argv[1], "-h") || !strcmp(argv[1], "--help")))) {
    fprintf(argc > 2 ? stderr : stdout,
            "usage: %s [PATTERN]  (or DSV4_TEST_FILTER=PATTERN; DSV4_TEST_SKIP=PATTERN skips)\n",
            argv[0]);
    return argc > 2 ? 2 : 0;
  }
  const char *filter = argc == 2 ? argv[1] : getenv("DSV4_TEST_FILTER");
  if (filter && *filter) cmocka_set_test_filter(filter);
  const char *skip = getenv("DSV4_TEST_SKIP");
  if (skip && *skip) cmocka_set_skip_filter(skip);
  return tu_run_suite();
}
