"""Solvers: time, peak memory and fidelity gap to ``exact``, by history size.

Sizes: 1k leaves; 15k leaves (~900 summaries, ~3.9M raw tokens, a Mythos-sized
store); 75k leaves (~3,200 summaries, a Sill-sized store). The wall is 200k
tokens. ``cold`` solves have no previous frontier; ``warm`` solves carry the
kv-stable frontier under a 190k wall; ``shrink`` carries it under a 150k wall
(the carried frontier no longer fits). ``exact`` at 75k leaves runs only with
FOLDING_BENCH_XSLOW set (it does not prove optimality within a minute).

``OneShot`` and ``Validate`` time one-shot solves and problem validation on
:func:`folding.testing.agent_history` problems shaped like a live agent's store (~30-leaf
chunks, merges by 6, leaves of 50-200 tokens, ~500-token summaries, a 32k wall with
the target at 0.85 of it) carrying the frontier the same solver chose with the
last 5 leaves missing, so the hold and trust-region paths run; kv-unified gets
the options a 32k-window host passes (:func:`solvers.window_options`, band top
0.7 as the autobiographical strategy's default slack of 0.3 gives). Run this
module (``cd benchmarks && python -m benchmarks.bench_solvers``) for a table of
medians and peak memory.
"""

from __future__ import annotations

import os
import statistics
import sys
import time
import tracemalloc
from functools import cache
from typing import Any

import solvers
from folding import FoldProblem, fidelity_loss
from folding.testing import agent_history
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


WINDOW = 32_000
BAND_TOP = 0.7  # 1 - the autobiographical strategy's default compression_slack_ratio
ONE_SHOT = ["kv-stable", "kv-unified", "exact"]
AGENT_SIZES = [1_000, 15_000, 75_000]


def one_shot_options(method: str) -> dict[str, Any]:
    """The options a host running ``method`` on a 32k window passes."""
    return solvers.window_options(method, WINDOW, BAND_TOP)


@cache
def agent_problem(n_leaves: int, method: str) -> FoldProblem:
    """An agent history of ``n_leaves`` carrying ``method``'s frontier of it minus 5 leaves."""
    before = agent_history(n_leaves - 5)
    carried = solvers.solve(before, method=method, **one_shot_options(method)).frontier
    return agent_history(n_leaves, previous=carried)


class OneShot:
    """One solve of an agent history with a carried frontier (see the module docstring)."""

    params = [ONE_SHOT, AGENT_SIZES]
    param_names = ["solver", "n_leaves"]
    timeout = 600
    number = 1
    repeat = 5

    def setup(self, method: str, n_leaves: int) -> None:
        if solvers.capabilities(method).searches_slowly and n_leaves > 15_000 and not XSLOW:
            raise NotImplementedError(f"{method} at 75k leaves needs FOLDING_BENCH_XSLOW")
        import_cp_model()
        self.problem = agent_problem(n_leaves, method)
        self.options = one_shot_options(method)

    def time_solve(self, method: str, n_leaves: int) -> None:
        solvers.solve(self.problem, method=method, **self.options)

    def peakmem_solve(self, method: str, n_leaves: int) -> None:
        solvers.solve(self.problem, method=method, **self.options)


class Validate:
    """``FoldProblem.model_validate`` of an agent history's JSON form."""

    params = [AGENT_SIZES]
    param_names = ["n_leaves"]
    number = 1
    repeat = 5

    def setup(self, n_leaves: int) -> None:
        self.data = agent_problem(n_leaves, "kv-stable").model_dump(mode="json")

    def time_model_validate(self, n_leaves: int) -> None:
        FoldProblem.model_validate(self.data)


def _high_water_kib() -> int:
    with open("/proc/self/status") as status:
        for line in status:
            if line.startswith("VmHWM"):
                return int(line.split()[1])
    return 0


def measure(n_leaves: int, method: str, repeat: int = 5) -> dict[str, Any]:
    """Median solve and validation times, traced peak and resident high-water growth."""
    import_cp_model()
    problem = agent_problem(n_leaves, method)
    options = one_shot_options(method)
    data = problem.model_dump(mode="json")
    validate, times = [], []
    for _ in range(repeat):
        start = time.perf_counter()
        FoldProblem.model_validate(data)
        validate.append(time.perf_counter() - start)
    result = None
    for _ in range(repeat):
        start = time.perf_counter()
        result = solvers.solve(problem, method=method, **options)
        times.append(time.perf_counter() - start)
    rss = None
    try:
        with open("/proc/self/clear_refs", "w") as refs:
            refs.write("5")  # reset the high-water mark
        base = _high_water_kib()
        solvers.solve(problem, method=method, **options)
        rss = (_high_water_kib() - base) / 1024
    except OSError:
        pass
    tracemalloc.start()
    solvers.solve(problem, method=method, **options)
    traced = tracemalloc.get_traced_memory()[1] / 2**20
    tracemalloc.stop()
    assert result is not None
    return {
        "n_leaves": n_leaves,
        "solver": method,
        "solve_ms": round(1000 * statistics.median(times), 1),
        "runs_ms": [round(1000 * t) for t in times],
        "validate_ms": round(1000 * statistics.median(validate), 1),
        "traced_peak_mb": round(traced, 1),
        "rss_growth_mb": None if rss is None else round(rss, 1),
        "status": result.status.value,
        "decision": result.decision,
        "stats": {k: v for k, v in result.stats.items() if k != "solve_ms"},
    }


if __name__ == "__main__":
    import json

    methods = sys.argv[1].split(",") if len(sys.argv) > 1 else ["kv-stable", "kv-unified"]
    sizes = [int(x) for x in sys.argv[2].split(",")] if len(sys.argv) > 2 else [15_000, 75_000]
    for size in sizes:
        for name in methods:
            print(json.dumps(measure(size, name)), flush=True)
