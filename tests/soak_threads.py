"""Threads sharing one manager, long: ``python tests/soak_threads.py [appends]`` (``make soak``).

Eight threads append through one :class:`~context_manager.ContextManager` (with ticks
and compiles between) until at least the given number of appends (default 10,000),
then every acknowledged message is looked for after reopening.
"""

from __future__ import annotations

import sys
import tempfile
import time
from pathlib import Path

# the repository root, ahead of this folder: its test folders are named like the packages
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from tests.support.extractive_agent import threaded_run


def main(goal: int) -> int:
    start = time.monotonic()
    threads = 8
    with tempfile.TemporaryDirectory() as tmp:
        acknowledged, found = threaded_run(Path(tmp) / "cm.db", threads, -(-goal // threads))
    print(
        f"threads: {acknowledged:,} appends acknowledged by {threads} threads sharing one "
        f"manager, {found:,} found after reopening, each with its text "
        f"({time.monotonic() - start:.0f} s); 0 lost"
    )
    return 0


if __name__ == "__main__":
    counts = [a for a in sys.argv[1:] if a.isdigit()]
    sys.exit(main(int(counts[0]) if counts else 10_000))
