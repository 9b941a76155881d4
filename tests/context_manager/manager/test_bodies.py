"""Large text messages stored as a body in parts: storage, the rules that keep a body
whole, compiles that send it reassembled, and memories that read it in pieces."""

from __future__ import annotations

from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from context_manager import (
    CharsCounter,
    ContextManager,
    ExtractiveSummarizer,
    OverBudgetError,
    ToolResultBlock,
    ToolUseBlock,
)
from context_manager.bodies import SHARD_KEY, BodyShardError, shard_of
from context_manager.errors import ArgumentError
from context_manager.strategies.autobiographical import AutobiographicalStrategy
from tests.support.scripted_summarizer import ScriptedSummarizer

REPORT = " ".join(f"Sentence {i} of the pasted report." for i in range(1300))
"""45,689 characters: about 11,400 tokens by the chars/4 counter."""


def _strategy(**options: object) -> AutobiographicalStrategy:
    config: dict[str, object] = {
        "compression_model": "extractive",
        "recent_window_tokens": 300,
        "target_chunk_tokens": 1000,
        "l1_holdback_chunks": 0,
        "summary_target_tokens": 100,
    }
    config.update(options)
    return AutobiographicalStrategy(**config)  # type: ignore[arg-type]


def _open(path: str = ":memory:", summarizer: object = None, **options: object) -> ContextManager:
    return ContextManager.open(
        path=path,
        counter=CharsCounter(),
        strategy=_strategy(**options),
        summarizer=summarizer or ExtractiveSummarizer(),  # type: ignore[arg-type]
    )


def _with_report(cm: ContextManager) -> tuple[str, str, str]:
    """Adds a turn, the report and a turn; returns their ids."""
    before = cm.add_message("User", "please read this document")
    body = cm.add_message("User", REPORT)
    after = cm.add_message("Claude", "I have read it.")
    return before, body, after


def _shards(cm: ContextManager, body: str) -> list[str]:
    return [
        s.id
        for s in cm.get_messages()
        if (found := shard_of(s.id, s.message)) is not None and found.group == body
    ]


# ------------------------------------------------------------------ storage
def test_a_large_message_is_stored_as_shards_of_one_body() -> None:
    with _open() as cm:
        _, body, _ = _with_report(cm)
        shards = _shards(cm, body)
        assert len(shards) >= 2
        assert shards[0] == body
        assert cm.get_message_count() == 2 + len(shards)
        texts = [cm.get_message(i).text for i in shards]
        assert "".join(texts) == REPORT
        assert all(700 <= CharsCounter().count_text(t) <= 1300 for t in texts)
        # cut between words: every shard but the last ends at whitespace
        assert all(t[-1].isspace() for t in texts[:-1])
        places = [shard_of(i, cm.get_message(i)) for i in shards]
        assert [(p.index, p.count) for p in places if p] == [
            (k, len(shards)) for k in range(len(shards))
        ]


def test_get_message_of_the_returned_id_is_the_first_shard_and_get_body_the_whole() -> None:
    with _open() as cm:
        _, body, _ = _with_report(cm)
        first = cm.get_message(body).text
        assert REPORT.startswith(first) and len(first) < len(REPORT)
        assert cm.get_body(body) == REPORT
        assert cm.get_body(_shards(cm, body)[-1]) == REPORT
        assert cm.get_body(cm.add_message("User", "short")) == "short"


def test_sharding_can_be_turned_off_and_spares_small_and_mixed_messages() -> None:
    with _open(shard_large_messages=False) as cm:
        _with_report(cm)
        assert cm.get_message_count() == 3
    with _open() as cm:
        cm.add_message("User", "x " * 1000)  # 500 tokens: not over 2 x 1000
        cm.add_message("Claude", [ToolUseBlock(id="t", name="cat", input={})])
        cm.add_message("User", [ToolResultBlock(tool_use_id="t", content=REPORT)])
        assert cm.get_message_count() == 3


def test_the_shard_key_is_reserved() -> None:
    with _open() as cm, pytest.raises(ArgumentError, match=SHARD_KEY):
        cm.add_message("User", "hi", metadata={SHARD_KEY: {"index": 0, "count": 2}})


def test_reopen_keeps_the_body_groups(tmp_path: Path) -> None:
    path = str(tmp_path / "cm.db")
    with _open(path) as cm:
        _, body, _ = _with_report(cm)
        shards = _shards(cm, body)
    with _open(path) as cm:
        assert _shards(cm, body) == shards
        assert cm.get_body(body) == REPORT


def test_the_report_is_remembered_by_several_memories() -> None:
    with _open() as cm:
        _, body, _ = _with_report(cm)
        for i in range(8):
            cm.add_message("Claude" if i % 2 else "User", f"later turn {i} " + "w " * 30)
        cm.drain()
        shards = set(_shards(cm, body))
        strategy = cm.strategy
        assert isinstance(strategy, AutobiographicalStrategy)
        covering = [
            x.id
            for x in strategy.summaries.values()
            if x.level == 1 and shards & set(strategy.leaves_of(x))
        ]
        assert len(covering) >= 2


# ------------------------------------------------------------------ rules
def test_a_shard_cannot_be_edited() -> None:
    with _open() as cm:
        _, body, _ = _with_report(cm)
        for shard in (body, _shards(cm, body)[1]):
            with pytest.raises(BodyShardError, match="message_id") as caught:
                cm.edit_message(shard, "new text")
            assert caught.value.param == "message_id"
            assert caught.value.body_group_id == body
        assert cm.get_body(body) == REPORT


def test_removing_the_first_shard_removes_the_whole_body() -> None:
    with _open() as cm:
        before, body, after = _with_report(cm)
        assert len(_shards(cm, body)) >= 2
        cm.remove_message(body)
        assert [s.id for s in cm.get_messages()] == [before, after]


def test_a_lone_later_shard_cannot_be_removed() -> None:
    with _open() as cm:
        _, body, _ = _with_report(cm)
        second = _shards(cm, body)[1]
        with pytest.raises(BodyShardError, match=f"remove_message\\({body!r}\\)") as caught:
            cm.remove_message(second)
        assert caught.value.param == "message_id"
        assert cm.get_body(body) == REPORT


def test_a_range_may_not_cut_a_body_but_may_hold_it_whole() -> None:
    with _open() as cm:
        before, body, after = _with_report(cm)
        shards = _shards(cm, body)
        with pytest.raises(BodyShardError) as caught:
            cm.remove_messages(before, shards[1])
        assert caught.value.param == "last_id"
        assert repr(shards[-1]) in str(caught.value)
        with pytest.raises(BodyShardError) as caught:
            cm.remove_messages(shards[1], after)
        assert caught.value.param == "first_id"
        assert repr(body) in str(caught.value)
        assert cm.get_message_count() == 2 + len(shards)
        assert cm.remove_messages(body, shards[-1]) == shards
        assert [s.id for s in cm.get_messages()] == [before, after]


def test_a_hold_and_a_release_on_the_first_shard_cover_the_body() -> None:
    with _open() as cm:
        _, body, _ = _with_report(cm)
        shards = _shards(cm, body)
        cm.hold_compression([body])
        assert cm.compression_holds() == set(shards)
        cm.release_compression([body])
        assert cm.compression_holds() == set()
        held = cm.add_message("User", REPORT, hold=True)
        assert cm.compression_holds() == set(_shards(cm, held))


def test_a_pin_on_any_shard_covers_the_whole_body() -> None:
    with _open() as cm:
        before, body, _ = _with_report(cm)
        shards = _shards(cm, body)
        cm.pin_range(before, shards[2])
        cm.mark_document(shards[3])
        strategy = cm.strategy
        assert isinstance(strategy, AutobiographicalStrategy)
        spans = [(p.first, p.last) for p in cm.list_pins()]
        assert spans == [(before, shards[-1]), (body, shards[-1])]


def test_a_branch_is_never_cut_inside_a_body() -> None:
    with _open() as cm:
        _, body, _ = _with_report(cm)
        shards = _shards(cm, body)
        cm.branch_at(shards[1], "reading")
        cm.switch_branch("reading")
        assert _shards(cm, body) == shards
        assert cm.get_body(body) == REPORT


# ------------------------------------------------------------------ compile
def _recount(messages: list[object]) -> int:
    counter = CharsCounter()
    return sum(counter.count_message(m) for m in messages)  # type: ignore[arg-type]


def test_a_body_shown_raw_is_sent_as_the_original_text_priced_as_sent() -> None:
    with _open() as cm:
        before, body, after = _with_report(cm)
        result = cm.compile(max_tokens=200_000, reserve_for_response=0)
        assert [m.text for m in result.messages] == [
            "please read this document",
            REPORT,
            "I have read it.",
        ]
        assert result.messages[1].text.encode() == REPORT.encode()
        assert result.render_stats["request"]["messages"] == _recount(result.messages)
        assert result.render_stats["tokens"] == _recount(result.messages)
        assert result.provenance[1] == (None, tuple(_shards(cm, body)))
        assert result.provenance[0] == (None, (before,)) and result.provenance[2][1] == (after,)
        assert result.raw_bodies == {body: REPORT}


def test_a_body_partly_folded_sends_memories_and_one_joined_raw_run() -> None:
    with _open() as cm:
        _, body, _ = _with_report(cm)
        for i in range(8):
            cm.add_message("Claude" if i % 2 else "User", f"later turn {i} " + "w " * 30)
        cm.drain()
        shards = _shards(cm, body)
        result = cm.compile(max_tokens=6000, reserve_for_response=0)
        assert result.render_stats["request"]["messages"] == _recount(result.messages)
        raw = [
            (m.text, ids)
            for m, (memory, ids) in zip(result.messages, result.provenance, strict=True)
            if memory is None and set(ids) <= set(shards) and ids
        ]
        assert raw, "some of the report is still raw"
        for text, ids in raw:  # each run joined: the stretch of the report it stands for
            first = shards.index(ids[0])
            assert list(ids) == shards[first : first + len(ids)]
            assert text == "".join(cm.get_message(i).text for i in ids)
        assert len(raw) == len({ids for _, ids in raw})
        assert result.raw_bodies == {body: REPORT}


def test_raw_bodies_is_empty_without_a_raw_shard() -> None:
    with _open() as cm:
        cm.add_message("User", "hello")
        assert cm.compile(max_tokens=10_000, reserve_for_response=0).raw_bodies == {}


def test_runs_are_cut_to_the_per_message_cap() -> None:
    with _open(max_message_tokens=2500) as cm:
        _, body, _ = _with_report(cm)
        result = cm.compile(max_tokens=200_000, reserve_for_response=0)
        report = [
            m
            for m, (_, ids) in zip(result.messages, result.provenance, strict=True)
            if set(ids) <= set(_shards(cm, body)) and ids
        ]
        assert len(report) >= 2
        assert "".join(m.text for m in report) == REPORT
        assert all(CharsCounter().count_message(m) <= 2500 for m in report)
        assert result.render_stats["request"]["messages"] == _recount(result.messages)


# ------------------------------------------------------------------ reading mode
READING = "You have been reading a larger text of"


def test_a_memory_of_a_portion_of_a_body_is_written_in_reading_mode() -> None:
    scripted = ScriptedSummarizer()
    with _open(summarizer=scripted, compression_model="test-model") as cm:
        _with_report(cm)
        for i in range(8):
            cm.add_message("Claude" if i % 2 else "User", f"later turn {i} " + "w " * 30)
        cm.drain()
        counter = CharsCounter()
        total = sum(counter.count_message(m.message) for m in cm.get_messages()[1:-9])
        assert cm.get_body(cm.get_messages()[1].id) == REPORT
    l1 = [r for r in scripted.requests if "(level" not in r.messages[-1].text]
    reading = [r for r in l1 if READING in r.messages[-1].text]
    assert len(reading) >= 2
    assert all(f"{READING} {total} tokens;" in r.messages[-1].text for r in reading)
    # the chunk of ordinary turns after the report is remembered as usual
    assert any(READING not in r.messages[-1].text for r in l1)


def test_a_merge_of_memories_of_one_body_reads_too() -> None:
    scripted = ScriptedSummarizer()
    with _open(summarizer=scripted, compression_model="test-model", merge_threshold=2) as cm:
        cm.add_message("User", REPORT)
        cm.add_message("User", "the end")
        cm.drain()
    merges = [r for r in scripted.requests if "(level 2)" in r.messages[-1].text]
    assert merges
    assert any("your reading of portions of a larger text" in r.messages[-1].text for r in merges)


def test_presenting_or_retracting_a_shard_moves_the_whole_body() -> None:
    with _open() as cm:
        cm.present_rows([])
        body = cm.add_message("User", REPORT)
        shards = _shards(cm, body)
        assert cm.present_rows([body]) == shards
        assert [m.id for m in cm.get_window_messages()] == shards
        assert cm.retract_rows([shards[2]]) == shards
        assert cm.get_window_messages() == []


# ------------------------------------------------------------------ many histories
_STEP = st.one_of(
    st.tuples(st.just("turn"), st.integers(1, 40)),
    st.tuples(st.just("body"), st.integers(150, 700)),
    st.tuples(st.just("drain"), st.just(0)),
    st.tuples(st.just("compile"), st.integers(400, 20_000)),
)


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(steps=st.lists(_STEP, min_size=1, max_size=12), paragraphs=st.booleans())
def test_bodies_survive_any_history_and_every_request_is_priced_as_sent(
    steps: list[tuple[str, int]], paragraphs: bool
) -> None:
    added: dict[str, str] = {}
    with _open(target_chunk_tokens=100, recent_window_tokens=150) as cm:
        for n, (what, size) in enumerate(steps):
            if what == "turn":
                cm.add_message("User" if n % 2 else "Claude", " ".join(["w"] * size))
            elif what == "body":
                sep = "\n\n" if paragraphs else " "
                text = sep.join(f"b{n}s{i} says something." for i in range(size // 4))
                added[cm.add_message("User", text)] = text
            elif what == "drain":
                cm.drain()
            else:
                try:
                    result = cm.compile(max_tokens=size, reserve_for_response=0)
                except OverBudgetError:
                    continue
                assert result.render_stats["request"]["messages"] == _recount(result.messages)
                for group, text in result.raw_bodies.items():
                    assert text == added[group]
                for message, (memory, ids) in zip(result.messages, result.provenance, strict=True):
                    if memory is None and len(ids) > 1:  # a joined run of one body
                        place = shard_of(ids[0], cm.get_message(ids[0]))
                        assert place is not None
                        assert message.text == "".join(cm.get_message(i).text for i in ids)
                        assert message.text in added[place.group]
        for first, text in added.items():
            assert cm.get_body(first) == text


def test_a_newest_body_is_the_turn_answered_and_is_never_folded() -> None:
    with _open() as cm:
        for i in range(12):
            cm.add_message("Claude" if i % 2 else "User", f"turn {i} " + "w " * 300)
        body = cm.add_message("User", REPORT)
        cm.drain()
        strategy = cm.strategy
        assert isinstance(strategy, AutobiographicalStrategy)
        shards = set(_shards(cm, body))
        assert not any(shards & set(strategy.leaves_of(x)) for x in strategy.summaries.values())
        result = cm.compile(max_tokens=14_000, reserve_for_response=0)
        assert result.messages[-1].text == REPORT
        assert result.render_stats["request"]["messages"] == _recount(result.messages)
