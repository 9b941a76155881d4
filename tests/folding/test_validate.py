"""check_plan rejects each kind of invalid frontier with a message naming the rule."""

from __future__ import annotations

from typing import Any

import pytest

from folding import FoldProblem, PlanViolation, check_plan, is_valid


def problem(**extra: Any) -> FoldProblem:
    leaves: list[dict[str, Any]] = [{"id": f"m{i}", "tokens": 100} for i in range(8)]
    leaves[0]["zone"] = "head"
    leaves[7]["zone"] = "tail"
    data: dict[str, Any] = {
        "leaves": leaves,
        "summaries": [
            {"id": "A", "level": 1, "tokens": 20, "children": ["m0", "m1", "m2"]},
            {"id": "B", "level": 1, "tokens": 20, "children": ["m3", "m4"]},
            {"id": "C", "level": 1, "tokens": 20, "children": ["m5", "m6"]},
            {"id": "AB", "level": 2, "tokens": 30, "children": ["A", "B"]},
        ],
        "budget": {"total": 10_000},
    }
    data.update(extra)
    return FoldProblem.model_validate(data)


def rules(p: FoldProblem, frontier: dict[str, int], **kw: Any) -> set[tuple[str, str | None]]:
    with pytest.raises(PlanViolation) as info:
        check_plan(p, frontier, **kw)
    return {(v.rule, v.node) for v in info.value.violations}


def test_valid_frontier_returns_its_layout() -> None:
    p = problem()
    lay = check_plan(p, {"m1": 1, "m2": 1, "m3": 1, "m4": 1})  # m0 (head) is a hole of A
    assert [u.key for u in lay.units] == ["m0", "A", "B", "m5", "m6", "m7"]
    assert is_valid(p, {})


def test_zone_rule() -> None:
    assert rules(problem(), {"m0": 1, "m1": 1, "m2": 1}) == {("zone", "m0")}
    assert rules(problem(), {"m7": 1}) >= {("zone", "m7")}


def test_raw_pin_rule() -> None:
    p = problem(pins=[{"leaves": ["m3"]}])
    assert rules(p, {"m3": 1, "m4": 1}) == {("pin", "m3")}
    assert is_valid(p, {"m4": 1})  # m3 a hole of B


def test_pin_at_level_and_its_clamp() -> None:
    p = problem(pins=[{"leaves": ["m5"], "level": 2}])  # only L1 exists over m5: clamps to 1
    assert rules(p, {}) == {("pin", "m5")}
    assert is_valid(p, {"m5": 1, "m6": 1})
    with pytest.raises(PlanViolation, match="requires level 1"):
        check_plan(p, {})


def test_max_and_min_level_pins() -> None:
    p = problem(pins=[{"leaves": ["m3"], "max_level": 1}, {"leaves": ["m5"], "min_level": 1}])
    deep = {"m1": 2, "m2": 2, "m3": 2, "m4": 2, "m5": 1, "m6": 1}
    assert rules(p, deep) == {("pin", "m3")}
    assert rules(p, {"m3": 1, "m4": 1}) == {("pin", "m5")}
    assert is_valid(p, {"m3": 1, "m4": 1, "m5": 1, "m6": 1})


def test_lock_rule() -> None:
    p = problem(previous={"m5": 1, "m6": 1}, locks=["m5"])
    assert rules(p, {}) == {("lock", "m5")}
    assert is_valid(p, {"m5": 1, "m6": 1})
    p = problem(locks=["m3"])  # no previous frontier: locked raw
    assert ("lock", "m3") in rules(p, {"m3": 1, "m4": 1})


def test_representation_rules_flow_through() -> None:
    assert rules(problem(), {"m3": 1}) == {("not-tileable", "m4")}
    assert rules(problem(), {"m5": 2, "m6": 2}) == {("no-summary", "m5"), ("no-summary", "m6")}
    assert ("unknown-leaf", "x") in rules(problem(), {"x": 1})


def test_budget_rule_and_opt_out() -> None:
    p = problem(budget={"total": 500})
    with pytest.raises(PlanViolation, match=r"renders 800 tokens, over the wall budget.total=500"):
        check_plan(p, {})
    assert check_plan(p, {}, enforce_budget=False).total == 800


def test_violations_are_all_listed_in_leaf_order() -> None:
    p = problem(pins=[{"leaves": ["m5"]}])
    with pytest.raises(PlanViolation) as info:
        check_plan(p, {"m0": 1, "m1": 1, "m2": 1, "m5": 1, "m6": 1})
    nodes = [v.node for v in info.value.violations]
    assert nodes == ["m0", "m5"]
