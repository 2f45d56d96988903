/*
 * The accept rule of sampled speculative verification (spec §6.2) on one
 * target row: draft d at temperature T is accepted with probability
 * min(1, p(d) / q(d)); on rejection the token is drawn from
 * norm(max(0, p - q)) (from p when that is empty). p = softmax(logits / T),
 * q = softmax(q_logits / T_q) or one-hot at d (a greedy draft, or drafts this
 * engine did not produce). Every draw is a pure function of (seed, position,
 * purpose). Model semantics shared by the engine and every backend's accept
 * entry (backend/backend.h), so a device backend runs it where the logits are.
 */
#ifndef DSV4I_MODEL_ACCEPT_H
#define DSV4I_MODEL_ACCEPT_H

#include <stdint.h>

/* Stream tags: drafts, acceptance uniforms and residual draws never share noise with each
 * other or with the target sampler (which uses the seed itself). */
#define DSV4I_TAG_DRAFT UINT64_C(0x44537061726b4466)  /* "DSparkDf" */
#define DSV4I_TAG_ACCEPT UINT64_C(0x44537061726b4163) /* "DSparkAc" */
#define DSV4I_TAG_RESID UINT64_C(0x44537061726b5273)  /* "DSparkRs" */

/** One row's request (host). */
typedef struct dsv4i_accept_req {
  float temperature;   /**< target temperature, > 0 */
  float q_temperature; /**< the draft's temperature (with q) */
  int32_t draft;       /**< the draft token d, in [0, vocab) */
  int32_t n_valid;     /**< only ids < n_valid are drawn (the tokenizer's; 0: all V) */
  uint64_t seed;       /**< the sequence's seed */
  int64_t pos;         /**< the draft's position */
  const float *q;      /**< host f32 [vocab]: logits the draft was drawn from; NULL = one-hot */
} dsv4i_accept_req;

/** Uniform in (0, 1) with 53 bits, a pure function of (seed, tag, position, i). */
double dsv4i_accept_uniform(uint64_t seed, uint64_t tag, int64_t pos, int64_t i);

/**
 * The rule on one row. logits f32 [V] (host); scratch double [2][V].
 * *accepted = 1 (the draft stands), or 0 and *token = the replacement draw.
 */
void dsv4i_accept_row(const float *logits, int32_t V, const dsv4i_accept_req *r, double *scratch,
                      int32_t *accepted, int32_t *token);

#endif /* DSV4I_MODEL_ACCEPT_H */
