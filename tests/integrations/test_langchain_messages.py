"""The one conversion between our messages and LangChain's
(:mod:`context_manager.integrations.langchain_messages`); the middleware and the
benchmark's peers using it are tested in test_integrations_langchain.py."""

from __future__ import annotations

import json
from typing import Any

import pytest

pytest.importorskip("langchain_core")

from langchain_core.messages import AIMessage, ChatMessage, HumanMessage, SystemMessage, ToolMessage

from context_manager.integrations.langchain_messages import (
    PARTICIPANT,
    from_langchain,
    to_langchain,
)
from context_manager.integrations.parts import CONTINUES, SOURCE
from context_manager.messages import (
    ImageBlock,
    Message,
    TextBlock,
    ThinkingBlock,
    ToolResultBlock,
    ToolUseBlock,
)
from context_manager.pairing import tool_pair_problems

PLOT = "https://example.com/plot.png"
PIXELS = "iVBORw0KGgo="


def says(participant: str, *blocks: Any) -> Message:
    return Message(participant=participant, content=tuple(blocks))


def text(value: str) -> TextBlock:
    return TextBlock(text=value)


# ------------------------------------------------------------------ round trips
def test_text_round_trips_with_each_participant() -> None:
    history = [
        says("System", text("You are careful.")),
        says("User", text("Fix the parser.")),
        says("Claude", text("On it.")),
        says("Context Manager", text("[memory] the parser was rewritten")),
    ]
    sent = to_langchain(history)
    assert [type(m) for m in sent] == [SystemMessage, HumanMessage, AIMessage, HumanMessage]
    assert [m.content for m in sent] == [
        "You are careful.",
        "Fix the parser.",
        "On it.",
        "[memory] the parser was rewritten",
    ]
    assert [m.id for m in sent] == ["cm-0-0", "cm-1-0", "cm-2-0", "cm-3-0"]
    # the participant travels beside the message, not as a name a provider checks
    memory = sent[3]
    assert memory.name is None
    assert memory.additional_kwargs[PARTICIPANT] == "Context Manager"
    assert from_langchain(sent) == history


def test_images_round_trip() -> None:
    history = [
        says(
            "User",
            text("What changed?"),
            ImageBlock(url=PLOT),
            ImageBlock(data=PIXELS, media_type="image/png"),
        ),
        says("Claude", text("This:"), ImageBlock(url=PLOT)),
        says("Claude", ToolUseBlock(id="c1", name="render", input={})),
        says(
            "render",
            ToolResultBlock(
                tool_use_id="c1",
                content=[text("rendered"), ImageBlock(data=PIXELS, media_type="image/png")],
            ),
        ),
    ]
    sent = to_langchain(history)
    assert sent[0].content == [
        {"type": "text", "text": "What changed?"},
        {"type": "image", "url": PLOT},
        {"type": "image", "base64": PIXELS, "mime_type": "image/png"},
    ]
    assert sent[1].content == [
        {"type": "text", "text": "This:"},
        {"type": "image", "url": PLOT},
    ]
    assert isinstance(sent[3], ToolMessage)
    assert sent[3].content == [
        {"type": "text", "text": "rendered"},
        {"type": "image", "base64": PIXELS, "mime_type": "image/png"},
    ]
    assert from_langchain(sent) == history


def test_images_in_the_openai_and_anthropic_forms_are_read() -> None:
    given = HumanMessage(
        content=[
            {"type": "image_url", "image_url": {"url": PLOT, "detail": "low"}},
            {"type": "image_url", "image_url": PLOT},
            {
                "type": "image",
                "source": {"type": "base64", "media_type": "image/png", "data": PIXELS},
            },
            {"type": "image", "source": {"type": "url", "url": PLOT}},
            {"type": "image", "source_type": "base64", "data": PIXELS, "mime_type": "image/png"},
        ]
    )
    [read] = from_langchain([given])
    png = ImageBlock(data=PIXELS, media_type="image/png")
    assert read.content == (
        ImageBlock(url=PLOT),
        ImageBlock(url=PLOT),
        png,
        ImageBlock(url=PLOT),
        png,
    )


def test_reasoning_round_trips() -> None:
    history = [
        says(
            "Claude",
            ThinkingBlock(thinking="the parser drops quotes", signature="sig-1"),
            ThinkingBlock(thinking="check the tests first"),
            text("Looking at the tests."),
            ToolUseBlock(id="c1", name="pytest", input={"path": "tests"}),
        ),
        says("User", ToolResultBlock(tool_use_id="c1", content="2 failed")),
    ]
    sent = to_langchain(history)
    assert sent[0].content == [
        {"type": "thinking", "thinking": "the parser drops quotes", "signature": "sig-1"},
        {"type": "thinking", "thinking": "check the tests first"},
        {"type": "text", "text": "Looking at the tests."},
    ]
    assert from_langchain(sent) == history


def test_langchain_reasoning_blocks_are_read() -> None:
    given = AIMessage(
        content=[
            {"type": "reasoning", "reasoning": "standard", "extras": {"signature": "sig-2"}},
            {"type": "reasoning", "summary": [{"type": "summary_text", "text": "one"}]},
            {"type": "thinking", "thinking": "anthropic", "signature": "sig-3"},
            "done",
        ]
    )
    [read] = from_langchain([given])
    assert read.participant == "Claude"
    assert read.content == (
        ThinkingBlock(thinking="standard", signature="sig-2"),
        ThinkingBlock(thinking="one"),
        ThinkingBlock(thinking="anthropic", signature="sig-3"),
        text("done"),
    )


def test_tool_calls_and_results_stay_paired() -> None:
    history = [
        says("User", text("Run both.")),
        says(
            "Claude",
            ToolUseBlock(id="a", name="ls", input={"path": "."}),
            ToolUseBlock(id="b", name="cat", input={"path": "x"}),
        ),
        says(
            "User",
            ToolResultBlock(tool_use_id="a", content="x"),
            ToolResultBlock(tool_use_id="b", content="no such file", is_error=True),
            text("Both ran."),
        ),
    ]
    sent = to_langchain(history)
    assert [type(m) for m in sent] == [
        HumanMessage,
        AIMessage,
        ToolMessage,
        ToolMessage,
        HumanMessage,
    ]
    call = sent[1]
    assert isinstance(call, AIMessage) and call.content == ""
    assert [(c["id"], c["name"], c["args"]) for c in call.tool_calls] == [
        ("a", "ls", {"path": "."}),
        ("b", "cat", {"path": "x"}),
    ]
    answers = [m for m in sent if isinstance(m, ToolMessage)]
    assert [(m.tool_call_id, m.status, m.content) for m in answers] == [
        ("a", "success", "x"),
        ("b", "error", "no such file"),
    ]
    assert sent[4].additional_kwargs[CONTINUES] is True
    assert from_langchain(sent) == history
    assert tool_pair_problems(from_langchain(sent)) == []


def test_results_go_before_the_text_they_came_with() -> None:
    call = says("Claude", ToolUseBlock(id="a", name="ls"))
    answer = says("User", text("here:"), ToolResultBlock(tool_use_id="a", content="x"))
    sent = to_langchain([call, answer])
    assert [type(m) for m in sent] == [AIMessage, ToolMessage, HumanMessage]
    assert sent[2].content == "here:"
    back = from_langchain(sent)
    assert back[1].content == (ToolResultBlock(tool_use_id="a", content="x"), text("here:"))


def test_parallel_results_of_an_agent_run_are_one_message() -> None:
    given = [
        AIMessage(
            content="",
            tool_calls=[
                {"name": "ls", "args": {}, "id": "a", "type": "tool_call"},
                {"name": "pwd", "args": {}, "id": "b", "type": "tool_call"},
            ],
        ),
        ToolMessage(content="x", tool_call_id="a", name="ls"),
        ToolMessage(content="/", tool_call_id="b", name="pwd"),
        HumanMessage(content="thanks"),
    ]
    read = from_langchain(given)
    assert [m.participant for m in read] == ["Claude", "ls", "User"]
    assert read[1].tool_result_ids == ("a", "b")
    assert tool_pair_problems(read) == []


def test_an_invalid_call_stays_paired_with_its_error_result() -> None:
    given = [
        AIMessage(
            content="trying",
            invalid_tool_calls=[{"name": "ls", "args": '{"path": ', "id": "x", "error": None}],
        ),
        ToolMessage(content="bad arguments", tool_call_id="x", name="ls", status="error"),
    ]
    read = from_langchain(given)
    assert read[0].content == (
        text("trying"),
        ToolUseBlock(id="x", name="ls", input={"arguments": '{"path": '}),
    )
    assert read[1].content == (
        ToolResultBlock(tool_use_id="x", content="bad arguments", is_error=True),
    )
    assert tool_pair_problems(read) == []


def test_messages_for_a_model_only_carry_no_ids_or_marks() -> None:
    answer = says("User", ToolResultBlock(tool_use_id="a", content="x"), text("and"))
    sent = to_langchain([answer], start=None)
    assert [m.id for m in sent] == [None, None]
    assert sent[0].additional_kwargs == {}
    assert sent[1].additional_kwargs == {PARTICIPANT: "User"}
    pieces = to_langchain([answer], start=3)
    assert [m.id for m in pieces] == ["cm-3-0", "cm-3-1"]
    assert [m.additional_kwargs.get(SOURCE) for m in pieces] == [3, 3]


# ------------------------------------------------------------------ unknown blocks
def test_an_unknown_block_is_kept_as_its_json_text() -> None:
    audio = {"type": "audio", "url": "https://example.com/note.mp3", "mime_type": "audio/mpeg"}
    search = {"type": "server_tool_call", "id": "s1", "name": "web_search", "args": {"q": "é"}}
    redacted = {"type": "redacted_thinking", "data": "opaque"}
    file = {"type": "image", "file_id": "file-123"}
    given = [
        HumanMessage(content=[{"type": "text", "text": "listen"}, audio, file]),
        AIMessage(content=[redacted, search, {"type": "text", "text": "found it"}]),
        ToolMessage(content=[audio], tool_call_id="t", name="record"),
    ]
    read = from_langchain(given)
    human, ai, tool_message = (m.content for m in read)
    assert human[0] == text("listen")
    assert [json.loads(b.text) for b in human[1:]] == [audio, file]  # type: ignore[union-attr]
    assert [json.loads(b.text) for b in ai[:2]] == [redacted, search]  # type: ignore[union-attr]
    assert "é" in ai[1].text  # type: ignore[union-attr]
    assert ai[2] == text("found it")
    result = tool_message[0]
    assert isinstance(result, ToolResultBlock) and isinstance(result.content, list)
    assert json.loads(result.content[0].text) == audio  # type: ignore[union-attr]


def test_content_that_is_not_a_block_is_kept_as_text() -> None:
    [read] = from_langchain([HumanMessage(content=["plain", {"no": "type"}])])
    assert read.content == (text("plain"), text('{"no": "type"}'))


def test_tool_call_blocks_repeating_tool_calls_are_read_once() -> None:
    given = AIMessage(
        content=[
            {"type": "text", "text": "calling"},
            {"type": "tool_use", "id": "a", "name": "ls", "input": {}},
            {"type": "tool_use", "id": "z", "name": "rm", "input": {}},
        ],
        tool_calls=[{"name": "ls", "args": {}, "id": "a", "type": "tool_call"}],
    )
    [read] = from_langchain([given])
    assert read.tool_use_ids == ("a",)
    assert read.content[0] == text("calling")
    # a tool_use block with no call behind it is kept, as its JSON text
    assert json.loads(read.content[1].text) == {  # type: ignore[union-attr]
        "type": "tool_use",
        "id": "z",
        "name": "rm",
        "input": {},
    }


def test_blocks_with_no_place_in_their_langchain_message_go_as_json_text() -> None:
    odd = [
        says("User", ToolUseBlock(id="u", name="ls", input={"path": "."})),
        says("Claude", text("ok"), ToolResultBlock(tool_use_id="r", content="x")),
    ]
    human, ai = to_langchain(odd)
    assert isinstance(human, HumanMessage) and isinstance(ai, AIMessage)
    assert ai.tool_calls == []
    assert isinstance(human.content, list) and isinstance(ai.content, list)
    [call] = human.content
    [said, result] = ai.content
    assert isinstance(call, dict) and isinstance(result, dict)
    assert said == {"type": "text", "text": "ok"}
    assert call["type"] == result["type"] == "text"
    assert json.loads(call["text"]) == {
        "type": "tool_use",
        "id": "u",
        "name": "ls",
        "input": {"path": "."},
    }
    assert json.loads(result["text"]) == {
        "type": "tool_result",
        "tool_use_id": "r",
        "content": "x",
        "is_error": False,
    }


def test_a_human_message_is_the_users_whatever_its_name() -> None:
    given = [HumanMessage(content="hi", name="alice"), HumanMessage(content="hey")]
    assert [m.participant for m in from_langchain(given)] == ["User", "User"]
    assert [m.participant for m in from_langchain(given, user="Ana")] == ["Ana", "Ana"]


def test_chat_messages_are_read_by_their_role() -> None:
    given = [
        ChatMessage(role="system", content="rules"),
        ChatMessage(role="user", content="hi"),
        ChatMessage(role="assistant", content="hello"),
    ]
    assert [m.participant for m in from_langchain(given)] == ["System", "User", "Claude"]
