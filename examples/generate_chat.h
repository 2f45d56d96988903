/* dsv4-generate --chat: an interactive conversation in the V4.1 chat format. */
#ifndef DSV4_GENERATE_CHAT_H
#define DSV4_GENERATE_CHAT_H

#include <stdio.h>

#include "dsv4/dsv4.h"

typedef struct chat_opts {
  const char *system;          /**< system prompt or NULL */
  int thinking;                /**< thinking mode: reasoning goes to stderr */
  long max_tokens;             /**< per answer */
  double temp;
  unsigned long long seed;
  long threads, chunk;
  FILE *in;                    /**< user turns, one per line */
} chat_opts;

/** Run the conversation until end of input. Returns the exit status. */
int generate_chat(dsv4_model *model, dsv4_tokenizer *tok, const chat_opts *o);

#endif /* DSV4_GENERATE_CHAT_H */
