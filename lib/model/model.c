/* The loaded model (see model.h). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "model/model_impl.h"

static const char *comp_bytes(const dsv4i_contract *c, char *buf, size_t cap) {
  uint64_t by[DSV4_COMP_COUNT_V0_1] = {0};
  for (size_t i = 0; i < c->n; i++)
    if (c->specs[i].component >= 0 && c->specs[i].component < DSV4_COMP_COUNT_V0_1)
      by[c->specs[i].component] += c->specs[i].nbytes;
  size_t at = 0;
  buf[0] = '\0';
  for (int k = 0; k < DSV4_COMP_COUNT_V0_1 && at < cap; k++)
    at += (size_t)snprintf(buf + at, cap - at, "%s%s %.2f GB", k ? ", " : "", dsv4i_component_name(k),
                           (double)by[k] / 1e9);
  return buf;
}

/* Tensor i of the contract <-> entry i of the checkpoint: both are sorted by
 * name and, after the contract check, hold the same names. */
static dsv4_status map_shards(struct dsv4_model *m) {
  m->shard_of = dsv4i_malloc((m->contract.n ? m->contract.n : 1) * sizeof *m->shard_of, "the shard table");
  if (!m->shard_of) return DSV4_ERR_OUT_OF_MEMORY;
  for (size_t i = 0; i < m->contract.n; i++) {
    m->shard_of[i] = -1;
    if (!(m->flags & DSV4_MODEL_F_CONFIG_ONLY)) {
      if (i >= m->ckpt.n_entries || strcmp(m->ckpt.entries[i].name, m->contract.specs[i].name) != 0)
        return dsv4i_error(DSV4_ERR_INTERNAL, "tensor table out of step with the checkpoint at %zu", i);
      m->shard_of[i] = m->ckpt.entries[i].shard;
    }
  }
  return DSV4_OK;
}

static dsv4_status open_all(struct dsv4_model *m) {
  char *cfg_path = dsv4i_path_join(m->dir, "config.json");
  if (!cfg_path) return DSV4_ERR_OUT_OF_MEMORY;
  dsv4_status s = dsv4i_config_load(cfg_path, &m->cfg);
  free(cfg_path);
  if (s) return s;
  dsv4i_log(&m->log, DSV4_LOG_DEBUG, "%s: config.json: %d layers + %d DSpark stages, dim %d, vision %s",
            m->dir, (int)m->cfg.n_layers, (int)m->cfg.n_mtp_layers, (int)m->cfg.dim,
            m->cfg.has_vision ? "yes" : "no");
  if ((s = dsv4i_contract_build(&m->cfg, &m->contract))) return s;
  if (!(m->flags & DSV4_MODEL_F_CONFIG_ONLY)) {
    if ((s = dsv4i_checkpoint_open(m->dir, &m->ckpt))) return s;
    if ((s = dsv4i_contract_check(&m->contract, &m->ckpt, m->dir))) return s;
    if (m->ckpt.n_realigned)
      dsv4i_log(&m->log, DSV4_LOG_INFO,
                "%s: %zu tensors are not aligned to their element size in the shards; copied "
                "once into %llu bytes of aligned memory (the rest stays mapped)", m->dir,
                m->ckpt.n_realigned, (unsigned long long)m->ckpt.realigned_bytes);
  }
  if ((s = map_shards(m))) return s;
  if ((s = dsv4i_weights_build(&m->cfg, &m->contract, &m->weights))) return s;
  if (!(m->flags & DSV4_MODEL_F_CONFIG_ONLY))
    for (size_t i = 0; i < m->weights.n; i++) { /* contract index == checkpoint entry index */
      dsv4i_weight *w = &m->weights.w[i];
      w->data = dsv4i_checkpoint_data(&m->ckpt, &m->ckpt.entries[w->spec_index]);
      if (w->scale_spec) w->scale = dsv4i_checkpoint_data(&m->ckpt, &m->ckpt.entries[w->scale_index]);
    }
  return DSV4_OK;
}

dsv4_status dsv4i_model_open(const char *dir, uint32_t flags, const dsv4i_logger *lg,
                             struct dsv4_model **out) {
  *out = NULL;
  struct dsv4_model *m = dsv4i_calloc(1, sizeof *m, "the model handle");
  if (!m) return DSV4_ERR_OUT_OF_MEMORY;
  m->flags = flags;
  if (lg) m->log = *lg;
  m->dir = dsv4i_strdup(dir, "the model directory");
  m->last_error = dsv4i_calloc(1, DSV4I_ERROR_CAP, "the model's error slot");
  dsv4_status s = (!m->dir || !m->last_error) ? DSV4_ERR_OUT_OF_MEMORY : open_all(m);
  if (s) {
    dsv4i_log(lg, DSV4_LOG_INFO, "loading %s failed: %s", dir, dsv4i_error_message());
    dsv4i_model_close(m);
    return s;
  }
  char buf[512];
  dsv4i_log(&m->log, DSV4_LOG_INFO, "%s: %zu tensors, %llu bytes%s (%s)", dir, m->contract.n,
            (unsigned long long)m->contract.payload_bytes,
            (flags & DSV4_MODEL_F_CONFIG_ONLY) ? ", config only" : "",
            comp_bytes(&m->contract, buf, sizeof buf));
  *out = m;
  return DSV4_OK;
}

void dsv4i_model_close(struct dsv4_model *m) {
  if (!m) return;
  dsv4i_checkpoint_close(&m->ckpt);
  dsv4i_weights_free(&m->weights);
  dsv4i_contract_free(&m->contract);
  free(m->shard_of);
  free(m->last_error);
  free(m->dir);
  free(m);
}

const dsv4i_config *dsv4i_model_config(const struct dsv4_model *m) { return &m->cfg; }
const dsv4i_contract *dsv4i_model_contract(const struct dsv4_model *m) { return &m->contract; }
const dsv4i_weights *dsv4i_model_weights(const struct dsv4_model *m) { return &m->weights; }
const char *dsv4i_model_dir(const struct dsv4_model *m) { return m->dir; }
uint32_t dsv4i_model_flags(const struct dsv4_model *m) { return m->flags; }
char *dsv4i_model_error_slot(const struct dsv4_model *m) { return m->last_error; }
int32_t dsv4i_model_shard_of(const struct dsv4_model *m, size_t i) {
  return i < m->contract.n ? m->shard_of[i] : -1;
}

uint64_t dsv4i_model_realigned_bytes(const struct dsv4_model *m) { return m->ckpt.realigned_bytes; }
