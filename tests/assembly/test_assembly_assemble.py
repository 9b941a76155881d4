"""assemble end to end: the order of passes, compaction, reduction, preview and overflow."""

from __future__ import annotations

import copy
import json
from typing import Any

import pytest

from context_manager.assembly import AssemblyConfig, AssemblyError, InMemoryLeaseStore, assemble
from tests.support.assembly_fixtures import (
    FakeSummarizer,
    RaisingSummarizer,
    StepClock,
    assistant,
    call,
    custom,
    inline_model,
    result,
    tool_turn,
    user,
)

SMALL = inline_model(10_000, 1_000)  # usable 8,000; tail budget 2,000


def est(message: dict[str, Any]) -> int:
    return len(json.dumps(message, separators=(",", ":"), ensure_ascii=False).encode()) // 4


def compact_json(value: Any) -> str:
    return json.dumps(value, separators=(",", ":"), ensure_ascii=False)


def long_conversation(turns: int = 20, body: str = "data " * 300) -> list[dict[str, Any]]:
    """Results of 1,500 bytes: not verbose, so pruning leaves them; about 9,600 tokens."""
    return [m for n in range(turns) for m in tool_turn(n, body)]


def reconcile(out: Any, overhead: int = 0) -> None:
    b = out.breakdown
    roles = b.by_role.user + b.by_role.assistant + b.by_role.function_result + b.by_role.custom
    assert out.token_count == roles + b.system_prompt_tokens + b.tools_tokens + overhead
    assert b.by_role.custom == 0
    assert b.system_prompt_tokens == len(out.system_prompt.encode()) // 4


def test_under_budget_returns_the_request_minus_customs_byte_for_byte() -> None:
    msgs = [*tool_turn(0, "hello"), custom("app note"), *tool_turn(1, "world")]
    request = {"messages": msgs, "model": SMALL, "system_prompt": "Be brief."}
    before = copy.deepcopy(request)
    out = assemble(request)
    assert request == before
    dumped = out.model_dump(exclude_none=True)
    expected_msgs = [m for m in msgs if m["role"] != "custom"]
    assert compact_json(dumped["messages"]) == compact_json(expected_msgs)
    total = sum(est(m) for m in expected_msgs) + len("Be brief.") // 4
    assert dumped == {
        "system_prompt": "Be brief.",
        "messages": expected_msgs,
        "token_count": total,
        "usable": 8_000,
        "effective_max_output_tokens": 1_000,
        "model_resolved": "inline",
        "applied": {
            "initial_token_count": total,
            "pruned": False,
            "pruned_tokens": 0,
            "capped_parts": 0,
            "capped_tokens": 0,
            "compacted": False,
        },
        "breakdown": {
            "system_prompt_tokens": 2,
            "tools_tokens": 0,
            "by_role": {
                "user": sum(est(m) for m in expected_msgs if m["role"] == "user"),
                "assistant": sum(est(m) for m in expected_msgs if m["role"] == "assistant"),
                "function_result": sum(
                    est(m) for m in expected_msgs if m["role"] == "function_result"
                ),
                "custom": 0,
            },
            "estimator": "heuristic",
        },
    }


def test_overhead_tools_and_parts_are_accounted() -> None:
    tool = {"name": "f", "description": "d", "parameters": {}}
    out = assemble(
        {
            "messages": tool_turn(0, "x"),
            "model": SMALL,
            "tools": [tool],
            "parts": {"memory": "m" * 80},
            "options": {"request_overhead_tokens": 77},
        }
    )
    reconcile(out, overhead=77)
    assert out.breakdown.tools_tokens == len(compact_json(tool)) // 4
    assert out.breakdown.by_part == {"memory": 20}


def test_previous_summary_is_rendered_under_its_heading() -> None:
    out = assemble(
        {
            "messages": tool_turn(0, "x"),
            "model": SMALL,
            "system_prompt": "Base prompt.\n\n",
            "options": {"previous_summary": "Earlier: did things."},
        }
    )
    assert out.system_prompt == "Base prompt.\n\n# Conversation summary\n\nEarlier: did things."
    bare = assemble({"messages": [], "model": SMALL, "options": {"previous_summary": "S"}})
    assert bare.system_prompt == "# Conversation summary\n\nS"


def test_the_cap_runs_even_under_budget() -> None:
    msgs = tool_turn(0, "z" * 100_000)  # 25,000 tokens > 20,000 cap
    out = assemble({"messages": msgs, "model": inline_model(1_000_000, 8_000)})
    assert out.applied.capped_parts == 1 and out.applied.capped_tokens > 0
    text = out.messages[2].content[0].text
    assert "[…result capped: was ~25000 tokens; middle omitted; re-call read_file" in text
    assert len(text.encode()) // 4 <= 20_000
    off = assemble(
        {
            "messages": msgs,
            "model": inline_model(1_000_000, 8_000),
            "options": {"max_result_tokens": 0},
        }
    )
    assert off.applied.capped_parts == 0


def test_prune_runs_under_budget_with_config_thresholds() -> None:
    msgs = [m for n in range(16) for m in tool_turn(n, "v" * 20_000)]  # 5,000 tokens each
    model = inline_model(1_000_000, 8_000)
    out = assemble({"messages": msgs, "model": model})
    assert out.applied.pruned
    placeholders = [
        m.content[0].text
        for m in out.messages
        if m.role == "function_result"
        and m.content[0].text.startswith("[output of read_file pruned: was ~5000 tokens")
    ]
    # the two newest turns are exempt; of the 14 older results the newest 8 fill the
    # 40,000-token window and the other 6 are pruned
    assert len(placeholders) == 6
    assert out.applied.pruned_tokens == 6 * (5000 - 18)
    kept = assemble({"messages": msgs, "model": model, "options": {"allow_prune": False}})
    assert not kept.applied.pruned and kept.applied.pruned_tokens == 0
    protected = assemble(
        {"messages": msgs, "model": model, "options": {"protected_functions": ["read_file"]}}
    )
    assert not protected.applied.pruned


def test_compaction_summarises_the_head_into_the_system_prompt() -> None:
    msgs = long_conversation()
    msgs.insert(5, custom("not sent"))
    fake = FakeSummarizer(reply="SUMMARY TEXT")
    leases = InMemoryLeaseStore()
    out = assemble(
        {
            "messages": msgs,
            "model": SMALL,
            "system_prompt": "You are a coder.",
            "options": {"previous_summary": "OLD", "lease_key": "conv-1"},
        },
        summarizer=fake,
        leases=leases,
    )
    applied = out.applied
    assert applied.compacted and applied.summary == "SUMMARY TEXT"
    assert out.system_prompt == "You are a coder.\n\n# Conversation summary\n\nSUMMARY TEXT"
    # the last two turns are kept; the index counts the custom message
    assert applied.tail_start_index == len(msgs) - 8
    sent = [m for m in msgs if m["role"] != "custom"]
    assert [m.model_dump() for m in out.messages] == sent[-8:]
    head = [m for m in msgs[: len(msgs) - 8] if m["role"] != "custom"]
    assert applied.tokens_before == applied.summarized_head_tokens == sum(est(m) for m in head)
    assert out.token_count <= out.usable == 8_000
    assert "<previous-summary>\nOLD\n</previous-summary>" in (fake.requests[0].system or "")
    assert fake.requests[0].model == "test-model" and fake.requests[0].provider == "test"
    assert leases.read("conv-1") is None
    reconcile(out)


def test_no_compaction_when_disallowed_busy_or_failing_then_references() -> None:
    msgs = long_conversation()
    cases: list[tuple[dict[str, Any], Any, InMemoryLeaseStore]] = []
    busy = InMemoryLeaseStore()
    clock = StepClock()
    busy.acquire("held", now=clock.now, ttl_ms=300_000)
    cases.append(({"allow_compaction": False}, FakeSummarizer(), InMemoryLeaseStore()))
    cases.append(({"lease_key": "held"}, FakeSummarizer(), busy))
    cases.append(({}, RaisingSummarizer(), InMemoryLeaseStore()))
    cases.append(({}, None, InMemoryLeaseStore()))
    cases.append(({"tail_turns": 0}, FakeSummarizer(), InMemoryLeaseStore()))
    for options, summarizer, leases in cases:
        out = assemble(
            {"messages": msgs, "model": SMALL, "options": options},
            summarizer=summarizer,
            leases=leases,
            clock=clock,
        )
        assert not out.applied.compacted
        assert out.applied.pruned and out.token_count <= out.usable
        refs = [
            m
            for m in out.messages
            if m.role == "function_result"
            and m.content[0].text.startswith("[function result reduced for context budget] ")
        ]
        assert refs and all(len(m.content[0].text.encode()) < 2000 for m in refs)
        assert len(out.messages) == len(msgs)
        if isinstance(summarizer, FakeSummarizer):
            assert summarizer.requests == []
    assert busy.read("held") is not None  # the foreign lease is untouched


def test_overflow_when_nothing_can_be_reduced() -> None:
    msgs = [user("q" * 40_000, ts=1), assistant("a", ts=2)]  # 10,000+ tokens of user text
    with pytest.raises(AssemblyError) as err:
        assemble({"messages": msgs, "model": SMALL})
    need = est(msgs[0]) + est(msgs[1])
    assert err.value.code == "context/overflow"
    assert str(err.value) == (
        f"context/overflow: assembled context requires {need} tokens but usable budget is 8000"
    )


def test_preview_only_reports_without_compacting_or_raising() -> None:
    msgs = long_conversation()
    fake = FakeSummarizer()

    class NoLease(InMemoryLeaseStore):
        def read(self, key: str) -> Any:
            raise AssertionError("preview took a lease")

    out = assemble(
        {"messages": msgs, "model": SMALL, "options": {"preview_only": True}},
        summarizer=fake,
        leases=NoLease(),
    )
    assert out.token_count > out.usable == 8_000
    assert fake.requests == [] and not out.applied.compacted and not out.applied.pruned
    assert out.token_count == sum(est(m) for m in msgs)
    huge = [user("q" * 40_000, ts=1)]
    assert assemble(
        {"messages": huge, "model": SMALL, "options": {"preview_only": True}}
    ).token_count == est(huge[0])


def test_compaction_that_still_does_not_fit_falls_through_to_references() -> None:
    body = "data " * 300
    msgs = long_conversation(20, body)
    # the kept tail alone is over budget: the newest turn ends in a huge result and has
    # no safe cut whose suffix fits, so the whole turn is kept
    msgs += [user("last"), assistant(call("cz", "dump")), result("cz", "dump", "k" * 34_000)]
    out = assemble({"messages": msgs, "model": SMALL}, summarizer=FakeSummarizer(reply="S"))
    assert out.applied.compacted and out.applied.pruned
    assert out.token_count <= out.usable
    assert out.applied.tail_start_index == len(msgs) - 3
    assert out.messages[-1].content[0].text.startswith("[function result reduced")


def test_assemble_with_a_config_object() -> None:
    cfg = AssemblyConfig(max_result_tokens=10, min_free_tokens=0)
    out = assemble({"messages": tool_turn(0, "w" * 400), "model": SMALL}, config=cfg)
    assert out.applied.capped_parts == 1


def test_unknown_config_keys_are_rejected() -> None:
    with pytest.raises(ValueError, match="lease_ttl"):
        AssemblyConfig(lease_ttl=3)  # type: ignore[call-arg]


def test_messages_are_required_by_assemble() -> None:
    with pytest.raises(AssemblyError, match="messages is required"):
        assemble({"model": SMALL})


def test_request_models_are_accepted_as_well_as_mappings() -> None:
    from context_manager.assembly import AssembleRequest

    request = {"messages": tool_turn(0, "x"), "model": SMALL, "system_prompt": "S."}
    as_model = AssembleRequest.model_validate(request)
    assert assemble(as_model) == assemble(request)


def test_every_function_takes_the_same_collaborators() -> None:
    from context_manager.assembly import compact, count_tokens, prune

    kwargs: dict[str, Any] = {
        "config": AssemblyConfig(),
        "summarizer": FakeSummarizer(),
        "catalog": None,
        "leases": InMemoryLeaseStore(),
        "clock": StepClock(),
    }
    request = {"messages": tool_turn(0, "x"), "model": SMALL}
    assert count_tokens(request, **kwargs).tokens > 0
    assert prune(request, **kwargs).scanned_parts == 0
    assert compact(request, **kwargs).status == "empty"
    assert assemble(request, **kwargs).model_resolved == "inline"


def test_public_names_are_documented() -> None:
    import context_manager.assembly as package

    for name in package.__all__:
        obj = getattr(package, name)
        if callable(obj):
            assert obj.__doc__, f"context_manager.assembly.{name} has no docstring"


def test_the_response_shares_no_mutable_object_with_the_request() -> None:
    details = {"rows": [1, 2]}
    arguments = {"path": "a.py"}
    request = {
        "messages": [
            {"role": "user", "content": [{"type": "text", "text": "hi"}], "timestamp": 1},
            {
                "role": "assistant",
                "content": [
                    {
                        "type": "function_call",
                        "id": "c1",
                        "function_id": "f",
                        "arguments": arguments,
                    }
                ],
                "stop_reason": "tool_use",
                "model": "m",
                "provider": "p",
                "timestamp": 2,
            },
            {
                "role": "function_result",
                "function_call_id": "c1",
                "function_id": "f",
                "content": [{"type": "text", "text": "ok"}],
                "details": details,
                "timestamp": 3,
            },
        ],
        "model": {"id": "m", "limits": {"context_window": 10_000, "max_output_tokens": 1_000}},
    }
    out = assemble(request)
    assert out.messages[2].details == details and out.messages[2].details is not details
    assert out.messages[1].content[0].arguments is not arguments


def test_with_a_counter_the_request_fits_by_that_counter() -> None:
    from context_manager import TiktokenCounter
    from context_manager.assembly.estimate import Estimator

    counter = TiktokenCounter()
    model = {"id": "m", "limits": {"context_window": 1400, "max_output_tokens": 200}}
    words = " ".join(f"w{i}" for i in range(40))
    msgs = [
        {"role": "user", "content": [{"type": "text", "text": words}], "timestamp": t}
        for t in range(1, 9)
    ]
    request = {"messages": msgs, "model": model, "system_prompt": "Be brief."}
    heuristic = assemble(request)
    exact = assemble(request, counter=counter)
    assert exact.token_count <= exact.usable
    recount = Estimator(counter.count_text)
    assert exact.token_count == recount.total(list(exact.messages)) + counter.count_text(
        exact.system_prompt
    )
    assert heuristic.token_count != exact.token_count  # it is another count
    request["messages"] = msgs * 8  # too long for the window by the counter: refused
    with pytest.raises(AssemblyError, match="usable budget is 1060"):
        assemble(request, counter=counter)
