"""The built wheel, installed in a fresh virtual environment outside the repository,
runs the demo on the data it carries."""

from __future__ import annotations

import os
import subprocess
import sys
import venv
from pathlib import Path

from tests.support.paths import ROOT


def _run(args: list[str], cwd: Path, timeout: float = 900) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV")}
    return subprocess.run(
        args, cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout, check=False
    )


def test_the_wheel_runs_the_demo_from_a_fresh_venv(tmp_path: Path) -> None:
    wheels = tmp_path / "wheels"
    built = _run(
        [
            sys.executable,
            "-m",
            "pip",
            "wheel",
            "--no-deps",
            "--no-build-isolation",
            "-q",
            "-w",
            str(wheels),
            str(ROOT),
        ],
        cwd=tmp_path,
    )
    assert built.returncode == 0, built.stderr
    (wheel,) = wheels.glob("context_folding-*.whl")

    env_dir = tmp_path / "venv"
    venv.create(env_dir, with_pip=True)
    python = env_dir / "bin" / "python"
    installed = _run([str(python), "-m", "pip", "install", "-q", str(wheel)], cwd=tmp_path)
    assert installed.returncode == 0, installed.stderr

    work = tmp_path / "elsewhere"  # not the repository: nothing of it on the path
    work.mkdir()
    where = _run(
        [
            str(python),
            "-c",
            "import foldbench, context_manager; "
            "print(foldbench.__file__); print(foldbench.dataset('tau-bench'))",
        ],
        cwd=work,
    )
    assert where.returncode == 0, where.stderr
    module, data = where.stdout.split()
    site = str(env_dir)
    assert module.startswith(site) and data.startswith(site)
    assert not module.startswith(str(ROOT))

    demo = _run(
        [
            str(env_dir / "bin" / "ctxfold"),
            "demo",
            "--quick",
            "-p",
            "ours:kv-stable",
            "-p",
            "observation-masking",
            "-b",
            "4000",
            "--workers",
            "1",
            "--out",
            "out",
        ],
        cwd=work,
    )
    assert demo.returncode == 0, demo.stdout + demo.stderr
    assert "tau-bench-4" in demo.stdout
    for model in ("explicit", "automatic"):
        assert f"4,000 tokens, ours:kv-stable, {model} cache:" in demo.stdout
    report = (work / "out" / "report.md").read_text(encoding="utf-8")
    assert "## Verdict" in report and "| ours:kv-stable |" in report
    assert (work / "out" / "bill-and-kept.png").stat().st_size > 0
