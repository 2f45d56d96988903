/*
 * numpy's default random stream, bit for bit: SeedSequence, the PCG64 bit
 * generator and Generator.integers(..., dtype=int64). The Engram hash
 * multipliers are numpy draws (spec §5.2 c):
 *   numpy.random.default_rng(seed).integers(low, high, size=n, dtype=np.int64)
 * equals
 *   dsv4i_pcg64 g; dsv4i_np_pcg64_seed_u64(&g, seed);
 *   dsv4i_np_integers_i64(&g, low, high, 0, out, n);
 *
 * Reimplemented from the algorithms' descriptions (numpy's SeedSequence
 * hashmix/mix pool, O'Neill's PCG XSL-RR 128/64, Lemire's nearly divisionless
 * bounded draw); checked against tests/data/numpy_random/table.json, which
 * tests/data/numpy_random/gen_table.py writes with numpy.
 *
 * Pure integer code, no allocation, no global state: thread-safe per
 * generator (one generator per thread).
 */
#ifndef DSV4I_NUMPY_RANDOM_H
#define DSV4I_NUMPY_RANDOM_H

#include <stddef.h>
#include <stdint.h>

#include "base/base.h"

/* numpy's PCG64 state: the 128-bit LCG (state, increment) plus the half of a
 * 64-bit draw that next_uint32 keeps for its next call. */
typedef struct dsv4i_pcg64 {
  uint64_t state_hi, state_lo;
  uint64_t inc_hi, inc_lo;   /* always odd */
  int32_t has_uint32;        /* 1: `uinteger` is the next next32() result */
  uint32_t uinteger;
} dsv4i_pcg64;

/**
 * numpy.random.SeedSequence(entropy).generate_state(n_out, np.uint32).
 * `entropy` holds the seed as numpy coerces it: a non-negative integer split
 * into little-endian uint32 words (seed 0 is the single word 0; see
 * dsv4i_np_seed_words). No spawn key. Any number of words.
 */
void dsv4i_np_seedseq_generate(const uint32_t *entropy, size_t n_entropy, uint32_t *out,
                               size_t n_out);

/** Split a uint64 seed into numpy's entropy words; returns the count (1 or 2). */
size_t dsv4i_np_seed_words(uint64_t seed, uint32_t words[2]);

/** numpy.random.PCG64(SeedSequence(entropy)): state as numpy seeds it. */
void dsv4i_np_pcg64_seed(dsv4i_pcg64 *g, const uint32_t *entropy, size_t n_entropy);
/** numpy.random.default_rng(seed) / PCG64(seed) for a non-negative seed. */
void dsv4i_np_pcg64_seed_u64(dsv4i_pcg64 *g, uint64_t seed);

/** One 64-bit output (numpy's next_uint64 / BitGenerator.random_raw). */
uint64_t dsv4i_np_pcg64_next64(dsv4i_pcg64 *g);
/** numpy's next_uint32: low half of a fresh 64-bit draw, then its high half. */
uint32_t dsv4i_np_pcg64_next32(dsv4i_pcg64 *g);

/**
 * Generator.integers(low, high, size=n, dtype=np.int64, endpoint=endpoint)
 * with scalar bounds: the range [low, high) (or [low, high] when endpoint is
 * non-zero) drawn like numpy's random_bounded_uint64_fill with
 * use_masked=False. Both of numpy's paths are implemented: range - 1 below
 * 2^32 takes the 32-bit Lemire draw on next32 (which shares the buffered
 * half-draw with later 32-bit calls), wider ranges the 64-bit Lemire draw;
 * a single-value range draws nothing.
 *
 * @param g   [in,out] generator; advanced exactly as numpy advances it.
 * @param out [out] int64[n].
 * @return DSV4_OK; DSV4_ERR_INVALID_ARG when the range is empty (numpy's
 *         ValueError "low >= high"), g and out untouched.
 */
dsv4_status dsv4i_np_integers_i64(dsv4i_pcg64 *g, int64_t low, int64_t high, int endpoint,
                                  int64_t *out, size_t n);

#endif /* DSV4I_NUMPY_RANDOM_H */
