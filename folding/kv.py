"""The KV-cache model: re-read cost between layouts and a provider cache simulator.

Two units are the same cached bytes iff they share ``(kind, key)``; a prompt
cache reuses the longest common prefix of units. :func:`kv_cost` is the
idealised re-read cost (a breakpoint on every unit). :class:`CacheSimulator`
models a provider cache with explicit breakpoints (Anthropic-style: at most 4
per request, a lookback, a write premium); :class:`PrefixCacheSimulator` one with
automatic prefix caching (OpenAI-style: every prefix stored, no breakpoints, no
write premium). Both count the time-to-live in requests and price tokens relative
to the base input price.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np

from .render import Layout

__all__ = [
    "AUTOMATIC_PRICES",
    "CachePrices",
    "CacheRequest",
    "CacheSimulator",
    "CacheTotals",
    "PrefixCacheSimulator",
    "divergence_index",
    "kv_cost",
]


def divergence_index(previous: Layout | None, layout: Layout) -> int | None:
    """Index of the first unit of ``layout`` not reused from ``previous``.

    Returns ``None`` when every unit of ``layout`` matches (the layouts are
    equal, or ``layout`` is a prefix of ``previous``). Different fixed tokens
    count as a change before the first unit (returns 0).
    """
    if previous is None or previous.fixed_tokens != layout.fixed_tokens:
        return 0
    m = min(len(previous), len(layout))
    diff = np.flatnonzero(previous.keys[:m] != layout.keys[:m])
    if diff.size:
        return int(diff[0])
    return None if len(layout) <= len(previous) else m


def kv_cost(previous: Layout | None, layout: Layout) -> int:
    """Tokens of ``layout`` from its first unit that differs from ``previous``.

    This is what a provider re-reads when the cache holds exactly
    ``previous``: 0 when the layouts are equal or ``layout`` is a prefix of
    ``previous``; a pure append costs exactly the appended tokens; with no
    previous layout (or other fixed tokens) everything is re-read.

    Examples
    --------
    >>> from folding import Layout, kv_cost
    >>> a = Layout.from_units([("raw", "m0", 100), ("raw", "m1", 50)], fixed_tokens=10)
    >>> b = Layout.from_units([("raw", "m0", 100), ("raw", "m1", 50), ("raw", "m2", 7)], 10)
    >>> kv_cost(a, b), kv_cost(b, a), kv_cost(a, a), kv_cost(None, a)
    (7, 0, 0, 160)
    """
    d = divergence_index(previous, layout)
    if d is None:
        return 0
    if d == 0 and (previous is None or previous.fixed_tokens != layout.fixed_tokens):
        return layout.total
    return int(layout.total - layout.offsets[d])


@dataclass(frozen=True)
class CachePrices:
    """Prices per token as multiples of the base input price."""

    miss: float = 1.0
    """Uncached input tokens after the last breakpoint."""
    write: float = 1.25
    """Tokens written to the cache (between the cached prefix and the last breakpoint)."""
    read: float = 0.1
    """Tokens read from the cache."""


@dataclass(frozen=True)
class CacheRequest:
    """What one request cost under the simulated cache.

    ``cached + written + missed == total``.
    """

    step: int
    total: int
    cached: int
    written: int
    missed: int
    billed: float
    breakpoints: tuple[int, ...]
    """Breakpoints as unit counts (a breakpoint after that many units)."""
    age: int | None
    """Requests since the matched cache entry was last used (None on a miss)."""


@dataclass(frozen=True)
class CacheTotals:
    """Sums over every simulated request."""

    requests: int
    total: int
    cached: int
    written: int
    missed: int
    billed: float

    @property
    def hit_rate(self) -> float:
        """Cached tokens over all input tokens (0 with no requests)."""
        return self.cached / self.total if self.total else 0.0


@dataclass
class _Entry:
    tokens: int
    last_used: int


@dataclass
class CacheSimulator:
    """A provider prompt cache replayed over a sequence of layouts.

    Each :meth:`request` reads the longest stored prefix that still matches
    the layout (from any earlier request still alive, so a revert to an older
    layout hits), takes the request's own breakpoints or places at most
    ``max_breakpoints`` at unit boundaries (then always one at the end), writes
    the prefixes they mark and bills the request.

    Parameters
    ----------
    max_breakpoints : int, default 4
        Anthropic allows 4 cache breakpoints per request.
    ttl : int or None, default None
        Entries unused for more than ``ttl`` requests expire (None: never).
    prices : CachePrices
        Defaults: miss 1.0, write 1.25, read 0.1.
    min_cacheable_tokens : int, default 0
        Prefixes shorter than this are never written (providers have a minimum).
    lookback_blocks : int, default 20
        With breakpoints given by the request, a stored prefix is found only from a
        breakpoint at most this many content blocks after its end (Anthropic looks
        back about 20 blocks). The simulator's own placement always marks the matched
        prefix.

    Examples
    --------
    >>> from folding import CacheSimulator, Layout
    >>> sim = CacheSimulator()
    >>> a = Layout.from_units([("raw", "m0", 1000)])
    >>> b = Layout.from_units([("raw", "m0", 1000), ("raw", "m1", 10)])
    >>> sim.request(a).written, sim.request(b).cached, sim.totals().requests
    (1000, 1000, 2)
    """

    max_breakpoints: int = 4
    ttl: int | None = None
    prices: CachePrices = field(default_factory=CachePrices)
    min_cacheable_tokens: int = 0
    lookback_blocks: int = 20
    history: list[CacheRequest] = field(default_factory=list, init=False)
    _entries: dict[tuple[int, int], _Entry] = field(default_factory=dict, init=False, repr=False)
    _step: int = field(default=0, init=False, repr=False)

    def __post_init__(self) -> None:
        if not self.max_breakpoints >= 1:
            raise ValueError(f"max_breakpoints must be >= 1, got {self.max_breakpoints}")
        if self.lookback_blocks < 0:
            raise ValueError(f"lookback_blocks must be >= 0, got {self.lookback_blocks}")
        if self.ttl is not None and self.ttl < 0:
            raise ValueError(f"ttl must be >= 0 requests or None, got {self.ttl}")

    def request(
        self,
        layout: Layout,
        breakpoints: Sequence[int] | None = None,
        *,
        blocks: Sequence[int] | None = None,
    ) -> CacheRequest:
        """Simulate one request with ``layout`` and return its cost.

        Parameters
        ----------
        layout : Layout
        breakpoints : sequence of int, optional
            The request's own cache breakpoints, as unit counts (a breakpoint after
            that many units), as a client marks blocks with ``cache_control``. They
            are used as given: without one at the end, the tail after the last
            breakpoint is billed as uncached input. None: the simulator places them
            (always one at the end, one where the cached prefix ends, the rest
            spread over the layout).
        blocks : sequence of int, optional
            Content blocks of each unit, for the lookback (default: one per unit).

        Raises
        ------
        ValueError
            For a breakpoint outside ``1..len(layout)``, more than
            ``max_breakpoints`` distinct ones, or ``blocks`` not one positive count
            per unit.
        """
        reach: np.ndarray | None = None
        if breakpoints is not None:
            breakpoints = self._check(layout, breakpoints)
            reach = self._reach(layout, breakpoints, blocks)
        step = self._step
        self._step += 1
        if self.ttl is not None:
            ttl = self.ttl
            self._entries = {k: e for k, e in self._entries.items() if step - e.last_used <= ttl}
        hashes = _prefix_hashes(layout)
        matched, age, cached = 0, None, 0
        for (count, digest), entry in sorted(self._entries.items(), reverse=True):
            if count > len(layout) or (reach is not None and not reach[count]):
                continue  # longer than this layout, or no breakpoint looks back that far
            if hashes[count] == digest:
                matched, age = count, step - entry.last_used
                cached = _prefix_tokens(layout, count)
                entry.last_used = step
                break
        if breakpoints is None:
            breakpoints = self._place(layout, matched)
        writable = _prefix_tokens(layout, breakpoints[-1]) if breakpoints else 0
        if writable >= self.min_cacheable_tokens:
            for count in breakpoints:
                tokens = _prefix_tokens(layout, count)
                if tokens >= self.min_cacheable_tokens:
                    self._entries[(count, hashes[count])] = _Entry(tokens, step)
            written = max(0, writable - cached)
        else:
            written = 0
        missed = layout.total - cached - written
        p = self.prices
        billed = p.read * cached + p.write * written + p.miss * missed
        result = CacheRequest(step, layout.total, cached, written, missed, billed, breakpoints, age)
        self.history.append(result)
        return result

    def _check(self, layout: Layout, breakpoints: Sequence[int]) -> tuple[int, ...]:
        chosen = tuple(sorted({int(b) for b in breakpoints}))
        bad = [b for b in chosen if not 1 <= b <= len(layout)]
        if bad:
            raise ValueError(
                f"breakpoints {bad} are outside 1..{len(layout)}: a breakpoint is the number "
                "of units before it, and this layout has that many units"
            )
        if len(chosen) > self.max_breakpoints:
            raise ValueError(
                f"{len(chosen)} breakpoints given; the provider allows max_breakpoints="
                f"{self.max_breakpoints}: drop some or raise max_breakpoints"
            )
        return chosen

    def _reach(
        self, layout: Layout, breakpoints: tuple[int, ...], blocks: Sequence[int] | None
    ) -> np.ndarray:
        """For each unit count, whether a breakpoint lies within the lookback after it."""
        n = len(layout)
        per_unit = np.ones(n, dtype=np.int64) if blocks is None else np.asarray(blocks)
        if per_unit.shape != (n,) or (n and per_unit.min() < 1):
            raise ValueError(
                f"blocks must give a positive block count for each of the {n} units, "
                f"got {list(per_unit.tolist()) if per_unit.ndim == 1 else blocks!r}"
            )
        ends = np.concatenate(([0], np.cumsum(per_unit)))  # blocks before each unit count
        counts = np.arange(n + 1)
        found = np.zeros(n + 1, dtype=bool)
        for b in breakpoints:
            found |= (counts <= b) & (ends >= ends[b] - self.lookback_blocks)
        return found

    def _place(self, layout: Layout, matched: int) -> tuple[int, ...]:
        n = len(layout)
        if n == 0:
            return (0,)
        chosen = [n]
        if 0 < matched < n:
            chosen.append(matched)
        ends = layout.offsets + layout.tokens
        for fraction in (0.5, 0.25, 0.75):
            if len(set(chosen)) >= self.max_breakpoints:
                break
            target = layout.fixed_tokens + fraction * (layout.total - layout.fixed_tokens)
            count = int(np.searchsorted(ends, target, side="left")) + 1
            if 0 < count <= n:
                chosen.append(count)
        return tuple(sorted(set(chosen))[-self.max_breakpoints :])

    def totals(self) -> CacheTotals:
        """Sums over every request so far."""
        h = self.history
        return CacheTotals(
            requests=len(h),
            total=sum(r.total for r in h),
            cached=sum(r.cached for r in h),
            written=sum(r.written for r in h),
            missed=sum(r.missed for r in h),
            billed=sum(r.billed for r in h),
        )


def _prefix_tokens(layout: Layout, count: int) -> int:
    return int(layout.offsets[count]) if count < len(layout) else layout.total


def _prefix_hashes(layout: Layout) -> list[int]:
    h = hash(("fixed", layout.fixed_tokens))
    out = [h]
    for key in layout.keys.tolist():
        h = hash((h, key))
        out.append(h)
    return out


AUTOMATIC_PRICES = CachePrices(miss=1.0, write=1.0, read=0.25)
"""Automatic prefix caching as OpenAI bills it (GPT-4.1 class models): a cached input
token at a quarter of the base price and no premium for storing a prefix."""


@dataclass
class PrefixCacheSimulator:
    """A provider cache that stores every prefix it sees, without breakpoints.

    The automatic prefix caching of OpenAI-style providers: each request reads
    the longest prefix (at unit boundaries) that an earlier request still alive
    sent, rounded down to whole ``increment`` tokens past the minimum, and stores
    all of its own prefixes of at least ``min_cacheable_tokens``. Storing costs
    nothing extra (``written`` is always 0): what is not read is billed at the
    miss price.

    Parameters
    ----------
    ttl : int or None, default None
        Entries unused for more than ``ttl`` requests expire (None: never).
    prices : CachePrices
        Defaults to :data:`AUTOMATIC_PRICES` (read 0.25, miss 1.0; ``write`` is
        not used).
    min_cacheable_tokens : int, default 1024
        A prefix shorter than this is neither stored nor read.
    increment : int, default 128
        A read prefix is counted in whole steps of this many tokens beyond the
        minimum (the rest of the matched prefix is billed as a miss).

    Examples
    --------
    >>> from folding import Layout, PrefixCacheSimulator
    >>> sim = PrefixCacheSimulator(min_cacheable_tokens=100, increment=1)
    >>> a = Layout.from_units([("raw", "m0", 1000)])
    >>> b = Layout.from_units([("raw", "m0", 1000), ("raw", "m1", 10)])
    >>> first, second = sim.request(a), sim.request(b)
    >>> (first.cached, first.missed), (second.cached, second.missed, second.billed)
    ((0, 1000), (1000, 10, 260.0))
    """

    ttl: int | None = None
    prices: CachePrices = field(default_factory=lambda: AUTOMATIC_PRICES)
    min_cacheable_tokens: int = 1024
    increment: int = 128
    history: list[CacheRequest] = field(default_factory=list, init=False)
    _entries: dict[tuple[int, int], int] = field(default_factory=dict, init=False, repr=False)
    _step: int = field(default=0, init=False, repr=False)

    def __post_init__(self) -> None:
        if self.ttl is not None and self.ttl < 0:
            raise ValueError(f"ttl must be >= 0 requests or None, got {self.ttl}")
        if self.min_cacheable_tokens < 0:
            raise ValueError(f"min_cacheable_tokens must be >= 0, got {self.min_cacheable_tokens}")
        if self.increment < 1:
            raise ValueError(f"increment must be >= 1 token, got {self.increment}")

    def request(self, layout: Layout) -> CacheRequest:
        """Simulate one request with ``layout`` and return its cost."""
        step = self._step
        self._step += 1
        if self.ttl is not None:
            ttl = self.ttl
            self._entries = {k: used for k, used in self._entries.items() if step - used <= ttl}
        hashes = _prefix_hashes(layout)
        matched, age = 0, None
        for count in range(len(layout), 0, -1):
            used = self._entries.get((count, hashes[count]))
            if used is not None:
                matched, age = count, step - used
                break
        cached = self._readable(_prefix_tokens(layout, matched)) if matched else 0
        for count in range(1, len(layout) + 1):
            if _prefix_tokens(layout, count) >= self.min_cacheable_tokens:
                self._entries[(count, hashes[count])] = step
        missed = layout.total - cached
        billed = self.prices.read * cached + self.prices.miss * missed
        result = CacheRequest(step, layout.total, cached, 0, missed, billed, (), age)
        self.history.append(result)
        return result

    def _readable(self, tokens: int) -> int:
        """The part of a matched prefix of ``tokens`` that is billed as read."""
        floor = self.min_cacheable_tokens
        if tokens < max(1, floor):
            return 0
        return floor + (tokens - floor) // self.increment * self.increment

    def totals(self) -> CacheTotals:
        """Sums over every request so far."""
        h = self.history
        return CacheTotals(
            requests=len(h),
            total=sum(r.total for r in h),
            cached=sum(r.cached for r in h),
            written=0,
            missed=sum(r.missed for r in h),
            billed=sum(r.billed for r in h),
        )
