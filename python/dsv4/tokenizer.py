"""Tokenizer: Hugging Face tokenizer.json, byte-level BPE (dsv4_tokenizer_*)."""
import ctypes

from . import _ffi
from ._handle import Handle, exclusive
from .errors import check

_lib = _ffi.lib


def _text(ptr, n):
    return ctypes.string_at(ptr, n).decode("utf-8", "replace") if n else ""


class Tokenizer(Handle):
    """tokenizer.json (+ tokenizer_config.json) of a model directory.

    encode() adds nothing around the text: a model input starts with BOS
    (tok.bos). One thread at a time per tokenizer."""

    def __init__(self, path):
        out = ctypes.c_void_p()
        check(_lib.dsv4_tokenizer_load(_ffi.path_arg(path, "path"), ctypes.byref(out)),
              "dsv4_tokenizer_load", _lib.dsv4_last_error)
        self._ptr = out.value

    def _free(self, ptr):
        _lib.dsv4_tokenizer_free(ptr)

    def _check(self, status, call):
        return check(status, call, _lib.dsv4_last_error)

    @property
    def vocab_size(self):
        return _lib.dsv4_tokenizer_vocab_size(self._live())

    def special_id(self, kind):
        """Id of a special token (dsv4.TOKEN_BOS, ...) or -1."""
        return _lib.dsv4_tokenizer_special_id(self._live(), kind)

    @property
    def bos(self):
        return self.special_id(_ffi.TOKEN_BOS)

    @property
    def eos(self):
        return self.special_id(_ffi.TOKEN_EOS)

    def token_id(self, token):
        """Id of an exact token string, or -1."""
        return _lib.dsv4_tokenizer_token_id(self._live(), token.encode())

    def token_text(self, id_):
        """The token string of an id as tokenizer.json spells it, or None."""
        t = _lib.dsv4_tokenizer_token_text(self._live(), _ffi.checked_int(id_, ctypes.c_int32, "id"))
        return None if t is None else t.decode("utf-8", "replace")

    def encode(self, text):
        """Ids of `text` (str or UTF-8 bytes), nothing added; a list of ints."""
        data = text.encode() if isinstance(text, str) else bytes(text)
        cap = max(16, len(data))
        n = ctypes.c_size_t()
        while True:
            ids = (ctypes.c_int32 * cap)()
            s = _lib.dsv4_tokenizer_encode(self._live(), data, len(data), ids, cap, ctypes.byref(n))
            if s == _ffi.DSV4_ERR_INVALID_ARG and n.value > cap:
                cap = n.value
                continue
            self._check(s, "dsv4_tokenizer_encode")
            return list(ids[:n.value])

    def decode(self, ids, *, skip_special=False):
        """Text of `ids` (invalid UTF-8 from partial tokens becomes U+FFFD)."""
        arr = _ffi.int_array(ids, "ids")
        flags = _ffi.DECODE_F_SKIP_SPECIAL if skip_special else 0
        n = ctypes.c_size_t()
        self._check(_lib.dsv4_tokenizer_decode(self._live(), arr, len(ids), flags, None, 0,
                                               ctypes.byref(n)), "dsv4_tokenizer_decode")
        buf = ctypes.create_string_buffer(n.value + 1)
        self._check(_lib.dsv4_tokenizer_decode(self._live(), arr, len(ids), flags, buf,
                                               n.value + 1, ctypes.byref(n)),
                    "dsv4_tokenizer_decode")
        return buf.raw[:n.value].decode("utf-8", "replace")

    def stream(self, *, skip_special=False):
        """A TokenStream: push ids one at a time, get the text each completes."""
        return TokenStream(self, skip_special)


class TokenStream(Handle):
    """Incremental decoding (dsv4_tokenizer_stream_*): the pieces push() and
    flush() return concatenate to Tokenizer.decode of every id pushed. Keeps
    its tokenizer alive."""

    def __init__(self, tokenizer, skip_special=False):
        self._tok = tokenizer
        out = ctypes.c_void_p()
        flags = _ffi.DECODE_F_SKIP_SPECIAL if skip_special else 0
        check(_lib.dsv4_tokenizer_stream_create(tokenizer._live(), flags, ctypes.byref(out)),
              "dsv4_tokenizer_stream_create", _lib.dsv4_last_error)
        self._ptr = out.value

    def _free(self, ptr):
        _lib.dsv4_tokenizer_stream_free(ptr)

    @exclusive
    def push(self, id_):
        """The text id_ completes (maybe "")."""
        p, n = ctypes.c_void_p(), ctypes.c_size_t()
        check(_lib.dsv4_tokenizer_stream_push(self._live(), _ffi.checked_int(id_, ctypes.c_int32, "id"), ctypes.byref(p), ctypes.byref(n)),
              "dsv4_tokenizer_stream_push", _lib.dsv4_last_error)
        return _text(p.value, n.value)

    @exclusive
    def flush(self):
        """Everything held back (incomplete UTF-8 as U+FFFD); the stream starts over."""
        p, n = ctypes.c_void_p(), ctypes.c_size_t()
        check(_lib.dsv4_tokenizer_stream_flush(self._live(), ctypes.byref(p), ctypes.byref(n)),
              "dsv4_tokenizer_stream_flush", _lib.dsv4_last_error)
        return _text(p.value, n.value)
