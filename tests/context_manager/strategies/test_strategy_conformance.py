"""Both shipped strategies pass the strategy conformance suite of context_manager.testing,
and a strategy that breaks the contract fails it."""

from __future__ import annotations

import pytest

from context_manager.strategies import PassthroughStrategy
from context_manager.strategies.base import (
    Entry,
    RequestBudget,
    Selection,
    Strategy,
    StrategyContext,
)
from context_manager.testing import StrategyConformance
from tests.support.small_agent import small_strategy


class TestPassthrough(StrategyConformance):
    def make_strategy(self) -> Strategy:
        return PassthroughStrategy()


class TestAutobiographical(StrategyConformance):
    def make_strategy(self) -> Strategy:
        return small_strategy()


class SendsEverything(Strategy):
    """Broken: every stored message, whatever the budget."""

    name = "sends-everything"

    def select(
        self, ctx: StrategyContext, budget: RequestBudget, *, dry_run: bool = False
    ) -> Selection:
        return Selection(
            [
                Entry(s.message.participant, s.message.content, (s.id,), message=s.message)
                for s in ctx.messages()
            ]
        )


class _Broken(StrategyConformance):
    __test__ = False  # run below, expecting failures

    def make_strategy(self) -> Strategy:
        return SendsEverything()


def test_a_strategy_that_ignores_the_budget_fails_the_suite() -> None:
    with pytest.raises(AssertionError, match="raised ContextManagerError: SendsEverything"):
        _Broken().test_every_request_fits_or_is_refused(0)


def test_a_strategy_that_ignores_the_budget_still_declares_its_contract() -> None:
    _Broken().test_declares_its_contract()  # the declaration alone is not the contract


class Graced(Strategy):
    """Every stored message, declaring ``grace`` tokens of grace (in the typed field, or
    in the stats as strategies stated it before the field)."""

    name = "graced"

    def __init__(self, grace: int, *, in_stats: bool = False) -> None:
        self.grace, self.in_stats = grace, in_stats

    def select(
        self, ctx: StrategyContext, budget: RequestBudget, *, dry_run: bool = False
    ) -> Selection:
        entries = [
            Entry(s.message.participant, s.message.content, (s.id,), message=s.message)
            for s in ctx.messages()
        ]
        if self.in_stats:
            return Selection(entries, {"grace_tokens": self.grace})
        return Selection(entries, grace_tokens=self.grace)


@pytest.mark.parametrize("in_stats", [False, True])
def test_the_manager_holds_a_request_to_the_budget_plus_the_strategy_s_grace(
    in_stats: bool,
) -> None:
    from context_manager import CharsCounter, ContextManager, ContextManagerError

    for grace, fits in ((40, True), (10, False)):
        strategy = Graced(grace, in_stats=in_stats)
        with ContextManager.open(path=":memory:", strategy=strategy, counter=CharsCounter()) as cm:
            cm.add_message("User", "x" * 400)  # about 100 tokens
            if fits:
                sent = cm.compile(max_tokens=100, reserve_for_response=25)
                assert 75 < sent.render_stats["tokens"] <= 75 + grace
            else:
                with pytest.raises(ContextManagerError, match=r"Graced\.select returned"):
                    cm.compile(max_tokens=100, reserve_for_response=25)
