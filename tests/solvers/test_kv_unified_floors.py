"""The churn and change floors of kv-unified, found without a search, against brute force.

The score penalises only *avoidable* churn and change: what a frontier re-reads or
changes beyond the least any frontier under the wall must. The floors are computed
without CP-SAT: the churn floor exactly, one least-tokens sweep per breakpoint of the
previous layout; the change floor by the Lagrangian relaxation of the wall (a proven
floor when its bound meets its best frontier, else a small model warm-started from
it). The oracle enumerates every frontier of a tiny problem
(:func:`folding.frontiers.enumerate_frontiers`), keeps those under the wall and takes
the least churn and change by the score's own definition (:func:`_exact_score`'s
terms, in the integer coefficients of the model).
"""

from __future__ import annotations

import math

import pytest
from hypothesis import HealthCheck, assume, event, given, settings
from hypothesis import strategies as st

import solvers
from folding import FoldProblem, Status, render_levels
from folding.frontiers import enumerate_frontiers
from folding.render import levels_from_frontier
from folding.testing.strategies import problems
from solvers import kv_unified as ku
from solvers._common import is_valid_levels

POLICY = "reference"


def _space(problem: FoldProblem, breakpoints: tuple[int, ...] | None) -> tuple[object, ...]:
    cfg = ku.KvUnifiedConfig(policy=POLICY, breakpoints=breakpoints)
    terms = ku._terms(problem, cfg)
    return cfg, terms, ku._Space(problem, terms)


def _scaled_change(space: ku._Space, levels: object) -> int:
    """A frontier's change in the model's integer coefficients."""
    z_on, r_on = space.assignment(levels)  # type: ignore[arg-type]
    scaled = sum(round(c * ku.SCORE) for c, on in zip(space.change_z, z_on, strict=True) if on)
    if space.change_r:
        scaled += sum(round(c * ku.SCORE) for c, on in zip(space.change_r, r_on, strict=True) if on)
    return scaled


def _under_the_wall(problem: FoldProblem) -> list[object]:
    """The levels of every frontier of ``problem`` that keeps its wall."""
    out = []
    for frontier in enumerate_frontiers(problem):
        levels = levels_from_frontier(problem, frontier)
        if render_levels(problem, levels).total <= problem.budget.total:
            out.append(levels)
    return out


def _brute(
    problem: FoldProblem, terms: ku._Terms, space: ku._Space
) -> tuple[int | None, int | None]:
    """The least re-read tokens and the least scaled change of a frontier under the wall."""
    kept = _under_the_wall(problem)
    if not kept:
        return None, None
    churn = min(
        render_levels(problem, x).total - ku._cached(terms, render_levels(problem, x))  # type: ignore[arg-type]
        for x in kept
    )
    change = min(_scaled_change(space, x) for x in kept) if terms.change is not None else None
    return churn, change


@settings(
    max_examples=300,
    deadline=None,
    derandomize=True,
    database=None,
    suppress_health_check=list(HealthCheck),
)
@given(
    problem=problems(max_leaves=8, max_depth=3),
    breakpoints=st.one_of(st.none(), st.lists(st.integers(1, 12), max_size=3).map(tuple)),
)
def test_the_floors_are_the_least_any_frontier_under_the_wall_has(
    problem: FoldProblem, breakpoints: tuple[int, ...] | None
) -> None:
    assume(problem.previous is not None)
    _, terms, space = _space(problem, breakpoints)
    assert isinstance(terms, ku._Terms) and isinstance(space, ku._Space)
    assume(terms.before is not None)
    churn, change = _brute(problem, terms, space)
    assume(churn is not None)
    cfg = ku.KvUnifiedConfig(policy=POLICY, breakpoints=breakpoints)
    model = ku._Model(space, cfg, terms, space.budget)
    status, solver = model.solve(model.churn_expr(1), 30.0)
    assert status is Status.OPTIMAL
    price = round(cfg.policy.cache_write_price - cfg.policy.cache_read_price)
    found = ku._churn_floor(space, terms, space.budget)
    event("churn floor: swept" if found is not None else "churn floor: searched")
    if found is not None:  # None: the caller searches (a prefix that does not tile)
        # the model's own least churn, found by its search
        assert price * found == round(solver.objective_value)
        # and the definition's, whether the previous frontier is still valid or not
        valid = is_valid_levels(problem, problem.index.previous)
        event("previous frontier valid" if valid else "previous frontier invalid")
        assert found == churn
    relaxed = ku._change_floor(space, space.budget)
    assert relaxed is not None and change is not None
    assert relaxed.lower <= change <= relaxed.upper
    event("change floor: proven" if relaxed.lower >= relaxed.upper else "change floor: bounded")
    # the best frontier it reports keeps the wall and has the change it claims
    kept = space.atoms.constant_tokens + int(space.z_tokens[relaxed.z_on].sum())
    kept += int(space.r_tokens[relaxed.r_on].sum())
    assert kept <= problem.budget.total
    # what it closes leaves every frontier of least change open
    if relaxed.lower < relaxed.upper:
        for levels in _under_the_wall(problem):
            if _scaled_change(space, levels) == change:
                z_on, r_on = space.assignment(levels)  # type: ignore[arg-type]
                assert not (relaxed.z_dead & z_on).any() and not (relaxed.r_dead & r_on).any()


@pytest.mark.parametrize(
    ("pinned", "churn"),
    [
        # the summary now sits after the raw m0: nothing of the old layout is in place
        ("m0", 100 + 10 + 5 + 10),
        # the summary keeps its place and the raw m3 follows it: its prefix is read
        ("m3", 10 + 10),
    ],
)
def test_a_leaf_pinned_inside_the_last_requests_summary_breaks_the_prefix_there(
    pinned: str, churn: int
) -> None:
    """The last request showed one summary over m0..m3, then m4. A raw pin on one of
    m0..m3 puts that leaf beside the summary in every frontier: the cache holds only
    the units before it, in the model's floor as in the definition."""
    problem = FoldProblem.model_validate(
        {
            "leaves": [{"id": f"m{i}", "tokens": 10} for i in range(5)],
            "summaries": [
                {"id": "s", "level": 1, "tokens": 5, "children": ["m0", "m1", "m2", "m3"]}
            ],
            "pins": [{"leaves": [pinned]}],
            "budget": {"total": 1_000},
            "previous": {f"m{i}": 1 for i in range(4)},
            "fixed_tokens": 100,
        }
    )
    cfg, terms, space = _space(problem, None)
    assert isinstance(cfg, ku.KvUnifiedConfig)
    assert isinstance(terms, ku._Terms) and isinstance(space, ku._Space)
    assert _brute(problem, terms, space)[0] == churn
    assert ku._churn_floor(space, terms, space.budget) == churn
    model = ku._Model(space, cfg, terms, space.budget)
    status, solver = model.solve(model.churn_expr(1), 30.0)
    assert status is Status.OPTIMAL
    price = round(cfg.policy.cache_write_price - cfg.policy.cache_read_price)
    assert round(solver.objective_value) == price * churn


def test_the_floors_are_exact_on_a_long_history_without_a_search() -> None:
    """On an agent history too long to enumerate, the floors equal what a CP-SAT
    floor solve proves given all the time it needs."""
    from folding.testing import agent_history

    before = agent_history(3_000)
    carried = solvers.solve(before, method="kv-stable").frontier
    data = agent_history(3_005, previous=carried).model_dump(mode="json")
    data["budget"] = {"total": int(data["budget"]["total"] * 0.6)}
    problem = FoldProblem.model_validate(data)
    cfg, terms, space = _space(problem, None)
    assert isinstance(cfg, ku.KvUnifiedConfig)
    assert isinstance(terms, ku._Terms) and isinstance(space, ku._Space)
    assert terms.before is not None and terms.change is not None
    model = ku._Model(space, cfg, terms, space.budget)
    status, solver = model.solve(model.churn_expr(1), 60.0)
    assert status is Status.OPTIMAL
    price = round(cfg.policy.cache_write_price - cfg.policy.cache_read_price)
    least = ku._churn_floor(space, terms, space.budget)
    assert least is not None
    if price:
        assert math.isclose(solver.objective_value, price * least)
    status, solver = model.solve(model.change_expr(ku.SCORE), 60.0)
    assert status is Status.OPTIMAL
    relaxed = ku._change_floor(space, space.budget)
    assert relaxed is not None
    assert relaxed.lower <= solver.objective_value <= relaxed.upper
    if relaxed.lower >= relaxed.upper:  # proven by the relaxation itself
        assert relaxed.upper == solver.objective_value
        return
    # over what the relaxation left open, the search proves the same floor
    left = space.budget.copy()
    left.kill(relaxed.z_dead & ~relaxed.z_on, relaxed.r_dead & ~relaxed.r_on)
    assert left.free_z().sum() + left.free_r().sum() < (
        space.budget.free_z().sum() + space.budget.free_r().sum()
    )
    small = ku._Model(space, cfg, terms, left)
    small.hint(relaxed.z_on, relaxed.r_on)
    status, reduced = small.solve(small.change_expr(ku.SCORE), 60.0)
    assert status is Status.OPTIMAL
    assert reduced.objective_value == solver.objective_value
