/*
 * Continuous-batching request scheduler over one engine (docs/serving.md,
 * "Scheduler"). Each step feeds every running request one token and
 * prefills waiting prompts in fixed-size chunks while the step's token
 * budget lasts, in arrival order, all in one engine step (a mixed batch;
 * more only when the engine's batch is smaller than the budget). A prompt is always
 * cut at the same chunk boundaries and every draw is a pure function of
 * (seed, position), so a request's tokens do not depend on what else runs.
 */
#ifndef DSV4I_SERVE_SCHED_H
#define DSV4I_SERVE_SCHED_H

#include <stdint.h>

#include "dsv4/dsv4.h"
#include "engine/engine.h"
#include "io/tokenizer.h"
#include "serve/sampler.h"

enum { RQ_WAITING, RQ_PREFILL, RQ_RUNNING, RQ_DONE };

typedef struct dsv4i_req {
  int64_t id;
  int state;
  int32_t *prompt;
  int64_t n_prompt, fed;       /**< prompt tokens already prefilled */
  int64_t seq;                 /**< engine sequence, 0 before admission and after finishing */
  int64_t seq_len;             /**< positions the sequence holds */
  dsv4i_sampler smp;
  int32_t max_tokens, n_logprobs, n_stop_ids, n_stop;
  int32_t spec;                /**< most drafts per step (0: no speculative decoding) */
  int32_t *stop_ids;
  char **stop;                 /**< [n_stop] stop strings */
  size_t stop_max;             /**< longest stop string */
  uint32_t flags;
  dsv4_token_fn on_token;
  void *user;
  int32_t next;                /**< sampled, not yet fed */
  int32_t n_out;
  int32_t finish;              /**< DSV4_FINISH_* once finished */
  int32_t *out;                /**< poll mode: tokens not yet polled */
  size_t n_buf, cap_buf;
  dsv4i_detok detok;           /**< with a tokenizer: output text */
  dsv4i_str text;              /**< text decoded and not yet released (stop-string hold) */
  int32_t *held;               /**< prefix cache on: every token the sequence holds */
  int64_t n_held, cap_held;
  struct dsv4i_req *prev, *next_rq; /**< arrival-ordered list */
} dsv4i_req;

/** A finished request's sequence kept for prefix reuse. */
typedef struct dsv4i_prefix {
  int64_t seq;                 /**< 0: empty slot */
  int32_t *ids;                /**< the positions it holds */
  int64_t n;
  uint64_t used;               /**< LRU clock of the last insert or hit */
} dsv4i_prefix;

struct dsv4_scheduler {
  struct dsv4_engine *eng;
  const dsv4i_tokenizer *tok;  /**< NULL: no text, no stop strings */
  int32_t vocab, eos, chunk, budget, max_running, max_waiting;
  int64_t max_ctx, serial;
  dsv4i_req *head, *tail;
  int32_t n_waiting, n_running;
  float *logits;               /**< [out_rows][vocab] */
  int32_t out_rows;            /**< max_running, or the engine's max_out_rows with DSpark */
  int32_t block;               /**< the model's DSpark block (most drafts), 0 without DSpark */
  int32_t *vtok;               /**< [max_running][1 + block] verify rows: pending token, drafts */
  int32_t *drafts;             /**< [max_running][block] */
  int64_t *d_ids;              /**< [max_running] sequences being drafted */
  int32_t *d_anchor, *d_row, *d_k; /**< [max_running] their pending tokens, batch rows, drafts */
  int32_t *dec;                /**< [1 + block] scratch: the tokens a verify row decided */
  dsv4i_step_row *rows;        /**< [max_running] the engine step being built */
  uint8_t *fresh;              /**< [max_running] row's request was admitted for this step */
  dsv4i_req **batch;           /**< [max_running] request of each row */
  int32_t top_ids[DSV4_MAX_LOGPROBS];
  float top_lp[DSV4_MAX_LOGPROBS];
  dsv4_scheduler_stats st;
  dsv4i_prefix *cache;         /**< [n_cache] */
  int32_t n_cache;
  uint64_t clock;
};

dsv4_status dsv4i_sched_create(struct dsv4_engine *e, const dsv4i_tokenizer *tok,
                               const dsv4_scheduler_params *p, struct dsv4_scheduler **out);
void dsv4i_sched_free(struct dsv4_scheduler *s);
dsv4_status dsv4i_sched_submit(struct dsv4_scheduler *s, const int32_t *prompt, int64_t n,
                               const dsv4_request_params *p, int64_t *id);
dsv4_status dsv4i_sched_step(struct dsv4_scheduler *s, int32_t *n_active);
dsv4_status dsv4i_sched_cancel(struct dsv4_scheduler *s, int64_t id);
dsv4_status dsv4i_sched_poll(struct dsv4_scheduler *s, int64_t id, int32_t *tokens, int32_t cap,
                             int32_t *n, int32_t *finish);

#endif /* DSV4I_SERVE_SCHED_H */
