"""The derived tables: values derived from items and their neighbours, token counts
by digest, and derived blobs. They are not records: not sequenced, never branched,
and never part of what a slot reads.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any

from .connection import StoreConnection, guarded


class DerivedStore(StoreConnection):
    """The reads and writes of the derived tables (a part of :class:`~.opening.Store`)."""

    # ----------------------------------------------------- derived item values
    @guarded("reading derived values")
    def derived_items(
        self, scope: str, items: Sequence[int] | None = None
    ) -> dict[int, tuple[int, int, int, int, int, int]]:
        """Values derived from items and their neighbours, saved by :meth:`save_derived`.

        They are not records: not sequenced, not branched, and never part of what a
        slot reads. Each row names the versions it was derived from (the item's
        :attr:`Item.rev` and its neighbours'), so a caller keeps a row only while those
        versions are still what it sees, whichever branch wrote it.

        Parameters
        ----------
        scope : str
            Whose values (for instance a slot and the counter that derived them).
        items : sequence of int, optional
            Only these items' rows.

        Returns
        -------
        dict
            Item id (as int) -> ``(rev, prev rev, next rev, a, b, c)``.
        """
        scope_id = self._scope_id(scope, create=False)
        if scope_id is None:
            return {}
        query = "SELECT item, rev, prev, next, a, b, c FROM derived_items WHERE scope = ?"
        if items is None:
            rows = self._conn.execute(query, (scope_id,)).fetchall()
        else:
            rows = []
            for k in range(0, len(items), 500):
                part = list(items[k : k + 500])
                marks = ",".join("?" * len(part))
                rows += self._conn.execute(
                    f"{query} AND item IN ({marks})", (scope_id, *part)
                ).fetchall()
        return {r[0]: r[1:] for r in rows}

    @guarded("saving derived values")
    def save_derived(
        self, scope: str, rows: Iterable[tuple[int, int, int, int, int, int, int]]
    ) -> None:
        """Save derived values ``(item, rev, prev rev, next rev, a, b, c)`` of ``scope``
        (replacing the item's earlier row); part of the open transaction, if any.

        Raises
        ------
        StoreFullError
            When the disk is full; nothing is saved.
        """
        self._save_rows(scope, "derived_items", rows)

    @guarded("dropping derived values")
    def drop_derived(self, scope: str, items: Iterable[int]) -> None:
        """Forget the derived values of ``items`` in ``scope``."""
        self._check_open()
        self._check_not_aborted()
        scope_id = self._scope_id(scope, create=False)
        if scope_id is None:
            return
        with self.transaction():
            self._conn.executemany(
                "DELETE FROM derived_items WHERE scope = ? AND item = ?",
                ((scope_id, i) for i in items),
            )

    @guarded("reading a derived blob")
    def derived_blob(self, key: str) -> bytes | None:
        """A blob saved by :meth:`save_derived_blob` (not a record: never branched)."""
        row = self._conn.execute("SELECT data FROM derived_blobs WHERE key = ?", (key,)).fetchone()
        return None if row is None else bytes(row[0])

    @guarded("saving a derived blob")
    def save_derived_blob(self, key: str, data: bytes) -> None:
        """Save (replace) the blob ``key``; part of the open transaction, if any.

        Raises
        ------
        StoreFullError
            When the disk is full; nothing is saved.
        """
        self._check_open()
        self._check_not_aborted()
        with self.transaction():
            self._sql.defer(self._conn, self._sql.upsert["derived_blobs"], (key, data))

    @guarded("reading saved counts")
    def derived_counts(self, scope: str) -> dict[bytes, int]:
        """Counts saved by :meth:`save_counts` under ``scope``: digest -> count.

        Like :meth:`derived_items` they are not records: a digest names what was
        counted, so a count is right on every branch."""
        scope_id = self._scope_id(scope, create=False)
        if scope_id is None:
            return {}
        rows = self._conn.execute(
            "SELECT digest, tokens FROM derived_counts WHERE scope = ?", (scope_id,)
        ).fetchall()
        return {bytes(d): int(t) for d, t in rows}

    @guarded("saving counts")
    def save_counts(self, scope: str, rows: Iterable[tuple[bytes, int]]) -> None:
        """Save ``(digest, count)`` pairs under ``scope``; part of the open transaction.

        Raises
        ------
        StoreFullError
            When the disk is full; nothing is saved.
        """
        self._save_rows(scope, "derived_counts", rows)

    def _save_rows(self, scope: str, table: str, rows: Iterable[Any]) -> None:
        """Insert ``rows`` (each a tuple, the scope column first added) into ``table``."""
        self._check_open()
        self._check_not_aborted()
        with self.transaction():
            scope_id = self._scope_id(scope, create=True)
            self._conn.executemany(self._sql.upsert[table], ((scope_id, *row) for row in rows))

    def _scope_id(self, scope: str, *, create: bool) -> int | None:
        known = self._scopes.get(scope)
        if known is not None:
            return known
        row = self._conn.execute(
            "SELECT id FROM derived_scopes WHERE name = ?", (scope,)
        ).fetchone()
        if row is None:
            if not create:
                return None
            scope_id = self._sql.insert_id(
                self._conn, "INSERT INTO derived_scopes (name) VALUES (?)", (scope,)
            )
            # a scope created in a transaction that rolls back is not remembered
            return scope_id
        self._scopes[scope] = int(row[0])
        return int(row[0])
