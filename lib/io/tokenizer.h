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
/**
 * The same from the texts of tokenizer.json (len bytes) and, when cfg_json
 * is not NULL, tokenizer_config.json; `origin` prefixes messages. The
 * loader's core (and the fuzz target's entry). Statuses as above minus I/O.
 */
dsv4_status dsv4i_tokenizer_load_text(const char *origin, const char *json, size_t len,
                                      const char *cfg_json, size_t cfg_len, dsv4i_tokenizer **out);
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

/* ---- additions (keep the functions above as they are) ------------------
 * Every function here and above that takes a const dsv4i_tokenizer * only
 * reads it: after load, one tokenizer may be used by many threads at once. */

/** Id of an exact token string (added tokens first, then the model vocab); -1 if none. */
int32_t dsv4i_tokenizer_token_to_id(const dsv4i_tokenizer *tok, const char *token, size_t len);

/**
 * dsv4i_tokenizer_decode with the Rust tokenizer's skip_special_tokens.
 * Ids >= 0 that name no token (gaps, >= vocab size) contribute nothing, as
 * in the Rust tokenizer; a negative id is DSV4_ERR_INVALID_TOKEN (nothing
 * appended). *out is NUL-terminated afterwards.
 */
dsv4_status dsv4i_tokenizer_decode_ex(const dsv4i_tokenizer *tok, const int32_t *ids, size_t n,
                                      int skip_special, dsv4i_str *out);

/**
 * Streaming decode for generation: push ids one at a time and get the text
 * that is complete so far; bytes of a UTF-8 sequence that the next token may
 * still complete are held back. The concatenation of every push and a final
 * flush equals dsv4i_tokenizer_decode_ex of all the ids.
 */
typedef struct dsv4i_detok {
  const dsv4i_tokenizer *tok;
  int skip_special;
  int emitted;       /* something was emitted since init/flush (space joining without a decoder) */
  dsv4i_str pending; /* held-back bytes (at most 3) */
} dsv4i_detok;

void dsv4i_detok_init(dsv4i_detok *d, const dsv4i_tokenizer *tok, int skip_special);
void dsv4i_detok_free(dsv4i_detok *d);
/** Append the newly complete text for `id` to *out (maybe nothing). */
dsv4_status dsv4i_detok_push(dsv4i_detok *d, int32_t id, dsv4i_str *out);
/** Append what is held back (invalid bytes as U+FFFD) and start over. */
dsv4_status dsv4i_detok_flush(dsv4i_detok *d, dsv4i_str *out);

/**
 * dsv4i_tokenizer_encode where bytes with plain[i] != 0 never become part of
 * an added (special) token: such a match is encoded as ordinary text, the
 * way the Rust tokenizer treats special tokens with encode_special_tokens
 * set (for every added token here). Text between the remaining matches is
 * pre-tokenized as one piece, plain bytes included. plain NULL: encode.
 */
dsv4_status dsv4i_tokenizer_encode_masked(const dsv4i_tokenizer *tok, const char *text, size_t len,
                                          const uint8_t *plain, int32_t **ids, size_t *n_ids);

#endif /* DSV4I_TOKENIZER_H */
