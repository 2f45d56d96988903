/*
 * Stage topology (topology.h): the boundary rule from the config's source
 * lists, the stage layout and the TP size check.
 */
#include <stdio.h>
#include <string.h>

#include "dist/topology.h"
#include "model/config.h"

/* The first read of shared state across a boundary before `layer`: fills
 * *reader, *producer and *what and returns 1, or returns 0 when none. */
static int first_crossing(const dsv4i_config *cfg, int32_t layer, int32_t *reader,
                          int32_t *producer, const char **what) {
  for (int32_t l = layer; l < cfg->n_layers; l++) {
    const dsv4i_layer_role *r = &cfg->layers[l];
    struct {
      int32_t src;
      const char *what;
    } reads[] = {
      {r->kv_source, "compressed KV (text_config.kv_source_layer_ids)"},
      {r->index_source, "top-k indices (text_config.index_source_layer_ids)"},
      {r->index_key_source, "index keys (text_config.kv_source_layer_ids)"},
      {r->candidate_source, "candidate mask (text_config.candidate_source_layer_id)"},
    };
    for (size_t i = 0; i < DSV4I_ARRAY_LEN(reads); i++)
      if (reads[i].src >= 0 && reads[i].src < layer) {
        *reader = l;
        *producer = reads[i].src;
        *what = reads[i].what;
        return 1;
      }
  }
  /* the DSpark stages live on the last stage and read the input stream of their target
   * layers: a target before the boundary would have to travel */
  for (int32_t i = 0; i < cfg->n_dspark_targets; i++)
    if (cfg->n_mtp_layers > 0 && cfg->dspark_targets[i] < layer) {
      *reader = cfg->n_layers; /* the DSpark stages */
      *producer = cfg->dspark_targets[i];
      *what = "DSpark main_hidden tap (text_config.dspark_target_layer_ids)";
      return 1;
    }
  return 0;
}

int32_t dsv4i_dist_boundaries(const dsv4i_config *cfg, int32_t *layers, int32_t cap) {
  int32_t n = 0;
  for (int32_t l = 1; l < cfg->n_layers; l++) {
    int32_t reader, producer;
    const char *what;
    if (first_crossing(cfg, l, &reader, &producer, &what)) continue;
    if (n < cap) layers[n] = l;
    n++;
  }
  return n;
}

/* "1, 2, 8" or "none" */
static void boundary_list(const dsv4i_config *cfg, char *buf, size_t cap) {
  int32_t b[DSV4I_MAX_LIST];
  int32_t n = dsv4i_dist_boundaries(cfg, b, DSV4I_MAX_LIST);
  buf[0] = 0;
  for (int32_t i = 0; i < n; i++) {
    size_t len = strlen(buf);
    snprintf(buf + len, cap - len, "%s%d", i ? ", " : "", (int)b[i]);
  }
  if (n == 0) snprintf(buf, cap, "none");
}

dsv4_status dsv4i_dist_split_check(const dsv4i_config *cfg, int32_t layer) {
  if (layer < 1 || layer >= cfg->n_layers)
    return dsv4i_error(DSV4_ERR_INVALID_ARG,
                       "stage boundary before layer %d: a non-first stage starts at a layer in "
                       "[1, %d)",
                       (int)layer, (int)cfg->n_layers);
  int32_t reader, producer;
  const char *what;
  if (!first_crossing(cfg, layer, &reader, &producer, &what)) return DSV4_OK;
  char list[256];
  boundary_list(cfg, list, sizeof list);
  char who[32];
  if (reader >= cfg->n_layers) snprintf(who, sizeof who, "the DSpark stages");
  else snprintf(who, sizeof who, "layer %d", (int)reader);
  return dsv4i_error(DSV4_ERR_UNSUPPORTED,
                     "a stage cannot start at layer %d: %s read%s the %s of layer %d, which "
                     "would cross the stage boundary (design.md §6); allowed first layers: %s",
                     (int)layer, who, reader >= cfg->n_layers ? "" : "s", what, (int)producer,
                     list);
}

dsv4_status dsv4i_dist_topo_make(const dsv4i_config *cfg, int32_t world, int32_t tp,
                                 int32_t pp, const int32_t *stage_first, dsv4i_dist_topo *out) {
  memset(out, 0, sizeof *out);
  if (tp < 1 || pp < 1 || pp > DSV4I_DIST_MAX_STAGES || pp > cfg->n_layers)
    return dsv4i_error(DSV4_ERR_INVALID_ARG,
                       "topology: TP %d must be >= 1 and PP %d in [1, %d]", (int)tp, (int)pp,
                       (int)(cfg->n_layers < DSV4I_DIST_MAX_STAGES ? cfg->n_layers
                                                                    : DSV4I_DIST_MAX_STAGES));
  if ((int64_t)tp * pp != world)
    return dsv4i_error(DSV4_ERR_INVALID_ARG,
                       "topology: TP %d x PP %d = %d ranks, but the communicator has %d",
                       (int)tp, (int)pp, (int)(tp * pp), (int)world);
  int32_t iblocks = cfg->moe_inter_dim / 32;
  if (cfg->n_heads % tp || cfg->o_groups % tp || cfg->moe_inter_dim % 32 || iblocks % tp)
    return dsv4i_error(DSV4_ERR_UNSUPPORTED,
                       "topology: TP %d must divide the attention heads (%d), the wo_a groups "
                       "(%d) and the expert intermediate dimension in 32-blocks (%d / 32)",
                       (int)tp, (int)cfg->n_heads, (int)cfg->o_groups, (int)cfg->moe_inter_dim);
  if (stage_first[0] != 0)
    return dsv4i_error(DSV4_ERR_INVALID_ARG, "topology: stage 0 must start at layer 0 (got %d)",
                       (int)stage_first[0]);
  for (int32_t s = 1; s < pp; s++) {
    if (stage_first[s] <= stage_first[s - 1] || stage_first[s] >= cfg->n_layers)
      return dsv4i_error(DSV4_ERR_INVALID_ARG,
                         "topology: stage %d starts at layer %d; first layers must increase "
                         "and stay below %d",
                         (int)s, (int)stage_first[s], (int)cfg->n_layers);
    dsv4_status st = dsv4i_dist_split_check(cfg, stage_first[s]);
    if (st != DSV4_OK) {
      dsv4i_error_prefix("topology, stage %d", (int)s);
      return st;
    }
  }
  out->world = world;
  out->tp = tp;
  out->pp = pp;
  memcpy(out->first, stage_first, sizeof(int32_t) * (size_t)pp);
  out->first[pp] = cfg->n_layers;
  return DSV4_OK;
}

void dsv4i_dist_place_of(const dsv4i_dist_topo *t, int32_t rank, dsv4i_dist_place *out) {
  memset(out, 0, sizeof *out);
  out->rank = rank;
  out->stage = rank / t->tp;
  out->tp_rank = rank % t->tp;
  out->first = t->first[out->stage];
  out->last = t->first[out->stage + 1];
  out->has_embed = out->stage == 0;
  out->has_head = out->stage == t->pp - 1;
}

int32_t dsv4i_dist_stage_of_layer(const dsv4i_dist_topo *t, int32_t layer) {
  int32_t s = 0;
  while (s + 1 < t->pp && layer >= t->first[s + 1]) s++;
  return s;
}
