"""The windowed compile against the whole-history solve, on the bundled replays.

A windowed compile states each memory the last frontier showed through memories
only as a block of its memories one level below the finest shown, so a solve cannot
unfold it further than that in one call. This replays every bundled transcript
through ``ours:<solver>`` and ``ours:<solver>+full`` (the same solver given the whole
history on every call) at each budget and reports, per pair, what the restriction
cost: the billed input (the cache simulator's bill), the fact retention, the mean
request size, the invalid requests and the CPU per call.

Run ``python benchmarks/window_gap.py`` (``--methods``, ``--budgets``); it writes
``out/window_gap.md``.
"""

from __future__ import annotations

import argparse
import statistics
import sys
from pathlib import Path
from typing import Any

from foldbench.benchmark import FULL_HISTORY, default_transcripts, replay_policy


def summarise(records: list[Any]) -> dict[str, float]:
    retained = [r.facts_retained for r in records if r.facts_retained is not None]
    total = sum(r.facts_total for r in records)
    return {
        "billed": sum(r.billed for r in records),
        "retained": sum(retained),
        "facts": total,
        "tokens": statistics.mean(r.tokens for r in records) if records else 0.0,
        "invalid": sum(r.invalid for r in records),
        "cpu_ms": statistics.median(r.cpu_ms for r in records) if records else 0.0,
        "calls": len(records),
    }


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--methods", nargs="+", default=["kv-stable", "kv-unified"])
    ap.add_argument("--budgets", nargs="+", type=int, default=[4000, 8000, 16000])
    ap.add_argument("--out", type=Path, default=Path("out/window_gap.md"))
    args = ap.parse_args(argv)
    transcripts = default_transcripts()
    lines = [
        "| solver | budget | billed, windowed / full | facts retained, windowed / full "
        "| mean tokens, windowed / full | invalid, windowed / full "
        "| CPU p50 ms, windowed / full |",
        "|---|---:|---:|---:|---:|---:|---:|",
    ]
    for method in args.methods:
        for budget in args.budgets:
            runs = {}
            for policy in (f"ours:{method}", f"ours:{method}{FULL_HISTORY}"):
                records = [r for t in transcripts for r in replay_policy(t, policy, budget)]
                runs[policy] = summarise(records)
            w, f = runs[f"ours:{method}"], runs[f"ours:{method}{FULL_HISTORY}"]
            gap = (w["billed"] - f["billed"]) / f["billed"] * 100 if f["billed"] else 0.0
            line = (
                f"| {method} | {budget:,} | {w['billed']:,.0f} / {f['billed']:,.0f} "
                f"({gap:+.1f} %) | {w['retained']}/{w['facts']} / {f['retained']}/{f['facts']} "
                f"| {w['tokens']:,.0f} / {f['tokens']:,.0f} | {w['invalid']} / {f['invalid']} "
                f"| {w['cpu_ms']:.1f} / {f['cpu_ms']:.1f} |"
            )
            lines.append(line)
            print(line, flush=True)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text("\n".join(lines) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
