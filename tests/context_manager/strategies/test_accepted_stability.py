"""kv-unified's stability tau from fold receipts: under
``continuity_baseline='accepted'``, each leaf's ``stable_for`` is the number of accepted
presentations since its representation last changed; a keep-alive round (the same
layout accepted again) does not count, and the count survives reopen."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from context_manager import ContextManager
from context_manager.receipts import FoldReceipt, ReceiptUnit, layout_hash
from context_manager.strategies.autobiographical import AutobiographicalStrategy
from context_manager.strategies.autobiographical.accepted import STABILITY_SLOT, Stability, advance
from solvers.kv_unified import KvUnified
from tests.support.receipt_agent import NARROW, history, open_at
from tests.support.scripted_summarizer import words

KV_UNIFIED = {"solver": "kv-unified", "solver_options": {"policy": "reference"}}


@pytest.fixture
def taus(monkeypatch: pytest.MonkeyPatch) -> list[dict[str, int] | None]:
    """The ``stable_for`` of each kv-unified solve, in order."""
    seen: list[dict[str, int] | None] = []
    plan = KvUnified._plan

    def spy(self: KvUnified, problem: Any, time_limit: float | None) -> Any:
        seen.append(getattr(self.config, "stable_for", None))
        return plan(self, problem, time_limit)

    monkeypatch.setattr(KvUnified, "_plan", spy)
    return seen


def rounds(cm: ContextManager, n: int, *, grow: bool = True) -> None:
    """``n`` rounds compiled and accepted, a new message after each when ``grow``."""
    for r in range(n):
        cm.accept_round(cm.compile(**NARROW).compile_id)
        if grow:
            cm.add_message("User", words(20, f"new{r}"))


def test_tau_counts_the_accepted_presentations_since_a_leaf_last_changed(
    taus: list[dict[str, int] | None],
) -> None:
    cm, _ = open_at(":memory:", continuity_baseline="accepted", **KV_UNIFIED)
    with cm:
        history(cm)
        rounds(cm, 1)  # presentation 1: every leaf new
        cm.compile(**NARROW)
        assert taus[-1] is None  # tau 0 everywhere: nothing to pass
        cm.accept_round(cm.compile(**NARROW).compile_id)  # presentation 2, grown
        newest = cm.add_message("User", words(20, "newest"))
        cm.compile(**NARROW)
        second = taus[-1]
        assert second is not None and second["c-0"] == 1
        assert newest not in second  # not in any accepted request: tau 0
        rounds(cm, 1)  # presentation 3, the oldest memories shown as before
        cm.compile(**NARROW)
        third = taus[-1]
        assert third is not None and third["c-0"] == 2
        assert newest not in third  # first accepted in presentation 3: tau 0
        rounds(cm, 1)  # presentation 4: still raw
        cm.compile(**NARROW)
        fourth = taus[-1]
        assert fourth is not None and fourth[newest] == 1


def test_a_keep_alive_round_is_not_a_presentation(taus: list[dict[str, int] | None]) -> None:
    cm, _ = open_at(":memory:", continuity_baseline="accepted", **KV_UNIFIED)
    with cm:
        history(cm)
        rounds(cm, 3, grow=False)  # the same layout accepted three times
        cm.compile(**NARROW)
        assert taus[-1] is None
        rounds(cm, 1)  # the same layout once more, then a message
        rounds(cm, 1)  # a new layout: presentation 2
        cm.compile(**NARROW)
        assert taus[-1] is not None and taus[-1]["c-0"] == 1


def test_tau_survives_reopen(tmp_path: Path, taus: list[dict[str, int] | None]) -> None:
    where = tmp_path / "cm.db"
    cm, _ = open_at(where, continuity_baseline="accepted", **KV_UNIFIED)
    with cm:
        history(cm)
        rounds(cm, 2)
        cm.compile(**NARROW)  # stores the table of receipt 2
        before = taus[-1]
        assert before is not None and before["c-0"] == 1
    cm, strategy = open_at(where, continuity_baseline="accepted", **KV_UNIFIED)
    with cm:
        stored = strategy.records.store.get(strategy.records.slot(STABILITY_SLOT))
        assert stored["presentations"] == 2 and stored["seq"] == 2
        cm.compile(**NARROW)
        assert taus[-1] == before
        rounds(cm, 1)
        cm.compile(**NARROW)
        assert taus[-1] is not None and taus[-1]["c-0"] == 2


def test_a_preview_stores_no_stability_table(taus: list[dict[str, int] | None]) -> None:
    cm, strategy = open_at(":memory:", continuity_baseline="accepted", **KV_UNIFIED)
    with cm:
        history(cm)
        rounds(cm, 2)
        cm.preview_context(max_tokens=NARROW["max_tokens"])
        assert taus[-1] is not None  # the preview solved with the receipts' tau
        # the last live compile stored the table of receipt 1; receipt 2's is not stored
        assert strategy.records.store.get(strategy.records.slot(STABILITY_SLOT))["seq"] == 1


@pytest.mark.parametrize(
    "options",
    [
        {**KV_UNIFIED},  # the compiled baseline: no receipts read
        {
            **KV_UNIFIED,
            "continuity_baseline": "accepted",
            "solver_options": {"policy": "reference", "stable_for": {"c-0": 7}},
        },  # the host's own tau
    ],
)
def test_tau_is_left_to_the_host_otherwise(
    options: dict[str, Any], taus: list[dict[str, int] | None]
) -> None:
    cm, _ = open_at(":memory:", **options)
    with cm:
        history(cm)
        rounds(cm, 3)
        cm.compile(**NARROW)
        assert taus[-1] == options["solver_options"].get("stable_for")


def receipt(seq: int, *units: tuple[str | None, int, str, str]) -> FoldReceipt:
    made = tuple(
        ReceiptUnit(memory=m, level=lv, first=a, last=b, messages=int(b) - int(a) + 1)
        for m, lv, a, b in units
    )
    return FoldReceipt(
        seq=seq,
        compile_id=f"c{seq}",
        branch="main",
        accepted_at=0.0,
        units=made,
        request_hash="0" * 64,
        layout_hash=layout_hash(made),
    )


def test_advance_keeps_what_is_shown_as_before_and_stamps_the_rest() -> None:
    ids = [str(i) for i in range(10)]
    position = {x: i for i, x in enumerate(ids)}
    first = advance(None, receipt(1, ("A", 1, "0", "3"), (None, 0, "4", "6")), position, ids, "b")
    assert first == Stability(
        "b", 1, 1, first.layout_hash, (("0", "3", "A", 1, 1), ("4", "6", None, 0, 1))
    )
    # A kept; 4-6 still raw; 7-9 new; then 4-9 folded by B
    grown = receipt(2, ("A", 1, "0", "3"), (None, 0, "4", "9"))
    second = advance(first, grown, position, ids, "b")
    assert second.presentations == 2
    assert second.runs == (("0", "3", "A", 1, 1), ("4", "6", None, 0, 1), ("7", "9", None, 0, 2))
    third = advance(second, receipt(3, ("A", 1, "0", "3"), ("B", 1, "4", "9")), position, ids, "b")
    assert third.runs == (("0", "3", "A", 1, 1), ("4", "9", "B", 1, 3))
    again = advance(third, receipt(4, ("A", 1, "0", "3"), ("B", 1, "4", "9")), position, ids, "b")
    assert again.presentations == 3 and again.seq == 4 and again.runs == third.runs
    # a receipt that does not follow the table: started again, every message tau 0
    skipped = advance(third, receipt(9, ("C", 2, "0", "9")), position, ids, "b")
    assert skipped.presentations == 1 and skipped.runs == (("0", "9", "C", 2, 1),)
    # the same unit, one level up: changed
    up = advance(third, receipt(4, ("A", 2, "0", "3"), ("B", 1, "4", "9")), position, ids, "b")
    assert up.runs == (("0", "3", "A", 2, 4), ("4", "9", "B", 1, 3))


def test_a_damaged_table_is_started_again() -> None:
    assert Stability.from_body("main", {"runs": [["1"]]}) is None
    assert Stability.from_body("main", None) is None


def test_strategy_default_reads_no_receipts() -> None:
    assert AutobiographicalStrategy(compression_model="m").config.continuity_baseline == "compiled"
