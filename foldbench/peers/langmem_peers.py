"""LangMem peer: ``langmem.short_term.summarize_messages`` with a running summary.

Needs the ``bench`` extra (``langmem``, which brings ``langchain-core`` and
``langgraph``); every import of those packages happens inside the functions and
classes here, so importing this module costs nothing without them.

How the peer is driven
----------------------
:class:`SummarizeMessagesPolicy` calls ``summarize_messages`` before every model
call, as LangMem's documentation does in its ``call_model`` node: the whole history
as LangChain messages (each with an id that stays the same from call to call), the
``running_summary`` the previous call returned, and the exact counter through the
chat model's ``get_num_tokens_from_messages`` (the counter LangMem's documentation
recommends for accurate counts). The messages it returns are what is sent; the
running summary it returns is kept for the next call. The summary model is the
deterministic extractive chat model of the LangChain peers
(:func:`~foldbench.peers.langchain_peers.extractive_chat_model`), metered; it is
prompted with LangMem's own default prompts.
"""

from __future__ import annotations

import warnings
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from context_manager.integrations.langchain_messages import from_langchain, to_langchain
from context_manager.messages import Message
from context_manager.summarizer import Summarizer
from context_manager.tokens import TokenCounter

from .base import (
    HistoryFeed,
    MeteredSummarizer,
    PolicyRequest,
    audit,
    default_counter,
    run_guarded,
    split_system,
    system_text,
)
from .langchain_peers import extractive_chat_model
from .settings import PeerSettings, Setting

if TYPE_CHECKING:
    from langchain_core.language_models import BaseChatModel
    from langchain_core.messages import BaseMessage

__all__ = ["SummarizeMessagesPolicy"]


def _summarize_messages() -> Any:
    """``langmem.short_term.summarize_messages``, imported without LangGraph's notice.

    Importing ``langmem`` imports ``trustcall``, which still takes ``Send`` from
    ``langgraph.constants``; LangGraph 1.x warns about that import (a deprecation
    notice about a dependency, not about anything this peer calls).
    """
    from langgraph.warnings import LangGraphDeprecatedSinceV10

    with warnings.catch_warnings():
        warnings.simplefilter("ignore", LangGraphDeprecatedSinceV10)
        from langmem.short_term import summarize_messages  # type: ignore[import-untyped]

    return summarize_messages


class SummarizeMessagesPolicy:
    """LangMem's ``summarize_messages``: older messages folded into a running summary.

    Once the messages not yet summarised reach ``max_tokens_before_summary`` (and
    what would remain fits), LangMem summarises them (extending the previous
    summary), and sends the system prompt, a system message ``"Summary of the
    conversation so far: ..."`` and the messages after the summarised ones. Between
    summaries it sends the running summary and every newer message; ``max_tokens``
    is enforced only after summarising, so a request can be over the budget, and it
    is sent so (the audit records it).

    The three sizes are set as a user sets them for a window of ``budget`` tokens
    (:meth:`options`): ``max_tokens`` the window, ``max_summary_tokens`` a small
    fraction of it, and ``max_tokens_before_summary`` the window less the summary
    and the system prompt, so the messages sent between summaries leave room for
    both (at LangMem's default, ``max_tokens``, they fill the window alone).

    Parameters
    ----------
    agent : str
        The participant whose turns are the assistant side.
    counter : TokenCounter, optional
        Exact counter (``cl100k_base`` by default), LangMem's ``token_counter``.
    summarizer : Summarizer, optional
        Behind the fake chat model; :class:`ExtractiveSummarizer` by default.
    summary_fraction : float
        ``max_summary_tokens`` as a fraction of the budget (a tenth: 400 tokens at 4k,
        the summary length the LangChain summarising peer asks for there). The summary
        model is asked for that many tokens and bound to them (its answers cut there),
        as LangMem's documentation binds ``max_tokens`` on it: LangMem itself only
        reserves that room.

    Notes
    -----
    The leading system messages become one ``SystemMessage`` at the front, which
    LangMem keeps out of the summary and counts against ``max_tokens``.
    """

    name = "langmem-summarize-messages"

    def __init__(
        self,
        *,
        agent: str = "Claude",
        counter: TokenCounter | None = None,
        summarizer: Summarizer | None = None,
        summary_fraction: float = 0.1,
    ) -> None:
        if not 0 < summary_fraction < 1:
            raise ValueError(f"summary_fraction must be in (0, 1), got {summary_fraction}")
        self.agent = agent
        self.counter = default_counter(counter)
        self.summarizer = summarizer
        self.summary_fraction = summary_fraction
        self._feed = HistoryFeed()
        self._messages: list[BaseMessage] = []
        self._running: Any = None  # langmem.short_term.RunningSummary
        self._models: dict[int, tuple[BaseChatModel, MeteredSummarizer]] = {}

    @property
    def running_summary(self) -> Any:
        """The ``RunningSummary`` LangMem returned last (None before any summary)."""
        return self._running

    def options(self, budget: int, system_tokens: int = 0) -> dict[str, int]:
        """The sizes passed to ``summarize_messages`` for a window of ``budget`` tokens.

        Parameters
        ----------
        budget : int
            The call's input budget.
        system_tokens : int
            The system prompt's tokens (LangMem counts it against ``max_tokens``).

        Returns
        -------
        dict
            ``max_tokens``, ``max_summary_tokens`` and ``max_tokens_before_summary``.

        Examples
        --------
        >>> SummarizeMessagesPolicy().options(4000, system_tokens=100)
        {'max_tokens': 4000, 'max_summary_tokens': 400, 'max_tokens_before_summary': 3500}
        """
        summary = max(1, min(budget - 1, int(budget * self.summary_fraction)))
        return {
            "max_tokens": budget,
            "max_summary_tokens": summary,
            "max_tokens_before_summary": max(1, budget - system_tokens - summary),
        }

    def settings(self, budget: int, *, system_tokens: int = 0) -> PeerSettings:
        """What this policy passes to ``summarize_messages`` at ``budget``, and why.

        Parameters
        ----------
        budget : int
            The call's input budget.
        system_tokens : int
            The system prompt's tokens (the trigger leaves room for it).

        Returns
        -------
        PeerSettings

        Examples
        --------
        >>> SummarizeMessagesPolicy().settings(8000).values["max_summary_tokens"]
        800
        """
        sizes = self.options(budget, system_tokens)
        items = {
            "max_tokens": Setting(
                sizes["max_tokens"],
                "the window: LangMem enforces it on what it returns after summarising, "
                "the summary and the system prompt counted in",
            ),
            "max_summary_tokens": Setting(
                sizes["max_summary_tokens"],
                "a tenth of the window, the room LangMem keeps for the running summary "
                "(its default is 256); half the window, as set before, is not a summary "
                "a user reserves room for: it leaves the messages half the window",
            ),
            "max_tokens_before_summary": Setting(
                sizes["max_tokens_before_summary"],
                "the window less the summary and the system prompt (shown for "
                f"{system_tokens} system tokens): LangMem sends the messages not yet "
                "summarised beside both until they reach this; at its default "
                "(max_tokens), as set before, they fill the window alone and the request "
                "goes over it by the summary. LangMem then cuts at the first "
                "message past it where what remains fits, which can be the newest one "
                "(library behaviour: that request lacks the newest turn)",
            ),
            "token_counter": Setting(
                "exact (cl100k_base), via model.get_num_tokens_from_messages",
                "the counter LangMem's documentation recommends for accurate counts",
            ),
            "model": Setting(
                f"extractive, bound to max_tokens={sizes['max_summary_tokens']}",
                "a deterministic stand-in for the summary LLM, with LangMem's default "
                "prompts; bound to max_summary_tokens as LangMem's documentation binds "
                "it (LangMem only reserves that room: an unbound summary overruns it)",
            ),
            "running_summary": Setting(
                "carried between calls",
                "as LangMem's call_model example keeps it in the graph state",
            ),
        }
        return PeerSettings.of(self.name, "langmem", "langmem", items)

    def _model_for(self, summary_tokens: int) -> tuple[BaseChatModel, MeteredSummarizer]:
        """The summary model asked for ``summary_tokens`` and bound to them (its answers
        cut there, as ``model.bind(max_tokens=...)`` in LangMem's documentation), and
        its meter."""
        if summary_tokens not in self._models:
            self._models[summary_tokens] = extractive_chat_model(
                self.summarizer,
                self.counter,
                agent=self.agent,
                target_tokens=summary_tokens,
                max_tokens=summary_tokens,
            )
        return self._models[summary_tokens]

    def request(self, history: Sequence[Message], budget: int) -> PolicyRequest:
        """Convert the new messages, call ``summarize_messages``, send what it returns."""
        from langchain_core.messages import SystemMessage

        summarize_messages = _summarize_messages()
        system, _ = split_system(history)
        new, restart = self._feed.new_messages(history)
        if restart:
            self._messages, self._running = [], None
        offset = len(history) - len(new)
        for k, m in enumerate(new):
            if offset + k >= len(system):  # the system prompt is added on every call
                self._messages += to_langchain([m], agent=self.agent, start=offset + k)
        head: list[BaseMessage] = (
            [SystemMessage(content=system_text(system), id="cm-system")] if system else []
        )
        model, meter = self._model_for(self.options(budget)["max_summary_tokens"])
        sizes = self.options(budget, model.get_num_tokens_from_messages(head) if head else 0)

        def call() -> Any:
            with warnings.catch_warnings():
                # LangMem warns when it cannot trim what it summarises to fit, then
                # summarises it whole: the fallback is the behaviour, the notice noise.
                warnings.simplefilter("ignore", RuntimeWarning)
                return summarize_messages(
                    head + self._messages,
                    running_summary=self._running,
                    model=model,
                    token_counter=model.get_num_tokens_from_messages,
                    **sizes,
                )

        result, error = run_guarded(call)
        if error or result is None:
            return audit([], budget, self.counter, meter, error=error)
        if result.running_summary is not None:
            self._running = result.running_summary
        return audit(from_langchain(result.messages, agent=self.agent), budget, self.counter, meter)
