"""Where compaction cuts: the head to summarise and the tail kept verbatim.

A turn starts at each user message and runs to the next one. The tail is
built from the newest turns back, within a token budget and at most
``tail_turns`` turns, and may only begin at a safe cut (an assistant message
or a plain user message), so a result is never separated from its call.

The boundary is a :class:`TailCut`. (It was called ``Selection``, a name the
strategies' :class:`~context_manager.strategies.base.Selection`, the entries a
strategy selects, also has; ``Selection`` here is a deprecated alias.)
"""

from __future__ import annotations

import warnings
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from .wire import AnyMessage, UserMessage, is_safe_cut

__all__ = ["TailCut", "select_tail"]


@dataclass(frozen=True)
class TailCut:
    """Where a conversation is cut for compaction: ``messages[:head_len]`` is summarised;
    the tail kept verbatim starts at ``tail_start`` (``None`` when everything is head).

    Examples
    --------
    >>> cut = TailCut(head_len=4, tail_start=4)
    >>> list(range(6))[: cut.head_len], list(range(6))[cut.tail_start :]
    ([0, 1, 2, 3], [4, 5])
    """

    head_len: int
    tail_start: int | None


def __getattr__(name: str) -> Any:
    if name == "Selection":
        warnings.warn(
            "context_manager.assembly.selection.Selection is deprecated and will be removed "
            "in the next release; use TailCut (the same class)",
            DeprecationWarning,
            stacklevel=2,
        )
        return TailCut
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def select_tail(
    messages: Sequence[AnyMessage], sizes: Sequence[int], budget: int, tail_turns: int
) -> TailCut:
    """Choose the head/tail boundary.

    Whole turns are added newest first while they fit ``budget``; the first
    turn that does not fit may contribute its suffix from a safe cut inside
    it, and the walk stops. A turn starting at an unsafe message rides along
    with the turn before it. When nothing qualifies, the tail is the newest
    turn (after the first message) that starts at a safe cut, even over
    budget; failing that, nothing is summarised.

    Examples
    --------
    >>> from context_manager.assembly.wire import AssistantMessage, TextBlock
    >>> def user(t):
    ...     return UserMessage(content=(TextBlock(text=t),), timestamp=0)
    >>> def bot(t):
    ...     return AssistantMessage(
    ...         content=(TextBlock(text=t),), stop_reason="end_turn", model="m",
    ...         provider="p", timestamp=0)
    >>> msgs = [user("a"), bot("b"), user("c"), bot("d"), user("e"), bot("f")]
    >>> select_tail(msgs, [10] * 6, budget=40, tail_turns=2)
    TailCut(head_len=2, tail_start=2)
    >>> select_tail(msgs, [10] * 6, budget=40, tail_turns=0)
    TailCut(head_len=6, tail_start=None)
    """
    starts = [i for i, m in enumerate(messages) if isinstance(m, UserMessage)]
    if tail_turns <= 0 or not starts:
        return TailCut(len(messages), None)
    ends = [*starts[1:], len(messages)]
    candidate: int | None = None
    used = 0
    for start, end in list(zip(starts, ends, strict=True))[::-1][:tail_turns]:
        size = sum(sizes[start:end])
        if used + size <= budget:
            used += size
            if is_safe_cut(messages[start]):
                candidate = start
            continue
        suffix = size
        for cut in range(start + 1, end):
            suffix -= sizes[cut - 1]
            if is_safe_cut(messages[cut]) and used + suffix <= budget:
                candidate = cut
                break
        break
    if candidate is not None and candidate > 0:
        return TailCut(candidate, candidate)
    for start in reversed(starts):
        if start > 0 and is_safe_cut(messages[start]):
            return TailCut(start, start)
    return TailCut(0, 0)
