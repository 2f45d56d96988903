/*
 * Exported speculative-decoding entry points (dsv4.h "Speculative decoding
 * (DSpark)"): argument checks, sampling params, error capture into the
 * thread-local and per-engine slots. The work is lib/engine/spec.c.
 */
#include <math.h>
#include <stddef.h>
#include <string.h>

#include "base/base.h"
#include "dsv4/dsv4.h"
#include "engine/engine.h"
#include "api/api_engine.h"
#include "engine/spec.h"

DSV4_API dsv4_status dsv4_engine_draft(dsv4_engine *engine, int32_t n_seq, const int64_t *ids,
                                       const int32_t *anchors, const dsv4_sampling_params *sp,
                                       int32_t *drafts, float *confidence) {
  dsv4i_error_clear();
  if (!engine) return dsv4i_error(DSV4_ERR_INVALID_ARG, "dsv4_engine_draft: engine is NULL");
  if (!ids || !anchors || !drafts)
    return dsv4i_api_on_engine(engine, dsv4i_error(DSV4_ERR_INVALID_ARG, "dsv4_engine_draft: %s is NULL",
                                         !ids ? "ids" : !anchors ? "anchors" : "drafts"));
  dsv4i_sampling smp;
  dsv4_status s = dsv4i_api_sampling(sp, &smp, "dsv4_engine_draft");
  if (!s) s = dsv4i_spec_draft(engine, n_seq, ids, anchors, &smp, drafts, confidence);
  return dsv4i_api_on_engine(engine, s);
}

DSV4_API dsv4_status dsv4_engine_verify(dsv4_engine *engine, int32_t n_seq, const int64_t *ids,
                                        const int32_t *anchors, const int32_t *n_drafts,
                                        const int32_t *drafts, const dsv4_sampling_params *sp,
                                        int32_t *n_accepted, int32_t *next_tokens) {
  dsv4i_error_clear();
  if (!engine) return dsv4i_error(DSV4_ERR_INVALID_ARG, "dsv4_engine_verify: engine is NULL");
  if (!ids || !anchors || !n_drafts || !n_accepted || !next_tokens)
    return dsv4i_api_on_engine(engine, dsv4i_error(DSV4_ERR_INVALID_ARG, "dsv4_engine_verify: %s is NULL",
                                         !ids ? "ids" : !anchors ? "anchors"
                                         : !n_drafts ? "n_drafts" : !n_accepted ? "n_accepted"
                                         : "next_tokens"));
  dsv4i_sampling smp;
  dsv4_status s = dsv4i_api_sampling(sp, &smp, "dsv4_engine_verify");
  if (!s)
    s = dsv4i_spec_verify(engine, n_seq, ids, anchors, n_drafts, drafts, &smp, n_accepted,
                          next_tokens);
  return dsv4i_api_on_engine(engine, s);
}

DSV4_API int32_t dsv4_spec_draft_length(const float *confidence, int32_t n, float min_survival) {
  if (!confidence || n <= 0) return 0;
  double a = 1.0; /* a_j = prod_{k < j} sigmoid(c_k) */
  int32_t j = 0;
  while (j < n) {
    const double c = (double)confidence[j];
    a *= c >= 0 ? 1.0 / (1.0 + exp(-c)) : exp(c) / (1.0 + exp(c));
    if (!(a >= (double)min_survival)) break;
    j++;
  }
  return j;
}
