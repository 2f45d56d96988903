/*
 * The step over a stage, op by op (backend.h run), and the common header of
 * a backend instance. The order is the reference's (spec §5.1-§5.6):
 * embed; per layer Engram (at Engram layers) then the block; DSpark ring
 * extension; head.
 */
#include "backend/backend_impl.h"
#include "model/model.h"

dsv4_status dsv4i_backend_init(dsv4i_backend *be, const dsv4i_backend_ops *ops, int32_t kind,
                               const dsv4i_backend_desc *d, int32_t max_tp) {
  const dsv4i_config *c = dsv4i_model_config(d->model);
  int32_t first = d->first_layer, last = d->last_layer;
  if (first == 0 && last == 0) last = c->n_layers;
  if (first < 0 || last > c->n_layers || first >= last)
    return dsv4i_error(DSV4_ERR_INVALID_ARG, "backend %s: layer range [%d, %d) is not inside "
                       "[0, %d)", ops->name, (int)first, (int)last, (int)c->n_layers);
  const int32_t tp = d->tp_size > 0 ? d->tp_size : 1;
  if (d->tp_rank < 0 || d->tp_rank >= tp)
    return dsv4i_error(DSV4_ERR_INVALID_ARG, "backend %s: tp_rank %d of tp_size %d", ops->name,
                       (int)d->tp_rank, (int)tp);
  if (tp > max_tp)
    return dsv4i_error(DSV4_ERR_UNSUPPORTED, "backend %s: tensor parallelism (tp_size %d) is not "
                       "implemented yet; use tp_size 1", ops->name, (int)tp);
  be->ops = ops;
  be->kind = kind;
  be->cfg = c;
  be->first_layer = first;
  be->last_layer = last;
  be->has_embed = first == 0;
  be->has_head = last == c->n_layers;
  be->tp_rank = d->tp_rank;
  be->tp_size = tp;
  return DSV4_OK;
}

static int64_t begin(const dsv4i_step_hook *k) { return k && k->begin ? k->begin(k->user) : 0; }

static void end(const dsv4i_step_hook *k, int64_t t0, int32_t op, int32_t layer) {
  if (k && k->end) k->end(k->user, t0, op, layer);
}

dsv4_status dsv4i_backend_run_blocks(dsv4i_backend *be, const dsv4i_step_io *io,
                                     const dsv4i_step_hook *hook) {
  const dsv4i_backend_ops *o = be->ops;
  const dsv4i_batch *b = io->batch;
  int64_t t = begin(hook);
  dsv4_status s = o->set_batch(be, b);
  if (!s && be->has_embed) s = o->embed(be, io->h, io->pre);
  end(hook, t, DSV4I_STEP_EMBED, -1);
  for (int32_t L = be->first_layer; !s && L < be->last_layer; L++) {
    if (be->cfg->layers[L].roles & DSV4_ROLE_ENGRAM) {
      t = begin(hook);
      s = o->engram(be, L, io->h);
      end(hook, t, DSV4I_STEP_ENGRAM, -1);
      if (s) break;
    }
    t = begin(hook);
    s = o->block(be, L, io->h, io->pre, io->taps);
    end(hook, t, DSV4I_STEP_BLOCK, L);
  }
  if (!s && be->has_head && io->taps.impl && o->dspark_extend) { /* DSpark rings follow */
    t = begin(hook);
    s = o->dspark_extend(be, io->taps);
    end(hook, t, DSV4I_STEP_DSPARK, -1);
  }
  if (!s && be->has_head && b->n_out > 0) {
    t = begin(hook);
    s = o->head(be, io->h, io->pre, io->logits);
    end(hook, t, DSV4I_STEP_HEAD, -1);
  }
  return s;
}
