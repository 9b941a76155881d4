"""The per-message record cache of a manager: what each live message costs and looks
like as sent, computed once and saved in the store.

:class:`SavedCounts` keeps token counts of whole texts and messages (memories, the
request overhead) under :func:`counter_key`; :class:`Derived` holds, aligned with the
live messages, each one's tokens as sent, its tied flag, its raw count and its send
form, knowing which are stale; :class:`Forms` reads the send forms lazily.
"""

from __future__ import annotations

import hashlib
import heapq
import itertools
import json
from array import array
from collections.abc import Callable, Iterable, Iterator, Sequence
from itertools import repeat
from typing import Any, overload

from .arguments import check_int, check_number
from .errors import ConfigError
from .message_caps import MessageCaps, cap_form
from .messages import Message
from .pairing import SendForm, send_form
from .store import RecordStore
from .strategies.base import StoredMessage
from .tokens import TokenCounter

__all__ = ["Derived", "Forms", "RecordCache", "SavedCounts", "copy_derived", "counter_key"]

_REVISIONS = itertools.count(1)
"""Revisions of :class:`Derived` values, unique in the process."""


def counter_key(counter: TokenCounter) -> str:
    """What saved token counts are keyed by: the counter's ``cache_key`` when it has one,
    else its class and :attr:`~.tokens.TokenCounter.name`. Counts saved under one key are
    never read under another, so a store opened with a different counter counts again.

    Examples
    --------
    >>> from context_manager import CharsCounter
    >>> counter_key(CharsCounter())
    'context_manager.tokens.CharsCounter/chars/4'
    """
    key = getattr(counter, "cache_key", None)
    if isinstance(key, str) and key:
        return key
    kind = type(counter)
    return f"{kind.__module__}.{kind.__qualname__}/{counter.name}"


class SavedCounts:
    """A token counter whose counts are kept in the store, so a reopened store prices
    what it priced before (memories, the request overhead) without tokenising.

    Counts are keyed by the SHA-256 of what was counted (a message's
    :meth:`~.messages.Message.digest`, a text's UTF-8 bytes) under the wrapped
    counter's :func:`counter_key`; they are read on first use and new ones saved with
    the manager's next write (or on close).

    Parameters
    ----------
    counter : TokenCounter
        The counter that counts what is not saved yet.
    store : RecordStore
    scope : str
        Where in the store the counts live.
    """

    def __init__(self, counter: TokenCounter, store: RecordStore, scope: str) -> None:
        self.counter = counter
        self.name = counter.name
        self._store = store
        self._scope = scope
        self._known: dict[bytes, int] | None = None
        self._new: dict[bytes, int] = {}

    def __getattr__(self, name: str) -> Any:
        return getattr(self.counter, name)

    def _lookup(self, key: bytes, count: Callable[[], int]) -> int:
        known = self._known
        if known is None:
            known = self._known = self._store.derived_counts(self._scope)
        value = known.get(key)
        if value is None:
            value = known[key] = count()
            self._new[key] = value
        return value

    def count_text(self, text: str) -> int:
        """Tokens of a string (saved)."""
        key = b"t" + hashlib.sha256(text.encode("utf-8", "surrogatepass")).digest()
        return self._lookup(key, lambda: self.counter.count_text(text))

    def count_message(self, message: Message) -> int:
        """Tokens of a message (saved)."""
        key = b"m" + bytes.fromhex(message.digest())
        return self._lookup(key, lambda: self.counter.count_message(message))

    def save(self) -> None:
        """Save the counts made since the last save (part of the open transaction)."""
        if self._new:
            self._store.save_counts(self._scope, self._new.items())
            self._new = {}

    def forget(self) -> None:
        """Read the saved counts again on next use (a rolled-back save lost some)."""
        self._known = None
        self._new = {}


class Derived:
    """Per-message values of the live messages, aligned with them: tokens as sent, the
    tied flag, the raw count (-1 when not known) and the send form (None until built).

    ``stale`` holds the positions to compute again; ``unsaved`` those computed since
    the last save."""

    __slots__ = ("forms", "loaded", "raw", "revision", "stale", "tied", "tokens", "unsaved")

    def __init__(self) -> None:
        self.revision = next(_REVISIONS)
        """Changes whenever a value may have changed (unique across instances)."""
        self.tokens: list[int] = []
        self.tied: list[bool] = []
        self.raw: list[int] = []
        self.forms: list[SendForm | None] = []
        self.stale: set[int] = set()
        self.unsaved: set[int] = set()
        self.loaded = False

    def load(
        self,
        stored: Sequence[StoredMessage],
        saved: dict[int, tuple[int, int, int, int, int, int]],
        raw_counts: dict[str, int],
    ) -> None:
        """Take the saved values whose message and neighbours are the versions they
        were computed from; every other position is stale."""
        n = len(stored)
        self.tokens = [0] * n
        self.tied = [False] * n
        self.raw = [-1] * n
        self.forms = [None] * n
        self.stale = set()
        self.unsaved = set()
        revs = [s.rev for s in stored]
        get = saved.get
        for i, s in enumerate(stored):
            row = get(int(s.id))
            if row is None or row[0] != revs[i]:
                self.stale.add(i)
                continue
            if row[1] != (revs[i - 1] if i else 0) or row[2] != (revs[i + 1] if i + 1 < n else 0):
                self.stale.add(i)
            else:
                self.tokens[i], self.tied[i] = row[3], bool(row[5])
            if row[4] >= 0:
                self.raw[i] = row[4]
                raw_counts[s.id] = row[4]
        self.loaded = True
        self.revision = next(_REVISIONS)

    def take(
        self,
        stored: Sequence[StoredMessage],
        saved: dict[int, tuple[int, int, int, int, int, int]],
        positions: Iterable[int],
    ) -> None:
        """Take the saved values of ``positions`` that are still valid (see :meth:`load`)."""
        n = len(stored)
        for i in positions:
            row = saved.get(int(stored[i].id))
            if row is None or row[0] != stored[i].rev:
                continue
            if row[1] != (stored[i - 1].rev if i else 0):
                continue
            if row[2] != (stored[i + 1].rev if i + 1 < n else 0):
                continue
            self.tokens[i], self.raw[i], self.tied[i] = row[3], row[4], bool(row[5])
            self.stale.discard(i)
        self.revision = next(_REVISIONS)

    def appended(self, n: int) -> None:
        """A message was appended (``n`` live now): it, and the one before, are stale."""
        if not self.loaded:
            return
        self.tokens.append(0)
        self.tied.append(False)
        self.raw.append(-1)
        self.forms.append(None)
        self.stale.add(n - 1)
        if n > 1:
            self._dirty(n - 2)

    def edited(self, at: int, n: int) -> None:
        """Message ``at`` changed: it and its neighbours are stale."""
        if not self.loaded:
            return
        for i in (at - 1, at, at + 1):
            if 0 <= i < n:
                self._dirty(i)

    def removed(self, at: int, n: int) -> None:
        """Message ``at`` left (``n`` live now): later positions move down one, and
        its old neighbours are stale."""
        if not self.loaded:
            return
        for values in (self.tokens, self.tied, self.raw, self.forms):
            del values[at]
        self.revision = next(_REVISIONS)
        self.stale = {i - (i > at) for i in self.stale if i != at}
        self.unsaved = {i - (i > at) for i in self.unsaved if i != at}
        for i in (at - 1, at):
            if 0 <= i < n:
                self._dirty(i)

    def changed(self) -> None:
        """Values were computed or changed in place: a new :attr:`revision`."""
        self.revision = next(_REVISIONS)

    def _dirty(self, i: int) -> None:
        self.revision = next(_REVISIONS)
        self.stale.add(i)
        self.forms[i] = None
        self.unsaved.discard(i)


def copy_derived(source: Derived | None, n: int) -> Derived:
    """Per-message values for ``n`` messages: a copy of ``source`` (values of the same
    messages in the same order), or all stale without one. Never saved."""
    derived = Derived()
    if source is not None and source.loaded and len(source.tokens) == n:
        derived.tokens, derived.tied = list(source.tokens), list(source.tied)
        derived.raw, derived.forms = list(source.raw), list(source.forms)
        derived.stale = set(source.stale)
    else:
        derived.tokens, derived.tied = [0] * n, [False] * n
        derived.raw, derived.forms = [-1] * n, [None] * n
        derived.stale = set(range(n))
    derived.loaded = True
    return derived


class Forms(Sequence[SendForm]):
    """The send forms of a list of messages (the record, or the window), each built when
    first read: ``form(i)`` builds and keeps the form of message ``i`` in
    ``derived.forms``."""

    def __init__(self, n: int, derived: Derived, form: Callable[[int], SendForm]) -> None:
        self._n = n
        self._derived = derived
        self._form = form

    def __len__(self) -> int:
        return self._n

    @overload
    def __getitem__(self, index: int) -> SendForm: ...

    @overload
    def __getitem__(self, index: slice) -> list[SendForm]: ...

    def __getitem__(self, index: int | slice) -> SendForm | list[SendForm]:
        if isinstance(index, slice):
            start, stop, step = index.indices(self._n)
            forms = self._derived.forms[start:stop:step]
            for k, form in enumerate(forms):
                if form is None:  # not built yet
                    forms[k] = self._form(start + k * step)
            return forms  # type: ignore[return-value]
        if index < 0:
            index += self._n
        if not 0 <= index < self._n:
            raise IndexError(index)
        return self._form(index)

    def __iter__(self) -> Iterator[SendForm]:
        for i in range(self._n):
            yield self._form(i)


class RecordCache:
    """The messages of a manager's record, read once and then followed, with the
    per-message values of :class:`Derived` and the token counts of :class:`SavedCounts`.

    A saved view of the message list (ids, sequences and body versions with the
    per-message values, as of a sequence of the branch) lets an open read it and the
    records after it, not the whole log; bodies are read from the store when first used.

    Parameters
    ----------
    store : RecordStore
    counter : TokenCounter
        Counts what is not saved yet.
    slot : str
        The message slot of the record.
    aux_slots : tuple of str
        Other writers' message slots merged into the record by sequence (never saved
        as a view: a merged record is read anew).
    """

    INDEX_EVERY = 2048
    """Writes after which the view is saved again (also saved on close)."""

    def __init__(
        self,
        store: RecordStore,
        counter: TokenCounter,
        slot: str,
        aux_slots: tuple[str, ...] = (),
        caps: MessageCaps | None = None,
    ) -> None:
        self.store = store
        self.counter = counter
        self.slot = slot
        self.aux_slots = aux_slots
        self.caps = caps if caps is not None and caps.active else None
        """The per-message caps of the send forms (:mod:`~context_manager.message_caps`)."""
        self.scope = f"sent\x1f{slot}\x1f{counter_key(counter)}"
        """Where the per-message values live in the store (forms under other caps apart)."""
        if self.caps is not None:
            self.scope += f"\x1f{self.caps.key}"
        self.saved_counts = SavedCounts(counter, store, f"counts\x1f{counter_key(counter)}")
        self.cache: list[StoredMessage] | None = None
        """The live messages (None until read)."""
        self.derived = Derived()
        """Their per-message values, aligned with them."""
        self.tokens: dict[str, int] = {}
        """Raw token counts by message id."""
        self._tokens_filled = False
        self._index_writes = 0

    def forget(self) -> None:
        """Read everything from the store again on next use (it changed under us)."""
        self.cache = None
        self.derived = Derived()
        self.saved_counts.forget()
        self.tokens.clear()

    def messages(self) -> list[StoredMessage]:
        """The live messages of the record, in order (read from the saved view and the
        records after it, else from the whole log, on first use)."""
        if self.cache is None:
            self._tokens_filled = False
            if self.aux_slots or not self._load_index():
                items = self.store.items(self.slot)
                if self.aux_slots:  # the other writers' rows, in the order stored
                    others = [self.store.items(slot) for slot in self.aux_slots]
                    items = list(heapq.merge(items, *others, key=lambda i: i.seq))
                self.cache = [StoredMessage.from_item(i) for i in items]
                self.derived = Derived()
        assert self.cache is not None
        return self.cache

    def _index_key(self) -> str:
        return f"index\x1f{self.scope}\x1f{self.store.branch_id}"

    def _load_index(self) -> bool:
        """Build the message list from the saved view and the records after it; False
        when there is no view for this branch and counter."""
        blob = self.store.derived_blob(self._index_key())
        if blob is None:
            return False
        try:
            head, packed = blob.split(b"\n", 1)
            meta = json.loads(head)
            upto, n = int(meta["upto"]), int(meta["n"])
            columns = []
            for k in range(5):
                column = array("q")
                column.frombytes(packed[k * 8 * n : (k + 1) * 8 * n])
                columns.append(column)
            flags = packed[40 * n : 41 * n]
            if len(flags) != n or upto > self.store.sequence:
                return False
        except (ValueError, KeyError, TypeError):
            return False  # not a view this code wrote: read the log
        ids, seqs, revs, tokens, raw = columns
        store = self.store
        make = StoredMessage.from_store
        stored = list(
            map(StoredMessage, map(str, ids), seqs, repeat(None, n), revs, repeat(store, n))
        )
        derived = Derived()
        derived.tokens, derived.raw = tokens.tolist(), raw.tolist()
        derived.tied = [bool(f & 2) for f in flags]
        derived.forms = [None] * n
        derived.stale = {i for i, f in enumerate(flags) if not f & 1}
        derived.loaded = True
        self.cache, self.derived = stored, derived
        for op, item, seq, rev in store.records_after(self.slot, upto):
            if op == "append":
                stored.append(make(store, item, seq, rev))
                derived.appended(len(stored))
                continue
            at = next((k for k in range(len(stored) - 1, -1, -1) if stored[k].id == item), -1)
            if at < 0:
                continue
            if op == "edit":
                stored[at] = make(store, item, stored[at].seq, rev)
                derived.edited(at, len(stored))
            elif op == "redact":
                del stored[at]
                derived.removed(at, len(stored))
        if derived.stale:  # changed after the view: their saved rows, where still valid
            ids_wanted = [int(stored[i].id) for i in derived.stale]
            rows = store.derived_items(self.scope, ids_wanted)
            derived.take(stored, rows, sorted(derived.stale))
        self._index_writes = 0
        return True

    def save_index(self) -> None:
        """Save the view of the message list (part of the open transaction)."""
        stored = self.cache
        if stored is None or self.aux_slots:  # a merged record is read anew
            return
        derived = self.derived
        if not derived.loaded:
            derived.load(stored, self.store.derived_items(self.scope), {})
        n = len(stored)
        stale = derived.stale
        flags = bytes(
            (0 if i in stale else 1) | (2 if tied else 0) for i, tied in enumerate(derived.tied)
        )
        packed = b"".join(
            array("q", column).tobytes()
            for column in (
                [int(x.id) for x in stored],
                [x.seq for x in stored],
                [x.rev for x in stored],
                derived.tokens,
                derived.raw,
            )
        )
        head = json.dumps({"upto": self.store.sequence, "n": n}).encode()
        self.store.save_derived_blob(self._index_key(), head + b"\n" + packed + flags)
        self._index_writes = 0

    def position(self, message_id: str) -> int:
        """Where a live message sits in the message list (recent ones are found first)."""
        stored = self.messages()
        for at in range(len(stored) - 1, -1, -1):
            if stored[at].id == message_id:
                return at
        raise KeyError(message_id)

    def sent(self) -> tuple[Sequence[int], Sequence[bool]]:
        """Tokens as sent and tied flags of the live messages (``StrategyContext.sent``):
        read from the store on first use, then computed only where messages changed."""
        stored = self.messages()
        derived = self.derived
        if not derived.loaded:
            derived.load(stored, self.store.derived_items(self.scope), self.tokens)
        self.fill(stored, derived)
        return derived.tokens, derived.tied

    def fill(self, stored: Sequence[StoredMessage], derived: Derived) -> None:
        """Compute the stale values of ``derived`` (aligned with ``stored``)."""
        if derived.stale:
            count = self.counter.count_message
            n = len(stored)
            for i in sorted(derived.stale):
                form = self.form_at(stored, i)
                tokens = [count(m) for m in form.messages]
                derived.tokens[i] = sum(tokens)
                derived.tied[i] = form.tied
                derived.forms[i] = form
                raw = -1
                if form.messages and form.messages[0] is stored[i].message:
                    raw = tokens[0]
                    self.tokens[stored[i].id] = raw
                derived.raw[i] = raw
                if i < n:
                    derived.unsaved.add(i)
            derived.stale.clear()
            derived.changed()

    def sent_forms(self) -> tuple[Sequence[SendForm], Sequence[int]]:
        """What each live message is sent as when shown raw (:func:`~.pairing.send_form`)
        and its tokens, aligned with the messages; the forms are built when read."""
        tokens, _ = self.sent()
        return Forms(len(self.messages()), self.derived, self.form), tokens

    def form(self, i: int) -> SendForm:
        """The send form of live message ``i`` (built once, until it changes)."""
        return self.kept_form(self.messages(), self.derived, i)

    def kept_form(self, stored: Sequence[StoredMessage], derived: Derived, i: int) -> SendForm:
        """The send form of ``stored[i]``, kept in ``derived`` (aligned with ``stored``)."""
        form = derived.forms[i]
        if form is None:
            form = derived.forms[i] = self.form_at(stored, i)
        return form

    def form_at(self, stored: Sequence[StoredMessage], i: int) -> SendForm:
        """The send form of ``stored[i]`` between its neighbours, built anew (under the
        per-message caps, if any)."""
        message = stored[i].message
        # a repaired copy reads its own call and result ids (Message keys them by content)
        form = send_form(
            stored[i - 1].message if i else None,
            message,
            stored[i + 1].message if i + 1 < len(stored) else None,
        )
        if self.caps is not None:
            form = cap_form(form, self.caps, self.counter)
        return form

    def save(self, *, closing: bool = False) -> None:
        """Save the per-message values computed since the last save (part of the open
        transaction), so a reopened store reads them instead of counting; every
        :attr:`INDEX_EVERY` saves, and when ``closing``, the message list's view too."""
        self.saved_counts.save()
        derived = self.derived
        stored = self.cache
        if stored is None:
            return
        self._index_writes += 1
        if closing or self._index_writes >= self.INDEX_EVERY:
            self.save_index()
        if not derived.unsaved:
            return
        n = len(stored)
        rows = []
        for i in sorted(derived.unsaved):
            if i >= n or i in derived.stale:
                continue
            rows.append(
                (
                    int(stored[i].id),
                    stored[i].rev,
                    stored[i - 1].rev if i else 0,
                    stored[i + 1].rev if i + 1 < n else 0,
                    derived.tokens[i],
                    derived.raw[i],
                    int(derived.tied[i]),
                )
            )
        self.store.save_derived(self.scope, rows)
        derived.unsaved.clear()

    def count(self, stored: StoredMessage) -> int:
        """The raw tokens of a live message (``StrategyContext.count``), counted once."""
        if not self._tokens_filled:  # the raw counts the saved values hold
            self._tokens_filled = True
            derived = self.derived
            if derived.loaded:
                for s, raw in zip(self.messages(), derived.raw, strict=False):
                    if raw >= 0:
                        self.tokens.setdefault(s.id, raw)
        tokens = self.tokens.get(stored.id)
        if tokens is None:
            tokens = self.counter.count_message(stored.message)
            self.tokens[stored.id] = tokens
        return tokens

    # ------------------------------------------------------------ time travel
    def replay(self, at: int, only: str | None = None) -> dict[str, tuple[int, int]]:
        """The live messages of the branch as of sequence ``at``: id -> (append sequence,
        body version), in append order."""
        live: dict[str, tuple[int, int]] = {}
        for op, item, seq, rev in self.log():
            if seq > at:
                break
            if only is not None and item != only:
                continue
            if op == "append":
                live[item] = (seq, rev)
            elif op == "edit" and item in live:
                live[item] = (live[item][0], rev)
            elif op == "redact":
                live.pop(item, None)
        return live

    def as_of(self, sequence: int | None, time: float | None) -> int:
        """The sequence a time-travel read goes back to: ``sequence`` checked, or the
        last before the first message stamped later than ``time``.

        Raises
        ------
        ConfigError
            Unless exactly one of ``sequence`` and ``time`` is given.
        ArgumentError
            For a sequence outside ``[0, store.sequence]`` or a time that is not a
            finite number.
        """
        if (sequence is None) == (time is None):
            raise ConfigError("give exactly one of sequence= (a store sequence) or time=")
        head = self.store.sequence
        if sequence is not None:
            return check_int(
                sequence, "sequence", low=0, high=head, hint=f"this branch's history is [0, {head}]"
            )
        assert time is not None
        time = check_number(time, "time")
        for op, item, seq, rev in self.log():
            if op != "append":
                continue
            stamp = StoredMessage.from_store(self.store, item, seq, rev).message.timestamp
            if stamp is not None and stamp > time:
                return seq - 1
        return head

    def log(self) -> list[tuple[str, str, int, int]]:
        """The records of the message slot and of the auxiliary slots, in the order
        written: ``(op, item, seq, rev)``."""
        logs = [self.store.records_after(slot, 0) for slot in (self.slot, *self.aux_slots)]
        return logs[0] if len(logs) == 1 else list(heapq.merge(*logs, key=lambda r: r[2]))
