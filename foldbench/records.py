"""One audited request of the benchmark: :class:`CallRecord`."""

from __future__ import annotations

from dataclasses import dataclass

from folding import CachePrices

__all__ = ["CallRecord"]

_MODELS = ("explicit", "automatic")


def _model(name: str) -> str:
    if name not in _MODELS:
        raise ValueError(f"unknown provider model {name!r}; the models are {', '.join(_MODELS)}")
    return name


@dataclass(frozen=True)
class CallRecord:
    """One request of one policy, audited and priced.

    ``tokens`` is the request's size by the exact counter; ``invalid`` means over
    budget, a pairing problem, the newest turn missing or an error (``problems`` and
    ``error`` say which); ``cached``, ``written``, ``missed`` and ``billed`` price it
    under the explicit provider model, ``cached_automatic`` and ``billed_automatic``
    under the automatic one (:mod:`foldbench.pricing`);
    the last call of a transcript with facts carries ``facts_total`` and
    ``facts_retained``.
    """

    transcript: str
    policy: str
    budget: int
    call: int
    messages_so_far: int
    tokens: int
    over_budget: bool
    invalid: bool
    problems: tuple[str, ...]
    error: str | None
    summarizer_calls: int
    summarizer_tokens: int
    cpu_ms: float
    cached: int
    billed: float
    facts_total: int = 0
    facts_retained: int | None = None
    new_tokens: int = 0
    """Tokens of the messages added since the previous call: the turn this request
    has to carry."""
    unpaired: bool = False
    """The request holds an orphan tool result or an unanswered tool call."""
    written: int = 0
    """Tokens the request wrote to the cache (``cached + written + missed`` is its size
    in the simulator)."""
    missed: int = 0
    """Tokens sent uncached and not written."""
    summarizer_billed: float = 0.0
    """What the summariser calls made for this request cost, in base-price input tokens
    (:class:`~foldbench.peers.base.MeteredSummarizer`)."""
    arguments_total: int = 0
    """Argument values of the tool calls the agent really made next
    (:func:`argument_values`) that the whole history before the call shows."""
    arguments_kept: int = 0
    """How many of those the request shows (none when it was refused)."""
    dataset: str = ""
    """The dataset the transcript comes from (:func:`~foldbench.benchmark.dataset_of`)."""
    cached_automatic: int = 0
    """Tokens read from the cache under the automatic provider model
    (:data:`foldbench.pricing.AUTOMATIC`); ``cached``, ``written``, ``missed`` and
    ``billed`` are the explicit model's."""
    billed_automatic: float = 0.0
    """The request's bill under the automatic provider model."""
    summarizer_billed_automatic: float = 0.0
    """What the summariser calls made for this request cost under the automatic model."""
    summarizer_input_tokens: int = 0
    """What those calls read (``summarizer_tokens`` less this is what they wrote)."""

    def bill(self, model: str = "explicit") -> float:
        """The request's bill under provider model ``model`` (``"explicit"`` or
        ``"automatic"``), without the summariser calls."""
        return self.billed_automatic if _model(model) == "automatic" else self.billed

    def summarizer_bill(self, model: str = "explicit") -> float:
        """What the summariser calls made for this request cost under ``model``."""
        if _model(model) == "automatic":
            return self.summarizer_billed_automatic
        return self.summarizer_billed

    def cached_under(self, model: str = "explicit") -> int:
        """Tokens read from the cache under ``model``."""
        return self.cached_automatic if _model(model) == "automatic" else self.cached

    @property
    def resent(self) -> int:
        """Tokens of history sent at more than the read price: what the request did not
        read from the cache beyond the new turn (capped at the budget) it had to carry.
        A policy that only appends re-sends nothing once its prefix is cached."""
        return max(0, self.written + self.missed - min(self.new_tokens, self.budget))

    @property
    def resent_billed(self) -> float:
        """What :attr:`resent` cost: the request is its cached prefix, then what it wrote,
        then what it sent uncached, and the new turn is at its end, so the re-sent
        history is priced as writes first, then as misses."""
        p = CachePrices()
        return (
            min(self.resent, self.written) * p.write + max(0, self.resent - self.written) * p.miss
        )
