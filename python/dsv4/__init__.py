"""Python bindings of libdsv4 (DeepSeek-V4.1-Flash inference), on ctypes.

    import dsv4
    model = dsv4.default_model()          # or a checkpoint directory
    with dsv4.Engine(model) as eng, dsv4.Tokenizer(model) as tok:
        for t in eng.generate("Every evening the old lamplighter", tok, max_tokens=16):
            print(t.text, end="", flush=True)
        with dsv4.Scheduler(eng, tok) as sched:     # continuous batching, chat format
            turn = sched.chat([{"role": "user", "content": "Hi"}], max_tokens=32)
            for ev in turn:                         # ChatEvent(kind, text), streamed
                print(ev.kind, ev.text)

The shared library is found at $DSV4_LIBRARY, else in the checkout's build/lib,
else on the system's library path. Failed calls raise dsv4.Error (subclasses by
kind) with the status and the library's message. Logits come back as numpy
arrays the library wrote into (numpy is needed only for them)."""
import os

from . import _ffi, chat
from ._ffi import (BACKEND_AUTO, BACKEND_CPU, BACKEND_CUDA, TOKEN_BOS, TOKEN_DSPARK_NOISE,
                   TOKEN_EOS, TOKEN_IMAGE, TOKEN_PAD)
from .chat import ChatEvent, ChatParser
from .engine import Engine, Sequence, Token
from .errors import (Aborted, CheckpointError, ContextOverflow, Error, InvalidArgument,
                     KVCacheFull, NotFound, OutOfMemory, UnknownSequence, Unsupported, last_error)
from .model import Model
from .scheduler import ChatRequest, Request, Scheduler, TokenEvent
from .tokenizer import Tokenizer, TokenStream

__version__ = "0.1.0"


def library_version():
    """The loaded library's version string, e.g. "0.1.0"."""
    return _ffi.lib.dsv4_version_string().decode()


def build_info():
    return _ffi.lib.dsv4_build_info().decode()


def status_string(status):
    return _ffi.lib.dsv4_status_string(status).decode()


def default_model():
    """The default tiny model folder: $DSV4_MODEL, else the checkout's
    build/models/dsv4-tiny, else <prefix>/share/dsv4/models/dsv4-tiny next to the
    loaded library; None when there is none."""
    cands = [os.environ.get("DSV4_MODEL")]
    here = os.path.dirname(os.path.abspath(__file__))
    cands.append(os.path.join(here, "..", "..", "build", "models", "dsv4-tiny"))
    libdir = os.path.dirname(os.path.realpath(_ffi.lib.path)) if os.sep in _ffi.lib.path else ""
    for up in ("..", os.path.join("..", "..")):
        if libdir:
            cands.append(os.path.join(libdir, up, "share", "dsv4", "models", "dsv4-tiny"))
    for c in cands:
        if c and os.path.isfile(os.path.join(c, "config.json")):
            return os.path.normpath(c)
    return None


__all__ = ["Engine", "Sequence", "Token", "Model", "Tokenizer", "TokenStream", "Scheduler",
           "Request", "ChatRequest", "TokenEvent", "chat", "ChatEvent", "ChatParser", "Error",
           "InvalidArgument", "NotFound", "CheckpointError", "UnknownSequence",
           "ContextOverflow", "KVCacheFull", "Aborted", "Unsupported", "OutOfMemory",
           "last_error", "library_version", "build_info", "status_string", "default_model",
           "BACKEND_AUTO", "BACKEND_CPU", "BACKEND_CUDA", "TOKEN_BOS", "TOKEN_EOS", "TOKEN_PAD",
           "TOKEN_IMAGE", "TOKEN_DSPARK_NOISE"]
