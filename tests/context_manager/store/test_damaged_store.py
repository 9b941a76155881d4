"""Every damaged store file is answered with a typed error, never a traceback.

Random bytes of a real store (messages with tool calls, memories, a branch, the
request's frame) are flipped, then the store is opened, read, compiled and ticked, and
``ctxfold inspect``, ``audit`` and ``repair`` are run on it. Every failure must be one of
the library's typed errors (:class:`~context_manager.store.StoreCorruptError` naming the
path, table, row and column where it can). The trials are seeded (the same bytes every
run): ``FUZZ_TRIALS`` sets how many (30 here; ``make soak`` runs 200).
"""

from __future__ import annotations

import logging
import os
import random
import shutil
import sqlite3
import warnings
from pathlib import Path

import pytest
from typer.testing import CliRunner

from context_manager import (
    CharsCounter,
    ContextManager,
    ExtractiveSummarizer,
    StoreCorruptError,
    StoreError,
    ToolResultBlock,
    ToolUseBlock,
)
from context_manager.cli import app
from context_manager.errors import ContextManagerError
from folding import FoldingError

TRIALS = int(os.environ.get("FUZZ_TRIALS", "30"))
TYPED = (ContextManagerError, StoreError, FoldingError)


def _open(path: Path) -> ContextManager:
    return ContextManager.open(
        path=path, summarizer=ExtractiveSummarizer(), counter=CharsCounter(), window_tokens=4_000
    )


@pytest.fixture(scope="module")
def real_store(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("fuzz") / "agent.db"
    with _open(path) as cm:
        cm.set_system_prompt("You are careful.")
        cm.set_tool_definitions([{"name": "ls", "input_schema": {"type": "object"}}])
        for i in range(120):
            cm.add_message("Claude", [ToolUseBlock(id=f"t{i}", name="ls", input={"d": i})])
            cm.add_message("ls", [ToolResultBlock(tool_use_id=f"t{i}", content=f"f{i}.py " * 20)])
            if i % 10 == 0:
                cm.drain()
                cm.compile()
        cm.fork()
        cm.add_message("User", "on the branch")
    return path


def _damaged_copy(source: Path, folder: Path, seed: int) -> Path:
    rng = random.Random(seed)
    path = folder / f"t{seed}.db"
    shutil.copy(source, path)
    data = bytearray(path.read_bytes())
    for _ in range(rng.randint(1, 8)):
        at = rng.randrange(len(data))
        data[at] ^= 1 << rng.randrange(8)
    path.write_bytes(data)
    return path


def _use(path: Path) -> None:
    with _open(path) as cm:
        for stored in cm.get_messages():
            _ = stored.message
        cm.compile()
        cm.drain()


def test_flipped_bytes_are_answered_by_typed_errors(real_store: Path, tmp_path: Path) -> None:
    untyped: list[str] = []
    outcomes: dict[str, int] = {}
    logging.disable(logging.WARNING)
    try:
        for seed in range(TRIALS):
            path = _damaged_copy(real_store, tmp_path, seed)
            try:
                with warnings.catch_warnings():
                    warnings.simplefilter("ignore")
                    _use(path)
                outcomes["ok"] = outcomes.get("ok", 0) + 1
            except TYPED as exc:
                outcomes[type(exc).__name__] = outcomes.get(type(exc).__name__, 0) + 1
            except Exception as exc:  # what this test exists to find
                untyped.append(f"seed {seed}: {type(exc).__name__}: {exc}")
            for command in ("inspect", "audit", "repair"):
                result = CliRunner().invoke(app, [command, str(path)])
                if result.exception is not None and not isinstance(result.exception, SystemExit):
                    untyped.append(f"seed {seed}: ctxfold {command}: {result.exception!r}")
                elif "Traceback" in result.output or result.exit_code not in (0, 1, 2):
                    untyped.append(f"seed {seed}: ctxfold {command}: {result.output[-300:]}")
    finally:
        logging.disable(logging.NOTSET)
    assert untyped == [], untyped
    assert outcomes.get("StoreCorruptError", 0) > 0  # damage was found, not missed


def _message_row(path: Path, text: str) -> int:
    with sqlite3.connect(path) as conn:
        (row,) = conn.execute(
            "SELECT id FROM records WHERE slot = 'messages' AND body LIKE ?", (f"%{text}%",)
        ).fetchone()
    return int(row)


def _set_body(path: Path, row: int, body: bytes) -> None:
    with sqlite3.connect(path) as conn:
        conn.execute("UPDATE records SET body = CAST(? AS TEXT) WHERE id = ?", (body, row))


@pytest.mark.parametrize(
    ("body", "what"),
    [
        (b'{"participant": "User", "content": [', "not JSON"),
        (b'{"participant": "User", "content": [{"type": "text", "text": "\xff\xfe"}]}', "UTF-8"),
        (b'{"participants": "User", "content": []}', "not a message"),
    ],
)
def test_a_damaged_message_names_the_path_table_row_and_column(
    tmp_path: Path, body: bytes, what: str
) -> None:
    path = tmp_path / "a.db"
    with _open(path) as cm:
        cm.add_message("User", "first")
        cm.add_message("User", "the one to damage")
    row = _message_row(path, "the one to damage")
    _set_body(path, row, body)
    with _open(path) as cm, pytest.raises(StoreCorruptError) as caught:
        [stored.message for stored in cm.get_messages()]
    message = str(caught.value)
    assert str(path) in message and f"table records, row {row}" in message
    assert "column body" in message and what in message
    assert "ctxfold repair" in message
    result = CliRunner().invoke(app, ["inspect", str(path)])
    assert "Traceback" not in result.output
    if what != "not a message":  # inspect shows bodies it can parse as they are
        assert result.exit_code == 2 and f"row {row}" in result.output


def test_paths_no_file_can_have_are_typed_errors(tmp_path: Path) -> None:
    with pytest.raises(StoreError, match="NUL byte"):
        ContextManager.open(path=str(tmp_path / "a\0b.db"))
    long = tmp_path / ("x" * 300 + ".db")
    with pytest.raises(StoreError, match="longer than"):
        ContextManager.open(path=long)
    for command in ("inspect", "audit", "repair"):
        result = CliRunner().invoke(app, [command, str(long)])
        assert result.exit_code == 2, result.output
        assert result.exception is None or isinstance(result.exception, SystemExit)
        assert "Traceback" not in result.output


def test_audit_lists_damaged_rows_and_repair_copies_every_readable_row(tmp_path: Path) -> None:
    path = tmp_path / "a.db"
    with _open(path) as cm:
        ids = [cm.add_message("User", f"message {i} " + "word " * 40) for i in range(30)]
        cm.drain()
        cm.compile()
    rows = [_message_row(path, "message 3 "), _message_row(path, "message 17 ")]
    _set_body(path, rows[0], b'{"participant": "User", "content": [')
    _set_body(path, rows[1], b'{"participant": "User", "content": "\xff"}')
    audited = CliRunner().invoke(app, ["audit", str(path)])
    assert audited.exit_code == 1, audited.output
    assert "2 damaged rows" in audited.output
    for row in rows:
        assert f"table records, row {row} (item " in audited.output
    planned = CliRunner().invoke(app, ["repair", str(path)])
    assert planned.exit_code == 1 and "dry run" in planned.output
    assert not list(tmp_path.glob("*.bak"))
    applied = CliRunner().invoke(app, ["repair", str(path), "--apply"])
    assert applied.exit_code == 0, applied.output
    assert "every row that can be read was copied" in applied.output
    assert len(list(tmp_path.glob("a.db.bak"))) == 1  # the original, kept
    with _open(path) as cm:
        kept = [stored.id for stored in cm.get_messages()]
        assert kept == [i for k, i in enumerate(ids) if k not in (3, 17)]
        assert cm.compile().messages
    assert CliRunner().invoke(app, ["audit", str(path)]).exit_code == 0


@pytest.mark.parametrize(
    ("update", "what"),
    [
        ("UPDATE branches SET parent = id WHERE name = 'main'", "lead back to itself"),
        ("UPDATE branches SET parent = 999 WHERE name = 'main'", "is gone"),
    ],
)
def test_a_damaged_branch_lineage_is_refused_not_looped(
    tmp_path: Path, update: str, what: str
) -> None:
    path = tmp_path / "a.db"
    with _open(path) as cm:
        cm.add_message("User", "hello")
    with sqlite3.connect(path) as conn:
        conn.execute(update)
    with pytest.raises(StoreCorruptError, match=what):
        _open(path)
    result = CliRunner().invoke(app, ["inspect", str(path)])
    assert result.exit_code == 2 and "table branches, row" in result.output
