"""A bounded load test of ``ctxfold serve`` on loopback, and crash trials.

``python benchmarks/load.py`` starts one ``ctxfold serve`` process on 127.0.0.1 and runs
``--agents`` concurrent agent loops against it, each ``--turns`` turns of: the user's
message, a compile, a model call (``--think-ms``, the model's own latency, spent
waiting), the agent's tool call and its result, a tick. It stops by itself (a fixed
count of turns, every request with a timeout, the whole run bounded by
``--max-seconds``), reports requests/s, the p50/p99 latency of compile and the errors,
then stops the server and checks that every acknowledged message is in the stores.
The same loops run in process (as many threads, each its own manager and store, the
same model latency) give the compile p50/p99 to compare.

``--kill-trials N`` runs N crash trials: the load runs for a random part of a second to
a few seconds, the server is killed with SIGKILL, restarted, and every message the
server acknowledged must be found once in its store, and every store must audit clean
(``ctxfold audit``).

``--reload`` rewrites the configuration during the load (a limit and one key replaced
by another): the only refusals allowed are those of requests sent with the removed key.

Examples
--------
``python benchmarks/load.py --agents 32 --turns 200``
``python benchmarks/load.py --kill-trials 20 --agents 8``
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import random
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx

from context_manager import ContextManager, ExtractiveSummarizer
from context_manager.client import KEEPALIVE_SECONDS
from context_manager.service import hash_key

KEY, SPARE = "load-key-0001", "load-key-0002"
CLI = [sys.executable, "-c", "from context_manager.cli import main; main()"]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def write_config(path: Path, root: Path, port: int, *, keys: tuple[str, ...], body: int) -> None:
    listed = ", ".join(f"{{name: k{n}, sha256: {hash_key(k)}}}" for n, k in enumerate(keys))
    path.write_text(
        f"port: {port}\nstore_root: {root}\nkeys: [{listed}]\nreload_poll_seconds: 0.2\n"
        f"manager: {{window_tokens: 8000, auto_tick: false}}\n"
        f"limits: {{max_body_bytes: {body}, request_timeout_seconds: 60}}\n"
    )


class Server:
    """One ``ctxfold serve`` process."""

    def __init__(self, config: Path, port: int) -> None:
        self.url = f"http://127.0.0.1:{port}"
        self.log = open(config.with_suffix(".log"), "ab")  # noqa: SIM115
        self.process = subprocess.Popen(
            [*CLI, "serve", "--config", str(config), "--log-level", "warning"],
            stdout=self.log,
            stderr=self.log,
        )
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            try:
                if httpx.get(f"{self.url}/healthz", timeout=0.2).status_code == 200:
                    return
            except httpx.TransportError:
                pass
            if self.process.poll() is not None:
                raise RuntimeError(f"the server ended with {self.process.returncode}")
            time.sleep(0.05)
        raise RuntimeError("the server did not answer within a minute")

    def stop(self, sig: int = signal.SIGTERM) -> int:
        self.process.send_signal(sig)
        code = self.process.wait(timeout=120)
        self.log.close()
        return code


@dataclass
class Tally:
    requests: int = 0
    errors: list[str] = field(default_factory=list)
    refused_by_key: int = 0
    compile_seconds: list[float] = field(default_factory=list)
    acknowledged: dict[str, list[str]] = field(default_factory=dict)


def _turn_texts(agent: str, turn: int) -> tuple[str, dict[str, Any], dict[str, Any]]:
    user = f"[{agent}/{turn}] Please check the status of order {turn * 7919 % 10007}."
    call = {
        "participant": "Claude",
        "content": [
            {"type": "text", "text": f"Looking up order {turn}."},
            {"type": "tool_use", "id": f"t{turn}", "name": "lookup", "input": {"order": turn}},
        ],
    }
    body = f"order {turn}: shipped; carrier HX{turn:05d}; " + "line item " * 40
    result = {
        "participant": "Tool",
        "content": [{"type": "tool_result", "tool_use_id": f"t{turn}", "content": body}],
    }
    return user, call, result


async def agent_loop(
    client: httpx.AsyncClient,
    agent: str,
    turns: int,
    think: float,
    tally: Tally,
    keys: list[str],
    stop: asyncio.Event,
) -> None:
    acked = tally.acknowledged.setdefault(agent, [])

    async def send(method: str, path: str, body: Any = None) -> httpx.Response | None:
        key = keys[0]
        tally.requests += 1
        try:
            response = await client.request(
                method, path, json=body, headers={"Authorization": f"Bearer {key}"}
            )
        except httpx.TransportError as exc:
            if not stop.is_set():
                tally.errors.append(f"{agent} {path}: {type(exc).__name__}")
            return None
        if response.status_code == 401 and key != keys[0]:
            tally.refused_by_key += 1  # sent with a key the reload removed
            return None
        if response.status_code >= 400:
            tally.errors.append(f"{agent} {path}: {response.status_code} {response.text[:200]}")
            return None
        return response

    base = f"/v1/agents/{agent}"
    for turn in range(turns):
        if stop.is_set():
            return
        user, call, result = _turn_texts(agent, turn)
        got = await send("POST", f"{base}/messages", {"participant": "User", "content": user})
        if got is None:
            continue
        acked.append(got.json()["id"])
        start = time.perf_counter()
        compiled = await send("POST", f"{base}/context", {"max_tokens": 8000, "catch_up": 5})
        if compiled is not None:
            tally.compile_seconds.append(time.perf_counter() - start)
        await asyncio.sleep(think)  # the model's latency
        for message in (call, result):
            got = await send("POST", f"{base}/messages", message)
            if got is not None:
                acked.append(got.json()["id"])
        await send("POST", f"{base}/tick")


async def run_load(
    url: str,
    agents: int,
    turns: int,
    think: float,
    max_seconds: float,
    keys: list[str],
    stop_after: float | None = None,
    on_running: Any = None,
) -> tuple[Tally, float]:
    tally = Tally()
    stop = asyncio.Event()
    limits = httpx.Limits(max_connections=agents + 4, keepalive_expiry=KEEPALIVE_SECONDS)
    async with httpx.AsyncClient(base_url=url, timeout=120, limits=limits) as client:
        start = time.perf_counter()
        tasks = [
            asyncio.create_task(
                agent_loop(client, f"agent-{n:03d}", turns, think, tally, keys, stop)
            )
            for n in range(agents)
        ]
        if on_running is not None:
            asyncio.get_running_loop().run_in_executor(None, on_running)
        budget = max_seconds if stop_after is None else stop_after
        _, pending = await asyncio.wait(tasks, timeout=budget)
        stop.set()
        for task in pending:
            task.cancel()
        await asyncio.gather(*pending, return_exceptions=True)
        return tally, time.perf_counter() - start


def check_stores(root: Path, tally: Tally) -> tuple[int, int, list[str]]:
    """(acknowledged, found, problems): every acknowledged id found once, audits clean."""
    problems: list[str] = []
    acknowledged = found = 0
    for agent, ids in sorted(tally.acknowledged.items()):
        path = root / f"{agent}.db"
        if not ids:
            continue
        acknowledged += len(ids)
        with ContextManager.open(path=path, summarizer=ExtractiveSummarizer()) as cm:
            stored = [m.id for m in cm.get_messages()]
        found += sum(1 for i in ids if i in stored)
        if len(set(stored)) != len(stored):
            problems.append(f"{agent}: a message stored twice")
        missing = [i for i in ids if i not in stored]
        if missing:
            problems.append(f"{agent}: {len(missing)} acknowledged messages missing")
        audit = subprocess.run(
            [*CLI, "audit", str(path)], capture_output=True, text=True, timeout=300
        )
        if audit.returncode != 0:
            problems.append(f"{agent}: audit {audit.returncode}: {audit.stdout[-300:]}")
    return acknowledged, found, problems


def in_process(agents: int, turns: int, think: float) -> list[float]:
    """The compile times of the same loops run in this process: ``agents`` threads,
    each its own manager and store, the same turns and the same model latency."""
    times: list[float] = []
    lock = threading.Lock()

    def loop(root: Path, agent: str) -> None:
        with ContextManager.open(
            path=root / f"{agent}.db", summarizer=ExtractiveSummarizer(), window_tokens=8000
        ) as cm:
            for turn in range(turns):
                user, call, result = _turn_texts(agent, turn)
                cm.add_message("User", user)
                start = time.perf_counter()
                cm.compile(max_tokens=8000, catch_up=5)
                took = time.perf_counter() - start
                with lock:
                    times.append(took)
                time.sleep(think)  # the model's latency
                for m in (call, result):
                    cm.add_message(m["participant"], m["content"])
                cm.tick()

    with tempfile.TemporaryDirectory() as tmp:
        threads = [
            threading.Thread(target=loop, args=(Path(tmp), f"agent-{n:03d}")) for n in range(agents)
        ]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
    return times


def quantile(values: list[float], q: float) -> float:
    if not values:
        return float("nan")
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--agents", type=int, default=32)
    parser.add_argument("--turns", type=int, default=200)
    parser.add_argument("--think-ms", type=float, default=200.0)
    parser.add_argument("--max-seconds", type=float, default=1800.0)
    parser.add_argument("--kill-trials", type=int, default=0)
    parser.add_argument("--reload", action="store_true")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--out", type=Path, default=Path("out/load.json"))
    args = parser.parse_args()
    rng = random.Random(args.seed)
    report: dict[str, Any] = {"agents": args.agents, "turns": args.turns, "think_ms": args.think_ms}
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp) / "stores"
        config = Path(tmp) / "service.yaml"
        port = free_port()
        if args.kill_trials:
            trials = []
            for trial in range(args.kill_trials):
                write_config(config, root, port, keys=(KEY,), body=8 << 20)
                server = Server(config, port)
                tally, _ = asyncio.run(
                    run_load(
                        server.url,
                        args.agents,
                        args.turns,
                        args.think_ms / 1000,
                        args.max_seconds,
                        [KEY],
                        stop_after=rng.uniform(0.5, 4.0),
                    )
                )
                server.stop(signal.SIGKILL)
                acknowledged, found, problems = check_stores(root, tally)
                trials.append({"acknowledged": acknowledged, "found": found, "problems": problems})
                print(
                    f"trial {trial + 1}: SIGKILL after {tally.requests} requests; "
                    f"{found}/{acknowledged} acknowledged messages found; "
                    f"{len(problems)} problems",
                    flush=True,
                )
            report["kill_trials"] = trials
            report["kill_trials_clean"] = sum(
                1 for t in trials if not t["problems"] and t["found"] == t["acknowledged"]
            )
        else:
            write_config(config, root, port, keys=(KEY, SPARE), body=8 << 20)
            server = Server(config, port)
            keys = [KEY]

            def reload_midway() -> None:
                time.sleep(5)
                write_config(config, root, port, keys=(SPARE,), body=4 << 20)
                keys.insert(0, SPARE)  # new requests carry the new key; in flight, the old

            tally, seconds = asyncio.run(
                run_load(
                    server.url,
                    args.agents,
                    args.turns,
                    args.think_ms / 1000,
                    args.max_seconds,
                    keys,
                    on_running=reload_midway if args.reload else None,
                )
            )
            code = server.stop()
            if tally.errors:  # keep what the server said about them
                args.out.parent.mkdir(parents=True, exist_ok=True)
                shutil.copy(config.with_suffix(".log"), args.out.with_suffix(".server.log"))
            acknowledged, found, problems = check_stores(root, tally)
            local = in_process(args.agents, args.turns, args.think_ms / 1000)
            report.update(
                requests=tally.requests,
                seconds=round(seconds, 1),
                requests_per_second=round(tally.requests / seconds, 1),
                compile_p50_ms=round(1000 * statistics.median(tally.compile_seconds), 1),
                compile_p99_ms=round(1000 * quantile(tally.compile_seconds, 0.99), 1),
                compile_p50_in_process_ms=round(1000 * statistics.median(local), 1),
                compile_p99_in_process_ms=round(1000 * quantile(local, 0.99), 1),
                errors=len(tally.errors),
                first_errors=tally.errors[:5],
                refused_by_removed_key=tally.refused_by_key,
                acknowledged=acknowledged,
                found_after_shutdown=found,
                store_problems=problems,
                exit_code=code,
            )
            print(json.dumps(report, indent=2))
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(report, indent=2) + "\n")


if __name__ == "__main__":
    os.environ.setdefault("PYTHONUNBUFFERED", "1")
    main()
