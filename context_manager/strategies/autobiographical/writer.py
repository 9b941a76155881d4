"""The writer: which memory to write next, and writing it.

Work is compressing a closed chunk into an L1 memory (past the
``l1_holdback_chunks`` newest, unless a compile asked for it) or merging a run of
contiguous parentless memories of one level into the next, in the groups
:func:`merge_sizes` gives (none unless ``hierarchical``). :func:`tick` does one
unit of work, the one that frees more context first, except that a merge whose last
attempt failed lets one chunk go first. Every answer that is not
memory counts against the chunk's or merge's attempt limit, persisted. A chunk with
tool calls waits for the agent's tool definitions when the summariser declares that it
needs them (:func:`~context_manager.summarizer.needs_tool_definitions`), and the wait is
logged once per strategy.
"""

from __future__ import annotations

import bisect
import hashlib
import json
import logging
import weakref
from collections.abc import Callable, Iterator, Sequence

from ...deadline import BoundedCaller, CallerBusyError, DeadlineError
from ...errors import SummarizerNotConfiguredError
from ...messages import Message, ToolResultBlock, ToolUseBlock
from ...summarizer import (
    Completion,
    CompletionRequest,
    Summarizer,
    Usage,
    needs_tool_definitions,
    request_hash,
)
from ..base import AnswerNeeded, Answers, StoredMessage, StrategyContext
from .chunking import orphaned, rebuild_chunks
from .prompts import NO_TOOLS, PLAIN_PROSE, clean, cut, shape, shorter, with_suffix
from .records import ChunkRecord, Provenance, SummaryEntry
from .requests import (
    l1_request,
    ladder,
    merge_request,
    source_only_request,
    tool_prose_request,
    variants,
    witnessed,
)
from .state import State
from .values import l1_values, parent_values

__all__ = ["demand", "merge_groups", "merge_sizes", "pending_work", "queued_chunks", "tick"]

log = logging.getLogger(__name__)

_told_no_tools: weakref.WeakSet[BoundedCaller] = weakref.WeakSet()
"""The workers of the strategies already told that their tool definitions are missing: a
strategy keeps its worker across branches (:meth:`State.carry_over`), so each is told once."""
_told_undeclared: weakref.WeakSet[BoundedCaller] = weakref.WeakSet()
"""The workers already told that the tool-prose rung's note tool is not declared."""


# ------------------------------------------------------------------ the queue
def queued_chunks(st: State, ctx: StrategyContext) -> list[ChunkRecord]:
    """Closed, uncompressed chunks ready for compression: past the holdback, or asked
    for by a compile (only those under ``memory_schedule="forecast"``)."""
    if orphaned(st, ctx):
        return []
    records = st.records
    live = st.positions(ctx, ctx.messages())
    held = ctx.held_ids()
    closed = [c for c in st.open_chunks(ctx) if all(i in live for i in c.source_ids)]
    hold_back = st.config.l1_holdback_chunks
    if st.config.memory_schedule == "forecast":  # only what a compile asked for
        ready = [c for c in closed if c.id in st.demanded_chunks]
    else:
        ready = closed[: len(closed) - hold_back] if hold_back else closed
        ready += [c for c in closed[len(ready) :] if c.id in st.demanded_chunks]
    limit = st.config.chunk_attempt_limit
    return [
        c
        for c in ready
        if not held.intersection(c.source_ids)
        and records.chunk_attempts.get(c.id, 0) < limit
        and not st.waiting(ctx, c.id)
        and not (c.id in records.exhausted and _refused_before(st, ctx, c))
    ]


def _refused_before(st: State, ctx: StrategyContext, chunk: ChunkRecord) -> bool:
    """The chunk's request today has the shape of one that every variant refused."""
    return shape(_canonical(st, ctx, ctx.messages(), chunk)) in st.records.exhausted[chunk.id]


def _canonical(
    st: State,
    ctx: StrategyContext,
    stored: list[StoredMessage],
    chunk: ChunkRecord,
    steps: list[SummaryEntry] | None = None,
) -> CompletionRequest:
    """The first request for ``chunk``'s memory (the chunk alone with
    ``compression_source_only``)."""
    if st.config.compression_source_only:
        return source_only_request(st, ctx, stored, chunk.source_ids)
    return l1_request(st, ctx, stored, chunk, steps)


def merge_sizes(length: int, threshold: int, *, newest: bool) -> list[int]:
    """The sizes of the merges a run of ``length`` memories makes, oldest group first.

    A run is a stretch of parentless memories of one level, each starting right after
    the one before ends. Only the newest run of a level can still grow, and only while
    no parentless memory of its level or above comes after it; any other run is
    *stranded*: a live message that no memory of the level covers (a chunk the
    summariser refused, a pinned or held message) or a higher memory cuts it off.

    - The newest run merges its oldest ``threshold`` once it holds that many; where
      that would leave exactly one memory behind it takes ``threshold - 1`` (leaving
      two to grow), or, where that would be a group of one (``threshold`` 2), the whole
      run of three. The rest is merged again by the same rule, and what is left waits.
    - A stranded run merges as soon as it holds two, whole, in as few groups of at most
      ``threshold`` as it takes, as even as they can be (the larger ones first): seven
      at a threshold of 3 merge 3 + 2 + 2, never 3 + 3 + 1. At a threshold of 2 an
      odd run has one group of three, as the newest run does.

    So no group has fewer than two members or more than ``max(threshold, 3)``, and no
    stranded run of two or more keeps a memory alone. Merging the first group and
    asking again gives the rest of the groups unchanged.

    Parameters
    ----------
    length : int
        Memories in the run.
    threshold : int
        ``merge_threshold`` (at least 2).
    newest : bool
        The run is the newest of its level (it can still grow).

    Returns
    -------
    list[int]
        The group sizes, oldest first; their sum is ``length`` for a stranded run of two
        or more, and at most ``length`` for the newest.

    Examples
    --------
    >>> merge_sizes(7, 3, newest=False)
    [3, 2, 2]
    >>> merge_sizes(4, 3, newest=True), merge_sizes(3, 2, newest=True)
    ([2], [3])
    >>> merge_sizes(7, 3, newest=True), merge_sizes(2, 3, newest=True)
    ([3, 2], [])
    """
    if threshold < 2:
        raise ValueError(f"threshold={threshold}: a merge takes at least two memories")
    if newest:
        sizes: list[int] = []
        left = length
        while left >= threshold:
            take = threshold
            if left - take == 1:  # never leave a single memory behind
                take = threshold - 1 if threshold > 2 else left
            sizes.append(take)
            left -= take
        return sizes
    if length < 2:
        return []
    count = min(-(-length // threshold), length // 2)
    small, larger = divmod(length, count)
    return [small + 1] * larger + [small] * (count - larger)


def merge_groups(st: State, ctx: StrategyContext) -> list[list[str]]:
    """Groups of contiguous parentless siblings ready to merge, oldest first: those a
    compile asked for, then (unless ``memory_schedule="forecast"``) each run's groups
    by :func:`merge_sizes`. None when the
    strategy is not ``hierarchical``. A group given up on (``merge_attempt_limit``
    answers that were not memory, until ``retry_given_up``), backing off after a failed
    call or over a held message is left out; after a backoff or a hold it comes back in
    its place."""
    cfg = st.config
    if not cfg.hierarchical:
        return []
    stored = ctx.messages()
    index = st.positions(ctx, stored)
    held = ctx.held_ids()
    threshold = cfg.merge_threshold

    def ready(ids: list[str]) -> bool:
        if st.records.merge_attempts.get("+".join(ids), 0) >= cfg.merge_attempt_limit:
            return False
        if held and not held.isdisjoint(
            leaf for i in ids for leaf in st.leaves_of(st.summaries[i])
        ):
            return False
        return not st.waiting(ctx, "+".join(ids))

    groups = [g for g in st.demanded_merges if _mergeable(st, g, index) and ready(g)]
    if cfg.memory_schedule == "forecast":
        return groups  # only what a compile asked for
    by_level: dict[int, list[SummaryEntry]] = {}
    base = cfg.merge_max_source_span_messages
    for s in st.frontier_summaries():
        if s.first not in index or s.last not in index:
            continue
        span = index[s.last] - index[s.first] + 1
        if base is not None and span > base * threshold ** max(0, s.level - 3):
            continue  # too wide for its level: never merged further
        by_level.setdefault(s.level, []).append(s)
    higher_after = _highest_after(st, index)
    for level, entries in sorted(by_level.items()):
        entries.sort(key=lambda s: index[s.first])
        runs: list[list[SummaryEntry]] = []
        for s in entries:
            if runs and index[s.first] == index[runs[-1][-1].last] + 1:
                runs[-1].append(s)
            else:
                runs.append([s])
        for run in runs:
            start = 0
            newest = higher_after(index[run[-1].last]) < level  # nothing of its level after
            for size in merge_sizes(len(run), threshold, newest=newest):
                ids = [s.id for s in run[start : start + size]]
                start += size
                if ready(ids) and ids not in groups:
                    groups.append(ids)
    return groups


def _highest_after(st: State, index: dict[str, int]) -> Callable[[int], int]:
    """For a message position, the highest level of the parentless memories starting
    after it (0 when none does)."""
    roots = sorted(
        (index[s.first], s.level)
        for s in st.frontier_summaries()
        if s.first in index and s.last in index
    )
    starts = [p for p, _ in roots]
    highest = [0] * (len(roots) + 1)  # highest[i]: over roots[i:]
    for i in range(len(roots) - 1, -1, -1):
        highest[i] = max(highest[i + 1], roots[i][1])

    def after(position: int) -> int:
        return highest[bisect.bisect_right(starts, position)]

    return after


def refold(st: State, ctx: StrategyContext) -> tuple[str, list[str]] | None:
    """The memory left alone and the memories to unfold so that it can be merged: None
    when none is stuck.

    A parentless memory *m* of level *k* is stuck when no memory of its level is next
    to it and neither side can bring one: on each side lies a parentless memory of a
    higher level, a chunk given up on, or (before it) a message no chunk holds, such as
    the raw head. Removals leave such memories (the memories over a removed message
    are dropped, their chunk is remembered again, and by then its old siblings may
    have merged without it), as do holds released late. No merge of one level ever
    reaches *m*, so every request would show it beside much deeper memories. The
    higher neighbour (the lower of the two; the older on a tie) is unfolded, and below
    it each child next to *m* while that child is still above level *k*: *m* then has
    siblings of its level, and merges rebuild the memories above it. Only under
    ``memory_schedule="eager"`` with a hierarchy; a memory over a held message is left
    as it is, and so is one a refold was made for already
    (:attr:`~.records.Records.refolded`): merges by ``merge_threshold`` can leave it
    alone again, and unfolding for it once more would start the same cycle."""
    cfg = st.config
    if not cfg.hierarchical or cfg.memory_schedule == "forecast":
        return None
    stored = ctx.messages()
    index = st.positions(ctx, stored)
    roots = sorted(
        (s for s in st.frontier_summaries() if s.first in index and s.last in index),
        key=lambda s: index[s.first],
    )
    if len(roots) < 2:
        return None
    held = ctx.held_ids()
    chunk_of = {i: c for c in st.records.chunks for i in c.source_ids}
    limit = cfg.chunk_attempt_limit
    starting = {index[s.first]: s for s in roots}
    ending = {index[s.last]: s for s in roots}

    def given_up(position: int) -> bool | None:
        """A raw neighbour: True when it can never be remembered, None when no chunk
        holds it."""
        chunk = chunk_of.get(stored[position].id)
        if chunk is None:
            return None
        if chunk.compressed:
            return True
        return st.records.chunk_attempts.get(chunk.id, 0) >= limit or (
            chunk.id in st.records.exhausted and _refused_before(st, ctx, chunk)
        )

    def holds(s: SummaryEntry) -> bool:
        return bool(held) and not held.isdisjoint(st.leaves_of(s))

    for m in roots:
        before, after = index[m.first] - 1, index[m.last] + 1
        sides: list[SummaryEntry | None] = []
        stuck = True
        for position, neighbours, leading in (
            (before, ending, True),
            (after, starting, False),
        ):
            neighbour = neighbours.get(position)
            if neighbour is not None:
                if neighbour.level <= m.level:
                    stuck = False  # a sibling, or a lower memory that can still rise
                sides.append(neighbour)
            elif position < 0:
                sides.append(None)  # the first message: nothing before
            elif position >= len(stored):
                stuck = False  # the newest messages come after: the run can still grow
            else:
                verdict = given_up(position)
                if verdict is False or (verdict is None and not leading):
                    stuck = False  # a chunk still to remember, or the open end
                sides.append(None)
        higher = [n for n in sides if n is not None]
        if not stuck or not higher or holds(m) or m.id in st.records.refolded:
            continue
        target = min(higher, key=lambda n: (n.level, index[n.first]))
        if holds(target):
            continue
        opened = [target.id]
        node = target
        while True:
            children = [st.summaries[c] for c in node.source_ids if c in st.summaries]
            if not children:
                break
            child = children[-1] if index[node.first] < index[m.first] else children[0]
            if child.level <= m.level:
                break
            opened.append(child.id)
            node = child
        return m.id, opened
    return None


def overlong(st: State, ctx: StrategyContext) -> list[list[str]]:
    """The memories to unfold so that each memory over ``summary_max_tokens`` is
    written again within it: per parentless memory holding one in its tree, oldest
    first, that memory and every one between it and the long ones (an order
    :meth:`~.records.Records.unfold` takes). The rest of the tree stays.

    A memory is over the limit when stored before the limit was enforced, or under a
    larger ``summary_max_tokens``. A tree over a held message, and a stub (a fixed
    sentence), are left as they are."""
    limit = st.config.memory_limit()
    summaries = st.summaries
    key = ("overlong", st.records.revision, len(summaries), limit)
    kept = st.cache.get(key)
    if kept is None:
        sizes: dict[str, int] = st.cache.setdefault(("memory-tokens", ctx.counter.name), {})
        count = ctx.counter.count_text
        marked: set[str] = set()  # the long memories and every memory above one
        for s in summaries.values():
            if s.stub or s.id in marked:
                continue
            size = sizes.get(s.id)
            if size is None:
                size = sizes[s.id] = count(s.content)
            node: SummaryEntry | None = s if size > limit else None
            while node is not None and node.id not in marked:
                marked.add(node.id)
                node = summaries.get(node.parent_id) if node.parent_id else None
        kept = []
        for root in st.frontier_summaries():
            if root.id not in marked:
                continue
            group, todo = [], [root]
            while todo:
                node = todo.pop()
                group.append(node.id)
                todo.extend(summaries[c] for c in reversed(node.source_ids) if c in marked)
            kept.append(group)
        for old in [k for k in st.cache if k[0] == "overlong"]:
            del st.cache[old]
        st.cache[key] = kept
    held = ctx.held_ids()
    return [g for g in kept if not held or held.isdisjoint(st.leaves_of(summaries[g[0]]))]


def _mergeable(st: State, ids: list[str], index: dict[str, int]) -> bool:
    """Every memory exists, has no parent and still has its first and last message."""
    summaries = st.summaries
    return all(
        i in summaries
        and summaries[i].parent_id is None
        and summaries[i].first in index
        and summaries[i].last in index
        for i in ids
    )


def pending_work(st: State, ctx: StrategyContext) -> list[str]:
    """What :func:`tick` would do, one line per unit of work."""
    work = [f"compress {c.id}" for c in queued_chunks(st, ctx)]
    work += [f"merge {'+'.join(g)}" for g in merge_groups(st, ctx)]
    if not work and ctx.summarizer is not None:
        stuck = refold(st, ctx)
        work += [f"unfold {i}" for i in (stuck[1] if stuck is not None else [])]
        work += [f"rewrite {'+'.join(g)}" for g in overlong(st, ctx)]
    return work


def demand(
    st: State,
    ctx: StrategyContext,
    produce: Sequence[tuple[int, int, int]],
    stored: Sequence[StoredMessage],
) -> None:
    """Queue what a solver asked for (``(level, first, last)`` message indices): L1s of
    closed chunks in range (past the holdback), or one merge of the contiguous
    parentless summaries one level below in range (none unless ``hierarchical``)."""
    if not produce:
        return
    index = st.positions(ctx, stored)
    for level, lo, hi in produce:
        if level >= 2 and not st.config.hierarchical:
            continue  # a single level: nothing is merged, whatever a solver would like
        if level == 1:
            for chunk in st.open_chunks(ctx):
                spots = [index[i] for i in chunk.source_ids if i in index]
                if spots and lo <= max(spots) and min(spots) <= hi:
                    st.demanded_chunks.add(chunk.id)
            continue
        run = sorted(
            (
                s
                for s in st.frontier_summaries()
                if s.level == level - 1
                and s.first in index
                and s.last in index
                and lo <= index[s.first]
                and index[s.last] <= hi
            ),
            key=lambda s: index[s.first],
        )
        group: list[str] = []
        for s in run:
            if group and index[s.first] != index[st.summaries[group[-1]].last] + 1:
                break
            group.append(s.id)
        group = group[: st.config.merge_threshold]
        if len(group) >= 2 and group not in st.demanded_merges:
            st.demanded_merges.append(group)


# ------------------------------------------------------------------- the work
def tick(st: State, ctx: StrategyContext) -> bool:
    """One unit of work: compress the oldest queued chunk, else one merge. True when a
    call was made or a memory written.

    The first waiting merge goes before the chunk when it would free more context than
    the chunk's memory would (:func:`_merge_saving` against :func:`_chunk_saving`),
    unless its last attempt failed: it then lets one chunk go first and competes again
    at the next tick. A merge over a held message is not waiting (it keeps its place
    and competes as before once the hold is released); nor is one backing off."""
    rebuild_chunks(st, ctx)
    queued = queued_chunks(st, ctx)
    groups = merge_groups(st, ctx)
    if ctx.summarizer is None:
        return False  # nothing can be written without a summariser
    if not queued and not groups:
        stuck = refold(st, ctx)
        if stuck is not None:  # a memory left alone: the merges that follow rebuild above it
            alone, opened = stuck
            log.info("unfolding %s to merge %s, left alone", "+".join(opened), alone)
            st.records.unfold(opened, refolding=alone)
            return True
        long = overlong(st, ctx)
        if long:  # written again by the ticks that follow, within the limit
            log.info("unfolding %s, over summary_max_tokens, to write it again", long[0][0])
            st.records.unfold(long[0])
        return bool(long)
    if st.config.compression_model is None:
        raise SummarizerNotConfiguredError(
            "compression_model is not configured: memories are written in one model's "
            "voice and no substitute is used; set AutobiographicalConfig.compression_model"
        )
    # A rejected attempt is work too (a call was made): the next tick moves on.
    before = st.calls
    if (
        queued
        and groups
        and not st.yields("+".join(groups[0]))
        and _merge_saving(st, ctx, groups[0]) > _chunk_saving(st, ctx, queued[0])
        and (_merge(st, ctx, groups[0]) or st.calls > before)
    ):
        return True
    for chunk in queued:
        if _compress(st, ctx, chunk) or st.calls > before:
            st.chunk_went()
            return True
    return any(_merge(st, ctx, group) or st.calls > before for group in groups)


def _expected_recall(st: State, ctx: StrategyContext, level: int) -> int:
    """The median recall price of the memories at ``level`` (kept until one is added)."""
    key = ("expected-recall", level, len(st.summaries), st.records.revision)
    kept = st.cache.get(key[:2])
    if kept is None or kept[0] != key:
        costs = sorted(st.recall_tokens(ctx, s) for s in st.summaries.values() if s.level == level)
        kept = st.cache[key[:2]] = (
            key,
            costs[len(costs) // 2] if costs else st.config.summary_target_tokens,
        )
    return int(kept[1])


def _chunk_saving(st: State, ctx: StrategyContext, chunk: ChunkRecord) -> int:
    stored = ctx.messages()
    index = st.positions(ctx, stored)
    raw = sum(ctx.count(stored[index[i]]) for i in chunk.source_ids if i in index)
    return raw - _expected_recall(st, ctx, 1)


def _merge_saving(st: State, ctx: StrategyContext, group: list[str]) -> int:
    sources = [st.summaries[i] for i in group]
    shown = sum(st.recall_tokens(ctx, s) for s in sources)
    return shown - _expected_recall(st, ctx, sources[0].level + 1)


def _compress(st: State, ctx: StrategyContext, chunk: ChunkRecord) -> bool:
    cfg = st.config
    records = st.records
    stored = ctx.messages()
    index = st.positions(ctx, stored)
    messages = [stored[index[i]].message for i in chunk.source_ids]
    sent, _ = ctx.sent()
    raw = sum(sent[index[i]] for i in chunk.source_ids)  # what the chunk costs shown raw
    has_tools = any(
        isinstance(b, ToolUseBlock | ToolResultBlock) for m in messages for b in m.content
    )
    text = "".join(m.text for m in messages)
    seen = witnessed(st, stored, index, chunk.source_ids)
    if not has_tools and len("".join(text.split())) < cfg.min_chunk_chars_for_llm:
        content = f"A quiet stretch of {len(messages)} routine messages."
        values = l1_values(cfg, ctx.counter, messages, content, raw=raw)
        records.add_l1(chunk, content, stub=True, values=values, witnessed=seen)
        st.demanded_chunks.discard(chunk.id)
        return True
    if has_tools and not ctx.tools() and needs_tool_definitions(ctx.summarizer):
        _tell_no_tools(st, ctx, chunk)
        return False  # wait until the agent's tools are known
    steps = ladder(st, ctx, index[chunk.source_ids[0]], index)
    request = _canonical(st, ctx, stored, chunk, steps)
    # (queued_chunks held back the shapes every rung refused)
    completion: Completion | None = _ask(st, ctx, request, chunk.id)
    if completion is not None and completion.stop_reason == "refusal":
        after = _after_refusal(st, ctx, stored, chunk, steps, request, completion)
        if isinstance(after, list):  # the split rung's parts, in order
            text = "\n\n".join(part.text for part in after)
            tokens = [part.usage.output_tokens for part in after]
            bounded = _cut(st, ctx, text, chunk.id)
            records.add_l1(
                chunk,
                bounded,
                tokens=sum(tokens) if all(tokens) and bounded == text else 0,
                stitched=True,
                values=l1_values(cfg, ctx.counter, messages, bounded, raw=raw),
                provenance=_stitched(after),
                witnessed=seen,
            )
            st.demanded_chunks.discard(chunk.id)
            return True
        completion = after
        if completion is not None and completion.stop_reason == "refusal":
            records.note_exhausted(chunk, shape(request))
            log.warning("every rung of the memory request for %s was refused", chunk.id)
            return False
    if completion is None:  # no answer: not a verdict, retried after a backoff
        return False
    if not completion.acceptable:  # never memory; after the limit the chunk stays raw
        records.count_chunk_attempt(chunk)
        return False
    completion = _within_limit(st, ctx, request, completion, chunk.id)
    records.add_l1(
        chunk,
        completion.text,
        tokens=completion.usage.output_tokens,
        values=l1_values(cfg, ctx.counter, messages, completion.text, raw=raw),
        provenance=_provenance(completion),
        witnessed=seen,
    )
    st.demanded_chunks.discard(chunk.id)
    return True


def _after_refusal(
    st: State,
    ctx: StrategyContext,
    stored: list[StoredMessage],
    chunk: ChunkRecord,
    steps: list[SummaryEntry],
    canonical: CompletionRequest,
    refused: Completion,
) -> Completion | list[Completion] | None:
    """The rungs after the ``canonical`` request for ``chunk`` was ``refused``, in
    order: the ladder variants, the chunk alone (``compression_source_only_fallback``),
    reasoning moved into the host's note tool (``compression_tool_prose_fallback``),
    then the split (``compression_split_fallback``). Returns the first answer that is
    not a refusal (None: no answer at all, which backs off), the split's parts, or the
    last refusal."""
    cfg = st.config

    def rungs() -> Iterator[CompletionRequest]:  # built as each is reached
        if not cfg.compression_source_only:
            yield from variants(st, ctx, stored, chunk, steps, canonical)
            if cfg.compression_source_only_fallback:
                yield source_only_request(st, ctx, stored, chunk.source_ids)
        prose = cfg.compression_tool_prose_fallback
        if prose is not None:
            hoisted = tool_prose_request(canonical, prose)
            if hoisted is None:
                _tell_undeclared(st, canonical, prose.into_tool)
            else:
                yield hoisted

    for rung in rungs():
        answer = _ask(st, ctx, rung, chunk.id)
        if answer is None or answer.stop_reason != "refusal":
            return answer
        refused = answer
    if cfg.compression_split_fallback:
        found = _split(st, ctx, stored, chunk)
        if not isinstance(found, _Refused):
            return found
    return refused


class _Refused:
    """The split ended without a memory for every part."""


_REFUSED = _Refused()


def _split(
    st: State, ctx: StrategyContext, stored: list[StoredMessage], chunk: ChunkRecord
) -> list[Completion] | _Refused | None:
    """Memories of the halves of ``chunk``, each asked for alone, a refused half halved
    again at a call-answer boundary, down to single turns; at most
    ``compression_split_max_calls_per_chunk`` requests. Returns the parts' answers in
    order, None when a request had no answer (the chunk backs off), or
    :data:`_REFUSED` when a part that cannot be split further was refused, an answer
    was not memory, or the calls ran out."""
    index = st.positions(ctx, stored)
    _, tied = ctx.sent()
    left = st.config.compression_split_max_calls_per_chunk

    def halves(ids: list[str]) -> tuple[list[str], list[str]] | None:
        cuts = [k for k in range(1, len(ids)) if not tied[index[ids[k - 1]]]]
        if not cuts:
            return None  # one turn (a call and its answer stay together)
        k = min(cuts, key=lambda c: (abs(2 * c - len(ids)), c))
        return ids[:k], ids[k:]

    def write(ids: list[str]) -> list[Completion] | _Refused | None:
        nonlocal left
        parts = halves(ids)
        if parts is None:
            return _REFUSED
        out: list[Completion] = []
        for half in parts:
            if left <= 0:
                return _REFUSED
            left -= 1
            answer = _ask(st, ctx, source_only_request(st, ctx, stored, half), chunk.id)
            if answer is None:
                return None
            if answer.stop_reason == "refusal":
                deeper = write(half)
                if not isinstance(deeper, list):
                    return deeper
                out.extend(deeper)
            elif answer.acceptable:
                out.append(answer)
            else:
                return _REFUSED
        return out

    return write(list(chunk.source_ids))


def _tell_no_tools(st: State, ctx: StrategyContext, chunk: ChunkRecord) -> None:
    """Say once per strategy why chunks with tool calls stay raw, and how to fix it."""
    if st.caller in _told_no_tools:
        return
    _told_no_tools.add(st.caller)
    name = type(ctx.summarizer).__name__
    message = (
        f"memories of chunks with tool calls (the first: {chunk.id}) are held back: the "
        f"summariser ({name}) needs the agent's tool definitions to send a history with tool "
        "calls, and none are set. Call ContextManager.set_tool_definitions(tools) with the "
        "agent's tools, or give a summariser that declares needs_tool_definitions = False "
        "(ExtractiveSummarizer does)."
    )
    # Logged (shown on stderr even without logging set up), not warnings.warn: a held
    # chunk is a state the host can be in for a while, not a misuse at one call site.
    log.warning("%s", message)


def _tell_undeclared(st: State, request: CompletionRequest, tool: str) -> None:
    """Say once per strategy that the tool-prose rung is skipped for want of its tool."""
    if any(t.get("name") == tool for t in request.tools or ()) or st.caller in _told_undeclared:
        return
    _told_undeclared.add(st.caller)
    log.warning(
        "the tool-prose rung (compression_tool_prose_fallback) is skipped: its into_tool "
        "%r is not among the tool definitions; declare it with "
        "ContextManager.set_tool_definitions, or name a declared tool",
        tool,
    )


class _Answer(Completion):
    """A summariser's answer as the writer keeps it: its text cleaned, with the hash of
    the request it answered (:func:`~context_manager.summarizer.request_hash`) and the
    model that wrote it (the answer's own name for it, else the request's)."""

    request_hash: str
    model: str


def _provenance(answer: Completion) -> Provenance:
    """The provenance of a memory accepted from ``answer`` (one :func:`_ask` returned)."""
    if not isinstance(answer, _Answer):
        raise TypeError("an answer without the hash of its request: not one _ask returned")
    return Provenance(answer.stop_reason, answer.request_hash, answer.model)


def _stitched(parts: Sequence[Completion]) -> Provenance:
    """The provenance of a memory stitched from the split's ``parts``: the hash of the
    JSON list of the parts' request hashes, in order; the first part's model."""
    each = [_provenance(p) for p in parts]
    hashes = json.dumps([p.request_hash for p in each], separators=(",", ":"))
    return Provenance("end_turn", hashlib.sha256(hashes.encode("ascii")).hexdigest(), each[0].model)


def _ask(st: State, ctx: StrategyContext, request: CompletionRequest, key: str) -> _Answer | None:
    """Call the summariser for work ``key``; retry a tool call or an empty answer.

    A ``tool_use`` answer is retried once with a no-tools sentence, then once
    without the tools; an empty or all-reasoning answer once with a plain-prose
    sentence. Refusals and truncations are answers (they count toward the attempt
    limit). Returns the last completion with its text cleaned (only an
    ``acceptable`` one is memory), or None when there was no answer: the provider
    said ``error``, the summariser raised, the call missed its deadline
    (``summary_timeout_seconds``; it is abandoned on the worker) or an abandoned call
    still holds the worker. The work then backs off (none of this is a verdict).
    The answer carries the hash of the request it answered (the last retry's).
    """
    request = request.model_copy(update={"timeout": st.config.summary_timeout_seconds})
    completion = _call(st, ctx, request, key)
    if completion is not None and completion.stop_reason == "tool_use":
        request = with_suffix(request, NO_TOOLS)
        completion = _call(st, ctx, request, key)
        if completion is not None and completion.stop_reason == "tool_use":
            request = request.model_copy(update={"tools": None})
            completion = _call(st, ctx, request, key)
    elif (
        completion is not None
        and completion.stop_reason == "end_turn"
        and not clean(completion.text)
    ):
        request = with_suffix(request, PLAIN_PROSE)
        completion = _call(st, ctx, request, key)
    if completion is None:
        return None
    st.backoff.pop(key, None)
    return _Answer.model_validate(
        {
            **completion.model_dump(),
            "text": clean(completion.text),
            "request_hash": request_hash(request),
            "model": completion.model or request.model,
        }
    )


def _within_limit(
    st: State, ctx: StrategyContext, request: CompletionRequest, answer: Completion, key: str
) -> Completion:
    """``answer`` when its memory is within ``summary_max_tokens``; else the request is
    made once more with the limit stated, and the better answer (the first within the
    limit, else the shorter) is kept, cut to the limit when still over it
    (:func:`~.prompts.cut`; its token count is then left to be measured)."""
    limit = st.config.memory_limit()
    count = ctx.counter.count_text
    tokens = count(answer.text)
    if tokens <= limit:
        return answer
    log.warning(
        "the memory written for %s is %d tokens, over summary_max_tokens=%d; asked again",
        key,
        tokens,
        limit,
    )
    again = _ask(st, ctx, with_suffix(request, shorter(limit)), key)
    if again is not None and again.acceptable and count(again.text) < tokens:
        answer, tokens = again, count(again.text)
        if tokens <= limit:
            return answer
    text = _cut(st, ctx, answer.text, key)
    return answer.model_copy(update={"text": text, "usage": Usage()})


def _cut(st: State, ctx: StrategyContext, text: str, key: str) -> str:
    """``text`` cut to ``summary_max_tokens`` (said in the log when it was over)."""
    limit = st.config.memory_limit()
    out = cut(text, limit, ctx.counter.count_text)
    if out != text:
        log.warning("the memory for %s is cut to summary_max_tokens=%d", key, limit)
    return out


class _Raised:
    """The outcome of a summariser call that raised (a deadline, a busy worker, an error)."""

    __slots__ = ("error",)

    def __init__(self, error: Exception) -> None:
        self.error = error


def _outcome(st: State, summarizer: Summarizer, request: CompletionRequest) -> object:
    """Make the call on the bounded worker: the completion, or what it raised."""
    try:
        return st.caller.call(
            lambda: summarizer.complete(request), st.config.summary_timeout_seconds
        )
    except Exception as exc:  # judged by _call, on the manager's side of the lock
        return _Raised(exc)


def _call(
    st: State, ctx: StrategyContext, request: CompletionRequest, key: str
) -> Completion | None:
    """One summariser call on the bounded worker; None (and a backoff) without an answer.

    While the manager gathers answers outside its lock (:attr:`StrategyContext.answers`),
    the call is not made here: an answered request takes its recorded outcome, and one
    not answered yet raises :class:`AnswerNeeded` for the manager to make the call."""
    summarizer = ctx.summarizer
    assert summarizer is not None
    timeout = st.config.summary_timeout_seconds
    answers = ctx.answers()
    counted = True
    if answers is None:
        outcome = _outcome(st, summarizer, request)
    else:
        asked = hashlib.sha256(request.model_dump_json().encode()).hexdigest()
        outcome = answers.get(asked)
        if outcome is Answers.MISSING:
            raise AnswerNeeded(asked, lambda: _outcome(st, summarizer, request))
        counted = answers.first_use(asked)
    if isinstance(outcome, _Raised):
        error = outcome.error
        if isinstance(error, CallerBusyError):
            log.warning("the summariser is still busy with a call past its deadline")
            return None  # nothing was called: no backoff either
        st.calls += counted
        if isinstance(error, DeadlineError):
            log.warning("the summariser did not answer %s within %g s; retried later", key, timeout)
        else:  # a provider outage is not a verdict on the work
            log.warning("the summariser raised %r for %s; retried later", error, key)
        st.failed(ctx, key)
        return None
    completion = outcome
    st.calls += counted
    if not isinstance(completion, Completion) or completion.stop_reason == "error":
        log.warning("the summariser answered %s with an error; retried later", key)
        st.failed(ctx, key)
        return None
    return completion


def _merge(st: State, ctx: StrategyContext, ids: list[str]) -> bool:
    sources = [st.summaries[i] for i in ids]
    key = "+".join(ids)
    before = st.calls
    request = merge_request(st, ctx, sources)
    answer: Completion | None = _ask(st, ctx, request, key)
    if answer is None:  # no answer: not a verdict, retried after a backoff
        if st.calls > before:  # a call failed (not a worker still busy: nothing was asked)
            st.merge_failed(key)
        return False
    if not answer.acceptable:  # bounded retries, then the merge is quarantined (persisted)
        st.records.count_merge_attempt(ids)
        st.merge_failed(key)
        return False
    answer = _within_limit(st, ctx, request, answer, key)
    st.yielding.discard(key)
    values: tuple[str, ...] = ()
    if any(s.values for s in sources):
        covered: list[Message] | None = None
        if sources[0].level == 1:  # an L2: ranked over the chunks' messages
            stored = ctx.messages()
            index = st.positions(ctx, stored)
            leaves = [i for s in sources for i in st.leaves_of(s) if i in index]
            covered = [stored[index[i]].message for i in leaves]
        # above, rank by rank: reading every message a high memory covers would cost
        # more the older the agent
        values = parent_values(st.config, ctx.counter, sources, covered, answer.text)
    st.records.add_parent(
        sources,
        answer.text,
        answer.usage.output_tokens,
        values=values,
        provenance=_provenance(answer),
    )
    st.demanded_merges = [g for g in st.demanded_merges if g != ids]
    return True
