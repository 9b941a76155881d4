"""Tool-call pairing: every ``tool_result`` answers a ``tool_use`` of the turn before it."""

from __future__ import annotations

from collections.abc import Sequence

from .messages import Message, TextBlock, ToolResultBlock, ToolUseBlock

__all__ = ["enforce_tool_pairs", "enforce_tool_pairs_with_origins", "tool_pair_problems"]

PLACEHOLDER = "[tool result not available in this context]"


def tool_pair_problems(messages: Sequence[Message]) -> list[str]:
    """Every pairing problem, described; empty when the request is well formed.

    A ``tool_use`` must be answered in the next message; a ``tool_result`` must
    answer a ``tool_use`` of the message right before it.
    """
    problems: list[str] = []
    for i, m in enumerate(messages):
        asked = set(messages[i - 1].tool_use_ids) if i else set()
        for rid in m.tool_result_ids:
            if rid not in asked:
                problems.append(f"message {i}: tool_result {rid!r} answers no tool_use before it")
        if m.tool_use_ids:
            answered = set(messages[i + 1].tool_result_ids) if i + 1 < len(messages) else set()
            for uid in m.tool_use_ids:
                if uid not in answered:
                    problems.append(f"message {i}: tool_use {uid!r} is not answered next")
    return problems


def enforce_tool_pairs(messages: Sequence[Message]) -> list[Message]:
    """Repair pairing without inventing history.

    Orphan results are dropped; a call with no answer gets a placeholder result
    when it is followed by another message, and is dropped when it is the last
    message (a trailing unanswered call). Messages left empty are removed.
    """
    return enforce_tool_pairs_with_origins(messages)[0]


def enforce_tool_pairs_with_origins(
    messages: Sequence[Message],
) -> tuple[list[Message], list[int]]:
    """:func:`enforce_tool_pairs`, and where each message of the result comes from.

    Returns
    -------
    repaired : list of Message
    origins : list of int
        For each repaired message, the index of the input message it is (or is a
        repair of); a placeholder result inserted on its own takes the index of the
        message it was inserted before. Non-decreasing.
    """
    out: list[Message] = []
    origins: list[int] = []
    for i, m in enumerate(messages):
        asked = set(out[-1].tool_use_ids) if out else set()
        content = [
            b
            for b in m.content
            if not (isinstance(b, ToolResultBlock) and b.tool_use_id not in asked)
        ]
        if content != list(m.content):
            m = m.model_copy(update={"content": tuple(content)})
        # results owed by the previous message that this one does not carry
        if out and out[-1].tool_use_ids:
            missing = [u for u in out[-1].tool_use_ids if u not in m.tool_result_ids]
            if missing:
                stub = tuple(ToolResultBlock(tool_use_id=u, content=PLACEHOLDER) for u in missing)
                # a message already answering the call takes the rest of the answers too
                separate = m.participant == out[-1].participant or bool(m.tool_use_ids)
                if separate and not m.tool_result_ids:
                    out.append(Message(participant="User", content=stub))
                    origins.append(i)
                else:
                    m = m.model_copy(update={"content": stub + tuple(m.content)})
        if m.content:
            out.append(m)
            origins.append(i)
    if out and out[-1].tool_use_ids:
        last = out[-1]
        kept = tuple(b for b in last.content if not isinstance(b, ToolUseBlock))
        if kept:
            out[-1] = last.model_copy(update={"content": kept})
        else:
            out.pop()
            origins.pop()
    repaired = [
        m if m.content else Message(participant=m.participant, content=(TextBlock(text=""),))
        for m in out
    ]
    return repaired, origins
