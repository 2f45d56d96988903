/*
 * Token selection from fp32 logits (spec §5.6; CPU oracle dsv4i_cpu_argmax,
 * dsv4i_cpu_sample). One block of 1024 threads per row.
 *
 * Greedy: the largest logit, the first among equal maxima, NaN ignored
 * (all NaN: 0) — an exact, order-free reduction, so equal to the CPU.
 * Sampling: p = softmax(l / max(T, 1e-5)), token = argmax p_i / q_i with
 * q_i the seeded Exp(1) noise of model/ref_math.h (the same integer hash
 * as the CPU). The max is exact; expf and the Σ run in a different order
 * than the CPU's index-order loop (a tree here), which scales every p_i by
 * the same factor within an ulp or two: the pick equals the CPU's except
 * when two candidates' p/q agree to within a few ulps.
 */
#include "best.cuh"
#include "model/ref_math.h"

#define THREADS 1024

/* Block-wide reduction over the THREADS threads: a shuffle tree in each warp,
 * then warp 0 over the warps' results (`fill` past them); op(a, b) combines
 * two values. Every thread gets the result. */
template <typename T, typename Op>
__device__ T block_reduce(T v, T fill, Op op) {
  __shared__ T part[THREADS / 32];
  for (int off = 16; off > 0; off >>= 1) v = op(v, __shfl_down_sync(0xFFFFFFFFu, v, off));
  const int w = threadIdx.x >> 5, lane = threadIdx.x & 31;
  __syncthreads();
  if (lane == 0) part[w] = v;
  __syncthreads();
  if (w == 0) {
    v = lane < THREADS / 32 ? part[lane] : fill;
    for (int off = 16; off > 0; off >>= 1) v = op(v, __shfl_down_sync(0xFFFFFFFFu, v, off));
    if (lane == 0) part[0] = v;
  }
  __syncthreads();
  return part[0];
}

struct sum_op {
  template <typename T> __device__ T operator()(T a, T b) const { return a + b; }
};
struct max_op {
  __device__ double operator()(double a, double b) const { return fmax(a, b); }
};

/* The best of logits over NaN-free values, as dsv4i_cpu_argmax (0 if all NaN). */
__device__ int row_argmax(const float *l, int vocab) {
  float v = 0.0f;
  int b = -1;
  for (int i = threadIdx.x; i < vocab; i += THREADS) dsv4_best_merge(v, b, l[i], i);
  dsv4_block_best<THREADS>(v, b);
  return b < 0 ? 0 : b;
}

/* logits: fp32 [n_rows][ld]; out: int32 [n_rows]. Grid n_rows. */
extern "C" __global__ void __launch_bounds__(THREADS)
dsv4_k_argmax_f32(int n_rows, int vocab, const float *logits, long long ld, int32_t *out) {
  if ((int)blockIdx.x >= n_rows) return;
  const int r = row_argmax(logits + blockIdx.x * ld, vocab);
  if (threadIdx.x == 0) out[blockIdx.x] = r;
}

/* Sampling with per-row temperature, seed and counter (device arrays, so a
 * captured graph replays with new values). temperature <= 0: greedy. A row
 * no token can be drawn from gives out = -1 - i: i the first NaN / +inf,
 * or vocab when every value is -inf (the CPU's -1 and its message's index). */
extern "C" __global__ void __launch_bounds__(THREADS)
dsv4_k_sample_f32(int n_rows, int vocab, const float *logits, long long ld,
                  const float *temperature, const unsigned long long *seed,
                  const unsigned long long *counter, int32_t *out) {
  const int row = blockIdx.x;
  if (row >= n_rows) return;
  const float *l = logits + row * ld;
  /* a row with a NaN or +inf, or without a finite value, has no token
   * (dsv4i_cpu_not_drawable): out = -1 - (the first such index, or vocab) */
  {
    __shared__ int first_bad;
    if (threadIdx.x == 0) first_bad = vocab;
    __syncthreads();
    int bad = vocab, fin = 0;
    for (int i = threadIdx.x; i < vocab; i += THREADS) {
      const float v = l[i];
      if ((isnan(v) || v == INFINITY) && i < bad) bad = i;
      fin |= !isnan(v) && v != -INFINITY;
    }
    if (bad < vocab) atomicMin(&first_bad, bad);
    fin = __syncthreads_or(fin);
    bad = first_bad;
    if (bad < vocab || !fin) {
      if (threadIdx.x == 0) out[row] = -1 - bad;
      return;
    }
  }
  const float temp = temperature[row];
  if (!(temp > 0.0f)) {
    const int r = row_argmax(l, vocab);
    if (threadIdx.x == 0) out[row] = r;
    return;
  }
  const float t = temp > 1e-5f ? temp : 1e-5f;
  float m = -INFINITY;
  for (int i = threadIdx.x; i < vocab; i += THREADS) {
    const float v = l[i] / t;
    if (v > m) m = v; /* NaN never wins, as the CPU's `l > mx ? l : mx` */
  }
  __shared__ float mx_s;
  {
    float v = m;
    for (int off = 16; off > 0; off >>= 1) v = fmaxf(v, __shfl_down_sync(0xFFFFFFFFu, v, off));
    __shared__ float wm[THREADS / 32];
    if ((threadIdx.x & 31) == 0) wm[threadIdx.x >> 5] = v;
    __syncthreads();
    if (threadIdx.x == 0) {
      float a = wm[0];
      for (int w = 1; w < THREADS / 32; w++) a = fmaxf(a, wm[w]);
      mx_s = a;
    }
    __syncthreads();
  }
  const float mx = mx_s;
  float s = 0.0f;
  for (int i = threadIdx.x; i < vocab; i += THREADS) s += expf(l[i] / t - mx);
  const float inv = 1.0f / block_reduce(s, 0.0f, sum_op());
  float bv = 0.0f;
  int tok = -1;
  for (int i = threadIdx.x; i < vocab; i += THREADS) {
    const float p = expf(l[i] / t - mx) * inv;
    dsv4_best_merge(bv, tok, p / dsv4i_sample_noise_at(seed[row], counter[row], i), i);
  }
  dsv4_block_best<THREADS>(bv, tok);
  if (tok < 0) tok = row_argmax(l, vocab);
  if (threadIdx.x == 0) out[row] = tok;
}

/* ---- sampled verification's accept rule (model/accept.h) ------------------- */

/* max and Σ exp((l - max) / t) of l[0..V) in double (the host's softmax, summed as a tree) */
__device__ void softmax_stats(const float *l, int V, double t, double &mx, double &sum) {
  double m = -INFINITY;
  for (int v = threadIdx.x; v < V; v += THREADS) m = fmax(m, (double)l[v]);
  mx = block_reduce(m, (double)-INFINITY, max_op());
  double s = 0.0;
  for (int v = threadIdx.x; v < V; v += THREADS) s += exp(((double)l[v] - mx) / t);
  sum = block_reduce(s, 0.0, sum_op());
}

/* The rule of dsv4i_accept_row on one row, one block: p = softmax(logits / T), q =
 * softmax(q / Tq) or one-hot at d (q NULL, d >= V or q(d) == 0); accept when
 * u·q(d) < p(d); else the exponential race over max(0, p - q) (over p when that is
 * empty). Doubles throughout; sums are trees, so a decision can differ from the host's
 * only when its two sides agree to ~1e-15. out int32 [2]: accepted, token. */
extern "C" __global__ void __launch_bounds__(THREADS)
dsv4_k_accept_f32(int V, const float *logits, const float *q, float T, float Tq, int d,
                  unsigned long long seed, long long pos, unsigned long long tag_accept,
                  unsigned long long tag_resid, int32_t *out) {
  const double tp = T > 1e-5f ? (double)T : 1e-5, tq = Tq > 1e-5f ? (double)Tq : 1e-5;
  double mp, sp, mq = 0.0, sq = 1.0;
  softmax_stats(logits, V, tp, mp, sp);
  int soft_q = q && d < V;
  double qd = 1.0;
  if (soft_q) {
    softmax_stats(q, V, tq, mq, sq);
    qd = exp(((double)q[d] - mq) / tq) / sq;
    if (!(qd > 0.0)) soft_q = 0, qd = 1.0; /* not a draw of that q: a fixed token */
  }
  const double pd = d < V ? exp(((double)logits[d] - mp) / tp) / sp : 0.0;
  if (dsv4i_accept_uniform_at(seed, tag_accept, pos, 0) * qd < pd) {
    if (threadIdx.x == 0) out[0] = 1, out[1] = d;
    return;
  }
  for (int pass = 0; pass < 2; pass++) { /* the residual, then p itself */
    double best = 0.0;
    int bi = -1;
    for (int v = threadIdx.x; v < V; v += THREADS) {
      const double p = exp(((double)logits[v] - mp) / tp) / sp;
      const double qv = soft_q ? exp(((double)q[v] - mq) / tq) / sq : (v == d ? 1.0 : 0.0);
      const double w = pass ? p : (p > qv ? p - qv : 0.0);
      if (!(w > 0.0)) continue;
      const double r = w / -log(dsv4i_accept_uniform_at(seed, tag_resid, pos, v));
      if (bi < 0 || r > best) best = r, bi = v;
    }
    dsv4_block_best<THREADS>(best, bi);
    if (bi >= 0) {
      if (threadIdx.x == 0) out[0] = 0, out[1] = bi;
      return;
    }
  }
  if (threadIdx.x == 0) out[0] = 0, out[1] = -1;
}
