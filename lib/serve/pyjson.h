/*
 * JSON text spelled exactly as Python's json.dumps(value, ensure_ascii=False)
 * spells it: ", " and ": " separators, object keys in document order,
 * non-ASCII characters as themselves, shortest round-trip floats in repr()
 * form. The V4.1 chat format embeds tool schemas and arguments in this
 * spelling (docs/serving.md, "Chat format").
 */
#ifndef DSV4I_SERVE_PYJSON_H
#define DSV4I_SERVE_PYJSON_H

#include <jansson.h>

#include "base/base.h"

/** Append json.dumps(v, ensure_ascii=False) to *out (check out->oom). */
void dsv4i_pyjson_dump(const json_t *v, dsv4i_str *out);

/** Append json.dumps(s) of a string of len bytes (valid UTF-8). */
void dsv4i_pyjson_string(const char *s, size_t len, dsv4i_str *out);

#endif /* DSV4I_SERVE_PYJSON_H */
