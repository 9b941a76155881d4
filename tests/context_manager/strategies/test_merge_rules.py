"""The merge scheduling of the autobiographical strategy (spec §2.3, §4.2, §4.5).

Which runs of parentless memories merge and in what groups (the newest run by the
threshold, never leaving one memory behind; a stranded run whole, in even groups), the
tick's order between a merge and the next chunk (a merge whose last attempt failed lets
one chunk go first), and ``hierarchical=False`` (one level, no merges).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from context_manager import (
    CharsCounter,
    Completion,
    CompletionRequest,
    ContextManager,
    OverBudgetError,
)
from context_manager.strategies.autobiographical import (
    AutobiographicalConfig,
    AutobiographicalStrategy,
    SummaryEntry,
    solve,
)
from context_manager.strategies.autobiographical.writer import demand, merge_sizes
from context_manager.summarizer import MEMORY_MARKER, Usage

Answer = Callable[[CompletionRequest, int], Completion]


def remembered(text: str) -> Completion:
    return Completion(text=text, stop_reason="end_turn", usage=Usage(output_tokens=6))


class Script:
    """A summariser that answers each request with ``answer(request, n)`` (n from 1)
    and keeps every request."""

    def __init__(self, answer: Answer | None = None) -> None:
        self.requests: list[CompletionRequest] = []
        self.answer = answer

    def complete(self, request: CompletionRequest) -> Completion:
        self.requests.append(request)
        if self.answer is None:
            return remembered(f"I remember part {len(self.requests)}.")
        return self.answer(request, len(self.requests))


def open_cm(
    summarizer: Any = None, **options: Any
) -> tuple[ContextManager, AutobiographicalStrategy]:
    """An in-memory manager whose chunks close at four messages of :func:`words` (20
    words, about 36 tokens each), all of them but the newest (always in the tail) in the
    middle and queued at once."""
    config = {
        "compression_model": "test-model",
        "compression_source_only": False,  # the requests carry the memories before them
        "target_chunk_tokens": 100,
        "recent_window_tokens": 0,
        "l1_holdback_chunks": 0,
        "min_chunk_chars_for_llm": 0,
        **options,
    }
    strategy = AutobiographicalStrategy(**config)
    cm = ContextManager.open(
        path=":memory:", strategy=strategy, summarizer=summarizer, counter=CharsCounter()
    )
    return cm, strategy


def words(n: int, tag: str) -> str:
    return " ".join(f"{tag}w{i}" for i in range(n))


def add(cm: ContextManager, first: int, last: int) -> None:
    """Messages ``m{first}`` .. ``m{last - 1}``, without ticking."""
    for i in range(first, last):
        cm.add_message("User", words(20, f"m{i}"))


def is_merge(request: CompletionRequest) -> bool:
    return "(level " in request.messages[-1].text


def after_marker(request: CompletionRequest) -> list[str]:
    """The texts the request asks to remember (between the memory marker and the
    instruction)."""
    texts = [m.text for m in request.messages]
    marker = next(i for i, t in enumerate(texts) if t.startswith(MEMORY_MARKER))
    return texts[marker + 1 : -1]


def chunk_of(request: CompletionRequest) -> int:
    """The number of the chunk an L1 request is about (chunks hold four messages)."""
    first = after_marker(request)[0]
    return int(first.split("w", 1)[0][1:]) // 4


def parents(strategy: AutobiographicalStrategy) -> list[list[str]]:
    """The source ids of each merged memory, in the order they were written."""
    made = sorted(
        (s for s in strategy.summaries.values() if s.level >= 2),
        key=lambda s: int(s.id.rsplit("-", 1)[1]),
    )
    return [list(s.source_ids) for s in made]


def l1_of_chunk(strategy: AutobiographicalStrategy, n: int) -> str:
    summary_id = strategy.chunks[n].summary_id
    assert summary_id is not None, f"chunk {n} has no memory"
    return summary_id


# ------------------------------------------------------------- hand-placed runs
def placed(
    spans: dict[str, tuple[int, int]], n: int, **options: Any
) -> tuple[ContextManager, AutobiographicalStrategy]:
    """A manager over ``n`` one-word messages with L1 memories placed by hand over the
    message index ranges ``spans`` (inclusive); nothing closes a chunk."""
    cm, strategy = open_cm(Script(), target_chunk_tokens=10**9, **options)
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
    return cm, strategy


def groups_of(spans: dict[str, tuple[int, int]], n: int, **options: Any) -> list[list[str]]:
    cm, strategy = placed(spans, n, **options)
    try:
        return strategy.merge_groups(cm._ctx)
    finally:
        cm.close()


def test_a_stranded_run_of_seven_merges_in_even_groups_at_three() -> None:
    # seven memories cut off by message 14, which no memory covers, then a newest pair
    spans = {c: (2 * i, 2 * i + 1) for i, c in enumerate("abcdefg")}
    spans |= {"x": (15, 16), "y": (17, 18)}
    assert groups_of(spans, 20, merge_threshold=3) == [["a", "b", "c"], ["d", "e"], ["f", "g"]]


def test_a_stranded_run_merges_end_to_end_with_no_memory_left_alone() -> None:
    # chunk 7 is refused in every variant: a hole after the seven L1s of chunks 0-6
    def answer(request: CompletionRequest, n: int) -> Completion:
        if not is_merge(request) and chunk_of(request) == 7:
            return Completion(text="I can't.", stop_reason="refusal")
        return remembered(f"I remember part {n}.")

    cm, strategy = open_cm(Script(answer), merge_threshold=3)
    add(cm, 0, 41)  # ten chunks of four, and the newest message, which stays in the tail
    assert len(strategy.chunks) == 10
    cm.drain()
    assert not strategy.chunks[7].compressed
    l1 = [l1_of_chunk(strategy, k) for k in (0, 1, 2, 3, 4, 5, 6, 8, 9)]
    merged = parents(strategy)
    # 3 + 2 + 2 before the hole (not 3 + 3 + 1); the newest pair waits for a third
    assert merged[:3] == [l1[0:3], l1[3:5], l1[5:7]]
    assert all(strategy.summaries[i].parent_id is not None for i in l1[:7])
    assert all(strategy.summaries[i].parent_id is None for i in l1[7:])
    # the three L2s are the newest run of their level: they merge, three at three
    assert merged[3:] == [[s.id for s in strategy.summaries.values() if s.level == 2]]
    assert strategy.merge_groups(cm._ctx) == [] and cm.is_ready()
    cm.close()


def test_threshold_two_takes_the_whole_newest_run_of_three() -> None:
    spans = {"a": (0, 1), "b": (2, 3), "c": (4, 5)}
    assert groups_of(spans, 6, merge_threshold=2) == [["a", "b", "c"]]
    cm, strategy = open_cm(Script(), merge_threshold=2)
    add(cm, 0, 13)  # three chunks (and the newest): their L1s are written before the merge
    assert len(strategy.chunks) == 3
    cm.drain()
    assert parents(strategy) == [[l1_of_chunk(strategy, k) for k in range(3)]]
    assert all(s.parent_id is None for s in strategy.summaries.values() if s.level == 2)
    cm.close()


def test_threshold_two_splits_an_odd_stranded_run_with_one_group_of_three() -> None:
    spans = {c: (2 * i, 2 * i + 1) for i, c in enumerate("abcde")} | {"z": (12, 13)}
    assert groups_of(spans, 14, merge_threshold=2) == [["a", "b", "c"], ["d", "e"]]


def test_the_newest_run_that_would_leave_one_behind_takes_one_fewer() -> None:
    spans = {c: (2 * i, 2 * i + 1) for i, c in enumerate("abcd")}
    assert groups_of(spans, 8, merge_threshold=3) == [["a", "b"]]
    cm, strategy = open_cm(Script(), merge_threshold=3)
    add(cm, 0, 17)  # four chunks, all compressed before the merge
    cm.drain()
    l1 = [l1_of_chunk(strategy, k) for k in range(4)]
    assert parents(strategy) == [l1[:2]]  # two left to grow, not one
    assert strategy.merge_groups(cm._ctx) == []  # the pair waits for a third
    add(cm, 17, 21)
    cm.drain()
    assert parents(strategy) == [l1[:2], [*l1[2:], l1_of_chunk(strategy, 4)]]
    cm.close()


def test_a_newest_run_below_the_threshold_waits() -> None:
    spans = {"a": (0, 1), "b": (2, 3)}
    assert groups_of(spans, 4, merge_threshold=3) == []


def test_a_failed_merge_lets_exactly_one_chunk_go_then_competes_again() -> None:
    """Chunk 2 is refused, so the L1s of chunks 0 and 1 are a stranded pair: one merge,
    the same one at every attempt. Memories are long and chunks short, so the merge
    frees more than any chunk and goes first whenever it competes; it fails twice."""
    merges = {"n": 0}

    def answer(request: CompletionRequest, n: int) -> Completion:
        if is_merge(request):
            merges["n"] += 1
            if merges["n"] <= 2:
                return Completion(text="cut short", stop_reason="max_tokens")
            return remembered("I remember the first two parts.")
        if chunk_of(request) == 2:
            return Completion(text="I can't.", stop_reason="refusal")
        return remembered(words(120, f"memory{n}"))

    script = Script(answer)
    # memories up to 40 times the target are kept as written (none is cut)
    cm, strategy = open_cm(script, summary_target_tokens=20, summary_max_tokens=800)
    add(cm, 0, 33)  # eight chunks; the default threshold (6) never merges the newest run
    assert len(strategy.chunks) == 8
    ticks: list[list[str]] = []
    for _ in range(11):
        seen = len(script.requests)
        assert cm.tick() is True
        ticks.append(
            ["merge" if is_merge(r) else f"c{chunk_of(r)}" for r in script.requests[seen:]]
        )
    assert ticks == [
        ["c0"],
        ["c1"],
        ["c2"],  # refused: a hole
        ["c3"],  # the pair is stranded now
        ["merge"],  # frees more than chunk 4: first; fails
        ["c4"],  # yields to one chunk ...
        ["merge"],  # ... then competes again and goes first; fails
        ["c5"],
        ["merge"],  # written
        ["c2", "c2"],  # its recall ladder changed: asked again (and a variant), refused
        ["c6"],
    ]
    pair = [l1_of_chunk(strategy, 0), l1_of_chunk(strategy, 1)]
    leaves = [cm.get_message(i).text for p in pair for i in strategy.summaries[p].source_ids]
    for request in (r for r in script.requests if is_merge(r)):
        assert after_marker(request) == leaves  # the same merge every time
    assert parents(strategy) == [pair]
    cm.close()


def test_a_merge_that_frees_less_than_the_chunk_waits_for_the_chunks() -> None:
    script = Script()  # short memories: a chunk frees more than a merge of two
    cm, strategy = open_cm(script, merge_threshold=2)
    add(cm, 0, 17)
    cm.drain()
    kinds = ["merge" if is_merge(r) else f"c{chunk_of(r)}" for r in script.requests]
    assert kinds == ["c0", "c1", "c2", "c3", "merge", "merge", "merge"]
    l1 = [l1_of_chunk(strategy, k) for k in range(4)]
    assert parents(strategy)[:2] == [l1[:2], l1[2:]]
    cm.close()


def test_a_merge_a_compile_asked_for_stops_at_its_attempt_limit() -> None:
    def answer(request: CompletionRequest, n: int) -> Completion:
        if is_merge(request):
            return Completion(text="No.", stop_reason="refusal")
        return remembered(f"I remember part {n}.")

    script = Script(answer)
    cm, strategy = open_cm(script, merge_attempt_limit=2)
    add(cm, 0, 17)
    cm.drain()  # four L1s: fewer than the threshold (6), nothing merges by itself
    with pytest.raises(OverBudgetError):  # four L1s do not fit: the solver asks for an L2
        cm.compile(max_tokens=40, reserve_for_response=0, catch_up=False)
    l1 = [l1_of_chunk(strategy, k) for k in range(4)]
    assert strategy.state.demanded_merges == [l1]
    assert cm.drain(max_ticks=50) == 2  # refused twice, then given up on
    assert sum(map(is_merge, script.requests)) == 2 and cm.is_ready()
    cm.close()


# ---------------------------------------------------------------- one level only
def test_hierarchical_false_is_accepted() -> None:
    config = AutobiographicalConfig(compression_model="m", hierarchical=False)
    assert config.hierarchical is False
    assert AutobiographicalConfig().hierarchical is True
    assert AutobiographicalStrategy(compression_model="m", hierarchical=False).config == config
    assert AutobiographicalConfig.model_fields["hierarchical"].description


def test_hierarchical_false_never_merges_while_the_agent_runs_long(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    asked: list[tuple[int, int, int]] = []  # what the solvers asked the writer for

    def spy(*args: Any) -> None:
        asked.extend(args[2])
        demand(*args)

    monkeypatch.setattr(solve, "demand", spy)
    script = Script()
    cm, strategy = open_cm(script, hierarchical=False, merge_threshold=2)
    refused = 0
    advice = ""
    for i in range(161):  # forty chunks of four, and the newest message
        cm.add_message("User" if i % 2 else "Claude", words(20, f"m{i}"))
        cm.drain()
        try:  # forty L1s do not fit: a single level stops fitting and is refused
            cm.compile(max_tokens=600, reserve_for_response=100)
        except OverBudgetError as exc:
            refused += 1
            advice = str(exc.diagnostics["suggestion"])
    # the refusal says what helps when memories never merge
    assert "hierarchical=True" in advice and "target_chunk_tokens" in advice
    assert refused > 0 and any(level >= 2 for level, _, _ in asked)  # coarser was asked for
    assert len(strategy.chunks) == 40 and all(c.compressed for c in strategy.chunks)
    assert {s.level for s in strategy.summaries.values()} == {1}
    assert all(s.parent_id is None for s in strategy.summaries.values())
    assert len(script.requests) == 40 and not any(is_merge(r) for r in script.requests)
    assert strategy.merge_groups(cm._ctx) == [] and strategy.state.demanded_merges == []
    assert cm.is_ready() and not any(w.startswith("merge") for w in cm.pending_work())
    cm.close()


# --------------------------------------------------------------- the property
@settings(max_examples=60, deadline=None)
@given(
    lengths=st.lists(st.integers(1, 13), min_size=1, max_size=5),
    threshold=st.integers(2, 7),
)
def test_groups_partition_a_prefix_of_each_run_and_strand_no_memory(
    lengths: list[int], threshold: int
) -> None:
    """Runs of ``lengths`` memories, each run cut off from the next by a message no
    memory covers: the groups partition a prefix of each run, in order, into groups of
    2 to ``threshold`` (3 at a threshold of 2); a stranded run of two or more is merged
    whole; the newest run keeps fewer than ``threshold`` and never exactly one once it
    merged; and merging the first group leaves the other groups as they were."""
    spans: dict[str, tuple[int, int]] = {}
    runs: list[list[str]] = []
    at = 0
    for r, length in enumerate(lengths):
        runs.append([])
        for k in range(length):
            name = f"r{r}s{k}"
            spans[name] = (at, at)
            runs[-1].append(name)
            at += 1
        at += 1  # the hole
    groups = groups_of(spans, at, merge_threshold=threshold)
    largest = 3 if threshold == 2 else threshold
    assert all(2 <= len(g) <= largest for g in groups)
    for r, run in enumerate(runs):
        mine = [g for g in groups if g[0] in run]
        taken = [name for g in mine for name in g]
        assert taken == run[: len(taken)]  # a prefix, in order, each memory once
        left = len(run) - len(taken)
        newest = r == len(runs) - 1
        if not newest:
            assert left == (1 if len(run) == 1 else 0)
        else:
            assert left < threshold and (left != 1 or len(run) < threshold)
        sizes = [len(g) for g in mine]
        assert sizes == merge_sizes(len(run), threshold, newest=newest)
        if sizes:  # merge the first group: the rest of the run groups the same
            assert merge_sizes(len(run) - sizes[0], threshold, newest=newest) == sizes[1:]


def test_merge_sizes_are_hand_checked() -> None:
    assert merge_sizes(7, 3, newest=False) == [3, 2, 2]
    assert merge_sizes(4, 3, newest=False) == [2, 2]
    assert merge_sizes(3, 2, newest=False) == [3]
    assert merge_sizes(5, 2, newest=False) == [3, 2]
    assert merge_sizes(13, 6, newest=False) == [5, 4, 4]
    assert merge_sizes(1, 6, newest=False) == []
    assert merge_sizes(7, 6, newest=True) == [5]
    assert merge_sizes(8, 6, newest=True) == [6]
    assert merge_sizes(5, 2, newest=True) == [2, 3]
    assert merge_sizes(13, 6, newest=True) == [6, 5]
    with pytest.raises(ValueError, match="at least two"):
        merge_sizes(4, 1, newest=True)
