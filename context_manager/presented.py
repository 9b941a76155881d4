"""The agent's presented window, as a manager keeps it: the rows its agent was shown,
stored one record per call, and the view of them its strategy reads.

:class:`PresentedWindow` is the manager's part for this. Until a host presents (a
:meth:`~context_manager.ContextManager.present_rows`, or a ``retract_rows`` naming a
row) the window is the record itself and costs nothing; after that the strategy and
compiles read the window (:mod:`context_manager.window` holds the pure index).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from contextlib import suppress

from .arguments import check_ids, check_int
from .errors import ConfigError, ContextManagerError
from .pairing import SendForm
from .record_cache import Derived, Forms, RecordCache, copy_derived
from .store import RecordStore
from .strategies.base import StoredMessage
from .window import RecordKind, UnknownRowError, WindowIndex, WindowRecord, WindowStatus

__all__ = ["PresentedWindow"]


class PresentedWindow:
    """One manager's window over the record, and the view its strategy reads.

    Parameters
    ----------
    store : RecordStore
    records : RecordCache
        The record the window's rows come from.
    slot : str
        Where the window's records are stored (an append slot of the namespace).
    where : callable
        Says where the manager stands (its branch), for errors.
    presented : callable
        Tells the strategy rows entered the window (part of the open transaction).
    retracted : callable
        Tells the strategy rows left the window (part of the open transaction).
    changed : callable
        Called when rows left the window (the manager's version moves on).
    wake : callable
        Called when there may be new work for the background worker.
    """

    def __init__(
        self,
        store: RecordStore,
        records: RecordCache,
        slot: str,
        *,
        where: Callable[[], str],
        presented: Callable[[list[StoredMessage]], None],
        retracted: Callable[[list[str]], None],
        changed: Callable[[], None],
        wake: Callable[[], None],
    ) -> None:
        self.store = store
        self.records = records
        self.slot = slot
        self._where = where
        self._presented = presented
        self._retracted = retracted
        self._changed = changed
        self._wake = wake
        self._index: WindowIndex | None = None
        """The window as its records leave it (read when first needed)."""
        self._view: list[StoredMessage] | None = None
        """Once a host presents: the window's rows the record holds, in window order."""
        self._derived = Derived()
        """The per-message values of :attr:`_view`, aligned with it."""

    def forget(self) -> None:
        """Read the window again on next use (the store changed under it)."""
        self._index = None
        self._view = None

    # ------------------------------------------------------------------ reads
    def index(self) -> WindowIndex:
        """The window as its records leave it (read on first use after :meth:`forget`).

        Raises
        ------
        ContextManagerError
            When the slot holds a record this code did not write.
        """
        if self._index is None:
            try:
                records = [
                    WindowRecord.from_body(i.body, i.seq) for i in self.store.items(self.slot)
                ]
            except ValueError as exc:
                raise ContextManagerError(
                    f"slot {self.slot!r} holds a record this code did not write "
                    f"({exc}); open the store under another namespace"
                ) from None
            self._index = WindowIndex.replay(records)
        return self._index

    @property
    def presenting(self) -> bool:
        """Whether a host presents rows (the window is no longer the record)."""
        return not self.index().legacy

    def view(self) -> list[StoredMessage]:
        """What the strategy reads (``StrategyContext.messages``): the record until a
        host presents; then the window's rows the record holds, in window order."""
        window = self.index()
        if window.legacy:
            return self.records.messages()
        if self._view is None:
            live = {s.id: s for s in self.records.messages()}
            view = [live[i] for i in window.held() if i in live]
            derived = copy_derived(None, len(view))
            self._take_saved(view, derived)
            self._view, self._derived = view, derived
        return self._view

    def out_of_window(self) -> set[str]:
        """The record's rows the window does not hold (none while it is the record)."""
        if not self.presenting:
            return set()
        shown = {m.id for m in self.view()}
        return {m.id for m in self.records.messages() if m.id not in shown}

    def sent(self) -> tuple[Sequence[int], Sequence[bool]]:
        """``StrategyContext.sent`` over :meth:`view`."""
        if not self.presenting:
            return self.records.sent()
        view = self.view()
        derived = self._derived
        self.records.fill(view, derived)
        return derived.tokens, derived.tied

    def forms(self) -> tuple[Sequence[SendForm], Sequence[int]]:
        """``StrategyContext.forms`` over :meth:`view`."""
        if not self.presenting:
            return self.records.sent_forms()
        tokens, _ = self.sent()
        return Forms(len(self.view()), self._derived, self._form), tokens

    def revision(self) -> int:
        """``StrategyContext.sent_revision`` over :meth:`view`."""
        return (self._derived if self.presenting else self.records.derived).revision

    def ordinal_of(self, message_id: str) -> int | None:
        """A row's place in the window (see ``ContextManager.ordinal_of``)."""
        if not self.presenting:
            try:
                return self.records.position(message_id)
            except KeyError:
                return None
        return self.index().ordinal_of(message_id)

    def status_of(self, message_id: str) -> WindowStatus:
        """Where a row stands (see ``ContextManager.window_status_of``)."""
        return self.index().status(message_id, in_record=bool(self.record_ids([message_id])))

    def unpresented(self, after_sequence: int | None) -> list[StoredMessage]:
        """The rows of the record never presented (see
        ``ContextManager.get_unpresented_messages``)."""
        if after_sequence is not None:
            check_int(
                after_sequence,
                "after_sequence",
                low=0,
                hint="a store sequence such as current_sequence()",
            )
        if not self.presenting:
            return []
        window = self.index()
        stored = self.records.messages()
        start = len(stored)
        if after_sequence is None:
            start = 0
        else:  # the record is in sequence order: only the newest are read
            while start > 0 and stored[start - 1].seq > after_sequence:
                start -= 1
        return [s for s in stored[start:] if not window.holds(s.id) and not window.was_undone(s.id)]

    def branch_sequence_of(self, message_id: str) -> int:
        """The sequence a branch at ``message_id`` cuts at (see
        ``ContextManager.branch_sequence_of``)."""
        try:
            at = self.records.position(message_id)
        except KeyError:
            raise UnknownRowError(
                "message_id",
                [message_id],
                self._where(),
                f"no message with id {message_id!r}; branch at a stored message",
            ) from None
        own = self.records.messages()[at].seq
        entered = self.index().entered_at(message_id)
        return own if entered is None else max(own, entered)

    def record_ids(self, ids: Sequence[str]) -> set[str]:
        """Which of ``ids`` the record holds (a few are looked up from the newest end,
        many through one index of the record)."""
        if len(ids) <= 8:
            found = set()
            for i in ids:
                with suppress(KeyError):
                    self.records.position(i)
                    found.add(i)
            return found
        wanted = set(ids)
        return {s.id for s in self.records.messages() if s.id in wanted}

    # -------------------------------------------------------------- changes
    def present(self, ids: Sequence[str]) -> list[str]:
        """Show rows of the record to the agent (see ``ContextManager.present_rows``)."""
        wanted = check_ids(ids)
        rows = self._rows_named(wanted, "ids", "present only rows add_message stored")
        self._write_down()
        index = self.index()
        new = index.new_rows(wanted)
        if not new:
            return []
        # The rows enter the window, the strategy hears them (and writes what it
        # keeps), then the window's record closes the call: a branch cut at it keeps
        # everything the call wrote.
        index.apply(WindowRecord("present", tuple(new)))
        entered = [rows[i] for i in new]
        if self._view is not None:
            for stored in entered:
                self._view.append(stored)
                self._derived.appended(len(self._view))
        self._presented(entered)
        item = self.store.append(self.slot, WindowRecord("present", tuple(new)).body())
        index.stamp(new, item.seq)
        self._wake()
        return new

    def retract(self, ids: Sequence[str]) -> list[str]:
        """Take rows out of the window (see ``ContextManager.retract_rows``)."""
        wanted = check_ids(ids)
        window = self.index()
        record = self.record_ids(wanted)
        unknown = [i for i in dict.fromkeys(wanted) if i not in record and not window.holds(i)]
        if unknown:
            raise UnknownRowError(
                "ids",
                unknown,
                self._where(),
                "retract only rows the window holds (retract_removed takes out rows "
                "another manager removed)",
            )
        if not wanted:
            return []
        self._write_down()
        out = self.index().held_among(wanted)
        if out:
            self.take_out(out)
        return out

    def retract_removed(self, ids: Sequence[str]) -> list[str]:
        """Take out rows another manager removed (see
        ``ContextManager.retract_removed``)."""
        wanted = list(dict.fromkeys(check_ids(ids)))
        record = self.record_ids(wanted)
        still = [i for i in wanted if i in record]
        if still:
            shown = ", ".join(repr(i) for i in still[:5])
            raise ConfigError(
                f"retract_removed() takes out rows the record no longer holds, but "
                f"{shown} {'is' if len(still) == 1 else 'are'} still in it; take a row "
                "the record holds out of the window with retract_rows()"
            )
        if not self.presenting:
            if wanted:
                self._retracted(wanted)
            return []
        out = self.index().held_among(wanted)
        if out:
            self.take_out(out)
        return out

    def retract_absent(self) -> list[str]:
        """Take out every row the record no longer holds (see
        ``ContextManager.retract_absent_rows``)."""
        if not self.presenting:
            return []
        held = self.index().held()
        record = self.record_ids(held)
        out = [i for i in held if i not in record]
        if out:
            self.take_out(out)
        return out

    def edited(self, stored: StoredMessage) -> None:
        """An edited message takes its new body in the view too."""
        view = self._view
        if view is None or not self.presenting:
            return
        for at in range(len(view) - 1, -1, -1):
            if view[at].id == stored.id:
                view[at] = stored
                self._derived.edited(at, len(view))
                return

    # ------------------------------------------------------------- helpers
    def _form(self, i: int) -> SendForm:
        return self.records.kept_form(self.view(), self._derived, i)

    def _take_saved(self, view: list[StoredMessage], derived: Derived) -> None:
        """Take the saved per-message values that still hold for the rows of ``view``
        (those computed with the same neighbours)."""
        if not view or not derived.stale:
            return
        rows = self.store.derived_items(self.records.scope, [int(s.id) for s in view])
        derived.take(view, rows, sorted(derived.stale))

    def _rows_named(self, ids: Sequence[str], field: str, fix: str) -> dict[str, StoredMessage]:
        """The stored messages ``ids`` name, by id.

        Raises
        ------
        UnknownRowError
            Naming every id the record does not hold.
        """
        stored = self.records.messages()
        rows: dict[str, StoredMessage] = {}
        if len(ids) <= 8:
            for i in ids:
                with suppress(KeyError):
                    rows[i] = stored[self.records.position(i)]
        else:
            wanted = set(ids)
            rows = {s.id: s for s in stored if s.id in wanted}
        unknown = [i for i in dict.fromkeys(ids) if i not in rows]
        if unknown:
            raise UnknownRowError(field, unknown, self._where(), fix)
        return rows

    def _write(self, kind: RecordKind, ids: list[str]) -> None:
        """Store one record of the window and apply it."""
        body = WindowRecord(kind, tuple(ids)).body()
        item = self.store.append(self.slot, body)
        self.index().apply(WindowRecord(kind, tuple(ids), item.seq))

    def _write_down(self) -> None:
        """Leave legacy mode: the window, as it stands (the record), becomes a record."""
        if self.presenting:
            return
        record = self.records.messages()
        self._write("write-down", [s.id for s in record])
        self._view = list(record)  # the same rows, in the same order
        self._derived = copy_derived(self.records.derived, len(record))
        if not self.records.derived.loaded:
            self._take_saved(self._view, self._derived)

    def take_out(self, ids: list[str]) -> None:
        """Tombstone rows the window holds, drop them from the view and tell the
        strategy (part of the open transaction)."""
        self._write("retract", ids)
        view = self._view
        if view is not None:
            gone = set(ids)
            for at in range(len(view) - 1, -1, -1):
                if view[at].id in gone:
                    del view[at]
                    self._derived.removed(at, len(view))
        self._changed()
        self._retracted(ids)
        self._wake()
