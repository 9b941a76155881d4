"""``ContextManager``: the store, the strategy and the compile loop."""

from __future__ import annotations

import functools
import json
import logging
import math
import os
import threading
import time
import warnings
from collections.abc import Callable, Iterable, Mapping, Sequence
from contextlib import suppress
from pathlib import Path
from typing import Any, Literal, TypeVar

from pydantic import ValidationError

from .arguments import (
    MAX_LEVEL,
    MAX_WINDOW_TOKENS,
    check_choice,
    check_content,
    check_flag,
    check_id,
    check_ids,
    check_int,
    check_items,
    check_mapping,
    check_number,
    check_path,
    check_pin_levels,
    check_protocol,
    check_seconds,
    check_sequence,
    check_text,
    check_tools,
    refusal,
)
from .compiler import MAX_CATCH_UP_RECHECKS as MAX_CATCH_UP_RECHECKS
from .compiler import MAX_CATCH_UP_TICKS as MAX_CATCH_UP_TICKS
from .compiler import (
    Compiler,
    ThinkingArgs,
    catch_up,
    plain_copy,
)
from .deadline import BoundedCaller, CallerBusyError, DeadlineError
from .errors import (
    ArgumentError,
    ArgumentTypeError,
    ConfigError,
    ContextManagerError,
    NoSummarizerWarning,
    OverBudgetError,
    StoreFullWarning,
    SummarizerNotConfiguredError,
    SummarizerTimeoutError,
    UnknownMessageError,
)
from .messages import (
    ContentBlock,
    Message,
)
from .operations import Gate, Ticker, operation
from .presented import PresentedWindow
from .reads import preview_of, query
from .recall import (
    DEFAULT_MAX_CHARS,
    RECALL_TOOL_NAME,
    RecallTool,
    answer_recall,
    check_recall_input,
    matching_memories,
    recall_definition,
)
from .record_cache import RecordCache, SavedCounts, counter_key
from .request import (
    INJECTION_ACCEPTED,
    INJECTION_PREFIX,
    CompileResult,
    ContextEntry,
    FoldedMemory,
    Injection,
    Overhead,
    Preview,
    QueryResult,
    Relation,
    place_injections,
)
from .store import Branch, Store, StoreError, StoreFullError
from .strategies.autobiographical.prompts import clean as clean_answer
from .strategies.base import (
    AnswerNeeded,
    Answers,
    StoredMessage,
    Strategy,
    StrategyContext,
)
from .strategies.contract import REQUIRED_HOOKS, capabilities_of
from .strategies.default import DEFAULT_WINDOW, default_strategy
from .summarizer import (
    MEMORY_MARKER_PARTICIPANT,
    TOPIC_TRANSITION,
    Completion,
    CompletionRequest,
    Summarizer,
)
from .thinking import (
    NotedRow,
    RequestIdentity,
    ThinkingBinding,
)
from .tokens import TiktokenCounter, TokenCounter
from .window import (
    WindowStatus,
)

__all__ = [
    "INJECTION_PREFIX",
    "TOPIC_TRANSITION",
    "CompileResult",
    "ContextEntry",
    "ContextManager",
    "FoldedMemory",
    "Injection",
    "NoSummarizerWarning",
    "Overhead",
    "Preview",
    "QueryResult",
    "SavedCounts",
    "StoreFullWarning",
    "counter_key",
    "default_strategy",
    "place_injections",
]

STRATEGY_ACCEPTED = (
    "a Strategy (a subclass of context_manager.strategies.Strategy, or an object with "
    "all of its hooks)"
)
DEFAULT_NAMESPACE = "default"
"""The namespace of a manager opened without one: its context log is the slot
``context``, where every other namespace's is ``<namespace>/context``."""


HOLD_ACCEPTED = "True, False or a positive finite number of seconds"


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


_R = TypeVar("_R")
_log = logging.getLogger(__name__)
DEFAULT_RESERVE = 4_000
"""The most a compile keeps for the answer by default (a quarter of a smaller window)."""
MAX_TICK_CALLS = 64
"""Most summariser calls one :meth:`ContextManager.tick` makes outside the lock (a memory
takes one, or a few more after a refusal; more only when the state keeps changing the
request under it)."""
TRANSITION_INSTRUCTION = (
    "[CM] The conversation is moving to a new topic. In your own words, summarise what "
    "happened so far and what carries forward (decisions, open work, facts to keep), as "
    "plain prose."
)
"""The instruction that closes the request for a transition summary."""
TRANSITION_MAX_TOKENS = 1024
"""Output cap of the request for a transition summary."""

TRANSITION_TIMEOUT_SECONDS = 320.0
"""Deadline of the transition summary's call when the strategy sets none."""


def _injections(injections: object) -> tuple[Injection, ...]:
    """The ``injections`` of a compile, checked."""
    return check_items(injections, "injections", Injection, INJECTION_ACCEPTED)


def _check_overhead(overhead: object) -> None:
    """Refuse an ``overhead`` that is not an :class:`Overhead` (or None)."""
    if overhead is not None and not isinstance(overhead, Overhead):
        raise ArgumentTypeError(
            "overhead",
            overhead,
            "an Overhead (Overhead(system=..., tools=..., tokens=...)) or None",
        )


def _thinking_args(
    binding: ThinkingBinding | None, identity: RequestIdentity | str | None
) -> ThinkingArgs | None:
    """The checked ``thinking_binding`` and ``identity`` of a compile (None without one)."""
    identity_accepted = "a RequestIdentity, a model name (a non-empty str) or None"
    if identity is not None and not isinstance(identity, RequestIdentity | str):
        raise ArgumentTypeError("identity", identity, identity_accepted)
    if isinstance(identity, str) and not identity:
        raise ArgumentError("identity", identity, identity_accepted, hint="pass the model's name")
    if binding is None:
        if identity is not None:
            raise ConfigError(
                "identity= is read only with thinking_binding=; pass "
                "thinking_binding=ThinkingBinding() too, or leave identity out"
            )
        return None
    if not isinstance(binding, ThinkingBinding):
        raise ArgumentTypeError("thinking_binding", binding, "a ThinkingBinding or None")
    if identity is None and binding.binds:
        raise ConfigError(
            "thinking_binding binds, so the compile needs identity=: the model's name, "
            "or a RequestIdentity of what the request is sent under"
        )
    return binding, identity


MIN_RECALL_CHARS = 300
"""The fewest characters a recall answer may be cut to (``max_chars``)."""


def _levels(levels: object) -> list[int]:
    """``levels`` of a summary search: ints from 1."""
    return [
        check_int(x, f"levels[{i}]", low=1, high=MAX_LEVEL)
        for i, x in enumerate(check_sequence(levels, "levels", "a sequence of summary levels"))
    ]


def _check_strategy(strategy: object) -> None:
    """Refuse a strategy that is neither a :class:`Strategy` nor has all its hooks."""
    if not isinstance(strategy, Strategy):
        hooks = (*REQUIRED_HOOKS, "on_presented", "on_retracted")
        check_protocol(strategy, "strategy", hooks, STRATEGY_ACCEPTED)


def _check_parts(strategy: object, summarizer: object, counter: object, clock: object) -> None:
    """The objects :meth:`ContextManager.open` is given: each None (the default) or one
    with the methods it is called through."""
    if strategy is not None:
        _check_strategy(strategy)
    if summarizer is not None:
        check_protocol(
            summarizer, "summarizer", ("complete",), "a Summarizer (an object with complete())"
        )
    if counter is not None:
        check_protocol(
            counter,
            "counter",
            ("count_text", "count_message"),
            "a TokenCounter (an object with count_text() and count_message())",
        )
    check_protocol(clock, "clock", ("__call__",), "a callable returning seconds (time.monotonic)")


def _auxiliary_slots(views: Sequence[str | None], own: str) -> tuple[str, ...]:
    """The message slots of ``auxiliary_views``, checked (each once, never ``own``)."""
    hint = f"not one string; use [{views!r}]" if isinstance(views, str) else ""
    slots: list[str] = []
    found = check_sequence(views, "auxiliary_views", "a sequence of namespaces", hint)
    for i, view in enumerate(found):
        if view is not None:
            accepted = "a writer's namespace (a non-empty str), or None for the shared slot"
            check_text(view, f"auxiliary_views[{i}]", empty=False, accepted=accepted)
        slot = "messages" if view is None else f"{view}/messages"
        if slot == own:
            raise ConfigError(
                f"auxiliary_views names this manager's own messages ({view!r}); a view "
                "merges another writer's"
            )
        if slot not in slots:
            slots.append(slot)
    return tuple(slots)


class ContextManager:
    """Keeps every message and compiles the context of each model call.

    Open with :meth:`open`; use as a context manager to close it.

    Examples
    --------
    >>> from context_manager import ContextManager, CharsCounter
    >>> with ContextManager.open(path=":memory:", counter=CharsCounter()) as cm:
    ...     _ = cm.add_message("User", "hello there")
    ...     _ = cm.add_message("Claude", "hi!")
    ...     [m.text for m in cm.compile(max_tokens=1000, reserve_for_response=100).messages]
    ['hello there', 'hi!']
    """

    def __init__(
        self,
        store: Store,
        *,
        owns_store: bool,
        strategy: Strategy,
        summarizer: Summarizer | None,
        counter: TokenCounter,
        namespace: str,
        isolate: bool,
        clock: Callable[[], float],
        auto_tick: bool | Literal["after_compile"] = False,
        auxiliary_views: Sequence[str | None] = (),
    ) -> None:
        self._store = store
        self._owns_store = owns_store
        self._strategy = strategy
        self._caps = capabilities_of(strategy)
        """What the strategy offers beyond the required hooks, read once."""
        self._summarizer = summarizer
        self._transition_caller = BoundedCaller("context-transition")
        self._counter = counter
        self._namespace = namespace
        self._slot = f"{namespace}/messages" if isolate else "messages"
        self._aux_slots = _auxiliary_slots(auxiliary_views, self._slot)
        """Other writers' message slots merged read-only into this manager's record, by
        sequence (``auxiliary_views``)."""
        # the context log is the namespace's own, isolated or not; the default
        # namespace keeps the unprefixed slot its stores have always held
        self._log_slot = "context" if namespace == DEFAULT_NAMESPACE else f"{namespace}/context"
        self._thinking_slot = f"{namespace}/thinking-binding"
        """Where the branch's record of the last request it sent lives (a snapshot slot:
        each branch sees its own)."""
        self._clock = clock
        self._holds: dict[str, float | None] = {}
        self._frame_slot = f"{namespace}/frame"
        """Where the request's frame lives: the system prompt and tool definitions (a
        snapshot slot, one record per change: each branch sees its own, a derived store
        carries it)."""
        self._records = RecordCache(store, counter, self._slot, self._aux_slots)
        """The record's messages and what each costs and looks like as sent."""
        self._presented = PresentedWindow(
            store,
            self._records,
            f"{namespace}/window",  # one record per call that changed it
            where=self._where,
            presented=self._tell_presented,
            retracted=self._tell_retracted,
            changed=self._bump_version,
            wake=self._wake_ticker,
        )
        """The agent's window over the record and the view of it the strategy reads."""
        self._version = 0
        self._render_stats: dict[str, Any] | None = None
        self._closed = False
        self._gate = Gate(
            store, check_open=self._check_open, resync=self._resync, closed=lambda: self._closed
        )
        self._lock = self._gate.lock
        self._tick_lock = threading.Lock()
        """Held through a whole tick, its summariser calls included: one tick at a time."""
        self._answers: Answers | None = None
        """The answers of the tick pass in progress (:meth:`tick`)."""
        self._ctx = StrategyContext(
            store=store,
            namespace=namespace,
            messages=self._presented.view,
            count=self._records.count,
            forms=self._presented.forms,
            sent=self._presented.sent,
            sent_revision=self._presented.revision,
            version=lambda: self._version,
            counter=self._records.saved_counts,
            summarizer=summarizer,
            is_held=self._is_held,
            held_ids=self._held_ids,
            tools=lambda: self._tools,
            system_prompt=lambda: self._system_prompt,
            clock=clock,
            out_of_window=self._presented.out_of_window,
            presenting=lambda: self._presented.presenting,
            answers=lambda: self._answers,
        )
        self._compiler = Compiler(
            store,
            counter,
            self._records.saved_counts,
            self._thinking_slot,
            strategy=lambda: self._strategy,
            ctx=self._ctx,
        )
        """Builds each request, and keeps what the next one is compared with."""
        with self._lock:
            strategy.initialize(self._ctx)
            self._gate.mark_seen()
        if auto_tick:
            self._gate.ticker = Ticker(self, settles=auto_tick == "after_compile")

    # ----------------------------------------------------------------- opening
    @classmethod
    def open(
        cls,
        *,
        path: str | Path | None = None,
        store: Store | None = None,
        strategy: Strategy | None = None,
        summarizer: Summarizer | None = None,
        counter: TokenCounter | None = None,
        namespace: str | None = None,
        isolate: bool = False,
        clock: Callable[[], float] = time.monotonic,
        auto_tick: bool | Literal["after_compile"] = False,
        auxiliary_views: Sequence[str | None] = (),
        window_tokens: int | None = None,
        memory_model: str | None = None,
    ) -> ContextManager:
        """Open a manager on a store file (``path``) or an app-owned :class:`Store`.

        Without a ``strategy``, a manager given a ``summarizer`` folds: it uses the
        autobiographical strategy sized for the window
        (:meth:`AutobiographicalConfig.for_window
        <context_manager.strategies.autobiographical.AutobiographicalConfig.for_window>`
        of ``window_tokens``, :data:`DEFAULT_WINDOW` when None), its memories written
        by ``memory_model`` (by default the summariser's ``model`` attribute, which
        :class:`ExtractiveSummarizer` has). Without a summariser it uses
        :class:`PassthroughStrategy`: the task and the newest messages that fit, tool
        results capped when the newest turn alone does not fit, nothing summarised.
        ``compile()`` then takes ``window_tokens`` as its default ``max_tokens``.

        With ``auto_tick=True``, compression runs on a background thread: after each new
        message and each compile it ticks until no work is left, so the agent's thread
        never runs the summariser, and the summariser is called with no lock held
        (:meth:`tick`): adding messages and compiling never wait for it. When the
        worker writes a memory then depends on timing, so two runs of the same calls
        may fold differently. ``auto_tick="after_compile"`` is the reproducible mode:
        the worker starts only after a compile, and any other operation (from another
        thread than the worker) first waits until it has no work left, so the work
        runs at the same points in every run; the agent waits only when its next call
        comes before the memories are written. :meth:`wait_for_ticks` waits until the
        worker is idle; :meth:`close` lets the tick in progress finish and stops the
        worker.

        Several managers share one record by opening the same :class:`Store` (``store=``),
        each under its own ``namespace``: the messages are common to all of them (one
        sees what another added, edited or removed, with the same ids) unless
        ``isolate``, which keeps a namespace's messages to itself; the strategy's state
        and the context log (:meth:`context_log`) are always the namespace's own. The
        same file opened twice with ``path=`` is refused
        (:class:`~context_manager.store.StoreLockedError`): one store object per file.
        ``auxiliary_views`` names other writers whose messages this manager's record
        also holds, read-only: the namespace of an isolated writer (its own message
        slot), or None for the shared one (from an isolated manager). Their rows are
        merged with this manager's own by the order they were stored; this manager
        cannot edit or remove them (:class:`ConfigError` names the writer), and its
        record follows what they write.

        Raises
        ------
        ConfigError
            Unless exactly one of ``path`` and ``store`` is given, when ``isolate``
            is set without a ``namespace``, when ``window_tokens`` or ``memory_model``
            is given with a ``strategy`` (size the strategy itself), or when the
            default strategy has a summariser but no model to name in its requests.
        ArgumentError
            For an argument of the wrong type or out of range (an :class:`ArgumentTypeError`
            for the wrong type), naming it; nothing is opened.
        """
        _check_parts(strategy, summarizer, counter, clock)
        if path is not None:
            check_path(path)
        if store is not None and not isinstance(store, Store):
            raise ArgumentTypeError("store", store, "a Store (Store.open(path)) or None")
        if namespace is not None:
            check_text(namespace, "namespace", empty=False)
        check_flag(isolate, "isolate")
        if not isinstance(auto_tick, bool) and auto_tick != "after_compile":
            raise ArgumentError("auto_tick", auto_tick, "True, False or 'after_compile'")
        if strategy is None:
            strategy = default_strategy(summarizer, window_tokens, memory_model)
        elif window_tokens is not None or memory_model is not None:
            given = "window_tokens" if window_tokens is not None else "memory_model"
            raise ConfigError(
                f"{given} sizes the default strategy; a strategy given to open() is sized "
                "by its own config (AutobiographicalConfig.for_window(window, "
                "compression_model=...))"
            )
        if (path is None) == (store is None):
            raise ConfigError("give exactly one of path= (a store file) or store= (a Store)")
        if isolate and not namespace:
            raise ConfigError("isolate=True needs a namespace= to isolate the messages under")
        _auxiliary_slots(auxiliary_views, f"{namespace}/messages" if isolate else "messages")
        owns = store is None
        opened = Store.open(path) if store is None else store  # type: ignore[arg-type]
        try:
            return cls(
                opened,
                owns_store=owns,
                strategy=strategy,
                summarizer=summarizer,
                counter=counter or TiktokenCounter(),
                namespace=namespace or DEFAULT_NAMESPACE,
                isolate=isolate,
                clock=clock,
                auto_tick=auto_tick,
                auxiliary_views=auxiliary_views,
            )
        except BaseException:
            if owns:
                opened.close()
            raise

    def close(self) -> None:
        """Close the manager (and the store when it owns it). Idempotent.

        Per-message values computed since the last write are saved first (a failure
        to save them loses nothing: they are computed again on the next open)."""
        gate: Gate | None = getattr(self, "_gate", None)  # None when __init__ failed
        ticker = gate.ticker if gate is not None else None
        if ticker is not None:
            ticker.stop()  # outside the lock: the tick in progress needs it to finish
        with self._lock:
            if self._closed:
                return
            # what another manager wrote since is not in this one's view: save nothing
            fresh = not self._store.closed and self._gate.fresh
            if fresh:
                with suppress(StoreError):
                    self._records.save(closing=True)
            self._closed = True
            if self._owns_store:
                self._store.close()

    def __enter__(self) -> ContextManager:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    @property
    def store(self) -> Store:
        """The underlying store."""
        return self._store

    @property
    def strategy(self) -> Strategy:
        """The current strategy (:meth:`set_strategy` swaps it)."""
        return self._strategy

    @operation(writes=True)
    def set_strategy(self, strategy: Strategy) -> None:
        """Swap the strategy of a live manager.

        The new strategy loads its state for the current branch from the store (what it
        persisted before under this namespace, if anything) before any other operation
        runs: a tick of ``auto_tick`` in progress finishes first, and the next one is
        the new strategy's. Render stats start over (None until the next live compile);
        messages, holds and the thinking record are the manager's and stay.

        Raises
        ------
        ArgumentTypeError
            For an object with no ``select`` or ``initialize``.
        Exception
            Whatever the new strategy's ``initialize`` raises: the old strategy stays,
            reloaded, and nothing it wrote is kept.

        Examples
        --------
        >>> from context_manager import ContextManager, CharsCounter, PassthroughStrategy
        >>> with ContextManager.open(path=":memory:", counter=CharsCounter()) as cm:
        ...     replacement = PassthroughStrategy()
        ...     cm.set_strategy(replacement)
        ...     cm.strategy is replacement
        True
        """
        _check_strategy(strategy)
        old = self._strategy, self._caps
        self._strategy, self._caps = strategy, capabilities_of(strategy)
        try:
            strategy.initialize(self._ctx)
        except BaseException:
            self._strategy, self._caps = old  # the operation's rollback reloads it
            raise
        self._render_stats = None
        self._compiler.strategy_changed()
        if self._ticker is not None:
            self._ticker.wake()

    # ---------------------------------------------------------------- messages
    @operation(writes=True)
    def add_message(
        self,
        participant: str,
        content: str | Sequence[ContentBlock],
        *,
        metadata: dict[str, Any] | None = None,
        hold: bool | float = False,
        timestamp: float | None = None,
    ) -> str:
        """Append a message; returns its id.

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

        Raises
        ------
        ArgumentError
            For an argument of the wrong type (an :class:`ArgumentTypeError`) or value,
            naming it (``content[0].text``): a ``participant`` that is not a non-empty
            str, ``content`` that is neither a str nor content blocks, ``metadata`` that
            is not a mapping of JSON values, a ``hold`` that is neither a bool nor a
            positive number of seconds, or a ``timestamp`` that is not a finite number.
            Checked before anything is written.
        MessageFormatError
            For content or metadata that cannot be stored (a lone surrogate, a value
            that is not JSON), naming the field.
        """
        if not isinstance(hold, bool):
            check_seconds(hold, "hold", accepted=HOLD_ACCEPTED)
        message = _new_message(participant, content, metadata, timestamp)
        body = message.model_dump(mode="json")
        with self._store.transaction():
            item = self._store.append(self._slot, body)
            stored = StoredMessage(item.id, item.seq, message, item.rev)
            if self._records.cache is not None:
                self._records.cache.append(stored)
                self._records.derived.appended(len(self._records.cache))
            self._records.save()
            if hold:
                self.hold_compression([item.id], timeout=None if hold is True else float(hold))
            if not self._presented.presenting:  # else the row waits for present_rows
                self._tell_presented([stored])
        if self._ticker is not None:
            self._ticker.wake()
        return item.id

    @operation(writes=True)
    def edit_message(self, message_id: str, content: str | Sequence[ContentBlock]) -> None:
        """Replace a message's content (existing summaries keep their text).

        Raises
        ------
        UnknownMessageError
            For an unknown id (a ``KeyError``).
        ArgumentError
            For a ``message_id`` that is not a str or ``content`` that is neither a str
            nor content blocks, naming it.
        """
        check_id(message_id, "message_id")
        blocks = check_content(content)
        old = self.get_message(message_id)
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
    def remove_message(self, message_id: str) -> None:
        """Remove a message from the record (and drop its hold).

        The strategy hears of it in the same transaction (memories over the message
        are dropped and what they kept is remembered again): through
        ``on_messages_removed`` while the window is the record, and once a host
        presents through ``on_retracted``, when the window held the message (which it
        then no longer does). Other managers on the store do not hear of it
        (:meth:`retract_removed`).

        Raises
        ------
        UnknownMessageError
            For an unknown id (a ``KeyError``).
        ArgumentTypeError
            For an id that is not a str.
        """
        self.get_message(message_id)
        self._remove([message_id])

    @operation(writes=True)
    def remove_messages(self, first_id: str, last_id: str) -> list[str]:
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
        ids = [s.id for s in stored[a : b + 1]]
        self._remove(ids)
        return ids

    def _remove(self, ids: Sequence[str]) -> None:
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
        self,
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
    def context_log(self) -> list[ContextEntry]:
        """The context-log entries, oldest first."""
        self._check_open()
        return [ContextEntry(id=i.id, **i.body) for i in self._store.items(self._log_slot)]

    def _log_entries(self, message_id: str, relation: Relation) -> list[ContextEntry]:
        return [
            e for e in self.context_log() if e.source_id == message_id and e.relation == relation
        ]

    @operation()
    def get_message(self, message_id: str) -> Message:
        """One message.

        Raises
        ------
        UnknownMessageError
            For an unknown id (a ``KeyError``).
        ArgumentTypeError
            For an id that is not a str.
        """
        return self._records.messages()[self._at(message_id, "message_id")].message

    def _at(self, message_id: object, param: str) -> int:
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
    def get_messages(self) -> list[StoredMessage]:
        """Every live message of the current branch, oldest first."""
        return list(self._records.messages())

    @operation()
    def query_messages(
        self,
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
    def find_message_by_external_id(self, source: str, external_id: str) -> str | None:
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
    def sequence(self) -> int:
        """The store's newest sequence on the current branch: a point of its history
        :meth:`get_messages_at` can go back to (each stored message's ``seq`` is another)."""
        self._check_open()
        return self._store.sequence

    @operation()
    def get_messages_at(
        self, *, sequence: int | None = None, time: float | None = None
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
        self, message_id: str, *, sequence: int | None = None, time: float | None = None
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

    def _read_only(self, ids: Iterable[str]) -> None:
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

    # ------------------------------------------------------------------ compile
    def compile(
        self,
        *,
        max_tokens: int | None = None,
        reserve_for_response: int | None = None,
        injections: Iterable[Injection] = (),
        overhead: Overhead | None = None,
        dry_run: bool = False,
        catch_up: bool | float = True,
        thinking_binding: ThinkingBinding | None = None,
        identity: RequestIdentity | str | None = None,
    ) -> CompileResult:
        """Compile the context of the next model call.

        The input budget, ``max_tokens - reserve_for_response``, covers the whole
        request: the history the strategy selects, the injections and the
        overhead. All of it is priced before the strategy selects, never added after.

        Parameters
        ----------
        max_tokens, reserve_for_response : int, optional
            The window and the part kept for the answer; the input may use the difference.
            By default the window the strategy's config was sized for
            (``AutobiographicalConfig.for_window``, ``window_tokens`` at open), else
            100,000 tokens; and the reserve sized with that window when the window is
            the sized one, else a quarter of the window, at most 4,000.
        injections : iterable of Injection
        overhead : Overhead, optional
            What the request carries besides its messages. By default the system prompt
            and tool definitions given to :meth:`set_system_prompt` and
            :meth:`set_tool_definitions`; ``Overhead()`` prices none.
        dry_run : bool
            Compute without committing anything (no persisted frontier, no queued work).
        catch_up : bool or float, default True
            Before refusing, run the compression a fit needs: tick and compile again
            until the context fits, no work is left, or (a number: the deadline) that
            many seconds of the manager's clock have passed. The ticks write memories as
            :meth:`tick` does, so a call that writing memories would make fit is never
            refused; a context that fits compiles once and ticks nothing. ``False``
            refuses at once and leaves the loop to the caller: catch
            :class:`OverBudgetError`, :meth:`drain` (or tick), compile again. A dry run
            never ticks.
        thinking_binding : ThinkingBinding, optional
            For a model that binds signed thinking to the request chain it was minted in
            (:mod:`context_manager.thinking`): the compile leaves out of the copy it
            sends the thinking such a model can no longer take, against the branch's
            record of the last request it sent, and says so in
            :attr:`CompileResult.thinking_strip`. A committing compile then records this
            request as the last sent (under :attr:`CompileResult.compile_id`); a dry run
            records nothing. Thinking is never refused for: it is only left out.
        identity : RequestIdentity or str
            What the request is sent under, with ``thinking_binding``: a
            :class:`~context_manager.thinking.RequestIdentity`, or the model's name, and
            the identity is built from the system text and tools this request carries
            (:meth:`CompileResult.request_identity`).

        Raises
        ------
        OverBudgetError
            When even the most folded context exceeds the budget (never on a dry run),
            or when the overhead and injections alone do (stage ``request overhead``).
            After a catch-up, ``diagnostics["catch_up"]`` says how many ticks ran and
            why it stopped (a request that fitted after ticks says how many in
            ``render_stats["catch_up"]``).
        ConstraintConflictError
            When pins, locks, holds and zones leave some message no level to be shown at.
        ConfigError
            For a ``thinking_binding`` that binds without an ``identity``, or an
            ``identity`` without a ``thinking_binding``.
        ArgumentError
            For an argument of the wrong type (an :class:`ArgumentTypeError`: a bool or
            a float where an int is wanted, an injection that is not an
            :class:`Injection`...) or out of range, naming it (``injections[0]``):
            ``max_tokens`` outside ``[1, MAX_WINDOW_TOKENS]`` (``2**40``, the largest
            budget the fold model states), ``reserve_for_response`` below 0 or not below
            ``max_tokens``, a ``catch_up`` that is neither a bool nor a positive number
            of seconds. Checked before anything is done.

        Examples
        --------
        >>> from context_manager import ContextManager, CharsCounter
        >>> with ContextManager.open(path=":memory:", counter=CharsCounter()) as cm:
        ...     _ = cm.add_message("User", "hello there")
        ...     result = cm.compile(max_tokens=1000, reserve_for_response=100)
        >>> [m.text for m in result.messages], result.render_stats["tokens"]
        (['hello there'], 3)
        """
        thinking = _thinking_args(thinking_binding, identity)
        if isinstance(catch_up, bool):
            limit = math.inf if catch_up else None
        else:
            limit = check_seconds(catch_up, "catch_up", accepted=HOLD_ACCEPTED)
        check_flag(dry_run, "dry_run")
        wanted = _injections(injections)
        _check_overhead(overhead)
        self._check_open()
        max_tokens, reserve_for_response = self._budget(max_tokens, reserve_for_response)
        try:
            if limit is None or dry_run:
                return self._compile_op(
                    max_tokens, reserve_for_response, wanted, overhead, dry_run, thinking
                )
            return self._catch_up(
                max_tokens, reserve_for_response, wanted, overhead, limit, thinking
            )
        except StoreFullError as full:
            if dry_run:
                raise
            return self._unstored(
                full, max_tokens, reserve_for_response, wanted, overhead, thinking
            )
        finally:
            if self._ticker is not None and not dry_run:
                self._ticker.wake(compiled=True)  # a compile may have asked for memories

    @operation()
    def _unstored(
        self,
        full: StoreFullError,
        max_tokens: int,
        reserve_for_response: int,
        injections: Sequence[Injection],
        overhead: Overhead | None,
        thinking: ThinkingArgs | None,
    ) -> CompileResult:
        """The request of a compile whose bookkeeping the full store could not keep: the
        same compile, storing nothing (a dry run on the state as stored), marked in its
        render stats and with a :class:`StoreFullWarning`; ``full`` again when even that
        needs what could not be stored (memories to fit)."""
        self._resync()  # what the failed write changed in memory goes back to the store's
        result = self._compile(
            max_tokens, reserve_for_response, injections, overhead, True, thinking
        )
        if not result.messages and result.render_stats.get("fits") is False:
            raise full
        note = {"stored": False, "reason": str(full)}
        result.render_stats["bookkeeping"] = note
        self._render_stats = plain_copy(result.render_stats)
        warnings.warn(
            "compile(): the request was built but its bookkeeping could not be stored "
            f"({full}); the next compile recomputes it",
            StoreFullWarning,
            stacklevel=4,
        )
        return result

    @operation()
    def _compile_op(
        self,
        max_tokens: int,
        reserve_for_response: int,
        injections: Sequence[Injection],
        overhead: Overhead | None,
        dry_run: bool,
        thinking: ThinkingArgs | None = None,
    ) -> CompileResult:
        """One compile attempt, as one operation."""
        return self._compile(
            max_tokens, reserve_for_response, injections, overhead, dry_run, thinking
        )

    def _budget(self, max_tokens: int | None, reserve: int | None) -> tuple[int, int]:
        """The window and reserve of a compile: as given (checked), else what the
        strategy's config was sized for (its reserve only with its window), else
        :data:`DEFAULT_WINDOW` and a quarter of the window, at most
        :data:`DEFAULT_RESERVE`.

        Raises
        ------
        ArgumentError
            For a ``max_tokens`` that is not an int in ``[1, MAX_WINDOW_TOKENS]``, or a
            ``reserve_for_response`` that is not one from 0 and below the window.
        """
        profile = self._caps.profile
        if max_tokens is not None:
            max_tokens = check_int(max_tokens, "max_tokens", low=1, high=MAX_WINDOW_TOKENS)
        if reserve is not None:
            high, hint = MAX_WINDOW_TOKENS, ""
            if max_tokens is not None:
                high = max_tokens - 1
                hint = f"below max_tokens={max_tokens}, so the input keeps at least one token"
            check_int(reserve, "reserve_for_response", low=0, high=high, hint=hint)
        if max_tokens is None:
            max_tokens = profile.window_tokens or DEFAULT_WINDOW
        if reserve is None:
            sized = profile.reserve_for_response_tokens
            if sized is None or max_tokens != profile.window_tokens:
                sized = None  # a reserve sized for another window does not apply
            reserve = sized if sized is not None else min(DEFAULT_RESERVE, max_tokens // 4)
        return max_tokens, reserve

    def _catch_up(
        self,
        max_tokens: int,
        reserve_for_response: int,
        wanted: Sequence[Injection],
        overhead: Overhead | None,
        limit: float,
        thinking: ThinkingArgs | None = None,
    ) -> CompileResult:
        """Compile, ticking before each retry, until it fits or ``limit`` seconds pass.

        Each attempt is an operation and each tick a tick of its own (:meth:`tick`), so
        a tick of ``auto_tick`` in progress is waited for, not raced; a tick that finds
        no work while another thread stored something since the attempt (the worker's
        memory) is followed by one more attempt.

        Between attempts it runs batches of ticks (:func:`~.compiler.catch_up`)."""
        result, ticks = catch_up(
            lambda: self._compile_op(
                max_tokens, reserve_for_response, wanted, overhead, False, thinking
            ),
            self.tick,
            lambda: self._store.sequence,
            self._clock,
            limit,
        )
        if ticks:  # the host may want to know the call waited for memories
            result.render_stats["catch_up"] = {"ticks": ticks}
            with self._lock:
                if self._render_stats is not None:
                    self._render_stats["catch_up"] = {"ticks": ticks}
        return result

    def _compile(
        self,
        max_tokens: int,
        reserve_for_response: int,
        injections: Sequence[Injection],
        overhead: Overhead | None,
        dry_run: bool,
        thinking: ThinkingArgs | None = None,
        *,
        expire_holds: bool = True,
    ) -> CompileResult:
        self._check_open()
        if max_tokens - reserve_for_response <= 0:
            raise ConfigError(
                f"max_tokens={max_tokens} leaves no input after "
                f"reserve_for_response={reserve_for_response}"
            )
        if expire_holds:
            self._expire_holds()
        if overhead is None:
            overhead = Overhead(system=self._system_prompt, tools=tuple(self._tools or ()))
        result = self._compiler.run(
            (max_tokens, reserve_for_response), injections, overhead, dry_run, thinking
        )
        if not dry_run:
            self._render_stats = plain_copy(result.render_stats)  # the caller's is theirs
        return result

    @operation(writes=True)
    def note_request_sent(
        self,
        rows: Sequence[str | NotedRow | Mapping[str, Any]],
        identity: RequestIdentity,
        compile_id: str,
    ) -> bool:
        """Note what a request built from compile ``compile_id`` carried after the
        compiled messages, so their thinking may go back to the model.

        Call it as a stream goes on: before sending each later round, with the ids of
        the stored messages that round carries after the compiled ones (every round's
        so far, in order: the replies and tool results stored since), and once the
        stream has ended, with those and its last reply's. Each note replaces the one
        before. A row that was not carried, or returned, exactly as stored goes in as
        ``NotedRow(unstored=True)`` (or ``{"unstored": True}``): nothing from it on is
        vouched for. A host that never notes loses each reply's thinking at the compile
        after the reply is stored (:mod:`context_manager.thinking`).

        Parameters
        ----------
        rows : sequence of str or NotedRow
            Stored message ids (or :class:`~context_manager.thinking.NotedRow`), in
            request order.
        identity : RequestIdentity
            What the rounds were sent under (:attr:`CompileResult.identity`).
        compile_id : str
            :attr:`CompileResult.compile_id` of the compile the stream was built from.

        Returns
        -------
        bool
            True when noted; False when the note vouches for nothing: the branch's last
            recorded request is not that compile's (a committing compile with a binding
            ran since, or none ever did).

        Raises
        ------
        UnknownMessageError
            For a row naming no stored message (a ``KeyError``; nothing is noted).
        ConfigError
            For an ``identity`` that is not a RequestIdentity, a ``compile_id`` that is
            not a str, or a row that is not an id, a NotedRow or its mapping (an
            :class:`ArgumentError` naming it).
        """
        return self._compiler.note(rows, identity, compile_id, self._records)

    @operation()
    def preview_context(
        self,
        *,
        max_tokens: int | None = None,
        reserve_for_response: int | None = None,
        injections: Iterable[Injection] = (),
        overhead: Overhead | None = None,
        thinking_binding: ThinkingBinding | None = None,
        identity: RequestIdentity | str | None = None,
        overrides: Mapping[str, Any] | None = None,
    ) -> Preview:
        """What :meth:`compile` with these arguments would send, without sending it.

        A dry compile: nothing is written (no frontier, no queued memories, no thinking
        record, no render stats; a hold whose timeout passed is released only by the
        next operation that writes), and a context that cannot fit is reported
        (``fits=False``, with the tokens it would need and where it would refuse),
        never refused with :class:`OverBudgetError`.

        ``overrides`` previews the strategy as other options would make it (say
        ``{"recent_window_tokens": 2000}`` or another ``folding_strategy``), over the
        same records, for this preview only: the strategy needs ``with_options`` (the
        autobiographical strategy has it).

        Raises
        ------
        ConstraintConflictError
            When pins, locks and holds leave some message no level to be shown at (no
            budget helps).
        ConfigError
            As :meth:`compile` does for its arguments (an :class:`ArgumentError` naming
            one that is refused); for ``overrides`` a strategy does not take, naming the
            option.

        Examples
        --------
        >>> from context_manager import ContextManager, CharsCounter
        >>> with ContextManager.open(path=":memory:", counter=CharsCounter()) as cm:
        ...     _ = cm.add_message("User", "hello there")
        ...     roomy = cm.preview_context(max_tokens=1000, reserve_for_response=100)
        ...     cm.set_system_prompt("x" * 400)
        ...     tight = cm.preview_context(max_tokens=100, reserve_for_response=50)
        >>> roomy.fits, roomy.tokens, roomy.raw
        (True, 3, 1)
        >>> tight.fits, tight.stage, tight.tokens > tight.budget
        (False, 'request overhead', True)
        """
        thinking = _thinking_args(thinking_binding, identity)
        wanted = _injections(injections)
        _check_overhead(overhead)
        if overrides is not None:
            check_mapping(overrides, "overrides", "a mapping of the strategy's options, or None")
        max_tokens, reserve = self._budget(max_tokens, reserve_for_response)
        budget = max_tokens - reserve
        own = self._strategy
        if overrides:
            self._strategy = self._caps.require_reconfigurable().with_options(**overrides)
        try:
            result = self._compile(
                max_tokens, reserve, wanted, overhead, True, thinking, expire_holds=False
            )
        except OverBudgetError as exc:
            refused: dict[str, Any] = {"diagnostics": dict(exc.diagnostics)}
            return Preview(False, exc.budget, exc.actual, 0, (), exc.stage, refused, None)
        finally:
            self._strategy = own  # the overrides were for this preview only
        stats: dict[str, Any] = dict(result.render_stats)
        if stats.get("fits") is False:
            tokens = stats.get("tokens")
            stage = "solver" if "solver" in stats else "select"
            return Preview(False, budget, tokens, 0, (), stage, stats, None)
        position = {s.id: k for k, s in enumerate(self._presented.view())}
        return preview_of(result, budget, position, self.get_summary)

    @operation()
    def get_render_stats(self) -> dict[str, Any] | None:
        """Composition of the last live (not dry-run) compile: a copy of its
        :attr:`CompileResult.render_stats`.

        None until a live compile has run since the strategy loaded its branch (opening
        the store, :meth:`set_strategy` and a branch switch each load it); a dry compile
        and :meth:`preview_context` leave it as it was, while each compile's result
        carries its own.

        Every compile reports ``tokens`` (the whole request by the manager's counter),
        ``request`` (``system``, ``tools``, ``other``, ``injections``, ``messages``,
        ``total``: the same tokens by part) and ``kv_cost`` (tokens re-read from the
        first difference with the previous live request). The autobiographical
        strategy adds the composition of the history sent:

        * ``head``, ``tail``, ``middle_raw``: ``{messages, tokens}`` of the messages shown
          raw in the head window, the recent window and between them (stored messages,
          and their tokens as sent, after any cap).
        * ``summaries``: ``{"l1", "l2", "l3"}``, each ``{count, tokens}``: the memories
          shown (each as its recall pair), level 3 and above all in ``l3``.
        * ``summary_levels``: the same for every level, ``{"L1", ..., "Lk"}`` (the
          hierarchy has no fixed top).
        * ``pending``: ``{chunks, merges}``: chunks ready to become memories and groups
          of memories ready to merge, once this compile queued what it asked for (what
          :meth:`pending_work` lists; a dry compile queues nothing).
        * ``total``: ``{messages, tokens}``: the raw messages plus two per memory shown,
          and the tokens of all the buckets above (``request["messages"]``).
        * ``fits`` (False only for a dry compile that cannot fit, with ``diagnostics``),
          ``solver``, ``status``, ``budget``, ``decision``, ``solver_kv_cost``,
          ``stated`` (the size of the fold problem), and when they happen
          ``capped_results``, ``grace_tokens``, ``unshowable_summaries`` and ``catch_up``
          (``{ticks}``: the request fitted after that many ticks).

        What differs from the reference's RenderStats: keys are snake_case
        (``middle_raw``); a level no memory is shown at is left out of ``summaries``
        (``{}`` when none is shown) rather than listed with zeros; ``summary_levels``
        is added; there is no ``planVsActual`` (``solver``, ``status``, ``budget`` and
        ``grace_tokens`` say how the plan went) and no calibration ceilings; the
        ``request`` section is always there, the overhead being priced on every compile;
        raw ``messages`` count stored messages, so one that sends nothing yet (a call
        not answered) or sends a placeholder result with it counts once, and the
        injections' messages are priced under ``request`` only; and the composition is
        the one selected, before a thinking binding strips thinking (``thinking_strip``
        on the result says what that saved). Another strategy reports only what it
        states (the passthrough strategy: ``messages`` and ``dropped``).
        """
        return None if self._render_stats is None else plain_copy(self._render_stats)

    # ------------------------------------------------------------- maintenance
    def tick(self) -> bool:
        """Do at most one unit of compression work; True when something was done.

        The summariser is called with no lock held: a tick reads what to ask in one
        short operation, makes the call, then writes the memory in another, which asks
        again on the state as it is then and uses the answer only if it would send the
        same request (else it asks anew). So :meth:`add_message`, :meth:`compile` and
        every other operation go on while a memory is being written; ticks run one at a
        time. A tick called from inside another operation (a compile catching up) calls
        the summariser inside it.

        Warns
        -----
        NoSummarizerWarning
            When the manager has no summariser and the strategy has compression work
            waiting: nothing is compressed (the tick does nothing and returns False).
        """
        if self._gate.inside:
            return self._tick_pass(None)[0]  # inside an operation: answered within it
        self._check_open()
        with self._tick_lock:
            answers = Answers()
            while True:
                done, need = self._tick_pass(answers)
                if need is None:
                    return done
                if len(answers) >= MAX_TICK_CALLS:
                    return True  # calls were made; the rest is the next tick's
                answers.put(need.key, need.call())  # no lock held

    @operation(writes=True)
    def _tick_pass(self, answers: Answers | None) -> tuple[bool, AnswerNeeded | None]:
        """One pass of a tick under the lock, over the ``answers`` gathered so far: what it
        did, or the call it needs first (what it stored before asking is kept)."""
        self._expire_holds()
        if not answers and self._summarizer is None and not self._strategy.is_ready(self._ctx):
            warnings.warn(
                f"tick(): the {self._strategy.name} strategy has compression work waiting "
                "but the manager has no summariser, so nothing is compressed; open it "
                "with ContextManager.open(summarizer=...)",
                NoSummarizerWarning,
                stacklevel=4,
            )
        self._answers = answers
        try:
            return self._strategy.tick(self._ctx), None
        except AnswerNeeded as need:
            if answers is None:
                raise ContextManagerError(
                    f"the {self._strategy.name} strategy asked for an answer outside a tick"
                ) from need
            return True, need
        finally:
            self._answers = None

    def reset_head_window(self, transition_text: str | None = None) -> str:
        """Start a new topic: store a transition summary and start the head window there.

        The summary is stored as a ``Context Manager`` message starting with
        :data:`TOPIC_TRANSITION` (and presented, once a host presents rows); a strategy
        with a raw head window starts it at the latest such message, so the messages of
        the old head become compressible like the rest of the middle. Without
        ``transition_text`` the summariser writes the summary, in ``compression_model``'s
        voice, from what the agent is shown now: it is called with no lock held and
        waited for at most the strategy's ``summary_timeout_seconds``, so other threads'
        operations go on meanwhile.

        Parameters
        ----------
        transition_text : str, optional
            The summary to store.

        Returns
        -------
        str
            The summary (without the marker).

        Raises
        ------
        ConfigError
            For an empty ``transition_text``.
        ArgumentTypeError
            For a ``transition_text`` that is not a string (a ``TypeError``).
        SummarizerTimeoutError
            When the summariser does not answer within the strategy's
            ``summary_timeout_seconds`` (the call is abandoned; nothing is stored).
        ContextManagerError
            When the strategy keeps a raw head window but cannot move it (it has no
            ``reset_head_window``), or the summariser's answer cannot be stored as a
            summary; nothing is stored.
        SummarizerNotConfiguredError
            Without ``transition_text``, when there is no summariser or no
            ``compression_model`` to write it.

        Examples
        --------
        >>> from context_manager import ContextManager, CharsCounter
        >>> with ContextManager.open(path=":memory:", counter=CharsCounter()) as cm:
        ...     _ = cm.add_message("User", "Let us fix the parser.")
        ...     text = cm.reset_head_window("The parser is fixed; next, the docs.")
        ...     last = cm.get_messages()[-1].message
        >>> last.participant, last.text
        ('Context Manager', '[Topic Transition] The parser is fixed; next, the docs.')
        """
        self._check_open()
        if transition_text is None:
            text = self._ask_transition(self._transition_request())
        elif not check_text(transition_text, "transition_text").strip():
            raise ConfigError("transition_text is empty; give the summary, or None to write one")
        else:
            text = transition_text.strip()
        return self._start_head_window(text)

    def _head_mover(self) -> Callable[[StrategyContext, str], None] | None:
        """The strategy's ``reset_head_window``; refused when it keeps a head it cannot move."""
        caps = self._caps
        move = caps.head_reset.reset_head_window if caps.head_reset is not None else None
        head = caps.profile.head_window_tokens
        if head and move is None:
            raise ContextManagerError(
                f"the {caps.name} strategy keeps a raw head window "
                f"(head_window_tokens={head}) but cannot move its start; set "
                "head_window_tokens=0 or use a strategy with reset_head_window"
            )
        return move

    @operation(writes=True)
    def _start_head_window(self, text: str) -> str:
        move = self._head_mover()
        message_id = self.add_message(MEMORY_MARKER_PARTICIPANT, f"{TOPIC_TRANSITION} {text}")
        if self._presented.presenting:  # the summary is this agent's own: it is shown at once
            self.present_rows([message_id])
        if move is not None:
            move(self._ctx, message_id)
        return text

    @operation()
    def _transition_request(self) -> CompletionRequest:
        """The request that asks the summariser for a transition summary of the current
        context."""
        self._head_mover()  # refused before anything is asked
        model = self._caps.profile.memory_model
        if self._summarizer is None or not model:
            raise SummarizerNotConfiguredError(
                "reset_head_window() without transition_text needs a summariser and a "
                "compression_model to write the summary; give ContextManager.open("
                "summarizer=...) and the strategy's compression_model, or pass the text"
            )
        context = self.preview_context()
        if context.result is None:
            raise ContextManagerError(
                "reset_head_window() cannot write a transition summary: the current context "
                f"does not fit the default budget ({context.tokens} tokens against "
                f"{context.budget}); compress first (drain()) or pass the text"
            )
        instruction = Message.text_message(MEMORY_MARKER_PARTICIPANT, TRANSITION_INSTRUCTION)
        return CompletionRequest(
            model=model,
            messages=(*context.result.messages, instruction),
            system=self._system_prompt,
            tools=tuple(self._tools) if self._tools else None,
            max_tokens=TRANSITION_MAX_TOKENS,
            timeout=self._transition_timeout(),
        )

    def _transition_timeout(self) -> float:
        timeout = self._caps.profile.summary_timeout_seconds
        return float(timeout) if timeout else TRANSITION_TIMEOUT_SECONDS

    def _ask_transition(self, request: CompletionRequest) -> str:
        """The summariser's transition summary, asked with no lock held, at most
        :meth:`_transition_timeout` seconds waited."""
        summarizer = self._summarizer
        assert summarizer is not None  # checked by _transition_request
        timeout = request.timeout if request.timeout is not None else TRANSITION_TIMEOUT_SECONDS
        try:
            answer = self._transition_caller.call(lambda: summarizer.complete(request), timeout)
        except (DeadlineError, CallerBusyError) as exc:
            raise SummarizerTimeoutError(
                f"reset_head_window(): the summariser did not write the transition summary "
                f"within {timeout:g} s ({exc}); nothing was stored: retry, or pass "
                "transition_text"
            ) from None
        if not isinstance(answer, Completion) or not answer.acceptable:
            stop = getattr(answer, "stop_reason", type(answer).__name__)
            raise ContextManagerError(
                f"the summariser's transition summary cannot be stored (stop_reason={stop!r}, "
                f"{len(getattr(answer, 'text', '').strip())} characters); nothing was stored: "
                "retry, or pass transition_text"
            )
        return clean_answer(answer.text)

    def drain(self, max_ticks: int = 10_000) -> int:
        """Tick until no work is left (or ``max_ticks``); returns the ticks that worked.

        Each tick calls the summariser with no lock held (:meth:`tick`): other threads'
        operations go on between and during them.

        Raises
        ------
        ArgumentError
            For a ``max_ticks`` that is not an int of at least 0.
        """
        check_int(max_ticks, "max_ticks", low=0)
        self._check_open()
        done = 0
        for _ in range(max_ticks):
            if not self.tick():
                break
            done += 1
        return done

    @operation(writes=True)
    def retry_compression(self) -> int:
        """Try again the compression work the strategy gave up on (answers that were
        not memory up to its attempt limits, refusals in every variant) and work
        backing off after provider errors; returns how many pieces had a count (0 for
        a strategy that never gives up)."""
        gives_up = self._caps.gives_up
        return 0 if gives_up is None else int(gives_up.retry_given_up(self._ctx))

    @operation()
    def is_ready(self) -> bool:
        """True when the strategy has no queued work."""
        return self._strategy.is_ready(self._ctx)

    def wait_for_ticks(self, timeout: float | None = None) -> bool:
        """Wait until the background worker of ``auto_tick`` has no work left; True when
        it is idle (at once without ``auto_tick``), False when ``timeout`` seconds passed.

        Raises
        ------
        ContextManagerError
            When the worker stopped on an error (the error is its cause).
        ArgumentError
            For a ``timeout`` that is not None nor a finite number of seconds from 0.
        """
        if timeout is not None:
            timeout = check_seconds(timeout, "timeout", zero=True)
        if self._ticker is None:
            return True
        idle = self._ticker.idle.wait(timeout)
        if self._ticker.error is not None:
            raise ContextManagerError(
                f"the auto_tick worker stopped: {self._ticker.error!r}"
            ) from self._ticker.error
        return idle

    @operation()
    def pending_work(self) -> list[str]:
        """The compression work queued, one line per unit: the chunks to compress,
        oldest first (``compress <chunk>``), then the merges (``merge
        <memory>+<memory>...``); empty when ready or for a strategy that never
        compresses. :meth:`tick` takes the first chunk, unless a waiting merge would
        free more context (the autobiographical strategy's order)."""
        return list(self._strategy.pending_work(self._ctx))

    @property
    def _system_prompt(self) -> str | None:
        """The stored system prompt of this namespace and branch."""
        text = self._frame().get("system")
        return text if isinstance(text, str) else None

    @property
    def _tools(self) -> list[dict[str, Any]] | None:
        """The stored tool definitions of this namespace and branch."""
        tools = self._frame().get("tools")
        return tools if isinstance(tools, list) else None

    def _frame(self) -> dict[str, Any]:
        frame = self._store.get(self._frame_slot)
        return frame if isinstance(frame, dict) else {}

    def _set_frame(self, key: str, value: Any) -> None:
        """Store one part of the frame; a value equal to the stored one writes nothing."""
        frame = self._frame()
        if frame.get(key) == value:
            return
        self._store.set(self._frame_slot, {**frame, key: value})

    @operation(writes=True)
    def set_tool_definitions(self, tools: Sequence[dict[str, Any]] | None) -> None:
        """Store the agent's tool definitions: sent with every request (``tools`` of
        :meth:`compile`'s result and its provider forms), priced in its budget, and given
        to the summariser. Empty or None never overwrites.

        They are kept in the store with the history, per namespace and branch: a manager
        reopened on the store, a branch forked from this one and a store derived from it
        have them; setting the value already stored writes nothing.

        Raises
        ------
        ArgumentError
            Naming the definition (``tools[0]``) that is not a mapping with a non-empty
            str ``name`` (or a ``function`` mapping holding one), or holds a value that
            cannot be stored as JSON; nothing is stored.

        Examples
        --------
        >>> from context_manager import CharsCounter
        >>> with ContextManager.open(path=":memory:", counter=CharsCounter()) as cm:
        ...     cm.set_tool_definitions([{"name": "grep", "input_schema": {"type": "object"}}])
        ...     _ = cm.add_message("User", "find it")
        ...     [t["name"] for t in cm.compile(max_tokens=1000).tools]
        ['grep']
        """
        if tools is None:
            return
        value = check_tools(tools)
        if value:
            self._set_frame("tools", json.loads(json.dumps(value)))

    @operation(writes=True)
    def set_system_prompt(self, text: str | None) -> None:
        """Store the agent's system prompt: sent with every request (``system_prompt`` of
        :meth:`compile`'s result and its provider forms), priced in its budget, and given
        to the summariser. Empty or None never overwrites.

        Kept in the store like :meth:`set_tool_definitions`: a reopened manager, a forked
        branch and a derived store have it; setting the text already stored writes
        nothing.

        Raises
        ------
        ArgumentTypeError
            For a ``text`` that is not a str or None.

        Examples
        --------
        >>> from context_manager import CharsCounter
        >>> with ContextManager.open(path=":memory:", counter=CharsCounter()) as cm:
        ...     cm.set_system_prompt("You are terse.")
        ...     _ = cm.add_message("User", "hi")
        ...     cm.compile(max_tokens=1000).system_prompt
        'You are terse.'
        """
        if text is not None and check_text(text, "text"):
            self._set_frame("system", text)

    # ------------------------------------------------------------------- holds
    @operation(writes=True)
    def hold_compression(self, ids: Iterable[str], *, timeout: float | None = None) -> None:
        """Keep these messages (and everything after the earliest) out of compression.

        Raises
        ------
        ArgumentError
            For ``ids`` that are not a sequence of message ids, or a ``timeout`` that is
            not a positive finite number of seconds.
        """
        wanted = check_ids(ids)
        if timeout is not None:
            timeout = check_seconds(timeout, "timeout")
        deadline = None if timeout is None else self._clock() + timeout
        known = {m.id for m in self.get_messages()}
        for i in wanted:
            if i in known:
                self._holds[i] = deadline

    @operation(writes=True)
    def release_compression(self, ids: Iterable[str]) -> None:
        """Release holds (idempotent).

        Raises
        ------
        ArgumentTypeError
            For ``ids`` that are not a sequence of message ids.
        """
        released = False
        for i in check_ids(ids):
            if i in self._holds:
                del self._holds[i]
                released = True
        if released:
            self._strategy.on_holds_released(self._ctx)

    @operation()
    def compression_holds(self) -> set[str]:
        """Ids currently held."""
        self._expire_holds()
        return set(self._holds)

    def _expire_holds(self) -> None:
        now = self._clock()
        expired = [i for i, d in self._holds.items() if d is not None and d <= now]
        if expired:
            self.release_compression(expired)

    def _is_held(self, message_id: str) -> bool:
        return message_id in self._holds

    def _held_ids(self) -> set[str]:
        return set(self._holds)

    # ---------------------------------------------------- pins, locks, memory
    @operation(writes=True)
    def pin_range(
        self,
        first_id: str,
        last_id: str,
        *,
        name: str | None = None,
        level: int | None = None,
        max_level: int | None = None,
    ) -> str:
        """Protect messages ``first_id..last_id``; returns the pin id (``pin-N``).

        Without levels they render raw; ``level`` holds them at exactly L_k and
        ``max_level`` folds them no deeper than L_k.

        Raises
        ------
        ArgumentError
            For an id that is not a str, a ``name`` that is neither a str nor None, a
            level that is not an int in ``[0, MAX_LEVEL]`` (``2**20``), or a
            ``max_level`` below ``level``, naming it (an :class:`ArgumentTypeError` for
            the wrong type). Nothing is stored.
        UnknownMessageError
            When either id names no message of the window (a ``KeyError``).
        ConfigError
            When ``first_id`` comes after ``last_id``.
        """
        check_id(first_id, "first_id")
        check_id(last_id, "last_id")
        if name is not None:
            check_text(name, "name")
        check_pin_levels(level, max_level)
        pin: str = self._caps.require_pinning("pin_range").pin_range(
            self._ctx, first_id, last_id, name=name, level=level, max_level=max_level
        )
        return pin

    @operation(writes=True)
    def mark_document(self, message_id: str, *, name: str | None = None) -> str:
        """Pin one message raw as a document.

        Raises
        ------
        ArgumentTypeError
            For a ``message_id`` that is not a str or a ``name`` that is neither a str
            nor None.
        UnknownMessageError
            When ``message_id`` names no message of the window (a ``KeyError``).
        """
        check_id(message_id, "message_id")
        if name is not None:
            check_text(name, "name")
        pin: str = self._caps.require_pinning("mark_document").pin_range(
            self._ctx, message_id, message_id, name=name, kind="document"
        )
        return pin

    @operation()
    def list_pins(self) -> list[Any]:
        """Current pins (empty for strategies without pins)."""
        pinning = self._caps.pinning
        return [] if pinning is None else list(pinning.pins)

    @operation(writes=True)
    def unpin(self, pin_id: str) -> bool:
        """Remove a pin; False when there is no such pin.

        Raises
        ------
        ArgumentTypeError
            For a ``pin_id`` that is not a str.
        """
        check_text(pin_id, "pin_id")
        removed: bool = self._caps.require_pinning("unpin").unpin(self._ctx, pin_id)
        return removed

    @operation(writes=True)
    def lock_message(self, message_id: str, locked: bool = True) -> None:
        """Keep a message at its current fold level (``locked=False`` releases it).

        Raises
        ------
        UnknownMessageError
            For an unknown id (a ``KeyError``).
        ArgumentTypeError
            For a ``message_id`` that is not a str or a ``locked`` that is not a bool.
        """
        check_flag(locked, "locked")
        self.get_message(message_id)
        self._caps.require_pinning("lock_message").lock(self._ctx, message_id, locked)

    @operation()
    def search_summaries(
        self,
        text: str | None = None,
        *,
        regex: str | None = None,
        levels: Sequence[int] | None = None,
        limit: int = 50,
        include_merged: bool = False,
    ) -> list[Any]:
        """``(summary, matches)`` pairs for ``text`` (case-insensitive) or ``regex``,
        most matches first; empty for strategies without summaries.

        Raises
        ------
        ArgumentError
            For a ``text`` or ``regex`` that is neither a str nor None, ``levels`` that
            are not ints from 1, a ``limit`` that is not an int from 1, or an
            ``include_merged`` that is not a bool, naming it.
        ConfigError
            For an invalid regular expression.
        """
        if text is not None:
            check_text(text, "text")
        if regex is not None:
            check_text(regex, "regex")
        if levels is not None:
            levels = _levels(levels)
        check_int(limit, "limit", low=1)
        check_flag(include_merged, "include_merged")
        memory = self._caps.memory
        if memory is None:
            return []
        return list(
            memory.search_summaries(
                text, regex=regex, levels=levels, limit=limit, include_merged=include_merged
            )
        )

    @operation()
    def get_summaries_in_range(
        self,
        *,
        from_time: float | None = None,
        to_time: float | None = None,
        level: int | None = None,
    ) -> list[Any]:
        """Summaries whose messages' timestamps meet ``[from_time, to_time]`` (open bounds).

        Raises
        ------
        ArgumentError
            For a time that is not a finite number, or a ``level`` that is not an int in
            ``[1, MAX_LEVEL]``, naming it.
        """
        for name, bound in (("from_time", from_time), ("to_time", to_time)):
            if bound is not None:
                check_number(bound, name)
        if level is not None:
            check_int(level, "level", low=1, high=MAX_LEVEL)
        memory = self._caps.memory
        if memory is None:
            return []
        return list(memory.summaries_in_range(self._ctx, from_time, to_time, level))

    @operation()
    def get_summary(self, summary_id: str) -> Any:
        """One summary, or None.

        Raises
        ------
        ArgumentTypeError
            For a ``summary_id`` that is not a str.
        """
        check_text(summary_id, "summary_id")
        memory = self._caps.memory
        return None if memory is None else memory.summaries.get(summary_id)

    # ------------------------------------------------------------------ recall
    @operation()
    def search_memories(
        self, query: str, *, limit: int = 20, include_merged: bool = True
    ) -> list[Any]:
        """The memories whose prose or exact values hold ``query``.

        The query is compared case-insensitively as a substring (a whole word matches
        too). A memory with a value equal to the query ranks first, then one with a
        value holding it, then one whose prose holds it; in each, finer levels first,
        then the newest (:func:`~context_manager.recall.matching_memories`). A strategy
        that keeps no memories (``PassthroughStrategy``) finds none: the result is empty.

        Parameters
        ----------
        query : str
            The text to look for (not empty).
        limit : int
            Memories to return at most.
        include_merged : bool
            Include memories that a merge has folded into a higher one.

        Returns
        -------
        list of SummaryEntry

        Raises
        ------
        ArgumentError
            For a query that is not a non-blank str, a limit that is not an int from 1,
            or an ``include_merged`` that is not a bool.

        Examples
        --------
        >>> from context_manager import CharsCounter, ContextManager, ExtractiveSummarizer
        >>> from context_manager.strategies.autobiographical import AutobiographicalStrategy
        >>> cm = ContextManager.open(
        ...     path=":memory:",
        ...     strategy=AutobiographicalStrategy(
        ...         compression_model="extractive", target_chunk_tokens=20,
        ...         min_chunk_messages=2, summary_target_tokens=12, memory_values_tokens=20,
        ...         recent_window_tokens=0, l1_holdback_chunks=0, min_chunk_chars_for_llm=0),
        ...     summarizer=ExtractiveSummarizer(),
        ...     counter=CharsCounter(),
        ... )
        >>> _ = cm.add_message("User", "Please cancel my booking, reservation ZFA04Y.")
        >>> _ = cm.add_message("Claude", "Cancelled. Your refund of $1,250 goes back to "
        ...                    "card 4421486 within 5 days.")
        >>> _ = cm.add_message("User", "Thanks.")
        >>> _ = cm.drain()
        >>> [(m.id, m.content, m.values) for m in cm.search_memories("$1,250")]
        [('L1-0', 'Please cancel my booking, reservation ZFA04Y.', ('$1,250', '5 days'))]
        >>> [m.id for m in cm.search_memories("zfa04y")], cm.search_memories("HAT123")
        (['L1-0'], [])
        >>> cm.close()
        """
        check_text(query, "query", blank=False)
        check_int(limit, "limit", low=1)
        check_flag(include_merged, "include_merged")
        memory = self._caps.memory
        summaries = memory.summaries if memory is not None else None
        if not summaries:
            return []
        return matching_memories(
            query.strip(), list(summaries.values()), limit=limit, include_merged=include_merged
        )

    def recall_tool(
        self, *, name: str = RECALL_TOOL_NAME, max_chars: int = DEFAULT_MAX_CHARS
    ) -> RecallTool:
        """The ``recall`` tool for the agent: declare its ``definition`` with the agent's
        tools, and answer each call of it with the tool (:meth:`handle_recall`).

        Parameters
        ----------
        name : str
            The tool's name.
        max_chars : int
            Characters each answer has at most.

        Returns
        -------
        RecallTool
            ``.definition`` (``name``, ``description``, ``input_schema``), ``.name``, and
            calling it with a ``tool_use`` input returns the answer's text.

        Examples
        --------
        >>> from context_manager import CharsCounter, ContextManager
        >>> cm = ContextManager.open(path=":memory:", counter=CharsCounter())
        >>> _ = cm.add_message("User", "The ticket is T-48213-C.")
        >>> tool = cm.recall_tool()
        >>> tool.name, tool.definition["input_schema"]["type"]
        ('recall', 'object')
        >>> print(tool({"grep": "t-48213"}))
        1 of 1 stored messages match 't-48213':
        [1] User:
          The ticket is T-48213-C.
        >>> cm.close()
        """
        check_text(name, "name", empty=False)
        check_int(max_chars, "max_chars", low=MIN_RECALL_CHARS)
        return RecallTool(
            recall_definition(name),
            functools.partial(self.handle_recall, max_chars=max_chars),
        )

    @operation()
    def handle_recall(
        self, tool_input: Mapping[str, Any], *, max_chars: int = DEFAULT_MAX_CHARS
    ) -> str:
        """Answer one call of the ``recall`` tool (:meth:`recall_tool`).

        With ``memory_id``: the messages the memory stands for, in full, one per line
        (``[id] participant: text``), from character ``offset``
        (:func:`~context_manager.recall.expand_memory`). With ``grep``: the stored
        messages of this branch (folded or not) that hold the text, case-insensitively
        (a regular expression with ``regex``), oldest first, each with the memory that
        covers it and its matching lines, at most ``limit``
        (:func:`~context_manager.recall.grep_messages`). Every answer has at most
        ``max_chars`` characters and says when it was cut and how to read on. ``grep``
        works under any strategy; ``memory_id`` needs one that keeps memories.

        Raises
        ------
        RecallInputError
            Naming the offending field (:func:`~context_manager.recall.check_recall_input`),
            an unknown memory id (``"memory_id"``), or ``memory_id`` under a strategy that
            keeps no memories. The host sends its message back as the tool's error result.
        ArgumentError
            For a ``max_chars`` that is not an int from 300.

        Examples
        --------
        >>> from context_manager import CharsCounter, ContextManager, ExtractiveSummarizer
        >>> from context_manager.recall import RecallInputError
        >>> from context_manager.strategies.autobiographical import AutobiographicalStrategy
        >>> cm = ContextManager.open(
        ...     path=":memory:",
        ...     strategy=AutobiographicalStrategy(
        ...         compression_model="extractive", target_chunk_tokens=20,
        ...         min_chunk_messages=2, summary_target_tokens=12, memory_values_tokens=20,
        ...         recent_window_tokens=0, l1_holdback_chunks=0, min_chunk_chars_for_llm=0),
        ...     summarizer=ExtractiveSummarizer(),
        ...     counter=CharsCounter(),
        ... )
        >>> _ = cm.add_message("User", "Please cancel my booking, reservation ZFA04Y.")
        >>> _ = cm.add_message("Claude", "Cancelled. Your refund of $1,250 goes back to "
        ...                    "card 4421486 within 5 days.")
        >>> _ = cm.add_message("User", "Thanks.")
        >>> _ = cm.drain()
        >>> print(cm.handle_recall({"grep": "4421486"}))
        1 of 3 stored messages match '4421486':
        [2] Claude (in memory L1-0):
          Cancelled. Your refund of $1,250 goes back to card 4421486 within 5 days.
        >>> print(cm.handle_recall({"memory_id": "L1-0"}))
        Memory L1-0 (level 1) stands for 2 messages, 1 to 2:
        [1] User: Please cancel my booking, reservation ZFA04Y.
        [2] Claude: Cancelled. Your refund of $1,250 goes back to card 4421486 within 5 days.
        >>> try:
        ...     cm.handle_recall({"memory_id": "L9-9"})
        ... except RecallInputError as exc:
        ...     exc.field
        'memory_id'
        >>> cm.close()
        """
        check_int(max_chars, "max_chars", low=MIN_RECALL_CHARS)
        return answer_recall(
            check_recall_input(tool_input),
            self._records.messages(),
            self._caps.memory,
            strategy=self._strategy.name,
            branch=self.current_branch,
            max_chars=max_chars,
        )

    # ------------------------------------------------------------------ windows
    # One record, a window per agent: until a host presents (present_rows, or a
    # retract_rows naming a row) the window is the record and costs nothing; after
    # that the strategy and compiles read the window (see context_manager.window).
    @property
    def presenting(self) -> bool:
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
    def _is_presenting(self) -> bool:
        return self._presented.presenting

    @operation(writes=True)
    def present_rows(self, ids: Sequence[str]) -> list[str]:
        """Show rows of the record to this manager's agent: they enter its window, in
        the order given, after every row it holds; returns the rows that entered.

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
        return self._presented.present(ids)

    @operation(writes=True)
    def retract_rows(self, ids: Sequence[str]) -> list[str]:
        """Take rows out of this manager's window (an undone turn); returns the rows
        taken out.

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
        return self._presented.retract(ids)

    @operation(writes=True)
    def retract_removed(self, ids: Sequence[str]) -> list[str]:
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
    def retract_absent_rows(self) -> list[str]:
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
    def get_unpresented_messages(self, *, after_sequence: int | None = None) -> list[StoredMessage]:
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
    def get_window_messages(self) -> list[StoredMessage]:
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
    def ordinal_of(self, message_id: str) -> int | None:
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
    def window_status_of(self, message_id: str) -> WindowStatus:
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

    def current_sequence(self) -> int:
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
    def branch_sequence_of(self, message_id: str) -> int:
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

    def _where(self) -> str:
        return f"on branch {self._store.branch!r}"

    def _bump_version(self) -> None:
        """Messages left the strategy's view: what it computed from them is stale."""
        self._version += 1

    def _wake_ticker(self) -> None:
        """Wake the ``auto_tick`` worker, if any: there may be work."""
        if self._ticker is not None:
            self._ticker.wake()

    def _tell_presented(self, rows: list[StoredMessage]) -> None:
        """The strategy hears rows enter the window (``on_presented``; a strategy
        without it hears each through ``on_new_message``)."""
        self._strategy.on_presented(self._ctx, rows)

    def _tell_retracted(self, ids: list[str]) -> None:
        """The strategy hears rows leave the window (``on_retracted``; a strategy
        without it hears them through ``on_messages_removed``)."""
        self._strategy.on_retracted(self._ctx, ids)

    # ---------------------------------------------------------------- branches
    @property
    def current_branch(self) -> str:
        """The current branch name."""
        return self._store.branch

    @operation()
    def list_branches(self) -> list[Branch]:
        """Every branch of the store."""
        return self._store.list_branches()

    @operation()
    def branch_at(self, message_id: str, name: str | None = None) -> str:
        """A new branch that sees history up to and including ``message_id``, cut at
        :meth:`branch_sequence_of` it: the branch's window is this one as it stood
        there (once a host presents, a row the window holds is cut after the call that
        presented it, so the branch's window holds it).

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
        return self._store.branch_at(self.branch_sequence_of(message_id), name)

    @operation()
    def derive(self, path: str | os.PathLike[str], *, at_sequence: int | None = None) -> Path:
        """Write a new store at ``path`` holding this branch's history up to
        ``at_sequence`` (default: now) as its ``main`` branch; returns its path.

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
    def fork(self, name: str | None = None) -> str:
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
    def switch_branch(self, name: str) -> None:
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

    def _resync(self) -> None:
        """Everything held in memory re-read from the store: after another manager
        wrote to it, or after a write of ours failed (the store rolled it back). Holds
        on messages that are no longer live go."""
        self._records.forget()
        self._presented.forget()
        self._version += 1
        self._compiler.forget()
        live = {s.id for s in self._records.messages()}
        self._holds = {i: d for i, d in self._holds.items() if i in live}
        self._strategy.initialize(self._ctx)

    def _reload(self) -> None:
        """A branch switch: :meth:`_resync`, and holds and stats start over."""
        self._holds.clear()
        self._render_stats = None
        self._resync()

    @property
    def closed(self) -> bool:
        """Whether :meth:`close` was called (every operation then raises).

        Examples
        --------
        >>> from context_manager import ContextManager
        >>> cm = ContextManager.open(path=":memory:")
        >>> cm.close()
        >>> cm.closed
        True
        """
        return self._closed

    @property
    def _ticker(self) -> Ticker | None:
        """The ``auto_tick`` worker (None without one)."""
        return self._gate.ticker

    def _check_open(self) -> None:
        if self._closed:
            raise ContextManagerError("the context manager is closed")
