"""``ctxfold`` on hostile input: deep nesting, huge numbers, deep hierarchies and large
files are answered in one line naming the file and the limit, never a traceback."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from typer.testing import CliRunner, Result

from context_manager.cli import RUNTIME_ERROR, USAGE_ERROR, app, problems

DEEP = 100_000
"""Nesting far past any parser's stack."""
DIGITS = 20_000
"""Digits far past Python's own limit on converting a number (4,300)."""
CHAIN = 3_000
"""Levels of a summary chain, past Python's recursion limit (1,000)."""


def _run(args: list[str]) -> Result:
    """Invoke the CLI; what it prints must hold no traceback, and nothing but an exit
    may escape it."""
    result = CliRunner().invoke(app, args, env={"COLUMNS": "200"})
    assert result.exception is None or isinstance(result.exception, SystemExit), (
        f"{args} raised {result.exception!r}"
    )
    assert "Traceback" not in result.output
    return result


def _one_line(result: Result) -> str:
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1, result.stderr
    return lines[0]


@pytest.fixture
def deep(tmp_path: Path) -> Path:
    path = tmp_path / "deep.json"
    path.write_text("[" * DEEP + "]" * DEEP, encoding="utf-8")
    return path


@pytest.fixture
def huge_number(tmp_path: Path) -> Path:
    path = tmp_path / "huge.json"
    path.write_text(
        '{"leaves": [{"id": "m0", "tokens": ' + "7" * DIGITS + '}], "summaries": [], '
        '"budget": {"total": 100}}',
        encoding="utf-8",
    )
    return path


@pytest.fixture
def chain(tmp_path: Path) -> Path:
    """A valid problem whose one summary chain is 3,000 levels tall: s1 over the two
    leaves, each s<i> over s<i-1>."""
    summaries = [{"id": "s1", "level": 1, "tokens": 5, "children": ["m0", "m1"]}]
    summaries += [
        {"id": f"s{i}", "level": i, "tokens": 5, "children": [f"s{i - 1}"]}
        for i in range(2, CHAIN + 1)
    ]
    data = {
        "leaves": [{"id": "m0", "tokens": 10}, {"id": "m1", "tokens": 10}],
        "summaries": summaries,
        "budget": {"total": 1000},
    }
    path = tmp_path / "chain.json"
    path.write_text(json.dumps(data), encoding="utf-8")
    return path


@pytest.mark.parametrize("command", ["show", "solve"])
def test_deep_nesting_is_refused_naming_the_file_and_the_limit(command: str, deep: Path) -> None:
    result = _run([command, str(deep)])
    assert result.exit_code == USAGE_ERROR
    line = _one_line(result)
    assert str(deep) in line
    assert "nested 100,000 levels deep, over the limit of 100" in line


@pytest.mark.parametrize("command", ["show", "solve"])
def test_a_number_of_20000_digits_is_refused_naming_the_file_and_the_limit(
    command: str, huge_number: Path
) -> None:
    result = _run([command, str(huge_number)])
    assert result.exit_code == USAGE_ERROR
    line = _one_line(result)
    assert str(huge_number) in line
    assert "a number of 20,000 digits, over the limit of 100 digits" in line


def test_brackets_and_digits_inside_strings_are_not_counted(tmp_path: Path) -> None:
    odd_id = "[" * 500 + "{" * 500 + "9" * 5_000
    data = {
        "leaves": [{"id": odd_id, "tokens": 10}, {"id": "m1", "tokens": 10}],
        "summaries": [{"id": 's\\"[', "level": 1, "tokens": 4, "children": [odd_id, "m1"]}],
        "budget": {"total": 1000},
    }
    path = tmp_path / "odd.json"
    path.write_text(json.dumps(data), encoding="utf-8")
    result = _run(["show", str(path)])
    assert result.exit_code == 0, result.stderr
    assert "2 leaves, 1 summaries, depth L1" in result.stdout


def test_show_draws_a_3000_level_chain_without_recursing(chain: Path) -> None:
    result = _run(["show", str(chain)])
    assert result.exit_code == 0, result.stderr
    out = result.stdout
    assert f"2 leaves, {CHAIN} summaries, depth L{CHAIN}" in out
    # the root and the eight levels below it are drawn, the rest is counted
    for level in range(CHAIN, CHAIN - 9, -1):
        assert f"s{level} L{level} 5 tok over m0..m1 (2 leaves)" in out
    assert f"s{CHAIN - 9} " not in out
    assert "... 1 child not drawn: more than 8 levels below the root" in out
    assert "extreme frontiers" in out


def test_solve_of_a_3000_level_chain_finishes(chain: Path) -> None:
    result = _run(["solve", str(chain)])
    assert result.exit_code == 0, result.stderr


def test_a_deep_solver_option_value_is_refused_naming_the_option(tmp_path: Path) -> None:
    path = tmp_path / "p.json"
    path.write_text(
        json.dumps(
            {
                "leaves": [{"id": "m0", "tokens": 10}],
                "summaries": [],
                "budget": {"total": 100},
            }
        ),
        encoding="utf-8",
    )
    value = "[" * 20_000 + "]" * 20_000
    result = _run(["solve", str(path), "-o", f"policy={value}"])
    assert result.exit_code == USAGE_ERROR
    line = _one_line(result)
    assert "option 'policy'" in line and "over the limit of 100" in line

    result = _run(["solve", str(path), "-o", f"policy={'1' * DIGITS}"])
    assert result.exit_code == USAGE_ERROR
    assert "option 'policy': a number of 20,000 digits" in _one_line(result)


def test_a_file_over_the_size_limit_is_refused_before_it_is_read(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = tmp_path / "big.json"
    path.write_text("[" + ", ".join(["1"] * 50) + "]", encoding="utf-8")
    monkeypatch.setattr(problems, "MAX_INPUT_BYTES", 64)
    result = _run(["show", str(path)])
    assert result.exit_code == USAGE_ERROR
    line = _one_line(result)
    assert str(path) in line and "150 bytes, over the limit of 64 bytes" in line


def test_a_recursion_error_left_anywhere_in_a_command_is_one_line(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, chain: Path
) -> None:
    def walk(problem: object, depth: int = 0) -> None:  # recurses without end
        walk(problem, depth + 1)

    monkeypatch.setattr(problems, "_describe", walk)
    result = _run(["show", str(chain)])
    assert result.exit_code == RUNTIME_ERROR
    assert "nested too deeply to process" in _one_line(result)


def test_the_console_script_answers_hostile_input_without_a_traceback(
    deep: Path, huge_number: Path, chain: Path
) -> None:
    command = [sys.executable, "-c", _MAIN]
    env = {**os.environ, "COLUMNS": "200"}
    for args, code, expected in (
        (["solve", str(deep)], USAGE_ERROR, "over the limit of 100"),
        (["show", str(huge_number)], USAGE_ERROR, "over the limit of 100 digits"),
        (["show", str(chain)], 0, ""),
    ):
        done = subprocess.run(
            [*command, *args], capture_output=True, text=True, env=env, timeout=120, check=False
        )
        assert done.returncode == code, done.stderr
        assert expected in done.stderr
        assert "Traceback" not in done.stderr and "Traceback" not in done.stdout
        assert "Error" not in done.stderr  # no exception's name either


_MAIN = "import sys; from context_manager.cli import main; sys.argv[0] = 'ctxfold'; main()"
