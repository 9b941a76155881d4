"""Cap, don't refuse: the sent copy of oversized tool results, when nothing else fits.

When the messages a strategy must send carry tool results too large for the budget
(for the autobiographical strategy, the messages that cannot fold: the recent tail,
the head, pinned, locked or held messages, and those no memory covers yet; for the
passthrough strategy, the newest turn and the task), the compile caps the largest of
those results in the copy it sends, the way :func:`context_manager.assembly.cap_text`
does: the head and tail of the text around a marker that names the tool and the
size it had. The stored message never changes. The cap is one level ``c`` for
every capped result (the largest that frees enough tokens: the smaller results are
left whole). The autobiographical strategy sends every result whole when the request
fits so; else it keeps the caps its last live compile sent (stored with its records)
on the next compiles under the same input budget while the request fits with them, so
a large result that stays capped keeps its bytes from one call to the next and the
prompt is rewritten from it once, not again for a little more of it; only when the
kept caps no longer fit, or the budget changes, are all caps chosen anew. The same
history and records give the same bytes. The compile refuses only when the capped
context still cannot fit.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from ..assembly.capping import cap_text
from ..messages import Message, TextBlock, ToolResultBlock, ToolUseBlock
from ..pairing import SendForm
from ..tokens import TokenCounter
from .base import StoredMessage

__all__ = ["MAX_CAP_ROUNDS", "MIN_RESULT_TOKENS", "Capped", "cap_forms", "cap_message"]

MIN_RESULT_TOKENS = 64
"""No result is capped below this many tokens: a result cut shorter says nothing."""

MAX_CAP_ROUNDS = 4
"""Rounds of capping one compile may try, each at a lower cap, before it refuses."""

SLACK = 1.1
"""The cap frees this much more than the excess, for the marker and the recount."""


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


def _text(block: ToolResultBlock) -> str | None:
    """The result's text, when it is text only (a result with images is left whole)."""
    if isinstance(block.content, str):
        return block.content
    if all(isinstance(b, TextBlock) for b in block.content):
        return "\n".join(b.text for b in block.content if isinstance(b, TextBlock))
    return None


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
                    text = _text(b)
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
        blocks = []
        for b in m.content:
            text = _text(b) if isinstance(b, ToolResultBlock) else None
            if isinstance(b, ToolResultBlock) and text:
                tokens = counter.count_text(text)
                if tokens > cap:
                    tool = names.get(b.tool_use_id, "the tool")
                    tools.append(tool)
                    b = b.model_copy(update={"content": cap_text(text, tokens, cap, tool)})
            blocks.append(b)
        sent.append(m.model_copy(update={"content": tuple(blocks)}))
    before = sum(counter.count_message(m) for m in form.messages)
    after = sum(counter.count_message(m) for m in sent)
    return Capped(SendForm(tuple(sent), form.tied), after, before, tuple(tools))


def _tool_names(previous: Message | None) -> dict[str, str]:
    """The tool each call of the message before a result names, by call id."""
    if previous is None:
        return {}
    return {b.id: b.name for b in previous.content if isinstance(b, ToolUseBlock)}
