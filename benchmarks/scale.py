"""Per-call cost against history length: the agent loop at 1k .. 1M messages.

The loop is what a running agent does on every model call: append one message,
one ``tick`` (the strategy may write one memory), ``compile`` at a 32k budget.
A history of ``n`` messages is built first ("fast-forwarded": appended with the
deterministic extractive summariser writing every memory it is asked for, and a
compile every ``--every`` messages so the frontier and the merges follow the
history as they would in a real run), saved, then reopened for the measured calls.

Run ``python benchmarks/scale.py --sizes 1000 10000 100000`` (``make scale``);
each size prints p50 / p99 wall and CPU milliseconds per call, the open time and
RSS, and the store size, and ``--plot`` writes the figure.
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import random
import resource
import shutil
import statistics
import sys
import time
from pathlib import Path
from typing import Any

from context_manager import ContextManager
from context_manager.errors import OverBudgetError
from context_manager.messages import TextBlock, ToolResultBlock, ToolUseBlock
from context_manager.peers.ours import FoldingPolicy
from context_manager.strategies.autobiographical import AutobiographicalStrategy
from context_manager.summarizer import ExtractiveSummarizer

BUDGET = 32_000
TOOLS = [{"name": "lookup", "description": "Look a record up.", "input_schema": {"type": "object"}}]
WORDS = ["flight", "booking", "passenger", "seat", "upgrade", "refund", "policy", "airport", "delay", "baggage", "reservation", "cabin", "economy", "business", "change", "cancel", "status", "insurance", "payment", "certificate", "voucher", "itinerary", "layover", "origin", "destination", "date", "nonstop"]


def synthetic(i: int) -> tuple[str, Any]:
    """Message ``i`` of a deterministic agent loop: user, tool call, result, answer."""
    rng = random.Random(i)
    text = " ".join(rng.choice(WORDS) for _ in range(rng.randint(20, 90)))
    step = i % 4
    if step == 0:
        return "User", text
    if step == 1:
        return "Claude", [
            TextBlock(text=text[:80]),
            ToolUseBlock(id=f"t{i}", name="lookup", input={"q": text[:40], "n": i}),
        ]
    if step == 2:
        return "User", [ToolResultBlock(tool_use_id=f"t{i - 1}", content=text)]
    return "Claude", text


def strategy(method: str) -> AutobiographicalStrategy:
    options = FoldingPolicy.config_for(BUDGET, method)
    return AutobiographicalStrategy(**options)


def open_manager(path: Path, method: str) -> ContextManager:
    cm = ContextManager.open(
        path=str(path), strategy=strategy(method), summarizer=ExtractiveSummarizer()
    )
    cm.set_tool_definitions(TOOLS)
    return cm


def call(cm: ContextManager, i: int) -> None:
    participant, content = synthetic(i)
    cm.add_message(participant, content, timestamp=1_700_000_000.0 + i)
    cm.tick()
    try:
        cm.compile(max_tokens=BUDGET, reserve_for_response=0)
    except OverBudgetError:
        cm.drain(max_ticks=500)
        cm.compile(max_tokens=BUDGET, reserve_for_response=0)


def build(path: Path, n: int, method: str, every: int) -> float:
    """Fast-forward a store to ``n`` messages; returns the seconds it took."""
    start = time.perf_counter()
    have = 0
    if path.exists():
        cm = open_manager(path, method)
        have = len(cm.get_messages())
    else:
        cm = open_manager(path, method)
    for i in range(have, n):
        participant, content = synthetic(i)
        cm.add_message(participant, content, timestamp=1_700_000_000.0 + i)
        if (i + 1) % every == 0 or i == n - 1:
            cm.drain(max_ticks=10_000)
            try:
                cm.compile(max_tokens=BUDGET, reserve_for_response=0)
            except OverBudgetError:
                cm.drain(max_ticks=10_000)
                cm.compile(max_tokens=BUDGET, reserve_for_response=0)
        if (i + 1) % 10_000 == 0:
            print(f"  built {i + 1:,} messages, {time.perf_counter() - start:.0f} s", flush=True)
    cm.close()
    return time.perf_counter() - start


def rss_mib() -> float:
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def measure(path: Path, n: int, method: str, calls: int) -> dict[str, Any]:
    """Reopen the store at ``path`` and time ``calls`` agent-loop calls."""
    gc.collect()
    rss0 = rss_mib()
    t0, c0 = time.perf_counter(), time.process_time()
    cm = open_manager(path, method)
    cm.compile(max_tokens=BUDGET, reserve_for_response=0)
    open_wall, open_cpu = time.perf_counter() - t0, time.process_time() - c0
    open_rss = rss_mib() - rss0
    walls, cpus, decisions = [], [], {}
    for k in range(calls):
        t, c = time.perf_counter(), time.process_time()
        call(cm, n + k)
        walls.append((time.perf_counter() - t) * 1000)
        cpus.append((time.process_time() - c) * 1000)
        stats = cm.get_render_stats() or {}
        d = str(
            stats.get("decision", {}).get("decision")
            if isinstance(stats.get("decision"), dict)
            else stats.get("decision")
        )
        decisions[d] = decisions.get(d, 0) + 1
    cm.close()

    def pct(xs: list[float], q: float) -> float:
        return sorted(xs)[min(len(xs) - 1, int(q * len(xs)))]

    return {
        "messages": n,
        "method": method,
        "calls": calls,
        "p50_ms": statistics.median(walls),
        "p99_ms": pct(walls, 0.99),
        "cpu_p50_ms": statistics.median(cpus),
        "cpu_p99_ms": pct(cpus, 0.99),
        "max_ms": max(walls),
        "open_s": open_wall,
        "open_cpu_s": open_cpu,
        "open_rss_mib": open_rss,
        "store_bytes": path.stat().st_size,
        "bytes_per_message": path.stat().st_size / n,
        "decisions": decisions,
    }


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sizes", type=int, nargs="+", default=[1000, 10_000, 100_000])
    ap.add_argument("--method", default="kv-stable")
    ap.add_argument("--calls", type=int, default=200)
    ap.add_argument("--every", type=int, default=40, help="compile every N messages while building")
    ap.add_argument(
        "--cache", type=Path, default=Path(os.environ.get("TMPDIR", "/tmp")) / "ctxfold-scale"
    )
    ap.add_argument("--out", type=Path, default=Path("out/scale.json"))
    args = ap.parse_args(argv)
    args.cache.mkdir(parents=True, exist_ok=True)
    rows = []
    for n in args.sizes:
        base = args.cache / f"{args.method}-{n}.db"
        if not base.exists():
            print(f"building {n:,} messages ({args.method}) ...", flush=True)
            partial = base.with_suffix(".partial")
            seconds = build(partial, n, args.method, args.every)
            partial.rename(base)
            print(f"  built in {seconds:.0f} s", flush=True)
        work = args.cache / f"run-{args.method}-{n}.db"
        for suffix in ("", "-wal", "-shm"):
            Path(str(work) + suffix).unlink(missing_ok=True)
        shutil.copyfile(base, work)
        row = measure(work, n, args.method, args.calls)
        rows.append(row)
        print(json.dumps(row), flush=True)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(rows, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
