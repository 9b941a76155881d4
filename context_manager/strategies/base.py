"""The strategy protocol and what a strategy sees of the manager."""

from __future__ import annotations

import abc
import math
import time
import warnings
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any

from ..images import ImagePolicy
from ..message_caps import MessageCaps
from ..messages import ContentBlock, Message
from ..pairing import SendForm
from ..store import Item, RecordStore, damaged

if TYPE_CHECKING:
    from ..summarizer import Summarizer
    from ..tokens import TokenCounter

__all__ = [
    "AnswerNeeded",
    "Answers",
    "Entry",
    "RequestBudget",
    "Selection",
    "StoredMessage",
    "Strategy",
    "StrategyContext",
    "StrategyProfile",
]


class StoredMessage:
    """A message as stored: its id and sequence in the store.

    Built from a stored body (:meth:`lazy`), the :class:`Message` is validated on
    first access of :attr:`message` and then kept, so opening a long history builds
    only the messages something reads.

    Parameters
    ----------
    id : str
    seq : int
    message : Message
    rev : int
        The store's version of the body (:attr:`~context_manager.store.Item.rev`).
    source : Item or Store, optional
        Where to read the body when ``message`` is None: the item, or the store that
        holds the record ``rev``.
    """

    __slots__ = ("_body", "_message", "id", "rev", "seq")

    def __init__(
        self,
        id: str,
        seq: int,
        message: Message | None,
        rev: int = 0,
        source: Item | RecordStore | None = None,
    ) -> None:
        self.id = id
        self.seq = seq
        self.rev = rev
        self._message = message
        self._body = source

    @classmethod
    def from_item(cls, item: Item) -> StoredMessage:
        """The stored message of a store item; its :class:`Message` is validated from
        the item's body when first read."""
        stored = cls.__new__(cls)
        stored.id, stored.seq, stored.rev = item.id, item.seq, item.rev
        stored._message, stored._body = None, item
        return stored

    @classmethod
    def from_store(cls, store: RecordStore, id: str, seq: int, rev: int) -> StoredMessage:
        """A stored message whose body is read from ``store`` (the record ``rev``) and
        validated when first read."""
        stored = cls.__new__(cls)
        stored.id, stored.seq, stored.rev = id, seq, rev
        stored._message, stored._body = None, store
        return stored

    @property
    def message(self) -> Message:
        """The message (read and validated on first access)."""
        if self._message is None:
            source = self._body
            assert source is not None
            path = source.origin if isinstance(source, Item) else source.path
            body = source.body if isinstance(source, Item) else source.body_at(self.rev)
            try:
                self._message = Message.model_validate(body)
            except ValueError as exc:  # what a damaged row holds: not a message
                where = f"table records, row {self.rev} (message {self.id}), column body"
                what = str(exc).splitlines()
                raise damaged(path, where, f"not a message: {' '.join(what[:3])}") from None
            self._body = None
        return self._message

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, StoredMessage):
            return NotImplemented
        return (self.id, self.seq, self.message) == (other.id, other.seq, other.message)

    def __hash__(self) -> int:
        return hash((self.id, self.seq))

    def __repr__(self) -> str:
        return f"StoredMessage(id={self.id!r}, seq={self.seq}, message={self.message!r})"


@dataclass(frozen=True)
class RequestBudget:
    """The budget of one request and what it carries besides the history.

    ``max_tokens`` is the whole window; the input may use ``max_tokens - reserve``.
    ``fixed_tokens`` of that input are already spent on what the manager adds to
    every request (the system prompt, tool definitions and injections), so the
    history a strategy selects may use :attr:`history_tokens`.
    """

    max_tokens: int
    reserve_for_response: int = 0
    fixed_tokens: int = 0

    @property
    def input_tokens(self) -> int:
        """Tokens the request's input may use."""
        return self.max_tokens - self.reserve_for_response

    @property
    def history_tokens(self) -> int:
        """Tokens the selected history may use: the input less the fixed part."""
        return self.input_tokens - self.fixed_tokens

    def with_fixed(self, fixed_tokens: int) -> RequestBudget:
        """The same budget with ``fixed_tokens`` spent on what every request carries
        (the manager prices the overhead and injections once, then hands this on).

        Examples
        --------
        >>> RequestBudget(1000, 100).with_fixed(50).history_tokens
        850
        """
        return replace(self, fixed_tokens=fixed_tokens)

    def target_tokens(self, slack_ratio: float) -> int:
        """The soft target of a fold at ``slack_ratio``: the fixed part plus that share
        less of the history's room (only history can fold, so the band is a share of
        what the overhead leaves).

        Examples
        --------
        >>> RequestBudget(1000, 100, fixed_tokens=100).target_tokens(0.25)
        700
        """
        return self.fixed_tokens + math.floor(max(0, self.history_tokens) * (1 - slack_ratio))

    def allowance_tokens(self, grace_ratio: float) -> int:
        """The most a request may use when a strategy grants ``grace_ratio`` over the
        input budget to a floor that cannot fit it: never past ``max_tokens``.

        Examples
        --------
        >>> RequestBudget(1000, 100).allowance_tokens(0.05)
        945
        >>> RequestBudget(1000, 10).allowance_tokens(0.05)
        1000
        """
        return min(self.max_tokens, math.floor(self.input_tokens * (1 + grace_ratio)))

    def admits(self, tokens: int, grace_tokens: int = 0) -> bool:
        """Whether a request of ``tokens`` may be sent: within the input budget plus the
        ``grace_tokens`` its strategy declared (:attr:`Selection.grace_tokens`), and
        never past ``max_tokens``.

        Examples
        --------
        >>> budget = RequestBudget(1000, 100)
        >>> budget.admits(900), budget.admits(901), budget.admits(901, grace_tokens=5)
        (True, False, True)
        >>> budget.admits(1001, grace_tokens=500)
        False
        """
        return tokens <= min(self.input_tokens + grace_tokens, self.max_tokens)


@dataclass(frozen=True)
class Entry:
    """One message of a compiled context, with where it came from."""

    participant: str
    content: tuple[ContentBlock, ...]
    source_ids: tuple[str, ...] = ()
    summary_id: str | None = None
    message: Message | None = None
    """The stored message this entry shows verbatim, when it is one (reused as is)."""

    def to_message(self) -> Message:
        """The entry as a plain :class:`Message`."""
        if self.message is not None:
            return self.message
        return Message(participant=self.participant, content=self.content)


@dataclass
class Selection:
    """What a strategy's ``select`` returns."""

    entries: list[Entry]
    stats: dict[str, Any] = field(default_factory=dict)
    breakpoints: tuple[int, ...] = ()
    """Entries ending a stretch that later compiles keep unchanged (indices, sorted, at
    most three): where a client should put prompt-cache breakpoints. The manager adds
    the last message."""
    tokens: int | None = None
    """Tokens of the entries by the context's counter, when the strategy priced them
    (the manager counts them itself otherwise)."""
    grace_tokens: int = 0
    """Tokens over the input budget the entries may take: the strategy's grace, which
    it decides (the autobiographical strategy: ``over_budget_grace_ratio``, applied when
    its plan is read), and the manager holds the request to the input budget plus this.
    When 0, a ``grace_tokens`` in :attr:`stats` is read instead (how grace was stated
    before this field)."""

    def __post_init__(self) -> None:
        if not self.grace_tokens and self.stats.get("grace_tokens"):
            self.grace_tokens = int(self.stats["grace_tokens"])


@dataclass
class StrategyContext:
    """The manager, as a strategy sees it."""

    store: RecordStore
    namespace: str
    messages: Callable[[], list[StoredMessage]]
    """The messages of the agent's window, in window order (do not mutate the list):
    the live messages, oldest first, until a host presents rows
    (:meth:`~context_manager.ContextManager.present_rows`), then the rows presented and
    not taken out since that the record still holds."""
    count: Callable[[StoredMessage], int]
    """Tokens of a stored message (cached by id)."""
    forms: Callable[[], tuple[Sequence[SendForm], Sequence[int]]]
    """What each live message is sent as when shown raw, and its tokens, aligned with
    :attr:`messages` (:func:`~context_manager.pairing.send_form`: the one pairing rule).
    The forms are built when read (an item, a slice or an iteration), so a strategy that
    reads only the recent ones pays only for those; the tokens are :attr:`sent`'s."""
    sent: Callable[[], tuple[Sequence[int], Sequence[bool]]]
    """Per live message, aligned with :attr:`messages`: its tokens as sent and whether it
    is tied to the next message (the tokens and ``tied`` flags of :attr:`forms`, without
    building the forms). Extended on append, recomputed only where messages changed and
    persisted, so a reopened store reads them instead of counting (do not mutate)."""
    sent_revision: Callable[[], int]
    """Changes whenever a value :attr:`sent` returns may have changed (read it after
    :attr:`sent`): what a strategy computes from them can be kept while it stays."""
    version: Callable[[], int]
    """Changes whenever a message is edited or removed or the branch switches."""
    counter: TokenCounter
    summarizer: Summarizer | None
    is_held: Callable[[str], bool]
    held_ids: Callable[[], set[str]]
    tools: Callable[[], Sequence[dict[str, Any]] | None]
    system_prompt: Callable[[], str | None]
    clock: Callable[[], float] = time.time
    """The manager's clock (seconds): what hold timeouts and retry backoff run on."""
    out_of_window: Callable[[], set[str]] = set
    """Ids of the rows the record holds and the agent's window does not (retracted, or
    never presented); empty while the window is the record. What a strategy kept over
    such rows without hearing them go is repaired from it when it loads."""
    presenting: Callable[[], bool] = bool
    """Whether a host presents rows (the window is no longer the record)."""
    answers: Callable[[], Answers | None] = lambda: None
    """The summariser's answers gathered for the tick in progress, when the manager
    runs the summariser outside its lock (:class:`Answers`); None: call it directly."""
    audit_only: bool = False
    """The manager was opened with ``audit_only=True``: the strategy loads its records
    as stored and writes nothing (no chunk closed, no record adopted or followed); the
    manager refuses every operation that writes."""

    def slot(self, name: str) -> str:
        """The store slot ``name`` scoped to this strategy's namespace."""
        return f"{self.namespace}/{name}"


class AnswerNeeded(Exception):
    """Raised by :meth:`Strategy.tick` when the tick needs an answer it does not have yet.

    While :attr:`StrategyContext.answers` is set, a strategy does not call its
    summariser: it looks the request up there and, when it has no answer, raises this
    with the request's ``key`` and ``call``, a function that makes the call (within its
    deadline) and returns the outcome. The manager runs ``call`` holding no lock, so
    adding messages and compiling go on meanwhile, records the outcome in the
    :class:`Answers` and runs the tick again on the state as it is then. A tick must be
    able to stop where it raises: what it stored before is kept, so it stores nothing
    that depends on an answer before it has them all. Where the state changed so that
    the tick now sends another request, the answer goes unused and the new request is
    asked for.
    """

    def __init__(self, key: str, call: Callable[[], object]) -> None:
        super().__init__(key)
        self.key = key
        self.call = call


class Answers:
    """The outcomes of the summariser calls one tick made, by request key.

    Examples
    --------
    >>> answers = Answers()
    >>> answers.put("k", "an outcome")
    >>> answers.get("k"), answers.first_use("k"), answers.first_use("k")
    ('an outcome', True, False)
    >>> answers.get("other") is Answers.MISSING
    True
    """

    MISSING: object = object()
    """What :meth:`get` returns for a request not answered yet."""

    def __init__(self) -> None:
        self._outcomes: dict[str, object] = {}
        self._used: set[str] = set()

    def get(self, key: str) -> object:
        """The outcome recorded for ``key``, or :attr:`MISSING`."""
        return self._outcomes.get(key, self.MISSING)

    def put(self, key: str, outcome: object) -> None:
        """Record the outcome of the call for ``key``."""
        self._outcomes[key] = outcome

    def first_use(self, key: str) -> bool:
        """True the first time ``key``'s outcome is taken (a tick may run again over
        the answers it already has: a call is counted once)."""
        if key in self._used:
            return False
        self._used.add(key)
        return True

    def __len__(self) -> int:
        return len(self._outcomes)


@dataclass(frozen=True)
class StrategyProfile:
    """What a strategy was sized and configured for, as the manager reads it.

    Examples
    --------
    >>> StrategyProfile(window_tokens=32_000).head_window_tokens
    0
    """

    window_tokens: int | None = None
    """The window a compile takes when given no ``max_tokens`` (None: the manager's)."""
    reserve_for_response_tokens: int | None = None
    """The reserve a compile at :attr:`window_tokens` takes when given none."""
    head_window_tokens: int = 0
    """Tokens of the raw head it keeps from the start of the conversation (0: none)."""
    memory_model: str | None = None
    """The model that writes its memories (None: it writes none)."""
    summary_timeout_seconds: float | None = None
    """How long one summariser call may take (None: the manager's default)."""


class Strategy(abc.ABC):
    """Decides what each compile sends. Subclasses implement :meth:`select`.

    The other hooks have defaults that do nothing. A strategy describes itself in
    :attr:`profile`, and offers optional capabilities (pins and locks, memory reads,
    head reset, retrying given-up work) by implementing their protocols
    (:mod:`context_manager.strategies.contract`); ``context_manager.testing`` checks
    a strategy against that contract.
    """

    name = "strategy"

    @property
    def image_policy(self) -> ImagePolicy | None:
        """The images each compile sends live (:mod:`context_manager.images`): the
        manager replaces the others in the copy sent by a note. None (this default):
        every image the selection holds is sent."""
        return None

    @property
    def message_caps(self) -> MessageCaps | None:
        """Caps on each message as sent (:mod:`context_manager.message_caps`), read when
        the manager opens. None (this default): messages are sent whole."""
        return None

    @property
    def profile(self) -> StrategyProfile:
        """What this strategy was sized and configured for.

        By default read from its ``config`` attribute when it has one (``window_tokens``,
        ``reserve_for_response_tokens``, ``head_window_tokens``, ``compression_model``,
        ``summary_timeout_seconds``; each missing one takes its default), so a strategy
        configured like the shipped ones is described without more code.
        """
        config = getattr(self, "config", None)
        if config is None:
            return StrategyProfile()
        head = getattr(config, "head_window_tokens", 0)
        timeout = getattr(config, "summary_timeout_seconds", None)
        return StrategyProfile(
            window_tokens=getattr(config, "window_tokens", None),
            reserve_for_response_tokens=getattr(config, "reserve_for_response_tokens", None),
            head_window_tokens=head if isinstance(head, int) and head > 0 else 0,
            memory_model=getattr(config, "compression_model", None),
            summary_timeout_seconds=timeout
            if isinstance(timeout, int | float) and not isinstance(timeout, bool) and timeout > 0
            else None,
        )

    def initialize(self, ctx: StrategyContext) -> None:  # noqa: B027 (a hook whose default does nothing)
        """Load branch-scoped state (called on open, strategy swap and branch switch)."""

    def on_new_message(self, ctx: StrategyContext, message: StoredMessage) -> None:  # noqa: B027 (a hook whose default does nothing)
        """Called after every added message."""

    def shard_plan(
        self, counter: TokenCounter, participant: str, content: Sequence[ContentBlock]
    ) -> list[str] | None:
        """How to store a message about to be added: the texts of its shards, in order
        (two or more, joined they are the message's text byte for byte), to store it as
        a body in parts (:mod:`context_manager.bodies`); None (this default) stores it
        as one message. Asked before anything is stored, with the manager's counter.

        Examples
        --------
        >>> from context_manager import CharsCounter
        >>> from context_manager.strategies.passthrough import PassthroughStrategy
        >>> PassthroughStrategy().shard_plan(CharsCounter(), "User", ()) is None
        True
        """
        return None

    def on_messages_removed(self, ctx: StrategyContext, ids: Sequence[str]) -> None:  # noqa: B027 (a hook whose default does nothing)
        """Called when ``ids`` left the record, inside the transaction that removed
        them (``ctx.messages()`` no longer has them): records over them must follow."""

    def on_presented(self, ctx: StrategyContext, messages: Sequence[StoredMessage]) -> None:
        """Called when rows enter the agent's window, in the transaction that entered
        them (``ctx.messages()`` ends with them): at each added message while the
        window is the record, and at each
        :meth:`~context_manager.ContextManager.present_rows` once a host presents.

        By default each is heard through :meth:`on_new_message`, in order.
        """
        for message in messages:
            self.on_new_message(ctx, message)

    def on_retracted(self, ctx: StrategyContext, ids: Sequence[str]) -> None:
        """Called when rows leave the agent's window, in the transaction that took them
        out (``ctx.messages()`` no longer has them): at
        :meth:`~context_manager.ContextManager.retract_rows`, at a removal once a host
        presents, and at ``retract_removed`` and ``retract_absent_rows``, where the
        store may no longer hold the rows (they come by id alone).

        By default they are heard as a removal, through :meth:`on_messages_removed`.
        """
        self.on_messages_removed(ctx, ids)

    @abc.abstractmethod
    def select(
        self, ctx: StrategyContext, budget: RequestBudget, *, dry_run: bool = False
    ) -> Selection:
        """The entries of the next request. ``dry_run`` must have no side effects."""

    def tick(self, ctx: StrategyContext) -> bool:
        """Do at most one unit of background work; True when something was done."""
        return False

    def is_ready(self, ctx: StrategyContext) -> bool:
        """True when no background work is queued."""
        return True

    def on_holds_released(self, ctx: StrategyContext) -> None:  # noqa: B027 (a hook whose default does nothing)
        """Called after compression holds are released."""

    def pending_work(self, ctx: StrategyContext) -> list[str]:
        """Descriptions of queued work."""
        return []

    def entries_cover(self, entries: Sequence[Entry]) -> set[str]:
        """Message ids the entries represent (raw or through summaries).

        .. deprecated::
            Warns with :class:`DeprecationWarning` and will be removed in the next
            release: read each entry's ``source_ids``.
        """
        warnings.warn(
            "Strategy.entries_cover is deprecated and will be removed in the next release; "
            "read each entry's source_ids",
            DeprecationWarning,
            stacklevel=2,
        )
        return {i for e in entries for i in e.source_ids}
