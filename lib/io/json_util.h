/* Small jansson helpers shared by the JSON readers (safetensors headers,
 * config.json, tokenizer.json). */
#ifndef DSV4I_JSON_UTIL_H
#define DSV4I_JSON_UTIL_H

#include <jansson.h>

#include "base/base.h"

/** "an object", "an array", "a string", "an integer", "a real number", "a boolean", "null". */
const char *dsv4i_json_kind(const json_t *v);

/** obj[key] as a boolean; dflt when absent or null (any other non-true value is false). */
int dsv4i_json_bool(const json_t *obj, const char *key, int dflt);

/** obj["type"] when it is a string (borrowed), else NULL. */
const char *dsv4i_json_type(const json_t *obj);

/** After a failed json_load*: when jansson ran out of memory, record
 *  DSV4_ERR_OUT_OF_MEMORY naming `origin` and return it (not a parse error);
 *  else DSV4_OK and the caller reports the parse error. */
dsv4_status dsv4i_json_oom(const json_error_t *je, const char *origin);

#endif /* DSV4I_JSON_UTIL_H */
