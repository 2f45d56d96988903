/*
 * dsv4-bench: serving benchmark of libdsv4 over a checkpoint directory
 * (issue 6). Public API only, plus jansson for config.json and the report.
 *
 *   dsv4-bench -m DIR [-c 1,2,4,8,16] [-p PROMPT_LEN] [-n OUTPUT_LEN]
 *              [--prompt-file FILE] [--dspark off|on|both|auto] [--backend cpu|cuda|auto]
 *              [--json FILE] [--plot PNG] [...]       (dsv4-bench --help lists everything)
 *
 * For each concurrency C (and each DSpark mode) one run: C sequences arrive
 * together at t0, are prefilled one after another (the API prefills one
 * sequence per call), then decoded together, one step per round over every
 * unfinished sequence (dsv4_engine_decode; with DSpark dsv4_engine_draft then
 * dsv4_engine_verify), until each holds OUTPUT_LEN generated tokens (the
 * first comes from its prefill; EOS does not stop a sequence: every run does
 * the same work).
 *
 * Metrics (docs in bench/RESULTS.md, "Definitions"):
 *  - TTFT of a sequence: t0 -> its first token (so queueing behind earlier
 *    prefills counts, as it would for a server without chunked-prefill mixing).
 *  - Inter-token latency, token-attributed (field notes §5.5): a decode step
 *    of wall time dt that emits k tokens for a sequence contributes k samples
 *    of dt / k for that sequence. Without DSpark k = 1. Median and p90 are
 *    over all samples of the run (linear interpolation between ranks).
 *  - Aggregate throughput: generated tokens / wall time, over the whole run
 *    (output_tok_s) and over the decode phase only (decode_tok_s).
 *  - Acceptance length: tokens emitted per sequence per decode step (1 without DSpark).
 *  - The engine's own timings (dsv4_engine_get_timings; per op and per layer
 *    with --op-timings) for every run.
 *  - Ratios (design §8): the machine's copy bandwidth is measured in the same
 *    process; each decode step's bytes-touched floor (weights read + KV read,
 *    the model in bytes_model below) / bandwidth is compared with the
 *    engine's step time; and every run is compared with the C = 1 run of the
 *    same mode (and DSpark with no DSpark at equal C).
 */
#include <errno.h>
#include <jansson.h>
#include <math.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/types.h>
#include <sys/utsname.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "dsv4/dsv4.h"

#ifndef DSV4_BENCH_PLOT_GP
#define DSV4_BENCH_PLOT_GP "bench/plot.gp"
#endif

#define MAX_C 64
#define SCHEMA_VERSION 1

/* ======================================================================
 * Small helpers
 * ====================================================================== */

static int g_quiet;

static void note(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static void note(const char *fmt, ...) {
  if (g_quiet) return;
  va_list ap;
  va_start(ap, fmt);
  fputs("dsv4-bench: ", stderr);
  vfprintf(stderr, fmt, ap);
  fputc('\n', stderr);
  va_end(ap);
  fflush(stderr);
}

static void die(const char *fmt, ...) __attribute__((format(printf, 1, 2), noreturn));
static void die(const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  fputs("dsv4-bench: ", stderr);
  vfprintf(stderr, fmt, ap);
  fputc('\n', stderr);
  va_end(ap);
  exit(1);
}

static int64_t now_ns(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

static void *xcalloc(size_t n, size_t size) {
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
static double quantile(double *v, size_t n, double q) {
  if (!n) return NAN;
  qsort(v, n, sizeof *v, cmp_double);
  const double pos = q * (double)(n - 1);
  const size_t lo = (size_t)pos;
  const size_t hi = lo + 1 < n ? lo + 1 : lo;
  return v[lo] + (v[hi] - v[lo]) * (pos - (double)lo);
}

static double mean_of(const double *v, size_t n) {
  double s = 0;
  for (size_t i = 0; i < n; i++) s += v[i];
  return n ? s / (double)n : NAN;
}

/* Growable array of doubles (latency samples). */
typedef struct dvec {
  double *v;
  size_t n, cap;
} dvec;

static void dvec_push(dvec *d, double x) {
  if (d->n == d->cap) {
    d->cap = d->cap ? 2 * d->cap : 256;
    d->v = realloc(d->v, d->cap * sizeof *d->v);
    if (!d->v) die("out of memory");
  }
  d->v[d->n++] = x;
}

/* {"mean","median","p90","max","n"} of the samples (sorts them). */
static json_t *stats_json(dvec *d) {
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

static json_t *num_or_null(double x) { return isfinite(x) ? json_real(x) : json_null(); }

static char *read_file(const char *path, size_t *len) {
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

/* ======================================================================
 * Options
 * ====================================================================== */

enum { DSPARK_OFF = 0, DSPARK_ON = 1, DSPARK_BOTH = 2, DSPARK_AUTO = 3 };

typedef struct opts {
  const char *model, *prompt_file, *json_path, *plot_png, *plot_data, *plot_script;
  int32_t conc[MAX_C];
  int n_conc;
  int64_t prompt_len, output_len;
  uint64_t seed;
  double temp;
  int dspark;
  int32_t backend, device, threads, chunk;
  int op_timings, warmup, repeat, prefetch, quiet;
  int64_t bw_bytes;
  int bw_repeats, no_bw;
  int32_t draft_len;   /* DSpark proposals verified per step; 0 = the block size */
  double min_survival; /* >= 0: draft length from the confidences instead */
  char *command; /* argv joined, for the report */
} opts;

static void usage(FILE *f) {
  fputs(
      "usage: dsv4-bench -m DIR [options]\n"
      "Serving benchmark: C concurrent sequences, prefill + batched decode, for each C.\n"
      "  -m, --model DIR       checkpoint directory (official release format, with tokenizer.json)\n"
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
      "  --plot-script FILE    gnuplot script (default " DSV4_BENCH_PLOT_GP ")\n"
      "  -q, --quiet           no progress or summary on stderr\n",
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

static void parse_args(int argc, char **argv, opts *o) {
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
  o->plot_script = DSV4_BENCH_PLOT_GP;
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
      exit(0);
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
          die("--concurrency wants up to %d integers in [1, 65535], comma-separated", MAX_C);
        o->conc[o->n_conc++] = (int32_t)x;
      }
      free(dup);
      if (!o->n_conc) die("--concurrency: empty list");
    } else if ((VAL("-p") || VAL("--prompt-len")) && !parse_i64(v, 1, INT32_MAX, &x))
      o->prompt_len = x;
    else if ((VAL("-n") || VAL("--output-len")) && !parse_i64(v, 1, INT32_MAX, &x))
      o->output_len = x;
    else if (VAL("--seed")) {
      char *end;
      errno = 0;
      o->seed = strtoull(v, &end, 10);
      if (!v[0] || *end || errno || v[0] == '-') die("--seed wants an unsigned integer");
    } else if (VAL("--temp")) {
      char *end;
      o->temp = strtod(v, &end);
      if (!v[0] || *end || !isfinite(o->temp)) die("--temp wants a number");
    } else if (VAL("--dspark")) {
      if (!strcmp(v, "off")) o->dspark = DSPARK_OFF;
      else if (!strcmp(v, "on")) o->dspark = DSPARK_ON;
      else if (!strcmp(v, "both")) o->dspark = DSPARK_BOTH;
      else if (!strcmp(v, "auto")) o->dspark = DSPARK_AUTO;
      else die("--dspark wants off, on, both or auto");
    } else if (VAL("--draft-len") && !parse_i64(v, 1, 64, &x)) o->draft_len = (int32_t)x;
    else if (VAL("--min-survival")) {
      char *end;
      o->min_survival = strtod(v, &end);
      if (!v[0] || *end || !(o->min_survival >= 0 && o->min_survival <= 1))
        die("--min-survival wants a number in [0, 1]");
    } else if (VAL("--backend")) {
      if (!strcmp(v, "cpu")) o->backend = DSV4_BACKEND_CPU;
      else if (!strcmp(v, "cuda")) o->backend = DSV4_BACKEND_CUDA;
      else if (!strcmp(v, "auto")) o->backend = DSV4_BACKEND_AUTO;
      else die("--backend wants cpu, cuda or auto");
    } else if (VAL("--device") && !parse_i64(v, 0, 1023, &x)) o->device = (int32_t)x;
    else if (VAL("--threads") && !parse_i64(v, 0, 4096, &x)) o->threads = (int32_t)x;
    else if (VAL("--chunk") && !parse_i64(v, 0, INT32_MAX, &x)) o->chunk = (int32_t)x;
    else if (VAL("--warmup") && !parse_i64(v, 0, 1000000, &x)) o->warmup = (int)x;
    else if (VAL("--repeat") && !parse_i64(v, 1, 1000, &x)) o->repeat = (int)x;
    else if (VAL("--bw-bytes") && !parse_i64(v, 1 << 20, INT64_MAX / 4, &x)) o->bw_bytes = x;
    else if (VAL("--bw-repeats") && !parse_i64(v, 1, 1000, &x)) o->bw_repeats = (int)x;
    else {
      usage(stderr);
      die("bad option or value: %s%s%s", a, v && a[0] == '-' ? " " : "",
          v && a[0] == '-' ? v : "");
    }
#undef FLAG
#undef VAL
  }
  if (!o->model) {
    usage(stderr);
    die("-m DIR is required");
  }
  g_quiet = o->quiet;
}

/* ======================================================================
 * Machine: CPU, memory, LLC, copy bandwidth
 * ====================================================================== */

typedef struct machine {
  char cpu_model[256], kernel[256];
  long nproc;
  int64_t mem_total, llc_bytes;
  double load_start; /* 1-minute load average when the tool started */
} machine;

static void machine_probe(machine *m) {
  memset(m, 0, sizeof *m);
  m->nproc = sysconf(_SC_NPROCESSORS_ONLN);
  snprintf(m->cpu_model, sizeof m->cpu_model, "unknown");
  char *ci = read_file("/proc/cpuinfo", NULL);
  if (ci) {
    char *p = strstr(ci, "model name");
    if (p && (p = strchr(p, ':'))) {
      p++;
      while (*p == ' ' || *p == '\t') p++;
      size_t n = strcspn(p, "\n");
      if (n >= sizeof m->cpu_model) n = sizeof m->cpu_model - 1;
      memcpy(m->cpu_model, p, n);
      m->cpu_model[n] = 0;
    }
    free(ci);
  }
  char *mi = read_file("/proc/meminfo", NULL);
  if (mi) {
    long long kb;
    char *p = strstr(mi, "MemTotal:");
    if (p && sscanf(p, "MemTotal: %lld kB", &kb) == 1) m->mem_total = (int64_t)kb * 1024;
    free(mi);
  }
#ifdef _SC_LEVEL3_CACHE_SIZE
  long l3 = sysconf(_SC_LEVEL3_CACHE_SIZE);
  if (l3 > 0) m->llc_bytes = l3;
#endif
  if (!m->llc_bytes) {
    char *s = read_file("/sys/devices/system/cpu/cpu0/cache/index3/size", NULL);
    long long v;
    char unit = 0;
    if (s && sscanf(s, "%lld%c", &v, &unit) >= 1)
      m->llc_bytes = v * (unit == 'K' ? 1024 : unit == 'M' ? 1048576 : 1);
    free(s);
  }
  struct utsname u;
  if (!uname(&u)) snprintf(m->kernel, sizeof m->kernel, "%s %s %s", u.sysname, u.release, u.machine);
}

typedef struct bw_job {
  char *dst;
  const char *src;
  size_t n;
} bw_job;

static void *bw_worker(void *arg) {
  bw_job *j = arg;
  memcpy(j->dst, j->src, j->n);
  return NULL;
}

/* Best of `reps` timed copies of `bytes` by `threads` threads (each its own
 * slice); GB/s counted as (bytes read + bytes written) / time, the STREAM
 * "copy" convention. Returns 0 when the buffers cannot be allocated. */
static double copy_bandwidth(int64_t bytes, int threads, int reps) {
  char *src = malloc((size_t)bytes), *dst = malloc((size_t)bytes);
  if (!src || !dst) {
    free(src);
    free(dst);
    return 0;
  }
  memset(src, 1, (size_t)bytes); /* first touch: page in both buffers */
  memset(dst, 2, (size_t)bytes);
  if (threads < 1) threads = 1;
  pthread_t *tid = xcalloc((size_t)threads, sizeof *tid);
  bw_job *jobs = xcalloc((size_t)threads, sizeof *jobs);
  const size_t slice = ((size_t)bytes / (size_t)threads) & ~(size_t)4095;
  double best = 0;
  for (int r = 0; r < reps; r++) {
    const int64_t t0 = now_ns();
    for (int t = 0; t < threads; t++) {
      jobs[t].dst = dst + (size_t)t * slice;
      jobs[t].src = src + (size_t)t * slice;
      jobs[t].n = t == threads - 1 ? (size_t)bytes - (size_t)t * slice : slice;
      if (t == 0 || pthread_create(&tid[t], NULL, bw_worker, &jobs[t])) tid[t] = 0;
    }
    for (int t = 0; t < threads; t++) /* slice 0 and failed spawns run here */
      if (!tid[t]) bw_worker(&jobs[t]);
    for (int t = 1; t < threads; t++)
      if (tid[t]) pthread_join(tid[t], NULL);
    const double s = (double)(now_ns() - t0) * 1e-9;
    const double gbs = 2.0 * (double)bytes / s * 1e-9;
    if (gbs > best) best = gbs;
  }
  free(tid);
  free(jobs);
  free(src);
  free(dst);
  return best;
}

/* ======================================================================
 * Model facts and the bytes-touched model of a decode step
 * ====================================================================== */

/* Per backbone layer: what one decode step reads. */
typedef struct layer_bytes {
  int64_t dense;           /* every tensor of layers.L.* except routed experts, Engram
                            * tables and gate.bias_vl; wo_a counted as its bf16 copy */
  int64_t expert;          /* one routed expert (w1, w2, w3 and their scales) */
  int64_t engram_row;      /* one Engram table row (codes + scale), 0 if no Engram */
  int32_t ratio, roles, kv_source, index_key_source;
} layer_bytes;

typedef struct bytes_model {
  int32_t n_layers, n_mtp, n_experts, top_k, window, head_dim, index_head_dim, index_topk;
  int32_t engram_rows_per_token; /* (max n-gram - 1) x heads */
  int32_t hidden;
  layer_bytes *layer;            /* [n_layers] */
  int64_t head, embed_row, final_norm;
  int64_t mtp_dense, mtp_expert; /* DSpark stages, for the DSpark mode */
  int32_t mtp_experts, mtp_top_k;
  int64_t wo_a_fp8, wo_a_bf16;   /* backbone wo_a: checkpoint form and the bf16 copy */
  int64_t win_rec, comp_rec, idxk_rec, cstate_rec;
  int64_t payload, n_tensors;
} bytes_model;

static int json_int_at(json_t *cfg, const char *key, int32_t def) {
  json_t *tc = json_object_get(cfg, "text_config");
  json_t *v = json_object_get(tc ? tc : cfg, key);
  if (!v) v = json_object_get(cfg, key);
  return json_is_integer(v) ? (int32_t)json_integer_value(v) : def;
}

static void bytes_model_build(const dsv4_model *model, const char *dir, bytes_model *b) {
  memset(b, 0, sizeof *b);
  dsv4_model_info mi;
  if (dsv4_model_get_info(model, &mi, sizeof mi)) die("dsv4_model_get_info failed");
  b->n_layers = mi.n_layers;
  b->n_mtp = mi.n_mtp_layers;
  b->n_experts = mi.n_routed_experts;
  b->top_k = mi.n_experts_per_tok;
  b->window = mi.sliding_window;
  b->head_dim = mi.head_dim;
  b->hidden = mi.hidden_size;
  b->payload = mi.payload_bytes;
  b->n_tensors = mi.n_tensors;
  /* facts the public info struct does not carry: from config.json */
  char path[4096];
  snprintf(path, sizeof path, "%s/config.json", dir);
  json_error_t jerr;
  json_t *cfg = json_load_file(path, 0, &jerr);
  if (!cfg) die("%s: %s (line %d)", path, jerr.text, jerr.line);
  b->index_head_dim = json_int_at(cfg, "index_head_dim", 128);
  b->index_topk = json_int_at(cfg, "index_topk", 512);
  b->engram_rows_per_token =
      (json_int_at(cfg, "engram_max_ngram_size", 4) - 1) * json_int_at(cfg, "engram_n_heads", 8);
  b->mtp_experts = json_int_at(cfg, "dspark_n_routed_experts", b->n_experts);
  b->mtp_top_k = json_int_at(cfg, "dspark_num_experts_per_tok", b->top_k);
  json_decref(cfg);
  /* record sizes of spec §5.8 (the CPU engine stores these records) */
  b->win_rec = b->head_dim + b->head_dim / 32;
  b->comp_rec = b->head_dim / 2 + b->head_dim / 16;
  b->idxk_rec = b->index_head_dim / 2 + b->index_head_dim / 32;
  b->cstate_rec = 2LL * b->head_dim * 4;

  b->layer = xcalloc((size_t)b->n_layers, sizeof *b->layer);
  for (int32_t l = 0; l < b->n_layers; l++) {
    dsv4_layer_info li;
    if (dsv4_model_get_layer(model, l, &li, sizeof li)) die("dsv4_model_get_layer %d failed", l);
    b->layer[l].ratio = li.compress_ratio;
    b->layer[l].roles = (int32_t)li.roles;
    b->layer[l].kv_source = li.kv_source;
    b->layer[l].index_key_source = li.index_key_source;
  }
  int64_t mtp_expert_total = 0, *expert_total = xcalloc((size_t)b->n_layers, sizeof(int64_t));
  for (int64_t i = 0; i < mi.n_tensors; i++) {
    dsv4_tensor_info t;
    if (dsv4_model_get_tensor(model, i, &t, sizeof t)) die("dsv4_model_get_tensor failed");
    const char *n = t.name;
    int l = -1, off = 0;
    if (!strcmp(n, "head.weight")) b->head = t.nbytes;
    else if (!strcmp(n, "norm.weight")) b->final_norm = t.nbytes;
    else if (!strcmp(n, "embed.weight")) b->embed_row = t.shape[0] ? t.nbytes / t.shape[0] : 0;
    else if (sscanf(n, "layers.%d.%n", &l, &off) == 1 && off > 0 && l >= 0 && l < b->n_layers) {
      const char *r = n + off;
      layer_bytes *lb = &b->layer[l];
      if (!strncmp(r, "ffn.experts.", 12)) expert_total[l] += t.nbytes;
      else if (!strcmp(r, "engram.embed.weight") || !strcmp(r, "engram.embed.scale"))
        lb->engram_row += t.shape[0] ? t.nbytes / t.shape[0] : 0;
      else if (!strcmp(r, "ffn.gate.bias_vl")) continue; /* vision routing only */
      else if (!strcmp(r, "attn.wo_a.scale")) b->wo_a_fp8 += t.nbytes;
      else if (!strcmp(r, "attn.wo_a.weight")) {
        b->wo_a_fp8 += t.nbytes;
        b->wo_a_bf16 += 2 * t.nbytes; /* one e4m3 byte -> one bf16 value */
        lb->dense += 2 * t.nbytes;
      } else lb->dense += t.nbytes;
    } else if (sscanf(n, "mtp.%d.%n", &l, &off) == 1 && off > 0) {
      const char *r = n + off;
      if (!strncmp(r, "ffn.experts.", 12)) mtp_expert_total += t.nbytes;
      else if (!strcmp(r, "ffn.gate.bias_vl") || !strcmp(r, "attn.wo_a.scale")) continue;
      else if (!strcmp(r, "attn.wo_a.weight")) b->mtp_dense += 2 * t.nbytes;
      else b->mtp_dense += t.nbytes;
    }
  }
  for (int32_t l = 0; l < b->n_layers; l++)
    b->layer[l].expert = b->n_experts ? expert_total[l] / b->n_experts : 0;
  if (b->n_mtp && b->mtp_experts) b->mtp_expert = mtp_expert_total / ((int64_t)b->n_mtp * b->mtp_experts);
  free(expert_total);
}

/* Expected distinct experts hit by t tokens routed top-k of e, uniform and
 * independent routing: e (1 - (1 - k/e)^t). */
static double distinct_experts(int32_t e, int32_t k, double t) {
  if (e <= 0 || k <= 0 || t <= 0) return 0;
  return (double)e * (1.0 - pow(1.0 - (double)k / (double)e, t));
}

/* Weight bytes one backbone forward over t tokens (a decode step of t
 * sequences) reads: per layer dense + distinct experts x expert bytes +
 * Engram rows; embed rows; final norm + head (once per step, whatever t). */
static double weight_bytes_step(const bytes_model *b, double t) {
  double s = (double)b->head + (double)b->final_norm + t * (double)b->embed_row;
  for (int32_t l = 0; l < b->n_layers; l++) {
    const layer_bytes *lb = &b->layer[l];
    s += (double)lb->dense;
    s += distinct_experts(b->n_experts, b->top_k, t) * (double)lb->expert;
    s += t * (double)b->engram_rows_per_token * (double)lb->engram_row;
  }
  return s;
}

/* Weight bytes one DSpark draft over t block tokens reads: every mtp.*
 * tensor but the routed experts (main_proj, attention, shared experts,
 * Markov and confidence heads; wo_a as bf16), the distinct routed experts
 * of each stage, the shared head and t embed rows. */
static double draft_weight_bytes(const bytes_model *b, double t) {
  return (double)b->mtp_dense +
         (double)b->n_mtp * distinct_experts(b->mtp_experts, b->mtp_top_k, t) * (double)b->mtp_expert +
         (double)b->head + t * (double)b->embed_row;
}

/* Cache bytes a decode step reads for one sequence whose new token sits at
 * position len - 1 (len positions visible): every layer's window ring; at each
 * index source the index keys of every compressed group of its key layer; at
 * each layer with ratio > 0 the top-k compressed records of its KV source;
 * the ratio > 1 compressor rings. Candidate masking is not modelled. */
static double kv_bytes_seq(const bytes_model *b, int64_t len) {
  double s = 0;
  const int64_t win = len < b->window ? len : b->window;
  for (int32_t l = 0; l < b->n_layers; l++) {
    const layer_bytes *lb = &b->layer[l];
    s += (double)win * (double)b->win_rec;
    if (lb->ratio <= 0) continue;
    const int32_t src = lb->kv_source;
    const int32_t r = src >= 0 && src < b->n_layers && b->layer[src].ratio > 0 ? b->layer[src].ratio : 1;
    const int64_t groups = len / r;
    s += (double)(groups < b->index_topk ? groups : b->index_topk) * (double)b->comp_rec;
    if (lb->roles & DSV4_ROLE_INDEX_SOURCE) {
      const int32_t ks = lb->index_key_source >= 0 ? lb->index_key_source : src;
      const int32_t kr = ks >= 0 && ks < b->n_layers && b->layer[ks].ratio > 0 ? b->layer[ks].ratio : r;
      s += (double)(len / kr) * (double)b->idxk_rec;
    }
    if ((lb->roles & DSV4_ROLE_KV_SOURCE) && lb->ratio > 1) s += (double)lb->ratio * (double)b->cstate_rec;
  }
  return s;
}

static json_t *bytes_model_json(const bytes_model *b) {
  json_t *o = json_object();
  int64_t dense = 0, expert = 0;
  for (int32_t l = 0; l < b->n_layers; l++) {
    dense += b->layer[l].dense;
    expert += b->layer[l].expert;
  }
  json_object_set_new(o, "method", json_string(
      "weights: per backbone layer every tensor of layers.L except routed experts, Engram tables "
      "and gate.bias_vl (wo_a counted as its bf16 copy: 2 B per element), plus E(1-(1-k/E)^T) "
      "routed experts (T tokens in the step, uniform independent routing) and T x rows_per_token "
      "Engram rows; plus head.weight, norm.weight and T embed rows. KV: per sequence, window "
      "records min(len, window) per layer, top-k compressed records of the KV source per layer "
      "with ratio > 0, all index keys per index source, ratio-2 compressor rings (spec 5.8 "
      "record sizes). Byte sizes from dsv4_model_get_tensor."));
  json_object_set_new(o, "layer_dense_bytes", json_integer(dense));
  json_object_set_new(o, "expert_bytes_per_layer", json_integer(b->n_layers ? expert / b->n_layers : 0));
  json_object_set_new(o, "experts", json_integer(b->n_experts));
  json_object_set_new(o, "top_k", json_integer(b->top_k));
  json_object_set_new(o, "head_bytes", json_integer(b->head + b->final_norm));
  json_object_set_new(o, "embed_row_bytes", json_integer(b->embed_row));
  json_object_set_new(o, "engram_rows_per_token", json_integer(b->engram_rows_per_token));
  json_object_set_new(o, "wo_a_checkpoint_bytes", json_integer(b->wo_a_fp8));
  json_object_set_new(o, "wo_a_bf16_bytes", json_integer(b->wo_a_bf16));
  json_object_set_new(o, "mtp_dense_bytes", json_integer(b->mtp_dense));
  json_object_set_new(o, "mtp_expert_bytes", json_integer(b->mtp_expert));
  json_object_set_new(o, "weight_bytes_step_t1", json_integer((json_int_t)llround(weight_bytes_step(b, 1))));
  json_object_set_new(o, "window_record_bytes", json_integer(b->win_rec));
  json_object_set_new(o, "compressed_record_bytes", json_integer(b->comp_rec));
  json_object_set_new(o, "index_key_record_bytes", json_integer(b->idxk_rec));
  json_object_set_new(o, "index_topk", json_integer(b->index_topk));
  return o;
}

/* ======================================================================
 * Page-cache prefetch: read the byte ranges of the tensors decode touches
 * (safetensors headers parsed here: 8-byte little-endian header length,
 * JSON header, data area).
 * ====================================================================== */

static int touched_by_decode(const char *name, int with_mtp) {
  if (!strncmp(name, "vision.", 7) || !strncmp(name, "aligner.", 8) || !strncmp(name, "image_", 6))
    return 0;
  if (!strncmp(name, "mtp.", 4) && !with_mtp) return 0;
  if (strstr(name, ".attn.wo_a.")) return 0; /* used as the bf16 copy made at load */
  if (strstr(name, ".gate.bias_vl")) return 0;
  if (!strcmp(name, "embed.weight")) return 0; /* read a row per token, not whole */
  return 1;
}

static int64_t prefetch_shard(const char *path, int with_mtp, char *buf, size_t buf_len) {
  FILE *f = fopen(path, "rb");
  if (!f) return -1;
  unsigned char h8[8];
  int64_t total = 0;
  if (fread(h8, 1, 8, f) != 8) goto done;
  uint64_t hl = 0;
  for (int i = 7; i >= 0; i--) hl = hl << 8 | h8[i];
  if (hl > (1u << 30)) goto done;
  char *hdr = xcalloc((size_t)hl + 1, 1);
  if (fread(hdr, 1, (size_t)hl, f) != hl) {
    free(hdr);
    goto done;
  }
  json_error_t jerr;
  json_t *j = json_loadb(hdr, (size_t)hl, 0, &jerr);
  free(hdr);
  if (!j) goto done;
  const char *key;
  json_t *val;
  json_object_foreach(j, key, val) {
    json_t *offs = json_object_get(val, "data_offsets");
    if (!json_is_array(offs) || !touched_by_decode(key, with_mtp)) continue;
    int64_t a = (int64_t)json_integer_value(json_array_get(offs, 0));
    const int64_t e = (int64_t)json_integer_value(json_array_get(offs, 1));
    if (fseeko(f, (off_t)(8 + (int64_t)hl + a), SEEK_SET)) continue;
    while (a < e) {
      const size_t want = (size_t)(e - a) < buf_len ? (size_t)(e - a) : buf_len;
      const size_t got = fread(buf, 1, want, f);
      if (!got) break;
      a += (int64_t)got;
      total += (int64_t)got;
    }
  }
  json_decref(j);
done:
  fclose(f);
  return total;
}

static int64_t prefetch_weights(const char *dir, int with_mtp) {
  char path[4096];
  const size_t buf_len = 8u << 20;
  char *buf = xcalloc(buf_len, 1);
  int64_t total = 0;
  snprintf(path, sizeof path, "%s/model.safetensors.index.json", dir);
  json_t *idx = json_load_file(path, 0, NULL);
  if (idx) {
    json_t *wm = json_object_get(idx, "weight_map"), *files = json_object();
    const char *k;
    json_t *v;
    json_object_foreach(wm, k, v) if (json_is_string(v)) json_object_set(files, json_string_value(v), json_true());
    json_object_foreach(files, k, v) {
      snprintf(path, sizeof path, "%s/%s", dir, k);
      const int64_t n = prefetch_shard(path, with_mtp, buf, buf_len);
      if (n > 0) total += n;
    }
    json_decref(files);
    json_decref(idx);
  } else {
    snprintf(path, sizeof path, "%s/model.safetensors", dir);
    total = prefetch_shard(path, with_mtp, buf, buf_len);
  }
  free(buf);
  return total;
}

/* ======================================================================
 * Prompts
 * ====================================================================== */

static uint64_t splitmix64(uint64_t *s) {
  uint64_t z = (*s += 0x9E3779B97F4A7C15ull);
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}

typedef struct prompts {
  int32_t **ids; /* [n][len] */
  int n;
  int64_t len;
  const char *source; /* "random" | "file" */
  int64_t file_tokens, usable_ids;
} prompts;

/* n prompts of len tokens: BOS then len - 1 tokens. */
static void prompts_build(prompts *p, const opts *o, const dsv4_model_info *mi, dsv4_tokenizer *tok,
                          int n) {
  memset(p, 0, sizeof *p);
  p->n = n;
  p->len = o->prompt_len;
  p->ids = xcalloc((size_t)n, sizeof *p->ids);
  for (int i = 0; i < n; i++) {
    p->ids[i] = xcalloc((size_t)p->len, sizeof(int32_t));
    p->ids[i][0] = mi->bos_token_id;
  }
  if (p->len == 1) {
    p->source = o->prompt_file ? "file" : "random";
    return;
  }
  if (o->prompt_file) {
    size_t tl = 0, n_ids = 0;
    char *text = read_file(o->prompt_file, &tl);
    if (!text) die("cannot read --prompt-file %s: %s", o->prompt_file, strerror(errno));
    int32_t *all = xcalloc(tl + 1, sizeof *all);
    dsv4_status s = dsv4_tokenizer_encode(tok, text, tl, all, tl + 1, &n_ids);
    if (s) die("cannot encode %s: %s: %s", o->prompt_file, dsv4_status_string(s), dsv4_tokenizer_last_error(tok));
    if (!n_ids) die("--prompt-file %s encodes to no tokens", o->prompt_file);
    p->source = "file";
    p->file_tokens = (int64_t)n_ids;
    /* sequence i starts at offset i * n_ids / n in the token stream, wrapping
     * around when the text is shorter than the prompt */
    for (int i = 0; i < n; i++) {
      const size_t start = (size_t)((uint64_t)i * n_ids / (uint64_t)n);
      for (int64_t j = 1; j < p->len; j++) p->ids[i][j] = all[(start + (size_t)(j - 1)) % n_ids];
    }
    free(all);
    free(text);
    return;
  }
  /* random: uniform over the ids below both vocabularies that name an
   * ordinary token (no special ids, no gaps) */
  const int32_t tv = dsv4_tokenizer_vocab_size(tok);
  const int32_t lim = tv < mi->vocab_size ? tv : mi->vocab_size;
  int32_t *pool = xcalloc((size_t)(lim > 0 ? lim : 1), sizeof *pool), np = 0;
  for (int32_t id = 0; id < lim; id++) {
    if (id == mi->bos_token_id || id == mi->eos_token_id || id == mi->pad_token_id ||
        id == mi->image_token_id || id == mi->dspark_noise_token_id)
      continue;
    if (!dsv4_tokenizer_token_text(tok, id)) continue;
    pool[np++] = id;
  }
  if (!np) die("the tokenizer has no ordinary token below the model's vocabulary");
  p->source = "random";
  p->usable_ids = np;
  for (int i = 0; i < n; i++) {
    uint64_t st = o->seed * 0x100000001B3ull + (uint64_t)i;
    for (int64_t j = 1; j < p->len; j++) p->ids[i][j] = pool[splitmix64(&st) % (uint64_t)np];
  }
  free(pool);
}

/* ======================================================================
 * Decode modes. A mode advances every sequence of the batch by one step and
 * says how many tokens each got (k >= 1) and which: plain decode gives one.
 * The DSpark mode (draft + verify) plugs in here once its API is in dsv4.h.
 * ====================================================================== */

typedef struct bench bench;

/* What one step did: per sequence the emitted tokens out[i * kmax ..], their
 * count k[i] (the last is the next step's input), the proposals verified
 * nd[i] and accepted acc[i] (0 without DSpark); the step's time. */
typedef struct step_out {
  int32_t *out, *k, *nd, *acc;
  int64_t step_ns;   /* the engine's own timers: last_decode_ns, or last_draft_ns +
                      * last_verify_ns for a DSpark step */
  int64_t draft_ns, verify_ns;
} step_out;

typedef struct mode {
  const char *name; /* "off" | "on": DSpark */
  int dspark;
  int32_t max_tokens_per_step;
  /* feed tokens[i] to ids[i]; remaining[i] >= 1 tokens are still wanted from it */
  dsv4_status (*step)(bench *b, int32_t n, const int64_t *ids, const int32_t *tokens,
                      const int64_t *remaining, step_out *so);
} mode;

struct bench {
  opts o;
  machine m;
  dsv4_engine *eng;
  const dsv4_model *model;
  dsv4_model_info mi;
  dsv4_engine_info ei;
  bytes_model bm;
  prompts pr;
  dsv4_sampling_params sp;
  uint64_t *seeds; /* per-sequence sampling seeds, batch order of the current step */
  double copy_gbs, copy_gbs_1t;
  int64_t bw_bytes;
  int max_c;
  int32_t block;               /* DSpark block size B */
  int32_t *drafts, *next;      /* [max_c][B], [max_c] */
  float *conf;                 /* [max_c][B] */
  json_t *runs;
};

static dsv4_status plain_step(bench *b, int32_t n, const int64_t *ids, const int32_t *tokens,
                              const int64_t *remaining, step_out *so) {
  (void)remaining;
  dsv4_status s = dsv4_engine_decode(b->eng, n, ids, tokens, &b->sp, NULL, so->out);
  dsv4_engine_timings et;
  dsv4_engine_get_timings(b->eng, &et, sizeof et);
  so->step_ns = et.last_decode_ns;
  so->draft_ns = so->verify_ns = 0;
  for (int32_t i = 0; i < n; i++) so->k[i] = 1, so->nd[i] = so->acc[i] = 0;
  return s;
}

/* One DSpark round for the batch: draft B proposals after each anchor, pick
 * how many to verify (--draft-len, or --min-survival through
 * dsv4_spec_draft_length; never more than the sequence still needs), verify;
 * emitted: the accepted proposals, then the model's next token. */
static dsv4_status dspark_step(bench *b, int32_t n, const int64_t *ids, const int32_t *tokens,
                               const int64_t *remaining, step_out *so) {
  const int32_t B = b->block, kmax = B + 1;
  dsv4_status s = dsv4_engine_draft(b->eng, n, ids, tokens, &b->sp, b->drafts, b->conf);
  if (s) return s;
  for (int32_t i = 0; i < n; i++) {
    int32_t nd = b->o.min_survival >= 0
                     ? dsv4_spec_draft_length(b->conf + (size_t)i * (size_t)B, B, (float)b->o.min_survival)
                     : (b->o.draft_len > 0 && b->o.draft_len < B ? b->o.draft_len : B);
    if (nd > remaining[i] - 1) nd = (int32_t)(remaining[i] - 1);
    so->nd[i] = nd < 0 ? 0 : nd;
  }
  s = dsv4_engine_verify(b->eng, n, ids, tokens, so->nd, b->drafts, &b->sp, so->acc, b->next);
  if (s) return s;
  dsv4_engine_timings et;
  dsv4_engine_get_timings(b->eng, &et, sizeof et);
  so->draft_ns = et.last_draft_ns;
  so->verify_ns = et.last_verify_ns;
  so->step_ns = et.last_draft_ns + et.last_verify_ns;
  for (int32_t i = 0; i < n; i++) {
    int32_t *o = so->out + (size_t)i * (size_t)kmax;
    for (int32_t j = 0; j < so->acc[i]; j++) o[j] = b->drafts[(size_t)i * (size_t)B + (size_t)j];
    o[so->acc[i]] = b->next[i];
    so->k[i] = so->acc[i] + 1;
  }
  return DSV4_OK;
}

static const mode MODE_PLAIN = {"off", 0, 1, plain_step};
static mode MODE_DSPARK = {"on", 1, 0, dspark_step};

/* Whether this engine drafts: a throw-away sequence of one token drafts once.
 * Returns the DSpark mode, or NULL with *why set. */
static const mode *dspark_probe(bench *b, const char **why) {
  *why = NULL;
  if (b->mi.n_mtp_layers <= 0 || b->mi.dspark_block_size <= 0) {
    *why = "the model has no DSpark stages";
    return NULL;
  }
  b->block = b->mi.dspark_block_size;
  b->drafts = xcalloc((size_t)b->max_c * (size_t)b->block, sizeof *b->drafts);
  b->conf = xcalloc((size_t)b->max_c * (size_t)b->block, sizeof *b->conf);
  b->next = xcalloc((size_t)b->max_c, sizeof *b->next);
  int64_t id = 0;
  int32_t a = 0;
  const int32_t bos = b->mi.bos_token_id;
  dsv4_status s = dsv4_engine_seq_create(b->eng, &id);
  if (!s) s = dsv4_engine_prefill(b->eng, id, &bos, 1, NULL, NULL, &a);
  if (!s) s = dsv4_engine_draft(b->eng, 1, &id, &a, NULL, b->drafts, b->conf);
  if (s) *why = dsv4_engine_last_error(b->eng);
  if (id) dsv4_engine_seq_free(b->eng, id);
  if (s) return NULL;
  MODE_DSPARK.max_tokens_per_step = b->block + 1;
  return &MODE_DSPARK;
}

/* ======================================================================
 * One run
 * ====================================================================== */

typedef struct seq_state {
  uint64_t hash;    /* FNV-1a 64 of the generated token ids */
  int64_t id;
  int64_t produced; /* generated tokens so far (first from prefill) */
  int64_t length;   /* positions the sequence holds */
  int32_t next;     /* token to feed next */
  int64_t ttft_ns, done_ns;
} seq_state;

static void fnv_token(uint64_t *h, int32_t tok) {
  const uint32_t u = (uint32_t)tok;
  for (int i = 0; i < 4; i++) *h = (*h ^ ((u >> (8 * i)) & 0xFF)) * 0x100000001B3ull;
}

static void fail_engine(bench *b, const char *what, dsv4_status s) {
  die("%s: %s: %s", what, dsv4_status_string(s), dsv4_engine_last_error(b->eng));
}

static json_t *timings_json(bench *b) {
  dsv4_engine_timings t;
  dsv4_status s = dsv4_engine_get_timings(b->eng, &t, sizeof t);
  if (s) fail_engine(b, "dsv4_engine_get_timings", s);
  json_t *o = json_object();
  json_object_set_new(o, "prefill_calls", json_integer(t.prefill_calls));
  json_object_set_new(o, "prefill_tokens", json_integer(t.prefill_tokens));
  json_object_set_new(o, "prefill_ns", json_integer(t.prefill_ns));
  json_object_set_new(o, "decode_steps", json_integer(t.decode_steps));
  json_object_set_new(o, "decode_tokens", json_integer(t.decode_tokens));
  json_object_set_new(o, "decode_ns", json_integer(t.decode_ns));
  json_object_set_new(o, "draft_calls", json_integer(t.draft_calls));
  json_object_set_new(o, "draft_ns", json_integer(t.draft_ns));
  json_object_set_new(o, "verify_calls", json_integer(t.verify_calls));
  json_object_set_new(o, "verify_tokens", json_integer(t.verify_tokens));
  json_object_set_new(o, "verify_ns", json_integer(t.verify_ns));
  json_object_set_new(o, "op_timings", json_boolean(t.op_timings));
  if (t.op_timings) {
    json_t *ops = json_object();
    json_object_set_new(ops, "embed_ns", json_integer(t.embed_op_ns));
    json_object_set_new(ops, "engram_ns", json_integer(t.engram_op_ns));
    json_object_set_new(ops, "block_ns", json_integer(t.block_op_ns));
    json_object_set_new(ops, "head_ns", json_integer(t.head_op_ns));
    json_object_set_new(ops, "sample_ns", json_integer(t.sample_op_ns));
    json_object_set_new(ops, "read_ns", json_integer(t.read_op_ns));
    json_object_set_new(ops, "host_ns", json_integer(t.host_op_ns));
    json_object_set_new(ops, "dspark_ns", json_integer(t.dspark_op_ns));
    json_object_set_new(o, "ops", ops);
    json_t *layers = json_array();
    for (int32_t l = 0; l < b->mi.n_layers; l++) {
      int64_t ns = 0;
      if ((s = dsv4_engine_get_layer_time(b->eng, l, &ns))) fail_engine(b, "dsv4_engine_get_layer_time", s);
      json_array_append_new(layers, json_integer(ns));
    }
    json_object_set_new(o, "layer_ns", layers);
  }
  return o;
}

/* Page faults and CPU seconds (user + system, all threads) of this process so far. */
static void rusage_now(long *maj, long *min, double *cpu_s) {
  struct rusage ru;
  getrusage(RUSAGE_SELF, &ru);
  *maj = ru.ru_majflt;
  *min = ru.ru_minflt;
  *cpu_s = (double)ru.ru_utime.tv_sec + (double)ru.ru_utime.tv_usec * 1e-6 + (double)ru.ru_stime.tv_sec +
           (double)ru.ru_stime.tv_usec * 1e-6;
}

/* 1-minute load average (other processes competing for the cores), or NAN. */
static double loadavg1(void) {
  char *s = read_file("/proc/loadavg", NULL);
  double v = NAN;
  if (s && sscanf(s, "%lf", &v) != 1) v = NAN;
  free(s);
  return v;
}

/* Run C sequences through prefill and decode. With `record` NULL it is the
 * warm-up (steps decode steps, nothing kept). */
static json_t *run_one(bench *b, const mode *md, int32_t C, int64_t out_len, int rep, int record) {
  const opts *o = &b->o;
  const int32_t kmax = md->max_tokens_per_step;
  seq_state *sq = xcalloc((size_t)C, sizeof *sq);
  int64_t *ids = xcalloc((size_t)C, sizeof *ids), *remaining = xcalloc((size_t)C, sizeof *remaining);
  int32_t *in = xcalloc((size_t)C, sizeof *in), *map = xcalloc((size_t)C, sizeof *map);
  step_out so = {xcalloc((size_t)C * (size_t)kmax, sizeof(int32_t)), xcalloc((size_t)C, sizeof(int32_t)),
                 xcalloc((size_t)C, sizeof(int32_t)), xcalloc((size_t)C, sizeof(int32_t)), 0, 0, 0};
  int64_t *pos_verified = xcalloc((size_t)kmax, sizeof(int64_t)), *pos_accepted = xcalloc((size_t)kmax, sizeof(int64_t));
  int64_t drafts_verified = 0, drafts_accepted = 0;
  dvec itl = {0}, ttft = {0}, prefill = {0}, step_wall = {0}, step_eng = {0}, e2e = {0};
  dvec draft_ms = {0}, verify_ms = {0};
  double floor_bytes = 0, weight_b = 0, kv_b = 0, eng_step_ns_sum = 0, accepted = 0;
  int64_t steps = 0, seq_steps = 0, decode_tokens = 0;
  long maj0, min0, maj1, min1;
  double cpu0, cpu1;
  dsv4_status s;

  dsv4_engine_reset_timings(b->eng);
  rusage_now(&maj0, &min0, &cpu0);
  const int64_t t0 = now_ns();
  for (int32_t i = 0; i < C; i++)
    if ((s = dsv4_engine_seq_create(b->eng, &sq[i].id))) fail_engine(b, "dsv4_engine_seq_create", s);
  /* prefill: every sequence arrived at t0; one prefill call each, in order */
  for (int32_t i = 0; i < C; i++) {
    const int32_t *p = b->pr.ids[i % b->pr.n];
    b->sp.seeds = NULL;
    b->sp.seed = o->seed + (uint64_t)i;
    if ((s = dsv4_engine_prefill(b->eng, sq[i].id, p, b->pr.len, &b->sp, NULL, &sq[i].next)))
      fail_engine(b, "dsv4_engine_prefill", s);
    const int64_t t = now_ns();
    dsv4_engine_timings et;
    dsv4_engine_get_timings(b->eng, &et, sizeof et);
    sq[i].ttft_ns = t - t0;
    sq[i].hash = 0xCBF29CE484222325ull;
    fnv_token(&sq[i].hash, sq[i].next);
    sq[i].produced = 1;
    sq[i].length = b->pr.len;
    dvec_push(&ttft, (double)(t - t0) * 1e-6);
    dvec_push(&prefill, (double)et.last_prefill_ns * 1e-6);
    if (out_len == 1) sq[i].done_ns = t - t0;
  }
  /* the engine's timings of the prefill phase, then of the decode phase alone */
  json_t *t_prefill = record ? timings_json(b) : NULL;
  dsv4_engine_reset_timings(b->eng);
  /* decode: one step over every unfinished sequence */
  const int64_t td0 = now_ns();
  for (;;) {
    int32_t n = 0;
    for (int32_t i = 0; i < C; i++) {
      if (sq[i].produced >= out_len) continue;
      map[n] = i;
      ids[n] = sq[i].id;
      in[n] = sq[i].next;
      remaining[n] = out_len - sq[i].produced;
      b->seeds[n] = o->seed + (uint64_t)i;
      n++;
    }
    if (!n) break;
    if (!record && steps >= o->warmup) break;
    b->sp.seeds = b->seeds;
    const int64_t ts = now_ns();
    s = md->step(b, n, ids, in, remaining, &so);
    const int64_t te = now_ns();
    if (s) fail_engine(b, md->dspark ? "DSpark draft/verify" : "dsv4_engine_decode", s);
    /* floor of this step, from the lengths before it: plain, n tokens through
     * the backbone; DSpark, n x B block tokens through the draft head (plus
     * its window rings), then sum(1 + nd) tokens through the backbone */
    double kvs = 0, wb;
    if (md->dspark) {
      double tv = 0;
      for (int32_t j = 0; j < n; j++) {
        const int64_t len = sq[map[j]].length;
        tv += 1 + so.nd[j];
        kvs += kv_bytes_seq(&b->bm, len + 1 + so.nd[j]);
        kvs += (double)b->bm.n_mtp * (double)(len + 1 < b->bm.window ? len + 1 : b->bm.window) * (double)b->bm.win_rec;
      }
      wb = draft_weight_bytes(&b->bm, (double)n * b->block) + weight_bytes_step(&b->bm, tv);
      dvec_push(&draft_ms, (double)so.draft_ns * 1e-6);
      dvec_push(&verify_ms, (double)so.verify_ns * 1e-6);
    } else {
      for (int32_t j = 0; j < n; j++) kvs += kv_bytes_seq(&b->bm, sq[map[j]].length + 1);
      wb = weight_bytes_step(&b->bm, (double)n);
    }
    const double dt_ms = (double)(te - ts) * 1e-6;
    dvec_push(&step_wall, dt_ms);
    dvec_push(&step_eng, (double)so.step_ns * 1e-6);
    eng_step_ns_sum += (double)so.step_ns;
    weight_b += wb;
    kv_b += kvs;
    floor_bytes += wb + kvs;
    steps++;
    for (int32_t j = 0; j < n; j++) {
      seq_state *q = &sq[map[j]];
      const int32_t emitted = so.k[j] < 1 ? 1 : so.k[j] > kmax ? kmax : so.k[j];
      /* tokens past OUTPUT_LEN are not counted (a DSpark step may overshoot) */
      const int32_t kk = emitted > out_len - q->produced ? (int32_t)(out_len - q->produced) : emitted;
      /* token-attributed ITL: the step's wall time is shared by the tokens it
       * emitted for this sequence; each counts as one sample of dt / emitted */
      for (int32_t r = 0; r < kk; r++) {
        dvec_push(&itl, dt_ms / emitted);
        fnv_token(&q->hash, so.out[(size_t)j * (size_t)kmax + (size_t)r]);
      }
      q->produced += kk;
      q->length += emitted;
      q->next = so.out[(size_t)j * (size_t)kmax + (size_t)(emitted - 1)];
      decode_tokens += kk;
      accepted += emitted;
      /* position p (0-based) is reached when proposals 0..p-1 were accepted */
      for (int32_t p = 0; p < so.nd[j] && p <= so.acc[j] && p < kmax; p++) {
        pos_verified[p]++;
        pos_accepted[p] += p < so.acc[j];
      }
      drafts_verified += so.nd[j];
      drafts_accepted += so.acc[j];
      seq_steps++;
      if (q->produced >= out_len) q->done_ns = te - t0;
    }
  }
  const int64_t tend = now_ns();
  rusage_now(&maj1, &min1, &cpu1);
  for (int32_t i = 0; i < C; i++) {
    if ((s = dsv4_engine_seq_free(b->eng, sq[i].id))) fail_engine(b, "dsv4_engine_seq_free", s);
    dvec_push(&e2e, (double)sq[i].done_ns * 1e-6);
  }
  json_t *r = NULL;
  if (record) {
    const double wall_s = (double)(tend - t0) * 1e-9, dec_s = (double)(tend - td0) * 1e-9;
    const double out_tokens = (double)C * (double)out_len;
    r = json_object();
    json_object_set_new(r, "dspark", json_boolean(md->dspark));
    json_object_set_new(r, "mode", json_string(md->name));
    json_object_set_new(r, "concurrency", json_integer(C));
    json_object_set_new(r, "repeat", json_integer(rep));
    json_object_set_new(r, "prompt_tokens", json_integer(b->pr.len));
    json_object_set_new(r, "output_tokens_per_seq", json_integer(out_len));
    json_object_set_new(r, "output_tokens", json_integer((json_int_t)out_tokens));
    json_object_set_new(r, "decode_steps", json_integer(steps));
    json_object_set_new(r, "wall_s", json_real(wall_s));
    json_object_set_new(r, "decode_wall_s", json_real(dec_s));
    json_object_set_new(r, "output_tok_s", json_real(out_tokens / wall_s));
    json_object_set_new(r, "decode_tok_s", num_or_null(dec_s > 0 ? (double)decode_tokens / dec_s : NAN));
    json_object_set_new(r, "acceptance_length", num_or_null(seq_steps ? accepted / (double)seq_steps : NAN));
    json_object_set_new(r, "ttft_ms", stats_json(&ttft));
    json_object_set_new(r, "prefill_ms", stats_json(&prefill));
    json_object_set_new(r, "itl_ms", stats_json(&itl));
    json_object_set_new(r, "e2e_ms", stats_json(&e2e));
    json_object_set_new(r, "step_wall_ms", stats_json(&step_wall));
    json_object_set_new(r, "step_engine_ms", stats_json(&step_eng));
    json_object_set_new(r, "step_time_source", json_string(md->dspark ? "engine last_draft_ns + last_verify_ns"
                                                                       : "engine last_decode_ns"));
    if (md->dspark) {
      json_t *d = json_object();
      json_object_set_new(d, "block", json_integer(b->block));
      json_object_set_new(d, "policy", json_string(o->min_survival >= 0 ? "min_survival" : "fixed"));
      json_object_set_new(d, "draft_len", json_integer(o->draft_len > 0 && o->draft_len < b->block ? o->draft_len : b->block));
      json_object_set_new(d, "min_survival", num_or_null(o->min_survival >= 0 ? o->min_survival : NAN));
      json_object_set_new(d, "drafts_verified", json_integer(drafts_verified));
      json_object_set_new(d, "drafts_accepted", json_integer(drafts_accepted));
      json_object_set_new(d, "accept_rate", num_or_null(drafts_verified ? (double)drafts_accepted / (double)drafts_verified : NAN));
      json_t *pa = json_array();
      for (int32_t p = 0; p < b->block; p++)
        json_array_append_new(pa, num_or_null(pos_verified[p] ? (double)pos_accepted[p] / (double)pos_verified[p] : NAN));
      json_object_set_new(d, "accept_rate_by_position", pa); /* P(p accepted | 1..p-1 accepted) */
      json_object_set_new(d, "draft_ms", stats_json(&draft_ms));
      json_object_set_new(d, "verify_ms", stats_json(&verify_ms));
      json_object_set_new(r, "dspark_stats", d);
    }
    json_t *et = json_object();
    json_object_set_new(et, "prefill", t_prefill);
    json_object_set_new(et, "decode", timings_json(b));
    json_object_set_new(r, "engine_timings", et);
    json_t *rf = json_object();
    json_object_set_new(rf, "weight_bytes_per_step", num_or_null(steps ? weight_b / (double)steps : NAN));
    json_object_set_new(rf, "kv_bytes_per_step", num_or_null(steps ? kv_b / (double)steps : NAN));
    json_object_set_new(rf, "copy_gbs", num_or_null(b->copy_gbs > 0 ? b->copy_gbs : NAN));
    const double floor_ms = b->copy_gbs > 0 && steps ? floor_bytes / (b->copy_gbs * 1e9) * 1e3 / (double)steps : NAN;
    const double eng_ms = steps ? eng_step_ns_sum * 1e-6 / (double)steps : NAN;
    json_object_set_new(rf, "floor_ms_per_step", num_or_null(floor_ms));
    json_object_set_new(rf, "engine_ms_per_step", num_or_null(eng_ms));
    json_object_set_new(rf, "step_over_floor", num_or_null(eng_ms / floor_ms));
    json_object_set_new(rf, "effective_gbs",
                        num_or_null(eng_step_ns_sum > 0 ? floor_bytes / eng_step_ns_sum : NAN));
    json_object_set_new(rf, "fraction_of_copy_bw", num_or_null(floor_ms / eng_ms));
    json_object_set_new(r, "roofline", rf);
    json_t *pf = json_object();
    json_object_set_new(pf, "major", json_integer(maj1 - maj0));
    json_object_set_new(pf, "minor", json_integer(min1 - min0));
    json_object_set_new(r, "page_faults", pf);
    json_t *hs = json_array();
    for (int32_t i = 0; i < C; i++) {
      char hx[24];
      snprintf(hx, sizeof hx, "%016llx", (unsigned long long)sq[i].hash);
      json_array_append_new(hs, json_string(hx));
    }
    json_object_set_new(r, "output_fnv1a64", hs);
    json_object_set_new(r, "loadavg_1min_end", num_or_null(loadavg1()));
    /* CPU seconds of this process / (wall x engine threads): well below 1 when
     * other processes took the cores (spin-waiting threads count as busy) */
    json_object_set_new(r, "cpu_s", json_real(cpu1 - cpu0));
    json_object_set_new(r, "cpu_share", num_or_null((cpu1 - cpu0) / (wall_s * (b->ei.n_threads > 0 ? b->ei.n_threads : 1))));
  }
  free(itl.v);
  free(ttft.v);
  free(prefill.v);
  free(step_wall.v);
  free(step_eng.v);
  free(e2e.v);
  free(draft_ms.v);
  free(verify_ms.v);
  free(sq);
  free(ids);
  free(remaining);
  free(in);
  free(map);
  free(so.out);
  free(so.k);
  free(so.nd);
  free(so.acc);
  free(pos_verified);
  free(pos_accepted);
  return r;
}

/* ======================================================================
 * Baselines, report, plot
 * ====================================================================== */

static double jnum(json_t *o, const char *key) {
  json_t *v = json_object_get(o, key);
  return json_is_number(v) ? json_number_value(v) : NAN;
}

static double jnum2(json_t *o, const char *a, const char *k) { return jnum(json_object_get(o, a), k); }

/* Every run against the smallest-C run of its mode and repetition, and
 * DSpark runs against the no-DSpark run of equal C and repetition. */
static void add_baselines(json_t *runs) {
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
static json_t *consistency_json(json_t *runs, double temp) {
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
static int write_plot_data(const char *path, json_t *runs) {
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

static int run_gnuplot(const char *script, const char *data, const char *png, const char *title) {
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

static void print_summary(json_t *runs) {
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

/* ======================================================================
 * main
 * ====================================================================== */

static int32_t progress(const char *stage, int64_t done, int64_t total, void *user) {
  (void)done;
  (void)total;
  (void)user;
  static char last[32];
  if (strcmp(last, stage)) note("loading: %s", stage);
  snprintf(last, sizeof last, "%s", stage);
  return 0;
}

int main(int argc, char **argv) {
  bench B;
  memset(&B, 0, sizeof B);
  bench *b = &B;
  parse_args(argc, argv, &b->o);
  const opts *o = &b->o;
  for (int i = 0; i < o->n_conc; i++) b->max_c = o->conc[i] > b->max_c ? o->conc[i] : b->max_c;


  /* machine and copy bandwidth, before anything large is mapped */
  machine_probe(&b->m);
  b->m.load_start = loadavg1();
  const int bw_threads = o->threads > 0 ? o->threads : (int)(b->m.nproc > 0 ? b->m.nproc : 1);
  b->bw_bytes = o->bw_bytes ? o->bw_bytes : (2 * b->m.llc_bytes > (256 << 20) ? 2 * b->m.llc_bytes : (256 << 20));
  if (!o->no_bw) {
    note("copy bandwidth: %.0f MiB buffers, %d thread(s), best of %d", (double)b->bw_bytes / 1048576.0,
         bw_threads, o->bw_repeats);
    b->copy_gbs = copy_bandwidth(b->bw_bytes, bw_threads, o->bw_repeats);
    b->copy_gbs_1t = bw_threads > 1 ? copy_bandwidth(b->bw_bytes, 1, o->bw_repeats) : b->copy_gbs;
    note("copy bandwidth: %.2f GB/s (%d threads), %.2f GB/s (1 thread)", b->copy_gbs, bw_threads, b->copy_gbs_1t);
  }

  /* engine */
  dsv4_engine_params ep;
  dsv4_engine_params_init(&ep, sizeof ep);
  ep.flags = o->op_timings ? DSV4_ENGINE_F_OP_TIMINGS : 0;
  ep.backend = o->backend;
  ep.device = o->device;
  ep.max_sequences = b->max_c;
  ep.n_threads = o->threads;
  ep.prefill_chunk = o->chunk;
  /* room for a last verify of a full block past the output (block read from config.json) */
  char cfg_path[4096];
  snprintf(cfg_path, sizeof cfg_path, "%s/config.json", o->model);
  json_t *cfg = json_load_file(cfg_path, 0, NULL);
  const int32_t cfg_block = cfg ? json_int_at(cfg, "dspark_block_size", 8) : 8;
  json_decref(cfg);
  ep.max_context = o->prompt_len + o->output_len + (cfg_block > 0 ? cfg_block : 8) + 8;
  ep.progress_fn = o->quiet ? NULL : progress;
  const int64_t tc0 = now_ns();
  dsv4_status s = dsv4_engine_create_from_dir(o->model, &ep, &b->eng);
  if (s) die("cannot create the engine on %s: %s: %s", o->model, dsv4_status_string(s), dsv4_last_error());
  const double create_s = (double)(now_ns() - tc0) * 1e-9;
  b->model = dsv4_engine_model(b->eng);
  if (dsv4_model_get_info(b->model, &b->mi, sizeof b->mi)) die("dsv4_model_get_info failed");
  if ((s = dsv4_engine_get_info(b->eng, &b->ei, sizeof b->ei))) fail_engine(b, "dsv4_engine_get_info", s);
  bytes_model_build(b->model, o->model, &b->bm);

  /* DSpark modes: no-DSpark first, then DSpark when asked and possible */
  const mode *modes[2];
  int n_modes = 0;
  const char *why = NULL;
  const mode *dsp = o->dspark != DSPARK_OFF ? dspark_probe(b, &why) : NULL;
  if (!dsp && (o->dspark == DSPARK_ON || o->dspark == DSPARK_BOTH))
    die("--dspark %s: this engine cannot draft: %s", o->dspark == DSPARK_ON ? "on" : "both", why);
  if (!dsp && o->dspark == DSPARK_AUTO) note("DSpark skipped: %s", why);
  if (o->dspark != DSPARK_ON) modes[n_modes++] = &MODE_PLAIN;
  if (dsp) modes[n_modes++] = dsp;
  note("engine: backend %d, %d threads, %d sequences x %lld positions, created in %.1f s",
       (int)b->ei.backend, (int)b->ei.n_threads, (int)b->ei.max_sequences, (long long)b->ei.max_context,
       create_s);

  /* prompts */
  dsv4_tokenizer *tok = NULL;
  if ((s = dsv4_tokenizer_load(o->model, &tok)))
    die("cannot load %s/tokenizer.json: %s: %s", o->model, dsv4_status_string(s), dsv4_last_error());
  prompts_build(&b->pr, o, &b->mi, tok, b->max_c);
  dsv4_tokenizer_free(tok);
  dsv4_sampling_params_init(&b->sp, sizeof b->sp);
  b->sp.temperature = (float)o->temp;
  b->seeds = xcalloc((size_t)b->max_c, sizeof *b->seeds);

  /* page cache */
  double prefetch_s = 0;
  int64_t prefetched = 0;
  if (o->prefetch) {
    const int64_t t = now_ns();
    prefetched = prefetch_weights(o->model, dsp && o->dspark != DSPARK_OFF);
    prefetch_s = (double)(now_ns() - t) * 1e-9;
    note("prefetch: %.2f GB read in %.1f s", (double)prefetched * 1e-9, prefetch_s);
  }
  /* warm-up */
  double warm_s = 0;
  if (o->warmup > 0) {
    const int64_t t = now_ns();
    for (int i = 0; i < n_modes; i++) run_one(b, modes[i], o->conc[0], o->output_len, -1, 0);
    warm_s = (double)(now_ns() - t) * 1e-9;
    note("warm-up: %.1f s", warm_s);
  }

  /* runs: for each repetition, each C, each mode (no-DSpark first) */
  b->runs = json_array();
  for (int rep = 0; rep < o->repeat; rep++)
    for (int ci = 0; ci < o->n_conc; ci++)
      for (int mi = 0; mi < n_modes; mi++) {
        const int32_t C = o->conc[ci];
        note("run: dspark %s, C = %d, prompt %lld, output %lld", modes[mi]->name, (int)C,
             (long long)o->prompt_len, (long long)o->output_len);
        json_array_append_new(b->runs, run_one(b, modes[mi], C, o->output_len, rep, 1));
      }
  add_baselines(b->runs);

  /* report */
  json_t *root = json_object();
  json_object_set_new(root, "tool", json_string("dsv4-bench"));
  json_object_set_new(root, "schema_version", json_integer(SCHEMA_VERSION));
  json_object_set_new(root, "command", json_string(o->command));
  json_t *lib = json_object();
  json_object_set_new(lib, "version", json_string(dsv4_version_string()));
  json_object_set_new(lib, "build_info", json_string(dsv4_build_info()));
  json_object_set_new(lib, "dspark_api", json_true());
  json_object_set_new(lib, "dspark_runs", json_boolean(dsp != NULL));
  json_object_set_new(lib, "dspark_skipped_because", why && !dsp ? json_string(why) : json_null());
  json_object_set_new(root, "library", lib);
  json_t *mj = json_object();
  json_object_set_new(mj, "cpu_model", json_string(b->m.cpu_model));
  json_object_set_new(mj, "nproc", json_integer(b->m.nproc));
  json_object_set_new(mj, "mem_total_bytes", json_integer(b->m.mem_total));
  json_object_set_new(mj, "llc_bytes", json_integer(b->m.llc_bytes));
  json_object_set_new(mj, "kernel", json_string(b->m.kernel));
  json_object_set_new(mj, "loadavg_1min_start", num_or_null(b->m.load_start));
  json_object_set_new(mj, "loadavg_1min_end", num_or_null(loadavg1()));
  json_object_set_new(root, "machine", mj);
  json_t *bw = json_object();
  json_object_set_new(bw, "measured", json_boolean(!o->no_bw));
  json_object_set_new(bw, "method", json_string("memcpy between two fresh buffers of buffer_bytes "
                                                 "each, split over threads, best of repeats; "
                                                 "GB/s = 2 x buffer_bytes / time (read + write)"));
  json_object_set_new(bw, "buffer_bytes", json_integer(b->bw_bytes));
  json_object_set_new(bw, "repeats", json_integer(o->bw_repeats));
  json_object_set_new(bw, "threads", json_integer(bw_threads));
  json_object_set_new(bw, "copy_gbs", num_or_null(o->no_bw ? NAN : b->copy_gbs));
  json_object_set_new(bw, "copy_gbs_1thread", num_or_null(o->no_bw ? NAN : b->copy_gbs_1t));
  json_object_set_new(root, "bandwidth", bw);
  json_t *mo = json_object();
  json_object_set_new(mo, "dir", json_string(o->model));
  json_object_set_new(mo, "vocab_size", json_integer(b->mi.vocab_size));
  json_object_set_new(mo, "hidden_size", json_integer(b->mi.hidden_size));
  json_object_set_new(mo, "n_layers", json_integer(b->mi.n_layers));
  json_object_set_new(mo, "n_mtp_layers", json_integer(b->mi.n_mtp_layers));
  json_object_set_new(mo, "n_routed_experts", json_integer(b->mi.n_routed_experts));
  json_object_set_new(mo, "n_experts_per_tok", json_integer(b->mi.n_experts_per_tok));
  json_object_set_new(mo, "dspark_block_size", json_integer(b->mi.dspark_block_size));
  json_object_set_new(mo, "n_tensors", json_integer(b->mi.n_tensors));
  json_object_set_new(mo, "payload_bytes", json_integer(b->mi.payload_bytes));
  json_object_set_new(root, "model", mo);
  json_t *ej = json_object();
  json_object_set_new(ej, "backend", json_string(b->ei.backend == DSV4_BACKEND_CUDA ? "cuda" : "cpu"));
  json_object_set_new(ej, "n_threads", json_integer(b->ei.n_threads));
  json_object_set_new(ej, "max_sequences", json_integer(b->ei.max_sequences));
  json_object_set_new(ej, "max_context", json_integer(b->ei.max_context));
  json_object_set_new(ej, "prefill_chunk", json_integer(b->ei.prefill_chunk));
  json_object_set_new(ej, "kv_bytes", json_integer(b->ei.kv_bytes));
  json_object_set_new(ej, "prepared_weight_bytes", json_integer(b->ei.prepared_weight_bytes));
  json_object_set_new(ej, "mapped_bytes", json_integer(b->ei.mapped_bytes));
  json_object_set_new(ej, "create_s", json_real(create_s));
  json_object_set_new(ej, "op_timings", json_boolean(o->op_timings));
  json_object_set_new(root, "engine", ej);
  json_t *wl = json_object();
  json_t *cl = json_array();
  for (int i = 0; i < o->n_conc; i++) json_array_append_new(cl, json_integer(o->conc[i]));
  json_object_set_new(wl, "concurrency", cl);
  json_object_set_new(wl, "prompt_tokens", json_integer(o->prompt_len));
  json_object_set_new(wl, "output_tokens", json_integer(o->output_len));
  json_object_set_new(wl, "prompt_source", json_string(b->pr.source));
  json_object_set_new(wl, "prompt_file", o->prompt_file ? json_string(o->prompt_file) : json_null());
  json_object_set_new(wl, "prompt_file_tokens", json_integer(b->pr.file_tokens));
  json_object_set_new(wl, "random_id_pool", json_integer(b->pr.usable_ids));
  json_object_set_new(wl, "temperature", json_real(o->temp));
  json_object_set_new(wl, "seed", json_integer((json_int_t)o->seed));
  json_object_set_new(wl, "warmup_steps", json_integer(o->warmup));
  json_object_set_new(wl, "warmup_s", json_real(warm_s));
  json_object_set_new(wl, "repeat", json_integer(o->repeat));
  json_object_set_new(wl, "prefetch_bytes", json_integer(prefetched));
  json_object_set_new(wl, "prefetch_s", json_real(prefetch_s));
  json_object_set_new(root, "workload", wl);
  json_object_set_new(root, "bytes_model", bytes_model_json(&b->bm));
  json_object_set_new(root, "runs", b->runs);
  json_t *cons = consistency_json(b->runs, o->temp);
  if (json_is_false(json_object_get(cons, "agree")))
    fprintf(stderr, "dsv4-bench: WARNING: greedy outputs differ between runs (%zu mismatches; see "
                    "\"consistency\" in the report)\n", json_array_size(json_object_get(cons, "mismatches")));
  json_object_set_new(root, "consistency", cons);

  print_summary(b->runs);
  int rc = 0;
  const size_t flags = JSON_INDENT(2) | JSON_REAL_PRECISION(10);
  if (o->json_path && strcmp(o->json_path, "-")) {
    if (json_dump_file(root, o->json_path, flags)) die("cannot write %s", o->json_path);
  } else {
    json_dumpf(root, stdout, flags);
    fputc('\n', stdout);
  }
  /* plot */
  char dat[4096];
  const char *data_path = o->plot_data;
  if (o->plot_png && !data_path) {
    const size_t l = strlen(o->plot_png);
    const int png_ext = l > 4 && !strcmp(o->plot_png + l - 4, ".png");
    snprintf(dat, sizeof dat, "%.*s.dat", (int)(png_ext ? l - 4 : l), o->plot_png);
    data_path = dat;
  }
  if (data_path && write_plot_data(data_path, b->runs)) die("cannot write %s", data_path);
  if (o->plot_png) {
    char title[2048];
    snprintf(title, sizeof title, "dsv4-bench: %s, %d-layer model, prompt %lld, output %lld, %s, %d thread%s",
             b->m.cpu_model, (int)b->mi.n_layers, (long long)o->prompt_len, (long long)o->output_len,
             b->ei.backend == DSV4_BACKEND_CUDA ? "cuda" : "cpu", (int)b->ei.n_threads,
             b->ei.n_threads == 1 ? "" : "s");
    const int g = run_gnuplot(o->plot_script, data_path, o->plot_png, title);
    if (g) {
      fprintf(stderr, "dsv4-bench: gnuplot failed (status %d); data in %s\n", g, data_path);
      rc = 1;
    } else note("plot: %s", o->plot_png);
  }
  json_decref(root);
  for (int i = 0; i < b->pr.n; i++) free(b->pr.ids[i]);
  free(b->pr.ids);
  free(b->bm.layer);
  free(b->seeds);
  free(b->drafts);
  free(b->conf);
  free(b->next);
  free(b->o.command);
  dsv4_engine_free(b->eng);
  return rc;
}
