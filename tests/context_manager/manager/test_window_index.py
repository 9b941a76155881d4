"""The window index alone: records in, the window as they leave it out."""

from __future__ import annotations

import pytest

from context_manager import ConfigError
from context_manager.window import UnknownRowError, WindowIndex, WindowRecord, check_ids


def _replay(*records: tuple[str, str, int]) -> WindowIndex:
    return WindowIndex.replay(WindowRecord(k, tuple(ids), seq) for k, ids, seq in records)  # type: ignore[arg-type]


def test_an_empty_index_is_legacy_mode() -> None:
    index = WindowIndex()
    assert index.legacy and len(index) == 0 and index.held() == []
    # legacy mode: every row of the record is in, a row outside it absent
    assert index.status("a", in_record=True) == "in"
    assert index.status("a", in_record=False) == "absent"


def test_an_empty_write_down_leaves_legacy_mode() -> None:
    index = _replay(("write-down", "", 3))
    assert not index.legacy and index.held() == []
    assert index.status("a", in_record=True) == "out"


def test_write_down_then_presents_take_ordinals_in_order() -> None:
    index = _replay(("write-down", "ab", 5), ("present", "dc", 9), ("present", "e", 12))
    assert index.held() == ["a", "b", "d", "c", "e"]
    assert [index.ordinal_of(x) for x in "abcde"] == [0, 1, 3, 2, 4]
    # the write-down's rows were in from their own write; presented ones from the call
    assert [index.entered_at(x) for x in "abcde"] == [None, None, 9, 9, 12]


def test_a_retraction_leaves_a_hole_and_a_redo_takes_a_new_ordinal() -> None:
    index = _replay(("write-down", "abc", 1), ("retract", "b", 2))
    assert index.held() == ["a", "c"]
    assert [index.ordinal_of(x) for x in "abc"] == [0, None, 2]
    assert index.status("b", in_record=True) == "undone" and index.was_undone("b")
    assert index.entered_at("b") is None
    assert index.apply(WindowRecord("present", ("b",), 3)) == ["b"]
    assert index.held() == ["a", "c", "b"]
    assert index.ordinal_of("b") == 3 and index.entered_at("b") == 3
    assert index.status("b", in_record=True) == "in" and not index.was_undone("b")


def test_ordinals_are_never_reused() -> None:
    index = _replay(("write-down", "a", 1), ("retract", "a", 2), ("present", "a", 3))
    index.apply(WindowRecord("retract", ("a",), 4))
    index.apply(WindowRecord("present", ("b", "a"), 5))
    assert [index.ordinal_of(x) for x in "ab"] == [3, 2]


def test_a_row_held_or_named_twice_enters_once() -> None:
    index = _replay(("write-down", "a", 1))
    assert index.new_rows(["a", "b", "c", "b"]) == ["b", "c"]
    assert index.apply(WindowRecord("present", ("a", "b", "b"), 2)) == ["b"]
    assert index.held() == ["a", "b"]
    assert [index.ordinal_of(x) for x in "ab"] == [0, 1]


def test_retract_takes_out_only_held_rows() -> None:
    index = _replay(("write-down", "ab", 1))
    assert index.held_among(["b", "z", "b", "a"]) == ["b", "a"]
    assert index.apply(WindowRecord("retract", ("z", "b"), 2)) == ["b"]
    assert index.apply(WindowRecord("retract", ("b",), 3)) == []  # already out
    assert index.held() == ["a"] and index.records == 3


def test_status_of_a_row_the_record_lost_is_absent_even_while_held() -> None:
    index = _replay(("write-down", "a", 1))
    assert index.holds("a")
    assert index.status("a", in_record=False) == "absent"


def test_records_round_trip_through_their_bodies() -> None:
    record = WindowRecord("present", ("7", "9"), 42)
    assert WindowRecord.from_body(record.body(), 42) == record
    assert record.body() == {"kind": "present", "ids": ["7", "9"]}
    for bad in ({"kind": "show", "ids": []}, {"kind": "present", "ids": "7"}, ["present"]):
        with pytest.raises(ValueError, match="window record"):
            WindowRecord.from_body(bad, 1)


def test_check_ids_refuses_a_string_and_non_strings() -> None:
    assert check_ids(iter(["1", "2"])) == ["1", "2"]
    with pytest.raises(ConfigError, match=r"wrap one id in a list: \['12'\]"):
        check_ids("12")
    with pytest.raises(ConfigError, match=r"ids\[1\] must be a message id"):
        check_ids(["1", 2])
    with pytest.raises(ConfigError, match="sequence of message ids"):
        check_ids(3)


def test_an_unknown_row_error_names_the_field_and_the_ids() -> None:
    exc = UnknownRowError("ids", ["x", "y"], "on branch 'main'", "present stored rows")
    assert isinstance(exc, KeyError)
    assert exc.field == "ids" and exc.ids == ("x", "y")
    assert (
        str(exc) == "ids names no row of the record on branch 'main': 'x', 'y'; present stored rows"
    )
