"""The byte-heuristic estimate, count_tokens and request validation."""

from __future__ import annotations

import json
from typing import Any

import pytest

from context_manager.assembly import AssemblyError, count_tokens
from context_manager.assembly.estimate import function_tokens, message_tokens
from context_manager.assembly.wire import AgentFunction, UserMessage
from tests.support.assembly_fixtures import (
    assistant,
    call,
    custom,
    image,
    inline_result,
    result,
    text,
    user,
)

MODEL = {"id": "any-model"}
HELLO = {"role": "user", "content": [{"type": "text", "text": "hello"}], "timestamp": 1001}


def tokens_of(*messages: dict[str, Any], **extra: Any) -> int:
    return count_tokens({"messages": list(messages), "model": MODEL, **extra}).tokens


def test_the_75_byte_example_is_18_tokens() -> None:
    raw = '{"role":"user","content":[{"type":"text","text":"hello"}],"timestamp":1001}'
    assert len(raw.encode()) == 75
    assert tokens_of(HELLO) == 18
    assert message_tokens(UserMessage.model_validate(HELLO)) == 18


def test_utf8_bytes_not_characters_are_counted() -> None:
    # "héllo" is 6 bytes: the compact JSON grows from 75 to 76 bytes -> 19 tokens.
    assert tokens_of({**HELLO, "content": [text("héllo")]}) == 19
    # four 4-byte characters: 75 - 5 + 16 = 86 bytes -> 21 tokens; non-ASCII stays raw.
    assert tokens_of({**HELLO, "content": [text("😀😀😀😀")]}) == 21


def test_an_image_costs_4096_whatever_its_size() -> None:
    blank = (
        '{"role":"user","content":[{"type":"image","mime":"image/png","data":""}],"timestamp":1}'
    )
    expected = len(blank) // 4 + 4096
    small = user(image("AAAA"), ts=1)
    screenshot = user(image("A" * 729_420), ts=1)
    assert tokens_of(small) == expected
    assert tokens_of(screenshot) == expected


def test_images_inside_inline_results_are_priced_too() -> None:
    msg = user(inline_result("c1", image("B" * 10_000)), ts=1)
    blank = (
        '{"role":"user","content":[{"type":"function_result","function_call_id":"c1",'
        '"content":[{"type":"image","mime":"image/png","data":""}]}],"timestamp":1}'
    )
    assert tokens_of(msg) == len(blank) // 4 + 4096


def test_result_details_are_nulled_unless_denied() -> None:
    base = result("c1", "read", "ok", details=None, ts=1)
    plain = tokens_of(base)
    with_details = {**base, "details": {"blob": "x" * 5000}}
    assert tokens_of(with_details) == plain
    denied = {**base, "details": {"status": "denied", "reason": "no"}}
    raw = json.dumps(denied, separators=(",", ":"), ensure_ascii=False)
    assert tokens_of(denied) == len(raw.encode()) // 4 > plain


def test_field_order_and_absent_optionals() -> None:
    m = assistant("hi", ts=5)
    raw = (
        '{"role":"assistant","content":[{"type":"text","text":"hi"}],"stop_reason":"end_turn",'
        '"model":"m","provider":"p","timestamp":5}'
    )
    assert tokens_of(m) == len(raw) // 4
    r = result("c", "f", "x", ts=2)
    r_raw = (
        '{"role":"function_result","function_call_id":"c","function_id":"f",'
        '"content":[{"type":"text","text":"x"}],"details":null,"is_error":false,"timestamp":2}'
    )
    assert tokens_of({k: v for k, v in r.items() if k not in ("details", "is_error")}) == (
        len(r_raw) // 4
    )


def test_tool_tokens_are_compact_json_over_four() -> None:
    tool = {"name": "read_file", "description": "Read a file", "parameters": {"type": "object"}}
    raw = '{"name":"read_file","description":"Read a file","parameters":{"type":"object"}}'
    assert function_tokens(AgentFunction.model_validate(tool)) == len(raw) // 4
    out = count_tokens({"messages": [HELLO], "model": MODEL, "tools": [tool]})
    assert out.tools_tokens == len(raw) // 4
    assert out.tokens == 18 + len(raw) // 4


def test_count_tokens_counts_customs_and_reconciles() -> None:
    messages = [HELLO, custom("memo text", ts=1), assistant("sure", ts=2)]
    out = count_tokens(
        {
            "messages": messages,
            "model": MODEL,
            "system_prompt": "You are kind.",
            "parts": {"a": "x" * 40},
        }
    )
    roles = out.by_role
    assert roles.custom > 0 and roles.user == 18
    assert out.tokens == roles.user + roles.assistant + roles.function_result + roles.custom + 3
    assert out.by_part == {"a": 10}  # reported, never added
    dumped = out.model_dump(exclude_none=True)
    assert "tools_tokens" not in dumped
    assert dumped["estimator"] == "heuristic"


def test_count_tokens_omits_by_part_without_parts() -> None:
    dumped = count_tokens({"messages": [], "model": MODEL}).model_dump(exclude_none=True)
    assert dumped == {
        "tokens": 0,
        "by_role": {"user": 0, "assistant": 0, "function_result": 0, "custom": 0},
        "estimator": "heuristic",
    }


@pytest.mark.parametrize("messages", [None, "absent"])
def test_messages_are_required(messages: Any) -> None:
    request: dict[str, Any] = {"model": MODEL}
    if messages is None:
        request["messages"] = None
    with pytest.raises(AssemblyError) as err:
        count_tokens(request)
    assert err.value.code == "context/invalid_request"
    assert str(err.value) == "context/invalid_request: messages is required"


def test_unknown_role_is_rejected_naming_the_field() -> None:
    with pytest.raises(AssemblyError) as err:
        count_tokens(
            {"messages": [{"role": "robot", "content": [], "timestamp": 1}], "model": MODEL}
        )
    assert err.value.code == "context/invalid_request"
    assert "messages.0" in err.value.message and "robot" in err.value.message


def test_missing_model_is_named() -> None:
    with pytest.raises(AssemblyError) as err:
        count_tokens({"messages": [HELLO]})
    assert err.value.message.startswith("invalid request: model:")


def test_wrong_type_names_the_field() -> None:
    bad = {**HELLO, "timestamp": "yesterday"}
    with pytest.raises(AssemblyError) as err:
        count_tokens({"messages": [bad], "model": MODEL})
    assert "messages.0.user.timestamp" in err.value.message
    assert "send an integer" in err.value.message


def test_unknown_request_fields_are_ignored() -> None:
    assert count_tokens({"messages": [HELLO], "model": MODEL, "trace_id": "x"}).tokens == 18


def test_inline_call_and_result_blocks_round_trip() -> None:
    msgs = [
        assistant(call("c1", "f", {"a": None}), ts=1),
        user(inline_result("c1", text("r")), ts=2),
    ]
    out = count_tokens({"messages": msgs, "model": MODEL})
    raw = [json.dumps(m, separators=(",", ":")) for m in msgs]
    assert out.tokens == sum(len(r) // 4 for r in raw)
