"""Tool-call pairing: every ``tool_result`` answers a ``tool_use`` of the turn before it."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from .arguments import check_int, check_items
from .errors import ArgumentTypeError
from .messages import Message, TextBlock, ToolResultBlock, ToolUseBlock

__all__ = [
    "PLACEHOLDER",
    "SendForm",
    "enforce_tool_pairs",
    "enforce_tool_pairs_with_origins",
    "pair_groups",
    "send_form",
    "send_forms",
    "tool_pair_problems",
]

PLACEHOLDER = "[tool result not available in this context]"
"""Content of the result sent for a call the history never answered."""


def tool_pair_problems(messages: Sequence[Message], *, start: int = 0) -> list[str]:
    """Every pairing problem, described; empty when the request is well formed.

    A ``tool_use`` must be answered in the next message; a ``tool_result`` must
    answer a ``tool_use`` of the message right before it. ``start`` checks only the
    messages from that index on (against the one before it): what a request shares
    with one already checked needs no second look.

    Raises
    ------
    ArgumentTypeError
        For ``messages`` that are not a sequence, an item that is not a
        :class:`~context_manager.messages.Message` (named by its index), or a ``start``
        that is not an int.
    """
    _check_messages(messages, start)
    problems: list[str] = []
    for i in range(max(0, start), len(messages)):
        m = messages[i]
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

    Raises
    ------
    ArgumentTypeError
        For ``messages`` that are not a sequence of
        :class:`~context_manager.messages.Message` (the item named by its index).
    """
    check_items(messages, "messages", Message, "a Message")
    return enforce_tool_pairs_with_origins(messages)[0]


def _check_messages(messages: object, start: object) -> None:
    """Refuse ``messages`` that are not a sequence of messages (from the one before
    ``start`` on: the others are not read) and a ``start`` that is not an int."""
    if not isinstance(messages, Sequence) or isinstance(messages, str | bytes):
        raise ArgumentTypeError("messages", messages, "a sequence of Message")
    first = check_int(start, "start")
    for i in range(max(0, first - 1), len(messages)):
        if not isinstance(messages[i], Message):
            raise ArgumentTypeError(f"messages[{i}]", messages[i], "a Message")


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


# ------------------------------------------------------------- the edge rule
@dataclass(frozen=True)
class SendForm:
    """How one stored message is sent when it is shown raw.

    Attributes
    ----------
    messages : tuple of Message
        What goes into the request for it: the message as stored, or repaired by the
        rule of :func:`send_form`, possibly followed by a placeholder result; empty when
        nothing of it can be sent yet.
    tied : bool
        Its calls are answered by the next stored message, so the two are only ever
        shown together (one leaf of the fold problem, one side of any pin or lock).
    """

    messages: tuple[Message, ...]
    tied: bool = False


def _takes_stubs(call: Message, nxt: Message) -> bool:
    """True when placeholder answers to ``call`` go into ``nxt`` rather than a message
    of their own: ``nxt`` already answers it, or is another participant's plain turn."""
    separate = nxt.participant == call.participant or bool(nxt.tool_use_ids)
    return not separate or bool(nxt.tool_result_ids)


def send_form(previous: Message | None, message: Message, following: Message | None) -> SendForm:
    """The one pairing rule: what a stored message is sent as, from its neighbours.

    A history's own defects are repaired here, at the edge, once per message and
    before anything is priced, so that every request built from whole
    :class:`SendForm` groups is well formed:

    * a ``tool_result`` that answers no ``tool_use`` of the previous stored message
      (its call was removed, or never stored) is not sent;
    * a ``tool_use`` of the newest message is not sent: its answer is not there yet;
    * a ``tool_use`` the next message does not answer gets a placeholder result
      (:data:`PLACEHOLDER`), put into the next message when that one is another
      participant's turn without calls of its own or already carries results, and
      otherwise sent as a ``User`` message right after the call;
    * a message left with no content is not sent.

    The form depends only on the message and its two neighbours, so an append
    changes the form of the previous newest message and of no other.

    Parameters
    ----------
    previous, following : Message or None
        The stored messages before and after it (None at the ends of the history).
    message : Message

    Returns
    -------
    SendForm

    Examples
    --------
    >>> from context_manager import Message, ToolUseBlock, ToolResultBlock
    >>> call = Message(participant="Claude", content=[ToolUseBlock(id="t1", name="ls")])
    >>> answer = Message(participant="User", content=[ToolResultBlock(tool_use_id="t1")])
    >>> send_form(None, call, answer).tied, send_form(call, answer, None).tied
    (True, False)
    >>> send_form(None, call, None).messages  # not answered yet: not sent
    ()
    >>> [m.text for m in send_form(None, answer, None).messages]  # its call is gone
    []
    """
    asked = set(previous.tool_use_ids) if previous is not None else set()
    content: list[Any] = []
    if previous is not None and previous.tool_use_ids and _takes_stubs(previous, message):
        answered = set(message.tool_result_ids)
        content.extend(
            ToolResultBlock(tool_use_id=u, content=PLACEHOLDER)
            for u in previous.tool_use_ids
            if u not in answered
        )
    for block in message.content:
        if isinstance(block, ToolResultBlock) and block.tool_use_id not in asked:
            continue  # an orphan result
        if isinstance(block, ToolUseBlock) and following is None:
            continue  # a trailing call: not answered yet
        content.append(block)
    changed = len(content) != len(message.content) or any(
        a is not b for a, b in zip(content, message.content, strict=False)
    )
    sent = message.model_copy(update={"content": tuple(content)}) if changed else message
    out: tuple[Message, ...] = (sent,) if content else ()
    tied = False
    if following is not None and message.tool_use_ids:
        if _takes_stubs(message, following):
            tied = True
        else:
            stub = tuple(
                ToolResultBlock(tool_use_id=u, content=PLACEHOLDER) for u in message.tool_use_ids
            )
            out = (*out, Message(participant="User", content=stub))
    return SendForm(out, tied)


def send_forms(messages: Sequence[Message]) -> list[SendForm]:
    """:func:`send_form` of every message of a history, in order."""
    n = len(messages)
    return [
        send_form(messages[i - 1] if i else None, m, messages[i + 1] if i + 1 < n else None)
        for i, m in enumerate(messages)
    ]


def pair_groups(tied: Sequence[bool]) -> list[tuple[int, int]]:
    """``(start, end)`` index ranges of the messages that are only shown together.

    ``tied[i]`` says message ``i`` is shown only with message ``i + 1``
    (:attr:`SendForm.tied`).

    Examples
    --------
    >>> pair_groups([False, True, False, False])
    [(0, 1), (1, 3), (3, 4)]
    """
    groups: list[tuple[int, int]] = []
    start = 0
    for i, joined in enumerate(tied):
        if not joined:
            groups.append((start, i + 1))
            start = i + 1
    if start < len(tied):
        groups.append((start, len(tied)))
    return groups
