"""The strategy's records in a store, as the audit sees them: reading them raw
(:func:`read_stored`) and writing a repair's actions back through the store's own
write API (:func:`apply_repair`). The only module of the audit that names the
strategy's slots.
"""

from __future__ import annotations

import heapq
from collections.abc import Sequence

from ..store import RecordStore, StoreError
from ..strategies.autobiographical.records import (
    CHUNK_COUNTER_SLOT,
    CHUNKS_SLOT,
    SUMMARIES_SLOT,
    ChunkRecord,
    next_chunk_number,
)
from ..window import WindowIndex, WindowRecord
from .model import Action, Op, Raw, StoredRecords


# --------------------------------------------------------------------- reading
def read_stored(
    store: RecordStore,
    namespace: str = "default",
    *,
    message_slot: str | None = None,
    auxiliary_slots: Sequence[str] = (),
) -> StoredRecords:
    """The branch's message ids and the strategy's raw records, as stored.

    Unlike :func:`~context_manager.strategies.autobiographical.read_records`, which
    reads what the strategy uses (skipping empty memories, keeping one record per
    id, failing on an unreadable one), this keeps every live record as it is.

    Parameters
    ----------
    store : RecordStore
        An open store, on the branch to audit.
    namespace : str
        The strategy namespace.
    message_slot : str, optional
        Where the messages are: by default ``<namespace>/messages`` when that slot
        holds any (a manager opened with ``isolate=True``), else ``messages``.
    auxiliary_slots : sequence of str
        Other writers' message slots the manager's record merges with its own, by
        the order they were stored (its ``auxiliary_views``).

    Returns
    -------
    StoredRecords
    """
    if message_slot is None:
        isolated = f"{namespace}/messages"
        message_slot = isolated if store.items(isolated) else "messages"
    chunks = store.items(f"{namespace}/{CHUNKS_SLOT}")
    counter = store.get(f"{namespace}/{CHUNK_COUNTER_SLOT}")
    if not isinstance(counter, int):
        known = [
            ChunkRecord(it.id, str(it.body.get("id", "")), [])
            for it in chunks
            if isinstance(it.body, dict)
        ]
        counter = next_chunk_number(known)
    items = store.items(message_slot)
    if auxiliary_slots:  # the other writers' rows, in the order stored
        others = [store.items(slot) for slot in auxiliary_slots]
        items = list(heapq.merge(items, *others, key=lambda i: i.seq))
    messages = tuple(it.id for it in items)
    log = read_window_log(store, namespace)
    window = _held(log, messages)
    return StoredRecords(
        messages=messages,
        summaries=tuple(
            Raw(it.id, it.body, it.rev) for it in store.items(f"{namespace}/{SUMMARIES_SLOT}")
        ),
        chunks=tuple(Raw(it.id, it.body, it.rev) for it in chunks),
        chunk_counter=counter,
        namespace=namespace,
        message_slot=message_slot,
        window=window,
        window_log=log if window is not None else (),
    )


def read_window_log(store: RecordStore, namespace: str) -> tuple[tuple[int, WindowRecord], ...]:
    """The namespace's window records, each with its store record number, in the order
    written; empty while the agent was never presented rows (the window is the record)
    or when they cannot be read (the manager refuses those itself).

    Examples
    --------
    >>> from context_manager.store import Store
    >>> with Store.open(":memory:") as store:
    ...     _ = store.append("default/window", {"kind": "present", "ids": ["b", "a"]})
    ...     [r.ids for _, r in read_window_log(store, "default")]
    [('b', 'a')]
    """
    try:
        return tuple(
            (it.rev, WindowRecord.from_body(it.body, it.seq))
            for it in store.items(f"{namespace}/window")
        )
    except ValueError:
        return ()


def _held(
    log: Sequence[tuple[int, WindowRecord]], messages: Sequence[str]
) -> tuple[str, ...] | None:
    """The rows of the window ``log`` leaves that the record holds, in window order."""
    if not log:
        return None
    index = WindowIndex.replay(r for _, r in log)
    held = set(messages)
    return tuple(i for i in index.held() if i in held)


# ------------------------------------------------------------------- applying
def apply_repair(store: RecordStore, records: StoredRecords, actions: Sequence[Action]) -> None:
    """Write ``actions`` to ``store`` through its write API, in one transaction.

    Parameters
    ----------
    store : RecordStore
        The store ``records`` was read from, on the same branch (a copy, for
        :func:`repair_store`).
    records : StoredRecords
    actions : sequence of Action
        From :func:`plan_repair`.

    Raises
    ------
    StoreError
        When a write fails; then nothing is written.
    """
    summaries, chunks = records.slot(SUMMARIES_SLOT), records.slot(CHUNKS_SLOT)
    counter = records.chunk_counter
    with store.transaction():
        for a in actions:
            slot = summaries if a.record == "summary" else chunks
            if a.op in (Op.DROP, Op.DROP_CHUNK):
                store.redact(slot, a.item)
                continue
            current = store.item(slot, a.item)
            if current is None:
                raise StoreError(f"{a.id} (item {a.item}) is not a live record of {slot}")
            body = dict(current.body)
            if a.op is Op.CLEAR_PARENT:
                body["parent_id"] = None
            elif a.op is Op.SET_PARENT:
                body["parent_id"] = a.parent
            elif a.op is Op.FIX_RANGE:
                body["first"], body["last"] = a.first, a.last
            elif a.op is Op.REOPEN_CHUNK:
                body["compressed"], body["summary_id"] = False, None
            elif a.op is Op.SPLIT_CHUNK:
                body.update(source_ids=list(a.runs[0]), compressed=False, summary_id=None)
                for new_id, run in zip(a.new_ids, a.runs[1:], strict=True):
                    store.append(chunks, ChunkRecord("", new_id, list(run)).body())
                    counter = max(counter, int(new_id.removeprefix("c-")) + 1)
                store.set(records.slot(CHUNK_COUNTER_SLOT), counter)
            store.edit(slot, a.item, body)
