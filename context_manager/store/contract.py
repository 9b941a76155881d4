"""What the manager, its strategies and the tools need of a store: :class:`RecordStore`.

The manager is written against this protocol, not an engine: :class:`~.opening.Store`
(SQLite) and :class:`~.postgres.PostgresStore` (PostgreSQL) both implement it, and the
store tests that hold for every engine (``tests/context_manager/store``, taking the
``place`` fixture) are its conformance suite.

The rules every implementation keeps:

Records by slot and sequence
    Every write is a record with the next sequence number of the branch. An *append
    slot* holds items (:meth:`~RecordStore.append` gives each an id unique in the
    store, never given again, even after a rolled-back append; :meth:`~RecordStore.edit`
    replaces a live item's body; :meth:`~RecordStore.redact` removes it); a *snapshot
    slot* holds one value (:meth:`~RecordStore.set`; the latest wins).
Transactions
    :meth:`~RecordStore.transaction` is all or nothing, in the store and in what it
    reads back: a block that raises, or a write that fails inside it, leaves nothing
    of it. Nested blocks join the outer one; a transaction belongs to its thread and
    other threads wait for it.
Branches and lineage
    A branch sees its own records and its parent's up to the sequence it was cut at,
    recursively; :meth:`~RecordStore.switch_branch` is remembered across opens.
Blobs
    Large media in bodies is stored once by content hash and read back whole.
Derived tables
    Values derived from items (:meth:`~RecordStore.save_derived`), token counts by
    digest and derived blobs: not records, never branched, part of the open
    transaction when there is one.
One writer
    An open store holds its writer lock until :meth:`~RecordStore.close`: a second
    writer of the same store, in any process, is refused with
    :class:`~.errors.StoreLockedError`; a writer that dies releases it.
Derive and copy
    :meth:`~RecordStore.derive` writes a new store of this branch up to a sequence;
    :meth:`~RecordStore.copy_to` a copy of the whole store; each appears whole or not
    at all, at a new file or a new agent of a database, from either engine.
Errors
    Every failure is a :class:`~.errors.StoreError` naming the store and the fix
    (full: :class:`~.errors.StoreFullError`; damaged:
    :class:`~.errors.StoreCorruptError`; a lost server:
    :class:`~.errors.StoreConnectionError`).
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Sequence
from contextlib import AbstractContextManager
from typing import Any, Protocol, runtime_checkable

from .bodies import Item
from .branches import Branch


@runtime_checkable
class RecordStore(Protocol):
    """An agent's record: the store operations the manager and its strategies use.

    See the module's docstring for the rules every implementation keeps.

    Examples
    --------
    >>> from context_manager.store import Store
    >>> isinstance(Store.open(":memory:"), RecordStore)
    True
    """

    # -------------------------------------------------------------- the store
    @property
    def path(self) -> str:
        """Where the store is: its file, or its database URL naming the agent."""

    @property
    def closed(self) -> bool:
        """True after :meth:`close`."""

    def close(self) -> None:
        """Release the writer lock and the connection (idempotent)."""

    def transaction(self) -> AbstractContextManager[None]:
        """One atomic transaction for the block (nesting joins the outer one)."""

    def integrity_check(self) -> list[str]:
        """The engine's and the log's own checks; empty when healthy."""

    # ------------------------------------------------------------------ slots
    def append(self, slot: str, body: Any) -> Item:
        """Append an item to ``slot``; its id is unique in the store."""

    def edit(self, slot: str, item_id: str, body: Any) -> Item:
        """Replace the body of a live item."""

    def redact(self, slot: str, item_id: str) -> None:
        """Remove a live item (its records stay)."""

    def items(self, slot: str) -> list[Item]:
        """The live items of ``slot``, in append order, edits applied."""

    def item(self, slot: str, item_id: str) -> Item | None:
        """One live item, or None."""

    def set(self, slot: str, value: Any) -> None:
        """Store ``value`` as the snapshot of ``slot``."""

    def get(self, slot: str, default: Any = None) -> Any:
        """The snapshot of ``slot`` (``default`` when never set)."""

    def history(self, slot: str, limit: int) -> list[tuple[int, Any]]:
        """The newest ``limit`` snapshots of ``slot``, newest first, as ``(seq, value)``."""

    def records_after(self, slot: str, seq: int) -> list[tuple[str, str, int, int]]:
        """The records of ``slot`` after ``seq``: ``(op, item, seq, rev)``, oldest first."""

    def body_at(self, rev: int) -> Any:
        """The body the record ``rev`` wrote."""

    # --------------------------------------------------------------- branches
    @property
    def sequence(self) -> int:
        """The newest sequence number the current branch sees."""

    @property
    def branch(self) -> str:
        """The current branch's name."""

    @property
    def branch_id(self) -> int:
        """The current branch's id (what a derived value of one branch is keyed by)."""

    def branch_at(self, seq: int, name: str | None = None) -> str:
        """Cut a branch of the current one at ``seq``; returns its name."""

    def fork(self, name: str | None = None) -> str:
        """Branch at the head and switch to it."""

    def switch_branch(self, name: str) -> None:
        """Make ``name`` the current branch (remembered across opens)."""

    def list_branches(self) -> list[Branch]:
        """Every branch, oldest first."""

    # ------------------------------------------------------------------ blobs
    def put_blob(self, data: bytes) -> str:
        """Store ``data`` once; returns its sha256."""

    def get_blob(self, digest: str) -> bytes:
        """The blob with this sha256."""

    # --------------------------------------------------------- derived tables
    def derived_items(
        self, scope: str, items: Sequence[int] | None = None
    ) -> dict[int, tuple[int, int, int, int, int, int]]:
        """Saved derived values of ``scope``: item -> (rev, prev, next, a, b, c)."""

    def save_derived(
        self, scope: str, rows: Iterable[tuple[int, int, int, int, int, int, int]]
    ) -> None:
        """Save derived values ``(item, rev, prev, next, a, b, c)``, replacing each item's."""

    def drop_derived(self, scope: str, items: Iterable[int]) -> None:
        """Forget the derived values of ``items``."""

    def derived_blob(self, key: str) -> bytes | None:
        """A saved derived blob, or None."""

    def save_derived_blob(self, key: str, data: bytes) -> None:
        """Save (replace) a derived blob."""

    def derived_counts(self, scope: str) -> dict[bytes, int]:
        """Saved counts of ``scope``: digest -> count."""

    def save_counts(self, scope: str, rows: Iterable[tuple[bytes, int]]) -> None:
        """Save ``(digest, count)`` pairs under ``scope``."""

    # ------------------------------------------------------- derive and copy
    def derive(self, path: str | os.PathLike[str], seq: int) -> None:
        """Write a new store whose ``main`` branch is this branch up to ``seq``."""

    def copy_to(self, path: str | os.PathLike[str]) -> None:
        """Write a copy of the whole store."""

    def content_digest(self) -> dict[str, str]:
        """A digest of each table's rows: equal for stores holding the same record."""
