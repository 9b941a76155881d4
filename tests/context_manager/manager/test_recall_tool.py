"""Getting back what was folded, through the public API: ``search_memories`` over the
memories' prose and exact values, and the ``recall`` tool (``recall_tool`` and
``handle_recall``): a memory's messages in full, paged, or the stored messages matching
a grep, bounded; bad input is refused naming the field. Expected answers are written
out by hand."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from context_manager import CharsCounter, ConfigError, ContextManager
from context_manager.recall import RecallInputError, RecallTool
from tests.support.memory_values import (
    PROSE,
    RESERVATION,
    open_cm,
    reservation_talk,
    ticket_manager,
)

CALL = 'get_reservation_details({"reservation_id": "JG7FMM"})'
MEMORY_TEXT = f"[1] User: {PROSE}\n[2] Claude: {CALL}\n[3] User: {RESERVATION}"
"""The three messages the reservation memory L1-0 stands for, one per line."""


@pytest.fixture
def cm(tmp_path: Path) -> Any:
    manager = open_cm(tmp_path / "r.db")
    reservation_talk(manager)
    manager.drain()
    yield manager
    manager.close()


# --------------------------------------------------------------- search_memories
def test_a_memory_is_found_by_a_value_its_prose_lost(cm: ContextManager) -> None:
    found = cm.search_memories("hat277")
    assert [m.id for m in found] == ["L1-0"]
    assert "HAT277" not in found[0].content


def test_a_memory_is_found_by_its_prose(cm: ContextManager) -> None:
    assert [m.id for m in cm.search_memories("JG7FMM")] == ["L1-0"]
    assert cm.search_memories("seattle") == []


def test_search_ranks_value_matches_before_prose_matches(tmp_path: Path) -> None:
    cm = ticket_manager(tmp_path, 12)
    # L1-0 and L1-1 each hold one ticket as a value, L2-2 both; 'ticket' is in no
    # memory's prose ('Opened it.', 'Done.'), 'Opened' in L1-0's and L2-2's.
    assert [m.id for m in cm.search_memories("t-50077-a")] == ["L1-1", "L2-2"]
    assert [m.id for m in cm.search_memories("T-")] == ["L1-1", "L1-0", "L2-2"]
    assert [m.id for m in cm.search_memories("opened")] == ["L1-0", "L2-2"]
    assert [m.id for m in cm.search_memories("T-", limit=1)] == ["L1-1"]
    assert [m.id for m in cm.search_memories("T-", include_merged=False)] == ["L2-2"]
    cm.close()


def test_search_refuses_an_empty_query_or_a_bad_limit(cm: ContextManager) -> None:
    with pytest.raises(ConfigError, match="query"):
        cm.search_memories("  ")
    with pytest.raises(ConfigError, match="limit"):
        cm.search_memories("x", limit=0)


def test_without_memories_the_search_finds_none() -> None:
    with ContextManager.open(path=":memory:", counter=CharsCounter()) as cm:
        cm.add_message("User", "Ticket T-48213-C.")
        assert cm.search_memories("T-48213-C") == []


# ------------------------------------------------------------------ the tool
def test_the_tool_definition(cm: ContextManager) -> None:
    tool = cm.recall_tool()
    assert isinstance(tool, RecallTool)
    assert tool.name == tool.definition["name"] == "recall"
    schema = tool.definition["input_schema"]
    assert schema["type"] == "object" and schema["additionalProperties"] is False
    assert sorted(schema["properties"]) == ["grep", "limit", "memory_id", "offset", "regex"]
    assert cm.recall_tool(name="history").definition["name"] == "history"
    with pytest.raises(ConfigError, match="max_chars"):
        cm.recall_tool(max_chars=10)


def test_a_memory_expands_to_its_messages_in_full(cm: ContextManager) -> None:
    answer = cm.recall_tool()({"memory_id": "L1-0"})
    assert answer == "Memory L1-0 (level 1) stands for 3 messages, 1 to 3:\n" + MEMORY_TEXT
    assert answer == cm.handle_recall({"memory_id": "L1-0"})


def test_a_long_memory_is_paged_by_offset_without_losing_a_character(
    cm: ContextManager,
) -> None:
    tool = cm.recall_tool(max_chars=300)
    pieces, offset, notes = [], 0, 0
    while True:
        answer = tool({"memory_id": "L1-0", "offset": offset})
        assert len(answer) <= 300
        heading, _, body = answer.partition(":\n")
        assert heading.startswith("Memory L1-0 (level 1) stands for 3 messages, 1 to 3")
        if "\n[truncated: characters " not in body:
            pieces.append(body)
            break
        body, _, note = body.rpartition("\n")
        resume = int(note.rsplit("offset=", 1)[1].split(" ", 1)[0])
        assert note.endswith("for the rest]") and f"of {len(MEMORY_TEXT)} shown" in note
        skipped = MEMORY_TEXT[offset + len(body) : resume]
        assert set(skipped) <= {"\n"}  # at most the line end the page was cut at
        pieces.append(body + skipped)
        offset, notes = resume, notes + 1
    assert "".join(pieces) == MEMORY_TEXT
    assert notes >= 2
    past = tool({"memory_id": "L1-0", "offset": len(MEMORY_TEXT)})
    assert past.endswith(f"nothing is left to show past character {len(MEMORY_TEXT)}.")


def test_grep_finds_folded_and_raw_messages_with_their_memory(cm: ContextManager) -> None:
    answer = cm.handle_recall({"grep": "jg7fmm"})
    assert answer == "\n".join(
        [
            "3 of 7 stored messages match 'jg7fmm':",
            "[1] User (in memory L1-0):",
            f"  {PROSE}",
            "[2] Claude (in memory L1-0):",
            f"  {CALL}",
            "[3] User (in memory L1-0):",
            f"  {RESERVATION[:300]}...",  # the match is near the start of a long line
        ]
    )
    assert cm.handle_recall({"grep": "Rules"}) == (
        "1 of 7 stored messages match 'Rules':\n"
        "[7] User:\n"
        "  Thanks. Now I also want to check the baggage rules for my trip."
    )
    assert cm.handle_recall({"grep": "Seattle"}) == "0 of 7 stored messages match 'Seattle'."


def test_grep_says_when_it_left_matches_out(cm: ContextManager) -> None:
    answer = cm.handle_recall({"grep": "JG7FMM", "limit": 2})
    assert answer.splitlines()[-1] == (
        "[truncated: 2 of 3 matching messages shown; narrow grep or raise limit "
        "(at most 200), or expand a memory with memory_id]"
    )
    assert answer.count("(in memory L1-0)") == 2


def test_grep_takes_a_regular_expression(cm: ContextManager) -> None:
    answer = cm.handle_recall({"grep": r"two (bags|business)", "regex": True})
    assert answer == (
        "2 of 7 stored messages match 'two (bags|business)':\n"
        "[4] Claude:\n"
        "  Your reservation has two business flights on May 21st, through Boston.\n"
        "[8] Claude:\n"
        "  Business passengers may check two bags each at no extra cost."
    )


@pytest.mark.parametrize(
    ("tool_input", "field"),
    [
        ("L1-0", "input"),
        ({}, "input"),
        ({"memory_id": "L1-0", "grep": "x"}, "input"),
        ({"memory_id": "L1-0", "page": 2}, "page"),
        ({"memory_id": 7}, "memory_id"),
        ({"memory_id": "  "}, "memory_id"),
        ({"memory_id": "L9-9"}, "memory_id"),
        ({"memory_id": "L1-0", "offset": -1}, "offset"),
        ({"memory_id": "L1-0", "offset": True}, "offset"),
        ({"memory_id": "L1-0", "limit": 3}, "limit"),
        ({"grep": ""}, "grep"),
        ({"grep": 12}, "grep"),
        ({"grep": "x" * 501}, "grep"),
        ({"grep": "(", "regex": True}, "grep"),
        ({"grep": "x", "regex": "yes"}, "regex"),
        ({"grep": "x", "limit": "3"}, "limit"),
        ({"grep": "x", "limit": 201}, "limit"),
        ({"grep": "x", "offset": 3}, "offset"),
    ],
)
def test_bad_input_is_refused_naming_the_field(
    cm: ContextManager, tool_input: Any, field: str
) -> None:
    with pytest.raises(RecallInputError) as caught:
        cm.handle_recall(tool_input)
    assert caught.value.field == field
    assert isinstance(caught.value, ConfigError)


def test_an_unregexed_pattern_is_plain_text(cm: ContextManager) -> None:
    # '(' is a character to find, not a group: only the call's text has one
    assert cm.handle_recall({"grep": "("}) == (
        f"1 of 7 stored messages match '(':\n[2] Claude (in memory L1-0):\n  {CALL}"
    )


def test_without_memories_grep_works_and_memory_id_says_why_not() -> None:
    with ContextManager.open(path=":memory:", counter=CharsCounter()) as cm:
        cm.add_message("User", "Ticket T-48213-C is open.")
        assert cm.handle_recall({"grep": "t-48213-c"}) == (
            "1 of 1 stored messages match 't-48213-c':\n[1] User:\n  Ticket T-48213-C is open."
        )
        with pytest.raises(RecallInputError, match="passthrough strategy keeps no memories") as e:
            cm.handle_recall({"memory_id": "L1-0"})
        assert e.value.field == "memory_id"


def test_a_merged_memory_expands_to_every_message_below_it(tmp_path: Path) -> None:
    cm = ticket_manager(tmp_path, 12)
    assert cm.handle_recall({"memory_id": "L2-2"}) == (
        "Memory L2-2 (level 2) stands for 4 messages, 1 to 6:\n"
        "[1] User: Open ticket T-48213-C about the login page.\n"
        "[2] Claude: Opened it. The fix is in commit 9fceb02 on the main branch.\n"
        "[3] User: Now ticket T-50077-A about the search page.\n"
        "[6] Claude: Done. That fix is in commit 3ab61e7d on the main branch."
    )
    cm.close()
