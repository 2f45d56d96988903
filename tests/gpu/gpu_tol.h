/*
 * The derived tolerance of the GPU's default ("tiled") numerics mode
 * (docs/gpu-dense.md "Numerics modes"): a tiled kernel sums the same fp32
 * terms p_k as the CPU oracle, in another fixed order, and changes nothing
 * else (every product, rounding, clamp and epsilon is the reference's).
 * Two fp32 sums of the same n terms in any two orders differ by at most
 *
 *     |s_gpu - s_cpu| <= 2 * gamma(n) * sum_k |p_k|,
 *     gamma(n) = n * u / (1 - n * u),  u = 2^-24,
 *
 * each being within gamma(n-1) * sum |p_k| of the exact sum (Higham,
 * Accuracy and Stability of Numerical Algorithms, §4.2). sum |p_k| is
 * computed here in double from the same decoded operands the kernel reads.
 * Where the sum is rounded to bf16 afterwards, the two roundings may land on
 * neighbouring values: add one bf16 ulp of the output (gt_bound_bf16).
 * Nothing in this file is tuned: a result outside the bound is a bug.
 */
#ifndef DSV4_GPU_TOL_H
#define DSV4_GPU_TOL_H

#include <math.h>
#include <stdint.h>
#include <stdio.h>

/* gamma(n) = n u / (1 - n u), u = 2^-24 (fp32 unit roundoff). */
static inline double gt_gamma(int64_t n) {
  const double nu = (double)n * 0x1p-24;
  return nu / (1.0 - nu);
}

/* gamma(n) for a unit roundoff u (2^-53: double sums, as hc_mixes' dots). */
static inline double gt_gamma_u(int64_t n, double u) {
  const double nu = (double)n * u;
  return nu / (1.0 - nu);
}

/* A double rounded to fp32 downwards / upwards (outward ends of an interval). */
static inline float gt_f32_down(double v) {
  float f = (float)v;
  if ((double)f > v) f = nextafterf(f, -INFINITY);
  return f;
}
static inline float gt_f32_up(double v) {
  float f = (float)v;
  if ((double)f < v) f = nextafterf(f, INFINITY);
  return f;
}

/* Two fp32 sums of the same n terms, sum |p_k| = abs_sum, in two orders. */
static inline double gt_bound_f32(int64_t n, double abs_sum) {
  return 2.0 * gt_gamma(n) * abs_sum;
}

/* The tensor-core kernels (mma.sync bf16, fp32 accumulate): their fp32 sums
 * may truncate instead of rounding to nearest (kernels/linear_tiled.cu has
 * the reference), so their side takes u = 2^-23: gamma(n) + gamma_{2^-23}(n). */
static inline double gt_bound_mma_f32(int64_t n, double abs_sum) {
  return (gt_gamma(n) + gt_gamma_u(n, 0x1p-23)) * abs_sum;
}

/* One bf16 ulp at magnitude |v| (the spacing of bf16 values in v's binade;
 * the smallest normal's spacing below it). */
static inline double gt_bf16_ulp(double v) {
  v = fabs(v);
  if (v < 0x1p-126) return 0x1p-133;
  int e = 0;
  frexp(v, &e); /* v = m 2^e, 0.5 <= m < 1 */
  return ldexp(1.0, e - 8);
}

/* The same sum rounded to bf16 afterwards: the fp32 bound plus one bf16 ulp
 * of the larger of the two results. */
static inline double gt_bound_bf16(int64_t n, double abs_sum, double y_gpu, double y_cpu) {
  const double m = fabs(y_gpu) > fabs(y_cpu) ? fabs(y_gpu) : fabs(y_cpu);
  return gt_bound_f32(n, abs_sum) + gt_bf16_ulp(m);
}

/* Accumulates a comparison against the bound; prints the first misses with
 * index, values and bound, and the worst ratio |diff| / bound. */
typedef struct gt_tol {
  const char *what;
  size_t checked, bad, worst_i;
  double worst; /* max |diff| / bound over the elements with bound > 0 */
  double max_diff;
} gt_tol;

static inline void gt_tol_init(gt_tol *t, const char *what) {
  t->what = what;
  t->checked = t->bad = t->worst_i = 0;
  t->worst = t->max_diff = 0.0;
}

/* One element: returns 1 when within the bound. Equal bits (NaN included)
 * always pass; a NaN on one side only fails. */
static inline int gt_tol_one(gt_tol *t, size_t i, double y_gpu, double y_cpu, double bound) {
  t->checked++;
  if (y_gpu == y_cpu || (isnan(y_gpu) && isnan(y_cpu))) return 1;
  const double d = fabs(y_gpu - y_cpu);
  if (d > t->max_diff) t->max_diff = d;
  if (bound > 0 && d / bound > t->worst) t->worst = d / bound, t->worst_i = i;
  if (d <= bound) return 1;
  if (t->bad < 5)
    fprintf(stderr, "  %s[%zu]: gpu %.9g cpu %.9g |diff| %.3g > bound %.3g\n", t->what, i, y_gpu,
            y_cpu, d, bound);
  t->bad++;
  return 0;
}

/* Where an op does more after its sum (a norm's rsqrt and scale), the test
 * carries the sum's interval [exact - gamma(n) sum|p|, exact + gamma(n) sum|p|]
 * (outward to fp32) through the reference's own monotone fp32 steps and gets
 * [lo, hi] for the output: every summation order lands inside, the CPU's too
 * (checked: a CPU value outside means the test's interval is wrong). */
static inline int gt_tol_interval(gt_tol *t, size_t i, double y_gpu, double y_cpu, double lo,
                                  double hi) {
  t->checked++;
  const double d = fabs(y_gpu - y_cpu);
  if (d > t->max_diff) t->max_diff = d;
  const double half = 0.5 * (hi - lo);
  if (half > 0 && d / (hi - lo) > t->worst) t->worst = d / (hi - lo), t->worst_i = i;
  const int gpu_in = y_gpu >= lo && y_gpu <= hi, cpu_in = y_cpu >= lo && y_cpu <= hi;
  if (gpu_in && cpu_in) return 1;
  if (t->bad < 5)
    fprintf(stderr, "  %s[%zu]: gpu %.9g cpu %.9g, interval [%.9g, %.9g]%s\n", t->what, i, y_gpu,
            y_cpu, lo, hi, cpu_in ? "" : " (the CPU's value is outside: the test's interval is wrong)");
  t->bad++;
  return 0;
}

/* Prints the summary line; returns the number of elements beyond the bound. */
static inline size_t gt_tol_done(const gt_tol *t) {
  printf("# %s: %zu values, max |diff| %.3g, worst %.3f of the bound (at %zu), %zu beyond\n",
         t->what, t->checked, t->max_diff, t->worst, t->worst_i, t->bad);
  if (t->bad) fprintf(stderr, "  %s: %zu of %zu beyond the derived bound\n", t->what, t->bad, t->checked);
  return t->bad;
}

#endif
