/* Token records of device attention calls (attn_tokens.h). */
#include "gpu/attn_tokens.h"

#include <string.h>

#define MAX_POS (INT64_C(1) << 24)

dsv4_status dsv4i_gpu_attn_tokens(int32_t n, const int32_t *seq_row, const int64_t *pos,
                                  const int32_t *layout, int32_t window, dsv4i_gpu_attn_tok *out) {
  if (n < 0 || window < 1 || (n > 0 && (!seq_row || !pos || !layout || !out)))
    return dsv4i_error(DSV4_ERR_INVALID_ARG, "attention tokens: %d tokens, window %d, or a NULL "
                       "array", (int)n, (int)window);
  int32_t r0 = 0;
  for (int32_t t = 0; t < n; t++) {
    const int64_t p = pos[t];
    if (seq_row[t] < 0 || p < 0 || p >= MAX_POS)
      return dsv4i_error(DSV4_ERR_INVALID_ARG, "attention tokens: token %d: row %d, position %lld "
                         "(positions 0 .. 2^24 - 1)", (int)t, (int)seq_row[t], (long long)p);
    const int64_t need = p + 1 < window ? p + 1 : window;
    if (layout[t] != 0 && (layout[t] < need || layout[t] > window))
      return dsv4i_error(DSV4_ERR_INVALID_ARG, "attention tokens: token %d: prefill layout width "
                         "%d outside [%lld, %d]", (int)t, (int)layout[t], (long long)need,
                         (int)window);
    if (t > 0 && seq_row[t] == seq_row[t - 1]) {
      if (p != pos[t - 1] + 1)
        return dsv4i_error(DSV4_ERR_INVALID_ARG, "attention tokens: token %d: positions of a "
                           "sequence must be consecutive (%lld after %lld)", (int)t, (long long)p,
                           (long long)pos[t - 1]);
    } else {
      if (t > 0) /* close the previous run */
        for (int32_t u = r0; u < t; u++) out[u].last = (int32_t)pos[t - 1];
      for (int32_t u = 0; u < t; u++)
        if (seq_row[u] == seq_row[t])
          return dsv4i_error(DSV4_ERR_INVALID_ARG, "attention tokens: token %d: a sequence's "
                             "tokens must be consecutive in the batch (row %d)", (int)t,
                             (int)seq_row[t]);
      r0 = t;
    }
    memset(&out[t], 0, sizeof out[t]);
    out[t].seq = seq_row[t];
    out[t].pos = (int32_t)p;
    out[t].first = (int32_t)pos[r0];
    out[t].row0 = r0;
    out[t].layout = layout[t];
  }
  for (int32_t u = r0; u < n; u++) out[u].last = (int32_t)pos[n - 1];
  return DSV4_OK;
}

dsv4_status dsv4i_gpu_attn_dspark_tokens(int32_t n_blk, const int32_t *seq_row,
                                         const int64_t *anchor, int32_t block,
                                         dsv4i_gpu_attn_tok *out) {
  if (n_blk < 0 || block < 1 || (n_blk > 0 && (!seq_row || !anchor || !out)))
    return dsv4i_error(DSV4_ERR_INVALID_ARG, "dspark tokens: %d blocks of %d, or a NULL array",
                       (int)n_blk, (int)block);
  for (int32_t b = 0; b < n_blk; b++) {
    if (seq_row[b] < 0 || anchor[b] < 0 || anchor[b] + block >= MAX_POS)
      return dsv4i_error(DSV4_ERR_INVALID_ARG, "dspark tokens: block %d: row %d, anchor %lld",
                         (int)b, (int)seq_row[b], (long long)anchor[b]);
    for (int32_t j = 0; j < block; j++) {
      dsv4i_gpu_attn_tok *t = &out[(int64_t)b * block + j];
      memset(t, 0, sizeof *t);
      t->seq = seq_row[b];
      t->pos = (int32_t)(anchor[b] + 1 + j);
      t->first = (int32_t)(anchor[b] + 1);
      t->last = (int32_t)(anchor[b] + block);
      t->row0 = b * block;
      t->layout = -block;
    }
  }
  return DSV4_OK;
}
