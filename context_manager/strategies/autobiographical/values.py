"""The exact values each memory is written with (:mod:`context_manager.exact_values`).

An L1 keeps the best values of its chunk's messages, a merge the best of its children's
values re-ranked over the messages it covers; each within the allowance of its level
(:meth:`~.config.AutobiographicalConfig.values_tokens`) and a quarter of what the
messages it covers cost raw, as the strategy's counter counts the line that shows them.
"""

from __future__ import annotations

from collections.abc import Sequence

from ...exact_values import cap_values, extract_values, merge_values
from ...messages import Message
from ..base import StrategyContext
from .records import SummaryEntry
from .state import State

__all__ = ["RAW_SHARE", "l1_values", "parent_values"]

RAW_SHARE = 4
"""A memory's values cost at most 1 / this of the messages it covers, raw."""


def l1_values(
    st: State, ctx: StrategyContext, messages: Sequence[Message], prose: str
) -> tuple[str, ...]:
    """The values an L1 with text ``prose`` over ``messages`` keeps (none when the
    allowance is 0)."""
    allowance = _within(ctx, st.config.values_tokens(1), messages)
    if allowance <= 0:
        return ()
    ranked = extract_values(messages, prose=prose)
    return cap_values(ranked, allowance, ctx.counter.count_text)


def _within(ctx: StrategyContext, allowance: int, messages: Sequence[Message]) -> int:
    """``allowance``, at most a quarter of what ``messages`` cost raw: the values of a
    memory never make it dear beside what it stands for."""
    if allowance <= 0:
        return 0
    raw = sum(ctx.counter.count_message(m) for m in messages)
    return min(allowance, raw // RAW_SHARE)


def parent_values(
    st: State, ctx: StrategyContext, sources: Sequence[SummaryEntry], prose: str
) -> tuple[str, ...]:
    """The values of the memory with text ``prose`` merged from ``sources``: the union of
    theirs, re-ranked over the live messages they cover, within the allowance of the
    merge's level. (Their line costs no more than their children's lines together, each
    within a quarter of its messages raw, so the merge is within a quarter of its own.)"""
    allowance = st.config.values_tokens(sources[0].level + 1)
    if allowance <= 0 or not any(s.values for s in sources):
        return ()
    stored = ctx.messages()
    index = st.positions(ctx, stored)
    covered = [stored[index[i]].message for s in sources for i in st.leaves_of(s) if i in index]
    ranked = merge_values([s.values for s in sources], covered, prose=prose)
    return cap_values(ranked, allowance, ctx.counter.count_text)
