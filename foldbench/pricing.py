"""The two provider price models every policy's requests are billed under.

A benchmark that prices one policy's requests under other cache rules than
another's measures the rules, not the policies. Every request of every policy
is therefore billed twice, under the same rules for all:

``explicit`` (Anthropic-style)
    The provider caches only the prefixes a request marks with breakpoints (at
    most 4), finds a stored prefix only from a breakpoint at most 20 content
    blocks after its end, and bills a write at 1.25, a read at 0.1 and output
    at 5 times the base input price (:class:`folding.CacheSimulator`). A
    policy whose library places its own breakpoints is billed by them (ours
    do); a policy whose library places none gets what a plain client sends:
    a breakpoint after the system prompt and one at the end of the request.
``automatic`` (OpenAI-style)
    The provider stores every prefix of at least 1,024 tokens of every request
    and reads the longest one still alive in 128-token steps, with no
    breakpoints and no write premium, a read at 0.25 and output at 4 times the
    base input price (GPT-4.1 class prices;
    :class:`folding.PrefixCacheSimulator`). Marks are ignored.

Both keep a prefix for 5 minutes, which is :data:`CACHE_TTL_CALLS` requests at
one model call every 30 seconds. Summariser calls are billed under both models
too, through a cache of their own that does not expire (memory requests ask
for a one-hour lifetime and come minutes apart).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from folding import (
    AUTOMATIC_PRICES,
    CachePrices,
    CacheRequest,
    CacheSimulator,
    Layout,
    PrefixCacheSimulator,
)

__all__ = [
    "AUTOMATIC",
    "CACHE_TTL_CALLS",
    "EXPLICIT",
    "LOOKBACK_BLOCKS",
    "MIN_CACHEABLE_TOKENS",
    "MODELS",
    "ProviderModel",
    "RequestPricer",
    "plain_client_marks",
]

CACHE_TTL_CALLS = 10
"""A 5-minute cache lifetime at one model call every 30 seconds."""
MIN_CACHEABLE_TOKENS = 1024
"""The smallest cacheable prefix of both providers (Sonnet-class and GPT-4.1-class models)."""
LOOKBACK_BLOCKS = 20
"""How many content blocks before a breakpoint the explicit provider looks for a stored
prefix; the same for every policy."""


@dataclass(frozen=True)
class ProviderModel:
    """One provider's cache rules and prices, as multiples of the base input price.

    Attributes
    ----------
    name : str
        ``"explicit"`` or ``"automatic"``: the key of :data:`MODELS` and the suffix of
        the report's columns.
    about : str
        One line for the report.
    prices : CachePrices
        Read, write and miss prices of input tokens.
    output_price : float
        An output token.
    hour_write_price : float
        A cache write that asks for a one-hour lifetime (the explicit provider bills
        it higher; the automatic one has no write premium at all).
    breakpoints : bool
        Whether the provider caches only what requests mark.
    """

    name: str
    about: str
    prices: CachePrices
    output_price: float
    hour_write_price: float
    breakpoints: bool

    def simulator(
        self, *, ttl: int | None = CACHE_TTL_CALLS
    ) -> CacheSimulator | PrefixCacheSimulator:
        """A fresh cache of this provider; ``ttl`` in requests (None: never expires)."""
        if self.breakpoints:
            return CacheSimulator(
                ttl=ttl,
                prices=self.prices,
                min_cacheable_tokens=MIN_CACHEABLE_TOKENS,
                lookback_blocks=LOOKBACK_BLOCKS,
            )
        return PrefixCacheSimulator(
            ttl=ttl, prices=self.prices, min_cacheable_tokens=MIN_CACHEABLE_TOKENS
        )


EXPLICIT = ProviderModel(
    name="explicit",
    about=(
        "explicit breakpoints (Anthropic-style): at most 4 per request, a 20-block lookback, "
        "write 1.25, read 0.1, output 5; a policy whose library places no breakpoint gets "
        "one after the system prompt and one at the end"
    ),
    prices=CachePrices(),
    output_price=5.0,
    hour_write_price=2.0,
    breakpoints=True,
)
AUTOMATIC = ProviderModel(
    name="automatic",
    about=(
        "automatic prefix caching (OpenAI-style): every prefix of 1,024+ tokens stored, the "
        "longest read in 128-token steps, no breakpoints, no write premium, read 0.25, "
        "output 4"
    ),
    prices=AUTOMATIC_PRICES,
    output_price=4.0,
    hour_write_price=AUTOMATIC_PRICES.miss,
    breakpoints=False,
)
MODELS: dict[str, ProviderModel] = {m.name: m for m in (EXPLICIT, AUTOMATIC)}
"""The provider models, in report order."""


def plain_client_marks(system_messages: int, messages: int) -> tuple[int, ...]:
    """The breakpoints a client sends when its library places none: after the system
    prompt (when there is one) and at the end, as message counts.

    >>> plain_client_marks(1, 5), plain_client_marks(0, 5), plain_client_marks(1, 1)
    ((1, 5), (5,), (1,))
    """
    if messages <= 0:
        return ()
    return tuple(sorted({c for c in (system_messages, messages) if 0 < c <= messages}))


class RequestPricer:
    """Bills one run's requests under every provider model, each with its own cache.

    Examples
    --------
    >>> from folding import Layout
    >>> pricer = RequestPricer()
    >>> a = Layout.from_units([("msg", "s", 1500), ("msg", "u0", 100)])
    >>> b = Layout.from_units([("msg", "s", 1500), ("msg", "u0", 100), ("msg", "u1", 50)])
    >>> _ = pricer.price(a, None, system_messages=1)
    >>> second = pricer.price(b, None, system_messages=1)
    >>> second["explicit"].cached, second["automatic"].cached
    (1600, 1536)
    """

    def __init__(self, models: Sequence[ProviderModel] = (EXPLICIT, AUTOMATIC)) -> None:
        self.models = tuple(models)
        self._caches = {m.name: m.simulator() for m in self.models}

    def price(
        self,
        layout: Layout,
        marks: Sequence[int] | None,
        *,
        system_messages: int,
        blocks: Sequence[int] | None = None,
    ) -> dict[str, CacheRequest]:
        """One request under each model.

        Parameters
        ----------
        layout : Layout
            One unit per message of the request.
        marks : sequence of int or None
            The policy's own breakpoints as message counts; None when its library
            places none (it is then billed as a plain client:
            :func:`plain_client_marks`).
        system_messages : int
            Leading system messages of the request.
        blocks : sequence of int, optional
            Content blocks per message, for the explicit provider's lookback.
        """
        out: dict[str, CacheRequest] = {}
        for model in self.models:
            cache = self._caches[model.name]
            if isinstance(cache, CacheSimulator):
                given = plain_client_marks(system_messages, len(layout)) if marks is None else marks
                out[model.name] = cache.request(layout, given, blocks=blocks)
            else:
                out[model.name] = cache.request(layout)
        return out
