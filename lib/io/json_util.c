#include "io/json_util.h"

const char *dsv4i_json_kind(const json_t *v) {
  switch (json_typeof(v)) {
  case JSON_OBJECT: return "an object";
  case JSON_ARRAY: return "an array";
  case JSON_STRING: return "a string";
  case JSON_INTEGER: return "an integer";
  case JSON_REAL: return "a real number";
  case JSON_TRUE:
  case JSON_FALSE: return "a boolean";
  case JSON_NULL: return "null";
  }
  return "?";
}

int dsv4i_json_bool(const json_t *obj, const char *key, int dflt) {
  const json_t *v = json_object_get(obj, key);
  if (!v || json_is_null(v)) return dflt;
  return json_is_true(v);
}

const char *dsv4i_json_type(const json_t *obj) {
  const json_t *t = json_object_get(obj, "type");
  return json_is_string(t) ? json_string_value(t) : NULL;
}

dsv4_status dsv4i_json_oom(const json_error_t *je, const char *origin) {
  /* jansson gives every parse error a text; none means it could not start
   * (its lexer's first allocation failed) */
  if (json_error_code(je) != json_error_out_of_memory && je->text[0] != '\0') return DSV4_OK;
  return dsv4i_error(DSV4_ERR_OUT_OF_MEMORY, "%s: out of memory parsing JSON", origin);
}
