"""Media normalisation, the result cap, normal pruning, emergency references, tail selection."""

from __future__ import annotations

import hashlib
import json
from typing import Any

import pytest
from pydantic import TypeAdapter

from context_manager.assembly import prune
from context_manager.assembly.capping import cap_results
from context_manager.assembly.emergency import emergency_reduce
from context_manager.assembly.media import normalise_media
from context_manager.assembly.selection import TailCut, select_tail
from context_manager.assembly.wire import WireMessage
from tests.support.assembly_fixtures import (
    assistant,
    call,
    image,
    inline_result,
    result,
    text,
    user,
)

ADAPTER: TypeAdapter[Any] = TypeAdapter(list[WireMessage])
USER_AGED = "[user image omitted after use; ask the user to resend it if visual details are needed]"
TOOL_AGED = "[tool image omitted after use; re-call the function if visual details are needed]"
NO_VISION = "[image omitted: model does not support vision]"


def parse(*messages: dict[str, Any]) -> list[Any]:
    return list(ADAPTER.validate_python(list(messages)))


def dump(messages: list[Any]) -> list[dict[str, Any]]:
    return [m.wire() for m in messages]


def compact_len(value: Any) -> int:
    return len(json.dumps(value, separators=(",", ":"), ensure_ascii=False).encode())


# ------------------------------------------------------------------ media
def test_vision_ages_user_images_after_an_answer_and_a_new_question() -> None:
    msgs = parse(user(image(), "look", ts=1), assistant("seen", ts=2), user("next", ts=3))
    out = normalise_media(msgs, True)
    assert dump(out)[0]["content"] == [text(USER_AGED), text("look")]
    # answered but no later question yet: kept
    kept = normalise_media(msgs[:2], True)
    assert kept[0] is msgs[0]


def test_vision_ages_tool_images_after_any_assistant() -> None:
    msgs = parse(
        assistant(call("c1", "screenshot"), image(), ts=1),
        result("c1", "screenshot", image(), "caption", ts=2),
        user(inline_result("c2", image(), text("inline")), ts=3),
        assistant("done", ts=4),
    )
    out = dump(normalise_media(msgs, True))
    assert out[0]["content"][1]["type"] == "image"  # assistant images stay
    assert out[1]["content"] == [text(TOOL_AGED), text("caption")]
    assert out[2]["content"][0]["content"] == [text(TOOL_AGED), text("inline")]
    fresh = normalise_media(msgs[:3], True)
    assert fresh[1] is msgs[1] and fresh[2] is msgs[2]


def test_text_only_model_drops_every_image() -> None:
    msgs = parse(
        user(image(), ts=1),
        assistant(image(), ts=2),
        user(inline_result("c", image()), ts=3),
    )
    out = dump(normalise_media(msgs, False))
    assert out[0]["content"] == [text(NO_VISION)]
    assert out[1]["content"] == [text(NO_VISION)]
    assert out[2]["content"][0]["content"] == [text(NO_VISION)]


def test_unknown_vision_keeps_images() -> None:
    msgs = parse(user(image(), ts=1), assistant("a", ts=2), user("b", ts=3))
    assert normalise_media(msgs, None) == msgs


# ------------------------------------------------------------------ cap
def marker(tokens: int, function_id: str) -> str:
    return (
        f"\n[…result capped: was ~{tokens} tokens; middle omitted; re-call {function_id} "
        "with narrower arguments if the omitted middle is needed]\n"
    )


def test_cap_keeps_60_percent_head_40_percent_tail_around_the_marker() -> None:
    body = "a" * 400 + "b" * 400  # 800 bytes = 200 tokens
    msgs = parse(assistant(call("c1", "read_file"), ts=1), result("c1", "read_file", body, ts=2))
    out = cap_results(msgs, 100)
    m = marker(200, "read_file")
    target = 800 * 100 * 9 // (200 * 10)
    keep = target - len(m.encode())
    head = keep * 6 // 10
    expected = "a" * head + m + "b" * (keep - head)
    assert dump(out.messages)[1]["content"] == [text(expected)]
    assert out.capped_parts == 1
    assert out.capped_tokens == (
        compact_len(dump(msgs)[1]) // 4 - compact_len(dump(out.messages)[1]) // 4
    )


def test_cap_leaves_a_result_exactly_at_the_limit() -> None:
    msgs = parse(result("c1", "f", "x" * 400, ts=1))
    assert cap_results(msgs, 100).capped_parts == 0
    assert cap_results(parse(result("c1", "f", "x" * 404, ts=1)), 100).capped_parts == 1


def test_cap_cuts_at_character_boundaries() -> None:
    body = "é" * 1000  # 2000 bytes, 500 tokens
    out = cap_results(parse(result("c", "f", body, ts=1)), 100)
    capped = out.messages[0].content[0].text
    m = marker(500, "f")
    head, _, tail = capped.partition(m)
    assert set(head) == {"é"} and set(tail) == {"é"}
    target = 2000 * 100 * 9 // (500 * 10)
    keep = target - len(m.encode())
    assert len(head.encode()) == (keep * 6 // 10) // 2 * 2
    assert len(tail.encode()) <= keep - keep * 6 // 10


def test_cap_counts_images_and_drops_them() -> None:
    msgs = parse(result("c", "shot", image("Z" * 50_000), "small caption", ts=1))
    out = cap_results(msgs, 4000)
    content = dump(out.messages)[0]["content"]
    assert len(content) == 1 and content[0]["type"] == "text"
    assert "was ~4099 tokens" in content[0]["text"]  # 4096 + 13 bytes // 4


def test_cap_replaces_large_details_but_not_denials() -> None:
    big = {"log": "x" * 3000}
    msgs = parse(
        result("c1", "f", "y" * 800, details=big, ts=1),
        result("c2", "f", "y" * 800, details={"status": "denied", "log": "x" * 3000}, ts=2),
        result("c3", "f", "y" * 800, details={"small": True}, ts=3),
    )
    out = dump(cap_results(msgs, 100).messages)
    assert out[0]["details"] == {"context_capped": {"original_estimated_tokens": 200}}
    assert out[1]["details"]["status"] == "denied"
    assert out[2]["details"] == {"small": True}


def test_inline_results_take_the_function_of_their_call() -> None:
    msgs = parse(
        assistant(call("c1", "grep"), ts=1),
        user(inline_result("c1", text("z" * 800)), inline_result("c9", text("z" * 800)), ts=2),
    )
    out = dump(cap_results(msgs, 100).messages)
    first, second = out[1]["content"]
    assert marker(200, "grep") in first["content"][0]["text"]
    assert marker(200, "the function") in second["content"][0]["text"]


def test_cap_is_idempotent_and_fits_the_cap() -> None:
    msgs = parse(result("c", "f", "q" * 10_000, ts=1))
    once = cap_results(msgs, 300)
    twice = cap_results(once.messages, 300)
    assert twice.capped_parts == 0 and dump(twice.messages) == dump(once.messages)
    assert len(once.messages[0].content[0].text.encode()) // 4 <= 300


def test_cap_zero_disables() -> None:
    msgs = parse(result("c", "f", "q" * 10_000, ts=1))
    assert cap_results(msgs, 0).capped_parts == 0


# ------------------------------------------------------------------ prune
def placeholder(function_id: str, tokens: int) -> str:
    return f"[output of {function_id} pruned: was ~{tokens} tokens; re-call it if still needed]"


def test_placeholder_is_75_bytes_18_tokens_for_four_digit_counts() -> None:
    ph = placeholder("web_search", 1234)
    assert len(ph.encode()) == 75 and len(ph.encode()) // 4 == 18


def run_prune(messages: list[dict[str, Any]], **options: Any) -> dict[str, Any]:
    return prune({"messages": messages, "options": options}).model_dump(exclude_none=True)


OPEN = {"protect_recent_tokens": 0, "protected_user_turns": 0, "min_free_tokens": 0}


def test_prune_replaces_verbose_results_and_keeps_metadata() -> None:
    msgs = [
        user("go", ts=1),
        assistant(call("c1", "web_search"), ts=2),
        result("c1", "web_search", "w" * 4936, details={"k": 1}, is_error=True, ts=3),
        assistant("done", ts=4),
    ]
    out = run_prune(msgs, **OPEN)
    ph = placeholder("web_search", 1234)
    assert out["messages"][2] == {**msgs[2], "content": [text(ph)]}
    assert (out["pruned_tokens"], out["pruned_parts"], out["scanned_parts"]) == (1234 - 18, 1, 1)
    assert out["messages"][:2] == msgs[:2] and out["messages"][3] == msgs[3]


def test_protect_window_fills_from_the_newest_side() -> None:
    msgs = []
    for n in range(3):
        msgs += [assistant(call(f"c{n}", "f"), ts=n), result(f"c{n}", "f", "r" * 4000, ts=n)]
    out = run_prune(msgs, **{**OPEN, "protect_recent_tokens": 1500})
    contents = [m["content"][0]["text"] for m in out["messages"][1::2]]
    # newest (1000 tokens) is inside the window; the one that pushes past 1500 is eligible
    assert contents == [placeholder("f", 1000), placeholder("f", 1000), "r" * 4000]
    assert out["scanned_parts"] == 3


def test_recent_user_turns_are_exempt_and_inline_results_are_not_turns() -> None:
    msgs = [
        user("q1", ts=1),
        assistant(call("c1", "f"), ts=2),
        result("c1", "f", "a" * 4000, ts=3),
        user("q2", ts=4),
        assistant(call("c2", "f"), ts=5),
        user(inline_result("c2", text("b" * 4000)), ts=6),
        user("q3", ts=7),
        assistant(call("c3", "f"), ts=8),
        result("c3", "f", "c" * 4000, ts=9),
    ]
    out = run_prune(msgs, **{**OPEN, "protected_user_turns": 2})
    texts = [json.dumps(m) for m in out["messages"]]
    assert placeholder("f", 1000) in texts[2]
    assert "b" * 4000 in texts[5] and "c" * 4000 in texts[8]  # within the two newest turns
    assert out["scanned_parts"] == 1
    everything = run_prune(msgs, **{**OPEN, "protected_user_turns": 0})
    assert everything["pruned_parts"] == 3


def test_protected_functions_are_skipped_and_not_scanned() -> None:
    msgs = [result("c1", "keep_me", "a" * 4000, ts=1), result("c2", "f", "a" * 4000, ts=2)]
    out = run_prune(msgs, **OPEN, protected_functions=["keep_me"])
    assert out["messages"][0] == msgs[0]
    assert (out["pruned_parts"], out["scanned_parts"]) == (1, 1)


def test_min_free_tokens_gates_the_whole_pass() -> None:
    msgs = [result("c1", "f", "a" * 4000, ts=1)]
    out = run_prune(msgs, **{**OPEN, "min_free_tokens": 1000})
    assert out["messages"] == msgs
    assert (out["pruned_tokens"], out["pruned_parts"], out["scanned_parts"]) == (0, 0, 1)
    assert run_prune(msgs, **{**OPEN, "min_free_tokens": 1000 - 16})["pruned_parts"] == 1


def test_short_results_are_pruned_only_when_aged() -> None:
    msgs = [
        result("c1", "f", "s" * 400, ts=1),  # 100 tokens, not verbose
        user("later 1", ts=2),
        user("later 2", ts=3),
    ]
    assert run_prune(msgs, **OPEN)["pruned_parts"] == 0
    aged = run_prune(msgs, **OPEN, decay_user_turns=2)
    assert aged["messages"][0]["content"] == [text(placeholder("f", 100))]
    assert run_prune(msgs, **OPEN, decay_user_turns=3)["pruned_parts"] == 0


def test_aged_results_smaller_than_their_placeholder_stay() -> None:
    msgs = [result("c1", "f", "tiny", ts=1), user("later", ts=2)]
    out = run_prune(msgs, **OPEN, decay_user_turns=1)
    assert out["pruned_parts"] == 0 and out["scanned_parts"] == 1


def test_prune_is_idempotent_with_and_without_decay() -> None:
    msgs = [
        result("c1", "f", "a" * 4000, ts=1),
        user("later", ts=2),
        result("c2", "g", "b" * 600, ts=3),
        user("now", ts=4),
    ]
    for decay in (0, 1):
        once = run_prune(msgs, **OPEN, decay_user_turns=decay)
        assert once["pruned_parts"] >= 1
        twice = run_prune(once["messages"], **OPEN, decay_user_turns=decay)
        assert twice["messages"] == once["messages"] and twice["pruned_parts"] == 0


def test_prune_options_fall_back_to_config_but_honour_zero() -> None:
    msgs = [result("c1", "f", "a" * 4000, ts=1)]
    # defaults: 40000 protected tokens and a 20000 minimum saving -> nothing
    assert run_prune(msgs)["pruned_parts"] == 0
    assert run_prune(msgs, **OPEN)["pruned_parts"] == 1


# ------------------------------------------------------------------ emergency references
def test_emergency_references_are_bounded_and_deterministic() -> None:
    body = "line of output\n" * 20_000
    msgs = parse(
        assistant(call("c1", "run_tests", {"path": "tests/"}), ts=1),
        result("c1", "run_tests", body, details={"exit": 1}, ts=2),
        assistant("ok", ts=3),
    )
    out = emergency_reduce(msgs, 1)
    again = emergency_reduce(msgs, 1)
    assert dump(out.messages) == dump(again.messages)
    reduced = dump(out.messages)[1]
    original = dump(msgs)[1]
    serial = json.dumps(original, separators=(",", ":"), ensure_ascii=False).encode()
    ref = reduced["details"]["context_reference"]
    assert ref == {
        "kind": "function_result_reference",
        "function_id": "run_tests",
        "function_call_id": "c1",
        "original_bytes": len(serial),
        "original_estimated_tokens": compact_len({**original, "details": None}) // 4,
        "sha256": hashlib.sha256(serial).hexdigest(),
        "preview": body[:160] + "…",
        "retrieval_hint": (
            "The original result remains in the session transcript; "
            "retrieve it by function_call_id."
        ),
    }
    rendered = reduced["content"][0]["text"]
    assert rendered == "[function result reduced for context budget] " + json.dumps(
        ref, separators=(",", ":"), ensure_ascii=False
    )
    assert len(rendered.encode()) < 2000
    for key in ("function_call_id", "function_id", "is_error", "timestamp"):
        assert reduced[key] == original[key]
    assert out.replaced == 1 and out.freed_tokens > 0


def test_emergency_goes_largest_first_and_stops_when_enough_is_freed() -> None:
    msgs = parse(
        result("c1", "f", "a" * 8000, ts=1),
        result("c2", "f", "b" * 40_000, ts=2),
        result("c3", "f", "c" * 8000, ts=3),
    )
    out = emergency_reduce(msgs, 5000)
    texts = [m["content"][0]["text"] for m in dump(out.messages)]
    assert texts[0] == "a" * 8000 and texts[2] == "c" * 8000
    assert texts[1].startswith("[function result reduced")
    both = emergency_reduce(msgs, 10_500)
    reduced = [m["content"][0]["text"].startswith("[function") for m in dump(both.messages)]
    assert reduced == [True, True, False]  # a tie goes to the earlier result


def test_emergency_inline_reference_omits_unresolved_function() -> None:
    msgs = parse(user(text("keep me"), inline_result("c7", text("x" * 9000)), ts=1))
    out = dump(emergency_reduce(msgs, 1).messages)[0]
    assert out["content"][0] == text("keep me")
    inner = out["content"][1]["content"][0]["text"]
    ref = json.loads(inner.removeprefix("[function result reduced for context budget] "))
    assert "function_id" not in ref and ref["function_call_id"] == "c7"
    assert ref["preview"] == "x" * 160 + "…"


def test_preview_falls_back_to_details() -> None:
    msgs = parse(result("c1", "f", image("Q" * 100), details={"note": "n" * 300}, ts=1))
    ref = dump(emergency_reduce(msgs, 1).messages)[0]["details"]["context_reference"]
    assert ref["preview"] == json.dumps({"note": "n" * 300}, separators=(",", ":"))[:160] + "…"


# ------------------------------------------------------------------ tail selection
def sizes(n: int, each: int = 10) -> list[int]:
    return [each] * n


def test_select_whole_head_without_turns_or_tail_turns() -> None:
    msgs = parse(user("a", ts=1), assistant("b", ts=2))
    assert select_tail(msgs, sizes(2), 100, 0) == TailCut(2, None)
    only_bot = parse(assistant("b", ts=2))
    assert select_tail(only_bot, sizes(1), 100, 2) == TailCut(1, None)


def test_select_takes_whole_turns_within_budget() -> None:
    msgs = parse(*(m for n in range(4) for m in (user(f"u{n}"), assistant(f"a{n}"))))
    assert select_tail(msgs, sizes(8), 40, 2) == TailCut(4, 4)
    assert select_tail(msgs, sizes(8), 40, 1) == TailCut(6, 6)


def test_select_splits_a_turn_at_its_first_fitting_safe_cut() -> None:
    msgs = parse(
        user("u0"),
        assistant("a0"),
        user("u1"),
        assistant(call("c1", "f")),
        result("c1", "f", "r"),
        assistant(call("c2", "f")),
        result("c2", "f", "r"),
        assistant("a1"),
    )
    # whole turn 1 is 60; from message 5 on it is 30
    assert select_tail(msgs, sizes(8), 35, 2) == TailCut(5, 5)
    assert select_tail(msgs, sizes(8), 50, 2) == TailCut(3, 3)


def test_an_unsafe_turn_rides_with_the_older_turn() -> None:
    msgs = parse(
        user("u0"),
        assistant("a0"),
        user("u1"),
        assistant(call("c1", "f")),
        user(inline_result("c1", text("r"))),  # starts a turn, but is not a safe cut
        assistant("a1"),
    )
    assert select_tail(msgs, sizes(6), 100, 2) == TailCut(2, 2)
    assert select_tail(msgs, sizes(6), 100, 1) == TailCut(2, 2)  # never an empty tail


def test_select_never_leaves_an_empty_tail() -> None:
    msgs = parse(user("u0"), assistant("a0"), user("u1"), assistant("a1"))
    assert select_tail(msgs, [10, 10, 500, 500], 100, 2) == TailCut(2, 2)
    assert select_tail(parse(user("u0"), assistant("a0")), sizes(2), 100, 2) == TailCut(0, 0)


@pytest.mark.parametrize("tail_turns", [1, 2, 3])
def test_select_cuts_only_at_safe_cuts(tail_turns: int) -> None:
    msgs = parse(
        user("u0"),
        assistant(call("c1", "f")),
        result("c1", "f", "r"),
        user("u1"),
        assistant(call("c2", "f")),
        result("c2", "f", "r"),
        assistant("a"),
    )
    for budget in range(0, 80, 5):
        sel = select_tail(msgs, sizes(7), budget, tail_turns)
        assert sel.tail_start is not None
        if sel.head_len:
            assert msgs[sel.head_len].role in ("user", "assistant")
