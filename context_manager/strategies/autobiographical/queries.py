"""Queries over the memories: by time range and by text."""

from __future__ import annotations

import re
from collections.abc import Sequence

from ...errors import ConfigError
from ..base import StrategyContext
from .records import SummaryEntry
from .state import State

__all__ = ["search_summaries", "summaries_in_range"]


def summaries_in_range(
    st: State,
    ctx: StrategyContext,
    from_time: float | None = None,
    to_time: float | None = None,
    level: int | None = None,
) -> list[SummaryEntry]:
    """Summaries whose span (timestamps of its first and last message) meets the range,
    oldest first."""
    when = {s.id: s.message.timestamp for s in ctx.messages()}
    out = []
    for s in st.summaries.values():
        start, end = when.get(s.first), when.get(s.last)
        if start is None or end is None or (level is not None and s.level != level):
            continue
        if (from_time is None or end >= from_time) and (to_time is None or start <= to_time):
            out.append((start, s))
    return [s for _, s in sorted(out, key=lambda x: (x[0], x[1].level))]


def search_summaries(
    st: State,
    text: str | None = None,
    *,
    regex: str | None = None,
    levels: Sequence[int] | None = None,
    limit: int = 50,
    include_merged: bool = False,
) -> list[tuple[SummaryEntry, int]]:
    """Summaries with their match counts, most matches first (then newest).

    ``regex`` (counted with ``re.finditer``) wins over ``text`` (a case-insensitive
    substring count); with neither, every summary matches once. Merged summaries
    (those with a parent) only with ``include_merged``.

    Raises
    ------
    ConfigError
        For an invalid regular expression or a non-positive limit.
    """
    if limit <= 0:
        raise ConfigError(f"limit must be positive, got {limit}")
    try:
        pattern = re.compile(regex) if regex is not None else None
    except re.error as exc:
        raise ConfigError(f"invalid regex {regex!r}: {exc}") from None
    out = []
    for s in st.summaries.values():
        if levels is not None and s.level not in levels:
            continue
        if s.parent_id is not None and not include_merged:
            continue
        if pattern is not None:
            matches = sum(1 for _ in pattern.finditer(s.content))
        elif text:
            matches = s.content.lower().count(text.lower())
        else:
            matches = 1
        if matches:
            out.append((s, matches))
    out.sort(key=lambda x: (-x[1], -x[0].created))
    return out[:limit]
