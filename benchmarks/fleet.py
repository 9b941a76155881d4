"""A fleet of agent processes on one PostgreSQL server, against the same on SQLite.

``python benchmarks/fleet.py`` starts a throwaway PostgreSQL server
(:mod:`tests.support.postgres_server`; ``--url`` uses a given one instead, which must
allow ``CREATE DATABASE`` and ``--agents`` + a few connections) and runs ``--workers``
worker processes serving ``--agents`` agents (agent k by worker k % N), each agent a
thread of its worker running ``--turns`` turns of an agent loop: the user's message,
a compile, a model call (``--think-ms``, spent waiting), the agent's tool call and its
result, a tick (the extractive summariser writes the memories). Each agent's store is
in the server's database (one new database per run); the same loop then runs with a
store file per agent in a temporary folder (SQLite). The report puts side by side
the p50/p99 of ``add_message``, ``compile``, ``tick`` and the turn (its wall time
without the model's wait and the journal writes) on each engine and their ratios,
compiles/s and the memories made.

Every worker journals each message it added once ``add_message`` returned (the
message was acknowledged), one line appended, flushed and fsync'd. After a run every
agent's store is reopened: each acknowledged message must be there exactly once (no
message is stored twice at all), and every store must audit clean
(:func:`context_manager.topology.audit_store`).

The kill run (``--kills K``, every ``--kill-every S`` seconds; ``--kills 0`` skips it)
runs the fleet on PostgreSQL until it has SIGKILLed a random worker K times, each
restarted at once: the new worker reopens its agents (a dead worker's writer locks are
released when the server sees its connection end; an open refused with
``StoreLockedError`` is retried for up to ``--takeover-timeout`` seconds), reads each
store to resume where it stands (a message whose add was in flight at the kill and
was stored is not added again), and goes on. The same checks follow; the report
gives the kills, acknowledged, lost and duplicated messages, the fate of the adds in
flight at the kills, the audits and the takeover time (from the SIGKILL to the agent's
store open in the new worker) p50/max.

Everything is bounded: ``--max-seconds`` for the whole run (workers stop starting
turns in time for the checks; a phase cut short says so), every wait has a deadline.
The JSON report goes to ``--out``; a table is printed.

Measured (2 vCPUs, the throwaway server on a Unix socket, 8 workers, 64 agents, 100
turns, 200 ms think, ``--repeats 3``; p50/p99 in ms, PostgreSQL then SQLite): compile
7.22/126 against 3.54/97.1 (2.0x/1.3x), add_message 4.03/77.5 against 0.67/30.1
(6.0x/2.6x), tick 0.28/196 against 0.33/150 (0.85x/1.3x), turn 41.7/346 against
11.2/211 (3.7x/1.6x); 206 against 243 compiles/s. An add is one round trip (its writes
go with BEGIN and COMMIT as one query), a compile 0.1, a tick 0.2. The machine is
saturated on both engines (every second of both cores used), and every acknowledged
PostgreSQL add waits for its round trip, which the SQLite add never does. That wait is
the whole gap: ``--engines sqlite --control-wait-ms 0.3``, each SQLite add sleeping
0.3 ms in its agent's thread (one round trip on the loaded machine: ``SELECT 1`` from
an idle process takes 0.32 ms p50), gives compile 7.74/115, add 3.89/69.7 and turn
41.2/351, PostgreSQL's figures: a busy agent thread that waits at all waits for a
core again. At 16 agents every ratio is within 2x (add p50 1.97x), at 32 within 2.6x.
57,600 messages acknowledged on each engine, none lost or duplicated, 192/192 audits
clean. The kill run: 10 SIGKILLs in 111 s, 51,257 acknowledged, 0 lost, 0 duplicated,
64/64 audits clean; takeover p50 4.1 s, max 5.1 s, of which 3.3 s is the new process
starting on the busy machine and none waiting for a lock (no open was refused).

Examples
--------
``python benchmarks/fleet.py`` (8 workers, 64 agents, 100 turns, 10 kills every 10 s)
``python benchmarks/fleet.py --workers 4 --agents 16 --turns 40 --kills 3 --kill-every 5``
``python benchmarks/fleet.py --quick`` (a small fleet in well under a minute)
``python benchmarks/fleet.py --url postgresql://me@db/bench --kills 0``
"""

from __future__ import annotations

import argparse
import json
import os
import random
import select
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterator
from contextlib import contextmanager, suppress
from dataclasses import asdict, dataclass, field
from functools import partial
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:  # tests.support: the throwaway server
    sys.path.insert(0, str(ROOT))

from context_manager import ContextManager, ExtractiveSummarizer  # noqa: E402
from context_manager.store import StoreLockedError  # noqa: E402

ENGINES = ("postgresql", "sqlite")
WINDOW_TOKENS = 8000
CATCH_UP = 5
GRACE_SECONDS = 60.0
"""How long past its stop time a worker may take to finish its turn and exit."""
CONTROL_WAIT = 0.0002
"""Seconds a SQLite worker's probe sleeps: about one idle round trip to the server."""
PROBE_PERIOD = 0.02
"""Seconds between a worker's probe calls."""
CHECK_RESERVE = 0.12
"""The part of ``--max-seconds`` (at least 30 s) kept for the checks after the runs."""


# ------------------------------------------------------------------ configuration
@dataclass
class FleetConfig:
    """The fleet's size, the loop's timing and the kill run's."""

    workers: int = 8
    agents: int = 64
    turns: int = 100
    think_ms: float = 200.0
    kills: int = 10
    kill_every: float = 10.0
    kill_turns: int = 0
    """Turns per agent in the kill run; 0: until the kills are done."""
    takeover_timeout: float = 60.0
    max_seconds: float = 1200.0
    seed: int = 0
    url: str | None = None
    engines: tuple[str, ...] = ENGINES
    probe_turns: int = 20
    """Turns of the in-process probe that counts statements per call (0: none)."""
    repeats: int = 1
    control_wait_ms: float = 0.0
    """The control: every SQLite add also sleeps this long in the agent's thread
    (inside its timed call), as a PostgreSQL add waits for its round trip."""
    """Timed runs per engine, their calls pooled (the engines' order alternating)."""
    switch_interval_ms: float | None = None
    """The workers' :func:`sys.setswitchinterval` in ms (None: Python's, 5 ms): how
    long a thread back from the database may wait for the GIL held by another
    agent's thread."""


QUICK = {
    "workers": 2,
    "agents": 6,
    "turns": 8,
    "think_ms": 20.0,
    "kills": 2,
    "kill_every": 1.5,
    "max_seconds": 240.0,
    "probe_turns": 6,
}


def agent_name(k: int) -> str:
    return f"agent-{k:03d}"


def turn_messages(agent: str, turn: int) -> list[tuple[str, str, Any]]:
    """The turn's three messages: (tag, participant, content); the tag names each."""
    tag = f"{agent}/{turn}"
    user = f"[{tag}] Please check the status of order {turn * 7919 % 10007}."
    call = [
        {"type": "text", "text": f"[{tag}] Looking up order {turn}."},
        {"type": "tool_use", "id": f"t{turn}", "name": "lookup", "input": {"order": turn}},
    ]
    body = f"[{tag}] order {turn}: shipped; carrier HX{turn:05d}; " + "line item " * 40
    result = [{"type": "tool_result", "tool_use_id": f"t{turn}", "content": body}]
    return [
        (f"{tag}/user", "User", user),
        (f"{tag}/call", "Claude", call),
        (f"{tag}/result", "Tool", result),
    ]


def open_manager(engine: str, where: str, agent: str) -> ContextManager:
    """The agent's manager: its store in the database at ``where``, or a file under it."""
    kwargs: dict[str, Any] = (
        {"url": where, "agent": agent}
        if engine == "postgresql"
        else {"path": Path(where) / f"{agent}.db"}
    )
    return ContextManager.open(
        summarizer=ExtractiveSummarizer(), window_tokens=WINDOW_TOKENS, **kwargs
    )


def store_address(engine: str, where: str, agent: str) -> str:
    if engine == "postgresql":
        return f"{where}{'&' if '?' in where else '?'}agent={agent}"
    return str(Path(where) / f"{agent}.db")


def tags_of(cm: ContextManager) -> list[tuple[str | None, str]]:
    """(tag, id) of every stored message."""
    found: list[tuple[str | None, str]] = []
    for m in cm.get_messages():
        meta = m.message.metadata or {}
        tag = meta.get("tag")
        found.append((tag if isinstance(tag, str) else None, m.id))
    return found


# ------------------------------------------------------------------ the worker
class Journal:
    """A worker's journal: one JSON line per event, appended with one ``write``;
    acknowledgements and opens fsync'd before the call that made them is done."""

    def __init__(self, path: Path) -> None:
        self.fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)

    def write(self, entry: dict[str, Any], *, sync: bool) -> None:
        os.write(self.fd, (json.dumps(entry, separators=(",", ":")) + "\n").encode())
        if sync:
            os.fsync(self.fd)

    def close(self) -> None:
        os.close(self.fd)


@dataclass
class AgentTally:
    add: list[float] = field(default_factory=list)
    compile: list[float] = field(default_factory=list)
    tick: list[float] = field(default_factory=list)
    turn: list[float] = field(default_factory=list)
    turns: int = 0
    resumed: int = 0
    """Turns found part-done in the store at open (a predecessor was killed in them)."""
    errors: list[str] = field(default_factory=list)


def open_with_retry(
    engine: str, where: str, agent: str, timeout: float
) -> tuple[ContextManager, float, int]:
    """Open the agent's manager, retrying while a dead predecessor's lock is held:
    (manager, seconds until the attempt that succeeded began, refusals)."""
    start = time.monotonic()
    refused = 0
    pause = 0.02
    while True:
        attempt = time.monotonic()
        try:
            return open_manager(engine, where, agent), attempt - start, refused
        except StoreLockedError:
            refused += 1
            if time.monotonic() - start > timeout:
                raise
            time.sleep(pause)  # the server has not yet seen the holder's connection end
            pause = min(0.5, pause * 2)


def serve_agent(
    spec: dict[str, Any],
    agent: str,
    journal: Journal,
    tally: AgentTally,
    opened: threading.Semaphore,
    go: threading.Event,
    stop: threading.Event,
) -> None:
    think = spec["think_ms"] / 1000
    control = spec.get("control_wait_ms", 0.0) / 1000
    try:
        cm, waited, refused = open_with_retry(
            spec["engine"], spec["where"], agent, spec["takeover_timeout"]
        )
    except Exception as exc:
        tally.errors.append(f"{agent}: open: {type(exc).__name__}: {exc}")
        opened.release()
        return
    journal.write(
        {"k": "open", "a": agent, "at": time.time(), "waited": waited, "refused": refused},
        sync=True,
    )
    opened.release()
    go.wait()
    try:
        with cm:
            present = {tag for tag, _ in tags_of(cm) if tag is not None}
            for turn in range(spec["turns"]):
                if stop.is_set() or time.time() >= spec["stop_at"]:
                    break
                messages = turn_messages(agent, turn)
                todo = [m for m in messages if m[0] not in present]
                if not todo:
                    continue
                whole = len(todo) == len(messages)
                tally.resumed += not whole
                began = time.perf_counter()
                aside = 0.0  # the model's wait and the journal's writes
                for tag, participant, content in todo:
                    journal.write({"k": "sent", "a": agent, "t": tag}, sync=False)
                    t0 = time.perf_counter()
                    mid = cm.add_message(participant, content, metadata={"tag": tag})
                    if control and spec["engine"] == "sqlite":
                        time.sleep(control)
                    t1 = time.perf_counter()
                    journal.write({"k": "ack", "a": agent, "t": tag, "id": mid}, sync=True)
                    present.add(tag)
                    tally.add.append(t1 - t0)
                    t2 = time.perf_counter()
                    aside += t2 - t1
                    if participant == "User":
                        cm.compile(max_tokens=WINDOW_TOKENS, catch_up=CATCH_UP)
                        t3 = time.perf_counter()
                        tally.compile.append(t3 - t2)
                        stop.wait(think)  # the model's latency
                        aside += time.perf_counter() - t3
                t0 = time.perf_counter()
                cm.tick()
                t1 = time.perf_counter()
                tally.tick.append(t1 - t0)
                if whole:
                    tally.turn.append(t1 - began - aside)
                tally.turns += 1
    except Exception as exc:
        tally.errors.append(f"{agent}: {type(exc).__name__}: {exc}")


def probe_blocking(spec: dict[str, Any], samples: list[float], stop: threading.Event) -> None:
    """Beside the agents of a worker, time one blocking call every :data:`PROBE_PERIOD`:
    on PostgreSQL ``SELECT 1`` on a connection of its own, on SQLite a sleep of
    :data:`CONTROL_WAIT` (as long as an idle round trip). Either returns only once the
    worker's thread gets a core and the GIL back: what any call that waits costs in a
    worker on the loaded machine, whatever it waits for."""
    if spec["engine"] == "postgresql":
        import psycopg

        raw = psycopg.connect(spec["where"], autocommit=True)

        def call() -> None:
            raw.execute("SELECT 1").fetchone()
    else:

        def call() -> None:
            time.sleep(CONTROL_WAIT)

    while not stop.wait(PROBE_PERIOD):
        t0 = time.perf_counter()
        call()
        samples.append(time.perf_counter() - t0)


def warm_up() -> None:
    """Load what a process loads on its first call (the tokenizer's tables), so the
    measured calls are the steady state's."""
    with ContextManager.open(
        path=":memory:", summarizer=ExtractiveSummarizer(), window_tokens=WINDOW_TOKENS
    ) as cm:
        for _, participant, content in turn_messages("warm-up", 0):
            cm.add_message(participant, content)
        cm.compile(max_tokens=WINDOW_TOKENS, catch_up=CATCH_UP)
        cm.tick()


def worker_main(spec_path: Path) -> None:
    """One worker process: a thread per agent; prints ``ready`` once every agent's
    store is open, starts on ``go`` (or at once without a barrier), stops starting
    turns on ``stop`` or the end of its input, writes its results and exits."""
    spec = json.loads(spec_path.read_text())
    if spec.get("switch_interval_ms") is not None:
        sys.setswitchinterval(spec["switch_interval_ms"] / 1000)
    journal = Journal(Path(spec["journal"]))
    journal.write({"k": "start", "at": time.time()}, sync=False)
    if spec["barrier"]:
        warm_up()
    go, stop = threading.Event(), threading.Event()
    opened = threading.Semaphore(0)
    tallies = {a: AgentTally() for a in spec["agents"]}
    threads = [
        threading.Thread(
            target=serve_agent,
            args=(spec, a, journal, tallies[a], opened, go, stop),
            name=a,
            daemon=True,
        )
        for a in spec["agents"]
    ]
    for t in threads:
        t.start()
    for _ in threads:
        opened.acquire()
    print("ready", flush=True)
    if spec["barrier"]:
        sys.stdin.readline()  # "go", or the end of the input
    go.set()
    cpu = time.process_time()

    def listen() -> None:
        sys.stdin.readline()  # "stop", or the end of the input
        stop.set()

    threading.Thread(target=listen, daemon=True).start()
    blocking: list[float] = []
    if spec.get("probe"):
        threading.Thread(
            target=probe_blocking, args=(spec, blocking, stop), name="probe", daemon=True
        ).start()
    for t in threads:
        t.join(max(0.0, spec["stop_at"] + GRACE_SECONDS / 2 - time.time()))
    stop.set()
    results = {
        "blocking": blocking,
        "incarnation": spec["incarnation"],
        "agents": {a: asdict(t) for a, t in tallies.items()},
        "unfinished": [t.name for t in threads if t.is_alive() and t.name != "probe"],
        "cpu_seconds": time.process_time() - cpu,
    }
    Path(spec["results"]).write_text(json.dumps(results))
    journal.close()
    sys.stdout.flush()
    os._exit(0)  # threads still in a call (none unless past the grace) are not waited


# ------------------------------------------------------------------ a phase
@dataclass
class Worker:
    index: int
    agents: list[str]
    incarnation: int = 0
    process: subprocess.Popen[bytes] | None = None
    log: Any = None


class Phase:
    """One run of the fleet on one engine: spawns, kills and restarts the workers."""

    def __init__(
        self, cfg: FleetConfig, engine: str, where: str, folder: Path, stop_at: float
    ) -> None:
        self.cfg, self.engine, self.where, self.folder = cfg, engine, where, folder
        self.stop_at = stop_at
        folder.mkdir(parents=True, exist_ok=True)
        self.workers = [
            Worker(w, [agent_name(k) for k in range(cfg.agents) if k % cfg.workers == w])
            for w in range(cfg.workers)
        ]
        self.errors: list[str] = []

    def spawn(self, worker: Worker, *, turns: int, barrier: bool) -> None:
        worker.incarnation += 1
        name = f"w{worker.index}-{worker.incarnation}"
        spec = {
            "engine": self.engine,
            "where": self.where,
            "agents": worker.agents,
            "turns": turns,
            "think_ms": self.cfg.think_ms,
            "switch_interval_ms": self.cfg.switch_interval_ms,
            "control_wait_ms": self.cfg.control_wait_ms,
            "takeover_timeout": self.cfg.takeover_timeout,
            "stop_at": self.stop_at,
            "barrier": barrier,
            "incarnation": name,
            "probe": worker.index == 0,
            "journal": str(self.folder / f"journal-{name}.jsonl"),
            "results": str(self.folder / f"results-{name}.json"),
        }
        spec_path = self.folder / f"spec-{name}.json"
        spec_path.write_text(json.dumps(spec))
        worker.log = open(self.folder / f"log-{name}.txt", "wb")  # noqa: SIM115
        worker.process = subprocess.Popen(
            [sys.executable, str(Path(__file__).resolve()), "--worker", str(spec_path)],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=worker.log,
            cwd=ROOT,
        )

    def wait_ready(self, deadline: float) -> None:
        """Until every worker printed ``ready`` (its agents' stores open)."""
        waiting = {
            w.process.stdout.fileno(): w for w in self.workers if w.process and w.process.stdout
        }
        while waiting:
            left = deadline - time.monotonic()
            if left <= 0:
                raise RuntimeError(f"{len(waiting)} workers did not open their stores in time")
            ready, _, _ = select.select(list(waiting), [], [], left)
            for fd in ready:
                w = waiting.pop(fd)
                assert w.process is not None and w.process.stdout is not None
                line = w.process.stdout.readline()
                if line != b"ready\n":
                    raise RuntimeError(
                        f"worker {w.index} ended before its stores were open: {self.log_tail(w)}"
                    )

    def log_tail(self, worker: Worker) -> str:
        path = self.folder / f"log-w{worker.index}-{worker.incarnation}.txt"
        return path.read_text(errors="replace")[-600:] if path.exists() else ""

    def tell(self, worker: Worker, line: str) -> None:
        if worker.process is None or worker.process.stdin is None:
            return
        try:
            worker.process.stdin.write(line.encode())
            worker.process.stdin.flush()
        except (BrokenPipeError, ValueError):
            pass  # it has ended

    def kill(self, worker: Worker) -> None:
        assert worker.process is not None
        worker.process.send_signal(signal.SIGKILL)
        worker.process.wait()
        self.close_pipes(worker)

    def close_pipes(self, worker: Worker) -> None:
        if worker.process is not None:
            for pipe in (worker.process.stdin, worker.process.stdout):
                if pipe is not None:
                    with suppress(BrokenPipeError):
                        pipe.close()
        if worker.log is not None:
            worker.log.close()
            worker.log = None

    def finish(self, deadline: float) -> None:
        """Wait for every worker to exit by ``deadline``; kill those that do not."""
        for w in self.workers:
            if w.process is None:
                continue
            try:
                code = w.process.wait(timeout=max(0.1, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                w.process.kill()
                code = w.process.wait()
                self.errors.append(f"worker {w.index} did not finish in time: killed")
            if code != 0:
                self.errors.append(f"worker {w.index} exited {code}: {self.log_tail(w)}")
            self.close_pipes(w)

    def stop_all(self) -> None:
        for w in self.workers:
            if w.process is not None and w.process.poll() is None:
                w.process.kill()
                w.process.wait()
            self.close_pipes(w)

    # ---------------------------------------------------------------- runs
    def run_timed(self) -> float:
        """Every worker through ``turns`` turns; the seconds from go to the last exit."""
        for w in self.workers:
            self.spawn(w, turns=self.cfg.turns, barrier=True)
        try:
            self.wait_ready(time.monotonic() + 300)
            start = time.monotonic()
            for w in self.workers:
                self.tell(w, "go\n")
            self.finish(time.monotonic() + max(0.0, self.stop_at - time.time()) + GRACE_SECONDS)
            return time.monotonic() - start
        finally:
            self.stop_all()

    def run_kills(self, rng: random.Random) -> tuple[float, list[dict[str, Any]]]:
        """Kill a random worker every ``kill_every`` seconds and restart it, ``kills``
        times (fewer when the time runs out), then stop the fleet."""
        turns = self.cfg.kill_turns or 10**9
        for w in self.workers:
            self.spawn(w, turns=turns, barrier=True)
        kills: list[dict[str, Any]] = []
        try:
            self.wait_ready(time.monotonic() + 300)
            start = time.monotonic()
            for w in self.workers:
                self.tell(w, "go\n")
            due = start
            for _ in range(self.cfg.kills):
                due += self.cfg.kill_every
                if time.time() + (due - time.monotonic()) >= self.stop_at:
                    break
                time.sleep(max(0.0, due - time.monotonic()))  # the kill's schedule
                victim = rng.choice(self.workers)
                at = time.time()
                self.kill(victim)
                was = f"w{victim.index}-{victim.incarnation}"
                self.spawn(victim, turns=turns, barrier=False)
                kills.append(
                    {
                        "at": at,
                        "worker": victim.index,
                        "killed": was,
                        "restarted": f"w{victim.index}-{victim.incarnation}",
                    }
                )
            settle = min(self.cfg.kill_every, max(0.0, self.stop_at - time.time()))
            time.sleep(settle)  # the last restarted worker takes over and works
            for w in self.workers:
                self.tell(w, "stop\n")
            self.finish(time.monotonic() + GRACE_SECONDS)
            return time.monotonic() - start, kills
        finally:
            self.stop_all()

    # ---------------------------------------------------------------- reading
    def journal(self) -> Iterator[tuple[str, dict[str, Any]]]:
        """(incarnation, entry) for every whole line of every journal."""
        for path in sorted(self.folder.glob("journal-*.jsonl")):
            name = path.stem.removeprefix("journal-")
            for line in path.read_text().splitlines():
                try:
                    yield name, json.loads(line)
                except json.JSONDecodeError:
                    continue  # a line cut by the kill

    def results(self) -> list[dict[str, Any]]:
        return [json.loads(p.read_text()) for p in sorted(self.folder.glob("results-*.json"))]


# ------------------------------------------------------------------ checks
def check_stores(phase: Phase) -> dict[str, Any]:
    """Every acknowledged message stored exactly once, no message twice, audits clean;
    and what became of the adds sent but not acknowledged (in flight at a kill)."""
    from context_manager.topology import audit_store

    acked: dict[str, dict[str, str]] = {}
    sent: dict[str, set[str]] = {}
    for _, entry in phase.journal():
        if entry["k"] == "ack":
            acked.setdefault(entry["a"], {})[entry["t"]] = entry["id"]
        elif entry["k"] == "sent":
            sent.setdefault(entry["a"], set()).add(entry["t"])
    lost = duplicated = in_flight_stored = in_flight_absent = memories = messages = 0
    audits_clean = 0
    problems: list[str] = []
    for k in range(phase.cfg.agents):
        agent = agent_name(k)
        mine = acked.get(agent, {})
        try:
            with open_manager(phase.engine, phase.where, agent) as cm:
                stored = tags_of(cm)
        except Exception as exc:
            problems.append(f"{agent}: reopening: {type(exc).__name__}: {exc}")
            lost += len(mine)
            continue
        messages += len(stored)
        tags = Counter(tag for tag, _ in stored)
        ids = Counter(i for _, i in stored)
        twice = [t for t, n in tags.items() if n > 1] + [i for i, n in ids.items() if n > 1]
        duplicated += len(twice)
        missing = [t for t, i in mine.items() if tags[t] == 0 or ids[i] == 0]
        lost += len(missing)
        if twice:
            problems.append(f"{agent}: stored twice: {twice[:3]}")
        if missing:
            problems.append(f"{agent}: acknowledged but missing: {missing[:3]}")
        untagged = tags[None]
        if untagged:
            problems.append(f"{agent}: {untagged} messages without a tag")
        for t in sent.get(agent, set()) - set(mine):
            if tags[t]:
                in_flight_stored += 1
            else:
                in_flight_absent += 1
        try:
            audit = audit_store(store_address(phase.engine, phase.where, agent))
        except Exception as exc:
            problems.append(f"{agent}: audit: {type(exc).__name__}: {exc}")
            continue
        memories += audit.counts()["summaries"]
        if audit.findings or audit.damaged:
            problems.append(
                f"{agent}: audit: {[f.describe() for f in audit.findings][:2]} "
                f"{len(audit.damaged)} damaged rows"
            )
        else:
            audits_clean += 1
    return {
        "acknowledged": sum(len(v) for v in acked.values()),
        "stored_messages": messages,
        "lost": lost,
        "duplicated": duplicated,
        "in_flight_stored": in_flight_stored,
        "in_flight_absent": in_flight_absent,
        "audits_clean": audits_clean,
        "audits": phase.cfg.agents,
        "memories": memories,
        "problems": problems[:20],
    }


def quantiles(samples: list[float]) -> dict[str, float | int | None]:
    if not samples:
        return {"n": 0, "p50_ms": None, "p99_ms": None, "max_ms": None}
    ordered = sorted(samples)
    p99 = ordered[min(len(ordered) - 1, round(0.99 * (len(ordered) - 1)))]
    return {
        "n": len(ordered),
        "p50_ms": round(1000 * statistics.median(ordered), 2),
        "p99_ms": round(1000 * p99, 2),
        "max_ms": round(1000 * ordered[-1], 2),
    }


def worker_cpu(phase: Phase) -> float:
    """CPU seconds the workers that ended by themselves spent from ``go`` on."""
    return float(sum(result.get("cpu_seconds", 0.0) for result in phase.results()))


def latencies(phases: list[Phase]) -> tuple[dict[str, Any], int, int, list[str]]:
    """Over the phases' workers: (per-call quantiles by operation, compiles, turns,
    the agents' errors)."""
    pooled: dict[str, list[float]] = {"add": [], "compile": [], "tick": [], "turn": []}
    turns = 0
    errors: list[str] = []
    for result in (r for phase in phases for r in phase.results()):
        for tally in result["agents"].values():
            for op, samples in pooled.items():
                samples.extend(tally[op])
            turns += tally["turns"]
            errors.extend(tally["errors"])
        errors.extend(f"{a}: unfinished at exit" for a in result["unfinished"])
    return (
        {op: quantiles(s) for op, s in pooled.items()},
        len(pooled["compile"]),
        turns,
        errors,
    )


def takeovers(phase: Phase, kills: list[dict[str, Any]]) -> dict[str, Any]:
    """From each SIGKILL to each of the victim's agents' store open in its successor;
    the part of it before the successor ran (process start, imports) and the part
    its opens were refused for a lock still held."""
    opens: dict[str, dict[str, dict[str, Any]]] = {}
    started: dict[str, float] = {}
    for name, entry in phase.journal():
        if entry["k"] == "open":
            opens.setdefault(name, {})[entry["a"]] = entry
        elif entry["k"] == "start":
            started[name] = entry["at"]
    killed = {kill["killed"] for kill in kills}
    times: list[float] = []
    waited: list[float] = []
    starting: list[float] = []
    refused = incomplete = killed_again = 0
    for kill in kills:
        agents = phase.workers[kill["worker"]].agents
        got = opens.get(kill["restarted"], {})
        missing = sum(1 for a in agents if a not in got)
        if kill["restarted"] in killed:
            killed_again += missing  # its successor was killed before it opened them
        else:
            incomplete += missing
        if kill["restarted"] in started:
            starting.append(started[kill["restarted"]] - kill["at"])
        took = [got[a]["at"] - kill["at"] for a in agents if a in got]
        kill["takeover_max_s"] = round(max(took), 3) if took else None
        times += took
        waited += [got[a]["waited"] for a in agents if a in got]
        refused += sum(got[a]["refused"] for a in agents if a in got)

    def p50(xs: list[float]) -> float | None:
        return round(statistics.median(xs), 3) if xs else None

    def top(xs: list[float]) -> float | None:
        return round(max(xs), 3) if xs else None

    return {
        "takeovers": len(times),
        "takeover_p50_s": p50(times),
        "takeover_max_s": top(times),
        "process_start_p50_s": p50(starting),
        "process_start_max_s": top(starting),
        "lock_wait_p50_s": p50(waited),
        "lock_wait_max_s": top(waited),
        "opens_refused_locked": refused,
        "not_reopened": incomplete,
        "killed_again_before_reopening": killed_again,
        "schedule": [
            {
                "after_s": round(k["at"] - kills[0]["at"], 2),
                "worker": k["worker"],
                "takeover_max_s": k["takeover_max_s"],
            }
            for k in kills
        ],
    }


# ------------------------------------------------------------------ statements per call
class _Counting:
    """A SQLite store connection counting the statements run through it (the
    PostgreSQL connection counts its own statements and round trips)."""

    def __init__(self, inner: Any) -> None:
        self._inner = inner
        self.statements = 0

    @property
    def round_trips(self) -> int:
        return 0  # in-process calls

    def execute(self, *args: Any, **kwargs: Any) -> Any:
        self.statements += 1
        return self._inner.execute(*args, **kwargs)

    def executemany(self, *args: Any, **kwargs: Any) -> Any:
        self.statements += 1
        return self._inner.executemany(*args, **kwargs)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._inner, name)


def statements_per_call(engine: str, where: str, turns: int) -> dict[str, float]:
    """One agent in this process, ``turns`` turns: the mean statements sent to the
    database per add, compile and tick and, on PostgreSQL, the round trips they took
    (a transaction's ``BEGIN`` goes with its first statement) and the median time of
    one round trip (``SELECT 1``), the fleet stopped."""
    agent = "statement-probe"
    with open_manager(engine, where, agent) as cm:
        store: Any = cm._store
        inner = store._conn
        conn = _Counting(inner) if engine == "sqlite" else inner
        store._conn = conn
        spent: dict[str, list[tuple[int, int]]] = {"add": [], "compile": [], "tick": []}

        def timed(op: str, call: Callable[[], object]) -> None:
            before = (conn.statements, conn.round_trips)
            call()
            spent[op].append((conn.statements - before[0], conn.round_trips - before[1]))

        try:
            for turn in range(turns):
                for tag, participant, content in turn_messages(agent, turn):
                    add = partial(cm.add_message, participant, content, metadata={"tag": tag})
                    timed("add", add)
                    if participant == "User":
                        timed(
                            "compile",
                            lambda: cm.compile(max_tokens=WINDOW_TOKENS, catch_up=CATCH_UP),
                        )
                timed("tick", cm.tick)
            trips: list[float] = []
            for _ in range(200 if engine == "postgresql" else 0):
                t0 = time.perf_counter()
                inner.execute("SELECT 1")
                trips.append(time.perf_counter() - t0)
        finally:
            store._conn = inner
    found = {op: round(statistics.mean(n for n, _ in v), 2) for op, v in spent.items() if v}
    if trips:
        for op, v in spent.items():
            if v:
                found[f"{op}_round_trips"] = round(statistics.mean(r for _, r in v), 2)
        found["select_1_ms"] = round(1000 * statistics.median(trips), 3)
    return found


# ------------------------------------------------------------------ the run
@contextmanager
def postgres(cfg: FleetConfig) -> Iterator[tuple[str, int | None]]:
    """The server's URL and its postmaster's pid (None for a given server, whose CPU is
    not counted): ``cfg.url``, or a throwaway server's, stopped afterwards."""
    from tests.support import postgres_server

    if cfg.url:
        yield cfg.url, None
        return
    server = postgres_server.start()
    try:
        pid_file = server.folder / "data" / "postmaster.pid"
        yield server.url, int(pid_file.read_text().split()[0])
    finally:
        postgres_server.stop(server)


def process_cpu(pid: int | None) -> float | None:
    """CPU seconds of a process and its children that ended (a postmaster's: the
    backends of closed connections), None when unknown."""
    if pid is None:
        return None
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return None
    return sum(int(x) for x in fields[11:15]) / os.sysconf("SC_CLK_TCK")  # u, s, cu, cs


def backends_gone(url: str, deadline: float) -> None:
    """Wait (up to ``deadline``) until no other connection to the database is open: the
    workers' backends have ended and their CPU time is the postmaster's."""
    import psycopg

    with psycopg.connect(url, autocommit=True) as raw:
        while time.monotonic() < deadline:
            row = raw.execute(
                "SELECT COUNT(*) FROM pg_stat_activity WHERE datname = current_database() "
                "AND pid <> pg_backend_pid()"
            ).fetchone()
            if not row or not row[0]:
                return
            time.sleep(0.05)  # a backend exiting: bounded by the deadline


def new_database(url: str) -> str:
    from tests.support.postgres_server import fresh_database

    return fresh_database(url)


@contextmanager
def round_trips_under_load(where: str | None, period: float = 0.02) -> Iterator[list[float]]:
    """While the block runs, a thread of this process (idle otherwise: no agent holds
    its GIL) times ``SELECT 1`` on a connection of its own every ``period`` seconds:
    what one round trip costs on the loaded machine, the floor of an acknowledged
    write. Nothing for ``where=None`` (SQLite)."""
    samples: list[float] = []
    if where is None:
        yield samples
        return
    import psycopg

    done = threading.Event()
    with psycopg.connect(where, autocommit=True) as raw:

        def probe() -> None:
            while not done.wait(period):
                t0 = time.perf_counter()
                raw.execute("SELECT 1").fetchone()
                samples.append(time.perf_counter() - t0)

        thread = threading.Thread(target=probe, daemon=True)
        thread.start()
        try:
            yield samples
        finally:
            done.set()
            thread.join(10)


def timed_runs(
    cfg: FleetConfig,
    url: str,
    postmaster: int | None,
    scratch: Path,
    stop_at: float,
    log: Callable[[str], None],
) -> dict[str, Any]:
    """The timed runs, ``cfg.repeats`` times on each engine (the engines' order
    alternating), every run on a new database or folder; each engine's calls pooled
    over its runs."""
    runs: dict[str, list[dict[str, Any]]] = {engine: [] for engine in cfg.engines}
    for repeat in range(cfg.repeats):
        order = cfg.engines if repeat % 2 == 0 else tuple(reversed(cfg.engines))
        for engine in order:
            if engine == "postgresql":
                where = new_database(url)
            else:
                where = str(scratch / f"stores-{repeat}")
                Path(where).mkdir()
            folder = scratch / f"timed-{engine}-{repeat}"
            phase = Phase(cfg, engine, where, folder, stop_at)
            log(f"{engine}: {cfg.workers} workers, {cfg.agents} agents, {cfg.turns} turns")
            server_cpu = process_cpu(postmaster) if engine == "postgresql" else None
            probe_at = where if engine == "postgresql" else None
            try:
                with round_trips_under_load(probe_at) as trips:
                    seconds = phase.run_timed()
            except RuntimeError as exc:
                runs[engine].append({"error": str(exc)})
                continue
            if server_cpu is not None:
                backends_gone(where, time.monotonic() + 30)
                after = process_cpu(postmaster)
                server_cpu = None if after is None else after - server_cpu
            run: dict[str, Any] = {
                "phase": phase,
                "where": where,
                "seconds": seconds,
                "server_cpu": server_cpu,
                "trips": trips,
                "checked": check_stores(phase),
            }
            runs[engine].append(run)
            ops, _, turns, _ = latencies([phase])
            log(
                f"{engine}: {turns} turns in {seconds:.1f} s; p50 compile "
                f"{ops['compile']['p50_ms']} ms, add {ops['add']['p50_ms']} ms; "
                f"{run['checked']['acknowledged']} acknowledged, {run['checked']['lost']} "
                f"lost, {run['checked']['duplicated']} duplicated"
            )
    return {engine: pooled(cfg, engine, found) for engine, found in runs.items()}


def pooled(cfg: FleetConfig, engine: str, runs: list[dict[str, Any]]) -> dict[str, Any]:
    """One engine's figures over its timed runs: calls pooled, counts summed."""
    failed = [r["error"] for r in runs if "error" in r]
    good = [r for r in runs if "error" not in r]
    if not good:
        return {"error": "; ".join(failed) or "no run"}
    phases = [r["phase"] for r in good]
    ops, compiles, turns, errors = latencies(phases)
    seconds = sum(r["seconds"] for r in good)
    workers_cpu = sum(worker_cpu(p) for p in phases)
    server = [r["server_cpu"] for r in good]
    server_cpu = None if None in server else sum(server)
    checked: dict[str, Any] = {}
    for r in good:
        for key, value in r["checked"].items():
            if key == "problems":
                checked[key] = (checked.get(key, []) + value)[:20]
            else:
                checked[key] = checked.get(key, 0) + value
    statements = (
        statements_per_call(engine, good[-1]["where"], cfg.probe_turns) if cfg.probe_turns else {}
    )
    trips = [t for r in good for t in r["trips"]]
    blocking = [t for p in phases for result in p.results() for t in result.get("blocking", [])]
    return {
        "runs": len(good),
        "seconds": round(seconds, 1),
        "compiles": compiles,
        "turns": turns,
        "compiles_per_second": round(compiles / seconds, 1) if compiles else None,
        "cut_short": turns < cfg.agents * cfg.turns * len(good),
        "calls": ops,
        "p50_ms_by_run": {op: [latencies([p])[0][op]["p50_ms"] for p in phases] for op in ops},
        "round_trip_under_load": quantiles(trips) if trips else None,
        "blocking_call_in_a_worker": quantiles(blocking) if blocking else None,
        "statements_per_call": statements,
        "cpu_seconds": {
            "workers": round(workers_cpu, 1),
            "server": None if server_cpu is None else round(server_cpu, 1),
            "available": round(seconds * (os.cpu_count() or 1), 1),
        },
        "cpu_ms_per_turn": round(1000 * (workers_cpu + (server_cpu or 0.0)) / max(1, turns), 2),
        "errors": (failed + errors)[:20],
        "error_count": len(failed) + len(errors),
        **checked,
    }


def run_fleet(cfg: FleetConfig, *, log: Callable[[str], None] = print) -> dict[str, Any]:
    """Run the timed runs on each engine and the kill run; return the report."""
    began = time.monotonic()
    end = time.time() + cfg.max_seconds
    stop_at = end - max(30.0, CHECK_RESERVE * cfg.max_seconds)
    rng = random.Random(cfg.seed)
    report: dict[str, Any] = {
        "config": {k: v for k, v in asdict(cfg).items() if k != "url"},
        "machine": {"cpus": os.cpu_count()},
        "engines": {},
    }
    scratch = Path(tempfile.mkdtemp(prefix="ctxfold-fleet-"))
    try:
        with postgres(cfg) as (url, postmaster):
            report["server"] = "given" if cfg.url else "throwaway (fsync=off, Unix socket)"
            report["engines"] = timed_runs(cfg, url, postmaster, scratch, stop_at, log)
            report["ratios"] = ratios(report["engines"])
            if cfg.kills:
                report["kill_run"] = kill_run(cfg, new_database(url), scratch, stop_at, rng, log)
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    report["seconds"] = round(time.monotonic() - began, 1)
    report["verdict"] = verdict(report)
    return report


def kill_run(
    cfg: FleetConfig,
    where: str,
    scratch: Path,
    stop_at: float,
    rng: random.Random,
    log: Callable[[str], None],
) -> dict[str, Any]:
    log(f"kill run: a worker SIGKILLed every {cfg.kill_every} s, {cfg.kills} times")
    phase = Phase(cfg, "postgresql", where, scratch / "kills", stop_at)
    try:
        seconds, kills = phase.run_kills(rng)
    except RuntimeError as exc:
        return {"error": str(exc)}
    _, compiles, turns, errors = latencies([phase])
    checked = check_stores(phase)
    found = {
        "turns_by_survivors": turns,
        "seconds": round(seconds, 1),
        "kills": len(kills),
        "kills_asked": cfg.kills,
        "compiles_by_survivors": compiles,
        "errors": (phase.errors + errors)[:20],
        "error_count": len(phase.errors) + len(errors),
        **checked,
        **takeovers(phase, kills),
    }
    log(
        f"kill run: {len(kills)} kills; {checked['acknowledged']} acknowledged, "
        f"{checked['lost']} lost, {checked['duplicated']} duplicated, audits "
        f"{checked['audits_clean']}/{checked['audits']} clean; takeover p50 "
        f"{found['takeover_p50_s']} s max {found['takeover_max_s']} s"
    )
    return found


def ratios(engines: dict[str, Any]) -> dict[str, dict[str, float | None]]:
    """PostgreSQL's p50/p99 over SQLite's, by operation."""
    pg, lite = engines.get("postgresql", {}), engines.get("sqlite", {})
    if "calls" not in pg or "calls" not in lite:
        return {}
    found: dict[str, dict[str, float | None]] = {}
    for op in pg["calls"]:
        found[op] = {}
        for q in ("p50_ms", "p99_ms"):
            a, b = pg["calls"][op][q], lite["calls"][op][q]
            found[op][q.removesuffix("_ms")] = round(a / b, 2) if a and b else None
    a, b = pg.get("compiles_per_second"), lite.get("compiles_per_second")
    found["compiles_per_second"] = {"ratio": round(a / b, 2) if a and b else None}
    return found


def verdict(report: dict[str, Any]) -> dict[str, Any]:
    """The checks passed or not, and the 3x bar on every call and the turn."""
    clean = True
    for engine in report["engines"].values():
        clean &= (
            "error" not in engine
            and engine.get("lost") == 0
            and engine.get("duplicated") == 0
            and engine.get("audits_clean") == engine.get("audits")
            and engine.get("error_count") == 0
        )
    kill = report.get("kill_run")
    if kill is not None:
        clean &= (
            "error" not in kill
            and kill.get("lost") == 0
            and kill.get("duplicated") == 0
            and kill.get("audits_clean") == kill.get("audits")
            and kill.get("kills") == kill.get("kills_asked")
        )
    within: dict[str, bool] = {}
    for op in ("compile", "add", "tick", "turn"):
        got = report.get("ratios", {}).get(op, {})
        for q in ("p50", "p99"):
            if got.get(q) is not None:
                within[f"{op}_{q}"] = got[q] <= 3.0
    return {"checks_pass": bool(clean), "within_3x": within}


def table(report: dict[str, Any]) -> str:
    """The report as a readable table."""
    engines = report["engines"]
    pg, lite = engines.get("postgresql", {}), engines.get("sqlite", {})
    rows = [
        f"{'per call (ms)':<16}{'PostgreSQL p50':>15}{'p99':>9}{'SQLite p50':>12}{'p99':>9}"
        f"{'ratio p50':>11}{'p99':>7}"
    ]
    for op in ("compile", "add", "tick", "turn"):
        a = pg.get("calls", {}).get(op, {})
        b = lite.get("calls", {}).get(op, {})
        r = report.get("ratios", {}).get(op, {})
        rows.append(
            f"{op:<16}{a.get('p50_ms', '-'):>15}{a.get('p99_ms', '-'):>9}"
            f"{b.get('p50_ms', '-'):>12}{b.get('p99_ms', '-'):>9}"
            f"{r.get('p50', '-'):>11}{r.get('p99', '-'):>7}"
        )
    rows.append("")
    rows.append(f"{'':<26}{'PostgreSQL':>14}{'SQLite':>14}")
    for key, label in (
        ("compiles_per_second", "compiles/s"),
        ("cpu_ms_per_turn", "CPU ms/turn (all procs)"),
        ("turns", "turns"),
        ("seconds", "seconds"),
        ("memories", "memories made"),
        ("acknowledged", "acknowledged"),
        ("lost", "lost"),
        ("duplicated", "duplicated"),
        ("audits_clean", "audits clean"),
        ("error_count", "errors"),
    ):
        rows.append(f"{label:<26}{pg.get(key, '-')!s:>14}{lite.get(key, '-')!s:>14}")
    for who in ("workers", "server", "available"):
        rows.append(
            f"{'CPU s, ' + who:<26}{pg.get('cpu_seconds', {}).get(who, '-')!s:>14}"
            f"{lite.get('cpu_seconds', {}).get(who, '-')!s:>14}"
        )
    probe_rows = [(f"statements/{op}", op) for op in ("add", "compile", "tick")]
    probe_rows += [(f"round trips/{op}", f"{op}_round_trips") for op in ("add", "compile", "tick")]
    for label, key in [*probe_rows, ("one round trip idle, ms", "select_1_ms")]:
        rows.append(
            f"{label:<26}"
            f"{pg.get('statements_per_call', {}).get(key, '-')!s:>14}"
            f"{lite.get('statements_per_call', {}).get(key, '-')!s:>14}"
        )
    loaded = pg.get("round_trip_under_load") or {}
    rows.append(
        f"{'one round trip loaded, ms':<26}"
        f"{str(loaded.get('p50_ms', '-')) + ' / ' + str(loaded.get('p99_ms', '-')):>14}"
        f"{'-':>14}   (p50 / p99, SELECT 1 from an idle process)"
    )
    inside = (
        pg.get("blocking_call_in_a_worker") or {},
        lite.get("blocking_call_in_a_worker") or {},
    )
    rows.append(
        f"{'a wait in a worker, ms':<26}"
        + "".join(
            f"{str(q.get('p50_ms', '-')) + ' / ' + str(q.get('p99_ms', '-')):>14}" for q in inside
        )
        + f"   (p50 / p99, SELECT 1 on PostgreSQL, a {1000 * CONTROL_WAIT:g} ms sleep on SQLite)"
    )
    for op in ("compile", "add", "turn"):
        rows.append(
            f"{op + ' p50 by run, ms':<26}"
            f"{' '.join(map(str, pg.get('p50_ms_by_run', {}).get(op, []))):>14}"
            f"{' '.join(map(str, lite.get('p50_ms_by_run', {}).get(op, []))):>14}"
        )
    kill = report.get("kill_run")
    if kill:
        rows.append("")
        if "error" in kill:
            rows.append(f"kill run: {kill['error']}")
        else:
            rows.append(
                f"kill run: {kill['kills']}/{kill['kills_asked']} SIGKILLs in "
                f"{kill['seconds']} s; {kill['acknowledged']} acknowledged, {kill['lost']} "
                f"lost, {kill['duplicated']} duplicated; in flight at a kill: "
                f"{kill['in_flight_stored']} stored, {kill['in_flight_absent']} absent; audits "
                f"{kill['audits_clean']}/{kill['audits']} clean; takeover p50 "
                f"{kill['takeover_p50_s']} s max {kill['takeover_max_s']} s (of which the "
                f"new process starting p50 {kill['process_start_p50_s']} s max "
                f"{kill['process_start_max_s']} s; waiting on a held lock p50 "
                f"{kill['lock_wait_p50_s']} s max {kill['lock_wait_max_s']} s, "
                f"{kill['opens_refused_locked']} opens refused; {kill['not_reopened']} not "
                f"reopened); errors {kill['error_count']}"
            )
    v = report["verdict"]
    rows.append("")
    rows.append(f"checks pass: {v['checks_pass']}; within 3x of SQLite: {v['within_3x']}")
    return "\n".join(rows)


def main(argv: list[str] | None = None) -> int:
    assert __doc__ is not None
    parser = argparse.ArgumentParser(
        description=__doc__.split("\n\n")[0], formatter_class=argparse.RawTextHelpFormatter
    )
    defaults = FleetConfig()
    parser.add_argument("--workers", type=int, default=defaults.workers)
    parser.add_argument("--agents", type=int, default=defaults.agents)
    parser.add_argument("--turns", type=int, default=defaults.turns)
    parser.add_argument("--think-ms", type=float, default=defaults.think_ms)
    parser.add_argument(
        "--switch-interval-ms",
        type=float,
        default=defaults.switch_interval_ms,
        help="the workers' sys.setswitchinterval in ms (default: Python's 5 ms)",
    )
    parser.add_argument("--kills", type=int, default=defaults.kills, help="0: no kill run")
    parser.add_argument("--kill-every", type=float, default=defaults.kill_every)
    parser.add_argument(
        "--kill-turns", type=int, default=defaults.kill_turns, help="0: until the kills end"
    )
    parser.add_argument("--takeover-timeout", type=float, default=defaults.takeover_timeout)
    parser.add_argument("--max-seconds", type=float, default=defaults.max_seconds)
    parser.add_argument("--seed", type=int, default=defaults.seed)
    parser.add_argument("--url", help="a PostgreSQL server to use (default: start one)")
    parser.add_argument("--engines", default=",".join(ENGINES), help="postgresql,sqlite")
    parser.add_argument("--probe-turns", type=int, default=defaults.probe_turns)
    parser.add_argument(
        "--repeats", type=int, default=defaults.repeats, help="timed runs per engine, pooled"
    )
    parser.add_argument(
        "--control-wait-ms",
        type=float,
        default=defaults.control_wait_ms,
        help="the control: each SQLite add also sleeps this long in its agent's thread",
    )
    parser.add_argument("--quick", action="store_true", help="a small fleet: " + str(QUICK))
    parser.add_argument("--out", type=Path, default=Path(tempfile.gettempdir()) / "fleet.json")
    parser.add_argument("--worker", type=Path, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.worker is not None:
        worker_main(args.worker)
        return 0
    cfg = FleetConfig(
        workers=args.workers,
        agents=args.agents,
        turns=args.turns,
        think_ms=args.think_ms,
        switch_interval_ms=args.switch_interval_ms,
        kills=args.kills,
        kill_every=args.kill_every,
        kill_turns=args.kill_turns,
        takeover_timeout=args.takeover_timeout,
        max_seconds=args.max_seconds,
        seed=args.seed,
        url=args.url,
        engines=tuple(e for e in args.engines.split(",") if e),
        probe_turns=args.probe_turns,
        repeats=args.repeats,
        control_wait_ms=args.control_wait_ms,
    )
    if args.quick:
        for key, value in QUICK.items():
            if getattr(args, key) == getattr(defaults, key):
                setattr(cfg, key, value)
    unknown = set(cfg.engines) - set(ENGINES)
    if unknown or cfg.workers < 1 or cfg.agents < cfg.workers:
        parser.error(f"engines are {ENGINES}; at least one agent per worker")
    report = run_fleet(cfg, log=lambda s: print(s, flush=True))
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(report, indent=2) + "\n")
    print(table(report))
    print(f"report: {args.out}")
    return 0 if report["verdict"]["checks_pass"] else 1


if __name__ == "__main__":
    sys.exit(main())
