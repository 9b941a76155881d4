"""The memory tree in message positions, kept across compiles.

A compile states only what can change: the memories near the frontier and the
messages below them. :class:`Tree` is what that choice reads: every memory that
can be shown (all of its messages live, in one run), where it starts and ends,
its children that can be shown, and the *tops* (shown memories with no showable
parent) in message order. It is rebuilt only when a memory is added or dropped, a
chunk record changes, or a message is edited or removed; appends leave it as is
(memories cover closed chunks only).
"""

from __future__ import annotations

import bisect
import itertools
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

from ..base import StrategyContext
from .records import SummaryEntry
from .state import State

__all__ = ["Node", "Tree", "tree"]


@dataclass
class Node:
    """A showable memory: its message span ``first..last`` (positions, inclusive)."""

    id: str
    level: int
    first: int
    last: int
    children: list[str] = field(default_factory=list)
    """Showable child memories in message order (empty for an L1)."""


@dataclass
class Tree:
    """The showable memories and the tops, in message order."""

    nodes: dict[str, Node]
    tops: list[Node]
    """Showable memories whose parent is missing or cannot be shown, by first position."""
    overlapping: set[str] = field(default_factory=set)
    """Tops whose span overlaps another top's (re-written memories over one run)."""
    price: Callable[[str], int] = field(default=lambda _: 0, repr=False)
    """Memory id -> the tokens of its recall pair (counted when first asked: only the
    memories a compile states are ever counted)."""

    extents: dict[str, tuple[int, ...]] = field(default_factory=dict, repr=False)
    extent_totals: dict[str, int] = field(default_factory=dict, repr=False)
    kept: dict[tuple[str, ...] | tuple[str, str, int], Any] = field(
        default_factory=dict, repr=False
    )
    """What compiles derive from the tree (blocks, specs), kept while it stands."""

    def tokens(self, node: Node) -> int:
        """What showing ``node`` costs: its recall pair."""
        return self.price(node.id)

    def extent(self, node: Node, tokens: Sequence[int]) -> tuple[int, ...]:
        """The raw tokens of each L1 memory under ``node``, in message order (kept with
        the tree: its messages do not change while it stands)."""
        found = self.extents.get(node.id)
        if found is None:
            if node.level == 1:
                found = (sum(tokens[node.first : node.last + 1]),)
            else:
                found = tuple(x for c in node.children for x in self.extent(self.nodes[c], tokens))
            self.extents[node.id] = found
        return found

    def extent_total(self, node: Node, tokens: Sequence[int]) -> int:
        """The sum of :meth:`extent` (kept with it)."""
        found = self.extent_totals.get(node.id)
        if found is None:
            found = self.extent_totals[node.id] = sum(self.extent(node, tokens))
        return found

    def below(self, node: Node, level: int) -> list[Node]:
        """The memories at ``level`` under ``node`` in message order (``node`` itself
        at its own level); empty when some branch of it stops above ``level``."""
        out: list[Node] = []
        stack = [node]
        while stack:
            x = stack.pop()
            if x.level == level:
                out.append(x)
                continue
            if x.level < level or not x.children:
                return []
            stack.extend(self.nodes[c] for c in reversed(x.children))
        return out

    def above(self, node: Node, level: int) -> list[Node]:
        """``node`` and the memories under it with a level above ``level``, parents first."""
        out: list[Node] = []
        stack = [node]
        while stack:
            x = stack.pop()
            if x.level <= level:
                continue
            out.append(x)
            stack.extend(self.nodes[c] for c in reversed(x.children))
        return out


def tree(st: State, ctx: StrategyContext, position: dict[str, int]) -> Tree:
    """The tree of the current records (cached until a memory or a chunk record
    changes, or a message is edited or removed)."""
    records = st.records
    key = (ctx.version(), records.revision, len(records.summaries))
    kept = st.cache.get(("tree",))
    if kept is not None and kept[0] == key:
        return kept[1]  # type: ignore[no-any-return]
    summaries = records.summaries
    if kept is not None and kept[0][:2] == key[:2] and kept[0][2] < key[2]:
        # memories were only added (in order, after their children): extend the tree
        grown: Tree = kept[1]
        added = list(itertools.islice(reversed(summaries.values()), key[2] - kept[0][2]))
        for entry in reversed(added):
            node = _node(st, grown.nodes, entry, position)
            if node is None:
                continue
            grown.nodes[node.id] = node
            gone = set(node.children)
            grown.tops = [x for x in grown.tops if x.id not in gone] if gone else grown.tops
            bisect.insort(grown.tops, node, key=_order)
            runs = grown.kept.get(("l1-runs",))
            if node.level == 1 and runs is not None:
                add_run(runs, node.first, node.last)  # the union of L1 spans, kept merged
        grown.overlapping = _overlapping(grown.tops)
        st.cache[("tree",)] = (key, grown)
        return grown
    nodes: dict[str, Node] = {}
    for entry in sorted(summaries.values(), key=lambda x: (x.level, x.id)):
        node = _node(st, nodes, entry, position)
        if node is not None:
            nodes[node.id] = node
    tops = [
        x
        for x in nodes.values()
        if (parent := summaries[x.id].parent_id) is None or parent not in nodes
    ]
    tops.sort(key=_order)
    result = Tree(nodes, tops, _overlapping(tops), lambda x: st.recall_tokens(ctx, summaries[x]))
    st.cache[("tree",)] = (key, result)
    return result


def _order(x: Node) -> tuple[int, int, str]:
    return (x.first, -x.level, x.id)


def _node(
    st: State, nodes: dict[str, Node], entry: SummaryEntry, position: dict[str, int]
) -> Node | None:
    """``entry`` as a node when it can be shown (its children already in ``nodes``)."""
    first, last = position.get(entry.first), position.get(entry.last)
    if first is None or last is None or last - first + 1 != st.span_size(entry):
        return None  # a covered message is gone: it cannot be shown
    children: list[str] = []
    if entry.level > 1:
        children = [c for c in entry.source_ids if c in nodes]
        if len(children) != len(entry.source_ids) or not _tiles(nodes, children, first, last):
            return None
    return Node(entry.id, entry.level, first, last, children)


def _tiles(nodes: dict[str, Node], children: Sequence[str], first: int, last: int) -> bool:
    """The children's spans follow each other from ``first`` to ``last``."""
    at = first
    for c in children:
        node = nodes[c]
        if node.first != at:
            return False
        at = node.last + 1
    return at == last + 1


def _overlapping(tops: list[Node]) -> set[str]:
    """Ids of the tops (sorted by first position) whose span overlaps another's."""
    out: set[str] = set()
    reach, owner = -1, None
    for x in tops:
        if x.first <= reach and owner is not None:
            out.update((x.id, owner.id))
        if x.last > reach:
            reach, owner = x.last, x
    return out


def covered_runs(spans: Iterable[tuple[int, int]]) -> list[tuple[int, int]]:
    """The union of inclusive spans ``(first, last)`` as disjoint runs, sorted, where
    touching spans make one run.

    Examples
    --------
    >>> covered_runs([(6, 9), (0, 2), (3, 4), (8, 12)])
    [(0, 4), (6, 12)]
    """
    runs: list[tuple[int, int]] = []
    for a, b in sorted(spans):
        if runs and a <= runs[-1][1] + 1:
            runs[-1] = (runs[-1][0], max(b, runs[-1][1]))
        else:
            runs.append((a, b))
    return runs


def add_run(runs: list[tuple[int, int]], a: int, b: int) -> None:
    """Add the span ``a..b`` to the runs of :func:`covered_runs`, in place.

    Examples
    --------
    >>> runs = [(0, 4), (10, 12)]
    >>> add_run(runs, 5, 9)
    >>> runs
    [(0, 12)]
    """
    k = bisect.bisect_left(runs, (a, a))
    if k and runs[k - 1][1] + 1 >= a:
        k -= 1
        a = runs[k][0]
    j = k
    while j < len(runs) and runs[j][0] <= b + 1:
        b = max(b, runs[j][1])
        j += 1
    runs[k:j] = [(a, b)]
