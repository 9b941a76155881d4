"""A stateful machine over every public operation of the manager, checking the request edge.

The invariant, for every sequence of operations: a compile either returns a
request that

* fits the input budget, by an independent recount of exactly what is sent
  (the messages, the system prompt with the system injections, the tools);
* reports that recount as ``render_stats["tokens"]``, and as ``kv_cost`` the
  tokens from its first difference with the previous live request;
* keeps every tool call with its results;
* shows every stored message of the agent's window raw or under a shown memory
  (or, for a result whose call is gone and a call not answered yet, sends nothing
  of it): the record until the host presents rows, then the rows it presented and
  did not take out, in the order presented, whatever another manager on the store
  removed (the window the machine keeps, branch by branch, is the one the manager
  reads);
* is the same bytes when compiled again with nothing changed (for the solvers that
  settle: ``solvers.capabilities(name).settles``; a greedy baseline's next request
  is checked like any other);
* with a thinking binding, carries a reply's thinking exactly when the request up to
  and including the reply repeats the last request the branch sent (as the machine
  kept it: what the last binding compile sent, then the rows the host noted), under
  the same identity, and the store keeps every reply's thinking whatever is sent;

or refuses with an ``OverBudgetError`` whose ``actual`` exceeds its ``budget``,
or a ``ConstraintConflictError`` naming the stored messages and constraints.

And nothing is lost and nothing stalls: every chunk record and memory names a
contiguous run of the window's live messages whatever was removed or retracted
(memory heads, whole chunks, an undone turn, rows another manager removed, anything),
reopening and branching included; and once the summariser is healthy again (after
errors, exceptions, empty, huge or refused answers, or calls that hang past their
deadline), retrying what was given up and draining remembers every chunk no hold
keeps back. Drain then fit: with no hold, the drained memories fold as deep as those
of a store that never lost a message (removals, retractions and released holds
included), and the floor a refusal reports is met by a compile at that budget.

``tests/context_manager/manager/test_request_edge.py`` runs it derandomised with a fixed
example count; ``make soak`` runs it long (``tests/soak.py``) and prints the counts.
"""

from __future__ import annotations

import json
import shutil
import tempfile
import threading
from collections import Counter
from pathlib import Path
from typing import Any

import pytest
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, precondition, rule

import solvers
from context_manager import (
    CharsCounter,
    ConstraintConflictError,
    ContextManager,
    ExtractiveSummarizer,
    ImageBlock,
    Injection,
    Message,
    NotedRow,
    OverBudgetError,
    Overhead,
    PassthroughStrategy,
    RequestIdentity,
    TextBlock,
    ThinkingBinding,
    ThinkingBlock,
    ToolResultBlock,
    ToolUseBlock,
    UnknownCompileError,
    UnsupportedSettingError,
    tool_pair_problems,
)
from context_manager.bodies import BodyShardError
from context_manager.compiler import MAX_CATCH_UP_BATCH
from context_manager.images import image_bytes
from context_manager.strategies.autobiographical import AutobiographicalStrategy
from context_manager.summarizer import Completion, CompletionRequest

COUNTER = CharsCounter()
BINDING = ThinkingBinding()
SOLVERS = [m for m in solvers.names() if not solvers.capabilities(m).oracle]
FLOOR_STEPS = 6
"""Refusals a drained store may give, each at the floor the last one named, before a
compile fits."""
TALLY: Counter[str] = Counter()
"""Outcomes over every run of the machine in this process (read by the soak)."""


IMAGE_LIMITS = {
    "max_live_images": 2,
    "image_strip_depth_tokens": 2_000,
    "max_live_image_bytes": 90,
    "max_message_tokens": 100,
}
"""Image limits small enough for the machine's images to meet each of them, and a cap on
the longest messages the machine adds."""


def machine_strategy(
    method: str, head: int = 0, tail: int | None = None
) -> AutobiographicalStrategy | PassthroughStrategy:
    """The strategy the machine runs for ``method`` (a solver, ``threshold-pyramid`` or
    ``passthrough``), with a raw head window of ``head`` tokens and the tail a host
    tuned live (``tail``; a host configures it again when it reopens)."""
    if method == "passthrough":
        return PassthroughStrategy(**IMAGE_LIMITS)
    options: dict[str, Any] = {
        "compression_model": "extractive",
        "target_chunk_tokens": 60,
        "recent_window_tokens": 120,
        "merge_threshold": 3,
        "summary_target_tokens": 30,
        "l1_holdback_chunks": 0,
        "min_chunk_chars_for_llm": 0,
        # a hung call is abandoned at this deadline; a working one always answers well
        # within it (a timed-out working call would make the machine's runs diverge)
        "summary_timeout_seconds": 1.0,
        "head_window_tokens": head,
        **IMAGE_LIMITS,
    }
    if tail is not None:
        options["recent_window_tokens"] = tail
    if method == "threshold-pyramid":  # the renderer of adaptive_resolution=False
        options["adaptive_resolution"] = False
    else:
        options["solver"] = method
        options["solver_options"] = dict(solvers.capabilities(method).example_options)
    return AutobiographicalStrategy(**options)


def recount(result: Any, extra: int) -> int:
    """Tokens of what a compile sends, counted from the result alone: the system part
    (prompt, then system injections) as one message, the tools as compact JSON."""
    system = ([TextBlock(text=result.system_prompt)] if result.system_prompt else []) + list(
        result.system_injections
    )
    total = extra + sum(COUNTER.count_message(m) for m in result.messages)
    if system:
        total += COUNTER.count_message(Message(participant="System", content=system))
    if result.tools:
        tools = json.dumps(result.tools, separators=(",", ":"), ensure_ascii=False)
        total += COUNTER.count_text(tools)
    return total


COMPILE_ARGS = {
    "budget": st.one_of(st.integers(60, 800), st.integers(800, 6000)),
    "reserve": st.integers(0, 200),
    "injections": st.lists(
        st.tuples(st.sampled_from(["system", "before_user", "after_user"]), st.integers(1, 80)),
        max_size=3,
    ),
    "explicit": st.one_of(st.none(), st.integers(0, 300)),
    "dry_run": st.booleans(),
    "bound": st.sampled_from([None, None, "model-a", "model-a", "model-b"]),
    "catch_up": st.booleans(),  # the default ticks before a refusal; False refuses at once
}


def _has_thinking(message: Message) -> bool:
    return any(isinstance(b, ThinkingBlock) for b in message.content)


def _sent_key(messages: list[Message]) -> list[tuple[str, tuple[Any, ...]]]:
    """What is sent of each message (participant and content)."""
    return [(m.participant, m.content) for m in messages]


FAULTS = [None, "error", "raise", "empty", "huge", "refuse", "truncate", "hang"]


class FaultySummarizer:
    """The extractive summariser behind a switchable fault (one of :data:`FAULTS`); a
    ``"hang"`` call blocks until the fault is cleared."""

    def __init__(self) -> None:
        self.inner = ExtractiveSummarizer(target_tokens=30)
        self.fault: str | None = None
        self.release = threading.Event()

    def set(self, fault: str | None) -> None:
        if self.fault == "hang" and fault != "hang":
            self.release.set()
            self.release = threading.Event()
        self.fault = fault

    def complete(self, request: CompletionRequest) -> Completion:
        fault, release = self.fault, self.release
        if fault == "error":
            return Completion(text="", stop_reason="error")
        if fault == "raise":
            raise ConnectionError("provider unreachable")
        if fault == "empty":
            return Completion(text="  ", stop_reason="end_turn")
        if fault == "refuse":
            return Completion(text="No.", stop_reason="refusal")
        if fault == "truncate":
            return Completion(text="I remember th", stop_reason="max_tokens")
        if fault == "hang":
            release.wait()
        answer = self.inner.complete(request)
        if fault == "huge":
            return answer.model_copy(update={"text": answer.text + " and more" * 300})
        return answer


class Clock:
    """The manager's clock, moved only by the machine."""

    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


class RequestMachine(RuleBasedStateMachine):
    """Random histories and host operations, every compile checked by a recount."""

    def __init__(self) -> None:
        super().__init__()
        self.dir = Path(tempfile.mkdtemp())
        self.path = self.dir / "cm.db"
        self.n = 0
        self.branches = ["main"]
        self.method = "kv-stable"
        self.head = 0
        """The raw head window's tokens (moved by :meth:`reset_head`)."""
        self.cm: ContextManager | None = None
        self.last: tuple[Any, list[Message]] | None = None
        self.tools: list[dict[str, Any]] | None = [{"name": "bash"}]
        """The agent's tools, given at the first open (the store keeps them after)."""
        self.summarizer = FaultySummarizer()
        self.clock = Clock()
        self.sent: dict[str, tuple[RequestIdentity, list[Message]]] = {}
        """Per branch, the last request it sent with a binding: identity and messages
        (the compiled ones, then the rows noted)."""
        self.built: dict[str, tuple[str, list[Message], set[str]]] = {}
        """Per branch, the last binding compile: its id, messages and the live ids then."""
        self.thinking: set[str] = set()
        """Replies stored with their thinking (and not edited since)."""
        self.windows: dict[str, list[str] | None] = {}
        """Per branch, the agent's window as the machine keeps it: None while it is the
        record, then the rows presented and not taken out, in order (rows another
        manager removed included, until the host takes them out)."""
        self.tail: int | None = None
        """The tail the host set live (hot settings live in the process: the host
        configures its strategy with it when it opens the store again)."""
        self.history: dict[str, list[tuple[int, dict[str, Any]]]] = {}
        """Per branch, what the machine kept of it (the thinking record, the window) after
        each change, with the store sequence then: what a branch cut there starts with."""
        self.bodies: dict[str, tuple[str, ...]] = {}
        """Every shard of a body stored in parts -> the ids of its body's shards, in order."""

    @initialize(
        method=st.sampled_from([*SOLVERS, "passthrough"]),
        past=st.integers(0, 80),
        tools_every=st.integers(2, 5),
        folded=st.booleans(),
        head=st.sampled_from([0, 0, 60]),
    )
    def open(self, method: str, past: int, tools_every: int, folded: bool, head: int) -> None:
        """A manager, and the history an agent of some age brings (memories written
        for it or not), with a raw head window or none."""
        self.method = method
        self.head = head
        self._open(first=True)
        for i in range(past):
            if i % tools_every:
                self.add_turns(2, 20)
            else:
                self.add_tool_turn(30, 1 + i % 2, 1 + i % 2)
        if folded:
            self.manager.drain()

    @property
    def settles(self) -> bool:
        """The strategy sends the same request when compiled again with nothing changed."""
        return self.method == "passthrough" or solvers.capabilities(self.method).settles

    def _open(self, *, first: bool = False) -> None:
        """Open the manager on the store; the first time, give it the agent's tools (the
        store keeps them, with the system prompt, for every later open)."""
        self.strategy = machine_strategy(self.method, self.head, self.tail)
        self.cm = ContextManager.open(
            path=self.path,
            strategy=self.strategy,
            summarizer=self.summarizer,
            counter=COUNTER,
            clock=self.clock,
        )
        if first and self.tools:
            self.cm.set_tool_definitions(self.tools)
        self.last = None
        self.accept_id: str | None = None
        """The compile id of the machine's last live compile (accepted by the provider
        when a rule says so)."""

    def teardown(self) -> None:
        self.summarizer.set(None)
        if self.cm is not None:
            self.cm.close()
        shutil.rmtree(self.dir, ignore_errors=True)

    @property
    def manager(self) -> ContextManager:
        assert self.cm is not None
        return self.cm

    def ids(self) -> list[str]:
        return [m.id for m in self.manager.get_messages()]

    def window_ids(self) -> list[str]:
        """The rows of the agent's window, in window order."""
        return [m.id for m in self.manager.get_window_messages()]

    def _kept(self) -> None:
        """Note what the machine keeps of the current branch, as of the store's sequence."""
        branch = self.manager.current_branch
        window = self.windows.get(branch)
        state = {
            "sent": self.sent.get(branch),
            "built": self.built.get(branch),
            "window": None if window is None else list(window),
        }
        self.history.setdefault(branch, []).append((self.manager.current_sequence(), state))

    def mark(self) -> str:
        self.n += 1
        return f"k{self.n}"

    # ---------------------------------------------------------------- history
    def _add(self, participant: str, content: Any) -> str:
        """The agent stores a message; once the host presents, it presents the agent's
        own rows as they are stored."""
        row = self.manager.add_message(participant, content)
        if self.manager.presenting:
            self._present([row])
        return row

    @rule(size=st.integers(1, 60), participant=st.sampled_from(["User", "Claude"]))
    def add_text(self, size: int, participant: str) -> None:
        k = self.mark()
        self._add(participant, " ".join(f"{k}w{i}" for i in range(size)))

    @rule(size=st.integers(30, 160))
    def add_body(self, size: int) -> None:
        """A long text (a pasted document): over twice a chunk, it is stored in parts, the
        returned id first; a host presenting it presents every part."""
        k = self.mark()
        before = set(self.ids())
        row = self.manager.add_message("User", " ".join(f"{k}b{i}" for i in range(size)))
        parts = tuple(i for i in self.ids() if i not in before)
        assert parts[0] == row
        if len(parts) > 1:
            self.bodies.update(dict.fromkeys(parts, parts))
            TALLY["bodies"] += 1
        if self.manager.presenting:
            self._present([row])

    def _body(self, row: str) -> tuple[str, ...]:
        """The shards of the body ``row`` is a shard of (``row`` alone for another)."""
        return self.bodies.get(row, (row,))

    def _inside(self, row: str, end: int) -> bool:
        """Whether ``row`` is a shard other than its body's first (``end=0``) or last
        (``end=-1``): where a removal may not start (end) alone."""
        return self._body(row)[end] != row

    @rule(count=st.integers(2, 8), size=st.integers(5, 40))
    def add_turns(self, count: int, size: int) -> None:
        """A stretch of conversation, as an agent lives between two compiles."""
        for j in range(count):
            k = self.mark()
            who = "User" if j % 2 == 0 else "Claude"
            self._add(who, " ".join(f"{k}w{i}" for i in range(size)))

    @rule(size=st.integers(1, 80), calls=st.integers(1, 3), answered=st.integers(0, 3))
    def add_tool_turn(self, size: int, calls: int, answered: int) -> None:
        """A call message with ``calls`` parallel calls and a result message answering
        ``answered`` of them (none: the next message is not an answer)."""
        k = self.mark()
        uses = [ToolUseBlock(id=f"{k}t{j}", name="bash", input={"n": k}) for j in range(calls)]
        self._add("Claude", uses)
        if answered:
            body = " ".join(f"{k}o{i}" for i in range(size))
            results = [
                ToolResultBlock(tool_use_id=f"{k}t{j}", content=body)
                for j in range(min(calls, answered))
            ]
            self._add("User", results)

    @rule(size=st.integers(1, 40), call=st.booleans())
    def add_thinking_reply(self, size: int, call: bool) -> None:
        """A reply of the model with signed thinking, then text, or a call answered by
        the next message."""
        self._thinking_reply(size, call)

    def _thinking_reply(self, size: int, call: bool) -> None:
        k = self.mark()
        thought = ThinkingBlock(thinking=f"{k} thinks " + "t " * size, signature=f"sig-{k}")
        if call:
            use = ToolUseBlock(id=f"{k}t", name="bash", input={"n": k})
            self.thinking.add(self._add("Claude", [thought, use]))
            self._add("User", [ToolResultBlock(tool_use_id=f"{k}t", content=k)])
        else:
            text = TextBlock(text=" ".join(f"{k}w{i}" for i in range(size)))
            self.thinking.add(self._add("Claude", [thought, text]))

    @rule(sizes=st.lists(st.integers(1, 12), min_size=1, max_size=2), in_result=st.booleans())
    def add_image(self, sizes: list[int], in_result: bool) -> None:
        """A user message with images (of ``3 * size`` bytes each), or a tool's result
        that holds them, followed by the agent's reply."""
        k = self.mark()
        pictures = [ImageBlock(media_type="image/png", data="AAAA" * size) for size in sizes]
        if in_result:
            self._add("Claude", [ToolUseBlock(id=f"{k}t", name="screenshot", input={"n": k})])
            marked = [TextBlock(text=f"{k}o0"), *pictures]
            self._add("User", [ToolResultBlock(tool_use_id=f"{k}t", content=marked)])
        else:
            self._add("User", [TextBlock(text=f"{k}w0 look"), *pictures])
        reply = self.mark()
        self._add("Claude", f"{reply}w0 seen")

    @precondition(lambda self: self.cm is not None and self.accept_id is not None)
    @rule()
    def accept(self) -> None:
        """The provider accepted the last request: its receipt is stored once, and is the
        newest listed, until the next compile."""
        assert self.accept_id is not None
        try:
            receipt = self.manager.accept_round(self.accept_id, usage={"input_tokens": 10})
        except UnknownCompileError:
            TALLY["stale_accepts"] += 1  # a later compile, a branch switch or a reopen
            return
        assert receipt.compile_id == self.accept_id
        assert self.manager.list_fold_receipts()[-1] == receipt
        assert self.manager.accept_round(self.accept_id) == receipt  # once only
        TALLY["accepted"] += 1

    @rule(tail=st.sampled_from([0, 60, 120, 400]))
    def hot_tail(self, tail: int) -> None:
        """The host changes the tail live; the passthrough strategy has none to change."""
        if self.method == "passthrough":
            with pytest.raises(UnsupportedSettingError):
                self.manager.update_hot_context_settings(tail_tokens=tail)
            return
        self.manager.update_hot_context_settings(tail_tokens=tail)
        self.tail = tail
        settings = self.manager.get_hot_context_settings()
        assert settings is not None and settings.tail_tokens == tail

    @rule()
    def add_orphan_result(self) -> None:
        k = self.mark()
        self._add("User", [ToolResultBlock(tool_use_id=f"{k}gone", content=k)])

    @precondition(lambda self: bool(self.manager.get_messages()))
    @rule(data=st.data(), size=st.integers(1, 40))
    def edit(self, data: st.DataObject, size: int) -> None:
        target = data.draw(st.sampled_from(self.ids()))
        self.thinking.discard(target)
        k = self.mark()
        if target in self.bodies:  # a shard is never edited
            with pytest.raises(BodyShardError):
                self.manager.edit_message(target, f"{k}e0")
            return
        self.manager.edit_message(target, " ".join(f"{k}e{i}" for i in range(size)))

    @precondition(lambda self: bool(self.manager.get_messages()))
    @rule(data=st.data())
    def remove(self, data: st.DataObject) -> None:
        target = data.draw(st.sampled_from(self.ids()))
        if self._inside(target, 0):  # a body goes whole, through its first shard
            with pytest.raises(BodyShardError):
                self.manager.remove_message(target)
            return
        self.manager.remove_message(target)
        self._taken_out(list(self._body(target)))  # a removal takes the rows out of the window

    @precondition(lambda self: bool(self.manager.get_messages()))
    @rule(data=st.data())
    def remove_range(self, data: st.DataObject) -> None:
        """Remove a run of messages: exactly those go."""
        ids = self.ids()
        first = data.draw(st.integers(0, len(ids) - 1))
        last = data.draw(st.integers(first, min(len(ids) - 1, first + 12)))
        if self._inside(ids[first], 0) or self._inside(ids[last], -1):  # it cuts a body
            with pytest.raises(BodyShardError):
                self.manager.remove_messages(ids[first], ids[last])
            assert self.ids() == ids
            return
        assert self.manager.remove_messages(ids[first], ids[last]) == ids[first : last + 1]
        assert self.ids() == ids[:first] + ids[last + 1 :]
        self._taken_out(ids[first : last + 1])

    @precondition(lambda self: bool(self.memories()))
    @rule(data=st.data())
    def remove_memory_head(self, data: st.DataObject) -> None:
        """Remove the first message of a memory."""
        memory = data.draw(st.sampled_from(self.memories()))
        head = self.strategy.leaves_of(memory)[0]
        if self._inside(head, 0):
            head = self._body(head)[0]  # a body goes whole, through its first shard
        self.manager.remove_message(head)
        self._taken_out(list(self._body(head)))

    @precondition(lambda self: self.cm is not None and bool(self.chunk_records()))
    @rule(data=st.data(), share=st.sampled_from([1.0, 0.75]))
    def remove_chunk(self, data: st.DataObject, share: float) -> None:
        """Remove a whole chunk, or most of it."""
        ids = data.draw(st.sampled_from(self.chunk_records()))
        for i in ids[: max(1, round(len(ids) * share))]:
            first = self._body(i)[0]  # a body goes whole, through its first shard
            if first in self.ids():
                self.manager.remove_message(first)
                self._taken_out(list(self._body(i)))

    def memories(self) -> list[Any]:
        if self.cm is None or not isinstance(self.strategy, AutobiographicalStrategy):
            return []
        return sorted(self.strategy.summaries.values(), key=lambda m: m.id)

    def chunk_records(self) -> list[list[str]]:
        if not isinstance(self.strategy, AutobiographicalStrategy):
            return []
        return [list(c.source_ids) for c in self.strategy.chunks]

    # ---------------------------------------------------------- the summariser
    @rule(fault=st.sampled_from(FAULTS))
    def summariser_fault(self, fault: str | None) -> None:
        self.summarizer.set(fault)
        self._settle()

    def _settle(self) -> None:
        """Wait for released hung calls to return, so how many are still running never
        depends on thread timing (runs must replay exactly)."""
        if isinstance(self.strategy, AutobiographicalStrategy) and self.summarizer.fault != "hang":
            while self.strategy.state.caller.abandoned:
                self.summarizer.release.wait(0.001)

    @rule(seconds=st.sampled_from([1.0, 60.0, 7200.0]))
    def time_passes(self, seconds: float) -> None:
        self.clock.now += seconds

    @precondition(lambda self: self.cm is not None and self.method != "passthrough")
    @rule()
    def heal_and_drain(self) -> None:
        """The summariser works again: retrying what was given up and draining remembers
        every chunk no hold keeps back, and the records still agree with the messages."""
        self.summarizer.set(None)
        self._settle()  # an abandoned call returns once released
        strategy = self.strategy
        assert isinstance(strategy, AutobiographicalStrategy)
        self.clock.now += 7200.0
        self.manager.retry_compression()
        self.manager.drain()
        assert not strategy.failed_closed
        held = self.manager.compression_holds()
        raw = [c.id for c in strategy.chunks if not c.compressed and held.isdisjoint(c.source_ids)]
        assert raw == [], f"compression stalled on {raw}"
        if not held:
            self._drained_then_fits(strategy)
        TALLY["healed"] += 1

    def _drained_then_fits(self, strategy: AutobiographicalStrategy) -> None:
        """Drain then fit: with no hold, a drained store's memories fold as deep as a
        store that never lost a message, whatever was removed. In each run of parentless
        memories next to each other (runs are parted by messages no chunk holds, such
        as the raw head and raw pins), oldest first, the level never rises, and each
        level has fewer than ``merge_threshold`` of them (at least one). And the floor a
        refusal reports is one a compile at that budget meets (after at most
        :data:`FLOOR_STEPS` refusals, each naming a higher floor: a refusal at a stage
        names that stage's floor), unless the pins conflict (no floor then)."""
        position = {m: i for i, m in enumerate(self.window_ids())}
        roots = sorted(
            (s for s in strategy.summaries.values() if s.parent_id is None),
            key=lambda s: position[s.first],
        )
        runs: list[list[int]] = []
        for i, s in enumerate(roots):
            if i == 0 or position[s.first] != position[roots[i - 1].last] + 1:
                runs.append([])
            runs[-1].append(s.level)
        most = max(strategy.config.merge_threshold - 1, 1)
        for levels in runs:
            assert levels == sorted(levels, reverse=True), f"memories left unmerged: {runs}"
            crowded = {k: n for k, n in Counter(levels).items() if n > most}
            assert not crowded, f"levels with {most}+ parentless memories in a run: {runs}"
        budget, asked = 1, []
        for _ in range(FLOOR_STEPS):  # each refusal names more of the floor, never less
            asked.append(budget)
            preview = self.manager.preview_context(max_tokens=budget, reserve_for_response=0)
            if preview.fits:
                TALLY["floors_met"] += 1
                return
            if preview.stats.get("diagnostics", {}).get("conflicts"):
                return  # pins that contradict each other: a ConstraintConflictError
            assert preview.tokens is not None and preview.tokens > budget, (preview, budget)
            budget = preview.tokens
        raise AssertionError(f"no floor met after compiling at {asked}")

    # ------------------------------------------------------------ constraints
    @precondition(
        lambda self: bool(self.manager.get_window_messages()) and self.method != "passthrough"
    )
    @rule(data=st.data(), kind=st.sampled_from(["raw", "level", "max_level"]))
    def pin(self, data: st.DataObject, kind: str) -> None:
        ids = self.window_ids()
        first = data.draw(st.integers(0, len(ids) - 1))
        last = data.draw(st.integers(first, min(len(ids) - 1, first + 8)))
        level = data.draw(st.integers(0, 3))
        options = {"raw": {}, "level": {"level": level}, "max_level": {"max_level": level}}
        self.manager.pin_range(ids[first], ids[last], **options[kind])  # type: ignore[arg-type]

    @precondition(lambda self: self.method != "passthrough" and bool(self.manager.list_pins()))
    @rule(data=st.data())
    def unpin(self, data: st.DataObject) -> None:
        pin = data.draw(st.sampled_from(self.manager.list_pins()))
        assert self.manager.unpin(pin.id)

    @precondition(lambda self: bool(self.manager.get_messages()) and self.method != "passthrough")
    @rule(data=st.data(), locked=st.booleans())
    def lock(self, data: st.DataObject, locked: bool) -> None:
        self.manager.lock_message(data.draw(st.sampled_from(self.ids())), locked)

    @precondition(lambda self: bool(self.manager.get_messages()))
    @rule(data=st.data(), release=st.booleans())
    def hold(self, data: st.DataObject, release: bool) -> None:
        target = data.draw(st.sampled_from(self.ids()))
        if release:
            self.manager.release_compression([target])
        else:
            self.manager.hold_compression([target])

    @rule(times=st.integers(1, 5))
    def tick(self, times: int) -> None:
        for _ in range(times):
            self.manager.tick()

    @rule()
    def reset_head(self) -> None:
        """A new topic: the transition summary is stored (and presented, once the host
        presents) and a raw head window moves to it."""
        self.manager.reset_head_window(f"Topic {self.mark()} is done; on to the next.")
        row = self.ids()[-1]
        branch = self.manager.current_branch
        window = self.windows.get(branch)
        if window is not None and row not in window:
            self.windows[branch] = [*window, row]
            self._kept()
        TALLY["head_resets"] += 1

    @rule()
    def drain(self) -> None:
        self.manager.drain()

    # --------------------------------------------------------------- overhead
    @rule(size=st.integers(0, 40))
    def system_prompt(self, size: int) -> None:
        text = " ".join(f"s{i}" for i in range(size)) or None
        self.manager.set_system_prompt(text)

    @rule(names=st.lists(st.sampled_from(["bash", "edit", "search"]), max_size=3, unique=True))
    def tool_definitions(self, names: list[str]) -> None:
        tools = [{"name": n, "input_schema": {"type": "object"}} for n in names]
        self.manager.set_tool_definitions(tools)

    # ---------------------------------------------------------------- compile
    def compile(
        self,
        budget: int,
        reserve: int,
        injections: list[tuple[str, int]],
        explicit: int | None,
        dry_run: bool,
        bound: str | None = None,
        catch_up: bool = False,
    ) -> None:
        notes = [
            Injection.text(f"n{j}", pos, " ".join(f"i{j}x{i}" for i in range(size)))
            for j, (pos, size) in enumerate(injections)
        ]
        overhead = None if explicit is None else Overhead(tokens=explicit)
        extra = explicit or 0
        kwargs: dict[str, Any] = {
            "max_tokens": budget + reserve,
            "reserve_for_response": reserve,
            "injections": notes,
            "overhead": overhead,
            "catch_up": catch_up,
        }
        if bound is not None:
            kwargs |= {"thinking_binding": BINDING, "identity": bound}
        if not dry_run:
            self._check_from_scratch(kwargs)
        TALLY["compiles"] += 1
        live = len(self.manager.get_messages())
        try:
            result = self.manager.compile(**kwargs, dry_run=dry_run)
        except OverBudgetError as exc:
            assert exc.actual > exc.budget == budget, (exc.actual, exc.budget)
            self._check_catch_up(exc.diagnostics.get("catch_up"), live)
            TALLY["over_budget"] += 1
            return
        except ConstraintConflictError as exc:
            self._check_conflict(exc)
            TALLY["conflicts"] += 1
            return
        if dry_run and result.render_stats.get("fits") is False:
            assert result.messages == []  # the preview of a refusal
            TALLY["dry_refusals"] += 1
            return
        self._check_catch_up(result.render_stats.get("catch_up"), live)
        sent = recount(result, extra)
        TALLY["sent"] += 1
        if result.render_stats.get("summaries"):
            TALLY["with_memories"] += 1
        assert sent <= budget, f"sent {sent} tokens against an input budget of {budget}"
        assert result.render_stats["tokens"] == sent
        assert result.render_stats["request"]["total"] == sent
        assert tool_pair_problems(result.messages) == []
        self._check_images(result.messages)
        self._check_coverage(result.messages)
        marks = result.cache_breakpoints
        assert marks == sorted(set(marks)) and len(marks) <= 4
        assert all(0 <= i < len(result.messages) for i in marks)
        if bound is not None:
            self._check_thinking(result, commit=not dry_run)
        if dry_run:
            return
        key = (result.system_prompt, tuple(result.system_injections), str(result.tools), extra)
        if self.last is not None:
            expected = sent
            if self.last[0] == key:
                old, new = self.last[1], result.messages
                d = 0
                while d < min(len(old), len(new)) and old[d] == new[d]:
                    d += 1
                expected = sum(COUNTER.count_message(m) for m in new[d:])
            assert result.render_stats["kv_cost"] == expected
        again = self.manager.compile(**kwargs)
        TALLY["compiles"] += 1
        TALLY["sent"] += 1
        if bound is not None:
            self._check_thinking(again, commit=True)
        if self.settles:  # nothing changed: the same bytes
            assert again.messages == result.messages
            assert again.render_stats["tokens"] == sent
            assert again.cache_breakpoints == marks
            assert again.render_stats["kv_cost"] == 0
        else:  # a greedy baseline may take one more step from its own plan: recount it
            resent = recount(again, extra)
            assert resent <= budget and again.render_stats["tokens"] == resent
            assert tool_pair_problems(again.messages) == []
            self._check_coverage(again.messages)
            d = 0
            while d < min(len(result.messages), len(again.messages)) and (
                result.messages[d] == again.messages[d]
            ):
                d += 1
            reread = sum(COUNTER.count_message(m) for m in again.messages[d:])
            assert again.render_stats["kv_cost"] == reread
        self.last = (key, again.messages)
        self.accept_id = again.compile_id

    # an agent compiles once per turn: three rules of the twenty keep compiles frequent
    compile_now = rule(**COMPILE_ARGS)(compile)
    compile_next = rule(**COMPILE_ARGS)(compile)
    compile_later = rule(**COMPILE_ARGS)(compile)

    def _check_thinking(self, result: Any, *, commit: bool) -> None:
        """A reply keeps its thinking exactly when the request so far and the reply
        repeat the branch's last sent request under the same identity (compared message
        by message here, not through the manager's record)."""
        sent = self.sent.get(self.manager.current_branch)
        out = result.messages

        def repeats(j: int, reply: Message) -> bool:
            return (
                sent is not None
                and sent[0] == result.identity
                and j < len(sent[1])
                and _sent_key(sent[1][: j + 1]) == _sent_key([*out[:j], reply])
            )

        for j, m in enumerate(out):
            if m.participant != "Claude":
                continue
            if _has_thinking(m):
                assert repeats(j, m), f"message {j} kept thinking off the sent chain"
                TALLY["thinking_kept"] += 1
                continue
            memory, ids = result.provenance[j]
            if memory is not None or len(ids) != 1:
                continue
            stored = self.manager.get_message(ids[0])
            bare = [b for b in stored.content if not isinstance(b, ThinkingBlock)]
            if _has_thinking(stored) and m.content == tuple(bare):  # sent without it
                assert not repeats(j, stored), f"message {j} lost thinking the chain carries"
                TALLY["thinking_stripped"] += 1
        if commit:
            branch = self.manager.current_branch
            assert result.identity is not None
            self.sent[branch] = (result.identity, list(out))
            self.built[branch] = (result.compile_id, list(out), set(self.ids()))
            self._kept()

    @rule(budget=st.integers(800, 6000), size=st.integers(1, 40), call=st.booleans())
    def host_round(self, budget: int, size: int, call: bool) -> None:
        """A host's round trip with a binding: compile and send, store the model's reply
        (and a call's result), note what the stream carried, compile the next request."""
        self.compile(budget, 100, [], None, False, "model-a")
        branch = self.manager.current_branch
        if branch not in self.built:
            return  # refused, and no request was ever built here
        before = set(self.ids())
        self._thinking_reply(size, call)
        rows = [i for i in self.ids() if i not in before]
        compile_id, compiled, _ = self.built[branch]
        identity = self.sent[branch][0]
        assert self.manager.note_request_sent(rows, identity, compile_id)
        self.sent[branch] = (identity, compiled + [self.manager.get_message(i) for i in rows])
        self._kept()
        TALLY["noted"] += 1
        self.compile(budget, 100, [], None, False, "model-a")

    @precondition(lambda self: self.cm is not None and self.manager.current_branch in self.built)
    @rule(data=st.data(), stale=st.booleans(), unstored=st.booleans())
    def note_sent(self, data: st.DataObject, stale: bool, unstored: bool) -> None:
        """The host notes what the request built from the branch's last binding compile
        carried after it: rows stored since (all, or the first few), maybe one it cannot
        vouch for; or it names a compile that is not the last."""
        branch = self.manager.current_branch
        compile_id, compiled, live = self.built[branch]
        identity = self.sent[branch][0]
        after = [i for i in self.ids() if i not in live]
        rows: list[Any] = after[: data.draw(st.integers(0, len(after)))]
        if unstored and rows:
            rows.insert(data.draw(st.integers(0, len(rows) - 1)), NotedRow(unstored=True))
        noted = self.manager.note_request_sent(rows, identity, "stale" if stale else compile_id)
        assert noted is not stale
        if noted:
            vouched: list[Message] = []
            for row in rows:
                if isinstance(row, NotedRow):
                    break
                vouched.append(self.manager.get_message(row))
            self.sent[branch] = (identity, compiled + vouched)
            self._kept()
            TALLY["noted"] += 1

    @invariant()
    def the_store_keeps_thinking(self) -> None:
        """Whatever a compile sent, every reply stored with thinking still has it."""
        if self.cm is None or not self.thinking:
            return
        for stored in self.manager.get_messages():
            if stored.id in self.thinking:
                assert _has_thinking(stored.message), stored.id

    def _check_from_scratch(self, kwargs: dict[str, Any]) -> None:
        """The compile the strategy makes from what it kept between calls is the one a
        strategy that just read the store makes: the same messages, tokens, stats."""
        if self.method == "passthrough":
            return
        cm = self.manager
        live = cm._strategy
        fresh = machine_strategy(self.method, self.head, self.tail)
        with cm._lock:
            fresh.initialize(cm._ctx)
            cm._strategy = fresh
            try:
                outcome = _outcome(lambda: cm.compile(**kwargs, dry_run=True))
            finally:
                cm._strategy = live
        kept = _outcome(lambda: cm.compile(**kwargs, dry_run=True))
        assert kept == outcome, (kept, outcome)
        TALLY["from_scratch"] += 1
        if kept[0] == "sent" and kept[3].get("blocks"):
            TALLY["windowed"] += 1

    @staticmethod
    def _check_catch_up(caught: dict[str, Any] | None, live: int) -> None:
        """A catch-up ends: no memory is written without end. Every chunk of ``live``
        messages and every merge above them is at most two memories per message, and
        a catch-up runs at most one batch past the state that fits."""
        if caught is None:
            return
        assert caught["ticks"] <= 2 * live + MAX_CATCH_UP_BATCH, (caught, live)

    def _check_conflict(self, exc: ConstraintConflictError) -> None:
        stored = set(self.ids())
        assert exc.conflicts, "a conflict refusal names its conflicts"
        for c in exc.conflicts:
            assert c["message"] in stored
            assert c["constraints"], c

    @staticmethod
    def _check_images(sent: list[Message]) -> None:
        """The images sent keep within the strategy's limits of count and bytes."""
        pictures = [
            c
            for m in sent
            for b in m.content
            for c in (b.content if isinstance(b, ToolResultBlock) else [b])
            if isinstance(c, ImageBlock)
        ]
        if pictures:
            TALLY["with_images"] += 1
        assert len(pictures) <= IMAGE_LIMITS["max_live_images"]
        assert sum(image_bytes(p) for p in pictures) <= IMAGE_LIMITS["max_live_image_bytes"]

    def _check_coverage(self, sent: list[Message]) -> None:
        """Every stored message is shown raw (its marker is sent), under a memory that is
        shown, or sends nothing by the pairing rule (checked here from the history)."""
        text = json.dumps([m.model_dump(mode="json") for m in sent])
        covered: set[str] = set()
        strategy = self.strategy
        if isinstance(strategy, AutobiographicalStrategy):
            shown = {m.text for m in sent}
            # a memory is shown as its prose, then the line of its exact values if any
            prose = {t.split("\nExact values: ", 1)[0] for t in shown}
            for s in strategy.summaries.values():
                if s.content in prose:
                    covered.update(strategy.leaves_of(s))
        if isinstance(strategy, PassthroughStrategy):
            return  # it sends the newest messages that fit, by design
        stored = self.manager.get_window_messages()
        if stored and isinstance(strategy, AutobiographicalStrategy):
            newest = stored[-1].message  # the turn the model answers is never folded
            if any(isinstance(b, TextBlock) and b.text for b in newest.content):
                assert _marker(newest) in text, (stored[-1].id, "the newest turn is not sent")
        for i, s in enumerate(stored):
            if s.id in covered or _marker(s.message) in text:
                continue
            prev = stored[i - 1].message if i else None
            asked = set(prev.tool_use_ids) if prev is not None else set()
            last = i == len(stored) - 1
            for b in s.message.content:  # only orphan results and unanswered calls may go
                if isinstance(b, ToolResultBlock):
                    assert b.tool_use_id not in asked, (s.id, "an answered result is missing")
                elif isinstance(b, ToolUseBlock):
                    assert last, (s.id, "a call that has an answer slot is missing")
                elif isinstance(b, ThinkingBlock):  # beside a call not answered yet
                    assert last, (s.id, "thinking before an answer slot is missing")
                else:
                    raise AssertionError(f"message {s.id} is neither shown nor summarised")

    # ---------------------------------------------------------------- windows
    def _window(self) -> list[str] | None:
        return self.windows.get(self.manager.current_branch)

    def _present(self, ids: list[str]) -> None:
        """Present ``ids``: exactly the rows the window did not hold enter, in order."""
        branch = self.manager.current_branch
        window = self.windows.get(branch)
        if window is None:  # the first presentation writes the record down
            window = self.ids()
        widened = [j for i in ids for j in self._body(i)]  # a shard presents its body
        new = [i for i in dict.fromkeys(widened) if i not in window]
        assert self.manager.present_rows(ids) == new
        self.windows[branch] = window + new
        self._kept()
        TALLY["presented"] += len(new)

    def _taken_out(self, ids: list[str]) -> None:
        branch = self.manager.current_branch
        window = self.windows.get(branch)
        if window is not None:
            gone = set(ids)
            self.windows[branch] = [i for i in window if i not in gone]
            self._kept()

    @rule(
        data=st.data(),
        how=st.sampled_from(["turn", "turn", "some", "redo", "boot"]),
    )
    def present(self, data: st.DataObject, how: str) -> None:
        """The host presents rows: at a turn start every row that arrived, in order; some
        of them in any order; rows it had retracted (a redo); or none (its boot)."""
        if how == "boot":
            ids: list[str] = []
        elif how == "redo":
            ids = [i for i in self.ids() if self.manager.window_status_of(i) == "undone"]
        else:
            ids = [m.id for m in self.manager.get_unpresented_messages()]
        if how in ("some", "redo") and ids:
            ids = data.draw(st.lists(st.sampled_from(ids), max_size=len(ids) + 1))
        self._present(ids)

    @precondition(lambda self: self.cm is not None and bool(self.manager.get_window_messages()))
    @rule(data=st.data(), undo=st.booleans())
    def retract(self, data: st.DataObject, undo: bool) -> None:
        """The host takes rows out of the window: the last turn (an undo), or any rows."""
        window = self.window_ids()
        if undo:
            ids = window[-data.draw(st.integers(1, min(4, len(window)))) :]
        else:
            ids = data.draw(st.lists(st.sampled_from(window), min_size=1, max_size=4))
        branch = self.manager.current_branch
        if self.windows.get(branch) is None:
            self.windows[branch] = self.ids()  # the retraction writes the window down
        out = self.manager.retract_rows(ids)
        assert out == list(dict.fromkeys(j for i in ids for j in self._body(i)))
        assert all(self.manager.window_status_of(i) == "undone" for i in out)
        self._taken_out(out)
        TALLY["retracted"] += len(out)

    @rule(
        data=st.data(),
        what=st.sampled_from(["writes", "removes", "removes"]),
        heard=st.sampled_from(["named", "boot pass"]),
        count=st.integers(1, 4),
    )
    def elsewhere(self, data: st.DataObject, what: str, heard: str, count: int) -> None:
        """Another manager on the store writes rows into the shared record (they wait
        for the host's next presentation), or removes rows of it (this window's, or
        not); the host takes removed rows out of this window by name (retract_removed)
        or by its boot pass (retract_absent_rows)."""
        ids = self.ids()
        if what == "removes" and not ids:
            return
        other = ContextManager.open(
            store=self.manager.store, namespace="elsewhere", counter=COUNTER
        )
        try:
            if what == "writes":
                for j in range(count):
                    k = self.mark()
                    other.add_message("Other", " ".join(f"{k}w{i}" for i in range(5 + 7 * j)))
            else:
                first = data.draw(st.integers(0, len(ids) - 1))
                gone = ids[first : first + count]
                # whole bodies: the range grows to the edges of those it starts or ends in
                a, b = ids.index(self._body(gone[0])[0]), ids.index(self._body(gone[-1])[-1])
                gone = ids[a : b + 1]
                other.remove_messages(gone[0], gone[-1])
        finally:
            other.close()
        self.last = None  # the manager reads the store again: its last request goes
        TALLY[f"elsewhere_{what}"] += 1
        if what == "writes":
            return
        for i in gone:
            self.thinking.discard(i)
            assert self.manager.window_status_of(i) == "absent"
        window = self._window()
        held = [] if window is None else [i for i in window if i in set(gone)]
        if heard == "named" or window is None:  # the window is the record: name them
            assert self.manager.retract_removed(gone) == [i for i in gone if i in held]
        else:
            assert self.manager.retract_absent_rows() == held
        self._taken_out(gone)

    @precondition(lambda self: self.cm is not None and bool(self.manager.get_messages()))
    @rule(data=st.data())
    def branch_at_row(self, data: st.DataObject) -> None:
        """Branch at a row and switch to it: the branch starts with the window as it
        stood at its branch point, which holds the row if this window does."""
        row = data.draw(st.sampled_from(self.ids()))
        held = self.manager.window_status_of(row) == "in"
        cut = self.manager.branch_sequence_of(self._body(row)[-1])  # never inside a body
        parent = self.manager.current_branch
        name = f"b{len(self.branches)}"
        assert self.manager.branch_at(row, name) == name
        then = [state for seq, state in self.history.get(parent, []) if seq <= cut]
        state = then[-1] if then else {"sent": None, "built": None, "window": None}
        self.history[name] = [(seq, s) for seq, s in self.history.get(parent, []) if seq <= cut]
        for kept, value in ((self.sent, state["sent"]), (self.built, state["built"])):
            if value is None:
                kept.pop(name, None)
            else:
                kept[name] = value
        self.windows[name] = None if state["window"] is None else list(state["window"])
        self.manager.switch_branch(name)
        self.branches.append(name)
        self.last = None
        if held:
            assert self.manager.window_status_of(row) == "in"
        TALLY["branched_at"] += 1

    @invariant()
    def the_window_is_what_was_presented(self) -> None:
        """The manager's window is the machine's: the record until the host presents,
        then the rows it presented and did not take out that the record still holds."""
        if self.cm is None:
            return
        window = self._window()
        assert self.manager.presenting is (window is not None)
        if window is None:
            assert self.window_ids() == self.ids()
            return
        live = set(self.ids())
        assert self.window_ids() == [i for i in window if i in live]
        TALLY["presenting_checks"] += 1

    # --------------------------------------------------------------- branches
    @rule()
    def fork(self) -> None:
        name = f"b{len(self.branches)}"
        parent = self.manager.current_branch
        self.manager.fork(name)
        self.branches.append(name)
        self.last = None
        if parent in self.sent:  # a branch starts with its parent's record
            self.sent[name] = self.sent[parent]
        if parent in self.built:
            self.built[name] = self.built[parent]
        window = self.windows.get(parent)
        self.windows[name] = None if window is None else list(window)  # and its window
        self.history[name] = list(self.history.get(parent, []))
        self._kept()

    @rule(data=st.data())
    def switch(self, data: st.DataObject) -> None:
        self.manager.switch_branch(data.draw(st.sampled_from(self.branches)))
        self.last = None

    @rule(budget=st.integers(2000, 6000))
    def reopen(self, budget: int) -> None:
        try:
            before = self.manager.compile(max_tokens=budget, reserve_for_response=0).messages
        except (OverBudgetError, ConstraintConflictError):
            before = None
        held = self.manager.compression_holds()  # holds live in the process, not the store
        self.manager.close()
        self._open()
        self.manager.hold_compression(held)
        if before is not None:
            after = self.manager.compile(max_tokens=budget, reserve_for_response=0)
            TALLY["compiles"] += 1
            TALLY["sent"] += 1
            assert recount(after, 0) == after.render_stats["tokens"] <= budget
            if self.settles:
                assert after.messages == before  # the store carries everything it needs

    @rule(budget=st.integers(2000, 6000))
    def derive(self, budget: int) -> None:
        """A store derived now holds the same window and compiles the same request."""
        try:
            before = self.manager.compile(max_tokens=budget, reserve_for_response=0).messages
        except (OverBudgetError, ConstraintConflictError):
            before = None
        TALLY["compiles"] += 1
        self.last = None  # the parent's last request is the one just compiled
        self.n += 1
        child = self.manager.derive(self.dir / f"derived-{self.n}.db")
        derived = ContextManager.open(
            path=child,
            strategy=machine_strategy(self.method, self.head, self.tail),
            summarizer=self.summarizer,
            counter=COUNTER,
            clock=self.clock,
        )
        try:  # the system prompt and tools come with the store
            derived.hold_compression(self.manager.compression_holds())  # not in the store
            assert [m.id for m in derived.get_window_messages()] == self.window_ids()
            assert [m.id for m in derived.get_messages()] == self.ids()
            if before is not None:
                after = derived.compile(max_tokens=budget, reserve_for_response=0)
                TALLY["compiles"] += 1
                TALLY["sent"] += 1
                TALLY["derived"] += 1
                assert recount(after, 0) == after.render_stats["tokens"] <= budget
                if self.settles:
                    assert after.messages == before
        finally:
            derived.close()

    @invariant()
    def records_agree_with_messages(self) -> None:
        """Chunk records are disjoint, and every record and memory names a contiguous run
        of live messages (a compressed chunk exactly its memory's)."""
        if self.cm is None or not isinstance(self.strategy, AutobiographicalStrategy):
            return
        strategy = self.strategy
        position = {m.id: i for i, m in enumerate(self.manager.get_window_messages())}

        def run(ids: list[str]) -> bool:
            return (
                bool(ids)
                and all(i in position for i in ids)
                and [position[i] for i in ids]
                == list(range(position[ids[0]], position[ids[0]] + len(ids)))
            )

        seen: set[str] = set()
        for chunk in strategy.chunks:
            assert seen.isdisjoint(chunk.source_ids)
            seen.update(chunk.source_ids)
            assert run(chunk.source_ids), f"chunk {chunk.id} names {chunk.source_ids}"
            if chunk.compressed:
                memory = strategy.summaries[str(chunk.summary_id)]
                assert strategy.leaves_of(memory) == chunk.source_ids
        for memory in strategy.summaries.values():
            assert run(strategy.leaves_of(memory)), f"memory {memory.id} lost a message"
            assert memory.parent_id is None or memory.parent_id in strategy.summaries


def _outcome(compile: Any) -> tuple[Any, ...]:
    """What a compile sends, or the refusal it raises, in comparable terms."""
    try:
        result = compile()
    except (OverBudgetError, ConstraintConflictError) as exc:
        return (type(exc).__name__, str(exc))
    stats = result.render_stats
    if stats.get("fits") is False:
        return ("refused", stats.get("tokens"))
    return (
        "sent",
        result.messages,
        stats["tokens"],
        stats.get("stated", {}),
        stats.get("decision"),
    )


def _marker(message: Message) -> str:
    """The unique mark each message of the machine carries (a word of its text, the
    input of its calls, the content of its results)."""
    for b in message.content:
        if isinstance(b, TextBlock) and b.text:
            return b.text.split()[0]
        if isinstance(b, ToolUseBlock):
            return json.dumps(b.input)[1:-1]
    for b in message.content:
        if isinstance(b, ToolResultBlock) and isinstance(b.content, str) and b.content:
            return b.content.split()[0]
        if isinstance(b, ToolResultBlock) and not isinstance(b.content, str):
            texts = [c.text for c in b.content if isinstance(c, TextBlock) and c.text]
            if texts:
                return texts[0].split()[0]
    return "\x00never"


class PostgresRequestMachine(RequestMachine):
    """The request machine on an agent's store in PostgreSQL: every rule and invariant
    above, the records kept by the other engine (derives write SQLite files from it).

    Set :attr:`url` (a server's URL) before running it; each run is a new agent,
    dropped at its end."""

    url: str | None = None

    def __init__(self) -> None:
        super().__init__()
        import uuid

        from tests.support.postgres_server import with_agent

        assert self.url is not None, "set PostgresRequestMachine.url to a server's URL"
        self.agent = f"machine-{uuid.uuid4().hex[:12]}"
        self.path = with_agent(self.url, self.agent)  # type: ignore[assignment]

    def teardown(self) -> None:
        super().teardown()
        import psycopg

        from context_manager.store.postgres import drop_agent

        assert self.url is not None
        with psycopg.connect(self.url, autocommit=True) as raw:
            drop_agent(raw, self.agent)
