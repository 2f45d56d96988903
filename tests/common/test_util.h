/* Helpers shared by the cmocka suites: fixture paths, temp dirs, files. */
#ifndef DSV4_TEST_UTIL_H
#define DSV4_TEST_UTIL_H

#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

/* Every suite defines this instead of main: it runs the suite's cmocka groups
 * and returns main's exit status (failures; 77 = skip). The one main
 * (tests/common/test_main.c) applies the test filter first: argv[1] or
 * DSV4_TEST_FILTER selects, DSV4_TEST_SKIP skips (cmocka globs). */
int tu_run_suite(void);

/* Fixture folder (env DSV4_FIXTURES, set by meson) joined with `rel`, or
 * NULL when the folder is absent: the caller then skip()s with a message.
 * CI refuses to run without the folder, so a skip cannot hide there.
 * Returned string is static (overwritten by the next call). */
const char *tu_fixture(const char *rel);
/* tu_fixture or cmocka skip() with a message naming the missing folder. */
const char *tu_fixture_or_skip(const char *rel);

/* Fresh empty directory under $TMPDIR; removed (recursively) by tu_rmtree. */
char *tu_mkdtemp(void);
void tu_rmtree(const char *path);

/* Whole file into a malloc'd buffer (+ NUL); NULL on error. */
char *tu_read_file(const char *path, size_t *len);
int tu_write_file(const char *path, const void *data, size_t len);
/* Copy every regular file of src into dst (dst exists). */
int tu_copy_dir(const char *src, const char *dst);
/* path join into a malloc'd string */
char *tu_join(const char *a, const char *b);
/* The release config shipped in the source tree (data/deepseek-v4.1-flash/config.json,
 * under DSV4_SOURCE_ROOT, which meson sets); malloc'd. Fails the test when unset. */
char *tu_release_config_path(void);

/* Bad-input catalogue (docs/bad-inputs.md, tests/tools/bad-input-catalogue.sh):
 * with DSV4_CATALOGUE set, append "area, case, status, message" for a bad
 * input a test fed and the answer it checked. No-op otherwise. */
void tu_catalogue(const char *area, const char *name, int status, const char *message);

/* bf16 bits <-> float for comparing goldens stored as f32 */
float tu_bf16_to_f32(uint16_t b);
/* A float from its IEEE-754 bits, and back. */
float tu_f32_of_bits(uint32_t u);
uint32_t tu_bits_of_f32(float f);
/* xorshift64*: the next 32 bits of a deterministic test stream kept in *state (nonzero). */
uint32_t tu_rng32(uint64_t *state);

/* Pearson chi-square of counts cnt[V] (n draws) against the law p[V], over bins of the ids
 * sorted by probability with an expected count >= 20 each (a short last group joins the
 * previous bin); *df = bins - 1. */
double tu_chi2(const int64_t *cnt, const double *p, int32_t V, int64_t n, int *df);
/* The chi-square upper quantile at p = 1e-6 (Wilson-Hilferty) for df degrees of freedom. */
double tu_chi2_bound(int df);

#endif
