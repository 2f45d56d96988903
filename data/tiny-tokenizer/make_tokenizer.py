#!/usr/bin/env python3
"""Make the small byte-level BPE tokenizer of libdsv4's own tiny model.

Development-time only (the outputs are committed; tests never run Python):

    python3 -m venv /tmp/tokvenv && /tmp/tokvenv/bin/pip install tokenizers
    /tmp/tokvenv/bin/python data/tiny-tokenizer/make_tokenizer.py

Writes, next to this script:
  tokenizer.json         BPE trained on corpus.txt (text written for this project),
                         781 ids: 0 BOS, 1 EOS, 2 pad, 3..258 the 256 byte tokens,
                         then merges, 766 DSpark noise, 767 image token, and
                         768..780 the V4.1 chat-format markers as special tokens
                         (the release tokenizer has them: a chat prompt on the
                         default model gets the marker ids the encoder's prompt
                         has, and generated markers are single tokens)
  tokenizer_config.json  same keys as the DeepSeek release (add_bos_token false)
  golden.json            reference encodings of test strings and the decoding of
                         every single id, from the `tokenizers` package

The pre-tokenizer is copied from the tiny-v41 fixtures (a Sequence of two
isolating Splits, the DeepSeek regex family, then ByteLevel without prefix
space or regex), so this tokenizer exercises the same code paths.
"""
import json
import os
import re
import sys

from tokenizers import Regex, Tokenizer, decoders, models, pre_tokenizers, trainers, AddedToken
import tokenizers

HERE = os.path.dirname(os.path.abspath(__file__))
VOCAB = 768  # trained ids plus the two tokens appended after training

BOS, EOS, PAD = "<｜begin▁of▁sentence｜>", "<｜end▁of▁sentence｜>", "<｜▁pad▁｜>"
NOISE, IMAGE = "<｜dspark▁noise｜>", "<｜deepseek_image｜>"
# The chat format's markers (lib/serve/chat_render.c), ids VOCAB.. in this order.
CHAT_MARKERS = ["<｜System｜>", "<｜User｜>", "<｜Assistant｜>", "<｜latest_reminder｜>",
                "<think>", "</think>", "｜DSML｜", "<｜action｜>", "<｜query｜>",
                "<｜authority｜>", "<｜domain｜>", "<｜title｜>", "<｜read_url｜>"]
N_IDS = VOCAB + len(CHAT_MARKERS)

# Copied from ../shared/fixtures/tiny-v41-a/tokenizer.json "pre_tokenizer".
SPLIT_DIGITS = r"\p{N}{1,3}"
SPLIT_MAIN = r"[\r\n]+|\s?\p{L}+|\s?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+"

TESTS = [
    "Hello, world!",
    "The lamplighter came up Harrow Lane with his ladder.",
    "  two  spaces\tand a tab\nnew line\r\nwindows line\rcarriage return only",
    "12345 + 678 = 13023; pi is 3.14159, 1,000,000 and 0x7f",
    "café naïve façade Zürich crêpes Élodie",
    "e\u0301 a\u0308 n\u0303 o\u0302\u0323 (combining accents)",
    "日本語のテキスト、中文句子。한국어 문장",
    "👨‍👩‍👧 👍🏽 🇫🇷 ❤️ 🙂🙂🙂 🏳️‍🌈",
    "control: \x01\x02\x1b[0m\x7f\x0b\x0c end",
    "\u00a0non-breaking\u2028line separator\u3000ideographic space\u180emongolian",
    BOS + "Hello" + EOS,
    BOS,
    "x" + PAD + PAD + "y",
    NOISE + " and " + IMAGE,
    " " + BOS + " spaced " + EOS + " ",
    "<｜begin▁of▁sentence｜ is not closed, <｜ neither",
    "def square(x):\n    return x * x\n\nfor n in range(3, 9):\n    print(n, square(n))\n",
    "",
    " ",
    "\n\n\n",
    "the " * 200,
    "a" * 300,
    "¿Qué tal? «Très bien» — “quotes” ‘single’ … ± × ÷ ≤ ≥ € £ ¥",
    BOS + "<｜User｜>Hi<｜Assistant｜></think>Hello" + EOS + "<think>x</think>｜DSML｜",
]


# Variants of the trained tokenizer.json used to pin behaviour DeepSeek's
# files do not exercise (the C test applies each patch to tokenizer.json and
# compares with these encodings): added-token flags, a normalizer, the GPT-2
# ByteLevel split with prefix space, every Split behaviour and invert, a
# String pattern, Oniguruma escapes (\\h, \\uHHHH, line anchors), ignore_merges,
# and no decoder.
EXTRA_ADDED = [
    {"id": 781, "content": "<mark>", "single_word": False, "lstrip": True, "rstrip": True,
     "normalized": False, "special": True},
    {"id": 782, "content": "lamp", "single_word": True, "lstrip": False, "rstrip": False,
     "normalized": True, "special": False},
    {"id": 783, "content": "dog", "single_word": False, "lstrip": True, "rstrip": False,
     "normalized": False, "special": False},
    {"id": 784, "content": "<mark>x", "single_word": False, "lstrip": False, "rstrip": False,
     "normalized": True, "special": False},
    {"id": 785, "content": "\ufb01n", "single_word": False, "lstrip": False, "rstrip": True,
     "normalized": True, "special": False},
]
DEEPSEEK_V3_SPLITS = [
    {"type": "Split", "pattern": {"Regex": "\\p{N}{1,3}"}, "behavior": "Isolated", "invert": False},
    {"type": "Split", "pattern": {"Regex": "[\u4e00-\u9fa5\\u3040-\u309f\u30a0-\u30ff]+"},
     "behavior": "Isolated", "invert": False},
    {"type": "Split", "pattern": {"Regex":
        "[!\"#$%&'()*+,\\-./:;<=>?@\\[\\\\\\]^_`{|}~][A-Za-z]+|[^\r\n\\p{L}\\p{P}\\p{S}]?[\\p{L}\\p{M}]+|"
        " ?[\\p{P}\\p{S}]+[\r\n]*|\\s*[\r\n]+|\\s+(?!\\S)|\\s+"}, "behavior": "Isolated", "invert": False},
]
BYTELEVEL_PLAIN = {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": True, "use_regex": False}
VARIANTS = {
    "added_flags": {"added_tokens+": EXTRA_ADDED},
    "nfkc": {"added_tokens+": EXTRA_ADDED,
             "normalizer": {"type": "Sequence", "normalizers": [{"type": "NFKC"}]}},
    "nfd": {"normalizer": {"type": "NFD"}},
    "gpt2_bytelevel": {"pre_tokenizer": {"type": "ByteLevel", "add_prefix_space": True,
                                         "trim_offsets": True, "use_regex": True}},
    "behaviors": {"pre_tokenizer": {"type": "Sequence", "pretokenizers": [
        {"type": "Split", "pattern": {"Regex": "\\s"}, "behavior": "MergedWithPrevious", "invert": False},
        {"type": "Split", "pattern": {"String": "e"}, "behavior": "MergedWithNext", "invert": False},
        {"type": "Split", "pattern": {"Regex": "[aeiou]+"}, "behavior": "Contiguous", "invert": True},
        {"type": "Split", "pattern": {"Regex": "\\w+|x*"}, "behavior": "Removed", "invert": True},
        dict(BYTELEVEL_PLAIN, add_prefix_space=True)]}},
    "removed_anchors": {"pre_tokenizer": {"type": "Sequence", "pretokenizers": [
        {"type": "Split", "pattern": {"Regex": "\\s+|\\h"}, "behavior": "Removed", "invert": False},
        {"type": "Split", "pattern": {"Regex": "^.|.$|\\u00e9"}, "behavior": "Isolated", "invert": False},
        BYTELEVEL_PLAIN]}},
    "deepseek_v3_splits": {"added_tokens+": EXTRA_ADDED,
                           "normalizer": {"type": "Sequence", "normalizers": []},
                           "pre_tokenizer": {"type": "Sequence",
                                             "pretokenizers": DEEPSEEK_V3_SPLITS + [BYTELEVEL_PLAIN]}},
    "ignore_merges": {"model.ignore_merges": True},
    "no_decoder": {"decoder": None},
}
VARIANT_TESTS = TESTS + [
    "<mark> hello </mark>  <mark>  x <mark>x dog  dog lamp lamps lamp_ alamp \ufb01n  fin",
    "<think> a</think> <｜User｜>b<｜Assistant｜></think>",
    "Ab12 3456 aeiou xx  y\u00e9 e\u0301 caf\u00e9 \u0130stanbul \u2460\u2461 \u3000",
    "line one\nline two\n\nthree",
]


def apply_variant(base, patch):
    t = json.loads(json.dumps(base))
    for key, value in patch.items():
        if key == "added_tokens+":
            t["added_tokens"] = t["added_tokens"] + value
        elif key.startswith("model."):
            t["model"][key[len("model."):]] = value
        else:
            t[key] = value
    return t


def main():
    corpus = os.path.join(HERE, "corpus.txt")
    tok = Tokenizer(models.BPE())
    tok.normalizer = None
    tok.pre_tokenizer = pre_tokenizers.Sequence([
        pre_tokenizers.Split(Regex(SPLIT_DIGITS), behavior="isolated", invert=False),
        pre_tokenizers.Split(Regex(SPLIT_MAIN), behavior="isolated", invert=False),
        pre_tokenizers.ByteLevel(add_prefix_space=False, trim_offsets=True, use_regex=False),
    ])
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=VOCAB - 2,
        min_frequency=1,
        special_tokens=[AddedToken(t, special=True, normalized=False) for t in (BOS, EOS, PAD)],
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tok.train([corpus], trainer)
    if tok.get_vocab_size() != VOCAB - 2:
        sys.exit("corpus too small: trained %d ids, wanted %d" % (tok.get_vocab_size(), VOCAB - 2))
    tok.add_special_tokens([AddedToken(NOISE, special=True, normalized=False),
                            AddedToken(IMAGE, special=True, normalized=False)])
    assert [tok.token_to_id(t) for t in (BOS, EOS, PAD, NOISE, IMAGE)] == [0, 1, 2, VOCAB - 2, VOCAB - 1]
    tok.add_special_tokens([AddedToken(t, special=True, normalized=False) for t in CHAT_MARKERS])
    assert [tok.token_to_id(t) for t in CHAT_MARKERS] == list(range(VOCAB, N_IDS))
    tok.save(os.path.join(HERE, "tokenizer.json"), pretty=True)

    config = {
        "add_bos_token": False,
        "add_eos_token": False,
        "bos_token": BOS,
        "eos_token": EOS,
        "pad_token": PAD,
        "clean_up_tokenization_spaces": False,
        "legacy": True,
        "model_max_length": 1048576,
        "tokenizer_class": "PreTrainedTokenizerFast",
    }
    with open(os.path.join(HERE, "tokenizer_config.json"), "w", encoding="utf-8") as f:
        json.dump(config, f, ensure_ascii=False, indent=2)
        f.write("\n")

    # Reload from disk so the golden comes from exactly the committed file.
    ref = Tokenizer.from_file(os.path.join(HERE, "tokenizer.json"))
    golden = {
        "made_by": "data/tiny-tokenizer/make_tokenizer.py",
        "tokenizers_version": tokenizers.__version__,
        "rule": "ids = Tokenizer.encode(text, add_special_tokens=False).ids; "
                "decode_single[i] = Tokenizer.decode([i], skip_special_tokens=False)",
        "vocab_size": ref.get_vocab_size(),
        "special": {"bos": 0, "eos": 1, "pad": 2, "dspark_noise": VOCAB - 2, "image": VOCAB - 1},
        "encodings": [{"text": t, "ids": ref.encode(t, add_special_tokens=False).ids} for t in TESTS],
        "decode_single": [ref.decode([i], skip_special_tokens=False) for i in range(ref.get_vocab_size())],
    }
    base = json.loads(ref.to_str())
    golden["variants"] = {}
    for name, patch in VARIANTS.items():
        vt = Tokenizer.from_str(json.dumps(apply_variant(base, patch)))
        encs = []
        for text in VARIANT_TESTS:
            ids = vt.encode(text, add_special_tokens=False).ids
            encs.append({"text": text, "ids": ids, "decoded": vt.decode(ids, skip_special_tokens=False)})
        golden["variants"][name] = {"patch": patch, "encodings": encs}
    text = json.dumps(golden, ensure_ascii=False, indent=1)
    # one line per id list
    text = re.sub(r"\[\s*(-?\d+(?:,\s*-?\d+)*)\s*\]",
                  lambda m: "[" + ", ".join(x.strip() for x in m.group(1).split(",")) + "]", text)
    with open(os.path.join(HERE, "golden.json"), "w", encoding="utf-8") as f:
        f.write(text + "\n")
    print("wrote tokenizer.json (%d ids, %d merges), tokenizer_config.json, golden.json"
          % (ref.get_vocab_size(), len(json.loads(ref.to_str())["model"]["merges"])))


if __name__ == "__main__":
    main()
