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

import bisect
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any

from ...receipts import LAST_SLOT, FoldReceipt, last_receipt
from ..base import StrategyContext
from .state import State

__all__ = [
    "STABILITY_SLOT",
    "Stability",
    "accepted_carried",
    "accepted_head",
    "accepted_receipt",
    "advance",
    "leaf_stability",
    "position_runs",
    "save_stability",
    "stability",
]


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
    stale record) the later start wins.

    Examples
    --------
    >>> position = {"a": 0, "b": 1, "c": 2, "d": 3}
    >>> position_runs([("c", "d", 2), ("a", "b", 1), ("x", "y", 1)], position)
    [(0, 1, 1), (2, 3, 2)]
    """
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


# ------------------------------------------------------------------ stability (tau)
STABILITY_SLOT = "fold-stability"
"""The snapshot of a branch's stability table under the namespace
(``<namespace>/fold-stability``): see :class:`Stability`."""

_Rep = tuple[str | None, int]
"""How a message was shown: ``(memory id, level)``, ``(None, 0)`` for raw."""


@dataclass(frozen=True)
class Stability:
    """For each message an accepted request covered, the accepted presentation in
    which its representation last changed, as runs.

    ``presentations`` counts the receipts that changed the layout (a receipt with the
    layout hash of the one before, a keep-alive round, does not advance it: the
    reference's ``currentSeq``); ``runs`` are ``(first id, last id, memory, level,
    changed)`` in message order, ``changed`` the count at the receipt that last changed
    them (the reference's ``lastChangedSeq``). A message's tau is ``presentations -
    changed``. It reflects receipt ``seq`` of ``branch``.

    Examples
    --------
    >>> table = Stability("main", 3, 2, "0" * 64, (("1", "4", "L1-0", 1, 1),))
    >>> Stability.from_body("main", table.body()) == table
    True
    """

    branch: str
    seq: int
    presentations: int
    layout_hash: str
    runs: tuple[tuple[str, str, str | None, int, int], ...]

    def body(self) -> dict[str, Any]:
        """The stored form (the branch is the snapshot's own)."""
        return {
            "seq": self.seq,
            "presentations": self.presentations,
            "layout_hash": self.layout_hash,
            "runs": [list(r) for r in self.runs],
        }

    @classmethod
    def from_body(cls, branch: str, body: Any) -> Stability | None:
        """The table a stored ``body`` holds; None for one of another shape (the table
        is then started again from the newest receipt)."""
        try:
            runs = tuple(
                (str(a), str(b), None if m is None else str(m), int(lv), int(ch))
                for a, b, m, lv, ch in body["runs"]
            )
            return cls(
                branch, int(body["seq"]), int(body["presentations"]), str(body["layout_hash"]), runs
            )
        except (KeyError, TypeError, ValueError):
            return None


def _unit_runs(receipt: FoldReceipt, position: dict[str, int]) -> list[tuple[int, int, _Rep]]:
    """A receipt's units as position runs ``(first, last, rep)``, in order (a unit
    naming a message no longer stored left out)."""
    out = []
    for u in receipt.units:
        a, b = position.get(u.first), position.get(u.last)
        if a is not None and b is not None and a <= b:
            out.append((a, b, (u.memory, -1 if u.level is None else u.level)))
    out.sort(key=lambda r: (r[0], r[1]))
    return out


def _table_runs(table: Stability, position: dict[str, int]) -> list[tuple[int, int, _Rep, int]]:
    """A table's runs as position runs ``(first, last, rep, changed)``, in order and
    disjoint (a run naming a message no longer stored, or overlapping one before it,
    left out)."""
    out = []
    for first, last, memory, level, changed in table.runs:
        a, b = position.get(first), position.get(last)
        if a is not None and b is not None and a <= b:
            out.append((a, b, (memory, level), changed))
    out.sort(key=lambda r: (r[0], r[1]))
    disjoint: list[tuple[int, int, _Rep, int]] = []
    for run in out:
        if not disjoint or run[0] > disjoint[-1][1]:
            disjoint.append(run)
    return disjoint


def advance(
    table: Stability | None,
    receipt: FoldReceipt,
    position: dict[str, int],
    ids: Sequence[str],
    branch: str,
) -> Stability:
    """The table once ``receipt`` is accepted after the one ``table`` reflects.

    A receipt with the layout hash of the last is a keep-alive: nothing changes but
    the receipt reflected. Otherwise the presentation count advances, and each
    message keeps its ``changed`` where the receipt shows it as the table did (the same
    memory at the same level, or raw) and takes the new count elsewhere (shown
    otherwise, or not covered before). Without ``table`` (or one the receipt does not
    follow) every message is stamped as changed at presentation 1: tau 0, as the
    reference's migration of carried resolutions does. The work is the receipt's units
    plus the table's runs, whatever the number of messages they cover. ``ids`` are the
    stored message ids by position; ``branch`` the current one (a receipt inherited
    from the branch forked from names that one).

    Examples
    --------
    >>> from context_manager.receipts import FoldReceipt, ReceiptUnit, layout_hash
    >>> def accepted(seq, *units):
    ...     made = tuple(ReceiptUnit(memory=m, level=lv, first=a, last=b, messages=1)
    ...                  for m, lv, a, b in units)
    ...     return FoldReceipt(seq=seq, compile_id=str(seq), branch="main", accepted_at=0.0,
    ...                        units=made, request_hash="0" * 64, layout_hash=layout_hash(made))
    >>> ids = ["a", "b", "c", "d"]
    >>> position = {x: i for i, x in enumerate(ids)}
    >>> first = advance(None, accepted(1, (None, 0, "a", "c")), position, ids, "main")
    >>> second = advance(first, accepted(2, ("L1-0", 1, "a", "b"), (None, 0, "c", "d")),
    ...                  position, ids, "main")
    >>> second.presentations, second.runs
    (2, (('a', 'b', 'L1-0', 1, 2), ('c', 'c', None, 0, 1), ('d', 'd', None, 0, 2)))
    """
    follows = table is not None and table.branch == branch and table.seq == receipt.seq - 1
    if table is not None and follows and receipt.layout_hash == table.layout_hash:
        return replace(table, seq=receipt.seq)
    if table is None or not follows:
        now, before = 1, []
    else:
        now, before = table.presentations + 1, _table_runs(table, position)
    starts = [r[0] for r in before]
    pieces: list[tuple[int, int, _Rep, int]] = []

    def emit(a: int, b: int, rep: _Rep, changed: int) -> None:
        last = pieces[-1] if pieces else None
        if last is not None and last[1] + 1 == a and last[2] == rep and last[3] == changed:
            pieces[-1] = (last[0], b, rep, changed)
        else:
            pieces.append((a, b, rep, changed))

    for a, b, rep in _unit_runs(receipt, position):
        x = a
        k = bisect.bisect_right(starts, x) - 1
        if k < 0 or before[k][1] < x:
            k += 1  # before[k]: the first run ending at or after x (they are disjoint)
        while x <= b:
            if k < len(before) and before[k][0] <= x:  # it covers x
                end = min(b, before[k][1])
                emit(x, end, rep, before[k][3] if before[k][2] == rep else now)
                if end == before[k][1]:
                    k += 1
            else:  # not covered before: up to the next run, or the unit's end
                end = b if k >= len(before) else min(b, before[k][0] - 1)
                emit(x, end, rep, now)
            x = end + 1
    runs = tuple((ids[a], ids[b], rep[0], rep[1], changed) for a, b, rep, changed in pieces)
    return Stability(branch, receipt.seq, now, receipt.layout_hash, runs)


def stability(
    st: State, ctx: StrategyContext, position: dict[str, int], ids: Sequence[str]
) -> tuple[Stability, bool] | None:
    """The stability table of the newest receipt of the branch, and whether it is not
    the one stored yet (None before the first receipt).

    It is read from its snapshot once per branch, kept in memory, and advanced by
    :func:`advance` when a new receipt appears (one per live compile at most: only the
    last live compile can be accepted), so a compile's work is bounded by one
    receipt's units and the table's runs."""
    found = accepted_receipt(st)
    if found is None:
        return None
    head, receipt = found
    kept = st.cache.get(("stability",))
    if kept is not None and kept[0] == head:
        return kept[1], kept[2]
    records = st.records
    assert records.store is not None
    table: Stability | None
    branch = head[0]
    if kept is not None and kept[1].branch == branch and kept[1].seq <= receipt.seq:
        table, unsaved = kept[1], kept[2]  # this branch's, as last advanced
    else:
        stored = records.store.get(records.slot(STABILITY_SLOT))
        table, unsaved = Stability.from_body(branch, stored), False
    if table is None or table.seq != receipt.seq:
        table, unsaved = advance(table, receipt, position, ids, branch), True
    st.cache[("stability",)] = (head, table, unsaved)
    return table, unsaved


def save_stability(st: State, table: Stability) -> None:
    """Store ``table`` as the branch's snapshot (a live compile's bookkeeping)."""
    records = st.records
    assert records.store is not None
    records.store.set(records.slot(STABILITY_SLOT), table.body())
    kept = st.cache.get(("stability",))
    if kept is not None and kept[1] is table:
        st.cache[("stability",)] = (kept[0], table, False)


def leaf_stability(
    table: Stability, position: dict[str, int], spans: Mapping[str, tuple[int, int]]
) -> dict[str, int]:
    """tau per leaf (``KvUnifiedConfig.stable_for``): for a leaf whose messages
    ``[start, end)`` the table covers whole, the presentations since the newest change
    among them; leaves with tau 0 (changed in the newest, or not all covered: new to
    the accepted request) are left out. ``spans`` are in message order.

    Examples
    --------
    >>> runs = (("a", "b", "L1-0", 1, 2), ("c", "c", None, 0, 4))
    >>> table = Stability("main", 5, 5, "0" * 64, runs)
    >>> position = {"a": 0, "b": 1, "c": 2, "d": 3}
    >>> leaf_stability(table, position, {"c-0": (0, 2), "c": (2, 3), "d": (3, 4)})
    {'c-0': 3, 'c': 1}
    """
    runs = _table_runs(table, position)
    out: dict[str, int] = {}
    k = 0
    for leaf, (start, end) in spans.items():
        while k < len(runs) and runs[k][1] < start:
            k += 1
        j, at, newest = k, start, 0
        while at < end and j < len(runs) and runs[j][0] <= at:
            newest = max(newest, runs[j][3])
            at = runs[j][1] + 1
            j += 1
        if at >= end:
            tau = table.presentations - newest
            if tau > 0:
                out[leaf] = tau
    return out
