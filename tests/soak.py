"""Soak the request machine: ``python tests/soak.py [compiles] [--no-shrink] [--postgres]``
(``make soak``).

Runs :class:`tests.support.request_machine.RequestMachine` with fresh random seeds until at least
the given number of compiles (default 100,000) were driven through it, across every
solver and the passthrough strategy (every third round from a long past, where
compiles are windowed: :class:`tests.support.long_history.LongHistory`), then prints the tally.
Any failure stops it with hypothesis's shrunk reproduction (``--no-shrink``: the
failing run as found, at once). ``--postgres`` runs
:class:`tests.support.request_machine.PostgresRequestMachine` instead, every store an
agent's in a PostgreSQL server started for the run (or ``CTXFOLD_TEST_POSTGRES``'s).
"""

from __future__ import annotations

import logging
import sys
import time
from pathlib import Path

from hypothesis import HealthCheck, Phase, settings
from hypothesis.stateful import run_state_machine_as_test

# the repository root, ahead of this folder: its test folders are named like the packages
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from tests.support import postgres_server
from tests.support.long_history import LongHistory
from tests.support.request_machine import TALLY, PostgresRequestMachine, RequestMachine


def main(goal: int) -> int:
    logging.disable(logging.WARNING)  # faults are driven on purpose: their warnings are noise
    start = time.monotonic()
    rounds = 0
    config = settings(
        max_examples=25,
        stateful_step_count=60,
        deadline=None,
        database=None,
        suppress_health_check=list(HealthCheck),
        phases=[Phase.generate] if "--no-shrink" in sys.argv else list(Phase),
    )
    server = postgres_server.start() if "--postgres" in sys.argv else None
    if server is not None:
        PostgresRequestMachine.url = server.url
    while TALLY["compiles"] < goal:
        # every third round starts from a long past, where compiles are windowed
        machine = LongHistory if rounds % 3 == 2 else RequestMachine
        if server is not None:
            machine = PostgresRequestMachine
        try:
            run_state_machine_as_test(machine, settings=config)
        except BaseException:
            if server is not None:
                postgres_server.stop(server)
            raise
        rounds += 1
        print(
            f"round {rounds}: {TALLY['compiles']:,} compiles, {TALLY['sent']:,} sent, "
            f"{TALLY['over_budget']:,} over budget, {TALLY['conflicts']:,} conflicts, "
            f"{TALLY['with_memories']:,} showing memories, "
            f"{TALLY['with_images']:,} with images, {TALLY['healed']:,} heals, "
            f"{TALLY['from_scratch']:,} from-scratch twins ({TALLY['windowed']:,} windowed) "
            f"({time.monotonic() - start:.0f} s)",
            flush=True,
        )
    if server is not None:
        postgres_server.stop(server)
    print(
        f"soak{' on PostgreSQL' if server else ''}: {TALLY['compiles']:,} compiles in "
        f"{time.monotonic() - start:.0f} s: "
        f"{TALLY['sent']:,} requests sent, each recounted within its budget, its stats equal "
        f"to the recount, its tool pairs whole; {TALLY['over_budget']:,} refusals over budget "
        f"(each with actual > budget), {TALLY['conflicts']:,} constraint conflicts; "
        f"{TALLY['with_images']:,} requests with images, each within the image limits; "
        f"{TALLY['accepted']:,} requests accepted, each receipt stored once; "
        f"{TALLY['healed']:,} heals after summariser faults, each ending with every chunk "
        "no hold keeps back remembered (0 stalls); records agreeing with the messages after "
        f"every step; {TALLY['from_scratch']:,} compiles equal to a from-scratch strategy's "
        f"({TALLY['windowed']:,} of them windowed); 0 violations"
    )
    return 0


if __name__ == "__main__":
    counts = [a for a in sys.argv[1:] if a.isdigit()]
    sys.exit(main(int(counts[0]) if counts else 100_000))
