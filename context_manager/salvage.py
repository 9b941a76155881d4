"""Damaged rows of a store file, and a new store of every row that can still be read.

A store file damaged on disk (flipped bytes, a torn page) may still hold most of an
agent's history. :func:`damaged_rows` reads a file row by row and lists what cannot be
read: pages SQLite's own check finds broken, and records whose text is not UTF-8, whose
body is not JSON, or whose body in a message slot is not a message. :func:`salvage`
writes a new store holding every other row (branches, records with their ids and
sequence numbers, media blobs, the settings), so ``ctxfold repair --apply`` can replace
the damaged file with it and keep the original beside it. The derived tables are left
out: they are rebuilt from the records on first use.

Examples
--------
>>> import tempfile, pathlib
>>> from context_manager import CharsCounter, ContextManager
>>> folder = pathlib.Path(tempfile.mkdtemp())
>>> with ContextManager.open(path=folder / "a.db", counter=CharsCounter()) as cm:
...     _ = cm.add_message("User", "hello")
>>> damaged_rows(folder / "a.db")
[]
"""

from __future__ import annotations

import json
import os
import sqlite3
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from .messages import Message
from .store import Store, StoreError

__all__ = ["DamagedRow", "damaged_rows", "salvage"]

_OPS = (b"append", b"edit", b"redact", b"set")


@dataclass(frozen=True)
class DamagedRow:
    """One row (or page) of a store file that cannot be read.

    Attributes
    ----------
    table : str
        ``records``, or ``sqlite`` for what SQLite's own check reports.
    row : int or None
        The row id in the table.
    slot, item : str or None
        The record's slot and item, when they can be read.
    what : str
        What is wrong.
    """

    table: str
    row: int | None
    slot: str | None
    item: str | None
    what: str

    def describe(self) -> str:
        """One line: where, and what is wrong."""
        if self.row is None:
            return f"{self.table}: {self.what}"
        about = f" (item {self.item} of {self.slot!r})" if self.slot and self.item else ""
        if self.slot and not self.item:
            about = f" (slot {self.slot!r})"
        return f"table {self.table}, row {self.row}{about}: {self.what}"

    def to_dict(self) -> dict[str, Any]:
        """A JSON-ready form."""
        return {
            "table": self.table,
            "row": self.row,
            "slot": self.slot,
            "item": self.item,
            "what": self.what,
        }


def _connect(path: str | os.PathLike[str]) -> sqlite3.Connection:
    """A read-only connection that reads text as bytes (nothing is decoded for it)."""
    conn = sqlite3.connect(Path(path).resolve().as_uri() + "?mode=ro", uri=True)
    conn.text_factory = bytes
    return conn


def _text(value: Any) -> str | None:
    """A column as text, or None when it is not UTF-8 text."""
    if value is None or isinstance(value, int | float):
        return None if value is None else str(value)
    try:
        return bytes(value).decode("utf-8")
    except UnicodeDecodeError:
        return None


def _record_problem(slot: Any, op: Any, item: Any, body: Any) -> str | None:
    """What is wrong with one record's columns, or None."""
    if _text(slot) is None:
        return "its slot is not UTF-8 text"
    if op not in _OPS:
        return f"its operation {op!r} is not one a store writes"
    if item is not None and _text(item) is None:
        return "its item id is not UTF-8 text"
    if body is None:
        return None
    text = _text(body)
    if text is None:
        return "its body holds bytes that are not UTF-8"
    try:
        value = json.loads(text)
    except ValueError as exc:
        return f"its body is not JSON ({exc})"
    name = _text(slot) or ""
    if op in (b"append", b"edit") and (name == "messages" or name.endswith("/messages")):
        try:
            Message.model_validate(value)
        except ValueError as exc:
            first = " ".join(str(exc).splitlines()[:2])
            return f"its body is not a message ({first})"
    return None


def _record_ids(conn: sqlite3.Connection) -> Iterator[int]:
    """Every record id, from the table's index when it reads, else each id up to the
    highest (a damaged page can hide ids from a scan)."""
    try:
        yield from (int(r[0]) for r in conn.execute("SELECT id FROM records ORDER BY id"))
        return
    except sqlite3.DatabaseError:
        pass
    try:
        (top,) = conn.execute("SELECT MAX(id) FROM records").fetchone()
    except sqlite3.DatabaseError:
        top = None
    yield from range(1, int(top or 0) + 1)


def _rows(conn: sqlite3.Connection) -> Iterator[tuple[int, tuple[Any, ...] | None, str | None]]:
    """Each record as ``(id, columns, problem)``: columns None when the row cannot be read."""
    for rid in _record_ids(conn):
        try:
            row = conn.execute(
                "SELECT branch, seq, slot, op, item, body FROM records WHERE id = ?", (rid,)
            ).fetchone()
        except sqlite3.DatabaseError as exc:
            yield rid, None, f"it cannot be read ({exc})"
            continue
        if row is None:
            continue
        yield rid, row, _record_problem(row[2], row[3], row[4], row[5])


def damaged_rows(path: str | os.PathLike[str]) -> list[DamagedRow]:
    """What cannot be read in the store file ``path`` (read-only; the file is not written).

    Raises
    ------
    StoreError
        When the file cannot be opened as a SQLite database at all.
    """
    try:
        conn = _connect(path)
    except sqlite3.Error as exc:
        raise StoreError(f"{path}: cannot be opened as a database ({exc})") from exc
    out: list[DamagedRow] = []
    try:
        try:
            for (message,) in conn.execute("PRAGMA quick_check(20)"):
                text = _text(message) or repr(message)
                if text != "ok":
                    out.append(DamagedRow("sqlite", None, None, None, text))
        except sqlite3.DatabaseError as exc:
            out.append(DamagedRow("sqlite", None, None, None, f"the check failed ({exc})"))
        for rid, row, problem in _rows(conn):
            if problem is not None:
                slot = _text(row[2]) if row is not None else None
                item = _text(row[4]) if row is not None else None
                out.append(DamagedRow("records", rid, slot, item, problem))
    except sqlite3.DatabaseError as exc:
        out.append(DamagedRow("records", None, None, None, f"the table cannot be read ({exc})"))
    finally:
        conn.close()
    return out


def salvage(source: str | os.PathLike[str], dest: str | os.PathLike[str]) -> list[DamagedRow]:
    """Write a new store at ``dest`` with every readable row of the store file ``source``.

    Branches, settings and media blobs are copied as they are; each record is copied
    with its id and sequence number unless it is damaged (:func:`damaged_rows`); the
    derived tables are rebuilt on first use. Returns the rows left out.

    Raises
    ------
    StoreError
        When ``source`` cannot be opened as a database, its branches cannot be read
        (without them no record can be placed), or ``dest`` exists or cannot be written.
    """
    if os.path.lexists(dest):
        raise StoreError(f"{dest}: a salvaged store is written to a new file only")
    left_out = damaged_rows(source)
    skipped = {d.row for d in left_out if d.table == "records" and d.row is not None}
    Store.open(dest).close()  # the schema
    try:
        conn = _connect(source)
    except sqlite3.Error as exc:
        raise StoreError(f"{source}: cannot be opened as a database ({exc})") from exc
    out = sqlite3.connect(dest, isolation_level=None)
    try:
        try:
            branches = conn.execute(
                "SELECT id, name, parent, fork_seq, created FROM branches"
            ).fetchall()
        except sqlite3.DatabaseError as exc:
            raise StoreError(f"{source}: its branches cannot be read ({exc})") from exc
        out.execute("BEGIN")
        out.execute("DELETE FROM branches")
        out.execute("DELETE FROM meta")
        for bid, name, parent, fork_seq, created in branches:
            if _text(name) is None:
                left_out.append(DamagedRow("branches", bid, None, None, "its name is not UTF-8"))
                continue
            out.execute(
                "INSERT INTO branches VALUES (?, ?, ?, ?, ?)",
                (bid, _text(name), parent, fork_seq, created),
            )
        for key, value in _readable(conn, "SELECT key, value FROM meta", left_out, "meta"):
            if _text(key) is not None and _text(value) is not None:
                out.execute("INSERT OR REPLACE INTO meta VALUES (?, ?)", (_text(key), _text(value)))
        for digest, data in _readable(conn, "SELECT sha256, data FROM blobs", left_out, "blobs"):
            if _text(digest) is not None:
                out.execute("INSERT OR IGNORE INTO blobs VALUES (?, ?)", (_text(digest), data))
        top = 0
        for rid, row, problem in _rows(conn):
            top = max(top, rid)
            if row is None or problem is not None or rid in skipped:
                continue
            branch, seq, slot, op, item, body = row
            try:
                out.execute(
                    "INSERT INTO records (id, branch, seq, slot, op, item, body) "
                    "VALUES (?, ?, ?, ?, ?, ?, ?)",
                    (rid, branch, seq, _text(slot), _text(op), _text(item), _text(body)),
                )
            except sqlite3.IntegrityError as exc:  # a damaged branch or a repeated sequence
                left_out.append(DamagedRow("records", rid, _text(slot), _text(item), str(exc)))
        out.execute("DELETE FROM sqlite_sequence WHERE name = 'records'")
        out.execute("INSERT INTO sqlite_sequence (name, seq) VALUES ('records', ?)", (top,))
        out.execute("COMMIT")
    except BaseException:
        out.close()
        conn.close()
        for leftover in (dest, f"{dest}-wal", f"{dest}-shm"):
            if os.path.lexists(leftover):
                os.unlink(leftover)
        raise
    out.close()
    conn.close()
    return left_out


def _readable(
    conn: sqlite3.Connection, query: str, left_out: list[DamagedRow], table: str
) -> list[tuple[Any, ...]]:
    """The rows of ``query``, or none (noted in ``left_out``) when the table cannot be read."""
    try:
        return conn.execute(query).fetchall()
    except sqlite3.DatabaseError as exc:
        left_out.append(DamagedRow(table, None, None, None, f"cannot be read ({exc})"))
        return []
