"""An append-only record store on SQLite or PostgreSQL, with branches by copy-on-write.

Every write is a *record* with a sequence number, in a named *slot*:

* append slots hold items (``append`` adds one, ``edit`` replaces its body,
  ``redact`` removes it);
* snapshot slots hold one value (``set``; the latest wins).

A branch sees its own records plus its parent's up to the sequence it was cut
at, recursively, so branching copies nothing. The base64 data of large images in
appended or edited bodies (:data:`MEDIA_BLOB_MIN_CHARS`) is kept once in a
content-addressed blob table (sha256, so an image sent twice is stored once) and
read back into the body whenever the item is read.

Durability: WAL journal and one SQLite transaction per logical write (see
:meth:`Store.transaction`). A process killed at any instant loses at most the
transaction in flight. A write that fails (the disk is full, the file went
bad) rolls back whole and raises a :class:`StoreError` naming the file; it
stores nothing, and the store stays usable.

The package splits the store by job: :mod:`.errors` (the typed errors),
:mod:`.schema` (the tables), :mod:`.bodies` (record bodies, media blobs and
:class:`Item`), :mod:`.files` (the file's path, permissions, writer lock and names),
:mod:`.scratch_folders` (where a derive, repair or audit writes),
:mod:`.connection` (the connection's state, transactions and blobs), :mod:`.slots`,
:mod:`.branches` and :mod:`.derived` (the parts of the store's API) and
:mod:`.opening` (:class:`Store`: opening a file, deriving a new one), :mod:`.dialect`
(what differs between engines), :mod:`.postgres` (:class:`~.postgres.PostgresStore`,
an agent's store in PostgreSQL, imported when a ``postgresql://`` URL is opened) and
:mod:`.contract` (:class:`RecordStore`, what the manager needs of any of them). This
module is the facade: its names are the public ones.
"""

from __future__ import annotations

from .bodies import MEDIA_BLOB_MIN_CHARS as MEDIA_BLOB_MIN_CHARS
from .bodies import Item
from .branches import Branch
from .contract import RecordStore
from .errors import (
    NotAStoreError,
    StoreAliasError,
    StoreAliasWarning,
    StoreConnectionError,
    StoreCorruptError,
    StoreError,
    StoreFullError,
    StoreLockedError,
)
from .errors import damaged as damaged
from .files import STORE_MODE as STORE_MODE
from .files import copy_private as copy_private
from .opening import URL_ENGINES, Engine, Store
from .schema import SCHEMA as SCHEMA
from .schema import STORE_TABLES
from .schema import check_store_tables as check_store_tables
from .schema import store_tables as store_tables
from .scratch_folders import SCRATCH_KINDS as SCRATCH_KINDS
from .scratch_folders import scratch as scratch
from .scratch_folders import sweep_scratch as sweep_scratch


def _postgres_engine() -> Engine:
    """PostgreSQL's engine, imported when a ``postgresql://`` URL is first used."""
    try:
        from .postgres import ENGINE
    except ImportError as exc:
        raise StoreError(
            "a postgresql:// store needs psycopg 3: pip install 'context-folding[postgres]' "
            f"({exc})"
        ) from exc
    return ENGINE


URL_ENGINES["postgresql"] = URL_ENGINES["postgres"] = _postgres_engine

__all__ = [
    "STORE_TABLES",
    "Branch",
    "Item",
    "NotAStoreError",
    "RecordStore",
    "Store",
    "StoreAliasError",
    "StoreAliasWarning",
    "StoreConnectionError",
    "StoreCorruptError",
    "StoreError",
    "StoreFullError",
    "StoreLockedError",
]
