/*
 * numpy's SeedSequence, PCG64 and bounded int64 draw (see numpy_random.h).
 *
 * 128-bit arithmetic is done on (hi, lo) pairs of uint64 so the file needs no
 * compiler extension; everything is unsigned, so wrap-around is defined.
 */
#include "model/numpy_random.h"

#include <string.h>

/* ---- SeedSequence ---------------------------------------------------------
 * numpy.random.SeedSequence: the entropy words are hashed into a pool of
 * four uint32 words (hashmix with a multiplier that evolves per call, pairwise
 * mix), and generate_state() hashes the pool, cycled, into output words with
 * a second constant stream. All arithmetic is mod 2^32. */
#define SS_POOL 4u
#define SS_INIT_A 0x43b0d7e5u
#define SS_MULT_A 0x931e8875u
#define SS_INIT_B 0x8b51f9ddu
#define SS_MULT_B 0x58f38dedu
#define SS_MIX_MULT_L 0xca01f9ddu
#define SS_MIX_MULT_R 0x4973f715u
#define SS_XSHIFT 16u

static uint32_t ss_hashmix(uint32_t value, uint32_t *hash_const) {
  value ^= *hash_const;
  *hash_const *= SS_MULT_A;
  value *= *hash_const;
  value ^= value >> SS_XSHIFT;
  return value;
}

static uint32_t ss_mix(uint32_t x, uint32_t y) {
  uint32_t r = SS_MIX_MULT_L * x - SS_MIX_MULT_R * y;
  r ^= r >> SS_XSHIFT;
  return r;
}

static void ss_pool(const uint32_t *entropy, size_t n, uint32_t pool[SS_POOL]) {
  uint32_t hc = SS_INIT_A;
  for (size_t i = 0; i < SS_POOL; i++) pool[i] = ss_hashmix(i < n ? entropy[i] : 0u, &hc);
  for (size_t src = 0; src < SS_POOL; src++)
    for (size_t dst = 0; dst < SS_POOL; dst++)
      if (src != dst) pool[dst] = ss_mix(pool[dst], ss_hashmix(pool[src], &hc));
  for (size_t src = SS_POOL; src < n; src++)
    for (size_t dst = 0; dst < SS_POOL; dst++)
      pool[dst] = ss_mix(pool[dst], ss_hashmix(entropy[src], &hc));
}

void dsv4i_np_seedseq_generate(const uint32_t *entropy, size_t n_entropy, uint32_t *out,
                               size_t n_out) {
  uint32_t pool[SS_POOL];
  ss_pool(entropy, n_entropy, pool);
  uint32_t hc = SS_INIT_B;
  for (size_t i = 0; i < n_out; i++) {
    uint32_t v = pool[i % SS_POOL];
    v ^= hc;
    hc *= SS_MULT_B;
    v *= hc;
    v ^= v >> SS_XSHIFT;
    out[i] = v;
  }
}

size_t dsv4i_np_seed_words(uint64_t seed, uint32_t words[2]) {
  words[0] = (uint32_t)seed;
  words[1] = (uint32_t)(seed >> 32);
  return words[1] ? 2 : 1;
}

/* ---- PCG64 (XSL-RR 128/64) ------------------------------------------------ */
#define PCG_MULT_HI 0x2360ed051fc65da4ull
#define PCG_MULT_LO 0x4385df649fccf645ull

/* full 64x64 -> 128 product */
static void mul_64x64(uint64_t a, uint64_t b, uint64_t *hi, uint64_t *lo) {
  uint64_t a0 = (uint32_t)a, a1 = a >> 32, b0 = (uint32_t)b, b1 = b >> 32;
  uint64_t p00 = a0 * b0, p01 = a0 * b1, p10 = a1 * b0, p11 = a1 * b1;
  uint64_t mid = (p00 >> 32) + (uint32_t)p01 + (uint32_t)p10;
  *hi = p11 + (p01 >> 32) + (p10 >> 32) + (mid >> 32);
  *lo = (mid << 32) | (uint32_t)p00;
}

/* state = state * MULT + inc  (mod 2^128) */
static void pcg_step(dsv4i_pcg64 *g) {
  uint64_t hi, lo;
  mul_64x64(g->state_lo, PCG_MULT_LO, &hi, &lo);
  hi += g->state_hi * PCG_MULT_LO + g->state_lo * PCG_MULT_HI;
  uint64_t nlo = lo + g->inc_lo;
  hi += g->inc_hi + (nlo < lo);
  g->state_hi = hi;
  g->state_lo = nlo;
}

static uint64_t rotr64(uint64_t v, unsigned r) { return (v >> r) | (v << ((64u - r) & 63u)); }

void dsv4i_np_pcg64_seed(dsv4i_pcg64 *g, const uint32_t *entropy, size_t n_entropy) {
  /* SeedSequence.generate_state(4, np.uint64): 8 words read as little-endian
   * uint64 pairs; words 0,1 are the initial state (high, low), 2,3 the
   * stream selector (high, low). */
  uint32_t w[8];
  dsv4i_np_seedseq_generate(entropy, n_entropy, w, 8);
  uint64_t v[4];
  for (int i = 0; i < 4; i++) v[i] = (uint64_t)w[2 * i] | ((uint64_t)w[2 * i + 1] << 32);
  /* pcg srandom: state = 0; inc = (seq << 1) | 1; step; state += init; step */
  g->inc_hi = (v[2] << 1) | (v[3] >> 63);
  g->inc_lo = (v[3] << 1) | 1u;
  g->state_hi = 0;
  g->state_lo = 0;
  pcg_step(g);
  uint64_t lo = g->state_lo + v[1];
  g->state_hi += v[0] + (lo < v[1]);
  g->state_lo = lo;
  pcg_step(g);
  g->has_uint32 = 0;
  g->uinteger = 0;
}

void dsv4i_np_pcg64_seed_u64(dsv4i_pcg64 *g, uint64_t seed) {
  uint32_t w[2];
  size_t n = dsv4i_np_seed_words(seed, w);
  dsv4i_np_pcg64_seed(g, w, n);
}

uint64_t dsv4i_np_pcg64_next64(dsv4i_pcg64 *g) {
  pcg_step(g);
  return rotr64(g->state_hi ^ g->state_lo, (unsigned)(g->state_hi >> 58));
}

uint32_t dsv4i_np_pcg64_next32(dsv4i_pcg64 *g) {
  if (g->has_uint32) {
    g->has_uint32 = 0;
    return g->uinteger;
  }
  uint64_t v = dsv4i_np_pcg64_next64(g);
  g->has_uint32 = 1;
  g->uinteger = (uint32_t)(v >> 32);
  return (uint32_t)v;
}

/* ---- bounded draws (Lemire, no masking) ----------------------------------- */

/* uniform in [0, rng] for rng < 2^32 - 1, on 32-bit draws */
static uint32_t bounded_lemire32(dsv4i_pcg64 *g, uint32_t rng) {
  const uint32_t excl = rng + 1u;
  uint64_t m = (uint64_t)dsv4i_np_pcg64_next32(g) * excl;
  uint32_t leftover = (uint32_t)m;
  if (leftover < excl) {
    const uint32_t threshold = (UINT32_MAX - rng) % excl; /* 2^32 mod excl */
    while (leftover < threshold) {
      m = (uint64_t)dsv4i_np_pcg64_next32(g) * excl;
      leftover = (uint32_t)m;
    }
  }
  return (uint32_t)(m >> 32);
}

/* uniform in [0, rng] for rng < 2^64 - 1, on 64-bit draws */
static uint64_t bounded_lemire64(dsv4i_pcg64 *g, uint64_t rng) {
  const uint64_t excl = rng + 1u;
  uint64_t hi, lo;
  mul_64x64(dsv4i_np_pcg64_next64(g), excl, &hi, &lo);
  if (lo < excl) {
    const uint64_t threshold = (UINT64_MAX - rng) % excl; /* 2^64 mod excl */
    while (lo < threshold) mul_64x64(dsv4i_np_pcg64_next64(g), excl, &hi, &lo);
  }
  return hi;
}

/* two's complement reinterpretation without implementation-defined casts */
static int64_t u64_to_i64(uint64_t v) {
  return v <= (uint64_t)INT64_MAX ? (int64_t)v : -(int64_t)(UINT64_MAX - v) - 1;
}

dsv4_status dsv4i_np_integers_i64(dsv4i_pcg64 *g, int64_t low, int64_t high, int endpoint,
                                  int64_t *out, size_t n) {
  if (!endpoint) {
    if (high == INT64_MIN)
      return dsv4i_error(DSV4_ERR_INVALID_ARG, "numpy integers: empty range [%lld, %lld)",
                         (long long)low, (long long)high);
    high -= 1;
  }
  if (low > high)
    return dsv4i_error(DSV4_ERR_INVALID_ARG, "numpy integers: empty range [%lld, %lld%c",
                       (long long)low, (long long)(endpoint ? high : high + 1),
                       endpoint ? ']' : ')');
  const uint64_t off = (uint64_t)low;
  const uint64_t rng = (uint64_t)high - (uint64_t)low;
  for (size_t i = 0; i < n; i++) {
    uint64_t r;
    if (rng == 0)
      r = 0;
    else if (rng < 0xffffffffull)
      r = bounded_lemire32(g, (uint32_t)rng);
    else if (rng == 0xffffffffull)
      r = dsv4i_np_pcg64_next32(g);
    else if (rng == UINT64_MAX)
      r = dsv4i_np_pcg64_next64(g);
    else
      r = bounded_lemire64(g, rng);
    out[i] = u64_to_i64(off + r);
  }
  return DSV4_OK;
}
