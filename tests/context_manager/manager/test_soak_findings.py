"""Every case a soak found, replayed step by step with the machine's invariants.

``tests/soak_findings/`` keeps each failing case a long soak (``tests/soak.py``)
printed, as hypothesis printed it; once its defect is fixed the case stays here and
must replay without a failure, so the defect cannot come back unseen. The ids a case
draws are the store's sequence numbers: when the store comes to write a record more for
the same operations (the request's frame, say), a case's drawn ids are translated to the
ones at the same places among what was drawn from, so it runs the same operations.

* ``window-over-budget-while-history-fits``: a windowed kv-unified compile whose
  window could not fit the budget (a block held a memory longer than the memories
  under it) capped a tool result, although the whole history fitted uncapped; the
  next compile, over the blocks of the capped answer, fitted without the cap and
  sent other bytes. A window over budget now solves the whole history before it
  caps or refuses.
* ``drained-runs-parted-by-a-raw-pin``: a raw pin keeps messages out of every chunk,
  so the memories on either side can never merge; the drain-then-fit rule now checks
  each run of neighbouring memories on its own.
* ``drained-floor-under-conflicting-pins``: a raw pin and a level pin on one message
  leave no floor to meet; the drain-then-fit rule now stops at the conflict (which a
  compile reports as a ``ConstraintConflictError``).
* ``refold-cycle-after-removals``: on a long past with memories removed, a memory left
  alone was refolded for, the merges that followed left it alone again, and the refold
  came back: a catch-up ticked 10,000 times without end. A memory is now refolded for
  once (recorded with the unfold), and the machine bounds the ticks of a catch-up.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.support.paths import TESTS
from tests.support.replay import replay

FINDINGS = sorted((TESTS / "soak_findings").glob("*.txt"))


@pytest.mark.parametrize("case", FINDINGS, ids=[p.stem for p in FINDINGS])
def test_a_soak_finding_replays_without_failure(case: Path) -> None:
    steps = replay(case.read_text())
    assert steps == sum(
        1
        for line in case.read_text().splitlines()
        if line.startswith("state.") and not line.startswith("state.teardown")
    )
