/* libFuzzer: arbitrary bytes encoded with the tiny tokenizer. Invalid UTF-8
 * and NUL must be refused (DSV4_ERR_INVALID_UTF8); valid text must encode to
 * ids in range that decode back to exactly the same bytes (byte-level BPE,
 * no normalizer: the round trip is exact). */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "io/tokenizer.h"
#include "fuzz_data.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static dsv4i_tokenizer *g_tok;

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  if (!g_tok && dsv4i_tokenizer_load(fuzz_data_dir("data/tiny-tokenizer"), &g_tok) != DSV4_OK) abort();
  int32_t *ids = NULL;
  size_t n = 0;
  const dsv4_status st = dsv4i_tokenizer_encode(g_tok, (const char *)data, size, &ids, &n);
  if (st == DSV4_OK) {
    for (size_t i = 0; i < n; i++)
      if (ids[i] < 0 || ids[i] >= dsv4i_tokenizer_vocab_size(g_tok)) abort();
    dsv4i_str out = {0};
    if (dsv4i_tokenizer_decode(g_tok, ids, n, &out) != DSV4_OK) abort();
    if (out.len != size || (size && memcmp(out.buf, data, size) != 0)) abort();
    dsv4i_str_free(&out);
    free(ids);
  } else if (st != DSV4_ERR_INVALID_UTF8) {
    abort();
  }
  dsv4i_error_clear();
  return 0;
}
