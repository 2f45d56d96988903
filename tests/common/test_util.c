#define _XOPEN_SOURCE 700
#include "test_util.h"

#include <dirent.h>
#include <errno.h>
#include <ftw.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

const char *tu_fixture(const char *rel) {
  static char buf[4096];
  const char *root = getenv("DSV4_FIXTURES");
  if (!root || !*root) return NULL;
  struct stat st;
  if (stat(root, &st) != 0 || !S_ISDIR(st.st_mode)) return NULL;
  snprintf(buf, sizeof buf, "%s%s%s", root, rel && *rel ? "/" : "", rel ? rel : "");
  return buf;
}

const char *tu_fixture_or_skip(const char *rel) {
  const char *p = tu_fixture(rel);
  if (!p && getenv("DSV4_REQUIRE_FIXTURES")) fail_msg("fixtures folder '%s' absent and DSV4_REQUIRE_FIXTURES is set",
                                                      getenv("DSV4_FIXTURES") ? getenv("DSV4_FIXTURES") : "(unset)");
  if (!p) {
    fprintf(stderr, "SKIP: fixtures folder '%s' absent (set -Dfixtures=PATH)\n",
            getenv("DSV4_FIXTURES") ? getenv("DSV4_FIXTURES") : "(unset)");
    skip();
  }
  return p;
}

char *tu_mkdtemp(void) {
  const char *t = getenv("TMPDIR");
  char *p = tu_join(t && *t ? t : "/tmp", "dsv4-test-XXXXXX");
  if (!mkdtemp(p)) {
    free(p);
    return NULL;
  }
  return p;
}

static int rm_cb(const char *path, const struct stat *sb, int flag, struct FTW *ftw) {
  (void)sb; (void)flag; (void)ftw;
  return remove(path);
}

void tu_rmtree(const char *path) {
  if (path) nftw(path, rm_cb, 16, FTW_DEPTH | FTW_PHYS);
}

char *tu_read_file(const char *path, size_t *len) {
  FILE *f = fopen(path, "rb");
  if (!f) return NULL;
  fseek(f, 0, SEEK_END);
  long n = ftell(f);
  fseek(f, 0, SEEK_SET);
  char *b = malloc((size_t)n + 1);
  if (b && fread(b, 1, (size_t)n, f) != (size_t)n) {
    free(b);
    b = NULL;
  }
  fclose(f);
  if (b) {
    b[n] = 0;
    if (len) *len = (size_t)n;
  }
  return b;
}

int tu_write_file(const char *path, const void *data, size_t len) {
  FILE *f = fopen(path, "wb");
  if (!f) return -1;
  size_t w = fwrite(data, 1, len, f);
  return (fclose(f) == 0 && w == len) ? 0 : -1;
}

char *tu_join(const char *a, const char *b) {
  size_t n = strlen(a) + strlen(b) + 2;
  char *p = malloc(n);
  snprintf(p, n, "%s/%s", a, b);
  return p;
}

int tu_copy_dir(const char *src, const char *dst) {
  DIR *d = opendir(src);
  if (!d) return -1;
  struct dirent *e;
  int rc = 0;
  while ((e = readdir(d)) && rc == 0) {
    if (e->d_name[0] == '.') continue;
    char *s = tu_join(src, e->d_name), *t = tu_join(dst, e->d_name);
    struct stat st;
    if (stat(s, &st) == 0 && S_ISREG(st.st_mode)) {
      size_t n;
      char *b = tu_read_file(s, &n);
      rc = b ? tu_write_file(t, b, n) : -1;
      if (rc == 0) chmod(t, 0644);
      free(b);
    }
    free(s);
    free(t);
  }
  closedir(d);
  return rc;
}

float tu_bf16_to_f32(uint16_t b) { return tu_f32_of_bits((uint32_t)b << 16); }

float tu_f32_of_bits(uint32_t u) {
  float f;
  memcpy(&f, &u, 4);
  return f;
}

uint32_t tu_bits_of_f32(float f) {
  uint32_t u;
  memcpy(&u, &f, 4);
  return u;
}

uint32_t tu_rng32(uint64_t *state) {
  *state ^= *state >> 12;
  *state ^= *state << 25;
  *state ^= *state >> 27;
  return (uint32_t)((*state * 0x2545F4914F6CDD1Dull) >> 32);
}

void tu_catalogue(const char *area, const char *name, int status, const char *message) {
  const char *path = getenv("DSV4_CATALOGUE");
  if (!path || !*path) return;
  FILE *f = fopen(path, "a");
  if (!f) return;
  fprintf(f, "%s\t%s\t%d\t", area, name, status);
  for (const char *p = message ? message : ""; *p; p++) fputc(*p == '\t' || *p == '\n' ? ' ' : *p, f);
  fputc('\n', f);
  fclose(f);
}

char *tu_release_config_path(void) {
  const char *root = getenv("DSV4_SOURCE_ROOT");
  assert_non_null(root);
  return tu_join(root, "data/deepseek-v4.1-flash/config.json");
}

double tu_chi2_bound(int df) {
  const double z = 4.753, a = 2.0 / (9.0 * df), w = 1.0 - a + z * sqrt(a);
  return df * w * w * w;
}

double tu_chi2(const int64_t *cnt, const double *p, int32_t V, int64_t n, int *df) {
  int32_t *ord = malloc(sizeof *ord * (size_t)V);
  for (int32_t v = 0; v < V; v++) ord[v] = v;
  for (int32_t i = 1; i < V; i++) /* insertion sort, descending p */
    for (int32_t j = i; j > 0 && p[ord[j]] > p[ord[j - 1]]; j--) {
      const int32_t t = ord[j];
      ord[j] = ord[j - 1], ord[j - 1] = t;
    }
  double x2 = 0, e = 0, o = 0, last_e = 0, last_o = 0;
  int bins = 0;
  for (int32_t i = 0; i < V; i++) {
    e += (double)n * p[ord[i]];
    o += (double)cnt[ord[i]];
    if (e >= 20.0 || i == V - 1) {
      if (e < 20.0 && bins > 0) { /* a short last group joins the previous bin */
        x2 -= (last_o - last_e) * (last_o - last_e) / last_e;
        e += last_e, o += last_o, bins--;
      }
      x2 += (o - e) * (o - e) / e;
      last_e = e, last_o = o, bins++;
      e = o = 0;
    }
  }
  free(ord);
  *df = bins - 1;
  return x2;
}
