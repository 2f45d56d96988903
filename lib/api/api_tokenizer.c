/*
 * Exported tokenizer entry points: argument checks, the caller-buffer
 * conventions of dsv4.h, error capture into the thread-local and per-handle
 * slots. The work is lib/io/tokenizer_*.c.
 */
#include <stdlib.h>
#include <string.h>

#include "base/base.h"
#include "dsv4/dsv4.h"
#include "api/api_tokenizer.h"
#include "io/tokenizer.h"

struct dsv4_tokenizer_stream {
  dsv4i_detok d;
  dsv4i_str out; /* text handed out by the last push/flush */
};

#define KNOWN_DECODE_FLAGS ((uint32_t)DSV4_DECODE_F_SKIP_SPECIAL)

/* Copy the thread's message into the handle's slot when a call on it fails. */
static dsv4_status on_handle(dsv4_tokenizer *tok, dsv4_status s) {
  if (s < 0 && tok) {
    strncpy(tok->last_error, dsv4i_error_message(), DSV4I_ERROR_CAP - 1);
    tok->last_error[DSV4I_ERROR_CAP - 1] = '\0';
  }
  return s;
}

DSV4_API dsv4_status dsv4_tokenizer_load(const char *dir, dsv4_tokenizer **out) {
  dsv4i_error_clear();
  if (out) *out = NULL;
  if (!dir || !out)
    return dsv4i_error(DSV4_ERR_INVALID_ARG, "dsv4_tokenizer_load: %s is NULL", dir ? "out" : "dir");
  dsv4_tokenizer *t = dsv4i_calloc(1, sizeof *t, "tokenizer handle");
  if (!t) return DSV4_ERR_OUT_OF_MEMORY;
  dsv4_status s = dsv4i_tokenizer_load(dir, &t->impl);
  if (s != DSV4_OK) {
    free(t);
    return s;
  }
  *out = t;
  return DSV4_OK;
}

DSV4_API void dsv4_tokenizer_free(dsv4_tokenizer *tok) {
  if (!tok) return;
  dsv4i_tokenizer_free(tok->impl);
  free(tok);
}

DSV4_API const char *dsv4_tokenizer_last_error(const dsv4_tokenizer *tok) {
  return tok ? tok->last_error : "";
}

DSV4_API int32_t dsv4_tokenizer_vocab_size(const dsv4_tokenizer *tok) {
  return tok ? dsv4i_tokenizer_vocab_size(tok->impl) : 0;
}

DSV4_API int32_t dsv4_tokenizer_special_id(const dsv4_tokenizer *tok, int32_t kind) {
  if (!tok) return -1;
  const dsv4i_special_ids *sp = dsv4i_tokenizer_special(tok->impl);
  switch (kind) {
  case DSV4_TOKEN_BOS: return sp->bos;
  case DSV4_TOKEN_EOS: return sp->eos;
  case DSV4_TOKEN_PAD: return sp->pad;
  case DSV4_TOKEN_IMAGE: return sp->image;
  case DSV4_TOKEN_DSPARK_NOISE: return sp->dspark_noise;
  default: return -1;
  }
}

DSV4_API int32_t dsv4_tokenizer_token_id(const dsv4_tokenizer *tok, const char *token) {
  if (!tok || !token) return -1;
  return dsv4i_tokenizer_token_to_id(tok->impl, token, strlen(token));
}

DSV4_API const char *dsv4_tokenizer_token_text(const dsv4_tokenizer *tok, int32_t id) {
  return tok ? dsv4i_tokenizer_id_to_token(tok->impl, id) : NULL;
}

DSV4_API dsv4_status dsv4_tokenizer_encode(dsv4_tokenizer *tok, const char *text, size_t len,
                                           int32_t *ids, size_t cap, size_t *n_ids) {
  dsv4i_error_clear();
  if (n_ids) *n_ids = 0;
  if (!tok || !n_ids)
    return on_handle(tok, dsv4i_error(DSV4_ERR_INVALID_ARG, "dsv4_tokenizer_encode: %s is NULL",
                                      tok ? "n_ids" : "tok"));
  if (!text && len > 0)
    return on_handle(tok, dsv4i_error(DSV4_ERR_INVALID_ARG, "dsv4_tokenizer_encode: text is NULL, len %zu", len));
  int32_t *v = NULL;
  size_t n = 0;
  dsv4_status s = dsv4i_tokenizer_encode(tok->impl, text ? text : "", len, &v, &n);
  if (s != DSV4_OK) return on_handle(tok, s);
  if (ids && cap < n) {
    free(v);
    *n_ids = n;
    return on_handle(tok, dsv4i_error(DSV4_ERR_INVALID_ARG,
                                      "dsv4_tokenizer_encode: ids holds %zu entries, %zu needed", cap, n));
  }
  if (ids && n) memcpy(ids, v, n * sizeof *ids);
  free(v);
  *n_ids = n;
  return DSV4_OK;
}

DSV4_API dsv4_status dsv4_tokenizer_decode(dsv4_tokenizer *tok, const int32_t *ids, size_t n_ids,
                                           uint32_t flags, char *text, size_t cap, size_t *len) {
  dsv4i_error_clear();
  if (len) *len = 0;
  if (!tok || !len)
    return on_handle(tok, dsv4i_error(DSV4_ERR_INVALID_ARG, "dsv4_tokenizer_decode: %s is NULL",
                                      tok ? "len" : "tok"));
  if (!ids && n_ids > 0)
    return on_handle(tok, dsv4i_error(DSV4_ERR_INVALID_ARG, "dsv4_tokenizer_decode: ids is NULL, n_ids %zu", n_ids));
  if (flags & ~KNOWN_DECODE_FLAGS)
    return on_handle(tok, dsv4i_error(DSV4_ERR_INVALID_ARG, "dsv4_tokenizer_decode: unknown flags 0x%x",
                                      (unsigned)(flags & ~KNOWN_DECODE_FLAGS)));
  dsv4i_str out = {0};
  dsv4_status s = dsv4i_tokenizer_decode_ex(tok->impl, ids, n_ids,
                                            (flags & DSV4_DECODE_F_SKIP_SPECIAL) != 0, &out);
  if (s != DSV4_OK) {
    dsv4i_str_free(&out);
    return on_handle(tok, s);
  }
  *len = out.len;
  if (text && cap < out.len + 1) {
    size_t need = out.len;
    dsv4i_str_free(&out);
    return on_handle(tok, dsv4i_error(DSV4_ERR_INVALID_ARG,
                                      "dsv4_tokenizer_decode: text holds %zu bytes, %zu needed (with the terminator)",
                                      cap, need + 1));
  }
  if (text) {
    memcpy(text, dsv4i_str_cstr(&out), out.len);
    text[out.len] = '\0';
  }
  dsv4i_str_free(&out);
  return DSV4_OK;
}

DSV4_API dsv4_status dsv4_tokenizer_stream_create(const dsv4_tokenizer *tok, uint32_t flags,
                                                  dsv4_tokenizer_stream **out) {
  dsv4i_error_clear();
  if (out) *out = NULL;
  if (!tok || !out)
    return dsv4i_error(DSV4_ERR_INVALID_ARG, "dsv4_tokenizer_stream_create: %s is NULL", tok ? "out" : "tok");
  if (flags & ~KNOWN_DECODE_FLAGS)
    return dsv4i_error(DSV4_ERR_INVALID_ARG, "dsv4_tokenizer_stream_create: unknown flags 0x%x",
                       (unsigned)(flags & ~KNOWN_DECODE_FLAGS));
  dsv4_tokenizer_stream *st = dsv4i_calloc(1, sizeof *st, "tokenizer stream");
  if (!st) return DSV4_ERR_OUT_OF_MEMORY;
  dsv4i_detok_init(&st->d, tok->impl, (flags & DSV4_DECODE_F_SKIP_SPECIAL) != 0);
  *out = st;
  return DSV4_OK;
}

DSV4_API void dsv4_tokenizer_stream_free(dsv4_tokenizer_stream *st) {
  if (!st) return;
  dsv4i_detok_free(&st->d);
  dsv4i_str_free(&st->out);
  free(st);
}

static dsv4_status stream_out(dsv4_tokenizer_stream *st, dsv4_status s, const char **text, size_t *len) {
  if (s != DSV4_OK) {
    st->out.len = 0;
    if (st->out.buf) st->out.buf[0] = '\0';
  }
  *text = dsv4i_str_cstr(&st->out);
  *len = st->out.len;
  return s;
}

DSV4_API dsv4_status dsv4_tokenizer_stream_push(dsv4_tokenizer_stream *st, int32_t id,
                                                const char **text, size_t *len) {
  dsv4i_error_clear();
  if (text) *text = "";
  if (len) *len = 0;
  if (!st || !text || !len)
    return dsv4i_error(DSV4_ERR_INVALID_ARG, "dsv4_tokenizer_stream_push: NULL argument");
  st->out.len = 0;
  st->out.oom = 0;
  if (st->out.buf) st->out.buf[0] = '\0';
  return stream_out(st, dsv4i_detok_push(&st->d, id, &st->out), text, len);
}

DSV4_API dsv4_status dsv4_tokenizer_stream_flush(dsv4_tokenizer_stream *st, const char **text,
                                                 size_t *len) {
  dsv4i_error_clear();
  if (text) *text = "";
  if (len) *len = 0;
  if (!st || !text || !len)
    return dsv4i_error(DSV4_ERR_INVALID_ARG, "dsv4_tokenizer_stream_flush: NULL argument");
  st->out.len = 0;
  st->out.oom = 0;
  if (st->out.buf) st->out.buf[0] = '\0';
  return stream_out(st, dsv4i_detok_flush(&st->d, &st->out), text, len);
}
