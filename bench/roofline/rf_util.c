/* dsv4-roofline: pool, fills, graph timing, the table rows, the bandwidth section. */
#include <stdlib.h>
#include <string.h>

#include "rf.h"

void rf_check(dsv4_status st, const char *what) {
  if (st == DSV4_OK) return;
  fprintf(stderr, "dsv4-roofline: %s: %s: %s\n", what, dsv4_status_string(st),
          dsv4i_error_message());
  exit(st == DSV4_ERR_NO_DEVICE || st == DSV4_ERR_UNSUPPORTED ? 77 : 1);
}

void rf_check_cu(rf *r, dsv4i_cures res, const char *what) {
  if (res != DSV4I_CUDA_SUCCESS) rf_check(dsv4i_gpu_fail(&r->g, res, "%s", what), what);
}

dsv4i_cuptr rf_take(rf *r, size_t bytes) {
  dsv4i_cuptr p = 0;
  rf_check(dsv4i_gpu_pool_take(&r->g.pool, bytes ? bytes : 256, "bench buffer", &p), "pool");
  return p;
}

void rf_launch(rf *r, dsv4i_cufn f, unsigned gx, unsigned gy, unsigned block, void **params,
               dsv4i_custream s) {
  rf_check_cu(r, r->g.dev.cu->LaunchKernel(f, gx, gy, 1, block, 1, 1, 0, s, params, NULL),
              "cuLaunchKernel (bench kernel)");
}

dsv4i_cuptr rf_rand(rf *r, size_t bytes, unsigned int mask, unsigned int bits) {
  const size_t words = (bytes + 3) / 4;
  dsv4i_cuptr p = rf_take(r, words * 4);
  unsigned long long n = words;
  unsigned int seed = ++r->seed;
  void *a[] = {&p, &n, &seed, &mask, &bits};
  rf_launch(r, r->k_fill, 1024, 1, 256, a, r->g.stream);
  return p;
}

dsv4i_cuptr rf_upload(rf *r, const void *h, size_t bytes) {
  dsv4i_cuptr p = rf_take(r, bytes);
  rf_check(dsv4i_gpu_sync(&r->g), "sync");
  rf_check_cu(r, r->g.dev.cu->MemcpyHtoD(p, h, bytes), "cuMemcpyHtoD");
  /* a pageable copy may return before its DMA lands: wait for it */
  rf_check_cu(r, r->g.dev.cu->CtxSynchronize(), "cuCtxSynchronize");
  return p;
}

int rf_copies(const rf *r, double bytes, int max) {
  double c = 3.0 * (double)r->l2 / (bytes > 1 ? bytes : 1);
  int n = c < 1 ? 1 : (int)(c + 0.999);
  return n > max ? max : n;
}

static double events_ms(rf *r) {
  rf_check(dsv4i_gpu_sync(&r->g), "sync");
  float ms = 0;
  rf_check_cu(r, r->g.dev.cu->EventElapsedTime(&ms, r->g.ev_start, r->g.ev_stop), "cuEventElapsedTime");
  return ms;
}

/* A case that failed: its message, counted; the table goes on with the next case. */
static double case_failed(rf *r, dsv4_status st, const char *where) {
  printf("  (%s failed: %s: %s)\n", where, dsv4_status_string(st), dsv4i_error_message());
  r->failures++;
  (void)dsv4i_gpu_sync(&r->g);
  return -1;
}

double rf_time(rf *r, rf_rec f, void *u, int n) {
  const dsv4i_cu *cu = r->g.dev.cu;
  const dsv4i_custream s = r->g.stream;
  dsv4_status st = DSV4_OK;
  for (int i = 0; i < n && !st; i++) st = f(r, u, i, s);
  if (!st) st = dsv4i_gpu_sync(&r->g);
  if (st) return case_failed(r, st, "eager warm-up");
  rf_check_cu(r, cu->StreamBeginCapture(s, DSV4I_CU_STREAM_CAPTURE_MODE_THREAD_LOCAL),
              "cuStreamBeginCapture");
  for (int i = 0; i < n && !st; i++) st = f(r, u, i, s);
  dsv4i_cugraph graph = NULL;
  const dsv4i_cures res = cu->StreamEndCapture(s, &graph); /* always leave capture mode */
  if (st || res != DSV4I_CUDA_SUCCESS) {
    if (graph) cu->GraphDestroy(graph);
    return case_failed(r, st ? st : dsv4i_gpu_fail(&r->g, res, "cuStreamEndCapture"), "capture");
  }
  dsv4i_cugraphexec exec = NULL;
  rf_check_cu(r, cu->GraphInstantiateWithFlags(&exec, graph, 0), "cuGraphInstantiate");
  cu->GraphDestroy(graph);
  rf_check_cu(r, cu->GraphLaunch(exec, s), "cuGraphLaunch"); /* warm */
  cu->EventRecord(r->g.ev_start, s);
  rf_check_cu(r, cu->GraphLaunch(exec, s), "cuGraphLaunch");
  cu->EventRecord(r->g.ev_stop, s);
  const double one = events_ms(r);
  int reps = one > 0 ? (int)(20.0 / one) : 100;
  reps = reps < 3 ? 3 : (reps > 200 ? 200 : reps);
  cu->EventRecord(r->g.ev_start, s);
  for (int k = 0; k < reps; k++) rf_check_cu(r, cu->GraphLaunch(exec, s), "cuGraphLaunch");
  cu->EventRecord(r->g.ev_stop, s);
  const double ms = events_ms(r);
  cu->GraphExecDestroy(exec);
  return ms * 1e3 / ((double)reps * n);
}

double rf_floor_us(const rf *r, double bytes) { return bytes / (r->copy_gbs * 1e3); }

void rf_table_head(const char *title) {
  printf("\n%s\n%-34s %3s %10s %10s %9s %7s %7s %10s %8s %8s\n", title, "op", "n", "us/call",
         "MB", "floor us", "ratio", "r+empty", "stock us", "st/floor", "st/ours");
}

void rf_row(const rf *r, const char *op, int n, double us, double bytes, double stock_us) {
  const double fl = rf_floor_us(r, bytes);
  if (us < 0) {
    printf("%-34s %3d %10s %10.3f %9.2f   (failed, above)\n", op, n, "-", bytes / 1e6, fl);
    return;
  }
  printf("%-34s %3d %10.2f %10.3f %9.2f %7.2f %7.2f", op, n, us, bytes / 1e6, fl, us / fl,
         us / (fl + r->empty_us));
  if (stock_us >= 0)
    printf(" %10.2f %8.2f %8.2f\n", stock_us, stock_us / fl, stock_us / us);
  else
    printf(" %10s %8s %8s\n", "-", "-", "-");
  fflush(stdout);
}

dsv4_status rf_gemm(rf *r, dsv4i_custream s, int n, int rows, int k, dsv4i_cuptr x, int64_t ldx,
                    dsv4i_cuptr w, int64_t ldw, dsv4i_cuptr y, int64_t ldy) {
  return dsv4i_lt_gemm_bf16_f32(&r->lt, s, n, rows, k, x, ldx, w, ldw, y, ldy, r->lt_ws,
                                r->lt_ws_bytes);
}

/* ---- bandwidth and the launch floor ------------------------------------------------ */

typedef struct bw_args { dsv4i_cuptr a, b, sink; size_t bytes; } bw_args;

static dsv4_status rec_empty(rf *r, void *u, int i, dsv4i_custream s) {
  (void)u, (void)i;
  rf_launch(r, r->k_empty, 1, 1, 32, NULL, s);
  return DSV4_OK;
}

void rf_bandwidth(rf *r) {
  const dsv4i_cu *cu = r->g.dev.cu;
  const size_t mark = dsv4i_gpu_pool_mark(&r->g.pool);
  bw_args a = {rf_rand(r, (size_t)2 << 30, ~0u, 0), rf_take(r, (size_t)2 << 30), rf_take(r, 256),
               (size_t)2 << 30};
  /* copy: cuMemcpyDtoDAsync of 2 GiB, 10 times (read + write counted) */
  rf_check_cu(r, cu->MemcpyDtoDAsync(a.b, a.a, a.bytes, r->g.stream), "cuMemcpyDtoDAsync");
  cu->EventRecord(r->g.ev_start, r->g.stream);
  for (int k = 0; k < 10; k++)
    rf_check_cu(r, cu->MemcpyDtoDAsync(a.b, a.a, a.bytes, r->g.stream), "cuMemcpyDtoDAsync");
  cu->EventRecord(r->g.ev_stop, r->g.stream);
  double ms = events_ms(r) / 10;
  r->copy_gbs = 2.0 * (double)a.bytes / (ms * 1e-3) / 1e9;
  /* read: a kernel that reads 2 GiB once (8 blocks of 512 threads per SM) */
  unsigned long long n16 = a.bytes / 16;
  void *p[] = {&a.a, &n16, &a.sink};
  const unsigned grid = (unsigned)r->g.dev.n_sm * 8;
  rf_launch(r, r->k_read, grid, 1, 512, p, r->g.stream);
  cu->EventRecord(r->g.ev_start, r->g.stream);
  for (int k = 0; k < 10; k++) rf_launch(r, r->k_read, grid, 1, 512, p, r->g.stream);
  cu->EventRecord(r->g.ev_stop, r->g.stream);
  ms = events_ms(r) / 10;
  r->read_gbs = (double)a.bytes / (ms * 1e-3) / 1e9;
  dsv4i_gpu_pool_reset(&r->g.pool, mark);
  r->empty_us = rf_time(r, rec_empty, NULL, 64);
  printf("copy bandwidth (cuMemcpyDtoDAsync 2 GiB, read + write): %.1f GB/s\n", r->copy_gbs);
  printf("read bandwidth (a kernel reading 2 GiB once):           %.1f GB/s\n", r->read_gbs);
  printf("empty kernel under graph replay (64 per graph):          %.2f us\n", r->empty_us);
  printf("floor = bytes / copy bandwidth; ratio = time / floor; r+empty = time / (floor + "
         "one empty kernel);\nstock = the baseline in the same run: st/floor its ratio, st/ours "
         "how many times slower than ours.\n");
}
