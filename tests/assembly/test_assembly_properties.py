"""Invariants of the assembly functions over generated, well-formed transcripts."""

from __future__ import annotations

import copy
import json
from typing import Any

from hypothesis import given
from hypothesis import strategies as st
from pydantic import TypeAdapter

from context_manager.assembly import AssemblyConfig, AssemblyError, assemble, prune
from context_manager.assembly.capping import cap_results
from context_manager.assembly.wire import WireMessage
from tests.support.assembly_fixtures import (
    FakeSummarizer,
    RaisingSummarizer,
    assistant,
    call,
    custom,
    image,
    inline_result,
    result,
    text,
    user,
)

ADAPTER: TypeAdapter[Any] = TypeAdapter(list[WireMessage])

bodies = st.builds(
    lambda unit, n, tail: unit * n + tail,
    st.sampled_from(["a", "é", "✓ ", "line\n", "😀", '{"k": "v"} ']),
    st.integers(0, 6_000),
    st.text(max_size=20),
)


@st.composite
def transcripts(draw: st.DrawFn) -> list[dict[str, Any]]:
    messages: list[dict[str, Any]] = []
    ids = iter(range(10_000))
    ts = iter(range(1, 100_000))
    for _ in range(draw(st.integers(0, 6))):
        if draw(st.booleans()):
            messages.append(custom(draw(st.text(max_size=30)), ts=next(ts)))
        blocks: list[Any] = [draw(bodies)]
        if draw(st.integers(0, 9)) == 0:
            blocks.append(image())
        messages.append(user(*blocks, ts=next(ts)))
        for _ in range(draw(st.integers(0, 3))):
            calls = [
                (f"c{next(ids)}", draw(st.sampled_from(["read", "grep", "shell"])))
                for _ in range(draw(st.integers(1, 2)))
            ]
            lead = [draw(st.text(max_size=20))] if draw(st.booleans()) else []
            messages.append(
                assistant(*lead, *(call(c, f, {"q": c}) for c, f in calls), ts=next(ts))
            )
            if draw(st.booleans()):
                for c, f in calls:
                    content: list[Any] = [draw(bodies)]
                    if draw(st.integers(0, 9)) == 0:
                        content.append(image())
                    details = draw(st.sampled_from([None, {"status": "denied"}, {"n": "x" * 3000}]))
                    messages.append(result(c, f, *content, details=details, ts=next(ts)))
            else:
                messages.append(
                    user(*(inline_result(c, text(draw(bodies))) for c, _ in calls), ts=next(ts))
                )
        if draw(st.booleans()):
            messages.append(assistant(draw(st.text(max_size=40)), ts=next(ts)))
    return messages


@st.composite
def requests(draw: st.DrawFn) -> dict[str, Any]:
    window = draw(st.integers(2_000, 40_000))
    options: dict[str, Any] = {
        "tail_turns": draw(st.integers(0, 3)),
        "allow_prune": draw(st.booleans()),
        "allow_compaction": draw(st.booleans()),
        "max_result_tokens": draw(st.sampled_from([0, 40, 500, 3_000, 20_000])),
        "request_overhead_tokens": draw(st.integers(0, 300)),
    }
    if draw(st.booleans()):
        options["previous_summary"] = draw(st.text(max_size=60))
    return {
        "messages": draw(transcripts()),
        "model": {
            "id": "m",
            "limits": {"context_window": window, "max_output_tokens": draw(st.integers(0, 4_000))},
        },
        "system_prompt": draw(st.text(max_size=200)),
        "options": options,
    }


configs = st.builds(
    AssemblyConfig,
    protect_recent_tokens=st.integers(0, 5_000),
    protected_user_turns=st.integers(0, 3),
    decay_user_turns=st.integers(0, 3),
    min_free_tokens=st.integers(0, 3_000),
    max_output_chars=st.integers(200, 4_000),
)
summarizers = st.sampled_from(["fake", "none", "raising"])


def make(kind: str) -> Any:
    return {
        "fake": FakeSummarizer(reply="S: progress so far"),
        "none": None,
        "raising": RaisingSummarizer(),
    }[kind]


def dumps(value: Any) -> str:
    return json.dumps(value, separators=(",", ":"), ensure_ascii=False, sort_keys=False)


def pairing_problems(messages: list[dict[str, Any]]) -> list[str]:
    seen: set[str] = set()
    problems = []
    for i, m in enumerate(messages):
        if m["role"] == "function_result" and m["function_call_id"] not in seen:
            problems.append(f"{i}: {m['function_call_id']}")
        for b in m["content"]:
            if b["type"] == "function_call":
                seen.add(b["id"])
            elif b["type"] == "function_result" and b["function_call_id"] not in seen:
                problems.append(f"{i}: inline {b['function_call_id']}")
    return problems


def result_ids(messages: list[dict[str, Any]]) -> list[tuple[str, str | None]]:
    out: list[tuple[str, str | None]] = []
    for m in messages:
        if m["role"] == "function_result":
            out.append((m["function_call_id"], m["function_id"]))
        out += [
            (b["function_call_id"], None) for b in m["content"] if b["type"] == "function_result"
        ]
    return out


@given(requests(), configs, summarizers)
def test_assemble_holds_the_budget_keeps_pairs_and_leaves_input_alone(
    request: dict[str, Any], config: AssemblyConfig, kind: str
) -> None:
    frozen = copy.deepcopy(request)
    try:
        out = assemble(request, config=config, summarizer=make(kind))
    except AssemblyError as err:
        assert err.code == "context/overflow"
        assert request == frozen
        return
    assert request == frozen  # the caller's transcript is never modified
    assert out.token_count <= out.usable
    b = out.breakdown
    overhead = request["options"]["request_overhead_tokens"]
    assert out.token_count == (
        b.by_role.user
        + b.by_role.assistant
        + b.by_role.function_result
        + b.system_prompt_tokens
        + b.tools_tokens
        + overhead
    )
    dumped = out.model_dump(exclude_none=True)["messages"]
    assert not any(m["role"] == "custom" for m in dumped)
    assert pairing_problems(dumped) == []
    sent = [m for m in request["messages"] if m["role"] != "custom"]
    if out.applied.compacted:
        assert dumped  # never empty
        start = out.applied.tail_start_index
        assert start is not None
        kept = [m for m in request["messages"][start:] if m["role"] != "custom"]
        assert result_ids(dumped) == result_ids(kept)
        assert dumped[0]["role"] == "assistant" or not any(
            b["type"] == "function_result" for b in dumped[0]["content"]
        )
    else:
        # replace, never remove: same count, order and ids
        assert len(dumped) == len(sent)
        assert [m["role"] for m in dumped] == [m["role"] for m in sent]
        assert result_ids(dumped) == result_ids(sent)


@given(requests(), configs)
def test_assemble_is_deterministic(request: dict[str, Any], config: AssemblyConfig) -> None:
    def run() -> str:
        try:
            return dumps(
                assemble(request, config=config, summarizer=make("fake")).model_dump(
                    exclude_none=True
                )
            )
        except AssemblyError as err:
            return str(err)

    assert run() == run()


@given(requests())
def test_preview_never_raises_and_reports_the_count(request: dict[str, Any]) -> None:
    request["options"]["preview_only"] = True
    fake = FakeSummarizer()
    out = assemble(request, summarizer=fake)
    assert fake.requests == [] and not out.applied.compacted
    assert len(out.messages) == sum(1 for m in request["messages"] if m["role"] != "custom")


@given(transcripts(), configs, st.lists(st.sampled_from(["read", "grep"]), max_size=1))
def test_prune_is_idempotent(
    messages: list[dict[str, Any]], config: AssemblyConfig, protected: list[str]
) -> None:
    options = {
        "protect_recent_tokens": config.protect_recent_tokens,
        "protected_user_turns": config.protected_user_turns,
        "decay_user_turns": config.decay_user_turns,
        "min_free_tokens": config.min_free_tokens,
        "max_output_chars": config.max_output_chars,
        "protected_functions": protected,
    }
    frozen = copy.deepcopy(messages)
    once = prune({"messages": messages, "options": options}).model_dump(exclude_none=True)
    assert messages == frozen
    twice = prune({"messages": once["messages"], "options": options}).model_dump(exclude_none=True)
    assert twice["messages"] == once["messages"] and twice["pruned_parts"] == 0
    assert len(once["messages"]) == len(messages)
    assert result_ids(once["messages"]) == result_ids(messages)


@given(transcripts(), st.integers(1, 3_000))
def test_cap_is_idempotent_and_fits(messages: list[dict[str, Any]], cap: int) -> None:
    parsed = ADAPTER.validate_python(messages)
    once = cap_results(parsed, cap)
    twice = cap_results(once.messages, cap)
    assert twice.capped_parts == 0
    assert [m.wire() for m in twice.messages] == [m.wire() for m in once.messages]
    assert [m.wire() for m in parsed] == messages
    for m in once.messages:
        w = m.wire()
        groups = [w["content"]] if w["role"] == "function_result" else []
        groups += [b["content"] for b in w["content"] if b["type"] == "function_result"]
        for content in groups:
            joined = "\n".join(b["text"] for b in content if b["type"] == "text")
            images = sum(1 for b in content if b["type"] == "image")
            assert len(joined.encode()) // 4 + 4096 * images <= cap
