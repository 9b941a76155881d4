"""``ContextManager.open(audit_only=True)``: the store is loaded and audited, its
findings readable, every read works and the manager never writes, on both engines."""

from __future__ import annotations

import hashlib
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from context_manager import (
    AuditOnlyError,
    ConfigError,
    ContextManager,
)
from context_manager.store import Store
from context_manager.topology import Kind
from tests.support.folding_store import open_folding
from tests.support.store_places import Place

SUMMARIES = "default/autobio:summaries"


def _open(store: Store, **options: Any) -> ContextManager:
    return open_folding(store=store, **options)


def _build(where: str, *, gap: bool) -> str | None:
    """40 messages with memories, 10 of them added after the last compression (work
    left for a writer); with ``gap``, an L1 that skips a message. Returns its id."""
    with Store.open(where) as store:
        with _open(store) as cm:
            for i in range(40):
                cm.add_message("User" if i % 2 == 0 else "Claude", f"m{i} " + "fox jumps " * 6)
            cm.drain()
            cm.compile(max_tokens=20_000, reserve_for_response=0)
            for i in range(10):
                cm.add_message("User", f"late {i} " + "dog sleeps " * 6)
        if not gap:
            return None
        item = next(it for it in store.items(SUMMARIES) if it.body["level"] == 1)
        ids = item.body["source_ids"]
        store.edit(SUMMARIES, item.id, {**item.body, "source_ids": [ids[0], *ids[2:]]})
        return str(item.body["id"])


def _state(where: str) -> tuple[int, dict[str, str], str | None]:
    """The store's sequence, its content digest and (for a file) its bytes' digest."""
    with Store.open(where) as store:
        seq, digest = store.sequence, store.content_digest()
    raw = None
    if not where.startswith("postgresql://"):
        raw = hashlib.sha256(Path(where).read_bytes()).hexdigest()
    return seq, digest, raw


READS: list[Callable[[ContextManager], object]] = [
    lambda cm: cm.get_messages(),
    lambda cm: cm.get_message_count(),
    lambda cm: cm.stats(),
    lambda cm: cm.context_log(),
    lambda cm: cm.preview_context(max_tokens=2_000, reserve_for_response=0),
    lambda cm: cm.search_summaries("fox"),
    lambda cm: cm.get_max_summary_level(),
    lambda cm: cm.pending_work(),
    lambda cm: cm.is_ready(),
    lambda cm: cm.get_window_messages(),
    lambda cm: cm.get_channel_token_stats(),
    lambda cm: cm.get_channel_message_counts(),
    lambda cm: cm.list_pins(),
    lambda cm: cm.list_branches(),
    lambda cm: cm.compression_holds(),
    lambda cm: cm.get_render_stats(),
]

WRITES: dict[str, Callable[[ContextManager, str], object]] = {
    "add_message": lambda cm, m: cm.add_message("User", "one more"),
    "edit_message": lambda cm, m: cm.edit_message(m, "changed"),
    "remove_message": lambda cm, m: cm.remove_message(m),
    "compile": lambda cm, m: cm.compile(max_tokens=2_000, reserve_for_response=0),
    "tick": lambda cm, m: cm.tick(),
    "pin_range": lambda cm, m: cm.pin_range(m, m),
    "hold_compression": lambda cm, m: cm.hold_compression([m]),
    "present_rows": lambda cm, m: cm.present_rows([m]),
    "set_system_prompt": lambda cm, m: cm.set_system_prompt("be brief"),
    "fork": lambda cm, m: cm.fork("other"),
}


def test_an_audit_only_manager_reads_everything_and_writes_nothing(place: Place) -> None:
    where = place("s")
    name = _build(where, gap=True)
    before = _state(where)
    with Store.open(where) as store:
        cm = _open(store, audit_only=True)  # the default policy, reject, would refuse
        assert cm.audit_only
        found = cm.topology_findings()
        assert [(f.id, f.kind) for f in found] == [(name, Kind.NON_CONTIGUOUS)]
        assert cm.pending_work()  # there is work, and the manager leaves it undone
        first = cm.get_messages()[0].id
        for read in READS:
            read(cm)
        for operation, write in WRITES.items():
            with pytest.raises(AuditOnlyError) as refused:
                write(cm, first)
            assert refused.value.operation == operation
            assert "audit_only" in str(refused.value)
        with pytest.raises(AuditOnlyError, match="preview_context"):
            cm.compile(max_tokens=2_000, reserve_for_response=0)
        with pytest.raises(AuditOnlyError, match="tick"):
            cm.drain()
        assert len(cm.get_messages()) == 50
        cm.close()
    assert _state(where) == before


def test_a_sound_store_opened_audit_only_has_no_findings_and_stays_as_it_was(
    tmp_path: Path,
) -> None:
    where = str(tmp_path / "s.db")
    _build(where, gap=False)
    before = _state(where)
    with Store.open(where) as store, _open(store, audit_only=True) as cm:
        assert cm.topology_findings() == []
        assert cm.preview_context(max_tokens=2_000, reserve_for_response=0).fits
    assert _state(where) == before
    with Store.open(where) as store, _open(store) as cm:  # not audit_only: empty too
        assert not cm.audit_only and cm.topology_findings() == []


@pytest.mark.parametrize(
    ("options", "named"),
    [({"topology_policy": "repair"}, "topology_policy"), ({"auto_tick": True}, "auto_tick")],
)
def test_audit_only_with_an_option_that_writes_is_refused_naming_it(
    tmp_path: Path, options: dict[str, Any], named: str
) -> None:
    with pytest.raises(ConfigError, match=named) as refused:
        ContextManager.open(path=tmp_path / "s.db", audit_only=True, **options)
    assert "audit_only" in str(refused.value)
    assert not (tmp_path / "s.db").exists()


def test_a_store_file_opened_audit_only_by_path_keeps_its_bytes(tmp_path: Path) -> None:
    where = str(tmp_path / "s.db")
    name = _build(where, gap=True)
    before = _state(where)
    with open_folding(path=where, audit_only=True) as cm:
        assert [f.id for f in cm.topology_findings()] == [name]
        for read in READS:
            read(cm)
    assert _state(where) == before
    assert sorted(p.name for p in tmp_path.iterdir()) == ["s.db"]
