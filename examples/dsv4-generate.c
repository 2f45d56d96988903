/*
 * dsv4-generate: the main job. Load a checkpoint directory, prefill
 * BOS + encode(TEXT) (the reference's model input), then generate greedily
 * or with temperature sampling, streaming the text (or the ids) to stdout
 * as tokens arrive; stop at EOS or after N tokens. Public API only.
 *
 *   dsv4-generate [-m DIR] -p TEXT [-n N] [--temp T] [--seed S] [--chunk C] [--ids]
 *                 [--threads K] [--quiet] [-v] [--speculative [--draft N]]
 *                 [--backend cpu|cuda|auto] [--device D]
 *   dsv4-generate [-m DIR] -f FILE ...        (the prompt from a file; "-" = stdin)
 *   dsv4-generate [-m DIR] --chat [--thinking] [--system TEXT] [-n N] ...
 *                 (a conversation: user turns from stdin, one per line; generate_chat.c)
 *   mpirun -np N dsv4-generate [--tp T] [--pp P] ...
 *                 (one rank of a distributed engine per process, T x P = N; rank 0
 *                 prints; tools/util/tool_mpi.h)
 *
 * stderr: a progress line while loading, then a summary (prompt tokens,
 * prefill tok/s, decode tok/s, ms per step; with --speculative the mean
 * acceptance length and the acceptance of each draft position).
 */
#include <errno.h>
#include <float.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "dsv4/dsv4.h"
#include "generate_chat.h"
#include "tool_mpi.h"
#include "tool_util.h"

typedef struct opts {
  const char *model, *prompt, *file, *system;
  char *prompt_buf;           /* -f: the file's text */
  int chat, thinking;
  char model_buf[4096];
  long n;
  double temp;
  unsigned long long seed;
  long chunk, threads;
  int ids, quiet, verbose;
  int spec;   /* --speculative: DSpark draft + verify instead of one decode per token */
  long draft; /* --draft N: drafts verified per round (0: from the confidence logits) */
  int32_t backend; /* --backend: DSV4_BACKEND_* (default AUTO) */
  int32_t kv_format; /* --kv-format: DSV4_KV_FORMAT_* (default native) */
  long device;     /* --device D: CUDA device ordinal */
  long tp, pp;     /* --tp / --pp: ranks per stage, stages (0: DSV4_TP / DSV4_PP, else 1) */
} opts;

static void usage(FILE *f) {
  fprintf(f,
          "usage: dsv4-generate [-m DIR] -p TEXT [-n N] [--temp T] [--seed S] [--chunk C] [--ids]\n"
          "                     [--threads K] [--quiet] [-v] [--speculative [--draft N]]\n"
          "                     [--backend cpu|cuda|auto] [--device D]\n"
          "                     [--kv-format native|fp8_ds_mla]\n"
          "       mpirun -np N dsv4-generate [--tp T] [--pp P] ...   (T x P = N ranks)\n"
          "  -m DIR        checkpoint directory (official release format; default: the\n"
          "                default model installed with the tools)\n"
          "  -p TEXT       prompt; the model input is BOS + its encoding\n"
          "  -f FILE       the prompt is the file's text (\"-\": standard input)\n"
          "  --chat        interactive chat in the V4.1 chat format: one user turn per line of\n"
          "                standard input, the answer on stdout (-n tokens at most per answer)\n"
          "  --thinking    with --chat: thinking mode; the reasoning goes to stderr\n"
          "  --system TEXT with --chat: a system prompt\n"
          "  -n N          tokens to generate at most (default 64); stops at EOS\n"
          "  --temp T      temperature (default 0 = greedy)\n"
          "  --seed S      sampling seed (default 0)\n"
          "  --chunk C     prefill chunk in tokens (default: the library's)\n"
          "  --ids         print the generated token ids, space-separated, instead of text\n"
          "  --threads K   CPU threads (default: one per core)\n"
          "  --quiet       no progress line and no summary\n"
          "  -v, --verbose the library's INFO lines on stderr (the memory plan, and what each\n"
          "                rank allocated next to its planned figure)\n"
          "  --speculative draft with the model's DSpark head and verify (same output as\n"
          "                without at --temp 0; the same distribution otherwise)\n"
          "  --draft N     drafts verified per round, 1..block size (default: the block\n"
          "                size); 0: per round from the confidence logits\n"
          "  --backend B   cpu, cuda or auto (default auto: the GPU when the library has\n"
          "                its CUDA kernels and device D is usable, else the CPU)\n"
          "  --device D    CUDA device ordinal (default 0)\n"
          "  --kv-format F window KV records: native (default: the reference's MXFP8) or\n"
          "                fp8_ds_mla (V4's 584 B record, 64 RoPE dims kept in bf16; the logits\n"
          "                differ from the reference's: docs/attention.md \"KV formats\")\n"
          "  --tp T        under mpirun: tensor-parallel ranks per pipeline stage (default\n"
          "                $DSV4_TP, else 1)\n"
          "  --pp P        under mpirun: pipeline stages (default $DSV4_PP, else the job's\n"
          "                ranks / T); rank 0 prints the output and the summary, every rank\n"
          "                computes the same tokens (not with --chat or -f -)\n"
          "  --version     print the tool's and the library's version\n"
          "Exit status: 0 done, 1 the model failed to load or run, 2 bad usage.\n");
}

static int num(const char *s, double *out) {
  char *end;
  errno = 0;
  *out = strtod(s, &end);
  return s[0] && !*end && !errno;
}

/* The whole of FILE ("-": standard input) as a NUL-terminated string. */
static char *read_text(const char *path) {
  FILE *f = strcmp(path, "-") ? fopen(path, "rb") : stdin;
  if (!f) {
    fprintf(stderr, "dsv4-generate: cannot open %s: %s\n", path, strerror(errno));
    return NULL;
  }
  size_t n = 0, cap = 4096;
  char *b = malloc(cap);
  size_t k;
  while (b && (k = fread(b + n, 1, cap - n - 1, f)) > 0) {
    n += k;
    if (n + 1 == cap) {
      char *nb = realloc(b, cap *= 2);
      if (!nb) free(b);
      b = nb;
    }
  }
  const int bad = !b || ferror(f) || memchr(b, 0, n);
  if (f != stdin) fclose(f);
  if (bad) {
    fprintf(stderr, "dsv4-generate: cannot read %s (or it holds a NUL byte)\n", path);
    free(b);
    return NULL;
  }
  b[n] = 0;
  return b;
}

static int parse(int argc, char **argv, opts *o) {
  memset(o, 0, sizeof *o);
  o->n = 64;
  o->draft = -1;
  o->backend = DSV4_BACKEND_AUTO;
  for (int i = 1; i < argc; i++) {
    const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
    double x;
    if (!strcmp(a, "-h") || !strcmp(a, "--help")) {
      usage(stdout);
      exit(TOOL_EXIT_OK);
    } else if (!strcmp(a, "--version")) {
      tool_print_version("dsv4-generate");
      exit(TOOL_EXIT_OK);
    } else if (!strcmp(a, "--ids")) {
      o->ids = 1;
    } else if (!strcmp(a, "--quiet")) {
      o->quiet = 1;
    } else if (!strcmp(a, "-v") || !strcmp(a, "--verbose")) {
      o->verbose = 1;
    } else if (!strcmp(a, "--speculative")) {
      o->spec = 1;
    } else if (!strcmp(a, "--chat")) {
      o->chat = 1;
    } else if (!strcmp(a, "--thinking")) {
      o->thinking = 1;
    } else if (!v) {
      fprintf(stderr, "dsv4-generate: %s needs a value (or is unknown)\n", a);
      return 1;
    } else if (!strcmp(a, "--backend")) {
      if (!strcmp(v, "cpu")) o->backend = DSV4_BACKEND_CPU;
      else if (!strcmp(v, "cuda")) o->backend = DSV4_BACKEND_CUDA;
      else if (!strcmp(v, "auto")) o->backend = DSV4_BACKEND_AUTO;
      else {
        fprintf(stderr, "dsv4-generate: --backend wants cpu, cuda or auto\n");
        return 1;
      }
      i++;
    } else if (!strcmp(a, "--kv-format")) {
      if (!strcmp(v, "native")) o->kv_format = DSV4_KV_FORMAT_NATIVE;
      else if (!strcmp(v, "fp8_ds_mla")) o->kv_format = DSV4_KV_FORMAT_FP8_DS_MLA;
      else {
        fprintf(stderr, "dsv4-generate: --kv-format wants native or fp8_ds_mla\n");
        return 1;
      }
      i++;
    } else if (!strcmp(a, "-m")) {
      o->model = v, i++;
    } else if (!strcmp(a, "-p")) {
      o->prompt = v, i++;
    } else if (!strcmp(a, "-f")) {
      o->file = v, i++;
    } else if (!strcmp(a, "--system")) {
      o->system = v, i++;
    } else if (!strcmp(a, "--seed")) {
      char *end;
      errno = 0;
      o->seed = strtoull(v, &end, 10);
      if (!v[0] || *end || errno || v[0] == '-') {
        fprintf(stderr, "dsv4-generate: --seed wants an unsigned 64-bit integer\n");
        return 1;
      }
      i++;
    } else if (num(v, &x) && (!strcmp(a, "-n") || !strcmp(a, "--chunk") || !strcmp(a, "--threads") ||
                              !strcmp(a, "--temp") || !strcmp(a, "--draft") ||
                              !strcmp(a, "--device") || !strcmp(a, "--tp") ||
                              !strcmp(a, "--pp"))) {
      i++;
      if (!strcmp(a, "--temp")) {
        if (!(x >= 0.0 && x <= FLT_MAX)) { /* NaN fails both */
          fprintf(stderr, "dsv4-generate: --temp wants a finite number >= 0, not %s\n", v);
          return 1;
        }
        o->temp = x;
      } else if (x > 2147483647.0) {
        fprintf(stderr, "dsv4-generate: %s %s is too large (at most 2147483647)\n", a, v);
        return 1;
      } else if (!(x >= 0) || x != (double)(long)x) {
        fprintf(stderr, "dsv4-generate: %s wants a non-negative integer, not %s\n", a, v);
        return 1;
      } else if (!strcmp(a, "-n")) o->n = (long)x;
      else if (!strcmp(a, "--chunk")) o->chunk = (long)x;
      else if (!strcmp(a, "--draft")) o->draft = (long)x;
      else if (!strcmp(a, "--device")) o->device = (long)x;
      else if (!strcmp(a, "--tp")) o->tp = (long)x;
      else if (!strcmp(a, "--pp")) o->pp = (long)x;
      else o->threads = (long)x;
    } else {
      fprintf(stderr, "dsv4-generate: bad option or value: %s %s\n", a, v);
      return 1;
    }
  }
  if (!o->model) o->model = tool_default_model(o->model_buf, sizeof o->model_buf);
  if ((o->prompt != NULL) + (o->file != NULL) + o->chat > 1) {
    fprintf(stderr, "dsv4-generate: -p, -f and --chat exclude each other\n");
    return 1;
  }
  if (o->file && !(o->prompt = o->prompt_buf = read_text(o->file))) return 1;
  if (!o->model || (!o->prompt && !o->chat)) {
    usage(stderr);
    if (!o->model) fprintf(stderr, "dsv4-generate: -m DIR is required (no default model installed)\n");
    return 1;
  }
  return 0;
}

/* One line rewritten in place on a terminal; one line per stage otherwise. */
static int32_t progress(const char *stage, int64_t done, int64_t total, void *user) {
  (void)user;
  static char last[32];
  const int tty = isatty(2), ready = !strcmp(stage, "ready");
  if (tty) {
    fprintf(stderr, "\rdsv4-generate: loading %-8s %lld/%lld   ", stage, (long long)done,
            (long long)total);
    if (ready) fputc('\n', stderr);
  } else if (strcmp(last, stage)) {
    fprintf(stderr, ready ? "dsv4-generate: ready\n" : "dsv4-generate: loading %s\n", stage);
  }
  snprintf(last, sizeof last, "%s", stage);
  fflush(stderr);
  return 0;
}

static void info_line(int32_t level, const char *message, void *user) {
  (void)user;
  fprintf(stderr, "dsv4-generate: libdsv4 %s: %s\n",
          level == DSV4_LOG_ERROR ? "error" : level == DSV4_LOG_WARN ? "warning" : "info", message);
}

static int fail(const char *what, dsv4_status s, const char *msg) {
  fprintf(stderr, "\ndsv4-generate: %s: %s\n  %s\n", what, dsv4_status_string(s), msg);
  return 1;
}

static void summary(const dsv4_engine *e, size_t n_prompt, long n_gen) {
  dsv4_engine_timings t;
  dsv4_engine_info info;
  if (dsv4_engine_get_info(e, &info, sizeof info) == DSV4_OK)
    fprintf(stderr, "dsv4-generate: backend: %s\n",
            info.backend == DSV4_BACKEND_CUDA ? "cuda" : "cpu");
  if (dsv4_engine_get_timings(e, &t, sizeof t)) return;
  const double pf = (double)t.prefill_ns * 1e-9, dc = (double)t.decode_ns * 1e-9;
  fprintf(stderr, "dsv4-generate: prompt tokens: %zu, generated tokens: %ld\n", n_prompt, n_gen);
  fprintf(stderr, "dsv4-generate: prefill: %.1f tok/s (%.1f ms)\n",
          pf > 0 ? (double)t.prefill_tokens / pf : 0.0, pf * 1e3);
  if (t.decode_steps > 0) /* none with --speculative (spec_summary) */
    fprintf(stderr, "dsv4-generate: decode: %.1f tok/s, %.2f ms per step (%lld steps)\n",
            dc > 0 ? (double)t.decode_tokens / dc : 0.0,
            t.decode_steps ? dc * 1e3 / (double)t.decode_steps : 0.0, (long long)t.decode_steps);
}

/* Speculative decoding state: tokens verified but not yet printed, statistics. */
typedef struct spec_run {
  int32_t block, draft;
  int32_t pending[65], n_pending, i_pending;
  long rounds, emitted, verified[64], accepted[64];
  double seconds; /* in draft + verify */
} spec_run;

static double now_s(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

/* The token after `cur` (printed, not yet fed): one decode step, or with
 * --speculative the next of the tokens one draft + verify round gave. */
static dsv4_status advance(dsv4_engine *eng, int64_t seq, const dsv4_sampling_params *sp,
                           spec_run *r, int32_t *cur) {
  if (!r) {
    const int32_t in = *cur;
    return dsv4_engine_decode(eng, 1, &seq, &in, sp, NULL, cur);
  }
  if (r->i_pending == r->n_pending) { /* a round from the anchor *cur */
    int32_t d[64], acc = 0, nx = -1, n = r->draft;
    float conf[64];
    const double t0 = now_s();
    dsv4_status s = dsv4_engine_draft(eng, 1, &seq, cur, sp, d, conf);
    if (s) return s;
    if (n <= 0) { /* the documented policy: every draft that survives with chance >= 1/2 */
      n = dsv4_spec_draft_length(conf, r->block, 0.5f);
      n = n < 1 ? 1 : n;
    }
    if ((s = dsv4_engine_verify(eng, 1, &seq, cur, &n, d, sp, &acc, &nx))) return s;
    for (int32_t k = 0; k < n && k <= acc; k++) {
      r->verified[k]++;
      r->accepted[k] += k < acc;
    }
    r->rounds++;
    r->emitted += acc + 1;
    r->seconds += now_s() - t0;
    memcpy(r->pending, d, sizeof *d * (size_t)acc);
    r->pending[acc] = nx;
    r->n_pending = acc + 1;
    r->i_pending = 0;
  }
  *cur = r->pending[r->i_pending++];
  return DSV4_OK;
}

static void spec_summary(const spec_run *r) {
  fprintf(stderr, "dsv4-generate: speculative: %.1f tok/s, %ld rounds of draft + verify "
          "(%.2f ms each), mean acceptance length %.2f tokens per round (accepted drafts + 1)\n",
          r->seconds > 0 ? (double)r->emitted / r->seconds : 0.0, r->rounds,
          r->rounds ? r->seconds * 1e3 / (double)r->rounds : 0.0,
          r->rounds ? (double)r->emitted / (double)r->rounds : 0.0);
  fprintf(stderr, "dsv4-generate: acceptance per draft position (accepted / verified):");
  for (int32_t k = 0; k < r->block && r->verified[k] > 0; k++)
    fprintf(stderr, " %d: %ld/%ld (%.0f%%)", (int)k + 1, r->accepted[k], r->verified[k],
            100.0 * (double)r->accepted[k] / (double)r->verified[k]);
  fprintf(stderr, "\n");
}

int main(int argc, char **argv) {
  opts o;
  if (parse(argc, argv, &o)) return TOOL_EXIT_USAGE;
  tool_mpi mpi;
  int rc = tool_mpi_start("dsv4-generate", &argc, &argv, (int32_t)o.tp, (int32_t)o.pp, &mpi);
  if (rc) return rc;
  if (mpi.comm && (o.chat || (o.file && !strcmp(o.file, "-")))) {
    if (mpi.rank == 0)
      fprintf(stderr, "dsv4-generate: under mpirun the prompt comes from -p or -f FILE (every "
              "rank reads it; --chat and -f - read standard input, which only rank 0 has)\n");
    tool_mpi_end(&mpi);
    return TOOL_EXIT_USAGE;
  }
  if (mpi.rank != 0) { /* every rank computes the same tokens; rank 0 prints them */
    o.quiet = 1;
    if (!freopen("/dev/null", "w", stdout)) return TOOL_EXIT_FAILED;
  }
  dsv4_model *model = NULL;
  dsv4_tokenizer *tok = NULL;
  dsv4_tokenizer_stream *st = NULL;
  dsv4_engine *eng = NULL;
  int32_t *ids = NULL;
  rc = 1;
  if (!o.quiet) progress("model", 0, 1, NULL);
  dsv4_status s = dsv4_model_load(o.model, NULL, &model);
  if (s) {
    rc = fail("cannot load the model", s, dsv4_last_error());
    tool_mpi_end(&mpi);
    return rc;
  }
  dsv4_model_info mi;
  if ((s = dsv4_model_get_info(model, &mi, sizeof mi))) goto out_model;
  if ((s = dsv4_tokenizer_load(o.model, &tok))) {
    rc = fail("cannot load the tokenizer", s, dsv4_last_error());
    goto out;
  }
  if (o.chat) {
    chat_opts co = {o.system, o.thinking, o.n, o.temp, o.seed, o.threads, o.chunk, stdin};
    rc = generate_chat(model, tok, &co);
    goto out;
  }
  /* model input: BOS + encode(TEXT) (spec §5.0) */
  const size_t plen = strlen(o.prompt);
  size_t n_ids = 0;
  ids = malloc(sizeof *ids * (plen + 2));
  if (!ids) goto out;
  ids[0] = mi.bos_token_id;
  if ((s = dsv4_tokenizer_encode(tok, o.prompt, plen, ids + 1, plen + 1, &n_ids))) {
    rc = fail("cannot encode the prompt", s, dsv4_last_error());
    goto out;
  }
  const size_t n_prompt = n_ids + 1;

  dsv4_engine_params ep;
  if ((s = dsv4_engine_params_init(&ep, sizeof ep))) goto out_err;
  ep.max_sequences = 1;
  int64_t ctx = (int64_t)n_prompt + o.n + 1 + (o.spec ? mi.dspark_block_size : 0);
  ep.max_context = ctx < mi.max_position_embeddings ? ctx : mi.max_position_embeddings;
  ep.prefill_chunk = (int32_t)o.chunk;
  ep.n_threads = (int32_t)o.threads;
  ep.backend = o.backend;
  ep.kv_format = o.kv_format;
  ep.device = (int32_t)o.device;
  ep.progress_fn = o.quiet ? NULL : progress;
  tool_mpi_params(&mpi, &ep); /* one rank of a TP x PP engine under mpirun */
  if (o.verbose) { /* on every rank: each prints its own memory line */
    ep.log_fn = info_line;
    ep.log_level = DSV4_LOG_INFO;
  }
  if ((s = dsv4_engine_create(model, &ep, &eng))) {
    rc = fail("cannot create the engine", s, dsv4_last_error());
    goto out;
  }
  if ((s = dsv4_tokenizer_stream_create(tok, DSV4_DECODE_F_SKIP_SPECIAL, &st))) goto out_err;

  int64_t seq;
  if ((s = dsv4_engine_seq_create(eng, &seq))) goto out_err;
  spec_run sr;
  memset(&sr, 0, sizeof sr);
  sr.block = mi.dspark_block_size;
  sr.draft = o.draft < 0 || o.draft > sr.block ? sr.block : (int32_t)o.draft;
  if (o.spec && (mi.n_mtp_layers < 1 || sr.block < 1 || sr.block > 64)) {
    rc = fail("--speculative", DSV4_ERR_UNSUPPORTED, "the model has no DSpark draft head");
    goto out;
  }
  dsv4_sampling_params sp;
  if ((s = dsv4_sampling_params_init(&sp, sizeof sp))) goto out_err;
  sp.temperature = (float)o.temp;
  sp.seed = o.seed;
  int32_t next = -1;
  long n_gen = 0;
  /* the prompt is prefilled even with -n 0: it is checked and its rate reported */
  if ((s = dsv4_engine_prefill(eng, seq, ids, (int64_t)n_prompt, &sp, NULL, &next))) goto out_err;
  while (n_gen < o.n && next != mi.eos_token_id) {
    const char *text;
    size_t len;
    if (o.ids) {
      printf(n_gen ? " %d" : "%d", (int)next);
    } else {
      if ((s = dsv4_tokenizer_stream_push(st, next, &text, &len))) goto out_err;
      fwrite(text, 1, len, stdout);
    }
    fflush(stdout);
    if (++n_gen == o.n) break;
    if ((s = advance(eng, seq, &sp, o.spec ? &sr : NULL, &next))) {
      if (s != DSV4_ERR_CONTEXT_OVERFLOW) goto out_err;
      /* the model's maximum context is reached: a normal end, not a failure */
      if (!o.quiet)
        fprintf(stderr, "\ndsv4-generate: stopped after %ld tokens: the context holds at most %lld "
                        "positions\n", n_gen, (long long)ep.max_context);
      break;
    }
  }
  if (!o.ids) {
    const char *text;
    size_t len;
    if (!dsv4_tokenizer_stream_flush(st, &text, &len)) fwrite(text, 1, len, stdout);
  }
  putchar('\n');
  fflush(stdout);
  if (!o.quiet) summary(eng, n_prompt, n_gen);
  if (!o.quiet && o.spec) spec_summary(&sr);
  rc = 0;
  goto out;
out_err:
  rc = fail("generation failed", s, dsv4_last_error());
  goto out;
out_model:
  rc = fail("model info", s, dsv4_last_error());
out:
  free(o.prompt_buf);
  free(ids);
  dsv4_tokenizer_stream_free(st);
  dsv4_engine_free(eng);
  dsv4_tokenizer_free(tok);
  dsv4_model_free(model);
  tool_mpi_end(&mpi);
  return rc;
}
