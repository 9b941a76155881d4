"""The numbers every token estimate returns, pinned on inputs worked out by hand.

Both the library's counters (:mod:`context_manager.tokens`, over :class:`Message`) and
the assembly's estimate (:mod:`context_manager.assembly.estimate`, over wire messages)
price text as ``floor(UTF-8 bytes / 4)`` and a message as that of its compact JSON with
image data blanked, plus a fixed price per image. The expected JSON is spelled out here
so that a change of either estimate shows.
"""

from __future__ import annotations

import math

from context_manager.assembly import estimate
from context_manager.assembly.estimate import (
    Estimator,
    function_tokens,
    is_char_boundary,
    is_denied,
    message_tokens,
    result_tokens,
    text_bytes,
    text_tokens,
)
from context_manager.assembly.wire import (
    AgentFunction,
    FunctionResultBlock,
    FunctionResultMessage,
    ImageBlock,
    TextBlock,
    UserMessage,
)
from context_manager.messages import ImageBlock as LibImage
from context_manager.messages import Message, ToolResultBlock, ToolUseBlock
from context_manager.messages import TextBlock as LibText
from context_manager.tokens import (
    HEURISTIC_IMAGE_TOKENS,
    IMAGE_TOKENS,
    PER_MESSAGE_TOKENS,
    ByteHeuristicCounter,
    CharsCounter,
    TiktokenCounter,
    compact_json,
    heuristic_text_tokens,
    utf8_length,
)


def bytes_of(raw: str) -> int:
    return len(raw.encode("utf-8"))


# ------------------------------------------------------------------ constants and text
def test_the_prices_are_fixed() -> None:
    assert (IMAGE_TOKENS, HEURISTIC_IMAGE_TOKENS, PER_MESSAGE_TOKENS) == (1600, 4096, 4)
    assert estimate.IMAGE_TOKENS == 4096


def test_text_is_utf8_bytes_over_four_rounded_down() -> None:
    cases = {"": 0, "abc": 0, "abcd": 1, "hello": 1, "éé": 1, "😀": 1, "😀😀😀": 3, "x" * 41: 10}
    for text, tokens in cases.items():
        assert heuristic_text_tokens(text) == tokens
        assert text_tokens(text) == tokens
    assert [utf8_length(t) for t in ("", "hello", "éé", "😀", "\ud800")] == [0, 5, 4, 4, 3]
    assert [text_bytes(t) for t in ("", "hello", "éé", "😀", "\ud800")] == [0, 5, 4, 4, 3]
    assert compact_json({"a": [1, "é"], "b": None}) == '{"a":[1,"é"],"b":null}'


def test_cut_points_and_denials() -> None:
    raw = "aé".encode()
    assert [is_char_boundary(raw, at) for at in range(-1, 5)] == [
        True,
        True,
        True,
        False,
        True,
        True,
    ]
    assert is_denied({"status": "denied", "reason": "no"})
    assert not is_denied({"status": "ok"}) and not is_denied(None) and not is_denied("denied")


# ------------------------------------------------------------------ library messages
def test_byte_heuristic_counter_on_messages() -> None:
    h = ByteHeuristicCounter()
    assert h.count_text("hello") == 1
    m = Message.text_message("User", "x" * 10)
    assert h.count_message(m) == 17  # 70 bytes
    accented = Message.text_message("User", "héllo")
    assert h.count_message(accented) == 16  # 66 bytes
    call = Message(participant="Claude", content=(ToolUseBlock(id="t", name="ls", input={"p": 1}),))
    raw = (
        '{"participant":"Claude","content":[{"type":"tool_use","id":"t","name":"ls",'
        '"input":{"p":1}}]}'
    )
    assert h.count_message(call) == bytes_of(raw) // 4 == 23


def test_byte_heuristic_counter_blanks_images() -> None:
    h = ByteHeuristicCounter()
    png = Message(participant="User", content=(LibImage(media_type="image/png", data="A" * 999),))
    raw = '{"participant":"User","content":[{"type":"image","media_type":"image/png","data":""}]}'
    assert h.count_message(png) == bytes_of(raw) // 4 + 4096 == 21 + 4096
    # an image by url has no data: a blank one is added after its other fields
    url = Message(participant="User", content=(LibImage(url="https://e.x/a.png"),))
    raw = '{"participant":"User","content":[{"type":"image","url":"https://e.x/a.png","data":""}]}'
    assert h.count_message(url) == bytes_of(raw) // 4 + 4096 == 21 + 4096
    nested = Message(
        participant="bash",
        content=(
            ToolResultBlock(
                tool_use_id="t",
                content=[LibText(text="ok"), LibImage(media_type="image/png", data="AAAA")],
            ),
        ),
    )
    raw = (
        '{"participant":"bash","content":[{"type":"tool_result","tool_use_id":"t",'
        '"content":[{"type":"text","text":"ok"},{"type":"image","media_type":"image/png",'
        '"data":""}],"is_error":false}]}'
    )
    assert h.count_message(nested) == bytes_of(raw) // 4 + 4096 == 46 + 4096
    text_result = Message(
        participant="bash", content=(ToolResultBlock(tool_use_id="t", content="data"),)
    )
    raw = (
        '{"participant":"bash","content":[{"type":"tool_result","tool_use_id":"t",'
        '"content":"data","is_error":false}]}'
    )
    assert h.count_message(text_result) == bytes_of(raw) // 4 == 27


def test_chars_and_tiktoken_counters_price_images_at_1600() -> None:
    chars = CharsCounter()
    assert [chars.count_text(t) for t in ("", "a", "abcd", "abcde")] == [0, 1, 1, 2]
    png = Message(participant="User", content=(LibImage(media_type="image/png", data="AAAA"),))
    assert chars.count_message(png) == math.ceil(len("[image]") / 4) + 1600 == 1602
    both = Message(
        participant="bash",
        content=(
            ToolResultBlock(
                tool_use_id="t",
                content=[LibText(text="hello"), LibImage(media_type="image/png", data="A")],
            ),
            LibImage(url="https://e.x/a.png"),
        ),
    )
    assert chars.count_message(both) == math.ceil(len("hello\n[image]\n[image]") / 4) + 3200
    exact = TiktokenCounter()
    assert exact.count_message(both) == 4 + exact.count_text(both.text) + 3200


# ------------------------------------------------------------------ wire messages
def test_wire_message_estimates() -> None:
    hello = UserMessage(content=(TextBlock(text="hello"),), timestamp=1001)
    assert message_tokens(hello) == 18  # 75 bytes
    assert message_tokens(hello, len) == 75
    png = UserMessage(
        content=(ImageBlock(mime="image/png", data="A" * 999, attachment_id="a1"),), timestamp=1
    )
    raw = (
        '{"role":"user","content":[{"type":"image","mime":"image/png","data":"",'
        '"attachment_id":"a1"}],"timestamp":1}'
    )
    assert message_tokens(png) == bytes_of(raw) // 4 + 4096 == 27 + 4096
    inline = UserMessage(
        content=(
            FunctionResultBlock(
                function_call_id="c",
                content=(TextBlock(text="ok"), ImageBlock(mime="image/png", data="AAAA")),
            ),
        ),
        timestamp=2,
    )
    raw = (
        '{"role":"user","content":[{"type":"function_result","function_call_id":"c",'
        '"content":[{"type":"text","text":"ok"},{"type":"image","mime":"image/png",'
        '"data":""}]}],"timestamp":2}'
    )
    assert message_tokens(inline) == bytes_of(raw) // 4 + 4096 == 44 + 4096


def test_wire_result_details_are_nulled_unless_denied() -> None:
    def result(details: object) -> FunctionResultMessage:
        return FunctionResultMessage(
            function_call_id="c",
            function_id="f",
            content=(TextBlock(text="x"), ImageBlock(mime="image/png", data="AA")),
            details=details,
            timestamp=3,
        )

    raw = (
        '{"role":"function_result","function_call_id":"c","function_id":"f",'
        '"content":[{"type":"text","text":"x"},{"type":"image","mime":"image/png","data":""}],'
        '"details":null,"is_error":false,"timestamp":3}'
    )
    assert message_tokens(result(None)) == bytes_of(raw) // 4 + 4096 == 49 + 4096
    assert message_tokens(result({"blob": "y" * 999})) == 49 + 4096
    denied = raw.replace('"details":null', '"details":{"status":"denied"}')
    assert message_tokens(result({"status": "denied"})) == bytes_of(denied) // 4 + 4096
    assert bytes_of(denied) // 4 == 53


def test_wire_functions_results_and_the_memo() -> None:
    tool = AgentFunction(name="ls", description="List", parameters={"type": "object"})
    raw = '{"name":"ls","description":"List","parameters":{"type":"object"}}'
    assert function_tokens(tool) == bytes_of(raw) // 4 == 16
    assert function_tokens(tool, len) == bytes_of(raw)
    content = (TextBlock(text="abcd"), TextBlock(text="efgh"), ImageBlock(mime="m", data="A"))
    assert result_tokens(content) == len("abcd\nefgh") // 4 + 4096 == 4098
    hello = UserMessage(content=(TextBlock(text="hello"),), timestamp=1001)
    memo = Estimator()
    assert memo.text("abcdefgh") == 2
    assert memo.message(hello) == 18 and memo.total([hello, hello]) == 36
    exact = Estimator(len)
    assert exact.text("abc") == 3 and exact.total([hello]) == 75
