"""Frontiers as paths: the boundary graph, extreme frontiers and enumeration.

Drop the protected leaves (always raw, rendered in place). The remaining
leaves, in order, have boundaries ``0..m``. Every valid frontier is a path
from boundary 0 to ``m`` whose edges are raw leaves (allowed at level 0)
and whole summaries (allowed at their level for every member). Choosing a
budgeted, cache-aware path is the whole fold problem; this module gives the
graph and the two extreme paths a user asks for first: the cheapest one (the
floor: the fewest tokens any valid frontier renders to) and the finest one
(the most detail the constraints allow).
"""

from __future__ import annotations

import itertools
import operator
from collections.abc import Callable, Iterator
from typing import NamedTuple

import numpy as np
import numpy.typing as npt

from .model import FoldProblem
from .render import frontier_from_levels

__all__ = [
    "BoundaryGraph",
    "cheapest_frontier",
    "enumerate_frontiers",
    "finest_frontier",
    "selectable_summaries",
]

IntArray = npt.NDArray[np.int64]


class Edge(NamedTuple):
    """One edge of the boundary graph."""

    start: int
    end: int
    node: int
    """Node index: a leaf (< n) or ``n + summary index``."""
    level: int
    tokens: int


class BoundaryGraph:
    """The boundary graph of a problem, constraints applied.

    Attributes
    ----------
    m : int
        Number of non-protected leaves (boundaries are ``0..m``).
    leaves : ndarray of int64
        Leaf index of each non-protected position.
    edges_from : list of list of Edge
        Outgoing edges per boundary, raw edge first, then summaries in input order.
    """

    def __init__(self, problem: FoldProblem) -> None:
        idx = problem.index
        self.problem = problem
        free = ~idx.protected
        self.leaves: IntArray = np.flatnonzero(free).astype(np.int64)
        self.m = int(self.leaves.size)
        prefix = np.concatenate([[0], np.cumsum(free)])
        self.edges_from: list[list[Edge]] = [[] for _ in range(self.m + 1)]
        lo, hi = idx.lo, idx.hi
        self.conflicted = bool((lo > hi).any())
        """True when some leaf's constraints leave no level: no path exists."""
        raw_tokens = idx.leaf_tokens.tolist()
        raw_ok = (lo == 0).tolist()
        for pos, i in enumerate(self.leaves.tolist()):
            if raw_ok[i]:
                self.edges_from[pos].append(Edge(pos, pos + 1, i, 0, raw_tokens[i]))
        for e in summary_edges(problem, prefix):
            self.edges_from[e.start].append(e)

    def levels_of(self, path: list[Edge]) -> IntArray:
        """The level array of a path (protected leaves raw)."""
        levels = np.zeros(self.problem.index.n, dtype=np.int64)
        for e in path:
            if e.level:
                levels[self.leaves[e.start : e.end]] = e.level
        return levels

    def reaches_end(self) -> npt.NDArray[np.bool_]:
        """``ok[p]``: some path leads from boundary ``p`` to the end."""
        ok = np.zeros(self.m + 1, dtype=np.bool_)
        if self.conflicted:
            return ok
        ok[self.m] = True
        for p in range(self.m - 1, -1, -1):
            ok[p] = any(ok[e.end] for e in self.edges_from[p])
        return ok

    def shortest(self, weight: Callable[[Edge], tuple[float, ...]]) -> list[Edge] | None:
        """The path minimising the summed ``weight`` tuples (lexicographic), or None.

        Ties keep the first edge found in :attr:`edges_from` order, so the
        result is deterministic.
        """
        if self.conflicted:
            return None
        inf = (float("inf"),)
        best: list[tuple[float, ...]] = [inf] * (self.m + 1)
        back: list[Edge | None] = [None] * (self.m + 1)
        best[0] = (0.0,)
        for p in range(self.m):
            here = best[p]
            if here == inf:
                continue
            for e in self.edges_from[p]:
                w = weight(e)
                base = here if len(here) == len(w) else (0.0,) * len(w)
                cand = tuple(map(operator.add, base, w))
                there = best[e.end]
                if there == inf or cand < there:
                    best[e.end] = cand
                    back[e.end] = e
        if best[self.m] == inf:
            return None
        path: list[Edge] = []
        p = self.m
        while p:
            step = back[p]
            assert step is not None
            path.append(step)
            p = step.start
        return path[::-1]


def selectable_summaries(problem: FoldProblem) -> npt.NDArray[np.bool_]:
    """Summaries a frontier may show: those with a non-protected member, every
    non-protected member allowing the summary's level.

    Linear in the hierarchy, whatever its depth (see
    :meth:`~folding.hierarchy.Hierarchy.span_reduce`), and computed once per problem.
    """
    return problem.index.selectable


def summary_edges(problem: FoldProblem, prefix: IntArray) -> list[Edge]:
    """Summary edges of the boundary graph, in input order.

    ``prefix[i]`` is the number of non-protected leaves before leaf ``i``. A
    summary is an edge when it has a non-protected member and every such member
    allows its level.
    """
    h = problem.hierarchy
    idx = problem.index
    out: list[Edge] = []
    starts = prefix[h.span_first].tolist()
    ends = prefix[h.span_last + 1].tolist()
    levels = h.summary_level.tolist()
    tokens = h.summary_tokens.tolist()
    for j in np.flatnonzero(selectable_summaries(problem)).tolist():
        out.append(Edge(starts[j], ends[j], idx.n + j, levels[j], tokens[j]))
    return out


def floor_levels(problem: FoldProblem) -> IntArray | None:
    """Levels of :func:`cheapest_frontier` (same ties), without building the full graph.

    Minimises (tokens, level x raw tokens) lexicographically over boundary-graph
    paths; raw edges are implicit. None when no valid frontier exists.

    The sweep visits only the boundaries where a summary starts or ends: between
    two of them a path can only run raw, so a run of raw edges is one step. The
    candidates reach each boundary in the order of the position-by-position sweep
    (by source; at one source the raw edge first, then summaries in input order),
    so ties resolve as there.
    """
    idx = problem.index
    if bool((idx.lo > idx.hi).any()):
        return None
    free = ~idx.protected
    leaves = np.flatnonzero(free)
    m = int(leaves.size)
    prefix = np.concatenate([[0], np.cumsum(free)])
    raw_pos = idx.leaf_tokens[leaves]
    raw_prefix = np.concatenate([[0], np.cumsum(raw_pos)]).tolist()
    blocked = np.concatenate([[0], np.cumsum(idx.lo[leaves] != 0)]).tolist()
    starting: dict[int, list[Edge]] = {}
    for e in summary_edges(problem, prefix):
        starting.setdefault(e.start, []).append(e)
    events = sorted({0, m} | set(starting) | {e.end for es in starting.values() for e in es})
    inf = float("inf")
    best_t: dict[int, float] = dict.fromkeys(events, inf)
    best_d: dict[int, float] = dict.fromkeys(events, inf)
    back: dict[int, Edge | None] = dict.fromkeys(events)
    back_from: dict[int, int] = {}
    best_t[0] = best_d[0] = 0.0

    def run_raw(p: int, q: int, t: float, d: float) -> None:
        # the raw edges p -> q: allowed when every leaf in between may be raw
        if blocked[q] - blocked[p]:
            return
        ct = t + (raw_prefix[q] - raw_prefix[p])
        if (ct, d) < (best_t[q], best_d[q]) or best_t[q] == inf:
            best_t[q], best_d[q], back[q] = ct, d, None
            back_from[q] = p

    for k, p in enumerate(events[:-1]):
        t, d = best_t[p], best_d[p]
        if t == inf:
            continue
        q = events[k + 1]
        if q == p + 1:
            run_raw(p, q, t, d)
        for e in starting.get(p, ()):
            ct = t + e.tokens
            cd = d + e.level * (raw_prefix[e.end] - raw_prefix[e.start])
            if best_t[e.end] == inf or (ct, cd) < (best_t[e.end], best_d[e.end]):
                best_t[e.end], best_d[e.end], back[e.end] = ct, cd, e
        if q != p + 1:
            run_raw(p, q, t, d)
    if best_t[m] == inf:
        return None
    levels = np.zeros(idx.n, dtype=np.int64)
    p = m
    while p:
        step = back[p]
        if step is None:
            p = back_from[p]
            continue
        levels[leaves[step.start : step.end]] = step.level
        p = step.start
    return levels


def cheapest_frontier(problem: FoldProblem) -> dict[str, int] | None:
    """The valid frontier with the fewest tokens (ignoring the budget), or None.

    Its rendered total is the floor: no valid frontier is cheaper. Ties prefer
    shallower folding. ``None`` means the constraints admit no frontier.

    Examples
    --------
    >>> from folding import FoldProblem, cheapest_frontier
    >>> p = FoldProblem.model_validate({
    ...     "leaves": [{"id": f"m{i}", "tokens": 100} for i in range(3)],
    ...     "summaries": [{"id": "S", "level": 1, "tokens": 30, "children": ["m0", "m1"]}],
    ...     "budget": {"total": 1000}})
    >>> cheapest_frontier(p)
    {'m0': 1, 'm1': 1}
    """
    levels = floor_levels(problem)
    return None if levels is None else frontier_from_levels(problem, levels)


def finest_frontier(problem: FoldProblem) -> dict[str, int] | None:
    """The valid frontier with the least folding (ignoring the budget), or None.

    Minimises the sum over leaves of ``level x raw tokens``; usually all raw
    except where pins or locks demand a summary.
    """
    levels = finest_levels(problem)
    return None if levels is None else frontier_from_levels(problem, levels)


def finest_levels(problem: FoldProblem) -> IntArray | None:
    """Levels of :func:`finest_frontier`: all raw when nothing forces a summary, else the
    path minimising (level x raw tokens, tokens). None when no valid frontier exists."""
    idx = problem.index
    if not (idx.lo > 0).any() and not (idx.lo > idx.hi).any():
        return np.zeros(idx.n, dtype=np.int64)
    graph = BoundaryGraph(problem)
    raw = idx.leaf_tokens
    path = graph.shortest(lambda e: (_depth_cost(e, graph, raw), e.tokens))
    return None if path is None else graph.levels_of(path)


def _depth_cost(e: Edge, graph: BoundaryGraph, raw: IntArray) -> int:
    if e.level == 0:
        return 0
    return e.level * int(raw[graph.leaves[e.start : e.end]].sum())


def enumerate_frontiers(
    problem: FoldProblem, *, max_summaries: int = 16
) -> Iterator[dict[str, int]]:
    """Every valid frontier (budget ignored), straight from the definition.

    Tries every set of summaries whose non-protected covered leaves are
    pairwise disjoint, shows those leaves at the summary's level and the rest
    raw, and keeps the frontiers every constraint allows. Exponential: an
    oracle for tests on tiny problems, independent of the renderer and of
    :class:`BoundaryGraph`.

    Raises
    ------
    ValueError
        With more than ``max_summaries`` summaries.
    """
    h = problem.hierarchy
    idx = problem.index
    n_s = idx.n_summaries
    if n_s > max_summaries:
        raise ValueError(
            f"enumerate_frontiers is exponential; {n_s} summaries > max_summaries={max_summaries}"
        )
    members = []
    for j in range(n_s):
        span = range(int(h.span_first[j]), int(h.span_last[j]) + 1)
        members.append(frozenset(i for i in span if not idx.protected[i]))
    seen: set[tuple[int, ...]] = set()
    for r in range(n_s + 1):
        for combo in itertools.combinations(range(n_s), r):
            sets = [members[j] for j in combo]
            if any(not s for s in sets):
                continue
            if sum(len(s) for s in sets) != len(frozenset().union(*sets)):
                continue
            levels = [0] * idx.n
            for j in combo:
                for i in members[j]:
                    levels[i] = int(h.summary_level[j])
            key = tuple(levels)
            if key in seen:
                continue
            seen.add(key)
            if all(idx.lo[i] <= levels[i] <= idx.hi[i] for i in range(idx.n)):
                yield {h.leaf_ids[i]: v for i, v in enumerate(levels) if v}
