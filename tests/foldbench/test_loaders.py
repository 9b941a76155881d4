"""Transcript loaders: core formats on small files, error cases, optional data packages."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from context_manager.messages import ToolResultBlock, ToolUseBlock
from context_manager.pairing import tool_pair_problems
from foldbench.loaders import (
    TranscriptError,
    load_anthropic,
    load_openai,
    load_openai_conversations,
)

OPENAI_CHAT = [
    {"role": "system", "content": "You are terse."},
    {"role": "user", "content": "List the files."},
    {
        "role": "assistant",
        "content": None,
        "tool_calls": [
            {"id": "c1", "type": "function", "function": {"name": "ls", "arguments": '{"p": "."}'}}
        ],
    },
    {"role": "tool", "tool_call_id": "c1", "content": "a.py\nb.py"},
    {"role": "assistant", "content": "Two files."},
]

ANTHROPIC_CHAT = {
    "system": [{"type": "text", "text": "Be brief."}],
    "messages": [
        {"role": "user", "content": "Read x"},
        {
            "role": "assistant",
            "content": [{"type": "tool_use", "id": "t1", "name": "read", "input": {"f": "x"}}],
        },
        {
            "role": "user",
            "content": [{"type": "tool_result", "tool_use_id": "t1", "content": "42"}],
        },
    ],
}


def _write(path: Path, data: object) -> Path:
    path.write_text(json.dumps(data), encoding="utf-8")
    return path


@pytest.mark.parametrize("wrap", [False, True])
def test_openai_json_keeps_roles_and_tool_ids(tmp_path: Path, wrap: bool) -> None:
    path = _write(tmp_path / "chat.json", {"messages": OPENAI_CHAT} if wrap else OPENAI_CHAT)
    messages = load_openai(path)
    assert [m.participant for m in messages] == ["System", "User", "Claude", "Tool", "Claude"]
    assert messages[2].tool_use_ids == ("c1",)
    assert messages[3].tool_result_ids == ("c1",)
    assert tool_pair_problems(messages) == []


def test_openai_jsonl_one_message_a_line(tmp_path: Path) -> None:
    path = tmp_path / "chat.jsonl"
    path.write_text("\n".join(json.dumps(m) for m in OPENAI_CHAT) + "\n\n", encoding="utf-8")
    assert load_openai(path) == load_openai(_write(tmp_path / "chat.json", OPENAI_CHAT))


def test_openai_conversations_one_a_line(tmp_path: Path) -> None:
    path = tmp_path / "many.jsonl"
    rows = [{"messages": OPENAI_CHAT}, {"messages": OPENAI_CHAT[:2]}]
    path.write_text("\n".join(json.dumps(r) for r in rows), encoding="utf-8")
    transcripts = load_openai_conversations(path)
    assert [t.name for t in transcripts] == ["many:1", "many:2"]
    assert len(transcripts[0].messages) == 5
    assert transcripts[0].call_points == [2, 4]
    assert transcripts[1].facts == []
    with pytest.raises(TranscriptError, match="load_openai_conversations"):
        load_openai(path)


def test_anthropic_system_and_tool_pairs(tmp_path: Path) -> None:
    messages = load_anthropic(_write(tmp_path / "a.json", ANTHROPIC_CHAT))
    assert [m.participant for m in messages] == ["System", "User", "Claude", "User"]
    assert messages[0].text == "Be brief."
    assert isinstance(messages[2].content[0], ToolUseBlock)
    assert isinstance(messages[3].content[0], ToolResultBlock)
    assert tool_pair_problems(messages) == []
    plain = load_anthropic(_write(tmp_path / "b.json", ANTHROPIC_CHAT["messages"]))
    assert plain == messages[1:]


def test_missing_file_is_named(tmp_path: Path) -> None:
    missing = tmp_path / "nope.json"
    with pytest.raises(TranscriptError, match=r"nope\.json: no such file"):
        load_openai(missing)
    with pytest.raises(TranscriptError, match="not a regular file"):
        load_anthropic(tmp_path)


def test_invalid_json_names_line(tmp_path: Path) -> None:
    path = tmp_path / "bad.json"
    path.write_text('[{"role": "user",\n "content": }]', encoding="utf-8")
    with pytest.raises(TranscriptError, match=r"bad\.json: not valid JSON \(line 2"):
        load_openai(path)
    lines = tmp_path / "bad.jsonl"
    lines.write_text('{"role": "user", "content": "hi"}\n{oops\n', encoding="utf-8")
    with pytest.raises(TranscriptError, match="line 2 is not valid JSON"):
        load_openai(lines)


def test_not_utf8(tmp_path: Path) -> None:
    path = tmp_path / "latin.json"
    path.write_bytes(b'[{"role": "user", "content": "caf\xe9"}]')
    with pytest.raises(TranscriptError, match="not UTF-8"):
        load_openai(path)


@pytest.mark.parametrize(
    ("data", "message"),
    [
        ({"chat": []}, "expected OpenAI chat messages"),
        ([{"role": "robot", "content": "x"}], "unsupported role 'robot'"),
        ([{"role": "tool", "content": "x"}], "lacks 'tool_call_id'"),
        ([1, 2], "expected OpenAI chat messages"),
    ],
)
def test_openai_format_errors(tmp_path: Path, data: object, message: str) -> None:
    with pytest.raises(TranscriptError, match=message):
        load_openai(_write(tmp_path / "x.json", data))


@pytest.mark.parametrize(
    ("data", "message"),
    [
        ([{"role": "system", "content": "x"}], "role must be 'user' or 'assistant'"),
        ([{"role": "user", "content": [{"type": "tool_use", "id": "t"}]}], "lacks 'name'"),
        ({"messages": [], "system": 3}, "'system' must be a string"),
    ],
)
def test_anthropic_format_errors(tmp_path: Path, data: object, message: str) -> None:
    with pytest.raises(TranscriptError, match=message):
        load_anthropic(_write(tmp_path / "x.json", data))


@pytest.mark.parametrize(
    ("data", "message"),
    [
        ([], "no 'history' list"),
        ({"history": [{"role": "user", "content": "x"}, 7]}, r"history\[1\] is not a message"),
        (
            {"history": [{"role": "tool", "content": "x", "tool_call_ids": "[oops"}]},
            r"history\[0\]\.tool_call_ids is not a list",
        ),
        ({"history": [{"role": "robot", "content": "x"}]}, "not a SWE-agent trajectory"),
    ],
)
def test_swe_agent_format_errors(tmp_path: Path, data: object, message: str) -> None:
    from foldbench.loaders import load_swe_agent

    with pytest.raises(TranscriptError, match=message):
        load_swe_agent(_write(tmp_path / "x.traj", data))
    with pytest.raises(TranscriptError, match="no such file"):
        load_swe_agent(tmp_path / "missing.traj")


def test_conversation_line_errors_name_the_line(tmp_path: Path) -> None:
    path = tmp_path / "c.jsonl"
    path.write_text(
        json.dumps({"messages": OPENAI_CHAT}) + "\n" + json.dumps({"x": 1}), encoding="utf-8"
    )
    with pytest.raises(TranscriptError, match=r"c\.jsonl: line 2"):
        load_openai_conversations(path)


# ------------------------------------------------------------------ data packages
def test_bfcl_multi_turn_replays_real_tool_results() -> None:
    pytest.importorskip(
        "bfcl_eval", reason="bfcl-eval not installed (pip install --no-deps bfcl-eval)"
    )
    pytest.importorskip("mpmath", reason="mpmath (bench extra) needed by the BFCL math tool")
    from foldbench.loaders import load_bfcl_multi_turn

    transcripts = load_bfcl_multi_turn("base", limit=5)
    assert len(transcripts) == 5
    first = transcripts[0]
    assert first.name == "multi_turn_base_0"
    assert tool_pair_problems(first.messages) == []
    uses = [b for m in first.messages for b in m.content if isinstance(b, ToolUseBlock)]
    results = [b for m in first.messages for b in m.content if isinstance(b, ToolResultBlock)]
    assert [u.name for u in uses[:3]] == ["cd", "mkdir", "mv"]
    assert [r.tool_use_id for r in results] == [u.id for u in uses]
    grep = next(r for r, u in zip(results, uses, strict=True) if u.name == "grep")
    assert "budget analysis" in str(grep.content)
    sort = next(u for u in uses if u.name == "sort")
    assert sort.input == {"file_name": "final_report.pdf"}  # positional argument named
    assert first.call_points and all(
        first.messages[n].participant == "Claude" for n in first.call_points
    )
    assert load_bfcl_multi_turn("base", limit=5) == transcripts  # the simulations are deterministic


def test_bfcl_memory_exposes_ground_truth_facts() -> None:
    pytest.importorskip(
        "bfcl_eval", reason="bfcl-eval not installed (pip install --no-deps bfcl-eval)"
    )
    from foldbench.loaders import load_bfcl_memory

    (customer,) = load_bfcl_memory("customer")
    assert len(customer.probes) == 30
    assert customer.facts[0] == "Michael"
    assert customer.probes[0].question == "What is my first name?"
    text = "\n".join(m.text for m in customer.messages)
    assert "Michael" in text
    assert customer.call_points == list(range(1, len(customer.messages) + 1))
    with pytest.raises(TranscriptError, match="unknown BFCL memory scenario"):
        load_bfcl_memory("pirates")


def test_bfcl_unknown_category() -> None:
    pytest.importorskip(
        "bfcl_eval", reason="bfcl-eval not installed (pip install --no-deps bfcl-eval)"
    )
    from foldbench.loaders import load_bfcl_multi_turn

    with pytest.raises(TranscriptError, match="unknown BFCL multi-turn category"):
        load_bfcl_multi_turn("parallel")  # type: ignore[arg-type]


def test_chitchat_longest_chats() -> None:
    pytest.importorskip("chitchat_dataset", reason="chitchat-dataset (bench extra) not installed")
    from foldbench.loaders import load_chitchat

    chats = load_chitchat(limit=2, longest=True)
    assert [c.metadata["words"] for c in chats] == sorted(
        (c.metadata["words"] for c in chats), reverse=True
    )
    assert chats[0].metadata["words"] > 10_000
    longest = chats[0]
    assert {m.participant for m in longest.messages} == {"User", "Claude"}
    assert all(m.timestamp is not None for m in longest.messages)
    assert longest.call_points == [
        n
        for n in range(1, len(longest.messages))
        if longest.messages[n].participant == "Claude"
        and longest.messages[n - 1].participant == "User"
    ]


def _parallel_turn() -> list[dict[str, object]]:
    calls = [
        {"id": c, "type": "function", "function": {"name": "ls", "arguments": "{}"}}
        for c in ("a", "b")
    ]
    return [
        {"role": "user", "content": "look around"},
        {"role": "assistant", "content": "", "tool_calls": calls},
        {"role": "tool", "tool_call_id": "a", "content": "one"},
        {"role": "tool", "tool_call_id": "b", "content": "two"},
        {"role": "assistant", "content": "done"},
    ]


def test_results_of_parallel_calls_come_back_as_one_message() -> None:
    from context_manager.messages import from_openai

    messages = from_openai(_parallel_turn(), agent="Claude")
    assert tool_pair_problems(messages) == []
    assert [len(m.content) for m in messages] == [1, 2, 2, 1]
    assert messages[2].tool_result_ids == ("a", "b")


def test_a_swe_agent_result_for_several_calls_answers_each(tmp_path: Path) -> None:
    from foldbench.loaders import load_swe_agent

    turn = _parallel_turn()
    history = [turn[0], turn[1], {**turn[2], "tool_call_ids": ["a", "b"]}, turn[4]]
    del history[2]["tool_call_id"]
    path = tmp_path / "parallel.traj"
    path.write_text(json.dumps({"history": history}), encoding="utf-8")
    messages = load_swe_agent(path)
    assert tool_pair_problems(messages) == []
    assert messages[2].tool_result_ids == ("a", "b")
