"""Arguments of the manager's public calls are checked at the call: a value of the wrong
type or out of range is refused with the library's own error (:class:`ArgumentError`,
:class:`ArgumentTypeError`, :class:`UnknownMessageError`) naming the parameter, the
value received and what is accepted, and nothing is written. A store that holds a pin
an older version wrote with levels no compile takes still compiles: the pin is left
out, with a warning naming it and the fix.

Expectations come from the arguments as the test wrote them and from the manager's
state read before the call, never from the call under test.
"""

from __future__ import annotations

import math
import warnings
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from context_manager import (
    MAX_WINDOW_TOKENS,
    ArgumentError,
    ArgumentTypeError,
    CharsCounter,
    ConfigError,
    ContextManager,
    ContextManagerError,
    ExtractiveSummarizer,
    IgnoredPinWarning,
    Injection,
    Store,
    StoreError,
    TextBlock,
    UnknownMessageError,
    enforce_tool_pairs,
)
from context_manager.messages import MessageFormatError
from tests.support.fuzz_arguments import build, call, calls, folding, methods

FUZZ_EXAMPLES = 15
"""Examples per method of the fuzz (47 methods: 705 in all, a few seconds)."""


def snapshot(cm: ContextManager) -> tuple[Any, ...]:
    """What a refused call must leave as it was: the store's sequence, the messages,
    the pins and the request a compile builds."""
    request = cm.compile(max_tokens=2_000, dry_run=True)
    return (
        cm.store.sequence,
        [(s.id, s.message) for s in cm.get_messages()],
        [p.__dict__ for p in cm.list_pins()],
        [m.text for m in request.messages],
        request.tools,
        request.system_prompt,
    )


def refused(
    cm: ContextManager, kind: type[Exception], param: str, value_shown: str, call: Any
) -> ArgumentError:
    """Run ``call``; it must raise ``kind`` naming ``param`` and the value, and change
    nothing."""
    before = snapshot(cm)
    with pytest.raises(kind) as info:
        call()
    assert isinstance(info.value, ContextManagerError)
    message = str(info.value)
    assert message.startswith(f"{param} must be "), message
    assert value_shown in message, message
    assert isinstance(info.value, ArgumentError) and info.value.param == param
    assert snapshot(cm) == before
    return info.value


# ------------------------------------------------------------------ 1. add_message
@pytest.mark.parametrize(
    ("content", "kind", "param", "shown", "accepted"),
    [
        (None, ArgumentTypeError, "content", "None (NoneType)", "a str or a sequence of content"),
        (5, ArgumentTypeError, "content", "5 (int)", "a str or a sequence of content"),
        (b"bytes", ArgumentTypeError, "content", "b'bytes' (bytes)", "a str or a sequence"),
        ({"type": "text", "text": "x"}, ArgumentTypeError, "content", "(dict)", "a str or a"),
        ([5], ArgumentTypeError, "content[0]", "5 (int)", "a content block or its mapping"),
        ([TextBlock(text="ok"), "s"], ArgumentTypeError, "content[1]", "'s' (str)", "a content"),
        ([{"type": "text"}], ArgumentError, "content[0].text", "(dict)", "given"),
        ([{"type": "text", "text": 7}], ArgumentError, "content[0].text", "7", "a valid string"),
        ([{"type": "video"}], ArgumentError, "content[0].type", "'video' (str)", "one of 'text'"),
    ],
)
def test_add_message_refuses_content_that_is_not_text_or_blocks(
    content: Any, kind: type[Exception], param: str, shown: str, accepted: str
) -> None:
    cm, _ = build()
    with cm:
        error = refused(cm, kind, param, shown, lambda: cm.add_message("User", content))
        assert error.accepted.startswith(accepted)


@pytest.mark.parametrize(
    ("participant", "kind", "shown"),
    [
        (None, ArgumentTypeError, "None (NoneType)"),
        (5, ArgumentTypeError, "5 (int)"),
        ("", ArgumentError, "'' (str)"),
        ("User\udc00", ArgumentError, "'User\\udc00' (str)"),
    ],
)
def test_add_message_refuses_a_participant_that_is_not_a_name(
    participant: Any, kind: type[Exception], shown: str
) -> None:
    cm, _ = build()
    with cm:
        error = refused(cm, kind, "participant", shown, lambda: cm.add_message(participant, "x"))
        assert "non-empty str" in error.accepted


@pytest.mark.parametrize(
    ("kwargs", "param", "shown"),
    [
        ({"metadata": [("a", 1)]}, "metadata", "[('a', 1)] (list)"),
        ({"metadata": {1: "a"}}, "metadata", "{1: 'a'} (dict)"),
        ({"timestamp": math.nan}, "timestamp", "nan (float)"),
        ({"timestamp": "now"}, "timestamp", "'now' (str)"),
        ({"hold": -1}, "hold", "-1 (int)"),
        ({"hold": math.inf}, "hold", "inf (float)"),
    ],
)
def test_add_message_refuses_its_options(kwargs: dict[str, Any], param: str, shown: str) -> None:
    cm, _ = build()
    with cm:
        refused(cm, ArgumentError, param, shown, lambda: cm.add_message("User", "x", **kwargs))


def test_content_that_cannot_be_stored_is_a_library_error_naming_the_field() -> None:
    cm, _ = build()
    with cm:
        before = snapshot(cm)
        with pytest.raises(MessageFormatError) as info:
            cm.add_message("User", "x", metadata={"when": math.nan})
        assert isinstance(info.value, ContextManagerError) and isinstance(info.value, ValueError)
        assert info.value.field == "metadata.when"
        assert snapshot(cm) == before


def test_the_accepted_calls_still_store_what_they_are_given() -> None:
    cm, _ = build()
    with cm:
        before = len(cm.get_messages())
        new = cm.add_message("Tool", [{"type": "text", "text": "as a mapping"}], hold=2)
        assert cm.get_message(new).text == "as a mapping"
        assert len(cm.get_messages()) == before + 1 and new in cm.compression_holds()


# -------------------------------------------------------- 2. budgets and other ints
BAD_WINDOWS = [
    (math.nan, ArgumentTypeError, "nan (float)"),
    ("1000", ArgumentTypeError, "'1000' (str)"),
    (1000.5, ArgumentTypeError, "1000.5 (float)"),
    (1000.0, ArgumentTypeError, "1000.0 (float)"),
    (True, ArgumentTypeError, "True (bool)"),
    (10**30, ArgumentError, f"{10**30} (int)"),
    (MAX_WINDOW_TOKENS + 1, ArgumentError, f"{2**40 + 1} (int)"),
    (0, ArgumentError, "0 (int)"),
    (-5, ArgumentError, "-5 (int)"),
]


@pytest.mark.parametrize("method", ["compile", "preview_context"])
@pytest.mark.parametrize(("value", "kind", "shown"), BAD_WINDOWS)
def test_a_window_that_is_not_an_int_within_the_bound_is_refused_naming_the_bound(
    method: str, value: Any, kind: type[Exception], shown: str
) -> None:
    cm, _ = build()
    with cm:
        error = refused(
            cm, kind, "max_tokens", shown, lambda: getattr(cm, method)(max_tokens=value)
        )
        assert "1099511627776 (2**40)" in str(error)


def test_the_largest_window_is_accepted() -> None:
    cm, _ = build()
    with cm:
        assert cm.preview_context(max_tokens=MAX_WINDOW_TOKENS).fits
        assert cm.compile(max_tokens=MAX_WINDOW_TOKENS).messages


@pytest.mark.parametrize("method", ["compile", "preview_context"])
@pytest.mark.parametrize(
    ("value", "kind", "shown"),
    [
        (-1, ArgumentError, "-1 (int)"),
        (-(10**30), ArgumentError, "(int)"),
        (True, ArgumentTypeError, "True (bool)"),
        (12.5, ArgumentTypeError, "12.5 (float)"),
        (math.nan, ArgumentTypeError, "nan (float)"),
        (1000, ArgumentError, "1000 (int)"),  # nothing left for the input
    ],
)
def test_a_reserve_that_is_negative_or_not_an_int_is_refused(
    method: str, value: Any, kind: type[Exception], shown: str
) -> None:
    cm, _ = build()
    with cm:
        error = refused(
            cm,
            kind,
            "reserve_for_response",
            shown,
            lambda: getattr(cm, method)(max_tokens=1000, reserve_for_response=value),
        )
        assert "an int from 0 to 999" in str(error)


@pytest.mark.parametrize(
    ("call", "param", "shown"),
    [
        (lambda cm: cm.drain(max_ticks=True), "max_ticks", "True (bool)"),
        (lambda cm: cm.drain(max_ticks=-1), "max_ticks", "-1 (int)"),
        (lambda cm: cm.drain(max_ticks=2.0), "max_ticks", "2.0 (float)"),
        (lambda cm: cm.wait_for_ticks(timeout=math.nan), "timeout", "nan (float)"),
        (lambda cm: cm.wait_for_ticks(timeout=-1), "timeout", "-1 (int)"),
        (lambda cm: cm.wait_for_ticks(timeout=True), "timeout", "True (bool)"),
        (lambda cm: cm.compile(catch_up=math.nan), "catch_up", "nan (float)"),
        (lambda cm: cm.compile(catch_up=-2), "catch_up", "-2 (int)"),
        (lambda cm: cm.hold_compression([], timeout=math.inf), "timeout", "inf (float)"),
        (lambda cm: cm.query_messages(limit=True), "limit", "True (bool)"),
        (lambda cm: cm.query_messages(limit=2.5), "limit", "2.5 (float)"),
        (lambda cm: cm.query_messages(from_time=math.nan), "from_time", "nan (float)"),
        (lambda cm: cm.search_summaries(limit=0), "limit", "0 (int)"),
        (lambda cm: cm.search_summaries(levels=[True]), "levels[0]", "True (bool)"),
        (lambda cm: cm.search_memories("x", limit=True), "limit", "True (bool)"),
        (lambda cm: cm.get_summaries_in_range(level=1.0), "level", "1.0 (float)"),
        (lambda cm: cm.get_messages_at(sequence=True), "sequence", "True (bool)"),
        (lambda cm: cm.get_messages_at(sequence=10**6), "sequence", f"{10**6} (int)"),
        (lambda cm: cm.get_unpresented_messages(after_sequence=-1), "after_sequence", "-1"),
        (lambda cm: cm.handle_recall({"grep": "x"}, max_chars=True), "max_chars", "True (bool)"),
        (lambda cm: cm.recall_tool(max_chars=299), "max_chars", "299 (int)"),
        (lambda cm: cm.derive("x.db", at_sequence=1.0), "at_sequence", "1.0 (float)"),
    ],
)
def test_every_other_number_is_checked_too(call: Any, param: str, shown: str) -> None:
    cm, _ = build()
    with cm:
        refused(cm, ArgumentError, param, shown, lambda: call(cm))


# ------------------------------------------------------------------- 3. injections
@pytest.mark.parametrize("method", ["compile", "preview_context"])
def test_an_injection_that_is_not_an_injection_is_refused_naming_its_index(method: str) -> None:
    cm, _ = build()
    note = Injection.text("notes", "system", "Be brief.")
    with cm:
        error = refused(
            cm,
            ArgumentTypeError,
            "injections[1]",
            "'text' (str)",
            lambda: getattr(cm, method)(max_tokens=2_000, injections=[note, "text"]),
        )
        assert "Injection.text(namespace, position, text)" in str(error)
        for value in ("text", 5, None):
            refused(
                cm,
                ArgumentTypeError,
                "injections",
                repr(value),
                lambda v=value: getattr(cm, method)(injections=v),
            )


def test_an_injection_of_an_unknown_position_is_refused_naming_it() -> None:
    with pytest.raises(ArgumentError, match=r"position must be one of 'system'.*got 'top'"):
        Injection.text("notes", "top", "x")


# ------------------------------------------------------------- 4. tool definitions
@pytest.mark.parametrize(
    ("tools", "kind", "param", "shown"),
    [
        (["a"], ArgumentTypeError, "tools[0]", "'a' (str)"),
        ([{"name": "grep"}, 5], ArgumentTypeError, "tools[1]", "5 (int)"),
        ([{"description": "no name"}], ArgumentError, "tools[0]", "'no name'"),
        ([{"name": ""}], ArgumentError, "tools[0]", "{'name': ''}"),
        ([{"type": "function", "function": {"name": 3}}], ArgumentError, "tools[0]", "3"),
        ([{"name": "x", "input_schema": {1, 2}}], ArgumentError, "tools[0].input_schema", "{"),
        ([{"name": "x", "limit": math.nan}], ArgumentError, "tools[0].limit", "nan"),
        ("grep", ArgumentTypeError, "tools", "'grep' (str)"),
        (5, ArgumentTypeError, "tools", "5 (int)"),
    ],
)
def test_a_tool_definition_that_is_not_one_is_refused_naming_its_index(
    tools: Any, kind: type[Exception], param: str, shown: str
) -> None:
    cm, _ = build()
    with cm:
        cm.set_tool_definitions([{"name": "bash"}])
        error = refused(cm, kind, param, shown, lambda: cm.set_tool_definitions(tools))
        assert "name" in error.accepted or "JSON" in error.accepted or "sequence" in error.accepted


def test_both_tool_shapes_are_accepted() -> None:
    cm, _ = build()
    with cm:
        tools = [{"name": "grep"}, {"type": "function", "function": {"name": "bash"}}]
        cm.set_tool_definitions(tools)
        assert cm.compile(max_tokens=2_000).tools == tools


# --------------------------------------------------------------------------- 5. pins
@pytest.mark.parametrize(
    ("levels", "kind", "param", "shown"),
    [
        ({"level": -1}, ArgumentError, "level", "-1 (int)"),
        ({"level": 10**9}, ArgumentError, "level", f"{10**9} (int)"),
        ({"level": True}, ArgumentTypeError, "level", "True (bool)"),
        ({"level": 1.0}, ArgumentTypeError, "level", "1.0 (float)"),
        ({"max_level": -1}, ArgumentError, "max_level", "-1 (int)"),
        ({"max_level": "2"}, ArgumentTypeError, "max_level", "'2' (str)"),
        ({"level": 2, "max_level": 1}, ArgumentError, "max_level", "1 (int)"),
    ],
)
def test_a_pin_with_levels_no_compile_takes_is_refused_and_nothing_is_stored(
    tmp_path: Path, levels: dict[str, Any], kind: type[Exception], param: str, shown: str
) -> None:
    path = tmp_path / "a.db"
    with _open(path) as cm:
        ids = [cm.add_message("User", f"message {i} " * 5) for i in range(8)]
        error = refused(cm, kind, param, shown, lambda: cm.pin_range(ids[1], ids[2], **levels))
        assert "1048576 (2**20)" in str(error)
        expected = [m.text for m in cm.compile(max_tokens=2_000).messages]
    with _open(path) as cm:  # reopened: nothing of the refused pin is there
        assert cm.list_pins() == []
        assert [m.text for m in cm.compile(max_tokens=2_000).messages] == expected


def test_a_pin_on_an_unknown_message_is_a_key_error_naming_the_parameter() -> None:
    cm, ids = build()
    with cm:
        before = snapshot(cm)
        with pytest.raises(UnknownMessageError) as info:
            cm.pin_range(ids[1], "404")
        assert isinstance(info.value, KeyError) and info.value.param == "last_id"
        assert "'404'" in str(info.value) and snapshot(cm) == before


def _open(path: Path) -> ContextManager:
    return ContextManager.open(
        path=path,
        strategy=folding(),
        summarizer=ExtractiveSummarizer(target_tokens=12),
        counter=CharsCounter(),
    )


@pytest.mark.parametrize(
    "bad",
    [
        {"level": -1, "max_level": None},
        {"level": 10**9, "max_level": None},
        {"level": 2, "max_level": 1},
        {"level": "2", "max_level": None},
    ],
)
def test_a_stored_pin_no_compile_takes_is_left_out_with_a_warning_naming_the_fix(
    tmp_path: Path, bad: dict[str, Any]
) -> None:
    path = tmp_path / "a.db"
    with _open(path) as cm:
        ids = [cm.add_message("User", f"message {i} " * 5) for i in range(8)]
        cm.pin_range(ids[1], ids[2])
        expected = [m.text for m in cm.compile(max_tokens=2_000).messages]
    with Store.open(path) as store:  # the row an older version wrote, which checked nothing
        slot = "default/autobio:pins"
        body = store.get(slot)
        row = {"id": "pin-2", "first": ids[4], "last": ids[5], "name": None, "kind": "range"}
        store.set(slot, {"pins": [*body["pins"], {**row, **bad}], "counter": 2})
    with pytest.warns(IgnoredPinWarning) as told:
        cm = _open(path)
    with cm:
        text = str(told[0].message)
        assert "'pin-2'" in text and "unpin('pin-2')" in text
        assert [p.id for p in cm.list_pins()] == ["pin-1", "pin-2"]  # listed, so it can go
        assert [m.text for m in cm.compile(max_tokens=2_000).messages] == expected
        assert cm.unpin("pin-2")
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # removed: the store opens without a warning
        with _open(path) as cm:
            assert [p.id for p in cm.list_pins()] == ["pin-1"]
            assert [m.text for m in cm.compile(max_tokens=2_000).messages] == expected


# ------------------------------------------------------------ ids, and the roots
@pytest.mark.parametrize(
    ("call", "param"),
    [
        (lambda cm: cm.get_message("404"), "message_id"),
        (lambda cm: cm.edit_message("404", "x"), "message_id"),
        (lambda cm: cm.remove_message("404"), "message_id"),
        (lambda cm: cm.lock_message("404"), "message_id"),
        (lambda cm: cm.remove_messages("404", "1"), "first_id"),
        (lambda cm: cm.add_context_entry("404"), "message_id"),
    ],
)
def test_an_unknown_id_is_a_typed_key_error_naming_the_parameter(call: Any, param: str) -> None:
    cm, _ = build()
    with cm:
        before = snapshot(cm)
        with pytest.raises(UnknownMessageError) as info:
            call(cm)
        assert isinstance(info.value, KeyError) and isinstance(info.value, ContextManagerError)
        assert info.value.param == param and info.value.ids == ("404",)
        assert "'404'" in str(info.value) and snapshot(cm) == before


@pytest.mark.parametrize(
    "call",
    [
        lambda cm: cm.get_message(None),
        lambda cm: cm.ordinal_of(7),
        lambda cm: cm.window_status_of(["1"]),
        lambda cm: cm.lock_message("1", locked="yes"),
        lambda cm: cm.hold_compression("1"),
        lambda cm: cm.switch_branch(None),
        lambda cm: cm.fork(""),
        lambda cm: cm.derive(None),
        lambda cm: cm.set_system_prompt(5),
        lambda cm: cm.reset_head_window(5),
        lambda cm: cm.set_strategy(object()),
    ],
)
def test_a_wrong_type_is_both_a_type_error_and_a_config_error(call: Any) -> None:
    cm, _ = build()
    with cm:
        before = snapshot(cm)
        with pytest.raises(ArgumentError) as info:
            call(cm)
        assert isinstance(info.value, ConfigError) and isinstance(info.value, ValueError)
        assert isinstance(info.value, TypeError) or not isinstance(info.value, ArgumentTypeError)
        assert snapshot(cm) == before


def test_the_library_errors_share_one_root() -> None:
    for error in (StoreError, MessageFormatError, ArgumentError, UnknownMessageError):
        assert issubclass(error, ContextManagerError)
    assert issubclass(ArgumentTypeError, TypeError) and issubclass(ArgumentError, ValueError)


@pytest.mark.parametrize(
    ("kwargs", "param"),
    [
        ({"counter": "chars"}, "counter"),
        ({"summarizer": 5}, "summarizer"),
        ({"strategy": "passthrough"}, "strategy"),
        ({"clock": 1.0}, "clock"),
        ({"namespace": ""}, "namespace"),
        ({"isolate": "yes"}, "isolate"),
        ({"auto_tick": "always"}, "auto_tick"),
        ({"window_tokens": 2.0**20}, "window_tokens"),
        ({"auxiliary_views": [5]}, "auxiliary_views[0]"),
        ({"store": "a.db"}, "store"),
    ],
)
def test_open_refuses_parts_it_cannot_call_and_creates_no_file(
    tmp_path: Path, kwargs: dict[str, Any], param: str
) -> None:
    with pytest.raises(ArgumentError) as info:
        ContextManager.open(path=tmp_path / "a.db", **kwargs)
    assert info.value.param == param
    assert list(tmp_path.iterdir()) == []


def test_exported_functions_check_their_messages() -> None:
    with pytest.raises(ArgumentTypeError, match=r"messages\[0\] must be a Message"):
        enforce_tool_pairs(["hi"])  # type: ignore[list-item]


# ---------------------------------------------------------------------------- fuzz
@pytest.mark.parametrize("method", methods())
@settings(max_examples=FUZZ_EXAMPLES, deadline=None)
@given(data=st.data())
def test_any_arguments_are_accepted_or_refused_with_a_library_error(
    method: str, data: st.DataObject
) -> None:
    drawn = data.draw(calls(method), label="arguments")
    raised = call(method, drawn)
    assert raised is None or isinstance(raised, ContextManagerError), (
        f"{method}(**{drawn!r}) raised {type(raised).__module__}.{type(raised).__name__}: {raised}"
    )
