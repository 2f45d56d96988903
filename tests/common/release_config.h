/* The release and fixture configs loaded for internal tests (header-only: needs lib/model). */
#ifndef DSV4_TEST_RELEASE_CONFIG_H
#define DSV4_TEST_RELEASE_CONFIG_H

#include <stdlib.h>

#include "model/config.h"
#include "test_util.h"

static inline void tu_load_release_config(dsv4i_config *c) {
  char *path = tu_release_config_path();
  assert_int_equal(dsv4i_config_load(path, c), DSV4_OK);
  free(path);
}

/* config.json of a shared fixture (tests/fixtures README), or skip when it is absent. */
static inline void tu_load_fixture_config(const char *fixture, dsv4i_config *c) {
  char *path = tu_join(tu_fixture_or_skip(fixture), "config.json");
  assert_int_equal(dsv4i_config_load(path, c), DSV4_OK);
  free(path);
}

#endif /* DSV4_TEST_RELEASE_CONFIG_H */
