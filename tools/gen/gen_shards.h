/*
 * Shard layout and writing of a generated checkpoint (spec §4.1): the
 * contract's tensors in model order (embed, layers.0.., mtp.*, norm, head,
 * vision) cut into `n_main` shards of about equal size, a quantised
 * weight's `.scale` right after it in the same shard, then one shard per
 * Engram table (its embed.weight then embed.scale, alone, as in the
 * release); files model-0000N-of-0000M.safetensors and
 * model.safetensors.index.json (metadata.total_size, weight_map).
 */
#ifndef DSV4_GEN_SHARDS_H
#define DSV4_GEN_SHARDS_H

#include <stdint.h>

#include "gen_weights.h"
#include "model/config.h"

/** Progress callback: called after each shard with its file name and byte count. */
typedef void (*gen_progress_fn)(const char *file, int32_t shard, int32_t n_shards,
                                uint64_t bytes, void *user);

/**
 * Write every shard and the index into dir. n_main >= 1 (fewer when there
 * are not enough tensors). *n_shards_out: files written.
 */
dsv4_status gen_shards_write(const dsv4i_contract *ct, gen_weights *g, const char *dir,
                             int32_t n_main, gen_progress_fn progress, void *user,
                             int32_t *n_shards_out);

#endif /* DSV4_GEN_SHARDS_H */
