/* The planted successor table; see gen_plant.h. */
#include "gen_plant.h"

#include <stdlib.h>
#include <string.h>

#include "gen_rng.h"

void gen_plant_free(gen_plant *p) {
  if (!p) return;
  free(p->succ);
  free(p->pred);
  free(p->sentence_ids);
  free(p->sentence);
  free(p->prompt);
  memset(p, 0, sizeof *p);
}

static int is_special(const dsv4i_special_ids *sp, int32_t id) {
  return id == sp->bos || id == sp->eos || id == sp->pad || id == sp->image ||
         id == sp->dspark_noise;
}

/* Sentence tokens: distinct, regular, and the prompt a token prefix. */
static dsv4_status encode_checked(const dsv4i_tokenizer *tok, gen_plant *p) {
  const dsv4i_special_ids *sp = dsv4i_tokenizer_special(tok);
  int32_t *pids = NULL;
  size_t np = 0;
  dsv4_status s = dsv4i_tokenizer_encode(tok, p->sentence, strlen(p->sentence), &p->sentence_ids,
                                         &p->n_sentence);
  if (s) return s;
  if (p->n_sentence < 2)
    return dsv4i_error(DSV4_ERR_INVALID_ARG, "planted sentence \"%s\" has fewer than 2 tokens",
                       p->sentence);
  for (size_t i = 0; i < p->n_sentence; i++) {
    int32_t t = p->sentence_ids[i];
    if (is_special(sp, t))
      return dsv4i_error(DSV4_ERR_INVALID_ARG, "planted sentence: token %zu is special (id %d)", i,
                         (int)t);
    for (size_t j = 0; j < i; j++)
      if (p->sentence_ids[j] == t)
        return dsv4i_error(DSV4_ERR_INVALID_ARG,
                           "planted sentence \"%s\": token id %d (\"%s\") occurs at %zu and %zu; "
                           "a successor table needs distinct tokens: reword it",
                           p->sentence, (int)t, dsv4i_tokenizer_id_to_token(tok, t), j, i);
  }
  s = dsv4i_tokenizer_encode(tok, p->prompt, strlen(p->prompt), &pids, &np);
  if (s) return s;
  int ok = np >= 1 && np < p->n_sentence &&
           memcmp(pids, p->sentence_ids, np * sizeof *pids) == 0 &&
           strncmp(p->sentence, p->prompt, strlen(p->prompt)) == 0;
  free(pids);
  if (!ok)
    return dsv4i_error(DSV4_ERR_INVALID_ARG,
                       "planted prompt \"%s\" is not a token prefix of the sentence \"%s\"",
                       p->prompt, p->sentence);
  p->n_prompt = np;
  return DSV4_OK;
}

/* Successors: the sentence chain, then one random cycle over the rest. */
static dsv4_status link_tokens(const dsv4i_tokenizer *tok, uint64_t seed, gen_plant *p) {
  const dsv4i_special_ids *sp = dsv4i_tokenizer_special(tok);
  int32_t n_tok = dsv4i_tokenizer_vocab_size(tok);
  for (int32_t v = 0; v < p->vocab; v++) p->succ[v] = p->pred[v] = -1;
  if (sp->bos >= 0) p->succ[sp->bos] = p->sentence_ids[0];
  for (size_t i = 0; i + 1 < p->n_sentence; i++)
    p->succ[p->sentence_ids[i]] = p->sentence_ids[i + 1];
  if (sp->eos >= 0) p->succ[p->sentence_ids[p->n_sentence - 1]] = sp->eos;

  int32_t *cyc = dsv4i_malloc((size_t)n_tok * sizeof *cyc, "plant cycle");
  if (!cyc) return DSV4_ERR_OUT_OF_MEMORY;
  int32_t n = 0;
  for (int32_t v = 0; v < n_tok; v++)
    if (!is_special(sp, v) && p->succ[v] < 0) cyc[n++] = v;
  /* cycle members: neither special nor in the sentence (whose tokens all
   * have successors by now) */
  gen_rng r;
  gen_rng_init(&r, seed, gen_hash_str("plant.cycle"), 0);
  for (int32_t i = n - 1; i > 0; i--) { /* Fisher-Yates */
    int32_t j = (int32_t)gen_rng_below(&r, (uint64_t)i + 1);
    int32_t t = cyc[i];
    cyc[i] = cyc[j];
    cyc[j] = t;
  }
  for (int32_t i = 0; n > 1 && i < n; i++) p->succ[cyc[i]] = cyc[(i + 1) % n];
  free(cyc);
  for (int32_t v = 0; v < p->vocab; v++)
    if (p->succ[v] >= 0) {
      if (p->pred[p->succ[v]] >= 0)
        return dsv4i_error(DSV4_ERR_INTERNAL, "plant: token %d has two predecessors",
                           (int)p->succ[v]);
      p->pred[p->succ[v]] = v;
    }
  return DSV4_OK;
}

dsv4_status gen_plant_make(const dsv4i_tokenizer *tok, int32_t vocab, const char *sentence,
                           const char *prompt, uint64_t seed, gen_plant *out) {
  memset(out, 0, sizeof *out);
  int32_t n_tok = dsv4i_tokenizer_vocab_size(tok);
  if (vocab < n_tok)
    return dsv4i_error(DSV4_ERR_INVALID_ARG, "plant: model vocab %d < tokenizer ids %d",
                       (int)vocab, (int)n_tok);
  out->vocab = vocab;
  out->bigram = 1.5f;
  out->random = 0.5f;
  out->sentence = dsv4i_strdup(sentence, "plant");
  out->prompt = dsv4i_strdup(prompt, "plant");
  out->succ = dsv4i_malloc((size_t)vocab * sizeof *out->succ, "plant");
  out->pred = dsv4i_malloc((size_t)vocab * sizeof *out->pred, "plant");
  dsv4_status s = DSV4_ERR_OUT_OF_MEMORY;
  if (out->sentence && out->prompt && out->succ && out->pred) {
    s = encode_checked(tok, out);
    if (!s) s = link_tokens(tok, seed, out);
  }
  if (s) gen_plant_free(out);
  return s;
}
