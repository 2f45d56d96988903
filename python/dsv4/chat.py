"""The DeepSeek-V4.1 chat format (dsv4_chat_*): conversations rendered and
encoded exactly as the release's encoder does, and the streaming parser that
splits model output into reasoning, content and tool calls."""
import ctypes
import json
from collections import namedtuple

from . import _ffi
from ._handle import Handle, exclusive
from .errors import check

_lib = _ffi.lib
_MODES = {"chat": _ffi.CHAT_MODE_CHAT, "thinking": _ffi.CHAT_MODE_THINKING}
_KINDS = {_ffi.CHAT_EVENT_REASONING: "reasoning", _ffi.CHAT_EVENT_CONTENT: "content",
          _ffi.CHAT_EVENT_TOOL_CALL: "tool_call", _ffi.CHAT_EVENT_END: "end"}


def _mode(mode):
    if mode in _MODES:
        return _MODES[mode]
    if mode in _MODES.values():
        return mode
    raise ValueError(f"mode must be 'chat' or 'thinking', not {mode!r}")


def _params(mode, parse_special, keep_reasoning, bos, reasoning_effort):
    p = _ffi.ChatParams()
    check(_lib.dsv4_chat_params_init(ctypes.byref(p), ctypes.sizeof(p)), "dsv4_chat_params_init",
          _lib.dsv4_last_error)
    p.mode = _mode(mode)
    p.flags = ((_ffi.CHAT_F_PARSE_SPECIAL if parse_special else 0) |
               (_ffi.CHAT_F_KEEP_REASONING if keep_reasoning else 0) |
               (0 if bos else _ffi.CHAT_F_NO_BOS))
    _ffi.set_fields(p, reasoning_effort=reasoning_effort)
    return p


def _json(conversation):
    """UTF-8 JSON bytes of a conversation given as messages, an object or JSON text."""
    if isinstance(conversation, bytes):
        return conversation
    if isinstance(conversation, str):
        return conversation.encode()
    return json.dumps(conversation, ensure_ascii=False).encode()


def render(conversation, *, tools=None, mode="chat", parse_special=False, keep_reasoning=False,
           bos=True, reasoning_effort=0):
    """The V4.1 prompt text of a conversation, as the release's encoder builds it.

    conversation: a list of OpenAI-style messages (dicts with "role", "content",
    "reasoning_content", "tool_calls", "tool_call_id", ...), an object
    {"messages": [...], "tools": [...]}, or its JSON text. tools: OpenAI tool
    definitions put on the first system message. mode: "chat" (answer directly)
    or "thinking" (reason first; reasoning_effort 1..100, 0 = the encoder's
    default). Raises dsv4.InvalidArgument naming the message and field the
    encoder rejects, dsv4.CheckpointError (DSV4_ERR_JSON) for text that is not JSON."""
    if tools is not None:
        conversation = {"messages": conversation, "tools": tools}
    data = _json(conversation)
    p = _params(mode, parse_special, keep_reasoning, bos, reasoning_effort)
    out, n = ctypes.c_void_p(), ctypes.c_size_t()
    check(_lib.dsv4_chat_render(data, len(data), ctypes.byref(p), ctypes.byref(out),
                                ctypes.byref(n)), "dsv4_chat_render", _lib.dsv4_last_error)
    try:
        return ctypes.string_at(out.value, n.value).decode("utf-8")
    finally:
        _lib.dsv4_free(out.value)


def encode(tokenizer, conversation, *, tools=None, mode="chat", parse_special=False,
           keep_reasoning=False, bos=True, reasoning_effort=0):
    """The prompt ids of a conversation: render() then the tokenizer, with no special
    token matched inside message text unless parse_special (no role injection).
    Arguments as for render(); returns a list of ints that starts with BOS."""
    if tools is not None:
        conversation = {"messages": conversation, "tools": tools}
    data = _json(conversation)
    p = _params(mode, parse_special, keep_reasoning, bos, reasoning_effort)
    ids, n = ctypes.POINTER(ctypes.c_int32)(), ctypes.c_size_t()
    check(_lib.dsv4_chat_encode(tokenizer._live(), data, len(data), ctypes.byref(p),
                                ctypes.byref(ids), ctypes.byref(n)), "dsv4_chat_encode",
          _lib.dsv4_last_error)
    try:
        return ids[:n.value]
    finally:
        _lib.dsv4_free(ctypes.cast(ids, ctypes.c_void_p))


class ChatEvent(namedtuple("ChatEvent", "kind text")):
    """Parsed output: kind "reasoning", "content", "tool_call" (text: JSON
    {"name", "arguments"}, see .tool_call) or "end" (the end-of-sentence marker)."""
    __slots__ = ()

    @property
    def tool_call(self):
        """A tool_call event's {"name": str, "arguments": str (JSON object text)}."""
        return json.loads(self.text) if self.kind == "tool_call" else None


class ChatParser(Handle):
    """Streaming parser of model output (dsv4_chat_parser_*): push() decoded text
    (special tokens kept) in any pieces and get the ChatEvents it completes; a
    marker split across pieces still parses. finish() reports what was held back.
    mode: the mode the prompt was rendered with."""

    def __init__(self, mode="chat"):
        out = ctypes.c_void_p()
        check(_lib.dsv4_chat_parser_create(_mode(mode), ctypes.byref(out)),
              "dsv4_chat_parser_create", _lib.dsv4_last_error)
        self._ptr = out.value
        self._events = []
        self._fn = _ffi.CHAT_EVENT_FN(self._on_event)   # lives as long as the parser

    def _free(self, ptr):
        _lib.dsv4_chat_parser_free(ptr)

    def _on_event(self, kind, text, n, _user):
        self._events.append(ChatEvent(_KINDS.get(kind, str(kind)),
                                      ctypes.string_at(text, n).decode("utf-8", "replace")
                                      if n else ""))

    def _take(self):
        ev, self._events = self._events, []
        return ev

    @exclusive
    def push(self, text):
        """Feed output text (str or UTF-8 bytes); returns the ChatEvents it completes."""
        if not isinstance(text, (str, bytes, bytearray, memoryview)):
            raise TypeError(f"text: expected str or bytes, got {type(text).__name__}")
        data = text.encode() if isinstance(text, str) else bytes(text)
        check(_lib.dsv4_chat_parser_push(self._live(), data, len(data), self._fn, None),
              "dsv4_chat_parser_push", _lib.dsv4_last_error)
        return self._take()

    @exclusive
    def finish(self):
        """The output ended: the ChatEvents held back (an unfinished tool call as content)."""
        check(_lib.dsv4_chat_parser_finish(self._live(), self._fn, None),
              "dsv4_chat_parser_finish", _lib.dsv4_last_error)
        return self._take()


__all__ = ["render", "encode", "ChatEvent", "ChatParser"]
