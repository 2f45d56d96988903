/* A program that knows libdsv4 only as an installed package (pkg-config,
 * CMake's find_package or a Meson subproject): the version check, then a
 * short greedy generation from BOS + the prompt on the model folder argv[1],
 * which touches every dependency a static link must carry (JSON, regex,
 * Unicode, threads). Prints the generated text; exit 0 on success. */
#include <dsv4/dsv4.h>
#include <stdio.h>
#include <string.h>

static int fail(const char *what, dsv4_status s) {
  fprintf(stderr, "consumer: %s: %s: %s\n", what, dsv4_status_string(s), dsv4_last_error());
  return 1;
}

int main(int argc, char **argv) {
  printf("libdsv4 %s (header %s)\n", dsv4_version_string(), DSV4_VERSION_STRING);
  if (dsv4_version() != DSV4_VERSION_NUMBER) return 1;
  if (argc < 2) return 0;
  const char *prompt = "Every evening the old lamplighter";
  dsv4_engine *eng = NULL;
  dsv4_tokenizer *tok = NULL;
  dsv4_status s = dsv4_engine_create_from_dir(argv[1], NULL, &eng);
  if (s) return fail("engine", s);
  if ((s = dsv4_tokenizer_load(argv[1], &tok))) return fail("tokenizer", s);
  int32_t ids[64], next = 0;
  size_t n = 0;
  ids[0] = dsv4_tokenizer_special_id(tok, DSV4_TOKEN_BOS); /* the model input starts with BOS */
  if ((s = dsv4_tokenizer_encode(tok, prompt, strlen(prompt), ids + 1, 63, &n))) return fail("encode", s);
  int64_t seq = 0;
  if ((s = dsv4_engine_seq_create(eng, &seq))) return fail("sequence", s);
  if ((s = dsv4_engine_prefill(eng, seq, ids, (int64_t)n + 1, NULL, NULL, &next))) return fail("prefill", s);
  int32_t out[8];
  for (int i = 0; i < 8; i++) {
    out[i] = next;
    if ((s = dsv4_engine_decode(eng, 1, &seq, &out[i], NULL, NULL, &next))) return fail("decode", s);
  }
  char text[512];
  size_t len = 0;
  if ((s = dsv4_tokenizer_decode(tok, out, 8, 0, text, sizeof text, &len))) return fail("decode text", s);
  printf("%s%s\n", prompt, text);
  dsv4_tokenizer_free(tok);
  dsv4_engine_free(eng);
  return 0;
}
