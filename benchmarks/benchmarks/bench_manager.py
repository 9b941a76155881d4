"""The context manager on a large store: open, warm compile, append + compile.

The store holds 15,000 messages (~2.8M tokens under the chars/4 counter)
compressed into ~800 L1 chunks and their merges by the extractive summariser;
it is built once per benchmark run (``setup_cache``).
"""

from __future__ import annotations

import os
import random
import tempfile
import time

from context_manager import CharsCounter, ContextManager, ExtractiveSummarizer
from context_manager.strategies.autobiographical import AutobiographicalStrategy

N_MESSAGES = 15_000
WINDOW = {"max_tokens": 200_000, "reserve_for_response": 8_000}


def _strategy() -> AutobiographicalStrategy:
    return AutobiographicalStrategy(
        compression_model="extractive",
        target_chunk_tokens=3_000,
        summary_target_tokens=300,
        recent_window_tokens=30_000,
        recall_budget_tokens=4_000,
        solver="kv-stable",
    )


def _open(path: str) -> ContextManager:
    return ContextManager.open(
        path=path, strategy=_strategy(), counter=CharsCounter(), summarizer=ExtractiveSummarizer()
    )


def build(path: str, n_messages: int = N_MESSAGES) -> dict[str, float]:
    """Write the benchmark store; returns its size figures."""
    rng = random.Random(0xC0FFEE)
    started = time.perf_counter()
    with _open(path) as cm:
        for i in range(n_messages):
            words = " ".join(f"w{rng.randrange(20_000)}" for _ in range(rng.randrange(30, 185)))
            cm.add_message("User" if i % 2 else "Claude", f"Turn {i}. {words}.")
            if i % 25 == 0:
                cm.drain()
        cm.drain()
        strategy = cm.strategy
        assert isinstance(strategy, AutobiographicalStrategy)
        tokens = sum(CharsCounter().count_message(s.message) for s in cm.get_messages())
        return {
            "messages": n_messages,
            "tokens": tokens,
            "chunks": len(strategy.chunks),
            "summaries": len(strategy.summaries),
            "build_s": time.perf_counter() - started,
        }


class LargeStore:
    timeout = 1800

    def setup_cache(self) -> str:
        path = os.path.join(tempfile.mkdtemp(), "store.db")
        build(path)
        return path

    def setup(self, path: str) -> None:
        self.cm = _open(path)
        self.cm.compile(**WINDOW)  # warm: caches filled, frontier carried

    def teardown(self, path: str) -> None:
        self.cm.close()

    def time_warm_compile(self, path: str) -> None:
        self.cm.compile(**WINDOW)

    def time_append_and_compile(self, path: str) -> None:
        self.cm.add_message("User", "one more message")
        self.cm.compile(**WINDOW)

    def time_open(self, path: str) -> None:
        self.cm.close()
        self.cm = _open(path)
        self.cm.get_messages()

    def track_l1_chunks(self, path: str) -> int:
        strategy = self.cm.strategy
        assert isinstance(strategy, AutobiographicalStrategy)
        return len(strategy.chunks)
