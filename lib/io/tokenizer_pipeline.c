/*
 * tokenizer.json "normalizer", "pre_tokenizer" and "decoder" -> the
 * tokenizer's normalizer list, pre-tokenizer stages (flattened Sequence) and
 * decoder kind. What is supported is listed in tokenizer_load.c.
 */
#include <jansson.h>
#include <stdlib.h>
#include <string.h>

#include "io/tokenizer_internal.h"
#include "io/json_util.h"

dsv4_status dsv4i_tk_read_normalizer(const json_t *n, dsv4i_tokenizer *tok, int depth) {
  if (!n || json_is_null(n)) return DSV4_OK;
  const char *type = json_is_object(n) ? dsv4i_json_type(n) : NULL;
  if (!type || depth > 8)
    return dsv4i_error(DSV4_ERR_TOKENIZER, "tokenizer.json: normalizer without a \"type\"");
  if (strcmp(type, "Sequence") == 0) {
    const json_t *arr = json_object_get(n, "normalizers");
    if (!json_is_array(arr))
      return dsv4i_error(DSV4_ERR_TOKENIZER, "tokenizer.json: normalizer Sequence without \"normalizers\"");
    for (size_t i = 0; i < json_array_size(arr); i++) {
      dsv4_status st = dsv4i_tk_read_normalizer(json_array_get(arr, i), tok, depth + 1);
      if (st != DSV4_OK) return st;
    }
    return DSV4_OK;
  }
  int kind;
  if (strcmp(type, "NFC") == 0) kind = TK_NORM_NFC;
  else if (strcmp(type, "NFD") == 0) kind = TK_NORM_NFD;
  else if (strcmp(type, "NFKC") == 0) kind = TK_NORM_NFKC;
  else if (strcmp(type, "NFKD") == 0) kind = TK_NORM_NFKD;
  else
    return dsv4i_error(DSV4_ERR_TOKENIZER,
                       "tokenizer.json: normalizer \"%s\" is not supported (null, Sequence, NFC, NFD, NFKC, NFKD are)",
                       type);
  int *nn = dsv4i_realloc(tok->norms, (tok->n_norms + 1) * sizeof *nn, "normalizers");
  if (!nn) return DSV4_ERR_OUT_OF_MEMORY;
  tok->norms = nn;
  tok->norms[tok->n_norms++] = kind;
  return DSV4_OK;
}

static dsv4_status push_stage(dsv4i_tokenizer *tok, dsv4i_tk_stage **out) {
  dsv4i_tk_stage *ns = dsv4i_realloc(tok->stages, (tok->n_stages + 1) * sizeof *ns, "pre-tokenizers");
  if (!ns) return DSV4_ERR_OUT_OF_MEMORY;
  tok->stages = ns;
  *out = &ns[tok->n_stages++];
  memset(*out, 0, sizeof **out);
  return DSV4_OK;
}

/* The GPT-2 pattern ByteLevel splits with when use_regex is set. */
static const char gpt2_pattern[] =
    "'s|'t|'re|'ve|'m|'ll|'d| ?\\p{L}+| ?\\p{N}+| ?[^\\s\\p{L}\\p{N}]+|\\s+(?!\\S)|\\s+";

dsv4_status dsv4i_tk_read_pretok(const json_t *p, dsv4i_tokenizer *tok, int depth) {
  if (!p || json_is_null(p)) return DSV4_OK;
  const char *type = json_is_object(p) ? dsv4i_json_type(p) : NULL;
  if (!type || depth > 8)
    return dsv4i_error(DSV4_ERR_TOKENIZER, "tokenizer.json: pre_tokenizer without a \"type\"");
  dsv4_status st;
  dsv4i_tk_stage *s;
  if (strcmp(type, "Sequence") == 0) {
    const json_t *arr = json_object_get(p, "pretokenizers");
    if (!json_is_array(arr))
      return dsv4i_error(DSV4_ERR_TOKENIZER, "tokenizer.json: pre_tokenizer Sequence without \"pretokenizers\"");
    for (size_t i = 0; i < json_array_size(arr); i++)
      if ((st = dsv4i_tk_read_pretok(json_array_get(arr, i), tok, depth + 1)) != DSV4_OK) return st;
    return DSV4_OK;
  }
  if (strcmp(type, "Split") == 0) {
    const json_t *pat = json_object_get(p, "pattern");
    const json_t *rx = json_is_object(pat) ? json_object_get(pat, "Regex") : NULL;
    const json_t *lit = json_is_object(pat) ? json_object_get(pat, "String") : NULL;
    const json_t *pv = json_is_string(rx) ? rx : lit;
    if (!json_is_string(pv))
      return dsv4i_error(DSV4_ERR_TOKENIZER,
                         "tokenizer.json: Split pre-tokenizer needs pattern {\"Regex\": ...} or {\"String\": ...}");
    const json_t *bj = json_object_get(p, "behavior");
    const char *b = json_is_string(bj) ? json_string_value(bj) : "";
    int beh;
    if (strcmp(b, "Removed") == 0) beh = TK_SPLIT_REMOVED;
    else if (strcmp(b, "Isolated") == 0) beh = TK_SPLIT_ISOLATED;
    else if (strcmp(b, "MergedWithPrevious") == 0) beh = TK_SPLIT_MERGED_PREV;
    else if (strcmp(b, "MergedWithNext") == 0) beh = TK_SPLIT_MERGED_NEXT;
    else if (strcmp(b, "Contiguous") == 0) beh = TK_SPLIT_CONTIGUOUS;
    else
      return dsv4i_error(DSV4_ERR_TOKENIZER, "tokenizer.json: Split behavior \"%s\" is unknown", b);
    if ((st = push_stage(tok, &s)) != DSV4_OK) return st;
    s->kind = TK_STAGE_SPLIT;
    s->behavior = beh;
    s->invert = dsv4i_json_bool(p, "invert", 0);
    return dsv4i_tk_regex_compile(&s->re, json_string_value(pv), json_string_length(pv), pv == lit);
  }
  if (strcmp(type, "ByteLevel") == 0) {
    if ((st = push_stage(tok, &s)) != DSV4_OK) return st;
    s->kind = TK_STAGE_BYTELEVEL;
    s->add_prefix_space = dsv4i_json_bool(p, "add_prefix_space", 1);
    s->use_regex = dsv4i_json_bool(p, "use_regex", 1);
    s->behavior = TK_SPLIT_ISOLATED;
    if (s->use_regex) return dsv4i_tk_regex_compile(&s->re, gpt2_pattern, strlen(gpt2_pattern), 0);
    return DSV4_OK;
  }
  return dsv4i_error(DSV4_ERR_TOKENIZER,
                     "tokenizer.json: pre_tokenizer \"%s\" is not supported (Sequence, Split, ByteLevel are)",
                     type);
}

dsv4_status dsv4i_tk_read_decoder(const json_t *d, dsv4i_tokenizer *tok) {
  tok->decoder = TK_DEC_NONE;
  if (!d || json_is_null(d)) return DSV4_OK;
  const char *type = json_is_object(d) ? dsv4i_json_type(d) : NULL;
  if (type && strcmp(type, "ByteLevel") == 0) {
    tok->decoder = TK_DEC_BYTELEVEL;
    return DSV4_OK;
  }
  return dsv4i_error(DSV4_ERR_TOKENIZER,
                     "tokenizer.json: decoder \"%s\" is not supported (null and ByteLevel are)",
                     type ? type : "(no type)");
}
