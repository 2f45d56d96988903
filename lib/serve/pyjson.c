/*
 * Python json.dumps spelling (see pyjson.h). Floats follow repr(): the
 * shortest digit string that reads back to the same double, written in
 * fixed notation when the decimal exponent is in [-4, 16), else as
 * d.ddde+XX with at least two exponent digits; integral fixed values get ".0".
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "serve/pyjson.h"

void dsv4i_pyjson_string(const char *s, size_t len, dsv4i_str *out) {
  dsv4i_str_append(out, "\"", 1);
  size_t run = 0; /* bytes copied verbatim since the last escape */
  for (size_t i = 0; i < len; i++) {
    const unsigned char c = (unsigned char)s[i];
    const char *esc = NULL;
    char u[8];
    switch (c) {
    case '"': esc = "\\\""; break;
    case '\\': esc = "\\\\"; break;
    case '\n': esc = "\\n"; break;
    case '\r': esc = "\\r"; break;
    case '\t': esc = "\\t"; break;
    case '\b': esc = "\\b"; break;
    case '\f': esc = "\\f"; break;
    default:
      if (c < 0x20) {
        snprintf(u, sizeof u, "\\u%04x", c);
        esc = u;
      }
    }
    if (!esc) {
      run++;
      continue;
    }
    dsv4i_str_append(out, s + i - run, run);
    dsv4i_str_append(out, esc, strlen(esc));
    run = 0;
  }
  dsv4i_str_append(out, s + len - run, run);
  dsv4i_str_append(out, "\"", 1);
}

static void dump_real(double d, dsv4i_str *out) {
  if (isnan(d)) {
    dsv4i_str_append(out, "NaN", 3);
    return;
  }
  if (isinf(d)) {
    dsv4i_str_appendf(out, "%sInfinity", d < 0 ? "-" : "");
    return;
  }
  char buf[40];
  int prec = 0;
  for (; prec < 17; prec++) { /* shortest %.Ne that reads back exactly */
    snprintf(buf, sizeof buf, "%.*e", prec, d);
    if (strtod(buf, NULL) == d) break;
  }
  /* buf: [-]d[.ddd]e[+-]XX -> sign, digits, decimal exponent */
  const char *p = buf;
  const int neg = *p == '-';
  if (neg) p++;
  char digits[24];
  int nd = 0;
  for (; *p && *p != 'e'; p++)
    if (*p != '.') digits[nd++] = *p;
  const int exp10 = atoi(p + 1);
  while (nd > 1 && digits[nd - 1] == '0') nd--;
  if (neg) dsv4i_str_append(out, "-", 1);
  const int decpt = exp10 + 1; /* digits d1 d2 ... = 0.d1d2... x 10^decpt */
  if (decpt > -4 && decpt <= 16) {
    if (decpt <= 0) {
      dsv4i_str_append(out, "0.", 2);
      for (int i = 0; i < -decpt; i++) dsv4i_str_append(out, "0", 1);
      dsv4i_str_append(out, digits, (size_t)nd);
    } else if (nd <= decpt) {
      dsv4i_str_append(out, digits, (size_t)nd);
      for (int i = nd; i < decpt; i++) dsv4i_str_append(out, "0", 1);
      dsv4i_str_append(out, ".0", 2);
    } else {
      dsv4i_str_append(out, digits, (size_t)decpt);
      dsv4i_str_append(out, ".", 1);
      dsv4i_str_append(out, digits + decpt, (size_t)(nd - decpt));
    }
    return;
  }
  dsv4i_str_append(out, digits, 1);
  if (nd > 1) {
    dsv4i_str_append(out, ".", 1);
    dsv4i_str_append(out, digits + 1, (size_t)(nd - 1));
  }
  dsv4i_str_appendf(out, "e%c%02d", exp10 < 0 ? '-' : '+', exp10 < 0 ? -exp10 : exp10);
}

void dsv4i_pyjson_dump(const json_t *v, dsv4i_str *out) {
  switch (json_typeof(v)) {
  case JSON_OBJECT: {
    const char *k;
    json_t *x;
    int first = 1;
    dsv4i_str_append(out, "{", 1);
    json_object_foreach((json_t *)v, k, x) {
      if (!first) dsv4i_str_append(out, ", ", 2);
      first = 0;
      dsv4i_pyjson_string(k, strlen(k), out);
      dsv4i_str_append(out, ": ", 2);
      dsv4i_pyjson_dump(x, out);
    }
    dsv4i_str_append(out, "}", 1);
    break;
  }
  case JSON_ARRAY: {
    dsv4i_str_append(out, "[", 1);
    for (size_t i = 0; i < json_array_size(v); i++) {
      if (i) dsv4i_str_append(out, ", ", 2);
      dsv4i_pyjson_dump(json_array_get(v, i), out);
    }
    dsv4i_str_append(out, "]", 1);
    break;
  }
  case JSON_STRING:
    dsv4i_pyjson_string(json_string_value(v), json_string_length(v), out);
    break;
  case JSON_INTEGER:
    dsv4i_str_appendf(out, "%lld", (long long)json_integer_value(v));
    break;
  case JSON_REAL:
    dump_real(json_real_value(v), out);
    break;
  case JSON_TRUE:
    dsv4i_str_append(out, "true", 4);
    break;
  case JSON_FALSE:
    dsv4i_str_append(out, "false", 5);
    break;
  default:
    dsv4i_str_append(out, "null", 4);
  }
}
