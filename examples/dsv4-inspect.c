/*
 * dsv4-inspect: what is in a DeepSeek-V4.1-Flash checkpoint directory.
 *
 *   dsv4-inspect [--config-only] [DIR]   (default: the installed default model)
 *
 * Loads DIR with dsv4_model_load (every shard header validated, every tensor
 * resolved and checked against the config's tensor contract) and prints the
 * config summary, the layer-role table (spec §2.3), tensor count and bytes by
 * component and a dtype histogram. --config-only reads DIR/config.json alone
 * (DSV4_MODEL_F_CONFIG_ONLY) and reports the contract the config implies.
 * Exit status 0 on success; 1 with the status and the loader's message on any
 * load error; 2 on bad usage.
 *
 * Uses the public API (dsv4/dsv4.h) only.
 */
#include <inttypes.h>
#include <stdio.h>
#include <string.h>

#include "dsv4/dsv4.h"
#include "tool_util.h"
#include "tool_util.h"


static const char *dtype_name(int32_t d) {
  switch (d) {
  case DSV4_DTYPE_BF16: return "BF16";
  case DSV4_DTYPE_F16: return "F16";
  case DSV4_DTYPE_F32: return "F32";
  case DSV4_DTYPE_F8_E4M3: return "F8_E4M3";
  case DSV4_DTYPE_F8_E8M0: return "F8_E8M0";
  case DSV4_DTYPE_I8: return "I8";
  case DSV4_DTYPE_I32: return "I32";
  case DSV4_DTYPE_I64: return "I64";
  default: return "?";
  }
}

static void print_config(const dsv4_model_info *mi, int config_only, int32_t n_shards) {
  char a[32], b[32];
  printf("config\n");
  printf("  vocab                %s (bos %d, eos %d, pad %d, image %d, DSpark noise %d)\n",
         tool_grouped(mi->vocab_size, a, sizeof a), (int)mi->bos_token_id, (int)mi->eos_token_id,
         (int)mi->pad_token_id, (int)mi->image_token_id, (int)mi->dspark_noise_token_id);
  printf("  hidden               %d, hc_mult %d\n", (int)mi->hidden_size, (int)mi->hc_mult);
  printf("  layers               %d backbone + %d DSpark stages (block size %d)\n",
         (int)mi->n_layers, (int)mi->n_mtp_layers, (int)mi->dspark_block_size);
  printf("  attention            %d heads x %d latent (RoPE on the last %d), window %d\n",
         (int)mi->n_heads, (int)mi->head_dim, (int)mi->rope_head_dim, (int)mi->sliding_window);
  printf("  routed experts       %d, top-%d\n", (int)mi->n_routed_experts,
         (int)mi->n_experts_per_tok);
  printf("  max positions        %s\n", tool_grouped(mi->max_position_embeddings, a, sizeof a));
  if (config_only)
    printf("  tensors              %s in the contract (config only), %s bytes\n",
           tool_grouped(mi->n_tensors, a, sizeof a), tool_grouped(mi->payload_bytes, b, sizeof b));
  else
    printf("  tensors              %s in %d shard%s, %s bytes\n",
           tool_grouped(mi->n_tensors, a, sizeof a), (int)n_shards, n_shards == 1 ? "" : "s",
           tool_grouped(mi->payload_bytes, b, sizeof b));
}

/* "kv-source index(own keys) ..." from a layer's ratio and DSV4_ROLE_* bits. */
static void role_text(const dsv4_layer_info *li, char *buf, size_t cap) {
  uint32_t r = li->roles;
  buf[0] = '\0';
  if (r & DSV4_ROLE_DSPARK_STAGE) strncat(buf, "dspark-stage ", cap - strlen(buf) - 1);
  if (li->compress_ratio == 0) strncat(buf, "window-only ", cap - strlen(buf) - 1);
  else if (!(r & (DSV4_ROLE_KV_SOURCE | DSV4_ROLE_INDEX_SOURCE)))
    strncat(buf, "consumer ", cap - strlen(buf) - 1);
  if (r & DSV4_ROLE_KV_SOURCE) strncat(buf, "kv-source ", cap - strlen(buf) - 1);
  if (r & DSV4_ROLE_INDEX_SOURCE)
    strncat(buf, (r & DSV4_ROLE_INDEX_OWN_KEYS) ? "index(own keys) " : "index ",
            cap - strlen(buf) - 1);
  if (r & DSV4_ROLE_CANDIDATE_SOURCE) strncat(buf, "candidate-source ", cap - strlen(buf) - 1);
  if (r & DSV4_ROLE_CANDIDATE_MASKED) strncat(buf, "candidate-masked ", cap - strlen(buf) - 1);
  if (r & DSV4_ROLE_ENGRAM) strncat(buf, "engram ", cap - strlen(buf) - 1);
  if (r & DSV4_ROLE_DSPARK_TAP) strncat(buf, "dspark-tap ", cap - strlen(buf) - 1);
  size_t n = strlen(buf);
  if (n) buf[n - 1] = '\0';
  else snprintf(buf, cap, "%s", "-");
}

static const char *id_or_dash(int32_t v, char *buf, size_t cap) {
  if (v < 0) return "-";
  snprintf(buf, cap, "%d", (int)v);
  return buf;
}

static int get_layer(const dsv4_model *m, int32_t l, dsv4_layer_info *li) {
  dsv4_status s = dsv4_model_get_layer(m, l, li, sizeof *li);
  if (s != DSV4_OK)
    fprintf(stderr, "dsv4-inspect: layer %d: %s\n  %s\n", (int)l, dsv4_status_string(s),
            dsv4_last_error());
  return s != DSV4_OK;
}

static int print_layers(const dsv4_model *m, const dsv4_model_info *mi) {
  int32_t n = mi->n_layers + mi->n_mtp_layers;
  int w = 5; /* widest roles text */
  char roles[160];
  for (int32_t l = 0; l < n; l++) {
    dsv4_layer_info li;
    if (get_layer(m, l, &li)) return 1;
    role_text(&li, roles, sizeof roles);
    if ((int)strlen(roles) > w) w = (int)strlen(roles);
  }
  printf("\nlayers (spec §2.3)\n");
  printf("  %-7s %5s  %-*s %6s %7s %7s %5s %6s %5s\n", "layer", "ratio", w, "roles", "kv-src",
         "idx-src", "key-src", "cand", "engram", "yarn");
  for (int32_t l = 0; l < n; l++) {
    dsv4_layer_info li;
    if (get_layer(m, l, &li)) return 1;
    char name[16], b1[16], b2[16], b3[16], b4[16], b5[16];
    if (l < mi->n_layers) snprintf(name, sizeof name, "%d", (int)l);
    else snprintf(name, sizeof name, "mtp.%d", (int)(l - mi->n_layers));
    role_text(&li, roles, sizeof roles);
    printf("  %-7s %5d  %-*s %6s %7s %7s %5s %6s %5s\n", name, (int)li.compress_ratio, w, roles,
           id_or_dash(li.kv_source, b1, sizeof b1), id_or_dash(li.index_source, b2, sizeof b2),
           id_or_dash(li.index_key_source, b3, sizeof b3),
           id_or_dash(li.candidate_source, b4, sizeof b4),
           id_or_dash(li.engram_slot, b5, sizeof b5),
           li.rope_yarn ? "yes" : "no");
  }
  return 0;
}

typedef struct tally {
  int64_t n, bytes;
} tally;

/* Counts and bytes by component and dtype, and the shard count. */
typedef struct tallies {
  tally comp[DSV4_COMP_COUNT_V0_1 + 1]; /* last: unknown component */
  tally dtype[DSV4_DTYPE_I64 + 2];      /* by DSV4_DTYPE_*; last: unknown */
  tally all;
  int32_t n_shards;
} tallies;

static int collect(const dsv4_model *m, const dsv4_model_info *mi, tallies *t) {
  memset(t, 0, sizeof *t);
  int32_t max_shard = -1;
  for (int64_t i = 0; i < mi->n_tensors; i++) {
    dsv4_tensor_info ti;
    dsv4_status s = dsv4_model_get_tensor(m, i, &ti, sizeof ti);
    if (s != DSV4_OK) {
      fprintf(stderr, "dsv4-inspect: tensor %" PRId64 ": %s\n  %s\n", i, dsv4_status_string(s),
              dsv4_last_error());
      return 1;
    }
    int32_t c = ti.component >= 0 && ti.component < DSV4_COMP_COUNT_V0_1 ? ti.component
                                                                         : DSV4_COMP_COUNT_V0_1;
    int32_t d = ti.dtype >= 1 && ti.dtype <= DSV4_DTYPE_I64 ? ti.dtype : DSV4_DTYPE_I64 + 1;
    t->comp[c].n++;
    t->comp[c].bytes += ti.nbytes;
    t->dtype[d].n++;
    t->dtype[d].bytes += ti.nbytes;
    t->all.n++;
    t->all.bytes += ti.nbytes;
    if (ti.shard > max_shard) max_shard = ti.shard;
  }
  t->n_shards = max_shard + 1;
  return 0;
}

static void print_row(const char *label, const tally *t, int64_t total) {
  char a[32], b[32];
  printf("  %-26s %10s %20s %12.3f %6.2f%%\n", label, tool_grouped(t->n, a, sizeof a),
         tool_grouped(t->bytes, b, sizeof b), (double)t->bytes / 1e9,
         total ? 100.0 * (double)t->bytes / (double)total : 0.0);
}

static void print_tallies(const tallies *t) {
  printf("\nbytes by component\n");
  printf("  %-26s %10s %20s %12s %7s\n", "component", "tensors", "bytes", "GB", "share");
  for (int32_t c = 0; c <= DSV4_COMP_COUNT_V0_1; c++)
    if (t->comp[c].n)
      print_row(c < DSV4_COMP_COUNT_V0_1 ? tool_component_name(c) : "unknown", &t->comp[c],
                t->all.bytes);
  print_row("total", &t->all, t->all.bytes);
  printf("\ndtypes\n");
  printf("  %-26s %10s %20s %12s %7s\n", "dtype", "tensors", "bytes", "GB", "share");
  for (int32_t d = 1; d <= DSV4_DTYPE_I64 + 1; d++)
    if (t->dtype[d].n)
      print_row(d <= DSV4_DTYPE_I64 ? dtype_name(d) : "unknown", &t->dtype[d], t->all.bytes);
}

static void usage(FILE *f) {
  fputs("usage: dsv4-inspect [--config-only] [--version] [DIR]\n"
        "Load a DeepSeek-V4.1-Flash checkpoint directory (default: the default model\n"
        "installed with the tools) and print its config, layer roles, tensor bytes by\n"
        "component and dtypes. --config-only reads DIR/config.json alone and reports the\n"
        "tensor contract it implies.\n"
        "Exit status: 0 done, 1 the checkpoint did not load, 2 bad usage.\n",
        f);
}

int main(int argc, char **argv) {
  const char *dir = NULL;
  char dir_buf[4096];
  int config_only = 0;
  for (int i = 1; i < argc; i++) {
    if (strcmp(argv[i], "--config-only") == 0) config_only = 1;
    else if (strcmp(argv[i], "-h") == 0 || strcmp(argv[i], "--help") == 0) {
      usage(stdout);
      return TOOL_EXIT_OK;
    } else if (strcmp(argv[i], "--version") == 0) {
      tool_print_version("dsv4-inspect");
      return TOOL_EXIT_OK;
    } else if (argv[i][0] != '-' && !dir) dir = argv[i];
    else {
      usage(stderr);
      return TOOL_EXIT_USAGE;
    }
  }
  if (!dir && !(dir = tool_default_model(dir_buf, sizeof dir_buf))) {
    usage(stderr);
    fprintf(stderr, "dsv4-inspect: DIR is required (no default model installed)\n");
    return TOOL_EXIT_USAGE;
  }

  dsv4_model_params mp;
  dsv4_model *m = NULL;
  dsv4_status s = dsv4_model_params_init(&mp, sizeof mp);
  if (s == DSV4_OK) {
    if (config_only) mp.flags |= DSV4_MODEL_F_CONFIG_ONLY;
    s = dsv4_model_load(dir, &mp, &m);
  }
  if (s != DSV4_OK) {
    fprintf(stderr, "dsv4-inspect: %s: %s\n  %s\n", dir, dsv4_status_string(s), dsv4_last_error());
    return 1;
  }
  dsv4_model_info mi;
  s = dsv4_model_get_info(m, &mi, sizeof mi);
  if (s != DSV4_OK) {
    fprintf(stderr, "dsv4-inspect: %s: %s\n  %s\n", dir, dsv4_status_string(s),
            dsv4_last_error());
    dsv4_model_free(m);
    return 1;
  }
  tallies t;
  int rc = collect(m, &mi, &t);
  if (!rc) {
    printf("dsv4-inspect %s: %s%s\n\n", dsv4_version_string(), dir,
           config_only ? " (config only)" : "");
    print_config(&mi, config_only, t.n_shards);
    rc = print_layers(m, &mi);
  }
  if (!rc) print_tallies(&t);
  dsv4_model_free(m);
  return rc;
}
