"""The strategy class: the public face over the package's modules.

Each job lives in its own module, as functions of one :class:`~.state.State`:
:mod:`.windows`, :mod:`.chunking`, :mod:`.requests` (the summariser requests),
:mod:`.writer` (what to write next, and writing it), :mod:`.solve` (one compile:
the fold problem stated and solved through :mod:`context_manager.adapter`, its
plan rendered) and :mod:`.queries`; :mod:`.records` holds and writes what is
persisted. This class validates the configuration, owns the state and answers the
:class:`~context_manager.strategies.base.Strategy` calls.
See :mod:`context_manager.strategies.autobiographical` for the whole picture.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from pydantic import ValidationError

import solvers

from ...adapter import Snapshot
from ...arguments import check_pin_levels
from ...bodies import shardable_text, split_text
from ...errors import ConfigError, UnknownMessageError
from ...images import ImagePolicy
from ...message_caps import MessageCaps
from ...messages import ContentBlock
from ...receipts import FoldReceipt, last_receipt
from ..base import (
    Entry,
    RequestBudget,
    Selection,
    StoredMessage,
    Strategy,
    StrategyContext,
    StrategyProfile,
)
from ..hot import HotContextSettings, UnsupportedSettingError
from .chunking import adopt_memories, rebuild_chunks, reconcile
from .config import AutobiographicalConfig, UnsupportedOptionError, renamed_options
from .queries import search_summaries, summaries_in_range
from .records import ChunkRecord, Pin, Records, SummaryEntry, read_records
from .solve import select, snapshot
from .state import State
from .windows import Windows, windows
from .writer import merge_groups, pending_work, queued_chunks, tick

if TYPE_CHECKING:
    from ...tokens import TokenCounter

__all__ = ["AutobiographicalStrategy"]


class AutobiographicalStrategy(Strategy):
    """Autobiographical memory with solver-driven adaptive resolution.

    Parameters
    ----------
    config : AutobiographicalConfig, optional
    **options
        Config fields, when no ``config`` is given.

    Raises
    ------
    ConfigError
        For an unknown solver, solver options it rejects (a kv-unified solver without
        a policy, for one), or an invalid recall header template; an
        :class:`~.config.UnsupportedOptionError` for an option of the reference this
        library does not have, saying what to use instead.
    """

    name = "autobiographical"

    def __init__(self, config: AutobiographicalConfig | None = None, **options: Any) -> None:
        if config is not None and options:
            raise ConfigError("pass either config= or keyword options, not both")
        if config is None:
            try:
                config = AutobiographicalConfig(**options)
            except ValidationError as exc:
                refused = UnsupportedOptionError.of(exc)
                if refused is None:
                    raise
                raise refused from None
        self.config = config

        if self.config.solver not in solvers.names():
            raise ConfigError(
                f"solver={self.config.solver!r} is not a registered solver; "
                f"choose one of {', '.join(solvers.names())}"
            )
        method, solver_options = self.solver
        try:  # validated once: a bad option fails here, not at the first compile
            self._solver = solvers.configure(method, solver_options)
        except solvers.SolverConfigError as exc:
            raise ConfigError(f"solver_options for solver={method!r}: {exc}") from None
        try:
            self.config.recall_header_template.format(
                id="L1-0", level=1, first="a", last="b", tools="lookup"
            )
        except (KeyError, IndexError, ValueError) as exc:
            raise ConfigError(
                f"recall_header_template={self.config.recall_header_template!r} is invalid "
                f"({exc!r}); use only the fields {{id}}, {{level}}, {{first}}, {{last}} and "
                "{{tools}}"
            ) from None
        self.state = State(self.config, Records.empty())
        """Everything held between calls (:class:`~.state.State`)."""

    def with_options(self, **overrides: Any) -> AutobiographicalStrategy:
        """This strategy as these options would make it, over the same records: for a
        dry run (:meth:`~context_manager.ContextManager.preview_context`), which writes
        nothing; the records are shared, the caches are its own.

        Raises
        ------
        ConfigError
            Naming an unknown option or a value it rejects (an
            :class:`~.config.UnsupportedOptionError` for an option of the reference this
            library does not have).

        Examples
        --------
        >>> base = AutobiographicalStrategy(compression_model="m")
        >>> base.with_options(recent_window_tokens=500).config.recent_window_tokens
        500
        >>> base.config.recent_window_tokens
        30000
        """
        config = self._overridden(overrides, "overrides rejected: ")
        twin = AutobiographicalStrategy(config)
        twin.state = State(config, self.state.records)
        twin.state.carry_over(self.state)
        return twin

    def _overridden(self, overrides: dict[str, Any], what: str) -> AutobiographicalConfig:
        """This strategy's config with ``overrides``, validated (``what`` starts the
        message of a :class:`ConfigError`)."""
        try:
            fields = {**self.config.model_dump(), **renamed_options(overrides)}
            return AutobiographicalConfig.model_validate(fields)
        except ValidationError as exc:
            refused = UnsupportedOptionError.of(exc, what)
            if refused is not None:
                raise refused from None
            problems = "; ".join(
                f"{'.'.join(str(x) for x in e['loc']) or 'options'}: {e['msg']}"
                for e in exc.errors()
            )
            raise ConfigError(f"{what}{problems}") from None
        except ValueError as exc:  # an option under both its names
            raise ConfigError(f"{what}{exc}") from None

    # ------------------------------------------------------------ hot settings
    def hot_context_settings(self) -> HotContextSettings:
        """The settings a host may tune on the live strategy
        (:meth:`update_hot_context_settings`).

        Examples
        --------
        >>> AutobiographicalStrategy(recent_window_tokens=900).hot_context_settings()
        HotContextSettings(tail_tokens=900, transition_pace_tokens=None, prepared_window_tokens=None)
        """  # noqa: E501
        method, options = self.solver
        pace = goal = None
        if method == "kv-stable":
            if options.get("strict_reach"):
                pace = options.get("reach_tokens")
            goal = options.get("goal_tokens")
        return HotContextSettings(self.config.recent_window_tokens, pace, goal)

    def update_hot_context_settings(
        self,
        *,
        tail_tokens: int | None = None,
        transition_pace_tokens: int | None = None,
        prepared_window_tokens: int | None = None,
    ) -> HotContextSettings:
        """Change the hot settings of this strategy in place: the next compile and tick
        use them. Held in memory only (the config is the host's: a strategy built
        again from it has the config's values). A setting left None keeps its value.

        ``tail_tokens`` is ``recent_window_tokens``. The other two are kv-stable's
        prepared-window transition (:mod:`solvers.kv_stable`), in ``solver_options``:
        ``prepared_window_tokens`` is ``goal_tokens``, the input tokens of the window
        the agent will move to (the fold is aimed at it while the current window stays
        the wall), and ``transition_pace_tokens`` is ``reach_tokens`` with
        ``strict_reach``: the most a change the wall does not force may make the
        provider re-read in one compile. ``0`` turns either off. The config is
        validated again with the new values.

        Raises
        ------
        UnsupportedSettingError
            For ``transition_pace_tokens`` or ``prepared_window_tokens`` when the solver
            is not kv-stable (or ``adaptive_resolution`` is off).
        ConfigError
            When the config refuses a new value, naming the setting; nothing changes.

        Examples
        --------
        >>> strategy = AutobiographicalStrategy(compression_model="m")
        >>> strategy.update_hot_context_settings(tail_tokens=1200, prepared_window_tokens=9000)
        HotContextSettings(tail_tokens=1200, transition_pace_tokens=None, prepared_window_tokens=9000)
        >>> strategy.config.recent_window_tokens, strategy.config.solver_options["goal_tokens"]
        (1200, 9000)
        """  # noqa: E501
        method, options = self.solver
        changes: dict[str, Any] = {}
        named: list[str] = []
        if tail_tokens is not None:
            changes["recent_window_tokens"] = tail_tokens
            named.append(f"tail_tokens={tail_tokens!r}")
        if transition_pace_tokens is not None or prepared_window_tokens is not None:
            setting = (
                "transition_pace_tokens"
                if transition_pace_tokens is not None
                else "prepared_window_tokens"
            )
            if method != "kv-stable":
                raise UnsupportedSettingError(
                    setting,
                    f"{setting} is a setting of the kv-stable solver's prepared-window "
                    f"transition; this strategy folds with {method!r}: use "
                    "solver='kv-stable' (with adaptive_resolution on) to tune it",
                )
            given = dict(self.config.solver_options)
            if transition_pace_tokens is not None:
                given.pop("reach_tokens", None)
                given.pop("strict_reach", None)
                if transition_pace_tokens:
                    given.update(reach_tokens=transition_pace_tokens, strict_reach=True)
                named.append(f"transition_pace_tokens={transition_pace_tokens!r}")
            if prepared_window_tokens is not None:
                given.pop("goal_tokens", None)
                if prepared_window_tokens:
                    given["goal_tokens"] = prepared_window_tokens
                named.append(f"prepared_window_tokens={prepared_window_tokens!r}")
            changes["solver_options"] = given
        if not changes:
            return self.hot_context_settings()
        what = f"{', '.join(named)} rejected: "
        config = self._overridden(changes, what)
        method, options = config.solver_and_options
        try:
            solver = solvers.configure(method, options)
        except solvers.SolverConfigError as exc:
            raise ConfigError(f"{what}{exc}") from None
        self.config = self.state.config = config
        self._solver = solver
        self.state.cache.clear()  # what it derived from the old settings
        return self.hot_context_settings()

    @property
    def profile(self) -> StrategyProfile:
        """Its config as the manager reads it: the window and reserve it was sized for,
        its raw head, the model that writes its memories and their deadline."""
        config = self.config
        return StrategyProfile(
            window_tokens=config.window_tokens,
            reserve_for_response_tokens=config.reserve_for_response_tokens,
            head_window_tokens=config.head_window_tokens,
            memory_model=config.compression_model,
            summary_timeout_seconds=config.summary_timeout_seconds,
        )

    @property
    def message_caps(self) -> MessageCaps:
        """The caps on each message sent (``max_message_tokens``,
        ``tool_use_input_max_tokens``, ``tool_result_max_last_n``)."""
        return self.config.message_caps()

    @property
    def image_policy(self) -> ImagePolicy:
        """The images each compile sends live (``max_live_images``,
        ``image_strip_depth_tokens``, ``max_live_image_bytes``)."""
        return self.config.image_policy()

    @property
    def solver(self) -> tuple[str, dict[str, Any]]:
        """The solver each compile calls and its options."""
        return self.config.solver_and_options

    # ------------------------------------------------------------ the records
    @property
    def records(self) -> Records:
        """What is persisted on the current branch, in memory."""
        return self.state.records

    @property
    def summaries(self) -> dict[str, SummaryEntry]:
        """The memories, by id."""
        return self.state.records.summaries

    @property
    def chunks(self) -> list[ChunkRecord]:
        """The chunk records, oldest first."""
        return self.state.records.chunks

    @property
    def pins(self) -> list[Pin]:
        """The pins, in the order they were made."""
        return self.state.records.pins

    @property
    def locks(self) -> set[str]:
        """Locked message ids."""
        return self.state.records.locks

    @property
    def resolutions(self) -> list[tuple[str, str, int]]:
        """The last committed frontier: runs ``(first id, last id, level)`` of messages
        shown at a level above 0, oldest first."""
        return self.state.records.runs

    @property
    def accepted_receipt(self) -> FoldReceipt | None:
        """The last request the provider accepted on the current branch, as its host
        reported it (``ContextManager.accept_round``): None before the first. Unlike
        :attr:`resolutions` (what the last live compile committed, sent or not), this
        is what the provider's prompt cache holds."""
        records = self.state.records
        if records.store is None:
            return None
        return last_receipt(records.store, records.slot)

    @property
    def accepted_resolutions(self) -> list[tuple[str, str, int]] | None:
        """The folds of :attr:`accepted_receipt` in the form of :attr:`resolutions`: runs
        ``(first id, last id, level)`` of the memories the accepted request showed,
        oldest first (None before the first acceptance)."""
        receipt = self.accepted_receipt
        return None if receipt is None else receipt.runs()

    @property
    def chunk_attempts(self) -> dict[str, int]:
        """Chunk id -> unacceptable answers so far."""
        return self.state.records.chunk_attempts

    @property
    def failed_closed(self) -> bool:
        """Compression stopped: most chunk records name no live message."""
        return self.state.failed_closed

    @property
    def calls(self) -> int:
        """Summariser calls made by this strategy."""
        return self.state.calls

    # ------------------------------------------------------------------ hooks
    def initialize(self, ctx: StrategyContext) -> None:
        state = State(self.config, read_records(ctx.store, ctx.slot))
        state.carry_over(self.state)
        self.state = state
        if ctx.audit_only:  # loaded as stored: nothing adopted, followed or written
            return
        adopt_memories(self.state, ctx)
        reconcile(self.state, ctx)

    def on_new_message(self, ctx: StrategyContext, message: StoredMessage) -> None:
        rebuild_chunks(self.state, ctx)

    def shard_plan(
        self, counter: TokenCounter, participant: str, content: Sequence[ContentBlock]
    ) -> list[str] | None:
        """Shards of about ``target_chunk_tokens`` for a text-only message of more than
        twice that many tokens (``shard_large_messages``, under ``adaptive_resolution``
        as in the reference); None for any other.

        Examples
        --------
        >>> from context_manager import CharsCounter, TextBlock
        >>> s = AutobiographicalStrategy(compression_model="extractive", target_chunk_tokens=5)
        >>> s.shard_plan(CharsCounter(), "User", [TextBlock(text="word " * 12)])
        ['word word word word ', 'word word word word ', 'word word word word ']
        """
        config = self.config
        if not (config.shard_large_messages and config.adaptive_resolution):
            return None
        text = shardable_text(content)
        if text is None or counter.count_text(text) <= 2 * config.target_chunk_tokens:
            return None
        parts = split_text(text, counter, config.target_chunk_tokens)
        return parts if len(parts) >= 2 else None

    def on_messages_removed(self, ctx: StrategyContext, ids: Sequence[str]) -> None:
        """Memories over the removed messages are dropped; their chunks keep the other
        messages and are remembered again (:meth:`~.records.Records.forget`)."""
        self.state.records.forget(ids)
        self.state.demanded_chunks.clear()
        self.state.demanded_merges.clear()

    def on_presented(self, ctx: StrategyContext, messages: Sequence[StoredMessage]) -> None:
        """Rows entered the agent's window: chunks close over what the agent was shown,
        in the order shown (each row heard through :meth:`on_new_message`)."""
        for message in messages:
            self.on_new_message(ctx, message)

    def on_retracted(self, ctx: StrategyContext, ids: Sequence[str]) -> None:
        """Rows left the agent's window (an undone turn, a removal, rows another
        manager removed): as for a removal, memories over them are dropped and their
        chunks keep the other rows, to be remembered again. A row presented again later
        enters at the end of the window, under no memory, so it is shown once."""
        self.on_messages_removed(ctx, ids)

    def on_holds_released(self, ctx: StrategyContext) -> None:
        rebuild_chunks(self.state, ctx)

    def is_ready(self, ctx: StrategyContext) -> bool:
        return not pending_work(self.state, ctx)

    def pending_work(self, ctx: StrategyContext) -> list[str]:
        return pending_work(self.state, ctx)

    def tick(self, ctx: StrategyContext) -> bool:
        """One unit of work: compress the oldest queued chunk, else one merge."""
        return tick(self.state, ctx)

    def select(
        self, ctx: StrategyContext, budget: RequestBudget, *, dry_run: bool = False
    ) -> Selection:
        return select(self.state, ctx, budget, self._solver, dry_run=dry_run)

    # ------------------------------------------------------------------ views
    def windows(self, ctx: StrategyContext, stored: Sequence[StoredMessage]) -> Windows:
        """Head end and tail start (indices) for the current messages."""
        return windows(self.state, ctx, stored)

    def rebuild_chunks(self, ctx: StrategyContext) -> None:
        """Close new chunks over middle messages no record owns."""
        rebuild_chunks(self.state, ctx)

    def queued_chunks(self, ctx: StrategyContext) -> list[ChunkRecord]:
        """Closed, uncompressed chunks ready for compression (holdback applied)."""
        return queued_chunks(self.state, ctx)

    def merge_groups(self, ctx: StrategyContext) -> list[list[str]]:
        """Groups of contiguous parentless siblings ready to merge, oldest first."""
        return merge_groups(self.state, ctx)

    def snapshot(
        self, ctx: StrategyContext, stored: Sequence[StoredMessage], budget: RequestBudget
    ) -> Snapshot:
        """The state of a compile in plain message terms, for the adapter."""
        return snapshot(self.state, ctx, stored, budget)

    def recall_header(self, summary: SummaryEntry) -> str:
        """The question of ``summary``'s recall pair in a compiled context."""
        return self.state.recall_header(summary)

    def recall_pair(self, summary: SummaryEntry) -> tuple[Entry, Entry]:
        """The question and answer that show ``summary`` in a context."""
        return self.state.recall_pair(summary)

    def recall_tokens(self, ctx: StrategyContext, summary: SummaryEntry) -> int:
        """The price of ``summary``'s recall pair."""
        return self.state.recall_tokens(ctx, summary)

    def leaves_of(self, summary: SummaryEntry) -> list[str]:
        """Message ids a summary covers."""
        return self.state.leaves_of(summary)

    def frontier_summaries(self) -> list[SummaryEntry]:
        """Summaries with no parent."""
        return self.state.frontier_summaries()

    def retry_given_up(self, ctx: StrategyContext) -> int:
        """Try again every chunk and merge given up on (after ``chunk_attempt_limit`` /
        ``merge_attempt_limit`` answers that were not memory, or refused in every
        variant), and drop every backoff; returns how many had a count. Persisted."""
        self.state.backoff.clear()
        return self.state.records.clear_verdicts()

    # ------------------------------------------------------------ pins, locks
    def pin_range(
        self,
        ctx: StrategyContext,
        first: str,
        last: str,
        *,
        name: str | None = None,
        level: int | None = None,
        max_level: int | None = None,
        kind: str = "range",
    ) -> str:
        """Protect ``first..last``: raw, at exactly ``level``, or no deeper than ``max_level``.

        Raises
        ------
        UnknownMessageError
            When ``first`` or ``last`` names no live message (a ``KeyError``).
        ArgumentError
            For a level that is not an int in ``[0, MAX_LEVEL]``, or a ``max_level``
            below ``level`` (nothing is stored).
        ConfigError
            When ``first`` comes after ``last``.
        """
        check_pin_levels(level, max_level)
        index = self.state.positions(ctx, ctx.messages())
        for param, x in (("first_id", first), ("last_id", last)):
            if x not in index:
                raise UnknownMessageError(
                    f"no message with id {x!r} in the window", param=param, ids=(x,)
                )
        if index[first] > index[last]:
            raise ConfigError(f"pin range {first!r}..{last!r} is reversed")
        pin = self.state.records.add_pin(
            first, last, name=name, level=level, max_level=max_level, kind=kind
        )
        rebuild_chunks(self.state, ctx)
        return pin.id

    def unpin(self, ctx: StrategyContext, pin_id: str) -> bool:
        """Remove a pin; False when it does not exist."""
        return self.state.records.remove_pin(pin_id)

    def reset_head_window(self, ctx: StrategyContext, message_id: str) -> None:
        """The raw head now starts at the transition summary ``message_id``
        (:meth:`~context_manager.ContextManager.reset_head_window`): the head window
        is found from the messages (it starts at the latest topic transition), so the
        messages before it are middle again and are remembered like the rest of it."""
        rebuild_chunks(self.state, ctx)

    def lock(self, ctx: StrategyContext, message_id: str, locked: bool = True) -> None:
        """Keep (or stop keeping) a message at its current resolution."""
        self.state.records.set_lock(message_id, locked)

    # ---------------------------------------------------------------- queries
    def summaries_in_range(
        self,
        ctx: StrategyContext,
        from_time: float | None = None,
        to_time: float | None = None,
        level: int | None = None,
    ) -> list[SummaryEntry]:
        """Summaries whose span (timestamps of its first and last message) meets the range."""
        return summaries_in_range(self.state, ctx, from_time, to_time, level)

    def search_summaries(
        self,
        text: str | None = None,
        *,
        regex: str | None = None,
        levels: Sequence[int] | None = None,
        limit: int = 50,
        include_merged: bool = False,
    ) -> list[tuple[SummaryEntry, int]]:
        """Summaries with their match counts, most matches first (then newest); see
        :func:`~.queries.search_summaries`."""
        return search_summaries(
            self.state, text, regex=regex, levels=levels, limit=limit, include_merged=include_merged
        )
