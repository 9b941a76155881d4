"""The thin adapter between a strategy's state and the solvers: two pure functions.

:func:`state_problem` turns a :class:`Snapshot` (plain message ids, tokens,
zones, chunk spans, summaries, pins, locks, the previous frontier and the
budget) into a :class:`~folding.FoldProblem`; :func:`read_plan` turns the
solver's answer into a :class:`Plan`: the layout to render, the frontier in
message ids, produce requests in message ids, the stats, or the error to
raise. The adapter holds no solver logic and knows nothing of any strategy.

How messages become leaves is the one reduction of this module:

* messages the pairing rule ties together (a call and its answer, see
  :func:`~context_manager.pairing.send_form`) are one leaf, so no frontier can
  split them, and a pin or lock on either side covers both;
* a chunk whose messages always share a level (live, in the middle, free of
  pins and locks) is one leaf whose id is the chunk's;
* every other message is a leaf of its own, with its id.

The inverse is exact: a leaf's level is the level of each of its messages.

The module is a reduction in the sense of a modelling layer's reductions (a problem
stated in one form, solved in another, the answer mapped back): :func:`state_problem`
*applies* it (a strategy's state to a :class:`~folding.FoldProblem`, keeping in
:class:`StatedProblem` what the way back needs) and :func:`read_plan` *inverts* it (a
:class:`~folding.SolveResult` to a :class:`Plan` in message ids). Nothing else
crosses between the application and the solvers.
"""

from __future__ import annotations

import bisect
import warnings
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from folding import Budget, FoldProblem, Layout, Leaf, Pin, Status, Summary, render
from folding.result import SolveResult

from .errors import ConstraintConflictError, OverBudgetError

__all__ = [
    "Block",
    "PinSpec",
    "Plan",
    "Snapshot",
    "StatedProblem",
    "SummarySpec",
    "read_plan",
    "state_problem",
]


@dataclass(frozen=True)
class SummarySpec:
    """A summary that can be shown: its span ``first..last`` (message indices, inclusive),
    the tokens of its recall pair and, above level 1, its child summaries."""

    id: str
    level: int
    tokens: int
    first: int
    last: int
    children: tuple[str, ...] = ()
    span: int = 1
    """As the leaf of a :class:`Block`: how many leaves the whole history would have
    over it (its chunks), which its age counts (:attr:`folding.Leaf.span`)."""
    raw_tokens: int | None = None
    """As the leaf of a :class:`Block`: the raw tokens of its messages, which the
    fidelity loss weighs (:attr:`folding.Leaf.raw_tokens`)."""
    parts: tuple[int, ...] | None = None
    """As the leaf of a :class:`Block`: the raw tokens of each chunk it stands for,
    oldest first (:attr:`folding.Leaf.parts`), so it weighs what they weigh as leaves."""


@dataclass(frozen=True)
class PinSpec:
    """A pin on messages ``first..last`` (indices, inclusive)."""

    id: str
    first: int
    last: int
    level: int | None = None
    max_level: int | None = None
    name: str | None = None


@dataclass(frozen=True)
class Block:
    """A run of messages stated at the grain of memories, not messages.

    ``leaves`` are the memories at level :attr:`offset` that tile the run, in
    order; the fold problem has each as one leaf (shown raw, it is shown as that
    memory). ``summaries`` are the memories above them (level > ``offset``, their
    children the leaves and each other). A frontier over the block can fold it
    further up to its top but shows nothing finer than ``offset``: levels in the
    problem are the memories' levels less ``offset``.
    """

    offset: int
    leaves: tuple[SummarySpec, ...]
    summaries: tuple[SummarySpec, ...]

    @property
    def first(self) -> int:
        return self.leaves[0].first

    @property
    def last(self) -> int:
        return self.leaves[-1].last


@dataclass
class Snapshot:
    """The state a compile decides over, in plain message terms.

    ``tokens`` and ``tied`` come from the one pairing rule (what each message is
    sent as, and whether it is shown only with the next one). ``previous`` is the
    level each message was shown at by the last committed frontier, or None before
    the first one.
    """

    ids: Sequence[str]
    tokens: Sequence[int]
    tied: Sequence[bool]
    head_end: int
    tail_start: int
    budget: int
    target: int
    fixed_tokens: int = 0
    chunks: Sequence[tuple[str, int, int]] = ()
    """(chunk id, start, end) of closed chunks whose messages are all live, in order."""
    summaries: Sequence[SummarySpec] = ()
    pins: Sequence[PinSpec] = ()
    locks: Sequence[int] = ()
    held_from: int | None = None
    """Index of the first held message: the tail starts no later than it."""
    previous: Sequence[int] | Mapping[int, int] | None = None
    """The level each message was last shown at (a mapping may leave out level 0)."""
    allowance: int | None = None
    """Tokens a floor may reach and still be sent (the grace over ``budget``)."""
    blocks: Sequence[Block] = ()
    """Disjoint runs of middle messages stated as memories, in order (none of them
    pinned, locked, held, or cut through a tool pair). ``chunks``, ``summaries``,
    ``pins`` and ``locks`` lie outside them."""
    window: Sequence[tuple[int, int, int]] = ()
    """The frontier runs ``(first, last, level)`` the blocks were chosen from (the
    caller's; it only tells two snapshots with the same blocks apart cheaply)."""
    head_start: int = 0
    """Where the raw head starts (a moved head: the messages before it are middle). The
    head is ``[head_start, head_end)``; a head that does not start at 0 is stated as a
    raw pin, as a head zone is the problem's prefix."""


@dataclass
class StatedProblem:
    """A fold problem and how its leaves map back to message indices."""

    problem: FoldProblem
    spans: dict[str, tuple[int, int]]
    """Leaf id -> (start, end) message indices."""
    pins: list[PinSpec] = field(default_factory=list)
    """The pins stated, in the order of ``problem.pins``."""
    dropped_summaries: int = 0
    """Summaries not stated because their span would split a tool pair."""
    offsets: dict[str, int] = field(default_factory=dict)
    """Leaf or summary id of a :class:`Block` -> its block's offset: the problem's
    level plus the offset is the memory level shown."""


@dataclass
class Plan:
    """What a compile renders, or the error it must raise."""

    layout: Layout | None = None
    spans: dict[str, tuple[int, int]] = field(default_factory=dict)
    levels: list[tuple[int, int, int]] = field(default_factory=list)
    """The frontier as runs ``(start, end, level)`` of message indices, level > 0 only."""
    produce: list[tuple[int, int, int]] = field(default_factory=list)
    """Summaries the solver asks for: ``(level, first, last)`` message indices."""
    stats: dict[str, Any] = field(default_factory=dict)
    error: Exception | None = None


def state_problem(
    snap: Snapshot, cache: dict[Any, Any] | None = None, *, reduce: bool | None = None
) -> StatedProblem:
    """The fold problem of a snapshot.

    ``cache`` (any dict kept by the caller between compiles) lets unchanged leaves
    and summaries be the same objects, so the problem extends the last one
    instead of being validated from scratch. It changes nothing in the answer.

    A tool pair (messages ``tied`` to the next) and a closed chunk each become one
    leaf: the reduction of this module. The problem of a snapshot without ties or
    chunks, ``dataclasses.replace(snap, tied=[False] * len(snap.ids), chunks=())``,
    has a leaf per message (a frontier may then split a pair), and the reduced
    problem is :func:`folding.merge_runs` of it.

    .. deprecated::
        ``reduce`` warns with :class:`DeprecationWarning` and will be removed in the
        next release: ``reduce=False`` is the problem of that snapshot.
    """
    if reduce is not None:
        warnings.warn(
            "state_problem(reduce=...) is deprecated and will be removed in the next "
            "release; for a leaf per message, state "
            "dataclasses.replace(snap, tied=[False] * len(snap.ids), chunks=())",
            DeprecationWarning,
            stacklevel=2,
        )
        if not reduce:
            snap = replace(snap, tied=[False] * len(snap.ids), chunks=())
    cache = {} if cache is None else cache
    # the objects of the last problem, and those of this one: what it no longer
    # states is let go, so the cache stays the size of one problem
    known: dict[Any, Any] = cache.get(("objects",), {})
    objects: dict[Any, Any] = {}

    def reuse(key: Any, make: Any, **fields: Any) -> Any:
        found = known.get(key)
        if found is None:
            found = make(**fields)
        objects[key] = found
        return found

    n = len(snap.ids)
    protected = set(snap.locks)
    for pin in snap.pins:
        protected.update(range(pin.first, pin.last + 1))
    moved_head = range(snap.head_start, snap.head_end) if snap.head_start else range(0)
    protected.update(moved_head)
    chunk_at: dict[int, tuple[str, int]] = {}
    tied = snap.tied
    for cid, a, b in snap.chunks:
        if b - a < 2 or (a < snap.head_end and b > snap.head_start) or b > snap.tail_start:
            continue
        if (a and tied[a - 1]) or tied[b - 1]:
            continue  # its edge would split a pair
        if protected and not protected.isdisjoint(range(a, b)):
            continue
        chunk_at[a] = (cid, b)
    block_at = {blk.first: blk for blk in snap.blocks}
    leaves: list[Leaf] = []
    spans: dict[str, tuple[int, int]] = {}
    offsets: dict[str, int] = {}
    # where each leaf outside the blocks starts and ends (message indices), by position
    starts: list[int] = []
    ends: list[int] = []
    at_leaf: list[int] = []

    def leaf_at(j: int) -> int | None:
        """The position of the leaf outside the blocks holding message ``j``."""
        k = bisect.bisect_right(starts, j) - 1
        return at_leaf[k] if k >= 0 and j < ends[k] else None

    i = 0
    tokens, ids = snap.tokens, snap.ids
    head_start, head_end, tail_start = snap.head_start, snap.head_end, snap.tail_start
    while i < n:
        blk = block_at.get(i)
        if blk is not None:
            for spec in blk.leaves:
                block_key = ("leaf", spec.id, -1, spec.tokens, spec.span, spec.raw_tokens)
                leaf = known.get(block_key)
                if leaf is None or (leaf.parts is not spec.parts and leaf.parts != spec.parts):
                    leaf = Leaf(
                        id=spec.id,
                        tokens=spec.tokens,
                        zone="middle",
                        span=spec.span,
                        raw_tokens=spec.raw_tokens,
                        parts=spec.parts,
                    )
                objects[block_key] = leaf
                spans[spec.id] = (spec.first, spec.last + 1)
                offsets[spec.id] = blk.offset
                leaves.append(leaf)
            i = blk.last + 1
            continue
        chunk = chunk_at.get(i)
        if chunk is not None:
            lid, end = chunk
            zone = "middle"
        else:
            end = i + 1  # a leaf is a pairing group: it ends at the first untied message
            while end < n and tied[end - 1]:
                end += 1
            lid = ids[i]
            zone = (
                "head"
                if i < head_end and not head_start
                else "tail"
                if i >= tail_start
                else "middle"
            )
        cost = sum(tokens[i:end]) if end - i > 1 else tokens[i]
        key = ("leaf", lid, end - i, cost, zone)
        leaf = known.get(key)
        if leaf is None:
            leaf = Leaf(id=lid, tokens=cost, zone=zone)
        objects[key] = leaf
        starts.append(i)
        ends.append(end)
        at_leaf.append(len(leaves))
        spans[lid] = (i, end)
        leaves.append(leaf)
        i = end
    leaf_ids = [leaf.id for leaf in leaves]
    summaries: list[Summary] = []
    stated: set[str] = set()
    dropped = 0

    def add(spec: SummarySpec, level: int, children: tuple[str, ...]) -> None:
        summary = reuse(
            ("summary", spec.id, level, spec.tokens, children),
            Summary,
            id=spec.id,
            level=level,
            tokens=spec.tokens,
            children=children,
        )
        summaries.append(summary)
        stated.add(spec.id)

    for spec in snap.summaries:
        a, b = spec.first, spec.last
        if spec.level == 1:
            la, lb = leaf_at(a), leaf_at(b)
            if la is None or lb is None:
                continue  # inside a block: stated there
            if spans[leaf_ids[la]][0] != a or spans[leaf_ids[lb]][1] != b + 1:
                dropped += 1
                continue  # its span cuts a leaf: it cannot be shown whole
            children = tuple(leaf_ids[la : lb + 1])
        else:
            if not all(c in stated for c in spec.children):
                continue
            children = spec.children
        add(spec, spec.level, children)
    for blk in snap.blocks:
        for spec in sorted(blk.summaries, key=lambda x: x.level):
            add(spec, spec.level - blk.offset, spec.children)
            offsets[spec.id] = blk.offset
    pins = [
        Pin(
            leaves=tuple(
                dict.fromkeys(leaf_ids[_at(leaf_at, j)] for j in range(p.first, p.last + 1))
            ),
            level=p.level,
            max_level=p.max_level,
        )
        for p in snap.pins
    ]
    if moved_head:  # a raw pin, after the host's own (StatedProblem.pins names those)
        pins.append(Pin(leaves=tuple(dict.fromkeys(leaf_ids[_at(leaf_at, j)] for j in moved_head))))
    previous = None
    if snap.previous is not None:
        before = snap.previous
        level_at = before.get if isinstance(before, Mapping) else before.__getitem__
        previous = {}
        for lid, (a, _) in spans.items():
            level = (level_at(a) or 0) - offsets.get(lid, 0)
            if level > 0:
                previous[lid] = level
    locks = sorted({leaf_ids[_at(leaf_at, j)] for j in snap.locks})
    fields = {
        "leaves": tuple(leaves),
        "summaries": tuple(summaries),
        "pins": tuple(pins),
        "locks": tuple(locks),
        "budget": Budget(total=snap.budget, target=snap.target),
        "previous": previous,
        "fixed_tokens": snap.fixed_tokens,
    }
    last = cache.get(("problem",))
    problem = FoldProblem.model_validate(fields, context={"extends": last} if last else None)
    cache[("problem",)] = problem
    cache[("objects",)] = objects
    return StatedProblem(problem, spans, list(snap.pins), dropped, offsets)


def _at(leaf_at: Callable[[int], int | None], j: int) -> int:
    """The leaf holding message ``j``, which pins and locks keep outside the blocks."""
    found = leaf_at(j)
    if found is None:
        raise KeyError(j)
    return found


def read_plan(snap: Snapshot, stated: StatedProblem, result: SolveResult) -> Plan:
    """The plan of a solver's answer, in message indices; the error when there is none.

    A floor that exceeds the budget but fits ``snap.allowance`` is rendered, and the
    overshoot reported as ``grace_tokens``.
    """
    problem, spans, offsets = stated.problem, stated.spans, stated.offsets
    produce = [
        (r.level + offsets.get(r.first, 0), spans[r.first][0], spans[r.last][1] - 1)
        for r in result.produce
        if r.first in spans and r.last in spans
    ]
    head = sum(snap.tokens[snap.head_start : snap.head_end])
    tail = sum(snap.tokens[snap.tail_start :])
    base: dict[str, Any] = {
        "solver": result.solver,
        "status": result.status.value,
        "budget": snap.budget,
        "head": {"messages": snap.head_end - snap.head_start, "tokens": head},
        "tail": {"messages": len(snap.ids) - snap.tail_start, "tokens": tail},
        "decision": result.decision,
        "solver_kv_cost": result.kv_cost,
        "stated": {
            "leaves": len(problem.leaves),
            "summaries": len(problem.summaries),
            "blocks": len(snap.blocks),
        },
    }
    if stated.dropped_summaries:
        base["unshowable_summaries"] = stated.dropped_summaries
    allowance = snap.budget if snap.allowance is None else snap.allowance
    graced = (
        result.status is Status.OVER_BUDGET
        and result.tokens is not None
        and result.tokens <= allowance
    )
    plan = Plan(spans=spans, produce=produce)
    if result.status in Status.with_plan() or graced:
        layout = result.layout or render(problem, result.frontier)  # rendered once
        plan.layout = layout
        h = problem.hierarchy
        leaves, leaf_index = problem.leaves, h.leaf_index
        summaries, summary_index = problem.summaries, h.summary_index
        buckets: dict[int, dict[str, int]] = {}
        middle_raw = {"messages": 0, "tokens": 0}
        for u in layout.units:
            if u.kind == "recall":
                shown = summaries[summary_index[u.key]].level + offsets.get(u.key, 0)
            else:
                shown = offsets.get(u.key, 0)
            if shown:  # a memory: a recall unit, or a leaf of a block shown as itself
                bucket = buckets.setdefault(shown, {"count": 0, "tokens": 0})
                bucket["count"] += 1
                bucket["tokens"] += u.tokens
            elif leaves[leaf_index[u.key]].zone == "middle" and not (
                snap.head_start <= spans[u.key][0] < snap.head_end
            ):
                a, b = spans[u.key]
                middle_raw["messages"] += b - a
                middle_raw["tokens"] += u.tokens
        runs: list[tuple[int, int, int]] = []
        frontier = result.frontier
        for leaf in problem.leaves:  # in message order
            lid = leaf.id
            level = frontier.get(lid, 0) + offsets.get(lid, 0)
            if not level:
                continue
            a, b = spans[lid]
            if runs and runs[-1][1] == a and runs[-1][2] == level:
                runs[-1] = (runs[-1][0], b, level)
            else:
                runs.append((a, b, level))
        plan.levels = runs
        plan.stats = {
            **base,
            "tokens": layout.total,
            "middle_raw": middle_raw,
            "summaries": {f"L{k}": v for k, v in sorted(buckets.items())},
        }
        if graced:
            plan.stats["grace_tokens"] = layout.total - snap.budget
        return plan
    diagnostics = _diagnostics(snap, stated, result, head, tail)
    plan.stats = {**base, "tokens": result.tokens, "diagnostics": diagnostics}
    if result.status is Status.INFEASIBLE:
        plan.error = ConstraintConflictError(_conflicts(snap, stated, result), diagnostics)
        return plan
    actual = result.tokens if result.tokens is not None else diagnostics.get("floor_tokens")
    if actual is None or actual <= snap.budget:
        raise RuntimeError(  # a solver contract breach, not a property of the request
            f"solver {result.solver!r} answered {result.status.value} with floor {actual} "
            f"within the budget {snap.budget}"
        )
    plan.error = OverBudgetError("solver", snap.budget, int(actual), diagnostics)
    return plan


def _conflicts(snap: Snapshot, stated: StatedProblem, result: SolveResult) -> list[dict[str, Any]]:
    """The solver's conflicts in message terms, each pin named by its id."""
    problem = stated.problem
    out = []
    for c in result.conflicts or []:
        a, b = stated.spans[c["leaf"]]
        constraints = []
        for text in c["constraints"]:
            if text.startswith("pin("):
                continue  # named below, with their ids
            if text == "zone=tail" and snap.held_from is not None and a >= snap.held_from:
                text = "zone=tail (held)"
            constraints.append(text)
        for spec, model in zip(stated.pins, problem.pins[: len(stated.pins)], strict=True):
            if c["leaf"] in model.leaves:
                constraints.append(f"{spec.id} {model.describe()}")
        out.append(
            {
                "message": snap.ids[a],
                "messages": list(snap.ids[a:b]),
                "available": c["available"],
                "constraints": constraints,
            }
        )
    return out


def _diagnostics(
    snap: Snapshot,
    stated: StatedProblem,
    result: SolveResult,
    head: int,
    tail: int,
) -> dict[str, Any]:
    problem, offsets = stated.problem, stated.offsets
    in_head = range(snap.head_start, snap.head_end) if snap.head_start else range(0)
    middle = sum(
        leaf.tokens
        for leaf in problem.leaves
        if leaf.zone == "middle"
        and leaf.id not in offsets
        and stated.spans[leaf.id][0] not in in_head
    )
    memories = sum(leaf.tokens for leaf in problem.leaves if leaf.id in offsets)
    tokens_of = {leaf.id: leaf.tokens for leaf in problem.leaves}
    raw_pins = [
        {"pin": spec.id, "name": spec.name, "tokens": sum(tokens_of[x] for x in model.leaves)}
        for spec, model in zip(stated.pins, problem.pins[: len(stated.pins)], strict=True)
        if model.is_raw
    ]
    return {
        "fixed_tokens": snap.fixed_tokens,
        "head_tokens": head,
        "tail_tokens": tail,
        "newest_tokens": snap.tokens[-1] if snap.tokens else 0,
        "middle_tokens": middle,
        **({"block_tokens": memories} if offsets else {}),
        "raw_pins": raw_pins,
        "deepest_level": max(
            (x.level + offsets.get(x.id, 0) for x in problem.summaries), default=0
        ),
        "floor_tokens": result.floor_tokens,
        "conflicts": result.conflicts,
        "suggestion": result.message
        or "raise the budget, shrink the head or recent window, or unpin",
    }
