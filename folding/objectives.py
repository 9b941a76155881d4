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

    Age is counted in leaves from the newest, so the weights do not depend on
    the budget and shift only by the appended leaves.
    """
    idx = problem.index
    age = np.arange(idx.n, 0, -1, dtype=np.float64)
    return idx.salience * age ** (-alpha) * idx.leaf_tokens


def fidelity_loss(problem: FoldProblem, frontier: Frontier, alpha: float = DEFAULT_ALPHA) -> float:
    """Fidelity lost by folding: ``sum_i salience_i * age_i**-alpha * raw_tokens_i * level_i``.

    Lower is better; 0 for the all-raw frontier. This is the objective the
    ``exact`` solver minimises and the yardstick every solver is compared on.

    Examples
    --------
    >>> from folding import chronicle
    >>> p = chronicle(12, chunk=6, leaf_tokens=100)
    >>> fidelity_loss(p, {}) == 0.0
    True
    >>> round(fidelity_loss(p, {f"m{i}": 1 for i in range(6)}, alpha=0.0))
    600
    """
    levels = levels_from_frontier(problem, frontier)
    return float(fidelity_weights(problem, alpha) @ levels)
