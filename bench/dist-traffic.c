/*
 * dsv4-dist-traffic: the traffic of a distributed engine, measured. Run under
 * mpirun with TP x PP ranks (internal tool: reads the engine's counters):
 *
 *   mpirun -np 4 dsv4-dist-traffic MODEL_DIR TP PP [BATCH] [STEPS]
 *
 * Every rank creates its engine (CPU backend), prefills BATCH sequences with
 * a 16-token prompt each, then runs STEPS batched greedy decode steps. Rank 0
 * prints, per rank, the decode steps' stage-to-stage payload messages and
 * bytes and TP all-reduces (differences of the counters over the decode
 * steps, divided by STEPS), and the planner's figure for the same step from
 * dsv4i_payload_bytes (the size the planner budgets per micro-batch and
 * stage boundary). bench/RESULTS.md §9 has the command and the numbers.
 */
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "dist/payload.h"
#include "dsv4/dsv4.h"
#include "engine/dist.h"
#include "engine/engine.h"

#define CHECK(call)                                                                         \
  do {                                                                                      \
    dsv4_status st_ = (call);                                                               \
    if (st_) {                                                                              \
      fprintf(stderr, "rank %d: %s: %s\n", rank, #call, dsv4_last_error());                \
      MPI_Abort(MPI_COMM_WORLD, 1);                                                         \
    }                                                                                       \
  } while (0)

int main(int argc, char **argv) {
  MPI_Init(&argc, &argv);
  int rank = 0, world = 0;
  MPI_Comm comm;
  MPI_Comm_dup(MPI_COMM_WORLD, &comm);
  MPI_Comm_rank(comm, &rank);
  MPI_Comm_size(comm, &world);
  if (argc < 4) {
    if (!rank) fprintf(stderr, "usage: mpirun -np N %s MODEL_DIR TP PP [BATCH] [STEPS]\n", argv[0]);
    MPI_Finalize();
    return 2;
  }
  const int32_t tp = atoi(argv[2]), pp = atoi(argv[3]);
  const int32_t batch = argc > 4 ? atoi(argv[4]) : 4, steps = argc > 5 ? atoi(argv[5]) : 8;
  if (batch < 1 || batch > 64 || steps < 1) {
    if (!rank) fprintf(stderr, "BATCH in 1..64, STEPS >= 1\n");
    MPI_Finalize();
    return 2;
  }
  dsv4_engine_params p;
  CHECK(dsv4_engine_params_init(&p, sizeof p));
  p.max_sequences = batch;
  p.max_context = 256;
  p.n_threads = 1;
  p.mpi_comm = &comm;
  p.tp_size = tp;
  p.pp_size = pp;
  dsv4_engine *e = NULL;
  CHECK(dsv4_engine_create_from_dir(argv[1], &p, &e));
  int64_t ids[64];
  int32_t tok[64], prompt[16];
  for (int32_t b = 0; b < batch; b++) {
    for (int32_t i = 0; i < 16; i++) prompt[i] = 3 + (b * 131 + i * 29) % 500;
    CHECK(dsv4_engine_seq_create(e, &ids[b]));
    CHECK(dsv4_engine_prefill(e, ids[b], prompt, 16, NULL, NULL, &tok[b]));
  }
  dsv4i_dist_info a, b;
  dsv4i_dist_get_info(e->dist, &a);
  for (int32_t s = 0; s < steps; s++) CHECK(dsv4_engine_decode(e, batch, ids, tok, NULL, NULL, tok));
  dsv4i_dist_get_info(e->dist, &b);
  /* rank 0 gathers and prints every rank's per-step figures */
  int64_t mine[6] = {b.stage,
                     b.tp_rank,
                     b.steps - a.steps,
                     b.payload_msgs - a.payload_msgs,
                     b.payload_bytes - a.payload_bytes,
                     b.allreduce_calls - a.allreduce_calls};
  int64_t *all = malloc(sizeof mine * (size_t)world);
  MPI_Gather(mine, 6, MPI_INT64_T, all, 6, MPI_INT64_T, 0, comm);
  if (!rank) {
    const dsv4i_config *c = e->cfg;
    printf("model %s: %d layers, dim %d, hc %d; TP %d x PP %d; batch %d, %d decode steps\n",
           argv[1], (int)c->n_layers, (int)c->dim, (int)c->hc_mult, (int)tp, (int)pp, (int)batch,
           (int)steps);
    printf("rank stage tp  steps/decode  payload msgs/step  payload bytes/step  all-reduces/step\n");
    for (int r = 0; r < world; r++) {
      const int64_t *v = all + 6 * r;
      printf("%4d %5lld %2lld  %12.2f  %17.2f  %18.1f  %16.2f\n", r, (long long)v[0],
             (long long)v[1], (double)v[2] / steps, (double)v[3] / steps, (double)v[4] / steps,
             (double)v[5] / steps);
    }
    /* the planner's stage-to-stage figure for this step: one payload per boundary */
    const int32_t n_engram = e->n_engram_cols;
    printf("planner: dsv4i_payload_bytes(n_tok %d, n_out %d, hc %d, dim %d, Engram columns %d "
           "or 0) = %llu or %llu bytes per boundary and TP rank\n",
           (int)batch, (int)batch, (int)c->hc_mult, (int)c->dim, (int)n_engram,
           (unsigned long long)dsv4i_payload_bytes(batch, batch, c->hc_mult, c->dim, n_engram),
           (unsigned long long)dsv4i_payload_bytes(batch, batch, c->hc_mult, c->dim, 0));
  }
  free(all);
  dsv4_engine_free(e);
  MPI_Comm_free(&comm);
  MPI_Finalize();
  return 0;
}
