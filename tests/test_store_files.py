"""The store's files: another application's SQLite database is left alone."""

from __future__ import annotations

import hashlib
import sqlite3
from pathlib import Path

import pytest
from typer.testing import CliRunner

import context_manager.topology as topology
from context_manager import CharsCounter, ContextManager, ContextManagerError
from context_manager.cli import app
from context_manager.store import NotAStoreError, Store, StoreError


def _sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


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
