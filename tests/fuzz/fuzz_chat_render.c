/* libFuzzer: a chat request's conversation JSON (messages, tools, content
 * parts, tool calls) through dsv4_chat_render and dsv4_chat_encode, which
 * exercise the renderer (lib/serve/chat_render.c) and the Python-spelling
 * JSON writer (lib/serve/pyjson.c). Byte 0 holds the params (bit 0
 * thinking, bits 1-3 the DSV4_CHAT_F_* flags), byte 1 the reasoning effort
 * (byte % 101, 0 = default); the rest is the conversation. Oracles besides
 * the sanitizers:
 *  - a status from the documented set; on failure no text, on success a
 *    NUL-terminated text of the reported length that is valid UTF-8;
 *  - encode fails exactly when render fails, with the same status;
 *  - the ids are tokens of the tiny tokenizer (it has the chat markers as
 *    special tokens, as the release tokenizer) and decode (special
 *    tokens kept) to exactly the rendered text: nothing is lost or changed
 *    between rendering and tokenization. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "base/base.h"
#include "dsv4/dsv4.h"
#include "io/tokenizer_internal.h"
#include "fuzz_data.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static dsv4_tokenizer *g_tok;

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  if (size < 2) return 0;
  if (!g_tok && dsv4_tokenizer_load(fuzz_data_dir("data/tiny-tokenizer"), &g_tok) != DSV4_OK) abort();
  dsv4_chat_params p;
  if (dsv4_chat_params_init(&p, sizeof p) != DSV4_OK) abort();
  p.mode = data[0] & 1 ? DSV4_CHAT_MODE_THINKING : DSV4_CHAT_MODE_CHAT;
  p.flags = (uint32_t)(data[0] >> 1) & 7u;
  p.reasoning_effort = data[1] % 101;
  const char *conv = (const char *)data + 2;
  const size_t len = size - 2;

  char *text = (char *)1;
  size_t text_len = 1;
  const dsv4_status st = dsv4_chat_render(conv, len, &p, &text, &text_len);
  const char *what;
  if (st != DSV4_OK) {
    if (st != DSV4_ERR_INVALID_ARG && st != DSV4_ERR_JSON && st != DSV4_ERR_INVALID_UTF8 &&
        st != DSV4_ERR_UNSUPPORTED)
      abort();
    if (text || text_len || !dsv4_last_error()[0]) abort();
  } else {
    if (!text || strlen(text) != text_len || dsv4i_tk_utf8_check(text, text_len, &what) != text_len) abort();
  }

  int32_t *ids = (int32_t *)1;
  size_t n = 1;
  const dsv4_status se = dsv4_chat_encode(g_tok, conv, len, &p, &ids, &n);
  if (se != st) abort();
  if (se != DSV4_OK) {
    if (ids || n) abort();
  } else {
    const int32_t vocab = dsv4_tokenizer_vocab_size(g_tok);
    for (size_t i = 0; i < n; i++)
      if (ids[i] < 0 || ids[i] >= vocab) abort();
    size_t need = 0;
    if (dsv4_tokenizer_decode(g_tok, ids, n, 0, NULL, 0, &need) != DSV4_OK) abort();
    char *back = malloc(need + 1);
    if (!back) abort();
    if (dsv4_tokenizer_decode(g_tok, ids, n, 0, back, need + 1, &need) != DSV4_OK) abort();
    if (need != text_len || memcmp(back, text, need)) abort();
    free(back);
    dsv4_free(ids);
  }
  dsv4_free(text);
  return 0;
}
