/* Deterministic random streams for the generator; see gen_rng.h. */
#include "gen_rng.h"

uint64_t gen_splitmix64(uint64_t *x) {
  uint64_t z = (*x += 0x9e3779b97f4a7c15ull);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

uint64_t gen_hash_str(const char *s) {
  uint64_t h = 0xcbf29ce484222325ull;
  for (; *s; s++) {
    h ^= (unsigned char)*s;
    h *= 0x100000001b3ull;
  }
  return h;
}

void gen_rng_init(gen_rng *r, uint64_t seed, uint64_t name_hash, uint64_t row) {
  /* Mix the three parts through splitmix64 so that neighbouring rows or
   * seeds give unrelated keys, then expand the key into the 256-bit state. */
  uint64_t x = seed;
  uint64_t k = gen_splitmix64(&x);
  x = k ^ name_hash;
  k = gen_splitmix64(&x);
  x = k ^ row;
  k = gen_splitmix64(&x);
  x = k;
  for (int i = 0; i < 4; i++) r->s[i] = gen_splitmix64(&x);
}

static inline uint64_t rotl(uint64_t v, int k) {
  return (v << k) | (v >> (64 - k));
}

uint64_t gen_rng_u64(gen_rng *r) {
  uint64_t *s = r->s;
  uint64_t out = rotl(s[1] * 5, 7) * 9;
  uint64_t t = s[1] << 17;
  s[2] ^= s[0];
  s[3] ^= s[1];
  s[1] ^= s[2];
  s[0] ^= s[3];
  s[2] ^= t;
  s[3] = rotl(s[3], 45);
  return out;
}

double gen_rng_uniform(gen_rng *r) {
  return (double)(gen_rng_u64(r) >> 11) * 0x1.0p-53;
}

uint64_t gen_rng_below(gen_rng *r, uint64_t n) {
  uint64_t lim = UINT64_MAX - UINT64_MAX % n; /* accept [0, lim) */
  for (;;) {
    uint64_t v = gen_rng_u64(r);
    if (v < lim) return v % n;
  }
}

float gen_rng_normal(gen_rng *r) {
  /* Sum of four U(0, 65535) has mean 4 * 32767.5 and variance
   * 4 * (65536^2 - 1) / 12; rescale to N(0, 1)-like. */
  uint64_t v = gen_rng_u64(r);
  uint32_t sum = (uint32_t)(v & 0xffff) + (uint32_t)((v >> 16) & 0xffff) +
                 (uint32_t)((v >> 32) & 0xffff) + (uint32_t)(v >> 48);
  const double mean = 4.0 * 32767.5;
  const double inv_sd = 1.0 / 37837.227237; /* sqrt(4 * (65536^2 - 1) / 12) */
  return (float)(((double)sum - mean) * inv_sd);
}
