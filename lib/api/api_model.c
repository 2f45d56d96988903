/*
 * Exported model entry points: argument checks, size-prefixed struct
 * handling, error capture into the thread-local and per-handle slots. The
 * work is lib/model (model.c, config*.c, roles.c, contract.c).
 */
#include <stddef.h>
#include <string.h>

#include "base/base.h"
#include "dsv4/dsv4.h"
#include "model/model.h"

/* Oldest accepted dsv4_model_params: the 0.1 fields through log_level
 * (reserved0 is never read, so a struct ending before it is complete). */
#define PARAMS_MIN_SIZE (offsetof(dsv4_model_params, log_level) + sizeof(int32_t))
#define KNOWN_FLAGS ((uint32_t)DSV4_MODEL_F_CONFIG_ONLY)

static size_t min_size(size_t a, size_t b) { return a < b ? a : b; }

/* Copy the thread's message into the handle's slot when a call on it fails. */
static dsv4_status on_handle(const dsv4_model *m, dsv4_status s) {
  char *slot = m ? dsv4i_model_error_slot(m) : NULL;
  if (s < 0 && slot) {
    strncpy(slot, dsv4i_error_message(), DSV4I_ERROR_CAP - 1);
    slot[DSV4I_ERROR_CAP - 1] = '\0';
  }
  return s;
}

static void defaults(dsv4_model_params *p) {
  p->flags = 0;
  p->log_fn = NULL;
  p->log_user_data = NULL;
  p->log_level = DSV4_LOG_WARN;
  p->reserved0 = 0;
}

DSV4_API dsv4_status dsv4_model_params_init(dsv4_model_params *params, size_t struct_size) {
  dsv4i_error_clear();
  if (!params) return dsv4i_error(DSV4_ERR_INVALID_ARG, "dsv4_model_params_init: params is NULL");
  if (struct_size < PARAMS_MIN_SIZE || struct_size > UINT32_MAX)
    return dsv4i_error(DSV4_ERR_PARAMS_SIZE,
                       "dsv4_model_params_init: struct_size %zu is below the oldest supported size %zu",
                       struct_size, (size_t)PARAMS_MIN_SIZE);
  dsv4_model_params d;
  defaults(&d);
  d.struct_size = (uint32_t)struct_size;
  memset(params, 0, struct_size); /* fields of a newer header: 0 = their default */
  memcpy(params, &d, min_size(struct_size, sizeof d));
  return DSV4_OK;
}

DSV4_API dsv4_status dsv4_model_load(const char *dir, const dsv4_model_params *params,
                                     dsv4_model **out) {
  dsv4i_error_clear();
  if (out) *out = NULL;
  if (!dir || !out)
    return dsv4i_error(DSV4_ERR_INVALID_ARG, "dsv4_model_load: %s is NULL", dir ? "out" : "dir");
  if (!*dir) return dsv4i_error(DSV4_ERR_INVALID_ARG, "dsv4_model_load: dir is an empty string");
  dsv4_model_params p;
  defaults(&p);
  p.struct_size = sizeof p;
  if (params) {
    if (params->struct_size < PARAMS_MIN_SIZE)
      return dsv4i_error(DSV4_ERR_PARAMS_SIZE,
                         "dsv4_model_load: params->struct_size %u is below the oldest supported size %zu "
                         "(fill params with dsv4_model_params_init)",
                         (unsigned)params->struct_size, (size_t)PARAMS_MIN_SIZE);
    memcpy(&p, params, min_size(params->struct_size, sizeof p));
  }
  if (p.flags & ~KNOWN_FLAGS)
    return dsv4i_error(DSV4_ERR_INVALID_ARG, "dsv4_model_load: unknown flags 0x%x",
                       (unsigned)(p.flags & ~KNOWN_FLAGS));
  dsv4i_logger lg = {p.log_fn, p.log_user_data, p.log_level};
  return dsv4i_model_open(dir, p.flags, &lg, out);
}

DSV4_API void dsv4_model_free(dsv4_model *model) { dsv4i_model_close(model); }

DSV4_API const char *dsv4_model_last_error(const dsv4_model *model) {
  return model && dsv4i_model_error_slot(model) ? dsv4i_model_error_slot(model) : "";
}

/* Size-prefixed output: zero the caller's struct_size bytes, then fill ours. */
static dsv4_status out_struct(const dsv4_model *m, const void *info, size_t struct_size,
                              size_t ours, const char *fn) {
  if (!m) return dsv4i_error(DSV4_ERR_INVALID_ARG, "%s: model is NULL", fn);
  if (!info) return on_handle(m, dsv4i_error(DSV4_ERR_INVALID_ARG, "%s: info is NULL", fn));
  if (struct_size < ours || struct_size > UINT32_MAX)
    return on_handle(m, dsv4i_error(DSV4_ERR_INVALID_ARG,
                                    "%s: struct_size %zu is below the 0.1 size %zu", fn,
                                    struct_size, ours));
  return DSV4_OK;
}

DSV4_API dsv4_status dsv4_model_get_info(const dsv4_model *model, dsv4_model_info *info,
                                         size_t struct_size) {
  dsv4i_error_clear();
  /* the 0.1 size ends at payload_bytes; later fields are filled when struct_size covers them */
  dsv4_status s = out_struct(model, info, struct_size, offsetof(dsv4_model_info, index_n_heads),
                             "dsv4_model_get_info");
  if (s) return s;
  const dsv4i_config *c = dsv4i_model_config(model);
  dsv4_model_info v;
  memset(&v, 0, sizeof v);
  v.struct_size = (uint32_t)min_size(struct_size, sizeof v);
  v.vocab_size = c->vocab_size;
  v.hidden_size = c->dim;
  v.n_layers = c->n_layers;
  v.n_mtp_layers = c->n_mtp_layers;
  v.n_heads = c->n_heads;
  v.head_dim = c->head_dim;
  v.rope_head_dim = c->rope_head_dim;
  v.n_routed_experts = c->n_routed_experts;
  v.n_experts_per_tok = c->n_experts_per_tok;
  v.sliding_window = c->window_size;
  v.hc_mult = c->hc_mult;
  v.bos_token_id = c->bos_token_id;
  v.eos_token_id = c->eos_token_id;
  v.pad_token_id = c->pad_token_id;
  v.image_token_id = c->image_token_id;
  v.dspark_noise_token_id = c->dspark_noise_token_id;
  v.dspark_block_size = c->dspark_block_size;
  v.max_position_embeddings = c->max_position_embeddings;
  v.n_tensors = (int64_t)dsv4i_model_contract(model)->n;
  v.payload_bytes = (int64_t)dsv4i_model_contract(model)->payload_bytes;
  v.index_n_heads = c->index_n_heads;
  v.index_head_dim = c->index_head_dim;
  v.index_topk = c->index_topk;
  v.engram_cols = c->n_engram > 0 ? (c->engram_max_ngram - 1) * c->engram_n_heads : 0;
  v.engram_head_dim = c->engram_head_dim;
  v.n_engram_layers = c->n_engram;
  v.dspark_n_routed_experts = c->dspark_n_routed_experts;
  v.dspark_n_experts_per_tok = c->dspark_n_experts_per_tok;
  v.window_record_bytes = (int32_t)dsv4i_kv_record_bytes(c, DSV4I_KVREC_WINDOW);
  v.compressed_record_bytes = (int32_t)dsv4i_kv_record_bytes(c, DSV4I_KVREC_COMPRESSED);
  v.index_key_record_bytes = (int32_t)dsv4i_kv_record_bytes(c, DSV4I_KVREC_INDEX_KEY);
  v.compressor_state_record_bytes = 2 * c->head_dim * (int32_t)sizeof(float);
  memset(info, 0, struct_size);
  memcpy(info, &v, min_size(struct_size, sizeof v));
  return DSV4_OK;
}

DSV4_API dsv4_status dsv4_model_get_layer(const dsv4_model *model, int32_t layer,
                                          dsv4_layer_info *info, size_t struct_size) {
  dsv4i_error_clear();
  dsv4_status s = out_struct(model, info, struct_size, sizeof *info, "dsv4_model_get_layer");
  if (s) return s;
  const dsv4i_config *c = dsv4i_model_config(model);
  if (layer < 0 || layer >= c->n_total_layers)
    return on_handle(model, dsv4i_error(DSV4_ERR_INVALID_ARG,
                                        "dsv4_model_get_layer: layer %d is outside [0, %d)",
                                        (int)layer, (int)c->n_total_layers));
  const dsv4i_layer_role *r = &c->layers[layer];
  dsv4_layer_info v;
  memset(&v, 0, sizeof v);
  v.struct_size = (uint32_t)min_size(struct_size, sizeof v);
  v.layer = layer;
  v.compress_ratio = r->compress_ratio;
  v.roles = r->roles;
  v.kv_source = r->kv_source;
  v.index_source = r->index_source;
  v.index_key_source = r->index_key_source;
  v.candidate_source = r->candidate_source;
  v.engram_slot = r->engram_slot;
  v.rope_yarn = r->rope_yarn;
  memset(info, 0, struct_size);
  memcpy(info, &v, sizeof v);
  return DSV4_OK;
}

DSV4_API dsv4_status dsv4_model_get_tensor(const dsv4_model *model, int64_t i,
                                           dsv4_tensor_info *info, size_t struct_size) {
  dsv4i_error_clear();
  /* the 0.1 size ends at name; the weight-table key is filled when struct_size covers it */
  dsv4_status s = out_struct(model, info, struct_size, offsetof(dsv4_tensor_info, layer),
                             "dsv4_model_get_tensor");
  if (s) return s;
  const dsv4i_contract *con = dsv4i_model_contract(model);
  if (i < 0 || (uint64_t)i >= con->n)
    return on_handle(model, dsv4i_error(DSV4_ERR_INVALID_ARG,
                                        "dsv4_model_get_tensor: index %lld is outside [0, %zu)",
                                        (long long)i, con->n));
  const dsv4i_tensor_spec *t = &con->specs[i];
  dsv4_tensor_info v;
  memset(&v, 0, sizeof v);
  v.struct_size = (uint32_t)min_size(struct_size, sizeof v);
  v.dtype = t->dtype;
  v.ndim = t->ndim;
  v.component = t->component;
  v.shard = dsv4i_model_shard_of(model, (size_t)i);
  for (int32_t d = 0; d < t->ndim && d < 4; d++) v.shape[d] = t->shape[d];
  v.nbytes = (int64_t)t->nbytes;
  v.name = t->name;
  int is_scale = 0;
  const dsv4i_weight *w = dsv4i_weights_of_tensor(dsv4i_model_weights(model), (size_t)i, &is_scale);
  if (!w)
    return on_handle(model, dsv4i_error(DSV4_ERR_INTERNAL, "dsv4_model_get_tensor: tensor %s "
                                        "has no entry in the weight table", t->name));
  v.layer = w->layer;
  v.expert = w->expert;
  v.role = dsv4i_weight_role_key(w->role);
  v.is_scale = is_scale;
  memset(info, 0, struct_size);
  memcpy(info, &v, min_size(struct_size, sizeof v));
  return DSV4_OK;
}
