#include "tool_util.h"

#include <inttypes.h>
#include <stdio.h>

#include "dsv4/dsv4.h"

const char *tool_grouped(int64_t v, char *buf, size_t cap) {
  if (v == INT64_MAX) {
    snprintf(buf, cap, "unbounded");
    return buf;
  }
  char digits[32];
  int n = snprintf(digits, sizeof digits, "%" PRIu64, v < 0 ? (uint64_t)0 - (uint64_t)v : (uint64_t)v);
  size_t o = 0;
  if (v < 0 && o + 1 < cap) buf[o++] = '-';
  for (int i = 0; i < n && o + 2 < cap; i++) {
    if (i > 0 && (n - i) % 3 == 0) buf[o++] = ',';
    buf[o++] = digits[i];
  }
  buf[o] = '\0';
  return buf;
}

const char *tool_component_name(int32_t c) {
  static const char *const names[DSV4_COMP_COUNT_V0_1] = {
      "routed experts", "shared experts", "attention",  "Engram tables", "Engram projections",
      "DSpark (mtp.*)", "vision",         "embed/head", "other (hc, gates, norms)"};
  return c >= 0 && c < DSV4_COMP_COUNT_V0_1 ? names[c] : "?";
}
