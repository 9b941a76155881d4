"""Solvers: time, peak memory and fidelity gap to ``exact``, by history size.

Sizes: 1k leaves; 15k leaves (~900 summaries, ~3.9M raw tokens, a Mythos-sized
store); 75k leaves (~3,200 summaries, a Sill-sized store). The wall is 200k
tokens. ``cold`` solves have no previous frontier; ``warm`` solves carry the
kv-stable frontier under a 190k wall; ``shrink`` carries it under a 150k wall
(the carried frontier no longer fits). ``exact`` at 75k leaves runs only with
FOLDING_BENCH_XSLOW set (it does not prove optimality within a minute).
"""

from __future__ import annotations

import os

import solvers
from folding import FoldProblem, fidelity_loss
from solvers._cpsat import import_cp_model

from .common import store, warm

SOLVERS = ["oldest-first", "flat-profile", "kv-stable", "kv-unified", "exact"]
XSLOW = bool(os.environ.get("FOLDING_BENCH_XSLOW"))


def _solve(problem: FoldProblem, method: str, time_limit: float | None = None):  # type: ignore[no-untyped-def]
    return solvers.solve(
        problem,
        method=method,
        time_limit=time_limit,
        **solvers.capabilities(method).example_options,
    )


class Solve:
    params = [SOLVERS, [1_000, 15_000, 75_000]]
    param_names = ["solver", "n_leaves"]
    timeout = 600
    number = 1
    repeat = 3

    def setup(self, method: str, n_leaves: int) -> None:
        if solvers.capabilities(method).searches_slowly and n_leaves > 15_000 and not XSLOW:
            raise NotImplementedError(f"{method} at 75k leaves needs FOLDING_BENCH_XSLOW")
        self.problem = store(n_leaves)
        import_cp_model()  # a one-off import per process, not part of a solve
        carried = solvers.solve(self.problem, method="kv-stable").frontier
        self.warm = warm(self.problem, carried, 190_000)
        self.shrink = warm(self.problem, carried, 150_000)

    def time_cold(self, method: str, n_leaves: int) -> None:
        _solve(self.problem, method)

    def time_warm(self, method: str, n_leaves: int) -> None:
        _solve(self.warm, method)

    def time_shrink(self, method: str, n_leaves: int) -> None:
        _solve(self.shrink, method)

    def peakmem_cold(self, method: str, n_leaves: int) -> None:
        _solve(self.problem, method)


class FidelityGap:
    """Fidelity loss above the exact optimum at the same token count, in percent."""

    params = [[m for m in SOLVERS if not solvers.capabilities(m).exact], [1_000, 15_000, 75_000]]
    param_names = ["solver", "n_leaves"]
    timeout = 900
    unit = "%"

    def setup(self, method: str, n_leaves: int) -> None:
        self.problem = store(n_leaves)

    def track_gap_to_exact(self, method: str, n_leaves: int) -> float:
        result = _solve(self.problem, method)
        tokens = result.tokens
        data = self.problem.model_dump(mode="json")
        data["budget"] = {"total": tokens, "target": tokens}
        same = FoldProblem.model_validate(data)
        best = _solve(same, "exact", time_limit=30.0)
        mine = fidelity_loss(self.problem, result.frontier)
        reference = fidelity_loss(same, best.frontier)
        return 100.0 * (mine - reference) / max(reference, 1e-9)
