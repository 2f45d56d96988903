/* libFuzzer: the text of tokenizer.json through the loader (vocabulary,
 * merges, added tokens, pre-tokenizer regexes); a tokenizer that loads must
 * encode and decode a fixed sentence without error. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "io/tokenizer.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  dsv4i_tokenizer *tok = NULL;
  if (dsv4i_tokenizer_load_text("fuzz", (const char *)data, size, NULL, 0, &tok) == DSV4_OK) {
    static const char text[] = "Every evening the old lamplighter 42 \xe6\x97\xa5!";
    int32_t *ids = NULL;
    size_t n = 0;
    if (dsv4i_tokenizer_encode(tok, text, strlen(text), &ids, &n) == DSV4_OK) {
      dsv4i_str out = {0};
      (void)dsv4i_tokenizer_decode(tok, ids, n, &out);
      dsv4i_str_free(&out);
      free(ids);
    }
    dsv4i_tokenizer_free(tok);
  }
  dsv4i_error_clear();
  return 0;
}
