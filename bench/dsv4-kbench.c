/*
 * dsv4-kbench: the dense CUDA kernels at the release's shapes, timed with
 * CUDA events, as achieved bandwidth over the bytes each must read, and as
 * a ratio to the device's measured copy bandwidth (the decode roofline,
 * design §8). Internal tool (links the library's internals); needs a GPU.
 *   dsv4-kbench [device]     (--help, --version; exit 77 without a usable device)
 * Weights are filled with constant valid codes: timing does not depend on
 * the values. bench/RESULTS.md has the command and a run.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "gpu/gpu_ctx.h"
#include "gpu/gpu_ops.h"

static dsv4i_gpu G;
static dsv4i_gpu_ops O;

static void die(dsv4_status st, const char *what) {
  if (st == DSV4_OK) return;
  fprintf(stderr, "dsv4-kbench: %s: %s: %s\n", what, dsv4_status_string(st), dsv4i_error_message());
  exit(st == DSV4_ERR_NO_DEVICE || st == DSV4_ERR_UNSUPPORTED ? 77 : 1);
}

static dsv4i_cuptr take(size_t bytes, unsigned char fill) {
  dsv4i_cuptr p = 0;
  die(dsv4i_gpu_pool_take(&G.pool, bytes, "bench buffer", &p), "pool");
  if (G.dev.cu->MemsetD8Async(p, fill, bytes, G.stream) != DSV4I_CUDA_SUCCESS) die(DSV4_ERR_DEVICE, "memset");
  return p;
}

typedef dsv4_status (*op_fn)(void *);

/* Mean ms per call over `reps` calls after 3 warm-up calls. */
static double time_op(op_fn f, void *u, int reps) {
  for (int i = 0; i < 3; i++) die(f(u), "warm-up");
  const dsv4i_cu *cu = G.dev.cu;
  cu->EventRecord(G.ev_start, G.stream);
  for (int i = 0; i < reps; i++) die(f(u), "run");
  cu->EventRecord(G.ev_stop, G.stream);
  die(dsv4i_gpu_sync(&G), "sync");
  float ms = 0;
  cu->EventElapsedTime(&ms, G.ev_start, G.ev_stop);
  return ms / reps;
}

typedef struct copy_args { dsv4i_cuptr a, b; size_t n; } copy_args;
static dsv4_status do_copy(void *u) {
  copy_args *c = u;
  return G.dev.cu->MemcpyDtoDAsync(c->b, c->a, c->n, G.stream) == DSV4I_CUDA_SUCCESS ? DSV4_OK : DSV4_ERR_DEVICE;
}

typedef struct lin_args {
  dsv4i_gpu_weight w;
  int32_t n;
  dsv4i_cuptr x, xq, sx, y;
  int quant, f32;
} lin_args;
static dsv4_status do_linear(void *u) {
  lin_args *a = u;
  if (a->quant) {
    dsv4_status st = dsv4i_gpu_act_quant(&O, G.stream, a->n, a->w.cols, a->x, a->w.cols, a->xq, a->sx);
    return st ? st : dsv4i_gpu_linear_q(&O, G.stream, &a->w, a->n, a->xq, a->sx, a->y, a->w.rows);
  }
  return dsv4i_gpu_linear(&O, G.stream, &a->w, a->n, a->x, a->w.cols, a->y, a->w.rows, a->f32);
}

typedef struct moe_args {
  dsv4i_gpu_moe m;
  int32_t n;
  dsv4i_cuptr x, idx, wt, scratch, out;
} moe_args;
static dsv4_status do_moe(void *u) {
  moe_args *a = u;
  return dsv4i_gpu_moe_experts(&O, G.stream, &a->m, a->n, a->x, a->m.dim, a->idx, a->wt, a->scratch,
                               a->out, a->m.dim);
}

static double copy_gbs;

static void report(const char *name, int n, double ms, double bytes) {
  const double gbs = bytes / (ms * 1e-3) / 1e9;
  printf("%-34s n=%-3d %9.4f ms %9.1f GB/s  %5.2f of copy bandwidth\n", name, n, ms, gbs, gbs / copy_gbs);
}

int main(int argc, char **argv) {
  if (argc > 1 && (!strcmp(argv[1], "-h") || !strcmp(argv[1], "--help"))) {
    printf("usage: dsv4-kbench [DEVICE] | --version\n"
           "Time the dense CUDA kernels at the release's shapes on CUDA device DEVICE (default 0).\n"
           "Exit status: 0 done, 1 a failure, 2 bad usage, 77 no usable device.\n");
    return 0;
  }
  if (argc > 1 && !strcmp(argv[1], "--version")) {
    printf("dsv4-kbench (libdsv4) %s\n", DSV4_VERSION_STRING);
    return 0;
  }
  char *end = NULL;
  const long d = argc > 1 ? strtol(argv[1], &end, 10) : 0;
  if (argc > 2 || (argc > 1 && (!argv[1][0] || *end || d < 0 || d > 1023))) {
    fprintf(stderr, "usage: dsv4-kbench [DEVICE] | --version\n");
    return 2;
  }
  const int dev = (int)d;
  die(dsv4i_gpu_open(dev, &G), "open");
  die(dsv4i_gpu_pool_create(&G, (size_t)24 << 30), "pool");
  die(dsv4i_gpu_ops_init(&G.kr, &O), "kernels");
  printf("device %d: %s sm_%d, %d SMs; PTX JIT %.1f ms\n", dev, G.dev.name, (int)G.dev.sm,
         (int)G.dev.n_sm, G.kr.jit_ms);

  copy_args c = {take((size_t)2 << 30, 0), take((size_t)2 << 30, 0), (size_t)2 << 30};
  const double cms = time_op(do_copy, &c, 10);
  copy_gbs = 2.0 * (double)c.n / (cms * 1e-3) / 1e9; /* read + write */
  printf("copy bandwidth (cuMemcpyDtoD, 2 GiB, read + write): %.1f GB/s\n\n", copy_gbs);
  dsv4i_gpu_pool_reset(&G.pool, 0);

  const int dim = 5120, vocab = 129280;
  const int ns[] = {1, 4, 8, 16};
  /* fp8 linears: wq_a-like [1280][5120], a square [5120][5120] */
  const int shapes[2][2] = {{1280, 5120}, {5120, 5120}};
  for (int v = 0; v < 2; v++)
  for (int s = 0; s < 2; s++)
    for (int i = 0; i < 4; i++) {
      O.warp_rows_max = v ? INT32_MAX : 0; /* thread per row, then warp per row */
      const size_t mark = dsv4i_gpu_pool_mark(&G.pool);
      const int R = shapes[s][0], K = shapes[s][1], n = ns[i];
      lin_args a = {{DSV4I_KFMT_E4M3_UE8M0, R, K, K, K / 32, take((size_t)R * K, 0x38),
                     take((size_t)((R + 31) / 32) * (K / 32), 127)},
                    n, take(2 * (size_t)n * K, 0x3F), take(4 * (size_t)n * K, 0),
                    take(4 * (size_t)n * K / 32, 0), take(2 * (size_t)n * R, 0), 1, 0};
      char name[64];
      snprintf(name, sizeof name, "fp8 linear %dx%d%s (+act_quant)", R, K, v ? " warp" : "");
      report(name, n, time_op(do_linear, &a, 50), (double)R * K + (double)R * K / 1024);
      dsv4i_gpu_pool_reset(&G.pool, mark);
    }
  O.warp_rows_max = 0;
  /* head: bf16 [vocab][dim], fp32 logits */
  for (int i = 0; i < 2; i++) {
    const size_t mark = dsv4i_gpu_pool_mark(&G.pool);
    const int n = ns[i];
    lin_args a = {{DSV4I_KFMT_BF16, vocab, dim, dim, 0, take(2 * (size_t)vocab * dim, 0x3F), 0},
                  n, take(2 * (size_t)n * dim, 0x3F), 0, 0, take(4 * (size_t)n * vocab, 0), 0, 1};
    report("head bf16 129280x5120 -> f32", n, time_op(do_linear, &a, 10), 2.0 * vocab * dim);
    dsv4i_gpu_pool_reset(&G.pool, mark);
  }
  /* MoE: 384 MXFP4 experts (2304 x 5120), top 6, + the fp8 shared expert */
  {
    const int E = 384, K = 6, inter = 2304;
    const size_t w13 = (size_t)inter * dim / 2, s13 = (size_t)inter * (dim / 32);
    const size_t w2b = (size_t)dim * inter / 2, s2b = (size_t)dim * (inter / 32);
    uint64_t *t[6];
    for (int j = 0; j < 6; j++) t[j] = malloc(sizeof(uint64_t) * (E + 1));
    for (int e = 0; e <= E; e++) {
      const int sh = e == E;
      const size_t a13 = sh ? (size_t)inter * dim : w13, a2 = sh ? (size_t)dim * inter : w2b;
      const size_t c13 = sh ? (size_t)((inter + 31) / 32) * (dim / 32) : s13;
      const size_t c2 = sh ? (size_t)(dim / 32) * (inter / 32) : s2b;
      t[0][e] = take(a13, sh ? 0x38 : 0x22), t[1][e] = take(c13, 127);
      t[2][e] = take(a2, sh ? 0x38 : 0x22), t[3][e] = take(c2, 127);
      t[4][e] = take(a13, sh ? 0x38 : 0x22), t[5][e] = take(c13, 127);
    }
    dsv4i_cuptr tab[6];
    for (int j = 0; j < 6; j++) {
      tab[j] = take(sizeof(uint64_t) * (E + 1), 0);
      G.dev.cu->MemcpyHtoD(tab[j], t[j], sizeof(uint64_t) * (E + 1));
      free(t[j]);
    }
    for (int v = 0; v < 2; v++)
    for (int i = 0; i < 3; i++) {
      O.warp_rows_max = v ? INT32_MAX : 0; /* thread per row, then warp per row */
      const size_t mark = dsv4i_gpu_pool_mark(&G.pool);
      const int n = ns[i];
      int32_t *idx = malloc(sizeof(int32_t) * n * K);
      float *wt = malloc(sizeof(float) * n * K);
      for (int j = 0; j < n * K; j++) idx[j] = (j * 61 + 7) % E, wt[j] = 0.1f; /* distinct per token */
      int distinct = 0;
      for (int j = 0; j < n * K; j++) {
        int seen = 0;
        for (int q = 0; q < j; q++) seen |= idx[q] == idx[j];
        distinct += !seen;
      }
      moe_args a = {{E, K, dim, inter, 1, 10.0f, DSV4I_KFMT_E2M1_UE8M0, DSV4I_KFMT_E4M3_UE8M0,
                     tab[0], tab[1], tab[2], tab[3], tab[4], tab[5]},
                    n, take(2 * (size_t)n * dim, 0x3F), take(sizeof(int32_t) * n * K, 0),
                    take(sizeof(float) * n * K, 0), 0, take(2 * (size_t)n * dim, 0)};
      a.scratch = take(dsv4i_gpu_moe_scratch_bytes(&a.m, n), 0);
      G.dev.cu->MemcpyHtoD(a.idx, idx, sizeof(int32_t) * n * K);
      G.dev.cu->MemcpyHtoD(a.wt, wt, sizeof(float) * n * K);
      const double routed = 2.0 * (double)(w13 + s13) + (double)(w2b + s2b);
      const double shared = 3.0 * inter * dim + 3.0 * (double)((inter + 31) / 32) * (dim / 32);
      const double bytes = distinct * routed + shared;
      char name[64];
      snprintf(name, sizeof name, "moe 6/384 + shared (%d experts)%s", distinct, v ? " warp" : "");
      report(name, n, time_op(do_moe, &a, 20), bytes);
      free(idx), free(wt);
      dsv4i_gpu_pool_reset(&G.pool, mark);
    }
  }
  dsv4i_gpu_close(&G);
  return 0;
}
