"""kv-stable's prepared-window transitions: ``goal_tokens`` aims the band at a future
window while the current wall stays, and ``strict_reach`` makes the trust region a
hard pace for the changes the wall does not force.

The scenario: 40 leaves of 100 tokens, an L1 of 20 tokens over each 5, the oldest 25
leaves carried folded (5 memories and 15 raw leaves: 1,600 tokens) under a wall of
2,500. Expected values are worked out from those numbers.
"""

from __future__ import annotations

from typing import Any

import solvers
from folding import FoldProblem, check_plan
from folding.testing import chronicle

CARRIED = {f"m{i}": 1 for i in range(25)}


def problem(**budget: int) -> FoldProblem:
    p = chronicle(40, leaf_tokens=100, chunk=5, recall_tokens=20, total=2_500, target=2_000)
    data = p.model_dump(mode="json")
    data["previous"] = CARRIED
    if budget:
        data["budget"] = budget
    return FoldProblem.model_validate(data)


def solve(p: FoldProblem, **options: Any) -> solvers.SolveResult:
    result = solvers.solve(p, method="kv-stable", **options)
    check_plan(p, result.frontier)  # raises on an invalid plan or one over the wall
    return result


def test_without_a_goal_the_carried_frontier_is_held() -> None:
    held = solve(problem())
    assert held.decision == "hold" and held.frontier == CARRIED and held.kv_cost == 0


def test_a_prepared_window_brings_the_request_under_it_while_the_wall_stays() -> None:
    result = solve(problem(), goal_tokens=1_000)
    # appended: every leaf under its L1 (8 x 20 tokens), the 5 memories shown kept
    assert result.decision == "append" and result.tokens == 160
    assert result.kv_cost == 3 * 20  # re-read from the first new memory on
    assert result.diagnostics["goal_tokens"] == 1_000
    assert result.diagnostics["goal_target"] == 2_000 * 1_000 // 2_500
    # once under the prepared window, it holds
    again = solve(problem_after(result.frontier), goal_tokens=1_000)
    assert again.decision == "hold" and again.kv_cost == 0


def problem_after(frontier: dict[str, int]) -> FoldProblem:
    data = problem().model_dump(mode="json")
    data["previous"] = frontier
    return FoldProblem.model_validate(data)


def test_a_goal_above_the_wall_changes_nothing() -> None:
    plain = solve(problem())
    roomy = solve(problem(), goal_tokens=10_000)
    assert (roomy.decision, roomy.frontier) == (plain.decision, plain.frontier)
    assert "goal_tokens" not in roomy.diagnostics


def test_a_hard_pace_takes_the_largest_step_that_fits_it() -> None:
    # the ideal cut (L1s over m0..m34, m35..m39 raw: 640 tokens) re-reads 540 tokens
    # from m25 on; at a pace of 530 the newest suffix that fits folds m30..m34 alone
    # (its memory and the raw m35..m39 after it: 520)
    result = solve(problem(), fold="ideal", goal_tokens=1_000, reach_tokens=530, strict_reach=True)
    assert result.decision == "suffix" and result.kv_cost == 520
    assert result.tokens == 5 * 20 + 5 * 100 + 20 + 5 * 100
    assert [result.frontier.get(f"m{i}", 0) for i in range(25, 40)] == [0] * 5 + [1] * 5 + [0] * 5


def test_a_hard_pace_no_step_fits_holds_where_a_soft_one_overrides() -> None:
    # appending re-reads its three new memories (60 tokens): within a pace of 60
    paced = solve(problem(), goal_tokens=1_000, reach_tokens=60, strict_reach=True)
    assert paced.decision == "append" and paced.kv_cost == 60
    # at 50 no change fits (every suffix of the ideal re-reads the raw tail after it)
    blocked = solve(problem(), goal_tokens=1_000, reach_tokens=50, strict_reach=True)
    assert blocked.decision == "blocked" and blocked.diagnostics["blocked"] == "reach-floor"
    assert blocked.frontier == CARRIED and blocked.kv_cost == 0
    # a soft trust region does not bound appending, and is overridden in the band
    soft = solve(problem(), goal_tokens=1_000, reach_tokens=50)
    assert soft.decision == "append" and soft.kv_cost == 60
    soft = solve(problem(), fold="ideal", goal_tokens=1_000, reach_tokens=50)
    assert soft.decision == "override" and soft.tokens is not None and soft.tokens <= 1_000


def test_the_wall_comes_before_the_pace() -> None:
    # 1,600 carried over a wall of 1,500: a forced change, made whatever it re-reads
    forced = solve(problem(total=1_500, target=1_200), reach_tokens=10, strict_reach=True)
    assert forced.decision in {"append", "override"}
    assert forced.tokens is not None and forced.tokens <= 1_500
