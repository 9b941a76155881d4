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

import pytest

from context_manager import (
    CharsCounter,
    ConfigError,
    ContextManager,
    ExtractiveSummarizer,
    PassthroughStrategy,
    Store,
    UnknownRowError,
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


# ------------------------------------------------------------------ presenting
def _texts(cm: ContextManager) -> list[str]:
    return [m.text for m in cm.compile(max_tokens=2000, reserve_for_response=0).messages]


def test_until_a_host_presents_the_window_is_the_record_and_nothing_is_written() -> None:
    with _open() as cm:
        a, b = cm.add_message("User", "a"), cm.add_message("Claude", "b")
        cm.compile(max_tokens=500)
        assert not cm.presenting
        assert cm.store.items("default/window") == []
        assert [m.id for m in cm.get_window_messages()] == [a, b]
        assert [cm.ordinal_of(x) for x in (a, b)] == [0, 1]
        assert cm.get_unpresented_messages() == []
        assert cm.retract_rows([]) == [] and not cm.presenting  # names no row: no change


def test_present_rows_grows_the_window_in_the_order_given() -> None:
    with _open() as cm:
        a = cm.add_message("User", "a")
        assert cm.present_rows([]) == []  # the write-down: the window as it stands
        assert cm.presenting and _texts(cm) == ["a"]
        b, c = cm.add_message("Other", "b"), cm.add_message("User", "c")
        assert _texts(cm) == ["a"]  # added, not presented
        assert [m.id for m in cm.get_unpresented_messages()] == [b, c]
        assert cm.present_rows([c, a, c]) == [c]  # a is in already; c enters once
        assert cm.present_rows([b]) == [b]
        assert _texts(cm) == ["a", "c", "b"]  # the order the agent was shown them
        assert [cm.ordinal_of(x) for x in (a, b, c)] == [0, 2, 1]
        assert cm.get_unpresented_messages() == []
        assert [item.body["kind"] for item in cm.store.items("default/window")] == [
            "write-down",
            "present",
            "present",
        ]


def test_unpresented_rows_after_a_sequence() -> None:
    with _open() as cm:
        cm.present_rows([])
        early = cm.add_message("Other", "early")
        mark = cm.current_sequence()
        late = cm.add_message("Other", "late")
        undone = cm.add_message("User", "undone")
        cm.present_rows([undone])
        cm.retract_rows([undone])
        assert [m.id for m in cm.get_unpresented_messages()] == [early, late]
        assert [m.id for m in cm.get_unpresented_messages(after_sequence=mark)] == [late]
        assert cm.get_unpresented_messages(after_sequence=cm.current_sequence()) == []


def test_window_status_moves_out_in_undone_in_absent() -> None:
    with _open() as cm:
        cm.present_rows([])
        row = cm.add_message("User", "row")
        seen = [cm.window_status_of(row)]
        cm.present_rows([row])
        seen.append(cm.window_status_of(row))
        cm.retract_rows([row])
        seen.append(cm.window_status_of(row))
        cm.present_rows([row])
        seen.append(cm.window_status_of(row))
        cm.remove_message(row)
        seen.append(cm.window_status_of(row))
        assert seen == ["out", "in", "undone", "in", "absent"]
        assert cm.ordinal_of(row) is None and cm.window_status_of("nothing") == "absent"


def test_a_retract_in_legacy_mode_writes_the_window_down_first() -> None:
    with _open() as cm:
        a, b, c = (cm.add_message("User", t) for t in "abc")
        assert cm.retract_rows([b]) == [b]
        assert cm.presenting and _texts(cm) == ["a", "c"]
        d = cm.add_message("User", "d")  # from now on the window grows by presentation
        assert _texts(cm) == ["a", "c"] and cm.window_status_of(d) == "out"
        assert [cm.ordinal_of(x) for x in (a, b, c)] == [0, None, 2]


# ------------------------------------------------- removals through another manager
def test_a_removal_through_another_manager_is_taken_out_by_retract_removed() -> None:
    with Store.open(":memory:") as store:
        writer = _open(store=store, namespace="writer")
        reader_strategy = _autobio()
        reader = _open(reader_strategy, store=store, namespace="reader")
        reader.present_rows([])
        ids = _talk(writer, 14)
        reader.present_rows(ids)
        reader.drain()
        assert _leaves(reader_strategy, ids) == {"L1-0": [0, 1, 2, 3], "L1-1": [4, 5, 6, 7]}
        writer.remove_message(ids[5])
        # the reader's window still holds the row, which the record no longer does
        assert reader.ordinal_of(ids[5]) == 5 and reader.window_status_of(ids[5]) == "absent"
        assert 5 not in _times_shown(_shown(reader, ids, 2000))
        assert reader.retract_removed([ids[5]]) == [ids[5]]
        assert reader.ordinal_of(ids[5]) is None
        assert reader.retract_removed([ids[5]]) == []  # out already
        assert _leaves(reader_strategy, ids) == {"L1-0": [0, 1, 2, 3]}
        reader.drain()  # what L1-1 kept is remembered again
        assert _leaves(reader_strategy, ids) == {"L1-0": [0, 1, 2, 3], "L1-2": [4, 6, 7]}
        assert _shown(reader, ids, 100) == [
            ("L1-0", []),
            ("L1-0", [0, 1, 2, 3]),
            ("L1-2", []),
            ("L1-2", [4, 6, 7]),
            *[("raw", [i]) for i in range(8, 14)],
        ]
        writer.close()
        reader.close()


def test_retract_absent_rows_takes_out_what_other_managers_removed() -> None:
    with Store.open(":memory:") as store:
        writer = _open(store=store, namespace="writer")
        reader_strategy = _autobio()
        reader = _open(reader_strategy, store=store, namespace="reader")
        ids = _talk(writer, 14)
        reader.present_rows(ids)
        reader.drain()
        writer.remove_messages(ids[4], ids[7])  # the whole of L1-1
        assert _leaves(reader_strategy, ids) == {"L1-0": [0, 1, 2, 3], "L1-1": [4, 5, 6, 7]}
        assert reader.retract_absent_rows() == ids[4:8]  # a host's boot pass
        assert reader.retract_absent_rows() == []
        assert _leaves(reader_strategy, ids) == {"L1-0": [0, 1, 2, 3]}
        assert [c.source_ids for c in reader_strategy.chunks] == [ids[0:4]]
        assert [m.id for m in reader.get_window_messages()] == ids[:4] + ids[8:]
        assert _times_shown(_shown(reader, ids, 2000)) == Counter([0, 1, 2, 3, *range(8, 14)])
        writer.close()
        reader.close()


def test_retract_removed_refuses_a_row_the_record_still_holds() -> None:
    with _open() as cm:
        row = cm.add_message("User", "still here")
        cm.present_rows([])
        with pytest.raises(ConfigError, match=r"still in it; .*retract_rows"):
            cm.retract_removed([row])
        assert cm.window_status_of(row) == "in"


# -------------------------------------------------------------------- branches
def test_a_branch_of_a_presented_row_starts_with_the_window_at_its_branch_point() -> None:
    with _open() as cm:
        cm.present_rows([])
        a, b = cm.add_message("User", "a"), cm.add_message("Claude", "b")
        cm.present_rows([a])
        c = cm.add_message("Other", "c")
        cm.present_rows([b, c])
        presented = cm.current_sequence()
        cm.retract_rows([a])  # after the branch point: not in the branch
        d = cm.add_message("User", "d")
        assert cm.branch_sequence_of(b) == presented > cm.get_messages()[1].seq
        cm.branch_at(b, "at-b")
        # a retracted row is cut at its own sequence: the window was empty then
        assert cm.branch_sequence_of(a) == cm.get_messages()[0].seq
        cm.branch_at(a, "at-a")
        assert _texts(cm) == ["b", "c"] and cm.window_status_of(d) == "out"
        cm.switch_branch("at-b")
        assert _texts(cm) == ["a", "b", "c"]
        assert [cm.ordinal_of(x) for x in (a, b, c)] == [0, 1, 2]
        assert cm.window_status_of(d) == "absent"
        cm.switch_branch("at-a")
        assert cm.presenting and _texts(cm) == [] and cm.window_status_of(a) == "out"
        cm.switch_branch("main")
        assert _texts(cm) == ["b", "c"]


def test_a_branch_of_a_written_down_row_is_in_legacy_mode() -> None:
    with _open() as cm:
        a, b = cm.add_message("User", "a"), cm.add_message("Claude", "b")
        cm.present_rows([])  # a and b enter with the write-down
        c = cm.add_message("User", "c")
        cm.present_rows([c])
        assert cm.branch_sequence_of(a) == cm.get_messages()[0].seq
        cm.branch_at(a, "early")
        cm.switch_branch("early")
        assert not cm.presenting and _texts(cm) == ["a"]
        assert [cm.window_status_of(x) for x in (a, b)] == ["in", "absent"]


def test_a_fork_carries_the_window() -> None:
    with _open() as cm:
        a, b = cm.add_message("User", "a"), cm.add_message("Claude", "b")
        cm.retract_rows([a])
        cm.fork("side")
        assert _texts(cm) == ["b"] and cm.window_status_of(a) == "undone"
        cm.present_rows([a])
        assert _texts(cm) == ["b", "a"]
        cm.switch_branch("main")
        assert _texts(cm) == ["b"] and cm.ordinal_of(b) == 1


# ----------------------------------------------------------------- persistence
def test_the_window_survives_closing_and_reopening(tmp_path: Path) -> None:
    path = tmp_path / "cm.db"
    strategy = _autobio()
    with _open(strategy, path=path) as cm:
        ids = _talk(cm, 14)
        cm.drain()
        cm.retract_rows(ids[4:6])
        cm.present_rows(ids[4:6])
        cm.drain()
        late = cm.add_message("Other", "not presented")
        before = cm.compile(max_tokens=120, reserve_for_response=0)
    reopened_strategy = _autobio()
    with _open(reopened_strategy, path=path) as cm:
        assert cm.presenting
        assert [m.id for m in cm.get_window_messages()] == ids[:4] + ids[6:] + ids[4:6]
        assert [cm.ordinal_of(i) for i in ids[3:7]] == [3, 14, 15, 6]
        assert cm.window_status_of(late) == "out"
        assert [m.id for m in cm.get_unpresented_messages()] == [late]
        assert _leaves(reopened_strategy, ids) == _leaves(strategy, ids)
        after = cm.compile(max_tokens=120, reserve_for_response=0)
        assert after.messages == before.messages and after.provenance == before.provenance


# ---------------------------------------------------------------- refusals
def test_unknown_rows_are_refused_with_typed_errors_and_nothing_changes() -> None:
    with _open() as cm:
        row = cm.add_message("User", "row")
        with pytest.raises(UnknownRowError, match=r"ids names no row .*'nope', 'gone'") as exc:
            cm.present_rows([row, "nope", "gone", "nope"])
        assert exc.value.field == "ids" and exc.value.ids == ("nope", "gone")
        assert isinstance(exc.value, KeyError)
        assert not cm.presenting  # nothing was written down either
        with pytest.raises(UnknownRowError, match="'nope'"):
            cm.retract_rows(["nope"])
        assert not cm.presenting
        with pytest.raises(UnknownRowError) as exc:
            cm.branch_sequence_of("nope")
        assert exc.value.field == "message_id"
        with pytest.raises(KeyError, match="no message with id"):
            cm.branch_at("nope")
        with pytest.raises(ConfigError, match="wrap one id in a list"):
            cm.present_rows(row)
        with pytest.raises(ConfigError, match="after_sequence"):
            cm.get_unpresented_messages(after_sequence=-1)
        assert cm.store.items("default/window") == []


def test_a_present_the_strategy_refuses_stores_nothing() -> None:
    class Refuses(PassthroughStrategy):
        def on_presented(self, ctx: StrategyContext, messages: Sequence[StoredMessage]) -> None:
            if len(ctx.messages()) > 1:
                raise RuntimeError("not now")

    with _open(Refuses()) as cm:
        cm.add_message("User", "a")
        cm.present_rows([])
        b = cm.add_message("User", "b")
        with pytest.raises(RuntimeError, match="not now"):
            cm.present_rows([b])
        assert cm.window_status_of(b) == "out" and _texts(cm) == ["a"]
        assert [item.body["kind"] for item in cm.store.items("default/window")] == ["write-down"]


def test_a_transition_summary_enters_the_window_it_was_written_for() -> None:
    with _open() as cm:
        cm.add_message("User", "first topic")
        cm.present_rows([])
        cm.reset_head_window("The first topic is done.")
        assert _texts(cm) == ["first topic", "[Topic Transition] The first topic is done."]


# ------------------------------------------------ repair of what was never heard
def test_a_retraction_the_strategy_never_heard_is_repaired_when_it_loads(
    tmp_path: Path,
) -> None:
    path = tmp_path / "cm.db"
    with _open(_autobio(), path=path) as cm:
        ids = _talk(cm, 14)
        cm.present_rows([])
        cm.drain()
        assert _leaves(cm.strategy, ids) == {  # type: ignore[arg-type]
            "L1-0": [0, 1, 2, 3],
            "L1-1": [4, 5, 6, 7],
        }
    with _open(PassthroughStrategy(), path=path) as deaf:  # hears nothing it can keep
        deaf.retract_rows(ids[4:8])  # every row of L1-1 leaves the window
    strategy = _autobio()
    with _open(strategy, path=path) as cm:
        assert _leaves(strategy, ids) == {"L1-0": [0, 1, 2, 3]}  # let go on load
        assert all(
            4 not in c for c in [[ids.index(i) for i in x.source_ids] for x in strategy.chunks]
        )
        shown = _shown(cm, ids, 2000)
        assert _times_shown(shown) == Counter([0, 1, 2, 3, *range(8, 14)])


def test_a_redo_the_strategy_never_heard_demotes_the_memory_it_moved(tmp_path: Path) -> None:
    path = tmp_path / "cm.db"
    with _open(_autobio(), path=path) as cm:
        ids = _talk(cm, 14)
        cm.present_rows([])
        cm.drain()
    with _open(PassthroughStrategy(), path=path) as deaf:
        deaf.retract_rows(ids[4:6])
        deaf.present_rows(ids[4:6])  # m04 and m05 now stand after m13
    strategy = _autobio()
    with _open(strategy, path=path) as cm:
        # L1-1 stood for m04-m07, which are no longer one run: it is let go of
        assert _leaves(strategy, ids) == {"L1-0": [0, 1, 2, 3]}
        cm.drain()
        for memory, leaves in _leaves(strategy, ids).items():
            order = [cm.ordinal_of(ids[k]) for k in leaves]
            assert order == sorted(order) and len(set(order)) == len(order), memory
        tight = _shown(cm, ids, 120)
        assert _times_shown(tight) == Counter(range(14))  # every row once


def test_a_branch_at_a_presented_row_keeps_what_its_presentation_wrote() -> None:
    strategy = _autobio()
    with _open(strategy) as cm:
        cm.present_rows([])
        ids = _talk(cm, 14)  # stored, not presented yet: no chunk closes
        assert strategy.chunks == []
        before = cm.current_sequence()
        cm.present_rows(ids)  # the strategy closes its chunks as it hears the rows
        chunks = [(c.id, c.source_ids) for c in strategy.chunks]
        assert len(chunks) == 2
        cut = cm.branch_sequence_of(ids[-1])
        assert cut == cm.current_sequence() > before + 1  # after the whole call
        cm.branch_at(ids[-1], "kept")
        cm.switch_branch("kept")
        assert [(c.id, c.source_ids) for c in strategy.chunks] == chunks
        assert [m.id for m in cm.get_window_messages()] == ids
