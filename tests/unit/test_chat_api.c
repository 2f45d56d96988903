/*
 * The V4.1 chat format through the public API, against golden vectors made
 * by the release's encoder and parser (tests/data/chat/make_chat_goldens.py):
 * rendered text, ids with and without special-token parsing of message
 * text, and output parsing with every split of the text into two pushes
 * and byte by byte.
 */
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "dsv4/dsv4.h"
#include "test_util.h"

static json_t *goldens;
static dsv4_tokenizer *tok;

static int setup(void **state) {
  (void)state;
  char *path = tu_join(getenv("DSV4_SOURCE_ROOT"), "tests/data/chat/goldens.json");
  json_error_t e;
  goldens = json_load_file(path, 0, &e);
  if (!goldens) fprintf(stderr, "%s: %s\n", path, e.text);
  /* the default model's tokenizer (data/tiny-tokenizer): it has the chat markers */
  char *dir = tu_join(getenv("DSV4_BUILD_ROOT"), "models/dsv4-tiny");
  dsv4_status s = dsv4_tokenizer_load(dir, &tok);
  if (s) fprintf(stderr, "tokenizer: %s\n", dsv4_last_error());
  free(path);
  free(dir);
  return goldens && tok ? 0 : -1;
}

static int teardown(void **state) {
  (void)state;
  json_decref(goldens);
  dsv4_tokenizer_free(tok);
  return 0;
}

/* The generator's options -> params; the conversation text into *conv. */
static void case_params(const json_t *c, dsv4_chat_params *p, char **conv) {
  assert_int_equal(dsv4_chat_params_init(p, sizeof *p), DSV4_OK);
  const json_t *o = json_object_get(c, "options");
  const char *mode = json_string_value(json_object_get(o, "thinking_mode"));
  p->mode = !strcmp(mode, "thinking") ? DSV4_CHAT_MODE_THINKING : DSV4_CHAT_MODE_CHAT;
  if (json_is_false(json_object_get(o, "drop_thinking"))) p->flags |= DSV4_CHAT_F_KEEP_REASONING;
  if (json_is_false(json_object_get(o, "add_default_bos_token"))) p->flags |= DSV4_CHAT_F_NO_BOS;
  const json_t *eff = json_object_get(o, "reasoning_effort");
  if (json_is_integer(eff)) p->reasoning_effort = (int32_t)json_integer_value(eff);
  if (json_is_string(eff)) {
    const char *n = json_string_value(eff);
    p->reasoning_effort = !strcmp(n, "low") ? 25 : !strcmp(n, "high") ? 50 : !strcmp(n, "xhigh") ? 75 : 100;
  }
  *conv = json_dumps(json_object_get(c, "messages"), JSON_ENCODE_ANY);
}

static void check_ids(const json_t *want, const int32_t *ids, size_t n, const char *name,
                      const char *which) {
  if (json_array_size(want) != n)
    fail_msg("%s (%s): %zu ids, golden %zu", name, which, n, json_array_size(want));
  for (size_t i = 0; i < n; i++)
    if (ids[i] != json_integer_value(json_array_get(want, i)))
      fail_msg("%s (%s): id %zu is %d, golden %lld", name, which, i, (int)ids[i],
               (long long)json_integer_value(json_array_get(want, i)));
}

static void test_conversations(void **state) {
  (void)state;
  const json_t *cs = json_object_get(goldens, "conversations");
  assert_true(json_array_size(cs) >= 20);
  size_t differ = 0;
  for (size_t k = 0; k < json_array_size(cs); k++) {
    const json_t *c = json_array_get(cs, k);
    const char *name = json_string_value(json_object_get(c, "name"));
    dsv4_chat_params p;
    char *conv;
    case_params(c, &p, &conv);
    char *text = NULL;
    size_t len = 0;
    if (dsv4_chat_render(conv, strlen(conv), &p, &text, &len))
      fail_msg("%s: render: %s", name, dsv4_last_error());
    const json_t *want = json_object_get(c, "text");
    if (len != json_string_length(want) || memcmp(text, json_string_value(want), len)) {
      size_t i = 0;
      while (i < len && text[i] == json_string_value(want)[i]) i++;
      fail_msg("%s: text differs at byte %zu:\n got  ...%.80s\n want ...%.80s", name, i,
               text + (i > 20 ? i - 20 : 0), json_string_value(want) + (i > 20 ? i - 20 : 0));
    }
    dsv4_free(text);
    int32_t *ids = NULL;
    size_t n = 0;
    p.flags |= DSV4_CHAT_F_PARSE_SPECIAL;
    assert_int_equal(dsv4_chat_encode(tok, conv, strlen(conv), &p, &ids, &n), DSV4_OK);
    check_ids(json_object_get(c, "ids_parse"), ids, n, name, "parse special");
    dsv4_free(ids);
    p.flags &= ~(uint32_t)DSV4_CHAT_F_PARSE_SPECIAL;
    assert_int_equal(dsv4_chat_encode(tok, conv, strlen(conv), &p, &ids, &n), DSV4_OK);
    check_ids(json_object_get(c, "ids_plain"), ids, n, name, "plain");
    dsv4_free(ids);
    differ += !json_equal(json_object_get(c, "ids_parse"), json_object_get(c, "ids_plain"));
    free(conv);
  }
  assert_int_equal(differ, 2); /* the two injection cases: role markers stay text by default */
}

typedef struct acc {
  char reasoning[4096], content[4096];
  size_t nr, nc;
  json_t *calls;
  int ended;
} acc;

static void on_event(int32_t kind, const char *text, size_t len, void *user) {
  acc *a = user;
  assert_false(a->ended && kind != DSV4_CHAT_EVENT_END);
  if (kind == DSV4_CHAT_EVENT_REASONING || kind == DSV4_CHAT_EVENT_CONTENT) {
    char *dst = kind == DSV4_CHAT_EVENT_REASONING ? a->reasoning : a->content;
    size_t *n = kind == DSV4_CHAT_EVENT_REASONING ? &a->nr : &a->nc;
    assert_true(len > 0 && *n + len < 4096);
    memcpy(dst + *n, text, len);
    *n += len;
    dst[*n] = 0;
  } else if (kind == DSV4_CHAT_EVENT_TOOL_CALL) {
    json_t *c = json_loadb(text, len, 0, NULL);
    assert_non_null(c);
    json_array_append_new(a->calls, c);
  } else {
    assert_int_equal(kind, DSV4_CHAT_EVENT_END);
    a->ended = 1;
  }
}

/* Parse `text` pushed as the pieces cut at `cuts` (ascending, n_cuts). */
static void parse_pieces(int32_t mode, const char *text, const size_t *cuts, size_t n_cuts, acc *a) {
  memset(a, 0, sizeof *a);
  a->calls = json_array();
  dsv4_chat_parser *p = NULL;
  assert_int_equal(dsv4_chat_parser_create(mode, &p), DSV4_OK);
  size_t at = 0;
  for (size_t i = 0; i <= n_cuts; i++) {
    const size_t end = i < n_cuts ? cuts[i] : strlen(text);
    assert_int_equal(dsv4_chat_parser_push(p, text + at, end - at, on_event, a), DSV4_OK);
    at = end;
  }
  assert_int_equal(dsv4_chat_parser_finish(p, on_event, a), DSV4_OK);
  dsv4_chat_parser_free(p);
}

static void check_message(const acc *a, const json_t *m, const char *ctx) {
  if (strcmp(a->reasoning, json_string_value(json_object_get(m, "reasoning_content"))))
    fail_msg("%s: reasoning \"%s\"", ctx, a->reasoning);
  if (strcmp(a->content, json_string_value(json_object_get(m, "content"))))
    fail_msg("%s: content \"%s\"", ctx, a->content);
  const json_t *tc = json_object_get(m, "tool_calls");
  assert_int_equal(json_array_size(a->calls), json_array_size(tc));
  for (size_t i = 0; i < json_array_size(tc); i++) {
    const json_t *f = json_object_get(json_array_get(tc, i), "function");
    const json_t *g = json_array_get(a->calls, i);
    assert_string_equal(json_string_value(json_object_get(g, "name")),
                        json_string_value(json_object_get(f, "name")));
    assert_string_equal(json_string_value(json_object_get(g, "arguments")),
                        json_string_value(json_object_get(f, "arguments")));
  }
}

static void test_parser(void **state) {
  (void)state;
  const json_t *cs = json_object_get(goldens, "completions");
  size_t checked = 0;
  for (size_t k = 0; k < json_array_size(cs); k++) {
    const json_t *c = json_array_get(cs, k);
    const char *text = json_string_value(json_object_get(c, "text"));
    const int32_t mode = !strcmp(json_string_value(json_object_get(c, "mode")), "thinking")
                             ? DSV4_CHAT_MODE_THINKING : DSV4_CHAT_MODE_CHAT;
    const json_t *m = json_object_get(c, "message");
    const size_t n = strlen(text);
    acc a;
    char ctx[64];
    for (size_t cut = 0; cut <= n; cut++) { /* every split into two pushes */
      snprintf(ctx, sizeof ctx, "completion %zu cut %zu", k, cut);
      parse_pieces(mode, text, &cut, 1, &a);
      if (m) {
        check_message(&a, m, ctx);
        assert_true(a.ended);
      } else { /* the release parser refuses a text without EOS; streaming keeps it as content */
        assert_string_equal(a.content, text);
        assert_false(a.ended);
      }
      json_decref(a.calls);
    }
    size_t *bytes = malloc(n * sizeof *bytes); /* byte by byte */
    for (size_t i = 0; i < n; i++) bytes[i] = i;
    parse_pieces(mode, text, bytes, n, &a);
    if (m) check_message(&a, m, "byte by byte");
    json_decref(a.calls);
    free(bytes);
    checked += m != NULL;
  }
  assert_int_equal(checked, 5);
}

static void test_parser_malformed(void **state) {
  (void)state;
  acc a;
  const char *bad = "Hi\n\n<\xef\xbd\x9c" "DSML\xef\xbd\x9c calls>\nnot a call</\xef\xbd\x9c"
                    "DSML\xef\xbd\x9c calls> tail";
  parse_pieces(DSV4_CHAT_MODE_CHAT, bad, NULL, 0, &a);
  assert_string_equal(a.content, bad); /* nothing lost */
  assert_int_equal(json_array_size(a.calls), 0);
  json_decref(a.calls);
  const char *open_call = "Hi\n\n<\xef\xbd\x9c" "DSML\xef\xbd\x9c calls>\n<\xef\xbd\x9c" "DSML\xef\xbd\x9c invoke";
  parse_pieces(DSV4_CHAT_MODE_CHAT, open_call, NULL, 0, &a);
  assert_string_equal(a.content, open_call);
  json_decref(a.calls);
  /* a well-formed block whose text is not UTF-8 (a cut character, 0xEF 0xBD): its call could
   * not be JSON, so the block is content (the tool-call fuzzer found the call's text unparsable) */
  const char *bytes = "\n\n<\xef\xbd\x9c" "DSML\xef\xbd\x9c calls>\n<\xef\xbd\x9c" "DSML\xef\xbd\x9c invoke "
                      "name=\"f\">\n<\xef\xbd\x9c" "DSML\xef\xbd\x9c parameter name=\"a\" string=\"true\">"
                      "x\xef\xbd</\xef\xbd\x9c" "DSML\xef\xbd\x9c parameter>\n</\xef\xbd\x9c" "DSML\xef\xbd\x9c "
                      "invoke>\n</\xef\xbd\x9c" "DSML\xef\xbd\x9c calls>";
  parse_pieces(DSV4_CHAT_MODE_CHAT, bytes, NULL, 0, &a);
  assert_string_equal(a.content, bytes);
  assert_int_equal(json_array_size(a.calls), 0);
  json_decref(a.calls);
  /* a malformed block that the output ends inside (no end tag): the end-of-sentence marker
   * still ends it, whatever the split into pushes (the fuzzer found one push swallowing it) */
  const char *eos = "Hi\n\n<\xef\xbd\x9c" "DSML\xef\xbd\x9c calls>\nnot a call<\xef\xbd\x9c" "end\xe2\x96\x81of"
                    "\xe2\x96\x81sentence\xef\xbd\x9c>ignored";
  for (size_t cut = 0; cut <= strlen(eos); cut++) {
    parse_pieces(DSV4_CHAT_MODE_CHAT, eos, &cut, 1, &a);
    assert_string_equal(a.content, "Hi\n\n<\xef\xbd\x9c" "DSML\xef\xbd\x9c calls>\nnot a call");
    assert_true(a.ended);
    json_decref(a.calls);
  }
  const char *think = "unfinished reasoning </thi";
  parse_pieces(DSV4_CHAT_MODE_THINKING, think, NULL, 0, &a);
  assert_string_equal(a.reasoning, think);
  json_decref(a.calls);
}

static void expect(const char *conv, const dsv4_chat_params *p, dsv4_status want) {
  char *text = (char *)1;
  assert_int_equal(dsv4_chat_render(conv, strlen(conv), p, &text, NULL), want);
  assert_null(text);
  assert_true(strlen(dsv4_last_error()) > 0);
}

static void test_bad_input(void **state) {
  (void)state;
  dsv4_chat_params p;
  assert_int_equal(dsv4_chat_params_init(&p, sizeof p), DSV4_OK);
  expect("[{\"role\": \"user\", \"content\": \"x\"", &p, DSV4_ERR_JSON);
  expect("\"hello\"", &p, DSV4_ERR_INVALID_ARG);
  expect("[{\"content\": \"x\"}]", &p, DSV4_ERR_INVALID_ARG);
  expect("[{\"role\": \"wizard\", \"content\": \"x\"}]", &p, DSV4_ERR_INVALID_ARG);
  expect("[{\"role\": \"user\", \"content\": 5}]", &p, DSV4_ERR_INVALID_ARG);
  expect("[{\"role\": \"developer\", \"content\": \"\"}]", &p, DSV4_ERR_INVALID_ARG);
  expect("[{\"role\": \"user\", \"content\": [{\"type\": \"image_url\", \"image_url\": \"x\"}]}]", &p,
         DSV4_ERR_UNSUPPORTED);
  expect("[{\"role\": \"assistant\", \"tool_calls\": [{\"function\": {\"name\": \"f\", "
         "\"arguments\": \"[1]\"}}]}]", &p, DSV4_ERR_INVALID_ARG);
  expect("[{\"role\": \"user\", \"content\": \"x\", \"task\": \"fly\"}]", &p, DSV4_ERR_INVALID_ARG);
  expect("{\"messages\": [], \"tools\": 3}", &p, DSV4_ERR_INVALID_ARG);
  expect("[{\"role\": \"user\", \"content\": \"\xff\"}]", &p, DSV4_ERR_INVALID_UTF8);
  p.reasoning_effort = 101;
  expect("[]", &p, DSV4_ERR_INVALID_ARG);
  p.reasoning_effort = 0;
  p.flags = 1u << 20;
  expect("[]", &p, DSV4_ERR_INVALID_ARG);
  p.flags = 0;
  p.mode = 7;
  expect("[]", &p, DSV4_ERR_INVALID_ARG);
  p.struct_size = 4;
  expect("[]", &p, DSV4_ERR_PARAMS_SIZE);
  int32_t *ids = (int32_t *)1;
  size_t n = 9;
  assert_int_equal(dsv4_chat_encode(NULL, "[]", 2, NULL, &ids, &n), DSV4_ERR_INVALID_ARG);
  assert_null(ids);
  assert_int_equal(n, 0);
  dsv4_chat_parser *parser = (dsv4_chat_parser *)1;
  assert_int_equal(dsv4_chat_parser_create(3, &parser), DSV4_ERR_INVALID_ARG);
  assert_null(parser);
}

/* Top-level tools land on the first system message, or a new empty one. */
static void test_top_level_tools(void **state) {
  (void)state;
  const char *with = "{\"messages\": [{\"role\": \"user\", \"content\": \"hi\"}], "
                     "\"tools\": [{\"type\": \"function\", \"function\": {\"name\": \"f\"}}]}";
  const char *same = "[{\"role\": \"system\", \"content\": \"\", \"tools\": [{\"type\": \"function\", "
                     "\"function\": {\"name\": \"f\"}}]}, {\"role\": \"user\", \"content\": \"hi\"}]";
  char *a = NULL, *b = NULL;
  assert_int_equal(dsv4_chat_render(with, strlen(with), NULL, &a, NULL), DSV4_OK);
  assert_int_equal(dsv4_chat_render(same, strlen(same), NULL, &b, NULL), DSV4_OK);
  assert_string_equal(a, b);
  assert_non_null(strstr(a, "{\"name\": \"f\"}"));
  dsv4_free(a);
  dsv4_free(b);
}

int tu_run_suite(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_conversations),
      cmocka_unit_test(test_parser),
      cmocka_unit_test(test_parser_malformed),
      cmocka_unit_test(test_bad_input),
      cmocka_unit_test(test_top_level_tools),
  };
  return cmocka_run_group_tests(tests, setup, teardown);
}
