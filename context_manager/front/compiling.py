"""Compiling a request: the budget, the catch-up, the full-disk path, previews,
notes of what a streamed request carried and the render stats."""

from __future__ import annotations

import math
import warnings
from collections.abc import Iterable, Mapping, Sequence
from typing import TYPE_CHECKING, Any

from ..arguments import (
    HOLD_ACCEPTED,
    MAX_WINDOW_TOKENS,
    check_flag,
    check_int,
    check_items,
    check_mapping,
    check_seconds,
)
from ..compiler import MAX_CATCH_UP_RECHECKS as MAX_CATCH_UP_RECHECKS
from ..compiler import MAX_CATCH_UP_TICKS as MAX_CATCH_UP_TICKS
from ..compiler import (
    ThinkingArgs,
    catch_up,
    plain_copy,
)
from ..errors import (
    ArgumentError,
    ArgumentTypeError,
    AuditOnlyError,
    ConfigError,
    OverBudgetError,
    StoreFullWarning,
)
from ..operations import operation
from ..reads import preview_of
from ..request import (
    INJECTION_ACCEPTED,
    CompileResult,
    Injection,
    Overhead,
    Preview,
)
from ..store import StoreFullError
from ..strategies.base import RequestBudget
from ..strategies.default import DEFAULT_WINDOW
from ..thinking import (
    NotedRow,
    RequestIdentity,
    ThinkingBinding,
)
from . import receipts

if TYPE_CHECKING:
    from ..manager import ContextManager

__all__ = ["CompileFront"]


DEFAULT_RESERVE = 4_000
"""The most a compile keeps for the answer by default (a quarter of a smaller window)."""


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


class CompileFront:
    """The methods of :class:`~context_manager.ContextManager` for one job (see the
    module docstring); mixed into the manager, never used alone."""

    # ------------------------------------------------------------------ compile
    def compile(
        self: ContextManager,
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
        if self._gate.audit_only:
            raise AuditOnlyError("compile")
        budget = self._budget(max_tokens, reserve_for_response)
        try:
            if limit is None or dry_run:
                return self._compile_op(budget, wanted, overhead, dry_run, thinking)
            return self._catch_up(budget, wanted, overhead, limit, thinking)
        except StoreFullError as full:
            if dry_run:
                raise
            return self._unstored(full, budget, wanted, overhead, thinking)
        finally:
            if self._ticker is not None and not dry_run:
                self._ticker.wake(compiled=True)  # a compile may have asked for memories

    @operation()
    def _unstored(
        self: ContextManager,
        full: StoreFullError,
        budget: RequestBudget,
        injections: Sequence[Injection],
        overhead: Overhead | None,
        thinking: ThinkingArgs | None,
    ) -> CompileResult:
        """The request of a compile whose bookkeeping the full store could not keep: the
        same compile, storing nothing (a dry run on the state as stored), marked in its
        render stats and with a :class:`StoreFullWarning`; ``full`` again when even that
        needs what could not be stored (memories to fit)."""
        self._resync()  # what the failed write changed in memory goes back to the store's
        result = self._compile(budget, injections, overhead, True, thinking)
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
        self: ContextManager,
        budget: RequestBudget,
        injections: Sequence[Injection],
        overhead: Overhead | None,
        dry_run: bool,
        thinking: ThinkingArgs | None = None,
    ) -> CompileResult:
        """One compile attempt, as one operation."""
        return self._compile(budget, injections, overhead, dry_run, thinking)

    def _budget(self: ContextManager, max_tokens: int | None, reserve: int | None) -> RequestBudget:
        """The budget of a compile, the one object every later step reads: the window
        and reserve as given (checked), else what the
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
        return RequestBudget(max_tokens, reserve)

    def _catch_up(
        self: ContextManager,
        budget: RequestBudget,
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
            lambda: self._compile_op(budget, wanted, overhead, False, thinking),
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
        self: ContextManager,
        budget: RequestBudget,
        injections: Sequence[Injection],
        overhead: Overhead | None,
        dry_run: bool,
        thinking: ThinkingArgs | None = None,
        *,
        expire_holds: bool = True,
    ) -> CompileResult:
        self._check_open()
        if budget.input_tokens <= 0:
            raise ConfigError(
                f"max_tokens={budget.max_tokens} leaves no input after "
                f"reserve_for_response={budget.reserve_for_response}"
            )
        if expire_holds:
            self._expire_holds()
        if overhead is None:
            overhead = Overhead(system=self._system_prompt, tools=tuple(self._tools or ()))
        result = self._compiler.run(budget, injections, overhead, dry_run, thinking)
        if not dry_run:
            self._render_stats = plain_copy(result.render_stats)  # the caller's is theirs
            receipts.compiled(self, result)  # the compile accept_round takes
        return result

    @operation(writes=True)
    def note_request_sent(
        self: ContextManager,
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
        self: ContextManager,
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
        ``{"recent_window_tokens": 2000}`` or another ``solver``), over the
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
        budget = self._budget(max_tokens, reserve_for_response)
        own = self._strategy
        if overrides:
            self._strategy = self._caps.require_reconfigurable().with_options(**overrides)
        try:
            result = self._compile(budget, wanted, overhead, True, thinking, expire_holds=False)
        except OverBudgetError as exc:
            refused: dict[str, Any] = {"diagnostics": dict(exc.diagnostics)}
            return Preview(False, exc.budget, exc.actual, 0, (), exc.stage, refused, None)
        finally:
            self._strategy = own  # the overrides were for this preview only
        stats: dict[str, Any] = dict(result.render_stats)
        if stats.get("fits") is False:
            tokens = stats.get("tokens")
            stage = "solver" if "solver" in stats else "select"
            return Preview(False, budget.input_tokens, tokens, 0, (), stage, stats, None)
        position = {s.id: k for k, s in enumerate(self._presented.view())}
        return preview_of(result, budget.input_tokens, position, self.get_summary)

    @operation()
    def get_render_stats(self: ContextManager) -> dict[str, Any] | None:
        """Composition of the last live (not dry-run) compile: a copy of its
        :attr:`CompileResult.render_stats`.

        None until a live compile has run since the strategy loaded its branch (opening
        the store, :meth:`set_strategy` and a branch switch each load it); a dry compile
        and :meth:`preview_context` leave it as it was, while each compile's result
        carries its own.

        The dict is shaped as :class:`~context_manager.render_stats.RenderStats` says
        (a typed model of every key below; ``typing.cast`` to it for checked access).
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
