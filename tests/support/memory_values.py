"""An agent whose memories keep exact values (:func:`open_cm`), a tau-bench reservation
talk that closes one chunk (:func:`reservation_talk`) and two ticket chunks merged into
one L2 (:func:`ticket_manager`)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from context_manager import (
    CharsCounter,
    ContextManager,
    ExtractiveSummarizer,
    ToolResultBlock,
    ToolUseBlock,
)
from context_manager.strategies.autobiographical import AutobiographicalStrategy

COUNTER = CharsCounter()

# tau-bench airline, a get_reservation_details result (verbatim)
RESERVATION = (
    '{"reservation_id": "JG7FMM", "user_id": "omar_davis_3817", "origin": "MCO", '
    '"destination": "CLT", "flight_type": "one_way", "cabin": "business", "flights": '
    '[{"origin": "MCO", "destination": "BOS", "flight_number": "HAT028", "date": '
    '"2024-05-21", "price": 1859}, {"origin": "BOS", "destination": "CLT", '
    '"flight_number": "HAT277", "date": "2024-05-21", "price": 1679}], "passengers": '
    '[{"first_name": "Omar", "last_name": "Davis", "dob": "1982-10-19"}, {"first_name": '
    '"Fatima", "last_name": "Patel", "dob": "1950-05-04"}], "payment_history": '
    '[{"payment_id": "credit_card_2929732", "amount": 7136}], "created_at": '
    '"2024-05-11T08:28:51", "total_baggages": 3, "nonfree_baggages": 0, "insurance": "yes"}'
)
PROSE = "Hi, I would like to look at my reservation JG7FMM please."


def open_cm(path: Path | str, **options: Any) -> ContextManager:
    """A manager on ``path`` whose memories keep up to 30 tokens of exact values: 200-token
    chunks of at least two messages, 20-token memories, a 40-token recent window
    (``options`` override any of them)."""
    config: dict[str, Any] = {
        "compression_model": "extractive",
        "target_chunk_tokens": 200,
        "min_chunk_messages": 2,
        "summary_target_tokens": 20,
        "memory_values_tokens": 30,
        "recent_window_tokens": 40,
        "l1_holdback_chunks": 0,
        **options,
    }
    return ContextManager.open(
        path=path,
        strategy=AutobiographicalStrategy(**config),
        summarizer=ExtractiveSummarizer(),
        counter=COUNTER,
    )


def reservation_talk(cm: ContextManager) -> list[str]:
    """Seven messages; the first three (203 tokens) close one chunk."""
    call = ToolUseBlock(
        id="call_1", name="get_reservation_details", input={"reservation_id": "JG7FMM"}
    )
    return [
        cm.add_message("User", PROSE),
        cm.add_message("Claude", [call]),
        cm.add_message("User", [ToolResultBlock(tool_use_id="call_1", content=RESERVATION)]),
        cm.add_message(
            "Claude", "Your reservation has two business flights on May 21st, through Boston."
        ),
        cm.add_message("User", "Thanks. Now I also want to check the baggage rules for my trip."),
        cm.add_message("Claude", "Business passengers may check two bags each at no extra cost."),
        cm.add_message("User", "Great, that is all."),
    ]


TICKETS = [
    ("User", "Open ticket T-48213-C about the login page."),
    ("Claude", "Opened it. The fix is in commit 9fceb02 on the main branch."),
    ("User", "Now ticket T-50077-A about the search page."),
    ("Claude", "Done. That fix is in commit 3ab61e7d on the main branch."),
    ("User", "Thanks."),
]


def ticket_manager(tmp_path: Path, values_tokens: int) -> ContextManager:
    """Two chunks of two messages (26 and 25 tokens), merged into one L2."""
    cm = open_cm(
        tmp_path / "t.db",
        target_chunk_tokens=25,
        summary_target_tokens=10,
        memory_values_tokens=values_tokens,
        merge_threshold=2,
        recent_window_tokens=0,
        min_chunk_chars_for_llm=0,
    )
    for who, text in TICKETS:
        cm.add_message(who, text)
    cm.drain()
    return cm
