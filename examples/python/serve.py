#!/usr/bin/env python3
"""Serving from Python: requests batched by the library's scheduler (continuous
batching, each with its own sampling and stop conditions), streamed as they are
produced, then a chat turn in the V4.1 chat format, its output parsed as it streams.

    PYTHONPATH=python python3 examples/python/serve.py [MODEL_DIR]

MODEL_DIR defaults to the project's default model (dsv4.default_model()).
Prints each completion on its own line in submission order, then the chat
turn's assistant message as JSON."""
import json
import sys

import dsv4

model = sys.argv[1] if len(sys.argv) > 1 else dsv4.default_model()
try:
    with dsv4.Engine(model, max_sequences=4) as engine, dsv4.Tokenizer(model) as tok, \
            dsv4.Scheduler(engine, tok) as sched:
        prompt = [tok.bos] + tok.encode("Every evening the old lamplighter")  # BOS + text
        reqs = [sched.submit(prompt, max_tokens=64),                          # greedy
                sched.submit(prompt[:3], max_tokens=64),                      # "Every evening"
                sched.submit(prompt, max_tokens=64, temperature=1.0, top_p=0.9, seed=1),
                sched.submit(prompt, max_tokens=64, stop=[" Lane"], logprobs=2)]
        texts = {r.id: "" for r in reqs}
        for ev in sched:             # every request's tokens as each step makes them
            if ev.token != tok.eos:
                texts[ev.request] += ev.text
        for r in reqs:
            print(texts[r.id])
        turn = sched.chat([{"role": "user", "content": "Who lights the lamps?"}], max_tokens=32)
        for ev in turn:              # dsv4.ChatEvent: kind "reasoning", "content", "tool_call"
            pass                     # (an interactive program shows ev.text here)
        print(json.dumps(turn.message(), ensure_ascii=False))
except dsv4.Error as e:              # status name and the library's message
    sys.exit(f"serve.py: {e}")
