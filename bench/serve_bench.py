#!/usr/bin/env python3
"""Serving benchmark through dsv4-server: C concurrent streaming clients.

    serve_bench.py URL [-c 1,2,4,8] [-n OUTPUT_LEN] [--prompt-file FILE]
                   [--prompt-chars N] [--repeat R] [--warmup] [--json FILE]

For each C, C clients send one streaming /v1/completions request each at the
same instant t0 (prompt i: the window of --prompt-chars characters of the
prompt file starting at i/C_max of it; the server feeds BOS + its tokens),
temperature 0, OUTPUT_LEN tokens with EOS ignored, and
stream_options.continuous_usage_stats, so every SSE chunk says how many
tokens it completes. The definitions are dsv4-bench's (bench/RESULTS.md §2):
  TTFT   t0 -> the first chunk carrying a token;
  ITL    token-attributed: a chunk arriving dt after the previous one and
         carrying k tokens gives k samples of dt / k (field notes §5.5);
  tok/s  whole run: C x OUTPUT_LEN / (t0 -> last token);
quantiles by linear interpolation at q (n - 1) (numpy's default). Standard
library only.
"""
import argparse
import http.client
import json
import sys
import threading
import time
import urllib.parse


def quantile(xs, q):
    xs = sorted(xs)
    if not xs:
        return float("nan")
    pos = q * (len(xs) - 1)
    lo = int(pos)
    hi = min(lo + 1, len(xs) - 1)
    return xs[lo] + (xs[hi] - xs[lo]) * (pos - lo)


def one_request(url, prompt, n, t0_event, out):
    u = urllib.parse.urlparse(url)
    body = json.dumps({"prompt": prompt, "max_tokens": n, "temperature": 0, "stream": True,
                       "ignore_eos": True,
                       "stream_options": {"include_usage": True, "continuous_usage_stats": True}})
    conn = http.client.HTTPConnection(u.hostname, u.port, timeout=600)
    t0_event.wait()
    t0 = time.perf_counter()
    conn.request("POST", "/v1/completions", body=body, headers={"Content-Type": "application/json"})
    resp = conn.getresponse()
    if resp.status != 200:
        out.update(error=f"HTTP {resp.status}: {resp.read()[:200]!r}")
        return
    chunks = []  # (time, completion tokens so far)
    prompt_tokens = 0
    while True:
        line = resp.readline()
        if not line:
            break
        if not line.startswith(b"data: "):
            continue
        data = line[6:].strip()
        if data == b"[DONE]":
            break
        ev = json.loads(data)
        usage = ev.get("usage")
        if usage:
            prompt_tokens = usage["prompt_tokens"]
            if not chunks or usage["completion_tokens"] > chunks[-1][1]:
                chunks.append((time.perf_counter(), usage["completion_tokens"]))
    conn.close()
    out.update(t0=t0, chunks=chunks, prompt_tokens=prompt_tokens)


def run(url, c, prompts, n):
    start = threading.Event()
    outs = [dict() for _ in range(c)]
    threads = [threading.Thread(target=one_request, args=(url, prompts[i], n, start, outs[i]))
               for i in range(c)]
    for t in threads:
        t.start()
    t0 = time.perf_counter()
    start.set()
    for t in threads:
        t.join()
    errors = [o["error"] for o in outs if "error" in o]
    if errors:
        raise SystemExit(f"serve_bench: C={c}: {errors[0]}")
    ttft, itl, last, tokens = [], [], t0, 0
    for o in outs:
        ch = o["chunks"]
        ttft.append((ch[0][0] - t0) * 1e3)
        for (ta, ka), (tb, kb) in zip(ch, ch[1:]):
            k = kb - ka
            itl.extend([(tb - ta) * 1e3 / k] * k)
        last = max(last, ch[-1][0])
        tokens += ch[-1][1]
    return {"concurrency": c, "output_tokens": tokens,
            "prompt_tokens": [o["prompt_tokens"] for o in outs],
            "ttft_ms": {"mean": sum(ttft) / len(ttft), "p50": quantile(ttft, 0.5),
                        "p90": quantile(ttft, 0.9), "max": max(ttft)},
            "itl_ms": {"samples": len(itl), "p50": quantile(itl, 0.5), "p90": quantile(itl, 0.9),
                       "p99": quantile(itl, 0.99), "max": max(itl) if itl else float("nan")},
            "tok_per_s": tokens / (last - t0), "wall_s": last - t0}


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("url")
    ap.add_argument("-c", default="1,2,4,8")
    ap.add_argument("-n", type=int, default=32)
    ap.add_argument("--prompt-file", default="data/tiny-tokenizer/corpus.txt")
    ap.add_argument("--prompt-chars", type=int, default=300)
    ap.add_argument("--repeat", type=int, default=1)
    ap.add_argument("--warmup", action="store_true")
    ap.add_argument("--json")
    a = ap.parse_args()
    cs = [int(x) for x in a.c.split(",")]
    text = open(a.prompt_file, encoding="utf-8").read()
    prompts = []
    for i in range(max(cs)):
        off = len(text) * i // max(cs)
        prompts.append((text[off:] + text)[:a.prompt_chars])
    if a.warmup:
        run(a.url, 1, prompts, 4)
    results = []
    for c in cs:
        for r in range(a.repeat):
            res = run(a.url, c, prompts, a.n)
            res["repeat"] = r
            results.append(res)
            print(f"C={c:3d}  TTFT mean {res['ttft_ms']['mean']:8.1f} ms  ITL p50 {res['itl_ms']['p50']:7.2f} "
                  f"p90 {res['itl_ms']['p90']:7.2f} p99 {res['itl_ms']['p99']:7.2f} ms  "
                  f"{res['tok_per_s']:7.1f} tok/s  ({res['output_tokens']} tokens, {res['wall_s']:.2f} s)",
                  file=sys.stderr, flush=True)
    report = {"url": a.url, "output_len": a.n, "prompt_chars": a.prompt_chars,
              "prompt_file": a.prompt_file, "runs": results}
    if a.json:
        with open(a.json, "w") as f:
            json.dump(report, f, indent=1)
    else:
        json.dump(report, sys.stdout, indent=1)


if __name__ == "__main__":
    main()
