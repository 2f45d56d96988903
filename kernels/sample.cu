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
#include "model/ref_math.h"

#define THREADS 1024

struct best_t {
  float v;
  int i; /* -1: none yet */
};

/* a better than b: a number beats NaN/none, larger wins, lower index on ties. */
__device__ __forceinline__ bool better(best_t a, best_t b) {
  if (a.i < 0) return false;
  if (b.i < 0) return true;
  const bool an = isnan(a.v), bn = isnan(b.v);
  if (an != bn) return bn;
  if (!an && a.v != b.v) return a.v > b.v;
  return a.i < b.i;
}

__device__ best_t block_best(best_t b) {
  __shared__ float sv[THREADS / 32];
  __shared__ int si[THREADS / 32];
  for (int off = 16; off > 0; off >>= 1) {
    best_t o;
    o.v = __shfl_down_sync(0xFFFFFFFFu, b.v, off);
    o.i = __shfl_down_sync(0xFFFFFFFFu, b.i, off);
    if (better(o, b)) b = o;
  }
  const int w = threadIdx.x >> 5, lane = threadIdx.x & 31;
  __syncthreads();
  if (lane == 0) sv[w] = b.v, si[w] = b.i;
  __syncthreads();
  if (w == 0) {
    b.v = lane < THREADS / 32 ? sv[lane] : 0.0f;
    b.i = lane < THREADS / 32 ? si[lane] : -1;
    for (int off = 16; off > 0; off >>= 1) {
      best_t o;
      o.v = __shfl_down_sync(0xFFFFFFFFu, b.v, off);
      o.i = __shfl_down_sync(0xFFFFFFFFu, b.i, off);
      if (better(o, b)) b = o;
    }
    if (lane == 0) sv[0] = b.v, si[0] = b.i;
  }
  __syncthreads();
  best_t r;
  r.v = sv[0];
  r.i = si[0];
  return r;
}

__device__ float block_sum(float s) {
  __shared__ float part[THREADS / 32];
  for (int off = 16; off > 0; off >>= 1) s += __shfl_down_sync(0xFFFFFFFFu, s, off);
  const int w = threadIdx.x >> 5, lane = threadIdx.x & 31;
  __syncthreads();
  if (lane == 0) part[w] = s;
  __syncthreads();
  if (w == 0) {
    s = lane < THREADS / 32 ? part[lane] : 0.0f;
    for (int off = 16; off > 0; off >>= 1) s += __shfl_down_sync(0xFFFFFFFFu, s, off);
    if (lane == 0) part[0] = s;
  }
  __syncthreads();
  return part[0];
}

/* The best of logits over NaN-free values, as dsv4i_cpu_argmax (0 if all NaN). */
__device__ int row_argmax(const float *l, int vocab) {
  best_t b = {0.0f, -1};
  for (int i = threadIdx.x; i < vocab; i += THREADS) {
    const best_t c = {l[i], isnan(l[i]) ? -1 : i};
    if (better(c, b)) b = c;
  }
  b = block_best(b);
  return b.i < 0 ? 0 : b.i;
}

/* logits: fp32 [n_rows][ld]; out: int32 [n_rows]. Grid n_rows. */
extern "C" __global__ void __launch_bounds__(THREADS)
dsv4_k_argmax_f32(int n_rows, int vocab, const float *logits, long long ld, int32_t *out) {
  if ((int)blockIdx.x >= n_rows) return;
  const int r = row_argmax(logits + blockIdx.x * ld, vocab);
  if (threadIdx.x == 0) out[blockIdx.x] = r;
}

/* Sampling with per-row temperature, seed and counter (device arrays, so a
 * captured graph replays with new values). temperature <= 0: greedy. */
extern "C" __global__ void __launch_bounds__(THREADS)
dsv4_k_sample_f32(int n_rows, int vocab, const float *logits, long long ld,
                  const float *temperature, const unsigned long long *seed,
                  const unsigned long long *counter, int32_t *out) {
  const int row = blockIdx.x;
  if (row >= n_rows) return;
  const float *l = logits + row * ld;
  const float temp = temperature[row];
  if (!(temp > 0.0f)) {
    const int r = row_argmax(l, vocab);
    if (threadIdx.x == 0) out[row] = r;
    return;
  }
  const float t = temp > 1e-5f ? temp : 1e-5f;
  best_t m = {-INFINITY, 0};
  for (int i = threadIdx.x; i < vocab; i += THREADS) {
    const float v = l[i] / t;
    if (v > m.v) m.v = v; /* NaN never wins, as the CPU's `l > mx ? l : mx` */
  }
  __shared__ float mx_s;
  {
    float v = m.v;
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
  const float inv = 1.0f / block_sum(s);
  best_t b = {0.0f, -1};
  for (int i = threadIdx.x; i < vocab; i += THREADS) {
    const float p = expf(l[i] / t - mx) * inv;
    const float r = p / dsv4i_sample_noise_at(seed[row], counter[row], i);
    const best_t c = {r, isnan(r) ? -1 : i};
    if (better(c, b)) b = c;
  }
  b = block_best(b);
  int tok = b.i;
  if (tok < 0) tok = row_argmax(l, vocab);
  if (threadIdx.x == 0) out[row] = tok;
}
