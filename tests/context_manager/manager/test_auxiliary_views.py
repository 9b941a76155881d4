"""Auxiliary views: another writer's messages merged read-only into a manager's record."""

from __future__ import annotations

from pathlib import Path

import pytest

from context_manager import CharsCounter, ConfigError, ContextManager, Store

COUNTER = CharsCounter()


def _texts(cm: ContextManager) -> list[str]:
    return [m.message.text for m in cm.get_messages()]


def test_a_view_merges_another_writers_rows_by_the_order_they_were_stored(
    tmp_path: Path,
) -> None:
    with Store.open(tmp_path / "shared.db") as store:
        beta = ContextManager.open(store=store, namespace="beta", isolate=True, counter=COUNTER)
        alpha = ContextManager.open(
            store=store,
            namespace="alpha",
            isolate=True,
            counter=COUNTER,
            auxiliary_views=["beta"],
        )
        mine = alpha.add_message("User", "a1")
        theirs = beta.add_message("User", "b1")
        alpha.add_message("Claude", "a2")
        beta.add_message("Claude", "b2")
        assert _texts(alpha) == ["a1", "b1", "a2", "b2"]
        assert _texts(beta) == ["b1", "b2"]  # beta's own record is only its own
        sent = alpha.compile(max_tokens=1000, reserve_for_response=0).messages
        assert [m.text for m in sent] == ["a1", "b1", "a2", "b2"]
        # read-only: the writer's rows change only through the writer
        with pytest.raises(ConfigError, match="beta"):
            alpha.edit_message(theirs, "changed")
        with pytest.raises(ConfigError, match="beta"):
            alpha.remove_message(theirs)
        with pytest.raises(ConfigError, match="beta"):
            alpha.remove_messages(mine, theirs)
        assert _texts(alpha) == ["a1", "b1", "a2", "b2"] and _texts(beta) == ["b1", "b2"]
        unedited = store.sequence
        beta.edit_message(theirs, "b1 edited")
        beta.remove_message(beta.get_messages()[-1].id)
        assert _texts(alpha) == ["a1", "b1 edited", "a2"]  # the view follows its writer
        first = alpha.get_message_at(theirs, sequence=unedited)  # time travel sees it too
        assert first is not None and first.text == "b1"
        alpha.close()
        beta.close()
    with Store.open(tmp_path / "shared.db") as store:
        again = ContextManager.open(
            store=store, namespace="alpha", isolate=True, counter=COUNTER, auxiliary_views=["beta"]
        )
        assert _texts(again) == ["a1", "b1 edited", "a2"]
        again.close()


def test_the_shared_slot_as_a_view_of_an_isolated_manager(tmp_path: Path) -> None:
    with Store.open(tmp_path / "shared.db") as store:
        common = ContextManager.open(store=store, counter=COUNTER)
        own = ContextManager.open(
            store=store, namespace="solo", isolate=True, counter=COUNTER, auxiliary_views=[None]
        )
        common.add_message("User", "shared")
        own.add_message("User", "private")
        assert _texts(own) == ["shared", "private"] and _texts(common) == ["shared"]
        common.close()
        own.close()


def test_views_that_name_nothing_else_are_refused(tmp_path: Path) -> None:
    with Store.open(tmp_path / "shared.db") as store:
        with pytest.raises(ConfigError, match="own messages"):
            ContextManager.open(
                store=store, namespace="alpha", isolate=True, auxiliary_views=["alpha"]
            )
        with pytest.raises(ConfigError, match="own messages"):
            ContextManager.open(store=store, auxiliary_views=[None])  # the shared slot is its own
        with pytest.raises(ConfigError, match="not one string"):
            ContextManager.open(store=store, auxiliary_views="beta")  # type: ignore[arg-type]
        with pytest.raises(ConfigError, match="namespace"):
            ContextManager.open(store=store, auxiliary_views=[""])


def test_memories_over_another_writers_rows_pass_the_audit_at_open(tmp_path: Path) -> None:
    from context_manager import ExtractiveSummarizer
    from context_manager.strategies.autobiographical import AutobiographicalStrategy
    from context_manager.topology import read_stored

    def alpha(store: Store) -> ContextManager:
        strategy = AutobiographicalStrategy(
            compression_model="extractive",
            target_chunk_tokens=60,
            summary_target_tokens=20,
            recent_window_tokens=100,
            l1_holdback_chunks=0,
        )
        return ContextManager.open(
            store=store,
            namespace="alpha",
            isolate=True,
            counter=COUNTER,
            strategy=strategy,
            summarizer=ExtractiveSummarizer(),
            auxiliary_views=["beta"],
        )

    with Store.open(tmp_path / "shared.db") as store:
        beta = ContextManager.open(store=store, namespace="beta", isolate=True, counter=COUNTER)
        cm = alpha(store)
        for i in range(30):
            writer = cm if i % 2 == 0 else beta
            writer.add_message("User", f"row {i} " + "the fox runs " * 3)
        cm.drain()
        records = read_stored(store, "alpha")
        theirs = {m.id for m in beta.get_messages()}
        l1s = [r.body for r in records.summaries if r.body["level"] == 1]
        assert any(theirs.intersection(b["source_ids"]) for b in l1s)  # memories span both
        cm.close()
        beta.close()
    with Store.open(tmp_path / "shared.db") as store:
        again = alpha(store)  # the default policy, reject, audits alpha's merged record
        assert again.topology_findings() == []
        again.close()
