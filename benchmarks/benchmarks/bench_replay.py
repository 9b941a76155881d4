"""The reference budget sweep, replayed for every solver.

220 messages of ~900 tokens, chunks closing at 3,000 tokens and 4 messages,
600-token summaries merged 6 at a time. The conversation grows to 220
messages under a 64k wall, then the wall moves to 100k, 180k, 300k and back
to 100k (three calls each), carrying the frontier.
"""

from __future__ import annotations

from typing import Any

import solvers
from foldbench.solver_replay import sweep

SOLVERS = ["oldest-first", "flat-profile", "kv-stable", "kv-unified", "exact"]
PHASES = ["64k", "100k", "180k", "300k", "100k-again"]


class BudgetSweep:
    params = [SOLVERS, PHASES]
    param_names = ["solver", "phase"]
    timeout = 900

    def setup_cache(self) -> dict[str, Any]:
        return {
            m: sweep(method=m, options=dict(solvers.capabilities(m).example_options) or None)
            for m in SOLVERS
        }

    def track_utilisation(self, results: dict[str, Any], method: str, phase: str) -> float:
        return 100.0 * results[method]["phases"][PHASES.index(phase)]["utilisation"]

    track_utilisation.unit = "%"  # type: ignore[attr-defined]

    def track_hit_rate(self, results: dict[str, Any], method: str, phase: str) -> float:
        return 100.0 * results[method]["summary"]["hit_rate"]

    track_hit_rate.unit = "%"  # type: ignore[attr-defined]

    def track_billed(self, results: dict[str, Any], method: str, phase: str) -> float:
        return results[method]["summary"]["billed"]

    track_billed.unit = "base-price tokens"  # type: ignore[attr-defined]
