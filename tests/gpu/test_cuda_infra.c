/*
 * The per-engine GPU infrastructure (gpu/gpu_ctx.h): pools sized up front
 * (DSV4_ERR_DOES_NOT_FIT with the numbers instead of an OOM), the mapped
 * host-pinned pool read by a kernel, CUDA graph capture per bucket with
 * replay == eager bit for bit (also for a partly filled bucket and new
 * inputs without re-capture), and two engines on one GPU in one process.
 * Exit 77 without a GPU.
 */
#include "gpu_test_util.h"

#include "gpu/gpu_ops.h"

static dsv4i_gpu G;
static dsv4i_gpu_ops O;

static void pool_too_big_is_does_not_fit(void **state) {
  (void)state;
  dsv4i_gpu g2;
  gt_check(dsv4i_gpu_open(0, &g2)); /* a second engine on the same GPU */
  size_t free_b = 0, total_b = 0;
  assert_int_equal(g2.dev.cu->MemGetInfo(&free_b, &total_b), DSV4I_CUDA_SUCCESS);
  const size_t want = total_b + ((size_t)1 << 30);
  assert_int_equal(dsv4i_gpu_pool_create(&g2, want), DSV4_ERR_DOES_NOT_FIT);
  printf("# %s\n", dsv4i_error_message());
  char num[32];
  snprintf(num, sizeof num, "%zu", want);
  assert_non_null(strstr(dsv4i_error_message(), num));
  assert_int_equal(g2.pool.base, 0);
  /* the plan's pool is all there is: a request past it is a planning error */
  gt_check(dsv4i_gpu_pool_create(&g2, 1 << 20));
  dsv4i_cuptr p = 0;
  gt_check(dsv4i_gpu_pool_take(&g2.pool, 1000, "a", &p));
  assert_int_equal(p % 256, 0);
  assert_int_equal(dsv4i_gpu_pool_take(&g2.pool, 1 << 20, "too big", &p), DSV4_ERR_INTERNAL);
  /* both engines run kernels */
  dsv4i_gpu_ops o2;
  gt_check(dsv4i_gpu_ops_init(&g2.kr, &o2));
  uint16_t x[64], w[64], y1[64], y2[64];
  uint64_t s = 3;
  gt_fill_bf16(&s, x, 64, 4);
  gt_fill_bf16(&s, w, 64, 1);
  dsv4i_cuptr b2 = 0;
  gt_check(dsv4i_gpu_pool_take(&g2.pool, 3 * 128, "buf", &b2));
  assert_int_equal(g2.dev.cu->MemcpyHtoD(b2, x, 128), DSV4I_CUDA_SUCCESS);
  assert_int_equal(g2.dev.cu->MemcpyHtoD(b2 + 128, w, 128), DSV4I_CUDA_SUCCESS);
  gt_check(dsv4i_gpu_rmsnorm(&o2, g2.stream, 1, 64, b2, 64, b2 + 128, 1e-6f, b2 + 256, 64));
  gt_check(dsv4i_gpu_sync(&g2));
  assert_int_equal(g2.dev.cu->MemcpyDtoH(y2, b2 + 256, 128), DSV4I_CUDA_SUCCESS);
  dsv4i_gpu_pool_reset(&G.pool, 0);
  gt_check(dsv4i_gpu_enter(&G));
  dsv4i_cuptr dx = gt_up(&G, x, 128), dw = gt_up(&G, w, 128), dy = gt_up(&G, NULL, 128);
  gt_check(dsv4i_gpu_rmsnorm(&O, G.stream, 1, 64, dx, 64, dw, 1e-6f, dy, 64));
  gt_down(&G, y1, dy, 128);
  assert_memory_equal(y1, y2, 128);
  dsv4i_gpu_close(&g2);
  gt_check(dsv4i_gpu_enter(&G)); /* closing one engine leaves the other usable */
  gt_check(dsv4i_gpu_sync(&G));
}

/* An embedding table in the mapped pinned pool, gathered by the kernel
 * through its device address (the Engram placement). */
static void pinned_pool_is_read_by_kernels(void **state) {
  (void)state;
  dsv4i_gpu_pool_reset(&G.pool, 0);
  const int vocab = 64, dim = 512, hc = 4, n = 5;
  gt_check(dsv4i_gpu_hostpool_create(&G, (size_t)4 << 20));
  void *host = NULL;
  dsv4i_cuptr dev = 0;
  gt_check(dsv4i_gpu_hostpool_take(&G.pinned, 2 * (size_t)vocab * dim, "table", &host, &dev));
  uint64_t s = 4;
  gt_fill_bf16(&s, host, (size_t)vocab * dim, 5);
  int32_t tok[5] = {3, 63, 0, 3, 17};
  dsv4i_cuptr dt = gt_up(&G, tok, sizeof tok), dh = gt_up(&G, NULL, 2 * (size_t)n * hc * dim),
              dp = gt_up(&G, NULL, 4 * (size_t)n * hc);
  gt_check(dsv4i_gpu_embed_hc(&O, G.stream, n, hc, dim, dt, dev, dh, dp));
  uint16_t *h = malloc(2 * (size_t)n * hc * dim);
  gt_down(&G, h, dh, 2 * (size_t)n * hc * dim);
  for (int t = 0; t < n; t++)
    for (int c = 0; c < hc; c++)
      assert_memory_equal(h + ((size_t)t * hc + c) * dim, (uint16_t *)host + (size_t)tok[t] * dim,
                          2 * (size_t)dim);
  void *h2;
  dsv4i_cuptr d2;
  assert_int_equal(dsv4i_gpu_hostpool_take(&G.pinned, (size_t)8 << 20, "too big", &h2, &d2),
                   DSV4_ERR_INTERNAL);
  free(h);
}

/* ---- graphs ---------------------------------------------------------------- */

enum { DIM = 1024, OUT = 768, MAXB = 8 };

typedef struct step {
  int32_t rows;                  /* the bucket (graph) or the live rows (eager) */
  uint16_t *in_host, *out_host;  /* pinned staging */
  dsv4i_cuptr in_dev, x, xn, xq, sx, y, norm_w;
  dsv4i_gpu_weight w;
} step;

/* One "layer": copy in from pinned staging, RMSNorm, act_quant, fp8 linear,
 * copy out to pinned staging. Launches and async copies only. */
static dsv4_status record_step(void *user, dsv4i_custream st) {
  step *p = user;
  const dsv4i_cu *cu = G.dev.cu;
  dsv4_status s;
  if (cu->MemcpyHtoDAsync(p->x, p->in_host, 2 * (size_t)p->rows * DIM, st) != DSV4I_CUDA_SUCCESS)
    return dsv4i_error(DSV4_ERR_DEVICE, "copy in");
  if ((s = dsv4i_gpu_rmsnorm(&O, st, p->rows, DIM, p->x, DIM, p->norm_w, 1e-6f, p->xn, DIM))) return s;
  if ((s = dsv4i_gpu_act_quant(&O, st, p->rows, DIM, p->xn, DIM, p->xq, p->sx))) return s;
  if ((s = dsv4i_gpu_linear_q(&O, st, &p->w, p->rows, p->xq, p->sx, p->y, OUT))) return s;
  if (cu->MemcpyDtoHAsync(p->out_host, p->y, 2 * (size_t)p->rows * OUT, st) != DSV4I_CUDA_SUCCESS)
    return dsv4i_error(DSV4_ERR_DEVICE, "copy out");
  return DSV4_OK;
}

static void graph_replay_equals_eager(void **state) {
  (void)state;
  dsv4i_gpu_pool_reset(&G.pool, 0);
  uint64_t s = 5;
  uint8_t *wq = malloc((size_t)OUT * DIM), wsc[(OUT / 32) * (DIM / 32)];
  for (size_t i = 0; i < (size_t)OUT * DIM; i++) {
    uint8_t b;
    do b = (uint8_t)gt_rand(&s); while ((b & 0x7F) == 0x7F);
    wq[i] = b;
  }
  for (size_t i = 0; i < sizeof wsc; i++) wsc[i] = (uint8_t)(120 + gt_rand(&s) % 8);
  uint16_t nw[DIM];
  gt_fill_bf16(&s, nw, DIM, 1);
  step p = {0};
  p.norm_w = gt_up(&G, nw, sizeof nw);
  p.w = (dsv4i_gpu_weight){DSV4I_KFMT_E4M3_UE8M0, OUT, DIM, DIM, DIM / 32,
                           gt_up(&G, wq, (size_t)OUT * DIM), gt_up(&G, wsc, sizeof wsc)};
  p.x = gt_up(&G, NULL, 2 * MAXB * DIM);
  p.xn = gt_up(&G, NULL, 2 * MAXB * DIM);
  p.xq = gt_up(&G, NULL, 4 * MAXB * DIM);
  p.sx = gt_up(&G, NULL, 4 * MAXB * DIM / 32);
  p.y = gt_up(&G, NULL, 2 * MAXB * OUT);
  void *in = NULL, *out = NULL;
  dsv4i_cuptr unused;
  if (!G.pinned.host) gt_check(dsv4i_gpu_hostpool_create(&G, (size_t)4 << 20));
  G.pinned.used = 0;
  gt_check(dsv4i_gpu_hostpool_take(&G.pinned, 2 * MAXB * DIM, "in", &in, &unused));
  gt_check(dsv4i_gpu_hostpool_take(&G.pinned, 2 * MAXB * OUT, "out", &out, &unused));
  p.in_host = in, p.out_host = out;

  const int32_t buckets[] = {4, 8};
  dsv4i_gpu_graphs gr;
  gt_check(dsv4i_gpu_graphs_init(&gr, buckets, 2));
  assert_int_equal(dsv4i_gpu_graphs_bucket(&gr, 5), 1);
  assert_int_equal(dsv4i_gpu_graphs_bucket(&gr, 9), -1);
  uint16_t eager[MAXB * OUT], xin[MAXB * DIM];
  for (int round = 0; round < 3; round++) {
    const int live = round == 0 ? 5 : round == 1 ? 8 : 3;
    gt_fill_bf16(&s, xin, (size_t)MAXB * DIM, 6);
    /* eager, live rows only */
    memcpy(p.in_host, xin, 2 * (size_t)live * DIM);
    p.rows = live;
    gt_check(record_step(&p, G.stream));
    gt_check(dsv4i_gpu_sync(&G));
    memcpy(eager, p.out_host, 2 * (size_t)live * OUT);
    /* the bucket's graph; padding rows hold stale data */
    const int32_t b = dsv4i_gpu_graphs_bucket(&gr, live);
    memcpy(p.in_host, xin, 2 * (size_t)live * DIM);
    memset(p.out_host, 0xEE, 2 * (size_t)MAXB * OUT);
    p.rows = gr.bucket[b];
    gt_check(dsv4i_gpu_graphs_run(&G, &gr, b, record_step, &p));
    gt_check(dsv4i_gpu_sync(&G));
    assert_memory_equal(p.out_host, eager, 2 * (size_t)live * OUT);
    printf("# graph bucket %d with %d live rows == eager (bit for bit)\n", (int)gr.bucket[b], live);
  }
  /* rounds 0 and 1 share bucket 8: captured once; round 2 captured bucket 4 */
  assert_int_equal(gr.captures, 2);
  dsv4i_gpu_graphs_free(&G, &gr);
  free(wq);
}

int tu_run_suite(void) {
  gt_open(&G, (size_t)256 << 20);
  gt_check(dsv4i_gpu_ops_init(&G.kr, &O));
  const struct CMUnitTest tests[] = {
    cmocka_unit_test(pool_too_big_is_does_not_fit),
    cmocka_unit_test(pinned_pool_is_read_by_kernels),
    cmocka_unit_test(graph_replay_equals_eager),
  };
  int failed = cmocka_run_group_tests_name("cuda_infra", tests, NULL, NULL);
  dsv4i_gpu_close(&G);
  return failed;
}
