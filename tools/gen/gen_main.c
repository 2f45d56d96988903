/*
 * dsv4-gen-checkpoint: write an official-format DeepSeek-V4.1-Flash
 * checkpoint directory from a seed.
 *
 *   dsv4-gen-checkpoint [options] --tokenizer DIR OUT_DIR
 *
 * Output: config.json (nested V4.1 form), model-0000N-of-0000M.safetensors
 * + model.safetensors.index.json, the Engram tables alone in the last
 * shards, tokenizer.json (+ tokenizer_config.json) copied from DIR, and
 * make_tiny.json (build metadata: seed, sizes, the planted successor table).
 *
 * --tiny (default) is the project's default model: fixture-sized dims with
 * every structural feature (gen_config.c) and a planted successor table
 * (gen_plant.h) so that greedy decoding continues a known sentence.
 * --real-dims is the release's dims with --layers N backbone layers, for
 * speed work; a real-dims layer is about 7.3 GB, so everything streams
 * (gen_weights.h). The release's Engram tables have ~384M rows (~101.5 GB
 * each); --engram-rows R shrinks them to about R rows each (the config's
 * engram_vocab_size becomes R / 24 and engram_num_embeddings the sums of
 * the primes found from there, spec §5.2 b, so Engram hashing stays
 * consistent); --engram-rows 0 keeps the release size.
 *
 * Same options, same seed -> identical bytes (every value comes from a
 * stream keyed by seed, tensor name and row; gen_rng.h).
 */
#include <errno.h>
#include <jansson.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "dsv4/dsv4.h"
#include "gen_config.h"
#include "gen_files.h"
#include "gen_plant.h"
#include "gen_shards.h"
#include "gen_weights.h"
#include "io/tokenizer.h"
#include "model/engram_hash.h"
#include "model/formats.h"

typedef struct opts {
  gen_shape shape;
  uint64_t seed;
  const char *tokenizer, *out, *stamp;
  const char *sentence, *prompt;
  float gain;
  int32_t shards;              /* non-Engram shards; 0 = default */
  int64_t scale_cache;         /* --scale-cache-bytes; -1 = default */
  int64_t group_values;        /* --group-values; 0 = default */
  int plant, config_only, quiet;
} opts;

static void usage(FILE *f) {
  fputs("usage: dsv4-gen-checkpoint [options] --tokenizer DIR OUT_DIR\n"
        "Write an official-format DeepSeek-V4.1-Flash checkpoint with random weights.\n"
        "  --tiny              the tiny default model: dim 128, 10 layers + 3 DSpark stages,\n"
        "                      every layer role (default)\n"
        "  --real-dims         release dims (hidden 5120, 64 heads, 384 experts)\n"
        "  --layers N          backbone layers with --real-dims (2..61, default 4)\n"
        "  --engram-rows R     --real-dims: about R rows per Engram table (default 1048576;\n"
        "                      0 = the release's ~384M rows, ~101.5 GB per table)\n"
        "  --vision            --real-dims: add the release's vision tower\n"
        "  --tokenizer DIR     tokenizer.json (+ tokenizer_config.json) of the model (required)\n"
        "  --seed S            random seed (default 1)\n"
        "  --gain G            std multiplier of sublayer outputs (wo_b, w2, Engram values;\n"
        "                      default 0.3)\n"
        "  --sentence TEXT     planted sentence (default: " GEN_PLANT_SENTENCE ")\n"
        "  --prompt TEXT       its prefix the README prompts with (default: " GEN_PLANT_PROMPT ")\n"
        "  --no-plant          plain random embed/head (no successor table)\n"
        "  --shards N          shards for the non-Engram tensors (default: 2 tiny,\n"
        "                      about 5 GB each with --real-dims)\n"
        "  --config-only       write config.json and the tokenizer files only\n"
        "  --stamp FILE        write FILE last (for build systems)\n"
        "  --scale-cache-bytes N  keep scale tensors up to N bytes between a weight and its\n"
        "                      .scale, recompute larger ones (default 64 MiB; same output)\n"
        "  --group-values N    values generated per row group (default 4194304; same output)\n"
        "  --quiet             no progress on stderr\n"
        "  --version           print the version\n"
        "Exit status: 0 written, 1 failed, 2 bad usage.\n",
        f);
}

static int parse_u64(const char *s, uint64_t *out) {
  char *end;
  errno = 0;
  unsigned long long v = strtoull(s, &end, 0);
  if (errno || end == s || *end || s[0] == '-') return -1;
  *out = v;
  return 0;
}

static int parse_f32(const char *s, float *out) {
  char *end;
  errno = 0;
  float v = strtof(s, &end);
  if (errno || end == s || *end) return -1;
  *out = v;
  return 0;
}

/* `a` is option `name`, followed by an integer value v in [lo, hi]. */
static int int_opt(const char *a, const char *v, const char *name, uint64_t lo, uint64_t hi,
                   uint64_t *u) {
  return v && strcmp(a, name) == 0 && parse_u64(v, u) == 0 && *u >= lo && *u <= hi;
}

static int parse_args(int argc, char **argv, opts *o) {
  memset(o, 0, sizeof *o);
  o->shape.n_layers = 4;
  o->shape.engram_rows = 1 << 20;
  o->seed = 1;
  o->gain = 0.3f;
  o->plant = 1;
  o->scale_cache = -1;
  o->sentence = GEN_PLANT_SENTENCE;
  o->prompt = GEN_PLANT_PROMPT;
  for (int i = 1; i < argc; i++) {
    const char *a = argv[i];
    const char *v = i + 1 < argc ? argv[i + 1] : NULL;
    uint64_t u;
    if (!strcmp(a, "-h") || !strcmp(a, "--help")) {
      usage(stdout);
      exit(0);
    } else if (!strcmp(a, "--version")) {
      printf("dsv4-gen-checkpoint (libdsv4) %s\n", DSV4_VERSION_STRING);
      exit(0);
    } else if (!strcmp(a, "--tiny")) o->shape.real_dims = 0;
    else if (!strcmp(a, "--real-dims")) o->shape.real_dims = 1;
    else if (!strcmp(a, "--vision")) o->shape.vision = 1;
    else if (!strcmp(a, "--no-plant")) o->plant = 0;
    else if (!strcmp(a, "--config-only")) o->config_only = 1;
    else if (!strcmp(a, "--quiet")) o->quiet = 1;
    else if (int_opt(a, v, "--layers", 1, 999, &u)) o->shape.n_layers = (int32_t)u, i++;
    else if (int_opt(a, v, "--engram-rows", 0, 1ull << 40, &u))
      o->shape.engram_rows = (int64_t)u, i++;
    else if (int_opt(a, v, "--seed", 0, UINT64_MAX, &u)) o->seed = u, i++;
    else if (int_opt(a, v, "--shards", 1, 9999, &u)) o->shards = (int32_t)u, i++;
    else if (int_opt(a, v, "--scale-cache-bytes", 0, 1ull << 62, &u))
      o->scale_cache = (int64_t)u, i++;
    else if (int_opt(a, v, "--group-values", 1, 1ull << 40, &u))
      o->group_values = (int64_t)u, i++;
    else if (v && !strcmp(a, "--gain") && !parse_f32(v, &o->gain)) i++;
    else if (v && !strcmp(a, "--tokenizer")) o->tokenizer = v, i++;
    else if (v && !strcmp(a, "--sentence")) o->sentence = v, i++;
    else if (v && !strcmp(a, "--prompt")) o->prompt = v, i++;
    else if (v && !strcmp(a, "--stamp")) o->stamp = v, i++;
    else if (a[0] != '-' && !o->out) o->out = a;
    else {
      fprintf(stderr, "dsv4-gen-checkpoint: bad argument '%s'\n", a);
      return -1;
    }
  }
  if (!o->out || !o->tokenizer) {
    usage(stderr);
    return -1;
  }
  if (!(o->gain >= 0.0f && o->gain <= 10.0f)) {
    fprintf(stderr, "dsv4-gen-checkpoint: --gain must be in [0, 10]\n");
    return -1;
  }
  return 0;
}

/* Vocabulary, special ids and Engram classes of the tokenizer. */
static dsv4_status tok_facts(const dsv4i_tokenizer *tok, gen_tok_facts *f) {
  const dsv4i_special_ids *sp = dsv4i_tokenizer_special(tok);
  f->vocab_size = dsv4i_tokenizer_vocab_size(tok);
  f->bos = sp->bos;
  f->eos = sp->eos;
  f->pad = sp->pad;
  f->image = sp->image;
  f->noise = sp->dspark_noise;
  if (f->bos < 0 || f->eos < 0 || f->pad < 0 || f->image < 0 || f->noise < 0)
    return dsv4i_error(DSV4_ERR_TOKENIZER,
                       "the tokenizer lacks a special id (bos %d, eos %d, pad %d, image %d, "
                       "DSpark noise %d); the config needs all five",
                       (int)f->bos, (int)f->eos, (int)f->pad, (int)f->image, (int)f->noise);
  int32_t *map = NULL, n = 0;
  dsv4_status s = dsv4i_engram_token_map_build(tok, &map, &n, &f->engram_classes);
  free(map);
  return s;
}

static json_t *ids_json(const int32_t *v, size_t n) {
  json_t *a = json_array();
  for (size_t i = 0; i < n; i++) json_array_append_new(a, json_integer(v[i]));
  return a;
}

/*
 * Context-free check of the plant: for every token u with a successor,
 * argmax_v head[v] . bf16(norm(embed[u])) must be succ(u) (plain float
 * math on the stored values). Returns the smallest top-1/top-2 gap, or
 * NAN when the model is too large to check here (vocab x dim > 2^24).
 */
static dsv4_status plant_margin(gen_weights *g, const dsv4i_config *cfg, const gen_plant *p,
                                double *margin) {
  *margin = NAN;
  int64_t V = cfg->vocab_size, D = cfg->dim;
  if (V * D > (1 << 24)) return DSV4_OK;
  float *head = malloc((size_t)(V * D) * sizeof *head), *x = malloc((size_t)D * sizeof *x);
  float *nw = malloc((size_t)D * sizeof *nw);
  dsv4_status s = head && x && nw ? DSV4_OK : DSV4_ERR_OUT_OF_MEMORY;
  if (!s) s = gen_weights_row(g, "norm.weight", 0, nw);
  for (int64_t v = 0; s == DSV4_OK && v < V; v++)
    s = gen_weights_row(g, "head.weight", v, head + v * D);
  double best = INFINITY;
  for (int64_t u = 0; s == DSV4_OK && u < V; u++) {
    if (p->succ[u] < 0) continue;
    if ((s = gen_weights_row(g, "embed.weight", u, x))) break;
    double ss = 0.0;
    for (int64_t d = 0; d < D; d++) ss += (double)x[d] * x[d];
    float r = (float)(1.0 / sqrt(ss / (double)D + (double)cfg->norm_eps));
    for (int64_t d = 0; d < D; d++) x[d] = dsv4i_bf16_to_f32(dsv4i_f32_to_bf16(x[d] * r * nw[d]));
    double top = -INFINITY, second = -INFINITY;
    int64_t arg = -1;
    for (int64_t v = 0; v < V; v++) {
      double l = 0.0;
      for (int64_t d = 0; d < D; d++) l += (double)head[v * D + d] * x[d];
      if (l > top) {
        second = top;
        top = l;
        arg = v;
      } else if (l > second) {
        second = l;
      }
    }
    if (arg != p->succ[u])
      s = dsv4i_error(DSV4_ERR_INTERNAL, "plant: head(norm(embed[%lld])) peaks at %lld, not %d",
                      (long long)u, (long long)arg, (int)p->succ[u]);
    if (top - second < best) best = top - second;
  }
  if (!s) *margin = best;
  free(head);
  free(x);
  free(nw);
  return s;
}

static dsv4_status write_meta(const opts *o, const dsv4i_config *cfg, const dsv4i_contract *ct,
                              const gen_tok_facts *tf, const gen_plant *p, double margin,
                              int32_t n_shards) {
  json_t *m = json_object(), *t = json_object();
  json_object_set_new(m, "generator", json_string("dsv4-gen-checkpoint"));
  json_object_set_new(m, "preset", json_string(o->shape.real_dims ? "real-dims" : "tiny"));
  json_object_set_new(m, "seed", json_integer((json_int_t)o->seed));
  json_object_set_new(m, "layers", json_integer(cfg->n_layers));
  json_object_set_new(m, "mtp_layers", json_integer(cfg->n_mtp_layers));
  json_object_set_new(t, "n_ids", json_integer(tf->vocab_size));
  json_object_set_new(t, "bos_id", json_integer(tf->bos));
  json_object_set_new(t, "eos_id", json_integer(tf->eos));
  json_object_set_new(t, "pad_id", json_integer(tf->pad));
  json_object_set_new(t, "image_id", json_integer(tf->image));
  json_object_set_new(t, "noise_id", json_integer(tf->noise));
  json_object_set_new(m, "tokenizer", t);
  json_object_set_new(m, "engram_compressed_vocab_size", json_integer(tf->engram_classes));
  json_object_set_new(m, "engram_vocab_size", json_integer((json_int_t)cfg->engram_vocab_size));
  json_t *rows = json_array();
  for (int32_t i = 0; i < cfg->n_engram; i++)
    json_array_append_new(rows, json_integer((json_int_t)cfg->engram_num_embeddings[i]));
  json_object_set_new(m, "engram_rows", rows);
  json_object_set_new(m, "n_shards", json_integer(n_shards));
  json_object_set_new(m, "n_tensors", json_integer((json_int_t)ct->n));
  json_object_set_new(m, "total_size", json_integer((json_int_t)ct->payload_bytes));
  if (p) {
    json_t *pl = json_object();
    json_object_set_new(pl, "gain", json_real(o->gain));
    json_object_set_new(pl, "head_bigram", json_real(p->bigram));
    json_object_set_new(pl, "head_random", json_real(p->random));
    json_object_set_new(pl, "sentence", json_string(p->sentence));
    json_object_set_new(pl, "prompt", json_string(p->prompt));
    json_object_set_new(pl, "continuation", json_string(p->sentence + strlen(p->prompt)));
    json_object_set_new(pl, "sentence_ids", ids_json(p->sentence_ids, p->n_sentence));
    json_object_set_new(pl, "prompt_ids", ids_json(p->sentence_ids, p->n_prompt));
    /* greedy continuation of BOS + prompt: the rest of the sentence, then EOS */
    json_t *cont = ids_json(p->sentence_ids + p->n_prompt, p->n_sentence - p->n_prompt);
    json_array_append_new(cont, json_integer(tf->eos));
    json_object_set_new(pl, "continuation_ids", cont);
    json_object_set_new(pl, "context_free_min_margin",
                        isnan(margin) ? json_null() : json_real(margin));
    json_object_set_new(pl, "successor", ids_json(p->succ, (size_t)p->vocab));
    json_object_set_new(m, "planted", pl);
  }
  char *text = json_dumps(m, JSON_INDENT(2) | JSON_PRESERVE_ORDER | JSON_REAL_PRECISION(6));
  json_decref(m);
  if (!text) return dsv4i_error(DSV4_ERR_OUT_OF_MEMORY, "make_tiny.json: out of memory");
  dsv4_status s = gen_write_file(o->out, "make_tiny.json", text, strlen(text));
  free(text);
  return s;
}

static void progress(const char *file, int32_t k, int32_t n, uint64_t bytes, void *user) {
  const struct timespec *t0 = user;
  struct timespec t1;
  clock_gettime(CLOCK_MONOTONIC, &t1);
  double dt = (double)(t1.tv_sec - t0->tv_sec) + 1e-9 * (double)(t1.tv_nsec - t0->tv_nsec);
  fprintf(stderr, "dsv4-gen-checkpoint: [%d/%d] %s  %.3f GB  (%.1f s)\n", (int)k + 1, (int)n,
          file, (double)bytes / 1e9, dt);
}

static dsv4_status run(const opts *o) {
  dsv4i_tokenizer *tok = NULL;
  dsv4i_config cfg;
  dsv4i_contract ct = {0};
  gen_plant plant = {0};
  gen_weights *g = NULL;
  gen_tok_facts tf = {0};
  char *cfg_json = NULL;
  int have_plant = 0;
  int32_t n_sh = 0;
  double margin = NAN;
  struct timespec t0;
  clock_gettime(CLOCK_MONOTONIC, &t0);

  dsv4_status s = dsv4i_tokenizer_load(o->tokenizer, &tok);
  if (!s) s = tok_facts(tok, &tf);
  if (!s) s = gen_config_make(&o->shape, &tf, &cfg_json, &cfg);
  if (!s) s = gen_mkdirs(o->out);
  if (!s) s = gen_write_file(o->out, "config.json", cfg_json, strlen(cfg_json));
  if (!s) s = gen_copy_file(o->tokenizer, o->out, "tokenizer.json");
  if (!s) {
    char *tc = dsv4i_path_join(o->tokenizer, "tokenizer_config.json");
    if (!tc) s = DSV4_ERR_OUT_OF_MEMORY;
    else if (gen_exists(tc)) s = gen_copy_file(o->tokenizer, o->out, "tokenizer_config.json");
    free(tc);
  }
  if (s || o->config_only) goto done;

  if ((s = dsv4i_contract_build(&cfg, &ct))) goto done;
  if (o->plant) {
    s = gen_plant_make(tok, cfg.vocab_size, o->sentence, o->prompt, o->seed, &plant);
    if (s) goto done;
    have_plant = 1;
  }
  s = gen_weights_create(&cfg, &ct, o->seed, o->gain, have_plant ? &plant : NULL, &g);
  if (s) goto done;
  if (o->scale_cache >= 0) gen_weights_set_scale_cache(g, (uint64_t)o->scale_cache);
  if (o->group_values > 0) gen_weights_set_group_values(g, o->group_values);
  int32_t n_main = o->shards;
  if (n_main <= 0) {
    uint64_t main_bytes = 0;
    for (size_t i = 0; i < ct.n; i++)
      if (ct.specs[i].component != DSV4_COMP_ENGRAM_TABLES) main_bytes += ct.specs[i].nbytes;
    n_main = o->shape.real_dims ? (int32_t)((main_bytes + 4999999999ull) / 5000000000ull) : 2;
  }
  if (!o->quiet)
    fprintf(stderr, "dsv4-gen-checkpoint: %s, %d layers + %d DSpark, %zu tensors, %.3f GB -> %s\n",
            o->shape.real_dims ? "real dims" : "tiny", (int)cfg.n_layers, (int)cfg.n_mtp_layers,
            ct.n, (double)ct.payload_bytes / 1e9, o->out);
  /* shards of an earlier run with another layout would linger beside the new index */
  if ((s = gen_remove_matching(o->out, "model-*-of-*.safetensors"))) goto done;
  s = gen_shards_write(&ct, g, o->out, n_main, o->quiet ? NULL : progress, &t0, &n_sh);
  if (s) goto done;
  if (have_plant && (s = plant_margin(g, &cfg, &plant, &margin))) goto done;
  s = write_meta(o, &cfg, &ct, &tf, have_plant ? &plant : NULL, margin, n_sh);
  if (!s && !o->quiet && have_plant) {
    char m[32] = "not computed at this size";
    if (!isnan(margin)) snprintf(m, sizeof m, "%.2f", margin);
    fprintf(stderr, "dsv4-gen-checkpoint: planted \"%s\" | \"%s\" (context-free margin %s)\n",
            plant.prompt, plant.sentence + strlen(plant.prompt), m);
  }
done:
  if (!s && o->stamp) {
    FILE *f = fopen(o->stamp, "w");
    int bad = !f || fprintf(f, "%s\n", o->out) < 0;
    if ((f && fclose(f) != 0) || bad) s = dsv4i_error(DSV4_ERR_IO, "cannot write %s", o->stamp);
  }
  gen_weights_free(g);
  gen_plant_free(&plant);
  dsv4i_contract_free(&ct);
  free(cfg_json);
  dsv4i_tokenizer_free(tok);
  return s;
}

int main(int argc, char **argv) {
  opts o;
  if (parse_args(argc, argv, &o)) return 2;
  dsv4_status s = run(&o);
  if (s) {
    fprintf(stderr, "dsv4-gen-checkpoint: %s\n  %s\n", dsv4_status_string(s),
            dsv4i_error_message());
    return 1;
  }
  return 0;
}
