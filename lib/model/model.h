/*
 * The loaded model behind the public dsv4_model handle: parsed config and
 * role table, tensor contract, and (unless config-only) the mmapped
 * checkpoint whose tensor set equals the contract. The engine reads
 * weights through dsv4i_model_tensor().
 */
#ifndef DSV4I_MODEL_H
#define DSV4I_MODEL_H

#include "base/base.h"
#include "io/safetensors.h"
#include "model/config.h"

struct dsv4_model {
  char *dir;                 /* the checkpoint directory as given */
  uint32_t flags;            /* DSV4_MODEL_F_* */
  dsv4i_logger log;          /* per-handle sink (fn NULL: global) */
  dsv4i_config cfg;
  dsv4i_contract contract;   /* sorted by name: the tensor table */
  dsv4i_checkpoint ckpt;     /* zeroed with DSV4_MODEL_F_CONFIG_ONLY */
  int32_t *shard_of;         /* [contract.n] shard of tensor i, -1 when config-only */
  char *last_error;          /* [DSV4I_ERROR_CAP] message of the last failed call on the handle */
};

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

/**
 * A tensor by checkpoint name: its contract entry, and its bytes in the
 * mapping (NULL for a config-only model). Returns NULL (no error recorded)
 * when the contract has no such tensor.
 */
const dsv4i_tensor_spec *dsv4i_model_tensor(const struct dsv4_model *m, const char *name,
                                            const void **data);

#endif /* DSV4I_MODEL_H */
