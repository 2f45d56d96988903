/*
 * Tensor parallelism on the CPU backend: block sharding and the partial-sum
 * reduction (cpu_tp.h). Shares are contiguous: TP rank r of s keeps heads
 * [r·H/s, (r+1)·H/s), which are exactly the heads of its wo_a groups
 * [r·G/s, (r+1)·G/s) (a group's heads are contiguous), and intermediate
 * columns [r·I/s, (r+1)·I/s) of every expert.
 */
#include <stdlib.h>

#include "cpu/cpu_backend.h"
#include "cpu/cpu_impl.h"
#include "cpu/cpu_tp.h"
#include "model/formats.h"

/* One expert's share: w1/w3 rows and w2 columns of the intermediate dim. */
static dsv4_status shard_expert(dsv4i_wview *w1, dsv4i_wview *w2, dsv4i_wview *w3, int32_t i0,
                                int32_t ni) {
  dsv4_status s = dsv4i_wview_rows(w1, i0, ni, w1);
  if (!s) s = dsv4i_wview_rows(w3, i0, ni, w3);
  if (!s) s = dsv4i_wview_cols(w2, i0, ni, w2);
  return s;
}

dsv4_status dsv4i_cpu_tp_shard(cpu_block *k, int32_t rank, int32_t size, const dsv4i_tp_ops *tp) {
  dsv4i_attn_layer *a = &k->attn;
  dsv4i_moe *m = &k->moe;
  if (size < 2 || rank < 0 || rank >= size || !tp || !tp->chain_recv || !tp->chain_send || !tp->share)
    return dsv4i_error(DSV4_ERR_INVALID_ARG, "cpu backend: TP rank %d of %d without collectives",
                       (int)rank, (int)size);
  if (a->n_heads % size || a->o_groups % size || m->inter % (32 * size))
    return dsv4i_error(DSV4_ERR_UNSUPPORTED,
                       "cpu backend, layer %d: TP %d must divide the heads (%d), the wo_a groups "
                       "(%d) and the expert intermediate dimension in 32-blocks (%d)",
                       (int)a->layer, (int)size, (int)a->n_heads, (int)a->o_groups, (int)m->inter);
  /* attention: heads (wq_b rows, sink), wo_a groups (rows), wo_b columns */
  const int32_t H = a->n_heads / size, G = a->o_groups / size, hd = a->head_dim, olr = a->o_lora;
  dsv4_status s = dsv4i_wview_rows(&a->wq_b, rank * H * hd, H * hd, &a->wq_b);
  if (!s) s = dsv4i_wview_rows(&a->wo_a, rank * G * olr, G * olr, &a->wo_a);
  if (!s) s = dsv4i_wview_cols(&a->wo_b, rank * G * olr, G * olr, &a->wo_b);
  if (s) return s;
  a->sink += (size_t)rank * (size_t)H;
  a->n_heads = H;
  a->o_groups = G;
  a->tp = tp;
  /* MoE: every routed expert and the shared expert on the same intermediate columns */
  const int32_t I = m->inter / size, i0 = rank * I;
  dsv4i_wview *w = k->experts; /* w1 [E], w2 [E], w3 [E] */
  const int32_t E = m->n_experts;
  for (int32_t e = 0; !s && e < E; e++) s = shard_expert(&w[e], &w[E + e], &w[2 * E + e], i0, I);
  if (!s && m->has_shared) s = shard_expert(&m->sw1, &m->sw2, &m->sw3, i0, I);
  if (s) return s;
  m->inter = I;
  m->tp = tp;
  return DSV4_OK;
}

dsv4_status dsv4i_cpu_tp_linear(const dsv4i_tp_ops *tp, const dsv4i_wview *w, int64_t n_tok,
                                const uint16_t *x, int64_t ldx, uint16_t *y, int64_t ldy) {
  /* ldy == w->rows: the shared rows are one contiguous block */
  const int32_t K = w->cols, O = w->rows;
  if ((w->fmt != DSV4I_W_FP8 && w->fmt != DSV4I_W_FP4) || K % 32 || ldy != O)
    return dsv4i_error(DSV4_ERR_INVALID_ARG, "cpu TP linear: needs an fp8/fp4 view with K %% 32 "
                       "== 0 and dense rows (format %d, K %d)", (int)w->fmt, (int)K);
  const size_t nk = (size_t)n_tok * (size_t)K, no = (size_t)n_tok * (size_t)O;
  float *xq = dsv4i_malloc((nk + nk / 32 + no) * sizeof(float), "TP linear scratch");
  if (!xq) return DSV4_ERR_OUT_OF_MEMORY;
  float *sx = xq + nk, *acc = sx + nk / 32;
  dsv4_status s = dsv4i_cpu_act_quant(n_tok, K, x, ldx, xq, sx);
  if (!s) s = tp->chain_recv(tp->ctx, acc, no);
  if (!s) {
    dsv4i_cpu_qgemm_acc(w, n_tok, xq, sx, acc, O);
    s = tp->chain_send(tp->ctx, acc, no);
  }
  if (!s && tp->rank == tp->size - 1) /* the whole sums: round as one process does */
    for (int64_t t = 0; t < n_tok; t++)
      for (int32_t o = 0; o < O; o++) y[t * ldy + o] = dsv4i_f32_to_bf16(acc[(size_t)t * O + o]);
  if (!s) s = tp->share(tp->ctx, y, no * sizeof *y);
  free(xq);
  return s;
}
