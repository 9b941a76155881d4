"""Pins, locks, the strategy's memories and the recall tool."""

from __future__ import annotations

import functools
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

from ..arguments import (
    MAX_LEVEL,
    check_flag,
    check_id,
    check_int,
    check_number,
    check_pin_levels,
    check_sequence,
    check_text,
)
from ..compiler import MAX_CATCH_UP_RECHECKS as MAX_CATCH_UP_RECHECKS
from ..compiler import MAX_CATCH_UP_TICKS as MAX_CATCH_UP_TICKS
from ..operations import operation
from ..recall import (
    DEFAULT_MAX_CHARS,
    RECALL_TOOL_NAME,
    RecallTool,
    answer_recall,
    check_recall_input,
    matching_memories,
    recall_definition,
)

if TYPE_CHECKING:
    from ..manager import ContextManager

__all__ = ["MemoryFront"]


MIN_RECALL_CHARS = 300
"""The fewest characters a recall answer may be cut to (``max_chars``)."""


def _levels(levels: object) -> list[int]:
    """``levels`` of a summary search: ints from 1."""
    return [
        check_int(x, f"levels[{i}]", low=1, high=MAX_LEVEL)
        for i, x in enumerate(check_sequence(levels, "levels", "a sequence of summary levels"))
    ]


class MemoryFront:
    """The methods of :class:`~context_manager.ContextManager` for one job (see the
    module docstring); mixed into the manager, never used alone."""

    # ---------------------------------------------------- pins, locks, memory
    @operation(writes=True)
    def pin_range(
        self: ContextManager,
        first_id: str,
        last_id: str,
        *,
        name: str | None = None,
        level: int | None = None,
        max_level: int | None = None,
    ) -> str:
        """Protect messages ``first_id..last_id``; returns the pin id (``pin-N``).

        Without levels they render raw; ``level`` holds them at exactly L_k and
        ``max_level`` folds them no deeper than L_k.

        A pin on any shard of a body stored in parts covers the whole body: a range
        that starts or ends inside one is widened to its first or last shard.

        Raises
        ------
        ArgumentError
            For an id that is not a str, a ``name`` that is neither a str nor None, a
            level that is not an int in ``[0, MAX_LEVEL]`` (``2**20``), or a
            ``max_level`` below ``level``, naming it (an :class:`ArgumentTypeError` for
            the wrong type). Nothing is stored.
        UnknownMessageError
            When either id names no message of the window (a ``KeyError``).
        ConfigError
            When ``first_id`` comes after ``last_id``.
        """
        check_id(first_id, "first_id")
        check_id(last_id, "last_id")
        if name is not None:
            check_text(name, "name")
        check_pin_levels(level, max_level)
        first_id, last_id = self._body_span(first_id, last_id)
        pin: str = self._caps.require_pinning("pin_range").pin_range(
            self._ctx, first_id, last_id, name=name, level=level, max_level=max_level
        )
        return pin

    @operation(writes=True)
    def mark_document(self: ContextManager, message_id: str, *, name: str | None = None) -> str:
        """Pin one message raw as a document (a shard of a body stored in parts: the
        whole body).

        Raises
        ------
        ArgumentTypeError
            For a ``message_id`` that is not a str or a ``name`` that is neither a str
            nor None.
        UnknownMessageError
            When ``message_id`` names no message of the window (a ``KeyError``).
        """
        check_id(message_id, "message_id")
        if name is not None:
            check_text(name, "name")
        first_id, last_id = self._body_span(message_id, message_id)
        pin: str = self._caps.require_pinning("mark_document").pin_range(
            self._ctx, first_id, last_id, name=name, kind="document"
        )
        return pin

    def _body_span(self: ContextManager, first_id: str, last_id: str) -> tuple[str, str]:
        """``first_id`` and ``last_id`` widened to the first and last shard of the bodies
        stored in parts they fall in (ids of no live message are kept as given)."""
        first = self._live_body(first_id)
        last = self._live_body(last_id)
        return (first[0].id if first else first_id), (last[-1].id if last else last_id)

    @operation()
    def list_pins(self: ContextManager) -> list[Any]:
        """Current pins (empty for strategies without pins)."""
        pinning = self._caps.pinning
        return [] if pinning is None else list(pinning.pins)

    @operation(writes=True)
    def unpin(self: ContextManager, pin_id: str) -> bool:
        """Remove a pin; False when there is no such pin.

        Raises
        ------
        ArgumentTypeError
            For a ``pin_id`` that is not a str.
        """
        check_text(pin_id, "pin_id")
        removed: bool = self._caps.require_pinning("unpin").unpin(self._ctx, pin_id)
        return removed

    @operation(writes=True)
    def lock_message(self: ContextManager, message_id: str, locked: bool = True) -> None:
        """Keep a message at its current fold level (``locked=False`` releases it).

        Raises
        ------
        UnknownMessageError
            For an unknown id (a ``KeyError``).
        ArgumentTypeError
            For a ``message_id`` that is not a str or a ``locked`` that is not a bool.
        """
        check_flag(locked, "locked")
        self.get_message(message_id)
        self._caps.require_pinning("lock_message").lock(self._ctx, message_id, locked)

    @operation()
    def search_summaries(
        self: ContextManager,
        text: str | None = None,
        *,
        regex: str | None = None,
        levels: Sequence[int] | None = None,
        limit: int = 50,
        include_merged: bool = False,
    ) -> list[Any]:
        """``(summary, matches)`` pairs for ``text`` (case-insensitive) or ``regex``,
        most matches first; empty for strategies without summaries.

        Raises
        ------
        ArgumentError
            For a ``text`` or ``regex`` that is neither a str nor None, ``levels`` that
            are not ints from 1, a ``limit`` that is not an int from 1, or an
            ``include_merged`` that is not a bool, naming it.
        ConfigError
            For an invalid regular expression.
        """
        if text is not None:
            check_text(text, "text")
        if regex is not None:
            check_text(regex, "regex")
        if levels is not None:
            levels = _levels(levels)
        check_int(limit, "limit", low=1)
        check_flag(include_merged, "include_merged")
        memory = self._caps.memory
        if memory is None:
            return []
        return list(
            memory.search_summaries(
                text, regex=regex, levels=levels, limit=limit, include_merged=include_merged
            )
        )

    @operation()
    def get_summaries_in_range(
        self: ContextManager,
        *,
        from_time: float | None = None,
        to_time: float | None = None,
        level: int | None = None,
    ) -> list[Any]:
        """Summaries whose messages' timestamps meet ``[from_time, to_time]`` (open bounds).

        Raises
        ------
        ArgumentError
            For a time that is not a finite number, or a ``level`` that is not an int in
            ``[1, MAX_LEVEL]``, naming it.
        """
        for name, bound in (("from_time", from_time), ("to_time", to_time)):
            if bound is not None:
                check_number(bound, name)
        if level is not None:
            check_int(level, "level", low=1, high=MAX_LEVEL)
        memory = self._caps.memory
        if memory is None:
            return []
        return list(memory.summaries_in_range(self._ctx, from_time, to_time, level))

    @operation()
    def get_max_summary_level(self: ContextManager) -> int:
        """The level of the highest memory the strategy holds (0 when it holds none,
        or keeps no memories).

        Examples
        --------
        >>> from context_manager import CharsCounter, ContextManager
        >>> with ContextManager.open(path=":memory:", counter=CharsCounter()) as cm:
        ...     cm.get_max_summary_level()
        0
        """
        memory = self._caps.memory
        if memory is None:
            return 0
        return max((int(s.level) for s in memory.summaries.values()), default=0)

    @operation()
    def get_summary(self: ContextManager, summary_id: str) -> Any:
        """One summary, or None.

        Raises
        ------
        ArgumentTypeError
            For a ``summary_id`` that is not a str.
        """
        check_text(summary_id, "summary_id")
        memory = self._caps.memory
        return None if memory is None else memory.summaries.get(summary_id)

    # ------------------------------------------------------------------ recall
    @operation()
    def search_memories(
        self: ContextManager, query: str, *, limit: int = 20, include_merged: bool = True
    ) -> list[Any]:
        """The memories whose prose or exact values hold ``query``.

        The query is compared case-insensitively as a substring (a whole word matches
        too). A memory with a value equal to the query ranks first, then one with a
        value holding it, then one whose prose holds it; in each, finer levels first,
        then the newest (:func:`~context_manager.recall.matching_memories`). A strategy
        that keeps no memories (``PassthroughStrategy``) finds none: the result is empty.

        Parameters
        ----------
        query : str
            The text to look for (not empty).
        limit : int
            Memories to return at most.
        include_merged : bool
            Include memories that a merge has folded into a higher one.

        Returns
        -------
        list of SummaryEntry

        Raises
        ------
        ArgumentError
            For a query that is not a non-blank str, a limit that is not an int from 1,
            or an ``include_merged`` that is not a bool.

        Examples
        --------
        >>> from context_manager import CharsCounter, ContextManager, ExtractiveSummarizer
        >>> from context_manager.strategies.autobiographical import AutobiographicalStrategy
        >>> cm = ContextManager.open(
        ...     path=":memory:",
        ...     strategy=AutobiographicalStrategy(
        ...         compression_model="extractive", target_chunk_tokens=20,
        ...         min_chunk_messages=2, summary_target_tokens=12, memory_values_tokens=20,
        ...         recent_window_tokens=0, l1_holdback_chunks=0, min_chunk_chars_for_llm=0),
        ...     summarizer=ExtractiveSummarizer(),
        ...     counter=CharsCounter(),
        ... )
        >>> _ = cm.add_message("User", "Please cancel my booking, reservation ZFA04Y.")
        >>> _ = cm.add_message("Claude", "Cancelled. Your refund of $1,250 goes back to "
        ...                    "card 4421486 within 5 days.")
        >>> _ = cm.add_message("User", "Thanks.")
        >>> _ = cm.drain()
        >>> [(m.id, m.content, m.values) for m in cm.search_memories("$1,250")]
        [('L1-0', 'Please cancel my booking, reservation ZFA04Y.', ('$1,250', '5 days'))]
        >>> [m.id for m in cm.search_memories("zfa04y")], cm.search_memories("HAT123")
        (['L1-0'], [])
        >>> cm.close()
        """
        check_text(query, "query", blank=False)
        check_int(limit, "limit", low=1)
        check_flag(include_merged, "include_merged")
        memory = self._caps.memory
        summaries = memory.summaries if memory is not None else None
        if not summaries:
            return []
        return matching_memories(
            query.strip(), list(summaries.values()), limit=limit, include_merged=include_merged
        )

    def recall_tool(
        self: ContextManager, *, name: str = RECALL_TOOL_NAME, max_chars: int = DEFAULT_MAX_CHARS
    ) -> RecallTool:
        """The ``recall`` tool for the agent: declare its ``definition`` with the agent's
        tools, and answer each call of it with the tool (:meth:`handle_recall`).

        Parameters
        ----------
        name : str
            The tool's name.
        max_chars : int
            Characters each answer has at most.

        Returns
        -------
        RecallTool
            ``.definition`` (``name``, ``description``, ``input_schema``), ``.name``, and
            calling it with a ``tool_use`` input returns the answer's text.

        Examples
        --------
        >>> from context_manager import CharsCounter, ContextManager
        >>> cm = ContextManager.open(path=":memory:", counter=CharsCounter())
        >>> _ = cm.add_message("User", "The ticket is T-48213-C.")
        >>> tool = cm.recall_tool()
        >>> tool.name, tool.definition["input_schema"]["type"]
        ('recall', 'object')
        >>> print(tool({"grep": "t-48213"}))
        1 of 1 stored messages match 't-48213':
        [1] User:
          The ticket is T-48213-C.
        >>> cm.close()
        """
        check_text(name, "name", empty=False)
        check_int(max_chars, "max_chars", low=MIN_RECALL_CHARS)
        return RecallTool(
            recall_definition(name),
            functools.partial(self.handle_recall, max_chars=max_chars),
        )

    @operation()
    def handle_recall(
        self: ContextManager, tool_input: Mapping[str, Any], *, max_chars: int = DEFAULT_MAX_CHARS
    ) -> str:
        """Answer one call of the ``recall`` tool (:meth:`recall_tool`).

        With ``memory_id``: the messages the memory stands for, in full, one per line
        (``[id] participant: text``), from character ``offset``
        (:func:`~context_manager.recall.expand_memory`). With ``grep``: the stored
        messages of this branch (folded or not) that hold the text, case-insensitively
        (a regular expression with ``regex``), oldest first, each with the memory that
        covers it and its matching lines, at most ``limit``
        (:func:`~context_manager.recall.grep_messages`). Every answer has at most
        ``max_chars`` characters and says when it was cut and how to read on. ``grep``
        works under any strategy; ``memory_id`` needs one that keeps memories.

        Raises
        ------
        RecallInputError
            Naming the offending field (:func:`~context_manager.recall.check_recall_input`),
            an unknown memory id (``"memory_id"``), or ``memory_id`` under a strategy that
            keeps no memories. The host sends its message back as the tool's error result.
        ArgumentError
            For a ``max_chars`` that is not an int from 300.

        Examples
        --------
        >>> from context_manager import CharsCounter, ContextManager, ExtractiveSummarizer
        >>> from context_manager.recall import RecallInputError
        >>> from context_manager.strategies.autobiographical import AutobiographicalStrategy
        >>> cm = ContextManager.open(
        ...     path=":memory:",
        ...     strategy=AutobiographicalStrategy(
        ...         compression_model="extractive", target_chunk_tokens=20,
        ...         min_chunk_messages=2, summary_target_tokens=12, memory_values_tokens=20,
        ...         recent_window_tokens=0, l1_holdback_chunks=0, min_chunk_chars_for_llm=0),
        ...     summarizer=ExtractiveSummarizer(),
        ...     counter=CharsCounter(),
        ... )
        >>> _ = cm.add_message("User", "Please cancel my booking, reservation ZFA04Y.")
        >>> _ = cm.add_message("Claude", "Cancelled. Your refund of $1,250 goes back to "
        ...                    "card 4421486 within 5 days.")
        >>> _ = cm.add_message("User", "Thanks.")
        >>> _ = cm.drain()
        >>> print(cm.handle_recall({"grep": "4421486"}))
        1 of 3 stored messages match '4421486':
        [2] Claude (in memory L1-0):
          Cancelled. Your refund of $1,250 goes back to card 4421486 within 5 days.
        >>> print(cm.handle_recall({"memory_id": "L1-0"}))
        Memory L1-0 (level 1) stands for 2 messages, 1 to 2:
        [1] User: Please cancel my booking, reservation ZFA04Y.
        [2] Claude: Cancelled. Your refund of $1,250 goes back to card 4421486 within 5 days.
        >>> try:
        ...     cm.handle_recall({"memory_id": "L9-9"})
        ... except RecallInputError as exc:
        ...     exc.field
        'memory_id'
        >>> cm.close()
        """
        check_int(max_chars, "max_chars", low=MIN_RECALL_CHARS)
        return answer_recall(
            check_recall_input(tool_input),
            self._records.messages(),
            self._caps.memory,
            strategy=self._strategy.name,
            branch=self.current_branch,
            max_chars=max_chars,
        )
