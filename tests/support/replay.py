"""A failing soak case replayed as hypothesis printed it (:func:`replay`): run by
``tests/context_manager/manager/test_soak_findings.py`` over ``tests/soak_findings/``
and by ``python tests/soak_replay.py FILE``."""

from __future__ import annotations

import ast
import re
from typing import Any

from tests.support.long_history import LongHistory
from tests.support.request_machine import RequestMachine


class _Draws:
    """Stands in for hypothesis's ``data``: hands out the recorded draws in order."""

    def __init__(self, machine: RequestMachine, pending: list[tuple[str, Any]]) -> None:
        self.machine, self.pending = machine, pending

    def draw(self, _strategy: object) -> Any:
        kind, value = self.pending.pop(0)
        if kind == "memory":
            return next(s for s in self.machine.memories() if s.id == value)
        return value


def replay(text: str) -> int:
    """Run the case in ``text``; returns the steps taken (raises where it fails)."""
    lines = text.splitlines()
    machine: RequestMachine | None = None
    pending: list[tuple[str, Any]] = []
    steps, i = 0, 0
    while i < len(lines):
        line = lines[i]
        if line.startswith("Draw"):
            value = line.split(": ", 1)[1]
            if value.startswith("SummaryEntry("):
                while value.count("(") != value.count(")"):
                    i += 1
                    value += lines[i]
                found = re.search(r"\bid='([^']+)'", value)
                assert found is not None, value
                pending.append(("memory", found.group(1)))
            else:
                pending.append(("value", ast.literal_eval(value)))
        elif line.startswith("state.") and not line.startswith("state.teardown"):
            matched = re.match(r"state\.(\w+)\((.*)\)$", line)
            assert matched is not None, line
            name, args = matched.groups()
            kwargs = ast.literal_eval(
                "{"
                + re.sub(r"(\w+)=", r"'\1': ", args.replace("data=data(...)", "data=None"))
                + "}"
            )
            if machine is None:  # the first rule opens the machine the case ran
                machine = LongHistory() if "LongHistory" in text else RequestMachine()
            if "data" in kwargs:
                kwargs["data"] = _Draws(machine, pending)
            getattr(machine, name)(**kwargs)
            steps += 1
            if machine.cm is not None:
                machine.records_agree_with_messages()
                machine.the_store_keeps_thinking()
                machine.the_window_is_what_was_presented()
        i += 1
    if machine is not None:
        machine.teardown()
    return steps
