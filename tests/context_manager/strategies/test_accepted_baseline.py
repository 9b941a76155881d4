"""``continuity_baseline='accepted'``: a compile is stated against the last request the
provider accepted (the newest fold receipt), not an intervening compile nobody sent
(KVU worked case 31, at the manager level)."""

from __future__ import annotations

from pathlib import Path

import pytest

from context_manager import CompileResult
from context_manager.strategies.autobiographical import (
    AutobiographicalConfig,
)
from tests.support.receipt_agent import NARROW, history, open_at

WIDE = {"max_tokens": 1200, "reserve_for_response": 100}
"""A budget the whole history fits raw."""


def folded(result: CompileResult) -> list[str]:
    """The memories a request shows in place of their messages."""
    return [memory for memory, ids in result.provenance if memory is not None and ids]


def texts(result: CompileResult) -> list[str]:
    return [m.text for m in result.messages]


def test_a_later_compile_continues_from_the_accepted_request_not_an_unsent_one() -> None:
    cm, strategy = open_at(":memory:", continuity_baseline="accepted")
    with cm:
        history(cm)
        accepted = cm.compile(**WIDE)
        assert folded(accepted) == []  # everything raw
        cm.accept_round(accepted.compile_id)
        unsent = cm.compile(**NARROW)  # compiled, never accepted
        assert folded(unsent)
        assert strategy.resolutions  # the committed frontier folds
        again = cm.compile(**WIDE)
        # kv-stable holds its baseline while it fits: the accepted request's, all raw
        assert folded(again) == []
        assert texts(again) == texts(accepted)


def test_by_default_the_baseline_is_the_last_compile_sent_or_not() -> None:
    cm, _ = open_at(":memory:")
    with cm:
        history(cm)
        cm.accept_round(cm.compile(**WIDE).compile_id)
        unsent = cm.compile(**NARROW)
        again = cm.compile(**WIDE)
        assert folded(again) == folded(unsent) != []


def test_before_any_receipt_the_baseline_is_the_last_compile() -> None:
    cm, strategy = open_at(":memory:", continuity_baseline="accepted")
    with cm:
        history(cm)
        narrow = cm.compile(**NARROW)
        assert strategy.accepted_receipt is None
        again = cm.compile(**WIDE)
        assert folded(again) == folded(narrow) != []


def test_a_new_receipt_replaces_the_baseline_read_before_it() -> None:
    cm, _ = open_at(":memory:", continuity_baseline="accepted")
    with cm:
        history(cm)
        cm.accept_round(cm.compile(**WIDE).compile_id)
        cm.compile(**NARROW)
        assert folded(cm.compile(**WIDE)) == []  # the raw receipt read and kept
        narrow = cm.compile(**NARROW)
        cm.accept_round(narrow.compile_id)  # now the folded request is the accepted one
        again = cm.compile(**WIDE)
        assert folded(again) == folded(narrow) != []


def test_the_accepted_baseline_survives_reopen(tmp_path: Path) -> None:
    where = tmp_path / "cm.db"
    cm, _ = open_at(where, continuity_baseline="accepted")
    with cm:
        history(cm)
        accepted = cm.compile(**WIDE)
        cm.accept_round(accepted.compile_id)
        assert folded(cm.compile(**NARROW))  # committed, never accepted
    cm, strategy = open_at(where, continuity_baseline="accepted")
    with cm:
        assert strategy.resolutions  # the compiled frontier folds
        again = cm.compile(**WIDE)
        assert folded(again) == []
        assert texts(again) == texts(accepted)


def test_each_branch_continues_from_its_own_accepted_request() -> None:
    cm, _ = open_at(":memory:", continuity_baseline="accepted")
    with cm:
        history(cm)
        main = cm.current_branch
        cm.accept_round(cm.compile(**WIDE).compile_id)  # main accepts the raw request
        side = cm.fork("side")
        narrow = cm.compile(**NARROW)
        cm.accept_round(narrow.compile_id)  # the side accepts a folded one
        assert folded(cm.compile(**WIDE)) == folded(narrow) != []
        cm.switch_branch(main)
        assert folded(cm.compile(**NARROW))  # compiled on main, never sent
        assert folded(cm.compile(**WIDE)) == []  # main's receipt: not the side's, nor that
        cm.switch_branch(side)
        assert folded(cm.compile(**WIDE)) == folded(narrow)


def test_the_reference_preset_measures_continuity_against_accepted_requests() -> None:
    assert AutobiographicalConfig().continuity_baseline == "compiled"
    assert AutobiographicalConfig.reference().continuity_baseline == "accepted"
    with pytest.raises(ValueError, match="continuity_baseline"):
        AutobiographicalConfig(continuity_baseline="sent")
