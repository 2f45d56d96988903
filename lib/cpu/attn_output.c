/*
 * Attention output (spec §5.4 steps 5–6): inverse RoPE of the output's rope
 * dims at the query position, the grouped low-rank wo_a (bf16 einsum: each
 * group of n_heads/o_groups heads projects with its own o_lora rows, fp32
 * accumulation, no activation quantisation) and the fp8 wo_b.
 */
#include <stdlib.h>

#include "cpu/attn_impl.h"
#include "cpu/cpu_tp.h"

dsv4_status dsv4i_attn_output(const attn_call *c, uint16_t *o, uint16_t *out) {
  const dsv4i_attn_layer *L = c->L;
  const int32_t H = L->n_heads, hd = L->head_dim, rd = L->rope_dim;
  const int32_t G = L->o_groups, olr = L->o_lora, gw = H * hd / G;
  const int64_t ldo = (int64_t)H * hd;
  dsv4_status st = dsv4i_cpu_rope(c->n, H, L->n_freq, o + (hd - rd), ldo, hd, c->cs, 1);
  if (st != DSV4_OK) return st;
  uint16_t *u = dsv4i_malloc((size_t)c->n * (size_t)G * (size_t)olr * sizeof *u, "wo_a output");
  if (!u) return DSV4_ERR_OUT_OF_MEMORY;
  for (int32_t g = 0; g < G && st == DSV4_OK; g++) {
    dsv4i_wview wg;
    st = dsv4i_wview_rows(&L->wo_a, g * olr, olr, &wg);
    if (st == DSV4_OK)
      st = dsv4i_cpu_linear(&wg, c->n, o + (size_t)g * (size_t)gw, ldo, u + (size_t)g * (size_t)olr,
                            (int64_t)G * olr);
  }
  /* tensor parallelism: this rank's groups are its share of wo_b's input */
  if (st == DSV4_OK && L->tp) st = dsv4i_cpu_tp_linear(L->tp, &L->wo_b, c->n, u, (int64_t)G * olr, out, L->dim);
  else if (st == DSV4_OK) st = dsv4i_cpu_linear(&L->wo_b, c->n, u, (int64_t)G * olr, out, L->dim);
  free(u);
  return st;
}
