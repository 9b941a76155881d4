"""Reads of a manager that are computed from what it holds: the messages a query
selects (:func:`query`) and the summary of a dry compile (:func:`preview_of`)."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

from .arguments import check_flag, check_int, check_items, check_mapping, check_number, check_text
from .errors import ArgumentError
from .request import CompileResult, FoldedMemory, Preview, QueryResult
from .strategies.base import StoredMessage

__all__ = ["preview_of", "query"]

_MISSING = object()


def _at_path(value: Any, path: Sequence[str]) -> Any:
    """``value[path[0]][path[1]]...``, or a sentinel that equals nothing when absent."""
    for key in path:
        if not isinstance(value, dict) or key not in value:
            return _MISSING
        value = value[key]
    return value


def query(
    messages: Sequence[StoredMessage],
    *,
    participant: str | Sequence[str] | None = None,
    from_time: float | None = None,
    to_time: float | None = None,
    text: str | None = None,
    metadata: Mapping[str, Any] | None = None,
    limit: int | None = None,
    reverse: bool = False,
) -> QueryResult:
    """The ``messages`` that pass every filter given (see
    :meth:`ContextManager.query_messages <context_manager.ContextManager.query_messages>`,
    which calls this over the live messages).

    Raises
    ------
    ArgumentError
        For an argument of the wrong type or value, naming it.

    Examples
    --------
    >>> from context_manager import Message
    >>> rows = [StoredMessage(str(i), i, Message.text_message(p, t), 1)
    ...         for i, (p, t) in enumerate([("User", "Hi"), ("Claude", "hello"), ("User", "bye")])]
    >>> found = query(rows, participant="User", reverse=True, limit=1)
    >>> [m.message.text for m in found.messages], found.total_count
    (['bye'], 2)
    """
    if limit is not None:
        check_int(limit, "limit", low=0, hint="or None for no limit")
    for name, bound in (("from_time", from_time), ("to_time", to_time)):
        if bound is not None:
            check_number(bound, name)
    if from_time is not None and to_time is not None and from_time > to_time:
        raise ArgumentError(
            "from_time",
            from_time,
            f"a time not after to_time={to_time}",
            hint="give the earlier bound first",
        )
    if metadata is not None:
        paths_accepted = "a mapping of dotted paths (non-empty strs such as 'external.id')"
        if not all(k for k in check_mapping(metadata, "metadata", paths_accepted)):
            raise ArgumentError("metadata", metadata, paths_accepted)
    who: set[str] | None = None
    if isinstance(participant, str):
        who = {participant}
    elif participant is not None:
        who = set(check_items(participant, "participant", str, "a participant name (a str)"))
    needle = check_text(text, "text").casefold() if text is not None else None
    check_flag(reverse, "reverse")
    paths = [(k.split("."), v) for k, v in (metadata or {}).items()]
    timed = from_time is not None or to_time is not None
    found: list[StoredMessage] = []
    for stored in messages:
        m = stored.message
        if who is not None and m.participant not in who:
            continue
        if timed:
            if m.timestamp is None:
                continue
            if from_time is not None and m.timestamp < from_time:
                continue
            if to_time is not None and m.timestamp > to_time:
                continue
        if paths and not all(_at_path(m.metadata, p) == v for p, v in paths):
            continue
        if needle is not None and needle not in m.text.casefold():
            continue
        found.append(stored)
    if reverse:
        found.reverse()
    return QueryResult(found if limit is None else found[:limit], len(found))


def preview_of(
    result: CompileResult,
    budget: int,
    position: Mapping[str, int],
    summary_of: Callable[[str], Any],
) -> Preview:
    """The :class:`Preview` of a dry compile that fits: the raw messages it shows and
    the memories it folds, oldest first (``position`` orders the window's rows;
    ``summary_of`` finds a memory by id, for its level)."""
    stats: dict[str, Any] = dict(result.render_stats)
    raw: set[str] = set()
    spans: dict[str, set[str]] = {}
    for memory, ids in result.provenance:
        if memory is None:
            raw.update(ids)
        else:
            spans.setdefault(memory, set()).update(ids)
    folded = []
    for memory, covered in spans.items():
        order = sorted((i for i in covered if i in position), key=position.__getitem__)
        if not order:
            continue
        summary = summary_of(memory)
        level = getattr(summary, "level", None)
        folded.append(FoldedMemory(memory, level, order[0], order[-1], len(order)))
    folded.sort(key=lambda f: position[f.first])
    return Preview(True, budget, stats.get("tokens"), len(raw), tuple(folded), None, stats, result)
