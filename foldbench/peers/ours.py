"""This library's own policies, behind the same :class:`~.base.Policy` interface.

* :class:`FoldingPolicy`: a :class:`~context_manager.ContextManager` with the
  autobiographical strategy and one registered solver.
* :class:`AssemblePolicy`: the stateless :func:`~context_manager.assembly.assemble`,
  run as its host must run it: the summary and tail boundary of each compaction are
  kept, and the next calls send only the tail with that summary as
  ``previous_summary``.

Both are driven by the summariser they are given (the deterministic
:class:`~context_manager.summarizer.ExtractiveSummarizer` in the benchmark)
through a :class:`~.base.MeteredSummarizer`, and audited by the exact counter.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from typing import Any

from pydantic import BaseModel

from context_manager.assembly.convert import from_wire, to_wire, wire_expansion
from context_manager.messages import (
    MAX_CACHE_BREAKPOINTS,
    Message,
    ToolResultBlock,
    ToolUseBlock,
)
from context_manager.summarizer import ExtractiveSummarizer, Summarizer
from context_manager.tokens import TokenCounter

from .base import (
    HistoryFeed,
    MeteredSummarizer,
    PolicyRequest,
    audit,
    default_counter,
    request_tokens,
    run_guarded,
    split_system,
    system_text,
)
from .settings import OURS, PeerSettings, Setting

__all__ = ["AssemblePolicy", "FoldingPolicy", "from_wire", "to_wire"]

_OPTION_REASONS = {
    "compression_model": "the deterministic extractive summariser every policy here is given",
    "summary_participant": "the agent's own participant: it writes its memories",
    "target_chunk_tokens": "about a twelfth of the budget (at least 200) per chunk",
    "summary_target_tokens": "about a sixtieth of the budget (at least 40) per memory",
    "recent_window_tokens": "a quarter of the budget kept verbatim",
    "recall_budget_tokens": "half the budget (at least 1000) for what recall brings back",
    "merge_from": "a merge reads the memories it merges, not their messages again",
    "solver": "the solver the policy's name gives",
    "solver_options": "the solver's options sized to the budget, its comfort band topped "
    "at the strategy's headroom (1 - compression_slack_ratio)",
    "fold_window": "set by the name's +full suffix: the whole history on every call",
    "l1_holdback_chunks": "none held back, as AutobiographicalConfig.for_window sizes it: "
    "the recent window keeps the newest history raw, and a chunk without its memory only "
    "stops a fold short of it",
    "compression_source_only": "each memory from its chunk alone: an extractive memory "
    "is the same with or without the context before it, which every request would read "
    "again (the name's +with-context suffix sends it)",
}
"""Why :meth:`FoldingPolicy.config_for` and the name's suffixes set each strategy option."""


def _tool_definitions(names: set[str]) -> list[dict[str, Any]]:
    return [
        {"name": n, "description": f"The agent's {n} tool.", "input_schema": {"type": "object"}}
        for n in sorted(names)
    ]


def _leaves(key: str, value: Any) -> list[tuple[str, Any]]:
    """``value`` as ``(dotted key, value)`` leaves: a mapping by its keys, a pydantic
    model (a solver's policy) or a dataclass by its fields, anything else as it is.

    >>> from dataclasses import dataclass
    >>> @dataclass
    ... class P:
    ...     scale: float = 1.0
    >>> _leaves("solver_options", {"policy": P(), "depth": 2})
    [('solver_options.policy.scale', 1.0), ('solver_options.depth', 2)]
    """
    if isinstance(value, dict):
        return [leaf for k, v in value.items() for leaf in _leaves(f"{key}.{k}", v)]
    if isinstance(value, BaseModel):
        return [
            leaf
            for name in type(value).model_fields
            for leaf in _leaves(f"{key}.{name}", getattr(value, name))
        ]
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return [
            leaf
            for f in dataclasses.fields(value)
            for leaf in _leaves(f"{key}.{f.name}", getattr(value, f.name))
        ]
    return [(key, value)]


class FoldingPolicy:
    """The context manager with the autobiographical strategy and one solver.

    Parameters
    ----------
    method : str
        A registered solver name (``kv-unified`` runs with its ``reference`` policy).
    agent : str
        The agent's participant name.
    counter : TokenCounter, optional
        The exact counter (``cl100k_base`` by default), used by the manager too.
    summarizer : Summarizer, optional
        Writes the memories; an :class:`ExtractiveSummarizer` by default.
    ticks_per_call : int or None, default 1
        Units of compression work (:meth:`~context_manager.ContextManager.tick`) before
        each compile, as the library advises a host to run: one per model call, so work
        can stay queued between calls. The queue (``pending_work()``) is written at once
        only when the request would not just extend the last one (a dry run refolds or
        does not fit: the front changes once, with every memory the solver wants, not once
        per memory), or when the compile fitted only by capping tool results and asked
        for the memories that would spare them. A compile that still needs memories
        catches up (``compile(catch_up=True)``) instead of being refused. None: drain the
        whole queue before each compile (at most 500 ticks), so no work is ever queued.
    loop : {"benchmark", "readme"}
        ``"benchmark"`` runs the host as ``ticks_per_call`` says; ``"readme"`` runs the
        README's agent loop exactly: one ``tick()`` per model call and a plain
        ``compile()`` (which catches up by default), so a refusal
        (:class:`~context_manager.OverBudgetError`) is the request's error.
    **options
        Strategy options overriding the budget-scaled defaults of :meth:`config_for`.
    """

    def __init__(
        self,
        method: str,
        *,
        agent: str = "Claude",
        counter: TokenCounter | None = None,
        summarizer: Summarizer | None = None,
        ticks_per_call: int | None = 1,
        loop: str = "benchmark",
        **options: Any,
    ) -> None:
        if loop not in ("benchmark", "readme"):
            raise ValueError(f"loop must be 'benchmark' or 'readme', got {loop!r}")
        self.loop = loop
        if ticks_per_call is not None and (
            isinstance(ticks_per_call, bool)
            or not isinstance(ticks_per_call, int)
            or ticks_per_call < 0
        ):
            raise ValueError(
                f"ticks_per_call must be a non-negative int or None, got {ticks_per_call!r}"
            )
        self.ticks_per_call = ticks_per_call
        self.method = method
        self.name = f"ours:{method}"
        self.agent = agent
        self.counter = default_counter(counter)
        self.meter = MeteredSummarizer(summarizer or ExtractiveSummarizer(), self.counter)
        self.options = options
        self._feed = HistoryFeed()
        self._cm: Any = None
        self._tools: set[str] = set()
        self._sent: list[Message] = []  # the history messages of the last request

    @staticmethod
    def config_for(budget: int, method: str, *, slack: float | None = None) -> dict[str, Any]:
        """Strategy options scaled to a budget: chunks of ~1/12 of it, memories of ~1/60,
        a recent window of a quarter, merges written from the memories they merge (an L2
        from its L1s, not from their messages a second time), each L1 from its chunk
        alone (``compression_source_only``) and as soon as the chunk closes (no
        holdback); ``kv-unified`` runs its
        ``cache-first`` preset with its token scales set to the budget and the top of its
        comfort band at the strategy's headroom (``1 - compression_slack_ratio``), the
        level every other solver folds down to.

        Parameters
        ----------
        budget : int
        method : str
        slack : float, optional
            The strategy's ``compression_slack_ratio`` (its default when None).
        """
        options: dict[str, Any] = {
            "compression_model": "extractive",
            "summary_participant": "Claude",
            "target_chunk_tokens": max(200, budget // 12),
            "summary_target_tokens": max(40, budget // 60),
            "recent_window_tokens": budget // 4,
            "recall_budget_tokens": max(1000, budget // 2),
            # a merge reads the memories it merges, not the messages again
            "merge_from": "memories",
            # a memory is written from its chunk alone: what the head and recall before it
            # would change in an extractive memory is nothing, and they are read each time
            "compression_source_only": True,
            # the recent window keeps the newest history raw: a held-back chunk would only
            # stop a fold short of it (AutobiographicalConfig.for_window sizes it so too)
            "l1_holdback_chunks": 0,
            "solver": method,
        }
        import solvers
        from context_manager.strategies.autobiographical import AutobiographicalConfig

        if slack is None:
            slack = AutobiographicalConfig.model_fields["compression_slack_ratio"].default
        sized = solvers.window_options(method, budget, 1.0 - slack)
        if sized:
            options["solver_options"] = sized
        return options

    def _open(self, budget: int) -> Any:
        from context_manager.manager import ContextManager
        from context_manager.strategies.autobiographical import AutobiographicalStrategy

        if self._cm is not None:
            self._cm.close()
        slack = self.options.get("compression_slack_ratio")
        config = {**self.config_for(budget, self.method, slack=slack), **self.options}
        config["summary_participant"] = self.agent
        self._tools = set()
        return ContextManager.open(
            path=":memory:",
            strategy=AutobiographicalStrategy(**config),
            summarizer=self.meter,
            counter=self.counter,
        )

    def request(self, history: Sequence[Message], budget: int) -> PolicyRequest:
        """Append what is new, let the strategy write its memories, compile.

        The strategy's chunk and window sizes are set from the first call's budget
        (a running agent configures them once); later calls may move the budget.
        Any failure is recorded as the request's error, as for the peers.
        """
        request, error = run_guarded(lambda: self._request(history, budget))
        if request is None:
            return audit([], budget, self.counter, self.meter, error=error)
        return request

    def _request(self, history: Sequence[Message], budget: int) -> PolicyRequest:
        from context_manager.errors import OverBudgetError
        from context_manager.manager import Overhead

        new, restart = self._feed.new_messages(history)
        if restart or self._cm is None:
            self._cm = self._open(budget)
            self._sent = []
        cm = self._cm
        system, _ = split_system(history)
        for m in new:
            if m.participant != "System" or len(cm.get_messages()) > 0:
                cm.add_message(
                    m.participant, m.content, metadata=dict(m.metadata), timestamp=m.timestamp
                )
        cm.set_system_prompt(system_text(system) or None)
        names = {b.name for m in new for b in m.content if isinstance(b, ToolUseBlock)}
        if not names <= self._tools:
            self._tools |= names
            cm.set_tool_definitions(_tool_definitions(self._tools))  # every tool seen so far
        # the request carries the system messages as they are: priced as the audit counts
        overhead = Overhead(tokens=request_tokens(system, self.counter))
        if self.loop == "readme":
            cm.tick()  # the README's one tick per turn
            compiled = cm.compile(max_tokens=budget, reserve_for_response=0, overhead=overhead)
        elif self.ticks_per_call is None:
            cm.drain(max_ticks=500)
            while True:
                try:
                    compiled = cm.compile(
                        max_tokens=budget, reserve_for_response=0, overhead=overhead
                    )
                    break
                except OverBudgetError:
                    # what a host does on a refusal: let the strategy write the memories
                    # the solver asked for, then compile again; give up when none comes
                    if cm.drain(max_ticks=500) == 0:
                        raise
        else:
            for _ in range(self.ticks_per_call):
                if not cm.tick():
                    break
            if cm.pending_work() and self._refolds(cm, budget, overhead):
                # the front of the context changes anyway: write the queued memories (and
                # the merges they make ready) first, so it changes once, to where the
                # solver wants it, not once per memory
                cm.drain(max_ticks=500)
            # a compile that needs memories not written yet writes them first
            compiled = cm.compile(
                max_tokens=budget, reserve_for_response=0, overhead=overhead, catch_up=True
            )
            if compiled.render_stats.get("capped_results") and cm.pending_work():
                # it fitted only by capping tool results, and asked for the memories that
                # would spare them: write those, and compile again
                cm.drain(max_ticks=500)
                compiled = cm.compile(
                    max_tokens=budget, reserve_for_response=0, overhead=overhead, catch_up=True
                )
        self._sent = list(compiled.messages)
        # the system prompt ends a stable prefix too; a provider allows four breakpoints
        marks = [len(system) - 1] if system else []
        marks += [len(system) + i for i in compiled.cache_breakpoints]
        request = [*system, *compiled.messages]
        marks = marks[-MAX_CACHE_BREAKPOINTS:]
        return audit(request, budget, self.counter, self.meter, breakpoints=marks)

    def _refolds(self, cm: Any, budget: int, overhead: Any) -> bool:
        """Whether the next request would not extend the last one (a dry run): it refolds,
        or it does not fit without memories still queued."""
        probe = cm.compile(
            max_tokens=budget, reserve_for_response=0, overhead=overhead, dry_run=True
        )
        if not probe.messages:
            return True  # a preview of a refusal
        sent = self._sent
        return len(probe.messages) < len(sent) or probe.messages[: len(sent)] != sent

    def close(self) -> None:
        """Close the in-memory manager."""
        if self._cm is not None:
            self._cm.close()
            self._cm = None

    def settings(self, budget: int, *, system_tokens: int = 0) -> PeerSettings:
        """The strategy options this policy opens its manager with at ``budget``, and why.

        Parameters
        ----------
        budget : int
            The first call's input budget (the options are set from it).
        system_tokens : int
            The system prompt's tokens (not read: the compile prices it as overhead).

        Returns
        -------
        PeerSettings
            :meth:`config_for` at ``budget`` with the options the policy was built with,
            and ``ticks_per_call``.

        Examples
        --------
        >>> FoldingPolicy("kv-stable").settings(6000).values["target_chunk_tokens"]
        500
        """
        slack = self.options.get("compression_slack_ratio")
        config = {**self.config_for(budget, self.method, slack=slack), **self.options}
        config["summary_participant"] = self.agent
        items: dict[str, Setting] = {}
        for key, value in config.items():
            reason = _OPTION_REASONS.get(key, "an option the policy was built with")
            for leaf, v in _leaves(key, value):
                items[leaf] = Setting(v, reason)
        items["ticks_per_call"] = Setting(
            self.ticks_per_call,
            "one unit of compression work per model call, as the library advises a host"
            if self.ticks_per_call == 1
            else "compression work per model call (None: drained before each compile)",
        )
        if self.loop != "benchmark":
            items["loop"] = Setting(
                self.loop, "the README's agent loop: one tick() per call, a plain compile()"
            )
        return PeerSettings.of(self.name, OURS, OURS, items)


# ------------------------------------------------------------------ assemble


def _tail_boundary(
    messages: Sequence[Message], owners: Sequence[int], wire_start: int | None
) -> int:
    """The first of ``messages`` to keep when ``assemble`` kept its wire messages from
    ``wire_start`` on (None: it kept none).

    ``owners[w]`` is the message wire message ``w`` came from. A boundary inside a
    message's expansion moves back to the message's start, and back again to the
    message holding the call of any result the kept messages would hold without it.

    Examples
    --------
    >>> from context_manager.messages import Message, TextBlock, ToolResultBlock, ToolUseBlock
    >>> call = Message(participant="Claude", content=(ToolUseBlock(id="t", name="ls", input={}),))
    >>> answer = Message(
    ...     participant="User",
    ...     content=(ToolResultBlock(tool_use_id="t", content="a"), TextBlock(text="next")),
    ... )
    >>> ask = Message.text_message("User", "go")
    >>> wire, owners = wire_expansion([ask, call, answer], agent="Claude")
    >>> [w["role"] for w in wire], owners
    (['user', 'assistant', 'function_result', 'user'], [0, 1, 2, 2])
    >>> _tail_boundary([ask, call, answer], owners, 3)  # the text after the result
    1
    """
    if wire_start is None or wire_start >= len(owners):
        return len(messages)
    return _keep_pairs(messages, owners[wire_start])


def _keep_pairs(messages: Sequence[Message], start: int) -> int:
    """``start``, moved back until no result in ``messages[start:]`` answers a call
    before it."""
    last_call: dict[str, int] = {}
    pairs: list[tuple[int, int]] = []  # (message of a call, message of its result)
    for i, m in enumerate(messages):
        for b in m.content:
            if isinstance(b, ToolResultBlock) and b.tool_use_id in last_call:
                pairs.append((last_call[b.tool_use_id], i))
            elif isinstance(b, ToolUseBlock):
                last_call[b.id] = i
    while True:
        back = [c for c, r in pairs if c < start <= r]
        if not back:
            return start
        start = min(back)


def _turn_start(messages: Sequence[Message], start: int, floor: int, agent: str) -> int:
    """Where the turn holding ``messages[start]`` starts: the last message before it (not
    before ``floor``) that :func:`to_wire` turns into a plain ``user`` message, moved back
    to its calls' messages if it holds results; ``floor`` when there is none."""
    for j in range(start - 1, floor - 1, -1):
        m = messages[j]
        if m.participant != agent and (
            not m.content or any(not isinstance(b, ToolResultBlock) for b in m.content)
        ):
            return _keep_pairs(messages, j)
    return floor


class AssemblePolicy:
    """``assemble`` (cap, prune, then summarise the head into the system prompt), with
    the compaction round trip its host keeps.

    ``assemble`` is stateless: handed the whole transcript each call, it would summarise
    the whole head again on every call once the history is over budget. The policy keeps
    what its reference tells a host to keep, per transcript:

    1. When a call's ``applied.compacted`` is true, it keeps ``applied.summary`` and the
       tail boundary: ``applied.tail_start_index`` (an index into the wire messages it
       sent) mapped back to a message of the transcript.
    2. The next calls send only the transcript from that boundary on (with everything
       appended since), and ``options.previous_summary`` set to the kept summary. The
       system prompt ``assemble`` returns then carries the summary under its heading
       (``render_system_prompt``), and the next compaction updates that summary (it is
       the anchor) from the messages past the boundary, instead of starting over; its
       ``tail_start_index`` indexes the messages of that shorter request, so the new
       boundary is the old one plus the mapped index.
    3. A restart (a shorter or different transcript, as :class:`~.base.HistoryFeed`
       tells) drops the summary and the boundary.

    Mapping the boundary back: :func:`to_wire` turns each tool result into a
    ``function_result`` wire message of its own, so one message may be several wire
    messages. ``assemble``'s tail starts at a safe cut (an ``assistant`` or plain
    ``user`` wire message), which may still be the text after a message's tool results.
    The boundary is then moved back to the start of that message, and further back to
    the message holding any call whose result the kept history would hold without it,
    so a call is never kept apart from its results. The messages moved over were
    summarised and are also kept verbatim: nothing is lost, at the price of a little
    repetition.

    ``assemble`` keeps a tail that may start inside a turn (at an agent message), and it
    can compact only a request with a turn start (a plain ``user`` message) in it. When
    the kept history has none and would not fit (an ``assemble`` with ``preview_only``
    says, without a summariser call), the call sends the history from the start of
    that turn instead, so the turn's older part can be summarised into the anchor again
    rather than the newest results reduced to references or the call refused.

    The model is given inline limits whose usable input budget is exactly the
    call's budget. ``assemble`` is given the audit's counter (its ``counter``), so the
    budget it keeps holds by the count the audit makes; by its byte heuristic, requests
    it keeps within budget can exceed it by the exact count.

    Parameters
    ----------
    agent : str
        The agent's participant name.
    counter : TokenCounter, optional
        The exact counter of the audit.
    summarizer : Summarizer, optional
        Writes the summaries; an :class:`ExtractiveSummarizer` by default.

    Attributes
    ----------
    summary : str or None
        The summary of the last compaction, sent as ``previous_summary``.
    tail_start : int
        The index in the transcript (leading system messages included) of the first
        message the next call sends; 0 before any compaction.
    """

    name = "assemble"

    def __init__(
        self,
        *,
        agent: str = "Claude",
        counter: TokenCounter | None = None,
        summarizer: Summarizer | None = None,
    ) -> None:
        self.agent = agent
        self.counter = default_counter(counter)
        self.meter = MeteredSummarizer(summarizer or ExtractiveSummarizer(), self.counter)
        self.summary: str | None = None
        self.tail_start = 0
        self._feed = HistoryFeed()

    def request(self, history: Sequence[Message], budget: int) -> PolicyRequest:
        """Assemble the transcript from the kept boundary on, with the kept summary, for a
        model whose usable input is ``budget``; keep the summary and boundary of a
        compaction."""
        from context_manager.assembly import AssembleResponse, AssemblyError, assemble

        if self._feed.new_messages(history)[1]:
            self.summary, self.tail_start = None, 0
        system, _ = split_system(history)
        floor = len(system)
        start = max(self.tail_start, floor)
        wire, owners = wire_expansion(history[start:], agent=self.agent)
        options: dict[str, Any] = {"reserved_tokens": 0}
        if self.summary is not None:
            options["previous_summary"] = self.summary
        request: dict[str, Any] = {
            "model": {
                "id": "bench",
                "limits": {
                    "context_window": budget + 1024,
                    "max_output_tokens": 1024,
                    "input_limit": budget,
                },
            },
            "system_prompt": system_text(system),
        }

        def call(wire: list[dict[str, Any]], **extra: Any) -> AssembleResponse:
            body = {**request, "messages": wire, "options": {**options, **extra}}
            return assemble(body, summarizer=self.meter, clock=lambda: 0, counter=self.counter)

        try:
            if start > floor and not any(w["role"] == "user" for w in wire):
                preview = call(wire, preview_only=True)
                if preview.token_count > preview.usable:
                    # no turn starts in the kept history, so it cannot be compacted:
                    # send it from the start of its turn
                    start = _turn_start(history, start, floor, self.agent)
                    wire, owners = wire_expansion(history[start:], agent=self.agent)
            out = call(wire)
        except AssemblyError as exc:
            return audit([], budget, self.counter, self.meter, error=f"AssemblyError: {exc}")
        if out.applied.compacted and out.applied.summary is not None:
            self.summary = out.applied.summary
            self.tail_start = start + _tail_boundary(
                history[start:], owners, out.applied.tail_start_index
            )
        head = [Message.text_message("System", out.system_prompt)] if out.system_prompt else []
        messages = [*head, *from_wire(out.messages, agent=self.agent)]
        return audit(messages, budget, self.counter, self.meter)

    def settings(self, budget: int, *, system_tokens: int = 0) -> PeerSettings:
        """The limits :meth:`request` gives ``assemble`` at ``budget``, and why.

        Parameters
        ----------
        budget : int
            The call's input budget.
        system_tokens : int
            The system prompt's tokens (not read: ``assemble`` counts it in).

        Returns
        -------
        PeerSettings

        Examples
        --------
        >>> AssemblePolicy().settings(4000).values["input_limit"]
        4000
        """
        items = {
            "input_limit": Setting(budget, "the usable input: exactly the call's budget"),
            "context_window": Setting(budget + 1024, "the input limit and the output room"),
            "max_output_tokens": Setting(1024, "output room beside the input limit"),
            "reserved_tokens": Setting(0, "nothing reserved beyond the input limit"),
            "summarizer": Setting("extractive, metered", "the summariser every policy is given"),
            "counter": Setting(self.counter.name, "the audit's counter: the budget holds by it"),
        }
        return PeerSettings.of(self.name, OURS, OURS, items)
