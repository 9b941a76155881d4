"""Messages, provider formats and token counters."""

from __future__ import annotations

import pytest

from context_manager.messages import (
    ImageBlock,
    Message,
    MessageFormatError,
    TextBlock,
    ToolResultBlock,
    ToolUseBlock,
    from_anthropic,
    from_openai,
    to_anthropic,
    to_openai,
)
from context_manager.tokens import (
    ByteHeuristicCounter,
    CharsCounter,
    TiktokenCounter,
    TokenCounter,
)

ANTHROPIC = [
    {"role": "user", "content": "list files"},
    {
        "role": "assistant",
        "content": [
            {"type": "text", "text": "Looking."},
            {"type": "tool_use", "id": "t1", "name": "ls", "input": {"path": "."}},
        ],
    },
    {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "t1", "content": "a.py"}]},
]


def test_anthropic_round_trip() -> None:
    messages = from_anthropic(ANTHROPIC)
    assert [m.participant for m in messages] == ["User", "Claude", "User"]
    assert messages[1].tool_use_ids == ("t1",) and messages[2].tool_result_ids == ("t1",)
    back = to_anthropic(messages)
    assert back[0] == {"role": "user", "content": [{"type": "text", "text": "list files"}]}
    assert back[1]["content"][1] == {
        "type": "tool_use",
        "id": "t1",
        "name": "ls",
        "input": {"path": "."},
    }
    assert from_anthropic(back) == messages


def test_openai_round_trip_with_tool_calls() -> None:
    raw = [
        {"role": "system", "content": "be brief"},
        {"role": "user", "content": "list files"},
        {
            "role": "assistant",
            "content": None,
            "tool_calls": [
                {
                    "id": "c1",
                    "type": "function",
                    "function": {"name": "ls", "arguments": '{"p": 1}'},
                }
            ],
        },
        {"role": "tool", "tool_call_id": "c1", "content": "a.py"},
    ]
    messages = from_openai(raw)
    assert [m.participant for m in messages] == ["System", "User", "Claude", "Tool"]
    assert messages[2].content[0] == ToolUseBlock(id="c1", name="ls", input={"p": 1})
    back = to_openai(messages)
    assert back[2]["tool_calls"][0]["function"]["arguments"] == '{"p": 1}'
    assert back[3] == {"role": "tool", "tool_call_id": "c1", "content": "a.py"}


@pytest.mark.parametrize(
    ("raw", "match"),
    [
        ([{"role": "robot", "content": "x"}], "message 0: role must be"),
        ([{"role": "user", "content": [{"type": "video"}]}], "unsupported content block"),
        ([{"role": "user", "content": [{"type": "tool_use", "name": "x"}]}], "lacks 'id'"),
    ],
)
def test_bad_anthropic_messages_name_the_index(raw: list[dict[str, object]], match: str) -> None:
    with pytest.raises(MessageFormatError, match=match):
        from_anthropic(raw)


def test_bad_openai_messages() -> None:
    with pytest.raises(MessageFormatError, match="message 1: tool message lacks"):
        from_openai([{"role": "user", "content": "x"}, {"role": "tool", "content": "y"}])
    with pytest.raises(MessageFormatError, match="malformed tool call"):
        from_openai([{"role": "assistant", "tool_calls": [{"id": "c", "function": {}}]}])


@pytest.mark.parametrize("counter", [CharsCounter(), ByteHeuristicCounter(), TiktokenCounter()])
def test_counters_follow_the_protocol_and_cache(counter: TokenCounter) -> None:
    assert isinstance(counter, TokenCounter)
    m = Message.text_message("User", "hello world " * 50)
    first = counter.count_message(m)
    assert first == counter.count_message(Message.text_message("User", "hello world " * 50))
    assert counter.count_message(Message.text_message("User", "hi")) < first


def test_chars_and_heuristic_counts() -> None:
    m = Message.text_message("User", "x" * 10)
    assert CharsCounter().count_message(m) == 3
    wire = '{"participant":"User","content":[{"type":"text","text":"xxxxxxxxxx"}]}'
    assert ByteHeuristicCounter().count_message(m) == len(wire.encode()) // 4 == 17
    image = Message(
        participant="User", content=(ImageBlock(media_type="image/png", data="A" * 9999),)
    )
    small = Message(participant="User", content=(ImageBlock(media_type="image/png", data="A"),))
    h = ByteHeuristicCounter()
    assert h.count_message(image) == h.count_message(small)  # base64 length never counts
    assert h.count_message(image) >= 4096


def test_tiktoken_is_exact_and_offline() -> None:
    counter = TiktokenCounter()
    assert counter.count_text("hello world") == 2
    nested = Message(
        participant="User",
        content=(ToolResultBlock(tool_use_id="t", content=[TextBlock(text="hello world")]),),
    )
    assert counter.count_message(nested) == 4 + 2


def test_extractive_memories_never_quote_the_context_managers_own_turns() -> None:
    from context_manager.summarizer import CompletionRequest, ExtractiveSummarizer

    request = CompletionRequest(
        model="extractive",
        messages=(
            Message.text_message("Context Manager", "[CM] Recall memory L1-0."),
            Message.text_message("Claude", "I fixed parse_config in src/app.py line 42."),
            Message.text_message(
                "Context Manager",
                "[CM] You have just reviewed the memories above in order. Write one memory "
                "(level 2) that keeps their through-line.",
            ),
        ),
        target_tokens=200,
    )
    text = ExtractiveSummarizer().complete(request).text
    assert "parse_config" in text and "[CM]" not in text and "through-line" not in text


def test_extractive_memories_keep_lines_whole_and_say_each_thing_once() -> None:
    from context_manager.summarizer import CompletionRequest, ExtractiveSummarizer

    lines = [f"src/m{i}.py:{i}: patched value={1000 + i}" for i in range(12)]
    log = "\n".join([*lines, lines[3], lines[3]])  # a line repeated, no full stops

    def summarise(text: str, tokens: int) -> list[str]:
        request = CompletionRequest(
            model="extractive",
            messages=(Message.text_message("User", text),),
            target_tokens=tokens,
        )
        return ExtractiveSummarizer().complete(request).text.splitlines()

    everything = summarise(log, 2000)
    assert everything == lines  # each line once, in order, still a line of its own
    shorter = summarise("\n".join(everything), 40)  # a memory of the memory
    assert 0 < len(shorter) < len(lines) and set(shorter) <= set(lines)
