/*
 * Sampling transforms on host logits (docs/serving.md, "Sampling"): logit
 * bias, repetition / presence / frequency penalties, temperature, top-k,
 * top-p, min-p, then one draw by the exponential race, a pure function of
 * (seed, position). The same processed distribution is what speculative
 * verification must accept against to stay lossless.
 */
#ifndef DSV4I_SERVE_SAMPLER_H
#define DSV4I_SERVE_SAMPLER_H

#include <stdint.h>

#include "base/base.h"

typedef struct dsv4i_sampler_cfg {
  float temperature;        /**< <= 0: greedy (argmax of the biased, penalised logits) */
  int32_t top_k;            /**< 0: off */
  float top_p;              /**< 1: off; (0, 1] */
  float min_p;              /**< 0: off; [0, 1] */
  float repetition_penalty; /**< 1: off; > 0; prompt and output tokens */
  float presence_penalty;   /**< 0: off; output tokens */
  float frequency_penalty;  /**< 0: off; output tokens */
  uint64_t seed;
  int32_t n_bias;
  const int32_t *bias_ids;  /**< [n_bias] in [0, vocab) */
  const float *bias;        /**< [n_bias] added to the logit */
} dsv4i_sampler_cfg;

/** One (probability, id) pair of the top-k / top-p ordering. */
struct dsv4i_sampler_rank {
  double p;
  int32_t id;
};

/** Per-request sampler state: token history for the penalties. */
typedef struct dsv4i_sampler {
  dsv4i_sampler_cfg cfg;
  int32_t vocab;
  uint8_t *seen;            /**< [vocab] prompt or output token (repetition penalty), or NULL */
  int32_t *count;           /**< [vocab] output occurrences (presence / frequency), or NULL */
  double *p;                /**< [vocab] scratch */
  struct dsv4i_sampler_rank *order; /**< [vocab] scratch (top-k / top-p) */
} dsv4i_sampler;

/** Validate cfg (DSV4_ERR_INVALID_ARG naming the field) and allocate what it needs. The
 *  bias arrays are copied. */
dsv4_status dsv4i_sampler_init(dsv4i_sampler *s, const dsv4i_sampler_cfg *cfg, int32_t vocab);
void dsv4i_sampler_free(dsv4i_sampler *s);

/** Record a prompt token / an output token for the penalties. */
void dsv4i_sampler_prompt(dsv4i_sampler *s, const int32_t *ids, int64_t n);
void dsv4i_sampler_output(dsv4i_sampler *s, int32_t id);

/**
 * The processed distribution of one logits row into s->p (normalised; zeros
 * where a transform removed a token). Greedy configs give a one-hot p.
 */
void dsv4i_sampler_dist(dsv4i_sampler *s, const float *logits);

/** Draw the token at position pos from s->p (after dsv4i_sampler_dist). */
int32_t dsv4i_sampler_draw(const dsv4i_sampler *s, int64_t pos);

/**
 * The lossless speculative rule against the processed distribution s->p
 * (after dsv4i_sampler_dist on the target's logits at the draft's position
 * pos): draft d, drawn from q ([vocab], normalised; NULL = d was fixed, q
 * one-hot), is accepted with probability min(1, p(d) / q(d)); otherwise the
 * token is drawn from norm(max(0, p - q)). Returns 1 (accepted) or 0 with
 * *repl set. s->p is overwritten on rejection. Every draw is a pure
 * function of (seed, pos).
 * A fixed draft (q NULL) is decided by the position's own draw
 * (dsv4i_sampler_draw(s, pos)): accepted when it is d (probability p(d)),
 * otherwise that draw is the token (distributed as p without d, renormalised:
 * norm(max(0, p - one-hot d))). The same rule, realised so that the token
 * equals the one plain decoding draws at pos whatever was drafted.
 */
int dsv4i_sampler_accept(dsv4i_sampler *s, const double *q, int32_t d, int64_t pos, int32_t *repl);

/**
 * Log-probabilities of the model's own distribution (log-softmax of the raw
 * logits): of `token`, and the n largest (ties: lower id first) into
 * top_ids / top_lp [n] (either may be NULL when n is 0). Returns logprob(token).
 */
float dsv4i_sampler_logprobs(const float *logits, int32_t vocab, int32_t token, int32_t n,
                             int32_t *top_ids, float *top_lp);

#endif /* DSV4I_SERVE_SAMPLER_H */
