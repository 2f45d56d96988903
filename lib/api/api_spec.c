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
#include "engine/spec.h"

/* Oldest accepted dsv4_sampling_params: the 0.1 struct through its last field. */
#define SP_MIN (offsetof(dsv4_sampling_params, seeds) + sizeof(void *))

static dsv4_status on_engine(const dsv4_engine *e, dsv4_status s) {
  if (s != DSV4_OK && e && e->last_error) {
    strncpy(e->last_error, dsv4i_error_message(), DSV4I_ERROR_CAP - 1);
    e->last_error[DSV4I_ERROR_CAP - 1] = '\0';
  }
  return s;
}

static dsv4_status sampling(const dsv4_sampling_params *sp, dsv4i_sampling *out, const char *fn) {
  memset(out, 0, sizeof *out);
  if (!sp) return DSV4_OK;
  if (sp->struct_size < SP_MIN)
    return dsv4i_error(DSV4_ERR_PARAMS_SIZE, "%s: sampling->struct_size %u is below %zu", fn,
                       (unsigned)sp->struct_size, (size_t)SP_MIN);
  if (sp->temperature != sp->temperature)
    return dsv4i_error(DSV4_ERR_INVALID_ARG, "%s: temperature is NaN", fn);
  out->temperature = sp->temperature;
  out->seed = sp->seed;
  out->seeds = sp->seeds;
  return DSV4_OK;
}

DSV4_API dsv4_status dsv4_engine_draft(dsv4_engine *engine, int32_t n_seq, const int64_t *ids,
                                       const int32_t *anchors, const dsv4_sampling_params *sp,
                                       int32_t *drafts, float *confidence) {
  dsv4i_error_clear();
  if (!engine) return dsv4i_error(DSV4_ERR_INVALID_ARG, "dsv4_engine_draft: engine is NULL");
  if (!ids || !anchors || !drafts)
    return on_engine(engine, dsv4i_error(DSV4_ERR_INVALID_ARG, "dsv4_engine_draft: %s is NULL",
                                         !ids ? "ids" : !anchors ? "anchors" : "drafts"));
  dsv4i_sampling smp;
  dsv4_status s = sampling(sp, &smp, "dsv4_engine_draft");
  if (!s) s = dsv4i_spec_draft(engine, n_seq, ids, anchors, &smp, drafts, confidence);
  return on_engine(engine, s);
}

DSV4_API dsv4_status dsv4_engine_verify(dsv4_engine *engine, int32_t n_seq, const int64_t *ids,
                                        const int32_t *anchors, const int32_t *n_drafts,
                                        const int32_t *drafts, const dsv4_sampling_params *sp,
                                        int32_t *n_accepted, int32_t *next_tokens) {
  dsv4i_error_clear();
  if (!engine) return dsv4i_error(DSV4_ERR_INVALID_ARG, "dsv4_engine_verify: engine is NULL");
  if (!ids || !anchors || !n_drafts || !n_accepted || !next_tokens)
    return on_engine(engine, dsv4i_error(DSV4_ERR_INVALID_ARG, "dsv4_engine_verify: %s is NULL",
                                         !ids ? "ids" : !anchors ? "anchors"
                                         : !n_drafts ? "n_drafts" : !n_accepted ? "n_accepted"
                                         : "next_tokens"));
  dsv4i_sampling smp;
  dsv4_status s = sampling(sp, &smp, "dsv4_engine_verify");
  if (!s)
    s = dsv4i_spec_verify(engine, n_seq, ids, anchors, n_drafts, drafts, &smp, n_accepted,
                          next_tokens);
  return on_engine(engine, s);
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
