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
    with pytest.raises(ValueError, match="lookback_blocks"):
        CacheSimulator(lookback_blocks=-1)


def test_request_breakpoints_are_used_as_given() -> None:
    sim = CacheSimulator()
    units = [(f"u{i}", 100) for i in range(6)]
    first = sim.request(lay(*units), breakpoints=[2, 6])
    assert first.breakpoints == (2, 6)
    # a change at unit 4: only the marked prefix of 2 units is stored before it
    changed = sim.request(lay(*units[:4], ("new", 100), units[5]), breakpoints=[2, 6])
    assert (changed.cached, changed.written) == (200, 400)


def test_without_a_breakpoint_at_the_end_the_tail_is_missed() -> None:
    sim = CacheSimulator()
    r = sim.request(lay(("a", 100), ("b", 200), ("c", 300)), breakpoints=[1])
    assert (r.cached, r.written, r.missed) == (0, 100, 500)
    assert r.billed == pytest.approx(1.25 * 100 + 500)
    assert sim.request(lay(("a", 100)), breakpoints=()).cached == 0  # no breakpoint, no lookup
    assert sim.request(lay(("a", 100)), breakpoints=[1]).cached == 100
    nothing = CacheSimulator().request(A, breakpoints=())
    assert (nothing.cached, nothing.written, nothing.missed) == (0, 0, 650)


def test_a_stored_prefix_is_found_only_within_the_lookback_of_a_breakpoint() -> None:
    units = [(f"u{i}", 10) for i in range(30)]
    grown = lay(*units, ("new", 10))
    for marks, cached in (([31], 0), ([26, 31], 0), ([25, 31], 50)):
        sim = CacheSimulator(lookback_blocks=20)
        sim.request(lay(*units[:5]), breakpoints=[5])
        assert sim.request(grown, breakpoints=marks).cached == cached, marks
    # the lookback counts content blocks: two blocks per unit halve its reach in units
    for marks, cached in (([16, 31], 0), ([15, 31], 50)):
        sim = CacheSimulator(lookback_blocks=20)
        sim.request(lay(*units[:5]), breakpoints=[5])
        assert sim.request(grown, marks, blocks=[2] * 31).cached == cached, marks
    with pytest.raises(ValueError, match="positive block count for each of the 31 units"):
        CacheSimulator().request(grown, [31], blocks=[1] * 30)


@pytest.mark.parametrize(
    ("breakpoints", "match"),
    [([0, 3], "outside 1..3"), ([4], "outside 1..3"), ([1, 2, 3], "max_breakpoints=2")],
)
def test_bad_request_breakpoints(breakpoints: list[int], match: str) -> None:
    sim = CacheSimulator(max_breakpoints=2)
    with pytest.raises(ValueError, match=match):
        sim.request(A, breakpoints=breakpoints)
    assert sim.history == []  # a refused request leaves no trace


def test_request_breakpoints_respect_the_minimum_and_the_ttl() -> None:
    units = [("a", 100), ("b", 100), ("c", 100)]
    sim = CacheSimulator(min_cacheable_tokens=150)
    sim.request(lay(*units), breakpoints=[1, 3])  # the 100-token prefix is too short to store
    assert sim.request(lay(units[0], ("x", 100)), breakpoints=[2]).cached == 0
    sim = CacheSimulator(ttl=1)
    sim.request(lay(*units), breakpoints=[1, 3])
    for i in range(3):  # a breakpoint rewrites its prefix every request: it stays alive
        sim.request(lay(units[0], (f"y{i}", 10)), breakpoints=[1, 2])
    assert sim.request(lay(*units), breakpoints=[3]).cached == 100  # the full prefix expired
