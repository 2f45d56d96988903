/*
 * (value, index) maxima in the CPU oracle's argmax rule (device code): an
 * entry with index < 0 or a NaN value never wins, the larger value wins,
 * equal values go to the lower index (the first of an index-order loop).
 * The rule is a total order on the entries, so any reduction tree gives the
 * same winner: the result does not depend on the launch shape.
 * Users: kernels/sample.cu (greedy, the race, the accept rule's race in
 * double), kernels/dspark.cu (the fused Markov step).
 */
#ifndef DSV4_KERNELS_BEST_CUH
#define DSV4_KERNELS_BEST_CUH

/* (v, i) = the better of (v, i) and (v2, i2) */
template <typename T>
__device__ __forceinline__ void dsv4_best_merge(T &v, int &i, T v2, int i2) {
  if (i2 < 0 || v2 != v2) return;
  if (i < 0 || v != v || v2 > v || (v2 == v && i2 < i)) {
    v = v2;
    i = i2;
  }
}

/* the best over the 32 lanes of a warp, in every lane */
template <typename T>
__device__ __forceinline__ void dsv4_warp_best(T &v, int &i) {
  for (int o = 16; o > 0; o >>= 1) {
    const T v2 = __shfl_xor_sync(0xFFFFFFFFu, v, o);
    const int i2 = __shfl_xor_sync(0xFFFFFFFFu, i, o);
    dsv4_best_merge(v, i, v2, i2);
  }
}

/* the best over a block of THREADS threads (a multiple of 32), in every
 * thread; every thread of the block must call it */
template <int THREADS, typename T>
__device__ void dsv4_block_best(T &v, int &i) {
  __shared__ T sv[THREADS / 32];
  __shared__ int si[THREADS / 32];
  dsv4_warp_best(v, i);
  __syncthreads(); /* a previous call's readers are done */
  if ((threadIdx.x & 31) == 0) {
    sv[threadIdx.x >> 5] = v;
    si[threadIdx.x >> 5] = i;
  }
  __syncthreads();
  v = sv[0];
  i = si[0];
  for (int w = 1; w < THREADS / 32; w++) dsv4_best_merge(v, i, sv[w], si[w]);
}

#endif /* DSV4_KERNELS_BEST_CUH */
