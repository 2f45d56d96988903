/* An engine's GPU: context, modules, stream, events, pools, sticky loss. */
#include "gpu/gpu_ctx.h"

#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#define POOL_ALIGN 256

static void mark_lost(dsv4i_gpu *g) {
  if (g->lost == DSV4_ERR_DEVICE_LOST) return;
  g->lost = DSV4_ERR_DEVICE_LOST;
  snprintf(g->lost_msg, sizeof g->lost_msg, "%s", dsv4i_error_message());
}

dsv4_status dsv4i_gpu_note(dsv4i_gpu *g, dsv4_status st) {
  if (st == DSV4_ERR_DEVICE_LOST) mark_lost(g);
  return st;
}

dsv4_status dsv4i_gpu_fail(dsv4i_gpu *g, dsv4i_cures res, const char *call, ...) {
  char what[512];
  va_list ap;
  va_start(ap, call);
  vsnprintf(what, sizeof what, call, ap);
  va_end(ap);
  return dsv4i_gpu_note(g, dsv4i_cu_fail(g->dev.cu, res, "%s", what));
}

dsv4_status dsv4i_gpu_alive(const dsv4i_gpu *g) {
  if (g->lost == DSV4_ERR_DEVICE_LOST)
    return dsv4i_error(DSV4_ERR_DEVICE_LOST,
                       "CUDA device %d (%s) was lost earlier and this engine cannot continue; "
                       "free it (first fault: %s)",
                       (int)g->dev.ordinal, g->dev.name, g->lost_msg);
  return DSV4_OK;
}

dsv4_status dsv4i_gpu_enter(dsv4i_gpu *g) {
  dsv4_status st = dsv4i_gpu_alive(g);
  if (st != DSV4_OK) return st;
  dsv4i_cures r = g->dev.cu->CtxSetCurrent(g->dev.ctx);
  if (r != DSV4I_CUDA_SUCCESS)
    return dsv4i_gpu_fail(g, r, "cuCtxSetCurrent(device %d)", (int)g->dev.ordinal);
  return DSV4_OK;
}

dsv4_status dsv4i_gpu_open(int32_t ordinal, dsv4i_gpu *g) {
  memset(g, 0, sizeof *g);
  dsv4_status st = dsv4i_cuda_device_open(ordinal, &g->dev);
  if (st != DSV4_OK) return st;
  st = dsv4i_kreg_load(&g->dev, &g->kr);
  if (st != DSV4_OK) goto fail;
  const dsv4i_cu *cu = g->dev.cu;
  dsv4i_cures r = cu->StreamCreate(&g->stream, DSV4I_CU_STREAM_NON_BLOCKING);
  if (r != DSV4I_CUDA_SUCCESS) { st = dsv4i_cu_fail(cu, r, "cuStreamCreate"); goto fail; }
  r = cu->EventCreate(&g->ev_start, DSV4I_CU_EVENT_DEFAULT);
  if (r == DSV4I_CUDA_SUCCESS) r = cu->EventCreate(&g->ev_stop, DSV4I_CU_EVENT_DEFAULT);
  if (r != DSV4I_CUDA_SUCCESS) { st = dsv4i_cu_fail(cu, r, "cuEventCreate"); goto fail; }
  return DSV4_OK;
fail:
  dsv4i_gpu_close(g);
  return st;
}

void dsv4i_gpu_close(dsv4i_gpu *g) {
  const dsv4i_cu *cu = g->dev.cu;
  if (cu) {
    /* after a sticky fault these fail too; there is nothing else to undo */
    cu->CtxSetCurrent(g->dev.ctx);
    if (g->stream) cu->StreamSynchronize(g->stream);
    if (g->ev_start) cu->EventDestroy(g->ev_start);
    if (g->ev_stop) cu->EventDestroy(g->ev_stop);
    if (g->stream) cu->StreamDestroy(g->stream);
    if (g->pool.base) cu->MemFree(g->pool.base);
    if (g->pinned.host) cu->MemFreeHost(g->pinned.host);
    dsv4i_kreg_unload(&g->kr);
    dsv4i_cuda_device_close(&g->dev);
  }
  memset(g, 0, sizeof *g);
}

dsv4_status dsv4i_gpu_sync(dsv4i_gpu *g) {
  dsv4_status st = dsv4i_gpu_alive(g);
  if (st != DSV4_OK) return st;
  dsv4i_cures r = g->dev.cu->StreamSynchronize(g->stream);
  if (r != DSV4I_CUDA_SUCCESS) return dsv4i_gpu_fail(g, r, "cuStreamSynchronize(engine stream)");
  return DSV4_OK;
}

/* ---- pools ----------------------------------------------------------------- */

static double gib(size_t b) { return (double)b / (1024.0 * 1024.0 * 1024.0); }

dsv4_status dsv4i_gpu_pool_create(dsv4i_gpu *g, size_t bytes) {
  dsv4_status st = dsv4i_gpu_enter(g);
  if (st != DSV4_OK) return st;
  if (bytes == 0 || g->pool.base)
    return dsv4i_error(DSV4_ERR_INVALID_ARG, "device pool: %s",
                       bytes == 0 ? "size 0" : "already created");
  size_t free_b = 0, total_b = 0;
  dsv4i_cures r = g->dev.cu->MemGetInfo(&free_b, &total_b);
  if (r != DSV4I_CUDA_SUCCESS) return dsv4i_gpu_fail(g, r, "cuMemGetInfo");
  if (bytes > free_b)
    return dsv4i_error(DSV4_ERR_DOES_NOT_FIT,
                       "device pool: the plan needs %zu bytes (%.2f GiB) on device %d (%s), which "
                       "has %zu bytes (%.2f GiB) free of %zu (%.2f GiB); nothing was allocated",
                       bytes, gib(bytes), (int)g->dev.ordinal, g->dev.name, free_b, gib(free_b),
                       total_b, gib(total_b));
  r = g->dev.cu->MemAlloc(&g->pool.base, bytes);
  if (r == DSV4I_CUDA_ERROR_OUT_OF_MEMORY)
    return dsv4i_error(DSV4_ERR_DOES_NOT_FIT,
                       "device pool: cuMemAlloc(%zu bytes, %.2f GiB) ran out of memory on device %d "
                       "(%zu bytes were reported free); nothing was allocated",
                       bytes, gib(bytes), (int)g->dev.ordinal, free_b);
  if (r != DSV4I_CUDA_SUCCESS) {
    g->pool.base = 0;
    return dsv4i_gpu_fail(g, r, "cuMemAlloc(device pool, %zu bytes)", bytes);
  }
  g->pool.size = bytes;
  g->pool.used = g->pool.peak = 0;
  return DSV4_OK;
}

static int carve(size_t size, size_t *used, size_t bytes, size_t *offset) {
  size_t off = (*used + POOL_ALIGN - 1) / POOL_ALIGN * POOL_ALIGN;
  if (off < *used || off > size || bytes > size - off) return 0;
  *offset = off;
  *used = off + bytes;
  return 1;
}

dsv4_status dsv4i_gpu_pool_take(dsv4i_gpu_pool *p, size_t bytes, const char *what,
                                dsv4i_cuptr *out) {
  size_t off = 0;
  if (!p->base || !carve(p->size, &p->used, bytes, &off))
    return dsv4i_error(DSV4_ERR_INTERNAL,
                       "device pool: %s needs %zu bytes but the planned pool has %zu of %zu left "
                       "(a planning error)",
                       what, bytes, p->size - p->used, p->size);
  if (p->used > p->peak) p->peak = p->used;
  *out = p->base + off;
  return DSV4_OK;
}

dsv4_status dsv4i_gpu_hostpool_create(dsv4i_gpu *g, size_t bytes) {
  dsv4_status st = dsv4i_gpu_enter(g);
  if (st != DSV4_OK) return st;
  if (bytes == 0 || g->pinned.host)
    return dsv4i_error(DSV4_ERR_INVALID_ARG, "pinned pool: %s",
                       bytes == 0 ? "size 0" : "already created");
  void *h = NULL;
  dsv4i_cures r = g->dev.cu->MemHostAlloc(
      &h, bytes, DSV4I_CU_MEMHOSTALLOC_PORTABLE | DSV4I_CU_MEMHOSTALLOC_DEVICEMAP);
  if (r == DSV4I_CUDA_ERROR_OUT_OF_MEMORY)
    return dsv4i_error(DSV4_ERR_DOES_NOT_FIT,
                       "pinned pool: the driver could not page-lock %zu bytes (%.2f GiB) of host "
                       "memory; nothing was allocated",
                       bytes, gib(bytes));
  if (r != DSV4I_CUDA_SUCCESS) return dsv4i_gpu_fail(g, r, "cuMemHostAlloc(%zu bytes)", bytes);
  dsv4i_cuptr d = 0;
  r = g->dev.cu->MemHostGetDevicePointer(&d, h, 0);
  if (r != DSV4I_CUDA_SUCCESS) {
    g->dev.cu->MemFreeHost(h);
    return dsv4i_gpu_fail(g, r, "cuMemHostGetDevicePointer(pinned pool)");
  }
  g->pinned.host = h;
  g->pinned.dev = d;
  g->pinned.size = bytes;
  g->pinned.used = 0;
  return DSV4_OK;
}

dsv4_status dsv4i_gpu_hostpool_take(dsv4i_gpu_hostpool *p, size_t bytes, const char *what,
                                    void **host, dsv4i_cuptr *dev) {
  size_t off = 0;
  if (!p->host || !carve(p->size, &p->used, bytes, &off))
    return dsv4i_error(DSV4_ERR_INTERNAL,
                       "pinned pool: %s needs %zu bytes but the pool has %zu of %zu left", what,
                       bytes, p->size - p->used, p->size);
  *host = (char *)p->host + off;
  *dev = p->dev + off;
  return DSV4_OK;
}
