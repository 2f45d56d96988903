/*
 * Exported engine entry points: argument checks, size-prefixed structs,
 * defaults, error capture into the thread-local and per-engine slots. The
 * work is lib/engine (engine.c, sequence.c, step.c, plan.c).
 */
#include <stddef.h>
#include <string.h>

#include "base/base.h"
#include "dsv4/dsv4.h"
#include "api/api_engine.h"
#include "engine/dist.h"
#include "engine/engine.h"
#include "gpu/cuda.h"

/* Oldest accepted sizes: the 0.1 structs through their last used field. */
#define EP_MIN (offsetof(dsv4_engine_params, progress_user_data) + sizeof(void *))
#define SP_MIN DSV4I_SAMPLING_PARAMS_MIN
#define KNOWN_FLAGS ((uint32_t)(DSV4_ENGINE_F_OP_TIMINGS | DSV4_ENGINE_F_GPU_CPU_ORDER))
#define DEFAULT_SEQS 8
#define DEFAULT_CTX 4096
#define DEFAULT_CHUNK 256
#define DEFAULT_DIST_TIMEOUT_MS 300000
/* n_threads above this is refused: OpenMP allocates per-thread state up front
 * and aborts the whole process when that fails (INT32_MAX threads: ~480 GB). */
#define MAX_THREADS 1024
#define MAX_MICRO_BATCHES 256

_Static_assert((int)DSV4_KV_FORMAT_NATIVE == (int)DSV4I_KV_NATIVE &&
                   (int)DSV4_KV_FORMAT_FP8_DS_MLA == (int)DSV4I_KV_FP8_DS_MLA,
               "public and internal KV format values");

static size_t min_size(size_t a, size_t b) { return a < b ? a : b; }

/* Copy the thread's message into the engine's slot when a call on it fails. */
dsv4_status dsv4i_api_on_engine(const dsv4_engine *e, dsv4_status s) {
  if (e) dsv4i_engine_note((struct dsv4_engine *)e, s);
  if (s != DSV4_OK && e && e->last_error) {
    strncpy(e->last_error, dsv4i_error_message(), DSV4I_ERROR_CAP - 1);
    e->last_error[DSV4I_ERROR_CAP - 1] = '\0';
  }
  return s;
}

static void ep_defaults(dsv4_engine_params *p) {
  memset(p, 0, sizeof *p);
  p->struct_size = sizeof *p;
  p->backend = DSV4_BACKEND_AUTO;
  p->max_sequences = DEFAULT_SEQS;
  p->prefill_chunk = DEFAULT_CHUNK;
  p->tp_size = 1;
  p->pp_size = 1;
  p->log_level = DSV4_LOG_WARN;
}

dsv4_status dsv4i_api_params_init(void *dst, size_t struct_size, size_t min, const void *def,
                                  size_t ours, const char *fn) {
  dsv4i_error_clear();
  if (!dst) return dsv4i_error(DSV4_ERR_INVALID_ARG, "%s: params is NULL", fn);
  if (struct_size < min || struct_size > UINT32_MAX)
    return dsv4i_error(DSV4_ERR_PARAMS_SIZE, "%s: struct_size %zu is below the oldest supported size %zu",
                       fn, struct_size, min);
  memset(dst, 0, struct_size);
  memcpy(dst, def, min_size(struct_size, ours));
  *(uint32_t *)dst = (uint32_t)struct_size;
  return DSV4_OK;
}

DSV4_API dsv4_status dsv4_engine_params_init(dsv4_engine_params *params, size_t struct_size) {
  dsv4_engine_params d;
  ep_defaults(&d);
  return dsv4i_api_params_init(params, struct_size, EP_MIN, &d, sizeof d, "dsv4_engine_params_init");
}

DSV4_API dsv4_status dsv4_sampling_params_init(dsv4_sampling_params *params, size_t struct_size) {
  dsv4_sampling_params d;
  memset(&d, 0, sizeof d);
  d.struct_size = sizeof d;
  return dsv4i_api_params_init(params, struct_size, SP_MIN, &d, sizeof d, "dsv4_sampling_params_init");
}

/* DSV4_BACKEND_AUTO: the CUDA backend when it is built in, device `device` is usable
 * (dsv4_backend_probe) and the engine has no tensor parallelism (CUDA TP ranks need one GPU
 * each, which only the application assigns: it asks for DSV4_BACKEND_CUDA), else the CPU
 * (the probe's message is dropped). */
static int32_t auto_backend(int32_t device, int32_t tp) {
  if (tp == 1 && dsv4i_backend_name(DSV4_BACKEND_CUDA) &&
      dsv4i_cuda_probe(device) == DSV4_OK)
    return DSV4_BACKEND_CUDA;
  dsv4i_error_clear();
  return DSV4_BACKEND_CPU;
}

/* Params -> engine args with defaults and range checks. */
static dsv4_status make_args(const dsv4_engine_params *params, int64_t max_pos,
                             dsv4i_engine_args *a, const char *fn) {
  dsv4_engine_params p;
  ep_defaults(&p);
  if (params) {
    if (params->struct_size < EP_MIN)
      return dsv4i_error(DSV4_ERR_PARAMS_SIZE,
                         "%s: params->struct_size %u is below the oldest supported size %zu "
                         "(fill params with dsv4_engine_params_init)",
                         fn, (unsigned)params->struct_size, (size_t)EP_MIN);
    memcpy(&p, params, min_size(params->struct_size, sizeof p));
  }
  if (p.flags & ~KNOWN_FLAGS)
    return dsv4i_error(DSV4_ERR_INVALID_ARG, "%s: unknown flags 0x%x", fn,
                       (unsigned)(p.flags & ~KNOWN_FLAGS));
  if (p.backend != DSV4_BACKEND_AUTO && p.backend != DSV4_BACKEND_CPU &&
      p.backend != DSV4_BACKEND_CUDA)
    return dsv4i_error(DSV4_ERR_INVALID_ARG, "%s: unknown backend %d", fn, (int)p.backend);
  if (p.device < 0 || p.max_sequences < 1 || p.max_sequences > DSV4I_MAX_SEQS || p.n_threads < 0 ||
      p.n_threads > MAX_THREADS || p.max_context < 0 || p.kv_budget_bytes < 0 ||
      p.prefill_chunk < 0 || p.tp_size < 0)
    return dsv4i_error(DSV4_ERR_INVALID_ARG,
                       "%s: out of range: device %d, max_sequences %d (1..%d), n_threads %d (0..%d), "
                       "max_context %lld, kv_budget_bytes %lld, prefill_chunk %d, tp_size %d", fn,
                       (int)p.device, (int)p.max_sequences, DSV4I_MAX_SEQS, (int)p.n_threads, MAX_THREADS,
                       (long long)p.max_context, (long long)p.kv_budget_bytes,
                       (int)p.prefill_chunk, (int)p.tp_size);
  /* params of a 0.1-sized struct end before pp_size: ep_defaults gave the rest */
  if (p.pp_size < 0 || p.pp_size > DSV4_MAX_STAGES || p.dist_timeout_ms < 0 ||
      p.pp_micro_batches < 0 || p.pp_micro_batches > MAX_MICRO_BATCHES)
    return dsv4i_error(DSV4_ERR_INVALID_ARG, "%s: out of range: pp_size %d (0..%d), "
                       "dist_timeout_ms %d, pp_micro_batches %d (0..%d)", fn, (int)p.pp_size,
                       DSV4_MAX_STAGES, (int)p.dist_timeout_ms, (int)p.pp_micro_batches,
                       MAX_MICRO_BATCHES);
  if (p.kv_format != DSV4_KV_FORMAT_NATIVE && p.kv_format != DSV4_KV_FORMAT_FP8_DS_MLA)
    return dsv4i_error(DSV4_ERR_INVALID_ARG, "%s: unknown kv_format %d (DSV4_KV_FORMAT_NATIVE "
                       "%d or DSV4_KV_FORMAT_FP8_DS_MLA %d)", fn, (int)p.kv_format,
                       DSV4_KV_FORMAT_NATIVE, DSV4_KV_FORMAT_FP8_DS_MLA);
  const int32_t tp = p.tp_size ? p.tp_size : 1, pp = p.pp_size ? p.pp_size : 1;
  if ((tp > 1 || pp > 1) && !p.mpi_comm)
    return dsv4i_error(DSV4_ERR_INVALID_ARG,
                       "%s: tp_size %d x pp_size %d needs mpi_comm (one engine per MPI rank)",
                       fn, (int)tp, (int)pp);
  memset(a, 0, sizeof *a);
  a->flags = p.flags & DSV4_ENGINE_F_OP_TIMINGS ? DSV4I_ENGINE_F_OP_TIMINGS : 0;
  if (p.flags & DSV4_ENGINE_F_GPU_CPU_ORDER) a->flags |= DSV4I_ENGINE_F_GPU_CPU_ORDER;
  a->backend = p.backend == DSV4_BACKEND_AUTO ? auto_backend(p.device, tp) : p.backend;
  a->device = p.device;
  a->max_seqs = p.max_sequences;
  a->n_threads = p.n_threads;
  a->chunk = p.prefill_chunk ? p.prefill_chunk : DEFAULT_CHUNK;
  a->max_ctx = p.max_context ? p.max_context : (max_pos < DEFAULT_CTX ? max_pos : DEFAULT_CTX);
  a->kv_budget = p.kv_budget_bytes;
  a->log.fn = p.log_fn;
  a->log.user_data = p.log_user_data;
  a->log.max_level = p.log_level;
  a->progress = p.progress_fn;
  a->progress_user = p.progress_user_data;
  a->mpi_comm = p.mpi_comm;
  a->tp = tp;
  a->pp = pp;
  a->dist_timeout_ms = p.dist_timeout_ms ? p.dist_timeout_ms : DEFAULT_DIST_TIMEOUT_MS;
  memcpy(a->stage_first, p.stage_first_layer, sizeof a->stage_first);
  a->micro_batches = p.pp_micro_batches ? p.pp_micro_batches : 1;
  a->kv_format = p.kv_format; /* DSV4_KV_FORMAT_* == DSV4I_KV_* */
  return DSV4_OK;
}

DSV4_API dsv4_status dsv4_engine_create(const dsv4_model *model, const dsv4_engine_params *params,
                                        dsv4_engine **out) {
  dsv4i_error_clear();
  if (out) *out = NULL;
  if (!model || !out)
    return dsv4i_error(DSV4_ERR_INVALID_ARG, "dsv4_engine_create: %s is NULL", model ? "out" : "model");
  dsv4i_engine_args a;
  dsv4_status s = make_args(params, dsv4i_model_config(model)->max_position_embeddings, &a, "dsv4_engine_create");
  if (!s) s = dsv4i_engine_create((struct dsv4_model *)model, &a, out);
  return s;
}

DSV4_API dsv4_status dsv4_engine_create_from_dir(const char *dir, const dsv4_engine_params *params,
                                                 dsv4_engine **out) {
  dsv4i_error_clear();
  if (out) *out = NULL;
  if (!dir || !out)
    return dsv4i_error(DSV4_ERR_INVALID_ARG, "dsv4_engine_create_from_dir: %s is NULL",
                       dir ? "out" : "dir");
  dsv4i_engine_args a;
  dsv4_status s = make_args(params, INT64_MAX, &a, "dsv4_engine_create_from_dir");
  if (s) return s;
  if (a.progress && a.progress("model", 0, 1, a.progress_user))
    return dsv4i_error(DSV4_ABORTED, "dsv4_engine_create_from_dir: aborted");
  struct dsv4_model *m = NULL;
  if ((s = dsv4i_model_open(dir, 0, &a.log, &m))) return s;
  if (a.progress && a.progress("model", 1, 1, a.progress_user)) {
    dsv4i_model_close(m);
    return dsv4i_error(DSV4_ABORTED, "dsv4_engine_create_from_dir: aborted");
  }
  /* the default context depends on the model: recompute it now */
  dsv4_engine_params p;
  ep_defaults(&p);
  if (params) memcpy(&p, params, min_size(params->struct_size, sizeof p));
  if (!p.max_context)
    a.max_ctx = dsv4i_model_config(m)->max_position_embeddings < DEFAULT_CTX ? dsv4i_model_config(m)->max_position_embeddings
                                                             : DEFAULT_CTX;
  if ((s = dsv4i_engine_create(m, &a, out))) {
    dsv4i_model_close(m);
    return s;
  }
  (*out)->owns_model = 1;
  return DSV4_OK;
}

DSV4_API void dsv4_engine_free(dsv4_engine *engine) { dsv4i_engine_free(engine); }

DSV4_API const char *dsv4_engine_last_error(const dsv4_engine *engine) {
  return engine && engine->last_error ? engine->last_error : "";
}

DSV4_API const dsv4_model *dsv4_engine_model(const dsv4_engine *engine) {
  return engine ? engine->model : NULL;
}

/* Size-prefixed output struct checks (as dsv4_model_get_info). */
static dsv4_status out_struct(const dsv4_engine *e, const void *p, size_t size, size_t ours,
                              const char *fn) {
  dsv4i_error_clear();
  if (!e) return dsv4i_error(DSV4_ERR_INVALID_ARG, "%s: engine is NULL", fn);
  if (!p) return dsv4i_api_on_engine(e, dsv4i_error(DSV4_ERR_INVALID_ARG, "%s: output is NULL", fn));
  if (size < ours || size > UINT32_MAX)
    return dsv4i_api_on_engine(e, dsv4i_error(DSV4_ERR_INVALID_ARG, "%s: struct_size %zu is below the 0.1 size %zu",
                                    fn, size, ours));
  return DSV4_OK;
}

/* Plan figures of an engine (or of one that would be created) into the public struct. */
static void plan_info(const dsv4i_plan *p, int32_t backend, int32_t n_threads,
                      dsv4_engine_info *v) {
  v->backend = backend;
  v->n_threads = n_threads;
  v->max_sequences = p->max_seqs;
  v->prefill_chunk = p->chunk;
  v->max_context = p->max_ctx;
  v->kv_page_bytes = p->fmt.page_bytes;
  v->kv_pages_total = p->pool_pages;
  v->kv_pages_per_sequence = p->pages_per_seq;
  v->kv_bytes = p->kv_bytes;
  v->kv_bytes_per_token = p->fmt.bytes_per_pos;
  v->workspace_bytes = p->act_bytes;
  v->prepared_weight_bytes = p->extra_weight_bytes;
  v->mapped_bytes = p->mapped_bytes;
  v->comm_bytes = p->comm_bytes;
  v->create_bytes = p->create_bytes;
  v->kv_format = p->kv_format;
}

/* The 0.1 size of dsv4_engine_info ends at mapped_bytes: a caller built against it passes
 * that size, and the members appended since are filled only when struct_size covers them. */
#define ENGINE_INFO_V01_SIZE offsetof(dsv4_engine_info, comm_bytes)

DSV4_API dsv4_status dsv4_engine_get_info(const dsv4_engine *engine, dsv4_engine_info *info,
                                          size_t struct_size) {
  dsv4_status s = out_struct(engine, info, struct_size, ENGINE_INFO_V01_SIZE,
                             "dsv4_engine_get_info");
  if (s) return s;
  dsv4i_kv_usage u;
  dsv4i_kv_usage_get(&engine->kv, &u);
  dsv4_engine_info v;
  memset(&v, 0, sizeof v);
  v.struct_size = (uint32_t)min_size(struct_size, sizeof v);
  plan_info(&engine->plan, engine->be->kind, engine->be->n_threads, &v);
  v.sequences_live = dsv4i_seq_count(engine);
  v.kv_pages_total = u.pages_total; /* the pool the backend allocated */
  v.kv_pages_used = u.pages_used;
  memset(info, 0, struct_size);
  memcpy(info, &v, min_size(struct_size, sizeof v));
  return DSV4_OK;
}

DSV4_API dsv4_status dsv4_engine_plan_query(const dsv4_model *model,
                                            const dsv4_engine_params *params,
                                            dsv4_engine_info *info, size_t struct_size) {
  dsv4i_error_clear();
  if (!model || !info)
    return dsv4i_error(DSV4_ERR_INVALID_ARG, "dsv4_engine_plan_query: %s is NULL",
                       model ? "info" : "model");
  if (struct_size < ENGINE_INFO_V01_SIZE || struct_size > UINT32_MAX)
    return dsv4i_error(DSV4_ERR_INVALID_ARG, "dsv4_engine_plan_query: struct_size %zu is below "
                       "the 0.1 size %zu", struct_size, ENGINE_INFO_V01_SIZE);
  dsv4i_engine_args a;
  dsv4_status s = make_args(params, dsv4i_model_config(model)->max_position_embeddings, &a,
                            "dsv4_engine_plan_query");
  dsv4i_plan p;
  if (!s && a.mpi_comm) { /* a rank of a distributed engine: its own part, nothing exchanged */
    dsv4i_plan whole;
    dsv4i_model_part part;
    int64_t comm = 0;
    const dsv4i_config *c = dsv4i_model_config(model);
    s = dsv4i_engine_plan(model, &a, NULL, &whole); /* the step sizes, for the payload */
    if (!s) s = dsv4i_dist_part_of(c, &a, whole.max_batch_tokens, whole.max_out_rows, &part, &comm);
    if (!s) s = dsv4i_engine_plan(model, &a, &part, &p);
    if (!s) s = dsv4i_plan_add_comm(&p, comm);
  } else if (!s) {
    s = dsv4i_engine_plan(model, &a, NULL, &p);
  }
  if (s) return s;
  dsv4_engine_info v;
  memset(&v, 0, sizeof v);
  v.struct_size = (uint32_t)min_size(struct_size, sizeof v);
  plan_info(&p, a.backend, a.n_threads, &v);
  memset(info, 0, struct_size);
  memcpy(info, &v, min_size(struct_size, sizeof v));
  return DSV4_OK;
}

DSV4_API dsv4_status dsv4_engine_seq_create(dsv4_engine *engine, int64_t *id) {
  dsv4i_error_clear();
  if (!engine || !id)
    return dsv4i_api_on_engine(engine, dsv4i_error(DSV4_ERR_INVALID_ARG, "dsv4_engine_seq_create: %s is NULL",
                                         engine ? "id" : "engine"));
  return dsv4i_api_on_engine(engine, dsv4i_seq_create(engine, id));
}

DSV4_API dsv4_status dsv4_engine_seq_fork(dsv4_engine *engine, int64_t parent, int64_t *child) {
  dsv4i_error_clear();
  if (!engine || !child)
    return dsv4i_api_on_engine(engine, dsv4i_error(DSV4_ERR_INVALID_ARG, "dsv4_engine_seq_fork: %s is NULL",
                                         engine ? "child" : "engine"));
  return dsv4i_api_on_engine(engine, dsv4i_seq_fork(engine, parent, child));
}

DSV4_API dsv4_status dsv4_engine_seq_free(dsv4_engine *engine, int64_t id) {
  dsv4i_error_clear();
  if (!engine) return dsv4i_error(DSV4_ERR_INVALID_ARG, "dsv4_engine_seq_free: engine is NULL");
  return dsv4i_api_on_engine(engine, dsv4i_seq_free(engine, id));
}

DSV4_API dsv4_status dsv4_engine_seq_length(const dsv4_engine *engine, int64_t id, int64_t *len) {
  dsv4i_error_clear();
  if (!engine || !len)
    return dsv4i_api_on_engine(engine, dsv4i_error(DSV4_ERR_INVALID_ARG, "dsv4_engine_seq_length: %s is NULL",
                                         engine ? "len" : "engine"));
  dsv4_status s;
  const dsv4i_seq *q = dsv4i_seq_find((struct dsv4_engine *)engine, id, &s);
  if (!q && (s == DSV4_ERR_UNKNOWN_SEQUENCE || s == DSV4_ERR_DEVICE_LOST))
    return dsv4i_api_on_engine(engine, s);
  /* a damaged sequence still has a length */
  const int64_t idx = id & ((INT64_C(1) << DSV4I_SEQ_IDX_BITS) - 1);
  *len = q ? q->len : engine->seqs[idx].len;
  dsv4i_error_clear();
  return DSV4_OK;
}

dsv4_status dsv4i_api_sampling(const dsv4_sampling_params *sp, dsv4i_sampling *out,
                               const char *fn) {
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

DSV4_API dsv4_status dsv4_engine_prefill(dsv4_engine *engine, int64_t id, const int32_t *tokens,
                                         int64_t n_tokens, const dsv4_sampling_params *sp,
                                         float *logits, int32_t *sampled) {
  dsv4i_error_clear();
  if (!engine) return dsv4i_error(DSV4_ERR_INVALID_ARG, "dsv4_engine_prefill: engine is NULL");
  if (!tokens && n_tokens > 0)
    return dsv4i_api_on_engine(engine, dsv4i_error(DSV4_ERR_INVALID_ARG, "dsv4_engine_prefill: tokens is NULL"));
  dsv4i_sampling smp;
  dsv4_status s = dsv4i_api_sampling(sp, &smp, "dsv4_engine_prefill");
  if (!s) s = dsv4i_engine_prefill(engine, id, tokens, n_tokens, &smp, logits, sampled);
  return dsv4i_api_on_engine(engine, s);
}

DSV4_API dsv4_status dsv4_engine_decode(dsv4_engine *engine, int32_t n_seq, const int64_t *ids,
                                        const int32_t *tokens, const dsv4_sampling_params *sp,
                                        float *logits, int32_t *sampled) {
  dsv4i_error_clear();
  if (!engine) return dsv4i_error(DSV4_ERR_INVALID_ARG, "dsv4_engine_decode: engine is NULL");
  if (!ids || !tokens)
    return dsv4i_api_on_engine(engine, dsv4i_error(DSV4_ERR_INVALID_ARG, "dsv4_engine_decode: %s is NULL",
                                         ids ? "tokens" : "ids"));
  dsv4i_sampling smp;
  dsv4_status s = dsv4i_api_sampling(sp, &smp, "dsv4_engine_decode");
  if (!s) s = dsv4i_engine_decode(engine, n_seq, ids, tokens, &smp, logits, sampled);
  return dsv4i_api_on_engine(engine, s);
}

/* The 0.1 size of dsv4_engine_timings: it ends at last_verify_ns (stage_ns was appended). */
#define TIMINGS_V01_SIZE offsetof(dsv4_engine_timings, stage_ns)

DSV4_API dsv4_status dsv4_engine_get_timings(const dsv4_engine *engine, dsv4_engine_timings *t,
                                             size_t struct_size) {
  dsv4_status s = out_struct(engine, t, struct_size, TIMINGS_V01_SIZE, "dsv4_engine_get_timings");
  if (s) return s;
  const dsv4i_timings *x = &engine->t;
  dsv4_engine_timings v;
  memset(&v, 0, sizeof v);
  v.struct_size = (uint32_t)min_size(struct_size, sizeof v);
  v.op_timings = (engine->args.flags & DSV4I_ENGINE_F_OP_TIMINGS) ? 1u : 0u;
  v.create_ns = x->create_ns;
  v.prefill_calls = x->prefill_calls;
  v.prefill_tokens = x->prefill_tokens;
  v.prefill_ns = x->prefill_ns;
  v.last_prefill_ns = x->last_prefill_ns;
  v.decode_steps = x->decode_steps;
  v.decode_tokens = x->decode_tokens;
  v.decode_ns = x->decode_ns;
  v.last_decode_ns = x->last_decode_ns;
  v.embed_op_ns = x->op_ns[DSV4I_OP_EMBED];
  v.engram_op_ns = x->op_ns[DSV4I_OP_ENGRAM];
  v.block_op_ns = x->op_ns[DSV4I_OP_BLOCK];
  v.head_op_ns = x->op_ns[DSV4I_OP_HEAD];
  v.sample_op_ns = x->op_ns[DSV4I_OP_SAMPLE];
  v.read_op_ns = x->op_ns[DSV4I_OP_READ];
  v.host_op_ns = x->op_ns[DSV4I_OP_HOST];
  v.dspark_op_ns = x->op_ns[DSV4I_OP_DSPARK];
  v.draft_calls = x->draft_calls;
  v.draft_seqs = x->draft_seqs;
  v.draft_ns = x->draft_ns;
  v.last_draft_ns = x->last_draft_ns;
  v.verify_calls = x->verify_calls;
  v.verify_tokens = x->verify_tokens;
  v.verify_accepted = x->verify_accepted;
  v.verify_ns = x->verify_ns;
  v.last_verify_ns = x->last_verify_ns;
  v.stage_ns = x->stage_ns;
  memset(t, 0, struct_size);
  memcpy(t, &v, min_size(struct_size, sizeof v));
  return DSV4_OK;
}

DSV4_API dsv4_status dsv4_engine_get_layer_time(const dsv4_engine *engine, int32_t layer,
                                                int64_t *ns) {
  dsv4i_error_clear();
  if (!engine || !ns)
    return dsv4i_api_on_engine(engine, dsv4i_error(DSV4_ERR_INVALID_ARG, "dsv4_engine_get_layer_time: NULL"));
  if (layer < 0 || layer >= engine->cfg->n_layers)
    return dsv4i_api_on_engine(engine, dsv4i_error(DSV4_ERR_INVALID_ARG,
                                         "dsv4_engine_get_layer_time: layer %d outside [0, %d)",
                                         (int)layer, (int)engine->cfg->n_layers));
  *ns = engine->t.layer_ns[layer];
  return DSV4_OK;
}

DSV4_API void dsv4_engine_reset_timings(dsv4_engine *engine) {
  if (engine) dsv4i_timings_reset(engine);
}
