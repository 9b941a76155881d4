"""Hostile and valid arguments for every public method of :class:`ContextManager`: the
strategies and the call harness of the argument fuzz (``test_arguments.py``).

Each example builds a small manager (in memory, :class:`CharsCounter`, an
:class:`ExtractiveSummarizer` folding a few messages), draws the arguments of one
method (each parameter left out, valid, or hostile: None, booleans, NaN, infinities,
huge and negative integers, floats, strings, bytes, and lists and dicts of these,
nested), calls it, and hands back the exception it raised, if any.
"""

from __future__ import annotations

import atexit
import inspect
import math
import shutil
import tempfile
import warnings
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from hypothesis import strategies as st

from context_manager import (
    CharsCounter,
    ContextManager,
    ExtractiveSummarizer,
    Injection,
    NotedRow,
    Overhead,
    PassthroughStrategy,
    RequestIdentity,
    TextBlock,
    ThinkingBinding,
)
from context_manager.strategies.autobiographical import AutobiographicalStrategy

COUNTER = CharsCounter()
SCRATCH = Path(tempfile.mkdtemp(prefix="cm-arguments-"))
"""Where ``derive`` may write (a fresh name for each valid path drawn); removed when
the process ends."""
atexit.register(shutil.rmtree, SCRATCH, ignore_errors=True)


@dataclass(frozen=True)
class Id:
    """The ``k``-th message of the manager under test (resolved once it is built)."""

    k: int


@dataclass(frozen=True)
class FreshPath:
    """A new file name in :data:`SCRATCH`, optionally built from a drawn string."""

    stem: str


OMIT = object()
"""A parameter left at its default."""

# ------------------------------------------------------------------ hostile values
ATOMS = st.one_of(
    st.none(),
    st.booleans(),
    st.sampled_from([math.nan, math.inf, -math.inf, -0.0, 0.5, 1000.5, 1e308]),
    st.sampled_from([0, -1, 1, 2, 300, 2**31, 2**40 + 1, 2**63, 2**64, 10**30, -(10**30)]),
    st.integers(),
    st.floats(),
    st.text(max_size=12),
    st.sampled_from(["", " ", "\x00", "1000", "nan", "\ud800", "a" * 400]),
    st.binary(max_size=8),
)
HOSTILE = st.recursive(
    ATOMS,
    lambda inner: st.one_of(
        st.lists(inner, max_size=3),
        st.tuples(inner),
        st.dictionaries(st.text(max_size=6), inner, max_size=3),
        st.dictionaries(st.integers(), inner, max_size=2),
        st.sets(st.integers(), max_size=2),
    ),
    max_leaves=6,
)

# -------------------------------------------------------------------- valid values
IDS = st.builds(Id, st.integers(0, 9))
SMALL_TEXT = st.text(
    st.characters(codec="utf-8", exclude_categories=["Cs"]), min_size=1, max_size=20
)
TIMES = st.floats(0, 2e9, allow_nan=False)
VALID: dict[str, st.SearchStrategy[Any]] = {
    "participant": st.sampled_from(["User", "Claude", "Tool", "Other"]),
    "content": st.one_of(
        SMALL_TEXT,
        st.lists(st.builds(TextBlock, text=SMALL_TEXT), min_size=1, max_size=2),
        st.just([{"type": "text", "text": "as a mapping"}]),
    ),
    "metadata": st.dictionaries(st.text(max_size=5), st.integers(-5, 5), max_size=2),
    "hold": st.one_of(st.booleans(), st.floats(0.5, 100)),
    "timestamp": TIMES,
    "message_id": IDS,
    "caused_by": IDS,
    "listener": st.just(lambda message: None),
    "topology_policy": st.sampled_from(["reject", "repair", "ignore"]),
    "audit_only": st.booleans(),
    "first_id": IDS,
    "last_id": IDS,
    "relation": st.sampled_from(["copy", "derived", "referenced"]),
    "from_time": TIMES,
    "to_time": TIMES,
    "time": TIMES,
    "text": SMALL_TEXT,
    "limit": st.integers(1, 20),
    "reverse": st.booleans(),
    "dry_run": st.booleans(),
    "include_merged": st.booleans(),
    "locked": st.booleans(),
    "sequence": st.integers(0, 40),
    "at_sequence": st.integers(0, 40),
    "after_sequence": st.integers(0, 40),
    "max_tokens": st.integers(200, 100_000),
    "reserve_for_response": st.integers(0, 150),
    "injections": st.lists(
        st.builds(
            Injection.text,
            st.sampled_from(["mem", "notes"]),
            st.sampled_from(["system", "before_user", "after_user"]),
            SMALL_TEXT,
        ),
        max_size=2,
    ),
    "overhead": st.one_of(st.none(), st.builds(Overhead, tokens=st.integers(0, 50))),
    "catch_up": st.one_of(st.booleans(), st.floats(0.5, 5)),
    "thinking_binding": st.one_of(st.none(), st.just(ThinkingBinding(binds=False))),
    "identity": st.one_of(st.none(), st.just("claude-test")),
    "rows": st.lists(st.one_of(IDS, st.just(NotedRow(unstored=True))), max_size=3),
    "compile_id": SMALL_TEXT,
    "usage": st.one_of(st.none(), st.fixed_dictionaries({"input_tokens": st.integers(0, 50)})),
    "overrides": st.one_of(
        st.none(), st.fixed_dictionaries({"recent_window_tokens": st.integers(0, 400)})
    ),
    "transition_text": SMALL_TEXT,
    "max_ticks": st.integers(0, 4),
    "timeout": st.floats(0.01, 5),
    "tools": st.lists(st.fixed_dictionaries({"name": st.sampled_from(["bash", "grep"])})),
    "ids": st.lists(IDS, max_size=3),
    "name": st.one_of(st.none(), st.just("main"), st.text("abcdef", min_size=1, max_size=6)),
    "level": st.one_of(st.none(), st.integers(0, 3)),
    "max_level": st.one_of(st.none(), st.integers(0, 3)),
    "pin_id": st.sampled_from(["pin-1", "pin-2"]),
    "regex": st.sampled_from(["message", "m.+e", "[0-9]"]),
    "levels": st.lists(st.integers(1, 3), max_size=2),
    "summary_id": st.sampled_from(["L1-0", "L2-0"]),
    "query": SMALL_TEXT,
    "max_chars": st.integers(300, 5_000),
    "tool_input": st.one_of(
        st.fixed_dictionaries({"grep": st.sampled_from(["message", "topic 1"])}),
        st.just({"memory_id": "L1-0"}),
    ),
    "path": st.builds(FreshPath, st.just("")),
    "strategy": st.builds(PassthroughStrategy),
    "source": SMALL_TEXT,
    "external_id": SMALL_TEXT,
    "store": st.just(OMIT),
    "url": st.just(OMIT),  # a database server's URL: open() is given a path (see SPECIFIC)
    "agent": st.just(OMIT),
    "summarizer": st.builds(ExtractiveSummarizer),
    "counter": st.builds(CharsCounter),
    "namespace": st.text("abc", min_size=1, max_size=4),
    "isolate": st.booleans(),
    "auto_tick": st.just(False),
    "auxiliary_views": st.just(()),
    "window_tokens": st.integers(2_000, 100_000),
    "memory_model": SMALL_TEXT,
    "model": st.sampled_from(["gpt-4o", "gpt-4", "claude-sonnet-4"]),
    "clock": st.just(lambda: 0.0),
    "channel_id": st.sampled_from(["ops", "dev"]),
    "offset": st.integers(0, 10),
    "tail_tokens": st.one_of(st.none(), st.integers(0, 400)),
    "transition_pace_tokens": st.one_of(st.none(), st.integers(0, 2_000)),
    "prepared_window_tokens": st.one_of(st.none(), st.integers(0, 2_000)),
}


SPECIFIC: dict[tuple[str, str], st.SearchStrategy[Any]] = {
    ("note_request_sent", "identity"): st.just(RequestIdentity.of("claude-test")),
    ("open", "path"): st.just(":memory:"),  # an open of a drawn path could write anywhere
}
"""Valid values of a parameter of one method (other methods' parameters of the name
take :data:`VALID`'s)."""


def folding() -> AutobiographicalStrategy:
    return AutobiographicalStrategy(
        compression_model="extractive",
        target_chunk_tokens=40,
        recent_window_tokens=60,
        merge_threshold=3,
        summary_target_tokens=12,
        memory_values_tokens=20,
        l1_holdback_chunks=0,
        min_chunk_chars_for_llm=0,
    )


def build() -> tuple[ContextManager, list[str]]:
    """A small folding manager: eight messages, a memory over the oldest, one pin."""
    cm = ContextManager.open(
        path=":memory:",
        strategy=folding(),
        summarizer=ExtractiveSummarizer(target_tokens=12),
        counter=COUNTER,
    )
    ids = [
        cm.add_message("User" if i % 2 == 0 else "Claude", f"message {i} about topic {i % 3}. " * 3)
        for i in range(8)
    ]
    cm.drain()
    cm.pin_range(ids[5], ids[6])
    return cm, ids


def methods() -> list[str]:
    """The public methods of ContextManager that take arguments (``open`` included)."""
    out = []
    for name, member in inspect.getmembers(ContextManager):
        if name.startswith("_") or isinstance(
            inspect.getattr_static(ContextManager, name), property
        ):
            continue
        if not callable(member):
            continue
        if len(parameters(name)) > 0:
            out.append(name)
    return sorted(out)


def parameters(method: str) -> list[inspect.Parameter]:
    signature = inspect.signature(getattr(ContextManager, method))
    return [p for p in signature.parameters.values() if p.name not in ("self", "cls")]


def valid(method: str, param: inspect.Parameter) -> st.SearchStrategy[Any]:
    """A valid value, or the default left in place."""
    if (method, param.name) in SPECIFIC:
        found = SPECIFIC[method, param.name]
    elif method == "derive" and param.name == "path":
        found = VALID["path"]
    else:
        found = VALID[param.name]
    if param.default is inspect.Parameter.empty:
        return found
    return st.one_of(st.just(OMIT), found)


def hostile(method: str, param: inspect.Parameter) -> st.SearchStrategy[Any]:
    """A hostile value (``open`` is always given an in-memory path: a drawn path could
    be written anywhere; ``derive`` writes into :data:`SCRATCH` only)."""
    if (method, param.name) == ("open", "path"):
        return SPECIFIC["open", "path"]
    if (method, param.name) == ("derive", "path"):
        return HOSTILE.map(lambda v: FreshPath(v) if isinstance(v, str) else v)
    return HOSTILE


def calls(method: str) -> st.SearchStrategy[dict[str, Any]]:
    """Arguments of ``method``: each parameter valid or hostile, or every parameter
    valid but one (so that the checks of each are reached with the others passing)."""
    params = parameters(method)
    mixed = st.fixed_dictionaries(
        {p.name: st.one_of(valid(method, p), hostile(method, p)) for p in params}
    )

    def one_hostile(k: int) -> st.SearchStrategy[dict[str, Any]]:
        return st.fixed_dictionaries(
            {
                p.name: hostile(method, p) if i == k else valid(method, p)
                for i, p in enumerate(params)
            }
        )

    return st.one_of(mixed, st.integers(0, len(params) - 1).flatmap(one_hostile))


def resolve(value: Any, ids: list[str]) -> Any:
    """The drawn value with each :class:`Id` and :class:`FreshPath` made concrete."""
    if isinstance(value, Id):
        return ids[value.k % len(ids)]
    if isinstance(value, FreshPath):
        stem = value.stem.replace("/", "_").replace("\\", "_")
        return str(Path(tempfile.mkdtemp(dir=SCRATCH)) / f"{stem}x.db")
    if isinstance(value, list):
        return [resolve(v, ids) for v in value]
    if isinstance(value, tuple):
        return tuple(resolve(v, ids) for v in value)
    return value


def call(method: str, drawn: dict[str, Any]) -> BaseException | None:
    """Call ``method`` on a fresh manager with the drawn arguments; the exception it
    raised, or None."""
    cm, ids = build()
    kwargs = {k: resolve(v, ids) for k, v in drawn.items() if v is not OMIT}
    target: Callable[..., Any] = getattr(ContextManager if method == "open" else cm, method)
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            result = target(**kwargs)
            if isinstance(result, ContextManager):
                result.close()
    except Exception as exc:
        return exc
    finally:
        cm.close()
    return None
