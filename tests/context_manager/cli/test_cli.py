"""``ctxfold`` as a user meets it: bad arguments, exit codes, help, inspect and replay."""

from __future__ import annotations

import json
import os
import statistics
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner, Result

from context_manager import ContextManager, ExtractiveSummarizer
from context_manager.cli import NO_PLAN, RUNTIME_ERROR, USAGE_ERROR, app, load_plugins
from context_manager.messages import ToolResultBlock, ToolUseBlock, to_anthropic
from context_manager.strategies.autobiographical import AutobiographicalStrategy
from foldbench import dataset
from foldbench.loaders import (
    TranscriptError,
    detect_format,
    load_anthropic,
    load_openai,
    load_swe_agent,
    load_transcript_file,
)
from folding.testing import chronicle

PLUGINS = load_plugins()  # the benchmark's commands, as the console script registers them

TRAJ = dataset("swe-agent") / "marshmallow-1867-function-calling.traj"
WIDE = {"COLUMNS": "200"}


def _run(args: list[str], **kwargs: Any) -> Result:
    """Invoke the CLI; an exception escaping a command (a traceback) fails the test."""
    result = CliRunner().invoke(app, args, **kwargs)
    assert result.exception is None or isinstance(result.exception, SystemExit), (
        f"{args} raised {result.exception!r}\n{result.output}"
    )
    assert "Traceback" not in result.output
    return result


@pytest.fixture
def problem(tmp_path: Path) -> Path:
    path = tmp_path / "p.json"
    path.write_text(chronicle(36, total=12_000).model_dump_json(), encoding="utf-8")
    return path


# ------------------------------------------------------------------ exit codes
def test_exit_codes_are_distinct_and_documented_in_the_help() -> None:
    assert (RUNTIME_ERROR, USAGE_ERROR, NO_PLAN) == (1, 2, 3)
    for args in (["--help"], ["solve", "--help"]):
        text = " ".join(_run(args, env=WIDE).output.split())
        assert "Exit status: 0 done; 1 a failure while working; 2 a usage error" in text
        assert "3 `solve` found no plan within the wall" in text


@pytest.mark.parametrize("method", ["kv-stable", "exact"])
@pytest.mark.parametrize("limit", ["-1", "0", "inf", "nan"])
def test_solve_refuses_a_time_limit_that_is_not_a_positive_number(
    problem: Path, method: str, limit: str
) -> None:
    result = _run(["solve", str(problem), "--method", method, "--time-limit", limit])
    assert result.exit_code == USAGE_ERROR
    assert "--time-limit" in result.output and "positive number of seconds" in result.output


def test_solve_accepts_a_positive_time_limit(problem: Path) -> None:
    result = _run(["solve", str(problem), "--method", "kv-stable", "--time-limit", "5"])
    assert result.exit_code == 0, result.output


def test_sweep_names_an_unknown_solver_and_the_registered_ones() -> None:
    result = _run(["sweep", "-m", "nosuch", "-m", "kv-stable"])
    assert result.exit_code == USAGE_ERROR
    assert "unknown solver 'nosuch'" in result.stderr
    assert "registered solvers:" in result.stderr and "kv-stable" in result.stderr
    assert result.stdout == ""  # refused before any replay started


def test_kv_unified_without_a_policy_names_the_option_and_the_presets(problem: Path) -> None:
    result = _run(["solve", str(problem), "--method", "kv-unified"])
    assert result.exit_code == USAGE_ERROR
    assert "--option policy=reference" in result.stderr
    assert "cache-first, reference" in result.stderr
    assert "validation error" not in result.output and "pydantic" not in result.output


def test_a_bad_solver_option_is_a_short_usage_error(problem: Path) -> None:
    result = _run(["solve", str(problem), "--method", "kv-unified", "-o", "policy=nosuch"])
    assert result.exit_code == USAGE_ERROR
    assert "nosuch" in result.stderr and "cache-first, reference" in result.stderr
    result = _run(["solve", str(problem), "-o", "nokey"])
    assert result.exit_code == USAGE_ERROR and "is not KEY=VALUE" in result.stderr


MALFORMED = {
    "truncated": ('{"leaves": [\n', "not valid JSON: line 2, column 1"),
    "zone": (
        '{"leaves": [{"id": "a", "tokens": 3, "zone": "top"}], "budget": {"total": 5}}',
        "leaves[0] (id 'a').zone: Input should be 'head', 'middle' or 'tail'",
    ),
    "missing": ('{"leaves": [{"id": "a", "tokens": 3}]}', "budget: required field missing"),
    "extra": (
        '{"leaves": [{"id": "a", "tokens": 3, "colour": 1}], "budget": {"total": 5}}',
        "leaves[0] (id 'a').colour: unknown field",
    ),
    "not an object": ("[1, 2]", "Input should be an object"),
    "negative": (
        '{"leaves": [{"id": "a", "tokens": -1}], "budget": {"total": 5}}',
        "leaf 'a': tokens must be a non-negative integer",
    ),
}


@pytest.mark.parametrize("command", ["show", "solve"])
@pytest.mark.parametrize("case", sorted(MALFORMED))
def test_a_malformed_problem_file_gets_a_short_message_naming_file_and_field(
    tmp_path: Path, command: str, case: str
) -> None:
    text, expected = MALFORMED[case]
    path = tmp_path / "broken.json"
    path.write_text(text, encoding="utf-8")
    result = _run([command, str(path)], env=WIDE)
    assert result.exit_code == USAGE_ERROR
    assert str(path) in result.stderr and expected in result.stderr, result.stderr
    assert len(result.stderr.strip().splitlines()) <= 4
    for dump in ("errors.pydantic.dev", "input_value", "input_type", "validation error for"):
        assert dump not in result.stderr


def test_a_problem_file_that_is_not_text_is_a_usage_error(tmp_path: Path) -> None:
    path = tmp_path / "binary.json"
    path.write_bytes(b"\xff\xfe\x00")
    result = _run(["show", str(path)])
    assert result.exit_code == USAGE_ERROR and "not UTF-8 text" in result.stderr


# ------------------------------------------------------------------ solve's status
def test_solve_over_budget_exits_3_and_labels_the_layout_as_the_floor(tmp_path: Path) -> None:
    path = tmp_path / "tight.json"
    path.write_text(chronicle(36, total=100).model_dump_json(), encoding="utf-8")
    result = _run(["solve", str(path)], env=WIDE)
    assert result.exit_code == NO_PLAN
    assert "over_budget: no plan fits the wall of 100 tokens" in result.stderr
    assert "floor layout (over the wall)" in result.stdout
    assert "it does not fit and is shown only as the floor" in result.stdout

    result = _run(["solve", str(path), "--json"])
    assert result.exit_code == NO_PLAN
    assert json.loads(result.stdout)["status"] == "over_budget"
    assert "over_budget" in result.stderr


def test_solve_infeasible_exits_3_without_a_layout(tmp_path: Path) -> None:
    data = {
        "leaves": [{"id": f"m{i}", "tokens": 900} for i in range(4)],
        "summaries": [{"id": "A", "level": 1, "tokens": 200, "children": ["m0", "m1", "m2", "m3"]}],
        "pins": [{"leaves": ["m2"]}, {"leaves": ["m2"], "min_level": 1}],
        "budget": {"total": 4000},
    }
    path = tmp_path / "conflict.json"
    path.write_text(json.dumps(data), encoding="utf-8")
    result = _run(["solve", str(path)], env=WIDE)
    assert result.exit_code == NO_PLAN
    assert "infeasible" in result.stderr
    assert "conflict: leaf 'm2'" in result.stdout and "pin(min_level=1)" in result.stdout
    assert "layout" not in result.stdout and "None tokens" not in result.stdout


def test_solve_with_a_plan_exits_0_and_prints_the_layout(problem: Path) -> None:
    result = _run(["solve", str(problem)])
    assert result.exit_code == 0, result.output
    assert "layout" in result.stdout and "floor" not in result.stdout
    assert result.stderr == ""


# ------------------------------------------------------------------ policies
def test_policies_mention_the_bench_extra_only_when_its_import_fails(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from foldbench import registry

    result = _run(["policies"], env=WIDE)
    assert result.exit_code == 0
    assert "needs the bench extra" not in result.output  # the extra is installed here
    lines = result.output.splitlines()
    exact = lines.index("ours:exact")
    assert "slow: proves optimality" in lines[exact + 2]
    assert all(lines[i + 1].startswith("    ") for i, line in enumerate(lines) if line[:1] != " ")

    real = registry._importable
    monkeypatch.setattr(
        registry, "_importable", lambda m: not m.startswith("langchain") and real(m)
    )
    lines = _run(["policies"], env=WIDE).output.splitlines()
    flagged = {lines[i - 2] for i, line in enumerate(lines) if "needs the bench extra" in line}
    assert {
        "langchain-trim-messages",
        "langchain-summarization-middleware",
        "langchain-clear-tool-uses",
    } <= flagged
    assert "observation-masking" not in flagged and "llamaindex-memory" not in flagged
    assert all(any(m.startswith("langchain") for m in registry.PEERS[p].requires) for p in flagged)
    needs = [line for line in lines if "needs the bench extra" in line]
    assert all("langchain_core" in line and "missing" in line for line in needs)
    assert all("context-folding[bench]" in line for line in needs)


# ------------------------------------------------------------------ help
@pytest.mark.parametrize(
    "command",
    [[], ["solve"], ["show"], ["sweep"], ["demo"], ["replay"], ["bench"], ["inspect"]],
)
def test_help_shows_no_bool_type_on_flags(command: list[str]) -> None:
    result = _run([*command, "--help"], env=WIDE)
    assert result.exit_code == 0
    assert "<bool>" not in result.output
    assert "--help" in result.output


@pytest.mark.parametrize(
    ("command", "budgets"),
    [("demo", "4,000, 8,000, 16,000"), ("replay", "4,000, 8,000, 16,000"), ("bench", "8,000")],
)
def test_help_shows_the_defaults_of_budget_and_policy(command: str, budgets: str) -> None:
    text = " ".join(_run([command, "--help"], env=WIDE).output.split())
    assert f"[default: ({budgets}" in text
    assert "[default: (every installed policy but the slow ours:exact)]" in text
    assert "[default: (the CPU count, at most 4)]" in text


def test_solve_help_shows_its_defaults() -> None:
    text = " ".join(_run(["solve", "--help"], env=WIDE).output.split())
    assert "[default: kv-stable]" in text
    assert "[default: (the solver's own)]" in text


# ------------------------------------------------------------------ inspect
def _tool_store(path: Path) -> None:
    strategy = AutobiographicalStrategy(
        compression_model="extractive", target_chunk_tokens=200, recent_window_tokens=300
    )
    with ContextManager.open(path=path, strategy=strategy, summarizer=ExtractiveSummarizer()) as cm:
        cm.add_message("User", "List the files.")
        cm.add_message("Claude", (ToolUseBlock(id="c1", name="ls", input={"path": "."}),))
        cm.add_message("Tool", (ToolResultBlock(tool_use_id="c1", content="a.py\nb.py"),))
        cm.add_message("Tool", (ToolResultBlock(tool_use_id="c2", content="boom", is_error=True),))
        cm.add_message("Claude", "Two files.")
        cm.compile(max_tokens=20_000, reserve_for_response=0)


def test_inspect_previews_tool_messages(tmp_path: Path) -> None:
    store = tmp_path / "cm.db"
    _tool_store(store)
    result = _run(["inspect", str(store)], env=WIDE)
    assert result.exit_code == 0, result.output
    assert 'tool_use ls({"path": "."})' in result.output
    assert "tool_result(c1): a.py b.py" in result.output
    assert "tool_result(c2, error): boom" in result.output
    assert "''" not in result.output


def test_inspect_says_what_the_agent_window_holds(tmp_path: Path) -> None:
    from context_manager import CharsCounter, ContextManager

    store = tmp_path / "cm.db"
    with ContextManager.open(path=store, counter=CharsCounter()) as cm:
        ids = [cm.add_message("User", f"m{i}") for i in range(5)]
    plain = _run(["inspect", str(store)])
    assert "window: the record (no host has presented rows)" in plain.output
    with ContextManager.open(path=store, counter=CharsCounter()) as cm:
        cm.present_rows([])  # the five stored rows are written down as the window
        cm.retract_rows(ids[:2])
        cm.add_message("User", "not shown yet")
    shown = _run(["inspect", str(store)])
    assert shown.exit_code == 0, shown.output
    assert "window: 3 rows presented (2 records), 2 taken out, 1 stored but not presented" in (
        shown.output
    )


def test_inspect_names_each_memorys_model_and_the_last_accepted_round(tmp_path: Path) -> None:
    from context_manager import CharsCounter, ContextManager

    store = tmp_path / "cm.db"
    strategy = AutobiographicalStrategy(
        compression_model="claude-x",
        target_chunk_tokens=100,
        summary_target_tokens=15,
        recent_window_tokens=0,
        l1_holdback_chunks=0,
        min_chunk_chars_for_llm=0,
    )
    summarizer = ExtractiveSummarizer(model="extractive-offline")
    parts: dict[str, Any] = {"strategy": strategy, "summarizer": summarizer}
    with ContextManager.open(path=store, counter=CharsCounter(), **parts) as cm:
        for i in range(12):
            filler = "More words here. " * 8
            cm.add_message("User", f"Message {i} says item{i} is at /srv/m{i}.txt. {filler}")
        cm.drain()
    before = _run(["inspect", str(store)], env=WIDE)
    with ContextManager.open(path=store, counter=CharsCounter(), **parts) as cm:
        result = cm.compile(max_tokens=400, reserve_for_response=20)
        cm.accept_round(result.compile_id)
    assert "fold receipts: none (no accepted round)" in before.output
    after = _run(["inspect", str(store)], env=WIDE)
    assert after.exit_code == 0, after.output
    assert "by extractive-offline" in after.output
    assert f"fold receipts: 1; the last accepted (compile {result.compile_id}) showed " in (
        after.output
    )
    assert "showed 2 at L1" in after.output


def test_inspect_refuses_an_unknown_namespace_naming_the_existing_ones(tmp_path: Path) -> None:
    store = tmp_path / "cm.db"
    _tool_store(store)
    result = _run(["inspect", str(store), "--namespace", "nope"])
    assert result.exit_code == USAGE_ERROR
    assert "no namespace 'nope'" in result.stderr and "its namespaces: default" in result.stderr
    assert result.stdout == ""


def test_inspect_of_a_fresh_store_names_no_namespace(tmp_path: Path) -> None:
    from context_manager.store import Store

    store = tmp_path / "fresh.db"
    Store.open(store).close()
    assert _run(["inspect", str(store)]).exit_code == 0  # the default namespace, not yet written
    result = _run(["inspect", str(store), "--namespace", "other"])
    assert result.exit_code == USAGE_ERROR
    assert "no strategy has written to it yet" in result.stderr


# ------------------------------------------------------------------ replay
def _anthropic_file(path: Path, *, system: bool = True, text_only: bool = False) -> Path:
    """A bundled SWE-agent run written as Anthropic Messages API JSON."""
    messages = load_swe_agent(TRAJ)
    body = to_anthropic(messages[1:])
    if text_only:
        for m in body:
            m["content"] = [b for b in m["content"] if b["type"] == "text"] or "(no text)"
    data: Any = {"system": messages[0].text, "messages": body} if system else body
    path.write_text(json.dumps(data), encoding="utf-8")
    return path


def _flat(text: str) -> str:
    """``text`` with its line wrapping undone."""
    return " ".join(text.split())


def _mean_tokens(out: Path) -> float:
    records = json.loads((out / "records.json").read_text(encoding="utf-8"))
    return statistics.fmean(r["tokens"] for r in records)


def test_replay_reads_anthropic_json_by_content_and_keeps_the_tool_blocks(tmp_path: Path) -> None:
    path = _anthropic_file(tmp_path / "run.json")
    _, messages = load_transcript_file(path)
    uses = sum(isinstance(b, ToolUseBlock) for m in messages for b in m.content)
    results = sum(isinstance(b, ToolResultBlock) for m in messages for b in m.content)
    assert uses > 5 and results == uses

    args = ["-p", "ours:kv-stable", "-b", "64000", "--workers", "1"]
    result = _run(["replay", str(path), *args, "--out", str(tmp_path / "full")], env=WIDE)
    assert result.exit_code == 0, result.output
    printed = _flat(result.stdout)
    assert "anthropic (detected: a top-level 'system' key)" in printed
    assert f"{len(messages)} messages, {uses} tool calls, {results} tool results" in printed
    assert printed.index("messages,") < printed.index("sorted by total bill")

    text_only = _anthropic_file(tmp_path / "text.json", text_only=True)
    result = _run(["replay", str(text_only), *args, "--out", str(tmp_path / "text")])
    assert result.exit_code == 0, result.output
    assert "0 tool calls, 0 tool results" in _flat(result.stdout)
    assert _mean_tokens(tmp_path / "full") > 3 * _mean_tokens(tmp_path / "text")


def test_replay_detects_typed_blocks_without_a_system_key_or_a_telling_extension(
    tmp_path: Path,
) -> None:
    path = _anthropic_file(tmp_path / "run.txt", system=False)
    fmt, why = detect_format(path)
    assert fmt == "anthropic" and "'tool_use' content block in message 1" in why
    args = ["-p", "assemble", "-b", "64000", "--workers", "1", "--out", str(tmp_path / "r")]
    result = _run(["replay", str(path), *args])
    assert result.exit_code == 0, result.output
    assert "anthropic (detected: a 'tool_use' content block" in _flat(result.stdout)


def test_replay_format_override(tmp_path: Path) -> None:
    path = _anthropic_file(tmp_path / "run.json")
    result = _run(["replay", str(path), "--format", "openai"])
    assert result.exit_code == USAGE_ERROR
    assert "holds a 'tool_use' block" in result.stderr and "--format anthropic" in result.stderr
    result = _run(["replay", str(path), "--format", "xml"])
    assert result.exit_code == USAGE_ERROR and "--format" in result.output
    out = tmp_path / "r"
    args = ["-p", "assemble", "-b", "64000", "--workers", "1", "--out", str(out)]
    result = _run(["replay", str(path), "--format", "anthropic", *args])
    assert result.exit_code == 0, result.output
    assert "anthropic (given with --format)" in _flat(result.stdout)
    result = _run(["replay", str(TRAJ), *args])
    assert result.exit_code == 0, result.output
    assert "swe-agent (detected: a top-level 'history' list)" in _flat(result.stdout)


def test_replay_refuses_a_file_that_mixes_two_formats(tmp_path: Path) -> None:
    mixed = [
        {"role": "tool", "tool_call_id": "c1", "content": "x"},
        {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "c1"}]},
    ]
    path = tmp_path / "mixed.json"
    path.write_text(json.dumps(mixed), encoding="utf-8")
    result = _run(["replay", str(path)])
    assert result.exit_code == USAGE_ERROR and "mixes Anthropic JSON" in result.stderr


# ------------------------------------------------------------------ loaders
def test_detect_format_by_content(tmp_path: Path) -> None:
    openai = [
        {"role": "system", "content": "s"},
        {"role": "user", "content": [{"type": "text", "text": "hi"}]},
    ]
    (tmp_path / "o.json").write_text(json.dumps(openai))
    assert detect_format(tmp_path / "o.json")[0] == "openai"
    plain = [{"role": "user", "content": "hi"}, {"role": "assistant", "content": "yo"}]
    (tmp_path / "plain.json").write_text(json.dumps({"messages": plain}))
    assert detect_format(tmp_path / "plain.json") == (
        "openai",
        "messages with plain text content",
    )
    traj = tmp_path / "copy.json"
    traj.write_text(TRAJ.read_text(encoding="utf-8"), encoding="utf-8")
    assert detect_format(traj)[0] == "swe-agent"
    (tmp_path / "weird.traj").write_text('{"nothing": 1}')
    assert detect_format(tmp_path / "weird.traj")[0] == "swe-agent"
    (tmp_path / "weird.json").write_text('{"nothing": 1}')
    with pytest.raises(TranscriptError, match="not a transcript"):
        detect_format(tmp_path / "weird.json")
    with pytest.raises(TranscriptError, match="unknown transcript format 'xml'"):
        load_transcript_file(tmp_path / "o.json", "xml")


def test_anthropic_jsonl_is_detected_and_read(tmp_path: Path) -> None:
    rows = [
        {"role": "user", "content": "Read x"},
        {"role": "assistant", "content": [{"type": "tool_use", "id": "t1", "name": "r"}]},
        {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "t1", "content": "4"}]},
    ]
    path = tmp_path / "chat.jsonl"
    path.write_text("\n".join(json.dumps(r) for r in rows), encoding="utf-8")
    assert detect_format(path)[0] == "anthropic"
    messages = load_anthropic(path)
    assert messages[1].tool_use_ids == ("t1",) and messages[2].tool_result_ids == ("t1",)


def test_load_openai_refuses_anthropic_blocks_instead_of_dropping_them(tmp_path: Path) -> None:
    path = _anthropic_file(tmp_path / "run.json")
    with pytest.raises(TranscriptError, match="holds a 'tool_use' block"):
        load_openai(path)


# ------------------------------------------------------------------ a real process
def test_the_console_script_exits_2_without_a_traceback(problem: Path) -> None:
    script = Path(sys.executable).with_name("ctxfold")
    command = [str(script)] if script.exists() else [sys.executable, "-c", _MAIN]
    env = {**os.environ, "COLUMNS": "200"}
    for args in (["solve", str(problem), "--time-limit", "-1"], ["sweep", "-m", "nosuch"]):
        done = subprocess.run(
            [*command, *args], capture_output=True, text=True, env=env, timeout=120, check=False
        )
        assert done.returncode == USAGE_ERROR, done.stderr
        assert "Traceback" not in done.stderr and "Traceback" not in done.stdout


_MAIN = "import sys; from context_manager.cli import main; sys.argv[0] = 'ctxfold'; main()"


def test_the_benchmark_commands_come_through_the_entry_point() -> None:
    assert PLUGINS == ["foldbench = foldbench.cli:register"]
    assert load_plugins() == PLUGINS  # idempotent: each command registered once
    names = [c.name or c.callback.__name__ for c in app.registered_commands if c.callback]
    assert sorted(n for n in names if n in {"demo", "bench", "replay", "policies", "sweep"}) == [
        "bench",
        "demo",
        "policies",
        "replay",
        "sweep",
    ]
    assert len(names) == len(set(names))


def test_inspect_shows_the_exact_values_a_memory_keeps(tmp_path: Path) -> None:
    from context_manager import CharsCounter, ContextManager, ExtractiveSummarizer
    from context_manager.strategies.autobiographical import AutobiographicalStrategy

    store = tmp_path / "cm.db"
    strategy = AutobiographicalStrategy(
        compression_model="extractive",
        target_chunk_tokens=100,
        recent_window_tokens=0,
        l1_holdback_chunks=0,
        min_chunk_chars_for_llm=0,
        summary_target_tokens=20,
        memory_values_tokens=40,
    )
    with ContextManager.open(
        path=store, strategy=strategy, summarizer=ExtractiveSummarizer(), counter=CharsCounter()
    ) as cm:
        codes = " ".join(
            f"Booking {i} is HAT{100 + i}, ticket [T-{48200 + i}-C]." for i in range(8)
        )
        cm.add_message("User", codes)
        for i in range(6):
            cm.add_message("Claude", f"Step {i}: " + "looked at the records again " * 4)
        cm.drain()
        kept = [v for s in cm.strategy.summaries.values() for v in s.values]  # type: ignore[attr-defined]
    assert kept  # the prose could not hold every code
    result = _run(["inspect", str(store)], env=WIDE)
    assert result.exit_code == 0, result.output
    assert "values: " in result.output and kept[0] in result.output


def test_replay_reads_a_tau_bench_file_as_one_agent_serving_its_sessions(tmp_path: Path) -> None:
    source = dataset("tau-bench") / "airline-gpt-4o-150.json"
    path = tmp_path / "two-sessions.json"
    path.write_text(json.dumps(json.loads(source.read_text(encoding="utf-8"))[:2]))
    args = ["-p", "langchain-trim-messages", "-b", "4000", "--workers", "1"]
    result = _run(["replay", str(path), *args, "--out", str(tmp_path / "out")], env=WIDE)
    assert result.exit_code == 0, result.output
    assert "tau-bench (detected: a list of sessions, each with a 'traj')" in _flat(result.stdout)


def test_an_unknown_solver_option_lists_the_solvers_options(tmp_path: Path) -> None:
    path = tmp_path / "p.json"
    path.write_text(chronicle(30, total=9000).model_dump_json(), encoding="utf-8")
    result = _run(["solve", str(path), "--method", "kv-stable", "-o", "foo=bar"])
    assert result.exit_code == 2
    assert "'foo' is not an option of kv-stable (its options: alpha, fold," in result.output


def test_inspect_read_only_describes_a_store_a_running_agent_holds(tmp_path: Path) -> None:
    store = tmp_path / "live.db"
    with ContextManager.open(path=store, summarizer=ExtractiveSummarizer()) as cm:
        cm.set_system_prompt("You are careful.")
        for i in range(5):
            cm.add_message("User", f"message {i}")
        held = _run(["inspect", str(store)])
        assert held.exit_code != 0 and "open in another process" in held.output
        result = _run(["inspect", "--read-only", str(store)], env=WIDE)
        assert result.exit_code == 0, result.output
        assert "5 messages" in result.output and "system prompt: 16 characters" in result.output
        cm.add_message("User", "the agent goes on writing")  # it was never blocked
    assert not [p.name for p in tmp_path.iterdir() if p.name.startswith(".")]  # no scratch


def test_example_compares_every_solver_at_the_same_wall(tmp_path: Path) -> None:
    result = _run(["example"], env=WIDE)
    assert result.exit_code == 0, result.output
    assert "every solver at the same wall of" in result.output
    losses = {}
    for line in result.output.splitlines():
        cells = [c.strip() for c in line.strip("│┃ ").split("│")]
        if len(cells) == 6 and cells[1] in ("optimal", "feasible"):
            losses[cells[0]] = float(cells[4].replace(",", ""))
    assert "exact" in losses and "kv-stable" in losses
    assert losses["exact"] == min(losses.values())  # the optimum keeps the most detail
    assert "kv-stable: Hold in the band" in result.output
