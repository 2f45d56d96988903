/*
 * The loaded model behind the public dsv4_model handle: parsed config and
 * role table, tensor contract, and (unless config-only) the mmapped
 * checkpoint whose tensor set equals the contract, and the weight table
 * (weights.h) over it. Everything outside lib/model reads a model through the
 * accessors below and weights by role (dsv4i_model_weight).
 */
#ifndef DSV4I_MODEL_H
#define DSV4I_MODEL_H

#include "base/base.h"
#include "model/config.h"
#include "model/weights.h"

struct dsv4_model; /* opaque outside lib/model (model_impl.h) */

/**
 * Load a checkpoint directory: config.json (parse, validate, roles), the
 * contract, and unless DSV4_MODEL_F_CONFIG_ONLY the checkpoint (index and
 * shards, dsv4i_checkpoint_open) checked against the contract
 * (dsv4i_contract_check). Logs progress through `lg` (may be NULL).
 * @return DSV4_OK; the statuses of dsv4i_config_load, dsv4i_checkpoint_open,
 *         dsv4i_contract_build and dsv4i_contract_check; DSV4_ERR_OUT_OF_MEMORY.
 *         *out is NULL on failure and nothing stays allocated or mapped.
 */
dsv4_status dsv4i_model_open(const char *dir, uint32_t flags, const dsv4i_logger *lg,
                             struct dsv4_model **out);

/** Unmap and free everything. NULL is a no-op. */
void dsv4i_model_close(struct dsv4_model *m);

/** Parsed config with roles. */
const dsv4i_config *dsv4i_model_config(const struct dsv4_model *m);
/** The tensor contract (sorted by name). */
const dsv4i_contract *dsv4i_model_contract(const struct dsv4_model *m);
/** The weight table. */
const dsv4i_weights *dsv4i_model_weights(const struct dsv4_model *m);
/** The checkpoint directory as given. */
const char *dsv4i_model_dir(const struct dsv4_model *m);
/** DSV4_MODEL_F_* flags of the load. */
uint32_t dsv4i_model_flags(const struct dsv4_model *m);
/** Bytes of checkpoint tensors copied to aligned memory at load (not aligned in the shard). */
uint64_t dsv4i_model_realigned_bytes(const struct dsv4_model *m);
/** The handle's last-error slot, char [DSV4I_ERROR_CAP]. */
char *dsv4i_model_error_slot(const struct dsv4_model *m);
/** Shard of contract tensor i, -1 when config-only. */
int32_t dsv4i_model_shard_of(const struct dsv4_model *m, size_t i);

/**
 * A weight by role with its data, checked (dsv4i_weights_get on the model's table).
 * @return DSV4_OK; DSV4_ERR_NOT_FOUND; DSV4_ERR_WEIGHTS. *out NULL on failure.
 */
static inline dsv4_status dsv4i_model_weight(const struct dsv4_model *m, int32_t role,
                                             int32_t layer, int32_t expert, int32_t dtype,
                                             int64_t n_elems, const dsv4i_weight **out) {
  return dsv4i_weights_get(dsv4i_model_weights(m), role, layer, expert, dtype, n_elems, out);
}

#endif /* DSV4I_MODEL_H */
