"""Atoms: the compact variable set of the integer programs.

Consecutive non-protected leaves covered by exactly the same set of
summaries must share one representation in every valid frontier (a summary
over one covers the other; with none chosen both are raw), so they form one
*atom*. A frontier is then: for every atom, raw or exactly one selectable
summary over it. Atoms number about as many as the L1 summaries plus the
uncovered leaves, far fewer than the messages.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cached_property

import numpy as np
import numpy.typing as npt

from folding import FoldProblem
from folding._arrays import unique_sorted
from folding.frontiers import selectable_summaries

IntArray = npt.NDArray[np.int64]
FloatArray = npt.NDArray[np.float64]


@dataclass(frozen=True)
class AtomModel:
    """Atoms and selectable summaries of a problem.

    Attributes
    ----------
    atom_start, atom_stop : ndarray of int64
        Leaf ranges ``[start, stop)`` of each atom (holes split atoms, so an atom's
        leaves are exactly its range).
    raw_ok : ndarray of bool
        The atom may be shown raw (every leaf allows level 0).
    raw_tokens : ndarray of int64
        Raw tokens of each atom.
    selectable : ndarray of int64
        Summary indices that may be chosen (every non-protected member allows
        the level; at least one non-protected member).
    constant_tokens : int
        Fixed tokens plus the raw tokens of protected leaves.
    span_start, span_end : ndarray of int64
        Atom range ``[start, end)`` of each selectable summary.
    """

    atom_start: IntArray
    atom_stop: IntArray
    raw_ok: npt.NDArray[np.bool_]
    raw_tokens: IntArray
    selectable: IntArray
    constant_tokens: int
    span_start: IntArray
    span_end: IntArray

    @property
    def n_atoms(self) -> int:
        """Number of atoms."""
        return int(self.atom_start.size)

    @cached_property
    def atom_leaves(self) -> list[IntArray]:
        """Leaf indices of each atom."""
        return [
            np.arange(a, b, dtype=np.int64)
            for a, b in zip(self.atom_start.tolist(), self.atom_stop.tolist(), strict=True)
        ]

    @cached_property
    def covers(self) -> list[list[int]]:
        """Selectable summaries over each atom, in index order."""
        out: list[list[int]] = [[] for _ in range(self.n_atoms)]
        for j, a, b in zip(
            self.selectable.tolist(), self.span_start.tolist(), self.span_end.tolist(), strict=True
        ):
            for k in range(a, b):
                out[k].append(j)
        return out

    def atom_of(self, n: int) -> IntArray:
        """The atom of each of ``n`` leaves (-1: a protected leaf)."""
        out = np.full(n, -1, dtype=np.int64)
        if self.n_atoms:
            marks = np.zeros(n + 1, dtype=np.int64)
            np.add.at(marks, self.atom_start, 1)
            np.add.at(marks, self.atom_stop, -1)
            inside = np.cumsum(marks)[:n] > 0
            which = np.searchsorted(self.atom_start, np.arange(n), side="right") - 1
            out[inside] = which[inside]
        return out

    def levels(self, problem: FoldProblem, raw: list[bool], chosen: list[int]) -> IntArray:
        """Leaf levels from per-atom raw flags and the chosen summaries."""
        h = problem.hierarchy
        levels = np.zeros(problem.index.n, dtype=np.int64)
        free = ~problem.index.protected
        for j in chosen:
            a, b = int(h.span_first[j]), int(h.span_last[j]) + 1
            levels[a:b][free[a:b]] = int(h.summary_level[j])
        return levels


def build_atoms(problem: FoldProblem) -> AtomModel:
    """Split the non-protected leaves into atoms and list their selectable summaries.

    An atom is a maximal run of consecutive non-protected leaves inside one piece of
    the sweep over span starts and ends (the same covering set) when that set is
    not empty; an uncovered leaf is an atom of its own. Vectorised: linear in the
    leaves and summaries.
    """
    h = problem.hierarchy
    idx = problem.index
    n = idx.n
    free = ~idx.protected
    # selectable summaries: every non-protected member allows the level
    selectable = np.flatnonzero(selectable_summaries(problem)).astype(np.int64)
    first = h.span_first[selectable]
    stop = h.span_last[selectable] + 1
    boundaries = unique_sorted(np.concatenate([first, stop, [0, n]]))
    # how many selectable summaries cover each piece [boundaries[k], boundaries[k + 1])
    depth = np.zeros(boundaries.size, dtype=np.int64)
    np.add.at(depth, np.searchsorted(boundaries, first), 1)
    np.add.at(depth, np.searchsorted(boundaries, stop), -1)
    covered = np.cumsum(depth) > 0
    positions = np.flatnonzero(free).astype(np.int64)
    piece = np.searchsorted(boundaries, positions, side="right") - 1
    if positions.size:
        new = np.ones(positions.size, dtype=np.bool_)
        new[1:] = (
            (piece[1:] != piece[:-1]) | (positions[1:] - positions[:-1] > 1) | ~covered[piece[1:]]
        )
        starts = np.flatnonzero(new)
        atom_start = positions[starts]
        atom_stop = positions[np.append(starts[1:], positions.size) - 1] + 1
        bad = (idx.lo[positions] != 0).astype(np.int64)
        raw_ok = np.add.reduceat(bad, starts) == 0
        raw_tokens = np.add.reduceat(idx.leaf_tokens[positions], starts).astype(np.int64)
    else:
        atom_start = atom_stop = raw_tokens = np.zeros(0, dtype=np.int64)
        raw_ok = np.zeros(0, dtype=np.bool_)
    constant = problem.fixed_tokens + int(idx.leaf_tokens[idx.protected].sum())
    span_start = np.searchsorted(atom_start, first, side="left").astype(np.int64)
    span_end = np.searchsorted(atom_start, stop, side="left").astype(np.int64)
    return AtomModel(
        atom_start.astype(np.int64),
        atom_stop.astype(np.int64),
        raw_ok,
        raw_tokens,
        selectable,
        constant,
        span_start,
        span_end,
    )


_UNREACHABLE = float("inf")


def path_bounds(n_atoms: int, start: IntArray, end: IntArray, weight: npt.ArrayLike) -> FloatArray:
    """For each edge of the atom-boundary graph, the least summed weight of a path from
    boundary 0 to boundary ``n_atoms`` through it (inf when there is none).

    Edges run from boundary ``start`` to ``end > start``; a frontier is such a path
    (raw atoms and summaries). Two sweeps of the DAG, linear in the edges.
    """
    w = np.asarray(weight, dtype=np.float64)
    if not start.size:
        return np.zeros(0, dtype=np.float64)
    order = np.argsort(start, kind="stable").tolist()
    s, e, wl = start.tolist(), end.tolist(), w.tolist()
    ahead = [_UNREACHABLE] * (n_atoms + 1)
    ahead[0] = 0.0
    for k in order:  # by start: every edge into a boundary comes before the ones out
        v = ahead[s[k]] + wl[k]
        if v < ahead[e[k]]:
            ahead[e[k]] = v
    behind = path_least_after(n_atoms, start, end, w)
    out: FloatArray = np.asarray(ahead)[start] + w + np.asarray(behind)[end]
    return out


def path_least_after(
    n_atoms: int, start: IntArray, end: IntArray, weight: npt.ArrayLike
) -> list[float]:
    """For each atom boundary ``b``, the least summed weight of a path from ``b`` to
    boundary ``n_atoms`` (inf when there is none): the backward sweep of
    :func:`path_bounds`."""
    w = np.asarray(weight, dtype=np.float64)
    s, e, wl = start.tolist(), end.tolist(), w.tolist()
    behind = [_UNREACHABLE] * (n_atoms + 1)
    behind[n_atoms] = 0.0
    for k in np.argsort(-end, kind="stable").tolist():
        v = behind[e[k]] + wl[k]
        if v < behind[s[k]]:
            behind[s[k]] = v
    return behind


def path_min(
    n_atoms: int, order: list[int], start: list[int], end: list[int], weight: list[float]
) -> float:
    """The least summed weight of a path from boundary 0 to ``n_atoms`` (one forward
    sweep of :func:`path_bounds`; ``order`` sorts the edges by start)."""
    ahead = [_UNREACHABLE] * (n_atoms + 1)
    ahead[0] = 0.0
    for k in order:
        v = ahead[start[k]] + weight[k]
        if v < ahead[end[k]]:
            ahead[end[k]] = v
    return ahead[n_atoms]


def path_argmin(
    n_atoms: int, order: list[int], start: list[int], end: list[int], weight: list[float]
) -> list[int]:
    """The edges of a least-weight path from boundary 0 to ``n_atoms`` (the sweep of
    :func:`path_min`, remembering the edge into each boundary; ties keep the edge
    first in ``order``). Empty when boundary ``n_atoms`` is unreachable."""
    ahead = [_UNREACHABLE] * (n_atoms + 1)
    ahead[0] = 0.0
    via = [-1] * (n_atoms + 1)
    for k in order:
        v = ahead[start[k]] + weight[k]
        if v < ahead[end[k]]:
            ahead[end[k]] = v
            via[end[k]] = k
    edges: list[int] = []
    b = n_atoms
    while b > 0:
        k = via[b]
        if k < 0:
            return []
        edges.append(k)
        b = start[k]
    edges.reverse()
    return edges


@dataclass
class Choices:
    """Which ways of showing atoms remain open, and which the constraints force.

    An edge is a selectable summary (``z``) or a raw atom (``r``). ``live`` edges may
    still be chosen; ``forced`` ones are chosen in every solution left (some atom
    has no other live option), and ``settled`` atoms are covered by a forced edge.

    Attributes
    ----------
    z_start, z_end : ndarray of int64
        Atom boundaries of each selectable summary (``AtomModel.selectable`` order).
    z_live, z_forced, r_live, r_forced : ndarray of bool
    settled : ndarray of bool, shape (n_atoms,)
    """

    z_start: IntArray
    z_end: IntArray
    z_live: npt.NDArray[np.bool_]
    z_forced: npt.NDArray[np.bool_]
    r_live: npt.NDArray[np.bool_]
    r_forced: npt.NDArray[np.bool_]
    settled: npt.NDArray[np.bool_]

    def copy(self) -> Choices:
        """An independent copy."""
        return Choices(
            self.z_start,
            self.z_end,
            self.z_live.copy(),
            self.z_forced.copy(),
            self.r_live.copy(),
            self.r_forced.copy(),
            self.settled.copy(),
        )

    def free_z(self) -> npt.NDArray[np.bool_]:
        """Summaries still to decide (live, not forced)."""
        return self.z_live & ~self.z_forced

    def free_r(self) -> npt.NDArray[np.bool_]:
        """Raw atoms still to decide (live, not forced)."""
        return self.r_live & ~self.r_forced

    def kill(self, z_dead: npt.NDArray[np.bool_], r_dead: npt.NDArray[np.bool_]) -> None:
        """Close the given edges (never a forced one) and propagate what that forces.

        Propagation is the exactly-one row of every atom: an atom with one live option
        forces it, and a forced edge closes every other edge over its atoms.
        """
        self.z_live &= ~(z_dead & ~self.z_forced)
        self.r_live &= ~(r_dead & ~self.r_forced)
        n_atoms = self.settled.size
        while True:
            live = np.flatnonzero(self.z_live)
            count = np.zeros(n_atoms + 1, dtype=np.int64)
            ident = np.zeros(n_atoms + 1, dtype=np.int64)
            np.add.at(count, self.z_start[live], 1)
            np.add.at(count, self.z_end[live], -1)
            np.add.at(ident, self.z_start[live], live)
            np.add.at(ident, self.z_end[live], -live)
            count = np.cumsum(count)[:n_atoms] + self.r_live
            ident = np.cumsum(ident)[:n_atoms]
            single = (count == 1) & ~self.settled
            if not single.any():
                return
            raw = single & self.r_live
            self.r_forced |= raw
            self.z_forced[ident[single & ~self.r_live]] = True
            # a forced edge settles its atoms and closes everything else over them
            settled = self.r_forced.copy()
            forced = np.flatnonzero(self.z_forced)
            mark = np.zeros(n_atoms + 1, dtype=np.int64)
            np.add.at(mark, self.z_start[forced], 1)
            np.add.at(mark, self.z_end[forced], -1)
            settled |= np.cumsum(mark)[:n_atoms] > 0
            self.settled = settled
            prefix = np.concatenate([[0], np.cumsum(settled)])
            touches = prefix[self.z_end] - prefix[self.z_start] > 0
            self.z_live &= ~touches | self.z_forced
            self.r_live &= ~settled | self.r_forced


def every_choice(atoms: AtomModel, z_start: IntArray, z_end: IntArray) -> Choices:
    """Every edge open, nothing forced: the model over every atom."""
    n_z, n_atoms = z_start.size, atoms.n_atoms
    return Choices(
        z_start,
        z_end,
        np.ones(n_z, dtype=np.bool_),
        np.zeros(n_z, dtype=np.bool_),
        atoms.raw_ok.copy(),
        np.zeros(n_atoms, dtype=np.bool_),
        np.zeros(n_atoms, dtype=np.bool_),
    )


def open_choices(
    atoms: AtomModel,
    z_start: IntArray,
    z_end: IntArray,
    z_tokens: IntArray,
    wall: int,
) -> Choices:
    """The choices left once the wall is applied: an edge no frontier under ``wall``
    can use (its cheapest completion is too dear) is closed, then forced edges are
    propagated. The solutions of the integer program are unchanged."""
    n_atoms = atoms.n_atoms
    raw_ids = np.flatnonzero(atoms.raw_ok)
    start = np.concatenate([z_start, raw_ids])
    end = np.concatenate([z_end, raw_ids + 1])
    tokens = np.concatenate([z_tokens, atoms.raw_tokens[raw_ids]])
    through = path_bounds(n_atoms, start, end, tokens) + atoms.constant_tokens
    fits = through <= wall
    n_z = z_start.size
    choices = every_choice(atoms, z_start, z_end)
    r_dead = np.zeros(n_atoms, dtype=np.bool_)
    r_dead[raw_ids] = ~fits[n_z:]
    choices.kill(~fits[:n_z], r_dead)
    return choices


def summary_atoms(atoms: AtomModel, problem: FoldProblem) -> tuple[IntArray, IntArray]:
    """Atom boundaries ``[start, end)`` of each selectable summary."""
    return atoms.span_start, atoms.span_end
