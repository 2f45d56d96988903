/* The public tokenizer handle, shared by the API files that take one. */
#ifndef DSV4I_API_TOKENIZER_H
#define DSV4I_API_TOKENIZER_H

#include "base/base.h"
#include "io/tokenizer.h"

struct dsv4_tokenizer {
  dsv4i_tokenizer *impl;
  char last_error[DSV4I_ERROR_CAP];
};

#endif /* DSV4I_API_TOKENIZER_H */
