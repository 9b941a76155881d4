"""``ctxfold serve`` as a process on loopback: it answers, stops on SIGTERM with every
acknowledged message stored, and refuses a configuration it cannot use."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
from pathlib import Path

import httpx
import pytest

from context_manager import ContextManager
from context_manager.client import ContextClient
from context_manager.service import hash_key
from tests.support.paths import ROOT

KEY = "serve-test-key-42"


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _wait_ready(process: subprocess.Popen[bytes], url: str) -> None:
    """Until ``/healthz`` answers; fails at once when the process ends instead."""
    for _ in range(600):  # at most about a minute
        try:
            if httpx.get(f"{url}/healthz", timeout=0.1).status_code == 200:
                return
        except httpx.TransportError:
            pass
        try:
            process.wait(timeout=0.1)  # returns only when the process has ended
        except subprocess.TimeoutExpired:
            continue
        err = process.stderr.read().decode() if process.stderr else ""
        raise AssertionError(f"the service ended before it answered: {err}")
    raise AssertionError("the service did not answer within a minute")


CLI = [sys.executable, "-c", "from context_manager.cli import main; main()"]


def test_serve_answers_and_stops_cleanly_on_sigterm(tmp_path: Path) -> None:
    port = _free_port()
    config = tmp_path / "service.yaml"
    config.write_text(
        f"port: {port}\nstore_root: {tmp_path / 'stores'}\n"
        f"keys: [{{name: t, sha256: {hash_key(KEY)}}}]\n"
        "manager: {auto_tick: true, window_tokens: 4000}\n"
    )
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    process = subprocess.Popen(
        [*CLI, "serve", "--config", str(config)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        env=env,
    )
    url = f"http://127.0.0.1:{port}"
    try:
        _wait_ready(process, url)
        with ContextClient(url, agent="p1", api_key=KEY) as cm:
            ids = [cm.add_message("User", f"message {n} " * 30) for n in range(30)]
            assert [m.id for m in cm.get_messages()] == ids
            assert cm.compile(max_tokens=4000).messages
    finally:
        process.send_signal(signal.SIGTERM)
        _, err = process.communicate(timeout=120)
    # uvicorn finishes what is in flight, shuts the application down, then ends by the
    # signal it was sent
    assert process.returncode in (0, -signal.SIGTERM), err.decode()
    assert "Application shutdown complete" in err.decode()
    assert KEY not in err.decode() and hash_key(KEY) not in err.decode()
    with ContextManager.open(path=tmp_path / "stores" / "p1.db") as stored:
        assert [m.id for m in stored.get_messages()] == ids


def test_serve_refuses_a_configuration_it_cannot_use(tmp_path: Path) -> None:
    bad = tmp_path / "bad.yaml"
    bad.write_text("port: 1\nlimits: {max_body: 3}\n")
    run = subprocess.run(
        [*CLI, "serve", "--config", str(bad)],
        capture_output=True,
        timeout=120,
    )
    assert run.returncode == 2 and b"limits.max_body: unknown key" in run.stderr
    keyless = tmp_path / "keyless.yaml"
    keyless.write_text("port: 1\n")
    run = subprocess.run(
        [*CLI, "serve", "--config", str(keyless)],
        capture_output=True,
        timeout=120,
    )
    assert run.returncode == 2 and b"no API keys are configured" in run.stderr


def test_the_readme_remote_example_runs_against_the_example_configuration(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    port = _free_port()
    env = {
        **os.environ,
        "CTXFOLD_PORT": str(port),
        "CTXFOLD_STORE_ROOT": str(tmp_path / "stores"),
    }
    process = subprocess.Popen(
        [*CLI, "serve", "--config", str(ROOT / "examples" / "service.yaml")],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        env=env,
    )
    url = f"http://127.0.0.1:{port}"
    text = (ROOT / "README.md").read_text(encoding="utf-8")
    [code] = [
        part.split("```", 1)[0]
        for part in text.split("```python\n")[1:]
        if "ContextClient(" in part
    ]
    try:
        _wait_ready(process, url)
        exec(compile(code.replace("http://127.0.0.1:8765", url), "README.md", "exec"), {})
    finally:
        process.send_signal(signal.SIGTERM)
        process.communicate(timeout=120)
    printed = capsys.readouterr().out.splitlines()
    assert printed == [line[2:] for line in code.splitlines() if line.startswith("# ")]
    assert (tmp_path / "stores" / "support-7.db").exists()
