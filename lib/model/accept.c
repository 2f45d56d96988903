/*
 * Sampled verification's accept rule (accept.h): SplitMix64 draws, softmax
 * in double, the exponential race for the residual.
 */
#include <math.h>
#include <string.h>

#include "model/accept.h"
#include "model/ref_math.h"

double dsv4i_accept_uniform(uint64_t seed, uint64_t tag, int64_t pos, int64_t i) {
  return dsv4i_accept_uniform_at(seed, tag, pos, i); /* shared with the device */
}

/* p = softmax(logits / T) in double (max-subtracted). */
static void softmax(const float *logits, int32_t V, float T, double *p) {
  const double t = T > 1e-5f ? (double)T : 1e-5;
  double mx = -INFINITY, sum = 0.0;
  for (int32_t v = 0; v < V; v++) mx = logits[v] > mx ? logits[v] : mx;
  for (int32_t v = 0; v < V; v++) sum += p[v] = exp(((double)logits[v] - mx) / t);
  for (int32_t v = 0; v < V; v++) p[v] /= sum;
}

/* A draw from the weights w[0..V) (not normalised, >= 0, some > 0):
 * exponential race argmax w_v / E_v, E_v = -log(u_v). */
static int32_t race(const double *w, int32_t V, uint64_t seed, int64_t pos) {
  int32_t best = -1;
  double best_r = 0.0;
  for (int32_t v = 0; v < V; v++) {
    if (!(w[v] > 0.0)) continue;
    const double r = w[v] / -log(dsv4i_accept_uniform(seed, DSV4I_TAG_RESID, pos, v));
    if (best < 0 || r > best_r) best = v, best_r = r;
  }
  return best;
}

/* q = one-hot at d */
static double one_hot(double *q, int32_t V, int32_t d) {
  memset(q, 0, sizeof *q * (size_t)V);
  q[d] = 1.0;
  return 1.0;
}

void dsv4i_accept_row(const float *logits, int32_t V, const dsv4i_accept_req *r, double *scratch,
                      int32_t *accepted, int32_t *token) {
  double *p = scratch, *q = scratch + V;
  const int32_t d = r->draft;
  if (r->n_valid > 0 && r->n_valid < V) V = r->n_valid; /* ids past the tokenizer's: never drawn */
  double qd;
  if (r->q && d < V) {
    softmax(r->q, V, r->q_temperature, q);
    qd = q[d];
  } else {
    qd = one_hot(q, V, d);
  }
  if (!(qd > 0.0)) qd = one_hot(q, V, d); /* not a draw of that q: a fixed token */
  softmax(logits, V, r->temperature, p);
  const double pd = d < V ? p[d] : 0.0;
  if (dsv4i_accept_uniform(r->seed, DSV4I_TAG_ACCEPT, r->pos, 0) * qd < pd) {
    *accepted = 1;
    *token = d;
    return;
  }
  /* rejected: draw from norm(max(0, p - q)) */
  for (int32_t v = 0; v < V; v++) p[v] = p[v] > q[v] ? p[v] - q[v] : 0.0;
  int32_t t = race(p, V, r->seed, r->pos);
  if (t < 0) { /* p == q to rounding: the residual is empty; draw from p */
    softmax(logits, V, r->temperature, p);
    t = race(p, V, r->seed, r->pos);
  }
  *accepted = 0;
  *token = t;
}
