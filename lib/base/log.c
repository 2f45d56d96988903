/* Logging: per-handle sink or the process-wide one (see base.h). */
#include <stdio.h>

#include "base/base.h"

static void stderr_sink(int32_t level, const char *message, void *user_data) {
  (void)user_data;
  static const char *names[] = {"error", "warning", "info", "debug"};
  fprintf(stderr, "libdsv4 %s: %s\n", names[level < 0 ? 0 : level > 3 ? 3 : level], message);
}

static dsv4_log_fn g_fn = stderr_sink;
static void *g_user;
static int32_t g_level = DSV4_LOG_WARN;

void dsv4i_log_set_global(dsv4_log_fn fn, void *user_data, int32_t max_level);
void dsv4i_log_set_global(dsv4_log_fn fn, void *user_data, int32_t max_level) {
  g_fn = fn;
  g_user = user_data;
  g_level = max_level;
}

void dsv4i_log(const dsv4i_logger *lg, int32_t level, const char *fmt, ...) {
  dsv4_log_fn fn = g_fn;
  void *ud = g_user;
  int32_t max = g_level;
  if (lg && lg->fn) {
    fn = lg->fn;
    ud = lg->user_data;
    max = lg->max_level;
  }
  if (!fn || level > max) return;
  char line[1024];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(line, sizeof line, fmt, ap);
  va_end(ap);
  fn(level, line, ud);
}
