/*
 * Topology memory planner (plan.h, second half; docs/planner.md): places
 * every tensor of the contract on pipeline stages and TP ranks (design §6),
 * adds workspace, graph reserve and communication buffers per GPU, and
 * sizes the KV pool from what is left (spec §5.8 records). All byte
 * arithmetic is int64 with overflow checks (plan_sum); an absurd request
 * gives "does not fit", never a wrapped number.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "dist/payload.h"
#include "dist/topology.h"
#include "engine/plan.h"
#include "model/config.h"
#include "model/weights.h"

/* Keys scored per tile by the indexer and the candidate stage (workspace rule). */
#define KEY_TILE 4096
#define GiB 1073741824.0

/* ---- checked int64 arithmetic ------------------------------------------- */

typedef struct acc {
  int ovf; /* an operation overflowed: the result is meaningless */
} acc;

static int64_t mul(acc *a, int64_t x, int64_t y) {
  uint64_t r;
  if (x < 0 || y < 0 || !dsv4i_mul_overflow_u64((uint64_t)x, (uint64_t)y, &r) ||
      r > (uint64_t)INT64_MAX) {
    a->ovf = 1;
    return 0;
  }
  return (int64_t)r;
}

static int64_t add(acc *a, int64_t x, int64_t y) {
  if (x < 0 || y < 0 || x > INT64_MAX - y) {
    a->ovf = 1;
    return 0;
  }
  return x + y;
}

static int64_t ceil_div(int64_t x, int64_t y) { return (x + y - 1) / y; }

/* ---- defaults ------------------------------------------------------------ */

void dsv4i_topo_params_default(dsv4i_topo_params *p) {
  static const int32_t buckets[] = {1, 2, 4, 8, 16, 32};
  memset(p, 0, sizeof *p);
  p->nodes = 2;
  p->gpus_per_node = 8;
  p->tp = 8;
  p->pp = 2;
  p->gpu_mem_bytes = 40LL << 30;      /* A800 40GB */
  p->gpu_reserved_bytes = 1LL << 30;  /* context, modules, cuBLASLt workspace, slack */
  p->host_mem_bytes = 750000000000LL; /* the report: 1 TB per node, > 750 GB available */
  p->kv_format = DSV4I_KV_NATIVE;
  p->engram_placement = DSV4I_ENGRAM_HOST;
  p->max_context = 1048576;
  p->context = 0;
  p->prefill_chunk = 2048;
  p->draft_tokens = 5;
  p->n_buckets = (int32_t)DSV4I_ARRAY_LEN(buckets);
  memcpy(p->buckets, buckets, sizeof buckets);
  p->graph_bytes = 32LL << 20;
  p->nccl_bytes = 384LL << 20;
  p->kv_page_entries = 64;
}

/* ---- where a tensor lives ------------------------------------------------ */

enum { PL_LAYER, PL_MTP, PL_EMBED, PL_HEAD, PL_VISION };
enum { SPLIT_NONE = -1, SPLIT_ROWS = 0, SPLIT_COLS = 1, SPLIT_ENGRAM = 2 };

/* Placement, layer and TP split of every contract tensor (index = contract index),
 * from the model's weight table (model/weights.h: the split rules of design §6
 * live there); a scale tensor follows its weight. */
typedef struct tinfo {
  int8_t place, split, is_wo_a, is_wo_a_scale;
  int32_t layer;
} tinfo;

static dsv4_status tensor_info(const dsv4i_config *cfg, const dsv4i_contract *con, tinfo **out) {
  *out = NULL;
  dsv4i_weights wt;
  dsv4_status st = dsv4i_weights_build(cfg, con, &wt);
  if (st) return st;
  tinfo *ti = dsv4i_calloc(con->n ? con->n : 1, sizeof *ti, "the memory plan's tensor table");
  if (!ti) {
    dsv4i_weights_free(&wt);
    return DSV4_ERR_OUT_OF_MEMORY;
  }
  static const int8_t place[] = {[DSV4I_PLACE_INPUT] = PL_EMBED, [DSV4I_PLACE_LAYER] = PL_LAYER,
                                 [DSV4I_PLACE_DSPARK] = PL_MTP, [DSV4I_PLACE_OUTPUT] = PL_HEAD,
                                 [DSV4I_PLACE_VISION] = PL_VISION};
  static const int8_t split[] = {[DSV4I_SPLIT_NONE] = SPLIT_NONE, [DSV4I_SPLIT_ROWS] = SPLIT_ROWS,
                                 [DSV4I_SPLIT_COLS] = SPLIT_COLS, [DSV4I_SPLIT_ENGRAM] = SPLIT_ENGRAM};
  for (size_t k = 0; k < wt.n; k++) {
    const dsv4i_weight *w = &wt.w[k];
    tinfo t = {place[w->placement], split[w->split], w->role == DSV4I_W_ATTN_WO_A, 0, w->layer};
    ti[w->spec_index] = t;
    if (w->scale_spec) {
      t.is_wo_a_scale = t.is_wo_a;
      t.is_wo_a = 0;
      ti[w->scale_index] = t;
    }
  }
  dsv4i_weights_free(&wt);
  *out = ti;
  return DSV4_OK;
}

/* Bytes of rank r's share when t is split along dim over tp ranks (remainder units to
 * the lowest ranks, so the shares sum to nbytes exactly). */
static int64_t share(const dsv4i_tensor_spec *t, int dim, int32_t tp, int32_t r) {
  int64_t units = t->shape[dim];
  if (units <= 0) return 0;
  int64_t per = (int64_t)t->nbytes / units;
  int64_t n = units / tp + (r < units % tp ? 1 : 0);
  return n * per;
}

/* ---- stage boundaries ---------------------------------------------------- */

/* One boundary rule for the planner and the distributed engine (lib/dist/topology.c):
 * derived from the config's source lists. */
int32_t dsv4i_plan_boundaries(const dsv4i_config *cfg, int32_t *layers, int32_t cap) {
  return dsv4i_dist_boundaries(cfg, layers, cap);
}

/* Planning context shared by the helpers. */
typedef struct ctx {
  const dsv4i_config *cfg;
  const dsv4i_contract *con;
  const tinfo *ti;            /* [con->n] */
  const dsv4i_topo_params *p;
  int dspark, vision;
  int32_t stage_of[DSV4I_MAX_LIST];
  int32_t n_stages;
} ctx;

/* Stages holding a tensor: writes up to 2, returns the count (0: not planned). */
static int holders(const ctx *c, int place, int32_t layer, int32_t *st) {
  int32_t last = c->n_stages - 1;
  switch (place) {
  case PL_LAYER:
    if (layer < 0 || layer >= c->cfg->n_layers) return 0;
    st[0] = c->stage_of[layer];
    return 1;
  case PL_MTP:
    if (!c->dspark) return 0;
    st[0] = last;
    return 1;
  case PL_EMBED: /* stage 0 embeds the input; the DSpark stage embeds its block tokens */
    st[0] = 0;
    if (c->dspark && last != 0) {
      st[1] = last;
      return 2;
    }
    return 1;
  case PL_HEAD:
    st[0] = last;
    return 1;
  default:
    if (!c->vision) return 0;
    st[0] = 0;
    return 1;
  }
}

/* Bytes each stage would hold with the first layers given (for the automatic split). */
static int64_t stage_weight(const ctx *c, const int64_t *layer_bytes, int64_t embed, int64_t head,
                            int64_t mtp, int64_t vision, int32_t first, int32_t end, int is_first,
                            int is_last) {
  int64_t w = 0;
  for (int32_t l = first; l < end; l++) w += layer_bytes[l];
  if (is_first) w += embed + vision;
  if (is_last) w += head + mtp + (c->dspark && !is_first ? embed : 0);
  return w;
}

/* Choose pp-1 boundaries from allowed[0..n) minimising the largest stage, then the sum of
 * squares; writes stage_first. Exhaustive: the allowed lists are short. */
static void choose(const ctx *c, const int32_t *allowed, int32_t n, int32_t pp,
                   const int64_t *lb, int64_t embed, int64_t head, int64_t mtp, int64_t vision,
                   int32_t *best_first) {
  int32_t idx[DSV4I_PLAN_MAX_STAGES] = {0};
  int32_t k = pp - 1;
  double best_max = -1, best_sq = 0;
  for (int32_t i = 0; i < k; i++) idx[i] = i;
  for (;;) {
    int32_t first[DSV4I_PLAN_MAX_STAGES + 1];
    first[0] = 0;
    for (int32_t i = 0; i < k; i++) first[i + 1] = allowed[idx[i]];
    first[pp] = c->cfg->n_layers;
    double mx = 0, sq = 0;
    for (int32_t s = 0; s < pp; s++) {
      double w = (double)stage_weight(c, lb, embed, head, mtp, vision, first[s], first[s + 1],
                                      s == 0, s == pp - 1);
      if (w > mx) mx = w;
      sq += w * w;
    }
    if (best_max < 0 || mx < best_max || (mx == best_max && sq < best_sq)) {
      best_max = mx;
      best_sq = sq;
      memcpy(best_first, first, sizeof(int32_t) * (size_t)pp);
    }
    /* next combination */
    int32_t i = k - 1;
    while (i >= 0 && idx[i] == n - k + i) i--;
    if (i < 0) break;
    idx[i]++;
    for (int32_t j = i + 1; j < k; j++) idx[j] = idx[j - 1] + 1;
  }
}

static dsv4_status resolve_stages(ctx *c, dsv4i_topo_params *p) {
  const dsv4i_config *cfg = c->cfg;
  int32_t allowed[DSV4I_MAX_LIST];
  int32_t n_allowed = dsv4i_plan_boundaries(cfg, allowed, DSV4I_MAX_LIST);
  char list[256] = "";
  for (int32_t i = 0; i < n_allowed; i++) {
    size_t len = strlen(list);
    snprintf(list + len, sizeof list - len, "%s%d", i ? ", " : "", (int)allowed[i]);
  }
  if (n_allowed == 0) snprintf(list, sizeof list, "none");
  if (p->pp - 1 > n_allowed)
    return dsv4i_error(DSV4_ERR_UNSUPPORTED,
                       "memory plan: PP %d needs %d stage boundaries; this config allows %d "
                       "(before layers no shared attention state crosses: %s; design §6)",
                       (int)p->pp, (int)(p->pp - 1), (int)n_allowed, list);
  int automatic = 1;
  for (int32_t s = 1; s < p->pp; s++)
    if (p->stage_first[s] != 0) automatic = 0;
  if (p->stage_first[0] != 0)
    return dsv4i_error(DSV4_ERR_INVALID_ARG, "memory plan: stage 0 must start at layer 0 (got %d)",
                       (int)p->stage_first[0]);
  for (int32_t s = p->pp; s < DSV4I_PLAN_MAX_STAGES; s++)
    if (p->stage_first[s] != 0)
      return dsv4i_error(DSV4_ERR_INVALID_ARG,
                         "memory plan: a first layer is given for stage %d but PP is %d", (int)s,
                         (int)p->pp);
  if (automatic && p->pp > 1) {
    /* weights by layer in the form the GPU holds them (Engram tables only on the device) */
    int64_t lb[DSV4I_MAX_LIST] = {0}, embed = 0, head = 0, mtp = 0, vision = 0;
    for (size_t i = 0; i < c->con->n; i++) {
      const dsv4i_tensor_spec *t = &c->con->specs[i];
      const int32_t layer = c->ti[i].layer;
      const int pl = c->ti[i].place;
      if (c->ti[i].split == SPLIT_ENGRAM && p->engram_placement == DSV4I_ENGRAM_HOST) continue;
      int64_t b = (int64_t)t->nbytes;
      if (pl == PL_LAYER && layer >= 0 && layer < cfg->n_layers) lb[layer] += b;
      else if (pl == PL_MTP) mtp += c->dspark ? b : 0;
      else if (pl == PL_EMBED) embed += b;
      else if (pl == PL_HEAD) head += b;
      else vision += c->vision ? b : 0;
    }
    choose(c, allowed, n_allowed, p->pp, lb, embed, head, mtp, vision, p->stage_first);
  } else {
    for (int32_t s = 1; s < p->pp; s++) {
      int32_t l = p->stage_first[s];
      if (l <= p->stage_first[s - 1] || l >= cfg->n_layers)
        return dsv4i_error(DSV4_ERR_INVALID_ARG,
                           "memory plan: stage %d starts at layer %d; first layers must increase "
                           "and stay below %d",
                           (int)s, (int)l, (int)cfg->n_layers);
      dsv4_status st = dsv4i_dist_split_check(cfg, l);
      if (st != DSV4_OK) {
        dsv4i_error_prefix("memory plan: stage %d", (int)s);
        return st;
      }
    }
  }
  c->n_stages = p->pp;
  for (int32_t s = 0; s < p->pp; s++) {
    int32_t end = s + 1 < p->pp ? p->stage_first[s + 1] : cfg->n_layers;
    for (int32_t l = p->stage_first[s]; l < end; l++) c->stage_of[l] = s;
  }
  return DSV4_OK;
}

/* ---- parameter checks ---------------------------------------------------- */

static dsv4_status check_params(const dsv4i_config *cfg, const dsv4i_topo_params *p) {
#define BAD(...) return dsv4i_error(DSV4_ERR_INVALID_ARG, "memory plan: " __VA_ARGS__)
  if (p->nodes < 1 || p->gpus_per_node < 1) BAD("nodes (%d) and GPUs per node (%d) must be >= 1",
                                                (int)p->nodes, (int)p->gpus_per_node);
  if (p->tp < 1 || p->pp < 1 || p->pp > DSV4I_PLAN_MAX_STAGES)
    BAD("TP (%d) must be >= 1 and PP (%d) in [1, %d]", (int)p->tp, (int)p->pp,
        DSV4I_PLAN_MAX_STAGES);
  if ((int64_t)p->tp * p->pp != (int64_t)p->nodes * p->gpus_per_node)
    BAD("TP %d x PP %d = %lld ranks, but %d nodes x %d GPUs = %lld GPUs (one rank per GPU)",
        (int)p->tp, (int)p->pp, (long long)p->tp * p->pp, (int)p->nodes, (int)p->gpus_per_node,
        (long long)p->nodes * p->gpus_per_node);
  if (p->gpu_mem_bytes < 1 || p->gpu_reserved_bytes < 0 || p->host_mem_bytes < 0)
    BAD("GPU memory must be > 0 and the reserve and host memory >= 0");
  if (p->kv_format != DSV4I_KV_NATIVE && p->kv_format != DSV4I_KV_FP8_DS_MLA)
    BAD("unknown KV format %d", (int)p->kv_format);
  if (p->engram_placement != DSV4I_ENGRAM_HOST && p->engram_placement != DSV4I_ENGRAM_DEVICE)
    BAD("unknown Engram placement %d", (int)p->engram_placement);
  if (p->max_context < 1 || p->context < 0) BAD("max context must be >= 1 and context >= 0");
  if (p->context > p->max_context)
    BAD("context %lld is above max context %lld", (long long)p->context,
        (long long)p->max_context);
  if (p->prefill_chunk < 1) BAD("prefill chunk must be >= 1 (got %d)", (int)p->prefill_chunk);
  if (p->draft_tokens < 0 || p->draft_tokens > 64) BAD("draft tokens must be in [0, 64]");
  if (p->n_buckets < 1 || p->n_buckets > DSV4I_PLAN_MAX_BUCKETS)
    BAD("graph buckets: %d given, 1 to %d allowed", (int)p->n_buckets, DSV4I_PLAN_MAX_BUCKETS);
  for (int32_t i = 0; i < p->n_buckets; i++)
    if (p->buckets[i] < 1 || (i > 0 && p->buckets[i] <= p->buckets[i - 1]))
      BAD("graph buckets must be >= 1 and ascending (bucket %d is %d)", (int)i,
          (int)p->buckets[i]);
  if (p->graph_bytes < 0 || p->nccl_bytes < 0 || p->kv_page_entries < 0)
    BAD("graph bytes, NCCL bytes and KV page entries must be >= 0");
  if (p->flags & ~(uint32_t)(DSV4I_PLAN_F_NO_DSPARK | DSV4I_PLAN_F_NO_VISION))
    BAD("unknown flags 0x%x", (unsigned)p->flags);
#undef BAD
  /* TP splits heads, wo_a groups and expert intermediate 32-blocks (design §6) */
  int32_t tp = p->tp;
  int32_t iblocks = cfg->moe_inter_dim / 32;
  if (cfg->n_heads % tp || cfg->o_groups % tp || iblocks % tp || cfg->moe_inter_dim % 32)
    return dsv4i_error(DSV4_ERR_UNSUPPORTED,
                       "memory plan: TP %d must divide the attention heads (%d), the wo_a groups "
                       "(%d) and the expert intermediate dimension in 32-blocks (%d / 32 = %d)",
                       (int)tp, (int)cfg->n_heads, (int)cfg->o_groups, (int)cfg->moe_inter_dim,
                       (int)iblocks);
  return DSV4_OK;
}

/* ---- KV records (spec §5.8) ----------------------------------------------- */

static void records(const dsv4i_config *cfg, int32_t kv_format, int64_t *window, int64_t *comp,
                    int64_t *ikey) {
  *window = dsv4i_kv_record_bytes(cfg, dsv4i_kv_window_kind(kv_format));
  *comp = dsv4i_kv_record_bytes(cfg, DSV4I_KVREC_COMPRESSED);
  *ikey = dsv4i_kv_record_bytes(cfg, DSV4I_KVREC_INDEX_KEY);
}

int64_t dsv4i_plan_seq_bytes(const dsv4i_topo_plan *plan, int32_t s, int64_t positions) {
  const dsv4i_topo_stage *st = &plan->stage[s];
  int64_t page = plan->params.kv_page_entries;
  acc a = {0};
  int64_t b = st->kv_fixed_per_seq;
  for (int32_t r = 1; r < 4; r++) {
    int64_t entries = positions / r;
    int64_t rows = page > 0 ? mul(&a, ceil_div(entries, page), page) : entries;
    int64_t per = mul(&a, rows, plan->compressed_record + plan->index_key_record);
    b = add(&a, b, mul(&a, per, st->n_kv_by_ratio[r]));
  }
  return a.ovf ? INT64_MAX : b;
}

/* ---- workspace ------------------------------------------------------------- */

/* Stage facts the workspace rule needs. */
typedef struct sfacts {
  int has_index, has_kv, has_cand, has_engram_layers, has_layers;
  int32_t n_engram;
} sfacts;

static void stage_facts(const ctx *c, int32_t s, sfacts *f) {
  memset(f, 0, sizeof *f);
  for (int32_t l = 0; l < c->cfg->n_layers; l++) {
    if (c->stage_of[l] != s) continue;
    uint32_t r = c->cfg->layers[l].roles;
    f->has_layers = 1;
    if (c->cfg->layers[l].compress_ratio > 0) f->has_index = 1;
    if (r & DSV4_ROLE_KV_SOURCE) f->has_kv = 1;
    if (r & (DSV4_ROLE_CANDIDATE_SOURCE | DSV4_ROLE_CANDIDATE_MASKED)) f->has_cand = 1;
    if (c->cfg->layers[l].engram_slot >= 0) f->n_engram++;
  }
  f->has_engram_layers = f->n_engram > 0;
}

/*
 * Step activations of one GPU for n_tok tokens (docs/planner.md "Workspace"):
 * every buffer a layer step uses, allocated side by side (no aliasing), sized
 * for the largest step: the HC stream three times (h, residual, next), the
 * attention chain with this rank's heads, indexer with a KEY_TILE score tile,
 * the compressor, the MoE with this rank's slice of k experts, Engram rows,
 * and on the last stage the logits and DSpark taps for out_rows rows.
 */
static int64_t workspace(acc *a, const ctx *c, int32_t s, int64_t n_tok, int64_t out_rows) {
  const dsv4i_config *cfg = c->cfg;
  sfacts f;
  stage_facts(c, s, &f);
  int64_t D = cfg->dim, hc = cfg->hc_mult, tp = c->p->tp, hd = cfg->head_dim;
  int64_t Hr = cfg->n_heads / tp, Gr = cfg->o_groups / tp, Ir = cfg->moe_inter_dim / tp;
  int last = s == c->n_stages - 1;
  int64_t E = f.has_layers ? cfg->n_routed_experts : 0, k = f.has_layers ? cfg->n_experts_per_tok : 0;
  if (last && c->dspark) {
    if (cfg->dspark_n_routed_experts > E) E = cfg->dspark_n_routed_experts;
    if (cfg->dspark_n_experts_per_tok > k) k = cfg->dspark_n_experts_per_tok;
  }
  int64_t per = 0;
  per += 3 * hc * D * 2;                 /* HC stream: h, residual, next (bf16) */
  per += 2 * (2 + hc) * hc * 4;          /* hc mixes (f32) */
  per += D * 2 + D + D / 32;             /* normed x (bf16) + its fp8 act quant */
  per += cfg->q_lora_rank * 2 + cfg->q_lora_rank + cfg->q_lora_rank / 32; /* q latent + quant */
  per += Hr * hd * 2;                    /* q of this rank's heads */
  per += hd * 2 + hd + hd / 32;          /* window kv + its record */
  per += Hr * hd * 2;                    /* attention output */
  per += Gr * cfg->o_lora_rank * 2;      /* wo_a output of this rank's groups */
  per += D * 4;                          /* sublayer output (f32, before the all-reduce) */
  if (f.has_index) {
    per += (int64_t)cfg->index_n_heads * cfg->index_head_dim * 2 + cfg->index_n_heads * 4;
    per += (int64_t)KEY_TILE * 4;                  /* score tile */
    per += (int64_t)cfg->index_topk * 8;           /* running top-k values + indices */
  }
  if (f.has_cand) per += (int64_t)cfg->candidate_topk_blocks * 4 + (int64_t)KEY_TILE * 4;
  if (f.has_kv) per += hd * 4 * 2 + hd * 2;        /* compressor k, gate (f32) + latent */
  if (E > 0) {
    per += E * 4 * 2 + k * 8;                      /* router logits, scores; top-k ids + weights */
    per += k * (D + D / 32);                       /* gathered fp8 inputs */
    per += k * Ir * 4 * 2;                         /* w1, w3 outputs (f32) */
    per += k * (Ir * 2 + Ir + Ir / 32);            /* SwiGLU product (bf16) + quant */
    per += D * 4;                                  /* expert sum (f32) */
  }
  if (f.has_engram_layers) {
    int64_t cols = (int64_t)(cfg->engram_max_ngram - 1) * cfg->engram_n_heads;
    per += cols * cfg->engram_head_dim * 2;        /* gathered rows (bf16) */
    per += (hc + 1) * D * 2;                       /* keys + value */
  }
  int64_t w = mul(a, per, n_tok);
  if (last) {
    int64_t V = cfg->vocab_size, Vr = ceil_div(V, tp);
    w = add(a, w, mul(a, out_rows, (Vr + V) * 4));  /* local + gathered logits (f32) */
    w = add(a, w, mul(a, out_rows, 2 * 8));         /* sampled ids, confidence */
    if (c->dspark) {
      int64_t taps = (int64_t)cfg->n_dspark_targets * D * 2;
      w = add(a, w, mul(a, n_tok, taps));           /* main_hidden taps (prefill seeding) */
      w = add(a, w, mul(a, out_rows, (int64_t)cfg->dspark_markov_rank * 4 * 2));
    }
  }
  return w;
}

/* ---- formatting for messages ---------------------------------------------- */

static void gib(char *buf, size_t n, int64_t b) {
  snprintf(buf, n, "%.2f GiB", (double)b / GiB);
}

/* ---- compute --------------------------------------------------------------- */

void dsv4i_topo_plan_free(dsv4i_topo_plan *plan) {
  if (!plan) return;
  free(plan->gpu);
  free(plan->host);
  memset(plan, 0, sizeof *plan);
}

dsv4_status dsv4i_plan_compute(const dsv4i_config *cfg, const dsv4i_contract *contract,
                               const dsv4i_topo_params *params, dsv4i_topo_plan *out) {
  memset(out, 0, sizeof *out);
  if (!cfg || !params) return dsv4i_error(DSV4_ERR_INVALID_ARG, "memory plan: NULL argument");
  dsv4_status st = check_params(cfg, params);
  if (st) return st;

  dsv4i_contract own = {0};
  if (!contract) {
    st = dsv4i_contract_build(cfg, &own);
    if (st) return st;
    contract = &own;
  }
  dsv4i_topo_params p = *params;
  if (p.context == 0) p.context = p.max_context;
  tinfo *ti = NULL;
  st = tensor_info(cfg, contract, &ti);
  if (st) {
    dsv4i_contract_free(&own);
    return st;
  }
  ctx c = {cfg, contract, ti, &p, 0, 0, {0}, 0};
  c.dspark = cfg->n_mtp_layers > 0 && !(p.flags & DSV4I_PLAN_F_NO_DSPARK);
  c.vision = cfg->has_vision && !(p.flags & DSV4I_PLAN_F_NO_VISION);
  st = resolve_stages(&c, &p);
  if (st) {
    free(ti);
    dsv4i_contract_free(&own);
    return st;
  }

  int32_t tp = p.tp, S = c.n_stages, last = S - 1;
  out->params = p;
  out->n_stages = S;
  out->tp = tp;
  out->n_gpus = tp * S;
  out->nodes = p.nodes;
  out->gpu = dsv4i_calloc((size_t)out->n_gpus, sizeof *out->gpu, "the memory plan");
  out->host = dsv4i_calloc((size_t)p.nodes, sizeof *out->host, "the memory plan");
  if (!out->gpu || !out->host) {
    free(ti);
    dsv4i_contract_free(&own);
    dsv4i_topo_plan_free(out);
    return DSV4_ERR_OUT_OF_MEMORY;
  }
  acc a = {0};

  /* stages: layer ranges, nodes, roles */
  for (int32_t s = 0; s < S; s++) {
    dsv4i_topo_stage *sg = &out->stage[s];
    sg->first_layer = p.stage_first[s];
    sg->n_layers = (s + 1 < S ? p.stage_first[s + 1] : cfg->n_layers) - sg->first_layer;
    sg->first_node = (int32_t)((int64_t)s * tp / p.gpus_per_node);
    sg->n_nodes = (int32_t)(((int64_t)(s + 1) * tp - 1) / p.gpus_per_node) - sg->first_node + 1;
    sg->has_embed = s == 0 || (c.dspark && s == last);
    sg->has_head = s == last;
    sg->has_dspark = c.dspark && s == last;
    sg->has_vision = c.vision && s == 0;
    for (int32_t l = sg->first_layer; l < sg->first_layer + sg->n_layers; l++) {
      const dsv4i_layer_role *r = &cfg->layers[l];
      if (r->engram_slot >= 0) sg->n_engram_layers++;
      if (r->roles & DSV4_ROLE_KV_SOURCE) {
        sg->n_kv_sources++;
        if (r->compress_ratio >= 1 && r->compress_ratio <= 3) sg->n_kv_by_ratio[r->compress_ratio]++;
      }
    }
  }
  for (int32_t g = 0; g < out->n_gpus; g++) {
    out->gpu[g].stage = g / tp;
    out->gpu[g].rank = g % tp;
    out->gpu[g].node = g / p.gpus_per_node;
  }

  /* weights: every tensor of the contract */
  out->n_tensors = (int64_t)contract->n;
  out->contract_bytes = (int64_t)contract->payload_bytes;
  for (size_t i = 0; i < contract->n; i++) {
    const dsv4i_tensor_spec *t = &contract->specs[i];
    int32_t comp = t->component;
    if (comp < 0 || comp >= DSV4I_PLAN_NCOMP) comp = DSV4_COMP_OTHER;
    int64_t nb = (int64_t)t->nbytes;
    out->component_bytes[comp] = add(&a, out->component_bytes[comp], nb);
    int32_t hs[2];
    const int pl = c.ti[i].place, split = c.ti[i].split;
    int n_h = holders(&c, pl, c.ti[i].layer, hs);
    if (n_h == 0) continue;
    out->stage[hs[0]].owned[comp] = add(&a, out->stage[hs[0]].owned[comp], nb);
    const int is_wo_a = c.ti[i].is_wo_a, is_wo_a_scale = c.ti[i].is_wo_a_scale;
    for (int h = 0; h < n_h; h++) {
      int32_t s = hs[h];
      dsv4i_topo_stage *sg = &out->stage[s];
      sg->held[comp] = add(&a, sg->held[comp], nb);
      if (split == SPLIT_ENGRAM) sg->engram_bytes = add(&a, sg->engram_bytes, nb);
      for (int32_t r = 0; r < tp; r++) {
        dsv4i_topo_gpu *gp = &out->gpu[s * tp + r];
        int64_t b;
        if (split == SPLIT_ENGRAM) {
          if (p.engram_placement == DSV4I_ENGRAM_HOST) continue;
          b = share(t, 0, tp, r);
        } else if (split == SPLIT_NONE) {
          b = nb;
          gp->replicated[comp] = add(&a, gp->replicated[comp], nb);
        } else {
          b = share(t, t->ndim >= 2 ? split : 0, tp, r);
        }
        gp->weights[comp] = add(&a, gp->weights[comp], b);
        /* wo_a is dequantised to bf16 at load (design §5): +1 byte per e4m3, - its scales */
        if (is_wo_a) gp->load_extra += b;
        if (is_wo_a_scale) gp->load_extra -= b;
      }
    }
  }

  /* KV records and per-stage KV */
  records(cfg, p.kv_format, &out->window_record, &out->compressed_record, &out->index_key_record);
  int64_t win = cfg->window_size, pair = out->compressed_record + out->index_key_record;
  for (int32_t s = 0; s < S; s++) {
    dsv4i_topo_stage *sg = &out->stage[s];
    sg->kv_per_token = 0;
    for (int32_t r = 1; r < 4; r++) sg->kv_per_token += (double)sg->n_kv_by_ratio[r] * pair / r;
    sg->kv_fixed_window = mul(&a, mul(&a, sg->n_layers, win), out->window_record);
    if (sg->has_dspark)
      sg->kv_fixed_dspark = mul(&a, mul(&a, cfg->n_mtp_layers, win), out->window_record);
    for (int32_t l = sg->first_layer; l < sg->first_layer + sg->n_layers; l++) {
      const dsv4i_layer_role *r = &cfg->layers[l];
      if ((r->roles & DSV4_ROLE_KV_SOURCE) && r->compress_ratio > 1) /* fp32 kv + score [ratio][hd] */
        sg->kv_fixed_compressor += 2LL * r->compress_ratio * cfg->head_dim * 4;
    }
    sg->kv_fixed_per_seq = add(&a, add(&a, sg->kv_fixed_window, sg->kv_fixed_dspark),
                               sg->kv_fixed_compressor);
    out->kv_per_token += sg->kv_per_token;
    out->kv_fixed_per_seq = add(&a, out->kv_fixed_per_seq, sg->kv_fixed_per_seq);
  }

  /* workspace, graphs, communication, pool per GPU */
  int32_t max_bucket = p.buckets[p.n_buckets - 1];
  int64_t verify_w = c.dspark ? 1 + (int64_t)p.draft_tokens : 1;
  int64_t draft_w = c.dspark ? cfg->dspark_block_size : 1;
  int64_t n_tok = p.prefill_chunk, out_rows = (int64_t)max_bucket * (verify_w > draft_w ? verify_w : draft_w);
  if ((int64_t)max_bucket * verify_w > n_tok) n_tok = (int64_t)max_bucket * verify_w;
  for (int32_t s = 0; s < S; s++) {
    int64_t ws = workspace(&a, &c, s, n_tok, out_rows);
    int64_t graphs_per_bucket = 1 + (c.dspark ? 1 : 0) + (c.dspark && s == last ? 1 : 0);
    int64_t graphs = mul(&a, mul(&a, p.n_buckets, graphs_per_bucket), p.graph_bytes);
    int64_t nccl = tp > 1 ? add(&a, p.nccl_bytes, mul(&a, n_tok, (int64_t)cfg->dim * 2)) : 0;
    int64_t p2p = 0;
    for (int32_t side = 0; side < 2; side++) {
      int32_t b = side == 0 ? s - 1 : s; /* boundary between stage b and b + 1 */
      if (b < 0 || b >= last) continue;
      /* the engine's stage payload (lib/dist/payload.h) of a step of n_tok tokens; Engram
       * row ids travel when an Engram layer lies after the boundary. DSpark taps never
       * cross: every allowed split keeps them on the last stage (dist/topology.h) */
      int32_t engram_cols = 0;
      for (int32_t i = 0; i < cfg->n_engram; i++)
        if (c.stage_of[cfg->engram_layers[i]] > b)
          engram_cols = cfg->n_engram * (cfg->engram_max_ngram - 1) * cfg->engram_n_heads;
      const int64_t pay = (int64_t)dsv4i_payload_bytes(
          (int32_t)n_tok, (int32_t)(out_rows < n_tok ? out_rows : n_tok), cfg->hc_mult, cfg->dim,
          engram_cols);
      p2p = add(&a, p2p, mul(&a, 2, pay)); /* double-buffered */
    }
    for (int32_t r = 0; r < tp; r++) {
      dsv4i_topo_gpu *gp = &out->gpu[s * tp + r];
      for (int k = 0; k < DSV4I_PLAN_NCOMP; k++) gp->weights_total = add(&a, gp->weights_total, gp->weights[k]);
      gp->workspace = ws;
      gp->graphs = graphs;
      gp->comm_nccl = nccl;
      gp->comm_p2p = p2p;
      gp->reserved = p.gpu_reserved_bytes;
      int64_t u = add(&a, gp->weights_total, gp->load_extra > 0 ? gp->load_extra : 0);
      u = add(&a, u, ws);
      u = add(&a, u, graphs);
      u = add(&a, u, nccl);
      u = add(&a, u, p2p);
      u = add(&a, u, gp->reserved);
      gp->used = u;
      gp->kv_pool = p.gpu_mem_bytes - u;
    }
  }

  /* hosts: Engram tables of the stages whose ranks live there, pinned row staging */
  int64_t cols = (int64_t)(cfg->engram_max_ngram - 1) * cfg->engram_n_heads;
  int64_t row = cfg->engram_head_dim + cfg->engram_head_dim / 32;
  for (int32_t s = 0; s < S; s++) {
    dsv4i_topo_stage *sg = &out->stage[s];
    if (sg->n_engram_layers == 0) continue;
    if (p.engram_placement == DSV4I_ENGRAM_HOST) sg->engram_host_per_node = sg->engram_bytes;
    for (int32_t n = sg->first_node; n < sg->first_node + sg->n_nodes; n++) {
      dsv4i_topo_host *h = &out->host[n];
      h->engram = add(&a, h->engram, sg->engram_host_per_node);
      if (p.engram_placement == DSV4I_ENGRAM_HOST) {
        int32_t lo = n * p.gpus_per_node, hi = lo + p.gpus_per_node;
        if (lo < s * tp) lo = s * tp;
        if (hi > (s + 1) * tp) hi = (s + 1) * tp;
        int64_t per_gpu = mul(&a, mul(&a, 2 * n_tok, sg->n_engram_layers), mul(&a, cols, row));
        h->pinned_staging = add(&a, h->pinned_staging, mul(&a, hi - lo, per_gpu));
      }
    }
  }
  for (int32_t n = 0; n < p.nodes; n++)
    out->host[n].total = add(&a, out->host[n].engram, out->host[n].pinned_staging);

  /* KV pools, capacity, concurrency */
  out->token_capacity = INT64_MAX;
  out->seqs_at_context = out->seqs_at_max_context = INT64_MAX;
  out->concurrency_at_max_context = INFINITY;
  for (int32_t s = 0; s < S; s++) {
    dsv4i_topo_stage *sg = &out->stage[s];
    sg->kv_pool = INT64_MAX;
    for (int32_t r = 0; r < tp; r++)
      if (out->gpu[s * tp + r].kv_pool < sg->kv_pool) sg->kv_pool = out->gpu[s * tp + r].kv_pool;
    sg->seq_bytes_max_context = dsv4i_plan_seq_bytes(out, s, p.max_context);
    sg->seq_bytes_context = dsv4i_plan_seq_bytes(out, s, p.context);
    int64_t pool = sg->kv_pool > 0 ? sg->kv_pool : 0;
    sg->token_capacity = sg->kv_per_token > 0 ? (int64_t)floor((double)pool / sg->kv_per_token)
                                              : INT64_MAX;
    sg->seqs_at_context = sg->seq_bytes_context > 0 ? pool / sg->seq_bytes_context : INT64_MAX;
    sg->seqs_at_max_context = sg->seq_bytes_max_context > 0 ? pool / sg->seq_bytes_max_context
                                                            : INT64_MAX;
    double conc = sg->seq_bytes_max_context > 0 ? (double)pool / (double)sg->seq_bytes_max_context
                                                : INFINITY;
    if (sg->token_capacity < out->token_capacity) out->token_capacity = sg->token_capacity;
    if (sg->seqs_at_context < out->seqs_at_context) out->seqs_at_context = sg->seqs_at_context;
    if (sg->seqs_at_max_context < out->seqs_at_max_context)
      out->seqs_at_max_context = sg->seqs_at_max_context;
    if (conc < out->concurrency_at_max_context) out->concurrency_at_max_context = conc;
  }
  free(ti);
  dsv4i_contract_free(&own);
  if (a.ovf) {
    dsv4i_topo_plan_free(out);
    return dsv4i_error(DSV4_ERR_DOES_NOT_FIT,
                       "memory plan: a byte count passes 2^63 (max context %lld, prefill chunk %d)",
                       (long long)p.max_context, (int)p.prefill_chunk);
  }

  /* what does not fit, all of it in one message */
  dsv4i_str msg = {0};
  int n_bad = 0;
  for (int32_t s = 0; s < S; s++) {
    const dsv4i_topo_gpu *gp = &out->gpu[s * tp];
    for (int32_t r = 1; r < tp; r++) /* the rank with the most used memory */
      if (out->gpu[s * tp + r].used > gp->used) gp = &out->gpu[s * tp + r];
    char b[7][32];
    if (gp->kv_pool < 0) {
      int big = 0;
      for (int k = 1; k < DSV4I_PLAN_NCOMP; k++)
        if (gp->weights[k] > gp->weights[big]) big = k;
      gib(b[0], 32, gp->used);
      gib(b[1], 32, p.gpu_mem_bytes);
      gib(b[2], 32, gp->weights_total);
      gib(b[3], 32, gp->weights[big]);
      gib(b[4], 32, gp->workspace);
      gib(b[5], 32, gp->graphs + gp->comm_nccl + gp->comm_p2p);
      gib(b[6], 32, -gp->kv_pool);
      dsv4i_str_appendf(&msg,
                        "%sstage %d GPU (TP rank %d, node %d): GPU memory overflows: weights %s "
                        "(largest: %s %s) + workspace %s + graphs and communication %s + the rest "
                        "= %s > %s of GPU memory, short by %s",
                        n_bad++ ? "; " : "", (int)s, (int)gp->rank, (int)gp->node, b[2],
                        dsv4i_component_name(big), b[3], b[4], b[5], b[0], b[1], b[6]);
      continue;
    }
    const dsv4i_topo_stage *sg = &out->stage[s];
    if (sg->kv_pool < sg->seq_bytes_max_context) {
      gib(b[0], 32, sg->kv_pool);
      gib(b[1], 32, sg->seq_bytes_max_context);
      dsv4i_str_appendf(&msg,
                        "%sstage %d: the KV pool overflows: %s per GPU cannot hold one sequence at "
                        "max context %lld (%s: %lld B fixed + %.1f B per token)",
                        n_bad++ ? "; " : "", (int)s, b[0], (long long)p.max_context, b[1],
                        (long long)sg->kv_fixed_per_seq, sg->kv_per_token);
    }
  }
  for (int32_t n = 0; n < p.nodes; n++) {
    if (out->host[n].total <= p.host_mem_bytes) continue;
    char b[3][32];
    gib(b[0], 32, out->host[n].engram);
    gib(b[1], 32, out->host[n].total);
    gib(b[2], 32, p.host_mem_bytes);
    dsv4i_str_appendf(&msg,
                      "%snode %d: host memory overflows: Engram tables %s + pinned staging = %s > "
                      "%s of usable host memory",
                      n_bad++ ? "; " : "", (int)n, b[0], b[1], b[2]);
  }
  if (n_bad) {
    st = dsv4i_error(DSV4_ERR_DOES_NOT_FIT, "memory plan does not fit: %s", dsv4i_str_cstr(&msg));
    dsv4i_str_free(&msg);
    return st;
  }
  return DSV4_OK;
}
