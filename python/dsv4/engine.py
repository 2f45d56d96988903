"""Engine: sequences, prefill, batched decode, DSpark draft/verify (dsv4_engine_*)."""
import ctypes
from collections import namedtuple

from . import _ffi
from ._handle import Handle, exclusive
from .errors import check
from .model import Model, _fields

_lib = _ffi.lib
_BACKENDS = {"auto": _ffi.BACKEND_AUTO, "cpu": _ffi.BACKEND_CPU, "cuda": _ffi.BACKEND_CUDA}
_KV_FORMATS = {"native": _ffi.KV_FORMAT_NATIVE, "fp8_ds_mla": _ffi.KV_FORMAT_FP8_DS_MLA}

Token = namedtuple("Token", "id text")
Token.__doc__ = "One generated token: its id and the text it completes (maybe '')."


def _numpy():
    try:
        import numpy
    except ImportError as e:  # only logits need numpy
        raise ImportError("logits are returned as numpy arrays: install numpy") from e
    return numpy


def _i32(values, name="tokens"):
    return _ffi.int_array(values, name)


def _seq_ids(sequences):
    return _ffi.int_array([s.id if isinstance(s, Sequence) else s for s in sequences],
                          "sequences", ctypes.c_int64)


def _sampling(temperature, seed, seeds=None):
    sp = _ffi.SamplingParams()
    check(_lib.dsv4_sampling_params_init(ctypes.byref(sp), ctypes.sizeof(sp)),
          "dsv4_sampling_params_init", _lib.dsv4_last_error)
    sp.temperature = float(temperature)
    sp.seed = int(seed)
    if seeds is not None:
        sp._keep = (ctypes.c_uint64 * len(seeds))(*seeds)
        sp.seeds = sp._keep
    return sp


def _logits_out(want, shape, out):
    """(numpy array or None, float* for the library)."""
    if out is not None:
        np = _numpy()
        if out.dtype != np.float32 or out.shape != shape or not out.flags.c_contiguous:
            raise ValueError(f"out must be a C-contiguous float32 array of shape {shape}")
        arr = out
    elif want:
        arr = _numpy().empty(shape, dtype=_numpy().float32)
    else:
        return None, None
    return arr, arr.ctypes.data_as(ctypes.POINTER(ctypes.c_float))


class Engine(Handle):
    """An inference engine over one model: backend, weights, KV cache pools, sequences.

    Engine(path_or_model, max_sequences=..., max_context=..., n_threads=...,
    prefill_chunk=..., kv_budget_bytes=..., backend="cpu", kv_format="native"): a path
    creates and owns its model (dsv4_engine_create_from_dir); a Model is borrowed and
    must outlive the engine. Calls on one engine are made by one thread at a time. Failed
    calls raise dsv4.Error subclasses with the engine's message."""

    def __init__(self, model, *, max_sequences=None, max_context=None, n_threads=None,
                 prefill_chunk=None, kv_budget_bytes=None, backend="auto", device=0,
                 op_timings=False, gpu_cpu_order=False, kv_format="native"):
        p = _ffi.EngineParams()
        check(_lib.dsv4_engine_params_init(ctypes.byref(p), ctypes.sizeof(p)),
              "dsv4_engine_params_init", _lib.dsv4_last_error)
        given = {"max_sequences": max_sequences, "max_context": max_context,
                 "n_threads": n_threads, "prefill_chunk": prefill_chunk,
                 "kv_budget_bytes": kv_budget_bytes}
        _ffi.set_fields(p, **{k: v for k, v in given.items() if v is not None})
        _ffi.set_fields(p, backend=_BACKENDS[backend] if isinstance(backend, str) else backend,
                        device=device)
        # window KV records: "native" (the reference's) or "fp8_ds_mla" (docs/attention.md
        # "KV formats"); an unknown name raises KeyError, an unknown number the library's error
        p.kv_format = _KV_FORMATS[kv_format] if isinstance(kv_format, str) else kv_format
        if op_timings:
            p.flags |= _ffi.ENGINE_F_OP_TIMINGS
        if gpu_cpu_order:
            p.flags |= _ffi.ENGINE_F_GPU_CPU_ORDER
        out = ctypes.c_void_p()
        if isinstance(model, Model):
            self._model = model
            check(_lib.dsv4_engine_create(model._live(), ctypes.byref(p), ctypes.byref(out)),
                  "dsv4_engine_create", _lib.dsv4_last_error)
            self._ptr = out.value
        else:
            check(_lib.dsv4_engine_create_from_dir(_ffi.path_arg(model, "model"), ctypes.byref(p),
                                                   ctypes.byref(out)),
                  "dsv4_engine_create_from_dir", _lib.dsv4_last_error)
            self._ptr = out.value
            self._model = Model(None, _borrowed=_lib.dsv4_engine_model(self._ptr), _owner=self)
        self._info = self.model.info

    def _free(self, ptr):
        _lib.dsv4_engine_free(ptr)
        if not getattr(self._model, "_owned", True):
            self._model._ptr = None   # the engine's own model went with it

    def _check(self, status, call):
        return check(status, call, _lib.dsv4_last_error)

    @property
    def model(self):
        """The engine's Model (owned by the engine when it was created from a path)."""
        return self._model

    @property
    @exclusive
    def info(self):
        """Memory plan and use (dsv4_engine_info) as attributes."""
        i = _ffi.EngineInfo()
        self._check(_lib.dsv4_engine_get_info(self._live(), ctypes.byref(i), ctypes.sizeof(i)),
                    "dsv4_engine_get_info")
        return _fields(i)

    @property
    @exclusive
    def timings(self):
        """Cumulative timings (dsv4_engine_timings, nanoseconds) as attributes."""
        t = _ffi.EngineTimings()
        self._check(_lib.dsv4_engine_get_timings(self._live(), ctypes.byref(t), ctypes.sizeof(t)),
                    "dsv4_engine_get_timings")
        return _fields(t)

    @exclusive
    def reset_timings(self):
        _lib.dsv4_engine_reset_timings(self._live())

    @exclusive
    def sequence(self):
        """A new empty Sequence (a context manager that frees it)."""
        i = ctypes.c_int64()
        self._check(_lib.dsv4_engine_seq_create(self._live(), ctypes.byref(i)),
                    "dsv4_engine_seq_create")
        return Sequence(self, i.value)

    @exclusive
    def decode(self, sequences, tokens, *, temperature=0.0, seed=0, seeds=None, logits=False,
               out=None):
        """One decode step for a batch: sequences[i] takes tokens[i]. Returns the
        sampled next tokens (list), or (tokens, logits) with logits=True: a numpy
        float32 array [n, vocab] the library wrote (or `out`, reused)."""
        n = len(sequences)
        ids = _seq_ids(sequences)
        sampled = (ctypes.c_int32 * n)()
        arr, lp = _logits_out(logits, (n, self._info.vocab_size), out)
        sp = _sampling(temperature, seed, seeds)
        self._check(_lib.dsv4_engine_decode(self._live(), n, ids, _i32(tokens), ctypes.byref(sp),
                                            lp, sampled), "dsv4_engine_decode")
        return (list(sampled), arr) if arr is not None else list(sampled)

    @exclusive
    def draft(self, sequences, anchors, *, temperature=0.0, seed=0, seeds=None):
        """DSpark proposals: (drafts [n][B] list of lists, confidence logits numpy [n, B] or
        None without numpy)."""
        n, B = len(sequences), self._info.dspark_block_size
        ids = _seq_ids(sequences)
        drafts = (ctypes.c_int32 * (n * max(B, 1)))()
        conf = (ctypes.c_float * (n * max(B, 1)))()
        sp = _sampling(temperature, seed, seeds)
        self._check(_lib.dsv4_engine_draft(self._live(), n, ids, _i32(anchors, "anchors"), ctypes.byref(sp),
                                           drafts, conf), "dsv4_engine_draft")
        return ([list(drafts[i * B:(i + 1) * B]) for i in range(n)],
                [list(conf[i * B:(i + 1) * B]) for i in range(n)])

    @exclusive
    def verify(self, sequences, anchors, drafts, *, temperature=0.0, seed=0, seeds=None):
        """Verify proposals (drafts[i]: the ones to check for sequence i). Returns
        (accepted counts, next tokens)."""
        n, B = len(sequences), self._info.dspark_block_size
        ids = _seq_ids(sequences)
        nd = _i32([len(d) for d in drafts])
        flat = (ctypes.c_int32 * (n * max(B, 1)))()
        for i, d in enumerate(drafts):
            if len(d) > B:
                raise ValueError(f"at most {B} drafts per sequence")
            flat[i * B:i * B + len(d)] = list(_i32(d, f"drafts[{i}]"))[:len(d)]
        acc, nxt = (ctypes.c_int32 * n)(), (ctypes.c_int32 * n)()
        sp = _sampling(temperature, seed, seeds)
        self._check(_lib.dsv4_engine_verify(self._live(), n, ids, _i32(anchors, "anchors"), nd, flat,
                                            ctypes.byref(sp), acc, nxt), "dsv4_engine_verify")
        return list(acc), list(nxt)

    def generate(self, prompt, tokenizer=None, *, max_tokens=64, temperature=0.0, seed=0,
                 stop_at_eos=True):
        """Stream a generation as Token(id, text) items.

        prompt: text (encoded with `tokenizer`, default the model directory's, after
        BOS: the model input) or a list of ids (used as given). Stops at EOS (not
        yielded) or after max_tokens tokens or at the engine's maximum context; a
        last Token(None, text) carries held-back text, if any."""
        bos = self._info.bos_token_id
        eos = self._info.eos_token_id
        stream = None
        if tokenizer is not None or isinstance(prompt, str):
            if tokenizer is None:
                raise ValueError("a text prompt needs a tokenizer (dsv4.Tokenizer(model_dir))")
            stream = tokenizer.stream(skip_special=True)
        ids = [bos] + tokenizer.encode(prompt) if isinstance(prompt, str) else list(prompt)
        with self.sequence() as seq:
            nxt = seq.prefill(ids, temperature=temperature, seed=seed)
            for k in range(max_tokens):
                if stop_at_eos and nxt == eos:
                    break
                yield Token(nxt, stream.push(nxt) if stream else "")
                if k + 1 == max_tokens:
                    break
                try:
                    nxt = seq.decode(nxt, temperature=temperature, seed=seed)
                except Exception as e:
                    if getattr(e, "status", None) == _ffi.DSV4_ERR_CONTEXT_OVERFLOW:
                        break   # the maximum context: a normal end
                    raise
        if stream:
            tail = stream.flush()
            stream.close()
            if tail:
                yield Token(None, tail)


class Sequence:
    """A sequence of an engine (its id is the library's). free() or a with block
    releases it; it is not freed by garbage collection while its engine lives."""

    def __init__(self, engine, id_):
        self.engine, self.id = engine, id_

    def _exclusive_lock(self):
        return self.engine._exclusive_lock()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.free()

    def __repr__(self):
        return f"<dsv4.Sequence {self.id}>"

    @exclusive
    def free(self):
        """Free the sequence and its cache pages (idempotent)."""
        if self.id and not self.engine.closed:
            self.engine._check(_lib.dsv4_engine_seq_free(self.engine._ptr, self.id),
                               "dsv4_engine_seq_free")
        self.id = 0

    @exclusive
    def __len__(self):
        n = ctypes.c_int64()
        self.engine._check(_lib.dsv4_engine_seq_length(self.engine._live(), self.id,
                                                       ctypes.byref(n)), "dsv4_engine_seq_length")
        return n.value

    @exclusive
    def fork(self):
        """A new Sequence holding this one's positions, caches and sampler state."""
        c = ctypes.c_int64()
        self.engine._check(_lib.dsv4_engine_seq_fork(self.engine._live(), self.id,
                                                     ctypes.byref(c)), "dsv4_engine_seq_fork")
        return Sequence(self.engine, c.value)

    @exclusive
    def prefill(self, tokens, *, temperature=0.0, seed=0, logits=False, out=None):
        """Append prompt tokens; returns the token sampled after them, or (token,
        logits) with logits=True (numpy float32 [vocab], or `out` reused)."""
        e = self.engine
        tok = ctypes.c_int32(-1)
        arr, lp = _logits_out(logits, (e._info.vocab_size,), out)
        sp = _sampling(temperature, seed)
        e._check(_lib.dsv4_engine_prefill(e._live(), self.id, _i32(tokens), len(tokens),
                                          ctypes.byref(sp), lp, ctypes.byref(tok)),
                 "dsv4_engine_prefill")
        return (tok.value, arr) if arr is not None else tok.value

    def decode(self, token, *, temperature=0.0, seed=0, logits=False, out=None):
        """Feed one token; returns the next (and its logits with logits=True)."""
        r = self.engine.decode([self], [token], temperature=temperature, seed=seed,
                               logits=logits, out=None if out is None else out.reshape(1, -1))
        return (r[0][0], r[1][0]) if logits else r[0]


__all__ = ["Engine", "Sequence", "Token"]
