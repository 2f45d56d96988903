/*
 * Internal foundation shared by every part of the library: error capture,
 * logging, growable strings, checked allocation. Internal symbols are named
 * dsv4i_* and never exported (visibility hidden, abi/libdsv4.map).
 */
#ifndef DSV4I_BASE_H
#define DSV4I_BASE_H

#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include "dsv4/dsv4.h"

#if defined(__GNUC__)
#define DSV4I_PRINTF(a, b) __attribute__((format(printf, a, b)))
#else
#define DSV4I_PRINTF(a, b)
#endif

#define DSV4I_ARRAY_LEN(a) (sizeof(a) / sizeof((a)[0]))

/* ---- errors ------------------------------------------------------------
 * Internal functions return a dsv4_status and, on failure, record a message
 * in the calling thread's error buffer with dsv4i_error(). The API layer
 * clears the buffer on entry and copies it into a handle's last-error slot
 * where the call has a handle. Messages longer than the buffer are cut with
 * "...". */
#define DSV4I_ERROR_CAP 8192

/** Record status + formatted message for this thread; returns status. */
dsv4_status dsv4i_error(dsv4_status status, const char *fmt, ...) DSV4I_PRINTF(2, 3);
/** Prefix the current message with "prefix: " (context added by a caller). */
void dsv4i_error_prefix(const char *fmt, ...) DSV4I_PRINTF(1, 2);
void dsv4i_error_clear(void);
/** The thread's current message ("" if none). */
const char *dsv4i_error_message(void);
/** Status of the last dsv4i_error() on this thread since the last clear. */
dsv4_status dsv4i_error_status(void);

/* ---- growable string --------------------------------------------------- */
typedef struct dsv4i_str {
  char *buf;  /* NUL-terminated when len > 0 or after any append */
  size_t len;
  size_t cap;
  int oom;    /* an append failed: contents are truncated */
} dsv4i_str;

/** Append len raw bytes (may contain NULs) and keep buf NUL-terminated; sets oom on failure. */
void dsv4i_str_append(dsv4i_str *s, const void *data, size_t len);
void dsv4i_str_appendf(dsv4i_str *s, const char *fmt, ...) DSV4I_PRINTF(2, 3);
void dsv4i_str_vappendf(dsv4i_str *s, const char *fmt, va_list ap);
void dsv4i_str_free(dsv4i_str *s);
/** buf, or "" when nothing was appended. */
const char *dsv4i_str_cstr(const dsv4i_str *s);

/* ---- allocation-failure injection -----------------------------------------
 * Built with -Dfault_injection=true (tests only): every allocation the
 * library makes (the wrappers below, its other malloc/realloc calls and,
 * when the test routes them here with json_set_alloc_funcs, jansson's) asks
 * DSV4I_FAULT() first; armed with dsv4i_fault_arm(n), the n-th one fails.
 * Plain builds compile DSV4I_FAULT() to 0. */
#ifdef DSV4I_FAULT_INJECTION
int dsv4i_fault_fail_now(void);
/** Fail the n-th allocation from now (n >= 1); 0 disarms. Resets the count. */
void dsv4i_fault_arm(long n);
/** Allocations asked for since the last arm (whether armed or not). */
long dsv4i_fault_count(void);
/** Whether the armed failure has happened. */
int dsv4i_fault_fired(void);
void *dsv4i_fault_json_malloc(size_t size);
#define DSV4I_FAULT() dsv4i_fault_fail_now()
#else
#define DSV4I_FAULT() 0
#endif

/* ---- allocation ----------------------------------------------------------
 * Thin wrappers that record DSV4_ERR_OUT_OF_MEMORY with what was asked for.
 * They return NULL on failure (the caller returns DSV4_ERR_OUT_OF_MEMORY). */
void *dsv4i_malloc(size_t size, const char *what);
void *dsv4i_calloc(size_t n, size_t size, const char *what);
void *dsv4i_realloc(void *p, size_t size, const char *what);
char *dsv4i_strdup(const char *s, const char *what);
/** a*b with overflow check; returns 0 on overflow. */
int dsv4i_mul_overflow_u64(uint64_t a, uint64_t b, uint64_t *out);

/* ---- logging -------------------------------------------------------------
 * A logger is a sink + level; NULL fn means the process-wide sink set with
 * dsv4_log_set(). */
typedef struct dsv4i_logger {
  dsv4_log_fn fn;
  void *user_data;
  int32_t max_level;
} dsv4i_logger;

void dsv4i_log(const dsv4i_logger *lg, int32_t level, const char *fmt, ...) DSV4I_PRINTF(3, 4);

/**
 * Open path read-only without blocking (O_NONBLOCK: a FIFO or tty never
 * stalls the open) and fstat it; anything but a regular file is refused
 * before a byte is read. Every file the library reads is opened here.
 * On success *fd (O_CLOEXEC, the caller closes it) and *size are set.
 * DSV4_ERR_NOT_FOUND; DSV4_ERR_IO (the message names the path, `what` and
 * the kind of file found, e.g. "a FIFO"). *fd is -1 on failure.
 */
dsv4_status dsv4i_open_regular(const char *path, const char *what, int *fd, uint64_t *size);

/**
 * Read a whole regular file into a malloc'd NUL-terminated buffer (*len
 * excludes the NUL), opened with dsv4i_open_regular: refuses what is not a
 * regular file (a FIFO or device could block or never end) and files
 * larger than max_bytes. DSV4_ERR_NOT_FOUND,
 * DSV4_ERR_IO (message names the path and the reason),
 * DSV4_ERR_OUT_OF_MEMORY. `what` names the file's role in messages.
 */
dsv4_status dsv4i_read_file(const char *path, size_t max_bytes, const char *what, char **buf,
                            size_t *len);

/** Join dir + "/" + name into a new string (NULL + OOM error on failure). */
char *dsv4i_path_join(const char *dir, const char *name);

/** Bytes the process's heap holds in use now (malloc'd and not freed, every arena and
 *  mmapped chunk; glibc's mallinfo2), or -1 where the allocator cannot say. */
int64_t dsv4i_heap_in_use(void);

#endif /* DSV4I_BASE_H */
