"""A leaf that stands for several units (``Leaf.span``, ``raw_tokens``, ``parts``).

The windowed compile states an old region as a few leaves, each a memory standing
for the chunks under it. Folding weighs such a leaf exactly as those chunks weigh as
leaves of their own when it is given their ``parts``; these tests hold that, and
that malformed parts are refused naming the leaf.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from folding import FoldProblem, TokenCostError, fidelity_weights


def _problem(leaves: list[dict[str, Any]]) -> FoldProblem:
    return FoldProblem.model_validate({"leaves": leaves, "budget": {"total": 10**9}})


@given(
    chunks=st.lists(st.integers(0, 5000), min_size=2, max_size=12),
    before=st.integers(0, 5),
    after=st.integers(0, 5),
    alpha=st.sampled_from([0.0, 0.5, 0.7, 1.3]),
    data=st.data(),
)
def test_a_leaf_with_parts_weighs_what_its_units_weigh(
    chunks: list[int], before: int, after: int, alpha: float, data: st.DataObject
) -> None:
    lo = data.draw(st.integers(0, len(chunks) - 2))
    hi = data.draw(st.integers(lo + 1, len(chunks) - 1))
    others = [{"id": f"b{i}", "tokens": 10 + i} for i in range(before)]
    tail = [{"id": f"a{i}", "tokens": 7 + i} for i in range(after)]
    fine = _problem(others + [{"id": f"c{i}", "tokens": t} for i, t in enumerate(chunks)] + tail)
    parts = tuple(chunks[lo : hi + 1])
    merged = [{"id": f"c{i}", "tokens": t} for i, t in enumerate(chunks) if not lo <= i <= hi]
    merged.insert(lo, {"id": "M", "tokens": 1, "span": len(parts), "parts": list(parts)})
    coarse = _problem(others + merged + tail)
    w_fine, w_coarse = fidelity_weights(fine, alpha), fidelity_weights(coarse, alpha)
    at = before + lo
    assert w_coarse[at] == pytest.approx(w_fine[at : at + len(parts)].sum(), rel=1e-12)
    # every other leaf keeps its weight: ages count the units the merged leaf stands for
    np.testing.assert_allclose(
        np.delete(w_coarse, at), np.delete(w_fine, range(at, at + len(parts))), rtol=1e-12
    )
    assert coarse.index.raw_tokens[at] == sum(parts)


def test_parts_must_match_the_span_and_the_raw_tokens() -> None:
    with pytest.raises(TokenCostError, match="'M' has 2 parts but span 3"):
        _problem([{"id": "M", "tokens": 5, "span": 3, "parts": [1, 2]}])
    with pytest.raises(TokenCostError, match="raw_tokens 9 but its parts sum to 3"):
        _problem([{"id": "M", "tokens": 5, "span": 2, "parts": [1, 2], "raw_tokens": 9}])
    ok = _problem([{"id": "M", "tokens": 5, "span": 2, "parts": [1, 2], "raw_tokens": 3}])
    assert ok.leaves[0].parts == (1, 2)


def test_a_plain_leaf_dumps_as_it_always_did() -> None:
    p = _problem([{"id": "m", "tokens": 5}])
    assert p.model_dump(mode="json")["leaves"] == [
        {"id": "m", "tokens": 5, "salience": 1.0, "zone": "middle"}
    ]


def _parted(k: int) -> dict[str, Any]:
    return {"id": f"M{k}", "tokens": 5, "span": 3, "parts": [k + 1, 2 * k + 1, 7]}


@given(
    kept=st.integers(1, 4),
    dropped=st.integers(0, 2),
    added=st.integers(0, 3),
    alpha=st.sampled_from([0.0, 0.7]),
)
def test_a_problem_extending_another_reads_the_parts_a_fresh_one_reads(
    kept: int, dropped: int, added: int, alpha: float
) -> None:
    """Leaves carried from the extended problem (the same objects) keep their parts
    array; the problem's parts and weights equal those of the same problem built
    from scratch, whatever stayed, went or came."""
    first = _problem([_parted(k) for k in range(dropped + kept)])
    fidelity_weights(first, alpha)  # its parts read, so there are arrays to carry
    leaves = [*first.leaves[dropped:], *(_parted(100 + k) for k in range(added))]
    data = {"leaves": leaves, "budget": {"total": 10**9}}
    grown = FoldProblem.model_validate(data, context={"extends": first})
    fresh = _problem([leaf if isinstance(leaf, dict) else leaf.model_dump() for leaf in leaves])
    for a, b in zip(grown.index.parts, fresh.index.parts, strict=True):
        assert np.array_equal(a, b)
    assert np.array_equal(fidelity_weights(grown, alpha), fidelity_weights(fresh, alpha))


def test_an_extension_still_checks_the_parts_of_its_new_leaves() -> None:
    first = _problem([_parted(0)])
    bad = {"id": "N", "tokens": 5, "span": 3, "parts": [1, 2]}
    with pytest.raises(TokenCostError, match="'N' has 2 parts but span 3"):
        FoldProblem.model_validate(
            {"leaves": [*first.leaves, bad], "budget": {"total": 10**9}},
            context={"extends": first},
        )
