"""AutobiographicalStrategy: chunking, compression requests and gates, merges, pins, holds,
search, the adaptive compile through the solver adapter, and budgets (spec §7)."""

from __future__ import annotations

import itertools
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import solvers
from context_manager import (
    CharsCounter,
    Completion,
    CompletionRequest,
    ContextManager,
    NoSummarizerWarning,
    OverBudgetError,
    SummarizerNotConfiguredError,
    ToolResultBlock,
    ToolUseBlock,
    tool_pair_problems,
)
from context_manager.strategies.autobiographical import AutobiographicalStrategy
from context_manager.summarizer import MEMORY_MARKER, ExtractiveSummarizer, Usage
from tests.support.scripted_summarizer import ScriptedSummarizer, open_cm, two_l2_ladder, words


def converse(cm: ContextManager, n: int, *, turns: bool = False) -> None:
    """Add ``n`` messages of 20 words (the agent's and the user's in turn with ``turns``),
    letting the strategy work after each."""
    for i in range(n):
        cm.add_message("User" if i % 2 or not turns else "Claude", words(20, f"m{i}"))
        cm.drain()


def test_partial_chunk_is_never_compressed(tmp_path: Path) -> None:
    s = ScriptedSummarizer()
    cm, strategy = open_cm(tmp_path, s, target_chunk_tokens=1000)
    for i in range(6):
        cm.add_message("User", f"message {i}")
    cm.compile(max_tokens=10_000, reserve_for_response=100)
    cm.drain()
    assert s.requests == [] and strategy.summaries == {}
    cm.close()


def test_chunks_are_disjoint_compressed_and_survive_a_reopen(tmp_path: Path) -> None:
    s = ScriptedSummarizer()
    cm, strategy = open_cm(tmp_path, s)
    for i in range(40):
        cm.add_message("User" if i % 2 else "Claude", words(20, f"m{i}"))
    cm.drain()
    l1 = [x for x in strategy.summaries.values() if x.level == 1]
    assert l1 and len(l1) == len(strategy.chunks)
    seen: set[str] = set()
    for chunk in strategy.chunks:
        assert chunk.compressed and chunk.summary_id is not None
        assert len(chunk.source_ids) >= 4
        assert not seen.intersection(chunk.source_ids)
        seen.update(chunk.source_ids)
    calls = len(s.requests)
    cm.close()
    fresh = ScriptedSummarizer()
    cm, strategy = open_cm(tmp_path, fresh, target_chunk_tokens=170)
    cm.drain()
    assert fresh.requests == [] or all(  # only merges of existing memories, no re-compression
        MEMORY_MARKER not in r.messages[-3].text for r in fresh.requests
    )
    assert len([x for x in strategy.summaries.values() if x.level == 1]) == len(l1)
    assert calls > 0
    cm.close()


def test_holdback_waits_for_the_next_chunk(tmp_path: Path) -> None:
    s = ScriptedSummarizer()
    cm, strategy = open_cm(tmp_path, s, l1_holdback_chunks=1)
    for i in range(5):
        cm.add_message("User", words(20, f"a{i}"))
    assert len(strategy.chunks) == 1
    assert strategy.queued_chunks(cm._ctx) == []
    for i in range(5):
        cm.add_message("User", words(20, f"b{i}"))
    assert [c.id for c in strategy.queued_chunks(cm._ctx)] == ["c-0"]
    cm.close()


def tool_cycle(cm: ContextManager, i: int) -> None:
    cm.add_message("Claude", [ToolUseBlock(id=f"t{i}", name="bash", input={"cmd": words(10, "x")})])
    cm.add_message("User", [ToolResultBlock(tool_use_id=f"t{i}", content=words(30, f"out{i}"))])


def test_chunks_never_split_a_tool_pair_and_requests_stay_paired(tmp_path: Path) -> None:
    s = ScriptedSummarizer()
    cm, strategy = open_cm(tmp_path, s)
    cm.set_tool_definitions([{"name": "bash", "input_schema": {"type": "object"}}])
    for i in range(12):
        cm.add_message("User", words(15, f"u{i}"))
        tool_cycle(cm, i)
    cm.drain()
    assert s.requests
    for request in s.requests:
        assert tool_pair_problems(list(request.messages)) == []
    by_id = {m.id: m.message for m in cm.get_messages()}
    for chunk in strategy.chunks:
        assert not by_id[chunk.source_ids[-1]].tool_use_ids
    cm.close()


def test_no_compression_model_refuses_to_write(tmp_path: Path) -> None:
    s = ScriptedSummarizer()
    cm, _ = open_cm(tmp_path, s, compression_model=None)
    for i in range(8):
        cm.add_message("User", words(20, f"m{i}"))
    with pytest.raises(SummarizerNotConfiguredError, match="compression_model"):
        cm.tick()
    assert s.requests == []
    cm.close()


def test_no_summarizer_is_a_no_op_that_warns(tmp_path: Path) -> None:
    cm, strategy = open_cm(tmp_path, None)
    for i in range(8):
        cm.add_message("User", words(20, f"m{i}"))
    with pytest.warns(NoSummarizerWarning, match="no summariser"):
        assert cm.tick() is False and strategy.summaries == {}
    assert not cm.is_ready()
    cm.close()


def test_thin_chunks_get_a_stub_and_tool_chunks_wait_for_tools(tmp_path: Path) -> None:
    s = ScriptedSummarizer()
    cm, strategy = open_cm(tmp_path, s, min_chunk_chars_for_llm=10_000, target_chunk_tokens=40)
    for i in range(5):
        cm.add_message("User", words(8, f"q{i}"))
    cm.drain()
    assert s.requests == [] and [x.stub for x in strategy.summaries.values()] == [True]
    for i in range(3):
        tool_cycle(cm, i)
    cm.add_message("User", "done")
    assert cm.tick() is False  # tools unknown: the chunk with tool blocks waits
    cm.set_tool_definitions([{"name": "bash"}])
    assert cm.tick() is True and len(s.requests) == 1
    cm.close()


def test_l1_request_is_as_of_the_chunk(tmp_path: Path) -> None:
    s = ScriptedSummarizer()
    cm, strategy = open_cm(tmp_path, s, merge_threshold=100)
    cm.set_system_prompt("You are the agent.")
    ids = [cm.add_message("User", words(20, f"m{i}")) for i in range(15)]
    cm.drain()
    first, second = s.requests[0], s.requests[1]
    assert first.system == "You are the agent." and first.model == "test-model"
    assert first.max_tokens == 16_000
    texts = [m.text for m in second.messages]
    assert texts[0] == "[CM] Recall memory L1-0."  # the ladder of earlier memories
    marker = next(i for i, t in enumerate(texts) if t.startswith(MEMORY_MARKER))
    chunk = strategy.chunks[1].source_ids
    assert texts[marker + 1 : marker + 1 + len(chunk)] == [cm.get_message(i).text for i in chunk]
    later = cm.get_message(ids[-1]).text
    assert all(later != t for t in texts)  # nothing after the chunk
    cm.close()


@pytest.mark.parametrize(
    ("bad", "attempts"),
    [
        (Completion(text="partial", stop_reason="max_tokens"), 3),
        (Completion(text="  ", stop_reason="end_turn"), 3),
        # a refusal with no variant to try is exhausted at once: the same request never again
        (Completion(text="no", stop_reason="refusal"), 1),
    ],
)
def test_only_end_turn_becomes_memory(tmp_path: Path, bad: Completion, attempts: int) -> None:
    s = ScriptedSummarizer(lambda r, n: bad)
    cm, strategy = open_cm(tmp_path, s)
    for i in range(5):
        cm.add_message("User", words(20, f"m{i}"))
    assert cm.tick() is True  # an attempt was made ...
    assert strategy.summaries == {} and not strategy.chunks[0].compressed  # ... not kept
    cm.drain()  # after the attempts the chunk stays raw for good
    assert strategy.chunk_attempts == {"c-0": attempts} and cm.is_ready()
    assert strategy.summaries == {}
    cm.close()


def test_merges_form_contiguous_higher_levels_from_marked_sources(tmp_path: Path) -> None:
    s = ScriptedSummarizer()
    cm, strategy = open_cm(tmp_path, s, merge_threshold=3)
    for i in range(80):
        cm.add_message("User", words(20, f"m{i}"))
    cm.drain()
    levels = sorted({x.level for x in strategy.summaries.values()})
    assert levels[:2] == [1, 2]
    for x in strategy.summaries.values():
        if x.level > 1:
            children = [strategy.summaries[c] for c in x.source_ids]
            assert all(c.level == x.level - 1 and c.parent_id == x.id for c in children)
    # each L2 request: earlier memories, the marker, then exactly the messages it covers
    merges = [r for r in s.requests if "(level 2)" in r.messages[-1].text]
    for request, parent in zip(
        merges,
        sorted((x for x in strategy.summaries.values() if x.level == 2), key=_made),
        strict=True,
    ):
        texts = [m.text for m in request.messages]
        marker = next(i for i, t in enumerate(texts) if t.startswith(MEMORY_MARKER))
        leaves = [cm.get_message(i).text for i in strategy.leaves_of(parent)]
        assert texts[marker + 1 : -1] == leaves
        assert all(t not in leaves for t in texts[:marker])
    cm.close()


def _made(summary: Any) -> int:
    return int(summary.id.rsplit("-", 1)[1])


@settings(max_examples=15, deadline=None)
@given(
    n=st.integers(21, 70),  # enough closed chunks for a merge at any threshold drawn
    threshold=st.integers(2, 4),
    target=st.integers(20, 80),
)
def test_extractive_memories_quote_only_the_messages_they_cover(
    n: int, threshold: int, target: int
) -> None:
    cm, strategy = open_cm(
        None, ExtractiveSummarizer(), merge_threshold=threshold, summary_target_tokens=target
    )
    for i in range(n):
        cm.add_message("User", f"Step {i} opened f{i}.py. " + words(12, f"m{i}"))
    cm.drain()
    assert any(x.level >= 2 for x in strategy.summaries.values())  # merges were made
    for memory in strategy.summaries.values():
        covered = "\n".join(cm.get_message(i).text for i in strategy.leaves_of(memory))
        lines = memory.content.splitlines()
        assert len(lines) == len(set(lines))  # no sentence twice
        assert all(line in covered for line in lines), memory.id
    cm.close()


def test_pins_render_raw_in_order_and_persist(tmp_path: Path) -> None:
    s = ScriptedSummarizer()
    cm, strategy = open_cm(tmp_path, s, target_chunk_tokens=60)
    ids = [cm.add_message("User", words(20, f"m{i}")) for i in range(6)]
    pin = cm.mark_document(ids[5], name="spec")  # before its chunk closes
    ids += [cm.add_message("User", words(20, f"m{i}")) for i in range(6, 12)]
    cm.drain()
    assert all(ids[5] not in c.source_ids for c in strategy.chunks)
    result = cm.compile(max_tokens=260, reserve_for_response=10)
    texts = [m.text for m in result.messages]
    assert cm.get_message(ids[5]).text in texts
    assert len(texts) < 12  # the rest folded around the pinned message
    cm.close()
    cm, strategy = open_cm(tmp_path, s, target_chunk_tokens=60)
    assert [p.id for p in cm.list_pins()] == [pin] and cm.list_pins()[0].name == "spec"
    assert cm.unpin(pin) is True and cm.unpin(pin) is False
    cm.close()


def test_pins_follow_branches(tmp_path: Path) -> None:
    cm, _ = open_cm(tmp_path, ScriptedSummarizer())
    a = cm.add_message("User", "a")
    b = cm.add_message("User", "b")
    shared = cm.pin_range(a, a)
    cm.fork("experimental")
    cm.pin_range(b, b)
    assert len(cm.list_pins()) == 2
    cm.switch_branch("main")
    assert [p.id for p in cm.list_pins()] == [shared]
    cm.close()


def test_holds_keep_messages_out_of_compression(tmp_path: Path) -> None:
    s = ScriptedSummarizer()
    cm, strategy = open_cm(tmp_path, s)
    cm.set_tool_definitions([{"name": "bash"}])
    for i in range(3):
        cm.add_message("User", words(20, f"m{i}"))
    cm.add_message("Claude", [ToolUseBlock(id="t", name="bash")])
    held = cm.add_message(
        "User", [ToolResultBlock(tool_use_id="t", content="PLACEHOLDER")], hold=True
    )
    for i in range(6):
        cm.add_message("User", words(20, f"n{i}"))
    cm.drain()
    assert all("PLACEHOLDER" not in m.text for r in s.requests for m in r.messages)
    assert all(held not in c.source_ids for c in strategy.chunks)
    texts = [m.text for m in cm.compile(max_tokens=100_000, reserve_for_response=10).messages]
    assert "PLACEHOLDER" in texts
    cm.edit_message(held, [ToolResultBlock(tool_use_id="t", content="REAL RESULT")])
    cm.release_compression([held])
    cm.drain()
    assert any("REAL RESULT" in m.text for r in s.requests for m in r.messages)
    cm.close()


def test_search_summaries(tmp_path: Path) -> None:
    answers = ["cats and CATS and cats", "one note about Cats", "dogs"]
    s = ScriptedSummarizer(
        lambda r, n: Completion(text=answers[(n - 1) % 3], stop_reason="end_turn")
    )
    cm, _ = open_cm(tmp_path, s, merge_threshold=100)
    for i in range(15):
        cm.add_message("User", words(20, f"m{i}"))
    cm.drain()
    found = cm.search_summaries("cats")
    assert [m for _, m in found] == [3, 1]
    assert cm.get_summary("nonexistent") is None
    assert len(cm.search_summaries()) == 3 and len(cm.search_summaries(limit=2)) == 2
    assert cm.search_summaries("cats", levels=[2]) == []
    cm.close()


def test_search_by_regex_and_merged(tmp_path: Path) -> None:
    answers = ["at 14:23 then 16:45 and 18:00", "no times here"]
    s = ScriptedSummarizer(
        lambda r, n: Completion(text=answers[min(n - 1, 1)], stop_reason="end_turn")
    )
    cm, _strategy = open_cm(tmp_path, s, merge_threshold=2)
    for i in range(10):
        cm.add_message("User", words(20, f"m{i}"))
    cm.drain()
    hits = cm.search_summaries(regex=r"\d{2}:\d{2}", include_merged=True)
    assert [(x.id, m) for x, m in hits] == [("L1-0", 3)]
    assert all(x.parent_id is None for x, _ in cm.search_summaries())
    with pytest.raises(Exception, match="invalid regex"):
        cm.search_summaries(regex="(")
    cm.close()


def test_over_budget_refuses_with_diagnostics(tmp_path: Path) -> None:
    cm, _ = open_cm(tmp_path, ScriptedSummarizer(), recent_window_tokens=100_000)
    for i in range(30):
        cm.add_message("User", words(80, f"m{i}"))
    with pytest.raises(OverBudgetError, match="exceed the hard budget") as info:
        cm.compile(max_tokens=500, reserve_for_response=100)
    assert info.value.actual > info.value.budget == 400
    assert info.value.diagnostics["tail_tokens"] > 0
    preview = cm.compile(max_tokens=500, reserve_for_response=100, dry_run=True)
    assert preview.render_stats["fits"] is False
    cm.close()


@pytest.mark.parametrize("method", ["kv-stable", "flat-profile", "oldest-first", "exact"])
def test_adaptive_compile_folds_the_middle_within_budget(tmp_path: Path, method: str) -> None:
    s = ScriptedSummarizer()
    cm, strategy = open_cm(tmp_path, s, recent_window_tokens=200, solver=method)
    converse(cm, 30, turns=True)
    raw = sum(CharsCounter().count_message(x.message) for x in cm.get_messages())
    for _ in range(3):
        result = cm.compile(max_tokens=800, reserve_for_response=100)
        tokens = sum(CharsCounter().count_message(m) for m in result.messages)
        assert tokens <= 700 < raw
        assert result.render_stats["summaries"]
    covered = {i for e in strategy.summaries.values() for i in strategy.leaves_of(e)}
    shown = {m.text for m in result.messages}
    for stored in cm.get_messages():  # raw, or inside a summary shown
        assert stored.message.text in shown or stored.id in covered
    cm.close()


def test_dry_run_commits_nothing(tmp_path: Path) -> None:
    cm, strategy = open_cm(tmp_path, ScriptedSummarizer(), recent_window_tokens=200)
    converse(cm, 30)
    live = cm.compile(max_tokens=2000, reserve_for_response=200)
    stats = cm.get_render_stats()
    before = list(strategy.resolutions)
    cm.compile(max_tokens=700, reserve_for_response=100, dry_run=True)
    assert strategy.resolutions == before and cm.get_render_stats() == stats
    assert live.render_stats == stats
    cm.close()


def test_render_stats_before_and_after(tmp_path: Path) -> None:
    cm, _ = open_cm(tmp_path, ScriptedSummarizer(), recent_window_tokens=100)
    assert cm.get_render_stats() is None
    for i in range(8):
        cm.add_message("User", f"short {i}")
    stats = cm.compile(max_tokens=10_000, reserve_for_response=100).render_stats
    assert stats["summaries"] == {}
    total = stats["head"]["messages"] + stats["tail"]["messages"] + stats["middle_raw"]["messages"]
    assert total == 8


@pytest.mark.parametrize(
    "method", [m for m in solvers.names() if not solvers.capabilities(m).oracle]
)
def test_long_run_never_errors(tmp_path: Path, method: str) -> None:
    options = dict(solvers.capabilities(method).example_options)
    cm, _ = open_cm(
        tmp_path,
        ExtractiveSummarizer(target_tokens=40),
        recent_window_tokens=400,
        target_chunk_tokens=120,
        merge_threshold=3,
        summary_target_tokens=40,
        solver=method,
        solver_options=options,
        l1_holdback_chunks=1,
    )
    for i in range(120):
        cm.add_message("User" if i % 2 else "Claude", words(12, f"t{i}"))
        cm.drain()
        result = cm.compile(max_tokens=1500, reserve_for_response=100)
        assert sum(CharsCounter().count_message(m) for m in result.messages) <= 1400
        assert tool_pair_problems(result.messages) == []
    cm.close()


def test_solver_demand_and_summaries_in_range(tmp_path: Path) -> None:
    s = ScriptedSummarizer()
    cm, strategy = open_cm(tmp_path, s, l1_holdback_chunks=3, merge_threshold=50)
    stamps = []
    for i in range(30):
        stamps.append(1000.0 + i)
        cm.add_message("User", words(20, f"m{i}"), timestamp=stamps[-1])
    cm.drain()
    held_back = [c for c in strategy.chunks if not c.compressed]
    assert held_back  # the newest chunks wait for the holdback
    with pytest.raises(OverBudgetError) as info:
        cm.compile(max_tokens=150, reserve_for_response=10, catch_up=False)  # demand L1s
    assert info.value.diagnostics["floor_tokens"] > 140
    cm.drain()
    assert all(c.compressed for c in held_back)
    found = cm.get_summaries_in_range(from_time=1000.0, to_time=1003.0)
    assert found and found[0].first == cm.get_messages()[0].id
    assert cm.get_summaries_in_range(from_time=5000.0) == []
    cm.close()


def test_tool_use_answers_are_retried_without_tools(tmp_path: Path) -> None:
    def answer(request: CompletionRequest, n: int) -> Completion:
        if n <= 2:
            return Completion(text="", stop_reason="tool_use")
        return Completion(text="I remember it.", stop_reason="end_turn")

    s = ScriptedSummarizer(answer)
    cm, strategy = open_cm(tmp_path, s)
    cm.set_tool_definitions([{"name": "bash"}])
    for i in range(5):
        cm.add_message("User", words(20, f"m{i}"))
    assert cm.tick() is True
    assert len(s.requests) == 3
    assert s.requests[1].messages[-1].text.endswith("do not call any tool.")
    assert s.requests[1].tools is not None and s.requests[2].tools is None
    assert [x.content for x in strategy.summaries.values()] == ["I remember it."]
    cm.close()


def test_reasoning_wrapped_answers_are_cleaned_or_retried(tmp_path: Path) -> None:
    answers = iter(
        [
            Completion(text="<thinking>only thoughts</thinking>", stop_reason="end_turn"),
            Completion(text="<thinking>x</thinking> The memory.", stop_reason="end_turn"),
        ]
    )
    s = ScriptedSummarizer(lambda r, n: next(answers))
    cm, strategy = open_cm(tmp_path, s)
    for i in range(5):
        cm.add_message("User", words(20, f"m{i}"))
    assert cm.tick() is True and len(s.requests) == 2
    assert s.requests[1].messages[-1].text.endswith("no reasoning markup.")
    assert [x.content for x in strategy.summaries.values()] == ["The memory."]
    cm.close()


def test_failed_merges_are_quarantined_durably(tmp_path: Path) -> None:
    def answer(request: CompletionRequest, n: int) -> Completion:
        merging = "level 2" in request.messages[-1].text
        if merging:
            return Completion(text="no", stop_reason="refusal")
        return Completion(text=f"memory {n}", stop_reason="end_turn")

    s = ScriptedSummarizer(answer)
    cm, strategy = open_cm(tmp_path, s, merge_threshold=2, merge_attempt_limit=2)
    for i in range(10):
        cm.add_message("User", words(20, f"m{i}"))
    cm.drain()
    assert all(x.level == 1 and x.parent_id is None for x in strategy.summaries.values())
    assert strategy.merge_groups(cm._ctx) == []  # quarantined after two rejections
    calls = len(s.requests)
    cm.close()
    cm, strategy = open_cm(tmp_path, s, merge_threshold=2, merge_attempt_limit=2)
    cm.drain()
    assert len(s.requests) == calls  # the quarantine survived the reopen
    cm.close()


def test_summarizer_failure_leaves_the_chunk_raw_and_retries_later(tmp_path: Path) -> None:
    broken = [True]

    def answer(request: CompletionRequest, n: int) -> Completion:
        if broken[0]:
            raise RuntimeError("Simulated LLM failure")
        return Completion(text="I remember.", stop_reason="end_turn")

    cm, strategy = open_cm(tmp_path, ScriptedSummarizer(answer))
    for i in range(5):
        cm.add_message("User", words(20, f"m{i}"))
    assert cm.tick() is True  # the call was made; its failure is logged, not raised
    assert strategy.summaries == {} and strategy.chunk_attempts == {}  # and not a verdict
    texts = [m.text for m in cm.compile(max_tokens=10_000, reserve_for_response=10).messages]
    assert len(texts) == 5
    broken[0] = False
    assert cm.tick() is False  # the chunk backs off (retry_backoff_seconds)
    cm.retry_compression()  # which a host may cut short
    assert cm.tick() is True and len(strategy.summaries) == 1
    cm.close()


def test_orphaned_chunk_records_stop_compression(tmp_path: Path) -> None:
    from context_manager import Store

    path = tmp_path / "cm.db"
    with Store.open(path) as store:  # records naming messages that do not exist
        for n in range(4):
            store.append(
                "default/autobio:chunks",
                {
                    "id": f"c-{n}",
                    "source_ids": [f"ghost{n}"],
                    "compressed": False,
                    "summary_id": None,
                },
            )
    s = ScriptedSummarizer()
    cm, strategy = open_cm(tmp_path, s)
    for i in range(60):
        cm.add_message("User", words(20, f"m{i}"))
    cm.drain()
    assert s.requests == [] and strategy.summaries == {} and strategy.failed_closed
    cm.close()


def grouping(tmp_path: Path, spans: dict[str, tuple[int, int]], n: int, **options: Any) -> Any:
    """Merge groups the strategy proposes for hand-placed L1 memories over ``n`` messages."""
    from context_manager.strategies.autobiographical import SummaryEntry

    cm, strategy = open_cm(tmp_path, ScriptedSummarizer(), target_chunk_tokens=10**9, **options)
    ids = [cm.add_message("User", f"m{i}") for i in range(n)]
    for name, (a, b) in spans.items():
        strategy.summaries[name] = SummaryEntry(
            item="",
            id=name,
            level=1,
            content=name,
            tokens=5,
            source_ids=ids[a : b + 1],
            first=ids[a],
            last=ids[b],
        )
    groups = strategy.merge_groups(cm._ctx)
    cm.close()
    return groups


def test_merge_grouping_contiguous_run_and_a_lone_newcomer(tmp_path: Path) -> None:
    spans = {c: (6 * i, 6 * i + 5) for i, c in enumerate("abcdef")}
    spans["july"] = (300, 310)
    assert grouping(tmp_path, spans, 320) == [list("abcdef")]


def test_merge_grouping_stranded_interior_run(tmp_path: Path) -> None:
    spans = {
        "a": (0, 5),
        "b": (12, 20),
        "c": (21, 30),
        "d": (31, 40),
        "e": (41, 50),
        "f": (300, 310),
    }
    assert grouping(tmp_path, spans, 320) == [["b", "c", "d", "e"]]
    newest_only = {"b": (12, 20), "c": (21, 30), "d": (31, 40), "e": (41, 50), "g": (51, 60)}
    assert grouping(tmp_path, newest_only, 320) == []  # the newest run waits for 6


def test_merge_grouping_excludes_too_wide_memories(tmp_path: Path) -> None:
    spans = {"wide": (0, 200)} | {c: (201 + 10 * i, 210 + 10 * i) for i, c in enumerate("abcde")}
    options = {"merge_max_source_span_messages": 100}
    assert grouping(tmp_path, spans, 320, **options) == []
    assert grouping(tmp_path, spans, 320, merge_threshold=5, **options) == [list("abcde")]


def _ten_l1s_under_one_l2(tmp_path: Path) -> tuple[int, int]:
    """Ten L1 memories merged into one L2; returns the price of an L1 and of the L2 pair."""
    cm, strategy = open_cm(tmp_path, ScriptedSummarizer(), merge_threshold=10)
    for i in range(41):  # ten chunks of four, and the newest message, always in the tail
        cm.add_message("User", words(20, f"m{i}"))
    cm.drain()
    by_level = sorted(strategy.summaries.values(), key=lambda s: (s.level, s.id))
    assert [s.level for s in by_level].count(1) == 10 and by_level[-1].level == 2
    l1 = max(strategy.recall_tokens(cm._ctx, s) for s in by_level[:-1])
    l2 = strategy.recall_tokens(cm._ctx, by_level[-1])
    cm.close()
    return l1, l2


@pytest.mark.parametrize("fits", [3, 10])
def test_pyramid_opens_a_summary_only_when_all_its_children_fit(tmp_path: Path, fits: int) -> None:
    l1, l2 = _ten_l1s_under_one_l2(tmp_path)
    cm, strategy = open_cm(
        tmp_path,
        ScriptedSummarizer(),
        merge_threshold=10,
        adaptive_resolution=False,
        l1_budget_tokens=fits * l1,
        l2_budget_tokens=l2,
        l3_budget_tokens=0,
    )
    result = cm.compile(max_tokens=100_000, reserve_for_response=0)
    headers = [m.text for m in result.messages if m.text.startswith("[Recall ")]
    if fits == 3:  # three L1s would leave seven messages' worth of children unshown
        assert len(headers) == 1 and headers[0].startswith("[Recall L2-")
    else:
        assert len(headers) == 10 and all(h.startswith("[Recall L1-") for h in headers)
    shown = {
        i for e in strategy.select(cm._ctx, _budget(), dry_run=True).entries for i in e.source_ids
    }
    assert shown == {m.id for m in cm.get_messages()}  # every message raw or summarised
    cm.close()


def _budget() -> Any:
    from context_manager.strategies.base import RequestBudget

    return RequestBudget(100_000)


def test_pyramid_template_is_checked(tmp_path: Path) -> None:
    from context_manager.errors import ConfigError

    with pytest.raises(ConfigError, match="recall_header_template"):
        AutobiographicalStrategy(compression_model="m", recall_header_template="{nope}")


def _texts(request: CompletionRequest) -> list[str]:
    return [m.text for m in request.messages]


def test_a_refusal_tries_variants_that_open_one_merged_memory(tmp_path: Path) -> None:
    def answer(request: CompletionRequest, n: int) -> Completion:
        if n in (1, 2):  # canonical and the first variant refused
            return Completion(text="I can't.", stop_reason="refusal")
        return Completion(text="I remember the seventh part.", stop_reason="end_turn")

    cm, strategy, s = two_l2_ladder(tmp_path, answer)
    before = len(strategy.summaries)
    cm.drain()
    assert len(s.requests) == 3
    assert len(strategy.summaries) == before + 1
    assert strategy.summaries[strategy.chunks[6].summary_id or ""].content.endswith("part.")
    canonical = _texts(s.requests[0])
    l2s = sorted(
        (x for x in strategy.summaries.values() if x.level == 2),
        key=lambda x: strategy.leaves_of(x)[0],
    )
    for variant, opened in zip(s.requests[1:], reversed(l2s), strict=True):  # newest first
        at = canonical.index(f"[CM] Recall memory {opened.id}.")
        children = [strategy.summaries[c] for c in opened.source_ids]
        pairs = [t for c in children for t in (f"[CM] Recall memory {c.id}.", c.content)]
        assert _texts(variant) == canonical[:at] + pairs + canonical[at + 2 :]
        unmarked = {"messages": (), "cache_breakpoints": ()}
        assert variant.model_copy(update=unmarked) == s.requests[0].model_copy(
            update=unmarked
        )  # model, tools, system, caps and cache lifetime unchanged
        assert variant.cache_breakpoints[-1] == _ladder_ends(variant, strategy)[-1]
    cm.close()


def test_refused_in_every_variant_is_never_sent_again(tmp_path: Path) -> None:
    def refuse(request: CompletionRequest, n: int) -> Completion:
        return Completion(text="No.", stop_reason="refusal")

    cm, strategy, s = two_l2_ladder(tmp_path, refuse)
    cm.drain()
    assert len(s.requests) == 3  # canonical + both variants
    assert not strategy.chunks[6].compressed and cm.is_ready()
    cm.close()
    again = ScriptedSummarizer(refuse)
    cm, strategy = open_cm(tmp_path, again, merge_threshold=3)
    cm.drain()
    assert again.requests == [] and not strategy.chunks[6].compressed
    cm.close()


def test_memories_without_chunk_records_are_adopted_once(tmp_path: Path) -> None:
    from context_manager.strategies.autobiographical import SummaryEntry

    cm = ContextManager.open(path=tmp_path / "cm.db", counter=CharsCounter())  # passthrough
    ids = [cm.add_message("User", words(20, f"m{i}")) for i in range(14)]
    for n, (a, b) in enumerate([(0, 5), (6, 9), (6, 13)]):
        entry = SummaryEntry("", f"L1-{n}", 1, f"memory {n}", 3, ids[a : b + 1], ids[a], ids[b])
        cm.store.append("default/autobio:summaries", entry.body())
    cm.close()
    s = ScriptedSummarizer()
    cm, strategy = open_cm(tmp_path, s)
    assert [(c.summary_id, c.compressed) for c in strategy.chunks] == [
        ("L1-0", True),
        ("L1-2", True),
    ]
    cm.drain()
    assert s.requests == [] and len(strategy.chunks) == 2
    cm.close()
    cm, strategy = open_cm(tmp_path, s)  # persisted: adopted once, not again
    assert len(strategy.chunks) == 2
    cm.close()


def test_grace_takes_from_the_response_reserve_only(tmp_path: Path) -> None:
    cm, _ = open_cm(tmp_path, None, recent_window_tokens=100_000, over_budget_grace_ratio=0.25)
    for i in range(15):
        cm.add_message("User", words(20, f"m{i}"))
    total = sum(cm._ctx.count(s) for s in cm.get_messages())
    assert 400 < total <= 500  # the raw tail is over the input budget, within grace
    result = cm.compile(max_tokens=500, reserve_for_response=100)
    assert len(result.messages) == 15
    assert result.render_stats["grace_tokens"] == total - 400
    with pytest.raises(OverBudgetError):  # the grace never reaches past max_tokens
        cm.compile(max_tokens=total - 1, reserve_for_response=0)
    cm.close()


def test_an_all_raw_frontier_is_carried_like_any_other(tmp_path: Path) -> None:
    cm, _ = open_cm(tmp_path, ExtractiveSummarizer(), solver="kv-stable")
    cm.add_message("User", "hello " * 50)
    cm.compile(max_tokens=10_000, reserve_for_response=1_000)
    first = cm.get_render_stats()
    assert first is not None and first["decision"] == "bootstrap"
    cm.add_message("Claude", "hi " * 10)
    cm.compile(max_tokens=10_000, reserve_for_response=1_000)
    stats = cm.get_render_stats()
    assert stats is not None and stats["decision"] != "bootstrap"
    # a pure append re-reads nothing of the carried prefix: only the new message is read
    assert stats["kv_cost"] == stats["tokens"] - first["tokens"] > 0
    cm.close()
    cm, _ = open_cm(tmp_path, ExtractiveSummarizer(), solver="kv-stable")
    cm.compile(max_tokens=10_000, reserve_for_response=1_000)  # carried across a reopen
    stats = cm.get_render_stats()
    assert stats is not None and stats["decision"] != "bootstrap"
    assert stats["solver_kv_cost"] == 0  # the solver holds the carried frontier
    assert stats["kv_cost"] == stats["tokens"]  # this manager sent nothing before it
    cm.close()


def test_cache_breakpoints_end_the_head_the_merged_memories_and_the_memories(
    tmp_path: Path,
) -> None:
    from context_manager import Injection, TextBlock

    cm, strategy = open_cm(
        tmp_path,
        ScriptedSummarizer(),
        merge_threshold=3,
        head_window_tokens=300,
        recent_window_tokens=200,
    )
    converse(cm, 60, turns=True)
    note = Injection(namespace="n", position="before_user", content=(TextBlock(text="note"),))
    result = cm.compile(max_tokens=900, reserve_for_response=100, injections=[note])
    messages, marks = result.messages, result.cache_breakpoints
    by_text = {x.content: x for x in strategy.summaries.values()}
    memories = [i for i, m in enumerate(messages) if m.text in by_text]
    merged = [i for i in memories if by_text[messages[i].text].level >= 2]
    stored = cm.get_messages()
    head_end = strategy.windows(cm._ctx, stored).head_end
    head_texts = {s.message.text for s in stored[:head_end]}
    head = [i for i, m in enumerate(messages) if m.text in head_texts]
    assert memories and merged and head == list(range(head_end)) and head_end > 1
    assert marks == sorted({head[-1], merged[-1], memories[-1], len(messages) - 1})
    cm.close()


@pytest.mark.parametrize("window", [0, 50])
def test_the_newest_message_is_always_in_the_tail(window: int) -> None:
    # the turn the model answers is never chunked, however large: a window of 0 or one
    # smaller than the message still leaves it raw (a result that large is capped)
    cm, strategy = open_cm(None, ScriptedSummarizer(), recent_window_tokens=window)
    for i in range(12):
        cm.add_message("User", words(20, f"m{i}"))
    cm.add_message("Claude", [ToolUseBlock(id="t1", name="bash", input={"cmd": "ls"})])
    cm.add_message("bash", [ToolResultBlock(tool_use_id="t1", content=words(400, "out"))])
    stored = cm.get_messages()
    tail_start = strategy.windows(cm._ctx, stored).tail_start
    assert tail_start == len(stored) - 2  # the result, and the call it answers
    cm.drain()
    chunked = {i for c in strategy.chunks for i in c.source_ids}
    assert not chunked & {s.id for s in stored[tail_start:]}
    cm.close()


def test_cache_breakpoints_can_be_turned_off(tmp_path: Path) -> None:
    options = {"recent_window_tokens": 200, "compression_cache_breakpoints": False}
    cm, _ = open_cm(tmp_path, ScriptedSummarizer(), **options)
    converse(cm, 30)
    result = cm.compile(max_tokens=800, reserve_for_response=100)
    assert result.render_stats["summaries"]
    assert result.cache_breakpoints == [len(result.messages) - 1]
    cm.close()


def _ladder_ends(request: CompletionRequest, strategy: AutobiographicalStrategy) -> list[int]:
    """Indices of the recall answers before the request's memory marker."""
    texts = [m.text for m in request.messages]
    marker = next(i for i, t in enumerate(texts) if t.startswith(MEMORY_MARKER))
    memories = {x.content for x in strategy.summaries.values()}
    return [i for i, t in enumerate(texts[:marker]) if t in memories]


def test_memory_requests_mark_the_head_the_merged_memories_and_the_memories(
    tmp_path: Path,
) -> None:
    s = ScriptedSummarizer()
    cm, strategy = open_cm(tmp_path, s, merge_threshold=3, head_window_tokens=300)
    converse(cm, 60, turns=True)
    head_end = strategy.windows(cm._ctx, cm.get_messages()).head_end
    assert head_end > 1
    by_text = {x.content: x for x in strategy.summaries.values()}
    checked = 0
    for request in s.requests:
        ends = _ladder_ends(request, strategy)
        merged = [i for i in ends if by_text[request.messages[i].text].level >= 2]
        is_l1 = "(level" not in request.messages[-1].text
        expected = {head_end - 1} if is_l1 else set()
        if ends:
            expected |= {ends[-1], *merged[-1:]}
        assert request.cache_breakpoints == tuple(sorted(expected))
        assert request.cache_ttl == ("1h" if expected else None)
        checked += bool(merged)
    assert checked  # some requests showed a merged memory
    cm.close()


def test_a_memory_request_adds_after_the_prefix_the_one_before_marked(tmp_path: Path) -> None:
    s = ScriptedSummarizer()
    cm, _ = open_cm(tmp_path, s, merge_threshold=50)
    converse(cm, 40)
    marked = [r for r in s.requests if r.cache_breakpoints]
    assert len(marked) == len(s.requests) - 1  # all but the first, which recalls nothing
    for before, after in itertools.pairwise(marked):
        end = before.cache_breakpoints[-1] + 1
        assert after.messages[:end] == before.messages[:end]  # the cached prefix is reused
        assert after.cache_breakpoints[-1] > before.cache_breakpoints[-1]
    cm.close()


def test_a_ladder_cut_to_the_recall_budget_is_not_marked(tmp_path: Path) -> None:
    s = ScriptedSummarizer(
        lambda request, n: Completion(
            text=words(30, f"memory{n}"), stop_reason="end_turn", usage=Usage(output_tokens=40)
        )
    )
    cm, strategy = open_cm(tmp_path, s, merge_threshold=50, recall_budget_tokens=1000)
    converse(cm, 60)
    shown = [len(_ladder_ends(r, strategy)) for r in s.requests]
    kept = max(shown)
    assert kept < len(s.requests) - 1  # the ladder was cut
    for written, (request, n) in enumerate(zip(s.requests, shown, strict=True)):
        # marked only when the ladder shows every memory written before (and has one)
        assert bool(request.cache_breakpoints) == (0 < n == written)
    cm.close()


def test_memory_requests_are_unmarked_when_marks_are_off(tmp_path: Path) -> None:
    s = ScriptedSummarizer()
    cm, _ = open_cm(tmp_path, s, compression_cache_breakpoints=False, head_window_tokens=300)
    converse(cm, 30)
    assert s.requests and all(r.cache_breakpoints == () for r in s.requests)
    assert all(r.cache_ttl is None for r in s.requests)
    cm.close()


def test_a_refusal_names_the_raw_pins_that_still_hold(tmp_path: Path) -> None:
    cm, _ = open_cm(tmp_path, ScriptedSummarizer(), recent_window_tokens=0)
    ids = [cm.add_message("User", words(80, f"m{i}")) for i in range(12)]
    lapsed = cm.pin_range(ids[1], ids[2], name="lapsed")
    held = cm.pin_range(ids[5], ids[9], name="held")
    cm.remove_message(ids[1])  # the first pin's range is gone, so it is not stated
    with pytest.raises(OverBudgetError) as info:
        cm.compile(max_tokens=500, reserve_for_response=100)
    raw = info.value.diagnostics["raw_pins"]
    assert [p["pin"] for p in raw] == [held] and raw[0]["name"] == "held" and lapsed != held
    assert raw[0]["tokens"] > 400
    cm.close()


@pytest.mark.parametrize("cap", [None, 60])
def test_memories_of_short_messages_keep_merging(tmp_path: Path, cap: int | None) -> None:
    """An agent of many short messages: without a span cap every level keeps merging, so
    the memories with no parent stay a few per level however long the history; a cap
    that stops wide memories also strands their neighbours one level up."""
    options = {"merge_threshold": 3, "min_chunk_messages": 1}
    if cap is not None:
        options["merge_max_source_span_messages"] = cap
    cm, strategy = open_cm(tmp_path, ScriptedSummarizer(), **options)
    for i in range(1800):
        cm.add_message("User" if i % 2 else "Claude", f"ok {i}")
        if i % 60 == 59:
            cm.drain()
    tops = [s for s in strategy.summaries.values() if s.parent_id is None]
    depth = max(s.level for s in strategy.summaries.values())
    if cap is None:
        assert len(tops) <= 3 * depth
    else:
        assert len(tops) > 3 * depth
    cm.close()
