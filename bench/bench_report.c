/* dsv4-bench: baselines, consistency, summary and plot. */
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <unistd.h>

#include "bench.h"

static double jnum(json_t *o, const char *key) {
  json_t *v = json_object_get(o, key);
  return json_is_number(v) ? json_number_value(v) : NAN;
}

static double jnum2(json_t *o, const char *a, const char *k) { return jnum(json_object_get(o, a), k); }

/* Every run against the smallest-C run of its mode and repetition, and
 * DSpark runs against the no-DSpark run of equal C and repetition. */
void add_baselines(json_t *runs) {
  size_t i, j;
  json_t *r, *q;
  json_array_foreach(runs, i, r) {
    json_t *base = NULL, *off = NULL;
    json_array_foreach(runs, j, q) {
      if (jnum(q, "repeat") != jnum(r, "repeat")) continue;
      if (json_is_true(json_object_get(q, "dspark")) == json_is_true(json_object_get(r, "dspark")) &&
          (!base || jnum(q, "concurrency") < jnum(base, "concurrency")))
        base = q;
      if (!json_is_true(json_object_get(q, "dspark")) && jnum(q, "concurrency") == jnum(r, "concurrency"))
        off = q;
    }
    json_t *bl = json_object();
    const double bc = jnum(base, "concurrency"), c = jnum(r, "concurrency");
    const double sp = jnum(r, "decode_tok_s") / jnum(base, "decode_tok_s");
    json_object_set_new(bl, "base_concurrency", json_integer((json_int_t)bc));
    json_object_set_new(bl, "decode_tok_s_vs_base", num_or_null(sp));
    json_object_set_new(bl, "scaling_efficiency", num_or_null(sp / (c / bc)));
    json_object_set_new(bl, "itl_median_vs_base",
                        num_or_null(jnum2(r, "itl_ms", "median") / jnum2(base, "itl_ms", "median")));
    if (json_is_true(json_object_get(r, "dspark")) && off)
      json_object_set_new(bl, "dspark_speedup", num_or_null(jnum(r, "decode_tok_s") / jnum(off, "decode_tok_s")));
    json_object_set_new(r, "baseline", bl);
  }
}

/* At temperature 0 sequence i (same prompt, same seed in every run) must
 * generate the same tokens in every run: the API promises batch-invariant
 * draws and lossless greedy verification. */
json_t *consistency_json(json_t *runs, double temp) {
  json_t *o = json_object(), *bad = json_array();
  json_object_set_new(o, "checked", json_boolean(temp <= 0));
  size_t i, j;
  json_t *r, *q;
  json_array_foreach(runs, i, r) {
    json_t *h = json_object_get(r, "output_fnv1a64");
    json_array_foreach(runs, j, q) {
      if (j <= i) continue;
      json_t *g = json_object_get(q, "output_fnv1a64");
      for (size_t k = 0; k < json_array_size(h) && k < json_array_size(g); k++)
        if (strcmp(json_string_value(json_array_get(h, k)), json_string_value(json_array_get(g, k)))) {
          char m[160];
          snprintf(m, sizeof m, "sequence %zu: run %zu (dspark %s, C %d) != run %zu (dspark %s, C %d)", k, i,
                   json_string_value(json_object_get(r, "mode")), (int)jnum(r, "concurrency"), j,
                   json_string_value(json_object_get(q, "mode")), (int)jnum(q, "concurrency"));
          json_array_append_new(bad, json_string(m));
        }
    }
  }
  json_object_set_new(o, "agree", temp <= 0 ? json_boolean(json_array_size(bad) == 0) : json_null());
  json_object_set_new(o, "mismatches", bad);
  return o;
}

/* Data file: one gnuplot block per mode (index 0: DSpark off, 1: on),
 * separated by two blank lines; columns in the header comment. */
int write_plot_data(const char *path, json_t *runs) {
  FILE *f = fopen(path, "w");
  if (!f) return -1;
  fprintf(f, "# dsv4-bench plot data; blocks: DSpark off, then DSpark on (if run)\n"
             "# C ttft_med_ms ttft_p90_ms itl_med_ms itl_p90_ms output_tok_s decode_tok_s "
             "step_ms floor_ms acceptance repeat\n");
  int blocks = 0;
  for (int d = 0; d <= 1; d++) {
    int any = 0;
    size_t i;
    json_t *r;
    json_array_foreach(runs, i, r) {
      if ((int)json_is_true(json_object_get(r, "dspark")) != d) continue;
      if (!any && blocks) fputs("\n\n", f);
      if (!any) fprintf(f, "# mode %s\n", d ? "dspark" : "no-dspark");
      any = 1;
      fprintf(f, "%d %.6g %.6g %.6g %.6g %.6g %.6g %.6g %.6g %.6g %d\n",
              (int)jnum(r, "concurrency"), jnum2(r, "ttft_ms", "median"), jnum2(r, "ttft_ms", "p90"),
              jnum2(r, "itl_ms", "median"), jnum2(r, "itl_ms", "p90"), jnum(r, "output_tok_s"),
              jnum(r, "decode_tok_s"), jnum2(r, "roofline", "engine_ms_per_step"),
              jnum2(r, "roofline", "floor_ms_per_step"), jnum(r, "acceptance_length"),
              (int)jnum(r, "repeat"));
    }
    blocks += any;
  }
  return fclose(f);
}

int run_gnuplot(const char *script, const char *data, const char *png, const char *title) {
  pid_t pid = fork();
  if (pid < 0) return -1;
  if (pid == 0) {
    execlp("gnuplot", "gnuplot", "-c", script, data, png, title, (char *)NULL);
    _exit(127);
  }
  int st = 0;
  if (waitpid(pid, &st, 0) < 0) return -1;
  return WIFEXITED(st) ? WEXITSTATUS(st) : -1;
}

void print_summary(json_t *runs) {
  if (g_quiet) return;
  fprintf(stderr,
          "dsv4-bench: %-6s %4s %10s %10s %10s %10s %10s %9s %9s %8s %6s\n", "dspark", "C",
          "ttft_med", "itl_med", "itl_p90", "out_tok/s", "dec_tok/s", "step_ms", "floor_ms",
          "step/flr", "accept");
  size_t i;
  json_t *r;
  json_array_foreach(runs, i, r) {
    fprintf(stderr,
            "dsv4-bench: %-6s %4d %10.2f %10.2f %10.2f %10.2f %10.2f %9.2f %9.2f %8.2f %6.2f\n",
            json_string_value(json_object_get(r, "mode")), (int)jnum(r, "concurrency"),
            jnum2(r, "ttft_ms", "median"), jnum2(r, "itl_ms", "median"), jnum2(r, "itl_ms", "p90"),
            jnum(r, "output_tok_s"), jnum(r, "decode_tok_s"),
            jnum2(r, "roofline", "engine_ms_per_step"), jnum2(r, "roofline", "floor_ms_per_step"),
            jnum2(r, "roofline", "step_over_floor"), jnum(r, "acceptance_length"));
  }
}

