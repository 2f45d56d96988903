/* dsv4-bench: prompts (random ids or windows of a text file). */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "bench.h"

static uint64_t splitmix64(uint64_t *s) {
  uint64_t z = (*s += 0x9E3779B97F4A7C15ull);
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}

/* n prompts of len tokens: BOS then len - 1 tokens. */
void prompts_build(prompts *p, const opts *o, const dsv4_model_info *mi, dsv4_tokenizer *tok,
                          int n) {
  memset(p, 0, sizeof *p);
  p->n = n;
  p->len = o->prompt_len;
  p->ids = xcalloc((size_t)n, sizeof *p->ids);
  for (int i = 0; i < n; i++) {
    p->ids[i] = xcalloc((size_t)p->len, sizeof(int32_t));
    p->ids[i][0] = mi->bos_token_id;
  }
  if (p->len == 1) {
    p->source = o->prompt_file ? "file" : "random";
    return;
  }
  if (o->prompt_file) {
    size_t tl = 0, n_ids = 0;
    char *text = read_file(o->prompt_file, &tl);
    if (!text) die("cannot read --prompt-file %s: %s", o->prompt_file, strerror(errno));
    int32_t *all = xcalloc(tl + 1, sizeof *all);
    dsv4_status s = dsv4_tokenizer_encode(tok, text, tl, all, tl + 1, &n_ids);
    if (s) die("cannot encode %s: %s: %s", o->prompt_file, dsv4_status_string(s), dsv4_last_error());
    if (!n_ids) die("--prompt-file %s encodes to no tokens", o->prompt_file);
    p->source = "file";
    p->file_tokens = (int64_t)n_ids;
    /* sequence i starts at offset i * n_ids / n in the token stream, wrapping
     * around when the text is shorter than the prompt */
    for (int i = 0; i < n; i++) {
      const size_t start = (size_t)((uint64_t)i * n_ids / (uint64_t)n);
      for (int64_t j = 1; j < p->len; j++) p->ids[i][j] = all[(start + (size_t)(j - 1)) % n_ids];
    }
    free(all);
    free(text);
    return;
  }
  /* random: uniform over the ids below both vocabularies that name an
   * ordinary token (no special ids, no gaps) */
  const int32_t tv = dsv4_tokenizer_vocab_size(tok);
  const int32_t lim = tv < mi->vocab_size ? tv : mi->vocab_size;
  int32_t *pool = xcalloc((size_t)(lim > 0 ? lim : 1), sizeof *pool), np = 0;
  for (int32_t id = 0; id < lim; id++) {
    if (id == mi->bos_token_id || id == mi->eos_token_id || id == mi->pad_token_id ||
        id == mi->image_token_id || id == mi->dspark_noise_token_id)
      continue;
    if (!dsv4_tokenizer_token_text(tok, id)) continue;
    pool[np++] = id;
  }
  if (!np) die("the tokenizer has no ordinary token below the model's vocabulary");
  p->source = "random";
  p->usable_ids = np;
  for (int i = 0; i < n; i++) {
    uint64_t st = o->seed * 0x100000001B3ull + (uint64_t)i;
    for (int64_t j = 1; j < p->len; j++) p->ids[i][j] = pool[splitmix64(&st) % (uint64_t)np];
  }
  free(pool);
}

