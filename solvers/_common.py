"""Helpers shared by the solvers: feasibility, produce requests, carried frontiers."""

from __future__ import annotations

from typing import Any

import numpy as np

from folding import (
    BoundaryGraph,
    FoldProblem,
    ProduceRequest,
    Status,
    render_levels,
)
from folding.frontiers import finest_levels as folding_finest_levels
from folding.frontiers import floor_levels
from folding.render import resolve_units
from folding.validate import constraint_violations

from ._plan import IntArray, Plan


def is_valid_levels(problem: FoldProblem, levels: IntArray) -> bool:
    """True when ``levels`` is a valid frontier (budget not checked)."""
    if constraint_violations(problem, levels):
        return False
    _, violations = resolve_units(problem, levels)
    return not violations


def nearest_valid(problem: FoldProblem, desired: IntArray) -> IntArray | None:
    """The valid frontier closest to ``desired`` (raw-token-weighted level distance).

    Ties prefer fewer tokens. None when no valid frontier exists.
    """
    graph = BoundaryGraph(problem)
    raw = problem.index.leaf_tokens

    def weight(e: Any) -> tuple[float, ...]:
        span = graph.leaves[e.start : e.end]
        return (float((np.abs(desired[span] - e.level) * raw[span]).sum()), float(e.tokens))

    path = graph.shortest(weight)
    return None if path is None else graph.levels_of(path)


def carried_levels(problem: FoldProblem) -> IntArray | None:
    """The previous frontier, projected onto a valid frontier when it is no longer valid."""
    if problem.previous is None:
        return None
    previous = problem.index.previous.copy()
    if is_valid_levels(problem, previous):
        return previous
    return nearest_valid(problem, previous)


def finest_levels(problem: FoldProblem) -> IntArray:
    """Levels of the least-folded valid frontier (all raw when nothing forces a summary)."""
    levels = folding_finest_levels(problem)
    assert levels is not None, "finest_levels needs a feasible constraint set"
    return levels


def cheapest_levels(problem: FoldProblem) -> IntArray | None:
    """Levels of the cheapest valid frontier (the floor), or None."""
    return floor_levels(problem)


def infeasible_diagnostics(problem: FoldProblem) -> dict[str, Any] | None:
    """Diagnostics when the constraints admit no frontier, else None."""
    conflicts = problem.conflicts()
    if conflicts:
        return {
            "reason": "constraint-conflict",
            "conflicts": [
                {"leaf": c.leaf, "available": list(c.available), "constraints": list(c.constraints)}
                for c in conflicts
            ],
            "suggestion": "release or relax one of the listed constraints on each leaf",
        }
    idx = problem.index
    if not (idx.lo > 0).any():
        return None  # all raw is valid
    graph = BoundaryGraph(problem)
    reach = np.zeros(graph.m + 1, dtype=np.bool_)
    reach[0] = True
    for p in range(graph.m):
        if reach[p]:
            for e in graph.edges_from[p]:
                reach[e.end] = True
    if reach[graph.m]:
        return None
    stuck = int(np.flatnonzero(reach).max())
    leaf = problem.hierarchy.leaf_ids[int(graph.leaves[stuck])]
    return {
        "reason": "constraint-conflict",
        "conflicts": [
            {
                "leaf": leaf,
                "available": list(range(int(idx.avail[graph.leaves[stuck]]) + 1)),
                "constraints": problem.constraints_on(leaf),
            }
        ],
        "suggestion": (
            f"no whole summary can show {leaf!r} at a level its constraints allow without "
            "breaking the constraints of a leaf it shares the summary with; relax a pin or lock"
        ),
    }


def produce_requests(problem: FoldProblem, levels: IntArray) -> list[ProduceRequest]:
    """Summaries whose production would let the frontier shrink further.

    L1 requests for each maximal run of foldable leaves that no summary covers
    yet; merge requests (level k + 1) for each run of two or more adjacent
    parentless level-k summaries shown at level k.
    """
    h = problem.hierarchy
    idx = problem.index
    ids = h.leaf_ids
    out: list[ProduceRequest] = []
    foldable = (idx.avail == 0) & (idx.cap >= 1) & ~idx.locked
    padded = np.concatenate([[False], foldable, [False]])
    edges = np.flatnonzero(padded[1:] != padded[:-1])
    for a, b in zip(edges[::2].tolist(), edges[1::2].tolist(), strict=True):
        out.append(ProduceRequest(level=1, first=ids[a], last=ids[b - 1]))
    nodes, violations = resolve_units(problem, levels)
    if violations or not h.summaries:
        return out
    has_parent = np.zeros(idx.n_summaries, dtype=np.bool_)
    for s in h.summaries:
        for child in s.children:
            j = h.summary_index.get(child)
            if j is not None:
                has_parent[j] = True
    shown = nodes[nodes >= idx.n] - idx.n
    roots = [int(j) for j in shown if not has_parent[j]]
    run: list[int] = []

    def flush() -> None:
        if len(run) >= 2:
            out.append(
                ProduceRequest(
                    level=int(h.summary_level[run[0]]) + 1,
                    first=ids[int(h.span_first[run[0]])],
                    last=ids[int(h.span_last[run[-1]])],
                )
            )

    for j in roots:
        if run and (
            h.summary_level[j] != h.summary_level[run[-1]]
            or h.span_first[j] != h.span_last[run[-1]] + 1
        ):
            flush()
            run = []
        run.append(j)
    flush()
    return out


def over_budget_plan(problem: FoldProblem, plan: Plan) -> Plan:
    """The over-budget answer: the cheapest frontier, its floor and produce requests."""

    levels = cheapest_levels(problem)
    assert levels is not None, "over_budget_plan needs a feasible constraint set"
    layout = render_levels(problem, levels)
    idx = problem.index
    wall = problem.budget.total
    protected = int(idx.leaf_tokens[idx.protected].sum()) + problem.fixed_tokens
    diagnostics = {
        **plan.diagnostics,
        "reason": "over-budget",
        "floor_tokens": layout.total,
        "wall": wall,
        "required_additional": layout.total - wall,
        "protected_tokens": protected,
        "suggestion": (
            f"raise the wall by {layout.total - wall} tokens, produce the requested "
            "summaries, or release a protection (pins, locks, head/tail windows)"
        ),
    }
    produce = list(plan.produce)
    for request in produce_requests(problem, levels):
        if request not in produce:
            produce.append(request)
    return Plan(levels, Status.OVER_BUDGET, produce, diagnostics, plan.stats)


def finish_greedy(problem: FoldProblem, plan: Plan) -> Plan:
    """Enforce the wall on a heuristic's plan: fall back to the floor, or report over budget."""

    assert plan.levels is not None
    tokens = render_levels(problem, plan.levels).total
    if tokens <= problem.budget.total:
        return plan
    floor = cheapest_levels(problem)
    assert floor is not None
    if render_levels(problem, floor).total <= problem.budget.total:
        diagnostics = {**plan.diagnostics, "fallback": "floor", "heuristic_tokens": tokens}
        return Plan(floor, Status.FEASIBLE, plan.produce, diagnostics, plan.stats)
    return over_budget_plan(
        problem, Plan(None, Status.OVER_BUDGET, plan.produce, plan.diagnostics, plan.stats)
    )
