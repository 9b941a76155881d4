"""Recall questions that name the tools of a memory's span, and the render stats of a
compile (``CompileResult.render_stats`` and ``ContextManager.get_render_stats``).

Expectations come from what the test wrote (which message called which tool) and from
recounting the compiled messages by their provenance, never from the stats code.
"""

from __future__ import annotations

import re
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from context_manager import (
    CharsCounter,
    ContextManager,
    ExtractiveSummarizer,
    Message,
    OverBudgetError,
    ToolResultBlock,
    ToolUseBlock,
)
from context_manager.strategies.autobiographical import AutobiographicalStrategy
from context_manager.strategies.autobiographical.state import with_tools

COUNTER = CharsCounter()
LABEL = "What do you remember from earlier? (tools: {tools})"


def strategy(**extra: Any) -> AutobiographicalStrategy:
    options: dict[str, Any] = {
        "compression_model": "extractive",
        "target_chunk_tokens": 120,
        "recent_window_tokens": 100,
        "merge_threshold": 3,
        "summary_target_tokens": 30,
        "l1_holdback_chunks": 0,
        "min_chunk_chars_for_llm": 0,
    }
    options.update(extra)
    return AutobiographicalStrategy(**options)


def manager(s: AutobiographicalStrategy) -> ContextManager:
    return ContextManager.open(
        path=":memory:",
        strategy=s,
        counter=COUNTER,
        summarizer=ExtractiveSummarizer(target_tokens=30),
    )


def words(n: int, tag: str) -> str:
    return " ".join(f"{tag}w{j}" for j in range(n))


def with_tool_rounds(cm: ContextManager, rounds: int, text_turns: int) -> dict[str, str]:
    """Tool rounds, then plain turns; returns message id -> the tool it called."""
    called: dict[str, str] = {}
    for i in range(rounds):
        name = ("bash", "grep", "bash")[i % 3]
        cm.add_message("User", words(20, f"u{i}"))
        use = ToolUseBlock(id=f"t{i}", name=name, input={"cmd": f"c{i}"})
        called[cm.add_message("Claude", [use])] = name
        result = ToolResultBlock(tool_use_id=f"t{i}", content=words(20, f"r{i}"))
        cm.add_message("User", [result])
    for i in range(text_turns):
        cm.add_message("User" if i % 2 == 0 else "Claude", words(30, f"m{i}"))
    return called


def recount(messages: list[Message]) -> int:
    return sum(COUNTER.count_message(m) for m in messages)


# ------------------------------------------------------------------ {tools}
def test_a_memory_names_the_tools_its_messages_called() -> None:
    s = strategy(summary_context_label=LABEL)
    with manager(s) as cm:
        called = with_tool_rounds(cm, 6, 30)
        cm.drain()
        result = cm.compile(max_tokens=1500, reserve_for_response=0)
        pairs = [
            (q.text, result.provenance[k + 1][1])
            for k, (q, (memory, _)) in enumerate(
                zip(result.messages, result.provenance, strict=True)
            )
            if memory is not None and q.participant == "Context Manager"
        ]
        assert pairs, "the budget folds some history"
        with_names = without = 0
        for question, span in pairs:
            names = list(dict.fromkeys(called[i] for i in span if i in called))
            if names:
                with_names += 1
                assert question == f"What do you remember from earlier? (tools: {', '.join(names)})"
            else:
                without += 1
                assert question == "What do you remember from earlier?"
        assert with_names and without  # both kinds were shown
        # the solver priced each question as sent: the stats' tokens are the recount
        assert result.render_stats["tokens"] == recount(result.messages)


def test_without_the_placeholder_the_label_is_sent_as_written() -> None:
    s = strategy(summary_context_label="Recall {this} and {{that}}:")
    with manager(s) as cm:
        with_tool_rounds(cm, 6, 30)
        cm.drain()
        result = cm.compile(max_tokens=1500, reserve_for_response=0)
        questions = {
            m.text
            for m, (memory, _) in zip(result.messages, result.provenance, strict=True)
            if memory is not None and m.participant == "Context Manager"
        }
        assert questions == {"Recall {this} and {{that}}:"}


DANGLING = re.compile(r"\(\s*\)|\s[,;:.?!)]|[,;:(]\s*$|^\s*[,;:.?!)]|\s{2,}|[{}]")


@pytest.mark.parametrize(
    "label",
    [
        LABEL,
        "What do you remember from earlier (when you used {tools})?",
        "Tools: {tools}. What do you remember?",
        "{tools}: what do you remember?",
        "{tools} - what do you remember?",
        "What do you remember, {tools}?",
        "What do you remember? {tools}",
        "{tools}",
    ],
)
def test_no_tools_leaves_no_placeholder_and_no_dangling_punctuation(label: str) -> None:
    out = with_tools(label, [])
    assert out and not DANGLING.search(out), out
    assert with_tools(label, ["bash", "grep"]) == label.replace("{tools}", "bash, grep")


# ------------------------------------------------------------- render stats
def buckets(result: Any, s: AutobiographicalStrategy) -> dict[str, dict[str, int]]:
    """The memories the compiled messages show, bucketed l1 / l2 / l3 (3 and above)."""
    out: dict[str, dict[str, int]] = {}
    seen: set[str] = set()
    for m, (memory, _) in zip(result.messages, result.provenance, strict=True):
        if memory is None:
            continue
        bucket = out.setdefault(f"l{min(3, s.summaries[memory].level)}", {"count": 0, "tokens": 0})
        if memory not in seen:
            seen.add(memory)
            bucket["count"] += 1
        bucket["tokens"] += COUNTER.count_message(m)
    return dict(sorted(out.items()))


def work(cm: ContextManager) -> dict[str, int]:
    """The queued work as ``pending_work`` lists it."""
    lines = cm.pending_work()
    return {
        "chunks": sum(1 for w in lines if w.startswith("compress ")),
        "merges": sum(1 for w in lines if w.startswith("merge ")),
    }


def even(cm: ContextManager, n: int, size: int = 160) -> list[str]:
    """``n`` messages of exactly ``size`` characters (``size / 4`` tokens each)."""
    return [
        cm.add_message("User" if i % 2 == 0 else "Claude", (f"{i:03d}" + "abcdefgh " * 40)[:size])
        for i in range(n)
    ]


COMPOSITION = ("head", "tail", "middle_raw", "summaries", "summary_levels", "pending", "total")


def test_raw_composition_by_hand() -> None:
    # eight 2-token messages; a 4-token head (two), an 8-token recent window (four)
    s = strategy(recent_window_tokens=8, head_window_tokens=4)
    with manager(s) as cm:
        for i in range(8):
            cm.add_message("User" if i % 2 == 0 else "Claude", f"short {i}")
        stats = cm.compile(max_tokens=1000, reserve_for_response=0).render_stats
        assert {k: stats[k] for k in COMPOSITION} == {
            "head": {"messages": 2, "tokens": 4},
            "tail": {"messages": 4, "tokens": 8},
            "middle_raw": {"messages": 2, "tokens": 4},
            "summaries": {},
            "summary_levels": {},
            "pending": {"chunks": 0, "merges": 0},
            "total": {"messages": 8, "tokens": 16},
        }
        assert stats["tokens"] == stats["request"]["messages"] == 16


def test_pending_counts_the_queued_chunks_and_merges() -> None:
    # 40-token messages; the recent window holds the last two, the 18 before close
    # four chunks of four (160 tokens, past the 120 target), two stay open
    s = strategy(recent_window_tokens=80)
    with manager(s) as cm:
        even(cm, 20)
        assert [len(c.source_ids) for c in s.chunks] == [4, 4, 4, 4]
        first = cm.compile(max_tokens=10_000, reserve_for_response=0).render_stats
        assert first["pending"] == {"chunks": 4, "merges": 0} == work(cm)
        for _ in range(3):
            assert cm.tick()  # three memories: one chunk left, and three L1s to merge
        second = cm.compile(max_tokens=10_000, reserve_for_response=0).render_stats
        assert second["pending"] == {"chunks": 1, "merges": 1} == work(cm)
        assert first["pending"] == {"chunks": 4, "merges": 0}  # each result keeps its own
        cm.drain()
        third = cm.compile(max_tokens=500, reserve_for_response=0).render_stats
        assert third["pending"] == {"chunks": 0, "merges": 0} == work(cm)


@pytest.mark.parametrize("budget", [400, 500, 700, 1000])
def test_levels_three_and_above_bucket_into_l3(budget: int) -> None:
    s = strategy(recent_window_tokens=80, merge_threshold=2)
    with manager(s) as cm:
        even(cm, 140)
        cm.drain()
        result = cm.compile(max_tokens=budget, reserve_for_response=0)
        stats = result.render_stats
        shown = {memory for memory, _ in result.provenance if memory is not None}
        levels = {s.summaries[m].level for m in shown}
        assert levels and max(levels) >= 3
        assert stats["summaries"] == buckets(result, s)
        assert stats["summary_levels"] == {
            f"L{k}": {
                "count": sum(1 for m in shown if s.summaries[m].level == k),
                "tokens": sum(
                    COUNTER.count_message(msg)
                    for msg, (memory, _) in zip(result.messages, result.provenance, strict=True)
                    if memory is not None and s.summaries[memory].level == k
                ),
            }
            for k in sorted(levels)
        }
        coarse = sum(1 for m in shown if s.summaries[m].level >= 3)
        assert stats["summaries"].get("l3", {"count": 0})["count"] == coarse
        assert (max(levels) > 3) is (budget < 1000)  # L4 and above, in l3 too


def test_none_before_a_live_compile_and_dry_runs_leave_it() -> None:
    s = strategy(recent_window_tokens=80)
    with manager(s) as cm:
        even(cm, 40)
        cm.drain()
        assert cm.get_render_stats() is None
        preview = cm.preview_context(max_tokens=600, reserve_for_response=0)
        dry = cm.compile(max_tokens=600, reserve_for_response=0, dry_run=True)
        assert cm.get_render_stats() is None  # neither was live
        assert preview.fits and dry.render_stats["summaries"]  # each carries its own
        assert dry.render_stats["total"]["tokens"] == recount(dry.messages)
        live = cm.compile(max_tokens=5_000, reserve_for_response=0)
        kept = cm.get_render_stats()
        assert kept == live.render_stats and kept["summaries"] == {}
        cm.compile(max_tokens=600, reserve_for_response=0, dry_run=True)
        cm.preview_context(max_tokens=600, reserve_for_response=0)
        assert cm.get_render_stats() == kept
        kept["total"]["messages"] = -1  # a copy: changing it changes nothing kept
        live.render_stats["total"]["messages"] = -1
        assert cm.get_render_stats()["total"]["messages"] == 40
        cm.set_strategy(strategy(recent_window_tokens=80))
        assert cm.get_render_stats() is None  # the new strategy loaded the branch


# ------------------------------------------------------------------ property
@st.composite
def histories(draw: st.DrawFn) -> list[Message]:
    """Plain turns of random sizes and answered tool rounds, in random order."""
    out: list[Message] = []
    for i in range(draw(st.integers(1, 30))):
        if draw(st.booleans()) and draw(st.booleans()):
            name = draw(st.sampled_from(["bash", "grep", "edit"]))
            use = ToolUseBlock(id=f"t{i}", name=name, input={"n": i})
            size = draw(st.integers(1, 400))
            out.append(Message(participant="Claude", content=[use]))
            result = ToolResultBlock(tool_use_id=f"t{i}", content=words(size // 4 + 1, f"r{i}"))
            out.append(Message(participant="User", content=[result]))
        else:
            participant = "User" if len(out) % 2 == 0 else "Claude"
            out.append(Message.text_message(participant, words(draw(st.integers(1, 60)), f"m{i}")))
    return out


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    history=histories(),
    budget=st.integers(150, 3000),
    ticks=st.integers(0, 40),
    label=st.sampled_from([LABEL, "What do you remember from earlier?"]),
    head=st.sampled_from([0, 30]),
)
def test_the_stats_add_up_to_the_request(
    history: list[Message], budget: int, ticks: int, label: str, head: int
) -> None:
    s = strategy(summary_context_label=label, head_window_tokens=head)
    with manager(s) as cm:
        ids = [cm.add_message(m.participant, m.content) for m in history]
        for _ in range(ticks):
            cm.tick()
        try:
            result = cm.compile(max_tokens=budget, reserve_for_response=0)
        except OverBudgetError:
            return
        stats = result.render_stats
        memory_of = [memory for memory, _ in result.provenance]
        raw = [m for m, memory in zip(result.messages, memory_of, strict=True) if memory is None]
        # recounted from the request: every message, raw or half of a recall pair
        assert stats["total"] == {
            "messages": len(result.messages),
            "tokens": recount(result.messages),
        }
        assert stats["total"]["tokens"] == stats["request"]["messages"] == stats["tokens"]
        assert stats["summaries"] == buckets(result, s)
        parts = [stats[k] for k in ("head", "tail", "middle_raw")]
        assert sum(p["messages"] for p in parts) == len(raw)
        assert sum(p["tokens"] for p in parts) == recount(raw)
        for name, bucket in stats["summaries"].items():  # the finer levels add up
            finer = [
                v for k, v in stats["summary_levels"].items() if min(3, int(k[1:])) == int(name[1])
            ]
            assert bucket == {
                "count": sum(v["count"] for v in finer),
                "tokens": sum(v["tokens"] for v in finer),
            }
        # the head and the recent window are raw, at the two ends
        h, t = stats["head"]["messages"], stats["tail"]["messages"]
        sources = [ids for _, ids in result.provenance]
        assert all(m is None for m in memory_of[:h]) and sources[:h] == [(i,) for i in ids[:h]]
        if t:
            assert all(m is None for m in memory_of[-t:])
            assert sources[-t:] == [(i,) for i in ids[-t:]]
        assert stats["pending"] == work(cm)
        assert cm.get_render_stats() == stats


def test_the_recall_header_template_takes_the_tools_placeholder_too() -> None:
    s = strategy(adaptive_resolution=False, recall_header_template="[Recall {id}: {tools}]")
    with manager(s) as cm:
        called = with_tool_rounds(cm, 6, 30)
        cm.drain()
        result = cm.compile(max_tokens=1500, reserve_for_response=0)
        questions = [
            (q.text, result.provenance[k + 1])
            for k, (q, (memory, _)) in enumerate(
                zip(result.messages, result.provenance, strict=True)
            )
            if memory is not None and q.participant == "Context Manager"
        ]
        assert questions, "the budget folds some history"
        for text, (memory, span) in questions:
            names = list(dict.fromkeys(called[i] for i in span if i in called))
            expected = f"[Recall {memory}: {', '.join(names)}]" if names else f"[Recall {memory}]"
            assert text == expected


def test_every_compile_s_stats_are_shaped_as_the_typed_model_says() -> None:
    """The render stats of real compiles (both shipped strategies; raw, folded, capped,
    caught up, refused in a preview) validate against RenderStats, whose nested parts
    refuse a key they do not declare."""
    import pydantic

    from context_manager import CharsCounter, ContextManager, ToolResultBlock, ToolUseBlock
    from context_manager.render_stats import RENDER_STATS
    from tests.support.small_agent import small_manager

    seen: set[str] = set()
    with small_manager() as cm:
        for i in range(120):
            cm.add_message("User" if i % 2 else "Claude", f"turn {i} " + "word " * 30)
        cm.add_message("Claude", [ToolUseBlock(id="t1", name="bash", input={})])
        cm.add_message("User", [ToolResultBlock(tool_use_id="t1", content="out " * 2000)])
        for budget in (800, 1_500, 4_000, 20_000):
            for dry in (True, False):
                stats = cm.compile(
                    max_tokens=budget + 200, reserve_for_response=200, dry_run=dry
                ).render_stats
                RENDER_STATS.validate_python(stats)
                seen |= set(stats)
    with ContextManager.open(path=":memory:", counter=CharsCounter()) as cm:
        for _ in range(30):
            cm.add_message("User", "x " * 50)
        for budget, dry in ((400, False), (60, True)):
            stats = cm.compile(max_tokens=budget, reserve_for_response=50, dry_run=dry).render_stats
            RENDER_STATS.validate_python(stats)
            seen |= set(stats)
    assert {"capped_results", "catch_up", "summaries", "diagnostics", "dropped"} <= seen
    bad = {"tokens": 1, "kv_cost": 0, "request": {"system": 0, "tools": 0, "other": 0,
           "injections": 0, "messages": 1, "total": 1, "extra": 2}}  # fmt: skip
    with pytest.raises(pydantic.ValidationError, match="extra"):
        RENDER_STATS.validate_python(bad)
