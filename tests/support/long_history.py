"""The request machine on an agent with a long past (:class:`LongHistory`), where compiles
are windowed, and the store it starts from (:func:`long_past_store`): run by
``tests/context_manager/strategies/test_incremental.py`` and, long, by ``tests/soak.py``."""

from __future__ import annotations

import contextlib
import shutil
import tempfile
from pathlib import Path

from hypothesis import strategies as st
from hypothesis.stateful import initialize

import solvers
from context_manager import ContextManager, OverBudgetError
from tests.support.request_machine import COUNTER as MACHINE_COUNTER
from tests.support.request_machine import FaultySummarizer, RequestMachine, machine_strategy

WINDOWED = [m for m in solvers.names() if solvers.capabilities(m).windowed]
_TEMPLATES: dict[str, Path] = {}


def long_past_store(method: str) -> Path:
    """A store of an agent with a long past (900 messages, every memory written, a
    frontier committed every 40 messages), built once per solver and copied per run."""
    if method not in _TEMPLATES:
        path = Path(tempfile.mkdtemp()) / "long.db"
        cm = ContextManager.open(
            path=path,
            strategy=machine_strategy(method),
            summarizer=FaultySummarizer(),
            counter=MACHINE_COUNTER,
        )
        cm.set_tool_definitions([{"name": "bash"}])
        for i in range(900):
            cm.add_message("User" if i % 2 == 0 else "Claude", f"turn {i} " + "word " * (i % 17))
            if (i + 1) % 40 == 0:
                cm.drain()
                with contextlib.suppress(OverBudgetError):
                    cm.compile(max_tokens=1200, reserve_for_response=0)
        cm.close()
        _TEMPLATES[method] = path
    return _TEMPLATES[method]


class LongHistory(RequestMachine):
    """The request machine on an agent with a long past, where compiles are windowed:
    every live compile is checked against a strategy that just read the store (the
    machine's ``_check_from_scratch``), besides every invariant of the request edge."""

    @initialize(method=st.sampled_from(WINDOWED))
    def open(self, method: str) -> None:  # type: ignore[override]
        self.method = method
        shutil.copyfile(long_past_store(method), self.path)
        self._open(first=True)
