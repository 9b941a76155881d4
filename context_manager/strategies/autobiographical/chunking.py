"""Chunking: closing runs of middle messages into chunk records.

A chunk closes over middle messages no record owns once it holds
``target_chunk_tokens`` tokens and ``min_chunk_messages`` messages (or twice the
tokens whatever its length), never between a tool call and its answer nor on a call
not answered yet. Records are persisted and never reopened; each becomes one L1
memory when the writer compresses it.
"""

from __future__ import annotations

import itertools
import logging
from collections.abc import Sequence

from ...images import has_images, without_images
from ..base import StoredMessage, StrategyContext
from .state import State
from .windows import Windows, raw_pinned, windows

__all__ = ["adopt_memories", "orphaned", "rebuild_chunks", "reconcile"]

log = logging.getLogger(__name__)


def rebuild_chunks(st: State, ctx: StrategyContext) -> None:
    """Close new chunks over middle messages no record owns (records are persisted);
    none in an ``audit_only`` manager, which never writes."""
    if ctx.audit_only:
        return
    records = st.records
    stored = ctx.messages()
    if orphaned(st, ctx):
        return
    win = windows(st, ctx, stored)
    owned = st.owned_ids()
    pinned = raw_pinned(st, ctx, stored)
    if win.head_start:  # a moved head: what came before it is middle again
        key = (ctx.version(), win.head_start, records.revision)
        if st.cache.get(("before-head",)) != key:
            _close(st, ctx, stored, win, owned, pinned, 0, win.head_start, bounded=True)
            st.cache[("before-head",)] = (ctx.version(), win.head_start, records.revision)
    start = win.head_end
    if records.chunks:  # records own the past: resume after the newest record
        at = st.positions(ctx, stored).get(records.chunks[-1].source_ids[-1])
        if at is not None:
            start = max(start, at + 1)
    _close(st, ctx, stored, win, owned, pinned, start, win.tail_start)


def _close(
    st: State,
    ctx: StrategyContext,
    stored: Sequence[StoredMessage],
    win: Windows,
    owned: set[str],
    pinned: set[str],
    lo: int,
    hi: int,
    *,
    bounded: bool = False,
) -> None:
    """Close chunks over the messages in ``[lo, hi)`` that no record owns. ``bounded``:
    no run there can grow (the region ends at a moved head), so a run of two messages
    or more closes where it ends, however short."""
    cfg = st.config
    records = st.records
    run: list[int] = []
    run_tokens = 0
    previous = -2
    for i in range(lo, hi):
        s = stored[i]
        if s.id in owned or s.id in pinned:
            run, run_tokens, previous = [], 0, -2
            continue
        if previous != i - 1:
            run, run_tokens = [], 0
        run.append(i)
        run_tokens += _size(st, ctx, s, win.tokens[i])
        previous = i
        full = len(run) >= cfg.min_chunk_messages or run_tokens >= 2 * cfg.target_chunk_tokens
        # never close between a call and its answer, nor on a call not answered yet
        closable = not win.tied[i] and (i + 1 < len(stored) or not s.message.tool_use_ids)
        ends = bounded and (i + 1 == hi or stored[i + 1].id in owned or stored[i + 1].id in pinned)
        if closable and (
            (run_tokens >= cfg.target_chunk_tokens and full) or (ends and len(run) >= 2)
        ):
            records.add_chunk([stored[j].id for j in run])
            run, run_tokens, previous = [], 0, -2


def _size(st: State, ctx: StrategyContext, s: StoredMessage, tokens: int) -> int:
    """What a message adds to a chunk's size: its tokens as sent, less its images' share
    when ``attachments_ignore_size`` (each image then counts as the note that replaces
    it in a request that leaves it out)."""
    if not st.config.attachments_ignore_size or not tokens:
        return tokens
    message = s.message
    if not has_images(message):
        return tokens
    key = ("chunk size", s.id, s.rev)
    kept: int | None = st.cache.get(key)
    if kept is None:
        count = ctx.counter.count_message
        kept = st.cache[key] = max(0, tokens - count(message) + count(without_images(message)))
    return kept


def orphaned(st: State, ctx: StrategyContext) -> bool:
    """Most chunk records name no live message: identities were rewritten underneath.

    Appends cannot change the answer, so it is kept until a record is added or a
    message is edited or removed (or the branch switches)."""
    chunks = st.records.chunks
    key = (ctx.version(), len(chunks))
    (version, count, revision, orphans), was = st.orphan_check
    if (version, count) == key and revision == st.records.revision:
        return was
    if version != key[0] or revision != st.records.revision or count > len(chunks):
        count, orphans = 0, 0  # a message or a record changed or went: count them all
    live = st.positions(ctx, ctx.messages())
    # appends leave the old records' answer as it was: count only the records added
    orphans += sum(1 for c in chunks[count:] if not any(i in live for i in c.source_ids))
    broken = len(chunks) >= 3 and orphans * 2 > len(chunks)
    if broken and not st.failed_closed:
        st.failed_closed = True
        log.error(
            "%d of %d chunk records name no live message; compression is stopped so "
            "memories are not written twice (message identities changed underneath)",
            orphans,
            len(chunks),
        )
    st.orphan_check = ((key[0], len(chunks), st.records.revision, orphans), broken)
    return broken


def adopt_memories(st: State, ctx: StrategyContext) -> None:
    """Chunk records for L1 memories written without them (an older store): the widest
    L1 at each start, skipping any that overlaps one already adopted, so nothing is
    compressed twice. A memory left overlapping an adopted chunk is dropped from view
    (it stays in the store)."""
    records = st.records
    summaries = records.summaries
    if not records.chunks and any(x.level == 1 for x in summaries.values()):
        position = st.positions(ctx, ctx.messages())
        l1s = [
            x
            for x in summaries.values()
            if x.level == 1 and x.source_ids and all(i in position for i in x.source_ids)
        ]
        l1s.sort(key=lambda x: (position[x.first], -len(x.source_ids), x.id))
        taken: set[str] = set()
        with ctx.store.transaction():
            for x in l1s:
                if taken.intersection(x.source_ids):
                    continue
                taken.update(x.source_ids)
                records.add_chunk(x.source_ids, summary_id=x.id)
    named = {c.summary_id for c in records.chunks}
    for x in [x for x in summaries.values() if x.level == 1 and x.id not in named]:
        log.info("memory %s overlaps an adopted chunk and is not shown or merged", x.id)
        del summaries[x.id]


def reconcile(st: State, ctx: StrategyContext) -> None:
    """Records that lost some of their messages without hearing of it (removed through
    another manager, or before removals were recorded) follow the removal now, as
    :meth:`~.records.Records.forget` would have. A record that lost all of them is left
    to :func:`orphaned`: that is what rewritten message identities look like.

    Once a host presents rows, what the strategy never heard leave the window is
    repaired the same way: a record over a row the record holds and the window does
    not (``StrategyContext.out_of_window``) lets go of it, whether or not it lost all
    its rows; and a record whose rows a presentation moved (a redo the strategy never
    heard: its rows are no longer one run, in order, in the window) lets go of all of
    them, so they are remembered again where they now stand."""
    records = st.records
    live = st.positions(ctx, ctx.messages())
    out = ctx.out_of_window()
    presenting = ctx.presenting()  # else a broken run is the topology audit's to report
    missing: set[str] = set()
    for ids in [c.source_ids for c in records.chunks] + [
        s.source_ids for s in records.summaries.values() if s.level == 1
    ]:
        gone = [i for i in ids if i not in live]
        if gone and len(gone) < len(ids):
            missing.update(gone)
        missing.update(i for i in gone if i in out)
        at = [live[i] for i in ids if i in live] if presenting else []
        if any(b != a + 1 for a, b in itertools.pairwise(at)):
            missing.update(ids)  # no longer one run in the window: remembered again
    if missing:
        log.info(
            "%d messages were still named by records that no longer hold them (removed, "
            "or out of the window or moved in it unheard); they follow now",
            len(missing),
        )
        records.forget(sorted(missing))
