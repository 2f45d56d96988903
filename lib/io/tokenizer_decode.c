/*
 * ids -> text, as the Rust tokenizer's decode(ids, skip_special_tokens):
 * each id becomes its token string (added content first, then the model
 * vocab; ids naming no token are skipped), the ByteLevel decoder turns each
 * token whose characters are all in the byte alphabet into those bytes (any
 * other token stays as its UTF-8 string), and the bytes are made text with
 * String::from_utf8_lossy. Without a decoder the token strings are joined
 * with single spaces. The per-id bytes are computed once at load.
 */
#include <stdlib.h>
#include <string.h>

#include "io/tokenizer_internal.h"

dsv4_status dsv4i_tk_build_token_bytes(dsv4i_tokenizer *tok) {
  size_t total = 0;
  tok->bytes_off = dsv4i_malloc(((size_t)tok->n_ids + 1) * sizeof *tok->bytes_off, "token bytes");
  /* decoded bytes are never longer than the token string */
  tok->bytes_blob = dsv4i_malloc(tok->str_blob_len ? tok->str_blob_len : 1, "token bytes");
  if (!tok->bytes_off || !tok->bytes_blob) return DSV4_ERR_OUT_OF_MEMORY;
  for (int32_t id = 0; id < tok->n_ids; id++) {
    tok->bytes_off[id] = (uint32_t)total;
    if (!tok->flags[id]) continue;
    const char *s = tok->str_blob + tok->str_off[id];
    size_t len = strlen(s);
    char *dst = tok->bytes_blob + total;
    size_t n = 0;
    int mapped = tok->decoder == TK_DEC_BYTELEVEL;
    for (size_t i = 0; mapped && i < len;) {
      size_t cl;
      int b = dsv4i_tk_cp_to_byte(dsv4i_tk_utf8_get(s + i, len - i, &cl));
      if (b < 0) mapped = 0;
      else dst[n++] = (char)b;
      i += cl;
    }
    if (!mapped) {
      memcpy(dst, s, len);
      n = len;
    }
    total += n;
  }
  tok->bytes_off[tok->n_ids] = (uint32_t)total;
  return DSV4_OK;
}

static int skipped(const dsv4i_tokenizer *tok, int32_t id, int skip_special) {
  return id >= tok->n_ids || !tok->flags[id] || (skip_special && (tok->flags[id] & TK_F_SPECIAL));
}

dsv4_status dsv4i_tokenizer_token_bytes(const dsv4i_tokenizer *tok, int32_t id, dsv4i_str *out) {
  if (!tok || !out) return dsv4i_error(DSV4_ERR_INVALID_ARG, "token_bytes: NULL argument");
  if (id < 0 || id >= tok->n_ids)
    return dsv4i_error(DSV4_ERR_INVALID_TOKEN, "token id %d outside [0, %d)", (int)id, (int)tok->n_ids);
  uint32_t a = tok->bytes_off[id], b = tok->bytes_off[id + 1];
  dsv4i_str_append(out, tok->bytes_blob + a, b - a);
  if (out->oom) return dsv4i_error(DSV4_ERR_OUT_OF_MEMORY, "out of memory decoding token %d", (int)id);
  return DSV4_OK;
}

dsv4_status dsv4i_tokenizer_decode_ex(const dsv4i_tokenizer *tok, const int32_t *ids, size_t n,
                                      int skip_special, dsv4i_str *out) {
  if (!tok || !out || (!ids && n > 0)) return dsv4i_error(DSV4_ERR_INVALID_ARG, "decode: NULL argument");
  for (size_t i = 0; i < n; i++)
    if (ids[i] < 0)
      return dsv4i_error(DSV4_ERR_INVALID_TOKEN, "decode: ids[%zu] = %d is negative", i, (int)ids[i]);
  if (tok->decoder == TK_DEC_NONE) {
    int first = 1;
    for (size_t i = 0; i < n; i++) {
      if (skipped(tok, ids[i], skip_special)) continue;
      if (!first) dsv4i_str_append(out, " ", 1);
      first = 0;
      const char *s = tok->str_blob + tok->str_off[ids[i]];
      dsv4i_str_append(out, s, strlen(s));
    }
  } else {
    dsv4i_str raw = {0};
    for (size_t i = 0; i < n; i++) {
      if (skipped(tok, ids[i], skip_special)) continue;
      uint32_t a = tok->bytes_off[ids[i]], b = tok->bytes_off[ids[i] + 1];
      dsv4i_str_append(&raw, tok->bytes_blob + a, b - a);
    }
    if (raw.oom) out->oom = 1;
    else dsv4i_tk_utf8_lossy_append(raw.buf, raw.len, 0, out);
    dsv4i_str_free(&raw);
  }
  if (out->oom) return dsv4i_error(DSV4_ERR_OUT_OF_MEMORY, "out of memory decoding %zu ids", n);
  if (!out->buf) dsv4i_str_append(out, "", 0); /* always NUL-terminated */
  return DSV4_OK;
}

dsv4_status dsv4i_tokenizer_decode(const dsv4i_tokenizer *tok, const int32_t *ids, size_t n,
                                   dsv4i_str *out) {
  return dsv4i_tokenizer_decode_ex(tok, ids, n, 0, out);
}

/* ---- streaming ------------------------------------------------------------ */

void dsv4i_detok_init(dsv4i_detok *d, const dsv4i_tokenizer *tok, int skip_special) {
  memset(d, 0, sizeof *d);
  d->tok = tok;
  d->skip_special = skip_special;
}

void dsv4i_detok_free(dsv4i_detok *d) {
  dsv4i_str_free(&d->pending);
  memset(d, 0, sizeof *d);
}

dsv4_status dsv4i_detok_push(dsv4i_detok *d, int32_t id, dsv4i_str *out) {
  const dsv4i_tokenizer *tok = d->tok;
  if (!tok || !out) return dsv4i_error(DSV4_ERR_INVALID_ARG, "stream decode: NULL argument");
  if (id < 0) return dsv4i_error(DSV4_ERR_INVALID_TOKEN, "stream decode: id %d is negative", (int)id);
  if (skipped(tok, id, d->skip_special)) return DSV4_OK;
  if (tok->decoder == TK_DEC_NONE) {
    if (d->emitted) dsv4i_str_append(out, " ", 1);
    const char *s = tok->str_blob + tok->str_off[id];
    dsv4i_str_append(out, s, strlen(s));
    d->emitted = 1;
  } else {
    uint32_t a = tok->bytes_off[id], b = tok->bytes_off[id + 1];
    dsv4i_str_append(&d->pending, tok->bytes_blob + a, b - a);
    if (d->pending.oom) return dsv4i_error(DSV4_ERR_OUT_OF_MEMORY, "out of memory in stream decode");
    size_t used = dsv4i_tk_utf8_lossy_append(d->pending.buf, d->pending.len, 1, out);
    memmove(d->pending.buf, d->pending.buf + used, d->pending.len - used);
    d->pending.len -= used;
    d->emitted = 1;
  }
  if (!out->buf) dsv4i_str_append(out, "", 0);
  if (out->oom) return dsv4i_error(DSV4_ERR_OUT_OF_MEMORY, "out of memory in stream decode");
  return DSV4_OK;
}

dsv4_status dsv4i_detok_flush(dsv4i_detok *d, dsv4i_str *out) {
  if (!out) return dsv4i_error(DSV4_ERR_INVALID_ARG, "stream decode: NULL argument");
  if (d->pending.len) dsv4i_tk_utf8_lossy_append(d->pending.buf, d->pending.len, 0, out);
  d->pending.len = 0;
  d->emitted = 0;
  if (!out->buf) dsv4i_str_append(out, "", 0);
  if (out->oom) return dsv4i_error(DSV4_ERR_OUT_OF_MEMORY, "out of memory in stream decode");
  return DSV4_OK;
}
