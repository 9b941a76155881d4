"""kv_cost and the provider cache simulator."""

from __future__ import annotations

import pytest

from folding import CachePrices, CacheSimulator, Layout, divergence_index, kv_cost


def lay(*units: tuple[str, int], fixed: int = 0) -> Layout:
    return Layout.from_units([("raw", key, tokens) for key, tokens in units], fixed)


A = lay(("a", 100), ("b", 200), ("c", 300), fixed=50)


def test_kv_cost_cases() -> None:
    assert kv_cost(A, A) == 0
    assert kv_cost(A, lay(("a", 100), ("b", 200), fixed=50)) == 0  # a prefix of the previous
    assert kv_cost(A, lay(("a", 100), ("b", 200), ("c", 300), ("d", 7), fixed=50)) == 7
    changed = lay(("a", 100), ("x", 20), ("c", 300), fixed=50)
    assert kv_cost(A, changed) == 320
    assert divergence_index(A, changed) == 1
    assert kv_cost(None, A) == 650
    assert kv_cost(A, lay(("a", 100), fixed=60)) == 160  # other fixed prefix: all re-read


def test_recall_and_raw_units_with_one_key_differ() -> None:
    raw = Layout.from_units([("raw", "x", 10)])
    recall = Layout.from_units([("recall", "x", 10)])
    assert kv_cost(raw, recall) == 10


def test_pure_append_is_a_full_hit_and_only_the_append_is_written() -> None:
    sim = CacheSimulator()
    first = sim.request(A)
    assert (first.cached, first.written, first.missed) == (0, 650, 0)
    grown = lay(("a", 100), ("b", 200), ("c", 300), ("d", 40), fixed=50)
    second = sim.request(grown)
    assert (second.cached, second.written, second.missed) == (650, 40, 0)
    assert second.billed == pytest.approx(0.1 * 650 + 1.25 * 40)
    assert second.age == 0 + 1


def test_mid_prefix_change_reads_up_to_the_largest_breakpoint_before_it() -> None:
    sim = CacheSimulator()
    units = [(f"u{i}", 100) for i in range(8)]
    first = sim.request(lay(*units))
    assert first.breakpoints == (2, 4, 6, 8)  # quartiles of 800 tokens, and the end
    changed = [*units[:5], ("new", 100), *units[6:]]
    second = sim.request(lay(*changed))
    assert second.cached == 400  # breakpoint after 4 units; the change is at unit 5
    assert second.cached + second.written + second.missed == second.total


def test_breakpoints_at_most_four_sorted_in_range_including_the_end() -> None:
    sim = CacheSimulator(max_breakpoints=2)
    r = sim.request(lay(*[(f"u{i}", 10 + i) for i in range(30)]))
    assert len(r.breakpoints) <= 2
    assert list(r.breakpoints) == sorted(r.breakpoints)
    assert r.breakpoints[-1] == 30


def test_revert_to_an_older_layout_hits_its_entry() -> None:
    sim = CacheSimulator()
    old = lay(("a", 100), ("b", 100), ("c", 100))
    new = lay(("a", 100), ("z", 5))
    sim.request(old)
    sim.request(new)
    back = sim.request(old)
    assert back.cached == 300 and back.age == 2


def test_ttl_evicts_unused_entries() -> None:
    sim = CacheSimulator(ttl=1)
    a, b = lay(("a", 100)), lay(("b", 100))
    sim.request(a)
    hit = sim.request(a)
    assert (hit.cached, hit.age) == (100, 1)  # used one request ago: alive
    sim.request(b)
    assert sim.request(a).cached == 0  # last used two requests ago: evicted


def test_min_cacheable_and_prices() -> None:
    sim = CacheSimulator(min_cacheable_tokens=1000, prices=CachePrices(miss=2.0))
    r = sim.request(A)
    assert (r.cached, r.written, r.missed, r.billed) == (0, 0, 650, 1300.0)
    totals = sim.totals()
    assert totals.requests == 1 and totals.hit_rate == 0.0


def test_bad_parameters() -> None:
    with pytest.raises(ValueError, match="max_breakpoints"):
        CacheSimulator(max_breakpoints=0)
    with pytest.raises(ValueError, match="ttl"):
        CacheSimulator(ttl=-1)
