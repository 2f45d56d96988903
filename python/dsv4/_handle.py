"""Base of the handle classes: close() once, context manager, close on
garbage collection; handles that borrow this one (a scheduler borrows its
engine and tokenizer) are closed first."""
import weakref


class Handle:
    _ptr = None
    _dependents = None

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

    def _lend(self, dependent):
        """dependent borrows this handle: close() closes it first."""
        if self._dependents is None:
            self._dependents = weakref.WeakSet()
        self._dependents.add(dependent)

    def close(self):
        """Release the handle (idempotent); handles borrowing it are closed first."""
        for d in list(self._dependents or ()):
            d.close()
        ptr, self._ptr = self._ptr, None
        if ptr:
            self._free(ptr)
