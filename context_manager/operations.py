"""How a :class:`~context_manager.ContextManager` runs its operations: one at a time per
store, each write one transaction, and the ``auto_tick`` worker beside them.

:class:`Gate` is the part a manager owns for this: the store's lock, the depth of the
operation in progress and the store state its view was last read at. :func:`operation`
decorates each public method of the manager; :class:`Ticker` is the background worker,
typed against :class:`Tickable` (anything with ``closed`` and ``tick()``).
"""

from __future__ import annotations

import functools
import logging
import threading
import weakref
from collections.abc import Callable
from typing import Any, Protocol, TypeVar

from .errors import AuditOnlyError
from .store import RecordStore, StoreFullError

__all__ = ["FULL_BACKOFF", "Gate", "Gated", "Tickable", "Ticker", "operation", "store_lock"]

_R = TypeVar("_R")
_log = logging.getLogger(__name__)

_STORE_LOCKS: weakref.WeakKeyDictionary[RecordStore, threading.RLock] = weakref.WeakKeyDictionary()
_STORE_LOCKS_GUARD = threading.Lock()

FULL_BACKOFF = (1.0, 60.0)
"""The first and the longest wait, in seconds, of an ``auto_tick`` worker whose store
is full before it tries again (doubling in between; a compile wakes it at once)."""


def store_lock(store: RecordStore) -> threading.RLock:
    """The one lock every manager on ``store`` takes for each operation.

    Examples
    --------
    >>> from context_manager import Store
    >>> store = Store.open(":memory:")
    >>> store_lock(store) is store_lock(store)
    True
    """
    with _STORE_LOCKS_GUARD:
        lock = _STORE_LOCKS.get(store)
        if lock is None:
            lock = _STORE_LOCKS[store] = threading.RLock()
        return lock


class Tickable(Protocol):
    """What the ``auto_tick`` worker drives: a manager that can tick until it is closed."""

    @property
    def closed(self) -> bool: ...

    def tick(self) -> bool: ...


class Gate:
    """The operations of one manager on one store: serialised with every other operation
    on that store (from any thread, through any manager), each started on a view that
    follows the store.

    Parameters
    ----------
    store : RecordStore
    check_open : callable
        Raises when the manager is closed.
    resync : callable
        Re-reads everything the manager holds in memory from the store.
    closed : callable
        Whether the manager is closed.
    """

    def __init__(
        self,
        store: RecordStore,
        *,
        check_open: Callable[[], None],
        resync: Callable[[], None],
        closed: Callable[[], bool],
    ) -> None:
        self.store = store
        self.lock = store_lock(store)
        self.depth = 0
        """Operations of this manager in progress, the outermost first (0 between them)."""
        self.owner: int | None = None
        """The thread inside an operation of this manager (None between operations)."""
        self.ticker: Ticker | None = None
        self.audit_only = False
        """The manager was opened with ``audit_only=True``: every operation that writes
        raises :class:`~context_manager.errors.AuditOnlyError` before it runs."""
        self.committed: list[Callable[[], None]] = []
        """Calls to make once the outermost operation in progress has returned (its
        transaction committed), outside the store's lock; dropped if it raises."""
        self._check_open = check_open
        self._resync = resync
        self._closed = closed
        self.seen = store.sequence
        self.seen_branch = store.branch

    def mark_seen(self) -> None:
        """The manager's view is the store's as it is now."""
        self.seen = self.store.sequence
        self.seen_branch = self.store.branch

    @property
    def fresh(self) -> bool:
        """Whether nothing was written to the store since the view was last read."""
        return self.store.sequence == self.seen and self.store.branch == self.seen_branch

    @property
    def inside(self) -> bool:
        """Whether the calling thread is inside an operation of this manager."""
        return self.owner == threading.get_ident()

    def run(self, call: Callable[[], _R], *, writes: bool, one_transaction: bool) -> _R:
        """``call()`` as one operation: under the store's lock, on a view that follows
        the store, as one transaction when ``one_transaction`` (outermost only); a
        ``writes`` operation that raises reloads the view from the store."""
        ticker = self.ticker
        if ticker is not None and ticker.settles and not self.inside:
            ticker.settled()  # auto_tick="after_compile": the work queued is done first
        done: list[Callable[[], None]] = []
        result = self._run(call, done, writes=writes, one_transaction=one_transaction)
        for notify in done:  # the outermost operation's, its transaction committed
            notify()
        return result

    def _run(
        self,
        call: Callable[[], _R],
        done: list[Callable[[], None]],
        *,
        writes: bool,
        one_transaction: bool,
    ) -> _R:
        with self.lock:
            self._check_open()
            outermost = self.depth == 0
            if outermost and not self.fresh:
                self._resync()  # another manager wrote to this store
            self.depth += 1
            if outermost:
                self.owner = threading.get_ident()
            try:
                if one_transaction and outermost:
                    with self.store.transaction():
                        result = call()
                else:
                    result = call()
                if outermost:
                    done.extend(self.committed)
                    self.committed.clear()
                return result
            except BaseException:
                if outermost:
                    self.committed.clear()
                if writes and outermost and not self._closed():
                    self._resync()
                raise
            finally:
                self.depth -= 1
                if outermost:
                    self.owner = None
                if outermost and not self.store.closed:
                    self.mark_seen()


class Gated(Protocol):
    """An object whose methods :func:`operation` decorates: it owns a :class:`Gate`."""

    _gate: Gate


_PUBLIC = {"_compile_op": "compile", "_tick_pass": "tick"}
"""The public operation an internal one is part of (what an error names)."""


def operation(
    *, writes: bool = False, atomic: bool | None = None
) -> Callable[[Callable[..., _R]], Callable[..., _R]]:
    """A public operation of :class:`~context_manager.ContextManager`, run through its
    :class:`Gate`: serialised with every other operation on the same store and started
    on a view that follows the store. A write is one store transaction (unless
    ``atomic=False``: the branch operations, which the store makes atomic itself), so
    one that raises stored nothing, and everything held in memory is then reloaded
    from the store. An operation called from inside another is part of it."""
    one_transaction = writes if atomic is None else atomic

    def wrap(fn: Callable[..., _R]) -> Callable[..., _R]:
        name = _PUBLIC.get(fn.__name__, fn.__name__)

        @functools.wraps(fn)
        def run(self: Gated, *args: Any, **kwargs: Any) -> _R:
            if writes and self._gate.audit_only:
                raise AuditOnlyError(name)
            return self._gate.run(
                lambda: fn(self, *args, **kwargs), writes=writes, one_transaction=one_transaction
            )

        return run

    return wrap


class Ticker:
    """The ``auto_tick`` worker: a daemon thread that, once woken, ticks its manager until
    no work is left, then waits for the next wake.

    With ``settles`` (``auto_tick="after_compile"``) it is woken only by compiles, and
    every other thread's operation first waits until it is idle: the work runs at fixed
    points, so the same calls give the same results."""

    def __init__(self, manager: Tickable, *, settles: bool = False) -> None:
        self._manager = manager
        self.settles = settles
        self._wake = threading.Event()
        self._stopping = threading.Event()
        self._guard = threading.Lock()  # the idle flag and the wake change together
        self.idle = threading.Event()
        self.idle.set()
        self.error: BaseException | None = None
        self._thread = threading.Thread(target=self._run, name="auto-tick", daemon=True)
        self._thread.start()

    def wake(self, *, compiled: bool = False) -> None:
        """Start ticking: after a compile, and (unless ``settles``) after any change."""
        if self.settles and not compiled:
            return
        with self._guard:
            self.idle.clear()
            self._wake.set()

    def on_worker(self) -> bool:
        """Whether the calling thread is the worker."""
        return threading.current_thread() is self._thread

    def settled(self) -> None:
        """Wait until the worker is idle (at once on the worker itself)."""
        if not self.on_worker():
            self.idle.wait()

    def stop(self) -> None:
        """Stop the worker after the tick in progress (waiting for it, unless called
        from the worker itself)."""
        self._stopping.set()
        self._wake.set()
        if threading.current_thread() is not self._thread:
            self._thread.join()

    def _run(self) -> None:
        backoff = 0.0  # seconds until the next try while the store is full
        while True:
            self._wake.wait(backoff or None)
            if self._stopping.is_set():
                self.idle.set()
                return
            with self._guard:
                self._wake.clear()
                self.idle.clear()  # woken, or trying again after a full store
            try:
                while not self._stopping.is_set() and self._tick():
                    pass
                backoff = 0.0
            except StoreFullError as full:  # not the worker's end: it waits for space
                if not backoff:
                    _log.warning(
                        "auto_tick: the store is full (%s); compression waits and tries "
                        "again, first in %g s, then at most every %g s, and at each compile",
                        full,
                        FULL_BACKOFF[0],
                        FULL_BACKOFF[1],
                    )
                backoff = min(FULL_BACKOFF[1], max(FULL_BACKOFF[0], 2 * backoff))
            except BaseException as exc:
                self.error = exc
                _log.exception("the auto_tick worker stopped on an error")
                self.idle.set()
                return
            with self._guard:
                if not self._wake.is_set():
                    self.idle.set()

    def _tick(self) -> bool:
        manager = self._manager
        if manager.closed:
            return False
        return manager.tick()  # the summariser is called with no lock held
