"""Adding, editing, removing and reading the record's messages, the context log and
time-travel reads."""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from contextlib import suppress
from typing import TYPE_CHECKING, Any

from pydantic import ValidationError

from ..arguments import (
    HOLD_ACCEPTED,
    check_choice,
    check_content,
    check_id,
    check_mapping,
    check_number,
    check_seconds,
    check_text,
    refusal,
)
from ..bodies import SHARD_KEY, BodyShardError, shard_of, shardable_text
from ..compiler import MAX_CATCH_UP_RECHECKS as MAX_CATCH_UP_RECHECKS
from ..compiler import MAX_CATCH_UP_TICKS as MAX_CATCH_UP_TICKS
from ..errors import (
    ArgumentError,
    ArgumentTypeError,
    ConfigError,
    ContextManagerError,
    UnknownMessageError,
)
from ..messages import (
    ContentBlock,
    Message,
    TextBlock,
)
from ..operations import operation
from ..reads import query
from ..request import (
    ContextEntry,
    ManagerStats,
    QueryResult,
    Relation,
)
from ..strategies.base import (
    StoredMessage,
    Strategy,
)

if TYPE_CHECKING:
    from ..manager import ContextManager
    from ..tokens import TokenCounter

__all__ = ["MessagesFront"]

log = logging.getLogger(__name__)


def _new_message(
    participant: object, content: object, metadata: object, timestamp: object
) -> Message:
    """The message :meth:`ContextManager.add_message` stores, its arguments checked."""
    fields: dict[str, Any] = {
        "participant": check_text(participant, "participant", empty=False),
        "content": check_content(content),
        "metadata": {},
        "timestamp": time.time() if timestamp is None else check_number(timestamp, "timestamp"),
    }
    if metadata is not None:
        accepted = "a mapping of JSON values under str keys, or None"
        fields["metadata"] = dict(check_mapping(metadata, "metadata", accepted))
    return _built(**fields)


def _built(**fields: Any) -> Message:
    """A message from checked arguments; pydantic's own refusal (a lone surrogate in the
    participant) as an :class:`ArgumentError` naming the field."""
    try:
        return Message(**fields)
    except ValidationError as exc:
        raise refusal(exc) from None


def _shards(strategy: Strategy, counter: TokenCounter, message: Message) -> list[Message]:
    """The messages to store for ``message``: itself, or the shards of the strategy's
    :meth:`~context_manager.strategies.base.Strategy.shard_plan` (each with its place
    under :data:`~context_manager.bodies.SHARD_KEY`; the group is set when stored)."""
    if SHARD_KEY in message.metadata:
        raise ArgumentError(
            f"metadata.{SHARD_KEY}",
            message.metadata[SHARD_KEY],
            "absent: the key is reserved for the shards of a body stored in parts",
            hint="rename the key",
        )
    plan = strategy.shard_plan(counter, message.participant, message.content)
    if plan is None:
        return [message]
    text = shardable_text(message.content)
    if (
        text is None
        or len(plan) < 2
        or not all(isinstance(p, str) and p for p in plan)
        or "".join(plan) != text
    ):
        raise ContextManagerError(
            f"{type(strategy).__name__}.shard_plan returned {len(plan)} parts that are not "
            "the shards of a text-only message: a plan is two or more non-empty texts "
            "whose concatenation is the message's text"
        )
    return [
        _built(
            participant=message.participant,
            content=(TextBlock(text=p),),
            metadata={**message.metadata, SHARD_KEY: {"index": i, "count": len(plan)}},
            timestamp=message.timestamp,
        )
        for i, p in enumerate(plan)
    ]


class MessagesFront:
    """The methods of :class:`~context_manager.ContextManager` for one job (see the
    module docstring); mixed into the manager, never used alone."""

    # ---------------------------------------------------------------- messages
    @operation(writes=True)
    def add_message(
        self: ContextManager,
        participant: str,
        content: str | Sequence[ContentBlock],
        *,
        metadata: dict[str, Any] | None = None,
        hold: bool | float = False,
        timestamp: float | None = None,
        caused_by: str | None = None,
    ) -> str:
        """Append a message; returns its id.

        A message the strategy's ``shard_plan`` splits (the autobiographical strategy:
        a text-only message of more than twice ``target_chunk_tokens``, with
        ``shard_large_messages``) is stored as a body in parts
        (:mod:`context_manager.bodies`): consecutive shards, all in the one transaction;
        the id returned is the first shard's, which names the body
        (:meth:`get_body` reads it whole; a hold given here covers every shard).

        ``hold`` (True, or a timeout in seconds) holds it out of compression
        before the strategy hears of it. The message and whatever the strategy
        records for it (a closed chunk) are one transaction: a call that raises
        stored nothing. While the window is the record the message enters it at once
        (the strategy's ``on_presented``); once a host presents rows
        (:meth:`present_rows`), it enters the window only when presented.

        Parameters
        ----------
        participant : str
            Who speaks: any non-empty name (``"User"``, ``"Claude"``, ``"Tool"``...).
        content : str or sequence of content blocks
            The text (one text block), or the blocks (each a block or its mapping).
        metadata : dict, optional
            JSON values under string keys.
        hold : bool or float
            Hold the message out of compression (a number: for that many seconds).
        timestamp : float, optional
            When it was said (default: now).
        caused_by : str, optional
            The id of the message this one answers or follows from (a tool result's
            call, the user's turn a reply answers): stored as the metadata key
            ``caused_by``, so ``query_messages(metadata={"caused_by": id})`` finds what
            a message caused.

        Raises
        ------
        ArgumentError
            For an argument of the wrong type (an :class:`ArgumentTypeError`) or value,
            naming it (``content[0].text``): a ``participant`` that is not a non-empty
            str, ``content`` that is neither a str nor content blocks, ``metadata`` that
            is not a mapping of JSON values, a ``hold`` that is neither a bool nor a
            positive number of seconds, or a ``timestamp`` that is not a finite number.
            Checked before anything is written.
        UnknownMessageError
            For a ``caused_by`` that is not a live message's id.
        MessageFormatError
            For content or metadata that cannot be stored (a lone surrogate, a value
            that is not JSON), naming the field.
        """
        if not isinstance(hold, bool):
            check_seconds(hold, "hold", accepted=HOLD_ACCEPTED)
        if caused_by is not None:
            self._at(caused_by, "caused_by")  # an unknown id raises, naming it
        message = _new_message(participant, content, metadata, timestamp)
        if caused_by is not None:
            message = message.model_copy(
                update={"metadata": {**message.metadata, "caused_by": caused_by}}
            )
        parts = _shards(self._strategy, self._counter, message)
        with self._store.transaction():
            added: list[StoredMessage] = []
            for part in parts:
                if added:  # every shard after the first names the first: its body group
                    place = {**part.metadata[SHARD_KEY], "group": added[0].id}
                    part = part.model_copy(update={"metadata": {**part.metadata, SHARD_KEY: place}})
                item = self._store.append(self._slot, part.model_dump(mode="json"))
                added.append(StoredMessage(item.id, item.seq, part, item.rev))
                if self._records.cache is not None:
                    self._records.cache.append(added[-1])
                    self._records.derived.appended(len(self._records.cache))
            self._records.save()
            if hold:
                ids = [a.id for a in added]
                self.hold_compression(ids, timeout=None if hold is True else float(hold))
            if not self._presented.presenting:  # else the rows wait for present_rows
                self._tell_presented(added)
        if self._listeners:  # told once the message is committed
            for stored in added:
                self._gate.committed.append(lambda stored=stored: self._notify(stored))
        if self._ticker is not None:
            self._ticker.wake()
        return added[0].id

    def on_message(
        self: ContextManager, listener: Callable[[StoredMessage], None]
    ) -> Callable[[], None]:
        """Call ``listener`` with each message added from now on, once it is stored.

        The listener runs on the thread that added the message, after its transaction
        committed and outside the store's lock (it may call the manager); an add that
        raised stored nothing and tells no one. An exception of the listener is logged,
        never raised into the add.

        Returns
        -------
        callable
            Call it to stop listening (idempotent).

        Raises
        ------
        ArgumentTypeError
            For a ``listener`` that is not callable.

        Examples
        --------
        >>> from context_manager import CharsCounter, ContextManager
        >>> heard = []
        >>> with ContextManager.open(path=":memory:", counter=CharsCounter()) as cm:
        ...     stop = cm.on_message(lambda m: heard.append(m.message.text))
        ...     _ = cm.add_message("User", "first")
        ...     stop()
        ...     _ = cm.add_message("User", "second")
        >>> heard
        ['first']
        """
        if not callable(listener):
            raise ArgumentTypeError("listener", listener, "a callable taking a StoredMessage")
        self._listeners.append(listener)

        def stop() -> None:
            with suppress(ValueError):
                self._listeners.remove(listener)

        return stop

    def _notify(self: ContextManager, stored: StoredMessage) -> None:
        for listener in list(self._listeners):
            try:
                listener(stored)
            except Exception:
                log.exception("a message listener failed on message %r", stored.id)

    @operation()
    def get_message_count(self: ContextManager) -> int:
        """How many live messages the current branch holds (without copying them).

        Examples
        --------
        >>> from context_manager import CharsCounter, ContextManager
        >>> with ContextManager.open(path=":memory:", counter=CharsCounter()) as cm:
        ...     _ = cm.add_message("User", "hello")
        ...     cm.get_message_count()
        1
        """
        return len(self._records.messages())

    @operation()
    def stats(self: ContextManager) -> ManagerStats:
        """How many messages, context-log entries and branches the record holds, the
        current branch and the highest memory's level.

        Examples
        --------
        >>> from context_manager import CharsCounter, ContextManager
        >>> with ContextManager.open(path=":memory:", counter=CharsCounter()) as cm:
        ...     _ = cm.add_message("User", "hello")
        ...     cm.stats()
        ManagerStats(message_count=1, context_entry_count=0, branches=1, current_branch='main', max_summary_level=0)
        """  # noqa: E501
        return ManagerStats(
            message_count=len(self._records.messages()),
            context_entry_count=len(self._store.items(self._log_slot)),
            branches=len(self._store.list_branches()),
            current_branch=self._store.branch,
            max_summary_level=self.get_max_summary_level(),
        )

    @operation(writes=True)
    def edit_message(
        self: ContextManager, message_id: str, content: str | Sequence[ContentBlock]
    ) -> None:
        """Replace a message's content (existing summaries keep their text).

        Raises
        ------
        BodyShardError
            For a shard of a body stored in parts: shards are never edited (remove the
            body through its first shard and add the new text).
        UnknownMessageError
            For an unknown id (a ``KeyError``).
        ArgumentError
            For a ``message_id`` that is not a str or ``content`` that is neither a str
            nor content blocks, naming it.
        """
        check_id(message_id, "message_id")
        blocks = check_content(content)
        old = self.get_message(message_id)
        shard = shard_of(message_id, old)
        if shard is not None:
            raise BodyShardError(
                f"message_id={message_id!r} is shard {shard.index} of {shard.count} of the "
                f"body {shard.group!r} stored in parts, and shards are never edited: remove "
                f"the body (remove_message({shard.group!r})) and add the new text instead",
                param="message_id",
                body_group_id=shard.group,
            )
        self._read_only([message_id])
        # built anew, not model_copy'd: a copy would keep the old content's cached
        # tool_use_ids / tool_result_ids, and the pairing rule reads those
        fields = {name: getattr(old, name) for name in Message.model_fields}
        new = _built(**{**fields, "content": blocks})
        with self._store.transaction():
            item = self._store.edit(self._slot, message_id, new.model_dump(mode="json"))
            for entry in self._log_entries(message_id, "copy"):
                body = {"source_id": message_id, "relation": "copy"}
                self._store.edit(
                    self._log_slot, entry.id, {**body, "message": new.model_dump(mode="json")}
                )
            self._records.save()
        self._records.tokens.pop(message_id, None)
        self._version += 1
        if self._records.cache is not None:
            at = self._records.position(message_id)
            self._records.cache[at] = StoredMessage(item.id, item.seq, new, item.rev)
            self._records.derived.edited(at, len(self._records.cache))
        self._presented.edited(StoredMessage(item.id, item.seq, new, item.rev))

    @operation(writes=True)
    def remove_message(self: ContextManager, message_id: str) -> None:
        """Remove a message from the record (and drop its hold).

        The strategy hears of it in the same transaction (memories over the message
        are dropped and what they kept is remembered again): through
        ``on_messages_removed`` while the window is the record, and once a host
        presents through ``on_retracted``, when the window held the message (which it
        then no longer does). Other managers on the store do not hear of it
        (:meth:`retract_removed`).

        The first shard of a body stored in parts (the id :meth:`add_message`
        returned for it) removes the whole body, every shard, in the one transaction.

        Raises
        ------
        UnknownMessageError
            For an unknown id (a ``KeyError``).
        ArgumentTypeError
            For an id that is not a str.
        BodyShardError
            For a shard other than a body's first: a body is removed whole, through its
            first shard.
        """
        message = self.get_message(message_id)
        shard = shard_of(message_id, message)
        if shard is not None and shard.index:
            raise BodyShardError(
                f"message_id={message_id!r} is shard {shard.index} of {shard.count} of a body "
                "stored in parts, which is removed whole: call "
                f"remove_message({shard.group!r}) (its first shard) instead",
                param="message_id",
                body_group_id=shard.group,
            )
        self._remove([s.id for s in self._body(message_id)] if shard else [message_id])

    @operation(writes=True)
    def remove_messages(self: ContextManager, first_id: str, last_id: str) -> list[str]:
        """Remove the messages ``first_id`` to ``last_id`` (both included, in the order
        of the record); returns the ids removed, oldest first.

        One transaction, as :meth:`remove_message` is for one: their holds and
        ``copy`` context-log entries go with them, and the strategy hears of them all
        at once (memories over any of them are dropped and what they kept is
        remembered again). Nothing outside the range changes.

        Raises
        ------
        UnknownMessageError
            When either id names no live message (a ``KeyError``; nothing is removed).
        ArgumentTypeError
            When either id is not a str.
        ConfigError
            When ``first_id`` comes after ``last_id``.
        BodyShardError
            When the range would cut a body stored in parts: ``first_id`` a shard other
            than its body's first, or ``last_id`` one other than its body's last.

        Examples
        --------
        >>> from context_manager import ContextManager, CharsCounter
        >>> with ContextManager.open(path=":memory:", counter=CharsCounter()) as cm:
        ...     ids = [cm.add_message("User", f"m{i}") for i in range(5)]
        ...     removed = cm.remove_messages(ids[1], ids[3])
        ...     left = [m.message.text for m in cm.get_messages()]
        >>> removed == ids[1:4], left
        (True, ['m0', 'm4'])
        """
        stored = self._records.messages()
        a, b = (self._at(first_id, "first_id"), self._at(last_id, "last_id"))
        if a > b:
            raise ConfigError(
                f"remove_messages({first_id!r}, {last_id!r}) is reversed: {first_id!r} comes "
                f"after {last_id!r}; name the older message first"
            )
        for param, at, end in (("first_id", a, "first"), ("last_id", b, "last")):
            shard = shard_of(stored[at].id, stored[at].message)
            if shard is None or (shard.index == 0 if end == "first" else shard.last):
                continue
            body = self._body(stored[at].id)
            edge = body[0].id if end == "first" else body[-1].id
            raise BodyShardError(
                f"remove_messages({first_id!r}, {last_id!r}) would cut the body "
                f"{shard.group!r} stored in parts ({param} is its shard {shard.index} of "
                f"{shard.count}): give {param}={edge!r}, its {end} shard, to remove it whole",
                param=param,
                body_group_id=shard.group,
            )
        ids = [s.id for s in stored[a : b + 1]]
        self._remove(ids)
        return ids

    def _body(self: ContextManager, message_id: str) -> list[StoredMessage]:
        """The live shards of the body the live message ``message_id`` is a shard of, in
        order; the message alone when it is no shard."""
        stored = self._records.messages()
        at = self._records.position(message_id)
        shard = shard_of(message_id, stored[at].message)
        if shard is None:
            return [stored[at]]
        first = max(0, at - shard.index)
        out: list[StoredMessage] = []
        for s in stored[first : first + shard.count]:
            found = shard_of(s.id, s.message)
            if found is not None and found.group == shard.group:
                out.append(s)
        return out

    def _live_body(self: ContextManager, message_id: object) -> list[StoredMessage]:
        """:meth:`_body` of ``message_id``; empty when it names no live message."""
        if not isinstance(message_id, str):
            return []
        try:
            return self._body(message_id)
        except KeyError:
            return []

    def _whole_bodies(self: ContextManager, ids: Iterable[Any]) -> list[Any]:
        """``ids`` with each live shard's id widened to its whole body's ids, in order,
        each once; ``ids`` as given when it names no shard (or holds anything but
        strings: for the callee to refuse)."""
        given = list(ids)
        if not all(isinstance(i, str) for i in given):
            return given
        out: dict[Any, None] = {}
        for i in given:
            body = self._live_body(i)
            if len(body) > 1:
                out.update(dict.fromkeys(s.id for s in body))
            else:
                out[i] = None
        return list(out) if len(out) > len(set(given)) else given

    @operation()
    def get_body(self: ContextManager, message_id: str) -> str:
        """The whole text of the body ``message_id`` belongs to: for a shard of a body
        stored in parts (any of them; the id :meth:`add_message` returned is its first),
        its shards' texts joined, which is the text added byte for byte; for a message
        stored whole, its text (:attr:`Message.text`).

        :meth:`get_message` of a shard is that shard alone.

        Raises
        ------
        UnknownMessageError
            For an unknown id (a ``KeyError``).
        ArgumentTypeError
            For an id that is not a str.

        Examples
        --------
        >>> from context_manager import CharsCounter, ContextManager
        >>> from context_manager.strategies.autobiographical import AutobiographicalStrategy
        >>> s = AutobiographicalStrategy(compression_model="extractive", target_chunk_tokens=10)
        >>> text = "A long pasted report. " * 6
        >>> with ContextManager.open(path=":memory:", counter=CharsCounter(), strategy=s) as cm:
        ...     first = cm.add_message("User", text)
        ...     parts = cm.get_message_count()
        ...     whole = cm.get_body(first)
        ...     shard = cm.get_message(first).text
        >>> parts, whole == text, shard == text[: len(shard)] and len(shard) < len(text)
        (3, True, True)
        """
        self._at(message_id, "message_id")
        body = self._body(message_id)
        if len(body) == 1 and shard_of(message_id, body[0].message) is None:
            return body[0].message.text
        return "".join(s.message.text for s in body)

    def _remove(self: ContextManager, ids: Sequence[str]) -> None:
        """Remove live messages ``ids`` (one transaction; the strategy hears once)."""
        self._read_only(ids)
        gone = set(ids)
        with self._store.transaction():
            for message_id in ids:
                self._store.redact(self._slot, message_id)
            for entry in self.context_log():
                if entry.source_id in gone and entry.relation == "copy":
                    self._store.redact(self._log_slot, entry.id)
            for message_id in ids:
                self._holds.pop(message_id, None)
                self._held_at.pop(message_id, None)
                self._records.tokens.pop(message_id, None)
            self._version += 1
            self._records.save()
            self._store.drop_derived(self._records.scope, [int(i) for i in ids])
            if self._records.cache is not None:
                for at in sorted((self._records.position(i) for i in ids), reverse=True):
                    del self._records.cache[at]
                    self._records.derived.removed(at, len(self._records.cache))
            if not self._presented.presenting:
                self._strategy.on_messages_removed(self._ctx, list(ids))
            else:  # the rows the window held leave it; the others were never shown
                held = self._presented.index().held_among(ids)
                if held:
                    self._presented.take_out(held)

    @operation(writes=True)
    def add_context_entry(
        self: ContextManager,
        message_id: str,
        relation: Relation = "copy",
        content: str | Sequence[ContentBlock] | None = None,
    ) -> str:
        """Record a context-log entry about a message; returns the entry id.

        Parameters
        ----------
        message_id : str
        relation : {"copy", "derived", "referenced"}
            A ``copy`` follows the message's edits and is removed with it; the
            others are left as they are.
        content : str or sequence of blocks, optional
            The entry's content; the message's own content when omitted.

        Raises
        ------
        UnknownMessageError
            For an unknown message id (a ``KeyError``).
        ArgumentError
            For an unknown relation, a ``message_id`` that is not a str or ``content``
            that is neither a str nor content blocks, naming it.
        """
        self._check_open()
        check_choice(relation, "relation", ("copy", "derived", "referenced"))
        blocks = None if content is None else check_content(content)
        message = self.get_message(message_id)
        if blocks is not None:
            message = message.model_copy(update={"content": blocks})
        body = {
            "source_id": message_id,
            "relation": relation,
            "message": message.model_dump(mode="json"),
        }
        return self._store.append(self._log_slot, body).id

    @operation()
    def context_log(self: ContextManager) -> list[ContextEntry]:
        """The context-log entries, oldest first."""
        self._check_open()
        return [ContextEntry(id=i.id, **i.body) for i in self._store.items(self._log_slot)]

    def _log_entries(
        self: ContextManager, message_id: str, relation: Relation
    ) -> list[ContextEntry]:
        return [
            e for e in self.context_log() if e.source_id == message_id and e.relation == relation
        ]

    @operation()
    def get_message(self: ContextManager, message_id: str) -> Message:
        """One message. For the id of a body stored in parts (what :meth:`add_message`
        returned for it) this is its first shard alone: :meth:`get_body` reads the whole
        text.

        Raises
        ------
        UnknownMessageError
            For an unknown id (a ``KeyError``).
        ArgumentTypeError
            For an id that is not a str.
        """
        return self._records.messages()[self._at(message_id, "message_id")].message

    def _at(self: ContextManager, message_id: object, param: str) -> int:
        """The position of the live message ``message_id`` (an argument named ``param``).

        Raises
        ------
        ArgumentTypeError
            For an id that is not a str.
        UnknownMessageError
            For an id that names no live message.
        """
        known = check_id(message_id, param)
        try:
            return self._records.position(known)
        except KeyError:
            named = (
                f"no message with id {known!r}"
                if param == "message_id"
                else f"{param}={known!r} names no message"
            )
            raise UnknownMessageError(
                f"{named} on branch {self.current_branch!r}", param=param, ids=(known,)
            ) from None

    @operation()
    def get_messages(self: ContextManager) -> list[StoredMessage]:
        """Every live message of the current branch, oldest first."""
        return list(self._records.messages())

    @operation()
    def query_messages(
        self: ContextManager,
        *,
        participant: str | Sequence[str] | None = None,
        from_time: float | None = None,
        to_time: float | None = None,
        text: str | None = None,
        metadata: Mapping[str, Any] | None = None,
        limit: int | None = None,
        reverse: bool = False,
    ) -> QueryResult:
        """The live messages that pass every filter given, oldest first (newest first
        with ``reverse``), at most ``limit`` of them, and how many pass in all.

        Parameters
        ----------
        participant : str or sequence of str, optional
            Only messages from this participant (or these).
        from_time, to_time : float, optional
            Only messages whose timestamp is at or after ``from_time`` and at or before
            ``to_time`` (a message without a timestamp passes no time bound).
        text : str, optional
            Only messages whose text (:attr:`Message.text`) holds it, ignoring case.
        metadata : mapping, optional
            Only messages whose metadata holds each value at its dotted path
            (``{"external.source": "slack"}`` reads ``metadata["external"]["source"]``).
        limit : int, optional
            At most this many messages (``total_count`` still counts every match).
        reverse : bool
            Newest first: with ``limit``, the newest matches.

        Raises
        ------
        ArgumentError
            For an argument of the wrong type (an :class:`ArgumentTypeError`) or value,
            naming it: a negative ``limit``, a time that is not a finite number,
            ``from_time`` after ``to_time``, or ``metadata`` that is not a mapping of
            dotted paths.

        Examples
        --------
        >>> from context_manager import ContextManager, CharsCounter
        >>> with ContextManager.open(path=":memory:", counter=CharsCounter()) as cm:
        ...     _ = cm.add_message("User", "deploy the app", metadata={"external": {"id": "7"}})
        ...     _ = cm.add_message("Claude", "Deployed.")
        ...     _ = cm.add_message("User", "thanks")
        ...     found = cm.query_messages(text="DEPLOY", limit=1, reverse=True)
        >>> [m.message.text for m in found.messages], found.total_count
        (['Deployed.'], 2)
        """
        return query(
            self._records.messages(),
            participant=participant,
            from_time=from_time,
            to_time=to_time,
            text=text,
            metadata=metadata,
            limit=limit,
            reverse=reverse,
        )

    @operation()
    def find_message_by_external_id(
        self: ContextManager, source: str, external_id: str
    ) -> str | None:
        """The id of the newest message whose metadata names this origin
        (``metadata["external"]["source"]`` and ``["id"]``), or None.

        Raises
        ------
        ArgumentTypeError
            For a ``source`` or ``external_id`` that is not a str.
        """
        check_text(source, "source")
        check_text(external_id, "external_id")
        found = self.query_messages(
            metadata={"external.source": source, "external.id": external_id},
            limit=1,
            reverse=True,
        )
        return found.messages[0].id if found.messages else None

    @property
    def sequence(self: ContextManager) -> int:
        """The store's newest sequence on the current branch: a point of its history
        :meth:`get_messages_at` can go back to (each stored message's ``seq`` is another)."""
        self._check_open()
        return self._store.sequence

    @operation()
    def get_messages_at(
        self: ContextManager, *, sequence: int | None = None, time: float | None = None
    ) -> list[StoredMessage]:
        """The branch's history as it stood: every message live then, as it read then,
        oldest first.

        Parameters
        ----------
        sequence : int, optional
            A store sequence (:attr:`sequence`, a stored message's ``seq``): the history
            just after that write.
        time : float, optional
            A time, read off the messages' own timestamps (edits and removals carry
            none): the history just before the first message stamped later than it was
            stored. Give exactly one of the two.

        Raises
        ------
        ConfigError
            Unless exactly one of ``sequence`` and ``time`` is given.
        ArgumentError
            For a sequence that is not an int in ``[0, sequence]`` or a time that is not
            a finite number (an :class:`ArgumentTypeError` for the wrong type).

        Examples
        --------
        >>> from context_manager import ContextManager, CharsCounter
        >>> with ContextManager.open(path=":memory:", counter=CharsCounter()) as cm:
        ...     first = cm.add_message("User", "draft", timestamp=10.0)
        ...     then = cm.sequence
        ...     cm.edit_message(first, "final")
        ...     _ = cm.add_message("User", "later", timestamp=20.0)
        ...     old = [m.message.text for m in cm.get_messages_at(sequence=then)]
        ...     by_time = [m.message.text for m in cm.get_messages_at(time=15.0)]
        >>> old, by_time
        (['draft'], ['final'])
        """
        at = self._records.as_of(sequence, time)
        return [
            StoredMessage.from_store(self._store, item, seq, rev)
            for item, (seq, rev) in self._records.replay(at).items()
        ]

    @operation()
    def get_message_at(
        self: ContextManager,
        message_id: str,
        *,
        sequence: int | None = None,
        time: float | None = None,
    ) -> Message | None:
        """One message as it stood (see :meth:`get_messages_at` for ``sequence`` and
        ``time``): None when it was not live then (not stored yet, or removed).

        Raises
        ------
        ConfigError
            As :meth:`get_messages_at` does.
        ArgumentTypeError
            For a ``message_id`` that is not a str.
        """
        check_id(message_id, "message_id")
        at = self._records.as_of(sequence, time)
        found = self._records.replay(at, only=message_id).get(message_id)
        if found is None:
            return None
        return StoredMessage.from_store(self._store, message_id, *found).message

    def _read_only(self: ContextManager, ids: Iterable[str]) -> None:
        """Refuse to change rows another writer's view lends this manager."""
        if not self._aux_slots:
            return
        wanted = set(ids)
        for slot in self._aux_slots:
            lent = wanted.intersection(i.id for i in self._store.items(slot))
            if lent:
                writer = "the shared slot" if slot == "messages" else slot.rsplit("/", 1)[0]
                raise ConfigError(
                    f"messages {sorted(lent)} belong to {writer}, an auxiliary view of this "
                    "manager (read-only); change them through that writer's manager"
                )
