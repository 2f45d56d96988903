"""ctypes mirror of include/dsv4/dsv4.h: the structs, the status codes and
the function signatures. Layouts are checked against the C compiler by
tests/test_layout.py. Internal: use the classes of the dsv4 package."""
import ctypes
import ctypes.util
import os
from ctypes import (CFUNCTYPE, POINTER, Structure, c_char_p, c_double, c_float, c_int32,
                    c_int64, c_size_t, c_uint32, c_uint64, c_void_p)

# ---- checked integers ------------------------------------------------------
# ctypes wraps an int that does not fit a C field silently (2**32 + 5 becomes 5):
# every int the package hands the library goes through these instead.
_RANGE = {c_int32: (-2**31, 2**31 - 1), c_uint32: (0, 2**32 - 1),
          c_int64: (-2**63, 2**63 - 1), c_uint64: (0, 2**64 - 1)}


def checked_int(value, ctype, name):
    """value as an int that fits ctype; TypeError (not an integer) or
    OverflowError (outside the C type's range) naming the argument."""
    try:
        v = value.__index__()
    except AttributeError:
        raise TypeError(f"{name}: expected an integer, got {type(value).__name__}") from None
    lo, hi = _RANGE[ctype]
    if not lo <= v <= hi:
        raise OverflowError(f"{name}: {v} is outside {ctype.__name__} [{lo}, {hi}]")
    return v


def int_array(values, name, ctype=c_int32):
    """A ctypes array (at least one element long) of the checked values."""
    vals = [checked_int(v, ctype, f"{name}[{i}]") for i, v in enumerate(values)]
    return (ctype * max(len(vals), 1))(*vals)


def path_arg(value, name):
    """A file-system path (str, bytes or os.PathLike) as bytes for the library;
    TypeError otherwise (None would become the path "None")."""
    if not isinstance(value, (str, bytes, os.PathLike)):
        raise TypeError(f"{name}: expected a path (str, bytes or os.PathLike), "
                        f"got {type(value).__name__}"
                        + (" (dsv4.default_model() finds no model: set DSV4_MODEL)"
                           if value is None else ""))
    return os.fsencode(value)


def set_fields(struct, **values):
    """struct.name = value for each keyword, integers checked against the field's type."""
    types = dict(f[:2] for f in type(struct)._fields_)
    for name, v in values.items():
        t = types[name]
        setattr(struct, name, checked_int(v, t, name) if t in _RANGE else v)


# ---- status codes (dsv4_status) -------------------------------------------
STATUS = {
    "DSV4_OK": 0, "DSV4_KV_FULL": 1, "DSV4_ABORTED": 2,
    "DSV4_ERR_INVALID_ARG": -1, "DSV4_ERR_OUT_OF_MEMORY": -2, "DSV4_ERR_UNSUPPORTED": -3,
    "DSV4_ERR_INTERNAL": -4, "DSV4_ERR_PARAMS_SIZE": -5,
    "DSV4_ERR_IO": -10, "DSV4_ERR_NOT_FOUND": -11, "DSV4_ERR_JSON": -12,
    "DSV4_ERR_ST_HEADER": -20, "DSV4_ERR_ST_TRUNCATED": -21, "DSV4_ERR_ST_DTYPE": -22,
    "DSV4_ERR_ST_OFFSETS": -23, "DSV4_ERR_ST_OVERLAP": -24, "DSV4_ERR_ST_SIZE": -25,
    "DSV4_ERR_ST_DUPLICATE": -26, "DSV4_ERR_INDEX": -27, "DSV4_ERR_MISSING_SHARD": -28,
    "DSV4_ERR_INDEX_MISMATCH": -29,
    "DSV4_ERR_CONFIG_KEY": -30, "DSV4_ERR_CONFIG_VALUE": -31, "DSV4_ERR_WEIGHTS": -32,
    "DSV4_ERR_TOKENIZER": -40, "DSV4_ERR_INVALID_UTF8": -41,
    "DSV4_ERR_UNKNOWN_SEQUENCE": -50, "DSV4_ERR_CONTEXT_OVERFLOW": -51,
    "DSV4_ERR_INVALID_TOKEN": -52, "DSV4_ERR_DOES_NOT_FIT": -53,
    "DSV4_ERR_NO_DEVICE": -70, "DSV4_ERR_DEVICE": -71, "DSV4_ERR_DEVICE_LOST": -72,
    "DSV4_ERR_RANK_MISMATCH": -80, "DSV4_ERR_RANK_FAILED": -81,
}
globals().update(STATUS)

BACKEND_AUTO, BACKEND_CPU, BACKEND_CUDA = 0, 1, 2
MODEL_F_CONFIG_ONLY = 1
ENGINE_F_OP_TIMINGS = 1
ENGINE_F_GPU_CPU_ORDER = 2
MAX_STAGES = 16  # DSV4_MAX_STAGES
KV_FORMAT_NATIVE, KV_FORMAT_FP8_DS_MLA = 0, 1
DECODE_F_SKIP_SPECIAL = 1
TOKEN_BOS, TOKEN_EOS, TOKEN_PAD, TOKEN_IMAGE, TOKEN_DSPARK_NOISE = 0, 1, 2, 3, 4
LOG_ERROR, LOG_WARN, LOG_INFO, LOG_DEBUG = 0, 1, 2, 3

LOG_FN = CFUNCTYPE(None, c_int32, c_char_p, c_void_p)
PROGRESS_FN = CFUNCTYPE(c_int32, c_char_p, c_int64, c_int64, c_void_p)


class ModelParams(Structure):
    _fields_ = [("struct_size", c_uint32), ("flags", c_uint32), ("log_fn", LOG_FN),
                ("log_user_data", c_void_p), ("log_level", c_int32), ("reserved0", c_int32)]


class ModelInfo(Structure):
    _fields_ = [("struct_size", c_uint32)] + [(n, c_int32) for n in (
        "vocab_size", "hidden_size", "n_layers", "n_mtp_layers", "n_heads", "head_dim",
        "rope_head_dim", "n_routed_experts", "n_experts_per_tok", "sliding_window", "hc_mult",
        "bos_token_id", "eos_token_id", "pad_token_id", "image_token_id",
        "dspark_noise_token_id", "dspark_block_size", "reserved0")] + [
        ("max_position_embeddings", c_int64), ("n_tensors", c_int64), ("payload_bytes", c_int64)] + [
        (n, c_int32) for n in (
        "index_n_heads", "index_head_dim", "index_topk", "engram_cols", "engram_head_dim",
        "n_engram_layers", "dspark_n_routed_experts", "dspark_n_experts_per_tok",
        "window_record_bytes", "compressed_record_bytes", "index_key_record_bytes",
        "compressor_state_record_bytes")]


class LayerInfo(Structure):
    _fields_ = [("struct_size", c_uint32), ("layer", c_int32), ("compress_ratio", c_int32),
                ("roles", c_uint32)] + [(n, c_int32) for n in (
        "kv_source", "index_source", "index_key_source", "candidate_source", "engram_slot",
        "rope_yarn")]


class TensorInfo(Structure):
    _fields_ = [("struct_size", c_uint32), ("dtype", c_int32), ("ndim", c_int32),
                ("component", c_int32), ("shard", c_int32), ("reserved0", c_int32),
                ("shape", c_int64 * 4), ("nbytes", c_int64), ("name", c_char_p),
                ("layer", c_int32), ("expert", c_int32), ("role", c_char_p),
                ("is_scale", c_int32), ("reserved1", c_int32)]


class EngineParams(Structure):
    _fields_ = [("struct_size", c_uint32), ("flags", c_uint32), ("backend", c_int32),
                ("device", c_int32), ("max_sequences", c_int32), ("n_threads", c_int32),
                ("max_context", c_int64), ("kv_budget_bytes", c_int64),
                ("prefill_chunk", c_int32), ("tp_size", c_int32), ("mpi_comm", c_void_p),
                ("log_fn", LOG_FN), ("log_user_data", c_void_p), ("log_level", c_int32),
                ("reserved0", c_int32), ("progress_fn", PROGRESS_FN),
                ("progress_user_data", c_void_p), ("pp_size", c_int32),
                ("dist_timeout_ms", c_int32), ("stage_first_layer", c_int32 * MAX_STAGES),
                ("pp_micro_batches", c_int32), ("reserved1", c_int32), ("kv_format", c_int32),
                ("reserved2", c_int32)]


class EngineInfo(Structure):
    _fields_ = [("struct_size", c_uint32)] + [(n, c_int32) for n in (
        "backend", "n_threads", "max_sequences", "prefill_chunk", "sequences_live")] + [
        (n, c_int64) for n in (
            "max_context", "kv_page_bytes", "kv_pages_total", "kv_pages_used",
            "kv_pages_per_sequence", "kv_bytes", "kv_bytes_per_token", "workspace_bytes",
            "prepared_weight_bytes", "mapped_bytes", "comm_bytes", "create_bytes")] + [
        ("kv_format", c_int32), ("reserved0", c_int32)]


class SamplingParams(Structure):
    _fields_ = [("struct_size", c_uint32), ("temperature", c_float), ("seed", c_uint64),
                ("seeds", POINTER(c_uint64))]


class EngineTimings(Structure):
    _fields_ = [("struct_size", c_uint32), ("op_timings", c_uint32)] + [(n, c_int64) for n in (
        "create_ns", "prefill_calls", "prefill_tokens", "prefill_ns", "last_prefill_ns",
        "decode_steps", "decode_tokens", "decode_ns", "last_decode_ns", "embed_op_ns",
        "engram_op_ns", "block_op_ns", "head_op_ns", "sample_op_ns", "read_op_ns", "host_op_ns",
        "dspark_op_ns", "draft_calls", "draft_seqs", "draft_ns", "last_draft_ns",
        "verify_calls", "verify_tokens", "verify_accepted", "verify_ns", "last_verify_ns",
        "stage_ns")]


# ---- chat format and scheduler (dsv4_chat_*, dsv4_scheduler_*) ----------------
CHAT_MODE_CHAT, CHAT_MODE_THINKING = 0, 1
CHAT_F_PARSE_SPECIAL, CHAT_F_KEEP_REASONING, CHAT_F_NO_BOS = 1, 2, 4
CHAT_EVENT_REASONING, CHAT_EVENT_CONTENT, CHAT_EVENT_TOOL_CALL, CHAT_EVENT_END = 1, 2, 3, 4
FINISH_NONE, FINISH_STOP, FINISH_LENGTH, FINISH_ERROR = 0, 1, 2, 3
REQUEST_F_IGNORE_EOS = 1
MAX_LOGPROBS = 20


class ChatParams(Structure):
    _fields_ = [("struct_size", c_uint32), ("mode", c_int32), ("flags", c_uint32),
                ("reasoning_effort", c_int32)]


class TokenEvent(Structure):
    _fields_ = [("struct_size", c_uint32), ("token", c_int32), ("position", c_int64),
                ("finish", c_int32), ("logprob", c_float), ("n_top", c_int32),
                ("reserved0", c_int32), ("top_ids", POINTER(c_int32)),
                ("top_logprobs", POINTER(c_float)), ("text", c_void_p), ("text_len", c_size_t)]


CHAT_EVENT_FN = CFUNCTYPE(None, c_int32, c_void_p, c_size_t, c_void_p)
TOKEN_FN = CFUNCTYPE(None, c_int64, POINTER(TokenEvent), c_void_p)


class RequestParams(Structure):
    _fields_ = [("struct_size", c_uint32), ("temperature", c_float), ("top_k", c_int32),
                ("top_p", c_float), ("min_p", c_float), ("repetition_penalty", c_float),
                ("presence_penalty", c_float), ("frequency_penalty", c_float),
                ("seed", c_uint64), ("max_tokens", c_int32), ("n_logprobs", c_int32),
                ("flags", c_uint32), ("n_stop_ids", c_int32), ("stop_ids", POINTER(c_int32)),
                ("n_stop", c_int32), ("stop", POINTER(c_char_p)), ("n_logit_bias", c_int32),
                ("logit_bias_ids", POINTER(c_int32)), ("logit_bias", POINTER(c_float)),
                ("on_token", TOKEN_FN), ("user_data", c_void_p), ("speculative", c_int32)]


class SchedulerParams(Structure):
    _fields_ = [("struct_size", c_uint32), ("max_running", c_int32), ("prefill_chunk", c_int32),
                ("token_budget", c_int32), ("max_waiting", c_int32), ("prefix_cache", c_int32)]


class SchedulerStats(Structure):
    _fields_ = [("struct_size", c_uint32), ("waiting", c_int32), ("running", c_int32),
                ("reserved0", c_int32)] + [(n, c_int64) for n in (
                    "submitted", "finished", "cancelled", "steps", "decode_tokens",
                    "prefill_tokens", "max_step_tokens", "prefix_hits", "prefix_misses",
                    "prefix_tokens_reused", "prefix_evictions")] + [
        ("prefix_entries", c_int32), ("reserved1", c_int32)] + [
        (n, c_int64) for n in ("spec_drafted", "spec_accepted", "spec_fallbacks")]


STRUCTS = [ModelParams, ModelInfo, LayerInfo, TensorInfo, EngineParams, EngineInfo,
           SamplingParams, EngineTimings, ChatParams, TokenEvent, RequestParams,
           SchedulerParams, SchedulerStats]
C_NAMES = {ModelParams: "dsv4_model_params", ModelInfo: "dsv4_model_info",
           LayerInfo: "dsv4_layer_info", TensorInfo: "dsv4_tensor_info",
           EngineParams: "dsv4_engine_params", EngineInfo: "dsv4_engine_info",
           SamplingParams: "dsv4_sampling_params", EngineTimings: "dsv4_engine_timings",
           ChatParams: "dsv4_chat_params", TokenEvent: "dsv4_token_event",
           RequestParams: "dsv4_request_params", SchedulerParams: "dsv4_scheduler_params",
           SchedulerStats: "dsv4_scheduler_stats"}

# ---- functions: name -> (restype, argtypes) -------------------------------
_st, _P = c_int32, POINTER
_i32p, _i64p = _P(c_int32), _P(c_int64)
_fp = _P(c_float)
SIGNATURES = {
    "dsv4_status_string": (c_char_p, [_st]),
    "dsv4_last_error": (c_char_p, []),
    "dsv4_version": (c_uint32, []),
    "dsv4_version_string": (c_char_p, []),
    "dsv4_build_info": (c_char_p, []),
    "dsv4_free": (None, [c_void_p]),
    "dsv4_backend_probe": (_st, [c_int32, c_int32]),
    "dsv4_model_params_init": (_st, [_P(ModelParams), c_size_t]),
    "dsv4_model_load": (_st, [c_char_p, _P(ModelParams), _P(c_void_p)]),
    "dsv4_model_free": (None, [c_void_p]),
    "dsv4_model_last_error": (c_char_p, [c_void_p]),
    "dsv4_model_get_info": (_st, [c_void_p, _P(ModelInfo), c_size_t]),
    "dsv4_model_get_layer": (_st, [c_void_p, c_int32, _P(LayerInfo), c_size_t]),
    "dsv4_model_get_tensor": (_st, [c_void_p, c_int64, _P(TensorInfo), c_size_t]),
    "dsv4_tokenizer_load": (_st, [c_char_p, _P(c_void_p)]),
    "dsv4_tokenizer_free": (None, [c_void_p]),
    "dsv4_tokenizer_last_error": (c_char_p, [c_void_p]),
    "dsv4_tokenizer_vocab_size": (c_int32, [c_void_p]),
    "dsv4_tokenizer_special_id": (c_int32, [c_void_p, c_int32]),
    "dsv4_tokenizer_token_id": (c_int32, [c_void_p, c_char_p]),
    "dsv4_tokenizer_token_text": (c_char_p, [c_void_p, c_int32]),
    "dsv4_tokenizer_encode": (_st, [c_void_p, c_char_p, c_size_t, _i32p, c_size_t,
                                    _P(c_size_t)]),
    "dsv4_tokenizer_decode": (_st, [c_void_p, _i32p, c_size_t, c_uint32, c_void_p, c_size_t,
                                    _P(c_size_t)]),
    "dsv4_tokenizer_stream_create": (_st, [c_void_p, c_uint32, _P(c_void_p)]),
    "dsv4_tokenizer_stream_free": (None, [c_void_p]),
    "dsv4_tokenizer_stream_push": (_st, [c_void_p, c_int32, _P(c_void_p), _P(c_size_t)]),
    "dsv4_tokenizer_stream_flush": (_st, [c_void_p, _P(c_void_p), _P(c_size_t)]),
    "dsv4_engine_params_init": (_st, [_P(EngineParams), c_size_t]),
    "dsv4_engine_create": (_st, [c_void_p, _P(EngineParams), _P(c_void_p)]),
    "dsv4_engine_create_from_dir": (_st, [c_char_p, _P(EngineParams), _P(c_void_p)]),
    "dsv4_engine_free": (None, [c_void_p]),
    "dsv4_engine_last_error": (c_char_p, [c_void_p]),
    "dsv4_engine_model": (c_void_p, [c_void_p]),
    "dsv4_engine_get_info": (_st, [c_void_p, _P(EngineInfo), c_size_t]),
    "dsv4_engine_seq_create": (_st, [c_void_p, _i64p]),
    "dsv4_engine_seq_fork": (_st, [c_void_p, c_int64, _i64p]),
    "dsv4_engine_seq_free": (_st, [c_void_p, c_int64]),
    "dsv4_engine_seq_length": (_st, [c_void_p, c_int64, _i64p]),
    "dsv4_sampling_params_init": (_st, [_P(SamplingParams), c_size_t]),
    "dsv4_engine_prefill": (_st, [c_void_p, c_int64, _i32p, c_int64, _P(SamplingParams), _fp,
                                  _i32p]),
    "dsv4_engine_decode": (_st, [c_void_p, c_int32, _i64p, _i32p, _P(SamplingParams), _fp,
                                 _i32p]),
    "dsv4_engine_get_timings": (_st, [c_void_p, _P(EngineTimings), c_size_t]),
    "dsv4_engine_get_layer_time": (_st, [c_void_p, c_int32, _i64p]),
    "dsv4_engine_reset_timings": (None, [c_void_p]),
    "dsv4_engine_draft": (_st, [c_void_p, c_int32, _i64p, _i32p, _P(SamplingParams), _i32p,
                                _fp]),
    "dsv4_engine_verify": (_st, [c_void_p, c_int32, _i64p, _i32p, _i32p, _i32p,
                                 _P(SamplingParams), _i32p, _i32p]),
    "dsv4_spec_draft_length": (c_int32, [_fp, c_int32, c_float]),
    "dsv4_chat_params_init": (_st, [_P(ChatParams), c_size_t]),
    "dsv4_chat_render": (_st, [c_char_p, c_size_t, _P(ChatParams), _P(c_void_p), _P(c_size_t)]),
    "dsv4_chat_encode": (_st, [c_void_p, c_char_p, c_size_t, _P(ChatParams), _P(_i32p),
                               _P(c_size_t)]),
    "dsv4_chat_parser_create": (_st, [c_int32, _P(c_void_p)]),
    "dsv4_chat_parser_push": (_st, [c_void_p, c_char_p, c_size_t, CHAT_EVENT_FN, c_void_p]),
    "dsv4_chat_parser_finish": (_st, [c_void_p, CHAT_EVENT_FN, c_void_p]),
    "dsv4_chat_parser_free": (None, [c_void_p]),
    "dsv4_request_params_init": (_st, [_P(RequestParams), c_size_t]),
    "dsv4_scheduler_params_init": (_st, [_P(SchedulerParams), c_size_t]),
    "dsv4_scheduler_create": (_st, [c_void_p, c_void_p, _P(SchedulerParams), _P(c_void_p)]),
    "dsv4_scheduler_free": (None, [c_void_p]),
    "dsv4_scheduler_submit": (_st, [c_void_p, _i32p, c_int64, _P(RequestParams), _i64p]),
    "dsv4_scheduler_step": (_st, [c_void_p, _i32p]),
    "dsv4_scheduler_cancel": (_st, [c_void_p, c_int64]),
    "dsv4_scheduler_poll": (_st, [c_void_p, c_int64, _i32p, c_int32, _i32p, _i32p]),
    "dsv4_scheduler_get_stats": (_st, [c_void_p, _P(SchedulerStats), c_size_t]),
}

_HERE = os.path.dirname(os.path.abspath(__file__))


def _candidates():
    env = os.environ.get("DSV4_LIBRARY")
    if env:
        yield env
        return
    # a checkout: python/dsv4 -> <checkout>/build/lib (the README's build dir)
    yield os.path.join(_HERE, "..", "..", "build", "lib", "libdsv4.so.0")
    found = ctypes.util.find_library("dsv4")
    if found:
        yield found
    yield "libdsv4.so.0"   # LD_LIBRARY_PATH, the loader's default paths


def load():
    """The libdsv4 shared library with every signature set: $DSV4_LIBRARY, else the
    checkout's build/lib, else the system's (ldconfig, LD_LIBRARY_PATH)."""
    errors = []
    for path in _candidates():
        if os.sep in path and not os.path.exists(path):
            errors.append(f"{path}: absent")
            continue
        try:
            lib = ctypes.CDLL(path)
        except OSError as e:
            errors.append(str(e))
            continue
        for name, (res, args) in SIGNATURES.items():
            f = getattr(lib, name)
            f.restype, f.argtypes = res, args
        lib.path = path
        return lib
    raise OSError("libdsv4 not found (set DSV4_LIBRARY to the path of libdsv4.so): "
                  + "; ".join(errors))


lib = load()
