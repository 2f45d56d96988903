/*
 * Engram primes, multipliers, tables and per-sequence row ids (see
 * engram_hash.h; the token map is in engram_tokenmap.c).
 *
 * Arithmetic: the reference hashes in int64 (torch), r = t0*m0 ^ t1*m1 ^ ...,
 * then r % prime. No product overflows: t <= V - 1 and
 * m <= 2*bound - 1 < INT64_MAX // V with bound = (INT64_MAX // V) // 2, so
 * t*m < INT64_MAX and every r is non-negative. Here the same values are
 * computed in uint64, where nothing can be undefined, and they are equal.
 * (Real config: V = 99092, m < 9.31e13 < 2^47, t*m < 9.22e18 < 2^63.)
 */
#include "model/engram_hash.h"

#include <stdlib.h>
#include <string.h>

#include "model/numpy_random.h"

#define ENGRAM_SEED_PRIME 10007
#define ENGRAM_MAX_NGRAM 32      /* sanity limits on config values */
#define ENGRAM_MAX_HEADS 1024

/* ---- primality ------------------------------------------------------------ */

static void mul_64x64(uint64_t a, uint64_t b, uint64_t *hi, uint64_t *lo) {
  uint64_t a0 = (uint32_t)a, a1 = a >> 32, b0 = (uint32_t)b, b1 = b >> 32;
  uint64_t p00 = a0 * b0, p01 = a0 * b1, p10 = a1 * b0, p11 = a1 * b1;
  uint64_t mid = (p00 >> 32) + (uint32_t)p01 + (uint32_t)p10;
  *hi = p11 + (p01 >> 32) + (p10 >> 32) + (mid >> 32);
  *lo = (mid << 32) | (uint32_t)p00;
}

/* a*b mod n for a, b < n */
static uint64_t mulmod(uint64_t a, uint64_t b, uint64_t n) {
  if (((a | b) >> 32) == 0) return (a * b) % n;
  uint64_t hi, lo;
  mul_64x64(a, b, &hi, &lo);
  if (hi == 0) return lo % n;
  uint64_t r = hi % n; /* < n; shift the low word in bit by bit */
  for (int i = 63; i >= 0; i--) {
    uint64_t top = r >> 63;
    r = (r << 1) | ((lo >> i) & 1u);
    if (top || r >= n) r -= n; /* 2r+1 < 2n: one subtraction, wrap intended */
  }
  return r;
}

static uint64_t powmod(uint64_t a, uint64_t e, uint64_t n) {
  uint64_t r = 1 % n;
  a %= n;
  while (e) {
    if (e & 1u) r = mulmod(r, a, n);
    a = mulmod(a, a, n);
    e >>= 1;
  }
  return r;
}

int dsv4i_is_prime_u64(uint64_t n) {
  /* the first 12 primes as Miller-Rabin bases are a proof for n < 3.3e24 */
  static const uint64_t small[] = {2, 3, 5, 7, 11, 13, 17, 19, 23, 29, 31, 37};
  if (n < 2) return 0;
  for (size_t i = 0; i < DSV4I_ARRAY_LEN(small); i++) {
    if (n == small[i]) return 1;
    if (n % small[i] == 0) return 0;
  }
  if (n < 41 * 41) return 1;
  uint64_t d = n - 1;
  int s = 0;
  while ((d & 1u) == 0) {
    d >>= 1;
    s++;
  }
  for (size_t i = 0; i < DSV4I_ARRAY_LEN(small); i++) {
    uint64_t x = powmod(small[i], d, n);
    if (x == 1 || x == n - 1) continue;
    int witness = 1;
    for (int r = 1; r < s; r++) {
      x = mulmod(x, x, n);
      if (x == n - 1) {
        witness = 0;
        break;
      }
    }
    if (witness) return 0;
  }
  return 1;
}

/* ---- primes and multipliers ---------------------------------------------- */

static dsv4_status dims_check(int64_t vocab_size, int32_t n_layers, int32_t max_ngram,
                              int32_t n_heads) {
  if (vocab_size < 1 || vocab_size >= ((int64_t)1 << 62))
    return dsv4i_error(DSV4_ERR_CONFIG_VALUE,
                       "text_config.engram_vocab_size %lld outside [1, 2^62)",
                       (long long)vocab_size);
  if (max_ngram < 2 || max_ngram > ENGRAM_MAX_NGRAM)
    return dsv4i_error(DSV4_ERR_CONFIG_VALUE,
                       "text_config.engram_max_ngram_size %d outside [2, %d]", max_ngram,
                       ENGRAM_MAX_NGRAM);
  if (n_heads < 1 || n_heads > ENGRAM_MAX_HEADS)
    return dsv4i_error(DSV4_ERR_CONFIG_VALUE, "text_config.engram_n_heads %d outside [1, %d]",
                       n_heads, ENGRAM_MAX_HEADS);
  if (n_layers < 0 || n_layers > DSV4I_MAX_ENGRAM)
    return dsv4i_error(DSV4_ERR_CONFIG_VALUE, "%d Engram layers (at most %d)", n_layers,
                       DSV4I_MAX_ENGRAM);
  return DSV4_OK;
}

dsv4_status dsv4i_engram_primes(int64_t vocab_size, int32_t n_layers, int32_t max_ngram,
                                int32_t n_heads, int64_t *primes) {
  dsv4_status st = dims_check(vocab_size, n_layers, max_ngram, n_heads);
  if (st != DSV4_OK) return st;
  int64_t n_seen = 0; /* primes[0..n_seen) are the seen set */
  for (int32_t l = 0; l < n_layers; l++) {
    for (int32_t o = 0; o < max_ngram - 1; o++) {
      uint64_t cur = (uint64_t)vocab_size - 1;
      for (int32_t k = 0; k < n_heads; k++) {
        uint64_t c = cur + 1;
        for (;;) {
          if (dsv4i_is_prime_u64(c)) {
            int64_t i = 0;
            while (i < n_seen && primes[i] != (int64_t)c) i++;
            if (i == n_seen) break;
          }
          c++; /* < 2^62 + a few prime gaps: no overflow */
        }
        primes[n_seen++] = (int64_t)c;
        cur = c;
      }
    }
  }
  return DSV4_OK;
}

dsv4_status dsv4i_engram_multipliers(int32_t layer_id, int32_t max_ngram,
                                     int64_t compressed_vocab, int64_t *m) {
  if (layer_id < 0 || compressed_vocab < 1)
    return dsv4i_error(DSV4_ERR_CONFIG_VALUE,
                       "Engram multipliers: layer id %d or compressed vocab %lld out of range",
                       layer_id, (long long)compressed_vocab);
  int64_t bound = (INT64_MAX / compressed_vocab) / 2;
  if (bound < 1) bound = 1;
  dsv4i_pcg64 g;
  dsv4i_np_pcg64_seed_u64(&g, (uint64_t)ENGRAM_SEED_PRIME * (uint64_t)layer_id);
  dsv4_status st = dsv4i_np_integers_i64(&g, 0, bound, 0, m, (size_t)max_ngram);
  if (st != DSV4_OK) return st;
  for (int32_t i = 0; i < max_ngram; i++) m[i] = 2 * m[i] + 1; /* < INT64_MAX: bound <= 2^62 */
  return DSV4_OK;
}

/* ---- tables --------------------------------------------------------------- */

void dsv4i_engram_tables_free(dsv4i_engram_tables *t) {
  if (!t) return;
  free(t->primes);
  free(t->offsets);
  free(t->multipliers);
  free(t->token_map);
  free(t);
}

/* Everything but the token map, which has n_classes ==
 * cfg->engram_compressed_vocab_size; takes ownership of `map` (freed on failure). */
static dsv4_status tables_build(const dsv4i_config *cfg, int32_t *map, int32_t n_tokens,
                                int32_t n_classes, dsv4i_engram_tables **out) {
  dsv4_status st;
  dsv4i_engram_tables *t = dsv4i_calloc(1, sizeof *t, "Engram tables");
  if (!t) {
    free(map);
    return DSV4_ERR_OUT_OF_MEMORY;
  }
  t->token_map = map;
  t->n_tokens = n_tokens;
  t->compressed_vocab = n_classes;
  t->n_layers = cfg->n_engram;
  t->max_ngram = cfg->engram_max_ngram;
  t->n_heads = cfg->engram_n_heads;
  if (cfg->engram_pad_id < 0 || cfg->engram_pad_id >= n_tokens) {
    st = dsv4i_error(DSV4_ERR_CONFIG_VALUE,
                     "text_config.engram_pad_token_id %d is not a tokenizer id (vocab %d)",
                     cfg->engram_pad_id, n_tokens);
    goto fail;
  }
  t->pad = map[cfg->engram_pad_id];
  st = dims_check(cfg->engram_vocab_size, t->n_layers, t->max_ngram, t->n_heads);
  if (st != DSV4_OK) goto fail;
  t->n_cols = (t->max_ngram - 1) * t->n_heads;
  const size_t n_pc = (size_t)t->n_layers * (size_t)t->n_cols;
  t->primes = dsv4i_malloc(n_pc * sizeof(int64_t), "Engram primes");
  t->offsets = dsv4i_malloc(n_pc * sizeof(int64_t), "Engram offsets");
  t->multipliers =
      dsv4i_malloc((size_t)t->n_layers * (size_t)t->max_ngram * sizeof(int64_t),
                   "Engram multipliers");
  if (!t->primes || !t->offsets || !t->multipliers) {
    st = DSV4_ERR_OUT_OF_MEMORY;
    goto fail;
  }
  st = dsv4i_engram_primes(cfg->engram_vocab_size, t->n_layers, t->max_ngram, t->n_heads,
                           t->primes);
  if (st != DSV4_OK) goto fail;
  for (int32_t l = 0; l < t->n_layers; l++) {
    t->layer_ids[l] = cfg->engram_layers[l];
    const int64_t *p = t->primes + (size_t)l * (size_t)t->n_cols;
    int64_t *o = t->offsets + (size_t)l * (size_t)t->n_cols;
    int64_t sum = 0;
    for (int32_t c = 0; c < t->n_cols; c++) {
      o[c] = sum;
      if (p[c] > INT64_MAX - sum) {
        st = dsv4i_error(DSV4_ERR_CONFIG_VALUE,
                         "Engram layer %d: table rows overflow int64 "
                         "(text_config.engram_vocab_size %lld)",
                         cfg->engram_layers[l], (long long)cfg->engram_vocab_size);
        goto fail;
      }
      sum += p[c];
    }
    t->rows[l] = sum;
    if (sum != cfg->engram_num_embeddings[l]) {
      st = dsv4i_error(DSV4_ERR_CONFIG_VALUE,
                       "Engram layer %d: its %d bucket primes sum to %lld rows, "
                       "text_config.engram_num_embeddings[%d] is %lld",
                       cfg->engram_layers[l], t->n_cols, (long long)sum, l,
                       (long long)cfg->engram_num_embeddings[l]);
      goto fail;
    }
    st = dsv4i_engram_multipliers(cfg->engram_layers[l], t->max_ngram, n_classes,
                                  t->multipliers + (size_t)l * (size_t)t->max_ngram);
    if (st != DSV4_OK) goto fail;
  }
  *out = t;
  return DSV4_OK;
fail:
  dsv4i_engram_tables_free(t);
  return st;
}

static dsv4_status check_cfg(const dsv4i_config *cfg, void *out) {
  if (!cfg || !out) return dsv4i_error(DSV4_ERR_INVALID_ARG, "Engram tables: NULL argument");
  if (cfg->n_engram < 1)
    return dsv4i_error(DSV4_ERR_INVALID_ARG, "Engram tables: the config has no Engram layers");
  if (cfg->n_engram > DSV4I_MAX_ENGRAM)
    return dsv4i_error(DSV4_ERR_CONFIG_VALUE, "%d Engram layers (at most %d)", cfg->n_engram,
                       DSV4I_MAX_ENGRAM);
  if (cfg->engram_compressed_vocab_size < 1)
    return dsv4i_error(DSV4_ERR_CONFIG_VALUE,
                       "text_config.engram_compressed_vocab_size %d is not positive",
                       cfg->engram_compressed_vocab_size);
  return DSV4_OK;
}

dsv4_status dsv4i_engram_tables_create_from_map(const dsv4i_config *cfg,
                                                const int32_t *token_map, int32_t n_tokens,
                                                dsv4i_engram_tables **out) {
  if (out) *out = NULL;
  dsv4_status st = check_cfg(cfg, out);
  if (st != DSV4_OK) return st;
  if (!token_map || n_tokens < 1)
    return dsv4i_error(DSV4_ERR_INVALID_ARG, "Engram tables: empty token map");
  int32_t max_id = -1;
  for (int32_t i = 0; i < n_tokens; i++) {
    if (token_map[i] < 0 || token_map[i] >= cfg->engram_compressed_vocab_size)
      return dsv4i_error(DSV4_ERR_CONFIG_VALUE,
                         "Engram token map: token %d maps to %d, outside [0, %d)", i,
                         token_map[i], cfg->engram_compressed_vocab_size);
    if (token_map[i] > max_id) max_id = token_map[i];
  }
  if (max_id + 1 != cfg->engram_compressed_vocab_size)
    return dsv4i_error(DSV4_ERR_CONFIG_VALUE,
                       "Engram token map has %d classes, "
                       "text_config.engram_compressed_vocab_size is %d",
                       max_id + 1, cfg->engram_compressed_vocab_size);
  int32_t *map = dsv4i_malloc((size_t)n_tokens * sizeof *map, "Engram token map");
  if (!map) return DSV4_ERR_OUT_OF_MEMORY;
  memcpy(map, token_map, (size_t)n_tokens * sizeof *map);
  return tables_build(cfg, map, n_tokens, max_id + 1, out);
}

/* ---- history -------------------------------------------------------------- */

struct dsv4i_engram_history {
  const dsv4i_engram_tables *t;
  int32_t *hist; /* compressed id per position, DSV4I_ENGRAM_DEAD for image positions */
  int64_t len, cap;
};

dsv4_status dsv4i_engram_history_create(const dsv4i_engram_tables *t,
                                        dsv4i_engram_history **out) {
  if (out) *out = NULL;
  if (!t || !out) return dsv4i_error(DSV4_ERR_INVALID_ARG, "Engram history: NULL argument");
  dsv4i_engram_history *h = dsv4i_calloc(1, sizeof *h, "Engram history");
  if (!h) return DSV4_ERR_OUT_OF_MEMORY;
  h->t = t;
  *out = h;
  return DSV4_OK;
}

void dsv4i_engram_history_free(dsv4i_engram_history *h) {
  if (!h) return;
  free(h->hist);
  free(h);
}

int64_t dsv4i_engram_history_len(const dsv4i_engram_history *h) { return h ? h->len : 0; }

dsv4_status dsv4i_engram_history_reserve(dsv4i_engram_history *h, int64_t n_positions) {
  if (!h || n_positions < 0)
    return dsv4i_error(DSV4_ERR_INVALID_ARG, "Engram history: bad reserve");
  if (n_positions <= h->cap) return DSV4_OK;
  if ((uint64_t)n_positions > SIZE_MAX / sizeof(int32_t))
    return dsv4i_error(DSV4_ERR_OUT_OF_MEMORY, "Engram history: %lld positions",
                       (long long)n_positions);
  int64_t cap = h->cap ? h->cap : 256;
  while (cap < n_positions) cap = cap > INT64_MAX / 2 ? n_positions : cap * 2;
  if ((uint64_t)cap > SIZE_MAX / sizeof(int32_t)) cap = n_positions;
  int32_t *p = dsv4i_realloc(h->hist, (size_t)cap * sizeof(int32_t), "Engram history");
  if (!p) return DSV4_ERR_OUT_OF_MEMORY;
  h->hist = p;
  h->cap = cap;
  return DSV4_OK;
}

dsv4_status dsv4i_engram_history_fork(const dsv4i_engram_history *h,
                                      dsv4i_engram_history **out) {
  if (out) *out = NULL;
  if (!h || !out) return dsv4i_error(DSV4_ERR_INVALID_ARG, "Engram history: NULL argument");
  dsv4i_engram_history *c;
  dsv4_status st = dsv4i_engram_history_create(h->t, &c);
  if (st != DSV4_OK) return st;
  st = dsv4i_engram_history_reserve(c, h->len);
  if (st != DSV4_OK) {
    dsv4i_engram_history_free(c);
    return st;
  }
  if (h->len) memcpy(c->hist, h->hist, (size_t)h->len * sizeof(int32_t));
  c->len = h->len;
  *out = c;
  return DSV4_OK;
}

dsv4_status dsv4i_engram_history_append(dsv4i_engram_history *h, const int32_t *tokens,
                                        const uint8_t *image, size_t n) {
  if (!h || (n && !tokens))
    return dsv4i_error(DSV4_ERR_INVALID_ARG, "Engram history: NULL argument");
  const dsv4i_engram_tables *t = h->t;
  for (size_t i = 0; i < n; i++)
    if (!(image && image[i]) && (tokens[i] < 0 || tokens[i] >= t->n_tokens))
      return dsv4i_error(DSV4_ERR_INVALID_TOKEN,
                         "Engram history: token id %d at chunk index %zu outside [0, %d)",
                         tokens[i], i, t->n_tokens);
  if ((uint64_t)n > (uint64_t)(INT64_MAX - h->len))
    return dsv4i_error(DSV4_ERR_INVALID_ARG, "Engram history: too many positions");
  dsv4_status st = dsv4i_engram_history_reserve(h, h->len + (int64_t)n);
  if (st != DSV4_OK) return st;
  int32_t *dst = h->hist + h->len;
  for (size_t i = 0; i < n; i++)
    dst[i] = (image && image[i]) ? DSV4I_ENGRAM_DEAD : t->token_map[tokens[i]];
  h->len += (int64_t)n;
  return DSV4_OK;
}

dsv4_status dsv4i_engram_history_truncate(dsv4i_engram_history *h, int64_t len) {
  if (!h) return dsv4i_error(DSV4_ERR_INVALID_ARG, "Engram history: NULL argument");
  if (len < 0 || len > h->len)
    return dsv4i_error(DSV4_ERR_INVALID_ARG,
                       "Engram history: cannot truncate %lld positions to %lld",
                       (long long)h->len, (long long)len);
  h->len = len;
  return DSV4_OK;
}

/* Row ids of one position for layer slots [s0, s1), written at out[(s - s0) * n_cols].
 * tok[j] is the token the j-th look-back contributes: the compressed id at
 * p - j, or pad where p < j, where that or a nearer position is DEAD
 * (blocking is cumulative), including j = 0 at a DEAD position itself. */
static void hash_position(const dsv4i_engram_tables *t, const int32_t *hist, int64_t p,
                          int32_t s0, int32_t s1, int64_t *out) {
  uint64_t tok[ENGRAM_MAX_NGRAM];
  const int32_t N = t->max_ngram, H = t->n_heads, C = t->n_cols;
  int blocked = 0;
  for (int32_t j = 0; j < N; j++) {
    if (!blocked && (p < j || hist[p - j] == DSV4I_ENGRAM_DEAD)) blocked = 1;
    tok[j] = (uint64_t)(blocked ? t->pad : hist[p - j]);
  }
  for (int32_t s = s0; s < s1; s++) {
    const int64_t *m = t->multipliers + (size_t)s * (size_t)N;
    const int64_t *pr = t->primes + (size_t)s * (size_t)C;
    const int64_t *off = t->offsets + (size_t)s * (size_t)C;
    int64_t *o = out + (size_t)(s - s0) * (size_t)C;
    uint64_t r = tok[0] * (uint64_t)m[0];
    for (int32_t j = 1; j < N; j++) {
      r ^= tok[j] * (uint64_t)m[j];
      const int32_t c0 = (j - 1) * H;
      for (int32_t k = 0; k < H; k++)
        o[c0 + k] = (int64_t)(r % (uint64_t)pr[c0 + k]) + off[c0 + k];
    }
  }
}

dsv4_status dsv4i_engram_history_row_ids(const dsv4i_engram_history *h, int64_t p0, int64_t p1,
                                         int32_t slot, int64_t *out) {
  if (!h || (p1 > p0 && !out))
    return dsv4i_error(DSV4_ERR_INVALID_ARG, "Engram row ids: NULL argument");
  const dsv4i_engram_tables *t = h->t;
  if (p0 < 0 || p1 < p0 || p1 > h->len)
    return dsv4i_error(DSV4_ERR_INVALID_ARG,
                       "Engram row ids: positions [%lld, %lld) outside the history [0, %lld)",
                       (long long)p0, (long long)p1, (long long)h->len);
  if (slot < -1 || slot >= t->n_layers)
    return dsv4i_error(DSV4_ERR_INVALID_ARG, "Engram row ids: layer slot %d outside [-1, %d)",
                       slot, t->n_layers);
  const int32_t s0 = slot < 0 ? 0 : slot, s1 = slot < 0 ? t->n_layers : slot + 1;
  const size_t stride = (size_t)(s1 - s0) * (size_t)t->n_cols;
  for (int64_t p = p0; p < p1; p++)
    hash_position(t, h->hist, p, s0, s1, out + (size_t)(p - p0) * stride);
  return DSV4_OK;
}
