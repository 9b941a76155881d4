"""The bounded summarisation pipeline, compact, and leases."""

from __future__ import annotations

import hashlib
import json
import math
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from pydantic import TypeAdapter

from context_manager.assembly import (
    AssemblyConfig,
    AssemblyError,
    InMemoryLeaseStore,
    LeaseRecord,
    SqliteLeaseStore,
    compact,
)
from context_manager.assembly.leases import default_lease_key
from context_manager.assembly.summary import (
    SummaryError,
    SummaryJob,
    render_prompt,
    strip_media,
    summarize,
)
from context_manager.assembly.wire import ModelInput, WireMessage
from context_manager.messages import Message
from context_manager.summarizer import Completion, CompletionRequest
from tests.support.assembly_fixtures import (
    BlockingSummarizer,
    FakeSummarizer,
    RaisingSummarizer,
    StepClock,
    assistant,
    call,
    custom,
    image,
    inline_result,
    result,
    text,
    tool_turn,
    user,
)

ADAPTER: TypeAdapter[Any] = TypeAdapter(list[WireMessage])
MODEL = {
    "id": "claude-x",
    "provider": "anthropic",
    "limits": {"context_window": 200_000, "max_output_tokens": 8_000},
}
OPENING = (
    "Summarise the conversation below following the system-prompt structure exactly. "
    "Keep identifiers verbatim.\n\n<conversation>\n"
)


def parse(*messages: dict[str, Any]) -> list[Any]:
    return list(ADAPTER.validate_python(list(messages)))


def est(message: dict[str, Any]) -> int:
    """The byte estimate of a message without images or details: compact JSON bytes / 4."""
    return len(json.dumps(message, separators=(",", ":"), ensure_ascii=False).encode()) // 4


def call_tokens(request: CompletionRequest) -> int:
    """A summariser call's estimated size: the system text, plus the user message with the
    largest 64-bit timestamp, plus 64."""
    body = {
        "role": "user",
        "content": [{"type": "text", "text": request.messages[0].text}],
        "timestamp": 2**63 - 1,
    }
    return len((request.system or "").encode()) // 4 + est(body) + 64


def message_of(t: str) -> Message:
    return Message.text_message("User", t)


def job(budget: int = 150_000, **kw: Any) -> SummaryJob:
    base: dict[str, Any] = {
        "model": ModelInput(id="claude-x", provider="anthropic"),
        "budget": budget,
        "anchor": None,
        "instructions": None,
        "max_output_chars": 2000,
        "timeout_ms": 60_000,
        "max_tokens": 4096,
    }
    base.update(kw)
    return SummaryJob(**base)


def conversation(turns: int, body: str = "output line\n" * 40) -> list[Any]:
    return parse(*(m for n in range(turns) for m in tool_turn(n, body)))


# ------------------------------------------------------------------ prompt
def test_prompt_lists_roles_text_and_calls_but_not_thinking_or_inline_results() -> None:
    msgs = parse(
        user("fix parse_config", ts=1),
        assistant({"type": "thinking", "text": "hmm"}, call("c1", "read", {"path": "a.py"}), ts=2),
        user(inline_result("c1", text("SECRET")), ts=3),
        result("c2", "grep", "match", ts=4),
    )
    assert render_prompt(msgs) == (
        OPENING
        + "\n[user]\nfix parse_config\n"
        + '\n[assistant]\n[tool_call] read {"path":"a.py"}\n'
        + "\n[user]\n"
        + "\n[function_result]\nmatch\n"
        + "</conversation>\n"
    )


def test_strip_media_replaces_images_and_truncates_result_text_only() -> None:
    msgs = parse(
        user(image(), "u" * 3000, ts=1),
        result("c", "f", "é" * 1500, ts=2),  # 3000 bytes
    )
    out = [m.wire() for m in strip_media(msgs, 2000)]
    assert out[0]["content"] == [text("[image stripped]"), text("u" * 3000)]
    assert out[1]["content"] == [text("é" * 1000 + "... [truncated]")]


# ------------------------------------------------------------------ pipeline
def test_a_fitting_head_is_one_call_without_fragment_note() -> None:
    msgs = conversation(3)
    fake = FakeSummarizer()
    assert summarize(msgs, job(), summarizer=fake, clock=StepClock()) == "summary #1"
    (request,) = fake.requests
    assert request.model == "claude-x" and request.provider == "anthropic"
    assert request.system is not None
    assert request.system.startswith(
        "Create a new anchored summary from the conversation history above."
    )
    assert "fragments" not in request.system
    for section in (
        "Goal",
        "Constraints & Preferences",
        "Progress",
        "Done",
        "In Progress",
        "Blocked",
        "Key Decisions",
        "Actions Taken",
        "Next Steps",
        "Critical Context",
        "Relevant Files",
    ):
        assert section in request.system
    assert request.messages[0].text == render_prompt(msgs)


def test_a_large_head_goes_in_consecutive_fragments_each_within_budget() -> None:
    msgs = conversation(30, "dáta ✓ " * 150)
    prompt = render_prompt(strip_media(msgs, 2000))
    fake = FakeSummarizer()
    budget = 3_000
    out = summarize(msgs, job(budget=budget), summarizer=fake, clock=StepClock())
    n = len(fake.requests)
    # each call carries fewer than 4 x budget bytes of the prompt, and there are 32 at most
    assert math.ceil(len(prompt.encode("utf-8")) / (4 * budget)) <= n <= 32
    assert out == f"summary #{n}"
    assert "".join(r.messages[0].text for r in fake.requests) == prompt
    offset = 0
    for k, request in enumerate(fake.requests):
        assert request.system is not None and "fragments" in request.system
        assert call_tokens(request) <= budget
        if k:
            assert request.system.startswith("Update the anchored summary below")
            assert f"<previous-summary>\nsummary #{k}\n</previous-summary>" in request.system
        fragment = request.messages[0].text
        if k < n - 1:  # the longest fragment that fits: one more character would not
            longer = prompt[offset : offset + len(fragment) + 1]
            one_more = request.model_copy(update={"messages": (message_of(longer),)})
            assert call_tokens(one_more) > budget
        offset += len(fragment)


def test_previous_summary_anchors_the_first_call() -> None:
    fake = FakeSummarizer()
    summarize(conversation(1), job(anchor="OLD SUMMARY"), summarizer=fake, clock=StepClock())
    system = fake.requests[0].system or ""
    assert system.startswith("Update the anchored summary below using the conversation history")
    assert "<previous-summary>\nOLD SUMMARY\n</previous-summary>" in system


def test_instructions_are_trimmed_bounded_and_fenced() -> None:
    fake = FakeSummarizer()
    summarize(
        conversation(1), job(instructions="  focus on files  "), summarizer=fake, clock=StepClock()
    )
    assert "<instructions>\nfocus on files\n</instructions>" in (fake.requests[0].system or "")
    fake = FakeSummarizer()
    summarize(conversation(1), job(instructions="z" * 2500), summarizer=fake, clock=StepClock())
    assert "<instructions>\n" + "z" * 2000 + "... [truncated]\n</instructions>" in (
        fake.requests[0].system or ""
    )
    fake = FakeSummarizer()
    summarize(conversation(1), job(instructions="   "), summarizer=fake, clock=StepClock())
    assert "<instructions>" not in (fake.requests[0].system or "")


def test_more_than_32_fragments_fails_before_any_call() -> None:
    fake = FakeSummarizer()
    with pytest.raises(SummaryError) as err:
        summarize(
            conversation(200, "x" * 1900), job(budget=2_000), summarizer=fake, clock=StepClock()
        )
    assert err.value.kind == "too_large" and fake.requests == []


def test_a_budget_below_the_request_overhead_fails() -> None:
    fake = FakeSummarizer()
    with pytest.raises(SummaryError) as err:
        summarize(conversation(1), job(budget=100), summarizer=fake, clock=StepClock())
    assert err.value.kind == "too_large" and fake.requests == []


class GrowingSummarizer:
    """Each answer is longer than the last, so each fragment has less room."""

    def __init__(self, words_per_call: int) -> None:
        self.words_per_call = words_per_call
        self.calls = 0

    def complete(self, request: CompletionRequest) -> Completion:
        self.calls += 1
        return Completion(text="word " * (self.words_per_call * self.calls), stop_reason="end_turn")


def test_text_left_after_32_calls_fails_without_a_partial_summary() -> None:
    growing = GrowingSummarizer(20)
    with pytest.raises(SummaryError) as err:
        summarize(
            conversation(330, "y" * 600), job(budget=2_500), summarizer=growing, clock=StepClock()
        )
    assert err.value.kind == "call_limit" and growing.calls == 32


def test_an_anchor_that_leaves_no_room_fails() -> None:
    growing = GrowingSummarizer(400)
    with pytest.raises(SummaryError) as err:
        summarize(
            conversation(100, "y" * 600), job(budget=2_500), summarizer=growing, clock=StepClock()
        )
    assert err.value.kind == "anchor_too_big" and growing.calls == 5


@pytest.mark.parametrize(
    ("summarizer", "kind"),
    [
        (None, "unavailable"),
        (FakeSummarizer(reply="   "), "empty"),
        (FakeSummarizer(stop_reason="max_tokens"), "failed"),
        (FakeSummarizer(stop_reason="refusal"), "failed"),
        (RaisingSummarizer(), "failed"),
    ],
)
def test_failures_never_yield_a_summary(summarizer: Any, kind: str) -> None:
    with pytest.raises(SummaryError) as err:
        summarize(conversation(2), job(), summarizer=summarizer, clock=StepClock())
    assert err.value.kind == kind


def test_a_summariser_that_does_not_answer_is_abandoned() -> None:
    slow = BlockingSummarizer()
    try:
        with pytest.raises(SummaryError) as err:
            summarize(conversation(1), job(timeout_ms=30), summarizer=slow, clock=StepClock())
        assert err.value.kind == "timeout"
        assert slow.entered.is_set()
    finally:
        slow.release.set()


def test_a_hung_summariser_holds_a_bounded_number_of_threads_however_many_deadlines_it_misses() -> (
    None
):
    import threading

    from context_manager.deadline import MAX_ABANDONED

    slow = BlockingSummarizer()
    before = threading.active_count()
    try:
        for _ in range(3 * MAX_ABANDONED):
            with pytest.raises(SummaryError) as err:
                summarize(conversation(1), job(timeout_ms=20), summarizer=slow, clock=StepClock())
            assert err.value.kind == "timeout"
        assert threading.active_count() <= before + MAX_ABANDONED
    finally:
        slow.release.set()


def test_one_deadline_covers_every_fragment() -> None:
    clock = StepClock()

    class Slowish(FakeSummarizer):
        def complete(self, request: CompletionRequest) -> Completion:
            clock.now += 40_000  # each call takes 40 s of the 60 s deadline
            return super().complete(request)

    fake = Slowish()
    with pytest.raises(SummaryError) as err:
        summarize(conversation(30, "z" * 600), job(budget=3_000), summarizer=fake, clock=clock)
    assert err.value.kind == "timeout" and len(fake.requests) == 2


# ------------------------------------------------------------------ compact
def run_compact(messages: list[dict[str, Any]], **kwargs: Any) -> Any:
    options = kwargs.pop("options", {})
    return compact({"messages": messages, "model": MODEL, "options": options}, **kwargs)


def test_compact_of_nothing_is_empty_without_lease_or_call() -> None:
    fake = FakeSummarizer()

    class NoLease(InMemoryLeaseStore):
        def put_if_idle(self, key: str, record: LeaseRecord, ttl_ms: int) -> bool:
            raise AssertionError("lease taken")

    out = run_compact([], summarizer=fake, leases=NoLease())
    assert out.model_dump(exclude_none=True) == {"status": "empty"}
    assert fake.requests == []


def test_compact_summarises_the_head_and_reports_sizes() -> None:
    msgs = [m for n in range(6) for m in tool_turn(n, "r" * 2000)]
    fake = FakeSummarizer(reply="THE SUMMARY")
    leases = InMemoryLeaseStore()
    out = run_compact(
        msgs,
        summarizer=fake,
        leases=leases,
        options={"previous_summary": "earlier", "tail_turns": 2},
    )
    dumped = out.model_dump(exclude_none=True)
    assert dumped["status"] == "ok" and dumped["summary"] == "THE SUMMARY"
    assert dumped["tail_start_index"] == 16  # the last two turns (4 messages each)
    assert dumped["tokens_before"] == sum(est(m) for m in msgs[:16])
    assert dumped["tokens_after"] == len("THE SUMMARY") // 4 + sum(est(m) for m in msgs[16:])
    assert dumped["used_prior_summary"] is True
    assert "<previous-summary>\nearlier\n</previous-summary>" in (fake.requests[0].system or "")
    assert leases.read(default_lease_key(parse(*msgs))) is None  # released


def test_compact_may_summarise_everything() -> None:
    msgs = tool_turn(0, "abc")
    out = run_compact(msgs, summarizer=FakeSummarizer(reply="S"), options={"tail_turns": 0})
    assert out.model_dump(exclude_none=True) == {
        "status": "ok",
        "summary": "S",
        "tail_start_index": None,
        "tokens_before": sum(est(m) for m in msgs),
        "tokens_after": 0,
        "used_prior_summary": False,
    }


def test_compact_selects_over_customs_and_indexes_the_request() -> None:
    msgs = [*tool_turn(0, "a" * 100), custom("memo"), *tool_turn(1, "b" * 100)]
    out = run_compact(msgs, summarizer=FakeSummarizer(), options={"tail_turns": 1})
    assert out.tail_start_index == 5
    assert out.tokens_before == sum(est(m) for m in msgs[:5])


def test_preserve_recent_tokens_replaces_the_tail_budget() -> None:
    msgs = [m for n in range(3) for m in tool_turn(n, "r" * 400)]
    roomy = run_compact(
        msgs,
        summarizer=FakeSummarizer(),
        options={"tail_turns": 2, "preserve_recent_tokens": 100_000},
    )
    tight = run_compact(
        msgs, summarizer=FakeSummarizer(), options={"tail_turns": 2, "preserve_recent_tokens": 50}
    )
    assert roomy.tail_start_index == 4
    assert tight.tail_start_index == 11  # only the final answer fits; a safe cut


@pytest.mark.parametrize(
    ("summarizer", "status"),
    [(None, "overflow"), (RaisingSummarizer(), "overflow"), (FakeSummarizer(reply=""), "empty")],
)
def test_compact_maps_failures_to_statuses(summarizer: Any, status: str) -> None:
    leases = InMemoryLeaseStore()
    msgs = [m for n in range(3) for m in tool_turn(n, "x")]
    out = run_compact(msgs, summarizer=summarizer, leases=leases, options={"lease_key": "k"})
    assert out.model_dump(exclude_none=True) == {"status": status}
    assert leases.read("k") is None


def test_compact_timeout_is_overflow_and_releases_the_lease() -> None:
    slow, leases = BlockingSummarizer(), InMemoryLeaseStore()
    try:
        out = run_compact(
            tool_turn(0, "x") + tool_turn(1, "y"),
            summarizer=slow,
            leases=leases,
            config=AssemblyConfig(summarizer_timeout_ms=25),
            options={"lease_key": "k"},
        )
        assert out.status == "overflow" and leases.read("k") is None
    finally:
        slow.release.set()


def test_compact_deadline_is_bounded_by_the_lease_ttl() -> None:
    fake = FakeSummarizer()
    out = run_compact(
        tool_turn(0, "x") + tool_turn(1, "y"),
        summarizer=fake,
        config=AssemblyConfig(lease_ttl_secs=1),
    )  # 1000 - 1000 = 0 ms
    assert out.status == "overflow" and fake.requests == []


def test_compact_busy_when_the_lease_is_held() -> None:
    leases, clock = InMemoryLeaseStore(), StepClock()
    nonce = leases.acquire("k", now=clock.now, ttl_ms=300_000)
    assert nonce is not None
    fake = FakeSummarizer()
    msgs = tool_turn(0, "x") + tool_turn(1, "y")
    out = run_compact(msgs, summarizer=fake, leases=leases, clock=clock, options={"lease_key": "k"})
    assert out.model_dump(exclude_none=True) == {"status": "busy"} and fake.requests == []
    assert leases.read("k") == LeaseRecord(nonce, clock.now)  # a foreign lease stays


def test_compact_raises_when_the_model_is_unresolved() -> None:
    with pytest.raises(AssemblyError) as err:
        compact(
            {"messages": tool_turn(0, "x"), "model": {"id": "ghost"}},
            catalog=None,
            config=AssemblyConfig(allow_fallback_limits=False),
        )
    assert err.value.code == "context/model_unresolved"


def test_compact_head_empty_is_empty() -> None:
    out = run_compact([user("only"), assistant("one turn")], summarizer=FakeSummarizer())
    assert out.status == "empty"


# ------------------------------------------------------------------ leases
def test_lease_ttl_thresholds() -> None:
    store = InMemoryLeaseStore()
    assert store.acquire("k", now=10_000, ttl_ms=300_000) is not None
    assert store.acquire("k", now=10_000 + 299_999, ttl_ms=300_000) is None
    assert store.acquire("k", now=10_000 + 300_001, ttl_ms=300_000) is not None


def test_release_never_clears_a_foreign_lease() -> None:
    store = InMemoryLeaseStore()
    old = store.acquire("k", now=0, ttl_ms=100)
    new = store.acquire("k", now=500, ttl_ms=100)
    assert old is not None and new is not None and old != new
    store.release("k", old)
    assert store.read("k") == LeaseRecord(new, 500)
    store.release("k", new)
    assert store.read("k") is None


def test_a_store_that_fails_reads_as_busy() -> None:
    import sqlite3

    class Locked(InMemoryLeaseStore):
        def put_if_idle(self, key: str, record: LeaseRecord, ttl_ms: int) -> bool:
            raise sqlite3.OperationalError("database is locked")

    class Unwritable(InMemoryLeaseStore):
        def put_if_idle(self, key: str, record: LeaseRecord, ttl_ms: int) -> bool:
            raise OSError("read-only")

    assert Locked().acquire("k", now=0, ttl_ms=10) is None
    assert Unwritable().acquire("k", now=0, ttl_ms=10) is None  # invariant 9: not an error


def test_default_lease_key_hashes_compact_json_with_zero_separators() -> None:
    msgs = [user("a", ts=1), custom("m", ts=2)]
    digest = hashlib.sha256()
    for m in msgs:
        digest.update(json.dumps(m, separators=(",", ":"), ensure_ascii=False).encode() + b"\0")
    assert default_lease_key(parse(*msgs)) == digest.hexdigest()


def test_sqlite_leases_are_shared_between_processes(tmp_path: Path) -> None:
    path = tmp_path / "leases" / "l.sqlite3"
    first, second = SqliteLeaseStore(path), SqliteLeaseStore(path)
    nonce = first.acquire("k", now=1_000, ttl_ms=60_000)
    assert nonce is not None
    assert second.acquire("k", now=2_000, ttl_ms=60_000) is None
    code = (
        "import sys; from context_manager.assembly import SqliteLeaseStore; "
        "s = SqliteLeaseStore(sys.argv[1]); "
        "print(s.acquire('k', now=3000, ttl_ms=60000) is None, "
        "s.acquire('other', now=3000, ttl_ms=60000) is not None)"
    )
    out = subprocess.run(
        [sys.executable, "-c", code, str(path)], check=True, capture_output=True, text=True
    )
    assert out.stdout.split() == ["True", "True"]
    second.release("k", nonce)
    assert first.read("k") is None
    assert first.acquire("other", now=3_001, ttl_ms=60_000) is None


def test_lease_dir_config_shares_leases_through_sqlite(tmp_path: Path) -> None:
    cfg = AssemblyConfig(lease_dir=tmp_path)
    holder = SqliteLeaseStore(tmp_path / "leases.sqlite3")
    assert holder.acquire("k", now=StepClock().now, ttl_ms=300_000) is not None
    out = run_compact(
        tool_turn(0, "x") + tool_turn(1, "y"),
        summarizer=FakeSummarizer(),
        config=cfg,
        clock=StepClock(),
        options={"lease_key": "k"},
    )
    assert out.status == "busy"


def test_one_of_many_concurrent_acquirers_gets_the_lease(tmp_path: Path) -> None:
    import threading

    for store in (InMemoryLeaseStore(), SqliteLeaseStore(tmp_path / "l.sqlite3")):
        start = threading.Barrier(8)
        won: list[str] = []

        def take(
            store: Any = store, start: threading.Barrier = start, won: list[str] = won
        ) -> None:
            start.wait()
            nonce = store.acquire("conv", now=1_000, ttl_ms=60_000)
            if nonce is not None:
                won.append(nonce)

        threads = [threading.Thread(target=take) for _ in range(8)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        assert len(won) == 1 and store.read("conv") == LeaseRecord(won[0], 1_000)
        store.release("conv", won[0])
        assert store.acquire("conv", now=2_000, ttl_ms=60_000) is not None


def test_an_unusable_lease_directory_is_a_state_error(tmp_path: Path) -> None:
    blocker = tmp_path / "file"
    blocker.write_text("not a directory")
    with pytest.raises(AssemblyError) as info:
        SqliteLeaseStore(blocker / "leases.sqlite3")
    assert info.value.code == "context/state" and "lease_dir" in str(info.value)
