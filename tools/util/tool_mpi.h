/*
 * The tools under mpirun (dsv4-generate, dsv4-bench): one process per rank
 * of a distributed engine (docs/distributed.md "The tools under mpirun").
 * TP and PP come from the tool's --tp / --pp options, else the environment
 * variables DSV4_TP / DSV4_PP; under a launcher (Open MPI's mpirun sets
 * OMPI_COMM_WORLD_SIZE, MPICH / Slurm PMI_SIZE) PP defaults to the job's
 * size over TP. Every rank makes the same library calls and gets the same
 * tokens; rank 0 prints the results, the other ranks print only errors.
 */
#ifndef DSV4_TOOL_MPI_H
#define DSV4_TOOL_MPI_H

#include <stdint.h>

#include "dsv4/dsv4.h"

/** One process's place in the job; comm NULL for one process. */
typedef struct tool_mpi {
  int rank, world;
  int32_t tp, pp;
  void *comm; /**< MPI_Comm * (a duplicate of MPI_COMM_WORLD) or NULL */
} tool_mpi;

/**
 * Join the job when this process runs under an MPI launcher or tp x pp > 1
 * (tp, pp: the options' values, 0 = not given). Returns 0, or an exit status
 * (TOOL_EXIT_USAGE: a topology that does not match the job, MPI not built in)
 * after printing why.
 */
int tool_mpi_start(const char *tool, int *argc, char ***argv, int32_t tp, int32_t pp,
                   tool_mpi *out);

/** The engine params of this rank: mpi_comm, tp_size, pp_size (unchanged for one process). */
void tool_mpi_params(const tool_mpi *m, dsv4_engine_params *p);

/** all[r] := rank r's v for every rank r of the job (collective; one process: all[0] = v). */
void tool_mpi_allgather_f64(const tool_mpi *m, double v, double *all);

/** Leave the job (MPI_Finalize); a no-op for one process. */
void tool_mpi_end(tool_mpi *m);

#endif
