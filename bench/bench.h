/* dsv4-bench: what the parts share (options, machine facts, the bytes model,
 * prompts, decode modes, the run state) and each part's entry points. The
 * tool is described at the top of dsv4-bench.c; definitions in bench/RESULTS.md. */
#ifndef DSV4_BENCH_H
#define DSV4_BENCH_H

#include <jansson.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "dsv4/dsv4.h"
#include "tool_mpi.h"

#define MAX_C 64
#define SCHEMA_VERSION 1

/* ---- small helpers (bench_util.c) ---- */

extern int g_quiet;
void note(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
void die(const char *fmt, ...) __attribute__((format(printf, 1, 2), noreturn));
/* die() with exit status 2 (bad usage; tools/util/tool_util.h) */
void die_usage(const char *fmt, ...) __attribute__((format(printf, 1, 2), noreturn));
int64_t now_ns(void);
void *xcalloc(size_t n, size_t size);
double quantile(double *v, size_t n, double q);
double mean_of(const double *v, size_t n);
/* Growable array of doubles (latency samples). */
typedef struct dvec {
  double *v;
  size_t n, cap;
} dvec;
void dvec_push(dvec *d, double x);
json_t *stats_json(dvec *d);
json_t *num_or_null(double x);
char *read_file(const char *path, size_t *len);

/* ---- options (bench_args.c) ---- */

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
  int32_t tp, pp;      /* under mpirun: TP ranks per stage, stages (0: DSV4_TP / DSV4_PP) */
  int32_t micro_batches; /* dsv4_engine_params.pp_micro_batches (0: the library's default) */
  int op_timings, warmup, repeat, prefetch, quiet;
  int64_t bw_bytes;
  int bw_repeats, no_bw;
  int32_t draft_len;   /* DSpark proposals verified per step; 0 = the block size */
  double min_survival; /* >= 0: draft length from the confidences instead */
  char *command; /* argv joined, for the report */
} opts;
void usage(FILE *f);
void parse_args(int argc, char **argv, opts *o);

/* ---- machine: CPU, memory, LLC, copy bandwidth (bench_machine.c) ---- */

typedef struct machine {
  char cpu_model[256], kernel[256];
  long nproc;
  int64_t mem_total, llc_bytes;
  double load_start; /* 1-minute load average when the tool started */
} machine;
void machine_probe(machine *m);
double copy_bandwidth(int64_t bytes, int threads, int reps);
void rusage_now(long *maj, long *min, double *cpu_s);
double loadavg1(void);

/* ---- model facts and the bytes-touched model of a decode step (bench_bytes.c) ---- */

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
void bytes_model_build(const dsv4_model *model, bytes_model *b);
double weight_bytes_step(const bytes_model *b, double t);
double draft_weight_bytes(const bytes_model *b, double t);
double kv_bytes_seq(const bytes_model *b, int64_t len);
json_t *bytes_model_json(const bytes_model *b);

/* ---- page-cache prefetch of the tensors decode touches (bench_prefetch.c) ---- */

int64_t prefetch_weights(const char *dir, const dsv4_model *model, int with_mtp);

/* ---- prompts (bench_prompts.c) ---- */

typedef struct prompts {
  int32_t **ids; /* [n][len] */
  int n;
  int64_t len;
  const char *source; /* "random" | "file" */
  int64_t file_tokens, usable_ids;
} prompts;
void prompts_build(prompts *p, const opts *o, const dsv4_model_info *mi, dsv4_tokenizer *tok,
                   int n);

/* ---- decode modes (bench_modes.c). A mode advances every sequence of the
 * batch by one step and says how many tokens each got (k >= 1) and which:
 * plain decode gives one, DSpark (draft + verify) up to block + 1. ---- */

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
  const tool_mpi *mpi;         /* the job: every rank's stage busy fraction is gathered */
};
extern const mode MODE_PLAIN;
const mode *dspark_probe(bench *b, const char **why);

/* ---- one run (bench_run.c) ---- */

void fail_engine(bench *b, const char *what, dsv4_status s);
json_t *run_one(bench *b, const mode *md, int32_t C, int64_t out_len, int rep, int record);

/* ---- baselines, report, plot (bench_report.c) ---- */

void add_baselines(json_t *runs);
json_t *consistency_json(json_t *runs, double temp);
int write_plot_data(const char *path, json_t *runs);
int run_gnuplot(const char *script, const char *data, const char *png, const char *title);
void print_summary(json_t *runs);

#endif
