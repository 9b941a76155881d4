"""The conversion between library messages and the assembly's wire messages."""

from __future__ import annotations

import json

from pydantic import TypeAdapter

import foldbench.peers.ours as ours
from context_manager.assembly import assemble
from context_manager.assembly.convert import from_wire, to_wire, wire_expansion
from context_manager.assembly.wire import WireMessage
from context_manager.messages import (
    ImageBlock,
    Message,
    TextBlock,
    ThinkingBlock,
    ToolResultBlock,
    ToolUseBlock,
)
from context_manager.pairing import tool_pair_problems

WIRE = TypeAdapter(WireMessage)

TRANSCRIPT = [
    Message.text_message("User", "list the files, then read one"),
    Message(
        participant="Claude",
        content=(
            ThinkingBlock(thinking="two calls", signature="sig"),
            TextBlock(text="Looking."),
            ToolUseBlock(id="a", name="ls", input={"path": "."}),
            ToolUseBlock(id="b", name="cat", input={"path": "é.txt"}),
        ),
    ),
    Message(
        participant="bash",
        content=(
            ToolResultBlock(tool_use_id="a", content="é.txt\nb.txt"),
            ToolResultBlock(
                tool_use_id="b",
                content=[TextBlock(text="body"), ImageBlock(media_type="image/png", data="AA")],
                is_error=True,
            ),
            TextBlock(text="both done"),
        ),
    ),
    Message(participant="User", content=(ToolResultBlock(tool_use_id="zz", content="orphan"),)),
    Message(participant="User", content=()),
    Message.text_message("Claude", "done"),
]


def test_the_wire_form_is_exact() -> None:
    wire, owners = wire_expansion(TRANSCRIPT)
    assert owners == [0, 1, 2, 2, 2, 3, 4, 5]
    assert wire[1] == {
        "role": "assistant",
        "content": [
            {"type": "thinking", "text": "two calls"},
            {"type": "text", "text": "Looking."},
            {"type": "function_call", "id": "a", "function_id": "ls", "arguments": {"path": "."}},
            {
                "type": "function_call",
                "id": "b",
                "function_id": "cat",
                "arguments": {"path": "é.txt"},
            },
        ],
        "stop_reason": "tool_use",
        "model": "agent",
        "provider": "transcript",
        "timestamp": 1,
    }
    assert wire[3] == {
        "role": "function_result",
        "function_call_id": "b",
        "function_id": "cat",
        "content": [{"type": "text", "text": "body\n[image]"}],
        "is_error": True,
        "timestamp": 2,
    }
    assert wire[4] == {
        "role": "user",
        "content": [{"type": "text", "text": "both done"}],
        "timestamp": 2,
    }
    assert wire[5]["function_id"] == "tool"  # its call is not among the messages
    assert wire[6] == {"role": "user", "content": [], "timestamp": 4}
    assert wire[7]["stop_reason"] == "end_turn"
    assert to_wire(TRANSCRIPT) == wire
    # every message is valid wire JSON, and assemble takes it as is
    for w in wire:
        WIRE.validate_python(w)
    model = {"id": "m", "limits": {"context_window": 100_000, "max_output_tokens": 1000}}
    out = assemble({"messages": wire, "model": model}, clock=lambda: 0)
    assert len(out.messages) == len(wire)


def test_the_round_trip_keeps_order_pairs_and_parallel_results_together() -> None:
    back = from_wire(to_wire(TRANSCRIPT))
    assert [m.participant for m in back] == ["User", "Claude", *["User"] * 4, "Claude"]
    assert back[2].tool_result_ids == ("a", "b") and back[4].tool_result_ids == ("zz",)
    assert back[3].text == "both done" and back[5].content == ()
    assert tool_pair_problems(back[:3]) == []
    assert back[1].content[0] == ThinkingBlock(thinking="two calls")  # the signature is not sent
    # wire models read the same as their JSON
    models = [WIRE.validate_python(w) for w in to_wire(TRANSCRIPT)]
    assert from_wire(models) == back


def test_blocks_without_a_library_form_come_back_as_their_json() -> None:
    image = {"type": "image", "mime": "image/png", "data": "AA"}
    inline = {
        "type": "function_result",
        "function_call_id": "c",
        "content": [{"type": "text", "text": "x"}, {"type": "text", "text": "y"}],
    }
    [m] = from_wire(
        [{"role": "custom", "custom_type": "memo", "content": [image, inline], "timestamp": 0}]
    )
    assert m.participant == "User"
    assert m.content == (
        TextBlock(text=json.dumps(image, sort_keys=True)),
        ToolResultBlock(tool_use_id="c", content="xy"),
    )


def test_the_benchmark_converts_with_the_library() -> None:
    """The benchmark measures what users run: its assemble policy converts through
    this module, not a copy of it."""
    assert ours.to_wire is to_wire
    assert ours.from_wire is from_wire
