/* CUDA graphs of a step, one per batch-size bucket, through the driver API. */
#include <string.h>

#include "gpu/gpu_ctx.h"

dsv4_status dsv4i_gpu_graphs_init(dsv4i_gpu_graphs *gr, const int32_t *buckets, int32_t n) {
  memset(gr, 0, sizeof *gr);
  if (!buckets || n <= 0 || n > (int32_t)(sizeof gr->bucket / sizeof gr->bucket[0]))
    return dsv4i_error(DSV4_ERR_INVALID_ARG, "graph buckets: %d of them (1..16)", (int)n);
  for (int32_t i = 0; i < n; i++) {
    if (buckets[i] <= 0 || (i > 0 && buckets[i] <= buckets[i - 1]))
      return dsv4i_error(DSV4_ERR_INVALID_ARG,
                         "graph buckets must be positive and ascending (bucket %d is %d)", (int)i,
                         (int)buckets[i]);
    gr->bucket[i] = buckets[i];
  }
  gr->n_buckets = n;
  return DSV4_OK;
}

int32_t dsv4i_gpu_graphs_bucket(const dsv4i_gpu_graphs *gr, int32_t n_rows) {
  for (int32_t i = 0; i < gr->n_buckets; i++)
    if (gr->bucket[i] >= n_rows) return i;
  return -1;
}

static dsv4_status capture(dsv4i_gpu *g, dsv4i_gpu_graphs *gr, int32_t b,
                           dsv4i_gpu_record_fn record, void *user) {
  const dsv4i_cu *cu = g->dev.cu;
  dsv4i_cures r = cu->StreamBeginCapture(g->stream, DSV4I_CU_STREAM_CAPTURE_MODE_THREAD_LOCAL);
  if (r != DSV4I_CUDA_SUCCESS)
    return dsv4i_gpu_fail(g, r, "cuStreamBeginCapture(bucket %d)", (int)gr->bucket[b]);
  dsv4_status st = dsv4i_gpu_note(g, record(user, g->stream));
  dsv4i_cugraph graph = NULL;
  /* the capture is ended in every case so the stream leaves capture mode */
  r = cu->StreamEndCapture(g->stream, &graph);
  if (st != DSV4_OK) {
    if (graph) cu->GraphDestroy(graph);
    return st;
  }
  if (r != DSV4I_CUDA_SUCCESS)
    return dsv4i_gpu_fail(g, r, "cuStreamEndCapture(bucket %d): the step did something a graph "
                                "cannot hold (a synchronisation or a pageable copy)",
                          (int)gr->bucket[b]);
  r = cu->GraphInstantiateWithFlags(&gr->exec[b], graph, 0);
  cu->GraphDestroy(graph);
  if (r != DSV4I_CUDA_SUCCESS) {
    gr->exec[b] = NULL;
    return dsv4i_gpu_fail(g, r, "cuGraphInstantiateWithFlags(bucket %d)", (int)gr->bucket[b]);
  }
  gr->captures++;
  return DSV4_OK;
}

dsv4_status dsv4i_gpu_graphs_run(dsv4i_gpu *g, dsv4i_gpu_graphs *gr, int32_t b,
                                 dsv4i_gpu_record_fn record, void *user) {
  if (b < 0 || b >= gr->n_buckets)
    return dsv4i_error(DSV4_ERR_INVALID_ARG, "graph bucket %d of %d", (int)b, (int)gr->n_buckets);
  dsv4_status st = dsv4i_gpu_enter(g);
  if (st != DSV4_OK) return st;
  if (!gr->exec[b]) {
    st = capture(g, gr, b, record, user);
    if (st != DSV4_OK) return st;
  }
  dsv4i_cures r = g->dev.cu->GraphLaunch(gr->exec[b], g->stream);
  if (r != DSV4I_CUDA_SUCCESS)
    return dsv4i_gpu_fail(g, r, "cuGraphLaunch(bucket %d)", (int)gr->bucket[b]);
  return DSV4_OK;
}

void dsv4i_gpu_graphs_free(dsv4i_gpu *g, dsv4i_gpu_graphs *gr) {
  if (g->dev.cu)
    for (int32_t i = 0; i < gr->n_buckets; i++)
      if (gr->exec[i]) g->dev.cu->GraphExecDestroy(gr->exec[i]);
  memset(gr, 0, sizeof *gr);
}
