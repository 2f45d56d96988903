#include "tool_util.h"

#include <inttypes.h>
#include <limits.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

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

void tool_print_version(const char *tool) {
  printf("%s (libdsv4) %s\nlibrary %s: %s\n", tool, DSV4_VERSION_STRING, dsv4_version_string(),
         dsv4_build_info());
}

static int exists(const char *path) {
  struct stat st;
  return stat(path, &st) == 0;
}

const char *tool_data_path(const char *rel, const char *tree, char *buf, size_t cap) {
  char exe[PATH_MAX];
  const ssize_t n = readlink("/proc/self/exe", exe, sizeof exe - 1);
  if (n > 0) {
    exe[n] = '\0';
    char *slash = strrchr(exe, '/');
    if (slash) {
      *slash = '\0';
      if ((size_t)snprintf(buf, cap, "%s/%s/%s", exe, DSV4_DATADIR_FROM_BIN, rel) < cap && exists(buf))
        return buf;
    }
  }
  if (tree && (size_t)snprintf(buf, cap, "%s", tree) < cap && exists(buf)) return buf;
  if ((size_t)snprintf(buf, cap, "%s/%s", DSV4_DATADIR, rel) < cap && exists(buf)) return buf;
  return NULL;
}

const char *tool_default_model(char *buf, size_t cap) {
  return tool_data_path("models/dsv4-tiny", DSV4_TREE_MODEL, buf, cap);
}
