"""The exact-value extractor (context_manager.exact_values) on real agent data: a
tau-bench tool result in JSON, a SWE-agent shell output and a stack trace (taken from
the trajectories in the shared data), its ranking, its cap and its determinism. Every
expected value is worked out by hand from the rules in the module's docstring."""

from __future__ import annotations

import re

from hypothesis import given, settings
from hypothesis import strategies as st

from context_manager import Message, TextBlock, ToolResultBlock, ToolUseBlock
from context_manager.exact_values import (
    _VALUE,
    _counts,
    _in_prose,
    _trim,
    cap_values,
    extract_values,
    merge_values,
    rank_values,
    render_values,
    text_values,
    with_values,
)
from tests.support.memory_values import RESERVATION

# RESERVATION: a tau-bench airline get_reservation_details result (verbatim)

# SWE-agent (pydicom-1458), the output of find_file (verbatim)
FIND_FILE = (
    'Found 3 matches for "numpy_handler.py" in /pydicom__pydicom:\n'
    "/pydicom__pydicom/pydicom/overlays/numpy_handler.py\n"
    "/pydicom__pydicom/pydicom/pixel_data_handlers/numpy_handler.py\n"
    "/pydicom__pydicom/pydicom/waveforms/numpy_handler.py\n"
    "\n"
    "(Open file: /pydicom__pydicom/reproduce_bug.py)\n"
    "(Current directory: /pydicom__pydicom)\n"
    "bash-$"
)

# SWE-agent (pydicom-1458), running the reproduction script (verbatim)
TRACEBACK = """Traceback (most recent call last):
  File "/pydicom__pydicom/reproduce_bug.py", line 17, in <module>
    result = np.array_equal(ds.pixel_array, pixel_array)
  File "/pydicom__pydicom/pydicom/dataset.py", line 836, in __getattr__
    return object.__getattribute__(self, name)
  File "/pydicom__pydicom/pydicom/dataset.py", line 1882, in pixel_array
    self.convert_pixel_data()
  File "/pydicom__pydicom/pydicom/dataset.py", line 1444, in convert_pixel_data
    self._convert_pixel_data_without_handler()
  File "/pydicom__pydicom/pydicom/dataset.py", line 1556, in _convert_pixel_data_without_handler
    raise last_exception  # type: ignore[misc]
  File "/pydicom__pydicom/pydicom/dataset.py", line 1536, in _convert_pixel_data_without_handler
    self._do_pixel_data_conversion(handler)
  File "/pydicom__pydicom/pydicom/dataset.py", line 1563, in _do_pixel_data_conversion
    arr = handler.get_pixeldata(self)
  File "/pydicom__pydicom/pydicom/pixel_data_handlers/numpy_handler.py", line 293, in get_pixeldata
    raise AttributeError(
AttributeError: Unable to convert the pixel data as the following required elements are missing from the dataset: PixelRepresentation

(Open file: /pydicom__pydicom/reproduce_bug.py)
(Current directory: /pydicom__pydicom)
bash-$"""  # noqa: E501


def call(name: str, tool_input: dict[str, object], call_id: str = "c1") -> Message:
    return Message(
        participant="Claude", content=(ToolUseBlock(id=call_id, name=name, input=tool_input),)
    )


def result(text: str, call_id: str = "c1") -> Message:
    return Message(
        participant="User", content=(ToolResultBlock(tool_use_id=call_id, content=text),)
    )


# ------------------------------------------------------------------ real snippets
def test_a_tau_bench_json_result_keeps_its_ids_and_dates_not_its_keys() -> None:
    messages = [
        call("get_reservation_details", {"reservation_id": "JG7FMM"}),
        result(RESERVATION),
    ]
    # JG7FMM is the call's argument (first); then the codes of the result (identifying,
    # longest first up to 16 characters, then in order), then its dates (the timestamp
    # first: longer); MCO, BOS, one_way and the keys (address1, ...) are no values, and
    # 1859, 7136, 3 and 0 are bare integers of fewer than 5 digits.
    assert extract_values(messages) == [
        "JG7FMM",
        "credit_card_2929732",
        "omar_davis_3817",
        "HAT028",
        "HAT277",
        "2024-05-11T08:28:51",
        "2024-05-21",
        "1982-10-19",
        "1950-05-04",
    ]


def test_a_swe_agent_shell_output_keeps_its_paths_after_the_command() -> None:
    messages = [call("bash", {"command": 'find_file "numpy_handler.py"'}), result(FIND_FILE)]
    # The command is the argument, kept whole; the file name is in the call too, but
    # seen 5 times (then less rare); the paths follow in order. /pydicom__pydicom (one
    # segment, no extension) is no path worth keeping.
    assert extract_values(messages) == [
        'find_file "numpy_handler.py"',
        "numpy_handler.py",
        "/pydicom__pydicom/pydicom/overlays/numpy_handler.py",
        "/pydicom__pydicom/pydicom/pixel_data_handlers/numpy_handler.py",
        "/pydicom__pydicom/pydicom/waveforms/numpy_handler.py",
        "/pydicom__pydicom/reproduce_bug.py",
    ]


def test_a_stack_trace_ranks_the_path_on_every_frame_last() -> None:
    messages = [call("bash", {"command": "python reproduce_bug.py"}), result(TRACEBACK)]
    # dataset.py is on six frames: the rarest paths go first; line numbers are small
    # integers, the exception and attribute names no values.
    assert extract_values(messages) == [
        "python reproduce_bug.py",
        "reproduce_bug.py",
        "/pydicom__pydicom/reproduce_bug.py",
        "/pydicom__pydicom/pydicom/pixel_data_handlers/numpy_handler.py",
        "/pydicom__pydicom/pydicom/dataset.py",
    ]


def test_values_the_prose_already_holds_are_dropped() -> None:
    messages = [call("bash", {"command": "python reproduce_bug.py"}), result(TRACEBACK)]
    prose = "I ran python reproduce_bug.py and it failed in dataset.py."
    assert extract_values(messages, prose=prose) == [
        "/pydicom__pydicom/reproduce_bug.py",
        "/pydicom__pydicom/pydicom/pixel_data_handlers/numpy_handler.py",
        "/pydicom__pydicom/pydicom/dataset.py",
    ]


# ------------------------------------------------------------------------ kinds
def test_each_kind_of_value_in_a_text() -> None:
    text = (
        "See https://example.com/a/b?x=1. Mail ops@example.org by May 20th, 2024 at "
        "10:30 AM. Took 300 ms and 12.5 kg; cost €99.50 or $1,250. Commit 9fceb02d; id "
        "123e4567-e89b-12d3-a456-426614174000; v2.3.1; on 2024-05-15 15:00:00; "
        "src/app/main.py and C:\\Users\\ann\\report.docx; line 42; arr2 float32 1st; "
        "order 4421486; disk at 93%."
    )
    assert text_values(text) == [
        "https://example.com/a/b?x=1",
        "ops@example.org",
        "May 20th, 2024",
        "10:30 AM",
        "300 ms",
        "12.5 kg",
        "€99.50",
        "$1,250",
        "9fceb02d",
        "123e4567-e89b-12d3-a456-426614174000",
        "v2.3.1",
        "2024-05-15 15:00:00",
        "src/app/main.py",
        "C:\\Users\\ann\\report.docx",
        "4421486",
        "93%",
    ]


def test_codes_mix_letters_and_digits_with_a_capital_or_three_digits() -> None:
    assert text_values("HAT123 T-48213-C ZFA04Y mia_li_3668 abc12 step10 x86_64 utf8 A1") == [
        "HAT123",
        "T-48213-C",
        "ZFA04Y",
        "mia_li_3668",
    ]


def test_tool_arguments_keep_scalars_but_not_small_integers_or_flags() -> None:
    message = call(
        "edit",
        {"line": 293, "count": 5, "ratio": 0.75, "force": True, "note": None, "to": "ab"},
    )
    # numbers rank as numbers: the longer first
    assert extract_values([message]) == ["0.75", "293"]


# ---------------------------------------------------------------------- ranking
def test_user_turns_rank_before_tool_results_and_arguments_before_both() -> None:
    messages = [
        Message.text_message("User", "Move my booking ZFA04Y, please."),
        call("search", {"flight": "HAT136"}),
        result("HAT136 and HAT170 are free; see ticket T-48213-C."),
    ]
    assert extract_values(messages) == ["HAT136", "ZFA04Y", "T-48213-C", "HAT170"]


def test_a_value_on_every_log_line_ranks_after_rare_ones() -> None:
    log = "\n".join(f"worker W-2001 ok batch {n}" for n in range(6)) + "\nfailed job J-77410"
    # W-2001 is on six lines (the rarest class of three and more), J-77410 once.
    assert extract_values([result(log)]) == ["J-77410", "W-2001"]


def test_longer_values_rank_first_then_first_seen() -> None:
    text = "codes AB12 then ABCD-1234 then XY99 then LONGER-CODE-2024-X1"
    # identifying codes, by length up to 16 characters, ties in order of occurrence
    assert extract_values([result(text)]) == ["LONGER-CODE-2024-X1", "ABCD-1234", "AB12", "XY99"]


def test_rank_values_keeps_only_what_it_is_given() -> None:
    messages = [Message.text_message("User", "Ticket T-1234-A."), result("Build 7f3a9c1 failed.")]
    ranked = rank_values(["7f3a9c1", "T-1234-A", "GONE-0001"], messages)
    # the user's value, then the found one, then the one no message holds any more
    assert ranked == ["T-1234-A", "7f3a9c1", "GONE-0001"]


def test_merge_values_is_the_union_re_ranked() -> None:
    messages = [
        result("ticket T-48213-C"),
        call("deploy", {"build": "B-2024-77"}),
        result("deployed B-2024-77 and 9fceb02"),
    ]
    merged = merge_values([["T-48213-C", "9fceb02"], ["B-2024-77", "T-48213-C"]], messages)
    assert merged == ["B-2024-77", "T-48213-C", "9fceb02"]


# ---------------------------------------------------------------- cap and render
def test_the_cap_takes_values_in_rank_order_while_the_line_fits() -> None:
    values = ["/repo/src/x.py", "x.py", "HAT123", "12.5 kg", "AB12"]
    # chars / 4: 'Exact values: /repo/src/x.py' is 28 characters (7 tokens); x.py is in
    # it; '; HAT123' makes 36 (9); '; 12.5 kg' would make 45 (12 > 10); '; AB12' makes
    # 42 (11 > 10) too.
    assert cap_values(values, 10) == ("/repo/src/x.py", "HAT123")
    assert cap_values(values, 12) == ("/repo/src/x.py", "HAT123", "12.5 kg")
    # at 6, the path does not fit: x.py (18 characters, 5 tokens) does, then AB12 (24)
    assert cap_values(values, 6) == ("x.py", "AB12")
    assert cap_values(values, 0) == ()


def test_the_cap_counts_with_the_given_counter() -> None:
    words = len  # one token per character
    assert cap_values(["HAT123", "AB12"], 20, words) == ("HAT123",)
    assert cap_values(["HAT123", "AB12"], 26, words) == ("HAT123", "AB12")


def test_a_value_holding_the_separator_is_never_shown() -> None:
    assert cap_values(["cd /repo; make", "HAT123"], 100) == ("HAT123",)


def test_the_line_format() -> None:
    assert render_values(["HAT123", "/repo/src/x.py", "12.5 kg"]) == (
        "Exact values: HAT123; /repo/src/x.py; 12.5 kg"
    )
    assert with_values("Booked.", ["HAT123"]) == "Booked.\nExact values: HAT123"
    assert with_values("Booked.", []) == "Booked."


# ------------------------------------------------------------------ determinism
def test_the_same_messages_give_the_same_values() -> None:
    def build() -> list[Message]:
        return [
            Message.text_message("User", "Check reservation JG7FMM."),
            call("get_reservation_details", {"reservation_id": "JG7FMM"}),
            result(RESERVATION),
            call("bash", {"command": "python reproduce_bug.py"}, "c2"),
            result(TRACEBACK, "c2"),
        ]

    first = extract_values(build())
    assert first == extract_values(build()) == extract_values(build())
    # all three are in calls; JG7FMM and reproduce_bug.py are seen three times each
    assert first[:3] == ["python reproduce_bug.py", "reproduce_bug.py", "JG7FMM"]


def test_a_result_of_text_blocks_is_read_like_a_string() -> None:
    blocks = Message(
        participant="User",
        content=(
            ToolResultBlock(
                tool_use_id="c1",
                content=[TextBlock(text="saved /srv/out/report.csv"), TextBlock(text="id 9fceb02")],
            ),
        ),
    )
    assert extract_values([blocks]) == ["/srv/out/report.csv", "9fceb02"]


def test_a_blob_is_no_value() -> None:
    blob = "QUJD/REVG/" * 30  # 300 characters of base64 that read as a relative path
    assert text_values(f"data {blob} at /srv/app/out.bin") == ["/srv/app/out.bin"]


# Texts built from the pieces values are made of and the words around them: letters,
# digits, the symbols that start or join values, month names and spaces.
_PIECES = st.sampled_from(
    [
        "the",
        "May",
        "Booked",
        "I",
        "AM",
        "pm",
        "of",
        "x",
        "abc",
        "Foo",
        "http",
        "file",
        "12",
        "2024",
        "20th",
        "3",
        "123456",
        "9fceb02",
        "HAT123",
        "a1",
        ":",
        "://",
        "/",
        "\\",
        ".",
        ".py",
        ",",
        ";",
        "!",
        "?",
        "(",
        ")",
        "[",
        "]",
        "{",
        "}",
        '"',
        "'",
        "@",
        "-",
        "_",
        "+",
        "$",
        "€",
        "%",
        "~",
        "é",
        "\n",
        " ",
        " ",
        " ",
        "C:",
        "usr",
        "ms",
        "May 20",
        "on May 20th, 2024",
        "20 of May",
        "10:30 AM",
        "at 9 pm",
        "1,250 USD",
        "300 ms",
        "/usr/lib/x.py",
        "src/app.py",
        "foo-bar",
        "a+b@mail.io",
        "git://h/r",
        "x.com",
        "v1.2.3",
        "deadbeef",
        "ZFA04Y",
        "mia_li_3668",
        "C:\\Users\\a.txt",
    ]
)


def _values_of_every_alternative(text: str, min_digits: int = 5) -> list[str]:
    """text_values as it reads without the pass over plain words: every alternative of
    the value pattern tried at every position it reaches."""
    found: dict[str, None] = {}
    for match in _VALUE.finditer(text):
        kind, value = match.lastgroup, match.group()
        if kind in ("url", "abspath", "relpath", "winpath", "monthdate", "money", "time"):
            value = _trim(value)
        if value and _counts(kind, value, min_digits):
            found.setdefault(value, None)
    return list(found)


@settings(max_examples=400, derandomize=True, deadline=None)
@given(st.lists(_PIECES, max_size=40).map("".join), st.sampled_from([3, 5]))
def test_passing_over_plain_words_finds_the_same_values(text: str, min_digits: int) -> None:
    assert text_values(text, min_digits=min_digits) == _values_of_every_alternative(
        text, min_digits
    )


_WORDY = st.text(alphabet="ab1_ .-é٣\u0301", max_size=12)


@settings(max_examples=500, derandomize=True, deadline=None)
@given(st.text(alphabet="ab1_ .-é٣\u0301", min_size=1, max_size=3), _WORDY)
def test_a_value_is_in_the_prose_when_it_stands_there_as_a_whole_word(
    value: str, prose: str
) -> None:
    whole = re.search(rf"(?<!\w){re.escape(value)}(?!\w)", prose) is not None
    assert _in_prose(value, prose) == whole
