"""A tick calls the summariser with no lock held: adding messages and compiling go on
while a memory is being written, the memory is stored only for the request it answers,
and ``auto_tick="after_compile"`` repeats run for run."""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any

from context_manager import (
    CharsCounter,
    ContextManager,
    ExtractiveSummarizer,
    ToolResultBlock,
    ToolUseBlock,
)
from context_manager.strategies.autobiographical import (
    AutobiographicalConfig,
    AutobiographicalStrategy,
)
from context_manager.summarizer import Completion, CompletionRequest

WAIT = 30.0
"""Seconds a test waits for an event at most: a failure, never a pause."""


class GatedSummarizer:
    """An extractive summariser that, while ``gate`` is closed, holds each call until it
    opens; ``entered`` is set once a call is inside."""

    needs_tool_definitions = False
    model = "extractive"

    def __init__(self) -> None:
        self.inner = ExtractiveSummarizer()
        self.gate = threading.Event()
        self.entered = threading.Event()
        self.requests: list[CompletionRequest] = []

    def complete(self, request: CompletionRequest) -> Completion:
        self.requests.append(request)
        answer = len(self.requests)
        self.entered.set()
        assert self.gate.wait(WAIT), "the test never opened the gate"
        text = self.inner.complete(request).text
        return Completion(text=f"{text}\n(answer {answer})", stop_reason="end_turn")


def _strategy(**options: Any) -> AutobiographicalStrategy:
    config = AutobiographicalConfig.for_window(
        4_000, compression_model="extractive", summary_timeout_seconds=60, **options
    )
    return AutobiographicalStrategy(config)


def _open(summarizer: Any, **kw: Any) -> ContextManager:
    return ContextManager.open(
        path=":memory:",
        strategy=_strategy(),
        summarizer=summarizer,
        counter=CharsCounter(),
        **kw,
    )


def _turns(cm: ContextManager, n: int, start: int = 0) -> None:
    for i in range(start, start + n):
        cm.add_message("Claude", [ToolUseBlock(id=f"t{i}", name="ls", input={"dir": i})])
        cm.add_message("ls", [ToolResultBlock(tool_use_id=f"t{i}", content=f"file_{i}.py " * 40)])


def _in_thread(fn: Callable[[], Any]) -> tuple[threading.Thread, list[Any]]:
    out: list[Any] = []

    def run() -> None:
        out.append(fn())

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    return thread, out


def test_messages_and_compiles_go_on_while_the_summariser_writes() -> None:
    summarizer = GatedSummarizer()
    with _open(summarizer) as cm:
        _turns(cm, 12)
        assert cm.pending_work()
        ticking, done = _in_thread(cm.tick)
        assert summarizer.entered.wait(WAIT)
        # the tick is inside the summariser: nothing else waits for it
        worker, results = _in_thread(
            lambda: (cm.add_message("User", "and the tests?"), cm.compile())
        )
        worker.join(WAIT)
        assert not worker.is_alive(), "add_message or compile waited for the summariser"
        message_id, request = results[0]
        assert request.messages[-1].text == "and the tests?"
        assert ticking.is_alive()  # the memory is still being written
        summarizer.gate.set()
        ticking.join(WAIT)
        assert done == [True]
        assert len(cm.strategy.state.summaries) == 1  # type: ignore[attr-defined]
        assert message_id in {m.id for m in cm.get_messages()}


def test_an_answer_to_a_request_the_state_no_longer_makes_is_not_stored() -> None:
    summarizer = GatedSummarizer()
    with _open(summarizer) as cm:
        _turns(cm, 12)
        first = cm.get_messages()[1].id  # the first tool result, in the first chunk
        ticking, _ = _in_thread(cm.tick)
        assert summarizer.entered.wait(WAIT)
        cm.edit_message(first, [ToolResultBlock(tool_use_id="t0", content="EDITED " * 40)])
        summarizer.gate.set()
        ticking.join(WAIT)
        assert not ticking.is_alive()
        # the first answer was for the old text: the chunk was asked for again
        assert len(summarizer.requests) == 2
        assert "EDITED" not in summarizer.requests[0].model_dump_json()
        assert "EDITED" in summarizer.requests[1].model_dump_json()
        memories = list(cm.strategy.state.summaries.values())  # type: ignore[attr-defined]
        assert len(memories) == 1 and memories[0].content.endswith("(answer 2)")


def test_a_compile_that_needs_the_memory_in_progress_waits_for_it_and_fits() -> None:
    summarizer = GatedSummarizer()
    with _open(summarizer, auto_tick=True) as cm:
        _turns(cm, 12)
        assert summarizer.entered.wait(WAIT)  # the worker is writing a memory
        _turns(cm, 14, start=12)
        compiling, results = _in_thread(lambda: cm.compile(max_tokens=1_400))
        summarizer.gate.set()
        compiling.join(WAIT)
        assert not compiling.is_alive()
        request = results[0]
        assert request.render_stats["request"]["total"] <= 1_400 - 1_400 // 4
        assert any(memory is not None for memory, _ in request.provenance)


def _run(mode: Any) -> tuple[list[int], list[str]]:
    costs = []
    with _open(ExtractiveSummarizer(), auto_tick=mode) as cm:
        for turn in range(30):
            _turns(cm, 1, start=turn)
            result = cm.compile(max_tokens=2_000, reserve_for_response=0)
            costs.append(result.render_stats["kv_cost"])
            # the reproducible mode has written what that compile queued before this
            assert cm.is_ready() or mode is not True
        cm.wait_for_ticks(WAIT)
        memories = [s.content for s in cm.strategy.state.summaries.values()]  # type: ignore[attr-defined]
    return costs, memories


def test_after_compile_mode_settles_before_the_next_operation_and_repeats() -> None:
    first, second = _run("after_compile"), _run("after_compile")
    assert first == second
    assert first[1], "memories were written"
