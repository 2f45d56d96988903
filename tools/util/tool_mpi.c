/* The tools under mpirun (tool_mpi.h). Built with MPI when the library's build found it
 * (TOOL_HAVE_MPI); without, a topology of more than one rank is refused. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "tool_mpi.h"
#include "tool_util.h"

#if TOOL_HAVE_MPI
#include <mpi.h>
static MPI_Comm g_comm;
#endif

/* a positive count from the environment, 0 when unset */
static long env_count(const char *name) {
  const char *v = getenv(name);
  char *end;
  long n = v && *v ? strtol(v, &end, 10) : 0;
  return v && *v && !*end && n > 0 ? n : 0;
}

int tool_mpi_start(const char *tool, int *argc, char ***argv, int32_t tp, int32_t pp,
                   tool_mpi *out) {
  memset(out, 0, sizeof *out);
  out->world = 1;
  if (tp <= 0) tp = (int32_t)env_count("DSV4_TP");
  if (pp <= 0) pp = (int32_t)env_count("DSV4_PP");
  long launched = env_count("OMPI_COMM_WORLD_SIZE");
  if (!launched) launched = env_count("PMI_SIZE");
  out->tp = tp > 0 ? tp : 1;
  out->pp = pp > 0 ? pp : 1;
  if (launched <= 1 && out->tp * out->pp == 1) return TOOL_EXIT_OK; /* one process */
#if TOOL_HAVE_MPI
  int inited = 0;
  MPI_Initialized(&inited);
  if (!inited) MPI_Init(argc, argv);
  MPI_Comm_dup(MPI_COMM_WORLD, &g_comm);
  MPI_Comm_rank(g_comm, &out->rank);
  MPI_Comm_size(g_comm, &out->world);
  if (pp <= 0) out->pp = out->world / out->tp > 0 ? out->world / out->tp : 1;
  if ((int64_t)out->tp * out->pp != out->world) {
    if (out->rank == 0)
      fprintf(stderr, "%s: TP %d x PP %d needs %d ranks, the job has %d (run it as mpirun -np %d "
              "%s --tp %d --pp %d ...)\n", tool, (int)out->tp, (int)out->pp,
              (int)(out->tp * out->pp), out->world, (int)(out->tp * out->pp), tool, (int)out->tp,
              (int)out->pp);
    tool_mpi_end(out);
    return TOOL_EXIT_USAGE;
  }
  out->comm = &g_comm;
  return TOOL_EXIT_OK;
#else
  (void)argc, (void)argv;
  fprintf(stderr, "%s: TP %d x PP %d: this build has no MPI (Open MPI's libopenmpi-dev was "
          "missing at configure time)\n", tool, (int)out->tp, (int)out->pp);
  return TOOL_EXIT_USAGE;
#endif
}

void tool_mpi_params(const tool_mpi *m, dsv4_engine_params *p) {
  if (!m->comm) return;
  p->mpi_comm = m->comm;
  p->tp_size = m->tp;
  p->pp_size = m->pp;
}

void tool_mpi_allgather_f64(const tool_mpi *m, double v, double *all) {
#if TOOL_HAVE_MPI
  if (m->comm) {
    MPI_Allgather(&v, 1, MPI_DOUBLE, all, 1, MPI_DOUBLE, g_comm);
    return;
  }
#endif
  (void)m;
  all[0] = v;
}

void tool_mpi_end(tool_mpi *m) {
#if TOOL_HAVE_MPI
  int inited = 0, done = 0;
  MPI_Initialized(&inited);
  MPI_Finalized(&done);
  if (inited && !done) {
    if (m->comm) MPI_Comm_free(&g_comm);
    MPI_Finalize();
  }
#endif
  m->comm = NULL;
}
