"""The fold-schedule model (:mod:`solvers.schedule`): its exact search, and the bound
on the lazy schedule that ``kv-stable`` follows, checked over short horizons."""

from __future__ import annotations

import itertools
import math

import pytest
from hypothesis import assume, given, settings
from hypothesis import strategies as st

from solvers.schedule import AppendSchedule


def recount(model: AppendSchedule, arrivals: list[int], folds: tuple[bool, ...]) -> float:
    """The price of a schedule from the requests themselves: each request is a list of
    units (the fixed part, one unit per memory written, one per raw token), and a call
    reads from the cache the longest run of units it shares with the previous request."""
    memories: list[tuple[str, int, float]] = []
    raw: list[tuple[str, int, float]] = []
    before: list[tuple[str, int, float]] = []
    total = 0.0
    token = 0
    for t, (a, fold) in enumerate(zip(arrivals, folds, strict=True)):
        for _ in range(a):
            raw.append(("raw", token, 1.0))
            token += 1
        if fold and len(raw) > model.floor:
            cut = len(raw) - int(model.floor)
            memories.append(("memory", t, model.ratio * cut))
            raw = raw[cut:]
        request = [("fixed", 0, model.fixed), *memories, *raw]
        size = sum(u[2] for u in request)
        if size > model.window:
            return math.inf
        shared = 0.0
        for old, new in zip(before, request, strict=False):
            if old != new:
                break
            shared += new[2]
        total += model.read * shared + model.write * (size - shared)
        before = request
    return total


models = st.builds(
    AppendSchedule,
    window=st.integers(8, 30),
    floor=st.integers(2, 6),
    ratio=st.sampled_from([0.0, 0.25, 0.5, 1.0]),
    read=st.sampled_from([0.1, 0.25]),
    write=st.sampled_from([1.0, 1.25, 2.0]),
    fixed=st.integers(0, 2),
)


@settings(max_examples=150, deadline=None)
@given(model=models, data=st.data())
def test_the_exact_search_finds_the_cheapest_of_every_schedule(
    model: AppendSchedule, data: st.DataObject
) -> None:
    arrivals = data.draw(st.lists(st.integers(1, int(model.floor)), min_size=1, max_size=8))
    prices = [
        recount(model, arrivals, f) for f in itertools.product([False, True], repeat=len(arrivals))
    ]
    best, folds = model.cheapest(arrivals)
    assert best == pytest.approx(min(prices))
    if math.isfinite(best):
        assert recount(model, arrivals, tuple(folds)) == pytest.approx(best)
        assert model.cost(arrivals, folds) == pytest.approx(best)


@settings(max_examples=300, deadline=None)
@given(model=models, data=st.data())
def test_the_lazy_schedule_is_within_the_stated_factor_of_the_cheapest(
    model: AppendSchedule, data: st.DataObject
) -> None:
    arrivals = data.draw(st.lists(st.integers(1, int(model.floor)), min_size=1, max_size=10))
    best, _ = model.cheapest(arrivals)
    assume(math.isfinite(best))  # some schedule fits: then the lazy one does
    lazy = model.lazy(arrivals)
    price = recount(model, arrivals, tuple(lazy))
    assert math.isfinite(price)
    assert price <= model.factor() * best + 1e-9
    # it folds no more often than any schedule that fits
    for folds in itertools.product([False, True], repeat=len(arrivals)):
        if math.isfinite(recount(model, arrivals, folds)):
            raws = _raw_before(model, arrivals, folds)
            effective = sum(f and n > model.floor for f, n in zip(folds, raws, strict=True))
            assert sum(lazy) <= effective


def _raw_before(model: AppendSchedule, arrivals: list[int], folds: tuple[bool, ...]) -> list[int]:
    """The raw tokens at each call once its arrival is in (a fold at or under the floor
    is an append)."""
    raw, out = 0, []
    for a, fold in zip(arrivals, folds, strict=True):
        raw += a
        out.append(raw)
        if fold and raw > model.floor:
            raw = int(model.floor)
    return out


def test_a_hand_checked_schedule() -> None:
    model = AppendSchedule(window=10, floor=4, ratio=0.5, read=0.1, write=1.0)
    # 3, 6 and 9 tokens appended (3 + 0.3 + 3 + 0.6 + 3), then a fold: the memory of 8
    # raw tokens (4) and the 4 kept are written, nothing cached before them (8)
    assert model.cost([3, 3, 3, 3], [False, False, False, True]) == pytest.approx(17.9)
    # folding at the third call instead: 3, 3.3, then the memory of 5 raw tokens (2.5)
    # and the 4 kept written (6.5), then 3 appended after 6.5 cached (3.65)
    assert model.cost([3, 3, 3, 3], [False, False, True, False]) == pytest.approx(16.45)
    # folding at the second call (1 + 4 written) leaves 1 + 10 = 11 at the fourth, which
    # folds again: 3 + 5 + 3.5 + (0.1 + 3 + 4) = 18.6
    assert model.cost([3, 3, 3, 3], [False, True, False, True]) == pytest.approx(18.6)
    best, folds = model.cheapest([3, 3, 3, 3])
    assert folds == [False, False, True, False] and best == pytest.approx(16.45)
    assert model.lazy([3, 3, 3, 3]) == [False, False, False, True]
    assert model.factor() == pytest.approx(max(10 / 4, 2 + 0.5 * 6 / 4))


def test_nothing_fits_when_the_memories_outgrow_the_window() -> None:
    model = AppendSchedule(window=6, floor=2, ratio=1.0, read=0.1, write=1.0)
    assert model.cheapest([2, 2, 2, 2]) == (math.inf, [])
    assert model.cost([2, 2, 2, 2], model.lazy([2, 2, 2, 2])) == math.inf


@pytest.mark.parametrize(
    "field, options",
    [
        ("floor", {"floor": 0}),
        ("ratio", {"ratio": 1.5}),
        ("read", {"read": 2.0}),
        ("window", {"window": 3}),
    ],
)
def test_a_bad_model_names_its_field(field: str, options: dict[str, float]) -> None:
    base = {"window": 10.0, "floor": 4.0, "ratio": 0.5, "read": 0.1, "write": 1.0}
    with pytest.raises(ValueError, match=f"check {field}"):
        AppendSchedule(**{**base, **options})
