/*
 * Pipeline topology of a distributed engine (design.md §6; docs/distributed.md):
 * which MPI rank is which stage and TP rank, which backbone layers a stage
 * owns, and where a stage boundary may fall. A boundary is allowed only
 * where no attention state shared across layers crosses it (spec §2.3,
 * §5.4 "Shared runtime"): every layer after it must read its compressed KV,
 * top-k indices, index keys and candidate mask from layers after it too, and
 * the DSpark taps (spec §5.6 item 4) must lie on the last stage, which owns
 * the head and the DSpark stages. The rule is derived from the config's
 * source lists, never from layer numbers.
 */
#ifndef DSV4I_DIST_TOPOLOGY_H
#define DSV4I_DIST_TOPOLOGY_H

#include <stdint.h>

#include "base/base.h"

struct dsv4i_config;

#define DSV4I_DIST_MAX_STAGES 16

/** The stage layout of a distributed engine. Ranks are numbered stage-major:
 *  rank = stage * tp + tp_rank (the planner's GPU order, docs/planner.md). */
typedef struct dsv4i_dist_topo {
  int32_t world;                                 /**< ranks = tp * pp */
  int32_t tp, pp;
  int32_t first[DSV4I_DIST_MAX_STAGES + 1];      /**< stage s owns backbone layers
                                                  *   [first[s], first[s+1]); first[pp] = n_layers */
} dsv4i_dist_topo;

/** What one rank does. */
typedef struct dsv4i_dist_place {
  int32_t rank, stage, tp_rank;
  int32_t first, last;        /**< its backbone layers [first, last) */
  int32_t has_embed;          /**< first stage: embedding, Engram layers in its range get
                               *   their row ids from it (payload) */
  int32_t has_head;           /**< last stage: final norm, head, DSpark stages, sampling */
} dsv4i_dist_place;

/**
 * May a stage start at backbone layer `layer`? DSV4_OK, or
 * DSV4_ERR_UNSUPPORTED with a message naming the first layer that would read
 * shared state across the boundary, the state (compressed KV, top-k indices,
 * index keys, candidate mask, DSpark tap) and the layer that produces it,
 * plus the allowed layers; DSV4_ERR_INVALID_ARG for a layer outside
 * [1, n_layers).
 */
dsv4_status dsv4i_dist_split_check(const struct dsv4i_config *cfg, int32_t layer);

/** The allowed first layers of a non-first stage, ascending; returns the count
 *  (at most cap written). V4.1: 1, 2, 8, 14, 20 (docs/distributed.md). */
int32_t dsv4i_dist_boundaries(const struct dsv4i_config *cfg, int32_t *layers, int32_t cap);

/**
 * Build and check a topology: world == tp * pp, 1 <= pp <= min(DSV4I_DIST_MAX_STAGES,
 * n_layers), stage_first[0..pp) strictly increasing from 0 with every boundary
 * allowed, and TP dividing the attention heads, the wo_a groups and the
 * expert intermediate dimension in 32-blocks (the TP split rules, design §6).
 * @return DSV4_OK; DSV4_ERR_INVALID_ARG (sizes, order); DSV4_ERR_UNSUPPORTED
 *         (a boundary where shared state crosses, a TP size the split rules
 *         refuse). *out zeroed on failure.
 */
dsv4_status dsv4i_dist_topo_make(const struct dsv4i_config *cfg, int32_t world, int32_t tp,
                                 int32_t pp, const int32_t *stage_first, dsv4i_dist_topo *out);

/** Where `rank` (0 .. world-1) sits. */
void dsv4i_dist_place_of(const dsv4i_dist_topo *t, int32_t rank, dsv4i_dist_place *out);

/** The stage owning backbone layer `layer`. */
int32_t dsv4i_dist_stage_of_layer(const dsv4i_dist_topo *t, int32_t layer);

#endif /* DSV4I_DIST_TOPOLOGY_H */
