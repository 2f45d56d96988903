/*
 * dsv4-plan: the memory plan of a DeepSeek-V4.1-Flash deployment.
 *
 *   dsv4-plan [--config FILE | --model DIR] [topology options] [--json]
 *
 * Without arguments it plans the built-in release config on the field
 * report's topology (2 nodes x 8 A800-40GB, TP8 x PP2, Engram tables in host
 * pinned memory) and says where the report's figures differ from the spec's.
 * Prints, per GPU of each stage: weights by component (from the exact tensor
 * contract), workspace, graph reserve, communication buffers, the KV pool;
 * per host: Engram tables; KV bytes per token and per sequence, token
 * capacity and concurrency. `dsv4-plan --help` lists the options.
 *
 * With --engine (and --model DIR) it prints instead the memory plan of an
 * engine on that model (dsv4_engine_plan_query: the function the engine sizes
 * its pools with; --backend cpu (default) or cuda) for --max-sequences,
 * --max-context, --prefill-chunk and --kv-budget. Under mpirun with --tp /
 * --pp (TP x PP = the job's ranks) every rank plans its own part (its stage's
 * layers, its TP shard) and rank 0 prints every rank's figures:
 *   mpirun -np 4 dsv4-plan --engine --model DIR --tp 2 --pp 2
 *
 * Exit status: 0 the plan fits; 3 it does not fit (the figures are printed,
 * then the message naming what overflowed); 1 any other error; 2 bad usage.
 * Uses the public API (dsv4/dsv4.h) only. docs/planner.md explains the rules.
 */
#include <errno.h>
#include <inttypes.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "tool_mpi.h"

#include "dsv4/dsv4.h"
#include "tool_util.h"

#define GIB 1073741824.0

/* The field report's figures (seed article, §2 of its text). */
#define FR_DISK_GB 498.0
#define FR_RESIDENT_GB 510.0
#define FR_ENGRAM_GB 203.4
#define FR_WEIGHTS_GB 20.5
#define FR_GRAPH_GB 2.2
#define FR_COMM_GB 2.0
#define FR_KV_GB 4.0
#define FR_RECORD 584
#define FR_TOKENS 5650000.0
#define FR_CONCURRENCY 5.4



static const char *comp_key(int c) {
  static const char *const keys[DSV4_COMP_COUNT_V0_1] = {
      "routed_experts", "shared_experts", "attention", "engram_tables", "engram_proj",
      "dspark",         "vision",         "embed_head", "other"};
  return c >= 0 && c < DSV4_COMP_COUNT_V0_1 ? keys[c] : "unknown";
}

static void usage(FILE *f) {
  fprintf(f,
          "usage: dsv4-plan [options]\n"
          "  --config FILE        plan this config.json (default: the built-in V4.1 release config)\n"
          "  --model DIR          plan DIR/config.json (loaded config-only)\n"
          "  --nodes N            nodes (default 2)\n"
          "  --gpus-per-node N    GPUs per node (default 8)\n"
          "  --gpu-mem SIZE       memory per GPU (default 40GiB)\n"
          "  --gpu-reserved SIZE  per GPU, never planned: context, modules, slack (default 1GiB)\n"
          "  --host-mem SIZE      usable host memory per node (default 750GB)\n"
          "  --tp N               tensor-parallel ranks per stage (default 8)\n"
          "  --pp N               pipeline stages (default 2)\n"
          "  --stages L1,L2,...   first layer of stages 1.. (default: automatic)\n"
          "  --kv-format F        native (528 B window record) | fp8_ds_mla (584 B)\n"
          "  --engram P           host (pinned, default) | device\n"
          "  --max-context N      positions per sequence (default 1048576)\n"
          "  --context N          also report concurrency at this context\n"
          "  --prefill-chunk N    tokens per prefill step (default 2048)\n"
          "  --draft-tokens N     DSpark drafts verified per step (default 5)\n"
          "  --buckets B1,B2,...  CUDA-graph decode batch sizes (default 1,2,4,8,16,32)\n"
          "  --graph-bytes SIZE   reserve per captured graph (default 32MiB)\n"
          "  --nccl-bytes SIZE    NCCL buffers per GPU when TP > 1 (default 384MiB)\n"
          "  --page-entries N     KV records per page, 0 = no rounding (default 64)\n"
          "  --no-dspark          leave out the DSpark draft head\n"
          "  --no-vision          leave out the vision tower\n"
          "  --engine             the engine's plan on --model DIR instead (what\n"
          "                       dsv4_engine_create allocates), for --max-sequences N\n"
          "                       (default 8), --max-context, --prefill-chunk, --kv-budget SIZE,\n"
          "                       --backend cpu|cuda (default cpu), --kv-format; under mpirun\n"
          "                       with --tp / --pp (TP x PP = the job's ranks): every rank's plan\n"
          "  --json               JSON output\n"
          "  --version            print the tool's and the library's version\n"
          "SIZE: a byte count with an optional suffix: K, M, G, T (powers of 1024; also\n"
          "KiB, MiB, GiB, TiB) or KB, MB, GB, TB (powers of 1000).\n"
          "Exit status: 0 the plan fits, 1 an error, 2 bad usage, 3 the plan does not fit.\n");
}

static int parse_i64(const char *s, int64_t *out) {
  char *end;
  errno = 0;
  long long v = strtoll(s, &end, 10);
  if (errno || end == s || *end) return 0;
  *out = v;
  return 1;
}

static int parse_i32(const char *s, int32_t *out) {
  int64_t v;
  if (!parse_i64(s, &v) || v < INT32_MIN || v > INT32_MAX) return 0;
  *out = (int32_t)v;
  return 1;
}

static int parse_size(const char *s, int64_t *out) {
  char *end;
  errno = 0;
  double v = strtod(s, &end);
  if (errno || end == s || v < 0) return 0;
  double m = 1;
  if (!*end) m = 1;
  else if (!strcmp(end, "K") || !strcmp(end, "KiB")) m = 1024.0;
  else if (!strcmp(end, "M") || !strcmp(end, "MiB")) m = 1048576.0;
  else if (!strcmp(end, "G") || !strcmp(end, "GiB")) m = GIB;
  else if (!strcmp(end, "T") || !strcmp(end, "TiB")) m = GIB * 1024.0;
  else if (!strcmp(end, "KB")) m = 1e3;
  else if (!strcmp(end, "MB")) m = 1e6;
  else if (!strcmp(end, "GB")) m = 1e9;
  else if (!strcmp(end, "TB")) m = 1e12;
  else return 0;
  double b = v * m;
  if (!(b <= 9.0e18)) return 0; /* also NaN ("nan"), whose conversion below is undefined */
  *out = (int64_t)(b + 0.5);
  return 1;
}

/* "a,b,c" into out[0..cap); returns the count or -1. */
static int parse_list(const char *s, int32_t *out, int cap) {
  int n = 0;
  char buf[512];
  if (strlen(s) >= sizeof buf) return -1;
  strcpy(buf, s);
  for (char *tok = strtok(buf, ","); tok; tok = strtok(NULL, ",")) {
    if (n >= cap || !parse_i32(tok, &out[n])) return -1;
    n++;
  }
  return n;
}

static double gib(int64_t b) { return (double)b / GIB; }

/* ---- text output --------------------------------------------------------- */

static void row(const char *label, const dsv4_plan *pl, int64_t (*get)(const dsv4_plan_stage *, int),
                int arg) {
  printf("  %-30s", label);
  for (int s = 0; s < pl->n_stages; s++) printf(" %12.3f", gib(get(&pl->stages[s], arg)));
  printf("\n");
}

static int64_t g_weight(const dsv4_plan_stage *s, int c) { return s->weights[c]; }
static int64_t g_field(const dsv4_plan_stage *s, int off) {
  return *(const int64_t *)((const char *)s + off);
}

static void holds_text(const dsv4_plan_stage *s, char *buf, size_t cap) {
  buf[0] = '\0';
  const char *parts[5] = {"embed", "head + final norm", "DSpark mtp.*", "vision", "Engram layers"};
  for (int i = 0; i < 5; i++)
    if (s->holds & (1u << i)) {
      size_t len = strlen(buf);
      snprintf(buf + len, cap - len, "%s%s", len ? ", " : "", parts[i]);
    }
  if (!buf[0]) snprintf(buf, cap, "-");
}

static void print_text(const dsv4_plan *pl, const char *what, int builtin, dsv4_status st) {
  char a[40], b[40], c[40], d[40];
  printf("dsv4-plan: %s\n", what);
  printf("topology: %d node(s) x %d GPU(s) x %.2f GiB, TP%d x PP%d; host memory %.1f GB per node\n",
         pl->nodes, pl->gpus_per_node, gib(pl->gpu_mem_bytes), pl->tp, pl->n_stages,
         (double)pl->host_mem_bytes / 1e9);
  printf("KV records: window %s B (%s), compressed %s B, index keys %s B; Engram tables: %s\n",
         tool_grouped(pl->window_record_bytes, a, sizeof a),
         pl->kv_format == DSV4_KV_FORMAT_NATIVE ? "native MXFP8" : "fp8_ds_mla",
         tool_grouped(pl->compressed_record_bytes, b, sizeof b),
         tool_grouped(pl->index_key_record_bytes, c, sizeof c),
         pl->engram_placement == DSV4_ENGRAM_HOST ? "host pinned memory" : "GPU memory");
  printf("max context %s positions%s%s\n", tool_grouped(pl->max_context, a, sizeof a),
         pl->flags & DSV4_PLAN_F_NO_DSPARK ? "; without DSpark" : "",
         pl->flags & DSV4_PLAN_F_NO_VISION ? "; without vision" : "");

  printf("\ncheckpoint (tensor contract, spec §4.4): %s tensors, %s bytes (%.2f GB, %.2f GiB)\n",
         tool_grouped(pl->n_tensors, a, sizeof a), tool_grouped(pl->checkpoint_bytes, b, sizeof b),
         (double)pl->checkpoint_bytes / 1e9, gib(pl->checkpoint_bytes));
  for (int k = 0; k < DSV4_COMP_COUNT_V0_1; k++)
    printf("  %-30s %20s B %9.2f GB\n", tool_component_name(k), tool_grouped(pl->component_bytes[k], a, sizeof a),
           (double)pl->component_bytes[k] / 1e9);

  printf("\nstages (a boundary falls where no shared attention state crosses)\n");
  for (int s = 0; s < pl->n_stages; s++) {
    const dsv4_plan_stage *sg = &pl->stages[s];
    char h[128];
    holds_text(sg, h, sizeof h);
    printf("  stage %d: layers %d-%d, node%s %d", s, sg->first_layer,
           sg->first_layer + sg->n_layers - 1, sg->n_nodes > 1 ? "s" : "", sg->first_node);
    if (sg->n_nodes > 1) printf("-%d", sg->first_node + sg->n_nodes - 1);
    printf(", %d KV source(s); holds %s\n", sg->n_kv_sources, h);
  }

  printf("\n  %-30s", "per GPU (TP rank 0), GiB");
  for (int s = 0; s < pl->n_stages; s++) {
    char h[24];
    snprintf(h, sizeof h, "stage %d", s);
    printf(" %12s", h);
  }
  printf("\n");
  for (int k = 0; k < DSV4_COMP_COUNT_V0_1; k++) row(tool_component_name(k), pl, g_weight, k);
#define F(field) (int)offsetof(dsv4_plan_stage, field)
  row("= weights", pl, g_field, F(weights_total));
  row("wo_a as bf16 (load)", pl, g_field, F(load_extra));
  row("workspace (activations)", pl, g_field, F(workspace));
  row("CUDA-graph reserve", pl, g_field, F(graphs));
  row("NCCL + all-reduce staging", pl, g_field, F(comm_nccl));
  row("P2P payload buffers", pl, g_field, F(comm_p2p));
  row("reserved (context, slack)", pl, g_field, F(reserved));
  row("= used", pl, g_field, F(used));
  row("KV pool (the rest)", pl, g_field, F(kv_pool));
#undef F

  printf("\nKV cache (spec §5.8), per GPU of the stage (KV is replicated over TP)\n");
  for (int s = 0; s < pl->n_stages; s++) {
    const dsv4_plan_stage *sg = &pl->stages[s];
    printf("  stage %d: %.1f B per token; fixed per sequence %s B (window rings %s", s,
           sg->kv_bytes_per_token, tool_grouped(sg->kv_fixed_per_seq, a, sizeof a),
           tool_grouped(sg->kv_fixed_window, b, sizeof b));
    if (sg->kv_fixed_dspark) printf(" + DSpark rings %s", tool_grouped(sg->kv_fixed_dspark, c, sizeof c));
    if (sg->kv_fixed_compressor)
      printf(" + compressor state %s", tool_grouped(sg->kv_fixed_compressor, c, sizeof c));
    printf(")\n");
    printf("           one sequence at %s: %s B; token capacity %s; sequences at max context %s",
           tool_grouped(pl->max_context, a, sizeof a), tool_grouped(sg->seq_bytes_max_context, b, sizeof b),
           tool_grouped(sg->token_capacity, c, sizeof c), tool_grouped(sg->seqs_at_max_context, d, sizeof d));
    if (pl->context != pl->max_context)
      printf(", at %s: %s", tool_grouped(pl->context, b, sizeof b),
             tool_grouped(sg->seqs_at_context, c, sizeof c));
    printf("\n");
  }
  printf("  whole model: %.1f B per token of context, %s B fixed per sequence\n",
         pl->kv_bytes_per_token, tool_grouped(pl->kv_fixed_per_seq, a, sizeof a));

  printf("\nhosts\n");
  for (int s = 0; s < pl->n_stages; s++) {
    const dsv4_plan_stage *sg = &pl->stages[s];
    if (!sg->n_engram_layers) continue;
    printf("  stage %d: %d Engram layer(s), tables %s B (%.2f GB)", s, sg->n_engram_layers,
           tool_grouped(sg->engram_bytes, a, sizeof a), (double)sg->engram_bytes / 1e9);
    if (pl->engram_placement == DSV4_ENGRAM_HOST)
      printf(" in pinned memory on each of its %d node(s)\n", sg->n_nodes);
    else
      printf(" on the GPUs, rows split over TP\n");
  }
  printf("  most loaded node: %d with %.2f GB (Engram tables + pinned row staging) of %.1f GB\n",
         pl->host_node_max, (double)pl->host_bytes_max / 1e9, (double)pl->host_mem_bytes / 1e9);

  printf("\ncapacity\n");
  printf("  token capacity (the smallest stage's pool / its bytes per token): %s tokens\n",
         tool_grouped(pl->token_capacity, a, sizeof a));
  printf("  concurrency at %s positions: %s sequences (%.2f x)\n",
         tool_grouped(pl->max_context, a, sizeof a), tool_grouped(pl->seqs_at_max_context, b, sizeof b),
         pl->concurrency_at_max_context);
  if (pl->context != pl->max_context)
    printf("  concurrency at %s positions: %s sequences\n", tool_grouped(pl->context, a, sizeof a),
           tool_grouped(pl->seqs_at_context, b, sizeof b));
  if (st == DSV4_ERR_DOES_NOT_FIT) printf("  DOES NOT FIT (see the message below)\n");

  if (!builtin) return;
  /* The field report (2 x 8 A800-40GB, TP8 x PP2, Engram on the hosts) against the spec. */
  const dsv4_plan_stage *s0 = &pl->stages[0];
  int n_src = 0;
  for (int s = 0; s < pl->n_stages; s++) n_src += pl->stages[s].n_kv_sources;
  int64_t window = s0->n_layers > 0 ? s0->kv_fixed_window / (s0->n_layers * pl->window_record_bytes) : 0;
  printf("\nwhere the field report's figures differ (model-spec §4.4, §5.8, §11)\n");
  printf("  checkpoint: the report says %.0f GB on disk, ~%.0f GB resident with scales; the\n"
         "    contract payload is %s B = %.2f GB = %.2f GiB, scales included (the index's\n"
         "    total_size); 498 GB is not reproduced (spec §11.1).\n",
         FR_DISK_GB, FR_RESIDENT_GB, tool_grouped(pl->checkpoint_bytes, a, sizeof a),
         (double)pl->checkpoint_bytes / 1e9, gib(pl->checkpoint_bytes));
  printf("  Engram tables: the report says %.1f GB; the contract gives %s B = %.2f GB\n"
         "    (spec §11.2). The report pins them on both hosts; both Engram layers (1, 14)\n"
         "    are on stage 0, so only the stage-0 node needs them (node %d here).\n",
         FR_ENGRAM_GB, tool_grouped(pl->component_bytes[DSV4_COMP_ENGRAM_TABLES], a, sizeof a),
         (double)pl->component_bytes[DSV4_COMP_ENGRAM_TABLES] / 1e9, pl->host_node_max);
  printf("  KV record: the report sizes its pool in %d B fp8_ds_mla records, one per token.\n"
         "    584 B is DeepSeek-V4's window layout (per-64 scales, bf16 RoPE dims); V4.1's\n"
         "    own window record is 528 B (MXFP8), and the window is a ring of %s slots per\n"
         "    sequence and layer: a fixed %s B per sequence, not a per-token cost. Per token\n"
         "    only the %d KV-source layers store records: compressed %s B + index keys %s B,\n"
         "    %.0f B per token for the whole model (spec §5.8, §11.3).\n",
         FR_RECORD, tool_grouped(window, d, sizeof d), tool_grouped(pl->kv_fixed_per_seq, a, sizeof a), n_src,
         tool_grouped(pl->compressed_record_bytes, b, sizeof b),
         tool_grouped(pl->index_key_record_bytes, c, sizeof c), pl->kv_bytes_per_token);
  const dsv4_plan_stage *sl = &pl->stages[pl->n_stages - 1];
  printf("  budget per GPU: the report gives weights ~%.1f GB + graphs %.1f GB + communication\n"
         "    %.1f GB + KV %.1f GB = %.1f GB of 40 GB, leaving %.1f GB unexplained; this plan\n"
         "    (first / last stage): weights %.2f / %.2f GB, graphs %.2f / %.2f GB, NCCL + P2P\n"
         "    %.2f / %.2f GB, KV pool %.2f / %.2f GB, everything named.\n",
         FR_WEIGHTS_GB, FR_GRAPH_GB, FR_COMM_GB, FR_KV_GB,
         FR_WEIGHTS_GB + FR_GRAPH_GB + FR_COMM_GB + FR_KV_GB,
         40.0 - (FR_WEIGHTS_GB + FR_GRAPH_GB + FR_COMM_GB + FR_KV_GB),
         (double)s0->weights_total / 1e9, (double)sl->weights_total / 1e9, (double)s0->graphs / 1e9,
         (double)sl->graphs / 1e9, (double)(s0->comm_nccl + s0->comm_p2p) / 1e9,
         (double)(sl->comm_nccl + sl->comm_p2p) / 1e9, (double)s0->kv_pool / 1e9,
         (double)sl->kv_pool / 1e9);
  /* the report's 4.0 GB KV per GPU with V4.1's records */
  double kv = FR_KV_GB * 1e9, tok = 1e300, conc = 1e300;
  for (int s = 0; s < pl->n_stages; s++) {
    const dsv4_plan_stage *sg = &pl->stages[s];
    if (sg->kv_bytes_per_token > 0 && kv / sg->kv_bytes_per_token < tok)
      tok = kv / sg->kv_bytes_per_token;
    if (sg->seq_bytes_max_context > 0 && kv / (double)sg->seq_bytes_max_context < conc)
      conc = kv / (double)sg->seq_bytes_max_context;
  }
  printf("  capacity: the report says %.2f M tokens and %.1f x concurrency at 1 M context from\n"
         "    %.1f GB of KV per GPU; its own figures give %.2f M records of %d B per GPU. With\n"
         "    V4.1's records the same %.1f GB per GPU hold %.2f M tokens and %.2f sequences at\n"
         "    %s positions (the smallest stage).\n",
         FR_TOKENS / 1e6, FR_CONCURRENCY, FR_KV_GB, kv / FR_RECORD / 1e6, FR_RECORD, FR_KV_GB,
         tok / 1e6, conc, tool_grouped(pl->max_context, a, sizeof a));
}

/* ---- JSON output ---------------------------------------------------------- */

static void json_comp(const char *key, const int64_t *v) {
  printf("\"%s\": {", key);
  for (int k = 0; k < DSV4_COMP_COUNT_V0_1; k++)
    printf("%s\"%s\": %" PRId64, k ? ", " : "", comp_key(k), v[k]);
  printf("}");
}

static void json_str(const char *s) {
  putchar('"');
  for (; *s; s++) {
    unsigned char ch = (unsigned char)*s;
    if (ch == '"' || ch == '\\') printf("\\%c", ch);
    else if (ch < 0x20) printf("\\u%04x", ch);
    else putchar(ch);
  }
  putchar('"');
}

static void print_json(const dsv4_plan *pl, const char *what, dsv4_status st, const char *msg) {
  printf("{\n  \"source\": ");
  json_str(what);
  printf(",\n  \"fits\": %s,\n", st == DSV4_OK ? "true" : "false");
  if (st != DSV4_OK) {
    printf("  \"message\": ");
    json_str(msg);
    printf(",\n");
  }
  printf("  \"topology\": {\"nodes\": %d, \"gpus_per_node\": %d, \"tp\": %d, \"pp\": %d, "
         "\"gpu_mem_bytes\": %" PRId64 ", \"host_mem_bytes\": %" PRId64 ", \"kv_format\": \"%s\", "
         "\"engram\": \"%s\", \"max_context\": %" PRId64 ", \"context\": %" PRId64
         ", \"dspark\": %s, \"vision\": %s},\n",
         pl->nodes, pl->gpus_per_node, pl->tp, pl->n_stages, pl->gpu_mem_bytes, pl->host_mem_bytes,
         pl->kv_format == DSV4_KV_FORMAT_NATIVE ? "native" : "fp8_ds_mla",
         pl->engram_placement == DSV4_ENGRAM_HOST ? "host" : "device", pl->max_context, pl->context,
         pl->flags & DSV4_PLAN_F_NO_DSPARK ? "false" : "true",
         pl->flags & DSV4_PLAN_F_NO_VISION ? "false" : "true");
  printf("  \"checkpoint\": {\"tensors\": %" PRId64 ", \"bytes\": %" PRId64 ", ", pl->n_tensors,
         pl->checkpoint_bytes);
  json_comp("components", pl->component_bytes);
  printf("},\n");
  printf("  \"kv\": {\"window_record\": %" PRId64 ", \"compressed_record\": %" PRId64
         ", \"index_key_record\": %" PRId64 ", \"bytes_per_token\": %.3f, \"fixed_per_seq\": %" PRId64
         "},\n",
         pl->window_record_bytes, pl->compressed_record_bytes, pl->index_key_record_bytes,
         pl->kv_bytes_per_token, pl->kv_fixed_per_seq);
  printf("  \"stages\": [\n");
  for (int s = 0; s < pl->n_stages; s++) {
    const dsv4_plan_stage *g = &pl->stages[s];
    printf("    {\"stage\": %d, \"first_layer\": %d, \"n_layers\": %d, \"first_node\": %d, "
           "\"n_nodes\": %d, \"holds\": %u, \"n_engram_layers\": %d, \"n_kv_sources\": %d,\n      ",
           s, g->first_layer, g->n_layers, g->first_node, g->n_nodes, (unsigned)g->holds,
           g->n_engram_layers, g->n_kv_sources);
    json_comp("gpu_weights", g->weights);
    printf(",\n      ");
    json_comp("gpu_replicated", g->replicated);
    printf(",\n      ");
    json_comp("owned", g->owned);
    printf(",\n      \"gpu\": {\"weights\": %" PRId64 ", \"load_extra\": %" PRId64
           ", \"workspace\": %" PRId64 ", \"graphs\": %" PRId64 ", \"comm_nccl\": %" PRId64
           ", \"comm_p2p\": %" PRId64 ", \"reserved\": %" PRId64 ", \"used\": %" PRId64
           ", \"kv_pool\": %" PRId64 "},\n",
           g->weights_total, g->load_extra, g->workspace, g->graphs, g->comm_nccl, g->comm_p2p,
           g->reserved, g->used, g->kv_pool);
    printf("      \"engram_bytes\": %" PRId64 ", \"engram_host_per_node\": %" PRId64 ",\n",
           g->engram_bytes, g->engram_host_per_node);
    printf("      \"kv\": {\"bytes_per_token\": %.3f, \"fixed_window\": %" PRId64
           ", \"fixed_dspark\": %" PRId64 ", \"fixed_compressor\": %" PRId64
           ", \"fixed_per_seq\": %" PRId64 ", \"seq_bytes_max_context\": %" PRId64
           ", \"seq_bytes_context\": %" PRId64 ", \"token_capacity\": %" PRId64
           ", \"seqs_at_context\": %" PRId64 ", \"seqs_at_max_context\": %" PRId64 "}}%s\n",
           g->kv_bytes_per_token, g->kv_fixed_window, g->kv_fixed_dspark, g->kv_fixed_compressor,
           g->kv_fixed_per_seq, g->seq_bytes_max_context, g->seq_bytes_context, g->token_capacity,
           g->seqs_at_context, g->seqs_at_max_context, s + 1 < pl->n_stages ? "," : "");
  }
  printf("  ],\n");
  printf("  \"host\": {\"max_bytes\": %" PRId64 ", \"max_node\": %d},\n", pl->host_bytes_max,
         pl->host_node_max);
  printf("  \"capacity\": {\"token_capacity\": %" PRId64 ", \"seqs_at_context\": %" PRId64
         ", \"seqs_at_max_context\": %" PRId64 ", \"concurrency_at_max_context\": %.4f}\n}\n",
         pl->token_capacity, pl->seqs_at_context, pl->seqs_at_max_context,
         pl->concurrency_at_max_context);
}

/* Every rank's plan of a distributed engine (collective over the job: each rank queries its
 * own part, rank 0 prints them all). st: this rank's query status. */
enum { RF_STATUS, RF_KV, RF_PAGES, RF_PER_SEQ, RF_WS, RF_PREP, RF_COMM, RF_MAPPED, RF_CREATE, RF_N };

static int ranks_plan(const tool_mpi *mpi, const char *dir, dsv4_status st,
                      const dsv4_engine_info *in, int json) {
  const double mine[RF_N] = {(double)st, (double)in->kv_bytes, (double)in->kv_pages_total,
                             (double)in->kv_pages_per_sequence, (double)in->workspace_bytes,
                             (double)in->prepared_weight_bytes, (double)in->comm_bytes,
                             (double)in->mapped_bytes, (double)in->create_bytes};
  double *all = malloc(sizeof(double) * RF_N * (size_t)mpi->world);
  if (!all) {
    fprintf(stderr, "dsv4-plan: out of memory\n");
    return 1;
  }
  for (int f = 0; f < RF_N; f++) tool_mpi_allgather_f64(mpi, mine[f], all + (size_t)f * mpi->world);
  int rc = 0;
  for (int r = 0; r < mpi->world; r++)
    if (all[r] != 0) rc = all[r] == DSV4_ERR_DOES_NOT_FIT ? 3 : 1;
  if (mpi->rank == 0) {
    if (!json)
      printf("engine on %s, TP %d x PP %d: the plan of every rank (rank r: stage r / TP, TP "
             "rank r %% TP)\n", dir, (int)mpi->tp, (int)mpi->pp);
    else
      printf("{\"ranks\": [");
    for (int r = 0; r < mpi->world; r++) {
#define F(k) ((long long)all[(size_t)(k) * mpi->world + r])
      if (json) {
        printf("%s{\"rank\": %d, \"stage\": %d, \"tp_rank\": %d, \"status\": %lld, "
               "\"kv_bytes\": %lld, \"kv_pages_total\": %lld, \"kv_pages_per_sequence\": %lld, "
               "\"workspace_bytes\": %lld, \"prepared_weight_bytes\": %lld, \"comm_bytes\": %lld, "
               "\"mapped_bytes\": %lld, \"create_bytes\": %lld}", r ? ", " : "", r,
               r / (int)mpi->tp, r % (int)mpi->tp, F(RF_STATUS), F(RF_KV), F(RF_PAGES),
               F(RF_PER_SEQ), F(RF_WS), F(RF_PREP), F(RF_COMM), F(RF_MAPPED), F(RF_CREATE));
      } else if (F(RF_STATUS)) {
        printf("  rank %d (stage %d, TP rank %d): %s (its error is on its stderr)\n", r,
               r / (int)mpi->tp, r % (int)mpi->tp, dsv4_status_string((dsv4_status)F(RF_STATUS)));
      } else {
        printf("  rank %d (stage %d, TP rank %d): allocates %lld B at create = KV %lld (%lld "
               "pages, %lld per sequence at max context) + workspace %lld + prepared weights "
               "%lld + payload buffer %lld; checkpoint bytes of its layers and shard %lld\n", r,
               r / (int)mpi->tp, r % (int)mpi->tp, F(RF_CREATE), F(RF_KV), F(RF_PAGES),
               F(RF_PER_SEQ), F(RF_WS), F(RF_PREP), F(RF_COMM), F(RF_MAPPED));
      }
#undef F
    }
    if (json) printf("]}\n");
  }
  free(all);
  return rc;
}

/* --engine: the engine's own plan (the figures dsv4_engine_get_info reports after create);
 * under mpirun every rank's. */
static int engine_plan(const char *dir, int32_t max_seqs, int64_t max_ctx, int32_t chunk,
                       int64_t budget, int32_t backend, int32_t kv_format, const tool_mpi *mpi,
                       int json) {
  dsv4_model_params mp;
  dsv4_model *m = NULL;
  dsv4_status st = dsv4_model_params_init(&mp, sizeof mp);
  mp.flags = DSV4_MODEL_F_CONFIG_ONLY;
  if (st == DSV4_OK) st = dsv4_model_load(dir, &mp, &m);
  if (st != DSV4_OK) {
    fprintf(stderr, "dsv4-plan: %s: %s\n", dsv4_status_string(st), dsv4_last_error());
    if (mpi->comm) { /* the other ranks wait for this one's figures */
      dsv4_engine_info none;
      memset(&none, 0, sizeof none);
      ranks_plan(mpi, dir, st, &none, json);
    }
    return 1;
  }
  dsv4_engine_params ep;
  if ((st = dsv4_engine_params_init(&ep, sizeof ep)) != DSV4_OK) {
    dsv4_model_free(m);
    fprintf(stderr, "dsv4-plan: %s: %s\n", dsv4_status_string(st), dsv4_last_error());
    return 1;
  }
  if (max_seqs > 0) ep.max_sequences = max_seqs;
  if (max_ctx > 0) ep.max_context = max_ctx;
  if (chunk > 0) ep.prefill_chunk = chunk;
  ep.kv_budget_bytes = budget;
  ep.backend = backend;
  ep.kv_format = kv_format;
  tool_mpi_params(mpi, &ep);
  dsv4_engine_info in;
  memset(&in, 0, sizeof in);
  st = dsv4_engine_plan_query(m, &ep, &in, sizeof in);
  dsv4_model_free(m);
  if (st != DSV4_OK)
    fprintf(stderr, "dsv4-plan: %s%s: %s\n", mpi->comm ? "this rank: " : "",
            dsv4_status_string(st), dsv4_last_error());
  if (mpi->comm) return ranks_plan(mpi, dir, st, &in, json);
  if (st != DSV4_OK) return st == DSV4_ERR_DOES_NOT_FIT ? 3 : 1;
  if (json) {
    printf("{\"engine\": {\"max_sequences\": %d, \"max_context\": %lld, \"prefill_chunk\": %d, "
           "\"kv_page_bytes\": %lld, \"kv_pages_total\": %lld, \"kv_pages_per_sequence\": %lld, "
           "\"kv_bytes\": %lld, \"kv_bytes_per_token\": %lld, \"workspace_bytes\": %lld, "
           "\"prepared_weight_bytes\": %lld, \"kv_format\": \"%s\"}}\n",
           (int)in.max_sequences, (long long)in.max_context, (int)in.prefill_chunk,
           (long long)in.kv_page_bytes, (long long)in.kv_pages_total,
           (long long)in.kv_pages_per_sequence, (long long)in.kv_bytes,
           (long long)in.kv_bytes_per_token, (long long)in.workspace_bytes,
           (long long)in.prepared_weight_bytes,
           in.kv_format == DSV4_KV_FORMAT_NATIVE ? "native" : "fp8_ds_mla");
    return 0;
  }
  printf("%s engine on %s: %d sequences x %lld positions, prefill chunk %d\n",
         backend == DSV4_BACKEND_CUDA ? "CUDA" : "CPU", dir, (int)in.max_sequences,
         (long long)in.max_context, (int)in.prefill_chunk);
  printf("  KV window records: %s\n", in.kv_format == DSV4_KV_FORMAT_NATIVE
                                        ? "native MXFP8" : "fp8_ds_mla");
  printf("  KV pool: %lld pages x %lld B (%lld pages per sequence at max context)\n",
         (long long)in.kv_pages_total, (long long)in.kv_page_bytes,
         (long long)in.kv_pages_per_sequence);
  printf("  KV bytes (pool + sequence slots): %lld\n", (long long)in.kv_bytes);
  printf("  KV record bytes per position: %lld\n", (long long)in.kv_bytes_per_token);
  printf("  workspace bytes: %lld\n", (long long)in.workspace_bytes);
  printf("  prepared weight bytes: %lld\n", (long long)in.prepared_weight_bytes);
  return 0;
}

int main(int argc, char **argv) {
  dsv4_plan_params p;
  if (dsv4_plan_params_init(&p, sizeof p) != DSV4_OK) {
    fprintf(stderr, "dsv4-plan: %s\n", dsv4_last_error());
    return 1;
  }
  const char *config = NULL, *model_dir = NULL;
  int json = 0, engine = 0;
  int32_t e_seqs = 0, e_backend = DSV4_BACKEND_CPU;
  int64_t e_budget = 0;
  for (int i = 1; i < argc; i++) {
    const char *o = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
    int ok = 1, takes = 1;
    if (!strcmp(o, "--help") || !strcmp(o, "-h")) {
      usage(stdout);
      return TOOL_EXIT_OK;
    } else if (!strcmp(o, "--version")) {
      tool_print_version("dsv4-plan");
      return TOOL_EXIT_OK;
    } else if (!strcmp(o, "--json")) {
      json = 1;
      takes = 0;
    } else if (!strcmp(o, "--engine")) {
      engine = 1;
      takes = 0;
    } else if (!strcmp(o, "--no-dspark")) {
      p.flags |= DSV4_PLAN_F_NO_DSPARK;
      takes = 0;
    } else if (!strcmp(o, "--no-vision")) {
      p.flags |= DSV4_PLAN_F_NO_VISION;
      takes = 0;
    } else if (!v) {
      ok = 0;
    } else if (!strcmp(o, "--config")) config = v;
    else if (!strcmp(o, "--model")) model_dir = v;
    else if (!strcmp(o, "--nodes")) ok = parse_i32(v, &p.nodes);
    else if (!strcmp(o, "--gpus-per-node")) ok = parse_i32(v, &p.gpus_per_node);
    else if (!strcmp(o, "--gpu-mem")) ok = parse_size(v, &p.gpu_mem_bytes);
    else if (!strcmp(o, "--gpu-reserved")) ok = parse_size(v, &p.gpu_reserved_bytes);
    else if (!strcmp(o, "--host-mem")) ok = parse_size(v, &p.host_mem_bytes);
    else if (!strcmp(o, "--tp")) ok = parse_i32(v, &p.tp);
    else if (!strcmp(o, "--pp")) ok = parse_i32(v, &p.pp);
    else if (!strcmp(o, "--stages")) {
      int32_t l[DSV4_PLAN_MAX_STAGES];
      int n = parse_list(v, l, DSV4_PLAN_MAX_STAGES - 1);
      ok = n > 0;
      memset(p.stage_first_layer, 0, sizeof p.stage_first_layer);
      for (int k = 0; k < n; k++) p.stage_first_layer[k + 1] = l[k];
    } else if (!strcmp(o, "--kv-format")) {
      if (!strcmp(v, "native") || !strcmp(v, "528")) p.kv_format = DSV4_KV_FORMAT_NATIVE;
      else if (!strcmp(v, "fp8_ds_mla") || !strcmp(v, "584")) p.kv_format = DSV4_KV_FORMAT_FP8_DS_MLA;
      else ok = 0;
    } else if (!strcmp(o, "--engram")) {
      if (!strcmp(v, "host")) p.engram_placement = DSV4_ENGRAM_HOST;
      else if (!strcmp(v, "device")) p.engram_placement = DSV4_ENGRAM_DEVICE;
      else ok = 0;
    } else if (!strcmp(o, "--max-context")) ok = parse_i64(v, &p.max_context);
    else if (!strcmp(o, "--context")) ok = parse_i64(v, &p.context);
    else if (!strcmp(o, "--prefill-chunk")) ok = parse_i32(v, &p.prefill_chunk);
    else if (!strcmp(o, "--draft-tokens")) ok = parse_i32(v, &p.draft_tokens);
    else if (!strcmp(o, "--buckets")) {
      int n = parse_list(v, p.buckets, DSV4_PLAN_MAX_BUCKETS);
      ok = n > 0;
      p.n_buckets = n;
    } else if (!strcmp(o, "--graph-bytes")) ok = parse_size(v, &p.graph_bytes);
    else if (!strcmp(o, "--nccl-bytes")) ok = parse_size(v, &p.nccl_bytes);
    else if (!strcmp(o, "--page-entries")) ok = parse_i32(v, &p.kv_page_entries);
    else if (!strcmp(o, "--max-sequences")) ok = parse_i32(v, &e_seqs);
    else if (!strcmp(o, "--kv-budget")) ok = parse_size(v, &e_budget);
    else if (!strcmp(o, "--backend")) {
      if (!strcmp(v, "cpu")) e_backend = DSV4_BACKEND_CPU;
      else if (!strcmp(v, "cuda")) e_backend = DSV4_BACKEND_CUDA;
      else ok = 0;
    }
    else {
      fprintf(stderr, "dsv4-plan: unknown option %s\n", o);
      usage(stderr);
      return 2;
    }
    if (!ok) {
      fprintf(stderr, "dsv4-plan: bad or missing value for %s\n", o);
      usage(stderr);
      return 2;
    }
    i += takes;
  }
  if (config && model_dir) {
    fprintf(stderr, "dsv4-plan: give --config or --model, not both\n");
    return 2;
  }
  if (engine) {
    if (!model_dir) {
      fprintf(stderr, "dsv4-plan: --engine needs --model DIR\n");
      return 2;
    }
    /* --max-context / --prefill-chunk / --tp / --pp: only when given (p holds the
     * deployment's defaults) */
    int64_t ctx = 0;
    int32_t chunk = 0, tp = 0, pp = 0;
    for (int i = 1; i + 1 < argc; i++) {
      if (!strcmp(argv[i], "--max-context")) ctx = p.max_context;
      if (!strcmp(argv[i], "--prefill-chunk")) chunk = p.prefill_chunk;
      if (!strcmp(argv[i], "--tp")) tp = p.tp;
      if (!strcmp(argv[i], "--pp")) pp = p.pp;
    }
    tool_mpi mpi;
    int rc = tool_mpi_start("dsv4-plan", &argc, &argv, tp, pp, &mpi);
    if (rc) return rc;
    rc = engine_plan(model_dir, e_seqs, ctx, chunk, e_budget, e_backend, p.kv_format, &mpi, json);
    tool_mpi_end(&mpi);
    return rc;
  }

  dsv4_plan plan;
  dsv4_status st;
  char what[1024];
  char msg[8192] = "";
  if (model_dir) {
    dsv4_model_params mp;
    dsv4_model *m = NULL;
    st = dsv4_model_params_init(&mp, sizeof mp);
    mp.flags = DSV4_MODEL_F_CONFIG_ONLY;
    if (st == DSV4_OK) st = dsv4_model_load(model_dir, &mp, &m);
    if (st != DSV4_OK) {
      fprintf(stderr, "dsv4-plan: %s: %s\n", dsv4_status_string(st), dsv4_last_error());
      return 1;
    }
    snprintf(what, sizeof what, "%s/config.json", model_dir);
    st = dsv4_model_plan(m, &p, &plan, sizeof plan);
    snprintf(msg, sizeof msg, "%s", dsv4_last_error());
    dsv4_model_free(m);
  } else {
    snprintf(what, sizeof what, "%s", config ? config : "DeepSeek-V4.1-Flash (built-in release config)");
    st = dsv4_plan_config(config, &p, &plan, sizeof plan);
    snprintf(msg, sizeof msg, "%s", dsv4_last_error());
  }
  if (st != DSV4_OK && st != DSV4_ERR_DOES_NOT_FIT) {
    fprintf(stderr, "dsv4-plan: %s: %s\n", dsv4_status_string(st), msg);
    return 1;
  }
  if (json)
    print_json(&plan, what, st, msg);
  else
    print_text(&plan, what, !config && !model_dir, st);
  if (st == DSV4_ERR_DOES_NOT_FIT) {
    fprintf(stderr, "dsv4-plan: %s: %s\n", dsv4_status_string(st), msg);
    return 3;
  }
  return 0;
}
