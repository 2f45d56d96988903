"""Base of the handle classes: close() once, context manager, close on
garbage collection; the handle's last-error message for exceptions."""


class Handle:
    _ptr = None

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def __del__(self):
        try:
            self.close()
        except Exception:  # interpreter shutdown: the library may be gone
            pass

    @property
    def closed(self):
        return not self._ptr

    def _live(self):
        if not self._ptr:
            raise ValueError(f"{type(self).__name__} is closed")
        return self._ptr

    def close(self):
        """Release the handle (idempotent)."""
        ptr, self._ptr = self._ptr, None
        if ptr:
            self._free(ptr)
