"""Paths for the tests: the checkout (DSV4_SOURCE_ROOT), its build (DSV4_BUILD_ROOT),
the fixtures (DSV4_FIXTURES; DSV4_REQUIRE_FIXTURES=1 turns a missing folder into a
failure, as in CI)."""
import json
import os
import struct
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))
SOURCE = os.environ.get("DSV4_SOURCE_ROOT", os.path.join(HERE, "..", ".."))
BUILD = os.environ.get("DSV4_BUILD_ROOT", os.path.join(SOURCE, "build"))
FIXTURES = os.environ.get("DSV4_FIXTURES", os.path.join(SOURCE, "..", "shared", "fixtures"))


def fixture(name):
    d = os.path.join(FIXTURES, name)
    if not os.path.isdir(d):
        if os.environ.get("DSV4_REQUIRE_FIXTURES") == "1":
            raise AssertionError(f"fixture folder {d} is missing")
        raise unittest.SkipTest(f"{d} absent")
    return d


def read_safetensors(path):
    """{name: numpy array} of a safetensors file (format: 8-byte little-endian header
    length, JSON header, data)."""
    import numpy as np
    dtypes = {"F32": np.float32, "I64": np.int64, "I32": np.int32, "BF16": np.uint16,
              "F16": np.float16, "I8": np.int8, "U8": np.uint8}
    with open(path, "rb") as f:
        data = f.read()
    (n,) = struct.unpack("<Q", data[:8])
    header = json.loads(data[8:8 + n])
    out = {}
    for name, t in header.items():
        if name == "__metadata__" or t["dtype"] not in dtypes:
            continue
        a, b = t["data_offsets"]
        out[name] = np.frombuffer(data[8 + n + a:8 + n + b], dtype=dtypes[t["dtype"]]).reshape(
            t["shape"])
    return out


class DefaultModelCase(unittest.TestCase):
    """A test class sharing one engine (4 sequences, context 128, 1 thread) and the
    tokenizer of the default model: cls.path, cls.tok, cls.eng."""

    @classmethod
    def setUpClass(cls):
        import dsv4
        cls.path = dsv4.default_model()
        if cls.path is None:
            raise AssertionError("no default model (build it: ninja -C build)")
        cls.tok = dsv4.Tokenizer(cls.path)
        cls.eng = dsv4.Engine(cls.path, max_sequences=4, max_context=128, n_threads=1)

    @classmethod
    def tearDownClass(cls):
        cls.eng.close()
        cls.tok.close()
