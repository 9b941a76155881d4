"""Background work: ticks, draining and retries, the head reset, the request's frame
(system prompt and tool definitions) and compression holds."""

from __future__ import annotations

import json
import warnings
from collections.abc import Callable, Iterable, Sequence
from typing import TYPE_CHECKING, Any

from ..arguments import (
    check_ids,
    check_int,
    check_seconds,
    check_text,
    check_tools,
)
from ..compiler import MAX_CATCH_UP_RECHECKS as MAX_CATCH_UP_RECHECKS
from ..compiler import MAX_CATCH_UP_TICKS as MAX_CATCH_UP_TICKS
from ..deadline import CallerBusyError, DeadlineError
from ..errors import (
    ConfigError,
    ContextManagerError,
    NoSummarizerWarning,
    SummarizerNotConfiguredError,
    SummarizerTimeoutError,
)
from ..messages import (
    Message,
)
from ..operations import operation
from ..request import HoldDetail
from ..strategies.autobiographical.prompts import clean as clean_answer
from ..strategies.base import (
    AnswerNeeded,
    Answers,
    StrategyContext,
)
from ..summarizer import (
    MEMORY_MARKER_PARTICIPANT,
    TOPIC_TRANSITION,
    Completion,
    CompletionRequest,
)

if TYPE_CHECKING:
    from ..manager import ContextManager

__all__ = ["MaintenanceFront"]


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


class MaintenanceFront:
    """The methods of :class:`~context_manager.ContextManager` for one job (see the
    module docstring); mixed into the manager, never used alone."""

    # ------------------------------------------------------------- maintenance
    def tick(self: ContextManager) -> bool:
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
    def _tick_pass(
        self: ContextManager, answers: Answers | None
    ) -> tuple[bool, AnswerNeeded | None]:
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

    def reset_head_window(self: ContextManager, transition_text: str | None = None) -> str:
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

    def _head_mover(self: ContextManager) -> Callable[[StrategyContext, str], None] | None:
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
    def _start_head_window(self: ContextManager, text: str) -> str:
        move = self._head_mover()
        message_id = self.add_message(MEMORY_MARKER_PARTICIPANT, f"{TOPIC_TRANSITION} {text}")
        if self._presented.presenting:  # the summary is this agent's own: it is shown at once
            self.present_rows([message_id])
        if move is not None:
            move(self._ctx, message_id)
        return text

    @operation()
    def _transition_request(self: ContextManager) -> CompletionRequest:
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

    def _transition_timeout(self: ContextManager) -> float:
        timeout = self._caps.profile.summary_timeout_seconds
        return float(timeout) if timeout else TRANSITION_TIMEOUT_SECONDS

    def _ask_transition(self: ContextManager, request: CompletionRequest) -> str:
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

    def drain(self: ContextManager, max_ticks: int = 10_000) -> int:
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
    def retry_compression(self: ContextManager) -> int:
        """Try again the compression work the strategy gave up on (answers that were
        not memory up to its attempt limits, refusals in every variant) and work
        backing off after provider errors; returns how many pieces had a count (0 for
        a strategy that never gives up)."""
        gives_up = self._caps.gives_up
        return 0 if gives_up is None else int(gives_up.retry_given_up(self._ctx))

    @operation()
    def is_ready(self: ContextManager) -> bool:
        """True when the strategy has no queued work."""
        return self._strategy.is_ready(self._ctx)

    def wait_for_ticks(self: ContextManager, timeout: float | None = None) -> bool:
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
    def pending_work(self: ContextManager) -> list[str]:
        """The compression work queued, one line per unit: the chunks to compress,
        oldest first (``compress <chunk>``), then the merges (``merge
        <memory>+<memory>...``); empty when ready or for a strategy that never
        compresses. :meth:`tick` takes the first chunk, unless a waiting merge would
        free more context (the autobiographical strategy's order)."""
        return list(self._strategy.pending_work(self._ctx))

    @property
    def _system_prompt(self: ContextManager) -> str | None:
        """The stored system prompt of this namespace and branch."""
        text = self._frame().get("system")
        return text if isinstance(text, str) else None

    @property
    def _tools(self: ContextManager) -> list[dict[str, Any]] | None:
        """The stored tool definitions of this namespace and branch."""
        tools = self._frame().get("tools")
        return tools if isinstance(tools, list) else None

    def _frame(self: ContextManager) -> dict[str, Any]:
        frame = self._store.get(self._frame_slot)
        return frame if isinstance(frame, dict) else {}

    def _set_frame(self: ContextManager, key: str, value: Any) -> None:
        """Store one part of the frame; a value equal to the stored one writes nothing."""
        frame = self._frame()
        if frame.get(key) == value:
            return
        self._store.set(self._frame_slot, {**frame, key: value})

    @operation(writes=True)
    def set_tool_definitions(self: ContextManager, tools: Sequence[dict[str, Any]] | None) -> None:
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
        >>> from context_manager import CharsCounter, ContextManager
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
    def set_system_prompt(self: ContextManager, text: str | None) -> None:
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
        >>> from context_manager import CharsCounter, ContextManager
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
    def hold_compression(
        self: ContextManager, ids: Iterable[str], *, timeout: float | None = None
    ) -> None:
        """Keep these messages (and everything after the earliest) out of compression.

        While the hold lasts they are sent raw, even inside a pin with a fold
        ``level`` or on a locked message: the pin and the lock give way there (logged
        once) and hold again once the hold is released or times out.

        A shard of a body stored in parts (the id :meth:`add_message` returned for it)
        holds the whole body, every shard.

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
        now = self._clock()
        for i in self._whole_bodies(wanted):
            if i in known:
                self._holds[i] = deadline
                self._held_at.setdefault(i, now)

    @operation(writes=True)
    def release_compression(self: ContextManager, ids: Iterable[str]) -> None:
        """Release holds (idempotent). A shard of a body stored in parts (the id
        :meth:`add_message` returned for it) releases the whole body.

        Raises
        ------
        ArgumentTypeError
            For ``ids`` that are not a sequence of message ids.
        """
        released = False
        wanted = check_ids(ids)
        for i in self._whole_bodies(wanted):
            if i in self._holds:
                del self._holds[i]
                self._held_at.pop(i, None)
                released = True
        if released:
            self._strategy.on_holds_released(self._ctx)

    @operation()
    def compression_holds(self: ContextManager) -> set[str]:
        """Ids currently held."""
        self._expire_holds()
        return set(self._holds)

    @operation()
    def compression_hold_details(self: ContextManager) -> list[HoldDetail]:
        """The holds in force, oldest first: each message held, when it was first held
        and when the hold ends, on the manager's clock (``clock=`` of
        :meth:`~context_manager.ContextManager.open`, :func:`time.monotonic` by default).

        Returns
        -------
        list of HoldDetail

        Examples
        --------
        >>> from context_manager import CharsCounter, ContextManager
        >>> now = [100.0]
        >>> with ContextManager.open(
        ...     path=":memory:", counter=CharsCounter(), clock=lambda: now[0]
        ... ) as cm:
        ...     first = cm.add_message("User", "wait for the build", hold=30)
        ...     [(d.message_id == first, d.held_at, d.expires_at)
        ...      for d in cm.compression_hold_details()]
        [(True, 100.0, 130.0)]
        """
        self._expire_holds()
        found = [HoldDetail(i, self._held_at[i], deadline) for i, deadline in self._holds.items()]
        return sorted(found, key=lambda d: d.held_at)

    def _expire_holds(self: ContextManager) -> None:
        now = self._clock()
        expired = [i for i, d in self._holds.items() if d is not None and d <= now]
        if expired:
            self.release_compression(expired)

    def _is_held(self: ContextManager, message_id: str) -> bool:
        return message_id in self._holds

    def _held_ids(self: ContextManager) -> set[str]:
        return set(self._holds)
