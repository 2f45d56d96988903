/* Open-addressing hash maps for the tokenizer (linear probing, power-of-two
 * capacity, load factor <= 1/2). See tokenizer_internal.h. */
#include <stdlib.h>
#include <string.h>

#include "io/tokenizer_internal.h"

static uint64_t hash_bytes(const char *s, size_t len) {
  /* FNV-1a, then a final avalanche so low bits are usable as a bucket */
  uint64_t h = 1469598103934665603ull;
  for (size_t i = 0; i < len; i++) {
    h ^= (uint8_t)s[i];
    h *= 1099511628211ull;
  }
  h ^= h >> 33;
  h *= 0xff51afd7ed558ccdull;
  h ^= h >> 33;
  return h;
}

static uint64_t hash_u64(uint64_t x) {
  /* splitmix64 finaliser */
  x ^= x >> 30;
  x *= 0xbf58476d1ce4e5b9ull;
  x ^= x >> 27;
  x *= 0x94d049bb133111ebull;
  x ^= x >> 31;
  return x;
}

static size_t cap_for(size_t expected) {
  size_t cap = 16;
  while (cap < expected * 2 + 2) cap *= 2;
  return cap;
}

dsv4_status dsv4i_tk_strmap_init(dsv4i_tk_strmap *m, size_t expected) {
  memset(m, 0, sizeof *m);
  m->cap = cap_for(expected);
  m->keys = dsv4i_calloc(m->cap, sizeof *m->keys, "tokenizer string map");
  m->key_lens = dsv4i_calloc(m->cap, sizeof *m->key_lens, "tokenizer string map");
  m->vals = dsv4i_calloc(m->cap, sizeof *m->vals, "tokenizer string map");
  if (!m->keys || !m->key_lens || !m->vals) {
    dsv4i_tk_strmap_free(m);
    return DSV4_ERR_OUT_OF_MEMORY;
  }
  return DSV4_OK;
}

void dsv4i_tk_strmap_free(dsv4i_tk_strmap *m) {
  free(m->keys);
  free(m->key_lens);
  free(m->vals);
  memset(m, 0, sizeof *m);
}

static dsv4_status strmap_grow(dsv4i_tk_strmap *m) {
  dsv4i_tk_strmap g;
  dsv4_status s = dsv4i_tk_strmap_init(&g, m->cap);
  if (s != DSV4_OK) return s;
  for (size_t i = 0; i < m->cap; i++)
    if (m->keys[i]) dsv4i_tk_strmap_put(&g, m->keys[i], m->key_lens[i], m->vals[i]);
  dsv4i_tk_strmap_free(m);
  *m = g;
  return DSV4_OK;
}

dsv4_status dsv4i_tk_strmap_put(dsv4i_tk_strmap *m, const char *key, size_t len, int32_t val) {
  if (len > UINT32_MAX) return dsv4i_error(DSV4_ERR_TOKENIZER, "token of %zu bytes is too long", len);
  if ((m->n + 1) * 2 > m->cap) {
    dsv4_status s = strmap_grow(m);
    if (s != DSV4_OK) return s;
  }
  size_t mask = m->cap - 1;
  for (size_t i = hash_bytes(key, len) & mask;; i = (i + 1) & mask) {
    if (!m->keys[i]) {
      m->keys[i] = key;
      m->key_lens[i] = (uint32_t)len;
      m->vals[i] = val;
      m->n++;
      return DSV4_OK;
    }
    if (m->key_lens[i] == len && memcmp(m->keys[i], key, len) == 0) {
      m->vals[i] = val;
      return DSV4_OK;
    }
  }
}

int32_t dsv4i_tk_strmap_get(const dsv4i_tk_strmap *m, const char *key, size_t len) {
  if (m->cap == 0) return -1;
  size_t mask = m->cap - 1;
  for (size_t i = hash_bytes(key, len) & mask;; i = (i + 1) & mask) {
    if (!m->keys[i]) return -1;
    if (m->key_lens[i] == len && memcmp(m->keys[i], key, len) == 0) return m->vals[i];
  }
}

#define U64_EMPTY UINT64_MAX

dsv4_status dsv4i_tk_u64map_init(dsv4i_tk_u64map *m, size_t expected) {
  memset(m, 0, sizeof *m);
  m->cap = cap_for(expected);
  m->keys = dsv4i_malloc(m->cap * sizeof *m->keys, "tokenizer merge map");
  m->vals = dsv4i_malloc(m->cap * sizeof *m->vals, "tokenizer merge map");
  if (!m->keys || !m->vals) {
    dsv4i_tk_u64map_free(m);
    return DSV4_ERR_OUT_OF_MEMORY;
  }
  for (size_t i = 0; i < m->cap; i++) m->keys[i] = U64_EMPTY;
  return DSV4_OK;
}

void dsv4i_tk_u64map_free(dsv4i_tk_u64map *m) {
  free(m->keys);
  free(m->vals);
  memset(m, 0, sizeof *m);
}

static dsv4_status u64map_grow(dsv4i_tk_u64map *m) {
  dsv4i_tk_u64map g;
  dsv4_status s = dsv4i_tk_u64map_init(&g, m->cap);
  if (s != DSV4_OK) return s;
  for (size_t i = 0; i < m->cap; i++)
    if (m->keys[i] != U64_EMPTY) dsv4i_tk_u64map_put(&g, m->keys[i], m->vals[i]);
  dsv4i_tk_u64map_free(m);
  *m = g;
  return DSV4_OK;
}

dsv4_status dsv4i_tk_u64map_put(dsv4i_tk_u64map *m, uint64_t key, uint64_t val) {
  if ((m->n + 1) * 2 > m->cap) {
    dsv4_status s = u64map_grow(m);
    if (s != DSV4_OK) return s;
  }
  size_t mask = m->cap - 1;
  for (size_t i = hash_u64(key) & mask;; i = (i + 1) & mask) {
    if (m->keys[i] == U64_EMPTY) {
      m->keys[i] = key;
      m->vals[i] = val;
      m->n++;
      return DSV4_OK;
    }
    if (m->keys[i] == key) {
      m->vals[i] = val;
      return DSV4_OK;
    }
  }
}

int dsv4i_tk_u64map_get(const dsv4i_tk_u64map *m, uint64_t key, uint64_t *val) {
  if (m->cap == 0) return 0;
  size_t mask = m->cap - 1;
  for (size_t i = hash_u64(key) & mask;; i = (i + 1) & mask) {
    if (m->keys[i] == U64_EMPTY) return 0;
    if (m->keys[i] == key) {
      *val = m->vals[i];
      return 1;
    }
  }
}
