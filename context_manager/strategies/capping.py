"""Cap, don't refuse: the sent copy of oversized tool results, when nothing else fits.

When the messages a strategy must send carry tool results too large for the budget
(for the autobiographical strategy, the messages that cannot fold: the recent tail,
the head, pinned, locked or held messages, and those no memory covers yet; for the
passthrough strategy, the newest turn and the task), the compile caps the largest of
those results in the copy it sends, the way
:func:`context_manager.assembly.capping.cap_text` does: the head and tail of the text
around a marker that names the tool and the size it had. The stored message never
changes. The cap is one level ``c`` for every capped result (the largest that frees
enough tokens: the smaller results are left whole). The autobiographical strategy
sends every result whole when the request fits so; else it keeps the caps its last
live compile sent (stored with its records) on the next compiles under the same input
budget while the request fits with them, so a large result that stays capped keeps its
bytes from one call to the next and the prompt is rewritten from it once, not again
for a little more of it; only when the kept caps no longer fit, or the budget changes,
are all caps chosen anew. The same history and records give the same bytes. The
compile refuses only when the capped context still cannot fit.

How one message's tool results are capped at a given cap (the tool each is named
after, the count, the cut) is :func:`cap_tool_results`, which the autobiographical
strategy's memory requests use too (``memory_source_cap_tokens``); the cut itself is
:func:`context_manager.assembly.capping.cap_text`, shared with the stateless assembly.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass

from ..assembly.capping import cap_text
from ..messages import ContentBlock, Message, TextBlock, ToolResultBlock, ToolUseBlock
from ..pairing import SendForm
from ..tokens import TokenCounter
from .base import StoredMessage

__all__ = [
    "MAX_CAP_ROUNDS",
    "MIN_RESULT_TOKENS",
    "UNKNOWN_TOOL",
    "Capped",
    "cap_forms",
    "cap_message",
    "cap_tool_results",
    "result_text",
]

MIN_RESULT_TOKENS = 64
"""No result is capped below this many tokens: a result cut shorter says nothing."""

MAX_CAP_ROUNDS = 4
"""Rounds of capping one compile may try, each at a lower cap, before it refuses."""

SLACK = 1.1
"""The cap frees this much more than the excess, for the marker and the recount."""

UNKNOWN_TOOL = "the tool"
"""What the marker of a capped result calls a tool whose call is not in view."""


@dataclass(frozen=True)
class Capped:
    """The send form of one message with its tool results capped."""

    form: SendForm
    tokens: int
    """Tokens of the capped form (the counter's count of each message it sends)."""
    before: int
    """Tokens of the form before the cap."""
    tools: tuple[str, ...]
    """The tools whose results were capped."""


@dataclass(frozen=True)
class _Result:
    at: int  # message position
    text: str
    tokens: int


def result_text(block: ToolResultBlock) -> str | None:
    """The result's text, when it is text only (a result with images is left whole).

    Examples
    --------
    >>> lines = [TextBlock(text="a"), TextBlock(text="b")]
    >>> result_text(ToolResultBlock(tool_use_id="t", content=lines))
    'a\\nb'
    """
    if isinstance(block.content, str):
        return block.content
    if all(isinstance(b, TextBlock) for b in block.content):
        return "\n".join(b.text for b in block.content if isinstance(b, TextBlock))
    return None


def cap_tool_results(
    message: Message,
    cap: int,
    counter: TokenCounter,
    tool_names: Mapping[str, str],
    unknown: str = UNKNOWN_TOOL,
    text_of: Callable[[ToolResultBlock], str | None] = result_text,
) -> tuple[Message, tuple[str, ...]]:
    """``message`` with every tool result over ``cap`` tokens cut to its head and tail
    around the cap marker, and the tools whose results were cut.

    A result is counted and cut on its text (``text_of``: None or empty leaves it
    whole) and becomes a result holding the cut text; the marker names the tool of its
    call (``tool_names``, by call id; ``unknown`` when the call is not there). The
    message itself comes back when nothing is cut.

    Parameters
    ----------
    message : Message
    cap : int
        The most tokens (by ``counter.count_text``) a result keeps.
    counter : TokenCounter
    tool_names : mapping of str to str
        Tool name by call id.
    unknown : str, optional
        The name of a tool whose call id is not in ``tool_names``.
    text_of : callable, optional
        The text a result is capped on (:func:`result_text` by default).

    Returns
    -------
    tuple of (Message, tuple of str)

    Examples
    --------
    >>> from context_manager.tokens import CharsCounter
    >>> long = ToolResultBlock(tool_use_id="t", content="x" * 400)
    >>> m = Message(participant="bash", content=(long,))
    >>> capped, tools = cap_tool_results(m, 64, CharsCounter(), {"t": "cat"})
    >>> tools, len(capped.content[0].content) < 400, "cat" in capped.content[0].content
    (('cat',), True, True)
    >>> cap_tool_results(m, 100, CharsCounter(), {})[0] is m
    True
    """
    blocks: list[ContentBlock] = []
    tools: list[str] = []
    for b in message.content:
        text = text_of(b) if isinstance(b, ToolResultBlock) else None
        if isinstance(b, ToolResultBlock) and text:
            tokens = counter.count_text(text)
            if tokens > cap:
                tool = tool_names.get(b.tool_use_id, unknown)
                tools.append(tool)
                b = b.model_copy(update={"content": cap_text(text, tokens, cap, tool)})
        blocks.append(b)
    if not tools:
        return message, ()
    return message.model_copy(update={"content": tuple(blocks)}), tuple(tools)


def _level(sizes: Sequence[int], excess: float) -> int:
    """The largest cap ``c`` with ``sum(max(0, s - c)) >= excess`` (0 when even capping
    everything to nothing frees too little)."""
    ordered = sorted(sizes, reverse=True)
    total = 0
    for k, size in enumerate(ordered, 1):
        total += size
        c = (total - excess) / k
        below = ordered[k] if k < len(ordered) else 0
        if c >= below:
            return max(0, int(c))
    return 0


def cap_forms(
    stored: Sequence[StoredMessage],
    forms: Sequence[SendForm],
    candidates: Iterable[int],
    excess: int,
    counter: TokenCounter,
    level: int | None = None,
) -> tuple[dict[int, Capped], int] | None:
    """Caps that free at least ``excess`` tokens from the results of ``candidates``.

    ``level`` is the cap of the round before (the new one is lower). Returns the
    capped forms by message position and the cap, or None when the floor of
    :data:`MIN_RESULT_TOKENS` is reached without freeing enough.
    """
    results: list[_Result] = []
    for i in candidates:
        for m in forms[i].messages:
            for b in m.content:
                if isinstance(b, ToolResultBlock):
                    text = result_text(b)
                    if text:
                        results.append(_Result(i, text, counter.count_text(text)))
    if not results:
        return None
    sizes = [min(r.tokens, level) if level is not None else r.tokens for r in results]
    cap = max(MIN_RESULT_TOKENS, _level(sizes, excess * SLACK))
    if level is not None and cap >= level:
        if level <= MIN_RESULT_TOKENS:
            return None
        cap = max(MIN_RESULT_TOKENS, level // 2)
    if not any(r.tokens > cap for r in results):
        return None
    out: dict[int, Capped] = {}
    for i in sorted({r.at for r in results if r.tokens > cap}):
        out[i] = _capped(stored, forms[i], i, cap, counter)
    return out, cap


def cap_message(
    stored: Sequence[StoredMessage], form: SendForm, i: int, cap: int, counter: TokenCounter
) -> Capped:
    """The send form ``form`` of message ``i`` with its text results over ``cap`` tokens
    capped at it (:attr:`Capped.tools` is empty when none is)."""
    return _capped(stored, form, i, cap, counter)


def _capped(
    stored: Sequence[StoredMessage], form: SendForm, i: int, cap: int, counter: TokenCounter
) -> Capped:
    names = _tool_names(stored[i - 1].message if i else None)
    sent: list[Message] = []
    tools: list[str] = []
    for m in form.messages:
        capped, named = cap_tool_results(m, cap, counter, names)
        sent.append(capped)
        tools.extend(named)
    before = sum(counter.count_message(m) for m in form.messages)
    after = sum(counter.count_message(m) for m in sent)
    return Capped(SendForm(tuple(sent), form.tied), after, before, tuple(tools))


def _tool_names(previous: Message | None) -> dict[str, str]:
    """The tool each call of the message before a result names, by call id."""
    if previous is None:
        return {}
    return {b.id: b.name for b in previous.content if isinstance(b, ToolUseBlock)}
