/* Where a fuzz target finds its data files: under $DSV4_SOURCE_ROOT when set
 * (a copy of the source tree somewhere else: tools/fuzz-long.sh), else
 * under the source tree it was built from. */
#ifndef DSV4_FUZZ_DATA_H
#define DSV4_FUZZ_DATA_H

#include <stdio.h>
#include <stdlib.h>

static inline const char *fuzz_data_dir(const char *rel) {
  static char path[4096];
  const char *root = getenv("DSV4_SOURCE_ROOT");
  snprintf(path, sizeof path, "%s/%s", root && *root ? root : DSV4_FUZZ_SOURCE_ROOT, rel);
  return path;
}

#endif
