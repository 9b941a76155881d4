"""Where the benchmark's replay jobs run: in this process, in local worker processes,
or on a ``dask.distributed`` cluster.

Every executor returns the jobs' results in the order the jobs were given, whatever
order they finish in, so a sweep's records are the same whichever executor ran it (the
measured ``cpu_ms`` aside: see :func:`records_digest`).

:class:`LocalExecutor` is the default: the jobs run one after another in this process,
or on a :class:`~concurrent.futures.ProcessPoolExecutor` of ``workers`` processes.

:class:`DaskExecutor` sends them to a ``dask.distributed`` scheduler given by address
(``tcp://host:8786``: its workers need this package installed, with the ``bench``
extra for the peers) or to a cluster of ``workers`` local processes it starts for the
run and stops after. A job is one (transcript, policy, budget) replay; when a worker
dies mid-sweep the scheduler runs its jobs again on another, and each job's result is
taken once, from its own future, so nothing is counted twice. Dask was chosen over Ray
for this: it is a pure-Python install of a few megabytes (Ray is a wheel of hundreds),
a local cluster starts in about a second, and it needs no network beyond the loopback
and nothing downloaded at run time.

Examples
--------
>>> from foldbench.executors import LocalExecutor
>>> LocalExecutor().map(abs, [-2, 3, -5])
[2, 3, 5]
"""

from __future__ import annotations

import contextlib
import hashlib
import importlib
import json
import logging
import threading
from collections.abc import Callable, Iterable, Sequence
from concurrent.futures import ProcessPoolExecutor
from dataclasses import asdict, dataclass, field
from typing import TYPE_CHECKING, Any, Protocol, TypeVar

if TYPE_CHECKING:
    from .records import CallRecord

__all__ = [
    "EXECUTORS",
    "DaskExecutor",
    "Executor",
    "ExecutorError",
    "LocalExecutor",
    "WorkerLoad",
    "describe_load",
    "make_executor",
    "records_digest",
]

J = TypeVar("J")
R = TypeVar("R")

EXECUTORS = ("local", "dask")
"""The names ``--executor`` accepts."""

MEASURED_FIELDS = frozenset({"cpu_ms"})
"""Record fields that are measurements of the machine, not results of the replay."""


class ExecutorError(RuntimeError):
    """An executor cannot start or reach its workers; the message says what to do."""


@dataclass
class WorkerLoad:
    """One worker's share of a sweep so far."""

    done: int = 0
    """Jobs whose result came from this worker."""
    running: int = 0
    """Jobs the scheduler has given it that have not finished."""


@dataclass
class _Tally:
    load: dict[str, WorkerLoad] = field(default_factory=dict)
    lost: set[str] = field(default_factory=set)


class Executor(Protocol):
    """Runs jobs and returns their results in the jobs' order."""

    @property
    def name(self) -> str:
        """A short description for the progress line (``local, 2 processes``)."""
        ...

    def map(
        self,
        fn: Callable[[J], R],
        jobs: Sequence[J],
        *,
        progress: Callable[[int, int], None] | None = None,
    ) -> list[R]:
        """``[fn(job) for job in jobs]``, with ``progress(done, total)`` after each job."""
        ...

    def load(self) -> dict[str, WorkerLoad]:
        """Each worker's jobs done and running so far (empty when not tracked)."""
        ...

    def close(self) -> None:
        """Stop what the executor started."""
        ...


class LocalExecutor:
    """Jobs in this process (``workers=1``) or on local worker processes.

    Parameters
    ----------
    workers : int
        Processes; 1 runs the jobs here, one after another.
    """

    def __init__(self, workers: int = 1) -> None:
        if workers < 1:
            raise ValueError(f"workers must be at least 1, got {workers}")
        self.workers = workers

    @property
    def name(self) -> str:
        if self.workers == 1:
            return "local, in this process"
        return f"local, {self.workers} processes"

    def map(
        self,
        fn: Callable[[J], R],
        jobs: Sequence[J],
        *,
        progress: Callable[[int, int], None] | None = None,
    ) -> list[R]:
        with contextlib.ExitStack() as stack:
            outputs: Iterable[R] = map(fn, jobs)
            if self.workers > 1:
                pool = stack.enter_context(ProcessPoolExecutor(max_workers=self.workers))
                outputs = pool.map(fn, jobs)
            results: list[R] = []
            for done, out in enumerate(outputs, 1):
                results.append(out)
                if progress:
                    progress(done, len(jobs))
        return results

    def load(self) -> dict[str, WorkerLoad]:
        return {}

    def close(self) -> None:
        return None

    def __enter__(self) -> LocalExecutor:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def _on_worker(fn: Callable[[Any], Any], job: Any) -> tuple[str, Any]:
    """Run ``fn(job)`` on a dask worker; returns the worker's address with the result."""
    from distributed import get_worker

    return get_worker().address, fn(job)


class DaskExecutor:
    """Jobs on a ``dask.distributed`` cluster.

    Parameters
    ----------
    scheduler : str, optional
        A running scheduler's address (``tcp://10.0.0.5:8786``). Without it, a cluster of
        ``workers`` local processes (one thread each) is started and stopped with the
        executor.
    workers : int
        Processes of the local cluster (ignored with ``scheduler``).
    timeout : float
        Seconds to wait for the scheduler.

    Raises
    ------
    ExecutorError
        When ``dask.distributed`` is not installed or the scheduler cannot be reached.
    """

    def __init__(self, scheduler: str | None = None, *, workers: int = 2, timeout: float = 30.0):
        try:
            dist: Any = importlib.import_module("distributed")  # untyped: used as Any
        except ImportError as exc:  # pragma: no cover - the dask extra is installed in CI
            raise ExecutorError(
                "--executor dask needs dask.distributed: pip install 'ctxfold[dask]'"
            ) from exc
        if workers < 1:
            raise ValueError(f"workers must be at least 1, got {workers}")
        self.scheduler = scheduler
        self._dist = dist
        self.client: Any = None
        self._cluster: Any = None
        self._tally = _Tally()
        self._lock = threading.Lock()
        try:
            if scheduler is None:
                self._cluster = dist.LocalCluster(
                    n_workers=workers,
                    threads_per_worker=1,
                    processes=True,
                    host="127.0.0.1",
                    dashboard_address=":0",  # a free loopback port: never a clash
                    silence_logs=logging.ERROR,
                )
                self.client = dist.Client(self._cluster, timeout=timeout)
            else:
                self.client = dist.Client(scheduler, timeout=timeout)
        except OSError as exc:
            self.close()
            where = scheduler or "a local cluster"
            raise ExecutorError(
                f"cannot reach the dask scheduler at {where}: {exc}; start one with "
                "`dask scheduler` and workers with `dask worker ADDRESS`, or leave "
                "--scheduler out to run a local cluster"
            ) from exc

    @property
    def name(self) -> str:
        count = len(self.client.scheduler_info().get("workers", {}))
        where = self.scheduler or "local cluster"
        return f"dask, {where}, {count} worker{'s' if count != 1 else ''}"

    @property
    def dashboard(self) -> str:
        """The address of the cluster's dashboard (its task stream and worker load)."""
        return str(self.client.dashboard_link)

    def workers(self) -> list[str]:
        """The addresses of the cluster's workers now."""
        return sorted(self.client.scheduler_info().get("workers", {}))

    def map(
        self,
        fn: Callable[[J], R],
        jobs: Sequence[J],
        *,
        progress: Callable[[int, int], None] | None = None,
    ) -> list[R]:
        with self._lock:
            self._tally = _Tally()
        seen = set(self.workers())
        futures = [
            self.client.submit(_on_worker, fn, job, key=f"replay-{k}", pure=False)
            for k, job in enumerate(jobs)
        ]
        index = {f.key: k for k, f in enumerate(futures)}
        results: list[Any] = [None] * len(jobs)
        try:
            for done, future in enumerate(self._dist.as_completed(futures), 1):
                k = index[future.key]
                worker, results[k] = future.result()  # as_completed yields each once
                now = set(self.workers())
                with self._lock:
                    self._tally.lost |= seen - now
                    self._tally.load.setdefault(worker, WorkerLoad()).done += 1
                seen |= now
                if progress:
                    progress(done, len(jobs))
        finally:
            self.client.cancel([f for f in futures if not f.done()])
        return results

    def load(self) -> dict[str, WorkerLoad]:
        processing = self.client.processing()
        with self._lock:
            out = {w: WorkerLoad(x.done, 0) for w, x in self._tally.load.items()}
        for worker, keys in processing.items():
            running = sum(1 for key in keys if str(key).startswith("replay-"))
            out.setdefault(worker, WorkerLoad()).running = running
        return dict(sorted(out.items()))

    @property
    def lost_workers(self) -> int:
        """Workers that left the cluster during the last :meth:`map` (their jobs ran
        again elsewhere)."""
        with self._lock:
            return len(self._tally.lost)

    def close(self) -> None:
        if self.client is not None:
            self.client.close()
            self.client = None
        if self._cluster is not None:
            self._cluster.close()
            self._cluster = None

    def __enter__(self) -> DaskExecutor:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def make_executor(name: str, *, workers: int = 1, scheduler: str | None = None) -> Executor:
    """The executor ``--executor NAME`` names.

    Parameters
    ----------
    name : {"local", "dask"}
    workers : int
        Local processes (both executors; the dask executor ignores it with a scheduler).
    scheduler : str, optional
        A dask scheduler's address; only with ``dask``.

    Raises
    ------
    ValueError
        For an unknown name, or a scheduler given with ``local``.
    ExecutorError
        When the dask cluster cannot be started or reached.

    Examples
    --------
    >>> make_executor("local", workers=1).name
    'local, in this process'
    """
    if name not in EXECUTORS:
        raise ValueError(f"unknown executor {name!r}; choose one of {', '.join(EXECUTORS)}")
    if name == "local":
        if scheduler is not None:
            raise ValueError("--scheduler names a dask scheduler: use it with --executor dask")
        return LocalExecutor(workers)
    return DaskExecutor(scheduler, workers=workers)


def describe_load(load: dict[str, WorkerLoad]) -> str:
    """Each worker's jobs as ``done+running``, or ``""`` when not tracked.

    Examples
    --------
    >>> describe_load({"tcp://a": WorkerLoad(4, 1), "tcp://b": WorkerLoad(3, 0)})
    '2 workers (done+running): 4+1 3+0'
    """
    if not load:
        return ""
    shares = " ".join(f"{x.done}+{x.running}" for x in load.values())
    return f"{len(load)} worker{'s' if len(load) != 1 else ''} (done+running): {shares}"


def records_digest(records: Iterable[CallRecord]) -> str:
    """A SHA-256 over every record's fields but the measured ones (``cpu_ms``).

    Two runs of the same sweep give the same digest whichever executor ran them.

    Examples
    --------
    >>> from foldbench.records import CallRecord
    >>> a = CallRecord("t", "p", 1000, 0, 1, 10, False, False, (), None, 0, 0, 1.0, 0, 10.0)
    >>> b = CallRecord("t", "p", 1000, 0, 1, 10, False, False, (), None, 0, 0, 9.0, 0, 10.0)
    >>> records_digest([a]) == records_digest([b])
    True
    """
    sha = hashlib.sha256()
    for record in records:
        fields = {k: v for k, v in asdict(record).items() if k not in MEASURED_FIELDS}
        sha.update(json.dumps(fields, sort_keys=True, default=list).encode())
        sha.update(b"\n")
    return sha.hexdigest()
