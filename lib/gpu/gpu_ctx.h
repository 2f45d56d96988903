/*
 * What one engine holds on its GPU: the device (primary context), the
 * kernel modules loaded once, its own stream and timing events, the device
 * memory pool sized from the engine's plan, the host-pinned pool (Engram
 * tables), the CUDA graphs of its batch-size buckets, and the sticky
 * device-lost state (style §4).
 *
 * Threads: handle-exclusive like the engine (one thread at a time, may
 * migrate): every entry point that talks to the driver first makes the
 * context current on the calling thread (dsv4i_gpu_enter).
 *
 * Sticky failure: a driver error that poisons the CUDA context (illegal
 * address, launch failure, ...; dsv4i_cu_fail maps them to
 * DSV4_ERR_DEVICE_LOST) marks the engine lost; every later call that
 * checks dsv4i_gpu_alive() returns DSV4_ERR_DEVICE_LOST with the first
 * message, until dsv4i_gpu_close(). The context is the device's primary
 * context, shared with every other engine on that device in the process
 * (and with cuBLASLt): a fault poisons it for them too, and each of them
 * turns lost on its own next driver call. Engines on other devices go on.
 *
 * Internal to lib/gpu and the CUDA backend.
 */
#ifndef DSV4I_GPU_CTX_H
#define DSV4I_GPU_CTX_H

#include "gpu/kernel_registry.h"

/** Device memory pool: one cuMemAlloc of the planned size, carved at
 * 256-byte alignment; no driver allocation after creation. */
typedef struct dsv4i_gpu_pool {
  dsv4i_cuptr base; /**< device address of the block (0: not created) */
  size_t size;      /**< bytes allocated */
  size_t used;      /**< bytes handed out (the high-water mark is `peak`) */
  size_t peak;      /**< largest `used` seen */
} dsv4i_gpu_pool;

/** Host-pinned pool: page-locked, mapped into the device's address space
 * (kernels read it through `dev`; copies from it are asynchronous). */
typedef struct dsv4i_gpu_hostpool {
  void *host;       /**< host address (NULL: not created) */
  dsv4i_cuptr dev;  /**< the same memory as the device sees it */
  size_t size, used;
} dsv4i_gpu_hostpool;

/** Records the work of one step on `stream` (kernel launches and async
 * copies only: no synchronisation, no allocation). */
typedef dsv4_status (*dsv4i_gpu_record_fn)(void *user, dsv4i_custream stream);

/** One captured step per batch-size bucket. */
typedef struct dsv4i_gpu_graphs {
  int32_t n_buckets;
  int32_t bucket[16];              /**< batch sizes, ascending */
  dsv4i_cugraphexec exec[16];      /**< NULL until first run of that bucket */
  int32_t captures;                /**< how many captures were made (tests) */
} dsv4i_gpu_graphs;

/** An engine's GPU. Zero-initialised = closed. */
typedef struct dsv4i_gpu {
  dsv4i_cuda_device dev;
  dsv4i_kreg kr;              /**< kernels, loaded once per engine */
  dsv4i_custream stream;      /**< the engine's compute stream (non-blocking) */
  dsv4i_cuevent ev_start, ev_stop; /**< step timing */
  dsv4i_gpu_pool pool;        /**< weights, KV pools, workspace (the plan's device bytes) */
  dsv4i_gpu_hostpool pinned;  /**< host-pinned pool (Engram tables, staging) */
  dsv4_status lost;           /**< DSV4_OK, or DSV4_ERR_DEVICE_LOST once sticky */
  char lost_msg[512];         /**< the message of the fault that made it lost */
} dsv4i_gpu;

/**
 * Open device `ordinal` for one engine: primary context, kernel modules,
 * a non-blocking stream and two timing events.
 * @param g [out] zeroed on failure (everything made so far released).
 * @return DSV4_OK; the statuses of dsv4i_cuda_device_open and dsv4i_kreg_load;
 *         DSV4_ERR_DEVICE (stream/event creation).
 */
dsv4_status dsv4i_gpu_open(int32_t ordinal, dsv4i_gpu *g);

/** Release everything (graphs are released by their owner first with
 * dsv4i_gpu_graphs_free). Safe on a zeroed or lost engine; the calling
 * thread's previous context is restored. */
void dsv4i_gpu_close(dsv4i_gpu *g);

/** Make g's context current on the calling thread.
 * @return DSV4_OK; DSV4_ERR_DEVICE_LOST (sticky); DSV4_ERR_DEVICE. */
dsv4_status dsv4i_gpu_enter(dsv4i_gpu *g);

/** DSV4_OK, or DSV4_ERR_DEVICE_LOST (message: the first fault) once lost. */
dsv4_status dsv4i_gpu_alive(const dsv4i_gpu *g);

/**
 * Record a driver failure on g: as dsv4i_cu_fail, and when the status is
 * DSV4_ERR_DEVICE_LOST the engine turns sticky-lost.
 */
dsv4_status dsv4i_gpu_fail(dsv4i_gpu *g, dsv4i_cures res, const char *call, ...)
    DSV4I_PRINTF(3, 4);

/** Keep a status a launcher returned: DSV4_ERR_DEVICE_LOST makes g lost. */
dsv4_status dsv4i_gpu_note(dsv4i_gpu *g, dsv4_status st);

/** Wait for g's stream. DSV4_OK; DSV4_ERR_DEVICE_LOST (sticky); DSV4_ERR_DEVICE. */
dsv4_status dsv4i_gpu_sync(dsv4i_gpu *g);

/* ---- pools ------------------------------------------------------------- */

/**
 * Create g's device pool of `bytes` (the plan's figure). Free device memory
 * is checked first: DSV4_ERR_DOES_NOT_FIT with the numbers (wanted, free,
 * total) when it is short, nothing allocated.
 * @return DSV4_OK; DSV4_ERR_DOES_NOT_FIT; DSV4_ERR_INVALID_ARG (bytes 0 or
 *         a pool exists); DSV4_ERR_DEVICE.
 */
dsv4_status dsv4i_gpu_pool_create(dsv4i_gpu *g, size_t bytes);

/**
 * Carve `bytes` (256-byte aligned) from the pool; no driver call.
 * @param what names the buffer in the message.
 * @return DSV4_OK; DSV4_ERR_INTERNAL when the plan's pool is too small (a
 *         planning bug: the message names the buffer and the numbers).
 */
dsv4_status dsv4i_gpu_pool_take(dsv4i_gpu_pool *p, size_t bytes, const char *what,
                                dsv4i_cuptr *out);

/** The pool's fill level, to hand back per-step scratch with _reset. */
static inline size_t dsv4i_gpu_pool_mark(const dsv4i_gpu_pool *p) { return p->used; }
static inline void dsv4i_gpu_pool_reset(dsv4i_gpu_pool *p, size_t mark) { p->used = mark; }

/**
 * Create g's host-pinned pool of `bytes`: page-locked, portable, mapped
 * (cuMemHostAlloc DEVICEMAP), with its device address.
 * @return DSV4_OK; DSV4_ERR_INVALID_ARG; DSV4_ERR_DOES_NOT_FIT (the driver
 *         could not pin that much; numbers in the message); DSV4_ERR_DEVICE.
 */
dsv4_status dsv4i_gpu_hostpool_create(dsv4i_gpu *g, size_t bytes);

/** Carve `bytes` (256-byte aligned) from the pinned pool: host and device
 * address of the same memory. DSV4_OK; DSV4_ERR_INTERNAL (pool too small). */
dsv4_status dsv4i_gpu_hostpool_take(dsv4i_gpu_hostpool *p, size_t bytes, const char *what,
                                    void **host, dsv4i_cuptr *dev);

/* ---- graphs ------------------------------------------------------------ */

/**
 * Set the buckets (ascending batch sizes, 1..16 of them); nothing captured.
 * @return DSV4_OK; DSV4_ERR_INVALID_ARG (not ascending, <= 0, too many).
 */
dsv4_status dsv4i_gpu_graphs_init(dsv4i_gpu_graphs *gr, const int32_t *buckets, int32_t n);

/** The index of the smallest bucket >= n_rows, or -1 when none holds it. */
int32_t dsv4i_gpu_graphs_bucket(const dsv4i_gpu_graphs *gr, int32_t n_rows);

/**
 * Run bucket `b` on g's stream: the first time, `record` is captured into a
 * graph (thread-local capture mode) and instantiated; every time, the graph
 * is launched. `record` must record the same work for the same bucket each
 * time (pointers into the pools, sizes of the bucket); inputs change
 * through the memory it reads (e.g. pinned staging copied in by the graph).
 * Asynchronous: nothing waits for the device.
 * @return DSV4_OK; DSV4_ERR_INVALID_ARG (b out of range); the status of
 *         `record` (capture abandoned, nothing kept); DSV4_ERR_DEVICE_LOST;
 *         DSV4_ERR_DEVICE.
 */
dsv4_status dsv4i_gpu_graphs_run(dsv4i_gpu *g, dsv4i_gpu_graphs *gr, int32_t b,
                                 dsv4i_gpu_record_fn record, void *user);

/** Destroy every instantiated graph (context of g current). */
void dsv4i_gpu_graphs_free(dsv4i_gpu *g, dsv4i_gpu_graphs *gr);

#endif /* DSV4I_GPU_CTX_H */
