"""``PassthroughStrategy``: send the newest messages that fit, unchanged."""

from __future__ import annotations

from ..pairing import pair_groups
from .base import Entry, RequestBudget, Selection, Strategy, StrategyContext

__all__ = ["PassthroughStrategy"]


class PassthroughStrategy(Strategy):
    """The newest suffix of the conversation that fits the input budget.

    Nothing is summarised: older messages that do not fit are left out. The
    suffix is made of whole tool pairs (:func:`~context_manager.pairing.pair_groups`),
    each message sent as its :func:`~context_manager.pairing.send_form`, so what is
    priced is what is sent. Use it for short conversations and as the budget
    reference; for long ones use
    :class:`~context_manager.strategies.AutobiographicalStrategy`, which never
    drops history without a summary.
    """

    name = "passthrough"

    def select(
        self, ctx: StrategyContext, budget: RequestBudget, *, dry_run: bool = False
    ) -> Selection:
        stored = ctx.messages()
        forms, tokens = ctx.forms()
        room = budget.history_tokens
        total = 0
        start = len(stored)
        for first, end in reversed(pair_groups([f.tied for f in forms])):
            cost = sum(tokens[first:end])
            if total + cost > room:
                break
            total += cost
            start = first
        entries = [
            Entry(m.participant, m.content, (s.id,), None, m)
            for s, form in zip(stored[start:], forms[start:], strict=True)
            for m in form.messages
        ]
        stats = {"tokens": total, "messages": len(stored) - start, "dropped": start}
        return Selection(entries, stats, tokens=total)
