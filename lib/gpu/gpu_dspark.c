/*
 * CUDA backend: the DSpark draft head (spec §6.1), the CPU backend's
 * cpu_dspark.c on the device. dspark_extend stores main_kv of the step's
 * tokens into every stage's window ring; dspark_draft runs the block
 * [anchor, noise x (B-1)] of each sequence through the stages (the backbone
 * block with the DSpark attention layout -B), the shared head with the last
 * stage's norm, and the Markov head left to right: per draft position one
 * fused launch (bias, sampling with the row's n_valid, the next embedding:
 * kernels/dspark.cu). From the embedding to the last Markov launch the
 * draft is one CUDA graph per bucket of sequences (padding sequences on the
 * padding row), or op by op. The drafts come back to the host once
 * (n · (B + 1) ids; a negative one raises the CPU's NOT_FINITE message); the
 * confidence is the CPU's fp32 dot over [x_k, e_k] on the host, on the
 * dim-wide collapsed rows (no vocabulary-wide copy).
 */
#include <string.h>

#include "gpu/attn_tokens.h"
#include "gpu/gpu_backend.h"
#include "model/formats.h"

#define GPU(be) ((gpu_backend *)(be))
#define D(p) ((dsv4i_cuptr)(uintptr_t)(p))

static size_t al(size_t n) { return (n + 255) / 256 * 256; }

/* The draft's input block: per draft row its token, position and record; per sequence
 * its main_kv record and position, the token table (column 0 the anchors), temperature,
 * seed, counter and valid ids. */
typedef struct din_off {
  size_t tok, pos, atok, satok, spos, toks, temp, seed, ctr, nv, total;
} din_off;

static din_off din_layout(int32_t R, int32_t B) {
  din_off o;
  const size_t r = (size_t)R * (size_t)B, n = (size_t)R;
  size_t u = 0;
#define F(f, bytes) \
  o.f = u;          \
  u += al(bytes);
  F(tok, 4 * r)
  F(pos, 4 * r)
  F(atok, sizeof(dsv4i_gpu_attn_tok) * r)
  F(satok, sizeof(dsv4i_gpu_attn_tok) * n)
  F(spos, 4 * n)
  F(toks, 4 * n * ((size_t)B + 1))
  F(temp, 4 * n)
  F(seed, 8 * n)
  F(ctr, 8 * n)
  F(nv, 4 * n)
#undef F
  o.total = u;
  return o;
}

size_t dsv4i_gpu_dspark_inputs_bytes(int32_t R, int32_t B) { return din_layout(R, B).total; }

/* main_x = main_norm(main_proj(main_hidden)), then every stage stores its main_kv. */
static dsv4_status store(gpu_backend *b, const gpu_rows *rw, dsv4i_cuptr main_hidden) {
  const gpu_dspark *d = b->dspark;
  const dsv4i_config *c = b->cfg;
  const int32_t dim = b->dim;
  dsv4_status st = dsv4i_gpu_lin_q(b, &d->main_proj, rw->n, main_hidden, (int64_t)d->n_taps * dim,
                                   b->ws.xq, b->ws.sx, b->ws.x, dim);
  if (!st) st = dsv4i_gpu_rmsnorm(&b->ops, b->g.stream, rw->n, dim, b->ws.x, dim, d->main_norm,
                                  c->norm_eps, b->ws.x, dim);
  for (int32_t S = 0; !st && S < d->n_stages; S++)
    st = dsv4i_gpu_store_main_kv(b, c->n_layers + S, rw, b->ws.x);
  return st;
}

dsv4_status dsv4i_gpu_be_dspark_extend(dsv4i_backend *be, dsv4i_bbuf taps) {
  gpu_backend *b = GPU(be);
  if (!b->dspark)
    return dsv4i_error(DSV4_ERR_UNSUPPORTED, "cuda backend: the model has no DSpark stages");
  if (!taps.impl || b->n_tok < 1)
    return dsv4i_error(DSV4_ERR_INVALID_ARG, "cuda dspark_extend: no taps or no batch");
  /* the step's rows (a graph's padding rows store into the padding slot's rings) */
  const gpu_rows rw = {b->step_rows, b->ws.atok, b->ws.pos, b->ws.gpos, 0};
  return dsv4i_gpu_note(&b->g, store(b, &rw, D(taps.impl)));
}

/* The CPU backend's argument checks (cpu_dspark.c draft_check), its statuses. */
static dsv4_status check(gpu_backend *b, const dsv4i_kv_step *kv, const int64_t *pos,
                         const int32_t *anchor, const dsv4i_sample_req *req, const int32_t *drafts) {
  if (!b->dspark)
    return dsv4i_error(DSV4_ERR_UNSUPPORTED, "cuda backend: the model has no DSpark stages");
  if (!kv || kv->n_seq < 1 || !pos || !anchor || !req || !drafts)
    return dsv4i_error(DSV4_ERR_INVALID_ARG, "cuda dspark_draft: %d sequences or NULL",
                       kv ? (int)kv->n_seq : -1);
  if (kv->n_seq > b->max_out)
    return dsv4i_error(DSV4_ERR_INVALID_ARG, "cuda dspark_draft: %d sequences, the engine's "
                       "steps hold %d", (int)kv->n_seq, (int)b->max_out);
  for (int32_t i = 0; i < kv->n_seq; i++) {
    if (anchor[i] < 0 || anchor[i] >= b->vocab)
      return dsv4i_error(DSV4_ERR_INVALID_ARG, "cuda dspark_draft: anchor %d", (int)anchor[i]);
    if (pos[i] < 0 || pos[i] + 1 != kv->len[i])
      return dsv4i_error(DSV4_ERR_INVALID_ARG, "cuda dspark_draft: position %lld of sequence %d, "
                         "which holds %lld", (long long)pos[i], (int)i, (long long)kv->len[i]);
  }
  return DSV4_OK;
}

static int32_t valid_ids(int32_t n_valid, int32_t V) { return n_valid > 0 && n_valid < V ? n_valid : V; }

/* confidence c = proj([x_k, e_k]) in fp32, k in order (dsv4i_cpu_linear_f32's order) */
static float confidence(const gpu_dspark *d, int32_t dim, const uint16_t *x, const uint16_t *e) {
  float acc = 0.0f;
  const float *wf = d->conf;
  const uint16_t *wb = d->conf;
  for (int32_t j = 0; j < dim + d->rank; j++) {
    const float v = dsv4i_bf16_to_f32(j < dim ? x[j] : e[j - dim]);
    acc += v * (d->conf_f32 ? wf[j] : dsv4i_bf16_to_f32(wb[j]));
  }
  return acc;
}

/* The draft forward over n sequences whose inputs are staged (what a bucket's graph
 * holds: no host synchronisation): the blocks through the stages, the head with the
 * last stage's norm, then the Markov head left to right, one fused launch per
 * position (bias, sampling, the next embedding). */
typedef struct draft_ctx {
  gpu_backend *b;
  int32_t n;      /**< sequences: the live ones, or the bucket's (padding on the padding row) */
  dsv4i_cuptr lg; /**< the draft logits f32 [n][B][V] */
} draft_ctx;

static dsv4_status draft_ops(void *user, dsv4i_custream stream) {
  const draft_ctx *x = user;
  gpu_backend *b = x->b;
  (void)stream; /* the ops queue on the engine stream, which is the one captured */
  const gpu_dspark *d = b->dspark;
  const dsv4i_config *c = b->cfg;
  const gpu_ws *w = &b->ws;
  const int32_t n = x->n, B = d->block, V = b->vocab, dim = b->dim, r = n * B;
  const din_off o = din_layout(b->max_out, B);
  const dsv4i_cuptr din = w->din;
  dsv4_status st = dsv4i_gpu_embed_hc(&b->ops, b->g.stream, r, b->hc, dim, din + o.tok, b->embed,
                                      w->dh, w->dpre);
  const gpu_rows rd = {r, din + o.atok, din + o.pos, w->gpos, B};
  for (int32_t S = 0; !st && S < d->n_stages; S++)
    st = dsv4i_gpu_block_rows(b, c->n_layers + S, &rd, w->dh, w->dpre);
  if (!st) st = dsv4i_gpu_hc_pre(&b->ops, b->g.stream, r, b->hc, dim, w->dh, w->dpre, w->dxc);
  if (!st) st = dsv4i_gpu_rmsnorm(&b->ops, b->g.stream, r, dim, w->dxc, dim, d->norm, c->norm_eps,
                                  w->x, dim);
  if (!st) st = dsv4i_gpu_linear(&b->ops, b->g.stream, &b->head, r, w->x, dim, x->lg, V, 1);
  const dsv4i_gpu_markov_args ma = {n, B, V, d->rank, din + o.toks, x->lg, d->mk_embed, d->mk_head,
                                    din + o.temp, din + o.seed, din + o.ctr, din + o.nv,
                                    w->dpart, w->dticket};
  for (int32_t k = 0; !st && k < B; k++) st = dsv4i_gpu_dspark_markov(&d->k, b->g.stream, &ma, k);
  return st;
}

/* The graph set of a draft call (0: the internal logits, 1: the caller's buffer it was
 * captured with), or -1: op by op (graphs off, main_kv stored first, another buffer). */
static int32_t draft_graphs(gpu_backend *b, dsv4i_bbuf taps, dsv4i_bbuf logits) {
  if (b->graphs_off || b->dgraphs[0].n_buckets == 0 || taps.impl) return -1;
  if (!logits.impl) return 0;
  if (!b->dlog_ext) b->dlog_ext = logits.impl;
  return logits.impl == b->dlog_ext ? 1 : -1;
}

dsv4_status dsv4i_gpu_be_dspark_draft(dsv4i_backend *be, const dsv4i_kv_step *kv,
                                      const int64_t *pos, const int32_t *anchor, dsv4i_bbuf taps,
                                      const dsv4i_sample_req *req, int32_t *drafts,
                                      float *conf_out, dsv4i_bbuf logits) {
  gpu_backend *b = GPU(be);
  dsv4_status st = check(b, kv, pos, anchor, req, drafts);
  if (!st) st = dsv4i_gpu_enter(&b->g);
  if (!st) st = dsv4i_gpu_sync(&b->g); /* the staging is free */
  if (st) return st;
  if (!st) st = dsv4i_gkv_stage(&b->kv, kv, b->st.tab); /* row i = sequence i, then padding */
  if (st) return st;
  const int32_t n = kv->n_seq;
  const gpu_dspark *d = b->dspark;
  const dsv4i_config *c = b->cfg;
  const dsv4i_cu *cu = b->g.dev.cu;
  const int32_t B = d->block, V = b->vocab, dim = b->dim, r = n * B;
  /* a bucket's graph, its padding sequences on the padding row (anchor 0 at position 0) */
  const int32_t set = draft_graphs(b, taps, logits);
  const int32_t kb = set < 0 ? -1 : dsv4i_gpu_graphs_bucket(&b->dgraphs[set], n);
  const int32_t np = kb < 0 ? n : b->dgraphs[set].bucket[kb];
  const din_off o = din_layout(b->max_out, B);
  char *h = b->st.din;
  int32_t *tok = (int32_t *)(void *)(h + o.tok), *p32 = (int32_t *)(void *)(h + o.pos);
  int32_t *toks = (int32_t *)(void *)(h + o.toks);
  float *temp = (float *)(void *)(h + o.temp);
  uint64_t *seed = (uint64_t *)(void *)(h + o.seed), *ctr = (uint64_t *)(void *)(h + o.ctr);
  int32_t *nvalid = (int32_t *)(void *)(h + o.nv);
  for (int32_t i = 0; i < np; i++) {
    const int live = i < n;
    b->pos[i] = live ? pos[i] : 0;
    for (int32_t j = 0; j < B; j++) {
      tok[i * B + j] = j ? c->dspark_noise_token_id : live ? anchor[i] : 0;
      p32[i * B + j] = (int32_t)(b->pos[i] + 1 + j);
    }
    ((int32_t *)(void *)(h + o.spos))[i] = (int32_t)b->pos[i];
    b->layout[i] = DSV4I_LAYOUT_DECODE;
    b->seq_row[i] = live ? i : n;
    toks[i * (B + 1)] = live ? anchor[i] : 0;
    temp[i] = live ? req[i].temperature : 0.0f;
    seed[i] = live ? req[i].seed : 0;
    ctr[i] = live ? req[i].counter : 0;
    nvalid[i] = live ? valid_ids(req[i].n_valid, V) : V;
  }
  st = dsv4i_gpu_attn_dspark_tokens(np, b->seq_row, b->pos, B,
                                    (dsv4i_gpu_attn_tok *)(void *)(h + o.atok));
  if (!st && taps.impl)
    st = dsv4i_gpu_attn_tokens(n, b->seq_row, pos, b->layout, c->window_size,
                               (dsv4i_gpu_attn_tok *)(void *)(h + o.satok));
  if (st) return st;
  const dsv4i_cuptr din = b->ws.din;
  dsv4i_cures res = cu->MemcpyHtoDAsync(din, h, o.total, b->g.stream);
  if (res == DSV4I_CUDA_SUCCESS)
    res = cu->MemcpyHtoDAsync(b->kv.tab, b->st.tab, (size_t)(n + 1) * (size_t)b->kv.lay.ld * 4,
                              b->g.stream);
  if (res != DSV4I_CUDA_SUCCESS) return dsv4i_gpu_fail(&b->g, res, "cuMemcpyHtoDAsync(draft inputs)");
  /* the reference's forward_spec stores main_kv at pos itself (op by op) */
  if (taps.impl) {
    const gpu_rows rs = {n, din + o.satok, din + o.spos, b->ws.gpos, 0};
    st = store(b, &rs, D(taps.impl));
  }
  const gpu_ws *w = &b->ws;
  const dsv4i_cuptr lg = logits.impl ? D(logits.impl) : w->dlog;
  draft_ctx dc = {b, np, lg};
  if (!st) st = kb < 0 ? draft_ops(&dc, b->g.stream)
                       : dsv4i_gpu_graphs_run(&b->g, &b->dgraphs[set], kb, draft_ops, &dc);
  if (st) return dsv4i_gpu_note(&b->g, st);
  /* the live rows' ids to the host once */
  res = cu->MemcpyDtoHAsync(toks, din + o.toks, 4 * (size_t)n * (size_t)(B + 1), b->g.stream);
  if (res != DSV4I_CUDA_SUCCESS) return dsv4i_gpu_fail(&b->g, res, "cuMemcpyDtoHAsync(drafts)");
  if ((st = dsv4i_gpu_sync(&b->g))) return st;
  /* the first row without a draft in the CPU's order (position, then sequence): its message */
  for (int32_t k = 0; k < B; k++)
    for (int32_t i = 0; i < n; i++) {
      const int32_t t = toks[i * (B + 1) + k + 1];
      if (t >= 0) continue;
      const int64_t at = -1 - (int64_t)t;
      const int32_t nv = valid_ids(req[i].n_valid, V);
      if (at >= nv)
        return dsv4i_error(DSV4_ERR_NOT_FINITE, "draft logits of batch row %d: all %lld values "
                           "are -inf: no token can be drawn", (int)i, (long long)nv);
      float v = 0.0f;
      res = cu->MemcpyDtoH(&v, lg + (((dsv4i_cuptr)i * B + k) * (dsv4i_cuptr)V + (dsv4i_cuptr)at) * 4u, 4);
      if (res != DSV4I_CUDA_SUCCESS) return dsv4i_gpu_fail(&b->g, res, "cuMemcpyDtoH(logit)");
      return dsv4i_error(DSV4_ERR_NOT_FINITE, "draft logits of batch row %d: the logit of token "
                         "%lld is %s: no token can be drawn (damaged weights or an overflow)",
                         (int)i, (long long)at, v != v ? "NaN" : "+inf");
    }
  for (int32_t i = 0; i < n; i++)
    for (int32_t k = 0; k < B; k++) drafts[i * B + k] = toks[i * (B + 1) + k + 1];
  if (conf_out) { /* x_k: the collapsed rows before the norm; e_k: markov.embed of tok_k */
    uint16_t *x = b->st.dxc;
    res = cu->MemcpyDtoH(x, w->dxc, (size_t)r * (size_t)dim * 2);
    if (res != DSV4I_CUDA_SUCCESS) return dsv4i_gpu_fail(&b->g, res, "cuMemcpyDtoH(draft rows)");
    for (int32_t i = 0; i < n; i++)
      for (int32_t k = 0; k < B; k++)
        conf_out[i * B + k] =
            confidence(d, dim, x + ((size_t)i * B + k) * (size_t)dim,
                       d->mk_embed_host + (size_t)toks[i * (B + 1) + k] * (size_t)d->rank);
  }
  return DSV4_OK;
}
