/*
 * Engram n-gram hashing, exact (spec §5.2 a-c and "Per-token hashing").
 *
 * Two objects:
 *  - dsv4i_engram_tables: built once per model from the config and the
 *    tokenizer: compressed token map, primes, offsets, multipliers.
 *    Immutable after creation, so any number of threads and histories may
 *    share one (a history must not outlive its tables).
 *  - dsv4i_engram_history: one per sequence; the compressed ids of every
 *    position so far (DSV4I_ENGRAM_DEAD for image positions). It persists
 *    across prefill chunks and decode steps, can be truncated back to a
 *    position (speculative rollback) and forked (copied). Row ids of any
 *    range of its positions go into a caller buffer. Handle-exclusive.
 *
 * Row ids depend only on token ids (and image flags), so the engine can
 * compute them a step ahead and prefetch table rows.
 */
#ifndef DSV4I_ENGRAM_HASH_H
#define DSV4I_ENGRAM_HASH_H

#include <stddef.h>
#include <stdint.h>

#include "base/base.h"
#include "io/tokenizer.h"
#include "model/config.h"

/** History value of an image-span position: it takes part in no n-gram. */
#define DSV4I_ENGRAM_DEAD (-1)

typedef struct dsv4i_engram_tables {
  int32_t n_layers;                  /* Engram layers, in config order */
  int32_t layer_ids[DSV4I_MAX_ENGRAM];
  int32_t max_ngram;                 /* N: n-gram orders 2..N */
  int32_t n_heads;
  int32_t n_cols;                    /* (N - 1) * n_heads row ids per layer per token */
  int64_t rows[DSV4I_MAX_ENGRAM];    /* table rows per layer = sum of its primes */
  int64_t *primes;                   /* int64[n_layers][n_cols], order-major then head */
  int64_t *offsets;                  /* int64[n_layers][n_cols], exclusive prefix sums */
  int64_t *multipliers;              /* int64[n_layers][N], odd */
  int32_t *token_map;                /* int32[n_tokens]: compressed id of each token id */
  int32_t n_tokens;                  /* tokenizer ids, added tokens included */
  int32_t compressed_vocab;          /* classes of token_map */
  int32_t pad;                       /* token_map[engram_pad_id] */
} dsv4i_engram_tables;

/* ---- pieces (exposed for tests and tools) -------------------------------- */

/** Deterministic primality for any uint64 (Miller-Rabin with proven bases). */
int dsv4i_is_prime_u64(uint64_t n);

/**
 * Engram bucket primes (spec §5.2 b): one seen-set across layers; for each
 * layer, for each order n = 2..max_ngram, restart at vocab_size - 1 and give
 * each head the next prime above the previous one that no earlier bucket
 * took. primes: int64[n_layers][(max_ngram - 1) * n_heads].
 * @return DSV4_OK; DSV4_ERR_CONFIG_VALUE (vocab_size outside [1, 2^62),
 *         max_ngram < 2, n_heads < 1, n_layers < 0).
 */
dsv4_status dsv4i_engram_primes(int64_t vocab_size, int32_t n_layers, int32_t max_ngram,
                                int32_t n_heads, int64_t *primes);

/**
 * Hash multipliers of one Engram layer (spec §5.2 c): numpy
 * default_rng(10007 * layer_id).integers(0, bound, size=max_ngram,
 * dtype=int64), bound = max(1, (INT64_MAX // compressed_vocab) // 2), then
 * m = 2v + 1. m: int64[max_ngram].
 * @return DSV4_OK; DSV4_ERR_CONFIG_VALUE (layer_id < 0, compressed_vocab < 1).
 */
dsv4_status dsv4i_engram_multipliers(int32_t layer_id, int32_t max_ngram,
                                     int64_t compressed_vocab, int64_t *m);

/**
 * The normaliser chain of the compressed token map (spec §5.2 a), on UTF-8
 * text (len bytes, NULs allowed): NFKC -> NFD -> strip marks -> lowercase ->
 * runs of [ \t\r\n] to one space -> a lone space becomes U+E000 -> strip
 * White_Space both ends -> every U+E000 back to a space. Appends to *out
 * (which may stay empty: the caller then keys by the original text).
 * @return DSV4_OK; DSV4_ERR_INVALID_UTF8 (text not valid UTF-8);
 *         DSV4_ERR_OUT_OF_MEMORY.
 */
dsv4_status dsv4i_engram_normalize(const char *text, size_t len, dsv4i_str *out);

/**
 * Compressed token map of a tokenizer (spec §5.2 a): every id decoded alone,
 * keyed by its raw token string when the text holds U+FFFD, else by the
 * normalised text (or the text itself when that is empty); classes numbered
 * in first-seen order over ids 0..n-1.
 * @param map       [out] malloc'd int32[*n_tokens] (free()); NULL on failure.
 * @param n_tokens  [out] dsv4i_tokenizer_vocab_size(tok).
 * @param n_classes [out] number of classes.
 * @return DSV4_OK; DSV4_ERR_OUT_OF_MEMORY; DSV4_ERR_TOKENIZER (the tokenizer
 *         failed to decode an id, or an id has no token string).
 */
dsv4_status dsv4i_engram_token_map_build(const dsv4i_tokenizer *tok, int32_t **map,
                                         int32_t *n_tokens, int32_t *n_classes);

/* ---- tables -------------------------------------------------------------- */

/**
 * Build the tables of cfg's Engram layers from its tokenizer: token map,
 * primes, offsets, multipliers, pad class. Checks, each a failure with both
 * numbers in the message:
 *  - the token map's class count equals text_config.engram_compressed_vocab_size
 *    (DSV4_ERR_TOKENIZER: the tokenizer does not belong to this config, or its
 *    normalisation differs from the reference's);
 *  - each layer's prime sum equals its text_config.engram_num_embeddings
 *    entry, engram_pad_token_id is a tokenizer id, the Engram sizes are sane
 *    (DSV4_ERR_CONFIG_VALUE).
 * Also DSV4_ERR_INVALID_ARG (NULL, or a config without Engram layers),
 * DSV4_ERR_OUT_OF_MEMORY. *out is NULL on failure.
 */
dsv4_status dsv4i_engram_tables_create(const dsv4i_config *cfg, const dsv4i_tokenizer *tok,
                                       dsv4i_engram_tables **out);

/**
 * As dsv4i_engram_tables_create, from an already built token map
 * (int32[n_tokens], copied): every entry in [0, compressed vocab) and the
 * largest + 1 equal to engram_compressed_vocab_size (DSV4_ERR_CONFIG_VALUE).
 */
dsv4_status dsv4i_engram_tables_create_from_map(const dsv4i_config *cfg,
                                                const int32_t *token_map, int32_t n_tokens,
                                                dsv4i_engram_tables **out);

/** Release tables (NULL is a no-op). No history may use them afterwards. */
void dsv4i_engram_tables_free(dsv4i_engram_tables *t);

/* ---- per-sequence history -------------------------------------------------- */

typedef struct dsv4i_engram_history dsv4i_engram_history;

/** Empty history over `t` (borrowed: must outlive the history). */
dsv4_status dsv4i_engram_history_create(const dsv4i_engram_tables *t,
                                        dsv4i_engram_history **out);
/** NULL is a no-op. */
void dsv4i_engram_history_free(dsv4i_engram_history *h);
/** Independent copy (same tables, same positions). *out NULL on failure. */
dsv4_status dsv4i_engram_history_fork(const dsv4i_engram_history *h,
                                      dsv4i_engram_history **out);

/** Positions held (the next appended token gets this position). */
int64_t dsv4i_engram_history_len(const dsv4i_engram_history *h);

/**
 * Make room for `n_positions` in total, so appends up to that length do not
 * allocate (for the hot path). DSV4_ERR_OUT_OF_MEMORY; no state change.
 */
dsv4_status dsv4i_engram_history_reserve(dsv4i_engram_history *h, int64_t n_positions);

/**
 * Append n tokens at positions len..len+n-1.
 * @param tokens   [in] int32[n] token ids (ignored where image[i] != 0).
 * @param image    [in] uint8[n] or NULL: non-zero marks an image-span
 *                 position (stored as DSV4I_ENGRAM_DEAD).
 * @return DSV4_OK; DSV4_ERR_INVALID_TOKEN (a text token outside
 *         [0, t->n_tokens)); DSV4_ERR_OUT_OF_MEMORY. No state change on failure.
 */
dsv4_status dsv4i_engram_history_append(dsv4i_engram_history *h, const int32_t *tokens,
                                        const uint8_t *image, size_t n);

/**
 * Drop positions >= len (speculative rollback); capacity is kept.
 * @return DSV4_OK; DSV4_ERR_INVALID_ARG (len < 0 or > current length; no change).
 */
dsv4_status dsv4i_engram_history_truncate(dsv4i_engram_history *h, int64_t len);

/**
 * Table row ids of positions [p0, p1).
 * @param slot [in] Engram layer slot in [0, n_layers), or -1 for all layers.
 * @param out  [out] int64[p1 - p0][n_cols] for one slot, or
 *             int64[p1 - p0][n_layers][n_cols] for -1 (the reference's
 *             [L, n_engram_layers, n_hash_cols] layout); each id of layer
 *             slot s is in [0, t->rows[s]).
 * @return DSV4_OK; DSV4_ERR_INVALID_ARG (range outside [0, len], slot out of
 *         range). Pure: the history is not changed. Does not allocate.
 */
dsv4_status dsv4i_engram_history_row_ids(const dsv4i_engram_history *h, int64_t p0, int64_t p1,
                                         int32_t slot, int64_t *out);

#endif /* DSV4I_ENGRAM_HASH_H */
