/* dsv4-bench: machine facts (CPU, memory, LLC, load) and copy bandwidth. */
#include <math.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/utsname.h>
#include <unistd.h>

#include "bench.h"

void machine_probe(machine *m) {
  memset(m, 0, sizeof *m);
  m->nproc = sysconf(_SC_NPROCESSORS_ONLN);
  snprintf(m->cpu_model, sizeof m->cpu_model, "unknown");
  char *ci = read_file("/proc/cpuinfo", NULL);
  if (ci) {
    char *p = strstr(ci, "model name");
    if (p && (p = strchr(p, ':'))) {
      p++;
      while (*p == ' ' || *p == '\t') p++;
      size_t n = strcspn(p, "\n");
      if (n >= sizeof m->cpu_model) n = sizeof m->cpu_model - 1;
      memcpy(m->cpu_model, p, n);
      m->cpu_model[n] = 0;
    }
    free(ci);
  }
  char *mi = read_file("/proc/meminfo", NULL);
  if (mi) {
    long long kb;
    char *p = strstr(mi, "MemTotal:");
    if (p && sscanf(p, "MemTotal: %lld kB", &kb) == 1) m->mem_total = (int64_t)kb * 1024;
    free(mi);
  }
#ifdef _SC_LEVEL3_CACHE_SIZE
  long l3 = sysconf(_SC_LEVEL3_CACHE_SIZE);
  if (l3 > 0) m->llc_bytes = l3;
#endif
  if (!m->llc_bytes) {
    char *s = read_file("/sys/devices/system/cpu/cpu0/cache/index3/size", NULL);
    long long v;
    char unit = 0;
    if (s && sscanf(s, "%lld%c", &v, &unit) >= 1)
      m->llc_bytes = v * (unit == 'K' ? 1024 : unit == 'M' ? 1048576 : 1);
    free(s);
  }
  struct utsname u;
  if (!uname(&u)) snprintf(m->kernel, sizeof m->kernel, "%s %s %s", u.sysname, u.release, u.machine);
}

typedef struct bw_job {
  char *dst;
  const char *src;
  size_t n;
} bw_job;

static void *bw_worker(void *arg) {
  bw_job *j = arg;
  memcpy(j->dst, j->src, j->n);
  return NULL;
}

/* Best of `reps` timed copies of `bytes` by `threads` threads (each its own
 * slice); GB/s counted as (bytes read + bytes written) / time, the STREAM
 * "copy" convention. Returns 0 when the buffers cannot be allocated. */
double copy_bandwidth(int64_t bytes, int threads, int reps) {
  char *src = malloc((size_t)bytes), *dst = malloc((size_t)bytes);
  if (!src || !dst) {
    free(src);
    free(dst);
    return 0;
  }
  memset(src, 1, (size_t)bytes); /* first touch: page in both buffers */
  memset(dst, 2, (size_t)bytes);
  if (threads < 1) threads = 1;
  pthread_t *tid = xcalloc((size_t)threads, sizeof *tid);
  bw_job *jobs = xcalloc((size_t)threads, sizeof *jobs);
  const size_t slice = ((size_t)bytes / (size_t)threads) & ~(size_t)4095;
  double best = 0;
  for (int r = 0; r < reps; r++) {
    const int64_t t0 = now_ns();
    for (int t = 0; t < threads; t++) {
      jobs[t].dst = dst + (size_t)t * slice;
      jobs[t].src = src + (size_t)t * slice;
      jobs[t].n = t == threads - 1 ? (size_t)bytes - (size_t)t * slice : slice;
      if (t == 0 || pthread_create(&tid[t], NULL, bw_worker, &jobs[t])) tid[t] = 0;
    }
    for (int t = 0; t < threads; t++) /* slice 0 and failed spawns run here */
      if (!tid[t]) bw_worker(&jobs[t]);
    for (int t = 1; t < threads; t++)
      if (tid[t]) pthread_join(tid[t], NULL);
    const double s = (double)(now_ns() - t0) * 1e-9;
    const double gbs = 2.0 * (double)bytes / s * 1e-9;
    if (gbs > best) best = gbs;
  }
  free(tid);
  free(jobs);
  free(src);
  free(dst);
  return best;
}

/* Page faults and CPU seconds (user + system, all threads) of this process so far. */
void rusage_now(long *maj, long *min, double *cpu_s) {
  struct rusage ru;
  getrusage(RUSAGE_SELF, &ru);
  *maj = ru.ru_majflt;
  *min = ru.ru_minflt;
  *cpu_s = (double)ru.ru_utime.tv_sec + (double)ru.ru_utime.tv_usec * 1e-6 + (double)ru.ru_stime.tv_sec +
           (double)ru.ru_stime.tv_usec * 1e-6;
}

/* 1-minute load average (other processes competing for the cores), or NAN. */
double loadavg1(void) {
  char *s = read_file("/proc/loadavg", NULL);
  double v = NAN;
  if (s && sscanf(s, "%lf", &v) != 1) v = NAN;
  free(s);
  return v;
}
