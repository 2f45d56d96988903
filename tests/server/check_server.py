#!/usr/bin/env python3
"""Drive a running dsv4-server with the `openai` client and plain HTTP.

    check_server.py BASE_URL MODEL_NAME GREEDY_TEXT_FILE

Each check prints one line; any failure raises (exit status 1). The server
must run the default tiny model with --max-queue 6 (the 429 check relies on
it) and --prefix-cache 2. GREEDY_TEXT_FILE holds dsv4-generate's output for the greedy check.
"""
import concurrent.futures as cf
import http.client
import json
import socket
import sys
import time
import urllib.parse

import openai

BASE, MODEL, GREEDY = sys.argv[1], sys.argv[2], sys.argv[3]
URL = urllib.parse.urlparse(BASE)
client = openai.OpenAI(base_url=BASE + "/v1", api_key="none", max_retries=0, timeout=120)
PROMPT = "Every evening the old lamplighter"


def raw(method, path, body=None, headers=None):
    c = http.client.HTTPConnection(URL.hostname, URL.port, timeout=60)
    c.request(method, path, body=body, headers=headers or {"Content-Type": "application/json"})
    r = c.getresponse()
    data = r.read()
    c.close()
    return r.status, data


def health():
    st, data = raw("GET", "/health")
    assert st == 200, (st, data)
    return json.loads(data)


def check(name, fn):
    t = time.time()
    fn()
    print(f"ok   {name} ({time.time() - t:.1f} s)", flush=True)


def models():
    ids = [m.id for m in client.models.list().data]
    assert ids == [MODEL], ids


def chat_plain():
    r = client.chat.completions.create(model=MODEL, messages=[
        {"role": "system", "content": "You are terse."}, {"role": "user", "content": "Hello!"}],
        max_tokens=12, temperature=0)
    c = r.choices[0]
    assert c.message.role == "assistant" and isinstance(c.message.content, str), c
    assert c.finish_reason in ("stop", "length"), c.finish_reason
    assert r.usage.prompt_tokens > 5 and 1 <= r.usage.completion_tokens <= 12, r.usage
    assert r.usage.total_tokens == r.usage.prompt_tokens + r.usage.completion_tokens


def chat_stream():
    kw = dict(model=MODEL, messages=[{"role": "user", "content": "Tell me about lamps."}],
              max_tokens=16, temperature=0)
    whole = client.chat.completions.create(**kw).choices[0].message.content
    parts, finish, usage = [], None, None
    for ch in client.chat.completions.create(stream=True, stream_options={"include_usage": True}, **kw):
        if ch.usage:
            usage = ch.usage
        for c in ch.choices:
            if c.delta.content:
                parts.append(c.delta.content)
            if c.finish_reason:
                finish = c.finish_reason
    assert "".join(parts) == whole, ("".join(parts), whole)
    assert finish in ("stop", "length") and usage and usage.completion_tokens >= 1


def thinking():
    r = client.chat.completions.create(model=MODEL, messages=[{"role": "user", "content": "Think."}],
                                       max_tokens=8, extra_body={"thinking": True, "reasoning_effort": "max"})
    m = r.choices[0].message
    # the tiny model never writes </think>: everything it says is reasoning
    assert getattr(m, "reasoning_content", None) is not None and m.content == "", m


TOOLS = [{"type": "function", "function": {
    "name": "get_weather", "description": "Weather for a city",
    "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}}}]


def tool_round_trip():
    first = client.chat.completions.create(model=MODEL, tools=TOOLS, max_tokens=8, messages=[
        {"role": "user", "content": "Weather in Paris?"}])
    plain = client.chat.completions.create(model=MODEL, max_tokens=8, messages=[
        {"role": "user", "content": "Weather in Paris?"}])
    assert first.usage.prompt_tokens > plain.usage.prompt_tokens + 50  # schemas are in the prompt
    r = client.chat.completions.create(model=MODEL, tools=TOOLS, max_tokens=8, messages=[
        {"role": "user", "content": "Weather in Paris?"},
        {"role": "assistant", "content": None, "tool_calls": [
            {"id": "call_1", "type": "function",
             "function": {"name": "get_weather", "arguments": "{\"city\": \"Paris\"}"}}]},
        {"role": "tool", "tool_call_id": "call_1", "content": "{\"temp\": 12}"}])
    assert r.choices[0].finish_reason in ("stop", "length", "tool_calls")
    assert r.usage.prompt_tokens > first.usage.prompt_tokens
    st, data = raw("POST", "/v1/chat/completions", json.dumps({"messages": [
        {"role": "assistant", "tool_calls": [{"id": "c", "type": "function",
                                              "function": {"name": "f", "arguments": "[1, 2]"}}]}]}))
    assert st == 400 and "arguments" in json.loads(data)["error"]["message"], (st, data)


def greedy_equals_generate():
    want = open(GREEDY, encoding="utf-8").read().rstrip("\n")
    r = client.completions.create(model=MODEL, prompt=PROMPT, max_tokens=32, temperature=0)
    assert r.choices[0].text == want, (r.choices[0].text, want)
    s = client.completions.create(model=MODEL, prompt=PROMPT, max_tokens=32, temperature=0, stream=True)
    assert "".join(c.choices[0].text for c in s) == want


def logprobs():
    """Per-token log-probabilities with top-n alternatives: greedy picks the top
    alternative; the completion's tokens spell its text; streaming gives the same
    entries as the whole response; out-of-range requests are refused."""
    want = open(GREEDY, encoding="utf-8").read().rstrip("\n")
    r = client.completions.create(model=MODEL, prompt=PROMPT, max_tokens=32, temperature=0,
                                  logprobs=3)
    lp = r.choices[0].logprobs
    assert "".join(lp.tokens) == r.choices[0].text == want, (lp.tokens, want)
    assert len(lp.token_logprobs) == len(lp.tokens) == len(lp.top_logprobs) >= 5, lp
    assert lp.text_offset == [len("".join(lp.tokens[:i])) for i in range(len(lp.tokens))]
    for t, v, top in zip(lp.tokens, lp.token_logprobs, lp.top_logprobs):
        assert 1 <= len(top) <= 3 and v <= 0, (t, v, top)
        assert max(top.values()) == v and top[t] == v, (t, v, top)   # greedy: the likeliest
    parts = list(client.completions.create(model=MODEL, prompt=PROMPT, max_tokens=32,
                                           temperature=0, logprobs=3, stream=True))
    toks = [t for c in parts if c.choices and c.choices[0].logprobs
            for t in c.choices[0].logprobs.tokens]
    vals = [v for c in parts if c.choices and c.choices[0].logprobs
            for v in c.choices[0].logprobs.token_logprobs]
    assert toks == lp.tokens and vals == lp.token_logprobs, (toks, lp.tokens)
    kw = dict(model=MODEL, messages=[{"role": "user", "content": "Tell me about lamps."}],
              max_tokens=10, temperature=0, logprobs=True, top_logprobs=4)
    c = client.chat.completions.create(**kw)
    content = c.choices[0].logprobs.content
    n_eos = c.choices[0].finish_reason == "stop"   # the ending EOS has no entry
    assert len(content) == c.usage.completion_tokens - n_eos, (len(content), c.usage)
    for e in content:
        assert len(e.top_logprobs) == 4 and e.top_logprobs[0].logprob == e.logprob, e
        assert e.top_logprobs[0].token == e.token and bytes(e.bytes) == e.token.encode(), e
        assert all(a.logprob >= b.logprob for a, b in zip(e.top_logprobs, e.top_logprobs[1:]))
    streamed = [e for ch in client.chat.completions.create(stream=True, **kw) for x in ch.choices
                if x.logprobs and x.logprobs.content for e in x.logprobs.content]
    assert [(e.token, e.logprob) for e in streamed] == [(e.token, e.logprob) for e in content]
    plain = client.chat.completions.create(**dict(kw, logprobs=None, top_logprobs=None))
    assert plain.choices[0].logprobs is None
    for body, param in [({"logprobs": True, "top_logprobs": 21}, "top_logprobs"),
                        ({"top_logprobs": 2}, "top_logprobs"), ({"logprobs": 3}, "logprobs")]:
        body["messages"] = [{"role": "user", "content": "x"}]
        st, data = raw("POST", "/v1/chat/completions", json.dumps(body))
        assert st == 400 and json.loads(data)["error"]["param"] == param, (body, st, data)
    st, data = raw("POST", "/v1/completions", json.dumps({"prompt": "x", "logprobs": 21}))
    assert st == 400 and json.loads(data)["error"]["param"] == "logprobs", (st, data)


def speculative():
    """The "speculative" extension (DSpark drafts verified in the scheduler's step):
    the same text and logprobs as without it, greedy and sampled, streaming and not;
    the health counters show drafts were verified; bad values are refused."""
    want = open(GREEDY, encoding="utf-8").read().rstrip("\n")
    before = health()["speculative"]
    r = client.completions.create(model=MODEL, prompt=PROMPT, max_tokens=32, temperature=0,
                                  logprobs=2, extra_body={"speculative": 4})
    plain = client.completions.create(model=MODEL, prompt=PROMPT, max_tokens=32, temperature=0,
                                      logprobs=2)
    assert r.choices[0].text == want, (r.choices[0].text, want)
    assert r.choices[0].logprobs.token_logprobs == plain.choices[0].logprobs.token_logprobs
    s = client.completions.create(model=MODEL, prompt=PROMPT, max_tokens=32, temperature=0,
                                  stream=True, extra_body={"speculative": True})
    assert "".join(c.choices[0].text for c in s) == want
    kw = dict(model=MODEL, messages=[{"role": "user", "content": "Tell me about lamps."}],
              max_tokens=24, temperature=0.8, top_p=0.9, seed=11, frequency_penalty=0.5,
              extra_body={"ignore_eos": True})
    a = client.chat.completions.create(**kw).choices[0].message.content
    kw["extra_body"] = {"ignore_eos": True, "speculative": 3}
    b = client.chat.completions.create(**kw).choices[0].message.content
    assert a == b, (a, b)
    after = health()["speculative"]
    assert after["drafted"] > before["drafted"] and after["accepted"] > before["accepted"], (before, after)
    for v in (-1, 2.5, "x"):
        st, data = raw("POST", "/v1/completions", json.dumps({"prompt": "x", "speculative": v}))
        assert st == 400 and json.loads(data)["error"]["param"] == "speculative", (v, st, data)


def one(seed):
    return client.completions.create(model=MODEL, prompt=PROMPT, max_tokens=16, temperature=0.9,
                                     seed=seed, top_p=0.95, extra_body={"ignore_eos": True}).choices[0].text


def concurrent():
    alone = {s: one(s) for s in range(6)}
    with cf.ThreadPoolExecutor(6) as ex:
        together = dict(zip(range(6), ex.map(one, range(6))))
    assert together == alone, (together, alone)  # same seed: same text, whatever runs beside it
    assert len(set(alone.values())) > 1


def queue_full():
    def req(_):
        try:
            client.completions.create(model=MODEL, prompt=PROMPT, max_tokens=24,
                                      extra_body={"ignore_eos": True})
            return 200
        except openai.RateLimitError:
            return 429
    with cf.ThreadPoolExecutor(12) as ex:
        codes = list(ex.map(req, range(12)))
    assert codes.count(429) > 0 and codes.count(200) >= 6, codes


def wait_cancelled(before, seconds):
    """Within `seconds`, the server counts one more cancelled request and runs none."""
    for _ in range(int(seconds / 0.2)):
        h = health()
        if h["cancelled"] > before and h["running"] == 0:
            return
        time.sleep(0.2)
    raise AssertionError(f"the request was not cancelled: {h}")


def disconnect():
    before = health()["cancelled"]
    c = http.client.HTTPConnection(URL.hostname, URL.port, timeout=60)
    c.request("POST", "/v1/completions", body=json.dumps(
        {"prompt": PROMPT, "max_tokens": 100000, "stream": True, "ignore_eos": True}),
        headers={"Content-Type": "application/json"})
    r = c.getresponse()
    assert r.status == 200
    try:  # SSE comments (": keep-alive") and blank lines may come before the first event
        line = r.readline()
        for _ in range(20):
            if line.startswith(b"data: "):
                break
            assert line.startswith(b":") or line.strip() == b"", line
            line = r.readline()
    except TimeoutError:
        raise AssertionError(f"no stream data: {health()}")
    assert line.startswith(b"data: "), line
    c.sock.close()  # the client goes away mid-stream
    c.close()
    wait_cancelled(before, 20.0)


def disconnect_non_streaming():
    """A non-streaming client that hangs up while its request runs: the server notices the
    closed socket within about a second, cancels the request and frees its slot."""
    before = health()["cancelled"]
    body = json.dumps({"prompt": PROMPT, "max_tokens": 100000, "ignore_eos": True}).encode()
    s = socket.create_connection((URL.hostname, URL.port), timeout=60)
    s.sendall(b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
              b"Content-Length: %d\r\n\r\n" % len(body) + body)
    for _ in range(50):
        if health()["running"] == 1:
            break
        time.sleep(0.1)
    else:
        raise AssertionError(f"the request did not start: {health()}")
    s.close()  # the client goes away before the answer
    wait_cancelled(before, 10.0)


def bad_params():
    """Integer parameters refuse decimals, each error names its parameter (as OpenAI does);
    a forced tool call is refused as unsupported."""
    user = [{"role": "user", "content": "x"}]
    cases = [({"max_tokens": 2.5}, "max_tokens"), ({"max_completion_tokens": 2.5}, "max_completion_tokens"),
             ({"seed": 1.5}, "seed"), ({"top_k": 2.5}, "top_k"), ({"max_tokens": "8"}, "max_tokens"),
             ({"tools": 5}, "tools"), ({"tools": [5]}, "tools"), ({"tool_choice": 5}, "tool_choice"),
             ({"tools": TOOLS, "tool_choice": "required"}, "tool_choice"),
             ({"tools": TOOLS, "tool_choice": {"type": "function", "function": {"name": "get_weather"}}},
              "tool_choice")]
    for extra, param in cases:
        st, data = raw("POST", "/v1/chat/completions", json.dumps(dict(extra, messages=user)))
        err = json.loads(data)["error"]
        assert st == 400 and err["param"] == param and err["message"], (extra, st, data)
        if param == "tool_choice" and extra["tool_choice"] != 5:
            assert "unsupported" in err["message"], err
    st, data = raw("POST", "/v1/completions", json.dumps({"prompt": "x", "seed": 0.5}))
    assert st == 400 and json.loads(data)["error"]["param"] == "seed", (st, data)
    # integral values written as decimals are integers; "auto" is accepted
    r = client.chat.completions.create(model=MODEL, messages=user, max_tokens=2, tools=TOOLS,
                                       tool_choice="auto", extra_body={"seed": 7.0})
    assert 1 <= r.usage.completion_tokens <= 2, r.usage
    st, data = raw("POST", "/v1/completions", json.dumps({"prompt": "x", "max_tokens": 2.0}))
    assert st == 200 and 1 <= json.loads(data)["usage"]["completion_tokens"] <= 2, (st, data)


def bad_requests():
    cases = [(b"{not json", 400), (b"[1, 2]", 400), (b'{"messages": []}', 400),
             (b'{"messages": [{"role": "user", "content": "x"}], "temperature": "hot"}', 400),
             (b'{"messages": [{"role": "user", "content": "x"}], "n": 2}', 400),
             (b'{"messages": [{"role": "user", "content": "x"}], "max_tokens": 0}', 400),
             (b'{"messages": [{"role": "robot", "content": "x"}]}', 400),
             (b'{"messages": [{"role": "user", "content": "\\u00ff"}], "logit_bias": {"99999999": 1}}', 400),
             (b"x" * (2 << 20), 413)]
    for body, want in cases:
        st, data = raw("POST", "/v1/chat/completions", body)
        err = json.loads(data)["error"]
        assert st == want and err["message"], (body[:60], st, data[:200])
    assert raw("GET", "/v1/chat/completions")[0] == 405
    assert raw("GET", "/v1/nothing")[0] == 404
    try:
        client.chat.completions.create(model=MODEL, messages=[{"role": "user", "content": "x"}],
                                       temperature=-3)
        raise AssertionError("accepted temperature -3")
    except openai.BadRequestError as e:
        assert "temperature" in str(e)


def prefix_reuse():
    """A follow-up prompt that starts with a finished request's prompt and answer reuses its
    sequence (the server runs with --prefix-cache): only the new tokens are prefilled."""
    first = client.completions.create(model=MODEL, prompt=PROMPT, max_tokens=8, temperature=0)
    before = health()["prefix_cache"]
    follow = PROMPT + first.choices[0].text + " And then"
    r = client.completions.create(model=MODEL, prompt=follow, max_tokens=4, temperature=0)
    after = health()["prefix_cache"]
    assert after["hits"] == before["hits"] + 1, (before, after)
    assert after["tokens_reused"] - before["tokens_reused"] == first.usage.prompt_tokens + 7, (before, after)
    assert r.usage.prompt_tokens > first.usage.prompt_tokens + 8


def still_serving():
    assert health()["status"] == "ok"
    chat_plain()
    h = health()
    assert h["running"] == 0 and h["waiting"] == 0, h


for name, fn in [("health", health), ("models", models), ("chat", chat_plain),
                 ("chat stream == non-stream", chat_stream), ("thinking mode", thinking),
                 ("tool call round trip", tool_round_trip),
                 ("greedy == dsv4-generate", greedy_equals_generate), ("logprobs", logprobs),
                 ("speculative == plain", speculative),
                 ("6 concurrent clients == alone", concurrent), ("queue full -> 429", queue_full),
                 ("client disconnect cancels", disconnect),
                 ("non-streaming client disconnect cancels", disconnect_non_streaming),
                 ("prefix reuse", prefix_reuse), ("malformed/oversized -> 4xx", bad_requests),
                 ("bad parameters -> 400 naming them", bad_params),
                 ("still serving", still_serving)]:
    check(name, fn)
print("all server checks passed")
