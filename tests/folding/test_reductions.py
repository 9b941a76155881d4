"""``folding.merge_runs``: a reduction by runs of leaves with an exact inverse."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import solvers
from folding import (
    FoldProblem,
    ReductionError,
    Status,
    check_plan,
    merge_runs,
    render,
)
from folding.testing.strategies import frontiers, problems


def mergeable_runs(problem: FoldProblem) -> list[tuple[int, int]]:
    """Maximal runs of adjacent leaves that every summary, pin and lock covers whole or
    not at all, in one zone and one previous level: the runs merge_runs accepts."""
    h = problem.hierarchy
    n = problem.n_leaves
    cut = [False] * (n + 1)  # cut[i]: a run may not continue from leaf i-1 to leaf i
    cut[0] = cut[n] = True
    for j in range(len(h.summaries)):
        cut[int(h.span_first[j])] = True
        cut[int(h.span_last[j]) + 1] = True
    previous = problem.previous or {}
    covers = [set(p.leaves) for p in problem.pins] + [set(problem.locks)]
    for i in range(1, n):
        a, b = problem.leaves[i - 1], problem.leaves[i]
        if a.zone != b.zone or previous.get(a.id, 0) != previous.get(b.id, 0):
            cut[i] = True
        if any((a.id in c) != (b.id in c) for c in covers):
            cut[i] = True
    runs, start = [], 0
    for i in range(1, n + 1):
        if cut[i]:
            runs.append((start, i))
            start = i
    return [r for r in runs if r[1] - r[0] > 1]


@st.composite
def reduced_cases(draw: st.DrawFn) -> tuple[FoldProblem, list[tuple[int, int]]]:
    problem = draw(problems(max_leaves=10))
    runs = []
    for a, b in mergeable_runs(problem):
        start = draw(st.integers(a, b - 2))
        end = draw(st.integers(start + 2, b))
        if draw(st.booleans()):
            runs.append((start, end))
    return problem, runs


@settings(max_examples=300)
@given(reduced_cases(), st.sampled_from(["kv-stable", "exact", "oldest-first"]))
def test_a_plan_of_the_reduced_problem_is_a_plan_of_the_original(
    case: tuple[FoldProblem, list[tuple[int, int]]], method: str
) -> None:
    problem, runs = case
    reduced, inverse = merge_runs(problem, runs)
    assert reduced.n_leaves == problem.n_leaves - sum(b - a - 1 for a, b in runs)
    result = solvers.solve(reduced, method=method)
    if result.status in Status.with_plan():
        original = inverse.frontier(result.frontier)
        layout = check_plan(problem, original)  # valid, constraints and budget included
        assert layout.total == render(reduced, result.frontier).total == result.tokens
        for r in inverse.produce(result.produce):
            assert r.first in problem.hierarchy.leaf_index
            assert r.last in problem.hierarchy.leaf_index
    if result.status is Status.INFEASIBLE:
        named = {c.leaf for c in inverse.conflicts(reduced.conflicts())}
        assert named <= set(problem.hierarchy.leaf_index)


@settings(max_examples=200)
@given(reduced_cases().flatmap(lambda c: st.tuples(st.just(c), frontiers(merge_runs(*c)[0]))))
def test_frontiers_round_trip_and_keep_their_tokens(
    case: tuple[tuple[FoldProblem, list[tuple[int, int]]], dict[str, int]],
) -> None:
    (problem, runs), frontier = case
    reduced, inverse = merge_runs(problem, runs)
    original = inverse.frontier(frontier)
    assert render(problem, original).total == render(reduced, frontier).total
    assert inverse.reduce_frontier(original) == {k: v for k, v in frontier.items() if v}


def test_a_run_cut_by_a_summary_is_refused() -> None:
    problem = FoldProblem.model_validate(
        {
            "leaves": [{"id": f"m{i}", "tokens": 10} for i in range(3)],
            "summaries": [{"id": "S", "level": 1, "tokens": 5, "children": ["m0", "m1"]}],
            "budget": {"total": 100},
        }
    )
    with pytest.raises(ReductionError, match="summary 'S' covers part of a run"):
        merge_runs(problem, [(1, 3)])
    with pytest.raises(ReductionError, match="outside"):
        merge_runs(problem, [(2, 4)])
