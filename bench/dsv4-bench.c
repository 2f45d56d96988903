/*
 * dsv4-bench: serving benchmark of libdsv4 over a checkpoint directory
 * Public API only, plus jansson for config.json and the report.
 *
 *   dsv4-bench -m DIR [-c 1,2,4,8,16] [-p PROMPT_LEN] [-n OUTPUT_LEN]
 *              [--prompt-file FILE] [--dspark off|on|both|auto] [--backend cpu|cuda|auto]
 *              [--json FILE] [--plot PNG] [...]       (dsv4-bench --help lists everything)
 *   mpirun -np N dsv4-bench [--tp T] [--pp P] ...      (one rank of a distributed engine per
 *              process, T x P = N; rank 0 reports; tools/util/tool_mpi.h)
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
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "bench.h"
#include "tool_mpi.h"

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
  tool_mpi mpi;
  const int mrc = tool_mpi_start("dsv4-bench", &argc, &argv, b->o.tp, b->o.pp, &mpi);
  if (mrc) return mrc;
  if (mpi.rank != 0) { /* every rank runs the same calls; rank 0 reports */
    b->o.quiet = g_quiet = 1;
    b->o.json_path = b->o.plot_png = b->o.plot_data = NULL;
    if (!freopen("/dev/null", "w", stdout)) die("cannot reopen stdout");
  }
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
  if (dsv4_engine_params_init(&ep, sizeof ep)) die("dsv4_engine_params_init: %s", dsv4_last_error());
  ep.flags = o->op_timings ? DSV4_ENGINE_F_OP_TIMINGS : 0;
  ep.backend = o->backend;
  ep.device = o->device;
  ep.max_sequences = b->max_c;
  ep.n_threads = o->threads;
  ep.prefill_chunk = o->chunk;
  tool_mpi_params(&mpi, &ep);
  ep.pp_micro_batches = o->micro_batches;
  b->mpi = &mpi;
  /* room for a last verify of a full block past the output (the model's block size) */
  int32_t cfg_block = 8;
  dsv4_model_params mp;
  dsv4_model *cm = NULL;
  const dsv4_status ps = dsv4_model_params_init(&mp, sizeof mp);
  mp.flags = DSV4_MODEL_F_CONFIG_ONLY;
  if (ps == DSV4_OK && dsv4_model_load(o->model, &mp, &cm) == DSV4_OK) {
    dsv4_model_info ci;
    if (dsv4_model_get_info(cm, &ci, sizeof ci) == DSV4_OK) cfg_block = ci.dspark_block_size;
    dsv4_model_free(cm);
  }
  ep.max_context = o->prompt_len + o->output_len + (cfg_block > 0 ? cfg_block : 8) + 8;
  ep.progress_fn = o->quiet ? NULL : progress;
  const int64_t tc0 = now_ns();
  dsv4_status s = dsv4_engine_create_from_dir(o->model, &ep, &b->eng);
  if (s) die("cannot create the engine on %s: %s: %s", o->model, dsv4_status_string(s), dsv4_last_error());
  const double create_s = (double)(now_ns() - tc0) * 1e-9;
  b->model = dsv4_engine_model(b->eng);
  if (dsv4_model_get_info(b->model, &b->mi, sizeof b->mi)) die("dsv4_model_get_info failed");
  if ((s = dsv4_engine_get_info(b->eng, &b->ei, sizeof b->ei))) fail_engine(b, "dsv4_engine_get_info", s);
  bytes_model_build(b->model, &b->bm);

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
  if (dsv4_sampling_params_init(&b->sp, sizeof b->sp))
    die("dsv4_sampling_params_init: %s", dsv4_last_error());
  b->sp.temperature = (float)o->temp;
  b->seeds = xcalloc((size_t)b->max_c, sizeof *b->seeds);

  /* page cache */
  double prefetch_s = 0;
  int64_t prefetched = 0;
  if (o->prefetch) {
    const int64_t t = now_ns();
    prefetched = prefetch_weights(o->model, b->model, dsp && o->dspark != DSPARK_OFF);
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
  json_object_set_new(ej, "tp", json_integer(mpi.tp)); /* rank 0's figures above */
  json_object_set_new(ej, "pp", json_integer(mpi.pp));
  json_object_set_new(ej, "pp_micro_batches", json_integer(o->micro_batches));
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
  tool_mpi_end(&mpi);
  return rc;
}

