/* dsv4-bench: decode modes, plain and DSpark (draft + verify). */
#include <stdio.h>
#include <stdlib.h>

#include "bench.h"

static dsv4_status plain_step(bench *b, int32_t n, const int64_t *ids, const int32_t *tokens,
                              const int64_t *remaining, step_out *so) {
  (void)remaining;
  dsv4_status s = dsv4_engine_decode(b->eng, n, ids, tokens, &b->sp, NULL, so->out);
  dsv4_engine_timings et;
  if (s == DSV4_OK) s = dsv4_engine_get_timings(b->eng, &et, sizeof et);
  if (s) return s;
  so->step_ns = et.last_decode_ns;
  so->draft_ns = so->verify_ns = 0;
  for (int32_t i = 0; i < n; i++) so->k[i] = 1, so->nd[i] = so->acc[i] = 0;
  return s;
}

/* One DSpark round for the batch: draft B proposals after each anchor, pick
 * how many to verify (--draft-len, or --min-survival through
 * dsv4_spec_draft_length; never more than the sequence still needs), verify;
 * emitted: the accepted proposals, then the model's next token. */
static dsv4_status dspark_step(bench *b, int32_t n, const int64_t *ids, const int32_t *tokens,
                               const int64_t *remaining, step_out *so) {
  const int32_t B = b->block, kmax = B + 1;
  dsv4_status s = dsv4_engine_draft(b->eng, n, ids, tokens, &b->sp, b->drafts, b->conf);
  if (s) return s;
  for (int32_t i = 0; i < n; i++) {
    int32_t nd = b->o.min_survival >= 0
                     ? dsv4_spec_draft_length(b->conf + (size_t)i * (size_t)B, B, (float)b->o.min_survival)
                     : (b->o.draft_len > 0 && b->o.draft_len < B ? b->o.draft_len : B);
    if (nd > remaining[i] - 1) nd = (int32_t)(remaining[i] - 1);
    so->nd[i] = nd < 0 ? 0 : nd;
  }
  s = dsv4_engine_verify(b->eng, n, ids, tokens, so->nd, b->drafts, &b->sp, so->acc, b->next);
  if (s) return s;
  dsv4_engine_timings et;
  if ((s = dsv4_engine_get_timings(b->eng, &et, sizeof et))) return s;
  so->draft_ns = et.last_draft_ns;
  so->verify_ns = et.last_verify_ns;
  so->step_ns = et.last_draft_ns + et.last_verify_ns;
  for (int32_t i = 0; i < n; i++) {
    int32_t *o = so->out + (size_t)i * (size_t)kmax;
    for (int32_t j = 0; j < so->acc[i]; j++) o[j] = b->drafts[(size_t)i * (size_t)B + (size_t)j];
    o[so->acc[i]] = b->next[i];
    so->k[i] = so->acc[i] + 1;
  }
  return DSV4_OK;
}

const mode MODE_PLAIN = {"off", 0, 1, plain_step};
static mode MODE_DSPARK = {"on", 1, 0, dspark_step};

/* Whether this engine drafts: a throw-away sequence of one token drafts once.
 * Returns the DSpark mode, or NULL with *why set. */
const mode *dspark_probe(bench *b, const char **why) {
  *why = NULL;
  if (b->mi.n_mtp_layers <= 0 || b->mi.dspark_block_size <= 0) {
    *why = "the model has no DSpark stages";
    return NULL;
  }
  b->block = b->mi.dspark_block_size;
  b->drafts = xcalloc((size_t)b->max_c * (size_t)b->block, sizeof *b->drafts);
  b->conf = xcalloc((size_t)b->max_c * (size_t)b->block, sizeof *b->conf);
  b->next = xcalloc((size_t)b->max_c, sizeof *b->next);
  int64_t id = 0;
  int32_t a = 0;
  const int32_t bos = b->mi.bos_token_id;
  dsv4_status s = dsv4_engine_seq_create(b->eng, &id);
  if (!s) s = dsv4_engine_prefill(b->eng, id, &bos, 1, NULL, NULL, &a);
  if (!s) s = dsv4_engine_draft(b->eng, 1, &id, &a, NULL, b->drafts, b->conf);
  static char msg[1024]; /* the message outlives the seq_free call below */
  if (s) snprintf(msg, sizeof msg, "%s", dsv4_last_error()), *why = msg;
  if (id && dsv4_engine_seq_free(b->eng, id)) die("dsv4_engine_seq_free: %s", dsv4_last_error());
  if (s) return NULL;
  MODE_DSPARK.max_tokens_per_step = b->block + 1;
  return &MODE_DSPARK;
}

