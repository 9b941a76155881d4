"""Requests to the four assembly functions that cover their paths (counting, pruning,
compacting, assembling with and without a summary), shared by the tests of every
transport that answers them: in process, over HTTP and on an iii engine."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from pydantic import BaseModel

from context_manager.assembly import assemble, compact, count_tokens, prune
from tests.support.assembly_fixtures import custom, inline_model, tool_turn, user

__all__ = ["IN_PROCESS", "LONG", "REPLY", "SCENARIOS", "SMALL", "VERBOSE"]

REPLY = "SUMMARY TEXT"
"""What the fake summariser of these scenarios answers."""

SMALL = inline_model(10_000, 1_000)
LONG = [m for n in range(20) for m in tool_turn(n, "data " * 300)]
VERBOSE = [m for n in range(12) for m in tool_turn(n, "line of output\n" * 400)]

SCENARIOS: list[tuple[str, dict[str, Any]]] = [
    ("count-tokens", {"messages": [user("hello", ts=1001)], "model": {"id": "any"}}),
    ("count-tokens", {"messages": LONG, "model": SMALL, "system_prompt": "Be brief."}),
    ("prune", {"messages": VERBOSE, "options": {"protect_recent_tokens": 100}}),
    ("prune", {"messages": LONG}),
    ("compact", {"messages": LONG, "model": SMALL, "options": {"tail_turns": 2}}),
    ("compact", {"messages": [user("hi", ts=1)], "model": SMALL}),
    ("assemble", {"messages": [*tool_turn(0, "hello"), custom("note")], "model": SMALL}),
    (
        "assemble",
        {
            "messages": LONG,
            "model": SMALL,
            "system_prompt": "You are a coder.",
            "options": {"previous_summary": "OLD", "lease_key": "conv-1"},
        },
    ),
    ("assemble", {"messages": LONG, "model": SMALL, "options": {"preview_only": True}}),
    ("assemble", {"messages": VERBOSE, "model": SMALL, "options": {"allow_compaction": False}}),
]
"""(function name, request body)."""

IN_PROCESS: dict[str, Callable[..., BaseModel]] = {
    "count-tokens": count_tokens,
    "prune": prune,
    "compact": compact,
    "assemble": assemble,
}
"""Function name -> the function in process."""
