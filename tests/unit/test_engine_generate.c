/*
 * examples/dsv4-generate on the project's default tiny model
 * (<build>/models/dsv4-tiny, built by tools/gen with a planted successor
 * table): greedy generation from the planted prompt prints the planted
 * continuation and stops at EOS (README command (1)). The prompt
 * and the expected text come from the model directory's make_tiny.json
 * ("planted": prompt, continuation, continuation_ids), written by the
 * generator. Also: --ids, chunked prefill, and the exit status of bad calls.
 */
#include <errno.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "test_util.h"

typedef struct planted {
  char *dir, *exe, *prompt, *continuation, *ids; /* ids: "a b c" without EOS */
} planted;

/* Run argv, capture stdout (stderr passes through); returns the exit status. */
static int run_capture(char *const argv[], char **out) {
  int fd[2];
  assert_int_equal(pipe(fd), 0);
  pid_t pid = fork();
  assert_true(pid >= 0);
  if (pid == 0) {
    dup2(fd[1], 1);
    close(fd[0]);
    close(fd[1]);
    execv(argv[0], argv);
    _exit(127);
  }
  close(fd[1]);
  size_t len = 0, cap = 4096;
  char *buf = malloc(cap);
  assert_non_null(buf);
  for (;;) {
    if (len + 1024 > cap) buf = realloc(buf, cap *= 2);
    assert_non_null(buf);
    ssize_t k = read(fd[0], buf + len, cap - len - 1);
    if (k < 0 && errno == EINTR) continue;
    if (k <= 0) break;
    len += (size_t)k;
  }
  buf[len] = '\0';
  close(fd[0]);
  int st = 0;
  while (waitpid(pid, &st, 0) < 0 && errno == EINTR) {
  }
  *out = buf;
  return WIFEXITED(st) ? WEXITSTATUS(st) : 128;
}

static int setup(void **state) {
  const char *b = getenv("DSV4_BUILD_ROOT");
  planted *p = calloc(1, sizeof *p);
  assert_non_null(p);
  *state = p;
  if (!b) return 0;
  p->dir = tu_join(b, "models/dsv4-tiny");
  p->exe = tu_join(b, "examples/dsv4-generate");
  char *meta = tu_join(p->dir, "make_tiny.json");
  json_error_t err;
  json_t *root = json_load_file(meta, 0, &err);
  free(meta);
  json_t *pl = root ? json_object_get(root, "planted") : NULL;
  if (pl) {
    p->prompt = strdup(json_string_value(json_object_get(pl, "prompt")));
    p->continuation = strdup(json_string_value(json_object_get(pl, "continuation")));
    json_t *ids = json_object_get(pl, "continuation_ids");
    char *s = calloc(json_array_size(ids) * 12 + 1, 1);
    assert_non_null(s);
    for (size_t i = 0; i + 1 < json_array_size(ids); i++) /* the last one is EOS */
      sprintf(s + strlen(s), i ? " %lld" : "%lld",
              (long long)json_integer_value(json_array_get(ids, i)));
    p->ids = s;
  }
  json_decref(root);
  return 0;
}

static int teardown(void **state) {
  planted *p = *state;
  free(p->dir);
  free(p->exe);
  free(p->prompt);
  free(p->continuation);
  free(p->ids);
  free(p);
  return 0;
}

static planted *need(void **state) {
  planted *p = *state;
  if (!p->prompt || access(p->exe, X_OK) != 0) {
    fprintf(stderr, "SKIP: %s or its make_tiny.json \"planted\" section is missing "
                    "(tools/gen builds it; data/tiny-tokenizer needed)\n",
            p->dir ? p->dir : "<build>/models/dsv4-tiny");
    skip();
  }
  return p;
}

static void planted_sentence(void **state) {
  planted *p = need(state);
  char *argv[] = {p->exe, "-m", p->dir, "-p", p->prompt, "--quiet", NULL};
  char *out = NULL;
  assert_int_equal(run_capture(argv, &out), 0);
  char *want = malloc(strlen(p->continuation) + 2);
  sprintf(want, "%s\n", p->continuation);
  printf("prompt \"%s\" -> \"%s\"\n", p->prompt, out);
  assert_string_equal(out, want);
  free(want);
  free(out);
}

static void planted_ids_chunked(void **state) {
  planted *p = need(state);
  char *argv[] = {p->exe, "-m", p->dir, "-p", p->prompt, "--ids", "--chunk", "2", "--quiet", NULL};
  char *out = NULL;
  assert_int_equal(run_capture(argv, &out), 0);
  char *want = malloc(strlen(p->ids) + 2);
  sprintf(want, "%s\n", p->ids);
  assert_string_equal(out, want);
  free(want);
  free(out);
  /* -n limits the count; the summary goes to stderr, stdout keeps the ids */
  char *argv2[] = {p->exe, "-m", p->dir, "-p", p->prompt, "--ids", "-n", "2", NULL};
  assert_int_equal(run_capture(argv2, &out), 0);
  const char *sp = strchr(p->ids, ' ');
  sp = sp ? strchr(sp + 1, ' ') : NULL;
  const size_t n2 = sp ? (size_t)(sp - p->ids) : strlen(p->ids);
  assert_int_equal(strlen(out), n2 + 1);
  assert_memory_equal(out, p->ids, n2);
  free(out);
}

static void bad_calls(void **state) {
  planted *p = need(state);
  char *out = NULL;
  char *no_prompt[] = {p->exe, "-m", p->dir, NULL};
  assert_int_equal(run_capture(no_prompt, &out), 2);
  free(out);
  char *bad_n[] = {p->exe, "-m", p->dir, "-p", "x", "-n", "-3", NULL};
  assert_int_equal(run_capture(bad_n, &out), 2);
  free(out);
  char *no_model[] = {p->exe, "-m", "/nonexistent/model", "-p", "x", "--quiet", NULL};
  assert_int_equal(run_capture(no_model, &out), 1);
  free(out);
}

int tu_run_suite(void) {
  const struct CMUnitTest tests[] = {
    cmocka_unit_test(planted_sentence),
    cmocka_unit_test(planted_ids_chunked),
    cmocka_unit_test(bad_calls),
  };
  return cmocka_run_group_tests_name("engine_generate", tests, setup, teardown);
}
