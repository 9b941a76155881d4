"""The per-message record cache of a manager: what each live message costs and looks
like as sent, computed once and saved in the store.

:class:`SavedCounts` keeps token counts of whole texts and messages (memories, the
request overhead) under :func:`counter_key`; :class:`Derived` holds, aligned with the
live messages, each one's tokens as sent, its tied flag, its raw count and its send
form, knowing which are stale; :class:`Forms` reads the send forms lazily.
"""

from __future__ import annotations

import hashlib
import itertools
from collections.abc import Callable, Iterable, Iterator, Sequence
from typing import Any, overload

from .messages import Message
from .pairing import SendForm
from .store import Store
from .strategies.base import StoredMessage
from .tokens import TokenCounter

__all__ = ["Derived", "Forms", "SavedCounts", "copy_derived", "counter_key"]

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
    store : Store
    scope : str
        Where in the store the counts live.
    """

    def __init__(self, counter: TokenCounter, store: Store, scope: str) -> None:
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
