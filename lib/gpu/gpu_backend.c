/*
 * CUDA implementation of the engine's backend interface (backend/backend.h):
 * storage format for the planner, create/destroy (device, kernels, one
 * device pool sized from the weights, the plan's KV pages and the step
 * workspace; the pinned pool for the Engram tables), device buffers, the
 * step metadata (set_batch), the step run (a CUDA graph per batch-size
 * bucket, or op by op), sampling. The step ops are gpu_block.c, the weight
 * upload gpu_weights.c, the caches gpu_kv.c.
 */
#include <stdlib.h>
#include <string.h>

#include "gpu/attn_tokens.h"
#include "gpu/gpu_backend.h"

#define GPU(be) ((gpu_backend *)(be))

static size_t al(size_t n) { return (n + 255) / 256 * 256; }

/* ---- workspace ------------------------------------------------------------ */

/* The step inputs (pinned staging and device copy share this layout) and the
 * workspace, for T tokens and R output rows. take(NULL) only counts. */
typedef struct carve {
  size_t used;
  dsv4i_cuptr base;
} carve;

static dsv4i_cuptr take(carve *c, size_t bytes) {
  const dsv4i_cuptr p = c->base ? c->base + c->used : 0;
  c->used += al(bytes ? bytes : 1);
  return p;
}

/* What of the workspace a pipeline stage needs: its backbone layers [first, last) (the
 * index scores of its index sources, the Engram scratch of its Engram layers) and the
 * DSpark draft block B (0 off the last stage, or without a draft head). One process: all. */
typedef struct ws_part {
  int32_t first, last, B, tp; /* tp > 1: a TP shard (the f32 partial sums' buffer) */
} ws_part;

static int32_t dspark_block(const dsv4i_config *c);

static ws_part part_of(const dsv4i_config *c, int32_t first, int32_t last, int32_t tp) {
  if (last <= 0 || last > c->n_layers) last = c->n_layers;
  if (first < 0 || first >= last) first = 0;
  return (ws_part){first, last, last == c->n_layers ? dspark_block(c) : 0, tp > 1 ? tp : 1};
}

static int part_has_engram(const dsv4i_config *c, const ws_part *p) {
  for (int32_t L = p->first; L < p->last; L++)
    if (c->layers[L].roles & DSV4_ROLE_ENGRAM) return 1;
  return 0;
}

static int64_t max_visible(const dsv4i_config *c, const ws_part *p, int64_t max_pos) {
  int64_t v = 1;
  for (int32_t L = p->first; L < p->last; L++) {
    const int32_t r = c->layers[L].compress_ratio;
    if (r > 0 && (c->layers[L].roles & DSV4_ROLE_INDEX_SOURCE) && max_pos / r > v) v = max_pos / r;
  }
  return v;
}

/* Inputs block: tok, pos, gpos, atok, eids, img, out_tok, gvec. */
#define N_INPUTS 8
static size_t inputs_layout(const dsv4i_config *c, int32_t T, int32_t R, size_t *off) {
  const int64_t ncols = (int64_t)c->n_engram * (c->engram_max_ngram - 1) * c->engram_n_heads;
  const size_t sz[N_INPUTS] = {4u * T, 4u * T, 4u * (DSV4I_GPU_MAX_RATIO + 1) * (size_t)T,
                               sizeof(dsv4i_gpu_attn_tok) * (size_t)T,
                               8u * (size_t)T * (size_t)ncols, (size_t)T, 4u * (size_t)R,
                               4u * (size_t)T};
  size_t u = 0;
  for (int i = 0; i < N_INPUTS; i++) {
    off[i] = u;
    u += al(sz[i] ? sz[i] : 1);
  }
  return u;
}

static size_t sparse_ws_tokens(int32_t T) { return T < 64 ? (size_t)T : 64; }

/* The DSpark draft block size B, 0 when the backend has no draft head. */
static int32_t dspark_block(const dsv4i_config *c) {
  return c->n_mtp_layers > 0 && c->dspark_block_size > 0 ? c->dspark_block_size : 0;
}

/* T step tokens, `rows` rows per block call (T, or more for DSpark drafts), R output rows. */
static void ws_layout(const dsv4i_config *c, const ws_part *p, int32_t T, int32_t rows, int32_t R,
                      int64_t max_pos, carve *cv, gpu_ws *w) {
  const size_t t = (size_t)rows, r = (size_t)R, d = (size_t)c->dim, hc = (size_t)c->hc_mult,
               hd = (size_t)c->head_dim, H = (size_t)c->n_heads;
  const size_t nm = (2 + hc) * hc;
  size_t off[N_INPUTS];
  w->in = take(cv, inputs_layout(c, T, R, off));
  w->tok = w->in ? w->in + off[0] : 0;
  w->pos = w->in ? w->in + off[1] : 0;
  w->gpos = w->in ? w->in + off[2] : 0;
  w->atok = w->in ? w->in + off[3] : 0;
  w->eids = w->in ? w->in + off[4] : 0;
  w->img = w->in ? w->in + off[5] : 0;
  w->out_tok = w->in ? w->in + off[6] : 0;
  w->gvec = w->in ? w->in + off[7] : 0;
  w->x = take(cv, t * d * 2);
  w->y = take(cv, t * d * 2);
  w->mixes = take(cv, t * nm * 4);
  w->a_pre = take(cv, t * hc * 4);
  w->a_post = take(cv, t * hc * 4);
  w->a_comb = take(cv, t * hc * hc * 4);
  w->f_post = take(cv, t * hc * 4);
  w->f_comb = take(cv, t * hc * hc * 4);
  const int32_t B = p->B;
  const size_t kx = B && c->n_dspark_targets > 1 ? d * (size_t)c->n_dspark_targets : d; /* main_proj */
  w->xq = take(cv, t * kx * 4);
  w->sx = take(cv, t * kx / 32 * 4);
  size_t k2 = (size_t)c->q_lora_rank;
  if ((size_t)c->o_groups * (size_t)c->o_lora_rank > k2) k2 = (size_t)c->o_groups * (size_t)c->o_lora_rank;
  w->rq = take(cv, t * k2 * 4);
  w->rsx = take(cv, t * k2 / 32 * 4);
  w->qr = take(cv, t * (size_t)c->q_lora_rank * 2);
  w->q = take(cv, t * H * hd * 2);
  w->o = take(cv, t * H * hd * 2);
  w->kv = take(cv, t * hd * 2);
  w->kvw = take(cv, t * hd * 2);
  w->lat = take(cv, t * hd * 2);
  w->kk = take(cv, t * hd * 4);
  w->gg = take(cv, t * hd * 4);
  const size_t ihd = (size_t)c->index_head_dim, IH = (size_t)c->index_n_heads;
  w->ik = take(cv, t * ihd * 2);
  w->iq = take(cv, t * IH * ihd * 2);
  w->iw = take(cv, t * IH * 2);
  w->u = take(cv, t * (size_t)c->o_groups * (size_t)c->o_lora_rank * 2);
  w->score_ld = max_visible(c, p, max_pos);
  const int32_t bs = c->candidate_block_size > 0 ? c->candidate_block_size : 1;
  w->bws_ld = (w->score_ld + bs - 1) / bs;
  w->topk_ld = c->index_topk > 0 ? c->index_topk : 1;
  w->cand_ld = c->candidate_source >= 0 && c->candidate_topk_blocks > 0 ? c->candidate_topk_blocks : 0;
  w->scores = take(cv, t * (size_t)w->score_ld * 4);
  w->bws = take(cv, t * (size_t)w->bws_ld * 4);
  w->topk = take(cv, t * (size_t)w->topk_ld * 4);
  w->topk_ws_bytes = dsv4i_gpu_attn_topk_ws_bytes((int32_t)t, w->score_ld, w->topk_ld);
  w->topk_ws = take(cv, w->topk_ws_bytes);
  w->cand = take(cv, t * (size_t)(w->cand_ld > 0 ? w->cand_ld : 1) * 4);
  w->sparse_bytes = dsv4i_gpu_attn_sparse_ws(c->n_heads, c->head_dim, c->window_size,
                                             w->topk_ld > B ? w->topk_ld : B,
                                             (int32_t)sparse_ws_tokens(rows));
  w->sparse = take(cv, w->sparse_bytes);
  size_t E = (size_t)c->n_routed_experts, K = (size_t)c->n_experts_per_tok;
  if (B && (size_t)c->dspark_n_routed_experts > E) E = (size_t)c->dspark_n_routed_experts;
  if (B && (size_t)c->dspark_n_experts_per_tok > K) K = (size_t)c->dspark_n_experts_per_tok;
  w->z = take(cv, t * E * 4);
  w->ridx = take(cv, t * K * 4);
  w->rw = take(cv, t * K * 4);
  dsv4i_gpu_moe m;
  memset(&m, 0, sizeof m);
  m.top_k = (int32_t)K;
  m.dim = c->dim;
  m.inter = c->moe_inter_dim;
  m.has_shared = c->n_shared_experts > 0;
  w->moe = take(cv, dsv4i_gpu_moe_scratch_bytes(&m, rows));
  /* TP shards: the backbone's partial sums in f32, all-reduced before the bf16 rounding */
  m.top_k = c->n_experts_per_tok;
  w->tpf = take(cv, p->tp > 1 ? dsv4i_gpu_moe_rows_bytes(&m, rows) : 1);
  size_t eg = 1;
  if (c->n_engram > 0 && part_has_engram(c, p)) {
    dsv4i_gpu_engram e;
    memset(&e, 0, sizeof e);
    e.dim = c->dim;
    e.hc = c->hc_mult;
    e.n_cols = (c->engram_max_ngram - 1) * c->engram_n_heads;
    e.head_dim = c->engram_head_dim;
    eg = dsv4i_gpu_engram_scratch_bytes(&e, T);
  }
  w->engram = take(cv, eg);
  w->hsel = take(cv, r * hc * d * 2);
  w->presel = take(cv, r * hc * 4);
  w->hx = take(cv, r * d * 2);
  w->junk = take(cv, r * 4);
  w->samp = take(cv, al(4 * r) + 16 * r);
  w->samp_out = take(cv, r * 4);
  w->accq = take(cv, (size_t)c->vocab_size * 4);
  w->accout = take(cv, 8);
  if (B) {
    const size_t V = (size_t)c->vocab_size;
    w->din = take(cv, dsv4i_gpu_dspark_inputs_bytes(R, B));
    w->dh = take(cv, t * hc * d * 2);
    w->dpre = take(cv, t * hc * 4);
    w->dxc = take(cv, t * d * 2);
    w->dlog = take(cv, r * (size_t)B * V * 4);
    w->dpart = take(cv, dsv4i_gpu_dspark_markov_scratch(R, c->vocab_size, c->dspark_markov_rank));
    w->dticket = take(cv, 4);
  }
}

static int32_t max_rows(const ws_part *p, int32_t T, int32_t R) {
  const int32_t r = R * p->B;
  return r > T ? r : T;
}

/* Workspace bytes of T tokens, `rows` block rows, R output rows. */
static size_t ws_size(const dsv4i_config *c, const ws_part *p, int32_t T, int32_t rows, int32_t R,
                      int64_t max_pos) {
  carve cv = {0, 0};
  gpu_ws w;
  ws_layout(c, p, T, rows, R, max_pos, &cv, &w);
  return cv.used;
}

/* Pages of the KV padding row for n tokens (dsv4i_gkv_device_bytes). */
static int64_t pad_pages_for(const dsv4i_kv_layout *lay, int32_t n) {
  int64_t k = 0;
  for (int32_t i = 0; i < DSV4I_KV_KINDS; i++) k += dsv4i_kv_pages_for(lay, i, n);
  return k;
}

static size_t ws_bytes(const dsv4i_config *c, const ws_part *p, int32_t T, int32_t R,
                       int64_t max_pos) {
  carve cv = {0, 0};
  gpu_ws w;
  ws_layout(c, p, T, max_rows(p, T, R), R, max_pos, &cv, &w);
  return cv.used;
}

/* ---- format --------------------------------------------------------------- */

static dsv4_status cuda_format(const struct dsv4i_config *c, int64_t max_positions,
                               const dsv4i_model_part *part, int32_t kv_format,
                               dsv4i_cache_format *f) {
  dsv4i_kv_layout lay; /* the part's caches, weights and workspace (a pipeline stage's) */
  dsv4_status s = dsv4i_kv_format_init(c, part, kv_format, dsv4i_gkv_page_bytes(c), max_positions,
                                       f, &lay);
  if (s) return s;
  const ws_part p = part_of(c, part ? part->first_layer : 0, part ? part->last_layer : 0,
                            part ? part->tp_size : 1);
  /* per live sequence: its page row in the pinned staging and in the device table */
  f->slot_bytes = 2 * (int64_t)lay.ld * (int64_t)sizeof(int32_t);
  /* wo_a dequantised to bf16 per attention layer of the part (spec §3.3), next to the
   * checkpoint bytes; the DSpark stages' on the last stage */
  const int64_t wo_a = (int64_t)c->o_groups * c->o_lora_rank *
                       ((int64_t)c->n_heads * c->head_dim / c->o_groups) * 2;
  /* a TP rank keeps its groups' rows of the backbone's wo_a; the DSpark stages stay whole */
  const int64_t tp = part && part->tp_size > 1 ? part->tp_size : 1;
  f->weight_bytes = wo_a / tp * (p.last - p.first) +
                    wo_a * (p.B ? c->n_total_layers - c->n_layers : 0);
  /* workspace: per batch token (the inputs), per block row (max(tokens, output rows x B):
   * a DSpark draft runs B rows per sequence), per output row, each measured on the layout
   * the create carves; the engine's stream and pre per token, its logits per output row */
  const int64_t n = 256, w0 = (int64_t)ws_size(c, &p, 0, 0, 0, max_positions);
  const int64_t eng = (int64_t)c->hc_mult * c->dim * 2 + (int64_t)c->hc_mult * 4;
  f->act_bytes_per_tok = ((int64_t)ws_size(c, &p, (int32_t)n, 0, 0, max_positions) - w0 + n - 1) / n + eng;
  const int64_t nr = 64; /* the sparse attention's scratch grows up to 64 rows, then stays */
  f->act_bytes_per_row = ((int64_t)ws_size(c, &p, 0, (int32_t)nr, 0, max_positions) - w0 + nr - 1) / nr;
  f->act_bytes_per_out = ((int64_t)ws_size(c, &p, 0, 0, (int32_t)n, max_positions) - w0 + n - 1) / n +
                         (int64_t)c->vocab_size * 4;
  f->draft_rows = p.B;
  /* the KV padding row (gpu_kv.c): pages of its own for a step's tokens, at most one page
   * per table at the first token plus the records of the rest */
  const int64_t pad1 = pad_pages_for(&lay, 1), padn = pad_pages_for(&lay, (int32_t)n + 1);
  f->act_bytes_fixed = w0 + 3 * 256 + pad1 * f->page_bytes;
  f->act_bytes_per_tok += ((padn - pad1) * f->page_bytes + n - 1) / n;
  return DSV4_OK;
}

/* ---- buffers (the driver's allocator: the engine allocates them once) ------ */

static dsv4_status buf_alloc(dsv4i_backend *be, size_t bytes, dsv4i_bbuf *out) {
  gpu_backend *b = GPU(be);
  out->impl = NULL;
  dsv4_status st = dsv4i_gpu_enter(&b->g);
  if (st) return st;
  dsv4i_cuptr p = 0;
  dsv4i_cures r = b->g.dev.cu->MemAlloc(&p, bytes ? bytes : 1);
  if (r == DSV4I_CUDA_ERROR_OUT_OF_MEMORY)
    return dsv4i_error(DSV4_ERR_OUT_OF_MEMORY, "cuda buf_alloc: %zu bytes: out of device memory",
                       bytes);
  if (r != DSV4I_CUDA_SUCCESS) return dsv4i_gpu_fail(&b->g, r, "cuMemAlloc(%zu bytes)", bytes);
  r = b->g.dev.cu->MemsetD8Async(p, 0, bytes, b->g.stream);
  if (r == DSV4I_CUDA_SUCCESS) st = dsv4i_gpu_sync(&b->g);
  else st = dsv4i_gpu_fail(&b->g, r, "cuMemsetD8Async");
  if (st) {
    b->g.dev.cu->MemFree(p);
    return st;
  }
  out->impl = (void *)(uintptr_t)p;
  return DSV4_OK;
}

static void buf_free(dsv4i_backend *be, dsv4i_bbuf bb) {
  gpu_backend *b = GPU(be);
  if (!bb.impl || dsv4i_gpu_enter(&b->g)) return;
  b->g.dev.cu->StreamSynchronize(b->g.stream);
  b->g.dev.cu->MemFree((dsv4i_cuptr)(uintptr_t)bb.impl);
}

static dsv4_status buf_read(dsv4i_backend *be, dsv4i_bbuf bb, size_t off, size_t bytes, void *dst) {
  gpu_backend *b = GPU(be);
  if (!bb.impl || !dst) return dsv4i_error(DSV4_ERR_INVALID_ARG, "cuda buf_read: NULL");
  dsv4_status st = dsv4i_gpu_enter(&b->g);
  if (!st) st = dsv4i_gpu_sync(&b->g);
  if (st || !bytes) return st;
  const dsv4i_cures r = b->g.dev.cu->MemcpyDtoH(dst, (dsv4i_cuptr)(uintptr_t)bb.impl + off, bytes);
  return r == DSV4I_CUDA_SUCCESS ? DSV4_OK : dsv4i_gpu_fail(&b->g, r, "cuMemcpyDtoH(buf_read)");
}

static dsv4_status buf_write(dsv4i_backend *be, dsv4i_bbuf bb, size_t off, size_t bytes,
                             const void *src) {
  gpu_backend *b = GPU(be);
  if (!bb.impl || !src) return dsv4i_error(DSV4_ERR_INVALID_ARG, "cuda buf_write: NULL");
  dsv4_status st = dsv4i_gpu_enter(&b->g);
  if (!st) st = dsv4i_gpu_sync(&b->g);
  if (st || !bytes) return st;
  /* stream-ordered (see gpu_weights.c put); a pageable src is staged before the return */
  const dsv4i_cures r = b->g.dev.cu->MemcpyHtoDAsync((dsv4i_cuptr)(uintptr_t)bb.impl + off, src,
                                                     bytes, b->g.stream);
  return r == DSV4I_CUDA_SUCCESS ? DSV4_OK
                                 : dsv4i_gpu_fail(&b->g, r, "cuMemcpyHtoDAsync(buf_write)");
}

static dsv4_status sync_(dsv4i_backend *be) {
  gpu_backend *b = GPU(be);
  dsv4_status st = dsv4i_gpu_enter(&b->g);
  return st ? st : dsv4i_gpu_sync(&b->g);
}

/* ---- KV pages ------------------------------------------------------------ */

static dsv4_status kv_copy(dsv4i_backend *be, int32_t n, const int32_t *src, const int32_t *dst) {
  dsv4_status st = dsv4i_gpu_enter(&GPU(be)->g);
  return st ? st : dsv4i_gkv_copy(&GPU(be)->kv, n, src, dst);
}

/* ---- the step's metadata -------------------------------------------------- */

static dsv4_status bad_batch(gpu_backend *b, dsv4_status s) {
  b->n_tok = 0;
  return s;
}

static dsv4_status set_batch(dsv4i_backend *be, const dsv4i_batch *m) {
  gpu_backend *b = GPU(be);
  const int32_t n = m->n_tok;
  if (n < 1 || n > b->max_tok || m->n_pad < n || m->n_pad > b->max_tok || m->n_out < 0 ||
      m->n_out > b->max_out || m->n_out > n)
    return bad_batch(b, dsv4i_error(DSV4_ERR_INVALID_ARG, "cuda set_batch: %d tokens (bucket %d), "
                                    "%d outputs", (int)n, (int)m->n_pad, (int)m->n_out));
  if (b->n_engram_cols > 0 && !m->engram_ids)
    return bad_batch(b, dsv4i_error(DSV4_ERR_INVALID_ARG, "cuda set_batch: no Engram ids"));
  dsv4_status s = dsv4i_gpu_enter(&b->g);
  if (!s) s = dsv4i_gpu_sync(&b->g); /* the previous step's inputs copy has been read */
  if (!s) s = dsv4i_gkv_stage(&b->kv, &m->kv, b->st.tab);
  if (s) return bad_batch(b, s);
  /* runs: consecutive positions from the row's length, each row once (the CPU's checks) */
  const int32_t n_seq = m->kv.n_seq;
  memset(b->row_mark, 0, (size_t)b->n_slots);
  for (int32_t i = 0; i < n && !s; i++) {
    const int32_t r = m->seq[i];
    if (r < 0 || r >= n_seq) {
      s = dsv4i_error(DSV4_ERR_INVALID_ARG, "cuda set_batch: token %d: sequence row %d outside "
                      "the page table's %d", (int)i, (int)r, (int)n_seq);
    } else if (m->tokens[i] < 0 || m->tokens[i] >= b->vocab) {
      s = dsv4i_error(DSV4_ERR_INVALID_ARG, "cuda set_batch: token %d out of range",
                      (int)m->tokens[i]);
    } else if (i == 0 || r != m->seq[i - 1]) { /* a new run */
      if (b->row_mark[r] || m->pos[i] != m->kv.len[r])
        s = dsv4i_error(DSV4_ERR_INVALID_ARG, "cuda set_batch: run of sequence row %d starts at "
                        "%lld, cache holds %lld (or the row appears in two runs)", (int)r,
                        (long long)m->pos[i], (long long)m->kv.len[r]);
      b->row_mark[r] = 1;
    } else if (m->pos[i] != m->pos[i - 1] + 1) {
      s = dsv4i_error(DSV4_ERR_INVALID_ARG, "cuda set_batch: positions of sequence row %d not "
                      "consecutive", (int)r);
    }
    if (!s && m->pos[i] >= m->kv.end[r])
      s = dsv4i_error(DSV4_ERR_INVALID_ARG, "cuda set_batch: position %lld of sequence row %d not "
                      "reserved", (long long)m->pos[i], (int)r);
  }
  for (int32_t r = 0; !s && r < m->n_out; r++)
    if (m->out_tok[r] < 0 || m->out_tok[r] >= n || (r > 0 && m->out_tok[r] <= m->out_tok[r - 1]))
      s = dsv4i_error(DSV4_ERR_INVALID_ARG, "cuda set_batch: output rows not ascending in range");
  if (s) return bad_batch(b, s);
  /* token records: the batch, then the bucket's padding rows on the padding row */
  const int32_t np = m->n_pad;
  for (int32_t i = 0; i < np; i++) {
    b->seq_row[i] = i < n ? m->seq[i] : n_seq;
    b->pos[i] = i < n ? m->pos[i] : i - n;
    b->layout[i] = i < n ? m->layout[i] : DSV4I_LAYOUT_DECODE;
  }
  s = dsv4i_gpu_attn_tokens(np, b->seq_row, b->pos, b->layout, b->cfg->window_size, b->st.atok);
  if (s) return bad_batch(b, s);
  gpu_stage *st = &b->st;
  for (int32_t i = 0; i < np; i++) {
    st->tok[i] = i < n ? m->tokens[i] : 0;
    st->pos[i] = (int32_t)b->pos[i];
    for (int32_t r = 0; r <= DSV4I_GPU_MAX_RATIO; r++) {
      const int64_t gp = b->pos[i] + 1 - (r > 0 ? r : 1);
      st->gpos[(size_t)r * b->max_tok + i] = gp > 0 ? (int32_t)gp : 0;
    }
    st->img[i] = i < n && m->image ? (m->image[i] != 0) : 0;
  }
  if (b->n_engram_cols > 0) {
    memcpy(st->eids, m->engram_ids, sizeof(int64_t) * (size_t)n * (size_t)b->n_engram_cols);
    memset(st->eids + (size_t)n * b->n_engram_cols, 0,
           sizeof(int64_t) * (size_t)(np - n) * (size_t)b->n_engram_cols);
    /* the gate's exp split per reference call, as the CPU (padding rows: calls of their own) */
    dsv4i_engram_calls(np, b->layout, b->seq_row, st->gvec);
    dsv4i_engram_gate_vec(np, b->hc, st->gvec, st->gvec);
  }
  for (int32_t r = 0; r < b->max_out; r++) st->out_tok[r] = r < m->n_out ? m->out_tok[r] : 0;
  b->has_image = m->image != NULL;
  dsv4i_cures res = b->g.dev.cu->MemcpyHtoDAsync(b->ws.in, st->base, st->bytes, b->g.stream);
  if (res == DSV4I_CUDA_SUCCESS)
    res = b->g.dev.cu->MemcpyHtoDAsync(b->kv.tab, st->tab,
                                       (size_t)(n_seq + 1) * (size_t)b->kv.lay.ld * 4, b->g.stream);
  if (res != DSV4I_CUDA_SUCCESS)
    return bad_batch(b, dsv4i_gpu_fail(&b->g, res, "cuMemcpyHtoDAsync(step inputs)"));
  b->n_tok = n;
  b->n_pad = np;
  b->n_out = m->n_out;
  b->step_rows = n;
  b->step_out = m->n_out;
  return DSV4_OK;
}

/* ---- the step: a graph per bucket, or op by op ------------------------------ */

typedef struct record_ctx {
  gpu_backend *b;
  const dsv4i_step_io *io;
} record_ctx;

/* The step's ops after set_batch (recorded into the bucket's graph). */
static dsv4_status record(void *user, dsv4i_custream stream) {
  record_ctx *r = user;
  dsv4i_backend *be = &r->b->base;
  const dsv4i_step_io *io = r->io;
  (void)stream; /* the ops queue on the engine stream, which is the one captured */
  dsv4_status s = be->has_embed ? dsv4i_gpu_be_embed(be, io->h, io->pre) : DSV4_OK;
  for (int32_t L = be->first_layer; !s && L < be->last_layer; L++) {
    if (r->b->blocks[L].engram_slot >= 0) s = dsv4i_gpu_be_engram(be, L, io->h);
    if (!s) s = dsv4i_gpu_be_block(be, L, io->h, io->pre, io->taps);
  }
  if (!s && be->has_head && io->taps.impl) s = dsv4i_gpu_be_dspark_extend(be, io->taps);
  if (!s && be->has_head && r->b->step_out > 0) s = dsv4i_gpu_be_head(be, io->h, io->pre, io->logits);
  return s;
}

static dsv4_status run(dsv4i_backend *be, const dsv4i_step_io *io) {
  gpu_backend *b = GPU(be);
  if (b->graphs_off) return dsv4i_backend_run_blocks(be, io, NULL);
  dsv4_status s = set_batch(be, io->batch);
  if (s) return s;
  const int32_t k = dsv4i_gpu_graphs_bucket(&b->graphs, b->n_pad);
  if (k < 0 || b->graphs.bucket[k] != b->n_pad || !io->logits.impl) { /* not a planned shape */
    b->graphs_off = 1;
    s = dsv4i_backend_run_blocks(be, io, NULL);
    b->graphs_off = 0;
    return s;
  }
  /* a graph replays the buffers it was captured with: the engine's, fixed at create */
  if (!b->io_h) {
    b->io_h = io->h.impl;
    b->io_pre = io->pre.impl;
    b->io_logits = io->logits.impl;
    b->io_taps = io->taps.impl;
  }
  if (io->h.impl != b->io_h || io->pre.impl != b->io_pre || io->logits.impl != b->io_logits ||
      io->taps.impl != b->io_taps) {
    b->graphs_off = 1;
    s = dsv4i_backend_run_blocks(be, io, NULL);
    b->graphs_off = 0;
    return s;
  }
  b->step_rows = b->n_pad;
  b->step_out = b->n_pad < b->max_out ? b->n_pad : b->max_out;
  record_ctx rc = {b, io};
  s = dsv4i_gpu_graphs_run(&b->g, &b->graphs, k, record, &rc);
  b->step_rows = b->n_tok;
  b->step_out = b->n_out;
  return s;
}

/* ---- sampling ------------------------------------------------------------- */

static dsv4_status sample(dsv4i_backend *be, dsv4i_bbuf logits, int32_t n,
                          const dsv4i_sample_req *req, int32_t *tokens) {
  gpu_backend *b = GPU(be);
  if (n < 0 || n > b->max_out || (n > 0 && (!req || !tokens)) || !logits.impl)
    return dsv4i_error(DSV4_ERR_INVALID_ARG, "cuda sample: %d rows", (int)n);
  if (n == 0) return DSV4_OK;
  dsv4_status s = dsv4i_gpu_enter(&b->g);
  if (!s) s = dsv4i_gpu_sync(&b->g);
  if (s) return s;
  const size_t R = (size_t)b->max_out;
  float *temp = b->st.samp;
  uint64_t *seed = (uint64_t *)(void *)((char *)b->st.samp + al(4 * R));
  uint64_t *ctr = seed + R;
  for (int32_t r = 0; r < n; r++) {
    temp[r] = req[r].temperature;
    seed[r] = req[r].seed;
    ctr[r] = req[r].counter;
  }
  const dsv4i_cu *cu = b->g.dev.cu;
  const dsv4i_cuptr dt = b->ws.samp, ds = dt + al(4 * R), dc = ds + 8 * R;
  dsv4i_cures res = cu->MemcpyHtoDAsync(dt, b->st.samp, al(4 * R) + 16 * R, b->g.stream);
  if (res != DSV4I_CUDA_SUCCESS) return dsv4i_gpu_fail(&b->g, res, "cuMemcpyHtoDAsync(sampling)");
  const dsv4i_cuptr l = (dsv4i_cuptr)(uintptr_t)logits.impl;
  /* rows of equal n_valid share a launch (the engine gives every row the same) */
  for (int32_t r0 = 0, r1; r0 < n && !s; r0 = r1) {
    const int32_t nv = req[r0].n_valid > 0 && req[r0].n_valid < b->vocab ? req[r0].n_valid : b->vocab;
    for (r1 = r0 + 1; r1 < n; r1++) {
      const int32_t v = req[r1].n_valid > 0 && req[r1].n_valid < b->vocab ? req[r1].n_valid : b->vocab;
      if (v != nv) break;
    }
    s = dsv4i_gpu_sample(&b->ops, b->g.stream, r1 - r0, nv,
                         l + (dsv4i_cuptr)r0 * (dsv4i_cuptr)b->vocab * 4u, b->vocab,
                         dt + 4u * (dsv4i_cuptr)r0, ds + 8u * (dsv4i_cuptr)r0,
                         dc + 8u * (dsv4i_cuptr)r0, b->ws.samp_out + 4u * (dsv4i_cuptr)r0);
  }
  if (s) return dsv4i_gpu_note(&b->g, s);
  res = cu->MemcpyDtoHAsync(b->st.samp_out, b->ws.samp_out, 4 * (size_t)n, b->g.stream);
  if (res != DSV4I_CUDA_SUCCESS) return dsv4i_gpu_fail(&b->g, res, "cuMemcpyDtoHAsync(tokens)");
  if ((s = dsv4i_gpu_sync(&b->g))) return s;
  memcpy(tokens, b->st.samp_out, 4 * (size_t)n);
  for (int32_t r = 0; r < n; r++) {
    if (tokens[r] >= 0) continue;
    /* no token (kernels/sample.cu): name the value, as the CPU backend does */
    const int64_t i = -1 - (int64_t)tokens[r];
    tokens[r] = -1; /* as the CPU backend */
    const int32_t nv = req[r].n_valid > 0 && req[r].n_valid < b->vocab ? req[r].n_valid : b->vocab;
    if (i >= nv)
      return dsv4i_error(DSV4_ERR_NOT_FINITE, "logits row %d: all %lld values are -inf: no token "
                         "can be drawn", (int)r, (long long)nv);
    float v = 0.0f;
    res = cu->MemcpyDtoH(&v, l + ((dsv4i_cuptr)r * (dsv4i_cuptr)b->vocab + (dsv4i_cuptr)i) * 4u, 4);
    if (res != DSV4I_CUDA_SUCCESS) return dsv4i_gpu_fail(&b->g, res, "cuMemcpyDtoH(logit)");
    return dsv4i_error(DSV4_ERR_NOT_FINITE, "logits row %d: the logit of token %lld is %s: no "
                       "token can be drawn (damaged weights or an overflow)", (int)r, (long long)i,
                       v != v ? "NaN" : "+inf");
  }
  return DSV4_OK;
}

static dsv4_status accept(dsv4i_backend *be, dsv4i_bbuf logits, int32_t row,
                          const dsv4i_accept_req *req, int32_t *accepted, int32_t *token) {
  gpu_backend *b = GPU(be);
  if (row < 0 || row >= b->max_out || !req || req->draft < 0 || req->draft >= b->vocab ||
      !accepted || !token || !logits.impl)
    return dsv4i_error(DSV4_ERR_INVALID_ARG, "cuda accept: row %d", (int)row);
  dsv4_status st = dsv4i_gpu_enter(&b->g);
  if (!st) st = dsv4i_gpu_sync(&b->g);
  if (st) return st;
  const int32_t V = req->n_valid > 0 && req->n_valid < b->vocab ? req->n_valid : b->vocab;
  const dsv4i_cu *cu = b->g.dev.cu;
  dsv4i_cures r = DSV4I_CUDA_SUCCESS;
  if (req->q && req->draft < V) /* the draft's distribution comes from the host */
    r = cu->MemcpyHtoDAsync(b->ws.accq, req->q, sizeof(float) * (size_t)V, b->g.stream);
  if (r != DSV4I_CUDA_SUCCESS) return dsv4i_gpu_fail(&b->g, r, "cuMemcpyHtoDAsync(draft logits)");
  st = dsv4i_gpu_accept(&b->ops, b->g.stream, V,
                        (dsv4i_cuptr)(uintptr_t)logits.impl + (dsv4i_cuptr)row * b->vocab * 4u,
                        req->q && req->draft < V ? b->ws.accq : 0, req->temperature,
                        req->q_temperature, req->draft, req->seed, req->pos, DSV4I_TAG_ACCEPT,
                        DSV4I_TAG_RESID, b->ws.accout);
  if (st) return dsv4i_gpu_note(&b->g, st);
  if ((st = dsv4i_gpu_sync(&b->g))) return st;
  int32_t out[2];
  r = cu->MemcpyDtoH(out, b->ws.accout, sizeof out);
  if (r != DSV4I_CUDA_SUCCESS) return dsv4i_gpu_fail(&b->g, r, "cuMemcpyDtoH(accept)");
  *accepted = out[0];
  *token = out[1];
  return DSV4_OK;
}

/* ---- create / destroy ------------------------------------------------------- */

static void destroy(dsv4i_backend *be) {
  gpu_backend *b = GPU(be);
  if (!b) return;
  if (b->g.dev.cu) {
    dsv4i_gpu_enter(&b->g);
    dsv4i_gpu_graphs_free(&b->g, &b->graphs);
    dsv4i_gpu_graphs_free(&b->g, &b->dgraphs[0]);
    dsv4i_gpu_graphs_free(&b->g, &b->dgraphs[1]);
  }
  dsv4i_gkv_free(&b->kv);
  dsv4i_gpu_close(&b->g);
  free(b->blocks);
  free(b->dspark);
  free(b->row_mark);
  free(b->pos);
  free(b->seq_row);
  free(b->layout);
  free(b);
}

int32_t dsv4i_gpu_backend_set_eager(dsv4i_backend *be, int32_t eager) {
  const int32_t old = GPU(be)->graphs_off;
  GPU(be)->graphs_off = eager;
  return old;
}

int32_t dsv4i_gpu_backend_captures(const dsv4i_backend *be) {
  return ((const gpu_backend *)be)->graphs.captures;
}

int32_t dsv4i_gpu_backend_draft_captures(const dsv4i_backend *be) {
  const gpu_backend *b = (const gpu_backend *)be;
  return b->dgraphs[0].captures + b->dgraphs[1].captures;
}

void dsv4i_gpu_backend_selection(dsv4i_backend *be, dsv4i_gpu_selection *out) {
  const gpu_ws *w = &GPU(be)->ws;
  out->topk.impl = (void *)(uintptr_t)w->topk;
  out->cand.impl = w->cand_ld > 0 ? (void *)(uintptr_t)w->cand : NULL;
  out->scores.impl = (void *)(uintptr_t)w->scores;
  out->topk_ld = w->topk_ld;
  out->cand_ld = w->cand_ld;
  out->score_ld = w->score_ld;
}

void dsv4i_gpu_backend_force_topk(dsv4i_backend *be, dsv4i_bbuf topk) {
  GPU(be)->force_topk = (dsv4i_cuptr)(uintptr_t)topk.impl;
}

/* PCI location of the device (cuda.h CU_DEVICE_ATTRIBUTE_PCI_DOMAIN_ID, _BUS_ID,
 * _DEVICE_ID): what names it to the TP ranks' duplicate check. */
enum { ATTR_PCI_BUS = 33, ATTR_PCI_DEVICE = 34, ATTR_PCI_DOMAIN = 50 };

static dsv4_status tp_join(gpu_backend *b, const dsv4i_tp_ops *tp) {
  if (!tp || !tp->device_join || !tp->device_allreduce)
    return dsv4i_error(DSV4_ERR_INVALID_ARG, "cuda backend: tp_size %d without a device "
                       "communicator binding", (int)b->base.tp_size);
  static const int attr[3] = {ATTR_PCI_DOMAIN, ATTR_PCI_BUS, ATTR_PCI_DEVICE};
  int32_t pci[4] = {0, 0, 0, 0};
  for (int i = 0; i < 3; i++) {
    int v = 0;
    const dsv4i_cures r = b->g.dev.cu->DeviceGetAttribute(&v, (dsv4i_cuattr)attr[i], b->g.dev.dev);
    if (r != DSV4I_CUDA_SUCCESS) return dsv4i_gpu_fail(&b->g, r, "cuDeviceGetAttribute(PCI)");
    pci[i] = v;
  }
  uint8_t id[16];
  memcpy(id, pci, sizeof id);
  dsv4_status s = tp->device_join(tp->ctx, id, b->g.dev.ordinal);
  if (!s) b->tp = tp;
  return s;
}

dsv4_status dsv4i_gpu_backend_set_tp(dsv4i_backend *be, const dsv4i_tp_ops *tp) {
  gpu_backend *b = GPU(be);
  if (b->graphs.captures > 0)
    return dsv4i_error(DSV4_ERR_INVALID_ARG, "cuda backend: TP binding after %d graphs were "
                       "captured without it", (int)b->graphs.captures);
  dsv4_status s = dsv4i_gpu_enter(&b->g);
  return s ? s : tp_join(b, tp);
}

static const dsv4i_backend_ops cuda_ops = {
  .name = "cuda",
  .destroy = destroy,
  .buf_alloc = buf_alloc,
  .buf_free = buf_free,
  .buf_read = buf_read,
  .buf_write = buf_write,
  .kv_copy = kv_copy,
  .run = run,
  .set_batch = set_batch,
  .embed = dsv4i_gpu_be_embed,
  .engram = dsv4i_gpu_be_engram,
  .block = dsv4i_gpu_be_block,
  .head = dsv4i_gpu_be_head,
  .sample = sample,
  .accept = accept,
  .sync = sync_,
  .dspark_extend = dsv4i_gpu_be_dspark_extend,
  .dspark_draft = dsv4i_gpu_be_dspark_draft,
};

static dsv4_status stage_alloc(gpu_backend *b) {
  const dsv4i_config *c = b->cfg;
  size_t off[N_INPUTS];
  const size_t in = inputs_layout(c, b->max_tok, b->max_out, off);
  const size_t R = (size_t)b->max_out, samp = al(4 * R) + 16 * R;
  b->st.bytes = in;
  void *h;
  dsv4i_cuptr d;
  dsv4_status s = dsv4i_gpu_hostpool_take(&b->g.pinned, in + al(samp) + al(4 * R), "step staging",
                                          &h, &d);
  if (!s && b->dspark)
    s = dsv4i_gpu_hostpool_take(&b->g.pinned, dsv4i_gpu_dspark_inputs_bytes(b->max_out, b->dspark->block),
                                "draft staging", &b->st.din, &d);
  void *x = NULL;
  if (!s && b->dspark)
    s = dsv4i_gpu_hostpool_take(&b->g.pinned, (size_t)b->max_rows * (size_t)b->dim * 2,
                                "draft rows", &x, &d);
  b->st.dxc = x;
  void *t = NULL;
  if (!s)
    s = dsv4i_gpu_hostpool_take(&b->g.pinned, (size_t)(b->n_slots + 1) * (size_t)b->kv_ld * 4,
                                "page table staging", &t, &d);
  b->st.tab = t;
  if (s) return s;
  char *p = h;
  b->st.base = p;
  b->st.tok = (int32_t *)(void *)(p + off[0]);
  b->st.pos = (int32_t *)(void *)(p + off[1]);
  b->st.gpos = (int32_t *)(void *)(p + off[2]);
  b->st.atok = (dsv4i_gpu_attn_tok *)(void *)(p + off[3]);
  b->st.eids = (int64_t *)(void *)(p + off[4]);
  b->st.img = (uint8_t *)(p + off[5]);
  b->st.out_tok = (int32_t *)(void *)(p + off[6]);
  b->st.gvec = (int32_t *)(void *)(p + off[7]);
  b->st.samp = p + in;
  b->st.samp_out = (int32_t *)(void *)(p + in + al(samp));
  return DSV4_OK;
}

/* A TP shard splits heads, wo_a groups (o_lora rows each) and the expert intermediate
 * dimension into equal runs of whole 32-blocks (gpu_weights.c cuts them). */
static dsv4_status tp_check(const dsv4i_config *c, int32_t tp) {
  if (c->n_heads % tp || c->o_groups % tp || c->moe_inter_dim % (32 * tp) ||
      c->o_lora_rank % 32 || ((int64_t)c->n_heads / tp * c->head_dim) % 32)
    return dsv4i_error(DSV4_ERR_UNSUPPORTED,
                       "cuda backend: TP %d must divide the heads (%d), the wo_a groups (%d) and "
                       "the expert intermediate dimension in 32-blocks (%d), with o_lora_rank "
                       "(%d) a multiple of 32", (int)tp, (int)c->n_heads, (int)c->o_groups,
                       (int)c->moe_inter_dim, (int)c->o_lora_rank);
  return DSV4_OK;
}

static dsv4_status cuda_create(const dsv4i_backend_desc *d, dsv4i_backend **out) {
  gpu_backend *b = dsv4i_calloc(1, sizeof *b, "cuda backend");
  if (!b) return DSV4_ERR_OUT_OF_MEMORY;
  dsv4_status s = dsv4i_backend_init(&b->base, &cuda_ops, DSV4_BACKEND_CUDA, d, DSV4I_GPU_MAX_TP);
  if (s) {
    free(b);
    return s;
  }
  const dsv4i_config *c = b->base.cfg;
  b->model = d->model;
  b->cfg = c;
  b->hc = c->hc_mult;
  b->dim = c->dim;
  b->vocab = c->vocab_size;
  b->n_engram_cols = c->n_engram * (c->engram_max_ngram - 1) * c->engram_n_heads;
  b->max_tok = d->max_batch_tokens;
  b->max_out = d->max_out_rows;
  const ws_part wp = part_of(c, b->base.first_layer, b->base.last_layer, b->base.tp_size);
  b->max_rows = max_rows(&wp, b->max_tok, b->max_out);
  b->n_slots = d->n_slots;
  b->kv_ld = d->kv_layout ? d->kv_layout->ld : 0;
  b->base.n_threads = 1;
  const size_t T = (size_t)b->max_tok;
  b->blocks = dsv4i_calloc((size_t)c->n_total_layers, sizeof *b->blocks, "cuda blocks");
  if (b->blocks && dspark_block(c) && b->base.has_head) {
    if (c->n_dspark_targets <= 0) {
      s = dsv4i_error(DSV4_ERR_WEIGHTS, "cuda DSpark: %d stages but no target layers",
                      (int)c->n_mtp_layers);
    } else if ((b->dspark = dsv4i_calloc(1, sizeof *b->dspark, "cuda DSpark"))) {
      b->dspark->n_stages = c->n_mtp_layers;
      b->dspark->block = c->dspark_block_size;
      b->dspark->rank = c->dspark_markov_rank;
      b->dspark->n_taps = c->n_dspark_targets;
    }
  }
  b->row_mark = dsv4i_calloc((size_t)(d->n_slots > 0 ? d->n_slots : 1), 1, "cuda batch");
  b->pos = dsv4i_calloc(T, sizeof(int64_t), "cuda batch");
  b->seq_row = dsv4i_calloc(T, sizeof(int32_t), "cuda batch");
  b->layout = dsv4i_calloc(T, sizeof(int32_t), "cuda batch");
  if (!b->blocks || (dspark_block(c) && b->base.has_head && !b->dspark && !s) || !b->row_mark || !b->pos || !b->seq_row || !b->layout)
    s = DSV4_ERR_OUT_OF_MEMORY;
  if (!s && (b->max_tok < 1 || b->max_out < 1 || d->n_slots < 1 || d->max_positions < 1 ||
             d->max_positions >= (INT64_C(1) << 24) || d->pool_pages < 1 || !d->kv_layout))
    s = dsv4i_error(DSV4_ERR_INVALID_ARG, "cuda backend: %d tokens, %d output rows, %d slots, "
                    "%lld positions (below 2^24), %lld pages, or no KV layout", (int)b->max_tok,
                    (int)b->max_out, (int)d->n_slots, (long long)d->max_positions,
                    (long long)d->pool_pages);
  if (!s && (d->kv_layout->page_bytes != dsv4i_gkv_page_bytes(c) ||
             d->kv_layout->max_positions != d->max_positions))
    s = dsv4i_error(DSV4_ERR_INVALID_ARG, "cuda backend: KV layout of %zu-byte pages for %lld "
                    "positions, the format's is %zu bytes for %lld", d->kv_layout->page_bytes,
                    (long long)d->kv_layout->max_positions, dsv4i_gkv_page_bytes(c),
                    (long long)d->max_positions);
  /* window records: the native one, or fp8_ds_mla, whose kernels take NoPE dims in whole
   * 32-value runs (a 16-dim slice of a record is all codes or all bf16) */
  const int32_t win_nope = d->kv_layout ? d->kv_layout->head_dim - d->kv_layout->rope_dim : 0;
  if (!s && d->kv_layout->window_format != DSV4I_KV_NATIVE &&
      (d->kv_layout->window_format != DSV4I_KV_FP8_DS_MLA || win_nope <= 0 || win_nope % 32))
    s = dsv4i_error(DSV4_ERR_UNSUPPORTED, "cuda backend: KV window format %d with head_dim %d "
                    "and %d RoPE dims (the fp8_ds_mla kernels take NoPE dims in multiples of 32)",
                    (int)d->kv_layout->window_format, (int)d->kv_layout->head_dim,
                    (int)d->kv_layout->rope_dim);
  if (!s) s = dsv4i_gpu_open(d->device, &b->g);
  /* TP: the shard must split along whole 32-blocks (the weight table's split rules); then
   * the ranks join the stage's device communicator (NCCL: refused when two share a device) */
  if (!s && b->base.tp_size > 1) s = tp_check(c, b->base.tp_size);
  if (!s && b->base.tp_size > 1) s = tp_join(b, d->tp_comm);
  if (!s) s = dsv4i_gpu_ops_init(&b->g.kr, &b->ops);
  if (!s) b->ops.cpu_order = d->cpu_order ? 1 : 0;
  if (!s) s = dsv4i_gpu_attn_select(&b->g.kr, &b->ak);
  if (!s && d->kv_layout->window_format == DSV4I_KV_FP8_DS_MLA) b->ak.win_nope = win_nope;
  /* attention: CPU order, or the tiled order by the one-launch kernel for short calls and
   * the split pass in its order for longer ones (docs/gpu-attention.md "Speed") */
  b->ak.cpu_order = b->ops.cpu_order;
  if (!s && b->dspark) s = dsv4i_gpu_dspark_select(&b->g.kr, &b->dspark->k);
  if (!s && d->n_buckets > 0 && d->bucket_tokens)
    s = dsv4i_gpu_graphs_init(&b->graphs, d->bucket_tokens, d->n_buckets > 16 ? 16 : d->n_buckets);
  else
    b->graphs_off = 1; /* no step plan: op by op */
  if (!s && !b->graphs_off && b->dspark) { /* drafts: the plan's buckets as sequence counts */
    const int32_t cap = b->max_out < b->n_slots ? b->max_out : b->n_slots;
    int32_t nd = 0;
    for (int32_t i = 0; i < d->n_buckets && nd < 15; i++)
      if (d->bucket_tokens[i] < cap) b->dbucket[nd++] = d->bucket_tokens[i];
    b->dbucket[nd++] = cap;
    for (int i = 0; !s && i < 2; i++) s = dsv4i_gpu_graphs_init(&b->dgraphs[i], b->dbucket, nd);
  }
  /* measure, then one pool: weights, KV pages + tables, workspace */
  if (!s) s = dsv4i_gpu_be_load(b, d, 1);
  size_t kvb = 0, wsb = 0;
  if (!s) {
    kvb = dsv4i_gkv_device_bytes(d->kv_layout, d->n_slots, b->max_tok, d->pool_pages);
    wsb = ws_bytes(c, &wp, b->max_tok, b->max_out, d->max_positions);
    const size_t total = b->weight_bytes + b->temp_bytes + kvb + wsb + 4096;
    s = dsv4i_gpu_pool_create(&b->g, total);
    if (!s) {
      size_t off[7];
      const size_t R = (size_t)b->max_out;
      const int32_t B = wp.B;
      s = dsv4i_gpu_hostpool_create(
          &b->g, b->pinned_bytes + al(inputs_layout(c, b->max_tok, b->max_out, off)) +
                     al(al(4 * R) + 16 * R) + al(4 * R) + 4096 +
                     (B ? al(dsv4i_gpu_dspark_inputs_bytes(b->max_out, B)) +
                              al((size_t)b->max_rows * (size_t)b->dim * 2) : 0) +
                     al((size_t)(b->n_slots + 1) * (size_t)b->kv_ld * 4));
    }
  }
  if (!s) s = stage_alloc(b);
  if (!s) {
    dsv4i_cuptr base = 0;
    s = dsv4i_gpu_pool_take(&b->g.pool, wsb, "step workspace", &base);
    carve cv = {0, base};
    if (!s) ws_layout(c, &wp, b->max_tok, b->max_rows, b->max_out, d->max_positions, &cv,
                      &b->ws);
    /* the Markov step's ticket starts at 0 (every step leaves it 0) */
    if (!s && b->ws.dticket) {
      const dsv4i_cures r = b->g.dev.cu->MemsetD8Async(b->ws.dticket, 0, 4, b->g.stream);
      s = r == DSV4I_CUDA_SUCCESS ? dsv4i_gpu_sync(&b->g) : dsv4i_gpu_fail(&b->g, r, "cuMemsetD8Async");
    }
  }
  if (!s) s = dsv4i_gkv_create(&b->kv, &b->g, d->kv_layout, d->n_slots, b->max_tok,
                               d->pool_pages);
  if (!s) s = dsv4i_gpu_be_load(b, d, 0);
  if (s) {
    dsv4i_error_prefix("backend cuda");
    destroy(&b->base);
    return s;
  }
  b->pool_mark = dsv4i_gpu_pool_mark(&b->g.pool);
  dsv4i_log(d->log, DSV4_LOG_INFO,
            "cuda backend: device %d (%s), pool %zu B (weights %zu, KV %zu, workspace %zu), "
            "pinned %zu B, %lld pages of %lld B, %d slots",
            (int)d->device, b->g.dev.name, b->g.pool.size, b->weight_bytes, kvb, wsb,
            b->g.pinned.size, (long long)d->pool_pages, (long long)d->kv_layout->page_bytes, (int)d->n_slots);
  *out = &b->base;
  return DSV4_OK;
}

const dsv4i_backend_entry dsv4i_cuda_backend_entry = {
  .kind = DSV4_BACKEND_CUDA,
  .name = "cuda",
  .format = cuda_format,
  .create = cuda_create,
};
