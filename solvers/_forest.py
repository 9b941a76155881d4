"""A laminar view of a hierarchy and a mutable frontier state for greedy passes.

The canonical forest keeps, level by level in (level, first leaf, input
order), every summary whose children are kept and whose span overlaps no
kept summary of its level. On a tree this is the whole hierarchy; on a DAG
it is a laminar sub-forest, and any frontier over it is a valid frontier of
the full problem. :class:`FrontierState` applies whole-summary raises and
lowers while keeping an exact running token count (the renderer's total on
laminar problems; tests check the two agree).
"""

from __future__ import annotations

from functools import cached_property

import numpy as np
import numpy.typing as npt

from folding import FoldProblem
from folding._arrays import unique_sorted
from folding.frontiers import selectable_summaries
from folding.render import resolve_units

IntArray = npt.NDArray[np.int64]
BoolArray = npt.NDArray[np.bool_]


class Forest:
    """Canonical laminar forest of a problem.

    Attributes
    ----------
    cover : ndarray of int64, shape (depth + 1, n)
        ``cover[k, i]``: the kept level-k summary over leaf i, or -1; built on first
        use, while :meth:`cover_at` answers the same lookups in linear memory.
    kept : ndarray of bool, shape (S,)
    members : ndarray of int64, shape (S,)
        Non-protected leaves in each summary's span (0: never selectable).
    first_member : ndarray of int64, shape (S,)
        First non-protected leaf of each span (-1 when none).
    eligible : ndarray of bool, shape (S,)
        Every non-protected member allows the summary's level.
    children : list of list of int
        Kept child summaries (empty for L1).
    """

    def __init__(self, problem: FoldProblem) -> None:
        h = problem.hierarchy
        idx = problem.index
        self.problem = problem
        self.n = idx.n
        self.depth = h.depth
        self.level = h.summary_level
        self.first = h.span_first
        self.last = h.span_last
        self.tokens = h.summary_tokens
        free = ~idx.protected
        prefix = np.concatenate([[0], np.cumsum(free)])
        self.members = prefix[self.last + 1] - prefix[self.first]
        allowed = selectable_summaries(problem)
        if h.is_laminar:
            kept, children = self._whole_kept(problem)
        else:
            kept, children = self._laminar_kept(problem)
        self.kept = kept
        self.children = children
        # kept summaries by (level, first leaf): disjoint within a level, so the one
        # over a leaf is the last to start at or before it (when it reaches the leaf)
        order = np.flatnonzero(kept)
        keys = self.level[order] * (self.n + 1) + self.first[order]
        sort = np.argsort(keys, kind="stable")
        self._kept_order = order[sort]
        self._kept_keys = keys[sort]
        nxt = np.full(idx.n + 1, -1, dtype=np.int64)
        # nxt[i]: first non-protected leaf at or after i
        positions = np.flatnonzero(free)
        where = np.searchsorted(positions, np.arange(idx.n + 1))
        ok = where < positions.size
        nxt[ok] = positions[where[ok]]
        self.first_member = np.where(self.members > 0, nxt[self.first], -1)
        self.eligible = allowed & kept
        self.whole = bool(kept[self.members > 0].all())
        """Every selectable summary is in the forest: spans nest, so the quick
        token deltas of :class:`FrontierState` are exact."""

    def cover_at(self, levels: npt.ArrayLike, leaves: npt.ArrayLike) -> IntArray:
        """``cover[k, i]`` for arrays of levels and leaves, without the dense table."""
        k = np.asarray(levels, dtype=np.int64)
        i = np.asarray(leaves, dtype=np.int64)
        out = np.full(np.broadcast(k, i).shape, -1, dtype=np.int64)
        if not self._kept_keys.size:
            return out
        pos = np.searchsorted(self._kept_keys, k * (self.n + 1) + i, side="right") - 1
        j = self._kept_order[np.maximum(pos, 0)]
        hit = (pos >= 0) & (self.level[j] == k) & (self.last[j] >= i)
        out[hit] = np.broadcast_to(j, out.shape)[hit]
        return out

    @cached_property
    def cover(self) -> IntArray:
        """``cover[k, i]``: the kept level-k summary over leaf i, or -1; shape
        ``(depth + 1, n)``, built on first use (prefer :meth:`cover_at`)."""
        cover = np.full((self.depth + 1, self.n), -1, dtype=np.int64)
        for j in self._kept_order.tolist():
            cover[int(self.level[j]), int(self.first[j]) : int(self.last[j]) + 1] = j
        return cover

    @cached_property
    def parent(self) -> IntArray:
        """The kept summary one level up over each summary's first leaf (-1: none)."""
        return self.cover_at(self.level + 1, self.first)

    def _whole_kept(self, problem: FoldProblem) -> tuple[BoolArray, list[list[int]]]:
        """A laminar hierarchy is its own forest, minus the summaries over holes only."""
        h = problem.hierarchy
        kept = self.members > 0
        children: list[list[int]] = [[] for _ in range(len(kept))]
        index = h.summary_index
        for j in np.flatnonzero(kept & (self.level > 1)).tolist():
            kids = [index[c] for c in h.summaries[j].children]
            children[j] = sorted((c for c in kids if kept[c]), key=lambda c: int(self.first[c]))
        return kept, children

    def _laminar_kept(self, problem: FoldProblem) -> tuple[BoolArray, list[list[int]]]:
        """The canonical laminar sub-forest of a DAG (see the module docstring).

        Summaries go in (level, first leaf, input order); a kept summary's level-mates
        all start at or before it, so it overlaps one of them exactly when it starts
        before the furthest end kept so far at its level.
        """
        h = problem.hierarchy
        n_s = len(h.summaries)
        kept = np.zeros(n_s, dtype=np.bool_)
        children: list[list[int]] = [[] for _ in range(n_s)]
        reach: dict[int, int] = {}
        order = np.lexsort((np.arange(n_s), self.first, self.level)).tolist()
        levels, firsts, lasts = self.level.tolist(), self.first.tolist(), self.last.tolist()
        members = self.members.tolist()
        for j in order:
            if members[j] == 0:
                continue  # only holes under it: never shown, must not block others
            k, a = levels[j], firsts[j]
            kids = [h.summary_index[c] for c in h.summaries[j].children if c in h.summary_index]
            if kids and not all(kept[c] or members[c] == 0 for c in kids):
                continue
            if a < reach.get(k, 0):
                continue
            kept[j] = True
            reach[k] = lasts[j] + 1
            children[j] = sorted((c for c in kids if kept[c]), key=lambda c: firsts[c])
        return kept, children

    def _laminar_part(self, problem: FoldProblem) -> tuple[IntArray, BoolArray, list[list[int]]]:
        """The canonical laminar sub-forest painted on a dense table: the reference the
        forest is checked against in tests (memory ``(depth + 1) x n``)."""
        h = problem.hierarchy
        n_s = len(h.summaries)
        cover = np.full((h.depth + 1, problem.index.n), -1, dtype=np.int64)
        kept = np.zeros(n_s, dtype=np.bool_)
        children: list[list[int]] = [[] for _ in range(n_s)]
        order = sorted(range(n_s), key=lambda j: (int(self.level[j]), int(self.first[j]), j))
        for j in order:
            if self.members[j] == 0:
                continue  # only holes under it: never shown, must not block others
            k, a, b = int(self.level[j]), int(self.first[j]), int(self.last[j]) + 1
            kids = [h.summary_index[c] for c in h.summaries[j].children if c in h.summary_index]
            if kids and not all(kept[c] or self.members[c] == 0 for c in kids):
                continue
            if (cover[k, a:b] != -1).any():
                continue
            kept[j] = True
            cover[k, a:b] = j
            children[j] = sorted((c for c in kids if kept[c]), key=lambda c: int(self.first[c]))
        return cover, kept, children

    def parent_of_leaf(self, leaf: int, level: int) -> int:
        """The kept summary of ``level`` over ``leaf``, or -1."""
        if level > self.depth or level < 1:
            return -1
        return int(self.cover_at(level, leaf))


class FrontierState:
    """Levels, per-leaf units and an exact running token total."""

    def __init__(self, forest: Forest, levels: IntArray) -> None:
        problem = forest.problem
        idx = problem.index
        self.forest = forest
        self.idx = idx
        self.levels = levels.copy()
        nodes, violations = resolve_units(problem, self.levels)
        if violations:
            raise ValueError(f"FrontierState needs a valid frontier: {violations[0].message}")
        unit = np.arange(idx.n, dtype=np.int64)
        h = problem.hierarchy
        for node in nodes[nodes >= idx.n].tolist():
            j = node - idx.n
            a, b = int(h.span_first[j]), int(h.span_last[j]) + 1
            k = int(h.summary_level[j])
            seg = np.arange(a, b)
            unit[seg[self.levels[a:b] == k]] = node
        self.unit = unit
        self.node_tokens = idx.node_tokens
        # each unit's tokens sit on its first non-protected leaf: a span's current
        # cost is then one slice sum (exact while units nest inside spans)
        cost_at = np.zeros(idx.n, dtype=np.int64)
        free = np.flatnonzero(~idx.protected)
        units = unit[free]
        first = np.unique(units, return_index=True)[1]
        cost_at[free[first]] = idx.node_tokens[units[first]]
        self.cost_at = cost_at
        self.tokens = problem.fixed_tokens + int(self.node_tokens[nodes].sum())

    def _span(self, j: int) -> tuple[int, int]:
        return int(self.forest.first[j]), int(self.forest.last[j]) + 1

    def raise_delta(self, j: int) -> tuple[int, IntArray] | None:
        """Token change of showing summary ``j`` for its whole span, or None if not allowed."""
        f = self.forest
        if not f.eligible[j]:
            return None
        a, b = self._span(j)
        k = int(f.level[j])
        free = ~self.idx.protected[a:b]
        if (self.levels[a:b][free] >= k).any():
            return None
        units = unique_sorted(self.unit[a:b][free])
        summaries = units[units >= self.idx.n] - self.idx.n
        if summaries.size and ((f.first[summaries] < a).any() or (f.last[summaries] >= b).any()):
            return None
        return int(f.tokens[j]) - int(self.node_tokens[units].sum()), units

    def apply_raise(self, j: int, delta: int) -> None:
        """Show summary ``j`` (after :meth:`raise_delta` allowed it)."""
        a, b = self._span(j)
        free = ~self.idx.protected[a:b]
        seg = np.arange(a, b)[free]
        self.levels[seg] = int(self.forest.level[j])
        self.unit[seg] = self.idx.n + j
        self.cost_at[seg] = 0
        self.cost_at[int(self.forest.first_member[j])] = int(self.forest.tokens[j])
        self.tokens += delta

    def lower_delta(self, j: int) -> int | None:
        """Token change of replacing shown summary ``j`` by its children (raw for L1)."""
        f = self.forest
        if not f.kept[j]:
            return None
        a, b = self._span(j)
        if int(f.level[j]) == 1:
            free = ~self.idx.protected[a:b]
            if (self.idx.lo[a:b][free] > 0).any():
                return None
            added = int(self.idx.leaf_tokens[a:b][free].sum())
        else:
            kids = [c for c in f.children[j] if f.members[c] > 0]
            if not all(f.eligible[c] for c in kids):
                return None
            added = int(f.tokens[kids].sum()) if kids else 0
        return added - int(f.tokens[j])

    def apply_lower(self, j: int, delta: int) -> None:
        """Replace shown summary ``j`` by its children (after :meth:`lower_delta`)."""
        f = self.forest
        a, b = self._span(j)
        free_mask = ~self.idx.protected[a:b]
        if int(f.level[j]) == 1:
            seg = np.arange(a, b)[free_mask]
            self.levels[seg] = 0
            self.unit[seg] = seg
            self.cost_at[seg] = self.idx.leaf_tokens[seg]
        else:
            for c in f.children[j]:
                if f.members[c] == 0:
                    continue
                ca, cb = self._span(c)
                seg = np.arange(ca, cb)[~self.idx.protected[ca:cb]]
                self.levels[seg] = int(f.level[c])
                self.unit[seg] = self.idx.n + c
                self.cost_at[seg] = 0
                self.cost_at[int(f.first_member[c])] = int(f.tokens[c])
        self.tokens += delta

    def shown_summaries(self) -> list[int]:
        """Summary indices currently shown, in chronological order."""
        units = self.unit[~self.idx.protected]
        shown = unique_sorted(units[units >= self.idx.n]) - self.idx.n
        return sorted(shown.tolist(), key=lambda j: int(self.forest.first[j]))
