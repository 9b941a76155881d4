"""Shared fixtures for the benchmarks: seeded, cached instances."""

from __future__ import annotations

import hashlib
import json
import os
import random
import shutil
import tempfile
import time
from collections.abc import Callable
from functools import cache
from pathlib import Path

import numpy as np

from context_manager import ContextManager
from context_manager.errors import OverBudgetError
from context_manager.messages import ContentBlock, Message, TextBlock, ToolResultBlock, ToolUseBlock
from context_manager.strategies.autobiographical import AutobiographicalStrategy
from context_manager.summarizer import ExtractiveSummarizer
from foldbench.peers.ours import FoldingPolicy
from folding import FoldProblem
from folding.testing import chronicle, random_problem

SEED = 0xDEADC0DE


@cache
def big_chronicle(n_leaves: int) -> FoldProblem:
    """A long history: 25-leaf chunks merged 6 at a time (75k leaves -> ~3,600 summaries)."""
    return chronicle(
        n_leaves, leaf_tokens=40, chunk=25, merge=6, recall_tokens=300, total=2_000_000, tail=200
    )


def mixed_levels(n_leaves: int) -> np.ndarray:
    """A realistic frontier shape: oldest at L4, then L2, then L1, newest third raw."""
    levels = np.zeros(n_leaves, dtype=np.int64)
    l4, l2, l1 = (n_leaves // 10) // 5400 * 5400, n_leaves // 3, 2 * n_leaves // 3
    l2, l1 = l2 // 150 * 150, l1 // 25 * 25
    levels[:l4] = 4
    levels[l4:l2] = 2
    levels[l2:l1] = 1
    return levels


# Sizes of the solver benchmarks: 15k leaves ~ 800 L1 chunks and 2.8M tokens (a
# Mythos-sized store); 75k leaves ~ 3,300 summaries (a Sill-sized store).
SHAPES = {
    1_000: {"chunk_range": (12, 26), "mean_tokens": 190},
    15_000: {"chunk_range": (12, 26), "mean_tokens": 190},
    75_000: {"chunk_range": (20, 36), "mean_tokens": 190},
}


@cache
def store(n_leaves: int, budget: int = 200_000) -> FoldProblem:
    """A seeded conversation-shaped problem with a 200k wall and a 30-leaf raw tail."""
    shape = SHAPES[n_leaves]
    problem = random_problem(
        SEED % 10_000 + n_leaves,
        n_leaves=n_leaves,
        mean_tokens=shape["mean_tokens"],
        chunk_range=shape["chunk_range"],
        merge=6,
        recall_tokens=600,
        head=2,
        tail=30,
        budget_ratio=1.0,
    )
    data = problem.model_dump(mode="json")
    data["budget"] = {"total": budget}
    return FoldProblem.model_validate(data)


def warm(problem: FoldProblem, frontier: dict[str, int], budget: int) -> FoldProblem:
    """``problem`` carrying ``frontier`` under a new wall."""
    data = problem.model_dump(mode="json")
    data["previous"] = frontier
    data["budget"] = {"total": budget}
    return FoldProblem.model_validate(data)


# ------------------------------------------------------------------ the agent loop
# What a running agent does on every model call: append one message, one tick (the
# strategy may write one memory), compile at a 32k budget. A store of ``n`` messages is
# fast-forwarded to that point first; ``benchmarks/scale.py`` and ``bench_scale`` share it.

LOOP_BUDGET = 32_000
LOOP_TOOLS = [
    {"name": "lookup", "description": "Look a record up.", "input_schema": {"type": "object"}}
]
_WORDS = [
    "flight",
    "booking",
    "passenger",
    "seat",
    "upgrade",
    "refund",
    "policy",
    "airport",
    "delay",
    "baggage",
    "reservation",
    "cabin",
    "economy",
    "business",
    "change",
    "cancel",
    "status",
    "insurance",
    "payment",
    "certificate",
    "voucher",
    "itinerary",
    "layover",
    "origin",
    "destination",
    "date",
    "nonstop",
]
_EPOCH = 1_700_000_000.0
_SOURCES = ("context_manager", "folding", "solvers")


def loop_content(i: int) -> tuple[str, str | list[ContentBlock]]:
    """Message ``i`` of a deterministic agent loop (participant, content): a user turn, a
    tool call, its result, an answer, over and over; 20 to 90 words each."""
    rng = random.Random(i)
    text = " ".join(rng.choice(_WORDS) for _ in range(rng.randint(20, 90)))
    step = i % 4
    if step == 0:
        return "User", text
    if step == 1:
        return "Claude", [
            TextBlock(text=text[:80]),
            ToolUseBlock(id=f"t{i}", name="lookup", input={"q": text[:40], "n": i}),
        ]
    if step == 2:
        return "User", [ToolResultBlock(tool_use_id=f"t{i - 1}", content=text)]
    return "Claude", text


def loop_message(i: int) -> Message:
    """Message ``i`` of the agent loop as a :class:`Message` (what a peer is handed)."""
    participant, content = loop_content(i)
    blocks = (TextBlock(text=content),) if isinstance(content, str) else tuple(content)
    return Message(participant=participant, content=blocks, timestamp=_EPOCH + i)


def loop_strategy(method: str) -> AutobiographicalStrategy:
    """The autobiographical strategy with ``method``, sized for the loop's budget as the
    policy benchmark sizes it."""
    return AutobiographicalStrategy(**FoldingPolicy.config_for(LOOP_BUDGET, method))


def open_loop(path: str | Path, method: str) -> ContextManager:
    """A manager on the store at ``path`` solving with ``method``."""
    cm = ContextManager.open(
        path=str(path), strategy=loop_strategy(method), summarizer=ExtractiveSummarizer()
    )
    cm.set_tool_definitions(LOOP_TOOLS)
    return cm


def loop_compile(cm: ContextManager) -> None:
    """Compile at the loop's budget; on a refusal let the strategy write what the solver
    asked for and compile again, as a host does."""
    try:
        cm.compile(max_tokens=LOOP_BUDGET, reserve_for_response=0)
    except OverBudgetError:
        cm.drain(max_ticks=10_000)
        cm.compile(max_tokens=LOOP_BUDGET, reserve_for_response=0)


def loop_call(cm: ContextManager, i: int) -> None:
    """One model call of the loop: append message ``i``, one tick, compile."""
    participant, content = loop_content(i)
    cm.add_message(participant, content, timestamp=_EPOCH + i)
    cm.tick()
    loop_compile(cm)


def fast_forward(
    path: str | Path,
    n: int,
    method: str,
    every: int = 40,
    progress: Callable[[int, float], None] | None = None,
) -> float:
    """Bring the store at ``path`` to ``n`` messages of the loop; returns the seconds.

    Every message is appended; every ``every`` messages (and at the end) the strategy
    writes all the memories it has work for and one compile records the frontier and
    the solver's demands, so the store holds what the strategy wrote, with ``every``
    calls folded into one. A store already holding some messages is extended.
    """
    started = time.perf_counter()
    with open_loop(path, method) as cm:
        for i in range(len(cm.get_messages()), n):
            participant, content = loop_content(i)
            cm.add_message(participant, content, timestamp=_EPOCH + i)
            if (i + 1) % every == 0 or i == n - 1:
                cm.drain(max_ticks=100_000)
                loop_compile(cm)
            if progress is not None and (i + 1) % 10_000 == 0:
                progress(i + 1, time.perf_counter() - started)
    return time.perf_counter() - started


@cache
def source_key() -> str:
    """A digest of the library's sources: stores built by other code are not reused."""
    root = Path(__file__).resolve().parents[2]
    digest = hashlib.sha1()
    for package in _SOURCES:
        for file in sorted((root / package).rglob("*.py")):
            digest.update(str(file.relative_to(root)).encode())
            digest.update(file.read_bytes())
    return digest.hexdigest()[:12]


def default_cache() -> Path:
    """Where built stores are kept between runs (``CTXFOLD_SCALE_CACHE`` or the temp dir)."""
    env = os.environ.get("CTXFOLD_SCALE_CACHE")
    return Path(env) if env else Path(tempfile.gettempdir()) / "ctxfold-scale"


def loop_store(
    n: int,
    method: str = "kv-stable",
    every: int = 40,
    cache_dir: Path | None = None,
    progress: Callable[[int, float], None] | None = None,
) -> tuple[Path, float | None]:
    """The fast-forwarded store of ``n`` messages built with ``method``, built when missing.

    Stores are kept under ``cache_dir`` (:func:`default_cache`) in a folder named by
    :func:`source_key`, or by ``CTXFOLD_SCALE_KEY`` when set (to keep using stores built
    by code whose store format is known not to have changed).

    Returns its path (never to be written: measure on :func:`work_copy`) and the seconds
    its build took (None when it was built by an earlier run and its record is lost).
    """
    folder = (cache_dir or default_cache()) / (os.environ.get("CTXFOLD_SCALE_KEY") or source_key())
    folder.mkdir(parents=True, exist_ok=True)
    base = folder / f"{method}-{n}-every{every}.db"
    record = base.with_suffix(".json")
    if not base.exists():
        # an interrupted build is resumed: the partial store and the seconds it took so far
        partial = base.with_suffix(".partial")
        so_far = partial.with_suffix(".partial.json")
        before = float(json.loads(so_far.read_text())["build_s"]) if so_far.exists() else 0.0

        def note(done: int, seconds: float) -> None:
            so_far.write_text(json.dumps({"build_s": before + seconds, "messages": done}))
            if progress is not None:
                progress(done, before + seconds)

        seconds = before + fast_forward(partial, n, method, every, note)
        for built, kept in zip(_store_files(partial), _store_files(base), strict=True):
            if built.exists():
                built.rename(kept)
        record.write_text(json.dumps({"build_s": seconds, "every": every}))
        so_far.unlink(missing_ok=True)
    if record.exists():
        return base, float(json.loads(record.read_text())["build_s"])
    return base, None


def _store_files(path: Path) -> list[Path]:
    return [Path(f"{path}{suffix}") for suffix in ("", "-wal", "-shm", "-journal")]


def work_copy(base: Path, folder: Path | None = None) -> Path:
    """A fresh copy of the store ``base`` to measure on (the calls append to it)."""
    target = (folder or base.parent) / f"work-{os.getpid()}-{base.name}"
    for stale in _store_files(target):
        stale.unlink(missing_ok=True)
    shutil.copyfile(base, target)
    return target


def drop_store(path: Path) -> None:
    """Delete a store file and its journals."""
    for file in _store_files(path):
        file.unlink(missing_ok=True)
