"""What the harness sets on each policy (``settings(budget)``, ``peer_settings``), the
report's table of it (``settings_lines``), and LangMem configured for its window."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

import pytest

from context_manager.tokens import TiktokenCounter
from foldbench.benchmark import replay_policy, synthetic_transcript
from foldbench.peers.settings import PeerSettings
from foldbench.registry import is_ours, make_policy, peer_settings, policy_names
from foldbench.settings_table import HEADING, settings_lines

NAMES = policy_names(peers=None)
BUDGETS = (4000, 8000, 16000)
LANGMEM = "langmem-summarize-messages"
PLAIN = (int, float, str, bool, tuple, type(None))


@pytest.mark.parametrize("name", NAMES)
def test_every_policy_has_settings_with_a_library_version_and_reasons(name: str) -> None:
    for budget in BUDGETS:
        found = peer_settings(name, budget)
        assert isinstance(found, PeerSettings) and found.policy == name
        assert found.library and found.distribution
        assert found.version and found.version != "not installed"
        assert found.library_and_version.count(found.version) == 1
        if not is_ours(name) and found.distribution == "context-folding":
            assert found.library.startswith("reimplemented from ")
        assert found.settings, "every policy has settings"
        assert found.settings.keys() == found.reasons.keys() == found.values.keys()
        assert all(reason.strip() for reason in found.reasons.values())


@pytest.mark.parametrize("name", NAMES)
def test_settings_are_resolved_values_not_fractions(name: str) -> None:
    for budget in BUDGETS:
        found = peer_settings(name, budget)
        assert not [k for k in found.values if "fraction" in k]
        for key, value in found.values.items():
            assert isinstance(value, PLAIN), f"{name}: {key} is {value!r}"


def test_sizes_are_the_numbers_at_each_budget() -> None:
    installed = set(NAMES)
    for budget in BUDGETS:
        assert peer_settings("observation-masking", budget).values["fit to"] == budget
        assert peer_settings("anthropic-clear-tool-uses", budget).values["trigger"] == budget
        ours = peer_settings("ours:kv-stable", budget).values
        assert ours["target_chunk_tokens"] == max(200, budget // 12)
        assert ours["recent_window_tokens"] == budget // 4
        assert peer_settings("assemble", budget).values["input_limit"] == budget
        if "langchain-summarization-middleware" in installed:
            middleware = peer_settings("langchain-summarization-middleware", budget).values
            assert middleware["trigger"] == ("tokens", budget)
            assert middleware["keep"] == ("tokens", budget // 2)
            assert middleware["trim_tokens_to_summarize"] == 4000
            trim = peer_settings("langchain-trim-messages", budget).values
            assert trim["max_tokens"] == budget
            clear = peer_settings("langchain-clear-tool-uses", budget).values
            assert clear["trigger"] == budget and clear["keep"] == 3
        if "llamaindex-memory" in installed:
            memory = peer_settings("llamaindex-memory", budget).values
            assert memory["token_limit"] == budget
            assert memory["token_flush_size"] == budget // 10
        if LANGMEM in installed:
            langmem = peer_settings(LANGMEM, budget).values
            assert langmem["max_tokens"] == budget
            assert langmem["max_summary_tokens"] == budget // 10
            assert langmem["max_tokens_before_summary"] == budget - budget // 10
    for name in ("swe-agent-last-5-observations", "complexity-trap-hybrid"):
        assert peer_settings(name, 4000).values == peer_settings(name, 16000).values


def test_sizes_that_leave_the_system_prompt_out_subtract_it() -> None:
    assert peer_settings("observation-masking", 4000, system_tokens=500).values["fit to"] == 4000
    if LANGMEM in NAMES:
        found = peer_settings(LANGMEM, 4000, system_tokens=1000).values
        assert found["max_tokens"] == 4000
        assert found["max_tokens_before_summary"] == 4000 - 1000 - 400
    if "langchain-summarization-middleware" in NAMES:
        found = peer_settings("langchain-summarization-middleware", 4000, system_tokens=1000).values
        assert found["trigger"] == ("tokens", 3000) and found["keep"] == ("tokens", 1500)


def test_an_unknown_policy_has_no_settings() -> None:
    with pytest.raises(KeyError):
        peer_settings("no-such-policy", 4000)


# ------------------------------------------------------------------ the table
def test_the_table_has_a_row_per_policy() -> None:
    lines = settings_lines(NAMES, BUDGETS)
    assert lines[0] == HEADING == "## Peer settings"
    header = lines.index("| policy | library and version | settings | why |")
    assert lines[header + 1] == "|---|---|---|---|"
    rows = lines[header + 2 :]
    assert [row.split(" | ")[0].removeprefix("| ") for row in rows] == NAMES
    for row, name in zip(rows, NAMES, strict=True):
        assert row.endswith(" |") and row.count(" | ") == 3, row
        assert peer_settings(name, 4000).library_and_version in row


def test_the_table_shows_a_setting_once_or_at_each_budget() -> None:
    row = settings_lines(["observation-masking"], BUDGETS)[-1]
    assert "keep = 5;" in row  # the same everywhere: once
    assert "fit to = 4000 (4k), 8000 (8k), 16000 (16k)" in row


def test_the_table_needs_a_budget() -> None:
    with pytest.raises(ValueError, match="budget"):
        settings_lines(["assemble"], [])


# ------------------------------------------------------------------ LangMem
def test_langmem_is_within_budget_at_4k_on_a_short_synthetic_run() -> None:
    # max_summary_tokens at half the budget, and max_tokens_before_summary at the
    # whole of it, sent requests over the budget on most calls past the first summary
    pytest.importorskip("langmem")
    records = replay_policy(synthetic_transcript(120), LANGMEM, 4000)
    assert any(r.summarizer_calls for r in records), "a 4k budget makes LangMem summarise"
    assert all(r.error is None for r in records)
    assert [r.call for r in records if r.over_budget] == []
    # all that remains is LangMem folding the newest turn into its summary at times
    problems = {p for r in records for p in r.problems}
    assert problems <= {"the newest turn is not in the request"}


def test_langmem_is_given_what_its_settings_say(monkeypatch: pytest.MonkeyPatch) -> None:
    pytest.importorskip("langmem")
    from context_manager.messages import Message
    from foldbench.peers import langmem_peers

    given: list[dict[str, Any]] = []

    def summarize_messages(messages: list[Any], **kwargs: Any) -> Any:
        given.append(kwargs)
        return SimpleNamespace(messages=[], running_summary=None)

    monkeypatch.setattr(langmem_peers, "_summarize_messages", lambda: summarize_messages)
    history = [Message.text_message("System", "Be brief."), Message.text_message("User", "hi")]
    counter = TiktokenCounter()
    make_policy(LANGMEM, counter=counter).request(history, 8000)
    system = counter.count_message(history[0])
    expected = peer_settings(LANGMEM, 8000, system_tokens=system).values
    sizes = ("max_tokens", "max_summary_tokens", "max_tokens_before_summary")
    assert {k: given[0][k] for k in sizes} == {k: expected[k] for k in sizes}
    assert given[0]["max_tokens_before_summary"] < 8000 - expected["max_summary_tokens"]
