"""Shared fixtures for the benchmarks: seeded, cached instances."""

from __future__ import annotations

from functools import cache

import numpy as np

from folding import FoldProblem, chronicle, random_problem

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


# Sizes of the solver benchmarks: 15k leaves ~ 800 L1 chunks and 2.8M tokens (a
# Mythos-sized store); 75k leaves ~ 3,300 summaries (a Sill-sized store).
SHAPES = {
    1_000: {"chunk_range": (12, 26), "mean_tokens": 190},
    15_000: {"chunk_range": (12, 26), "mean_tokens": 190},
    75_000: {"chunk_range": (20, 36), "mean_tokens": 190},
}


@cache
def store(n_leaves: int, budget: int = 200_000) -> FoldProblem:
    """A seeded conversation-shaped problem with a 200k wall and a 30-leaf raw tail."""
    shape = SHAPES[n_leaves]
    problem = random_problem(
        SEED % 10_000 + n_leaves,
        n_leaves=n_leaves,
        mean_tokens=shape["mean_tokens"],
        chunk_range=shape["chunk_range"],
        merge=6,
        recall_tokens=600,
        head=2,
        tail=30,
        budget_ratio=1.0,
    )
    data = problem.model_dump(mode="json")
    data["budget"] = {"total": budget}
    return FoldProblem.model_validate(data)


def warm(problem: FoldProblem, frontier: dict[str, int], budget: int) -> FoldProblem:
    """``problem`` carrying ``frontier`` under a new wall."""
    data = problem.model_dump(mode="json")
    data["previous"] = frontier
    data["budget"] = {"total": budget}
    return FoldProblem.model_validate(data)
