/*
 * Token records of device attention calls (lib/gpu/attn_tokens.h): the
 * run bookkeeping the kernels rely on (first / last position and first row
 * of each sequence's run, the index-row layout) and the CPU backend's batch
 * rules. No GPU needed.
 */
#include <string.h>

#include "test_util.h"
#include "gpu/attn_tokens.h"

static void runs_and_layouts(void **state) {
  (void)state;
  /* seq row 7: decode at 300; row 2: prefill chunk 0..3 (width 4); row 5: 130..131 (width 128) */
  const int32_t row[] = {7, 2, 2, 2, 2, 5, 5};
  const int64_t pos[] = {300, 0, 1, 2, 3, 130, 131};
  const int32_t lay[] = {0, 4, 4, 4, 4, 128, 128};
  dsv4i_gpu_attn_tok t[7];
  assert_int_equal(dsv4i_gpu_attn_tokens(7, row, pos, lay, 128, t), DSV4_OK);
  const int32_t first[] = {300, 0, 0, 0, 0, 130, 130}, last[] = {300, 3, 3, 3, 3, 131, 131};
  const int32_t row0[] = {0, 1, 1, 1, 1, 5, 5};
  for (int i = 0; i < 7; i++) {
    assert_int_equal(t[i].seq, row[i]);
    assert_int_equal(t[i].pos, pos[i]);
    assert_int_equal(t[i].first, first[i]);
    assert_int_equal(t[i].last, last[i]);
    assert_int_equal(t[i].row0, row0[i]);
    assert_int_equal(t[i].layout, lay[i]);
    assert_int_equal(t[i].pad_[0], 0);
  }
  assert_int_equal(dsv4i_gpu_attn_tokens(0, NULL, NULL, NULL, 128, NULL), DSV4_OK);
}

static void batch_rules_are_checked(void **state) {
  (void)state;
  dsv4i_gpu_attn_tok t[4];
  const int32_t dec[] = {0, 0, 0, 0};
  /* a sequence's tokens apart in the batch */
  const int32_t r1[] = {1, 2, 1};
  const int64_t p1[] = {5, 9, 6};
  assert_int_equal(dsv4i_gpu_attn_tokens(3, r1, p1, dec, 128, t), DSV4_ERR_INVALID_ARG);
  assert_non_null(strstr(dsv4i_error_message(), "consecutive in the batch"));
  /* a gap in positions */
  const int32_t r2[] = {1, 1};
  const int64_t p2[] = {5, 7};
  assert_int_equal(dsv4i_gpu_attn_tokens(2, r2, p2, dec, 128, t), DSV4_ERR_INVALID_ARG);
  /* prefill width below the visible window part, above the window */
  const int64_t p3[] = {9};
  const int32_t w3[] = {9}, w4[] = {129};
  assert_int_equal(dsv4i_gpu_attn_tokens(1, r2, p3, w3, 128, t), DSV4_ERR_INVALID_ARG);
  assert_int_equal(dsv4i_gpu_attn_tokens(1, r2, p3, w4, 128, t), DSV4_ERR_INVALID_ARG);
  const int32_t w5[] = {10};
  assert_int_equal(dsv4i_gpu_attn_tokens(1, r2, p3, w5, 128, t), DSV4_OK);
  /* positions out of range, negative rows, NULL arrays */
  const int64_t p6[] = {INT64_C(1) << 24}, p7[] = {-1};
  assert_int_equal(dsv4i_gpu_attn_tokens(1, r2, p6, dec, 128, t), DSV4_ERR_INVALID_ARG);
  assert_int_equal(dsv4i_gpu_attn_tokens(1, r2, p7, dec, 128, t), DSV4_ERR_INVALID_ARG);
  const int32_t r8[] = {-1};
  assert_int_equal(dsv4i_gpu_attn_tokens(1, r8, p3, dec, 128, t), DSV4_ERR_INVALID_ARG);
  assert_int_equal(dsv4i_gpu_attn_tokens(1, NULL, p3, dec, 128, t), DSV4_ERR_INVALID_ARG);
  assert_int_equal(dsv4i_gpu_attn_tokens(1, r2, p3, dec, 0, t), DSV4_ERR_INVALID_ARG);
}

static void dspark_blocks(void **state) {
  (void)state;
  const int32_t row[] = {3, 8};
  const int64_t anchor[] = {0, 1000};
  dsv4i_gpu_attn_tok t[10];
  assert_int_equal(dsv4i_gpu_attn_dspark_tokens(2, row, anchor, 5, t), DSV4_OK);
  for (int b = 0; b < 2; b++)
    for (int j = 0; j < 5; j++) {
      const dsv4i_gpu_attn_tok *k = &t[b * 5 + j];
      assert_int_equal(k->seq, row[b]);
      assert_int_equal(k->pos, anchor[b] + 1 + j);
      assert_int_equal(k->first, anchor[b] + 1);
      assert_int_equal(k->last, anchor[b] + 5);
      assert_int_equal(k->row0, b * 5);
      assert_int_equal(k->layout, -5);
    }
  const int64_t bad[] = {-1};
  assert_int_equal(dsv4i_gpu_attn_dspark_tokens(1, row, bad, 5, t), DSV4_ERR_INVALID_ARG);
  assert_int_equal(dsv4i_gpu_attn_dspark_tokens(1, row, anchor, 0, t), DSV4_ERR_INVALID_ARG);
}

int tu_run_suite(void) {
  const struct CMUnitTest tests[] = {
    cmocka_unit_test(runs_and_layouts),
    cmocka_unit_test(batch_rules_are_checked),
    cmocka_unit_test(dspark_blocks),
  };
  return cmocka_run_group_tests_name("gpu_attn_tokens", tests, NULL, NULL);
}
