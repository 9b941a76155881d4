"""Package-level contracts: the schema file, the layer rule, generators, the CLI."""

from __future__ import annotations

import ast
import json
import subprocess
import sys
from pathlib import Path

import pytest
from typer.testing import CliRunner

import folding
from context_manager.cli import app
from folding import FoldProblem
from folding.schema import SCHEMA_PATH, render_schema
from folding.testing import chronicle, random_problem
from tests.support.paths import ROOT


def test_shipped_schema_matches_the_model() -> None:
    assert SCHEMA_PATH.read_text(encoding="utf-8") == render_schema(), "run `make schema`"
    schema = json.loads(render_schema())
    assert set(schema["properties"]) == {
        "leaves",
        "summaries",
        "pins",
        "locks",
        "budget",
        "previous",
        "fixed_tokens",
    }
    assert schema["required"] == ["leaves", "budget"]
    assert schema["additionalProperties"] is False


def test_issue_example_round_trips() -> None:
    example = {
        "leaves": [
            {"id": f"m{i}", "tokens": 120, "salience": 1.0, "zone": "middle"} for i in range(6)
        ],
        "summaries": [{"id": "L1-0", "level": 1, "tokens": 200, "children": ["m0", "m1"]}],
        "pins": [{"leaves": ["m3"], "level": None, "max_level": None, "min_level": None}],
        "locks": ["m5"],
        "budget": {"total": 30000, "target": 27000, "grace": 0.02},
        "previous": {"m0": 1, "m1": 1},
        "fixed_tokens": 0,
    }
    problem = FoldProblem.model_validate(example)
    dumped = problem.model_dump(mode="json")
    assert dumped == {**example, "pins": example["pins"], "locks": ["m5"]}


def imported_top_levels(package: str) -> set[str]:
    found: set[str] = set()
    for path in (ROOT / package).rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Import):
                found.update(alias.name.split(".")[0] for alias in node.names)
            elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                found.add(node.module.split(".")[0])
    return found


def test_layers_point_down() -> None:
    assert not imported_top_levels("folding") & {"solvers", "context_manager"}
    assert "context_manager" not in imported_top_levels("solvers")


def import_graph(package: str) -> dict[str, set[str]]:
    """Module -> the modules of ``package`` it imports at run time (imports under
    ``if TYPE_CHECKING:`` left out, imports inside functions counted)."""
    paths = {}
    for path in (ROOT / package).rglob("*.py"):
        parts = list(path.relative_to(ROOT).with_suffix("").parts)
        paths[".".join(parts[:-1] if parts[-1] == "__init__" else parts)] = path
    graph: dict[str, set[str]] = {}
    for name, path in paths.items():
        tree = ast.parse(path.read_text(encoding="utf-8"))
        typing_only = {
            id(sub)
            for node in ast.walk(tree)
            if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test)
            for sub in ast.walk(node)
        }
        here = name.split(".") if path.name == "__init__.py" else name.split(".")[:-1]
        found: set[str] = set()
        for node in ast.walk(tree):
            if id(node) in typing_only:
                continue
            if isinstance(node, ast.Import):
                found.update(alias.name for alias in node.names)
            elif isinstance(node, ast.ImportFrom):
                base = here[: len(here) - node.level + 1] if node.level else []
                module = ".".join(base + ([node.module] if node.module else []))
                found.add(module)
                found.update(f"{module}.{alias.name}" for alias in node.names)
        graph[name] = {m for m in found if m in paths and m != name}
    return graph


@pytest.mark.parametrize("package", ["folding", "solvers", "context_manager"])
def test_no_import_cycles(package: str) -> None:
    import networkx as nx

    cycles = list(nx.simple_cycles(nx.DiGraph(import_graph(package))))
    assert cycles == []


def test_the_adapter_knows_no_strategy() -> None:
    graph = import_graph("context_manager")
    assert not any(
        m.startswith("context_manager.strategies") for m in graph["context_manager.adapter"]
    )


def test_only_the_records_module_names_a_storage_slot() -> None:
    package = ROOT / "context_manager" / "strategies" / "autobiographical"
    naming = sorted(p.name for p in package.glob("*.py") if '"autobio:' in p.read_text())
    assert naming == ["records.py"]
    cli = sorted((ROOT / "context_manager" / "cli").glob("*.py"))
    assert cli and not [p.name for p in cli if "autobio:" in p.read_text()]


def test_importing_folding_loads_neither_upper_layer() -> None:
    code = (
        "import sys, folding, folding.testing.strategies; "
        "print(sorted(m for m in sys.modules if m.split('.')[0] in ('solvers', 'context_manager')))"
    )
    out = subprocess.run([sys.executable, "-c", code], check=True, capture_output=True, text=True)
    assert out.stdout.strip() == "[]"


def test_public_api_is_documented() -> None:
    for name in folding.__all__:
        obj = getattr(folding, name)
        if callable(obj) and name != "Frontier":
            assert obj.__doc__, f"folding.{name} has no docstring"


def test_chronicle_matches_the_reference_fixture_shapes() -> None:
    def levels(p: FoldProblem) -> dict[int, int]:
        out: dict[int, int] = {}
        for s in p.summaries:
            out[s.level] = out.get(s.level, 0) + 1
        return out

    assert levels(chronicle(90)) == {1: 15, 2: 2}
    assert levels(chronicle(216)) == {1: 36, 2: 6, 3: 1}
    with pytest.raises(ValueError, match="exceeds n_leaves"):
        chronicle(3, head=2, tail=2)


def test_the_benchmark_reexports_the_library_generators() -> None:
    import folding.testing
    from foldbench import synthetic

    for name in folding.testing.__all__:
        assert getattr(synthetic, name) is getattr(folding.testing, name)


def test_random_problem_is_seeded() -> None:
    a = random_problem(3, n_leaves=120, dag=True, n_pins=4, n_locks=2)
    b = random_problem(3, n_leaves=120, dag=True, n_pins=4, n_locks=2)
    c = random_problem(4, n_leaves=120, dag=True, n_pins=4, n_locks=2)
    assert a == b
    assert a != c
    assert not a.hierarchy.is_laminar
    assert a.locks and a.previous is not None


def test_cli_example_and_show(tmp_path: Path) -> None:
    runner = CliRunner()
    result = runner.invoke(app, ["example"])
    assert result.exit_code == 0, result.output
    assert "cheapest (floor)" in result.output and "finest (least folded)" in result.output

    path = tmp_path / "p.json"
    path.write_text(chronicle(30, total=9000).model_dump_json(), encoding="utf-8")
    result = runner.invoke(app, ["show", str(path)])
    assert result.exit_code == 0, result.output
    assert "30 leaves" in result.output

    result = runner.invoke(app, ["show", str(tmp_path / "missing.json")])
    assert result.exit_code == 2 and "cannot read" in result.output
    bad = tmp_path / "bad.json"
    bad.write_text('{"leaves": [{"id": "a", "tokens": -1}], "budget": {"total": 5}}')
    result = runner.invoke(app, ["show", str(bad)])
    assert result.exit_code == 2 and "non-negative integer" in result.output


def test_cli_solve_solvers_and_sweep(tmp_path: Path) -> None:
    runner = CliRunner()
    path = tmp_path / "p.json"
    path.write_text(chronicle(36, total=12_000).model_dump_json(), encoding="utf-8")
    result = runner.invoke(app, ["solve", str(path), "--method", "flat-profile"])
    assert result.exit_code == 0, result.output
    assert "flat-profile: feasible" in result.output and "recall:L1-0" in result.output
    result = runner.invoke(app, ["solve", str(path), "--method", "kv-stable", "--json"])
    assert result.exit_code == 0
    assert json.loads(result.output)["status"] == "feasible"
    result = runner.invoke(app, ["solve", str(path), "--method", "nope"])
    assert result.exit_code == 2 and "registered solvers" in result.output
    result = runner.invoke(app, ["solve", str(path), "--method", "kv-unified"])
    assert result.exit_code == 2 and "'policy' is required" in result.output
    assert "cache-first, reference" in result.output  # the presets, and how to pass one
    ok = ["solve", str(path), "--method", "kv-unified", "--option", "policy=reference"]
    assert runner.invoke(app, ok).exit_code == 0
    result = runner.invoke(app, ["solvers"])
    assert result.exit_code == 0 and "kv-unified" in result.output
    result = runner.invoke(app, ["sweep", "--method", "flat-profile"])
    assert result.exit_code == 0, result.output
    assert "flat-profile" in result.output and "57%" in result.output


def _anthropic_reply(*content: dict[str, object], stop: str) -> dict[str, object]:
    return {
        "id": "msg_01",
        "type": "message",
        "role": "assistant",
        "model": "claude-sonnet-4-6",
        "content": list(content),
        "stop_reason": stop,
        "stop_sequence": None,
        "usage": {"input_tokens": 10, "output_tokens": 5},
    }


def test_readme_quick_start_runs_and_prints_what_it_says(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    from tests.support.loopback import LoopbackServer, Reply

    server = LoopbackServer()
    call = {"type": "tool_use", "id": "toolu_1", "name": "read_file", "input": {"path": "a.py"}}
    answer = {"type": "text", "text": "They parse the build logs and plot the failures."}
    server.script(
        "/v1/messages",
        Reply(_anthropic_reply(call, stop="tool_use")),
        Reply(_anthropic_reply(answer, stop="end_turn")),
    )
    monkeypatch.setenv("ANTHROPIC_API_KEY", "test-key-not-real")
    monkeypatch.setenv("ANTHROPIC_BASE_URL", server.url)
    (tmp_path / "a.py").write_text("print('parse the logs')\n")
    monkeypatch.chdir(tmp_path)
    try:
        _run_readme(capsys)
    finally:
        server.close()
    first, second = (r.body for r in server.requests_to("/v1/messages"))
    assert first["system"][0]["text"] == "You are a careful engineer."
    assert [t["name"] for t in first["tools"]] == ["read_file"]
    # the second call carries the tool call and its result
    assert [m["role"] for m in second["messages"]] == ["user", "assistant", "user"]
    assert second["messages"][1]["content"][0]["type"] == "tool_use"
    result = second["messages"][2]["content"][0]
    assert result["type"] == "tool_result" and result["content"] == "print('parse the logs')\n"


def test_readme_agent_loop_folds_a_long_session(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """The README's agent loop as written, against a model on 127.0.0.1 that reads 40
    files of about 3,000 tokens each before it answers: 120k tokens of history in a
    32k window, so the loop must fold, and every request fits."""
    from context_manager import TiktokenCounter
    from tests.support.loopback import LoopbackServer, Reply

    text = (ROOT / "README.md").read_text(encoding="utf-8")
    [code] = [
        part.split("```", 1)[0]
        for part in text.split("```python\n")[1:]
        if "anthropic.Anthropic()" in part
    ]
    files = 40
    for k in range(files):
        lines = [f"def step_{k}_{i}(x):  # stage {i} of file {k}" for i in range(300)]
        (tmp_path / f"f{k}.py").write_text("\n".join(lines))
    calls = [
        {"type": "tool_use", "id": f"toolu_{k}", "name": "read_file", "input": {"path": f"f{k}.py"}}
        for k in range(files)
    ]
    answer = {"type": "text", "text": "They parse the build logs and plot the failures."}
    server = LoopbackServer()
    server.script(
        "/v1/messages",
        *[Reply(_anthropic_reply(c, stop="tool_use")) for c in calls],
        Reply(_anthropic_reply(answer, stop="end_turn")),
    )
    monkeypatch.setenv("ANTHROPIC_API_KEY", "test-key-not-real")
    monkeypatch.setenv("ANTHROPIC_BASE_URL", server.url)
    monkeypatch.chdir(tmp_path)
    try:
        exec(compile(code, "README.md", "exec"), {})
    finally:
        server.close()
    assert capsys.readouterr().out.strip() == answer["text"]
    bodies = [r.body for r in server.requests_to("/v1/messages")]
    assert len(bodies) == files + 1
    counter = TiktokenCounter()  # the budget's own encoding, offline
    sizes = [counter.count_text(json.dumps(b["messages"])) for b in bodies]
    assert max(sizes) < 32_000  # the history sent always fits the window given at open
    last = json.dumps(bodies[-1]["messages"])
    assert "What do you remember" in last  # the first reads are shown as memories
    assert "def step_0_0" not in last  # and no longer raw


def _run_readme(capsys: pytest.CaptureFixture[str]) -> None:
    text = (ROOT / "README.md").read_text(encoding="utf-8")
    blocks = [part.split("```", 1)[0] for part in text.split("```python\n")[1:]]
    blocks = [code for code in blocks if "ContextClient(" not in code]  # needs a service
    assert len(blocks) >= 2
    for code in blocks:
        exec(compile(code, "README.md", "exec"), {})
        printed = capsys.readouterr().out.splitlines()
        promised = [line[2:] for line in code.splitlines() if line.startswith("# ")]
        assert printed == promised
