/* Thread-local error capture (see base.h). */
#include <stdio.h>
#include <string.h>

#include "base/base.h"

static _Thread_local char tl_msg[DSV4I_ERROR_CAP];
static _Thread_local dsv4_status tl_status;

static void cut_marker(char *buf, size_t cap, int written) {
  if (written >= (int)cap && cap > 4) memcpy(buf + cap - 4, "...", 4);
}

dsv4_status dsv4i_error(dsv4_status status, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  int n = vsnprintf(tl_msg, sizeof tl_msg, fmt, ap);
  va_end(ap);
  cut_marker(tl_msg, sizeof tl_msg, n);
  tl_status = status;
  return status;
}

void dsv4i_error_prefix(const char *fmt, ...) {
  char prefix[512];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(prefix, sizeof prefix, fmt, ap);
  va_end(ap);
  size_t plen = strlen(prefix), mlen = strlen(tl_msg);
  if (plen + 2 >= sizeof tl_msg) return;
  if (plen + 2 + mlen >= sizeof tl_msg) mlen = sizeof tl_msg - plen - 3;
  memmove(tl_msg + plen + 2, tl_msg, mlen);
  memcpy(tl_msg, prefix, plen);
  tl_msg[plen] = ':';
  tl_msg[plen + 1] = ' ';
  tl_msg[plen + 2 + mlen] = '\0';
}

void dsv4i_error_clear(void) {
  tl_msg[0] = '\0';
  tl_status = DSV4_OK;
}

const char *dsv4i_error_message(void) { return tl_msg; }

dsv4_status dsv4i_error_status(void) { return tl_status; }
