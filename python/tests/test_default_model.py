"""The package on the project's default model (build/models/dsv4-tiny): the
README's generation, streaming, numpy logits, sequences, and every failure as
an exception with the library's message that leaves the engine usable."""
import os
import subprocess
import unittest

import numpy as np
from common import BUILD, SOURCE, DefaultModelCase

import dsv4

PROMPT = "Every evening the old lamplighter"


class DefaultModel(DefaultModelCase):

    def test_readme_generation(self):
        text = "".join(t.text for t in self.eng.generate(PROMPT, self.tok, max_tokens=64))
        with open(os.path.join(SOURCE, "README.md")) as f:
            readme = f.read().splitlines()
        self.assertIn(text, readme)
        self.assertEqual(text, " walked up Harrow Lane with his ladder.")

    def test_same_ids_as_the_c_tool(self):
        ids = [t.id for t in self.eng.generate(PROMPT, self.tok, max_tokens=20) if t.id is not None]
        tool = os.path.join(BUILD, "examples", "dsv4-generate")
        out = subprocess.run([tool, "-m", self.path, "-p", PROMPT, "-n", "20", "--ids", "--quiet",
                              "--threads", "1"], check=True, capture_output=True, text=True).stdout
        self.assertEqual(ids, [int(x) for x in out.split()])

    def test_stream_pieces_equal_decode(self):
        toks = list(self.eng.generate(PROMPT, self.tok, max_tokens=30))
        ids = [t.id for t in toks if t.id is not None]
        self.assertEqual("".join(t.text for t in toks), self.tok.decode(ids, skip_special=True))

    def test_encode_decode_and_specials(self):
        ids = self.tok.encode(PROMPT)
        self.assertTrue(ids and all(isinstance(i, int) for i in ids))
        self.assertEqual(self.tok.decode(ids), PROMPT)
        self.assertEqual(self.tok.bos, self.eng.model.info.bos_token_id)
        self.assertEqual(self.tok.token_id(self.tok.token_text(ids[0])), ids[0])
        long_text = PROMPT * 200
        self.assertEqual(self.tok.decode(self.tok.encode(long_text)), long_text)
        with self.assertRaises(dsv4.InvalidArgument) as cm:
            self.tok.encode(b"ok \xff\xfe")
        self.assertEqual(cm.exception.name, "DSV4_ERR_INVALID_UTF8")
        self.assertIn("byte 3", cm.exception.message)

    def test_logits_are_numpy_and_greedy_takes_the_argmax(self):
        ids = [self.tok.bos] + self.tok.encode(PROMPT)
        with self.eng.sequence() as s:
            nxt, logits = s.prefill(ids, logits=True)
            self.assertIsInstance(logits, np.ndarray)
            self.assertEqual(logits.dtype, np.float32)
            self.assertEqual(logits.shape, (self.eng.model.info.vocab_size,))
            self.assertEqual(nxt, int(np.argmax(logits)))
            buf = np.zeros((1, logits.shape[0]), dtype=np.float32)
            toks, out = self.eng.decode([s], [nxt], logits=True, out=buf)
            self.assertIs(out, buf)  # written in place, no copy
            self.assertEqual(toks[0], int(np.argmax(buf[0])))

    def test_batch_equals_single_and_fork_equals_parent(self):
        ids = [self.tok.bos] + self.tok.encode(PROMPT)
        with self.eng.sequence() as a, self.eng.sequence() as b:
            ta, tb = a.prefill(ids), b.prefill(ids[:3])
            with a.fork() as c:
                self.assertEqual(len(c), len(a))
                (na, nb), lg = self.eng.decode([a, b], [ta, tb], logits=True)
                nc, lc = c.decode(ta, logits=True)
                self.assertEqual(nc, na)
                np.testing.assert_array_equal(lc, lg[0])

    def test_failures_raise_with_the_message_and_change_nothing(self):
        with self.assertRaises(dsv4.NotFound) as cm:
            dsv4.Model("/no/such/checkpoint")
        self.assertIn("/no/such/checkpoint", cm.exception.message)
        self.assertEqual(cm.exception.name, "DSV4_ERR_NOT_FOUND")
        with self.eng.sequence() as s:
            nxt = s.prefill([self.tok.bos])
            before = len(s)
            with self.assertRaises(dsv4.InvalidArgument) as cm:
                s.decode(10 ** 6)
            self.assertEqual(cm.exception.status, -52)
            self.assertTrue(cm.exception.message)
            self.assertEqual(len(s), before)       # nothing changed
            s.decode(nxt)                          # the sequence still works
            with self.assertRaises(dsv4.UnknownSequence):
                self.eng.decode([987654321], [nxt])
            with self.assertRaises(dsv4.ContextOverflow):
                s.prefill([5] * 200)
            self.assertEqual(len(s), before + 1)

    def test_kv_full_and_context_managers(self):
        with dsv4.Engine(self.path, max_sequences=1, max_context=16, n_threads=1) as e:
            with e.sequence():
                with self.assertRaises(dsv4.KVCacheFull):
                    e.sequence()
            with e.sequence() as s:   # the slot came back
                s.prefill([self.tok.bos])
        self.assertTrue(e.closed)
        with self.assertRaises(ValueError):
            e.info
        with dsv4.Model(self.path, config_only=True) as m:
            self.assertEqual(len(list(m.tensors())), m.info.n_tensors)
            self.assertGreater(m.layer(0).compress_ratio + 1, 0)

    def test_version(self):
        import re
        with open(os.path.join(SOURCE, "meson.build")) as f:
            version = re.search(r"version\s*:\s*'([0-9.]+)'", f.read()).group(1)
        self.assertEqual(dsv4.library_version(), version)
        self.assertIn("DSV4_ERR_INVALID_ARG", dsv4.status_string(-1))


if __name__ == "__main__":
    unittest.main()
