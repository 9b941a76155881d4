"""Folding and rendering: one compile, from the state to the entries sent.

:func:`snapshot` states the compile in plain message terms, the adapter
(:mod:`context_manager.adapter`) turns it into a fold problem and reads the
solver's plan back, and :func:`select` renders the plan's one layout: raw
messages in their send form, and a recall pair per shown memory. The frontier is
committed only after a live compile fully succeeded.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import solvers

from ...adapter import PinSpec, Snapshot, SummarySpec, read_plan, state_problem
from ...errors import UncoveredDropError
from ..base import Entry, RequestBudget, Selection, StoredMessage, StrategyContext
from .chunking import rebuild_chunks
from .state import State
from .windows import windows
from .writer import demand

__all__ = ["select", "snapshot"]


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
    snap = snapshot(st, ctx, stored, budget)
    stated = state_problem(snap, st.cache)
    plan = read_plan(snap, stated, solver.solve(stated.problem))
    if not dry_run:
        demand(st, ctx, plan.produce, stored)
    if plan.error is not None:
        if dry_run:
            return Selection([], {**plan.stats, "fits": False})
        raise plan.error
    assert plan.layout is not None
    entries: list[Entry] = []
    for unit in plan.layout.units:
        if unit.kind == "raw":
            first, end = plan.spans[unit.key]
            for j in range(first, end):
                sid = (stored[j].id,)
                entries.extend(
                    Entry(m.participant, m.content, sid, None, m) for m in forms[j].messages
                )
        else:
            entries.extend(st.recall_pair(st.summaries[unit.key]))
    if not _covers_all(st, ctx, stored, entries, forms):  # never silently lose a message
        shown = {i for e in entries for i in e.source_ids}
        dropped = [s.id for s in stored if s.id not in shown]
        raise UncoveredDropError(dropped, "adaptive render")
    stats = {**plan.stats, "fits": True}
    if not dry_run:
        st.records.commit_frontier([(stored[a].id, stored[b - 1].id, v) for a, b, v in plan.levels])
    marks: tuple[int, ...] = ()
    if st.config.compression_cache_breakpoints:
        marks = _cache_breakpoints(st, entries, {s.id for s in stored[: snap.head_end]})
    history = plan.layout.total - budget.fixed_tokens
    return Selection(entries, stats, marks, tokens=history)


def snapshot(
    st: State, ctx: StrategyContext, stored: Sequence[StoredMessage], budget: RequestBudget
) -> Snapshot:
    """The state of a compile in plain message terms, for :mod:`context_manager.adapter`."""
    cfg = st.config
    records = st.records
    win = windows(st, ctx, stored)
    position = st.positions(ctx, stored)
    n = len(stored)
    # chunk id -> (version, span): appends never move a closed chunk, so a span is
    # recomputed only after an edit, a removal or a branch switch
    known: dict[str, tuple[int, tuple[int, int] | None]]
    known = st.cache.setdefault(("spans",), {})
    version = ctx.version()
    chunks = []
    for chunk in records.chunks:
        seen = known.get(chunk.id)
        if seen is None or seen[0] != version:
            span = None
            first = position.get(chunk.source_ids[0])
            end = -1 if first is None else first + len(chunk.source_ids)
            ids = [s.id for s in stored[first:end]] if first is not None else []
            if 0 <= end <= n and ids == chunk.source_ids:
                span = (end - len(ids), end)
            seen = known[chunk.id] = (version, span)
        if seen[1] is not None:
            chunks.append((chunk.id, *seen[1]))
    pins = [
        PinSpec(p.id, position[p.first], position[p.last], p.level, p.max_level, p.name)
        for p in records.pins
        if p.first in position and p.last in position  # a pin on removed messages lapses
    ]
    previous: list[int] | None = None
    if records.compiled:
        previous = [0] * n
        for first_id, last_id, level in records.runs:
            a, b = position.get(first_id), position.get(last_id)
            if a is not None and b is not None and a <= b:
                previous[a : b + 1] = [level] * (b - a + 1)
    total = budget.input_tokens
    allowance = min(budget.max_tokens, math.floor(total * (1 + cfg.over_budget_grace_ratio)))
    return Snapshot(
        ids=[s.id for s in stored],
        tokens=win.tokens,
        tied=win.tied,
        head_end=win.head_end,
        tail_start=win.tail_start,
        budget=total,
        # the band is a share of what the overhead leaves: only history can fold
        target=budget.fixed_tokens
        + math.floor(max(0, budget.history_tokens) * (1 - cfg.compression_slack_ratio)),
        fixed_tokens=budget.fixed_tokens,
        chunks=chunks,
        summaries=_summary_specs(st, ctx, position),
        pins=pins,
        locks=sorted(position[x] for x in records.locks if x in position),
        held_from=win.held_from,
        previous=previous,
        allowance=allowance,
    )


def _summary_specs(st: State, ctx: StrategyContext, position: dict[str, int]) -> list[SummarySpec]:
    """The summaries that can be shown, priced as their recall pairs, L1 first."""
    signature = (ctx.version(), len(st.summaries))
    kept = st.cache.get(("specs",))
    if kept is not None and kept[0] == signature:
        return list(kept[1])
    specs = []
    for entry in sorted(st.summaries.values(), key=lambda x: (x.level, x.id)):
        first, last = position.get(entry.first), position.get(entry.last)
        if first is None or last is None:
            continue  # a covered message is gone: this summary cannot be shown
        if last - first + 1 != st.span_size(entry):
            continue  # a message inside was removed (the log only appends)
        children = () if entry.level == 1 else tuple(entry.source_ids)
        tokens = st.recall_tokens(ctx, entry)
        specs.append(SummarySpec(entry.id, entry.level, tokens, first, last, children))
    st.cache[("specs",)] = (signature, specs)
    return list(specs)


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
    st: State,
    ctx: StrategyContext,
    stored: Sequence[StoredMessage],
    entries: Sequence[Entry],
    forms: Sequence[Any],
) -> bool:
    """Every stored message is an entry, inside the span of an entry's memory, or
    sends nothing (:func:`~context_manager.pairing.send_form`: a result whose call
    is gone, or a call not answered yet).

    A memory's messages are a contiguous run (the adapter shows no other), so the
    spans are intervals of positions and the check is one sweep over the entries.
    """
    position = st.positions(ctx, stored)
    spans = [(i, i) for i, f in enumerate(forms) if not f.messages]
    for e in entries:
        if e.summary_id is not None:
            s = st.summaries[e.summary_id]
            spans.append((position[s.first], position[s.last]))
        elif e.source_ids:
            p = position[e.source_ids[0]]
            spans.append((p, p))
    reach = -1
    for a, b in sorted(spans):
        if a > reach + 1:
            return False
        reach = max(reach, b)
    return reach == len(stored) - 1
