"""One record, a window per agent: what a host presents and retracts is what is sent.

Messages are ``m00 xxx...`` (39 characters: 10 tokens by the chars/4 counter). The
autobiographical strategy here closes a chunk at 4 messages (40 tokens), keeps the
newest 4 raw (a 40-token tail) and never merges, so with 14 messages the chunks are
m00-m03 and m04-m07, m08 and m09 wait in the middle, and m10-m13 are the tail.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from pathlib import Path

from context_manager import (
    CharsCounter,
    ContextManager,
    ExtractiveSummarizer,
    PassthroughStrategy,
    Store,
)
from context_manager.strategies.autobiographical import AutobiographicalStrategy
from context_manager.strategies.base import StoredMessage, StrategyContext

COUNTER = CharsCounter()


def _autobio() -> AutobiographicalStrategy:
    return AutobiographicalStrategy(
        compression_model="extractive",
        target_chunk_tokens=40,
        min_chunk_messages=4,
        recent_window_tokens=40,
        hierarchical=False,
        summary_target_tokens=10,
        l1_holdback_chunks=0,
        min_chunk_chars_for_llm=0,
    )


def _open(
    strategy: object | None = None,
    *,
    path: Path | str = ":memory:",
    store: Store | None = None,
    namespace: str | None = None,
) -> ContextManager:
    where: dict[str, object] = {"store": store} if store is not None else {"path": path}
    return ContextManager.open(
        **where,  # type: ignore[arg-type]
        strategy=strategy,  # type: ignore[arg-type]
        summarizer=ExtractiveSummarizer(target_tokens=10),
        counter=COUNTER,
        namespace=namespace,
    )


def _talk(cm: ContextManager, n: int, start: int = 0) -> list[str]:
    return [
        cm.add_message("User" if i % 2 == 0 else "Claude", f"m{i:02d} " + "x" * 35)
        for i in range(start, start + n)
    ]


def _leaves(strategy: AutobiographicalStrategy, ids: Sequence[str]) -> dict[str, list[int]]:
    """Each memory's messages, as indices into ``ids``."""
    at = {x: k for k, x in enumerate(ids)}
    return {m: [at[i] for i in strategy.leaves_of(s)] for m, s in strategy.summaries.items()}


def _shown(cm: ContextManager, ids: Sequence[str], max_tokens: int) -> list[tuple[str, list[int]]]:
    """What a compile sends: per message, ``raw`` or the memory it shows, and the
    messages it stands for (indices into ``ids``; a memory's question stands for none)."""
    at = {x: k for k, x in enumerate(ids)}
    result = cm.compile(max_tokens=max_tokens, reserve_for_response=0)
    return [(memory or "raw", [at[i] for i in shown]) for memory, shown in result.provenance]


def _times_shown(shown: list[tuple[str, list[int]]]) -> Counter[int]:
    return Counter(i for _, covered in shown for i in covered)


# ------------------------------------------------------------ strategy hooks
class _Recording(PassthroughStrategy):
    """Records what it hears, and the window it sees when it hears it."""

    def __init__(self) -> None:
        self.heard: list[tuple[str, list[str], list[str]]] = []

    def on_presented(self, ctx: StrategyContext, messages: Sequence[StoredMessage]) -> None:
        window = [m.id for m in ctx.messages()]
        self.heard.append(("presented", [m.id for m in messages], window))

    def on_retracted(self, ctx: StrategyContext, ids: Sequence[str]) -> None:
        self.heard.append(("retracted", list(ids), [m.id for m in ctx.messages()]))


def test_a_strategy_hears_rows_enter_and_leave_the_window() -> None:
    recording = _Recording()
    with _open(recording) as cm:
        a = cm.add_message("User", "a")  # the window is the record: heard at the add
        assert recording.heard == [("presented", [a], [a])]
        assert cm.present_rows([]) == []  # the write-down enters nothing new
        b, c = cm.add_message("User", "b"), cm.add_message("User", "c")
        assert len(recording.heard) == 1  # not presented yet: not heard
        assert cm.present_rows([c, b]) == [c, b]
        assert recording.heard[-1] == ("presented", [c, b], [a, c, b])
        assert cm.retract_rows([b]) == [b]
        assert recording.heard[-1] == ("retracted", [b], [a, c])
        cm.remove_message(c)  # a removal once a host presents takes the row out
        assert recording.heard[-1] == ("retracted", [c], [a])
        d = cm.add_message("User", "d")
        cm.remove_message(d)  # never presented: nothing to hear
        assert len(recording.heard) == 4


class _OldStyle(PassthroughStrategy):
    """A strategy written before windows: it knows only new messages and removals."""

    def __init__(self) -> None:
        self.heard: list[tuple[str, list[str]]] = []

    def on_new_message(self, ctx: StrategyContext, message: StoredMessage) -> None:
        self.heard.append(("new", [message.id]))

    def on_messages_removed(self, ctx: StrategyContext, ids: Sequence[str]) -> None:
        self.heard.append(("removed", list(ids)))


def test_a_strategy_without_the_hooks_hears_rows_as_new_messages_and_removals() -> None:
    old = _OldStyle()
    with _open(old) as cm:
        a = cm.add_message("User", "a")
        cm.present_rows([])
        b, c = cm.add_message("User", "b"), cm.add_message("User", "c")
        cm.present_rows([b, c])
        cm.retract_rows([a, b])
        assert old.heard == [("new", [a]), ("new", [b]), ("new", [c]), ("removed", [a, b])]


# ------------------------------------------------- present, retract, undo, redo
def test_undoing_the_last_turn_takes_it_out_and_a_redo_shows_each_row_once() -> None:
    strategy = _autobio()
    with _open(strategy) as cm:
        ids = _talk(cm, 14)
        cm.drain()
        assert _leaves(strategy, ids) == {"L1-0": [0, 1, 2, 3], "L1-1": [4, 5, 6, 7]}
        assert cm.retract_rows(ids[12:]) == ids[12:]  # the agent's last turn is undone
        assert [cm.window_status_of(i) for i in ids[11:]] == ["in", "undone", "undone"]
        roomy = _shown(cm, ids, 2000)
        assert roomy == [("raw", [i]) for i in range(12)]
        assert all(
            12 not in covered and 13 not in covered for covered in _leaves(strategy, ids).values()
        )
        # redo: the turn is presented again, at the end, with new ordinals
        assert cm.present_rows(ids[12:]) == ids[12:]
        assert [cm.ordinal_of(i) for i in ids[11:]] == [11, 14, 15]
        assert _shown(cm, ids, 2000) == [("raw", [i]) for i in range(14)]


def test_undoing_a_remembered_turn_drops_its_memory_and_a_redo_shows_each_row_once() -> None:
    strategy = _autobio()
    with _open(strategy) as cm:
        ids = _talk(cm, 14)
        cm.drain()
        cm.retract_rows(ids[4:6])  # m04 and m05 are under L1-1
        assert _leaves(strategy, ids) == {"L1-0": [0, 1, 2, 3]}
        assert [(c.id, c.compressed, c.source_ids) for c in strategy.chunks] == [
            ("c-0", True, ids[0:4]),
            ("c-1", False, ids[6:8]),  # what L1-1 kept, to be remembered again
        ]
        cm.drain()
        assert _leaves(strategy, ids) == {"L1-0": [0, 1, 2, 3], "L1-2": [6, 7]}
        assert 4 not in _times_shown(_shown(cm, ids, 2000))
        # redo: m04 and m05 come back at the end of the window, in the raw tail
        cm.present_rows(ids[4:6])
        cm.drain()
        assert _leaves(strategy, ids) == {
            "L1-0": [0, 1, 2, 3],
            "L1-2": [6, 7],
            "L1-3": [8, 9, 10, 11],
        }
        tight = _shown(cm, ids, 120)
        assert tight == [
            ("L1-0", []),
            ("L1-0", [0, 1, 2, 3]),
            ("L1-2", []),
            ("L1-2", [6, 7]),
            ("L1-3", []),
            ("L1-3", [8, 9, 10, 11]),
            ("raw", [12]),
            ("raw", [13]),
            ("raw", [4]),
            ("raw", [5]),
        ]
        assert _times_shown(tight) == Counter(range(14))  # every row once
        assert _times_shown(_shown(cm, ids, 2000)) == Counter(range(14))


def test_a_pin_a_redo_turns_around_lapses() -> None:
    strategy = _autobio()
    with _open(strategy) as cm:
        ids = _talk(cm, 14)
        cm.pin_range(ids[4], ids[6])
        cm.drain()
        cm.retract_rows([ids[4]])
        cm.present_rows([ids[4]])  # the pin's first row now comes after its last
        cm.drain()
        shown = _shown(cm, ids, 120)
        assert _times_shown(shown) == Counter(range(14))
        assert ("raw", [5]) not in shown and ("raw", [6]) not in shown  # no longer pinned raw
