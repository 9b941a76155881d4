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

__all__ = ["AdapterPlan", "build_problem", "solve_frontier"]


@dataclass
class AdapterPlan:
    """What a compile renders, or the error it must raise."""

    units: list[tuple[str, str]] = field(default_factory=list)
    frontier: dict[str, int] = field(default_factory=dict)
    produce: list[ProduceRequest] = field(default_factory=list)
    stats: dict[str, Any] = field(default_factory=dict)
    error: Exception | None = None
    by_id: dict[str, StoredMessage] = field(default_factory=dict)


def build_problem(
    strategy: AutobiographicalStrategy,
    ctx: StrategyContext,
    stored: Sequence[StoredMessage],
    win: _Windows,
    budget: RequestBudget,
) -> FoldProblem:
    """The fold problem of the current state."""
    cfg = strategy.config
    position = {s.id: i for i, s in enumerate(stored)}
    cache = strategy.model_cache
    leaves: list[Leaf] = []
    for i, s in enumerate(stored):
        zone = "head" if i < win.head_end else "tail" if i >= win.tail_start else "middle"
        key = (s.id, win.tokens[i], zone)
        leaf = cache.get(key)
        if leaf is None:
            leaf = cache[key] = Leaf(id=s.id, tokens=win.tokens[i], zone=zone)
        leaves.append(leaf)
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
        summary_key = (entry.id, entry.level, entry.content, tuple(entry.source_ids))
        summary = cache.get(summary_key)
        if summary is None:
            summary = cache[summary_key] = Summary(
                id=entry.id,
                level=entry.level,
                tokens=strategy.recall_tokens(ctx, entry),
                children=tuple(entry.source_ids),
            )
        summaries.append(summary)
        included.add(entry.id)
    pins = []
    for pin in strategy.pins:
        if pin.first in position and pin.last in position:
            ids = tuple(x.id for x in stored[position[pin.first] : position[pin.last] + 1])
            pins.append(Pin(leaves=ids, level=pin.level, max_level=pin.max_level))
    previous = {k: v for k, v in strategy.resolutions.items() if k in position and v}
    total = budget.input_tokens
    return FoldProblem(
        leaves=tuple(leaves),
        summaries=tuple(summaries),
        pins=tuple(pins),
        locks=tuple(x for x in sorted(strategy.locks) if x in position),
        budget=Budget(total=total, target=math.floor(total * (1 - cfg.compression_slack_ratio))),
        previous=previous if strategy.resolutions else None,
    )


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
    problem = build_problem(strategy, ctx, stored, win, budget)
    method, options = strategy.solver
    result = solvers.solve(problem, method=method, **options)
    head = sum(win.tokens[: win.head_end])
    tail = sum(win.tokens[win.tail_start :])
    plan = AdapterPlan(produce=list(result.produce), by_id={s.id: s for s in stored})
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
        for u in layout.units:
            if u.kind == "recall":
                level = problem.hierarchy.summaries[problem.hierarchy.summary_index[u.key]].level
                bucket = levels.setdefault(level, {"count": 0, "tokens": 0})
                bucket["count"] += 1
                bucket["tokens"] += u.tokens
            elif zones[u.key] == "middle":
                middle_raw["messages"] += 1
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
    diagnostics = _diagnostics(strategy, problem, result.diagnostics, head, tail)
    plan.stats = {**base, "tokens": result.tokens, "diagnostics": diagnostics}
    stage = "constraints conflict" if result.status is Status.INFEASIBLE else "solver"
    actual = result.tokens if result.tokens is not None else diagnostics.get("floor_tokens", 0)
    plan.error = OverBudgetError(stage, budget.input_tokens, int(actual or 0), diagnostics)
    return plan


def _diagnostics(
    strategy: AutobiographicalStrategy,
    problem: FoldProblem,
    solver_diagnostics: dict[str, Any],
    head: int,
    tail: int,
) -> dict[str, Any]:
    idx = problem.index
    middle = sum(leaf.tokens for leaf in problem.leaves if leaf.zone == "middle")
    raw_pins = []
    for pin, model in zip(strategy.pins, problem.pins, strict=False):
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
