"""Per-call cost against history length: ours and the peers through the agent loop.

The loop is what a running agent does on every model call: append one message, one
``tick`` (the strategy may write one memory), ``compile`` at a 32k budget. For each
history length ``n`` a store of ``n`` messages is fast-forwarded first (every message
appended, the memories written by the deterministic extractive summariser, and one
compile every ``--every`` messages so the frontier and the merges follow the history;
above ``--fast-above`` messages one compile every ``--fast-every``), then reopened and
timed call by call. The peers are handed the same ``n`` messages once (their own
fast-forward), then timed on the same loop: one message appended, one
``request(history, budget)`` with the whole history.

Every measurement runs in a fresh process, so its memory figures are its own. Results
are merged into ``--out`` (JSON, keyed by policy and history length, so several runs
build up one table) and written as markdown (``--md``) and, with ``--plot``, a log-log
figure of per-call time against history length.

Examples
--------
``python benchmarks/scale.py --method kv-stable --sizes 1000 10000 100000 --plot out/scale.png``
``python benchmarks/scale.py --method kv-unified --sizes 1000 5000 20000 --peers none``
``python benchmarks/scale.py --method kv-stable --sizes 1000000 --peers none`` (the 1M run)
``python benchmarks/scale.py --report-only --plot out/scale.png`` (redraw from ``--out``)
"""

from __future__ import annotations

import argparse
import datetime
import gc
import json
import math
import os
import resource
import statistics
import subprocess
import sys
import time
from collections.abc import Callable, Sequence
from concurrent.futures import ProcessPoolExecutor
from multiprocessing import get_context
from pathlib import Path
from typing import Any, TypeVar

from benchmarks.common import (
    LOOP_BUDGET,
    default_cache,
    drop_store,
    loop_call,
    loop_compile,
    loop_message,
    loop_store,
    open_loop,
    source_key,
    work_copy,
)

ROOT = Path(__file__).resolve().parents[1]
DEFAULT_PEERS = (
    "langchain-summarization-middleware",
    "langchain-trim-messages",
    "llamaindex-memory",
    "observation-masking",
    "anthropic-clear-tool-uses",
)
"""The peers measured by default (those whose packages are installed)."""
STATEFUL_PEERS = frozenset(
    {"langchain-summarization-middleware", "llamaindex-memory", "llamaindex-memory-facts"}
)
"""Peers that keep state between calls: fast-forwarded through growing prefixes of the
history, as a running agent feeds them (LlamaIndex's store refuses 100k messages put at
once), where the stateless peers are handed the whole history once."""
PEER_BATCH = 4_000
"""Messages a stateful peer is handed per call while it is fast-forwarded."""
SOLVE_METHODS = ("kv-stable", "kv-unified")
"""Solvers of the one-shot solve (``--solve``)."""
_T = TypeVar("_T")
_NA = "-"


# ------------------------------------------------------------------ measuring
def _status_kib(field: str) -> int | None:
    try:
        with open("/proc/self/status") as f:
            for line in f:
                if line.startswith(field + ":"):
                    return int(line.split()[1])
    except OSError:
        pass
    return None


def rss_mib() -> float:
    """The resident set size of this process now."""
    kib = _status_kib("VmRSS")
    return (kib if kib is not None else resource.getrusage(resource.RUSAGE_SELF).ru_maxrss) / 1024


def reset_peak() -> None:
    """Start the peak resident set size over from now (Linux); elsewhere a no-op."""
    try:
        with open("/proc/self/clear_refs", "w") as f:
            f.write("5")
    except OSError:
        pass


def peak_mib() -> float:
    """The peak resident set size since :func:`reset_peak` (or since the start)."""
    kib = _status_kib("VmHWM")
    return (kib if kib is not None else resource.getrusage(resource.RUSAGE_SELF).ru_maxrss) / 1024


def percentile(xs: Sequence[float], q: float) -> float:
    """The nearest-rank ``q`` quantile (the largest value below 100 samples for p99)."""
    ordered = sorted(xs)
    return ordered[min(len(ordered) - 1, max(0, math.ceil(q * len(ordered)) - 1))]


def timing(walls: Sequence[float], cpus: Sequence[float]) -> dict[str, Any]:
    """p50 / p99 / max of the per-call wall and CPU milliseconds."""
    return {
        "calls": len(walls),
        "p50_ms": statistics.median(walls),
        "p99_ms": percentile(walls, 0.99),
        "max_ms": max(walls),
        "cpu_p50_ms": statistics.median(cpus),
        "cpu_p99_ms": percentile(cpus, 0.99),
    }


def timed_loop(
    step: Callable[[int], None], calls: int, max_seconds: float, min_calls: int
) -> tuple[list[float], list[float]]:
    """Run ``step(k)`` ``calls`` times, or fewer (never under ``min_calls``) once
    ``max_seconds`` have passed; the wall and CPU milliseconds of each."""
    walls: list[float] = []
    cpus: list[float] = []
    started = time.perf_counter()
    for k in range(calls):
        t, c = time.perf_counter(), time.process_time()
        step(k)
        walls.append((time.perf_counter() - t) * 1000)
        cpus.append((time.process_time() - c) * 1000)
        if k + 1 >= min_calls and time.perf_counter() - started > max_seconds:
            break
    return walls, cpus


def _decision(stats: dict[str, Any] | None) -> str:
    found = (stats or {}).get("decision")
    return str(found.get("decision") if isinstance(found, dict) else found)


def measure_ours(base: str, n: int, method: str, calls: int, max_seconds: float) -> dict[str, Any]:
    """Open a copy of the store ``base`` (``n`` messages) with ``method``, compile once
    (the first request), then time the loop's calls."""
    work = work_copy(Path(base))
    try:
        gc.collect()
        rss0 = rss_mib()
        reset_peak()
        t0, c0 = time.perf_counter(), time.process_time()
        cm = open_loop(work, method)
        loop_compile(cm)
        open_s, open_cpu_s = time.perf_counter() - t0, time.process_time() - c0
        open_rss, open_peak = rss_mib(), peak_mib()
        decisions: dict[str, int] = {}

        def step(k: int) -> None:
            loop_call(cm, n + k)
            d = _decision(cm.get_render_stats())
            decisions[d] = decisions.get(d, 0) + 1

        walls, cpus = timed_loop(step, calls, max_seconds, min_calls=5)
        cm.close()
        size = Path(base).stat().st_size
        return {
            **timing(walls, cpus),
            "open_s": open_s,
            "open_cpu_s": open_cpu_s,
            "rss_before_mib": rss0,
            "open_rss_added_mib": open_rss - rss0,
            "open_rss_mib": open_rss,
            "open_peak_mib": open_peak,
            "peak_rss_mib": peak_mib(),
            "store_bytes": size,
            "bytes_per_message": size / n,
            "decisions": decisions,
        }
    finally:
        drop_store(work)


def measure_peer(name: str, n: int, calls: int, max_seconds: float) -> dict[str, Any]:
    """Hand peer ``name`` the loop's first ``n`` messages once, then time one
    ``request`` per appended message."""
    from foldbench.benchmark import make_policy

    history = [loop_message(i) for i in range(n)]
    policy = make_policy(name)
    gc.collect()
    rss0 = rss_mib()
    reset_peak()
    t0 = time.perf_counter()
    errors: list[str] = []
    step_size = PEER_BATCH if name in STATEFUL_PEERS else n
    for end in [*range(step_size, n, step_size), n]:
        first = policy.request(history[:end], LOOP_BUDGET)
        if first.error:
            errors.append(first.error)
    warm_s = time.perf_counter() - t0
    faults = {"over_budget": 0, "unpaired": 0}

    def step(k: int) -> None:
        history.append(loop_message(n + k))
        request = policy.request(history, LOOP_BUDGET)
        if request.error:
            errors.append(request.error)
            return
        if any(p.startswith("over budget") for p in request.problems):
            faults["over_budget"] += 1
        # called right after the agent's own tool call, a request ends with that call
        # unanswered: an artefact of calling the model after every message, not counted
        if request.unpaired and not history[-1].tool_use_ids:
            faults["unpaired"] += 1

    walls, cpus = timed_loop(step, calls, max_seconds, min_calls=3)
    close = getattr(policy, "close", None)
    if callable(close):
        close()
    return {
        **timing(walls, cpus),
        "fast_forward_s": warm_s,
        "rss_added_mib": rss_mib() - rss0,
        "peak_rss_mib": peak_mib(),
        "errors": len(errors),
        "first_error": errors[0][:300] if errors else None,
        "over_budget": faults["over_budget"],
        "unpaired": faults["unpaired"],
    }


def measure_solve(n_leaves: int, method: str) -> dict[str, Any]:
    """One cold ``solvers.solve`` of the seeded ``n_leaves`` problem of the asv suite."""
    from benchmarks.common import store

    import solvers

    problem = store(n_leaves)
    options = dict(solvers.capabilities(method).example_options)
    solvers.solve(store(1_000), method=method, **options)  # imports and first-use caches
    gc.collect()
    rss0 = rss_mib()
    reset_peak()
    t0, c0 = time.perf_counter(), time.process_time()
    plan = solvers.solve(problem, method=method, **options)
    return {
        "policy": f"ours:{method}",
        "leaves": n_leaves,
        "seconds": time.perf_counter() - t0,
        "cpu_s": time.process_time() - c0,
        "peak_added_mib": peak_mib() - rss0,
        "tokens": plan.tokens,
    }


def build(n: int, method: str, every: int, cache: str) -> tuple[str, float | None]:
    """Build (or find) the store of ``n`` messages; its path and build seconds."""

    def progress(done: int, seconds: float) -> None:
        print(f"    {done:,} messages, {seconds:,.0f} s", flush=True)

    path, seconds = loop_store(n, method, every, Path(cache), progress)
    return str(path), seconds


def isolated(fn: Callable[..., _T], *args: Any) -> _T:
    """``fn(*args)`` in a fresh process (its memory, its garbage collector)."""
    with ProcessPoolExecutor(1, mp_context=get_context("spawn"), max_tasks_per_child=1) as pool:
        return pool.submit(fn, *args).result()


# ------------------------------------------------------------------ the run
def solver_names(asked: Sequence[str]) -> list[str]:
    """``asked``, with ``all`` standing for every solver fit for a running agent (and
    ``none`` for none)."""
    import solvers

    fit = [
        m
        for m in solvers.names()
        if not solvers.capabilities(m).oracle and not solvers.capabilities(m).searches_slowly
    ]
    out: list[str] = []
    for name in asked:
        if name == "none":
            continue
        for m in fit if name == "all" else [name]:
            if m not in solvers.names():
                raise SystemExit(f"unknown solver {m!r}; known: {', '.join(solvers.names())}")
            if m not in out:
                out.append(m)
    return out


def peer_names(asked: Sequence[str]) -> list[str]:
    """The peers to measure: ``all`` (the default set, those installed) or ``none``."""
    from foldbench.benchmark import policy_names

    known = policy_names()
    if list(asked) == ["none"]:
        return []
    wanted = list(DEFAULT_PEERS) if list(asked) == ["all"] else list(asked)
    missing = [p for p in wanted if p not in known]
    if missing and list(asked) != ["all"]:
        raise SystemExit(f"unknown or unavailable peers {missing}; available: {known}")
    return [p for p in wanted if p in known]


def _commit() -> str:
    try:
        out = subprocess.run(
            ["git", "-C", str(ROOT), "rev-parse", "--short", "HEAD"],
            capture_output=True,
            text=True,
            check=True,
        )
        return out.stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return "unknown"


def run(
    args: argparse.Namespace, save: Callable[[list[dict[str, Any]]], None] = lambda rows: None
) -> list[dict[str, Any]]:
    """Measure what ``args`` asks for; the new rows (each also handed to ``save`` with the
    rows before it, as soon as it is measured)."""
    stamp = {
        "source": source_key(),
        "commit": _commit(),
        "measured_at": datetime.datetime.now().isoformat(timespec="seconds"),
        "load_at_start": os.getloadavg()[0],
    }
    rows: list[dict[str, Any]] = []
    sizes = sorted(set(args.sizes))
    for method in solver_names(args.method):
        for n in sizes:
            every = args.fast_every if n > args.fast_above else args.every
            builder = args.build_method or method
            print(f"ours:{method} at {n:,} messages (built with {builder}, every {every})")
            t = time.perf_counter()
            path, build_s = isolated(build, n, builder, every, str(args.cache))
            if time.perf_counter() - t > 1:
                print(f"  built in {build_s:,.0f} s", flush=True)
            row = isolated(measure_ours, path, n, method, args.calls, args.max_seconds)
            row = {
                "policy": f"ours:{method}",
                "kind": "ours",
                "messages": n,
                "build_method": builder,
                "every": every,
                "build_s": build_s,
                **row,
                "load": os.getloadavg()[0],
                **stamp,
            }
            rows.append(row)
            save(rows)
            print(f"  {_line(row)}", flush=True)
    for peer in peer_names(args.peers):
        for n in sizes:
            if n > args.peer_max:
                continue
            print(f"{peer} at {n:,} messages", flush=True)
            row = isolated(measure_peer, peer, n, args.calls, args.max_seconds)
            row = {"policy": peer, "kind": "peer", "messages": n, **row, "load": os.getloadavg()[0]}
            row |= stamp
            rows.append(row)
            save(rows)
            print(f"  {_line(row)}", flush=True)
    for leaves in args.solve:
        for method in SOLVE_METHODS:
            print(f"one-shot solve, {method}, {leaves:,} leaves", flush=True)
            row = {"kind": "solve", **isolated(measure_solve, leaves, method), **stamp}
            rows.append(row)
            save(rows)
            print(f"  {row['seconds'] * 1000:,.0f} ms, peak +{row['peak_added_mib']:,.0f} MiB")
    return rows


def _line(row: dict[str, Any]) -> str:
    text = (
        f"p50 {row['p50_ms']:.2f} ms, p99 {row['p99_ms']:.2f} ms, "
        f"CPU p50 {row['cpu_p50_ms']:.2f} ms ({row['calls']} calls)"
    )
    if row["kind"] == "ours":
        text += (
            f"; open {row['open_s']:.2f} s, RSS +{row['open_rss_added_mib']:.0f} MiB, "
            f"store {row['bytes_per_message']:,.0f} B/message"
        )
    elif row.get("errors"):
        text += f"; {row['errors']} errors: {row['first_error']}"
    return text


def _key(row: dict[str, Any]) -> tuple[str, str, int]:
    if row["kind"] == "solve":
        return ("solve", row["policy"], row["leaves"])
    return (row["kind"], row["policy"], row["messages"])


def merge(old: list[dict[str, Any]], new: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """``old`` with every row of ``new`` replacing the row of the same key."""
    rows = {_key(r): r for r in old}
    rows.update({_key(r): r for r in new})
    order = {"ours": 0, "peer": 1, "solve": 2}
    return sorted(rows.values(), key=lambda r: (order[r["kind"]], *_key(r)[1:]))


# ------------------------------------------------------------------ reporting
def _k(n: int) -> str:
    if n >= 1_000_000 and n % 1_000_000 == 0:
        return f"{n // 1_000_000}M"
    return f"{n // 1000}k" if n >= 1000 and n % 1000 == 0 else f"{n:,}"


def _ms(x: float) -> str:
    if x >= 1000:
        return f"{x / 1000:.2f} s"
    return f"{x:.1f} ms" if x >= 10 else f"{x:.2f} ms"


def _series(rows: list[dict[str, Any]], policy: str) -> dict[int, dict[str, Any]]:
    found = [r for r in rows if r.get("policy") == policy and r["kind"] != "solve"]
    return {r["messages"]: r for r in sorted(found, key=lambda r: r["messages"])}


def _slope(a: tuple[int, float], b: tuple[int, float]) -> float:
    """The exponent of ``t ∝ n^k`` between two points."""
    return math.log(b[1] / a[1]) / math.log(b[0] / a[0])


def _pair(row: dict[str, Any]) -> str:
    """``p50 / p99`` of the wall time, and the CPU p50."""
    return f"{_ms(row['p50_ms'])} / {_ms(row['p99_ms'])} (CPU p50 {_ms(row['cpu_p50_ms'])})"


def goal_table(rows: list[dict[str, Any]]) -> list[str]:
    """The goal table, each target with what was measured and whether it is met."""
    stable = _series(rows, "ours:kv-stable")
    unified = _series(rows, "ours:kv-unified")
    out = ["| figure | target | measured | met |", "|---|---|---|---|"]

    def verdict(ok: bool | None) -> str:
        return "not measured" if ok is None else ("yes" if ok else "no")

    # kv-stable at 1k, 10k, 100k
    want = [1_000, 10_000, 100_000]
    have = [n for n in want if n in stable]
    cells = [f"{_k(n)}: {_pair(stable[n])}" for n in have]
    ok: bool | None = None
    if have:
        p50s = [stable[n]["p50_ms"] for n in have]
        spread = max(p50s) / min(p50s)
        cells.append(f"spread {spread:.2f}x")
        ok = (
            len(have) == len(want)
            and all(stable[n]["p50_ms"] <= 5 and stable[n]["p99_ms"] <= 30 for n in have)
            and spread <= 1.5
        )
    out.append(
        "| append + tick + compile, kv-stable, p50 / p99 | ≤ 5 ms / ≤ 30 ms at 1k, 10k and "
        f"100k messages, within 1.5x of each other | {'; '.join(cells) or _NA} | {verdict(ok)} |"
    )
    # 1M
    ok = None
    cell = _NA
    if 1_000_000 in stable:
        big = stable[1_000_000]
        cell = _pair(big)
        if big.get("build_s") is not None:
            cell += f"; run took {big['build_s'] / 60:,.1f} min to build (every {big['every']})"
        if 1_000 in stable:
            ratio = big["p50_ms"] / stable[1_000]["p50_ms"]
            cell += f"; {ratio:.2f}x the 1k p50"
            ok = ratio <= 2
    out.append(
        "| same at 1,000,000 messages (synthetic, benchmark only) | within 2x of the 1k "
        f"figure; say how long the run took | {cell} | {verdict(ok)} |"
    )
    # kv-unified
    ok = None
    cells = [f"{_k(n)}: {_pair(r)}" for n, r in unified.items()]
    later = sorted(n for n in unified if n >= 20_000)
    if 20_000 in unified:
        r = unified[20_000]
        ok = r["p50_ms"] <= 50 and r["p99_ms"] <= 250
        if len(later) >= 2:
            a, b = later[-2], later[-1]
            k = _slope((a, unified[a]["p50_ms"]), (b, unified[b]["p50_ms"]))
            cells.append(f"exponent {k:.2f} from {_k(a)} to {_k(b)}")
            ok = ok and unified[b]["p50_ms"] / unified[a]["p50_ms"] <= math.log(b) / math.log(a)
        else:
            cells.append("nothing measured past 20k")
    out.append(
        "| append + tick + compile, kv-unified, p50 / p99 | ≤ 50 ms / ≤ 250 ms at 20k messages, "
        f"and growing no faster than log n after | {'; '.join(cells) or _NA} | {verdict(ok)} |"
    )
    # open
    ok = None
    cell = _NA
    if 100_000 in stable:
        r = stable[100_000]
        cell = (
            f"{r['open_s']:.2f} s ({r['open_cpu_s']:.2f} s CPU); RSS +{r['open_rss_added_mib']:.0f}"
            f" MiB ({r['open_rss_mib']:.0f} MiB in all)"
        )
        ok = r["open_s"] <= 1 and r["open_rss_added_mib"] * 1024**2 <= 400e6
    out.append(
        "| opening a store of 100k messages with its memories, to the first request | ≤ 1 s; "
        f"RSS ≤ 400 MB | {cell} | {verdict(ok)} |"
    )
    # store size
    ok = None
    cell = _NA
    if 100_000 in stable:
        r = stable[100_000]
        cell = f"{r['store_bytes'] / 1e6:,.0f} MB, {r['bytes_per_message'] / 1000:.2f} KB/message"
        smaller = [stable[n] for n in sorted(stable) if n < 100_000]
        if smaller:
            s = smaller[0]
            cell += f" ({s['bytes_per_message'] / 1000:.2f} KB/message at {_k(s['messages'])})"
        ok = r["bytes_per_message"] <= 4000
    out.append(
        "| store size | linear in history: ≤ 4 KB per message at 100k, frontier history "
        f"included | {cell} | {verdict(ok)} |"
    )
    # one-shot solve
    solves = {(r["policy"], r["leaves"]): r for r in rows if r["kind"] == "solve"}
    s, u = solves.get(("ours:kv-stable", 75_000)), solves.get(("ours:kv-unified", 75_000))
    cells = []
    ok = None
    if s:
        cells.append(f"kv-stable {_ms(s['seconds'] * 1000)} (CPU {_ms(s['cpu_s'] * 1000)})")
    if u:
        cells.append(
            f"kv-unified {_ms(u['seconds'] * 1000)} (CPU {_ms(u['cpu_s'] * 1000)}), "
            f"peak +{u['peak_added_mib']:.0f} MiB"
        )
    if s and u:
        ok = s["seconds"] <= 0.5 and u["seconds"] <= 1.5 and u["peak_added_mib"] * 1024**2 <= 300e6
    out.append(
        "| one-shot solve, 75k leaves | kv-stable ≤ 500 ms; kv-unified ≤ 1.5 s and ≤ 300 MB | "
        f"{'; '.join(cells) or _NA} | {verdict(ok)} |"
    )
    return out


def markdown(rows: list[dict[str, Any]]) -> str:
    """The report: the goal table, per-call time by policy, the stores, the solves."""
    looped = [r for r in rows if r["kind"] != "solve"]
    policies = list(dict.fromkeys(r["policy"] for r in looped))
    sizes = sorted({r["messages"] for r in looped})
    sources = sorted({(r["source"], r["commit"]) for r in rows})
    when = sorted({r["measured_at"][:10] for r in rows})
    lines = [
        "# Scale run: per-call cost against history length",
        "",
        f"Machine: {os.cpu_count()} cores; measured {', '.join(when)}; library sources "
        + ", ".join(f"{s} (commit {c})" for s, c in sources)
        + ". One call: append one message, one tick, compile at a 32k budget (a peer: "
        "append one message, one `request` with the whole history). p50 / p99 of the wall "
        "time per call. The load average after each measurement (other work on the "
        "machine stretches wall times past CPU times): "
        + ", ".join(
            f"{r['policy']} at {_k(r['messages'])} {r['load']:.1f}" for r in looped if "load" in r
        )
        + ".",
        "",
        "## Goal",
        "",
        *goal_table(rows),
        "",
        "## Per call, p50 / p99 (CPU p50 below)",
        "",
        "| history | " + " | ".join(policies) + " |",
        "|---:|" + "---:|" * len(policies),
    ]
    for n in sizes:
        cells = []
        for p in policies:
            r = _series(rows, p).get(n)
            if r is None:
                cells.append("")
                continue
            cell = f"{_ms(r['p50_ms'])} / {_ms(r['p99_ms'])}<br>CPU {_ms(r['cpu_p50_ms'])}"
            if r.get("errors"):
                cell += f"<br>{r['errors']} errors"
            if r.get("over_budget"):
                cell += f"<br>{r['over_budget']} over budget"
            if r.get("unpaired"):
                cell += f"<br>{r['unpaired']} unpaired"
            cells.append(cell)
        lines.append(f"| {n:,} | " + " | ".join(cells) + " |")
    lines += [
        "",
        "A peer's cell counts its requests over the budget and those with a tool call "
        "and its result apart (a call right after the agent's own tool call, whose result "
        "has not come yet, is not counted).",
        "",
        "Calls per cell: "
        + "; ".join(f"{r['policy']} at {_k(r['messages'])}: {r['calls']}" for r in looped)
        + ".",
        "",
        "## The stores",
        "",
        "| policy | messages | built with, in (compile every) | store file | per message | "
        "open → first request (CPU) | RSS added (in all) | peak RSS | decisions |",
        "|---|---:|---:|---:|---:|---:|---:|---:|---|",
    ]
    for r in looped:
        if r["kind"] != "ours":
            continue
        built = _NA if r.get("build_s") is None else f"{r['build_s']:,.0f} s"
        decisions = ", ".join(f"{k} {v}" for k, v in sorted(r["decisions"].items()))
        lines.append(
            f"| {r['policy']} | {r['messages']:,} | {r['build_method']}, {built} ({r['every']}) | "
            f"{r['store_bytes'] / 1e6:,.1f} MB | {r['bytes_per_message']:,.0f} B | "
            f"{r['open_s']:.2f} s ({r['open_cpu_s']:.2f} s) | "
            f"{r['open_rss_added_mib']:,.0f} MiB ({r['open_rss_mib']:,.0f} MiB) | "
            f"{r['peak_rss_mib']:,.0f} MiB | {decisions} |"
        )
    peers = [r for r in looped if r["kind"] == "peer"]
    if peers:
        lines += [
            "",
            "## The peers' fast-forward",
            "",
            "| peer | messages | fast-forward (stateful: 4,000 a call) | RSS added | errors |",
            "|---|---:|---:|---:|---|",
        ]
        for r in peers:
            err = f"{r['errors']}: {r['first_error']}" if r["errors"] else "0"
            lines.append(
                f"| {r['policy']} | {r['messages']:,} | {r['fast_forward_s']:.2f} s | "
                f"{r['rss_added_mib']:,.0f} MiB | {err} |"
            )
    solves = [r for r in rows if r["kind"] == "solve"]
    if solves:
        lines += [
            "",
            "## One-shot solve (`solvers.solve`, cold, the seeded problem of the asv suite)",
            "",
            "| solver | leaves | time (CPU) | peak memory added |",
            "|---|---:|---:|---:|",
        ]
        for r in solves:
            lines.append(
                f"| {r['policy']} | {r['leaves']:,} | {_ms(r['seconds'] * 1000)} "
                f"({_ms(r['cpu_s'] * 1000)}) | {r['peak_added_mib']:,.0f} MiB |"
            )
    return "\n".join(lines) + "\n"


def plot(rows: list[dict[str, Any]], path: Path) -> None:
    """Per-call time against history length, log-log: a line per policy through the
    p50s, a band up to the p99s; ours solid, the peers dashed."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.lines import Line2D
    from matplotlib.patches import Patch
    from matplotlib.ticker import FuncFormatter, NullFormatter

    looped = [r for r in rows if r["kind"] != "solve"]
    policies = list(dict.fromkeys(r["policy"] for r in looped))
    cmap = plt.get_cmap("tab10" if len(policies) <= 10 else "tab20")
    fig, ax = plt.subplots(figsize=(10, 6.5), dpi=120)
    handles: list[Any] = []
    for i, policy in enumerate(policies):
        series = sorted(_series(rows, policy).items())
        xs = [n for n, _ in series]
        p50 = [r["p50_ms"] for _, r in series]
        p99 = [r["p99_ms"] for _, r in series]
        ours = policy.startswith("ours:")
        colour = cmap(i % cmap.N)
        style = "-" if ours else "--"
        marker = "o" if ours else "s"
        label = f"ours, {policy.removeprefix('ours:')}" if ours else f"peer: {policy}"
        (line,) = ax.plot(xs, p50, style, marker=marker, color=colour, lw=2, ms=6, label=label)
        ax.fill_between(xs, p50, p99, color=colour, alpha=0.15, lw=0)
        ax.plot(xs, p99, linestyle="none", marker="v", color=colour, ms=5, alpha=0.8)
        handles.append(line)
    guides = [(5.0, "goal: kv-stable p50 ≤ 5 ms"), (50.0, "goal: kv-unified p50 ≤ 50 ms at 20k")]
    for y, label in guides:
        ax.axhline(y, color="grey", lw=1, ls=":")
        ax.annotate(label, (1.0, y), xycoords=("axes fraction", "data"), ha="right",
                    va="bottom", fontsize=8, color="dimgrey")  # fmt: skip
    handles += [
        Line2D([], [], color="black", lw=2, marker="o", label="line: p50 per call (ours solid)"),
        Line2D([], [], color="black", lw=2, ls="--", marker="s", label="dashed: a peer's p50"),
        Line2D([], [], color="black", ls="none", marker="v", label="marker: p99 per call"),
        Patch(color="black", alpha=0.15, label="band: p50 to p99"),
        Line2D([], [], color="grey", ls=":", label="dotted: the goal's p50 targets"),
    ]
    ax.set_xscale("log")
    ax.set_yscale("log")
    sizes = sorted({r["messages"] for r in looped})
    ax.set_xticks(sizes)
    ax.xaxis.set_major_formatter(FuncFormatter(lambda x, _: _k(round(x))))
    ax.xaxis.set_minor_formatter(NullFormatter())
    ax.yaxis.set_major_formatter(FuncFormatter(lambda y, _: _ms(y)))
    ax.yaxis.set_minor_formatter(NullFormatter())
    ax.set_xlabel("history length (messages)")
    ax.set_ylabel("time per call (wall)")
    ax.set_title(
        "Per-call time against history length\n"
        "ours: append + tick + compile at 32k; a peer: append + request(whole history, 32k)"
    )
    ax.grid(True, which="both", alpha=0.25)
    ax.legend(handles=handles, fontsize=8, loc="upper left", bbox_to_anchor=(1.01, 1.0))
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path)
    plt.close(fig)


# ------------------------------------------------------------------ the command
def parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(
        prog="scale.py",
        description=__doc__.split("\n\n")[0],
        formatter_class=argparse.ArgumentDefaultsHelpFormatter,
    )
    what = ap.add_argument_group("what to measure")
    what.add_argument(
        "--method",
        nargs="+",
        default=["kv-stable"],
        metavar="SOLVER",
        help="our solvers ('all': every solver fit for a running agent; 'none')",
    )
    what.add_argument(
        "--sizes", type=int, nargs="+", default=[1_000, 10_000, 100_000], metavar="N",
        help="history lengths (messages)",
    )  # fmt: skip
    what.add_argument(
        "--million", action="store_true", help="also measure ours at 1,000,000 messages"
    )
    what.add_argument(
        "--peers", nargs="+", default=["all"], metavar="PEER",
        help=f"peer policies, 'all' ({', '.join(DEFAULT_PEERS)}; those installed) or 'none'",
    )  # fmt: skip
    what.add_argument(
        "--peer-max", type=int, default=100_000, metavar="N",
        help="measure the peers only up to this history length",
    )  # fmt: skip
    what.add_argument(
        "--solve", type=int, nargs="*", default=[], metavar="LEAVES",
        help=f"also time one-shot solves of this many leaves ({', '.join(SOLVE_METHODS)})",
    )  # fmt: skip
    how = ap.add_argument_group("how")
    how.add_argument(
        "--calls",
        type=int,
        default=1000,
        help="timed calls per measurement (a cost follows the frontier's phase: 200 calls "
        "moved the p50 by up to 2x between runs)",
    )
    how.add_argument(
        "--max-seconds", type=float, default=60.0,
        help="stop a measurement's timed calls after this long (at least 5 calls; peers 3)",
    )  # fmt: skip
    how.add_argument(
        "--every", type=int, default=40, help="compile every N messages while fast-forwarding"
    )
    how.add_argument(
        "--fast-above", type=int, default=100_000, metavar="N",
        help="histories longer than this fast-forward with --fast-every",
    )  # fmt: skip
    how.add_argument(
        "--fast-every", type=int, default=500, help="compile interval of long fast-forwards"
    )
    how.add_argument(
        "--build-method", metavar="SOLVER",
        help="fast-forward with this solver instead of the measured one",
    )  # fmt: skip
    how.add_argument(
        "--cache", type=Path, default=default_cache(),
        help="built stores, kept between runs (by library source digest)",
    )  # fmt: skip
    out = ap.add_argument_group("output")
    out.add_argument("--out", type=Path, default=ROOT / "out/scale.json", help="results (JSON)")
    out.add_argument("--md", type=Path, default=ROOT / "out/scale.md", help="report (markdown)")
    out.add_argument("--plot", type=Path, metavar="PNG", help="write the figure here")
    out.add_argument("--fresh", action="store_true", help="forget the results already in --out")
    out.add_argument(
        "--report-only", action="store_true",
        help="measure nothing: rewrite the report (and the plot) from --out",
    )  # fmt: skip
    return ap


def main(argv: list[str] | None = None) -> int:
    args = parser().parse_args(argv)
    if args.million:
        args.sizes = [*args.sizes, 1_000_000]
    old: list[dict[str, Any]] = []
    if args.out.exists() and not args.fresh:
        old = json.loads(args.out.read_text())["rows"]

    def save(rows: list[dict[str, Any]]) -> None:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(json.dumps({"budget": LOOP_BUDGET, "rows": rows}, indent=1) + "\n")
        args.md.parent.mkdir(parents=True, exist_ok=True)
        args.md.write_text(markdown(rows))

    rows = old if args.report_only else merge(old, run(args, lambda new: save(merge(old, new))))
    save(rows)
    print(f"wrote {args.out} and {args.md}")
    if args.plot:
        plot(rows, args.plot)
        print(f"wrote {args.plot}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
