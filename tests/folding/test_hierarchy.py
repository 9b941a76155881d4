"""Hierarchy views and the cost table on a hand-built example."""

from __future__ import annotations

import numpy as np

from folding import CostTable, FoldProblem
from folding.hierarchy import AMBIGUOUS, NONE


def example() -> FoldProblem:
    return FoldProblem.model_validate(
        {
            "leaves": [{"id": f"m{i}", "tokens": 100 + i} for i in range(7)],
            "summaries": [
                {"id": "A", "level": 1, "tokens": 30, "children": ["m0", "m1", "m2"]},
                {"id": "B", "level": 1, "tokens": 20, "children": ["m3", "m4"]},
                {"id": "AB", "level": 2, "tokens": 40, "children": ["A", "B"]},
                {"id": "X", "level": 1, "tokens": 10, "children": ["m4", "m5"]},
            ],
            "pins": [{"leaves": ["m1"]}],
            "budget": {"total": 1000},
        }
    )


def test_graph_edges_point_child_to_parent() -> None:
    g = example().hierarchy.graph
    assert set(g.successors("m0")) == {"A"}
    assert set(g.successors("m4")) == {"B", "X"}
    assert set(g.predecessors("AB")) == {"A", "B"}
    assert g.nodes["AB"] == {"kind": "summary", "level": 2, "tokens": 40}
    assert g.nodes["m6"]["kind"] == "leaf"


def test_spans_cover_and_ancestors() -> None:
    h = example().hierarchy
    assert h.covered_leaves("AB") == ("m0", "m1", "m2", "m3", "m4")
    assert h.ancestors_at("m4", 1) == ("B", "X")
    assert h.ancestors_at("m0", 2) == ("AB",)
    assert h.ancestors_at("m6", 1) == ()
    assert not h.is_laminar
    assert h.cover[1].tolist() == [0, 0, 0, 1, AMBIGUOUS, 3, NONE]
    assert h.avail.tolist() == [2, 2, 2, 2, 2, 1, 0]
    assert h.roots() == ("AB", "X", "m6")
    assert h.depth == 2


def test_cost_table_makes_sharing_explicit() -> None:
    p = example()
    t = CostTable.build(p)
    n = p.n_leaves
    # m1 is pinned raw: a hole, so A is shared by m0 and m2 only
    assert t.unit[0].tolist() == [0, n + 0, n + 2]
    assert t.shared_by[0].tolist() == [1, 2, 4]
    assert t.tokens[0].tolist() == [100, 30, 40]
    assert np.isclose(t.amortised[0, 1], 15.0)
    assert t.unit[4, 1] == AMBIGUOUS and np.isnan(t.amortised[4, 1])
    assert t.unit[6].tolist() == [6, NONE, NONE]
