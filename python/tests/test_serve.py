"""The chat format and the scheduler from Python: the chat goldens (ids of the
release encoder), the streaming parser at every split, and the scheduler on the
default model: each request's tokens equal the engine's own greedy run, events
stream with log-probabilities that match the logits, stop strings, cancel,
poll mode, chat turns, and every failure as an exception that leaves the
scheduler serving."""
import json
import os
import threading
import unittest

import numpy as np
from common import SOURCE, DefaultModelCase

import dsv4
from dsv4 import chat

PROMPT = "Every evening the old lamplighter"
CHAT_DATA = os.path.join(SOURCE, "tests", "data", "chat")
TINY_TOKENIZER = os.path.join(SOURCE, "data", "tiny-tokenizer")   # the default model's
EFFORT = {"low": 25, "high": 50, "xhigh": 75, "max": 100}


def golden_options(o):
    eff = o.get("reasoning_effort", 0)
    return dict(mode=o["thinking_mode"], keep_reasoning=o.get("drop_thinking") is False,
                bos=o.get("add_default_bos_token", True), reasoning_effort=EFFORT.get(eff, eff))


class ChatFormat(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        with open(os.path.join(CHAT_DATA, "goldens.json")) as f:
            cls.goldens = json.load(f)
        cls.tok = dsv4.Tokenizer(TINY_TOKENIZER)   # with the chat markers (ids 768..)

    @classmethod
    def tearDownClass(cls):
        cls.tok.close()

    def test_goldens(self):
        convs = self.goldens["conversations"]
        self.assertGreaterEqual(len(convs), 20)
        for c in convs:
            opts = golden_options(c["options"])
            with self.subTest(c["name"]):
                self.assertEqual(chat.render(c["messages"], **opts), c["text"])
                self.assertEqual(chat.encode(self.tok, c["messages"], parse_special=True, **opts),
                                 c["ids_parse"])
                self.assertEqual(chat.encode(self.tok, json.dumps(c["messages"]), **opts),
                                 c["ids_plain"])

    def test_tools_argument_equals_the_object_form(self):
        msgs = [{"role": "user", "content": "Weather in Paris?"}]
        tools = [{"type": "function", "function": {"name": "get_weather", "parameters": {
            "type": "object", "properties": {"city": {"type": "string"}}}}}]
        text = chat.render(msgs, tools=tools)
        self.assertEqual(text, chat.render({"messages": msgs, "tools": tools}))
        self.assertIn("get_weather", text)
        self.assertNotIn("get_weather", chat.render(msgs))

    def test_parser_every_split(self):
        done = 0
        for c in self.goldens["completions"]:
            m = c.get("message")
            if m is None:
                continue
            text = c["text"]
            for cut in range(len(text) + 1):
                with chat.ChatParser(c["mode"]) as p:
                    ev = p.push(text[:cut]) + p.push(text[cut:].encode()) + p.finish()
                self.assertEqual("".join(e.text for e in ev if e.kind == "content"), m["content"])
                self.assertEqual("".join(e.text for e in ev if e.kind == "reasoning"),
                                 m["reasoning_content"])
                self.assertEqual([e.tool_call for e in ev if e.kind == "tool_call"],
                                 [t["function"] for t in m["tool_calls"]])
                self.assertEqual(ev[-1].kind, "end")
            done += 1
        self.assertEqual(done, 5)

    def test_failures_raise_with_the_message(self):
        with self.assertRaises(dsv4.CheckpointError) as cm:
            chat.render("[{not json")
        self.assertEqual(cm.exception.name, "DSV4_ERR_JSON")
        self.assertIn("line", cm.exception.message)
        with self.assertRaises(dsv4.InvalidArgument) as cm:
            chat.render([{"role": "wizard", "content": "x"}])
        self.assertIn("0", cm.exception.message)      # names the message index
        with self.assertRaises(dsv4.InvalidArgument):
            chat.render([{"role": "user", "content": "x"}], mode="thinking", reasoning_effort=101)
        with self.assertRaises(ValueError):
            chat.render([{"role": "user", "content": "x"}], mode="poetry")
        p = chat.ChatParser()
        p.close()
        with self.assertRaises(ValueError):
            p.push("x")


class SchedulerOnTheDefaultModel(DefaultModelCase):
    @classmethod
    def setUpClass(cls):
        super().setUpClass()
        cls.ids = [cls.tok.bos] + cls.tok.encode(PROMPT)

    def alone(self, prompt, n):
        return [t.id for t in self.eng.generate(prompt, max_tokens=n, stop_at_eos=False)]

    def test_requests_equal_each_run_alone(self):
        prompts = [self.ids, self.ids[:4], self.ids[:2] + [7, 8, 9], self.ids[1:]]
        lengths = [20, 9, 14, 5]
        with dsv4.Scheduler(self.eng, self.tok, prefill_chunk=3) as s:
            reqs = [s.submit(p, max_tokens=n, ignore_eos=True) for p, n in zip(prompts, lengths)]
            seen = list(s)                      # every event of every request, as stepped
            self.assertEqual(s.active, 0)
            st = s.stats
        self.assertEqual(len(seen), sum(lengths))
        for r, p, n in zip(reqs, prompts, lengths):
            got = [e.token for e in r]
            self.assertEqual(got, self.alone(p, n))
            self.assertEqual(r.tokens, got)
            self.assertEqual(r.finish, "length")
        self.assertEqual((st.submitted, st.finished, st.cancelled), (4, 4, 0))
        self.assertEqual(st.prefill_tokens, sum(len(p) for p in prompts))
        self.assertEqual(self.eng.info.sequences_live, 0)

    def test_streaming_text_positions_and_logprobs(self):
        with self.eng.sequence() as seq:
            first, logits = seq.prefill(self.ids, logits=True)
        lp = logits.astype(np.float64) - np.log(np.sum(np.exp(logits.astype(np.float64) -
                                                              logits.max()))) - logits.max()
        with dsv4.Scheduler(self.eng, self.tok) as s:
            r = s.submit(self.ids, max_tokens=12, logprobs=5, ignore_eos=True)
            events = []
            for e in r:                          # streams: steps as needed
                events.append(e)
                self.assertEqual(e.request, r.id)
        self.assertEqual([e.position for e in events], list(range(len(self.ids),
                                                                  len(self.ids) + 12)))
        e0 = events[0]
        self.assertEqual(e0.token, first)
        self.assertAlmostEqual(e0.logprob, lp[first], places=4)
        want = sorted(range(len(lp)), key=lambda i: (-lp[i], i))[:5]
        self.assertEqual([i for i, _ in e0.top], want)
        for (i, v) in e0.top:
            self.assertAlmostEqual(v, lp[i], places=4)
        for e in events:
            self.assertEqual(len(e.top), 5)
            self.assertTrue(all(a[1] >= b[1] for a, b in zip(e.top, e.top[1:])))
            self.assertLessEqual(e.logprob, 0.0)
        self.assertEqual("".join(e.text for e in events), self.tok.decode(r.tokens))

    def test_stop_string_across_tokens(self):
        with dsv4.Scheduler(self.eng, self.tok) as s:
            r = s.submit(self.ids, max_tokens=40, stop=["Harrow L"])
            text = "".join(e.text for e in r)
        self.assertEqual(text, " walked up ")
        self.assertEqual(r.finish, "stop")

    def test_sampling_is_seeded_and_order_free(self):
        kw = dict(max_tokens=10, temperature=0.8, top_k=50, top_p=0.9, seed=7, ignore_eos=True)
        with dsv4.Scheduler(self.eng, self.tok) as s:
            a = s.submit(self.ids, **kw)
            s.submit(self.ids[:3], max_tokens=6)
            s.run()
            b = s.submit(self.ids, **kw)          # arrives alone, later
            s.run()
            c = s.submit(self.ids, **dict(kw, seed=8))
            s.run()
        self.assertEqual([e.token for e in a.poll()], [e.token for e in b.poll()])
        self.assertEqual(len(c.poll()), 10)

    def test_speculative_requests_give_the_same_tokens(self):
        kw = dict(max_tokens=16, temperature=0.8, top_k=50, seed=3, ignore_eos=True, logprobs=2)
        with dsv4.Scheduler(self.eng, self.tok) as s:
            plain = [s.submit(self.ids, max_tokens=16, ignore_eos=True, logprobs=2),
                     s.submit(self.ids, **kw)]
            s.run()
            spec = [s.submit(self.ids, max_tokens=16, ignore_eos=True, logprobs=2, speculative=4),
                    s.submit(self.ids, speculative=3, **kw)]
            s.run()
            st = s.stats
        for a, b in zip(plain, spec):
            self.assertEqual([(e.token, e.logprob) for e in a.poll()],
                             [(e.token, e.logprob) for e in b.poll()])
        self.assertGreater(st.spec_drafted, 0)
        self.assertGreater(st.spec_accepted, 0)
        with dsv4.Scheduler(self.eng, self.tok) as s:
            with self.assertRaises(dsv4.InvalidArgument):
                s.submit(self.ids, speculative=-1)

    def test_poll_mode_equals_callbacks(self):
        with dsv4.Scheduler(self.eng) as s:      # no tokenizer: ids only
            p = s.submit(self.ids, max_tokens=8, ignore_eos=True, poll=True)
            q = s.submit(self.ids, max_tokens=8, ignore_eos=True)
            polled = [e.token for e in p]
            called = [e.token for e in q]
        self.assertEqual(polled, called)
        self.assertEqual(p.finish, "length")
        self.assertEqual(q.poll(), [])

    def test_cancel_frees_everything(self):
        with dsv4.Scheduler(self.eng, self.tok) as s:
            r = s.submit(self.ids, max_tokens=50)
            other = s.submit(self.ids[:5], max_tokens=5, ignore_eos=True)
            for k, _ in enumerate(r):
                if k == 3:
                    self.assertTrue(r.cancel())
            self.assertEqual(r.finish, "cancelled")
            self.assertEqual(len(r.tokens), 4)
            self.assertFalse(r.cancel())
            with self.assertRaises(dsv4.UnknownSequence):
                s.cancel(r.id)
            self.assertEqual(len(list(other)), 5)   # the other request went on
            self.assertEqual(s.stats.cancelled, 1)
        self.assertEqual(self.eng.info.sequences_live, 0)

    def test_bad_requests_raise_and_change_nothing(self):
        with dsv4.Scheduler(self.eng, self.tok, max_waiting=2) as s:
            with self.assertRaises(dsv4.InvalidArgument) as cm:
                s.submit([])
            self.assertIn("empty prompt", cm.exception.message)
            with self.assertRaises(dsv4.InvalidArgument) as cm:
                s.submit([10 ** 6])
            self.assertEqual(cm.exception.name, "DSV4_ERR_INVALID_TOKEN")
            with self.assertRaises(dsv4.InvalidArgument) as cm:
                s.submit(self.ids, logprobs=21)
            self.assertIn("n_logprobs", cm.exception.message)
            with self.assertRaises(dsv4.ContextOverflow):
                s.submit([self.tok.bos] * 128)
            a = s.submit(self.ids, max_tokens=3)
            s.submit(self.ids, max_tokens=3)
            with self.assertRaises(dsv4.KVCacheFull):
                s.submit(self.ids, max_tokens=3)      # max_waiting
            s.run()
            self.assertEqual(len(a.tokens), 0)        # not taken yet
            self.assertEqual(len(a.poll()), 3)
            self.assertEqual(s.stats.submitted, 2)
        with dsv4.Scheduler(self.eng) as s:
            with self.assertRaises(dsv4.InvalidArgument) as cm:
                s.submit(self.ids, stop=["x"])
            self.assertIn("tokenizer", cm.exception.message)
        with self.assertRaises(dsv4.InvalidArgument):
            dsv4.Scheduler(self.eng, max_running=99)

    def test_threads_sharing_a_scheduler_take_turns(self):
        # ctypes drops the GIL in every call: without the handle's lock two threads
        # stepping one scheduler corrupted it (heap aborts, negative counters).
        want = self.alone(self.ids, 6)
        errors, results = [], {}

        def worker(k):
            try:
                for i in range(5):
                    r = s.submit(self.ids, max_tokens=6, ignore_eos=True)
                    results[(k, i)] = ([e.token for e in r], r.finish)
            except Exception as e:   # reported below
                errors.append(e)

        with dsv4.Scheduler(self.eng, self.tok) as s:
            ts = [threading.Thread(target=worker, args=(k,)) for k in range(3)]
            for t in ts:
                t.start()
            for t in ts:
                t.join()
            st = s.stats
        self.assertEqual(errors, [])
        self.assertEqual(len(results), 15)
        for got in results.values():
            self.assertEqual(got, (want, "length"))
        self.assertEqual((st.waiting, st.running, st.finished), (0, 0, 15))
        self.assertEqual(self.eng.info.sequences_live, 0)

    def test_threads_sharing_an_engine_take_turns(self):
        want = self.alone(self.ids, 5)
        errors, results = [], []

        def worker():
            try:
                for _ in range(4):
                    results.append([t.id for t in self.eng.generate(
                        self.ids, max_tokens=5, stop_at_eos=False)])
            except Exception as e:   # reported below
                errors.append(e)

        ts = [threading.Thread(target=worker) for _ in range(3)]
        for t in ts:
            t.start()
        for t in ts:
            t.join()
        self.assertEqual(errors, [])
        self.assertEqual(results, [want] * 12)
        self.assertEqual(self.eng.info.sequences_live, 0)

    def test_integers_outside_the_c_type_are_refused(self):
        # ctypes would wrap them into other, valid values (2**32 + 5 -> 5).
        with dsv4.Scheduler(self.eng, self.tok) as s:
            for kw in ({"max_tokens": 2 ** 32 + 2}, {"logprobs": 2 ** 32 + 1},
                       {"seed": -1}, {"stop_ids": [2 ** 40]}, {"logit_bias": {2 ** 32 + 1: 1.0}}):
                with self.subTest(**{k: str(v) for k, v in kw.items()}):
                    with self.assertRaises(OverflowError):
                        s.submit(self.ids, **kw)
            with self.assertRaises(OverflowError) as cm:
                s.submit([0, 2 ** 32 + 1])
            self.assertIn("prompt[1]", str(cm.exception))
            with self.assertRaises(TypeError):
                s.submit(self.ids, max_tokens=2.5)
            with self.assertRaises(ValueError):
                s.submit(self.ids, stop=["a\0b"])
            r = s.submit(self.ids, max_tokens=2, stop=[b"zz"])   # bytes are fine
            self.assertEqual(len(list(r)), 2)
            self.assertEqual(s.stats.submitted, 1)
        with self.assertRaises(OverflowError):
            dsv4.Scheduler(self.eng, max_running=2 ** 32)
        with self.assertRaises(TypeError):
            dsv4.Scheduler(None)
        with self.eng.sequence() as q:
            with self.assertRaises(OverflowError):
                q.prefill([0, 2 ** 32 + 5])
            self.assertEqual(len(q), 0)
        with self.assertRaises(OverflowError):
            self.tok.decode([2 ** 32 + 300])
        with self.assertRaises(OverflowError):
            self.eng.decode([2 ** 64], [1])

    def test_chat_and_path_arguments_are_checked(self):
        with self.assertRaises(OverflowError):
            chat.render([{"role": "user", "content": "x"}], mode="thinking",
                         reasoning_effort=2 ** 32 + 50)
        with chat.ChatParser() as p:
            with self.assertRaises(TypeError):
                p.push(5)                       # bytes(5) would be five NULs
            self.assertEqual("".join(e.text for e in p.push("hi") + p.finish()
                                     if e.kind == "content"), "hi")
        with dsv4.Scheduler(self.eng, self.tok) as s:
            with self.assertRaises(ValueError):
                s.chat([{"role": "user", "content": "x"}], poll=True)
            self.assertEqual(s.stats.submitted, 0)
        for make in (dsv4.Engine, dsv4.Tokenizer, dsv4.Model):
            with self.subTest(make.__name__), self.assertRaises(TypeError) as cm:
                make(None)
            self.assertIn("DSV4_MODEL", str(cm.exception))

    def test_chat_turn_equals_the_engine_on_the_same_ids(self):
        msgs = [{"role": "user", "content": PROMPT}]
        ids = chat.encode(self.tok, msgs)
        self.assertEqual(ids[0], self.tok.bos)
        user, assistant = self.tok.token_id("<｜User｜>"), self.tok.token_id("<｜Assistant｜>")
        self.assertEqual((user, assistant), (769, 770))   # the default model has the markers
        self.assertEqual(ids[1], user)
        self.assertEqual(ids[-2:], [assistant, self.tok.token_id("</think>")])
        want = self.alone(ids, 24)
        with dsv4.Scheduler(self.eng, self.tok) as s:
            turn = s.chat(msgs, max_tokens=24)
            events = list(turn)
            msg = turn.message()
        text = self.tok.decode(want[:len(turn.request.tokens)])
        with chat.ChatParser() as p:
            whole = p.push(text) + p.finish()
        for kind in ("reasoning", "content", "tool_call", "end"):   # pieces may differ
            self.assertEqual("".join(e.text for e in events if e.kind == kind),
                             "".join(e.text for e in whole if e.kind == kind), kind)
        self.assertEqual(msg["role"], "assistant")
        self.assertEqual(msg["content"], "".join(e.text for e in events if e.kind == "content"))
        self.assertEqual(turn.request.tokens, want[:len(turn.request.tokens)])

    def test_closing_the_engine_closes_its_scheduler(self):
        with dsv4.Engine(self.path, max_sequences=2, max_context=64, n_threads=1) as e:
            s = dsv4.Scheduler(e, self.tok)
            s.submit(self.ids, max_tokens=4)
            s.step()
        self.assertTrue(s.closed)
        with self.assertRaises(ValueError):
            s.step()


if __name__ == "__main__":
    unittest.main()
