/*
 * Exported memory-plan entry points: argument checks, size-prefixed struct
 * handling, error capture. The work is lib/engine/plan_topo.c.
 */
#include <stddef.h>
#include <stdlib.h>
#include <string.h>

#include "base/base.h"
#include "dsv4/dsv4.h"
#include "engine/plan.h"
#include "model/config.h"
#include "model/model.h"

/* Oldest accepted sizes: dsv4_plan_params through reserved0 (all of 0.1), and
 * dsv4_plan through its stages' array start (stages beyond struct_size are cut). */
#define PARAMS_MIN_SIZE (offsetof(dsv4_plan_params, kv_page_entries) + sizeof(int32_t))
#define PLAN_MIN_SIZE offsetof(dsv4_plan, stages)

static size_t min_size(size_t a, size_t b) { return a < b ? a : b; }

static void to_internal(const dsv4_plan_params *s, dsv4i_topo_params *d) {
  memset(d, 0, sizeof *d);
  d->flags = s->flags;
  d->nodes = s->nodes;
  d->gpus_per_node = s->gpus_per_node;
  d->tp = s->tp;
  d->pp = s->pp;
  memcpy(d->stage_first, s->stage_first_layer, sizeof d->stage_first);
  d->gpu_mem_bytes = s->gpu_mem_bytes;
  d->gpu_reserved_bytes = s->gpu_reserved_bytes;
  d->host_mem_bytes = s->host_mem_bytes;
  d->kv_format = s->kv_format;
  d->engram_placement = s->engram_placement;
  d->max_context = s->max_context;
  d->context = s->context;
  d->prefill_chunk = s->prefill_chunk;
  d->draft_tokens = s->draft_tokens;
  d->n_buckets = s->n_buckets;
  memcpy(d->buckets, s->buckets, sizeof d->buckets);
  d->graph_bytes = s->graph_bytes;
  d->nccl_bytes = s->nccl_bytes;
  d->kv_page_entries = s->kv_page_entries;
}

static void defaults(dsv4_plan_params *p) {
  dsv4i_topo_params d;
  dsv4i_topo_params_default(&d);
  memset(p, 0, sizeof *p);
  p->struct_size = sizeof *p;
  p->flags = d.flags;
  p->nodes = d.nodes;
  p->gpus_per_node = d.gpus_per_node;
  p->tp = d.tp;
  p->pp = d.pp;
  p->gpu_mem_bytes = d.gpu_mem_bytes;
  p->gpu_reserved_bytes = d.gpu_reserved_bytes;
  p->host_mem_bytes = d.host_mem_bytes;
  p->kv_format = d.kv_format;
  p->engram_placement = d.engram_placement;
  p->max_context = d.max_context;
  p->context = d.context;
  p->prefill_chunk = d.prefill_chunk;
  p->draft_tokens = d.draft_tokens;
  p->n_buckets = d.n_buckets;
  memcpy(p->buckets, d.buckets, sizeof p->buckets);
  p->graph_bytes = d.graph_bytes;
  p->nccl_bytes = d.nccl_bytes;
  p->kv_page_entries = d.kv_page_entries;
}

DSV4_API dsv4_status dsv4_plan_params_init(dsv4_plan_params *params, size_t struct_size) {
  dsv4i_error_clear();
  if (!params) return dsv4i_error(DSV4_ERR_INVALID_ARG, "dsv4_plan_params_init: params is NULL");
  if (struct_size < PARAMS_MIN_SIZE || struct_size > UINT32_MAX)
    return dsv4i_error(DSV4_ERR_PARAMS_SIZE,
                       "dsv4_plan_params_init: struct_size %zu is below the oldest supported size %zu",
                       struct_size, (size_t)PARAMS_MIN_SIZE);
  dsv4_plan_params d;
  defaults(&d);
  d.struct_size = (uint32_t)struct_size;
  memset(params, 0, struct_size);
  memcpy(params, &d, min_size(struct_size, sizeof d));
  return DSV4_OK;
}

static void export_plan(const dsv4i_topo_plan *in, dsv4_plan *o) {
  memset(o, 0, sizeof *o);
  o->struct_size = sizeof *o;
  o->n_stages = in->n_stages;
  o->tp = in->tp;
  o->n_gpus = in->n_gpus;
  o->nodes = in->nodes;
  o->gpus_per_node = in->params.gpus_per_node;
  o->kv_format = in->params.kv_format;
  o->engram_placement = in->params.engram_placement;
  o->flags = in->params.flags;
  o->gpu_mem_bytes = in->params.gpu_mem_bytes;
  o->host_mem_bytes = in->params.host_mem_bytes;
  o->max_context = in->params.max_context;
  o->context = in->params.context;
  o->n_tensors = in->n_tensors;
  o->checkpoint_bytes = in->contract_bytes;
  for (int k = 0; k < DSV4I_PLAN_NCOMP; k++) o->component_bytes[k] = in->component_bytes[k];
  o->window_record_bytes = in->window_record;
  o->compressed_record_bytes = in->compressed_record;
  o->index_key_record_bytes = in->index_key_record;
  o->kv_bytes_per_token = in->kv_per_token;
  o->kv_fixed_per_seq = in->kv_fixed_per_seq;
  for (int32_t n = 0; n < in->nodes; n++)
    if (n == 0 || in->host[n].total > o->host_bytes_max) {
      o->host_bytes_max = in->host[n].total;
      o->host_node_max = n;
    }
  o->token_capacity = in->token_capacity;
  o->seqs_at_context = in->seqs_at_context;
  o->seqs_at_max_context = in->seqs_at_max_context;
  o->concurrency_at_max_context = in->concurrency_at_max_context;
  for (int32_t s = 0; s < in->n_stages && s < DSV4_PLAN_MAX_STAGES; s++) {
    const dsv4i_topo_stage *a = &in->stage[s];
    const dsv4i_topo_gpu *g = &in->gpu[s * in->tp]; /* rank 0: the largest share */
    dsv4_plan_stage *b = &o->stages[s];
    b->first_layer = a->first_layer;
    b->n_layers = a->n_layers;
    b->first_node = a->first_node;
    b->n_nodes = a->n_nodes;
    b->holds = (a->has_embed ? DSV4_PLAN_HOLDS_EMBED : 0u) | (a->has_head ? DSV4_PLAN_HOLDS_HEAD : 0u) |
               (a->has_dspark ? DSV4_PLAN_HOLDS_DSPARK : 0u) |
               (a->has_vision ? DSV4_PLAN_HOLDS_VISION : 0u) |
               (a->n_engram_layers ? DSV4_PLAN_HOLDS_ENGRAM : 0u);
    b->n_engram_layers = a->n_engram_layers;
    b->n_kv_sources = a->n_kv_sources;
    for (int k = 0; k < DSV4I_PLAN_NCOMP; k++) {
      b->weights[k] = g->weights[k];
      b->replicated[k] = g->replicated[k];
      b->owned[k] = a->owned[k];
    }
    b->weights_total = g->weights_total;
    b->load_extra = g->load_extra;
    b->workspace = g->workspace;
    b->graphs = g->graphs;
    b->comm_nccl = g->comm_nccl;
    b->comm_p2p = g->comm_p2p;
    b->reserved = g->reserved;
    b->used = g->used;
    b->kv_pool = a->kv_pool;
    b->engram_bytes = a->engram_bytes;
    b->engram_host_per_node = a->engram_host_per_node;
    b->kv_bytes_per_token = a->kv_per_token;
    b->kv_fixed_window = a->kv_fixed_window;
    b->kv_fixed_dspark = a->kv_fixed_dspark;
    b->kv_fixed_compressor = a->kv_fixed_compressor;
    b->kv_fixed_per_seq = a->kv_fixed_per_seq;
    b->seq_bytes_max_context = a->seq_bytes_max_context;
    b->seq_bytes_context = a->seq_bytes_context;
    b->token_capacity = a->token_capacity;
    b->seqs_at_context = a->seqs_at_context;
    b->seqs_at_max_context = a->seqs_at_max_context;
  }
}

/* Checks shared by both entry points; fills *ip. */
static dsv4_status prepare(const char *fn, const dsv4_plan_params *params, dsv4_plan *plan,
                           size_t struct_size, dsv4i_topo_params *ip) {
  if (!plan) return dsv4i_error(DSV4_ERR_INVALID_ARG, "%s: plan is NULL", fn);
  if (struct_size < PLAN_MIN_SIZE || struct_size > UINT32_MAX)
    return dsv4i_error(DSV4_ERR_PARAMS_SIZE, "%s: struct_size %zu is below the oldest supported size %zu",
                       fn, struct_size, (size_t)PLAN_MIN_SIZE);
  dsv4_plan_params p;
  defaults(&p);
  if (params) {
    if (params->struct_size < PARAMS_MIN_SIZE)
      return dsv4i_error(DSV4_ERR_PARAMS_SIZE,
                         "%s: params->struct_size %u is below the oldest supported size %zu "
                         "(fill params with dsv4_plan_params_init)",
                         fn, (unsigned)params->struct_size, (size_t)PARAMS_MIN_SIZE);
    memcpy(&p, params, min_size(params->struct_size, sizeof p));
  }
  to_internal(&p, ip);
  return DSV4_OK;
}

/* Run the planner; on success or DOES_NOT_FIT copy the figures out. */
static dsv4_status run(const dsv4i_config *cfg, const dsv4i_contract *con,
                       const dsv4i_topo_params *ip, dsv4_plan *plan, size_t struct_size) {
  dsv4i_topo_plan tp;
  dsv4_status st = dsv4i_plan_compute(cfg, con, ip, &tp);
  if (st == DSV4_OK || st == DSV4_ERR_DOES_NOT_FIT) {
    dsv4_plan o;
    if (tp.gpu) {
      export_plan(&tp, &o);
    } else { /* a byte count passed 2^63: no figures */
      memset(&o, 0, sizeof o);
    }
    o.struct_size = (uint32_t)struct_size;
    memset(plan, 0, struct_size);
    memcpy(plan, &o, min_size(struct_size, sizeof o));
  }
  dsv4i_topo_plan_free(&tp);
  return st;
}

DSV4_API dsv4_status dsv4_model_plan(const dsv4_model *model, const dsv4_plan_params *params,
                                     dsv4_plan *plan, size_t struct_size) {
  dsv4i_error_clear();
  dsv4i_topo_params ip;
  dsv4_status st;
  if (!model) {
    st = dsv4i_error(DSV4_ERR_INVALID_ARG, "dsv4_model_plan: model is NULL");
  } else if ((st = prepare("dsv4_model_plan", params, plan, struct_size, &ip)) == DSV4_OK) {
    st = run(dsv4i_model_config(model), dsv4i_model_contract(model), &ip, plan, struct_size);
  }
  char *slot = model ? dsv4i_model_error_slot(model) : NULL;
  if (st < 0 && slot) {
    strncpy(slot, dsv4i_error_message(), DSV4I_ERROR_CAP - 1);
    slot[DSV4I_ERROR_CAP - 1] = '\0';
  }
  return st;
}

DSV4_API dsv4_status dsv4_plan_config(const char *config_path, const dsv4_plan_params *params,
                                      dsv4_plan *plan, size_t struct_size) {
  dsv4i_error_clear();
  dsv4i_topo_params ip;
  dsv4_status st = prepare("dsv4_plan_config", params, plan, struct_size, &ip);
  if (st) return st;
  dsv4i_config *cfg = dsv4i_calloc(1, sizeof *cfg, "the config");
  if (!cfg) return DSV4_ERR_OUT_OF_MEMORY;
  if (config_path)
    st = dsv4i_config_load(config_path, cfg);
  else
    st = dsv4i_config_parse(dsv4i_plan_builtin_config, dsv4i_plan_builtin_config_size,
                            "the built-in DeepSeek-V4.1-Flash config", cfg);
  if (st == DSV4_OK) st = run(cfg, NULL, &ip, plan, struct_size);
  free(cfg);
  return st;
}
