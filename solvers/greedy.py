"""The reference greedy passes: ``oldest-first`` and ``flat-profile``.

Both start from the previous frontier (all raw when there is none), only
fold deeper, and stop at the soft target or at the first missing summary,
which they report as a produce request. They are the baselines: simple and
cache-friendly by construction, with a documented weakness kept visible: a
larger budget never un-folds anything.
"""

from __future__ import annotations

import heapq

import numpy as np

from folding import FoldProblem, ProduceRequest, Status

from ._base import Capabilities, Plan, Solver, SolverConfig, register
from ._common import carried_levels, finest_levels, finish_greedy
from ._forest import Forest, FrontierState
from ._plan import Deadline


class GreedyConfig(SolverConfig):
    """The greedy passes have no options."""


def _start(problem: FoldProblem) -> tuple[Forest, FrontierState]:
    forest = Forest(problem)
    levels = carried_levels(problem)
    if levels is None:
        levels = finest_levels(problem)
    return forest, FrontierState(forest, levels)


def _produce(problem: FoldProblem, state: FrontierState, leaf: int, level: int) -> ProduceRequest:
    ids = problem.hierarchy.leaf_ids
    unit = int(state.unit[leaf])
    if unit >= state.idx.n:
        j = unit - state.idx.n
        a, b = int(state.forest.first[j]), int(state.forest.last[j])
        return ProduceRequest(level=level, first=ids[a], last=ids[b])
    return ProduceRequest(level=level, first=ids[leaf], last=ids[leaf])


def _done(
    problem: FoldProblem,
    state: FrontierState,
    produce: list[ProduceRequest],
    raises: int,
    time_limit_hit: bool,
) -> Plan:
    plan = Plan(
        state.levels,
        Status.FEASIBLE,
        produce,
        stats={
            "raises": raises,
            "planned_tokens": state.tokens,
            "time_limit_hit": time_limit_hit,
        },
    )
    return finish_greedy(problem, plan)


def _foldable(problem: FoldProblem) -> np.ndarray:
    idx = problem.index
    return ~idx.protected & ~idx.locked


@register
class OldestFirst(Solver):
    """Deepen the oldest region to the top of what exists, then stop.

    Repeatedly takes the oldest foldable leaf and shows its next-level
    summary; when that summary does not exist yet, asks for it (a produce
    request) and stops, even if younger regions could still fold.
    """

    name = "oldest-first"
    Config = GreedyConfig
    capabilities = Capabilities(settles=False, uses_time_limit=True)

    def _plan(self, problem: FoldProblem, time_limit: float | None) -> Plan:
        deadline = Deadline.after(time_limit)
        forest, state = _start(problem)
        target = problem.budget.target
        order = np.flatnonzero(_foldable(problem)).tolist()
        produce: list[ProduceRequest] = []
        raises = 0
        p = 0
        hit = False
        while state.tokens > target and p < len(order):
            if deadline.expired():
                hit = True
                break
            c = order[p]
            k = int(state.levels[c])
            parent = forest.parent_of_leaf(c, k + 1)
            if parent < 0:
                produce.append(_produce(problem, state, c, k + 1))
                break
            step = state.raise_delta(parent)
            if step is None:
                end = int(forest.last[parent])
                while p < len(order) and order[p] <= end:
                    p += 1
                continue
            state.apply_raise(parent, step[0])
            raises += 1
        return _done(problem, state, produce, raises, hit)


@register
class FlatProfile(Solver):
    """Shed tokens keeping roughly as many visible items at every level.

    Each step folds the oldest material of the most crowded level (ties to
    the finer level); a produce request is returned only when no level offers
    a raise.
    """

    name = "flat-profile"
    Config = GreedyConfig
    capabilities = Capabilities(settles=False, uses_time_limit=True)

    def _plan(self, problem: FoldProblem, time_limit: float | None) -> Plan:
        deadline = Deadline.after(time_limit)
        forest, state = _start(problem)
        idx = problem.index
        target = problem.budget.target
        foldable = _foldable(problem)
        depth = forest.depth
        heaps: list[list[int]] = [[] for _ in range(depth + 1)]
        visible = np.zeros(depth + 1, dtype=np.int64)
        seen: set[int] = set()
        for i in np.flatnonzero(foldable).tolist():
            u = int(state.unit[i])
            if u in seen:
                continue
            seen.add(u)
            k = int(state.levels[i])
            visible[k] += 1
            heaps[k].append(i)
        for heap in heaps:
            heapq.heapify(heap)
        stuck = np.zeros(depth + 1, dtype=np.bool_)
        produce: list[ProduceRequest] = []
        raises = 0
        hit = False
        while state.tokens > target:
            if deadline.expired():
                hit = True
                break
            levels_order = sorted(
                (k for k in range(depth + 1) if visible[k] > 0 and not stuck[k]),
                key=lambda k: (-int(visible[k]), k),
            )
            raised = False
            fallback: ProduceRequest | None = None
            for k in levels_order:
                heap = heaps[k]
                while heap:
                    c = heap[0]
                    u = int(state.unit[c])
                    first = c if u < idx.n else int(forest.first_member[u - idx.n])
                    if int(state.levels[c]) != k or first != c:
                        heapq.heappop(heap)  # stale: c was folded deeper since
                        continue
                    parent = forest.parent_of_leaf(c, k + 1)
                    if parent < 0:
                        if fallback is None:
                            fallback = _produce(problem, state, c, k + 1)
                        break
                    step = state.raise_delta(parent)
                    if step is None:
                        heapq.heappop(heap)  # constraints block this region at k + 1
                        continue
                    delta, units = step
                    for node in units.tolist():
                        leaf = node if node < idx.n else int(forest.first_member[node - idx.n])
                        visible[int(state.levels[leaf])] -= 1
                    state.apply_raise(parent, delta)
                    visible[k + 1] += 1
                    heapq.heappush(heaps[k + 1], int(forest.first_member[parent]))
                    raises += 1
                    raised = True
                    break
                if raised:
                    break
                if not heap and fallback is None:
                    stuck[k] = True
            if not raised:
                if fallback is not None:
                    produce.append(fallback)
                break
        return _done(problem, state, produce, raises, hit)
