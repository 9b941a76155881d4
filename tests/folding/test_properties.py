"""Property tests of the model's invariants, driven by folding.testing.strategies."""

from __future__ import annotations

import itertools

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from folding import (
    CostTable,
    FoldProblem,
    PlanViolation,
    cheapest_frontier,
    check_plan,
    enumerate_frontiers,
    finest_frontier,
    is_valid,
    kv_cost,
    levels_from_frontier,
    render,
)
from folding.testing.strategies import frontiers, level_maps, problems


def with_frontier(**kw: object) -> st.SearchStrategy[tuple[FoldProblem, dict[str, int]]]:
    return problems(**kw).flatmap(lambda p: frontiers(p).map(lambda f: (p, f)))  # type: ignore[arg-type]


def canon(frontier: dict[str, int]) -> tuple[tuple[str, int], ...]:
    return tuple(sorted((k, v) for k, v in frontier.items() if v))


@given(with_frontier(dag=True))
def test_render_total_is_fixed_plus_sum_of_units(case: tuple[FoldProblem, dict[str, int]]) -> None:
    problem, frontier = case
    lay = render(problem, frontier)
    assert lay.total == problem.fixed_tokens + sum(u.tokens for u in lay.units)
    offsets = [u.offset for u in lay.units]
    expected = list(itertools.accumulate([u.tokens for u in lay.units], initial=lay.fixed_tokens))
    assert offsets == expected[:-1]


@given(with_frontier(dag=True))
def test_generated_frontiers_pass_check_plan(case: tuple[FoldProblem, dict[str, int]]) -> None:
    problem, frontier = case
    layout = check_plan(problem, frontier, enforce_budget=False)
    # every leaf is represented exactly once: raw, or inside exactly one recall
    h = problem.hierarchy
    shown = [h.leaf_index[u.key] for u in layout.units if u.kind == "raw"]
    for u in layout.units:
        if u.kind == "recall":
            shown.extend(h.leaf_index[x] for x in h.covered_leaves(u.key) if frontier.get(x, 0) > 0)
    assert sorted(shown) == list(range(problem.n_leaves))


@settings(max_examples=40)
@given(problems(max_leaves=10, max_depth=3, dag=True, feasible=None))
def test_enumeration_agrees_with_check_plan(problem: FoldProblem) -> None:
    valid = {canon(f) for f in enumerate_frontiers(problem)}
    for frontier in valid:
        check_plan(problem, dict(frontier), enforce_budget=False)
    if problem.conflicts():
        assert not valid
    depth = problem.hierarchy.depth
    if problem.n_leaves <= 6 and depth <= 2:
        ids = [leaf.id for leaf in problem.leaves]
        for levels in itertools.product(range(depth + 1), repeat=problem.n_leaves):
            frontier = {i: v for i, v in zip(ids, levels, strict=True) if v}
            assert is_valid(problem, frontier, enforce_budget=False) == (canon(frontier) in valid)


@given(
    problems(max_leaves=10, dag=True, feasible=None).flatmap(
        lambda p: st.tuples(st.just(p), st.lists(level_maps(p), min_size=1, max_size=20))
    )
)
def test_check_plan_accepts_exactly_the_enumerated_frontiers(
    case: tuple[FoldProblem, list[dict[str, int]]],
) -> None:
    problem, candidates = case
    valid = {canon(f) for f in enumerate_frontiers(problem)}
    for frontier in candidates:
        assert is_valid(problem, frontier, enforce_budget=False) == (canon(frontier) in valid)


@given(problems(max_leaves=9, dag=True, feasible=None))
def test_cheapest_and_finest_bracket_every_frontier(problem: FoldProblem) -> None:
    all_valid = list(enumerate_frontiers(problem))
    low, high = cheapest_frontier(problem), finest_frontier(problem)
    if not all_valid:
        assert low is None and high is None
        return
    assert low is not None and high is not None
    totals = [render(problem, f).total for f in all_valid]
    assert render(problem, low).total == min(totals)
    raw = problem.index.leaf_tokens
    depth_cost = [int((levels_from_frontier(problem, f) * raw).sum()) for f in all_valid]
    assert int((levels_from_frontier(problem, high) * raw).sum()) == min(depth_cost)


@given(problems(feasible=True, max_leaves=10, dag=True))
def test_feasible_problems_have_a_plan_within_the_wall(problem: FoldProblem) -> None:
    low = cheapest_frontier(problem)
    assert low is not None
    check_plan(problem, low)


@given(problems(feasible=False, max_leaves=10))
def test_infeasible_problems_have_no_plan_within_the_wall(problem: FoldProblem) -> None:
    low = cheapest_frontier(problem)
    if low is not None:
        assert render(problem, low).total > problem.budget.total
        try:
            check_plan(problem, low)
        except PlanViolation as exc:
            assert exc.rules == {"budget"}
        else:
            raise AssertionError("an over-budget frontier passed check_plan")
    else:
        assert problem.conflicts() or not list(enumerate_frontiers(problem))


@given(with_frontier(dag=True), st.data())
def test_kv_cost_identity_and_pure_append(
    case: tuple[FoldProblem, dict[str, int]], data: st.DataObject
) -> None:
    problem, frontier = case
    lay = render(problem, frontier)
    assert kv_cost(lay, lay) == 0
    assert kv_cost(None, lay) == lay.total
    # a pure append: the same problem with extra raw leaves after the last one
    extra = data.draw(st.lists(st.integers(0, 500), min_size=1, max_size=4))
    payload = problem.model_dump(mode="json")
    zone = "tail" if problem.leaves[-1].zone == "tail" else "middle"
    payload["leaves"] += [{"id": f"new{i}", "tokens": t, "zone": zone} for i, t in enumerate(extra)]
    grown = FoldProblem.model_validate(payload)
    grown_layout = render(grown, frontier)
    assert kv_cost(lay, grown_layout) == sum(extra)
    assert kv_cost(grown_layout, lay) == 0


@given(problems(dag=True, feasible=None))
def test_json_round_trip_is_the_identity(problem: FoldProblem) -> None:
    text = problem.model_dump_json()
    again = FoldProblem.model_validate_json(text)
    assert again == problem
    assert again.model_dump_json() == text


@given(with_frontier(dag=False))
def test_cost_table_amortised_sum_equals_render(case: tuple[FoldProblem, dict[str, int]]) -> None:
    problem, frontier = case
    table = CostTable.build(problem)
    levels = levels_from_frontier(problem, frontier)
    assert np.isclose(table.frontier_tokens(problem, levels), render(problem, frontier).total)


@given(with_frontier(dag=True))
def test_render_is_deterministic(case: tuple[FoldProblem, dict[str, int]]) -> None:
    problem, frontier = case
    again = FoldProblem.model_validate_json(problem.model_dump_json())
    assert (
        render(problem, frontier).to_dict()
        == render(again, dict(reversed(frontier.items()))).to_dict()
    )
