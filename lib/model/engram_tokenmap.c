/*
 * Engram compressed token map (spec §5.2 a): the reference's normaliser
 * chain, a Hugging Face `tokenizers` normalizers.Sequence of
 *   NFKC, NFD, StripAccents, Lowercase, Replace(/[ \t\r\n]+/, " "),
 *   Replace(/^ $/, U+E000), Strip, Replace("U+E000", " "),
 * rebuilt on utf8proc, and first-seen class numbering.
 *
 * How each step matches the Rust implementation:
 *  - NFKC, NFD: utf8proc_map with COMPOSE|COMPAT resp. DECOMPOSE (+STABLE).
 *  - StripAccents removes every General_Category=Mark character (Mn, Mc and
 *    Me: tokenizers filters with unicode-normalization's is_combining_mark),
 *    not only Mn as the older Python BERT code did.
 *  - Lowercase is Rust's char::to_lowercase per character (no final-sigma
 *    context: "ΑΣ" -> "ασ"): the simple mapping utf8proc_tolower gives,
 *    except U+0130 'İ' -> "i\u0307" (the one unconditional multi-character
 *    entry of SpecialCasing.txt), special-cased below. In this chain NFD has
 *    already split U+0130 into I + U+0307 and StripAccents dropped the U+0307,
 *    so the special case cannot trigger; it keeps the step right on its own.
 *  - /^ $/ in Oniguruma (Ruby syntax, '\n' the only line end) can match only
 *    when the whole text is one space: every '\n' was collapsed before.
 *  - Strip trims Rust char::is_whitespace (the White_Space property) at both
 *    ends; the final Replace turns *every* U+E000 into a space, including one
 *    that was in the token itself.
 *
 * Checked against the Python `tokenizers` 0.23.3 chain on every Unicode
 * scalar value alone (1,112,064 strings) and on ~90 multi-character strings
 * (kept in tests/unit/test_engram_hash.c). With utf8proc 2.8 (Unicode 15.0)
 * 546 code points in 95 ranges differ, every one a Unicode-version skew:
 *  - tokenizers' normalisation and mark tables (unicode-normalization-
 *    alignments) are Unicode 9 era: marks added since (e.g. U+07FD,
 *    U+0898-089F, U+0AFA-0AFF, U+1ABF-1ACE and many SMP scripts) are kept by
 *    the reference and stripped here; compatibility decompositions added
 *    since (U+32FF, U+1F16C, U+A7F2-A7F4, U+1FBF0-1FBF9, U+1E030-1E06D,
 *    U+10780-107BA) are applied here only; U+1CF2/1CF3 (Mc in Unicode 9, Lo
 *    now) are stripped by the reference only;
 *  - Rust's lowercase tables are newer than utf8proc's: Unicode 16 case pairs
 *    (U+1C89, U+A7CB/CC/CE/D2/D4/DA/DC, U+10D50-10D65) are lowercased by the
 *    reference only.
 * None of these is in the fixtures' vocabularies (their maps are equal to the
 * goldens). For a real vocabulary the load-time class count check guards:
 * the map depends only on the partition of ids into classes (numbering is
 * first-seen), and a key difference that changes the partition merges or
 * splits a class, which changes the count.
 */
#include <stdlib.h>
#include <string.h>
#include <utf8proc.h>

#include "model/engram_hash.h"

/* Rust char::is_whitespace: Unicode White_Space (stable since Unicode 6.3). */
static int is_white_space(int32_t c) {
  return (c >= 0x09 && c <= 0x0d) || c == 0x20 || c == 0x85 || c == 0xa0 || c == 0x1680 ||
         (c >= 0x2000 && c <= 0x200a) || c == 0x2028 || c == 0x2029 || c == 0x202f ||
         c == 0x205f || c == 0x3000;
}

typedef struct cp_buf {
  int32_t *v;
  size_t n, cap;
} cp_buf;

static dsv4_status cp_push(cp_buf *b, int32_t c) {
  if (b->n == b->cap) {
    size_t cap = b->cap ? b->cap * 2 : 64;
    int32_t *p = dsv4i_realloc(b->v, cap * sizeof *p, "Engram normaliser code points");
    if (!p) return DSV4_ERR_OUT_OF_MEMORY;
    b->v = p;
    b->cap = cap;
  }
  b->v[b->n++] = c;
  return DSV4_OK;
}

static dsv4_status normalize_into(const char *text, size_t len, cp_buf *cps, dsv4i_str *out) {
  cps->n = 0;
  if (len > (size_t)PTRDIFF_MAX)
    return dsv4i_error(DSV4_ERR_INVALID_ARG, "Engram normaliser: text too long");
  utf8proc_uint8_t *nfkc = NULL, *nfd = NULL;
  utf8proc_ssize_t n1 =
      utf8proc_map((const utf8proc_uint8_t *)text, (utf8proc_ssize_t)len, &nfkc,
                   (utf8proc_option_t)(UTF8PROC_STABLE | UTF8PROC_COMPOSE | UTF8PROC_COMPAT));
  if (n1 < 0) {
    if (n1 == UTF8PROC_ERROR_NOMEM)
      return dsv4i_error(DSV4_ERR_OUT_OF_MEMORY, "Engram normaliser: out of memory (NFKC)");
    return dsv4i_error(DSV4_ERR_INVALID_UTF8, "Engram normaliser: NFKC failed: %s",
                       utf8proc_errmsg(n1));
  }
  utf8proc_ssize_t n2 = utf8proc_map(nfkc, n1, &nfd,
                                     (utf8proc_option_t)(UTF8PROC_STABLE | UTF8PROC_DECOMPOSE));
  free(nfkc);
  if (n2 < 0) {
    if (n2 == UTF8PROC_ERROR_NOMEM)
      return dsv4i_error(DSV4_ERR_OUT_OF_MEMORY, "Engram normaliser: out of memory (NFD)");
    return dsv4i_error(DSV4_ERR_INVALID_UTF8, "Engram normaliser: NFD failed: %s",
                       utf8proc_errmsg(n2));
  }
  /* StripAccents, Lowercase, whitespace runs -> one space */
  int in_run = 0;
  dsv4_status st = DSV4_OK;
  for (utf8proc_ssize_t i = 0; i < n2 && !st;) {
    utf8proc_int32_t c;
    utf8proc_ssize_t k = utf8proc_iterate(nfd + i, n2 - i, &c);
    if (k <= 0) { /* utf8proc's own output: cannot happen */
      free(nfd);
      return dsv4i_error(DSV4_ERR_INTERNAL, "Engram normaliser: bad utf8proc output");
    }
    i += k;
    utf8proc_category_t cat = utf8proc_category(c);
    if (cat == UTF8PROC_CATEGORY_MN || cat == UTF8PROC_CATEGORY_MC ||
        cat == UTF8PROC_CATEGORY_ME)
      continue;
    if (c == 0x130) {
      in_run = 0;
      st = cp_push(cps, 'i');
      if (!st) st = cp_push(cps, 0x307);
      continue;
    }
    c = utf8proc_tolower(c);
    if (c == ' ' || c == '\t' || c == '\r' || c == '\n') {
      if (!in_run) st = cp_push(cps, ' ');
      in_run = 1;
      continue;
    }
    in_run = 0;
    st = cp_push(cps, c);
  }
  free(nfd);
  if (st) return st;
  /* the lone-space sentinel survives Strip */
  if (cps->n == 1 && cps->v[0] == ' ') cps->v[0] = 0xe000;
  size_t b = 0, e = cps->n;
  while (b < e && is_white_space(cps->v[b])) b++;
  while (e > b && is_white_space(cps->v[e - 1])) e--;
  for (size_t i = b; i < e; i++) {
    utf8proc_uint8_t u[4];
    int32_t c = cps->v[i] == 0xe000 ? ' ' : cps->v[i];
    utf8proc_ssize_t k = utf8proc_encode_char(c, u);
    dsv4i_str_append(out, u, (size_t)k);
  }
  if (out->oom) return dsv4i_error(DSV4_ERR_OUT_OF_MEMORY, "Engram normaliser: out of memory");
  return DSV4_OK;
}

dsv4_status dsv4i_engram_normalize(const char *text, size_t len, dsv4i_str *out) {
  if ((!text && len) || !out)
    return dsv4i_error(DSV4_ERR_INVALID_ARG, "Engram normaliser: NULL argument");
  cp_buf cps = {0};
  dsv4_status st = normalize_into(text ? text : "", len, &cps, out);
  free(cps.v);
  return st;
}

/* ---- key -> class: open addressing over (bytes, length) ----------------- */

typedef struct key_slot {
  uint64_t hash;
  size_t off, len; /* key bytes in the arena */
  int32_t cls;     /* -1: empty */
} key_slot;

typedef struct key_map {
  key_slot *slots;
  size_t mask, used;
  char *arena;
  size_t arena_len, arena_cap;
} key_map;

static uint64_t fnv1a(const char *s, size_t n) {
  uint64_t h = 0xcbf29ce484222325ull;
  for (size_t i = 0; i < n; i++) {
    h ^= (unsigned char)s[i];
    h *= 0x100000001b3ull;
  }
  return h;
}

/* Class of key (s, n) into *cls, inserting it as class map->used when new. */
static dsv4_status key_map_class(key_map *m, const char *s, size_t n, int32_t *cls) {
  uint64_t h = fnv1a(s, n);
  size_t i = (size_t)h & m->mask;
  for (;; i = (i + 1) & m->mask) {
    key_slot *sl = &m->slots[i];
    if (sl->cls < 0) break;
    if (sl->hash == h && sl->len == n && memcmp(m->arena + sl->off, s, n) == 0) {
      *cls = sl->cls;
      return DSV4_OK;
    }
  }
  if (m->arena_len + n > m->arena_cap) {
    size_t cap = m->arena_cap ? m->arena_cap : 1u << 16;
    while (cap < m->arena_len + n) cap *= 2;
    char *p = dsv4i_realloc(m->arena, cap, "Engram token map keys");
    if (!p) return DSV4_ERR_OUT_OF_MEMORY;
    m->arena = p;
    m->arena_cap = cap;
  }
  if (n) memcpy(m->arena + m->arena_len, s, n);
  key_slot *sl = &m->slots[i];
  sl->hash = h;
  sl->off = m->arena_len;
  sl->len = n;
  sl->cls = (int32_t)m->used++;
  m->arena_len += n;
  *cls = sl->cls;
  return DSV4_OK;
}

static int has_replacement_char(const char *s, size_t n) {
  for (size_t i = 0; i + 2 < n; i++)
    if ((unsigned char)s[i] == 0xef && (unsigned char)s[i + 1] == 0xbf &&
        (unsigned char)s[i + 2] == 0xbd)
      return 1;
  return 0;
}

dsv4_status dsv4i_engram_token_map_build(const dsv4i_tokenizer *tok, int32_t **map,
                                         int32_t *n_tokens, int32_t *n_classes) {
  if (map) *map = NULL;
  if (!tok || !map || !n_tokens || !n_classes)
    return dsv4i_error(DSV4_ERR_INVALID_ARG, "Engram token map: NULL argument");
  const int32_t n = dsv4i_tokenizer_vocab_size(tok);
  if (n < 1) return dsv4i_error(DSV4_ERR_TOKENIZER, "Engram token map: empty tokenizer");
  dsv4_status st = DSV4_OK;
  key_map km = {0};
  cp_buf cps = {0};
  dsv4i_str text = {0}, norm = {0};
  int32_t *out = dsv4i_malloc((size_t)n * sizeof *out, "Engram token map");
  size_t n_slots = 1024;
  while (n_slots < 2 * (size_t)n) n_slots *= 2;
  km.slots = dsv4i_malloc(n_slots * sizeof *km.slots, "Engram token map index");
  if (!out || !km.slots) {
    st = DSV4_ERR_OUT_OF_MEMORY;
    goto done;
  }
  km.mask = n_slots - 1;
  for (size_t i = 0; i < n_slots; i++) km.slots[i].cls = -1;
  for (int32_t id = 0; id < n; id++) {
    text.len = 0;
    norm.len = 0;
    st = dsv4i_tokenizer_decode(tok, &id, 1, &text);
    if (st != DSV4_OK) {
      dsv4i_error_prefix("Engram token map: decoding id %d", id);
      goto done;
    }
    if (text.oom) {
      st = dsv4i_error(DSV4_ERR_OUT_OF_MEMORY, "Engram token map: out of memory");
      goto done;
    }
    const char *key;
    size_t key_len;
    if (has_replacement_char(text.buf, text.len)) {
      key = dsv4i_tokenizer_id_to_token(tok, id);
      if (!key) {
        st = dsv4i_error(DSV4_ERR_TOKENIZER, "Engram token map: id %d has no token string", id);
        goto done;
      }
      key_len = strlen(key);
    } else {
      st = normalize_into(text.buf ? text.buf : "", text.len, &cps, &norm);
      if (st != DSV4_OK) {
        dsv4i_error_prefix("Engram token map: id %d", id);
        goto done;
      }
      if (norm.len) {
        key = norm.buf;
        key_len = norm.len;
      } else {
        key = text.buf ? text.buf : "";
        key_len = text.len;
      }
    }
    if ((st = key_map_class(&km, key, key_len, &out[id]))) goto done;
  }
  *map = out;
  *n_tokens = n;
  *n_classes = (int32_t)km.used;
  out = NULL;
done:
  free(out);
  free(km.slots);
  free(km.arena);
  free(cps.v);
  dsv4i_str_free(&text);
  dsv4i_str_free(&norm);
  return st;
}

dsv4_status dsv4i_engram_tables_create(const dsv4i_config *cfg, const dsv4i_tokenizer *tok,
                                       dsv4i_engram_tables **out) {
  if (out) *out = NULL;
  if (!cfg || !tok || !out)
    return dsv4i_error(DSV4_ERR_INVALID_ARG, "Engram tables: NULL argument");
  if (cfg->n_engram < 1)
    return dsv4i_error(DSV4_ERR_INVALID_ARG, "Engram tables: the config has no Engram layers");
  int32_t *map = NULL, n_tokens = 0, n_classes = 0;
  dsv4_status st = dsv4i_engram_token_map_build(tok, &map, &n_tokens, &n_classes);
  if (st != DSV4_OK) return st;
  if (n_classes != cfg->engram_compressed_vocab_size)
    st = dsv4i_error(DSV4_ERR_TOKENIZER,
                     "Engram compressed token map: the tokenizer's %d ids normalise to %d "
                     "classes, text_config.engram_compressed_vocab_size is %d",
                     n_tokens, n_classes, cfg->engram_compressed_vocab_size);
  else
    st = dsv4i_engram_tables_create_from_map(cfg, map, n_tokens, out);
  free(map);
  return st;
}
