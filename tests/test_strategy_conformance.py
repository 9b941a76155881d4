"""Both shipped strategies pass the strategy conformance suite of context_manager.testing,
and a strategy that breaks the contract fails it."""

from __future__ import annotations

import pytest
from small_agent import small_strategy

from context_manager.strategies import PassthroughStrategy
from context_manager.strategies.base import (
    Entry,
    RequestBudget,
    Selection,
    Strategy,
    StrategyContext,
)
from context_manager.testing import StrategyConformance


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
