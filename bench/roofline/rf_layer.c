/*
 * dsv4-roofline: the layer table. A real-dimension checkpoint (the
 * generator's, `dsv4-gen-checkpoint --real-dims --layers N`) on the CUDA
 * engine: `prompt` tokens prefilled in each of 8 sequences, then decode
 * steps at batch 1, 4, 8, then DSpark verify steps of the same sequences
 * (anchor + B proposals each: the verify width), then DSpark draft calls of
 * 1, 4, 8 sequences (the draft graphs; no bytes floor: the stages' weights
 * are not counted):
 *   - the step as the engine runs it by default (graphs on), wall time per
 *     dsv4_engine_decode / dsv4_engine_verify call over 8 steps after 2
 *     warm-up steps;
 *   - one step op by op (graphs off) with a CUDA event pair around every
 *     kernel launch (the registry's launch hook), summed per kernel;
 *   - the step's bytes floor: every device weight the step reads at its
 *     checkpoint size (wo_a as the bf16 copy the backend keeps; routed
 *     experts only the distinct experts the step's routers chose, read back
 *     after each router launch; Engram only the gathered rows; the head),
 *     plus the KV records attention and the indexer read at that length.
 */
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "engine/engine.h"
#include "gpu/gpu_backend.h"
#include "model/model.h"
#include "rf.h"

enum { MAX_LAUNCH = 8192, MAX_L = 64, N_SEQ = 8 };

typedef struct prof {
  gpu_backend *gb;
  dsv4i_cuevent ev[2 * MAX_LAUNCH];
  int id[MAX_LAUNCH];
  int n, n_router, over;
  int distinct[MAX_L];
} prof;

static void hook(void *user, dsv4i_kernel_id id, dsv4i_custream s, int after) {
  prof *p = user;
  const dsv4i_cu *cu = p->gb->g.dev.cu;
  if (p->n >= MAX_LAUNCH) {
    p->over = 1;
    return;
  }
  cu->EventRecord(p->ev[2 * p->n + after], s);
  if (!after) return;
  p->id[p->n++] = id;
  if (id == DSV4I_K_ROUTER_F32 && p->n_router < MAX_L) { /* distinct experts of this layer */
    const int n = p->gb->step_rows, k = p->gb->cfg->n_experts_per_tok, E = p->gb->cfg->n_routed_experts;
    int32_t idx[16 * 64];
    int d = 0;
    if (n * k <= 16 * 64 && cu->StreamSynchronize(s) == DSV4I_CUDA_SUCCESS &&
        cu->MemcpyDtoH(idx, p->gb->ws.ridx, sizeof(int32_t) * (size_t)(n * k)) == DSV4I_CUDA_SUCCESS) {
      for (int e = 0; e < E; e++) {
        int any = 0;
        for (int j = 0; j < n * k; j++) any |= idx[j] == e;
        d += any;
      }
    } else {
      d = -1;
    }
    p->distinct[p->n_router++] = d;
  }
}

static double now_ms(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec * 1e3 + (double)ts.tv_nsec * 1e-6;
}

/* Bytes one decode step of n tokens at length ctx must read (see the header). */
static double step_bytes(const dsv4_model *m, const dsv4i_config *c, int n, int64_t ctx,
                         const prof *p) {
  const dsv4i_weights *wt = dsv4i_model_weights(m);
  double b = 0;
  for (size_t i = 0; i < wt->n; i++) {
    const dsv4i_weight *w = &wt->w[i];
    const double sz = (double)w->nbytes + (double)w->scale_nbytes;
    if (w->layer >= c->n_layers) continue; /* DSpark stages: not run by a plain decode step */
    switch (w->role) {
    case DSV4I_W_EMBED: b += (double)n * c->dim * 2; break;
    case DSV4I_W_ENGRAM_EMBED: break; /* gathered rows below */
    case DSV4I_W_VISION: case DSV4I_W_GATE_BIAS_VL: break;
    case DSV4I_W_ATTN_WO_A: b += 2.0 * (double)w->nbytes; break; /* the bf16 copy */
    case DSV4I_W_EXPERT_W1: case DSV4I_W_EXPERT_W2: case DSV4I_W_EXPERT_W3: {
      const int d = w->layer < p->n_router && p->distinct[w->layer] >= 0
                        ? p->distinct[w->layer]
                        : (n * c->n_experts_per_tok < c->n_routed_experts
                               ? n * c->n_experts_per_tok : c->n_routed_experts);
      b += sz * d / c->n_routed_experts;
      break;
    }
    default: b += sz;
    }
  }
  const double eng_rows = (double)(c->engram_max_ngram - 1) * c->engram_n_heads;
  b += (double)c->n_engram * n * eng_rows * (c->engram_head_dim + c->engram_head_dim / 32.0);
  for (int L = 0; L < c->n_layers; L++) {
    const dsv4i_layer_role *lr = &c->layers[L];
    const int64_t w = ctx < c->window_size ? ctx : c->window_size - 1;
    b += (double)n * (double)w * 528;
    if (lr->compress_ratio > 0) {
      const int64_t k = (ctx + 1) / lr->compress_ratio;
      b += (double)n * (double)(k < c->index_topk ? k : c->index_topk) * 288;
      if (lr->roles & DSV4_ROLE_INDEX_SOURCE) b += (double)n * (double)k * 68;
    }
  }
  return b;
}

static void die_engine(dsv4_status st, const char *what) {
  if (st == DSV4_OK) return;
  fprintf(stderr, "dsv4-roofline: %s: %s: %s\n", what, dsv4_status_string(st), dsv4_last_error());
  exit(st == DSV4_ERR_NO_DEVICE || st == DSV4_ERR_UNSUPPORTED ? 77 : 1);
}

/* The engine and its sequences during the layer table. */
typedef struct run {
  dsv4_engine *e;
  gpu_backend *gb;
  int B;                       /* DSpark draft block (verify width B + 1), 0 without stages */
  int64_t ids[N_SEQ], len[N_SEQ];
  int32_t tok[N_SEQ], next[N_SEQ], drafts[N_SEQ * 16], n_drafts[N_SEQ], acc[N_SEQ];
} run;

enum { DECODE, VERIFY, DRAFT };

/* One step of n sequences: a decode step, a verify of B proposals each (the anchor
 * repeated: the work of a verify does not depend on what is accepted), or a greedy
 * draft (which changes no sequence). */
static dsv4_status step(run *u, int n, int mode) {
  const int verify = mode == VERIFY;
  dsv4_status st;
  if (mode == DRAFT) return dsv4_engine_draft(u->e, n, u->ids, u->tok, NULL, u->drafts, NULL);
  if (verify) {
    for (int i = 0; i < n; i++) {
      u->n_drafts[i] = u->B;
      for (int k = 0; k < u->B; k++) u->drafts[i * u->B + k] = u->tok[i];
    }
    st = dsv4_engine_verify(u->e, n, u->ids, u->tok, u->n_drafts, u->drafts, NULL, u->acc, u->next);
  } else {
    st = dsv4_engine_decode(u->e, n, u->ids, u->tok, NULL, NULL, u->next);
  }
  if (st == DSV4_OK)
    for (int i = 0; i < n; i++) u->tok[i] = u->next[i], u->len[i] += 1 + (verify ? u->acc[i] : 0);
  return st;
}

/* Rows of the table for n sequences: graphs on, then one step op by op. */
static void measure(rf *r, const dsv4_model *m, run *u, prof *p, int n, int mode) {
  const dsv4i_config *c = dsv4i_model_config(m);
  const int verify = mode == VERIFY;
  const int rows = verify ? n * (u->B + 1) : n;
  for (int k = 0; k < 2; k++) die_engine(step(u, n, mode), "warm-up step"); /* graph captured */
  const double t1 = now_ms();
  for (int k = 0; k < 8; k++) die_engine(step(u, n, mode), "step");
  const double graph_ms = (now_ms() - t1) / 8;
  /* one step op by op, an event pair around each kernel */
  const int64_t ctx = u->len[0];
  const int32_t was = dsv4i_gpu_backend_set_eager(u->e->be, 1);
  p->n = p->n_router = p->over = 0;
  u->gb->g.kr.hook = hook, u->gb->g.kr.hook_user = p;
  const double t2 = now_ms();
  const dsv4_status st = step(u, n, mode);
  const double eager_ms = now_ms() - t2;
  u->gb->g.kr.hook = NULL, u->gb->g.kr.hook_user = NULL;
  dsv4i_gpu_backend_set_eager(u->e->be, was);
  die_engine(st, "step (per-op)");
  die_engine(dsv4i_gpu_enter(&u->gb->g), "context");
  die_engine(dsv4i_gpu_sync(&u->gb->g), "sync");
  /* per kernel: launches and summed time */
  double ms_of[DSV4I_K_COUNT] = {0}, sum = 0;
  int cnt[DSV4I_K_COUNT] = {0};
  for (int k = 0; k < p->n; k++) {
    float ms = 0;
    u->gb->g.dev.cu->EventElapsedTime(&ms, p->ev[2 * k], p->ev[2 * k + 1]);
    ms_of[p->id[k]] += ms, cnt[p->id[k]]++, sum += ms;
  }
  const double bytes = mode == DRAFT ? 0 : step_bytes(m, c, rows, ctx, p);
  const double floor_ms = bytes / (r->copy_gbs * 1e6);
  if (mode == DRAFT)
    printf("\ndraft, %d sequences x %d draft tokens (greedy) at length %lld:", n, u->B,
           (long long)ctx);
  else if (verify)
    printf("\nverify, %d sequences x %d rows (anchor + %d proposals) at length %lld:", n,
           u->B + 1, u->B, (long long)ctx);
  else
    printf("\ndecode, batch %d at length %lld:", n, (long long)ctx);
  printf(" step %.3f ms (graphs on, wall, mean of 8);\n  op by op %.3f ms wall, %.3f ms in %d "
         "kernels\n", graph_ms, eager_ms, sum, p->n);
  if (mode == DRAFT)
    printf("  bytes floor: not computed for the draft (the stages' weights are not counted)\n");
  else
    printf("  bytes floor %.1f MB = %.3f ms; ratio step / floor %.2f; kernels / floor %.2f\n",
           bytes / 1e6, floor_ms, graph_ms / floor_ms, sum / floor_ms);
  if (p->over) printf("  (more than %d launches: the rest not timed)\n", MAX_LAUNCH);
  printf("  distinct routed experts per layer:");
  for (int L = 0; L < p->n_router; L++) printf(" %d", p->distinct[L]);
  printf("\n  %-36s %8s %10s %7s %10s\n", "kernel (op, format)", "launches", "ms/step", "share",
         "us/launch");
  for (int k = 0; k < DSV4I_K_COUNT; k++) {
    if (!cnt[k]) continue;
    const dsv4i_kernel_desc *d = dsv4i_kernel_desc_get((dsv4i_kernel_id)k);
    char name[64];
    snprintf(name, sizeof name, "%s %s%s", dsv4i_kop_name(d->op), dsv4i_kfmt_name(d->fmt),
             d->shape == DSV4I_KSHAPE_DECODE_WARP ? " warp"
             : d->shape == DSV4I_KSHAPE_TILED   ? " tiled"
                                                : "");
    printf("  %-36s %8d %10.4f %6.1f%% %10.2f\n", name, cnt[k], ms_of[k], 100.0 * ms_of[k] / sum,
           1e3 * ms_of[k] / cnt[k]);
  }
  fflush(stdout);
}

int rf_layer(rf *r, const char *dir, int device, int prompt) {
  dsv4_model *m = NULL;
  die_engine(dsv4_model_load(dir, NULL, &m), "model");
  const dsv4i_config *c = dsv4i_model_config(m);
  run *u = calloc(1, sizeof *u);
  u->B = c->n_mtp_layers > 0 && c->dspark_block_size <= 16 ? c->dspark_block_size : 0;
  dsv4_engine_params ep;
  die_engine(dsv4_engine_params_init(&ep, sizeof ep), "params");
  ep.backend = DSV4_BACKEND_CUDA;
  ep.device = device;
  ep.flags = r->cpu_order ? DSV4_ENGINE_F_GPU_CPU_ORDER : 0;
  ep.max_sequences = N_SEQ;
  ep.max_context = prompt + 64 + 11 * 3 * (u->B + 1); /* decode and verify steps */
  const double t0 = now_ms();
  die_engine(dsv4_engine_create(m, &ep, &u->e), "engine");
  printf("\nlayer table: %s, %d layers + head, hidden %d, CUDA engine created in %.1f s; %s\n",
         dir, (int)c->n_layers, (int)c->dim, (now_ms() - t0) / 1e3,
         r->cpu_order ? "CPU order" : "default mode");
  u->gb = (gpu_backend *)u->e->be;
  die_engine(dsv4i_gpu_enter(&u->gb->g), "context"); /* the engine's context on this thread */
  prof *p = calloc(1, sizeof *p);
  p->gb = u->gb;
  for (int i = 0; i < 2 * MAX_LAUNCH; i++)
    if (u->gb->g.dev.cu->EventCreate(&p->ev[i], 0) != DSV4I_CUDA_SUCCESS) {
      fprintf(stderr, "dsv4-roofline: cuEventCreate failed (event %d)\n", i);
      exit(1);
    }
  /* Prompt ids the tokenizer defines (n_valid): the generator's checkpoints carry a
   * tokenizer far narrower than the head, and Engram refuses ids past it. */
  const int64_t ids = u->e->n_valid, lo = ids > 400 ? 100 : 0, span = ids > 400 ? ids - 200 : ids;
  int32_t *in = malloc(sizeof(int32_t) * (size_t)prompt);
  for (int s = 0; s < N_SEQ; s++) {
    for (int i = 0; i < prompt; i++) in[i] = (int32_t)(lo + (i * 7919LL + s * 131LL) % span);
    die_engine(dsv4_engine_seq_create(u->e, &u->ids[s]), "seq");
    die_engine(dsv4_engine_prefill(u->e, u->ids[s], in, prompt, NULL, NULL, &u->tok[s]), "prefill");
    u->len[s] = prompt;
  }
  free(in);
  const int bs[] = {1, 4, 8};
  for (int q = 0; q < 3; q++) measure(r, m, u, p, bs[q], DECODE);
  if (u->B > 0) {
    for (int q = 0; q < 3; q++) measure(r, m, u, p, bs[q], VERIFY);
    for (int q = 0; q < 3; q++) measure(r, m, u, p, bs[q], DRAFT);
  } else {
    printf("\n(no DSpark stages in this checkpoint: no verify or draft rows)\n");
  }
  for (int i = 0; i < 2 * MAX_LAUNCH; i++) u->gb->g.dev.cu->EventDestroy(p->ev[i]);
  free(p);
  dsv4_engine_free(u->e);
  free(u);
  dsv4_model_free(m);
  return 0;
}
