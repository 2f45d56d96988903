/*
 * The Engram gate's reference calls in a step's batch (docs/cpu-numerics.md,
 * "Engram gate"): shared by the backends so that each splits a batch the same way.
 */
#include "backend/backend_impl.h"

void dsv4i_engram_calls(int32_t n_tok, const int32_t *layout, const int32_t *seq, int32_t *run) {
  for (int32_t t = 0; t < n_tok; t++) run[t] = layout[t] == DSV4I_LAYOUT_DECODE ? -1 : seq[t];
}

void dsv4i_engram_gate_vec(int32_t n_tok, int32_t hc, const int32_t *run, int32_t *vec) {
  int32_t r0 = 0;
  while (r0 < n_tok) {
    int32_t r1 = r0 + 1; /* the call [r0, r1): a run of equal values >= 0, or one token */
    if (run[r0] >= 0)
      while (r1 < n_tok && run[r1] == run[r0]) r1++;
    /* torch vectorises the first floor(len·hc / 32)·32 gates of the call's [len][hc] tensor */
    const int64_t n_vec = (int64_t)(r1 - r0) * hc / 32 * 32;
    for (int32_t t = r0; t < r1; t++) { /* run[t] is read before vec[t] is written */
      const int64_t left = n_vec - (int64_t)(t - r0) * hc;
      vec[t] = left <= 0 ? 0 : left >= hc ? hc : (int32_t)left;
    }
    r0 = r1;
  }
}
