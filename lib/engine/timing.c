/*
 * Step and per-op timings (exposed through dsv4_engine_get_timings).
 * Per-op timing syncs the backend after each op so device backends report
 * real durations; it is off unless DSV4_ENGINE_F_OP_TIMINGS is set.
 */
#include <string.h>
#include <time.h>

#include "engine/engine.h"

int64_t dsv4i_now_ns(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

int64_t dsv4i_op_begin(struct dsv4_engine *e) {
  return (e->args.flags & DSV4I_ENGINE_F_OP_TIMINGS) ? dsv4i_now_ns() : 0;
}

void dsv4i_op_end(struct dsv4_engine *e, int64_t t0, int32_t op, int32_t layer) {
  if (!(e->args.flags & DSV4I_ENGINE_F_OP_TIMINGS) || t0 == 0) return;
  if (e->be && e->be->ops->sync) e->be->ops->sync(e->be);
  const int64_t dt = dsv4i_now_ns() - t0;
  e->t.op_ns[op] += dt;
  if (layer >= 0 && layer < e->cfg->n_layers) e->t.layer_ns[layer] += dt;
}

void dsv4i_timings_reset(struct dsv4_engine *e) {
  int64_t *layers = e->t.layer_ns;
  const int64_t create_ns = e->t.create_ns;
  memset(&e->t, 0, sizeof e->t);
  e->t.layer_ns = layers;
  e->t.create_ns = create_ns;
  if (layers) memset(layers, 0, sizeof *layers * (size_t)e->cfg->n_layers);
}
