"""A raw head window moves to the latest topic transition (``reset_head_window``).

Messages are ``m00 xxx...`` (39 characters: 10 tokens by the chars/4 counter). The
strategy keeps a 30-token head (three messages), a 40-token tail, closes chunks of four
messages and never merges.
"""

from __future__ import annotations

from collections import Counter
from pathlib import Path

from context_manager import CharsCounter, ContextManager, ExtractiveSummarizer
from context_manager.strategies.autobiographical import AutobiographicalStrategy
from context_manager.summarizer import TOPIC_TRANSITION

COUNTER = CharsCounter()


def _strategy() -> AutobiographicalStrategy:
    return AutobiographicalStrategy(
        compression_model="extractive",
        head_window_tokens=30,
        target_chunk_tokens=40,
        min_chunk_messages=4,
        recent_window_tokens=40,
        hierarchical=False,
        summary_target_tokens=10,
        l1_holdback_chunks=0,
        min_chunk_chars_for_llm=0,
    )


def _open(strategy: AutobiographicalStrategy, path: Path | str = ":memory:") -> ContextManager:
    return ContextManager.open(
        path=path,
        strategy=strategy,
        summarizer=ExtractiveSummarizer(target_tokens=10),
        counter=COUNTER,
    )


def _talk(cm: ContextManager, start: int, n: int) -> list[str]:
    return [
        cm.add_message("User" if i % 2 == 0 else "Claude", f"m{i:02d} " + "x" * 35)
        for i in range(start, start + n)
    ]


def _memories(s: AutobiographicalStrategy, ids: list[str]) -> list[list[int]]:
    at = {x: k for k, x in enumerate(ids)}
    return sorted([at[i] for i in s.leaves_of(m)] for m in s.summaries.values())


def test_the_head_moves_to_the_transition_and_the_old_head_is_remembered(
    tmp_path: Path,
) -> None:
    strategy = _strategy()
    path = tmp_path / "cm.db"
    with _open(strategy, path) as cm:
        ids = _talk(cm, 0, 15)
        cm.drain()
        # head m00-m02 raw, chunks m03-m06 and m07-m10, tail m11-m14
        assert _memories(strategy, ids) == [[3, 4, 5, 6], [7, 8, 9, 10]]
        cm.reset_head_window("Topic one is done; on to topic two.")
        ids = [m.id for m in cm.get_messages()]
        assert cm.get_message(ids[15]).text.startswith(TOPIC_TRANSITION)
        ids += _talk(cm, 16, 8)
        cm.drain()
        stats = cm.compile(max_tokens=2000, reserve_for_response=0).render_stats
        # the head: the transition (14 tokens) and the one message after it that fits 30
        sizes = [COUNTER.count_message(cm.get_message(i)) for i in ids]
        assert sizes[15] == 14 and sizes[16] == 10
        assert stats["head"] == {"messages": 2, "tokens": 24}
        memories = _memories(strategy, ids)
        # the old head is middle again: its three messages, which cannot grow, are
        # remembered; so is the old tail; the new head never is
        assert memories[:2] == [[0, 1, 2], [3, 4, 5, 6]]
        assert [11, 12, 13, 14] in memories
        assert not any(set(m) & {15, 16} for m in memories)
        tight = cm.compile(max_tokens=170, reserve_for_response=0)  # only all folded fits
        shown = Counter(i for _, covered in tight.provenance for i in covered)
        assert shown == Counter(ids)  # every message once, raw or through a memory
        raw = [covered[0] for memory, covered in tight.provenance if memory is None]
        assert ids[15:17] == [i for i in raw if i in ids[15:17]]  # the head raw
        assert ids[0] not in raw  # the old head folded
    with _open(_strategy(), path) as cm:  # found again from the messages on reopening
        again = cm.compile(max_tokens=2000, reserve_for_response=0).render_stats
        assert again["head"] == stats["head"]


def test_a_memory_of_the_old_head_is_written_from_what_came_before_it_only() -> None:
    strategy = _strategy()
    requests: list[list[str]] = []

    class Spy(ExtractiveSummarizer):
        def complete(self, request):  # type: ignore[no-untyped-def]
            requests.append([m.text for m in request.messages])
            return super().complete(request)

    with ContextManager.open(
        path=":memory:", strategy=strategy, summarizer=Spy(target_tokens=10), counter=COUNTER
    ) as cm:
        _talk(cm, 0, 15)
        cm.drain()
        cm.reset_head_window("Topic one is done.")
        _talk(cm, 16, 8)
        requests.clear()
        cm.drain()
        # the memory of m00-m02: marker, the three messages, instruction, and nothing
        # from after them (no transition, no new head, no later memory)
        (texts,) = [r for r in requests if r[0].startswith("[CM] A new") and r[1][:3] == "m00"]
        assert texts[0].startswith("[CM] A new memory") and texts[-1].startswith("[CM] Write")
        assert [t[:3] for t in texts[1:-1]] == ["m00", "m01", "m02"]
