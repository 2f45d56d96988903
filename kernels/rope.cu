/*
 * RoPE / YaRN rotation on interleaved pairs (spec §8.3; CPU oracle
 * dsv4i_rope_cs + dsv4i_cpu_rope). Per token: angle = fp32(fp32(pos)·freq[i]),
 * (c, s) = cos/sin of the angle in double rounded to fp32; then
 * forward a' = a·c − b·s, b' = a·s + b·c; inverse a' = a·c + b·s,
 * b' = b·c − a·s; products rounded to fp32, then the sum, then bf16.
 * One block per token: the table in shared memory, then every vector.
 * Positions are read on the device (capture-safe).
 */
#include "rope.cuh"

#define MAX_FREQ 128

/* x: bf16, vector v of token t at x + t·tok_stride + v·vec_stride (its rope
 * part); freqs: float [n_freq] (n_freq <= 128); pos: int32 [n_tok]. */
extern "C" __global__ void __launch_bounds__(256)
dsv4_k_rope_bf16(int n_tok, int n_vec, int n_freq, uint16_t *x, long long tok_stride,
                 long long vec_stride, const float *freqs, const int32_t *pos, int inverse) {
  __shared__ float cs[MAX_FREQ][2];
  const int t = blockIdx.x;
  if (t >= n_tok) return;
  const float p = (float)pos[t];
  for (int i = threadIdx.x; i < n_freq; i += blockDim.x) dsv4_rope_cs(p, freqs[i], cs[i]);
  __syncthreads();
  for (long long j = threadIdx.x; j < (long long)n_vec * n_freq; j += blockDim.x) {
    const int v = (int)(j / n_freq), i = (int)(j % n_freq);
    dsv4_rope_pair(x + t * tok_stride + v * vec_stride + 2 * i, cs[i][0], cs[i][1], inverse);
  }
}
