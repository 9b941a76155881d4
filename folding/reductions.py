"""Reductions of fold problems, each with an exact inverse (the ``apply`` / ``invert`` habit).

:func:`merge_runs` states a problem whose runs of adjacent leaves always
share a level (a tool call and its answer, the messages of one chunk) with one
leaf per run: a smaller problem that means the same under that tie. The
:class:`RunReduction` it returns maps every answer back: frontiers, the
previous frontier, produce requests and conflicts, so that a plan of the
reduced problem is a plan of the original with the same tokens.

Examples
--------
>>> from folding import FoldProblem, render
>>> p = FoldProblem.model_validate({
...     "leaves": [{"id": f"m{i}", "tokens": 10} for i in range(4)],
...     "summaries": [{"id": "S", "level": 1, "tokens": 5, "children": ["m0", "m1", "m2"]}],
...     "budget": {"total": 100}})
>>> reduced, inverse = merge_runs(p, [(1, 3)])
>>> [leaf.id for leaf in reduced.leaves], reduced.summaries[0].children
(['m0', 'm1', 'm3'], ('m0', 'm1'))
>>> inverse.frontier({"m0": 1, "m1": 1})
{'m0': 1, 'm1': 1, 'm2': 1}
>>> render(reduced, {"m0": 1, "m1": 1}).total == render(p, {"m0": 1, "m1": 1, "m2": 1}).total
True
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

from .exceptions import InvalidProblemError
from .model import Conflict, FoldProblem, Frontier, Leaf, Pin, Summary
from .result import ProduceRequest

__all__ = ["ReductionError", "RunReduction", "merge_runs"]


class ReductionError(InvalidProblemError):
    """A run cannot be one leaf: the message names the run and what it cuts."""


@dataclass(frozen=True)
class RunReduction:
    """The inverse of :func:`merge_runs`.

    Attributes
    ----------
    members : dict of str to tuple of str
        Reduced leaf id -> the original leaf ids it stands for, in order.
    """

    members: Mapping[str, tuple[str, ...]]

    def frontier(self, reduced: Frontier) -> dict[str, int]:
        """The original frontier of a reduced one: each member at its run's level."""
        return {m: level for leaf, level in reduced.items() for m in self.members[leaf]}

    def reduce_frontier(self, original: Frontier) -> dict[str, int]:
        """The reduced form of an original frontier (the level of each run's first leaf)."""
        return {
            leaf: original[ids[0]]
            for leaf, ids in self.members.items()
            if ids[0] in original and original[ids[0]]
        }

    def produce(self, requests: Iterable[ProduceRequest]) -> list[ProduceRequest]:
        """Produce requests in original leaf ids (a run's first or last member)."""
        return [
            ProduceRequest(
                level=r.level, first=self.members[r.first][0], last=self.members[r.last][-1]
            )
            for r in requests
        ]

    def conflicts(self, conflicts: Iterable[Conflict]) -> list[Conflict]:
        """Conflicts in original leaf ids: one per member of each conflicting run."""
        return [
            Conflict(leaf=m, available=c.available, constraints=c.constraints)
            for c in conflicts
            for m in self.members[c.leaf]
        ]


def merge_runs(
    problem: FoldProblem, runs: Sequence[tuple[int, int]]
) -> tuple[FoldProblem, RunReduction]:
    """State ``problem`` with each run ``(start, end)`` of leaf indices as one leaf.

    The merged leaf keeps the first member's id, sums the members' tokens, takes
    their token-weighted salience (so the fidelity loss of any tied frontier is
    unchanged) and carries its members' pins and locks; its previous level is its
    members'. Runs of one leaf change nothing.

    Parameters
    ----------
    problem : FoldProblem
    runs : sequence of (int, int)
        Disjoint, half-open ranges of leaf indices.

    Returns
    -------
    reduced : FoldProblem
    inverse : RunReduction

    Raises
    ------
    ReductionError
        When a run is out of range or overlaps another, spans zones, is cut by a
        summary's span or by a pin or lock, or its members were shown at different
        previous levels.
    """
    leaves = problem.leaves
    n = len(leaves)
    owner = list(range(n))  # leaf index -> index of its run's first leaf
    for start, end in sorted(runs):
        if not 0 <= start < end <= n:
            raise ReductionError(f"run ({start}, {end}) is outside the {n} leaves", field="runs")
        for i in range(start, end):
            if owner[i] != i:
                raise ReductionError(f"run ({start}, {end}) overlaps another run", field="runs")
            owner[i] = start
        zones = {leaves[i].zone for i in range(start, end)}
        if len(zones) > 1:
            raise ReductionError(
                f"run ({start}, {end}) spans the zones {sorted(zones)}; a run is in one zone",
                field="runs",
                node=leaves[start].id,
            )
        shown = {(problem.previous or {}).get(leaves[i].id, 0) for i in range(start, end)}
        if len(shown) > 1:
            raise ReductionError(
                f"run ({start}, {end}) was shown at levels {sorted(shown)}; its leaves "
                "must share one previous level",
                field="runs",
                node=leaves[start].id,
            )
    covered: list[tuple[str, set[str]]] = [(p.describe(), set(p.leaves)) for p in problem.pins]
    covered.append(("lock", set(problem.locks)))
    for start, end in runs:
        run_ids = {leaves[i].id for i in range(start, end)}
        for what, on in covered:
            if 0 < len(run_ids & on) < len(run_ids):
                raise ReductionError(
                    f"{what} covers part of run ({start}, {end}); a run's leaves must share "
                    "their pins and locks",
                    field="runs",
                    node=leaves[start].id,
                )
    h = problem.hierarchy
    for j, s in enumerate(h.summaries):
        a, b = int(h.span_first[j]), int(h.span_last[j])
        if owner[a] != a or (b + 1 < n and owner[b + 1] != b + 1):
            raise ReductionError(
                f"summary {s.id!r} covers part of a run; merge only runs that every "
                "summary covers whole or not at all",
                field="runs",
                node=s.id,
            )
    members: dict[str, list[str]] = {}
    merged: list[Leaf] = []
    rename: dict[str, str] = {}
    for i, leaf in enumerate(leaves):
        if owner[i] != i:
            head = leaves[owner[i]].id
            members[head].append(leaf.id)
            rename[leaf.id] = head
            continue
        members[leaf.id] = [leaf.id]
        rename[leaf.id] = leaf.id
        merged.append(leaf)
    out: list[Leaf] = []
    for leaf in merged:
        ids = members[leaf.id]
        if len(ids) == 1:
            out.append(leaf)
            continue
        parts = [leaves[h.leaf_index[x]] for x in ids]
        tokens = sum(p.tokens for p in parts)
        salience = (
            sum(p.salience * p.tokens for p in parts) / tokens
            if tokens
            else max(p.salience for p in parts)
        )
        out.append(Leaf(id=leaf.id, tokens=tokens, salience=min(1.0, salience), zone=leaf.zone))
    summaries = [
        s
        if s.level > 1
        else Summary(
            id=s.id,
            level=s.level,
            tokens=s.tokens,
            children=tuple(dict.fromkeys(rename.get(c, c) for c in s.children)),
        )
        for s in problem.summaries
    ]
    pins = [
        Pin(
            leaves=tuple(dict.fromkeys(rename[x] for x in pin.leaves)),
            level=pin.level,
            max_level=pin.max_level,
            min_level=pin.min_level,
        )
        for pin in problem.pins
    ]
    previous = None
    if problem.previous is not None:
        previous = {rename[k]: v for k, v in problem.previous.items()}
    reduced = FoldProblem(
        leaves=tuple(out),
        summaries=tuple(summaries),
        pins=tuple(pins),
        locks=tuple(dict.fromkeys(rename[x] for x in problem.locks)),
        budget=problem.budget,
        previous=previous,
        fixed_tokens=problem.fixed_tokens,
    )
    return reduced, RunReduction({k: tuple(v) for k, v in members.items()})
