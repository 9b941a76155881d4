"""Calls with a deadline, on one bounded worker.

A summariser call can hang. :class:`BoundedCaller` runs each call on its one
daemon worker thread and waits at most the deadline for it. A call that misses
its deadline is abandoned, not killed (Python cannot stop a thread): until it
returns, the caller is *busy* and refuses new calls at once, so a hung provider
costs one thread, never one per timeout.
"""

from __future__ import annotations

import queue
import threading
from collections.abc import Callable
from typing import Any, Generic, TypeVar

__all__ = ["BoundedCaller", "CallerBusyError", "DeadlineError"]

T = TypeVar("T")


class DeadlineError(TimeoutError):
    """The call did not return before its deadline (it is abandoned, still running)."""


class CallerBusyError(RuntimeError):
    """An abandoned call is still running on the worker; nothing new was started."""


class _Job(Generic[T]):
    def __init__(self, fn: Callable[[], T]) -> None:
        self.fn = fn
        self.done = threading.Event()
        self.value: T | None = None
        self.error: BaseException | None = None


class BoundedCaller:
    """Runs calls on one daemon worker thread, each waited for at most a deadline.

    Parameters
    ----------
    name : str
        The worker thread's name.

    Examples
    --------
    >>> caller = BoundedCaller("example")
    >>> caller.call(lambda: 6 * 7, timeout=5.0)
    42
    """

    def __init__(self, name: str = "bounded-caller") -> None:
        self.name = name
        self._jobs: queue.SimpleQueue[_Job[Any]] = queue.SimpleQueue()
        self._lock = threading.Lock()
        self._running: _Job[Any] | None = None
        self._worker: threading.Thread | None = None

    @property
    def busy(self) -> bool:
        """An abandoned call is still running."""
        with self._lock:
            return self._running is not None

    def call(self, fn: Callable[[], T], timeout: float) -> T:
        """``fn()``, run on the worker; its exception is raised here.

        Raises
        ------
        DeadlineError
            When ``fn`` did not return within ``timeout`` seconds (it keeps running;
            the caller is busy until it returns).
        CallerBusyError
            When an earlier abandoned call is still running.
        """
        job: _Job[T] = _Job(fn)
        with self._lock:
            if self._running is not None:
                raise CallerBusyError(
                    f"{self.name}: an earlier call missed its deadline and is still running"
                )
            self._running = job
            if self._worker is None or not self._worker.is_alive():
                self._worker = threading.Thread(target=self._serve, name=self.name, daemon=True)
                self._worker.start()
        self._jobs.put(job)
        if not job.done.wait(timeout):
            raise DeadlineError(f"{self.name}: no answer within {timeout:g} s")
        if job.error is not None:
            raise job.error
        return job.value  # type: ignore[return-value]

    def _serve(self) -> None:
        while True:
            job = self._jobs.get()
            try:
                job.value = job.fn()
            except BaseException as exc:  # handed to the waiting caller
                job.error = exc
            finally:
                with self._lock:
                    self._running = None
                job.done.set()
