"""Memories keep exact values: an L1 from its chunk's messages, a merge from its
children's, stored with the memory (a reopened store reads them back; an older one
without them still loads), capped by ``memory_values_tokens`` and shown on one line
after the prose in what a compile sends, priced with the memory so every request stays
within its budget. Expected values are worked out by hand (chars / 4 tokens)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from context_manager import ContextManager, OverBudgetError
from tests.support.memory_values import (
    COUNTER,
    PROSE,
    TICKETS,
    open_cm,
    reservation_talk,
    ticket_manager,
)

VALUES = (
    "credit_card_2929732",
    "omar_davis_3817",
    "HAT028",
    "HAT277",
    "2024-05-11T08:28:51",
    "2024-05-21",
    "1982-10-19",
)
"""The chunk's values ranked (JG7FMM is in the prose), as many as 30 tokens hold: their
line is 111 characters (28 tokens), and 1950-05-04 would make it 123 (31)."""
LINE = "Exact values: " + "; ".join(VALUES)


def only_memory(cm: ContextManager) -> Any:
    (memory,) = cm.search_summaries(include_merged=True)
    return memory[0]


def test_an_l1_keeps_the_values_its_prose_does_not_hold(tmp_path: Path) -> None:
    cm = open_cm(tmp_path / "a.db")
    reservation_talk(cm)
    cm.drain()
    memory = only_memory(cm)
    assert memory.content == PROSE  # what the extractive summariser wrote
    assert memory.values == VALUES
    cm.close()


def test_values_are_read_back_from_a_reopened_store(tmp_path: Path) -> None:
    cm = open_cm(tmp_path / "a.db")
    reservation_talk(cm)
    cm.drain()
    before = [m.text for m in cm.compile(max_tokens=150, reserve_for_response=0).messages]
    cm.close()
    cm = open_cm(tmp_path / "a.db")
    assert only_memory(cm).values == VALUES
    after = [m.text for m in cm.compile(max_tokens=150, reserve_for_response=0).messages]
    assert after == before
    cm.close()


def test_a_store_written_before_values_still_loads(tmp_path: Path) -> None:
    cm = open_cm(tmp_path / "a.db")
    reservation_talk(cm)
    cm.drain()
    strategy: Any = cm._strategy
    records = strategy.state.records
    memory = only_memory(cm)
    old_body = {k: v for k, v in memory.body().items() if k != "values"}
    records.store.edit(records.slot("autobio:summaries"), memory.item, old_body)
    cm.close()
    cm = open_cm(tmp_path / "a.db")
    memory = only_memory(cm)
    assert memory.values == ()
    texts = [m.text for m in cm.compile(max_tokens=150, reserve_for_response=0).messages]
    assert PROSE in texts and not any("Exact values" in t for t in texts)
    cm.close()


def test_the_request_shows_the_values_after_the_prose_within_budget(tmp_path: Path) -> None:
    cm = open_cm(tmp_path / "a.db")
    reservation_talk(cm)
    cm.drain()
    result = cm.compile(max_tokens=150, reserve_for_response=0)
    texts = [m.text for m in result.messages]
    assert texts == [
        "What do you remember from earlier?",
        f"{PROSE}\n{LINE}",
        "Your reservation has two business flights on May 21st, through Boston.",
        "Thanks. Now I also want to check the baggage rules for my trip.",
        "Business passengers may check two bags each at no extra cost.",
        "Great, that is all.",
    ]
    # the question (34 characters: 9 tokens), the memory (57 characters of prose, a
    # newline and the 111 of the line: 169, 43 tokens), then 18 + 16 + 16 + 5 raw
    sent = sum(COUNTER.count_message(m) for m in result.messages)
    assert sent == result.render_stats["tokens"] == 107
    cm.close()


def test_every_budget_is_kept_or_refused(tmp_path: Path) -> None:
    cm = open_cm(tmp_path / "a.db")
    reservation_talk(cm)
    cm.drain()
    fitted = []
    for budget in range(60, 320, 7):
        try:
            result = cm.compile(max_tokens=budget, reserve_for_response=0)
        except OverBudgetError:
            continue
        sent = sum(COUNTER.count_message(m) for m in result.messages)
        assert sent <= budget
        fitted.append(budget)
    # the memory with its values (9 + 43) and the messages after it (55): 107 at least
    assert fitted and min(fitted) == 109
    cm.close()


def test_the_memory_renders_the_same_bytes_on_every_call(tmp_path: Path) -> None:
    cm = open_cm(tmp_path / "a.db")
    reservation_talk(cm)
    cm.drain()
    first = cm.compile(max_tokens=150, reserve_for_response=0).messages[1].text
    cm.add_message("Claude", "Anything else?")
    second = cm.compile(max_tokens=150, reserve_for_response=0).messages[1].text
    assert first == second == f"{PROSE}\n{LINE}"
    cm.close()


def test_a_zero_allowance_keeps_no_values(tmp_path: Path) -> None:
    cm = open_cm(tmp_path / "a.db", memory_values_tokens=0)
    reservation_talk(cm)
    cm.drain()
    assert only_memory(cm).values == ()
    texts = [m.text for m in cm.compile(max_tokens=150, reserve_for_response=0).messages]
    assert texts[1] == PROSE
    cm.close()


def test_the_default_allowance_is_a_quarter_of_the_memory_target(tmp_path: Path) -> None:
    # summary_target_tokens=48: 12 tokens (48 characters) of values. The line of the
    # first two is 'Exact values: credit_card_2929732; omar_davis_3817' (50, 13 tokens):
    # the first alone (33, 9 tokens), then HAT028 (41, 11) fits, HAT277 (49) does not,
    # nor any date ('; 2024-05-21' makes 53).
    cm = open_cm(tmp_path / "a.db", memory_values_tokens=None, summary_target_tokens=48)
    reservation_talk(cm)
    cm.drain()
    memory = only_memory(cm)
    # the longer memory also quotes the call; the values are the same
    assert memory.content == f'{PROSE}\nget_reservation_details({{"reservation_id": "JG7FMM"}})'
    assert memory.values == ("credit_card_2929732", "HAT028")
    cm.close()


# ---------------------------------------------------------------------- merges
def memories(cm: ContextManager) -> dict[int, list[Any]]:
    out: dict[int, list[Any]] = {}
    for memory, _ in cm.search_summaries(include_merged=True):
        out.setdefault(memory.level, []).append(memory)
    return out


def test_a_merge_carries_its_childrens_values_up(tmp_path: Path) -> None:
    cm = ticket_manager(tmp_path, 12)
    by_level = memories(cm)
    # each L1 may hold a quarter of its 26 or 25 tokens: 6, the user's ticket alone
    l1 = sorted(by_level[1], key=lambda m: m.id)
    assert [m.values for m in l1] == [("T-48213-C",), ("T-50077-A",)]
    (l2,) = by_level[2]
    assert l2.source_ids == [m.id for m in l1]
    # both tickets: 'Exact values: T-48213-C; T-50077-A' is 34 characters (9 <= 12)
    assert l2.values == ("T-48213-C", "T-50077-A")
    cm.close()


def test_a_merge_keeps_the_best_values_that_fit_its_cap(tmp_path: Path) -> None:
    cm = ticket_manager(tmp_path, 8)
    (l2,) = memories(cm)[2]
    # 8 tokens hold 32 characters: the older ticket (first seen) alone
    assert l2.values == ("T-48213-C",)
    cm.close()


def test_a_merge_keeps_its_values_across_a_reopen(tmp_path: Path) -> None:
    ticket_manager(tmp_path, 12).close()
    cm = open_cm(tmp_path / "t.db", target_chunk_tokens=25, summary_target_tokens=10)
    (l2,) = memories(cm)[2]
    assert l2.values == ("T-48213-C", "T-50077-A")
    cm.close()


def test_the_folded_request_shows_the_merge_and_its_values(tmp_path: Path) -> None:
    cm = ticket_manager(tmp_path, 12)
    result = cm.compile(max_tokens=30, reserve_for_response=0)
    texts = [m.text for m in result.messages]
    (l2,) = memories(cm)[2]
    assert texts == [
        "What do you remember from earlier?",
        f"{l2.content}\nExact values: T-48213-C; T-50077-A",
        "Thanks.",
    ]
    assert sum(COUNTER.count_message(m) for m in result.messages) <= 30
    cm.close()


@pytest.mark.parametrize("values_tokens", [0, 8, 12])
def test_a_merged_memory_never_costs_more_than_its_children(
    tmp_path: Path, values_tokens: int
) -> None:
    cm = ticket_manager(tmp_path, values_tokens)
    by_level = memories(cm)
    (l2,) = by_level[2]
    strategy: Any = cm._strategy
    ctx = cm._ctx
    children = sum(strategy.recall_tokens(ctx, m) for m in by_level[1])
    assert strategy.recall_tokens(ctx, l2) <= children
    cm.close()


def test_a_merge_above_l2_takes_its_childrens_values_rank_by_rank(tmp_path: Path) -> None:
    cm = open_cm(
        tmp_path / "t.db",
        target_chunk_tokens=25,
        summary_target_tokens=10,
        memory_values_tokens=12,
        merge_threshold=2,
        recent_window_tokens=0,
        min_chunk_chars_for_llm=0,
    )
    for who, text in [*TICKETS[:4], *TICKETS_LATER, ("User", "Thanks.")]:
        cm.add_message(who, text)
    cm.drain()
    by_level = memories(cm)
    older, newer = sorted(by_level[2], key=lambda m: int(m.first))
    assert older.values == ("T-48213-C", "T-50077-A")
    assert newer.values == ("T-61420-B", "T-70315-D")
    (l3,) = by_level[3]
    # each L2's best, oldest first, then each one's second: three fit 12 tokens
    # ('Exact values: T-48213-C; T-61420-B; T-50077-A' is 45 characters, 12 tokens; a
    # fourth makes 56, 14); ranked over the messages instead, the older L2's two
    # tickets (first seen) would come first
    assert l3.values == ("T-48213-C", "T-61420-B", "T-50077-A")
    cm.close()


TICKETS_LATER = [
    ("User", "Open ticket T-61420-B about the cart page."),
    ("Claude", "Opened it. The fix is in commit 5d2c8e1 on the main branch."),
    ("User", "Now ticket T-70315-D about the help page."),
    ("Claude", "Done. That fix is in commit 7e4f09a2 on the main branch."),
]
