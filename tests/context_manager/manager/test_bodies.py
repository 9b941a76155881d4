"""Large text messages stored as a body in parts: storage, the rules that keep a body
whole, compiles that send it reassembled, and memories that read it in pieces."""

from __future__ import annotations

from pathlib import Path

import pytest

from context_manager import (
    CharsCounter,
    ContextManager,
    ExtractiveSummarizer,
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
