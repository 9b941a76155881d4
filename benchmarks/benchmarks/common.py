"""Shared fixtures for the benchmarks: seeded, cached instances."""

from __future__ import annotations

from functools import cache

import numpy as np

from folding import FoldProblem, chronicle

SEED = 0xDEADC0DE


@cache
def big_chronicle(n_leaves: int) -> FoldProblem:
    """A long history: 25-leaf chunks merged 6 at a time (75k leaves -> ~3,600 summaries)."""
    return chronicle(
        n_leaves, leaf_tokens=40, chunk=25, merge=6, recall_tokens=300, total=2_000_000, tail=200
    )


def mixed_levels(n_leaves: int) -> np.ndarray:
    """A realistic frontier shape: oldest at L4, then L2, then L1, newest third raw."""
    levels = np.zeros(n_leaves, dtype=np.int64)
    l4, l2, l1 = (n_leaves // 10) // 5400 * 5400, n_leaves // 3, 2 * n_leaves // 3
    l2, l1 = l2 // 150 * 150, l1 // 25 * 25
    levels[:l4] = 4
    levels[l4:l2] = 2
    levels[l2:l1] = 1
    return levels
