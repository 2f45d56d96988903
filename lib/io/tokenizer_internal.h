/*
 * Private layout of dsv4i_tokenizer, shared by the tokenizer_*.c files only.
 *
 *   tokenizer_map.c      small open-addressing hash maps (string -> id, u64 -> u64)
 *   tokenizer_load.c     tokenizer.json / tokenizer_config.json (jansson), special ids
 *   tokenizer_pipeline.c normalizer, pre_tokenizer and decoder sections
 *   tokenizer_regex.c    Oniguruma-syntax pattern -> PCRE2, Split behaviours
 *   tokenizer_bytes.c    GPT-2 byte-level alphabet, UTF-8 validation and lossy decoding
 *   tokenizer_bpe.c      merges by rank (binary heap, the Rust tokenizer's order)
 *   tokenizer_encode.c   added tokens, normalizers, pre-tokenizer pipeline, encode
 *   tokenizer_decode.c   token bytes, decode, streaming decode
 *
 * After dsv4i_tokenizer_load() nothing in the structure changes: every
 * function taking a const dsv4i_tokenizer * may run on many threads at once.
 */
#ifndef DSV4I_TOKENIZER_INTERNAL_H
#define DSV4I_TOKENIZER_INTERNAL_H

#include <stddef.h>
#include <stdint.h>

#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>

#include "io/tokenizer.h"

/* ---- hash maps (tokenizer_map.c) ---------------------------------------- */

/* byte string -> int32 value; keys are borrowed (they live in the tokenizer's blobs) */
typedef struct dsv4i_tk_strmap {
  const char **keys;
  uint32_t *key_lens;
  int32_t *vals;
  size_t cap; /* power of two, 0 when empty */
  size_t n;
} dsv4i_tk_strmap;

dsv4_status dsv4i_tk_strmap_init(dsv4i_tk_strmap *m, size_t expected);
void dsv4i_tk_strmap_free(dsv4i_tk_strmap *m);
/** Insert or overwrite. */
dsv4_status dsv4i_tk_strmap_put(dsv4i_tk_strmap *m, const char *key, size_t len, int32_t val);
/** Value or -1. */
int32_t dsv4i_tk_strmap_get(const dsv4i_tk_strmap *m, const char *key, size_t len);

/* uint64 key -> uint64 value (key UINT64_MAX is reserved as "empty") */
typedef struct dsv4i_tk_u64map {
  uint64_t *keys;
  uint64_t *vals;
  size_t cap;
  size_t n;
} dsv4i_tk_u64map;

dsv4_status dsv4i_tk_u64map_init(dsv4i_tk_u64map *m, size_t expected);
void dsv4i_tk_u64map_free(dsv4i_tk_u64map *m);
dsv4_status dsv4i_tk_u64map_put(dsv4i_tk_u64map *m, uint64_t key, uint64_t val);
/** 1 and *val when found, else 0. */
int dsv4i_tk_u64map_get(const dsv4i_tk_u64map *m, uint64_t key, uint64_t *val);

/* ---- byte-level alphabet and UTF-8 (tokenizer_bytes.c) ------------------- */

/** GPT-2 bytes_to_unicode: code point of byte b (computed by its rule). */
uint32_t dsv4i_tk_byte_to_cp(uint8_t b);
/** Inverse: byte of code point cp, or -1 when cp is not in the alphabet. */
int dsv4i_tk_cp_to_byte(uint32_t cp);
/** Encode cp as UTF-8 into out[4]; returns the length. */
size_t dsv4i_tk_utf8_put(uint32_t cp, char *out);
/**
 * Strict UTF-8 check (no overlongs, surrogates, code points > U+10FFFF, or
 * truncated sequences) that also rejects NUL. Returns len when valid, else
 * the offset of the first bad byte; *what names the problem.
 */
size_t dsv4i_tk_utf8_check(const char *s, size_t len, const char **what);
/** Decode one code point of valid UTF-8 at s (len > 0); *n gets its length. */
uint32_t dsv4i_tk_utf8_get(const char *s, size_t len, size_t *n);
/**
 * Append bytes [s, s+len) to *out, invalid sequences replaced by U+FFFD the
 * way Rust's String::from_utf8_lossy does (one U+FFFD per maximal invalid
 * subpart). With hold_tail, a final sequence that is incomplete but could
 * still become valid is not consumed. Returns the bytes consumed.
 */
size_t dsv4i_tk_utf8_lossy_append(const char *s, size_t len, int hold_tail, dsv4i_str *out);

/* ---- regex (tokenizer_regex.c) ----------------------------------------- */

typedef struct dsv4i_tk_regex {
  pcre2_code *code;
  char *source; /* the pattern as written in tokenizer.json */
} dsv4i_tk_regex;

/**
 * Compile an Oniguruma-syntax pattern (what the Rust tokenizer uses) with
 * PCRE2 (UTF, UCP, MULTILINE, JIT when available). literal: a "String"
 * pattern, matched as is. DSV4_ERR_TOKENIZER on a compile error.
 */
dsv4_status dsv4i_tk_regex_compile(dsv4i_tk_regex *re, const char *pattern, size_t len, int literal);
void dsv4i_tk_regex_free(dsv4i_tk_regex *re);

/** One piece of a split: bytes [start, end) of the subject. */
typedef struct dsv4i_tk_span {
  size_t start, end;
  int is_match;
} dsv4i_tk_span;

typedef struct dsv4i_tk_spanvec {
  dsv4i_tk_span *v;
  size_t n, cap;
} dsv4i_tk_spanvec;

/**
 * find_matches of the Rust tokenizer over subject [s, s+len): alternating
 * non-match / match spans covering the subject (onig find_iter semantics for
 * empty matches). md: match data from the caller (one per thread).
 */
dsv4_status dsv4i_tk_regex_find(const dsv4i_tk_regex *re, const char *s, size_t len, pcre2_match_data *md,
                          dsv4i_tk_spanvec *out);

/* ---- model ------------------------------------------------------------- */

enum { TK_SPLIT_REMOVED, TK_SPLIT_ISOLATED, TK_SPLIT_MERGED_PREV, TK_SPLIT_MERGED_NEXT,
       TK_SPLIT_CONTIGUOUS };

/** Apply a Split behaviour (and invert) to spans in place; empty spans stay (dropped later). */
void dsv4i_tk_split_behavior(dsv4i_tk_spanvec *spans, int behavior, int invert);

enum { TK_STAGE_SPLIT, TK_STAGE_BYTELEVEL };

typedef struct dsv4i_tk_stage {
  int kind;
  int behavior;         /* TK_SPLIT_* */
  int invert;
  int add_prefix_space; /* ByteLevel */
  int use_regex;        /* ByteLevel: split with the GPT-2 pattern first */
  dsv4i_tk_regex re;          /* Split pattern, or the GPT-2 pattern for ByteLevel use_regex */
} dsv4i_tk_stage;

enum { TK_NORM_NFC, TK_NORM_NFD, TK_NORM_NFKC, TK_NORM_NFKD };

typedef struct dsv4i_tk_added {
  char *content;    /* as in tokenizer.json */
  char *match;      /* what is matched: content, normalized when normalized=true */
  size_t match_len;
  int32_t id;
  uint8_t special, lstrip, rstrip, single_word, normalized;
} dsv4i_tk_added;

/* byte trie over added-token contents (leftmost-longest matching) */
typedef struct dsv4i_tk_trie_node {
  int32_t first_child;  /* -1 none */
  int32_t next_sibling; /* -1 none */
  int32_t token;        /* index into added[] ending here, -1 none */
  uint8_t byte;
} dsv4i_tk_trie_node;

typedef struct dsv4i_tk_trie {
  dsv4i_tk_trie_node *nodes; /* node 0 = root */
  size_t n, cap;
  int32_t root_child[256]; /* children of the root by byte, -1 none */
} dsv4i_tk_trie;

/** Token flags, per id. */
enum { TK_F_MODEL = 1, TK_F_ADDED = 2, TK_F_SPECIAL = 4 };

enum { TK_DEC_NONE, TK_DEC_BYTELEVEL };

struct dsv4i_tokenizer {
  int32_t n_ids;            /* max id + 1 over the model vocab and the added tokens */
  int32_t n_model;          /* entries in model.vocab */
  uint8_t *flags;           /* [n_ids] TK_F_* (0: no token has this id) */
  uint32_t *str_off;        /* [n_ids] id_to_token string (added content first) in str_blob */
  char *str_blob;           /* NUL-terminated strings */
  size_t str_blob_len;
  uint32_t *bytes_off;      /* [n_ids + 1] decoder bytes of each id in bytes_blob */
  char *bytes_blob;

  dsv4i_tk_strmap vocab;          /* model vocab string -> id */
  dsv4i_tk_strmap token_to_id;    /* added tokens, then model vocab */
  dsv4i_tk_u64map merges;         /* (left id << 32 | right id) -> (rank << 32 | merged id) */
  int32_t byte_id[256];     /* byte-level: id of each byte's alphabet char, -1 if absent */
  int32_t unk_id;           /* -1 none */
  int fuse_unk;
  int ignore_merges;
  int byte_level;           /* the pre-tokenizer ends with ByteLevel */

  dsv4i_tk_added *added;
  size_t n_added;
  dsv4i_tk_trie trie_raw;         /* added tokens with normalized = false */
  dsv4i_tk_trie trie_norm;        /* added tokens with normalized = true */

  int *norms;               /* TK_NORM_* applied in order (flattened Sequence) */
  size_t n_norms;
  dsv4i_tk_stage *stages;         /* flattened pre-tokenizer Sequence */
  size_t n_stages;
  int decoder;              /* TK_DEC_* */

  dsv4i_special_ids special;
};

/* ---- pieces (tokenizer_bpe.c) ------------------------------------------ */

typedef struct dsv4i_tk_idvec {
  int32_t *v;
  size_t n, cap;
} dsv4i_tk_idvec;

dsv4_status dsv4i_tk_idvec_push(dsv4i_tk_idvec *v, int32_t id);

/** Scratch buffers of one encode call (never shared between threads). */
typedef struct dsv4i_tk_bpe_scratch {
  void *sym;
  size_t sym_cap;
  void *heap;
  size_t heap_cap;
} dsv4i_tk_bpe_scratch;

void dsv4i_tk_bpe_scratch_free(dsv4i_tk_bpe_scratch *s);

/**
 * Run the BPE model on one pre-tokenized word (raw bytes; mapped through the
 * byte-level alphabet when tok->byte_level) and append its ids to *out.
 */
dsv4_status dsv4i_tk_bpe_word(const dsv4i_tokenizer *tok, const char *word, size_t len,
                        dsv4i_tk_bpe_scratch *scratch, dsv4i_tk_idvec *out);

/* ---- tries (tokenizer_encode.c) ---------------------------------------- */

dsv4_status dsv4i_tk_trie_add(dsv4i_tk_trie *t, const char *s, size_t len, int32_t token);
void dsv4i_tk_trie_init(dsv4i_tk_trie *t);
void dsv4i_tk_trie_free(dsv4i_tk_trie *t);

/* ---- tokenizer.json sections (tokenizer_pipeline.c); json_t is jansson's -- */
struct json_t;
dsv4_status dsv4i_tk_read_normalizer(const struct json_t *n, dsv4i_tokenizer *tok, int depth);
dsv4_status dsv4i_tk_read_pretok(const struct json_t *p, dsv4i_tokenizer *tok, int depth);
dsv4_status dsv4i_tk_read_decoder(const struct json_t *d, dsv4i_tokenizer *tok);

/** Apply the normalizers to s into *out (tokenizer_encode.c). */
dsv4_status dsv4i_tk_normalize(const dsv4i_tokenizer *tok, const char *s, size_t len, dsv4i_str *out);

/** Fill bytes_off / bytes_blob from the id strings and the decoder (tokenizer_decode.c). */
dsv4_status dsv4i_tk_build_token_bytes(dsv4i_tokenizer *tok);

#endif /* DSV4I_TOKENIZER_INTERNAL_H */
