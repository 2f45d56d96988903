/*
 * A device fault makes the engine sticky-failed: the kernel reads an
 * unmapped address, the next synchronisation reports DSV4_ERR_DEVICE_LOST,
 * and every later call on that engine returns DSV4_ERR_DEVICE_LOST with the
 * first fault's message until it is closed; closing does not crash.
 * (A separate program: the fault poisons the device's primary context for
 * the whole process. Not run under compute-sanitizer: the fault is the test.)
 * Exit 77 without a GPU.
 */
#include "gpu_test_util.h"

#include "gpu/gpu_ops.h"

static void fault_is_sticky_device_lost(void **state) {
  (void)state;
  dsv4i_gpu g;
  gt_open(&g, 1 << 20);
  dsv4i_gpu_ops o;
  gt_check(dsv4i_gpu_ops_init(&g.kr, &o));
  dsv4i_cuptr y = 0;
  gt_check(dsv4i_gpu_pool_take(&g.pool, 4096, "y", &y));
  const dsv4i_cuptr bad = (dsv4i_cuptr)1 << 47; /* nothing is mapped there */
  gt_check(dsv4i_gpu_rmsnorm(&o, g.stream, 4, 1024, bad, 1024, bad, 1e-6f, y, 1024));
  assert_int_equal(dsv4i_gpu_sync(&g), DSV4_ERR_DEVICE_LOST);
  printf("# first fault: %s\n", dsv4i_error_message());
  assert_int_equal(g.lost, DSV4_ERR_DEVICE_LOST);
  assert_int_equal(dsv4i_gpu_alive(&g), DSV4_ERR_DEVICE_LOST);
  assert_non_null(strstr(dsv4i_error_message(), "free it"));
  assert_int_equal(dsv4i_gpu_enter(&g), DSV4_ERR_DEVICE_LOST);
  assert_int_equal(dsv4i_gpu_sync(&g), DSV4_ERR_DEVICE_LOST);
  printf("# later calls: %s\n", dsv4i_error_message());
  dsv4i_gpu_close(&g);
}

int tu_run_suite(void) {
  const struct CMUnitTest tests[] = {cmocka_unit_test(fault_is_sticky_device_lost)};
  return cmocka_run_group_tests_name("cuda_lost", tests, NULL, NULL);
}
