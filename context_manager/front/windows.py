"""The agent's presented window over the record, and the store's branches."""

from __future__ import annotations

import os
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING

from ..arguments import (
    check_id,
    check_int,
    check_path,
    check_text,
)
from ..compiler import MAX_CATCH_UP_RECHECKS as MAX_CATCH_UP_RECHECKS
from ..compiler import MAX_CATCH_UP_TICKS as MAX_CATCH_UP_TICKS
from ..errors import (
    ConfigError,
)
from ..operations import operation
from ..store import Branch
from ..strategies.base import (
    StoredMessage,
)
from ..window import (
    WindowStatus,
)

if TYPE_CHECKING:
    from ..manager import ContextManager

__all__ = ["WindowsFront"]


class WindowsFront:
    """The methods of :class:`~context_manager.ContextManager` for one job (see the
    module docstring); mixed into the manager, never used alone."""

    # ------------------------------------------------------------------ windows
    # One record, a window per agent: until a host presents (present_rows, or a
    # retract_rows naming a row) the window is the record and costs nothing; after
    # that the strategy and compiles read the window (see context_manager.window).
    @property
    def presenting(self: ContextManager) -> bool:
        """True once a host presents rows: the window is no longer the record itself
        but grows only through :meth:`present_rows`.

        Examples
        --------
        >>> from context_manager import ContextManager, CharsCounter
        >>> with ContextManager.open(path=":memory:", counter=CharsCounter()) as cm:
        ...     before = cm.presenting
        ...     _ = cm.present_rows([])  # a host's boot: the window starts as the record
        ...     before, cm.presenting
        (False, True)
        """
        return self._is_presenting()

    @operation()
    def _is_presenting(self: ContextManager) -> bool:
        return self._presented.presenting

    @operation(writes=True)
    def present_rows(self: ContextManager, ids: Sequence[str]) -> list[str]:
        """Show rows of the record to this manager's agent: they enter its window, in
        the order given, after every row it holds; returns the rows that entered.

        A shard of a body stored in parts (the id :meth:`add_message` returned for it)
        presents the whole body, every shard in order.

        The first call (``present_rows([])`` included: a host's boot) writes the window
        down as it stands, the record itself, and from then on the window grows only
        through this call: a message added later waits until it is presented, whoever
        added it. A row the window holds already, or named twice, enters once; a row
        presented again after :meth:`retract_rows` enters at the end, with a new
        ordinal (:meth:`ordinal_of`). The strategy hears the rows that entered
        (``on_presented``) in the same transaction, and each call is one record of the
        store, so the window survives a reopen and follows branches.

        Parameters
        ----------
        ids : sequence of str
            Message ids of the record, in the order the agent is shown them.

        Returns
        -------
        list of str
            The rows that entered the window, in order (empty when it held them all).

        Raises
        ------
        UnknownRowError
            When an id names no message of the record (a ``KeyError``; nothing is
            presented, nor written down).
        ConfigError
            When ``ids`` is a single string or holds something other than strings.

        Examples
        --------
        >>> from context_manager import ContextManager, CharsCounter
        >>> with ContextManager.open(path=":memory:", counter=CharsCounter()) as cm:
        ...     _ = cm.present_rows([])
        ...     mine = cm.add_message("User", "my question")
        ...     theirs = cm.add_message("Other", "another agent's note")
        ...     before = [m.message.text for m in cm.get_window_messages()]
        ...     entered = cm.present_rows([theirs, mine, theirs])
        ...     after = [m.text for m in cm.compile(max_tokens=500).messages]
        >>> before, entered == [theirs, mine], after
        ([], True, ["another agent's note", 'my question'])
        """
        if isinstance(ids, list | tuple):  # a shard presents its whole body
            ids = self._whole_bodies(ids)
        return self._presented.present(ids)

    @operation(writes=True)
    def retract_rows(self: ContextManager, ids: Sequence[str]) -> list[str]:
        """Take rows out of this manager's window (an undone turn); returns the rows
        taken out.

        A shard of a body stored in parts takes the whole body out.

        A retracted row leaves a hole: the other rows keep their ordinals, and the row
        stays in the record (:meth:`window_status_of` says ``"undone"``) until
        :meth:`present_rows` shows it again, at the end of the window. The strategy
        hears the rows that left (``on_retracted``) in the same transaction: the
        autobiographical strategy drops the memories over them and remembers again
        what those memories kept. While the window is the record, a call that names a
        row writes the window down first (as :meth:`present_rows` does), so from then
        on the window grows only by presentation; one that names none changes nothing.

        Parameters
        ----------
        ids : sequence of str
            Rows to take out; a row the window does not hold is skipped.

        Returns
        -------
        list of str
            The rows taken out, each once, in the order given.

        Raises
        ------
        UnknownRowError
            When an id names neither a message of the record nor a row the window
            holds (nothing is taken out).
        ConfigError
            When ``ids`` is a single string or holds something other than strings.

        Examples
        --------
        >>> from context_manager import ContextManager, CharsCounter
        >>> with ContextManager.open(path=":memory:", counter=CharsCounter()) as cm:
        ...     ask = cm.add_message("User", "question")
        ...     reply = cm.add_message("Claude", "a reply to undo")
        ...     out = cm.retract_rows([reply])
        ...     sent = [m.text for m in cm.compile(max_tokens=500).messages]
        ...     status = cm.window_status_of(reply)
        >>> out == [reply], sent, status
        (True, ['question'], 'undone')
        """
        if isinstance(ids, list | tuple):  # a shard takes its whole body out
            ids = self._whole_bodies(ids)
        return self._presented.retract(ids)

    @operation(writes=True)
    def retract_removed(self: ContextManager, ids: Sequence[str]) -> list[str]:
        """Take out of this window rows another manager removed from the shared record;
        returns the rows taken out.

        A removal through another manager is not heard here: the record no longer
        holds the rows, but this window (and this manager's strategy) still does. This
        call takes them out and tells the strategy (``on_retracted``, by id alone: the
        store no longer holds the rows), so a folding strategy drops the memories over
        them as the remover's did. While the window is the record the rows are out of
        it already and nothing is written, but the strategy is still told. A row the
        window does not hold is skipped.

        Raises
        ------
        ConfigError
            When a row is still in the record (use :meth:`retract_rows`), or ``ids`` is
            a single string or holds something other than strings.

        Examples
        --------
        >>> from context_manager import CharsCounter, ContextManager, Store
        >>> with Store.open(":memory:") as store:
        ...     a = ContextManager.open(store=store, namespace="a", counter=CharsCounter())
        ...     b = ContextManager.open(store=store, namespace="b", counter=CharsCounter())
        ...     _ = b.present_rows([])
        ...     row = a.add_message("User", "shared, then removed")
        ...     _ = b.present_rows([row])
        ...     a.remove_message(row)
        ...     before = b.ordinal_of(row)
        ...     out = b.retract_removed([row])
        ...     after = b.ordinal_of(row)
        ...     a.close(); b.close()
        >>> before, out == [row], after
        (0, True, None)
        """
        return self._presented.retract_removed(ids)

    @operation(writes=True)
    def retract_absent_rows(self: ContextManager) -> list[str]:
        """Take out of this window every row it holds that the record no longer does (a
        host's boot pass over rows other managers removed); returns them, in window
        order.

        The strategy is told as by :meth:`retract_removed`. While the window is the
        record it holds nothing the record lacks: nothing changes.

        Examples
        --------
        >>> from context_manager import CharsCounter, ContextManager, Store
        >>> with Store.open(":memory:") as store:
        ...     a = ContextManager.open(store=store, namespace="a", counter=CharsCounter())
        ...     b = ContextManager.open(store=store, namespace="b", counter=CharsCounter())
        ...     rows = [a.add_message("User", f"m{i}") for i in range(3)]
        ...     _ = b.present_rows(rows)
        ...     a.remove_message(rows[1])
        ...     out = b.retract_absent_rows()
        ...     again = b.retract_absent_rows()
        ...     a.close(); b.close()
        >>> out == [rows[1]], again
        (True, [])
        """
        return self._presented.retract_absent()

    @operation()
    def get_unpresented_messages(
        self: ContextManager, *, after_sequence: int | None = None
    ) -> list[StoredMessage]:
        """The messages of the record that arrived and were never presented to this
        manager's agent, oldest first (what a host presents at the agent's next turn
        start or tool boundary); with ``after_sequence``, only those stored after it.

        Rows presented and retracted since (``"undone"``) are not listed; while the
        window is the record every row is in it, and none is listed.

        Raises
        ------
        ArgumentError
            For an ``after_sequence`` that is not an int of at least 0.

        Examples
        --------
        >>> from context_manager import ContextManager, CharsCounter
        >>> with ContextManager.open(path=":memory:", counter=CharsCounter()) as cm:
        ...     _ = cm.add_message("User", "seen")
        ...     _ = cm.present_rows([])
        ...     mark = cm.current_sequence()
        ...     _ = cm.add_message("Other", "arrived since")
        ...     waiting = [m.message.text for m in cm.get_unpresented_messages()]
        ...     later = cm.get_unpresented_messages(after_sequence=cm.current_sequence())
        >>> waiting, later
        (['arrived since'], [])
        """
        return self._presented.unpresented(after_sequence)

    @operation()
    def get_window_messages(self: ContextManager) -> list[StoredMessage]:
        """The messages of this manager's window, in window order: what its strategy
        reads and its compiles send from (the record, :meth:`get_messages`, until a
        host presents; then the rows presented and not retracted that the record still
        holds).

        Examples
        --------
        >>> from context_manager import ContextManager, CharsCounter
        >>> with ContextManager.open(path=":memory:", counter=CharsCounter()) as cm:
        ...     first = cm.add_message("User", "one")
        ...     second = cm.add_message("User", "two")
        ...     _ = cm.retract_rows([first])
        ...     _ = cm.present_rows([first])
        ...     [m.message.text for m in cm.get_window_messages()]
        ['two', 'one']
        """
        return list(self._presented.view())

    @operation()
    def ordinal_of(self: ContextManager, message_id: str) -> int | None:
        """A row's place in this manager's window: None when the window does not hold it.

        Once a host presents, ordinals never move: a retraction leaves a hole (the rows
        after it keep theirs), and a row presented again takes a new ordinal, after
        every other. The write-down gives the record's rows ``0 .. n-1``. While the
        window is the record, the ordinal is the row's position in it, which a removal
        before it moves.

        Examples
        --------
        >>> from context_manager import ContextManager, CharsCounter
        >>> with ContextManager.open(path=":memory:", counter=CharsCounter()) as cm:
        ...     a, b, c = (cm.add_message("User", t) for t in ("a", "b", "c"))
        ...     _ = cm.retract_rows([b])
        ...     holes = [cm.ordinal_of(x) for x in (a, b, c)]
        ...     _ = cm.present_rows([b])
        ...     redone = cm.ordinal_of(b)
        >>> holes, redone
        ([0, None, 2], 3)
        """
        check_id(message_id, "message_id")
        return self._presented.ordinal_of(message_id)

    @operation()
    def window_status_of(self: ContextManager, message_id: str) -> WindowStatus:
        """Where a row stands for this manager's agent: ``"in"`` its window, ``"out"``
        of it (in the record, never presented), ``"undone"`` (presented, then
        retracted) or ``"absent"`` from the record (never stored, or removed).

        While the window is the record, every row of the record is ``"in"``.

        Examples
        --------
        >>> from context_manager import ContextManager, CharsCounter
        >>> with ContextManager.open(path=":memory:", counter=CharsCounter()) as cm:
        ...     shown = cm.add_message("User", "shown")
        ...     _ = cm.present_rows([])
        ...     waiting = cm.add_message("User", "not shown yet")
        ...     _ = cm.retract_rows([shown])
        ...     [cm.window_status_of(x) for x in (shown, waiting, "404")]
        ['undone', 'out', 'absent']
        """
        check_id(message_id, "message_id")
        return self._presented.status_of(message_id)

    def current_sequence(self: ContextManager) -> int:
        """The store's sequence now, on the current branch (:attr:`sequence`): read
        after a :meth:`present_rows`, a presentation boundary to branch or list
        unpresented rows from.

        Examples
        --------
        >>> from context_manager import ContextManager, CharsCounter
        >>> with ContextManager.open(path=":memory:", counter=CharsCounter()) as cm:
        ...     before = cm.current_sequence()
        ...     _ = cm.add_message("User", "hello")
        ...     cm.current_sequence() > before
        True
        """
        return self.sequence

    @operation()
    def branch_sequence_of(self: ContextManager, message_id: str) -> int:
        """The sequence :meth:`branch_at` cuts at for ``message_id``, without branching.

        A row's own sequence while the window is the record, and for a row the window
        does not hold (a retracted one included) or holds from its write-down (the new
        branch is then in legacy mode, its window the record up to the row). For a row
        a :meth:`present_rows` call entered, the sequence of that call, so the branch's
        window holds the row.

        Raises
        ------
        UnknownRowError
            When ``message_id`` names no message of the record (a ``KeyError``).

        Examples
        --------
        >>> from context_manager import ContextManager, CharsCounter
        >>> with ContextManager.open(path=":memory:", counter=CharsCounter()) as cm:
        ...     _ = cm.present_rows([])
        ...     row = cm.add_message("User", "presented later")
        ...     stored = cm.get_messages()[-1].seq
        ...     _ = cm.present_rows([row])
        ...     cm.branch_sequence_of(row) == cm.current_sequence() > stored
        True
        """
        check_id(message_id, "message_id")
        return self._presented.branch_sequence_of(message_id)

    def _where(self: ContextManager) -> str:
        return f"on branch {self._store.branch!r}"

    def _bump_version(self: ContextManager) -> None:
        """Messages left the strategy's view: what it computed from them is stale."""
        self._version += 1

    def _wake_ticker(self: ContextManager) -> None:
        """Wake the ``auto_tick`` worker, if any: there may be work."""
        if self._ticker is not None:
            self._ticker.wake()

    def _tell_presented(self: ContextManager, rows: list[StoredMessage]) -> None:
        """The strategy hears rows enter the window (``on_presented``; a strategy
        without it hears each through ``on_new_message``)."""
        self._strategy.on_presented(self._ctx, rows)

    def _tell_retracted(self: ContextManager, ids: list[str]) -> None:
        """The strategy hears rows leave the window (``on_retracted``; a strategy
        without it hears them through ``on_messages_removed``)."""
        self._strategy.on_retracted(self._ctx, ids)

    # ---------------------------------------------------------------- branches
    @property
    def current_branch(self: ContextManager) -> str:
        """The current branch name."""
        return self._store.branch

    @operation()
    def list_branches(self: ContextManager) -> list[Branch]:
        """Every branch of the store."""
        return self._store.list_branches()

    @operation()
    def branch_at(self: ContextManager, message_id: str, name: str | None = None) -> str:
        """A new branch that sees history up to and including ``message_id``, cut at
        :meth:`branch_sequence_of` it: the branch's window is this one as it stood
        there (once a host presents, a row the window holds is cut after the call that
        presented it, so the branch's window holds it).

        A shard of a body stored in parts is cut after the body's last shard: a branch
        never starts inside a body.

        Raises
        ------
        UnknownRowError
            When ``message_id`` names no message of the record (a ``KeyError``).
        ArgumentTypeError
            For a ``message_id`` that is not a str, or a ``name`` that is neither a
            non-empty str nor None.
        StoreError
            When a branch has that name already.
        """
        if name is not None:
            check_text(name, "name", empty=False)
        body = self._live_body(message_id)
        if body:
            message_id = body[-1].id
        return self._store.branch_at(self.branch_sequence_of(message_id), name)

    @operation()
    def derive(
        self: ContextManager, path: str | os.PathLike[str], *, at_sequence: int | None = None
    ) -> Path | str:
        """Write a new store at ``path`` holding this branch's history up to
        ``at_sequence`` (default: now) as its ``main`` branch; returns its path.

        ``path`` is a new file, or a PostgreSQL URL naming a new agent
        (``postgresql://HOST/DB?agent=NAME``, returned as given), from a store of
        either engine.

        The derived store carries the whole record as it stood there: every message
        slot, every namespace's strategy records (memories, pins, locks, frontiers) and
        window, the media they name and token counts, each record at its own id and
        sequence number (the derived store never gives a carried id again), so
        sequences read here (:meth:`current_sequence`, :meth:`branch_sequence_of`) mean
        the same there. Open it with :meth:`open` and it compiles what this manager
        compiled at that point; the two stores then go their own ways. This store is
        not changed. (There is no manifest of what to carry: a derived store that
        left out part of the record could not reproduce its requests.) Compression
        holds live in the process, not the store: give them to the new manager with
        :meth:`hold_compression` when it should keep them.

        ``at_sequence`` is cut as given, like :meth:`branch_at`'s sequence: once a
        host presents rows, give a presentation boundary, such as
        :meth:`current_sequence` read after a :meth:`present_rows`, or
        :meth:`branch_sequence_of` a row, or the child's window may leave out a row
        stored before the cut but presented after it.

        Raises
        ------
        ConfigError
            When ``at_sequence`` is not an int in ``[0, current_sequence()]``, or ``path``
            already exists, is not a file path (a derived store never overwrites
            one) or is in a folder that does not exist. Nothing is written.
            (An :class:`ArgumentError`, naming the argument, for a ``path`` that is not
            a str or a path, or a wrong ``at_sequence``.)
        StoreError
            When the new file cannot be written (no part of it is left behind), or
            inside an open :meth:`Store.transaction` (its writes are not stored yet).

        Examples
        --------
        >>> import tempfile, pathlib
        >>> from context_manager import ContextManager, CharsCounter
        >>> folder = pathlib.Path(tempfile.mkdtemp())
        >>> with ContextManager.open(path=folder / "a.db", counter=CharsCounter()) as cm:
        ...     _ = cm.add_message("User", "kept in both")
        ...     at = cm.current_sequence()
        ...     _ = cm.add_message("User", "only in the parent")
        ...     child = cm.derive(folder / "b.db", at_sequence=at)
        >>> with ContextManager.open(path=child, counter=CharsCounter()) as derived:
        ...     [m.message.text for m in derived.get_messages()]
        ['kept in both']
        """
        head = self.sequence
        at = head
        if at_sequence is not None:
            at = check_int(
                at_sequence,
                "at_sequence",
                low=0,
                high=head,
                hint="give a sequence read from current_sequence() or branch_sequence_of()",
            )
        shown = check_path(path)
        if shown.startswith(("postgresql://", "postgres://")):
            self._records.saved_counts.save()
            self._store.derive(shown, at)
            return shown
        try:
            taken = shown in (":memory:", "") or Path(shown).exists()
            folder = Path(shown).resolve().parent
            placed = folder.is_dir()
        except (OSError, ValueError) as exc:  # a NUL byte, a name longer than allowed
            why = exc.strerror if isinstance(exc, OSError) and exc.strerror else str(exc)
            raise ConfigError(f"path={shown!r} cannot name a file: {why}") from None
        if taken:
            raise ConfigError(
                f"path={shown!r} must name a new store file: a derived store never overwrites one"
            )
        if not placed:
            raise ConfigError(
                f"path={shown!r} is in a folder that does not exist; create {folder} first"
            )
        self._records.saved_counts.save()
        self._store.derive(shown, at)
        return Path(shown)

    @operation(writes=True, atomic=False)
    def fork(self: ContextManager, name: str | None = None) -> str:
        """Branch at the current head and switch to it.

        Raises
        ------
        ArgumentTypeError
            For a ``name`` that is neither a non-empty str nor None.
        StoreError
            When a branch has that name already.
        """
        if name is not None:
            check_text(name, "name", empty=False)
        name = self._store.fork(name)
        self._reload()
        return name

    @operation(writes=True, atomic=False)
    def switch_branch(self: ContextManager, name: str) -> None:
        """Switch branches; the strategy reloads its branch-scoped state.

        Raises
        ------
        ArgumentTypeError
            For a ``name`` that is not a str.
        StoreError
            When no branch has that name.
        """
        check_text(name, "name")
        self._store.switch_branch(name)
        self._reload()
