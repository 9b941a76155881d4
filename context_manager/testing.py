"""The strategy conformance suite: what every strategy must do under a manager.

Subclass :class:`StrategyConformance` in a pytest module and implement
:meth:`~StrategyConformance.make_strategy`; pytest collects the inherited tests::

    from context_manager.testing import StrategyConformance

    class TestMyStrategy(StrategyConformance):
        def make_strategy(self):
            return MyStrategy()

Each test drives a real :class:`~context_manager.ContextManager` (in memory, the
character counter, the extractive summariser) through seeded conversations with
tool calls, long tool results, edits, removals and ticks, and checks the strategy's
side of the contract (:mod:`context_manager.strategies.contract`):

- every compile sends a request within its budget with whole tool pairs, or refuses
  with an :class:`~context_manager.OverBudgetError` whose ``actual`` exceeds the
  budget; nothing else is raised;
- the newest message is in every request sent;
- a request shows only live messages, and never a removed one;
- a dry run changes nothing, and the same inputs give the same bytes;
- a reopened store compiles to the same request;
- ticks run out (no endless background work) and the declared capabilities work.

Known gaps are declared in ``conformance_overrides`` (test name -> reason) and run as
expected failures, never skipped silently.
"""

from __future__ import annotations

import random
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any, ClassVar

import pytest

from .errors import OverBudgetError
from .manager import ContextManager
from .messages import Message, TextBlock, ToolResultBlock, ToolUseBlock
from .pairing import tool_pair_problems
from .request import CompileResult
from .strategies.base import Strategy, StrategyProfile
from .strategies.contract import REQUIRED_HOOKS, capabilities_of
from .summarizer import ExtractiveSummarizer
from .tokens import CharsCounter, compact_json

__all__ = ["StrategyConformance", "conversation", "request_tokens"]

_COUNTER = CharsCounter()
_WORDS = [
    "parser",
    "config",
    "loader",
    "cache",
    "ticket",
    "refund",
    "flight",
    "seat",
    "invoice",
    "branch",
    "test",
    "fix",
]


def conversation(seed: int, turns: int = 40) -> list[tuple[str, Any]]:
    """A seeded conversation of ``turns`` turns, as ``(participant, content)`` pairs:
    user requests, agent replies, tool calls answered by results (some long).

    Examples
    --------
    >>> turns = conversation(0, 6)
    >>> len(turns) >= 6, turns[0][0]
    (True, 'User')
    """
    rng = random.Random(seed)

    def words(n: int) -> str:
        return " ".join(rng.choice(_WORDS) for _ in range(n))

    out: list[tuple[str, Any]] = [("User", "Task: " + words(rng.randint(5, 30)))]
    for k in range(turns - 1):
        roll = rng.random()
        if roll < 0.35:
            call = f"call{seed}x{k}"
            out.append(("Claude", [ToolUseBlock(id=call, name="bash", input={"cmd": words(4)})]))
            size = rng.choice((5, 20, 60, 400))
            out.append(("User", [ToolResultBlock(tool_use_id=call, content=words(size))]))
        elif roll < 0.7:
            out.append(("Claude", words(rng.randint(3, 60))))
        else:
            out.append(("User", words(rng.randint(3, 40))))
    return out


def request_tokens(result: CompileResult) -> int:
    """The tokens of what ``result`` sends, recounted from the result alone with the
    character counter: the system part as one message, the tools as compact JSON."""
    total = sum(_COUNTER.count_message(m) for m in result.messages)
    system = ([TextBlock(text=result.system_prompt)] if result.system_prompt else []) + list(
        result.system_injections
    )
    if system:
        total += _COUNTER.count_message(Message(participant="System", content=system))
    if result.tools:
        total += _COUNTER.count_text(compact_json(result.tools))
    return total


class StrategyConformance:
    """Behaviour every strategy must show under a manager."""

    budgets: ClassVar[tuple[int, ...]] = (150, 400, 1_200, 5_000)
    """The input budgets compiled at (character-counter tokens)."""
    conformance_overrides: ClassVar[dict[str, str]] = {}
    """Test name -> reason, for declared gaps (run as expected failures)."""

    def make_strategy(self) -> Strategy:
        """A fresh strategy to test (override)."""
        raise NotImplementedError("implement make_strategy() to return a fresh strategy")

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        for name, reason in cls.conformance_overrides.items():
            test = getattr(cls, name, None)
            if test is None:
                raise TypeError(f"conformance_overrides names {name!r}, which is not a test")
            setattr(cls, name, pytest.mark.xfail(reason=reason, strict=True)(test))

    # ------------------------------------------------------------------ helpers
    @contextmanager
    def manager(self, path: str | Path = ":memory:") -> Iterator[ContextManager]:
        """A manager over a fresh strategy, the character counter and the extractive
        summariser, with a system prompt and one tool."""
        with ContextManager.open(
            path=path,
            strategy=self.make_strategy(),
            counter=CharsCounter(),
            summarizer=ExtractiveSummarizer(),
        ) as cm:
            if not cm.get_messages():
                cm.set_system_prompt("You are a careful agent.")
                cm.set_tool_definitions([{"name": "bash", "description": "run a command"}])
            yield cm

    def fill(self, cm: ContextManager, seed: int, turns: int = 40) -> list[str]:
        """Add a seeded conversation, ticking now and then; returns the ids added."""
        ids = []
        for k, (participant, content) in enumerate(conversation(seed, turns)):
            ids.append(cm.add_message(participant, content))
            if k % 7 == 6:
                cm.tick()
        return ids

    def compile_checked(
        self, cm: ContextManager, budget: int, **kwargs: Any
    ) -> CompileResult | None:
        """Compile at ``budget`` (input tokens) and check the result: within the budget,
        pairs whole, the newest message in it, only live messages shown; None for a
        refusal whose ``actual`` exceeds the budget."""
        live = {s.id for s in cm.get_messages()}
        try:
            result = cm.compile(max_tokens=budget + 100, reserve_for_response=100, **kwargs)
        except OverBudgetError as exc:
            assert exc.actual > exc.budget == budget, (exc.actual, exc.budget)
            return None
        except Exception as exc:  # the manager refused what the strategy selected
            raise AssertionError(
                f"a compile at an input budget of {budget} raised {type(exc).__name__}: {exc}"
            ) from exc
        if kwargs.get("dry_run") and result.render_stats.get("fits") is False:
            return None
        sent = request_tokens(result)
        assert sent <= budget, f"sent {sent} tokens against an input budget of {budget}"
        assert tool_pair_problems(result.messages) == [], tool_pair_problems(result.messages)
        shown = {i for _, ids in result.provenance for i in ids}
        assert shown <= live, f"shows messages that are not live: {sorted(shown - live)}"
        newest = cm.get_messages()[-1].id if live else None
        if newest is not None:
            assert newest in shown, "the newest message is not in the request"
        return result

    # -------------------------------------------------------------------- tests
    def test_declares_its_contract(self) -> None:
        """It is a Strategy (or has every hook), names itself and describes its profile."""
        strategy = self.make_strategy()
        if not isinstance(strategy, Strategy):
            missing = [
                h
                for h in (*REQUIRED_HOOKS, "on_presented", "on_retracted")
                if not callable(getattr(strategy, h, None))
            ]
            assert not missing, f"hooks missing: {missing}"
        assert isinstance(strategy.name, str) and strategy.name
        caps = capabilities_of(strategy)
        assert isinstance(caps.profile, StrategyProfile)
        assert caps.profile.head_window_tokens >= 0

    @pytest.mark.parametrize("seed", range(6))
    def test_every_request_fits_or_is_refused(self, seed: int) -> None:
        """At every budget: a request within it with whole pairs, or a refusal saying by
        how much it is over; nothing else is raised."""
        with self.manager() as cm:
            self.fill(cm, seed)
            for budget in self.budgets:
                self.compile_checked(cm, budget, catch_up=False)
                self.compile_checked(cm, budget)

    @pytest.mark.parametrize("seed", range(6))
    def test_edits_and_removals_are_followed(self, seed: int) -> None:
        """After edits and removals, requests show the new text and never a removed
        message."""
        rng = random.Random(seed)
        with self.manager() as cm:
            ids = self.fill(cm, seed)
            texts = [i for i in ids[1:-1] if isinstance(cm.get_message(i).content[0], TextBlock)]
            edited = rng.choice(texts)
            cm.edit_message(edited, "edited: the plan changed")
            removed = rng.sample([i for i in texts if i != edited], k=min(3, len(texts) - 1))
            for message_id in removed:
                cm.remove_message(message_id)
            cm.drain()
            for budget in self.budgets:
                result = self.compile_checked(cm, budget)
                if result is None:
                    continue
                shown = {i for _, ids_ in result.provenance for i in ids_}
                assert not shown & set(removed), "a removed message is shown"
                for message, (memory, ids_) in zip(result.messages, result.provenance, strict=True):
                    if memory is None and ids_ == (edited,):
                        assert message.text == "edited: the plan changed"

    @pytest.mark.parametrize("seed", range(3))
    def test_a_dry_run_changes_nothing(self, seed: int) -> None:
        """A dry run stores nothing and shows what the compile would send."""
        with self.manager() as cm:
            self.fill(cm, seed)
            for budget in self.budgets:
                before = cm.store.sequence
                dry = self.compile_checked(cm, budget, dry_run=True)
                assert cm.store.sequence == before, "a dry run wrote to the store"
                if dry is not None:
                    live = self.compile_checked(cm, budget, catch_up=False)
                    assert live is not None and live.messages == dry.messages

    @pytest.mark.parametrize("seed", range(3))
    def test_the_same_inputs_give_the_same_bytes(self, seed: int) -> None:
        """Two managers given the same calls send the same requests."""
        results = []
        for _ in range(2):
            with self.manager() as cm:
                self.fill(cm, seed)
                cm.drain()
                sent = [self.compile_checked(cm, b) for b in self.budgets]
                results.append([None if r is None else r.to_anthropic() for r in sent])
        assert results[0] == results[1]

    @pytest.mark.parametrize("seed", range(3))
    def test_a_reopened_store_sends_the_same_request(self, seed: int, tmp_path: Path) -> None:
        """The strategy's state is kept in the store: a fresh strategy over the reopened
        store sends what the first one sent."""
        path = tmp_path / "agent.db"
        with self.manager(path) as cm:
            self.fill(cm, seed)
            cm.drain()
            first = [self.compile_checked(cm, b) for b in self.budgets]
        with self.manager(path) as cm:
            again = [self.compile_checked(cm, b) for b in self.budgets]
        assert [None if r is None else r.messages for r in first] == [
            None if r is None else r.messages for r in again
        ]

    def test_ticks_run_out(self) -> None:
        """Background work ends: after at most four ticks per message, a tick finds
        nothing to do and the strategy says it is ready."""
        with self.manager() as cm:
            ids = self.fill(cm, 0, 60)
            for _ in range(4 * len(ids) + 1):
                if not cm.tick():
                    break
            else:
                raise AssertionError(f"ticks still find work after {4 * len(ids)} ticks")
            assert cm.is_ready()
            assert cm.pending_work() == []

    def test_declared_capabilities_work(self) -> None:
        """A pinning strategy lists and removes its pins; a memory-reading one finds its
        memories by id; without a capability the manager's call says so or answers
        empty."""
        with self.manager() as cm:
            ids = self.fill(cm, 1)
            cm.drain()
            caps = capabilities_of(cm.strategy)
            if caps.pinning is not None:
                pin = cm.pin_range(ids[2], ids[4])
                assert pin in [p.id for p in cm.list_pins()]
                assert cm.unpin(pin) and pin not in [p.id for p in cm.list_pins()]
            else:
                assert cm.list_pins() == []
            if caps.memory is not None:
                for memory_id in list(caps.memory.summaries)[:3]:
                    assert cm.get_summary(memory_id) is not None
            else:
                assert cm.search_summaries("parser") == []
