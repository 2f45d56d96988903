/*
 * Hugging Face tokenizer.json of the kind DeepSeek ships: byte-level BPE,
 * added/special tokens matched before pre-tokenization, Split pre-tokenizer
 * regexes (PCRE2, UTF + UCP), byte-level alphabet (spec §5.0).
 */
#ifndef DSV4I_TOKENIZER_H
#define DSV4I_TOKENIZER_H

#include <stddef.h>
#include <stdint.h>

#include "base/base.h"

typedef struct dsv4i_tokenizer dsv4i_tokenizer;

/** Special ids found in tokenizer.json / tokenizer_config.json (-1 if absent). */
typedef struct dsv4i_special_ids {
  int32_t bos, eos, pad, image, dspark_noise;
} dsv4i_special_ids;

/**
 * Load `dir`/tokenizer.json (+ tokenizer_config.json when present).
 * DSV4_ERR_NOT_FOUND, DSV4_ERR_IO, DSV4_ERR_JSON, DSV4_ERR_TOKENIZER
 * (other model type, merge naming an unknown token, bad regex, ...).
 */
dsv4_status dsv4i_tokenizer_load(const char *dir, dsv4i_tokenizer **out);
void dsv4i_tokenizer_free(dsv4i_tokenizer *tok);

int32_t dsv4i_tokenizer_vocab_size(const dsv4i_tokenizer *tok);
const dsv4i_special_ids *dsv4i_tokenizer_special(const dsv4i_tokenizer *tok);

/**
 * Encode UTF-8 text (len bytes, no NUL inside) without adding BOS.
 * *ids is malloc'd (free()); DSV4_ERR_INVALID_UTF8 for invalid UTF-8 or NUL.
 */
dsv4_status dsv4i_tokenizer_encode(const dsv4i_tokenizer *tok, const char *text, size_t len,
                                   int32_t **ids, size_t *n_ids);

/**
 * Append the raw bytes of token `id` (the byte-level alphabet mapped back to
 * bytes; special/added tokens as their content) to *out. The bytes may be a
 * partial UTF-8 sequence. DSV4_ERR_INVALID_TOKEN for an id out of range.
 */
dsv4_status dsv4i_tokenizer_token_bytes(const dsv4i_tokenizer *tok, int32_t id, dsv4i_str *out);

/** The vocabulary string of `id` as stored in tokenizer.json (borrowed); NULL if out of range. */
const char *dsv4i_tokenizer_id_to_token(const dsv4i_tokenizer *tok, int32_t id);

/**
 * Decode like the Rust tokenizer's decode([id...], skip_special_tokens=false):
 * concatenated token bytes, then invalid UTF-8 replaced by U+FFFD the way
 * String::from_utf8_lossy does. Appends to *out.
 */
dsv4_status dsv4i_tokenizer_decode(const dsv4i_tokenizer *tok, const int32_t *ids, size_t n,
                                   dsv4i_str *out);

#endif /* DSV4I_TOKENIZER_H */
