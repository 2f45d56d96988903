/*
 * The model handle's layout: lib/model only (model.h is the interface).
 */
#ifndef DSV4I_MODEL_IMPL_H
#define DSV4I_MODEL_IMPL_H

#include "io/safetensors.h"
#include "model/model.h"

struct dsv4_model {
  char *dir;                 /* the checkpoint directory as given */
  uint32_t flags;            /* DSV4_MODEL_F_* */
  dsv4i_logger log;          /* per-handle sink (fn NULL: global) */
  dsv4i_config cfg;
  dsv4i_contract contract;   /* sorted by name: the tensor table */
  dsv4i_checkpoint ckpt;     /* zeroed with DSV4_MODEL_F_CONFIG_ONLY */
  int32_t *shard_of;         /* [contract.n] shard of tensor i, -1 when config-only */
  dsv4i_weights weights;    /* by (role, layer, expert), data filled from ckpt */
  char *last_error;          /* [DSV4I_ERROR_CAP] message of the last failed call on the handle */
};

#endif /* DSV4I_MODEL_IMPL_H */
