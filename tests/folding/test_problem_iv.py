"""Every invalid input raises a typed error naming the offending id and the fix."""

from __future__ import annotations

from typing import Any

import pytest
from pydantic import ValidationError

from folding import (
    BudgetError,
    ContiguityError,
    CycleError,
    DuplicateIdError,
    FoldProblem,
    InvalidProblemError,
    LevelError,
    PinConflictError,
    TokenCostError,
    UnknownIdError,
    ZoneError,
)


def base(**extra: Any) -> dict[str, Any]:
    data: dict[str, Any] = {
        "leaves": [{"id": f"m{i}", "tokens": 100} for i in range(6)],
        "summaries": [
            {"id": "A", "level": 1, "tokens": 20, "children": ["m0", "m1"]},
            {"id": "B", "level": 1, "tokens": 20, "children": ["m2", "m3"]},
            {"id": "AB", "level": 2, "tokens": 30, "children": ["A", "B"]},
        ],
        "budget": {"total": 1000},
    }
    data.update(extra)
    return data


def with_summaries(*summaries: dict[str, Any]) -> dict[str, Any]:
    return base(summaries=list(summaries))


CASES = [
    (
        base(leaves=[{"id": "m0", "tokens": 1}, {"id": "m0", "tokens": 2}], summaries=[]),
        DuplicateIdError,
        "leaf id 'm0' appears twice",
        "m0",
    ),
    (
        with_summaries({"id": "m1", "level": 1, "tokens": 5, "children": ["m0"]}),
        DuplicateIdError,
        "used by both a leaf and a summary",
        "m1",
    ),
    (
        with_summaries({"id": "A", "level": 1, "tokens": 5, "children": ["m0", "m0"]}),
        DuplicateIdError,
        "lists child 'm0' twice",
        "A",
    ),
    (
        with_summaries({"id": "A", "level": 1, "tokens": 5, "children": ["m0", "ghost"]}),
        UnknownIdError,
        "names child 'ghost'",
        "A",
    ),
    (
        with_summaries(
            {"id": "A", "level": 2, "tokens": 5, "children": ["B"]},
            {"id": "B", "level": 2, "tokens": 5, "children": ["A"]},
        ),
        CycleError,
        "summaries form a cycle: B -> A -> B",
        "B",
    ),
    (
        with_summaries({"id": "A", "level": 2, "tokens": 5, "children": ["m0"]}),
        LevelError,
        "is level 2 but child 'm0' is a leaf",
        "A",
    ),
    (
        with_summaries(
            {"id": "A", "level": 1, "tokens": 5, "children": ["m0"]},
            {"id": "C", "level": 3, "tokens": 5, "children": ["A"]},
        ),
        LevelError,
        "exactly one level above",
        "C",
    ),
    (
        with_summaries(
            {"id": "A", "level": 1, "tokens": 5, "children": ["m0"]},
            {"id": "B", "level": 1, "tokens": 5, "children": ["A"]},
        ),
        LevelError,
        "an L1 summarises leaves only",
        "B",
    ),
    (
        with_summaries({"id": "A", "level": 0, "tokens": 5, "children": ["m0"]}),
        LevelError,
        "level must be an integer >= 1",
        "A",
    ),
    (
        with_summaries({"id": "A", "level": 1, "tokens": 5, "children": ["m0", "m2"]}),
        ContiguityError,
        "leaf 'm1' lies inside its span",
        "A",
    ),
    (
        with_summaries(
            {"id": "A", "level": 1, "tokens": 5, "children": ["m0"]},
            {"id": "B", "level": 1, "tokens": 5, "children": ["m2"]},
            {"id": "AB", "level": 2, "tokens": 5, "children": ["A", "B"]},
        ),
        ContiguityError,
        "summary 'AB' covers a non-contiguous run",
        "AB",
    ),
    (
        base(leaves=[{"id": "m0", "tokens": -1}], summaries=[]),
        TokenCostError,
        "non-negative integer",
        "m0",
    ),
    (
        base(leaves=[{"id": "m0", "tokens": 2.5}], summaries=[]),
        TokenCostError,
        "non-negative integer",
        "m0",
    ),
    (
        with_summaries({"id": "A", "level": 1, "tokens": 1.0, "children": ["m0"]}),
        TokenCostError,
        "summary 'A'",
        "A",
    ),
    (
        base(fixed_tokens=-3),
        TokenCostError,
        "fixed_tokens",
        "fixed_tokens",
    ),
    (
        base(pins=[{"leaves": ["m0"], "level": 1, "max_level": 0}]),
        PinConflictError,
        "contradicts itself",
        "m0",
    ),
    (
        base(pins=[{"leaves": ["m0"], "min_level": 2, "max_level": 1}]),
        PinConflictError,
        "min_level <= max_level",
        "m0",
    ),
    (base(pins=[{"leaves": ["zz"]}]), UnknownIdError, "pin names 'zz'", "zz"),
    (base(pins=[{"leaves": ["A"]}]), UnknownIdError, "pins apply to leaf ids", "A"),
    (base(locks=["zz"]), UnknownIdError, "lock names 'zz'", "zz"),
    (base(previous={"zz": 1}), UnknownIdError, "previous frontier names 'zz'", "zz"),
    (base(previous={"m0": -1}), LevelError, "levels are ints >= 0", "m0"),
    (base(budget={"total": 100, "target": 200}), BudgetError, "must lie in [0, total=100]", None),
    (base(budget={"total": 100.5}), BudgetError, "integer number of tokens", None),
    (
        base(
            leaves=[{"id": "a", "tokens": 1}, {"id": "b", "tokens": 1, "zone": "head"}],
            summaries=[],
        ),
        ZoneError,
        "head leaves must be the oldest",
        "b",
    ),
    (
        base(
            leaves=[{"id": "a", "tokens": 1, "zone": "tail"}, {"id": "b", "tokens": 1}],
            summaries=[],
        ),
        ZoneError,
        "tail leaves must be the newest",
        "b",
    ),
]


@pytest.mark.parametrize(("data", "error", "match", "node"), CASES)
def test_problem_iv(
    data: dict[str, Any], error: type[InvalidProblemError], match: str, node: str | None
) -> None:
    with pytest.raises(error, match=match.replace("[", r"\[").replace("]", r"\]")) as info:
        FoldProblem.model_validate(data)
    assert isinstance(info.value, InvalidProblemError)
    assert info.value.node == node


def test_type_errors_stay_pydantic_errors_naming_the_field() -> None:
    data = base()
    data["leaves"][0]["salience"] = 0.0
    with pytest.raises(ValidationError, match="salience"):
        FoldProblem.model_validate(data)
    with pytest.raises(ValidationError, match="extra_field"):
        FoldProblem.model_validate(base(extra_field=1))


def test_target_defaults_to_ninety_percent() -> None:
    p = FoldProblem.model_validate(base(budget={"total": 30000}))
    assert p.budget.target == 27000
    assert p.budget.wall == 30600


def test_conflicting_pins_are_an_infeasibility_not_an_error() -> None:
    p = FoldProblem.model_validate(
        base(pins=[{"leaves": ["m0"]}, {"leaves": ["m0", "m1"], "min_level": 1}])
    )
    (conflict,) = p.conflicts()
    assert conflict.leaf == "m0"
    assert conflict.available == (0, 1, 2)
    assert conflict.constraints == ("pin(raw)", "pin(min_level=1)")
    assert "leave no level" in str(conflict)


def test_lock_on_unavailable_level_is_a_conflict() -> None:
    p = FoldProblem.model_validate(base(previous={"m5": 1}, locks=["m5"]))
    (conflict,) = p.conflicts()
    assert conflict.leaf == "m5" and conflict.constraints == ("lock@1",)
