"""Calls with a deadline, on a small bounded set of worker threads.

A summariser call can hang. :class:`BoundedCaller` runs each call on a daemon
worker thread and waits at most the deadline for it. A call that misses its
deadline is abandoned, not killed (Python cannot stop a thread): it keeps its
thread until it returns, and the next call runs on another worker, so one hung
call never stops later work. The number of abandoned calls still running is
bounded (``max_abandoned``): at the bound the caller is *busy* and refuses new
calls at once, so a provider that hangs every call costs a fixed number of
threads, never one per timeout. A worker whose abandoned call returns is reused.
"""

from __future__ import annotations

import queue
import threading
from collections.abc import Callable
from typing import Any, Generic, TypeVar

__all__ = ["MAX_ABANDONED", "BoundedCaller", "CallerBusyError", "DeadlineError"]

T = TypeVar("T")

MAX_ABANDONED = 4
"""How many calls past their deadline may still be running before new calls are refused."""


class DeadlineError(TimeoutError):
    """The call did not return before its deadline (it is abandoned, still running)."""


class CallerBusyError(RuntimeError):
    """As many abandoned calls as allowed are still running; nothing new was started."""


class _Job(Generic[T]):
    def __init__(self, fn: Callable[[], T]) -> None:
        self.fn = fn
        self.done = threading.Event()
        self.finished = False  # set under the caller's lock, before ``done``
        self.abandoned = False
        self.value: T | None = None
        self.error: BaseException | None = None


class _Worker:
    def __init__(self) -> None:
        self.jobs: queue.SimpleQueue[_Job[Any]] = queue.SimpleQueue()


class BoundedCaller:
    """Runs calls on daemon worker threads, each waited for at most a deadline.

    Parameters
    ----------
    name : str
        The worker threads' name.
    max_abandoned : int
        How many calls past their deadline may still be running; while that many
        are, :meth:`call` raises :class:`CallerBusyError` without starting anything.

    Examples
    --------
    >>> caller = BoundedCaller("example")
    >>> caller.call(lambda: 6 * 7, timeout=5.0)
    42
    >>> caller.abandoned, caller.busy
    (0, False)
    """

    def __init__(self, name: str = "bounded-caller", max_abandoned: int = MAX_ABANDONED) -> None:
        if isinstance(max_abandoned, bool) or not isinstance(max_abandoned, int):
            raise TypeError(f"max_abandoned must be an int, got {type(max_abandoned).__name__}")
        if max_abandoned < 1:
            raise ValueError(f"max_abandoned must be at least 1, got {max_abandoned}")
        self.name = name
        self.max_abandoned = max_abandoned
        self._lock = threading.Lock()
        self._idle: list[_Worker] = []
        self._abandoned = 0

    @property
    def abandoned(self) -> int:
        """How many calls missed their deadline and are still running."""
        with self._lock:
            return self._abandoned

    @property
    def busy(self) -> bool:
        """As many abandoned calls as allowed are still running: new calls are refused."""
        with self._lock:
            return self._abandoned >= self.max_abandoned

    def call(self, fn: Callable[[], T], timeout: float) -> T:
        """``fn()``, run on a worker; its exception is raised here.

        Raises
        ------
        DeadlineError
            When ``fn`` did not return within ``timeout`` seconds (it keeps running
            on its worker; later calls run on another).
        CallerBusyError
            When ``max_abandoned`` abandoned calls are still running.
        """
        job: _Job[T] = _Job(fn)
        with self._lock:
            if self._abandoned >= self.max_abandoned:
                raise CallerBusyError(
                    f"{self.name}: {self._abandoned} earlier calls missed their deadline "
                    "and are still running"
                )
            worker = self._idle.pop() if self._idle else self._start()
        worker.jobs.put(job)
        if not job.done.wait(timeout):
            with self._lock:
                if not job.finished:
                    job.abandoned = True
                    self._abandoned += 1
            if job.abandoned:
                raise DeadlineError(f"{self.name}: no answer within {timeout:g} s")
            job.done.wait()  # it finished as the deadline passed: take its answer
        if job.error is not None:
            raise job.error
        return job.value  # type: ignore[return-value]

    def _start(self) -> _Worker:
        worker = _Worker()
        thread = threading.Thread(target=self._serve, args=(worker,), name=self.name, daemon=True)
        thread.start()
        return worker

    def _serve(self, worker: _Worker) -> None:
        while True:
            job = worker.jobs.get()
            try:
                job.value = job.fn()
            except BaseException as exc:  # handed to the waiting caller
                job.error = exc
            finally:
                with self._lock:
                    job.finished = True
                    if job.abandoned:
                        self._abandoned -= 1
                    self._idle.append(worker)
                job.done.set()
