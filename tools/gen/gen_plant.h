/*
 * The planted successor table of the default model (the idea of
 * the tiny-v41-e2e-a fixture's "planted bigram head").
 *
 * A sentence is tokenized with the model's tokenizer; its tokens t0..tn-1
 * must be distinct. The table maps BOS -> t0, ti -> ti+1 and tn-1 -> EOS,
 * and links every other regular token (not special, not in the sentence)
 * into one random cycle. Special tokens other than BOS have no successor,
 * ids past the tokenizer have none either. Every token is the successor of
 * at most one token (its predecessor).
 *
 * The weights carry it in the head: head row v is
 *   (bigram * rhat[pred(v)] + random * xi_v) / sqrt(dim)
 * where rhat[u] is u's stored (bf16) embedding row scaled to unit RMS and
 * xi_v a fresh N(0,1)-like row; rows without a predecessor are
 * random * xi_v / sqrt(dim). So head(norm(embed[u])) peaks at succ(u) by
 * about bigram * sqrt(dim) against a spread of about
 * sqrt(bigram^2 + random^2): greedy decoding from a prompt that is a prefix
 * of the sentence continues the sentence and then stops at EOS, as long as
 * the (damped) layers only nudge the residual stream.
 */
#ifndef DSV4_GEN_PLANT_H
#define DSV4_GEN_PLANT_H

#include <stddef.h>
#include <stdint.h>

#include "io/tokenizer.h"

/** The default sentence and the prompt that starts it (a prefix). With the
 *  project's tiny tokenizer (data/tiny-tokenizer) it is 13 distinct
 *  word tokens, the prompt its first 5. */
#define GEN_PLANT_SENTENCE \
  "Every evening the old lamplighter walked up Harrow Lane with his ladder."
#define GEN_PLANT_PROMPT "Every evening the old lamplighter"

typedef struct gen_plant {
  int32_t vocab;          /* rows of embed/head (config vocab) */
  int32_t *succ;          /* int32[vocab]: successor, -1 none */
  int32_t *pred;          /* int32[vocab]: the token whose successor this is, -1 none */
  int32_t *sentence_ids;  /* the sentence's tokens */
  size_t n_sentence;
  size_t n_prompt;        /* the prompt's tokens = the first n_prompt sentence tokens */
  char *sentence, *prompt;
  float bigram, random;   /* head mix (defaults 1.5 and 0.5, as the e2e fixture) */
} gen_plant;

/**
 * Build the table for `tok` with `vocab` model rows (>= the tokenizer's).
 * The prompt must be a prefix of the sentence that encodes to the first
 * tokens of the sentence's encoding. DSV4_ERR_INVALID_ARG with a message
 * (repeated token in the sentence, prompt not a token prefix, ...), the
 * tokenizer's statuses, DSV4_ERR_OUT_OF_MEMORY. *out zeroed on failure.
 */
dsv4_status gen_plant_make(const dsv4i_tokenizer *tok, int32_t vocab, const char *sentence,
                           const char *prompt, uint64_t seed, gen_plant *out);
void gen_plant_free(gen_plant *p);

#endif /* DSV4_GEN_PLANT_H */
