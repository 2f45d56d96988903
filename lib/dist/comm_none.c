/*
 * comm.h in a build without MPI: creating a communicator is refused, so no
 * dsv4i_comm ever exists and the other entries are never reached with one.
 */
#include "dist/comm.h"

static dsv4_status no_mpi(void) {
  return dsv4i_error(DSV4_ERR_UNSUPPORTED,
                     "distributed engine: this libdsv4 was built without MPI (install Open MPI, "
                     "e.g. Debian's libopenmpi-dev, and rebuild with -Dmpi=enabled)");
}

dsv4_status dsv4i_comm_create(void *mpi_comm, int32_t timeout_ms, dsv4i_comm **out) {
  (void)mpi_comm;
  (void)timeout_ms;
  *out = NULL;
  return no_mpi();
}
dsv4_status dsv4i_comm_place(void *mpi_comm, int32_t *rank, int32_t *size) {
  (void)mpi_comm;
  *rank = 0;
  *size = 1;
  return no_mpi();
}
dsv4_status dsv4i_comm_split(dsv4i_comm *c, int32_t color, int32_t key, dsv4i_comm **out) {
  (void)c, (void)color, (void)key;
  *out = NULL;
  return no_mpi();
}
void dsv4i_comm_free(dsv4i_comm *c) { (void)c; }
int32_t dsv4i_comm_rank(const dsv4i_comm *c) { return (void)c, 0; }
int32_t dsv4i_comm_size(const dsv4i_comm *c) { return (void)c, 1; }
dsv4_status dsv4i_comm_failed(const dsv4i_comm *c) { return (void)c, DSV4_ERR_UNSUPPORTED; }
void dsv4i_comm_fail(dsv4i_comm *c, dsv4_status st) { (void)c, (void)st; }
int32_t dsv4i_comm_timeout_ms(const dsv4i_comm *c) { return (void)c, 0; }
void dsv4i_comm_stats_get(const dsv4i_comm *c, dsv4i_comm_stats *out) {
  (void)c;
  *out = (dsv4i_comm_stats){0};
}
dsv4_status dsv4i_comm_send(dsv4i_comm *c, int32_t peer, int32_t tag, const void *buf,
                            size_t bytes, const char *what) {
  (void)c, (void)peer, (void)tag, (void)buf, (void)bytes, (void)what;
  return no_mpi();
}
dsv4_status dsv4i_comm_recv(dsv4i_comm *c, int32_t peer, int32_t tag, void *buf, size_t cap,
                            size_t *got, const char *what) {
  (void)c, (void)peer, (void)tag, (void)buf, (void)cap, (void)what;
  *got = 0;
  return no_mpi();
}
dsv4_status dsv4i_comm_allreduce_f32(dsv4i_comm *c, float *x, size_t n) {
  (void)c, (void)x, (void)n;
  return no_mpi();
}
dsv4_status dsv4i_comm_allgather(dsv4i_comm *c, const void *mine, size_t bytes, void *all,
                                 const char *what) {
  (void)c, (void)mine, (void)bytes, (void)all, (void)what;
  return no_mpi();
}
dsv4_status dsv4i_comm_bcast(dsv4i_comm *c, int32_t root, void *buf, size_t bytes,
                             const char *what) {
  (void)c, (void)root, (void)buf, (void)bytes, (void)what;
  return no_mpi();
}
dsv4_status dsv4i_comm_agree_status(dsv4i_comm *c, dsv4_status local, const char *what) {
  (void)c, (void)what;
  return local ? local : no_mpi();
}
dsv4_status dsv4i_comm_agree(dsv4i_comm *c, int32_t n, const char *const *names,
                             const uint64_t *values, const char *what) {
  (void)c, (void)n, (void)names, (void)values, (void)what;
  return no_mpi();
}

void dsv4i_comm_watch(dsv4i_comm *c, int32_t tag) {
  (void)c;
  (void)tag;
}

dsv4_status dsv4i_comm_notify_failure(dsv4i_comm *c, dsv4_status st, const char *who,
                                      const char *what) {
  (void)c;
  (void)st;
  (void)who;
  (void)what;
  return DSV4_OK;
}
