"""An agent on the extractive summariser, sized so a few dozen messages fold: its strategy
(:func:`strategy`), a manager over it (:func:`open_extractive`), the check that its
records agree with its messages, and threads sharing one manager (:func:`threaded_run`,
which ``tests/soak_threads.py`` runs long)."""

from __future__ import annotations

import threading
from pathlib import Path

from context_manager import (
    CharsCounter,
    ContextManager,
    ExtractiveSummarizer,
    OverBudgetError,
)
from context_manager.strategies.autobiographical import AutobiographicalStrategy

COUNTER = CharsCounter()


def strategy(**extra: object) -> AutobiographicalStrategy:
    """The autobiographical strategy on the extractive summariser: 120-token chunks, a
    300-token recent window, merges of three, 30-token memories, nothing held back
    (``extra`` overrides any option)."""
    options: dict[str, object] = {
        "compression_model": "extractive",
        "target_chunk_tokens": 120,
        "recent_window_tokens": 300,
        "merge_threshold": 3,
        "summary_target_tokens": 30,
        "l1_holdback_chunks": 0,
        "min_chunk_chars_for_llm": 0,
    }
    options.update(extra)
    return AutobiographicalStrategy(**options)  # type: ignore[arg-type]


def open_extractive(path: Path | str, s: object | None = None) -> ContextManager:
    """A manager on ``path`` over :func:`strategy` with a 100-token recent window (or the
    strategy ``s``), the extractive summariser and the character counter."""
    return ContextManager.open(
        path=path,
        strategy=s if s is not None else strategy(recent_window_tokens=100),  # type: ignore[arg-type]
        summarizer=ExtractiveSummarizer(target_tokens=30),
        counter=COUNTER,
    )


def records_agree_with_messages(cm: ContextManager) -> None:
    """Every chunk record and every memory names a contiguous run of live messages, and
    every compressed chunk's memory exists and covers exactly the chunk."""
    s = cm.strategy
    assert isinstance(s, AutobiographicalStrategy)
    position = {m.id: i for i, m in enumerate(cm.get_messages())}

    def contiguous(ids: list[str]) -> bool:
        return all(i in position for i in ids) and [position[i] for i in ids] == list(
            range(position[ids[0]], position[ids[0]] + len(ids))
        )

    for chunk in s.chunks:
        assert chunk.source_ids and contiguous(chunk.source_ids), chunk
        if chunk.compressed:
            assert chunk.summary_id in s.summaries
            assert s.leaves_of(s.summaries[chunk.summary_id]) == chunk.source_ids
    for memory in s.summaries.values():
        assert contiguous(s.leaves_of(memory)), memory.id
        if memory.parent_id is not None:
            assert memory.parent_id in s.summaries


def threaded_run(path: Path, threads: int, per_thread: int) -> tuple[int, int]:
    """``threads`` threads sharing one manager append ``per_thread`` messages each, with
    ticks and compiles between; after reopening, every acknowledged message must be
    there with its text and nothing else. Returns (acknowledged, found)."""
    cm = open_extractive(path)
    acknowledged: list[list[tuple[str, str]]] = [[] for _ in range(threads)]
    errors: list[BaseException] = []
    start = threading.Barrier(threads)

    def work(t: int) -> None:
        try:
            start.wait()
            for i in range(per_thread):
                text = f"t{t}m{i} " + " ".join(f"w{j}" for j in range(20))
                acknowledged[t].append((cm.add_message("User", text), text))
                if i % 10 == t % 10:
                    cm.tick()
                if i % 25 == t:
                    try:
                        sent = cm.compile(max_tokens=3000, reserve_for_response=0)
                        assert sent.render_stats["tokens"] <= 3000
                    except OverBudgetError as exc:  # compression behind: a refusal, typed
                        assert exc.actual > exc.budget
        except BaseException as exc:  # reported below
            errors.append(exc)

    workers = [threading.Thread(target=work, args=(t,)) for t in range(threads)]
    for w in workers:
        w.start()
    for w in workers:
        w.join()
    assert errors == []
    records_agree_with_messages(cm)
    cm.close()
    cm = open_extractive(path)
    stored = {m.id: m.message.text for m in cm.get_messages()}
    expected = {i: text for acks in acknowledged for i, text in acks}
    assert len(expected) == per_thread * threads
    assert stored == expected
    records_agree_with_messages(cm)
    cm.close()
    return len(expected), len(stored)
