"""The agent loop on long histories, by history length (1k, 10k and 100k messages).

One call is what a running agent does before each model call: append one message,
one tick, compile at a 32k budget (``common.loop_call``). The stores are the ones
``benchmarks/scale.py`` measures: the loop's messages fast-forwarded with kv-stable,
a compile every 40 messages, the memories written by the extractive summariser. They
are built once and kept between runs (``common.loop_store``, keyed by a digest of the
library's sources), so only the first run after a change of the library pays for the
build (for 100k messages, as long as the build takes). Every solver opens the same
store: its first compile, in ``setup``, carries kv-stable's frontier into its own.

* ``AgentLoop``: per-call time, a per-call median over a run of calls, and the peak
  memory of a process that opened the store and made a call, per solver.
* ``StoreOpen``: opening the store to the first request, its peak memory and the
  store's size per message.
"""

from __future__ import annotations

import os
import shutil
import statistics
import tempfile
import time
from pathlib import Path

import solvers

from .common import drop_store, loop_call, loop_compile, loop_store, open_loop, work_copy

SIZES = [
    int(n) for n in os.environ.get("CTXFOLD_BENCH_SCALE_SIZES", "1000,10000,100000").split(",")
]
"""History lengths; ``CTXFOLD_BENCH_SCALE_SIZES`` (comma-separated) narrows them."""
SOLVERS = [
    m
    for m in solvers.names()
    if not solvers.capabilities(m).oracle and not solvers.capabilities(m).searches_slowly
]
MEDIAN_CALLS = 21
"""Calls behind ``track_call_p50`` (fewer, but at least 3, when they pass 60 s)."""


def _stores() -> dict[int, str]:
    return {n: str(loop_store(n)[0]) for n in SIZES}


class AgentLoop:
    params = [SOLVERS, SIZES]
    param_names = ["solver", "messages"]
    timeout = 3600
    number = 5
    repeat = (1, 5, 120.0)
    warmup_time = 0.0

    def setup_cache(self) -> dict[int, str]:
        return _stores()

    def setup(self, stores: dict[int, str], method: str, n: int) -> None:
        self.work = work_copy(Path(stores[n]), Path(tempfile.mkdtemp()))
        self.cm = open_loop(self.work, method)
        loop_compile(self.cm)
        self.next = n

    def teardown(self, stores: dict[int, str], method: str, n: int) -> None:
        self.cm.close()
        drop_store(self.work)
        shutil.rmtree(self.work.parent, ignore_errors=True)

    def _call(self) -> None:
        loop_call(self.cm, self.next)
        self.next += 1

    def time_call(self, stores: dict[int, str], method: str, n: int) -> None:
        self._call()

    def peakmem_call(self, stores: dict[int, str], method: str, n: int) -> None:
        self._call()

    def track_call_p50(self, stores: dict[int, str], method: str, n: int) -> float:
        times: list[float] = []
        started = time.perf_counter()
        while len(times) < MEDIAN_CALLS and (len(times) < 3 or time.perf_counter() - started < 60):
            t = time.perf_counter()
            self._call()
            times.append((time.perf_counter() - t) * 1000)
        return statistics.median(times)

    track_call_p50.unit = "ms"  # type: ignore[attr-defined]


class StoreOpen:
    params = [SIZES]
    param_names = ["messages"]
    timeout = 3600
    number = 1
    repeat = (1, 3, 120.0)
    warmup_time = 0.0

    def setup_cache(self) -> dict[int, str]:
        return _stores()

    def setup(self, stores: dict[int, str], n: int) -> None:
        self.base = Path(stores[n])
        self.work = work_copy(self.base, Path(tempfile.mkdtemp()))

    def teardown(self, stores: dict[int, str], n: int) -> None:
        drop_store(self.work)
        shutil.rmtree(self.work.parent, ignore_errors=True)

    def _open(self) -> None:
        with open_loop(self.work, "kv-stable") as cm:
            loop_compile(cm)

    def time_open_to_first_request(self, stores: dict[int, str], n: int) -> None:
        self._open()

    def peakmem_open_to_first_request(self, stores: dict[int, str], n: int) -> None:
        self._open()

    def track_store_bytes_per_message(self, stores: dict[int, str], n: int) -> float:
        return self.base.stat().st_size / n

    track_store_bytes_per_message.unit = "bytes"  # type: ignore[attr-defined]
