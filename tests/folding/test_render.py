"""The renderer: units, offsets, holes, DAG tiling and representation errors."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

from folding import FoldProblem, Layout, PlanViolation, render, render_levels
from folding.testing import chronicle


def problem(**extra: Any) -> FoldProblem:
    data: dict[str, Any] = {
        "leaves": [{"id": f"m{i}", "tokens": 10 * (i + 1)} for i in range(6)],
        "summaries": [
            {"id": "A", "level": 1, "tokens": 7, "children": ["m0", "m1", "m2"]},
            {"id": "B", "level": 1, "tokens": 8, "children": ["m3", "m4"]},
            {"id": "AB", "level": 2, "tokens": 9, "children": ["A", "B"]},
        ],
        "budget": {"total": 1000},
        "fixed_tokens": 5,
    }
    data.update(extra)
    return FoldProblem.model_validate(data)


def triples(layout: Layout) -> list[tuple[str, str, int, int]]:
    return [(u.kind, u.key, u.tokens, u.offset) for u in layout.units]


def test_all_raw_is_every_leaf_in_order() -> None:
    lay = render(problem(), {})
    assert triples(lay) == [
        ("raw", "m0", 10, 5),
        ("raw", "m1", 20, 15),
        ("raw", "m2", 30, 35),
        ("raw", "m3", 40, 65),
        ("raw", "m4", 50, 105),
        ("raw", "m5", 60, 155),
    ]
    assert lay.total == 215


def test_mixed_levels_render_one_unit_per_summary() -> None:
    lay = render(problem(), {"m0": 1, "m1": 1, "m2": 1, "m3": 1, "m4": 1})
    assert triples(lay) == [
        ("recall", "A", 7, 5),
        ("recall", "B", 8, 12),
        ("raw", "m5", 60, 20),
    ]
    lay2 = render(problem(), dict.fromkeys(["m0", "m1", "m2", "m3", "m4"], 2))
    assert triples(lay2) == [("recall", "AB", 9, 5), ("raw", "m5", 60, 14)]
    assert lay2.total == 74


def test_protected_hole_renders_raw_beside_the_recall() -> None:
    # m0 pinned raw: the recall of A sits at its first non-hole leaf, m1
    p = problem(pins=[{"leaves": ["m0"]}])
    lay = render(p, {"m1": 1, "m2": 1})
    assert triples(lay) == [
        ("raw", "m0", 10, 5),
        ("recall", "A", 7, 15),
        ("raw", "m3", 40, 22),
        ("raw", "m4", 50, 62),
        ("raw", "m5", 60, 112),
    ]
    # a hole in the middle of the span: the recall stays at the span's first leaf
    p = problem(pins=[{"leaves": ["m1"]}])
    lay = render(p, {"m0": 1, "m2": 1})
    assert [u.key for u in lay.units][:3] == ["A", "m1", "m3"]


def test_head_and_tail_leaves_are_holes() -> None:
    leaves: list[dict[str, Any]] = [{"id": f"m{i}", "tokens": 10} for i in range(4)]
    leaves[0]["zone"] = "head"
    leaves[3]["zone"] = "tail"
    p = problem(
        leaves=leaves,
        summaries=[{"id": "S", "level": 1, "tokens": 3, "children": ["m0", "m1", "m2", "m3"]}],
    )
    assert [u.key for u in render(p, {"m1": 1, "m2": 1}).units] == ["m0", "S", "m3"]


def test_unprotected_raw_leaf_inside_a_selected_summary_is_not_tileable() -> None:
    with pytest.raises(PlanViolation) as info:
        render(problem(), {"m0": 1, "m2": 1})
    assert info.value.rules == {"not-tileable"}
    assert info.value.violations[0].node == "m1"
    assert "summary 'A' (L1) is only partly selected" in str(info.value)


def test_level_without_summary_is_reported() -> None:
    with pytest.raises(PlanViolation) as info:
        render(problem(), {"m5": 1, "m0": 3})
    assert {(v.rule, v.node) for v in info.value.violations} == {
        ("no-summary", "m5"),
        ("no-summary", "m0"),
    }


def test_unknown_leaf_and_bad_levels() -> None:
    with pytest.raises(PlanViolation) as info:
        render(problem(), {"zz": 1, "m0": -1, "m1": 1.5})  # type: ignore[dict-item]
    assert {(v.rule, v.node) for v in info.value.violations} == {
        ("unknown-leaf", "zz"),
        ("bad-level", "m0"),
        ("bad-level", "m1"),
    }


def dag_problem() -> FoldProblem:
    # Two L1 families over m0..m3: {A: m0-m1, B: m2-m3} and {C: m0-m2}; D: m3 alone.
    return problem(
        leaves=[{"id": f"m{i}", "tokens": 100} for i in range(4)],
        summaries=[
            {"id": "A", "level": 1, "tokens": 30, "children": ["m0", "m1"]},
            {"id": "B", "level": 1, "tokens": 30, "children": ["m2", "m3"]},
            {"id": "C", "level": 1, "tokens": 25, "children": ["m0", "m1", "m2"]},
            {"id": "D", "level": 1, "tokens": 10, "children": ["m3"]},
        ],
    )


def test_dag_tiling_picks_the_cheapest_tiling() -> None:
    p = dag_problem()
    assert not p.hierarchy.is_laminar
    lay = render(p, dict.fromkeys(["m0", "m1", "m2", "m3"], 1))
    # tilings: A+B = 60, C+D = 35, A+... ; the cheapest wins
    assert [u.key for u in lay.units] == ["C", "D"]
    assert lay.total == 5 + 35
    assert [u.key for u in render(p, {"m0": 1, "m1": 1}).units] == ["A", "m2", "m3"]


def test_dag_overlap_is_rejected() -> None:
    p = dag_problem()
    with pytest.raises(PlanViolation) as info:
        render(p, {"m1": 1, "m2": 1})
    assert info.value.rules == {"not-tileable"}


def test_render_levels_matches_render_and_checks_shape() -> None:
    p = chronicle(90, total=10_000)
    levels = np.zeros(90, dtype=np.int64)
    levels[:36] = 2
    levels[36:42] = 1
    lay = render_levels(p, levels)
    assert [u.key for u in lay.units[:2]] == ["L2-0", "L1-6"]
    assert lay == render(p, {f"m{i}": int(v) for i, v in enumerate(levels) if v})
    with pytest.raises(ValueError, match="shape"):
        render_levels(p, levels[:10])


def test_layout_json_form() -> None:
    lay = render(problem(), {"m3": 1, "m4": 1})
    data = lay.to_dict()
    assert data["total"] == lay.total == 5 + 10 + 20 + 30 + 8 + 60
    assert data["units"][3] == {"kind": "recall", "key": "B", "tokens": 8, "offset": 65}
