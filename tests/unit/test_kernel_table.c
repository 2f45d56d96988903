/* The kernel registry's table must name only entries present in the
 * embedded PTX: checked here without a GPU, so CI catches a renamed or
 * removed kernel that only the gpu suite would otherwise see. */
#include <stdio.h>

#include "test_util.h"
#include "gpu/cuda.h"

static void table_matches_embedded_ptx(void **state) {
  (void)state;
  if (!dsv4i_cuda_built()) {
    fprintf(stderr, "SKIP: built without CUDA kernels\n");
    skip();
  }
  dsv4_status s = dsv4i_cuda_check_tables();
  if (s != DSV4_OK) fail_msg("%s", dsv4i_error_message());
}

int tu_run_suite(void) {
  const struct CMUnitTest tests[] = {cmocka_unit_test(table_matches_embedded_ptx)};
  return cmocka_run_group_tests_name("kernel_table", tests, NULL, NULL);
}
