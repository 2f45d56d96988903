/*
 * V4.1 prompt rendering, following the release encoder's rules step by step
 * (docs/serving.md, "Chat format"):
 *   1. content given as a list of parts becomes blocks (text parts joined
 *      with a blank line where a plain string is needed);
 *   2. tool messages become tool_result blocks of a user message, and
 *      consecutive user messages merge (unless the earlier one has a task);
 *   3. tool results are ordered like the calls of the last assistant turn;
 *   4. in thinking mode with drop_thinking (and no tools anywhere), earlier
 *      turns lose their reasoning and earlier developer messages vanish;
 *   5. each message renders with its role marker, and a user-side message
 *      followed by nothing (or by an assistant / reminder) opens the
 *      assistant turn with <think> or </think>.
 */
#include <stdlib.h>
#include <string.h>

#include "serve/chat.h"
#include "serve/pyjson.h"

#define SYS_TOK "<\xef\xbd\x9cSystem\xef\xbd\x9c>"
#define USER_TOK "<\xef\xbd\x9cUser\xef\xbd\x9c>"
#define ASSIST_TOK "<\xef\xbd\x9c" "Assistant\xef\xbd\x9c>"
#define REMIND_TOK "<\xef\xbd\x9clatest_reminder\xef\xbd\x9c>"
#define D DSV4I_CHAT_DSML

enum { R_SYSTEM, R_USER, R_DEVELOPER, R_ASSISTANT, R_TOOL, R_REMINDER };
enum { B_TEXT, B_TOOL_RESULT, B_OTHER };

typedef struct blk {
  int kind;
  const json_t *text;    /**< B_TEXT: the string; B_TOOL_RESULT: the content (any) */
  const char *type;      /**< B_OTHER: the part's type */
  const char *tool_id;   /**< B_TOOL_RESULT: the call id ("" if none) */
  int joined;            /**< B_TOOL_RESULT of a tool message whose content was a list:
                          *   its text parts joined, at [off, off + len) of the joined buffer */
  size_t off, len;
} blk;

typedef struct msg {
  int role;
  int idx;               /**< position in the request (for messages) */
  const char *content;   /**< NULL: none */
  size_t content_len;
  blk *b;
  size_t nb, capb;
  int has_blocks;
  const json_t *tools, *rfmt, *calls;
  const char *reasoning;
  const char *task;
  int wo_eos;
} msg;

typedef struct out {
  dsv4i_str *text, *mask;
} out;

static void put(out *o, const char *s, size_t n, int user) {
  dsv4i_str_append(o->text, s, n);
  for (size_t i = 0; i < n; i++) dsv4i_str_append(o->mask, user ? "\1" : "\0", 1);
}
static void fmt(out *o, const char *s) { put(o, s, strlen(s), 0); }
static void usr(out *o, const char *s, size_t n) { put(o, s, n, 1); }
static void usr_json(out *o, const json_t *v) {
  dsv4i_str t = {0};
  dsv4i_pyjson_dump(v, &t);
  usr(o, t.buf ? t.buf : "", t.len);
  if (t.oom) o->text->oom = 1;
  dsv4i_str_free(&t);
}

static dsv4_status bad(int idx, const char *what) {
  return dsv4i_error(DSV4_ERR_INVALID_ARG, "chat: message %d: %s", idx, what);
}

static dsv4_status push_blk(msg *m, blk b) {
  if (m->nb == m->capb) {
    size_t cap = m->capb ? m->capb * 2 : 4;
    blk *nb = dsv4i_realloc(m->b, cap * sizeof *nb, "chat blocks");
    if (!nb) return DSV4_ERR_OUT_OF_MEMORY;
    m->b = nb;
    m->capb = cap;
  }
  m->b[m->nb++] = b;
  return DSV4_OK;
}

static int role_of(const char *r) {
  static const char *names[] = {"system", "user", "developer", "assistant", "tool", "latest_reminder"};
  for (int i = 0; i < 6; i++)
    if (r && !strcmp(r, names[i])) return i;
  return -1;
}

/* Blocks of a content list (step 1): text parts, tool results, the rest by type. */
static dsv4_status parts(msg *m, const json_t *list, int idx, int *has_text) {
  dsv4_status s;
  for (size_t i = 0; i < json_array_size(list); i++) {
    const json_t *p = json_array_get(list, i);
    const char *type = json_is_object(p) ? json_string_value(json_object_get(p, "type")) : NULL;
    blk b = {B_OTHER, NULL, type ? type : "None", "", 0, 0, 0};
    if (!json_is_object(p)) return bad(idx, "a content part is not an object");
    if (type && (!strcmp(type, "image") || !strcmp(type, "image_url")))
      return dsv4i_error(DSV4_ERR_UNSUPPORTED, "chat: message %d: image content is not supported "
                         "(the engine has no vision tower)", idx);
    if (type && !strcmp(type, "text")) {
      const json_t *t = json_object_get(p, "text");
      if (t && !json_is_string(t)) return bad(idx, "a text part's \"text\" is not a string");
      b.kind = B_TEXT;
      b.text = t;
      (*has_text)++;
    } else if (type && !strcmp(type, "tool_result")) {
      b.kind = B_TOOL_RESULT;
      b.text = json_object_get(p, "content");
      const char *id = json_string_value(json_object_get(p, "tool_use_id"));
      b.tool_id = id ? id : "";
    }
    if ((s = push_blk(m, b))) return s;
  }
  return DSV4_OK;
}

static const char *str_field(const json_t *j, const char *k) {
  return json_string_value(json_object_get(j, k));
}

/* Read one request message into m (steps 1 and the per-field checks). */
static dsv4_status read_msg(const json_t *j, int idx, msg *m, dsv4i_str *joined) {
  memset(m, 0, sizeof *m);
  m->idx = idx;
  if (!json_is_object(j)) return bad(idx, "not an object");
  const char *r = str_field(j, "role");
  if ((m->role = role_of(r)) < 0) return bad(idx, "\"role\" is missing or not one of system, user, "
                                              "developer, assistant, tool, latest_reminder");
  const json_t *c = json_object_get(j, "content");
  dsv4_status s;
  if (json_is_array(c)) {
    int nt = 0;
    if ((s = parts(m, c, idx, &nt))) return s;
    m->has_blocks = 1;
    size_t start = joined->len, first = 1;
    for (size_t i = 0; i < m->nb; i++) {
      if (m->b[i].kind != B_TEXT) continue;
      if (!first) dsv4i_str_append(joined, "\n\n", 2);
      first = 0;
      if (m->b[i].text) dsv4i_str_append(joined, json_string_value(m->b[i].text),
                                         json_string_length(m->b[i].text));
    }
    dsv4i_str_append(joined, "", 0);
    m->content = (const char *)(uintptr_t)start; /* offset, fixed up by the caller */
    m->content_len = joined->len - start;
    m->has_blocks = 2;                           /* content is an offset into joined */
  } else if (json_is_string(c)) {
    m->content = json_string_value(c);
    m->content_len = json_string_length(c);
  } else if (c && !json_is_null(c)) {
    return bad(idx, "\"content\" is neither a string, a list of parts nor null");
  }
  const json_t *t = json_object_get(j, "tools");
  if (t && !json_is_null(t)) {
    if (!json_is_array(t)) return bad(idx, "\"tools\" is not an array");
    for (size_t i = 0; i < json_array_size(t); i++)
      if (!json_is_object(json_object_get(json_array_get(t, i), "function")))
        return bad(idx, "a tool has no \"function\" object");
    if (json_array_size(t)) m->tools = t;
  }
  const json_t *rf = json_object_get(j, "response_format");
  if (rf && !json_is_null(rf) && !(json_is_object(rf) && json_object_size(rf) == 0) &&
      !(json_is_array(rf) && json_array_size(rf) == 0) && !json_is_false(rf))
    m->rfmt = rf;
  const json_t *tc = json_object_get(j, "tool_calls");
  if (tc && !json_is_null(tc)) {
    if (!json_is_array(tc)) return bad(idx, "\"tool_calls\" is not an array");
    for (size_t i = 0; i < json_array_size(tc); i++) {
      const json_t *f = json_object_get(json_array_get(tc, i), "function");
      if (!json_is_object(f) || !json_is_string(json_object_get(f, "name")))
        return bad(idx, "a tool call has no function name");
      const json_t *a = json_object_get(f, "arguments");
      if (!json_is_string(a) && !json_is_object(a))
        return bad(idx, "a tool call's arguments are neither a JSON string nor an object");
    }
    if (json_array_size(tc)) m->calls = tc;
  }
  const json_t *rc = json_object_get(j, "reasoning_content");
  if (rc && !json_is_null(rc) && !json_is_string(rc))
    return bad(idx, "\"reasoning_content\" is not a string");
  m->reasoning = json_string_value(rc);
  const json_t *task = json_object_get(j, "task");
  if (task && !json_is_null(task)) {
    static const char *tasks[] = {"action", "query", "authority", "domain", "title", "read_url"};
    m->task = json_string_value(task);
    int ok = 0;
    for (int i = 0; m->task && i < 6; i++) ok |= !strcmp(m->task, tasks[i]);
    if (!ok) return bad(idx, "\"task\" is not one of action, query, authority, domain, title, read_url");
  }
  m->wo_eos = json_is_true(json_object_get(j, "wo_eos"));
  if (m->role == R_DEVELOPER && !m->content_len)
    return bad(idx, "a developer message needs non-empty content");
  return DSV4_OK;
}

static void free_msgs(msg *v, size_t n) {
  for (size_t i = 0; v && i < n; i++) free(v[i].b);
  free(v);
}

/* Step 2: tool messages into user blocks, consecutive users merged. */
static dsv4_status merge(msg *in, size_t n, const json_t *raw, msg *outv, size_t *n_out) {
  size_t k = 0;
  dsv4_status s;
  for (size_t i = 0; i < n; i++) {
    msg *m = &in[i];
    msg *last = k ? &outv[k - 1] : NULL;
    if (m->role == R_TOOL) {
      const json_t *j = json_array_get(raw, (size_t)m->idx);
      const char *id = str_field(j, "tool_call_id");
      blk b = {B_TOOL_RESULT, json_object_get(j, "content"), NULL, id ? id : "", 0, 0, 0};
      if (m->has_blocks == 2) { /* list content: the encoder keeps only its joined text */
        b.joined = 1;
        b.off = (size_t)(uintptr_t)m->content;
        b.len = m->content_len;
      }
      if (!(last && last->role == R_USER)) {
        msg u;
        memset(&u, 0, sizeof u);
        u.role = R_USER;
        u.idx = m->idx;
        outv[k++] = u;
        last = &outv[k - 1];
      }
      if ((s = push_blk(last, b))) return s;
      continue;
    }
    if (m->role == R_USER) {
      if (!m->has_blocks) { /* a string (or absent) content is one text block */
        blk b = {B_TEXT, json_object_get(json_array_get(raw, (size_t)m->idx), "content"), NULL, "",
                 0, 0, 0};
        if ((s = push_blk(m, b))) return s;
      }
      if (last && last->role == R_USER && !last->task) {
        for (size_t q = 0; q < m->nb; q++)
          if ((s = push_blk(last, m->b[q]))) return s;
        continue;
      }
    }
    outv[k++] = *m;
    m->b = NULL; /* moved */
    m->nb = m->capb = 0;
  }
  *n_out = k;
  return DSV4_OK;
}

static int call_order(const json_t *calls, const char *id) {
  for (size_t i = 0; i < json_array_size(calls); i++) {
    const json_t *c = json_array_get(calls, i);
    const char *cid = str_field(c, "id");
    if (!cid || !*cid) cid = str_field(json_object_get(c, "function"), "id");
    if (cid && *cid && !strcmp(cid, id)) return (int)i;
  }
  return 0; /* unknown ids sort first, as the encoder's default */
}

/* Step 3: a stable sort of each user turn's tool results by call order. */
static void sort_results(msg *v, size_t n) {
  const json_t *calls = NULL;
  for (size_t i = 0; i < n; i++) {
    if (v[i].role == R_ASSISTANT && v[i].calls) calls = v[i].calls;
    if (v[i].role != R_USER || !calls) continue;
    size_t nt = 0;
    for (size_t q = 0; q < v[i].nb; q++) nt += v[i].b[q].kind == B_TOOL_RESULT;
    if (nt < 2) continue;
    /* insertion sort of the tool blocks in place (the other blocks stay put) */
    for (size_t a = 0; a < v[i].nb; a++) {
      if (v[i].b[a].kind != B_TOOL_RESULT) continue;
      for (size_t bq = a; bq-- > 0;) {
        if (v[i].b[bq].kind != B_TOOL_RESULT) continue;
        if (call_order(calls, v[i].b[bq].tool_id) <= call_order(calls, v[i].b[a].tool_id)) break;
        blk t = v[i].b[bq];
        v[i].b[bq] = v[i].b[a];
        v[i].b[a] = t;
        a = bq; /* continue bubbling the moved block */
      }
    }
  }
}

static int last_user(const msg *v, size_t n) {
  for (size_t i = n; i-- > 0;)
    if (v[i].role == R_USER || v[i].role == R_DEVELOPER || (v[i].role == R_SYSTEM && i > 0))
      return (int)i;
  return -1;
}

/* The text of a tool result's content, as the encoder formats it. */
static dsv4_status tool_result(out *o, const blk *b, int idx, const char *joined) {
  const json_t *c = b->text;
  fmt(o, "<tool_result>");
  if (b->joined) {
    usr(o, joined + b->off, b->len);
  } else if (!c) {
  } else if (json_is_string(c)) {
    usr(o, json_string_value(c), json_string_length(c));
  } else if (json_is_null(c)) {
    usr(o, "None", 4);
  } else if (json_is_array(c)) {
    for (size_t i = 0; i < json_array_size(c); i++) {
      const json_t *p = json_array_get(c, i);
      const char *type = str_field(p, "type");
      if (i) usr(o, "\n\n", 2);
      if (type && !strcmp(type, "text")) {
        const json_t *t = json_object_get(p, "text");
        if (t && !json_is_string(t)) return bad(idx, "a tool result's text part is not a string");
        if (t) usr(o, json_string_value(t), json_string_length(t));
      } else {
        fmt(o, "[Unsupported ");
        usr(o, type ? type : "None", strlen(type ? type : "None"));
        fmt(o, "]");
      }
    }
  } else if (json_is_integer(c) || json_is_real(c)) {
    usr_json(o, c);
  } else {
    return bad(idx, "a tool result's content is neither a string, a list of parts nor a number");
  }
  fmt(o, "</tool_result>");
  return DSV4_OK;
}

static void tools_block(out *o, const json_t *tools) {
  fmt(o, "\n\n## Tools\n\nYou have access to a set of tools to help answer the user's question. "
         "You can invoke tools by writing a \"<" D " calls>\" block like the following:\n\n"
         "<" D " calls>\n<" D " invoke name=\"$TOOL_NAME\">\n<" D " parameter name=\"$PARAMETER_NAME\" "
         "string=\"true|false\">$PARAMETER_VALUE</" D " parameter>\n...\n</" D " invoke>\n<" D
         " invoke name=\"$TOOL_NAME2\">\n...\n</" D " invoke>\n</" D " calls>\n\n"
         "String parameters should be specified as is and set `string=\"true\"`. For all other types "
         "(numbers, booleans, arrays, objects), pass the value in JSON format and set "
         "`string=\"false\"`.\n\nIf thinking_mode is enabled (triggered by <think>), you MUST output "
         "your complete reasoning inside <think>...</think> BEFORE any tool calls or final "
         "response.\n\nOtherwise, output directly after </think> with tool calls or final "
         "response.\n\n### Available Tool Schemas\n\n");
  for (size_t i = 0; i < json_array_size(tools); i++) {
    if (i) fmt(o, "\n");
    usr_json(o, json_object_get(json_array_get(tools, i), "function"));
  }
  fmt(o, "\n\nYou MUST strictly follow the above defined tool name and parameter schemas to "
         "invoke tool calls.\n");
}

static void response_format(out *o, const json_t *rf) {
  fmt(o, "\n\n## Response Format:\n\nYou MUST strictly adhere to the following schema to reply:\n");
  usr_json(o, rf);
}

static dsv4_status tool_calls(out *o, const json_t *calls, int idx) {
  fmt(o, "\n\n<" D " calls>\n");
  for (size_t i = 0; i < json_array_size(calls); i++) {
    const json_t *f = json_object_get(json_array_get(calls, i), "function");
    const char *name = str_field(f, "name");
    const json_t *a = json_object_get(f, "arguments");
    json_t *parsed = NULL;
    if (json_is_string(a)) {
      parsed = json_loadb(json_string_value(a), json_string_length(a), JSON_DECODE_ANY, NULL);
      a = parsed;
    }
    if (!json_is_object(a)) {
      json_decref(parsed);
      return bad(idx, "tool call arguments must be a JSON object");
    }
    if (i) fmt(o, "\n");
    fmt(o, "<" D " invoke name=\"");
    usr(o, name, strlen(name));
    fmt(o, "\">\n");
    const char *k;
    json_t *v;
    int first = 1;
    json_object_foreach((json_t *)a, k, v) {
      if (!first) fmt(o, "\n");
      first = 0;
      fmt(o, "<" D " parameter name=\"");
      usr(o, k, strlen(k));
      fmt(o, json_is_string(v) ? "\" string=\"true\">" : "\" string=\"false\">");
      if (json_is_string(v)) usr(o, json_string_value(v), json_string_length(v));
      else usr_json(o, v);
      fmt(o, "</" D " parameter>");
    }
    fmt(o, "\n</" D " invoke>");
    json_decref(parsed);
  }
  fmt(o, "\n</" D " calls>");
  return DSV4_OK;
}

static dsv4_status render_one(out *o, const msg *v, size_t n, size_t i, const dsv4i_chat_opts *op,
                              int drop, const char *joined) {
  const msg *m = &v[i];
  const int lu = last_user(v, n);
  dsv4_status s = DSV4_OK;
  const int effort_here = i == 0 && op->thinking;
  if (i == 0 && (effort_here || m->role == R_SYSTEM)) fmt(o, SYS_TOK);
  if (effort_here) {
    char e[128];
    snprintf(e, sizeof e, "Reasoning Effort: %d (range 1-100, the higher the value, the more "
             "thorough the reasoning)\n\n", op->effort);
    fmt(o, e);
  }
  const char *content = m->content;
  if (m->has_blocks == 2) content = joined + (uintptr_t)m->content;
  switch (m->role) {
  case R_SYSTEM:
    if (i > 0) fmt(o, SYS_TOK);
    if (content) usr(o, content, m->content_len);
    if (m->tools) tools_block(o, m->tools);
    if (m->rfmt) response_format(o, m->rfmt);
    break;
  case R_DEVELOPER:
    fmt(o, USER_TOK);
    usr(o, content, m->content_len);
    if (m->tools) tools_block(o, m->tools);
    if (m->rfmt) response_format(o, m->rfmt);
    break;
  case R_USER:
    fmt(o, USER_TOK);
    if (m->nb) {
      for (size_t q = 0; q < m->nb && !s; q++) {
        const blk *b = &m->b[q];
        if (q) fmt(o, "\n\n");
        if (b->kind == B_TEXT) {
          if (json_is_string(b->text)) usr(o, json_string_value(b->text), json_string_length(b->text));
        } else if (b->kind == B_TOOL_RESULT) {
          s = tool_result(o, b, m->idx, joined);
        } else {
          fmt(o, "[Unsupported ");
          usr(o, b->type, strlen(b->type));
          fmt(o, "]");
        }
      }
    } else if (content) {
      usr(o, content, m->content_len);
    }
    break;
  case R_REMINDER:
    fmt(o, REMIND_TOK);
    if (content) usr(o, content, m->content_len);
    else usr(o, "None", 4);
    break;
  case R_ASSISTANT: {
    const int prev_task = i > 0 && v[i - 1].task;
    if (op->thinking && !prev_task && (!drop || (int)i > lu)) {
      if (m->reasoning) usr(o, m->reasoning, strlen(m->reasoning));
      fmt(o, DSV4I_CHAT_THINK_END);
    }
    if (content) usr(o, content, m->content_len);
    if (m->calls) s = tool_calls(o, m->calls, m->idx);
    if (!m->wo_eos) fmt(o, DSV4I_CHAT_EOS);
    break;
  }
  default:
    break;
  }
  if (s) return s;
  if (i + 1 < n && v[i + 1].role != R_ASSISTANT && v[i + 1].role != R_REMINDER) return DSV4_OK;
  if (m->task) {
    char t[64];
    snprintf(t, sizeof t, "<\xef\xbd\x9c%s\xef\xbd\x9c>", m->task);
    if (!strcmp(m->task, "action")) {
      fmt(o, ASSIST_TOK);
      fmt(o, op->thinking ? DSV4I_CHAT_THINK : DSV4I_CHAT_THINK_END);
    }
    fmt(o, t);
  } else if (m->role == R_USER || m->role == R_DEVELOPER || (m->role == R_SYSTEM && i > 0)) {
    fmt(o, ASSIST_TOK);
    const int open = op->thinking && (!drop || (int)i >= lu);
    fmt(o, open ? DSV4I_CHAT_THINK : DSV4I_CHAT_THINK_END);
  }
  return DSV4_OK;
}

dsv4_status dsv4i_chat_render(const json_t *conv, const dsv4i_chat_opts *op, dsv4i_str *text,
                              dsv4i_str *mask) {
  const json_t *raw = conv, *top_tools = NULL;
  json_t *own = NULL;
  if (json_is_object(conv)) {
    raw = json_object_get(conv, "messages");
    top_tools = json_object_get(conv, "tools");
    if (json_is_array(top_tools) && json_array_size(top_tools) == 0) top_tools = NULL;
    if (top_tools && !json_is_null(top_tools)) {
      if (!json_is_array(top_tools))
        return dsv4i_error(DSV4_ERR_INVALID_ARG, "chat: \"tools\" is not an array");
      /* top-level tools belong to the first system message (one is added if there is none) */
      own = json_deep_copy(raw);
      if (!own) return dsv4i_error(DSV4_ERR_INVALID_ARG, "chat: \"messages\" is not an array");
      json_t *first = json_array_get(own, 0);
      if (!first || !json_is_object(first) || !str_field(first, "role") ||
          strcmp(str_field(first, "role"), "system")) {
        first = json_pack("{s:s,s:s}", "role", "system", "content", "");
        json_array_insert_new(own, 0, first);
      }
      if (!first || json_object_set(first, "tools", (json_t *)top_tools)) {
        json_decref(own);
        return DSV4_ERR_OUT_OF_MEMORY;
      }
      raw = own;
    }
  }
  if (!json_is_array(raw)) {
    json_decref(own);
    return dsv4i_error(DSV4_ERR_INVALID_ARG,
                       "chat: expected a JSON array of messages or an object with \"messages\"");
  }
  const size_t n = json_array_size(raw);
  msg *in = dsv4i_calloc(n + 1, sizeof *in, "chat messages");
  msg *mv = dsv4i_calloc(n + 1, sizeof *mv, "chat messages");
  dsv4i_str joined = {0};
  out o = {text, mask};
  dsv4_status s = in && mv ? DSV4_OK : DSV4_ERR_OUT_OF_MEMORY;
  size_t nm = 0;
  for (size_t i = 0; i < n && !s; i++) s = read_msg(json_array_get(raw, i), (int)i, &in[i], &joined);
  if (!s) s = merge(in, n, raw, mv, &nm);
  if (!s) {
    sort_results(mv, nm);
    int drop = op->drop_thinking;
    for (size_t i = 0; i < nm; i++)
      if (mv[i].tools) drop = 0;
    if (op->thinking && drop) { /* step 4 */
      const int lu = last_user(mv, nm);
      size_t k = 0;
      for (size_t i = 0; i < nm; i++) {
        msg m = mv[i];
        if (m.role == R_DEVELOPER && (int)i < lu) {
          free(m.b);
          continue;
        }
        if (m.role == R_ASSISTANT && (int)i < lu) m.reasoning = NULL;
        mv[k++] = m;
      }
      nm = k;
    }
    if (op->add_bos) fmt(&o, DSV4I_CHAT_BOS);
    for (size_t i = 0; i < nm && !s; i++) s = render_one(&o, mv, nm, i, op, drop, joined.buf);
  }
  if (!s && (text->oom || mask->oom || joined.oom)) s = DSV4_ERR_OUT_OF_MEMORY;
  if (s == DSV4_ERR_OUT_OF_MEMORY) dsv4i_error(s, "chat: out of memory rendering the prompt");
  free_msgs(in, n);
  free_msgs(mv, nm);
  dsv4i_str_free(&joined);
  json_decref(own);
  return s;
}
