"""Base of the handle classes: close() once, context manager, close on
garbage collection; handles that borrow this one (a scheduler borrows its
engine and tokenizer) are closed first.

Handle-exclusive library calls (api-guide §2: one thread at a time per handle)
run under the handle's lock (@exclusive), so Python threads sharing a handle
take turns instead of corrupting it: ctypes releases the GIL during every
call. A Scheduler and a Sequence share their engine's lock."""
import functools
import threading
import weakref


def exclusive(method):
    """Run method holding the lock of self's handle (re-entrant: callbacks from
    inside the call may call back into the library)."""
    @functools.wraps(method)
    def locked(self, *args, **kw):
        with self._exclusive_lock():
            return method(self, *args, **kw)
    return locked


class Handle:
    _ptr = None
    _dependents = None
    _rlock = None
    _lock_init = threading.Lock()

    def _exclusive_lock(self):
        """The lock of the handle whose calls must not overlap (this one)."""
        if self._rlock is None:
            with Handle._lock_init:
                if self._rlock is None:
                    self._rlock = threading.RLock()
        return self._rlock

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

    @exclusive
    def close(self):
        """Release the handle (idempotent); handles borrowing it are closed first."""
        for d in list(self._dependents or ()):
            d.close()
        ptr, self._ptr = self._ptr, None
        if ptr:
            self._free(ptr)
