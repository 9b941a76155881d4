"""``ContextManager``: the store, the strategy and the compile loop."""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from contextlib import suppress
from pathlib import Path
from typing import Any, Literal, TypeVar

from .arguments import HOLD_ACCEPTED as HOLD_ACCEPTED
from .arguments import (
    check_flag,
    check_path,
    check_protocol,
    check_sequence,
    check_text,
)
from .channels import ChannelCount, ChannelIndex, ChannelTokenStats
from .compiler import MAX_CATCH_UP_RECHECKS as MAX_CATCH_UP_RECHECKS
from .compiler import MAX_CATCH_UP_TICKS as MAX_CATCH_UP_TICKS
from .compiler import (
    Compiler,
)
from .deadline import BoundedCaller
from .errors import (
    ArgumentError,
    ArgumentTypeError,
    ConfigError,
    ContextManagerError,
    NoSummarizerWarning,
    StoreFullWarning,
)
from .front import channels as front_channels
from .front import hot as front_hot
from .front import receipts
from .front.compiling import DEFAULT_RESERVE as DEFAULT_RESERVE
from .front.compiling import CompileFront
from .front.maintenance import MAX_TICK_CALLS as MAX_TICK_CALLS
from .front.maintenance import TRANSITION_INSTRUCTION as TRANSITION_INSTRUCTION
from .front.maintenance import TRANSITION_MAX_TOKENS as TRANSITION_MAX_TOKENS
from .front.maintenance import TRANSITION_TIMEOUT_SECONDS as TRANSITION_TIMEOUT_SECONDS
from .front.maintenance import MaintenanceFront
from .front.memory import MIN_RECALL_CHARS as MIN_RECALL_CHARS
from .front.memory import MemoryFront
from .front.messages import MessagesFront
from .front.windows import WindowsFront
from .operations import Gate, Ticker, operation
from .presented import PresentedWindow
from .receipts import FoldReceipt
from .record_cache import RecordCache, SavedCounts, counter_key
from .request import (
    INJECTION_PREFIX,
    CompileResult,
    ContextEntry,
    FoldedMemory,
    HoldDetail,
    Injection,
    ManagerStats,
    Overhead,
    Preview,
    QueryResult,
    place_injections,
)
from .store import RecordStore, Store, StoreError
from .strategies.base import (
    Answers,
    StoredMessage,
    Strategy,
    StrategyContext,
)
from .strategies.contract import REQUIRED_HOOKS, Capabilities, capabilities_of
from .strategies.default import default_strategy
from .strategies.hot import HotContextSettings
from .summarizer import (
    TOPIC_TRANSITION,
    Summarizer,
)
from .tokens import TiktokenCounter, TokenCounter, counter_for_model
from .topology.model import Finding
from .topology.policy import POLICIES, TopologyPolicy, audit_at_open, check_at_open

__all__ = [
    "INJECTION_PREFIX",
    "TOPIC_TRANSITION",
    "CompileResult",
    "ContextEntry",
    "ContextManager",
    "FoldedMemory",
    "HoldDetail",
    "Injection",
    "ManagerStats",
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


_R = TypeVar("_R")
_log = logging.getLogger(__name__)


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


class ContextManager(MessagesFront, CompileFront, MaintenanceFront, MemoryFront, WindowsFront):
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
        store: RecordStore,
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
        audit_only: bool = False,
        topology_findings: Sequence[Finding] = (),
    ) -> None:
        self._store = store
        self._topology_findings = list(topology_findings)
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
        self._holds = {}
        self._held_at = {}
        self._listeners = []
        self._frame_slot = f"{namespace}/frame"
        """Where the request's frame lives: the system prompt and tool definitions (a
        snapshot slot, one record per change: each branch sees its own, a derived store
        carries it)."""
        self._records = RecordCache(
            store, counter, self._slot, self._aux_slots, caps=strategy.message_caps
        )
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
        self._render_stats = None
        self._closed = False
        self._gate = Gate(
            store, check_open=self._check_open, resync=self._resync, closed=lambda: self._closed
        )
        self._gate.audit_only = audit_only
        self._lock = self._gate.lock
        self._tick_lock = threading.Lock()
        """Held through a whole tick, its summariser calls included: one tick at a time."""
        self._answers = None
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
            audit_only=audit_only,
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

    # What every part of the manager reads (set in __init__); declared here so the
    # fronts (context_manager.front), typed against this class, see their types.
    _store: RecordStore
    _owns_store: bool
    _strategy: Strategy
    _caps: Capabilities
    _summarizer: Summarizer | None
    _transition_caller: BoundedCaller
    _counter: TokenCounter
    _namespace: str
    _slot: str
    _aux_slots: tuple[str, ...]
    _log_slot: str
    _thinking_slot: str
    _frame_slot: str
    _clock: Callable[[], float]
    _holds: dict[str, float | None]
    _held_at: dict[str, float]
    _listeners: list[Callable[[StoredMessage], None]]
    _records: RecordCache
    _presented: PresentedWindow
    _version: int
    _render_stats: dict[str, Any] | None
    _closed: bool
    _gate: Gate
    _lock: threading.RLock
    _tick_lock: threading.Lock
    _answers: Answers | None
    _ctx: StrategyContext
    _compiler: Compiler
    _topology_findings: list[Finding]

    # ------------------------------------------------------------ fold receipts
    @operation(writes=True)
    def accept_round(
        self, compile_id: str, *, usage: Mapping[str, int | None] | None = None
    ) -> FoldReceipt:
        """Record that the provider accepted the request compiled as ``compile_id``.

        Stores a :class:`~context_manager.receipts.FoldReceipt` (one transaction, in
        this manager's namespace, on the current branch): the compile's id, the time,
        ``usage`` and the request's rows as runs, each raw messages or one memory shown
        in place of the messages it stands for (which memories at which levels
        replaced which messages). The newest receipt is what the provider holds, the
        baseline a cache-aware compile can keep stable
        (``AutobiographicalStrategy.accepted_receipt``). Listeners
        (:meth:`on_fold_receipt`) are told once it is committed. Accepting the last
        accepted compile again returns its receipt and stores nothing.

        Parameters
        ----------
        compile_id : str
            :attr:`CompileResult.compile_id` of this manager's last live compile (a
            preview's or a dry run's is never accepted).
        usage : mapping of str to int, optional
            The token counts the provider reported for the round (None values dropped).

        Returns
        -------
        FoldReceipt

        Raises
        ------
        UnknownCompileError
            For a ``compile_id`` superseded by a later compile or compiled on another
            branch (``stale``), or one this manager never returned since it was opened
            (a ``KeyError`` naming it; nothing is stored).
        ArgumentError
            For a ``compile_id`` that is not a str, or a ``usage`` that is not a
            mapping of token counts.

        Examples
        --------
        >>> from context_manager import CharsCounter, ContextManager
        >>> with ContextManager.open(path=":memory:", counter=CharsCounter()) as cm:
        ...     _ = cm.add_message("User", "hello")
        ...     result = cm.compile(max_tokens=1000, reserve_for_response=100)
        ...     receipt = cm.accept_round(result.compile_id, usage={"input_tokens": 5})
        ...     [(u.memory, u.messages) for u in receipt.units], len(cm.list_fold_receipts())
        ([(None, 1)], 1)
        """
        return receipts.accept_round(self, compile_id, usage)

    def on_fold_receipt(self, listener: Callable[[FoldReceipt], None]) -> Callable[[], None]:
        """Call ``listener`` with each fold receipt stored from now on (:meth:`accept_round`).

        The listener runs on the accepting thread once the receipt's transaction has
        committed, outside the store's lock (it may call the manager); an acceptance
        that raised stored nothing and tells no one, and a duplicate acceptance stores
        nothing new and tells no one either. An exception of the listener is logged,
        never raised into the acceptance.

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
        ...     stop = cm.on_fold_receipt(lambda r: heard.append(r.seq))
        ...     _ = cm.add_message("User", "hello")
        ...     _ = cm.accept_round(cm.compile(max_tokens=1000).compile_id)
        ...     stop()
        >>> heard
        [1]
        """
        return receipts.on_fold_receipt(self, listener)

    @operation()
    def list_fold_receipts(self) -> list[FoldReceipt]:
        """The current branch's fold receipts, oldest first (:meth:`accept_round`).

        Examples
        --------
        >>> from context_manager import ContextManager
        >>> with ContextManager.open(path=":memory:") as cm:
        ...     cm.list_fold_receipts()
        []
        """
        return receipts.list_fold_receipts(self)

    # ----------------------------------------------------------------- opening
    @classmethod
    def open(
        cls,
        *,
        path: str | Path | None = None,
        url: str | None = None,
        agent: str | None = None,
        store: RecordStore | None = None,
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
        topology_policy: TopologyPolicy = "reject",
        audit_only: bool = False,
        model: str | None = None,
    ) -> ContextManager:
        """Open a manager on a store file (``path``), an agent's store in a PostgreSQL
        database (``url="postgresql://HOST/DB"`` and ``agent=``, the ``postgres`` extra:
        :mod:`context_manager.store.postgres`), or an app-owned :class:`Store`.

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

        ``model`` names the model the requests go to; it picks the token counter
        (:func:`~context_manager.tokens.counter_for_model`: the exact ``o200k_base``
        encoding for GPT-4o, GPT-4.1, GPT-5 and the o-series, ``cl100k_base`` for older
        GPT-4 and GPT-3.5, the documented estimate for Claude models) when no
        ``counter`` is given. Without either, counts are exact ``cl100k_base``.

        Before the strategy reads the store, its memory tree is audited
        (:mod:`context_manager.topology`: every memory a contiguous run of the rows its
        strategy reads, which are the agent's window once a host presents rows; every
        parent listing its children...). ``topology_policy`` says what a broken tree
        does: ``"reject"`` (the default) refuses it with
        :class:`~context_manager.topology.policy.StoreTopologyError` (the findings and
        the repair command; nothing is written), ``"repair"`` drops the broken memories
        in one transaction and logs what it did (their messages are summarised again;
        no message is touched), ``"ignore"`` skips the audit and opens it as it is.

        ``audit_only=True`` opens the store to look at it: the tree is audited (even a
        broken one opens, its findings in :meth:`topology_findings`), the strategy
        loads its records as stored (it adopts, follows and chunks nothing), and the
        manager never writes to the store. Every operation that would write (adding,
        editing or removing messages, :meth:`compile`, :meth:`tick`, pins, holds,
        presenting rows, branches...) raises
        :class:`~context_manager.errors.AuditOnlyError` naming it;
        :meth:`preview_context` is the dry compile, and every read works.

        Raises
        ------
        StoreTopologyError
            When the store's memory tree is broken and ``topology_policy="reject"``
            (and not ``audit_only``).
        ConfigError
            When ``audit_only`` is set with ``topology_policy="repair"`` (a repair
            writes) or with ``auto_tick`` (ticks write).
        ConfigError
            Unless exactly one of ``path``, ``url`` and ``store`` is given, when
            ``agent`` is given without ``url``, when ``isolate``
            is set without a ``namespace``, when ``window_tokens`` or ``memory_model``
            is given with a ``strategy`` (size the strategy itself), when both
            ``counter`` and ``model`` are given, or when the default strategy has a
            summariser but no model to name in its requests.
        ArgumentError
            For an argument of the wrong type or out of range (an :class:`ArgumentTypeError`
            for the wrong type), naming it; nothing is opened.
        """
        _check_parts(strategy, summarizer, counter, clock)
        if path is not None:
            check_path(path)
        if store is not None and not isinstance(store, RecordStore):
            raise ArgumentTypeError(
                "store", store, "a Store (Store.open(path)), another RecordStore, or None"
            )
        if namespace is not None:
            check_text(namespace, "namespace", empty=False)
        check_flag(isolate, "isolate")
        if not isinstance(auto_tick, bool) and auto_tick != "after_compile":
            raise ArgumentError("auto_tick", auto_tick, "True, False or 'after_compile'")
        if model is not None:
            check_text(model, "model", empty=False)
            if counter is not None:
                raise ConfigError(
                    "model= picks the token counter for that model; a counter= given too "
                    "would be ignored: give one of them"
                )
            counter = counter_for_model(model)
        if strategy is None:
            strategy = default_strategy(summarizer, window_tokens, memory_model)
        elif window_tokens is not None or memory_model is not None:
            given = "window_tokens" if window_tokens is not None else "memory_model"
            raise ConfigError(
                f"{given} sizes the default strategy; a strategy given to open() is sized "
                "by its own config (AutobiographicalConfig.for_window(window, "
                "compression_model=...))"
            )
        if url is not None:
            check_text(url, "url", empty=False)
            if not url.startswith(("postgresql://", "postgres://")):
                raise ArgumentError("url", url, "a PostgreSQL URL: postgresql://HOST/DB")
        if agent is not None:
            check_text(agent, "agent", empty=False)
            if url is None:
                raise ConfigError(
                    "agent= names whose store to open in a PostgreSQL database: give url= "
                    "with it (a store file is one agent's already)"
                )
        if sum(given is not None for given in (path, url, store)) != 1:
            raise ConfigError(
                "give exactly one of path= (a store file), url= (a PostgreSQL database, "
                "with agent=) or store= (a Store)"
            )
        if isolate and not namespace:
            raise ConfigError("isolate=True needs a namespace= to isolate the messages under")
        if topology_policy not in POLICIES:
            raise ArgumentError(
                "topology_policy", topology_policy, "'reject', 'repair' or 'ignore'"
            )
        check_flag(audit_only, "audit_only")
        if audit_only and topology_policy == "repair":
            raise ConfigError(
                "audit_only=True never writes, and topology_policy='repair' writes the "
                "repair: open with one or the other (audit_only reports the findings in "
                "topology_findings())"
            )
        if audit_only and auto_tick:
            raise ConfigError(
                "audit_only=True never writes, and auto_tick ticks (and writes) in the "
                "background: leave auto_tick=False"
            )
        message_slot = f"{namespace}/messages" if isolate else "messages"
        aux_slots = _auxiliary_slots(auxiliary_views, message_slot)
        owns = store is None
        if store is not None:
            opened = store
        elif url is not None:
            opened = Store.open(url, agent=agent)
        else:
            assert path is not None
            opened = Store.open(path)
        try:
            findings: list[Finding] = []
            name = namespace or DEFAULT_NAMESPACE
            if audit_only:
                findings = audit_at_open(
                    opened, name, message_slot=message_slot, auxiliary_slots=aux_slots
                )
            else:
                check_at_open(
                    opened,
                    name,
                    topology_policy,
                    opened.path,
                    message_slot=message_slot,
                    auxiliary_slots=aux_slots,
                )
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
                audit_only=audit_only,
                topology_findings=findings,
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
            if fresh and not self._gate.audit_only:
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
    def store(self) -> RecordStore:
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
        self._held_at = {i: t for i, t in self._held_at.items() if i in self._holds}
        self._strategy.initialize(self._ctx)

    def _reload(self) -> None:
        """A branch switch: :meth:`_resync`, and holds and stats start over."""
        self._holds.clear()
        self._held_at.clear()
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
    def is_closed(self) -> bool:
        """Whether :meth:`close` was called: the reference's name for :attr:`closed`
        (the same value).

        Examples
        --------
        >>> from context_manager import ContextManager
        >>> with ContextManager.open(path=":memory:") as cm:
        ...     cm.is_closed
        False
        >>> cm.is_closed
        True
        """
        return self._closed

    @property
    def audit_only(self) -> bool:
        """Whether the manager was opened with ``audit_only=True`` (it never writes).

        Examples
        --------
        >>> from context_manager import ContextManager
        >>> with ContextManager.open(path=":memory:", audit_only=True) as cm:
        ...     cm.audit_only
        True
        """
        return self._gate.audit_only

    def topology_findings(self) -> list[Finding]:
        """What the audit of the memory tree found when the manager was opened with
        ``audit_only=True`` (:mod:`context_manager.topology`): empty when the tree is
        sound. Without ``audit_only`` a broken tree is rejected, repaired or ignored at
        open (``topology_policy``), so this is empty.

        Returns
        -------
        list of Finding
            A copy, in the audit's order (:func:`~context_manager.topology.audit`).

        Examples
        --------
        >>> from context_manager import ContextManager
        >>> with ContextManager.open(path=":memory:", audit_only=True) as cm:
        ...     cm.topology_findings()
        []
        """
        return list(self._topology_findings)

    # ---------------------------------------------------------------- channels
    _channel_index: ChannelIndex | None = None
    """The channel of each message version read (made by the first channel query)."""

    @operation()
    def query_messages_by_channel(
        self,
        channel_id: str,
        *,
        limit: int | None = None,
        offset: int = 0,
        reverse: bool = False,
        from_time: float | None = None,
        to_time: float | None = None,
    ) -> QueryResult:
        """The live messages of one channel (``metadata["external"]["channelId"]``),
        oldest first (newest first with ``reverse``): ``offset`` of them skipped, then
        at most ``limit``; ``total_count`` counts every match before the page.

        An index, not a scan of the bodies: each message's channel is read once per
        version and kept in the store's derived tables (:mod:`context_manager.channels`),
        so a reopened manager reads no body for it; an edit re-reads that message
        alone. ``from_time`` and ``to_time`` bound the messages' timestamps as in
        :meth:`query_messages` (the reference's ``queryMessagesByTimeAndChannel``).

        Raises
        ------
        ArgumentError
            Naming the argument: a ``channel_id`` that is not a non-empty str, a
            negative ``limit`` or ``offset``, a time that is not a finite number or
            ``from_time`` after ``to_time`` (an :class:`ArgumentTypeError` for the
            wrong type).

        Examples
        --------
        >>> from context_manager import ContextManager, CharsCounter
        >>> with ContextManager.open(path=":memory:", counter=CharsCounter()) as cm:
        ...     for i, channel in enumerate(["ops", "dev", "ops", "ops"]):
        ...         where = {"external": {"channelId": channel}}
        ...         _ = cm.add_message("User", f"m{i}", metadata=where)
        ...     page = cm.query_messages_by_channel("ops", limit=2, offset=1)
        >>> [m.message.text for m in page.messages], page.total_count
        (['m2', 'm3'], 3)
        """
        return front_channels.messages_by_channel(
            self, channel_id, limit, offset, reverse, from_time, to_time
        )

    @operation()
    def get_channel_message_counts(self) -> list[ChannelCount]:
        """How many live messages each channel holds, each channel in the order of its
        first message (messages without a channel are not counted; see
        :meth:`query_messages_by_channel` for the index behind it).

        Examples
        --------
        >>> from context_manager import ContextManager, CharsCounter
        >>> with ContextManager.open(path=":memory:", counter=CharsCounter()) as cm:
        ...     for channel in ["ops", "dev", "ops"]:
        ...         _ = cm.add_message("User", "hi", metadata={"external": {"channelId": channel}})
        ...     _ = cm.add_message("User", "no channel")
        ...     [(c.channel_id, c.messages) for c in cm.get_channel_message_counts()]
        [('ops', 2), ('dev', 1)]
        """
        return front_channels.channel_counts(self)

    @operation()
    def get_channel_token_stats(
        self, *, from_time: float | None = None, to_time: float | None = None
    ) -> ChannelTokenStats:
        """Messages and raw tokens (the manager's counter, as :meth:`compile` counts a
        message) per channel, among the live messages whose timestamp is within
        ``[from_time, to_time]`` (all of them without bounds; a message without a
        timestamp passes no bound). The totals count the messages without a channel
        too. Token counts are kept per message (saved, so a reopened manager counts
        none again).

        Raises
        ------
        ArgumentError
            For a time that is not a finite number, or ``from_time`` after ``to_time``.

        Examples
        --------
        >>> from context_manager import ContextManager, CharsCounter
        >>> with ContextManager.open(path=":memory:", counter=CharsCounter()) as cm:
        ...     _ = cm.add_message("User", "hello", metadata={"external": {"channelId": "ops"}})
        ...     _ = cm.add_message("User", "no channel")
        ...     stats = cm.get_channel_token_stats()
        >>> stats.total_messages, [(c.channel_id, c.messages) for c in stats.by_channel]
        (2, [('ops', 1)])
        """
        return front_channels.channel_token_stats(self, from_time, to_time)

    # ------------------------------------------------------------ hot settings
    @operation()
    def get_hot_context_settings(self) -> HotContextSettings | None:
        """The live-tunable settings of the strategy (:meth:`update_hot_context_settings`),
        or None for a strategy without any (:class:`PassthroughStrategy`, the default
        without a summariser, folds nothing and has no tail to tune).

        Examples
        --------
        >>> from context_manager import ContextManager
        >>> with ContextManager.open(path=":memory:") as cm:
        ...     cm.get_hot_context_settings() is None
        True
        """
        return front_hot.settings(self)

    @operation(writes=True)
    def update_hot_context_settings(
        self,
        *,
        tail_tokens: int | None = None,
        transition_pace_tokens: int | None = None,
        prepared_window_tokens: int | None = None,
    ) -> HotContextSettings:
        """Tune the live strategy: the next compile (and tick) uses the new settings,
        without reopening the manager or swapping the strategy; returns the settings
        now in force. A setting left None keeps its value.

        ``tail_tokens`` is the raw tail (the autobiographical strategy's
        ``recent_window_tokens``): a longer tail unfolds the newest history at the next
        compile, a shorter one lets it fold. The settings are held in memory, not
        persisted: they belong to the strategy object (:attr:`strategy` shows them in
        its config), so a manager reopened with the host's config, or a strategy set
        again with :meth:`set_strategy`, has that config's values. To try a setting
        without applying it, use :meth:`preview_context` with
        ``overrides={"recent_window_tokens": N}``.

        ``prepared_window_tokens`` and ``transition_pace_tokens`` are the kv-stable
        solver's prepared-window transition (the reference's, :mod:`solvers.kv_stable`):
        ``prepared_window_tokens`` is the input budget of a window the agent will move
        to (``max_tokens - reserve_for_response`` there): the fold is aimed at it while
        the current window stays the hard wall, so the requests are under it before the
        move. ``transition_pace_tokens`` bounds what a change the wall does not force
        may make the provider re-read in one compile: the move is then made a suffix at
        a time, and a compile where no step fits holds the request as it was. ``0``
        turns either off. The prepared window applies from the next compile that
        changes the frontier (a request that still fits the prepared window is held).

        Raises
        ------
        UnsupportedSettingError
            For a strategy without hot settings (:class:`PassthroughStrategy`), or for
            ``transition_pace_tokens`` or ``prepared_window_tokens`` when the strategy's
            solver is not kv-stable, naming the setting (a :class:`ConfigError`);
            nothing changes.
        ArgumentError
            For a setting that is not an int of at least 0 (an
            :class:`ArgumentTypeError` for the wrong type); a value the strategy's
            config refuses (a tail that does not fit the window it was sized for) is a
            :class:`ConfigError` naming the setting. Nothing changes.

        Examples
        --------
        >>> from context_manager import ContextManager, CharsCounter, ExtractiveSummarizer
        >>> with ContextManager.open(
        ...     path=":memory:", summarizer=ExtractiveSummarizer(), counter=CharsCounter()
        ... ) as cm:
        ...     cm.update_hot_context_settings(tail_tokens=4000).tail_tokens
        ...     cm.strategy.config.recent_window_tokens
        4000
        4000
        """
        return front_hot.update(
            self,
            tail_tokens=tail_tokens,
            transition_pace_tokens=transition_pace_tokens,
            prepared_window_tokens=prepared_window_tokens,
        )

    @property
    def _ticker(self) -> Ticker | None:
        """The ``auto_tick`` worker (None without one)."""
        return self._gate.ticker

    def _check_open(self) -> None:
        if self._closed:
            raise ContextManagerError("the context manager is closed")
