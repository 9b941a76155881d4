"""The one renderer and token accountant: frontier -> :class:`Layout`.

Every token total in the project comes from :func:`render` (or
:func:`render_levels`, its array form). Solvers, validators, adapters and
benchmarks all price through it, so two accountants can never disagree.

Resolution rule. Leaves at level 0 render as ``raw:<leaf>`` units. Leaves at
level ``k > 0`` must be tiled by whole summaries of level ``k``: every
covered leaf of a chosen summary is at level ``k``, except *holes*: leaves
forced raw by their constraints (head/tail zone, a raw pin, a lock at 0),
shown raw at their own position. A recall unit sits at the position of its
summary's first non-hole leaf. When the hierarchy is a DAG and several
tilings exist, the renderer picks the one with the fewest tokens, then the
fewest units, then the earliest summaries in input order; the choice is a
pure function of (problem, frontier).
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass, field
from functools import cached_property
from typing import Literal, NamedTuple

import numpy as np
import numpy.typing as npt

from ._arrays import unique_sorted
from .exceptions import PlanViolation, Violation
from .hierarchy import AMBIGUOUS, NONE
from .model import FoldProblem, Frontier

__all__ = [
    "Layout",
    "Unit",
    "frontier_from_levels",
    "levels_from_frontier",
    "previous_layout",
    "render",
    "render_levels",
]

IntArray = npt.NDArray[np.int64]
ObjArray = npt.NDArray[np.object_]


class Unit(NamedTuple):
    """One rendered unit of a layout."""

    kind: Literal["raw", "recall"]
    """``raw`` for a leaf shown verbatim, ``recall`` for a summary's recall pair."""
    key: str
    """The leaf or summary id."""
    tokens: int
    """Tokens of this unit."""
    offset: int
    """Tokens before this unit in the request (fixed tokens included)."""


@dataclass(frozen=True, eq=False)
class Layout:
    """The ordered render units of a frontier.

    Attributes
    ----------
    nodes : ndarray of int64
        Node index of each unit (leaves ``0..n-1``, summaries ``n..``).
    keys : ndarray of object
        ``"raw:<id>"`` / ``"recall:<id>"`` per unit: the unit identity used for
        cache comparisons.
    tokens, offsets : ndarray of int64
        Tokens of each unit and tokens before it (fixed tokens included).
    fixed_tokens : int
        Tokens before the first unit (system prompt, tools).
    total : int
        ``fixed_tokens + tokens.sum()``.
    """

    nodes: IntArray
    keys: ObjArray
    tokens: IntArray
    offsets: IntArray
    fixed_tokens: int
    total: int
    n_leaves: int = field(default=0)

    def __len__(self) -> int:
        return len(self.keys)

    @cached_property
    def units(self) -> tuple[Unit, ...]:
        """The units as :class:`Unit` tuples, in chronological order."""
        out = []
        for key, tokens, offset in zip(
            self.keys.tolist(), self.tokens.tolist(), self.offsets.tolist(), strict=True
        ):
            kind, _, ident = key.partition(":")
            out.append(Unit(kind, ident, tokens, offset))
        return tuple(out)

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, Layout):
            return NotImplemented
        return (
            self.fixed_tokens == other.fixed_tokens
            and len(self) == len(other)
            and bool(np.array_equal(self.keys, other.keys))
            and bool(np.array_equal(self.tokens, other.tokens))
        )

    __hash__ = None  # type: ignore[assignment]

    def to_dict(self) -> dict[str, object]:
        """JSON form: ``fixed_tokens``, ``total`` and ``units`` (kind, key, tokens, offset)."""
        return {
            "fixed_tokens": self.fixed_tokens,
            "total": self.total,
            "units": [u._asdict() for u in self.units],
        }

    @classmethod
    def from_units(cls, units: list[tuple[str, str, int]], fixed_tokens: int = 0) -> Layout:
        """Build a layout from ``(kind, key, tokens)`` triples (for tests and replays)."""
        keys = np.empty(len(units), dtype=object)
        keys[:] = [f"{kind}:{key}" for kind, key, _ in units]
        tokens = np.fromiter((t for _, _, t in units), dtype=np.int64, count=len(units))
        return _layout(np.full(len(units), -1, dtype=np.int64), keys, tokens, fixed_tokens)


def _layout(nodes: IntArray, keys: ObjArray, tokens: IntArray, fixed: int, n: int = 0) -> Layout:
    ends = np.cumsum(tokens) + fixed
    offsets = ends - tokens
    total = int(ends[-1]) if len(ends) else fixed
    return Layout(nodes, keys, tokens, offsets, fixed, total, n)


def levels_from_frontier(problem: FoldProblem, frontier: Frontier) -> IntArray:
    """The frontier as an int64 array of levels in leaf order (missing leaves = 0).

    Raises
    ------
    PlanViolation
        ``unknown-leaf`` for ids that are not leaves, ``bad-level`` for levels
        that are not integers >= 0.
    """
    levels, violations = parse_frontier(problem, frontier)
    if violations:
        raise PlanViolation(violations)
    return levels


def parse_frontier(problem: FoldProblem, frontier: Frontier) -> tuple[IntArray, list[Violation]]:
    """The frontier as a level array, and what is wrong with its ids and levels.

    The reading of :func:`levels_from_frontier`, reporting instead of raising: the
    caller decides whether to raise or to add more checks first (as
    :func:`~folding.check_plan` does).

    Parameters
    ----------
    problem : FoldProblem
    frontier : mapping of str to int
        Leaf id -> level; leaves not named are raw.

    Returns
    -------
    levels : ndarray of int64, shape (n_leaves,)
        The level of each leaf in leaf order (all zeros when an id or a level is bad).
    violations : list of Violation
        ``unknown-leaf`` for ids that are not leaves, ``bad-level`` for levels that are
        not integers >= 0; empty when the frontier reads cleanly.

    Examples
    --------
    >>> from folding import FoldProblem
    >>> p = FoldProblem.model_validate({
    ...     "leaves": [{"id": "a", "tokens": 5}, {"id": "b", "tokens": 5}],
    ...     "budget": {"total": 9}})
    >>> levels, violations = parse_frontier(p, {"b": 0, "c": 1})
    >>> levels.tolist(), [(v.rule, v.node) for v in violations]
    ([0, 0], [('unknown-leaf', 'c')])
    """
    index = problem.hierarchy.leaf_index
    ids = problem.hierarchy.leaf_ids
    out: list[Violation] = []
    for leaf in sorted(frontier.keys() - index.keys()):
        out.append(
            Violation(
                "unknown-leaf", leaf, f"frontier names {leaf!r}, which is not a leaf of the problem"
            )
        )
    if out or not set(map(type, frontier.values())) <= {int}:
        for leaf, level in frontier.items():
            if isinstance(level, bool) or not isinstance(level, int | np.integer):
                message = f"leaf {leaf!r} has level {level!r}; levels are ints"
                out.append(Violation("bad-level", leaf, message))
            elif level < 0:
                message = f"leaf {leaf!r} has negative level {level}"
                out.append(Violation("bad-level", leaf, message))
        if out:
            return np.zeros(len(ids), dtype=np.int64), out
    levels = np.fromiter(map(frontier.get, ids, itertools.repeat(0)), np.int64, count=len(ids))
    for i in np.flatnonzero(levels < 0).tolist():
        message = f"leaf {ids[i]!r} has negative level {levels[i]}"
        out.append(Violation("bad-level", ids[i], message))
    return levels, out


def frontier_from_levels(problem: FoldProblem, levels: npt.ArrayLike) -> dict[str, int]:
    """The canonical frontier dict of a level array: non-zero entries only, in leaf order."""
    arr = np.asarray(levels, dtype=np.int64)
    nonzero = np.flatnonzero(arr)
    ids = problem.index.leaf_id_array
    return dict(zip(ids[nonzero].tolist(), arr[nonzero].tolist(), strict=True))


def render(problem: FoldProblem, frontier: Frontier) -> Layout:
    """Render ``frontier`` to its :class:`Layout`.

    Parameters
    ----------
    problem : FoldProblem
    frontier : mapping of str to int
        Leaf id -> level; leaves not named are raw.

    Returns
    -------
    Layout
        Units in chronological order with their tokens and offsets.

    Raises
    ------
    PlanViolation
        When the frontier cannot be shown: unknown leaves or bad levels, a
        level with no summary over the leaf (``no-summary``), or level-k leaves
        that no set of whole level-k summaries tiles (``not-tileable``). Pins,
        locks, zones and the budget are *not* checked here; see
        :func:`folding.check_plan`.

    Examples
    --------
    >>> from folding import FoldProblem, render
    >>> p = FoldProblem.model_validate({
    ...     "leaves": [{"id": f"m{i}", "tokens": 100} for i in range(3)],
    ...     "summaries": [{"id": "S", "level": 1, "tokens": 30, "children": ["m0", "m1"]}],
    ...     "budget": {"total": 1000}, "fixed_tokens": 10})
    >>> lay = render(p, {"m0": 1, "m1": 1})
    >>> [(u.kind, u.key, u.offset) for u in lay.units]
    [('recall', 'S', 10), ('raw', 'm2', 40)]
    >>> lay.total
    140
    """
    return render_levels(problem, levels_from_frontier(problem, frontier))


def previous_layout(problem: FoldProblem) -> Layout | None:
    """The layout of the problem's carried frontier, or None.

    None when there is no previous frontier or it can no longer be rendered
    under the current problem (then every token counts as re-read).
    """
    if problem.previous is None:
        return None
    try:
        return render_levels(problem, problem.index.previous)
    except PlanViolation:
        return None


def render_levels(problem: FoldProblem, levels: IntArray) -> Layout:
    """Array form of :func:`render`: ``levels[i]`` is the level of leaf ``i``."""
    nodes, violations = resolve_units(problem, levels)
    if violations:
        raise PlanViolation(violations)
    return layout_of(problem, nodes)


def layout_of(problem: FoldProblem, nodes: IntArray) -> Layout:
    """The layout of resolved units: their keys, tokens and offsets, fixed tokens first.

    Parameters
    ----------
    problem : FoldProblem
    nodes : ndarray of int64
        The units in request order, as :func:`resolve_units` returns them: a leaf
        index (< n) or ``n + summary index``. Not checked: resolve them first.

    Returns
    -------
    Layout
    """
    idx = problem.index
    return _layout(nodes, idx.unit_keys[nodes], idx.node_tokens[nodes], problem.fixed_tokens, idx.n)


def resolve_units(problem: FoldProblem, levels: IntArray) -> tuple[IntArray, list[Violation]]:
    """Node index of every unit of ``levels`` in order, and the representation violations.

    The answer is kept on the problem for the last few level arrays asked (a solver
    renders the carried frontier and its own answer several times); the node array
    is read-only.
    """
    key = (levels.dtype.str, levels.shape, levels.tobytes())
    memo = problem.index.resolved
    found = memo.get(key)
    if found is None:
        nodes, violations = _resolve_units(problem, levels)
        nodes.setflags(write=False)
        if len(memo) >= _RESOLVED_KEPT:
            del memo[next(iter(memo))]
        found = memo[key] = (nodes, violations)
    return found[0], list(found[1])


_RESOLVED_KEPT = 8
"""Level arrays whose units one problem keeps (see :func:`resolve_units`)."""


def _resolve_units(problem: FoldProblem, levels: IntArray) -> tuple[IntArray, list[Violation]]:
    h = problem.hierarchy
    idx = problem.index
    n = idx.n
    if levels.shape != (n,):
        raise ValueError(f"levels must have shape ({n},), got {levels.shape}")
    folded = np.flatnonzero(levels > 0)
    if folded.size == 0:
        return np.arange(n, dtype=np.int64), []
    violations: list[Violation] = []
    too_deep = folded[levels[folded] > h.depth]
    for i in too_deep.tolist():
        violations.append(_no_summary(h.leaf_ids[i], int(levels[i])))
    if too_deep.size:
        folded = folded[levels[folded] <= h.depth]
    cover = h.cover_at(levels[folded], folded)
    missing = cover == NONE
    for i in folded[missing].tolist():
        violations.append(_no_summary(h.leaf_ids[i], int(levels[i])))
    if violations:
        return np.empty(0, dtype=np.int64), violations
    hole = (levels == 0) & idx.protected
    nonhole_prefix = np.concatenate([[0], np.cumsum(~hole)])
    if (cover == AMBIGUOUS).any():
        chosen, violations = _tile_general(problem, levels, hole)
    else:
        chosen, violations = _tile_laminar(problem, levels, folded, cover, nonhole_prefix)
    if violations:
        return np.empty(0, dtype=np.int64), violations
    slot = np.full(n, -1, dtype=np.int64)
    raw = np.flatnonzero(levels == 0)
    slot[raw] = raw
    # A recall sits at its first non-hole leaf: the first leaf of its span not a hole.
    first = h.span_first[chosen]
    starts = first_nonhole(first, nonhole_prefix)
    slot[starts] = n + chosen
    return slot[slot >= 0], []


def first_nonhole(first: IntArray, nonhole_prefix: IntArray) -> IntArray:
    """The first non-hole leaf at or after each of ``first``: where a recall unit sits.

    Parameters
    ----------
    first : ndarray of int64
        Leaf positions (a summary's span's first leaf, say).
    nonhole_prefix : ndarray of int64, shape (n_leaves + 1,)
        ``nonhole_prefix[i]``: the number of non-hole leaves before leaf ``i``.

    Returns
    -------
    ndarray of int64
        Per entry of ``first``, the position of the first non-hole leaf at or after it
        (the caller makes sure there is one).

    Examples
    --------
    >>> hole = np.array([True, False, True, True, False])
    >>> prefix = np.concatenate([[0], np.cumsum(~hole)])
    >>> first_nonhole(np.array([0, 2]), prefix).tolist()
    [1, 4]
    """
    # the first non-hole leaf at or after `first` is the position where the prefix
    # first exceeds its value there
    targets = nonhole_prefix[first] + 1
    return np.searchsorted(nonhole_prefix, targets, side="left").astype(np.int64) - 1


def _tile_laminar(
    problem: FoldProblem,
    levels: IntArray,
    folded: IntArray,
    cover: IntArray,
    nonhole_prefix: IntArray,
) -> tuple[IntArray, list[Violation]]:
    h = problem.hierarchy
    used, counts = np.unique(cover, return_counts=True)
    need = nonhole_prefix[h.span_last[used] + 1] - nonhole_prefix[h.span_first[used]]
    bad = used[counts != need]
    if bad.size == 0:
        return used, []
    violations = []
    for j in bad.tolist():
        violations.append(_partial(problem, levels, j))
    return used, violations


def _partial(problem: FoldProblem, levels: IntArray, j: int) -> Violation:
    h = problem.hierarchy
    k = int(h.summary_level[j])
    a, b = int(h.span_first[j]), int(h.span_last[j])
    hole = (levels[a : b + 1] == 0) & problem.index.protected[a : b + 1]
    off = np.flatnonzero((levels[a : b + 1] != k) & ~hole)
    culprit = h.leaf_ids[a + int(off[0])] if off.size else h.leaf_ids[a]
    level = int(levels[a + int(off[0])]) if off.size else k
    sid = h.summary_ids[j]
    return Violation(
        "not-tileable",
        culprit,
        f"summary {sid!r} (L{k}) is only partly selected: leaf {culprit!r} is at level "
        f"{level}; show every covered leaf at L{k} (or raw only if it is pinned raw) "
        f"or unfold the whole summary",
    )


def _no_summary(leaf: str, level: int) -> Violation:
    return Violation(
        "no-summary",
        leaf,
        f"leaf {leaf!r} is at level {level} but no L{level} summary covers it; "
        "choose an existing level or produce the summary first",
    )


def _tile_general(
    problem: FoldProblem, levels: IntArray, hole: npt.NDArray[np.bool_]
) -> tuple[IntArray, list[Violation]]:
    """Tile level-k runs with whole summaries when the hierarchy is a DAG (shortest path)."""
    h = problem.hierarchy
    tokens = h.summary_tokens
    reduced = np.flatnonzero(~hole)  # reduced position -> leaf index
    red_levels = levels[reduced]
    pos_of = np.full(len(levels) + 1, -1, dtype=np.int64)
    pos_of[reduced] = np.arange(len(reduced))
    nonhole_prefix = np.concatenate([[0], np.cumsum(~hole)])
    chosen: list[int] = []
    violations: list[Violation] = []
    for k in unique_sorted(red_levels[red_levels > 0]).tolist():
        at_k = red_levels == k
        at_k_prefix = np.concatenate([[0], np.cumsum(at_k)])
        edges: dict[int, list[tuple[int, int]]] = {}
        for j in np.flatnonzero(h.summary_level == k).tolist():
            a_red = int(nonhole_prefix[h.span_first[j]])
            b_red = int(nonhole_prefix[h.span_last[j] + 1])
            if b_red > a_red and at_k_prefix[b_red] - at_k_prefix[a_red] == b_red - a_red:
                edges.setdefault(a_red, []).append((b_red, j))
        # maximal runs of level-k positions in reduced order
        padded = np.concatenate([[False], at_k, [False]])
        changes = np.flatnonzero(padded[1:] != padded[:-1])
        for start, stop in zip(changes[::2].tolist(), changes[1::2].tolist(), strict=True):
            best: dict[int, tuple[int, int, int, int]] = {start: (0, 0, -1, -1)}
            for pos in range(start, stop):
                if pos not in best:
                    continue
                cost, count, _, _ = best[pos]
                for end, j in edges.get(pos, ()):
                    cand = (cost + int(tokens[j]), count + 1, pos, j)
                    if end not in best or cand[:2] < best[end][:2]:
                        best[end] = cand
            if stop not in best:
                reached = max(p for p in best if p <= stop)
                leaf = h.leaf_ids[int(reduced[reached])]
                violations.append(
                    Violation(
                        "not-tileable",
                        leaf,
                        f"leaf {leaf!r} is at level {k} but no set of whole L{k} summaries "
                        f"covers its run of level-{k} leaves exactly; pick levels that match "
                        "existing summaries",
                    )
                )
                continue
            pos = stop
            while pos != start:
                _, _, prev, j = best[pos]
                chosen.append(j)
                pos = prev
    return np.asarray(sorted(chosen), dtype=np.int64), violations
