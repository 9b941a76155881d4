"""The policy benchmark: our policies, the harness, its report and the CLI around it."""

from __future__ import annotations

import dataclasses
import itertools
import json
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st
from typer.testing import CliRunner

from context_manager.cli import app, load_plugins
from context_manager.messages import Message, ToolResultBlock, ToolUseBlock
from context_manager.pairing import tool_pair_problems
from context_manager.tokens import TiktokenCounter
from foldbench import benchmark, dataset, pricing
from foldbench.loaders import load_swe_agent
from foldbench.peers.ours import AssemblePolicy, FoldingPolicy, from_wire, to_wire

load_plugins()  # demo and the other benchmark commands, as the console script has them

DATA = dataset("swe-agent")
TRAJ = DATA / "marshmallow-1867-function-calling.traj"


def _plain(records: list[benchmark.CallRecord]) -> list[dict[str, object]]:
    return [{**dataclasses.asdict(r), "cpu_ms": 0.0} for r in records]


def test_wire_round_trip_keeps_order_roles_and_tool_pairs() -> None:
    messages = load_swe_agent(TRAJ)[1:]
    back = from_wire(to_wire(messages))
    assert tool_pair_problems(back) == []
    calls = [b.id for m in messages for b in m.content if isinstance(b, ToolUseBlock)]
    results = [b.tool_use_id for m in back for b in m.content if isinstance(b, ToolResultBlock)]
    assert calls and results == [
        b.tool_use_id for m in messages for b in m.content if isinstance(b, ToolResultBlock)
    ]
    assert [m.participant == "Claude" for m in back if m.participant != "User"] == [
        True for m in messages if m.participant == "Claude"
    ]


@pytest.mark.parametrize("budget", [3000, 6000])
def test_folding_policy_sends_valid_requests_within_budget(budget: int) -> None:
    transcript = benchmark.default_transcripts()[-1]  # the synthetic run with facts
    records = benchmark.replay_policy(transcript, "ours:kv-stable", budget)
    assert len(records) == len(transcript.call_points)
    assert all(not r.invalid and r.tokens <= budget for r in records)
    assert sum(r.summarizer_calls for r in records) > 0  # it had to write memories
    assert records[-1].facts_total == len(transcript.facts) > 0
    again = benchmark.replay_policy(transcript, "ours:kv-stable", budget)
    assert _plain(again) == _plain(records)  # deterministic


def test_folding_policy_marks_its_stable_prefixes_for_the_cache(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    transcript = benchmark.default_transcripts()[-1]
    seen: list[tuple[int, list[int] | None]] = []

    class Spy(pricing.CacheSimulator):
        def request(self, layout, breakpoints=None, *, blocks=None):  # type: ignore[no-untyped-def]
            seen.append((len(layout), None if breakpoints is None else list(breakpoints)))
            assert blocks is not None and len(blocks) == len(layout)
            return super().request(layout, breakpoints, blocks=blocks)

    monkeypatch.setattr(pricing, "CacheSimulator", Spy)
    records = benchmark.replay_policy(transcript, "ours:kv-stable", 3000)
    assert len(seen) == len(records)
    for n, marks in seen:  # unit counts: after the system prompt, ..., after the last message
        assert marks is not None and marks == sorted(set(marks)) and len(marks) <= 4
        assert marks[0] == 1 and marks[-1] == n
    assert max(len(m or []) for _, m in seen) == 4  # memories are marked once there are some
    seen.clear()
    benchmark.replay_policy(transcript, "observation-masking", 3000)
    # a peer whose library marks nothing is billed as a plain client: system prompt, end
    assert seen and all(marks == [1, n] for n, marks in seen)


def test_folding_policy_stores_each_message_with_its_own_time() -> None:
    history = [
        Message.text_message("User", f"turn {i}", timestamp=1_700_000_000.0 + 30 * i)
        for i in range(4)
    ]
    policy = FoldingPolicy("kv-stable")
    policy.request(history, 4000)
    stored = policy._cm.get_messages()
    assert [s.message.timestamp for s in stored] == [m.timestamp for m in history]
    policy.close()


def test_assemble_policy_answers_every_call() -> None:
    messages = load_swe_agent(TRAJ)
    policy = AssemblePolicy(counter=TiktokenCounter())
    request = policy.request(messages, 4000)
    assert request.error is None and request.messages[0].participant == "System"
    assert tool_pair_problems(list(request.messages)) == []


def test_folding_policy_restarts_on_a_different_transcript() -> None:
    policy = FoldingPolicy("oldest-first")
    a = [Message.text_message("User", "first conversation")]
    b = [Message.text_message("User", "another one")]
    assert [m.text for m in policy.request(a, 1000).messages] == ["first conversation"]
    assert [m.text for m in policy.request(b, 1000).messages] == ["another one"]
    policy.close()


def test_synthetic_transcripts_are_seeded_and_plant_their_facts() -> None:
    a, b = benchmark.synthetic_transcript(80, seed=3), benchmark.synthetic_transcript(80, seed=3)
    assert a.messages == b.messages and a.facts == b.facts
    assert a.messages != benchmark.synthetic_transcript(80, seed=4).messages
    text = " ".join(m.text for m in a.messages)
    assert a.facts and all(f in text for f in a.facts)
    assert tool_pair_problems(a.messages) == []
    with pytest.raises(ValueError, match="n_messages"):
        benchmark.synthetic_transcript(3)


@given(st.integers(8, 400), st.integers(0, 12), st.integers(0, 3))
def test_synthetic_transcripts_of_any_size_are_well_formed(n: int, facts: int, seed: int) -> None:
    t = benchmark.synthetic_transcript(n, seed=seed, facts=facts)
    assert len(t.messages) >= n and len(t.facts) <= facts
    assert tool_pair_problems(t.messages) == [] and t.call_points


def test_concatenation_keeps_one_system_prompt() -> None:
    parts = benchmark.default_transcripts()[:2]
    joined = benchmark.concatenate(parts)
    assert len(joined.messages) == sum(len(p.messages) for p in parts)
    assert [m.participant for m in joined.messages].count("System") == 1
    assert len(joined.call_points) == sum(len(p.call_points) for p in parts)


def test_run_reports_every_policy_and_budget_the_same_in_parallel(tmp_path: Path) -> None:
    transcripts = benchmark.default_transcripts()[:2]
    policies = ["ours:oldest-first", "observation-masking"]
    one = benchmark.run(transcripts, policies, [3000, 5000], workers=1)
    two = benchmark.run(transcripts, policies, [3000, 5000], workers=2)
    assert _plain(one.records) == _plain(two.records)
    rows = one.summaries()
    assert [(s.policy, s.budget) for s in rows] == [(p, b) for p in policies for b in (3000, 5000)]
    for s in rows:
        calls = [r for r in one.records if r.policy == s.policy and r.budget == s.budget]
        assert s.calls == len(calls) and s.tokens_peak == max(r.tokens for r in calls)
        assert s.over_budget == sum(r.tokens > s.budget for r in calls)
        assert 0.0 <= s.cache_reuse <= 1.0
    markdown = one.to_markdown()
    assert all(f"| {p} | 3,000 |" in markdown for p in policies)
    png = one.plot(tmp_path / "plot.png")
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert len(json.loads(one.to_json())) == len(one.records)


def test_fact_retention_counts_what_the_final_request_still_shows() -> None:
    transcript = benchmark.synthetic_transcript(40, facts=3)
    planted = transcript.metadata["planted"]  # early, middle and late; in both kinds
    assert {r["kind"] for r in planted} == {"tool_result", "user"}
    roomy = benchmark.replay_policy(transcript, "langchain-trim-messages", 100_000)
    assert roomy[-1].facts_retained == 3  # nothing dropped: every fact visible
    # masking hides old observations however much room there is: the fact planted in an
    # early tool result is lost, those in user turns are kept
    masked = benchmark.replay_policy(transcript, "observation-masking", 100_000)
    assert masked[-1].facts_retained == sum(r["kind"] == "user" for r in planted) < 3
    tight = benchmark.replay_policy(transcript, "observation-masking", 1200)
    assert tight[-1].facts_retained is not None and tight[-1].facts_retained < 3


def test_run_rejects_bad_selections() -> None:
    transcripts = benchmark.default_transcripts()[:1]
    with pytest.raises(KeyError, match="unknown policies"):
        benchmark.run(transcripts, ["nope"], [1000])
    with pytest.raises(ValueError, match="positive"):
        benchmark.run(transcripts, ["assemble"], [0])
    with pytest.raises(ValueError, match="at least one"):
        benchmark.run([], ["assemble"], [1000])
    with pytest.raises(KeyError, match="known policies"):
        benchmark.make_policy("ours-but-not-really")


def test_default_transcripts_name_a_missing_folder(tmp_path: Path) -> None:
    with pytest.raises(FileNotFoundError, match=str(tmp_path)):
        benchmark.default_transcripts(tmp_path)


def test_cli_demo_replay_policies_and_inspect(tmp_path: Path) -> None:
    runner = CliRunner()
    out = tmp_path / "demo"
    args = ["demo", "-p", "ours:kv-stable", "-b", "4000", "--out", str(out), "--workers", "1"]
    result = runner.invoke(app, [*args, "--tau-sessions", "2"])
    assert result.exit_code == 0, result.output
    # alone, ours is judged on (a) only: nothing can dominate it
    for model in ("explicit", "automatic"):
        verdict = f"4,000 tokens, ours:kv-stable, {model} cache: swe-agent met; synthetic met; "
        assert verdict + "tau-bench met" in result.output.replace("\n", " ")
    # 4 runs, their concatenation, 3 synthetic conversations, tau-bench
    assert "replaying: 9/9 runs (100%)" in result.output  # not a terminal: progress lines
    report = (out / "report.md").read_text()
    # the budget's table, one per dataset, the settings, where the bill goes, every figure
    assert report.count("| ours:kv-stable |") == 1 + 3 + 1 + 1 + 1
    assert "## Per dataset" in report and "### tau-bench (tau-bench-2), budget 4,000" in report
    assert (out / "bill-and-kept.png").stat().st_size > 0
    assert (out / "bill-and-kept-automatic.png").stat().st_size > 0
    assert not (out / "per-call.png").exists()  # no peer ran to set ours against

    result = runner.invoke(
        app, ["replay", str(TRAJ), "-p", "assemble", "-b", "3000", "--out", str(tmp_path / "r")]
    )
    assert result.exit_code == 0, result.output
    result = runner.invoke(app, ["replay", str(tmp_path / "missing.traj")])
    assert result.exit_code == 2 and "is not a file" in result.output
    bad = tmp_path / "bad.json"
    bad.write_text("{not json", encoding="utf-8")
    result = runner.invoke(app, ["replay", str(bad)])
    assert result.exit_code == 2 and "cannot read" in result.output
    result = runner.invoke(app, ["demo", "-p", "nope", "--out", str(out)])
    assert result.exit_code == 2 and "unknown policies" in result.output

    result = runner.invoke(app, ["policies"])
    assert result.exit_code == 0 and "ours:kv-stable" in result.output

    from context_manager import ContextManager, ExtractiveSummarizer
    from context_manager.strategies.autobiographical import AutobiographicalStrategy

    store = tmp_path / "cm.db"
    strategy = AutobiographicalStrategy(
        compression_model="extractive", target_chunk_tokens=200, recent_window_tokens=300
    )
    with ContextManager.open(
        path=store, strategy=strategy, summarizer=ExtractiveSummarizer()
    ) as cm:
        for m in load_swe_agent(TRAJ)[1:]:
            cm.add_message(m.participant, m.content)
        cm.set_tool_definitions([{"name": "bash"}])
        cm.drain()
        cm.pin_range(cm.get_messages()[0].id, cm.get_messages()[0].id, name="task")
        cm.compile(max_tokens=20_000, reserve_for_response=0)
    result = runner.invoke(app, ["inspect", str(store)])
    assert result.exit_code == 0, result.output
    assert "memories:" in result.output and "L1:" in result.output and "task" in result.output
    result = runner.invoke(app, ["inspect", str(tmp_path / "nope.db")])
    assert result.exit_code == 2


def test_cli_bench_adds_the_optional_sets_and_names_what_it_skips(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from foldbench import loaders

    def missing(*args: object, **kwargs: object) -> list[object]:
        raise loaders.TranscriptError("bfcl-eval is not installed")

    monkeypatch.setattr(loaders, "load_bfcl_memory", missing)
    monkeypatch.setattr(loaders, "load_bfcl_multi_turn", missing)
    monkeypatch.setattr(
        loaders, "load_chitchat", lambda **kw: [benchmark.synthetic_transcript(20, seed=9)]
    )
    out = tmp_path / "bench"
    result = CliRunner().invoke(
        app,
        [
            *("bench", "-p", "observation-masking", "-b", "3000", "--scale", "30"),
            *("--out", str(out), "--workers", "1"),
        ],
    )
    assert result.exit_code == 0, result.output
    assert "skipped BFCL memory" in result.output and "skipped BFCL multi-turn" in result.output
    records = json.loads((out / "records.json").read_text())
    names = {r["transcript"] for r in records}
    assert {"synthetic-30-30", "synthetic-20-9", "swe-agent-concatenated"} <= names
    assert not names & {f"synthetic-{n}-{s}" for n, s in benchmark.SYNTHETIC_SELECTION}


def test_cli_refuses_what_it_cannot_read_without_touching_it(tmp_path: Path) -> None:
    import sqlite3

    runner = CliRunner()
    foreign = tmp_path / "other.db"
    with sqlite3.connect(foreign) as db:
        db.execute("CREATE TABLE notes (x TEXT)")
    before = foreign.read_bytes()
    result = runner.invoke(app, ["inspect", str(foreign)])
    assert result.exit_code == 2 and "not a store" in result.output
    assert foreign.read_bytes() == before  # looked at, never written
    text = tmp_path / "notes.txt"
    text.write_text("hello, not a database" * 100)
    result = runner.invoke(app, ["inspect", str(text)])
    assert result.exit_code == 2 and "not a SQLite database" in result.output
    result = runner.invoke(app, ["bench", "--scale", "3", "--out", str(tmp_path / "b")])
    assert result.exit_code == 2 and "n_messages" in result.output
    broken = tmp_path / "broken.traj"
    broken.write_text('{"history": [{"role": "tool", "content": "x", "tool_call_ids": "[oops"}]}')
    result = runner.invoke(app, ["replay", str(broken), "--out", str(tmp_path / "r")])
    assert result.exit_code == 2 and "tool_call_ids" in result.output


def _record(tokens: int, billed: float, cached: int, **extra: object) -> benchmark.CallRecord:
    base: dict[str, object] = {
        "transcript": "t",
        "policy": "p",
        "budget": 1000,
        "call": 0,
        "messages_so_far": 1,
        "tokens": tokens,
        "over_budget": tokens > 1000,
        "invalid": tokens > 1000,
        "problems": (),
        "error": None,
        "summarizer_calls": 1,
        "summarizer_tokens": 50,
        "summarizer_billed": 150.0,
        "cpu_ms": 1.0,
        "cached": cached,
        "billed": billed,
    }
    return benchmark.CallRecord(**{**base, **extra})  # type: ignore[arg-type]


def test_summaries_by_hand() -> None:
    records = [_record(t, 10.0 * t, t // 2) for t in (100, 200, 300, 400, 1200)]
    records.append(_record(0, 0.0, 0, error="Boom: failed", invalid=True))
    records[0] = dataclasses.replace(records[0], unpaired=True, invalid=True)
    report = benchmark.BenchmarkReport(records, budgets=[1000], policies=["p"], transcripts=["t"])
    (s,) = report.summaries()
    assert s.calls == 6 and s.errors == 1 and s.invalid == 3 and s.over_budget == 1
    assert s.unpaired == 1 and "| 1,200 | 1 | 1 | 3 | 1 |" in report.to_markdown()
    assert s.tokens_mean == 440.0  # the failed call sent nothing and is not averaged in
    assert s.tokens_p95 == 1200 and s.tokens_peak == 1200
    assert s.billed == 22_000.0 and s.billed_with_summaries == 22_000.0 + 6 * 150.0
    assert s.cache_reuse == 1100 / 2200


def test_the_bill_splits_into_reads_writes_misses_and_resent_history() -> None:
    # 300 cached, 800 written, 200 missed; the new turn of 300 is the last 300 of it
    record = _record(1300, 0.0, 300, written=800, missed=200, new_tokens=300, budget=2000)
    assert record.resent == 700 and record.resent_billed == 700 * 1.25
    # with little written, the re-sent history runs on into the uncached part
    uncached = _record(1000, 0.0, 0, written=100, missed=900, new_tokens=300, budget=2000)
    assert uncached.resent == 700 and uncached.resent_billed == 100 * 1.25 + 600 * 1.0
    # a new turn larger than the budget carries at most the budget
    assert _record(900, 0.0, 0, written=900, new_tokens=5000, budget=600).resent == 300
    assert _record(900, 0.0, 400, written=500, new_tokens=500).resent == 0
    records = [record, _record(900, 1.0, 0, written=900, new_tokens=5000, budget=600)]
    report = benchmark.BenchmarkReport(
        [dataclasses.replace(r, budget=2000) for r in records],
        budgets=[2000],
        policies=["p"],
        transcripts=["t"],
    )
    (s,) = report.summaries()
    assert (s.cached, s.written, s.missed) == (300, 1700, 200)
    assert s.resent == 700 and s.resent_billed == record.resent_billed
    assert "## Where the bill goes" in report.to_markdown()


def test_a_policy_that_only_appends_resends_no_history() -> None:
    transcript = benchmark.default_transcripts()[0]
    grows = benchmark.replay_policy(transcript, "ours:kv-stable", 10**6)  # nothing folds
    for before, after in itertools.pairwise(grows):
        assert after.cached + after.written + after.missed == after.tokens
        if before.tokens >= benchmark.MIN_CACHEABLE_TOKENS:
            assert after.resent == 0
    masked = benchmark.replay_policy(transcript, "observation-masking", 4000)
    assert sum(r.resent for r in masked) > 0  # masking rewrites the front


def test_retention_counts_whole_words_of_facts_the_transcript_states() -> None:
    from foldbench.loaders import Probe, Transcript

    said = [Message.text_message("User", "The tax rate is 7 percent; a syntax error.")]
    probes = [
        Probe("a", "rate?", ("7 percent", "seven percent")),
        Probe("b", "word?", ("Tax",)),
        Probe("c", "never said?", ("Gym",)),
    ]
    facts = benchmark._fact_patterns(Transcript("t", said, probes=probes))
    assert len(facts) == 2  # "Gym" is never said: no policy could keep it
    kept = [Message.text_message("User", "syntax only, and seven percent")]
    assert benchmark._retained(kept, facts) == 1  # "Tax" is not found inside "syntax"


def test_a_request_without_the_newest_turn_is_flagged() -> None:
    history = [Message.text_message("User", "first"), Message.text_message("User", "now do Y")]
    assert benchmark._newest_turn_missing(history, history[:1])
    assert not benchmark._newest_turn_missing(history, history)


def _run_of(
    policy: str,
    billed: float,
    kept: int | None,
    args: int | None,
    automatic: float | None = None,
    **extra: object,
) -> list[Any]:
    """Two calls at a 2,000 budget with 4 facts and 10 argument values to keep, billed
    ``billed`` under the explicit model and ``automatic`` (default: the same) under the
    automatic one."""
    common: dict[str, object] = {"policy": policy, "budget": 2000, "summarizer_billed": 0.0}
    common.update(extra)
    auto = billed if automatic is None else automatic
    common.setdefault("summarizer_billed_automatic", common["summarizer_billed"])
    last: dict[str, object] = {}
    if kept is not None:
        last = {"facts_total": 4, "facts_retained": kept}
    half = {"billed_automatic": auto / 2}
    first = _record(500, billed / 2, 0, new_tokens=3000, **half, **common)
    second = _record(500, billed / 2, 0, call=1, new_tokens=100, **half, **last, **common)
    if args is not None:
        first = dataclasses.replace(first, arguments_total=10, arguments_kept=args)
    return [first, second]


Runs = dict[str, tuple[float, int | None, int | None] | tuple[float, int | None, int | None, float]]


def _report(runs: Runs, **extra: object) -> Any:
    records = [r for p, run in runs.items() for r in _run_of(p, *run, **extra)]
    return benchmark.BenchmarkReport(records, [2000], list(runs), ["t"])


BASE_RUNS: Runs = {
    # policy: (request bill, facts kept of 4, argument values kept of 10)
    "ours:kv-stable": (2500.0, 2, 5),
    "ours:flat-profile": (10.0, 4, 10),  # ours: never a peer
    "assemble": (10.0, 4, 10),  # ours too
    "langchain-trim-messages": (3300.0, 1, 9),  # dearer, keeps more arguments
    "observation-masking": (2700.0, 3, 5),  # dearer, keeps more facts
    "llamaindex-memory": (2200.0, 1, 5),  # cheaper but keeps fewer facts
}


def test_the_verdict_judges_its_two_clauses_under_each_provider_model() -> None:
    report = _report(BASE_RUNS)
    explicit, automatic = report.verdicts()
    assert (explicit.policy, explicit.budget, explicit.dataset) == (
        "ours:kv-stable",
        2000,
        "unlabelled",
    )
    assert (explicit.cache_model, automatic.cache_model) == ("explicit", "automatic")
    assert explicit.cost == 2500 and explicit.within_budget and explicit.undominated
    assert explicit.meets_bar is True and explicit.outcome == "met"
    assert explicit.explain() == "(a) within budget, all valid; (b) no peer weakly dominates"
    assert explicit.beaten_on["total bill"] == ["llamaindex-memory (2.2k)"]
    assert explicit.beaten_on["retained"] == ["observation-masking (75%)"]
    assert explicit.beaten_on["argument support"] == ["langchain-trim-messages (90.0%)"]
    assert report.verdict_lines() == [
        "2,000 tokens, ours:kv-stable, explicit cache: unlabelled met",
        "2,000 tokens, ours:kv-stable, automatic cache: unlabelled met",
    ]
    # dearer under breakpoints, cheaper under automatic caching: dominates under one model
    split = _report({**BASE_RUNS, "langchain-clear-tool-uses": (2600.0, 2, 5, 2000.0)})
    explicit, automatic = split.verdicts()
    assert explicit.meets_bar and explicit.cost == 2500
    assert automatic.dominated_by == ["langchain-clear-tool-uses"] and automatic.cost == 2500
    assert automatic.failures == ["(b) weakly dominated by langchain-clear-tool-uses"]
    assert split.verdict_lines()[1:] == [
        "2,000 tokens, ours:kv-stable, automatic cache: unlabelled not met (b)",
        "    unlabelled: (b) weakly dominated by langchain-clear-tool-uses",
    ]


def test_a_variant_of_a_cache_aware_solver_is_judged_and_described() -> None:
    from foldbench.registry import describe, make_policy

    runs = {**BASE_RUNS, "ours:kv-stable+with-context": (2300.0, 2, 5)}
    verdicts = _report(runs).verdicts()
    assert [v.policy for v in verdicts] == ["ours:kv-stable"] * 2 + [
        "ours:kv-stable+with-context"
    ] * 2
    variant = verdicts[2]
    assert variant.cost == 2300 and variant.meets_bar is True
    assert describe("ours:kv-stable+with-context").endswith(
        "kv-stable solver, each memory written with the context before its chunk (head, recall, "
        "middle)."
    )
    policy = make_policy("ours:kv-unified+full+with-context")
    assert policy.method == "kv-unified"  # type: ignore[attr-defined]
    assert policy.options == {  # type: ignore[attr-defined]
        "fold_window": False,
        "compression_source_only": False,
    }


def test_a_peer_equal_on_cost_and_facts_but_keeping_more_arguments_weakly_dominates() -> None:
    tie = _report({**BASE_RUNS, "langchain-summarization-middleware": (2500.0, 2, 6)})
    v = tie.verdicts()[0]
    assert v.dominated_by == ["langchain-summarization-middleware"] and v.meets_bar is False
    assert v.failures == ["(b) weakly dominated by langchain-summarization-middleware"]
    # equal on every axis is not domination; neither is dearer by one token
    v = _report({**BASE_RUNS, "langchain-summarization-middleware": (2500.0, 2, 5)}).verdicts()[0]
    assert v.dominated_by == []
    v = _report({**BASE_RUNS, "langchain-summarization-middleware": (2501.0, 4, 10)}).verdicts()[0]
    assert v.dominated_by == []
    # the summariser calls count in the bill: a peer cheaper by requests alone is not cheaper
    summed = _report({**BASE_RUNS, "llamaindex-memory": (2400.0, 3, 5)}, summarizer_billed=60.0)
    for v in summed.verdicts():  # under both models
        assert v.cost == 2500 + 120 and v.dominated_by == ["llamaindex-memory"]  # 2,520 < 2,620


def test_an_invalid_peer_dominates_nobody_and_no_measure_means_no_domination() -> None:
    records = [r for p, run in BASE_RUNS.items() for r in _run_of(p, *run)]
    cheat = _run_of("llamaindex-memory-facts", 100.0, 4, 10)
    cheat[0] = dataclasses.replace(cheat[0], invalid=True, tokens=2500, over_budget=True)
    names = [*BASE_RUNS, "llamaindex-memory-facts"]
    for v in benchmark.BenchmarkReport([*records, *cheat], [2000], names).verdicts():
        assert v.dominated_by == []
        assert "llamaindex-memory-facts (100%, 1 invalid)" in v.beaten_on["retained"]
    blind: Runs = {p: (run[0], None, None) for p, run in BASE_RUNS.items()}
    for v in _report({**blind, "llamaindex-memory": (100.0, None, None)}).verdicts():
        assert v.dominated_by == []  # nothing kept is measured: cost alone dominates nobody


def test_the_verdict_is_per_dataset_and_per_provider_model() -> None:
    def tagged(runs: Runs, name: str) -> list[Any]:
        return [
            dataclasses.replace(r, dataset=name, transcript=name)
            for p, run in runs.items()
            for r in _run_of(p, *run)
        ]

    beaten = {**BASE_RUNS, "langchain-summarization-middleware": (2400.0, 3, 6)}
    records = tagged(BASE_RUNS, "alpha") + tagged(beaten, "beta")
    report = benchmark.BenchmarkReport(records, [2000], list(beaten), ["alpha", "beta"])
    assert report.datasets() == ["alpha", "beta"]
    assert [(v.dataset, v.cache_model, v.outcome) for v in report.verdicts()] == [
        ("alpha", "explicit", "met"),
        ("beta", "explicit", "not met"),
        ("alpha", "automatic", "met"),
        ("beta", "automatic", "not met"),
    ]
    assert report.verdict_lines()[0] == (
        "2,000 tokens, ours:kv-stable, explicit cache: alpha met; beta not met (b)"
    )
    failing = _report(
        {**BASE_RUNS, "langchain-trim-messages": (0.0, 1, 9)}, error="Boom: failed", invalid=True
    )
    assert all(v.within_budget is False for v in failing.verdicts())  # ours failed too
    over = [*_run_of("ours:kv-stable", 2500.0, 2, 5)]
    over[0] = dataclasses.replace(over[0], tokens=2500, over_budget=True, invalid=True)
    for bad in benchmark.BenchmarkReport(over, [2000], ["ours:kv-stable"]).verdicts():
        assert bad.meets_bar is False
        assert bad.failures == ["(a) 1 calls over budget, 1 invalid requests"]


def test_each_budget_table_is_sorted_by_total_bill_marks_the_best_and_fits_100_columns() -> None:
    from rich.console import Console

    report = _report({**BASE_RUNS, "langchain-summarization-middleware": (2600.0, 4, 10)})
    markdown = report.to_markdown()
    table = markdown[markdown.index("## Budget 2,000") :].split("\n\n")[1].splitlines()
    assert all(len(line) <= 110 for line in table)
    policies = [line.split(" | ")[1] for line in table[2:]]
    bills = [2.2, 2.5, 2.6, 2.7, 3.3]  # the two cheap ours of 0.01k first
    assert policies[:2] == ["assemble", "ours:flat-profile"]
    assert [float(line.split(" | ")[2].strip("*\\k")) for line in table[4:]] == bills
    assert "| **0.0k\\*** |" in table[2]  # the cheapest valid total bill is marked
    middleware = next(line for line in table if "langchain-summarization" in line)
    assert "**4/4\\***" in middleware and "**100.0%\\***" in middleware
    console = Console(width=200, record=True, color_system=None)
    for t in report.rich_tables():
        console.print(t)
    assert max(len(line) for line in console.export_text().splitlines()) <= 100
    narrow = Console(width=100, record=True, color_system=None)
    for t in report.rich_tables():
        narrow.print(t)
    text = narrow.export_text()
    assert "…" not in text  # nothing cut in a 100-column terminal
    assert "* the best valid value in its column" in " ".join(text.split())
    assert "## The policies" in markdown and "- `observation-masking`: Observation masking" in (
        markdown
    )


def test_a_stray_invalid_request_does_not_hide_a_policy_from_the_best_marks() -> None:
    from foldbench.report import _rows

    by_name = {s.policy: s for s in _report(BASE_RUNS).summaries()}
    ours, masking = by_name["ours:kv-stable"], by_name["observation-masking"]
    trim = by_name["langchain-trim-messages"]
    many = dict(calls=200)
    rows = _rows(
        [
            dataclasses.replace(ours, invalid=2, **many),  # 1 % of its requests: it counts
            dataclasses.replace(masking, **many),
            dataclasses.replace(trim, over_budget=1, invalid=1, **many),  # over: never
        ]
    )
    marks = {r.cells[1]: r.best for r in rows}
    # ours is the cheapest that counts, masking keeps the most facts; they tie on
    # arguments (5 of 10 each), where trim's 9 of 10 is not marked
    assert marks["ours:kv-stable"] == frozenset({2, 3, 7})  # both bills
    assert marks["observation-masking"] == frozenset({6, 7})
    assert marks["langchain-trim-messages"] == frozenset()
    (stray,) = _rows([dataclasses.replace(ours, invalid=3, **many), masking])[:1]
    assert stray.best == frozenset()  # 1.5 %: out


def test_each_call_records_the_turn_it_has_to_carry() -> None:
    transcript = benchmark.default_transcripts()[0]
    counter = TiktokenCounter()
    records = benchmark.replay_policy(transcript, "langchain-trim-messages", 4000)
    points = transcript.call_points or benchmark.call_points(transcript.messages)
    assert [r.messages_so_far for r in records] == list(points)
    shown = transcript.messages[: points[-1]]
    assert sum(r.new_tokens for r in records) == sum(counter.count_message(m) for m in shown)
    assert all(r.new_tokens > 0 for r in records)


def test_kv_unified_settles_at_the_strategys_headroom() -> None:
    from solvers.kv_unified import PRESETS

    policy = FoldingPolicy.config_for(8000, "kv-unified")["solver_options"]["policy"]
    assert policy.budget_high_ratio == pytest.approx(0.7)  # 1 - the default slack of 0.3
    assert policy.cache_scale == 8000
    preset = PRESETS["cache-first"]  # the band keeps its proportions
    ratio = preset.budget_low_ratio / preset.budget_high_ratio
    assert policy.budget_low_ratio == pytest.approx(0.7 * ratio)
    tight = FoldingPolicy.config_for(8000, "kv-unified", slack=0.5)["solver_options"]["policy"]
    assert tight.budget_high_ratio == pytest.approx(0.5)
    assert tight.budget_low_ratio == pytest.approx(0.5 * ratio) and ratio < 1
    assert "solver_options" not in FoldingPolicy.config_for(8000, "kv-stable")
    transcript = benchmark.default_transcripts()[-1]
    records = benchmark.replay_policy(transcript, "ours:kv-unified", 6000)
    assert all(not r.invalid for r in records)
    after_growth = [r.tokens for r in records[len(records) // 2 :]]
    assert min(after_growth) < 0.8 * 6000 < max(after_growth)  # it refolds into the band


def test_with_a_head_window_the_earliest_mark_gives_way() -> None:
    transcript = benchmark.default_transcripts()[-1]
    policy = FoldingPolicy("kv-stable", head_window_tokens=300)
    widths = set()
    for n in transcript.call_points[:60]:
        request = policy.request(transcript.messages[:n], 3000)
        marks = request.breakpoints
        assert marks is not None and marks == tuple(sorted(set(marks))) and len(marks) <= 4
        assert marks[-1] == len(request.messages) - 1
        widths.add(len(marks))
    policy.close()
    assert 4 in widths  # the system prompt, head, memory and end marks compete for four


def test_wire_round_trip_keeps_the_results_of_parallel_calls_together() -> None:
    call = Message(
        participant="Claude",
        content=(ToolUseBlock(id="a", name="ls"), ToolUseBlock(id="b", name="ls")),
    )
    results = Message(
        participant="User",
        content=(
            ToolResultBlock(tool_use_id="a", content="one"),
            ToolResultBlock(tool_use_id="b", content="two"),
        ),
    )
    back = from_wire(to_wire([Message.text_message("User", "go"), call, results]))
    assert tool_pair_problems(back) == []
    assert back[2].tool_result_ids == ("a", "b")


def test_concatenation_pools_facts_and_probes() -> None:
    from foldbench.loaders import Probe, Transcript

    said = [Message.text_message("User", "my code is K-1 and my pet is Rex")]
    a = Transcript("a", said, facts=["K-1"])
    b = Transcript("b", said, probes=[Probe("p", "pet?", ("Rex",))])
    joined = benchmark.concatenate([a, b])
    assert joined.facts == ["K-1"] and [p.id for p in joined.probes] == ["a/fact-0", "p"]
    assert len(benchmark._fact_patterns(joined)) == 2  # the probe's answers still count


def test_a_peer_without_its_package_is_refused_before_any_run(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    from foldbench import registry

    monkeypatch.setattr(registry, "_importable", lambda module: False)
    done: list[int] = []
    with pytest.raises(ModuleNotFoundError, match="come with the bench extra"):
        benchmark.run(
            benchmark.default_transcripts()[:1],
            ["observation-masking", "langchain-trim-messages"],
            [4000],
            progress=lambda d, _: done.append(d),
        )
    assert done == []  # not even the policy that needs no package ran
    result = CliRunner().invoke(
        app, ["demo", "-p", "langchain-trim-messages", "--out", str(tmp_path / "d")]
    )
    assert result.exit_code == 2 and "come with the bench extra" in result.output


def test_saved_runs_of_other_policies_join_into_one_report(tmp_path: Path) -> None:
    transcripts = [benchmark.synthetic_transcript(40, facts=2), benchmark.tau_bench_transcript(1)]
    policies = ["ours:kv-stable", "observation-masking", "langchain-trim-messages"]
    joint = benchmark.run(transcripts, policies, [3000])
    parts = [benchmark.run(transcripts, [p], [3000]) for p in policies]
    rebuilt = benchmark.BenchmarkReport.from_json(*(r.to_json() for r in parts))

    def key(r: benchmark.CallRecord) -> tuple[str, str, int, int]:
        return (r.transcript, r.policy, r.budget, r.call)

    assert _plain(sorted(rebuilt.records, key=key)) == _plain(sorted(joint.records, key=key))
    assert rebuilt.policies == policies and rebuilt.budgets == [3000]
    assert rebuilt.datasets() == ["synthetic", "tau-bench"]
    assert rebuilt.verdict_lines() == joint.verdict_lines()
    for k, part in enumerate(parts):
        (tmp_path / f"{k}.json").write_text(part.to_json(), encoding="utf-8")
    files = [str(tmp_path / f"{k}.json") for k in range(len(parts))]
    result = CliRunner().invoke(app, ["report", *files, "--out", str(tmp_path / "joined")])
    assert result.exit_code == 0, result.output
    assert joint.verdict_lines()[0][:50] in result.output
    assert (tmp_path / "joined" / "report.md").is_file()
    (tmp_path / "bad.json").write_text('[{"policy": "x"}]', encoding="utf-8")
    bad = CliRunner().invoke(app, ["report", str(tmp_path / "bad.json")])
    assert bad.exit_code == 2 and "record 0" in bad.output


def test_progress_lines_come_at_the_end_and_after_a_quiet_stretch() -> None:
    from context_manager.cli import console
    from foldbench.cli import _ProgressLines

    lines = _ProgressLines("replaying", 3, every=60.0)
    with console.capture() as captured:
        lines(1, 3)  # just started: no line yet
        lines.beat(lines.started + 30.0)  # quiet for 30 s of 60: still none
        lines.beat(lines.started + 61.0)  # quiet for a minute: a line while a run goes on
        lines.beat(lines.started + 122.0)  # the wait doubles while no run ends: none
        lines.beat(lines.started + 182.0)  # two minutes after the last: a line
        lines(2, 3)  # a line was just printed: none
        lines(3, 3)  # the end always prints
    printed = captured.get().splitlines()
    assert printed[:2] == ["replaying: 1/3 runs (33%), 61 s", "replaying: 1/3 runs (33%), 182 s"]
    assert len(printed) == 3 and printed[2].startswith("replaying: 3/3 runs (100%), ")
