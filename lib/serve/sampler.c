/*
 * Sampling transforms (sampler.h), in the order the common engines apply
 * them: bias, repetition penalty (logit / r when positive, x r when not),
 * presence and frequency penalties (minus pres + freq x count), then
 * temperature and softmax, then top-k, top-p (smallest set of the most
 * likely tokens whose mass reaches top_p), min-p (p >= min_p x max p).
 * Ties in the orderings go to the lower id.
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "serve/sampler.h"

static uint64_t mix64(uint64_t z) { /* SplitMix64 */
  z += UINT64_C(0x9E3779B97F4A7C15);
  z = (z ^ (z >> 30)) * UINT64_C(0xBF58476D1CE4E5B9);
  z = (z ^ (z >> 27)) * UINT64_C(0x94D049BB133111EB);
  return z ^ (z >> 31);
}

/* Streams of draws: the token draw, the accept test, the residual draw. */
#define TAG_DRAW UINT64_C(0x5EB5A3F1E0D2C4B7)
#define TAG_ACCEPT UINT64_C(0x3C6EF372FE94F82B)
#define TAG_RESID UINT64_C(0xA54FF53A5F1D36F1)

/* Uniform in (0, 1), 53 bits, a pure function of (seed, stream, position, id). */
static double uniform(uint64_t seed, uint64_t tag, int64_t pos, int32_t i) {
  const uint64_t r = mix64(mix64(mix64(seed ^ tag) ^ (uint64_t)pos) ^ (uint64_t)(uint32_t)i);
  return ((double)(r >> 11) + 0.5) * 0x1p-53;
}

/* Exponential race over weights w (>= 0, not normalised): argmax w / E. */
static int32_t race(const double *w, int32_t V, uint64_t seed, uint64_t tag, int64_t pos) {
  int32_t best = -1;
  double best_r = 0.0;
  for (int32_t v = 0; v < V; v++) {
    if (!(w[v] > 0.0)) continue;
    const double r = w[v] / -log(uniform(seed, tag, pos, v));
    if (best < 0 || r > best_r) best = v, best_r = r;
  }
  return best;
}

dsv4_status dsv4i_sampler_init(dsv4i_sampler *s, const dsv4i_sampler_cfg *c, int32_t vocab) {
  memset(s, 0, sizeof *s);
  const char *bad = NULL;
  if (!(c->temperature == c->temperature)) bad = "temperature is NaN";
  else if (c->top_k < 0) bad = "top_k is negative";
  else if (!(c->top_p > 0.0f && c->top_p <= 1.0f)) bad = "top_p outside (0, 1]";
  else if (!(c->min_p >= 0.0f && c->min_p <= 1.0f)) bad = "min_p outside [0, 1]";
  else if (!(c->repetition_penalty > 0.0f) || isinf(c->repetition_penalty))
    bad = "repetition_penalty not a positive number";
  else if (!isfinite(c->presence_penalty) || !isfinite(c->frequency_penalty))
    bad = "presence or frequency penalty not finite";
  else if (c->n_bias < 0 || (c->n_bias > 0 && (!c->bias_ids || !c->bias))) bad = "logit bias arrays";
  for (int32_t i = 0; !bad && i < c->n_bias; i++)
    if (c->bias_ids[i] < 0 || c->bias_ids[i] >= vocab || !isfinite(c->bias[i]))
      bad = "a logit bias id outside the vocabulary or a non-finite bias";
  if (bad) return dsv4i_error(DSV4_ERR_INVALID_ARG, "sampling: %s", bad);
  s->cfg = *c;
  s->vocab = vocab;
  s->cfg.bias_ids = NULL;
  s->cfg.bias = NULL;
  int ok = 1;
  if (c->n_bias) {
    int32_t *ids = dsv4i_malloc((size_t)c->n_bias * sizeof *ids, "logit bias");
    float *b = dsv4i_malloc((size_t)c->n_bias * sizeof *b, "logit bias");
    if (ids) memcpy(ids, c->bias_ids, (size_t)c->n_bias * sizeof *ids);
    if (b) memcpy(b, c->bias, (size_t)c->n_bias * sizeof *b);
    s->cfg.bias_ids = ids;
    s->cfg.bias = b;
    ok &= ids && b;
  }
  if (c->repetition_penalty != 1.0f) ok &= (s->seen = dsv4i_calloc((size_t)vocab, 1, "seen tokens")) != NULL;
  if (c->presence_penalty != 0.0f || c->frequency_penalty != 0.0f)
    ok &= (s->count = dsv4i_calloc((size_t)vocab, sizeof *s->count, "token counts")) != NULL;
  ok &= (s->p = dsv4i_malloc((size_t)vocab * sizeof *s->p, "sampling scratch")) != NULL;
  if (c->top_k > 0 || c->top_p < 1.0f)
    ok &= (s->order = dsv4i_malloc((size_t)vocab * sizeof *s->order, "sampling order")) != NULL;
  if (!ok) {
    dsv4i_sampler_free(s);
    return DSV4_ERR_OUT_OF_MEMORY;
  }
  return DSV4_OK;
}

void dsv4i_sampler_free(dsv4i_sampler *s) {
  free((void *)s->cfg.bias_ids);
  free((void *)s->cfg.bias);
  free(s->seen);
  free(s->count);
  free(s->p);
  free(s->order);
  memset(s, 0, sizeof *s);
}

void dsv4i_sampler_prompt(dsv4i_sampler *s, const int32_t *ids, int64_t n) {
  if (!s->seen) return;
  for (int64_t i = 0; i < n; i++)
    if (ids[i] >= 0 && ids[i] < s->vocab) s->seen[ids[i]] = 1;
}

void dsv4i_sampler_output(dsv4i_sampler *s, int32_t id) {
  if (id < 0 || id >= s->vocab) return;
  if (s->seen) s->seen[id] = 1;
  if (s->count) s->count[id]++;
}

static int by_p_desc(const void *a, const void *b) {
  const struct dsv4i_sampler_rank *x = a, *y = b;
  if (x->p != y->p) return x->p > y->p ? -1 : 1;
  return x->id < y->id ? -1 : 1;
}

/* Every id, most likely first (ties: lower id). */
static void rank(const double *p, int32_t V, struct dsv4i_sampler_rank *order) {
  for (int32_t v = 0; v < V; v++) order[v] = (struct dsv4i_sampler_rank){p[v], v};
  qsort(order, (size_t)V, sizeof *order, by_p_desc);
}

void dsv4i_sampler_dist(dsv4i_sampler *s, const float *logits) {
  const dsv4i_sampler_cfg *c = &s->cfg;
  const int32_t V = s->vocab;
  double *l = s->p;
  for (int32_t v = 0; v < V; v++) l[v] = logits[v];
  for (int32_t i = 0; i < c->n_bias; i++) l[c->bias_ids[i]] += c->bias[i];
  if (s->seen)
    for (int32_t v = 0; v < V; v++)
      if (s->seen[v]) l[v] = l[v] > 0.0 ? l[v] / c->repetition_penalty : l[v] * c->repetition_penalty;
  if (s->count)
    for (int32_t v = 0; v < V; v++)
      if (s->count[v])
        l[v] -= (double)c->presence_penalty + (double)c->frequency_penalty * s->count[v];
  int32_t best = 0;
  for (int32_t v = 1; v < V; v++)
    if (l[v] > l[best]) best = v;
  if (!(c->temperature > 0.0f)) { /* greedy */
    memset(l, 0, sizeof *l * (size_t)V);
    l[best] = 1.0;
    return;
  }
  const double t = c->temperature > 1e-5f ? c->temperature : 1e-5, mx = l[best];
  double sum = 0.0;
  for (int32_t v = 0; v < V; v++) sum += l[v] = exp((l[v] - mx) / t);
  for (int32_t v = 0; v < V; v++) l[v] /= sum;
  if (s->order) {
    rank(l, V, s->order);
    int32_t keep = V;
    if (c->top_k > 0 && c->top_k < keep) keep = c->top_k;
    if (c->top_p < 1.0f) {
      double cum = 0.0;
      int32_t k = 0;
      while (k < keep && cum < (double)c->top_p) cum += s->order[k++].p;
      keep = k > 0 ? k : 1;
    }
    for (int32_t k = keep; k < V; k++) l[s->order[k].id] = 0.0;
  }
  if (c->min_p > 0.0f) {
    const double floor_p = (double)c->min_p * l[best];
    for (int32_t v = 0; v < V; v++)
      if (l[v] < floor_p) l[v] = 0.0;
  }
  sum = 0.0;
  for (int32_t v = 0; v < V; v++) sum += l[v];
  for (int32_t v = 0; v < V; v++) l[v] /= sum;
}

int32_t dsv4i_sampler_draw(const dsv4i_sampler *s, int64_t pos) {
  const int32_t t = race(s->p, s->vocab, s->cfg.seed, TAG_DRAW, pos);
  return t < 0 ? 0 : t;
}

int dsv4i_sampler_accept(dsv4i_sampler *s, const double *q, int32_t d, int64_t pos, int32_t *repl) {
  const int32_t V = s->vocab;
  if (!q) { /* fixed draft: the position's own draw decides (sampler.h) */
    const int32_t t = dsv4i_sampler_draw(s, pos);
    if (t == d) return 1;
    *repl = t;
    return 0;
  }
  if (q[d] > 0.0 && uniform(s->cfg.seed, TAG_ACCEPT, pos, 0) * q[d] < s->p[d]) return 1;
  double *w = s->p; /* residual max(0, p - q) */
  for (int32_t v = 0; v < V; v++) w[v] = w[v] > q[v] ? w[v] - q[v] : 0.0;
  int32_t t = race(w, V, s->cfg.seed, TAG_RESID, pos);
  *repl = t < 0 ? d : t; /* p == q to rounding: nothing left, keep the draft */
  return 0;
}

float dsv4i_sampler_logprobs(const float *logits, int32_t V, int32_t token, int32_t n,
                             int32_t *top_ids, float *top_lp) {
  double mx = -INFINITY, sum = 0.0;
  for (int32_t v = 0; v < V; v++) mx = logits[v] > mx ? logits[v] : mx;
  for (int32_t v = 0; v < V; v++) sum += exp((double)logits[v] - mx);
  const double lse = mx + log(sum);
  int32_t have = 0; /* top_ids[0, have): the largest so far, descending */
  for (int32_t v = 0; v < V && n > 0; v++) {
    if (have == n && !(logits[v] > logits[top_ids[n - 1]])) continue;
    int32_t k = have < n ? have++ : n - 1;
    while (k > 0 && logits[v] > logits[top_ids[k - 1]]) {
      top_ids[k] = top_ids[k - 1];
      k--;
    }
    top_ids[k] = v;
  }
  for (int32_t k = 0; k < have; k++) top_lp[k] = (float)((double)logits[top_ids[k]] - lse);
  return (float)((double)logits[token] - lse);
}
