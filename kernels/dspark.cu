/*
 * DSpark draft head on the device (spec §6.1 step 4): the Markov step. For
 * draft position k of every sequence, in one launch:
 *   e = markov.embed[tok_k]; logits_k += e · markov.headᵀ (fp32, each row's
 *   dot sequential over the rank with separate multiplies and adds: the CPU
 *   oracle's order, so the logits are bit-identical);
 *   tok_{k+1} = sample(logits_k, T): argmax (lower index on ties, NaN
 *   skipped), or for T > 0 the exponential race of dsv4i_cpu_sample with the
 *   same stateless noise (SplitMix64 of seed, counter + k, token).
 * The vocabulary is split over blocks; the last block of a sequence to
 * finish (atomic ticket after a fence) reduces the partial maxima and, for
 * T > 0, runs the softmax and the race over the row; it resets the ticket,
 * so a captured graph replays. Host side: lib/gpu/dspark_markov.c.
 */
#include "kvrec.cuh"

#define MK_THREADS 256
#define MAX_RANK 1024

namespace {

__device__ __forceinline__ unsigned long long mix64(unsigned long long z) {
  z += 0x9E3779B97F4A7C15ull;
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}

/* dsv4i_sample_noise (lib/cpu/head.c): fp32(−log(u)), u in (0, 1) from 53 bits */
__device__ __forceinline__ float sample_noise(unsigned long long seed, unsigned long long counter,
                                              long long i) {
  const unsigned long long r = mix64(mix64(mix64(seed) ^ counter) ^ (unsigned long long)i);
  const double u = ((double)(r >> 11) + 0.5) * 0x1p-53;
  return (float)-log(u);
}

/* (value, index) maximum: NaN never wins, equal values go to the lower index */
__device__ __forceinline__ void best_merge(float &v, int &i, float v2, int i2) {
  if (i2 < 0 || v2 != v2) return;
  if (i < 0 || v2 > v || (v2 == v && i2 < i)) {
    v = v2;
    i = i2;
  }
}

/* block-wide best over MK_THREADS threads; every thread gets the result */
__device__ void block_best(float &v, int &i) {
  __shared__ float sv[MK_THREADS / 32];
  __shared__ int si[MK_THREADS / 32];
  for (int o = 16; o > 0; o >>= 1) {
    const float v2 = __shfl_xor_sync(0xFFFFFFFFu, v, o);
    const int i2 = __shfl_xor_sync(0xFFFFFFFFu, i, o);
    best_merge(v, i, v2, i2);
  }
  __syncthreads();
  if ((threadIdx.x & 31) == 0) {
    sv[threadIdx.x >> 5] = v;
    si[threadIdx.x >> 5] = i;
  }
  __syncthreads();
  v = sv[0];
  i = si[0];
  for (int w = 1; w < MK_THREADS / 32; w++) best_merge(v, i, sv[w], si[w]);
  __syncthreads();
}

__device__ float block_sum(float x) {
  __shared__ float s[MK_THREADS / 32];
  for (int o = 16; o > 0; o >>= 1) x = __fadd_rn(x, __shfl_xor_sync(0xFFFFFFFFu, x, o));
  __syncthreads();
  if ((threadIdx.x & 31) == 0) s[threadIdx.x >> 5] = x;
  __syncthreads();
  float t = 0.0f;
  for (int w = 0; w < MK_THREADS / 32; w++) t = __fadd_rn(t, s[w]);
  __syncthreads();
  return t;
}

}  // namespace

/*
 * Grid: n · n_chunks blocks of 256 threads, n_chunks = ceil(V / 256).
 * toks: int32 [n][B + 1] (column 0 the anchor; column k + 1 written);
 * logits: f32 [n][B][V] (row k: base in, base + Markov bias out);
 * embed, head: bf16 [V][R]; temp f32 [n]; seed, counter u64 [n] (draft k
 * draws with counter + k); part: f32 + int32 [n][n_chunks] scratch;
 * ticket: int32 [n], zero before the first launch (left zero after each).
 */
extern "C" __global__ void __launch_bounds__(MK_THREADS) dsv4_k_dspark_markov_bf16(
    int n_chunks, int B, int k, int V, int R, int *__restrict__ toks, float *logits,
    const unsigned short *__restrict__ embed, const unsigned short *__restrict__ head,
    const float *__restrict__ temp, const unsigned long long *__restrict__ seed,
    const unsigned long long *__restrict__ counter, float *part_v, int *part_i,
    unsigned int *ticket) {
  __shared__ float es[MAX_RANK];
  __shared__ int s_last;
  const int i = blockIdx.x / n_chunks, ch = blockIdx.x % n_chunks;
  const int tk = toks[(long long)i * (B + 1) + k];
  for (int r = threadIdx.x; r < R; r += blockDim.x)
    es[r] = dsv4i_bf16_to_f32(embed[(long long)tk * R + r]);
  __syncthreads();
  float *row = logits + ((long long)i * B + k) * V;
  const int v = ch * MK_THREADS + threadIdx.x;
  float best_v = 0.0f;
  int best_i = -1;
  if (v < V) {
    const uint4 *hw = (const uint4 *)(head + (long long)v * R);
    float bias = 0.0f;
    for (int r8 = 0; r8 < R / 8; r8++) {
      const uint4 q = hw[r8];
      const unsigned int w[4] = {q.x, q.y, q.z, q.w};
      #pragma unroll
      for (int j = 0; j < 4; j++) {
        bias = __fadd_rn(bias, __fmul_rn(es[8 * r8 + 2 * j], dsv4i_bf16_to_f32(w[j])));
        bias = __fadd_rn(bias, __fmul_rn(es[8 * r8 + 2 * j + 1], dsv4i_bf16_to_f32(w[j] >> 16)));
      }
    }
    const float lg = __fadd_rn(row[v], bias);
    row[v] = lg;
    best_v = lg;
    best_i = v;
  }
  __threadfence(); /* this block's logits before its ticket, for the last block */
  block_best(best_v, best_i);
  if (threadIdx.x == 0) {
    part_v[(long long)i * n_chunks + ch] = best_v;
    part_i[(long long)i * n_chunks + ch] = best_i;
    __threadfence();
    s_last = atomicAdd(&ticket[i], 1u) == (unsigned int)(n_chunks - 1);
  }
  __syncthreads();
  if (!s_last) return;
  /* the last block of sequence i: every other block's logits and partials are visible */
  __threadfence();
  float mv = 0.0f;
  int mi = -1;
  for (int c = threadIdx.x; c < n_chunks; c += blockDim.x)
    best_merge(mv, mi, __ldcg(part_v + (long long)i * n_chunks + c),
               __ldcg(part_i + (long long)i * n_chunks + c));
  block_best(mv, mi);
  const int argmax = mi < 0 ? 0 : mi;
  int tok = argmax;
  const float T = temp[i];
  if (T > 0.0f) {
    const float t = T > 1e-5f ? T : 1e-5f;
    /* max of logits / t: division is monotone, so (max logit) / t */
    const float mx = mi < 0 ? -__int_as_float(0x7F800000) : __fdiv_rn(mv, t);
    float s = 0.0f;
    for (int u = threadIdx.x; u < V; u += blockDim.x)
      s = __fadd_rn(s, expf(__fsub_rn(__fdiv_rn(__ldcg(row + u), t), mx)));
    const float inv = __fdiv_rn(1.0f, block_sum(s));
    const unsigned long long ctr = counter[i] + (unsigned long long)k;
    float rv = 0.0f;
    int ri = -1;
    for (int u = threadIdx.x; u < V; u += blockDim.x) {
      const float p = __fmul_rn(expf(__fsub_rn(__fdiv_rn(__ldcg(row + u), t), mx)), inv);
      best_merge(rv, ri, __fdiv_rn(p, sample_noise(seed[i], ctr, u)), u);
    }
    block_best(rv, ri);
    tok = ri < 0 ? argmax : ri;
  }
  if (threadIdx.x == 0) {
    toks[(long long)i * (B + 1) + k + 1] = tok;
    ticket[i] = 0u;
  }
}
