"""``PassthroughStrategy``: send the newest messages that fit, unchanged."""

from __future__ import annotations

from .base import Entry, RequestBudget, Selection, Strategy, StrategyContext

__all__ = ["PassthroughStrategy"]


class PassthroughStrategy(Strategy):
    """The newest suffix of the conversation that fits the input budget.

    Nothing is summarised: older messages that do not fit are left out, and a
    suffix never starts with a tool result whose call was left out. Use it
    for short conversations and as the budget reference; for long ones use
    :class:`~context_manager.strategies.AutobiographicalStrategy`, which never
    drops history without a summary.
    """

    name = "passthrough"

    def select(
        self, ctx: StrategyContext, budget: RequestBudget, *, dry_run: bool = False
    ) -> Selection:
        stored = ctx.messages()
        total = 0
        start = len(stored)
        for i in range(len(stored) - 1, -1, -1):
            cost = ctx.counter.count_message(stored[i].message)
            if total + cost > budget.input_tokens:
                break
            total += cost
            start = i
        while start < len(stored) and stored[start].message.tool_result_ids:
            total -= ctx.counter.count_message(stored[start].message)
            start += 1
        entries = [Entry(s.message.participant, s.message.content, (s.id,)) for s in stored[start:]]
        return Selection(
            entries,
            {"tokens": total, "messages": len(entries), "dropped": start},
        )
