"""Continuous batching (dsv4_scheduler_*): requests with their own sampling,
limits and stop conditions share one engine; each step decodes every running
request and prefills waiting prompts in chunks. Tokens stream as TokenEvent
items from iterating a Request (or the Scheduler); chat() adds the V4.1 chat
format on both ends."""
import ctypes
from collections import deque, namedtuple

from . import _ffi, chat as _chat
from ._handle import Handle, exclusive
from .engine import Engine
from .errors import check
from .model import _fields

_lib = _ffi.lib
_FINISH = {_ffi.FINISH_NONE: None, _ffi.FINISH_STOP: "stop", _ffi.FINISH_LENGTH: "length",
           _ffi.FINISH_ERROR: "error"}

TokenEvent = namedtuple("TokenEvent", "request token position finish logprob top text")
TokenEvent.__doc__ = """One generated token of a request (dsv4_token_event).
request: the request id; token: the id (-1 on an error end without a token);
position: its position in the sequence; finish: None, or "stop", "length",
"error" on the request's last event; logprob: log-softmax of the model's raw
logits at token; top: [(id, logprob)] the n_logprobs most likely, most likely
first; text: the text it completes, special tokens kept and stop-string text
held back (None without a tokenizer, and in poll mode)."""


class Request:
    """A submitted request. Iterating it yields its TokenEvents as they are
    produced, stepping the scheduler when none is ready (other requests advance
    too and keep their events). finish is None until the last event was taken,
    then "stop", "length" or "error"; "cancelled" after cancel()."""

    def __init__(self, sched, id_, n_prompt, poll):
        self.scheduler, self.id, self.n_prompt, self._poll = sched, id_, n_prompt, poll
        self.finish = None        # set when the last event is delivered
        self.tokens = []          # ids delivered so far
        self._queue = deque()
        self._ended = False       # the library sent or buffered the last token

    def __repr__(self):
        return f"<dsv4.Request {self.id} finish={self.finish}>"

    def _deliver(self, ev):
        self._queue.append(ev)
        if ev.finish:
            self._ended = True

    def _exclusive_lock(self):
        return self.scheduler._exclusive_lock()

    @exclusive
    def _drain_poll(self):
        buf, n, fin = (ctypes.c_int32 * 64)(), ctypes.c_int32(), ctypes.c_int32()
        while not self._ended:
            check(_lib.dsv4_scheduler_poll(self.scheduler._live(), self.id, buf, len(buf),
                                           ctypes.byref(n), ctypes.byref(fin)),
                  "dsv4_scheduler_poll", _lib.dsv4_last_error)
            toks = buf[:n.value]
            for k, t in enumerate(toks):
                last = fin.value and k == len(toks) - 1
                pos = self.n_prompt + len(self.tokens) + len(self._queue)
                self._queue.append(TokenEvent(self.id, t, pos, _FINISH[fin.value] if last else None,
                                              None, [], None))
            if fin.value:
                self._ended = True
                if not toks:   # finished with nothing left to take: mark the last event
                    self.finish = _FINISH[fin.value]
                self.scheduler._requests.pop(self.id, None)
            if n.value < len(buf):
                break

    def poll(self):
        """The TokenEvents ready now, without stepping (a list, maybe empty)."""
        if self._poll:
            self._drain_poll()
        out = []
        while self._queue:
            out.append(self._take())
        return out

    def _take(self):
        ev = self._queue.popleft()
        if ev.token >= 0:
            self.tokens.append(ev.token)
        if ev.finish:
            self.finish = ev.finish
        return ev

    def __iter__(self):
        while True:
            if self._poll:
                self._drain_poll()
            while self._queue:
                yield self._take()
            if self._ended or self.finish:
                return
            self.scheduler.step()

    @property
    def done(self):
        """True once every event was taken (or the request was cancelled)."""
        return self.finish is not None

    def cancel(self):
        """Cancel now (nothing leaks, no event follows); a finished request is left as is.
        Returns True when it was still running."""
        if self._ended or self.finish:
            return False
        self.scheduler.cancel(self.id)
        return True


class ChatRequest:
    """A chat turn on a Scheduler: iterating it yields the parsed output as
    dsv4.ChatEvent items ("reasoning", "content", "tool_call", "end"), streamed
    as tokens arrive; message() runs it to the end and returns the assistant
    message as the OpenAI API spells it."""

    def __init__(self, request, mode):
        self.request = request
        self._parser = _chat.ChatParser(mode)
        self._events = []
        self._gen = None          # one stream: iterating again continues it

    @property
    def finish(self):
        return self.request.finish

    def cancel(self):
        return self.request.cancel()

    def __iter__(self):
        if self._gen is None:
            self._gen = self._run()
        return self._gen

    def _run(self):
        try:
            for ev in self.request:
                for c in self._parser.push(ev.text or ""):
                    self._events.append(c)
                    yield c
            for c in self._parser.finish():
                self._events.append(c)
                yield c
        finally:
            self._parser.close()

    def message(self):
        """Run the turn to its end (what iteration has not taken yet) and return
        {"role": "assistant", "content", "reasoning_content", "tool_calls"} (the last
        two only when there are any; tool_calls as [{"name", "arguments"}])."""
        for _ in self:
            pass
        msg = {"role": "assistant",
               "content": "".join(e.text for e in self._events if e.kind == "content")}
        reasoning = "".join(e.text for e in self._events if e.kind == "reasoning")
        calls = [e.tool_call for e in self._events if e.kind == "tool_call"]
        if reasoning:
            msg["reasoning_content"] = reasoning
        if calls:
            msg["tool_calls"] = calls
        return msg


class Scheduler(Handle):
    """A continuous-batching scheduler over an Engine (dsv4_scheduler_create).

    Scheduler(engine, tokenizer=None, max_running=0 (= engine's max_sequences),
    prefill_chunk=256, token_budget=0 (= prefill_chunk + max_running),
    max_waiting=1024, prefix_cache=0). A tokenizer gives token text, stop strings
    and chat(). The engine and tokenizer are borrowed: closing either closes the
    scheduler first. It owns engine sequences while it runs: use an engine with no
    other users. One thread at a time (like its engine)."""

    def __init__(self, engine, tokenizer=None, *, max_running=0, prefill_chunk=None,
                 token_budget=0, max_waiting=None, prefix_cache=0):
        p = _ffi.SchedulerParams()
        check(_lib.dsv4_scheduler_params_init(ctypes.byref(p), ctypes.sizeof(p)),
              "dsv4_scheduler_params_init", _lib.dsv4_last_error)
        _ffi.set_fields(p, max_running=max_running, token_budget=token_budget,
                        prefix_cache=prefix_cache)
        if prefill_chunk is not None:
            _ffi.set_fields(p, prefill_chunk=prefill_chunk)
        if max_waiting is not None:
            _ffi.set_fields(p, max_waiting=max_waiting)
        if not isinstance(engine, Engine):
            raise TypeError(f"engine: expected a dsv4.Engine, got {type(engine).__name__}")
        out = ctypes.c_void_p()
        check(_lib.dsv4_scheduler_create(engine._live(),
                                         tokenizer._live() if tokenizer is not None else None,
                                         ctypes.byref(p), ctypes.byref(out)),
              "dsv4_scheduler_create", _lib.dsv4_last_error)
        self._ptr, self.engine, self.tokenizer = out.value, engine, tokenizer
        engine._lend(self)
        if tokenizer is not None:
            tokenizer._lend(self)
        self._requests = {}       # id -> Request, until its last event
        self._new = []            # events of the current step
        self.active = 0
        self._fn = _ffi.TOKEN_FN(self._on_token)   # lives as long as the scheduler

    def _exclusive_lock(self):
        return self.engine._exclusive_lock()   # it drives the engine

    def _free(self, ptr):
        _lib.dsv4_scheduler_free(ptr)
        self._requests.clear()

    def _on_token(self, rid, ev_p, _user):
        e = ev_p.contents
        top = [(e.top_ids[i], e.top_logprobs[i]) for i in range(e.n_top)]
        text = (ctypes.string_at(e.text, e.text_len).decode("utf-8", "replace")
                if e.text else None)
        ev = TokenEvent(rid, e.token, e.position, _FINISH[e.finish], e.logprob, top, text)
        self._new.append(ev)
        req = self._requests.get(rid)
        if req is not None:
            req._deliver(ev)
            if ev.finish:
                del self._requests[rid]

    @exclusive
    def submit(self, prompt, *, max_tokens=256, temperature=0.0, top_k=0, top_p=1.0, min_p=0.0,
               repetition_penalty=1.0, presence_penalty=0.0, frequency_penalty=0.0, seed=0,
               logprobs=0, ignore_eos=False, stop_ids=(), stop=(), logit_bias=None, poll=False,
               speculative=0):
        """Queue a request of prompt ids (the model input: start it with BOS); nothing
        runs until step(). Sampling as docs/serving.md, "Sampling": temperature <= 0 is
        greedy; logprobs: alternatives per event (0..20); stop: strings matched across
        token boundaries (need a tokenizer); logit_bias: {id: bias}. poll=True buffers
        the ids in the library (dsv4_scheduler_poll; events then carry no text or
        logprobs). speculative: DSpark drafts per step (0: off; docs/serving.md,
        "Speculative requests"; the tokens are the same). Returns a Request. Raises
        InvalidArgument (a parameter out of range, named in the message), Unsupported
        (speculative on a model without the DSpark head), ContextOverflow, KVCacheFull
        (max_waiting reached)."""
        p = _ffi.RequestParams()
        check(_lib.dsv4_request_params_init(ctypes.byref(p), ctypes.sizeof(p)),
              "dsv4_request_params_init", _lib.dsv4_last_error)
        _ffi.set_fields(p, max_tokens=max_tokens, temperature=temperature, top_k=top_k,
                        top_p=top_p, min_p=min_p, repetition_penalty=repetition_penalty,
                        presence_penalty=presence_penalty, frequency_penalty=frequency_penalty,
                        seed=seed, n_logprobs=logprobs, speculative=speculative)
        p.flags = _ffi.REQUEST_F_IGNORE_EOS if ignore_eos else 0
        keep = []   # arrays the library copies at submit
        if stop_ids:
            a = _ffi.int_array(stop_ids, "stop_ids")
            keep.append(a)
            p.n_stop_ids, p.stop_ids = len(stop_ids), a
        if isinstance(stop, (str, bytes)):
            stop = [stop]
        if stop:
            enc = [x.encode() if isinstance(x, str) else bytes(x) for x in stop]
            if any(b"\0" in x for x in enc):
                raise ValueError("stop: a stop string must not contain NUL")
            a = (ctypes.c_char_p * len(enc))(*enc)
            keep.append(a)
            p.n_stop, p.stop = len(stop), a
        if logit_bias:
            ids = _ffi.int_array(list(logit_bias), "logit_bias")
            vals = (ctypes.c_float * len(logit_bias))(*logit_bias.values())
            keep += [ids, vals]
            p.n_logit_bias, p.logit_bias_ids, p.logit_bias = len(logit_bias), ids, vals
        if not poll:
            p.on_token = self._fn
        prompt = list(prompt)
        arr = _ffi.int_array(prompt, "prompt")
        rid = ctypes.c_int64()
        check(_lib.dsv4_scheduler_submit(self._live(), arr, len(prompt), ctypes.byref(p),
                                         ctypes.byref(rid)), "dsv4_scheduler_submit",
              _lib.dsv4_last_error)
        req = Request(self, rid.value, len(prompt), poll)
        self._requests[rid.value] = req
        return req

    def chat(self, conversation, *, tools=None, mode="chat", reasoning_effort=0,
             parse_special=False, **sampling):
        """Submit a chat turn: the conversation (OpenAI-style messages) encoded in the
        V4.1 format (dsv4.chat.encode) and the output parsed as it streams. sampling:
        submit()'s keywords. Returns a ChatRequest."""
        if self.tokenizer is None:
            raise ValueError("chat() needs the scheduler's tokenizer")
        if sampling.get("poll"):
            raise ValueError("chat() parses the streamed text: poll=True carries none")
        ids = _chat.encode(self.tokenizer, conversation, tools=tools, mode=mode,
                           reasoning_effort=reasoning_effort, parse_special=parse_special)
        return ChatRequest(self.submit(ids, **sampling), mode)

    @exclusive
    def step(self):
        """One step (a decode of every running request, then prompt chunks under the
        token budget). Returns the TokenEvents it produced, in order; .active is the
        number of requests still queued or running. An engine failure raises after the
        requests of its batch got their "error" event; the others continue."""
        n = ctypes.c_int32()
        self._new = []
        try:
            check(_lib.dsv4_scheduler_step(self._live(), ctypes.byref(n)), "dsv4_scheduler_step",
                  _lib.dsv4_last_error)
        finally:
            self.active = n.value
        return self._new

    def __iter__(self):
        """Step until no request is queued or running, yielding every TokenEvent."""
        while True:
            yield from self.step()
            if self.active == 0:
                return

    def run(self):
        """Step until no request is queued or running; returns the number of steps."""
        steps = 0
        while True:
            self.step()
            steps += 1
            if self.active == 0:
                return steps

    @exclusive
    def cancel(self, request):
        """Cancel a request (a Request or its id) at any stage: its sequence and
        buffers are freed at once. UnknownSequence when it already finished."""
        rid = _ffi.checked_int(request.id if isinstance(request, Request) else request,
                               ctypes.c_int64, "request")
        check(_lib.dsv4_scheduler_cancel(self._live(), rid), "dsv4_scheduler_cancel",
              _lib.dsv4_last_error)
        req = self._requests.pop(rid, None)
        if req is not None:
            req._ended, req.finish = True, "cancelled"

    @property
    @exclusive
    def stats(self):
        """Counters (dsv4_scheduler_stats) as attributes: waiting, running, submitted,
        finished, cancelled, steps, decode_tokens, prefill_tokens, max_step_tokens,
        prefix_hits, prefix_misses, prefix_tokens_reused, prefix_evictions, prefix_entries,
        spec_drafted, spec_accepted, spec_fallbacks."""
        s = _ffi.SchedulerStats()
        check(_lib.dsv4_scheduler_get_stats(self._live(), ctypes.byref(s), ctypes.sizeof(s)),
              "dsv4_scheduler_get_stats", _lib.dsv4_last_error)
        return _fields(s)


__all__ = ["Scheduler", "Request", "ChatRequest", "TokenEvent"]
