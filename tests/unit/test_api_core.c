/* Public calls that need no model: statuses, version, build info, backend probe. */
#include <stdlib.h>
#include <string.h>

#include "test_util.h"
#include "dsv4/dsv4.h"

static void status_strings_name_their_code(void **state) {
  (void)state;
  const dsv4_status all[] = {DSV4_OK, DSV4_KV_FULL, DSV4_ABORTED, DSV4_ERR_INVALID_ARG,
    DSV4_ERR_OUT_OF_MEMORY, DSV4_ERR_UNSUPPORTED, DSV4_ERR_INTERNAL, DSV4_ERR_PARAMS_SIZE,
    DSV4_ERR_IO, DSV4_ERR_NOT_FOUND, DSV4_ERR_JSON, DSV4_ERR_ST_HEADER, DSV4_ERR_ST_TRUNCATED,
    DSV4_ERR_ST_DTYPE, DSV4_ERR_ST_OFFSETS, DSV4_ERR_ST_OVERLAP, DSV4_ERR_ST_SIZE,
    DSV4_ERR_ST_DUPLICATE, DSV4_ERR_INDEX, DSV4_ERR_MISSING_SHARD, DSV4_ERR_INDEX_MISMATCH,
    DSV4_ERR_CONFIG_KEY, DSV4_ERR_CONFIG_VALUE, DSV4_ERR_WEIGHTS, DSV4_ERR_TOKENIZER,
    DSV4_ERR_INVALID_UTF8, DSV4_ERR_UNKNOWN_SEQUENCE, DSV4_ERR_CONTEXT_OVERFLOW,
    DSV4_ERR_INVALID_TOKEN, DSV4_ERR_DOES_NOT_FIT, DSV4_ERR_NOT_FINITE,
    DSV4_ERR_NO_DEVICE, DSV4_ERR_DEVICE,
    DSV4_ERR_DEVICE_LOST, DSV4_ERR_RANK_MISMATCH, DSV4_ERR_RANK_FAILED};
  for (size_t i = 0; i < sizeof all / sizeof all[0]; i++) {
    const char *s = dsv4_status_string(all[i]);
    assert_non_null(s);
    assert_int_equal(strncmp(s, "DSV4_", 5), 0);
    for (size_t j = 0; j < i; j++) assert_string_not_equal(s, dsv4_status_string(all[j]));
  }
  assert_string_equal(dsv4_status_string(12345), "unknown status");
  /* pinned values: changing one is an ABI break */
  assert_int_equal(DSV4_KV_FULL, 1);
  assert_int_equal(DSV4_ERR_INVALID_ARG, -1);
  assert_int_equal(DSV4_ERR_ST_OVERLAP, -24);
  assert_int_equal(DSV4_ERR_WEIGHTS, -32);
  assert_int_equal(DSV4_ERR_DEVICE_LOST, -72);
  assert_int_equal(DSV4_ERR_RANK_MISMATCH, -80);
  assert_int_equal(DSV4_ERR_RANK_FAILED, -81);
}

static void version_matches_header(void **state) {
  (void)state;
  assert_int_equal(dsv4_version(), DSV4_VERSION_NUMBER);
  assert_string_equal(dsv4_version_string(), DSV4_VERSION_STRING);
  const char *bi = dsv4_build_info();
  assert_non_null(strstr(bi, DSV4_VERSION_STRING));
  assert_non_null(strstr(bi, "cuda ptx"));
}

static void probe_cpu_ok_and_bad_args_rejected(void **state) {
  (void)state;
  assert_int_equal(dsv4_backend_probe(DSV4_BACKEND_CPU, 0), DSV4_OK);
  assert_string_equal(dsv4_last_error(), "");
  assert_int_equal(dsv4_backend_probe(77, 0), DSV4_ERR_INVALID_ARG);
  assert_non_null(strstr(dsv4_last_error(), "unknown backend 77"));
  assert_int_equal(dsv4_backend_probe(DSV4_BACKEND_CUDA, -1), DSV4_ERR_INVALID_ARG);
}

/* On a machine without an NVIDIA driver (CI) the CUDA backend is a clear
 * status, never a load failure: this test process loaded libdsv4.so, which
 * links no CUDA library. With a driver and GPU present it must succeed. */
static void probe_cuda_is_a_status(void **state) {
  (void)state;
  dsv4_status s = dsv4_backend_probe(DSV4_BACKEND_CUDA, 0);
  if (s == DSV4_OK) return;
  assert_true(s == DSV4_ERR_NO_DEVICE || s == DSV4_ERR_UNSUPPORTED);
  assert_true(strlen(dsv4_last_error()) > 10);
  /* a huge ordinal is out of range or unsupported, never OK */
  s = dsv4_backend_probe(DSV4_BACKEND_CUDA, 4096);
  assert_true(s == DSV4_ERR_NO_DEVICE || s == DSV4_ERR_UNSUPPORTED);
}

static void free_null_is_noop(void **state) {
  (void)state;
  dsv4_free(NULL);
}

int tu_run_suite(void) {
  const struct CMUnitTest tests[] = {
    cmocka_unit_test(status_strings_name_their_code),
    cmocka_unit_test(version_matches_header),
    cmocka_unit_test(probe_cpu_ok_and_bad_args_rejected),
    cmocka_unit_test(probe_cuda_is_a_status),
    cmocka_unit_test(free_null_is_noop),
  };
  return cmocka_run_group_tests_name("api_core", tests, NULL, NULL);
}
