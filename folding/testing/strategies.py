"""Hypothesis strategies for fold problems and frontiers, valid by construction.

Feasibility is controlled, not filtered: with ``feasible=True`` the
constraints are drawn around a *witness* frontier (pins and locks it
satisfies) and the budget at or above the witness's tokens, so a valid plan
exists; with ``feasible=False`` the budget is drawn below the floor (or the
constraints contradict); with ``None`` anything goes.

Examples
--------
>>> from hypothesis import given
>>> from folding.testing.strategies import problems, frontiers
>>> @given(problems(max_leaves=8).flatmap(lambda p: frontiers(p).map(lambda f: (p, f))))
... def test_renders(case):
...     problem, frontier = case
...     render(problem, frontier)
"""

from __future__ import annotations

from typing import Any

from hypothesis import assume
from hypothesis import strategies as st

from ..frontiers import BoundaryGraph, cheapest_frontier
from ..model import FoldProblem, Frontier
from ..render import frontier_from_levels, render

__all__ = ["frontiers", "hierarchies", "level_maps", "problems"]


@st.composite
def hierarchies(
    draw: st.DrawFn,
    *,
    min_leaves: int = 1,
    max_leaves: int = 10,
    max_depth: int = 3,
    dag: bool = False,
    zones: bool = True,
) -> dict[str, Any]:
    """Leaves and summaries as a JSON-ready dict (``leaves``, ``summaries``).

    L1 summaries cover random contiguous chunks (some leaves stay uncovered);
    each higher level groups consecutive parentless summaries of the level
    below. With ``dag``, extra summaries re-cover existing runs with other
    boundaries.
    """
    n = draw(st.integers(min_leaves, max_leaves))
    tokens = draw(st.lists(st.integers(0, 400), min_size=n, max_size=n))
    salience = draw(st.lists(st.sampled_from([0.1, 0.25, 0.5, 0.75, 1.0]), min_size=n, max_size=n))
    head = draw(st.integers(0, min(2, n))) if zones else 0
    tail = draw(st.integers(0, min(2, n - head))) if zones else 0
    zone = ["head"] * head + ["middle"] * (n - head - tail) + ["tail"] * tail
    leaves = [
        {"id": f"m{i}", "tokens": t, "salience": s, "zone": z}
        for i, (t, s, z) in enumerate(zip(tokens, salience, zone, strict=True))
    ]
    summaries: list[dict[str, Any]] = []
    spans: dict[str, tuple[int, int]] = {}

    def add(level: int, children: list[str], a: int, b: int) -> str:
        sid = f"L{level}-{sum(1 for s in summaries if s['level'] == level)}"
        summaries.append(
            {"id": sid, "level": level, "tokens": draw(st.integers(0, 300)), "children": children}
        )
        spans[sid] = (a, b)
        return sid

    current: list[str] = []
    pos = 0
    while pos < n:
        size = min(draw(st.integers(1, 4)), n - pos)
        if draw(st.booleans()):
            current.append(add(1, [f"m{i}" for i in range(pos, pos + size)], pos, pos + size - 1))
        pos += size
    if dag and n >= 2:
        a = draw(st.integers(0, n - 2))
        b = draw(st.integers(a + 1, min(n - 1, a + 4)))
        add(1, [f"m{i}" for i in range(a, b + 1)], a, b)
    level = 1
    while len(current) >= 2 and level < max_depth:
        level += 1
        nxt: list[str] = []
        k = 0
        while k < len(current):
            size = min(draw(st.integers(1, 3)), len(current) - k)
            group = current[k : k + 1]
            for sid in current[k + 1 : k + size]:  # only adjacent spans merge
                if spans[sid][0] != spans[group[-1]][1] + 1:
                    break
                group.append(sid)
            size = len(group)
            if draw(st.booleans()):
                nxt.append(add(level, group, spans[group[0]][0], spans[group[-1]][1]))
            k += size
        current = nxt
    return {"leaves": leaves, "summaries": summaries}


def _walk(draw: st.DrawFn, graph: BoundaryGraph) -> dict[str, int]:
    ok = graph.reaches_end()
    assume(bool(ok[0]))
    path = []
    p = 0
    while p < graph.m:
        options = [e for e in graph.edges_from[p] if ok[e.end]]
        e = draw(st.sampled_from(options))
        path.append(e)
        p = e.end
    return frontier_from_levels(graph.problem, graph.levels_of(path))


@st.composite
def frontiers(draw: st.DrawFn, problem: FoldProblem) -> dict[str, int]:
    """A valid frontier of ``problem`` (budget ignored): a random boundary-graph path.

    Rejects (``assume``) problems that admit no frontier.
    """
    return _walk(draw, BoundaryGraph(problem))


@st.composite
def level_maps(draw: st.DrawFn, problem: FoldProblem, *, max_level: int | None = None) -> Frontier:
    """Any leaf -> level assignment (most of them invalid), levels 0..depth + 1."""
    top = problem.hierarchy.depth + 1 if max_level is None else max_level
    levels = draw(
        st.lists(st.integers(0, top), min_size=problem.n_leaves, max_size=problem.n_leaves)
    )
    return {leaf.id: v for leaf, v in zip(problem.leaves, levels, strict=True) if v}


@st.composite
def problems(
    draw: st.DrawFn,
    *,
    min_leaves: int = 1,
    max_leaves: int = 10,
    max_depth: int = 3,
    dag: bool = False,
    constraints: bool = True,
    feasible: bool | None = True,
    fixed_tokens: bool = True,
) -> FoldProblem:
    """A fold problem with controlled feasibility.

    Parameters
    ----------
    feasible : bool or None
        ``True``: a valid plan within ``budget.total`` exists (constraints drawn
        around a witness frontier, budget >= its tokens). ``False``: none does
        (budget below the floor, or contradictory pins). ``None``: either.
    constraints : bool
        Draw pins, locks and a previous frontier.
    """
    data = draw(
        hierarchies(min_leaves=min_leaves, max_leaves=max_leaves, max_depth=max_depth, dag=dag)
    )
    fixed = draw(st.integers(0, 200)) if fixed_tokens else 0
    base = FoldProblem.model_validate({**data, "budget": {"total": 1}, "fixed_tokens": fixed})
    witness = _walk(draw, BoundaryGraph(base))
    data["fixed_tokens"] = fixed
    contradict = False
    if constraints:
        previous = _walk(draw, BoundaryGraph(base))
        data["previous"] = draw(st.sampled_from([previous, None])) if previous else previous
        ids = [leaf["id"] for leaf in data["leaves"]]
        pins: list[dict[str, Any]] = []
        for _ in range(draw(st.integers(0, 3))):
            chosen = draw(st.lists(st.sampled_from(ids), min_size=1, max_size=3, unique=True))
            levels = [witness.get(x, 0) for x in chosen]
            kind = draw(st.sampled_from(["raw", "level", "max", "min"]))
            if kind == "raw" and max(levels) == 0:
                pins.append({"leaves": chosen})
            elif kind == "level" and len(set(levels)) == 1:
                pins.append({"leaves": chosen, "level": levels[0]})
            elif kind == "max":
                pins.append({"leaves": chosen, "max_level": max(levels)})
            elif kind == "min":
                pins.append({"leaves": chosen, "min_level": min(levels)})
        data["pins"] = pins
        prev = data.get("previous") or {}
        lockable = [x for x in ids if prev.get(x, 0) == witness.get(x, 0)]
        if lockable:
            data["locks"] = draw(st.lists(st.sampled_from(lockable), max_size=3, unique=True))
        if feasible is False and draw(st.booleans()):
            leaf = draw(st.sampled_from(ids))
            pins.append({"leaves": [leaf]})
            pins.append({"leaves": [leaf], "min_level": 1})
            contradict = base.index.avail[base.hierarchy.leaf_index[leaf]] >= 1
    probe = FoldProblem.model_validate({**data, "budget": {"total": 10**9}})
    witness_tokens = render(probe, witness).total
    if feasible is True:
        total = draw(st.integers(max(1, witness_tokens), max(1, witness_tokens) * 2))
    elif feasible is False and not contradict:
        floor_frontier = cheapest_frontier(probe)
        floor = render(probe, floor_frontier).total if floor_frontier is not None else 1
        assume(floor > 1)
        total = draw(st.integers(1, floor - 1))
    else:
        total = draw(st.integers(1, max(1, probe.raw_tokens) * 2))
    target = draw(st.one_of(st.none(), st.integers(0, total)))
    data["budget"] = {"total": total, "target": target}
    return FoldProblem.model_validate(data)
