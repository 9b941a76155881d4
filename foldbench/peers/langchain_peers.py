"""LangChain peers: ``trim_messages``, ``SummarizationMiddleware``, ``ClearToolUsesEdit``.

Needs the ``bench`` extra (``langchain``, ``langchain-core``); every import of
those packages happens inside the functions and classes here, so importing
this module costs nothing without them.

How each peer is driven
-----------------------
* :class:`TrimMessagesPolicy` calls ``trim_messages`` on the whole history
  (strategy ``"last"``, ``start_on="human"``, ``include_system=True``) with
  the exact counter as ``token_counter``. Stateless, like the function.
* :class:`SummarizationMiddlewarePolicy` calls the middleware's
  ``before_model`` hook directly with an agent state dict, exactly as
  ``create_agent`` does before each model call, and applies the returned
  update (``RemoveMessage(REMOVE_ALL_MESSAGES)`` then the new messages) to
  the state it keeps. New transcript messages are appended to that state
  between calls, so summaries persist as in a running agent. Calling the hook
  directly avoids running a LangGraph agent loop whose model turns would have
  to be faked; the hook is the whole policy. The summary model is
  :class:`ExtractiveChatModel`, prompted with the middleware's own default
  prompt.
* :class:`ClearToolUsesPolicy` calls ``ContextEditingMiddleware.wrap_model_call``
  with a ``ModelRequest`` built from the history and a handler that captures
  the edited request. Token counting uses ``token_count_method="model"``, so
  the middleware asks :class:`ExtractiveChatModel` whose
  ``get_num_tokens_from_messages`` is the exact counter. The middleware edits
  the request, not the state, so this policy is stateless.

The system prompt (leading ``System`` messages) is kept outside the managed
history, as ``create_agent`` keeps its ``system_prompt``.

Messages go to LangChain and back through
:mod:`context_manager.integrations.langchain_messages`, the conversion the library's
LangChain middleware uses.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence
from typing import TYPE_CHECKING, Any

from context_manager.integrations.langchain_messages import from_langchain, to_langchain
from context_manager.messages import Message
from context_manager.summarizer import CompletionRequest, ExtractiveSummarizer, Summarizer
from context_manager.tokens import TokenCounter

from .base import (
    HistoryFeed,
    MeteredSummarizer,
    PolicyRequest,
    audit,
    default_counter,
    request_tokens,
    run_guarded,
    split_system,
    system_text,
)
from .settings import PeerSettings, Setting

if TYPE_CHECKING:
    from langchain_core.language_models import BaseChatModel
    from langchain_core.messages import BaseMessage

__all__ = [
    "ClearToolUsesPolicy",
    "SummarizationMiddlewarePolicy",
    "TrimMessagesPolicy",
    "extractive_chat_model",
]


class _LangChainCounter:
    """The exact counter over LangChain messages (each converted on its own)."""

    def __init__(self, counter: TokenCounter, agent: str) -> None:
        self.counter = counter
        self.agent = agent

    def __call__(self, messages: Iterable[Any]) -> int:
        return sum(
            request_tokens(from_langchain([m], agent=self.agent), self.counter) for m in messages
        )


# ------------------------------------------------------------------ fake chat model
_XML_TAG = re.compile(r"</?[A-Za-z_][^<>]*>")


def _summary_source(messages: list[Message]) -> list[Message]:
    """What a summary request asks to summarise.

    A prompt that wraps the transcript in ``<messages>...</messages>`` (the
    documented contract of LangChain's summary prompt) is reduced to that
    transcript with its XML tags removed; anything else is summarised whole.
    """
    if messages:
        text = messages[-1].text
        start, end = text.rfind("<messages>"), text.rfind("</messages>")
        if 0 <= start < end:
            inner = text[start + len("<messages>") : end]
            inner = _XML_TAG.sub("\n", inner).replace("Messages to summarize:", "")
            return [Message.text_message("User", inner)]
    return messages


def _cut_to_tokens(text: str, limit: int, counter: TokenCounter) -> str:
    """The longest prefix of ``text`` of at most ``limit`` tokens (by ``counter``).

    >>> from context_manager.tokens import TiktokenCounter
    >>> _cut_to_tokens("one two three four", 2, TiktokenCounter())
    'one two'
    """
    if counter.count_text(text) <= limit:
        return text
    low, high = 0, len(text)  # the prefix of length low fits, that of high does not
    while high - low > 1:
        middle = (low + high) // 2
        if counter.count_text(text[:middle]) <= limit:
            low = middle
        else:
            high = middle
    return text[:low]


def extractive_chat_model(
    summarizer: Summarizer | None = None,
    counter: TokenCounter | None = None,
    *,
    agent: str = "Claude",
    target_tokens: int = 400,
    max_tokens: int | None = None,
) -> tuple[BaseChatModel, MeteredSummarizer]:
    """A LangChain chat model whose answers come from a (metered) summariser.

    Parameters
    ----------
    summarizer : Summarizer, optional
        Writes the answers; an :class:`ExtractiveSummarizer` by default.
    counter : TokenCounter, optional
        Exact counter for the meter and for ``get_num_tokens_from_messages``.
    agent : str
        Participant of AI messages when converting the prompt.
    target_tokens : int
        Length asked of the summariser.
    max_tokens : int, optional
        Answers are cut to at most this many tokens (by the exact counter), as a
        provider cuts an answer at the ``max_tokens`` a model is bound to
        (``model.bind(max_tokens=...)``); None: not cut.

    Returns
    -------
    model : BaseChatModel
        The chat model (a ``BaseChatModel`` subclass).
    meter : MeteredSummarizer
        Counts its calls and tokens.

    Examples
    --------
    >>> from langchain_core.messages import HumanMessage
    >>> model, meter = extractive_chat_model(target_tokens=50, max_tokens=5)
    >>> answer = model.invoke([HumanMessage("The parser is fixed. The cache is warm.")])
    >>> meter.counter.count_text(answer.text) <= 5, meter.calls
    (True, 1)
    """
    from langchain_core.language_models import BaseChatModel
    from langchain_core.messages import AIMessage
    from langchain_core.outputs import ChatGeneration, ChatResult

    exact = default_counter(counter)
    meter = MeteredSummarizer(summarizer or ExtractiveSummarizer(), exact)

    class ExtractiveChatModel(BaseChatModel):
        """Answers every prompt with a deterministic extractive summary of it."""

        @property
        def _llm_type(self) -> str:
            return "extractive"

        def _generate(
            self,
            messages: list[BaseMessage],
            stop: list[str] | None = None,
            run_manager: Any = None,
            **kwargs: Any,
        ) -> ChatResult:
            ours = from_langchain(messages, agent=agent)
            request = CompletionRequest(
                model="extractive",
                messages=tuple(_summary_source(ours)),
                target_tokens=target_tokens,
                agent=agent,
            )
            text = meter.summarizer.complete(request).text
            if max_tokens is not None:
                text = _cut_to_tokens(text, max_tokens, exact)
            meter.record(ours, text)  # the whole prompt was read
            message = AIMessage(content=text)
            return ChatResult(generations=[ChatGeneration(message=message)])

        def get_num_tokens_from_messages(
            self, messages: list[BaseMessage], tools: Sequence[Any] | None = None
        ) -> int:
            return _LangChainCounter(exact, agent)(messages)

    return ExtractiveChatModel(), meter


# ------------------------------------------------------------------ policies
class TrimMessagesPolicy:
    """``langchain_core.messages.trim_messages`` with the exact counter.

    Parameters
    ----------
    agent : str
        The participant whose turns are the assistant side.
    counter : TokenCounter, optional
        Exact counter, passed as ``token_counter`` (``cl100k_base`` by default).
    start_on, end_on : str or None
        Passed through (``start_on="human"`` as the documentation asks).
    """

    name = "langchain-trim-messages"

    def __init__(
        self,
        *,
        agent: str = "Claude",
        counter: TokenCounter | None = None,
        start_on: str | None = "human",
        end_on: str | None = None,
    ) -> None:
        self.agent = agent
        self.counter = default_counter(counter)
        self.start_on = start_on
        self.end_on = end_on

    def options(self, budget: int) -> dict[str, Any]:
        """The keyword arguments given to ``trim_messages`` at ``budget`` (the counter
        aside).

        Examples
        --------
        >>> TrimMessagesPolicy().options(4000)["max_tokens"]
        4000
        """
        return {
            "max_tokens": budget,
            "strategy": "last",
            "include_system": True,
            "start_on": self.start_on,
            "end_on": self.end_on,
        }

    def settings(self, budget: int, *, system_tokens: int = 0) -> PeerSettings:
        """What this policy passes to ``trim_messages`` at ``budget``, and why.

        Parameters
        ----------
        budget : int
            The call's input budget.
        system_tokens : int
            The system prompt's tokens (not read: ``max_tokens`` counts it).

        Returns
        -------
        PeerSettings

        Examples
        --------
        >>> TrimMessagesPolicy().settings(4000).settings["strategy"]
        'last'
        """
        sizes = self.options(budget)
        items = {
            "max_tokens": Setting(sizes["max_tokens"], "the window (the system prompt counted in)"),
            "strategy": Setting(
                sizes["strategy"], "keep the newest messages, as the documentation's chat use"
            ),
            "include_system": Setting(
                sizes["include_system"], "the system prompt kept, as the documentation advises"
            ),
            "start_on": Setting(
                sizes["start_on"],
                "the history starts on a human message, as the documentation asks",
            ),
            "end_on": Setting(sizes["end_on"], "the default: any message may end it"),
            "allow_partial": Setting(False, "the default: no message is cut"),
            "token_counter": Setting("exact (cl100k_base)", "the audit's own counter"),
        }
        return PeerSettings.of(self.name, "langchain-core", "langchain-core", items)

    def request(self, history: Sequence[Message], budget: int) -> PolicyRequest:
        """The last messages that fit ``budget``, starting on a human message."""
        from langchain_core.messages import trim_messages

        def call() -> list[Message]:
            kept = trim_messages(
                to_langchain(history, agent=self.agent),
                token_counter=_LangChainCounter(self.counter, self.agent),
                **self.options(budget),
            )
            return from_langchain(kept, agent=self.agent)

        out, error = run_guarded(call)
        return audit(out or [], budget, self.counter, error=error)


class SummarizationMiddlewarePolicy:
    """LangChain v1 ``SummarizationMiddleware``, its ``before_model`` hook driven directly.

    Parameters
    ----------
    agent : str
        The participant whose turns are the assistant side.
    counter : TokenCounter, optional
        Exact counter, given to the middleware as ``token_counter``.
    summarizer : Summarizer, optional
        Behind the fake chat model; :class:`ExtractiveSummarizer` by default.
    keep_fraction : float
        The middleware keeps ``("tokens", keep_fraction * available)`` after
        summarising, where ``available`` is the budget minus the system prompt.
    trigger_fraction : float
        It summarises once the history reaches ``trigger_fraction * available``.
    trim_tokens_to_summarize : int or None
        Passed through (LangChain's default is 4000).
    summary_tokens : int
        Length asked of the summariser.
    """

    name = "langchain-summarization-middleware"

    def __init__(
        self,
        *,
        agent: str = "Claude",
        counter: TokenCounter | None = None,
        summarizer: Summarizer | None = None,
        keep_fraction: float = 0.5,
        trigger_fraction: float = 1.0,
        trim_tokens_to_summarize: int | None = 4000,
        summary_tokens: int = 400,
    ) -> None:
        if not 0 < keep_fraction <= 1 or not 0 < trigger_fraction <= 1:
            raise ValueError("keep_fraction and trigger_fraction must be in (0, 1]")
        self.agent = agent
        self.counter = default_counter(counter)
        self.model, self.meter = extractive_chat_model(
            summarizer, self.counter, agent=agent, target_tokens=summary_tokens
        )
        self.summary_tokens = summary_tokens
        self.keep_fraction = keep_fraction
        self.trigger_fraction = trigger_fraction
        self.trim_tokens_to_summarize = trim_tokens_to_summarize
        self._feed = HistoryFeed()
        self._state: list[BaseMessage] = []
        self._middleware: dict[int, Any] = {}

    def options(self, budget: int, system_tokens: int = 0) -> dict[str, Any]:
        """The keyword arguments given to ``SummarizationMiddleware`` at ``budget`` (the
        model and counter aside): sizes of the window less the system prompt.

        Examples
        --------
        >>> SummarizationMiddlewarePolicy().options(4000, system_tokens=100)["keep"]
        ('tokens', 1950)
        """
        available = budget - system_tokens
        return {
            "trigger": ("tokens", max(1, int(available * self.trigger_fraction))),
            "keep": ("tokens", max(1, int(available * self.keep_fraction))),
            "trim_tokens_to_summarize": self.trim_tokens_to_summarize,
        }

    def settings(self, budget: int, *, system_tokens: int = 0) -> PeerSettings:
        """What this policy passes to ``SummarizationMiddleware`` at ``budget``, and why.

        Parameters
        ----------
        budget : int
            The call's input budget.
        system_tokens : int
            The system prompt's tokens, which the sizes leave out.

        Returns
        -------
        PeerSettings

        Examples
        --------
        >>> SummarizationMiddlewarePolicy().settings(4000).values["trigger"]
        ('tokens', 4000)
        """
        sizes = self.options(budget, system_tokens)
        items = {
            "trigger": Setting(
                sizes["trigger"],
                "the window less the system prompt (create_agent keeps it outside the "
                f"state; shown for {system_tokens} system tokens): the middleware "
                "summarises on the call that reaches it, so every request fits",
            ),
            "keep": Setting(
                sizes["keep"],
                "half that window kept after summarising, room left for the summary and "
                "the turns to come (the default, 20 messages, is not sized to a window)",
            ),
            "trim_tokens_to_summarize": Setting(
                sizes["trim_tokens_to_summarize"],
                "the default: the summary model reads at most this much of what it folds",
            ),
            "token_counter": Setting("exact (cl100k_base)", "the audit's own counter"),
            "model": Setting(
                f"extractive, asked for {self.summary_tokens} tokens",
                "a deterministic stand-in for the summary LLM, given the middleware's "
                "default summary prompt",
            ),
        }
        return PeerSettings.of(self.name, "langchain", "langchain", items)

    def _middleware_for(self, budget: int, system_tokens: int) -> Any:
        from langchain.agents.middleware import SummarizationMiddleware

        key = budget - system_tokens
        if key not in self._middleware:
            self._middleware[key] = SummarizationMiddleware(
                self.model,
                token_counter=_LangChainCounter(self.counter, self.agent),
                **self.options(budget, system_tokens),
            )
        return self._middleware[key]

    def request(self, history: Sequence[Message], budget: int) -> PolicyRequest:
        """Append the new messages to the agent state, run the hook, send the state."""
        from langgraph.graph.message import REMOVE_ALL_MESSAGES

        system, _ = split_system(history)
        new, restart = self._feed.new_messages(history)
        if restart:
            self._state = []
        offset = len(history) - len(new)
        for k, m in enumerate(new):
            if offset + k < len(system):
                continue  # the system prompt stays outside the state
            self._state += to_langchain([m], agent=self.agent, start=offset + k)
        middleware = self._middleware_for(budget, request_tokens(system, self.counter))

        def call() -> None:
            update = middleware.before_model({"messages": self._state}, None)
            if update:
                state: list[BaseMessage] = list(self._state)
                for m in update["messages"]:
                    if getattr(m, "id", None) == REMOVE_ALL_MESSAGES:
                        state = []
                    else:
                        state.append(m)
                self._state = state

        _, error = run_guarded(call)
        if error:
            return audit([], budget, self.counter, self.meter, error=error)
        out = system + from_langchain(self._state, agent=self.agent)
        return audit(out, budget, self.counter, self.meter)


class ClearToolUsesPolicy:
    """LangChain v1 ``ContextEditingMiddleware`` with ``ClearToolUsesEdit``.

    Parameters
    ----------
    agent : str
        The participant whose turns are the assistant side.
    counter : TokenCounter, optional
        Exact counter, reached through the chat model's
        ``get_num_tokens_from_messages`` (system prompt included).
    trigger : int, optional
        Token threshold; the call's budget when None.
    keep, clear_at_least, exclude_tools, clear_tool_inputs, placeholder
        Passed to ``ClearToolUsesEdit``.
    """

    name = "langchain-clear-tool-uses"

    def __init__(
        self,
        *,
        agent: str = "Claude",
        counter: TokenCounter | None = None,
        trigger: int | None = None,
        keep: int = 3,
        clear_at_least: int = 0,
        exclude_tools: Sequence[str] = (),
        clear_tool_inputs: bool = False,
        placeholder: str = "[cleared]",
    ) -> None:
        self.agent = agent
        self.counter = default_counter(counter)
        self.model, self.meter = extractive_chat_model(None, self.counter, agent=agent)
        self.trigger = trigger
        self.edit_options: dict[str, Any] = {
            "keep": keep,
            "clear_at_least": clear_at_least,
            "exclude_tools": tuple(exclude_tools),
            "clear_tool_inputs": clear_tool_inputs,
            "placeholder": placeholder,
        }

    def settings(self, budget: int, *, system_tokens: int = 0) -> PeerSettings:
        """What this policy passes to ``ClearToolUsesEdit`` at ``budget``, and why.

        Parameters
        ----------
        budget : int
            The call's input budget.
        system_tokens : int
            The system prompt's tokens (not read: the trigger counts the whole request).

        Returns
        -------
        PeerSettings

        Examples
        --------
        >>> ClearToolUsesPolicy().settings(4000).values["keep"]
        3
        """
        from .baselines import clear_tool_uses_settings

        items = clear_tool_uses_settings(self, budget)
        items["token_count_method"] = Setting(
            "model", "the chat model's count, which is the exact counter (cl100k_base)"
        )
        return PeerSettings.of(self.name, "langchain", "langchain", items)

    def request(self, history: Sequence[Message], budget: int) -> PolicyRequest:
        """The history as the middleware edits it before the model call."""
        from langchain.agents.middleware import ClearToolUsesEdit, ContextEditingMiddleware
        from langchain.agents.middleware.types import ModelRequest, ModelResponse
        from langchain_core.messages import AIMessage, SystemMessage

        system, rest = split_system(history)
        edit = ClearToolUsesEdit(
            trigger=budget if self.trigger is None else self.trigger, **self.edit_options
        )
        middleware = ContextEditingMiddleware(edits=[edit], token_count_method="model")
        system_message = SystemMessage(content=system_text(system)) if system else None
        captured: list[Any] = []

        def handler(request: Any) -> Any:
            captured.append(request)
            return ModelResponse(result=[AIMessage(content="")])

        def call() -> list[Message]:
            lc = to_langchain(rest, agent=self.agent)
            request = ModelRequest(
                model=self.model,
                messages=lc,  # type: ignore[arg-type]
                system_message=system_message,
                state={"messages": lc},  # type: ignore[arg-type]
            )
            middleware.wrap_model_call(request, handler)
            return from_langchain(captured[-1].messages, agent=self.agent)

        out, error = run_guarded(call)
        if error:
            return audit([], budget, self.counter, error=error)
        return audit(system + (out or []), budget, self.counter)
