/*
 * Scalar math of the reference that every backend must evaluate the same
 * way, written once for host and device (the CPU backend includes it; the
 * kernels include it with nvcc -I lib): torch's vectorised CPU exp, the
 * per-token Sinkhorn of the hyper-connections, the sampling noise hash.
 * Same rules as model/format_codes.h: no project headers, no globals,
 * DSV4I_HD functions only; explicit fmaf() where the reference fuses and
 * nowhere else (host -ffp-contract=off, nvcc -fmad=false).
 *
 * Thread-safety: pure functions.
 */
#ifndef DSV4I_REF_MATH_H
#define DSV4I_REF_MATH_H

#include <stdint.h>

#include "model/format_codes.h"

#ifndef __CUDACC__
#include <math.h>
#endif

/**
 * exp(d) in fp32 as torch's vectorised CPU kernels compute it (the SLEEF
 * expf_u10 method, max error 1 ulp): q = rint(d·fp32(1/ln2)); s = d − q·ln2
 * with ln2 in two parts (0.693145751953125, 1.428606765330187e-06), each
 * step a fused multiply-add; e^s = 1 + fma(s², P(s), s) with P of degree 5
 * evaluated by Horner with fmaf; times 2^floor(q/2) then 2^(q−floor(q/2)).
 * d < −104 gives +0, d > 100 gives +inf, NaN stays NaN.
 */
DSV4I_HD float dsv4i_expf_torch(float d) {
  if ((dsv4i_f32_bits(d) & 0x7FFFFFFFu) > 0x7F800000u) return d; /* NaN */
  if (d < -104.0f) return 0.0f;
  if (d > 100.0f) return dsv4i_f32_from_bits(0x7F800000u);
  const float inv_ln2 = 1.442695040888963407359924681001892137426645954152985934135449406931f;
#ifdef __CUDACC__
  const int32_t q = (int32_t)rintf(d * inv_ln2);
#else
  const int32_t q = (int32_t)nearbyintf(d * inv_ln2);
#endif
  const float qf = (float)q;
  float s = fmaf(qf, -0.693145751953125f, d);
  s = fmaf(qf, -1.428606765330187045e-06f, s);
  float u = 0.000198527617612853646278381f;
  u = fmaf(u, s, 0.00139304355252534151077271f);
  u = fmaf(u, s, 0.00833336077630519866943359f);
  u = fmaf(u, s, 0.0416664853692054748535156f);
  u = fmaf(u, s, 0.166666671633720397949219f);
  u = fmaf(u, s, 0.5f);
  u = 1.0f + fmaf(s * s, u, s);
  /* · 2^q in two steps (q in [-150, 144]; the first is exact) */
  const int32_t h = (q - (q < 0)) / 2; /* floor(q / 2) */
  return (u * dsv4i_f32_from_bits((uint32_t)(h + 127) << 23)) *
         dsv4i_f32_from_bits((uint32_t)(q - h + 127) << 23);
}

/** torch's sigmoid: 1 / (1 + exp(0 − z)) with dsv4i_expf_torch. */
DSV4I_HD float dsv4i_sigmoid_torch(float z) { return 1.0f / (1.0f + dsv4i_expf_torch(-z)); }

/** Largest hc (copies of the hyper-connection stream) the per-token code takes. */
#define DSV4I_HC_MAX 16

/**
 * hc_split_sinkhorn of one token (spec §5.3, KCPU), all fp32:
 *   pre  = sigmoid(m[0:hc]·scale[0] + base[0:hc]) + hc_eps
 *   post = 2·sigmoid(m[hc:2hc]·scale[1] + base[hc:2hc])
 *   C[i][j] = m[2hc + hc·i + j]·scale[2] + base[2hc + hc·i + j]  (i source, j dest)
 *   C = exp(C − max_j C) / Σ_j + hc_eps;  C = C / (Σ_i C + hc_eps);
 *   (iters − 1) times: C = C / (Σ_j C + hc_eps); C = C / (Σ_i C + hc_eps).
 * Sums in index order. hc <= DSV4I_HC_MAX, iters >= 1 (callers check).
 * @param m [in] float [(2+hc)·hc]; pre, post [out] float [hc]; c [out] float [hc][hc].
 */
DSV4I_HD void dsv4i_hc_sinkhorn_token(int32_t hc, const float *m, const float *scale,
                                      const float *base, int32_t iters, float hc_eps, float *pre,
                                      float *post, float *c) {
  for (int32_t i = 0; i < hc; i++) {
    pre[i] = dsv4i_sigmoid_torch(m[i] * scale[0] + base[i]) + hc_eps;
    post[i] = 2.0f * dsv4i_sigmoid_torch(m[hc + i] * scale[1] + base[hc + i]);
  }
  for (int32_t k = 0; k < hc * hc; k++) c[k] = m[2 * hc + k] * scale[2] + base[2 * hc + k];
  for (int32_t i = 0; i < hc; i++) { /* softmax over j (the last dim) + eps */
    float *row = c + i * hc, mx = row[0], s = 0.0f;
    for (int32_t j = 1; j < hc; j++) mx = row[j] > mx ? row[j] : mx;
    for (int32_t j = 0; j < hc; j++) row[j] = dsv4i_expf_torch(row[j] - mx);
    for (int32_t j = 0; j < hc; j++) s += row[j];
    for (int32_t j = 0; j < hc; j++) row[j] = row[j] / s + hc_eps;
  }
  for (int32_t it = 0; it < iters; it++) {
    if (it > 0) /* row normalisation: all rounds but the first */
      for (int32_t i = 0; i < hc; i++) {
        float s = 0.0f;
        for (int32_t j = 0; j < hc; j++) s += c[i * hc + j];
        s += hc_eps;
        for (int32_t j = 0; j < hc; j++) c[i * hc + j] /= s;
      }
    for (int32_t j = 0; j < hc; j++) { /* column normalisation */
      float s = 0.0f;
      for (int32_t i = 0; i < hc; i++) s += c[i * hc + j];
      s += hc_eps;
      for (int32_t i = 0; i < hc; i++) c[i * hc + j] /= s;
    }
  }
}

/** SplitMix64: the golden-ratio increment, then the output mix. */
DSV4I_HD uint64_t dsv4i_mix64(uint64_t z) {
  z += 0x9E3779B97F4A7C15ull;
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}

/**
 * Exp(1) sampling noise of element i (spec §5.6): r = mix(mix(mix(seed) ^
 * counter) ^ i); u = (top 53 bits of r + 0.5) · 2^-53, strictly inside
 * (0, 1); q = fp32(−log(u)) with log in double (correctly rounded to fp32
 * on both host and device except in double-rounding cases far below any
 * test's reach). Never 0.
 */
DSV4I_HD float dsv4i_sample_noise_at(uint64_t seed, uint64_t counter, int64_t i) {
  const uint64_t r = dsv4i_mix64(dsv4i_mix64(dsv4i_mix64(seed) ^ counter) ^ (uint64_t)i);
  const double u = ((double)(r >> 11) + 0.5) * 0x1p-53;
  return (float)-log(u);
}

/**
 * Uniform in (0, 1) with 53 bits for sampled verification's accept rule
 * (model/accept.h): r = mix(mix(mix(seed ^ tag) ^ pos) ^ i), (top 53 bits of
 * r + 0.5) · 2^-53. Host (lib/model/accept.c) and device (kernels/sample.cu).
 */
DSV4I_HD double dsv4i_accept_uniform_at(uint64_t seed, uint64_t tag, int64_t pos, int64_t i) {
  const uint64_t r = dsv4i_mix64(dsv4i_mix64(dsv4i_mix64(seed ^ tag) ^ (uint64_t)pos) ^ (uint64_t)i);
  return ((double)(r >> 11) + 0.5) * 0x1p-53;
}

#endif /* DSV4I_REF_MATH_H */
