"""Compile latency while a slow summariser writes memories in the background.

An agent served the bundled tau-bench sessions back to back (one ``add_message`` per
message, one ``compile()`` per model call) through a manager with ``auto_tick=True``
and a summariser that takes ``--delay`` seconds per memory, against the same agent
with no summariser at all. Prints one JSON line per run with the p50, p99 and max of
``compile`` and ``add_message`` in milliseconds, and the ratio of the compile p99s.

    python benchmarks/tick_latency.py [--delay 1.0] [--calls 120] [--think 0.1]

``--think`` is the agent's own time per call (its model answering), spent outside
the manager; the worker writes memories meanwhile.
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from typing import Any

from context_manager import ContextManager, ExtractiveSummarizer
from context_manager.strategies.autobiographical import (
    AutobiographicalConfig,
    AutobiographicalStrategy,
)
from context_manager.summarizer import Completion, CompletionRequest
from foldbench.benchmark import tau_bench_transcript


class SlowSummarizer:
    """The extractive summariser, answering after ``delay`` seconds (a model's time)."""

    needs_tool_definitions = False
    model = "extractive"

    def __init__(self, delay: float) -> None:
        self.delay = delay
        self.inner = ExtractiveSummarizer()
        self.calls = 0

    def complete(self, request: CompletionRequest) -> Completion:
        self.calls += 1
        time.sleep(self.delay)
        return self.inner.complete(request)


def _quantiles(samples: list[float]) -> dict[str, float]:
    ordered = sorted(samples)
    p99 = ordered[min(len(ordered) - 1, round(0.99 * (len(ordered) - 1)))]
    return {
        "p50": round(1000 * statistics.median(ordered), 2),
        "p99": round(1000 * p99, 2),
        "max": round(1000 * ordered[-1], 2),
    }


def run(delay: float | None, calls: int, window: int, think: float) -> dict[str, Any]:
    """One agent: ``delay`` None for no summariser, else a summariser that slow."""
    transcript = tau_bench_transcript(20)
    config = AutobiographicalConfig.for_window(
        window,
        compression_model="extractive",
        # memories small and often, so the worker is busy through the whole run
        target_chunk_tokens=600,
        summary_target_tokens=100,
        recent_window_tokens=2_000,
        summary_timeout_seconds=max(60.0, 10 * (delay or 0)),
    )
    summarizer = SlowSummarizer(delay) if delay is not None else None
    compile_s: list[float] = []
    add_s: list[float] = []
    points = transcript.call_points
    seen = 0
    with ContextManager.open(
        path=":memory:",
        strategy=AutobiographicalStrategy(config),
        summarizer=summarizer,
        auto_tick=summarizer is not None,
    ) as cm:
        for n in points[:calls]:
            for message in transcript.messages[seen:n]:
                start = time.perf_counter()
                cm.add_message(message.participant, message.content)
                add_s.append(time.perf_counter() - start)
            seen = n
            start = time.perf_counter()
            cm.compile(catch_up=False)
            compile_s.append(time.perf_counter() - start)
            time.sleep(think)  # the model answers
        memories = len(cm.strategy.state.summaries)  # type: ignore[attr-defined]
    return {
        "summariser": "none" if delay is None else f"{delay:g} s per memory",
        "compiles": len(compile_s),
        "compile_ms": _quantiles(compile_s),
        "add_message_ms": _quantiles(add_s),
        "summariser_calls": 0 if summarizer is None else summarizer.calls,
        "memories": memories,
    }


def main() -> None:
    """Run both agents and print their figures and the ratio of the compile p99s."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--delay", type=float, default=1.0)
    parser.add_argument("--calls", type=int, default=120)
    parser.add_argument("--window", type=int, default=100_000)
    parser.add_argument("--think", type=float, default=0.1)
    args = parser.parse_args()
    base = run(None, args.calls, args.window, args.think)
    slow = run(args.delay, args.calls, args.window, args.think)
    print(json.dumps(base))
    print(json.dumps(slow))
    ratio = slow["compile_ms"]["p99"] / max(base["compile_ms"]["p99"], 1e-9)
    print(json.dumps({"compile_p99_ratio": round(ratio, 2)}))


if __name__ == "__main__":
    main()
