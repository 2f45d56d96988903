/*
 * The GPU pipeline end to end: kernels/selftest.cu compiled to compute_80
 * PTX, embedded, JIT-loaded through the driver opened with dlopen, resolved
 * by the kernel registry and launched; its output compared bit for bit with
 * the CPU definition of E4M3FN and UE8M0 (model-spec §3.1).
 *
 * Exit 77 (skip) when the build has no kernels or there is no usable GPU.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "test_util.h"
#include "gpu/cuda.h"
#include "model/formats.h"

/* ---- CPU reference, written from the spec ------------------------------- */

/* E4M3FN: sign, 4-bit exponent (bias 7), 3-bit mantissa; exponent 0 is
 * subnormal (m/8)*2^-6; 0x7F and 0xFF are NaN; no infinities. */
static float ref_e4m3(uint8_t b) {
  int sign = b >> 7, e = (b >> 3) & 15, m = b & 7;
  if (e == 15 && m == 7) return NAN;
  float mag = e == 0 ? ldexpf((float)m, -9) : ldexpf((float)(8 + m), e - 10);
  return sign ? -mag : mag;
}

/* UE8M0: 2^(b-127); 255 is NaN. */
static float ref_ue8m0(uint8_t b) { return b == 255 ? NAN : ldexpf(1.0f, (int)b - 127); }

static uint32_t f32_bits(float f) {
  uint32_t u;
  memcpy(&u, &f, sizeof u);
  return u;
}

/* Bit-exact, except that any NaN equals any NaN (payloads are not
 * specified). The expected value is the CPU backend's: the library's decoders
 * and one f32 multiply. */
static size_t count_mismatches(const uint8_t *codes, const uint8_t *scales, const float *got,
                               size_t n) {
  size_t bad = 0;
  for (size_t i = 0; i < n; i++) {
    float want = dsv4i_e4m3_to_f32(codes[i]) * dsv4i_e8m0_to_f32(scales[i / 32]);
    int ok = isnan(want) ? isnan(got[i]) : f32_bits(want) == f32_bits(got[i]);
    if (!ok && bad++ < 8)
      fprintf(stderr, "  [%zu] code 0x%02x scale %u: got %a (0x%08x), want %a (0x%08x)\n", i,
              codes[i], scales[i / 32], (double)got[i], (unsigned)f32_bits(got[i]), (double)want,
              (unsigned)f32_bits(want));
  }
  return bad;
}

static void print_report(const char *what, const dsv4i_cuda_report *r) {
  printf("# %s: device \"%s\" sm_%d, %d SMs, driver API %d.%d, PTX from CUDA %d.%d; "
         "%zu module(s), %zu bytes of PTX, JIT %.3f ms (driver says %.3f ms)",
         what, r->device_name, (int)r->sm, (int)r->n_sm, (int)r->driver_version / 1000,
         (int)r->driver_version % 1000 / 10, (int)r->ptx_version / 1000,
         (int)r->ptx_version % 1000 / 10, r->n_modules, r->ptx_bytes, r->jit_ms, r->jit_driver_ms);
  if (r->kernel_ms > 0) printf(", kernel+sync %.3f ms", r->kernel_ms);
  printf("\n");
}

/* ---- no device needed ---------------------------------------------------- */

static void reference_matches_spec_points(void **state) {
  (void)state;
  /* pin the CPU reference itself on values the spec states */
  assert_true(ref_e4m3(0x7E) == 448.0f);   /* max finite */
  assert_true(ref_e4m3(0xFE) == -448.0f);
  assert_true(ref_e4m3(0x01) == ldexpf(1.0f, -9)); /* smallest subnormal (1/8)*2^-6 */
  assert_true(ref_e4m3(0x08) == ldexpf(1.0f, -6)); /* smallest normal */
  assert_true(ref_e4m3(0x38) == 1.0f);
  assert_true(isnan(ref_e4m3(0x7F)) && isnan(ref_e4m3(0xFF)));
  assert_true(ref_e4m3(0x80) == 0.0f && signbit(ref_e4m3(0x80)));
  assert_true(ref_ue8m0(127) == 1.0f);
  assert_true(ref_ue8m0(0) == ldexpf(1.0f, -127) && ref_ue8m0(0) > 0.0f);
  assert_true(isnan(ref_ue8m0(255)));
}

/* The library's CPU decoders, which the GPU output is compared with, equal
 * the spec reference on every byte. */
static void library_decoders_match_reference(void **state) {
  (void)state;
  for (unsigned b = 0; b < 256; b++) {
    float lib = dsv4i_e4m3_to_f32((uint8_t)b), ref = ref_e4m3((uint8_t)b);
    assert_true(isnan(ref) ? isnan(lib) : f32_bits(lib) == f32_bits(ref));
    lib = dsv4i_e8m0_to_f32((uint8_t)b);
    ref = ref_ue8m0((uint8_t)b);
    assert_true(isnan(ref) ? isnan(lib) : f32_bits(lib) == f32_bits(ref));
  }
}

static void kernel_table_matches_embedded_ptx(void **state) {
  (void)state;
  dsv4_status s = dsv4i_cuda_check_tables();
  if (s != DSV4_OK) fprintf(stderr, "%s\n", dsv4i_error_message());
  assert_int_equal(s, DSV4_OK);
}

/* ---- on the GPU ---------------------------------------------------------- */

/* Every (code, scale) pair: for scale s, elements [256 s, 256 s + 256) hold
 * the codes 0..255, i.e. 8 blocks of 32 that all carry scale s. 65536
 * elements run through the kernel's grid-stride loop (grid = SM count). */
static void e4m3_all_codes_all_scales_exact(void **state) {
  (void)state;
  const size_t n = 256 * 256;
  uint8_t *codes = malloc(n), *scales = malloc(n / 32);
  float *out = malloc(n * sizeof *out);
  assert_non_null(codes);
  assert_non_null(scales);
  assert_non_null(out);
  for (size_t i = 0; i < n; i++) codes[i] = (uint8_t)(i & 255);
  for (size_t j = 0; j < n / 32; j++) scales[j] = (uint8_t)(j / 8);
  memset(out, 0xA5, n * sizeof *out);
  dsv4i_cuda_report rep;
  dsv4_status s = dsv4i_cuda_selftest(0, codes, scales, n, out, &rep);
  if (s != DSV4_OK) fprintf(stderr, "%s\n", dsv4i_error_message());
  assert_int_equal(s, DSV4_OK);
  print_report("selftest (warm JIT cache)", &rep);
  assert_true(rep.sm >= 80);
  assert_true(rep.jit_ms > 0.0);
  assert_true(rep.n_modules >= 1 && rep.ptx_bytes > 0);
  assert_int_equal(count_mismatches(codes, scales, out, n), 0);
  free(codes);
  free(scales);
  free(out);
}

/* A length that is neither a multiple of 32 nor of the block size, random
 * codes and scales: the tail of the last scale block and of the grid. */
static void e4m3_ragged_length_exact(void **state) {
  (void)state;
  const size_t n = 1000;
  uint8_t codes[1000], scales[32];
  float out[1000];
  uint32_t x = 12345;
  for (size_t i = 0; i < n; i++) codes[i] = (uint8_t)((x = x * 1664525u + 1013904223u) >> 24);
  for (size_t j = 0; j < 32; j++) scales[j] = (uint8_t)(100 + ((x = x * 1664525u + 1013904223u) >> 27));
  assert_int_equal(dsv4i_cuda_selftest(0, codes, scales, n, out, NULL), DSV4_OK);
  assert_int_equal(count_mismatches(codes, scales, out, n), 0);
}

static void bad_arguments_touch_nothing(void **state) {
  (void)state;
  uint8_t c = 0;
  float o = 0;
  assert_int_equal(dsv4i_cuda_selftest(0, NULL, &c, 1, &o, NULL), DSV4_ERR_INVALID_ARG);
  assert_int_equal(dsv4i_cuda_selftest(0, &c, &c, 0, &o, NULL), DSV4_ERR_INVALID_ARG);
}

static void out_of_range_ordinal_is_no_device(void **state) {
  (void)state;
  assert_int_equal(dsv4i_cuda_probe(4096), DSV4_ERR_NO_DEVICE);
  assert_non_null(strstr(dsv4i_error_message(), "4096"));
}

int tu_run_suite(void) {
  if (!dsv4i_cuda_built()) {
    printf("skip: this build has no CUDA kernels (configured without nvcc, or -Dcuda=disabled)\n");
    return 77;
  }
  const struct CMUnitTest host_tests[] = {
    cmocka_unit_test(reference_matches_spec_points),
    cmocka_unit_test(library_decoders_match_reference),
    cmocka_unit_test(kernel_table_matches_embedded_ptx),
  };
  int failed = cmocka_run_group_tests_name("cuda_selftest_host", host_tests, NULL, NULL);
  if (failed) return failed;

  /* The first load on this machine: on a fresh one, the JIT cache is cold. */
  dsv4i_cuda_report rep;
  dsv4_status s = dsv4i_cuda_probe_report(0, &rep);
  if (s == DSV4_ERR_NO_DEVICE || s == DSV4_ERR_UNSUPPORTED) {
    printf("skip: no usable CUDA device: %s: %s\n", dsv4_status_string(s), dsv4i_error_message());
    return 77;
  }
  if (s != DSV4_OK) {
    fprintf(stderr, "probe of device 0 failed: %s: %s\n", dsv4_status_string(s),
            dsv4i_error_message());
    return 1;
  }
  print_report("probe (first load in this process)", &rep);

  const struct CMUnitTest gpu_tests[] = {
    cmocka_unit_test(e4m3_all_codes_all_scales_exact),
    cmocka_unit_test(e4m3_ragged_length_exact),
    cmocka_unit_test(bad_arguments_touch_nothing),
    cmocka_unit_test(out_of_range_ordinal_is_no_device),
  };
  return cmocka_run_group_tests_name("cuda_selftest_gpu", gpu_tests, NULL, NULL);
}
