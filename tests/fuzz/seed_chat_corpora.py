#!/usr/bin/env python3
"""Seed the corpora of fuzz_chat_parse, fuzz_chat_render and fuzz_server_request
(tests/fuzz/corpus/NAME/) from the chat goldens (tests/data/chat/goldens.json)
and the requests tests/server/check_server.py sends. Run from the repository
root; the files are committed (the fuzzers add their own inputs beside them).

    python3 tests/fuzz/seed_chat_corpora.py
"""
import hashlib
import json
import os

G = json.load(open("tests/data/chat/goldens.json", encoding="utf-8"))
EOS = "<\uff5cend\u2581of\u2581sentence\uff5c>"
D = "\uff5cDSML\uff5c"


def write(target, data):
    d = os.path.join("tests", "fuzz", "corpus", target)
    os.makedirs(d, exist_ok=True)
    name = hashlib.sha1(data).hexdigest()[:16]
    with open(os.path.join(d, name), "wb") as f:
        f.write(data)


# fuzz_chat_parse: mode byte (1 thinking) + model output
outputs = [(c["mode"] == "thinking", c["text"]) for c in G["completions"]]
outputs += [
    (True, "Reason.</think>Answer</think> still content." + EOS + "ignored"),
    (False, "A\n\n<" + D + " calls>\n<" + D + " invoke name=\"f\">\n<" + D +
     " parameter name=\"a\" string=\"true\">x</" + D + " parameter>\n<" + D +
     " parameter name=\"a\" string=\"false\">1</" + D + " parameter>\n</" + D + " invoke>\n</" + D +
     " calls>" + EOS),  # duplicate parameter: the block is content
    (False, "Cut off\n\n<" + D + " calls>\n<" + D + " invoke name=\"f\">\n"),
    (True, "\n\n<" + D + " calls>\n</" + D + " calls>after" + EOS),
]
for thinking, text in outputs:
    write("chat_parse", bytes([1 if thinking else 0]) + text.encode("utf-8"))

# fuzz_chat_render: params byte (bit 0 thinking, bit 1 parse special, bit 2 keep
# reasoning, bit 3 no BOS), effort byte, conversation JSON
EFFORT = {"low": 25, "high": 50, "xhigh": 75, "max": 100}
for c in G["conversations"]:
    o = c["options"]
    b0 = (1 if o.get("thinking_mode") == "thinking" else 0)
    b0 |= 0 if o.get("drop_thinking", True) else 4
    b0 |= 0 if o.get("add_default_bos_token", True) else 8
    e = o.get("reasoning_effort", 0)
    e = EFFORT.get(e, e)
    for special in (0, 2):
        write("chat_render", bytes([b0 | special, e]) +
              json.dumps(c["messages"], ensure_ascii=False).encode("utf-8"))
    tools = [m.pop("tools") for m in c["messages"] if "tools" in m]
    if tools:  # the object form with top-level tools
        write("chat_render", bytes([b0, e]) + json.dumps(
            {"messages": c["messages"], "tools": tools[0]}, ensure_ascii=False).encode("utf-8"))

# fuzz_server_request: byte 0 (bit 0 chat, bits 1-4 piece size, bit 5 small limit) + body
PROMPT = "Every evening the old lamplighter"
TOOLS = [{"type": "function", "function": {
    "name": "get_weather", "description": "Weather for a city",
    "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}}}]
chat = [
    {"messages": [{"role": "system", "content": "You are terse."}, {"role": "user", "content": "Hello!"}],
     "max_tokens": 12, "temperature": 0},
    {"messages": [{"role": "user", "content": "Tell me about lamps."}], "max_tokens": 16, "temperature": 0,
     "stream": True, "stream_options": {"include_usage": True, "continuous_usage_stats": True}},
    {"messages": [{"role": "user", "content": "Think."}], "max_tokens": 8, "thinking": True,
     "reasoning_effort": "max"},
    {"messages": [{"role": "user", "content": "Think."}], "chat_template_kwargs": {"enable_thinking": True},
     "reasoning_effort": 37, "stream": True},
    {"messages": [{"role": "user", "content": "Weather in Paris?"},
                  {"role": "assistant", "content": None, "tool_calls": [
                      {"id": "call_1", "type": "function",
                       "function": {"name": "get_weather", "arguments": "{\"city\": \"Paris\"}"}}]},
                  {"role": "tool", "tool_call_id": "call_1", "content": "{\"temp\": 12}"}],
     "tools": TOOLS, "tool_choice": "auto", "max_tokens": 8},
    {"messages": [{"role": "user", "content": "x"}], "tools": TOOLS, "tool_choice": "none",
     "stop": ["\n", "lamp"], "logit_bias": {"5": -100, "17": 2.5}, "top_k": 40, "min_p": 0.05,
     "presence_penalty": 0.5, "frequency_penalty": -0.5, "repetition_penalty": 1.1, "seed": 7},
    {"messages": [{"role": "user", "content": "Hi"}], "logprobs": True, "top_logprobs": 3, "stream": True},
    {"messages": [{"role": "user", "content": "Hi"}], "logprobs": True, "top_logprobs": 20},
]
for i, body in enumerate(chat):
    write("server_request", bytes([1 | (i % 16) << 1]) + json.dumps(body).encode("utf-8"))
completion = [
    {"prompt": PROMPT, "max_tokens": 32, "temperature": 0},
    {"prompt": PROMPT, "max_tokens": 32, "temperature": 0, "stream": True},
    {"prompt": PROMPT, "max_tokens": 16, "temperature": 0.9, "seed": 3, "top_p": 0.95, "ignore_eos": True},
    {"prompt": [PROMPT], "stop": "lamp", "n": 1},
    {"prompt": [0, 17, 42, 99, 5], "max_completion_tokens": 4},
    {"prompt": PROMPT, "logprobs": 2, "stream": True},
    {"prompt": PROMPT, "logprobs": 0},
]
for i, body in enumerate(completion):
    write("server_request", bytes([(i % 16) << 1]) + json.dumps(body).encode("utf-8"))
# the bad requests check_server.py sends (each must be a 400)
for body in [b"{not json", b"[1, 2]", b'{"messages": []}',
             b'{"messages": [{"role": "user", "content": "x"}], "temperature": "hot"}',
             b'{"messages": [{"role": "user", "content": "x"}], "n": 2}',
             b'{"messages": [{"role": "user", "content": "x"}], "max_tokens": 0}',
             b'{"messages": [{"role": "robot", "content": "x"}]}',
             b'{"messages": [{"role": "user", "content": "\\u00ff"}], "logit_bias": {"99999999": 1}}',
             b'{"messages": [{"role": "assistant", "tool_calls": [{"id": "c", "type": "function", '
             b'"function": {"name": "f", "arguments": "[1, 2]"}}]}]}']:
    write("server_request", bytes([1]) + body)
write("server_request", bytes([32]) + b'{"prompt": "' + b"x" * 300 + b'"}')  # over the small limit: 413
