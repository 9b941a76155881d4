"""The summary hierarchy: leaves and summaries as a DAG (child -> parent).

A :class:`Hierarchy` validates its input once and keeps array views for fast
algorithms: each summary's covered span of leaves ``[first, last]``, and for
every level ``k`` and leaf ``i`` the summary of level ``k`` covering ``i``
(``-1`` when none, ``-2`` when several: the hierarchy is a DAG there), answered
by :meth:`Hierarchy.cover_at` from per-level runs. Time and memory are linear in
the input whatever the depth; the dense ``(depth + 1) x n`` table
(:attr:`Hierarchy.cover`) and the networkx graph (:attr:`Hierarchy.graph`) are
built only on first use.
"""

from __future__ import annotations

from collections.abc import Sequence
from functools import cached_property
from typing import TYPE_CHECKING, Any

import networkx as nx
import numpy as np
import numpy.typing as npt

from .exceptions import (
    ContiguityError,
    CycleError,
    DuplicateIdError,
    LevelError,
    UnknownIdError,
    ZoneError,
)

if TYPE_CHECKING:
    from .model import Leaf, Summary

__all__ = ["AMBIGUOUS", "NONE", "Hierarchy"]

NONE = -1
"""Marker in :attr:`Hierarchy.cover`: no summary of that level covers the leaf."""
AMBIGUOUS = -2
"""Marker in :attr:`Hierarchy.cover`: several summaries of that level cover the leaf."""

IntArray = npt.NDArray[np.int64]


class Hierarchy:
    """Leaves plus summaries, validated.

    Parameters
    ----------
    leaves : sequence of Leaf
        In chronological order.
    summaries : sequence of Summary
        Any order; each L1 lists leaves, each L_k lists summaries of level k - 1.

    Raises
    ------
    DuplicateIdError, UnknownIdError, CycleError, LevelError, ContiguityError, ZoneError
        Each names the offending id and says what would fix it.

    Attributes
    ----------
    leaf_ids, summary_ids : tuple of str
    leaf_index, summary_index : dict of str to int
    depth : int
        The deepest summary level (0 when there are no summaries).
    span_first, span_last : ndarray of int64, shape (S,)
        Covered leaf span of each summary, inclusive.
    summary_level, summary_tokens, leaf_tokens : ndarray of int64
    cover : ndarray of int64, shape (depth + 1, n)
        ``cover[k, i]``: the summary of level k covering leaf i, or ``NONE`` /
        ``AMBIGUOUS``. Row 0 is ``NONE``. Built on first use; :meth:`cover_at`
        answers the same lookups in memory linear in the hierarchy.
    avail : ndarray of int64, shape (n,)
        Deepest level that exists over each leaf (0 when uncovered).
    """

    avail: IntArray
    _seg_level: IntArray  # per run of one covering state: its level,
    _seg_start: IntArray  # its first leaf (it ends where the next run starts)
    _seg_value: IntArray  # and its summary (or NONE / AMBIGUOUS)
    _seg_keys: IntArray  # level x (n + 1) + first leaf, sorted: the lookup key
    _laminar: bool

    def __init__(
        self,
        leaves: Sequence[Leaf],
        summaries: Sequence[Summary],
        *,
        extends: Hierarchy | None = None,
    ) -> None:
        self.leaves = tuple(leaves)
        self.summaries = tuple(summaries)
        self.leaf_ids = tuple(leaf.id for leaf in self.leaves)
        if extends is not None and self._extend(extends):
            return
        self.summary_ids = tuple(s.id for s in self.summaries)
        self.leaf_index = self._unique(self.leaf_ids, "leaves", "leaf")
        self.summary_index = self._unique(self.summary_ids, "summaries", "summary")
        clash = self.leaf_index.keys() & self.summary_index.keys()
        if clash:
            name = min(clash)
            raise DuplicateIdError(
                f"id {name!r} is used by both a leaf and a summary; ids must be unique",
                field="summaries",
                node=name,
            )
        self._check_zones()
        self.leaf_tokens: IntArray = np.fromiter(
            (leaf.tokens for leaf in self.leaves), dtype=np.int64, count=len(self.leaves)
        )
        n_s = len(self.summaries)
        self.summary_level: IntArray = np.fromiter(
            (s.level for s in self.summaries), dtype=np.int64, count=n_s
        )
        self.summary_tokens: IntArray = np.fromiter(
            (s.tokens for s in self.summaries), dtype=np.int64, count=n_s
        )
        self.depth = int(self.summary_level.max()) if n_s else 0
        self._check_references_and_cycles()
        self.span_first, self.span_last = self._spans()
        self._cover_segments()

    def _extend(self, old: Hierarchy) -> bool:
        """Reuse ``old`` when this hierarchy has the same summaries (the same objects)
        over the same leaves plus newer ones: only the new leaves need checking, and
        nothing covers them. Returns False (nothing reused) otherwise."""
        n_old = len(old.leaf_ids)
        if (
            len(old.summaries) != len(self.summaries)
            or not all(a is b for a, b in zip(old.summaries, self.summaries, strict=True))
            or self.leaf_ids[:n_old] != old.leaf_ids
        ):
            return False
        fresh = self.leaf_ids[n_old:]
        index = dict(old.leaf_index)
        for i, node in enumerate(fresh, n_old):
            if node in index or node in old.summary_index:
                return False  # a clash: the full check names it
            index[node] = i
        self.summary_ids = old.summary_ids
        self.leaf_index = index
        self.summary_index = old.summary_index
        self._check_zones()
        self.leaf_tokens = np.fromiter(
            (leaf.tokens for leaf in self.leaves), dtype=np.int64, count=len(self.leaves)
        )
        self.summary_level = old.summary_level
        self.summary_tokens = old.summary_tokens
        self.depth = old.depth
        self.span_first, self.span_last = old.span_first, old.span_last
        extra = len(fresh)
        # nothing covers the new leaves: the runs stay, keyed for the longer order
        self._seg_level, self._seg_start = old._seg_level, old._seg_start
        self._seg_value, self._laminar = old._seg_value, old._laminar
        self._seg_keys = self._keys(len(self.leaves))
        self.avail = np.concatenate([old.avail, np.zeros(extra, dtype=np.int64)])
        return True

    # ------------------------------------------------------------ validation
    @staticmethod
    def _unique(ids: tuple[str, ...], field: str, kind: str) -> dict[str, int]:
        fast = dict(zip(ids, range(len(ids)), strict=True))
        if len(fast) == len(ids):
            return fast
        index: dict[str, int] = {}
        for i, node in enumerate(ids):
            if node in index:
                raise DuplicateIdError(
                    f"{kind} id {node!r} appears twice (positions {index[node]} and {i}); "
                    "give every node a unique id",
                    field=field,
                    node=node,
                )
            index[node] = i
        return index

    def _check_zones(self) -> None:
        zones = [leaf.zone for leaf in self.leaves]
        head = zones.count("head")
        tail = zones.count("tail")
        if zones[:head] == ["head"] * head and zones[len(zones) - tail :] == ["tail"] * tail:
            return  # head a prefix, tail a suffix
        seen_middle_or_tail = False
        for leaf, zone in zip(self.leaves, zones, strict=True):
            if zone == "head" and seen_middle_or_tail:
                raise ZoneError(
                    f"leaf {leaf.id!r} is in zone 'head' after a non-head leaf; "
                    "head leaves must be the oldest ones",
                    field="leaves",
                    node=leaf.id,
                )
            if zone != "head":
                seen_middle_or_tail = True
        seen_tail = False
        for leaf, zone in zip(self.leaves, zones, strict=True):
            if zone == "tail":
                seen_tail = True
            elif seen_tail:
                raise ZoneError(
                    f"leaf {leaf.id!r} is in zone {zone!r} after a tail leaf; "
                    "tail leaves must be the newest ones",
                    field="leaves",
                    node=leaf.id,
                )

    def _check_references_and_cycles(self) -> None:
        edges: list[tuple[str, str]] = []
        leaf_index = self.leaf_index
        plain_l1: set[str] = set()
        for s in self.summaries:
            children = s.children
            if (
                s.level == 1
                and len(set(children)) == len(children)
                and all(c in leaf_index for c in children)
            ):
                plain_l1.add(s.id)
                continue  # the common case: distinct leaves
            seen: set[str] = set()
            for child in s.children:
                if child in seen:
                    raise DuplicateIdError(
                        f"summary {s.id!r} lists child {child!r} twice; list each child once",
                        field="summaries",
                        node=s.id,
                    )
                seen.add(child)
                if child not in self.leaf_index and child not in self.summary_index:
                    raise UnknownIdError(
                        f"summary {s.id!r} names child {child!r}, which is neither a leaf "
                        "nor a summary; add it or remove it from the children",
                        field="summaries",
                        node=s.id,
                    )
                if child in self.summary_index:
                    edges.append((child, s.id))
        # A cycle always breaks the level rule (levels rise by one along every edge),
        # so the graph search runs only when some edge breaks it, to name the cycle.
        level_of = {s.id: s.level for s in self.summaries}
        cycle = []
        if any(level_of[child] != level_of[parent] - 1 for child, parent in edges):
            try:
                cycle = nx.find_cycle(nx.DiGraph(edges))
            except nx.NetworkXNoCycle:
                cycle = []
        if cycle:
            path = " -> ".join([str(u) for u, _ in cycle] + [str(cycle[0][0])])
            raise CycleError(
                f"summaries form a cycle: {path}; a summary cannot (indirectly) contain itself",
                field="summaries",
                node=str(cycle[0][0]),
            )
        for s in self.summaries:
            if s.id in plain_l1:
                continue
            for child in s.children:
                if s.level == 1 and child not in self.leaf_index:
                    raise LevelError(
                        f"summary {s.id!r} is level 1 but child {child!r} is a summary; "
                        "an L1 summarises leaves only",
                        field="summaries",
                        node=s.id,
                    )
                if s.level > 1:
                    if child in self.leaf_index:
                        raise LevelError(
                            f"summary {s.id!r} is level {s.level} but child {child!r} is a "
                            f"leaf; an L{s.level} summarises L{s.level - 1} summaries",
                            field="summaries",
                            node=s.id,
                        )
                    child_level = self.summaries[self.summary_index[child]].level
                    if child_level != s.level - 1:
                        raise LevelError(
                            f"summary {s.id!r} is level {s.level} but child {child!r} is level "
                            f"{child_level}; a summary is exactly one level above its children",
                            field="summaries",
                            node=s.id,
                        )

    def _spans(self) -> tuple[IntArray, IntArray]:
        n_s = len(self.summaries)
        first = np.zeros(n_s, dtype=np.int64)
        last = np.zeros(n_s, dtype=np.int64)
        order = sorted(range(n_s), key=lambda j: self.summaries[j].level)
        for j in order:
            s = self.summaries[j]
            if s.level == 1:
                positions = [self.leaf_index[c] for c in s.children]
                lo, hi = min(positions), max(positions)
                if hi - lo + 1 == len(positions):  # distinct children: contiguous
                    first[j], last[j] = lo, hi
                    continue
                intervals = [(p, p) for p in sorted(positions)]
            else:
                intervals = sorted(
                    (int(first[self.summary_index[c]]), int(last[self.summary_index[c]]))
                    for c in s.children
                )
            lo, hi = intervals[0]
            for a, b in intervals[1:]:
                if a > hi + 1:
                    gap = self.leaf_ids[hi + 1]
                    raise ContiguityError(
                        f"summary {s.id!r} covers a non-contiguous run of leaves: leaf {gap!r} "
                        f"lies inside its span ({self.leaf_ids[lo]!r}..{self.leaf_ids[b]!r}) "
                        "but is not covered; a summary must cover one contiguous run",
                        field="summaries",
                        node=s.id,
                    )
                hi = max(hi, b)
            first[j], last[j] = lo, hi
        return first, last

    def _cover_segments(self) -> None:
        """Per level, the runs of leaves with one covering state, and ``avail``.

        Each level's span starts (+1) and ends (-1) are events; sorted by
        ``(level, leaf)``, their running sums give, between consecutive events, how
        many spans of that level cover the leaves and (where it is one) which.
        Every level's events sum to zero, so one running sum over all levels
        serves. Time O(S log S + n), memory O(S + n): never one row per level.
        """
        n = len(self.leaves)
        n_s = len(self.summaries)
        levels = np.concatenate([self.summary_level, self.summary_level])
        starts = np.concatenate([self.span_first, self.span_last + 1])
        ids = np.arange(n_s, dtype=np.int64)
        d_count = np.concatenate([np.ones(n_s, dtype=np.int64), -np.ones(n_s, dtype=np.int64)])
        d_which = np.concatenate([ids, -ids])
        order = np.lexsort((starts, levels))
        levels, starts = levels[order], starts[order]
        if n_s:
            head = np.flatnonzero(
                np.concatenate([[True], (levels[1:] != levels[:-1]) | (starts[1:] != starts[:-1])])
            )
        else:
            head = np.zeros(0, dtype=np.int64)
        count = np.cumsum(np.add.reduceat(d_count[order], head)) if n_s else head
        which = np.cumsum(np.add.reduceat(d_which[order], head)) if n_s else head
        self._seg_level = levels[head]
        self._seg_start = starts[head]
        value = np.where(count == 1, which, NONE)
        value[count > 1] = AMBIGUOUS
        self._seg_value = value
        self._seg_keys = self._keys(n)
        self._laminar = not bool((count > 1).any())
        # Coverage nests (a level-k span is the union of level k-1 spans), so the
        # deepest level over a leaf is the number of levels covering it.
        covered = np.flatnonzero(count > 0)  # never a level's last segment
        diff = np.zeros(n + 1, dtype=np.int64)
        np.add.at(diff, self._seg_start[covered], 1)
        np.add.at(diff, self._seg_start[covered + 1], -1)
        self.avail = np.cumsum(diff)[:n]

    def _keys(self, n: int) -> IntArray:
        return self._seg_level * (n + 1) + self._seg_start

    def cover_at(self, levels: npt.ArrayLike, leaves: npt.ArrayLike) -> IntArray:
        """``cover[k, i]`` for arrays of levels ``k`` and leaf positions ``i``.

        The summary of level ``k`` covering leaf ``i``, ``NONE`` when none (always
        at level 0) or ``AMBIGUOUS`` when several do. Works from the per-level runs,
        without the dense table: O(len(levels) x log S).
        """
        k = np.asarray(levels, dtype=np.int64)
        i = np.asarray(leaves, dtype=np.int64)
        pos = np.searchsorted(self._seg_keys, k * (self.n_leaves + 1) + i, side="right") - 1
        out = np.full(pos.shape, NONE, dtype=np.int64)
        ok = pos >= 0
        out[ok] = self._seg_value[pos[ok]]
        return out

    # ----------------------------------------------------------------- views
    @property
    def n_leaves(self) -> int:
        """Number of leaves."""
        return len(self.leaves)

    @property
    def is_laminar(self) -> bool:
        """True when no leaf has two candidate summaries at one level (a forest)."""
        return self._laminar

    @cached_property
    def cover(self) -> IntArray:
        """The dense table ``cover[k, i]``, shape ``(depth + 1, n)``, built on first use.

        Its memory is ``(depth + 1) x n``: on a deep hierarchy prefer
        :meth:`cover_at`, which answers the same lookups from per-level runs.
        """
        n = len(self.leaves)
        cover = np.full((self.depth + 1, n), NONE, dtype=np.int64)
        stops = np.append(self._seg_start[1:], n)
        for p in np.flatnonzero(self._seg_value != NONE).tolist():
            k = int(self._seg_level[p])
            cover[k, int(self._seg_start[p]) : int(stops[p])] = self._seg_value[p]
        return cover

    @cached_property
    def graph(self) -> nx.DiGraph:
        """The hierarchy as a networkx DiGraph with edges child -> parent.

        Node attributes: ``kind`` (``"leaf"`` or ``"summary"``), ``level``
        (0 for leaves) and ``tokens``.
        """
        g = nx.DiGraph()
        for leaf in self.leaves:
            g.add_node(leaf.id, kind="leaf", level=0, tokens=leaf.tokens)
        for s in self.summaries:
            g.add_node(s.id, kind="summary", level=s.level, tokens=s.tokens)
        for s in self.summaries:
            g.add_edges_from((child, s.id) for child in s.children)
        return g

    @cached_property
    def _child_groups(self) -> list[tuple[IntArray, IntArray, IntArray]]:
        """Per level k >= 2: its summaries, their child summaries flattened, and where
        each one's children start in that flat array."""
        index = self.summary_index
        parents = np.flatnonzero(self.summary_level > 1)
        parents = parents[np.argsort(self.summary_level[parents], kind="stable")]
        counts = np.fromiter(
            (len(self.summaries[j].children) for j in parents.tolist()),
            dtype=np.int64,
            count=len(parents),
        )
        flat = np.fromiter(
            (index[c] for j in parents.tolist() for c in self.summaries[j].children),
            dtype=np.int64,
            count=int(counts.sum()),
        )
        ends = np.cumsum(counts)
        starts = ends - counts
        levels = self.summary_level[parents]
        cuts = np.flatnonzero(np.diff(levels)) + 1
        groups = []
        for a, b in zip([0, *cuts.tolist()], [*cuts.tolist(), len(parents)], strict=True):
            if a < b:
                lo, hi = int(starts[a]), int(ends[b - 1])
                groups.append((parents[a:b], flat[lo:hi], starts[a:b] - lo))
        return groups

    def span_reduce(self, values: npt.NDArray[Any], ufunc: np.ufunc) -> npt.NDArray[Any]:
        """``ufunc.reduce(values[first:last + 1])`` over every summary's covered span.

        Time linear in the hierarchy (the number of children listed), whatever its
        depth: an L1's span is its children, and a higher summary's span is the
        union of its children's spans, so its value is reduced from theirs.

        Parameters
        ----------
        values : ndarray, shape (n,) or (n, m)
            One value (or row of ``m`` values, reduced column by column) per leaf.
        ufunc : numpy ufunc
            An associative, commutative reduction, such as ``np.maximum`` or ``np.add``
            (``np.add`` over overlapping children of a DAG counts shared leaves once
            per child: use it on trees only).

        Returns
        -------
        ndarray, shape (S,) or (S, m)
        """
        n_s = len(self.summaries)
        out = np.zeros((n_s, *values.shape[1:]), dtype=values.dtype)
        l1 = np.flatnonzero(self.summary_level == 1)
        if l1.size:
            l1 = l1[np.argsort(self.span_first[l1], kind="stable")]
            bounds = np.stack([self.span_first[l1], self.span_last[l1] + 1], axis=1).ravel()
            padded = np.concatenate([values, values[:1]])  # a span may end at n
            # sorted spans: the gaps between them add at most n to the work
            out[l1] = ufunc.reduceat(padded, bounds, axis=0)[::2]
        for parents, flat, starts in self._child_groups:
            out[parents] = ufunc.reduceat(out[flat], starts, axis=0)
        return out

    def covered_leaves(self, summary: str) -> tuple[str, ...]:
        """Leaf ids covered by ``summary``, in chronological order."""
        j = self._summary(summary)
        return self.leaf_ids[int(self.span_first[j]) : int(self.span_last[j]) + 1]

    def ancestors_at(self, leaf: str, level: int) -> tuple[str, ...]:
        """Summaries of ``level`` covering ``leaf`` (several in a DAG), in input order."""
        i = self._leaf(leaf)
        if level < 1 or level > self.depth:
            return ()
        return tuple(
            self.summary_ids[j]
            for j in range(len(self.summaries))
            if self.summary_level[j] == level and self.span_first[j] <= i <= self.span_last[j]
        )

    def roots(self) -> tuple[str, ...]:
        """Top summaries (no parent) and uncovered leaves, in chronological order."""
        has_parent = {c for s in self.summaries for c in s.children}
        tops = [s.id for s in self.summaries if s.id not in has_parent]
        uncovered = [leaf for i, leaf in enumerate(self.leaf_ids) if self.avail[i] == 0]
        position = {s: int(self.span_first[self.summary_index[s]]) for s in tops}
        position.update({leaf: self.leaf_index[leaf] for leaf in uncovered})
        return tuple(sorted(position, key=lambda node: (position[node], node in has_parent)))

    def _leaf(self, leaf: str) -> int:
        try:
            return self.leaf_index[leaf]
        except KeyError:
            raise UnknownIdError(f"{leaf!r} is not a leaf", field="leaves", node=leaf) from None

    def _summary(self, summary: str) -> int:
        try:
            return self.summary_index[summary]
        except KeyError:
            raise UnknownIdError(
                f"{summary!r} is not a summary", field="summaries", node=summary
            ) from None
