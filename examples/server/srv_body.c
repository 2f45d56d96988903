/*
 * A request body received in pieces (libmicrohttpd hands the upload over in
 * chunks of any size) up to the server's --max-body limit. Kept apart from
 * the HTTP layer so that the whole path from body bytes to a parsed request
 * runs from memory (tests/fuzz/fuzz_server_request.c).
 */
#include <stdlib.h>
#include <string.h>

#include "srv.h"

int srv_body_add(srv_body *b, const char *piece, size_t n, size_t max) {
  if (b->too_large || !n) return 0;
  if (n > max || b->n > max - n) { /* over the limit: the rest is dropped, 413 at the end */
    b->too_large = 1;
    return 0;
  }
  if (b->n + n + 1 > b->cap) {
    size_t cap = b->cap ? b->cap : 4096;
    while (cap < b->n + n + 1) cap *= 2;
    char *nb = realloc(b->buf, cap);
    if (!nb) return -1;
    b->buf = nb;
    b->cap = cap;
  }
  memcpy(b->buf + b->n, piece, n);
  b->n += n;
  b->buf[b->n] = 0;
  return 0;
}

void srv_body_free(srv_body *b) {
  free(b->buf);
  memset(b, 0, sizeof *b);
}
