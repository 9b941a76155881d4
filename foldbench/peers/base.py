"""The policy interface of the benchmark, and what every policy shares.

A *policy* is one way of managing the context window. At each point where a
running agent would call its model, the benchmark hands the policy the whole
transcript so far and a token budget; the policy answers with the request it
would send (:class:`PolicyRequest`). A policy may keep state between calls,
as a real running agent does; it must then notice when it is handed a
different transcript and start over.

Requests are audited, never repaired: tool pairing problems and budget
overruns (by the exact counter) are recorded in :attr:`PolicyRequest.problems`,
and an exception raised by a peer library is recorded in
:attr:`PolicyRequest.error`.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Protocol, TypeVar, runtime_checkable

from context_manager.integrations.parts import PartJoiner, part_markers
from context_manager.messages import (
    CacheTTL,
    ContentBlock,
    Message,
    ToolResultBlock,
)
from context_manager.pairing import tool_pair_problems
from context_manager.summarizer import (
    Completion,
    CompletionRequest,
    Summarizer,
    needs_tool_definitions,
)
from context_manager.tokens import TiktokenCounter, TokenCounter
from foldbench.loaders import call_points
from foldbench.pricing import AUTOMATIC, EXPLICIT, MIN_CACHEABLE_TOKENS
from folding import CacheSimulator, Layout, PrefixCacheSimulator

__all__ = [
    "HOUR_WRITE_PRICE",
    "MIN_CACHEABLE_TOKENS",
    "OUTPUT_PRICE",
    "SYSTEM",
    "HistoryFeed",
    "MeteredSummarizer",
    "PartJoiner",
    "Policy",
    "PolicyRequest",
    "audit",
    "call_points",
    "default_counter",
    "part_markers",
    "request_tokens",
    "run_guarded",
    "split_system",
    "system_text",
    "user_side_parts",
]

SYSTEM = "System"
"""The participant of system prompts (as :func:`~context_manager.messages.from_openai` names it)."""

_T = TypeVar("_T")


@dataclass(frozen=True)
class PolicyRequest:
    """The request a policy would send at one model call, and what producing it cost.

    Attributes
    ----------
    messages : tuple of Message
        The messages the model would see, in order (system prompt included).
    tokens : int
        Their size by the exact counter the policy was given.
    summarizer_calls : int
        Summariser (fake model) calls made while producing this request.
    summarizer_input_tokens, summarizer_output_tokens : int
        Tokens those calls consumed and produced, by the same exact counter.
    summarizer_billed : float
        What those calls cost in base-price input tokens under the explicit provider
        model (see :class:`MeteredSummarizer`).
    summarizer_billed_automatic : float
        What they cost under the automatic provider model.
    problems : tuple of str
        Invalidities found in the request (orphan tool results, unanswered
        tool calls, budget overrun). Recorded, never fixed.
    error : str or None
        The exception a peer raised, as ``"Type: message"``; the request is
        then empty.
    breakpoints : tuple of int or None
        Indices of the messages the policy marks as prompt-cache breakpoints
        (sorted, at most four). None: the policy's library places none, and it is
        billed as a plain client (:func:`foldbench.pricing.plain_client_marks`).
    unpaired : bool
        The request holds an orphan tool result or an unanswered tool call (one of
        the ``problems``).
    """

    messages: tuple[Message, ...]
    tokens: int
    summarizer_calls: int = 0
    summarizer_input_tokens: int = 0
    summarizer_output_tokens: int = 0
    summarizer_billed: float = 0.0
    problems: tuple[str, ...] = ()
    error: str | None = None
    breakpoints: tuple[int, ...] | None = None
    unpaired: bool = False
    summarizer_billed_automatic: float = 0.0

    @property
    def summarizer_tokens(self) -> int:
        """Input plus output tokens of the summariser calls."""
        return self.summarizer_input_tokens + self.summarizer_output_tokens

    @property
    def valid(self) -> bool:
        """True when the request has no recorded problem and no error."""
        return not self.problems and self.error is None


@runtime_checkable
class Policy(Protocol):
    """A way of managing the context window, asked for one request per model call.

    Attributes
    ----------
    name : str
        A short stable name for reports.
    """

    name: str

    def request(self, history: Sequence[Message], budget: int) -> PolicyRequest:
        """The request this policy would send now.

        Parameters
        ----------
        history : sequence of Message
            The full transcript so far; it grows by appending between calls.
        budget : int
            The input token budget of this call.

        Returns
        -------
        PolicyRequest
            The messages that would be sent, audited, with the summariser cost.
        """
        ...


OUTPUT_PRICE = EXPLICIT.output_price
"""Output tokens as a multiple of the base input price (Anthropic, Sonnet-class models)."""
HOUR_WRITE_PRICE = EXPLICIT.hour_write_price
"""A cache write that should live an hour, as a multiple of the base input price."""


class MeteredSummarizer:
    """A summariser wrapper that counts calls and exact tokens, and prices them under
    every provider model (:mod:`foldbench.pricing`).

    Under the explicit model a call's input is billed through a prompt cache of its own
    when the request marks cache breakpoints (:attr:`CompletionRequest.cache_breakpoints`:
    reads at 0.1, writes at 1.25, or 2 for a one-hour lifetime), and at the base price
    without marks. Under the automatic model every call's input goes through a prefix
    cache of its own, marks or not. Stored prefixes do not expire here in either model,
    as memory requests ask for an hour and come minutes apart. Output is billed at each
    model's output price.

    Parameters
    ----------
    summarizer : Summarizer
        The summariser that writes the text (the deterministic
        :class:`~context_manager.summarizer.ExtractiveSummarizer` in the benchmark).
    counter : TokenCounter
        The exact counter used for the input and output tokens.
    """

    def __init__(self, summarizer: Summarizer, counter: TokenCounter) -> None:
        self.summarizer = summarizer
        self.counter = counter
        self.calls = 0
        self.input_tokens = 0
        self.output_tokens = 0
        self.billed = 0.0
        """What the calls since the last take cost under the explicit model."""
        self.billed_automatic = 0.0
        """What they cost under the automatic model."""
        self._cache = CacheSimulator(
            prices=EXPLICIT.prices, min_cacheable_tokens=MIN_CACHEABLE_TOKENS
        )
        self._prefix_cache = PrefixCacheSimulator(
            prices=AUTOMATIC.prices, min_cacheable_tokens=MIN_CACHEABLE_TOKENS
        )

    @property
    def needs_tool_definitions(self) -> bool:
        """As the wrapped summariser declares (:func:`.needs_tool_definitions`)."""
        return needs_tool_definitions(self.summarizer)

    def complete(self, request: CompletionRequest) -> Completion:
        """Answer ``request`` and add its cost to the meter."""
        completion = self.summarizer.complete(request)
        self.record(
            request.messages,
            completion.text,
            system=request.system,
            breakpoints=request.cache_breakpoints,
            ttl=request.cache_ttl,
        )
        return completion

    def record(
        self,
        messages: Sequence[Message],
        output: str,
        *,
        system: str | None = None,
        breakpoints: Sequence[int] = (),
        ttl: CacheTTL | None = None,
    ) -> None:
        """Add one call: the messages (and system prompt) it read and the text it wrote.

        For a fake model that answers a prompt other than the request it hands the
        summariser, or rewrites the summariser's answer. ``breakpoints`` index the
        messages that end a cached prefix; ``ttl`` is their lifetime (``"1h"`` or the
        default five minutes).
        """
        fixed = self.counter.count_text(system) if system else 0
        sizes = [self.counter.count_message(m) for m in messages]
        read = fixed + sum(sizes)
        written = self.counter.count_text(output)
        self.calls += 1
        self.input_tokens += read
        self.output_tokens += written
        units = [("msg", m.digest(), n) for m, n in zip(messages, sizes, strict=True)]
        layout = Layout.from_units(units, fixed_tokens=fixed)
        automatic = self._prefix_cache.request(layout)
        self.billed_automatic += automatic.billed + written * AUTOMATIC.output_price
        self.billed += written * EXPLICIT.output_price
        if not breakpoints:
            self.billed += read * EXPLICIT.prices.miss
            return
        priced = self._cache.request(layout, [b + 1 for b in breakpoints])
        prices = EXPLICIT.prices
        write = EXPLICIT.hour_write_price if ttl == "1h" else prices.write
        self.billed += (
            priced.cached * prices.read + priced.written * write + priced.missed * prices.miss
        )

    def take(self) -> tuple[int, int, int, float]:
        """Calls, input tokens, output tokens and their explicit-model bill since the last
        take; resets them (:meth:`take_automatic` first for the automatic bill)."""
        out = (self.calls, self.input_tokens, self.output_tokens, self.billed)
        self.calls = self.input_tokens = self.output_tokens = 0
        self.billed = 0.0
        return out

    def take_automatic(self) -> float:
        """The automatic-model bill since the last call of this method; resets it."""
        out, self.billed_automatic = self.billed_automatic, 0.0
        return out


class HistoryFeed:
    """Tracks which part of a growing transcript a stateful policy has already seen.

    Examples
    --------
    >>> feed = HistoryFeed()
    >>> a, b = Message.text_message("User", "a"), Message.text_message("User", "b")
    >>> [m.text for m in feed.new_messages([a])[0]]
    ['a']
    >>> [m.text for m in feed.new_messages([a, b])[0]]
    ['b']
    >>> feed.new_messages([b])[1]
    True
    """

    def __init__(self) -> None:
        self._seen = 0
        self._marks: list[tuple[int, Message]] = []

    def new_messages(self, history: Sequence[Message]) -> tuple[list[Message], bool]:
        """The messages not seen yet, and whether the policy must start over.

        The history must extend what was seen before; when it does not (a
        shorter or different transcript), everything is new and the second
        value is True. Extension is checked at the first, the middle and the last
        message seen (identity first, equality if needed), so a different transcript
        sharing one message is still noticed without comparing every message.
        """
        restart = self._seen > 0 and (
            len(history) < self._seen
            or any(history[i] is not m and history[i] != m for i, m in self._marks)
        )
        start = 0 if restart else self._seen
        self._seen = n = len(history)
        self._marks = [(i, history[i]) for i in sorted({0, n // 2, n - 1})] if n else []
        return list(history[start:]), restart


def request_tokens(messages: Sequence[Message], counter: TokenCounter) -> int:
    """Exact size of a request: the sum of its messages' counts."""
    return sum(counter.count_message(m) for m in messages)


def split_system(history: Sequence[Message]) -> tuple[list[Message], list[Message]]:
    """The leading system messages and the rest of the transcript."""
    n = 0
    while n < len(history) and history[n].participant == SYSTEM:
        n += 1
    return list(history[:n]), list(history[n:])


def system_text(system: Sequence[Message]) -> str:
    """The system messages as one system prompt (blank lines between them)."""
    return "\n\n".join(m.text for m in system)


def audit(
    messages: Sequence[Message],
    budget: int,
    counter: TokenCounter,
    meter: MeteredSummarizer | None = None,
    *,
    error: str | None = None,
    breakpoints: Sequence[int] | None = None,
) -> PolicyRequest:
    """Build a :class:`PolicyRequest`: count, record problems, take the meter.

    Parameters
    ----------
    messages : sequence of Message
        The request as the policy produced it.
    budget : int
        The budget of this call.
    counter : TokenCounter
        The exact counter.
    meter : MeteredSummarizer, optional
        Its calls since the last take are charged to this request.
    error : str, optional
        A peer's exception, recorded as is.
    breakpoints : sequence of int, optional
        The policy's own prompt-cache breakpoints, as message indices.

    Returns
    -------
    PolicyRequest
        The request with its exact size and every problem found.
    """
    tokens = request_tokens(messages, counter)
    problems = tool_pair_problems(messages)
    unpaired = bool(problems)
    if tokens > budget:
        problems.append(f"over budget: {tokens} tokens > {budget}")
    automatic = meter.take_automatic() if meter else 0.0
    calls, tokens_in, tokens_out, billed = meter.take() if meter else (0, 0, 0, 0.0)
    return PolicyRequest(
        messages=tuple(messages),
        tokens=tokens,
        summarizer_calls=calls,
        summarizer_input_tokens=tokens_in,
        summarizer_output_tokens=tokens_out,
        summarizer_billed=billed,
        problems=tuple(problems),
        error=error,
        breakpoints=None if breakpoints is None else tuple(breakpoints),
        unpaired=unpaired,
        summarizer_billed_automatic=automatic,
    )


def run_guarded(
    call: Callable[[], _T],
) -> tuple[_T | None, str | None]:
    """Run a peer library call; an exception becomes a recorded error string."""
    try:
        return call(), None
    except Exception as exc:  # a peer's failure is data for the benchmark
        return None, f"{type(exc).__name__}: {exc}"


def default_counter(counter: TokenCounter | None) -> TokenCounter:
    """``counter``, or the exact ``cl100k_base`` counter."""
    return counter if counter is not None else TiktokenCounter()


def user_side_parts(message: Message) -> list[ToolResultBlock | list[ContentBlock]]:
    """A user-side message cut into tool results and runs of other blocks, in order.

    Chat formats that carry each tool result as its own message (LangChain,
    LlamaIndex, OpenAI) need this split; a message with no block gives one
    empty run.
    """
    parts: list[ToolResultBlock | list[ContentBlock]] = []
    for b in message.content:
        if isinstance(b, ToolResultBlock):
            parts.append(b)
        elif parts and isinstance(parts[-1], list):
            parts[-1].append(b)
        else:
            parts.append([b])
    return parts or [[]]
