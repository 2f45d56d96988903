/*
 * Exported scheduler entry points: argument checks, params structs, error
 * capture. The work is lib/serve/sched.c.
 */
#include <stddef.h>
#include <string.h>

#include "api/api_engine.h"
#include "api/api_tokenizer.h"
#include "base/base.h"
#include "dsv4/dsv4.h"
#include "serve/sched.h"

#define RP_MIN (offsetof(dsv4_request_params, user_data) + sizeof(void *))
#define SP_MIN (offsetof(dsv4_scheduler_params, max_waiting) + sizeof(int32_t))
#define ST_MIN (offsetof(dsv4_scheduler_stats, max_step_tokens) + sizeof(int64_t))

/* Errors are reported through dsv4_last_error() alone (the thread-local slot). */
static dsv4_status on_sched(const dsv4_scheduler *s, dsv4_status st) {
  (void)s;
  return st;
}

static void rp_defaults(dsv4_request_params *p) {
  memset(p, 0, sizeof *p);
  p->struct_size = sizeof *p;
  p->top_p = 1.0f;
  p->repetition_penalty = 1.0f;
  p->max_tokens = 256;
}

static void sp_defaults(dsv4_scheduler_params *p) {
  memset(p, 0, sizeof *p);
  p->struct_size = sizeof *p;
  p->prefill_chunk = 256;
  p->max_waiting = 1024;
}

/* Size-checked copy of a caller's params over the defaults. */
static dsv4_status read_params(void *dst, size_t ours, const void *src, size_t min, const char *fn) {
  if (!src) return DSV4_OK;
  const uint32_t sz = *(const uint32_t *)src;
  if (sz < min)
    return dsv4i_error(DSV4_ERR_PARAMS_SIZE, "%s: params->struct_size %u is below the oldest "
                       "supported size %zu", fn, (unsigned)sz, min);
  memcpy(dst, src, sz < ours ? sz : ours);
  return DSV4_OK;
}

DSV4_API dsv4_status dsv4_request_params_init(dsv4_request_params *params, size_t struct_size) {
  dsv4_request_params d;
  rp_defaults(&d);
  return dsv4i_api_params_init(params, struct_size, RP_MIN, &d, sizeof d, "dsv4_request_params_init");
}

DSV4_API dsv4_status dsv4_scheduler_params_init(dsv4_scheduler_params *params, size_t struct_size) {
  dsv4_scheduler_params d;
  sp_defaults(&d);
  return dsv4i_api_params_init(params, struct_size, SP_MIN, &d, sizeof d, "dsv4_scheduler_params_init");
}

DSV4_API dsv4_status dsv4_scheduler_create(dsv4_engine *engine, const dsv4_tokenizer *tok,
                                           const dsv4_scheduler_params *params,
                                           dsv4_scheduler **out) {
  dsv4i_error_clear();
  if (out) *out = NULL;
  if (!engine || !out)
    return dsv4i_error(DSV4_ERR_INVALID_ARG, "dsv4_scheduler_create: %s is NULL",
                       engine ? "out" : "engine");
  dsv4_scheduler_params p;
  sp_defaults(&p);
  dsv4_status s = read_params(&p, sizeof p, params, SP_MIN, "dsv4_scheduler_create");
  if (!s) s = dsv4i_sched_create(engine, tok ? tok->impl : NULL, &p, out);
  return s;
}

DSV4_API void dsv4_scheduler_free(dsv4_scheduler *sched) { dsv4i_sched_free(sched); }

DSV4_API dsv4_status dsv4_scheduler_submit(dsv4_scheduler *sched, const int32_t *prompt,
                                           int64_t n_prompt, const dsv4_request_params *params,
                                           int64_t *request) {
  dsv4i_error_clear();
  if (!sched || !prompt || !request)
    return on_sched(sched, dsv4i_error(DSV4_ERR_INVALID_ARG, "dsv4_scheduler_submit: %s is NULL",
                                       !sched ? "sched" : !prompt ? "prompt" : "request"));
  dsv4_request_params p;
  rp_defaults(&p);
  dsv4_status s = read_params(&p, sizeof p, params, RP_MIN, "dsv4_scheduler_submit");
  if (!s) s = dsv4i_sched_submit(sched, prompt, n_prompt, &p, request);
  return on_sched(sched, s);
}

DSV4_API dsv4_status dsv4_scheduler_step(dsv4_scheduler *sched, int32_t *n_active) {
  dsv4i_error_clear();
  if (n_active) *n_active = 0;
  if (!sched) return dsv4i_error(DSV4_ERR_INVALID_ARG, "dsv4_scheduler_step: sched is NULL");
  return on_sched(sched, dsv4i_sched_step(sched, n_active));
}

DSV4_API dsv4_status dsv4_scheduler_cancel(dsv4_scheduler *sched, int64_t request) {
  dsv4i_error_clear();
  if (!sched) return dsv4i_error(DSV4_ERR_INVALID_ARG, "dsv4_scheduler_cancel: sched is NULL");
  return on_sched(sched, dsv4i_sched_cancel(sched, request));
}

DSV4_API dsv4_status dsv4_scheduler_poll(dsv4_scheduler *sched, int64_t request, int32_t *tokens,
                                         int32_t cap, int32_t *n, int32_t *finish) {
  dsv4i_error_clear();
  if (n) *n = 0;
  if (finish) *finish = DSV4_FINISH_NONE;
  if (!sched || !n || !finish || cap < 0 || (cap > 0 && !tokens))
    return on_sched(sched, dsv4i_error(DSV4_ERR_INVALID_ARG,
                                       "dsv4_scheduler_poll: NULL argument or cap < 0"));
  return on_sched(sched, dsv4i_sched_poll(sched, request, tokens, cap, n, finish));
}

DSV4_API dsv4_status dsv4_scheduler_get_stats(const dsv4_scheduler *sched,
                                              dsv4_scheduler_stats *stats, size_t struct_size) {
  dsv4i_error_clear();
  if (!sched || !stats || struct_size < ST_MIN)
    return dsv4i_error(DSV4_ERR_INVALID_ARG, "dsv4_scheduler_get_stats: NULL or struct_size too small");
  dsv4_scheduler_stats t = sched->st;
  t.struct_size = (uint32_t)(struct_size < sizeof t ? struct_size : sizeof t);
  t.waiting = sched->n_waiting;
  t.running = sched->n_running;
  memset(stats, 0, struct_size);
  memcpy(stats, &t, t.struct_size);
  return DSV4_OK;
}
