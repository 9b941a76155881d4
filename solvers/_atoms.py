"""Atoms: the compact variable set of the integer programs.

Consecutive non-protected leaves covered by exactly the same set of
summaries must share one representation in every valid frontier (a summary
over one covers the other; with none chosen both are raw), so they form one
*atom*. A frontier is then: for every atom, raw or exactly one selectable
summary over it. Atoms number about as many as the L1 summaries plus the
uncovered leaves, far fewer than the messages.
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from folding import FoldProblem
from folding.frontiers import selectable_summaries

IntArray = npt.NDArray[np.int64]
FloatArray = npt.NDArray[np.float64]


@dataclass(frozen=True)
class AtomModel:
    """Atoms and selectable summaries of a problem.

    Attributes
    ----------
    atom_start, atom_stop : ndarray of int64
        Leaf ranges ``[start, stop)`` of each atom (may contain protected holes
        only at the edges: holes split atoms).
    atom_leaves : list of ndarray
        Non-protected leaf indices of each atom.
    raw_ok : ndarray of bool
        The atom may be shown raw (every leaf allows level 0).
    raw_tokens : ndarray of int64
        Raw tokens of each atom.
    covers : list of list of int
        Selectable summaries over each atom.
    selectable : ndarray of int64
        Summary indices that may be chosen (every non-protected member allows
        the level; at least one non-protected member).
    constant_tokens : int
        Fixed tokens plus the raw tokens of protected leaves.
    """

    atom_start: IntArray
    atom_stop: IntArray
    atom_leaves: list[IntArray]
    raw_ok: npt.NDArray[np.bool_]
    raw_tokens: IntArray
    covers: list[list[int]]
    selectable: IntArray
    constant_tokens: int

    @property
    def n_atoms(self) -> int:
        """Number of atoms."""
        return len(self.atom_leaves)

    def levels(self, problem: FoldProblem, raw: list[bool], chosen: list[int]) -> IntArray:
        """Leaf levels from per-atom raw flags and the chosen summaries."""
        h = problem.hierarchy
        levels = np.zeros(problem.index.n, dtype=np.int64)
        free = ~problem.index.protected
        for j in chosen:
            a, b = int(h.span_first[j]), int(h.span_last[j]) + 1
            seg = np.arange(a, b)[free[a:b]]
            levels[seg] = int(h.summary_level[j])
        return levels


def build_atoms(problem: FoldProblem) -> AtomModel:
    """Split the non-protected leaves into atoms and list their selectable summaries."""
    h = problem.hierarchy
    idx = problem.index
    n = idx.n
    free = ~idx.protected
    # selectable summaries: every non-protected member allows the level
    selectable = np.flatnonzero(selectable_summaries(problem)).astype(np.int64)
    # sweep: the covering set of each leaf changes only at span starts and ends
    starts: dict[int, list[int]] = {}
    stops: dict[int, list[int]] = {}
    for j in selectable.tolist():
        starts.setdefault(int(h.span_first[j]), []).append(j)
        stops.setdefault(int(h.span_last[j]) + 1, []).append(j)
    active: set[int] = set()
    boundaries = sorted(set(starts) | set(stops) | {0, n})
    atom_start: list[int] = []
    atom_stop: list[int] = []
    atom_leaves: list[IntArray] = []
    covers: list[list[int]] = []
    for a, b in itertools.pairwise(boundaries):
        for j in stops.get(a, ()):
            active.discard(j)
        for j in starts.get(a, ()):
            active.add(j)
        if a >= b:
            continue
        seg = np.arange(a, b)
        leaves = seg[free[a:b]]
        if leaves.size == 0:
            continue
        cover = sorted(active)
        if not cover:
            # uncovered leaves: each is its own atom (always raw)
            for leaf in leaves.tolist():
                atom_start.append(leaf)
                atom_stop.append(leaf + 1)
                atom_leaves.append(np.array([leaf], dtype=np.int64))
                covers.append([])
            continue
        # holes split a covered run into pieces that share the same cover
        pieces = np.split(leaves, np.flatnonzero(np.diff(leaves) > 1) + 1)
        for piece in pieces:
            atom_start.append(int(piece[0]))
            atom_stop.append(int(piece[-1]) + 1)
            atom_leaves.append(piece)
            covers.append(cover)
    raw_ok = np.array([bool((idx.lo[x] == 0).all()) for x in atom_leaves], dtype=np.bool_)
    raw_tokens = np.array([int(idx.leaf_tokens[x].sum()) for x in atom_leaves], dtype=np.int64)
    constant = problem.fixed_tokens + int(idx.leaf_tokens[idx.protected].sum())
    return AtomModel(
        np.asarray(atom_start, dtype=np.int64),
        np.asarray(atom_stop, dtype=np.int64),
        atom_leaves,
        raw_ok,
        raw_tokens,
        covers,
        selectable,
        constant,
    )
