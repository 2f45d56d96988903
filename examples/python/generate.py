#!/usr/bin/env python3
"""The main job from Python: greedy generation from BOS + the prompt, streamed.

    PYTHONPATH=python python3 examples/python/generate.py [MODEL_DIR] [PROMPT]

MODEL_DIR defaults to the project's default model (dsv4.default_model())."""
import sys

import dsv4

model = sys.argv[1] if len(sys.argv) > 1 else dsv4.default_model()
prompt = sys.argv[2] if len(sys.argv) > 2 else "Every evening the old lamplighter"
try:
    with dsv4.Engine(model, max_sequences=1) as engine, dsv4.Tokenizer(model) as tok:
        for token in engine.generate(prompt, tok, max_tokens=64):   # BOS is added
            print(token.text, end="", flush=True)
        print()
except dsv4.Error as e:   # status name and the library's message
    sys.exit(f"generate.py: {e}")
