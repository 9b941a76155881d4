"""The accepted request as a compile's continuity baseline.

With :attr:`~.config.AutobiographicalConfig.continuity_baseline` set to
``'accepted'``, a compile is stated against the newest fold receipt of the branch
(:mod:`context_manager.receipts`): what the provider holds, not what the last live
compile built. The receipt is read through the snapshot naming it
(:data:`~context_manager.receipts.LAST_SLOT`), one store read per compile (the store
keeps snapshots in memory), and parsed again only when that snapshot names another
receipt.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from ...receipts import LAST_SLOT, FoldReceipt, last_receipt
from ..base import StrategyContext
from .state import State

__all__ = ["accepted_carried", "accepted_head", "accepted_receipt", "position_runs"]


def accepted_head(st: State) -> tuple[str, int, str] | None:
    """``(branch, seq, item id)`` of the newest receipt of the current branch, from the
    snapshot naming it (None before the first, or without a store)."""
    records = st.records
    store = records.store
    if store is None:
        return None
    head = store.get(records.slot(LAST_SLOT))
    if not isinstance(head, dict) or not isinstance(head.get("item"), str):
        return None
    seq = head.get("seq")
    return store.branch, seq if isinstance(seq, int) else 0, head["item"]


def accepted_receipt(st: State) -> tuple[tuple[str, int, str], FoldReceipt] | None:
    """The newest receipt of the current branch and its head key (:func:`accepted_head`);
    read from the store only when the head names another receipt than last time."""
    head = accepted_head(st)
    if head is None:
        return None
    kept = st.cache.get(("accepted",))
    if kept is not None and kept[0] == head:
        return head, kept[1]
    records = st.records
    assert records.store is not None
    receipt = last_receipt(records.store, records.slot)
    if receipt is None:
        return None
    st.cache[("accepted",)] = (head, receipt)
    return head, receipt


def position_runs(
    runs: Sequence[tuple[str, str, int]], position: dict[str, int]
) -> list[tuple[int, int, int]]:
    """Frontier runs ``(first id, last id, level)`` as position runs, in order: runs
    naming a message no longer stored are left out, and of two overlapping runs (a
    stale record) the later start wins."""
    out = []
    for first_id, last_id, level in runs:
        a, b = position.get(first_id), position.get(last_id)
        if a is not None and b is not None and a <= b:
            out.append((a, b, level))
    out.sort()
    merged: list[tuple[int, int, int]] = []
    for a, b, level in out:
        if merged and a <= merged[-1][1]:
            merged[-1] = (merged[-1][0], a - 1, merged[-1][2])
            if merged[-1][1] < merged[-1][0]:
                merged.pop()
        merged.append((a, b, level))
    return merged


def accepted_carried(
    st: State, ctx: StrategyContext, position: dict[str, int]
) -> list[tuple[int, int, int]] | None:
    """The newest receipt's folds as position runs ``(first, last, level)``, in order
    (None before the first receipt). Cached on the receipt and the messages."""
    found = accepted_receipt(st)
    if found is None:
        return None
    head, receipt = found
    key: Any = (head, ctx.version(), len(position))
    kept = st.cache.get(("accepted-carried",))
    if kept is not None and kept[0] == key:
        return kept[1]  # type: ignore[no-any-return]
    merged = position_runs(receipt.runs(), position)
    st.cache[("accepted-carried",)] = (key, merged)
    return merged
