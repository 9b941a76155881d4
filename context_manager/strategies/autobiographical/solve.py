"""One compile solved: the entries sent, selected by solving the fold problem.

:func:`snapshot` states the compile in plain message terms, the adapter
(:mod:`context_manager.adapter`) turns it into a fold problem and reads the
solver's plan back, and :func:`select` renders the plan's one layout: raw
messages in their send form, and a recall pair per shown memory. The frontier is
committed only after a live compile fully succeeded.
"""

from __future__ import annotations

import bisect
import logging
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import replace
from operator import is_
from typing import Any, overload

import solvers
from folding import InvalidProblemError

from ...adapter import (
    Block,
    PinSpec,
    Plan,
    Snapshot,
    StatedProblem,
    SummarySpec,
    read_plan,
    state_problem,
)
from ...errors import OverBudgetError, UncoveredDropError
from ...pairing import SendForm
from ...render_stats import Composition, LevelBucket
from ...store import damaged
from ..base import Entry, RequestBudget, Selection, StoredMessage, StrategyContext
from ..capping import MAX_CAP_ROUNDS, Capped, cap_forms, cap_message
from .accepted import (
    Stability,
    accepted_carried,
    leaf_stability,
    position_runs,
    save_stability,
    stability,
)
from .chunking import rebuild_chunks
from .state import State
from .tree import Node, Tree, tree
from .unfoldable import unfoldable
from .windows import Windows, newest_body_start, windows
from .writer import demand, merge_groups, queued_chunks

log = logging.getLogger(__name__)

__all__ = ["UNFOLD_LEVELS", "blocks", "select", "snapshot"]


def select(
    st: State,
    ctx: StrategyContext,
    budget: RequestBudget,
    solver: solvers.Solver,
    *,
    dry_run: bool = False,
) -> Selection:
    """The entries of one compile under ``budget``, folded by ``solver`` (a configured
    solver, :func:`solvers.configure`). A dry run writes nothing and queues nothing."""
    if not dry_run:
        rebuild_chunks(st, ctx)
    stored = ctx.messages()
    forms, _ = ctx.forms()
    # Results are sent whole when the request fits so. Else the caps the last compile
    # sent stay while the request fits with them: choosing them again would rewrite the
    # prompt from the first capped result on, to show a little more of a result that
    # stays capped. Only when they no longer fit is every cap chosen anew.
    held, held_at = _kept_caps(st, ctx, stored, forms, budget)
    caps: dict[int, Capped] = {}
    cap_at: dict[int, int] = {}
    level: int | None = None
    wanted: list[tuple[int, int, int]] = []  # the memories that would have spared a cap
    stable = _stability(st, ctx, stored, solver)
    for _ in range(MAX_CAP_ROUNDS + 1):
        plan, snap, stated = _solve(st, ctx, stored, budget, solver, caps, stable)
        error = plan.error
        if not isinstance(error, OverBudgetError):
            break
        wanted += [p for p in plan.produce if p not in wanted]
        if held:  # whole does not fit: the kept caps, if the request fits with them
            with_held = _solve(st, ctx, stored, budget, solver, held, stable)
            if not isinstance(with_held[0].error, OverBudgetError):
                plan, snap, stated = with_held
                caps, cap_at, level = held, held_at, min(held_at.values())
                break
            held = {}
        # cap, don't refuse: the results of what cannot fold, in the copy sent
        fixed = unfoldable(snap)
        found = cap_forms(
            stored,
            forms,
            (i for i, f in enumerate(fixed) if f),
            error.actual - error.budget,
            ctx.counter,
            level,
        )
        if found is None:
            break
        caps, level = found
        cap_at = dict.fromkeys(caps, level)
    if caps:
        capped = {
            "messages": len(caps),
            "results": sum(len(c.tools) for c in caps.values()),
            "cap_tokens": level,
            "tokens_saved": sum(c.before - c.tokens for c in caps.values()),
        }
        if isinstance(plan.error, OverBudgetError):
            plan.error.diagnostics["capped_results"] = capped
        else:
            plan.stats["capped_results"] = capped
    if isinstance(plan.error, OverBudgetError) and stored:
        start = newest_body_start(stored)  # the newest turn: a body in parts is all of it
        if start < len(stored) - 1:
            plan.error.diagnostics["newest_tokens"] = sum(ctx.sent()[0][start:])
    if isinstance(plan.error, OverBudgetError) and not plan.error.diagnostics.get("conflicts"):
        plan.error.diagnostics["suggestion"] = _suggestion(st, plan.error, budget.max_tokens)
    if not dry_run:
        # a capped context also asks for what would have fitted it uncapped
        demand(st, ctx, [*plan.produce, *(p for p in wanted if p not in plan.produce)], stored)
    if plan.error is not None:
        if dry_run:
            return Selection([], {**plan.stats, "fits": False})
        raise plan.error
    assert plan.layout is not None
    entries: list[Entry] = []
    covered: list[tuple[int, int]] = []  # the positions each unit shows, first to last
    last: dict[str, _Shown] = st.cache.get(("raw",), {})
    shown: dict[str, _Shown] = {}
    sent_caps: dict[str, int] = {}  # the caps of the results this request shows raw
    position = st.positions(ctx, stored)
    for unit in plan.layout.units:
        if unit.kind == "raw" and unit.key not in stated.offsets:
            first, end = plan.spans[unit.key]
            sent = forms[first:end]
            if caps and any(j in caps for j in range(first, end)):
                sent = [caps[j].form if j in caps else forms[j] for j in range(first, end)]
                sent_caps.update((stored[j].id, cap_at[j]) for j in range(first, end) if j in caps)
            kept = _raw_entries(stored, sent, first, last.get(unit.key))
            shown[unit.key] = kept
            entries.extend(kept[1])
            covered.append((first, end - 1))
        else:
            memory = st.summaries[unit.key]
            entries.extend(st.recall_pair(memory, ctx))
            covered.append((position[memory.first], position[memory.last]))
    if not _covers_all(ctx, stored, covered):  # never silently lose a message
        shown_ids = {i for e in entries for i in e.source_ids}
        dropped = [s.id for s in stored if s.id not in shown_ids]
        raise UncoveredDropError(dropped, "adaptive render")
    stats = {**plan.stats, "fits": True, **_composition(st, ctx, plan.stats)}
    st.cache[("raw",)] = shown
    if not dry_run:
        st.records.commit_frontier([(stored[a].id, stored[b - 1].id, v) for a, b, v in plan.levels])
        st.records.commit_caps(sent_caps, budget.input_tokens)
        if stable is not None and stable[1]:
            save_stability(st, stable[0])
    marks: tuple[int, ...] = ()
    if st.config.compression_cache_breakpoints:
        head = {s.id for s in stored[snap.head_start : snap.head_end]}
        marks = _cache_breakpoints(st, entries, head)
    history = plan.layout.total - budget.fixed_tokens
    grace = int(plan.stats.get("grace_tokens", 0))  # the allowance read_plan applied
    return Selection(entries, stats, marks, tokens=history, grace_tokens=grace)


def _composition(st: State, ctx: StrategyContext, stats: Mapping[str, Any]) -> Composition:
    """A rendered plan's memories in the reference's buckets, its totals and the work
    queued: ``summaries`` ``l1`` / ``l2`` / ``l3`` (level 3 and above; a level none is
    shown at is left out), ``summary_levels`` (every level, ``L1`` ... ``Lk``),
    ``pending`` ``{chunks, merges}`` and ``total`` (a memory counts as two messages)."""
    levels: dict[str, LevelBucket] = stats.get("summaries", {})
    buckets: dict[str, LevelBucket] = {}
    for name, shown in levels.items():
        bucket = buckets.setdefault(f"l{min(3, int(name[1:]))}", {"count": 0, "tokens": 0})
        bucket["count"] += shown["count"]
        bucket["tokens"] += shown["tokens"]
    raw = [stats["head"], stats["tail"], stats["middle_raw"]]
    memories = buckets.values()
    return {
        "summaries": dict(sorted(buckets.items())),
        "summary_levels": levels,
        "pending": {"chunks": len(queued_chunks(st, ctx)), "merges": len(merge_groups(st, ctx))},
        "total": {
            "messages": sum(r["messages"] for r in raw) + 2 * sum(b["count"] for b in memories),
            "tokens": sum(r["tokens"] for r in raw) + sum(b["tokens"] for b in memories),
        },
    }


def _suggestion(st: State, error: OverBudgetError, window: int) -> str:
    """What to change when even the most folded context does not fit, by option name."""
    d = error.diagnostics
    cfg = st.config
    parts = []
    newest = d.get("newest_tokens", 0)
    if newest + d.get("fixed_tokens", 0) > error.budget:
        parts.append(
            f"the newest message alone ({newest} tokens as sent) does not fit: it is the "
            "turn the model answers and is never folded, so shorten it (a tool result "
            "is capped in the copy sent; other text is not)"
        )
    if d.get("tail_tokens", 0) > newest or d.get("head_tokens", 0):
        parts.append(
            f"lower recent_window_tokens ({cfg.recent_window_tokens}, "
            f"{d.get('tail_tokens', 0)} tokens shown raw now) or head_window_tokens "
            f"({cfg.head_window_tokens}, {d.get('head_tokens', 0)} now)"
        )
    if d.get("raw_pins"):
        parts.append("unpin the raw pins listed in raw_pins")
    if d.get("middle_tokens", 0):
        parts.append("let compression catch up (compile(catch_up=True), or drain())")
        if not cfg.hierarchical:
            parts[-1] += (
                " if memories are still to be written; with hierarchical=False memories "
                "never merge, so a middle whose memories cannot fit needs hierarchical=True, "
                "larger chunks (target_chunk_tokens) or shorter memories "
                "(summary_target_tokens)"
            )
    parts.append(
        "raise the budget, or size the strategy for this window with "
        f"AutobiographicalConfig.for_window({window})"
    )
    return "; ".join(parts)


def _solve(
    st: State,
    ctx: StrategyContext,
    stored: Sequence[StoredMessage],
    budget: RequestBudget,
    solver: solvers.Solver,
    caps: Mapping[int, Capped],
    stable: tuple[Stability, bool] | None = None,
) -> tuple[Plan, Snapshot, StatedProblem]:
    """Solve the compile, following a windowed answer's blocks, with ``caps`` applied.

    A window that cannot fit the budget is no proof that history cannot: its blocks
    may hold memories the whole history could fold deeper. The compile then solves
    the whole history, so it refuses, or caps results, only when nothing fits.

    Following answers can come back to blocks it solved already (the answer over one
    window prefers the other's frontier, and back): the solves then repeat, so the
    answer the last round would give is read from those already made.

    With ``stable`` (the receipts' stability table), each problem is solved with its
    leaves' tau as kv-unified's ``stable_for``."""
    snap = _with_caps(snapshot(st, ctx, stored, budget), caps)
    whole = False
    fitted: tuple[Plan, Snapshot, StatedProblem] | None = None  # the whole history's
    rounds = MAX_REWINDOWS + 2
    # the rounds followed to new blocks: (what it solved, its round, its answer)
    trail: list[tuple[Any, int, Plan, Snapshot, StatedProblem]] = []
    for k in range(rounds):
        key = (snap.blocks, tuple(snap.window), whole)
        repeated = _repeated(trail, key, k, rounds)
        if repeated is not None:
            return repeated
        try:
            stated = state_problem(snap, st.cache)
        except InvalidProblemError as exc:  # stated from the stored records alone
            where = f"the memory records of namespace {ctx.namespace!r}"
            raise damaged(ctx.store.path, where, f"they contradict each other: {exc}") from None
        solving = solver if stable is None else _stabilised(st, ctx, stored, solver, stable, stated)
        plan = read_plan(snap, stated, solving.solve(stated.problem))
        if isinstance(plan.error, OverBudgetError) and snap.blocks:
            if fitted is not None:  # the blocks of its answer: the answer still fits
                return fitted
            if not whole:
                snap, whole = _with_caps(snapshot(st, ctx, stored, budget, whole=True), caps), True
                continue
        if whole and fitted is None and plan.error is None and not snap.blocks:
            fitted = (plan, snap, stated)
        if plan.error is not None or not _is_windowed(st, snap):
            break
        # the blocks the next compile would state from this answer: when they differ,
        # solve over them now, so compiling again with nothing changed sends the same
        shape = [(a, b - 1, v) for a, b, v in plan.levels]
        if shape == snap.window:
            break  # the frontier they were chosen from: the same blocks
        again = _with_caps(snapshot(st, ctx, stored, budget, shape=shape), caps)
        if again.blocks == snap.blocks:
            break
        trail.append((key, k, plan, snap, stated))
        snap = again
    return plan, snap, stated


def _stability(
    st: State, ctx: StrategyContext, stored: Sequence[StoredMessage], solver: solvers.Solver
) -> tuple[Stability, bool] | None:
    """The receipts' stability table, when it feeds the solver: kv-unified under
    ``continuity_baseline='accepted'``, with no ``stable_for`` of its own in
    ``solver_options``, once a receipt exists (see :func:`.accepted.stability`)."""
    if st.config.continuity_baseline != "accepted" or solver.name != "kv-unified":
        return None
    if getattr(solver.config, "stable_for", None) is not None:
        return None  # the host's own tau
    return stability(st, ctx, st.positions(ctx, stored), _Ids(stored))


def _stabilised(
    st: State,
    ctx: StrategyContext,
    stored: Sequence[StoredMessage],
    solver: solvers.Solver,
    stable: tuple[Stability, bool],
    stated: StatedProblem,
) -> solvers.Solver:
    """``solver`` with the stated leaves' tau as ``stable_for`` (itself when none has
    tau above 0)."""
    taus = leaf_stability(stable[0], st.positions(ctx, stored), stated.spans)
    if not taus:
        return solver
    return type(solver)(solver.config.model_copy(update={"stable_for": taus}))


def _repeated(
    trail: Sequence[tuple[Any, int, Plan, Snapshot, StatedProblem]],
    key: Any,
    k: int,
    rounds: int,
) -> tuple[Plan, Snapshot, StatedProblem] | None:
    """What :func:`_solve`'s last round would return, when round ``k`` is to solve what
    an earlier round of ``trail`` solved: the rounds from there repeat (the same blocks,
    the same answer), so the last one is read from those made. None otherwise."""
    for t, (seen, i, *_) in enumerate(trail):
        if seen == key:  # rounds i .. k - 1, trail[t:], repeat until the last
            period = k - i
            _, _, plan, _, stated = trail[t + (rounds - 1 - i) % period]
            return plan, trail[t + (rounds - i) % period][3], stated
    return None


def _kept_caps(
    st: State,
    ctx: StrategyContext,
    stored: Sequence[StoredMessage],
    forms: Sequence[SendForm],
    budget: RequestBudget,
) -> tuple[dict[int, Capped], dict[int, int]]:
    """The caps the last live compile sent, on the messages still stored that still hold
    a result over their cap, by position, and their caps; none under another input
    budget (a host that changes the window chooses anew)."""
    records = st.records
    if not records.caps or records.caps_budget != budget.input_tokens:
        return {}, {}
    position = st.positions(ctx, stored)
    caps: dict[int, Capped] = {}
    cap_at: dict[int, int] = {}
    for message_id, cap in records.caps.items():
        i = position.get(message_id)
        if i is None:
            continue
        capped = cap_message(stored, forms[i], i, cap, ctx.counter)
        if capped.tools:
            caps[i], cap_at[i] = capped, cap
    return caps, cap_at


def _with_caps(snap: Snapshot, caps: Mapping[int, Capped]) -> Snapshot:
    """The snapshot with the capped messages at their capped tokens."""
    if not caps:
        return snap
    tokens = list(snap.tokens)
    for i, c in caps.items():
        tokens[i] = c.tokens
    return replace(snap, tokens=tokens)


_Shown = tuple[Sequence[SendForm], tuple[Entry, ...]]
"""The send forms of a raw unit's messages and the entries they make."""


def _raw_entries(
    stored: Sequence[StoredMessage], forms: Sequence[SendForm], first: int, kept: _Shown | None
) -> _Shown:
    """The entries of the messages ``first, first + 1, ...`` shown raw as ``forms``; the
    ``kept`` ones of the last compile while their send forms are the very same."""
    if kept is not None and len(kept[0]) == len(forms) and all(map(is_, kept[0], forms)):
        return kept
    out: list[Entry] = []
    for j, form in enumerate(forms, first):
        sid = (stored[j].id,)
        out.extend(Entry(m.participant, m.content, sid, None, m) for m in form.messages)
    return forms, tuple(out)


def snapshot(
    st: State,
    ctx: StrategyContext,
    stored: Sequence[StoredMessage],
    budget: RequestBudget,
    *,
    shape: Sequence[tuple[int, int, int]] | None = None,
    whole: bool = False,
) -> Snapshot:
    """The state of a compile in plain message terms, for :mod:`context_manager.adapter`.

    With :attr:`~.config.AutobiographicalConfig.fold_window` on, each memory the
    last frontier showed as itself or through memories only is stated as a
    :class:`~context_manager.adapter.Block` one level below the finest memory shown
    in it (see :func:`blocks`); the rest is stated message by message. The work of
    a compile then follows what the frontier can reach, not the length of history.
    ``shape`` (runs ``(first, last, level)`` of positions) chooses the blocks in place
    of the last frontier; the previous frontier the solver is given stays the last one.
    ``whole`` states the whole history message by message, with the last frontier as
    the previous one.

    "The last frontier" is the newest fold receipt's under
    :attr:`~.config.AutobiographicalConfig.continuity_baseline` ``'accepted'`` (once
    the branch has one), else the last committed one.
    """
    cfg = st.config
    records = st.records
    win = windows(st, ctx, stored)
    position = st.positions(ctx, stored)
    n = len(stored)
    pins = [
        PinSpec(p.id, position[p.first], position[p.last], p.level, p.max_level, p.name)
        for p in records.sound_pins
        # a pin on removed messages lapses, as does one a redo turned around
        if p.first in position and p.last in position and position[p.first] <= position[p.last]
    ]
    locks = sorted(position[x] for x in records.locks if x in position)
    if win.held_from is not None:
        pins, locks = _held_wins(st, stored, pins, locks, win.held_from)
    carried = _baseline(st, ctx, position)
    memories = tree(st, ctx, position)
    found: list[Block] = []
    window: Sequence[tuple[int, int, int]] = ()
    if cfg.fold_window and carried and _windowed(cfg.solver_and_options[0]) and not whole:
        window = carried if shape is None else shape
        found = blocks(memories, win, window, pins, locks)
    collapsed = {b.first for b in found}
    specs: list[SummarySpec] = []
    for top in memories.tops:
        if top.first not in collapsed:
            key = ("specs", top.id)
            if key not in memories.kept:
                memories.kept[key] = [_spec(memories, x) for x in memories.above(top, 0)]
            specs.extend(memories.kept[key])
    specs.sort(key=lambda x: x.level)  # children before their parents
    outside = _outside(found, n)
    previous: _Levels | None = None
    if carried is not None:
        previous = _Levels(carried, outside, [leaf.first for blk in found for leaf in blk.leaves])
    return Snapshot(
        ids=_Ids(stored),
        tokens=win.tokens,
        tied=win.tied,
        head_end=win.head_end,
        head_start=win.head_start,
        tail_start=win.tail_start,
        budget=budget.input_tokens,
        target=budget.target_tokens(cfg.compression_slack_ratio),
        fixed_tokens=budget.fixed_tokens,
        chunks=_chunks_in(st, ctx, stored, position, outside),
        summaries=specs,
        pins=pins,
        locks=locks,
        held_from=win.held_from,
        previous=previous,
        allowance=budget.allowance_tokens(cfg.over_budget_grace_ratio),
        blocks=found,
        window=list(window),
    )


def _held_wins(
    st: State,
    stored: Sequence[StoredMessage],
    pins: list[PinSpec],
    locks: list[int],
    held_from: int,
) -> tuple[list[PinSpec], list[int]]:
    """While a hold lasts, its messages (from ``held_from`` on) are sent raw: a pin's
    fold level and a lock's frozen level give way there, instead of every compile
    refusing with a conflict. The part of a pin before ``held_from`` still holds;
    the pin and the lock are whole again once the hold is released. Each give-way is
    logged once per hold."""
    kept: list[PinSpec] = []
    yielded: list[str] = []
    for pin in pins:
        if not pin.level or pin.last < held_from:
            kept.append(pin)
            continue
        yielded.append(f"pin {pin.id} (level={pin.level})")
        if pin.first < held_from:
            kept.append(replace(pin, last=held_from - 1))
    frozen = [x for x in locks if x < held_from]
    yielded += [f"the lock on message {stored[x].id!r}" for x in locks if x >= held_from]
    logged: set[tuple[str, str]] = st.cache.setdefault(("held wins",), set())
    first = stored[held_from].id
    fresh = [y for y in yielded if (first, y) not in logged]
    if fresh:
        logged.update((first, y) for y in fresh)
        log.warning(
            "messages held from %r on are sent raw while the hold lasts; %s give%s way there",
            first,
            ", ".join(fresh),
            "s" if len(fresh) == 1 else "",
        )
    return kept, frozen


MAX_REWINDOWS = 8
"""Solves one compile may add to follow its own answer's blocks (see :func:`select`)."""


def _is_windowed(st: State, snap: Snapshot) -> bool:
    cfg = st.config
    return cfg.fold_window and snap.previous is not None and _windowed(cfg.solver_and_options[0])


def _windowed(method: str) -> bool:
    """Only a solver built for long-lived agents (``Capabilities.windowed``: kv-stable,
    kv-unified) is given the window; the others (the greedy baselines, ``exact``, the
    oracles) always see the whole history, as they are measured."""
    return solvers.capabilities(method).windowed


UNFOLD_LEVELS = 1
"""How many levels below the finest memory the last frontier showed in a block one
compile may unfold (the next compile may unfold as many again)."""


def blocks(
    memories: Tree,
    win: Windows,
    carried: Sequence[tuple[int, int, int]],
    pins: Sequence[PinSpec],
    locks: Sequence[int],
) -> list[Block]:
    """The tops stated as blocks, in order.

    A top becomes a block when the last frontier (``carried``: runs ``(first, last,
    level)`` of positions) showed every message under it through a memory of level
    ``L`` or more with ``L > UNFOLD_LEVELS``, it lies in the middle, no pin or lock
    touches it and no tool pair crosses the edge of a memory it is cut into. Its
    leaves are then its memories at level ``L - UNFOLD_LEVELS``.
    """
    tied = win.tied
    out: list[Block] = []
    protected = sorted([(p.first, p.last) for p in pins] + [(j, j) for j in locks])
    starts = [a for a, _, _ in carried]
    for top in memories.tops:
        if (top.first < win.head_end and top.last >= win.head_start) or top.last >= win.tail_start:
            continue
        if top.id in memories.overlapping:
            continue
        if any(a <= top.last and top.first <= b for a, b in protected):
            continue
        finest = _finest(carried, starts, top.first, top.last)
        offset = finest - UNFOLD_LEVELS
        if offset < 1:
            continue
        key = ("block", top.id, offset)
        if key not in memories.kept:  # a top's messages and ties stand with the tree
            leaves = memories.below(top, offset)
            memories.kept[key] = (
                None
                if not leaves
                or any((leaf.first and tied[leaf.first - 1]) or tied[leaf.last] for leaf in leaves)
                else Block(
                    offset,
                    tuple(_block_leaf(memories, x, win.tokens) for x in leaves),
                    tuple(_spec(memories, x) for x in memories.above(top, offset)),
                )
            )
        block = memories.kept[key]
        if block is not None:
            out.append(block)
    return out


def _finest(carried: Sequence[tuple[int, int, int]], starts: list[int], a: int, b: int) -> int:
    """The lowest level the runs show over positions ``a..b`` (0 where none covers one)."""
    k = bisect.bisect_right(starts, a) - 1
    at, finest = a, None
    while at <= b:
        if k < 0 or k >= len(carried) or not carried[k][0] <= at <= carried[k][1]:
            return 0
        level = carried[k][2]
        finest = level if finest is None else min(finest, level)
        at = carried[k][1] + 1
        k += 1
    return finest or 0


class _Levels(Mapping[int, int]):
    """The level the last frontier showed each stated position at (positions outside the
    blocks, and each block leaf's first), read from its runs: building it costs the
    runs, not the messages they cover."""

    def __init__(
        self,
        carried: Sequence[tuple[int, int, int]],
        outside: Sequence[tuple[int, int]],
        block_leaves: Sequence[int],
    ) -> None:
        self._carried = carried
        self._starts = [a for a, _, _ in carried]
        self._outside = outside
        self._bounds = [lo for lo, _ in outside]
        self._points = block_leaves
        self._pointed = set(block_leaves)

    def _stated(self, j: int) -> bool:
        if j in self._pointed:
            return True
        k = bisect.bisect_right(self._bounds, j) - 1
        return k >= 0 and j < self._outside[k][1]

    def get(self, j: int, default: int | None = None) -> int | None:  # type: ignore[override]
        # most positions a compile asks for are raw: answer them without raising
        if self._stated(j):
            level = _level_at(self._carried, self._starts, j)
            if level:
                return level
        return default

    def __getitem__(self, j: int) -> int:
        level = self.get(j)
        if level is None:
            raise KeyError(j)
        return level

    def __iter__(self) -> Iterator[int]:
        spots = [j for lo, hi in self._outside for j in range(lo, hi)]
        for j in sorted(spots + list(self._points)):
            if _level_at(self._carried, self._starts, j):
                yield j

    def __len__(self) -> int:
        return sum(1 for _ in self)


def _level_at(carried: Sequence[tuple[int, int, int]], starts: list[int], j: int) -> int:
    k = bisect.bisect_right(starts, j) - 1
    if k >= 0 and carried[k][0] <= j <= carried[k][1]:
        return carried[k][2]
    return 0


def _block_leaf(memories: Tree, x: Node, tokens: Sequence[int]) -> SummarySpec:
    """A memory as the leaf of a block: priced as its recall pair, weighed as the
    chunks it stands for, each at its own age (counted once per tree)."""
    parts = memories.extent(x, tokens)
    return SummarySpec(
        x.id,
        x.level,
        memories.tokens(x),
        x.first,
        x.last,
        tuple(x.children),
        len(parts),
        memories.extent_total(x, tokens),
        parts,
    )


def _spec(memories: Tree, x: Node) -> SummarySpec:
    return SummarySpec(x.id, x.level, memories.tokens(x), x.first, x.last, tuple(x.children))


def _outside(found: Sequence[Block], n: int) -> list[tuple[int, int]]:
    """The ranges ``[lo, hi)`` of positions stated message by message."""
    out, at = [], 0
    for blk in found:
        if blk.first > at:
            out.append((at, blk.first))
        at = blk.last + 1
    if at < n:
        out.append((at, n))
    return out


def _baseline(
    st: State, ctx: StrategyContext, position: dict[str, int]
) -> list[tuple[int, int, int]] | None:
    """The frontier a compile is stated against, as position runs ``(first, last,
    level)``: the newest fold receipt's under ``continuity_baseline='accepted'`` once
    one exists, else the last committed one (None before the first compile)."""
    if st.config.continuity_baseline == "accepted":
        accepted = accepted_carried(st, ctx, position)
        if accepted is not None:
            return accepted
    return _carried(st, ctx, position) if st.records.compiled else None


def _carried(
    st: State, ctx: StrategyContext, position: dict[str, int]
) -> list[tuple[int, int, int]]:
    """The committed frontier as position runs ``(first, last, level)``, in order."""
    runs = st.records.runs
    kept = st.cache.get(("carried",))
    key = (ctx.version(), len(position))
    if kept is not None and kept[0] is runs and kept[1] == key:
        return kept[2]  # type: ignore[no-any-return]
    merged = position_runs(runs, position)
    st.cache[("carried",)] = (runs, key, merged)
    return merged


def _chunks_in(
    st: State,
    ctx: StrategyContext,
    stored: Sequence[StoredMessage],
    position: dict[str, int],
    ranges: Sequence[tuple[int, int]],
) -> list[tuple[str, int, int]]:
    """Closed chunks whose messages are all live and lie in ``ranges``, in order."""
    spans, starts = _chunk_spans(st, ctx, stored, position)
    out = []
    for lo, hi in ranges:
        k = bisect.bisect_left(starts, lo)
        while k < len(spans) and spans[k][1] <= hi:
            a, b, cid = spans[k]
            out.append((cid, a, b))
            k += 1
    return out


def _chunk_spans(
    st: State, ctx: StrategyContext, stored: Sequence[StoredMessage], position: dict[str, int]
) -> tuple[list[tuple[int, int, str]], list[int]]:
    """``(start, end, chunk id)`` of every closed chunk whose messages are all live, by
    start, and the starts alone. Appends never move a closed chunk, so new records only
    extend them; an edit, a removal, a branch switch or a changed record rebuilds them."""
    chunks = st.records.chunks
    key = (ctx.version(), st.records.revision)
    kept = st.cache.get(("chunk-spans",))
    if kept is None or kept[0] != key or kept[1] > len(chunks):
        kept = (key, 0, [], [])
    done: int = kept[1]
    spans: list[tuple[int, int, str]] = kept[2]
    starts: list[int] = kept[3]
    n = len(stored)
    for chunk in chunks[done:]:
        first = position.get(chunk.source_ids[0])
        if first is None:
            continue
        end = first + len(chunk.source_ids)
        if end <= n and [s.id for s in stored[first:end]] == chunk.source_ids:
            at = bisect.bisect_left(spans, (first, end, chunk.id))
            spans.insert(at, (first, end, chunk.id))
            starts.insert(at, first)
    st.cache[("chunk-spans",)] = (key, len(chunks), spans, starts)
    return spans, starts


class _Ids(Sequence[str]):
    """The message ids of ``stored``, read in place."""

    def __init__(self, stored: Sequence[StoredMessage]) -> None:
        self._stored = stored

    def __len__(self) -> int:
        return len(self._stored)

    @overload
    def __getitem__(self, i: int) -> str: ...
    @overload
    def __getitem__(self, i: slice) -> list[str]: ...
    def __getitem__(self, i: int | slice) -> str | list[str]:
        if isinstance(i, slice):
            return [s.id for s in self._stored[i]]
        return self._stored[i].id


def _cache_breakpoints(st: State, entries: Sequence[Entry], head: set[str]) -> tuple[int, ...]:
    """The ends of the raw head, of the last merged memory and of the last memory."""
    head_end = last_merged = last_memory = None
    for i, e in enumerate(entries):
        if e.summary_id is None:
            if last_memory is None and e.source_ids and head.issuperset(e.source_ids):
                head_end = i
            continue
        last_memory = i
        if st.summaries[e.summary_id].level >= 2:
            last_merged = i
    return tuple(sorted({i for i in (head_end, last_merged, last_memory) if i is not None}))


def _covers_all(
    ctx: StrategyContext,
    stored: Sequence[StoredMessage],
    covered: Sequence[tuple[int, int]],
) -> bool:
    """Every stored message lies in a run ``(first, last)`` of positions some unit
    shows (a raw message, or the span of a memory), or sends nothing
    (:func:`~context_manager.pairing.send_form`: a result whose call is gone, or a
    call not answered yet: zero tokens as sent).

    A memory's messages are a contiguous run (the adapter shows no other), so the check
    is one sweep over the runs; only the gaps between them are read message by message.
    """
    tokens, _ = ctx.sent()
    reach = -1
    for a, b in sorted(covered):
        if a > reach + 1 and any(tokens[j] for j in range(reach + 1, a)):
            return False
        reach = max(reach, b)
    return not any(tokens[j] for j in range(reach + 1, len(stored)))
