/*
 * Layer-role table (spec §2.3): which layers compute compressed KV, run the
 * indexer, own index keys, publish or use the candidate mask, apply
 * Engram, feed DSpark; and the consistency of the config lists that
 * define them. Messages name the config.json key.
 */
#include "model/config.h"

#define TRY(x)                    \
  do {                            \
    dsv4_status s_ = (x);         \
    if (s_ != DSV4_OK) return s_; \
  } while (0)

/* Ids strictly ascending (so sorted and unique) inside [0, n_layers). */
static dsv4_status check_ids(const char *key, const int32_t *ids, int32_t n, int32_t n_layers) {
  for (int32_t i = 0; i < n; i++) {
    if (ids[i] < 0 || ids[i] >= n_layers)
      return dsv4i_error(DSV4_ERR_CONFIG_VALUE,
                         "text_config.%s[%d] = %d is outside the backbone layers [0, %d)", key,
                         (int)i, (int)ids[i], (int)n_layers);
    if (i > 0 && ids[i] == ids[i - 1])
      return dsv4i_error(DSV4_ERR_CONFIG_VALUE, "text_config.%s lists layer %d twice", key,
                         (int)ids[i]);
    if (i > 0 && ids[i] < ids[i - 1])
      return dsv4i_error(DSV4_ERR_CONFIG_VALUE,
                         "text_config.%s is not sorted ascending (%d after %d)", key, (int)ids[i],
                         (int)ids[i - 1]);
  }
  return DSV4_OK;
}

static int contains(const int32_t *ids, int32_t n, int32_t v) {
  for (int32_t i = 0; i < n; i++)
    if (ids[i] == v) return 1;
  return 0;
}

static int32_t slot_of(const int32_t *ids, int32_t n, int32_t v) {
  for (int32_t i = 0; i < n; i++)
    if (ids[i] == v) return i;
  return -1;
}

static dsv4_status check_ratios(const dsv4i_config *c) {
  int32_t total = c->n_layers + c->n_mtp_layers;
  if (c->n_layers < 1 || c->n_mtp_layers < 0 || total > DSV4I_MAX_LIST)
    return dsv4i_error(DSV4_ERR_CONFIG_VALUE,
                       "num_hidden_layers (%d) + num_nextn_predict_layers (%d) must be in [1, %d]",
                       (int)c->n_layers, (int)c->n_mtp_layers, DSV4I_MAX_LIST);
  if (c->n_compress_ratios != total)
    return dsv4i_error(DSV4_ERR_CONFIG_VALUE,
                       "text_config.compress_ratios has %d entries; num_hidden_layers (%d) + "
                       "num_nextn_predict_layers (%d) = %d",
                       (int)c->n_compress_ratios, (int)c->n_layers, (int)c->n_mtp_layers, (int)total);
  for (int32_t l = 0; l < total; l++) {
    int32_t r = c->compress_ratios[l];
    if (l >= c->n_layers && r != 0)
      return dsv4i_error(DSV4_ERR_CONFIG_VALUE,
                         "text_config.compress_ratios[%d] = %d: DSpark stage mtp.%d must be "
                         "window-only (ratio 0)",
                         (int)l, (int)r, (int)(l - c->n_layers));
    if (r < 0 || r > 2)
      return dsv4i_error(DSV4_ERR_CONFIG_VALUE,
                         "text_config.compress_ratios[%d] = %d; supported ratios are 0, 1 and 2",
                         (int)l, (int)r);
  }
  return DSV4_OK;
}

static dsv4_status check_sources(const dsv4i_config *c) {
  for (int32_t i = 0; i < c->n_kv_sources; i++) {
    int32_t l = c->kv_sources[i];
    if (c->compress_ratios[l] == 0)
      return dsv4i_error(DSV4_ERR_CONFIG_VALUE,
                         "text_config.kv_source_layer_ids names layer %d, whose compress ratio is 0 "
                         "(a KV source compresses)", (int)l);
    if (!contains(c->index_sources, c->n_index_sources, l))
      return dsv4i_error(DSV4_ERR_CONFIG_VALUE,
                         "text_config.kv_source_layer_ids names layer %d, which is not in "
                         "text_config.index_source_layer_ids (every KV source is an index source)",
                         (int)l);
  }
  for (int32_t i = 0; i < c->n_index_sources; i++) {
    int32_t l = c->index_sources[i];
    if (c->compress_ratios[l] == 0)
      return dsv4i_error(DSV4_ERR_CONFIG_VALUE,
                         "text_config.index_source_layer_ids names layer %d, whose compress ratio is 0",
                         (int)l);
  }
  int32_t cs = c->candidate_source;
  if (cs < 0) return DSV4_OK;
  if (cs >= c->n_layers)
    return dsv4i_error(DSV4_ERR_CONFIG_VALUE,
                       "text_config.candidate_source_layer_id = %d is outside the backbone layers [0, %d)",
                       (int)cs, (int)c->n_layers);
  if (!contains(c->index_sources, c->n_index_sources, cs))
    return dsv4i_error(DSV4_ERR_CONFIG_VALUE,
                       "text_config.candidate_source_layer_id = %d is not in text_config.index_source_layer_ids",
                       (int)cs);
  if (!contains(c->kv_sources, c->n_kv_sources, cs) || c->compress_ratios[cs] != 1)
    return dsv4i_error(DSV4_ERR_CONFIG_VALUE,
                       "text_config.candidate_source_layer_id = %d must be a KV source "
                       "(text_config.kv_source_layer_ids) with compress ratio 1 (it has %d)",
                       (int)cs, (int)c->compress_ratios[cs]);
  return DSV4_OK;
}

static dsv4_status check_lists(const dsv4i_config *c) {
  if (c->n_kv_sources < 0 || c->n_kv_sources > DSV4I_MAX_LIST || c->n_index_sources < 0 ||
      c->n_index_sources > DSV4I_MAX_LIST || c->n_engram < 0 || c->n_engram > DSV4I_MAX_ENGRAM ||
      c->n_dspark_targets < 0 || c->n_dspark_targets > DSV4I_MAX_LIST)
    return dsv4i_error(DSV4_ERR_CONFIG_VALUE, "a layer id list is longer than supported");
  TRY(check_ratios(c));
  TRY(check_ids("kv_source_layer_ids", c->kv_sources, c->n_kv_sources, c->n_layers));
  TRY(check_ids("index_source_layer_ids", c->index_sources, c->n_index_sources, c->n_layers));
  TRY(check_ids("engram_layer_ids", c->engram_layers, c->n_engram, c->n_layers));
  TRY(check_ids("dspark_target_layer_ids", c->dspark_targets, c->n_dspark_targets, c->n_layers));
  if (c->n_dspark_targets != c->n_mtp_layers)
    return dsv4i_error(DSV4_ERR_CONFIG_VALUE,
                       "text_config.dspark_target_layer_ids has %d entries; "
                       "text_config.num_nextn_predict_layers is %d",
                       (int)c->n_dspark_targets, (int)c->n_mtp_layers);
  return check_sources(c);
}

/* A compressing layer needs a KV source and an index source at or before it,
 * with its own ratio (it reads their caches at its compressed rate). */
static dsv4_status check_consumer(const dsv4i_config *c, int32_t l, int32_t kv, int32_t idx) {
  int32_t r = c->compress_ratios[l];
  if (kv < 0)
    return dsv4i_error(DSV4_ERR_CONFIG_VALUE,
                       "layer %d has compress ratio %d (text_config.compress_ratios[%d]) but no KV "
                       "source at or before it (text_config.kv_source_layer_ids starts at %d)",
                       (int)l, (int)r, (int)l, c->n_kv_sources ? (int)c->kv_sources[0] : -1);
  if (idx < 0)
    return dsv4i_error(DSV4_ERR_CONFIG_VALUE,
                       "layer %d has compress ratio %d (text_config.compress_ratios[%d]) but no index "
                       "source at or before it (text_config.index_source_layer_ids starts at %d)",
                       (int)l, (int)r, (int)l, c->n_index_sources ? (int)c->index_sources[0] : -1);
  if (c->compress_ratios[kv] != r)
    return dsv4i_error(DSV4_ERR_CONFIG_VALUE,
                       "layer %d has compress ratio %d but reads the compressed KV of layer %d, "
                       "whose ratio is %d (text_config.compress_ratios)",
                       (int)l, (int)r, (int)kv, (int)c->compress_ratios[kv]);
  return DSV4_OK;
}

dsv4_status dsv4i_config_derive_roles(dsv4i_config *c) {
  TRY(check_lists(c));
  int32_t kv = -1, idx = -1;
  c->n_total_layers = c->n_layers + c->n_mtp_layers;
  for (int32_t l = 0; l < c->n_total_layers; l++) {
    dsv4i_layer_role *r = &c->layers[l];
    int backbone = l < c->n_layers;
    int is_kv = backbone && contains(c->kv_sources, c->n_kv_sources, l);
    int is_idx = backbone && contains(c->index_sources, c->n_index_sources, l);
    if (is_kv) kv = l;
    if (is_idx) idx = l;
    r->compress_ratio = c->compress_ratios[l];
    r->roles = 0;
    r->kv_source = r->index_source = r->index_key_source = r->candidate_source = -1;
    r->engram_slot = backbone ? slot_of(c->engram_layers, c->n_engram, l) : -1;
    r->rope_yarn = r->compress_ratio > 0;
    if (r->compress_ratio > 0) {
      TRY(check_consumer(c, l, kv, idx));
      r->kv_source = kv;
      r->index_source = idx;
    }
    if (is_kv) r->roles |= DSV4_ROLE_KV_SOURCE;
    if (is_idx) {
      r->roles |= DSV4_ROLE_INDEX_SOURCE;
      /* a KV source owns index keys; another index source scores the keys
       * of the latest key-owning source (its KV source) */
      r->index_key_source = kv;
      if (is_kv) r->roles |= DSV4_ROLE_INDEX_OWN_KEYS;
      else if (c->candidate_source >= 0 && l > c->candidate_source) {
        r->roles |= DSV4_ROLE_CANDIDATE_MASKED;
        r->candidate_source = c->candidate_source;
      }
    }
    if (l == c->candidate_source) r->roles |= DSV4_ROLE_CANDIDATE_SOURCE;
    if (r->engram_slot >= 0) r->roles |= DSV4_ROLE_ENGRAM;
    if (backbone && contains(c->dspark_targets, c->n_dspark_targets, l))
      r->roles |= DSV4_ROLE_DSPARK_TAP;
    if (!backbone) r->roles |= DSV4_ROLE_DSPARK_STAGE;
  }
  return DSV4_OK;
}
