"""Planted facts: where they go, what they leave alone, and the selections that carry them."""

from __future__ import annotations

import collections
import json
import os
import re
import subprocess
import sys
from collections.abc import Sequence

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from context_manager.messages import (
    ImageBlock,
    Message,
    TextBlock,
    ToolResultBlock,
    ToolUseBlock,
    text_of,
)
from context_manager.pairing import tool_pair_problems
from foldbench import benchmark, dataset
from foldbench.loaders import Probe, Transcript, load_swe_agent, load_tau_bench
from foldbench.plant import FACT_AGES, age_of, plant_facts, plant_parts
from tests.support.paths import ROOT

SWE = dataset("swe-agent")
TAU = dataset("tau-bench") / benchmark.TAU_BENCH_FILE


def _run(stem: str) -> Transcript:
    messages = load_swe_agent(SWE / f"{stem}.traj")
    return Transcript(stem, messages, call_points=benchmark.call_points(messages))


def _real() -> list[Transcript]:
    """Unplanted transcripts of each shape: tool results and one user turn (the newest
    message a tool result), user turns only, and a tau-bench session with both."""
    tau = load_tau_bench(TAU, limit=3)
    return [
        _run("marshmallow-1867-function-calling"),
        _run("pydicom-1458-gpt4"),
        max(tau, key=lambda t: len(t.messages)),
    ]


def _whole_word(fact: str) -> re.Pattern[str]:
    return re.compile(rf"(?<!\w){re.escape(fact)}(?!\w)", re.IGNORECASE)  # as benchmark's


def _bytes(t: Transcript) -> bytes:
    return json.dumps(
        {
            "name": t.name,
            "messages": [m.model_dump(mode="json") for m in t.messages],
            "facts": t.facts,
            "probes": [[p.id, p.question, list(p.answers), p.source] for p in t.probes],
            "call_points": t.call_points,
            "metadata": t.metadata,
        },
        sort_keys=True,
    ).encode()


def _text(messages: Sequence[Message]) -> str:
    return "\n".join(text_of(m.content) for m in messages)


# ----------------------------------------------------------------- plant_facts


def test_the_same_transcript_and_seed_give_the_same_bytes_and_another_seed_other_facts() -> None:
    for t in _real():
        before = _bytes(t)
        a, b = plant_facts(t, seed=7), plant_facts(t, seed=7)
        assert _bytes(a) == _bytes(b) and _bytes(a) != before
        other = plant_facts(t, seed=8)
        assert len(other.facts) == len(a.facts) == 6
        assert not set(other.facts) & set(a.facts)
        assert _bytes(t) == before  # the transcript given is left as it was


def test_planting_does_not_depend_on_hash_randomisation() -> None:
    script = (
        "import hashlib, json\n"
        "from foldbench import benchmark\n"
        "ts = benchmark.default_transcripts() + [benchmark.tau_bench_transcript(5)]\n"
        "blob = json.dumps([[t.facts, t.metadata.get('planted'),"
        " [m.model_dump(mode='json') for m in t.messages]] for t in ts], sort_keys=True)\n"
        "print(hashlib.sha256(blob.encode()).hexdigest())\n"
    )
    digests = set()
    for hash_seed in ("1", "2"):
        env = {**os.environ, "PYTHONHASHSEED": hash_seed}
        done = subprocess.run(
            [sys.executable, "-c", script], env=env, cwd=ROOT, capture_output=True, text=True
        )
        assert done.returncode == 0, done.stderr
        digests.add(done.stdout.strip())
    assert len(digests) == 1 and len(digests.pop()) == 64


def test_each_fact_is_where_the_metadata_says_and_nowhere_else() -> None:
    for t in _real():
        planted = plant_facts(t, seed=1)
        records = planted.metadata["planted"]
        assert [r["fact"] for r in records] == planted.facts and planted.metadata["plant_seed"] == 1
        assert [r["index"] for r in records] == sorted({r["index"] for r in records})
        original, full = _text(t.messages), _text(planted.messages)
        for r in records:
            pattern = _whole_word(r["fact"])
            assert not pattern.search(original) and r["fact"].casefold() not in original.casefold()
            assert len(pattern.findall(full)) == 1  # the one planted, found as a whole word
            block = planted.messages[r["index"]].content[r["block"]]
            assert pattern.search(text_of([block]))
            kind = "tool_result" if isinstance(block, ToolResultBlock) else "user"
            assert r["kind"] == kind and planted.messages[r["index"]].participant != "System"
            assert kind == "tool_result" or planted.messages[r["index"]].participant == "User"


def test_the_facts_are_spread_evenly_over_the_thirds_of_the_conversation() -> None:
    for t in _real():
        planted = plant_facts(t, seed=2, count=6)
        n = len(planted.messages)
        records = planted.metadata["planted"]
        for r in records:
            assert r["age"] == age_of(r["index"], n) == FACT_AGES[3 * r["index"] // n]
        assert collections.Counter(r["age"] for r in records) == {a: 2 for a in FACT_AGES}
    uneven = plant_facts(_real()[1], seed=2, count=4)  # one third gets the extra one
    assert sorted(collections.Counter(r["age"] for r in uneven.metadata["planted"]).values()) == [
        1,
        1,
        2,
    ]
    late = plant_facts(_real()[1], count=2, ages=("late",))
    assert [r["age"] for r in late.metadata["planted"]] == ["late", "late"]


def test_both_kinds_take_turns_and_the_phrasings_vary() -> None:
    session = _real()[2]
    planted = plant_facts(session, seed=0, count=6)
    kinds = collections.Counter(r["kind"] for r in planted.metadata["planted"])
    assert kinds == {"tool_result": 3, "user": 3}
    sessions = load_tau_bench(TAU, limit=20)
    lines = [p.source for t in plant_parts(sessions, count=2) for p in t.probes]
    assert len(lines) == 40
    openings = {line.split(" the ")[0] for line in lines}
    assert len(openings) >= 5  # several phrasings of each kind
    assert all(p.question.startswith("What is the ") for p in planted.probes)


def test_only_text_is_appended_pairing_count_and_call_points_unchanged() -> None:
    for t in _real():
        planted = plant_facts(t, seed=3)
        assert len(planted.messages) == len(t.messages)
        assert planted.call_points == t.call_points and planted.name == t.name
        assert tool_pair_problems(planted.messages) == tool_pair_problems(t.messages) == []
        touched = {r["index"] for r in planted.metadata["planted"]}
        for i, (old, new) in enumerate(zip(t.messages, planted.messages, strict=True)):
            if i not in touched:
                assert new == old
                continue
            assert new.participant == old.participant and new.metadata == old.metadata
            assert new.timestamp == old.timestamp and len(new.content) == len(old.content)
            assert new.tool_use_ids == old.tool_use_ids
            assert new.tool_result_ids == old.tool_result_ids
            for a, b in zip(old.content, new.content, strict=True):
                assert type(a) is type(b)
                if isinstance(a, ToolResultBlock) and isinstance(b, ToolResultBlock):
                    assert (a.tool_use_id, a.is_error) == (b.tool_use_id, b.is_error)
                assert text_of([b]).startswith(text_of([a]))  # appended, nothing rewritten
        assert {
            k: v for k, v in planted.metadata.items() if k not in {"planted", "plant_seed"}
        } == (t.metadata)


def test_the_system_prompt_and_the_newest_message_are_never_planted() -> None:
    run = _real()[0]
    assert run.messages[-1].tool_result_ids  # the newest would be a candidate otherwise
    planted = plant_facts(run, seed=4, count=50)  # asks for more than there is room for
    n = len(run.messages)
    assert planted.messages[0] == run.messages[0] and planted.messages[-1] == run.messages[-1]
    indices = [r["index"] for r in planted.metadata["planted"]]
    assert 0 not in indices and n - 1 not in indices
    eligible = [i for i in range(1, n - 1) if run.messages[i].participant != "Claude"]
    assert indices == eligible  # one fact a message, every other message of the run
    only_newest = Transcript(
        "tiny",
        [Message.text_message("System", "s"), Message.text_message("User", "hello")],
    )
    assert plant_facts(only_newest, count=3).facts == []


def test_every_planted_fact_is_found_by_the_benchmark_and_kept_by_the_whole_history() -> None:
    for t in _real():
        planted = plant_facts(t, seed=5)
        patterns = benchmark._fact_patterns(planted)
        assert len(patterns) == len(planted.facts) == 6
        assert benchmark._retained(planted.messages, patterns) == 6
        assert benchmark._retained(t.messages, patterns) == 0  # the original states none
        assert benchmark._fact_patterns(t) == []


def test_old_facts_and_probes_are_kept_beside_the_planted_ones() -> None:
    said = [
        Message.text_message("System", "s"),
        *[
            Message.text_message(w, f"turn {i} code K-1")
            for i, w in enumerate(["User", "Claude"] * 5)
        ],
    ]
    with_facts = plant_facts(Transcript("a", said, facts=["K-1"]), count=3)
    assert with_facts.facts[0] == "K-1" and len(with_facts.facts) == 4
    assert [p.id for p in with_facts.probes] == ["a/fact-0", *(f"a/planted-{k}" for k in range(3))]
    assert len(benchmark._fact_patterns(with_facts)) == 4
    probe = Probe("q", "code?", ("K-1",))
    with_probes = plant_facts(Transcript("b", said, probes=[probe]), count=3)
    assert with_probes.probes[0] == probe and len(with_probes.probes) == 4
    assert len(with_probes.facts) == 3 and "K-1" not in with_probes.facts
    assert len(benchmark._fact_patterns(with_probes)) == 4
    none = plant_facts(Transcript("c", said, facts=["K-1"]), count=0)
    assert none.messages == said and none.facts == ["K-1"] and none.metadata["planted"] == []


def test_tool_results_of_text_and_image_blocks_get_a_text_line() -> None:
    image = ImageBlock(media_type="image/png", data="AAAA")
    messages = [Message.text_message("System", "s")]
    for k, content in enumerate([[TextBlock(text="out"), image], [image], "plain"]):
        use = ToolUseBlock(id=f"c{k}", name="shot")
        messages.append(Message(participant="Claude", content=(use,)))
        result = ToolResultBlock(tool_use_id=f"c{k}", content=content, is_error=k == 1)
        messages.append(Message(participant="Tool", content=(result,)))
    messages.append(Message.text_message("Claude", "done"))
    t = Transcript("images", messages, call_points=benchmark.call_points(messages))
    planted = plant_facts(t, count=3)
    assert [r["index"] for r in planted.metadata["planted"]] == [2, 4, 6]
    first, second, third = (planted.messages[i].content[0] for i in (2, 4, 6))
    assert isinstance(first, ToolResultBlock) and isinstance(first.content, list)
    assert first.content[1] == image and isinstance(first.content[0], TextBlock)
    assert first.content[0].text.startswith("out\n")
    assert isinstance(second, ToolResultBlock) and isinstance(second.content, list)
    assert second.content[0] == image and second.is_error and len(second.content) == 2
    assert isinstance(third, ToolResultBlock) and isinstance(third.content, str)
    assert third.content.startswith("plain\n")
    assert tool_pair_problems(planted.messages) == []
    assert benchmark._retained(planted.messages, benchmark._fact_patterns(planted)) == 3


def test_bad_requests_are_refused() -> None:
    t = _real()[1]
    with pytest.raises(ValueError, match="count"):
        plant_facts(t, count=-1)
    with pytest.raises(ValueError, match="ages"):
        plant_facts(t, ages=("early", "early"))
    with pytest.raises(ValueError, match="ages"):
        plant_facts(t, ages=("soon",))  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="index"):
        age_of(3, 3)


def test_avoided_texts_and_facts_collide_with_nothing() -> None:
    t = _real()[1]
    first = plant_facts(t, seed=6)
    again = plant_facts(t, seed=6, avoid=first.facts)  # the same draws, all refused
    assert not set(first.facts) & set(again.facts) and len(again.facts) == 6


@settings(derandomize=True, max_examples=30, deadline=None)
@given(st.integers(8, 160), st.integers(0, 5), st.integers(0, 12), st.integers(0, 10**6))
def test_any_synthetic_conversation_plants_well(n: int, seed: int, count: int, salt: int) -> None:
    raw = benchmark.synthetic_transcript(n, seed=seed, facts=0)
    planted = plant_facts(raw, seed=salt, count=count)
    records = planted.metadata["planted"]
    eligible = sum(m.participant == "User" for m in raw.messages[1:-1])
    assert len(records) == min(count, eligible)
    assert len(planted.messages) == len(raw.messages) and planted.call_points == raw.call_points
    assert tool_pair_problems(planted.messages) == []
    assert planted.messages[0] == raw.messages[0] and planted.messages[-1] == raw.messages[-1]
    assert benchmark._retained(planted.messages, benchmark._fact_patterns(planted)) == len(records)
    shares = collections.Counter(r["age"] for r in records)
    room = collections.Counter(
        age_of(i, len(raw.messages))
        for i, m in enumerate(raw.messages[:-1])
        if m.participant == "User"
    )
    if all(room[a] >= count for a in FACT_AGES):  # every third has room: the split is even
        assert max(shares.values(), default=0) - min(shares.values(), default=0) <= 1
        assert len(shares) == min(3, count)


# ----------------------------------------------------------------- parts and selections


def test_parts_planted_apart_keep_their_ages_once_joined() -> None:
    sessions = load_tau_bench(TAU, limit=20)
    parts = plant_parts(sessions, count=3)
    texts = [_text(p.messages) for p in sessions]
    for k, part in enumerate(parts):
        assert len(part.facts) == 3
        for other, text in enumerate(texts):
            assert all(f.casefold() not in text.casefold() for f in part.facts), (k, other)
    joined = benchmark.concatenate(parts, name="joined")
    assert joined.facts == [f for p in parts for f in p.facts]
    assert len(benchmark._fact_patterns(joined)) == len(joined.facts) == 60
    assert benchmark._retained(joined.messages, benchmark._fact_patterns(joined)) == 60
    n = len(joined.messages)
    for r in joined.metadata["planted"]:
        assert r["age"] == age_of(r["index"], n) and r["part"] in {p.name for p in parts}
        assert _whole_word(r["fact"]).search(text_of(joined.messages[r["index"]].content))
    assert {r["age"] for r in joined.metadata["planted"]} == set(FACT_AGES)


def test_default_selection_plants_every_swe_agent_run_and_several_synthetic_ones() -> None:
    transcripts = benchmark.default_transcripts()
    runs = [t for t in transcripts if benchmark.dataset_of(t) == "swe-agent"]
    synthetic = [t for t in transcripts if benchmark.dataset_of(t) == "synthetic"]
    assert [t.name for t in synthetic] == [
        f"synthetic-{n}-{seed}" for n, seed in benchmark.SYNTHETIC_SELECTION
    ]
    assert sum(len(t.messages) for t in synthetic) <= 800
    raw = benchmark.default_transcripts(plant=False)
    assert not any(t.facts or t.probes for t in raw)
    for t, bare in zip(transcripts, raw, strict=True):
        assert t.name == bare.name and len(t.messages) == len(bare.messages)
        assert t.call_points == bare.call_points
        patterns = benchmark._fact_patterns(t)
        assert benchmark._retained(t.messages, patterns) == len(patterns) == len(t.facts) > 0
        ages = collections.Counter(r["age"] for r in t.metadata["planted"])
        assert set(ages) == set(FACT_AGES)
    for t in runs[:-1]:  # each run: two facts in each third
        assert len(t.facts) == benchmark.SWE_AGENT_FACTS
        assert set(collections.Counter(r["age"] for r in t.metadata["planted"]).values()) == {2}
    joined = runs[-1]
    assert joined.name == "swe-agent-concatenated"
    assert joined.facts == [f for t in runs[:-1] for f in t.facts]
    assert raw[0].messages == load_swe_agent(SWE / f"{raw[0].name}.traj")


def test_tau_bench_plants_each_session_before_joining() -> None:
    joined = benchmark.tau_bench_transcript(20)
    assert len(joined.facts) == 20 * benchmark.TAU_BENCH_FACTS
    records = joined.metadata["planted"]
    assert [r["part"] for r in records] == [
        name for name in joined.metadata["parts"] for _ in range(benchmark.TAU_BENCH_FACTS)
    ]
    assert {r["part_age"] for r in records} == {r["age"] for r in records} == set(FACT_AGES)
    assert benchmark._retained(joined.messages, benchmark._fact_patterns(joined)) == 40
    bare = benchmark.tau_bench_transcript(20, plant=False)
    assert (
        bare.facts == []
        and bare.messages == benchmark.concatenate(load_tau_bench(TAU, limit=20)).messages
    )
    assert tool_pair_problems(joined.messages) == tool_pair_problems(bare.messages)
    assert joined.call_points == bare.call_points


def test_the_quick_selection_carries_facts_too() -> None:
    quick = benchmark.quick_transcripts()
    assert [benchmark.dataset_of(t) for t in quick] == ["swe-agent", "tau-bench", "synthetic"]
    for t in quick:
        assert t.facts and benchmark._retained(t.messages, benchmark._fact_patterns(t)) == len(
            t.facts
        )
    planted_runs = {t.name: t for t in benchmark.default_transcripts()}
    assert quick[0].facts == planted_runs[quick[0].name].facts  # the same planting
    assert not any(t.facts for t in benchmark.quick_transcripts(plant=False))


def test_synthetic_facts_reach_every_third_of_the_conversation() -> None:
    t = benchmark.synthetic_transcript(240, seed=1)
    n = len(t.messages)
    positions = sorted(r["index"] for r in t.metadata["planted"])
    assert len(positions) == 8 and positions[-1] >= 2 * n / 3 and positions[0] < n / 3
    assert _bytes(t) == _bytes(benchmark.synthetic_transcript(240, seed=1))
    assert set(t.facts).isdisjoint(benchmark.synthetic_transcript(240, seed=2).facts)
