/* dsv4-bench: command-line options. */
#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "bench.h"
#include "tool_util.h"

void usage(FILE *f) {
  fputs(
      "usage: dsv4-bench -m DIR [options]\n"
      "Serving benchmark: C concurrent sequences, prefill + batched decode, for each C.\n"
      "  -m, --model DIR       checkpoint directory (official release format, with tokenizer.json;\n"
      "                        default: the default model installed with the tools)\n"
      "  -c, --concurrency L   comma-separated concurrencies (default 1,2,4,8,16)\n"
      "  -p, --prompt-len N    prompt tokens per sequence, BOS included (default 128)\n"
      "  -n, --output-len N    generated tokens per sequence, the prefill's first token\n"
      "                        included (default 32); EOS does not stop a sequence\n"
      "  --prompt-file FILE    prompts from this UTF-8 text: encoded with the model's tokenizer,\n"
      "                        sequence i takes a window at its own offset (default: random\n"
      "                        ids, uniform over the tokenizer's ordinary tokens)\n"
      "  --seed S              prompt and sampling seed (default 1)\n"
      "  --temp T              sampling temperature (default 0 = greedy)\n"
      "  --dspark MODE         off | on | both | auto (default auto: both when the model and\n"
      "                        backend can draft, else off)\n"
      "  --draft-len N         DSpark proposals verified per step, 1..block (default: block)\n"
      "  --min-survival P      DSpark: verify dsv4_spec_draft_length(confidence, block, P)\n"
      "                        proposals instead of a fixed number\n"
      "  --backend B           cpu | cuda | auto (default cpu)\n"
      "  --device N            CUDA device (default 0)\n"
      "  --threads N           engine worker threads (default 0 = one per core)\n"
      "  --tp T, --pp P        under mpirun -np T*P: one rank of a TP x PP engine per process\n"
      "                        (default $DSV4_TP / $DSV4_PP, else TP 1 and PP = the ranks);\n"
      "                        rank 0 writes the report, the other ranks only errors\n"
      "  --micro-batches M     pipeline overlap: decode steps as M micro-batches (PP > 1;\n"
      "                        default 0 = the library's: none)\n"
      "  --chunk N             prefill chunk tokens (default: the library's)\n"
      "  --op-timings          per-op and per-layer engine timings (DSV4_ENGINE_F_OP_TIMINGS)\n"
      "  --warmup N            untimed warm-up run first: the list's first C, N decode steps\n"
      "                        (default 2; 0 = none)\n"
      "  --repeat R            run the whole concurrency list R times (default 1); every run\n"
      "                        is reported, none is dropped\n"
      "  --prefetch            read the weights decode touches into the page cache first\n"
      "  --bw-bytes N          copy-bandwidth buffer bytes (default max(2 x LLC, 256 MiB))\n"
      "  --bw-repeats N        copy-bandwidth repetitions, best kept (default 5)\n"
      "  --no-bw               skip the bandwidth measurement (no floor ratios)\n"
      "  --json FILE           write the JSON report there (default: stdout)\n"
      "  --plot PNG            draw latency/throughput vs concurrency with gnuplot into PNG\n"
      "                        (the data file goes next to it as PNG minus .png plus .dat)\n"
      "  --plot-data FILE      write the gnuplot data file only (plot later with\n"
      "                        gnuplot -c bench/plot.gp FILE OUT.png)\n"
      "  --plot-script FILE    gnuplot script (default: plot.gp installed with the tools,\n"
      "                        <datadir>/dsv4/plot.gp)\n"
      "  -q, --quiet           no progress or summary on stderr\n"
      "  --version             print the tool's and the library's version\n"
      "Exit status: 0 done, 1 the run failed, 2 bad usage.\n",
      f);
}

static int parse_i64(const char *s, int64_t lo, int64_t hi, int64_t *out) {
  char *end;
  errno = 0;
  long long v = strtoll(s, &end, 10);
  if (!s[0] || *end || errno || v < lo || v > hi) return -1;
  *out = v;
  return 0;
}

void parse_args(int argc, char **argv, opts *o) {
  memset(o, 0, sizeof *o);
  const int32_t def_c[] = {1, 2, 4, 8, 16};
  memcpy(o->conc, def_c, sizeof def_c);
  o->n_conc = 5;
  o->prompt_len = 128;
  o->output_len = 32;
  o->seed = 1;
  o->dspark = DSPARK_AUTO;
  o->backend = DSV4_BACKEND_CPU;
  o->warmup = 2;
  o->repeat = 1;
  o->bw_repeats = 5;
  static char plot_gp[4096];
  o->plot_script = tool_data_path("plot.gp", DSV4_TREE_PLOT_GP, plot_gp, sizeof plot_gp);
  o->min_survival = -1;
  size_t cl = 1;
  for (int i = 0; i < argc; i++) cl += strlen(argv[i]) + 1;
  o->command = xcalloc(cl, 1);
  for (int i = 0; i < argc; i++) {
    if (i) strcat(o->command, " ");
    strcat(o->command, argv[i]);
  }
  for (int i = 1; i < argc; i++) {
    const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
    int64_t x;
#define FLAG(name) (!strcmp(a, name))
#define VAL(name) (FLAG(name) && v && (i++, 1))
    if (FLAG("-h") || FLAG("--help")) {
      usage(stdout);
      exit(TOOL_EXIT_OK);
    } else if (FLAG("--version")) {
      tool_print_version("dsv4-bench");
      exit(TOOL_EXIT_OK);
    } else if (FLAG("--op-timings")) o->op_timings = 1;
    else if (FLAG("--prefetch")) o->prefetch = 1;
    else if (FLAG("--no-bw")) o->no_bw = 1;
    else if (FLAG("-q") || FLAG("--quiet")) o->quiet = 1;
    else if (VAL("-m") || VAL("--model")) o->model = v;
    else if (VAL("--prompt-file")) o->prompt_file = v;
    else if (VAL("--json")) o->json_path = v;
    else if (VAL("--plot")) o->plot_png = v;
    else if (VAL("--plot-data")) o->plot_data = v;
    else if (VAL("--plot-script")) o->plot_script = v;
    else if (VAL("-c") || VAL("--concurrency")) {
      o->n_conc = 0;
      char *dup = strdup(v), *save = NULL;
      if (!dup) die("out of memory");
      for (char *t = strtok_r(dup, ",", &save); t; t = strtok_r(NULL, ",", &save)) {
        if (o->n_conc == MAX_C || parse_i64(t, 1, 65535, &x))
          die_usage("--concurrency wants up to %d integers in [1, 65535], comma-separated", MAX_C);
        o->conc[o->n_conc++] = (int32_t)x;
      }
      free(dup);
      if (!o->n_conc) die_usage("--concurrency: empty list");
    } else if ((VAL("-p") || VAL("--prompt-len")) && !parse_i64(v, 1, INT32_MAX, &x))
      o->prompt_len = x;
    else if ((VAL("-n") || VAL("--output-len")) && !parse_i64(v, 1, INT32_MAX, &x))
      o->output_len = x;
    else if (VAL("--seed")) {
      char *end;
      errno = 0;
      o->seed = strtoull(v, &end, 10);
      if (!v[0] || *end || errno || v[0] == '-') die_usage("--seed wants an unsigned integer");
    } else if (VAL("--temp")) {
      char *end;
      o->temp = strtod(v, &end);
      if (!v[0] || *end || !isfinite(o->temp)) die_usage("--temp wants a number");
    } else if (VAL("--dspark")) {
      if (!strcmp(v, "off")) o->dspark = DSPARK_OFF;
      else if (!strcmp(v, "on")) o->dspark = DSPARK_ON;
      else if (!strcmp(v, "both")) o->dspark = DSPARK_BOTH;
      else if (!strcmp(v, "auto")) o->dspark = DSPARK_AUTO;
      else die_usage("--dspark wants off, on, both or auto");
    } else if (VAL("--draft-len") && !parse_i64(v, 1, 64, &x)) o->draft_len = (int32_t)x;
    else if (VAL("--min-survival")) {
      char *end;
      o->min_survival = strtod(v, &end);
      if (!v[0] || *end || !(o->min_survival >= 0 && o->min_survival <= 1))
        die_usage("--min-survival wants a number in [0, 1]");
    } else if (VAL("--backend")) {
      if (!strcmp(v, "cpu")) o->backend = DSV4_BACKEND_CPU;
      else if (!strcmp(v, "cuda")) o->backend = DSV4_BACKEND_CUDA;
      else if (!strcmp(v, "auto")) o->backend = DSV4_BACKEND_AUTO;
      else die_usage("--backend wants cpu, cuda or auto");
    } else if (VAL("--device") && !parse_i64(v, 0, 1023, &x)) o->device = (int32_t)x;
    else if (VAL("--threads") && !parse_i64(v, 0, 4096, &x)) o->threads = (int32_t)x;
    else if (VAL("--tp") && !parse_i64(v, 1, 4096, &x)) o->tp = (int32_t)x;
    else if (VAL("--pp") && !parse_i64(v, 1, 16, &x)) o->pp = (int32_t)x;
    else if (VAL("--micro-batches") && !parse_i64(v, 0, 256, &x)) o->micro_batches = (int32_t)x;
    else if (VAL("--chunk") && !parse_i64(v, 0, INT32_MAX, &x)) o->chunk = (int32_t)x;
    else if (VAL("--warmup") && !parse_i64(v, 0, 1000000, &x)) o->warmup = (int)x;
    else if (VAL("--repeat") && !parse_i64(v, 1, 1000, &x)) o->repeat = (int)x;
    else if (VAL("--bw-bytes") && !parse_i64(v, 1 << 20, INT64_MAX / 4, &x)) o->bw_bytes = x;
    else if (VAL("--bw-repeats") && !parse_i64(v, 1, 1000, &x)) o->bw_repeats = (int)x;
    else {
      usage(stderr);
      die_usage("bad option or value: %s%s%s", a, v && a[0] == '-' ? " " : "",
          v && a[0] == '-' ? v : "");
    }
#undef FLAG
#undef VAL
  }
  static char model[4096];
  if (!o->model && !(o->model = tool_default_model(model, sizeof model))) {
    usage(stderr);
    die_usage("-m DIR is required (the default model is not installed)");
  }
  if (o->plot_png && !o->plot_script)
    die_usage("--plot: plot.gp is not installed next to the tools; give --plot-script FILE");
  g_quiet = o->quiet;
}

