/*
 * Deterministic random numbers for the checkpoint generator.
 *
 * Every value the generator writes comes from a stream keyed by
 * (seed, tensor name, row): the stream's 64-bit key is splitmix64 mixing of
 * the seed, the FNV-1a hash of the name and the row index, and the stream
 * itself is xoshiro256** seeded from that key with splitmix64 (the seeding
 * its authors recommend). Rows are therefore independent: any row block of
 * any tensor can be generated (or regenerated) alone, in any order and on
 * any thread, and a checkpoint depends only on the seed and the config.
 *
 * Normal-looking values use the Irwin-Hall sum of four 16-bit uniforms
 * (one 64-bit draw per value, no transcendental functions), rescaled to
 * mean 0 and variance 1. The distribution is bounded at +-2*sqrt(3)
 * (about 3.46 sigma), which is fine, even welcome, for random weights.
 */
#ifndef DSV4_GEN_RNG_H
#define DSV4_GEN_RNG_H

#include <stdint.h>

typedef struct gen_rng {
  uint64_t s[4];
} gen_rng;

/** splitmix64 step: advances *x and returns the next output. */
uint64_t gen_splitmix64(uint64_t *x);

/** 64-bit FNV-1a hash of a NUL-terminated string. */
uint64_t gen_hash_str(const char *s);

/** Seed a stream from (seed, name hash, row). */
void gen_rng_init(gen_rng *r, uint64_t seed, uint64_t name_hash, uint64_t row);

/** Next 64 random bits (xoshiro256**). */
uint64_t gen_rng_u64(gen_rng *r);

/** Uniform double in [0, 1) with 53 random bits. */
double gen_rng_uniform(gen_rng *r);

/** Uniform integer in [0, n) (n > 0), by rejection: no modulo bias. */
uint64_t gen_rng_below(gen_rng *r, uint64_t n);

/** Approximately standard normal (Irwin-Hall of 4, see above). */
float gen_rng_normal(gen_rng *r);

#endif /* DSV4_GEN_RNG_H */
