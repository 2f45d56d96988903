/*
 * tokenizer.json (+ tokenizer_config.json) -> dsv4i_tokenizer, with jansson.
 *
 * Supported, i.e. what DeepSeek's and the fixtures' files use:
 *   model        BPE: vocab, merges ("a b" strings or [a, b] arrays), unk_token,
 *                fuse_unk, ignore_merges; dropout null/0, no subword prefix or
 *                suffix, byte_fallback false
 *   added_tokens id, content, special, lstrip, rstrip, single_word, normalized
 *   normalizer   null, Sequence, NFC, NFD, NFKC, NFKD
 *   pre_tokenizer null, Sequence, Split (Regex or String pattern, every
 *                behaviour, invert), ByteLevel (add_prefix_space, use_regex;
 *                last in the sequence)
 *   decoder      null (tokens joined with spaces) or ByteLevel
 * Anything else is DSV4_ERR_TOKENIZER naming the key and the kind found. The
 * post_processor is ignored: encode never adds special tokens.
 */
#include <errno.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "io/tokenizer_internal.h"
#include "io/json_util.h"

#define MAX_IDS (1 << 24) /* sanity bound on token ids */

/* Parse one JSON text (origin names it in messages); an object is required. */
static dsv4_status parse_json(const char *origin, const char *buf, size_t len, json_t **out) {
  *out = NULL;
  json_error_t jerr;
  json_t *root = json_loadb(buf, len, 0, &jerr);
  if (!root && dsv4i_json_oom(&jerr, origin)) return DSV4_ERR_OUT_OF_MEMORY;
  if (!root)
    return dsv4i_error(DSV4_ERR_JSON, "%s: line %d column %d: %s", origin, jerr.line, jerr.column,
                       jerr.text);
  if (!json_is_object(root)) {
    json_decref(root);
    return dsv4i_error(DSV4_ERR_JSON, "%s: top level is not a JSON object", origin);
  }
  *out = root;
  return DSV4_OK;
}

/* ---- model -------------------------------------------------------------- */

typedef struct vocab_ent {
  const char *key; /* jansson-owned until the blob is built */
  size_t len;
  int32_t id;
} vocab_ent;

static dsv4_status check_model_kind(const json_t *model) {
  const char *type = dsv4i_json_type(model);
  if (!type) {
    if (json_object_get(model, "merges")) return DSV4_OK; /* untagged BPE */
    return dsv4i_error(DSV4_ERR_TOKENIZER, "tokenizer.json: model has no \"type\" (only \"BPE\" is supported)");
  }
  if (strcmp(type, "BPE") != 0)
    return dsv4i_error(DSV4_ERR_TOKENIZER,
                       "tokenizer.json: model.type is \"%s\"; only \"BPE\" is supported", type);
  const json_t *v;
  if ((v = json_object_get(model, "dropout")) && !json_is_null(v) &&
      !(json_is_number(v) && json_number_value(v) == 0.0))
    return dsv4i_error(DSV4_ERR_TOKENIZER, "tokenizer.json: BPE dropout is not supported");
  if ((v = json_object_get(model, "continuing_subword_prefix")) && !json_is_null(v) &&
      !(json_is_string(v) && json_string_length(v) == 0))
    return dsv4i_error(DSV4_ERR_TOKENIZER, "tokenizer.json: BPE continuing_subword_prefix is not supported");
  if ((v = json_object_get(model, "end_of_word_suffix")) && !json_is_null(v) &&
      !(json_is_string(v) && json_string_length(v) == 0))
    return dsv4i_error(DSV4_ERR_TOKENIZER, "tokenizer.json: BPE end_of_word_suffix is not supported");
  if (dsv4i_json_bool(model, "byte_fallback", 0))
    return dsv4i_error(DSV4_ERR_TOKENIZER, "tokenizer.json: BPE byte_fallback is not supported");
  return DSV4_OK;
}

static dsv4_status read_vocab(const json_t *model, vocab_ent **out, size_t *n_out, int32_t *max_id) {
  const json_t *vocab = json_object_get(model, "vocab");
  if (!json_is_object(vocab))
    return dsv4i_error(DSV4_ERR_TOKENIZER, "tokenizer.json: model.vocab is missing or not an object");
  size_t n = json_object_size(vocab), i = 0;
  vocab_ent *v = dsv4i_calloc(n ? n : 1, sizeof *v, "tokenizer vocab");
  if (!v) return DSV4_ERR_OUT_OF_MEMORY;
  const char *key;
  size_t key_len;
  json_t *val;
  json_object_keylen_foreach((json_t *)vocab, key, key_len, val) {
    if (!json_is_integer(val) || json_integer_value(val) < 0 || json_integer_value(val) >= MAX_IDS) {
      free(v);
      return dsv4i_error(DSV4_ERR_TOKENIZER, "tokenizer.json: model.vocab[\"%s\"] is not an id in [0, %d)",
                         key, MAX_IDS);
    }
    v[i].key = key;
    v[i].len = key_len;
    v[i].id = (int32_t)json_integer_value(val);
    if (v[i].id > *max_id) *max_id = v[i].id;
    i++;
  }
  *out = v;
  *n_out = i;
  return DSV4_OK;
}

static dsv4_status read_added(const json_t *root, dsv4i_tokenizer *tok, int32_t *max_id) {
  const json_t *arr = json_object_get(root, "added_tokens");
  if (!arr || json_is_null(arr)) return DSV4_OK;
  if (!json_is_array(arr))
    return dsv4i_error(DSV4_ERR_TOKENIZER, "tokenizer.json: added_tokens is not an array");
  size_t n = json_array_size(arr);
  tok->added = dsv4i_calloc(n ? n : 1, sizeof *tok->added, "added tokens");
  if (!tok->added) return DSV4_ERR_OUT_OF_MEMORY;
  for (size_t i = 0; i < n; i++) {
    const json_t *t = json_array_get(arr, i);
    const json_t *id = json_object_get(t, "id"), *content = json_object_get(t, "content");
    if (!json_is_object(t) || !json_is_integer(id) || !json_is_string(content) ||
        json_integer_value(id) < 0 || json_integer_value(id) >= MAX_IDS)
      return dsv4i_error(DSV4_ERR_TOKENIZER,
                         "tokenizer.json: added_tokens[%zu] needs an integer \"id\" in [0, %d) and a string \"content\"",
                         i, MAX_IDS);
    dsv4i_tk_added *a = &tok->added[tok->n_added++];
    a->id = (int32_t)json_integer_value(id);
    a->content = dsv4i_strdup(json_string_value(content), "added token");
    if (!a->content) return DSV4_ERR_OUT_OF_MEMORY;
    a->special = (uint8_t)dsv4i_json_bool(t, "special", 0);
    a->lstrip = (uint8_t)dsv4i_json_bool(t, "lstrip", 0);
    a->rstrip = (uint8_t)dsv4i_json_bool(t, "rstrip", 0);
    a->single_word = (uint8_t)dsv4i_json_bool(t, "single_word", 0);
    a->normalized = (uint8_t)dsv4i_json_bool(t, "normalized", !a->special);
    if (a->id > *max_id) *max_id = a->id;
  }
  return DSV4_OK;
}

/* One blob with every vocab key, then every added token's content. */
static dsv4_status build_strings(dsv4i_tokenizer *tok, const vocab_ent *v, size_t nv) {
  size_t total = 0;
  for (size_t i = 0; i < nv; i++) total += v[i].len + 1;
  for (size_t i = 0; i < tok->n_added; i++) total += tok->added[i].match_len + 1;
  if (total > UINT32_MAX)
    return dsv4i_error(DSV4_ERR_TOKENIZER, "tokenizer.json: token strings exceed 4 GiB");
  tok->str_blob = dsv4i_malloc(total, "token strings");
  tok->str_off = dsv4i_malloc((size_t)tok->n_ids * sizeof *tok->str_off, "token strings");
  tok->flags = dsv4i_calloc((size_t)tok->n_ids, 1, "token flags");
  if (!tok->str_blob || !tok->str_off || !tok->flags) return DSV4_ERR_OUT_OF_MEMORY;
  tok->str_blob_len = total;
  dsv4_status st = dsv4i_tk_strmap_init(&tok->vocab, nv);
  if (st == DSV4_OK) st = dsv4i_tk_strmap_init(&tok->token_to_id, nv + tok->n_added);
  if (st != DSV4_OK) return st;
  size_t at = 0;
  for (size_t i = 0; i < nv; i++) {
    char *dst = tok->str_blob + at;
    memcpy(dst, v[i].key, v[i].len);
    dst[v[i].len] = '\0';
    if (!(tok->flags[v[i].id] & TK_F_MODEL)) tok->str_off[v[i].id] = (uint32_t)at;
    tok->flags[v[i].id] |= TK_F_MODEL;
    if ((st = dsv4i_tk_strmap_put(&tok->vocab, dst, v[i].len, v[i].id)) != DSV4_OK) return st;
    if ((st = dsv4i_tk_strmap_put(&tok->token_to_id, dst, v[i].len, v[i].id)) != DSV4_OK) return st;
    at += v[i].len + 1;
  }
  for (size_t i = 0; i < tok->n_added; i++) {
    /* id_to_token gives the matched (normalized) form, token_to_id takes
     * the content as written: both as the Rust tokenizer does */
    dsv4i_tk_added *a = &tok->added[i];
    char *dst = tok->str_blob + at;
    memcpy(dst, a->match, a->match_len + 1);
    tok->str_off[a->id] = (uint32_t)at; /* added tokens win over the model vocab */
    tok->flags[a->id] |= TK_F_ADDED | (a->special ? TK_F_SPECIAL : 0);
    if ((st = dsv4i_tk_strmap_put(&tok->token_to_id, a->content, strlen(a->content), a->id)) != DSV4_OK)
      return st;
    at += a->match_len + 1;
  }
  return DSV4_OK;
}

static dsv4_status merge_part_id(const dsv4i_tokenizer *tok, size_t rank, const char *whole,
                                 const char *part, size_t len, int32_t *id) {
  *id = dsv4i_tk_strmap_get(&tok->vocab, part, len);
  if (*id < 0)
    return dsv4i_error(DSV4_ERR_TOKENIZER,
                       "tokenizer.json: merge #%zu \"%s\" names \"%.*s\", which is not in the vocabulary",
                       rank, whole, (int)len, part);
  return DSV4_OK;
}

static dsv4_status read_merges(const json_t *model, dsv4i_tokenizer *tok) {
  const json_t *arr = json_object_get(model, "merges");
  size_t n = json_is_array(arr) ? json_array_size(arr) : 0;
  if (arr && !json_is_null(arr) && !json_is_array(arr))
    return dsv4i_error(DSV4_ERR_TOKENIZER, "tokenizer.json: model.merges is not an array");
  dsv4_status st = dsv4i_tk_u64map_init(&tok->merges, n);
  if (st != DSV4_OK) return st;
  dsv4i_str joined = {0}, shown = {0};
  for (size_t r = 0; r < n && st == DSV4_OK; r++) {
    const json_t *m = json_array_get(arr, r);
    const char *a, *b;
    size_t la, lb;
    shown.len = 0;
    if (json_is_string(m)) {
      a = json_string_value(m);
      const char *sp = strchr(a, ' ');
      if (!sp || strchr(sp + 1, ' ')) {
        st = dsv4i_error(DSV4_ERR_TOKENIZER, "tokenizer.json: merge #%zu \"%s\" is not two tokens separated by one space",
                         r, a);
        break;
      }
      la = (size_t)(sp - a);
      b = sp + 1;
      lb = strlen(b);
      dsv4i_str_append(&shown, a, la + 1 + lb);
    } else if (json_is_array(m) && json_array_size(m) == 2 && json_is_string(json_array_get(m, 0)) &&
               json_is_string(json_array_get(m, 1))) {
      a = json_string_value(json_array_get(m, 0));
      b = json_string_value(json_array_get(m, 1));
      la = strlen(a);
      lb = strlen(b);
      dsv4i_str_append(&shown, a, la);
      dsv4i_str_append(&shown, " ", 1);
      dsv4i_str_append(&shown, b, lb);
    } else {
      st = dsv4i_error(DSV4_ERR_TOKENIZER, "tokenizer.json: merge #%zu is neither \"a b\" nor [\"a\", \"b\"]", r);
      break;
    }
    int32_t ia, ib, im;
    const char *whole = dsv4i_str_cstr(&shown);
    if ((st = merge_part_id(tok, r, whole, a, la, &ia)) != DSV4_OK) break;
    if ((st = merge_part_id(tok, r, whole, b, lb, &ib)) != DSV4_OK) break;
    joined.len = 0;
    dsv4i_str_append(&joined, a, la);
    dsv4i_str_append(&joined, b, lb);
    if (joined.oom || shown.oom) {
      st = dsv4i_error(DSV4_ERR_OUT_OF_MEMORY, "out of memory reading merges");
      break;
    }
    if ((st = merge_part_id(tok, r, whole, joined.buf, joined.len, &im)) != DSV4_OK) break;
    /* a repeated pair keeps the later rank, as the Rust HashMap collect does */
    st = dsv4i_tk_u64map_put(&tok->merges, ((uint64_t)(uint32_t)ia << 32) | (uint32_t)ib,
                       ((uint64_t)r << 32) | (uint32_t)im);
  }
  dsv4i_str_free(&joined);
  dsv4i_str_free(&shown);
  return st;
}

/* ---- added tokens and special ids -------------------------------------- */

static dsv4_status normalize_added(dsv4i_tokenizer *tok) {
  for (size_t i = 0; i < tok->n_added; i++) {
    dsv4i_tk_added *a = &tok->added[i];
    dsv4i_str m = {0};
    if (a->normalized && tok->n_norms > 0) {
      dsv4_status st = dsv4i_tk_normalize(tok, a->content, strlen(a->content), &m);
      if (st != DSV4_OK) {
        dsv4i_str_free(&m);
        dsv4i_error_prefix("tokenizer.json: added token \"%s\"", a->content);
        return st;
      }
    } else {
      dsv4i_str_append(&m, a->content, strlen(a->content));
    }
    if (m.oom) {
      dsv4i_str_free(&m);
      return dsv4i_error(DSV4_ERR_OUT_OF_MEMORY, "out of memory for added tokens");
    }
    a->match = m.buf ? m.buf : dsv4i_strdup("", "added token");
    a->match_len = m.len;
    if (!a->match) return DSV4_ERR_OUT_OF_MEMORY;
  }
  return DSV4_OK;
}

static dsv4_status build_tries(dsv4i_tokenizer *tok) {
  dsv4i_tk_trie_init(&tok->trie_raw);
  dsv4i_tk_trie_init(&tok->trie_norm);
  for (size_t i = 0; i < tok->n_added; i++) {
    const dsv4i_tk_added *a = &tok->added[i];
    if (a->match_len == 0) continue; /* never matched */
    dsv4_status st = dsv4i_tk_trie_add(a->normalized ? &tok->trie_norm : &tok->trie_raw, a->match,
                                 a->match_len, (int32_t)i);
    if (st != DSV4_OK) return st;
  }
  return DSV4_OK;
}

static int32_t id_of(const dsv4i_tokenizer *tok, const char *s) {
  return s ? dsv4i_tk_strmap_get(&tok->token_to_id, s, strlen(s)) : -1;
}

/* tokenizer_config.json value: "text" or {"content": "text", ...}. */
static const char *config_token(const json_t *cfg, const char *key) {
  const json_t *v = cfg ? json_object_get(cfg, key) : NULL;
  if (json_is_object(v)) v = json_object_get(v, "content");
  return json_is_string(v) ? json_string_value(v) : NULL;
}

static int32_t first_present(const dsv4i_tokenizer *tok, const char *const *names, size_t n) {
  for (size_t i = 0; i < n; i++) {
    int32_t id = id_of(tok, names[i]);
    if (id >= 0) return id;
  }
  return -1;
}

static void find_special(dsv4i_tokenizer *tok, const json_t *cfg) {
  static const char *const bos[] = {"<｜begin▁of▁sentence｜>"};
  static const char *const eos[] = {"<｜end▁of▁sentence｜>"};
  static const char *const pad[] = {"<｜▁pad▁｜>"};
  static const char *const image[] = {"<｜deepseek_image｜>", "<｜image｜>", "<image>"};
  static const char *const noise[] = {"<｜dspark▁noise｜>"};
  dsv4i_special_ids *sp = &tok->special;
  sp->bos = id_of(tok, config_token(cfg, "bos_token"));
  if (sp->bos < 0) sp->bos = first_present(tok, bos, DSV4I_ARRAY_LEN(bos));
  sp->eos = id_of(tok, config_token(cfg, "eos_token"));
  if (sp->eos < 0) sp->eos = first_present(tok, eos, DSV4I_ARRAY_LEN(eos));
  sp->pad = id_of(tok, config_token(cfg, "pad_token"));
  if (sp->pad < 0) sp->pad = first_present(tok, pad, DSV4I_ARRAY_LEN(pad));
  sp->image = id_of(tok, config_token(cfg, "image_token"));
  if (sp->image < 0) sp->image = first_present(tok, image, DSV4I_ARRAY_LEN(image));
  sp->dspark_noise = id_of(tok, config_token(cfg, "dspark_noise_token"));
  if (sp->dspark_noise < 0) sp->dspark_noise = first_present(tok, noise, DSV4I_ARRAY_LEN(noise));
}

/* ---- load / free -------------------------------------------------------- */

static dsv4_status load_into(dsv4i_tokenizer *tok, const json_t *root, const json_t *cfg) {
  dsv4_status st;
  const json_t *model = json_object_get(root, "model");
  if (!json_is_object(model))
    return dsv4i_error(DSV4_ERR_TOKENIZER, "tokenizer.json: \"model\" is missing or not an object");
  if ((st = check_model_kind(model)) != DSV4_OK) return st;

  int32_t max_id = -1;
  vocab_ent *v = NULL;
  size_t nv = 0;
  if ((st = read_vocab(model, &v, &nv, &max_id)) != DSV4_OK) return st;
  if ((st = read_added(root, tok, &max_id)) != DSV4_OK) goto out;
  if ((st = dsv4i_tk_read_normalizer(json_object_get(root, "normalizer"), tok, 0)) != DSV4_OK) goto out;
  if ((st = normalize_added(tok)) != DSV4_OK) goto out;
  if (max_id < 0) {
    st = dsv4i_error(DSV4_ERR_TOKENIZER, "tokenizer.json: the vocabulary is empty");
    goto out;
  }
  tok->n_ids = max_id + 1;
  tok->n_model = (int32_t)nv;
  if ((st = build_strings(tok, v, nv)) != DSV4_OK) goto out;
  if ((st = read_merges(model, tok)) != DSV4_OK) goto out;

  tok->unk_id = -1;
  const json_t *unk = json_object_get(model, "unk_token");
  if (json_is_string(unk)) {
    tok->unk_id = dsv4i_tk_strmap_get(&tok->vocab, json_string_value(unk), json_string_length(unk));
    if (tok->unk_id < 0) {
      st = dsv4i_error(DSV4_ERR_TOKENIZER, "tokenizer.json: unk_token \"%s\" is not in the vocabulary",
                       json_string_value(unk));
      goto out;
    }
  }
  tok->fuse_unk = dsv4i_json_bool(model, "fuse_unk", 0);
  tok->ignore_merges = dsv4i_json_bool(model, "ignore_merges", 0);

  if ((st = dsv4i_tk_read_pretok(json_object_get(root, "pre_tokenizer"), tok, 0)) != DSV4_OK) goto out;
  for (size_t i = 0; i < tok->n_stages; i++)
    if (tok->stages[i].kind == TK_STAGE_BYTELEVEL && i + 1 != tok->n_stages) {
      st = dsv4i_error(DSV4_ERR_TOKENIZER,
                       "tokenizer.json: ByteLevel must be the last pre-tokenizer (found at %zu of %zu)",
                       i + 1, tok->n_stages);
      goto out;
    }
  tok->byte_level = tok->n_stages > 0 && tok->stages[tok->n_stages - 1].kind == TK_STAGE_BYTELEVEL;
  for (int b = 0; b < 256; b++) {
    char buf[4];
    size_t n = dsv4i_tk_utf8_put(dsv4i_tk_byte_to_cp((uint8_t)b), buf);
    tok->byte_id[b] = dsv4i_tk_strmap_get(&tok->vocab, buf, n);
  }
  if ((st = dsv4i_tk_read_decoder(json_object_get(root, "decoder"), tok)) != DSV4_OK) goto out;
  if ((st = build_tries(tok)) != DSV4_OK) goto out;
  find_special(tok, cfg);
  st = dsv4i_tk_build_token_bytes(tok);
out:
  free(v);
  return st;
}

dsv4_status dsv4i_tokenizer_load_text(const char *origin, const char *json, size_t len,
                                      const char *cfg_json, size_t cfg_len, dsv4i_tokenizer **out) {
  if (!out) return dsv4i_error(DSV4_ERR_INVALID_ARG, "tokenizer load: out is NULL");
  *out = NULL;
  if (!origin || !json)
    return dsv4i_error(DSV4_ERR_INVALID_ARG, "tokenizer load: origin or text is NULL");
  json_t *root = NULL, *cfg = NULL;
  dsv4i_tokenizer *tok = NULL;
  dsv4_status st = parse_json("tokenizer.json", json, len, &root);
  if (st == DSV4_OK && cfg_json) st = parse_json("tokenizer_config.json", cfg_json, cfg_len, &cfg);
  if (st == DSV4_OK) {
    tok = dsv4i_calloc(1, sizeof *tok, "tokenizer");
    st = tok ? load_into(tok, root, cfg) : DSV4_ERR_OUT_OF_MEMORY;
  }
  if (st != DSV4_OK && st != DSV4_ERR_OUT_OF_MEMORY) dsv4i_error_prefix("%s", origin);
  if (root) json_decref(root);
  if (cfg) json_decref(cfg);
  if (st != DSV4_OK) {
    dsv4i_tokenizer_free(tok);
    return st;
  }
  *out = tok;
  return DSV4_OK;
}

dsv4_status dsv4i_tokenizer_load(const char *dir, dsv4i_tokenizer **out) {
  if (!out) return dsv4i_error(DSV4_ERR_INVALID_ARG, "tokenizer load: out is NULL");
  *out = NULL;
  if (!dir) return dsv4i_error(DSV4_ERR_INVALID_ARG, "tokenizer load: dir is NULL");
  char *path = dsv4i_path_join(dir, "tokenizer.json");
  char *cpath = dsv4i_path_join(dir, "tokenizer_config.json");
  char *text = NULL, *ctext = NULL;
  size_t len = 0, clen = 0;
  dsv4_status st = DSV4_ERR_OUT_OF_MEMORY;
  if (path && cpath) st = dsv4i_read_file(path, (size_t)1 << 30, "tokenizer file", &text, &len);
  if (st == DSV4_OK) {
    st = dsv4i_read_file(cpath, (size_t)1 << 30, "tokenizer file", &ctext, &clen);
    if (st == DSV4_ERR_NOT_FOUND) { /* optional */
      dsv4i_error_clear();
      st = DSV4_OK;
    }
  }
  if (st == DSV4_OK) st = dsv4i_tokenizer_load_text(dir, text, len, ctext, clen, out);
  free(text);
  free(ctext);
  free(path);
  free(cpath);
  return st;
}

void dsv4i_tokenizer_free(dsv4i_tokenizer *tok) {
  if (!tok) return;
  free(tok->flags);
  free(tok->str_off);
  free(tok->str_blob);
  free(tok->bytes_off);
  free(tok->bytes_blob);
  dsv4i_tk_strmap_free(&tok->vocab);
  dsv4i_tk_strmap_free(&tok->token_to_id);
  dsv4i_tk_u64map_free(&tok->merges);
  for (size_t i = 0; i < tok->n_added; i++) {
    free(tok->added[i].content);
    free(tok->added[i].match);
  }
  free(tok->added);
  dsv4i_tk_trie_free(&tok->trie_raw);
  dsv4i_tk_trie_free(&tok->trie_norm);
  free(tok->norms);
  for (size_t i = 0; i < tok->n_stages; i++) dsv4i_tk_regex_free(&tok->stages[i].re);
  free(tok->stages);
  free(tok);
}

int32_t dsv4i_tokenizer_vocab_size(const dsv4i_tokenizer *tok) { return tok ? tok->n_ids : 0; }

const dsv4i_special_ids *dsv4i_tokenizer_special(const dsv4i_tokenizer *tok) {
  return tok ? &tok->special : NULL;
}

const char *dsv4i_tokenizer_id_to_token(const dsv4i_tokenizer *tok, int32_t id) {
  if (!tok || id < 0 || id >= tok->n_ids || !tok->flags[id]) return NULL;
  return tok->str_blob + tok->str_off[id];
}

int32_t dsv4i_tokenizer_token_to_id(const dsv4i_tokenizer *tok, const char *token, size_t len) {
  if (!tok || !token) return -1;
  return dsv4i_tk_strmap_get(&tok->token_to_id, token, len);
}
