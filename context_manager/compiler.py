"""The compile pipeline of a manager: from a budget and the strategy's selection to the
request sent (see ``docs/architecture.md``, *One compile*).

:class:`Compiler` is the manager's part for it: it prices the fixed part, asks the
strategy for its selection, checks what the strategy returned, binds thinking, places
the injections, builds the render stats and keeps what the next compile compares
with (the last history checked whole, the last live request). :func:`catch_up` is the
loop of ``compile(catch_up=True)``: attempts with batches of ticks between them.
"""

from __future__ import annotations

import math
import secrets
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, cast

from .arguments import check_sequence, check_text
from .bodies import join_raw_shards
from .errors import (
    ArgumentTypeError,
    ConfigError,
    ContextManagerError,
    OverBudgetError,
    UnknownMessageError,
)
from .images import live_images
from .message_caps import keep_last_results, truncated_counts
from .messages import MAX_CACHE_BREAKPOINTS, ContentBlock, Message
from .pairing import tool_pair_problems
from .record_cache import RecordCache, SavedCounts
from .render_stats import ImagesSent, RenderStats, RequestParts, Truncated
from .request import (
    INJECTION_PREFIX,
    CompileResult,
    Injection,
    Overhead,
    identity_of,
    place_injections,
)
from .store import RecordStore
from .strategies.base import RequestBudget, StoredMessage, Strategy, StrategyContext
from .thinking import NotedRow, RequestIdentity, SentRecord, ThinkingBinding, bind
from .tokens import TokenCounter

__all__ = [
    "MAX_CATCH_UP_BATCH",
    "MAX_CATCH_UP_RECHECKS",
    "MAX_CATCH_UP_TICKS",
    "Compiler",
    "SentCopy",
    "ThinkingArgs",
    "catch_up",
    "copy_sent",
    "next_batch",
    "plain_copy",
]

ThinkingArgs = tuple[ThinkingBinding, RequestIdentity | str | None]
"""A compile's thinking binding and the identity it is sent under."""

MAX_CATCH_UP_TICKS = 10_000
"""Most ticks one ``compile(catch_up=True)`` runs."""
MAX_CATCH_UP_BATCH = 64
"""Most ticks a catch-up runs between two attempts to compile (:func:`catch_up`)."""
MAX_CATCH_UP_RECHECKS = 3
"""Attempts a catch-up makes when its tick found no work but another thread stored
something since its last attempt."""


def plain_copy(value: Any) -> Any:
    """A copy of nested dicts and lists (the render stats): their leaves are immutable,
    so this is a deep copy at a fraction of :func:`copy.deepcopy`'s cost.

    Examples
    --------
    >>> stats = {"summaries": {"1": 2}, "pending": ["merge"]}
    >>> copy = plain_copy(stats)
    >>> copy == stats and copy["summaries"] is not stats["summaries"]
    True
    """
    if isinstance(value, dict):
        return {k: plain_copy(v) for k, v in value.items()}
    if isinstance(value, list):
        return [plain_copy(v) for v in value]
    return value


class Compiler:
    """Builds each request of one manager.

    Parameters
    ----------
    store : RecordStore
    counter : TokenCounter
        Prices the history and the injections.
    saved_counts : SavedCounts
        Prices the overhead (counts kept in the store).
    thinking_slot : str
        Where the branch's record of the last request it sent lives.
    strategy : callable
        The manager's strategy now (it may be replaced).
    ctx : StrategyContext
        The manager, as the strategy sees it.
    """

    def __init__(
        self,
        store: RecordStore,
        counter: TokenCounter,
        saved_counts: SavedCounts,
        thinking_slot: str,
        *,
        strategy: Callable[[], Strategy],
        ctx: StrategyContext,
    ) -> None:
        self.store = store
        self.counter = counter
        self.saved_counts = saved_counts
        self.thinking_slot = thinking_slot
        self._strategy = strategy
        self._ctx = ctx
        self.checked: list[Message] = []
        """The last history whose tool pairs were checked whole."""
        self.last_request: tuple[object, list[Message]] | None = None
        """The last live request's overhead key and messages (for ``kv_cost``)."""

    def forget(self) -> None:
        """Compare the next request with nothing (the store changed under us)."""
        self.last_request = None

    def strategy_changed(self) -> None:
        """A new strategy: its histories are checked from the start."""
        self.checked = []

    def run(
        self,
        budget: RequestBudget,
        injections: Sequence[Injection],
        overhead: Overhead,
        dry_run: bool,
        thinking: ThinkingArgs | None,
    ) -> CompileResult:
        """One compile within ``budget`` (its ``fixed_tokens`` are priced here, from the
        overhead and injections): the request, or :class:`OverBudgetError` when the
        fixed part or the history cannot fit; a dry run stores nothing.

        Raises
        ------
        OverBudgetError
            When the overhead and injections alone exceed the input budget (stage
            ``request overhead``), or the strategy found no selection that fits.
        ContextManagerError
            When the strategy returned a selection that breaks its contract (tool
            pairs split, over the budget); ``ValueError`` for breakpoints outside it.
        """
        compile_id = secrets.token_hex(8)
        system: list[ContentBlock] = []
        before: list[Message] = []
        after: list[Message] = []
        for inj in injections:
            if inj.position == "system":
                system.extend(inj.content)
            else:
                m = Message(participant=f"{INJECTION_PREFIX}{inj.namespace}", content=inj.content)
                (before if inj.position == "before_user" else after).append(m)
        count = self.counter.count_message
        parts = overhead.price(self.saved_counts, system)
        injected = sum(count(m) for m in before + after)
        fixed = parts["total"] + injected
        budget = budget.with_fixed(fixed)
        if fixed > budget.input_tokens:
            raise OverBudgetError(
                "request overhead",
                budget.input_tokens,
                fixed,
                {
                    **{f"{k}_tokens": v for k, v in parts.items() if k != "total"},
                    "injection_tokens": injected,
                    "suggestion": "the system prompt, tool definitions and injections alone "
                    "exceed the input budget: shorten them or raise max_tokens",
                },
            )
        strategy = self._strategy()
        selection = strategy.select(self._ctx, budget, dry_run=dry_run)
        if dry_run and selection.stats.get("fits") is False:
            # a preview of a refusal: nothing to send, the stats say why
            return CompileResult(
                [], system, dict(selection.stats), [], overhead.system, compile_id=compile_id
            )
        name = type(strategy).__name__
        bad = [i for i in selection.breakpoints if not 0 <= i < len(selection.entries)]
        if bad:
            raise ValueError(
                f"{name}.select returned breakpoints {bad}, outside "
                f"its {len(selection.entries)} entries: Selection.breakpoints are entry indices"
            )
        history = [e.to_message() for e in selection.entries]
        checked = self.checked
        same = 0  # messages this history shares with the last one checked, from the start
        while same < min(len(checked), len(history)) and checked[same] is history[same]:
            same += 1
        # the last shared message is checked again: what follows it may have changed
        problems = tool_pair_problems(history, start=same - 1)
        if problems:
            raise ContextManagerError(
                f"{name}.select split tool calls from their results ({'; '.join(problems[:3])}); "
                "a strategy must show the groups of context_manager.pairing.pair_groups whole"
            )
        self.checked = history
        shown = selection.tokens
        if shown is None:
            shown = sum(count(m) for m in history)
        total = fixed + shown
        if not budget.admits(total, selection.grace_tokens):
            raise ContextManagerError(
                f"{name}.select returned {shown} tokens of history where "
                f"{budget.history_tokens} were left after {fixed} of overhead and injections"
            )
        sent = copy_sent(
            strategy,
            history,
            [(e.summary_id, e.source_ids) for e in selection.entries],
            self._ctx.messages,
            self.saved_counts.count_message,
        )
        shown -= sent.saved
        total = fixed + shown
        history = sent.messages
        messages, moved = place_injections(history, before, after)
        kept_marks = selection.breakpoints[-(MAX_CACHE_BREAKPOINTS - 1) :]
        marks = {moved[sent.where[i]] for i in kept_marks}
        provenance: list[tuple[str | None, tuple[str, ...]]] = [(None, ())] * len(messages)
        for i, source in enumerate(sent.sources):
            provenance[moved[i]] = source
        identity = strip = record = None
        if thinking is not None:
            binding, named = thinking
            if isinstance(named, str):
                identity = identity_of(named, overhead.system, system, overhead.tools, {})
            else:
                identity = named
            if binding.binds:
                assert identity is not None  # checked with the compile's arguments
                sources = [
                    ids[0] if memory is None and len(ids) == 1 else None
                    for memory, ids in provenance
                ]
                bound = bind(
                    messages, sources, binding, identity, self.sent_record(), count, compile_id
                )
                went = bound.moved
                kept = [i for i, k in enumerate(went) if k >= 0 and k != (went[i - 1] if i else -1)]
                marks = {bound.moved[i] for i in marks if bound.moved[i] >= 0}
                messages = bound.messages
                provenance = [provenance[i] for i in kept]
                shown -= bound.saved
                total = fixed + shown
                strip, record = bound.strip, bound.record
        if messages:
            marks.add(len(messages) - 1)
        if record is not None and not dry_run:
            # the request this compile built is the branch's last sent, until a note
            # extends it or the next committing compile with a binding replaces it
            self.store.set(self.thinking_slot, record.model_dump(mode="json"))
        request: RequestParts = {
            "system": parts["system"],
            "tools": parts["tools"],
            "other": parts["other"],
            "injections": injected,
            "messages": shown,
            "total": total,
        }
        own: RenderStats = {
            "tokens": total,
            "request": request,
            "kv_cost": self.reread(overhead, system, messages, total, commit=not dry_run),
        }
        if sent.images is not None:
            own["images"] = sent.images
        if sent.truncated is not None:
            own["truncated"] = sent.truncated
        return CompileResult(
            messages,
            system,
            {**selection.stats, **own},
            sorted(marks),
            system_prompt=overhead.system,
            tools=[dict(t) for t in overhead.tools],
            compile_id=compile_id,
            provenance=provenance,
            identity=identity,
            thinking_strip=strip,
            raw_bodies=sent.raw_bodies,
        )

    def reread(
        self,
        overhead: Overhead,
        system: list[ContentBlock],
        messages: list[Message],
        total: int,
        *,
        commit: bool,
    ) -> int:
        """Tokens of this request from its first difference with the last live one (the
        overhead first, then message by message); every token without one."""
        key = (overhead, tuple(system))
        last = self.last_request
        reread = total
        if last is not None and last[0] == key:
            old = last[1]
            d = 0
            m = min(len(old), len(messages))
            while d < m and (old[d] is messages[d] or old[d] == messages[d]):
                d += 1
            reread = sum(self.counter.count_message(x) for x in messages[d:])
        if commit:
            self.last_request = (key, messages)
        return reread

    def note(
        self,
        rows: Sequence[str | NotedRow | Mapping[str, Any]],
        identity: RequestIdentity,
        compile_id: str,
        records: RecordCache,
    ) -> bool:
        """Note what a request built from compile ``compile_id`` carried after the
        compiled messages (see ``ContextManager.note_request_sent``): False when the
        branch's last recorded request is not that compile's.

        Raises
        ------
        UnknownMessageError
            For a row naming no message of ``records``.
        ConfigError
            For arguments of the wrong type (an ``ArgumentError`` naming them).
        """
        if not isinstance(identity, RequestIdentity):
            raise ArgumentTypeError(
                "identity",
                identity,
                "the RequestIdentity the compile was made under (CompileResult.identity)",
            )
        check_text(compile_id, "compile_id")
        hint = "wrap one id in a list" if isinstance(rows, str) else ""
        noted: list[tuple[str, Message]] = []
        vouched = True
        for i, row in enumerate(check_sequence(rows, "rows", "a sequence of message ids", hint)):
            if isinstance(row, str):
                row = NotedRow(id=row)
            elif isinstance(row, Mapping):
                try:
                    row = NotedRow.model_validate(row)
                except ValueError as exc:
                    raise ConfigError(f"rows[{i}] is not a NotedRow: {exc}") from None
            elif not isinstance(row, NotedRow):
                raise ArgumentTypeError(
                    f"rows[{i}]", row, "a message id, a NotedRow or its mapping"
                )
            if row.unstored:
                vouched = False
                continue
            if row.id is None:
                raise ConfigError(
                    f"rows[{i}] names no message: give the stored message's id, or "
                    "unstored=True for a row the request carried that is not stored as sent"
                )
            try:
                at = records.position(row.id)
            except KeyError:
                raise UnknownMessageError(
                    f"rows[{i}]={row.id!r} names no message on branch {self.store.branch!r}; "
                    "note a row the request carried that is not stored as "
                    "NotedRow(unstored=True)",
                    param=f"rows[{i}]",
                    ids=(row.id,),
                ) from None
            if vouched:
                noted.append((row.id, records.messages()[at].message))
        record = self.sent_record()
        if record is None or record.compile_id != compile_id:
            return False
        self.store.set(
            self.thinking_slot, record.with_rows(identity, noted).model_dump(mode="json")
        )
        return True

    def sent_record(self) -> SentRecord | None:
        """The branch's record of the last request it sent (None before the first)."""
        body = self.store.get(self.thinking_slot)
        if body is None:
            return None
        try:
            return SentRecord.model_validate(body)
        except ValueError:
            return None  # not a record this code wrote: it vouches for nothing


def next_batch(batch: int, gained: int, deficit: int) -> int:
    """The ticks of a catch-up's next batch: half of what ``deficit`` tokens still need
    at the rate the last ``batch`` ticks gained ``gained`` tokens, or twice ``batch``
    when they gained none; from 1 to :data:`MAX_CATCH_UP_BATCH`.

    Examples
    --------
    >>> next_batch(1, 10, 400), next_batch(4, 0, 400), next_batch(64, 1, 10**6)
    (20, 8, 64)
    """
    wanted = 2 * batch if gained <= 0 else math.ceil(deficit * batch / gained) // 2
    return max(1, min(MAX_CATCH_UP_BATCH, wanted))


def catch_up(
    attempt: Callable[[], CompileResult],
    tick: Callable[[], bool],
    sequence: Callable[[], int],
    clock: Callable[[], float],
    limit: float,
) -> tuple[CompileResult, int]:
    """``attempt()`` until it fits, with batches of ``tick()`` between attempts; returns
    the request and the ticks run.

    The first batch is one tick; each next one half the ticks the deficit still needs
    at the rate the last batch shrank it (twice the last batch when it did not), at
    most :data:`MAX_CATCH_UP_BATCH` (:func:`next_batch`). A long backlog is thus
    compiled against a few dozen times, not once per memory, and at most one batch is
    run past the first state that fits. A tick that finds no work while the store's
    ``sequence()`` moved (another thread wrote) is followed by one more attempt, at
    most :data:`MAX_CATCH_UP_RECHECKS` times.

    Raises
    ------
    OverBudgetError
        The last refusal, with ``diagnostics["catch_up"]`` (``ticks`` and why it
        ``stopped``: no work left, :data:`MAX_CATCH_UP_TICKS` ticks, or ``limit``
        seconds of ``clock()`` passed), or at once for stage ``request overhead``,
        which no compression shortens.
    """
    start = clock()
    ticks = 0
    rechecks = 0
    batch = 1
    behind: int | None = None  # the deficit at the last refusal
    stopped: str | None = None
    while True:
        try:
            return attempt(), ticks
        except OverBudgetError as exc:
            if exc.stage == "request overhead":
                raise  # no compression shortens the overhead
            if stopped is None:
                deficit = exc.actual - exc.budget
                if behind is not None:
                    batch = next_batch(batch, behind - deficit, deficit)
                behind = deficit
                done = 0
                while done < batch and stopped is None:
                    seen = sequence()
                    if clock() - start >= limit:
                        stopped = f"the {limit:g} s catch-up time is up"
                    elif ticks >= MAX_CATCH_UP_TICKS:
                        stopped = f"{ticks} ticks ran"
                    elif tick():
                        ticks += 1
                        done += 1
                    elif sequence() != seen and rechecks < MAX_CATCH_UP_RECHECKS:
                        rechecks += 1
                        break  # written meanwhile by another thread: try again
                    else:
                        stopped = "no compression work is left"
                if stopped is None or done:
                    continue  # one more attempt on what was written since
            exc.diagnostics["catch_up"] = {"ticks": ticks, "stopped": stopped}
            raise


@dataclass(frozen=True)
class SentCopy:
    """The history a strategy selected, as the request sends it (:func:`copy_sent`)."""

    messages: list[Message]
    saved: int
    """Tokens the passes took off the history (never negative)."""
    where: list[int]
    """For each message of the selected history, the index of the message sent for it."""
    sources: list[tuple[str | None, tuple[str, ...]]]
    """For each message sent: the memory it shows and the stored messages it stands for."""
    images: ImagesSent | None
    truncated: Truncated | None
    raw_bodies: dict[str, str]


def copy_sent(
    strategy: Strategy,
    history: list[Message],
    sources: list[tuple[str | None, tuple[str, ...]]],
    shards: Callable[[], Sequence[StoredMessage]],
    price: Callable[[Message], int],
) -> SentCopy:
    """The passes on the copy sent, after the strategy's selection, each priced by
    ``price`` so that the request's stated tokens stay its count: the strategy's live
    images (:func:`~context_manager.images.live_images`), each tool's newest results
    (:func:`~context_manager.message_caps.keep_last_results`), then the raw shards of a
    body joined into one message (:func:`~context_manager.bodies.join_raw_shards`).
    Each pass only ever takes tokens off; the stored messages never change."""
    saved = 0
    images: ImagesSent | None = None
    policy = strategy.image_policy
    if policy is not None and policy.active:
        live = live_images(history, policy, price)
        saved += sum(price(history[i]) - price(live.messages[i]) for i in live.changed)
        history = live.messages
        if live.live or live.dropped:
            images = cast(ImagesSent, live.stats())
    caps = strategy.message_caps
    truncated: Truncated | None = None
    if caps is not None and (caps.active or caps.tool_result_max_last_n is not None):
        last, replaced = keep_last_results(history, caps.tool_result_max_last_n, price)
        saved += sum(price(a) - price(b) for a, b in zip(history, last, strict=True) if a is not b)
        history = last
        counts = {**truncated_counts(history), "results": replaced}
        if any(counts.values()):
            truncated = cast(Truncated, counts)
    joined = join_raw_shards(
        history, sources, shards, price, caps.max_message_tokens if caps is not None else 0
    )
    return SentCopy(
        joined.messages,
        saved + joined.saved,
        joined.where,
        joined.sources,
        images,
        truncated,
        joined.raw_bodies,
    )
