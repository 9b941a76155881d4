"""The threshold pyramid: age bands of resolution under per-level allowances."""

from __future__ import annotations

import pydantic
import pytest

import solvers
from folding import FoldProblem, Status, levels_from_frontier


def two_level_problem(total: int = 10_000) -> FoldProblem:
    """12 raw leaves of 100 tokens; L1s of 30 over pairs; L2s of 40 over three L1s each."""
    leaves = [{"id": f"m{i}", "tokens": 100} for i in range(12)]
    l1 = [
        {"id": f"a{j}", "level": 1, "tokens": 30, "children": [f"m{2 * j}", f"m{2 * j + 1}"]}
        for j in range(6)
    ]
    l2 = [
        {"id": f"b{j}", "level": 2, "tokens": 40, "children": [f"a{3 * j + x}" for x in range(3)]}
        for j in range(2)
    ]
    return FoldProblem.model_validate(
        {"leaves": leaves, "summaries": l1 + l2, "budget": {"total": total, "target": total}}
    )


def solve(problem: FoldProblem, *budgets: int) -> tuple[Status, list[int], int]:
    result = solvers.solve(problem, method="threshold-pyramid", level_budgets=budgets)
    levels = levels_from_frontier(problem, result.frontier).tolist()
    assert result.tokens is not None
    return result.status, levels, result.tokens


def test_the_newest_band_opens_first_and_the_first_misfit_ends_it() -> None:
    # allowance of L1 and above: 90 + 40; the L2s cost 80, opening b1 adds 90 - 40
    status, levels, tokens = solve(two_level_problem(), 90, 40)
    assert status is Status.FEASIBLE
    assert levels == [2] * 6 + [1] * 6
    assert tokens == 40 + 3 * 30


def test_small_allowances_keep_the_coarsest_and_large_ones_open_everything() -> None:
    assert solve(two_level_problem(), 60, 40)[1] == [2] * 12
    assert solve(two_level_problem(), 200, 40)[1] == [1] * 12


def test_unused_coarse_allowance_flows_down() -> None:
    # L1's own 50 cannot pay for three L1s (90); the 40 L2 no longer spends on b1 can
    assert solve(two_level_problem(), 50, 80)[1] == [2] * 6 + [1] * 6


def test_bands_shrink_until_the_wall_holds() -> None:
    problem = two_level_problem(total=100)
    status, levels, tokens = solve(problem, 200, 40)
    assert status is Status.FEASIBLE
    assert levels == [2] * 12 and tokens == 80


def test_a_floor_above_the_wall_is_over_budget_with_produce_requests() -> None:
    result = solvers.solve(two_level_problem(total=50), method="threshold-pyramid")
    assert result.status is Status.OVER_BUDGET
    assert result.tokens == 80
    assert result.produce  # a merge of the two L2s would help


def test_negative_allowances_are_rejected() -> None:
    with pytest.raises(pydantic.ValidationError, match="level_budgets"):
        solvers.get("threshold-pyramid", level_budgets=(10, -1))
