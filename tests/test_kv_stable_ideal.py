"""kv-stable's ideal cut: the scalar fold gives the same frontier as the per-leaf one."""

from __future__ import annotations

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from folding import FoldProblem, random_problem
from folding.testing.strategies import problems
from solvers._forest import Forest
from solvers.kv_stable import ideal_cut


def both(problem: FoldProblem) -> tuple[np.ndarray, np.ndarray, int, int]:
    forest = Forest(problem)
    fast = ideal_cut(problem, forest, scalar=True)
    slow = ideal_cut(problem, forest, scalar=False)
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
