"""Objectives computed independently of any solver."""

from __future__ import annotations

import numpy as np
import numpy.typing as npt

from .model import FoldProblem, Frontier
from .render import levels_from_frontier

__all__ = ["fidelity_loss", "fidelity_weights"]

DEFAULT_ALPHA = 0.7


def fidelity_weights(problem: FoldProblem, alpha: float = DEFAULT_ALPHA) -> npt.NDArray[np.float64]:
    """Per-leaf weight ``salience * age**-alpha * raw_tokens`` (age 1 = newest leaf).

    Age is counted from the newest leaf in the messages the leaves stand for
    (:attr:`Leaf.span`, 1 each by default: then in leaves), to the newest message
    of each leaf, so the weights do not depend on the budget and shift only by the
    appended leaves. ``raw_tokens`` is :attr:`Leaf.raw_tokens` (the leaf's tokens by
    default). A leaf with :attr:`Leaf.parts` weighs ``salience * sum_j part_j *
    age_j**-alpha``, each part at the age of the unit it is: what those units weigh
    as leaves of their own.
    """
    idx = problem.index
    kept = idx.weights.get(alpha)
    if kept is not None:
        return kept.copy()
    span = idx.span
    if bool((span == 1).all()):
        age = np.arange(idx.n, 0, -1, dtype=np.float64)
    else:  # messages after each leaf, plus one
        after = np.concatenate([np.cumsum(span[::-1])[::-1][1:], [0]])
        age = (after + 1).astype(np.float64)
    weights = idx.salience * age ** (-alpha) * idx.raw_tokens
    if idx.parted.size:
        leaf, later, tokens = idx.parts
        each = tokens * (age[leaf] + later) ** (-alpha)
        summed = np.bincount(leaf, weights=each, minlength=idx.n)
        weights[idx.parted] = idx.salience[idx.parted] * summed[idx.parted]
    idx.weights[alpha] = weights
    return weights.copy()


def fidelity_loss(problem: FoldProblem, frontier: Frontier, alpha: float = DEFAULT_ALPHA) -> float:
    """Fidelity lost by folding: ``sum_i salience_i * age_i**-alpha * raw_tokens_i * level_i``.

    Lower is better; 0 for the all-raw frontier. This is the objective the
    ``exact`` solver minimises and the yardstick every solver is compared on.

    Examples
    --------
    >>> from folding.testing import chronicle
    >>> p = chronicle(12, chunk=6, leaf_tokens=100)
    >>> fidelity_loss(p, {}) == 0.0
    True
    >>> round(fidelity_loss(p, {f"m{i}": 1 for i in range(6)}, alpha=0.0))
    600
    """
    levels = levels_from_frontier(problem, frontier)
    return float(fidelity_weights(problem, alpha) @ levels)
