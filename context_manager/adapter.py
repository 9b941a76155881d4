"""The thin adapter: strategy state -> FoldProblem -> solver -> frontier and produce requests.

It holds no solver logic: it states the problem (leaves with their token
counts and zones, summaries priced as their recall pairs, pins, locks, the
previous frontier, the budget), calls :func:`solvers.solve`, and renders the
answer through :func:`folding.render`, the one accountant.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import solvers
from folding import Budget, FoldProblem, Leaf, Pin, ProduceRequest, Status, Summary, render

from .errors import OverBudgetError
from .strategies.base import RequestBudget, StoredMessage, StrategyContext

if TYPE_CHECKING:
    from .strategies.autobiographical import AutobiographicalStrategy, _Windows
    from .strategies.autobiographical import Pin as PinRecord

__all__ = ["AdapterPlan", "build_problem", "solve_frontier"]


@dataclass
class AdapterPlan:
    """What a compile renders, or the error it must raise."""

    units: list[tuple[str, str]] = field(default_factory=list)
    frontier: dict[str, int] = field(default_factory=dict)
    produce: list[ProduceRequest] = field(default_factory=list)
    stats: dict[str, Any] = field(default_factory=dict)
    error: Exception | None = None
    members: dict[str, list[StoredMessage]] = field(default_factory=dict)
    """The messages behind each leaf id (one, or a whole chunk's)."""


@dataclass
class StatedProblem:
    """A fold problem and how its leaves map back to messages."""

    problem: FoldProblem
    members: dict[str, list[StoredMessage]]
    pins: list[PinRecord] = field(default_factory=list)
    """The strategy's pins stated in the problem, in the order of ``problem.pins``."""


def _chunk_leaves(
    strategy: AutobiographicalStrategy,
    ctx: StrategyContext,
    stored: Sequence[StoredMessage],
    position: dict[str, int],
    win: _Windows,
) -> dict[int, tuple[str, int]]:
    """Start index -> (chunk id, end index) of the chunks stated as one leaf each.

    The messages of one L1 always share a level in any frontier, so a chunk
    whose messages are all live, contiguous, in the middle and free of pins and
    locks is one leaf: the problem shrinks by the chunk size and means the same.
    """
    protected = strategy.protected_ids(ctx, stored)
    # chunk id -> (version, span): appends never move a closed chunk, so a span is
    # recomputed only after an edit, a removal or a branch switch (one entry per chunk)
    spans: dict[str, tuple[int, tuple[int, int] | None]]
    spans = strategy.model_cache.setdefault(("spans",), {})
    version = ctx.version()
    out: dict[int, tuple[str, int]] = {}
    for chunk in strategy.chunks:
        known = spans.get(chunk.id)
        if known is not None and known[0] == version:
            span = known[1]
        else:
            span = None
            first = position.get(chunk.source_ids[0])
            if first is not None and len(chunk.source_ids) > 1:
                end = first + len(chunk.source_ids)
                if [s.id for s in stored[first:end]] == chunk.source_ids:
                    span = (first, end)
            spans[chunk.id] = (version, span)
        if span is None or span[0] < win.head_end or span[1] > win.tail_start:
            continue
        if protected and protected.intersection(chunk.source_ids):
            continue
        out[span[0]] = (chunk.id, span[1])
    return out


def build_problem(
    strategy: AutobiographicalStrategy,
    ctx: StrategyContext,
    stored: Sequence[StoredMessage],
    win: _Windows,
    budget: RequestBudget,
) -> StatedProblem:
    """The fold problem of the current state.

    Leaves are messages, except that a chunk whose messages always share a level
    is one leaf (see :func:`_chunk_leaves`); its id is the chunk's id.
    """
    cfg = strategy.config
    position = strategy.positions(ctx, stored)
    cache = strategy.model_cache
    chunk_at = _chunk_leaves(strategy, ctx, stored, position, win)
    l1_leaf = {l1: cid for cid, l1 in _chunk_summaries(strategy, chunk_at)}
    leaves: list[Leaf] = []
    members: dict[str, list[StoredMessage]] = {}
    tokens = win.tokens
    i, n = 0, len(stored)
    while i < n:
        span = chunk_at.get(i)
        if span is not None:
            cid, end = span
            key: tuple[Any, ...] = (cid, end - i, sum(tokens[i:end]))
            leaf = cache.get(key)
            if leaf is None:
                leaf = cache[key] = Leaf(id=cid, tokens=key[2], zone="middle")
            group = list(stored[i:end])
            members[cid] = group
            leaves.append(leaf)
            i = end
            continue
        s = stored[i]
        zone = "head" if i < win.head_end else "tail" if i >= win.tail_start else "middle"
        key = (s.id, tokens[i], zone)
        leaf = cache.get(key)
        if leaf is None:
            leaf = cache[key] = Leaf(id=s.id, tokens=tokens[i], zone=zone)
        members[s.id] = [s]
        leaves.append(leaf)
        i += 1
    signature = (ctx.version(), len(strategy.summaries), tuple(l1_leaf.items()))
    kept = cache.get(("summaries",))
    if kept is not None and kept[0] == signature:
        summaries = kept[1]  # the same objects: the problem can extend the last one
    else:
        summaries = _summaries(strategy, ctx, position, l1_leaf)
        cache[("summaries",)] = (signature, summaries)
    pins, stated_pins = [], []
    for pin in strategy.pins:
        if pin.first in position and pin.last in position:  # a pin on removed messages lapses
            ids = tuple(x.id for x in stored[position[pin.first] : position[pin.last] + 1])
            pins.append(Pin(leaves=ids, level=pin.level, max_level=pin.max_level))
            stated_pins.append(pin)
    previous = {k: v for k, v in strategy.resolutions.items() if v and k in members}
    total = budget.input_tokens
    fields = {
        "leaves": tuple(leaves),
        "summaries": summaries,
        "pins": tuple(pins),
        "locks": tuple(x for x in sorted(strategy.locks) if x in members),
        "budget": Budget(total=total, target=math.floor(total * (1 - cfg.compression_slack_ratio))),
        "previous": previous if strategy.compiled else None,
    }
    last = cache.get(("problem",))
    problem = FoldProblem.model_validate(fields, context={"extends": last} if last else None)
    cache[("problem",)] = problem
    return StatedProblem(problem, members, stated_pins)


def _summaries(
    strategy: AutobiographicalStrategy,
    ctx: StrategyContext,
    position: dict[str, int],
    l1_leaf: dict[str, str],
) -> tuple[Summary, ...]:
    """The summaries that can be shown, priced as their recall pairs (cached objects)."""
    cache = strategy.model_cache
    included: set[str] = set()
    summaries: list[Summary] = []
    for entry in sorted(strategy.summaries.values(), key=lambda x: (x.level, x.id)):
        first, last = position.get(entry.first), position.get(entry.last)
        if first is None or last is None:
            continue  # a covered message is gone: this summary cannot be shown
        if last - first + 1 != strategy.span_size(entry):
            continue  # a message inside was removed (the log only appends)
        if entry.level > 1 and not all(c in included for c in entry.source_ids):
            continue
        children = (l1_leaf[entry.id],) if entry.id in l1_leaf else tuple(entry.source_ids)
        summary_key = (entry.id, entry.level, entry.content, children)
        summary = cache.get(summary_key)
        if summary is None:
            summary = cache[summary_key] = Summary(
                id=entry.id,
                level=entry.level,
                tokens=strategy.recall_tokens(ctx, entry),
                children=children,
            )
        summaries.append(summary)
        included.add(entry.id)
    return tuple(summaries)


def _chunk_summaries(
    strategy: AutobiographicalStrategy, chunk_at: dict[int, tuple[str, int]]
) -> list[tuple[str, str]]:
    """(chunk id, L1 id) of the chunks stated as one leaf that have their memory."""
    stated = {cid for cid, _ in chunk_at.values()}
    return [
        (c.id, c.summary_id)
        for c in strategy.chunks
        if c.id in stated and c.summary_id is not None and c.summary_id in strategy.summaries
    ]


def solve_frontier(
    strategy: AutobiographicalStrategy,
    ctx: StrategyContext,
    stored: Sequence[StoredMessage],
    win: _Windows,
    budget: RequestBudget,
) -> AdapterPlan:
    """Solve the current state and return the units to render (or the refusal).

    When not even the floor fits the input budget but it fits within
    ``over_budget_grace_ratio`` of it (and never beyond ``max_tokens``), the floor
    is rendered and the overshoot reported as ``grace_tokens``.
    """
    cfg = strategy.config
    stated = build_problem(strategy, ctx, stored, win, budget)
    problem, members = stated.problem, stated.members
    method, options = strategy.solver
    result = solvers.solve(problem, method=method, **options)
    head = sum(win.tokens[: win.head_end])
    tail = sum(win.tokens[win.tail_start :])
    produce = [
        ProduceRequest(level=r.level, first=members[r.first][0].id, last=members[r.last][-1].id)
        for r in result.produce
    ]
    plan = AdapterPlan(produce=produce, members=members)
    base = {
        "solver": result.solver,
        "status": result.status.value,
        "budget": budget.input_tokens,
        "head": {"messages": win.head_end, "tokens": head},
        "tail": {"messages": len(stored) - win.tail_start, "tokens": tail},
        "decision": result.diagnostics.get("decision"),
        "kv_cost": result.kv_cost,
    }
    allowance = min(
        budget.max_tokens, math.floor(budget.input_tokens * (1 + cfg.over_budget_grace_ratio))
    )
    graced = (
        result.status is Status.OVER_BUDGET
        and result.tokens is not None
        and result.tokens <= allowance
    )
    if result.status in Status.with_plan() or graced:
        layout = render(problem, result.frontier)
        plan.units = [(u.kind, u.key) for u in layout.units]
        plan.frontier = dict(result.frontier)
        levels: dict[int, dict[str, int]] = {}
        middle_raw = {"messages": 0, "tokens": 0}
        zones = {leaf.id: leaf.zone for leaf in problem.leaves}
        levels_of = {x.id: x.level for x in problem.summaries}
        for u in layout.units:
            if u.kind == "recall":
                level = levels_of[u.key]
                bucket = levels.setdefault(level, {"count": 0, "tokens": 0})
                bucket["count"] += 1
                bucket["tokens"] += u.tokens
            elif zones[u.key] == "middle":
                middle_raw["messages"] += len(members[u.key])
                middle_raw["tokens"] += u.tokens
        plan.stats = {
            **base,
            "tokens": layout.total,
            "middle_raw": middle_raw,
            "summaries": {f"L{k}": v for k, v in sorted(levels.items())},
        }
        if graced:
            plan.stats["grace_tokens"] = layout.total - budget.input_tokens
        return plan
    diagnostics = _diagnostics(stated, result.diagnostics, head, tail)
    plan.stats = {**base, "tokens": result.tokens, "diagnostics": diagnostics}
    stage = "constraints conflict" if result.status is Status.INFEASIBLE else "solver"
    actual = result.tokens if result.tokens is not None else diagnostics.get("floor_tokens", 0)
    plan.error = OverBudgetError(stage, budget.input_tokens, int(actual or 0), diagnostics)
    return plan


def _diagnostics(
    stated: StatedProblem,
    solver_diagnostics: dict[str, Any],
    head: int,
    tail: int,
) -> dict[str, Any]:
    problem = stated.problem
    idx = problem.index
    middle = sum(leaf.tokens for leaf in problem.leaves if leaf.zone == "middle")
    raw_pins = []
    for pin, model in zip(stated.pins, problem.pins, strict=True):
        if model.is_raw:
            tokens = sum(
                int(idx.leaf_tokens[problem.hierarchy.leaf_index[x]]) for x in model.leaves
            )
            raw_pins.append({"pin": pin.id, "name": pin.name, "tokens": tokens})
    return {
        "head_tokens": head,
        "tail_tokens": tail,
        "middle_tokens": middle,
        "raw_pins": raw_pins,
        "deepest_level": problem.hierarchy.depth,
        "floor_tokens": solver_diagnostics.get("floor_tokens"),
        "conflicts": solver_diagnostics.get("conflicts"),
        "suggestion": solver_diagnostics.get(
            "suggestion", "raise the budget, shrink the head or recent window, or unpin"
        ),
    }
