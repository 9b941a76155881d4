"""Provenance on every memory (stop reason, request hash, model, witnessed), the
``witnessed_before_sequence`` option, and fold receipts (``accept_round``)."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Any

import pytest

from context_manager import (
    ArgumentError,
    CharsCounter,
    Completion,
    CompletionRequest,
    ContextManager,
    ExtractiveSummarizer,
    Store,
    UnknownCompileError,
)
from context_manager.receipts import FoldReceipt
from context_manager.strategies.autobiographical import (
    AutobiographicalConfig,
    AutobiographicalStrategy,
)
from context_manager.strategies.autobiographical.records import SummaryEntry
from tests.support.receipt_agent import open_at
from tests.support.scripted_summarizer import ScriptedSummarizer, open_cm, words
from tests.support.store_places import Place, agent_places, file_places

HEX = set("0123456789abcdef")
PROVENANCE_KEYS = ("stop_reason", "request_hash", "model", "witnessed")


def canonical_hash(request: CompletionRequest) -> str:
    """The request's hash computed here, from its JSON form, without the library's
    helper: sorted keys, no spaces, ``timeout`` left out (a deadline, not content)."""
    body = request.model_dump(mode="json")
    del body["timeout"]
    text = json.dumps(body, sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(text.encode()).hexdigest()


def drained(
    tmp_path: Path | None, summarizer: Any = None, n: int = 16, **options: Any
) -> tuple[ContextManager, AutobiographicalStrategy, ScriptedSummarizer]:
    s = summarizer if summarizer is not None else ScriptedSummarizer()
    cm, strategy = open_cm(tmp_path, s, merge_threshold=2, **options)
    for i in range(n):
        cm.add_message("User", words(20, f"m{i}"))
    cm.drain()
    return cm, strategy, s


# ------------------------------------------------------------------ provenance
def test_drained_memories_carry_end_turn_the_hash_of_their_request_and_the_model() -> None:
    cm, strategy, s = drained(None)
    with cm:
        memories = list(strategy.summaries.values())
        assert {m.level for m in memories} >= {1, 2}
        asked = {canonical_hash(r): r for r in s.requests}
        text = {m.id: m.message.text for m in cm.get_messages()}
        for m in memories:
            assert m.stop_reason == "end_turn"
            assert m.request_hash is not None and len(m.request_hash) == 64
            assert set(m.request_hash) <= HEX
            assert m.request_hash in asked, m.id
            assert m.model == "test-model"  # the answers name no model: the request's
            assert m.witnessed is False
            request = asked[m.request_hash]
            sent = "".join(x.text for x in request.messages)
            if m.level == 1:  # the request that wrote it read its chunk
                assert all(text[i] in sent for i in m.source_ids)
            else:  # a merge's request read its sources' messages
                assert all(text[i] in sent for i in strategy.leaves_of(m))
        # each memory answers its own request
        assert len({m.request_hash for m in memories}) == len(memories)


def test_a_summariser_that_names_its_model_is_recorded_by_that_name() -> None:
    cm, strategy, _ = drained(
        None, ExtractiveSummarizer(model="extractive-offline"), compression_model="claude-x"
    )
    with cm:
        assert strategy.summaries
        assert {m.model for m in strategy.summaries.values()} == {"extractive-offline"}


def test_the_hash_is_of_the_retry_that_was_answered_not_the_first_request() -> None:
    def answer(request: CompletionRequest, n: int) -> Completion:
        if n == 1:  # a tool call: retried with the no-tools sentence
            return Completion(text="", stop_reason="tool_use")
        return Completion(text=f"I remember {n}.", stop_reason="end_turn", model="scripted-2")

    s = ScriptedSummarizer(answer)
    cm, strategy = open_cm(None, s)
    with cm:
        for i in range(6):
            cm.add_message("User", words(20, f"m{i}"))
        cm.drain()
        first = strategy.summaries["L1-0"]
        assert first.request_hash == canonical_hash(s.requests[1])
        assert first.request_hash != canonical_hash(s.requests[0])
        assert first.model == "scripted-2"


def test_a_stitched_memory_hashes_the_requests_of_its_parts_in_order() -> None:
    def answer(request: CompletionRequest, n: int) -> Completion:
        if len(request.messages) <= 7:  # a part of at most five messages: answered
            return Completion(text=f"Part {n}.", stop_reason="end_turn", model="parts-model")
        return Completion(text="No.", stop_reason="refusal")

    s = ScriptedSummarizer(answer)
    cm, strategy = open_cm(None, s, compression_split_fallback=True)
    with cm:
        for i in range(12):
            cm.add_message("User", words(8, f"m{i}"))
        cm.drain()
        memory = strategy.summaries[strategy.chunks[0].summary_id or ""]
        assert memory.stitched
        answered = [r for r in s.requests if len(r.messages) <= 7]
        assert len(answered) == 2  # ten messages: two halves of five
        parts = json.dumps([canonical_hash(r) for r in answered], separators=(",", ":"))
        assert memory.request_hash == hashlib.sha256(parts.encode()).hexdigest()
        assert (memory.stop_reason, memory.model) == ("end_turn", "parts-model")


def test_the_same_history_gives_the_same_request_hashes() -> None:
    def hashes() -> list[tuple[str, str | None]]:
        cm, strategy = open_cm(None, ScriptedSummarizer(), merge_threshold=2)
        with cm:
            for i in range(12):
                cm.add_message("User", words(20, f"m{i}"), timestamp=1_700_000_000.0 + i)
            cm.drain()
            return sorted((m.id, m.request_hash) for m in strategy.summaries.values())

    first = hashes()
    assert first and first == hashes()


def test_provenance_survives_reopen(tmp_path: Path) -> None:
    cm, strategy, _ = drained(tmp_path)

    def provenance(strategy: AutobiographicalStrategy) -> dict[str, tuple[Any, ...]]:
        return {m.id: (m.stop_reason, m.request_hash, m.model) for m in strategy.summaries.values()}

    before = provenance(strategy)
    cm.close()
    cm, strategy = open_cm(tmp_path, ScriptedSummarizer(), merge_threshold=2)
    with cm:
        after = provenance(strategy)
    assert after == before and before


def test_a_store_written_before_provenance_loads_with_the_fields_unset(tmp_path: Path) -> None:
    cm, strategy, _ = drained(tmp_path)
    ids = sorted(strategy.summaries)
    cm.close()
    with Store.open(tmp_path / "cm.db") as store:  # the bodies an older version wrote
        for item in store.items("default/autobio:summaries"):
            old = {k: v for k, v in item.body.items() if k not in PROVENANCE_KEYS}
            store.edit("default/autobio:summaries", item.id, old)
        bodies = [i.body for i in store.items("default/autobio:summaries")]
    assert bodies and not any(k in b for b in bodies for k in PROVENANCE_KEYS)
    cm, strategy = open_cm(tmp_path, ScriptedSummarizer(), merge_threshold=2)
    with cm:
        assert sorted(strategy.summaries) == ids
        for m in strategy.summaries.values():
            assert (m.stop_reason, m.request_hash, m.model, m.witnessed) == (
                None,
                None,
                None,
                False,
            )
            assert m.provenance is None
        result = cm.compile(max_tokens=400, reserve_for_response=100)
        assert any(memory for memory, _ in result.provenance)


def test_a_stored_provenance_of_the_wrong_shape_is_named() -> None:
    body = {
        "id": "L1-0",
        "level": 1,
        "content": "x",
        "tokens": 1,
        "source_ids": ["m1"],
        "first": "m1",
        "last": "m1",
    }
    assert SummaryEntry.problem_of(body) is None
    assert SummaryEntry.problem_of({**body, "request_hash": "abc"}) == (
        "its request_hash is not 64 lowercase hex digits"
    )
    assert SummaryEntry.problem_of({**body, "witnessed": "yes"}) == (
        "its witnessed flag is not true or false"
    )
    assert SummaryEntry.problem_of({**body, "model": 3}) == "its model is not text"


# ---------------------------------------------------------------- witnessed
def test_witnessed_before_sequence_is_an_option() -> None:
    config = AutobiographicalConfig(compression_model="m", witnessed_before_sequence=7)
    assert config.witnessed_before_sequence == 7
    with pytest.raises(ValueError, match="witnessed_before_sequence"):
        AutobiographicalConfig(compression_model="m", witnessed_before_sequence=0)


def test_an_inherited_record_is_remembered_in_the_third_person(tmp_path: Path) -> None:
    cm, _ = open_cm(tmp_path)  # no summariser: the inherited record stays raw
    for i in range(8):
        cm.add_message("Archivist", words(20, f"old{i}"))
    bound = cm.current_sequence() + 1
    cm.close()
    s = ScriptedSummarizer()
    cm, strategy = open_cm(tmp_path, s, merge_threshold=2, witnessed_before_sequence=bound)
    with cm:
        for i in range(10):
            cm.add_message("User", words(20, f"own{i}"))
        cm.drain()
        seq = {m.id: m.seq for m in cm.get_messages()}
        asked = {canonical_hash(r): r for r in s.requests}
        memories = list(strategy.summaries.values())
        for m in memories:
            inherited = all(seq[i] < bound for i in strategy.leaves_of(m))
            if m.level > 1:
                inherited = all(strategy.summaries[c].witnessed for c in m.source_ids)
            assert m.witnessed is inherited, m.id
            assert m.request_hash is not None
            instruction = asked[m.request_hash].messages[-1].text
            assert ("inherited record" in instruction) is inherited, m.id
            assert ("in the first person, from your own perspective" in instruction) is (
                not inherited and m.level == 1
            )
        levels = {(m.level, m.witnessed) for m in memories}
        assert {(1, True), (1, False), (2, True)} <= levels


def test_a_witnessed_instruction_replaces_the_built_in_one(tmp_path: Path) -> None:
    cm, _ = open_cm(tmp_path)
    for i in range(6):
        cm.add_message("Archivist", words(20, f"old{i}"))
    bound = cm.current_sequence() + 1
    cm.close()
    s = ScriptedSummarizer()
    cm, strategy = open_cm(
        tmp_path,
        s,
        witnessed_before_sequence=bound,
        witnessed_instruction="Recount the record in about {targetTokens} tokens.",
        summary_target_tokens=50,
    )
    with cm:
        cm.drain()
        assert strategy.summaries
        texts = {r.messages[-1].text for r in s.requests}
    assert texts == {"[CM] Recount the record in about 50 tokens."}


# ----------------------------------------------------------------- receipts
@pytest.fixture(params=["sqlite", "postgresql"])
def place(request: pytest.FixtureRequest, tmp_path: Path) -> Place:
    if request.param == "sqlite":
        return file_places(tmp_path)
    return agent_places(request.getfixturevalue("postgres_url"))


def test_an_accepted_round_is_a_receipt_of_its_folds_that_survives_reopen(place: Place) -> None:
    where = place("receipts")
    cm, strategy = open_at(where)
    with cm:
        for i in range(16):
            cm.add_message("User", words(20, f"m{i}"))
        cm.drain()
        result = cm.compile(max_tokens=400, reserve_for_response=100)
        receipt = cm.accept_round(result.compile_id, usage={"input_tokens": 300, "x": None})
        shown = {memory: ids for memory, ids in result.provenance if memory and ids}
        assert shown  # the request folds history into memories
        assert receipt.seq == 1 and receipt.compile_id == result.compile_id
        assert receipt.usage == {"input_tokens": 300}
        assert receipt.branch == cm.current_branch
        assert [f.memory for f in receipt.folds] == list(shown)
        for fold in receipt.folds:
            assert fold.memory is not None
            ids = shown[fold.memory]
            assert fold.level == strategy.summaries[fold.memory].level
            assert (fold.first, fold.last, fold.messages) == (ids[0], ids[-1], len(ids))
        raw = [i for memory, ids in result.provenance if memory is None for i in ids]
        assert sum(u.messages for u in receipt.units if not u.fold) == len(raw)
        assert strategy.accepted_receipt == receipt
        expected = [(f.first, f.last, f.level) for f in receipt.folds]
        assert strategy.accepted_resolutions == expected
    cm, strategy = open_at(where)
    with cm:
        assert cm.list_fold_receipts() == [receipt]
        assert strategy.accepted_receipt == receipt
        cm.add_message("User", "one more")
        second = cm.compile(max_tokens=400, reserve_for_response=100)
        assert cm.accept_round(second.compile_id).seq == 2
        assert [r.seq for r in cm.list_fold_receipts()] == [1, 2]


def test_a_receipt_hashes_the_request_as_compiled_and_its_layout() -> None:
    with ContextManager.open(path=":memory:", counter=CharsCounter()) as cm:
        cm.set_system_prompt("Be brief.")
        cm.add_message("User", "hello")
        first = cm.compile(max_tokens=1000)
        sent = {
            "system": "Be brief.",
            "system_injections": [],
            "tools": [],
            "messages": [m.model_dump(mode="json") for m in first.messages],
        }
        first.messages.append(first.messages[0])  # the host's list: not what was compiled
        receipt = cm.accept_round(first.compile_id)
        text = json.dumps(sent, sort_keys=True, separators=(",", ":"))
        assert receipt.request_hash == hashlib.sha256(text.encode()).hexdigest()
        again = cm.accept_round(cm.compile(max_tokens=1000).compile_id)  # the same rows
        assert again.seq == 2 and again.layout_hash == receipt.layout_hash
        cm.add_message("User", "more")
        grown = cm.accept_round(cm.compile(max_tokens=1000).compile_id)
        assert grown.layout_hash != receipt.layout_hash
        assert grown.request_hash != receipt.request_hash


def test_an_unknown_compile_id_is_refused_naming_it_and_stores_nothing() -> None:
    with ContextManager.open(path=":memory:", counter=CharsCounter()) as cm:
        cm.add_message("User", "hello")
        dry = cm.compile(max_tokens=1000, dry_run=True)
        for unknown in ("no-such-compile", dry.compile_id):
            with pytest.raises(UnknownCompileError, match=unknown) as caught:
                cm.accept_round(unknown)
            assert caught.value.compile_id == unknown and caught.value.stale is False
            assert isinstance(caught.value, KeyError)
        assert cm.list_fold_receipts() == []


def test_a_superseded_compile_is_stale_and_a_repeated_acceptance_stores_nothing() -> None:
    with ContextManager.open(path=":memory:", counter=CharsCounter()) as cm:
        cm.add_message("User", "hello")
        first = cm.compile(max_tokens=1000)
        second = cm.compile(max_tokens=1000)
        with pytest.raises(UnknownCompileError, match="superseded") as caught:
            cm.accept_round(first.compile_id)
        assert caught.value.stale is True
        receipt = cm.accept_round(second.compile_id)
        assert cm.accept_round(second.compile_id) == receipt
        assert cm.list_fold_receipts() == [receipt]


def test_a_compile_of_another_branch_is_stale() -> None:
    with ContextManager.open(path=":memory:", counter=CharsCounter()) as cm:
        cm.add_message("User", "hello")
        result = cm.compile(max_tokens=1000)
        cm.fork("other")
        with pytest.raises(UnknownCompileError, match="branch") as caught:
            cm.accept_round(result.compile_id)
        assert caught.value.stale is True
        assert cm.list_fold_receipts() == []


def test_a_usage_that_is_not_token_counts_is_refused_naming_it() -> None:
    with ContextManager.open(path=":memory:", counter=CharsCounter()) as cm:
        cm.add_message("User", "hello")
        result = cm.compile(max_tokens=1000)
        with pytest.raises(ArgumentError, match=r"usage\['input_tokens'\]"):
            cm.accept_round(result.compile_id, usage={"input_tokens": -1})
        with pytest.raises(ArgumentError, match="usage"):
            cm.accept_round(result.compile_id, usage=["input_tokens"])  # type: ignore[arg-type]
        assert cm.list_fold_receipts() == []


def test_a_listener_hears_each_receipt_once_after_it_is_committed(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    heard: list[tuple[FoldReceipt, list[FoldReceipt]]] = []
    with ContextManager.open(path=":memory:", counter=CharsCounter()) as cm:

        def listen(receipt: FoldReceipt) -> None:
            heard.append((receipt, cm.list_fold_receipts()))  # outside the lock: may call

        stop = cm.on_fold_receipt(listen)
        cm.add_message("User", "hello")
        result = cm.compile(max_tokens=1000)
        with pytest.raises(UnknownCompileError):
            cm.accept_round("nope")
        assert heard == []
        store = cm.store
        real = store.append

        def failing(slot: str, body: Any) -> Any:
            if slot.endswith("fold-receipts"):
                raise OSError("disk gone")
            return real(slot, body)

        monkeypatch.setattr(store, "append", failing)
        with pytest.raises(OSError, match="disk gone"):
            cm.accept_round(result.compile_id)
        monkeypatch.undo()
        assert heard == [] and cm.list_fold_receipts() == []
        receipt = cm.accept_round(result.compile_id)
        cm.accept_round(result.compile_id)  # a duplicate: nothing new to tell
        assert heard == [(receipt, [receipt])]
        stop()
        cm.add_message("User", "again")
        cm.accept_round(cm.compile(max_tokens=1000).compile_id)
        assert len(heard) == 1


def test_a_failing_listener_does_not_undo_the_receipt() -> None:
    with ContextManager.open(path=":memory:", counter=CharsCounter()) as cm:

        def broken(receipt: FoldReceipt) -> None:
            raise RuntimeError("listener bug")

        cm.on_fold_receipt(broken)
        cm.add_message("User", "hello")
        receipt = cm.accept_round(cm.compile(max_tokens=1000).compile_id)
        assert cm.list_fold_receipts() == [receipt]


def test_a_receipt_body_round_trips_and_a_damaged_one_is_refused() -> None:
    with ContextManager.open(path=":memory:", counter=CharsCounter()) as cm:
        cm.add_message("User", "hello")
        receipt = cm.accept_round(cm.compile(max_tokens=1000).compile_id)
    assert FoldReceipt.from_body(json.loads(json.dumps(receipt.body()))) == receipt
    with pytest.raises(ValueError, match="unit"):
        FoldReceipt.from_body({**receipt.body(), "units": [["L1-0", 1]]})
