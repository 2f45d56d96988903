/*
 * Exported chat-format entry points: argument checks and error capture.
 * The work is lib/serve/chat_*.c.
 */
#include <stdlib.h>
#include <string.h>

#include "api/api_tokenizer.h"
#include "base/base.h"
#include "dsv4/dsv4.h"
#include "serve/chat.h"

#define CP_MIN (offsetof(dsv4_chat_params, reasoning_effort) + sizeof(int32_t))
#define KNOWN_CHAT_FLAGS \
  ((uint32_t)(DSV4_CHAT_F_PARSE_SPECIAL | DSV4_CHAT_F_KEEP_REASONING | DSV4_CHAT_F_NO_BOS))

struct dsv4_chat_parser {
  dsv4i_chat_parser *impl;
};

DSV4_API dsv4_status dsv4_chat_params_init(dsv4_chat_params *params, size_t struct_size) {
  dsv4i_error_clear();
  if (!params) return dsv4i_error(DSV4_ERR_INVALID_ARG, "dsv4_chat_params_init: params is NULL");
  if (struct_size < CP_MIN || struct_size > UINT32_MAX)
    return dsv4i_error(DSV4_ERR_PARAMS_SIZE,
                       "dsv4_chat_params_init: struct_size %zu is below the oldest supported size %zu",
                       struct_size, (size_t)CP_MIN);
  memset(params, 0, struct_size);
  params->struct_size = (uint32_t)struct_size;
  return DSV4_OK;
}

/* Params -> options; parse the conversation. */
static dsv4_status prepare(const char *conv, size_t len, const dsv4_chat_params *params,
                           dsv4i_chat_opts *o, uint32_t *flags, json_t **j, const char *fn) {
  dsv4_chat_params p;
  memset(&p, 0, sizeof p);
  if (params) {
    if (params->struct_size < CP_MIN)
      return dsv4i_error(DSV4_ERR_PARAMS_SIZE, "%s: params->struct_size %u is below the oldest "
                         "supported size %zu", fn, (unsigned)params->struct_size, (size_t)CP_MIN);
    memcpy(&p, params, params->struct_size < sizeof p ? params->struct_size : sizeof p);
  }
  if (p.mode != DSV4_CHAT_MODE_CHAT && p.mode != DSV4_CHAT_MODE_THINKING)
    return dsv4i_error(DSV4_ERR_INVALID_ARG, "%s: unknown mode %d", fn, (int)p.mode);
  if (p.flags & ~KNOWN_CHAT_FLAGS)
    return dsv4i_error(DSV4_ERR_INVALID_ARG, "%s: unknown flags 0x%x", fn,
                       (unsigned)(p.flags & ~KNOWN_CHAT_FLAGS));
  if (p.reasoning_effort < 0 || p.reasoning_effort > 100)
    return dsv4i_error(DSV4_ERR_INVALID_ARG, "%s: reasoning_effort %d outside 1..100 (0 = default)",
                       fn, (int)p.reasoning_effort);
  o->thinking = p.mode == DSV4_CHAT_MODE_THINKING;
  o->drop_thinking = !(p.flags & DSV4_CHAT_F_KEEP_REASONING);
  o->add_bos = !(p.flags & DSV4_CHAT_F_NO_BOS);
  o->effort = p.reasoning_effort ? p.reasoning_effort : 50;
  *flags = p.flags;
  json_error_t err;
  *j = json_loadb(conv, len, JSON_DECODE_ANY, &err);
  if (!*j) {
    /* jansson reports invalid UTF-8 as a parse error; keep the distinction */
    const int utf8 = json_error_code(&err) == json_error_invalid_utf8;
    return dsv4i_error(utf8 ? DSV4_ERR_INVALID_UTF8 : DSV4_ERR_JSON,
                       "%s: conversation JSON: %s (line %d, column %d)", fn, err.text, err.line,
                       err.column);
  }
  return DSV4_OK;
}

DSV4_API dsv4_status dsv4_chat_render(const char *conversation, size_t len,
                                      const dsv4_chat_params *params, char **text,
                                      size_t *text_len) {
  dsv4i_error_clear();
  if (text) *text = NULL;
  if (text_len) *text_len = 0;
  if (!conversation || !text)
    return dsv4i_error(DSV4_ERR_INVALID_ARG, "dsv4_chat_render: %s is NULL",
                       conversation ? "text" : "conversation");
  dsv4i_chat_opts o;
  uint32_t flags;
  json_t *j = NULL;
  dsv4_status s = prepare(conversation, len, params, &o, &flags, &j, "dsv4_chat_render");
  dsv4i_str t = {0}, m = {0};
  if (!s) s = dsv4i_chat_render(j, &o, &t, &m);
  json_decref(j);
  dsv4i_str_free(&m);
  if (s) {
    dsv4i_str_free(&t);
    return s;
  }
  if (!t.buf && !(t.buf = dsv4i_calloc(1, 1, "chat text"))) return DSV4_ERR_OUT_OF_MEMORY;
  *text = t.buf;
  if (text_len) *text_len = t.len;
  return DSV4_OK;
}

DSV4_API dsv4_status dsv4_chat_encode(const dsv4_tokenizer *tok, const char *conversation,
                                      size_t len, const dsv4_chat_params *params, int32_t **ids,
                                      size_t *n_ids) {
  dsv4i_error_clear();
  if (ids) *ids = NULL;
  if (n_ids) *n_ids = 0;
  if (!tok || !conversation || !ids || !n_ids)
    return dsv4i_error(DSV4_ERR_INVALID_ARG, "dsv4_chat_encode: %s is NULL",
                       !tok ? "tok" : !conversation ? "conversation" : !ids ? "ids" : "n_ids");
  dsv4i_chat_opts o;
  uint32_t flags;
  json_t *j = NULL;
  dsv4_status s = prepare(conversation, len, params, &o, &flags, &j, "dsv4_chat_encode");
  dsv4i_str t = {0}, m = {0};
  if (!s) s = dsv4i_chat_render(j, &o, &t, &m);
  json_decref(j);
  if (!s)
    s = dsv4i_tokenizer_encode_masked(tok->impl, t.buf ? t.buf : "", t.len,
                                      (flags & DSV4_CHAT_F_PARSE_SPECIAL) ? NULL : (const uint8_t *)m.buf,
                                      ids, n_ids);
  dsv4i_str_free(&t);
  dsv4i_str_free(&m);
  return s;
}

DSV4_API dsv4_status dsv4_chat_parser_create(int32_t mode, dsv4_chat_parser **out) {
  dsv4i_error_clear();
  if (out) *out = NULL;
  if (!out) return dsv4i_error(DSV4_ERR_INVALID_ARG, "dsv4_chat_parser_create: out is NULL");
  if (mode != DSV4_CHAT_MODE_CHAT && mode != DSV4_CHAT_MODE_THINKING)
    return dsv4i_error(DSV4_ERR_INVALID_ARG, "dsv4_chat_parser_create: unknown mode %d", (int)mode);
  dsv4_chat_parser *p = dsv4i_calloc(1, sizeof *p, "chat parser");
  if (!p) return DSV4_ERR_OUT_OF_MEMORY;
  dsv4_status s = dsv4i_chat_parser_create(mode == DSV4_CHAT_MODE_THINKING, &p->impl);
  if (s) {
    free(p);
    return s;
  }
  *out = p;
  return DSV4_OK;
}

DSV4_API dsv4_status dsv4_chat_parser_push(dsv4_chat_parser *parser, const char *text, size_t len,
                                           dsv4_chat_event_fn fn, void *user_data) {
  dsv4i_error_clear();
  if (!parser || !fn || (!text && len))
    return dsv4i_error(DSV4_ERR_INVALID_ARG, "dsv4_chat_parser_push: %s is NULL",
                       !parser ? "parser" : !fn ? "fn" : "text");
  return dsv4i_chat_parser_push(parser->impl, text ? text : "", len, fn, user_data);
}

DSV4_API dsv4_status dsv4_chat_parser_finish(dsv4_chat_parser *parser, dsv4_chat_event_fn fn,
                                             void *user_data) {
  dsv4i_error_clear();
  if (!parser || !fn)
    return dsv4i_error(DSV4_ERR_INVALID_ARG, "dsv4_chat_parser_finish: %s is NULL",
                       !parser ? "parser" : "fn");
  return dsv4i_chat_parser_finish(parser->impl, fn, user_data);
}

DSV4_API void dsv4_chat_parser_free(dsv4_chat_parser *parser) {
  if (!parser) return;
  dsv4i_chat_parser_free(parser->impl);
  free(parser);
}
