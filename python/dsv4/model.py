"""Model: an official-format checkpoint directory (dsv4_model_*)."""
import ctypes
from types import SimpleNamespace

from . import _ffi
from ._handle import Handle
from .errors import check

_lib = _ffi.lib


def _fields(s):
    return SimpleNamespace(**{n: getattr(s, n) for n, _ in s._fields_
                              if n not in ("struct_size",) and not n.startswith("reserved")})


class Model(Handle):
    """A loaded checkpoint (config, layer roles, tensor table; shards mmapped).

    Model(path) loads and validates it (dsv4_model_load); config_only=True reads
    config.json alone. Use as a context manager or call close(). Raises
    dsv4.Error subclasses with the loader's message. One thread at a time."""

    def __init__(self, path, *, config_only=False, _borrowed=None, _owner=None):
        if _borrowed is not None:    # a model owned by an engine
            self._ptr, self._owned, self._owner = _borrowed, False, _owner
            return
        params = _ffi.ModelParams()
        check(_lib.dsv4_model_params_init(ctypes.byref(params), ctypes.sizeof(params)),
              "dsv4_model_params_init", _lib.dsv4_last_error)
        if config_only:
            params.flags |= _ffi.MODEL_F_CONFIG_ONLY
        out = ctypes.c_void_p()
        check(_lib.dsv4_model_load(_ffi.path_arg(path, "path"), ctypes.byref(params), ctypes.byref(out)),
              "dsv4_model_load", _lib.dsv4_last_error)
        self._ptr, self._owned = out.value, True

    def _free(self, ptr):
        if self._owned:
            _lib.dsv4_model_free(ptr)

    def _check(self, status, call):
        return check(status, call, _lib.dsv4_last_error)

    @property
    def info(self):
        """The model's facts (dsv4_model_info) as attributes: vocab_size, n_layers, ..."""
        i = _ffi.ModelInfo()
        self._check(_lib.dsv4_model_get_info(self._live(), ctypes.byref(i), ctypes.sizeof(i)),
                    "dsv4_model_get_info")
        return _fields(i)

    def layer(self, index):
        """Row `index` of the layer-role table (dsv4_layer_info)."""
        i = _ffi.LayerInfo()
        self._check(_lib.dsv4_model_get_layer(self._live(), index, ctypes.byref(i),
                                              ctypes.sizeof(i)), "dsv4_model_get_layer")
        return _fields(i)

    def tensors(self):
        """Every tensor of the table, sorted by name: name, dtype, shape, nbytes, component, shard."""
        for k in range(self.info.n_tensors):
            t = _ffi.TensorInfo()
            self._check(_lib.dsv4_model_get_tensor(self._live(), k, ctypes.byref(t),
                                                   ctypes.sizeof(t)), "dsv4_model_get_tensor")
            yield SimpleNamespace(name=t.name.decode(), dtype=t.dtype,
                                  shape=tuple(t.shape[:t.ndim]), nbytes=t.nbytes,
                                  component=t.component, shard=t.shard)
