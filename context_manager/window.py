"""One record, a window per agent: the rows an agent was shown, in the order shown.

Several managers can read one record (managers on one :class:`~.store.Store` under
different namespaces share its message slot). Each manager also has a *window*:
the rows its agent was shown, in the order it was shown them; its strategy and its
compiles read that. Until a host first calls
:meth:`~context_manager.ContextManager.present_rows` (``present_rows([])``
included) or a :meth:`~context_manager.ContextManager.retract_rows` that names a
row, the window is the record itself (*legacy mode*). After that it grows only by
presentation.

This module is the pure part: :class:`WindowIndex` replays the window's persisted
records (:class:`WindowRecord`) into the window as it stands, and answers where a
row stands in it. The manager stores the records (one per call, in an append slot
of its namespace, so a branch sees the records up to its branch point) and feeds
them here; nothing here reads or writes a store.

The records are of three kinds:

* ``write-down``: the window as it stood when the host first presented (the record,
  in its order). Its rows take ordinals ``0 .. n-1``.
* ``present``: the rows one :meth:`~context_manager.ContextManager.present_rows`
  call added, in the order given. Each takes the next ordinal.
* ``retract``: the rows one call took out (tombstones). An ordinal is never reused:
  a retraction leaves a hole, and a row presented again takes a new ordinal at the
  end of the window.

Examples
--------
>>> index = WindowIndex()
>>> index.legacy
True
>>> _ = index.apply(WindowRecord("write-down", ("a", "b")))
>>> index.apply(WindowRecord("present", ("c",), seq=7))
['c']
>>> index.apply(WindowRecord("retract", ("b",)))
['b']
>>> index.held(), [index.ordinal_of(x) for x in "abc"]
(['a', 'c'], [0, None, 2])
>>> index.status("b", in_record=True), index.status("z", in_record=False)
('undone', 'absent')
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any, Literal

from .arguments import check_ids
from .errors import UnknownMessageError

__all__ = [
    "RecordKind",
    "UnknownRowError",
    "WindowIndex",
    "WindowRecord",
    "WindowStatus",
    "check_ids",
]

WindowStatus = Literal["in", "out", "undone", "absent"]
"""Where a row stands: ``in`` the window; ``out`` of it (in the record, never
presented); ``undone`` (in the record, presented and then retracted); ``absent``
from the record."""

RecordKind = Literal["write-down", "present", "retract"]
_KINDS: tuple[RecordKind, ...] = ("write-down", "present", "retract")


class UnknownRowError(UnknownMessageError):
    """A window operation named rows that are not in the record (a ``KeyError``).

    Attributes
    ----------
    field : str
        The argument that named them (``ids``, ``message_id``; also ``param``).
    ids : tuple of str
        The ids that name no row, in the order given.
    """

    def __init__(self, field: str, ids: Sequence[str], where: str, fix: str) -> None:
        self.field = field
        named = tuple(ids)
        shown = ", ".join(repr(i) for i in named[:5])
        more = f" and {len(named) - 5} more" if len(named) > 5 else ""
        text = f"{field} names no row of the record {where}: {shown}{more}; {fix}"
        super().__init__(text, param=field, ids=named)


@dataclass(frozen=True)
class WindowRecord:
    """One persisted change of a window.

    Parameters
    ----------
    kind : {"write-down", "present", "retract"}
    ids : tuple of str
        The rows it enters or takes out, in order.
    seq : int
        The store sequence of the record (where a branch that keeps it is cut).
    """

    kind: RecordKind
    ids: tuple[str, ...]
    seq: int = 0

    def body(self) -> dict[str, Any]:
        """The record as stored (its sequence is the store's)."""
        return {"kind": self.kind, "ids": list(self.ids)}

    @classmethod
    def from_body(cls, body: Any, seq: int) -> WindowRecord:
        """A record read back from the store.

        Raises
        ------
        ValueError
            For a body this module did not write.
        """
        if not isinstance(body, dict) or body.get("kind") not in _KINDS:
            raise ValueError(f"not a window record: {body!r}")
        ids = body.get("ids")
        if not isinstance(ids, list) or not all(isinstance(i, str) for i in ids):
            raise ValueError(f"a window record's ids must be a list of strings: {body!r}")
        return cls(body["kind"], tuple(ids), seq)


class WindowIndex:
    """The window as its records leave it: which rows it holds, in order, with the
    ordinal each holds and the record that entered it.

    An empty index is in legacy mode (:attr:`legacy`): the window is the record, and
    the manager answers from the record instead.
    """

    __slots__ = ("_entered", "_next", "_ordinal", "_undone", "records")

    def __init__(self) -> None:
        self._ordinal: dict[str, int] = {}
        """Held rows -> ordinal; insertion order is ordinal order (a row entered again
        takes the highest ordinal and goes to the end)."""
        self._entered: dict[str, int | None] = {}
        """Held rows -> sequence of the ``present`` record that entered them (None for
        the write-down)."""
        self._undone: set[str] = set()
        """Rows presented and retracted since (not presented again)."""
        self._next = 0
        self.records = 0
        """Records applied."""

    @classmethod
    def replay(cls, records: Iterable[WindowRecord]) -> WindowIndex:
        """The index the records leave, applied in order."""
        index = cls()
        for record in records:
            index.apply(record)
        return index

    @property
    def legacy(self) -> bool:
        """No record yet: the window is the record itself."""
        return self.records == 0

    def __len__(self) -> int:
        return len(self._ordinal)

    def apply(self, record: WindowRecord) -> list[str]:
        """Apply one record; returns the rows it changed (entered or took out), in order.

        A ``write-down`` or ``present`` enters each row not held yet, in order (a row
        named twice, or held already, enters once); a ``retract`` takes out each held
        row it names.
        """
        changed: list[str] = []
        if record.kind == "retract":
            for i in record.ids:
                if self._ordinal.pop(i, None) is not None:
                    del self._entered[i]
                    self._undone.add(i)
                    changed.append(i)
        else:
            entered = None if record.kind == "write-down" else record.seq
            for i in record.ids:
                if i in self._ordinal:
                    continue
                self._ordinal[i] = self._next
                self._entered[i] = entered
                self._next += 1
                self._undone.discard(i)
                changed.append(i)
        self.records += 1
        return changed

    def new_rows(self, ids: Iterable[str]) -> list[str]:
        """The rows a ``present`` of ``ids`` would enter: those not held, each once, in
        the order given."""
        out: dict[str, None] = {}
        for i in ids:
            if i not in self._ordinal:
                out.setdefault(i, None)
        return list(out)

    def held_among(self, ids: Iterable[str]) -> list[str]:
        """The rows of ``ids`` the window holds, each once, in the order given: what a
        ``retract`` of ``ids`` would take out."""
        out: dict[str, None] = {}
        for i in ids:
            if i in self._ordinal:
                out.setdefault(i, None)
        return list(out)

    def holds(self, row: str) -> bool:
        """The window holds ``row``."""
        return row in self._ordinal

    def held(self) -> list[str]:
        """The rows the window holds, in window order (by ordinal)."""
        return list(self._ordinal)

    def ordinal_of(self, row: str) -> int | None:
        """The place of a held row in the window (None when it holds no such row).

        Ordinals never move: a retraction leaves a hole, and a row presented again
        takes a new ordinal, after every other."""
        return self._ordinal.get(row)

    def stamp(self, rows: Iterable[str], seq: int) -> None:
        """Give the held ``rows`` the sequence of the ``present`` record that entered
        them, once it is stored (a present is applied before its record is written, so
        the record closes the call that wrote it)."""
        for row in rows:
            if row in self._entered:
                self._entered[row] = seq

    def entered_at(self, row: str) -> int | None:
        """The sequence of the ``present`` record that entered a held row; None for a
        row the write-down entered, or one the window does not hold."""
        return self._entered.get(row)

    def was_undone(self, row: str) -> bool:
        """``row`` was presented and then retracted (and not presented again)."""
        return row in self._undone

    def status(self, row: str, *, in_record: bool) -> WindowStatus:
        """Where ``row`` stands, given whether the record holds it (see
        :data:`WindowStatus`); in legacy mode every row of the record is ``in``."""
        if not in_record:
            return "absent"
        if self.legacy or row in self._ordinal:
            return "in"
        return "undone" if row in self._undone else "out"
