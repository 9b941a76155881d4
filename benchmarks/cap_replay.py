"""Tool results larger than the window, on the bundled SWE-agent replays.

Each bundled run with tool calls is replayed with one tool output (the middle one)
replaced by a log of ``--output-tokens`` tokens (6,181 by default: the size of the
largest output of eight SWE-agent CTF runs that every policy refused at 4k and 8k).
For each of our solvers and budgets this prints the calls, the refused calls, the
calls over budget or invalid by the benchmark's exact counter, and how many
compiles capped a result and how many results they capped
(``render_stats["capped_results"]``).

Run ``python benchmarks/cap_replay.py`` (``--methods``, ``--budgets``).
"""

from __future__ import annotations

import argparse
import dataclasses
import sys
from collections import Counter
from typing import Any

from context_manager.messages import ToolResultBlock
from context_manager.strategies.autobiographical import solve, strategy
from context_manager.tokens import TiktokenCounter
from foldbench.benchmark import default_transcripts, replay_policy
from foldbench.loaders import Transcript

METHODS = ["kv-stable", "kv-unified", "flat-profile", "oldest-first", "threshold-pyramid"]


def _count_caps(seen: Counter[str]) -> None:
    """Count the caps every compile reports (wraps the strategy's select)."""
    select = solve.select

    def counting(*args: Any, **kwargs: Any) -> Any:
        selection = select(*args, **kwargs)
        capped = selection.stats.get("capped_results")
        if capped:
            seen["capped compiles"] += 1
            seen["capped results"] += capped["results"]
        return selection

    strategy.select = counting  # type: ignore[attr-defined]


def _log(tokens: int) -> str:
    counter = TiktokenCounter()
    text = "".join(f"{i:06d} read 0x{i * 16:08x}: no match\n" for i in range(tokens // 4))
    while counter.count_text(text) > tokens:
        text = text[: len(text) * 99 // 100]
    return text


def _with_big_output(transcript: Transcript, output: str) -> Transcript | None:
    messages = list(transcript.messages)
    at = [
        k for k, m in enumerate(messages) if any(isinstance(b, ToolResultBlock) for b in m.content)
    ]
    if not at:
        return None
    k = at[len(at) // 2]
    blocks = tuple(
        b.model_copy(update={"content": output}) if isinstance(b, ToolResultBlock) else b
        for b in messages[k].content
    )
    messages[k] = messages[k].model_copy(update={"content": blocks})
    return dataclasses.replace(transcript, messages=messages, name=transcript.name + "+big")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--methods", nargs="+", default=METHODS)
    ap.add_argument("--budgets", nargs="+", type=int, default=[4_000, 8_000])
    ap.add_argument("--output-tokens", type=int, default=6_181)
    args = ap.parse_args(argv)
    output = _log(args.output_tokens)
    runs = [
        t
        for t in (
            _with_big_output(x, output) for x in default_transcripts() if "synthetic" not in x.name
        )
        if t is not None
    ]
    print(f"{len(runs)} runs with tool calls: {', '.join(t.name for t in runs)}")
    seen: Counter[str] = Counter()
    _count_caps(seen)
    print("| budget | solver | calls | refused | over | invalid | capped compiles | results |")
    print("|---:|---|---:|---:|---:|---:|---:|---:|")
    for budget in args.budgets:
        for method in args.methods:
            seen.clear()
            records = [r for t in runs for r in replay_policy(t, f"ours:{method}", budget)]
            refused = sum(r.error is not None for r in records)
            over = sum(r.over_budget for r in records)
            invalid = sum(r.invalid for r in records)
            print(
                f"| {budget:,} | {method} | {len(records)} | {refused} | {over} | {invalid} | "
                f"{seen['capped compiles']} | {seen['capped results']} |",
                flush=True,
            )
    return 0


if __name__ == "__main__":
    sys.exit(main())
