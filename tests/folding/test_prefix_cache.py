"""The automatic prefix cache (OpenAI-style): every prefix stored, no breakpoints."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from folding import AUTOMATIC_PRICES, Layout, PrefixCacheSimulator


def lay(*units: tuple[str, int]) -> Layout:
    return Layout.from_units([("raw", key, tokens) for key, tokens in units])


def test_an_append_reads_the_whole_previous_request_in_increments() -> None:
    sim = PrefixCacheSimulator(min_cacheable_tokens=1024, increment=128)
    first = sim.request(lay(("a", 1100), ("b", 300)))
    assert (first.cached, first.written, first.missed) == (0, 0, 1400)
    second = sim.request(lay(("a", 1100), ("b", 300), ("c", 50)))
    # 1,400 matched: 1,024 + 2 whole increments of 128 = 1,280 read, the rest missed
    assert (second.cached, second.missed) == (1280, 170)
    assert second.billed == pytest.approx(0.25 * 1280 + 170)
    assert second.breakpoints == () and second.age == 1


def test_a_change_reads_the_longest_prefix_before_it_without_breakpoints() -> None:
    sim = PrefixCacheSimulator(min_cacheable_tokens=100, increment=1)
    sim.request(lay(*[(f"u{i}", 100) for i in range(8)]))
    changed = sim.request(lay(*[(f"u{i}", 100) for i in range(5)], ("new", 100)))
    assert changed.cached == 500  # every boundary was stored: no breakpoint needed


def test_short_prefixes_are_neither_stored_nor_read() -> None:
    sim = PrefixCacheSimulator(min_cacheable_tokens=1024)
    sim.request(lay(("a", 1000)))
    again = sim.request(lay(("a", 1000)))
    assert again.cached == 0 and again.missed == 1000


def test_entries_expire_after_ttl_requests_unused() -> None:
    sim = PrefixCacheSimulator(ttl=1, min_cacheable_tokens=10, increment=1)
    sim.request(lay(("a", 100)))
    sim.request(lay(("b", 100)))
    sim.request(lay(("c", 100)))
    assert sim.request(lay(("a", 100))).cached == 0  # unused for two requests: gone
    assert sim.request(lay(("a", 100))).cached == 100


def test_no_write_premium_so_a_miss_never_costs_more_than_the_base_price() -> None:
    sim = PrefixCacheSimulator()
    r = sim.request(lay(("a", 5000)))
    assert r.billed == 5000 * AUTOMATIC_PRICES.miss
    assert sim.totals().written == 0 and sim.totals().requests == 1


@pytest.mark.parametrize("options", [{"ttl": -1}, {"min_cacheable_tokens": -1}, {"increment": 0}])
def test_bad_settings_name_the_field(options: dict[str, int]) -> None:
    with pytest.raises(ValueError, match=next(iter(options))):
        PrefixCacheSimulator(**options)


_SIZES = {"a": 300, "b": 17, "c": 1024, "d": 64, "e": 129, "f": 700}
"""One size per key: a unit's key names its bytes, so one key has one size."""
_UNITS = st.lists(
    st.sampled_from(sorted(_SIZES)).map(lambda k: (k, _SIZES[k])), min_size=1, max_size=8
)


@settings(derandomize=True, max_examples=200)
@given(st.lists(_UNITS, min_size=1, max_size=8), st.sampled_from([0, 200, 1024]))
def test_reads_the_longest_live_prefix_any_earlier_request_sent(
    requests: list[list[tuple[str, int]]], minimum: int
) -> None:
    """Against a recount: the longest common prefix with any earlier request (ttl None),
    counted only when it reaches the minimum, read in whole increments past it."""
    sim = PrefixCacheSimulator(min_cacheable_tokens=minimum, increment=64)
    seen: list[list[tuple[str, int]]] = []
    for units in requests:
        got = sim.request(lay(*units))
        best = 0
        for earlier in seen:
            tokens = k = 0
            while k < min(len(units), len(earlier)) and units[k] == earlier[k]:
                tokens += units[k][1]
                k += 1
                if tokens >= minimum:
                    best = max(best, tokens)
        expected = 0 if best < max(1, minimum) else minimum + (best - minimum) // 64 * 64
        assert got.cached == expected
        assert got.cached + got.missed == sum(t for _, t in units) and got.written == 0
        seen.append(units)
