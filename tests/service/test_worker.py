"""The four functions as an iii worker, the real SDK client against a loopback engine:
the worker registers the reference ids, answers each function with the value it has in
process and over HTTP, refuses with the HTTP error body, reads a reloaded configuration
on the next call, and ``ctxfold worker`` runs, reloads on SIGHUP, stops on SIGTERM and
fails in bounded time when the engine cannot be reached."""

from __future__ import annotations

import json
import os
import queue
import signal
import socket
import subprocess
import sys
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import IO, Any

import pytest
from fastapi.testclient import TestClient

from context_manager.assembly import AssemblyConfig, AssemblyError, SqliteLeaseStore
from context_manager.service import LiveSettings, ServiceSettings
from context_manager.service.app import create_app
from context_manager.service.functions import REFERENCE_IDS, Summarizers, call_function
from context_manager.service.worker import FAILED_CODE, error_body, run_worker
from tests.support.assembly_fixtures import FakeSummarizer, assistant, user
from tests.support.assembly_scenarios import IN_PROCESS, LONG, REPLY, SCENARIOS, SMALL
from tests.support.iii_engine import EngineInvocationError, LoopbackEngine

pytest.importorskip("iii", reason="the iii extra (iii-sdk) is not installed")

WAIT = 60.0
"""Seconds any wait on the worker lasts at most."""

IDS = set(REFERENCE_IDS.values())
CLI = [sys.executable, "-c", "from context_manager.cli import main; main()"]


@pytest.fixture(autouse=True)
def sdk_environment(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The SDK writes a marker under ``~/.iii`` and reads ``III_...`` variables."""
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    for name in ("III_URL", "III_TOKEN", "III_NAMESPACE", "III_WORKER_NAME"):
        monkeypatch.delenv(name, raising=False)


@pytest.fixture
def engine() -> Iterator[LoopbackEngine]:
    with LoopbackEngine() as running:
        yield running


def _settings(tmp_path: Path, **fields: Any) -> ServiceSettings:
    return ServiceSettings(allow_anonymous=True, store_root=tmp_path / "stores", **fields)


@contextmanager
def serving(engine: LoopbackEngine, live: LiveSettings) -> Iterator[None]:
    """``run_worker`` in a thread until the block ends; its functions registered."""
    stop = threading.Event()
    failures: list[BaseException] = []

    def run() -> None:
        try:
            run_worker(
                engine.url, live, environ={}, summarizer=FakeSummarizer(reply=REPLY), stop=stop
            )
        except BaseException as exc:
            failures.append(exc)

    thread = threading.Thread(target=run, name="worker")
    thread.start()
    try:
        engine.wait_for_functions(IDS, WAIT)
        yield
    finally:
        stop.set()
        thread.join(WAIT)
    assert not thread.is_alive(), "the worker did not stop"
    assert not failures, failures


def _in_process(name: str, body: Any, settings: ServiceSettings) -> Any:
    summarizers = Summarizers(environ={}, override=FakeSummarizer(reply=REPLY))
    answered = call_function(name, body, settings=settings, summarizers=summarizers)
    return json.loads(answered.json)


def test_the_worker_registers_exactly_the_four_reference_ids(
    engine: LoopbackEngine, tmp_path: Path
) -> None:
    with serving(engine, LiveSettings(initial=_settings(tmp_path))):
        assert set(engine.functions) == IDS
        assert sorted(engine.registrations) == sorted(IDS)  # each once
        assert engine.wait_for_worker(WAIT)["name"] == "ctxfold"
        compact = engine.functions["context::compact"]
        assert compact["request_format"]["title"] == "CompactRequest"
        busy = {"$ref": "#/$defs/CompactBusy"}
        assert busy in compact["response_format"]["anyOf"]
    assert engine.connections == 1


def test_after_a_lost_connection_the_sdk_reconnects_and_registers_again(
    engine: LoopbackEngine, tmp_path: Path
) -> None:
    body = {"messages": [user("hi", ts=1)], "model": SMALL}
    with serving(engine, LiveSettings(initial=_settings(tmp_path))):
        engine.drop()
        engine.wait_for(lambda: engine.connections == 2 and len(engine.registrations) == 8)
        assert engine.wait_for_functions(IDS, WAIT) == IDS
        assert engine.invoke("context::count-tokens", body, WAIT)["tokens"] > 0
    assert sorted(engine.registrations) == sorted([*IDS, *IDS])


@pytest.mark.parametrize(("name", "request_body"), SCENARIOS)
def test_each_function_answers_the_value_it_has_in_process_and_over_http(
    engine: LoopbackEngine, tmp_path: Path, name: str, request_body: dict[str, Any]
) -> None:
    settings = _settings(tmp_path)
    here = _in_process(name, request_body, settings)
    assert here == json.loads(
        IN_PROCESS[name](request_body, summarizer=FakeSummarizer(reply=REPLY)).model_dump_json(
            exclude_none=True
        )
    )
    app = create_app(settings, summarizer=FakeSummarizer(reply=REPLY), environ={})
    with TestClient(app) as client:
        over_http = client.post(f"/v1/context/{name}", json=request_body)
    assert over_http.status_code == 200, over_http.text
    with serving(engine, LiveSettings(initial=settings)):
        on_engine = engine.invoke(REFERENCE_IDS[name], request_body, WAIT)
    assert on_engine == here == over_http.json()


def test_a_refusal_is_the_invocations_error_with_the_http_body(
    engine: LoopbackEngine, tmp_path: Path
) -> None:
    settings = _settings(tmp_path)
    bad = {"messages": [{"role": "user", "content": "not a list", "timestamp": 1}], "model": SMALL}
    long = {"messages": [assistant("a", ts=1), user("q" * 40_000, ts=2)], "model": SMALL}
    app = create_app(settings, summarizer=FakeSummarizer(reply=REPLY), environ={})
    with TestClient(app) as client:
        over_http = {
            "bad": client.post("/v1/context/count-tokens", json=bad).json(),
            "long": client.post("/v1/context/assemble", json=long).json(),
            "array": client.post("/v1/context/prune", json=[1, 2]).json(),
        }
    with pytest.raises(AssemblyError) as here:
        IN_PROCESS["count-tokens"](bad)
    with serving(engine, LiveSettings(initial=settings)):
        errors = {}
        for key, function_id, body in [
            ("bad", "context::count-tokens", bad),
            ("long", "context::assemble", long),
            ("array", "context::prune", [1, 2]),
        ]:
            with pytest.raises(EngineInvocationError) as refused:
                engine.invoke(function_id, body, WAIT)
            assert refused.value.error["code"] == FAILED_CODE
            errors[key] = error_body(refused.value.error)
        assert engine.invoke("context::count-tokens", {"messages": [], "model": {"id": "x"}})
    assert errors["bad"] == {"code": "context/invalid_request", "message": here.value.message}
    assert errors["long"] is not None and errors["long"]["code"] == "context/overflow"
    assert errors["array"] == {
        "code": "context/invalid_request",
        "message": "the request must be a JSON object",
    }
    assert errors == over_http


def test_a_compaction_holding_the_lease_answers_busy_as_its_result(
    engine: LoopbackEngine, tmp_path: Path
) -> None:
    leases = tmp_path / "leases"
    leases.mkdir()
    settings = _settings(tmp_path, assembly=AssemblyConfig(lease_dir=leases, lease_ttl_secs=30))
    held = SqliteLeaseStore(leases.resolve() / "leases.sqlite3")
    assert held.acquire("conv-9", now=10**13, ttl_ms=10**9) is not None
    body = {"messages": LONG, "model": SMALL, "options": {"lease_key": "conv-9"}}
    with serving(engine, LiveSettings(initial=settings)):
        assert engine.invoke("context::compact", body, WAIT) == {"status": "busy"}


def test_a_reloaded_configuration_answers_the_next_call(
    engine: LoopbackEngine, tmp_path: Path
) -> None:
    config = tmp_path / "service.yaml"
    config.write_text(f"store_root: {tmp_path / 'stores'}\nassembly: {{tail_turns: 2}}\n")
    live = LiveSettings(config, environ={})
    body = {"messages": LONG, "model": SMALL}
    with serving(engine, live):
        before = engine.invoke("context::compact", body, WAIT)
        config.write_text(f"store_root: {tmp_path / 'stores'}\nassembly: {{tail_turns: 6}}\n")
        assert live.reload()
        after = engine.invoke("context::compact", body, WAIT)
        live.replace(live.current.model_copy(update={"assembly": AssemblyConfig(tail_turns=2)}))
        again = engine.invoke("context::compact", body, WAIT)
    assert before["tail_start_index"] != after["tail_start_index"]
    assert before == again == _in_process("compact", body, _settings(tmp_path))
    six = _settings(tmp_path, assembly=AssemblyConfig(tail_turns=6))
    assert after == _in_process("compact", body, six)


class _Lines:
    """The lines a process writes to a stream, read in a thread; waits on them."""

    def __init__(self, stream: IO[bytes]) -> None:
        self.lines: list[str] = []
        self._new: queue.Queue[str | None] = queue.Queue()
        self._thread = threading.Thread(target=self._read, args=(stream,), daemon=True)
        self._thread.start()

    def _read(self, stream: IO[bytes]) -> None:
        for raw in stream:
            self._new.put(raw.decode(errors="replace"))
        self._new.put(None)

    def wait_for(self, text: str, timeout: float = WAIT) -> str:
        """The first line (from now on) holding ``text``."""
        while True:
            try:
                line = self._new.get(timeout=timeout)
            except queue.Empty:
                raise AssertionError(f"no line with {text!r}: {self.lines}") from None
            if line is None:
                raise AssertionError(f"the stream ended before {text!r}: {self.lines}")
            self.lines.append(line)
            if text in line:
                return line

    def rest(self) -> str:
        """Everything written, once the stream has ended."""
        self._thread.join(WAIT)
        while not self._new.empty():
            line = self._new.get()
            if line is not None:
                self.lines.append(line)
        return "".join(self.lines)


def test_ctxfold_worker_serves_reloads_on_sighup_and_stops_on_sigterm(
    engine: LoopbackEngine, tmp_path: Path
) -> None:
    config = tmp_path / "service.yaml"
    head = f"store_root: {tmp_path / 'stores'}\nreload_poll_seconds: 3600\n"
    config.write_text(head + "assembly: {tail_turns: 2}\n")
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    with subprocess.Popen(
        [*CLI, "worker", "--engine", engine.url, "--config", str(config)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        env=env,
    ) as process:
        assert process.stderr is not None
        err = _Lines(process.stderr)
        body = {"messages": [user("hi", ts=1)], "model": SMALL}
        try:
            err.wait_for("registered context::assemble")
            assert engine.wait_for_functions(IDS, WAIT) == IDS
            count = engine.invoke("context::count-tokens", body, WAIT)
            assert count == _in_process("count-tokens", body, _settings(tmp_path))
            compact = {"messages": LONG, "model": SMALL}
            before = engine.invoke("context::compact", compact, WAIT)
            config.write_text(head + "assembly: {tail_turns: 6}\n")
            process.send_signal(signal.SIGHUP)
            err.wait_for("configuration reloaded")
            after = engine.invoke("context::compact", compact, WAIT)
            assert before["tail_start_index"] != after["tail_start_index"]
        finally:
            process.send_signal(signal.SIGTERM)
            process.wait(WAIT)
            output = err.rest()
    assert process.returncode == 0, output
    assert "Traceback" not in output


def test_ctxfold_worker_fails_when_the_engine_cannot_be_reached(tmp_path: Path) -> None:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]  # bound, not listening: connections are refused
        done = subprocess.run(
            [*CLI, "worker", "--engine", f"ws://127.0.0.1:{port}", "--connect-timeout", "1"],
            capture_output=True,
            text=True,
            timeout=WAIT,
            check=False,
        )
    assert done.returncode == 1, done.stderr
    assert f"cannot reach the iii engine at ws://127.0.0.1:{port} within 1 s" in done.stderr
    assert "Traceback" not in done.stderr


def test_ctxfold_worker_refuses_a_bad_address_and_a_missing_extra(tmp_path: Path) -> None:
    done = subprocess.run(
        [*CLI, "worker", "--engine", "http://127.0.0.1:49134"],
        capture_output=True,
        text=True,
        timeout=WAIT,
        check=False,
    )
    assert done.returncode == 2 and "ws://HOST:PORT" in done.stderr, done.stderr
    without_sdk = "import sys; sys.modules['iii'] = None; " + CLI[2]
    done = subprocess.run(
        [sys.executable, "-c", without_sdk, "worker", "--engine", "ws://127.0.0.1:1"],
        capture_output=True,
        text=True,
        timeout=WAIT,
        check=False,
    )
    assert done.returncode == 2, done.stderr
    assert "the worker needs the 'iii' extra (iii is missing)" in done.stderr
    assert "pip install 'context-folding[iii]'" in done.stderr
    assert "Traceback" not in done.stderr
