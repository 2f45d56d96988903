"""libdsv4 statuses as Python exceptions.

Every failed call raises Error (or a subclass) carrying the status code, its
name and the library's message for that call (dsv4_last_error(), read right
after the call on the same thread)."""
from . import _ffi

_NAMES = {v: k for k, v in _ffi.STATUS.items()}


class Error(Exception):
    """A libdsv4 call failed. status: the dsv4_status code; name: e.g.
    "DSV4_ERR_INVALID_ARG"; message: the library's message for the call."""

    def __init__(self, status, message, call=None):
        self.status = int(status)
        self.name = _NAMES.get(self.status, f"status {self.status}")
        self.message = message
        self.call = call
        where = f"{call}: " if call else ""
        super().__init__(f"{where}{self.name}: {message}" if message else f"{where}{self.name}")


class InvalidArgument(Error):
    """DSV4_ERR_INVALID_ARG, DSV4_ERR_PARAMS_SIZE, DSV4_ERR_INVALID_TOKEN, DSV4_ERR_INVALID_UTF8."""


class NotFound(Error):
    """DSV4_ERR_NOT_FOUND, DSV4_ERR_IO: a file is absent or unreadable."""


class CheckpointError(Error):
    """A checkpoint, config or tokenizer file is malformed (JSON, safetensors, index,
    config keys and values, the tensor contract, tokenizer.json)."""


class UnknownSequence(Error):
    """DSV4_ERR_UNKNOWN_SEQUENCE: the sequence id does not exist or was freed."""


class ContextOverflow(Error):
    """DSV4_ERR_CONTEXT_OVERFLOW: the request passes the engine's maximum context."""


class KVCacheFull(Error):
    """DSV4_KV_FULL (not fatal): the KV pools or sequence slots cannot hold the request;
    nothing changed. Free sequences and retry."""


class Aborted(Error):
    """DSV4_ABORTED: a progress callback asked to stop."""


class Unsupported(Error):
    """DSV4_ERR_UNSUPPORTED, DSV4_ERR_DOES_NOT_FIT, DSV4_ERR_NO_DEVICE and the device errors."""


class OutOfMemory(Error, MemoryError):
    """DSV4_ERR_OUT_OF_MEMORY."""


def _class_of(status):
    if status in (_ffi.DSV4_ERR_INVALID_ARG, _ffi.DSV4_ERR_PARAMS_SIZE,
                  _ffi.DSV4_ERR_INVALID_TOKEN, _ffi.DSV4_ERR_INVALID_UTF8):
        return InvalidArgument
    if status in (_ffi.DSV4_ERR_NOT_FOUND, _ffi.DSV4_ERR_IO):
        return NotFound
    if status == _ffi.DSV4_ERR_UNKNOWN_SEQUENCE:
        return UnknownSequence
    if status == _ffi.DSV4_ERR_CONTEXT_OVERFLOW:
        return ContextOverflow
    if status == _ffi.DSV4_KV_FULL:
        return KVCacheFull
    if status == _ffi.DSV4_ABORTED:
        return Aborted
    if status == _ffi.DSV4_ERR_OUT_OF_MEMORY:
        return OutOfMemory
    if -40 <= status <= -12 or status == _ffi.DSV4_ERR_TOKENIZER:
        return CheckpointError
    if status in (_ffi.DSV4_ERR_UNSUPPORTED, _ffi.DSV4_ERR_DOES_NOT_FIT) or status <= -70:
        return Unsupported
    return Error


def check(status, call, message_fn):
    """Raise the exception of a non-zero status; message_fn() gives the message."""
    if status != _ffi.DSV4_OK:
        raw = message_fn()
        msg = raw.decode("utf-8", "replace") if isinstance(raw, bytes) else (raw or "")
        raise _class_of(status)(status, msg, call)
    return status


def last_error():
    """The message of the last failed call on this thread without a handle."""
    return (_ffi.lib.dsv4_last_error() or b"").decode("utf-8", "replace")
