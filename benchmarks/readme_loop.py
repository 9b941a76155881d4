"""The README's agent loop on the bundled tau-bench sessions, served in turn by one agent.

One ``tick()`` per model call and a plain ``compile()``: how many calls it refuses,
and how much of the agent's next tool-call arguments its requests show, against
plain front truncation (``trim_messages``, the newest messages that fit) given the
same room (the budget less the priced system prompt), and against the benchmark's
own host for the same solver (which catches up).

    python benchmarks/readme_loop.py [--budget 4000] [--sessions 20] [--solver kv-stable]
"""

from __future__ import annotations

import argparse
import json

from foldbench.benchmark import replay_policy, tau_bench_transcript
from foldbench.records import CallRecord


def _row(policy: str, records: list[CallRecord]) -> dict[str, object]:
    refused = sum(r.error is not None for r in records)
    total = sum(r.arguments_total for r in records)
    kept = sum(r.arguments_kept for r in records)
    return {
        "policy": policy,
        "calls": len(records),
        "refused": refused,
        "invalid": sum(r.invalid for r in records),
        "argument_support": round(kept / total, 4) if total else None,
        "facts": f"{records[-1].facts_retained}/{records[-1].facts_total}" if records else "-",
        "bill": round(sum(r.billed + r.summarizer_billed for r in records)),
    }


def main() -> None:
    """Replay and print one JSON line per policy."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--budget", type=int, default=4000)
    parser.add_argument("--sessions", type=int, default=20)
    parser.add_argument("--solver", default="kv-stable")
    args = parser.parse_args()
    transcript = tau_bench_transcript(args.sessions)
    for policy in (
        f"ours:{args.solver}+readme-loop",
        f"ours:{args.solver}",
        "langchain-trim-messages",
    ):
        print(json.dumps(_row(policy, replay_policy(transcript, policy, args.budget))))


if __name__ == "__main__":
    main()
