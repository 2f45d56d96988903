/*
 * The DeepSeek-V4.1 chat format (docs/serving.md, "Chat format"): prompt
 * rendering exactly as the release's encoder (encoding_dsv41.py) builds it,
 * tokenization that keeps message text from becoming special tokens, and a
 * streaming parser of the model's output (reasoning, content, DSML tool
 * calls).
 */
#ifndef DSV4I_SERVE_CHAT_H
#define DSV4I_SERVE_CHAT_H

#include <jansson.h>
#include <stdint.h>

#include "base/base.h"
#include "io/tokenizer.h"

/* The format's marker strings. */
#define DSV4I_CHAT_BOS "<\xef\xbd\x9c" "begin\xe2\x96\x81of\xe2\x96\x81sentence\xef\xbd\x9c>"
#define DSV4I_CHAT_EOS "<\xef\xbd\x9c" "end\xe2\x96\x81of\xe2\x96\x81sentence\xef\xbd\x9c>"
#define DSV4I_CHAT_DSML "\xef\xbd\x9c" "DSML\xef\xbd\x9c"
#define DSV4I_CHAT_THINK "<think>"
#define DSV4I_CHAT_THINK_END "</think>"

typedef struct dsv4i_chat_opts {
  int thinking;      /**< 1: thinking mode, 0: chat mode */
  int drop_thinking; /**< drop earlier turns' reasoning (the encoder's default) */
  int add_bos;
  int effort;        /**< reasoning effort 1..100 (thinking mode, rendered once) */
} dsv4i_chat_opts;

/**
 * Render a conversation (a JSON array of messages, or an object with
 * "messages" and optional top-level "tools") into *text; *mask gets one
 * byte per text byte, 1 where the byte came from the conversation itself
 * (message text, tool schemas and arguments) rather than from the format.
 * DSV4_ERR_INVALID_ARG (the message names the offending message),
 * DSV4_ERR_UNSUPPORTED (image content), DSV4_ERR_OUT_OF_MEMORY.
 */
dsv4_status dsv4i_chat_render(const json_t *conv, const dsv4i_chat_opts *o, dsv4i_str *text,
                              dsv4i_str *mask);

/* ---- output parser (chat_parse.c) ---- */

enum {
  DSV4I_CHAT_EV_REASONING = 1,
  DSV4I_CHAT_EV_CONTENT = 2,
  DSV4I_CHAT_EV_TOOL_CALL = 3, /**< text: {"name": ..., "arguments": ...} (JSON) */
  DSV4I_CHAT_EV_END = 4        /**< the end-of-sentence marker; text "" */
};
typedef void (*dsv4i_chat_event_fn)(int32_t kind, const char *text, size_t len, void *user);

typedef struct dsv4i_chat_parser dsv4i_chat_parser;
dsv4_status dsv4i_chat_parser_create(int thinking, dsv4i_chat_parser **out);
void dsv4i_chat_parser_free(dsv4i_chat_parser *p);
dsv4_status dsv4i_chat_parser_push(dsv4i_chat_parser *p, const char *text, size_t len,
                                   dsv4i_chat_event_fn fn, void *user);
dsv4_status dsv4i_chat_parser_finish(dsv4i_chat_parser *p, dsv4i_chat_event_fn fn, void *user);

#endif /* DSV4I_SERVE_CHAT_H */
