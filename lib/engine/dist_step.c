/*
 * The engine as one rank of a distributed job: joining (topology, agreement),
 * the step over the pipeline with its payload, and the broadcast of the last
 * stage's outputs (dist.h; docs/distributed.md).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "dsv4/dsv4_version.h"
#include "dist/comm.h"
#include "dist/nccl.h"
#include "dist/payload.h"
#include "dist/topology.h"
#include "engine/dist.h"
#include "engine/engine.h"

#define TAG_PAYLOAD 41
#define SHARE_MSG 480

struct dsv4i_dist {
  dsv4i_comm *world, *tp;
  dsv4i_tp_ops tp_ops;          /* the TP collectives the backend sees (backend.h) */
  dsv4i_nccl_comm *nccl;        /* a device stage's TP communicator (device_join) */
  dsv4i_dist_topo topo;
  dsv4i_dist_place pl;
  int32_t root;                 /* the last stage's TP rank 0: it broadcasts outputs */
  int32_t hc, dim;
  int32_t engram_in;            /* the payload this stage receives carries Engram row ids */
  int32_t engram_out;           /* ... and the one it sends */
  uint64_t step;
  uint8_t *msg;                 /* payload buffer */
  size_t msg_cap;
  uint8_t *share;               /* broadcast buffer */
  size_t share_cap;
  int64_t payload_msgs, payload_bytes, control_msgs;
  int64_t tp_allreduces;        /* TP all-reduces (one per wo_b, one per MoE pass) */
};

uint64_t dsv4i_dist_hash(uint64_t h, const void *p, size_t n) {
  if (!h) h = 1469598103934665603ull;
  const uint8_t *b = p;
  for (size_t i = 0; i < n; i++) h = (h ^ b[i]) * 1099511628211ull;
  return h;
}

/* The backend's TP collectives (backend.h dsv4i_tp_ops) over the stage's TP
 * communicator: the rank-ordered chain of running sums and the last rank's share. */
#define TAG_TP 42
#define TAG_TP_FAIL 43 /* a TP rank's failure notice (dsv4i_comm_notify_failure) */

static dsv4_status tp_chain_recv(void *ctx, float *acc, size_t n) {
  dsv4i_dist *d = ctx;
  const int32_t r = dsv4i_comm_rank(d->tp);
  if (r == 0) {
    memset(acc, 0, n * sizeof *acc);
    return DSV4_OK;
  }
  size_t got = 0;
  dsv4_status s = dsv4i_comm_recv(d->tp, r - 1, TAG_TP, acc, n * sizeof *acc, &got,
                                  "receiving a TP rank's partial sums");
  if (!s && got != n * sizeof *acc)
    s = dsv4i_error(DSV4_ERR_RANK_MISMATCH, "TP rank %d: %zu bytes of partial sums from TP rank "
                    "%d, expected %zu (the ranks disagree on the batch)", (int)r, got, (int)r - 1,
                    n * sizeof *acc);
  return s;
}

static dsv4_status tp_chain_send(void *ctx, const float *acc, size_t n) {
  dsv4i_dist *d = ctx;
  const int32_t r = dsv4i_comm_rank(d->tp);
  if (r + 1 == dsv4i_comm_size(d->tp)) return DSV4_OK;
  return dsv4i_comm_send(d->tp, r + 1, TAG_TP, acc, n * sizeof *acc,
                         "sending partial sums to the next TP rank");
}

static dsv4_status tp_share(void *ctx, void *x, size_t bytes) {
  dsv4i_dist *d = ctx;
  d->tp_allreduces++;
  return dsv4i_comm_bcast(d->tp, dsv4i_comm_size(d->tp) - 1, x, bytes,
                          "sharing the TP all-reduce's result");
}

/* A device backend's TP ranks: each names its device (host and PCI location); two ranks
 * on one device are refused (NCCL runs one rank per device), then the stage's NCCL
 * communicator is made over the TP ranks, the device context current. */
typedef struct tp_dev {
  char host[64];
  uint8_t id[16];
  int32_t ordinal, reserved;
} tp_dev;

static dsv4_status tp_device_join(void *ctx, const uint8_t dev_id[16], int32_t ordinal) {
  dsv4i_dist *d = ctx;
  const int32_t n = dsv4i_comm_size(d->tp);
  tp_dev mine;
  memset(&mine, 0, sizeof mine);
  if (gethostname(mine.host, sizeof mine.host - 1)) snprintf(mine.host, sizeof mine.host, "?");
  memcpy(mine.id, dev_id, sizeof mine.id);
  mine.ordinal = ordinal;
  tp_dev *all = dsv4i_calloc((size_t)n, sizeof *all, "TP devices");
  if (!all) return DSV4_ERR_OUT_OF_MEMORY; /* the partners time out in the allgather */
  dsv4_status s = dsv4i_comm_allgather(d->tp, &mine, sizeof mine, all, "naming the TP devices");
  for (int32_t i = 0; !s && i < n; i++)
    for (int32_t j = i + 1; !s && j < n; j++)
      if (!strcmp(all[i].host, all[j].host) && !memcmp(all[i].id, all[j].id, sizeof mine.id)) {
        int32_t pci[4];
        memcpy(pci, all[i].id, sizeof pci);
        s = dsv4i_error(DSV4_ERR_UNSUPPORTED,
                        "distributed engine: TP ranks %d and %d of stage %d both use the GPU at "
                        "PCI %04x:%02x:%02x on host %s (device %d and %d): NCCL runs one rank per "
                        "device; give each TP rank its own GPU (dsv4_engine_params.device or "
                        "CUDA_VISIBLE_DEVICES)", (int)i, (int)j, (int)d->pl.stage,
                        (unsigned)pci[0], (unsigned)pci[1], (unsigned)pci[2], all[i].host,
                        (int)all[i].ordinal, (int)all[j].ordinal);
      }
  free(all);
  if (!s) s = dsv4i_nccl_comm_create(d->tp, &d->nccl);
  return s;
}

static dsv4_status tp_device_allreduce(void *ctx, uint64_t buf, size_t n, int32_t dtype,
                                       void *stream) {
  dsv4i_dist *d = ctx;
  if (!d->nccl) return dsv4i_error(DSV4_ERR_INVALID_ARG, "TP all-reduce before device_join");
  d->tp_allreduces++; /* per issue: eager steps, or once per captured graph */
  return dsv4i_nccl_allreduce(d->nccl, (void *)(uintptr_t)buf, n,
                              dtype == DSV4I_TP_BF16 ? DSV4I_NCCL_BFLOAT16 : DSV4I_NCCL_FLOAT32,
                              stream);
}

/* Hash of a file of the model directory (0 when absent: every rank then agrees on 0). */
static uint64_t file_hash(const struct dsv4_model *m, const char *name) {
  char *path = dsv4i_path_join(dsv4i_model_dir(m), name);
  char *buf = NULL;
  size_t len = 0;
  uint64_t h = 0;
  if (path && dsv4i_read_file(path, (size_t)64 << 20, name, &buf, &len) == DSV4_OK)
    h = dsv4i_dist_hash(0, buf, len);
  dsv4i_error_clear();
  free(buf);
  free(path);
  return h;
}

/* Automatic split: stage s starts at the allowed boundary nearest to s * n_layers / pp
 * (the lower one on a tie), strictly after the previous stage's start. */
static dsv4_status auto_split(const dsv4i_config *c, int32_t pp, int32_t *first) {
  int32_t allowed[64];
  const int32_t na = dsv4i_dist_boundaries(c, allowed, 64);
  first[0] = 0;
  for (int32_t s = 1; s < pp; s++) {
    const int64_t target = (int64_t)s * c->n_layers / pp;
    int32_t best = -1;
    for (int32_t i = 0; i < na; i++) {
      if (allowed[i] <= first[s - 1]) continue;
      if (best < 0 || llabs(allowed[i] - target) < llabs(best - target)) best = allowed[i];
    }
    if (best < 0)
      return dsv4i_error(DSV4_ERR_UNSUPPORTED,
                         "distributed engine: %d pipeline stages need %d boundaries where no "
                         "attention state shared across layers crosses; the model allows %d",
                         (int)pp, (int)pp - 1, (int)na);
    first[s] = best;
  }
  return DSV4_OK;
}

/* Whether a stage starting at `first` or a later one has Engram layers. */
static int engram_from(const dsv4i_config *c, int32_t first) {
  for (int32_t l = first; l < c->n_layers; l++)
    if (c->layers[l].roles & DSV4_ROLE_ENGRAM) return 1;
  return 0;
}

/* The topology of the job: the split given in the args, else the automatic one. */
static dsv4_status make_topo(const dsv4i_config *c, const dsv4i_engine_args *a, int32_t world,
                             dsv4i_dist_topo *topo) {
  int32_t first[DSV4I_DIST_MAX_STAGES];
  memset(first, 0, sizeof first);
  if (a->pp > DSV4I_DIST_MAX_STAGES)
    return dsv4i_error(DSV4_ERR_INVALID_ARG, "distributed engine: pp_size %d above %d",
                       (int)a->pp, DSV4I_DIST_MAX_STAGES);
  int given = 0;
  for (int32_t i = 1; i < a->pp; i++) given |= a->stage_first[i] != 0;
  dsv4_status s = DSV4_OK;
  if (given) memcpy(first, a->stage_first, sizeof(int32_t) * (size_t)a->pp);
  else s = auto_split(c, a->pp, first);
  return s ? s : dsv4i_dist_topo_make(c, world, a->tp, a->pp, first, topo);
}

/* Bytes of the payload buffer of a rank at `pl`: the larger of what it receives and sends. */
static int64_t payload_cap(const dsv4i_config *c, const dsv4i_dist_topo *t,
                           const dsv4i_dist_place *pl, int32_t n_tok, int32_t n_out,
                           int32_t n_engram_cols) {
  if (t->pp < 2) return 0;
  const int engram_in = pl->stage > 0 && engram_from(c, pl->first);
  const int engram_out = pl->last < c->n_layers && engram_from(c, pl->last);
  const uint64_t in = pl->stage > 0 ? dsv4i_payload_bytes(n_tok, n_out, c->hc_mult, c->dim,
                                                          engram_in ? n_engram_cols : 0) : 0;
  const uint64_t out = pl->stage + 1 < t->pp
                           ? dsv4i_payload_bytes(n_tok, n_out, c->hc_mult, c->dim,
                                                 engram_out ? n_engram_cols : 0) : 0;
  const uint64_t n = in > out ? in : out;
  return n > (uint64_t)INT64_MAX ? -1 : (int64_t)n;
}

dsv4_status dsv4i_dist_part_of(const dsv4i_config *c, const dsv4i_engine_args *a, int32_t n_tok,
                               int32_t n_out, dsv4i_model_part *part, int64_t *comm_bytes) {
  int32_t rank = 0, world = 1;
  dsv4i_dist_topo topo;
  dsv4_status s = dsv4i_comm_place(a->mpi_comm, &rank, &world);
  if (!s) s = make_topo(c, a, world, &topo);
  if (s) return s;
  dsv4i_dist_place pl;
  dsv4i_dist_place_of(&topo, rank, &pl);
  *part = (dsv4i_model_part){pl.first, pl.last, pl.tp_rank, topo.tp};
  /* the Engram row ids per token the engine hashes (its tables' layers x columns) */
  const int32_t cols = c->n_engram * (c->engram_max_ngram - 1) * c->engram_n_heads;
  *comm_bytes = payload_cap(c, &topo, &pl, n_tok, n_out, cols);
  return *comm_bytes < 0 ? dsv4i_error(DSV4_ERR_INVALID_ARG, "distributed engine: payload "
                                       "buffer overflows") : DSV4_OK;
}

dsv4_status dsv4i_dist_create(struct dsv4_engine *e, dsv4i_dist **out) {
  *out = NULL;
  const dsv4i_engine_args *a = &e->args;
  const dsv4i_config *c = e->cfg;
  dsv4i_dist *d = dsv4i_calloc(1, sizeof *d, "distributed engine");
  if (!d) return DSV4_ERR_OUT_OF_MEMORY;
  dsv4_status s = dsv4i_comm_create(a->mpi_comm, a->dist_timeout_ms, &d->world);
  if (s) {
    free(d);
    return s;
  }
  const int32_t world = dsv4i_comm_size(d->world), rank = dsv4i_comm_rank(d->world);
  /* the ranks hold the same checkpoint, library and parameters (before any use of them) */
  static const char *const names[] = {
      "the libdsv4 version", "the stage payload version", "config.json", "the shard index",
      "the checkpoint's tensor bytes", "the backend", "tp_size", "pp_size", "the stage split",
      "max_sequences", "max_context", "kv_budget_bytes", "prefill_chunk", "flags",
      "dist_timeout_ms", "pp_micro_batches", "kv_format"};
  uint64_t split = dsv4i_dist_hash(0, a->stage_first, sizeof a->stage_first);
  const uint64_t v[] = {DSV4_VERSION_NUMBER, DSV4I_PAYLOAD_VERSION,
                        file_hash(e->model, "config.json"),
                        file_hash(e->model, "model.safetensors.index.json"),
                        (uint64_t)dsv4i_model_contract(e->model)->payload_bytes,
                        (uint64_t)a->backend, (uint64_t)a->tp, (uint64_t)a->pp, split,
                        (uint64_t)a->max_seqs, (uint64_t)a->max_ctx, (uint64_t)a->kv_budget,
                        (uint64_t)a->chunk, (uint64_t)a->flags, (uint64_t)a->dist_timeout_ms,
                        (uint64_t)a->micro_batches, (uint64_t)a->kv_format};
  s = dsv4i_comm_agree(d->world, (int32_t)DSV4I_ARRAY_LEN(v), names, v,
                       "creating a distributed engine");
  if (!s) s = make_topo(c, a, world, &d->topo);
  if (!s) {
    dsv4i_dist_place_of(&d->topo, rank, &d->pl);
    s = dsv4i_comm_split(d->world, d->pl.stage, d->pl.tp_rank, &d->tp);
  }
  if (!s) dsv4i_comm_watch(d->tp, TAG_TP_FAIL); /* a TP partner's failure ends any TP wait */
  if (s) {
    dsv4i_dist_free(d);
    return s;
  }
  d->root = (d->topo.pp - 1) * d->topo.tp;
  d->tp_ops.rank = d->pl.tp_rank;
  d->tp_ops.size = d->topo.tp;
  d->tp_ops.chain_recv = tp_chain_recv;
  d->tp_ops.chain_send = tp_chain_send;
  d->tp_ops.share = tp_share;
  d->tp_ops.device_join = tp_device_join;
  d->tp_ops.device_allreduce = tp_device_allreduce;
  d->tp_ops.ctx = d;
  d->hc = c->hc_mult;
  d->dim = c->dim;
  d->engram_in = d->pl.stage > 0 && engram_from(c, d->pl.first);
  d->engram_out = d->pl.last < c->n_layers && engram_from(c, d->pl.last);
  dsv4i_log(&a->log, DSV4_LOG_INFO,
            "distributed engine: rank %d of %d, stage %d of %d (layers %d..%d%s%s), TP rank %d "
            "of %d", (int)rank, (int)world, (int)d->pl.stage, (int)d->topo.pp, (int)d->pl.first,
            (int)d->pl.last - 1, d->pl.has_embed ? ", embedding" : "",
            d->pl.has_head ? ", head and DSpark" : "", (int)d->pl.tp_rank, (int)d->topo.tp);
  *out = d;
  return DSV4_OK;
}

static uint8_t *grow(uint8_t **p, size_t *cap, size_t n) {
  if (n <= *cap) return *p;
  uint8_t *q = dsv4i_realloc(*p, n, "distributed engine buffer");
  if (!q) return NULL;
  *p = q;
  *cap = n;
  return q;
}

int64_t dsv4i_dist_reserve(dsv4i_dist *d, const dsv4i_config *c, int32_t n_tok, int32_t n_out,
                           int32_t n_engram_cols) {
  const int64_t n = payload_cap(c, &d->topo, &d->pl, n_tok, n_out, n_engram_cols);
  if (n < 0 || (n > 0 && !grow(&d->msg, &d->msg_cap, (size_t)n))) return -1;
  return n;
}

dsv4_status dsv4i_dist_agree(dsv4i_dist *d, dsv4_status local, const char *what) {
  d->control_msgs++;
  return dsv4i_comm_agree_status(d->world, local, what);
}

void dsv4i_dist_free(dsv4i_dist *d) {
  if (!d) return;
  dsv4i_nccl_comm_free(d->nccl);
  dsv4i_comm_free(d->tp);
  dsv4i_comm_free(d->world);
  free(d->msg);
  free(d->share);
  free(d);
}

void dsv4i_dist_get_info(dsv4i_dist *d, dsv4i_dist_info *o) {
  memset(o, 0, sizeof *o);
  o->rank = d->pl.rank;
  o->world = d->topo.world;
  o->stage = d->pl.stage;
  o->pp = d->topo.pp;
  o->tp_rank = d->pl.tp_rank;
  o->tp = d->topo.tp;
  o->first_layer = d->pl.first;
  o->last_layer = d->pl.last;
  o->has_head = d->pl.has_head;
  o->tp_comm = &d->tp_ops;
  o->allreduce_calls = d->tp_allreduces;
  o->steps = (int64_t)d->step;
  o->payload_msgs = d->payload_msgs;
  o->payload_bytes = d->payload_bytes;
  o->control_msgs = d->control_msgs;
}

int dsv4i_dist_has_head(const dsv4i_dist *d) { return d->pl.has_head; }

int32_t dsv4i_dist_stages(const dsv4i_dist *d) { return d->topo.pp; }

dsv4_status dsv4i_dist_call(dsv4i_dist *d, const char *what, uint64_t hash) {
  static const char *const names[] = {"the call", "its arguments"};
  const uint64_t v[2] = {dsv4i_dist_hash(0, what, strlen(what)), hash};
  char w[96];
  snprintf(w, sizeof w, "starting %s", what);
  d->control_msgs++;
  return dsv4i_comm_agree(d->world, 2, names, v, w);
}


dsv4_status dsv4i_dist_stage_step(struct dsv4_engine *e, const dsv4i_step_io *io,
                                  const int32_t *slot, const int64_t *seq, dsv4_status prior) {
  dsv4i_dist *d = e->dist;
  const dsv4i_batch *b = io->batch;
  const dsv4i_backend_ops *o = e->be->ops;
  const int32_t stage = d->pl.stage, tp = d->topo.tp;
  const size_t hbytes = (size_t)b->n_tok * (size_t)d->hc * (size_t)d->dim * 2;
  const size_t pbytes = (size_t)b->n_tok * (size_t)d->hc * sizeof(float);
  d->step++;
  /* Engram row ids travel to the stages holding Engram layers (every rank also hashes
   * them from its own histories: the receiver checks they agree) */
  const int32_t n_engram_in = d->engram_in ? e->n_engram_cols : 0;
  const int32_t n_engram_out = d->engram_out ? e->n_engram_cols : 0;
  dsv4i_payload_meta m = {d->step, stage - 1, stage, d->pl.first, b->n_tok, b->n_out,
                          d->hc, d->dim, n_engram_in, b->tokens, b->pos, seq, slot,
                          b->layout, b->image, b->out_tok, n_engram_in ? b->engram_ids : NULL};
  dsv4_status s = prior;
  /* an earlier micro-batch's failure: its message stays the one this rank reports */
  char *prior_msg = prior ? dsv4i_strdup(dsv4i_error_message(), "error message") : NULL;
  char what[96];
  if (stage > 0) { /* the stream from the previous stage, checked against this rank's batch;
                    * after a failure it is still taken (a notice, or a step not computed
                    * here), so the messages of later steps pair up */
    snprintf(what, sizeof what, "receiving step %llu's payload", (unsigned long long)d->step);
    const size_t cap = (size_t)dsv4i_payload_bytes(b->n_tok, b->n_out, d->hc, d->dim, n_engram_in);
    size_t got = 0;
    dsv4i_payload_view v;
    dsv4_status r = grow(&d->msg, &d->msg_cap, cap) ? DSV4_OK : DSV4_ERR_OUT_OF_MEMORY;
    if (!r) r = dsv4i_comm_recv(d->world, (stage - 1) * tp + d->pl.tp_rank, TAG_PAYLOAD, d->msg,
                                cap, &got, what);
    if (!s) {
      if (!r) r = dsv4i_payload_check(d->msg, got, &m, &v);
      if (!r) r = dsv4i_payload_match(&v, &m);
      if (!r) r = o->buf_write(e->be, io->h, 0, hbytes, v.h);
      if (!r) r = o->buf_write(e->be, io->pre, 0, pbytes, v.pre);
      s = r;
    }
  }
  if (!s) s = dsv4i_engine_run_local(e, b);
  if (s && !prior && tp > 1 && !dsv4i_comm_failed(d->tp)) { /* this rank's own failure: its
                                                   * TP partners may wait for it inside a layer */
    char who[32];
    snprintf(who, sizeof who, "rank %d", (int)d->pl.rank);
    snprintf(what, sizeof what, "running step %llu (stage %d, TP rank %d)",
             (unsigned long long)d->step, (int)stage, (int)d->pl.tp_rank);
    (void)dsv4i_comm_notify_failure(d->tp, s, who, what);
  }
  if (stage + 1 < d->topo.pp && !dsv4i_comm_failed(d->world)) { /* on to the next stage */
    m.from_stage = stage;
    m.to_stage = stage + 1;
    m.first_layer = d->pl.last;
    m.n_engram = n_engram_out;
    m.engram = n_engram_out ? b->engram_ids : NULL;
    const size_t cap = (size_t)dsv4i_payload_bytes(b->n_tok, b->n_out, d->hc, d->dim, n_engram_out);
    dsv4i_payload_hdr hdr;
    size_t len = 0;
    if (!s && !grow(&d->msg, &d->msg_cap, cap)) s = DSV4_ERR_OUT_OF_MEMORY;
    if (!s) s = dsv4i_payload_write(d->msg, d->msg_cap, &m, &hdr);
    if (!s) s = o->buf_read(e->be, io->h, 0, hbytes, d->msg + hdr.off_h);
    if (!s) s = o->buf_read(e->be, io->pre, 0, pbytes, d->msg + hdr.off_pre);
    if (!s) len = (size_t)hdr.total_bytes;
    char *keep = s ? dsv4i_strdup(dsv4i_error_message(), "error message") : NULL;
    uint8_t notice[sizeof(dsv4i_payload_hdr)];
    const void *send = d->msg;
    if (s) { /* the next stage must not wait for a step this one could not compute */
      len = dsv4i_payload_write_failure(notice, sizeof notice, &m, s);
      send = notice;
    }
    snprintf(what, sizeof what, "sending step %llu's payload", (unsigned long long)d->step);
    dsv4_status ss = dsv4i_comm_send(d->world, (stage + 1) * tp + d->pl.tp_rank, TAG_PAYLOAD,
                                     send, len, what);
    if (!s && !ss) {
      d->payload_msgs++;
      d->payload_bytes += (int64_t)len;
    }
    if (s && keep) dsv4i_error(s, "%s", keep); /* the step's own failure comes first */
    free(keep);
    if (!s) s = ss;
  }
  if (prior) dsv4i_error(prior, "%s", prior_msg ? prior_msg : "(message lost)");
  free(prior_msg);
  return s;
}

dsv4_status dsv4i_dist_run_step(struct dsv4_engine *e, const dsv4i_step_io *io,
                                const int32_t *slot, const int64_t *seq) {
  const dsv4_status s = dsv4i_dist_stage_step(e, io, slot, seq, DSV4_OK);
  return dsv4i_dist_end_steps(e->dist, s);
}

dsv4_status dsv4i_dist_end_steps(dsv4i_dist *d, dsv4_status local) {
  char what[96];
  snprintf(what, sizeof what, "running step %llu", (unsigned long long)d->step);
  return dsv4i_dist_agree(d, local, what);
}

typedef struct share_hdr {
  int32_t status;
  int32_t reserved;
  char msg[SHARE_MSG];
} share_hdr;

dsv4_status dsv4i_dist_share(dsv4i_dist *d, dsv4_status local, int32_t n, void *const *bufs,
                             const size_t *sizes, const char *what) {
  const int is_root = d->pl.rank == d->root;
  size_t total = sizeof(share_hdr);
  for (int32_t i = 0; i < n; i++) total += sizes[i];
  char *keep = local ? dsv4i_strdup(dsv4i_error_message(), "error message") : NULL;
  uint8_t *buf = grow(&d->share, &d->share_cap, total);
  dsv4_status s = buf ? DSV4_OK : DSV4_ERR_OUT_OF_MEMORY;
  if (buf) {
    share_hdr h;
    memset(&h, 0, sizeof h);
    if (is_root) {
      h.status = local;
      if (local) snprintf(h.msg, sizeof h.msg, "%s", keep ? keep : "");
      size_t off = sizeof h;
      for (int32_t i = 0; i < n && !local; off += sizes[i], i++) memcpy(buf + off, bufs[i], sizes[i]);
    }
    memcpy(buf, &h, sizeof h);
    d->control_msgs++;
    s = dsv4i_comm_bcast(d->world, d->root, buf, total, what);
  }
  if (local) { /* this rank's own failure, with its own message */
    dsv4i_error(local, "%s", keep ? keep : "(message lost)");
    free(keep);
    return local;
  }
  free(keep);
  if (s) return s;
  share_hdr h;
  memcpy(&h, buf, sizeof h);
  if (h.status) {
    h.msg[SHARE_MSG - 1] = 0;
    return dsv4i_error(h.status, "rank %d (last stage): %s", (int)d->root, h.msg);
  }
  if (!is_root) {
    size_t off = sizeof h;
    for (int32_t i = 0; i < n; off += sizes[i], i++) memcpy(bufs[i], buf + off, sizes[i]);
  }
  return DSV4_OK;
}
