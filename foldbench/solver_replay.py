"""Replay a growing conversation through a solver and a simulated provider cache.

:func:`replay` takes the full history as one :class:`~folding.FoldProblem`
(every leaf and every summary that will ever exist) and a schedule of
``(prefix length, budget)`` steps. At each step the solver sees the first
``prefix`` leaves, the summaries already written (a summary becomes available
once its newest leaf is more than ``holdback`` leaves old), the newest
leaves up to ``tail_tokens`` in the raw tail, and the frontier it chose at the
previous step. Every layout goes through a :class:`~folding.CacheSimulator`.

Example
-------
>>> from folding.testing import chronicle
>>> from foldbench.solver_replay import growth_schedule, replay
>>> history = chronicle(60, leaf_tokens=500, chunk=4, recall_tokens=150)
>>> report = replay(history, growth_schedule(60, 12_000), method="kv-stable", tail_tokens=2_000)
>>> report.summary()["over_budget_steps"]
0
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

import numpy as np

from folding import (
    Budget,
    CacheSimulator,
    FoldProblem,
    Layout,
    Leaf,
    Status,
    Summary,
    kv_cost,
    render,
)
from solvers import get

__all__ = ["ReplayReport", "ReplayStep", "growth_schedule", "replay", "sweep"]

BudgetLike = Budget | int


def growth_schedule(
    n_leaves: int, budget: BudgetLike, *, every: int = 1, start: int = 1
) -> list[tuple[int, BudgetLike]]:
    """Steps that grow the conversation from ``start`` to ``n_leaves`` leaves, ``every`` at a time.

    The last step always shows all ``n_leaves``.
    """
    if every < 1:
        raise ValueError(f"every must be >= 1, got {every}")
    sizes = list(range(start, n_leaves + 1, every))
    if not sizes or sizes[-1] != n_leaves:
        sizes.append(n_leaves)
    return [(t, budget) for t in sizes]


@dataclass(frozen=True)
class ReplayStep:
    """One solve of a replay."""

    step: int
    leaves: int
    budget: int
    status: str
    tokens: int
    utilisation: float
    cached: int
    written: int
    missed: int
    billed: float
    kv_cost: int
    appended: int
    perturbation: int
    moved: int
    solve_ms: float
    over_budget: bool


@dataclass
class ReplayReport:
    """Per-step records of a replay and their aggregates."""

    method: str
    steps: list[ReplayStep] = field(default_factory=list)
    final_frontier: dict[str, int] = field(default_factory=dict)

    def summary(self) -> dict[str, Any]:
        """Aggregates: tokens, utilisation, cache, billed cost, churn, solve time."""
        s = self.steps
        if not s:
            return {"method": self.method, "steps": 0}
        pert = np.array([x.perturbation for x in s], dtype=np.float64)
        ms = np.array([x.solve_ms for x in s], dtype=np.float64)
        total = sum(x.tokens for x in s)
        cached = sum(x.cached for x in s)
        return {
            "method": self.method,
            "steps": len(s),
            "total_tokens": total,
            "mean_utilisation": float(np.mean([x.utilisation for x in s])),
            "final_tokens": s[-1].tokens,
            "final_utilisation": s[-1].utilisation,
            "cached": cached,
            "written": sum(x.written for x in s),
            "missed": sum(x.missed for x in s),
            "hit_rate": cached / total if total else 0.0,
            "billed": float(sum(x.billed for x in s)),
            "total_perturbation": int(pert.sum()),
            "max_perturbation": int(pert.max()),
            "rms_perturbation": float(math.sqrt(float(np.mean(pert**2)))),
            "fold_events": sum(1 for x in s if x.moved),
            "over_budget_steps": sum(1 for x in s if x.over_budget),
            "solve_ms_p50": float(np.percentile(ms, 50)),
            "solve_ms_p95": float(np.percentile(ms, 95)),
        }

    def rows(self) -> list[dict[str, Any]]:
        """The steps as dicts (for tables and CSV)."""
        return [asdict(x) for x in self.steps]


class _Prefixes:
    """Builds the problem a solver sees after ``t`` leaves, reusing validated models."""

    def __init__(self, history: FoldProblem, tail_tokens: int, holdback: int) -> None:
        self.history = history
        self.tail_tokens = tail_tokens
        self.holdback = holdback
        h = history.hierarchy
        self.leaves = history.leaves
        self.as_middle = [
            leaf if leaf.zone != "tail" else leaf.model_copy(update={"zone": "middle"})
            for leaf in self.leaves
        ]
        self.as_tail = [
            leaf if leaf.zone == "head" else leaf.model_copy(update={"zone": "tail"})
            for leaf in self.leaves
        ]
        order = np.argsort(h.span_last, kind="stable")
        self.summaries: list[Summary] = [history.summaries[j] for j in order.tolist()]
        self.summary_last = h.span_last[order]
        self.tokens = h.leaf_tokens

    def problem(self, t: int, budget: Budget, previous: dict[str, int] | None) -> FoldProblem:
        head = sum(1 for leaf in self.leaves[:t] if leaf.zone == "head")
        tail_start = t
        acc = 0
        while tail_start > head and acc < self.tail_tokens:
            tail_start -= 1
            acc += int(self.tokens[tail_start])
        leaves: list[Leaf] = [
            self.leaves[i] if self.leaves[i].zone == "head" else self.as_middle[i]
            for i in range(tail_start)
        ]
        leaves += [self.as_tail[i] for i in range(tail_start, t)]
        cut = int(np.searchsorted(self.summary_last, t - self.holdback, side="left"))
        summaries = self.summaries[:cut]
        known = {leaf.id for leaf in leaves}
        pins = [
            pin.model_copy(update={"leaves": tuple(x for x in pin.leaves if x in known)})
            for pin in self.history.pins
            if any(x in known for x in pin.leaves)
        ]
        locks = [x for x in self.history.locks if x in known]
        if previous is not None:
            previous = {k: v for k, v in previous.items() if k in known}
        return FoldProblem(
            leaves=tuple(leaves),
            summaries=tuple(summaries),
            pins=tuple(pins),
            locks=tuple(locks),
            budget=budget,
            previous=previous,
            fixed_tokens=self.history.fixed_tokens,
        )


def replay(
    history: FoldProblem,
    schedule: Sequence[tuple[int, BudgetLike]],
    *,
    method: str = "kv-stable",
    options: dict[str, Any] | None = None,
    tail_tokens: int = 0,
    holdback: int = 0,
    cache: CacheSimulator | None = None,
    time_limit: float | None = None,
    progress: Callable[[int, int], None] | None = None,
) -> ReplayReport:
    """Replay ``history`` through the solver ``method`` along ``schedule``.

    Parameters
    ----------
    history : FoldProblem
        Every leaf and summary of the whole conversation; its budget is ignored.
    schedule : sequence of (int, Budget or int)
        Steps: how many leaves exist and the budget (an int is the wall W).
    method : str
        A registered solver name; ``options`` configure it.
    tail_tokens : int
        The newest leaves up to this many raw tokens are the raw tail.
    holdback : int
        A summary is available once its newest leaf is more than this many leaves old.
    cache : CacheSimulator, optional
        Defaults to 4 breakpoints, no expiry, prices 1.0 / 1.25 / 0.1.
    progress : callable, optional
        Called as ``progress(done, total)`` after every step.

    Returns
    -------
    ReplayReport
    """
    solver = get(method, **(options or {}))
    sim = cache if cache is not None else CacheSimulator()
    prefixes = _Prefixes(history, tail_tokens, holdback)
    report = ReplayReport(method=method)
    previous: dict[str, int] | None = None
    before: Layout | None = None
    shown = 0
    raw = history.hierarchy.leaf_tokens
    for number, (t, budget_like) in enumerate(schedule):
        if not 0 <= t <= history.n_leaves:
            raise ValueError(f"schedule step {number}: {t} leaves, history has {history.n_leaves}")
        budget = Budget(total=budget_like) if isinstance(budget_like, int) else budget_like
        problem = prefixes.problem(t, budget, previous)
        started = time.perf_counter()
        result = solver.solve(problem, time_limit=time_limit)
        elapsed = (time.perf_counter() - started) * 1000.0
        if result.status is Status.INFEASIBLE:
            raise RuntimeError(f"step {number}: constraints admit no frontier: {result.conflicts}")
        layout = render(problem, result.frontier)
        request = sim.request(layout)
        appended = int(raw[shown:t].sum()) if t > shown else 0
        cost = kv_cost(before, layout)
        old = previous or {}
        moved = sum(
            1
            for leaf in problem.leaves[: min(shown, t)]
            if old.get(leaf.id, 0) != result.frontier.get(leaf.id, 0)
        )
        report.steps.append(
            ReplayStep(
                step=number,
                leaves=t,
                budget=budget.total,
                status=result.status.value,
                tokens=layout.total,
                utilisation=layout.total / budget.total,
                cached=request.cached,
                written=request.written,
                missed=request.missed,
                billed=request.billed,
                kv_cost=cost,
                appended=appended,
                perturbation=max(0, cost - appended),
                moved=moved,
                solve_ms=elapsed,
                over_budget=layout.total > budget.total,
            )
        )
        previous = result.frontier
        before = layout
        shown = t
        if progress is not None:
            progress(number + 1, len(schedule))
    report.final_frontier = dict(previous or {})
    return report


SWEEP_BUDGETS = (64_000, 100_000, 180_000, 300_000, 100_000)


def sweep(
    method: str = "kv-stable",
    *,
    options: dict[str, Any] | None = None,
    budgets: Sequence[int] = SWEEP_BUDGETS,
    n_leaves: int = 220,
    calls_per_budget: int = 3,
    tail_tokens: int = 6_000,
    holdback: int = 4,
    progress: Callable[[int, int], None] | None = None,
) -> dict[str, Any]:
    """The standard budget sweep: grow under ``budgets[0]``, then move the wall.

    The history is :func:`folding.testing.chunked_history` (``n_leaves`` messages of
    ~900 tokens, 3,000-token chunks of at least 4 messages, 600-token
    summaries merged 6 at a time). The conversation grows one message per
    call under the first wall; then each later wall gets ``calls_per_budget``
    calls on the full conversation, carrying the frontier.

    Returns
    -------
    dict
        ``phases``: per wall, the tokens and utilisation after its last call;
        ``summary``: :meth:`ReplayReport.summary` of the whole run; ``raw_tokens``.
    """
    from folding.testing import chunked_history

    history = chunked_history(n_leaves)
    schedule: list[tuple[int, BudgetLike]] = list(growth_schedule(n_leaves, budgets[0]))
    ends = [len(schedule) - 1]
    for budget in budgets[1:]:
        schedule += [(n_leaves, budget)] * calls_per_budget
        ends.append(len(schedule) - 1)
    report = replay(
        history,
        schedule,
        method=method,
        options=options,
        tail_tokens=tail_tokens,
        holdback=holdback,
        progress=progress,
    )
    phases = [
        {
            "budget": report.steps[i].budget,
            "tokens": report.steps[i].tokens,
            "utilisation": report.steps[i].utilisation,
        }
        for i in ends
    ]
    return {
        "method": method,
        "raw_tokens": history.raw_tokens,
        "phases": phases,
        "summary": report.summary(),
    }
