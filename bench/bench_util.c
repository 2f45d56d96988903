/* dsv4-bench: small helpers (messages, clock, allocation, statistics, files). */
#include <math.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "bench.h"

int g_quiet;

void note(const char *fmt, ...) {
  if (g_quiet) return;
  va_list ap;
  va_start(ap, fmt);
  fputs("dsv4-bench: ", stderr);
  vfprintf(stderr, fmt, ap);
  fputc('\n', stderr);
  va_end(ap);
  fflush(stderr);
}

static void vdie(int status, const char *fmt, va_list ap) __attribute__((noreturn));
static void vdie(int status, const char *fmt, va_list ap) {
  fputs("dsv4-bench: ", stderr);
  vfprintf(stderr, fmt, ap);
  fputc('\n', stderr);
  exit(status);
}

void die(const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  vdie(1, fmt, ap);
}

void die_usage(const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  vdie(2, fmt, ap);
}

int64_t now_ns(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

void *xcalloc(size_t n, size_t size) {
  void *p = calloc(n ? n : 1, size ? size : 1);
  if (!p) die("out of memory (%zu x %zu bytes)", n, size);
  return p;
}

static int cmp_double(const void *a, const void *b) {
  const double x = *(const double *)a, y = *(const double *)b;
  return (x > y) - (x < y);
}

/* Quantile q of v[0..n) (sorted in place): linear interpolation between the
 * closest ranks, position q * (n - 1) (numpy's default). NAN when n == 0. */
double quantile(double *v, size_t n, double q) {
  if (!n) return NAN;
  qsort(v, n, sizeof *v, cmp_double);
  const double pos = q * (double)(n - 1);
  const size_t lo = (size_t)pos;
  const size_t hi = lo + 1 < n ? lo + 1 : lo;
  return v[lo] + (v[hi] - v[lo]) * (pos - (double)lo);
}

double mean_of(const double *v, size_t n) {
  double s = 0;
  for (size_t i = 0; i < n; i++) s += v[i];
  return n ? s / (double)n : NAN;
}

void dvec_push(dvec *d, double x) {
  if (d->n == d->cap) {
    d->cap = d->cap ? 2 * d->cap : 256;
    d->v = realloc(d->v, d->cap * sizeof *d->v);
    if (!d->v) die("out of memory");
  }
  d->v[d->n++] = x;
}

/* {"mean","median","p90","max","n"} of the samples (sorts them). */
json_t *stats_json(dvec *d) {
  json_t *o = json_object();
  const double mean = mean_of(d->v, d->n);
  const double med = quantile(d->v, d->n, 0.5), p90 = quantile(d->v, d->n, 0.9);
  const double mx = d->n ? d->v[d->n - 1] : NAN;
  json_object_set_new(o, "n", json_integer((json_int_t)d->n));
  json_object_set_new(o, "mean", d->n ? json_real(mean) : json_null());
  json_object_set_new(o, "median", d->n ? json_real(med) : json_null());
  json_object_set_new(o, "p90", d->n ? json_real(p90) : json_null());
  json_object_set_new(o, "max", d->n ? json_real(mx) : json_null());
  return o;
}

json_t *num_or_null(double x) { return isfinite(x) ? json_real(x) : json_null(); }

char *read_file(const char *path, size_t *len) {
  FILE *f = fopen(path, "rb");
  if (!f) return NULL;
  size_t cap = 1 << 16, n = 0;
  char *buf = malloc(cap + 1);
  while (buf) {
    const size_t got = fread(buf + n, 1, cap - n, f);
    n += got;
    if (n < cap) break;
    cap *= 2;
    char *nb = realloc(buf, cap + 1);
    if (!nb) free(buf);
    buf = nb;
  }
  fclose(f);
  if (!buf) return NULL;
  buf[n] = 0;
  if (len) *len = n;
  return buf;
}

