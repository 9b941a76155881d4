"""``ctxfold audit`` and ``ctxfold repair`` (issue 17): a real store with memories, a
planted corruption found, planned without a write, repaired on a copy that replaces
the store only once it audits clean; a store a running agent holds is refused."""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from typer.testing import CliRunner, Result

from context_manager import (
    ArgumentError,
    CharsCounter,
    ContextManager,
    StoreTopologyError,
)
from context_manager.cli import RUNTIME_ERROR, USAGE_ERROR, app
from context_manager.store import Store
from context_manager.topology import (
    Kind,
    Op,
    Raw,
    StoredRecords,
    audit,
    audit_store,
    plan_repair,
    read_stored,
    repair_store,
)
from tests.support.folding_store import open_folding

SUMMARIES = "default/autobio:summaries"
CHUNKS = "default/autobio:chunks"


def _manager(path: Path, **options: Any) -> ContextManager:
    return open_folding(path=path, **options)


@pytest.fixture(scope="module")
def built(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A store of 130 messages with L1 to L4 memories (built once)."""
    path = tmp_path_factory.mktemp("base") / "agent.db"
    with _manager(path) as cm:
        for i in range(130):
            who = "User" if i % 2 == 0 else "Claude"
            cm.add_message(who, f"message {i}: " + "the quick brown fox jumps over the dog " * 3)
        cm.drain()
        cm.compile(max_tokens=20_000, reserve_for_response=0)
    return path


@pytest.fixture
def store(built: Path, tmp_path: Path) -> Path:
    """A copy of the built store, to corrupt."""
    path = tmp_path / "agent.db"
    shutil.copyfile(built, path)
    return path


def _run(args: list[str]) -> Result:
    result = CliRunner().invoke(app, args, env={"COLUMNS": "200"})
    assert result.exception is None or isinstance(result.exception, SystemExit), (
        f"{args} raised {result.exception!r}\n{result.output}"
    )
    assert "Traceback" not in result.output
    return result


def _digest(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def _files(folder: Path) -> dict[str, str]:
    return {p.name: _digest(p) for p in sorted(folder.iterdir()) if p.is_file()}


def _bodies(path: Path, slot: str) -> list[tuple[str, Any]]:
    with Store.open(path) as db:
        return [(it.id, it.body) for it in db.items(slot)]


def _by_id(path: Path) -> dict[str, tuple[str, dict[str, Any]]]:
    """Memory id -> (item, body), as stored."""
    return {body["id"]: (item, body) for item, body in _bodies(path, SUMMARIES)}


def _edit(db: Store, slot: str, item: str, **changes: Any) -> None:
    current = db.item(slot, item)
    assert current is not None
    db.edit(slot, item, {**current.body, **changes})


def _plant_gap(path: Path) -> tuple[str, str]:
    """An L1 that skips the middle message of its chunk (a writer that lost one id);
    returns its id and the message skipped."""
    memories = _by_id(path)
    name = next(k for k, (_, b) in memories.items() if b["level"] == 1 and b["parent_id"])
    item, body = memories[name]
    ids = body["source_ids"]
    skipped = ids[len(ids) // 2]
    with Store.open(path) as db:
        _edit(db, SUMMARIES, item, source_ids=[i for i in ids if i != skipped])
    return name, skipped


def _compiles(path: Path) -> list[tuple[str, Any]]:
    """Open the store with a manager, compile and compress; the messages it holds."""
    with _manager(path) as cm:
        cm.compile(max_tokens=20_000, reserve_for_response=0)
        cm.drain()
        assert cm.compile(max_tokens=3_000, reserve_for_response=0).messages
    return _bodies(path, "messages")


# --------------------------------------------------------------------- audit
def test_a_clean_store_audits_clean(store: Path) -> None:
    result = _run(["audit", str(store)])
    assert result.exit_code == 0, result.output
    assert "clean: every memory covers a contiguous run of messages" in result.stdout
    assert "130 messages" in result.stdout and "L4: 1" in result.stdout
    data = json.loads(_run(["audit", str(store), "--json"]).stdout)
    assert data["clean"] is True and data["findings"] == [] and data["messages"] == 130
    assert _run(["repair", str(store)]).exit_code == 0
    assert "nothing to repair" in _run(["repair", str(store), "--apply"]).stdout
    assert sorted(p.name for p in store.parent.iterdir()) == ["agent.db"]  # no backup made


def test_audit_finds_a_planted_non_contiguous_summary_and_writes_nothing(store: Path) -> None:
    name, skipped = _plant_gap(store)
    before = _files(store.parent)
    result = _run(["audit", str(store)])
    assert result.exit_code == RUNTIME_ERROR, result.output
    line = next(x for x in result.stdout.splitlines() if x.strip().startswith(name))
    assert "(L1, item" in line and "non_contiguous" in line and skipped in line
    assert "positions" in line
    data = json.loads(_run(["audit", str(store), "--json"]).stdout)
    assert data["clean"] is False
    (finding,) = data["findings"]
    assert finding["id"] == name and finding["level"] == 1 and finding["kind"] == "non_contiguous"
    assert finding["first"] and finding["last"] and len(finding["positions"]) == 2
    assert _files(store.parent) == before  # audited on a copy: not a byte written, no litter


def test_repair_without_apply_prints_the_plan_and_changes_nothing(store: Path) -> None:
    name, _ = _plant_gap(store)
    before = _files(store.parent)
    result = _run(["repair", str(store)])
    assert result.exit_code == RUNTIME_ERROR, result.output
    assert f"drop {name} " in result.stdout and "reopen chunk c-" in result.stdout
    assert "it is above " + name in result.stdout  # its parent goes with it
    assert "dry run: nothing was changed" in result.stdout
    plan = json.loads(_run(["repair", str(store), "--json"]).stdout)
    assert plan["applied"] is False and plan["backup"] is None
    assert {a["op"] for a in plan["actions"]} >= {"drop", "clear_parent", "reopen_chunk"}
    assert _files(store.parent) == before


def test_repair_apply_fixes_it_on_a_copy_and_keeps_the_original(store: Path) -> None:
    messages = _bodies(store, "messages")
    name, _ = _plant_gap(store)
    corrupted = _digest(store)
    plan = repair_store(store).actions
    dropped = {a.id for a in plan if a.op is Op.DROP}
    (reopened,) = [a.id for a in plan if a.op is Op.REOPEN_CHUNK]
    result = _run(["repair", str(store), "--apply"])
    assert result.exit_code == 0, result.output
    backup = store.with_name("agent.db.bak")
    assert f"the original is kept as {backup}" in " ".join(result.stdout.split())
    assert _digest(backup) == corrupted
    assert sorted(p.name for p in store.parent.iterdir()) == ["agent.db", "agent.db.bak"]
    again = _run(["audit", str(store)])
    assert again.exit_code == 0 and "clean" in again.stdout, again.output
    assert name not in _by_id(store)
    # the strategy takes the repaired store up: it compiles, and remembers the
    # reopened chunk again, soundly
    assert _compiles(store) == messages
    assert _by_id(store).keys() >= _by_id(backup).keys() - dropped
    chunk = next(body for _, body in _bodies(store, CHUNKS) if body["id"] == reopened)
    assert chunk["compressed"] and chunk["summary_id"] not in (None, name)
    assert audit_store(store).findings == []


def test_a_repaired_copy_that_does_not_audit_clean_never_replaces_the_store(
    store: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import context_manager.topology.store_files as topology

    name, _ = _plant_gap(store)
    before = _files(store.parent)
    plan = topology.plan_repair
    monkeypatch.setattr(topology, "plan_repair", lambda f, r: plan(f, r)[1:])  # loses a drop
    result = _run(["repair", str(store), "--apply"])
    assert result.exit_code == RUNTIME_ERROR, result.output
    assert "the repaired copy still has findings; the store was not changed" in result.stdout
    assert _files(store.parent) == before  # no backup, no litter, not a byte changed
    assert {f.id for f in repair_store(store, apply=True).after} == {name}


def test_a_second_repair_keeps_the_first_backup(store: Path) -> None:
    _plant_gap(store)
    assert _run(["repair", str(store), "--apply"]).exit_code == 0
    first = _digest(store.with_name("agent.db.bak"))
    _plant_gap(store)
    assert _run(["repair", str(store), "--apply"]).exit_code == 0
    assert _digest(store.with_name("agent.db.bak")) == first
    assert store.with_name("agent.db.bak.1").is_file()


def test_an_l2_over_children_that_are_not_adjacent(store: Path) -> None:
    memories = _by_id(store)
    name = next(
        k for k, (_, b) in memories.items() if b["level"] == 2 and len(b["source_ids"]) == 3
    )
    item, body = memories[name]
    left_out = body["source_ids"][1]
    with Store.open(store) as db:
        _edit(db, SUMMARIES, item, source_ids=[body["source_ids"][0], body["source_ids"][2]])
    found = {(f.id, f.kind) for f in audit_store(store).findings}
    assert found == {(name, Kind.NON_CONTIGUOUS), (left_out, Kind.DANGLING_PARENT)}
    result = repair_store(store, apply=True)
    assert result.applied and result.after == []
    ops = {(a.op, a.id) for a in result.actions}
    assert (Op.DROP, name) in ops and (Op.CLEAR_PARENT, left_out) in ops
    assert audit_store(store).findings == []
    _compiles(store)


# ---------------------------------------------------------------- the lock
def test_both_commands_refuse_a_store_a_running_agent_holds(store: Path) -> None:
    _plant_gap(store)
    with _manager(store, topology_policy="ignore"):  # an agent running on it as it is
        before = _files(store.parent)
        for args in (["audit"], ["repair"], ["repair", "--apply"], ["audit", "--json"]):
            result = _run([*args, str(store)])
            assert result.exit_code == USAGE_ERROR, (args, result.output)
            assert "held by a running agent" in result.stderr
            assert "writer lock" in result.stderr and "stop the agent" in result.stderr
            assert result.stdout == ""
        assert _files(store.parent) == before
    assert _run(["audit", str(store)]).exit_code == RUNTIME_ERROR  # stopped: audited


def test_a_store_held_under_another_name_is_refused_too(store: Path) -> None:
    link = store.with_name("link.db")
    link.symlink_to(store)
    with _manager(store):
        assert _run(["audit", str(link)]).exit_code == USAGE_ERROR
    with Store.open(link):
        assert "held by a running agent" in _run(["repair", str(store), "--apply"]).stderr


def test_a_crashed_writer_s_log_is_audited_repaired_and_kept_with_the_backup(
    store: Path,
) -> None:
    name, _ = _plant_gap(store)  # corrupt, then let a writer die with a change in its log
    memories = _by_id(store)
    script = (
        "import os, sys\n"
        "from context_manager.store import Store\n"
        "db = Store.open(sys.argv[1])\n"
        "item = db.item(sys.argv[2], sys.argv[3])\n"
        "db.edit(sys.argv[2], sys.argv[3], {**item.body, 'content': 'rewritten by the crash'})\n"
        "os._exit(0)\n"
    )
    other = next(k for k, (_, b) in memories.items() if b["level"] == 1 and k != name)
    subprocess.run(
        [sys.executable, "-c", script, str(store), SUMMARIES, memories[other][0]], check=True
    )
    wal = Path(f"{store}-wal")
    assert wal.stat().st_size > 0
    assert {f.id for f in audit_store(store).findings} == {name}
    result = repair_store(store, apply=True)
    assert result.applied and result.backup == f"{store}.bak"
    assert not wal.exists() and not Path(f"{store}-shm").exists()
    assert Path(f"{store}.bak-wal").is_file()  # the original's log went with it
    assert _by_id(store)[other][1]["content"] == "rewritten by the crash"
    kept = audit_store(result.backup)
    assert [f.id for f in kept.findings] == [name]
    assert _by_id(Path(result.backup))[other][1]["content"] == "rewritten by the crash"
    assert audit_store(store).findings == []


# ------------------------------------------------------------ usage errors
def test_paths_that_are_not_stores_are_usage_errors(tmp_path: Path, store: Path) -> None:
    import sqlite3

    text = tmp_path / "notes.txt"
    text.write_text("not a database " * 100)
    other = tmp_path / "other.sqlite"
    with sqlite3.connect(other) as conn:
        conn.execute("CREATE TABLE t (x)")
    conn.close()
    cases = [
        ([str(tmp_path / "missing.db")], "is not a file"),
        ([str(tmp_path)], "is not a file"),
        ([str(text)], "is not a SQLite database"),
        ([str(other)], "is a SQLite database but not a store"),
        ([str(store), "--namespace", "nope"], "no namespace 'nope'; its namespaces: default"),
        ([str(store), "--branch", "nope"], "unknown branch 'nope'"),
    ]
    for command in ("audit", "repair"):
        for args, message in cases:
            result = _run([command, *args])
            assert result.exit_code == USAGE_ERROR, (command, args, result.output)
            assert message in result.stderr, (command, args, result.stderr)


def test_help_documents_the_exit_statuses(store: Path) -> None:
    for command, phrase in (
        ("audit", "1 findings"),
        ("repair", "1 a repair is planned but not applied"),
    ):
        text = " ".join(_run([command, "--help"]).output.split())
        assert phrase in text and "a running agent holds it (its lock)" in text
        assert "<bool>" not in text


def test_another_branch_is_audited_and_repaired_and_the_current_one_stays(store: Path) -> None:
    with Store.open(store) as db:
        db.fork("side")
        db.switch_branch("main")
    with Store.open(store, branch="side") as db:
        name = next(it.body["id"] for it in db.items(SUMMARIES) if it.body["level"] == 1)
        item = next(it.id for it in db.items(SUMMARIES) if it.body["id"] == name)
        _edit(db, SUMMARIES, item, content="  ")
        db.switch_branch("main")
    assert audit_store(store).findings == []
    side = audit_store(store, branch="side")
    assert side.branch == "side" and (name, Kind.EMPTY) in {(f.id, f.kind) for f in side.findings}
    result = repair_store(store, apply=True, branch="side")
    assert result.applied and result.after == []
    assert audit_store(store, branch="side").findings == []
    with Store.open(store) as db:
        assert db.branch == "main"


# ------------------------------------------------------ the pure functions
def _l1(item: str, name: str, ids: list[str], parent: str | None = None) -> Raw:
    body = {"id": name, "level": 1, "content": "x", "tokens": 1, "source_ids": ids}
    return Raw(item, {**body, "first": ids[0], "last": ids[-1], "parent_id": parent})


def _l2(item: str, name: str, children: list[str], first: str, last: str) -> Raw:
    body = {"id": name, "level": 2, "content": "y", "tokens": 1, "source_ids": children}
    return Raw(item, {**body, "first": first, "last": last, "parent_id": None})


def test_out_of_order_and_repeated_messages_are_not_a_run() -> None:
    records = StoredRecords(
        messages=("a", "b", "c", "d"),
        summaries=(_l1("1", "L1-0", ["b", "a"]), _l1("2", "L1-1", ["c", "d", "d"])),
    )
    details = {f.id: f.detail for f in audit(records)}
    assert details == {
        "L1-0": "names its messages out of order (positions 1, 0)",
        "L1-1": "names d more than once",
    }


def test_a_child_two_parents_list_keeps_the_one_its_pointer_names() -> None:
    records = StoredRecords(
        messages=("a", "b"),
        summaries=(
            _l1("1", "L1-0", ["a"], "L2-2"),
            _l1("2", "L1-1", ["b"], "L2-2"),
            _l2("3", "L2-2", ["L1-0", "L1-1"], "a", "b"),
            _l2("4", "L2-3", ["L1-0", "L1-1"], "a", "b"),
        ),
    )
    findings = audit(records)
    assert {(f.id, f.kind) for f in findings} == {
        ("L1-0", Kind.SHARED_CHILD),
        ("L1-1", Kind.SHARED_CHILD),
    }
    assert [(a.op, a.id) for a in plan_repair(findings, records)] == [(Op.DROP, "L2-3")]


def test_pointers_ranges_and_chunk_records_are_fixed_without_dropping_sound_memories() -> None:
    records = StoredRecords(
        messages=("a", "b", "c", "d", "e"),
        summaries=(
            _l1("1", "L1-0", ["a", "b"]),  # L2-2 lists it: its pointer should say so
            Raw("2", {**_l1("2", "L1-1", ["c"], "L2-2").body, "last": "e"}),  # wrong range
            _l2("3", "L2-2", ["L1-0", "L1-1"], "a", "c"),
            _l1("4", "L1-4", ["d", "e"]),
        ),
        chunks=(
            Raw("10", {"id": "c-0", "source_ids": ["a", "b"], "compressed": True,
                       "summary_id": "L1-0"}),
            Raw("11", {"id": "c-1", "source_ids": ["c"], "compressed": True,
                       "summary_id": "L1-1"}),
            Raw("12", {"id": "c-2", "source_ids": ["e", "d"], "compressed": True,
                       "summary_id": "L1-4"}),
            Raw("13", {"id": "c-3", "source_ids": ["a"], "compressed": True,
                       "summary_id": "L1-9"}),
        ),
        chunk_counter=4,
    )  # fmt: skip
    findings = audit(records)
    assert [(f.id, f.kind) for f in findings] == [
        ("L1-0", Kind.UNLINKED_CHILD),
        ("L1-1", Kind.WRONG_RANGE),
        ("c-2", Kind.NON_CONTIGUOUS_CHUNK),
        ("c-3", Kind.ORPHAN_CHUNK),
    ]
    plan = plan_repair(findings, records)
    assert [(a.op, a.id) for a in plan] == [
        (Op.DROP, "L1-4"),  # its chunk record is split
        (Op.SET_PARENT, "L1-0"),
        (Op.FIX_RANGE, "L1-1"),
        (Op.SPLIT_CHUNK, "c-2"),
        (Op.REOPEN_CHUNK, "c-3"),
    ]
    split = plan[3]
    assert split.runs == (("d", "e"),) and split.new_ids == ()
    assert (plan[1].parent, plan[2].first, plan[2].last) == ("L2-2", "c", "c")


def test_a_split_chunk_record_takes_new_ids_and_the_counter_moves_on(store: Path) -> None:
    with Store.open(store) as db:
        chunk = db.items(CHUNKS)[3]
        other = db.items(CHUNKS)[5]
        ids = chunk.body["source_ids"]
        _edit(db, CHUNKS, chunk.id, source_ids=[ids[0], *other.body["source_ids"]])
        counter = db.get("default/autobio:chunk-counter")
    result = repair_store(store, apply=True)
    assert result.applied and result.after == []
    (split,) = [a for a in result.actions if a.op is Op.SPLIT_CHUNK]
    assert split.new_ids == (f"c-{counter}",)
    with Store.open(store) as db:
        assert db.get("default/autobio:chunk-counter") == counter + 1
        bodies = {it.body["id"]: it.body for it in db.items(CHUNKS)}
    assert bodies[chunk.body["id"]]["source_ids"] == [ids[0]]
    assert bodies[f"c-{counter}"] == {
        "id": f"c-{counter}",
        "source_ids": other.body["source_ids"],
        "compressed": False,
        "summary_id": None,
    }
    _compiles(store)


# -------------------------------------------------- any planted corruptions
def _full_l2s(path: Path) -> list[tuple[str, dict[str, Any]]]:
    """L2 memories over three L1s, in order, as ``(item, body)``."""
    return [
        (item, body)
        for item, body in _by_id(path).values()
        if body["level"] == 2 and len(body["source_ids"]) == 3
    ]


Plant = Callable[[Store, list[tuple[str, dict[str, Any]]], dict[str, Any]], set[tuple[str, Kind]]]


def _child(memories: dict[str, Any], l2: tuple[str, dict[str, Any]], k: int) -> tuple[str, Any]:
    return memories[l2[1]["source_ids"][k]]  # type: ignore[no-any-return]


def _gap_l1(db: Store, l2s: Any, memories: Any) -> set[tuple[str, Kind]]:
    item, body = _child(memories, l2s[0], 1)
    db.edit(SUMMARIES, item, {**body, "source_ids": [body["source_ids"][i] for i in (0, 2, 3)]})
    return {(body["id"], Kind.NON_CONTIGUOUS)}


def _wrong_range(db: Store, l2s: Any, memories: Any) -> set[tuple[str, Kind]]:
    item, body = _child(memories, l2s[0], 0)
    db.edit(SUMMARIES, item, {**body, "last": body["first"]})
    return {(body["id"], Kind.WRONG_RANGE)}


def _gap_l2(db: Store, l2s: Any, memories: Any) -> set[tuple[str, Kind]]:
    item, body = l2s[1]
    children = body["source_ids"]
    db.edit(SUMMARIES, item, {**body, "source_ids": [children[0], children[2]]})
    return {(body["id"], Kind.NON_CONTIGUOUS), (children[1], Kind.DANGLING_PARENT)}


def _missing_message(db: Store, l2s: Any, memories: Any) -> set[tuple[str, Kind]]:
    item, body = _child(memories, l2s[4], 2)
    ids = list(body["source_ids"])
    ids[1] = "999999"
    db.edit(SUMMARIES, item, {**body, "source_ids": ids})
    return {(body["id"], Kind.MISSING_MESSAGES)}


def _empty(db: Store, l2s: Any, memories: Any) -> set[tuple[str, Kind]]:
    item, body = _child(memories, l2s[2], 0)
    db.edit(SUMMARIES, item, {**body, "content": ""})
    return {(body["id"], Kind.EMPTY), (l2s[2][1]["id"], Kind.MISSING_CHILD)}


def _split_chunk(db: Store, l2s: Any, memories: Any) -> set[tuple[str, Kind]]:
    item, body = _child(memories, l2s[2], 2)
    chunk = next(c for c in db.items(CHUNKS) if c.body["summary_id"] == body["id"])
    ids = [body["source_ids"][i] for i in (0, 2, 3)]
    db.edit(SUMMARIES, item, {**body, "source_ids": ids})
    db.edit(CHUNKS, chunk.id, {**chunk.body, "source_ids": ids})
    return {(body["id"], Kind.NON_CONTIGUOUS), (chunk.body["id"], Kind.NON_CONTIGUOUS_CHUNK)}


def _duplicate(db: Store, l2s: Any, memories: Any) -> set[tuple[str, Kind]]:
    _, body = _child(memories, l2s[3], 0)
    db.append(SUMMARIES, {**body, "content": body["content"] + " (written twice)"})
    return {(body["id"], Kind.DUPLICATE_ID)}


def _vanished(db: Store, l2s: Any, memories: Any) -> set[tuple[str, Kind]]:
    item, body = _child(memories, l2s[3], 1)
    db.redact(SUMMARIES, item)
    chunk = next(c for c in db.items(CHUNKS) if c.body["summary_id"] == body["id"])
    return {(chunk.body["id"], Kind.ORPHAN_CHUNK), (l2s[3][1]["id"], Kind.MISSING_CHILD)}


def _dangling(db: Store, l2s: Any, memories: Any) -> set[tuple[str, Kind]]:
    item, body = _child(memories, l2s[4], 0)
    db.edit(SUMMARIES, item, {**body, "parent_id": "L2-99999"})
    return {(body["id"], Kind.DANGLING_PARENT)}


def _shared(db: Store, l2s: Any, memories: Any) -> set[tuple[str, Kind]]:
    _, body = l2s[5]
    db.append(SUMMARIES, {**body, "id": "L2-90000", "content": "a merge written twice"})
    return {(child, Kind.SHARED_CHILD) for child in body["source_ids"]}


def _unlinked(db: Store, l2s: Any, memories: Any) -> set[tuple[str, Kind]]:
    item, body = _child(memories, l2s[6], 0)
    db.edit(SUMMARIES, item, {**body, "parent_id": None})
    return {(body["id"], Kind.UNLINKED_CHILD)}


def _malformed(db: Store, l2s: Any, memories: Any) -> set[tuple[str, Kind]]:
    db.append(SUMMARIES, {"id": "L1-90001", "level": 1, "content": "half written"})
    return {("L1-90001", Kind.MALFORMED)}


PLANTS: dict[str, Plant] = {
    f.__name__.lstrip("_"): f
    for f in (
        _gap_l1,
        _wrong_range,
        _gap_l2,
        _missing_message,
        _empty,
        _split_chunk,
        _duplicate,
        _vanished,
        _dangling,
        _shared,
        _unlinked,
        _malformed,
    )
}


@pytest.fixture(scope="module")
def pristine(built: Path) -> Iterator[Path]:
    """The built store's bytes in a folder of their own."""
    with tempfile.TemporaryDirectory() as folder:
        path = Path(folder) / "agent.db"
        shutil.copyfile(built, path)
        assert len(_full_l2s(path)) >= 7, "the built store should hold seven full L2s"
        yield path


@settings(
    max_examples=12,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture],
)
@given(st.sets(st.sampled_from(sorted(PLANTS)), min_size=1))
def test_any_planted_corruptions_are_found_and_repaired_to_a_clean_store(
    pristine: Path, chosen: set[str]
) -> None:
    messages = _bodies(pristine, "messages")
    with tempfile.TemporaryDirectory() as folder:
        path = Path(folder) / "agent.db"
        shutil.copyfile(pristine, path)
        l2s, memories = _full_l2s(path), _by_id(path)
        planted: set[tuple[str, Kind]] = set()
        with Store.open(path) as db, db.transaction():
            for name in sorted(chosen):
                planted |= PLANTS[name](db, l2s, memories)
        found = {(f.id, f.kind) for f in audit_store(path).findings}
        assert planted <= found, (chosen, planted - found)
        result = repair_store(path, apply=True)
        assert result.applied, [f.describe() for f in result.after]
        assert result.messages_after == result.messages_before == len(messages)
        assert audit_store(path).findings == []
        assert Path(f"{path}.bak").is_file()
        assert _compiles(path) == messages


def test_read_stored_keeps_what_the_strategy_would_skip(store: Path) -> None:
    memories = _by_id(store)
    with Store.open(store) as db:
        item, body = next(iter(memories.values()))
        db.edit(SUMMARIES, item, {**body, "content": ""})
        records = read_stored(db)
    assert len(records.summaries) == len(memories) and len(records.messages) == 130
    assert records.message_slot == "messages" and records.chunk_counter == len(records.chunks)
    assert os.path.basename(store) == "agent.db"


# ------------------------------------------------------------------ at open
def test_a_broken_tree_is_refused_at_open_and_nothing_is_written(store: Path) -> None:
    name, _ = _plant_gap(store)
    before = _digest(store)
    with pytest.raises(StoreTopologyError) as caught:
        _manager(store, topology_policy="reject")
    said = str(caught.value)
    assert name in said and "non_contiguous" in said
    assert f"ctxfold repair {store} --apply" in said and "topology_policy='repair'" in said
    assert [(f.id, f.kind) for f in caught.value.findings] == [(name, Kind.NON_CONTIGUOUS)]
    assert _digest(store) == before  # refused before the strategy read or wrote it
    with Store.open(store):  # and the writer lock was released
        pass


def test_repair_at_open_drops_the_broken_memory_and_the_store_audits_clean(
    store: Path, caplog: pytest.LogCaptureFixture
) -> None:
    messages = _bodies(store, "messages")
    name, _ = _plant_gap(store)
    with caplog.at_level("WARNING"), _manager(store, topology_policy="repair") as cm:
        assert name not in {s.id for s in cm.strategy.summaries.values()}  # type: ignore[attr-defined]
        cm.drain()
        assert cm.compile(max_tokens=3_000, reserve_for_response=0).messages
    assert any(f"drop {name}" in r.getMessage() for r in caplog.records)
    assert audit_store(store).findings == []
    assert _bodies(store, "messages") == messages  # no message touched
    with _manager(store, topology_policy="reject"):  # sound now
        pass
    assert _compiles(store) == messages


def test_ignore_opens_a_broken_tree_as_it_is(store: Path) -> None:
    _plant_gap(store)
    before = audit_store(store).findings
    with _manager(store, topology_policy="ignore") as cm:
        assert cm.get_messages()
    assert [f.id for f in audit_store(store).findings] == [f.id for f in before]


def test_an_unknown_topology_policy_is_refused_naming_it(tmp_path: Path) -> None:
    with pytest.raises(ArgumentError, match="topology_policy"):
        _manager(tmp_path / "s.db", topology_policy="fix")
    assert not (tmp_path / "s.db").exists()  # refused before anything was opened


# ------------------------------------------- the audit judges what the strategy writes
def _presented_store(path: Path, skipped: int = 9) -> tuple[list[str], str]:
    """A store whose agent was presented every message but one (``skipped``, added by
    another writer and never shown): chunks close over the window, across that row.
    Returns the messages and the row never presented."""
    with _manager(path, topology_policy="ignore") as cm:
        cm.present_rows([])
        ids: list[str] = []
        for i in range(60):
            who = "User" if i % 2 == 0 else "Claude"
            ids.append(cm.add_message(who, f"row {i}: " + "the quick brown fox jumps " * 3))
            if i != skipped:
                cm.present_rows([ids[-1]])
        cm.drain()
    return ids, ids[skipped]


def test_a_chunk_over_presented_rows_across_a_row_never_presented_is_sound(
    tmp_path: Path,
) -> None:
    path = tmp_path / "agent.db"
    ids, unshown = _presented_store(path)
    with Store.open(path) as db:
        records = read_stored(db)
    over = [c.body for c in records.chunks if ids[8] in c.body["source_ids"]]
    assert over and ids[10] in over[0]["source_ids"]  # the chunk spans the row unshown
    assert unshown not in over[0]["source_ids"]
    assert records.window is not None and unshown not in records.window
    assert audit(records) == []
    with _manager(path) as cm:  # the default policy, reject, opens it
        assert unshown not in [m.id for m in cm.get_window_messages()]


def test_a_gap_in_the_window_is_still_a_finding(tmp_path: Path) -> None:
    path = tmp_path / "agent.db"
    _presented_store(path)
    name, skipped = _plant_gap(path)
    with pytest.raises(StoreTopologyError) as caught:
        _manager(path)
    assert [(f.id, f.kind) for f in caught.value.findings] == [(name, Kind.NON_CONTIGUOUS)]
    assert skipped in str(caught.value)


def test_the_window_read_is_the_rows_the_record_holds_in_window_order() -> None:
    records = StoredRecords(
        messages=("a", "b", "x", "c"),
        summaries=(
            Raw(
                "1",
                {
                    "id": "L1-0",
                    "level": 1,
                    "content": "x",
                    "tokens": 1,
                    "source_ids": ["a", "b", "c"],
                    "first": "a",
                    "last": "c",
                },
            ),
        ),
        window=("a", "b", "c"),
    )
    assert audit(records) == []  # x was never shown: a, b, c is one run of the window
    moved = StoredRecords(records.messages, records.summaries, window=("a", "c", "b"))
    assert [(f.id, f.kind) for f in audit(moved)] == [("L1-0", Kind.NON_CONTIGUOUS)]
    record = StoredRecords(records.messages, records.summaries)  # no window: the record
    assert [(f.id, f.kind) for f in audit(record)] == [("L1-0", Kind.NON_CONTIGUOUS)]


def _l1(item: str, name: str, ids: list[str], parent: str | None = None) -> Raw:
    return Raw(
        item,
        {
            "id": name,
            "level": 1,
            "content": "x",
            "tokens": 1,
            "source_ids": ids,
            "first": ids[0],
            "last": ids[-1],
            "parent_id": parent,
        },
    )


def test_a_memory_set_aside_when_memories_were_adopted_is_not_a_finding() -> None:
    # L1-1 overlaps L1-2, which was adopted with a chunk record; L1-1 was not
    records = StoredRecords(
        messages=tuple("abcdefgh"),
        summaries=(
            _l1("1", "L1-0", list("abc")),
            _l1("2", "L1-1", list("de")),
            _l1("3", "L1-2", list("defgh")),
        ),
        chunks=(
            Raw(
                "4",
                {"id": "c-0", "source_ids": list("abc"), "compressed": True, "summary_id": "L1-0"},
            ),
            Raw(
                "5",
                {
                    "id": "c-1",
                    "source_ids": list("defgh"),
                    "compressed": True,
                    "summary_id": "L1-2",
                },
            ),
        ),
    )
    assert audit(records) == []


def test_an_l1_no_chunk_record_names_over_messages_none_holds_is_a_finding() -> None:
    records = StoredRecords(
        messages=tuple("abcdef"),
        summaries=(_l1("1", "L1-0", list("abc")), _l1("2", "L1-1", list("def"))),
        chunks=(
            Raw(
                "3",
                {"id": "c-0", "source_ids": list("abc"), "compressed": True, "summary_id": "L1-0"},
            ),
        ),
    )
    assert [(f.id, f.kind) for f in audit(records)] == [("L1-1", Kind.UNCHUNKED)]


def test_an_unchunked_l1_a_parent_lists_is_a_finding_even_over_held_messages() -> None:
    records = StoredRecords(
        messages=tuple("abcd"),
        summaries=(
            _l1("1", "L1-0", list("ab"), "L2-2"),
            _l1("2", "L1-1", list("cd"), "L2-2"),
            Raw(
                "3",
                {
                    "id": "L2-2",
                    "level": 2,
                    "content": "y",
                    "tokens": 1,
                    "source_ids": ["L1-0", "L1-1"],
                    "first": "a",
                    "last": "d",
                },
            ),
            _l1("4", "L1-3", list("cd")),
        ),
        chunks=(
            Raw(
                "5",
                {"id": "c-0", "source_ids": list("ab"), "compressed": True, "summary_id": "L1-0"},
            ),
            Raw(
                "6",
                {"id": "c-1", "source_ids": list("cd"), "compressed": True, "summary_id": "L1-3"},
            ),
        ),
    )
    assert [(f.id, f.kind) for f in audit(records)] == [("L1-1", Kind.UNCHUNKED)]


def test_a_store_whose_memories_were_adopted_opens_under_the_default_policy(
    tmp_path: Path,
) -> None:
    path = tmp_path / "agent.db"
    with ContextManager.open(path=path, counter=CharsCounter()) as cm:  # passthrough
        ids = [cm.add_message("User", f"m{i} " + "word " * 20) for i in range(14)]
        for n, (a, b) in enumerate([(0, 5), (6, 9), (6, 13)]):
            cm.store.append(
                SUMMARIES,
                _l1("", f"L1-{n}", ids[a : b + 1]).body,
            )
    for _ in range(2):  # the first open adopts; the second reads what it wrote
        with _manager(path) as cm:
            pass
    with Store.open(path) as db:
        assert [c.body["summary_id"] for c in db.items(CHUNKS)] == ["L1-0", "L1-2"]
    assert audit_store(path).findings == []


def test_reject_is_the_default_policy(store: Path) -> None:
    name, _ = _plant_gap(store)
    with pytest.raises(StoreTopologyError, match=name):
        _manager(store)


def _window_records(l1_rev: int) -> StoredRecords:
    """An L1 over b, c, d (store record ``l1_rev``); the window written down as a..e at
    record 10, then c retracted and presented again (records 30 and 31): c now stands
    after e."""
    from context_manager.window import WindowRecord

    log = (
        (10, WindowRecord("write-down", tuple("abcde"))),
        (30, WindowRecord("retract", ("c",))),
        (31, WindowRecord("present", ("c",))),
    )
    l1 = _l1("1", "L1-0", list("bcd"))
    return StoredRecords(
        messages=tuple("abcde"),
        summaries=(Raw(l1.item, l1.body, l1_rev),),
        chunks=(
            Raw(
                "2",
                {"id": "c-0", "source_ids": list("bcd"), "compressed": True, "summary_id": "L1-0"},
                l1_rev,
            ),
        ),
        window=tuple("abdec"),
        window_log=log,
    )


def test_a_record_written_before_a_redo_it_never_heard_is_judged_by_the_window_then() -> None:
    # written at record 20, when b, c, d stood together: the strategy lets go of it
    # when it loads (it follows the redo), so it is no defect
    assert audit(_window_records(20)) == []


def test_a_record_written_after_the_redo_is_judged_by_the_window_now() -> None:
    found = audit(_window_records(40))  # b, c, d were not one run when it was written
    assert [(f.id, f.kind) for f in found] == [
        ("L1-0", Kind.NON_CONTIGUOUS),
        ("c-0", Kind.NON_CONTIGUOUS_CHUNK),
    ]


def test_an_l2_written_before_a_redo_moved_one_of_its_children_is_no_defect() -> None:
    from context_manager.window import WindowRecord

    log = (
        (10, WindowRecord("write-down", tuple("abcdef"))),
        (30, WindowRecord("retract", ("c", "d"))),
        (31, WindowRecord("present", ("c", "d"))),
    )

    def records(l2_rev: int) -> StoredRecords:
        one, two = _l1("1", "L1-0", list("ab"), "L2-2"), _l1("2", "L1-1", list("cd"), "L2-2")
        return StoredRecords(
            messages=tuple("abcdef"),
            summaries=(
                Raw(one.item, one.body, 20),
                Raw(two.item, two.body, 20),
                Raw(
                    "3",
                    {
                        "id": "L2-2",
                        "level": 2,
                        "content": "y",
                        "tokens": 1,
                        "source_ids": ["L1-0", "L1-1"],
                        "first": "a",
                        "last": "d",
                    },
                    l2_rev,
                ),
            ),
            window=tuple("abefcd"),  # c, d moved after f: L1-0 and L1-1 no longer adjacent
            window_log=log,
        )

    assert audit(records(25)) == []
    assert [(f.id, f.kind) for f in audit(records(40))] == [("L2-2", Kind.NON_CONTIGUOUS)]
