"""Compiled requests sent through the real Anthropic and OpenAI SDKs to a loopback server.

The server records the wire body; the tests check it against what each API accepts:
roles, tool calls and results, thinking, the system part, the tools and the
prompt-cache marks.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import anthropic
import openai
import pytest

from context_manager import (
    CharsCounter,
    ConfigError,
    ContextManager,
    Message,
    TextBlock,
    ThinkingBlock,
    ToolResultBlock,
    ToolUseBlock,
)
from context_manager.manager import CompileResult, Injection
from context_manager.messages import from_anthropic, from_openai, to_anthropic, to_openai
from tests.support.loopback import LoopbackServer, Reply
from tests.support.provider_replies import anthropic_ok, openai_ok

KEY = "test-key-not-real"
TOOLS = [
    {
        "name": "bash",
        "description": "Run a command",
        "input_schema": {"type": "object", "properties": {"cmd": {"type": "string"}}},
    }
]


@pytest.fixture
def server() -> Iterator[LoopbackServer]:
    s = LoopbackServer()
    s.script("/v1/messages", Reply(anthropic_ok()))
    s.script("/v1/chat/completions", Reply(openai_ok()))
    try:
        yield s
    finally:
        s.close()


def _conversation(cm: ContextManager) -> None:
    cm.add_message("User", "list the files")
    cm.add_message(
        "Claude",
        [
            ThinkingBlock(thinking="ls will do", signature="sig-1"),
            TextBlock(text="Listing."),
            ToolUseBlock(id="call_1", name="bash", input={"cmd": "ls"}),
        ],
    )
    cm.add_message("bash", [ToolResultBlock(tool_use_id="call_1", content="a.py\nb.py")])
    cm.add_message(
        "Claude",
        [ThinkingBlock(thinking="an unsigned thought"), TextBlock(text="Two files.")],
    )
    cm.add_message("User", "thanks")


def _compiled(**options: Any) -> CompileResult:
    with ContextManager.open(path=":memory:", counter=CharsCounter()) as cm:
        cm.set_system_prompt("You are a careful engineer.")
        cm.set_tool_definitions(options.pop("tools", TOOLS))
        _conversation(cm)
        return cm.compile(max_tokens=20_000, reserve_for_response=1_000, **options)


def _marks(body: dict[str, Any]) -> int:
    """``cache_control`` marks anywhere in the system, tools and messages."""
    count = sum("cache_control" in b for b in body.get("system", []))
    count += sum("cache_control" in t for t in body.get("tools", []))
    for message in body["messages"]:
        content = message["content"]
        if isinstance(content, list):
            count += sum("cache_control" in b for b in content)
    return count


def test_an_anthropic_request_goes_through_the_sdk_as_the_api_wants_it(
    server: LoopbackServer,
) -> None:
    injection = Injection.text("notes", "system", "Today is Tuesday.")
    result = _compiled(injections=[injection])
    client = anthropic.Anthropic(api_key=KEY, base_url=server.url, max_retries=0)
    reply = client.messages.create(**result.to_anthropic(model="m", max_tokens=256))
    assert reply.content[0].type == "text"
    [sent] = server.requests_to("/v1/messages")
    body = sent.body
    assert body["model"] == "m" and body["max_tokens"] == 256
    assert [b["text"] for b in body["system"]] == [
        "You are a careful engineer.",
        "Today is Tuesday.",
    ]
    # the mark on the system prompt caches the tools before it too; none on the injection
    assert body["system"][0]["cache_control"] == {"type": "ephemeral"}
    assert "cache_control" not in body["system"][1]
    assert [t["name"] for t in body["tools"]] == ["bash"]
    assert "cache_control" not in body["tools"][0]
    roles = [m["role"] for m in body["messages"]]
    assert roles == ["user", "assistant", "user", "assistant", "user"]
    first_reply = body["messages"][1]["content"]
    assert [b["type"] for b in first_reply] == ["thinking", "text", "tool_use"]
    assert first_reply[0]["signature"] == "sig-1"
    assert first_reply[2]["input"] == {"cmd": "ls"}
    result_block = body["messages"][2]["content"][0]
    assert result_block["type"] == "tool_result" and result_block["tool_use_id"] == "call_1"
    # an unsigned thinking block is refused by the API: it is not sent
    assert [b["type"] for b in body["messages"][3]["content"]] == ["text"]
    # the last message carries a mark, and all of them stay within the API's four
    assert "cache_control" in body["messages"][-1]["content"][-1]
    assert 2 <= _marks(body) <= 4


def test_marks_never_exceed_four_with_many_breakpoints() -> None:
    result = _compiled()
    crowded = CompileResult(
        result.messages,
        [],
        {},
        list(range(len(result.messages)))[-4:],
        system_prompt="sys",
        tools=list(TOOLS),
    )
    request = crowded.to_anthropic()
    assert _marks(request) == 4
    assert "cache_control" in request["system"][0]
    # no system prompt: the last tool carries the mark instead
    bare = CompileResult(result.messages, [], {}, [len(result.messages) - 1], tools=list(TOOLS))
    request = bare.to_anthropic(cache_ttl="1h")
    assert "system" not in request
    assert request["tools"][-1]["cache_control"] == {"type": "ephemeral", "ttl": "1h"}
    assert _marks(bare.to_anthropic(cache=False)) == 0


def test_an_openai_request_goes_through_the_sdk(server: LoopbackServer) -> None:
    injection = Injection.text("notes", "system", "Today is Tuesday.")
    result = _compiled(injections=[injection])
    client = openai.OpenAI(api_key=KEY, base_url=server.url + "/v1", max_retries=0)
    reply = client.chat.completions.create(**result.to_openai(model="gpt-test"))
    assert reply.choices[0].message.content == "I remember the fix."
    [sent] = server.requests_to("/v1/chat/completions")
    body = sent.body
    assert body["model"] == "gpt-test"
    messages = body["messages"]
    assert messages[0] == {
        "role": "system",
        "content": "You are a careful engineer.\n\nToday is Tuesday.",
    }
    assert [m["role"] for m in messages] == [
        "system",
        "user",
        "assistant",
        "tool",
        "assistant",
        "user",
    ]
    call = messages[2]["tool_calls"][0]
    assert call["id"] == "call_1" and call["function"]["name"] == "bash"
    assert messages[3] == {"role": "tool", "tool_call_id": "call_1", "content": "a.py\nb.py"}
    assert messages[4]["content"] == "Two files."  # no thinking on this wire
    assert body["tools"][0]["function"]["name"] == "bash"


def test_params_that_the_request_builds_are_refused() -> None:
    result = _compiled()
    with pytest.raises(ConfigError, match="builds messages"):
        result.to_anthropic(messages=[])
    with pytest.raises(ConfigError, match="builds tools"):
        result.to_openai(tools=[])


def test_no_tools_means_no_tools_field() -> None:
    result = _compiled(tools=[])
    assert "tools" not in result.to_anthropic()
    assert "tools" not in result.to_openai()


def test_one_participant_convention_across_the_converters() -> None:
    chat = [
        {"role": "user", "content": "hi"},
        {"role": "assistant", "content": "hello"},
        {"role": "user", "content": "bye"},
    ]
    messages = from_openai(chat)
    assert [m.participant for m in messages] == ["User", "Claude", "User"]
    # the pair is not merged into one user turn
    assert [m["role"] for m in to_anthropic(messages)] == ["user", "assistant", "user"]
    assert [m["role"] for m in to_openai(messages)] == ["user", "assistant", "user"]
    back = from_anthropic(to_anthropic(messages))
    assert [m.participant for m in back] == ["User", "Claude", "User"]


def test_what_the_api_refuses_is_left_out() -> None:
    messages = [
        Message.text_message("User", "  "),  # whitespace only: no block, no turn
        Message(
            participant="User",
            content=(ThinkingBlock(thinking="not the agent's", signature="s"),),
        ),
        Message.text_message("User", "the task"),
        Message(participant="Claude", content=(ThinkingBlock(thinking="unsigned"),)),
        Message.text_message("Claude", "done"),
    ]
    out = to_anthropic(messages, cache_breakpoints=[0, 4])
    assert out == [
        {"role": "user", "content": [{"type": "text", "text": "the task"}]},
        {
            "role": "assistant",
            "content": [{"type": "text", "text": "done", "cache_control": {"type": "ephemeral"}}],
        },
    ]
