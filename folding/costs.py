"""The cost table: what each leaf costs at each fold level, sharing made explicit.

A leaf shown at level ``k`` is represented by its level-``k`` ancestor, whose
recall costs ``tokens`` once for all the leaves it represents. The table
therefore holds, per leaf and level: the representing node, that node's
tokens, how many leaves share it (its non-protected covered leaves: protected
leaves render raw beside the recall and pay their own raw cost), and the
amortised share ``tokens / shared_by``. For any valid frontier ``F``::

    render(problem, F).total == fixed_tokens + sum_i amortised[i, F[i]]

up to floating-point rounding (exact in the integer ``tokens`` form, since
each unit is paid once).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from .hierarchy import AMBIGUOUS, NONE
from .model import FoldProblem

__all__ = ["CostTable"]

IntArray = npt.NDArray[np.int64]
FloatArray = npt.NDArray[np.float64]


@dataclass(frozen=True, eq=False)
class CostTable:
    """Leaves x levels cost arrays of a problem.

    Attributes
    ----------
    unit : ndarray of int64, shape (n, depth + 1)
        Node index representing leaf ``i`` at level ``k``: the leaf itself at 0,
        ``n + summary`` above; ``-1`` when no summary of that level covers the
        leaf, ``-2`` when several do (a DAG: the frontier decides).
    tokens : ndarray of int64, shape (n, depth + 1)
        Tokens of that unit, ``-1`` where ``unit < 0``.
    shared_by : ndarray of int64, shape (n, depth + 1)
        Leaves sharing the unit (1 at level 0), 0 where ``unit < 0``.
    amortised : ndarray of float64, shape (n, depth + 1)
        ``tokens / shared_by``; NaN where ``unit < 0``.
    """

    unit: IntArray
    tokens: IntArray
    shared_by: IntArray
    amortised: FloatArray

    @classmethod
    def build(cls, problem: FoldProblem) -> CostTable:
        """Build the table of ``problem``."""
        h = problem.hierarchy
        idx = problem.index
        n, depth = idx.n, h.depth
        unit = np.full((n, depth + 1), NONE, dtype=np.int64)
        unit[:, 0] = np.arange(n)
        cover = h.cover.T  # (n, depth + 1)
        known = cover[:, 1:] >= 0
        unit[:, 1:] = np.where(known, cover[:, 1:] + n, cover[:, 1:])
        unit[:, 1:][cover[:, 1:] == AMBIGUOUS] = AMBIGUOUS
        free_prefix = np.concatenate([[0], np.cumsum(~idx.protected)])
        members = free_prefix[h.span_last + 1] - free_prefix[h.span_first]
        share = np.concatenate([np.ones(n, dtype=np.int64), members])
        ok = unit >= 0
        safe = np.where(ok, unit, 0)
        tokens = np.where(ok, idx.node_tokens[safe], -1)
        shared_by = np.where(ok, share[safe], 0)
        with np.errstate(divide="ignore", invalid="ignore"):
            amortised = np.where(ok & (shared_by > 0), tokens / np.maximum(shared_by, 1), np.nan)
        return cls(unit, tokens, shared_by, amortised)

    def frontier_tokens(self, problem: FoldProblem, levels: IntArray) -> float:
        """Amortised total of a level array; equals the rendered total on valid frontiers."""
        rows = np.arange(len(levels))
        return float(problem.fixed_tokens + self.amortised[rows, levels].sum())
