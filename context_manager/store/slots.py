"""The store's slots: append slots of items (append, edit, redact, read) and snapshot
slots of one value (set, get, history), as the current branch sees them, and the
records and bodies behind them.
"""

from __future__ import annotations

from typing import Any

from .bodies import Item, load_stored
from .connection import StoreConnection, guarded
from .errors import StoreError

_NEVER_SET = object()
"""The cached value of a snapshot slot no record has set."""


class SlotStore(StoreConnection):
    """The reads and writes of slots (a part of :class:`~.opening.Store`)."""

    # ------------------------------------------------------------ append slots
    @guarded("appending an item")
    def append(self, slot: str, body: Any) -> Item:
        """Append an item to ``slot``; its id is unique in the store.

        The id of an append whose transaction rolled back is not given to
        another item while the store stays open.

        Raises
        ------
        StoreFullError
            When the disk is full; nothing is stored.
        """
        self._check_open()
        cached = self._cache.get(slot)
        with self.transaction():
            rowid, seq, text = self._write(slot, "append", None, body, claim=True)
            item_id = str(rowid)
            item = Item(item_id, seq, rev=rowid, text=text, blobs=self.get_blob)
            if cached is not None:
                self._changed(cached, "append", len(cached))
                cached.append(item)
                self._cache[slot] = cached
        return item

    @guarded("editing an item")
    def edit(self, slot: str, item_id: str, body: Any) -> Item:
        """Replace the body of a live item; returns the item as edited.

        Raises
        ------
        StoreError
            When ``item_id`` is not a live item of ``slot`` on this branch.
        """
        if slot not in self._cache:  # not read yet: check the one item, read nothing else
            seq = self._live_seq(slot, item_id)
            rowid, _, text = self._write(slot, "edit", item_id, body)
            return Item(item_id, seq, rev=rowid, text=text, blobs=self.get_blob)
        at = self._index(slot, item_id)
        cached = self._live(slot)
        with self.transaction():
            rowid, _, text = self._write(slot, "edit", item_id, body)
            self._changed(cached, "edit", at, cached[at])
            item = cached[at] = Item(
                item_id, cached[at].seq, rev=rowid, text=text, blobs=self.get_blob
            )
            self._cache[slot] = cached
        return item

    @guarded("redacting an item")
    def redact(self, slot: str, item_id: str) -> None:
        """Remove a live item (the record stays; the item no longer reads).

        Raises
        ------
        StoreError
            When ``item_id`` is not a live item of ``slot`` on this branch.
        """
        if slot not in self._cache:
            self._live_seq(slot, item_id)
            self._write(slot, "redact", item_id, None)
            return
        at = self._index(slot, item_id)
        cached = self._live(slot)
        with self.transaction():
            self._write(slot, "redact", item_id, None)
            self._changed(cached, "redact", at, cached[at])
            del cached[at]
            self._cache[slot] = cached

    @guarded("reading items")
    def items(self, slot: str) -> list[Item]:
        """Live items of ``slot`` in append order, edits applied."""
        return list(self._live(slot))

    def _live(self, slot: str) -> list[Item]:
        """The cached live items of ``slot`` (shared: callers must not change it)."""
        cached = self._cache.get(slot)
        if cached is None:
            cached = self._materialize(slot)
            self._cache[slot] = cached
        return cached

    @guarded("reading an item")
    def item(self, slot: str, item_id: str) -> Item | None:
        """One live item, or None."""
        for it in reversed(self._live(slot)):
            if it.id == item_id:
                return it
        return None

    def _live_seq(self, slot: str, item_id: str) -> int:
        """The append sequence of the live item ``item_id``, from its own records."""
        clauses = " OR ".join("(branch = ? AND seq <= ?)" for _ in self._lineage)
        params: list[Any] = [slot, item_id]
        for branch_id, limit in self._lineage:
            params += [branch_id, limit]
        rows = self._conn.execute(
            f"SELECT op, seq FROM records WHERE slot = ? AND item = ? AND ({clauses}) ORDER BY seq",
            params,
        ).fetchall()
        appended = next((seq for op, seq in rows if op == "append"), None)
        if appended is None or rows[-1][0] == "redact":
            raise StoreError(f"{item_id!r} is not a live item of slot {slot!r} on this branch")
        return int(appended)

    def _index(self, slot: str, item_id: str) -> int:
        """Where the live item ``item_id`` sits in the cached items of ``slot``."""
        live = self._live(slot)
        for at in range(len(live) - 1, -1, -1):  # recent items are the likely ones
            if live[at].id == item_id:
                return at
        raise StoreError(f"{item_id!r} is not a live item of slot {slot!r} on this branch")

    def _materialize(self, slot: str) -> list[Item]:
        # rows come in sequence order, so the dict keeps append order; bodies stay JSON
        # text until read
        live: dict[str, Item] = {}
        blobs = self.get_blob  # one bound method for every item
        for op, item, seq, body, rowid in self._rows(slot):
            if op == "append":
                live[item] = Item(item, seq, rev=rowid, text=body, blobs=blobs)
            elif op == "edit":
                old = live.get(item)
                if old is not None:
                    live[item] = Item(item, old.seq, rev=rowid, text=body, blobs=blobs)
            elif op == "redact":
                live.pop(item, None)
        return list(live.values())

    # ---------------------------------------------------------- snapshot slots
    @guarded("setting a snapshot")
    def set(self, slot: str, value: Any) -> None:
        """Store ``value`` as the current snapshot of ``slot``.

        Raises
        ------
        StoreFullError
            When the disk is full; nothing is stored.
        """
        with self.transaction():
            self._write(slot, "set", None, value)
            self._cache[slot] = value

    @guarded("reading a snapshot")
    def get(self, slot: str, default: Any = None) -> Any:
        """The current snapshot of ``slot`` (``default`` when never set)."""
        if slot in self._cache:
            value = self._cache[slot]
            return default if value is _NEVER_SET else value
        value = _NEVER_SET  # cached as such: each caller's own default is returned
        for seq, body in self._sets(slot, 1):
            where = f"table records, the snapshot of {slot!r} at sequence {seq}, column body"
            value = load_stored(body, self._path, where) if body is not None else None
        self._cache[slot] = value
        return default if value is _NEVER_SET else value

    @guarded("reading snapshot history")
    def history(self, slot: str, limit: int) -> list[tuple[int, Any]]:
        """The newest ``limit`` snapshots of ``slot`` this branch sees, newest first.

        Returns
        -------
        list of (int, Any)
            ``(seq, value)`` pairs; the first is the current snapshot (what :meth:`get`
            returns). Only those records are read.
        """
        return [
            (
                seq,
                load_stored(
                    b, self._path, f"table records, {slot!r} at sequence {seq}, column body"
                )
                if b is not None
                else None,
            )
            for seq, b in self._sets(slot, limit)
        ]

    def _sets(self, slot: str, limit: int) -> list[tuple[int, str | None]]:
        """The newest ``limit`` snapshot records of ``slot`` seen by this branch."""
        rows: list[tuple[int, str | None]] = []
        for branch_id, upto in self._lineage:  # each an index walk from the newest
            rows += self._conn.execute(
                "SELECT seq, body FROM records WHERE slot = ? AND branch = ? AND seq <= ? "
                "AND op = 'set' ORDER BY seq DESC LIMIT ?",
                (slot, branch_id, upto, limit),
            ).fetchall()
        rows.sort(key=lambda r: -r[0])
        return rows[:limit]

    def _rows(self, slot: str) -> list[tuple[str, str, int, str | None, int]]:
        clauses = " OR ".join("(branch = ? AND seq <= ?)" for _ in self._lineage)
        params: list[Any] = [slot]
        for branch_id, limit in self._lineage:
            params += [branch_id, limit]
        rows: list[tuple[str, str, int, str | None, int]] = self._conn.execute(
            f"SELECT op, item, seq, body, id FROM records WHERE slot = ? AND ({clauses}) "
            "ORDER BY seq",
            params,
        ).fetchall()
        return rows

    @guarded("reading records")
    def records_after(self, slot: str, seq: int) -> list[tuple[str, str, int, int]]:
        """Records of ``slot`` this branch sees after ``seq``, oldest first, without
        their bodies: ``(op, item, seq, rev)`` (``rev`` is the record id)."""
        clauses = " OR ".join("(branch = ? AND seq <= ? AND seq > ?)" for _ in self._lineage)
        params: list[Any] = [slot]
        for branch_id, limit in self._lineage:
            params += [branch_id, limit, seq]
        rows: list[tuple[str, str, int, int]] = self._conn.execute(
            f"SELECT op, item, seq, id FROM records WHERE slot = ? AND ({clauses}) ORDER BY seq",
            params,
        ).fetchall()
        return rows

    @guarded("reading a body")
    def body_at(self, rev: int) -> Any:
        """The body written by the record ``rev`` (an :attr:`Item.rev`).

        Raises
        ------
        StoreError
            When no record has that id.
        """
        row = self._conn.execute("SELECT body FROM records WHERE id = ?", (rev,)).fetchone()
        if row is None:
            raise StoreError(f"{self._path}: no record {rev}")
        return Item("", 0, rev=rev, text=row[0], blobs=self.get_blob).body
