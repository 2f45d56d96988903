/*
 * Communication between the ranks of a distributed engine (design.md §6;
 * docs/distributed.md "Faults"): a private duplicate of the application's MPI
 * communicator whose every wait is bounded.
 *
 * - MPI errors return (MPI_ERRORS_RETURN on the duplicate) and become
 *   DSV4_ERR_RANK_FAILED with MPI's error text; nothing aborts the process.
 * - Every wait (point-to-point, collective) polls a non-blocking request
 *   until a deadline of timeout_ms; past it the call returns
 *   DSV4_ERR_RANK_FAILED naming the peer(s) and what was awaited. A rank that
 *   fails or stalls is therefore reported on every other rank within the
 *   timeout after they entered the call, never a hang.
 * - After a failure the communicator is sticky-failed: every later call
 *   returns DSV4_ERR_RANK_FAILED with the first message (message order on a
 *   communicator cannot be trusted after an abandoned wait).
 * - dsv4i_comm_agree_status() turns one rank's local failure into a clear
 *   status on every rank; dsv4i_comm_agree() checks that the ranks hold the
 *   same named values (checkpoint, params, topology).
 *
 * The all-reduce is deterministic and identical on every rank: it gathers
 * the partial sums and adds them in rank order (0, 1, ...) on every rank,
 * whatever algorithm the MPI library would pick. Replicated computations
 * downstream (router, indexer top-k) therefore see the same bits on every
 * TP rank.
 *
 * Built without MPI, dsv4i_comm_create() returns DSV4_ERR_UNSUPPORTED.
 * A dsv4i_comm is used by one thread at a time.
 */
#ifndef DSV4I_DIST_COMM_H
#define DSV4I_DIST_COMM_H

#include <stddef.h>
#include <stdint.h>

#include "base/base.h"

typedef struct dsv4i_comm dsv4i_comm;

/** Traffic counters (bench/RESULTS.md figures come from here). */
typedef struct dsv4i_comm_stats {
  int64_t allreduce_calls, allreduce_bytes; /**< bytes of this rank's contribution */
  int64_t sent_msgs, sent_bytes;
  int64_t recv_msgs, recv_bytes;
  int64_t wait_ns;                          /**< time spent waiting in calls */
} dsv4i_comm_stats;

/** Default bound of one wait. */
#define DSV4I_COMM_TIMEOUT_MS_DEFAULT 300000

/**
 * Duplicate the application's communicator (mpi_comm points to an MPI_Comm)
 * and set its error handler to return. Collective over that communicator.
 * MPI must be initialised (DSV4_ERR_INVALID_ARG otherwise). timeout_ms > 0.
 * @return DSV4_OK; DSV4_ERR_UNSUPPORTED (built without MPI);
 *         DSV4_ERR_INVALID_ARG; DSV4_ERR_OUT_OF_MEMORY; DSV4_ERR_RANK_FAILED.
 */
dsv4_status dsv4i_comm_create(void *mpi_comm, int32_t timeout_ms, dsv4i_comm **out);

/**
 * This process's rank and the size of the application's communicator (mpi_comm
 * points to an MPI_Comm), without communicating (not collective).
 * @return DSV4_OK; DSV4_ERR_UNSUPPORTED (built without MPI); DSV4_ERR_INVALID_ARG
 *         (MPI not initialised, NULL or MPI_COMM_NULL).
 */
dsv4_status dsv4i_comm_place(void *mpi_comm, int32_t *rank, int32_t *size);

/** A sub-communicator of the ranks with the same color, ordered by key (collective). */
dsv4_status dsv4i_comm_split(dsv4i_comm *c, int32_t color, int32_t key, dsv4i_comm **out);

/** Release (local). A failed communicator is abandoned, not freed through MPI. NULL ok. */
void dsv4i_comm_free(dsv4i_comm *c);

int32_t dsv4i_comm_rank(const dsv4i_comm *c);
int32_t dsv4i_comm_size(const dsv4i_comm *c);
/** The sticky status (DSV4_OK while healthy). */
dsv4_status dsv4i_comm_failed(const dsv4i_comm *c);
/** Mark failed with the thread's current error (a local failure the ranks cannot recover). */
void dsv4i_comm_fail(dsv4i_comm *c, dsv4_status st);
void dsv4i_comm_stats_get(const dsv4i_comm *c, dsv4i_comm_stats *out);
int32_t dsv4i_comm_timeout_ms(const dsv4i_comm *c);

/**
 * Failure notices (docs/distributed.md "Faults"): with a watch tag set, every
 * wait on c also looks for a notice with that tag from any rank of c. One ends
 * the wait at once with DSV4_ERR_RANK_FAILED naming the failed rank, its status
 * and message, and c is failed (sticky). tag < 0 (the default): no watch.
 */
void dsv4i_comm_watch(dsv4i_comm *c, int32_t tag);

/**
 * This rank failed on its own (status st, message = the thread's current
 * error) while its partners on c may wait for it: send every other rank of c
 * the notice "<who> failed <what>: <status>: <message>" on the watch tag, then
 * mark c failed. Bounded (small messages). The thread's error is left as it
 * was. DSV4_OK, or DSV4_ERR_RANK_FAILED when a notice could not be sent (the
 * partners then see the timeout).
 */
dsv4_status dsv4i_comm_notify_failure(dsv4i_comm *c, dsv4_status st, const char *who,
                                      const char *what);

/** Send bytes to peer (bounded wait until the buffer may be reused). */
dsv4_status dsv4i_comm_send(dsv4i_comm *c, int32_t peer, int32_t tag, const void *buf,
                            size_t bytes, const char *what);
/** Receive at most cap bytes from peer; *got = bytes received. A longer message is
 *  DSV4_ERR_RANK_MISMATCH. */
dsv4_status dsv4i_comm_recv(dsv4i_comm *c, int32_t peer, int32_t tag, void *buf, size_t cap,
                            size_t *got, const char *what);

/** Sum x[0..n) over the ranks, in place, identical bits on every rank (see above). */
dsv4_status dsv4i_comm_allreduce_f32(dsv4i_comm *c, float *x, size_t n);

/** all[r * bytes ..] = rank r's mine (collective). */
dsv4_status dsv4i_comm_allgather(dsv4i_comm *c, const void *mine, size_t bytes, void *all,
                                 const char *what);

/** Broadcast bytes from root (collective). */
dsv4_status dsv4i_comm_bcast(dsv4i_comm *c, int32_t root, void *buf, size_t bytes,
                             const char *what);

/**
 * Every rank contributes its local status of an operation (and, on failure,
 * the thread's current message). Returns on every rank: DSV4_OK when all
 * succeeded; on a failed rank its own status and message; on the others
 * DSV4_ERR_RANK_FAILED naming each failed rank with its status and message.
 * Collective. A status exchange that itself fails or times out gives
 * DSV4_ERR_RANK_FAILED.
 */
dsv4_status dsv4i_comm_agree_status(dsv4i_comm *c, dsv4_status local, const char *what);

/**
 * Check that every rank holds the same n named values (n and the names
 * included). DSV4_OK, or DSV4_ERR_RANK_MISMATCH on every rank with the same
 * message: the first differing name, rank 0's value and each differing
 * rank's value. Collective.
 */
dsv4_status dsv4i_comm_agree(dsv4i_comm *c, int32_t n, const char *const *names,
                             const uint64_t *values, const char *what);

#endif /* DSV4I_DIST_COMM_H */
