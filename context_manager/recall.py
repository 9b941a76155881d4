"""Getting back what was folded: memory search and the agent's ``recall`` tool.

Folding is lossless from the agent's side: every message stays in the store, and the
``recall`` tool (:meth:`~context_manager.ContextManager.recall_tool`) gives the agent
either the messages a memory stands for, in full (``memory_id``), or the stored
messages that match a ``grep`` pattern. This module holds the tool's definition, the
checks of its input (:class:`RecallInputError` names the offending field) and the text
it answers with; the manager supplies the messages and the memories.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from .errors import ConfigError
from .messages import Message
from .strategies.base import StoredMessage
from .strategies.contract import MemoryReads

__all__ = [
    "DEFAULT_GREP_LIMIT",
    "DEFAULT_MAX_CHARS",
    "RECALL_TOOL_NAME",
    "RecallInputError",
    "RecallTool",
    "answer_recall",
    "check_recall_input",
    "expand_memory",
    "grep_messages",
    "matching_memories",
    "recall_definition",
]

RECALL_TOOL_NAME = "recall"
"""The tool's default name."""
DEFAULT_MAX_CHARS = 8000
"""Characters a recall answers with at most (its notes included)."""
DEFAULT_GREP_LIMIT = 20
"""Matching messages a ``grep`` shows at most, unless the input sets ``limit``."""
_MAX_LIMIT = 200
_MAX_PATTERN = 500
_LINES_PER_MESSAGE = 3
_LINE_CHARS = 300
_FIELDS = ("memory_id", "offset", "grep", "regex", "limit")


class RecallInputError(ConfigError):
    """The input of a ``recall`` call is invalid; :attr:`field` names the offending
    field (``"input"`` for the input as a whole).

    Examples
    --------
    >>> try:
    ...     check_recall_input({"grep": ""})
    ... except RecallInputError as exc:
    ...     exc.field
    'grep'
    """

    def __init__(self, message: str, *, field: str) -> None:
        super().__init__(message)
        self.field = field


def recall_definition(name: str = RECALL_TOOL_NAME) -> dict[str, Any]:
    """The ``recall`` tool's definition (``name``, ``description``, ``input_schema``: the
    Anthropic shape, which ``set_tool_definitions`` and the providers take).

    Examples
    --------
    >>> d = recall_definition()
    >>> d["name"], sorted(d["input_schema"]["properties"])
    ('recall', ['grep', 'limit', 'memory_id', 'offset', 'regex'])
    """
    return {
        "name": name,
        "description": (
            "Earlier parts of this conversation may be shown as memories (summaries, each "
            "followed by the exact values it keeps). Nothing is lost: every message is "
            "stored. Give `grep` to find the stored messages holding a text (a "
            "case-insensitive substring, or a regular expression with `regex`: true); "
            "each match names the memory that covers it. Give `memory_id` to read the "
            "messages a memory stands for in full (`offset` continues a long answer)."
        ),
        "input_schema": {
            "type": "object",
            "properties": {
                "memory_id": {
                    "type": "string",
                    "description": "The id of a memory to expand, as a grep result names it.",
                },
                "offset": {
                    "type": "integer",
                    "minimum": 0,
                    "description": "With memory_id: the character to start from (0); a "
                    "truncated answer says where to continue.",
                },
                "grep": {
                    "type": "string",
                    "description": "Text to find in the stored messages (case-insensitive).",
                },
                "regex": {
                    "type": "boolean",
                    "description": "With grep: read it as a regular expression.",
                },
                "limit": {
                    "type": "integer",
                    "minimum": 1,
                    "maximum": _MAX_LIMIT,
                    "description": f"With grep: matching messages to show ({DEFAULT_GREP_LIMIT}).",
                },
            },
            "additionalProperties": False,
        },
    }


@dataclass(frozen=True)
class RecallTool:
    """The ``recall`` tool: its :attr:`definition` to declare to the model, and a
    handler to call with each ``tool_use`` input (calling the tool calls the handler).

    Examples
    --------
    >>> tool = RecallTool(recall_definition(), lambda tool_input: "found")
    >>> tool.name, tool({"grep": "x"})
    ('recall', 'found')
    """

    definition: dict[str, Any]
    handler: Callable[[Mapping[str, Any]], str]

    @property
    def name(self) -> str:
        """The tool's name, as the model calls it."""
        return str(self.definition["name"])

    def __call__(self, tool_input: Mapping[str, Any]) -> str:
        return self.handler(tool_input)


def _integer(value: Any, field: str, low: int, high: int | None = None) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise RecallInputError(f"{field} must be a whole number, got {value!r}", field=field)
    if value < low or (high is not None and value > high):
        span = f"from {low}" if high is None else f"from {low} to {high}"
        raise RecallInputError(f"{field} must be {span}, got {value}", field=field)
    return value


def check_recall_input(tool_input: Any) -> dict[str, Any]:
    """The input of a ``recall`` call, checked: exactly one of ``memory_id`` (with an
    optional ``offset``) and ``grep`` (with optional ``regex`` and ``limit``), with the
    defaults filled in.

    Raises
    ------
    RecallInputError
        Naming the offending field: an input that is not an object, an unknown field,
        neither or both of ``memory_id`` and ``grep`` (``"input"``), a field of the
        wrong type or out of range, an empty pattern or an invalid regular expression
        (``"grep"``).

    Examples
    --------
    >>> check_recall_input({"memory_id": "L1-3"})
    {'memory_id': 'L1-3', 'offset': 0}
    >>> check_recall_input({"grep": "HAT123"})
    {'grep': 'HAT123', 'regex': False, 'limit': 20}
    >>> try:
    ...     check_recall_input({"grep": "x", "limit": 0})
    ... except RecallInputError as exc:
    ...     exc.field, str(exc)
    ('limit', 'limit must be from 1 to 200, got 0')
    """
    if not isinstance(tool_input, Mapping):
        raise RecallInputError(
            f"the recall input must be an object, got {type(tool_input).__name__}", field="input"
        )
    for key in tool_input:
        if key not in _FIELDS:
            raise RecallInputError(
                f"unknown field {key!r}: recall takes {', '.join(_FIELDS)}", field=str(key)
            )
    has_memory, has_grep = "memory_id" in tool_input, "grep" in tool_input
    if has_memory == has_grep:
        said = "both" if has_memory else "neither"
        raise RecallInputError(
            f"give exactly one of memory_id and grep ({said} given)", field="input"
        )
    if has_memory:
        for key in ("regex", "limit"):
            if key in tool_input:
                raise RecallInputError(f"{key} goes with grep, not memory_id", field=key)
        memory_id = tool_input["memory_id"]
        if not isinstance(memory_id, str) or not memory_id.strip():
            raise RecallInputError(
                f"memory_id must be a memory's id, got {memory_id!r}", field="memory_id"
            )
        offset = _integer(tool_input.get("offset", 0), "offset", 0)
        return {"memory_id": memory_id.strip(), "offset": offset}
    if "offset" in tool_input:
        raise RecallInputError("offset goes with memory_id, not grep", field="offset")
    pattern = tool_input["grep"]
    if not isinstance(pattern, str) or not pattern:
        raise RecallInputError(f"grep must be a non-empty text, got {pattern!r}", field="grep")
    if len(pattern) > _MAX_PATTERN:
        raise RecallInputError(
            f"grep is {len(pattern)} characters long; at most {_MAX_PATTERN}", field="grep"
        )
    regex = tool_input.get("regex", False)
    if not isinstance(regex, bool):
        raise RecallInputError(f"regex must be true or false, got {regex!r}", field="regex")
    if regex:
        try:
            re.compile(pattern)
        except re.error as exc:
            raise RecallInputError(
                f"grep {pattern!r} is not a valid regular expression: {exc}", field="grep"
            ) from None
    limit = _integer(tool_input.get("limit", DEFAULT_GREP_LIMIT), "limit", 1, _MAX_LIMIT)
    return {"grep": pattern, "regex": regex, "limit": limit}


# ----------------------------------------------------------------- the answers
def _message_text(message_id: str, message: Message) -> str:
    return f"[{message_id}] {message.participant}: {message.text}"


def expand_memory(
    memory_id: str,
    level: int,
    covered: Sequence[str],
    messages: Mapping[str, Message],
    *,
    offset: int = 0,
    max_chars: int = DEFAULT_MAX_CHARS,
) -> str:
    """The messages memory ``memory_id`` stands for, in full, one per line
    (``[id] participant: text``), from character ``offset`` of that text.

    An answer that would pass ``max_chars`` is cut (at a line end when one is in its
    second half) and ends with a note giving the ``offset`` to continue from, so every
    character can be read back. Messages of ``covered`` no longer stored (removed) are
    counted in the heading.

    Parameters
    ----------
    memory_id : str
    level : int
        The memory's level.
    covered : sequence of str
        The ids of the messages it stands for, in order.
    messages : mapping of str to Message
        The stored messages by id.
    offset : int
        Where in the messages' text to start (0: the beginning).
    max_chars : int
        Characters of the answer at most, heading and note included (at least 300).

    Returns
    -------
    str

    Examples
    --------
    >>> from context_manager.messages import Message
    >>> stored = {"m1": Message.text_message("User", "Book HAT123."),
    ...           "m2": Message.text_message("Claude", "Booked.")}
    >>> print(expand_memory("L1-0", 1, ["m1", "m2"], stored))
    Memory L1-0 (level 1) stands for 2 messages, m1 to m2:
    [m1] User: Book HAT123.
    [m2] Claude: Booked.
    >>> print(expand_memory("L1-0", 1, ["m1", "m2"], stored, offset=24))
    Memory L1-0 (level 1) stands for 2 messages, m1 to m2; from character 24 of 44:
    [m2] Claude: Booked.
    """
    live = [i for i in covered if i in messages]
    gone = len(covered) - len(live)
    full = "\n".join(_message_text(i, messages[i]) for i in live)
    heading = f"Memory {memory_id} (level {level}) stands for {len(live)} messages"
    heading += f", {live[0]} to {live[-1]}" if live else ""
    if gone:
        heading += f" ({gone} more no longer stored)"
    if offset:
        heading += f"; from character {offset} of {len(full)}"
    if offset and offset >= len(full):
        return f"{heading}: nothing is left to show past character {len(full)}."
    room = max(300, max_chars) - len(heading) - 2
    if len(full) - offset <= room:
        return f"{heading}:\n{full[offset:]}"
    widest = 10 ** len(str(len(full))) - 1  # no number in the note is longer
    room -= len(_note(memory_id, widest, widest, widest, widest)) + 1
    end = offset + room
    line_end = full.rfind("\n", offset, end)
    if line_end > offset + room // 2:
        end = line_end
    rest = full[end:].lstrip("\n")
    resume = len(full) - len(rest)
    note = _note(memory_id, offset, end, len(full), resume)
    return f"{heading}:\n{full[offset:end]}\n{note}"


def _note(memory_id: str, start: int, end: int, total: int, resume: int) -> str:
    """The last line of a page of a memory's messages that does not reach their end."""
    return (
        f"[truncated: characters {start} to {end} of {total} shown; call recall with "
        f"memory_id={memory_id!r} and offset={resume} for the rest]"
    )


def _matcher(pattern: str, regex: bool) -> Callable[[str], re.Match[str] | None]:
    flags = re.IGNORECASE
    compiled = re.compile(pattern if regex else re.escape(pattern), flags)
    return compiled.search


def _excerpt(line: str, match: re.Match[str]) -> str:
    """``line`` clipped to :data:`_LINE_CHARS` around ``match``."""
    line = line.strip()
    if len(line) <= _LINE_CHARS:
        return line
    start = max(0, match.start() - _LINE_CHARS // 3)
    end = start + _LINE_CHARS
    return ("..." if start else "") + line[start:end] + ("..." if end < len(line) else "")


def grep_messages(
    pattern: str,
    stored: Sequence[tuple[str, Message]],
    *,
    regex: bool = False,
    limit: int = DEFAULT_GREP_LIMIT,
    memory_of: Mapping[str, str] | None = None,
    max_chars: int = DEFAULT_MAX_CHARS,
) -> str:
    """The stored messages whose text holds ``pattern`` (case-insensitive; a regular
    expression with ``regex``), oldest first: each as its id, participant and the memory
    that covers it (from ``memory_of``), then up to 3 matching lines, each clipped to 300
    characters around the match. At most ``limit`` messages and ``max_chars``
    characters; a note says what was left out.

    Examples
    --------
    >>> from context_manager.messages import Message
    >>> stored = [("m1", Message.text_message("User", "Move ZFA04Y please.")),
    ...           ("m2", Message.text_message("Claude", "Done.")),
    ...           ("m3", Message.text_message("Tool", "reservation zfa04y: updated"))]
    >>> print(grep_messages("ZFA04Y", stored, memory_of={"m1": "L1-0"}))
    2 of 3 stored messages match 'ZFA04Y':
    [m1] User (in memory L1-0):
      Move ZFA04Y please.
    [m3] Tool:
      reservation zfa04y: updated
    """
    search = _matcher(pattern, regex)
    memory_of = memory_of or {}
    hits = [(i, m) for i, m in stored if search(m.text)]
    head = f"{len(hits)} of {len(stored)} stored messages match {pattern!r}"
    if not hits:
        return head + "."
    lines = [head + ":"]
    budget = max(200, max_chars) - len(lines[0])
    shown = 0
    for message_id, message in hits[:limit]:
        block = [f"[{message_id}] {message.participant}"]
        if message_id in memory_of:
            block[0] += f" (in memory {memory_of[message_id]})"
        block[0] += ":"
        found = 0
        for line in message.text.splitlines():
            match = search(line)
            if match is None:
                continue
            found += 1
            if found > _LINES_PER_MESSAGE:
                block.append("  [more matching lines]")
                break
            block.append("  " + _excerpt(line, match))
        if found == 0:  # the match spans lines
            match = search(message.text)
            assert match is not None
            block.append("  " + _excerpt(message.text.replace("\n", " "), match))
        text = "\n".join(block)
        if len(text) + 1 > budget - 120:
            break
        lines.append(text)
        budget -= len(text) + 1
        shown += 1
    if shown < len(hits):
        lines.append(
            f"[truncated: {shown} of {len(hits)} matching messages shown; narrow grep"
            + (f" or raise limit (at most {_MAX_LIMIT})" if shown == limit else "")
            + ", or expand a memory with memory_id]"
        )
    return "\n".join(lines)


def answer_recall(
    request: Mapping[str, Any],
    stored: Sequence[StoredMessage],
    memories: MemoryReads | None,
    *,
    strategy: str,
    branch: str,
    max_chars: int = DEFAULT_MAX_CHARS,
) -> str:
    """The answer to one checked call of the ``recall`` tool (:func:`check_recall_input`)
    over the live messages ``stored`` and the strategy's ``memories`` (None when it keeps
    none): :func:`expand_memory` for ``memory_id``, :func:`grep_messages` for ``grep``.
    ``strategy`` and ``branch`` name where the call was made, for errors.

    Raises
    ------
    RecallInputError
        For a ``memory_id`` the strategy does not keep (or a strategy without memories).
    """
    summaries = memories.summaries if memories is not None else None
    leaves_of = memories.leaves_of if memories is not None else None
    if "memory_id" in request:
        memory_id = request["memory_id"]
        if summaries is None or leaves_of is None:
            raise RecallInputError(
                f"the {strategy} strategy keeps no memories, so there is no "
                f"memory {memory_id!r}: use grep to search the stored messages",
                field="memory_id",
            )
        memory = summaries.get(memory_id)
        if memory is None:
            raise RecallInputError(
                f"no memory with id {memory_id!r} on branch {branch!r}: "
                "grep names the memory that covers each match",
                field="memory_id",
            )
        covered = list(leaves_of(memory))
        wanted = set(covered)
        by_id = {m.id: m.message for m in stored if m.id in wanted}
        return expand_memory(
            memory_id,
            memory.level,
            covered,
            by_id,
            offset=request["offset"],
            max_chars=max_chars,
        )
    memory_of: dict[str, str] = {}
    for memory in (summaries or {}).values():
        if memory.level == 1:
            for message_id in memory.source_ids:
                memory_of.setdefault(message_id, memory.id)
    return grep_messages(
        request["grep"],
        [(m.id, m.message) for m in stored],
        regex=request["regex"],
        limit=request["limit"],
        memory_of=memory_of,
        max_chars=max_chars,
    )


def matching_memories(
    query: str, memories: Sequence[Any], *, limit: int = 20, include_merged: bool = True
) -> list[Any]:
    """The memories (records with ``content``, ``values``, ``level`` and ``parent_id``,
    oldest first) whose prose or exact values hold ``query``, compared case-insensitively
    as a substring (so a whole word matches too).

    Ranked: a memory with a value equal to the query first, then one with a value that
    holds it, then one whose prose holds it; in each, finer levels first, then the
    newest. Merged memories (with a parent) only with ``include_merged``.

    Examples
    --------
    >>> from context_manager.strategies.autobiographical.records import SummaryEntry
    >>> a = SummaryEntry("", "L1-0", 1, "Booked HAT123.", 4, ["m1"], "m1", "m1")
    >>> b = SummaryEntry("", "L1-1", 1, "Moved a flight.", 4, ["m2"], "m2", "m2",
    ...                  values=("HAT123",))
    >>> [m.id for m in matching_memories("hat123", [a, b])]
    ['L1-1', 'L1-0']
    """
    needle = query.casefold()
    ranked = []
    for order, memory in enumerate(memories):
        if memory.parent_id is not None and not include_merged:
            continue
        values = [v.casefold() for v in memory.values]
        if needle in values:
            score = 3
        elif any(needle in v for v in values):
            score = 2
        elif needle in memory.content.casefold():
            score = 1
        else:
            continue
        ranked.append(((-score, memory.level, -order), memory))
    ranked.sort(key=lambda kv: kv[0])
    return [m for _, m in ranked[:limit]]
