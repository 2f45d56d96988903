/* Growable strings, checked allocation, paths (see base.h). */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#if defined(__GLIBC__)
#include <malloc.h>
#endif

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include "base/base.h"

/* Room for n more bytes and the NUL; 0 (and oom set) when that fails. */
static int str_reserve(dsv4i_str *s, size_t n) {
  if (s->oom) return 0;
  size_t need = s->len + n + 1;
  if (need < s->len) {
    s->oom = 1;
    return 0;
  }
  if (need > s->cap) {
    size_t cap = s->cap ? s->cap : 256;
    while (cap < need) cap = cap * 2 > cap ? cap * 2 : need;
    char *nb = DSV4I_FAULT() ? NULL : realloc(s->buf, cap);
    if (!nb) {
      s->oom = 1;
      return 0;
    }
    s->buf = nb;
    s->cap = cap;
  }
  return 1;
}

void dsv4i_str_append(dsv4i_str *s, const void *data, size_t len) {
  if (!str_reserve(s, len)) return;
  if (len) memcpy(s->buf + s->len, data, len);
  s->len += len;
  s->buf[s->len] = '\0';
}

void dsv4i_str_vappendf(dsv4i_str *s, const char *fmt, va_list ap) {
  if (s->oom) return;
  va_list ap2;
  va_copy(ap2, ap);
  int n = vsnprintf(NULL, 0, fmt, ap2);
  va_end(ap2);
  if (n < 0 || !str_reserve(s, (size_t)n)) return;
  vsnprintf(s->buf + s->len, (size_t)n + 1, fmt, ap);
  s->len += (size_t)n;
}

void dsv4i_str_appendf(dsv4i_str *s, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  dsv4i_str_vappendf(s, fmt, ap);
  va_end(ap);
}

void dsv4i_str_free(dsv4i_str *s) {
  free(s->buf);
  memset(s, 0, sizeof *s);
}

const char *dsv4i_str_cstr(const dsv4i_str *s) { return s->buf ? s->buf : ""; }

#ifdef DSV4I_FAULT_INJECTION
static _Atomic long g_fault_at, g_fault_count, g_fault_fired;

int dsv4i_fault_fail_now(void) {
  const long k = ++g_fault_count;
  if (g_fault_at > 0 && k == g_fault_at) {
    g_fault_fired = 1;
    return 1;
  }
  return 0;
}

void dsv4i_fault_arm(long n) {
  g_fault_count = 0;
  g_fault_fired = 0;
  g_fault_at = n > 0 ? n : 0;
}

long dsv4i_fault_count(void) { return g_fault_count; }
int dsv4i_fault_fired(void) { return g_fault_fired != 0; }
void *dsv4i_fault_json_malloc(size_t size) { return dsv4i_fault_fail_now() ? NULL : malloc(size); }
#endif

void *dsv4i_malloc(size_t size, const char *what) {
  void *p = DSV4I_FAULT() ? NULL : malloc(size ? size : 1);
  if (!p) dsv4i_error(DSV4_ERR_OUT_OF_MEMORY, "out of memory allocating %zu bytes for %s", size, what);
  return p;
}

void *dsv4i_calloc(size_t n, size_t size, const char *what) {
  void *p = DSV4I_FAULT() ? NULL : calloc(n ? n : 1, size ? size : 1);
  if (!p) dsv4i_error(DSV4_ERR_OUT_OF_MEMORY, "out of memory allocating %zu x %zu bytes for %s", n, size, what);
  return p;
}

void *dsv4i_realloc(void *old, size_t size, const char *what) {
  void *p = DSV4I_FAULT() ? NULL : realloc(old, size ? size : 1);
  if (!p) dsv4i_error(DSV4_ERR_OUT_OF_MEMORY, "out of memory growing %s to %zu bytes", what, size);
  return p;
}

char *dsv4i_strdup(const char *s, const char *what) {
  size_t n = strlen(s) + 1;
  char *p = dsv4i_malloc(n, what);
  if (p) memcpy(p, s, n);
  return p;
}

int dsv4i_mul_overflow_u64(uint64_t a, uint64_t b, uint64_t *out) {
  if (a != 0 && b > UINT64_MAX / a) return 0;
  *out = a * b;
  return 1;
}

char *dsv4i_path_join(const char *dir, const char *name) {
  size_t a = strlen(dir), b = strlen(name);
  char *p = dsv4i_malloc(a + b + 2, "a path");
  if (!p) return NULL;
  memcpy(p, dir, a);
  size_t at = a;
  if (a > 0 && dir[a - 1] != '/') p[at++] = '/';
  memcpy(p + at, name, b + 1);
  return p;
}

static const char *file_kind(mode_t m) {
  if (S_ISDIR(m)) return "a directory";
  if (S_ISFIFO(m)) return "a FIFO";
  if (S_ISCHR(m)) return "a character device";
  if (S_ISBLK(m)) return "a block device";
  if (S_ISSOCK(m)) return "a socket";
  return "something else";
}

dsv4_status dsv4i_open_regular(const char *path, const char *what, int *fd_out, uint64_t *size_out) {
  *fd_out = -1;
  *size_out = 0;
  /* O_NONBLOCK: opening a FIFO without a writer (or a tty) must not block;
   * nothing but a regular file is ever read. */
  int fd = open(path, O_RDONLY | O_NONBLOCK | O_CLOEXEC | O_NOCTTY);
  if (fd < 0) {
    int e = errno;
    return dsv4i_error(e == ENOENT ? DSV4_ERR_NOT_FOUND : DSV4_ERR_IO, "cannot open %s %s: %s",
                       what, path, strerror(e));
  }
  struct stat st;
  if (fstat(fd, &st) != 0) {
    int e = errno;
    close(fd);
    return dsv4i_error(DSV4_ERR_IO, "cannot stat %s %s: %s", what, path, strerror(e));
  }
  if (!S_ISREG(st.st_mode)) {
    close(fd);
    return dsv4i_error(DSV4_ERR_IO, "%s %s is %s, not a regular file (nothing else is read)", what, path,
                       file_kind(st.st_mode));
  }
  *fd_out = fd;
  *size_out = (uint64_t)st.st_size;
  return DSV4_OK;
}

dsv4_status dsv4i_read_file(const char *path, size_t max_bytes, const char *what, char **buf,
                            size_t *len) {
  *buf = NULL;
  *len = 0;
  int fd;
  uint64_t size;
  dsv4_status s = dsv4i_open_regular(path, what, &fd, &size);
  if (s != DSV4_OK) return s;
  if (size > (uint64_t)max_bytes)
    s = dsv4i_error(DSV4_ERR_IO, "%s %s is %llu bytes, more than the %zu this reader accepts", what,
                    path, (unsigned long long)size, max_bytes);
  char *b = NULL;
  size_t n = 0;
  if (s == DSV4_OK) {
    b = dsv4i_malloc((size_t)size + 1, what);
    if (!b) s = DSV4_ERR_OUT_OF_MEMORY;
  }
  while (s == DSV4_OK && n < (size_t)size) {
    ssize_t r = read(fd, b + n, (size_t)size - n);
    if (r < 0 && errno == EINTR) continue;
    if (r <= 0)
      s = dsv4i_error(DSV4_ERR_IO, "cannot read %s %s: %s", what, path,
                      r < 0 ? strerror(errno) : "file shrank while reading");
    else
      n += (size_t)r;
  }
  close(fd);
  if (s != DSV4_OK) {
    free(b);
    return s;
  }
  b[n] = '\0';
  *buf = b;
  *len = n;
  return DSV4_OK;
}

int64_t dsv4i_heap_in_use(void) {
#if defined(__GLIBC__) && (__GLIBC__ > 2 || (__GLIBC__ == 2 && __GLIBC_MINOR__ >= 33))
  const struct mallinfo2 m = mallinfo2();
  return (int64_t)(m.uordblks + m.hblkhd);
#else
  return -1;
#endif
}
