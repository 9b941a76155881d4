"""The request's frame (system prompt and tool definitions) is kept in the store with the
history: a reopened manager, a branch and a derived store send what was set."""

from __future__ import annotations

from pathlib import Path

import pytest
from typer.testing import CliRunner

from context_manager import CharsCounter, ConfigError, ContextManager
from context_manager.cli import app

TOOLS = [{"name": "grep", "description": "Search", "input_schema": {"type": "object"}}]


def _open(path: Path) -> ContextManager:
    return ContextManager.open(path=path, counter=CharsCounter())


def test_a_reopened_store_sends_the_system_prompt_and_tools(tmp_path: Path) -> None:
    with _open(tmp_path / "a.db") as cm:
        cm.set_system_prompt("You are a careful engineer.")
        cm.set_tool_definitions(TOOLS)
        cm.add_message("User", "find the bug")
    with _open(tmp_path / "a.db") as cm:
        request = cm.compile(max_tokens=2_000)
        openai = request.to_openai(model="gpt-4.1")
        anthropic = request.to_anthropic()
    assert openai["messages"][0] == {"role": "system", "content": "You are a careful engineer."}
    assert [t["function"]["name"] for t in openai["tools"]] == ["grep"]
    assert anthropic["system"][0]["text"] == "You are a careful engineer."
    assert [t["name"] for t in anthropic["tools"]] == ["grep"]
    # and they are priced in the budget
    assert request.render_stats["request"]["system"] > 0
    assert request.render_stats["request"]["tools"] > 0


def test_setting_the_stored_value_again_writes_nothing(tmp_path: Path) -> None:
    with _open(tmp_path / "a.db") as cm:
        cm.set_system_prompt("S")
        cm.set_tool_definitions(TOOLS)
        before = cm.store.sequence
        cm.set_system_prompt("S")
        cm.set_tool_definitions([dict(t) for t in TOOLS])
        cm.set_system_prompt(None)  # empty never overwrites
        cm.set_tool_definitions([])
        assert cm.store.sequence == before
        cm.set_system_prompt("T")
        assert cm.store.sequence == before + 1
        assert cm.compile(max_tokens=100).system_prompt == "T"


def test_each_branch_keeps_its_own_frame(tmp_path: Path) -> None:
    with _open(tmp_path / "a.db") as cm:
        cm.set_system_prompt("first")
        first = cm.add_message("User", "hello")
        main = cm.store.branch
        other = cm.branch_at(first, "other")
        cm.switch_branch(other)
        assert cm.compile(max_tokens=100).system_prompt == "first"  # inherited
        cm.set_system_prompt("second")
        cm.set_tool_definitions(TOOLS)
        cm.switch_branch(main)
        request = cm.compile(max_tokens=100)
        assert request.system_prompt == "first" and not request.tools
        cm.switch_branch(other)
        request = cm.compile(max_tokens=100)
        assert request.system_prompt == "second" and request.tools == TOOLS


def test_a_derived_store_carries_the_frame(tmp_path: Path) -> None:
    with _open(tmp_path / "a.db") as cm:
        cm.set_system_prompt("You are terse.")
        cm.set_tool_definitions(TOOLS)
        cm.add_message("User", "hello")
        derived = cm.derive(tmp_path / "b.db")
    with _open(derived) as cm:
        request = cm.compile(max_tokens=500)
    assert request.system_prompt == "You are terse." and request.tools == TOOLS


def test_namespaces_keep_their_own_frames(tmp_path: Path) -> None:
    from context_manager.store import Store

    with Store.open(tmp_path / "a.db") as store:
        a = ContextManager.open(store=store, namespace="a", counter=CharsCounter())
        b = ContextManager.open(store=store, namespace="b", counter=CharsCounter())
        a.set_system_prompt("agent a")
        b.set_system_prompt("agent b")
        a.add_message("User", "hi")
        assert a.compile(max_tokens=100).system_prompt == "agent a"
        assert b.compile(max_tokens=100).system_prompt == "agent b"
        a.close()
        b.close()


def test_tools_that_are_not_json_are_refused_and_nothing_is_stored(tmp_path: Path) -> None:
    with _open(tmp_path / "a.db") as cm:
        before = cm.store.sequence
        with pytest.raises(ConfigError, match="tools"):
            cm.set_tool_definitions([{"name": "x", "schema": object()}])
        assert cm.store.sequence == before and cm.compile(max_tokens=100).tools == []


def test_inspect_shows_the_frame(tmp_path: Path) -> None:
    with _open(tmp_path / "a.db") as cm:
        cm.set_system_prompt("You are a careful engineer.\nSecond line.")
        cm.set_tool_definitions(TOOLS)
        cm.add_message("User", "hello")
    result = CliRunner().invoke(app, ["inspect", str(tmp_path / "a.db")])
    assert result.exit_code == 0, result.output
    assert "system prompt: 40 characters: You are a careful engineer." in result.output
    assert "tools: 1 (grep)" in result.output
