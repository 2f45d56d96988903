/*
 * Pipelined decode of a distributed engine (docs/distributed.md "Overlap"): a decode
 * call's rows run as micro-batches, each stage receiving, computing and sending one
 * micro-batch after another with no exchange in between, so stage k computes
 * micro-batch i + 1 while stage k + 1 computes micro-batch i. One status exchange
 * ends the call's steps, then the last stage's outputs are shared as for one step.
 */
#include <stdlib.h>

#include "engine/dist.h"
#include "engine/engine.h"

dsv4_status dsv4i_engine_decode_pipelined(struct dsv4_engine *e, int32_t n, dsv4i_seq *const *qs,
                                          const int64_t *lens, const dsv4i_sampling *smp,
                                          int want, float *logits, int32_t *sampled) {
  const int32_t mb = e->args.micro_batches < n ? e->args.micro_batches : n;
  const int has_head = dsv4i_dist_has_head(e->dist);
  const int32_t cols = e->n_engram_cols;
  dsv4_status s = DSV4_OK, so = DSV4_OK; /* the steps' and the head's outputs' status */
  char *so_msg = NULL;
  for (int32_t i = 0; i < n; i++) e->b_seqid[i] = qs[i]->id;
  for (int32_t j = 0, a = 0; j < mb; j++) {
    const int32_t m = n / mb + (j < n % mb); /* consecutive rows, sizes differ by at most 1 */
    dsv4i_batch b = {m, dsv4i_plan_bucket(&e->plan, m), e->b_tok + a, e->b_pos + a, NULL,
                     e->b_layout + a, NULL, want ? m : 0, e->b_out /* rows 0..m-1 */,
                     e->b_engram ? e->b_engram + (size_t)a * (size_t)cols : NULL, {0}};
    int32_t n_run = 0;
    if (!s) s = dsv4i_engine_step_table(e, &b, e->b_slot + a, &n_run);
    const dsv4i_step_io io = {&b, e->h, e->pre, e->taps, e->logits};
    s = dsv4i_dist_stage_step(e, &io, e->b_slot + a, e->b_seqid + a, s);
    if (!s && want && has_head && !so) { /* the head's rows leave before the next micro-batch
                                          * overwrites them */
      for (int32_t i = a; i < a + m; i++) qs[i]->len = lens[i] + 1; /* the sampled position */
      dsv4i_sampling sm;
      if (smp) {
        sm = *smp;
        if (smp->seeds) sm.seeds = smp->seeds + a;
      }
      so = dsv4i_engine_local_outputs(e, m, smp ? &sm : NULL, qs + a,
                                      logits ? logits + (size_t)a * (size_t)e->vocab : NULL,
                                      sampled ? sampled + a : NULL);
      for (int32_t i = a; i < a + m; i++) qs[i]->len = lens[i];
      if (so) so_msg = dsv4i_strdup(dsv4i_error_message(), "error message");
    }
    a += m;
  }
  s = dsv4i_engine_note(e, dsv4i_dist_end_steps(e->dist, s));
  if (!s) { /* every rank ran every micro-batch: the positions are held */
    for (int32_t i = 0; i < n; i++) {
      e->b_rslot[i] = e->b_slot[i];
      e->b_rend[i] = lens[i] + 1;
    }
    s = dsv4i_engine_note(e, dsv4i_kv_step_commit(&e->kv, n, e->b_rslot, e->b_rend));
  }
  if (!s && want) {
    if (so) dsv4i_error(so, "%s", so_msg ? so_msg : "(message lost)");
    s = dsv4i_engine_share_outputs(e, so, n, logits, sampled);
  }
  free(so_msg);
  if (!s)
    for (int32_t i = 0; i < n; i++) qs[i]->len = lens[i] + 1;
  return s;
}
