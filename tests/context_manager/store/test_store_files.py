"""The store's files: private permissions, no writes through planted symlinks, another
application's SQLite database left alone, and a store reached by a second name."""

from __future__ import annotations

import hashlib
import os
import re
import shutil
import sqlite3
import stat
import subprocess
import sys
import textwrap
from collections.abc import Iterator
from pathlib import Path

import pytest
from typer.testing import CliRunner

import context_manager.topology as topology
import context_manager.topology.store_files as topology_files
from context_manager import CharsCounter, ContextManager, ContextManagerError
from context_manager.cli import app
from context_manager.store import (
    NotAStoreError,
    Store,
    StoreAliasError,
    StoreAliasWarning,
    StoreError,
)
from context_manager.topology import repair_store


def _mode(path: Path) -> int:
    return stat.S_IMODE(os.lstat(path).st_mode)


def _sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


@pytest.fixture
def umask_022() -> Iterator[None]:
    """A umask that leaves new files readable by everyone (0644), as most systems have."""
    old = os.umask(0o022)
    try:
        yield
    finally:
        os.umask(old)


def _store(path: Path, mode: int | None = None) -> Path:
    with Store.open(path) as db:
        db.append("messages", {"text": "a private transcript"})
        db.set("default/settings", {"k": 1})
    if mode is not None:
        os.chmod(path, mode)
    return path


def _damage_one_record(path: Path) -> None:
    """One record's body made into text that is not JSON, so a repair has work to do."""
    with Store.open(path) as db:
        db.append("notes", {"n": "to be damaged"})
    conn = sqlite3.connect(path)
    try:
        conn.execute("UPDATE records SET body = '{not json' WHERE slot = 'notes'")
        conn.commit()
    finally:
        conn.close()


# ------------------------------------------------------------------ permissions
@pytest.mark.parametrize("umask", [0o022, 0o002, 0o277])
def test_a_new_store_and_its_side_files_are_private_whatever_the_umask(
    tmp_path: Path, umask: int
) -> None:
    path = tmp_path / "agent.db"
    old = os.umask(umask)
    try:
        with Store.open(path) as db:
            db.append("messages", {"text": "hello"})
            side = sorted(p.name for p in tmp_path.iterdir())
            modes = {p.name: _mode(p) for p in tmp_path.iterdir()}
    finally:
        os.umask(old)
    assert side == ["agent.db", "agent.db-shm", "agent.db-wal"]
    assert modes == {"agent.db": 0o600, "agent.db-shm": 0o600, "agent.db-wal": 0o600}
    assert _mode(path) == 0o600


def test_an_existing_empty_file_becomes_a_store_and_keeps_its_mode(
    tmp_path: Path, umask_022: None
) -> None:
    path = tmp_path / "agent.db"
    path.touch()
    os.chmod(path, 0o640)
    with Store.open(path) as db:
        db.append("messages", {"text": "hello"})
    assert _mode(path) == 0o640  # the file's owner chose its mode


@pytest.mark.parametrize("mode", [0o600, 0o640])
def test_a_derived_store_has_its_source_s_permissions(
    tmp_path: Path, umask_022: None, mode: int
) -> None:
    source = _store(tmp_path / "agent.db", mode)
    target = tmp_path / "derived.db"
    with Store.open(source) as db:
        db.derive(target, db.sequence)
    assert _mode(target) == mode
    assert sorted(p.name for p in tmp_path.iterdir()) == ["agent.db", "derived.db"]
    with Store.open(target) as derived:
        assert [i.body for i in derived.items("messages")] == [{"text": "a private transcript"}]


def test_a_manager_s_derived_store_is_private(tmp_path: Path, umask_022: None) -> None:
    source = tmp_path / "agent.db"
    with ContextManager.open(path=source, counter=CharsCounter()) as cm:
        cm.add_message("User", "a private transcript")
        child = cm.derive(tmp_path / "child.db")
    assert _mode(source) == 0o600 and _mode(child) == 0o600


def test_a_repair_keeps_the_store_s_permissions_on_the_backup_and_the_repaired_file(
    tmp_path: Path, umask_022: None
) -> None:
    path = _store(tmp_path / "agent.db", 0o600)
    _damage_one_record(path)
    damaged = _sha256(path)
    result = repair_store(path, apply=True)
    assert result.applied and result.backup == f"{path}.bak"
    backup = Path(result.backup)
    assert _sha256(backup) == damaged
    assert _mode(backup) == 0o600
    assert _mode(path) == 0o600
    assert sorted(p.name for p in tmp_path.iterdir()) == ["agent.db", "agent.db.bak"]


def test_a_group_readable_store_s_backup_stays_group_readable(
    tmp_path: Path, umask_022: None
) -> None:
    path = _store(tmp_path / "agent.db", 0o640)
    _damage_one_record(path)
    result = repair_store(path, apply=True)
    assert result.backup is not None
    assert _mode(Path(result.backup)) == 0o640 and _mode(path) == 0o640


# ----------------------------------------------------------- planted symlinks
def test_a_symlink_at_the_derive_s_old_temporary_name_is_never_written_through(
    tmp_path: Path,
) -> None:
    source = _store(tmp_path / "agent.db")
    victim = tmp_path / "victim.txt"
    victim.write_text("the victim's own text")
    target = tmp_path / "derived.db"
    planted = tmp_path / f".{target.name}.deriving-{os.getpid()}"
    planted.symlink_to(victim)
    with Store.open(source) as db:
        db.derive(target, db.sequence)
    assert victim.read_text() == "the victim's own text"
    assert planted.is_symlink() and os.readlink(planted) == str(victim)
    assert b"a private transcript" not in victim.read_bytes()


def test_a_symlink_at_the_derive_s_target_is_refused_and_its_target_not_created(
    tmp_path: Path,
) -> None:
    source = _store(tmp_path / "agent.db")
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    victim = elsewhere / "victim.db"  # no file yet: the link dangles
    target = tmp_path / "derived.db"
    target.symlink_to(victim)
    with Store.open(source) as db, pytest.raises(StoreError, match="symbolic link"):
        db.derive(target, db.sequence)
    assert not victim.exists() and list(elsewhere.iterdir()) == []
    assert target.is_symlink()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["agent.db", "derived.db", "elsewhere"]


def test_a_symlink_planted_at_the_backup_name_after_it_was_chosen_is_not_followed(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = _store(tmp_path / "agent.db", 0o600)
    _damage_one_record(path)
    damaged = _sha256(path)
    victim = tmp_path / "victim.txt"
    victim.write_text("the victim's own text")
    chosen = topology_files._backup_name
    planted: list[str] = []

    def plant_after_choosing(*args: object, **kwargs: object) -> object:
        name = chosen(*args, **kwargs)  # type: ignore[arg-type]
        shown = name if isinstance(name, str) else name[0]
        if not planted:  # a race, once: the link appears after the free name was chosen
            os.symlink(victim, shown)
            planted.append(shown)
        return name

    monkeypatch.setattr(topology_files, "_backup_name", plant_after_choosing)
    result = repair_store(path, apply=True)
    assert result.applied and result.backup is not None
    assert victim.read_text() == "the victim's own text"
    backup = Path(result.backup)
    assert planted == [f"{path}.bak"] and Path(planted[0]).is_symlink()
    assert backup == Path(f"{path}.bak.1")
    assert not backup.is_symlink() and _sha256(backup) == damaged and _mode(backup) == 0o600


# --------------------------------------------- another application's database
def _foreign(path: Path, *tables: str) -> Path:
    conn = sqlite3.connect(path)
    try:
        for table in tables:
            conn.execute(f"CREATE TABLE {table} (id INTEGER PRIMARY KEY, name TEXT)")
            conn.execute(f"INSERT INTO {table} (name) VALUES ('alice')")
        conn.commit()
    finally:
        conn.close()
    return path


@pytest.mark.parametrize("tables", [("users",), ("meta", "users"), ("branches", "accounts")])
def test_another_application_s_database_is_refused_and_left_as_it_was(
    tmp_path: Path, tables: tuple[str, ...]
) -> None:
    path = _foreign(tmp_path / "app.db", *tables)
    before = _sha256(path)
    with pytest.raises(NotAStoreError) as raised:
        Store.open(path)
    message = str(raised.value)
    assert str(path) in message and "not a store" in message
    foreign = sorted(set(tables) - {"meta", "branches"})
    assert all(name in message for name in foreign)
    assert _sha256(path) == before
    assert sorted(p.name for p in tmp_path.iterdir()) == ["app.db"]
    with pytest.raises(NotAStoreError):  # the refusal released the file: same answer again
        Store.open(path)
    assert _sha256(path) == before


def test_a_manager_refuses_another_application_s_database(tmp_path: Path) -> None:
    path = _foreign(tmp_path / "app.db", "users")
    before = _sha256(path)
    with pytest.raises(NotAStoreError, match="not a store") as raised:
        ContextManager.open(path=path, counter=CharsCounter())
    assert isinstance(raised.value, ContextManagerError) and isinstance(raised.value, StoreError)
    assert _sha256(path) == before
    assert sorted(p.name for p in tmp_path.iterdir()) == ["app.db"]


def test_an_empty_file_and_a_new_path_still_become_stores(tmp_path: Path) -> None:
    empty = tmp_path / "empty.db"
    empty.touch()
    for path in (empty, tmp_path / "new.db"):
        with Store.open(path) as db:
            db.append("messages", {"text": "hello"})
        with Store.open(path) as db:
            assert [i.body for i in db.items("messages")] == [{"text": "hello"}]


def test_a_store_whose_first_open_stopped_part_way_still_opens(tmp_path: Path) -> None:
    path = tmp_path / "agent.db"
    conn = sqlite3.connect(path)
    conn.execute(
        "CREATE TABLE branches (id INTEGER PRIMARY KEY, name TEXT NOT NULL UNIQUE, "
        "parent INTEGER REFERENCES branches(id), fork_seq INTEGER NOT NULL, "
        "created REAL NOT NULL)"
    )
    conn.close()
    with Store.open(path) as db:
        db.append("messages", {"text": "hello"})
        assert db.branch == "main"


def test_the_cli_and_the_library_refuse_with_the_same_words(tmp_path: Path) -> None:
    path = _foreign(tmp_path / "app.db", "users")
    before = _sha256(path)
    with pytest.raises(NotAStoreError) as raised:
        Store.open(path)
    for command in ("inspect", "audit", "repair"):
        result = CliRunner().invoke(app, [command, str(path)], env={"COLUMNS": "400"})
        assert result.exit_code == 2, (command, result.output)
        assert " ".join(str(raised.value).split()) in " ".join(result.stderr.split()), command
    assert _sha256(path) == before
    assert topology.NotAStoreError is NotAStoreError


# ------------------------------------------------------ another name of the file
CRASHING_WRITER = textwrap.dedent(
    """
    import os, sys
    from context_manager.store import Store
    store = Store.open(sys.argv[1])
    for n in range(3):
        store.append("messages", {"n": n})
    print("acknowledged", len(store.items("messages")), flush=True)
    os._exit(0)  # killed: the store is never closed, its log is never folded in
    """
)


def _crash_writing_through(path: Path) -> None:
    """A writer opens the store by ``path``, writes three messages and dies."""
    out = subprocess.run(
        [sys.executable, "-c", CRASHING_WRITER, str(path)], capture_output=True, text=True
    )
    assert out.returncode == 0, out.stderr
    assert out.stdout.split() == ["acknowledged", "3"]
    assert os.path.getsize(f"{path}-wal") > 32  # the writes are in its log only


def _snapshot(folder: Path) -> dict[str, str]:
    return {p.name: _sha256(p) for p in sorted(folder.iterdir())}


def _messages(store: Store) -> list[int]:
    return [i.body["n"] for i in store.items("messages")]


def test_a_crashed_writer_s_log_is_not_lost_by_opening_another_hard_link(tmp_path: Path) -> None:
    first, second = tmp_path / "agent.db", tmp_path / "linked.db"
    Store.open(first).close()
    os.link(first, second)
    with pytest.warns(StoreAliasWarning):
        Store.open(second).close()  # the last clean writer used the second name
    _crash_writing_through(first)
    before = _snapshot(tmp_path)
    with pytest.raises(StoreAliasError) as raised:
        Store.open(second)
    message = str(raised.value)
    assert str(second) in message and f"open it as {first}" in message
    assert f"{first}-wal" in message and "Nothing was changed" in message
    assert _snapshot(tmp_path) == before  # not a byte written, no file added
    with pytest.raises(StoreAliasError):  # the refusal took nothing with it
        ContextManager.open(path=second, counter=CharsCounter())
    with pytest.warns(StoreAliasWarning):
        store = Store.open(first)  # the name the writer used recovers its writes
    with store:
        assert _messages(store) == [0, 1, 2]
    with pytest.warns(StoreAliasWarning):
        store = Store.open(second)  # its log folded in and closed: any name opens it
    with store:
        assert _messages(store) == [0, 1, 2]


def test_a_store_renamed_after_its_writer_crashed_is_refused_until_moved_back(
    tmp_path: Path,
) -> None:
    first, moved = tmp_path / "agent.db", tmp_path / "moved.db"
    _crash_writing_through(first)
    os.rename(first, moved)
    before = _snapshot(tmp_path)
    with pytest.raises(StoreAliasError, match=re.escape(f"move the file back to {first}")):
        Store.open(moved)
    assert _snapshot(tmp_path) == before
    os.rename(moved, first)
    with Store.open(first) as store:  # one name: no warning
        assert _messages(store) == [0, 1, 2]


def test_the_writer_s_own_name_recovers_without_a_word(tmp_path: Path) -> None:
    path = tmp_path / "agent.db"
    _crash_writing_through(path)
    with Store.open(path) as store:
        assert _messages(store) == [0, 1, 2]


def test_a_copy_of_a_store_whose_writer_runs_is_not_taken_for_another_name(
    tmp_path: Path,
) -> None:
    path, copy = tmp_path / "agent.db", tmp_path / "copy.db"
    with Store.open(path) as live:
        live.append("messages", {"n": 0})
        assert os.path.getsize(f"{path}-wal") > 32
        shutil.copyfile(path, copy)  # another file: the live log is not its own
        with Store.open(copy) as other:
            other.append("messages", {"n": 1})


def test_a_hard_linked_store_opens_with_a_warning_naming_its_other_name(tmp_path: Path) -> None:
    path, linked = tmp_path / "agent.db", tmp_path / "linked.db"
    with Store.open(path) as store:
        store.append("messages", {"n": 0})
    os.link(path, linked)
    with pytest.warns(StoreAliasWarning) as caught:
        store = Store.open(path)
    with store:
        assert _messages(store) == [0]
    (warning,) = caught
    message = str(warning.message)
    assert f"{path} has 2 names" in message and f"also {linked}" in message
    assert "Open the store by one name only" in message
    os.unlink(linked)
    with Store.open(path) as store:  # one name again: no warning (warnings are errors here)
        assert _messages(store) == [0]


def test_a_symlinked_store_opens_without_a_warning(tmp_path: Path) -> None:
    path, alias = tmp_path / "agent.db", tmp_path / "alias.db"
    Store.open(path).close()
    alias.symlink_to(path)
    with Store.open(alias) as store:  # the symlink resolves: its log is the file's
        store.append("messages", {"n": 0})
    with Store.open(path) as store:
        assert _messages(store) == [0]
