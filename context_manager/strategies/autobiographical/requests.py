"""The summariser requests: an L1 over a chunk, a merge over memories, and variants.

A request replays what the agent saw before the stretch it remembers: the raw
head, a *ladder* of earlier memories (newest first up to ``recall_budget_tokens``),
the middle not yet remembered, then a memory marker, the stretch itself and the
instruction. The same state gives the same request, byte for byte, which is what
the refusal ledger and the provider's prompt cache key on.
"""

from __future__ import annotations

import bisect
import json
from collections.abc import Sequence
from typing import Any

from ...bodies import shard_of
from ...images import cap_image_bytes
from ...messages import Message, ToolResultBlock, ToolUseBlock
from ...summarizer import MEMORY_MARKER, CompletionRequest
from ..base import StoredMessage, StrategyContext
from ..capping import cap_tool_results
from .config import ToolProseFallback, memory_output_cap
from .prompts import CONTEXT_MANAGER, strip_thinking
from .records import ChunkRecord, SummaryEntry
from .state import State
from .tree import covered_runs, tree
from .windows import windows

__all__ = [
    "l1_request",
    "ladder",
    "merge_request",
    "reading_tokens",
    "source_only_request",
    "tool_prose_request",
    "variants",
    "witnessed",
]


def witnessed(
    st: State, stored: Sequence[StoredMessage], index: dict[str, int], ids: Sequence[str]
) -> bool:
    """Whether the messages ``ids`` are inherited record: every one stored below
    ``witnessed_before_sequence`` (False when it is unset)."""
    bound = st.config.witnessed_before_sequence
    return bound is not None and all(stored[index[i]].seq < bound for i in ids)


def ladder(
    st: State, ctx: StrategyContext, before_position: int, index: dict[str, int]
) -> list[SummaryEntry]:
    """The parentless memories before a position, filled newest first up to the recall
    budget (an oversized one is skipped), in chronological order."""
    chosen: list[SummaryEntry] = []
    budget = st.config.recall_budget_tokens
    candidates = [
        s
        for s in st.frontier_summaries()
        if s.first in index and index.get(s.last, 1 << 60) < before_position
    ]
    candidates.sort(key=lambda s: index[s.first], reverse=True)
    for s in candidates:
        cost = sum(ctx.counter.count_message(m) for m in st.ask_pair(s))
        if cost > budget:
            continue
        budget -= cost
        chosen.append(s)
    chosen.sort(key=lambda s: index[s.first])
    return chosen


def _ladder_marks(
    st: State,
    steps: Sequence[SummaryEntry],
    offset: int,
    before_position: int,
    index: dict[str, int],
) -> list[int]:
    """Message indices ending the last merged memory and the last memory of a ladder
    whose pairs start at ``offset``; none when the recall budget cut the ladder (a
    memory before ``before_position`` whose span no shown memory starts)."""
    starts = {s.first for s in steps}
    if not steps or any(
        s.first not in starts
        for s in st.frontier_summaries()
        if index.get(s.last, 1 << 60) < before_position
    ):
        return []
    marks = [offset + 2 * len(steps) - 1]
    merged = [i for i, s in enumerate(steps) if s.level >= 2]
    if merged:
        marks.append(offset + 2 * merged[-1] + 1)
    return marks


def reading_tokens(
    ctx: StrategyContext,
    stored: Sequence[StoredMessage],
    index: dict[str, int],
    ids: Sequence[str],
    *,
    whole_share: bool = False,
) -> int | None:
    """The tokens of the body stored in parts the messages ``ids`` are all shards of,
    when a memory of them is written in reading mode; else None.

    Reading mode: every one of ``ids`` is a shard of one body
    (:mod:`context_manager.bodies`) and the body takes at least twice their tokens (for
    a merge, ``whole_share``: any share of the body)."""
    if not ids or any(i not in index for i in ids):
        return None
    shards = [shard_of(i, stored[index[i]].message) for i in ids]
    first = shards[0]
    if first is None or any(s is None or s.group != first.group for s in shards):
        return None
    at = index[ids[0]] - first.index
    body = [
        m
        for m in stored[max(0, at) : max(0, at) + first.count]
        if (place := shard_of(m.id, m.message)) is not None and place.group == first.group
    ]
    total = sum(ctx.count(m) for m in body)
    own = sum(ctx.count(stored[index[i]]) for i in ids)
    return total if whole_share or total >= 2 * own else None


def _instruction(
    st: State, level: int, inherited: bool = False, reading: int | None = None
) -> Message:
    n = st.config.summary_target_tokens
    own = st.config.witnessed_instruction
    if reading is not None and not inherited and level == 1:
        text = (
            f"[CM] You have been reading a larger text of {reading} tokens; the messages "
            "since the memory notification above are one portion of it. Write the memory "
            "of reading this portion: what reading it was like, what you learned and what "
            "stood out, naming specific claims, people, dates and phrases, in your own voice "
            f"as its reader. Aim for about {n} tokens. Output only the memory itself, with "
            "no preamble."
        )
    elif reading is not None and not inherited:
        text = (
            "[CM] You have just reviewed, in order, what came since the memory notification "
            f"above: your reading of portions of a larger text of {reading} tokens. Write one "
            f"memory (level {level}) of reading it that keeps its through-line: what you "
            "learned and what stood out, naming specific claims, people, dates and phrases, "
            f"in your own voice as its reader, about {n} tokens. Output only the memory itself."
        )
    elif inherited and own is not None:
        text = own.replace("{targetTokens}", str(n))
        if not text.startswith("[CM] "):
            text = f"[CM] {text}"
    elif inherited and level == 1:
        text = (
            "[CM] The messages since the memory notification above are an inherited "
            "record: you read them, you did not take part in them. Write the memory of "
            "what they record, attributing each event, decision and statement to the "
            "participant named in it; use the first person only for your own reading and "
            "carrying of the record. Keep concrete details: paths, values, decisions and "
            f"open questions. Aim for about {n} tokens. Output only the memory itself, with "
            "no preamble."
        )
    elif inherited:
        text = (
            "[CM] You have just reviewed, in order, memories of an inherited record that "
            f"came since the memory notification above. Write one memory (level {level}) "
            "that keeps its through-line: what happened, decisions, open threads and "
            "concrete details, each attributed to the participant named in it, the first "
            f"person only for your own reading of the record, about {n} tokens. Output only "
            "the memory itself."
        )
    elif level == 1:
        text = (
            "[CM] Write the memory of what happened since the memory notification above, "
            "in the first person, from your own perspective. Keep concrete details: paths, "
            "values, decisions, open questions and what the user is asking for. Aim for "
            f"about {n} tokens. Output only the memory itself, with no preamble. If the "
            "stretch was routine, a short memory saying so is right."
        )
    else:
        text = (
            "[CM] You have just reviewed, in order, what came since the memory "
            f"notification above. Write one memory (level {level}) that keeps its "
            "through-line: what happened, decisions, open threads and concrete details, in "
            f"the first person, about {n} tokens. Output only the memory itself."
        )
    return Message.text_message(CONTEXT_MANAGER, text)


def _l1_marker() -> Message:
    return Message.text_message(
        CONTEXT_MANAGER,
        f"{MEMORY_MARKER} from the messages that follow; you will write it afterwards "
        "in your own voice.",
    )


def _unremembered(
    st: State, ctx: StrategyContext, index: dict[str, int], lo: int, hi: int
) -> list[int]:
    """Positions in ``[lo, hi)`` outside every showable L1 memory's span, in order (the
    union of the memories' spans is kept with the memory tree as disjoint runs, so this
    reads only the runs around the gaps in ``[lo, hi)``)."""
    memories = tree(st, ctx, index)
    key = ("l1-runs",)
    runs = memories.kept.get(key)
    if runs is None:
        runs = memories.kept[key] = covered_runs(
            (x.first, x.last) for x in memories.nodes.values() if x.level == 1
        )
    out: list[int] = []
    at = lo
    k = max(0, bisect.bisect_right(runs, (lo, lo)) - 1)
    while k < len(runs) and runs[k][0] < hi:
        a, b = runs[k]
        if b >= at:
            out.extend(range(at, min(a, hi)))
            at = max(at, b + 1)
        k += 1
    out.extend(range(at, hi))
    return out


def l1_request(
    st: State,
    ctx: StrategyContext,
    stored: list[StoredMessage],
    chunk: ChunkRecord,
    steps: list[SummaryEntry] | None = None,
) -> CompletionRequest:
    """The request for ``chunk``'s memory (``steps``: the ladder, by default
    :func:`ladder` before the chunk)."""
    index = st.positions(ctx, stored)
    start = index[chunk.source_ids[0]]
    win = windows(st, ctx, stored)
    represented = st.represented_ids()
    # the raw head before the chunk (none before a moved head), then the middle
    head = [
        s.message
        for s in stored[win.head_start : min(win.head_end, start)]
        if s.id not in represented
    ]
    if steps is None:
        steps = ladder(st, ctx, start, index)
    recall = [m for s in steps for m in st.ask_pair(s)]
    if start >= win.head_end:
        before = _unremembered(st, ctx, index, win.head_end, start)
        if win.head_start:  # what a moved head left in the middle
            before = _unremembered(st, ctx, index, 0, win.head_start) + before
    elif start < win.head_start:  # a chunk from before a moved head
        before = _unremembered(st, ctx, index, 0, start)
    else:
        before = []
    middle = [
        stored[j].message
        for j in before
        if stored[j].id not in represented and stored[j].id not in chunk.source_ids
    ]
    marker = _l1_marker()
    body = [by.message for by in stored[start : index[chunk.source_ids[-1]] + 1]]
    body = _capped_sources(st, ctx, body)
    inherited = witnessed(st, stored, index, chunk.source_ids)
    reading = reading_tokens(ctx, stored, index, chunk.source_ids)
    messages = [*head, *recall, *middle, marker, *body, _instruction(st, 1, inherited, reading)]
    marks = [len(head) - 1] if head else []
    marks += _ladder_marks(st, steps, len(head), start, index)
    return _request(st, ctx, messages, marks)


def _capped_sources(st: State, ctx: StrategyContext, body: list[Message]) -> list[Message]:
    """``body`` with every tool result over ``memory_source_cap_tokens`` cut to its head
    and tail around the cap marker (the messages themselves are unchanged)."""
    cap = st.config.memory_source_cap_tokens
    if cap is None:
        return body
    names = {b.id: b.name for m in body for b in m.content if isinstance(b, ToolUseBlock)}
    return [
        cap_tool_results(m, cap, ctx.counter, names, m.participant, _string_content)[0]
        for m in body
    ]


def _string_content(block: ToolResultBlock) -> str | None:
    """A memory request caps a result given as one string (one of text blocks is sent whole)."""
    return block.content if isinstance(block.content, str) else None


def source_only_request(
    st: State, ctx: StrategyContext, stored: Sequence[StoredMessage], source_ids: Sequence[str]
) -> CompletionRequest:
    """The request for the memory of the messages ``source_ids`` (a chunk, or a part of
    one) alone: the memory marker, those messages and the instruction, with no head,
    ladder or unremembered middle before them (``compression_source_only``, and the
    source-only and split rungs after a refusal). Its prefix up to the marker (system
    prompt, tools, marker) is the same in every such request: it ends a cache
    breakpoint."""
    index = st.positions(ctx, stored)
    body = _capped_sources(st, ctx, [stored[index[i]].message for i in source_ids])
    reading = reading_tokens(ctx, stored, index, source_ids)
    closing = _instruction(st, 1, witnessed(st, stored, index, source_ids), reading)
    return _request(st, ctx, [_l1_marker(), *body, closing], [0])


def tool_prose_request(
    request: CompletionRequest, rung: ToolProseFallback
) -> CompletionRequest | None:
    """``request`` with every call of a reasoning tool (``rung.from_tools``) whose prose
    has ``rung.min_chars`` or more rewritten as a call of ``rung.into_tool`` holding that
    prose as its one argument, same call id; with ``rung.result``, the calls' results
    say it instead. Everything else is byte for byte the request. None when no call
    moves, or when the request does not declare ``into_tool`` (a call of an undeclared
    tool is not a valid request)."""
    declared = {t.get("name") for t in request.tools or ()}
    if rung.into_tool not in declared:
        return None
    moved: set[str] = set()
    out: list[Message] = []
    for message in request.messages:
        blocks: list[Any] = []
        for block in message.content:
            if isinstance(block, ToolUseBlock) and block.name in rung.from_tools:
                prose = _prose(block.input)
                if len(prose) >= rung.min_chars:
                    moved.add(block.id)
                    block = ToolUseBlock(
                        id=block.id, name=rung.into_tool, input={rung.into_argument: prose}
                    )
            elif (
                isinstance(block, ToolResultBlock)
                and block.tool_use_id in moved
                and rung.result is not None
            ):
                block = block.model_copy(update={"content": rung.result})
            blocks.append(block)
        changed = any(a is not b for a, b in zip(blocks, message.content, strict=True))
        out.append(message.model_copy(update={"content": tuple(blocks)}) if changed else message)
    if not moved:
        return None
    return request.model_copy(update={"messages": tuple(out)})


def _prose(arguments: dict[str, Any]) -> str:
    """A reasoning call's prose: its one argument's text, or ``name: value`` lines."""

    def text(value: Any) -> str:
        return value if isinstance(value, str) else json.dumps(value, ensure_ascii=False)

    if len(arguments) == 1:
        return text(next(iter(arguments.values())))
    return "\n".join(f"{name}: {text(value)}" for name, value in arguments.items())


def merge_request(
    st: State, ctx: StrategyContext, sources: Sequence[SummaryEntry]
) -> CompletionRequest:
    """The request for the memory one level above ``sources``: the ladder before them,
    then what it is written from (``merge_from``): what the sources remember (an L1's
    messages, a higher memory's children), or the sources themselves."""
    level = sources[0].level + 1
    stored = ctx.messages()
    index = st.positions(ctx, stored)
    start = index[sources[0].first]
    steps = ladder(st, ctx, start, index)
    recall = [m for s in steps for m in st.ask_pair(s)]
    marks = _ladder_marks(st, steps, 0, start, index)
    target: list[Message] = []
    own = st.config.merge_from == "memories"
    for s in sources:
        if own:
            target.extend(st.ask_pair(s))
        elif s.level == 1:
            target += [stored[index[i]].message for i in s.source_ids if i in index]
        else:
            for child_id in s.source_ids:
                child = st.summaries.get(child_id)
                if child is not None:
                    target.extend(st.ask_pair(child))
    what = "messages" if level == 2 and not own else "memories"
    marker = Message.text_message(
        CONTEXT_MANAGER,
        f"{MEMORY_MARKER} (level {level}) from the {what} that follow; you will write it "
        "afterwards in your own voice.",
    )
    leaves = [leaf for s in sources for leaf in st.leaves_of(s)]
    reading = reading_tokens(ctx, stored, index, leaves, whole_share=True)
    closing = _instruction(st, level, all(s.witnessed for s in sources), reading)
    return _request(st, ctx, [*recall, marker, *target, closing], marks)


def variants(
    st: State,
    ctx: StrategyContext,
    stored: list[StoredMessage],
    chunk: ChunkRecord,
    steps: list[SummaryEntry],
    canonical: CompletionRequest,
) -> list[CompletionRequest]:
    """Requests that differ from ``canonical`` only by one merged memory of the ladder
    shown as its children: newest span end first, then higher level, then id."""
    position = st.positions(ctx, stored)
    candidates = []
    for parent in steps:
        children = [st.summaries.get(c) for c in parent.source_ids]
        if parent.level < 2 or not all(
            c is not None and c.level == parent.level - 1 and c.content.strip() for c in children
        ):
            continue
        leaves = [leaf for c in children if c is not None for leaf in st.leaves_of(c)]
        if leaves != st.leaves_of(parent):
            continue
        candidates.append(parent)
    candidates.sort(key=lambda p: (-position[p.last], -p.level, p.id))
    reserve = canonical.max_tokens
    budget = st.config.compression_context_budget_tokens
    out = []
    for parent in candidates[: st.config.compression_refusal_curve_fallbacks]:
        kids = [st.summaries[c] for c in parent.source_ids]
        kids.sort(key=lambda c: position[c.first])
        variant_steps = [x for p in steps for x in (kids if p is parent else [p])]
        request = l1_request(st, ctx, stored, chunk, variant_steps)
        size = sum(ctx.counter.count_message(m) for m in request.messages)
        if size + reserve <= budget:
            out.append(request)
    return out


def _request(
    st: State, ctx: StrategyContext, messages: list[Message], marks: Sequence[int] = ()
) -> CompletionRequest:
    """A summariser request; ``marks`` index ``messages`` (the prompt-cache
    breakpoints, kept only with ``compression_cache_breakpoints``)."""
    cfg = st.config
    assert cfg.compression_model is not None
    tools = ctx.tools()
    # the newest images within the byte budget; the older ones become a note
    messages, _ = cap_image_bytes(messages, cfg.max_compression_image_bytes)
    kept, moved = strip_thinking(messages)
    breakpoints: tuple[int, ...] = ()
    if cfg.compression_cache_breakpoints:
        breakpoints = tuple(sorted({moved[i] for i in marks if moved[i] >= 0}))
    return CompletionRequest(
        model=cfg.compression_model,
        messages=tuple(kept),
        system=ctx.system_prompt(),
        max_tokens=memory_output_cap(cfg.summary_target_tokens),
        tools=tuple(tools) if tools else None,
        agent=cfg.summary_participant,
        target_tokens=cfg.summary_target_tokens,
        cache_breakpoints=breakpoints,
        cache_ttl=cfg.compression_cache_ttl if breakpoints else None,
    )
