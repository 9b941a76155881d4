"""Split user-side messages and their reassembly.

Chat formats that carry each tool result as its own message (LangChain,
LlamaIndex) split one of our user-side messages into parts; a converter marks
the parts with :func:`part_markers` and puts the message back together with
:class:`PartJoiner`.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from ..messages import ContentBlock, Message, ToolResultBlock

__all__ = ["CONTINUES", "SOURCE", "PartJoiner", "part_markers"]

CONTINUES = "context_manager_continues"
SOURCE = "context_manager_source"


def part_markers(source: int, part: int) -> dict[str, Any]:
    """The extra fields of part ``part`` of split message ``source``.

    Chat formats that carry each tool result as its own message split one of our
    user-side messages into parts; every part names its source message, and the
    parts after the first say they continue it, so :class:`PartJoiner` can put the
    message back together.

    Examples
    --------
    >>> part_markers(7, 0)
    {'context_manager_source': 7}
    >>> part_markers(7, 1)
    {'context_manager_source': 7, 'context_manager_continues': True}
    """
    return {SOURCE: source, **({CONTINUES: True} if part else {})}


class PartJoiner:
    """Our messages, rebuilt from a chat format that splits user-side messages into parts.

    Consecutive tool results join one message (as providers want them); a part
    marked as continuing a split message joins the message before it only when
    that message came from the same source, so a part whose head was trimmed away
    never lands in an unrelated message.
    """

    def __init__(self) -> None:
        self.messages: list[Message] = []
        self._results = False  # does messages[-1] hold tool results?
        self._source: object = None  # the split message messages[-1] came from

    def _joins(self, extra: dict[str, Any]) -> bool:
        return bool(self.messages and extra.get(CONTINUES) and extra.get(SOURCE) == self._source)

    def _extend(self, blocks: Sequence[ContentBlock]) -> None:
        last = self.messages[-1]
        joined = last.model_copy(update={"content": (*last.content, *blocks)})
        joined.check_storable()  # the new blocks were never part of a checked message
        self.messages[-1] = joined

    def tool_result(self, block: ToolResultBlock, participant: str, extra: dict[str, Any]) -> None:
        """Add a tool result carried on its own."""
        if self.messages and (self._results or self._joins(extra)):
            self._extend((block,))
        else:
            self.messages.append(Message(participant=participant, content=(block,)))
        self._results, self._source = True, extra.get(SOURCE)

    def user_part(
        self,
        blocks: Sequence[ContentBlock],
        participant: str,
        extra: dict[str, Any],
        *,
        empty: Sequence[ContentBlock] = (),
    ) -> None:
        """Add a user-side part that is not a tool result (``empty`` stands in for no
        blocks when it starts a message)."""
        if self._joins(extra):
            self._extend(blocks)
        else:
            self.messages.append(Message(participant=participant, content=tuple(blocks or empty)))
        self._results, self._source = False, extra.get(SOURCE)

    def add(self, message: Message) -> None:
        """Add a message that was never split (system, agent)."""
        self.messages.append(message)
        self._results, self._source = False, None
