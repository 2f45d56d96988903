/*
 * The configs the generator writes: the tiny default (every structural
 * feature of V4.1 at fixture-sized dims) and the real-dimension one (the
 * release's dims, a chosen number of backbone layers). Both are written as
 * the nested V4.1 config.json (spec §2.1, the keys of the fixtures'
 * config.json) and read back through dsv4i_config_parse, so the generator
 * sees exactly what the loader will see.
 */
#ifndef DSV4_GEN_CONFIG_H
#define DSV4_GEN_CONFIG_H

#include <stdint.h>

#include "model/config.h"

/** Token facts the config takes from the tokenizer. */
typedef struct gen_tok_facts {
  int32_t vocab_size;          /* tokenizer ids (the config vocab for --tiny) */
  int32_t bos, eos, pad, image, noise;
  int32_t engram_classes;      /* compressed token map classes (Engram) */
} gen_tok_facts;

/** What to build. */
typedef struct gen_shape {
  int32_t real_dims;           /* 0: tiny (fixture dims); 1: release dims */
  int32_t n_layers;            /* backbone layers (real dims; tiny is always 10) */
  int32_t vision;              /* write a vision_config (real dims only) */
  int64_t engram_rows;         /* real dims: ~rows per Engram table; 0 = the release's */
} gen_shape;

/**
 * Build config.json text for `shape` and `tok` (malloc'd, NUL-terminated,
 * 2-space indented) and parse it into *cfg with dsv4i_config_parse.
 * Returns the status of the parse (the generator's own choices are always
 * valid; a failure means a bad option such as too few layers).
 */
dsv4_status gen_config_make(const gen_shape *shape, const gen_tok_facts *tok, char **json_out,
                            dsv4i_config *cfg);

/**
 * Engram table rows per layer for a prime-search start `vocab`: the sum of
 * each layer's bucket primes (spec §5.2 b, dsv4i_engram_primes), which the
 * config must carry as engram_num_embeddings. rows: int64[n_layers].
 */
dsv4_status gen_engram_rows(int64_t vocab, int32_t n_layers, int32_t max_ngram, int32_t n_heads,
                            int64_t *rows);

#endif /* DSV4_GEN_CONFIG_H */
