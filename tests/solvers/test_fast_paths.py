"""Fast paths agree with the general code they shortcut: the forest of a laminar
hierarchy, and kv-stable's scalar ideal cut."""

from __future__ import annotations

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from folding import FoldProblem, Leaf, render_levels
from folding.testing import random_problem
from folding.testing.strategies import problems
from solvers._forest import Forest
from solvers.kv_stable import ideal_cut


def both(problem: FoldProblem) -> tuple[np.ndarray, np.ndarray, int, int]:
    forest = Forest(problem)
    fast = ideal_cut(problem, forest, scalar=True)
    slow = ideal_cut(problem, forest, scalar=False)
    assert render_levels(problem, fast.levels).total == fast.tokens  # the running total
    return fast.levels, slow.levels, fast.tokens, slow.tokens


@settings(max_examples=60, deadline=None)
@given(problems(feasible=True))
def test_scalar_fold_matches_the_per_leaf_fold_on_trees(problem: FoldProblem) -> None:
    if not Forest(problem).whole:
        return  # the scalar fold is for forests that hold the whole hierarchy
    fast, slow, fast_tokens, slow_tokens = both(problem)
    assert fast.tolist() == slow.tolist() and fast_tokens == slow_tokens


@settings(max_examples=15, deadline=None)
@given(st.integers(0, 10_000), st.integers(2, 6), st.integers(0, 4))
def test_scalar_fold_matches_on_seeded_histories(seed: int, pins: int, locks: int) -> None:
    problem = random_problem(seed, n_leaves=150, n_pins=pins, n_locks=locks)
    assert Forest(problem).whole
    fast, slow, fast_tokens, slow_tokens = both(problem)
    assert fast.tolist() == slow.tolist() and fast_tokens == slow_tokens


@settings(max_examples=40, deadline=None)
@given(problems())
def test_a_laminar_hierarchy_is_its_own_forest(problem: FoldProblem) -> None:
    forest = Forest(problem)
    if not problem.hierarchy.is_laminar:
        return
    cover, kept, children = forest._laminar_part(problem)
    assert (cover == forest.cover).all() and (kept == forest.kept).all()
    assert children == forest.children


@settings(max_examples=10, deadline=None)
@given(st.integers(0, 10_000), st.integers(0, 4))
def test_seeded_histories_get_the_same_forest_either_way(seed: int, pins: int) -> None:
    problem = random_problem(seed, n_leaves=120, n_pins=pins)
    forest = Forest(problem)
    cover, kept, children = forest._laminar_part(problem)
    assert (cover == forest.cover).all() and (kept == forest.kept).all()
    assert children == forest.children


def _grown(problem: FoldProblem, extra: list[str]) -> dict[str, object]:
    new = tuple(Leaf(id=x, tokens=50 + i, zone="tail") for i, x in enumerate(extra))
    return {
        "leaves": problem.leaves + new,
        "summaries": problem.summaries,
        "budget": problem.budget,
    }


@settings(max_examples=30, deadline=None)
@given(problems(), st.integers(0, 5))
def test_an_extended_hierarchy_equals_a_fresh_one(problem: FoldProblem, extra: int) -> None:
    data = _grown(problem, [f"new{i}" for i in range(extra)])
    reused = FoldProblem.model_validate(data, context={"extends": problem}).hierarchy
    fresh = FoldProblem.model_validate(data).hierarchy
    assert reused.span_first is problem.hierarchy.span_first  # reused, not rebuilt
    assert reused.leaf_index == fresh.leaf_index and reused.depth == fresh.depth
    for name in ("span_first", "span_last", "cover", "avail", "leaf_tokens", "summary_level"):
        assert np.array_equal(getattr(reused, name), getattr(fresh, name)), name


def test_an_extension_still_rejects_a_clashing_id() -> None:
    import pytest

    from folding.exceptions import DuplicateIdError

    problem = random_problem(1, n_leaves=40)
    data = _grown(problem, [problem.leaves[0].id])
    with pytest.raises(DuplicateIdError, match=problem.leaves[0].id):
        FoldProblem.model_validate(data, context={"extends": problem})
