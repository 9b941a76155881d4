"""A configuration ported from the TypeScript reference: its options this config
refuses, with what to use instead, and ``AutobiographicalConfig.reference()``."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest
from pydantic import ValidationError

from context_manager import CharsCounter, ConfigError, ContextManager, ExtractiveSummarizer
from context_manager.strategies.autobiographical import (
    AutobiographicalConfig,
    AutobiographicalStrategy,
)
from context_manager.strategies.autobiographical.config import (
    UNSUPPORTED_ERROR_TYPE,
    UNSUPPORTED_OPTIONS,
    UnsupportedOption,
    UnsupportedOptionError,
)
from solvers.kv_stable import KvStableConfig

ROOT = Path(__file__).resolve().parents[3]
DOC = ROOT / "docs" / "reference-defaults.md"

CONFIG_OPTIONS = sorted(n for n, e in UNSUPPORTED_OPTIONS.items() if e.solver is None)
KV_STABLE_OPTIONS = sorted(n for n, e in UNSUPPORTED_OPTIONS.items() if e.solver == "kv-stable")


def refusal(options: dict[str, Any]) -> dict[str, Any]:
    """The one error ``AutobiographicalConfig(**options)`` raises."""
    with pytest.raises(ValidationError) as caught:
        AutobiographicalConfig(**options)
    errors = caught.value.errors()
    assert len(errors) == 1, errors
    return dict(errors[0])


def expected(entry: UnsupportedOption) -> str:
    state = "not supported yet; for now," if entry.planned else "not supported: use"
    return f"{state} {entry.use}"


# ------------------------------------------------------------------ the table
def test_the_issue_options_are_all_in_the_table() -> None:
    names = {e.reference for e in UNSUPPORTED_OPTIONS.values()}
    assert {
        "maxSpeculativeL1s",
        "positionedRecallPairs",
        "recallEnvelope",
        "carrierPolicy",
        "enforceBudget",
        "mergeContiguityGapLimit",
        "compressionMergeSourceOnly",
        "compressionMaxTokens",
        "identityReminder",
        "compressionSplitPlaceholder",
        "compressionSplitMaxCallsPer10Min",
        "quarantineAlarmIntervalMs",
        "productionBudgetTokens",
        "logEffectiveConfig",
        "cacheCold",
        "deferWhenWarm",
    } <= names
    planned = {n for n, e in UNSUPPORTED_OPTIONS.items() if e.planned}
    assert planned == set()


def test_no_refused_option_is_an_option_here() -> None:
    """An option implemented later must leave the table (it would be accepted anyway)."""
    fields = set(AutobiographicalConfig.model_fields)
    assert not fields & set(UNSUPPORTED_OPTIONS)
    assert not set(KvStableConfig.model_fields) & set(KV_STABLE_OPTIONS)
    spellings = [e.reference for e in UNSUPPORTED_OPTIONS.values()]
    assert len(set(spellings)) == len(spellings)
    assert all(e.use and not e.use.endswith(".") for e in UNSUPPORTED_OPTIONS.values())
    assert not any("|" in e.use for e in UNSUPPORTED_OPTIONS.values())  # a docs table cell


# ------------------------------------------------------------------ refused, by name
@pytest.mark.parametrize("name", CONFIG_OPTIONS)
@pytest.mark.parametrize("spelling", ["snake", "camel"])
def test_a_reference_option_is_refused_with_what_to_use(name: str, spelling: str) -> None:
    entry = UNSUPPORTED_OPTIONS[name]
    given = name if spelling == "snake" else entry.reference
    error = refusal({given: 1})
    assert error["type"] == UNSUPPORTED_ERROR_TYPE
    message = error["msg"]
    assert message.startswith(f"{given} (")
    assert name in message and entry.reference in message
    assert message.endswith(expected(entry))
    assert error["ctx"]["options"] == [given]


@pytest.mark.parametrize("name", KV_STABLE_OPTIONS)
@pytest.mark.parametrize("spelling", ["snake", "camel"])
@pytest.mark.parametrize("solver", [{"solver": "kv-stable"}, {}, {"adaptive_resolution": False}])
def test_a_reference_kv_stable_option_is_refused_with_what_to_use(
    name: str, spelling: str, solver: dict[str, Any]
) -> None:
    entry = UNSUPPORTED_OPTIONS[name]
    given = name if spelling == "snake" else entry.reference
    error = refusal({**solver, "solver_options": {given: True}})
    assert error["type"] == UNSUPPORTED_ERROR_TYPE
    message = error["msg"]
    assert message.startswith(f"solver_options of kv-stable: {given} (")
    assert message.endswith(expected(entry))
    assert "reach_tokens" in message or "fold" in message


def test_a_kv_stable_option_under_another_solver_is_that_solvers_to_judge() -> None:
    config = AutobiographicalConfig(solver="oldest-first", solver_options={"strict_reach": True})
    with pytest.raises(ConfigError, match="strict_reach") as caught:
        AutobiographicalStrategy(config)
    assert not isinstance(caught.value, UnsupportedOptionError)


def test_the_message_says_not_supported_use() -> None:
    message = refusal({"enforceBudget": False})["msg"]
    assert message == (
        "enforceBudget (the reference's option, enforce_budget in snake_case) is not "
        "supported: use over_budget_grace_ratio to tolerate an overshoot (taken from the "
        "response reserve); the budget is always enforced"
    )
    message = refusal({"audit_only": True})["msg"]
    assert message.startswith(
        "audit_only (the reference's auditOnly) is not supported: use "
        "ContextManager.open(audit_only=True)"
    )


def test_every_refused_option_given_is_named_in_one_error() -> None:
    error = refusal({"maxSpeculativeL1s": 2, "recent_window_tokens": 500, "enforce_budget": False})
    assert error["ctx"]["options"] == ["maxSpeculativeL1s", "enforce_budget"]
    assert "maxSpeculativeL1s (" in error["msg"] and "; enforce_budget (" in error["msg"]


# ------------------------------------------------------------------ camelCase of ours
@pytest.mark.parametrize(
    ("given", "ours"),
    [
        ("recentWindowTokens", "recent_window_tokens"),
        ("compressionSlackRatio", "compression_slack_ratio"),
        ("minChunkCharsForLLM", "min_chunk_chars_for_llm"),
        ("l1BudgetTokens", "l1_budget_tokens"),
        ("foldingStrategy", "solver"),  # the reference's name of the solver option
    ],
)
def test_the_references_spelling_of_an_option_here_names_the_snake_case_one(
    given: str, ours: str
) -> None:
    error = refusal({given: 1})
    assert error["type"] == UNSUPPORTED_ERROR_TYPE
    assert error["msg"] == f"{given} is the reference's spelling: use the snake_case name {ours}"


def test_the_references_spelling_of_a_kv_stable_option_names_the_snake_case_one() -> None:
    error = refusal({"solver_options": {"reachTokens": 5000, "quality_gap": 0.2}})
    assert error["msg"] == (
        "solver_options of kv-stable: reachTokens is the reference's spelling: use the "
        "snake_case name reach_tokens"
    )


def test_an_unknown_option_is_still_refused_as_unknown() -> None:
    assert refusal({"bogus_option": 1})["type"] == "extra_forbidden"
    assert refusal({"someCamelThing": 1})["type"] == "extra_forbidden"


# ------------------------------------------------------------------ through the strategy
def test_the_strategy_raises_a_typed_error_with_the_message_intact() -> None:
    with pytest.raises(UnsupportedOptionError) as caught:
        AutobiographicalStrategy(compression_model="m", maxSpeculativeL1s=3)
    assert isinstance(caught.value, ConfigError)
    assert caught.value.options == ("maxSpeculativeL1s",)
    entry = UNSUPPORTED_OPTIONS["max_speculative_l1s"]
    assert str(caught.value).endswith(expected(entry))
    assert str(caught.value).startswith("maxSpeculativeL1s (")
    with pytest.raises(ValidationError):  # other problems are as before
        AutobiographicalStrategy(compression_model="m", recent_window_tokens=-1)


def test_overrides_of_a_preview_name_the_refused_option() -> None:
    base = AutobiographicalStrategy(compression_model="m")
    with pytest.raises(
        UnsupportedOptionError,
        match=r"^overrides rejected: solver_options of kv-stable: cache_cold ",
    ) as c:
        base.with_options(solver_options={"cache_cold": True})
    assert c.value.options == ("cache_cold",)
    with pytest.raises(UnsupportedOptionError, match="use the snake_case name head_window"):
        base.with_options(headWindowTokens=0)
    with ContextManager.open(
        path=":memory:",
        strategy=AutobiographicalStrategy(compression_model="extractive"),
        summarizer=ExtractiveSummarizer(),
        counter=CharsCounter(),
    ) as cm:
        cm.add_message("User", "hello")
        with pytest.raises(UnsupportedOptionError, match="not supported: use memory_schedule"):
            cm.preview_context(max_tokens=4000, overrides={"max_speculative_l1s": 1})


# ------------------------------------------------------------------ reference()
def test_reference_gives_the_references_defaults() -> None:
    config = AutobiographicalConfig.reference()
    assert config.adaptive_resolution is False
    assert config.solver_and_options[0] == "threshold-pyramid"
    assert config.solver == "flat-profile"
    assert config.compression_slack_ratio == 0.1
    assert config.over_budget_grace_ratio == 0.02
    assert config.merge_max_source_span_messages == 1500
    assert config.compression_source_only is False
    assert config.memory_values_tokens == 0 and config.values_tokens() == 0
    assert config.fold_window is False
    assert config.summary_max_tokens == 16_000 == config.memory_limit()
    # shared with this library's defaults
    assert (config.target_chunk_tokens, config.recent_window_tokens) == (3000, 30_000)
    assert (config.merge_threshold, config.summary_target_tokens) == (6, 2000)


def test_reference_takes_overrides() -> None:
    config = AutobiographicalConfig.reference(
        adaptive_resolution=True, compression_slack_ratio=0.2, summary_target_tokens=20_000
    )
    assert config.solver_and_options == ("flat-profile", {})
    assert config.compression_slack_ratio == 0.2
    assert config.summary_max_tokens == 30_000  # the output cap follows the target
    assert AutobiographicalConfig.reference(summary_max_tokens=None).summary_max_tokens is None
    with pytest.raises(ValidationError, match="not supported"):
        AutobiographicalConfig.reference(enforce_budget=True)


def words(n: int, tag: str) -> str:
    return " ".join(f"{tag}{i}" for i in range(n))


@pytest.mark.parametrize("adaptive", [False, True])
def test_reference_builds_a_strategy_that_folds(adaptive: bool) -> None:
    config = AutobiographicalConfig.reference(
        compression_model="extractive",
        adaptive_resolution=adaptive,
        target_chunk_tokens=300,
        recent_window_tokens=600,
        summary_target_tokens=60,
        l1_holdback_chunks=0,
        l1_budget_tokens=600,
        l2_budget_tokens=600,
        l3_budget_tokens=600,
    )
    strategy = AutobiographicalStrategy(config)
    assert strategy.solver[0] == ("flat-profile" if adaptive else "threshold-pyramid")
    with ContextManager.open(
        path=":memory:",
        strategy=strategy,
        summarizer=ExtractiveSummarizer(),
        counter=CharsCounter(),
    ) as cm:
        for i in range(40):
            cm.add_message("User" if i % 2 == 0 else "Claude", words(40, f"m{i}w"))
        cm.drain()
        assert strategy.summaries  # memories were written
        result = cm.compile(max_tokens=2500, reserve_for_response=500)
        texts = [m.text for m in result.messages]
        assert texts[-1] == words(40, "m39w")  # the newest message, raw
        assert len(result.messages) < 40  # older history folded into memories
        assert sum(CharsCounter().count_message(m) for m in result.messages) <= 2000


# ------------------------------------------------------------------ the docs table
def doc_section(title: str) -> str:
    text = DOC.read_text(encoding="utf-8")
    start = text.index(title)
    end = text.find("\n#", start + len(title))
    return text[start : end if end >= 0 else len(text)]


def table_rows(section: str) -> list[list[str]]:
    rows = []
    for line in section.splitlines():
        if line.startswith("|") and not line.startswith("|---"):
            rows.append([cell.strip() for cell in line.strip("|").split("|")])
    return rows[1:]  # without the header


def test_every_default_reference_changes_is_in_the_docs_table() -> None:
    ours = AutobiographicalConfig()
    reference = AutobiographicalConfig.reference()
    changed = {
        name
        for name in AutobiographicalConfig.model_fields
        if getattr(ours, name) != getattr(reference, name)
    }
    assert changed >= {"adaptive_resolution", "solver", "compression_source_only"}
    listed = {
        re.sub(r"`", "", row[0]) for row in table_rows(doc_section("### Defaults that differ"))
    }
    assert changed == listed
    for row in table_rows(doc_section("### Defaults that differ")):
        assert len(row) == 4 and all(row), row  # each with both values and why


def test_every_refused_option_is_in_the_docs_table() -> None:
    rows = table_rows(doc_section("## Options of the reference this library refuses"))
    by_name = {re.sub(r"`", "", row[1]): row for row in rows}
    assert set(by_name) == set(UNSUPPORTED_OPTIONS)
    for name, entry in UNSUPPORTED_OPTIONS.items():
        row = by_name[name]
        assert row[0] == f"`{entry.reference}`"
        assert row[3] == ("not yet" if entry.planned else "no")
        assert row[4] == entry.use


def test_the_readme_links_the_docs_page() -> None:
    assert "docs/reference-defaults.md" in (ROOT / "README.md").read_text(encoding="utf-8")
